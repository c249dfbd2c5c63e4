//! Following a plan on this node (timed switching, issue 12, part 3): a
//! pure state machine that turns a [`Plan`] into the node's own requests,
//! at the right local instants, with no message on the switch's path.
//!
//! The plan it is given is already on this node's CLOCK_MONOTONIC (the
//! agent converts gangd's plan with its cluster clock and gives it again,
//! freshly converted, as its estimate moves: a [`Follower::set_plan`] of
//! the same plan moves the boundaries by microseconds). For each boundary
//! B (slot s, generation g):
//! - barrier = strict: at B − lead ([`DrainLead`]) it asks for a park of
//!   the slot in force ([`Action::Park`], the switcher's Freeze: the park,
//!   then the drain wait on the freeze waiter). When the drain
//!   is over ([`Follower::drained`]) it arms the switch at B, or at once if
//!   B is past (a late switch) ([`Action::Arm`]: Switch with at_ns, an
//!   absolute BPF timer).
//! - barrier = off, or a boundary into the slot already running (a slot
//!   alone in the rotation: nothing leaves): it arms the switch at B half
//!   a slot ahead, nothing parked (one switch is armed at a time in BPF).
//!
//! When the switch fired ([`Follower::fired`]) it hands out a [`Done`]:
//! the report gangd gets after the fact (when, how late, how the drain
//! went), and the time from the instant the park was due to the drain's
//! end goes into the lead: the park + drain, and the loop's own lateness
//! to the park (a loop that wakes late under load needs a longer lead).
//!
//! Behind: if the node finds itself in a slot the plan has already ended
//! (a plan that arrived late, a daemon that was busy), it switches to the
//! slot in force at once, as a late switch, never waiting for the next
//! boundary with the wrong slot running.
//!
//! Inputs: `set_plan`, `clear`, `tick(now)`, `drained`, `fired`; outputs:
//! at most one [`Action`] per input, and [`Done`] reports. No clock read,
//! no I/O: the main loop (mainloop.rs) feeds it and carries out its
//! actions.
//!
//! Known faults: an amend or a new plan that moves the boundary being
//! parked for keeps the park (the slot in force stays parked until the new
//! boundary): parking early costs the slot's tail, never correctness.
//! Generations must increase across plans (gangd's planner makes them so);
//! a plan whose boundaries are all at or before the last switch waits for
//! its first later boundary.

use gang_wire::plan::{Plan, PlanError, SlotStart};
use gang_wire::proto::SwitchOutcome;

use super::lead::{classify, DrainEnd, DrainLead, Lateness, LeadLimits};

/// What the main loop is to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Park the gangs of the slot in force (Request::Freeze) for the switch
    /// to `gen`; answer with `drained`.
    Park {
        gen: u64,
        to_slot: u32,
        timeout_ms: u32,
    },
    /// Arm the switch (Request::Switch with `at_ns`; at once if past).
    Arm {
        slot: u32,
        gen: u64,
        slot_ms: u32,
        at_ns: u64,
    },
    /// The switch to `gen` was armed but never fired within ARM_LOST of
    /// its instant (an immediate switch, e.g. a new table, replaced it in
    /// BPF): given up, on to the next boundary. Nothing to do but log.
    Lost { gen: u64 },
}

/// How long after its instant an armed switch that did not fire is given up.
pub const ARM_LOST_NS: u64 = 1_000_000_000;
/// How often the loop looks whether an armed switch whose instant has come
/// fired. One armed late fires at once in BPF, but only the loop's next
/// turn reports it and arms the next boundary: with the loop asleep for its
/// idle period (100 ms) that boundary was missed as well, and at 50 ms
/// slots a node stayed late like this for whole runs.
pub const FIRED_POLL_NS: u64 = 1_000_000;

