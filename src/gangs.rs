//! Gangs are cgroup-v2 directories right below the gang root.
//!
//! The registry gives each gang directory a small, stable id (its index in
//! the BPF maps) for as long as the directory exists and has tasks. A gang
//! whose directory disappears or empties gives its id, and so its slot, back.
//!
//! A job's gang is the directory `job<ID>` (`gang_name`, `job_of_gang`):
//! the naming lives here, below both the switching modes and the agent
//! that makes the directories. `procs` reads one cgroup's processes.
//!
//! Known fault: a gang is known by a scan (the main loop's, when the gang
//! watch reports a change, and every SLOW_SCAN_PERIOD), so one made a
//! moment ago has no id (and no CPUs) until that scan; requests that name
//! gangs rescan first.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gang_wire::proto::JobId;
use nix::unistd::Pid;

use crate::slots::{GangId, MAX_GANGS};

/// One gang directory as seen by a scan of the gang root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangDir {
    pub name: String,
    /// The cgroup id: the directory's inode number on cgroup2.
    pub cgroup_id: u64,
    /// The cgroup or one below it has tasks (cgroup.events "populated 1").
    pub populated: bool,
}

/// A registered gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gang {
    pub id: GangId,
    pub name: String,
    pub cgroup_id: u64,
}

/// What a scan changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GangChanges {
    pub added: Vec<Gang>,
    pub removed: Vec<Gang>,
    /// Populated gangs that got no id: all MAX_GANGS ids are taken.
    pub refused: Vec<String>,
}

impl GangChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct GangRegistry {
    /// By name; ids are unique.
    gangs: BTreeMap<String, Gang>,
}

impl GangRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.gangs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gangs.is_empty()
    }

    /// Registered gangs in the order they got their ids... by id.
    pub fn by_id(&self) -> Vec<&Gang> {
        let mut v: Vec<&Gang> = self.gangs.values().collect();
        v.sort_by_key(|g| g.id);
        v
    }

    pub fn get(&self, name: &str) -> Option<&Gang> {
        self.gangs.get(name)
    }

    pub fn name_of(&self, id: GangId) -> Option<&str> {
        self.gangs
            .values()
            .find(|g| g.id == id)
            .map(|g| g.name.as_str())
    }

    /// Brings the registry in line with a scan: populated directories are
    /// gangs; a gang whose directory is gone, empty, or was recreated (new
    /// cgroup id) is removed.
    pub fn update(&mut self, scan: &[GangDir]) -> GangChanges {
        let mut changes = GangChanges::default();
        let live: BTreeMap<&str, &GangDir> = scan
            .iter()
            .filter(|d| d.populated)
            .map(|d| (d.name.as_str(), d))
            .collect();

        let gone: Vec<String> = self
            .gangs
            .values()
            .filter(|g| {
                live.get(g.name.as_str())
                    .is_none_or(|d| d.cgroup_id != g.cgroup_id)
            })
            .map(|g| g.name.clone())
            .collect();
        for name in gone {
            if let Some(g) = self.gangs.remove(&name) {
                changes.removed.push(g);
            }
        }

        for (name, dir) in live {
            if self.gangs.contains_key(name) {
                continue;
            }
            match self.free_id() {
                Some(id) => {
                    let g = Gang {
                        id,
                        name: name.to_string(),
                        cgroup_id: dir.cgroup_id,
                    };
                    self.gangs.insert(name.to_string(), g.clone());
                    changes.added.push(g);
                }
                None => changes.refused.push(name.to_string()),
            }
        }
        changes
    }

    fn free_id(&self) -> Option<GangId> {
        (0..MAX_GANGS as GangId).find(|id| self.gangs.values().all(|g| g.id != *id))
    }
}

/// Lists the gang directories below `root`.
pub fn scan(root: &Path) -> io::Result<Vec<GangDir>> {
    let mut dirs = Vec::new();
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let path = entry.path();
        let meta = match fs::metadata(&path) {
            Ok(m) if m.is_dir() => m,
            _ => continue, // a file, or a directory removed while we looked
        };
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        dirs.push(GangDir {
            name,
            cgroup_id: meta.ino(),
            populated: is_populated(&path),
        });
    }
    Ok(dirs)
}

/// Whether cgroup `dir` or one below it has tasks (cgroup.events).
pub fn is_populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .map(|s| s.lines().any(|l| l.trim() == "populated 1"))
        .unwrap_or(false)
}

/// The cgroup level of a directory of the cgroup2 mount at `mount`
/// (the mount itself is level 0).
pub fn cgroup_level(mount: &Path, dir: &Path) -> Option<u32> {
    let rel = dir.strip_prefix(mount).ok()?;
    Some(rel.components().count() as u32)
}

/// Processes (ranks) in the cgroup `dir` and every cgroup below it. The
/// scheduler counts a gang's slot as yielded when this many of them have.
pub fn count_processes(dir: &Path) -> u32 {
    let here = fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter(|l| !l.trim().is_empty()).count() as u32)
        .unwrap_or(0);
    let below: u32 = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| count_processes(&e.path()))
        .sum();
    here + below
}

