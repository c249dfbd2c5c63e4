//! gangd's connections, and the [`Link`] the coordinator sends through.
//!
//! - agents.rs + agent_conn.rs: the agent port. Every node's link lives
//!   on one event loop thread (mio): TLS 1.3 driven by hand over
//!   non-blocking sockets, frames cut by gang-wire's FrameDecoder. Nodes
//!   are admitted by TLS with a certificate of the cluster CA before the
//!   coordinator hears of them. Two threads per node (a reader and a
//!   writer, fed through a channel) were gangd's cost at scale: 2 × N
//!   threads and a channel wake-up per message per node dominated its CPU
//!   at 1024 nodes (docs/scale.md).
//! - clients.rs: the front ends' Unix socket; the user is the socket's
//!   peer (SO_PEERCRED). Front ends are few (one per `gang` command) and
//!   follow a job for hours, so they stay on a reader and a writer thread
//!   each: a thread per connection is no cost there.
//! - limits.rs: what an untrusted peer may cost (caps per address and per
//!   uid, whole-handshake deadlines, backoff on accept errors).
//!
//! A malformed frame drops its connection, never the daemon. The
//! coordinator never blocks on a peer: a `Link` queues (to the agent
//! loop, which is woken once per batch of messages, or to a front end's
//! writer thread), and a peer with more than MAX_QUEUED bytes waiting is
//! closed, logged, rather than grow gangd's memory.
//!
//! A message for many nodes (a job's JobPeers, a NodeDirectory chunk) is
//! encoded once (`Frame::new`) and the same bytes, shared (Arc), queued on
//! every link (`Link::send_frame`); only TLS is per link.
//!
//! Each agent link has two queues (agent_conn.rs): urgent frames
//! (`Message::urgent`: heartbeats; and clock echoes) go to TLS ahead of
//! the bulk ones queued before them, so a node's heartbeat never waits
//! behind a big placement's output. Only messages whose order against the
//! others does not matter jump (gang_wire::proto::messages says which);
//! frames of one queue keep their order.
//!
//! Clock probes (FromAgent::ClockProbe) never reach the coordinator: the
//! agent loop reads t2 as it decodes one and queues the echo on that
//! link's urgent queue, stamping t3 just before it hands the frame to
//! TLS. The echo never waits behind the coordinator or bulk output. t3 is read
//! before the frame is encrypted and written, t2 after it was read and
//! decoded: both errors widen the exchange, which the node's estimate
//! allows for (gang_wire::cluster_clock::Sample), never narrow it.

mod agent_conn;
mod agents;
mod clients;
pub mod limits;

pub use agents::serve_agents;
pub use clients::serve_clients;

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use log::warn;

use gang_wire::proto::{encode, FromAgent, FromClient, LiveJob, Message, Placement};
use gang_wire::time::monotonic_ns;

/// A connection's number, unique for gangd's lifetime.
pub type ConnId = u64;

/// Most bytes queued for one peer. Past it, a peer is too slow: its
/// connection is closed rather than letting gangd's memory grow.
const MAX_QUEUED: usize = 64 << 20;

/// What a queued ClockEcho counts against MAX_QUEUED (its frame is
/// smaller): a node flooding probes without reading fills its queue and
/// is closed like any other peer that does not read.
const ECHO_QUEUED: usize = 128;

/// The sending half of a connection (the node agent has its own, also
/// named Link: src/agent/link.rs).
#[derive(Clone)]
pub struct Link {
    route: Route,
    /// Bytes queued and not yet handed to the socket (or TLS).
    queued: Arc<AtomicUsize>,
    /// Set once the connection is gone: sends fail at once.
    closed: Arc<AtomicBool>,
    /// CLOCK_MONOTONIC ns when a frame for the coordinator was last read
    /// (0: none yet). See [`Link::heard_ns`].
    heard: Arc<AtomicU64>,
}

