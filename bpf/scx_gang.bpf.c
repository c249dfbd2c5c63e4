/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_gang - the per-node half of a gang scheduler for parallel jobs.
 *
 * A parallel job runs one process per rank on several nodes and its ranks
 * talk to each other all the time: when one rank is descheduled, every rank
 * waiting for its messages waits too. Gang scheduling runs all ranks of a job
 * at the same moment, in time slots, and switches every CPU of the cluster
 * from one job to the next at once.
 *
 * Gangs. A gang is a cgroup-v2 directory right below the gang root (the
 * daemon creates the root, by default /sys/fs/cgroup/scx_gang). Every task
 * whose cgroup is that directory or any cgroup below it belongs to the gang.
 * The daemon tells us which cgroup id is which gang (map gang_cgroups); a
 * task finds its gang through the ancestor of its cgroup at the gang level.
 *
 * Slots. slot_table[slot][cpu] names the gang that owns each CPU in each
 * slot: this node's columns of the Ousterhout matrix. Two gangs may share a
 * slot on disjoint CPUs. In slot s, CPU c runs the tasks of its owner and
 * nothing else of any gang (unless `fill` lets an idle CPU take another
 * gang's task, which the owner then preempts as soon as it has work).
 *
 * Switch. A switch (by the slot timer, every slot_ns, or by a command of
 * the daemon through the switch_slot syscall program) sets cur_slot and kicks
 * every CPU whose running task is no longer allowed: the kick preempts it and
 * ops.dispatch() then picks the new owner's tasks. No signals, no user space
 * on the path. A task that had already been moved to a CPU's local queue
 * before the switch is caught in ops.running() and preempted at once, so the
 * old slot cannot sneak back in.
 *
 * Tasks of no gang (kthreads, daemons, shells, scx_gang itself) share one
 * queue. They run on CPUs nobody owns (housekeeping CPUs), on CPUs whose owner
 * has nothing runnable, and, while they wait, each CPU gives them at least
 * min_other_share_pct of its time: ops.tick() accrues that credit and
 * preempts the gang task when it is due. Per-CPU kthreads and the scx_gang
 * daemon (the node's control plane: switch commands, knobs) run at once on
 * the CPU they wake on; both only ever run briefly. Nothing starves, so the sched_ext watchdog never fires; gangs
 * with no slot run as tasks of no gang for the same reason, and one rotation
 * never lasts longer than GANG_ROTATION_MAX_MS.
 *
 * Voluntary yield. A rank that reaches a safe point near the end of its
 * slot (the runtime library's yield_point(), within yield_lead of the
 * deadline in the slot clock) calls sched_yield(). ops.yield() then parks the
 * task in its gang's park queue: it runs again only in a later generation,
 * when its gang owns the CPU again. When every rank (process) of a gang here
 * has yielded, the gang is done with the slot: under the slot timer the
 * switch is brought forward once every gang of the slot is done; under
 * commands, a notice tells the daemon, which tells the coordinator. At each
 * switch every gang leaving its CPUs counts a voluntary or a forced end of
 * slot. A sched_yield() outside the lead time is a plain yield: MPI progress
 * loops call it all the time.
 *
 * Park (knob park = bpf, issue 12). Before a strict switch the daemon parks
 * the outgoing gangs so their sockets drain (the network preemption): the
 * park_gangs program names them, and while the generation it named is in
 * force (and at most until its deadline) they own no CPU, so their CPUs run
 * tasks of no gang or idle, and the incoming gang does not start either
 * (no fill). The switch ends the park by itself, with no further command.
 * A task stopped anywhere in the kernel could hold its socket's lock, and
 * then nothing of that socket drains (ACKs wait in the backlog), and even
 * the drain check's read of the socket waits for the lock: so a task inside
 * a system call (tp_btf sys_enter/sys_exit keep that per task) runs on, in
 * short slices, to the end of the call, and is preempted there, at its
 * return to user space, where the cgroup freezer would park it too. That
 * holds for a task preempted by the park and for one that waited in its
 * gang's queue inside a call when the park began (dispatch_finishing).
 * Tasks preempted in user space are parked at once. (park = freezer: the
 * daemon uses the cgroup freezer instead and nothing here is involved.)
 *
 * Slot clock. Each gang id has a page of its own (gang_clocks, an array of
 * maps the daemon fills), which its ranks map read only (the daemon hands
 * out the gang's fd): generation, deadline, which gangs run now and next,
 * under a seqcount.
 *
 * Trace. While trace_on is set, every switch, every slot owner after it and
 * every change of what a CPU runs go to the `events` ring buffer, for the
 * daemon's `trace` command, and so does every stall: a busy CPU whose tick
 * (or whose task's stop) comes more than a tick period late (stall_ns)
 * ran nothing of ours that long, so a late preemption inside it is not
 * the scheduler's. Under emulation that is the vCPU not running; on
 * hardware, interrupts off or an SMI. Counters are per-CPU (enum gang_stat).
 */
#include <scx/common.bpf.h>
#include "intf.h"

char _license[] SEC("license") = "GPL";

#define NSEC_PER_MSEC		1000000ULL
/* Time-sharing slice among the tasks of one gang on one CPU. */
#define GANG_SLICE_NS		(5 * NSEC_PER_MSEC)
/* Slice of a task of no gang; short, since an owner may be waiting. */
#define OTHER_SLICE_NS		(2 * NSEC_PER_MSEC)
/*
 * A gang task that must finish where it is (must_finish: inside an RCU
 * read-side section, or inside a system call while its gang is parked)
 * runs this long at a time.
 */
#define FINISH_SLICE_NS		(200 * 1000ULL)
/* Upper bound of the credit of time owed to tasks of no gang per CPU. */
#define OTHER_CREDIT_MAX_NS	(4 * OTHER_SLICE_NS)
#define ROTATION_MAX_NS		((u64)GANG_ROTATION_MAX_MS * NSEC_PER_MSEC)
/*
 * Stalls (EV_STALL): a busy CPU is seen by the scheduler at every tick, so a
 * gap of more than a tick period (plus a quarter, at least 1 ms, for timer
 * jitter) since it last saw it means it could run nothing: interrupts off,
 * or under emulation the vCPU not running (a kick sent to it lands only
 * when it runs again). The scheduler cannot make a tick late, so a late
 * preemption it causes itself never hides behind a stall. The tick period
 * is the kernel's CONFIG_HZ (libbpf reads /boot/config-*; 250 if absent).
 */
extern unsigned int CONFIG_HZ __kconfig __weak;

static u64 stall_ns(void)
{
	u64 hz = CONFIG_HZ ? CONFIG_HZ : 250;
	u64 tick = 1000 * NSEC_PER_MSEC / hz, slack = tick / 4;

	return tick + (slack > NSEC_PER_MSEC ? slack : NSEC_PER_MSEC);
}

/* stall_ns(), worked out once in gang_init (ops.stopping is a hot path). */
u64 stall_threshold_ns;

UEI_DEFINE(uei);

/* Set before load by the daemon. */
const volatile u32 nr_cpus = 1;
const volatile u32 gang_root_level = 1;	/* cgroup level of the gang root */
const volatile u32 daemon_tgid;		/* scx_gang itself: the node's control plane */

/*
 * Knobs: written by the daemon before attach and at any time after, read at
 * the next use. All in .bss, so the daemon sets every one of them.
 */
volatile u64 slot_ns;
volatile u32 fill;
volatile u32 min_other_share_pct;
volatile u32 slot_timer;	/* 1: the BPF timer switches slots (standalone, autonomous) */
volatile u32 trace_on;
volatile u64 housekeeping[GANG_CPU_WORDS];

/* The slot table, written by the daemon. */
volatile u32 nr_slots;
volatile s32 slot_table[GANG_MAX_SLOTS][GANG_MAX_CPUS];
/* Bit s set: the gang owns CPUs in slot s. Zero: the gang has no slot. */
volatile u32 gang_slot_mask[GANG_MAX_GANGS];
/* Bit g set: gang_slot_mask[g] is not zero (written with it). */
volatile u64 gangs_with_slot;
/* The CPUs each gang owns in some slot. */
volatile u64 gang_cpus[GANG_MAX_GANGS][GANG_CPU_WORDS];
/*
 * Bumped by the daemon after every change of gang_cgroups, gang_slot_mask
 * or gang_cpus: a task's gang, cached with the epoch it was found in, is
 * looked up again only when the epoch or the task's cgroup changed.
 */
volatile u64 gangs_epoch;

/* The slot in force. */
volatile u32 cur_slot;
volatile u64 cur_gen;
volatile u64 slot_started_ns;

/* Parked gangs (park = bpf): park_mask while park_gen is in force, until park_until_ns. */
volatile u64 park_mask;
volatile u64 park_gen;
volatile u64 park_until_ns;

/*
 * Gangs whose yield queue (park_dsq) may hold a task: set after every
 * insert there, cleared by dispatch_parked() when it finds the queue empty
 * (and set again if a task came meanwhile), so a dispatch of a gang that
 * never yields asks no queue length (a DSQ look-up) of its park queue. A
 * bit set over an empty queue costs one look-up; a bit clear over a task
 * never happens: the insert comes before the set, the clear before the
 * look-up.
 */
u64 parked_gangs;

/* Ranks (processes) of each gang on this node, counted by the daemon. */
volatile u32 gang_ranks[GANG_MAX_GANGS];
/* Voluntary and forced ends of slot per gang, read by the daemon. */
struct gang_slot_ends gang_ends[GANG_MAX_GANGS];
/*
 * Ranks of each gang that yielded, as (generation << 16 | count) in one
 * word: two ranks yielding at once on two CPUs must not both start the
 * count of a new generation (one would reset the other's).
 */
u64 gang_yield_word[GANG_MAX_GANGS];
#define YIELD_COUNT_BITS	16
/* The last generation in which every rank of the gang yielded. */
u64 gang_done_gen[GANG_MAX_GANGS];
/* The timer fires early for generation early_gen: all ranks yielded. */
u64 early_gen;

/*
 * The pages ranks map read-only: one per gang id, each a map of its own
 * (an inner map of gang_clocks, made and handed out by the daemon), so a
 * rank sees only its own gang's clock. A BPF map can only be mapped
 * through a writable fd, so a rank that kept the fd could write its page:
 * that misleads its own gang's ranks and nobody else's, and the scheduler
 * never reads a page back, it decides on the copies below.
 */
struct clock_page {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(u32));
	__uint(value_size, sizeof(struct gang_slot_clock));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, GANG_MAX_GANGS);
	__type(key, u32);
	__array(values, struct clock_page);
} gang_clocks SEC(".maps");

u64 clock_end_ns;		/* the pages' slot_end_ns */
u64 clock_running;		/* the pages' running_gangs */
u64 clock_next;			/* the pages' next_gangs */
volatile u64 yield_lead_ns;	/* knob; copied into the page at each switch */

struct cpu_ctx {
	s32 running;		/* gang id, GANG_OTHER or GANG_IDLE */
	u32 run_flags;		/* enum gang_run_flags of what runs */
	u64 acct_ts;		/* time accounted up to */
	u64 other_credit;	/* ns owed to waiting tasks of no gang */
	bool serve_other;	/* next dispatch serves a task of no gang */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GANG_MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_ctx);
} cpu_ctxs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct gang_cpu_stats);
} cpu_stats SEC(".maps");

