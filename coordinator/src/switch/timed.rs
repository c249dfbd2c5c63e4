//! Timed switching, gangd's side (`switching = timed`, issue 12 part 2): the
//! rotation (rotation.rs) hands its boundaries here instead of starting a
//! [`SlotSwitch`](super::barrier::SlotSwitch) per slot. A pure state
//! machine: times are ns on the cluster clock (gangd's CLOCK_MONOTONIC),
//! given by the caller.
//!
//! How it works, at every `tick`:
//! 1. The planner (planner.rs) takes its pending plan in force if its
//!    epoch came, and re-offers the plan in force to nodes late with
//!    their ack (`PlanAck` goes to `Planner::on_ack` through `on_agent`).
//!    It learns the live nodes (`node_joined`, with
//!    their link timing from [`ClusterView::link`]) and forgets the gone,
//!    reading the links again only when the view's `links_epoch` moved
//!    (joins, losses, clock state changes) or every [`LINK_REFRESH_NS`]:
//!    an error bound or RTT that grows is seen up to a second late.
//! 2. When the cycle (the slots holding a started job), slot_ms or a node's
//!    table changed, the planner makes a new plan and every node gets a
//!    `ToAgent::Plan` offer. The tables themselves go by `Schedule`, queued
//!    by the rotation before this in the same outbox: on the one link of a
//!    node they arrive in order, so a node has the table before the plan
//!    that indexes it. The new cycle starts at the slot after the one in
//!    force now (not the one just before the new plan's epoch, which may
//!    be a slot later: the fault is a slot run twice in a row, or one
//!    skipped once).
//!    While a plan waits for its epoch, a change waits with it
//!    ([`Timed::holds_changes`]; the rotation holds its tables too) and is
//!    planned at the tick the plan takes effect. A plan replaced before
//!    its epoch never takes effect: under changes closer together than
//!    the margin (jobs starting and ending back to back) no plan did, and
//!    a started job ran only once the churn stopped. Now a job is in the
//!    plan in force within two margins of its start, at most one plan is
//!    made per margin (a slot at least), and each has its margin to reach
//!    every node before the next is sent (docs/scale.md, "Changes wait for
//!    the plan before them"). A node joining then is offered both plans
//!    at once but gets its table with the next (it keeps the one it had,
//!    if it had one: a node rejoining after a lost link or gangd's
//!    restart).
//!    When the cycle empties (the last job ended) there is no plan: the
//!    planner forgets it (`Planner::clear`), commanded nodes get nothing,
//!    and the nodes end the plan they follow on their Schedule of no slot;
//!    the next job's plan starts from later generations.
//! 3. Voluntary yield: once every (job, node) running in the slot in force
//!    has sent `Yielded` for its generation, the slot ends at now + the
//!    slowest link's margin (2 × RTT + clock error) and every node gets a
//!    `ToAgent::Amend`. One amend per generation.
//! 4. Nodes whose clock is not good enough (unsynchronised, stepped, or an
//!    error bound over `max_clock_error_us`; [`LinkTiming::clock_fits`])
//!    are left out of the plans and switched by command: at each boundary
//!    of the plan in force they get a `ToAgent::Switch` into its slot (a
//!    Switch also ends any plan the node still follows), recorded in the
//!    generation's record as `Commanded` at gangd's send time. A node goes
//!    back to the plan, offered to it as to a node that joins, once its
//!    bound is at most 3/4 of the knob (so a bound near the knob does not
//!    flap). Their drain is waited for as in commanded switching: a
//!    commanded node gets `ToAgent::Freeze` for the next generation
//!    [`commanded_lead_ns`] before the boundary, and its Switch once it
//!    answered Frozen and the boundary came, or at the boundary +
//!    drain_timeout_ms + 2 RTT without an answer (its drain report then
//!    missing from the record). Its first Switch, into the slot in force
//!    when it leaves the plan, has no Freeze: it switched itself at the
//!    last boundary. A commanded node applies a Schedule on receipt (it
//!    follows no plan that could hold it), so until the new plan's epoch
//!    the old plan's slot may be past the end of its table: no Freeze or
//!    Switch into such a slot is sent (`skipped_commands`); its gangs
//!    parked for it wait for the new plan's first boundary.
//! 5. `Switched` reports (after the fact) are gathered per generation into
//!    a [`TimedRecord`]; a record is finished once every known node
//!    reported, or [`REPORT_WAIT_NS`] after its first report (the silent
//!    nodes are listed as missing). Its skew is max − min of the nodes'
//!    switch instants.
//!
//! Known faults: a commanded node's lead is fixed (2 RTT + 20 ms, at most
//! a quarter slot), not learnt from its park and drain times as the
//! nodes' own lead is; a commanded node runs the old plan's slots from
//! its new table until the new plan's epoch (a slot index that now names
//! another job runs that job early; one past the table's end is skipped,
//! step 4). Reports of a generation already closed, a
//! node's second report of one generation (the first stands), or more
//! than [`MAX_OPEN_RECORDS`] open generations, are dropped and
//! counted (`stray_reports`): a node cannot grow gangd's memory with
//! reports. gangd wakes for the pending plan's epoch and the boundaries;
//! re-offers and overdue records are seen on its next pass of the event
//! loop (at most 50 ms later). The yields are tracked here, apart from the
//! rotation's (commanded) set: their generations are the plan's.

