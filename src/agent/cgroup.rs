//! A job's cgroup, `<gang_root>/job<ID>`: the job's gang for the scheduler,
//! and the agent's handle on every process of the job (ranks and whatever
//! they fork): signals, kill, removal.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use gang_coordinator::proto::JobId;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

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

pub fn job_dir(gang_root: &Path, job: JobId) -> PathBuf {
    gang_root.join(gang_name(job))
}

/// Creates the job's cgroup (and the gang root if missing) and opens its
/// cgroup.procs for a child to join with: the write permission is checked
/// against the opener (the daemon), so the child may write to it after it
/// dropped its privileges.
pub fn create(dir: &Path) -> io::Result<File> {
    fs::create_dir_all(dir)?;
    OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
}

/// The processes of the cgroup (and not of its children: a job makes none).
pub fn procs(dir: &Path) -> io::Result<Vec<Pid>> {
    Ok(fs::read_to_string(dir.join("cgroup.procs"))?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .map(Pid::from_raw)
        .collect())
}

/// Sends `sig` to every process of the cgroup (SIGKILL through cgroup.kill,
/// which also catches processes forked meanwhile); returns how many there
/// were.
pub fn signal_all(dir: &Path, sig: Signal) -> io::Result<usize> {
    let pids = procs(dir)?;
    if sig == Signal::SIGKILL {
        fs::write(dir.join("cgroup.kill"), "1")?;
        return Ok(pids.len());
    }
    for &pid in &pids {
        // A process that exited meanwhile is fine.
        let _ = kill(pid, sig);
    }
    Ok(pids.len())
}

/// Removes the (empty) cgroup. Ok(false): it still has processes (killed
/// ones take a moment to go).
pub fn try_remove(dir: &Path) -> io::Result<bool> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(false),
        Err(e) => Err(e),
    }
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
}
