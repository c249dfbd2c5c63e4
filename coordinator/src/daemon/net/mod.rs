//! gangd's connections. Each connection has a reader thread that decodes
//! frames and posts them to the coordinator's channel, and a writer thread
//! fed through a [`Link`], so the coordinator never blocks on a slow or
//! stopped peer (a front end suspended by Ctrl-Z stops reading its output).
//!
//! - agents.rs: the agent port; nodes are admitted by TLS with a
//!   certificate of the cluster CA before the coordinator hears of them.
//! - clients.rs: the front ends' Unix socket; the user is the socket's
//!   peer (SO_PEERCRED).
//! - limits.rs: what an untrusted peer may cost (caps per address and per
//!   uid, whole-handshake deadlines, backoff on accept errors).
//!
//! A malformed frame drops its connection, never the daemon.
//!
//! Clock probes (FromAgent::ClockProbe) never reach the coordinator: the
//! agent's reader thread reads t2 as it decodes one and hands the echo to
//! the writer thread (`Link::echo_clock`), which reads t3 just before it
//! writes the frame. The echo therefore waits behind frames already queued
//! for that node (a Schedule, output of nothing else: gangd sends agents
//! only small messages) but never behind the main loop. t3 is read before
//! the frame is encoded and written, t2 after it was read and decoded:
//! both errors widen the exchange, which the node's estimate allows for
//! (gang_wire::cluster_clock::Sample), never narrow it.

mod agents;
mod clients;
pub mod limits;

pub use agents::serve_agents;
pub use clients::serve_clients;

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread;

use log::warn;

use gang_wire::proto::{encode, FromAgent, FromClient, LiveJob, Message, Placement, ToAgent};
use gang_wire::time::monotonic_ns;

/// A connection's number, unique for gangd's lifetime.
pub type ConnId = u64;

/// Most bytes queued for one peer. Past it, a peer is too slow: its
/// connection is closed rather than letting gangd's memory grow.
const MAX_QUEUED: usize = 64 << 20;

/// What a connection's writer thread writes.
enum Out {
    Frame(Vec<u8>),
    /// A ClockEcho, encoded by the writer with t3 read just before.
    ClockEcho {
        seq: u64,
        t1: u64,
        t2: u64,
    },
}

/// What a queued ClockEcho counts against MAX_QUEUED (its frame is
/// smaller): a node flooding probes without reading fills its queue and
/// is closed like any other peer that does not read.
const ECHO_QUEUED: usize = 128;

/// The sending half of a connection (the node agent has its own, also
/// named Link: src/agent/link.rs).
#[derive(Clone)]
pub struct Link {
    tx: Sender<Out>,
    queued: Arc<AtomicUsize>,
    closer: Arc<dyn Fn() + Send + Sync>,
    /// CLOCK_MONOTONIC ns when the reader thread last read a frame for the
    /// coordinator (0: none yet). See [`Link::heard_ns`].
    heard: Arc<AtomicU64>,
}

impl Link {
    pub(super) fn new(
        mut sink: impl Write + Send + 'static,
        closer: Arc<dyn Fn() + Send + Sync>,
        name: String,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Out>();
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        let close = closer.clone();
        let _ = thread::Builder::new()
            .name(format!("{name}-tx"))
            .spawn(move || {
                for out in rx {
                    let frame = match out {
                        Out::Frame(frame) => {
                            q.fetch_sub(frame.len(), Ordering::Relaxed);
                            frame
                        }
                        Out::ClockEcho { seq, t1, t2 } => {
                            q.fetch_sub(ECHO_QUEUED, Ordering::Relaxed);
                            let t3 = monotonic_ns();
                            match encode(&ToAgent::ClockEcho { seq, t1, t2, t3 }) {
                                Ok(f) => f,
                                Err(_) => continue,
                            }
                        }
                    };
                    if sink.write_all(&frame).is_err() {
                        break;
                    }
                }
                close();
            });
        Self {
            tx,
            queued,
            closer,
            heard: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The reader thread read a frame it posts to the coordinator.
    pub(super) fn heard(&self) {
        self.heard.store(monotonic_ns(), Ordering::Relaxed);
    }

    /// When the peer was last heard (CLOCK_MONOTONIC ns, 0: never): the
    /// time the frame was read, not when the coordinator got to it, so a
    /// node is not taken for silent because gangd's own event loop is
    /// behind (at thousands of nodes it was, by seconds: docs/scale.md).
    /// Clock probes do not count (they never reach the coordinator), as
    /// before.
    pub fn heard_ns(&self) -> u64 {
        self.heard.load(Ordering::Relaxed)
    }

    /// Queues a message. Returns false if the connection is gone or its
    /// queue is full (it is then closed).
    pub fn send<M: Message>(&self, msg: &M) -> bool {
        let frame = match encode(msg) {
            Ok(f) => f,
            Err(e) => {
                warn!("not sending a message that cannot be framed: {e}");
                return false;
            }
        };
        self.queue(frame.len(), Out::Frame(frame))
    }

    /// Answers a node's ClockProbe `seq`, `t1` read by gangd at `t2`: the
    /// writer thread stamps t3 (see the top of this file).
    pub fn echo_clock(&self, seq: u64, t1: u64, t2: u64) -> bool {
        self.queue(ECHO_QUEUED, Out::ClockEcho { seq, t1, t2 })
    }

    fn queue(&self, len: usize, out: Out) -> bool {
        if self.queued.fetch_add(len, Ordering::Relaxed) + len > MAX_QUEUED {
            warn!(
                "a peer is not reading: more than {} MiB queued, closing it",
                MAX_QUEUED >> 20
            );
            self.close();
            return false;
        }
        self.tx.send(out).is_ok()
    }

    pub fn close(&self) {
        (self.closer)();
    }
}

/// What a node says about itself in its Hello, and its name from its
/// certificate.
#[derive(Clone, Debug)]
pub struct Hello {
    pub node: String,
    pub nr_cpus: u32,
    pub housekeeping_cpus: String,
    pub agent_version: String,
    pub jobs: Vec<LiveJob>,
    pub schedule: Vec<Vec<Placement>>,
}

/// Who is on the other end of a front-end connection (SO_PEERCRED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

/// What the connection threads tell the coordinator.
pub enum NetEvent {
    AgentJoined {
        conn: ConnId,
        link: Link,
        addr: IpAddr,
        /// gangd's own address on this connection: where the node's ranks
        /// reach gangd (the PMI server).
        local: IpAddr,
        hello: Hello,
    },
    Agent {
        conn: ConnId,
        msg: FromAgent,
    },
    AgentGone {
        conn: ConnId,
        why: String,
    },
    ClientJoined {
        conn: ConnId,
        link: Link,
        cred: Cred,
    },
    Client {
        conn: ConnId,
        msg: FromClient,
    },
    ClientGone {
        conn: ConnId,
    },
}

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_conn() -> ConnId {
    NEXT_CONN.fetch_add(1, Ordering::Relaxed)
}
