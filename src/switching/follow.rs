//! The main loop's side of timed switching: carries out over the switcher
//! what the plan follower (timed.rs) asks, and hands its reports out.
//!
//! The agent gives the loop a plan already on this node's clock
//! (Request::Plan, again whenever its clock estimate moves). Each turn of
//! the loop (`turn`): drains that finished go to the follower, which arms
//! the switch (Request::Switch with at_ns, through the switcher); a timed
//! switch that fired (the switcher's `timed_fired`) closes the follower's
//! step, and its report goes to the sink (the agent sends gangd Switched);
//! then the follower's tick may ask for a park (the switcher's freeze, its
//! drain waited for on the freeze waiter, as for a commanded Freeze) or
//! an arming. The waiter answers through a channel and wakes the loop
//! (Inbox::DrainEnded), so the switch is armed as soon as the drain is
//! over, not at the loop's next look. `wait` bounds the loop's sleep: the
//! follower's next instant (none while a park lasts: the waiter wakes it),
//! or DRAIN_POLL without a way to wake the loop (host tests). An armed
//! switch's next instant is its own, then a look every millisecond until
//! it fired (timed::FIRED_POLL_NS): the switcher wakes the loop only for a
//! switch armed ahead, and one armed late (at once) was otherwise reported
//! at the loop's idle period, 100 ms on, which made the next boundary late
//! too. A Freeze or a Switch from outside (gangd went back to commands)
//! ends the plan.
//!
//! A new column while a plan is followed (Request::Column: gangd's
//! Schedule, sent before the Plan it goes with) is not installed at once:
//! the nodes would run the new table's slots under the old plan, each from
//! the moment its Schedule came. It is held, bound to the next plan of
//! another id, and installed at that plan's first switch, at its boundary,
//! in one step with the switch (`Switcher::column_at_switch`): the old
//! table rules up to the boundary, the new one from it. That switch is
//! carried out by the loop at the boundary (its timer), not by a BPF timer,
//! so it is as late as the loop's wake-up. While a column waits, parks
//! leave nothing running across the switch (the new table's slot numbers
//! are not the old one's). A held column is installed at once if commands
//! take over (Freeze, Switch, Unplan) or no new plan comes within
//! COLUMN_WAIT. A column that comes while a held one's switch is due
//! (gangd's tables for two jobs starting a moment apart) waits behind it
//! (`after_due`) and binds to the next plan; it replaced the due one
//! before, and since nothing is armed in BPF for a due switch, the
//! follower waited for it until ARM_LOST (the evaluation: both nodes lost
//! a switch and the next ten at a job's start).
//!
//! A switch armed and then replaced in BPF by a switch at once (a table
//! without its slot, the node going standalone) never fires: the switcher
//! says so (`timed_replaced`) and the follower goes on to the next
//! boundary at once (it waited ARM_LOST, a second, for it before).
//!
//! Known faults: a
//! switch the switcher refused is abandoned (logged, no report), and the
//! follower goes on with the next boundary; so is a replaced one, and the
//! slot the switch at once put in force runs until that boundary.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use log::warn;

use super::lead::DEFAULT_QUANTILE_PCT;
use super::timed::{Action, Done, FollowConfig, Follower};
use super::Switcher;
use crate::control::{FrozenReport, GangCpus, Inbox, Request};

/// Told every timed switch, with its park report (barrier = strict).
pub type SwitchedSink = Arc<dyn Fn(&Done, Option<&FrozenReport>) + Send + Sync>;

/// The lead's floor: parking takes at least this long on any node.
const MIN_LEAD: Duration = Duration::from_millis(2);
/// How often a loop that cannot be woken (no inbox) looks for a drain's
/// answer: while a park lasts (a millisecond or a few), a late look is a
/// late switch.
const DRAIN_POLL: Duration = Duration::from_micros(250);
/// How long a column waits for the plan it goes with.
pub const COLUMN_WAIT: Duration = Duration::from_secs(2);
/// A boundary this close before a plan's effective instant is its first
/// (the plan is converted again every second: its instants move by µs).
const EFFECTIVE_SLACK_NS: u64 = 1_000_000;

type Column = Vec<Vec<GangCpus>>;