/* cgroup id of a gang directory -> gang id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GANG_MAX_GANGS);
	__type(key, u64);
	__type(value, s32);
} gang_cgroups SEC(".maps");

struct task_ctx {
	s32 gang;		/* gang id or GANG_OTHER, as of the last enqueue */
	u64 park_gen;		/* yielded its slot in this generation */
	bool parked;		/* park_gen is valid */
	bool in_syscall;	/* between sys_enter and sys_exit */
	/* What `gang` was found from: gangs_epoch + 1 (0: never) and the
	 * cgroup's id (never reused, unlike its address). */
	u64 gang_epoch;
	u64 gang_cgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

/* Few and urgent: the daemon sleeps on this one. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10);
} notices SEC(".maps");

/* tgid -> generation of its last yield: one count per rank, not per thread. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u64);
} rank_yields SEC(".maps");

struct slot_timer_value {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct slot_timer_value);
} slot_timer_map SEC(".maps");

/* The park kicks' timer (park_timerfn). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct slot_timer_value);
} park_timer_map SEC(".maps");

static struct cpu_ctx *lookup_cpu_ctx(s32 cpu)
{
	u32 key = cpu;

	return bpf_map_lookup_elem(&cpu_ctxs, &key);
}

static struct gang_cpu_stats *this_cpu_stats(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_stats, &zero);
}

static void stat_inc(enum gang_stat idx)
{
	struct gang_cpu_stats *s = this_cpu_stats();
	u64 *counter;

	if (!s || idx >= NR_GANG_STATS)
		return;
	counter = MEMBER_VPTR(s->counters, [idx]);
	if (counter)
		(*counter)++;
}

static bool valid_cpu(s32 cpu)
{
	return cpu >= 0 && cpu < GANG_MAX_CPUS && cpu < nr_cpus;
}

/*
 * Array accesses with a variable index go through MEMBER_VPTR, which gives
 * the verifier a bounds check it can see (a plain check is optimised away).
 */
static bool is_housekeeping(s32 cpu)
{
	volatile u64 *word;

	if (!valid_cpu(cpu))
		return false;
	word = MEMBER_VPTR(housekeeping, [cpu / 64]);
	return word && (*word & (1ULL << (cpu % 64)));
}

static s32 slot_owner(u32 slot, s32 cpu)
{
	volatile s32 *cell;

	if (slot >= GANG_MAX_SLOTS || !valid_cpu(cpu))
		return GANG_NONE;
	cell = MEMBER_VPTR(slot_table, [slot][cpu]);
	return cell ? *cell : GANG_NONE;
}

/* Is @gang parked (park = bpf) right now? */
static bool gang_parked(s32 gang)
{
	u64 mask = park_mask;

	if (gang < 0 || gang >= GANG_MAX_GANGS || !(mask & (1ULL << gang)))
		return false;
	return park_gen == cur_gen && bpf_ktime_get_ns() < park_until_ns;
}

/* The gang that owns @cpu right now, or GANG_NONE (also while it is parked). */
static s32 cpu_owner(s32 cpu)
{
	s32 owner;

	if (!nr_slots)
		return GANG_NONE;
	owner = slot_owner(cur_slot, cpu);
	return gang_parked(owner) ? GANG_NONE : owner;
}

