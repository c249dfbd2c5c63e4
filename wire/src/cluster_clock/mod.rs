//! The cluster clock: a node's estimate of gangd's CLOCK_MONOTONIC from its
//! own, with an error bound it can state honestly. A pure state machine:
//! the agent feeds timestamped exchanges (`Sample`, sample.rs) and asks
//! for the remote time at a local instant (`estimate`) or the local instant
//! of a remote time (`to_local`, to arm a timer at a cluster instant). It
//! reads no clock and does no I/O; all times are u64 ns passed in.
//!
//! How it works. Every sample proves an interval: at local time x gangd's
//! clock read y ± h, h being half the round trip (sample.rs). The model is
//! remote(x) = x + offset + c·(x − ref) + g(x): c is the rate error, within
//! ±`max_rate_ppm` a priori, and g the unmodelled drift, whose rate is at
//! most `unmodelled_drift_ppm` (oscillator wander, the kernel's NTP
//! frequency corrections of CLOCK_MONOTONIC). Under that model:
//! - Rate: each pair of samples i, j bounds c to
//!   ((yj − yi) − (xj − xi) ± (hi + hj)) / (xj − xi) ± unmodelled. The
//!   estimator intersects these intervals over all pairs of the samples it
//!   keeps (Marzullo-style); the rate is the middle of the intersection
//!   and its uncertainty half its width. Without the wander term this is
//!   exactly the set of rates the samples allow (for a fixed rate, a line
//!   through all the intervals exists iff one exists through every pair:
//!   Helly in one dimension); the wander widens each pair's interval.
//! - Remote time at x: from each kept sample a ("anchor"),
//!   y_a + (x − x_a)(1 + rate) ± (h_a + (uncertainty + unmodelled)·|x − x_a|),
//!   and the anchor with the smallest bound is used: half the best
//!   sample's round trip plus the drift since it.
//!
//! Why not a least-squares fit: its rate error is statistical (it assumes
//! the delays' distribution), while the intervals are facts, so the bound
//! holds for any delays, however asymmetric, and a slow outlier merely
//! constrains little (its interval is wide).
//!
//! Which samples. The best (smallest h, i.e. lowest round trip) of each of
//! the last `buckets` intervals of `bucket_ns` of local time (NTP's clock
//! filter, too, trusts the minimum-delay samples), plus always
//! the latest sample (the best anchor just after it arrives). The window
//! (16 s by default) makes the rate precise (two samples of 0.2 ms round
//! trip 15 s apart bound it to ±13 ppm, plus the wander) and forgets old
//! rates.
//!
//! Steps and drift. An honest sample's interval always contains the true
//! time, so a sample that leaves no rate consistent with the kept ones
//! (its interval misses the estimate's by more than both bounds) proves
//! that the model broke: gangd's or the node's clock was stepped, or
//! drifted faster than `unmodelled_drift_ppm`. `add` then answers
//! `Event::Stepped` and the estimator restarts from that sample alone; no
//! estimate exists until `min_samples` samples again. `check` tells the
//! caller whether the bound at an instant is within its `max_error_ns`
//! (the integrator switches a node by command when it is not).
//!
//! Known faults: between a step and the first sample that reveals it the
//! estimate is wrong and its bound does not say so (a step smaller than
//! the samples' bounds is never detected; it is absorbed instead). The
//! bound grows by 2 × `unmodelled_drift_ppm` (100 µs per second by
//! default) after the last sample: the samples must come often enough for
//! the caller's `max_error_ns` (schedule.rs: `ProbeSchedule` backs off
//! only as far as the bound it predicts stays within a target). Slewing of the node's CLOCK_MONOTONIC by
//! an NTP daemon faster than 50 ppm (chrony's large corrections) is seen
//! as drift and restarts the estimator, repeatedly while it lasts. An
//! exchange that straddles a step proves nothing true; if it is the one
//! the estimator restarts from, the next good sample is a second step.