/// A timed switch that happened, for gangd (FromAgent::Switched).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub gen: u64,
    pub slot: u32,
    /// When the timer fired, local ns.
    pub at_ns: u64,
    /// at_ns − the boundary (0 if not after it).
    pub late_ns: u64,
    pub outcome: SwitchOutcome,
    /// From the park to at_ns (0: nothing parked).
    pub parked_ns: u64,
    /// How long after it was due (boundary − lead) the park began: the
    /// loop's lateness to the slot's tail (0: nothing parked).
    pub park_late_ns: u64,
    /// The lead the park was due by (0: nothing parked, or a node behind
    /// the plan).
    pub lead_ns: u64,
}

/// How the node follows plans: the knobs that matter here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowConfig {
    /// barrier = strict: park and drain in the slot's tail.
    pub strict: bool,
    pub drain_timeout_ms: u32,
    /// The lead's bounds and fixed value (its slot_ms is the plan's).
    pub min_lead_ns: u64,
    pub fixed_lead_us: Option<u64>,
    /// The knob drain_lead_pct: the quantile an adaptive lead is taken at.
    pub lead_pct: u32,
}

/// How the park of an armed switch went, on the loop's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Drain {
    /// From the park to the drain's end.
    park_drain_ns: u64,
    /// From the instant the park was due to the drain's end.
    lead_used_ns: u64,
    /// From the instant the park was due to the park.
    park_late_ns: u64,
    /// From the instant the park was due to the boundary.
    lead_ns: u64,
    end: DrainEnd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Waiting for the next boundary's park (strict) or arming (off).
    Idle,
    /// Parked at `parked_at` (the loop's instant; `planned_at`: the
    /// instant it was due, boundary − lead), waiting for the drain.
    Parking {
        to: SlotStart,
        parked_at: u64,
        planned_at: u64,
    },
    /// The switch is armed in BPF.
    Armed {
        to: SlotStart,
        drain: Option<Drain>,
        armed_at: u64,
    },
}

pub struct Follower {
    plan: Option<Plan>,
    /// Local instant from which `plan` is followed.
    effective_ns: u64,
    cfg: FollowConfig,
    lead: DrainLead,
    step: Step,
    /// The generation last switched to by this follower, and its slot.
    last_gen: Option<u64>,
    last_slot: Option<u32>,
}

impl Follower {
    pub fn new(cfg: FollowConfig) -> Self {
        Self {
            plan: None,
            effective_ns: 0,
            cfg,
            lead: DrainLead::new(),
            step: Step::Idle,
            last_gen: None,
            last_slot: None,
        }
    }

    pub fn following(&self) -> bool {
        self.plan.is_some()
    }

    pub fn set_config(&mut self, cfg: FollowConfig) {
        self.cfg = cfg;
    }

    pub fn config(&self) -> FollowConfig {
        self.cfg
    }

    /// Follow `plan` (local times) from `effective_ns` on. A park or an
    /// armed switch in progress stays (see the known faults).
    pub fn set_plan(&mut self, plan: Plan, effective_ns: u64) -> Result<(), PlanError> {
        plan.validate()?;
        self.plan = Some(plan);
        self.effective_ns = effective_ns;
        Ok(())
    }

    /// A park is in progress (its drain answers `drained`).
    pub fn parking(&self) -> bool {
        matches!(self.step, Step::Parking { .. })
    }

    /// The action for `gen` could not be carried out (the switcher refused
    /// it, or replaced it before it fired): on to the next boundary,
    /// without a report. False if `gen` was not the switch in progress.
    pub fn abandon(&mut self, gen: u64) -> bool {
        match self.step {
            Step::Parking { to, .. } | Step::Armed { to, .. } if to.gen.0 == gen => {
                self.step = Step::Idle;
                self.last_gen = Some(gen);
                true
            }
            _ => false,
        }
    }

    /// Commands take over (switching = commanded, or gangd said so). What
    /// ran last is forgotten too: the next plan may come from a gangd that
    /// started again, whose generations begin anew, and the command may
    /// have changed the slot.
    pub fn clear(&mut self) {
        self.plan = None;
        self.step = Step::Idle;
        self.last_gen = None;
        self.last_slot = None;
    }

