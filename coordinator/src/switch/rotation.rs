//! The cluster's slot clock, as a pure state machine: every slot_ms, one
//! [`SlotSwitch`] moves every node to the next slot of the rotation. A slot
//! ends early when every job running in it has yielded it on every one of
//! its nodes (voluntary yield): waiting out the deadline would only leave
//! their CPUs idle.
//!
//! Inputs are events and time, like the barrier's: `matrix_changed` and
//! `knobs_changed` (something must reach the nodes at the next boundary),
//! `on_agent` (Frozen, Running, Yielded), `node_lost`, and `tick(now)`.
//! Every input returns an [`Outbox`] (what to send to which node); gangd
//! sends it. What the rotation reads of the allocator and the nodes comes
//! through the narrow [`ClusterView`]. Finished switches are handed out
//! by `take_finished` for the switch log and the statistics.
//!
//! Between switches, at a boundary, `tick` sends in order: the knobs (if
//! they changed), the tables of the nodes whose table changed (kept here,
//! to send only differences), then starts the next switch if one is due.
//! A new table forces a switch at once (even to the same slot): every node
//! must be told which slot of its new table runs.
//!
//! With `switching = timed` (the knob) the rotation starts no switch per
//! slot: between switches it still sends knobs and tables, and hands the
//! boundary to [`Timed`] (timed.rs), which sends plans, amends and gathers
//! the nodes' `Switched` reports (`take_timed`); while a plan waits for its
//! epoch, changed tables wait with the next plan (`Timed::holds_changes`).
//! The slot in force is then the plan's. Back to `commanded`, a commanded
//! switch into the slot in force starts at once (nodes drop their plan on
//! Freeze or Switch); to `timed` (after any switch in flight), the first
//! plan starts one slot and the slowest link's margin from the knob write,
//! with the slot after the one in force; the slot in force goes on until
//! then.
//!
//! Known faults: a node left out of a switch (silent) is only "behind";
//! it catches up at the next switch, or at a catch-up switch of its own
//! when the slot in force is alone in the rotation. The knobs type is
//! gangd's (daemon/knobs.rs), so this module imports upwards into daemon.

use std::collections::{BTreeMap, BTreeSet};

use log::{debug, warn};

use super::barrier::{Failure, Outbox, SlotSwitch, SwitchRecord, SwitchSpec};
use super::planner::LinkTiming;
use super::timed::{Timed, TimedRecord, DEFAULT_CLOCK_ERROR_NS};
use crate::knobs::{ClusterKnobs, Switching};
use gang_wire::proto::{FromAgent, Gen, JobId, NodeId, Placement, SwitchOutcome, ToAgent};

/// A node silent this long in one phase is left out of the switch (the
/// freeze phase adds drain_timeout_ms). It is not declared lost for that:
/// a slow node catches up at the next switch (or, when the slot in force is
/// alone in the rotation and no next switch would come, at a catch-up
/// switch of its own at the end of the slot), and only the heartbeat
/// timeout (or a closed connection) fails a node and its jobs.
pub const PHASE_TIMEOUT_US: u64 = 2_000_000;

/// One node's table: per slot, the placements of its started jobs.
pub type Table = Vec<Vec<Placement>>;

/// Drops the empty slots of `table` past the rotation's last slot (`rows`
/// slots in all): the matrix's rows after it hold no started job (a job
/// placed there waits for its ranks to start), and every node's table would
/// change with them. At 4096 nodes a job's placement in a new row then sent
/// 4096 Schedules and a plan, the same again at its start: a third of the
/// fan-outs under arrivals (docs/scale.md). No node can be switched into
/// such a slot: both switchings rotate over [`ClusterView::slots`] only.
/// A slot with a placement is never dropped.
fn end_at_rotation(table: &mut Table, rows: usize) {
    while table.len() > rows && table.last().is_some_and(Vec::is_empty) {
        table.pop();
    }
}