/* Is @cpu's owner in the slot in force parked? */
static bool owner_parked(s32 cpu)
{
	return nr_slots && gang_parked(slot_owner(cur_slot, cpu));
}

static bool gang_has_slot(s32 gang)
{
	volatile u32 *mask;

	if (gang < 0 || gang >= GANG_MAX_GANGS)
		return false;
	mask = MEMBER_VPTR(gang_slot_mask, [gang]);
	return mask && *mask;
}

static u64 gang_dsq(s32 gang)
{
	return GANG_DSQ_BASE + gang;
}

static u64 park_dsq(s32 gang)
{
	return PARK_DSQ_BASE + gang;
}

static bool valid_gang(s32 gang)
{
	return gang >= 0 && gang < GANG_MAX_GANGS;
}

/* Bit of @gang in a gang mask of the slot clock. */
static u64 gang_bit(s32 gang)
{
	return valid_gang(gang) ? 1ULL << gang : 0;
}

/* Gangs owning at least one CPU in @slot. */
static u64 slot_gangs(u32 slot)
{
	u64 mask = 0;
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus)
		mask |= gang_bit(slot_owner(slot, cpu));
	return mask;
}

/*
 * May @p run on some CPU that @gang owns in some slot? Not if its affinity
 * (taskset, a pinned MPI rank) leaves out every such CPU: it would wait for
 * a CPU that never comes.
 */
