//! When a node probes gangd's clock next: fast while the estimate is new,
//! wide or suspect, then backing off while its bound stays small. A pure
//! state machine fed with the probes sent, the answers taken in (with the
//! estimator they went into) and faults, at times passed in (local ns).
//! The node's agent (src/agent/cluster_clock.rs) and gang-load's fake
//! agents both drive one per link, so the load harness probes as a node
//! does.
//!
//! How it works. After every answer taken in, the next probe is one
//! `period` later. The period is `fast_ns` while there is no estimate
//! (fewer than the estimator's `min_samples` since the start or a step) or
//! its bound now exceeds the target; otherwise it doubles (up to
//! `slow_ns`) but only as far as the estimator predicts its bound one
//! period ahead still within the target (the bound grows with the
//! time since the best sample: about 100 µs a second with the default
//! model). The target is `target_bound_ns`, or when the sample just taken
//! in alone states more (a round trip over 2 ms with the defaults, or
//! gangd answering late because it is loaded) that floor plus half of
//! `target_bound_ns`: fast probes would bring samples no better, and they
//! would load a busy gangd further (at 4096 nodes on a loaded machine,
//! 16 Ki probes a second instead of a few Ki). A `Stepped` answer, a fault injected or a new link (`fast_again`)
//! sets the period back to `fast_ns` and brings the next probe forward to
//! at most `fast_ns` away. A probe whose answer does not come is followed
//! by another `fast_ns` after it.
//!
//! So at steady state a node sends one probe per `slow_ns` (or fewer
//! seconds if its round trip or drift is large), instead of one per
//! `fast_ns`: 32 times fewer with the defaults.
//!
//! Known faults: a step is seen only at the next probe, so it goes
//! unnoticed for up to `slow_ns` (it was up to `fast_ns` with fixed
//! probing); the estimate is wrong meanwhile and its bound does not say
//! so (the estimator's own known fault, for longer). The bound stated at
//! the end of a long period is larger (up to `target_bound_ns`) than with
//! fixed fast probing (about half the round trip), and the node's drain
//! lead (twice the bound) grows with it.

use super::{ClusterClock, Event};

/// An estimate resting on fewer samples is reported (ClockStatus) with
/// every probe: its bound shrinks fast, and gangd switches a node by
/// command until it hears that its clock is good.
pub const YOUNG_SAMPLES: u32 = 8;
/// Otherwise a report goes with a probe at most this often (ns).
pub const REPORT_EVERY_NS: u64 = 4_000_000_000;

/// Whether a report goes with the probe just sent: `good_samples` is the
/// estimate's sample count if it is good, `since_report_ns` the time
/// since the last report. A change of the clock's state is reported at
/// once besides (the caller's). With fast probes (a wide bound) that is
/// one report per 4 s once the estimate is a few seconds old, as before
/// the schedule; backed off, one with each probe (4–8 s).
pub fn report_with_probe(good_samples: Option<u32>, since_report_ns: u64) -> bool {
    good_samples.is_some_and(|n| n < YOUNG_SAMPLES) || since_report_ns >= REPORT_EVERY_NS
}

/// When to probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleConfig {
    /// The period while the estimate is new, wide or suspect (> 0).
    pub fast_ns: u64,
    /// The longest period (≥ fast_ns).
    pub slow_ns: u64,
    /// Back off only while the bound stays within this.
    pub target_bound_ns: u64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            fast_ns: 250_000_000,
            slow_ns: 8_000_000_000,
            target_bound_ns: 1_000_000,
        }
    }
}

/// The schedule of one link's probes. See the top of this file.
#[derive(Clone, Debug)]
pub struct ProbeSchedule {
    config: ScheduleConfig,
    /// The period chosen at the last answer.
    period_ns: u64,
    /// The local time of the next probe (0: at once).
    next_ns: u64,
}