/// What the rotation reads of the allocator and the nodes, at a boundary.
pub trait ClusterView {
    /// Every live node (they all hear new knobs).
    fn nodes(&self) -> Vec<NodeId>;
    /// The table every live node should have, in the order to send them.
    fn tables(&self) -> Vec<(NodeId, Table)>;
    /// The slots to rotate through, in order: those holding a started job.
    fn slots(&self) -> Vec<u32>;
    /// The (job, node) pairs running in `slot`: all must yield for an
    /// early switch.
    fn running(&self, slot: u32) -> BTreeSet<(JobId, NodeId)>;
    /// Changes whenever a node joined or was lost or a node's clock changed
    /// state: the timed planner then reads every node's `link` at once
    /// (else only every [`LINK_REFRESH_NS`](super::timed::LINK_REFRESH_NS)).
    fn links_epoch(&self) -> u64;
    /// A node's link timing, for timed switching's planner. By default no
    /// RTT and the default clock error bound.
    fn link(&self, _node: NodeId) -> LinkTiming {
        LinkTiming {
            rtt_ns: 0,
            clock_error_ns: DEFAULT_CLOCK_ERROR_NS,
            synchronised: true,
        }
    }
}

/// Counts since gangd started, for its status files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub switches: u64,
    /// Switches that came before the deadline: every job had yielded.
    pub early_switches: u64,
    pub drain_timeouts: u64,
    /// Nodes left out of a switch for not answering in time (timed: that
    /// sent no report of it).
    pub missed: u64,
    /// Timed: a node's switch after its boundary (its drain ended late).
    pub late_switches: u64,
    /// Timed: nodes that had not acknowledged a plan by its boundary.
    pub late_plans: u64,
    /// Timed: node switches made by command instead, the node's clock
    /// not good enough (max_clock_error_us).
    pub commanded_switches: u64,
}

#[derive(Default)]
pub struct Rotation {
    /// The slot the cluster runs; None before the first switch.
    current: Option<u32>,
    /// When the current slot started (its switch completed), µs.
    slot_start_us: u64,
    switch: Option<SlotSwitch>,
    /// The last generation handed out (the first switch is gen 1).
    last_gen: u64,
    /// The node tables must be compared and sent again before the next
    /// switch.
    tables_dirty: bool,
    /// The knobs must be sent to every node before the next switch.
    knobs_dirty: bool,
    /// Switch at once, even to the same slot: tables changed, and every
    /// node must be told which slot of its new table runs.
    force: bool,
    /// The table each node was last sent; the nodes of a switch.
    installed: BTreeMap<NodeId, Table>,
    stats: Stats,
    /// Switches done and not yet taken.
    finished: Vec<SwitchRecord>,
    /// The generation in force (the last switch's).
    current_gen: Option<Gen>,
    /// (job, node) pairs that yielded the slot in force.
    yielded: BTreeSet<(JobId, NodeId)>,
    /// Nodes left out of the switch into the slot in force: they still run
    /// another slot (or, before their first switch, nothing).
    behind: BTreeSet<NodeId>,
    /// Timed switching, while the knob says so.
    timed: Option<Timed>,
    /// Timed switches finished and not yet taken.
    timed_finished: Vec<TimedRecord>,
    /// Plans made so far (the next plan's id).
    plans_made: u64,
    /// The cluster clock (ns) at the rotation's time 0 (µs).
    cluster_epoch_ns: u64,
}

impl Rotation {
    pub fn new() -> Self {
        Self::default()
    }

    /// The allocator's matrix changed: the tables are compared (and the
    /// changed ones sent) at the next boundary.
    pub fn matrix_changed(&mut self) {
        self.tables_dirty = true;
    }

    /// The knobs changed: every node hears them at the next boundary.
    pub fn knobs_changed(&mut self) {
        self.knobs_dirty = true;
    }

    pub fn in_switch(&self) -> bool {
        self.switch.is_some()
    }

