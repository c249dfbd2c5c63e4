//! Open MPI's bootstrap on this node: a PMIx server per job, in a child
//! process of its own (`gang-pmix-server`, crate gang-pmix), run as the
//! job's user. MPICH keeps PMI-1 on PMI_FD (pmi.rs); every rank of a job
//! gets both, and each MPI uses its own (the user chooses nothing).
//!
//! Why a child, not libpmix in the agent (docs/pmix.md, "The server in a
//! child process"): libpmix 4.2 takes a TCP client's uid/gid from what the
//! client claims, wedges after refusing one, is one server per process,
//! and a fault in it would be root's. So:
//!
//! - At a job's first rank here, if gangd gave the job's layout
//!   (PmiStart), the agent starts the server next to its own executable
//!   as the job's user, with one end of a socketpair as fd 3 and a tmpdir
//!   of the user's (`/run/scx_gang-pmix/<node>/job<ID>`, 0700), sends it the job
//!   (gang_wire::pmix) and waits for Ready (at most START_TIMEOUT: libpmix
//!   reads the topology at init).
//! - Before any rank starts, the server's TCP port is guarded
//!   (crate::pmix_guard): only processes of the job's cgroup may connect to
//!   it. No guard (no cgroup BPF, no job cgroup), no server: the job's
//!   ranks get no PMIx environment, an Open MPI rank then fails in
//!   MPI_Init, and gangd is told why.
//! - Each rank's environment adds the server's answer to ForkEnv
//!   (PMIX_*, OMPI_MCA_*).
//! - A reader thread feeds the server's messages to the job's PMI state
//!   machine: a fence becomes a barrier of the job carrying this node's
//!   blob (gang_wire::pmi::fence); its barrier-out sends every node's blob
//!   back (PmiRelays::barrier_out); an abort fails the job with its
//!   status, as PMI_Abort does.
//! - The server goes with the job's relay (every local rank gone): its
//!   socket is closed for writing, the server finalizes and exits, the
//!   reader reads what it said to the end (an abort racing its rank's
//!   exit still fails the job) and lets the relay go; dropped, the server
//!   is killed if still there after STOP_GRACE, its port unguarded and
//!   its directory removed.
//!
//! Known faults: a restarted agent does not restart a running job's server
//! (its ranks' next fence fails, as for PMI-1); the wedge libpmix has after
//! refusing a client can still be caused by a process of the job itself.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::pmix::{self as vocab, Assembly, FromPmix, PmixJob, ToPmix};
use gang_wire::proto::frame::{read_frame, write_frame};
use gang_wire::proto::JobId;
use log::{debug, info, warn};

use crate::pmix_guard::PmixGuard;

use super::user::RankUser;

/// How long a server may take to start and register its job.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a ForkEnv may take.
const ENV_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write to the server may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a server may take to exit once its socket is closed.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Raw bytes per KVS value of a fence blob: base64 of it fits VALLEN_MAX.
pub const PIECE: usize = gang_wire::pmi::job::VALLEN_MAX / 4 * 3;

/// What the node needs to run PMIx servers.
pub struct PmixConfig {
    /// The server program (`gang-pmix-server`).
    pub exe: PathBuf,
    /// Each job's server gets a directory below it.
    pub tmp_root: PathBuf,
    pub guard: Arc<PmixGuard>,
}

impl PmixConfig {
    /// The server `exe` (default: next to this executable), tmpdirs below
    /// /run/scx_gang-pmix/`node` (not below /run/scx_gang: the knobs are
    /// mounted there) and the connect guard on the root of
    /// `gang_root`'s cgroup2 hierarchy; Err says what is missing.
    pub fn probe(gang_root: &Path, exe: Option<&Path>, node: &str) -> Result<PmixConfig, String> {
        // The topmost cgroup above the gang root: every process is below.
        let cgroup_root = gang_root
            .ancestors()
            .filter(|d| d.join("cgroup.controllers").is_file())
            .last()
            .ok_or_else(|| format!("{} is not in a cgroup2 hierarchy", gang_root.display()))?;
        let exe = match exe {
            Some(exe) => exe.to_path_buf(),
            None => std::env::current_exe()
                .map_err(|e| format!("finding our own executable: {e}"))?
                .with_file_name("gang-pmix-server"),
        };
        if !exe.is_file() {
            return Err(format!("{} is not installed", exe.display()));
        }
        let guard =
            PmixGuard::attach(cgroup_root).map_err(|e| format!("the PMIx connect guard: {e:#}"))?;
        Ok(PmixConfig {
            exe,
            // Per node name: agents sharing a host (tests) never share a
            // job's directory.
            tmp_root: super::peers::node_dir(Path::new("/run/scx_gang-pmix"), node),
            guard: Arc::new(guard),
        })
    }
}

