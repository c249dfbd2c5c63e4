//! Receive timestamps: when the kernel took in what a TCP read returned,
//! on CLOCK_MONOTONIC (crate::time). The clock exchange (cluster_clock)
//! stamps a probe's arrival at gangd (t2) and its echo's arrival at the
//! node (t4) with it, instead of the time the reading thread got to the
//! bytes: a sample's round trip then leaves out the time the data waited
//! in a socket for a busy event loop (gangd at thousands of nodes: 0.1–2
//! ms at 4096 nodes on loopback, docs/scale.md) or for a reader thread an
//! emulated vCPU has not run yet. NTP daemons stamp in the kernel for the
//! same reason.
//!
//! How it works. `enable` sets SO_TIMESTAMPNS on the socket; `recv` is a
//! read through recvmsg(2) that also takes the control message, and
//! `Reader` a socket read that way (what rustls's `read_tls` is given),
//! keeping the last read's stamp. For TCP
//! the kernel reports the software receive time of the last segment the
//! read consumed (tcp_recv_timestamp), so the stamp is never earlier than
//! the arrival of any byte the read returned, and never later than now:
//! a message read in it is stamped between its true arrival and the read.
//! Errors of that kind only lengthen a sample's round trip (its bound
//! stays honest). The stamp is on CLOCK_REALTIME; it is moved to
//! CLOCK_MONOTONIC with the offset between the two read just after the
//! read.
//!
//! Known faults: a step of CLOCK_REALTIME between the segment's arrival
//! and the read moves the stamp by the step. A stamp past now or more than
//! MAX_AGE old is dropped (the caller then stamps with now), which catches
//! a step backwards and any step forward of more than MAX_AGE; a smaller
//! forward step in that window makes one sample's round trip look shorter
//! than it was, which the estimator sees as inconsistent with the samples
//! around it (a step: the estimate starts over). The kernel turns
//! receive stamping on some time after the first socket asks (a deferred
//! static key): the first reads of a process may carry no stamp.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use crate::time::monotonic_ns;

/// A stamp older than this at the read is not trusted (see above).
pub const MAX_AGE_NS: u64 = 1_000_000_000;

/// Asks the kernel to stamp the segments `fd` (a TCP socket) receives.
pub fn enable(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid int option value of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads from `fd` into `buf` like read(2); with the bytes, when the
/// kernel received the last of them (CLOCK_MONOTONIC ns), if it said so
/// and the stamp is believable.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    // Room for one timespec control message, aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg points at a live iovec (over `buf`) and control buffer.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let stamp =
        received_real(&msg).and_then(|real| to_monotonic(real, realtime_ns(), monotonic_ns()));
    Ok((n as usize, stamp))
}

/// A socket read through `recv`: each read keeps its stamp (`rx_ns`) and
/// whether it returned less than it asked for (`short`: the socket's
/// queue was empty then; gangd's edge-triggered loop stops reading
/// there).
pub struct Reader<S> {
    pub sock: S,
    /// When the kernel received what the last read returned (None: not
    /// stamped, or nothing read yet).
    pub rx_ns: Option<u64>,
    pub short: bool,
}

impl<S: AsFd> Reader<S> {
    pub fn new(sock: S) -> Self {
        Reader {
            sock,
            rx_ns: None,
            short: false,
        }
    }
}

impl<S: AsFd> io::Read for Reader<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, rx_ns) = recv(self.sock.as_fd().as_raw_fd(), buf)?;
        self.short = n > 0 && n < buf.len();
        self.rx_ns = rx_ns;
        Ok(n)
    }
}

