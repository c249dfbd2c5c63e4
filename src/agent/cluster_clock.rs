//! The node's cluster clock, shared: the one `ClusterClock`
//! (gang_wire::cluster_clock, the pure estimator) of the current
//! connection to gangd, behind a lock, with the bookkeeping of the
//! exchanges that feed it and their schedule (gang_wire's
//! `ProbeSchedule`: a probe every 250 ms while the estimate is new, wide
//! or suspect, backing off to one every 8 s while its bound stays within
//! 1 ms; fast again after a step, a fault injected or a new connection).
//! The prober thread (`spawn_prober`) sends the probes when due on the
//! urgent side of the link and a report (ClockStatus) to gangd with a
//! probe at most every 4 s, at once when its state changes and with every
//! probe while the estimate is young (gang_wire's `report_with_probe`:
//! gangd switches a node by command until its clock is good), and logs
//! the clock's line when its
//! state changes and every minute; the agent's reader hands it every echo
//! with its receipt time (`echo`); whoever needs the cluster time (the
//! main loop, the future plan timers) asks `to_local` or `check`, and
//! `scx_gang --monitor` shows `current` (through the daemon's stats).
//! Not to be confused with crate::clock, the slot clock the ranks read.
//!
//! How it works. Every probe is remembered (seq → t1, the last
//! `IN_FLIGHT` of them); an echo is fed to the estimator only if its seq
//! is one of ours and its t1 the one we sent, and the estimator refuses
//! what breaks causality (t3 < t2, a turnaround longer than the round
//! trip). Anything refused is dropped and counted (`dropped`), never fed.
//! A new connection is a new gangd, maybe a new machine: `reset` starts
//! the estimate over. With `clock = realtime` (gangd's knob) the node's
//! CLOCK_REALTIME is the cluster clock and its bound the knob's: no probes.
//!
//! Known faults: with `clock = realtime` the bound is what the operator
//! says, not measured; a step of CLOCK_REALTIME (settimeofday) moves the
//! cluster clock without being noticed here. An echo delayed past
//! `IN_FLIGHT` newer probes (at least 16 × 250 ms = 4 s) is dropped as
//! unknown. Backed off, a step of either clock goes unnoticed until the
//! next probe, up to 8 s later (schedule.rs's known faults).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::cluster_clock::{
    report_with_probe, ClusterClock, Estimate, Event, ProbeSchedule, Quality, Sample, SampleError,
};
use gang_wire::proto::{ClockReport, ClockSource, ClockState, FromAgent};
use gang_wire::time::monotonic_ns;
use log::{info, warn};

use crate::knobs::SharedKnobs;

use super::bell::{Bell, PARK_MAX};
use super::link::Link;

/// Probes remembered for their echo.
pub const IN_FLIGHT: usize = 16;
/// How often the clock's line goes to the node's log.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Why an echo was not fed to the estimator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoError {
    /// Not a probe of ours in flight (too old, answered already, made up,
    /// or from before the connection began).
    UnknownSeq(u64),
    /// Our seq, but not the t1 we sent with it.
    NotOurT1 { seq: u64, sent: u64, echoed: u64 },
    /// The timestamps break causality (t3 < t2, ...).
    Refused(SampleError),
    /// `clock = realtime`: no probes are out.
    NotProbing,
}

impl std::fmt::Display for EchoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EchoError::UnknownSeq(seq) => write!(f, "clock echo of unknown probe {seq}"),
            EchoError::NotOurT1 { seq, sent, echoed } => {
                write!(
                    f,
                    "clock echo of probe {seq} says t1 {echoed}, it was sent at {sent}"
                )
            }
            EchoError::Refused(e) => write!(f, "{e}"),
            EchoError::NotProbing => write!(f, "clock echo while the clock is CLOCK_REALTIME"),
        }
    }
}

struct State {
    source: ClockSource,
    /// The bound of `clock = realtime`, ns.
    realtime_bound_ns: u64,
    clock: ClusterClock,
    /// When the next probe is due.
    schedule: ProbeSchedule,
    next_seq: u64,
    /// Probes in flight: (seq, t1), oldest first.
    in_flight: VecDeque<(u64, u64)>,
    /// Steps since the connection began.
    steps: u64,
    /// A step since the last report.
    stepped: bool,
    /// Echoes dropped since the daemon started.
    dropped: u64,
}

/// The shared handle. See the top of this file.
pub struct SharedClusterClock {
    state: Mutex<State>,
    /// Wakes the prober: a new link, a new source, a fault to inject.
    bell: Bell,
}

