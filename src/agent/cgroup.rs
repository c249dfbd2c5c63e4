//! A job's cgroup, `<gang_root>/job<ID>`: the job's gang for the scheduler,
//! and the agent's handle on every process of the job (ranks and whatever
//! they fork): signals, kill, removal.
//!
//! The cgroup also bounds the job on this node: pids.max and memory.max
//! (the job's JobLimits, else the node's defaults) are written when it is
//! made, before any rank joins it. A limit that cannot be set (its
//! controller is not enabled for the gang root) refuses the rank rather
//! than running it unbounded.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::thread::{self, JoinHandle};

use gang_wire::proto::JobLimits;
use nix::sys::signal::{kill, Signal};

use crate::gangs::procs;

/// Creates the job's cgroup (and the gang root if missing), sets its
/// limits, and opens its cgroup.procs for a child to join with: the write
/// permission is checked against the opener (the daemon), so the child may
/// write to it after it dropped its privileges.
pub fn create(dir: &Path, limits: &JobLimits) -> io::Result<File> {
    fs::create_dir_all(dir)?;
    set_limits(dir, limits)?;
    OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
}

/// Writes pids.max and memory.max (only those given). A controller not
/// enabled for the job is enabled first from the top of the hierarchy down
/// to the gang root, as systemd does (best effort: the missing file then
/// says what is wrong).
pub fn set_limits(dir: &Path, limits: &JobLimits) -> io::Result<()> {
    let wanted = [
        ("pids", "pids.max", limits.max_pids),
        ("memory", "memory.max", limits.max_memory),
    ];
    for (controller, file, value) in wanted {
        let Some(value) = value else { continue };
        let path = dir.join(file);
        if !path.exists() {
            if let Some(parent) = dir.parent() {
                enable_down_to(parent, controller);
            }
        }
        write_existing(&path, &value.to_string()).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::NotFound {
                format!(
                    "the {controller} controller is not enabled for {} (cgroup.subtree_control)",
                    dir.parent().unwrap_or(dir).display()
                )
            } else {
                e.to_string()
            };
            io::Error::new(e.kind(), format!("setting {}: {hint}", path.display()))
        })?;
    }
    Ok(())
}

/// Enables `controller` in the cgroup.subtree_control of every cgroup from
/// the hierarchy's root down to `dir` (each ancestor must offer it to the
/// next). Errors are left for the caller to find: a cgroup with processes
/// of its own (not the root) refuses, and that is the operator's layout.
fn enable_down_to(dir: &Path, controller: &str) {
    let mut chain: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| d.join("cgroup.controllers").exists())
        .collect();
    chain.reverse();
    for d in chain {
        let _ = write_existing(&d.join("cgroup.subtree_control"), &format!("+{controller}"));
    }
}

/// Moves the child of `cmd` into the cgroup of `procs` before it execs,
/// the move done by the daemon, not by the child.
///
/// Why not the child itself: a task that writes its own pid into a gang's
/// cgroup.procs becomes a gang task inside that write, while it still
/// holds cgroup_mutex; if its gang does not own the CPU then, the
/// scheduler parks it there, and every cgroup operation on the node (the
/// daemon's freezes among them) waits for a slot that can no longer come:
/// seen in the VM cluster as a "runnable task stall" of 31 s. So the child
/// sends its pid over a pipe and waits; a thread of the daemon (a task of
/// no gang, never parked) writes it into cgroup.procs and lets it go on.
/// The rank is in its gang before its first instruction, as before.
/// Call [`CgroupJoin::finish`] once the spawn returned.
pub fn join_before_exec(cmd: &mut Command, procs: File) -> io::Result<CgroupJoin> {
    let (pid_r, pid_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (child_pid_w, child_go_r) = (pid_w.as_raw_fd(), go_r.as_raw_fd());
    let (child_pid_r, child_go_w) = (pid_r.as_raw_fd(), go_w.as_raw_fd());
    // SAFETY: close, getpid, write and read are async-signal-safe and use
    // only fds and a stack buffer. The child closes the daemon's ends first,
    // so a daemon that gives up (closes go_w) is seen as EOF.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(child_pid_r);
            libc::close(child_go_w);
            let pid = libc::getpid().to_ne_bytes();
            if libc::write(child_pid_w, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                return Err(io::Error::last_os_error());
            }
            let mut ok = 0u8;
            if libc::read(child_go_r, (&mut ok as *mut u8).cast(), 1) != 1 {
                return Err(io::Error::other(
                    "the daemon did not move it into its cgroup",
                ));
            }
            Ok(())
        });
    }
    let mover = thread::Builder::new()
        .name("cgroup-join".into())
        .spawn(move || {
            let (mut pid_r, mut go_w, mut procs) = (File::from(pid_r), File::from(go_w), procs);
            let mut pid = [0u8; 4];
            pid_r.read_exact(&mut pid)?;
            procs.write_all(i32::from_ne_bytes(pid).to_string().as_bytes())?;
            go_w.write_all(b"1")
        })?;
    Ok(CgroupJoin {
        mover,
        child_ends: (pid_w, go_r),
    })
}