static bool gang_cpus_allowed(struct task_struct *p, s32 gang)
{
	s32 cpu;

	if (p->nr_cpus_allowed >= nr_cpus)
		return true;
	bpf_for(cpu, 0, nr_cpus) {
		volatile u64 *word;

		if (gang < 0 || gang >= GANG_MAX_GANGS)
			return false;
		word = MEMBER_VPTR(gang_cpus, [gang][cpu / 64]);
		if (word && (*word & (1ULL << (cpu % 64))) &&
		    bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			return true;
	}
	return false;
}

/*
 * The gang of @p: the gang directory is the ancestor of the task's cgroup one
 * level below the gang root. A gang with no slot is treated as no gang, so
 * its tasks are never held back waiting for a slot that will not come; so is
 * a task whose affinity excludes every CPU of its gang.
 */
static s32 task_gang(struct task_struct *p)
{
	struct cgroup *cgrp, *anc = NULL;
	u32 level = gang_root_level + 1;
	u64 cgid;
	s32 *gang;

	cgrp = BPF_CORE_READ(p, cgroups, dfl_cgrp);
	if (!cgrp || BPF_CORE_READ(cgrp, level) < (int)level)
		return GANG_OTHER;
	if (bpf_probe_read_kernel(&anc, sizeof(anc), &cgrp->ancestors[level]) || !anc)
		return GANG_OTHER;
	cgid = BPF_CORE_READ(anc, kn, id);
	gang = bpf_map_lookup_elem(&gang_cgroups, &cgid);
	if (!gang || !gang_has_slot(*gang) || !gang_cpus_allowed(p, *gang))
		return GANG_OTHER;
	return *gang;
}

static struct task_ctx *lookup_task_ctx(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

/*
 * The gang of @p, remembered for the hot paths. Looked up again (a cgroup
 * walk and a hash lookup: under emulation a third of an enqueue's cost)
 * only when the task moved to another cgroup, its affinity changed
 * (gang_set_cpumask) or the daemon changed the gangs (gangs_epoch). The
 * epoch is read before the look-up, so a change during it is seen next
 * time.
 *
 * The task's cgroup id, read at every call, is plain loads: @p is trusted
 * and struct_ops callbacks run inside an RCU read-side section, so the
 * verifier lets p->cgroups (RCU) and what it points to be read directly,
 * as fault-tolerant loads. BPF_CORE_READ made each of the four a
 * bpf_probe_read_kernel() call.
 */
static s32 refresh_gang(struct task_struct *p, struct task_ctx *tctx)
{
	u64 epoch = gangs_epoch + 1, cgid = p->cgroups->dfl_cgrp->kn->id;
	s32 gang;

	if (tctx && tctx->gang_epoch == epoch && tctx->gang_cgid == cgid)
		return tctx->gang;
	gang = task_gang(p);
	if (tctx) {
		tctx->gang = gang;
		tctx->gang_epoch = epoch;
		tctx->gang_cgid = cgid;
	}
	return gang;
}

static s32 refresh_task_gang(struct task_struct *p)
{
	return refresh_gang(p, lookup_task_ctx(p));
}

/* The gang remembered at the task's last look-up (cheap, for hot paths). */
static s32 task_class(struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	return tctx ? tctx->gang : GANG_OTHER;
}

static void emit(u32 kind, s32 cpu, s32 gang, u32 flags, u32 cause, u64 ts)
{
	struct gang_event *e;

	if (!trace_on)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(STAT_EVENTS_LOST);
		return;
	}
	e->ts = ts;
	e->generation = cur_gen;
	e->kind = kind;
	e->cpu = cpu;
	e->gang = gang;
	e->slot = cur_slot;
	e->cause = cause;
	e->flags = flags;
	/* The daemon polls; waking it for every event would cost more. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/*
 * Charge the time since the last accounting on this CPU to what ran, and
 * accrue the credit owed to waiting tasks of no gang while a gang runs.
 * @other_waits: whether such tasks wait (1 or 0) when the caller has just
 * looked, -1 to look here (only if a gang ran: a DSQ read saved per call).
 */
static void account_other(struct cpu_ctx *cctx, u64 now, s32 other_waits)
{
	struct gang_cpu_stats *s = this_cpu_stats();
	u64 delta = now > cctx->acct_ts ? now - cctx->acct_ts : 0;
	s32 running = cctx->running;

	cctx->acct_ts = now;
	if (!s || !delta)
		return;

	if (running >= 0 && running < GANG_MAX_GANGS) {
		u64 *run_ns = MEMBER_VPTR(s->gang_run_ns, [running]);

		if (run_ns)
			*run_ns += delta;
		if (other_waits < 0)
			other_waits = scx_bpf_dsq_nr_queued(OTHER_DSQ) > 0;
		if (other_waits) {
			cctx->other_credit += delta * min_other_share_pct / 100;
			if (cctx->other_credit > OTHER_CREDIT_MAX_NS)
				cctx->other_credit = OTHER_CREDIT_MAX_NS;
		}
	} else if (running == GANG_OTHER) {
		s->other_run_ns += delta;
		cctx->other_credit = cctx->other_credit > delta ?
				     cctx->other_credit - delta : 0;
	}
}

static void account(struct cpu_ctx *cctx, u64 now)
{
	account_other(cctx, now, -1);
}

/*
 * The CPU, busy with our task since the scheduler last saw it (acct_ts:
 * ops.running, ops.stopping or a tick), is seen again at @now: a stall if
 * that is more than a tick period late. Only from ops.tick and
 * ops.stopping, where the CPU was busy all along (before ops.running it
 * may have been idle, without ticks).
 */
static void note_stall(struct cpu_ctx *cctx, s32 cpu, u64 now)
{
	u64 gap = now > cctx->acct_ts ? now - cctx->acct_ts : 0;
	u64 gap_us = gap / 1000;

	if (!cctx->acct_ts || gap <= stall_threshold_ns)
		return;
	emit(EV_STALL, cpu, cctx->running, 0,
	     gap_us > 0xffffffffULL ? 0xffffffffU : (u32)gap_us, now);
}

static void set_running(struct cpu_ctx *cctx, s32 cpu, s32 what, u32 flags, u64 now)
{
	if (cctx->running == what && cctx->run_flags == flags)
		return;
	cctx->running = what;
	cctx->run_flags = flags;
	emit(EV_RUN, cpu, what, flags, 0, now);
}

/*
 * Install @slot on every CPU at once: kick each CPU whose running task is no
 * longer allowed there (preempting it) and wake idle CPUs the new owner has
 * work for.
 */
static void count_slot_ends(u64 leaving, u64 old_gen, bool early)
{
	s32 gang;

	bpf_for(gang, 0, GANG_MAX_GANGS) {
		struct gang_slot_ends *ends;
		volatile u32 *ranks;
		u64 *done_gen;

		if (!(leaving & gang_bit(gang)))
			continue;
		ends = MEMBER_VPTR(gang_ends, [gang]);
		ranks = MEMBER_VPTR(gang_ranks, [gang]);
		done_gen = MEMBER_VPTR(gang_done_gen, [gang]);
		if (!ends || !ranks || !*ranks || !done_gen)
			continue;
		if (*done_gen == old_gen && old_gen) {
			ends->voluntary++;
			if (early)
				ends->early++;
		} else {
			ends->forced++;
		}
	}
}

/* One gang's page (seqcount write side). */
static void write_clock(struct gang_slot_clock *c, u32 slot, u64 gen, u64 now, u32 n)
{
	__sync_fetch_and_add(&c->seq, 1);
	barrier();
	c->generation = gen;
	c->slot_start_ns = now;
	c->slot_end_ns = clock_end_ns;
	c->yield_lead_ns = yield_lead_ns;
	c->running_gangs = clock_running;
	c->next_gangs = clock_next;
	c->slot = slot;
	c->nr_slots = n;
	barrier();
	__sync_fetch_and_add(&c->seq, 1);
}

/* Publish the slot now in force to the ranks: every gang's page. */
static void publish_clock(u32 slot, u64 gen, u64 now, u64 len, u64 running)
{
	u32 n = nr_slots, zero = 0;
	u32 g;

	clock_end_ns = (n > 1 && len) ? now + len : 0;
	clock_running = running;
	clock_next = n > 1 ? slot_gangs(slot + 1 < n ? slot + 1 : 0) : running;

	bpf_for(g, 0, GANG_MAX_GANGS) {
		void *page_map = bpf_map_lookup_elem(&gang_clocks, &g);
		struct gang_slot_clock *c;

		if (!page_map)
			continue;
		c = bpf_map_lookup_elem(page_map, &zero);
		if (c)
			write_clock(c, slot, gen, now, n);
	}
}

/*
 * @now is when the switch was asked for (a command's time, or the timer's);
 * the new owners take the CPUs when this runs, which for a command is when
 * the slot timer fired. The trace says both: EV_SWITCH at @now (the switch
 * latency counts from it), EV_OWNER when the owners changed (until then the
 * old slot is in force, and its gangs' runs are not overlap).
 */
static void do_switch(u32 slot, u64 gen, u32 cause, u64 now, u64 len)
{
	u64 owners, old_gen = cur_gen, leaving = clock_running;
	u64 applied = bpf_ktime_get_ns();
	s32 cpu;

	cur_slot = slot;
	cur_gen = gen;
	slot_started_ns = now;
	stat_inc(STAT_SWITCHES);
	emit(EV_SWITCH, -1, GANG_NONE, 0, cause, now);

	bpf_for(cpu, 0, nr_cpus) {
		s32 owner = slot_owner(slot, cpu);
		struct cpu_ctx *cctx;
		s32 running;

		emit(EV_OWNER, cpu, owner, 0, 0, applied > now ? applied : now);
		cctx = lookup_cpu_ctx(cpu);
		if (!cctx)
			continue;
		running = cctx->running;
		if (running == owner)
			continue;
		if (running == GANG_IDLE) {
			if (owner >= 0 && (scx_bpf_dsq_nr_queued(gang_dsq(owner)) > 0 ||
					   scx_bpf_dsq_nr_queued(park_dsq(owner)) > 0)) {
				scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
				stat_inc(STAT_KICK_IDLE);
			}
		} else if (running >= 0 || owner >= 0) {
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
			stat_inc(STAT_KICK_PREEMPT);
		}
	}

	/*
	 * After the kicks, which are what the switch latency is made of. Until
	 * then a rank of the new slot sees the old clock: its gang is in the
	 * old next_gangs, so a yield is a plain one and the library does not
	 * yield at all (its gang is not running yet as far as it knows).
	 */
	owners = slot_gangs(slot);
	count_slot_ends(leaving & ~owners, old_gen, cause == SWITCH_YIELD);
	publish_clock(slot, gen, now, len, owners);
}
/* Length of the next slot: slot_ns, shortened so a rotation stays short. */
static u64 next_slot_len(void)
{
	u64 len = slot_ns, n = nr_slots;

	if (n > 1 && len * n > ROTATION_MAX_NS)
		len = ROTATION_MAX_NS / n;
	return len ? len : NSEC_PER_MSEC;
}

/*
 * A switch commanded by the daemon. The switch_slot syscall program only
 * records it and fires the timer at once: kicks issued from the timer reach
 * the other CPUs promptly, while from a syscall program they waited for a
 * tick. The switch keeps the command's time, so latency counts from it.
 *
 * A timed switch (at_ns, issue 12) is the same with the timer armed at an
 * absolute CLOCK_MONOTONIC instant (BPF_F_TIMER_ABS): every node arms its
 * boundary ahead, so no message is on the switch's path. Its time is when
 * the timer fired (timed_fired_ns, for the daemon's lateness report), so
 * latency counts the kicks only. One switch is pending at a time: the
 * daemon arms the next boundary once the last one fired.
 */
struct pending_switch {
	u64 ts;
	u64 gen;
	u64 len;
	u64 at;		/* absolute expiry armed (timed), 0: at once */
	u32 slot;
	u32 cause;
	u32 armed;
};

/* Not static: clang would split a static struct into scalars BTF rejects. */
struct pending_switch pending;
/* When the last timed switch fired, and its generation (for the daemon). */
u64 timed_fired_ns, timed_fired_gen;

static int slot_timerfn(void *map, int *key, struct bpf_timer *timer)
{
	u32 n = nr_slots, next;

	if (pending.armed) {
		/* Early (the timer re-armed for another reason): wait on. */
		if (pending.at && bpf_ktime_get_ns() < pending.at) {
			bpf_timer_start(timer, pending.at, BPF_F_TIMER_ABS);
			return 0;
		}
		pending.armed = 0;
		if (pending.at) {
			/* A timed switch dates from when it happens. */
			timed_fired_ns = bpf_ktime_get_ns();
			timed_fired_gen = pending.gen;
			do_switch(pending.slot, pending.gen, pending.cause, timed_fired_ns,
				  pending.len);
		} else {
			if (pending.cause == SWITCH_TIMED) {
				/* Armed after its instant: at once, late. */
				timed_fired_ns = bpf_ktime_get_ns();
				timed_fired_gen = pending.gen;
			}
			do_switch(pending.slot, pending.gen, pending.cause, pending.ts,
				  pending.len);
		}
	} else if (slot_timer && n > 0) {
		u32 cause = early_gen == cur_gen ? SWITCH_YIELD : SWITCH_TIMER;

		next = cur_slot + 1;
		if (next >= n)
			next = 0;
		if (next != cur_slot)
			do_switch(next, cur_gen + 1, cause, bpf_ktime_get_ns(),
				  next_slot_len());
	}
	/* A switch armed while this ran keeps its own expiry. */
	if (!pending.armed)
		bpf_timer_start(timer, next_slot_len(), 0);
	return 0;
}

/* Wake or preempt one CPU that @gang owns now, so its new task runs there. */
static void kick_owner_cpu(struct task_struct *p, s32 gang)
{
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		struct cpu_ctx *cctx;

		if (cpu_owner(cpu) != gang || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		cctx = lookup_cpu_ctx(cpu);
		if (!cctx || cctx->running == gang || cctx->serve_other)
			continue;
		if (cctx->running == GANG_IDLE) {
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		} else {
			/* Another gang filling in, or a task of no gang. */
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		}
		stat_inc(STAT_WAKE_KICK);
		return;
	}
}

/* Did @p yield its slot in the generation in force? */
static bool ctx_parked(struct task_ctx *tctx)
{
	return tctx && tctx->parked && tctx->park_gen == cur_gen;
}

static bool is_parked(struct task_struct *p)
{
	return ctx_parked(lookup_task_ctx(p));
}

/*
 * Must @p (of @gang) run on where it is, slot or no slot? Preempted inside
 * an RCU read-side section (see gang_enqueue), or inside a system call
 * while its gang is parked (see "Park"). Such a task runs in short slices
 * on its CPU, and is not preempted as a stale run either: a task preempted
 * with slice left is run again without a new enqueue, and a kick at each
 * start would keep it in its section for ever (seen: a rank preempted in
 * the network stack, out of its slot, ran 5-90 us at a time for 38 s).
 */
static bool must_finish(struct task_struct *p, struct task_ctx *tctx, s32 gang)
{
	if (gang < 0)
		return false;
	if (bpf_core_field_exists(p->rcu_read_unlock_special) &&
	    p->rcu_read_unlock_special.b.blocked)
		return true;
	return tctx && tctx->in_syscall && gang_parked(gang);
}

/*
 * A task of @gang that yielded in an earlier generation, for @cpu: its gang
 * owns the CPU again. Tasks that yielded in this generation stay parked.
 */
static bool dispatch_parked(s32 cpu, s32 gang)
{
	struct task_struct *p;
	bool moved = false;

	if (!(parked_gangs & gang_bit(gang)))
		return false;
	__sync_fetch_and_and(&parked_gangs, ~gang_bit(gang));
	if (!scx_bpf_dsq_nr_queued(park_dsq(gang)))
		return false;
	__sync_fetch_and_or(&parked_gangs, gang_bit(gang));
	bpf_for_each(scx_dsq, p, park_dsq(gang), 0) {
		struct task_ctx *tctx = lookup_task_ctx(p);

		if (tctx && tctx->parked && tctx->park_gen == cur_gen)
			continue;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0)) {
			moved = true;
			break;
		}
	}
	return moved;
}

