//! How the node daemon switches its gangs (`scx_gang --switching MODE`):
//! where a slot switch happens on the node.
//!
//! Every mode is a `Switcher`: it installs a table (the coordinator's
//! column, an explicit schedule, or one slot per gang standalone), switches
//! to a slot on command or on its own timer, parks the slot's gangs for a
//! coordinated switch (Freeze, drained by drain.rs) and thaws them at the
//! next switch, and reports its status. One main loop (mainloop.rs) feeds
//! it the requests of the control socket and the agent, the knob changes,
//! the time, and the periodic rescan; one `handle` turns a `Request` into
//! the switcher's calls and the answer.
//!
//! - `bpf` (default, bpf/): the sched_ext scheduler (its plumbing, load,
//!   attach, maps and ring buffers, is src/scheduler.rs; the program is
//!   bpf/). A switch sets the slot and kicks every CPU: within
//!   microseconds only the new slot's gangs run, on the CPUs given to them.
//! - `signal` (signal.rs, sigstop.rs): no BPF scheduler. Classic
//!   signal-based gang scheduling, the baseline this project is measured
//!   against (Slurm's gang scheduler suspends jobs the same way): at a
//!   switch the outgoing gangs get SIGSTOP, the incoming ones SIGCONT, and
//!   the kernel's scheduler runs whatever is not stopped. It needs nothing
//!   from the kernel but signals, and costs what the BPF mode avoids: a
//!   signal per process per switch, a listing of every gang's cgroup.procs
//!   (again after each signal, for processes forked meanwhile), a wait until
//!   the stops took effect, and no coordination at CPU level (which CPU runs
//!   what is the kernel's choice; tasks of no gang compete with the slot's
//!   gangs as they like). Why SIGSTOP and not the cgroup freezer: SIGSTOP is
//!   what the existing gang schedulers use (the baseline must be theirs), no
//!   process can catch, block or ignore it, and the freezer stays free for
//!   what it already does here, suspending a job at the operator's request.
//! - `none` (none.rs): no BPF scheduler and no switching at all; the agent
//!   still starts the ranks. The kernel's scheduler, or any sched_ext
//!   scheduler the operator attached separately, runs them (the
//!   evaluation's EEVDF and scx_bpfland runs).
//! - lead.rs: the drain lead of timed switching (how long before a
//!   boundary the node starts parking) and the lateness of a timed switch
//!   (issue 12); pure logic, not wired into the switchers yet.
//!
//! Without BPF the daemon keeps its knob files, its control socket and the
//! node agent; knobs only BPF uses (fill, housekeeping_cpus,
//! min_other_share_pct, yield_lead_us) are accepted and ignored. Traces,
//! the slot clock (a rank that asks is told its gang is not scheduled here,
//! and the runtime library carries on without it) and the voluntary-yield
//! notices exist only with BPF.
//!
//! The words: the node's `Mode` is standalone (one slot per gang, the
//! node's timer switches), coordinated (gangd's table, gangd's switch
//! commands) or autonomous (gangd's table, the node's timer: gangd is
//! away). "Rotation" is gangd's cluster clock, never the node's timer.
//!
//! Known faults: the BPF mode's timer switches happen in BPF (the
//! `slot_timer` flag of the program), the signal mode's in `tick`;
//! the `none` mode accepts every request and does nothing, so a status
//! file there shows what gangd asked, not what runs.

pub mod bpf;
pub mod follow;
pub mod lead;
pub mod mainloop;
pub mod none;
pub mod signal;
pub mod sigstop;
pub mod stuck;
#[cfg(test)]
mod tests;
pub mod timed;
pub mod waiter;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use log::{info, warn};

use crate::control::{FrozenReport, GangCpus, Inbox, Request, Response};
use crate::cpulist::CpuList;
use crate::gangs;
use crate::knobs::{NodeKnobs, NodeStatus, SharedKnobs};
use crate::slots::{GangId, SlotTable, MAX_SLOTS};

use none::NoSwitching;
use signal::SignalNode;
use sigstop::{CgroupProcesses, ProcessSource};

