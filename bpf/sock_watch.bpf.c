/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The socket watch: which TCP sockets the gangs own, and what each still
 * has for the network, without walking the kernel's socket hash.
 *
 * A strict switch waits until the outgoing gangs' sockets hold nothing
 * sent-unacknowledged or written-unsent (the drain, src/drain.rs). Asked
 * through sock_diag, every check is a dump that walks the whole
 * established hash once per address family, whatever the gang owns: 8192
 * buckets in a 1 GB VM (2-3 ms per check under TCG), millions on a large
 * node. Here the kernel keeps the set instead:
 *
 *  - tp_btf/inet_sock_set_state: a TCP socket that reaches SYN_SENT,
 *    SYN_RECV or ESTABLISHED and whose cgroup is below the gang root gets
 *    an entry in the socket-local storage `watched` (it goes when the
 *    socket is freed: no bookkeeping for closes);
 *  - iter/tcp `watch_seed`, run once when the watch loads, gives the
 *    sockets that existed before (jobs adopted by a restarted daemon) the
 *    same entry; the tracepoint is attached first, so a socket is seen by
 *    one or the other;
 *  - iter/bpf_sk_storage_map `watch_report` walks only the entries of
 *    `watched` and writes one struct sock_watch_record per socket: its
 *    cgroup at that moment (sk_cgrp_data, as sock_diag's
 *    INET_DIAG_CGROUP_ID) and the tcp_diag fields. A read of the iterator
 *    is one system call; the daemon filters by cgroup.
 *
 * The record's fields are read without the socket's lock (sock_diag takes
 * it): a value may be a moment old, which a drain that polls until every
 * socket is quiet tolerates. Not taking the lock is also why a parked task
 * holding one cannot stall the check.
 *
 * Known faults: a socket whose cgroup is moved below the gang root after
 * it was established (cgroup_sk_clone at accept keeps the listener's) is
 * not watched; only TCP.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "intf.h"

char _license[] SEC("license") = "GPL";

#ifndef container_of
#define container_of(ptr, type, member) \
	((type *)((void *)(ptr) - __builtin_offsetof(type, member)))
#endif

#define TCP_ESTABLISHED_	1
#define TCP_SYN_SENT_		2
#define TCP_SYN_RECV_		3
#define IPPROTO_TCP_		6

/* The gang root's cgroup id and level, set before load. */
const volatile u64 gang_root_id;
const volatile u32 gang_root_level;

struct watched_sock {
	u64 since_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct watched_sock);
} watched SEC(".maps");

static __always_inline u64 cgroup_of(const struct sock *sk)
{
	struct cgroup *cg = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);

	return cg ? BPF_CORE_READ(cg, kn, id) : 0;
}

/* Is the socket's cgroup the gang root or below it? */
static __always_inline bool below_gang_root(const struct sock *sk)
{
	struct cgroup *cg = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);
	struct cgroup *anc = NULL;
	u32 level = gang_root_level;

	if (!cg || BPF_CORE_READ(cg, level) < (int)level)
		return false;
	if (level >= 64)
		return false;
	if (bpf_core_read(&anc, sizeof(anc), &cg->ancestors[level]) || !anc)
		return false;
	return BPF_CORE_READ(anc, kn, id) == gang_root_id;
}

static __always_inline void watch(struct sock *sk)
{
	struct watched_sock *w;

	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP_ || !below_gang_root(sk))
		return;
	w = bpf_sk_storage_get(&watched, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (w && !w->since_ns)
		w->since_ns = bpf_ktime_get_ns();
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(watch_state, const struct sock *sk, const int oldstate, const int newstate)
{
	if (newstate == TCP_ESTABLISHED_ || newstate == TCP_SYN_SENT_ ||
	    newstate == TCP_SYN_RECV_)
		watch((struct sock *)sk);
	return 0;
}

SEC("iter/tcp")
int watch_seed(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	int state;

	if (!skc)
		return 0;
	state = skc->skc_state;
	if (state == 10 /* LISTEN */ || state == 6 /* TIME_WAIT */ ||
	    state == 12 /* NEW_SYN_RECV */)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (tp)
		watch((struct sock *)tp);
	return 0;
}

SEC("iter/bpf_sk_storage_map")
int watch_report(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock *sk = ctx->sk;
	struct sock_watch_record r = {};
	struct tcp_sock *tp;
	struct socket *so;

	if (!sk || !ctx->value)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	r.cgroup_id = cgroup_of(sk);
	r.state = BPF_CORE_READ(sk, __sk_common.skc_state);
	r.unacked_segs = BPF_CORE_READ(tp, packets_out);
	r.notsent_bytes = BPF_CORE_READ(tp, write_seq) - BPF_CORE_READ(tp, snd_nxt);
	r.send_queue_bytes = BPF_CORE_READ(tp, write_seq) - BPF_CORE_READ(tp, snd_una);
	so = BPF_CORE_READ(sk, sk_socket);
	if (so) {
		struct socket_alloc *sa = container_of(so, struct socket_alloc, socket);

		r.inode = BPF_CORE_READ(sa, vfs_inode.i_ino);
	}
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
