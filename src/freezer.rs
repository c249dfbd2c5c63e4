//! Freeze: the first half of a coordinated switch. The slot's gangs are
//! parked with the cgroup-v2 freezer, then the node waits for their TCP
//! traffic to reach steady state (drain.rs).
//!
//! Why the freezer and not the BPF scheduler: a task that BPF simply stops
//! running may be stopped anywhere in the kernel, holding its socket's lock
//! or inside an RCU read-side section. Then nothing of that socket drains
//! (incoming ACKs wait for the lock; even reading tcp_info waits for it) and
//! a long freeze ends in an RCU stall, which disables sched_ext. The freezer
//! parks tasks only at the return to user space, where they hold nothing;
//! the kernel then finishes their sends on its own. After the freeze the BPF
//! scheduler switches the slot and the gangs are thawed: their tasks are
//! runnable again, but BPF keeps them off CPUs they do not own.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::control::FrozenReport;
use crate::drain;

/// How often parking and draining are polled.
const POLL: Duration = Duration::from_millis(1);

/// Freezes (true) or thaws (false) the cgroup `dir` and all below it.
pub fn set_frozen(dir: &Path, frozen: bool) -> io::Result<()> {
    fs::write(dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })
}

/// Every task of the cgroup `dir` is parked (cgroup.events "frozen 1").
pub fn is_frozen(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .map(|s| s.lines().any(|l| l.trim() == "frozen 1"))
        .unwrap_or(false)
}

/// A gang to park: its name, its cgroup directory, and whether every rank
/// of it yielded the slot (the scheduler parks those itself until the
/// gang's next slot: only their traffic is waited for).
pub struct ParkGang {
    pub name: String,
    pub dir: PathBuf,
    pub yielded: bool,
}

/// Parks the gangs, waits for every task to be parked and then for the
/// gangs' TCP sockets to be steady, all within `timeout` from now. The
/// gangs stay frozen: thaw them with `set_frozen`.
pub fn park_and_drain(gen: u64, all: &[ParkGang], timeout: Duration) -> io::Result<FrozenReport> {
    let start = Instant::now();
    let (yielded, gangs): (Vec<&ParkGang>, Vec<&ParkGang>) = all.iter().partition(|g| g.yielded);
    let gangs: Vec<(String, PathBuf)> = gangs
        .iter()
        .map(|g| (g.name.clone(), g.dir.clone()))
        .collect();
    // A job that ends just now takes its cgroup away: nothing to park there.
    let mut present = Vec::with_capacity(gangs.len());
    for (name, dir) in &gangs {
        match set_frozen(dir, true) {
            Ok(()) => present.push((name.clone(), dir.clone())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let gangs = present;
    let parked = wait_until(start + timeout, || {
        gangs.iter().all(|(_, dir)| is_frozen(dir) || !dir.exists())
    });
    let freeze_us = start.elapsed().as_micros() as u64;

    let mut ids = Vec::new();
    for dir in gangs
        .iter()
        .map(|(_, d)| d)
        .chain(yielded.iter().map(|g| &g.dir))
    {
        match drain::cgroup_ids(dir) {
            Ok(more) => ids.extend(more),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let left = timeout.saturating_sub(start.elapsed());
    ids.truncate(drain::MAX_FILTER_CGROUPS);
    let drain = drain::wait_steady(|| drain::tcp_sockets_of(&ids), left, POLL)?;
    let names = gangs.iter().map(|(name, _)| name.clone()).collect();
    Ok(FrozenReport {
        yielded: yielded.iter().map(|g| g.name.clone()).collect(),
        ..FrozenReport::drained(gen, names, parked, freeze_us, &drain, start)
    })
}

/// Polls `done` until it holds or `deadline` passes; true if it held.
fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_ends_at_the_deadline_or_when_done() {
        let start = Instant::now();
        assert!(!wait_until(start + Duration::from_millis(20), || false));
        assert!(start.elapsed() >= Duration::from_millis(20));
        let mut n = 0;
        assert!(wait_until(Instant::now() + Duration::from_secs(5), || {
            n += 1;
            n == 3
        }));
    }

    #[test]
    fn a_directory_without_freezer_files_is_not_frozen() {
        assert!(!is_frozen(Path::new("/nonexistent")));
        assert!(set_frozen(Path::new("/nonexistent"), true).is_err());
    }
}
