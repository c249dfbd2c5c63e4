//! gangd's side of the slot plan (issue 12, part 2), a pure state machine
//! like barrier.rs: when the matrix or a knob changes, make a new
//! [`Plan`], pick the boundary it takes effect at, send it to every node,
//! collect the acknowledgements, and make sure no node is left on the old
//! plan.
//!
//! Inputs: [`Planner::change`] (a new cycle or slot_ms at `now`),
//! [`Planner::on_ack`], [`Planner::node_joined`], [`Planner::node_lost`],
//! [`Planner::timing`] (a node's RTT and clock error bound, as measured on
//! its link) and [`Planner::on_tick`]; [`Planner::change`],
//! [`Planner::on_tick`] and [`Planner::node_joined`] return [`Offers`]
//! (to each node a plan and the cluster time it follows it from) and
//! [`Planner::amend`] its amends; gangd sends them. Times are ns on the
//! cluster clock; no clock is read here.
//!
//! The activation boundary: the first boundary of the plan in force at or
//! after `now + margin`, where margin = max over nodes of (2 × RTT + clock
//! error bound) and at least one slot of the old and of the new plan: time for the
//! offer to arrive, the ack to come back, and the node's clock to be off
//! by its bound. One link's round trip is not the whole of it: gangd
//! writes a plan to its nodes one after the other, and at thousands of
//! nodes the last gets it a fan-out later (70–200 ms at 4096 nodes on
//! loopback, docs/scale.md, "A plan's margin and its fan-out"). So the
//! margin is also at least 5/4 of the longest time one of the last
//! REACH_WINDOW plans took to reach every node (`PlanReached`, to the
//! last ack; capped at MAX_FANOUT_NS), plus the largest clock error
//! bound: the plans' own past says how long the next needs. A plan
//! replaced before it reached every node leaves no sample. The new plan's
//! epoch is that boundary and its first generation the one the old plan
//! would have started there, so generations keep increasing across
//! plans. With no plan in force the first plan starts at `now + margin`,
//! with the generation the planner was made with.
//!
//! A node that has not acknowledged by the activation time is counted
//! (`late_nodes`, once per miss) and offered the plan again, effective at
//! the first boundary of the new plan at or after `now + its own 2 × RTT +
//! error`; again at every such boundary it misses, until it acks or is
//! lost (its link's heartbeat decides that, not this module). A node that
//! joins is offered the plan in force from now, and the pending plan too.
//! A change while a plan is pending replaces it (the old pending plan
//! never takes effect); timed.rs makes none then, as changes faster than
//! the margin would keep every plan from taking effect.
//!
//! Known faults: the fan-out term learns from the past; a plan slower
//! than 5/4 of the last eight (a larger job's start, a busier gangd)
//! still reaches its last nodes late. A late node runs the old plan
//! until it has the new one, so for up to a slot (plus its RTT) it may
//! run another slot than the others; the planner counts it but cannot
//! prevent it. A node that acks late (slow, or on purpose) lengthens the
//! margin of the next eight plans, by at most 5/4 of MAX_FANOUT_NS. An
//! amend (voluntary yield) is refused while a plan is pending (its
//! activation boundary would move closer than its margin): that slot
//! runs its full length. Wired into gangd by timed.rs.
//!
//! Amends: [`Planner::amend`] ends the slot of a generation early in the
//! plan in force and sends the [`Amend`] to every node; the re-offers
//! owed to late nodes move with the boundaries they were set to.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use gang_wire::plan::{Amend, Plan, PlanError, PlannedSlot};
use gang_wire::proto::{Gen, NodeId};

/// How many of the last plans' reach times the margin remembers.
pub const REACH_WINDOW: usize = 8;

/// The most a plan's reach adds to the margin: a stall of gangd (or a node
/// that took seconds to ack) must not hold every later change back for
/// as long.
pub const MAX_FANOUT_NS: u64 = 1_000_000_000;

/// What to send: `plan`, to be followed from `effective_ns` on (until then
/// the node keeps the plan it has).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    pub plan: Plan,
    pub effective_ns: u64,
}

/// Offers to send, in order.
pub type Offers = Vec<(NodeId, Offer)>;

/// A node's link timing, as gangd measures it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTiming {
    pub rtt_ns: u64,
    pub clock_error_ns: u64,
    /// The node's estimate of the cluster clock is good (its last
    /// ClockStatus said so): false while unsynchronised or stepped.
    pub synchronised: bool,
}