    /// The slot in force, if any.
    pub fn current(&self) -> Option<u32> {
        self.current
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        if let Some(t) = &self.timed {
            s.early_switches += t.stats().amends;
            s.late_plans += t.planner().stats().late_nodes;
        }
        s
    }

    /// The cluster clock's ns at the rotation's time 0 (gangd's
    /// CLOCK_MONOTONIC when its µs count started; 0 in tests).
    pub fn set_cluster_epoch_ns(&mut self, ns: u64) {
        self.cluster_epoch_ns = ns;
    }

    /// Timed switching's state, while `switching = timed`.
    pub fn timed(&self) -> Option<&Timed> {
        self.timed.as_ref()
    }

    /// The timed switches finished since the last call, oldest first.
    pub fn take_timed(&mut self) -> Vec<TimedRecord> {
        std::mem::take(&mut self.timed_finished)
    }

    fn cluster_ns(&self, now_us: u64) -> u64 {
        self.cluster_epoch_ns
            .saturating_add(now_us.saturating_mul(1000))
    }

    fn us_of(&self, cluster_ns: u64) -> u64 {
        cluster_ns.saturating_sub(self.cluster_epoch_ns) / 1000
    }

    /// The switches done since the last call, oldest first.
    pub fn take_finished(&mut self) -> Vec<SwitchRecord> {
        std::mem::take(&mut self.finished)
    }

    /// µs until something is due.
    pub fn next_wakeup(&self, slot_ms: u32, now_us: u64) -> u64 {
        let due = match (&self.switch, &self.timed) {
            (Some(sw), _) => sw.deadline_us().unwrap_or(now_us),
            (None, Some(t)) => t
                .next_due_ns(self.cluster_ns(now_us))
                .map_or(now_us + u64::from(slot_ms) * 1000, |d| self.us_of(d)),
            (None, None) => self.slot_start_us + u64::from(slot_ms) * 1000,
        };
        // At least 1 ms: a due time that cannot be acted on must not spin.
        due.saturating_sub(now_us).max(1000)
    }

    /// Feeds a node's message: Frozen and Running go to the switch in
    /// flight, Yielded marks its job as done with the slot in force.
    pub fn on_agent(&mut self, node: NodeId, msg: &FromAgent, now_us: u64) -> Outbox {
        // A Frozen outside a switch in flight is a commanded node's, under
        // timed switching.
        let for_timed = matches!(
            msg,
            FromAgent::PlanAck { .. } | FromAgent::Switched { .. } | FromAgent::Yielded { .. }
        ) || (matches!(msg, FromAgent::Frozen { .. }) && self.switch.is_none());
        let now_ns = self.cluster_ns(now_us);
        if let Some(t) = self.timed.as_mut().filter(|_| for_timed) {
            let out = t.on_agent(node, msg, now_ns);
            self.absorb_timed();
            return out;
        }
        if let FromAgent::PlanAck { .. } | FromAgent::Switched { .. } = msg {
            debug!("node {node}: {msg:?} while switching is commanded; ignored");
            return Outbox::new();
        }
        if let FromAgent::Yielded { gen, job } = *msg {
            if self.current_gen == Some(gen) && self.switch.is_none() {
                self.yielded.insert((job, node));
            } else {
                debug!("yield of job {job} on node {node} for gen {gen}: not the slot in force");
            }
            return Outbox::new();
        }
        let Some(sw) = self.switch.as_mut() else {
            debug!("answer outside a switch from node {node}: {msg:?}");
            return Outbox::new();
        };
        let out = sw.on_agent(node, msg, now_us);
        self.finish_if_done(now_us);
        out
    }

    /// The node is gone: it leaves the switch in flight and its table is
    /// forgotten (it gets a new one if it comes back).
    pub fn node_lost(&mut self, node: NodeId, now_us: u64) -> Outbox {
        self.installed.remove(&node);
        if let Some(t) = self.timed.as_mut() {
            t.node_lost(node);
        }
        if let Some(sw) = self.switch.as_mut() {
            // Nothing to send to the others: a loss only closes a phase.
            let _ = sw.on_node_lost(node, now_us);
        }
        self.finish_if_done(now_us);
        Outbox::new()
    }