/// One job's server: what the relay holds.
pub struct PmixServer {
    job: JobId,
    writer: Mutex<UnixStream>,
    envs: Mutex<Receiver<FromPmix>>,
    child: Mutex<Option<Child>>,
    port: u16,
    guard: Arc<PmixGuard>,
    tmpdir: PathBuf,
}

/// What the reader thread hands to the relay.
pub enum Event {
    /// This node's fence `id`, its blob whole.
    Fence { id: u64, blob: Vec<u8> },
    /// This node's fence `id`, whose blob could not be taken (too big, a
    /// bad chunk): it must fail.
    BadFence { id: u64, error: String },
    Abort {
        rank: u32,
        status: i32,
        message: String,
    },
    /// The server is gone (EOF, a bad frame).
    Gone(String),
}

impl PmixServer {
    /// Starts `job`'s server as `user`, guarded for the cgroup `cgroup`;
    /// `events` gets what the ranks do. Blocks until it is ready.
    pub fn start(
        cfg: &PmixConfig,
        job: &PmixJob,
        id: JobId,
        user: &RankUser,
        cgroup: &Path,
        events: impl Fn(Event) + Send + 'static,
    ) -> Result<Arc<PmixServer>, String> {
        let tmpdir = cfg.tmp_root.join(format!("job{}", id.0));
        make_tmpdir(&cfg.tmp_root, &tmpdir, user).map_err(|e| {
            format!(
                "making the PMIx server's directory {}: {e}",
                tmpdir.display()
            )
        })?;
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        let mut cmd = Command::new(&cfg.exe);
        cmd.arg("--tmpdir")
            .arg(&tmpdir)
            .arg("--hostname")
            .arg(&job.nodes[job.this_node])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .current_dir(&tmpdir);
        let fd = theirs.as_raw_fd();
        let user = user.clone();
        // SAFETY: dup2, prctl and the id changes are async-signal-safe
        // system calls on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, 3) < 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                user.become_user()
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", cfg.exe.display()))?;
        drop(theirs);
        let mut child = Some(child);
        let ready = handshake(&ours, job);
        let ready = ready.and_then(|uri| {
            let port = vocab::port_of_uri(&uri)
                .ok_or_else(|| format!("the server's address {uri:?} has no TCP port"))?;
            cfg.guard
                .allow(port, cgroup)
                .map_err(|e| format!("guarding port {port}: {e:#}"))?;
            Ok(port)
        });
        let port = match ready {
            Ok(port) => port,
            Err(why) => {
                drop(ours);
                stop(&mut child, id);
                let _ = fs::remove_dir_all(&tmpdir);
                return Err(why);
            }
        };
        ours.set_read_timeout(None)
            .and_then(|()| ours.set_write_timeout(Some(WRITE_TIMEOUT)))
            .map_err(|e| format!("PMIx server socket: {e}"))?;
        let reader = ours
            .try_clone()
            .map_err(|e| format!("PMIx server socket: {e}"))?;
        let (env_tx, env_rx) = mpsc::channel();
        let local_ranks = job.ranks_by_node[job.this_node].len();
        let server = Arc::new(PmixServer {
            job: id,
            writer: Mutex::new(ours),
            envs: Mutex::new(env_rx),
            child: Mutex::new(child),
            port,
            guard: cfg.guard.clone(),
            tmpdir,
        });
        thread::Builder::new()
            .name(format!("job{}-pmix", id.0))
            .spawn(move || read_loop(reader, local_ranks, env_tx, events))
            .map_err(|e| format!("no thread for the PMIx server: {e}"))?;
        info!("job {id}: PMIx server ready on 127.0.0.1:{port}, reachable from its cgroup only");
        Ok(server)
    }

    /// The environment rank `rank` needs to reach the server.
    pub fn fork_env(&self, rank: u32) -> Result<Vec<(String, String)>, String> {
        let envs = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        self.send(&ToPmix::ForkEnv { rank })?;
        let deadline = Instant::now() + ENV_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match envs.recv_timeout(left) {
                Ok(FromPmix::Env {
                    rank: r,
                    env,
                    error,
                }) if r == rank => {
                    return match error {
                        None => Ok(env),
                        Some(e) => Err(format!("the PMIx server: {e}")),
                    }
                }
                Ok(other) => debug!("job {}: PMIx: stale answer {other:?}", self.job),
                Err(_) => {
                    return Err(format!(
                        "the PMIx server gave no environment for rank {rank}"
                    ))
                }
            }
        }
    }

    /// Completes fence `id`: every node's blob joined, or why not.
    pub fn fence_done(&self, id: u64, result: Result<Vec<u8>, String>) {
        let sent = match result {
            Ok(blob) => vocab::fence_chunks(&blob)
                .try_for_each(|data| self.send(&ToPmix::FenceChunk { id, data }))
                .and_then(|()| self.send(&ToPmix::FenceDone { id, error: None })),
            Err(error) => {
                warn!("job {}: PMIx fence {id} failed: {error}", self.job);
                self.send(&ToPmix::FenceDone {
                    id,
                    error: Some(error),
                })
            }
        };
        if let Err(e) = sent {
            warn!("job {}: PMIx fence {id}: {e}", self.job);
        }
    }

    /// No more requests: the server sees EOF, finalizes and exits after
    /// what it still had to send (read to its end by the reader thread).
    pub fn close(&self) {
        let w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let _ = w.shutdown(std::net::Shutdown::Write);
    }

    fn send(&self, msg: &ToPmix) -> Result<(), String> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        write_frame(&mut *w, msg).map_err(|e| format!("writing to the PMIx server: {e}"))
    }
}

