//! allreduce: CG-like. The NAS CG kernel alternates short bursts of
//! computation with small global reductions (dot products) in which every
//! rank waits for every other: fine-grained, synchronizing communication
//! that suffers most when one rank of the job is descheduled.
//!
//!   allreduce [--grain-us G] [--iters N | --seconds S]
//!             [--wait POLICY] [--yield] [--timeout S]
//!
//! Each iteration: a compute grain of G µs (default 1000) of CPU work, a
//! fixed number of steps of a busy loop calibrated once at start (see
//! `spmd::Spinner`; a descheduled rank takes longer, it does not skip
//! work), then an allreduce of a u64 sum over all ranks. N iterations
//! (default 1000), or with --seconds until rank 0 has run S seconds: rank
//! 0 then raises a stop flag that travels inside the allreduce (or-ed like
//! the sum), so every rank stops after the same iteration.
//!
//! The allreduce is recursive doubling: with p the largest power of two
//! not above the size, the ranks p.. first fold their value into rank
//! r - p; ranks 0..p then exchange partial sums with rank r XOR 2^s in
//! steps s = 0, 1, ..; at the end ranks 0..(size - p) send the total back
//! to rank r + p. log2(p) steps (+2 when the size is not a power of two),
//! messages of 32 bytes (magic, source, iteration, step, stop flag, sum),
//! each checked for source, iteration and step. Ranks are linked only to
//! their partners.
//!
//! Verification: rank r contributes mix64(r, iteration); every rank
//! computes the expected total itself and compares each iteration's sum
//! (wrapping u64 arithmetic: exact, any order). A wrong sum is an error.
//!
//! Environment, common flags, JSON line and errors: see `spmd`.

use std::time::{Duration, Instant};

use gang_workloads::spmd::{self, fail, Comm, Env, Report, Spinner};

const NAME: &str = "allreduce";
const USAGE: &str = "[--grain-us G] [--iters N | --seconds S] [--wait block|spin[:US]|adaptive|inslot[:US]] [--yield] [--timeout S]   (GANG_RANK, GANG_SIZE, GANG_PEERS, GANG_PORT from the environment)";

const MAGIC: &[u8; 4] = b"GARD";
const MSG: usize = 32;
const FOLD: u32 = 0;
const BACK: u32 = u32::MAX;

/// What rank `rank` adds in iteration `iter`.
fn contribution(rank: usize, iter: u64) -> u64 {
    spmd::mix64(((rank as u64) << 40) ^ iter)
}

fn expected(size: usize, iter: u64) -> u64 {
    (0..size).fold(0u64, |s, r| s.wrapping_add(contribution(r, iter)))
}

fn pow2_below(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Partners in the allreduce (symmetric).
fn linked(n: usize, a: usize, b: usize) -> bool {
    let p = pow2_below(n);
    let (lo, hi) = (a.min(b), a.max(b));
    if lo == hi {
        false
    } else if hi >= p {
        hi - p == lo
    } else {
        (lo ^ hi).is_power_of_two()
    }
}

fn encode(src: usize, iter: u64, step: u32, stop: u32, sum: u64) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    m[0..4].copy_from_slice(MAGIC);
    m[4..8].copy_from_slice(&(src as u32).to_le_bytes());
    m[8..16].copy_from_slice(&iter.to_le_bytes());
    m[16..20].copy_from_slice(&step.to_le_bytes());
    m[20..24].copy_from_slice(&stop.to_le_bytes());
    m[24..32].copy_from_slice(&sum.to_le_bytes());
    m
}

/// Receives the message of `step` in `iter` from `from`: (stop, sum).
fn recv_msg(comm: &mut Comm, from: usize, iter: u64, step: u32) -> Result<(u32, u64), String> {
    let mut m = [0u8; MSG];
    comm.recv(from, &mut m)?;
    let (src, it, st) = (
        spmd::u32_at(&m, 4) as usize,
        spmd::u64_at(&m, 8),
        spmd::u32_at(&m, 16),
    );
    if &m[0..4] != MAGIC || src != from || it != iter || st != step {
        return Err(format!(
            "bad message from rank {from}: source {src}, iteration {it}, step {st} (expected step {step})"
        ));
    }
    Ok((spmd::u32_at(&m, 20), spmd::u64_at(&m, 24)))
}

