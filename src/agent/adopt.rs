//! Surviving a restart of the daemon: the ranks outlive it (they are in
//! their job's cgroup, not tied to the daemon), so a new daemon finds them
//! there and takes them over, and Hello reports them to gangd, which adopts
//! the jobs.
//!
//! What a cgroup alone does not say is written on it when the job is made,
//! as `trusted.*` extended attributes of the job's cgroup directory, which
//! only root (CAP_SYS_ADMIN) may set: `trusted.scx_gang.job` (the job:
//! id, name, size, uid, gid, as JSON) and `trusted.scx_gang.rank.<R>` (the
//! pid of rank R). At start, each `job<N>` cgroup under the gang root is
//! read back: a rank whose recorded pid is still in the cgroup's
//! cgroup.procs is adopted; a suspended job (cgroup.freeze 1) stays frozen
//! and is known as suspended; a cgroup with no live rank left is emptied
//! and removed, as after a job's last rank.
//!
//! Adopted ranks are not the daemon's children: their end is seen through
//! a pidfd (poll), and their exit status is unknown (ADOPTED_EXIT). Their
//! output pipes went with the old daemon.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use gang_wire::proto::{ExitStatus, JobId};
use log::{info, warn};
use serde::{Deserialize, Serialize};

use crate::gangs;

const JOB_ATTR: &str = "trusted.scx_gang.job";
const RANK_ATTR: &str = "trusted.scx_gang.rank.";
/// Largest attribute value read back.
const MAX_ATTR: usize = 64 << 10;
/// What is reported for an adopted rank: its status went to its new parent.
pub const ADOPTED_EXIT: ExitStatus = ExitStatus::Unknown;
/// Without pidfds, how often an adopted rank is looked for.
const POLL_PROC: Duration = Duration::from_millis(100);

/// A job as recorded on its cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: JobId,
    pub name: String,
    pub size: u32,
    pub uid: u32,
    pub gid: u32,
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

fn set_attr(dir: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let (path, name) = (c_path(dir)?, CString::new(name)?);
    // SAFETY: NUL-terminated strings and a buffer of the length given.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn get_attr(dir: &Path, name: &str) -> io::Result<Vec<u8>> {
    let (path, name) = (c_path(dir)?, CString::new(name)?);
    let mut buf = vec![0u8; MAX_ATTR];
    // SAFETY: as above; the kernel writes at most buf.len() bytes.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Records the job on its cgroup (when the cgroup is made).
pub fn record_job(dir: &Path, job: &JobRecord) -> io::Result<()> {
    set_attr(dir, JOB_ATTR, &serde_json::to_vec(job)?)
}

/// Records a started rank's pid on its job's cgroup.
pub fn record_rank(dir: &Path, rank: u32, pid: u32) -> io::Result<()> {
    set_attr(
        dir,
        &format!("{RANK_ATTR}{rank}"),
        pid.to_string().as_bytes(),
    )
}

/// What a job cgroup found at start holds.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    pub record: JobRecord,
    /// Live ranks: (rank, pid).
    pub ranks: Vec<(u32, u32)>,
    pub suspended: bool,
}

/// Reads one job cgroup back; Err: it cannot be adopted (why).
pub fn read_job(dir: &Path, job: JobId) -> Result<Found, String> {
    let raw = get_attr(dir, JOB_ATTR).map_err(|e| format!("no job record ({JOB_ATTR}: {e})"))?;
    let record: JobRecord =
        serde_json::from_slice(&raw).map_err(|e| format!("bad job record: {e}"))?;
    if record.job != job {
        return Err(format!("its record is of job {}, not {job}", record.job));
    }
    let procs: Vec<u32> = gangs::procs(dir)
        .map_err(|e| format!("reading cgroup.procs: {e}"))?
        .into_iter()
        .map(|p| p.as_raw() as u32)
        .collect();
    let mut ranks = Vec::new();
    for rank in 0..record.size {
        let Ok(raw) = get_attr(dir, &format!("{RANK_ATTR}{rank}")) else {
            continue;
        };
        let pid = std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(pid) = pid.filter(|p| procs.contains(p)) {
            ranks.push((rank, pid));
        }
    }
    let suspended = fs::read_to_string(dir.join("cgroup.freeze")).is_ok_and(|s| s.trim() == "1");
    Ok(Found {
        record,
        ranks,
        suspended,
    })
}

/// The job cgroups under the gang root, read back; those that cannot be
/// adopted are logged and left alone.
pub fn scan(gang_root: &Path) -> Vec<Found> {
    let Ok(entries) = fs::read_dir(gang_root) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(job) = name.to_str().and_then(gangs::job_of_gang) else {
            continue;
        };
        let dir = entry.path();
        match read_job(&dir, job) {
            Ok(f) => {
                info!(
                    "job {job} ({}) found in {}: {} live ranks{}",
                    f.record.name,
                    dir.display(),
                    f.ranks.len(),
                    if f.suspended { ", suspended" } else { "" }
                );
                found.push(f);
            }
            Err(why) => warn!("{}: not adopted: {why}", dir.display()),
        }
    }
    found.sort_by_key(|f| f.record.job);
    found
}

/// Waits until process `pid` (still in `dir`'s cgroup when called) ends.
pub fn wait_exit(pid: u32) {
    if let Ok(fd) = crate::gangs::pidfd_open(nix::unistd::Pid::from_raw(pid as i32)) {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd on our stack, its fd open for the call.
            let r = unsafe { libc::poll(&mut pfd, 1, -1) };
            if r > 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        return;
    }
    while Path::new(&format!("/proc/{pid}")).exists() {
        std::thread::sleep(POLL_PROC);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_record_reads_back_with_its_live_ranks_only() {
        let dir = std::env::temp_dir().join(format!("scx-gang-adopt-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        fs::write(dir.join("cgroup.procs"), format!("{me}\n")).unwrap();
        fs::write(dir.join("cgroup.freeze"), "1\n").unwrap();
        let record = JobRecord {
            job: JobId(9),
            name: "ring".into(),
            size: 3,
            uid: 1000,
            gid: 1000,
        };
        record_job(&dir, &record).unwrap();
        record_rank(&dir, 0, me).unwrap();
        record_rank(&dir, 2, 999_999_999).unwrap(); // gone
        let found = read_job(&dir, JobId(9)).unwrap();
        assert_eq!(
            found,
            Found {
                record,
                ranks: vec![(0, me)],
                suspended: true
            }
        );
        assert_eq!(
            read_job(&dir, JobId(10)).unwrap_err(),
            "its record is of job 9, not 10"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The attack: a user forges the record (to be adopted as root, or as
    /// another user's job). trusted.* attributes are root's alone.
    #[test]
    fn only_root_may_write_a_job_record() {
        let dir = std::env::temp_dir().join(format!("scx-gang-forge-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        nix::unistd::chown(&dir, Some(65534.into()), Some(65534.into())).unwrap();
        let path = c_path(&dir).unwrap();
        let name = CString::new(JOB_ATTR).unwrap();
        let value = b"{\"job\":1,\"name\":\"x\",\"size\":1,\"uid\":0,\"gid\":0}";
        // SAFETY: the child only makes system calls and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    libc::_exit(10);
                }
                let r = libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                );
                libc::_exit(if r == 0 { 0 } else { 1 });
            },
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(
                    status,
                    nix::sys::wait::WaitStatus::Exited(child, 1),
                    "the owner of the directory, not root, set the record"
                );
            }
        }
        assert!(get_attr(&dir, JOB_ATTR).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