use std::collections::{BTreeMap, BTreeSet};

use log::{debug, info, warn};

use super::barrier::Outbox;
use super::planner::{Change, LinkTiming, Planner};
use super::rotation::{ClusterView, Table};
use crate::knobs::ClusterKnobs;
use gang_wire::plan::{InForce, PlannedSlot};
use gang_wire::proto::{
    FreezeReport, FromAgent, Gen, JobId, NodeId, SwitchOutcome, SwitchReport, ToAgent,
};

/// A node's clock error bound until the node reports its own (1 ms).
pub const DEFAULT_CLOCK_ERROR_NS: u64 = 1_000_000;
/// How long a generation's record waits for the nodes' reports after the
/// first one came.
pub const REPORT_WAIT_NS: u64 = 2_000_000_000;
/// Generations gathering reports at once; the oldest is closed beyond.
pub const MAX_OPEN_RECORDS: usize = 64;
/// How often every node's link timing (RTT, clock error bound) is read
/// again when no node joined, left or changed its clock's state: reading
/// it at every pass of gangd's loop was O(nodes) per event batch.
pub const LINK_REFRESH_NS: u64 = 1_000_000_000;
/// Closed generations remembered, to drop their late reports.
const CLOSED_KEPT: usize = 256;
/// A commanded node's park and drain under emulation take 10-40 ms.
pub const COMMANDED_PARK_NS: u64 = 20_000_000;

/// How long before a boundary a commanded node gets its Freeze: two round
/// trips and [`COMMANDED_PARK_NS`], at most a quarter of the slot.
pub fn commanded_lead_ns(rtt_ns: u64, slot_ns: u64) -> u64 {
    (2 * rtt_ns + COMMANDED_PARK_NS).min(slot_ns / 4)
}

/// A node switched by command: the generation it was last switched to,
/// and the Freeze out for the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Commanded {
    last: Option<Gen>,
    freezing: Option<Freezing>,
    /// Its link's round trip as gangd last measured it.
    rtt_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Freezing {
    gen: Gen,
    slot: u32,
    boundary_ns: u64,
    sent_ns: u64,
    frozen: Option<FreezeReport>,
}

/// One generation's timed switch across the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedRecord {
    pub gen: Gen,
    pub slot: u32,
    /// Each node's report (a commanded node's made by gangd at its Switch).
    pub nodes: BTreeMap<NodeId, SwitchReport>,
    /// Known nodes that did not report by the time the record closed.
    pub missing: Vec<NodeId>,
}

impl TimedRecord {
    /// max − min of the nodes' switch instants; None without reports.
    pub fn skew_ns(&self) -> Option<u64> {
        let at = self.nodes.values().map(|n| n.at_ns);
        Some(at.clone().max()? - at.min()?)
    }

    /// The latest node's lateness.
    pub fn late_us(&self) -> u64 {
        self.nodes.values().map(|n| n.late_us).max().unwrap_or(0)
    }

    pub fn count(&self, outcome: SwitchOutcome) -> u64 {
        self.nodes.values().filter(|n| n.outcome == outcome).count() as u64
    }
}

/// A record gathering reports. The nodes' switches are kept as they
/// come and sorted into the record's map once, at its close: a map insert
/// per report was a tenth of gangd's steady state at 4096 nodes.
#[derive(Clone, Debug)]
struct Open {
    record: TimedRecord,
    first_ns: u64,
    came: Vec<(NodeId, SwitchReport)>,
    /// Which nodes are in `came` (a bit per node id; ids are dense).
    seen: Vec<u64>,
}