mod sample;
mod schedule;

use std::collections::VecDeque;

use sample::{Point, SLACK_NS};
pub use sample::{Sample, SampleError};
pub use schedule::{
    report_with_probe, ProbeSchedule, ScheduleConfig, REPORT_EVERY_NS, YOUNG_SAMPLES,
};

/// The two machines' CLOCK_MONOTONIC rates differ by at most this (ppm):
/// crystals are specified to ±100 ppm; 500 ppm is also the kernel's
/// limit on an NTP frequency correction.
pub const MAX_RATE_PPM: f64 = 500.0;

/// How fast the rate itself may wander from the fitted one (ppm): covers
/// temperature wander of an oscillator (about 1 ppm/°C) and the kernel
/// PLL's frequency corrections under ntpd or chrony in normal operation.
pub const UNMODELLED_DRIFT_PPM: f64 = 50.0;

/// What the estimator assumes and keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// A priori bound on the rate difference of the two clocks, ppm.
    pub max_rate_ppm: f64,
    /// Rate wander beyond the fitted rate, ppm, added to every bound.
    pub unmodelled_drift_ppm: f64,
    /// The best sample of each interval of this much local time is kept
    /// (> 0).
    pub bucket_ns: u64,
    /// How many such intervals (the window is buckets × bucket_ns).
    pub buckets: usize,
    /// Samples taken in (since the start or the last step) before there
    /// is an estimate. Three: one sample already gives an honest bound
    /// (with the a priori rate), but two more give an inconsistency the
    /// chance to show (a first sample that straddled a step, contradicted
    /// by the next ones) before anyone arms a timer on it.
    pub min_samples: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_rate_ppm: MAX_RATE_PPM,
            unmodelled_drift_ppm: UNMODELLED_DRIFT_PPM,
            bucket_ns: 1_000_000_000,
            buckets: 16,
            min_samples: 3,
        }
    }
}

/// gangd's clock at a local instant, and how wrong it may be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// gangd's CLOCK_MONOTONIC at the local instant asked for.
    pub remote_ns: u64,
    /// The true remote time is within remote_ns ± error_bound_ns.
    pub error_bound_ns: u64,
    /// remote_ns − local (saturated to i64).
    pub offset_ns: i64,
    /// How much faster gangd's clock runs than the node's, ppm.
    pub rate_ppm: f64,
    /// Samples the estimate rests on (kept ones, the latest included).
    pub samples: usize,
}

/// What `add` did with a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Consistent with the samples before it; taken in.
    Accepted,
    /// Inconsistent: a clock was stepped or drifted past the model. The
    /// estimator restarted from this sample. `offset_change_ns` is how far
    /// the sample's remote time is from the previous estimate's, and
    /// `bound_ns` how far it could have been (both bounds).
    Stepped {
        offset_change_ns: i64,
        bound_ns: u64,
    },
}

/// Whether the clock is good enough for timed switching (`check`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quality {
    /// Not enough samples since the start or the last step.
    Unsynchronised,
    /// An estimate, but its bound exceeds the maximum asked for.
    TooCoarse(Estimate),
    Good(Estimate),
}

/// The estimator. See the top of this file.
#[derive(Clone, Debug)]
pub struct ClusterClock {
    config: Config,
    /// The best point of each bucket, oldest first.
    kept: VecDeque<Point>,
    /// The latest point, kept or not.
    latest: Option<Point>,
    /// Samples taken in since the start or the last step.
    accepted: usize,
    /// t1 of the last sample taken in (also across steps).
    last_t1: Option<u64>,
    /// The rates (c, a fraction) the kept points allow.
    rate: (f64, f64),
}

