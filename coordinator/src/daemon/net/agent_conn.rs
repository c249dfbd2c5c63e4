//! One agent connection on gangd's agent loop (agents.rs): a non-blocking
//! socket, its rustls server connection driven by hand, and its stage.
//!
//! Stages, all but the last before limits::HANDSHAKE_DEADLINE (the loop
//! checks the deadline): `Handshake` (TLS 1.3; the node's certificate is
//! verified against the cluster CA and its revocation list by rustls, then
//! its name read from it by `tls::peer_node`), `Hello` (the first frame
//! must be the node's Hello), `Linked` (the coordinator has heard of it:
//! its frames are posted, its clock probes answered here). A refusal
//! sends what the peer must hear (rustls's alert, or ToAgent::Refused),
//! then the connection is dropped and logged by the loop.
//!
//! Reading: TLS records are read until the socket would block (the loop
//! is edge-triggered), each batch decrypted and fed to the FrameDecoder,
//! which bounds a frame (MAX_PAYLOAD). Each read notes when the kernel
//! received its last segment (gang_wire::rx_stamp): a clock probe decoded
//! from it is stamped (t2) with that, not with the time the loop got to
//! it, so its sample's round trip leaves out the loop's delay.
//!
//! Writing: frames wait in `urgent`
//! (heartbeats, clock echoes: mod.rs) or `bulk` (everything else), both
//! counted in the Link's queue (MAX_QUEUED), and are handed to rustls
//! only once rustls has written everything before them to the socket,
//! urgent ones first, so what gangd holds for a peer that does not read
//! is bounded by the Link's cap plus one batch (OUT_BATCH) in rustls, and
//! an urgent frame waits behind at most that batch.
//!
//! Known faults: `post` blocks when the coordinator's queue is full, and
//! with it every link of the loop (the same back-pressure the reader
//! threads had, shared); a peer sending without pause is read until it
//! stops (its frames go to the coordinator as fast as it takes them).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use log::info;
use mio::net::TcpStream;

use super::agents::Post;
use super::limits::{self, Held};
use super::{ConnId, Frame, Hello, Link, NetEvent, ToLoop, ECHO_QUEUED};
use gang_wire::proto::tls::{self, rustls};
use gang_wire::proto::{encode, FrameDecoder, FromAgent, ToAgent};
use gang_wire::rx_stamp;
use gang_wire::time::monotonic_ns;

/// Plaintext handed to rustls at once when its output is empty.
const OUT_BATCH: usize = 256 << 10;

/// What waits to be handed to TLS.
enum Out {
    Frame(Arc<[u8]>),
    /// A ClockEcho, encoded with t3 read just before it goes to TLS.
    ClockEcho {
        seq: u64,
        t1: u64,
        t2: u64,
    },
}

enum Stage {
    /// TLS handshake in progress; the place among the handshakes is held.
    Handshake(Held<IpAddr>),
    /// Handshake done; waiting for the Hello of `node`.
    Hello { node: String, _held: Held<IpAddr> },
    /// The coordinator has heard of it.
    Linked(Link),
    /// For a moment while the stage changes hands.
    Moving,
}

/// Why a connection ended: `Refused` before the coordinator heard of it
/// (logged as a refusal), `Gone` after (posted as AgentGone).
pub enum End {
    Refused(String),
    Gone(String),
}

pub struct AgentConn {
    pub conn: ConnId,
    pub sock: TcpStream,
    pub peer: SocketAddr,
    local: IpAddr,
    tls: rustls::Connection,
    stage: Stage,
    /// Before it: the handshake and the Hello (None once Linked).
    pub deadline: Option<Instant>,
    decoder: FrameDecoder<FromAgent>,
    out: Queues,
    /// When the kernel received what the last socket read returned
    /// (CLOCK_MONOTONIC ns; None: not stamped).
    rx_ns: Option<u64>,
}

