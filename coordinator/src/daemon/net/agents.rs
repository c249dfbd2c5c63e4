//! The agent port: a few event loop threads (mio, edge-triggered; gangd's
//! `--agent-loops`, 1 by default), each for the links handed to it, from the TLS
//! handshake to the end of the connection (agent_conn.rs holds one
//! connection's state machine).
//!
//! A loop waits on its agent sockets and a waker, the first also on the
//! listener. An accept takes a place among the handshakes in flight (capped per
//! address and in all, limits.rs) or is closed at once; each connection
//! must finish its TLS handshake and send its Hello before
//! limits::HANDSHAKE_DEADLINE (the loop's timeout is the nearest one,
//! and only the connections still handshaking are checked). Only then
//! does the coordinator hear of it; every refusal is a log line, and the
//! peer is told why (a TLS alert or ToAgent::Refused).
//!
//! The coordinator's frames and closes come through `ToLoop` (mod.rs):
//! the waker fires once per batch, the loop takes the whole batch, queues
//! each frame on its connection and writes every connection it touched.
//! A connection that ends (its peer, an error, or gangd's close) is
//! posted as AgentGone once it had been posted as AgentJoined.
//!
//! Frames go to the coordinator a round of the loop at a time (`Post`):
//! the frames of every connection read in one poll round are one
//! NetEvent::Agents (at most AGENTS_BATCH), so the coordinator wakes and
//! runs its timers once per round, not once per frame (at 4096 nodes,
//! thousands of frames a second); any other event is posted after the
//! frames read before it, so each connection's order holds.
//!
//! Known faults: accept errors (out of descriptors) pause accepting with
//! a growing backoff, as the accept thread did, without stopping the
//! links already up; `post` blocking on the coordinator's full queue
//! stops every link for that time (agent_conn.rs).
//! The coordinator's queue is bounded in events, and an event now holds
//! up to AGENTS_BATCH frames: while the coordinator is stalled, up to
//! 256× more frames can wait than when each frame was an event (an
//! authenticated node's flood; bounding the queue in frames is to do).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Shutdown};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use log::warn;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};

use super::agent_conn::{AgentConn, Ctx, End};
use super::limits::{self, AcceptBackoff, Caps, Throttle};
use super::{next_conn, Cmd, ConnId, NetEvent, ToLoop};
use gang_wire::proto::tls::{rustls, ServerTls};
use gang_wire::proto::FromAgent;

const WAKER: Token = Token(usize::MAX);
/// Frames posted together at most (the coordinator's queue is bounded in
/// events; this bounds what one event holds).
const AGENTS_BATCH: usize = 256;
const LISTENER: Token = Token(usize::MAX - 1);

/// Accepts agents on `listener` and serves them in `loops` event loop
/// threads (at least one); every event goes through `post`.
///
/// The first loop accepts, takes the connection's place among the
/// handshakes (the caps are the port's, not a loop's) and hands it to the
/// loops in turn; a loop owns its connections from the handshake to the
/// end, so a connection's frames and events keep their order. At 4096
/// nodes one loop's writes of a plan took 35-60 ms; loops on other cores
/// share them (docs/scale.md, "A plan's own way": on 2 cores shared with
/// the fake agents, no faster).
pub fn serve_agents(
    listener: std::net::TcpListener,
    tls: Arc<ServerTls>,
    post: impl Fn(NetEvent) + Send + Sync + Clone + 'static,
    loops: usize,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = Some(TcpListener::from_std(listener));
    let mut polls = vec![];
    for _ in 0..loops.max(1) {
        let poll = Poll::new().context("creating an agent loop's poll")?;
        let to_loop = Arc::new(ToLoop::new(Waker::new(poll.registry(), WAKER)?));
        polls.push((poll, to_loop));
    }
    let shards: Arc<[Arc<ToLoop>]> = polls.iter().map(|(_, q)| q.clone()).collect();
    // The port's places, held by a connection until its Hello in whichever
    // loop it went to.
    let caps = Caps::new(limits::HANDSHAKES_PER_ADDR, limits::HANDSHAKES_TOTAL);
    for (i, (poll, to_loop)) in polls.into_iter().enumerate() {
        let mut listener = listener.take();
        if let Some(l) = listener.as_mut() {
            poll.registry().register(l, LISTENER, Interest::READABLE)?;
        }
        let mut lp = AgentLoop {
            poll,
            listener,
            tls: tls.clone(),
            to_loop,
            shards: shards.clone(),
            conns: HashMap::new(),
            handshaking: HashSet::new(),
            caps: caps.clone(),
            backoff: AcceptBackoff::new("agent"),
            accept_paused_until: None,
            over_log: Throttle::new(Duration::from_secs(5)),
            buf: vec![0u8; 64 << 10],
        };
        let post = post.clone();
        thread::Builder::new()
            .name(format!("agents-{i}"))
            .spawn(move || lp.run(&post))?;
    }
    Ok(())
}

