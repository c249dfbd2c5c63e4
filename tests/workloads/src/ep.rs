//! ep: EP-like, the control case. The NAS EP kernel computes on its own
//! ("embarrassingly parallel") and communicates once, to sum its results
//! at the end: a job that needs no coscheduling at all.
//!
//!   ep [--grain-us G] [--iters N | --work-ms W] [--wait POLICY] [--yield]
//!      [--timeout S]
//!
//! N grains (default 1000) of G µs (default 1000) of CPU work each, a
//! fixed number of steps of a busy loop calibrated once at start (see
//! `spmd::Spinner`); --work-ms W does ceil(W ms / G) grains instead. No
//! message until the end. Then one reduction to rank 0: each rank sends
//! (iterations, sum of its values) to rank 0, which checks every part and
//! the total, and sends the total back, which every rank checks too. Ranks
//! are linked to rank 0 only.
//!
//! Verification: rank r's value in grain i is mix64(r, i) (wrapping u64
//! sums, exact in any order); the expected parts and total are computed
//! locally. iter_us: the time of each grain (longer when the rank was
//! descheduled during it).
//!
//! Environment, common flags, JSON line and errors: see `spmd`.

use std::time::Instant;

use gang_workloads::spmd::{self, fail, Comm, Env, Report, Spinner};

const NAME: &str = "ep";
const USAGE: &str = "[--grain-us G] [--iters N | --work-ms W] [--wait block|spin[:US]|adaptive|inslot[:US]] [--yield] [--timeout S]   (GANG_RANK, GANG_SIZE, GANG_PEERS, GANG_PORT from the environment)";

const PART: &[u8; 4] = b"GEPP";
const TOTAL: &[u8; 4] = b"GEPT";
const MSG: usize = 24;

fn value(rank: usize, iter: u64) -> u64 {
    spmd::mix64(((rank as u64) << 40) ^ iter ^ 0x6570)
}

fn rank_sum(rank: usize, iters: u64) -> u64 {
    (0..iters).fold(0u64, |s, i| s.wrapping_add(value(rank, i)))
}

fn encode(magic: &[u8; 4], src: usize, iters: u64, sum: u64) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    m[0..4].copy_from_slice(magic);
    m[4..8].copy_from_slice(&(src as u32).to_le_bytes());
    m[8..16].copy_from_slice(&iters.to_le_bytes());
    m[16..24].copy_from_slice(&sum.to_le_bytes());
    m
}

/// Receives a message of `magic` from `from`: (iterations, sum).
fn recv_msg(comm: &mut Comm, from: usize, magic: &[u8; 4]) -> Result<(u64, u64), String> {
    let mut m = [0u8; MSG];
    comm.recv(from, &mut m)?;
    let src = spmd::u32_at(&m, 4) as usize;
    if &m[0..4] != magic || src != from {
        return Err(format!("bad message from rank {from} (says rank {src})"));
    }
    Ok((spmd::u64_at(&m, 8), spmd::u64_at(&m, 16)))
}

/// The reduction to rank 0 and back; returns the verified total.
fn reduce(comm: &mut Comm, iters: u64, mine: u64) -> Result<u64, String> {
    let (r, n) = (comm.rank, comm.size);
    let want: u64 = (0..n).fold(0u64, |s, j| s.wrapping_add(rank_sum(j, iters)));
    if r != 0 {
        comm.send(0, &encode(PART, r, iters, mine))?;
        let (it, total) = recv_msg(comm, 0, TOTAL)?;
        if it != iters || total != want {
            return Err(format!(
                "wrong total from rank 0: {total:#x} over {it} iterations, expected {want:#x} over {iters}"
            ));
        }
        return Ok(total);
    }
    let mut total = mine;
    for j in 1..n {
        let (it, sum) = recv_msg(comm, j, PART)?;
        if it != iters {
            return Err(format!("rank {j} ran {it} iterations, expected {iters}"));
        }
        let part = rank_sum(j, iters);
        if sum != part {
            return Err(format!(
                "wrong sum from rank {j}: {sum:#x}, expected {part:#x}"
            ));
        }
        total = total.wrapping_add(sum);
    }
    if total != want {
        return Err(format!("wrong total {total:#x}, expected {want:#x}"));
    }
    for j in 1..n {
        comm.send(j, &encode(TOTAL, 0, iters, total))?;
    }
    Ok(total)
}

fn main() {
    let (mut grain_us, mut iters, mut work_ms) = (1000u64, None::<u64>, None::<u64>);
    let common = spmd::parse_args(NAME, USAGE, |flag, args| {
        match flag {
            "--grain-us" => grain_us = spmd::value(flag, args),
            "--iters" => iters = Some(spmd::value(flag, args)),
            "--work-ms" => work_ms = Some(spmd::value(flag, args)),
            _ => return false,
        }
        true
    });
    if iters.is_some() && work_ms.is_some() {
        spmd::bad_usage("--iters and --work-ms exclude each other");
    }
    if !(1..=60_000_000).contains(&grain_us) {
        spmd::bad_usage("--grain-us must be 1 to 60000000");
    }
    let iters = match (iters, work_ms) {
        (Some(0), _) | (_, Some(0)) => spmd::bad_usage("--iters and --work-ms must be at least 1"),
        (Some(i), _) => i,
        (None, Some(w)) => w.saturating_mul(1000).div_ceil(grain_us),
        (None, None) => 1000,
    };
    let env = Env::from_env().unwrap_or_else(|e| fail(e));
    let (r, n) = (env.rank, env.size);
    let spinner = Spinner::calibrate();
    let loops = spinner.loops_for(grain_us);
    let mut comm = Comm::establish(&env, &common, |a, b| a != b && (a == 0 || b == 0))
        .unwrap_or_else(|e| fail(e));
    let fault = spmd::fault_injected();

    let mut samples = Vec::with_capacity(iters.min(1 << 24) as usize);
    let mut sink = 0u64;
    let mut mine = 0u64;
    let start = Instant::now();
    for k in 0..iters {
        let t = Instant::now();
        sink ^= spmd::spin_loops(loops);
        mine = mine.wrapping_add(value(r, k));
        if fault && k == 1 {
            mine = mine.wrapping_add(1);
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        comm.end_iteration();
    }
    std::hint::black_box(sink);
    reduce(&mut comm, iters, mine).unwrap_or_else(|e| fail(format!("final reduction: {e}")));
    let elapsed = start.elapsed();
    comm.finish().unwrap_or_else(|e| fail(e));
    Report {
        workload: NAME,
        rank: r,
        size: n,
        iters,
        elapsed,
        iter_us: samples,
        check: "every rank's sum and the total checked at rank 0, the total checked again by every rank".into(),
        extra: vec![
            ("grain_us", grain_us.to_string()),
            ("grain_loops", loops.to_string()),
        ],
        node: env.node,
    }
    .print();
}
