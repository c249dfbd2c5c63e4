//! The node's one reading of CLOCK_MONOTONIC in ns: the clock of
//! bpf_ktime_get_ns, of the traces and of the slot clock pages, so times
//! from BPF, the daemon and the agent compare directly.
//!
//! Known fault: gangd and the runtime library each have their own copy
//! (the wire crate is to hold the one shared by every side).

/// CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns and of the traces.
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always there");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
