//! Trace analysis: turns the scheduler's ring-buffer events into per-CPU
//! intervals, a summary (shares, overlap, switch latency) and an SVG
//! timeline.
//!
//! Everything here is pure: no BPF, no I/O. The daemon converts each
//! `struct gang_event` (bpf/intf.h) into a [`TraceEvent`], fills a
//! [`TraceMeta`], calls [`analyze`], writes the [`Trace`] as JSON and/or
//! [`render_svg`] to a file.
//!
//! Input is treated as untrusted: events may come out of order, lie outside
//! the window, name CPUs that do not exist or carry nonsense gang ids. None
//! of that panics or yields NaN; bad events are counted in
//! [`Summary::ignored_events`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod analysis;
pub mod cluster;
mod svg;

pub use analysis::{analyze, percentile_nearest_rank};
pub use cluster::{merge, parse_node, render_cluster_svg, ClusterTrace, NodeTrace};
pub use svg::render_svg;

// Mirrors of enum gang_ids / gang_run_flags in bpf/intf.h. Kept as plain
// constants so this module builds without bindgen; the integrator asserts
// they equal the generated ones.
/// Slot-table cell with no owner (EV_OWNER); also "owner unknown".
pub const GANG_NONE: i32 = -1;
/// A task of no gang is running (EV_RUN).
pub const GANG_OTHER: i32 = -2;
/// The CPU is idle (EV_RUN).
pub const GANG_IDLE: i32 = -3;
/// EV_RUN flag: a gang task run by the `fill` policy on a CPU it does not own.
pub const RUN_FILL: u32 = 1;
/// EV_RUN flag: a gang task that must finish where it is (inside an RCU
/// read-side section, or inside a system call while its gang is parked),
/// run on whatever CPU it was on: a deliberate escape, not a late preemption.
pub const RUN_FINISH: u32 = 2;

/// Hard cap on the number of CPU rows, whatever `TraceMeta::nr_cpus` says:
/// a corrupt meta must not make us allocate gigabytes. 8192 is the largest
/// CONFIG_NR_CPUS Linux supports, far above GANG_MAX_CPUS (256).
pub const MAX_TRACE_CPUS: u32 = 8192;

/// enum gang_event_kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// EV_SWITCH = 1: the node switched to `slot`.
    Switch,
    /// EV_OWNER = 2: `gang` owns `cpu` in the slot just switched to.
    Owner,
    /// EV_RUN = 3: `cpu` started running `gang`.
    Run,
    /// EV_STALL = 4: `cpu` was busy (running `gang`) but its scheduler tick
    /// came `cause` µs after the scheduler last saw it: for that long the
    /// CPU ran nothing the scheduler could act on (under emulation: the
    /// vCPU's host thread was not running; on hardware: interrupts off,
    /// an SMI). Time inside a stall is not the scheduler's to account.
    Stall,
}

impl EventKind {
    /// Maps the raw `gang_event.kind` value; `None` for anything else, so
    /// the caller can drop (and count) a corrupt record.
    pub fn from_raw(kind: u32) -> Option<EventKind> {
        match kind {
            1 => Some(EventKind::Switch),
            2 => Some(EventKind::Owner),
            3 => Some(EventKind::Run),
            4 => Some(EventKind::Stall),
            _ => None,
        }
    }
}

/// One ring-buffer event, field for field like `struct gang_event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub ts_ns: u64,
    pub gen: u64,
    pub kind: EventKind,
    pub cpu: i32,
    pub gang: i32,
    pub slot: u32,
    pub cause: u32,
    pub flags: u32,
}

impl TraceEvent {
    /// An EV_SWITCH event (cpu, gang and flags unused).
    pub fn switch(ts_ns: u64, gen: u64, slot: u32, cause: u32) -> Self {
        TraceEvent {
            ts_ns,
            gen,
            kind: EventKind::Switch,
            cpu: -1,
            gang: GANG_NONE,
            slot,
            cause,
            flags: 0,
        }
    }

