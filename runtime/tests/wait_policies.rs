//! wait_readable under every policy over a socketpair: messages sent after
//! 0, 1 and 20 ms always arrive (no loss, no hang), timeouts time out,
//! hang-up is readable, the spin phase follows the policy.

mod common;

use common::socketpair;
use gangrt::wait::{wait_readable_with, wait_stats, WaitEnd, WaitOutcome, WaitPolicy};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The clock as a test sees fit: no clock, in my slot, out of it.
const NO_CLOCK: &dyn Fn() -> Option<bool> = &|| None;
const IN_SLOT: &dyn Fn() -> Option<bool> = &|| Some(true);
const OUT_OF_SLOT: &dyn Fn() -> Option<bool> = &|| Some(false);

fn policies() -> Vec<(WaitPolicy, &'static dyn Fn() -> Option<bool>)> {
    vec![
        (WaitPolicy::Block, NO_CLOCK),
        (WaitPolicy::Spin(Duration::from_micros(200)), NO_CLOCK),
        (WaitPolicy::Spin(ms(5)), NO_CLOCK),
        (WaitPolicy::Adaptive, NO_CLOCK),
        (WaitPolicy::InSlot(Duration::from_micros(200)), NO_CLOCK),
        (WaitPolicy::InSlot(Duration::from_micros(200)), IN_SLOT),
        (WaitPolicy::InSlot(Duration::from_micros(200)), OUT_OF_SLOT),
    ]
}

/// Sends `byte` on `tx` after `delay` (from another thread), waits on
/// `rx`, reads it back.
fn exchange(
    rx: &mut UnixStream,
    tx: &UnixStream,
    delay: Duration,
    byte: u8,
    policy: WaitPolicy,
    in_slot: &dyn Fn() -> Option<bool>,
) -> WaitOutcome {
    let mut tx = tx.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(delay);
        tx.write_all(&[byte]).unwrap();
    });
    let out = wait_readable_with(rx.as_raw_fd(), policy, Some(LONG), in_slot).unwrap();
    assert!(out.is_readable(), "{policy:?} after {delay:?}: {out:?}");
    assert!(out.waited < LONG, "{out:?}");
    let mut b = [0u8];
    rx.read_exact(&mut b).unwrap();
    assert_eq!(b[0], byte, "{policy:?}: message out of order");
    sender.join().unwrap();
    out
}