/// What waits for TLS: urgent frames (mod.rs) go ahead of bulk ones
/// queued before them; each queue keeps its order.
#[derive(Default)]
struct Queues {
    urgent: VecDeque<Out>,
    bulk: VecDeque<Out>,
}

impl Queues {
    fn push(&mut self, out: Out, urgent: bool) {
        if urgent {
            self.urgent.push_back(out)
        } else {
            self.bulk.push_back(out)
        }
    }

    fn pop(&mut self) -> Option<Out> {
        self.urgent.pop_front().or_else(|| self.bulk.pop_front())
    }

    fn is_empty(&self) -> bool {
        self.urgent.is_empty() && self.bulk.is_empty()
    }
}

/// What the loop lends a connection for one step.
pub struct Ctx<'a> {
    pub post: &'a Post<'a>,
    pub to_loop: &'a std::sync::Arc<ToLoop>,
    pub buf: &'a mut [u8],
}

impl AgentConn {
    pub fn new(
        conn: ConnId,
        sock: TcpStream,
        peer: SocketAddr,
        tls: rustls::ServerConnection,
        held: Held<IpAddr>,
        now: Instant,
    ) -> Self {
        let local = sock
            .local_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        Self {
            conn,
            sock,
            peer,
            local,
            tls: tls.into(),
            stage: Stage::Handshake(held),
            deadline: Some(now + limits::HANDSHAKE_DEADLINE),
            decoder: FrameDecoder::new(),
            out: Queues::default(),
            rx_ns: None,
        }
    }

    pub fn is_linked(&self) -> bool {
        matches!(self.stage, Stage::Linked(_))
    }

    /// Why the deadline passed, as the refusal's log line says it.
    pub fn deadline_reason(&self) -> String {
        match &self.stage {
            Stage::Handshake(_) => "TLS handshake: the TLS handshake did not finish in time".into(),
            Stage::Hello { node, .. } => format!(
                "node {node}: waiting for its hello: not sent in {} s",
                limits::HANDSHAKE_DEADLINE.as_secs()
            ),
            Stage::Linked(_) | Stage::Moving => "linked".into(),
        }
    }