impl Open {
    /// `node`'s word in `seen` and its bit there.
    fn bit(node: NodeId) -> (usize, u64) {
        (node.0 as usize / 64, 1 << (node.0 % 64))
    }

    fn has(&self, node: NodeId) -> bool {
        let (w, bit) = Self::bit(node);
        self.seen.get(w).is_some_and(|word| word & bit != 0)
    }

    /// Takes `node`'s switch unless it already reported this generation.
    fn add(&mut self, node: NodeId, sw: SwitchReport) -> bool {
        if self.has(node) {
            return false;
        }
        let (w, bit) = Self::bit(node);
        if self.seen.len() <= w {
            self.seen.resize(w + 1, 0);
        }
        self.seen[w] |= bit;
        self.came.push((node, sw));
        true
    }
}

/// Counts of this timed period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimedStats {
    pub amends: u64,
    /// Commands not sent to a commanded node because their slot is past
    /// the end of the table it was last sent (step 4).
    pub skipped_commands: u64,
    /// Reports dropped: closed generation, a node's second, too many
    /// open, unknown node.
    pub stray_reports: u64,
}

pub struct Timed {
    planner: Planner,
    /// The cycle and slot_ms of the last plan made (unrotated).
    planned: Option<(Vec<u32>, u32)>,
    /// The nodes the planner knows (on timed switching).
    known: BTreeSet<NodeId>,
    /// When the nodes' links were last read: the view's epoch, the
    /// max_clock_error_us knob then, and the time.
    links_read: Option<(u64, u32, u64)>,
    /// Nodes switched by command (their clock does not fit).
    commanded: BTreeMap<NodeId, Commanded>,
    /// The generation whose yields are gathered, and who yielded it.
    yield_gen: Option<Gen>,
    yielded: BTreeSet<(JobId, NodeId)>,
    /// The last generation amended (at most one amend each).
    amended: Option<Gen>,
    open: BTreeMap<Gen, Open>,
    /// Closed generations (the last CLOSED_KEPT): a report of one is
    /// stray. A set: every report looks here.
    closed: BTreeSet<Gen>,
    finished: Vec<TimedRecord>,
    stats: TimedStats,
}

impl Timed {
    /// Timed switching from now: the first plan starts at `first_gen` and
    /// is numbered `first_id`.
    pub fn new(first_gen: Gen, first_id: u64) -> Self {
        Timed {
            planner: Planner::new(first_gen).first_id(first_id),
            planned: None,
            known: BTreeSet::new(),
            links_read: None,
            commanded: BTreeMap::new(),
            yield_gen: None,
            yielded: BTreeSet::new(),
            amended: None,
            open: BTreeMap::new(),
            closed: BTreeSet::new(),
            finished: Vec::new(),
            stats: TimedStats::default(),
        }
    }

    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    pub fn stats(&self) -> TimedStats {
        self.stats
    }

    /// The slot in force at `now`: by the pending plan once its epoch has
    /// come (the planner moves it in force at its next tick), else by the
    /// plan in force.
    pub fn in_force(&self, now_ns: u64) -> Option<InForce> {
        let pending = self.planner.pending().filter(|p| p.epoch_ns <= now_ns);
        pending.or(self.planner.in_force())?.in_force(now_ns)
    }

    /// A plan waits for its epoch: a change (new tables, cycle or slot_ms)
    /// waits with it and is planned once it took effect (step 2), so
    /// changes faster than a plan's margin cannot keep every plan from
    /// taking effect. The rotation holds its tables while this is true.
    pub fn holds_changes(&self, now_ns: u64) -> bool {
        self.planner.pending().is_some_and(|p| p.epoch_ns > now_ns)
    }

    /// When something is next due: the pending plan's epoch or the next
    /// boundary of the plan in force.
    /// A commanded node's Freeze, before the boundary, comes due too.
    pub fn next_due_ns(&self, now_ns: u64) -> Option<u64> {
        let pending = self.planner.pending().map(|p| p.epoch_ns);
        let f = self.in_force(now_ns);
        let boundary = f.map(|f| f.end_ns);
        let freeze = f.filter(|_| !self.commanded.is_empty()).and_then(|f| {
            let lead = self.commanded.keys().map(|&n| self.lead_of(n, &f)).max()?;
            Some(f.end_ns.saturating_sub(lead)).filter(|&t| t > now_ns)
        });
        pending.into_iter().chain(boundary).chain(freeze).min()
    }