/// A move into a cgroup in progress (see [`join_before_exec`]).
pub struct CgroupJoin {
    mover: JoinHandle<io::Result<()>>,
    /// The child's ends of the pipes, kept open until the fork is done.
    child_ends: (OwnedFd, OwnedFd),
}

impl CgroupJoin {
    /// After the spawn: our copies of the child's ends go (a child that
    /// died before writing is then seen as EOF), and the mover's verdict.
    pub fn finish(self) -> io::Result<()> {
        drop(self.child_ends);
        self.mover
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the cgroup mover panicked")))
    }
}

/// Writes a file that must exist (cgroup files are never created).
fn write_existing(path: &Path, value: &str) -> io::Result<()> {
    use std::io::Write;
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
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
    use crate::gangs::job_dir;
    use gang_wire::proto::JobId;
    use std::path::PathBuf;

    /// A temporary directory standing in for the gang root (cgroup2 with
    /// the pids and memory controllers is not writable on every test host).
    fn fake_gang_root(tag: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("scx-gang-cg-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        root
    }

    #[test]
    fn a_job_cgroup_gets_its_limits_before_any_rank_joins() {
        let root = fake_gang_root("limits");
        let dir = job_dir(&root, JobId(5));
        fs::create_dir_all(&dir).unwrap();
        for f in ["pids.max", "memory.max", "cgroup.procs"] {
            fs::write(dir.join(f), "").unwrap();
        }
        let limits = JobLimits {
            max_pids: Some(300),
            max_memory: Some(1 << 30),
        };
        create(&dir, &limits).unwrap();
        assert_eq!(fs::read_to_string(dir.join("pids.max")).unwrap(), "300");
        assert_eq!(
            fs::read_to_string(dir.join("memory.max")).unwrap(),
            "1073741824"
        );
        // Only what is given is written.
        fs::write(dir.join("memory.max"), "max\n").unwrap();
        set_limits(
            &dir,
            &JobLimits {
                max_pids: Some(7),
                max_memory: None,
            },
        )
        .unwrap();
        assert_eq!(fs::read_to_string(dir.join("memory.max")).unwrap(), "max\n");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_limit_that_cannot_be_set_refuses_the_job_and_says_why() {
        let root = fake_gang_root("nolimit");
        let dir = job_dir(&root, JobId(6));
        let err = create(
            &dir,
            &JobLimits {
                max_pids: Some(10),
                max_memory: None,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().ends_with(&format!(
                "pids.max: the pids controller is not enabled for {} (cgroup.subtree_control)",
                root.display()
            )),
            "{err}"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_clusters_gang_limit_is_the_schedulers() {
        assert_eq!(gang_wire::proto::NODE_MAX_GANGS, crate::slots::MAX_GANGS);
    }
}