    /// The socket is readable (or closed): reads, decrypts and handles
    /// everything that arrived, then writes what that produced. A read
    /// that returned less than it asked for ends the reading, unless the
    /// event said the peer closed (`closed`): then its end may already be
    /// queued behind the data, and no later edge would announce it.
    pub fn on_readable(&mut self, cx: &mut Ctx, closed: bool) -> Result<(), End> {
        loop {
            // A read that returned less than it asked for found the
            // socket's queue empty: (edge-triggered) the loop stops reading
            // there rather than reading again for a WouldBlock; data that
            // arrives later raises a new edge. At 4096 nodes the read that
            // would block was every other recvfrom of the agent loop
            // (docs/scale.md).
            let mut sock = rx_stamp::Reader::new(&mut self.sock);
            let eof = match self.tls.read_tls(&mut sock) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.end(format!("{e}"))),
            };
            let drained = sock.short;
            self.rx_ns = sock.rx_ns;
            if let Err(e) = self.tls.process_new_packets() {
                // rustls prepared an alert: the peer learns why.
                let _ = self.flush_tls();
                let what = if self.tls.is_handshaking() {
                    format!("TLS handshake: TLS: {e}")
                } else {
                    format!("TLS: {e}")
                };
                return Err(self.end(what));
            }
            self.after_handshake()?;
            self.read_plaintext(cx)?;
            if eof {
                let why = match self.stage {
                    Stage::Handshake(_) => {
                        "TLS handshake: the peer closed the connection during the TLS handshake"
                            .to_string()
                    }
                    Stage::Hello { ref node, .. } => {
                        format!(
                            "node {node}: waiting for its hello: the node closed the connection"
                        )
                    }
                    _ => "connection closed".to_string(),
                };
                return Err(self.end(why));
            }
            if drained && !closed {
                break;
            }
        }
        self.flush()
    }

    /// Once the handshake is done: the node's name from its certificate.
    fn after_handshake(&mut self) -> Result<(), End> {
        if !matches!(self.stage, Stage::Handshake(_)) || self.tls.is_handshaking() {
            return Ok(());
        }
        let node = match tls::peer_node(&self.tls) {
            Ok(n) => n,
            Err(e) => {
                let reason = format!("{e:#}");
                self.refuse(&reason);
                return Err(End::Refused(reason));
            }
        };
        // Our own queues bound what is buffered.
        self.tls.set_buffer_limit(None);
        let Stage::Handshake(held) = std::mem::replace(&mut self.stage, Stage::Moving) else {
            unreachable!("checked above")
        };
        self.stage = Stage::Hello { node, _held: held };
        Ok(())
    }

    fn read_plaintext(&mut self, cx: &mut Ctx) -> Result<(), End> {
        loop {
            let n = match self.tls.reader().read(cx.buf) {
                Ok(0) => return Err(self.end("connection closed".into())),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(self.end(format!("{e}"))),
            };
            let msgs = match self.decoder.feed(&cx.buf[..n]) {
                Ok(m) => m,
                // Its first frame (e.g. another protocol version): the
                // peer is told why, in this side's framing (an older
                // agent's decoder then names both versions).
                Err(e) if matches!(self.stage, Stage::Hello { .. }) => {
                    let reason = format!("its hello: {e}");
                    self.refuse(&reason);
                    return Err(self.end(reason));
                }
                Err(e) => return Err(self.end(format!("{e}"))),
            };
            for msg in msgs {
                self.on_frame(msg, cx)?;
            }
        }
    }

    fn on_frame(&mut self, msg: FromAgent, cx: &mut Ctx) -> Result<(), End> {
        match &self.stage {
            Stage::Linked(link) => match msg {
                // t2 when the kernel took the probe in (or, unstamped, as
                // soon as it is read); answered from here, never queued
                // behind the coordinator (mod.rs).
                FromAgent::ClockProbe { seq, t1 } => {
                    let t2 = self.rx_ns.unwrap_or_else(monotonic_ns);
                    if !link.count(ECHO_QUEUED) {
                        return Err(self.end("not reading its clock echoes".into()));
                    }
                    self.out.push(Out::ClockEcho { seq, t1, t2 }, true);
                    Ok(())
                }
                msg => {
                    link.heard();
                    cx.post.frame(self.conn, msg);
                    Ok(())
                }
            },
            Stage::Hello { node, .. } => {
                let node = node.clone();
                self.hello(node, msg, cx)
            }
            Stage::Handshake(_) | Stage::Moving => {
                Err(self.end("a frame before the handshake ended".into()))
            }
        }
    }

    fn hello(&mut self, node: String, first: FromAgent, cx: &mut Ctx) -> Result<(), End> {
        let FromAgent::Hello {
            nr_cpus,
            housekeeping_cpus,
            agent_version,
            jobs,
            schedule,
        } = first
        else {
            let reason = format!("expected hello, got {}", kind(&first));
            self.refuse(&reason);
            return Err(End::Refused(format!("node {node}: {reason}")));
        };
        let link = Link::on_loop(self.conn, cx.to_loop.clone());
        info!(
            "agent {node} ({}) admitted: its certificate is the cluster's",
            self.peer
        );
        // The place among the handshakes is given back here (drop).
        self.stage = Stage::Linked(link.clone());
        self.deadline = None;
        cx.post.event(NetEvent::AgentJoined {
            conn: self.conn,
            link,
            addr: self.peer.ip(),
            local: self.local,
            hello: Hello {
                node,
                nr_cpus,
                housekeeping_cpus,
                agent_version,
                jobs,
                schedule,
            },
        });
        Ok(())
    }

    /// A frame from the coordinator.
    pub fn queue(&mut self, frame: Frame) {
        self.out.push(Out::Frame(frame.bytes), frame.urgent);
    }

    /// Writes what rustls holds, then hands it the next batch of frames,
    /// until the socket would block or nothing is left.
    pub fn flush(&mut self) -> Result<(), End> {
        loop {
            match self.flush_tls() {
                // The socket is full: the loop calls again when it drains
                // (registered for writability, edge-triggered).
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(e) => return Err(self.end(format!("{e}"))),
            }
            if self.out.is_empty() {
                return Ok(());
            }
            let mut handed = 0;
            while handed < OUT_BATCH {
                let Some(out) = self.out.pop() else {
                    break;
                };
                let (frame, counted): (Arc<[u8]>, usize) = match out {
                    Out::Frame(f) => {
                        let n = f.len();
                        (f, n)
                    }
                    Out::ClockEcho { seq, t1, t2 } => {
                        let t3 = monotonic_ns();
                        match encode(&ToAgent::ClockEcho { seq, t1, t2, t3 }) {
                            Ok(f) => (f.into(), ECHO_QUEUED),
                            Err(_) => (Arc::from(Vec::new()), ECHO_QUEUED),
                        }
                    }
                };
                if let Stage::Linked(link) = &self.stage {
                    link.uncount(counted);
                }
                handed += frame.len();
                if let Err(e) = self.tls.writer().write_all(&frame) {
                    return Err(self.end(format!("{e}")));
                }
            }
        }
    }

    /// Writes rustls's pending records; true if all went out.
    fn flush_tls(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Ends the session from gangd's side: what is queued, a close_notify,
    /// as much of it as the socket takes now, then the socket shut down.
    pub fn close(&mut self) {
        let _ = self.flush();
        self.tls.send_close_notify();
        let _ = self.flush_tls();
        let _ = self.sock.shutdown(Shutdown::Both);
        if let Stage::Linked(link) = &self.stage {
            link.set_closed();
        }
    }

    /// Refused before the coordinator heard of it: tell the peer why.
    fn refuse(&mut self, reason: &str) {
        if let Ok(frame) = encode(&ToAgent::Refused {
            reason: reason.to_string(),
        }) {
            let _ = self.tls.writer().write_all(&frame);
        }
        self.close();
    }

    /// The end, as the loop reports it.
    fn end(&mut self, why: String) -> End {
        let _ = self.sock.shutdown(Shutdown::Both);
        match &self.stage {
            Stage::Linked(link) => {
                link.set_closed();
                End::Gone(why)
            }
            _ => End::Refused(why),
        }
    }

    /// The Link of a linked connection.
    pub fn link(&self) -> Option<&Link> {
        match &self.stage {
            Stage::Linked(l) => Some(l),
            _ => None,
        }
    }
}

/// A message's type, for logs.
fn kind(msg: &FromAgent) -> String {
    serde_json::to_value(msg)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(out: Option<Out>) -> Option<u8> {
        match out? {
            Out::Frame(f) => Some(f[0]),
            Out::ClockEcho { seq, .. } => Some(seq as u8),
        }
    }

    #[test]
    fn urgent_frames_go_ahead_of_bulk_and_each_queue_keeps_its_order() {
        let mut q = Queues::default();
        let f = |b: u8| Out::Frame(Arc::from(vec![b]));
        q.push(f(1), false);
        q.push(f(2), false);
        q.push(f(10), true);
        q.push(
            Out::ClockEcho {
                seq: 11,
                t1: 0,
                t2: 0,
            },
            true,
        );
        q.push(f(3), false);
        q.push(f(12), true);
        let order: Vec<u8> = std::iter::from_fn(|| frame(q.pop())).collect();
        assert_eq!(order, vec![10, 11, 12, 1, 2, 3]);
        assert!(q.is_empty());
    }
}
