//! The `bpf` mode (default): the sched_ext scheduler switches the slots.
//!
//! This is the mode's switching logic: it keeps the gang registry (gang
//! directories below the gang root, each with a small id, its index in the
//! BPF maps), the slot table in force and how it was made (standalone, the
//! coordinator's column by gang name, or an explicit schedule), the mode,
//! the gangs a freeze parked, and the trace sessions. It writes what it
//! decides into the loaded scheduler through `BpfScheduler`, which
//! src/scheduler.rs implements over the BPF skeleton (load, attach, maps,
//! ring buffers, syscall programs); the tests implement it over a fake.
//!
//! A switch is the BPF `switch_slot` program: it sets the slot in force and
//! kicks every CPU (bpf/scx_gang.bpf.c, do_switch). Standalone and
//! autonomous, the BPF timer switches every slot_ms itself (the flag
//! `slot_timer`); coordinated, only commands do. A coordinated switch
//! is two requests: Freeze parks the slot's gangs and waits for their
//! traffic to drain; the next Switch ends the park. The knob `park` says
//! how: `bpf` (default) asks the scheduler to keep them off every CPU
//! until the switch to the next generation (park.rs: a task inside a
//! system call first runs to its end, where it holds no socket lock);
//! `freezer` uses the cgroup freezer (freezer.rs) and the Switch (or any
//! table change) thaws them, BPF keeping them off the CPUs they do not own.
//!
//! - table.rs: the gang registry and the table in force, written into BPF.
//! - park.rs: the park in BPF, waited for and drained.
//! - trace.rs: the trace sessions.
//!
//! Known faults: the table is re-pushed whole on every gang change (and the
//! slot in force re-installed, a switch of the same slot); a gang whose id
//! was refused (all MAX_GANGS taken) runs as tasks of no gang.

pub mod park;
mod table;
#[cfg(test)]
mod tests;
pub mod trace;

use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use log::{info, warn};

use crate::bpf_intf::*;
use crate::clock::ClockShare;
use crate::control::{GangCpus, Response};
use crate::freezer::{self, FreezeHolds};
use crate::gangs::{self, GangRegistry};
use crate::knobs::{NodeKnobs, NodeStatus, Park, SharedKnobs};
use crate::slots::{GangId, SlotTable, MAX_GANGS};
use gang_wire::time::monotonic_ns;
use gang_wire::trace::{TraceEvent, TraceMeta};

use super::{FreezeJob, Mode, Switcher, Switching, YieldSink, IDLE_PERIOD};
use trace::TraceSessions;

/// How often the main loop wakes while tracing (ring buffer).
const TRACE_PERIOD: Duration = Duration::from_millis(10);
/// After a timed switch's instant the loop looks this often whether it
/// fired (to thaw what its freeze parked)...
const TIMED_THAW_POLL: Duration = Duration::from_millis(1);
/// ...and gives up on it this long after the instant (replaced in BPF by
/// an immediate switch, e.g. a table change).
const TIMED_SWITCH_LOST: Duration = Duration::from_secs(1);
/// A park in BPF ends by itself this long after its drain timeout, should
/// the switch never come (gangd lost between Freeze and Switch).
const BPF_PARK_SLACK: Duration = Duration::from_secs(5);

