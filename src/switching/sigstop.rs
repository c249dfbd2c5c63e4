//! Stopping and continuing whole gangs with SIGSTOP and SIGCONT.
//!
//! A gang's processes come from a `ProcessSource` (on a node: the
//! cgroup.procs files of the gang's cgroup and every cgroup below it; in
//! tests: any processes a test spawned). The `Signaller` remembers every
//! process it stopped, so that it continues exactly those, and all of them
//! when it is dropped: a job is never left stopped by a daemon that exits.
//!
//! A stop is a race with fork: a process forked between the listing and the
//! signal is not in the list. Once SIGSTOP is queued to a process, a fork of
//! it that has not finished yet is restarted (the kernel refuses to finish
//! a fork while a group-wide signal is pending), so every child that
//! escapes was already in the cgroup when the signal was sent: listing
//! again after signalling catches it. The stop repeats until a pass finds
//! nothing new (MAX_PASSES at most: a fork bomb gets a warning, not a hang).
//!
//! SIGSTOP takes effect when the process next returns to user space (the
//! kernel kicks a running one at once), so a stopped process holds no lock
//! in the kernel, like one parked by the cgroup freezer: its socket traffic
//! drains on its own. `wait_parked` tells when every thread really stopped.
//!
//! Interplay with the freezer (a job suspended by the operator): a frozen
//! task does not act on SIGSTOP until it is thawed, and SIGCONT does not
//! thaw it (a stopped task in a frozen cgroup goes from the stop straight
//! into the freezer). Nothing here writes cgroup.freeze.
//!
//! Known fault: a process that exits and whose pid is reused between two
//! `forget_exited` calls may be continued by mistake (SIGCONT only).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use log::warn;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::freezer;
use crate::gangs;

/// Listing passes of one stop: the first, and re-listings for processes
/// forked meanwhile. Two are enough unless the gang forks without pause.
pub const MAX_PASSES: u32 = 8;

/// Where a gang's processes are found.
pub trait ProcessSource {
    /// The processes (thread group ids) of `gang` now; empty if it has none
    /// or does not exist.
    fn processes(&self, gang: &str) -> io::Result<Vec<i32>>;

    /// The gangs that have processes now (for the standalone table).
    fn gangs(&self) -> io::Result<Vec<String>>;

    /// The gang's cgroup directory, if it has one (to drain its sockets).
    fn cgroup_dir(&self, _gang: &str) -> Option<PathBuf> {
        None
    }

    /// The gang is parked by the cgroup freezer (a suspended job): its
    /// processes do not act on SIGSTOP until they are thawed.
    fn is_frozen(&self, _gang: &str) -> bool {
        false
    }
}

/// A node's gangs: the cgroups right below the gang root.
#[derive(Clone, Debug)]
pub struct CgroupProcesses {
    root: PathBuf,
}

impl CgroupProcesses {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

impl ProcessSource for CgroupProcesses {
    fn processes(&self, gang: &str) -> io::Result<Vec<i32>> {
        let mut pids = Vec::new();
        processes_below(&gangs::gang_path(&self.root, gang), &mut pids)?;
        Ok(pids)
    }

    fn gangs(&self) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = gangs::scan(&self.root)?
            .into_iter()
            .filter(|d| d.populated)
            .map(|d| d.name)
            .collect();
        names.sort();
        Ok(names)
    }

    fn cgroup_dir(&self, gang: &str) -> Option<PathBuf> {
        Some(gangs::gang_path(&self.root, gang))
    }

    fn is_frozen(&self, gang: &str) -> bool {
        freezer::is_frozen(&gangs::gang_path(&self.root, gang))
    }
}

/// The processes of the cgroup `dir` and of every cgroup below it. A
/// cgroup removed while it is read has none.
fn processes_below(dir: &Path, out: &mut Vec<i32>) -> io::Result<()> {
    match gangs::procs(dir) {
        Ok(pids) => out.extend(pids.into_iter().map(Pid::as_raw)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            processes_below(&entry.path(), out)?;
        }
    }
    Ok(())
}

/// What one stop of a gang did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Processes stopped by this call (not those stopped before).
    pub newly_stopped: Vec<i32>,
    /// Listings made.
    pub passes: u32,
    /// The last allowed pass still found new processes: some may run.
    pub escaped: bool,
}

/// Stops and continues gangs, and remembers whom it stopped.
pub struct Signaller<S: ProcessSource> {
    source: S,
    /// Processes stopped and not continued yet, by gang.
    stopped: BTreeMap<String, BTreeSet<i32>>,
}

