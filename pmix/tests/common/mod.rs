//! What the PMIx tests share: one server per test process (libpmix is a
//! singleton) with a [`TestHost`] that records every upcall and completes
//! fences on this one node, programs compiled from tests/clients/, and
//! ranks started with the server's fork environment.
//!
//! Tests skip (printing why, not passing silently as a feature test) only
//! when libpmix-dev is not installed; scripts/setup.sh installs it.
#![allow(dead_code)]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gang_pmix::{FenceDone, Host, PmixJob, Proc, Server};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Connected(Proc),
    Finalized(Proc),
    Abort {
        nspace: String,
        rank: u32,
        status: i32,
        msg: String,
    },
    Fence {
        nspace: String,
        bytes: usize,
        collect: bool,
    },
}

/// A fence held for the test: this node's blob and its completion.
pub type Held = (Vec<u8>, FenceDone);

/// Records upcalls; a fence completes at once with this node's data,
/// unless its namespace is to be joined with another node's blob
/// (`join_with`), which the test completes.
#[derive(Default)]
pub struct TestHost {
    events: Mutex<Vec<Event>>,
    cv: Condvar,
    /// Fences held for the test to complete (nspace → local blob, done).
    held: Mutex<BTreeMap<String, Vec<Held>>>,
    hold: Mutex<Vec<String>>,
}

impl TestHost {
    fn push(&self, e: Event) {
        self.events.lock().unwrap().push(e);
        self.cv.notify_all();
    }

    /// Every event of `nspace` so far.
    pub fn events_of(&self, nspace: &str) -> Vec<Event> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| match e {
                Event::Connected(p) | Event::Finalized(p) => p.nspace == nspace,
                Event::Abort { nspace: n, .. } | Event::Fence { nspace: n, .. } => n == nspace,
            })
            .cloned()
            .collect()
    }

    /// Waits up to `limit` for an event matching `f`.
    pub fn wait_for(&self, limit: Duration, f: impl Fn(&Event) -> bool) -> Option<Event> {
        let end = Instant::now() + limit;
        let mut ev = self.events.lock().unwrap();
        loop {
            if let Some(e) = ev.iter().find(|e| f(e)) {
                return Some(e.clone());
            }
            let left = end.checked_duration_since(Instant::now())?;
            ev = self.cv.wait_timeout(ev, left).unwrap().0;
        }
    }

    /// Fences of `nspace` are held for [`TestHost::take_held`].
    pub fn hold_fences(&self, nspace: &str) {
        self.hold.lock().unwrap().push(nspace.to_string());
    }

    /// The held fences of `nspace` once there are `n`, within `limit`.
    pub fn take_held(&self, nspace: &str, n: usize, limit: Duration) -> Vec<Held> {
        let end = Instant::now() + limit;
        loop {
            {
                let mut held = self.held.lock().unwrap();
                if held.get(nspace).is_some_and(|v| v.len() >= n) {
                    return held.remove(nspace).unwrap();
                }
            }
            assert!(Instant::now() < end, "{n} fences of {nspace} never came");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Host for TestHost {
    fn client_connected(&self, p: &Proc) {
        self.push(Event::Connected(p.clone()));
    }
    fn client_finalized(&self, p: &Proc) {
        self.push(Event::Finalized(p.clone()));
    }
    fn abort(&self, nspace: &str, rank: u32, status: i32, msg: &str, _targets: &[Proc]) {
        self.push(Event::Abort {
            nspace: nspace.into(),
            rank,
            status,
            msg: msg.into(),
        });
    }
    fn fence(&self, nspace: &str, _procs: &[Proc], data: Vec<u8>, collect: bool, done: FenceDone) {
        self.push(Event::Fence {
            nspace: nspace.into(),
            bytes: data.len(),
            collect,
        });
        if self.hold.lock().unwrap().iter().any(|n| n == nspace) {
            self.held
                .lock()
                .unwrap()
                .entry(nspace.into())
                .or_default()
                .push((data, done));
        } else {
            done.complete(Ok(data));
        }
    }
}

/// Whether the PMIx (and, with `mpi`, Open MPI) packages are here; prints
/// why not.
pub fn have(mpi: bool) -> bool {
    let pmix = Command::new("pkg-config")
        .args(["--exists", "pmix"])
        .status()
        .is_ok_and(|s| s.success());
    if !pmix {
        eprintln!("SKIPPED: libpmix-dev is not installed (scripts/setup.sh installs it)");
        return false;
    }
    if mpi && !Path::new("/usr/bin/mpicc.openmpi").exists() {
        eprintln!("SKIPPED: mpicc.openmpi is not installed (libopenmpi-dev, scripts/setup.sh)");
        return false;
    }
    true
}

pub struct Fixture {
    pub server: Server,
    pub host: Arc<TestHost>,
}

/// The process's one server, on a node named by gethostname().
pub fn fixture() -> &'static Fixture {
    fixture_as(None)
}

/// The process's one server, on a node named `name` (the first call
/// names it).
pub fn fixture_as(name: Option<&str>) -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pmix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let host = Arc::new(TestHost::default());
        let server = Server::start_as(&dir, name, host.clone()).expect("PMIx server start");
        Fixture { server, host }
    })
}

