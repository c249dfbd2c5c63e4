//! The one clock of every timestamp scx_gang puts on the wire or in a
//! trace: CLOCK_MONOTONIC in nanoseconds, the clock BPF's
//! `bpf_ktime_get_ns()` reads, so user space and the BPF program compare
//! their times directly. It is per machine: times of two nodes are
//! compared only through the cluster trace's per-node offsets.

/// CLOCK_MONOTONIC now, in nanoseconds (BPF's `bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