/// Where a column held back for a plan is.
enum Held {
    /// Came while a plan was followed, at this instant: waits for the
    /// next plan of an id other than `plan_id`.
    Staged { at_ns: u64, plan_id: Option<u64> },
    /// That plan came: installed at its first switch, into `first`
    /// (generation, slot: its boundary at or after its effective instant),
    /// or at any later one. A switch of the old plan still in progress
    /// (its own generation and slot) is not it, even at the same instant.
    Bound {
        first: Option<(u64, u32)>,
        effective_ns: u64,
    },
    /// That switch is due at `at_ns`: the loop carries it out then.
    Due {
        slot: u32,
        gen: u64,
        slot_ms: u32,
        at_ns: u64,
    },
}

pub struct Follow {
    follower: Follower,
    drained_tx: Sender<(u64, FrozenReport)>,
    drained_rx: Receiver<(u64, FrozenReport)>,
    /// The loop's inbox: the waiter wakes the loop with DrainEnded.
    wake: Option<Sender<Inbox>>,
    /// The park report of the switch armed now.
    drain: Option<FrozenReport>,
    sink: Option<SwitchedSink>,
    /// A column held back for a plan's first boundary, and where it is.
    column: Option<(Column, Held)>,
    /// A newer column that came while `column`'s switch was due (Staged or
    /// Bound): it takes `column`'s place once that switch is carried out.
    after_due: Option<(Column, Held)>,
    /// The id of the plan followed.
    plan_id: Option<u64>,
    /// The knob drain_lead_us (None: the lead adapts).
    fixed_lead_us: Option<u64>,
    /// The knob drain_lead_pct (the adaptive lead's quantile).
    lead_pct: u32,
}

impl Follow {
    /// `wake`: the loop's inbox, told when a drain ended (None: the loop
    /// polls for it every DRAIN_POLL).
    pub fn new(sink: Option<SwitchedSink>, wake: Option<Sender<Inbox>>) -> Self {
        let (drained_tx, drained_rx) = channel();
        Self {
            follower: Follower::new(FollowConfig {
                strict: true,
                drain_timeout_ms: 200,
                min_lead_ns: MIN_LEAD.as_nanos() as u64,
                fixed_lead_us: None,
                lead_pct: DEFAULT_QUANTILE_PCT,
            }),
            drained_tx,
            drained_rx,
            wake,
            drain: None,
            sink,
            column: None,
            after_due: None,
            plan_id: None,
            fixed_lead_us: None,
            lead_pct: DEFAULT_QUANTILE_PCT,
        }
    }

    /// A park is in progress: the loop waits for its drain.
    pub fn parking(&self) -> bool {
        self.follower.parking()
    }

    /// A held column's switch is due (the loop carries it out at its
    /// instant; nothing is armed in BPF for it).
    #[cfg(test)]
    pub(crate) fn switch_due(&self) -> bool {
        matches!(self.column, Some((_, Held::Due { .. })))
    }

    /// The drain lead in force (None: no plan followed).
    pub fn lead_ns(&self) -> Option<u64> {
        self.follower.lead_in_force()
    }

    /// The knobs drain_lead_us and drain_lead_pct changed (or were read
    /// at start): in force from the next park on.
    pub fn set_lead(&mut self, fixed_us: Option<u32>, pct: u32) {
        self.fixed_lead_us = fixed_us.map(u64::from);
        self.lead_pct = pct;
        let mut cfg = self.follower.config();
        cfg.fixed_lead_us = self.fixed_lead_us;
        cfg.lead_pct = pct;
        self.follower.set_config(cfg);
    }