    /// The lead in force for the plan followed (None: no plan).
    pub fn lead_in_force(&self) -> Option<u64> {
        self.plan.as_ref().map(|p| self.lead_ns(p))
    }

    /// The lead in force for `plan`.
    pub fn lead_ns(&self, plan: &Plan) -> u64 {
        self.lead.lead_ns(&LeadLimits {
            min_ns: self.cfg.min_lead_ns,
            slot_ms: plan.slot_ms,
            fixed_us: self.cfg.fixed_lead_us,
            quantile_pct: self.cfg.lead_pct,
        })
    }

    /// The next boundary to switch at, as seen at `now`: the slot the plan
    /// has in force if this node is behind it, else the next boundary.
    fn target(&self, now: u64) -> Option<(SlotStart, bool)> {
        let plan = self.plan.as_ref()?;
        let from = now.max(self.effective_ns);
        let done = self.last_gen.unwrap_or(0);
        if now >= self.effective_ns {
            if let Some(f) = plan.in_force(now) {
                if f.gen.0 > done {
                    let start = SlotStart {
                        at_ns: f.start_ns,
                        gen: f.gen,
                        slot: f.slot,
                    };
                    return Some((start, true));
                }
            }
        }
        // The first boundary after the last switch, at or after `from`.
        plan.boundaries(from, 64)
            .into_iter()
            .find(|b| b.gen.0 > done)
            .map(|b| (b, false))
    }

    /// When `tick` has work next (local ns), if ever, as seen at `now`.
    pub fn next_wake(&self, now: u64) -> Option<u64> {
        match self.step {
            Step::Idle => {
                let plan = self.plan.as_ref()?;
                match self.target(now)? {
                    (_, true) => Some(now),
                    (to, false) => Some(self.act_at(plan, &to).max(now)),
                }
            }
            // The drain answers.
            Step::Parking { .. } => None,
            // At its instant, then every FIRED_POLL_NS until it fired (or
            // is lost, ARM_LOST_NS after it).
            Step::Armed { to, .. } if now < to.at_ns => Some(to.at_ns),
            Step::Armed { .. } => Some(now.saturating_add(FIRED_POLL_NS)),
        }
    }

    /// The local instant of the action for boundary `to`.
    fn act_at(&self, plan: &Plan, to: &SlotStart) -> u64 {
        if self.cfg.strict && self.last_slot != Some(to.slot) {
            to.at_ns.saturating_sub(self.lead_ns(plan))
        } else {
            // Arm well ahead; only one switch is armed at a time anyway.
            to.at_ns.saturating_sub(plan.slot_ns() / 2)
        }
    }

    /// The time passed: the next action, if one is due.
    pub fn tick(&mut self, now: u64) -> Option<Action> {
        if let Step::Armed { to, .. } = self.step {
            if now > to.at_ns.saturating_add(ARM_LOST_NS) {
                self.step = Step::Idle;
                self.last_gen = Some(to.gen.0);
                return Some(Action::Lost { gen: to.gen.0 });
            }
        }
        if self.step != Step::Idle {
            return None;
        }
        let plan = self.plan.as_ref()?;
        let (to, behind) = self.target(now)?;
        let due = self.act_at(plan, &to);
        if !behind && now < due {
            return None;
        }
        // Into the slot already running (a slot alone in the rotation):
        // nothing leaves, nothing to park.
        if self.cfg.strict && self.last_slot != Some(to.slot) {
            self.step = Step::Parking {
                to,
                parked_at: now,
                planned_at: if behind { now } else { due.min(now) },
            };
            Some(Action::Park {
                gen: to.gen.0,
                to_slot: to.slot,
                timeout_ms: self.cfg.drain_timeout_ms,
            })
        } else {
            Some(self.arm(to, None, now))
        }
    }