    fn lead_of(&self, node: NodeId, f: &InForce) -> u64 {
        let rtt = self.commanded.get(&node).map_or(0, |c| c.rtt_ns);
        commanded_lead_ns(rtt, f.end_ns.saturating_sub(f.start_ns))
    }

    /// The records finished since the last call, oldest first.
    pub fn take_finished(&mut self) -> Vec<TimedRecord> {
        std::mem::take(&mut self.finished)
    }

    /// Steps 1 to 4 of the top comment. `tables_changed`: the rotation has
    /// just queued new Schedules; `current`: the slot in force before any
    /// plan (a commanded switch's); `installed`: the table each node was
    /// last sent (a commanded node has it already, the plan's slot may not
    /// be in it).
    pub fn tick(
        &mut self,
        now_ns: u64,
        knobs: &ClusterKnobs,
        tables_changed: bool,
        current: Option<u32>,
        view: &impl ClusterView,
        installed: &BTreeMap<NodeId, Table>,
    ) -> Outbox {
        let slot_ms = knobs.slot_ms;
        // First the plan in force is brought to `now` (a node joining is
        // then offered the plan that runs).
        let mut offers = self.planner.on_tick(now_ns);
        if self.links_due(now_ns, knobs, view) {
            let live = self.timed_nodes(view, u64::from(knobs.max_clock_error_us) * 1000);
            for &gone in self.known.difference(&live) {
                self.planner.node_lost(gone);
            }
            for &n in &live {
                if self.known.contains(&n) {
                    self.planner.timing(n, view.link(n));
                } else {
                    offers.extend(self.planner.node_joined(n, view.link(n), now_ns));
                }
            }
            self.known = live;
        }
        // The pending plan, if its epoch has not come (on_tick above took
        // it in force otherwise): no change is planned before it is.
        let held = self.planner.pending().is_some();
        let cycle = view.slots();
        if !held && cycle.is_empty() && self.planned.is_some() {
            // The last job ended: no plan, no commands into a slot the
            // nodes' tables no longer have (their Schedule of no slot ends
            // the plan they follow).
            self.planner.clear(now_ns);
            self.planned = None;
            for c in self.commanded.values_mut() {
                c.freezing = None;
            }
        }
        let planned = (cycle.clone(), slot_ms);
        if !held && !cycle.is_empty() && (tables_changed || self.planned.as_ref() != Some(&planned))
        {
            let now_slot = self.in_force(now_ns).map(|f| f.slot).or(current);
            let change = Change {
                slots: starting_after(&cycle, now_slot),
                slot_ms,
            };
            match self.planner.change(change, now_ns) {
                Ok(o) => offers.extend(o),
                Err(e) => warn!("no new plan: {e}"),
            }
            // Not tried again every tick when refused.
            self.planned = Some(planned);
        }
        let mut out: Outbox = offers
            .into_iter()
            .map(|(n, o)| {
                let msg = ToAgent::Plan {
                    plan: o.plan,
                    effective_ns: o.effective_ns,
                };
                (n, msg)
            })
            .collect();
        out.extend(self.maybe_amend(now_ns, view));
        out.extend(self.command(now_ns, knobs, installed));
        self.close_overdue(now_ns);
        out
    }

    /// Whether the nodes' links are to be read again (step 1): a node
    /// joined or left or its clock changed state, the clock knob changed,
    /// or [`LINK_REFRESH_NS`] passed.
    fn links_due(&mut self, now_ns: u64, knobs: &ClusterKnobs, view: &impl ClusterView) -> bool {
        let (epoch, max_us) = (view.links_epoch(), knobs.max_clock_error_us);
        let due = self.links_read.is_none_or(|(e, m, at)| {
            e != epoch || m != max_us || now_ns >= at.saturating_add(LINK_REFRESH_NS)
        });
        if due {
            self.links_read = Some((epoch, max_us, now_ns));
        }
        due
    }

