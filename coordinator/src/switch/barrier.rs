//! The slot-switch barrier: one cluster-wide switch from `from_slot` to
//! `to_slot`, generation g, driven as a pure state machine. gangd owns the
//! sockets and the clock; it feeds answers, losses and ticks in and sends
//! what comes out. Time is a u64 of µs on gangd's monotonic clock, so tests
//! (and replays) inject it exactly.
//!
//! With `Barrier::Strict` this is SCore-D's network preemption reduced to
//! two barriers (see proto/mod.rs): Freeze every node, wait until every
//! node is Frozen (its outgoing gangs stopped and their traffic at rest),
//! only then Switch, and wait for every Running. Switching one node while a
//! peer still sends would deliver the old gang's messages into a stopped
//! gang's sockets, or let the new gang's traffic race with them.
//!
//! With `Barrier::Off` the switch is merely timed: Switch goes to every node
//! at once and nothing waits for the network.
//!
//! A node that is lost, or silent past the phase timeout, is dropped from
//! the barrier and reported as failed: one dead node must not hold every
//! other node's gangs frozen. gangd then fails that node's jobs.
//!
//! The rotation (rotation.rs) starts one switch at a time and feeds it;
//! see mod.rs for the whole path of a switch.
//!
//! The machine keeps a count of the nodes still owing the current phase's
//! answer (`owing`), so an answer costs O(log N) (the node's map entry),
//! not a scan of every node: with the answers arriving in node order a
//! scan per answer was O(N²) per switch (docs/scale.md, 16 M node checks
//! per switch at 4096 nodes).
//!
//! Known faults: a dropped node's late answer is counted as unexpected and
//! ignored, so a node that was only slow stays behind until the next
//! switch (or the rotation's catch-up switch); times are gangd's alone
//! (the nodes' clocks are not compared).

use std::collections::BTreeMap;

use gang_wire::proto::{Barrier, FreezeReport, FromAgent, Gen, NodeId, ToAgent};

/// Messages to send, in order.
pub type Outbox = Vec<(NodeId, ToAgent)>;

/// What a switch is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchSpec {
    pub gen: Gen,
    pub from_slot: u32,
    pub to_slot: u32,
    /// The nodes of the switch; duplicates are taken once.
    pub nodes: Vec<NodeId>,
    pub barrier: Barrier,
    /// Passed to the agents in Freeze: how long a node waits for steady state.
    pub drain_timeout_ms: u32,
    /// How long a node may stay silent in a phase before it is dropped. The
    /// freeze phase adds drain_timeout_ms to it: a node that waits out its
    /// drain timeout is slow, not unresponsive.
    pub phase_timeout_us: u64,
    /// Passed to the agents in Switch: the new slot's length, for the
    /// ranks' slot clock.
    pub slot_ms: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Freeze sent, waiting for Frozen (strict only).
    Freezing,
    /// Switch sent, waiting for Running.
    Switching,
    Done,
}

/// Why a node left the barrier without answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// gangd lost its connection during this phase.
    Lost(Phase),
    /// No answer within the phase timeout.
    Silent(Phase),
}

/// One node's part of a switch. Times are µs since the switch started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeRecord {
    pub frozen: Option<FreezeReport>,
    pub frozen_at_us: Option<u64>,
    pub running_at_us: Option<u64>,
    /// The agent's own measure of its switch (Running's switch_us).
    pub agent_switch_us: Option<u64>,
}

/// The outcome of one switch, for gangd's log and statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchRecord {
    pub gen: Gen,
    pub from_slot: u32,
    pub to_slot: u32,
    pub barrier: Barrier,
    /// Freeze sent → Switch sent (the last Frozen, or the drop that closed
    /// the phase). None with Barrier::Off.
    pub freeze_us: Option<u64>,
    /// Switch sent → last Running (or the drop that closed the phase). None
    /// if no node was left to switch.
    pub switch_us: Option<u64>,
    /// Start → done.
    pub total_us: u64,
    /// Spread of the Running arrivals: how far apart the nodes started the
    /// new slot. None if no node answered Running.
    pub skew_us: Option<u64>,
    /// Nodes whose drain hit drain_timeout_ms: logged, not a failure.
    pub drain_timeouts: u32,
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// Nodes dropped from the barrier, in node order.
    pub failed: Vec<(NodeId, Failure)>,
    /// Answers of another generation, ignored.
    pub stale: u32,
    /// Second answers of the same kind from one node, ignored.
    pub duplicates: u32,
    /// Answers of this generation that make no sense here (unknown node,
    /// wrong slot, Frozen without Freeze, Running before Switch), ignored.
    pub unexpected: u32,
}

