//! The ranks running on this node: starting them in their job's cgroup
//! under the user's ids, relaying their output, reaping them, and acting on
//! a whole job (signal, suspend, resume).
//!
//! Per job: gangd's StartJob (the same message for every node) names no
//! rank; the job worker starts the ranks the job's table gives this node
//! (JobPeers, peers.rs), one by one on the one per-rank path (`spawn`),
//! answers RanksStarted once, then per rank two pump threads forward
//! stdout and stderr in chunks of at most MAX_OUTPUT_CHUNK bytes, and a
//! reaper thread waits for it (ends.rs, which also takes over the ranks a
//! previous daemon left, adopt.rs). The pumps start after RanksStarted
//! is sent, so a rank's output never comes before it (the pipe holds it
//! meanwhile). A node that knows none of its ranks of the job (no table,
//! none of its ranks in it, a size other than the table's) answers
//! StartFailed with the reason.
//!
//! A rank runs as its job's user, never root or a system account unless
//! the operator allows it (`--min-rank-uid`), with the user's groups, sane
//! resource limits and its working directory entered as the user
//! (user.rs), in a cgroup bounding the job (cgroup.rs).
//!
//! Ranks never depend on gangd: a lost connection kills nothing, and what
//! they print or how they end is kept for the next connection (link.rs).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;

use std::ffi::CString;

use gang_wire::proto::{
    ExitStatus, FromAgent, JobId, JobLimits, LiveJob, Stream, MAX_OUTPUT_CHUNK,
};
use log::{info, warn};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::freezer::FreezeHolds;
use crate::gangs;

use super::adopt::{self, JobRecord};
use super::cgroup;
use super::link::Link;
use super::peers::PeerTables;
use super::pmi::{self, PmiRelays};
use super::pmix::PmixConfig;
use super::prepare;
use super::user::RankUser;

/// What StartJob asks for: the job, the same for each of its ranks.
#[derive(Clone, Debug)]
pub struct JobStart {
    pub job: JobId,
    pub name: String,
    pub size: u32,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    /// The job's own limits (None: the node's default).
    pub limits: JobLimits,
}

/// What the node allows ranks: set by the operator on its command line.
#[derive(Clone, Copy, Debug)]
pub struct RankRules {
    /// Ranks of users below this uid are refused; 0 allows root.
    pub min_uid: u32,
    /// A job's cgroup limits when the job sets none.
    pub default_limits: JobLimits,
}

impl RankRules {
    /// The job's limits, each falling back to the node's default.
    pub fn limits_of(&self, job: &JobLimits) -> JobLimits {
        JobLimits {
            max_pids: job.max_pids.or(self.default_limits.max_pids),
            max_memory: job.max_memory.or(self.default_limits.max_memory),
        }
    }
}

pub(super) struct Job {
    pub(super) name: String,
    pub(super) size: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// Live ranks here: rank → pid.
    pub(super) live: BTreeMap<u32, u32>,
}

pub(super) struct Inner {
    pub(super) node: String,
    /// None: ranks are not placed in cgroups (tests on hosts without a
    /// writable cgroup2); whole-job actions then use the ranks' pids.
    gang_root: Option<PathBuf>,
    pub(super) link: Arc<Link>,
    pub(super) holds: FreezeHolds,
    rules: RankRules,
    /// The agent stopped (its shutdown flag): a rank ending now is left
    /// to the next agent (ends.rs).
    pub(super) stopped: Arc<AtomicBool>,
    /// MPI bootstrap: each rank's PMI_FD.
    pmi: Arc<PmiRelays>,
    /// The jobs' peer lists (GANG_PEERS).
    peers: PeerTables,
    /// Jobs with live ranks here. Held while a rank starts, a job's last
    /// rank is retired or its cgroup removed, so none of these can catch
    /// another halfway (no leftover kill can hit a rank just started).
    jobs: Mutex<BTreeMap<JobId, Job>>,
}

#[derive(Clone)]
pub struct Ranks {
    pub(super) inner: Arc<Inner>,
}

