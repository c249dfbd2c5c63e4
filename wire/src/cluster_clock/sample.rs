//! One timestamped exchange between a node and gangd, and what it proves.
//!
//! The node sends at t1 (its CLOCK_MONOTONIC), gangd receives at t2 and
//! answers at t3 (gangd's CLOCK_MONOTONIC), the node receives at t4. The
//! only facts are causal: gangd's clock read at least t2 when the node's
//! clock read t1, and at most t3 when the node's read t4. With the two
//! clocks' rates within `max_rate` of each other, gangd's clock at the
//! local midpoint x = (t1 + t4) / 2 lies within y ± h, where
//! y = (t2 + t3) / 2 and h = ((t4 − t1)(1 + max_rate) − (t3 − t2)) / 2:
//! half the round trip, plus the rate difference over half the exchange.
//! That interval is a `Point`; the estimator (mod.rs) only ever combines
//! such intervals, so every bound it states follows from them.
//!
//! A sample whose timestamps contradict causality is refused here
//! (`SampleError`); no delay, however asymmetric, can make an honest
//! sample's interval miss gangd's true time.
//!
//! Known faults: the interval is exact only if both ends timestamp the
//! message at the moment it leaves or arrives; time spent between reading
//! the clock and the socket call widens the true interval beyond h
//! unless it is inside t1..t4 on the node side (it is, if the agent reads
//! t1 before sending and t4 after receiving).

use std::fmt;

/// One exchange: t1 local send, t2 remote receive, t3 remote send, t4
/// local receive, all in ns. Local is the node's CLOCK_MONOTONIC, remote
/// gangd's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub t4: u64,
}

/// Why a sample was refused. A refused sample changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleError {
    /// The answer arrived before the request left (t4 < t1).
    LocalBackwards { t1: u64, t4: u64 },
    /// gangd answered before it received (t3 < t2).
    RemoteBackwards { t2: u64, t3: u64 },
    /// gangd held the request longer than the whole local round trip
    /// (beyond what the rate difference allows).
    TurnaroundLongerThanRoundTrip { turnaround_ns: u64, local_ns: u64 },
    /// Sent no later than the last sample taken in (t1 not increasing).
    NotNewer { t1: u64, last_t1: u64 },
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SampleError::LocalBackwards { t1, t4 } => {
                write!(f, "clock sample received (t4 {t4}) before it was sent (t1 {t1})")
            }
            SampleError::RemoteBackwards { t2, t3 } => {
                write!(f, "clock sample answered (t3 {t3}) before it was received (t2 {t2})")
            }
            SampleError::TurnaroundLongerThanRoundTrip { turnaround_ns, local_ns } => write!(
                f,
                "clock sample's remote turnaround {turnaround_ns} ns is longer than its round trip {local_ns} ns"
            ),
            SampleError::NotNewer { t1, last_t1 } => {
                write!(f, "clock sample sent at {t1} is not newer than the last one (sent at {last_t1})")
            }
        }
    }
}

impl std::error::Error for SampleError {}

/// Rounding of the midpoints and of clocks that count whole ns: a few ns
/// added to every interval so that integer arithmetic never makes a bound
/// a nanosecond too tight.
pub(crate) const SLACK_NS: u64 = 4;

/// What a sample proves: when the local clock read `x`, the remote clock
/// read within `y ± h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    pub x: u64,
    pub y: u64,
    pub h: u64,
}

impl Sample {
    /// The network's share of the exchange: local round trip minus gangd's
    /// turnaround (0 if the turnaround is longer).
    pub fn round_trip_ns(&self) -> u64 {
        self.t4
            .saturating_sub(self.t1)
            .saturating_sub(self.t3.saturating_sub(self.t2))
    }

    /// The interval this sample proves, or why it is impossible, when the
    /// two clocks' rates differ by at most `max_rate` (a fraction).
    pub(crate) fn point(&self, max_rate: f64) -> Result<Point, SampleError> {
        let Sample { t1, t2, t3, t4 } = *self;
        if t4 < t1 {
            return Err(SampleError::LocalBackwards { t1, t4 });
        }
        if t3 < t2 {
            return Err(SampleError::RemoteBackwards { t2, t3 });
        }
        let local = t4 - t1;
        let turnaround = t3 - t2;
        // gangd's clock advances at most (1 + max_rate) × local during the
        // exchange; ceil so that a local round trip of a few ns still counts.
        let widest = local.saturating_add((local as f64 * max_rate).ceil() as u64);
        if turnaround > widest {
            return Err(SampleError::TurnaroundLongerThanRoundTrip {
                turnaround_ns: turnaround,
                local_ns: local,
            });
        }
        Ok(Point {
            x: t1 + local / 2,
            y: t2 + turnaround / 2,
            h: (widest - turnaround).div_ceil(2) + SLACK_NS,
        })
    }
}