/* May @p (of class @gang) run on @cpu right now? */
static bool may_run_on(s32 gang, s32 cpu)
{
	s32 owner = cpu_owner(cpu);

	if (gang < 0)
		return owner < 0 || !scx_bpf_dsq_nr_queued(gang_dsq(owner));
	return gang == owner;
}

s32 BPF_STRUCT_OPS(gang_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	bool is_idle = false;
	s32 gang = refresh_gang(p, tctx), cpu;

	if (gang < 0) {
		cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
		if (is_idle && may_run_on(GANG_OTHER, cpu))
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, OTHER_SLICE_NS, 0);
		return cpu;
	}

	/*
	 * A gang task wakes on a CPU its gang owns, idle if possible, and runs
	 * there at once (straight to that CPU's local DSQ: no enqueue, no trip
	 * through the gang's DSQ and a kick). A task that yielded its slot
	 * goes through enqueue, which parks it.
	 */
	if (cpu_owner(prev_cpu) == gang && scx_bpf_test_and_clear_cpu_idle(prev_cpu)) {
		cpu = prev_cpu;
		goto found;
	}
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu_owner(cpu) == gang && bpf_cpumask_test_cpu(cpu, p->cpus_ptr) &&
		    scx_bpf_test_and_clear_cpu_idle(cpu))
			goto found;
	}
	return prev_cpu;
found:
	if (!ctx_parked(tctx)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, GANG_SLICE_NS, 0);
		stat_inc(STAT_WAKE_DIRECT);
	}
	return cpu;
}

void BPF_STRUCT_OPS(gang_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	s32 gang = refresh_gang(p, tctx), cpu = scx_bpf_task_cpu(p);

	/*
	 * Preempted inside an RCU read-side critical section (preemptible
	 * RCU; a slot switch's kick can catch a rank in the network stack):
	 * every grace period of the node waits for it, and so does whoever
	 * waits for one. A write to cgroup.procs waits for one holding
	 * cgroup_mutex, the daemon's next cgroup.freeze write waits for that
	 * mutex, and the slot that would let the task run never comes (seen
	 * in cluster_timed: 21 s, then an RCU stall disabled the scheduler).
	 * It does not wait for its gang's slot: it runs on its CPU in short
	 * slices until it is out of the section. The kernel marks such a task
	 * blocked at the context switch (rcu_note_context_switch, before
	 * ops.enqueue) until its outermost rcu_read_unlock. Not the nesting
	 * count: this program runs under rcu_read_lock itself, so a task
	 * enqueued from its own context always has one.
	 */
	if (gang >= 0 && bpf_core_field_exists(p->rcu_read_unlock_special) &&
	    p->rcu_read_unlock_special.b.blocked) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, FINISH_SLICE_NS, enq_flags);
		stat_inc(STAT_RCU_READER);
		return;
	}

	/* Yielded its slot: it waits for its gang's next one. */
	if (gang >= 0 && ctx_parked(tctx)) {
		scx_bpf_dsq_insert(p, park_dsq(gang), GANG_SLICE_NS, enq_flags);
		__sync_fetch_and_or(&parked_gangs, gang_bit(gang));
		return;
	}

	/*
	 * Its gang is parked but it is inside a system call, where it may hold
	 * its socket's lock: it runs on to the call's end (gang_sys_exit then
	 * preempts it), in short slices on its CPU.
	 */
	if (must_finish(p, tctx, gang)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, FINISH_SLICE_NS, enq_flags);
		stat_inc(STAT_PARK_SYSCALL);
		return;
	}

	/*
	 * The last runnable task of this CPU: keep it here if it may run here,
	 * otherwise queue it and let the CPU go idle.
	 */
	if ((enq_flags & SCX_ENQ_LAST) && may_run_on(gang, cpu)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL,
				   gang < 0 ? OTHER_SLICE_NS : GANG_SLICE_NS, enq_flags);
		return;
	}

	if (gang < 0) {
		/*
		 * Per-CPU kthreads (workqueues, softirqs) cannot wait for a slot,
		 * and the daemon's commands must not wait for a minimum share.
		 */
		bool daemon = daemon_tgid && p->tgid == daemon_tgid;

		if (daemon || ((p->flags & PF_KTHREAD) && p->nr_cpus_allowed == 1)) {
			struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, OTHER_SLICE_NS,
					   enq_flags | SCX_ENQ_PREEMPT);
			stat_inc(STAT_PRIORITY_DIRECT);
			/* What a lone job pays for them (issue 15): its rank preempted. */
			if (cctx && cctx->running >= 0)
				stat_inc(daemon ? STAT_PREEMPT_DAEMON : STAT_PREEMPT_KTHREAD);
			return;
		}
		scx_bpf_dsq_insert(p, OTHER_DSQ, OTHER_SLICE_NS, enq_flags);
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		return;
	}

	/*
	 * Woken on a CPU its gang owns that runs nothing of its gang (idle, a
	 * task of no gang, another gang filling in): straight onto that CPU,
	 * preempting what runs there, as a kick would but without the trip
	 * through the gang's queue and ops.dispatch. This is every wake-up
	 * that does not go through ops.select_cpu: the kernel skips it for a
	 * task allowed on one CPU only (a pinned rank, a one-CPU node).
	 */
	if (cpu_owner(cpu) == gang && bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
		struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

		if (cctx && cctx->running != gang && !cctx->serve_other) {
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, GANG_SLICE_NS,
					   cctx->running == GANG_IDLE ? enq_flags :
					   enq_flags | SCX_ENQ_PREEMPT);
			stat_inc(STAT_WAKE_DIRECT);
			return;
		}
	}

	scx_bpf_dsq_insert(p, gang_dsq(gang), GANG_SLICE_NS, enq_flags);
	kick_owner_cpu(p, gang);
}