    /// Time passes: the switch in flight drops its silent nodes; between
    /// switches, the knobs and the changed tables go out, and the next
    /// switch starts if one is due.
    pub fn tick(&mut self, now_us: u64, knobs: &ClusterKnobs, view: &impl ClusterView) -> Outbox {
        let mut out = Outbox::new();
        if let Some(sw) = self.switch.as_mut() {
            out.extend(sw.on_tick(now_us));
            self.finish_if_done(now_us);
        }
        if self.in_switch() {
            return out;
        }
        if std::mem::take(&mut self.knobs_dirty) {
            let msg = knobs.message();
            out.extend(view.nodes().into_iter().map(|n| (n, msg.clone())));
        }
        let mut tables_changed = false;
        // Timed: the tables wait with the plan that will index them while
        // the plan before it waits for its epoch (timed.rs, step 2).
        let hold = knobs.switching == Switching::Timed
            && (self.timed.as_ref()).is_some_and(|t| t.holds_changes(self.cluster_ns(now_us)));
        if self.tables_dirty && !hold {
            self.tables_dirty = false;
            let rows = view.slots().iter().max().map_or(0, |&s| s as usize + 1);
            for (node, mut slots) in view.tables() {
                end_at_rotation(&mut slots, rows);
                if self.installed.get(&node) != Some(&slots) {
                    out.push((
                        node,
                        ToAgent::Schedule {
                            slots: slots.clone(),
                        },
                    ));
                    self.installed.insert(node, slots);
                    self.force = true;
                    tables_changed = true;
                }
            }
        }
        match knobs.switching {
            Switching::Timed => out.extend(self.tick_timed(now_us, knobs, view, tables_changed)),
            Switching::Commanded => {
                self.leave_timed();
                out.extend(self.maybe_switch(knobs, now_us, view));
            }
        }
        out
    }

    /// A boundary under `switching = timed`: timed.rs plans; the slot in
    /// force is the plan's.
    fn tick_timed(
        &mut self,
        now_us: u64,
        knobs: &ClusterKnobs,
        view: &impl ClusterView,
        tables_changed: bool,
    ) -> Outbox {
        let now_ns = self.cluster_ns(now_us);
        let (first_gen, first_id) = (Gen(self.last_gen + 1), self.plans_made);
        let timed = self
            .timed
            .get_or_insert_with(|| Timed::new(first_gen, first_id));
        let out = timed.tick(
            now_ns,
            knobs,
            tables_changed,
            self.current,
            view,
            &self.installed,
        );
        if let Some(f) = timed.in_force(now_ns) {
            self.current = Some(f.slot);
            self.current_gen = Some(f.gen);
            self.last_gen = self.last_gen.max(f.gen.0);
            self.slot_start_us = self.us_of(f.start_ns);
        }
        self.absorb_timed();
        out
    }

    /// Back to commanded switching: the next commanded switch (at once,
    /// into the slot in force) takes over from the plan.
    fn leave_timed(&mut self) {
        self.absorb_timed();
        let Some(t) = self.timed.take() else {
            return;
        };
        self.stats.early_switches += t.stats().amends;
        self.stats.late_plans += t.planner().stats().late_nodes;
        self.plans_made += t.planner().stats().plans;
        self.force = true;
        self.behind.clear();
        self.yielded.clear();
    }

    /// Timed records finished: counted, kept for `take_timed`.
    fn absorb_timed(&mut self) {
        let Some(t) = self.timed.as_mut() else {
            return;
        };
        for rec in t.take_finished() {
            self.stats.switches += 1;
            self.stats.drain_timeouts += rec.count(SwitchOutcome::TimedOut);
            self.stats.late_switches += rec.count(SwitchOutcome::Late);
            self.stats.commanded_switches += rec.count(SwitchOutcome::Commanded);
            self.stats.missed += rec.missing.len() as u64;
            self.timed_finished.push(rec);
        }
    }

