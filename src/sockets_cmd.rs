//! `scx_gang sockets DIR`: a gang's TCP sockets as the drain check sees
//! them, from both of its sources side by side, and what one check costs.
//!
//! The drain check (drain.rs) reads the sockets of the outgoing gangs'
//! cgroups from the socket watch (sock_watch.rs: a BPF map of the gangs'
//! sockets, read through an iterator) or from a sock_diag dump (knob
//! `drain_check`). This loads a watch of its own (so its seed, the TCP
//! iterator that finds the sockets already there, is what is exercised),
//! prints every socket of the cgroups at and below DIR as each source
//! reports it, fails if the two disagree on which sockets there are, and
//! times ROUNDS checks of each, alternating: p50 / p90 / max in µs.
//!
//! Read-only: nothing is parked, frozen or written; it may run next to the
//! daemon. DIR must be a gang (below the gang root): the watch sees no
//! other socket.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::drain::{self, TcpSocket};
use crate::park_bench::spread;
use crate::sock_watch::SockWatch;

/// The sockets both sources name (by inode; 0, a socket with no file any
/// more, is not named) and those only one of them does.
pub fn compare(watch: &[TcpSocket], dump: &[TcpSocket]) -> (usize, Vec<u64>, Vec<u64>) {
    let set = |v: &[TcpSocket]| -> BTreeSet<u64> {
        v.iter().map(|s| s.inode).filter(|&i| i != 0).collect()
    };
    let (w, d) = (set(watch), set(dump));
    (
        w.intersection(&d).count(),
        w.difference(&d).copied().collect(),
        d.difference(&w).copied().collect(),
    )
}

pub fn run(cgroup_mount: &Path, gang_root: &Path, dir: &Path, rounds: u32) -> Result<()> {
    if !(1..=100_000).contains(&rounds) {
        bail!("--rounds {rounds}: 1 to 100000");
    }
    let (root, gang) = (
        std::fs::canonicalize(gang_root)
            .with_context(|| format!("the gang root {}", gang_root.display()))?,
        std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?,
    );
    if gang == root || !gang.starts_with(&root) {
        bail!(
            "{} is not a gang: the socket watch sees only cgroups below the gang root {}",
            dir.display(),
            root.display()
        );
    }
    let ids = drain::cgroup_ids(&gang).context("the gang's cgroup ids")?;
    let watch = SockWatch::load(cgroup_mount, &root)?;
    let w = watch.sockets_of(&ids).context("reading the socket watch")?;
    let d = drain::tcp_sockets_of(&ids).context("the sock_diag dump")?;
    println!(
        "{}: {} cgroup(s); {:<9} {:>10} {:>8} {:>8} {:>8} {:>10}",
        dir.display(),
        ids.len(),
        "source",
        "inode",
        "cgroup",
        "unacked",
        "notsent",
        "queued"
    );
    for (source, v) in [("watch", &w), ("sock_diag", &d)] {
        for s in v.iter() {
            println!(
                "  {source:<9} {:>10} {:>8} {:>8} {:>8} {:>10}",
                s.inode, s.cgroup_id, s.unacked_segs, s.notsent_bytes, s.send_queue_bytes
            );
        }
    }
    let (both, only_watch, only_dump) = compare(&w, &d);
    println!(
        "sockets: watch {}, sock_diag {}, both {both}",
        w.len(),
        d.len()
    );
    let (mut tw, mut td) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        watch.sockets_of(&ids)?;
        tw.push(t.elapsed().as_micros() as u64);
        let t = Instant::now();
        drain::tcp_sockets_of(&ids)?;
        td.push(t.elapsed().as_micros() as u64);
    }
    println!(
        "{:<16} {:>8} {:>8} {:>8}  ({rounds} rounds)",
        "one check µs", "p50", "p90", "max"
    );
    let (wp, dp) = (spread(&mut tw), spread(&mut td));
    for (name, (a, b, c)) in [("watch", wp), ("sock_diag", dp)] {
        println!("{name:<16} {a:>8} {b:>8} {c:>8}");
    }
    println!(
        "sock_diag / watch at p50: {:.1}x",
        dp.0 as f64 / wp.0.max(1) as f64
    );
    if !only_watch.is_empty() || !only_dump.is_empty() {
        bail!(
            "the sources disagree: only the watch sees inodes {only_watch:?}, only sock_diag {only_dump:?}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(inode: u64) -> TcpSocket {
        TcpSocket {
            inode,
            ..Default::default()
        }
    }

    #[test]
    fn the_sources_are_compared_by_inode_and_a_closed_socket_is_not_named() {
        let w = [sock(1), sock(2), sock(0)];
        let d = [sock(2), sock(3), sock(0)];
        assert_eq!(compare(&w, &d), (1, vec![1], vec![3]));
        assert_eq!(compare(&w, &w), (2, vec![], vec![]));
    }

    #[test]
    fn only_a_gang_is_asked_for() {
        let root = std::env::temp_dir().join(format!("sockets-cmd-{}", std::process::id()));
        std::fs::create_dir_all(root.join("g")).unwrap();
        let m = Path::new("/sys/fs/cgroup");
        for dir in [root.clone(), std::env::temp_dir()] {
            let e = run(m, &root, &dir, 1).unwrap_err();
            assert!(format!("{e:#}").contains("is not a gang"), "{e:#}");
        }
        let e = run(m, &root, &root.join("g"), 0).unwrap_err();
        assert!(format!("{e:#}").contains("--rounds"), "{e:#}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