#[derive(Clone)]
enum Route {
    /// A writer thread of its own (front ends).
    Thread {
        tx: Sender<Arc<[u8]>>,
        closer: Arc<dyn Fn() + Send + Sync>,
    },
    /// The agent loop (agents.rs).
    Loop { conn: ConnId, to: Arc<ToLoop> },
}

/// What the coordinator asks of the agent loop: a frame to send, or a
/// link to close. The loop is woken when the queue turns non-empty, unless
/// corked ([`Cork`]): then once, when the last cork goes.
pub(super) struct ToLoop {
    cmds: Mutex<Vec<(ConnId, Cmd)>>,
    waker: mio::Waker,
    corked: AtomicUsize,
}

/// While held, frames queued for the agent loop do not wake it; dropped,
/// it wakes the loop once for all of them. The coordinator corks while it
/// queues a whole outbox: woken at its first frame, the loop took the
/// queue a few frames at a time and wrote a link once per frame, so a
/// plan change's Schedule and Plan to each of 4096 nodes were two writes
/// per node, 4096 frames apart (docs/scale.md, "A plan to every node").
/// Another thread's frame queued meanwhile waits for the cork too (the
/// time to queue an outbox: milliseconds at 4096 nodes).
pub struct Cork(Arc<ToLoop>);

impl Drop for Cork {
    fn drop(&mut self) {
        if self.0.corked.fetch_sub(1, Ordering::AcqRel) == 1 {
            let waiting = !self.0.cmds.lock().unwrap().is_empty();
            if waiting {
                self.0.wake();
            }
        }
    }
}

/// Corks on every agent loop an outbox goes to ([`Cork`]): each is taken
/// before the outbox's first frame to its loop, and all go when this is
/// dropped.
#[derive(Default)]
pub struct Corks(Vec<Cork>);

impl Corks {
    /// Corks `link`'s loop unless it is corked already.
    pub fn hold(&mut self, link: &Link) {
        if let Route::Loop { to, .. } = &link.route {
            if !self.0.iter().any(|c| Arc::ptr_eq(&c.0, to)) {
                self.0.extend(link.cork());
            }
        }
    }

    /// Corks the loops of all `links`.
    pub fn on(links: &[&Link]) -> Self {
        let mut corks = Corks::default();
        for link in links {
            corks.hold(link);
        }
        corks
    }
}

/// The same `frames`, in order, to every link of `links`, each frame
/// encoded once and every loop corked until all are queued: each link is
/// written once for all of them. A job's Prepare, start (its peers, PMI
/// and StartJob), kill and suspend go this way; they went uncorked, the
/// loop free to take them a few frames at a time. At 4096 nodes on
/// loopback that cost nothing measurable (docs/scale.md, "Changes wait
/// for the plan before them"): the loop took most of a fan-out at once.
pub fn fan_out(links: &[&Link], frames: &[Frame]) {
    let _corks = Corks::on(links);
    for link in links {
        for frame in frames {
            link.send_frame(frame);
        }
    }
}

pub(super) enum Cmd {
    Frame(Frame),
    Close,
    /// A connection the accepting loop hands to this one (agents.rs).
    Adopt(Box<agent_conn::AgentConn>),
}

/// An encoded message, shareable by many links, and whether it may jump
/// the bulk output (`Message::urgent`).
#[derive(Clone)]
pub struct Frame {
    pub(super) bytes: Arc<[u8]>,
    pub(super) urgent: bool,
}

