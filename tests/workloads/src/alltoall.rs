//! alltoall: FT-like. The NAS FT kernel transposes its 3-D array with an
//! all-to-all exchange: every rank sends a large block to every other rank
//! each iteration, so the job is bound by bulk transfers that all ranks
//! must take part in.
//!
//!   alltoall [--bytes B] [--iters N] [--wait POLICY] [--yield] [--timeout S]
//!
//! Each iteration every rank sends B bytes (default 64 KiB) to every other
//! rank and receives B bytes from each; N iterations (default 100). Full
//! mesh of links.
//!
//! Schedule: pairwise exchange, a round-robin tournament. With m = size
//! (odd size) or size - 1 (even size), in round k = 0..m rank r pairs with
//! (k - r) mod m; the one rank that pairs with itself is idle (odd size) or
//! pairs with rank size - 1 (even size). Each round is a perfect matching,
//! every pair meets exactly once per iteration, and both ranks of a pair
//! send and receive at once (`Comm::exchange`: a sender thread writes
//! while the main thread reads), so no rank waits for a rank that waits
//! for someone else, and full socket buffers cannot deadlock a pair.
//!
//! Verification: the block from src to dst in iteration i is the pattern
//! of (src, dst, i); each received block is compared byte for byte.
//!
//! Environment, common flags, JSON line and errors: see `spmd`.

use std::time::Instant;

use gang_workloads::spmd::{self, fail, Comm, Env, Report};

const NAME: &str = "alltoall";
const USAGE: &str = "[--bytes B] [--iters N] [--wait block|spin[:US]|adaptive|inslot[:US]] [--yield] [--timeout S]   (GANG_RANK, GANG_SIZE, GANG_PEERS, GANG_PORT from the environment)";

/// Rounds per iteration.
fn rounds(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        n if n & 1 == 0 => n - 1,
        n => n,
    }
}

/// Rank r's partner in round k, or None when it is idle.
fn partner(n: usize, r: usize, k: usize) -> Option<usize> {
    if n < 2 {
        return None;
    }
    let m = if n & 1 == 0 { n - 1 } else { n };
    if r == m {
        // Rank n - 1 of an even size meets the fixed point: 2x = k (mod m).
        return Some(k * m.div_ceil(2) % m);
    }
    let p = (k + m - r) % m;
    if p != r {
        Some(p)
    } else if n & 1 == 0 {
        Some(n - 1)
    } else {
        None
    }
}

fn seed(src: usize, dst: usize, iter: u64) -> u64 {
    spmd::mix64(((src as u64) << 32) | dst as u64) ^ iter
}

fn main() {
    let (mut bytes, mut iters) = (64 * 1024usize, 100u64);
    let common = spmd::parse_args(NAME, USAGE, |flag, args| {
        match flag {
            "--bytes" => bytes = spmd::value(flag, args),
            "--iters" => iters = spmd::value(flag, args),
            _ => return false,
        }
        true
    });
    if iters == 0 {
        spmd::bad_usage("--iters must be at least 1");
    }
    if !(1..=(1 << 30)).contains(&bytes) {
        spmd::bad_usage("--bytes must be 1 to 1 GiB");
    }
    let env = Env::from_env().unwrap_or_else(|e| fail(e));
    let (r, n) = (env.rank, env.size);
    let mut comm = Comm::establish(&env, &common, |a, b| a != b).unwrap_or_else(|e| fail(e));
    let fault = spmd::fault_injected();

    let mut out = vec![0u8; bytes];
    let mut inbuf = vec![0u8; bytes];
    let mut samples = Vec::with_capacity(iters as usize);
    let start = Instant::now();
    for k in 0..iters {
        let t = Instant::now();
        for round in 0..rounds(n) {
            let Some(p) = partner(n, r, round) else {
                continue;
            };
            spmd::fill_pattern(&mut out, seed(r, p, k));
            if fault && k == 1 {
                out[bytes / 2] ^= 0x40;
            }
            out = comm
                .exchange(p, out, &mut inbuf)
                .unwrap_or_else(|e| fail(format!("iteration {k}: {e}")));
            if let Some(i) = spmd::check_pattern(&inbuf, seed(p, r, k)) {
                fail(format!(
                    "iteration {k}: wrong data from rank {p}: byte {i} of {bytes} differs"
                ));
            }
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        comm.end_iteration();
    }
    let elapsed = start.elapsed();
    comm.finish().unwrap_or_else(|e| fail(e));
    Report {
        workload: NAME,
        rank: r,
        size: n,
        iters,
        elapsed,
        iter_us: samples,
        check: format!(
            "every received block of {bytes} bytes equal to the pattern of (source, destination, iteration)"
        ),
        extra: vec![
            ("bytes", bytes.to_string()),
            ("rounds", rounds(n).to_string()),
        ],
        node: env.node,
    }
    .print();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::needless_range_loop)]
    fn every_pair_meets_once_per_iteration() {
        for n in 1..=12 {
            let mut met = vec![vec![0; n]; n];
            for k in 0..rounds(n) {
                for r in 0..n {
                    if let Some(p) = partner(n, r, k) {
                        assert_ne!(p, r, "n={n} k={k}");
                        assert_eq!(partner(n, p, k), Some(r), "n={n} k={k} r={r}");
                        met[r][p] += 1;
                    }
                }
            }
            for a in 0..n {
                for b in 0..n {
                    assert_eq!(met[a][b], usize::from(a != b), "n={n} {a}-{b}");
                }
            }
        }
    }
}
