//! How ranks end: the reaper of a rank started here waits for it, lets
//! its output pumps reach the end of the pipes (so the output arrives
//! before the exit), reports RankExited, and removes the job's cgroup (and
//! its peer list, peers.rs) after its last rank here. A rank adopted after a restart (adopt.rs) is watched
//! through a pidfd instead, and ends the same way.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::proto::{ExitStatus, FromAgent, JobId};
use log::{info, warn};
use nix::sys::signal::Signal;

use super::adopt::{self, Found};
use super::cgroup;
use super::ranks::{Job, Ranks};

/// How long a reaper waits for a rank's output to end after the rank
/// exited: a process it left behind may hold the pipes open.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// How long removing a job's cgroup waits for its killed leftovers to go.
const REMOVE_PATIENCE: Duration = Duration::from_secs(2);

impl Ranks {
    pub(super) fn reap(&self, job: JobId, rank: u32, child: &mut Child, pumps_done: Receiver<()>) {
        let pid = child.id();
        let status = match child.wait() {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => ExitStatus::Exited(code),
                (None, Some(sig)) => ExitStatus::Signaled(sig),
                (None, None) => ExitStatus::Exited(-1),
            },
            Err(e) => {
                warn!("job {job} rank {rank}: waiting for pid {pid}: {e}");
                ExitStatus::Exited(-1)
            }
        };
        self.ended(job, rank, pid, status, Some(pumps_done));
    }

    /// A rank ended: retired, its output awaited (if it is relayed), its
    /// exit reported, and its job's cgroup removed after the last rank.
    fn ended(
        &self,
        job: JobId,
        rank: u32,
        pid: u32,
        status: ExitStatus,
        pumps_done: Option<Receiver<()>>,
    ) {
        let last = self.retire(job, rank);
        let deadline = Instant::now() + OUTPUT_GRACE;
        while let Some(pumps) = &pumps_done {
            match pumps.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(()) => {}
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    info!("job {job} rank {rank}: its output is still open {} s after it ended (a process left behind?): reporting the exit", OUTPUT_GRACE.as_secs());
                    break;
                }
            }
        }
        if self.inner.stopped.load(Ordering::Relaxed) {
            // This agent is gone (in tests, a second one runs in the same
            // process and adopted the rank): its cgroup and its end are
            // the next agent's business.
            info!("job {job} rank {rank} (pid {pid}) {status} after this agent stopped: left to the next");
            return;
        }
        info!("job {job} rank {rank} (pid {pid}) {status}");
        self.inner
            .link
            .send(FromAgent::RankExited { job, rank, status });
        if last {
            self.release_peers(job);
            self.remove_cgroup_if_idle(job);
        }
    }

    /// Takes over a job found in its cgroup at start (adopt.rs): its live
    /// ranks are watched until they end, a suspension is kept, and a cgroup
    /// with no live rank is emptied and removed.
    pub fn adopt(&self, found: Found) {
        let job = found.record.job;
        let Some(dir) = self.dir(job) else { return };
        if found.ranks.is_empty() {
            info!("job {job}: no rank of it is left: removing its cgroup");
            if let Err(e) = cgroup::signal_all(&dir, Signal::SIGKILL) {
                warn!("job {job}: killing its leftovers: {e}");
            }
            self.remove_cgroup_if_idle(job);
            return;
        }
        if found.suspended {
            if let Err(e) = self.inner.holds.suspend(&dir) {
                warn!("job {job}: keeping its suspension: {e}");
            }
        }
        let r = &found.record;
        self.lock().insert(
            job,
            Job {
                name: r.name.clone(),
                size: r.size,
                uid: r.uid,
                gid: r.gid,
                live: found.ranks.iter().copied().collect(),
            },
        );
        for (rank, pid) in found.ranks {
            let ranks = self.clone();
            let watched = thread::Builder::new()
                .name(format!("job{job}-r{rank}-adopted"))
                .spawn(move || {
                    adopt::wait_exit(pid);
                    info!("job {job} rank {rank} (pid {pid}, adopted) ended: its exit status went to its new parent");
                    ranks.ended(job, rank, pid, adopt::ADOPTED_EXIT, None);
                });
            if let Err(e) = watched {
                warn!("job {job} rank {rank}: no thread to watch it: {e}");
            }
        }
        info!("job {job} ({}) adopted", r.name);
    }

    /// A rank is gone; after the job's last rank here, what its ranks left
    /// behind in the cgroup is killed. Returns whether it was the last.
    fn retire(&self, job: JobId, rank: u32) -> bool {
        let mut jobs = self.lock();
        let Some(j) = jobs.get_mut(&job) else {
            return false;
        };
        j.live.remove(&rank);
        if !j.live.is_empty() {
            return false;
        }
        jobs.remove(&job);
        if let Some(dir) = self.dir(job) {
            match cgroup::signal_all(&dir, Signal::SIGKILL) {
                Ok(0) => {}
                Ok(n) => info!("job {job}: killed {n} processes its ranks left behind"),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => warn!("job {job}: killing what its ranks left behind: {e}"),
            }
        }
        true
    }

    /// Removes the job's cgroup unless a rank of it runs here (again).
    pub(super) fn remove_cgroup_if_idle(&self, job: JobId) {
        let Some(dir) = self.dir(job) else { return };
        let deadline = Instant::now() + REMOVE_PATIENCE;
        loop {
            {
                let jobs = self.lock();
                if jobs.contains_key(&job) {
                    return;
                }
                match cgroup::try_remove(&dir) {
                    Ok(true) => {
                        self.inner.holds.forget(&dir);
                        return;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        warn!("job {job}: removing cgroup {}: {e}", dir.display());
                        return;
                    }
                }
            }
            if Instant::now() >= deadline {
                warn!(
                    "job {job}: cgroup {} still has processes {} s after its last rank: left in place",
                    dir.display(),
                    REMOVE_PATIENCE.as_secs()
                );
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}
