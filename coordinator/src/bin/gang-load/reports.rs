//! A fake agent's `Switched` reports: what a real node tells gangd after
//! every timed switch (the switch log's record), so that gangd's steady
//! state at N nodes includes them (41 K reports a second at 4096 nodes and
//! 100 ms slots).
//!
//! How it works: the agent keeps the last plan gangd offered it (on
//! loopback gangd's clock is the harness's CLOCK_MONOTONIC, so the plan's
//! boundaries are local times). At each tick, once the slot in force has
//! a generation it has not reported, from the plan's effective time on, it
//! reports that switch as on time at its boundary. `Each` sends every
//! report in its own write (the node agent before it batched them);
//! `Batched` keeps them and sends `gang_wire`-encoded frames together, ten
//! at a time or what came within a second, as the node agent does
//! (src/agent/plans.rs, `Reports`); `None` sends none.
//!
//! Known faults: a generation that starts and ends between two ticks (a
//! worker busy for a slot) is not reported, and gangd lists the node as
//! missing from that record; no drain or lateness is reported.

use std::time::{Duration, Instant};

use gang_wire::plan::Plan;
use gang_wire::proto::{FromAgent, SwitchOutcome, SwitchReport};

/// How the fake agents report their switches (`--reports`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportMode {
    None,
    Each,
    Batched,
}

/// Reports sent together at most (the node agent's REPORT_BATCH).
const BATCH: usize = 10;
/// The longest a report waits (the node agent's REPORT_FLUSH).
const FLUSH: Duration = Duration::from_secs(1);

pub struct Reporter {
    mode: ReportMode,
    plan: Option<(Plan, u64)>,
    reported: u64,
    pending: Vec<SwitchReport>,
    since: Instant,
}

impl Reporter {
    pub fn new(mode: ReportMode, now: Instant) -> Reporter {
        Reporter {
            mode,
            plan: None,
            reported: 0,
            pending: Vec::new(),
            since: now,
        }
    }

    /// gangd offered `plan`, followed from `effective_ns`.
    pub fn plan(&mut self, plan: Plan, effective_ns: u64) {
        if self.mode != ReportMode::None {
            self.plan = Some((plan, effective_ns));
        }
    }

    /// What to write at `now_ns` (`now`, the same instant), each message
    /// in a write of its own.
    pub fn tick(&mut self, now_ns: u64, now: Instant) -> Vec<FromAgent> {
        let Some((plan, effective_ns)) = &self.plan else {
            return vec![];
        };
        if let Some(f) = plan.in_force(now_ns) {
            if f.gen.0 > self.reported && f.start_ns >= *effective_ns {
                self.reported = f.gen.0;
                self.pending.push(SwitchReport {
                    gen: f.gen,
                    slot: f.slot,
                    at_ns: f.start_ns,
                    late_us: 0,
                    outcome: SwitchOutcome::OnTime,
                    drain: None,
                    parked_us: 0,
                    park_late_us: 0,
                    lead_us: 0,
                });
            }
        }
        let due = match self.mode {
            ReportMode::None => false,
            ReportMode::Each => true,
            ReportMode::Batched => {
                self.pending.len() >= BATCH || now.saturating_duration_since(self.since) >= FLUSH
            }
        };
        if !due || self.pending.is_empty() {
            return vec![];
        }
        self.since = now;
        let pending = std::mem::take(&mut self.pending);
        match self.mode {
            ReportMode::Each => pending
                .into_iter()
                .map(|r| FromAgent::Switched { reports: vec![r] })
                .collect(),
            _ => vec![FromAgent::Switched { reports: pending }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::plan::PlannedSlot;
    use gang_wire::proto::Gen;

    const MS: u64 = 1_000_000;

    /// Slots 0 and 1 of 100 ms from 1 s, generation 1 first.
    fn plan() -> Plan {
        Plan {
            id: 0,
            epoch_ns: 1_000 * MS,
            slot_ms: 100,
            slots: vec![PlannedSlot { slot: 0 }, PlannedSlot { slot: 1 }],
            first_gen: Gen(1),
        }
    }

    /// Ticks every 10 ms from 1 s for `ms`; the writes and their sizes.
    fn run(mode: ReportMode, ms: u64) -> Vec<usize> {
        let start = Instant::now();
        let mut r = Reporter::new(mode, start);
        r.plan(plan(), 1_000 * MS);
        let mut writes = vec![];
        for t in (0..ms).step_by(10) {
            for w in r.tick(1_000 * MS + t * MS, start + Duration::from_millis(t)) {
                let FromAgent::Switched { reports } = w else {
                    panic!("only reports: {w:?}")
                };
                writes.push(reports.len());
            }
        }
        writes
    }

    #[test]
    fn every_generation_is_reported_once_batched_ten_or_a_second_at_a_time() {
        // 2 s of 100 ms slots: 20 generations.
        let each = run(ReportMode::Each, 2_000);
        assert_eq!(each.iter().sum::<usize>(), 20);
        assert!(each.iter().all(|&n| n == 1));
        let batched = run(ReportMode::Batched, 2_000);
        assert_eq!(batched.iter().sum::<usize>(), 20, "{batched:?}");
        assert!(batched.len() <= 3, "{batched:?}");
        assert!(run(ReportMode::None, 2_000).is_empty());
    }
}
