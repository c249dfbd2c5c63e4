//! How the node daemon switches its gangs (`scx_gang --switching MODE`).
//!
//! - `bpf` (default): the sched_ext scheduler (src/scheduler.rs, bpf/). A
//!   switch sets the slot and kicks every CPU: within microseconds only the
//!   new slot's gangs run, on the CPUs given to them.
//! - `signal`: no BPF scheduler. Classic signal-based gang scheduling, the
//!   baseline this project is measured against (Slurm's gang scheduler
//!   suspends jobs the same way): at a switch the outgoing gangs get
//!   SIGSTOP, the incoming ones SIGCONT, and the kernel's scheduler runs
//!   whatever is not stopped. It needs nothing from the kernel but signals,
//!   and costs what the BPF mode avoids: a signal per process per switch, a
//!   listing of every gang's cgroup.procs (again after each signal, for
//!   processes forked meanwhile), a wait until the stops took effect, and no
//!   coordination at CPU level (which CPU runs what is the kernel's choice;
//!   tasks of no gang compete with the slot's gangs as they like). Why
//!   SIGSTOP and not the cgroup freezer: SIGSTOP is what the existing gang
//!   schedulers use (the baseline must be theirs), no process can catch,
//!   block or ignore it, and the freezer stays free for what it already
//!   does here, suspending a job at the operator's request.
//! - `none`: no BPF scheduler and no switching at all; the agent still
//!   starts the ranks. The kernel's scheduler, or any sched_ext scheduler
//!   the operator attached separately, runs them (the evaluation's EEVDF and
//!   scx_bpfland runs).
//!
//! Without BPF the daemon keeps its knob files, its control socket and the
//! node agent; knobs only BPF uses (fill, housekeeping_cpus,
//! min_other_share_pct, yield_lead_us) are accepted and ignored. Traces,
//! the slot clock (a rank that asks is told its gang is not scheduled here,
//! and the runtime library carries on without it) and the voluntary-yield
//! notices exist only with BPF.
//!
//! - signal.rs: stopping and continuing a gang's processes.
//! - node.rs: the signal mode's schedule, switches, freeze and timer.
//! - none.rs: the none mode's node, which does nothing.
//! - this file: the mode flag, and the main loop of both modes.

pub mod node;
pub mod none;
pub mod signal;
#[cfg(test)]
mod tests;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use log::{info, warn};

use crate::control::{FrozenReport, Inbox, Placement, Request, Response};
use crate::gangs;
use crate::knobs::{NodeStatus, SharedKnobs};

use node::SignalNode;
use none::Passive;
use signal::{CgroupProcesses, ProcessSource};

/// How long the main loop sleeps at most when nothing happens.
const IDLE_PERIOD: Duration = Duration::from_millis(50);
/// How often held gangs are checked for new processes (and the standalone
/// table for new gangs), and the status files refreshed.
const SCAN_PERIOD: Duration = Duration::from_millis(100);

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

/// The wait of a freeze, run on a thread of its own: its report.
pub type FreezeJob = Box<dyn FnOnce() -> io::Result<FrozenReport> + Send>;

/// What a node does with the scheduling requests when no BPF scheduler
/// runs (the `signal` and `none` modes).
pub trait LocalSwitching {
    /// A coordinator's column (Request::Column), or with `strict` an
    /// explicit schedule (Request::Schedule).
    fn column(&mut self, slots: &[Vec<Placement>], strict: bool) -> Result<()>;
    fn switch(&mut self, slot: u32, gen: u64) -> Result<()>;
    fn rotate(&mut self) -> Result<()>;
    fn standalone(&mut self) -> Result<()>;
    fn freeze(&mut self, gen: u64, timeout: Duration) -> Result<FreezeJob>;
    /// The node's own timer.
    fn tick(&mut self, now: Instant);
    fn next_wake(&self) -> Option<Instant>;
    /// Periodic upkeep (new gangs, new processes).
    fn rescan(&mut self);
    fn set_slot_ms(&mut self, slot_ms: u32);
    fn status(&self) -> NodeStatus;
}

impl<S: ProcessSource> LocalSwitching for SignalNode<S> {
    fn column(&mut self, slots: &[Vec<Placement>], strict: bool) -> Result<()> {
        SignalNode::column(self, slots, strict)
    }
    fn switch(&mut self, slot: u32, gen: u64) -> Result<()> {
        SignalNode::switch(self, slot, gen)
    }
    fn rotate(&mut self) -> Result<()> {
        SignalNode::rotate(self)
    }
    fn standalone(&mut self) -> Result<()> {
        SignalNode::standalone(self)
    }
    fn freeze(&mut self, gen: u64, timeout: Duration) -> Result<FreezeJob> {
        SignalNode::freeze(self, gen, timeout)
    }
    fn tick(&mut self, now: Instant) {
        SignalNode::tick(self, now)
    }
    fn next_wake(&self) -> Option<Instant> {
        SignalNode::next_wake(self)
    }
    fn rescan(&mut self) {
        SignalNode::rescan(self)
    }
    fn set_slot_ms(&mut self, slot_ms: u32) {
        SignalNode::set_slot_ms(self, slot_ms)
    }
    fn status(&self) -> NodeStatus {
        SignalNode::status(self)
    }
}