    fn arm(&mut self, to: SlotStart, drain: Option<Drain>, now: u64) -> Action {
        let slot_ms = self.plan.as_ref().map_or(0, |p| p.slot_ms);
        self.step = Step::Armed {
            to,
            drain,
            armed_at: now,
        };
        Action::Arm {
            slot: to.slot,
            gen: to.gen.0,
            slot_ms,
            at_ns: to.at_ns.max(now),
        }
    }

    /// The park for `gen` is over at `now`: drained, or timed out.
    pub fn drained(&mut self, gen: u64, timed_out: bool, now: u64) -> Option<Action> {
        let Step::Parking {
            to,
            parked_at,
            planned_at,
        } = self.step
        else {
            return None;
        };
        if to.gen.0 != gen {
            return None;
        }
        let end = if timed_out {
            DrainEnd::TimedOut { at_ns: now }
        } else {
            DrainEnd::Drained { at_ns: now }
        };
        let drain = Drain {
            park_drain_ns: now.saturating_sub(parked_at),
            lead_used_ns: now.saturating_sub(planned_at),
            park_late_ns: parked_at.saturating_sub(planned_at),
            lead_ns: to.at_ns.saturating_sub(planned_at),
            end,
        };
        Some(self.arm(to, Some(drain), now))
    }

    /// The switch to `gen` fired at `at_ns`: its report.
    pub fn fired(&mut self, gen: u64, at_ns: u64) -> Option<Done> {
        let Step::Armed {
            to,
            drain,
            armed_at,
        } = self.step
        else {
            return None;
        };
        if to.gen.0 != gen {
            return None;
        }
        self.step = Step::Idle;
        self.last_gen = Some(gen);
        self.last_slot = Some(to.slot);
        let late_ns = at_ns.saturating_sub(to.at_ns);
        // Armed when the drain ended: the park began park + drain earlier.
        let parked_ns = drain.map_or(0, |d| {
            at_ns.saturating_sub(armed_at.saturating_sub(d.park_drain_ns))
        });
        let outcome = match drain {
            Some(d) => {
                // What the lead has to cover: from the instant the park
                // was due, the loop's lateness to it included.
                self.lead.record(d.lead_used_ns);
                match classify(to.at_ns, d.end).lateness {
                    Lateness::OnTime => SwitchOutcome::OnTime,
                    Lateness::Late { .. } => SwitchOutcome::Late,
                    Lateness::TimedOut { .. } => SwitchOutcome::TimedOut,
                }
            }
            None if armed_at > to.at_ns => SwitchOutcome::Late,
            None => SwitchOutcome::OnTime,
        };
        Some(Done {
            gen,
            slot: to.slot,
            at_ns,
            late_ns,
            outcome,
            parked_ns,
            park_late_ns: drain.map_or(0, |d| d.park_late_ns),
            lead_ns: drain.map_or(0, |d| d.lead_ns),
        })
    }
}

#[cfg(test)]
mod tests {
    //! The follower's contract, boundary by boundary.
    use super::*;
    use gang_wire::plan::PlannedSlot;
    use gang_wire::proto::Gen;

    const MS: u64 = 1_000_000;

    /// Two slots of 100 ms from t = 1000 ms, generation 10 first.
    fn plan() -> Plan {
        Plan {
            id: 1,
            epoch_ns: 1000 * MS,
            slot_ms: 100,
            slots: vec![PlannedSlot { slot: 0 }, PlannedSlot { slot: 1 }],
            first_gen: Gen(10),
        }
    }

    fn cfg(strict: bool) -> FollowConfig {
        FollowConfig {
            strict,
            drain_timeout_ms: 30,
            min_lead_ns: 5 * MS,
            fixed_lead_us: None,
            lead_pct: crate::switching::lead::DEFAULT_QUANTILE_PCT,
        }
    }

    fn follower(strict: bool) -> Follower {
        let mut f = Follower::new(cfg(strict));
        f.set_plan(plan(), 1000 * MS).unwrap();
        f
    }