impl Frame {
    /// `msg` encoded; None (logged) if it cannot be framed.
    pub fn new<M: Message>(msg: &M) -> Option<Frame> {
        match encode(msg) {
            Ok(f) => Some(Frame {
                bytes: f.into(),
                urgent: msg.urgent(),
            }),
            Err(e) => {
                warn!("not sending a message that cannot be framed: {e}");
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl ToLoop {
    pub(super) fn new(waker: mio::Waker) -> Self {
        Self {
            cmds: Mutex::new(Vec::new()),
            waker,
            corked: AtomicUsize::new(0),
        }
    }

    pub(super) fn push(&self, conn: ConnId, cmd: Cmd) {
        let mut q = self.cmds.lock().unwrap();
        let wake = q.is_empty() && self.corked.load(Ordering::Acquire) == 0;
        q.push((conn, cmd));
        drop(q);
        if wake {
            self.wake();
        }
    }

    fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            warn!("cannot wake the agent loop: {e}");
        }
    }

    /// Everything queued so far, in order.
    pub(super) fn take(&self) -> Vec<(ConnId, Cmd)> {
        std::mem::take(&mut *self.cmds.lock().unwrap())
    }
}

impl Link {
    /// A link with a writer thread of its own writing to `sink`; `closer`
    /// ends the connection.
    pub(super) fn new(
        mut sink: impl Write + Send + 'static,
        closer: Arc<dyn Fn() + Send + Sync>,
        name: String,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Arc<[u8]>>();
        let link = Self::with_route(Route::Thread {
            tx,
            closer: closer.clone(),
        });
        let (q, closed) = (link.queued.clone(), link.closed.clone());
        let _ = thread::Builder::new()
            .name(format!("{name}-tx"))
            .spawn(move || {
                for frame in rx {
                    q.fetch_sub(frame.len(), Ordering::Relaxed);
                    if sink.write_all(&frame).is_err() {
                        break;
                    }
                }
                closed.store(true, Ordering::Relaxed);
                closer();
            });
        link
    }

    /// A link of the agent loop's connection `conn`.
    pub(super) fn on_loop(conn: ConnId, to: Arc<ToLoop>) -> Self {
        Self::with_route(Route::Loop { conn, to })
    }

    fn with_route(route: Route) -> Self {
        Self {
            route,
            queued: Arc::new(AtomicUsize::new(0)),
            closed: Arc::new(AtomicBool::new(false)),
            heard: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Holds the agent loop's wake-up until the cork is dropped (see
    /// [`Cork`]); None for a link with a writer thread of its own.
    pub fn cork(&self) -> Option<Cork> {
        match &self.route {
            Route::Loop { to, .. } => {
                to.corked.fetch_add(1, Ordering::AcqRel);
                Some(Cork(to.clone()))
            }
            Route::Thread { .. } => None,
        }
    }

    /// A frame for the coordinator was read from the peer.
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
        Frame::new(msg).is_some_and(|f| self.send_frame(&f))
    }

    /// Queues a frame encoded once for many links (`Frame::new`). Returns
    /// false if the connection is gone or its queue is full (it is then
    /// closed).
    pub fn send_frame(&self, frame: &Frame) -> bool {
        if self.closed.load(Ordering::Relaxed) || !self.count(frame.len()) {
            return false;
        }
        let frame = frame.clone();
        match &self.route {
            Route::Thread { tx, .. } => tx.send(frame.bytes).is_ok(),
            Route::Loop { conn, to } => {
                to.push(*conn, Cmd::Frame(frame));
                true
            }
        }
    }

    /// Counts `len` more bytes queued; past MAX_QUEUED the peer is not
    /// reading: the link is closed (logged) and false returned.
    pub(super) fn count(&self, len: usize) -> bool {
        if self.queued.fetch_add(len, Ordering::Relaxed) + len > MAX_QUEUED {
            warn!(
                "a peer is not reading: more than {} MiB queued, closing it",
                MAX_QUEUED >> 20
            );
            self.close();
            return false;
        }
        true
    }

    /// Bytes queued for the peer and not yet handed to its socket (or
    /// TLS): what a message sent now waits behind.
    pub fn backlog(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// `len` queued bytes left the queue (written, or handed to TLS).
    pub(super) fn uncount(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::Relaxed);
    }

    /// The connection is gone (the agent loop dropped it).
    pub(super) fn set_closed(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    pub fn close(&self) {
        match &self.route {
            Route::Thread { closer, .. } => closer(),
            Route::Loop { conn, to } => {
                if !self.closed.load(Ordering::Relaxed) {
                    to.push(*conn, Cmd::Close);
                }
            }
        }
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
    /// Frames of linked agents, in the order read (the agent loop's
    /// round: agents.rs, `Post`).
    Agents(Vec<(ConnId, FromAgent)>),
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

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::proto::ToAgent;
    use mio::{Events, Poll, Token, Waker};
    use std::time::Duration;

    /// An agent loop's queue, with the poll its waker wakes.
    fn a_loop() -> (Poll, Arc<ToLoop>) {
        let poll = Poll::new().unwrap();
        let waker = Waker::new(poll.registry(), Token(1)).unwrap();
        (poll, Arc::new(ToLoop::new(waker)))
    }

    fn woken(poll: &mut Poll) -> usize {
        let mut events = Events::with_capacity(8);
        poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
        events.iter().count()
    }

    /// Links 1 and 3 on loop `a`, 2 on loop `b`.
    fn three_links(a: &Arc<ToLoop>, b: &Arc<ToLoop>) -> [Link; 3] {
        [
            Link::on_loop(1, a.clone()),
            Link::on_loop(2, b.clone()),
            Link::on_loop(3, a.clone()),
        ]
    }

    #[test]
    fn a_fan_out_queues_each_links_frames_together_and_wakes_each_loop_once() {
        let ((mut pa, a), (mut pb, b)) = (a_loop(), a_loop());
        let links = three_links(&a, &b);
        let frames: Vec<Frame> = (0..3)
            .map(|seq| Frame::new(&ToAgent::Heartbeat { seq }).unwrap())
            .collect();
        // Corked: nothing queued for these loops wakes them.
        let corks = Corks::on(&links.iter().collect::<Vec<_>>());
        assert_eq!(corks.0.len(), 2);
        assert!(links[0].send_frame(&frames[0]));
        assert_eq!((woken(&mut pa), woken(&mut pb)), (0, 0), "corked");
        drop(corks);
        assert_eq!((woken(&mut pa), woken(&mut pb)), (1, 0));
        a.take();

        fan_out(&links.iter().collect::<Vec<_>>(), &frames);
        assert_eq!((woken(&mut pa), woken(&mut pb)), (1, 1));
        let order = |q: Vec<(ConnId, Cmd)>| -> Vec<(ConnId, usize)> {
            q.into_iter()
                .map(|(c, cmd)| match cmd {
                    Cmd::Frame(f) => (c, frames.iter().position(|g| g.bytes == f.bytes).unwrap()),
                    _ => panic!("not a frame"),
                })
                .collect()
        };
        assert_eq!(
            order(a.take()),
            [(1, 0), (1, 1), (1, 2), (3, 0), (3, 1), (3, 2)]
        );
        assert_eq!(order(b.take()), [(2, 0), (2, 1), (2, 2)]);
    }

    #[test]
    fn an_outbox_over_two_loops_corks_each_once_and_wakes_each_once_at_the_end() {
        let ((mut pa, a), (mut pb, b)) = (a_loop(), a_loop());
        let links = three_links(&a, &b);
        let mut corks = Corks::default();
        for (i, link) in links.iter().enumerate() {
            corks.hold(link);
            assert!(link.send(&ToAgent::Heartbeat { seq: i as u64 }));
        }
        assert_eq!(corks.0.len(), 2, "one cork per loop");
        assert_eq!((woken(&mut pa), woken(&mut pb)), (0, 0), "corked");
        drop(corks);
        assert_eq!((woken(&mut pa), woken(&mut pb)), (1, 1));
        assert_eq!(a.take().len(), 2);
        assert_eq!(b.take().len(), 1);
        // Uncorked, a frame wakes its loop at once.
        assert!(links[1].send(&ToAgent::Heartbeat { seq: 9 }));
        assert_eq!((woken(&mut pa), woken(&mut pb)), (0, 1));
    }
}
