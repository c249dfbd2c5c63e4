//! A fake agent's cluster clock: the probes on the real agent's schedule
//! and the reports gangd needs for timed switching.
//!
//! How it works: the estimator and the schedule are gang-wire's own
//! (`ClusterClock`, `ProbeSchedule`), as in the real agent
//! (src/agent/cluster_clock.rs): `due` probes are sent, echoes are fed to
//! the estimator and the schedule, so the probes back off as a node's do
//! (or stay at one period with a fixed schedule, fast = slow, as agents
//! did before the schedule). A report (ClockStatus) goes with a probe when
//! gang-wire's `report_with_probe` says so, and at once when the clock's
//! state changes, as the real agent sends.
//!
//! Known faults: the echo's seq and t1 are not checked against the probes
//! sent (gangd is trusted here); the report's `steps` is always 0.

use std::time::Instant;

use gang_wire::cluster_clock::{
    report_with_probe, ClusterClock, Event, ProbeSchedule, Sample, ScheduleConfig,
};
use gang_wire::proto::{ClockReport, ClockSource, ClockState, FromAgent};

pub struct AgentClock {
    clock: ClusterClock,
    schedule: ProbeSchedule,
    seq: u64,
    reported: Option<Instant>,
    state: ClockState,
    /// The estimator restarted since the last report.
    stepped: bool,
}

impl AgentClock {
    pub fn new(config: ScheduleConfig) -> AgentClock {
        AgentClock {
            clock: ClusterClock::default(),
            schedule: ProbeSchedule::new(config),
            seq: 0,
            reported: None,
            state: ClockState::Unsynchronised,
            stepped: false,
        }
    }

    /// What to send at local `now_ns` (`now`, the same instant): nothing,
    /// a probe, or a probe and a report.
    pub fn tick(&mut self, now_ns: u64, now: Instant) -> Vec<FromAgent> {
        if !self.schedule.due(now_ns) {
            return vec![];
        }
        self.seq += 1;
        self.schedule.sent(now_ns);
        let mut out = vec![FromAgent::ClockProbe {
            seq: self.seq,
            t1: now_ns,
        }];
        let report = self.report(now_ns);
        let changed = report.state != self.state;
        let good = (report.state == ClockState::Good).then_some(report.samples);
        let since = self
            .reported
            .map_or(u64::MAX, |r| now.duration_since(r).as_nanos() as u64);
        if changed || report_with_probe(good, since) {
            self.state = report.state;
            self.reported = Some(now);
            self.stepped = false;
            out.push(FromAgent::ClockStatus { report });
        }
        out
    }

    /// gangd's echo of a probe, received at local `t4`.
    pub fn echo(&mut self, t1: u64, t2: u64, t3: u64, t4: u64) {
        if let Ok(event) = self.clock.add(Sample { t1, t2, t3, t4 }) {
            self.stepped |= matches!(event, Event::Stepped { .. });
            self.schedule.answered(&self.clock, event, t4);
        }
    }

    fn report(&self, now_ns: u64) -> ClockReport {
        let estimate = self.clock.estimate(now_ns);
        let state = match (self.stepped, &estimate) {
            (true, _) => ClockState::Stepped,
            (false, Some(_)) => ClockState::Good,
            (false, None) => ClockState::Unsynchronised,
        };
        ClockReport {
            source: ClockSource::Gangd,
            state,
            offset_ns: estimate.map_or(0, |e| e.offset_ns),
            rate_ppb: estimate.map_or(0, |e| (e.rate_ppm * 1000.0).round() as i64),
            error_bound_ns: estimate.map_or(0, |e| e.error_bound_ns),
            samples: estimate.map_or(0, |e| e.samples as u32),
            steps: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    /// Echoes every probe at once (gangd's clock is the harness's) for
    /// `secs`; the probes and reports sent.
    fn run(config: ScheduleConfig, secs: u64) -> (usize, usize) {
        let mut c = AgentClock::new(config);
        let start = Instant::now();
        let (mut probes, mut reports) = (0, 0);
        for ms in 0..secs * 1000 {
            let now_ns = 1_000 * MS + ms * MS;
            for msg in c.tick(now_ns, start + Duration::from_millis(ms)) {
                match msg {
                    FromAgent::ClockProbe { t1, .. } => {
                        probes += 1;
                        c.echo(t1, t1 + 50_000, t1 + 60_000, t1 + 110_000);
                    }
                    FromAgent::ClockStatus { .. } => reports += 1,
                    other => panic!("{other:?}"),
                }
            }
        }
        (probes, reports)
    }

    #[test]
    fn probes_back_off_as_the_real_agents_do() {
        let (probes, reports) = run(ScheduleConfig::default(), 60);
        // 250 ms, doubling to 8 s: about 12 probes in a minute, not 240.
        assert!((8..=20).contains(&probes), "{probes}");
        assert!(reports <= probes, "{reports}");
    }

    #[test]
    fn a_long_round_trip_probes_slower_and_reports_every_4_s_once_the_estimate_is_older() {
        let mut c = AgentClock::new(ScheduleConfig::default());
        let start = Instant::now();
        let (mut probes, mut reports) = (0, 0);
        // 3 ms of round trip: the bound never gets under 1 ms, and faster
        // probes could not change that (gang-wire's schedule backs off
        // against the floor a sample states).
        for ms in 0..60_000u64 {
            let now_ns = 1_000 * MS + ms * MS;
            for msg in c.tick(now_ns, start + Duration::from_millis(ms)) {
                match msg {
                    FromAgent::ClockProbe { t1, .. } => {
                        probes += 1;
                        c.echo(t1, t1 + 1_500_000, t1 + 1_500_000, t1 + 3_000_000);
                    }
                    FromAgent::ClockStatus { .. } => reports += 1,
                    other => panic!("{other:?}"),
                }
            }
        }
        // Not every 250 ms (240 in a minute).
        assert!(probes <= 80, "{probes}");
        // Young (under 8 samples kept: the first 8 s) with every probe,
        // then every 4 s: not one report per probe.
        assert!(reports <= 50, "{reports}");
    }

    #[test]
    fn a_fixed_schedule_probes_every_period_and_reports_every_4_s_once_older() {
        let fixed = ScheduleConfig {
            fast_ns: 250 * MS,
            slow_ns: 250 * MS,
            ..ScheduleConfig::default()
        };
        let (probes, reports) = run(fixed, 60);
        assert_eq!(probes, 240);
        // With every probe for the first 8 s (under 8 samples kept), then
        // every 4 s, as the agents did before the schedule.
        assert!((30..=40).contains(&reports), "{reports}");
    }
}