    /// The live nodes whose clock fits (step 4): the others move to (or
    /// stay in) `commanded`.
    fn timed_nodes(&mut self, view: &impl ClusterView, max_ns: u64) -> BTreeSet<NodeId> {
        let live: BTreeSet<NodeId> = view.nodes().into_iter().collect();
        self.commanded.retain(|n, _| live.contains(n));
        let mut timed = BTreeSet::new();
        for n in live {
            let link: LinkTiming = view.link(n);
            let fits = if self.commanded.contains_key(&n) {
                link.clock_fits(max_ns / 4 * 3)
            } else {
                link.clock_fits(max_ns)
            };
            if fits {
                if self.commanded.remove(&n).is_some() {
                    // A Freeze it may still hold is ended by the plan.
                    warn!("node {n}: clock good again, switched by the plan");
                }
                timed.insert(n);
            } else if let Some(c) = self.commanded.get_mut(&n) {
                c.rtt_ns = link.rtt_ns;
            } else {
                warn!(
                    "node {n}: clock {} (error bound {} us, max {} us): switched by command",
                    if link.synchronised {
                        "too rough"
                    } else {
                        "not synchronised"
                    },
                    link.clock_error_ns / 1000,
                    max_ns / 1000
                );
                self.commanded.insert(
                    n,
                    Commanded {
                        rtt_ns: link.rtt_ns,
                        ..Commanded::default()
                    },
                );
            }
        }
        timed
    }

    /// Nodes switched by command (step 4): into the slot in force if they
    /// are not there yet; a Freeze for the next generation its lead before
    /// the boundary; the Switch once Frozen came and the boundary did, or
    /// at the give-up time without it. A command into a slot the node's
    /// table does not have (the table shrank before the plan that fits it
    /// came in force) is not sent: the next boundary moves the node.
    fn command(
        &mut self,
        now_ns: u64,
        knobs: &ClusterKnobs,
        installed: &BTreeMap<NodeId, Table>,
    ) -> Outbox {
        let Some(f) = self.in_force(now_ns) else {
            return Outbox::new();
        };
        let next = self.in_force(f.end_ns).filter(|n| n.gen != f.gen);
        let mut out = Outbox::new();
        let nodes: Vec<NodeId> = self.commanded.keys().copied().collect();
        for n in nodes {
            let has = |slot: u32| installed.get(&n).is_none_or(|t| (slot as usize) < t.len());
            if !has(f.slot) {
                self.skip_command(n, f);
                continue;
            }
            let lead = self.lead_of(n, &f);
            let c = self.commanded[&n];
            let give_up = u64::from(knobs.drain_timeout_ms) * 1_000_000 + 2 * c.rtt_ns;
            match c.freezing {
                // Frozen for the generation in force: switch once answered,
                // or at the give-up time.
                Some(fz) if fz.gen == f.gen => {
                    if fz.frozen.is_some() || now_ns >= fz.boundary_ns + give_up {
                        out.push(self.switch_commanded(n, f, Some(fz), now_ns));
                    }
                    continue;
                }
                // Frozen for a generation that is not in force (the plan
                // changed meanwhile): forget it, the Switch below moves it.
                Some(fz) if fz.gen != next.map_or(f.gen, |x| x.gen) => {
                    self.commanded.get_mut(&n).unwrap().freezing = None;
                }
                _ => {}
            }
            let c = self.commanded[&n];
            if c.last != Some(f.gen) && c.freezing.is_none() {
                out.push(self.switch_commanded(n, f, None, now_ns));
                continue;
            }
            let next = next.filter(|x| has(x.slot));
            if let Some(x) = next.filter(|_| c.freezing.is_none() && now_ns + lead >= f.end_ns) {
                self.commanded.get_mut(&n).unwrap().freezing = Some(Freezing {
                    gen: x.gen,
                    slot: x.slot,
                    boundary_ns: f.end_ns,
                    sent_ns: now_ns,
                    frozen: None,
                });
                out.push((
                    n,
                    ToAgent::Freeze {
                        gen: x.gen,
                        from_slot: f.slot,
                        to_slot: x.slot,
                        drain_timeout_ms: knobs.drain_timeout_ms,
                    },
                ));
            }
        }
        out
    }

    /// A commanded node whose table has no slot `f.slot`: nothing is sent
    /// for `f`'s generation (once, counted), a Freeze it holds for it is
    /// forgotten (its parked gangs wait for the next Switch).
    fn skip_command(&mut self, n: NodeId, f: InForce) {
        let c = self.commanded.entry(n).or_default();
        if c.last == Some(f.gen) {
            return;
        }
        c.last = Some(f.gen);
        c.freezing = None;
        self.stats.skipped_commands += 1;
        info!(
            "node {n}: no Switch into slot {} (gen {:?}): its table has no such slot; the next boundary moves it",
            f.slot, f.gen
        );
    }

