//! The sending half of the connection to gangd, shared by every thread that
//! has something to say (the reader answering requests, rank output pumps,
//! reapers, the freeze waiter, traces). One frame is written at a time,
//! under a lock, so frames never interleave.
//!
//! Bulk (rank output, trace chunks: `send_bulk`) gives way to everything
//! else: a bulk sender waits while an answer gangd's switch or heartbeat
//! waits for (Frozen, Running, Heartbeat...) or a clock probe (whose
//! round trip is the clock's error bound) is queued for the lock, so
//! such an answer waits for at most the one bulk frame being written.
//!
//! While gangd is away nothing is lost that matters later: rank exits are
//! queued, and rank output is kept up to OUTPUT_BUFFER bytes per job (the
//! oldest dropped first); both are sent after the next Welcome, output
//! first, so a rank's output still comes before its exit. Answers to
//! requests (Frozen, Running, Heartbeat...) belong to the lost connection
//! and are dropped.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gang_wire::proto::tls::{Session, SessionWriter};

use gang_wire::proto::{write_frame, FrameError, FromAgent, JobId};
use log::{debug, info, warn};

/// Output kept per job while gangd is away.
pub const OUTPUT_BUFFER: usize = 1 << 20;

#[derive(Default)]
struct JobOutput {
    chunks: VecDeque<FromAgent>,
    bytes: usize,
    /// Bytes dropped (oldest first) since gangd went away.
    dropped: u64,
}

#[derive(Default)]
struct State {
    /// Set after a Welcome, cleared when the connection is lost.
    conn: Option<Arc<Session>>,
    exits: Vec<FromAgent>,
    output: BTreeMap<JobId, JobOutput>,
}

#[derive(Default)]
pub struct Link {
    state: Mutex<State>,
    /// Senders of anything but bulk waiting for or holding the lock.
    urgent: AtomicUsize,
}

fn output_len(msg: &FromAgent) -> usize {
    match msg {
        FromAgent::RankOutput { data, .. } => data.0.len(),
        _ => 0,
    }
}

impl Link {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_connected(&self) -> bool {
        self.lock().conn.is_some()
    }

    /// Sends `msg` now if gangd is there, else keeps it for later if it is
    /// a rank's output or exit. Returns whether it was sent.
    pub fn send(&self, msg: FromAgent) -> bool {
        self.urgent.fetch_add(1, Ordering::SeqCst);
        let sent = self.write(msg);
        self.urgent.fetch_sub(1, Ordering::SeqCst);
        sent
    }

    /// `send` for bulk: first lets every other sender go.
    pub fn send_bulk(&self, msg: FromAgent) -> bool {
        while self.urgent.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        self.write(msg)
    }

    fn write(&self, msg: FromAgent) -> bool {
        let mut state = self.lock();
        if let Some(conn) = &state.conn {
            match write_frame(&mut SessionWriter(conn.clone()), &msg) {
                Ok(()) => return true,
                Err(e) => {
                    warn!("writing to gangd: {e}: dropping the connection");
                    // The reader sees the end of the stream and reconnects.
                    conn.close();
                    state.conn = None;
                }
            }
        }
        keep(&mut state, msg);
        false
    }

    /// After a Welcome: sends what was kept while gangd was away (output,
    /// then exits), then lets every sender through. On a write error the
    /// rest stays kept and the connection is not taken.
    pub fn attach(&self, conn: Arc<Session>) -> Result<(), FrameError> {
        let mut state = self.lock();
        let mut w = SessionWriter(conn.clone());
        let (mut sent_output, mut sent_exits) = (0usize, 0usize);
        while let Some((&job, out)) = state.output.iter_mut().next() {
            if out.dropped > 0 {
                info!(
                    "job {job}: {} bytes of output were dropped while gangd was away (buffer of {OUTPUT_BUFFER} bytes)",
                    out.dropped
                );
                out.dropped = 0;
            }
            while let Some(msg) = out.chunks.front() {
                write_frame(&mut w, msg)?;
                out.bytes -= output_len(msg);
                out.chunks.pop_front();
                sent_output += 1;
            }
            state.output.remove(&job);
        }
        while let Some(msg) = state.exits.first() {
            write_frame(&mut w, msg)?;
            state.exits.remove(0);
            sent_exits += 1;
        }
        if sent_output + sent_exits > 0 {
            info!("sent what was kept while gangd was away: {sent_output} output chunks, {sent_exits} rank exits");
        }
        state.conn = Some(conn);
        Ok(())
    }

    /// The connection is over: from now on output and exits are kept.
    pub fn detach(&self) {
        if let Some(conn) = self.lock().conn.take() {
            conn.close();
        }
    }
}

