//! The cluster clock estimator against simulated clocks: a node's clock
//! and gangd's, gangd's running up to ±200 ppm off and any offset away,
//! exchanges every 50–1000 ms over a network whose two directions have
//! independent random delays (0.05–5 ms, one in twenty a 50 ms outlier).
//! The properties: the true remote time is always within the stated bound
//! (at and between samples, and seconds after the last); the bound is
//! about half the round trip when delays are low and symmetric; a step of
//! gangd's clock is detected within a few samples and the estimate is
//! honest again after it; impossible samples change nothing.

use gang_wire::cluster_clock::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// gangd's clock as a function of the node's: remote0 at local0, running
/// drift_ppb faster, and `step_ns` ahead (or behind) from local `step_at` on.
#[derive(Clone, Copy, Debug)]
struct Clocks {
    local0: u64,
    remote0: u64,
    drift_ppb: i64,
    step_at: u64,
    step_ns: i64,
}

impl Clocks {
    fn remote(&self, local: u64) -> u64 {
        let dx = (local - self.local0) as i128;
        let mut r =
            self.remote0 as i128 + dx + (dx * self.drift_ppb as i128).div_euclid(1_000_000_000);
        if local >= self.step_at {
            r += self.step_ns as i128;
        }
        r as u64
    }

    /// An exchange sent at local t1: `out` to gangd, `turn` there (local
    /// ns), `back` to the node.
    fn exchange(&self, t1: u64, leg: &Leg) -> Sample {
        let t2 = self.remote(t1 + leg.out);
        let t3 = self.remote(t1 + leg.out + leg.turn);
        Sample {
            t1,
            t2,
            t3,
            t4: t1 + leg.out + leg.turn + leg.back,
        }
    }
}

/// One exchange's timing: the gap since the previous one's reply, the
/// delays, and where between this reply and the next request to look.
#[derive(Clone, Copy, Debug)]
struct Leg {
    gap: u64,
    out: u64,
    turn: u64,
    back: u64,
    /// Fraction (in 1/1000) of the next gap at which the estimate is checked.
    look: u64,
}

fn clocks() -> impl Strategy<Value = Clocks> {
    (0..1u64 << 50, 10 * MS..1u64 << 60, -200_000..=200_000i64).prop_map(
        |(local0, remote0, drift_ppb)| Clocks {
            local0,
            remote0,
            drift_ppb,
            step_at: u64::MAX,
            step_ns: 0,
        },
    )
}

fn delay(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![19 => 50 * US..=max, 1 => Just(50 * MS)]
}

fn leg(max_delay: u64) -> impl Strategy<Value = Leg> {
    (
        50 * MS..=1_000 * MS,
        delay(max_delay),
        0..200 * US,
        delay(max_delay),
        0..1_000u64,
    )
        .prop_map(|(gap, out, turn, back, look)| Leg {
            gap,
            out,
            turn,
            back,
            look,
        })
}

/// Low, symmetric delays: the same 50–100 µs each way.
fn quiet_leg() -> impl Strategy<Value = Leg> {
    (50 * MS..=1_000 * MS, 50 * US..=100 * US, 0..50 * US).prop_map(|(gap, d, turn)| Leg {
        gap,
        out: d,
        turn,
        back: d,
        look: 500,
    })
}

/// The send times of `legs`, starting at the clocks' origin.
fn sends(clocks: &Clocks, legs: &[Leg]) -> Vec<u64> {
    let mut t = clocks.local0;
    legs.iter()
        .map(|l| {
            t += l.gap;
            let t1 = t;
            t += l.out + l.turn + l.back;
            t1
        })
        .collect()
}