/// What the BPF mode asks of the loaded scheduler (its maps, programs and
/// ring buffers). src/scheduler.rs implements it over the skeleton.
pub trait BpfScheduler {
    fn nr_cpus(&self) -> u32;
    /// The scheduler exited (an error, or unregistered).
    fn exited(&self) -> bool;
    /// Tasks of cgroup `cgroup_id` (and below) are gang `gang`'s.
    fn add_gang(&mut self, cgroup_id: u64, gang: GangId) -> Result<()>;
    fn remove_gang(&mut self, cgroup_id: u64);
    /// Processes of each gang here, by gang id (a slot ends early when
    /// this many of its ranks yielded).
    fn set_ranks(&mut self, ranks: &[u32]);
    /// Writes the table (`masks`: each gang's slots; `nr_slots` counts a
    /// column's empty trailing slots) and returns the slot in force and its
    /// generation. The slot is not re-installed: see `switch_slot`.
    fn write_table(&mut self, table: &SlotTable, masks: &[u32], nr_slots: u32) -> (u32, u64);
    fn write_knobs(&mut self, knobs: &NodeKnobs);
    /// The BPF timer switches slots every slot_ms (standalone, autonomous).
    fn set_timer_switching(&mut self, on: bool);
    /// Makes `slot` the slot in force and kicks every CPU, at once or, with
    /// `at_ns` (CLOCK_MONOTONIC) in the future, on an absolute timer then.
    fn switch_slot(
        &mut self,
        slot: u32,
        gen: u64,
        cause: u32,
        slot_len_ns: u64,
        at_ns: u64,
    ) -> Result<()>;
    /// Tasks of a gang that lost its last slot stop waiting for one.
    fn rehome_gang(&mut self, gang: GangId) -> Result<()>;
    /// Lets the gang's yielded tasks run (to reach the freezer).
    fn release_parked(&mut self, gang: GangId) -> Result<()>;
    /// Parks the gangs of `mask` (bit = gang id) while generation `gen` is
    /// in force, at most until `until_ns` (CLOCK_MONOTONIC): they own no
    /// CPU, those running one are preempted. A mask of 0 ends a park.
    fn park_gangs(&mut self, mask: u64, gen: u64, until_ns: u64) -> Result<()>;
    /// Whether a CPU runs a task of a gang of a mask, asked from another
    /// thread (the freeze job's).
    fn running_probe(&self) -> Result<park::RunningProbe>;
    /// Attaches (or detaches) the programs that keep, per task, whether it
    /// is inside a system call; a park in BPF needs them.
    fn track_syscalls(&mut self, on: bool) -> Result<()>;
    /// The slot in force and its generation.
    fn current(&self) -> (u32, u64);
    /// The last timed switch that fired: (generation, CLOCK_MONOTONIC ns).
    fn timed_fired(&self) -> (u64, u64);
    /// The generation in which every rank of `gang` yielded last.
    fn done_gen(&self, gang: GangId) -> u64;
    /// Slot switches so far.
    fn switches(&self) -> u64;
    fn slot_ends(&self, gang: GangId) -> gang_slot_ends;
    /// Every CPU reports its state, and events are recorded.
    fn trace_start(&mut self) -> Result<()>;
    fn trace_stop(&mut self);
    /// The events recorded since the last call.
    fn take_events(&mut self) -> Vec<TraceEvent>;
    /// Answers the statistics requests waiting.
    fn serve_stats(&mut self, nr_gangs: u64, nr_slots: u64) -> Result<()>;
}

/// What the BPF mode needs besides the scheduler.
#[derive(Clone)]
pub struct BpfConfig {
    pub gang_root: PathBuf,
    /// Who holds which gang frozen, shared with the node agent.
    pub holds: FreezeHolds,
    /// What the slot clock server hands out (gang names and ids).
    pub clock: Arc<ClockShare>,
    pub on_all_yielded: Option<YieldSink>,
    /// The knob files' shared state, where the status is published.
    pub shared_knobs: Arc<SharedKnobs>,
}

pub struct BpfSwitcher<K: BpfScheduler> {
    bpf: K,
    cfg: BpfConfig,
    nr_cpus: u32,
    /// The knob values in force.
    applied: NodeKnobs,
    registry: GangRegistry,
    table: SlotTable,
    slot_masks: Vec<u32>,
    mode: Mode,
    /// The coordinator's column (Request::Column) by gang name, resolved
    /// again into `table` whenever gangs come and go.
    column: Option<Vec<Vec<GangCpus>>>,
    /// Slots the table has at least (a column's trailing slots may be empty
    /// here), so the coordinator's slot numbers stay valid.
    min_slots: usize,
    /// Gang directories parked by the last freeze, thawed at the next switch.
    frozen: Vec<PathBuf>,
    /// The last freeze parked gangs in BPF (park = bpf).
    bpf_parked: bool,
    traces: TraceSessions,
    /// Length of the slot the last switch command started (its clock's
    /// deadline), ns; 0: unknown.
    commanded_len_ns: u64,
    /// Processes of each gang here, by gang id (gang_ranks in BPF).
    ranks: Vec<u32>,
    /// A timed switch armed in BPF. The gangs of the last freeze are thawed
    /// once it fired.
    armed: Option<Armed>,
    /// The generation of an armed switch a switch at once replaced before
    /// it fired, until the follower is told (`timed_replaced`).
    replaced: Option<u64>,
}

