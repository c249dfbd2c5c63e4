//! gangrt — the runtime library of a rank under scx_gang.
//!
//! A rank (one process of a parallel job) uses it to see its gang's time
//! slot on this node, to give the CPU back by itself when the slot is about
//! to end, and to wait for messages without burning CPU its gang does not
//! own. Every part degrades gracefully without a scheduler: no clock means
//! "unknown" slot, no yields, and waits that behave like plain
//! spin-then-block.
//!
//! * [`slot_snapshot`], [`slot_remaining`], [`slot_generation`],
//!   [`in_my_slot`]: the slot clock (`clock.rs`, `clock_socket.rs`);
//! * [`yield_point`]: voluntary yield at the end of the slot;
//! * [`wait_readable`]: two-phase spin-block waits (`wait.rs`,
//!   `adaptive.rs`);
//! * the C ABI in `ffi.rs`, declared in `include/gangrt.h`;
//! * environment (`GANG_CLOCK`, `GANG_CLOCK_SOCKET`, `GANG_YIELD`,
//!   `GANG_WAIT`) in `env.rs`.

pub mod adaptive;
pub mod clock;
pub mod clock_socket;
pub mod env;
pub mod ffi;
pub mod wait;
pub mod yield_point;

pub use clock::{monotonic_ns, SlotClockPage, SlotRemaining, SlotSnapshot};
pub use env::{default_wait_policy, parse_wait_policy, WaitPolicyError};
pub use wait::{wait_readable, wait_stats, WaitEnd, WaitOutcome, WaitPolicy, WaitStats};
pub use yield_point::{yield_count, yield_point};

use clock_socket::process_clock;

/// A consistent copy of this process's clock page; `None` without a clock
/// (or if the page would not settle).
pub fn slot_snapshot() -> Option<SlotSnapshot> {
    process_clock()?.snapshot()
}

/// This process's gang id on this node, if it has a clock.
pub fn gang_id() -> Option<u32> {
    process_clock().map(|c| c.gang())
}

/// How much of my gang's slot is left now.
pub fn slot_remaining() -> SlotRemaining {
    match process_clock() {
        None => SlotRemaining::Unknown,
        Some(c) => clock::remaining_of(c.snapshot().as_ref(), c.gang(), monotonic_ns()),
    }
}

/// The switch generation in force (changes at every slot switch).
pub fn slot_generation() -> Option<u64> {
    slot_snapshot().map(|s| s.generation)
}

/// Does my gang own CPUs in the slot in force? `None` without a clock.
pub fn in_my_slot() -> Option<bool> {
    let c = process_clock()?;
    Some(c.snapshot()?.runs(c.gang()))
}