impl LinkTiming {
    /// Good enough to switch on its own clock: synchronised, its error
    /// bound within `max_ns`.
    pub fn clock_fits(&self, max_ns: u64) -> bool {
        self.synchronised && self.clock_error_ns <= max_ns
    }

    /// Time for an offer to reach the node and its ack to come back, and
    /// for the node's clock to be off by its bound.
    pub fn margin_ns(&self) -> u64 {
        self.rtt_ns
            .saturating_mul(2)
            .saturating_add(self.clock_error_ns)
    }
}

/// What changed: the cycle of slots and their length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub slots: Vec<PlannedSlot>,
    pub slot_ms: u32,
}

/// Why an amend was not made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmendRefused {
    NoPlan,
    /// A new plan is waiting for its boundary.
    PlanPending,
    Invalid(PlanError),
}

/// A plan sent, not yet in force.
#[derive(Clone, Debug)]
struct Pending {
    plan: Plan,
    /// Nodes that owe an ack.
    owed: BTreeSet<NodeId>,
}

/// The newest plan, until every node it was offered to acknowledged it
/// (before or after it took effect): when it was made, to how many nodes.
#[derive(Clone, Copy, Debug)]
struct Reaching {
    plan_id: u64,
    made_ns: u64,
    offered: usize,
}

/// Every node a plan was offered to acknowledged it, `after_ns` from when
/// it was made: the time for a plan to reach the whole cluster (issue 14's
/// target at 4096 nodes is 100 ms), the ack's way back included; a node
/// late with its ack (counted in `late_nodes`) makes it longer, it is not
/// left out. A plan replaced or cleared before that, or whose last owing
/// node was lost, is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanReached {
    pub plan_id: u64,
    pub nodes: usize,
    /// When it was made (the `now` of `change`).
    pub made_ns: u64,
    pub after_ns: u64,
}

/// Counts since gangd started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    pub plans: u64,
    /// Nodes that had not acknowledged a plan by the time it (or their
    /// re-offer) took effect, counted once per miss.
    pub late_nodes: u64,
    /// Acks of no plan waiting for one (stale, duplicate, unknown node).
    pub stray_acks: u64,
    /// Plans acknowledged by every node they were offered to.
    pub reached: u64,
}

#[derive(Clone, Debug)]
pub struct Planner {
    /// The first generation of the first plan (gangd's count goes on).
    first_gen: Gen,
    links: BTreeMap<NodeId, LinkTiming>,
    in_force: Option<Plan>,
    pending: Option<Pending>,
    /// Late nodes: the re-offer's effective time.
    late: BTreeMap<NodeId, u64>,
    reaching: Option<Reaching>,
    /// The last REACH_WINDOW plans' times to reach every node, newest last.
    reach_ns: VecDeque<u64>,
    next_id: u64,
    stats: PlanStats,
}

impl Planner {
    /// A planner with no plan yet; the first plan starts at `first_gen`.
    pub fn new(first_gen: Gen) -> Self {
        Planner {
            first_gen,
            links: BTreeMap::new(),
            in_force: None,
            pending: None,
            late: BTreeMap::new(),
            reaching: None,
            reach_ns: VecDeque::with_capacity(REACH_WINDOW),
            next_id: 0,
            stats: PlanStats::default(),
        }
    }

    /// The same planner, its first plan numbered `id` (gangd makes a new
    /// planner each time switching becomes timed; plan ids keep increasing).
    pub fn first_id(mut self, id: u64) -> Self {
        self.next_id = id;
        self
    }

    /// How far ahead of a boundary a message to every node (an amend) must
    /// be sent to reach them all in time: the slowest link's margin or the
    /// last plans' fan-out, whichever is longer.
    pub fn reach_margin_ns(&self) -> u64 {
        self.links_margin_ns().max(self.fanout_margin_ns())
    }

    /// The margin of the slowest link alone (2 × RTT + clock error).
    pub fn links_margin_ns(&self) -> u64 {
        self.links
            .values()
            .map(LinkTiming::margin_ns)
            .max()
            .unwrap_or(0)
    }

    pub fn in_force(&self) -> Option<&Plan> {
        self.in_force.as_ref()
    }

    /// The plan waiting for its activation boundary.
    pub fn pending(&self) -> Option<&Plan> {
        self.pending.as_ref().map(|p| &p.plan)
    }

    pub fn stats(&self) -> PlanStats {
        self.stats
    }

    /// Nodes that owe an ack of the pending plan, or of a re-offer.
    pub fn owing(&self) -> BTreeSet<NodeId> {
        let pending = self.pending.iter().flat_map(|p| p.owed.iter().copied());
        pending.chain(self.late.keys().copied()).collect()
    }