impl Default for SharedClusterClock {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedClusterClock {
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                source: ClockSource::Gangd,
                realtime_bound_ns: 0,
                clock: ClusterClock::default(),
                schedule: ProbeSchedule::default(),
                next_seq: 1,
                in_flight: VecDeque::new(),
                steps: 0,
                stepped: false,
                dropped: 0,
            }),
            bell: Bell::default(),
        }
    }

    /// Something for the prober to look at now: the link is up, the
    /// `clock_fault_us` knob was written.
    pub fn wake(&self) {
        self.bell.ring();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection: gangd's clock is a new one, start over.
    pub fn reset(&self) {
        {
            let mut s = self.lock();
            s.clock = ClusterClock::new(*s.clock.config());
            s.schedule = ProbeSchedule::new(*s.schedule.config());
            s.in_flight.clear();
            s.steps = 0;
            s.stepped = false;
        }
        self.wake();
    }

    /// gangd's `clock` and `clock_error_us` knobs. A change of source
    /// starts the estimate over.
    pub fn set_source(&self, source: ClockSource, error_us: u32) {
        let changed = {
            let mut s = self.lock();
            s.realtime_bound_ns = u64::from(error_us) * 1000;
            let changed = s.source != source;
            s.source = source;
            changed
        };
        if changed {
            self.reset();
        }
    }

    /// How long the prober may sleep at local `now`: until the next probe
    /// is due (at once if it is), PARK_MAX without probes (`clock =
    /// realtime`) or without a link; a ring wakes it sooner.
    pub fn sleep_for(&self, now: u64, connected: bool) -> Duration {
        let s = self.lock();
        if !connected || s.source != ClockSource::Gangd {
            return PARK_MAX;
        }
        Duration::from_nanos(s.schedule.next_ns().saturating_sub(now)).min(PARK_MAX)
    }

    pub fn source(&self) -> ClockSource {
        self.lock().source
    }

    /// Whether a probe is due at local `now` (never with `clock =
    /// realtime`).
    pub fn probe_due(&self, now: u64) -> bool {
        let s = self.lock();
        s.source == ClockSource::Gangd && s.schedule.due(now)
    }

    /// Whether the schedule probes at its fastest (the estimate is new,
    /// wide or suspect).
    pub fn probing_fast(&self) -> bool {
        self.lock().schedule.is_fast()
    }

    /// The probe to send now, sent at `t1` (read just before sending), or
    /// None with `clock = realtime`.
    pub fn probe(&self, t1: u64) -> Option<FromAgent> {
        let mut s = self.lock();
        if s.source != ClockSource::Gangd {
            return None;
        }
        let seq = s.next_seq;
        s.next_seq += 1;
        s.schedule.sent(t1);
        s.in_flight.push_back((seq, t1));
        while s.in_flight.len() > IN_FLIGHT {
            s.in_flight.pop_front();
        }
        Some(FromAgent::ClockProbe { seq, t1 })
    }

    /// An echo, received at `t4` (read on receipt). Fed to the estimator
    /// if it answers a probe of ours; otherwise dropped and counted.
    pub fn echo(&self, seq: u64, t1: u64, t2: u64, t3: u64, t4: u64) -> Result<Event, EchoError> {
        let mut s = self.lock();
        let result = Self::take_echo(&mut s, seq, t1, Sample { t1, t2, t3, t4 });
        match result {
            Ok(event) => {
                if let Event::Stepped { .. } = event {
                    s.steps += 1;
                    s.stepped = true;
                }
                let s = &mut *s;
                s.schedule.answered(&s.clock, event, t4);
            }
            Err(_) => s.dropped += 1,
        }
        result
    }

    fn take_echo(s: &mut State, seq: u64, t1: u64, sample: Sample) -> Result<Event, EchoError> {
        if s.source != ClockSource::Gangd {
            return Err(EchoError::NotProbing);
        }
        let i = s
            .in_flight
            .iter()
            .position(|&(q, _)| q == seq)
            .ok_or(EchoError::UnknownSeq(seq))?;
        let sent = s.in_flight[i].1;
        if sent != t1 {
            return Err(EchoError::NotOurT1 {
                seq,
                sent,
                echoed: t1,
            });
        }
        s.in_flight.remove(i);
        s.clock.add(sample).map_err(EchoError::Refused)
    }

    /// Echoes dropped since the daemon started.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// The cluster clock at local `now` if its bound is within
    /// `max_error_ns` (ClusterClock::check; with `clock = realtime`,
    /// CLOCK_REALTIME and the knob's bound).
    pub fn check(&self, now: u64, max_error_ns: u64) -> Quality {
        let s = self.lock();
        match s.source {
            ClockSource::Gangd => s.clock.check(now, max_error_ns),
            ClockSource::Realtime => {
                let e = realtime_estimate(now, s.realtime_bound_ns);
                if e.error_bound_ns > max_error_ns {
                    Quality::TooCoarse(e)
                } else {
                    Quality::Good(e)
                }
            }
        }
    }

    /// The local CLOCK_MONOTONIC instant at which the cluster clock reads
    /// `cluster_ns`, and its bound, or None before the estimate exists.
    pub fn to_local(&self, cluster_ns: u64) -> Option<(u64, u64)> {
        let s = self.lock();
        match s.source {
            ClockSource::Gangd => s.clock.to_local(cluster_ns),
            ClockSource::Realtime => {
                let local = cluster_ns as i128 - realtime_offset_ns() as i128;
                Some((u64::try_from(local).ok()?, s.realtime_bound_ns))
            }
        }
    }

    /// A fault for tests (the `clock_fault_us` knob), at local `now`: the
    /// estimate becomes wrong by `offset_ns` (ClusterClock::inject_offset)
    /// and the probes go fast again, so the next one shows it soon.
    pub fn inject_offset(&self, offset_ns: i64, now: u64) {
        let mut s = self.lock();
        s.clock.inject_offset(offset_ns);
        s.schedule.fast_again(now);
    }

    /// The report for gangd at local `now`; clears the "stepped" mark.
    pub fn report(&self, now: u64) -> ClockReport {
        let mut s = self.lock();
        let r = Self::make_report(&s, now);
        s.stepped = false;
        r
    }

    /// The report at `now` for a reader other than gangd (the monitor):
    /// leaves the "stepped" mark for gangd's next report.
    pub fn current(&self, now: u64) -> ClockReport {
        Self::make_report(&self.lock(), now)
    }

    fn make_report(s: &State, now: u64) -> ClockReport {
        let estimate = match s.source {
            ClockSource::Gangd => s.clock.estimate(now),
            ClockSource::Realtime => Some(realtime_estimate(now, s.realtime_bound_ns)),
        };
        let state = match (s.stepped, &estimate) {
            (true, _) => ClockState::Stepped,
            (false, Some(_)) => ClockState::Good,
            (false, None) => ClockState::Unsynchronised,
        };
        let e = estimate.unwrap_or(Estimate {
            remote_ns: 0,
            error_bound_ns: 0,
            offset_ns: 0,
            rate_ppm: 0.0,
            samples: 0,
        });
        ClockReport {
            source: s.source,
            state,
            offset_ns: e.offset_ns,
            // Within ±550 000 ppb by the estimator's model.
            rate_ppb: (e.rate_ppm * 1000.0).round() as i64,
            error_bound_ns: e.error_bound_ns,
            samples: e.samples.try_into().unwrap_or(u32::MAX),
            steps: s.steps,
        }
    }
}

