/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmix_guard - who may connect to a job's PMIx server.
 *
 * Each Open MPI job has a PMIx server on this node (a child of the node
 * agent, running as the job's user) listening on TCP 127.0.0.1:<port>.
 * libpmix over TCP believes the uid/gid a client claims, so without a
 * guard any local user could connect as a rank of another user's job:
 * abort it, read or poison its bootstrap data, or wedge the server.
 *
 * The guard is a pair of cgroup sock_addr programs, connect4 and connect6,
 * attached (as BPF links, so with BPF_F_ALLOW_MULTI semantics: nobody
 * else's program is replaced) to the cgroup-v2 root, so they see every
 * connect() on the node, whatever the caller's cgroup. The map `guarded`
 * holds the guarded ports (host order) and, for each, the job's cgroup
 * (its id and its level below the root). A connect to a guarded port on a
 * local address is refused (the program returns 0: connect() fails with
 * EPERM) unless the calling task's cgroup is the job's cgroup or below it:
 * bpf_get_current_ancestor_cgroup_id(level) == cgroup_id. Ranks always run
 * in their job's cgroup (<gang_root>/job<ID>, src/agent/cgroup.rs).
 *
 * Local addresses: 127.0.0.0/8 and 0.0.0.0 (which Linux connects to the
 * host itself); for IPv6 ::1 and :: (connected to ::1), and the v4-mapped
 * ::ffff:127.x.y.z and ::ffff:0.0.0.0, through which a dual-stack IPv6
 * socket reaches an IPv4 listener (tcp_v6_connect hands those to
 * tcp_v4_connect without running connect4, so connect6 must check them).
 * Everything else is allowed (return 1). Refusals are counted per CPU
 * (map `refusals`) for the agent's log.
 *
 * Known faults:
 * - The caller is the *current task* at connect() time, not the socket's
 *   creator: a socket connected by a rank of the job and passed to another
 *   process works (that is the job giving its own access away).
 * - Root, or anyone who may write the job cgroup's cgroup.procs, can move
 *   a process into the job's cgroup, or detach the programs.
 * - Addresses of the host's other interfaces are not checked: a listener
 *   bound to 127.0.0.1 is not reachable through them anyway (Linux
 *   delivers only packets addressed to its bound address to it).
 * - The links live in the agent's process: if it dies, the guard goes
 *   with it (fail open), as do the servers it spawned.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "intf.h"

char _license[] SEC("license") = "GPL";

#define ALLOW	1
#define REFUSE	0

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PMIX_GUARD_MAX_PORTS);
	__type(key, u16);
	__type(value, struct pmix_guard_entry);
} guarded SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} refusals SEC(".maps");

/* An IPv4 address (network order) of this host's loopback or "any". */
static __always_inline bool local_ip4(u32 ip_be)
{
	u32 ip = bpf_ntohl(ip_be);

	return ip == 0 || (ip >> 24) == 127;
}

/* The verdict on a connect to a local address and `port_be` (network order). */
static __always_inline int check(u32 port_be)
{
	u16 port = bpf_ntohs((u16)port_be);
	struct pmix_guard_entry *g;
	u32 zero = 0;
	u64 *n;

	g = bpf_map_lookup_elem(&guarded, &port);
	if (!g)
		return ALLOW;
	if (bpf_get_current_ancestor_cgroup_id(g->level) == g->cgroup_id)
		return ALLOW;
	n = bpf_map_lookup_elem(&refusals, &zero);
	if (n)
		(*n)++;
	return REFUSE;
}

SEC("cgroup/connect4")
int pmix_guard_connect4(struct bpf_sock_addr *ctx)
{
	if (!local_ip4(ctx->user_ip4))
		return ALLOW;
	return check(ctx->user_port);
}

SEC("cgroup/connect6")
int pmix_guard_connect6(struct bpf_sock_addr *ctx)
{
	u32 a0 = ctx->user_ip6[0], a1 = ctx->user_ip6[1];
	u32 a2 = ctx->user_ip6[2], a3 = ctx->user_ip6[3];

	if (a0 || a1)
		return ALLOW;
	/* :: and ::1 */
	if (!a2 && (!a3 || a3 == bpf_htonl(1)))
		return check(ctx->user_port);
	/* ::ffff:a.b.c.d */
	if (a2 == bpf_htonl(0xffff) && local_ip4(a3))
		return check(ctx->user_port);
	return ALLOW;
}