    /// A node's link timing was measured (a new node is not offered anything
    /// here: see `node_joined`).
    pub fn timing(&mut self, node: NodeId, link: LinkTiming) {
        self.links.insert(node, link);
    }

    /// The time a plan needs to reach every node: 5/4 of the longest of the
    /// last plans' (capped), with the largest clock error bound on top; 0
    /// before any plan reached every node.
    pub fn fanout_margin_ns(&self) -> u64 {
        let Some(&reach) = self.reach_ns.iter().max() else {
            return 0;
        };
        let error = self.links.values().map(|l| l.clock_error_ns).max();
        let reach = reach.min(MAX_FANOUT_NS);
        // A quarter more: the next plan may meet more traffic than the last
        // ones did (at 4096 nodes a plan after a large job's start took up
        // to 1.1-1.3 times the longest of the eight before it).
        (reach + reach / 4).saturating_add(error.unwrap_or(0))
    }

    /// The margin ahead of `now` a new plan of `slot_ms` needs: every
    /// node's link, the fan-out of the last plans, and at least one slot
    /// of the old and of the new plan.
    pub fn margin_ns(&self, slot_ms: u32) -> u64 {
        let old = self.in_force.as_ref().map_or(0, Plan::slot_ns);
        self.reach_margin_ns()
            .max(old)
            .max(u64::from(slot_ms) * 1_000_000)
    }

    /// The matrix or a knob changed at `now`: a new plan, offered to every
    /// node, effective at the activation boundary.
    pub fn change(&mut self, change: Change, now: u64) -> Result<Offers, PlanError> {
        let at = now.saturating_add(self.margin_ns(change.slot_ms));
        let (epoch_ns, first_gen) = match &self.in_force {
            Some(old) => {
                let b = old
                    .boundary_at_or_after(at)
                    .ok_or(PlanError::EpochOverflow {
                        epoch_ns: old.epoch_ns,
                    })?;
                (b.at_ns, b.gen)
            }
            None => (at, self.first_gen),
        };
        let plan = Plan {
            id: self.next_id,
            epoch_ns,
            slot_ms: change.slot_ms,
            slots: change.slots,
            first_gen,
        };
        plan.validate()?;
        self.next_id += 1;
        self.stats.plans += 1;
        let owed: BTreeSet<NodeId> = self.links.keys().copied().collect();
        let out = offer_all(&owed, &plan, epoch_ns);
        self.reaching = Some(Reaching {
            plan_id: plan.id,
            made_ns: now,
            offered: owed.len(),
        });
        self.pending = Some(Pending { plan, owed });
        Ok(out)
    }

    /// Nothing is left to rotate (the cycle emptied) at `now`: no plan in
    /// force or pending, no re-offers. The next plan starts after every
    /// generation these had, so no node or record sees one again.
    pub fn clear(&mut self, now: u64) {
        // The next boundary of either plan may be armed on a node already
        // (a node arms up to half a slot ahead): the one after it.
        let pending = self.pending.as_ref().map(|p| p.plan.first_gen.0);
        let in_force = self
            .in_force
            .as_ref()
            .and_then(|p| p.boundary_at_or_after(now))
            .map(|b| b.gen.0);
        if let Some(next) = pending.into_iter().chain(in_force).max() {
            self.first_gen = Gen(self.first_gen.0.max(next.saturating_add(1)));
        }
        self.in_force = None;
        self.pending = None;
        self.late.clear();
        self.reaching = None;
    }

    /// `node` acknowledged plan `plan_id` at `now`; if it was the last
    /// node the pending plan waited for, how long the plan took to reach
    /// them all.
    pub fn on_ack(&mut self, node: NodeId, plan_id: u64, now: u64) -> Option<PlanReached> {
        let mut known = false;
        if let Some(p) = self.pending.as_mut().filter(|p| p.plan.id == plan_id) {
            known |= p.owed.remove(&node);
        }
        if self.in_force.as_ref().is_some_and(|p| p.id == plan_id) {
            known |= self.late.remove(&node).is_some();
        }
        if !known {
            self.stats.stray_acks += 1;
            return None;
        }
        self.reached(plan_id, now)
    }