/// The clock's line for the node's log.
pub fn describe(r: &ClockReport) -> String {
    format!(
        "cluster clock ({:?}): {:?}, offset {} ns, bound {} µs, rate {} ppb, {} samples, {} steps",
        r.source,
        r.state,
        r.offset_ns,
        r.error_bound_ns / 1000,
        r.rate_ppb,
        r.samples,
        r.steps
    )
    .to_lowercase()
}

/// The prober thread: a probe when the schedule says so, with a report if
/// `report_with_probe` says so (and a report at once when the clock's
/// state changes) while gangd is connected; the clock's line in the log
/// every LOG_EVERY and when its state changes. Between probes it sleeps
/// (`sleep_for`: 8 s once the estimate is good, bell.rs), woken by a new
/// link or source and by every knob write (`clock_fault_us`). Runs until
/// `shutdown`.
pub fn spawn_prober(
    clock: Arc<SharedClusterClock>,
    link: Arc<Link>,
    knobs: Arc<SharedKnobs>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<thread::JoinHandle<()>> {
    let rung = clock.clone();
    knobs.on_change(move || rung.wake());
    thread::Builder::new()
        .name("agent-clock".into())
        .spawn(move || {
            let (mut reported, mut logged) = (Instant::now(), Instant::now());
            let mut last_state = None;
            while !shutdown.load(Ordering::Relaxed) {
                clock
                    .bell
                    .wait(clock.sleep_for(monotonic_ns(), link.is_connected()));
                if !link.is_connected() {
                    continue;
                }
                let fault_us = knobs.take_clock_fault_us();
                if fault_us != 0 {
                    warn!("clock fault injected (knob clock_fault_us): the cluster clock estimate is now {fault_us} µs off");
                    clock.inject_offset(fault_us.saturating_mul(1000), monotonic_ns());
                }
                let mut probed = false;
                if clock.probe_due(monotonic_ns()) {
                    if let Some(probe) = clock.probe(monotonic_ns()) {
                        link.send(probe);
                        probed = true;
                    }
                }
                // A change of state is reported at once; otherwise a report
                // goes with a probe (its bound is then the period's
                // largest), with every one while the estimate is young.
                let report = clock.report(monotonic_ns());
                let changed = last_state != Some(report.state);
                let good = (report.state == ClockState::Good).then_some(report.samples);
                let since = reported.elapsed().as_nanos() as u64;
                let due = probed && report_with_probe(good, since);
                if !changed && !due {
                    continue;
                }
                reported = Instant::now();
                if changed || logged.elapsed() >= LOG_EVERY {
                    info!("{}", describe(&report));
                    logged = Instant::now();
                    last_state = Some(report.state);
                }
                link.send(FromAgent::ClockStatus { report });
            }
        })
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now, ns.
fn realtime_offset_ns() -> i64 {
    let read = |id| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill; both clocks always exist.
        unsafe { libc::clock_gettime(id, &mut ts) };
        ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
    };
    let mono = read(libc::CLOCK_MONOTONIC);
    let real = read(libc::CLOCK_REALTIME);
    (real - mono).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn realtime_estimate(now: u64, bound_ns: u64) -> Estimate {
    let offset_ns = realtime_offset_ns();
    Estimate {
        remote_ns: (now as i128 + offset_ns as i128).max(0) as u64,
        error_bound_ns: bound_ns,
        offset_ns,
        rate_ppm: 0.0,
        samples: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gangd's clock is the node's + 1 ms; every exchange takes 100 µs
    /// each way and 10 µs in gangd.
    fn exchange(clock: &SharedClusterClock, t1: u64) -> Result<Event, EchoError> {
        let Some(FromAgent::ClockProbe { seq, t1 }) = clock.probe(t1) else {
            panic!("no probe");
        };
        let t2 = t1 + 100_000 + 1_000_000;
        clock.echo(seq, t1, t2, t2 + 10_000, t1 + 210_000)
    }

    #[test]
    fn only_echoes_of_our_probes_are_fed_and_the_rest_counted() {
        let clock = SharedClusterClock::new();
        let Some(FromAgent::ClockProbe { seq, t1 }) = clock.probe(1_000) else {
            panic!()
        };
        assert_eq!(
            clock.echo(seq + 7, t1, 5_000, 5_100, 2_000),
            Err(EchoError::UnknownSeq(seq + 7))
        );
        assert!(matches!(
            clock.echo(seq, t1 + 1, 5_000, 5_100, 2_000),
            Err(EchoError::NotOurT1 { .. })
        ));
        assert!(matches!(
            clock.echo(seq, t1, 5_100, 5_000, 2_000),
            Err(EchoError::Refused(SampleError::RemoteBackwards { .. }))
        ));
        assert_eq!(clock.dropped(), 3);
        // A refused echo took its probe: a replay of it is unknown.
        assert_eq!(
            clock.echo(seq, t1, 5_000, 5_100, 2_000),
            Err(EchoError::UnknownSeq(seq))
        );
        assert_eq!(clock.report(2_000).state, ClockState::Unsynchronised);
    }

    #[test]
    fn three_good_exchanges_make_an_estimate_and_a_new_connection_forgets_it() {
        let clock = SharedClusterClock::new();
        // A second apart: each is the best of its second, all kept.
        for i in 0..3 {
            assert_eq!(
                exchange(&clock, 1_000_000_000 * (i + 1)),
                Ok(Event::Accepted)
            );
        }
        let now = 3_300_000_000;
        let r = clock.report(now);
        assert_eq!(
            (r.state, r.source, r.samples, r.steps),
            (ClockState::Good, ClockSource::Gangd, 3, 0)
        );
        assert!(
            (r.offset_ns - 1_000_000).abs() <= r.error_bound_ns as i64,
            "{r:?}"
        );
        assert!(r.error_bound_ns < 200_000, "{r:?}");
        assert!(matches!(clock.check(now, 200_000), Quality::Good(_)));
        let (local, bound) = clock.to_local(now + 1_000_000).unwrap();
        assert!(local.abs_diff(now) <= bound, "{local} {bound}");
        clock.reset();
        assert_eq!(clock.report(now).state, ClockState::Unsynchronised);
        assert_eq!(clock.to_local(now), None);
    }

    #[test]
    fn a_step_is_reported_once_and_counted() {
        let clock = SharedClusterClock::new();
        for i in 0..3 {
            exchange(&clock, 1_000_000_000 * (i + 1)).unwrap();
        }
        // gangd's clock jumps 50 ms.
        let Some(FromAgent::ClockProbe { seq, t1 }) = clock.probe(4_000_000_000) else {
            panic!()
        };
        let t2 = t1 + 100_000 + 51_000_000;
        assert!(matches!(
            clock.echo(seq, t1, t2, t2 + 10_000, t1 + 210_000),
            Ok(Event::Stepped { .. })
        ));
        assert_eq!(clock.current(4_000_300_000).state, ClockState::Stepped);
        let r = clock.report(4_000_300_000);
        assert_eq!((r.state, r.steps), (ClockState::Stepped, 1));
        assert_eq!(
            clock.report(4_000_300_000).state,
            ClockState::Unsynchronised
        );
    }

    #[test]
    fn probes_back_off_once_good_and_come_fast_after_a_fault_or_a_new_connection() {
        let clock = SharedClusterClock::new();
        assert!(clock.probe_due(0) && clock.probing_fast());
        // Good exchanges as the prober makes them: one whenever due.
        let mut t = 1_000_000_000;
        for _ in 0..12 {
            t = t.max(clock.state.lock().unwrap().schedule.next_ns());
            assert!(clock.probe_due(t));
            exchange(&clock, t).unwrap();
            t += 210_000;
        }
        assert!(!clock.probing_fast(), "backed off");
        assert!(!clock.probe_due(t + 250_000_000));
        // clock_fault_us: the next probe within 250 ms shows the fault.
        clock.inject_offset(5_000_000, t);
        assert!(clock.probing_fast());
        assert!(clock.probe_due(t + 250_000_000));
        // A new connection probes at once.
        exchange(&clock, t + 250_000_000).unwrap();
        clock.reset();
        assert!(clock.probe_due(t + 250_000_001) && clock.probing_fast());
    }

    /// The prober sleeps until its next probe, not on a tick: at once
    /// while the estimate is new, seconds once it is good, parked without a
    /// link or with `clock = realtime`.
    #[test]
    fn the_prober_sleeps_until_the_next_probe_and_parks_without_one() {
        let clock = SharedClusterClock::new();
        assert_eq!(
            clock.sleep_for(0, true),
            Duration::ZERO,
            "a new estimate: probe now"
        );
        assert_eq!(
            clock.sleep_for(0, false),
            PARK_MAX,
            "no link: nothing to probe"
        );
        let mut t = 1_000_000_000;
        for _ in 0..12 {
            t = t.max(clock.state.lock().unwrap().schedule.next_ns());
            exchange(&clock, t).unwrap();
            t += 210_000;
        }
        let next = clock.state.lock().unwrap().schedule.next_ns();
        let sleep = clock.sleep_for(t, true);
        assert_eq!(sleep, Duration::from_nanos(next - t).min(PARK_MAX));
        assert!(sleep >= Duration::from_secs(2), "backed off: {sleep:?}");
        clock.inject_offset(5_000_000, t);
        assert!(
            clock.sleep_for(t, true) <= Duration::from_millis(250),
            "a fault: fast again"
        );
        clock.set_source(ClockSource::Realtime, 50);
        assert_eq!(clock.sleep_for(t, true), PARK_MAX, "realtime: no probes");
    }

    #[test]
    fn realtime_needs_no_probes_and_states_the_knobs_bound() {
        let clock = SharedClusterClock::new();
        clock.set_source(ClockSource::Realtime, 50);
        assert_eq!(clock.probe(1), None);
        assert!(!clock.probe_due(u64::MAX));
        assert_eq!(clock.echo(1, 1, 2, 3, 4), Err(EchoError::NotProbing));
        let now = gang_wire::time::monotonic_ns();
        let r = clock.report(now);
        assert_eq!(
            (r.source, r.state, r.error_bound_ns),
            (ClockSource::Realtime, ClockState::Good, 50_000)
        );
        assert!(matches!(clock.check(now, 50_000), Quality::Good(_)));
        assert!(matches!(clock.check(now, 49_999), Quality::TooCoarse(_)));
        let (local, bound) = clock.to_local((now as i64 + r.offset_ns) as u64).unwrap();
        assert_eq!(bound, 50_000);
        assert!(local.abs_diff(now) < 1_000_000, "{local} {now}");
    }
}
