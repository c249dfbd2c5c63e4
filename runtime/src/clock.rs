//! The gang's slot clock as the node scheduler publishes it.
//!
//! scx_gang keeps a `struct gang_slot_clock` (bpf/intf.h) per gang, each
//! in a BPF array map of its own, and rewrites them at every slot switch
//! under a sequence count. This
//! module mirrors that struct, reads it without tearing (seqcount protocol)
//! into a plain [`SlotSnapshot`], and holds the *pure* decisions over a
//! snapshot (does my gang own the slot, how long is left), so that they can
//! be tested without a scheduler. Where the page comes from is
//! `clock_socket.rs`.

use std::hint::spin_loop;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Mirror of `struct gang_slot_clock` (bpf/intf.h): same field order, same
/// types. The scheduler writes it; this library only reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotClockPage {
    /// Sequence count: odd while the scheduler rewrites the page.
    pub seq: u64,
    /// Switch generation in force.
    pub generation: u64,
    /// CLOCK_MONOTONIC time the slot began (ns).
    pub slot_start_ns: u64,
    /// When the next switch is due (CLOCK_MONOTONIC ns); 0: none is.
    pub slot_end_ns: u64,
    /// yield_point() yields this close to the end of the slot (ns).
    pub yield_lead_ns: u64,
    /// Bit mask of the gangs owning CPUs in the slot in force.
    pub running_gangs: u64,
    /// Bit mask of the gangs owning CPUs in the slot after it.
    pub next_gangs: u64,
    /// Slot in force.
    pub slot: u32,
    /// Slots in the table.
    pub nr_slots: u32,
}

const _: () = assert!(std::mem::size_of::<SlotClockPage>() == 64);
const _: () = assert!(std::mem::align_of::<SlotClockPage>() == 8);

/// A consistent copy of the clock page (everything but the sequence count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotSnapshot {
    pub generation: u64,
    pub slot_start_ns: u64,
    pub slot_end_ns: u64,
    pub yield_lead_ns: u64,
    pub running_gangs: u64,
    pub next_gangs: u64,
    pub slot: u32,
    pub nr_slots: u32,
}

/// How much of my gang's slot is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRemaining {
    /// No clock: no scheduler, not in a gang, or the page could not be read.
    Unknown,
    /// My gang owns no CPU in the slot in force.
    NotMySlot,
    /// My gang runs and no switch is due (e.g. it is alone).
    NoDeadline,
    /// My gang runs and the slot ends in this long (zero once overdue).
    Left(Duration),
}

/// Attempts at a consistent read before giving up as "unknown". A rewrite
/// of the page takes well under a microsecond and happens once per slot, so
/// running out means the writer is gone mid-update or the page is garbage.
pub const SEQ_READ_ATTEMPTS: u32 = 1000;

/// The bit of `gang` in `running_gangs` / `next_gangs` (0 for ids >= 64).
pub fn gang_bit(gang: u32) -> u64 {
    if gang < 64 {
        1u64 << gang
    } else {
        0
    }
}

impl SlotSnapshot {
    /// Does `gang` own CPUs in the slot in force?
    pub fn runs(&self, gang: u32) -> bool {
        self.running_gangs & gang_bit(gang) != 0
    }

    /// Does `gang` own CPUs in the slot after this one as well?
    pub fn runs_next(&self, gang: u32) -> bool {
        self.next_gangs & gang_bit(gang) != 0
    }

    /// What is left of `gang`'s slot at `now_ns` (CLOCK_MONOTONIC).
    pub fn remaining(&self, gang: u32, now_ns: u64) -> SlotRemaining {
        if !self.runs(gang) {
            SlotRemaining::NotMySlot
        } else if self.slot_end_ns == 0 {
            SlotRemaining::NoDeadline
        } else {
            SlotRemaining::Left(Duration::from_nanos(
                self.slot_end_ns.saturating_sub(now_ns),
            ))
        }
    }
}

/// [`SlotSnapshot::remaining`], with "no snapshot" meaning `Unknown`.
pub fn remaining_of(snap: Option<&SlotSnapshot>, gang: u32, now_ns: u64) -> SlotRemaining {
    match snap {
        None => SlotRemaining::Unknown,
        Some(s) => s.remaining(gang, now_ns),
    }
}

/// Reads a clock page with the seqcount protocol: the sequence count with
/// Acquire (odd: a rewrite is under way, retry), every field, an Acquire
/// fence, the count again (changed: retry). Gives up with `None` after
/// [`SEQ_READ_ATTEMPTS`].
///
/// The fields are read as relaxed atomics: the same plain loads a volatile
/// read would compile to, but defined under Rust's memory model while
/// another CPU writes them.
///
/// # Safety
/// `page` must point to a readable, 8-byte aligned `SlotClockPage` that
/// stays mapped for the duration of the call.
pub unsafe fn read_page(page: *const SlotClockPage) -> Option<SlotSnapshot> {
    // SAFETY (all derefs): the caller guarantees a live, aligned page; the
    // atomic types have the size and alignment of the fields they view.
    let a64 = |p: *const u64| unsafe { &*(p as *const AtomicU64) };
    let a32 = |p: *const u32| unsafe { &*(p as *const AtomicU32) };
    let seq = a64(std::ptr::addr_of!((*page).seq));
    for _ in 0..SEQ_READ_ATTEMPTS {
        let before = seq.load(Ordering::Acquire);
        if before & 1 != 0 {
            spin_loop();
            continue;
        }
        let r = Ordering::Relaxed;
        let snap = SlotSnapshot {
            generation: a64(std::ptr::addr_of!((*page).generation)).load(r),
            slot_start_ns: a64(std::ptr::addr_of!((*page).slot_start_ns)).load(r),
            slot_end_ns: a64(std::ptr::addr_of!((*page).slot_end_ns)).load(r),
            yield_lead_ns: a64(std::ptr::addr_of!((*page).yield_lead_ns)).load(r),
            running_gangs: a64(std::ptr::addr_of!((*page).running_gangs)).load(r),
            next_gangs: a64(std::ptr::addr_of!((*page).next_gangs)).load(r),
            slot: a32(std::ptr::addr_of!((*page).slot)).load(r),
            nr_slots: a32(std::ptr::addr_of!((*page).nr_slots)).load(r),
        };
        fence(Ordering::Acquire);
        if seq.load(Ordering::Relaxed) == before {
            return Some(snap);
        }
        spin_loop();
    }
    None
}