    #[test]
    fn strict_parks_a_lead_before_the_boundary_and_arms_it_when_drained() {
        let mut f = follower(true);
        // The epoch's boundary (gen 10, slot 0): park 5 ms (the minimum
        // lead, no drain measured yet) before it.
        assert_eq!(f.next_wake(900 * MS), Some(995 * MS));
        assert_eq!(f.tick(994 * MS), None, "not yet");
        assert_eq!(
            f.tick(995 * MS),
            Some(Action::Park {
                gen: 10,
                to_slot: 0,
                timeout_ms: 30
            })
        );
        assert_eq!(f.tick(996 * MS), None, "one park at a time");
        assert_eq!(f.next_wake(996 * MS), None, "the drain answers");
        // Drained 2 ms later: armed at the boundary itself.
        assert_eq!(
            f.drained(10, false, 997 * MS),
            Some(Action::Arm {
                slot: 0,
                gen: 10,
                slot_ms: 100,
                at_ns: 1000 * MS
            })
        );
        let done = f.fired(10, 1000 * MS + 30_000).unwrap();
        assert_eq!(done.outcome, SwitchOutcome::OnTime);
        assert_eq!(done.late_ns, 30_000, "the timer's own lateness");
        assert_eq!(done.slot, 0);
        assert_eq!(done.parked_ns, 5 * MS + 30_000, "parked from 995 ms on");
        assert_eq!((done.park_late_ns, done.lead_ns), (0, 5 * MS));
        // The next boundary (gen 11, slot 1) at 1100 ms: the lead is the
        // measured park + drain (2 ms) but at least 5 ms.
        assert_eq!(f.next_wake(1001 * MS), Some(1095 * MS));
    }

    #[test]
    fn a_drain_that_ends_after_the_boundary_switches_at_once_and_is_late() {
        let mut f = follower(true);
        assert!(matches!(f.tick(995 * MS), Some(Action::Park { .. })));
        assert_eq!(
            f.drained(10, false, 1004 * MS),
            Some(Action::Arm {
                slot: 0,
                gen: 10,
                slot_ms: 100,
                at_ns: 1004 * MS
            })
        );
        let done = f.fired(10, 1004 * MS).unwrap();
        assert_eq!(done.outcome, SwitchOutcome::Late);
        assert_eq!(done.late_ns, 4 * MS);
        assert_eq!(done.parked_ns, 9 * MS, "the lead and the lateness");
        // It learnt: the next lead covers the 9 ms park + drain.
        assert_eq!(f.next_wake(1005 * MS), Some(1091 * MS));
    }

    #[test]
    fn a_park_the_loop_starts_late_teaches_the_lead_its_lateness_too() {
        let mut f = follower(true);
        // Due at 995 ms; the loop wakes at 997 ms; drained 6 ms later.
        assert!(matches!(f.tick(997 * MS), Some(Action::Park { .. })));
        f.drained(10, false, 1003 * MS).unwrap();
        let done = f.fired(10, 1003 * MS).unwrap();
        assert_eq!(done.outcome, SwitchOutcome::Late);
        assert_eq!(done.parked_ns, 6 * MS, "idle from the actual park");
        assert_eq!(done.park_late_ns, 2 * MS, "the loop's lateness, reported");
        assert_eq!(done.lead_ns, 5 * MS, "the lead it was due by");
        // The lead covers the 8 ms from the due instant, not the 6 ms of
        // the park + drain alone.
        assert_eq!(f.next_wake(1004 * MS), Some(1092 * MS));
    }