struct AgentLoop {
    poll: Poll,
    /// The first loop's: it accepts for all.
    listener: Option<TcpListener>,
    tls: Arc<ServerTls>,
    to_loop: Arc<ToLoop>,
    /// Every loop's queue (this one's too), to hand connections to.
    shards: Arc<[Arc<ToLoop>]>,
    conns: HashMap<ConnId, AgentConn>,
    /// Connections not yet linked: the only ones with a deadline.
    handshaking: HashSet<ConnId>,
    caps: Caps<IpAddr>,
    backoff: AcceptBackoff,
    accept_paused_until: Option<Instant>,
    over_log: Throttle,
    buf: Vec<u8>,
}

impl AgentLoop {
    fn run(&mut self, to: &dyn Fn(NetEvent)) {
        let post = &Post::new(to);
        let mut events = Events::with_capacity(1024);
        loop {
            post.flush();
            let timeout = self.timeout(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    warn!("the agent loop's poll failed: {e}");
                    thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.commands(post),
                    LISTENER => self.accept(),
                    Token(t) => {
                        let closed = ev.is_read_closed() || ev.is_error();
                        self.ready(t as ConnId, closed, post)
                    }
                }
            }
            let now = Instant::now();
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                self.accept();
            }
            self.expire(now);
        }
    }

    /// Until the nearest handshake deadline or the end of an accept pause.
    fn timeout(&self, now: Instant) -> Option<Duration> {
        self.handshaking
            .iter()
            .filter_map(|c| self.conns.get(c).and_then(|c| c.deadline))
            .chain(self.accept_paused_until)
            .min()
            .map(|t| t.saturating_duration_since(now) + Duration::from_millis(1))
    }

    fn accept(&mut self) {
        if self.accept_paused_until.is_some() {
            return;
        }
        if let Some(listener) = self.listener.take() {
            self.accept_from(&listener);
            self.listener = Some(listener);
        }
    }

    fn accept_from(&mut self, listener: &TcpListener) {
        loop {
            let (sock, peer) = match listener.accept() {
                Ok(s) => {
                    self.backoff.succeeded();
                    s
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let pause = self.backoff.failed(&e);
                    self.accept_paused_until = Some(Instant::now() + pause);
                    return;
                }
            };
            let held = match self.caps.admit(peer.ip()) {
                Ok(h) => h,
                Err(over) => {
                    if let Some(more) = self.over_log.allow(Instant::now()) {
                        warn!("agent connection from {peer} closed at once: {over} in their handshakes (and {more} more like it since the last line)");
                    }
                    let _ = sock.shutdown(Shutdown::Both);
                    continue;
                }
            };
            let tls = match rustls::ServerConnection::new(self.tls.config()) {
                Ok(t) => t,
                Err(e) => {
                    warn!("agent connection from {peer} refused: TLS server: {e}");
                    continue;
                }
            };
            // Switch messages are small and latency-bound.
            let _ = sock.set_nodelay(true);
            // Clock probes are stamped at their arrival (agent_conn.rs).
            let _ = gang_wire::rx_stamp::enable(sock.as_raw_fd());
            let conn = next_conn();
            let c = AgentConn::new(conn, sock, peer, tls, held, Instant::now());
            let shard = &self.shards[conn as usize % self.shards.len()];
            if Arc::ptr_eq(shard, &self.to_loop) {
                self.adopt(conn, c);
            } else {
                shard.push(conn, Cmd::Adopt(Box::new(c)));
            }
        }
    }

    /// A connection accepted for this loop: polled from now on (a socket
    /// with data waiting is ready at once: the poll is edge-triggered, but
    /// registering reports what is there).
    fn adopt(&mut self, conn: ConnId, mut c: AgentConn) {
        if let Err(e) = self.poll.registry().register(
            &mut c.sock,
            Token(conn as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            warn!(
                "agent connection from {} dropped: cannot poll it: {e}",
                c.peer
            );
            return;
        }
        self.conns.insert(conn, c);
        self.handshaking.insert(conn);
    }

    /// A connection's socket is ready: read what came (the loop is
    /// edge-triggered: until a read returns less than it asked for, or to
    /// the end if the peer `closed`), write what waits.
    fn ready(&mut self, conn: ConnId, closed: bool, post: &Post) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let mut cx = Ctx {
            post,
            to_loop: &self.to_loop,
            buf: &mut self.buf,
        };
        let step = c.on_readable(&mut cx, closed);
        self.settle(conn, step, post);
    }

    /// The coordinator's frames and closes, in order; then every touched
    /// connection written.
    fn commands(&mut self, post: &Post) {
        let mut touched = HashSet::new();
        for (conn, cmd) in self.to_loop.take() {
            let cmd = match cmd {
                Cmd::Adopt(c) => {
                    self.adopt(conn, *c);
                    continue;
                }
                cmd => cmd,
            };
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            match cmd {
                Cmd::Frame(frame) => {
                    c.queue(frame);
                    touched.insert(conn);
                }
                Cmd::Close => {
                    touched.remove(&conn);
                    c.close();
                    self.settle(conn, Err(End::Gone("closed by gangd".into())), post);
                }
                Cmd::Adopt(_) => unreachable!("adopted above"),
            }
        }
        for conn in touched {
            if let Some(c) = self.conns.get_mut(&conn) {
                let step = c.flush();
                self.settle(conn, step, post);
            }
        }
    }

    /// After a step: drop an ended connection (logged or posted).
    fn settle(&mut self, conn: ConnId, step: Result<(), End>, post: &Post) {
        let Err(end) = step else {
            if self.conns.get(&conn).is_some_and(|c| c.is_linked()) {
                self.handshaking.remove(&conn);
            }
            return;
        };
        let Some(mut c) = self.conns.remove(&conn) else {
            return;
        };
        self.handshaking.remove(&conn);
        let _ = self.poll.registry().deregister(&mut c.sock);
        match end {
            End::Refused(why) => warn!("agent connection from {} refused: {why}", c.peer),
            End::Gone(why) => {
                if let Some(link) = c.link() {
                    link.set_closed();
                }
                post.event(NetEvent::AgentGone { conn, why });
            }
        }
    }

    /// Connections past their handshake deadline are refused.
    fn expire(&mut self, now: Instant) {
        let late: Vec<ConnId> = self
            .handshaking
            .iter()
            .copied()
            .filter(|c| {
                self.conns
                    .get(c)
                    .is_some_and(|c| c.deadline.is_some_and(|d| now >= d))
            })
            .collect();
        for conn in late {
            if let Some(mut c) = self.conns.remove(&conn) {
                self.handshaking.remove(&conn);
                let _ = self.poll.registry().deregister(&mut c.sock);
                let why = c.deadline_reason();
                c.close();
                warn!("agent connection from {} refused: {why}", c.peer);
            }
        }
    }
}

