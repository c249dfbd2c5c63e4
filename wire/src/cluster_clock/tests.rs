//! The estimator's simple cases, as a specification. The simulated
//! clocks, random delays and drift are in wire/tests/cluster_clock.rs.

use super::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// An exchange sent at local `t1` with gangd's clock `offset` ns ahead
/// (same rate), `out` ns to gangd, 10 µs there, `back` ns to the node.
fn exchange(t1: u64, offset: u64, out: u64, back: u64) -> Sample {
    let t2 = t1 + out + offset;
    let t3 = t2 + 10 * US;
    Sample {
        t1,
        t2,
        t3,
        t4: t1 + out + 10 * US + back,
    }
}

/// A clock fed `n` symmetric 100 µs + 100 µs exchanges a second apart.
fn synced(offset: u64, n: u64) -> ClusterClock {
    let mut clock = ClusterClock::default();
    for i in 0..n {
        let s = exchange(1_000 * MS + i * 1_000 * MS, offset, 100 * US, 100 * US);
        assert_eq!(clock.add(s), Ok(Event::Accepted));
    }
    clock
}

#[test]
fn the_round_trip_is_the_local_time_minus_gangds_turnaround() {
    assert_eq!(exchange(0, 7, 300, 200).round_trip_ns(), 500);
}

#[test]
fn there_is_no_estimate_before_three_samples() {
    let clock = synced(5 * MS, 2);
    assert_eq!(clock.estimate(3_000 * MS), None);
    assert_eq!(clock.to_local(3_000 * MS), None);
    assert_eq!(clock.check(3_000 * MS, u64::MAX), Quality::Unsynchronised);
    assert!(synced(5 * MS, 3).estimate(3_000 * MS).is_some());
}

#[test]
fn symmetric_exchanges_give_the_offset_within_half_the_round_trip() {
    let clock = synced(5 * MS, 4);
    let last_t4 = 4_000 * MS + 210 * US;
    let e = clock.estimate(last_t4).unwrap();
    assert_eq!(e.remote_ns, last_t4 + 5 * MS);
    assert_eq!(e.offset_ns, 5 * MS as i64);
    assert!(e.rate_ppm.abs() < 1.0, "{e:?}");
    // Half the 200 µs network round trip, plus rounding and the rate's
    // uncertainty over the 105 µs since the exchange's midpoint.
    assert!(
        e.error_bound_ns >= 100 * US && e.error_bound_ns <= 100 * US + 200,
        "{e:?}"
    );
    assert_eq!(e.samples, 4);
}

#[test]
fn the_bound_grows_with_the_time_since_the_last_sample() {
    let clock = synced(0, 10);
    let last = 10_000 * MS + 105 * US;
    let at = |later: u64| clock.estimate(last + later).unwrap().error_bound_ns;
    assert!(at(0) < at(100 * MS) && at(100 * MS) < at(1_000 * MS));
    // Unmodelled drift at 50 ppm plus the rate's uncertainty, both ways:
    // about 100 µs per second of silence.
    let growth = at(1_000 * MS) - at(0);
    assert!((100 * US..130 * US).contains(&growth), "{growth}");
}

#[test]
fn the_rate_of_a_faster_gangd_clock_is_measured() {
    // gangd's clock runs 100 ppm fast: it gains 100 µs a second.
    let mut clock = ClusterClock::default();
    for i in 0..16 {
        let mut s = exchange(1_000 * MS + i * 1_000 * MS, 0, 100 * US, 100 * US);
        s.t2 += i * 100 * US;
        s.t3 += i * 100 * US;
        assert_eq!(clock.add(s), Ok(Event::Accepted));
    }
    let e = clock.estimate(16_000 * MS).unwrap();
    assert!((e.rate_ppm - 100.0).abs() < 5.0, "{e:?}");
}