    /// The knob drain_lead_pct: the adaptive lead is that quantile of the
    /// measured park + drain times, from the next park on.
    #[test]
    fn the_lead_quantile_knob_picks_the_lead_from_the_measured_drains() {
        let mut f = follower(true);
        let mut now = 900 * MS;
        for (k, d) in [6u64, 8, 10, 12].into_iter().enumerate() {
            let gen = 10 + k as u64;
            let boundary = (1000 + 100 * k as u64) * MS;
            let at = f.next_wake(now).unwrap();
            assert!(matches!(f.tick(at), Some(Action::Park { .. })), "gen {gen}");
            f.drained(gen, false, at + d * MS).unwrap();
            now = boundary.max(at + d * MS);
            assert!(f.fired(gen, now).is_some(), "gen {gen}");
        }
        assert_eq!(f.lead_in_force(), Some(10 * MS), "p75 of 6, 8, 10, 12 ms");
        for (pct, want) in [(50, 8), (99, 12)] {
            let mut c = f.config();
            c.lead_pct = pct;
            f.set_config(c);
            assert_eq!(f.lead_in_force(), Some(want * MS), "p{pct}");
        }
        // The park for gen 14 (boundary 1400 ms) starts at the p99 lead.
        assert_eq!(f.next_wake(now), Some(1388 * MS));
    }

    #[test]
    fn a_drain_that_times_out_is_counted_so() {
        let mut f = follower(true);
        f.tick(995 * MS);
        f.drained(10, true, 1025 * MS).unwrap();
        let done = f.fired(10, 1025 * MS).unwrap();
        assert_eq!(done.outcome, SwitchOutcome::TimedOut);
    }

    #[test]
    fn barrier_off_arms_each_boundary_ahead_without_parking() {
        let mut f = follower(false);
        assert_eq!(f.next_wake(900 * MS), Some(950 * MS));
        assert_eq!(
            f.tick(950 * MS),
            Some(Action::Arm {
                slot: 0,
                gen: 10,
                slot_ms: 100,
                at_ns: 1000 * MS
            })
        );
        assert_eq!(f.tick(960 * MS), None, "one armed at a time");
        let done = f.fired(10, 1000 * MS).unwrap();
        assert_eq!(done.parked_ns, 0, "nothing parked");
        assert_eq!((done.park_late_ns, done.lead_ns), (0, 0));
        assert_eq!(done.outcome, SwitchOutcome::OnTime);
        assert_eq!(
            f.tick(1050 * MS),
            Some(Action::Arm {
                slot: 1,
                gen: 11,
                slot_ms: 100,
                at_ns: 1100 * MS
            })
        );
    }

    #[test]
    fn a_node_behind_the_plan_switches_to_the_slot_in_force_at_once() {
        let mut f = follower(false);
        // The plan arrived (or the loop woke) in the middle of gen 12.
        assert_eq!(f.next_wake(1250 * MS), Some(1250 * MS));
        assert_eq!(
            f.tick(1250 * MS),
            Some(Action::Arm {
                slot: 0,
                gen: 12,
                slot_ms: 100,
                at_ns: 1250 * MS
            })
        );
        // Armed at once: its firing is looked for a millisecond later, not
        // when the loop would wake anyway.
        assert_eq!(f.next_wake(1250 * MS), Some(1251 * MS));
        let done = f.fired(12, 1250 * MS).unwrap();
        assert_eq!(done.outcome, SwitchOutcome::Late);
        assert_eq!(done.late_ns, 50 * MS);
        // Then on with the plan: gen 13 at 1300 ms.
        assert!(matches!(
            f.tick(1260 * MS),
            Some(Action::Arm {
                gen: 13,
                at_ns,
                ..
            }) if at_ns == 1300 * MS
        ));
    }

    #[test]
    fn after_commands_a_plan_of_a_restarted_gangd_is_followed_from_its_first_generation() {
        let mut f = follower(false);
        // Followed until generation 400 of the old gangd's plan...
        let old = Plan {
            first_gen: Gen(400),
            ..plan()
        };
        f.set_plan(old, 0).unwrap();
        assert!(matches!(
            f.tick(1250 * MS),
            Some(Action::Arm { gen: 402, .. })
        ));
        f.fired(402, 1250 * MS).unwrap();
        // ...then commands, then the new gangd's plan from generation 10.
        f.clear();
        f.set_plan(plan(), 1250 * MS).unwrap();
        assert!(matches!(
            f.tick(1260 * MS),
            Some(Action::Arm {
                gen: 12,
                slot: 0,
                ..
            })
        ));
    }

