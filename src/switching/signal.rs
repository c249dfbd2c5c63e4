//! The `signal` mode's node: the schedule by gang name, the slot in force,
//! and what a switch, a freeze or the node's timer stops and continues
//! (the stopping itself: sigstop.rs).
//!
//! The table is the coordinator's column (slots of placements by gang
//! name; the CPUs are checked like the BPF mode checks them but otherwise
//! unused: a stopped process gives up every CPU, a continued one goes
//! wherever the kernel puts it) or, standalone, one slot per gang found
//! below the gang root. At any moment the gangs of the table that are not
//! in the slot in force are held stopped; so are the slot's own gangs after
//! a freeze, until the next switch. A gang in no slot is never stopped, and
//! one the table drops is continued at once.
//!
//! A switch stops the outgoing gangs first and waits (briefly) until they
//! really stopped, then continues the incoming ones: no moment where both
//! run, like the BPF mode. Gangs that gain processes while held (a rank
//! started late, a fork) are caught by the periodic `rescan`.
//!
//! Known fault: the wait for stopped processes polls /proc (a switch costs
//! a read per process), and a process stuck in the kernel delays the
//! incoming gangs by SWITCH_STOP_WAIT.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use log::{info, warn};

use crate::control::GangCpus;
use crate::cpulist::CpuList;
use crate::drain;
use crate::knobs::{NodeKnobs, NodeStatus};
use crate::slots::SlotTable;

use super::sigstop::{wait_parked, ProcessSource, Signaller};
use super::{check_column, FreezeJob, Mode, Switcher, Switching};

/// Longest wait at a switch for the outgoing gangs to stop before the
/// incoming ones are continued (a process stuck in the kernel, e.g. on a
/// dead file server, must not hold every switch).
const SWITCH_STOP_WAIT: Duration = Duration::from_millis(50);

pub struct SignalNode<S: ProcessSource> {
    signaller: Signaller<S>,
    nr_cpus: u32,
    mode: Mode,
    /// slots[s]: the gangs of slot s, by name.
    table: Vec<Vec<String>>,
    cur: usize,
    gen: u64,
    switches: u64,
    /// Gangs that must be stopped now.
    held: BTreeSet<String>,
    slot_len: Duration,
    /// The timer's next switch (standalone, autonomous).
    next_timer_switch: Option<Instant>,
}

