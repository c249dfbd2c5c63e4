//! Signals as bytes on a pipe, so the front end's loop can poll them next
//! to its socket.
//!
//! The signals are blocked in the thread that calls [`SignalPipe::start`]
//! (call it before any other thread exists, so every thread inherits the
//! mask) and a helper thread takes them with `sigwait` and writes their
//! numbers to the pipe. Being blocked, SIGTSTP does not stop the process by
//! itself: the loop decides (suspend the job first, then SIGSTOP itself).
//! SIGCONT still continues a stopped process while blocked, and is then
//! reported like the others.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::thread;

use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, Signal};

pub struct SignalPipe {
    read: OwnedFd,
}

impl SignalPipe {
    pub fn start(signals: &[Signal]) -> io::Result<SignalPipe> {
        let mut set = SigSet::empty();
        for &s in signals {
            set.add(s);
        }
        set.thread_block()?;
        // Both ends non-blocking: the loop drains without blocking, and a
        // full pipe (thousands of unread signals) drops the new ones, which
        // the kernel would have merged anyway.
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        thread::Builder::new()
            .name("gang-signals".into())
            .spawn(move || loop {
                if let Ok(sig) = set.wait() {
                    let _ = nix::unistd::write(&write, &[sig as i32 as u8]);
                }
            })?;
        Ok(SignalPipe { read })
    }

    /// Readable when a signal arrived.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// The signals that arrived since the last call, in order.
    pub fn take(&self) -> Vec<Signal> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            match nix::unistd::read(&self.read, &mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend(
                    buf[..n]
                        .iter()
                        .filter_map(|&b| Signal::try_from(b as i32).ok()),
                ),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        out
    }
}