/// Asserts that the estimate at `local`, if any, holds the true time, and
/// that to_local of the true time holds `local`.
fn assert_honest(clock: &ClusterClock, clocks: &Clocks, local: u64) -> Result<(), TestCaseError> {
    let truth = clocks.remote(local);
    if let Some(e) = clock.estimate(local) {
        prop_assert!(
            e.remote_ns.abs_diff(truth) <= e.error_bound_ns,
            "at {local}: {e:?}, truth {truth}"
        );
        let (back, bound) = clock.to_local(truth).unwrap();
        // +1: an integer clock 200 ppm slow reads `truth` for up to 2 ns.
        prop_assert!(
            back.abs_diff(local) <= bound + 1,
            "to_local({truth}) = {back} ± {bound}, truth {local}"
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn the_true_remote_time_is_always_within_the_bound(
        clocks in clocks(),
        legs in prop::collection::vec(leg(5 * MS), 1..40),
        after in prop::collection::vec(0..5_000 * MS, 1..5),
    ) {
        let mut clock = ClusterClock::default();
        let t1s = sends(&clocks, &legs);
        for (i, (leg, &t1)) in legs.iter().zip(&t1s).enumerate() {
            let s = clocks.exchange(t1, leg);
            prop_assert_eq!(clock.add(s), Ok(Event::Accepted), "sample {}", i);
            assert_honest(&clock, &clocks, s.t4)?;
            if let Some(next) = legs.get(i + 1) {
                assert_honest(&clock, &clocks, s.t4 + next.gap * leg.look / 1_000)?;
            }
        }
        let last = *t1s.last().unwrap() + 60 * MS;
        for later in after {
            assert_honest(&clock, &clocks, last + later)?;
        }
        prop_assert_eq!(clock.estimate(last).is_some(), legs.len() >= 3);
    }

    #[test]
    fn with_low_symmetric_delays_the_bound_is_about_half_the_round_trip(
        clocks in clocks(),
        legs in prop::collection::vec(quiet_leg(), 20..40),
    ) {
        let mut clock = ClusterClock::default();
        let t1s = sends(&clocks, &legs);
        for (i, (leg, &t1)) in legs.iter().zip(&t1s).enumerate() {
            let s = clocks.exchange(t1, leg);
            prop_assert_eq!(clock.add(s), Ok(Event::Accepted));
            if i < 2 {
                continue;
            }
            let half_rtt = (leg.out + leg.back) / 2;
            let e = clock.estimate(s.t4).unwrap();
            prop_assert!(e.error_bound_ns <= half_rtt + 2 * US, "sample {}: {:?}, rtt/2 {}", i, e, half_rtt);
            prop_assert!((e.rate_ppm - clocks.drift_ppb as f64 / 1e3).abs() <= 550.0);
            // After 10 s of samples, a second of silence costs at most the
            // wander both ways (100 µs) and the rate's uncertainty (≤ 30 µs).
            if t1 - t1s[0] >= 10_000 * MS {
                let e = clock.estimate(s.t4 + 1_000 * MS).unwrap();
                prop_assert!(e.error_bound_ns <= half_rtt + 130 * US, "sample {}: {:?}", i, e);
                prop_assert!((e.rate_ppm - clocks.drift_ppb as f64 / 1e3).abs() <= 30.0, "{:?}", e);
            }
        }
    }

    #[test]
    fn a_step_of_gangds_clock_is_detected_within_a_few_samples_and_the_estimate_recovers(
        clocks in clocks(),
        legs in prop::collection::vec(leg(2 * MS), 24..40),
        step_after in 8..16usize,
        back in any::<bool>(),
    ) {
        let t1s = sends(&clocks, &legs);
        // 5 ms ahead (or behind), between a reply and the next request.
        let step_at = t1s[step_after] - legs[step_after].gap / 2;
        let step_ns = if back { -5 * MS as i64 } else { 5 * MS as i64 };
        let clocks = Clocks { step_at, step_ns, ..clocks };
        let mut clock = ClusterClock::default();
        let mut detected = None;
        for (i, (leg, &t1)) in legs.iter().zip(&t1s).enumerate() {
            let event = clock.add(clocks.exchange(t1, leg));
            match event {
                Ok(Event::Accepted) => {}
                Ok(Event::Stepped { offset_change_ns, bound_ns }) if detected.is_none() && i >= step_after => {
                    detected = Some(i);
                    // The jump seen is the step, up to the two bounds.
                    prop_assert!(offset_change_ns.abs_diff(step_ns) <= bound_ns, "{} ± {}", offset_change_ns, bound_ns);
                }
                other => prop_assert!(false, "sample {}: {:?}", i, other),
            }
            if detected.is_some() {
                assert_honest(&clock, &clocks, t1 + leg.out + leg.turn + leg.back)?;
            }
        }
        let detected = detected.expect("the step was never detected");
        prop_assert!(detected < step_after + 6, "detected at {} after a step before {}", detected, step_after);
        let t = t1s.last().unwrap() + 60 * MS;
        prop_assert!(clock.estimate(t).is_some());
    }

    #[test]
    fn impossible_samples_change_nothing(
        clocks in clocks(),
        legs in prop::collection::vec(leg(5 * MS), 3..10),
        garbage in (0..4u8, 1..u64::MAX / 4, 1..u64::MAX / 4),
    ) {
        let mut clock = ClusterClock::default();
        let t1s = sends(&clocks, &legs);
        for (leg, &t1) in legs.iter().zip(&t1s) {
            clock.add(clocks.exchange(t1, leg)).unwrap();
        }
        let last = clocks.exchange(*t1s.last().unwrap(), legs.last().unwrap());
        let (kind, a, b) = garbage;
        let t1 = last.t1 + a % (10_000 * MS);
        let bad = match kind {
            0 => Sample { t1, t2: a, t3: a + b, t4: t1 - 1 - b % t1.min(MS) },
            1 => Sample { t1, t2: a + b, t3: a, t4: t1 + b },
            // gangd held it 1 % longer than the node waited (beyond 550 ppm).
            2 => Sample { t1, t2: a, t3: a + (b % MS + 1000) * 101 / 100, t4: t1 + b % MS + 1000 },
            _ => Sample { t1: last.t1 - b % (last.t1 - clocks.local0), ..last },
        };
        let looks = [last.t4, last.t4 + a % (5_000 * MS)];
        let before: Vec<_> = looks.iter().map(|&t| clock.estimate(t)).collect();
        prop_assert!(clock.add(bad).is_err(), "{:?} taken", bad);
        let after: Vec<_> = looks.iter().map(|&t| clock.estimate(t)).collect();
        prop_assert_eq!(before, after);
        // And the next honest sample is taken as if nothing happened.
        let next = clocks.exchange(last.t4 + 10_000 * MS + MS, &legs[0]);
        prop_assert_eq!(clock.add(next), Ok(Event::Accepted));
    }
}
