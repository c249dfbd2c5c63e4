//! The node's drain lead and the lateness of its timed switches (issue 12,
//! part 3), pure logic: no clock read, no I/O.
//!
//! With timed switching and barrier = strict the node starts parking the
//! outgoing gangs at `boundary − lead`, so that their traffic has drained
//! by the boundary and the switch itself costs nothing. [`DrainLead`]
//! keeps the recent switches' park + drain times (a window of the last
//! [`WINDOW`]) and gives the lead: the p75 of that window (nearest rank),
//! clamped to [min, slot/4]. The knob drain_lead_us fixes the lead (still
//! at most slot/4). With no switch measured yet, the quantile counts as 0.
//!
//! Why no clock term (the first design added twice the clock error bound):
//! the park starts at `boundary − lead` on this node's clock and the switch
//! is due at `boundary` on the same clock, so whether the drain is done by
//! then depends on the park + drain time alone, measured on this clock
//! too. What the peers' clocks do shows in that time already: the drain
//! waits for the outgoing sockets' data to be ACKed, which the peers'
//! kernels do whether their ranks run or not, or, with a receive window
//! full, for a peer's rank to read, which it does only until its own park,
//! at its own `boundary − lead`: a peer early by its error ends that
//! reading early by the same amount whatever the lead is. Adding twice the
//! bound put the worst case on top of the realised one at every switch:
//! under TCG (a bound of 2.5–3 ms) it was most of the idle time.
//!
//! Why p75 and not the p99 the first design had: a lead too long costs
//! itself on every switch (the outgoing gang parked, the CPU idle until
//! the boundary), a lead too short costs only the lateness of the switches
//! it misses (this node starts the incoming gang late, its peers wait for
//! it). Minimising the expected idle time of one node gives the median;
//! p75 leans toward being on time because a late node also delays its
//! peers. The first run, under TCG with delayed ACKs in the drain, had
//! park + drain 13 ms p50, 46 ms p90, 1.6 s max: the p99 (= the maximum of
//! 64) sat at half a slot, and half of every slot was parked. The cap is a
//! quarter slot for the same reason: past it the parked tail costs more
//! than a late switch.
//!
//! [`classify`] tells, for the report to gangd after the fact, how a switch
//! went: drained by the boundary (on time, switched at the boundary),
//! drained after it (late, by how much), or the drain timeout hit (timed
//! out, switched anyway, by how much after the boundary).
//!
//! Known faults: a bimodal park + drain (most switches fast, a quarter
//! slow) gets a lead for the slow mode; the window does not
//! know the slot or the gangs a sample came from. Used by the timed
//! follower (timed.rs). Times are ns on the cluster clock.

use std::collections::VecDeque;

/// How many recent switches the lead is computed from.
pub const WINDOW: usize = 64;

/// What the lead is bounded by, and the knob that can fix it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadLimits {
    pub min_ns: u64,
    pub slot_ms: u32,
    /// The knob drain_lead_us: a fixed lead in µs.
    pub fixed_us: Option<u64>,
    /// The knob drain_lead_pct: the quantile of the window an adaptive
    /// lead is taken at, in percent (1 to 100; the knob allows 50 to 99).
    pub quantile_pct: u32,
}

/// The quantile an adaptive lead is taken at unless drain_lead_pct says
/// otherwise.
pub const DEFAULT_QUANTILE_PCT: u32 = 75;

/// The recent switches' park + drain times.
#[derive(Clone, Debug, Default)]
pub struct DrainLead {
    recent: VecDeque<u64>,
}

impl DrainLead {
    pub fn new() -> Self {
        Self::default()
    }

    /// One switch parked and drained in `park_drain_ns`.
    pub fn record(&mut self, park_drain_ns: u64) {
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(park_drain_ns);
    }

    /// The `pct` quantile of the window (clamped to 1..=100), nearest
    /// rank; 0 with no sample.
    pub fn quantile_ns(&self, pct: u32) -> u64 {
        let mut v: Vec<u64> = self.recent.iter().copied().collect();
        if v.is_empty() {
            return 0;
        }
        v.sort_unstable();
        let rank = (v.len() * pct.clamp(1, 100) as usize).div_ceil(100);
        v[rank - 1]
    }

    /// How long before the boundary the node starts parking.
    pub fn lead_ns(&self, limits: &LeadLimits) -> u64 {
        let max = u64::from(limits.slot_ms) * 1_000_000 / 4;
        let lead = match limits.fixed_us {
            Some(us) => us.saturating_mul(1_000),
            None => self.quantile_ns(limits.quantile_pct).max(limits.min_ns),
        };
        lead.min(max)
    }
}

/// How the drain of one switch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainEnd {
    /// Nothing in flight any more at this instant.
    Drained { at_ns: u64 },
    /// `drain_timeout_ms` hit at this instant: switched anyway.
    TimedOut { at_ns: u64 },
}