    /// Starts the next switch if one is due: the slot is over (or every
    /// (job, node) pair running in it has yielded it), the current slot
    /// left the rotation, or the tables changed.
    fn maybe_switch(
        &mut self,
        knobs: &ClusterKnobs,
        now_us: u64,
        view: &impl ClusterView,
    ) -> Outbox {
        let rotation = view.slots();
        // Who takes part: every node with a table, except in a catch-up
        // switch.
        let mut nodes: Vec<NodeId> = self.installed.keys().copied().collect();
        let running = match self.current {
            Some(slot) => view.running(slot),
            None => BTreeSet::new(),
        };
        let deadline = now_us >= self.slot_start_us + u64::from(knobs.slot_ms) * 1000;
        let all_yielded = !running.is_empty() && running.is_subset(&self.yielded);
        let slot_over = deadline || all_yielded;
        if rotation.is_empty() || nodes.is_empty() {
            // Nothing to switch: the next look is a slot from now, not a
            // busy loop.
            if slot_over {
                self.slot_start_us = now_us;
            }
            return Outbox::new();
        }
        let to = match self.current {
            Some(c) if rotation.contains(&c) => {
                let next =
                    rotation[(rotation.iter().position(|&s| s == c).unwrap() + 1) % rotation.len()];
                if self.force {
                    if slot_over {
                        next
                    } else {
                        c
                    }
                } else if slot_over && next != c {
                    next
                } else if slot_over && nodes.iter().any(|n| self.behind.contains(n)) {
                    // Alone in the rotation, but some nodes missed the switch
                    // into it: with no next switch to catch up at, they
                    // would never run it. Only they take part.
                    nodes.retain(|n| self.behind.contains(n));
                    c
                } else {
                    if slot_over {
                        // Alone in the rotation: the slot simply goes on.
                        self.slot_start_us = now_us;
                    }
                    return Outbox::new();
                }
            }
            _ => rotation[0],
        };
        self.force = false;
        if all_yielded && !deadline {
            self.stats.early_switches += 1;
        }
        self.last_gen += 1;
        let spec = SwitchSpec {
            gen: Gen(self.last_gen),
            // Before the first switch nothing runs: freeze "slot" to itself.
            from_slot: self.current.unwrap_or(to),
            to_slot: to,
            nodes,
            barrier: knobs.barrier,
            drain_timeout_ms: knobs.drain_timeout_ms,
            phase_timeout_us: PHASE_TIMEOUT_US,
            slot_ms: knobs.slot_ms,
        };
        self.yielded.clear();
        let (sw, out) = SlotSwitch::start(spec, now_us);
        self.switch = Some(sw);
        self.finish_if_done(now_us);
        out
    }

    fn finish_if_done(&mut self, now_us: u64) {
        let Some(rec) = self
            .switch
            .as_ref()
            .filter(|s| s.is_done())
            .and_then(|s| s.record().cloned())
        else {
            return;
        };
        self.switch = None;
        let caught_up = self.current == Some(rec.to_slot);
        if !caught_up {
            self.behind.clear();
        }
        for n in rec.switched() {
            self.behind.remove(&n);
        }
        self.behind.extend(rec.failed.iter().map(|(n, _)| *n));
        self.current = Some(rec.to_slot);
        self.current_gen = Some(rec.gen);
        self.slot_start_us = now_us;
        self.stats.switches += 1;
        self.stats.drain_timeouts += u64::from(rec.drain_timeouts);
        if rec.drain_timeouts > 0 {
            warn!(
                "switch {}: {} node(s) hit the drain timeout",
                rec.gen, rec.drain_timeouts
            );
        }
        for (n, f) in &rec.failed {
            if let Failure::Silent(phase) = f {
                self.stats.missed += 1;
                warn!(
                    "switch {}: node {n} silent in {phase:?}, left out of this switch",
                    rec.gen
                );
            }
        }
        self.finished.push(rec);
    }
}
