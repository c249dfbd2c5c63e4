//! How long an adaptive two-phase wait spins before it blocks.
//!
//! Two-phase spin-block (implicit co-scheduling) spins first, hoping the
//! peer is running and answers soon, then blocks to give the CPU away. The
//! spin time decides everything: too short and a message arriving just
//! after it costs a block plus a wakeup (and, under a time-sharing
//! scheduler, possibly the rest of the slot); too long and the CPU burns
//! while the peer is not even scheduled. The fixed rule of the original
//! work spins about twice a context switch, i.e. about the cost of one
//! block + wakeup, which bounds the loss to twice the best choice; the
//! evaluation in seed 003 found no single spin time good for both CG and FT
//! (CG got slower with longer spins, FT slightly faster). So the time is
//! adapted, per fd, from what the recent waits on it needed:
//!
//! * start at [`BLOCK_COST_NS`] (= 2 × [`CONTEXT_SWITCH_NS`]);
//! * **late hit** — readable while spinning but in the last quarter of the
//!   spin: grow by a quarter (the spin was barely enough);
//! * **near miss** — readable after blocking, within one more spin length
//!   (or one block cost, if larger) after the spin ended: double (spinning
//!   that much longer would have cost less than the block and wakeup);
//! * **far miss** — readable (or timed out) later than that: halve (the peer
//!   was likely descheduled; spinning was pure loss);
//! * early hits and uninformative timeouts (shorter than a far miss) leave
//!   it alone;
//! * always within [`MIN_SPIN_NS`]..=[`MAX_SPIN_NS`] (10 µs .. 2 ms).
//!
//! Doubling and halving react within a few waits when the communication
//! pattern changes, and the bounds keep one burst of either kind from
//! turning the wait into pure blocking or a slot-long busy loop. Caveat from
//! seed 003: when receive buffers stay full, a hit while spinning may be an
//! old, buffered message from a peer already switched out; hits then
//! overstate co-scheduling, which is what the `InSlot` policy (spin only in
//! my gang's slot) avoids.

use std::sync::atomic::{AtomicU64, Ordering};

/// Rough cost of one context switch on current Linux hardware.
pub const CONTEXT_SWITCH_NS: u64 = 10_000;
/// Rough cost of blocking in poll() and being woken again: two switches.
pub const BLOCK_COST_NS: u64 = 2 * CONTEXT_SWITCH_NS;
/// Shortest adaptive spin.
pub const MIN_SPIN_NS: u64 = 10_000;
/// Longest adaptive spin.
pub const MAX_SPIN_NS: u64 = 2_000_000;
/// Spin of an fd not waited on before.
pub const INITIAL_SPIN_NS: u64 = BLOCK_COST_NS;

/// What one wait taught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Readable while spinning, `waited_ns` after the wait began.
    Hit { spin_ns: u64, waited_ns: u64 },
    /// Readable after blocking; `spun_ns` of spinning came first.
    Blocked { spun_ns: u64, waited_ns: u64 },
    /// Not readable within the caller's timeout.
    TimedOut { spun_ns: u64, waited_ns: u64 },
}

fn clamp(ns: u64) -> u64 {
    ns.clamp(MIN_SPIN_NS, MAX_SPIN_NS)
}

/// The next spin time after `current`, given what a wait observed.
pub fn next_spin(current: u64, obs: Observation) -> u64 {
    let current = clamp(current);
    let far = |spun: u64, waited: u64| waited.saturating_sub(spun) > spun.max(BLOCK_COST_NS);
    clamp(match obs {
        Observation::Hit { spin_ns, waited_ns } => {
            if waited_ns.saturating_mul(4) >= spin_ns.saturating_mul(3) {
                current + current / 4
            } else {
                current
            }
        }
        Observation::Blocked { spun_ns, waited_ns } => {
            if far(spun_ns, waited_ns) {
                current / 2
            } else {
                current.saturating_mul(2)
            }
        }
        Observation::TimedOut { spun_ns, waited_ns } => {
            if far(spun_ns, waited_ns) {
                current / 2
            } else {
                current
            }
        }
    })
}

/// Per-fd spin times for fds below this; higher fds share one slot.
const TRACKED_FDS: usize = 1024;

/// Spin times in ns, 0 meaning "not waited on yet". Threads waiting on the
/// same fd race benignly: the last update wins.
static SPIN_NS: [AtomicU64; TRACKED_FDS + 1] = [const { AtomicU64::new(0) }; TRACKED_FDS + 1];

fn cell(fd: i32) -> &'static AtomicU64 {
    let i = usize::try_from(fd)
        .ok()
        .filter(|&i| i < TRACKED_FDS)
        .unwrap_or(TRACKED_FDS);
    &SPIN_NS[i]
}

/// The spin time to use for the next wait on `fd`.
pub fn spin_for(fd: i32) -> u64 {
    match cell(fd).load(Ordering::Relaxed) {
        0 => INITIAL_SPIN_NS,
        ns => ns,
    }
}