    /// An EV_OWNER event.
    pub fn owner(ts_ns: u64, cpu: i32, gang: i32) -> Self {
        TraceEvent {
            ts_ns,
            gen: 0,
            kind: EventKind::Owner,
            cpu,
            gang,
            slot: 0,
            cause: 0,
            flags: 0,
        }
    }

    /// An EV_RUN event.
    pub fn run(ts_ns: u64, cpu: i32, gang: i32, flags: u32) -> Self {
        TraceEvent {
            ts_ns,
            gen: 0,
            kind: EventKind::Run,
            cpu,
            gang,
            slot: 0,
            cause: 0,
            flags,
        }
    }

    /// An EV_STALL event: `cpu`, running `gang`, saw its tick `gap_us` late.
    pub fn stall(ts_ns: u64, cpu: i32, gang: i32, gap_us: u32) -> Self {
        TraceEvent {
            ts_ns,
            gen: 0,
            kind: EventKind::Stall,
            cpu,
            gang,
            slot: 0,
            cause: gap_us,
            flags: 0,
        }
    }
}

/// What the daemon knows about the traced run besides the events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    /// CPU rows (capped at [`MAX_TRACE_CPUS`]).
    pub nr_cpus: u32,
    /// Gang id -> human name (the cgroup's name). Ids without a name are
    /// shown as their number.
    pub gang_names: BTreeMap<i32, String>,
    /// Analysis window `[start_ns, end_ns)`, CLOCK_MONOTONIC ns.
    /// `end_ns < start_ns` is treated as an empty window.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Node name, shown in the SVG title.
    pub node: String,
}

/// A stretch of time during which one CPU ran one thing under one owner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub start_ns: u64,
    pub end_ns: u64,
    /// What ran: a gang id, GANG_OTHER or GANG_IDLE.
    pub gang: i32,
    /// Owner of the CPU in the slot in force (GANG_NONE if none or unknown).
    pub owner: i32,
    /// The run was flagged RUN_FILL (only ever true for gang ids >= 0).
    pub fill: bool,
    /// The run was flagged RUN_FINISH (only ever true for gang ids >= 0).
    #[serde(default)]
    pub finish: bool,
}

/// How an interval's time is accounted; the SVG colours by the same rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalClass {
    Idle,
    Other,
    /// A gang on a CPU it owns.
    Owned,
    /// A gang on a CPU it does not own, placed there by the fill policy.
    Fill,
    /// A gang on a CPU it does not own, finishing an RCU section or a
    /// system call there (RUN_FINISH): the scheduler let it run on purpose.
    Finish,
    /// A gang on a CPU it does not own, not flagged fill: the gang
    /// scheduling guarantee was broken (typically a late preemption).
    Overlap,
}

impl Interval {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    pub fn class(&self) -> IntervalClass {
        match self.gang {
            GANG_IDLE => IntervalClass::Idle,
            g if g < 0 => IntervalClass::Other,
            g if g == self.owner => IntervalClass::Owned,
            _ if self.fill => IntervalClass::Fill,
            _ if self.finish => IntervalClass::Finish,
            _ => IntervalClass::Overlap,
        }
    }
}

/// One EV_SWITCH inside the window, as the node trace saw it (gangd's
/// record of a cluster switch is the coordinator's switch::barrier::SwitchRecord).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracedSwitch {
    pub ts_ns: u64,
    pub gen: u64,
    pub slot: u32,
    pub cause: u32,
    /// Time until the slowest CPU that reached its new owner did so (see
    /// [`analyze`]); `None` if no CPU with an owner reached it.
    pub latency_ns: Option<u64>,
    /// From `ts_ns` to the new owners taking the CPUs (the epoch's first
    /// EV_OWNER): a commanded switch waits for the slot timer to fire, and
    /// until then the old slot is in force. Part of `latency_ns`; 0 for a
    /// switch of the timer, which takes the CPUs when it is made.
    #[serde(default)]
    pub delay_ns: u64,
}