/*
 * A task of the parked gang @gang (which owns @cpu in the slot in force)
 * that waits in its gang's queue inside a system call: it was preempted
 * there before the park began and may hold its socket's lock (then even
 * the drain check's read of that socket would wait for it). It runs on
 * to the call's end like any task caught by the park.
 */
static bool dispatch_finishing(s32 cpu, s32 gang)
{
	struct task_struct *p;

	if (!scx_bpf_dsq_nr_queued(gang_dsq(gang)))
		return false;
	bpf_for_each(scx_dsq, p, gang_dsq(gang), 0) {
		if (!must_finish(p, lookup_task_ctx(p), gang) ||
		    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0)) {
			stat_inc(STAT_PARK_SYSCALL);
			return true;
		}
	}
	return false;
}

/* Another gang's queued task for an idle CPU (the `fill` policy). */
static bool dispatch_fill(s32 cpu, s32 owner)
{
	s32 gang;

	if (is_housekeeping(cpu) || !(gangs_with_slot & ~gang_bit(owner)))
		return false;
	bpf_for(gang, 0, GANG_MAX_GANGS) {
		if (gang == owner || !gang_has_slot(gang) || gang_parked(gang))
			continue;
		if (scx_bpf_dsq_move_to_local(gang_dsq(gang), 0)) {
			stat_inc(STAT_FILL_DISPATCH);
			return true;
		}
	}
	return false;
}

void BPF_STRUCT_OPS(gang_dispatch, s32 cpu, struct task_struct *prev)
{
	struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);
	s32 owner = cpu_owner(cpu);
	bool prev_queued = prev && (prev->scx.flags & SCX_TASK_QUEUED);
	s32 prev_class = prev_queued ? task_class(prev) : GANG_IDLE;
	s32 parked_owner;
	bool other_waits;

	/* Tasks of no gang are owed their minimum share on this CPU. */
	if (cctx && cctx->serve_other) {
		cctx->serve_other = false;
		if (scx_bpf_dsq_move_to_local(OTHER_DSQ, 0)) {
			stat_inc(STAT_OTHER_DISPATCH);
			return;
		}
	}

	/* The owner is parked: only its tasks inside a system call run on. */
	parked_owner = owner < 0 && owner_parked(cpu) ? slot_owner(cur_slot, cpu) :
							 GANG_NONE;
	if (parked_owner >= 0 && dispatch_finishing(cpu, parked_owner))
		return;

	/*
	 * Queue lengths are read without a lock: an empty queue (the common
	 * case for a lone job whose rank just blocked) costs no move attempt.
	 */
	if (owner >= 0) {
		if ((scx_bpf_dsq_nr_queued(gang_dsq(owner)) &&
		     scx_bpf_dsq_move_to_local(gang_dsq(owner), 0)) ||
		    dispatch_parked(cpu, owner)) {
			stat_inc(STAT_GANG_DISPATCH);
			return;
		}
		/* The owner's task that just ran keeps the CPU, unless it yielded. */
		if (prev_queued && prev_class == owner && !is_parked(prev)) {
			scx_bpf_task_set_slice(prev, GANG_SLICE_NS);
			return;
		}
	}

	other_waits = scx_bpf_dsq_nr_queued(OTHER_DSQ) > 0;
	if (other_waits && scx_bpf_dsq_move_to_local(OTHER_DSQ, 0)) {
		stat_inc(STAT_OTHER_DISPATCH);
		return;
	}

	/* A parked owner's CPU runs no other gang: the incoming one waits for the switch. */
	if (fill && parked_owner < 0 && dispatch_fill(cpu, owner))
		return;

	/* Nothing else to run: a task of no gang may go on. */
	if (prev_queued && prev_class < 0) {
		scx_bpf_task_set_slice(prev, OTHER_SLICE_NS);
		return;
	}

	/*
	 * The CPU goes idle: what ran is charged up to here, and the idle time
	 * to no one. This is the last callback before the kernel runs its idle
	 * task, so ops.update_idle is not needed, and not implemented: two
	 * callbacks per idle period that a lone latency-bound job paid on
	 * every message (issue 15). A task that comes after all (a wake-up
	 * racing with this) is seen in ops.running, which charges again.
	 */
	if (cctx) {
		u64 now = bpf_ktime_get_ns();

		account_other(cctx, now, other_waits);
		set_running(cctx, cpu, GANG_IDLE, 0, now);
	}
}

void BPF_STRUCT_OPS(gang_running, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	s32 cpu = scx_bpf_task_cpu(p), gang = tctx ? tctx->gang : GANG_OTHER;
	struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);
	u64 now = bpf_ktime_get_ns();
	u32 flags = 0;

	if (!cctx)
		return;
	account(cctx, now);

	/* Running again: whatever parked it is over. */
	if (gang >= 0 && tctx)
		tctx->parked = false;

	/* It finishes its RCU section or system call first. */
	if (must_finish(p, tctx, gang)) {
		set_running(cctx, cpu, gang, RUN_FINISH, now);
		return;
	}

	/* Moved by rehome_gang or to another cgroup since: look again. */
	if (gang >= 0 && gang != cpu_owner(cpu))
		gang = refresh_task_gang(p);
	if (gang >= 0 && gang != cpu_owner(cpu)) {
		if (fill && !is_housekeeping(cpu) && !gang_parked(gang)) {
			flags = RUN_FILL;
		} else {
			/* Queued before the switch: it must not run in this slot. */
			scx_bpf_task_set_slice(p, 0);
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
			stat_inc(STAT_STALE_RUN);
		}
	}
	set_running(cctx, cpu, gang, flags, now);
}