impl SwitchRecord {
    /// Nodes that ran `to_slot` at the end of the switch.
    pub fn switched(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .filter(|(_, r)| r.running_at_us.is_some())
            .map(|(n, _)| *n)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct NodeState {
    rec: NodeRecord,
    failed: Option<Failure>,
}

/// One switch in progress.
#[derive(Clone, Debug)]
pub struct SlotSwitch {
    spec: SwitchSpec,
    phase: Phase,
    nodes: BTreeMap<NodeId, NodeState>,
    /// Nodes neither failed nor done with the current phase's answer
    /// (Frozen while Freezing, Running while Switching); 0 once Done.
    owing: usize,
    start_us: u64,
    /// Start of the current phase (Freeze or Switch sent).
    phase_start_us: u64,
    freeze_us: Option<u64>,
    /// Latest time seen: time never runs backwards inside the machine, so
    /// the latencies stay consistent whatever order gangd's events carry.
    now_us: u64,
    stale: u32,
    duplicates: u32,
    unexpected: u32,
    record: Option<SwitchRecord>,
}

impl SlotSwitch {
    /// Starts the switch at `now_us`: returns the machine and the first
    /// messages (Freeze to every node, or Switch to every node with
    /// Barrier::Off).
    pub fn start(spec: SwitchSpec, now_us: u64) -> (Self, Outbox) {
        let nodes: BTreeMap<NodeId, NodeState> = spec
            .nodes
            .iter()
            .map(|&n| (n, NodeState::default()))
            .collect();
        let phase = match spec.barrier {
            Barrier::Strict => Phase::Freezing,
            Barrier::Off => Phase::Switching,
        };
        let mut sw = SlotSwitch {
            spec,
            phase,
            owing: nodes.len(),
            nodes,
            start_us: now_us,
            phase_start_us: now_us,
            freeze_us: None,
            now_us,
            stale: 0,
            duplicates: 0,
            unexpected: 0,
            record: None,
        };
        let mut out = Outbox::new();
        let s = &sw.spec;
        for &node in sw.nodes.keys() {
            out.push((
                node,
                match phase {
                    Phase::Freezing => ToAgent::Freeze {
                        gen: s.gen,
                        from_slot: s.from_slot,
                        to_slot: s.to_slot,
                        drain_timeout_ms: s.drain_timeout_ms,
                    },
                    _ => ToAgent::Switch {
                        gen: s.gen,
                        slot: s.to_slot,
                        slot_ms: s.slot_ms,
                    },
                },
            ));
        }
        // An empty switch is done at once.
        sw.advance(&mut out);
        (sw, out)
    }

    pub fn gen(&self) -> Gen {
        self.spec.gen
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The record, once the switch is done.
    pub fn record(&self) -> Option<&SwitchRecord> {
        self.record.as_ref()
    }

    /// When gangd must call on_tick at the latest; None once done.
    pub fn deadline_us(&self) -> Option<u64> {
        let slack = match self.phase {
            Phase::Freezing => u64::from(self.spec.drain_timeout_ms) * 1000,
            Phase::Switching => 0,
            Phase::Done => return None,
        };
        Some(
            self.phase_start_us
                .saturating_add(slack)
                .saturating_add(self.spec.phase_timeout_us),
        )
    }

    /// Feeds any agent message; only Frozen and Running concern the barrier.
    pub fn on_agent(&mut self, node: NodeId, msg: &FromAgent, now_us: u64) -> Outbox {
        match *msg {
            FromAgent::Frozen { gen, slot, report } => {
                self.on_frozen(node, gen, slot, report, now_us)
            }
            FromAgent::Running {
                gen,
                slot,
                switch_us,
            } => self.on_running(node, gen, slot, switch_us, now_us),
            _ => Outbox::new(),
        }
    }

    /// The checks every answer goes through, in order: its generation, its
    /// node, a repeat, whether it is `expected` now. A dropped node's late
    /// answer stays dropped: gangd has already given up on it, and
    /// un-failing it would race with that. Counts what it ignores; else
    /// returns the time since the switch began and the node's state.
    fn answer(
        &mut self,
        node: NodeId,
        gen: Gen,
        now_us: u64,
        answered: fn(&NodeRecord) -> bool,
        expected: bool,
    ) -> Option<(u64, &mut NodeState)> {
        let now = self.clock(now_us);
        if gen != self.spec.gen {
            self.stale += 1;
            return None;
        }
        let at = now - self.start_us;
        let Some(st) = self.nodes.get_mut(&node) else {
            self.unexpected += 1;
            return None;
        };
        if answered(&st.rec) {
            self.duplicates += 1;
            return None;
        }
        if !expected || st.failed.is_some() {
            self.unexpected += 1;
            return None;
        }
        Some((at, st))
    }

    /// `node` answered Frozen{gen, slot, ..}.
    pub fn on_frozen(
        &mut self,
        node: NodeId,
        gen: Gen,
        slot: u32,
        report: FreezeReport,
        now_us: u64,
    ) -> Outbox {
        let expected = self.spec.barrier == Barrier::Strict && slot == self.spec.from_slot;
        let Some((at, st)) = self.answer(node, gen, now_us, |r| r.frozen.is_some(), expected)
        else {
            return Outbox::new();
        };
        st.rec.frozen = Some(report);
        st.rec.frozen_at_us = Some(at);
        // Expected only while Freezing: every live node has answered
        // Frozen before the phase moves on.
        self.owing -= 1;
        let mut out = Outbox::new();
        self.advance(&mut out);
        out
    }

    /// `node` answered Running{gen, slot, switch_us}.
    pub fn on_running(
        &mut self,
        node: NodeId,
        gen: Gen,
        slot: u32,
        switch_us: u64,
        now_us: u64,
    ) -> Outbox {
        // Before Switch was sent a Running cannot be an answer to us.
        let expected = self.phase != Phase::Freezing && slot == self.spec.to_slot;
        let Some((at, st)) =
            self.answer(node, gen, now_us, |r| r.running_at_us.is_some(), expected)
        else {
            return Outbox::new();
        };
        st.rec.running_at_us = Some(at);
        st.rec.agent_switch_us = Some(switch_us);
        // Expected only while Switching (Done means no live node owes).
        self.owing -= 1;
        let mut out = Outbox::new();
        self.advance(&mut out);
        out
    }

    /// Drops every node still owing an answer once the phase's deadline has
    /// passed.
    pub fn on_tick(&mut self, now_us: u64) -> Outbox {
        self.clock(now_us);
        let mut out = Outbox::new();
        if self.deadline_us().is_some_and(|d| self.now_us >= d) {
            let phase = self.phase;
            for st in self.nodes.values_mut() {
                if st.failed.is_none() && owes(phase, st) {
                    st.failed = Some(Failure::Silent(phase));
                    self.owing -= 1;
                }
            }
            self.advance(&mut out);
        }
        out
    }

    /// gangd lost `node`'s connection. A node that already gave its last
    /// answer of this switch has done its part: its loss is gangd's
    /// business, not a failure of the switch.
    pub fn on_node_lost(&mut self, node: NodeId, now_us: u64) -> Outbox {
        self.clock(now_us);
        let mut out = Outbox::new();
        let phase = self.phase;
        if let Some(st) = self.nodes.get_mut(&node) {
            if phase != Phase::Done && st.failed.is_none() && st.rec.running_at_us.is_none() {
                // Lost while Freezing after its Frozen: it owed nothing
                // more in this phase.
                if owes(phase, st) {
                    self.owing -= 1;
                }
                st.failed = Some(Failure::Lost(phase));
                self.advance(&mut out);
            }
        }
        out
    }

    fn clock(&mut self, now_us: u64) -> u64 {
        self.now_us = self.now_us.max(now_us);
        self.now_us
    }

    /// Moves on as far as the answers allow: Freezing → Switching once no
    /// live node owes a Frozen, Switching → Done once none owes a Running.
    fn advance(&mut self, out: &mut Outbox) {
        let now = self.now_us;
        if self.phase == Phase::Freezing && self.owing == 0 {
            self.freeze_us = Some(now - self.start_us);
            self.phase = Phase::Switching;
            self.phase_start_us = now;
            let (gen, slot, slot_ms) = (self.spec.gen, self.spec.to_slot, self.spec.slot_ms);
            for (&node, st) in &self.nodes {
                if st.failed.is_none() {
                    out.push((node, ToAgent::Switch { gen, slot, slot_ms }));
                    self.owing += 1;
                }
            }
        }
        if self.phase == Phase::Switching && self.owing == 0 {
            self.phase = Phase::Done;
            self.record = Some(self.make_record());
        }
    }

    fn make_record(&self) -> SwitchRecord {
        let now = self.now_us;
        // Switch went out iff some node was still in the barrier when the
        // switch phase began, i.e. some node failed in it or answered it.
        let sent_switch = self.nodes.values().any(|st| {
            st.rec.running_at_us.is_some()
                || matches!(
                    st.failed,
                    Some(Failure::Lost(Phase::Switching) | Failure::Silent(Phase::Switching))
                )
        });
        let arrivals = || self.nodes.values().filter_map(|st| st.rec.running_at_us);
        let skew_us = arrivals()
            .max()
            .zip(arrivals().min())
            .map(|(hi, lo)| hi - lo);
        SwitchRecord {
            gen: self.spec.gen,
            from_slot: self.spec.from_slot,
            to_slot: self.spec.to_slot,
            barrier: self.spec.barrier,
            freeze_us: self.freeze_us,
            switch_us: sent_switch.then(|| now - self.phase_start_us),
            total_us: now - self.start_us,
            skew_us,
            drain_timeouts: self
                .nodes
                .values()
                .filter(|st| st.rec.frozen.is_some_and(|f| f.timed_out))
                .count() as u32,
            nodes: self.nodes.iter().map(|(&n, st)| (n, st.rec)).collect(),
            failed: self
                .nodes
                .iter()
                .filter_map(|(&n, st)| st.failed.map(|f| (n, f)))
                .collect(),
            stale: self.stale,
            duplicates: self.duplicates,
            unexpected: self.unexpected,
        }
    }
}

/// Whether a node still owes its answer of `phase`.
fn owes(phase: Phase, st: &NodeState) -> bool {
    match phase {
        Phase::Freezing => st.rec.frozen.is_none(),
        Phase::Switching => st.rec.running_at_us.is_none(),
        Phase::Done => false,
    }
}
