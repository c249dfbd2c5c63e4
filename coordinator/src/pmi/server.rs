//! A job's PMI listener: one TCP port per job, one thread per connection,
//! all feeding the job's [`PmiJob`] behind a mutex.
//!
//! The actions a line produces are carried out while the job's lock is
//! held, so every connection sees them in the state machine's order (a
//! barrier release cannot overtake the reply that preceded it). Writes are
//! a few hundred bytes to a peer that is waiting for them; a write timeout
//! bounds how long a peer that does not read can hold the lock, and a
//! failed write closes that connection (its rank then counts as gone).
//!
//! Reads are bounded: a line longer than [`MAX_LINE`] is answered with an
//! error as soon as it passes the limit, and the rest of it, up to its
//! newline, is discarded. Live connections are capped (2 per rank + 16) so
//! a flood of idle connections cannot exhaust threads.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::job::{Action, ConnId, JobConfig, JobFailure, PmiJob};
use super::wire::{WireError, MAX_LINE};

/// How long a write to a rank may block before its connection is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// What the job's owner hears about, once each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmiEvent {
    /// The job cannot go on (a rank left before finalize, aborted, or broke
    /// the barrier protocol). Kill its ranks.
    Failed(JobFailure),
    /// Every rank called PMI finalize.
    AllFinalized,
}

/// The environment a rank needs to find its job's server: MPICH's simple
/// PMI client connects to `PMI_PORT` (`host:port`) and introduces itself
/// with `PMI_ID`. `PMI_RANK`/`PMI_SIZE` are only read by clients without
/// PMI_ID; they are set too, for tools that look at them.
pub fn rank_env(host: &str, port: u16, rank: u32, size: u32) -> Vec<(String, String)> {
    vec![
        ("PMI_PORT".into(), format!("{host}:{port}")),
        ("PMI_ID".into(), rank.to_string()),
        ("PMI_RANK".into(), rank.to_string()),
        ("PMI_SIZE".into(), size.to_string()),
    ]
}

struct Shared {
    job: Mutex<PmiJob>,
    streams: Mutex<HashMap<ConnId, TcpStream>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    events: mpsc::Sender<PmiEvent>,
    stop: AtomicBool,
    next_conn: AtomicU64,
    max_conns: usize,
    name: String,
}

/// One job's PMI server. Dropping it (or [`PmiServer::shutdown`]) closes
/// the port and every connection and joins all threads.
pub struct PmiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: mpsc::Receiver<PmiEvent>,
    accept: Option<JoinHandle<()>>,
}

impl PmiServer {
    /// Binds `addr` (port 0 picks a free port: read it back with
    /// [`PmiServer::local_addr`]) and starts serving `config`'s job.
    pub fn start(addr: SocketAddr, config: JobConfig) -> io::Result<PmiServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            max_conns: 2 * config.size as usize + 16,
            name: config.kvsname.clone(),
            job: Mutex::new(PmiJob::new(config)),
            streams: Mutex::new(HashMap::new()),
            readers: Mutex::new(Vec::new()),
            events: tx,
            stop: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
        });
        log::info!("pmi {}: serving on {addr}", shared.name);
        let s = shared.clone();
        let accept = thread::Builder::new()
            .name(format!("pmi-accept-{}", addr.port()))
            .spawn(move || accept_loop(listener, s))?;
        Ok(PmiServer {
            addr,
            shared,
            events: rx,
            accept: Some(accept),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// [`rank_env`] for this server, with `host` the name or address the
    /// ranks reach gangd by.
    pub fn rank_env(&self, host: &str, rank: u32) -> Vec<(String, String)> {
        let size = self
            .shared
            .job
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .config()
            .size;
        rank_env(host, self.addr.port(), rank, size)
    }

    /// The next event, if one is pending.
    pub fn try_event(&self) -> Option<PmiEvent> {
        self.events.try_recv().ok()
    }

    /// Waits up to `timeout` for the next event.
    pub fn wait_event(&self, timeout: Duration) -> Option<PmiEvent> {
        self.events.recv_timeout(timeout).ok()
    }

    /// Runs `f` on the job's state (for status and tests).
    pub fn with_job<R>(&self, f: impl FnOnce(&PmiJob) -> R) -> R {
        f(&self.shared.job.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stops accepting, closes every connection, joins every thread.
    pub fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for (_, s) in self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        let readers = std::mem::take(
            &mut *self
                .shared
                .readers
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for t in readers {
            let _ = t.join();
        }
    }
}

impl Drop for PmiServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // EMFILE and the like: wait, do not spin.
                log::warn!("pmi {}: accept: {e}", shared.name);
                thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        if let Err(e) = serve(stream, peer, &shared) {
            log::warn!("pmi {}: connection from {peer}: {e}", shared.name);
        }
    }
}

/// Registers an accepted connection and starts its reader thread.
fn serve(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) -> io::Result<()> {
    // Accepted sockets do not inherit O_NONBLOCK on Linux; be explicit.
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let conn = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    {
        let mut streams = shared.streams.lock().unwrap_or_else(|e| e.into_inner());
        if streams.len() >= shared.max_conns {
            let _ = stream.shutdown(Shutdown::Both);
            return Err(io::Error::other(format!(
                "refused: {} connections already",
                streams.len()
            )));
        }
        streams.insert(conn, stream.try_clone()?);
    }
    log::debug!("pmi {}: connection {conn} from {peer}", shared.name);
    let s = shared.clone();
    let reader = thread::Builder::new()
        .name(format!("pmi-conn-{conn}"))
        .spawn(move || read_loop(stream, conn, s));
    match reader {
        Ok(t) => {
            let mut readers = shared.readers.lock().unwrap_or_else(|e| e.into_inner());
            readers.retain(|t| !t.is_finished());
            readers.push(t);
            Ok(())
        }
        Err(e) => {
            if let Some(s) = shared
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&conn)
            {
                let _ = s.shutdown(Shutdown::Both);
            }
            Err(e)
        }
    }
}