/*
 * Only for the trace. Without it nothing here is needed: what ran is charged
 * when the next task runs (ops.running), the CPU goes idle (ops.dispatch)
 * or at a tick, and cctx->running is set by the same callbacks. Under
 * emulation this callback cost 5-6 us per context switch (issue 15), a
 * tenth of a lone latency-bound rank's round trip on each node.
 */
void BPF_STRUCT_OPS(gang_stopping, struct task_struct *p, bool runnable)
{
	s32 cpu, gang;
	struct cpu_ctx *cctx;
	u64 now;

	if (!trace_on)
		return;
	cpu = scx_bpf_task_cpu(p);
	gang = task_class(p);
	cctx = lookup_cpu_ctx(cpu);
	if (!cctx)
		return;
	now = bpf_ktime_get_ns();
	/* Preempted by a kick that landed late: the stall ends here. */
	note_stall(cctx, cpu, now);
	account(cctx, now);
	/*
	 * A gang task leaving a CPU it no longer owns (preempted by a switch):
	 * the gang stops running here now, not when the next task starts, so
	 * the trace does not charge the context switch to the old gang.
	 */
	if (gang >= 0 && gang != cpu_owner(cpu) && !(cctx->run_flags & RUN_FILL))
		set_running(cctx, cpu, GANG_IDLE, 0, now);
}

void BPF_STRUCT_OPS(gang_tick, struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);
	struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);
	u64 now = bpf_ktime_get_ns();
	s32 other_waits = -1;

	if (!cctx)
		return;
	if (trace_on)
		note_stall(cctx, cpu, now);
	/* One read of the queue of tasks of no gang serves both uses. */
	if (cctx->running >= 0)
		other_waits = scx_bpf_dsq_nr_queued(OTHER_DSQ) > 0;
	account_other(cctx, now, other_waits);

	if (other_waits > 0 && !cctx->serve_other &&
	    cctx->other_credit >= OTHER_SLICE_NS) {
		cctx->serve_other = true;
		scx_bpf_task_set_slice(p, 0);
		stat_inc(STAT_MIN_SHARE);
	}
}

/*
 * Count one more rank of @gang yielded in the generation in force; when all
 * have, the gang is done with its slot: bring the slot timer forward if
 * every gang of the slot is, or tell the daemon.
 */
static void rank_yielded(struct task_struct *p, s32 gang)
{
	u64 gen = cur_gen, *last, *word, *done_gen, old, w, next;
	u32 tgid = p->tgid, done = 0, i;
	volatile u32 *ranks;
	struct gang_notice *n;
	struct slot_timer_value *rt;
	u32 zero = 0;
	s32 g;

	word = MEMBER_VPTR(gang_yield_word, [gang]);
	done_gen = MEMBER_VPTR(gang_done_gen, [gang]);
	ranks = MEMBER_VPTR(gang_ranks, [gang]);
	if (!word || !done_gen || !ranks)
		return;
	last = bpf_map_lookup_elem(&rank_yields, &tgid);
	if (last && *last == gen)
		return;		/* another thread of the same rank */
	bpf_map_update_elem(&rank_yields, &tgid, &gen, BPF_ANY);

	/* One more rank of generation gen, atomically (bounded retries). */
	bpf_for(i, 0, 16) {
		w = *word;
		next = (w >> YIELD_COUNT_BITS) == gen ? w + 1 : (gen << YIELD_COUNT_BITS) | 1;
		if (__sync_val_compare_and_swap(word, w, next) == w) {
			done = next & ((1 << YIELD_COUNT_BITS) - 1);
			break;
		}
	}
	if (!*ranks || done < *ranks)
		return;
	old = *done_gen;
	if (old == gen || __sync_val_compare_and_swap(done_gen, old, gen) != old)
		return;		/* told already */

	if (!slot_timer) {
		n = bpf_ringbuf_reserve(&notices, sizeof(*n), 0);
		if (n) {
			n->generation = gen;
			n->kind = NOTICE_ALL_YIELDED;
			n->gang = gang;
			bpf_ringbuf_submit(n, 0);
		}
		return;
	}
	bpf_for(g, 0, GANG_MAX_GANGS) {
		u64 *other = MEMBER_VPTR(gang_done_gen, [g]);

		if ((clock_running & gang_bit(g)) && other && *other != gen)
			return;
	}
	rt = bpf_map_lookup_elem(&slot_timer_map, &zero);
	if (rt && early_gen != gen) {
		early_gen = gen;
		bpf_timer_start(&rt->timer, 0, 0);
	}
}

/*
 * sched_yield(). Inside the lead time before its slot ends (and when its gang
 * does not keep the CPU in the next slot) a gang task is done with the slot:
 * it is parked until its gang's next one. Anything else is a plain yield.
 */
bool BPF_STRUCT_OPS(gang_yield, struct task_struct *from, struct task_struct *to)
{
	s32 gang, cpu = scx_bpf_task_cpu(from);
	u64 end = clock_end_ns, lead = yield_lead_ns;
	struct task_ctx *tctx;

	if (to)
		return false;
	scx_bpf_task_set_slice(from, 0);
	gang = task_class(from);
	if (gang < 0 || gang != cpu_owner(cpu) || !end || !lead ||
	    bpf_ktime_get_ns() + lead < end ||
	    (clock_next & gang_bit(gang))) {
		stat_inc(STAT_YIELD_IGNORED);
		return false;
	}
	tctx = lookup_task_ctx(from);
	if (!tctx)
		return false;
	tctx->park_gen = cur_gen;
	tctx->parked = true;
	stat_inc(STAT_YIELD_PARK);
	if (valid_gang(gang)) {
		struct gang_slot_ends *ends = MEMBER_VPTR(gang_ends, [gang]);

		if (ends)
			__sync_fetch_and_add(&ends->yields, 1);
	}
	rank_yielded(from, gang);
	return false;
}

/* Its affinity changed: gang_cpus_allowed() may say otherwise now. */
void BPF_STRUCT_OPS(gang_set_cpumask, struct task_struct *p, const struct cpumask *cpumask)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		tctx->gang_epoch = 0;
}

s32 BPF_STRUCT_OPS(gang_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	tctx->gang = GANG_OTHER;
	return 0;
}

static int park_timerfn(void *map, int *key, struct bpf_timer *timer);