impl ClusterClock {
    pub fn new(config: Config) -> Self {
        let max = config.max_rate_ppm * 1e-6;
        ClusterClock {
            config,
            kept: VecDeque::new(),
            latest: None,
            accepted: 0,
            last_t1: None,
            rate: (-max, max),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Take in one exchange. Refused samples change nothing.
    pub fn add(&mut self, sample: Sample) -> Result<Event, SampleError> {
        if let Some(last_t1) = self.last_t1 {
            if sample.t1 <= last_t1 {
                return Err(SampleError::NotNewer {
                    t1: sample.t1,
                    last_t1,
                });
            }
        }
        let point = sample.point(self.rate_limit())?;
        self.last_t1 = Some(sample.t1);
        let mut with_it: Vec<Point> = self.points().collect();
        with_it.push(point);
        if self.rate_range(&with_it).is_some() {
            self.keep(point);
            let points: Vec<Point> = self.points().collect();
            self.rate = self
                .rate_range(&points)
                .expect("a subset of consistent points");
            self.accepted += 1;
            return Ok(Event::Accepted);
        }
        // Inconsistent: say by how much, then restart from this sample.
        let (offset_change_ns, bound_ns) = match self.predict(point.x) {
            Some((remote, bound)) => (
                saturate(point.y as i128 - remote),
                bound.saturating_add(point.h),
            ),
            None => (0, point.h),
        };
        let last_t1 = self.last_t1;
        *self = ClusterClock::new(self.config);
        self.last_t1 = last_t1;
        self.keep(point);
        self.accepted = 1;
        Ok(Event::Stepped {
            offset_change_ns,
            bound_ns,
        })
    }

    /// A fault, for testing what detects it (a node's `clock_fault_us`
    /// knob): the estimate becomes wrong by `offset_ns` (gangd's clock
    /// seems that much further ahead) without its bound saying so, as after
    /// an undetected step. The next honest sample whose interval misses the
    /// shifted estimate (|offset_ns| beyond both bounds) is `Stepped`.
    pub fn inject_offset(&mut self, offset_ns: i64) {
        let shift = |p: &mut Point| p.y = p.y.saturating_add_signed(offset_ns);
        self.kept.iter_mut().for_each(shift);
        if let Some(l) = self.latest.as_mut() {
            shift(l);
        }
    }

    /// gangd's clock at `local_now`, or None before `min_samples` samples.
    pub fn estimate(&self, local_now: u64) -> Option<Estimate> {
        if self.accepted < self.config.min_samples {
            return None;
        }
        let (remote, bound) = self.predict(local_now)?;
        Some(Estimate {
            remote_ns: u64::try_from(remote).ok()?,
            error_bound_ns: bound,
            offset_ns: saturate(remote - local_now as i128),
            rate_ppm: self.rate_mid() * 1e6,
            samples: self.points().count(),
        })
    }

    /// The bound the latest sample alone states (half its round trip and
    /// the fixed slack): what one more probe over this link gives now, or
    /// None without a sample.
    pub fn latest_floor_ns(&self) -> Option<u64> {
        self.latest.map(|a| a.h.saturating_add(SLACK_NS))
    }

    /// The local instant at which gangd's clock reads `remote_ns`, and the
    /// bound on that instant (local ns), or None before `min_samples`
    /// samples or if the instant is outside the u64 range.
    pub fn to_local(&self, remote_ns: u64) -> Option<(u64, u64)> {
        if self.accepted < self.config.min_samples {
            return None;
        }
        let rate = self.rate_mid();
        // gangd's clock runs at least this fast against the node's, so a
        // remote error e is at most e / slowest of local time.
        let slowest = 1.0 - self.rate_limit();
        self.points()
            .map(|a| {
                let dy = remote_ns as i128 - a.y as i128;
                let dx = (dy as f64 / (1.0 + rate)).round() as i128;
                // +1: the rounding of dx moves the remote time by at most 1 ns.
                let remote_bound = self.bound_from(&a, dx) + 1;
                let local_bound = (remote_bound as f64 / slowest).ceil() as u64 + 1;
                (a.x as i128 + dx, local_bound)
            })
            .min_by_key(|&(_, bound)| bound)
            .and_then(|(local, bound)| Some((u64::try_from(local).ok()?, bound)))
    }

    /// The estimate at `local_now` if its bound is within `max_error_ns`.
    pub fn check(&self, local_now: u64, max_error_ns: u64) -> Quality {
        match self.estimate(local_now) {
            None => Quality::Unsynchronised,
            Some(e) if e.error_bound_ns > max_error_ns => Quality::TooCoarse(e),
            Some(e) => Quality::Good(e),
        }
    }

    /// The kept points and the latest one, each once.
    fn points(&self) -> impl Iterator<Item = Point> + '_ {
        let latest = self.latest.filter(|l| self.kept.back() != Some(l));
        self.kept.iter().copied().chain(latest)
    }

    fn keep(&mut self, point: Point) {
        let bucket = point.x / self.config.bucket_ns;
        let bucket_of = |p: &Point| p.x / self.config.bucket_ns;
        match self.kept.back_mut() {
            Some(back) if bucket_of(back) == bucket => {
                if point.h < back.h {
                    *back = point;
                }
            }
            _ => self.kept.push_back(point),
        }
        let oldest = (bucket + 1).saturating_sub(self.config.buckets as u64);
        while self.kept.front().is_some_and(|p| bucket_of(p) < oldest) {
            self.kept.pop_front();
        }
        self.latest = Some(point);
    }

    /// The largest rate difference a sample is checked against: the a
    /// priori one plus the wander.
    fn rate_limit(&self) -> f64 {
        (self.config.max_rate_ppm + self.config.unmodelled_drift_ppm) * 1e-6
    }

    fn rate_mid(&self) -> f64 {
        (self.rate.0 + self.rate.1) / 2.0
    }

    /// The rates c every pair of `points` allows (with the a priori
    /// bound), or None if there is none: the points contradict the model.
    fn rate_range(&self, points: &[Point]) -> Option<(f64, f64)> {
        let max = self.config.max_rate_ppm * 1e-6;
        let wander = self.config.unmodelled_drift_ppm * 1e-6;
        let (mut lo, mut hi) = (-max, max);
        for (i, p) in points.iter().enumerate() {
            for q in &points[i + 1..] {
                let dx = q.x as i128 - p.x as i128;
                let dy = q.y as i128 - p.y as i128;
                let width = p.h as i128 + q.h as i128;
                if dx == 0 {
                    if (dy.abs()) > width {
                        return None;
                    }
                    continue;
                }
                let (dx, excess) = if dx > 0 {
                    (dx, dy - dx)
                } else {
                    (-dx, dx - dy)
                };
                let dx = dx as f64;
                lo = lo.max((excess - width) as f64 / dx - wander);
                hi = hi.min((excess + width) as f64 / dx + wander);
            }
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// The bound on gangd's time `dx` ns of local time away from anchor `a`.
    fn bound_from(&self, a: &Point, dx: i128) -> u64 {
        let slope = (self.rate.1 - self.rate.0) / 2.0 + self.config.unmodelled_drift_ppm * 1e-6;
        let drift = (slope * dx.unsigned_abs() as f64).ceil();
        a.h.saturating_add(drift as u64).saturating_add(SLACK_NS)
    }

    /// gangd's time at local `x` and its bound, from the best anchor.
    fn predict(&self, x: u64) -> Option<(i128, u64)> {
        let rate = self.rate_mid();
        self.points()
            .map(|a| {
                let dx = x as i128 - a.x as i128;
                let remote = a.y as i128 + dx + (rate * dx as f64).round() as i128;
                (remote, self.bound_from(&a, dx))
            })
            .min_by_key(|&(_, bound)| bound)
    }
}

impl Default for ClusterClock {
    fn default() -> Self {
        ClusterClock::new(Config::default())
    }
}

fn saturate(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

#[cfg(test)]
mod tests;