    /// A request meant for the follower is taken (its answer); a Freeze or
    /// Switch from outside ends the plan and goes on to `handle` (None),
    /// after a held column is installed. `now`: CLOCK_MONOTONIC ns.
    pub fn take(
        &mut self,
        sw: &mut dyn Switcher,
        request: &Request,
        now: u64,
    ) -> Option<Result<()>> {
        match request {
            Request::Plan {
                plan,
                effective_ns,
                strict,
                drain_timeout_ms,
            } => {
                self.follower.set_config(FollowConfig {
                    strict: *strict,
                    drain_timeout_ms: *drain_timeout_ms,
                    min_lead_ns: MIN_LEAD.as_nanos() as u64,
                    fixed_lead_us: self.fixed_lead_us,
                    lead_pct: self.lead_pct,
                });
                if let Err(e) = self.follower.set_plan(plan.clone(), *effective_ns) {
                    return Some(Err(anyhow!("plan {} refused: {e}", plan.id)));
                }
                let new_plan = self.plan_id != Some(plan.id);
                self.plan_id = Some(plan.id);
                let bound = Held::Bound {
                    first: plan
                        .boundaries(effective_ns.saturating_sub(EFFECTIVE_SLACK_NS), 1)
                        .first()
                        .map(|b| (b.gen.0, b.slot)),
                    effective_ns: *effective_ns,
                };
                // A column whose switch is due keeps it; a newer one
                // behind it binds to this plan.
                let held = match &mut self.column {
                    Some((_, Held::Due { .. })) => self.after_due.as_mut(),
                    other => other.as_mut(),
                };
                if let Some((_, held)) = held {
                    match held {
                        Held::Staged { plan_id, .. } if new_plan || *plan_id != Some(plan.id) => {
                            *held = bound
                        }
                        // The same plan converted again, or one that
                        // replaces it before its first boundary.
                        Held::Bound { .. } => *held = bound,
                        _ => {}
                    }
                }
                Some(Ok(()))
            }
            Request::Column { slots } if self.follower.following() => {
                let staged = (
                    slots.clone(),
                    Held::Staged {
                        at_ns: now,
                        plan_id: self.plan_id,
                    },
                );
                // Never in place of a switch that is due: nothing is armed
                // in BPF for it, the loop carries it out at its instant.
                if matches!(self.column, Some((_, Held::Due { .. }))) {
                    self.after_due = Some(staged);
                } else {
                    self.column = Some(staged);
                }
                Some(Ok(()))
            }
            Request::Unplan => {
                self.install_held(sw, "the plan ended");
                self.follower.clear();
                self.plan_id = None;
                Some(Ok(()))
            }
            Request::Freeze { .. } | Request::Switch { .. } => {
                self.install_held(sw, "switch commands took over");
                self.follower.clear();
                self.plan_id = None;
                self.drain = None;
                None
            }
            _ => None,
        }
    }

    /// A held column installed at once, if there is one (the newest).
    fn install_held(&mut self, sw: &mut dyn Switcher, why: &str) {
        let newest = self.after_due.take().or(self.column.take());
        self.column = None;
        if let Some((slots, _)) = newest {
            log::info!("the schedule held for the next plan is installed now: {why}");
            if let Err(e) = sw.column(slots, false) {
                warn!("the schedule held for the next plan: {e:#}");
            }
        }
    }

    /// One turn of the loop at `now` (CLOCK_MONOTONIC ns).
    pub fn turn(&mut self, sw: &mut dyn Switcher, now: u64) {
        match self.column {
            Some((_, Held::Staged { at_ns, .. }))
                if now.saturating_sub(at_ns) > COLUMN_WAIT.as_nanos() as u64 =>
            {
                self.install_held(sw, "no plan came with it");
            }
            Some((_, Held::Due { at_ns, .. })) if now >= at_ns => self.switch_with_column(sw, now),
            _ => {}
        }
        while let Ok((gen, report)) = self.drained_rx.try_recv() {
            let timed_out = !report.drained;
            self.drain = Some(report);
            if let Some(a) = self.follower.drained(gen, timed_out, now) {
                self.act(sw, a, now);
            }
        }
        if let Some((gen, at)) = sw.timed_fired() {
            if let Some(done) = self.follower.fired(gen, at) {
                let drain = self.drain.take();
                if let Some(sink) = &self.sink {
                    sink(&done, drain.as_ref());
                }
            }
        }
        if let Some(gen) = sw.timed_replaced() {
            // It will never fire: on to the next boundary now, not
            // ARM_LOST after its instant (ten boundaries at 100 ms).
            if self.follower.abandon(gen) {
                warn!("timed switch {gen} was replaced by a switch at once before it fired: on to the next boundary");
                self.drain = None;
            }
        }
        if let Some(a) = self.follower.tick(now) {
            self.act(sw, a, now);
        }
    }

