//! Value axes: tick steps, ticks and their labels.
//!
//! A step is 1, 2 or 5 × 10^k, the smallest of those giving at most
//! `target` intervals over the range ([`nice_step`]). The evaluation widens
//! its value range to whole steps ([`nice_range`]); the trace timeline keeps
//! its window and ticks the multiples inside it ([`ticks`]). A label has the
//! decimals its step needs and no trailing zeros ([`tick_label`]).
//!
//! Known faults: a step below 10^-9 is labelled with 9 decimals (rounded);
//! log axes are the evaluation's own (figures/axes.rs): their ticks are not
//! evenly stepped.

use crate::doc::trimmed;

/// A 1-2-5 step giving about `target` ticks over `range` (the smallest
/// 1, 2 or 5 × 10^k at least `range / target`); 1 for an empty or
/// non-finite range.
pub fn nice_step(range: f64, target: f64) -> f64 {
    let raw = range / target;
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let m = raw / mag;
    let f = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

/// `[lo, hi]` widened to whole [`nice_step`]s of about `target` intervals:
/// (lo', hi', step) with lo' ≤ lo, hi' ≥ hi, both multiples of step. An
/// empty range is taken as `[lo, lo + 1]`.
pub fn nice_range(lo: f64, hi: f64, target: f64) -> (f64, f64, f64) {
    let hi = if hi <= lo { lo + 1.0 } else { hi };
    let step = nice_step(hi - lo, target);
    ((lo / step).floor() * step, (hi / step).ceil() * step, step)
}

/// The multiples of `step` in `[lo, hi]` (ends included within a
/// billionth of a step), ascending.
pub fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    if step.is_nan() || step <= 0.0 || !lo.is_finite() || !hi.is_finite() || hi < lo {
        return Vec::new();
    }
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Tick label of `v` on an axis of `step`: just enough decimals for the
/// step, no trailing zeros.
pub fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    trimmed(v, decimals.min(9))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ticks_are_1_2_5() {
        assert_eq!(nice_step(10_000.0, 10.0), 1000.0);
        assert_eq!(nice_step(35.0, 10.0), 5.0);
        assert!((nice_step(0.15, 10.0) - 0.02).abs() < 1e-12);
        assert_eq!(nice_step(0.0, 10.0), 1.0);
        assert_eq!(tick_label(0.04, 0.02), "0.04");
        assert_eq!(tick_label(2000.0, 1000.0), "2000");
    }

    #[test]
    fn labels_have_the_decimals_of_their_step() {
        assert_eq!(tick_label(1.0, 0.5), "1");
        assert_eq!(tick_label(1.5, 0.5), "1.5");
        assert_eq!(tick_label(0.1 + 0.2, 0.1), "0.3");
        assert_eq!(tick_label(-0.0, 0.5), "0");
        assert_eq!(tick_label(200.0, 200.0), "200");
    }

    #[test]
    fn a_range_widens_to_whole_steps() {
        assert_eq!(nice_range(0.0, 2.3, 5.0), (0.0, 2.5, 0.5));
        assert_eq!(nice_range(-1.0, 7.0, 5.0), (-2.0, 8.0, 2.0));
        assert_eq!(nice_range(3.0, 3.0, 5.0), (3.0, 4.0, 0.2));
        assert_eq!(ticks(0.0, 1.0, 0.25), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(ticks(0.0, 0.0, 1.0), vec![0.0]);
        assert!(ticks(0.0, 1.0, 0.0).is_empty());
    }

    proptest! {
        #[test]
        fn steps_are_1_2_5_and_ticks_cover_the_range_in_bounded_count(
            lo in -1e6f64..1e6,
            len in 1e-6f64..1e7,
            target in 2u32..12,
        ) {
            let target = target as f64;
            let hi = lo + len;
            let (a, b, step) = nice_range(lo, hi, target);
            // 1, 2 or 5 times a power of ten.
            let mant = step / 10f64.powf(step.log10().floor());
            prop_assert!(
                [1.0, 2.0, 5.0, 10.0].iter().any(|m| (mant - m).abs() < 1e-9),
                "step {} mantissa {}", step, mant
            );
            // The smallest such step: at most `target` intervals, not 2.5 times fewer.
            prop_assert!(step * target >= (hi - lo) * (1.0 - 1e-12));
            prop_assert!(step * target <= (hi - lo) * 2.5 * (1.0 + 1e-9));
            let t = ticks(a, b, step);
            prop_assert!(a <= lo && b >= hi);
            prop_assert!(t[0] <= lo + step * 1e-9 && *t.last().unwrap() >= hi - step * 1e-9);
            prop_assert!(t.len() >= 2 && t.len() as f64 <= target + 3.0, "{} ticks", t.len());
            prop_assert!(t.windows(2).all(|w| w[1] > w[0]));
        }
    }
}
