/* SPDX-License-Identifier: GPL-2.0 */
/*
 * intf.h - the one home of every type and constant shared by the BPF
 * programs (the scheduler scx_gang.bpf.c, the PMIx guard pmix_guard.bpf.c)
 * and the Rust daemon (src/). build.rs turns this
 * file into Rust with bindgen, so keep it plain C: enums for constants,
 * fixed-size integer fields, no pointers.
 */
#ifndef __SCX_GANG_INTF_H
#define __SCX_GANG_INTF_H

#ifndef __VMLINUX_H__
typedef unsigned char u8;
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
typedef long long s64;
#endif

enum gang_limits {
	/* CPUs a node may have; the slot table has one column per CPU. */
	GANG_MAX_CPUS = 256,
	/* Slots in this node's columns of the Ousterhout matrix. */
	GANG_MAX_SLOTS = 16,
	/* Gangs (cgroups below the gang root) known at once. */
	GANG_MAX_GANGS = 64,
	/* u64 words of a CPU bitmap. */
	GANG_CPU_WORDS = GANG_MAX_CPUS / 64,
	/*
	 * Longest rotation through all slots: slots are shortened to fit. A
	 * gang then waits at most this long, well inside the kernel's RCU stall
	 * timeout (21 s: a task preempted in an RCU read-side section must run
	 * by then) and the sched_ext watchdog (30 s).
	 */
	GANG_ROTATION_MAX_MS = 15000,
};

/*
 * Special values of a "gang" field: a slot-table cell with no owner, and the
 * two things a CPU can do besides running a gang.
 */
enum gang_ids {
	GANG_NONE = -1,		/* slot cell: nobody owns this CPU in this slot */
	GANG_OTHER = -2,	/* a task of no gang (kthreads, daemons, shells) */
	GANG_IDLE = -3,		/* the CPU is idle */
};

/*
 * Dispatch queues: one per gang (GANG_DSQ_BASE + gang id), one per gang for
 * tasks that yielded their slot (PARK_DSQ_BASE + gang id), and one shared by
 * every task of no gang.
 */
enum gang_dsqs {
	OTHER_DSQ = 1,
	GANG_DSQ_BASE = 1024,
	/* Tasks that yielded their slot, one queue per gang. */
	PARK_DSQ_BASE = 2048,
};

/* What made a slot switch happen. */
enum gang_switch_cause {
	SWITCH_TIMER = 1,	/* the BPF slot timer (standalone, autonomous) */
	SWITCH_COMMAND = 2,	/* the daemon (on behalf of the coordinator) */
	SWITCH_YIELD = 3,	/* the slot timer, early: every rank yielded */
	SWITCH_TIMED = 4,	/* at an instant agreed ahead (a plan's boundary) */
};

/* Kinds of trace events sent through the ring buffer. */
enum gang_event_kind {
	/* The node switched to slot `slot`, generation `gen`. */
	EV_SWITCH = 1,
	/* After a switch, one per CPU: `gang` owns `cpu` in the new slot. */
	EV_OWNER = 2,
	/* `cpu` started running `gang` (a gang id, GANG_OTHER or GANG_IDLE). */
	EV_RUN = 3,
	/*
	 * `cpu`, busy running `gang`, got its tick `cause` µs after the
	 * scheduler last saw it (more than a tick period, stall_ns()): it could run nothing of
	 * ours that long. Under emulation, the vCPU's host thread was not
	 * running; the trace tells overlap inside a stall apart.
	 */
	EV_STALL = 4,
};

/* EV_RUN flags. */
enum gang_run_flags {
	/* A gang task run by the `fill` policy on a CPU it does not own. */
	RUN_FILL = 1,
	/*
	 * A gang task that must finish where it is (inside an RCU read-side
	 * section, or inside a system call while its gang is parked), whoever
	 * owns the CPU: a deliberate escape, not a late preemption.
	 */
	RUN_FINISH = 2,
};

struct gang_event {
	u64 ts;		/* CLOCK_MONOTONIC ns (bpf_ktime_get_ns) */
	u64 generation;	/* switch generation in force */
	u32 kind;	/* enum gang_event_kind */
	s32 cpu;	/* EV_OWNER, EV_RUN: the CPU */
	s32 gang;	/* EV_OWNER: owner; EV_RUN: what now runs */
	u32 slot;	/* slot in force */
	u32 cause;	/* EV_SWITCH: enum gang_switch_cause; EV_STALL: µs */
	u32 flags;	/* EV_RUN: enum gang_run_flags */
};

