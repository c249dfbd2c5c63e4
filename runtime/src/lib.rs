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
//!
//! Layers (a module imports only from layers below it; `layers_run_one_way`
//! below checks the `crate::` paths of every source file):
//! 0. `env.rs` (the environment, parsed), `clock.rs` (the page and the pure
//!    decisions over it), `adaptive.rs` (the adaptive spin limits);
//! 1. `clock_socket.rs`: the process's clock, asked for where `env` says;
//! 2. `wait.rs`, `yield_point.rs`: the wait policies and the yield, over
//!    the clock;
//! 3. this file's functions; 4. `ffi.rs`, the C ABI over all of it.

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

#[cfg(test)]
mod tests {
    /// Each module's layer (see the top of this file); `crate` is this file.
    const LAYERS: &[(&str, u32, &str)] = &[
        ("env", 0, include_str!("env.rs")),
        ("clock", 0, include_str!("clock.rs")),
        ("adaptive", 0, include_str!("adaptive.rs")),
        ("clock_socket", 1, include_str!("clock_socket.rs")),
        ("wait", 2, include_str!("wait.rs")),
        ("yield_point", 2, include_str!("yield_point.rs")),
        ("crate", 3, include_str!("lib.rs")),
        ("ffi", 4, include_str!("ffi.rs")),
    ];

    fn layer_of(name: &str) -> u32 {
        LAYERS
            .iter()
            .find(|(m, _, _)| *m == name)
            .map_or(3, |(_, l, _)| *l) // not a module: an item of lib.rs
    }

    /// The first path segment after every `crate::` in `src` before its
    /// tests (which may use anything), and every name of a `crate::{a,
    /// b::c}` group.
    fn crate_paths(src: &str) -> Vec<String> {
        let src = &src[..src.find("#[cfg(test)]").unwrap_or(src.len())];
        let ident = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let mut out = Vec::new();
        for (i, _) in src.match_indices("crate::") {
            let rest = &src[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(group.split(',').map(ident));
            } else {
                out.push(ident(rest));
            }
        }
        out.retain(|s| !s.is_empty()); // `crate::` named in prose
        out
    }

    #[test]
    fn paths_are_read_from_source() {
        assert_eq!(
            crate_paths("use crate::clock::X;\nuse crate::{env, wait::Y};\ncrate::f()"),
            ["clock", "env", "wait", "f"]
        );
    }

    #[test]
    fn layers_run_one_way() {
        for (module, layer, src) in LAYERS {
            for used in crate_paths(src) {
                if used == *module {
                    continue;
                }
                assert!(
                    layer_of(&used) < *layer,
                    "{module} (layer {layer}) imports {used} (layer {})",
                    layer_of(&used)
                );
            }
        }
    }

    #[test]
    fn the_environment_imports_nothing_of_the_crate() {
        assert_eq!(crate_paths(include_str!("env.rs")), Vec::<String>::new());
    }
}
