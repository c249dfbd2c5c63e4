//! `scx_gang park-bench`: where the time of a park goes on this node.
//!
//! A strict switch parks the outgoing gang with the cgroup freezer and then
//! checks its sockets (freezer.rs, drain.rs); under timed switching that
//! park + drain is the CPU time a switch leaves idle (issue 12). This tool
//! repeats the steps on one gang and times each on its own:
//!
//! - `write`: the write of 1 to cgroup.freeze;
//! - `frozen`: from the write until cgroup.events says "frozen 1", read
//!   in a busy loop (what the freezer itself takes: its tasks reaching the
//!   return to user space), with the number of reads;
//! - `ids`: the gang's cgroup ids (a walk of its directory);
//! - `dump`: one sock_diag dump of its TCP sockets;
//! - `thaw`: the write of 0;
//! - `park_and_drain`: the switch path's own call, its 1 ms poll included,
//!   on alternate rounds, as reported (park_us, drain_us).
//!
//! Each figure is printed as p50 / p90 / max in µs. It freezes and thaws
//! the gang `rounds` times: run it on a test gang, never on a user's job,
//! and not while a coordinator switches this node (the holds of
//! freezer.rs are not taken).
//!
//! Known fault: the busy loop shares the CPU with the gang's tasks; on a
//! one-CPU node it delays their way to the freezer by as much as a
//! scheduler gives the reader, which the 1 ms poll of `park_and_drain`
//! does not.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{drain, freezer};

/// p50, p90 and max of `v` (sorted here); `scx_gang sockets` prints its
/// timings so too.
pub fn spread(v: &mut [u64]) -> (u64, u64, u64) {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), v[v.len() - 1])
}

pub fn run(dir: &Path, rounds: u32, pause: Duration) -> Result<()> {
    if !dir.join("cgroup.freeze").exists() {
        bail!(
            "{}: not a cgroup v2 directory with a freezer (no cgroup.freeze)",
            dir.display()
        );
    }
    if freezer::is_frozen(dir) {
        bail!("{}: already frozen: someone else holds it", dir.display());
    }
    if !(2..=10_000).contains(&rounds) {
        bail!("--rounds {rounds}: 2 to 10000");
    }
    let us = |d: Duration| d.as_micros() as u64;
    let (mut write, mut frozen, mut reads, mut ids_t, mut dump, mut thaw) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut pd_park, mut pd_drain) = (vec![], vec![]);
    let mut sockets = 0;
    for round in 0..rounds {
        std::thread::sleep(pause);
        if round % 2 == 1 {
            let gang = freezer::ParkGang {
                name: "park-bench".into(),
                dir: dir.to_path_buf(),
                yielded: false,
            };
            let r = freezer::park_and_drain(round as u64, &[gang], Duration::from_secs(2));
            freezer::set_frozen(dir, false).context("thaw")?;
            let r = r.context("park_and_drain")?;
            pd_park.push(r.park_us);
            pd_drain.push(r.drain_us);
            continue;
        }
        let t0 = Instant::now();
        freezer::set_frozen(dir, true).context("freeze")?;
        let t1 = Instant::now();
        let mut n = 0u64;
        while !freezer::is_frozen(dir) {
            n += 1;
            if t1.elapsed() > Duration::from_secs(2) {
                freezer::set_frozen(dir, false).ok();
                bail!("{}: not frozen after 2 s", dir.display());
            }
        }
        let t2 = Instant::now();
        let ids = drain::cgroup_ids(dir).context("cgroup ids")?;
        let t3 = Instant::now();
        let socks = drain::tcp_sockets_of(&ids).context("sock_diag")?;
        let t4 = Instant::now();
        freezer::set_frozen(dir, false).context("thaw")?;
        let t5 = Instant::now();
        sockets = socks.len();
        write.push(us(t1 - t0));
        frozen.push(us(t2 - t1));
        reads.push(n + 1);
        ids_t.push(us(t3 - t2));
        dump.push(us(t4 - t3));
        thaw.push(us(t5 - t4));
    }
    println!(
        "park-bench {}: {rounds} rounds ({} timed by step, {} by park_and_drain), {sockets} TCP socket(s)",
        dir.display(),
        write.len(),
        pd_park.len()
    );
    println!("{:<24} {:>9} {:>9} {:>9}", "step", "p50", "p90", "max");
    for (name, v) in [
        ("write cgroup.freeze µs", &mut write),
        ("until frozen µs", &mut frozen),
        ("cgroup.events reads", &mut reads),
        ("cgroup ids µs", &mut ids_t),
        ("sock_diag dump µs", &mut dump),
        ("thaw µs", &mut thaw),
        ("park_and_drain park µs", &mut pd_park),
        ("park_and_drain total µs", &mut pd_drain),
    ] {
        let (a, b, c) = spread(v);
        println!("{name:<24} {a:>9} {b:>9} {c:>9}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_p50_p90_and_max() {
        let mut v: Vec<u64> = (1..=10).rev().collect();
        assert_eq!(spread(&mut v), (6, 9, 10));
        assert_eq!(spread(&mut [7]), (7, 7, 7));
    }

    #[test]
    fn a_directory_without_a_freezer_is_refused() {
        let dir = std::env::temp_dir().join(format!("park-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = run(&dir, 10, Duration::ZERO).unwrap_err();
        assert!(format!("{e:#}").contains("no cgroup.freeze"), "{e:#}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