#[test]
fn every_message_arrives_under_every_policy() {
    for (policy, in_slot) in policies() {
        let (mut rx, tx) = socketpair();
        let mut byte = 0u8;
        for _round in 0..3 {
            for delay in [ms(0), ms(1), ms(20)] {
                byte = byte.wrapping_add(1);
                let out = exchange(&mut rx, &tx, delay, byte, policy, in_slot);
                if delay == ms(20) {
                    assert!(
                        out.waited >= ms(15),
                        "{policy:?}: readable before the send? {out:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn block_never_spins() {
    let (mut rx, tx) = socketpair();
    let out = exchange(&mut rx, &tx, ms(5), 1, WaitPolicy::Block, NO_CLOCK);
    assert_eq!(out.end, WaitEnd::ReadyBlocked);
    assert_eq!(out.spun, Duration::ZERO);
}

#[test]
fn a_long_spin_catches_a_near_message_spinning() {
    let (mut rx, tx) = socketpair();
    for policy in [WaitPolicy::Spin(LONG / 2), WaitPolicy::InSlot(LONG / 2)] {
        let out = exchange(&mut rx, &tx, ms(1), 1, policy, NO_CLOCK);
        assert_eq!(out.end, WaitEnd::ReadySpinning, "{policy:?}");
        assert!(out.spun <= out.waited, "{out:?}");
    }
    let out = exchange(
        &mut rx,
        &tx,
        ms(1),
        2,
        WaitPolicy::InSlot(LONG / 2),
        IN_SLOT,
    );
    assert_eq!(out.end, WaitEnd::ReadySpinning);
}

#[test]
fn a_short_spin_then_blocks() {
    let (mut rx, tx) = socketpair();
    let out = exchange(
        &mut rx,
        &tx,
        ms(200),
        1,
        WaitPolicy::Spin(Duration::from_micros(100)),
        NO_CLOCK,
    );
    assert_eq!(out.end, WaitEnd::ReadyBlocked);
    assert!(out.spun >= Duration::from_micros(100), "{out:?}");
    assert!(out.spun < ms(150), "{out:?}");
}

#[test]
fn inslot_blocks_at_once_out_of_my_slot() {
    let (mut rx, tx) = socketpair();
    let out = exchange(
        &mut rx,
        &tx,
        ms(5),
        1,
        WaitPolicy::InSlot(LONG / 2),
        OUT_OF_SLOT,
    );
    assert_eq!(out.end, WaitEnd::ReadyBlocked);
    assert_eq!(out.spun, Duration::ZERO);
}

#[test]
fn inslot_stops_spinning_when_the_slot_ends() {
    // The slot ends after a few looks at the clock: the spin stops there,
    // long before its 5 s limit and before the message comes (300 ms).
    let looks = AtomicU32::new(0);
    let in_slot = || Some(looks.fetch_add(1, Ordering::Relaxed) < 5);
    let (mut rx, tx) = socketpair();
    let out = exchange(
        &mut rx,
        &tx,
        ms(300),
        1,
        WaitPolicy::InSlot(LONG / 2),
        &in_slot,
    );
    assert_eq!(out.end, WaitEnd::ReadyBlocked);
    assert!(out.spun < ms(250), "{out:?}");
    assert!(looks.load(Ordering::Relaxed) >= 6);
}

#[test]
fn timeouts_time_out() {
    for (policy, in_slot) in policies() {
        let (rx, _tx) = socketpair();
        let t0 = Instant::now();
        let out = wait_readable_with(rx.as_raw_fd(), policy, Some(ms(30)), in_slot).unwrap();
        assert_eq!(out.end, WaitEnd::TimedOut, "{policy:?}");
        assert!(!out.is_readable());
        assert!(t0.elapsed() >= ms(30), "{policy:?} returned early");
        assert!(t0.elapsed() < ms(2000), "{policy:?} overslept");
    }
    // A spin longer than the timeout is cut by it.
    let (rx, _tx) = socketpair();
    let t0 = Instant::now();
    let out = wait_readable_with(
        rx.as_raw_fd(),
        WaitPolicy::Spin(LONG),
        Some(ms(20)),
        NO_CLOCK,
    )
    .unwrap();
    assert_eq!(out.end, WaitEnd::TimedOut);
    assert!(t0.elapsed() < ms(2000));
    // Zero: a probe.
    let out = wait_readable_with(
        rx.as_raw_fd(),
        WaitPolicy::Adaptive,
        Some(Duration::ZERO),
        NO_CLOCK,
    )
    .unwrap();
    assert_eq!(out.end, WaitEnd::TimedOut);
}

#[test]
fn hang_up_is_readable() {
    for (policy, in_slot) in policies() {
        let (mut rx, tx) = socketpair();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(ms(2));
            drop(tx);
        });
        let out = wait_readable_with(rx.as_raw_fd(), policy, Some(LONG), in_slot).unwrap();
        assert!(out.is_readable(), "{policy:?}: {out:?}");
        let mut b = [0u8; 1];
        assert_eq!(rx.read(&mut b).unwrap(), 0, "EOF after hang-up");
        closer.join().unwrap();
    }
}

#[test]
fn bad_fds_are_errors_not_hangs() {
    for (policy, in_slot) in policies() {
        let e = wait_readable_with(-1, policy, None, in_slot).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }
    // A closed fd number (very likely unused).
    let e = wait_readable_with(987_654, WaitPolicy::Block, None, NO_CLOCK).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF));
}

extern "C" fn nop(_: libc::c_int) {}

#[test]
fn signals_do_not_end_the_wait() {
    unsafe { libc::signal(libc::SIGUSR2, nop as *const () as libc::sighandler_t) };
    let (mut rx, tx) = socketpair();
    let me = unsafe { libc::pthread_self() };
    let mut tx2 = tx.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for _ in 0..5 {
            std::thread::sleep(ms(5));
            unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
        }
        std::thread::sleep(ms(5));
        tx2.write_all(&[9]).unwrap();
    });
    let out = wait_readable_with(rx.as_raw_fd(), WaitPolicy::Block, Some(LONG), NO_CLOCK).unwrap();
    assert_eq!(out.end, WaitEnd::ReadyBlocked);
    assert!(out.waited >= ms(25), "{out:?}");
    let mut b = [0u8];
    rx.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 9);
    sender.join().unwrap();
    // A timeout interrupted by signals still lasts its full length.
    let kicker = std::thread::spawn(move || {
        for _ in 0..4 {
            std::thread::sleep(ms(5));
            unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
        }
    });
    let t0 = Instant::now();
    let out =
        wait_readable_with(rx.as_raw_fd(), WaitPolicy::Block, Some(ms(40)), NO_CLOCK).unwrap();
    assert_eq!(out.end, WaitEnd::TimedOut);
    assert!(t0.elapsed() >= ms(40));
    kicker.join().unwrap();
    drop(tx);
}

#[test]
fn counters_count() {
    let before = wait_stats();
    let (mut rx, tx) = socketpair();
    exchange(&mut rx, &tx, ms(0), 1, WaitPolicy::Spin(LONG / 2), NO_CLOCK);
    exchange(&mut rx, &tx, ms(5), 2, WaitPolicy::Block, NO_CLOCK);
    let _ = wait_readable_with(rx.as_raw_fd(), WaitPolicy::Block, Some(ms(1)), NO_CLOCK).unwrap();
    let after = wait_stats();
    // Other tests run concurrently: at least our own waits are counted.
    assert!(after.waits >= before.waits + 3);
    assert!(after.spin_hits > before.spin_hits);
    assert!(after.blocks >= before.blocks + 2);
    assert!(after.timeouts > before.timeouts);
}