#[test]
fn to_local_is_the_instant_the_estimate_names() {
    let clock = synced(5 * MS, 5);
    let local = 5_500 * MS;
    let e = clock.estimate(local).unwrap();
    let (back, bound) = clock.to_local(e.remote_ns).unwrap();
    assert!(back.abs_diff(local) <= 2, "{back} vs {local}");
    // The same bound, in local time: at most 550 ppm longer.
    let slack = e.error_bound_ns / 1_000 + 10;
    assert!(
        bound >= e.error_bound_ns && bound <= e.error_bound_ns + slack,
        "{bound} {e:?}"
    );
}

#[test]
fn impossible_samples_are_refused_and_change_nothing() {
    let mut clock = synced(5 * MS, 4);
    let before = clock.estimate(4_500 * MS);
    let t = 5_000 * MS;
    let bad = [
        (
            Sample {
                t1: t,
                t2: t,
                t3: t,
                t4: t - 1,
            },
            SampleError::LocalBackwards { t1: t, t4: t - 1 },
        ),
        (
            Sample {
                t1: t,
                t2: t + 1,
                t3: t,
                t4: t + MS,
            },
            SampleError::RemoteBackwards { t2: t + 1, t3: t },
        ),
        (
            Sample {
                t1: t,
                t2: t,
                t3: t + 2 * MS,
                t4: t + MS,
            },
            SampleError::TurnaroundLongerThanRoundTrip {
                turnaround_ns: 2 * MS,
                local_ns: MS,
            },
        ),
        (
            exchange(4_000 * MS, 5 * MS, 100 * US, 100 * US),
            SampleError::NotNewer {
                t1: 4_000 * MS,
                last_t1: 4_000 * MS,
            },
        ),
    ];
    for (sample, error) in bad {
        assert_eq!(clock.add(sample), Err(error));
        assert_eq!(clock.estimate(4_500 * MS), before);
    }
}

#[test]
fn a_turnaround_longer_than_the_round_trip_by_the_rate_difference_is_possible() {
    // 1 ms on the node, 1 ms + 400 ns on a gangd clock 400 ppm fast.
    let s = Sample {
        t1: 0,
        t2: 0,
        t3: MS + 400,
        t4: MS,
    };
    assert!(ClusterClock::default().add(s).is_ok());
}

#[test]
fn a_stepped_gangd_clock_is_reported_and_the_estimator_restarts() {
    let mut clock = synced(5 * MS, 5);
    // gangd's clock jumps 5 ms ahead.
    let event = clock.add(exchange(6_000 * MS, 10 * MS, 100 * US, 100 * US));
    let Ok(Event::Stepped {
        offset_change_ns,
        bound_ns,
    }) = event
    else {
        panic!("{event:?}");
    };
    assert!(
        offset_change_ns.abs_diff(5 * MS as i64) < 10 * US,
        "{offset_change_ns}"
    );
    assert!(bound_ns < 500 * US, "{bound_ns}");
    // From that sample alone: no estimate until two more.
    assert_eq!(clock.estimate(6_500 * MS), None);
    for i in 1..3 {
        let s = exchange(6_000 * MS + i * 1_000 * MS, 10 * MS, 100 * US, 100 * US);
        assert_eq!(clock.add(s), Ok(Event::Accepted));
    }
    assert_eq!(
        clock.estimate(8_000 * MS).unwrap().offset_ns,
        10 * MS as i64
    );
}

#[test]
fn a_step_hidden_in_a_slow_exchange_is_not_reported_by_it() {
    let mut clock = synced(5 * MS, 5);
    // gangd jumps 5 ms, but 25 ms each way: its time is only known within
    // ±25 ms, so this exchange cannot tell.
    let slow = exchange(6_000 * MS, 10 * MS, 25 * MS, 25 * MS);
    assert_eq!(clock.add(slow), Ok(Event::Accepted));
}