/// The sum (and or-ed stop flag) over all ranks.
fn allreduce(comm: &mut Comm, iter: u64, value: u64, stop: u32) -> Result<(u64, u32), String> {
    let (r, n) = (comm.rank, comm.size);
    let p = pow2_below(n);
    let extra = n - p;
    let (mut sum, mut flag) = (value, stop);
    if r >= p {
        comm.send(r - p, &encode(r, iter, FOLD, flag, sum))?;
        let (f, s) = recv_msg(comm, r - p, iter, BACK)?;
        return Ok((s, f));
    }
    if r < extra {
        let (f, s) = recv_msg(comm, r + p, iter, FOLD)?;
        sum = sum.wrapping_add(s);
        flag |= f;
    }
    let (mut mask, mut step) = (1usize, 1u32);
    while mask < p {
        let partner = r ^ mask;
        comm.send(partner, &encode(r, iter, step, flag, sum))?;
        let (f, s) = recv_msg(comm, partner, iter, step)?;
        sum = sum.wrapping_add(s);
        flag |= f;
        mask <<= 1;
        step += 1;
    }
    if r < extra {
        comm.send(r + p, &encode(r, iter, BACK, flag, sum))?;
    }
    Ok((sum, flag))
}

fn main() {
    let (mut grain_us, mut iters, mut seconds) = (1000u64, None::<u64>, None::<f64>);
    let common = spmd::parse_args(NAME, USAGE, |flag, args| {
        match flag {
            "--grain-us" => grain_us = spmd::value(flag, args),
            "--iters" => iters = Some(spmd::value(flag, args)),
            "--seconds" => seconds = Some(spmd::value(flag, args)),
            _ => return false,
        }
        true
    });
    if iters.is_some() && seconds.is_some() {
        spmd::bad_usage("--iters and --seconds exclude each other");
    }
    if iters == Some(0) {
        spmd::bad_usage("--iters must be at least 1");
    }
    if seconds.is_some_and(|s| !(s > 0.0 && s < 1e9)) {
        spmd::bad_usage("--seconds must be a positive number");
    }
    if grain_us > 60_000_000 {
        spmd::bad_usage("--grain-us must be at most 60 s");
    }
    let env = Env::from_env().unwrap_or_else(|e| fail(e));
    let (r, n) = (env.rank, env.size);
    let spinner = Spinner::calibrate();
    let loops = if grain_us == 0 {
        0
    } else {
        spinner.loops_for(grain_us)
    };
    let mut comm =
        Comm::establish(&env, &common, |a, b| linked(n, a, b)).unwrap_or_else(|e| fail(e));
    let fault = spmd::fault_injected();
    let limit = iters.unwrap_or(u64::MAX);
    let run_for = seconds.map(Duration::from_secs_f64);

    let mut samples = Vec::with_capacity(iters.unwrap_or(1024).min(1 << 24) as usize);
    let mut sink = 0u64;
    let start = Instant::now();
    let mut k = 0u64;
    while k < limit {
        let t = Instant::now();
        sink ^= spmd::spin_loops(loops);
        let mut mine = contribution(r, k);
        if fault && k == 1 {
            mine = mine.wrapping_add(1);
        }
        let stop = u32::from(r == 0 && run_for.is_some_and(|d| start.elapsed() >= d));
        let (sum, flag) = allreduce(&mut comm, k, mine, stop)
            .unwrap_or_else(|e| fail(format!("iteration {k}: {e}")));
        let want = expected(n, k);
        if sum != want {
            fail(format!(
                "iteration {k}: wrong allreduce sum {sum:#x}, expected {want:#x}"
            ));
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        comm.end_iteration();
        k += 1;
        if flag != 0 {
            break;
        }
    }
    let elapsed = start.elapsed();
    std::hint::black_box(sink);
    comm.finish().unwrap_or_else(|e| fail(e));
    Report {
        workload: NAME,
        rank: r,
        size: n,
        iters: k,
        elapsed,
        iter_us: samples,
        check: "allreduce sum over all ranks equal to the expected total in every iteration".into(),
        extra: vec![
            ("grain_us", grain_us.to_string()),
            ("grain_loops", loops.to_string()),
        ],
        node: env.node,
    }
    .print();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_the_partners() {
        for n in 1..=9 {
            for a in 0..n {
                for b in 0..n {
                    assert_eq!(linked(n, a, b), linked(n, b, a));
                }
            }
        }
        assert!(linked(3, 0, 1) && linked(3, 0, 2) && !linked(3, 1, 2));
        assert!(linked(4, 0, 1) && linked(4, 0, 2) && !linked(4, 0, 3) && linked(4, 1, 3));
        assert_eq!(pow2_below(1), 1);
        assert_eq!(pow2_below(6), 4);
    }
}