    /// The plan's first switch, due now, with its column.
    fn switch_with_column(&mut self, sw: &mut dyn Switcher, now: u64) {
        let Some((
            slots,
            Held::Due {
                slot, gen, slot_ms, ..
            },
        )) = self.column.take()
        else {
            return;
        };
        // A newer column waits for its own plan's boundary.
        self.column = self.after_due.take();
        match sw.column_at_switch(slots.clone(), slot, gen, slot_ms) {
            Ok(()) => {
                if let Some(done) = self.follower.fired(gen, now) {
                    let drain = self.drain.take();
                    if let Some(sink) = &self.sink {
                        sink(&done, drain.as_ref());
                    }
                }
            }
            Err(e) => {
                warn!("timed switch {gen} to slot {slot} with the new schedule refused: {e:#}");
                self.follower.abandon(gen);
                self.drain = None;
                // The column is gangd's all the same: in force now.
                if let Err(e) = sw.column(slots, false) {
                    warn!("the new schedule: {e:#}");
                }
            }
        }
    }

    fn act(&mut self, sw: &mut dyn Switcher, action: Action, now: u64) {
        match action {
            Action::Park {
                gen,
                to_slot,
                timeout_ms,
            } => {
                // The new table's slot numbers are not the old one's:
                // nothing runs on across a switch into it.
                let across = self.column.is_none().then_some(to_slot);
                match sw.freeze(gen, across, Duration::from_millis(u64::from(timeout_ms))) {
                    Ok(job) => {
                        let tx = self.drained_tx.clone();
                        let wake = self.wake.clone();
                        super::waiter::run(move || {
                            let report = job().unwrap_or_else(|e| {
                                warn!("timed switch {gen}: the park's wait failed: {e}");
                                FrozenReport {
                                    gen,
                                    ..Default::default()
                                }
                            });
                            let _ = tx.send((gen, report));
                            if let Some(w) = wake {
                                let _ = w.send(Inbox::DrainEnded);
                            }
                        });
                    }
                    Err(e) => {
                        // Nothing parked: switch at the boundary all the same.
                        warn!("timed switch {gen}: park refused: {e:#}");
                        if let Some(a) = self.follower.drained(gen, true, now) {
                            self.act(sw, a, now);
                        }
                    }
                }
            }
            Action::Arm {
                slot,
                gen,
                slot_ms,
                at_ns,
            } => {
                if let Some((_, held)) = &mut self.column {
                    if let Held::Bound {
                        first,
                        effective_ns,
                    } = *held
                    {
                        let its = match first {
                            Some((g, s)) => gen > g || (gen == g && slot == s),
                            None => at_ns.saturating_add(EFFECTIVE_SLACK_NS) >= effective_ns,
                        };
                        if its {
                            // The loop carries it out at the boundary.
                            *held = Held::Due {
                                slot,
                                gen,
                                slot_ms,
                                at_ns,
                            };
                            if at_ns <= now {
                                self.switch_with_column(sw, now);
                            }
                            return;
                        }
                    }
                }
                if let Err(e) = sw.switch(slot, gen, slot_ms, at_ns) {
                    warn!("timed switch {gen} to slot {slot} refused: {e:#}");
                    self.follower.abandon(gen);
                    self.drain = None;
                }
            }
            Action::Lost { gen } => {
                warn!("timed switch {gen} was armed but never fired (replaced by an immediate switch?): given up");
                self.drain = None;
            }
        }
    }

    /// How long the loop may sleep at most, as seen at `now`.
    pub fn wait(&self, now: u64) -> Option<Duration> {
        if self.follower.parking() {
            // The waiter wakes the loop; without it, a look every DRAIN_POLL.
            return self.wake.is_none().then_some(DRAIN_POLL);
        }
        if let Some((_, Held::Due { at_ns, .. })) = self.column {
            return Some(Duration::from_nanos(at_ns.saturating_sub(now)));
        }
        let at = self.follower.next_wake(now)?;
        Some(Duration::from_nanos(at.saturating_sub(now)))
    }
}
