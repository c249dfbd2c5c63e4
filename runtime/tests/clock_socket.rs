//! The clock socket protocol end to end on the host: a stand-in daemon
//! passes a memfd holding a clock page, the library maps and reads it;
//! every kind of bad or missing answer means "no clock", never a panic.

mod common;

use common::{serve_once, MemPage};
use gangrt::clock::{SlotRemaining, SlotSnapshot};
use gangrt::clock_socket::{open_clock, ClockOpen};
use gangrt::yield_point::yield_point_on;
use std::os::fd::AsRawFd;
use std::time::Duration;

fn page(gen: u64) -> SlotSnapshot {
    SlotSnapshot {
        generation: gen,
        slot_start_ns: 1_000,
        slot_end_ns: 2_000_000,
        yield_lead_ns: 100_000,
        running_gangs: 1 << 5,
        next_gangs: 1 << 2,
        slot: 1,
        nr_slots: 3,
    }
}

#[test]
fn gang_line_with_memfd_is_mapped_and_read() {
    let mem = MemPage::new(&page(7));
    let (path, server) = serve_once(b"gang 5\n".to_vec(), Some(mem.fd.as_raw_fd()));
    let st = open_clock(&path);
    server.join().unwrap();
    let ClockOpen::Mapped(clock) = st else {
        panic!("expected a clock, got {st:?}")
    };
    assert_eq!(clock.gang(), 5);
    assert_eq!(clock.snapshot(), Some(page(7)));
    let s = clock.snapshot().unwrap();
    assert_eq!(
        s.remaining(5, 1_500_000),
        SlotRemaining::Left(Duration::from_micros(500))
    );
    assert_eq!(s.remaining(2, 1_500_000), SlotRemaining::NotMySlot);

    // The mapping is shared: the "scheduler" switches, the library sees it.
    let mut next = page(8);
    next.running_gangs = 1 << 2;
    mem.write(&next);
    assert_eq!(clock.snapshot(), Some(next));
}

#[test]
fn yield_point_over_a_mapped_clock() {
    let mem = MemPage::new(&page(7));
    let (path, server) = serve_once(b"gang 5\n".to_vec(), Some(mem.fd.as_raw_fd()));
    let st = open_clock(&path);
    server.join().unwrap();
    let clock = st.clock().expect("clock");
    let mut last = None;
    let mut yields = 0;
    // Before the lead: no yield.
    assert!(!yield_point_on(clock, 1_000_000, &mut last, || yields += 1));
    // Inside the lead: one yield, then none in the same generation.
    assert!(yield_point_on(clock, 1_950_000, &mut last, || yields += 1));
    assert!(!yield_point_on(clock, 1_960_000, &mut last, || yields += 1));
    assert_eq!((yields, last), (1, Some(7)));
    // Next generation, my gang also in the next slot: keeps its CPUs.
    let mut g8 = page(8);
    g8.slot_end_ns = 4_000_000;
    g8.next_gangs = 1 << 5;
    mem.write(&g8);
    assert!(!yield_point_on(clock, 3_950_000, &mut last, || yields += 1));
    // Not in it after all: yields once in generation 8.
    g8.next_gangs = 0;
    mem.write(&g8);
    assert!(yield_point_on(clock, 3_950_000, &mut last, || yields += 1));
    assert_eq!((yields, last), (2, Some(8)));
}

#[test]
fn none_line_means_no_gang() {
    let (path, server) = serve_once(b"none not in a gang\n".to_vec(), None);
    let st = open_clock(&path);
    server.join().unwrap();
    match st {
        ClockOpen::NoGang(r) => assert_eq!(r, "not in a gang"),
        other => panic!("{other:?}"),
    }
}

fn assert_unavailable(st: ClockOpen) {
    assert!(matches!(st, ClockOpen::Unavailable(_)), "{st:?}");
}

#[test]
fn gang_line_without_fd_is_no_clock() {
    let (path, server) = serve_once(b"gang 5\n".to_vec(), None);
    assert_unavailable(open_clock(&path));
    server.join().unwrap();
}

#[test]
fn garbage_line_is_no_clock_and_the_fd_is_not_kept() {
    let mem = MemPage::new(&page(1));
    let (path, server) = serve_once(b"hello there\n".to_vec(), Some(mem.fd.as_raw_fd()));
    assert_unavailable(open_clock(&path));
    server.join().unwrap();
}

#[test]
fn bad_gang_id_is_no_clock() {
    let mem = MemPage::new(&page(1));
    let (path, server) = serve_once(b"gang 64\n".to_vec(), Some(mem.fd.as_raw_fd()));
    assert_unavailable(open_clock(&path));
    server.join().unwrap();
}

#[test]
fn no_newline_or_silent_close_is_no_clock() {
    let (path, server) = serve_once(b"gang 5".to_vec(), None);
    assert_unavailable(open_clock(&path));
    server.join().unwrap();
    let (path, server) = serve_once(Vec::new(), None);
    assert_unavailable(open_clock(&path));
    server.join().unwrap();
}

#[test]
fn unmappable_fd_is_no_clock() {
    // A pipe cannot be mmapped.
    let mut p = [0; 2];
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    let (path, server) = serve_once(b"gang 5\n".to_vec(), Some(p[0]));
    assert_unavailable(open_clock(&path));
    server.join().unwrap();
    unsafe { libc::close(p[0]) };
    unsafe { libc::close(p[1]) };
}

#[test]
fn missing_or_refusing_socket_is_no_clock() {
    let dir = common::temp_dir("missing");
    assert_unavailable(open_clock(&dir.path().join("clock.sock")));
    // A socket file nobody listens on: connection refused.
    let path = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert_unavailable(open_clock(&path));
}
