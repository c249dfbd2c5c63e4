//! Waiting for a message: two-phase spin-block.
//!
//! A rank waiting for a peer's message can spin (poll without sleeping:
//! lowest latency while the peer runs, a wasted CPU when it does not) or
//! block (sleep in poll: free CPU, but a wakeup to pay). Two-phase
//! spin-block spins first and blocks for the rest; the policies differ in
//! how long the spin is: none, fixed, adapted from recent waits
//! (`adaptive.rs`), or "as long as my gang owns the slot", which under a
//! gang scheduler is exactly when the peer is running too.
//!
//! The top layer of the library: it reads the clock (`clock_socket.rs`)
//! and the adaptive spin limits (`adaptive.rs`). [`WaitPolicy`], the value
//! a `GANG_WAIT` names, is defined with its parser in `env.rs` (the bottom
//! layer, which imports nothing of the crate) and re-exported here.

use crate::adaptive::{self, Observation};
use crate::clock::{monotonic_ns, SlotRemaining};
use crate::clock_socket::process_clock;
pub use crate::env::WaitPolicy;
use std::hint::spin_loop;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// Readable while spinning.
    ReadySpinning,
    /// Readable after blocking.
    ReadyBlocked,
    /// Not readable within the timeout.
    TimedOut,
}

/// The result of one wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitOutcome {
    pub end: WaitEnd,
    /// Time spent in the spin phase.
    pub spun: Duration,
    /// Time from the start of the wait to its end.
    pub waited: Duration,
}

impl WaitOutcome {
    /// Readable (data, EOF or an error condition for the caller's read).
    pub fn is_readable(&self) -> bool {
        self.end != WaitEnd::TimedOut
    }
}

/// Process-wide wait counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Waits that returned (not errors).
    pub waits: u64,
    /// Waits satisfied while spinning.
    pub spin_hits: u64,
    /// Waits that went on to block.
    pub blocks: u64,
    /// Waits that timed out.
    pub timeouts: u64,
    /// Time spent spinning, in ns.
    pub spin_ns: u64,
}

static WAITS: AtomicU64 = AtomicU64::new(0);
static SPIN_HITS: AtomicU64 = AtomicU64::new(0);
static BLOCKS: AtomicU64 = AtomicU64::new(0);
static TIMEOUTS: AtomicU64 = AtomicU64::new(0);
static SPIN_NS: AtomicU64 = AtomicU64::new(0);

/// This process's wait counters so far.
pub fn wait_stats() -> WaitStats {
    let r = Ordering::Relaxed;
    WaitStats {
        waits: WAITS.load(r),
        spin_hits: SPIN_HITS.load(r),
        blocks: BLOCKS.load(r),
        timeouts: TIMEOUTS.load(r),
        spin_ns: SPIN_NS.load(r),
    }
}

/// Polls `fd` for POLLIN with `timeout` (`None`: forever, zero: a probe),
/// retrying EINTR until the deadline. Readable includes POLLHUP/POLLERR;
/// POLLNVAL is EBADF.
fn poll_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline =
        timeout.map(|t| monotonic_ns().saturating_add(t.as_nanos().min(u64::MAX as u128) as u64));
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = deadline.map(|d| {
            let left = d.saturating_sub(monotonic_ns());
            libc::timespec {
                tv_sec: (left / 1_000_000_000) as _,
                tv_nsec: (left % 1_000_000_000) as _,
            }
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: one valid pollfd; the timespec (if any) outlives the call;
        // no signal mask.
        let n = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            // Early returns are not expected, but re-check the deadline.
            match deadline {
                Some(d) if monotonic_ns() < d && timeout != Some(Duration::ZERO) => continue,
                _ => return Ok(false),
            }
        }
        if pfd.revents & libc::POLLNVAL != 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            return Ok(true);
        }
    }
}