enum Input<'a> {
    Line(&'a [u8]),
    TooLong,
    Gone,
}

fn read_loop(mut stream: TcpStream, conn: ConnId, shared: Arc<Shared>) {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut discarding = false;
    'read: loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut data = &chunk[..n];
        while !data.is_empty() {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let (line, rest) = data.split_at(i + 1);
                    data = rest;
                    if discarding {
                        discarding = false;
                        continue;
                    }
                    if buf.len() + line.len() > MAX_LINE {
                        buf.clear();
                        handle(&shared, conn, Input::TooLong);
                    } else if buf.is_empty() {
                        handle(&shared, conn, Input::Line(line));
                    } else {
                        buf.extend_from_slice(line);
                        handle(&shared, conn, Input::Line(&buf));
                        buf.clear();
                    }
                }
                None => {
                    if !discarding {
                        if buf.len() + data.len() > MAX_LINE {
                            buf.clear();
                            discarding = true;
                            handle(&shared, conn, Input::TooLong);
                        } else {
                            buf.extend_from_slice(data);
                        }
                    }
                    data = &[];
                }
            }
            if shared.stop.load(Ordering::SeqCst) {
                break 'read;
            }
        }
    }
    if !shared.stop.load(Ordering::SeqCst) {
        handle(&shared, conn, Input::Gone);
    }
    if let Some(s) = shared
        .streams
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&conn)
    {
        let _ = s.shutdown(Shutdown::Both);
    }
    log::debug!("pmi {}: connection {conn} closed", shared.name);
}

/// Feeds one input to the job and carries out its actions under the lock.
fn handle(shared: &Shared, conn: ConnId, input: Input<'_>) {
    let mut job = shared.job.lock().unwrap_or_else(|e| e.into_inner());
    let actions = match input {
        Input::Line(l) => job.on_line(conn, l),
        Input::TooLong => job.on_wire_error(conn, None, &WireError::TooLong),
        Input::Gone => job.on_disconnect(conn),
    };
    for a in actions {
        match a {
            Action::Send(c, text) => {
                let mut streams = shared.streams.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(mut s) = streams.get(&c) {
                    if let Err(e) = s.write_all(text.as_bytes()) {
                        log::warn!(
                            "pmi {}: write to connection {c}: {e}; closing it",
                            shared.name
                        );
                        let _ = s.shutdown(Shutdown::Both);
                        streams.remove(&c);
                    }
                }
            }
            Action::Close(c) => {
                if let Some(s) = shared
                    .streams
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&c)
                {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            Action::Failed(f) => {
                log::error!("pmi {}: {}", shared.name, f.reason);
                let _ = shared.events.send(PmiEvent::Failed(f));
            }
            Action::AllFinalized => {
                let _ = shared.events.send(PmiEvent::AllFinalized);
            }
        }
    }
}
