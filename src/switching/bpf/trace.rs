//! The BPF mode's trace sessions: a client's `trace` request records the
//! scheduler's events (ring buffer `events`) for a number of seconds, then
//! is answered with them.
//!
//! One session at a time (the ring buffer is the scheduler's, every
//! session would see every event); a session keeps at most
//! MAX_TRACE_EVENTS. The sessions only hold and cut events: turning the
//! BPF side's tracing on and off is the caller's (switching/bpf/mod.rs).
//!
//! Known fault: events lost by a full ring buffer are only counted (the
//! `events_lost` statistic), not marked in the trace.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use crate::control::{RawTrace, Response};
use gang_wire::trace::{TraceEvent, TraceMeta};

/// Longest trace a client may ask for, and most events one trace keeps
/// (~40 bytes each: a trace holds at most ~40 MB of the root daemon's
/// memory; one trace at a time).
pub const MAX_TRACE_SECONDS: f64 = 600.0;
pub const MAX_TRACE_EVENTS: usize = 1_000_000;

struct TraceSession {
    deadline: Instant,
    meta: TraceMeta,
    events: Vec<TraceEvent>,
    reply: Sender<Response>,
}

/// The traces being recorded.
#[derive(Default)]
pub struct TraceSessions {
    open: Vec<TraceSession>,
}

impl TraceSessions {
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Opens a session of `seconds` from `now`, or says why not (the
    /// caller answers the client with it).
    pub fn start(
        &mut self,
        seconds: f64,
        meta: TraceMeta,
        reply: Sender<Response>,
        now: Instant,
    ) -> Result<(), String> {
        if !self.open.is_empty() {
            return Err(
                "a trace is already being recorded on this node; try again when it ends".into(),
            );
        }
        if !(seconds > 0.0 && seconds <= MAX_TRACE_SECONDS) {
            return Err(format!("seconds must be in (0, {MAX_TRACE_SECONDS}]"));
        }
        self.open.push(TraceSession {
            deadline: now + Duration::from_secs_f64(seconds),
            meta,
            events: Vec::new(),
            reply,
        });
        Ok(())
    }

    /// Adds the events of `incoming` to every open session (those from
    /// before a session began are not its) and returns the sessions over at
    /// `now`, to be finished with `finish`.
    pub fn collect(&mut self, incoming: Vec<TraceEvent>, now: Instant) -> Vec<FinishedTrace> {
        for t in &mut self.open {
            let room = MAX_TRACE_EVENTS.saturating_sub(t.events.len());
            t.events.extend(
                incoming
                    .iter()
                    .filter(|e| e.ts_ns >= t.meta.start_ns)
                    .take(room)
                    .cloned(),
            );
        }
        let (done, open): (Vec<_>, Vec<_>) = self.open.drain(..).partition(|t| now >= t.deadline);
        self.open = open;
        done.into_iter().map(FinishedTrace).collect()
    }

    /// Answers every open session with `why` (the scheduler stops).
    pub fn abort(&mut self, why: &str) {
        for t in self.open.drain(..) {
            let _ = t.reply.send(Response::error(why));
        }
    }
}

/// A session whose time is over, to be answered.
pub struct FinishedTrace(TraceSession);

impl FinishedTrace {
    /// Answers the client with the trace ending at `end_ns`; `names` are
    /// the gangs known now (those that joined during the trace are named
    /// too).
    pub fn finish(self, end_ns: u64, names: impl IntoIterator<Item = (i32, String)>) {
        let mut t = self.0;
        t.meta.end_ns = end_ns;
        for (id, name) in names {
            t.meta.gang_names.entry(id).or_insert(name);
        }
        let trace = RawTrace {
            meta: t.meta,
            events: t.events,
        };
        let _ = t.reply.send(Response {
            ok: true,
            trace: Some(trace),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn meta(start_ns: u64) -> TraceMeta {
        TraceMeta {
            nr_cpus: 2,
            start_ns,
            ..Default::default()
        }
    }

    fn event(ts_ns: u64) -> TraceEvent {
        TraceEvent::switch(ts_ns, 1, 0, 0)
    }

    #[test]
    fn one_trace_at_a_time_of_a_sane_length() {
        let mut s = TraceSessions::default();
        let (tx, _rx) = mpsc::channel();
        let now = Instant::now();
        assert!(s.start(0.0, meta(0), tx.clone(), now).is_err());
        assert!(s.start(601.0, meta(0), tx.clone(), now).is_err());
        s.start(1.0, meta(0), tx.clone(), now).unwrap();
        let e = s.start(1.0, meta(0), tx, now).unwrap_err();
        assert!(e.contains("already being recorded"), "{e}");
    }

    #[test]
    fn a_trace_keeps_the_events_from_its_start_and_ends_at_its_deadline() {
        let mut s = TraceSessions::default();
        let (tx, rx) = mpsc::channel();
        let now = Instant::now();
        s.start(1.0, meta(100), tx, now).unwrap();
        assert!(s.collect(vec![event(50), event(150)], now).is_empty());
        let done = s.collect(vec![event(200)], now + Duration::from_secs(1));
        assert_eq!(done.len(), 1);
        assert!(s.is_empty());
        for d in done {
            d.finish(300, [(3, "job3".to_string())]);
        }
        let r = rx.recv().unwrap();
        let t = r.trace.unwrap();
        let ts: Vec<u64> = t.events.iter().map(|e| e.ts_ns).collect();
        assert_eq!(ts, vec![150, 200]);
        assert_eq!((t.meta.start_ns, t.meta.end_ns), (100, 300));
        assert_eq!(t.meta.gang_names[&3], "job3");
    }

    #[test]
    fn an_aborted_trace_is_answered_with_the_reason() {
        let mut s = TraceSessions::default();
        let (tx, rx) = mpsc::channel();
        s.start(5.0, meta(0), tx, Instant::now()).unwrap();
        s.abort("scheduler stopped during the trace");
        let r = rx.recv().unwrap();
        assert!(!r.ok);
        assert!(s.is_empty());
    }
}