impl<S: ProcessSource> SignalNode<S> {
    /// A standalone node (its table is filled by the first `rescan`).
    pub fn new(source: S, nr_cpus: u32, slot_ms: u32) -> Self {
        Self {
            signaller: Signaller::new(source),
            nr_cpus,
            mode: Mode::Standalone,
            table: Vec::new(),
            cur: 0,
            gen: 0,
            switches: 0,
            held: BTreeSet::new(),
            slot_len: Duration::from_millis(slot_ms.into()),
            next_timer_switch: None,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn current_slot(&self) -> usize {
        self.cur
    }

    pub fn switches(&self) -> u64 {
        self.switches
    }

    pub fn table(&self) -> &[Vec<String>] {
        &self.table
    }

    pub fn signaller(&self) -> &Signaller<S> {
        &self.signaller
    }

    /// The slot length of the node's timer, from the next slot on.
    pub fn set_slot_ms(&mut self, slot_ms: u32) {
        self.slot_len = Duration::from_millis(slot_ms.into());
    }

    /// Every gang of the table (in any slot).
    fn table_gangs(&self) -> BTreeSet<String> {
        self.table.iter().flatten().cloned().collect()
    }

    /// Makes `slot` the slot in force: stops the gangs of the table that
    /// are not in it (and waits for them to stop), then continues every
    /// other gang this node stopped (incoming, dropped from the table, or
    /// parked by a freeze).
    fn enforce(&mut self, slot: usize) {
        let slot_gangs: BTreeSet<String> = self
            .table
            .get(slot)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let held: BTreeSet<String> = self
            .table_gangs()
            .difference(&slot_gangs)
            .cloned()
            .collect();
        let mut stopping = Vec::new();
        for gang in &held {
            let report = self.signaller.stop(gang);
            // A suspended job's processes stop only once it is thawed.
            if !self.signaller.source().is_frozen(gang) {
                stopping.extend(report.newly_stopped);
            }
        }
        if !wait_parked(&stopping, Instant::now() + SWITCH_STOP_WAIT) {
            warn!(
                "slot {slot}: outgoing processes still running after {} ms; continuing the incoming gangs anyway",
                SWITCH_STOP_WAIT.as_millis()
            );
        }
        for gang in self.signaller.stopped_gangs() {
            if !held.contains(&gang) {
                self.signaller.continue_gang(&gang);
            }
        }
        self.held = held;
        self.cur = slot;
    }

    fn switch_to(&mut self, slot: usize, gen: u64) {
        self.enforce(slot);
        self.gen = gen;
        self.switches += 1;
    }

    /// Installs a new table and re-installs the slot in force in it (the
    /// first slot if it has no such slot any more).
    fn install(&mut self, mode: Mode, table: Vec<Vec<String>>) {
        self.mode = mode;
        self.table = table;
        let slot = if self.cur < self.table.len() {
            self.cur
        } else {
            0
        };
        self.enforce(slot);
        self.next_timer_switch = match mode {
            Mode::Coordinated => None,
            _ => self
                .next_timer_switch
                .or(Some(Instant::now() + self.slot_len)),
        };
    }

    /// The coordinator's column (Request::Column), or with `strict` an
    /// explicit schedule (Request::Schedule: every gang must have
    /// processes here). All or nothing: a refused table leaves the old one.
    pub fn column(&mut self, slots: &[Vec<GangCpus>], strict: bool) -> Result<()> {
        let table = self.check(slots)?;
        if strict {
            let known: BTreeSet<String> = self
                .signaller
                .source()
                .gangs()
                .context("listing the gangs")?
                .into_iter()
                .collect();
            if let Some(unknown) = table.iter().flatten().find(|g| !known.contains(*g)) {
                bail!("gang {unknown:?} is not known (no populated cgroup of that name below the gang root)");
            }
        }
        self.install(Mode::Coordinated, table);
        Ok(())
    }

    /// A column must be valid as a whole, like in the BPF mode: good CPU
    /// lists, no CPU given twice in a slot, at most MAX_SLOTS slots.
    fn check(&self, slots: &[Vec<GangCpus>]) -> Result<Vec<Vec<String>>> {
        check_column(SlotTable::new(self.nr_cpus, CpuList::new()), slots)?;
        Ok(slots
            .iter()
            .map(|s| {
                // A gang may have several placements in a slot: once is enough.
                let mut names: Vec<String> = Vec::new();
                for p in s {
                    if !names.contains(&p.gang) {
                        names.push(p.gang.clone());
                    }
                }
                names
            })
            .collect())
    }

    /// A take-over by the coordinator's commands after the node ran the
    /// table on its own timer.
    fn take_command(&mut self) {
        if self.mode == Mode::Autonomous {
            self.mode = Mode::Coordinated;
            self.next_timer_switch = None;
            info!("switch commands resume");
        }
    }

    pub fn switch(&mut self, slot: u32, gen: u64) -> Result<()> {
        if self.mode == Mode::Standalone {
            bail!("switch commands need an explicit schedule first (node is standalone)");
        }
        if slot as usize >= self.table.len() {
            bail!(
                "slot {slot} does not exist (the schedule has {} slots)",
                self.table.len()
            );
        }
        self.take_command();
        self.switch_to(slot as usize, gen);
        Ok(())
    }

    /// Run the coordinator's table on this node's timer
    /// (Request::Autonomous), continuing what a freeze left stopped.
    pub fn autonomous(&mut self) -> Result<()> {
        if self.mode == Mode::Standalone {
            bail!("no explicit schedule to run on this node's timer (node is standalone)");
        }
        self.enforce(self.cur);
        if self.mode != Mode::Autonomous {
            self.mode = Mode::Autonomous;
            self.next_timer_switch = Some(Instant::now() + self.slot_len);
            info!(
                "running the schedule on this node's timer: {} slots of {} ms",
                self.table.len(),
                self.slot_len.as_millis()
            );
        }
        Ok(())
    }

    /// Back to standalone: one slot per gang found here, on the timer.
    pub fn standalone(&mut self) -> Result<()> {
        let gangs = self
            .signaller
            .source()
            .gangs()
            .context("listing the gangs")?;
        self.install(
            Mode::Standalone,
            gangs.into_iter().map(|g| vec![g]).collect(),
        );
        Ok(())
    }

    /// The first half of a coordinated switch: stops the gangs of the slot
    /// in force now and returns the wait for them to park and for their TCP
    /// traffic to drain (within `timeout`), to run on a thread of its own.
    pub fn freeze(
        &mut self,
        gen: u64,
        to_slot: Option<u32>,
        timeout: Duration,
    ) -> Result<FreezeJob> {
        if self.mode == Mode::Standalone {
            bail!("freeze needs an explicit schedule first (node is standalone)");
        }
        let start = Instant::now();
        self.take_command();
        // A gang of the next slot too runs on: not stopped.
        let next: Vec<String> = to_slot
            .and_then(|s| self.table.get(s as usize).cloned())
            .unwrap_or_default();
        let gangs: Vec<String> = self
            .table
            .get(self.cur)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|g| !next.contains(g))
            .collect();
        let mut pids = Vec::new();
        let mut dirs = Vec::new();
        for gang in &gangs {
            self.signaller.stop(gang);
            self.held.insert(gang.clone());
            if !self.signaller.source().is_frozen(gang) {
                pids.extend(self.signaller.stopped_of(gang));
            }
            dirs.extend(self.signaller.source().cgroup_dir(gang));
        }
        // The drain half is every mode's (drain.rs): a stopped process,
        // like a frozen one, holds no socket lock.
        Ok(Box::new(move || {
            let parked = wait_parked(&pids, start + timeout);
            drain::drain_parked(gen, gangs, parked, &dirs, start, timeout)
        }))
    }

    /// The timer's switch, if due (standalone or autonomous, two slots or
    /// more).
    pub fn tick(&mut self, now: Instant) {
        let Some(due) = self.next_timer_switch else {
            return;
        };
        if now < due {
            return;
        }
        if self.table.len() >= 2 {
            let next = (self.cur + 1) % self.table.len();
            self.switch_to(next, self.gen + 1);
        }
        // Slots are counted from now: a late wake-up does not shorten the next.
        self.next_timer_switch = Some(now + self.slot_len);
    }

    pub fn next_wake(&self) -> Option<Instant> {
        self.next_timer_switch
    }

    /// Periodic upkeep: standalone, a slot for every gang and none for gone
    /// ones; processes that joined held gangs are stopped; exited ones are
    /// forgotten.
    pub fn rescan(&mut self) {
        if self.mode == Mode::Standalone {
            match self.signaller.source().gangs() {
                Ok(gangs) => {
                    let table: Vec<Vec<String>> = gangs.into_iter().map(|g| vec![g]).collect();
                    if table != self.table {
                        info!(
                            "standalone: {} gangs, one slot each: {}",
                            table.len(),
                            table
                                .iter()
                                .flatten()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                        self.install(Mode::Standalone, table);
                    }
                }
                Err(e) => warn!("listing the gangs: {e}"),
            }
        }
        for gang in self.held.clone() {
            self.signaller.stop(&gang);
        }
        self.signaller.forget_exited();
    }

    pub fn status(&self) -> NodeStatus {
        let gangs: Vec<String> = self.table_gangs().into_iter().collect();
        let lines = gangs
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mask = self
                    .table
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.contains(g))
                    .fold(0u64, |m, (s, _)| m | 1 << s);
                let ranks = self
                    .signaller
                    .source()
                    .processes(g)
                    .map(|p| p.len())
                    .unwrap_or(0);
                format!(
                    "{i} {g} slots={mask:#x} ranks={ranks} stopped={}",
                    self.signaller.stopped_of(g).len()
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        NodeStatus {
            mode: self.mode.name().into(),
            current_slot: self.cur as u32,
            switches: self.switches,
            nr_gangs: gangs.len() as u32,
            nr_slots: self.table.len() as u32,
            gangs: lines,
        }
    }
}

impl<S: ProcessSource> Switcher for SignalNode<S> {
    fn switching(&self) -> Switching {
        Switching::Signal
    }
    fn column(&mut self, slots: Vec<Vec<GangCpus>>, strict: bool) -> Result<()> {
        SignalNode::column(self, &slots, strict)
    }
    /// The slot lasts until the next command: slot_ms matters only to the
    /// BPF mode's slot clock.
    fn switch(&mut self, slot: u32, gen: u64, _slot_ms: u32, at_ns: u64) -> Result<()> {
        if at_ns != 0 {
            bail!("timed switches (at_ns) need --switching bpf: the signal mode switches only on command or its own timer");
        }
        SignalNode::switch(self, slot, gen)
    }
    fn autonomous(&mut self) -> Result<()> {
        SignalNode::autonomous(self)
    }
    fn standalone(&mut self) -> Result<()> {
        SignalNode::standalone(self)
    }
    fn freeze(&mut self, gen: u64, to_slot: Option<u32>, timeout: Duration) -> Result<FreezeJob> {
        SignalNode::freeze(self, gen, to_slot, timeout)
    }
    fn knobs_changed(&mut self, knobs: &NodeKnobs) -> Result<()> {
        self.set_slot_ms(knobs.slot_ms);
        Ok(())
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
    fn status(&self) -> NodeStatus {
        SignalNode::status(self)
    }
}