impl ProbeSchedule {
    /// A schedule whose first probe is due at once.
    pub fn new(config: ScheduleConfig) -> Self {
        let fast_ns = config.fast_ns.max(1);
        ProbeSchedule {
            config: ScheduleConfig {
                fast_ns,
                slow_ns: config.slow_ns.max(fast_ns),
                ..config
            },
            period_ns: fast_ns,
            next_ns: 0,
        }
    }

    pub fn config(&self) -> &ScheduleConfig {
        &self.config
    }

    /// Whether a probe is due at `now`.
    pub fn due(&self, now: u64) -> bool {
        now >= self.next_ns
    }

    /// The local time of the next probe.
    pub fn next_ns(&self) -> u64 {
        self.next_ns
    }

    /// The period chosen at the last answer.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Whether the schedule probes at its fastest.
    pub fn is_fast(&self) -> bool {
        self.period_ns <= self.config.fast_ns
    }

    /// A probe went out at `now`: if its answer never comes, the next one
    /// goes `fast_ns` later.
    pub fn sent(&mut self, now: u64) {
        self.next_ns = now.saturating_add(self.config.fast_ns);
    }

    /// An answer was taken in at `now` by `clock` (`event` is what its
    /// `add` said): the next probe is one period later.
    pub fn answered(&mut self, clock: &ClusterClock, event: Event, now: u64) {
        self.period_ns = match event {
            Event::Stepped { .. } => self.config.fast_ns,
            Event::Accepted => self.backed_off(clock, now),
        };
        self.next_ns = now.saturating_add(self.period_ns);
    }

    /// The estimate is suspect from `now` on (a fault injected, a new
    /// link): probe fast again, the next within `fast_ns`.
    pub fn fast_again(&mut self, now: u64) {
        self.period_ns = self.config.fast_ns;
        self.next_ns = self.next_ns.min(now.saturating_add(self.config.fast_ns));
    }

    /// The longest period up to twice the last (and `slow_ns`) over which
    /// the bound stays within the target; `fast_ns` if it is not within
    /// it now.
    fn backed_off(&self, clock: &ClusterClock, now: u64) -> u64 {
        let fast = self.config.fast_ns;
        let target = self.target_ns(clock);
        let fits = |at: u64| {
            clock
                .estimate(at)
                .is_some_and(|e| e.error_bound_ns <= target)
        };
        if !fits(now) {
            return fast;
        }
        let mut period = self
            .period_ns
            .saturating_mul(2)
            .clamp(fast, self.config.slow_ns);
        while period > fast && !fits(now.saturating_add(period)) {
            period = (period / 2).max(fast);
        }
        period
    }
}

impl ProbeSchedule {
    /// The bound the period is backed off against: `target_bound_ns`, or,
    /// when the sample just taken in alone states more than that (a round
    /// trip over twice the target, or a gangd too loaded to answer at
    /// once), that floor plus half the target. Probing fast would bring
    /// samples no better than this one, and a loaded gangd probed 32 times
    /// as often only answers later still.
    fn target_ns(&self, clock: &ClusterClock) -> u64 {
        let t = self.config.target_bound_ns;
        match clock.latest_floor_ns() {
            Some(floor) if floor > t => floor.saturating_add(t / 2),
            _ => t,
        }
    }
}

