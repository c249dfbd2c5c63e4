//! The process-wide API end to end, as a rank sees it: GANG_CLOCK_SOCKET
//! points at a stand-in daemon, the first call opens the clock, and
//! slot_remaining / in_my_slot / slot_generation / yield_point and their C
//! twins read the page the "scheduler" keeps rewriting.
//!
//! One test in its own binary: the clock is opened once per process, from
//! the environment, so nothing else may run here first.

mod common;

use common::{serve_once, MemPage};
use gangrt::clock::{monotonic_ns, SlotSnapshot};
use gangrt::ffi;
use gangrt::SlotRemaining;
use std::os::fd::AsRawFd;
use std::time::Duration;

const GANG: u32 = 9;

#[test]
fn a_rank_sees_its_slot_and_yields_once_per_slot() {
    let now = monotonic_ns();
    let mut s = SlotSnapshot {
        generation: 41,
        slot_start_ns: now,
        slot_end_ns: now + 60_000_000_000, // a minute away: far from the lead
        yield_lead_ns: 1_000_000,
        running_gangs: 1 << GANG,
        next_gangs: 0,
        slot: 0,
        nr_slots: 2,
    };
    let mem = MemPage::new(&s);
    let (path, server) = serve_once(
        format!("gang {GANG}\n").into_bytes(),
        Some(mem.fd.as_raw_fd()),
    );
    // Set before the library's first use, the only test of this binary.
    std::env::set_var("GANG_CLOCK_SOCKET", &path);
    std::env::remove_var("GANG_CLOCK");
    std::env::remove_var("GANG_YIELD");

    assert_eq!(gangrt::gang_id(), Some(GANG));
    server.join().unwrap();
    assert_eq!(gangrt::slot_generation(), Some(41));
    assert_eq!(ffi::gang_slot_generation(), 41);
    assert_eq!(gangrt::in_my_slot(), Some(true));
    match gangrt::slot_remaining() {
        SlotRemaining::Left(d) => assert!(
            d > Duration::from_secs(50) && d <= Duration::from_secs(60),
            "{d:?}"
        ),
        other => panic!("{other:?}"),
    }
    let ns = ffi::gang_slot_remaining_ns();
    assert!(ns > 50_000_000_000 && ns <= 60_000_000_000, "{ns}");
    assert!(!gangrt::yield_point(), "a minute before the end");
    assert_eq!(ffi::gang_yield_point(), 0);

    // The slot is about to end: one yield, then no more in this slot.
    s.slot_end_ns = monotonic_ns() + 500_000;
    mem.write(&s);
    let before = gangrt::yield_count();
    assert!(gangrt::yield_point());
    assert!(!gangrt::yield_point());
    assert_eq!(ffi::gang_yield_point(), 0);
    assert_eq!(gangrt::yield_count(), before + 1);

    // Another thread has its own memory of the slot it yielded in.
    assert!(std::thread::spawn(gangrt::yield_point).join().unwrap());

    // Next slot (generation 42) is another gang's: not my slot.
    s.generation = 42;
    s.running_gangs = 1 << 3;
    s.slot_end_ns = monotonic_ns() + 10_000_000;
    mem.write(&s);
    assert_eq!(gangrt::in_my_slot(), Some(false));
    assert_eq!(gangrt::slot_remaining(), SlotRemaining::NotMySlot);
    assert_eq!(ffi::gang_slot_remaining_ns(), 0);
    assert!(!gangrt::yield_point());

    // Mine again and alone: no deadline, nothing to yield to.
    s.generation = 43;
    s.running_gangs = 1 << GANG;
    s.slot_end_ns = 0;
    mem.write(&s);
    assert_eq!(gangrt::slot_remaining(), SlotRemaining::NoDeadline);
    assert_eq!(ffi::gang_slot_remaining_ns(), i64::MAX);
    assert!(!gangrt::yield_point());

    // In my slot, 100 µs before the end: the C entry point yields (gen 44).
    s.generation = 44;
    s.slot_end_ns = monotonic_ns() + 100_000;
    mem.write(&s);
    assert_eq!(ffi::gang_yield_point(), 1);
    let mut st = ffi::GangWaitStats::default();
    unsafe { ffi::gang_wait_stats(&mut st) };
    assert_eq!(st.yields, before + 3);
    unsafe { ffi::gang_wait_stats(std::ptr::null_mut()) };

    // InSlot waits follow the process clock: out of my slot they block at
    // once, in it they spin.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    s.generation = 45;
    s.running_gangs = 1 << 3;
    mem.write(&s);
    assert_eq!(gangrt::wait::in_slot_now(), Some(false));
    let out = gangrt::wait_readable(
        a.as_raw_fd(),
        gangrt::WaitPolicy::InSlot(Duration::from_secs(5)),
        Some(Duration::from_millis(20)),
    )
    .unwrap();
    assert_eq!(out.spun, Duration::ZERO);
    s.running_gangs = 1 << GANG;
    s.slot_end_ns = 0;
    mem.write(&s);
    assert_eq!(gangrt::wait::in_slot_now(), Some(true));
    let out = gangrt::wait_readable(
        a.as_raw_fd(),
        gangrt::WaitPolicy::InSlot(Duration::from_millis(10)),
        Some(Duration::from_millis(20)),
    )
    .unwrap();
    assert!(out.spun >= Duration::from_millis(10), "{out:?}");
    drop(b);
}
