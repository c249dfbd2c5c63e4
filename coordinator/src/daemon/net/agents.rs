//! The agent port: TLS admission of nodes, then one reader thread per node.
//!
//! A connection is admitted in three steps, all before one deadline
//! (limits::HANDSHAKE_DEADLINE): a place among the handshakes in flight
//! (capped per address and in all), the TLS 1.3 handshake in which the
//! node's certificate is verified against the cluster CA and its
//! revocation list, and the node's Hello. The node's name is the one in
//! its certificate. Only then does the coordinator hear of it; every
//! refusal is a log line, and the TLS layer tells the peer why (an alert).
//! A node's clock probes are answered from its reader thread (mod.rs).

use std::io::{self, BufReader};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use log::{info, warn};

use super::limits::{self, AcceptBackoff, Caps, Held, Throttle};
use super::{next_conn, Hello, Link, NetEvent};
use gang_wire::proto::tls::{self, rustls, ServerTls, Session, SessionReader, SessionWriter};
use gang_wire::proto::{encode, read_frame, FrameDecoder, FromAgent, ToAgent};
use gang_wire::time::monotonic_ns;

/// Accepts agents on `listener`; every event goes through `post`.
pub fn serve_agents(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    post: impl Fn(NetEvent) + Send + Sync + Clone + 'static,
) -> Result<()> {
    let caps = Caps::<IpAddr>::new(limits::HANDSHAKES_PER_ADDR, limits::HANDSHAKES_TOTAL);
    thread::Builder::new().name("agents".into()).spawn(move || {
        let mut backoff = AcceptBackoff::new("agent");
        let mut over_log = Throttle::new(Duration::from_secs(5));
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => {
                    backoff.succeeded();
                    s
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    backoff.wait(&e);
                    continue;
                }
            };
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            let held = match caps.admit(peer.ip()) {
                Ok(h) => h,
                Err(over) => {
                    if let Some(more) = over_log.allow(Instant::now()) {
                        warn!("agent connection from {peer} closed at once: {over} in their handshakes (and {more} more like it since the last line)");
                    }
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
            };
            let (tls, post) = (tls.clone(), post.clone());
            let spawned = thread::Builder::new()
                .name("agent-rx".into())
                .spawn(move || agent_connection(stream, &tls, held, post));
            if let Err(e) = spawned {
                warn!("no thread for the agent connection from {peer}: {e}");
            }
        }
    })?;
    Ok(())
}

fn agent_connection(
    stream: TcpStream,
    tls: &ServerTls,
    handshake: Held<IpAddr>,
    post: impl Fn(NetEvent),
) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let addr = stream
        .peer_addr()
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let local = stream
        .local_addr()
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    // Switch messages are small and latency-bound.
    let _ = stream.set_nodelay(true);
    let (session, hello) = match admit(stream, tls) {
        Ok(ok) => ok,
        Err(e) => {
            warn!("agent connection from {peer} refused: {e:#}");
            return;
        }
    };
    drop(handshake);
    let conn = next_conn();
    let closer_session = session.clone();
    let closer: Arc<dyn Fn() + Send + Sync> = Arc::new(move || closer_session.close());
    let link = Link::new(
        SessionWriter(session.clone()),
        closer,
        format!("agent{conn}"),
    );
    info!(
        "agent {} ({peer}) admitted: its certificate is the cluster's",
        hello.node
    );
    let echo = link.clone();
    post(NetEvent::AgentJoined {
        conn,
        link,
        addr,
        local,
        hello,
    });
    let mut reader = BufReader::with_capacity(
        256 << 10,
        SessionReader {
            session: session.clone(),
            timeout: None,
        },
    );
    let why = loop {
        match read_frame::<FromAgent>(&mut reader) {
            // t2 as soon as the probe is read; answered from here and the
            // writer thread, never queued behind the main loop (mod.rs).
            Ok(Some(FromAgent::ClockProbe { seq, t1 })) => {
                let t2 = monotonic_ns();
                echo.echo_clock(seq, t1, t2);
            }
            Ok(Some(msg)) => {
                echo.heard();
                post(NetEvent::Agent { conn, msg })
            }
            Ok(None) => break "connection closed".to_string(),
            Err(e) => break format!("{e}"),
        }
    };
    session.close();
    post(NetEvent::AgentGone { conn, why });
}

/// TLS, the node's name from its certificate, then its Hello, all before
/// the handshake deadline.
fn admit(stream: TcpStream, tls: &ServerTls) -> Result<(Arc<Session>, Hello)> {
    let deadline = Instant::now() + limits::HANDSHAKE_DEADLINE;
    let conn =
        rustls::ServerConnection::new(tls.config()).map_err(|e| anyhow!("TLS server: {e}"))?;
    let session = Arc::new(
        tls::handshake(stream, conn, deadline).map_err(|e| anyhow!("TLS handshake: {e}"))?,
    );
    let node = match session.with_connection(tls::peer_node) {
        Ok(n) => n,
        Err(e) => {
            refuse(&session, &format!("{e:#}"));
            bail!("{e:#}");
        }
    };
    let first = read_first(&session, deadline)
        .map_err(|e| anyhow!("node {node}: waiting for its hello: {e}"))?;
    match first {
        FromAgent::Hello {
            nr_cpus,
            housekeeping_cpus,
            agent_version,
            jobs,
            schedule,
        } => Ok((
            session,
            Hello {
                node,
                nr_cpus,
                housekeeping_cpus,
                agent_version,
                jobs,
                schedule,
            },
        )),
        other => {
            let reason = format!("expected hello, got {}", kind(&other));
            refuse(&session, &reason);
            bail!("node {node}: {reason}")
        }
    }
}

/// The first message, read before `deadline` however slowly it trickles.
fn read_first(session: &Session, deadline: Instant) -> Result<FromAgent> {
    let mut decoder = FrameDecoder::<FromAgent>::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("not sent in {} s", limits::HANDSHAKE_DEADLINE.as_secs());
        }
        match session.read_timeout(&mut buf, Some(left)) {
            Ok(0) => bail!("the node closed the connection"),
            Ok(n) => {
                if let Some(first) = decoder.feed(&buf[..n])?.into_iter().next() {
                    return Ok(first);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => bail!("{e}"),
        }
    }
}

fn refuse(session: &Session, reason: &str) {
    if let Ok(frame) = encode(&ToAgent::Refused {
        reason: reason.to_string(),
    }) {
        let _ = session.write_all(&frame);
    }
    session.close();
}

/// A message's type, for logs.
fn kind(msg: &FromAgent) -> String {
    serde_json::to_value(msg)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}