/// The SCM_TIMESTAMPNS of a received message, CLOCK_REALTIME ns.
fn received_real(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: msg was filled by recvmsg; the CMSG macros walk its buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                if ts.tv_sec < 0 || ts.tv_nsec < 0 {
                    return None;
                }
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec.max(0) as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A CLOCK_REALTIME stamp `stamp` moved to CLOCK_MONOTONIC, given both
/// clocks read now; None if it is in the future or more than MAX_AGE_NS
/// old (a step of the realtime clock, or a read stalled that long).
pub fn to_monotonic(stamp: u64, real_now: u64, mono_now: u64) -> Option<u64> {
    let age = real_now.checked_sub(stamp)?;
    if age > MAX_AGE_NS {
        return None;
    }
    mono_now.checked_sub(age)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// A connected loopback pair: (sender, receiver).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (tx, l.accept().unwrap().0)
    }

    #[test]
    fn a_stamp_is_moved_by_its_age_and_refused_from_the_future_or_too_old() {
        assert_eq!(to_monotonic(1_000, 1_500, 10_000), Some(9_500));
        assert_eq!(to_monotonic(1_500, 1_500, 10_000), Some(10_000));
        assert_eq!(to_monotonic(1_501, 1_500, 10_000), None, "future");
        let now = 5 * MAX_AGE_NS;
        assert_eq!(
            to_monotonic(now - MAX_AGE_NS, now, now),
            Some(now - MAX_AGE_NS)
        );
        assert_eq!(
            to_monotonic(now - MAX_AGE_NS - 1, now, now),
            None,
            "too old"
        );
        assert_eq!(to_monotonic(0, MAX_AGE_NS / 2, 10), None, "before boot");
    }

    /// What a read returns is stamped at its arrival, not at the read: a
    /// segment that waited 50 ms in the socket carries a stamp about 50
    /// ms before the read, and never one after it.
    #[test]
    fn bytes_that_waited_in_the_socket_are_stamped_at_their_arrival() {
        let (mut tx, rx) = pair();
        enable(rx.as_raw_fd()).unwrap();
        let mut buf = [0u8; 64];
        // The kernel turns stamping on a little after the first ask.
        let mut stamped = None;
        for _ in 0..100 {
            tx.write_all(b"probe").unwrap();
            let sent = monotonic_ns();
            std::thread::sleep(Duration::from_millis(50));
            let (n, stamp) = recv(rx.as_raw_fd(), &mut buf).unwrap();
            let read = monotonic_ns();
            assert_eq!(&buf[..n], b"probe");
            if let Some(s) = stamp {
                assert!(s <= read, "a stamp after its read");
                stamped = Some((sent, s, read));
                break;
            }
        }
        let (sent, s, read) = stamped.expect("the kernel never stamped a segment");
        assert!(read - s >= 45_000_000, "waited {} ns", read - s);
        // The clocks were read apart: a few ms of slack either side.
        assert!(s + 5_000_000 >= sent, "stamped before it was sent");
    }

    #[test]
    fn a_read_of_a_closed_or_empty_socket_says_so() {
        let (tx, rx) = pair();
        rx.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        let e = recv(rx.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(tx);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(recv(rx.as_raw_fd(), &mut buf).unwrap(), (0, None));
    }

    #[test]
    fn a_read_that_returns_less_than_asked_says_the_socket_was_drained() {
        let (mut tx, rx) = pair();
        tx.write_all(&[7u8; 10]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut buf = [0u8; 6];
        let mut r = Reader::new(&rx);
        assert_eq!(io::Read::read(&mut r, &mut buf).unwrap(), 6);
        assert!(!r.short, "a full buffer: more may wait");
        assert_eq!(io::Read::read(&mut r, &mut buf).unwrap(), 4);
        assert!(r.short, "4 of 6: the queue was empty");
        drop(tx);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(io::Read::read(&mut r, &mut buf).unwrap(), 0);
        assert!(!r.short, "the end is not a short read");
    }

    #[test]
    fn a_reader_keeps_its_last_reads_stamp() {
        let (mut tx, rx) = pair();
        enable(rx.as_raw_fd()).unwrap();
        let mut r = Reader::new(&rx);
        let mut buf = [0u8; 8];
        for _ in 0..100 {
            tx.write_all(b"abcd").unwrap();
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(io::Read::read(&mut r, &mut buf).unwrap(), 4);
            if let Some(s) = r.rx_ns {
                assert!(s <= monotonic_ns());
                return;
            }
        }
        panic!("the kernel never stamped a segment");
    }
}
