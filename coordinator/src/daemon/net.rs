//! gangd's connections. Each connection has a reader thread that decodes
//! frames and posts them to the coordinator's channel, and a writer thread
//! fed through an [`Outlet`], so the coordinator never blocks on a slow or
//! stopped peer (a front end suspended by Ctrl-Z stops reading its output).
//!
//! Agents are admitted here, before the coordinator hears of them: a
//! challenge, a Hello proving the cluster key, or the connection is
//! refused and closed with a log line. A malformed frame drops its
//! connection, never the daemon.

use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use log::{info, warn};

use crate::proto::auth::{self, ClusterKey};
use crate::proto::{
    encode, read_frame, FromAgent, FromClient, LiveJob, Message, Placement, ToAgent,
};

/// A connection's number, unique for gangd's lifetime.
pub type ConnId = u64;

/// Most bytes queued for one peer. Past it, a peer is too slow: its
/// connection is closed rather than letting gangd's memory grow.
const MAX_QUEUED: usize = 64 << 20;

/// Time an agent has to answer the challenge.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The sending half of a connection.
#[derive(Clone)]
pub struct Outlet {
    tx: Sender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    closer: Arc<dyn Fn() + Send + Sync>,
}

impl Outlet {
    fn new(
        mut sink: impl Write + Send + 'static,
        closer: Arc<dyn Fn() + Send + Sync>,
        name: String,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        let close = closer.clone();
        let _ = thread::Builder::new()
            .name(format!("{name}-tx"))
            .spawn(move || {
                for frame in rx {
                    q.fetch_sub(frame.len(), Ordering::Relaxed);
                    if sink.write_all(&frame).is_err() {
                        break;
                    }
                }
                close();
            });
        Self { tx, queued, closer }
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
        if self.queued.fetch_add(frame.len(), Ordering::Relaxed) + frame.len() > MAX_QUEUED {
            warn!(
                "a peer is not reading: more than {} MiB queued, closing it",
                MAX_QUEUED >> 20
            );
            self.close();
            return false;
        }
        self.tx.send(frame).is_ok()
    }

    pub fn close(&self) {
        (self.closer)();
    }
}

/// What a node says about itself in its Hello.
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
        outlet: Outlet,
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
        outlet: Outlet,
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

fn next_conn() -> ConnId {
    NEXT_CONN.fetch_add(1, Ordering::Relaxed)
}

/// Accepts agents on `listener`; every event goes through `post`.
pub fn serve_agents(
    listener: TcpListener,
    key: ClusterKey,
    post: impl Fn(NetEvent) + Send + Sync + Clone + 'static,
) -> Result<()> {
    thread::Builder::new()
        .name("agents".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let stream = match stream {
                    Ok(s) => s,
                    Err(e) => {
                        warn!("accepting an agent connection: {e}");
                        continue;
                    }
                };
                let (key, post) = (key.clone(), post.clone());
                let _ = thread::Builder::new()
                    .name("agent-rx".into())
                    .spawn(move || agent_connection(stream, key, post));
            }
        })?;
    Ok(())
}

fn agent_connection(stream: TcpStream, key: ClusterKey, post: impl Fn(NetEvent)) {
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
    let conn = next_conn();
    let hello = match admit(&stream, &key) {
        Ok(h) => h,
        Err(e) => {
            warn!("agent connection from {peer} refused: {e:#}");
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let Ok(tx) = stream.try_clone() else { return };
    let closer_stream = stream.try_clone().ok();
    let closer: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        if let Some(s) = &closer_stream {
            let _ = s.shutdown(Shutdown::Both);
        }
    });
    let outlet = Outlet::new(tx, closer, format!("agent{conn}"));
    info!("agent {} ({peer}) proved the cluster key", hello.node);
    post(NetEvent::AgentJoined {
        conn,
        outlet,
        addr,
        local,
        hello,
    });
    let mut reader = io::BufReader::with_capacity(256 << 10, stream);
    let why = loop {
        match read_frame::<FromAgent>(&mut reader) {
            Ok(Some(msg)) => post(NetEvent::Agent { conn, msg }),
            Ok(None) => break "connection closed".to_string(),
            Err(e) => break format!("{e}"),
        }
    };
    post(NetEvent::AgentGone { conn, why });
}

/// Challenge, Hello, proof. Refusals are told to the agent before closing.
fn admit(stream: &TcpStream, key: &ClusterKey) -> Result<Hello> {
    let nonce = auth::new_nonce()?;
    let mut w = stream;
    w.write_all(&encode(&ToAgent::Challenge {
        nonce: nonce.to_vec().into(),
    })?)?;
    stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
    let mut r = stream;
    let first = read_frame::<FromAgent>(&mut r).context("reading Hello")?;
    stream.set_read_timeout(None)?;
    let refuse = |reason: String| -> Result<Hello> {
        let mut w = stream;
        let _ = w.write_all(
            &encode(&ToAgent::Refused {
                reason: reason.clone(),
            })
            .unwrap_or_default(),
        );
        bail!("{reason}")
    };
    match first {
        Some(FromAgent::Hello {
            node,
            nr_cpus,
            housekeeping_cpus,
            agent_version,
            proof,
            jobs,
            schedule,
        }) => {
            if !auth::verify(key, &nonce, &node, &proof.0) {
                return refuse(format!("node {node:?}: wrong cluster key"));
            }
            Ok(Hello {
                node,
                nr_cpus,
                housekeeping_cpus,
                agent_version,
                jobs,
                schedule,
            })
        }
        Some(other) => refuse(format!("expected hello, got {other:?}")),
        None => bail!("closed before hello"),
    }
}

/// Accepts front ends on the Unix socket at `path` (replacing a stale
/// one), open to every user: who they are comes from SO_PEERCRED.
pub fn serve_clients(
    path: &Path,
    post: impl Fn(NetEvent) + Send + Sync + Clone + 'static,
) -> Result<()> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("{} is in use: is another gangd running?", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    thread::Builder::new()
        .name("clients".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let post = post.clone();
                let _ = thread::Builder::new()
                    .name("client-rx".into())
                    .spawn(move || client_connection(stream, post));
            }
        })?;
    Ok(())
}

fn client_connection(stream: UnixStream, post: impl Fn(NetEvent)) {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = match getsockopt(&stream, PeerCredentials) {
        Ok(c) => Cred {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        },
        Err(e) => {
            warn!("front end without credentials dropped: {e}");
            return;
        }
    };
    let conn = next_conn();
    let (Ok(tx), Ok(closer_stream)) = (stream.try_clone(), stream.try_clone()) else {
        return;
    };
    let closer: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let _ = closer_stream.shutdown(Shutdown::Both);
    });
    let outlet = Outlet::new(tx, closer, format!("client{conn}"));
    post(NetEvent::ClientJoined { conn, outlet, cred });
    let mut reader = io::BufReader::new(stream);
    loop {
        match read_frame::<FromClient>(&mut reader) {
            Ok(Some(msg)) => post(NetEvent::Client { conn, msg }),
            Ok(None) => break,
            Err(e) => {
                warn!(
                    "front end (uid {}, pid {}) dropped: {e}",
                    cred.uid, cred.pid
                );
                break;
            }
        }
    }
    post(NetEvent::ClientGone { conn });
}