/// How long the main loop sleeps at most when nothing happens (every
/// wake-up preempts a gang task somewhere, so it stays rare: a lone job's
/// node measured the loop at 50-70 wake-ups and 5-9 % of its one vCPU
/// under emulation with 50 ms, 15-35 with 100 ms; the scx schedulers poll
/// their exit once a second too). Control requests, knob writes,
/// statistics requests and gang changes wake it at once.
pub const IDLE_PERIOD: Duration = Duration::from_secs(1);
/// How often the gang root is scanned for new, emptied or removed gangs
/// (and held gangs for new processes), and the status files refreshed,
/// when the gang watch (gang_watch.rs) cannot run.
pub const SCAN_PERIOD: Duration = Duration::from_millis(100);
/// The same behind the gang watch: what it cannot see (a process forked
/// inside a gang, a cgroup below one) and the status files' counters.
pub const SLOW_SCAN_PERIOD: Duration = Duration::from_secs(1);

/// The node daemon's switching mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Switching {
    /// The sched_ext BPF scheduler: every CPU switches at once.
    #[default]
    Bpf,
    /// No BPF scheduler: SIGSTOP the outgoing gangs, then SIGCONT the
    /// incoming ones.
    Signal,
    /// No BPF scheduler, no switching: the kernel's scheduler (or one the
    /// operator attached) runs the ranks.
    None,
}

impl Switching {
    pub fn name(self) -> &'static str {
        match self {
            Switching::Bpf => "bpf",
            Switching::Signal => "signal",
            Switching::None => "none",
        }
    }

    /// Loads the BPF scheduler (and so needs sched_ext, with no other
    /// sched_ext scheduler attached).
    pub fn uses_bpf(self) -> bool {
        self == Switching::Bpf
    }

    /// What is wrong with running this mode so (e.g. `none` without a
    /// coordinator does nothing at all).
    pub fn check(self, coordinator: bool, stats: bool) -> Result<()> {
        if self == Switching::None && !coordinator {
            bail!(
                "--switching none needs --coordinator: without a cluster it would start no rank and switch nothing"
            );
        }
        if !self.uses_bpf() && stats {
            bail!(
                "--stats needs --switching bpf: the statistics are the BPF scheduler's (see the knob files instead)"
            );
        }
        Ok(())
    }
}

/// Who switches the node's slots now (the status file `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One slot per gang, switched on this node's timer every slot_ms.
    Standalone,
    /// An explicit slot table (the coordinator's); switches come by command.
    Coordinated,
    /// The explicit slot table, switched on this node's timer every
    /// slot_ms (the coordinator is away); the next command takes over again.
    Autonomous,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Standalone => "standalone",
            Mode::Coordinated => "coordinated",
            Mode::Autonomous => "autonomous",
        }
    }
}

/// The wait of a freeze, run on the freeze waiter (waiter.rs): its report.
pub type FreezeJob = Box<dyn FnOnce() -> io::Result<FrozenReport> + Send>;