impl Ranks {
    pub fn new(
        node: String,
        gang_root: Option<PathBuf>,
        link: Arc<Link>,
        holds: FreezeHolds,
        rules: RankRules,
        pmix: Result<PmixConfig, String>,
        stopped: Arc<AtomicBool>,
    ) -> Self {
        let to_gangd = link.clone();
        Self {
            inner: Arc::new(Inner {
                node: node.clone(),
                gang_root,
                pmi: PmiRelays::new(
                    Arc::new(move |m| {
                        to_gangd.send(m);
                    }),
                    pmix,
                ),
                peers: PeerTables::new(&node),
                link,
                holds,
                rules,
                stopped,
                jobs: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// The jobs' PMI relays (PmiStart, PmiBarrierOut).
    pub fn pmi(&self) -> &PmiRelays {
        &self.inner.pmi
    }

    /// The jobs' peer tables (JobPeers).
    pub fn peers(&self) -> &PeerTables {
        &self.inner.peers
    }

    /// No rank of `job` runs here: its peer table and list file go, unless
    /// a rank of it is still to start (peers.rs). Under the table's lock,
    /// so a rank starting now keeps them.
    pub(super) fn release_peers(&self, job: JobId) {
        let jobs = self.lock();
        if !jobs.contains_key(&job) {
            self.inner.peers.release(job);
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, BTreeMap<JobId, Job>> {
        self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn dir(&self, job: JobId) -> Option<PathBuf> {
        self.inner
            .gang_root
            .as_deref()
            .map(|root| gangs::job_dir(root, job))
    }

    /// Jobs with live ranks here, for Hello.
    pub fn live_jobs(&self) -> Vec<LiveJob> {
        self.lock()
            .iter()
            .map(|(&job, j)| LiveJob {
                job,
                name: j.name.clone(),
                size: j.size,
                uid: j.uid,
                gid: j.gid,
                ranks: j.live.keys().copied().collect(),
            })
            .collect()
    }

    /// Prepare: None if the job may start here, else why not (prefixed
    /// with the node's name). Checks the user, then the program and cwd as
    /// the user; may take up to prepare::CHECK_TIMEOUT.
    pub fn prepare(
        &self,
        argv: &[String],
        env: &[(String, String)],
        cwd: &str,
        uid: u32,
        gid: u32,
    ) -> Option<String> {
        let node = &self.inner.node;
        match RankUser::resolve(uid, gid, self.inner.rules.min_uid) {
            Ok(user) => prepare::check(node, argv, env, cwd, &user),
            Err(why) => Some(format!("{node}: {why}")),
        }
    }

    /// StartJob: starts this node's ranks of the job, those its table
    /// gives this node (peers.rs), each as `spawn` does; answers
    /// RanksStarted with those that started (a rank that could not is a
    /// RankExited 127), then relays their output and exits. StartFailed
    /// when the node knows none of its ranks of the job.
    pub fn start_job(&self, spec: JobStart) {
        let job = spec.job;
        let link = &self.inner.link;
        let mine = match self.inner.peers.ranks_of(job) {
            None => Err(format!(
                "no peer table for job {job} (its JobPeers was refused or never came)"
            )),
            Some((size, _)) if size != spec.size => Err(format!(
                "job {job} of {} ranks, but its peer table has {size}",
                spec.size
            )),
            Some((_, mine)) if mine.is_empty() => {
                Err(format!("job {job}'s peer table gives this node no rank"))
            }
            Some((_, mine)) => Ok(mine),
        };
        let mine = match mine {
            Ok(mine) => mine,
            Err(reason) => {
                warn!("{}: cannot start job {job}: {reason}", self.inner.node);
                self.inner.peers.forget(job);
                self.release_peers(job);
                link.send(FromAgent::StartFailed { job, reason });
                return;
            }
        };
        let started: Vec<(u32, Child)> = mine
            .into_iter()
            .filter_map(|rank| self.spawn(&spec, rank).map(|child| (rank, child)))
            .collect();
        if started.is_empty() {
            return;
        }
        let pids = started.iter().map(|(r, c)| (*r, c.id())).collect();
        link.send(FromAgent::RanksStarted { job, ranks: pids });
        for (rank, child) in started {
            self.relay(job, rank, child);
        }
    }

    /// Starts rank `rank` of the job: its process, or an Error and
    /// RankExited(127) to gangd and None.
    fn spawn(&self, spec: &JobStart, rank: u32) -> Option<Child> {
        let job = spec.job;
        let link = &self.inner.link;
        let started = self.start(spec, rank);
        self.inner.peers.started(job, rank);
        self.release_peers(job);
        let (child, program) = match started {
            Ok(started) => started,
            Err(why) => {
                let message = format!("{}: job {job} rank {rank}: {why}", self.inner.node);
                warn!("{message}");
                link.send(FromAgent::Error { message });
                link.send(FromAgent::RankExited {
                    job,
                    rank,
                    status: ExitStatus::Exited(127),
                });
                self.remove_cgroup_if_idle(job);
                return None;
            }
        };
        info!(
            "job {job} ({}) rank {rank}/{} started: pid {}, {} as {}:{}",
            spec.name,
            spec.size,
            child.id(),
            program.display(),
            spec.uid,
            spec.gid
        );
        Some(child)
    }

    /// A started rank's output relayed to gangd (two pump threads) and
    /// its exit (a reaper thread).
    fn relay(&self, job: JobId, rank: u32, mut child: Child) {
        let (done, pumps_done) = mpsc::channel::<()>();
        let pipes: [(Stream, Option<Box<dyn Read + Send>>); 2] = [
            (
                Stream::Stdout,
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
            (
                Stream::Stderr,
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
        ];
        for (stream, pipe) in pipes {
            let Some(pipe) = pipe else { continue };
            let (link, done) = (self.inner.link.clone(), done.clone());
            let pumped = thread::Builder::new()
                .name(format!("job{job}-r{rank}-out"))
                .spawn(move || {
                    pump(&link, job, rank, stream, pipe);
                    drop(done);
                });
            if let Err(e) = pumped {
                warn!("job {job} rank {rank}: no thread to relay its {stream:?}: {e}");
            }
        }
        drop(done);
        let ranks = self.clone();
        let reaped = thread::Builder::new()
            .name(format!("job{job}-r{rank}-reap"))
            .spawn(move || ranks.reap(job, rank, &mut child, pumps_done));
        if let Err(e) = reaped {
            warn!(
                "job {job} rank {rank}: no thread to reap it: {e}; its exit will not be reported"
            );
        }
    }

    /// Starts the rank's process; the job's cgroup is made first.
    fn start(&self, spec: &JobStart, rank: u32) -> Result<(Child, PathBuf), String> {
        let user = RankUser::resolve(spec.uid, spec.gid, self.inner.rules.min_uid)?;
        let first = spec.argv.first().ok_or("empty command (no program)")?;
        // As the user, in a child, before the table is locked (prepare.rs).
        let program =
            prepare::find_program(first, &spec.env, &spec.cwd, &user, prepare::CHECK_TIMEOUT)?;
        let limits = self.inner.rules.limits_of(&spec.limits);
        let dir = self.dir(spec.job);
        // Open MPI's PMIx server, started with the job's first rank here
        // (pmix.rs) before the table is locked: its start takes a moment.
        // Its port is guarded for the job's cgroup, so that comes first.
        let pmix_env = if self.inner.pmi.wants_pmix(spec.job) {
            let cgroup = dir.as_deref().filter(|d| match cgroup::create(d, &limits) {
                Ok(_) => true,
                Err(e) => {
                    warn!("job {}: creating cgroup {}: {e}", spec.job, d.display());
                    false
                }
            });
            self.inner.pmi.pmix_env(spec.job, rank, &user, cgroup)
        } else {
            Vec::new()
        };
        let mut jobs = self.lock();
        if let Some(pid) = jobs.get(&spec.job).and_then(|j| j.live.get(&rank)) {
            return Err(format!("rank {} is already running here (pid {pid})", rank));
        }
        let peers_env = self.inner.peers.env(spec.job, rank, user.uid, user.gid)?;
        let cwd = CString::new(spec.cwd.as_bytes())
            .map_err(|_| format!("cwd {:?} contains a NUL byte", spec.cwd))?;
        let procs: Option<File> = match &dir {
            Some(dir) => {
                let procs = cgroup::create(dir, &limits)
                    .map_err(|e| format!("creating cgroup {}: {e}", dir.display()))?;
                let record = JobRecord {
                    job: spec.job,
                    name: spec.name.clone(),
                    size: spec.size,
                    uid: spec.uid,
                    gid: spec.gid,
                };
                adopt::record_job(dir, &record)
                    .map_err(|e| format!("recording the job on {}: {e}", dir.display()))?;
                Some(procs)
            }
            None => None,
        };

        let mut cmd = Command::new(&program);
        cmd.arg0(first)
            .args(&spec.argv[1..])
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("GANG_RANK", rank.to_string())
            .env("GANG_SIZE", spec.size.to_string())
            .env("GANG_JOB", spec.job.to_string())
            .env("GANG_JOB_NAME", &spec.name)
            .env("GANG_NODE", &self.inner.node)
            .envs(peers_env);
        // The ids and the cwd are set by the last pre_exec step, not by std
        // (which would drop the supplementary groups, and enter the cwd as
        // root).
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setsid(2) is async-signal-safe. A session of its own: a
        // Ctrl-C or hangup meant for the daemon's terminal never reaches a
        // rank (gangd's KillJob is the way to signal a job).
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // MPI bootstrap over the rank's own socket (agent/pmi.rs).
        let pmi_socket = self
            .inner
            .pmi
            .socket(spec.job, rank)
            .map_err(|e| format!("making its PMI socket: {e}"))?;
        pmi::prepare(&mut cmd, pmi_socket.as_ref());
        cmd.envs(pmix_env);
        // The child is put in the job's cgroup (by a thread of ours) before
        // it execs: the rank and all it forks are in the gang from its
        // first instruction.
        let mover = match procs {
            Some(procs) => Some(
                cgroup::join_before_exec(&mut cmd, procs)
                    .map_err(|e| format!("preparing its move into the job's cgroup: {e}"))?,
            ),
            None => None,
        };
        // SAFETY: become_user only makes system calls on memory prepared
        // before the fork, and chdir(2) is async-signal-safe. After the
        // cgroup write (done with root's rights), so the rank enters its
        // cwd and executes its program with the user's rights only.
        unsafe {
            cmd.pre_exec(move || {
                user.become_user()?;
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            format!(
                "starting {} as {}:{} in {}: {e}",
                program.display(),
                spec.uid,
                spec.gid,
                spec.cwd
            )
        })?;
        if let Some(mover) = mover {
            // The child exec'd, so the move was made (a failed move stops
            // it in pre_exec); anything said here is after the fact.
            if let Err(e) = mover.finish() {
                warn!("job {} rank {}: cgroup move: {e}", spec.job, rank);
            }
        }
        if let Some(socket) = pmi_socket {
            socket.serve();
        }
        if let Some(dir) = &dir {
            if let Err(e) = adopt::record_rank(dir, rank, child.id()) {
                warn!(
                    "job {} rank {}: recording its pid on {}: {e}; a restarted daemon will not adopt it",
                    spec.job,
                    rank,
                    dir.display()
                );
            }
        }
        jobs.entry(spec.job)
            .or_insert_with(|| Job {
                name: spec.name.clone(),
                size: spec.size,
                uid: spec.uid,
                gid: spec.gid,
                live: BTreeMap::new(),
            })
            .live
            .insert(rank, child.id());
        Ok((child, program))
    }

    /// KillJob: `signal` to every process of the job here. A suspended job
    /// is thawed afterwards so that it can act on the signal.
    pub fn kill(&self, job: JobId, signal: i32) -> Result<(), String> {
        let sig = Signal::try_from(signal).map_err(|_| format!("{signal} is not a signal"))?;
        let jobs = self.lock();
        let Some(j) = jobs.get(&job) else {
            info!("kill job {job} with {sig}: no rank of it runs here");
            return Ok(());
        };
        match self.dir(job) {
            Some(dir) => {
                let n = cgroup::signal_all(&dir, sig)
                    .map_err(|e| format!("signalling cgroup {}: {e}", dir.display()))?;
                info!("job {job}: {sig} sent to its {n} processes");
                if self.inner.holds.is_suspended(&dir) {
                    self.inner
                        .holds
                        .resume(&dir)
                        .map_err(|e| format!("thawing suspended job {job}: {e}"))?;
                    info!("job {job} was suspended: resumed so that it acts on {sig}");
                }
            }
            None => {
                for &pid in j.live.values() {
                    let _ = kill(Pid::from_raw(pid as i32), sig);
                }
                info!("job {job}: {sig} sent to its {} ranks", j.live.len());
            }
        }
        Ok(())
    }

    /// SuspendJob (true) / ResumeJob (false): the job's cgroup freezer.
    pub fn suspend(&self, job: JobId, suspend: bool) -> Result<(), String> {
        let what = if suspend { "suspend" } else { "resume" };
        let jobs = self.lock();
        if !jobs.contains_key(&job) {
            info!("{what} job {job}: no rank of it runs here");
            return Ok(());
        }
        let dir = self.dir(job).ok_or_else(|| {
            format!("cannot {what} job {job}: ranks are not placed in cgroups here")
        })?;
        let holds = &self.inner.holds;
        if suspend {
            holds
                .suspend(&dir)
                .map_err(|e| format!("freezing {}: {e}", dir.display()))?;
            info!("job {job} suspended");
        } else {
            let thawed = holds
                .resume(&dir)
                .map_err(|e| format!("thawing {}: {e}", dir.display()))?;
            info!(
                "job {job} resumed{}",
                if thawed {
                    ""
                } else {
                    " (parked by the slot switch until the next Switch)"
                }
            );
        }
        Ok(())
    }
}

/// Forwards one pipe of a rank until its end.
fn pump(link: &Link, job: JobId, rank: u32, stream: Stream, mut pipe: Box<dyn Read + Send>) {
    let mut buf = vec![0; MAX_OUTPUT_CHUNK];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                link.send_bulk(FromAgent::RankOutput {
                    job,
                    rank,
                    stream,
                    data: buf[..n].to_vec().into(),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                warn!("job {job} rank {rank}: reading its {stream:?}: {e}");
                return;
            }
        }
    }
}