/// A timed switch armed in BPF for a later instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Armed {
    gen: u64,
    /// CLOCK_MONOTONIC ns.
    at_ns: u64,
    slot: u32,
}

impl<K: BpfScheduler> BpfSwitcher<K> {
    /// Takes over a freshly attached scheduler (standalone, the knobs
    /// `knobs` written): thaws what a killed daemon left parked, registers
    /// the gangs and publishes the status.
    pub fn new(bpf: K, cfg: BpfConfig, knobs: NodeKnobs) -> Result<Self> {
        let nr_cpus = bpf.nr_cpus();
        let table = SlotTable::new(nr_cpus, knobs.housekeeping.clone());
        let mut sw = Self {
            bpf,
            cfg,
            nr_cpus,
            applied: knobs,
            registry: GangRegistry::new(),
            table,
            slot_masks: vec![0; MAX_GANGS],
            mode: Mode::Standalone,
            column: None,
            min_slots: 0,
            frozen: Vec::new(),
            bpf_parked: false,
            traces: TraceSessions::default(),
            commanded_len_ns: 0,
            ranks: vec![0; MAX_GANGS],
            armed: None,
            replaced: None,
        };
        // A daemon killed between a freeze and its switch left gangs parked
        // (suspended jobs stay frozen).
        for dir in gangs::scan(&sw.cfg.gang_root)?
            .iter()
            .map(|d| gangs::gang_path(&sw.cfg.gang_root, &d.name))
        {
            let _ = sw.cfg.holds.unpark(&dir);
        }
        sw.scan_gangs()?;
        sw.publish_status();
        Ok(sw)
    }

    pub fn scheduler(&mut self) -> &mut K {
        &mut self.bpf
    }

    /// The scheduler stops: open traces are answered so.
    pub fn stop(&mut self) {
        self.traces.abort("scheduler stopped during the trace");
    }

    /// A command after the node ran the table on its own timer: commands
    /// take over again, from the slot in force.
    fn take_command(&mut self) {
        if self.mode == Mode::Autonomous {
            self.set_mode(Mode::Coordinated);
            info!("switch commands resume");
        }
    }

    /// Ends the park of the last freeze: a park in BPF (unless a switch
    /// to another generation ended it already) and the gangs frozen (BPF
    /// keeps them off CPUs they do not own in the slot now in force),
    /// except suspended jobs.
    fn thaw(&mut self) {
        if std::mem::take(&mut self.bpf_parked) {
            if let Err(e) = self.bpf.park_gangs(0, 0, 0) {
                warn!("ending the park in BPF: {e:#}");
            }
        }
        self.thaw_frozen();
    }

    /// Thaws the gangs of the last freeze that the freezer parked. A park
    /// in BPF is left to the switch: it ends the park itself when it fires
    /// (after this call: a switch at once runs in the BPF timer), so the
    /// parked gang cannot run for a moment in its old slot.
    fn thaw_frozen(&mut self) {
        self.bpf_parked = false;
        for dir in self.frozen.drain(..) {
            match self.cfg.holds.unpark(&dir) {
                Ok(_) => {}
                // Its job ended and the agent removed the cgroup.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => warn!("thawing {}: {e}", dir.display()),
            }
        }
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
        self.bpf.set_timer_switching(mode != Mode::Coordinated);
        self.update_syscall_tracking();
    }