    #[test]
    fn nothing_before_the_effective_time_and_nothing_without_a_plan() {
        let mut f = Follower::new(cfg(false));
        assert_eq!(f.tick(1000 * MS), None);
        assert_eq!(f.next_wake(0), None);
        // Effective from 1200 ms: the first boundary there is gen 12.
        f.set_plan(plan(), 1200 * MS).unwrap();
        assert_eq!(f.tick(1100 * MS), None);
        assert!(matches!(
            f.tick(1150 * MS),
            Some(Action::Arm { gen: 12, .. })
        ));
        f.clear();
        assert_eq!(f.tick(1150 * MS), None, "commands took over");
        assert!(!f.following());
    }

    #[test]
    fn an_armed_switch_that_never_fires_is_given_up_after_a_second() {
        let mut f = follower(false);
        assert!(matches!(
            f.tick(950 * MS),
            Some(Action::Arm { gen: 10, .. })
        ));
        assert_eq!(f.next_wake(960 * MS), Some(1000 * MS), "its instant");
        assert_eq!(
            f.next_wake(1500 * MS),
            Some(1501 * MS),
            "then a look every millisecond"
        );
        assert_eq!(f.tick(1999 * MS), None);
        assert_eq!(f.tick(2001 * MS), Some(Action::Lost { gen: 10 }));
        assert_eq!(f.fired(10, 2001 * MS), None, "too late to report");
        // On with the slot in force at 2001 ms (gen 20), at once.
        assert!(matches!(
            f.tick(2001 * MS),
            Some(Action::Arm { gen: 20, .. })
        ));
    }

    #[test]
    fn a_slot_alone_in_the_rotation_is_never_parked() {
        let mut f = Follower::new(cfg(true));
        let mut alone = plan();
        alone.slots = vec![PlannedSlot { slot: 3 }];
        f.set_plan(alone, 1000 * MS).unwrap();
        // The first switch into it parks whatever ran before.
        assert!(matches!(
            f.tick(995 * MS),
            Some(Action::Park { gen: 10, .. })
        ));
        f.drained(10, false, 996 * MS).unwrap();
        f.fired(10, 1000 * MS).unwrap();
        // Then every boundary re-arms the same slot, half a slot ahead,
        // without parking the job that keeps running.
        assert_eq!(f.next_wake(1001 * MS), Some(1050 * MS));
        assert_eq!(
            f.tick(1050 * MS),
            Some(Action::Arm {
                slot: 3,
                gen: 11,
                slot_ms: 100,
                at_ns: 1100 * MS
            })
        );
        assert_eq!(
            f.fired(11, 1100 * MS).unwrap().outcome,
            SwitchOutcome::OnTime
        );
    }

    #[test]
    fn answers_for_another_generation_are_ignored() {
        let mut f = follower(true);
        f.tick(995 * MS);
        assert_eq!(f.drained(11, false, 996 * MS), None);
        assert!(f.drained(10, false, 996 * MS).is_some());
        assert_eq!(f.fired(9, 1000 * MS), None);
        assert!(f.fired(10, 1000 * MS).is_some());
        assert_eq!(f.fired(10, 1000 * MS), None, "reported once");
    }

    #[test]
    fn a_bad_plan_is_refused_and_the_old_one_kept() {
        let mut f = follower(false);
        let mut bad = plan();
        bad.slots.clear();
        assert!(f.set_plan(bad, 0).is_err());
        assert!(f.following());
        assert!(matches!(
            f.tick(950 * MS),
            Some(Action::Arm { gen: 10, .. })
        ));
    }
}