/// Feeds what a wait on `fd` observed back into its spin time.
pub fn observe(fd: i32, obs: Observation) {
    let c = cell(fd);
    c.store(next_spin(spin_for(fd), obs), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rules() {
        let s = 100_000;
        // Early hit: unchanged; late hit: +25 %.
        assert_eq!(
            next_spin(
                s,
                Observation::Hit {
                    spin_ns: s,
                    waited_ns: 10_000
                }
            ),
            s
        );
        assert_eq!(
            next_spin(
                s,
                Observation::Hit {
                    spin_ns: s,
                    waited_ns: 80_000
                }
            ),
            125_000
        );
        // Near miss: doubled; far miss: halved.
        assert_eq!(
            next_spin(
                s,
                Observation::Blocked {
                    spun_ns: s,
                    waited_ns: 150_000
                }
            ),
            200_000
        );
        assert_eq!(
            next_spin(
                s,
                Observation::Blocked {
                    spun_ns: s,
                    waited_ns: 5_000_000
                }
            ),
            50_000
        );
        // A far timeout halves, a short one teaches nothing.
        assert_eq!(
            next_spin(
                s,
                Observation::TimedOut {
                    spun_ns: s,
                    waited_ns: 1_000_000
                }
            ),
            50_000
        );
        assert_eq!(
            next_spin(
                s,
                Observation::TimedOut {
                    spun_ns: 0,
                    waited_ns: 0
                }
            ),
            s
        );
        // Bounds.
        assert_eq!(
            next_spin(
                MAX_SPIN_NS,
                Observation::Blocked {
                    spun_ns: MAX_SPIN_NS,
                    waited_ns: MAX_SPIN_NS + 1
                }
            ),
            MAX_SPIN_NS
        );
        assert_eq!(
            next_spin(
                MIN_SPIN_NS,
                Observation::Blocked {
                    spun_ns: MIN_SPIN_NS,
                    waited_ns: 1 << 40
                }
            ),
            MIN_SPIN_NS
        );
        // A near miss of a short spin counts the block cost as "near".
        assert_eq!(
            next_spin(
                MIN_SPIN_NS,
                Observation::Blocked {
                    spun_ns: MIN_SPIN_NS,
                    waited_ns: MIN_SPIN_NS + BLOCK_COST_NS
                }
            ),
            2 * MIN_SPIN_NS
        );
    }

    fn run(mut s: u64, arrival_ns: u64, rounds: usize) -> u64 {
        for _ in 0..rounds {
            let obs = if s >= arrival_ns {
                Observation::Hit {
                    spin_ns: s,
                    waited_ns: arrival_ns,
                }
            } else {
                Observation::Blocked {
                    spun_ns: s,
                    waited_ns: arrival_ns,
                }
            };
            s = next_spin(s, obs);
        }
        s
    }

    #[test]
    fn grows_to_catch_messages_arriving_just_after_the_spin() {
        // Messages always come 35 µs into the wait, just after the initial
        // 20 µs spin: it grows until it catches them, then stays put.
        let s = run(INITIAL_SPIN_NS, 35_000, 20);
        assert!((35_000..=70_000).contains(&s), "{s}");
        assert_eq!(run(s, 35_000, 20), s, "stable once caught");
        // The same from the top: far misses never happen, so it keeps MAX.
        assert_eq!(run(MAX_SPIN_NS, 35_000, 20), MAX_SPIN_NS);
    }

    #[test]
    fn does_not_spin_for_waits_much_longer_than_a_block() {
        // 300 µs waits cost one block + wakeup (20 µs) blocked, 300 µs spun:
        // the spin stays at its floor.
        assert_eq!(run(INITIAL_SPIN_NS, 300_000, 20), MIN_SPIN_NS);
    }

    #[test]
    fn shrinks_when_the_peer_is_away() {
        let mut s = MAX_SPIN_NS;
        for _ in 0..20 {
            s = next_spin(
                s,
                Observation::Blocked {
                    spun_ns: s,
                    waited_ns: 50_000_000,
                },
            );
        }
        assert_eq!(s, MIN_SPIN_NS);
    }

    #[test]
    fn per_fd_state() {
        observe(
            900,
            Observation::Blocked {
                spun_ns: INITIAL_SPIN_NS,
                waited_ns: INITIAL_SPIN_NS + 1,
            },
        );
        assert_eq!(spin_for(900), 2 * INITIAL_SPIN_NS);
        assert_eq!(spin_for(901), INITIAL_SPIN_NS);
    }

    proptest! {
        #[test]
        fn always_within_bounds(cur in any::<u64>(), a in any::<u64>(), b in any::<u64>(), k in 0u8..3) {
            let obs = match k {
                0 => Observation::Hit { spin_ns: a, waited_ns: b },
                1 => Observation::Blocked { spun_ns: a, waited_ns: b },
                _ => Observation::TimedOut { spun_ns: a, waited_ns: b },
            };
            let n = next_spin(cur, obs);
            prop_assert!((MIN_SPIN_NS..=MAX_SPIN_NS).contains(&n));
        }
    }
}