/// How a timed switch went, for the report to gangd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lateness {
    OnTime,
    /// Drained this long after the boundary.
    Late {
        by_ns: u64,
    },
    /// The drain timed out this long after the boundary (0: the timeout
    /// hit before it, i.e. drain_timeout shorter than the lead).
    TimedOut {
        by_ns: u64,
    },
}

/// One switch as reported: when the incoming gangs started, and whether
/// that was at the boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchTiming {
    pub switched_at_ns: u64,
    pub lateness: Lateness,
}

/// The switch due at `boundary_ns` whose drain ended so.
pub fn classify(boundary_ns: u64, end: DrainEnd) -> SwitchTiming {
    let (at_ns, lateness) = match end {
        DrainEnd::Drained { at_ns } if at_ns <= boundary_ns => (at_ns, Lateness::OnTime),
        DrainEnd::Drained { at_ns } => (
            at_ns,
            Lateness::Late {
                by_ns: at_ns - boundary_ns,
            },
        ),
        DrainEnd::TimedOut { at_ns } => (
            at_ns,
            Lateness::TimedOut {
                by_ns: at_ns.saturating_sub(boundary_ns),
            },
        ),
    };
    SwitchTiming {
        switched_at_ns: at_ns.max(boundary_ns),
        lateness,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    fn limits() -> LeadLimits {
        LeadLimits {
            min_ns: 500 * US,
            slot_ms: 100,
            fixed_us: None,
            quantile_pct: DEFAULT_QUANTILE_PCT,
        }
    }

    fn lead_of(samples: &[u64], limits: &LeadLimits) -> u64 {
        let mut l = DrainLead::new();
        samples.iter().for_each(|&s| l.record(s));
        l.lead_ns(limits)
    }

    #[test]
    fn with_no_switch_measured_the_lead_is_the_minimum() {
        assert_eq!(lead_of(&[], &limits()), 500 * US);
        assert_eq!(lead_of(&[100 * US], &limits()), 500 * US, "nor below it");
    }

    #[test]
    fn the_lead_is_the_p75_of_park_and_drain() {
        // 100 samples of 1..=100 ms, a slot of 1 s (the cap is 250 ms).
        let samples: Vec<u64> = (1..=100).map(|i| i * MS).collect();
        let mut l = limits();
        l.slot_ms = 1_000;
        assert_eq!(
            lead_of(&samples, &l),
            84 * MS,
            "p75 of the last 64 (37..=100 ms) is their 48th"
        );
        let mut d = DrainLead::new();
        (1..=10).for_each(|i| d.record(i * MS));
        assert_eq!(d.quantile_ns(75), 8 * MS, "p75 of 10 samples is the 8th");
        let mut d = DrainLead::new();
        (1..=64).for_each(|i| d.record(i * MS));
        d.record(0);
        assert_eq!(d.quantile_ns(75), 48 * MS, "the 48th of 0, 2..=64 ms");
    }

    #[test]
    fn drain_lead_pct_moves_the_lead_to_its_quantile() {
        // 64 samples of 1..=64 ms, a slot of 1 s (the cap is 250 ms).
        let samples: Vec<u64> = (1..=64).map(|i| i * MS).collect();
        let mut l = limits();
        l.slot_ms = 1_000;
        for (pct, want) in [(50, 32), (75, 48), (90, 58), (99, 64)] {
            l.quantile_pct = pct;
            assert_eq!(lead_of(&samples, &l), want * MS, "p{pct}");
        }
        // Still clamped: the minimum below, a quarter slot above.
        l.slot_ms = 100;
        assert_eq!(lead_of(&samples, &l), 25 * MS, "p99 capped at 25 ms");
        l.quantile_pct = 50;
        l.min_ns = 40 * MS;
        assert_eq!(
            lead_of(&samples, &l),
            25 * MS,
            "the cap wins over the minimum"
        );
        l.slot_ms = 1_000;
        assert_eq!(
            lead_of(&samples, &l),
            40 * MS,
            "the median under the minimum"
        );
        // Out of its range it is clamped, never a panic.
        let mut d = DrainLead::new();
        (1..=10).for_each(|i| d.record(i * MS));
        assert_eq!(d.quantile_ns(0), MS);
        assert_eq!(d.quantile_ns(500), 10 * MS);
    }

    #[test]
    fn one_slow_switch_in_four_does_not_set_the_lead() {
        // The first timed run's shape: most parks fast, a few very slow.
        let mut samples = vec![13 * MS; 50];
        samples.extend([40 * MS; 10]);
        samples.extend([1_600 * MS; 4]);
        assert_eq!(lead_of(&samples, &limits()), 13 * MS);
    }

    #[test]
    fn the_window_forgets_old_switches() {
        let mut d = DrainLead::new();
        d.record(40 * MS);
        (0..WINDOW).for_each(|_| d.record(MS));
        assert_eq!(d.quantile_ns(99), MS);
    }

    #[test]
    fn the_lead_never_exceeds_a_quarter_slot() {
        assert_eq!(lead_of(&[90 * MS], &limits()), 25 * MS);
        let mut l = limits();
        l.min_ns = 80 * MS;
        assert_eq!(
            lead_of(&[], &l),
            25 * MS,
            "a quarter slot wins over the minimum"
        );
    }

    #[test]
    fn a_knob_value_fixes_the_lead_below_a_quarter_slot() {
        let mut l = limits();
        l.fixed_us = Some(3_000);
        assert_eq!(lead_of(&[40 * MS], &l), 3 * MS);
        l.fixed_us = Some(0);
        assert_eq!(lead_of(&[40 * MS], &l), 0, "the knob may turn the lead off");
        l.fixed_us = Some(90_000);
        assert_eq!(lead_of(&[], &l), 25 * MS);
    }

    #[test]
    fn a_switch_drained_by_its_boundary_is_on_time_and_happens_at_the_boundary() {
        let t = classify(100 * MS, DrainEnd::Drained { at_ns: 97 * MS });
        assert_eq!(
            t,
            SwitchTiming {
                switched_at_ns: 100 * MS,
                lateness: Lateness::OnTime
            }
        );
        let t = classify(100 * MS, DrainEnd::Drained { at_ns: 100 * MS });
        assert_eq!(t.lateness, Lateness::OnTime);
    }

    #[test]
    fn a_switch_drained_after_its_boundary_is_late_by_the_difference() {
        let t = classify(100 * MS, DrainEnd::Drained { at_ns: 103 * MS });
        assert_eq!(t.switched_at_ns, 103 * MS);
        assert_eq!(t.lateness, Lateness::Late { by_ns: 3 * MS });
    }

    #[test]
    fn a_drain_timeout_is_its_own_kind_and_switches_anyway() {
        let t = classify(100 * MS, DrainEnd::TimedOut { at_ns: 120 * MS });
        assert_eq!(t.switched_at_ns, 120 * MS);
        assert_eq!(t.lateness, Lateness::TimedOut { by_ns: 20 * MS });
        let t = classify(100 * MS, DrainEnd::TimedOut { at_ns: 99 * MS });
        assert_eq!(t.switched_at_ns, 100 * MS, "never before the boundary");
        assert_eq!(t.lateness, Lateness::TimedOut { by_ns: 0 });
    }

    fn any_limits() -> impl Strategy<Value = LeadLimits> {
        (0u64..100 * MS, 1u32..=60_000, 50u32..=99).prop_map(|(min_ns, slot_ms, quantile_pct)| {
            LeadLimits {
                min_ns,
                slot_ms,
                fixed_us: None,
                quantile_pct,
            }
        })
    }

    proptest! {
        #[test]
        fn the_lead_stays_in_its_clamp(
            samples in prop::collection::vec(0u64..u64::MAX / 4, 0..100),
            l in any_limits(),
            fixed in prop::option::of(0u64..u64::MAX),
        ) {
            let half = u64::from(l.slot_ms) * MS / 4;
            let lead = lead_of(&samples, &l);
            prop_assert!(lead <= half);
            prop_assert!(lead >= l.min_ns.min(half));
            let fixed_lead = lead_of(&samples, &LeadLimits { fixed_us: fixed, ..l });
            prop_assert!(fixed_lead <= half);
        }

        #[test]
        fn the_lead_is_monotone_in_its_inputs(
            samples in prop::collection::vec(0u64..200 * MS, 1..100),
            which in any::<prop::sample::Index>(),
            more in 0u64..100 * MS,
            l in any_limits(),
            d_min in 0u64..10 * MS,
            d_slot in 0u32..1_000,
            d_pct in 0u32..50,
        ) {
            let base = lead_of(&samples, &l);
            let mut bigger = samples.clone();
            bigger[which.index(samples.len())] += more;
            prop_assert!(lead_of(&bigger, &l) >= base, "a slower switch");
            let more_min = LeadLimits { min_ns: l.min_ns + d_min, ..l };
            prop_assert!(lead_of(&samples, &more_min) >= base, "a higher minimum");
            let longer = LeadLimits { slot_ms: l.slot_ms + d_slot, ..l };
            prop_assert!(lead_of(&samples, &longer) >= base, "a longer slot");
            let higher = LeadLimits { quantile_pct: (l.quantile_pct + d_pct).min(99), ..l };
            prop_assert!(lead_of(&samples, &higher) >= base, "a higher quantile");
        }

        #[test]
        fn a_switch_never_happens_before_its_boundary_and_lateness_is_exact(
            boundary in 0u64..1 << 60, at in 0u64..1 << 60, timed_out in any::<bool>(),
        ) {
            let end = if timed_out {
                DrainEnd::TimedOut { at_ns: at }
            } else {
                DrainEnd::Drained { at_ns: at }
            };
            let t = classify(boundary, end);
            prop_assert_eq!(t.switched_at_ns, boundary.max(at));
            let by = t.switched_at_ns - boundary;
            match t.lateness {
                Lateness::OnTime => prop_assert!(!timed_out && by == 0),
                Lateness::Late { by_ns } => prop_assert!(!timed_out && by_ns == by && by > 0),
                Lateness::TimedOut { by_ns } => prop_assert!(timed_out && by_ns == by),
            }
        }
    }
}