    /// A commanded node's Switch into `f`, and its record.
    fn switch_commanded(
        &mut self,
        n: NodeId,
        f: InForce,
        fz: Option<Freezing>,
        now_ns: u64,
    ) -> (NodeId, ToAgent) {
        // The plan's slot length (the knob's when it was made).
        let slot_ms = (f.end_ns.saturating_sub(f.start_ns) / 1_000_000) as u32;
        let c = self.commanded.entry(n).or_default();
        c.last = Some(f.gen);
        c.freezing = None;
        let sw = SwitchReport {
            gen: f.gen,
            slot: f.slot,
            at_ns: now_ns,
            late_us: now_ns.saturating_sub(f.start_ns) / 1000,
            outcome: SwitchOutcome::Commanded,
            drain: fz.and_then(|z| z.frozen),
            parked_us: fz.map_or(0, |z| now_ns.saturating_sub(z.sent_ns) / 1000),
            park_late_us: 0,
            lead_us: 0,
        };
        self.record(n, sw, now_ns);
        (
            n,
            ToAgent::Switch {
                gen: f.gen,
                slot: f.slot,
                slot_ms,
            },
        )
    }

    /// A commanded node's Frozen: its switch goes out now if the boundary
    /// came, else at the boundary.
    fn on_frozen(&mut self, node: NodeId, gen: Gen, report: FreezeReport, now_ns: u64) -> Outbox {
        let Some(c) = self.commanded.get_mut(&node) else {
            debug!("node {node}: Frozen for gen {gen:?} but it follows the plan");
            return Outbox::new();
        };
        match c.freezing.as_mut() {
            Some(fz) if fz.gen == gen && fz.frozen.is_none() => fz.frozen = Some(report),
            _ => {
                debug!("node {node}: Frozen for gen {gen:?}, no Freeze of it out");
                return Outbox::new();
            }
        }
        match self.in_force(now_ns).filter(|f| f.gen == gen) {
            Some(f) => {
                let fz = self.commanded[&node].freezing;
                vec![self.switch_commanded(node, f, fz, now_ns)]
            }
            None => Outbox::new(),
        }
    }

    /// The nodes switched by command now.
    pub fn commanded(&self) -> BTreeSet<NodeId> {
        self.commanded.keys().copied().collect()
    }

    /// PlanAck, Yielded, Switched, and a commanded node's Frozen (whose
    /// Switch may go out at once); anything else is not for this.
    pub fn on_agent(&mut self, node: NodeId, msg: &FromAgent, now_ns: u64) -> Outbox {
        match *msg {
            FromAgent::Frozen { gen, report, .. } => {
                return self.on_frozen(node, gen, report, now_ns);
            }
            FromAgent::PlanAck { plan_id } => {
                if let Some(r) = self.planner.on_ack(node, plan_id, now_ns) {
                    info!(
                        "plan {} reached every node ({}) in {:.1} ms, made at {} ns",
                        r.plan_id,
                        r.nodes,
                        r.after_ns as f64 / 1e6,
                        r.made_ns
                    );
                }
            }
            FromAgent::Yielded { gen, job } => {
                self.follow_gen(now_ns);
                if self.yield_gen == Some(gen) {
                    self.yielded.insert((job, node));
                } else {
                    debug!("yield of job {job} on node {node} for gen {gen:?}: not in force");
                }
            }
            FromAgent::Switched { ref reports } => {
                for &r in reports {
                    self.on_switched(node, r, now_ns);
                }
            }
            _ => debug!("node {node}: {msg:?} is not for timed switching"),
        }
        Outbox::new()
    }

    pub fn node_lost(&mut self, node: NodeId) {
        self.planner.node_lost(node);
        self.known.remove(&node);
    }

    /// The yields gathered are those of the generation in force.
    fn follow_gen(&mut self, now_ns: u64) -> Option<InForce> {
        let f = self.in_force(now_ns)?;
        if self.yield_gen != Some(f.gen) {
            self.yield_gen = Some(f.gen);
            self.yielded.clear();
        }
        Some(f)
    }