/// The loop's way to the coordinator: frames gathered over a round,
/// anything else at once after them.
pub struct Post<'a> {
    to: &'a dyn Fn(NetEvent),
    frames: RefCell<Vec<(ConnId, FromAgent)>>,
}

impl<'a> Post<'a> {
    fn new(to: &'a dyn Fn(NetEvent)) -> Self {
        Self {
            to,
            frames: RefCell::new(Vec::new()),
        }
    }

    /// A frame read from a linked connection.
    pub fn frame(&self, conn: ConnId, msg: FromAgent) {
        let full = {
            let mut f = self.frames.borrow_mut();
            f.push((conn, msg));
            f.len() >= AGENTS_BATCH
        };
        if full {
            self.flush();
        }
    }

    /// Any other event, after the frames read before it.
    pub fn event(&self, ev: NetEvent) {
        self.flush();
        (self.to)(ev);
    }

    /// The frames gathered so far, as one event.
    fn flush(&self) {
        let frames = std::mem::take(&mut *self.frames.borrow_mut());
        if !frames.is_empty() {
            (self.to)(NetEvent::Agents(frames));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::proto::tls::testing::{connect, TestCa};
    use gang_wire::proto::tls::{Session, SessionReader};
    use gang_wire::proto::{encode, read_frame, FromAgent, ToAgent, HEADER_LEN, PROTOCOL_VERSION};
    use std::sync::mpsc::{self, Receiver};

    fn start(ca: &TestCa) -> (std::net::SocketAddr, Receiver<NetEvent>) {
        start_stalling(ca, Duration::ZERO)
    }

    /// As `start`, but the first post of frames stalls the loop for
    /// `stall` (a coordinator whose queue is full).
    fn start_stalling(ca: &TestCa, stall: Duration) -> (std::net::SocketAddr, Receiver<NetEvent>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::sync_channel(1024);
        let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let post = move |ev| {
            if matches!(ev, NetEvent::Agents(_))
                && !stalled.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                std::thread::sleep(stall);
            }
            let _ = tx.send(ev);
        };
        serve_agents(listener, ca.server(), post, 2).unwrap();
        (addr, rx)
    }

    fn hello() -> FromAgent {
        FromAgent::Hello {
            nr_cpus: 4,
            housekeeping_cpus: "0".into(),
            agent_version: "test".into(),
            jobs: vec![],
            schedule: vec![],
        }
    }

    fn next(rx: &Receiver<NetEvent>) -> NetEvent {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("an event within 10 s")
    }

    fn read(session: &Arc<Session>) -> ToAgent {
        let mut r = SessionReader {
            session: session.clone(),
            timeout: Some(Duration::from_secs(10)),
        };
        read_frame::<ToAgent>(&mut r).unwrap().unwrap()
    }

    /// A probe that waited in the socket while the loop was stalled is
    /// stamped (t2) when the kernel received it: the wait is gangd's
    /// turnaround (t3 − t2), which the node subtracts, not part of the
    /// sample's round trip.
    #[test]
    fn a_probe_that_waited_for_a_busy_loop_is_stamped_at_its_arrival() {
        let ca = TestCa::new("agent-loop-stamp");
        let (addr, rx) = start_stalling(&ca, Duration::from_millis(300));
        let s = connect(addr, &ca.client("n1")).unwrap();
        s.write_all(&encode(&hello()).unwrap()).unwrap();
        assert!(matches!(next(&rx), NetEvent::AgentJoined { .. }));
        // A first probe: the loop is free.
        let t1 = gang_wire::time::monotonic_ns();
        s.write_all(&encode(&FromAgent::ClockProbe { seq: 1, t1 }).unwrap())
            .unwrap();
        assert!(matches!(read(&s), ToAgent::ClockEcho { seq: 1, .. }));
        // A frame for the coordinator: its post stalls the loop 300 ms,
        // and a probe sent meanwhile waits in the socket.
        s.write_all(&encode(&FromAgent::Heartbeat { seq: 1, mono_ns: 9 }).unwrap())
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t1 = gang_wire::time::monotonic_ns();
        s.write_all(&encode(&FromAgent::ClockProbe { seq: 2, t1 }).unwrap())
            .unwrap();
        let ToAgent::ClockEcho { seq: 2, t2, t3, .. } = read(&s) else {
            panic!("expected the second echo")
        };
        let turnaround = t3 - t2;
        assert!(
            turnaround >= 150_000_000,
            "answered {turnaround} ns after t2"
        );
        // Stamped when read, t2 would be ~250 ms after t1.
        assert!(t2 - t1 < 100_000_000, "t2 {} ns after t1", t2 - t1);
    }

    #[test]
    fn a_node_is_linked_after_tls_and_its_hello_and_its_probes_never_reach_the_coordinator() {
        let ca = TestCa::new("agent-loop-link");
        let (addr, rx) = start(&ca);
        let s = connect(addr, &ca.client("n1")).unwrap();
        s.write_all(&encode(&hello()).unwrap()).unwrap();
        let NetEvent::AgentJoined {
            conn, link, hello, ..
        } = next(&rx)
        else {
            panic!("expected AgentJoined")
        };
        assert_eq!(hello.node, "n1", "the name is the certificate's");
        // A probe is answered by the loop: t2 ≤ t3, both gangd's.
        s.write_all(&encode(&FromAgent::ClockProbe { seq: 5, t1: 42 }).unwrap())
            .unwrap();
        match read(&s) {
            ToAgent::ClockEcho { seq, t1, t2, t3 } => {
                assert_eq!((seq, t1), (5, 42));
                assert!(t2 > 0 && t2 <= t3);
            }
            other => panic!("{other:?}"),
        }
        // Anything else is the coordinator's, and the node is heard.
        s.write_all(&encode(&FromAgent::Heartbeat { seq: 1, mono_ns: 9 }).unwrap())
            .unwrap();
        match next(&rx) {
            NetEvent::Agents(frames) => {
                assert_eq!(frames.len(), 1);
                assert_eq!(frames[0].0, conn);
                assert!(matches!(frames[0].1, FromAgent::Heartbeat { seq: 1, .. }));
            }
            _ => panic!("expected the heartbeat"),
        }
        assert!(link.heard_ns() > 0);
        // The coordinator's frames arrive in order; its close ends the link.
        for seq in 1..=3 {
            assert!(link.send(&ToAgent::Heartbeat { seq }));
        }
        for seq in 1..=3 {
            assert!(matches!(read(&s), ToAgent::Heartbeat { seq: s } if s == seq));
        }
        link.close();
        match next(&rx) {
            NetEvent::AgentGone { conn: c, .. } => assert_eq!(c, conn),
            _ => panic!("expected AgentGone"),
        }
        assert!(!link.send(&ToAgent::Heartbeat { seq: 4 }), "gone");
    }

    #[test]
    fn frames_read_together_reach_the_coordinator_as_one_event_after_the_join_and_before_the_end() {
        let ca = TestCa::new("agent-loop-batch");
        let (addr, rx) = start(&ca);
        let s = connect(addr, &ca.client("n4")).unwrap();
        // The Hello and five heartbeats in one write; then the close.
        let mut bytes = encode(&hello()).unwrap();
        for seq in 1..=5 {
            bytes.extend(encode(&FromAgent::Heartbeat { seq, mono_ns: 1 }).unwrap());
        }
        s.write_all(&bytes).unwrap();
        let conn = match next(&rx) {
            NetEvent::AgentJoined { conn, .. } => conn,
            _ => panic!("expected AgentJoined first"),
        };
        let mut seqs = vec![];
        while seqs.len() < 5 {
            match next(&rx) {
                NetEvent::Agents(frames) => {
                    for (c, msg) in frames {
                        assert_eq!(c, conn);
                        let FromAgent::Heartbeat { seq, .. } = msg else {
                            panic!("{msg:?}")
                        };
                        seqs.push(seq);
                    }
                }
                _ => panic!("expected the heartbeats before anything else"),
            }
        }
        assert_eq!(seqs, [1, 2, 3, 4, 5], "in the order sent");
        drop(s);
        assert!(matches!(next(&rx), NetEvent::AgentGone { conn: c, .. } if c == conn));
    }

    #[test]
    fn the_handshake_cap_of_an_address_holds_across_the_loops() {
        use std::io::Read;
        let ca = TestCa::new("agent-loop-caps");
        let (addr, _rx) = start(&ca);
        // Connections that never start their handshake: each of the two
        // loops accepts some, but the address gets HANDSHAKES_PER_ADDR
        // places in all; the others are closed at once.
        // One at a time; the loops get them in turn.
        let socks: Vec<std::net::TcpStream> = (0..limits::HANDSHAKES_PER_ADDR * 2)
            .map(|_| {
                thread::sleep(Duration::from_millis(20));
                std::net::TcpStream::connect(addr).unwrap()
            })
            .collect();
        thread::sleep(Duration::from_millis(500));
        let open = socks
            .iter()
            .filter(|s| {
                let mut s = *s;
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                matches!(s.read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::TimedOut)
            })
            .count();
        assert_eq!(open, limits::HANDSHAKES_PER_ADDR);
    }

    #[test]
    fn a_batch_holds_at_most_agents_batch_frames() {
        let got = RefCell::new(vec![]);
        let to = |ev: NetEvent| {
            if let NetEvent::Agents(f) = ev {
                got.borrow_mut().push(f.len())
            }
        };
        let post = Post::new(&to);
        for seq in 0..(AGENTS_BATCH as u64 * 2 + 3) {
            post.frame(7, FromAgent::Heartbeat { seq, mono_ns: 0 });
        }
        post.flush();
        post.flush();
        assert_eq!(
            *got.borrow(),
            [AGENTS_BATCH, AGENTS_BATCH, 3],
            "nothing empty posted"
        );
    }

    #[test]
    fn a_first_frame_other_than_hello_is_refused_and_never_reaches_the_coordinator() {
        let ca = TestCa::new("agent-loop-nohello");
        let (addr, rx) = start(&ca);
        let s = connect(addr, &ca.client("n2")).unwrap();
        s.write_all(&encode(&FromAgent::Heartbeat { seq: 1, mono_ns: 1 }).unwrap())
            .unwrap();
        match read(&s) {
            ToAgent::Refused { reason } => assert!(reason.contains("expected hello"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    }

    #[test]
    fn an_agent_of_another_protocol_version_is_told_why_in_this_sides_framing() {
        let ca = TestCa::new("agent-loop-version");
        let (addr, rx) = start(&ca);
        let s = connect(addr, &ca.client("n3")).unwrap();
        // An older agent's Hello: the same frame with version 2.
        let mut old = encode(&hello()).unwrap();
        old[4..6].copy_from_slice(&2u16.to_be_bytes());
        s.write_all(&old).unwrap();
        // gangd's answer is a frame of its own version: an older agent's
        // decoder refuses it naming both versions; a current one reads it.
        let mut r = SessionReader {
            session: s.clone(),
            timeout: Some(Duration::from_secs(10)),
        };
        let mut raw = vec![0u8; HEADER_LEN];
        std::io::Read::read_exact(&mut r, &mut raw).unwrap();
        assert_eq!(u16::from_be_bytes([raw[4], raw[5]]), PROTOCOL_VERSION);
        let len = u32::from_be_bytes(raw[7..11].try_into().unwrap()) as usize;
        let mut payload = vec![0u8; len];
        std::io::Read::read_exact(&mut r, &mut payload).unwrap();
        match serde_json::from_slice::<ToAgent>(&payload).unwrap() {
            ToAgent::Refused { reason } => assert!(
                reason.contains(&format!(
                    "protocol version 2 not supported (this side speaks {PROTOCOL_VERSION})"
                )) && reason.contains("upgrade them together"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    }

    #[test]
    fn a_node_that_never_reads_is_dropped_once_its_output_passes_the_cap() {
        let ca = TestCa::new("agent-loop-cap");
        let (addr, rx) = start(&ca);
        let s = connect(addr, &ca.client("n3")).unwrap();
        s.write_all(&encode(&hello()).unwrap()).unwrap();
        let NetEvent::AgentJoined { conn, link, .. } = next(&rx) else {
            panic!("expected AgentJoined")
        };
        // Never read: 512 KiB frames until gangd gives up on the node.
        let big = ToAgent::Refused {
            reason: "x".repeat(512 << 10),
        };
        let mut sent = 0usize;
        while link.send(&big) {
            sent += 1;
            assert!(sent < 1000, "never dropped: gangd holds it all");
        }
        assert!(
            sent * (512 << 10) <= super::super::MAX_QUEUED + (16 << 20),
            "dropped near the cap, not long after ({sent} frames)"
        );
        match next(&rx) {
            NetEvent::AgentGone { conn: c, .. } => assert_eq!(c, conn),
            _ => panic!("expected AgentGone"),
        }
    }
}