#[test]
fn only_the_best_sample_of_each_second_is_kept() {
    let mut clock = ClusterClock::default();
    // Three seconds, ten samples each; the third of each second is fastest.
    for sec in 0..3 {
        for k in 0..10 {
            let out = if k == 3 { 50 * US } else { 2 * MS };
            clock
                .add(exchange(sec * 1_000 * MS + k * 90 * MS, 0, out, out))
                .unwrap();
        }
    }
    // One per second, and the latest.
    assert_eq!(clock.estimate(3_000 * MS).unwrap().samples, 4);
    // Long after the last sample, the best one bounds the error best.
    let e = clock.estimate(2_810 * MS + 200 * MS).unwrap();
    assert!(e.error_bound_ns < 2 * MS, "{e:?}");
}

#[test]
fn samples_older_than_the_window_are_forgotten() {
    let mut clock = synced(0, 20);
    assert_eq!(clock.estimate(21_000 * MS).unwrap().samples, 16);
    clock
        .add(exchange(100_000 * MS, 0, 100 * US, 100 * US))
        .unwrap();
    assert_eq!(clock.estimate(100_000 * MS).unwrap().samples, 1);
}

#[test]
fn check_says_whether_the_bound_is_good_enough() {
    let clock = synced(0, 5);
    let now = 5_000 * MS + 105 * US;
    assert!(matches!(clock.check(now, MS), Quality::Good(_)));
    assert!(matches!(clock.check(now, 10 * US), Quality::TooCoarse(_)));
    // Ten seconds without a sample: a millisecond bound no longer holds.
    assert!(matches!(
        clock.check(now + 10_000 * MS, MS),
        Quality::TooCoarse(_)
    ));
}

#[test]
fn a_rate_change_beyond_the_wander_is_detected_as_drift() {
    let mut clock = synced(0, 10);
    // From 11 s on, gangd's clock runs 300 ppm fast (the model allows 50 ppm
    // of wander): it gains 300 µs a second, and within a few seconds no
    // single rate fits the samples any more.
    let mut gained = 0;
    let mut stepped = None;
    for sec in 11..20 {
        gained += 300 * US;
        let s = exchange(sec * 1_000 * MS, gained, 100 * US, 100 * US);
        if let Ok(Event::Stepped { .. }) = clock.add(s) {
            stepped = Some(sec);
            break;
        }
    }
    let sec = stepped.expect("the drift was never detected");
    assert!(sec <= 14, "detected only at {sec} s");
}

#[test]
fn an_injected_offset_moves_the_estimate_and_the_next_sample_reveals_it() {
    let mut clock = synced(5 * MS, 5);
    let before = clock.estimate(5_500 * MS).unwrap();
    clock.inject_offset(50 * MS as i64);
    let after = clock.estimate(5_500 * MS).unwrap();
    assert_eq!(
        after.offset_ns,
        before.offset_ns + 50 * MS as i64,
        "wrong by the offset"
    );
    assert_eq!(
        after.error_bound_ns, before.error_bound_ns,
        "and the bound does not say so"
    );
    // gangd's clock did not move: the next exchange disagrees by 50 ms.
    let event = clock.add(exchange(6_000 * MS, 5 * MS, 100 * US, 100 * US));
    let Ok(Event::Stepped {
        offset_change_ns, ..
    }) = event
    else {
        panic!("{event:?}");
    };
    assert!(
        offset_change_ns.abs_diff(-(50 * MS as i64)) < 10 * US,
        "{offset_change_ns}"
    );
    assert_eq!(
        clock.estimate(6_500 * MS),
        None,
        "unsynchronised until min_samples again"
    );
}

#[test]
fn an_offset_within_the_bound_is_absorbed_not_detected() {
    let mut clock = synced(5 * MS, 5);
    clock.inject_offset(20 * US as i64);
    let event = clock.add(exchange(6_000 * MS, 5 * MS, 100 * US, 100 * US));
    assert_eq!(
        event,
        Ok(Event::Accepted),
        "20 us is inside a 100 us half round trip"
    );
}