/// Per-gang figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GangSummary {
    pub id: i32,
    pub run_ns: u64,
    /// run_ns / cpu_time_ns.
    pub share_of_cpu: f64,
    /// run_ns / gang_run_ns (all gangs together).
    pub share_of_gang_time: f64,
    /// Part of run_ns that was overlap (see [`Summary::overlap_ns`]).
    pub overlap_ns: u64,
    /// Part of run_ns that was fill.
    pub fill_ns: u64,
    /// Part of run_ns that was finish (see [`Summary::finish_ns`]).
    #[serde(default)]
    pub finish_ns: u64,
}

/// Time between consecutive switches, in ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotLenStats {
    pub mean: f64,
    /// Nearest-rank median.
    pub p50: f64,
    /// Number of gaps measured (switches - 1, or 0).
    pub samples: u64,
}

/// Switch latency over switches whose latency is known, in µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Nearest-rank percentiles: see [`percentile_nearest_rank`].
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub samples: u64,
    /// (switch, CPU) pairs where the CPU had an owner but never ran it
    /// before the next switch or the end of the window: these are not in
    /// the latency figures, so a high count means the figures flatter.
    pub unreached: u64,
}

/// Whole-trace figures; serialised as part of [`Trace`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// end_ns - start_ns.
    pub duration_ns: u64,
    /// Attributed time summed over CPUs (time before a CPU's first EV_RUN
    /// is not attributed).
    pub cpu_time_ns: u64,
    /// Keyed by gang name (or id as a string when unnamed or when two ids
    /// share a name: "name#id").
    pub gangs: BTreeMap<String, GangSummary>,
    /// Run time of all gangs together.
    pub gang_run_ns: u64,
    /// Run time of tasks of no gang.
    pub other_ns: u64,
    pub idle_ns: u64,
    /// Gang run time on a CPU owned by someone else (or nobody), neither
    /// fill nor finish.
    pub overlap_ns: u64,
    /// overlap_ns / gang_run_ns, 0 when no gang ran.
    pub overlap_fraction: f64,
    /// Gang run time on a CPU it does not own, flagged RUN_FILL.
    pub fill_ns: u64,
    /// Gang run time on a CPU it does not own, flagged RUN_FINISH: tasks
    /// the scheduler kept running there until they left an RCU read-side
    /// section or (while their gang was parked) a system call, since
    /// stopping them there could stall the node or their socket's drain.
    /// Not overlap: it is told apart so that overlap means only a late
    /// preemption, and shown so that a costly escape is seen.
    #[serde(default)]
    pub finish_ns: u64,
    /// EV_STALL events inside the window (see [`EventKind::Stall`]).
    #[serde(default)]
    pub stalls: u64,
    /// Time covered by stalls, summed over CPUs (each CPU's stalls merged,
    /// clipped to the window).
    #[serde(default)]
    pub stalled_ns: u64,
    /// The part of overlap_ns inside a stall of its CPU: a gang kept a CPU
    /// it no longer owned while the CPU could not run the scheduler.
    #[serde(default)]
    pub stall_overlap_ns: u64,
    /// (overlap_ns - stall_overlap_ns) / gang_run_ns: the overlap the
    /// scheduler is answerable for.
    #[serde(default)]
    pub overlap_outside_stalls_fraction: f64,
    /// EV_SWITCH events inside the window (`start_ns <= ts < end_ns`).
    pub switches: u64,
    pub slot_len_ms: SlotLenStats,
    pub switch_latency_us: LatencyStats,
    /// Events dropped as garbage: CPU out of range, or a gang id that makes
    /// no sense for the event kind.
    pub ignored_events: u64,
}

/// The result of [`analyze`]; what `--json FILE` writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub meta: TraceMeta,
    /// One list per CPU, in time order, non-overlapping, inside the window.
    pub cpus: Vec<Vec<Interval>>,
    pub switches: Vec<TracedSwitch>,
    pub summary: Summary,
}

/// Display name of a gang id: its name from the meta, or the number.
pub fn gang_label(meta: &TraceMeta, gang: i32) -> String {
    match meta.gang_names.get(&gang) {
        Some(name) => name.clone(),
        None => gang.to_string(),
    }
}