/// Told (gang name, generation) when every rank of a gang on this node
/// yielded its slot (BPF only): the node agent tells gangd.
pub type YieldSink = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// One switching mode, as the main loop and `handle` drive it.
pub trait Switcher {
    /// Which mode this is.
    fn switching(&self) -> Switching;
    /// A coordinator's column (Request::Column), or with `strict` an
    /// explicit schedule (Request::Schedule). All or nothing.
    fn column(&mut self, slots: Vec<Vec<GangCpus>>, strict: bool) -> Result<()>;
    /// A plan's column at its first boundary (timed switching, follow.rs):
    /// the column installed and `slot` in force at once, as one step, so
    /// the old table rules up to the boundary and the new one from it. All
    /// or nothing. The BPF mode writes the table and switches with no
    /// re-switch of the slot in force between them.
    fn column_at_switch(
        &mut self,
        slots: Vec<Vec<GangCpus>>,
        slot: u32,
        gen: u64,
        slot_ms: u32,
    ) -> Result<()> {
        self.column(slots, false)?;
        self.switch(slot, gen, slot_ms, 0)
    }
    /// A switch command: `slot` is in force from now (or from `at_ns` on
    /// this node's CLOCK_MONOTONIC, if later), for `slot_ms` (0: unknown).
    fn switch(&mut self, slot: u32, gen: u64, slot_ms: u32, at_ns: u64) -> Result<()>;
    /// Become autonomous: the table in force on this node's timer.
    fn autonomous(&mut self) -> Result<()>;
    /// Back to standalone: one slot per gang, on this node's timer.
    fn standalone(&mut self) -> Result<()>;
    /// Parks the gangs of the slot in force, but those placed in `to_slot`
    /// too (they run on across the switch); the returned job waits for
    /// them to park and drain (on the freeze waiter).
    fn freeze(&mut self, gen: u64, to_slot: Option<u32>, timeout: Duration) -> Result<FreezeJob>;
    /// Records a trace of `seconds` and answers `reply` with it once done;
    /// Err: refused (the caller answers).
    fn trace(&mut self, _seconds: f64, _reply: Sender<Response>) -> Result<()> {
        bail!(
            "trace needs --switching bpf (this node runs --switching {}: no BPF scheduler records what runs where)",
            self.switching().name()
        )
    }
    /// Every rank of gang `gang` (BPF id) yielded in generation `gen`.
    fn all_yielded(&mut self, _gang: i32, _gen: u64) {}
    /// The knob values changed.
    fn knobs_changed(&mut self, knobs: &NodeKnobs) -> Result<()>;
    /// Work of every loop turn before the wait (events, traces, stats).
    fn poll(&mut self) -> Result<()> {
        Ok(())
    }
    /// The longest wait of the loop now.
    fn period(&self) -> Duration {
        IDLE_PERIOD
    }
    /// The node's own timer: switches that are due at `now`.
    fn tick(&mut self, _now: Instant) {}
    /// When `tick` has work next, if ever.
    fn next_wake(&self) -> Option<Instant> {
        None
    }
    /// The last timed switch (Switch with at_ns) that fired: (generation,
    /// CLOCK_MONOTONIC ns when it did). None if none did, or without BPF.
    fn timed_fired(&self) -> Option<(u64, u64)> {
        None
    }
    /// The generation of a timed switch that a switch at once (a table
    /// without its slot, standalone) replaced before it fired, once: it
    /// will never fire. None without BPF.
    fn timed_replaced(&mut self) -> Option<u64> {
        None
    }
    /// Periodic upkeep (new gangs, new processes), every SCAN_PERIOD.
    fn rescan(&mut self);
    fn status(&self) -> NodeStatus;
    /// The switcher cannot go on (the BPF scheduler exited).
    fn ended(&self) -> bool {
        false
    }
}

/// A coordinator's column must be valid as a whole, in every mode and
/// whichever of its gangs are here (what one node refuses, every node
/// refuses): at most MAX_SLOTS slots, good CPU lists, no CPU given twice in
/// a slot nor one `empty` (an empty table) keeps back (housekeeping).
pub fn check_column(mut empty: SlotTable, slots: &[Vec<GangCpus>]) -> Result<()> {
    if slots.len() > MAX_SLOTS {
        bail!("{} slots: at most {MAX_SLOTS} are supported", slots.len());
    }
    let nr_cpus = empty.nr_cpus();
    let mut ids: BTreeMap<&str, GangId> = BTreeMap::new();
    for (s, placements) in slots.iter().enumerate() {
        for p in placements {
            let next = ids.len() as GangId;
            let id = *ids.entry(p.gang.as_str()).or_insert(next);
            let cpus = CpuList::parse(&p.cpus, nr_cpus).map_err(anyhow::Error::msg);
            cpus.and_then(|c| Ok(empty.place(id, s, &c)?))
                .with_context(|| format!("placing gang {} in slot {s}", p.gang))?;
        }
    }
    Ok(())
}

/// Takes one request; a freeze is answered by the freeze waiter (waiter.rs) once its
/// wait is over (the loop goes on meanwhile), a trace by the switcher when
/// it is recorded, everything else at once. The status files are refreshed
/// before the answer: whoever reads `mode` after a request returns sees what
/// the request did.
pub fn handle(
    sw: &mut dyn Switcher,
    request: Request,
    reply: Sender<Response>,
    knobs: &SharedKnobs,
) {
    let result = match request {
        Request::Trace { seconds } => match sw.trace(seconds, reply.clone()) {
            Ok(()) => return,
            Err(e) => Err(e),
        },
        Request::Freeze {
            gen,
            drain_timeout_ms,
            to_slot,
        } => match sw.freeze(gen, to_slot, Duration::from_millis(drain_timeout_ms)) {
            Ok(job) => {
                waiter::run(move || {
                    let response = match job() {
                        Ok(report) => Response {
                            ok: true,
                            frozen: Some(report),
                            ..Default::default()
                        },
                        Err(e) => Response::error(format!("freeze: {e}")),
                    };
                    let _ = reply.send(response);
                });
                return;
            }
            Err(e) => Err(e),
        },
        Request::Column { slots } => sw.column(slots, false),
        Request::Schedule { slots } => sw.column(slots, true),
        Request::Switch {
            slot,
            gen,
            slot_ms,
            at_ns,
        } => sw.switch(slot, gen, slot_ms, at_ns),
        Request::Autonomous => sw.autonomous(),
        // Taken by the main loop (follow.rs) before they get here.
        Request::Plan { .. } | Request::Unplan => {
            Err(anyhow::anyhow!("plans are followed by the main loop only"))
        }
        Request::Standalone => sw.standalone(),
    };
    knobs.set_status(sw.status());
    let _ = reply.send(match result {
        Ok(()) => Response::ok(),
        Err(e) => Response::error(format!("{e:#}")),
    });
}

