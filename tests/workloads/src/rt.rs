//! rt: round trip. One token goes around all ranks, again and again: the
//! latency-bound extreme (at most one rank has work at any moment, every
//! other rank waits for a message), after the round-trip program of the
//! SCore gang-scheduling evaluation.
//!
//!   rt [--rounds H] [--bytes B] [--wait POLICY] [--yield] [--timeout S]
//!
//! Rank 0 sends a token of B bytes (default 8, at least 8) to rank 1, each
//! rank passes it on to its successor, the last rank gives it back to rank
//! 0: one round trip; H of them (default 1000). Ranks are linked only to
//! their two neighbours in the ring. The token carries its round number
//! (first 8 bytes) and a pattern derived from it (the rest); every rank
//! checks both on every hop.
//!
//! iter_us: on rank 0 the round-trip latency (send to return); on the
//! other ranks the time between two arrivals of the token (the first from
//! the start). With one rank the token never leaves it.
//!
//! Environment, common flags, JSON line and errors: see `spmd`.

use std::time::Instant;

use gang_workloads::spmd::{self, fail, Comm, Env, Report};

const NAME: &str = "rt";
const USAGE: &str = "[--rounds H] [--bytes B] [--wait block|spin[:US]|adaptive|inslot[:US]] [--yield] [--timeout S]   (GANG_RANK, GANG_SIZE, GANG_PEERS, GANG_PORT from the environment)";

fn seed(round: u64) -> u64 {
    round ^ 0x7274_0000_0000_0000
}

fn token(buf: &mut [u8], round: u64) {
    buf[0..8].copy_from_slice(&round.to_le_bytes());
    spmd::fill_pattern(&mut buf[8..], seed(round));
}

fn check(buf: &[u8], round: u64, from: usize) -> Result<(), String> {
    let got = spmd::u64_at(buf, 0);
    if got != round {
        return Err(format!(
            "wrong token from rank {from}: round {got}, expected {round}"
        ));
    }
    if let Some(i) = spmd::check_pattern(&buf[8..], seed(round)) {
        return Err(format!(
            "wrong token from rank {from} in round {round}: byte {} differs",
            8 + i
        ));
    }
    Ok(())
}

fn main() {
    let (mut rounds, mut bytes) = (1000u64, 8usize);
    let common = spmd::parse_args(NAME, USAGE, |flag, args| {
        match flag {
            "--rounds" => rounds = spmd::value(flag, args),
            "--bytes" => bytes = spmd::value(flag, args),
            _ => return false,
        }
        true
    });
    if rounds == 0 {
        spmd::bad_usage("--rounds must be at least 1");
    }
    if !(8..=(1 << 30)).contains(&bytes) {
        spmd::bad_usage("--bytes must be 8 to 1 GiB");
    }
    let env = Env::from_env().unwrap_or_else(|e| fail(e));
    let (r, n) = (env.rank, env.size);
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    let mut comm = Comm::establish(&env, &common, |a, b| {
        a != b && (b == (a + 1) % n || a == (b + 1) % n)
    })
    .unwrap_or_else(|e| fail(e));
    let fault = spmd::fault_injected();

    let mut buf = vec![0u8; bytes];
    let mut samples = Vec::with_capacity(rounds as usize);
    let start = Instant::now();
    let mut last = start;
    for k in 0..rounds {
        let res = (|| -> Result<(), String> {
            let stamp = if fault && k == 1 { k + 1 } else { k };
            if r == 0 {
                let t = Instant::now();
                token(&mut buf, stamp);
                if n > 1 {
                    comm.send(next, &buf)?;
                    comm.recv(prev, &mut buf)?;
                }
                check(&buf, k, prev)?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            } else {
                comm.recv(prev, &mut buf)?;
                let now = Instant::now();
                check(&buf, k, prev)?;
                samples.push((now - last).as_secs_f64() * 1e6);
                last = now;
                if stamp != k {
                    token(&mut buf, stamp);
                }
                comm.send(next, &buf)?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            fail(format!("round {k}: {e}"));
        }
        comm.end_iteration();
    }
    let elapsed = start.elapsed();
    comm.finish().unwrap_or_else(|e| fail(e));
    Report {
        workload: NAME,
        rank: r,
        size: n,
        iters: rounds,
        elapsed,
        iter_us: samples,
        check: format!(
            "token round number and {} pattern bytes at every hop",
            bytes - 8
        ),
        extra: vec![("bytes", bytes.to_string())],
        node: env.node,
    }
    .print();
}