impl Default for ProbeSchedule {
    fn default() -> Self {
        ProbeSchedule::new(ScheduleConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Sample;
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;
    const S: u64 = 1_000 * MS;

    /// A node probing gangd's clock, `offset` ahead, over a network of
    /// `one_way` each way (10 µs in gangd), on the schedule.
    struct Node {
        clock: ClusterClock,
        schedule: ProbeSchedule,
        now: u64,
        offset: u64,
        one_way: u64,
        /// Local send times of the probes, and the bound the estimate
        /// stated just before each (None: no estimate).
        probes: Vec<(u64, Option<u64>)>,
    }

    impl Node {
        fn new() -> Node {
            Node {
                clock: ClusterClock::default(),
                schedule: ProbeSchedule::default(),
                now: S,
                offset: 5 * MS,
                one_way: 100 * US,
                probes: vec![],
            }
        }

        /// Probes when due and takes the answer in, until local `end`;
        /// the last event.
        fn run_until(&mut self, end: u64) -> Option<Event> {
            let mut last = None;
            while self.schedule.next_ns().max(self.now) < end {
                self.now = self.schedule.next_ns().max(self.now);
                let t1 = self.now;
                let bound = self.clock.estimate(t1).map(|e| e.error_bound_ns);
                self.probes.push((t1, bound));
                self.schedule.sent(t1);
                let t2 = t1 + self.one_way + self.offset;
                let t4 = t1 + 2 * self.one_way + 10 * US;
                let sample = Sample {
                    t1,
                    t2,
                    t3: t2 + 10 * US,
                    t4,
                };
                let event = self.clock.add(sample).expect("an honest sample");
                self.now = t4;
                self.schedule.answered(&self.clock, event, t4);
                last = Some(event);
            }
            self.now = end;
            last
        }

        fn probes_between(&self, from: u64, to: u64) -> usize {
            self.probes
                .iter()
                .filter(|(t, _)| (from..to).contains(t))
                .count()
        }
    }

    #[test]
    fn the_first_probe_is_due_at_once_and_an_unanswered_one_is_followed_fast() {
        let mut s = ProbeSchedule::default();
        assert!(s.due(0));
        s.sent(10 * S);
        assert!(!s.due(10 * S + 249 * MS));
        assert!(s.due(10 * S + 250 * MS));
    }

    #[test]
    fn probes_fast_until_there_is_an_estimate() {
        let mut node = Node::new();
        node.run_until(S + 700 * MS);
        // Three answers make the estimate; each before it is fast.
        let times: Vec<u64> = node.probes.iter().map(|p| p.0).collect();
        assert!(times.len() >= 3, "{times:?}");
        for w in times.windows(2).take(2) {
            assert!(w[1] - w[0] <= 250 * MS + MS, "{times:?}");
        }
    }

    #[test]
    fn backs_off_to_the_slow_period_while_the_bound_stays_within_the_target() {
        let mut node = Node::new();
        node.run_until(60 * S);
        // 250 ms → 4 s by doubling, then one probe per 4 s: 8 s would
        // let the bound grow past 1 ms (about 110 µs a second from half
        // the 220 µs round trip). Ten in the last 40 s instead of 160.
        assert_eq!(node.schedule.period_ns(), 4 * S);
        let e = node.clock.estimate(node.now + 8 * S).unwrap();
        assert!(e.error_bound_ns > MS, "{e:?}");
        assert!(
            node.probes_between(20 * S, 60 * S) <= 10,
            "{:?}",
            node.probes
        );
        // The bound never went past the target, however long the wait.
        for &(t, bound) in &node.probes {
            assert!(bound.is_none_or(|b| b <= MS), "{t}: {bound:?}");
        }
        let e = node.clock.estimate(60 * S).unwrap();
        assert!(e.error_bound_ns <= MS, "{e:?}");
    }

    #[test]
    fn a_short_round_trip_backs_off_to_the_slow_period() {
        let mut node = Node::new();
        node.one_way = 20 * US;
        node.run_until(60 * S);
        assert_eq!(node.schedule.period_ns(), 8 * S);
        for &(t, bound) in &node.probes {
            assert!(bound.is_none_or(|b| b <= MS), "{t}: {bound:?}");
        }
    }

    #[test]
    fn a_step_brings_fast_probing_back() {
        let mut node = Node::new();
        node.run_until(60 * S);
        assert!(!node.schedule.is_fast());
        // gangd's clock jumps 50 ms; the next probe shows it.
        node.offset += 50 * MS;
        let event = node.run_until(node.schedule.next_ns() + 1);
        assert!(matches!(event, Some(Event::Stepped { .. })), "{event:?}");
        assert!(node.schedule.is_fast());
        let stepped_at = node.probes.last().unwrap().0;
        node.run_until(stepped_at + 2 * S);
        // Fast until the estimator has its three samples again, then
        // backing off by doubling: 250, 250, 500, 1000 ms.
        assert!(node.probes_between(stepped_at, stepped_at + 2 * S) >= 4);
        assert!(matches!(
            node.clock.check(node.now, MS),
            crate::cluster_clock::Quality::Good(_)
        ));
    }

    #[test]
    fn a_fault_injected_brings_the_next_probe_within_the_fast_period() {
        let mut node = Node::new();
        node.run_until(60 * S);
        assert!(node.schedule.next_ns() > 60 * S + S, "backed off");
        node.clock.inject_offset(5 * MS as i64);
        node.schedule.fast_again(60 * S);
        assert!(node.schedule.due(60 * S + 250 * MS));
        let event = node.run_until(60 * S + 251 * MS);
        assert!(matches!(event, Some(Event::Stepped { .. })), "{event:?}");
    }

    #[test]
    fn a_round_trip_too_long_for_the_target_backs_off_around_its_own_floor() {
        let mut node = Node::new();
        // 2.5 ms of round trip: the bound is over 1 ms right after a
        // sample, and probing every 250 ms could not change that.
        node.one_way = 1_250 * US;
        node.run_until(60 * S);
        let floor = node.clock.latest_floor_ns().unwrap();
        assert!(floor > MS, "{floor}");
        assert!(!node.schedule.is_fast());
        // The rate is less certain over such samples, so the bound grows
        // faster between them: about one probe a second, not four.
        assert!(
            node.probes_between(20 * S, 60 * S) <= 45,
            "{} probes in 40 s (160 at the fast period)",
            node.probes_between(20 * S, 60 * S)
        );
        // The bound stays within half the target of the floor.
        for &(t, bound) in node.probes.iter().filter(|p| p.0 > 10 * S) {
            assert!(bound.is_none_or(|b| b <= floor + MS / 2), "{t}: {bound:?}");
        }
    }

    #[test]
    fn a_gangd_that_starts_answering_late_is_not_probed_faster() {
        // Good answers first, then gangd is loaded: every answer takes
        // 3 ms. The good samples age, the bound grows past 1 ms, and
        // fresh samples cannot bring it back: the period stays long.
        let mut node = Node::new();
        node.run_until(30 * S);
        node.one_way = 1_500 * US;
        node.run_until(120 * S);
        assert!(!node.schedule.is_fast());
        let n = node.probes_between(80 * S, 120 * S);
        assert!(n <= 45, "{n} probes in 40 s (160 at the fast period)");
    }

    #[test]
    fn a_link_within_the_target_keeps_the_target_not_its_floor() {
        // 220 µs round trip: backs off only as far as 1 ms allows (4 s),
        // not as far as floor + 0.5 ms would.
        let mut node = Node::new();
        node.run_until(60 * S);
        assert!(node.clock.latest_floor_ns().unwrap() < MS / 2);
        assert_eq!(node.schedule.period_ns(), 4 * S);
    }

    #[test]
    fn a_bound_that_grows_shortens_the_period_again() {
        let mut node = Node::new();
        node.run_until(60 * S);
        assert!(!node.schedule.is_fast());
        // The network slows down: 700 µs each way. The good old samples
        // age out of the window; new ones alone cannot keep the bound
        // under the target for long.
        node.one_way = 700 * US;
        node.run_until(120 * S);
        assert!(
            node.schedule.period_ns() <= S,
            "{}",
            node.schedule.period_ns()
        );
        assert!(node.probes_between(100 * S, 120 * S) >= 20);
        for &(t, bound) in &node.probes {
            assert!(bound.is_none_or(|b| b <= MS + 100 * US), "{t}: {bound:?}");
        }
    }
}