    /// System calls are tracked (a cost at every one of the node's) only
    /// while a park in BPF may come: coordinated, park = bpf, and a table
    /// with two slots or more. A lone job's node pays nothing. A task
    /// inside a system call when tracking starts counts as outside it
    /// until its next one (park.rs, known faults).
    pub(super) fn update_syscall_tracking(&mut self) {
        let on = self.mode == Mode::Coordinated
            && self.applied.park == Park::Bpf
            && self.nr_slots() >= 2;
        if let Err(e) = self.bpf.track_syscalls(on) {
            warn!("tracking system calls (for the park in BPF): {e:#}");
        }
    }

    fn switch_slot(&mut self, slot: u32, gen: u64, cause: u32) -> Result<()> {
        self.switch_slot_at(slot, gen, cause, 0)
    }

    /// `at_ns` 0: at once, which also replaces a timed switch armed in BPF.
    fn switch_slot_at(&mut self, slot: u32, gen: u64, cause: u32, at_ns: u64) -> Result<()> {
        if at_ns == 0 {
            if let Some(a) = self.armed.take() {
                if self.bpf.current().1 != a.gen {
                    self.replaced = Some(a.gen);
                }
            }
        }
        // Under commands the slot lasts what the coordinator said; under the
        // timer, slot_ms (the timer's own switches date their slots).
        let slot_len_ns = match self.mode {
            Mode::Coordinated => self.commanded_len_ns,
            _ => u64::from(self.applied.slot_ms) * 1_000_000,
        };
        self.bpf
            .switch_slot(slot, gen, cause, slot_len_ns, at_ns)
            .context("switch_slot")
    }

    /// Answers the traces whose time is over; tracing stops in BPF when
    /// none is left.
    fn collect_traces(&mut self) {
        let incoming = self.bpf.take_events();
        if self.traces.is_empty() {
            return;
        }
        let done = self.traces.collect(incoming, Instant::now());
        if !done.is_empty() {
            self.publish_status();
        }
        for t in done {
            let names = self
                .registry
                .by_id()
                .iter()
                .map(|g| (g.id as i32, g.name.clone()))
                .collect::<Vec<_>>();
            t.finish(monotonic_ns(), names);
        }
        if self.traces.is_empty() {
            self.bpf.trace_stop();
        }
    }

    fn publish_status(&self) {
        self.cfg.shared_knobs.set_status(self.status());
    }
}

impl<K: BpfScheduler> Switcher for BpfSwitcher<K> {
    fn switching(&self) -> Switching {
        Switching::Bpf
    }

    fn column(&mut self, slots: Vec<Vec<GangCpus>>, strict: bool) -> Result<()> {
        // A gang created a moment ago must be known.
        self.rescan();
        if strict {
            self.schedule(&slots)
        } else {
            self.install_column(slots)
        }
    }

    fn column_at_switch(
        &mut self,
        slots: Vec<Vec<GangCpus>>,
        slot: u32,
        gen: u64,
        slot_ms: u32,
    ) -> Result<()> {
        self.rescan();
        self.commanded_len_ns = u64::from(slot_ms) * 1_000_000;
        self.take_command();
        self.install_column_then(slots, Some((slot, gen)))
    }

    fn switch(&mut self, slot: u32, gen: u64, slot_ms: u32, at_ns: u64) -> Result<()> {
        self.commanded_len_ns = u64::from(slot_ms) * 1_000_000;
        if self.mode == Mode::Standalone {
            bail!("switch commands need an explicit schedule first (node is standalone)");
        }
        if slot as usize >= self.nr_slots() {
            bail!(
                "slot {slot} does not exist (the schedule has {} slots)",
                self.nr_slots()
            );
        }
        self.take_command();
        if at_ns > monotonic_ns() {
            self.switch_slot_at(slot, gen, gang_switch_cause_SWITCH_TIMED, at_ns)?;
            // The parked gangs own their CPUs until the timer fires.
            self.armed = Some(Armed { gen, at_ns, slot });
            return Ok(());
        }
        let cause = if at_ns == 0 {
            gang_switch_cause_SWITCH_COMMAND
        } else {
            gang_switch_cause_SWITCH_TIMED
        };
        self.switch_slot(slot, gen, cause)?;
        self.thaw_frozen();
        Ok(())
    }