/// Writes a clock page with the writer's half of the protocol (count odd,
/// Release fence, fields, count even with Release). The scheduler does this
/// in BPF; the library only needs it to serve pages in tests and tools.
///
/// # Safety
/// `page` must point to a writable, 8-byte aligned `SlotClockPage` with a
/// single writer.
pub unsafe fn write_page(page: *mut SlotClockPage, snap: &SlotSnapshot) {
    // SAFETY: as for read_page, and the caller is the only writer.
    let a64 = |p: *mut u64| unsafe { &*(p as *const AtomicU64) };
    let a32 = |p: *mut u32| unsafe { &*(p as *const AtomicU32) };
    let seq = a64(std::ptr::addr_of_mut!((*page).seq));
    let s = seq.load(Ordering::Relaxed);
    let odd = s | 1;
    seq.store(odd, Ordering::Relaxed);
    fence(Ordering::Release);
    let r = Ordering::Relaxed;
    a64(std::ptr::addr_of_mut!((*page).generation)).store(snap.generation, r);
    a64(std::ptr::addr_of_mut!((*page).slot_start_ns)).store(snap.slot_start_ns, r);
    a64(std::ptr::addr_of_mut!((*page).slot_end_ns)).store(snap.slot_end_ns, r);
    a64(std::ptr::addr_of_mut!((*page).yield_lead_ns)).store(snap.yield_lead_ns, r);
    a64(std::ptr::addr_of_mut!((*page).running_gangs)).store(snap.running_gangs, r);
    a64(std::ptr::addr_of_mut!((*page).next_gangs)).store(snap.next_gangs, r);
    a32(std::ptr::addr_of_mut!((*page).slot)).store(snap.slot, r);
    a32(std::ptr::addr_of_mut!((*page).nr_slots)).store(snap.nr_slots, r);
    seq.store(odd.wrapping_add(1), Ordering::Release);
}

/// CLOCK_MONOTONIC now, in ns: the time base of the clock page. The
/// daemons read the same clock through gang_wire::time::monotonic_ns; this
/// library is linked into users' programs (C ABI) and depends on libc
/// alone, so it keeps its own four lines rather than the wire crate.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(running: u64, end: u64) -> SlotSnapshot {
        SlotSnapshot {
            running_gangs: running,
            slot_end_ns: end,
            ..Default::default()
        }
    }

    #[test]
    fn remaining_cases() {
        assert_eq!(remaining_of(None, 3, 0), SlotRemaining::Unknown);
        assert_eq!(snap(1 << 4, 100).remaining(3, 0), SlotRemaining::NotMySlot);
        assert_eq!(snap(1 << 3, 0).remaining(3, 50), SlotRemaining::NoDeadline);
        assert_eq!(
            snap(1 << 3, 100).remaining(3, 40),
            SlotRemaining::Left(Duration::from_nanos(60))
        );
        // Overdue: zero left, not a wrap-around.
        assert_eq!(
            snap(1 << 3, 100).remaining(3, 400),
            SlotRemaining::Left(Duration::ZERO)
        );
        // Gang 63 is the top bit; ids beyond are in no slot.
        assert!(snap(1 << 63, 0).runs(63));
        assert!(!snap(u64::MAX, 0).runs(64));
    }

    #[test]
    fn layout_matches_intf_h() {
        use std::mem::offset_of;
        let offsets = [
            offset_of!(SlotClockPage, seq),
            offset_of!(SlotClockPage, generation),
            offset_of!(SlotClockPage, slot_start_ns),
            offset_of!(SlotClockPage, slot_end_ns),
            offset_of!(SlotClockPage, yield_lead_ns),
            offset_of!(SlotClockPage, running_gangs),
            offset_of!(SlotClockPage, next_gangs),
            offset_of!(SlotClockPage, slot),
            offset_of!(SlotClockPage, nr_slots),
        ];
        assert_eq!(offsets, [0, 8, 16, 24, 32, 40, 48, 56, 60]);
    }

    #[test]
    fn page_round_trip() {
        let mut page = SlotClockPage::default();
        let s = SlotSnapshot {
            generation: 7,
            slot_start_ns: 1,
            slot_end_ns: 2,
            yield_lead_ns: 3,
            running_gangs: 4,
            next_gangs: 5,
            slot: 6,
            nr_slots: 8,
        };
        unsafe { write_page(&mut page, &s) };
        assert_eq!(page.seq, 2);
        assert_eq!(unsafe { read_page(&page) }, Some(s));
    }

    #[test]
    fn odd_sequence_is_unknown() {
        let page = SlotClockPage {
            seq: 5,
            generation: 1,
            ..Default::default()
        };
        assert_eq!(unsafe { read_page(&page) }, None);
    }

    #[test]
    fn monotonic_advances() {
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        assert!(monotonic_ns() >= a + 2_000_000);
    }
}