/// Compiles tests/clients/`src` with `cc` (a C compiler or mpicc) into the
/// target's temporary directory, once per process.
pub fn build(src: &str, cc: &str, flags: &[String]) -> PathBuf {
    // One compile at a time, each to a temporary name renamed when done:
    // a test must never exec a half-written binary (ETXTBSY).
    // Built once per test process (the source may have changed since the
    // last run); the rename is atomic, so another test process running
    // the previous binary keeps its copy.
    static BUILT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join(format!(
        "{}-{}",
        src.replace('.', "_"),
        cc.replace(['/', '.'], "_")
    ));
    if built.contains(&out) {
        return out;
    }
    let srcpath = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(src);
    let o = Command::new(cc)
        .arg("-Wall")
        .arg("-O1")
        .arg("-o")
        .arg(out.with_extension(format!("tmp{}", std::process::id())))
        .arg(&srcpath)
        .args(flags)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        o.status.success(),
        "{cc} {src}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::rename(
        out.with_extension(format!("tmp{}", std::process::id())),
        &out,
    )
    .unwrap();
    built.push(out.clone());
    out
}

/// pkg-config's flags for libpmix.
pub fn pmix_flags() -> Vec<String> {
    let o = Command::new("pkg-config")
        .args(["--cflags", "--libs", "pmix"])
        .output()
        .unwrap();
    String::from_utf8(o.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// A job on one node of this host.
pub fn one_node(nspace: &str, size: u32) -> PmixJob {
    PmixJob {
        nspace: nspace.into(),
        size,
        nodes: vec![hostname()],
        ranks_by_node: vec![(0..size).collect()],
        this_node: 0,
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
    }
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable and its length is given.
    unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Starts `ranks` of `nspace` running `exe args` with the fork environment
/// plus `extra`, and waits for all (killing any still running after
/// `limit`). Outputs in rank order.
pub fn run_ranks(
    server: &Server,
    nspace: &str,
    ranks: &[u32],
    exe: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
    limit: Duration,
) -> Vec<Output> {
    wait_ranks(spawn_ranks(server, nspace, ranks, exe, args, extra), limit)
}

/// Starts the ranks (as [`run_ranks`]) without waiting.
pub fn spawn_ranks(
    server: &Server,
    nspace: &str,
    ranks: &[u32],
    exe: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
) -> Vec<Child> {
    spawn_ranks_with(server, nspace, ranks, exe, args, extra, |_| {})
}

/// As [`spawn_ranks`], `adjust` changing each rank's command (its user).
pub fn spawn_ranks_with(
    server: &Server,
    nspace: &str,
    ranks: &[u32],
    exe: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
    adjust: impl Fn(&mut Command),
) -> Vec<Child> {
    ranks
        .iter()
        .map(|&r| {
            let env = server.fork_env(nspace, r).expect("fork_env");
            let mut cmd = Command::new(exe);
            cmd.args(args)
                .envs(env)
                .envs(extra.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            adjust(&mut cmd);
            cmd.spawn().expect("spawn rank")
        })
        .collect()
}

/// Waits for every child, killing those still running after `limit`.
pub fn wait_ranks(children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let end = Instant::now() + limit;
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let killer = std::thread::spawn(move || {
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            if pids
                .iter()
                .all(|&p| unsafe { libc::kill(p as i32, 0) } != 0)
            {
                return;
            }
        }
        for p in pids {
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
    });
    let outs = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    drop(killer);
    outs
}

/// Asserts every output succeeded, showing their stderr if not.
pub fn assert_all_ok(outs: &[Output]) {
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {i}: {:?}\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Asserts rank `ranks[i]`'s stdout has `said` with `{r}` replaced by
/// its rank (so a rank that ran as a singleton, "of 1", fails).
pub fn assert_said(outs: &[Output], ranks: &[u32], said: &str) {
    for (o, r) in outs.iter().zip(ranks) {
        let want = said.replace("{r}", &r.to_string());
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(&want), "rank {r} said {text:?}, not {want:?}");
    }
}

/// nobody:nogroup.
pub const NOBODY: (u32, u32) = (65534, 65534);

/// Runs 2 ranks of `client put` in a job registered for user
/// `registered`, started as user `runs_as` (the test runs as root).
pub fn as_user(
    nspace: &str,
    registered: (u32, u32),
    runs_as: (u32, u32),
    client: &Path,
) -> Vec<Output> {
    use std::os::unix::process::CommandExt;
    let f = fixture();
    let mut spec = one_node(nspace, 2);
    (spec.uid, spec.gid) = registered;
    f.server.register_job(&spec).unwrap();
    let children = spawn_ranks_with(&f.server, nspace, &[0, 1], client, &["put"], &[], |c| {
        c.uid(runs_as.0).gid(runs_as.1);
    });
    let outs = wait_ranks(children, Duration::from_secs(60));
    f.server.deregister_job(nspace);
    outs
}