impl<S: ProcessSource> Signaller<S> {
    pub fn new(source: S) -> Self {
        Self {
            source,
            stopped: BTreeMap::new(),
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// Stops every process of `gang` that is not stopped yet, listing again
    /// until a pass finds nothing new. Calling it again only costs a
    /// listing, and catches processes that joined the gang since.
    pub fn stop(&mut self, gang: &str) -> StopReport {
        let mut report = StopReport::default();
        let stopped = self.stopped.entry(gang.to_string()).or_default();
        loop {
            let pids = match self.source.processes(gang) {
                Ok(p) => p,
                Err(e) => {
                    warn!("gang {gang}: listing its processes: {e}; stopping what is known");
                    break;
                }
            };
            report.passes += 1;
            let new: Vec<i32> = pids.into_iter().filter(|p| !stopped.contains(p)).collect();
            if new.is_empty() {
                break;
            }
            if report.passes > MAX_PASSES {
                report.escaped = true;
                warn!(
                    "gang {gang}: still new processes after {MAX_PASSES} passes (forking without pause?): {} may run out of its slot",
                    new.len()
                );
                break;
            }
            for pid in new {
                match kill(Pid::from_raw(pid), Signal::SIGSTOP) {
                    Ok(()) => {
                        stopped.insert(pid);
                        report.newly_stopped.push(pid);
                    }
                    // It exited meanwhile.
                    Err(Errno::ESRCH) => {}
                    Err(e) => warn!("gang {gang}: SIGSTOP to {pid}: {e}"),
                }
            }
        }
        if stopped.is_empty() {
            self.stopped.remove(gang);
        }
        report
    }

    /// Continues every process of `gang` this signaller stopped; returns
    /// how many were signalled.
    pub fn continue_gang(&mut self, gang: &str) -> usize {
        let Some(pids) = self.stopped.remove(gang) else {
            return 0;
        };
        for &pid in &pids {
            match kill(Pid::from_raw(pid), Signal::SIGCONT) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => warn!("gang {gang}: SIGCONT to {pid}: {e}"),
            }
        }
        pids.len()
    }

    /// Continues everything this signaller stopped.
    pub fn continue_all(&mut self) {
        let gangs: Vec<String> = self.stopped.keys().cloned().collect();
        for gang in gangs {
            self.continue_gang(&gang);
        }
    }

    /// Gangs with processes stopped by this signaller.
    pub fn stopped_gangs(&self) -> Vec<String> {
        self.stopped.keys().cloned().collect()
    }

    /// Processes of `gang` stopped by this signaller.
    pub fn stopped_of(&self, gang: &str) -> Vec<i32> {
        self.stopped
            .get(gang)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets processes that exited (so their ids, once reused, are never
    /// signalled).
    pub fn forget_exited(&mut self) {
        for pids in self.stopped.values_mut() {
            pids.retain(|&p| process_exists(p));
        }
        self.stopped.retain(|_, pids| !pids.is_empty());
    }
}

impl<S: ProcessSource> Drop for Signaller<S> {
    fn drop(&mut self) {
        self.continue_all();
    }
}

fn process_exists(pid: i32) -> bool {
    !matches!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH))
}

/// The state letter of a task (its /proc/.../stat), None if it is gone.
fn task_state(stat: &Path) -> Option<char> {
    let text = fs::read_to_string(stat).ok()?;
    // "pid (comm) S ...": comm may hold anything, even ") ".
    text.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The state letter of a process's main thread ('R', 'S', 'T', ...), None
/// if it is gone.
pub fn process_state(pid: i32) -> Option<char> {
    task_state(&PathBuf::from(format!("/proc/{pid}/stat")))
}

/// Every thread of `pid` is stopped, or the process is dead or gone: it
/// runs no more until continued.
pub fn is_parked(pid: i32) -> bool {
    let tasks = match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(t) => t,
        Err(_) => return true,
    };
    tasks.flatten().all(|t| {
        matches!(
            task_state(&t.path().join("stat")),
            None | Some('T' | 't' | 'Z' | 'X' | 'x')
        )
    })
}

/// Waits until every process of `pids` is parked, or `deadline`; true if
/// they all were. Polls with a short, growing pause (a stop takes effect
/// within microseconds on an idle machine, later on a busy one).
pub fn wait_parked(pids: &[i32], deadline: Instant) -> bool {
    let mut pause = Duration::from_micros(20);
    let mut left: Vec<i32> = pids.to_vec();
    loop {
        left.retain(|&p| !is_parked(p));
        if left.is_empty() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// Continues the processes of `pids` that are stopped (a daemon killed
/// before it could continue them left them so); returns how many. Others
/// get no signal: a program may act on SIGCONT.
pub fn continue_stopped(pids: &[i32]) -> usize {
    pids.iter()
        .filter(|&&p| process_state(p) == Some('T'))
        .filter(|&&p| kill(Pid::from_raw(p), Signal::SIGCONT).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_state_is_read_after_the_command_name_whatever_it_holds() {
        let dir = std::env::temp_dir().join(format!("scx-gang-stat-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let stat = dir.join("stat");
        fs::write(&stat, "42 (evil) S (x) T 1 2 3\n").unwrap();
        assert_eq!(task_state(&stat), Some('T'));
        fs::write(&stat, "42 (burn) R 1 2 3\n").unwrap();
        assert_eq!(task_state(&stat), Some('R'));
        assert_eq!(task_state(&dir.join("gone")), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_gang_lists_the_processes_of_its_cgroup_and_of_those_below() {
        let root = std::env::temp_dir().join(format!("scx-gang-procs-{}", std::process::id()));
        let sub = root.join("job1/rank0");
        fs::create_dir_all(&sub).unwrap();
        fs::write(root.join("job1/cgroup.procs"), "10\n11\n").unwrap();
        fs::write(sub.join("cgroup.procs"), "12\n").unwrap();
        let source = CgroupProcesses::new(&root);
        let mut pids = source.processes("job1").unwrap();
        pids.sort();
        assert_eq!(pids, vec![10, 11, 12]);
        assert!(
            source.processes("job9").unwrap().is_empty(),
            "no cgroup, no processes"
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn this_process_is_running_and_not_parked() {
        let me = std::process::id() as i32;
        assert!(matches!(process_state(me), Some('R' | 'S')));
        assert!(!is_parked(me));
        assert!(
            is_parked(i32::MAX),
            "a process that does not exist runs no more"
        );
    }
}