/// What the `signal` and `none` modes need.
pub struct LoopConfig {
    pub mode: Switching,
    pub gang_root: PathBuf,
    /// Watch the gang root (gang_watch.rs) or rescan it every 100 ms.
    pub gang_watch: bool,
    pub nr_cpus: u32,
    pub knobs: Arc<SharedKnobs>,
    /// The main loop's inbox (its sending end: the freeze waiter wakes it).
    pub inbox: Sender<Inbox>,
}

/// Before the agent starts: a signal-mode daemon that was killed (SIGKILL
/// leaves it no time to clean up) may have left processes stopped: they are
/// continued. Frozen cgroups are left as they are: a job may be suspended
/// by the operator, and SIGCONT does not thaw it. (A BPF-mode daemon killed
/// between a freeze and its switch leaves its gangs frozen: the BPF mode
/// thaws them when it starts again; the other modes do not.)
pub fn recover(gang_root: &Path) {
    let source = CgroupProcesses::new(gang_root);
    let Ok(dirs) = gangs::scan(gang_root) else {
        return;
    };
    for d in dirs {
        let pids = source.processes(&d.name).unwrap_or_default();
        let n = sigstop::continue_stopped(&pids);
        if n > 0 {
            warn!(
                "gang {}: {n} processes were left stopped (a daemon killed mid-slot?): continued",
                d.name
            );
        }
    }
}

/// The daemon without BPF (`signal`, `none`): the main loop until
/// `shutdown`. On the way out every process the node stopped is continued.
pub fn run_without_bpf(
    cfg: &LoopConfig,
    inbox: &Receiver<Inbox>,
    shutdown: &AtomicBool,
) -> Result<()> {
    let source = CgroupProcesses::new(&cfg.gang_root);
    let applied = cfg.knobs.generation();
    let slot_ms = cfg.knobs.snapshot().slot_ms;
    let mut sw: Box<dyn Switcher> = match cfg.mode {
        Switching::Signal => Box::new(SignalNode::new(source, cfg.nr_cpus, slot_ms)),
        Switching::None => Box::new(NoSwitching::new(source)),
        Switching::Bpf => bail!("the bpf mode needs the BPF scheduler loaded (src/scheduler.rs)"),
    };
    info!(
        "scx_gang --switching {}: no BPF scheduler; gang root {}; the ranks run under {}",
        cfg.mode.name(),
        cfg.gang_root.display(),
        kernel_scheduler()
    );
    sw.rescan();
    cfg.knobs.set_status(sw.status());
    mainloop::run(
        sw.as_mut(),
        inbox,
        cfg.inbox.clone(),
        shutdown,
        &cfg.knobs,
        applied,
        None,
        cfg.gang_watch.then_some(cfg.gang_root.as_path()),
    )?;
    drop(sw);
    info!("scx_gang stopping: every process it stopped was continued");
    Ok(())
}

/// Which scheduler the kernel runs the ranks with (for the log: an
/// evaluation run says what it measured).
fn kernel_scheduler() -> String {
    let sysfs = Path::new("/sys/kernel/sched_ext");
    let state = std::fs::read_to_string(sysfs.join("state")).unwrap_or_default();
    if state.trim() == "enabled" {
        let ops = std::fs::read_to_string(sysfs.join("root/ops")).unwrap_or_default();
        return format!("the sched_ext scheduler {:?}", ops.trim());
    }
    "the kernel's fair scheduler (no sched_ext scheduler attached)".into()
}