    /// The node runs its explicit schedule on its own timer.
    fn autonomous(&mut self) -> Result<()> {
        if self.mode == Mode::Standalone {
            bail!("no explicit schedule to run on this node's timer (node is standalone)");
        }
        self.thaw();
        if self.mode != Mode::Autonomous {
            self.set_mode(Mode::Autonomous);
            info!(
                "running the schedule on this node's timer: {} slots of {} ms",
                self.nr_slots(),
                self.applied.slot_ms
            );
            self.warn_if_slots_shortened();
        }
        Ok(())
    }

    fn standalone(&mut self) -> Result<()> {
        self.thaw();
        self.set_mode(Mode::Standalone);
        self.column = None;
        self.min_slots = 0;
        self.table = self.standalone_table();
        self.push_table()
    }

    /// Freezes the gangs of the slot in force; the job waits for them to
    /// park and drain.
    fn freeze(&mut self, gen: u64, to_slot: Option<u32>, timeout: Duration) -> Result<FreezeJob> {
        if self.mode == Mode::Standalone {
            bail!("freeze needs an explicit schedule first (node is standalone)");
        }
        self.take_command();
        let (slot, cur_gen) = self.bpf.current();
        let placements = self.table.placements();
        // A gang of the next slot too runs on across the switch: not parked.
        let next = to_slot.and_then(|s| placements.get(s as usize));
        let gangs: Vec<(GangId, freezer::ParkGang)> = placements
            .get(slot as usize)
            .into_iter()
            .flat_map(|p| p.keys())
            .filter(|id| !next.is_some_and(|n| n.contains_key(id)))
            .filter_map(|&id| Some((id, self.registry.name_of(id)?)))
            .map(|(id, name)| {
                let gang = freezer::ParkGang {
                    name: name.to_string(),
                    dir: gangs::gang_path(&self.cfg.gang_root, name),
                    // Every rank yielded: BPF parks them until the gang's
                    // next slot, the freezer has nothing to add.
                    yielded: cur_gen != 0 && self.bpf.done_gen(id) == cur_gen,
                };
                (id, gang)
            })
            // A job that ended a moment ago (its cgroup removed) has
            // nothing to park.
            .filter(|(_, g)| g.dir.exists())
            .collect();
        if self.applied.park == Park::Bpf {
            // Yielded ranks are parked by the scheduler already.
            let mask = gangs
                .iter()
                .filter(|(_, g)| !g.yielded)
                .fold(0u64, |m, (id, _)| m | 1 << id);
            let start = Instant::now();
            let until = monotonic_ns() + (timeout + BPF_PARK_SLACK).as_nanos() as u64;
            self.bpf
                .park_gangs(mask, cur_gen, until)
                .context("park_gangs")?;
            self.bpf_parked = mask != 0;
            let running = self.bpf.running_probe().context("the CPUs' record")?;
            let gangs: Vec<freezer::ParkGang> = gangs.into_iter().map(|(_, g)| g).collect();
            return Ok(Box::new(move || {
                park::park_and_drain(gen, &gangs, mask, running, start, timeout)
            }));
        }
        for (id, g) in gangs.iter().filter(|(_, g)| !g.yielded) {
            // Ranks that yielded must run to reach the freezer.
            if let Err(e) = self.bpf.release_parked(*id) {
                warn!("gang {}: releasing its yielded tasks: {e:#}", g.name);
            }
            self.cfg.holds.park(&g.dir);
            self.frozen.push(g.dir.clone());
        }
        let gangs: Vec<freezer::ParkGang> = gangs.into_iter().map(|(_, g)| g).collect();
        Ok(Box::new(move || {
            freezer::park_and_drain(gen, &gangs, timeout)
        }))
    }