/// Takes one request; a freeze is answered by a thread of its own once its
/// wait is over (the loop goes on meanwhile), everything else at once. The
/// status files are refreshed before the answer: whoever reads `mode` after
/// a request returns sees what the request did.
pub fn handle(
    local: &mut dyn LocalSwitching,
    mode: Switching,
    request: Request,
    reply: Sender<Response>,
    knobs: &SharedKnobs,
) {
    let result = match request {
        Request::Trace { .. } => Err(anyhow::anyhow!(
            "trace needs --switching bpf (this node runs --switching {}: no BPF scheduler records what runs where)",
            mode.name()
        )),
        Request::Freeze {
            gen,
            drain_timeout_ms,
        } => match local.freeze(gen, Duration::from_millis(drain_timeout_ms)) {
            Ok(job) => {
                std::thread::spawn(move || {
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
        Request::Column { slots } => local.column(&slots, false),
        Request::Schedule { slots } => local.column(&slots, true),
        Request::Switch { slot, gen, .. } => local.switch(slot, gen),
        Request::Rotate => local.rotate(),
        Request::Standalone => local.standalone(),
    };
    knobs.set_status(local.status());
    let _ = reply.send(match result {
        Ok(()) => Response::ok(),
        Err(e) => Response::error(format!("{e:#}")),
    });
}

/// What the main loop of the `signal` and `none` modes needs.
pub struct LoopConfig {
    pub mode: Switching,
    pub gang_root: std::path::PathBuf,
    pub nr_cpus: u32,
    pub knobs: Arc<SharedKnobs>,
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
        let n = signal::continue_stopped(&pids);
        if n > 0 {
            warn!(
                "gang {}: {n} processes were left stopped (a daemon killed mid-slot?): continued",
                d.name
            );
        }
    }
}

/// The daemon's main loop without BPF: requests from the control socket
/// and the agent, the node's timer, the periodic rescan and the status
/// files, until `shutdown`. On the way out every process the node stopped
/// is continued.
pub fn run(cfg: &LoopConfig, inbox: &Receiver<Inbox>, shutdown: &AtomicBool) -> Result<()> {
    let source = CgroupProcesses::new(&cfg.gang_root);
    let mut applied = cfg.knobs.generation();
    let slot_ms = cfg.knobs.snapshot().slot_ms;
    let mut local: Box<dyn LocalSwitching> = match cfg.mode {
        Switching::Signal => Box::new(SignalNode::new(source, cfg.nr_cpus, slot_ms)),
        Switching::None => Box::new(Passive::new(source)),
        Switching::Bpf => bail!("the bpf mode runs the BPF scheduler's own loop"),
    };
    info!(
        "scx_gang --switching {}: no BPF scheduler; gang root {}; the ranks run under {}",
        cfg.mode.name(),
        cfg.gang_root.display(),
        kernel_scheduler()
    );
    local.rescan();
    cfg.knobs.set_status(local.status());
    let mut last_scan = Instant::now();
    while !shutdown.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut wait = IDLE_PERIOD.min(SCAN_PERIOD.saturating_sub(last_scan.elapsed()));
        if let Some(at) = local.next_wake() {
            wait = wait.min(at.saturating_duration_since(now));
        }
        if let Ok(msg) = inbox.recv_timeout(wait) {
            take(local.as_mut(), cfg, msg);
        }
        while let Ok(msg) = inbox.try_recv() {
            take(local.as_mut(), cfg, msg);
        }
        if cfg.knobs.generation() != applied {
            applied = cfg.knobs.generation();
            local.set_slot_ms(cfg.knobs.snapshot().slot_ms);
        }
        local.tick(Instant::now());
        if last_scan.elapsed() >= SCAN_PERIOD {
            last_scan = Instant::now();
            local.rescan();
            cfg.knobs.set_status(local.status());
        }
    }
    drop(local);
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

fn take(local: &mut dyn LocalSwitching, cfg: &LoopConfig, msg: Inbox) {
    match msg {
        Inbox::Request(p) => handle(local, cfg.mode, p.request, p.reply, &cfg.knobs),
        // The loop applies knob changes.
        Inbox::KnobsChanged => {}
        // Only the BPF scheduler sends these.
        Inbox::AllYielded { .. } => {}
    }
}
