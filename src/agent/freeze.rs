//! Who holds a gang's cgroup frozen.
//!
//! Two parties write a gang's `cgroup.freeze`: the slot switch (the
//! scheduler parks the outgoing gangs at Freeze and thaws them at the next
//! Switch) and the user (gangd's SuspendJob / ResumeJob, through the agent).
//! Each only knows its own reason, so a Switch must not thaw a suspended
//! job, and a ResumeJob must not thaw a gang that a switch has parked. The
//! cgroup is frozen while either holds it; this table, shared by the agent
//! and the scheduler's main loop (and kept across scheduler restarts), says
//! who does. Every decision and the write it leads to happen under one lock,
//! so a thaw can never slip between a suspend's check and its write.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::freezer;

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
            freezer::set_frozen(dir, false).map(|()| true)
        })
    }

    /// Suspends the job of `dir`: frozen until `resume`.
    pub fn suspend(&self, dir: &Path) -> io::Result<()> {
        self.update(dir, |h| {
            freezer::set_frozen(dir, true)?;
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
            freezer::set_frozen(dir, false).map(|()| true)
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
    use std::fs;

    /// A directory with a cgroup.freeze file: enough to see what was written.
    fn fake_cgroup(test: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("scx-gang-holds-{}-{test}/job1", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.freeze"), "0").unwrap();
        dir
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