impl Drop for PmixServer {
    fn drop(&mut self) {
        let w = self.writer.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = w.shutdown(std::net::Shutdown::Both);
        let mut child = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        stop(&mut child, self.job);
        self.guard.forget(self.port);
        let _ = fs::remove_dir_all(&self.tmpdir);
        debug!("job {}: PMIx server stopped", self.job);
    }
}

/// Sends the job, waits for Ready (its URI) or Failed.
fn handshake(sock: &UnixStream, job: &PmixJob) -> Result<String, String> {
    let mut w = sock;
    sock.set_write_timeout(Some(WRITE_TIMEOUT))
        .and_then(|()| sock.set_read_timeout(Some(START_TIMEOUT)))
        .map_err(|e| format!("PMIx server socket: {e}"))?;
    write_frame(&mut w, &ToPmix::Job { job: job.clone() })
        .map_err(|e| format!("sending the job to the PMIx server: {e}"))?;
    let mut r = sock;
    match read_frame::<FromPmix>(&mut r) {
        Ok(Some(FromPmix::Ready { uri })) => Ok(uri),
        Ok(Some(FromPmix::Failed { error })) => Err(format!("the PMIx server failed: {error}")),
        Ok(Some(other)) => Err(format!("the PMIx server said {other:?} before Ready")),
        Ok(None) => Err("the PMIx server exited before it was ready".into()),
        Err(e) => Err(format!("waiting for the PMIx server: {e}")),
    }
}

/// The server's messages, until it is gone: environments to whoever
/// waits for one, the rest to the relay. A fence's chunks are held up to
/// the bound of `local_ranks` ranks' data.
fn read_loop(
    mut sock: UnixStream,
    local_ranks: usize,
    envs: Sender<FromPmix>,
    events: impl Fn(Event),
) {
    let mut fences = Assembly::new(vocab::max_fence_bytes(local_ranks));
    let why = loop {
        let msg = match read_frame::<FromPmix>(&mut sock) {
            Ok(Some(m)) => m,
            Ok(None) => break "it closed its socket".to_string(),
            Err(e) => break format!("{e}"),
        };
        match msg {
            FromPmix::Env { .. } => {
                let _ = envs.send(msg);
            }
            FromPmix::FenceChunk { id, data } => {
                if let Err(e) = fences.chunk(id, &data) {
                    warn!("PMIx fence {id}: {e}");
                }
            }
            FromPmix::Fence { id, .. } => match fences.finish(id) {
                Ok(blob) => events(Event::Fence { id, blob }),
                Err(e) => events(Event::BadFence { id, error: e }),
            },
            FromPmix::Abort {
                rank,
                status,
                message,
            } => events(Event::Abort {
                rank,
                status,
                message,
            }),
            FromPmix::Finalized { rank } => debug!("PMIx: rank {rank} finalized"),
            other => warn!("PMIx server: unexpected {other:?}: ignored"),
        }
    };
    events(Event::Gone(why));
}

/// The job's tmpdir, the user's own: 0700, made afresh.
fn make_tmpdir(root: &Path, dir: &Path, user: &RankUser) -> io::Result<()> {
    fs::create_dir_all(root)?;
    for d in root.ancestors().take(2) {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755))?;
    }
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    fs::create_dir(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    chown(dir, Some(user.uid), Some(user.gid))
}

/// Waits up to STOP_GRACE for the server to exit, then kills it.
fn stop(child: &mut Option<Child>, job: JobId) {
    let Some(mut c) = child.take() else { return };
    let deadline = Instant::now() + STOP_GRACE;
    loop {
        match c.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    debug!("job {job}: PMIx server exited: {status}");
                }
                return;
            }
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => break,
        }
    }
    warn!("job {job}: PMIx server still running {STOP_GRACE:?} after its socket closed: killed");
    let _ = c.kill();
    let _ = c.wait();
}

/// Cuts `blob` into KVS values (PIECE raw bytes each, base64).
pub fn pieces(blob: &[u8]) -> Vec<String> {
    blob.chunks(PIECE).map(vocab::encode).collect()
}

/// Joins KVS values back into a blob.
pub fn join(values: &[String]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for v in values {
        out.extend(vocab::decode(v)?);
    }
    Ok(out)
}
