//! The C ABI (declared in include/gangrt.h), for ranks not written in Rust.
//!
//! Thin wrappers over the Rust API: plain integers in and out, errno for
//! errors, and no panic ever crosses the boundary (each entry point catches
//! one and reports a failure instead).

use crate::clock::SlotRemaining;
use crate::env::DEFAULT_SPIN_US;
use crate::wait::{wait_readable, WaitPolicy};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;

/// `enum gang_wait_policy` in the header.
pub const GANG_WAIT_BLOCK: i32 = 0;
pub const GANG_WAIT_SPIN: i32 = 1;
pub const GANG_WAIT_ADAPTIVE: i32 = 2;
pub const GANG_WAIT_INSLOT: i32 = 3;

/// `struct gang_wait_stats` in the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GangWaitStats {
    pub waits: u64,
    pub spin_hits: u64,
    pub blocks: u64,
    pub timeouts: u64,
    pub spin_ns: u64,
    pub yields: u64,
}

fn set_errno(e: i32) {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = e };
}

fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        fail
    })
}

/// ns left in my gang's slot: -1 unknown (no clock), 0 not my slot,
/// INT64_MAX no deadline.
#[no_mangle]
pub extern "C" fn gang_slot_remaining_ns() -> i64 {
    guard(-1, || match crate::slot_remaining() {
        SlotRemaining::Unknown => -1,
        SlotRemaining::NotMySlot => 0,
        SlotRemaining::NoDeadline => i64::MAX,
        // At least 1: 0 means "not my slot".
        SlotRemaining::Left(d) => d.as_nanos().clamp(1, i64::MAX as u128 - 1) as i64,
    })
}

/// The switch generation in force; 0 unknown.
#[no_mangle]
pub extern "C" fn gang_slot_generation() -> u64 {
    guard(0, || crate::slot_generation().unwrap_or(0))
}

/// 1 if it yielded, 0 if not.
#[no_mangle]
pub extern "C" fn gang_yield_point() -> i32 {
    guard(0, || crate::yield_point() as i32)
}

fn timeout_of(ms: i32) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

fn wait_c(fd: i32, policy: WaitPolicy, timeout_ms: i32) -> i32 {
    guard(-1, || {
        match wait_readable(fd, policy, timeout_of(timeout_ms)) {
            Ok(o) => o.is_readable() as i32,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                -1
            }
        }
    })
}

/// The `GANG_WAIT` policy; a malformed value warns once and means block.
fn env_policy() -> WaitPolicy {
    static P: OnceLock<WaitPolicy> = OnceLock::new();
    *P.get_or_init(|| {
        crate::env::default_wait_policy().unwrap_or_else(|e| {
            // One write, so that warnings of several processes sharing
            // stderr do not interleave.
            let msg = format!("gangrt: warning: {e}; waiting with `block`\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
            WaitPolicy::Block
        })
    })
}

/// Waits for `fd` readable with the `GANG_WAIT` policy. `timeout_ms` < 0:
/// forever. 1 readable, 0 timed out, -1 error (errno).
#[no_mangle]
pub extern "C" fn gang_wait_readable(fd: i32, timeout_ms: i32) -> i32 {
    guard(-1, || wait_c(fd, env_policy(), timeout_ms))
}

/// The policy of `gang_wait_readable_policy`'s arguments, or `None` (EINVAL).
pub fn policy_of(policy: i32, spin_us: i64) -> Option<WaitPolicy> {
    let limit = || match spin_us {
        s if s < 0 => Duration::from_micros(DEFAULT_SPIN_US),
        s => Duration::from_micros(s as u64),
    };
    match policy {
        GANG_WAIT_BLOCK => Some(WaitPolicy::Block),
        GANG_WAIT_SPIN => Some(WaitPolicy::Spin(limit())),
        GANG_WAIT_ADAPTIVE => Some(WaitPolicy::Adaptive),
        GANG_WAIT_INSLOT => Some(WaitPolicy::InSlot(limit())),
        _ => None,
    }
}

/// Waits for `fd` readable with an explicit policy (`spin_us` < 0: the
/// default 200 µs; ignored by block and adaptive). Bad policy: -1, EINVAL.
#[no_mangle]
pub extern "C" fn gang_wait_readable_policy(
    fd: i32,
    policy: i32,
    spin_us: i64,
    timeout_ms: i32,
) -> i32 {
    guard(-1, || match policy_of(policy, spin_us) {
        None => {
            set_errno(libc::EINVAL);
            -1
        }
        Some(p) => wait_c(fd, p, timeout_ms),
    })
}

/// Copies the process's wait and yield counters to `*out` (NULL: nothing).
///
/// # Safety
/// `out` is NULL or points to a writable `struct gang_wait_stats`.
#[no_mangle]
pub unsafe extern "C" fn gang_wait_stats(out: *mut GangWaitStats) {
    if out.is_null() {
        return;
    }
    let s = guard(GangWaitStats::default(), || {
        let w = crate::wait_stats();
        GangWaitStats {
            waits: w.waits,
            spin_hits: w.spin_hits,
            blocks: w.blocks,
            timeouts: w.timeouts,
            spin_ns: w.spin_ns,
            yields: crate::yield_count(),
        }
    });
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { out.write(s) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_from_c() {
        assert_eq!(policy_of(0, 5), Some(WaitPolicy::Block));
        assert_eq!(
            policy_of(1, 50),
            Some(WaitPolicy::Spin(Duration::from_micros(50)))
        );
        assert_eq!(
            policy_of(1, -1),
            Some(WaitPolicy::Spin(Duration::from_micros(200)))
        );
        assert_eq!(policy_of(2, 0), Some(WaitPolicy::Adaptive));
        assert_eq!(
            policy_of(3, 7),
            Some(WaitPolicy::InSlot(Duration::from_micros(7)))
        );
        assert_eq!(policy_of(4, 0), None);
        assert_eq!(policy_of(-1, 0), None);
    }

    #[test]
    fn bad_policy_is_einval() {
        assert_eq!(gang_wait_readable_policy(0, 9, 0, 0), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn bad_fd_is_ebadf() {
        assert_eq!(gang_wait_readable_policy(-5, GANG_WAIT_BLOCK, 0, 0), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