/* Per-CPU counters, indexes of struct gang_cpu_stats.counters. */
enum gang_stat {
	STAT_SWITCHES,		/* slot switches (counted on the switching CPU) */
	STAT_KICK_PREEMPT,	/* CPUs preempted by a switch */
	STAT_KICK_IDLE,		/* idle CPUs woken by a switch */
	STAT_GANG_DISPATCH,	/* slot owner's task moved to a CPU it owns */
	STAT_OTHER_DISPATCH,	/* task of no gang dispatched */
	STAT_FILL_DISPATCH,	/* another gang's task filled an idle CPU */
	STAT_MIN_SHARE,		/* gang task preempted to give others their share */
	STAT_STALE_RUN,		/* a task started after its slot ended: preempted */
	STAT_PRIORITY_DIRECT,	/* per-CPU kthread or scx_gang itself run at once */
	STAT_EVENTS_LOST,	/* trace events dropped: ring buffer full */
	STAT_WAKE_KICK,		/* owner CPU kicked when its gang's task woke */
	STAT_YIELD_PARK,	/* a yielding gang task parked until its next slot */
	STAT_YIELD_IGNORED,	/* a sched_yield() outside the lead time: plain yield */
	STAT_WAKE_DIRECT,	/* a woken gang task put straight on an idle CPU it owns */
	STAT_PREEMPT_DAEMON,	/* scx_gang's own thread woke where a gang task ran: preempted it */
	STAT_PREEMPT_KTHREAD,	/* a per-CPU kthread woke where a gang task ran: preempted it */
	STAT_RCU_READER,	/* a gang task preempted inside an RCU read-side section: run at once */
	STAT_PARK_KICK,		/* CPUs preempted because their gang was parked (park = bpf) */
	STAT_PARK_SYSCALL,	/* a parked gang's task let run on to its system call's end */
	STAT_PARK_SYSCALL_EXIT,	/* ...and preempted there, at its return to user space */
	NR_GANG_STATS,
};

struct gang_cpu_stats {
	u64 counters[NR_GANG_STATS];
	u64 gang_run_ns[GANG_MAX_GANGS];	/* run time of each gang's tasks */
	u64 other_run_ns;			/* run time of tasks of no gang */
};

/*
 * The slot clock: what a gang's ranks may know about their slot, written by
 * the scheduler at every switch and read by the runtime library (runtime/)
 * through a read-only mapping of its gang's page (a map of its own, in the
 * `gang_clocks` array of maps), with no system call.
 * A seqcount guards it: `seq` is odd while the scheduler writes; a reader
 * reads seq, the fields, then seq again, and retries on an odd or changed
 * value. Bit g of a gang mask stands for gang id g (GANG_MAX_GANGS <= 64).
 * The library mirrors this layout (runtime/src/clock.rs); a test checks that
 * both agree.
 */
struct gang_slot_clock {
	u64 seq;
	u64 generation;		/* switch generation in force */
	u64 slot_start_ns;	/* CLOCK_MONOTONIC time the slot began */
	u64 slot_end_ns;	/* when the next switch is due; 0: none is */
	u64 yield_lead_ns;	/* yield_point() yields this close to the end */
	u64 running_gangs;	/* gangs owning CPUs in the slot in force */
	u64 next_gangs;		/* gangs owning CPUs in the slot after it */
	u32 slot;		/* slot in force */
	u32 nr_slots;		/* slots in the table */
};

/* Per-gang ends of slot (array gang_slot_ends, indexed by gang id). */
struct gang_slot_ends {
	u64 voluntary;	/* every rank here had yielded when the slot ended */
	u64 forced;	/* the slot ended with a rank not yielded: preempted */
	u64 yields;	/* rank yields honoured (task parked until next slot) */
	u64 early;	/* switches brought forward because all had yielded */
};

/* Notices to the daemon (ring buffer `notices`, woken at once). */
enum gang_notice_kind {
	/* Every rank of `gang` on this node yielded in generation `generation`. */
	NOTICE_ALL_YIELDED = 1,
};

struct gang_notice {
	u64 generation;
	u32 kind;	/* enum gang_notice_kind */
	s32 gang;
};

/* Argument of the `switch_slot` syscall program. */
struct switch_args {
	u32 slot;
	u32 cause;
	u64 generation;
	u64 slot_len_ns;	/* the slot's length, for the clock; 0: unknown */
	/*
	 * CLOCK_MONOTONIC instant to switch at (an absolute BPF timer,
	 * BPF_F_TIMER_ABS); 0, or an instant already past: at once.
	 */
	u64 at_ns;
};

/*
 * Argument of the `park_gangs` syscall program (park = bpf): the gangs of
 * `mask` stop running while `generation` is in force, at most until
 * `until_ns` (CLOCK_MONOTONIC). A mask of 0 parks nothing.
 */
struct park_args {
	u64 mask;
	u64 generation;
	u64 until_ns;
};

/* Argument of the `rehome_gang` syscall program. */
struct rehome_args {
	s32 gang;
};

/*
 * The PMIx guard (pmix_guard.bpf.c, src/pmix_guard.rs): what a guarded TCP
 * port (the key of map `guarded`, a u16 in host order) admits. A connect
 * to it on a local address is allowed only from the cgroup cgroup_id and
 * the cgroups below it; `level` is that cgroup's depth below the cgroup-v2
 * root (the root is level 0).
 */
struct pmix_guard_entry {
	u64 cgroup_id;
	u32 level;
	u32 pad;
};

enum pmix_guard_limits {
	/* Ports guarded at once: one per job with Open MPI ranks here. */
	PMIX_GUARD_MAX_PORTS = 4096,
};

/*
 * The socket watch (sock_watch.bpf.c, src/sock_watch.rs): one TCP socket of
 * a gang as the iterator `watch_report` writes it, the fields the drain
 * check reads (drain.rs), computed as tcp_diag computes its own.
 */
struct sock_watch_record {
	u64 cgroup_id;		/* the cgroup of the task that created it */
	u64 inode;		/* 0: no file any more (closed, or orphaned) */
	u32 unacked_segs;	/* packets_out */
	u32 notsent_bytes;	/* write_seq - snd_nxt */
	u32 send_queue_bytes;	/* write_seq - snd_una */
	u32 state;		/* TCP_* */
};

#endif /* __SCX_GANG_INTF_H */