    /// The newest plan, if no node owes its ack any more (a node lost
    /// owes nothing).
    fn reached(&mut self, plan_id: u64, now: u64) -> Option<PlanReached> {
        let r = self.reaching.filter(|r| r.plan_id == plan_id)?;
        let owing = match (&self.pending, &self.in_force) {
            (Some(p), _) if p.plan.id == plan_id => p.owed.len(),
            (_, Some(p)) if p.id == plan_id => self.late.len(),
            _ => return None,
        };
        if owing > 0 {
            return None;
        }
        self.reaching = None;
        self.stats.reached += 1;
        let after_ns = now.saturating_sub(r.made_ns);
        if self.reach_ns.len() == REACH_WINDOW {
            self.reach_ns.pop_front();
        }
        self.reach_ns.push_back(after_ns);
        Some(PlanReached {
            plan_id,
            nodes: r.offered,
            made_ns: r.made_ns,
            after_ns,
        })
    }

    /// Time passed: the pending plan takes effect at its epoch; late nodes
    /// are counted and offered the plan again.
    pub fn on_tick(&mut self, now: u64) -> Offers {
        let mut out = Offers::new();
        if let Some(p) = self.pending.take_if(|p| p.plan.epoch_ns <= now) {
            // A node late for the previous plan owes this one too (it was
            // offered to every node): it catches up on this one.
            self.late = p.owed.iter().map(|&n| (n, p.plan.epoch_ns)).collect();
            self.in_force = Some(p.plan);
        }
        let Some(plan) = &self.in_force else {
            return out;
        };
        for (&node, effective) in self.late.iter_mut() {
            if *effective > now {
                continue;
            }
            self.stats.late_nodes += 1;
            let margin = self.links.get(&node).map_or(0, LinkTiming::margin_ns);
            if let Some(b) = plan.boundary_at_or_after(now.saturating_add(margin)) {
                *effective = b.at_ns;
                out.push((
                    node,
                    Offer {
                        plan: plan.clone(),
                        effective_ns: b.at_ns,
                    },
                ));
            }
        }
        out
    }

    /// Every rank of the slot of `gen` yielded: it ends at `ends_at_ns`,
    /// and every later boundary moves as much earlier. Returns the amend
    /// for every node.
    pub fn amend(
        &mut self,
        gen: Gen,
        ends_at_ns: u64,
    ) -> Result<Vec<(NodeId, Amend)>, AmendRefused> {
        if self.pending.is_some() {
            return Err(AmendRefused::PlanPending);
        }
        let plan = self.in_force.as_ref().ok_or(AmendRefused::NoPlan)?;
        let amend = Amend {
            plan_id: plan.id,
            gen,
            ends_at_ns,
        };
        let amended = plan.amended(&amend).map_err(AmendRefused::Invalid)?;
        // `amended` checked that the generation lies in the plan.
        let planned_end = plan
            .boundary(gen.0 - plan.first_gen.0 + 1)
            .map(|b| b.at_ns)
            .unwrap_or(u64::MAX);
        let shift = planned_end - ends_at_ns;
        for effective in self.late.values_mut() {
            if *effective >= planned_end {
                *effective -= shift;
            }
        }
        self.in_force = Some(amended);
        Ok(self.links.keys().map(|&n| (n, amend)).collect())
    }

    /// `node` joined at `now`: it is offered the plan in force from now,
    /// and owes an ack of the pending plan, offered too.
    pub fn node_joined(&mut self, node: NodeId, link: LinkTiming, now: u64) -> Offers {
        self.links.insert(node, link);
        let mut out = Offers::new();
        if let Some(plan) = &self.in_force {
            out.push((
                node,
                Offer {
                    plan: plan.clone(),
                    effective_ns: now,
                },
            ));
        }
        if let Some(p) = self.pending.as_mut() {
            if p.owed.insert(node) {
                if let Some(r) = self.reaching.as_mut().filter(|r| r.plan_id == p.plan.id) {
                    r.offered += 1;
                }
            }
            let effective_ns = p.plan.epoch_ns;
            out.push((
                node,
                Offer {
                    plan: p.plan.clone(),
                    effective_ns,
                },
            ));
        }
        out
    }

    /// `node` is gone: it owes nothing any more.
    pub fn node_lost(&mut self, node: NodeId) {
        self.links.remove(&node);
        self.late.remove(&node);
        if let Some(p) = self.pending.as_mut() {
            p.owed.remove(&node);
        }
    }
}

fn offer_all(nodes: &BTreeSet<NodeId>, plan: &Plan, effective_ns: u64) -> Offers {
    let offer = Offer {
        plan: plan.clone(),
        effective_ns,
    };
    nodes.iter().map(|&n| (n, offer.clone())).collect()
}
