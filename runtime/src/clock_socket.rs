//! Getting the slot clock page from the node scheduler.
//!
//! The scx_gang daemon serves a Unix stream socket. A client connects and
//! sends nothing; the daemon writes one line and closes: `gang <id>\n` with
//! the clock map's fd attached (SCM_RIGHTS), or `none <reason>\n`. This
//! module speaks that protocol, maps the page read-only, and keeps the
//! process's one clock (opened lazily, once). Anything short of a good
//! `gang` message means "no clock", which is not an error for the program:
//! the rest of the library then degrades to plain behaviour.

use crate::clock::{read_page, SlotClockPage, SlotSnapshot};
use crate::env;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The longest message the daemon sends (a `none` reason included).
const MAX_MESSAGE: usize = 512;
/// A daemon that accepts but never answers must not hang the program.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// A mapped clock page and the gang it belongs to.
#[derive(Debug)]
pub struct SlotClock {
    gang: u32,
    page: *const SlotClockPage,
    len: usize,
}

// SAFETY: the mapping is read-only shared memory, read only through the
// atomic seqcount reader; nothing about it is tied to a thread.
unsafe impl Send for SlotClock {}
unsafe impl Sync for SlotClock {}

impl SlotClock {
    /// Maps the clock page of `fd` (PROT_READ, MAP_SHARED, offset 0, the
    /// struct rounded up to the page size). The fd may be closed afterwards.
    pub fn map(fd: RawFd, gang: u32) -> io::Result<SlotClock> {
        if gang >= 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "gang id beyond 63",
            ));
        }
        // SAFETY: sysconf has no preconditions.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page_size = if page_size > 0 {
            page_size as usize
        } else {
            4096
        };
        let len = std::mem::size_of::<SlotClockPage>().div_ceil(page_size) * page_size;
        // SAFETY: a fresh mapping chosen by the kernel; errors are checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SlotClock {
            gang,
            page: p as *const SlotClockPage,
            len,
        })
    }

    /// This process's gang id on this node (0..63).
    pub fn gang(&self) -> u32 {
        self.gang
    }

    /// A consistent snapshot, or `None` if the page would not settle.
    pub fn snapshot(&self) -> Option<SlotSnapshot> {
        // SAFETY: the page stays mapped for as long as `self` lives.
        unsafe { read_page(self.page) }
    }
}

impl Drop for SlotClock {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once. (The process clock lives in
        // a static and is never dropped.)
        unsafe { libc::munmap(self.page as *mut libc::c_void, self.len) };
    }
}

/// What asking the daemon gave.
#[derive(Debug)]
pub enum ClockOpen {
    /// `gang <id>` with a mappable fd.
    Mapped(SlotClock),
    /// `none <reason>`: the daemon runs but this process is in no gang.
    NoGang(String),
    /// No clock: no socket, refused, malformed answer, no fd, mmap failed,
    /// or the clock is turned off (`GANG_CLOCK=off`).
    Unavailable(String),
}

impl ClockOpen {
    pub fn clock(&self) -> Option<&SlotClock> {
        match self {
            ClockOpen::Mapped(c) => Some(c),
            _ => None,
        }
    }
}

/// A parsed first line of the daemon's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Greeting {
    Gang(u32),
    NoGang(String),
}

/// Parses the daemon's line (without the newline): `gang <0..63>` or
/// `none <reason>`.
pub fn parse_greeting(line: &str) -> Result<Greeting, String> {
    if let Some(id) = line.strip_prefix("gang ") {
        match id.parse::<u32>() {
            Ok(g) if g < 64 => Ok(Greeting::Gang(g)),
            _ => Err(format!("bad gang id in {line:?}")),
        }
    } else if line == "none" {
        Ok(Greeting::NoGang(String::new()))
    } else if let Some(reason) = line.strip_prefix("none ") {
        Ok(Greeting::NoGang(reason.to_string()))
    } else {
        Err(format!("unexpected answer {line:?}"))
    }
}

/// Checks the daemon's whole answer: its first line (`data` up to the
/// newline, UTF-8) is a greeting, and `gang <id>` came with exactly one fd
/// (`fds` of them were received).
pub fn parse_answer(data: &[u8], fds: usize) -> Result<Greeting, String> {
    let end = data.iter().position(|&b| b == b'\n');
    let Some(line) = end.and_then(|e| std::str::from_utf8(&data[..e]).ok()) else {
        return Err(format!("no complete answer line ({} bytes)", data.len()));
    };
    let greeting = parse_greeting(line)?;
    if let Greeting::Gang(gang) = greeting {
        if fds != 1 {
            return Err(format!("gang {gang} came with {fds} fds, not 1"));
        }
    }
    Ok(greeting)
}