/// The directory of a gang below the root.
pub fn gang_path(root: &Path, name: &str) -> PathBuf {
    root.join(name)
}

/// The gang (cgroup directory) name of a job.
pub fn gang_name(job: JobId) -> String {
    format!("job{job}")
}

/// The job whose gang is `name`, if it is a job's.
pub fn job_of_gang(name: &str) -> Option<JobId> {
    let id = name.strip_prefix("job")?;
    if id.starts_with('+') || id.starts_with('0') && id.len() > 1 {
        return None;
    }
    id.parse().ok().map(JobId)
}

/// The cgroup directory of a job's gang.
pub fn job_dir(gang_root: &Path, job: JobId) -> PathBuf {
    gang_path(gang_root, &gang_name(job))
}

/// A pidfd of process `pid` (close-on-exec, as pidfd_open makes it):
/// readable once the process has exited, after it left its cgroup.
pub fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags, returns an fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The processes of the cgroup (and not of its children: a job makes none).
pub fn procs(dir: &Path) -> io::Result<Vec<Pid>> {
    Ok(fs::read_to_string(dir.join("cgroup.procs"))?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .map(Pid::from_raw)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_gang_name_maps_back_to_its_job_and_nothing_else_does() {
        assert_eq!(job_of_gang(&gang_name(JobId(42))), Some(JobId(42)));
        assert_eq!(job_of_gang("job0"), Some(JobId(0)));
        for other in ["job", "jobs", "job+1", "job01", "job-1", "a", "job1x", ""] {
            assert_eq!(job_of_gang(other), None, "{other:?}");
        }
    }

    #[test]
    fn processes_are_counted_in_the_gang_and_below() {
        let root = std::env::temp_dir().join(format!("gang-procs-{}", std::process::id()));
        let sub = root.join("rank1");
        fs::create_dir_all(&sub).unwrap();
        fs::write(root.join("cgroup.procs"), "10\n11\n").unwrap();
        fs::write(sub.join("cgroup.procs"), "12\n").unwrap();
        fs::create_dir_all(root.join("empty")).unwrap();
        assert_eq!(count_processes(&root), 3);
        assert_eq!(count_processes(&root.join("gone")), 0);
        let _ = fs::remove_dir_all(&root);
    }

    fn dir(name: &str, id: u64, populated: bool) -> GangDir {
        GangDir {
            name: name.into(),
            cgroup_id: id,
            populated,
        }
    }

    #[test]
    fn populated_directories_become_gangs_with_small_ids() {
        let mut r = GangRegistry::new();
        let c = r.update(&[
            dir("a", 100, true),
            dir("b", 101, true),
            dir("idle", 102, false),
        ]);
        assert_eq!(c.added.len(), 2);
        assert_eq!(r.get("a").unwrap().id, 0);
        assert_eq!(r.get("b").unwrap().id, 1);
        assert!(r.get("idle").is_none(), "an empty cgroup is no gang yet");
    }

    #[test]
    fn a_gang_that_empties_or_disappears_gives_its_id_back() {
        let mut r = GangRegistry::new();
        r.update(&[dir("a", 100, true), dir("b", 101, true)]);
        let c = r.update(&[dir("a", 100, false)]);
        assert_eq!(
            c.removed
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert!(r.is_empty());
        r.update(&[dir("c", 103, true)]);
        assert_eq!(r.get("c").unwrap().id, 0, "freed ids are reused");
    }

    #[test]
    fn ids_stay_put_while_other_gangs_come_and_go() {
        let mut r = GangRegistry::new();
        r.update(&[dir("a", 1, true), dir("b", 2, true)]);
        r.update(&[dir("b", 2, true), dir("c", 3, true)]);
        assert_eq!(r.get("b").unwrap().id, 1);
        assert_eq!(r.get("c").unwrap().id, 0);
    }

    #[test]
    fn a_recreated_directory_is_a_new_gang() {
        let mut r = GangRegistry::new();
        r.update(&[dir("a", 1, true)]);
        let c = r.update(&[dir("a", 9, true)]);
        assert_eq!(c.removed.len(), 1);
        assert_eq!(c.added[0].cgroup_id, 9);
    }

    #[test]
    fn gangs_beyond_the_limit_are_refused_not_lost() {
        let mut r = GangRegistry::new();
        let scan: Vec<GangDir> = (0..MAX_GANGS as u64 + 1)
            .map(|i| dir(&format!("g{i:03}"), i, true))
            .collect();
        let c = r.update(&scan);
        assert_eq!(r.len(), MAX_GANGS);
        assert_eq!(c.refused, vec![format!("g{:03}", MAX_GANGS)]);
    }

    #[test]
    fn levels_count_from_the_mount() {
        assert_eq!(
            cgroup_level(
                Path::new("/sys/fs/cgroup"),
                Path::new("/sys/fs/cgroup/scx_gang")
            ),
            Some(1)
        );
        assert_eq!(
            cgroup_level(Path::new("/sys/fs/cgroup"), Path::new("/tmp")),
            None
        );
    }
}