/// Does my gang own the slot right now, by the process clock? `None`: no
/// clock (or an unreadable page).
pub fn in_slot_now() -> Option<bool> {
    let clock = process_clock()?;
    let snap = clock.snapshot()?;
    Some(match snap.remaining(clock.gang(), monotonic_ns()) {
        SlotRemaining::NoDeadline => true,
        SlotRemaining::Left(d) => !d.is_zero(),
        SlotRemaining::NotMySlot | SlotRemaining::Unknown => false,
    })
}

/// Waits until `fd` is readable (POLLIN, or POLLHUP/POLLERR so that the
/// caller's read sees the EOF or error) or `timeout` passes (`None`:
/// forever), spinning first as `policy` says. EINTR is retried.
pub fn wait_readable(
    fd: RawFd,
    policy: WaitPolicy,
    timeout: Option<Duration>,
) -> io::Result<WaitOutcome> {
    wait_readable_with(fd, policy, timeout, &in_slot_now)
}

/// [`wait_readable`] with the slot test supplied (`in_slot` answers "does
/// my gang own the slot now", `None` for no clock); tests use this.
pub fn wait_readable_with(
    fd: RawFd,
    policy: WaitPolicy,
    timeout: Option<Duration>,
    in_slot: &dyn Fn() -> Option<bool>,
) -> io::Result<WaitOutcome> {
    if fd < 0 {
        // poll() ignores negative fds: the wait would never end.
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let start = monotonic_ns();
    let timeout_ns = timeout.map(|t| t.as_nanos().min(u64::MAX as u128) as u64);
    let spin_ns = match policy {
        WaitPolicy::Block => 0,
        WaitPolicy::Spin(d) | WaitPolicy::InSlot(d) => d.as_nanos().min(u64::MAX as u128) as u64,
        WaitPolicy::Adaptive => adaptive::spin_for(fd),
    };
    let spin_ns = timeout_ns.map_or(spin_ns, |t| spin_ns.min(t));
    let gated = matches!(policy, WaitPolicy::InSlot(_));

    // Phase 1: spin (poll without sleeping) while the policy allows.
    let mut now = start;
    let mut ready = false;
    if spin_ns > 0 && !(gated && in_slot() == Some(false)) {
        loop {
            if poll_readable(fd, Some(Duration::ZERO))? {
                ready = true;
                now = monotonic_ns();
                break;
            }
            now = monotonic_ns();
            if now - start >= spin_ns || (gated && in_slot() == Some(false)) {
                break;
            }
            spin_loop();
        }
    }
    let spun = now - start;

    // Phase 2: block for whatever is left of the timeout.
    let end = if ready {
        WaitEnd::ReadySpinning
    } else {
        let left = timeout_ns.map(|t| Duration::from_nanos(t.saturating_sub(spun)));
        if poll_readable(fd, left)? {
            WaitEnd::ReadyBlocked
        } else {
            WaitEnd::TimedOut
        }
    };
    let waited = monotonic_ns() - start;

    let r = Ordering::Relaxed;
    WAITS.fetch_add(1, r);
    SPIN_NS.fetch_add(spun, r);
    match end {
        WaitEnd::ReadySpinning => SPIN_HITS.fetch_add(1, r),
        WaitEnd::ReadyBlocked => BLOCKS.fetch_add(1, r),
        WaitEnd::TimedOut => {
            BLOCKS.fetch_add(1, r);
            TIMEOUTS.fetch_add(1, r)
        }
    };
    if policy == WaitPolicy::Adaptive {
        adaptive::observe(
            fd,
            match end {
                WaitEnd::ReadySpinning => Observation::Hit {
                    spin_ns,
                    waited_ns: spun,
                },
                WaitEnd::ReadyBlocked => Observation::Blocked {
                    spun_ns: spun,
                    waited_ns: waited,
                },
                WaitEnd::TimedOut => Observation::TimedOut {
                    spun_ns: spun,
                    waited_ns: waited,
                },
            },
        );
    }
    Ok(WaitOutcome {
        end,
        spun: Duration::from_nanos(spun),
        waited: Duration::from_nanos(waited),
    })
}
