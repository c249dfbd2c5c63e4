//! The links of one rank to its peers (see the module above for the
//! protocol): establishing them with a checked hello, sending, receiving
//! under a wait policy and a timeout, exchanging with a sender thread for
//! large messages, and closing them in order.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gangrt::WaitPolicy;

use super::{note, Common, Env};

/// Ranks keep trying to reach their peers this long (or `--timeout`, if
/// shorter) while the peers start.
pub const CONNECT_FOR: Duration = Duration::from_secs(30);

const HELLO_MAGIC: &[u8; 4] = b"GWHL";
const HELLO_LEN: usize = 12;

/// Messages at most this long are written inline by [`Comm::exchange`]
/// (they fit in any socket buffer); longer ones go to the sender thread.
pub const INLINE_MAX: usize = 4096;

fn io_what(e: &io::Error) -> String {
    match e.kind() {
        ErrorKind::UnexpectedEof => "connection closed".into(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut => "timed out".into(),
        _ => e.to_string(),
    }
}

fn hello(rank: usize, size: usize) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[0..4].copy_from_slice(HELLO_MAGIC);
    h[4..8].copy_from_slice(&(rank as u32).to_le_bytes());
    h[8..12].copy_from_slice(&(size as u32).to_le_bytes());
    h
}

fn parse_hello(h: &[u8; HELLO_LEN]) -> Option<(usize, usize)> {
    if &h[0..4] != HELLO_MAGIC {
        return None;
    }
    Some((
        u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize,
        u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize,
    ))
}

fn resolve(peer: &str) -> io::Result<Vec<SocketAddr>> {
    Ok(peer.to_socket_addrs()?.collect())
}

/// A job (peer, message) for the sender thread, and its answer.
type Job = (usize, Vec<u8>);
type Done = (Vec<u8>, Result<(), String>);

struct Sender {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
    thread: thread::JoinHandle<()>,
}

/// The links of one rank to its peers.
pub struct Comm {
    pub rank: usize,
    pub size: usize,
    links: Vec<Option<TcpStream>>,
    wait: Option<WaitPolicy>,
    yields: bool,
    timeout: Duration,
    sender: Option<Sender>,
}

