//! A TLS connection shared by a reading thread and writing threads.
//!
//! Both ends of the agent link read on one thread while others write
//! (gangd's writer thread; the agent's rank output pumps, reapers and
//! answers), as they did on a plain TcpStream. rustls is a state machine
//! with no I/O of its own, so this module owns the socket and the
//! machine:
//!
//! - `conn` (a mutex) is held only to move bytes into or out of rustls,
//!   never across a socket call, so a writer stuck on a full socket never
//!   stops the reader from draining the other direction (which is what
//!   would let the peer's writer, and so ours, make progress).
//! - `send` (a mutex) orders encryption and sending: TLS records carry
//!   sequence numbers, so the records one thread encrypted must reach the
//!   socket before the next thread's. A writer holds it from encryption
//!   to the end of its socket write.
//! - The reader waits for the socket with poll(2) and a timeout of its
//!   choice, then reads what arrived into rustls.
//!
//! A failed or timed-out socket write leaves the stream torn mid-record:
//! the session then shuts the socket down, and both sides see the end.
//!
//! [`handshake`] runs the whole TLS handshake under one deadline: a peer
//! that sends a byte now and then cannot hold a connection open.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::rx_stamp;

/// One TLS connection over TCP, after its handshake.
pub struct Session {
    conn: Mutex<rustls::Connection>,
    send: Mutex<()>,
    sock: TcpStream,
    /// When the kernel received what the last socket read returned
    /// (CLOCK_MONOTONIC ns, crate::rx_stamp; 0: not stamped).
    rx_ns: AtomicU64,
}

fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

/// Waits until `sock` is readable (or closed) for at most `timeout`
/// (None: no limit). Returns whether it is.
fn wait_readable(sock: &TcpStream, timeout: Option<Duration>) -> io::Result<bool> {
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_millis().clamp(0, i32::MAX as u128) as i32,
    };
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the TLS handshake did not finish in time",
        ));
    }
    Ok(left)
}

/// Runs the TLS handshake of `conn` on `sock`, all of it before
/// `deadline`. On a TLS error the alert rustls prepared is sent first, so
/// the peer learns why (an unknown CA, a revoked certificate...).
pub fn handshake(
    sock: TcpStream,
    conn: impl Into<rustls::Connection>,
    deadline: Instant,
) -> io::Result<Session> {
    let mut conn: rustls::Connection = conn.into();
    sock.set_nonblocking(false)?;
    let mut io = &sock;
    while conn.is_handshaking() {
        while conn.wants_write() {
            sock.set_write_timeout(Some(remaining(deadline)?))?;
            conn.write_tls(&mut io)?;
        }
        if !conn.is_handshaking() {
            break;
        }
        if !wait_readable(&sock, Some(remaining(deadline)?))? {
            remaining(deadline)?;
            continue;
        }
        if conn.read_tls(&mut io)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection during the TLS handshake",
            ));
        }
        if let Err(e) = conn.process_new_packets() {
            let _ = sock.set_write_timeout(Some(Duration::from_millis(500)));
            let _ = conn.write_tls(&mut io);
            return Err(invalid(e));
        }
    }
    while conn.wants_write() {
        sock.set_write_timeout(Some(remaining(deadline)?))?;
        conn.write_tls(&mut io)?;
    }
    sock.set_write_timeout(None)?;
    // Our own queues bound what is buffered (a frame at a time).
    conn.set_buffer_limit(None);
    Ok(Session {
        conn: Mutex::new(conn),
        send: Mutex::new(()),
        sock,
        rx_ns: AtomicU64::new(0),
    })
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, rustls::Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The TCP socket (for options such as TCP_NODELAY or timeouts on
    /// writes, and the peer's address). Never read or write it directly.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// What the TLS layer knows of the peer (its certificate...).
    pub fn with_connection<T>(&self, f: impl FnOnce(&rustls::Connection) -> T) -> T {
        f(&self.lock())
    }

    /// Reads decrypted bytes, waiting at most `timeout` (None: for ever)
    /// for some to arrive: `WouldBlock` when none came. `Ok(0)` is the
    /// peer's orderly close; a TCP close without it is `UnexpectedEof`.
    pub fn read_timeout(&self, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            match self.lock().reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) || !wait_readable(&self.sock, left)? {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let wants_write = {
                let mut conn = self.lock();
                let mut sock = rx_stamp::Reader::new(&self.sock);
                conn.read_tls(&mut sock)?;
                self.rx_ns.store(sock.rx_ns.unwrap_or(0), Ordering::Relaxed);
                conn.process_new_packets().map_err(invalid)?;
                conn.wants_write()
            };
            if wants_write {
                // An alert or a key update of the TLS layer's own.
                self.send_pending(&[])?;
            }
        }
    }

    /// When the kernel received the bytes of the last socket read (None:
    /// not stamped; the socket must have asked, `rx_stamp::enable`). Every
    /// byte `read_timeout` has returned arrived at or before it: the node
    /// stamps a clock echo's arrival (t4) with it.
    pub fn rx_ns(&self) -> Option<u64> {
        Some(self.rx_ns.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// Encrypts and sends `data` (all of it, or the session is closed).
    pub fn write_all(&self, data: &[u8]) -> io::Result<()> {
        self.send_pending(data)
    }

    fn send_pending(&self, data: &[u8]) -> io::Result<()> {
        let _order = self.send.lock().unwrap_or_else(|e| e.into_inner());
        let mut records = Vec::with_capacity(data.len() + 64);
        {
            let mut conn = self.lock();
            if !data.is_empty() {
                conn.writer().write_all(data)?;
            }
            while conn.wants_write() {
                conn.write_tls(&mut records)?;
            }
        }
        let sent = (&self.sock).write_all(&records);
        if sent.is_err() {
            let _ = self.sock.shutdown(Shutdown::Both);
        }
        sent
    }

    /// Ends the session: a close_notify if no writer is busy, then the
    /// socket is shut down both ways (the reader sees the end at once).
    pub fn close(&self) {
        if let Ok(_order) = self.send.try_lock() {
            let mut records = Vec::new();
            {
                let mut conn = self.lock();
                conn.send_close_notify();
                while conn.wants_write() {
                    if conn.write_tls(&mut records).is_err() {
                        break;
                    }
                }
            }
            let _ = self
                .sock
                .set_write_timeout(Some(Duration::from_millis(200)));
            let _ = (&self.sock).write_all(&records);
        }
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

/// `Read` over a shared session, with an optional timeout per read.
pub struct SessionReader {
    pub session: Arc<Session>,
    pub timeout: Option<Duration>,
}

impl Read for SessionReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.session.read_timeout(buf, self.timeout)
    }
}

/// `Write` over a shared session: each call is encrypted and sent whole.
#[derive(Clone)]
pub struct SessionWriter(pub Arc<Session>);

impl Write for SessionWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