fn keep(state: &mut State, msg: FromAgent) {
    match msg {
        FromAgent::RankExited { .. } => state.exits.push(msg),
        FromAgent::RankOutput { job, .. } => {
            let out = state.output.entry(job).or_default();
            out.bytes += output_len(&msg);
            out.chunks.push_back(msg);
            while out.bytes > OUTPUT_BUFFER {
                let Some(old) = out.chunks.pop_front() else {
                    break;
                };
                let n = output_len(&old);
                out.bytes -= n;
                if out.dropped == 0 {
                    warn!("job {job}: output beyond {OUTPUT_BUFFER} bytes while gangd is away: dropping the oldest");
                }
                out.dropped += n as u64;
            }
        }
        other => debug!("gangd is away: dropped {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::proto::tls::testing::{session_pair, TestCa};
    use gang_wire::proto::tls::SessionReader;
    use gang_wire::proto::{read_frame, ExitStatus, Stream};

    fn output(job: u64, byte: u8, len: usize) -> FromAgent {
        FromAgent::RankOutput {
            job: JobId(job),
            rank: 0,
            stream: Stream::Stdout,
            data: vec![byte; len].into(),
        }
    }

    /// A TLS connection: (the agent's end, a reader on gangd's end).
    fn pair(ca: &TestCa) -> (Arc<Session>, SessionReader) {
        let (node, gangd) = session_pair(&ca.server(), &ca.client("link-node"));
        (
            node,
            SessionReader {
                session: gangd,
                timeout: None,
            },
        )
    }

    #[test]
    fn kept_output_is_capped_per_job_and_sent_before_the_exits() {
        let link = Link::new();
        assert!(!link.is_connected());
        let chunk = 64 << 10;
        // 20 chunks of job 1 (1.25 MiB): the first 4 go.
        for i in 0..20u8 {
            assert!(!link.send(output(1, i, chunk)));
        }
        link.send(output(2, 200, 10));
        let exit = FromAgent::RankExited {
            job: JobId(1),
            rank: 0,
            status: ExitStatus::Exited(0),
        };
        link.send(exit.clone());
        link.send(FromAgent::Heartbeat { seq: 1, mono_ns: 1 });

        let ca = TestCa::new("link");
        let (agent_end, mut gangd_end) = pair(&ca);
        link.attach(agent_end).unwrap();
        assert!(link.is_connected());
        let mut got = Vec::new();
        for _ in 0..18 {
            got.push(read_frame::<FromAgent>(&mut gangd_end).unwrap().unwrap());
        }
        let first_bytes: Vec<u8> = got[..16]
            .iter()
            .map(|m| match m {
                FromAgent::RankOutput { data, job, .. } => {
                    assert_eq!(*job, JobId(1));
                    data.0[0]
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(first_bytes, (4..20).collect::<Vec<u8>>());
        assert_eq!(got[16], output(2, 200, 10));
        assert_eq!(got[17], exit, "the exit comes after the output");

        // Connected: sent at once; the heartbeat of the lost link was dropped.
        assert!(link.send(FromAgent::Heartbeat { seq: 2, mono_ns: 5 }));
        assert_eq!(
            read_frame::<FromAgent>(&mut gangd_end).unwrap().unwrap(),
            FromAgent::Heartbeat { seq: 2, mono_ns: 5 }
        );
        link.detach();
        assert!(!link.is_connected());
        assert!(read_frame::<FromAgent>(&mut gangd_end).unwrap().is_none());
    }

    #[test]
    fn an_answer_waits_for_at_most_the_bulk_frame_being_written() {
        use std::sync::atomic::AtomicBool;
        let ca = TestCa::new("link-bulk");
        let (agent_end, mut gangd_end) = pair(&ca);
        let link = Arc::new(Link::new());
        link.attach(agent_end).unwrap();
        // gangd reads slowly: the bulk sender is held in its writes.
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if read_frame::<FromAgent>(&mut gangd_end).unwrap().is_none() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        };
        let done = Arc::new(AtomicUsize::new(0));
        let bulk = {
            let (link, done, stop) = (link.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    link.send_bulk(output(1, 0, 64 << 10));
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        while done.load(Ordering::SeqCst) < 40 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut waits = Vec::new();
        for seq in 0..7 {
            let before = done.load(Ordering::SeqCst);
            assert!(link.send(FromAgent::Heartbeat { seq, mono_ns: 0 }));
            waits.push(done.load(Ordering::SeqCst) - before);
        }
        stop.store(true, Ordering::SeqCst);
        link.detach();
        bulk.join().unwrap();
        reader.join().unwrap();
        // The frame being written when the answer came, and one that
        // checked for answers just before it (the median: this thread may
        // be preempted between its two looks at `done`).
        waits.sort();
        assert!(waits[3] <= 2, "answers waited for {waits:?} bulk frames");
    }
}