    fn maybe_amend(&mut self, now_ns: u64, view: &impl ClusterView) -> Outbox {
        let Some(f) = self.follow_gen(now_ns) else {
            return Outbox::new();
        };
        // The slot's (job, node) pairs are only gathered once some yielded.
        if self.amended == Some(f.gen) || self.yielded.is_empty() {
            return Outbox::new();
        }
        let running = view.running(f.slot);
        if running.is_empty() || !running.is_subset(&self.yielded) {
            return Outbox::new();
        }
        let ends_at = now_ns.saturating_add(self.planner.reach_margin_ns());
        if ends_at >= f.end_ns {
            // The planned end comes first anyway.
            self.amended = Some(f.gen);
            return Outbox::new();
        }
        match self.planner.amend(f.gen, ends_at) {
            Ok(amends) => {
                self.amended = Some(f.gen);
                self.stats.amends += 1;
                amends
                    .into_iter()
                    .map(|(n, amend)| (n, ToAgent::Amend { amend }))
                    .collect()
            }
            Err(e) => {
                debug!("gen {:?} yielded, not amended: {e:?}", f.gen);
                Outbox::new()
            }
        }
    }

    fn on_switched(&mut self, node: NodeId, sw: SwitchReport, now_ns: u64) {
        if !self.known.contains(&node) {
            self.stats.stray_reports += 1;
            return;
        }
        self.record(node, sw, now_ns);
    }

    /// One node's switch into the generation's record.
    fn record(&mut self, node: NodeId, sw: SwitchReport, now_ns: u64) {
        let (gen, slot) = (sw.gen, sw.slot);
        if self.closed.contains(&gen) {
            self.stats.stray_reports += 1;
            return;
        }
        if !self.open.contains_key(&gen) && self.open.len() >= MAX_OPEN_RECORDS {
            match self.open.keys().next().copied() {
                Some(oldest) if oldest < gen => self.close(oldest),
                _ => {
                    self.stats.stray_reports += 1;
                    return;
                }
            }
        }
        let open = self.open.entry(gen).or_insert_with(|| Open {
            record: TimedRecord {
                gen,
                slot,
                nodes: BTreeMap::new(),
                missing: Vec::new(),
            },
            first_ns: now_ns,
            came: Vec::new(),
            seen: Vec::new(),
        });
        if !open.add(node, sw) {
            // A second report of one generation from one node: the first
            // stands.
            self.stats.stray_reports += 1;
            return;
        }
        // Complete once every known node reported: counted first, so the
        // check over every node runs about once per generation, not at
        // every report (O(N²) a generation at 4096 nodes; a node lost
        // after it reported makes the count reach early, the check says
        // no).
        let expected = self.known.len() + self.commanded.len();
        if open.came.len() >= expected
            && self
                .known
                .iter()
                .chain(self.commanded.keys())
                .all(|&n| open.has(n))
        {
            self.close(gen);
        }
    }

    fn close_overdue(&mut self, now_ns: u64) {
        let overdue: Vec<Gen> = self
            .open
            .iter()
            .filter(|(_, o)| now_ns.saturating_sub(o.first_ns) >= REPORT_WAIT_NS)
            .map(|(&g, _)| g)
            .collect();
        for g in overdue {
            self.close(g);
        }
    }

    fn close(&mut self, gen: Gen) {
        let Some(mut open) = self.open.remove(&gen) else {
            return;
        };
        let rec = &mut open.record;
        rec.nodes = std::mem::take(&mut open.came).into_iter().collect();
        rec.missing = self
            .known
            .iter()
            .filter(|n| !rec.nodes.contains_key(n))
            .copied()
            .collect();
        if !rec.missing.is_empty() {
            // At most the first 16 ids: every node of a large cluster
            // would be a line of kilobytes at every slot.
            const SHOWN: usize = 16;
            let more = rec.missing.len().saturating_sub(SHOWN);
            warn!(
                "timed switch {}: no report from {} node(s) {:?}{}",
                gen.0,
                rec.missing.len(),
                &rec.missing[..rec.missing.len().min(SHOWN)],
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
        self.closed.insert(gen);
        if self.closed.len() > CLOSED_KEPT {
            self.closed.pop_first();
        }
        self.finished.push(open.record);
    }
}

/// The cycle in order, starting at the first slot after `current`.
fn starting_after(cycle: &[u32], current: Option<u32>) -> Vec<PlannedSlot> {
    let start = current
        .and_then(|c| cycle.iter().position(|&s| s > c))
        .unwrap_or(0);
    let mut slots: Vec<PlannedSlot> = cycle.iter().map(|&slot| PlannedSlot { slot }).collect();
    slots.rotate_left(start);
    slots
}
