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
//! drain waited for on a thread of its own, as for a commanded Freeze) or
//! an arming. `wait` bounds the loop's sleep: the follower's next instant,
//! or 1 ms while a drain is being waited for (its thread answers through a
//! channel the loop polls). A Freeze or a Switch from outside (gangd went
//! back to commands) ends the plan.
//!
//! Known faults: the drain's answer is polled (1 ms), not woken on; a
//! switch the switcher refused is abandoned (logged, no report), and the
//! follower goes on with the next boundary.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use log::warn;

use super::timed::{Action, Done, FollowConfig, Follower};
use super::Switcher;
use crate::control::{FrozenReport, Request};

/// Told every timed switch, with its park report (barrier = strict).
pub type SwitchedSink = Arc<dyn Fn(&Done, Option<&FrozenReport>) + Send + Sync>;

/// The lead's floor: parking takes at least this long on any node.
const MIN_LEAD: Duration = Duration::from_millis(2);
/// How often the loop looks for a drain's answer.
const DRAIN_POLL: Duration = Duration::from_millis(1);

pub struct Follow {
    follower: Follower,
    drained_tx: Sender<(u64, FrozenReport)>,
    drained_rx: Receiver<(u64, FrozenReport)>,
    /// The park report of the switch armed now.
    drain: Option<FrozenReport>,
    sink: Option<SwitchedSink>,
}

impl Follow {
    pub fn new(sink: Option<SwitchedSink>) -> Self {
        let (drained_tx, drained_rx) = channel();
        Self {
            follower: Follower::new(FollowConfig {
                strict: true,
                drain_timeout_ms: 200,
                min_lead_ns: MIN_LEAD.as_nanos() as u64,
                fixed_lead_us: None,
                clock_error_ns: 0,
            }),
            drained_tx,
            drained_rx,
            drain: None,
            sink,
        }
    }

    /// A request meant for the follower is taken (its answer); a Freeze or
    /// Switch from outside ends the plan and goes on to `handle` (None).
    pub fn take(&mut self, request: &Request) -> Option<Result<()>> {
        match request {
            Request::Plan {
                plan,
                effective_ns,
                strict,
                drain_timeout_ms,
                clock_error_ns,
            } => {
                self.follower.set_config(FollowConfig {
                    strict: *strict,
                    drain_timeout_ms: *drain_timeout_ms,
                    min_lead_ns: MIN_LEAD.as_nanos() as u64,
                    fixed_lead_us: None,
                    clock_error_ns: *clock_error_ns,
                });
                Some(
                    self.follower
                        .set_plan(plan.clone(), *effective_ns)
                        .map_err(|e| anyhow!("plan {} refused: {e}", plan.id)),
                )
            }
            Request::Unplan => {
                self.follower.clear();
                Some(Ok(()))
            }
            Request::Freeze { .. } | Request::Switch { .. } => {
                self.follower.clear();
                self.drain = None;
                None
            }
            _ => None,
        }
    }

    /// One turn of the loop at `now` (CLOCK_MONOTONIC ns).
    pub fn turn(&mut self, sw: &mut dyn Switcher, now: u64) {
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
        if let Some(a) = self.follower.tick(now) {
            self.act(sw, a, now);
        }
    }

    fn act(&mut self, sw: &mut dyn Switcher, action: Action, now: u64) {
        match action {
            Action::Park {
                gen,
                to_slot,
                timeout_ms,
            } => {
                match sw.freeze(
                    gen,
                    Some(to_slot),
                    Duration::from_millis(u64::from(timeout_ms)),
                ) {
                    Ok(job) => {
                        let tx = self.drained_tx.clone();
                        std::thread::spawn(move || {
                            let report = job().unwrap_or_else(|e| {
                                warn!("timed switch {gen}: the park's wait failed: {e}");
                                FrozenReport {
                                    gen,
                                    ..Default::default()
                                }
                            });
                            let _ = tx.send((gen, report));
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
            return Some(DRAIN_POLL);
        }
        let at = self.follower.next_wake(now)?;
        Some(Duration::from_nanos(at.saturating_sub(now)))
    }
}