/// Reads the whole answer (up to EOF or the newline), collecting any fds
/// passed along the way. Fds are received close-on-exec.
fn receive(sock: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut data = Vec::new();
    let mut fds = Vec::new();
    loop {
        let mut buf = [0u8; MAX_MESSAGE];
        // Room for a few fds: a misbehaving peer sending more must not
        // leak them (MSG_CTRUNC would drop the excess silently otherwise).
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE((4 * std::mem::size_of::<RawFd>()) as u32) };
        let mut cbuf = vec![0u64; (space as usize).div_ceil(8)];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain data; zeroed is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: every buffer named in msg outlives the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: walking the control buffer the kernel just filled, with
        // the libc macros; the data of an SCM_RIGHTS message is an fd array.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let p = libc::CMSG_DATA(c) as *const RawFd;
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n as usize]);
        if data.contains(&b'\n') || data.len() > MAX_MESSAGE {
            break;
        }
    }
    Ok((data, fds))
}

/// Asks the daemon at `path` for this process's clock. Never panics; every
/// failure is `Unavailable` with the reason.
pub fn open_clock(path: &Path) -> ClockOpen {
    let sock = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => return ClockOpen::Unavailable(format!("{}: {e}", path.display())),
    };
    let _ = sock.set_read_timeout(Some(ANSWER_TIMEOUT));
    let (data, mut fds) = match receive(&sock) {
        Ok(r) => r,
        Err(e) => return ClockOpen::Unavailable(format!("reading {}: {e}", path.display())),
    };
    match parse_answer(&data, fds.len()) {
        Err(e) => ClockOpen::Unavailable(e),
        Ok(Greeting::NoGang(reason)) => ClockOpen::NoGang(reason),
        Ok(Greeting::Gang(gang)) => {
            let fd = fds.pop().expect("one fd");
            match SlotClock::map(fd.as_raw_fd(), gang) {
                Ok(c) => ClockOpen::Mapped(c), // `fd` closes here; the mapping stays
                Err(e) => ClockOpen::Unavailable(format!("mapping the clock of gang {gang}: {e}")),
            }
        }
    }
}

static PROCESS_CLOCK: OnceLock<SlotClock> = OnceLock::new();
/// CLOCK_MONOTONIC ns of the last failed attempt; 0: none yet.
static LAST_ATTEMPT_NS: AtomicU64 = AtomicU64::new(0);
/// How often a process without a clock asks again. A rank often starts
/// before the daemon has seen its gang (it scans every 100 ms), and the
/// scheduler may start after the job: one failure must not be for ever.
const RETRY_NS: u64 = 1_000_000_000;

/// The process's mapped clock (from `GANG_CLOCK_SOCKET`, unless
/// `GANG_CLOCK=off`). Once mapped it is kept for the life of the process;
/// until then it is asked for at most once per RETRY_NS, by one thread.
pub fn process_clock() -> Option<&'static SlotClock> {
    if let Some(c) = PROCESS_CLOCK.get() {
        return Some(c);
    }
    let path = env::clock_socket()?;
    let now = crate::clock::monotonic_ns().max(1);
    let last = LAST_ATTEMPT_NS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < RETRY_NS {
        return None;
    }
    if LAST_ATTEMPT_NS
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return None; // another thread is asking
    }
    match open_clock(&path) {
        ClockOpen::Mapped(c) => {
            let _ = PROCESS_CLOCK.set(c);
            PROCESS_CLOCK.get()
        }
        ClockOpen::NoGang(_) | ClockOpen::Unavailable(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings() {
        assert_eq!(parse_greeting("gang 5"), Ok(Greeting::Gang(5)));
        assert_eq!(parse_greeting("gang 63"), Ok(Greeting::Gang(63)));
        assert!(parse_greeting("gang 64").is_err());
        assert!(parse_greeting("gang -1").is_err());
        assert!(parse_greeting("gang").is_err());
        assert!(parse_greeting("gang 5 extra").is_err());
        assert_eq!(
            parse_greeting("none not in a gang"),
            Ok(Greeting::NoGang("not in a gang".into()))
        );
        assert_eq!(parse_greeting("none"), Ok(Greeting::NoGang(String::new())));
        assert!(parse_greeting("hello").is_err());
        assert!(parse_greeting("").is_err());
    }

    #[test]
    fn an_answer_is_one_line_and_a_gang_comes_with_exactly_one_fd() {
        assert_eq!(parse_answer(b"gang 3\n", 1), Ok(Greeting::Gang(3)));
        assert!(parse_answer(b"gang 3\n", 0).is_err());
        assert!(parse_answer(b"gang 3\n", 2).is_err());
        assert!(
            parse_answer(b"gang 3", 1).is_err(),
            "no newline: incomplete"
        );
        assert!(parse_answer(b"gang \xff\n", 1).is_err(), "not UTF-8");
        assert_eq!(
            parse_answer(b"none why\n", 0),
            Ok(Greeting::NoGang("why".into()))
        );
    }

    #[test]
    fn missing_socket_is_unavailable() {
        let st = open_clock(Path::new("/nonexistent/scx_gang/clock.sock"));
        assert!(matches!(st, ClockOpen::Unavailable(_)), "{st:?}");
    }
}
