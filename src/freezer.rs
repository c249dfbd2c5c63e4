//! Freeze with the cgroup freezer (knob `park = freezer`; the default,
//! `park = bpf`, is switching/bpf/park.rs): the first half of a coordinated
//! switch. The slot's gangs are parked with the cgroup-v2 freezer, then the
//! node waits for their TCP traffic to reach steady state (drain.rs).
//!
//! The freezer parks tasks only at the return to user space, where they
//! hold nothing (a task stopped anywhere in the kernel may hold its
//! socket's lock, and then nothing of that socket drains: incoming ACKs
//! wait for the lock, and even reading tcp_info waits for it); the kernel
//! then finishes their sends on its own. The BPF park gets the same
//! guarantee by letting a task inside a system call run to its end. After
//! the freeze the BPF scheduler switches the slot and the gangs are thawed:
//! their tasks are runnable again, but BPF keeps them off CPUs they do not
//! own. The freezer also serves a user's suspend, below.
//!
//! Who holds a gang frozen (`FreezeHolds`): two parties write a gang's
//! `cgroup.freeze`, the slot switch (the BPF mode, switching/bpf/, parks
//! the outgoing gangs at Freeze and thaws them at the next Switch) and the
//! user (gangd's SuspendJob / ResumeJob, through the agent above).
//! Each only knows its own reason, so a Switch must not thaw a suspended
//! job, and a ResumeJob must not thaw a gang that a switch has parked. The
//! cgroup is frozen while either holds it; this table, shared by the agent
//! and the daemon's main loop (and kept across scheduler restarts), says
//! who does. Every decision and the write it leads to happen under one lock,
//! so a thaw can never slip between a suspend's check and its write.
//!
//! Known faults: parking is polled (cgroup.events, every FREEZE_POLL)
//! rather than watched with inotify; the holds are by gang name, so a job
//! whose cgroup is removed and made again under the same name inherits
//! them until `forget`.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::control::FrozenReport;
use crate::drain;

/// How often parking is polled.
const POLL: Duration = drain::FREEZE_POLL;

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
/// gangs' TCP sockets to be steady (drain.rs), all within `timeout` from
/// now. The gangs stay frozen: the switch thaws them
/// (`FreezeHolds::unpark`).
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
    // The yielded gangs' traffic is waited for too.
    let dirs: Vec<PathBuf> = gangs
        .iter()
        .map(|(_, d)| d.clone())
        .chain(yielded.iter().map(|g| g.dir.clone()))
        .collect();
    let names = gangs.into_iter().map(|(name, _)| name).collect();
    Ok(FrozenReport {
        yielded: yielded.iter().map(|g| g.name.clone()).collect(),
        ..drain::drain_parked(gen, names, parked, &dirs, start, timeout)?
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Hold {
    /// Parked by a slot switch (Freeze), until the next Switch.
    parked: bool,
    /// Suspended by the user, until ResumeJob.
    suspended: bool,
}

/// The holds on gangs' freezers, by gang (cgroup directory) name.
#[derive(Clone, Debug, Default)]
pub struct FreezeHolds {
    holds: Arc<Mutex<BTreeMap<String, Hold>>>,
}

fn name_of(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl FreezeHolds {
    pub fn new() -> Self {
        Self::default()
    }

    fn update<T>(&self, dir: &Path, f: impl FnOnce(&mut Hold) -> T) -> T {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let name = name_of(dir);
        let hold = holds.entry(name.clone()).or_default();
        let out = f(hold);
        if *hold == Hold::default() {
            holds.remove(&name);
        }
        out
    }

    /// The scheduler is about to park `dir` for a slot switch (it writes
    /// cgroup.freeze itself: freezing more is always safe).
    pub fn park(&self, dir: &Path) {
        self.update(dir, |h| h.parked = true);
    }

    /// The switch is over (or the scheduler starts and finds gangs a killed
    /// daemon left parked): thaws `dir` unless its job is suspended.
    /// Returns whether it was thawed.
    pub fn unpark(&self, dir: &Path) -> io::Result<bool> {
        self.update(dir, |h| {
            h.parked = false;
            if h.suspended {
                return Ok(false);
            }
            set_frozen(dir, false).map(|()| true)
        })
    }

    /// Suspends the job of `dir`: frozen until `resume`.
    pub fn suspend(&self, dir: &Path) -> io::Result<()> {
        self.update(dir, |h| {
            set_frozen(dir, true)?;
            h.suspended = true;
            Ok(())
        })
    }

    /// Ends a suspension. The cgroup is thawed unless a slot switch holds
    /// it parked (the switch's own thaw will). Returns whether it was
    /// thawed now.
    pub fn resume(&self, dir: &Path) -> io::Result<bool> {
        self.update(dir, |h| {
            h.suspended = false;
            if h.parked {
                return Ok(false);
            }
            set_frozen(dir, false).map(|()| true)
        })
    }

    pub fn is_suspended(&self, dir: &Path) -> bool {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.get(&name_of(dir)).is_some_and(|h| h.suspended)
    }

    /// The job's cgroup is gone: nothing holds it any more.
    pub fn forget(&self, dir: &Path) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.remove(&name_of(dir));
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

    /// A directory with a cgroup.freeze file: enough to see what was
    /// written. Removed with its parent when dropped.
    struct FakeCgroup(std::path::PathBuf);

    impl std::ops::Deref for FakeCgroup {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for FakeCgroup {
        fn drop(&mut self) {
            if let Some(parent) = self.0.parent() {
                let _ = fs::remove_dir_all(parent);
            }
        }
    }

    fn fake_cgroup(test: &str) -> FakeCgroup {
        let dir =
            std::env::temp_dir().join(format!("scx-gang-holds-{}-{test}/job1", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.freeze"), "0").unwrap();
        FakeCgroup(dir)
    }

    fn freeze_file(dir: &Path) -> String {
        fs::read_to_string(dir.join("cgroup.freeze")).unwrap()
    }

    #[test]
    fn a_switch_never_thaws_a_suspended_job() {
        let dir = fake_cgroup("switch");
        let holds = FreezeHolds::new();
        holds.suspend(&dir).unwrap();
        holds.park(&dir);
        fs::write(dir.join("cgroup.freeze"), "1").unwrap(); // what park_and_drain does
        assert!(!holds.unpark(&dir).unwrap());
        assert_eq!(freeze_file(&dir), "1");
        assert!(holds.is_suspended(&dir));
        assert!(holds.resume(&dir).unwrap());
        assert_eq!(freeze_file(&dir), "0");
        assert!(!holds.is_suspended(&dir));
    }

    #[test]
    fn a_resume_leaves_a_parked_gang_to_the_switch() {
        let dir = fake_cgroup("resume");
        let holds = FreezeHolds::new();
        holds.suspend(&dir).unwrap();
        holds.park(&dir);
        assert!(!holds.resume(&dir).unwrap(), "the switch still holds it");
        assert_eq!(freeze_file(&dir), "1");
        assert!(holds.unpark(&dir).unwrap());
        assert_eq!(freeze_file(&dir), "0");
        assert!(holds.holds.lock().unwrap().is_empty());
    }

    #[test]
    fn a_missing_cgroup_is_an_error_and_holds_nothing() {
        let holds = FreezeHolds::new();
        let gone = Path::new("/nonexistent/job7");
        assert!(holds.suspend(gone).is_err());
        assert!(!holds.is_suspended(gone));
    }
}
