//! Voluntary yield at the end of the gang's slot.
//!
//! Stopping a parallel job from outside (signals, preemption) arrives late
//! and unevenly across its ranks; a rank that gives the CPU back by itself
//! when its slot is about to end costs far less ("voluntary gang
//! scheduling": the runtime library yields when the quantum ends). A rank
//! calls [`yield_point`] at convenient places (between grains of work,
//! before a blocking exchange); it yields when the slot is inside its lead
//! time, and scx_gang parks the caller until its gang's next slot.

use crate::clock::{monotonic_ns, SlotSnapshot};
use crate::clock_socket::{process_clock, SlotClock};
use crate::env;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static YIELDS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Generation this thread last yielded in.
    static YIELDED_IN: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The yield decision, pure: `gang` yields at `now_ns` only if it owns the
/// slot in force, does not own the next one too (it would keep its CPUs:
/// nothing to give), a switch is due, the switch is within the lead time,
/// and it has not yielded in this generation already.
pub fn should_yield(snap: &SlotSnapshot, gang: u32, now_ns: u64, yielded_in: Option<u64>) -> bool {
    snap.runs(gang)
        && !snap.runs_next(gang)
        && snap.slot_end_ns != 0
        && now_ns.saturating_add(snap.yield_lead_ns) >= snap.slot_end_ns
        && yielded_in != Some(snap.generation)
}

/// One yield point against `clock`, with the thread's memory of the last
/// generation yielded in passed explicitly and the yield itself supplied
/// (tests count instead of yielding). Returns whether it yielded.
pub fn yield_point_on(
    clock: &SlotClock,
    now_ns: u64,
    yielded_in: &mut Option<u64>,
    do_yield: impl FnOnce(),
) -> bool {
    let Some(snap) = clock.snapshot() else {
        return false;
    };
    if !should_yield(&snap, clock.gang(), now_ns, *yielded_in) {
        return false;
    }
    *yielded_in = Some(snap.generation);
    YIELDS.fetch_add(1, Ordering::Relaxed);
    do_yield();
    true
}

/// Yields the CPU if my gang's slot is about to end (see [`should_yield`]);
/// returns whether it did. `sched_yield()` is the yield: inside the lead
/// time scx_gang parks the caller until its gang's next slot, so the call
/// returns there. Does nothing without a clock or with `GANG_YIELD=off`.
/// Cheap when it does not yield: one read of the mapped clock page.
pub fn yield_point() -> bool {
    if !env::yield_enabled() {
        return false;
    }
    let Some(clock) = process_clock() else {
        return false;
    };
    YIELDED_IN.with(|cell| {
        let mut last = cell.get();
        let yielded = yield_point_on(clock, monotonic_ns(), &mut last, || {
            // SAFETY: no arguments; cannot fail on Linux.
            unsafe { libc::sched_yield() };
        });
        cell.set(last);
        yielded
    })
}

/// Yields taken by this process so far.
pub fn yield_count() -> u64 {
    YIELDS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GANG: u32 = 5;

    fn snap(gen: u64, end: u64, lead: u64, running: u64, next: u64) -> SlotSnapshot {
        SlotSnapshot {
            generation: gen,
            slot_start_ns: 0,
            slot_end_ns: end,
            yield_lead_ns: lead,
            running_gangs: running,
            next_gangs: next,
            slot: 0,
            nr_slots: 2,
        }
    }

    const ME: u64 = 1 << GANG;

    #[test]
    fn yields_only_inside_the_lead() {
        let s = snap(3, 1_000_000, 100_000, ME, 0);
        assert!(!should_yield(&s, GANG, 0, None));
        assert!(!should_yield(&s, GANG, 899_999, None));
        assert!(should_yield(&s, GANG, 900_000, None));
        assert!(should_yield(&s, GANG, 999_999, None));
        // Overdue (the switch is late): still inside the lead.
        assert!(should_yield(&s, GANG, 5_000_000, None));
    }

    #[test]
    fn keeps_cpus_when_in_the_next_slot_too() {
        let s = snap(3, 1_000_000, 100_000, ME, ME);
        assert!(!should_yield(&s, GANG, 950_000, None));
        // Another gang in the next slot does not matter.
        let s = snap(3, 1_000_000, 100_000, ME, 1 << 6);
        assert!(should_yield(&s, GANG, 950_000, None));
    }

    #[test]
    fn no_deadline_no_yield() {
        let s = snap(3, 0, u64::MAX, ME, 0);
        assert!(!should_yield(&s, GANG, u64::MAX, None));
    }

    #[test]
    fn not_my_slot_no_yield() {
        let s = snap(3, 1_000_000, 100_000, 1 << 4, 0);
        assert!(!should_yield(&s, GANG, 950_000, None));
    }

    #[test]
    fn once_per_generation() {
        let s = snap(3, 1_000_000, 100_000, ME, 0);
        assert!(!should_yield(&s, GANG, 950_000, Some(3)));
        assert!(should_yield(&s, GANG, 950_000, Some(2)));
        let next = snap(4, 2_000_000, 100_000, ME, 0);
        assert!(should_yield(&next, GANG, 1_950_000, Some(3)));
    }

    #[test]
    fn huge_lead_does_not_overflow() {
        let s = snap(1, 10, u64::MAX, ME, 0);
        assert!(should_yield(&s, GANG, u64::MAX, None));
    }

    proptest! {
        /// The decision is exactly the conjunction of the documented rules.
        #[test]
        fn decision_matches_the_rules(
            gen in 0u64..4, last in proptest::option::of(0u64..4),
            end in prop_oneof![Just(0u64), 1u64..10_000], lead in 0u64..5_000,
            now in 0u64..12_000, running in any::<u64>(), next in any::<u64>(),
        ) {
            let s = snap(gen, end, lead, running, next);
            let expect = running & ME != 0 && next & ME == 0 && end != 0
                && now + lead >= end && last != Some(gen);
            prop_assert_eq!(should_yield(&s, GANG, now, last), expect);
        }
    }
}
