//! The seqcount reader never returns a torn snapshot: a writer thread
//! rewrites a page as fast as it can, every field equal to one counter;
//! every snapshot the reader accepts must have all fields equal.

mod common;

use common::MemPage;
use gangrt::clock::{read_page, SlotSnapshot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn all(v: u64) -> SlotSnapshot {
    SlotSnapshot {
        generation: v,
        slot_start_ns: v,
        slot_end_ns: v,
        yield_lead_ns: v,
        running_gangs: v,
        next_gangs: v,
        slot: v as u32,
        nr_slots: v as u32,
    }
}

#[test]
fn reader_never_sees_a_torn_page() {
    let mem = Arc::new(MemPage::new(&all(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mem, stop) = (mem.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut v = 0u64;
            while !stop.load(Ordering::Relaxed) {
                v += 1;
                mem.write(&all(v));
                // A short pause now and then so the reader is not starved.
                if v % 16 == 0 {
                    std::hint::spin_loop();
                }
            }
            v
        })
    };
    let (mut good, mut unknown, mut last) = (0u64, 0u64, 0u64);
    let end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < end || good < 1000 {
        match unsafe { read_page(mem.page) } {
            None => unknown += 1,
            Some(s) => {
                let v = s.generation;
                assert_eq!(s, all(v), "torn snapshot");
                assert!(v >= last, "went back in time: {v} after {last}");
                last = v;
                good += 1;
            }
        }
        if Instant::now() > end + Duration::from_secs(20) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    eprintln!("{good} consistent reads, {unknown} gave up, {writes} writes");
    assert!(good >= 1000, "only {good} consistent reads");
    assert!(writes > 1000, "the writer barely ran ({writes} writes)");
}