impl Comm {
    /// Connects this rank to every peer `j` with `linked(rank, j)`
    /// (`linked` must be symmetric), as the module documentation says.
    pub fn establish(
        env: &Env,
        common: &Common,
        linked: impl Fn(usize, usize) -> bool,
    ) -> Result<Comm, String> {
        let (r, n) = (env.rank, env.size);
        let timeout = common.timeout;
        let window = CONNECT_FOR.min(timeout);
        let deadline = Instant::now() + window;
        let listener = TcpListener::bind(("0.0.0.0", env.port))
            .map_err(|e| format!("listening on port {}: {e}", env.port))?;
        let mut links: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();

        // 1. Connect to the higher ranks (their backlog takes us).
        for j in (r + 1..n).filter(|&j| linked(r, j)) {
            let peer = &env.peers[j];
            let mut s = loop {
                let err = match resolve(peer) {
                    Ok(addrs) if !addrs.is_empty() => {
                        match TcpStream::connect_timeout(&addrs[0], Duration::from_secs(1)) {
                            Ok(s) => break s,
                            Err(e) => e.to_string(),
                        }
                    }
                    Ok(_) => "no address".to_string(),
                    Err(e) => e.to_string(),
                };
                if Instant::now() >= deadline {
                    return Err(format!(
                        "cannot connect to rank {j} at {peer} within {:.1} s: {err}",
                        window.as_secs_f64()
                    ));
                }
                thread::sleep(Duration::from_millis(50));
            };
            s.set_nodelay(true).ok();
            s.set_write_timeout(Some(timeout)).ok();
            s.write_all(&hello(r, n))
                .map_err(|e| format!("hello to rank {j}: {}", io_what(&e)))?;
            links[j] = Some(s);
        }

        // 2. Accept the lower ranks, each checked by its hello.
        let mut missing: Vec<usize> = (0..r).filter(|&j| linked(j, r)).collect();
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("listener: {e}"))?;
        while !missing.is_empty() {
            match listener.accept() {
                Ok((mut s, from)) => {
                    s.set_nonblocking(false).ok();
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(100));
                    s.set_read_timeout(Some(left)).ok();
                    let mut h = [0u8; HELLO_LEN];
                    if let Err(e) = s.read_exact(&mut h) {
                        note(format!("dropping a connection from {from}: no hello: {e}"));
                        continue;
                    }
                    let Some((j, size)) = parse_hello(&h) else {
                        note(format!("dropping a connection from {from}: bad hello"));
                        continue;
                    };
                    if size != n {
                        return Err(format!(
                            "rank {j} (from {from}) says the job has {size} ranks, I say {n}"
                        ));
                    }
                    let Some(at) = missing.iter().position(|&m| m == j) else {
                        return Err(format!(
                            "unexpected hello from {from}: rank {j} (expected one of {missing:?})"
                        ));
                    };
                    missing.remove(at);
                    s.set_nodelay(true).ok();
                    s.set_write_timeout(Some(timeout)).ok();
                    s.write_all(&hello(r, n))
                        .map_err(|e| format!("hello to rank {j}: {}", io_what(&e)))?;
                    links[j] = Some(s);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "rank(s) {missing:?} did not connect within {:.1} s",
                            window.as_secs_f64()
                        ));
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        }
        drop(listener);

        // 3. Check the higher ranks' answers.
        for j in (r + 1..n).filter(|&j| linked(r, j)) {
            let s = links[j].as_mut().unwrap();
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            s.set_read_timeout(Some(left)).ok();
            let mut h = [0u8; HELLO_LEN];
            s.read_exact(&mut h).map_err(|e| {
                format!(
                    "no hello from rank {j} at {}: {}",
                    env.peers[j],
                    io_what(&e)
                )
            })?;
            match parse_hello(&h) {
                Some((rank, size)) if rank == j && size == n => {}
                Some((rank, size)) => {
                    return Err(format!(
                        "{} answers as rank {rank} of {size}, expected rank {j} of {n}",
                        env.peers[j]
                    ))
                }
                None => return Err(format!("{} is not a rank of this job", env.peers[j])),
            }
        }
        for s in links.iter().flatten() {
            s.set_read_timeout(Some(timeout)).ok();
        }
        Ok(Comm {
            rank: r,
            size: n,
            links,
            wait: common.wait,
            yields: common.yields,
            timeout,
            sender: None,
        })
    }

    fn link(&mut self, peer: usize) -> Result<&mut TcpStream, String> {
        self.links
            .get_mut(peer)
            .and_then(Option::as_mut)
            .ok_or_else(|| format!("no link to rank {peer}"))
    }

    /// Writes all of `buf` to `peer`.
    pub fn send(&mut self, peer: usize, buf: &[u8]) -> Result<(), String> {
        let s = self.link(peer)?;
        s.write_all(buf)
            .map_err(|e| format!("sending to rank {peer}: {}", io_what(&e)))
    }

    /// Reads exactly `buf.len()` bytes from `peer`, waiting first with the
    /// `--wait` policy (one `wait_readable` per message).
    pub fn recv(&mut self, peer: usize, buf: &mut [u8]) -> Result<(), String> {
        let (wait, timeout) = (self.wait, self.timeout);
        let s = self.link(peer)?;
        if let Some(policy) = wait {
            match gangrt::wait_readable(s.as_raw_fd(), policy, Some(timeout)) {
                Ok(o) if o.end == gangrt::WaitEnd::TimedOut => {
                    return Err(format!(
                        "nothing from rank {peer} for {:.1} s",
                        timeout.as_secs_f64()
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(format!("waiting for rank {peer}: {e}")),
            }
        }
        s.read_exact(buf).map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => format!(
                "receiving from rank {peer}: nothing for {:.1} s",
                timeout.as_secs_f64()
            ),
            ErrorKind::UnexpectedEof => {
                format!("receiving from rank {peer}: rank {peer} closed the connection")
            }
            _ => format!("receiving from rank {peer}: {e}"),
        })
    }

    fn sender(&mut self) -> Result<&Sender, String> {
        if self.sender.is_none() {
            let mut outs: Vec<Option<TcpStream>> = Vec::with_capacity(self.size);
            for (j, l) in self.links.iter().enumerate() {
                outs.push(match l {
                    Some(s) => Some(
                        s.try_clone()
                            .map_err(|e| format!("link to rank {j}: {e}"))?,
                    ),
                    None => None,
                });
            }
            let (jobs, job_rx) = mpsc::channel::<Job>();
            let (done_tx, done) = mpsc::channel::<Done>();
            let thread = thread::Builder::new()
                .name("sender".into())
                .spawn(move || {
                    for (peer, buf) in job_rx {
                        let res = match outs.get_mut(peer).and_then(Option::as_mut) {
                            Some(s) => s
                                .write_all(&buf)
                                .map_err(|e| format!("sending to rank {peer}: {}", io_what(&e))),
                            None => Err(format!("no link to rank {peer}")),
                        };
                        if done_tx.send((buf, res)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| format!("starting the sender thread: {e}"))?;
            self.sender = Some(Sender { jobs, done, thread });
        }
        Ok(self.sender.as_ref().unwrap())
    }

    /// Sends `out` to `peer` and receives `inbuf.len()` bytes from it at
    /// the same time; gives `out` back. Both sides may call this at once
    /// with messages of any size.
    pub fn exchange(
        &mut self,
        peer: usize,
        out: Vec<u8>,
        inbuf: &mut [u8],
    ) -> Result<Vec<u8>, String> {
        if out.len() <= INLINE_MAX {
            self.send(peer, &out)?;
            self.recv(peer, inbuf)?;
            return Ok(out);
        }
        self.sender()?
            .jobs
            .send((peer, out))
            .map_err(|_| "the sender thread is gone".to_string())?;
        // On a failed receive the job is over: return at once rather than
        // wait for a write that may only end with the timeout.
        self.recv(peer, inbuf)?;
        let (out, sent) = self
            .sender
            .as_ref()
            .unwrap()
            .done
            .recv()
            .map_err(|_| "the sender thread is gone".to_string())?;
        sent?;
        Ok(out)
    }

    /// The end of an iteration: a yield point when `--yield` was given.
    pub fn end_iteration(&self) {
        if self.yields {
            gangrt::yield_point();
        }
    }

    /// Closes every link: shuts down the writing side, then reads each
    /// link to its EOF (any byte still coming is an error).
    pub fn finish(mut self) -> Result<(), String> {
        if let Some(s) = self.sender.take() {
            drop(s.jobs);
            s.thread
                .join()
                .map_err(|_| "the sender thread panicked".to_string())?;
        }
        for (j, l) in self.links.iter().enumerate() {
            if let Some(s) = l {
                s.shutdown(Shutdown::Write)
                    .map_err(|e| format!("closing the link to rank {j}: {e}"))?;
            }
        }
        for (j, l) in self.links.iter_mut().enumerate() {
            if let Some(s) = l {
                let mut b = [0u8; 1];
                loop {
                    match s.read(&mut b) {
                        Ok(0) => break,
                        Ok(_) => return Err(format!("rank {j} sent more than expected")),
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Err(format!("waiting for rank {j} to close: {}", io_what(&e)))
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