    fn trace(&mut self, seconds: f64, reply: Sender<Response>) -> Result<()> {
        let meta = TraceMeta {
            nr_cpus: self.nr_cpus,
            gang_names: self
                .registry
                .by_id()
                .iter()
                .map(|g| (g.id as i32, g.name.clone()))
                .collect(),
            start_ns: monotonic_ns(),
            end_ns: 0,
            node: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        if let Err(why) = self
            .traces
            .start(seconds, meta, reply.clone(), Instant::now())
        {
            let _ = reply.send(Response::error(why));
            return Ok(());
        }
        // Each session opens with the state of every CPU (harmless for others).
        if let Err(e) = self.bpf.trace_start() {
            warn!("trace_start: {e:#}");
        }
        Ok(())
    }

    fn all_yielded(&mut self, gang: i32, gen: u64) {
        if let (Some(name), Some(sink)) = (
            self.registry.name_of(gang as GangId),
            &self.cfg.on_all_yielded,
        ) {
            sink(name, gen);
        }
    }

    fn knobs_changed(&mut self, knobs: &NodeKnobs) -> Result<()> {
        self.apply_knobs(knobs)
    }

    fn poll(&mut self) -> Result<()> {
        self.collect_traces();
        self.bpf
            .serve_stats(self.registry.len() as u64, self.nr_slots() as u64)
    }

    fn period(&self) -> Duration {
        if self.traces.is_empty() {
            IDLE_PERIOD
        } else {
            TRACE_PERIOD
        }
    }

    /// A timed switch that fired: the gangs its freeze parked are thawed
    /// (not on the switch's path: they run only in their next slot).
    fn tick(&mut self, _now: Instant) {
        let Some(Armed { gen, at_ns, .. }) = self.armed else {
            return;
        };
        if self.bpf.current().1 == gen {
            self.armed = None;
            // The switch ended a park in BPF already.
            self.thaw_frozen();
        } else if monotonic_ns() > at_ns.saturating_add(TIMED_SWITCH_LOST.as_nanos() as u64) {
            warn!("the timed switch to generation {gen} did not fire; its parked gangs are thawed");
            self.armed = None;
            self.thaw();
        }
    }

    fn timed_fired(&self) -> Option<(u64, u64)> {
        let (gen, at) = self.bpf.timed_fired();
        (at != 0).then_some((gen, at))
    }

    fn timed_replaced(&mut self) -> Option<u64> {
        self.replaced.take()
    }

    fn next_wake(&self) -> Option<Instant> {
        let at_ns = self.armed?.at_ns;
        // Just after the instant: the timer fires in BPF, this only thaws.
        let wait = Duration::from_nanos(at_ns.saturating_sub(monotonic_ns()));
        Some(Instant::now() + wait.max(TIMED_THAW_POLL))
    }

    fn rescan(&mut self) {
        if let Err(e) = self.scan_gangs() {
            warn!("scanning {}: {e:#}", self.cfg.gang_root.display());
        }
    }

    fn status(&self) -> NodeStatus {
        let gangs = self
            .registry
            .by_id()
            .iter()
            .map(|g| {
                let ends = self.bpf.slot_ends(g.id);
                format!(
                    "{} {} slots={:#x} ranks={} yields={} voluntary={} forced={} early={}",
                    g.id,
                    g.name,
                    self.table.slot_mask(g.id),
                    self.ranks[g.id as usize],
                    ends.yields,
                    ends.voluntary,
                    ends.forced,
                    ends.early
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        NodeStatus {
            mode: self.mode.name().into(),
            current_slot: self.bpf.current().0,
            switches: self.bpf.switches(),
            nr_gangs: self.registry.len() as u32,
            nr_slots: self.nr_slots() as u32,
            gangs,
        }
    }

    fn ended(&self) -> bool {
        self.bpf.exited()
    }
}

impl<K: BpfScheduler> Drop for BpfSwitcher<K> {
    fn drop(&mut self) {
        self.thaw();
        info!("detaching scx_gang; the node goes back to the default scheduler");
    }
}