s32 BPF_STRUCT_OPS_SLEEPABLE(gang_init)
{
	struct slot_timer_value *rt, *pt;
	u32 zero = 0;
	s32 cpu, gang, ret;

	stall_threshold_ns = stall_ns();
	ret = scx_bpf_create_dsq(OTHER_DSQ, -1);
	if (ret)
		return ret;
	bpf_for(gang, 0, GANG_MAX_GANGS) {
		ret = scx_bpf_create_dsq(gang_dsq(gang), -1);
		if (ret)
			return ret;
		ret = scx_bpf_create_dsq(park_dsq(gang), -1);
		if (ret)
			return ret;
	}
	bpf_for(cpu, 0, nr_cpus) {
		struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

		if (cctx)
			cctx->running = GANG_IDLE;
	}

	rt = bpf_map_lookup_elem(&slot_timer_map, &zero);
	if (!rt)
		return -ENOENT;
	ret = bpf_timer_init(&rt->timer, &slot_timer_map, CLOCK_MONOTONIC);
	if (ret)
		return ret;
	ret = bpf_timer_set_callback(&rt->timer, slot_timerfn);
	if (ret)
		return ret;
	pt = bpf_map_lookup_elem(&park_timer_map, &zero);
	if (!pt)
		return -ENOENT;
	ret = bpf_timer_init(&pt->timer, &park_timer_map, CLOCK_MONOTONIC);
	if (ret)
		return ret;
	ret = bpf_timer_set_callback(&pt->timer, park_timerfn);
	if (ret)
		return ret;
	return bpf_timer_start(&rt->timer, next_slot_len(), 0);
}

void BPF_STRUCT_OPS(gang_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

/* Daemon command: switch to slot args->slot, generation args->gen. */
SEC("syscall")
int switch_slot(struct switch_args *args)
{
	struct slot_timer_value *rt;
	u32 zero = 0;
	u64 now, at;

	if (args->slot >= GANG_MAX_SLOTS)
		return -EINVAL;
	rt = bpf_map_lookup_elem(&slot_timer_map, &zero);
	if (!rt)
		return -ENOENT;
	now = bpf_ktime_get_ns();
	at = args->at_ns > now ? args->at_ns : 0;
	pending.ts = now;
	pending.at = at;
	pending.gen = args->generation;
	pending.len = args->slot_len_ns;
	pending.slot = args->slot;
	pending.cause = args->cause ? args->cause :
			(args->at_ns ? SWITCH_TIMED : SWITCH_COMMAND);
	barrier();
	pending.armed = 1;
	if (at)
		return bpf_timer_start(&rt->timer, at, BPF_F_TIMER_ABS);
	return bpf_timer_start(&rt->timer, 0, 0);
}

/*
 * Daemon command: the gang lost its last slot. Its queued tasks move to the
 * queue of tasks of no gang so they do not wait for a slot that won't come.
 */
SEC("syscall")
int rehome_gang(struct rehome_args *args)
{
	struct task_struct *p;
	s32 gang = args->gang;

	if (gang < 0 || gang >= GANG_MAX_GANGS)
		return -EINVAL;
	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, gang_dsq(gang), 0)
		scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, OTHER_DSQ, 0);
	bpf_for_each(scx_dsq, p, park_dsq(gang), 0)
		scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, OTHER_DSQ, 0);
	bpf_rcu_read_unlock();
	return 0;
}

/*
 * Daemon command: the gang is about to be frozen (the coordinator's switch
 * barrier) but not all its ranks yielded. A parked task must run to reach
 * the freezer (it parks tasks at their return to user space), so its parked
 * tasks go back to its queue and the CPUs it owns are woken; they return
 * from sched_yield() straight into the freezer.
 */
SEC("syscall")
int release_parked(struct rehome_args *args)
{
	struct task_struct *p;
	s32 gang = args->gang, cpu;

	if (gang < 0 || gang >= GANG_MAX_GANGS)
		return -EINVAL;
	if (!scx_bpf_dsq_nr_queued(park_dsq(gang)))
		return 0;
	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, park_dsq(gang), 0)
		scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, gang_dsq(gang), 0);
	bpf_rcu_read_unlock();
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu_owner(cpu) == gang)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	return 0;
}

/*
 * Park kicks (park = bpf): every CPU running a task of a parked gang is
 * preempted. From a timer, like a switch's kicks (from a syscall program
 * they waited for a tick); a timer of its own, so an armed timed switch
 * keeps its expiry.
 */
static int park_timerfn(void *map, int *key, struct bpf_timer *timer)
{
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

		if (cctx && gang_parked(cctx->running)) {
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
			stat_inc(STAT_PARK_KICK);
		} else if (cctx && cctx->running == GANG_IDLE && owner_parked(cpu)) {
			/* Its dispatch lets a queued task finish its system call. */
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		}
	}
	return 0;
}

/*
 * Daemon command: park the gangs of args->mask while generation
 * args->generation is in force (the switch to the next one ends the park),
 * at most until args->until_ns. A mask of 0 ends a park.
 */
SEC("syscall")
int park_gangs(struct park_args *args)
{
	struct slot_timer_value *pt;
	u32 zero = 0;

	park_mask = 0;
	barrier();
	park_gen = args->generation;
	park_until_ns = args->until_ns;
	barrier();
	park_mask = args->mask;
	if (!args->mask)
		return 0;
	pt = bpf_map_lookup_elem(&park_timer_map, &zero);
	if (!pt)
		return -ENOENT;
	return bpf_timer_start(&pt->timer, 0, 0);
}

/*
 * Where each task is: inside a system call or not (for the park). For every
 * task of the node, a task-storage lookup and a store per call and return,
 * so the daemon attaches these two only while a park may come (coordinated,
 * two slots or more, park = bpf).
 */
SEC("tp_btf/sys_enter")
int BPF_PROG(gang_sys_enter, struct pt_regs *regs, long id)
{
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&task_ctxs, bpf_get_current_task_btf(), 0, 0);
	if (tctx)
		tctx->in_syscall = true;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(gang_sys_exit, struct pt_regs *regs, long ret)
{
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&task_ctxs, bpf_get_current_task_btf(), 0, 0);
	if (!tctx)
		return 0;
	tctx->in_syscall = false;
	/* Its gang is parked: it stops at its return to user space, now. */
	if (tctx->gang >= 0 && gang_parked(tctx->gang)) {
		scx_bpf_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
		stat_inc(STAT_PARK_SYSCALL_EXIT);
	}
	return 0;
}

/*
 * Daemon command: start tracing. The current owner and activity of every CPU
 * open the trace, so its first moments are attributed too. The owner is the
 * slot's, as do_switch emits it, also while that gang is parked: a trace
 * begun inside a park charged the parked gang's finishing runs (and what
 * ran after an early end of the park) as overlap until the next switch.
 */
SEC("syscall")
int trace_start(void *ctx)
{
	u64 now = bpf_ktime_get_ns();
	s32 cpu;

	trace_on = 1;
	bpf_for(cpu, 0, nr_cpus) {
		struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

		emit(EV_OWNER, cpu, nr_slots ? slot_owner(cur_slot, cpu) : GANG_NONE,
		     0, 0, now);
		if (cctx)
			emit(EV_RUN, cpu, cctx->running, cctx->run_flags, 0, now);
	}
	return 0;
}

SCX_OPS_DEFINE(gang_ops,
	       .select_cpu	= (void *)gang_select_cpu,
	       .enqueue		= (void *)gang_enqueue,
	       .dispatch	= (void *)gang_dispatch,
	       .running		= (void *)gang_running,
	       .stopping	= (void *)gang_stopping,
	       .tick		= (void *)gang_tick,
	       .yield		= (void *)gang_yield,
	       .set_cpumask	= (void *)gang_set_cpumask,
	       .init_task	= (void *)gang_init_task,
	       .init		= (void *)gang_init,
	       .exit		= (void *)gang_exit,
	       .flags		= SCX_OPS_ENQ_LAST,
	       .name		= "gang");
