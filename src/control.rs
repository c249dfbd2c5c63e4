//! The daemon's control socket: a local Unix socket speaking one JSON request
//! per line, one JSON response per line. `scx_gang trace` uses it, and so
//! does the placement API (explicit slot table + switch commands) that the
//! cluster coordinator drives.
//!
//! The socket thread only parses and forwards: every request is handled by
//! the daemon's main loop (switching/mainloop.rs), which owns the BPF state.
//!
//! Only root may use it (a client can reschedule the node and freeze
//! jobs). Two guards, either one enough: the socket is mode 0600 whatever
//! the daemon's umask (bound in a private 0700 directory, chmod'ed there,
//! then renamed into place, so it is never reachable with a wider mode),
//! and every connection's SO_PEERCRED must say uid 0 (others are logged
//! and dropped before a byte is read).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use gang_wire::trace::{TraceEvent, TraceMeta};

/// Longest request line accepted; anything longer drops the connection.
const MAX_REQUEST: usize = 1 << 20;
/// The socket's mode: root only.
pub const SOCKET_MODE: u32 = 0o600;
/// The only uid served.
const ALLOWED_UID: u32 = 0;

/// One gang's CPUs in one slot of an explicit schedule, the gang by its
/// directory name (the node's own vocabulary; gangd's placements name jobs,
/// gang_wire::proto::Placement, and the agent turns one into the other).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GangCpus {
    /// The gang's directory name below the gang root.
    pub gang: String,
    /// CPU list, e.g. "0-1".
    pub cpus: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Record the trace for `seconds` and return its events.
    Trace { seconds: f64 },
    /// Install an explicit slot table (slots[s] = placements of slot s) and
    /// stop the node's timer: switches then come by `Switch`.
    Schedule { slots: Vec<Vec<GangCpus>> },
    /// Switch to `slot` now, tagging the switch with generation `gen`.
    /// `slot_ms` (0 or absent: unknown) dates the slot's end in the ranks'
    /// slot clock, so they can yield before it.
    ///
    /// With `at_ns` (this node's CLOCK_MONOTONIC, ns) the switch happens at
    /// that instant instead, on an absolute BPF timer armed now (timed
    /// switching, docs/timed-switching.md); the gangs a freeze parked are
    /// thawed once it fired. An instant already past switches at once.
    /// One switch is armed at a time: a later Switch, or a table change,
    /// replaces it.
    Switch {
        slot: u32,
        gen: u64,
        #[serde(default)]
        slot_ms: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        at_ns: u64,
    },
    /// Back to standalone: one slot per gang, switched on the node's timer.
    Standalone,
    /// First half of a coordinated switch: park the tasks of the slot's
    /// gangs (cgroup freezer), then wait up to `drain_timeout_ms` for their
    /// TCP traffic to reach steady state. Answered with a `frozen` report;
    /// the next `Switch` thaws them.
    Freeze {
        gen: u64,
        drain_timeout_ms: u64,
        /// The slot the switch goes to: a gang placed there too on this
        /// node goes on running and is not parked (nothing of it must
        /// drain before itself).
        #[serde(default)]
        to_slot: Option<u32>,
    },
    /// The cluster coordinator's schedule for this node (its column of the
    /// matrix), as the node agent installs it. Like `Schedule`, with three
    /// differences that keep a node in step with the cluster: a gang that
    /// is not (or no longer) populated here is left out instead of refusing
    /// the table, and gets its CPUs as soon as it appears (the table is
    /// kept by name and resolved again whenever gangs come and go); the
    /// table has `slots.len()` slots even if the last ones are empty here,
    /// so the coordinator's slot numbers stay valid for `Switch`. A bad CPU
    /// list or a CPU given twice still refuses it.
    Column { slots: Vec<Vec<GangCpus>> },
    /// Timed switching (docs/timed-switching.md): follow `plan`, whose
    /// times are this node's CLOCK_MONOTONIC (the agent converted gangd's),
    /// from `effective_ns` on: the main loop parks (strict: `lead` before
    /// each boundary, waiting up to `drain_timeout_ms`) and arms each
    /// switch itself (switching/timed.rs). Given again as the clock
    /// estimate moves; a `Freeze` or a `Switch` from outside, or `Unplan`,
    /// ends it (commands take over).
    Plan {
        plan: gang_wire::plan::Plan,
        effective_ns: u64,
        strict: bool,
        drain_timeout_ms: u32,
    },
    /// Stop following a plan.
    Unplan,
    /// Become autonomous: run the explicit schedule in force on the node's
    /// own timer (a switch to the next slot every slot_ms), e.g. while the
    /// coordinator is away, and thaw the gangs a freeze left parked. The
    /// next `Schedule`, `Column`, `Switch` or `Freeze` hands the switches
    /// back to commands. (Not gangd's rotation, the cluster's clock.)
    Autonomous,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// What a freeze found: how long parking and draining took, and what was
/// still in flight when the gangs were parked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrozenReport {
    pub gen: u64,
    /// Gangs parked (cgroup names).
    pub gangs: Vec<String>,
    /// Every task of those gangs reached the freezer before the timeout.
    pub parked: bool,
    /// From the command to every task parked.
    pub park_us: u64,
    /// Steady state reached; false: the drain timeout fired first.
    pub drained: bool,
    /// From the command to steady state (or to the timeout).
    pub drain_us: u64,
    /// TCP sockets of the parked gangs.
    pub sockets: u32,
    /// When parked: sockets with data in flight or queued, and how much.
    pub busy_sockets: u32,
    pub unacked_segs: u64,
    /// Bytes unacknowledged or unsent on those sockets: what had to drain.
    pub drained_bytes: u64,
    /// Gangs every rank of which had yielded the slot: already parked by
    /// the scheduler, so not frozen (only drained).
    #[serde(default)]
    pub yielded: Vec<String>,
}

impl FrozenReport {
    /// The report of a freeze whose drain wait (started at `start`) ended
    /// with `drain`: the BPF freezer's and the signal mode's alike.
    pub fn drained(
        gen: u64,
        gangs: Vec<String>,
        parked: bool,
        park_us: u64,
        drain: &crate::drain::DrainReport,
        start: std::time::Instant,
    ) -> Self {
        Self {
            gen,
            gangs,
            parked,
            park_us,
            drained: drain.drained,
            drain_us: start.elapsed().as_micros() as u64,
            sockets: drain.initial.sockets,
            busy_sockets: drain.initial.busy_sockets,
            unacked_segs: drain.initial.unacked_segs,
            drained_bytes: drain.initial.queued_bytes,
            yielded: Vec::new(),
        }
    }

    /// What gangd is told of this freeze (Frozen), `answer_us` after the
    /// node received the Freeze.
    pub fn summary(&self, answer_us: u64) -> gang_wire::proto::FreezeReport {
        gang_wire::proto::FreezeReport {
            drained_bytes: self.drained_bytes,
            drain_us: self.drain_us,
            timed_out: !self.drained,
            answer_us,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<RawTrace>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<FrozenReport>,
}

impl Response {
    pub fn ok() -> Self {
        Self {
            ok: true,
            ..Default::default()
        }
    }

    pub fn error(msg: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(msg.into()),
            ..Default::default()
        }
    }
}

/// Events as recorded, before analysis (the client analyses them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawTrace {
    pub meta: TraceMeta,
    pub events: Vec<TraceEvent>,
}

/// A request waiting for the main loop, with the way back to its client.
pub struct Pending {
    pub request: Request,
    pub reply: Sender<Response>,
}

/// What wakes the daemon's main loop: a client's request, or a knob file
/// write (so a new value reaches BPF at once, before the next slot).
pub enum Inbox {
    Request(Pending),
    KnobsChanged,
    /// Every rank of gang `gang` here yielded its slot in generation `gen`
    /// (from the scheduler's notices).
    AllYielded {
        gang: i32,
        gen: u64,
    },
    /// A park's drain ended (the freeze waiter): the plan follower's
    /// answer waits on its channel; this only wakes the loop for it.
    DrainEnded,
    /// A gang appeared, went, gained or lost its tasks, or a process was
    /// written into one (gang_watch.rs): the loop rescans.
    GangsChanged,
    /// A statistics request is waiting (the scheduler's forwarder): the
    /// loop's poll serves it.
    Stats,
}

/// Listens on `path` (replacing a stale socket) and forwards requests into
/// the main loop's inbox; the returned sender lets others wake it too.
pub fn serve(path: &Path) -> Result<(Sender<Inbox>, Receiver<Inbox>)> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("{} is in use: is another scx_gang running?", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let listener = bind_private(path)?;
    let (tx, rx) = mpsc::channel();
    let inbox = tx.clone();
    thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                if let Err(why) = check_peer(&conn) {
                    log::warn!("control connection refused: {why}");
                    continue;
                }
                let tx = tx.clone();
                let _ = thread::Builder::new()
                    .name("control-conn".into())
                    .spawn(move || {
                        if let Err(e) = handle(conn, tx) {
                            log::warn!("control connection dropped: {e:#}");
                        }
                    });
            }
        })?;
    Ok((inbox, rx))
}

/// Binds `path` with mode SOCKET_MODE whatever the umask: bound in a fresh
/// 0700 directory next to it (nobody else can reach it there), chmod'ed,
/// then renamed into place.
fn bind_private(path: &Path) -> Result<UnixListener> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file path", path.display()))?;
    let private = parent.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    // A leftover of a crashed start with our pid: ours to remove.
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| format!("creating {}", private.display()))?;
    let staged = private.join("sock");
    let bound = (|| -> Result<UnixListener> {
        let listener =
            UnixListener::bind(&staged).with_context(|| format!("binding {}", path.display()))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(SOCKET_MODE))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
        std::fs::rename(&staged, path)
            .with_context(|| format!("moving the socket to {}", path.display()))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&private);
    bound
}

/// The client's uid, from SO_PEERCRED (what it was when it connected,
/// not what it claims).
fn check_peer(conn: &UnixStream) -> std::result::Result<(), String> {
    let cred = nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    if cred.uid() != ALLOWED_UID {
        return Err(format!("pid {} uid {} is not root", cred.pid(), cred.uid()));
    }
    Ok(())
}

fn handle(conn: UnixStream, tx: Sender<Inbox>) -> Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    let mut line = String::new();
    loop {
        line.clear();
        if (&mut reader)
            .take(MAX_REQUEST as u64)
            .read_line(&mut line)?
            == 0
        {
            return Ok(());
        }
        if !line.ends_with('\n') {
            bail!("request longer than {MAX_REQUEST} bytes or cut short");
        }
        let response = match serde_json::from_str::<Request>(&line) {
            Ok(request) => {
                let (reply_tx, reply_rx) = mpsc::channel();
                tx.send(Inbox::Request(Pending {
                    request,
                    reply: reply_tx,
                }))
                .context("scheduler is gone")?;
                reply_rx
                    .recv()
                    .unwrap_or_else(|_| Response::error("scheduler stopped"))
            }
            Err(e) => Response::error(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_vec(&response)?;
        out.push(b'\n');
        writer.write_all(&out)?;
    }
}

/// Client side: one connection, any number of requests in turn.
pub struct Client {
    conn: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Self> {
        let conn = UnixStream::connect(path).with_context(|| {
            format!(
                "cannot reach scx_gang at {} (is the daemon running?)",
                path.display()
            )
        })?;
        let reader = BufReader::new(conn.try_clone()?);
        Ok(Self { conn, reader })
    }

    /// Sends `request` and waits up to `timeout` for its response; a refusal
    /// becomes an error carrying the daemon's reason.
    pub fn call(&mut self, request: &Request, timeout: Duration) -> Result<Response> {
        self.conn.set_read_timeout(Some(timeout))?;
        let mut out = serde_json::to_vec(request)?;
        out.push(b'\n');
        self.conn.write_all(&out)?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .context("reading the daemon's response")?;
        let response: Response = serde_json::from_str(&line).context("malformed response")?;
        if !response.ok {
            bail!(
                "{}",
                response.error.unwrap_or_else(|| "request refused".into())
            );
        }
        Ok(response)
    }
}

/// Sends one request on a connection of its own.
pub fn call(path: &Path, request: &Request, timeout: Duration) -> Result<Response> {
    Client::connect(path)?.call(request, timeout)
}

pub fn default_socket() -> PathBuf {
    PathBuf::from("/run/scx_gang.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_a_stable_wire_form() {
        let r = Request::Switch {
            slot: 1,
            gen: 7,
            slot_ms: 0,
            at_ns: 0,
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"op":"switch","slot":1,"gen":7,"slot_ms":0}"#);
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        let sched: Request =
            serde_json::from_str(r#"{"op":"schedule","slots":[[{"gang":"a","cpus":"0"}]]}"#)
                .unwrap();
        assert!(matches!(sched, Request::Schedule { .. }));
        assert_eq!(
            serde_json::to_string(&Request::Autonomous).unwrap(),
            r#"{"op":"autonomous"}"#
        );
        let column: Request =
            serde_json::from_str(r#"{"op":"column","slots":[[],[{"gang":"job3","cpus":"1"}]]}"#)
                .unwrap();
        assert!(matches!(column, Request::Column { ref slots } if slots.len() == 2));
    }

    #[test]
    fn unknown_or_malformed_requests_are_refused() {
        for bad in [
            r#"{"op":"reboot"}"#,
            "garbage",
            r#"{"op":"switch","slot":"x"}"#,
        ] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_request_round_trips_over_a_socket() {
        let dir = std::env::temp_dir().join(format!("scx-gang-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        let (_, rx) = serve(&path).unwrap();
        let next = move || match rx.recv().unwrap() {
            Inbox::Request(p) => p,
            _ => panic!("only requests come from the socket"),
        };
        let server = thread::spawn(move || {
            let p = next();
            assert_eq!(p.request, Request::Standalone);
            p.reply.send(Response::ok()).unwrap();
            let p = next();
            p.reply
                .send(Response::error("slot 9 does not exist"))
                .unwrap();
        });
        assert!(
            call(&path, &Request::Standalone, Duration::from_secs(5))
                .unwrap()
                .ok
        );
        let err = call(
            &path,
            &Request::Switch {
                slot: 9,
                gen: 1,
                slot_ms: 0,
                at_ns: 0,
            },
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(err.to_string().contains("slot 9"));
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("scx-gang-ctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_socket_is_root_only_even_under_umask_0() {
        let dir = temp_dir("mode");
        let path = dir.join("sock");
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let served = serve(&path);
        nix::sys::stat::umask(old);
        served.unwrap();
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, SOCKET_MODE, "mode {:o}", mode & 0o777);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only the socket is left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What a child of uid 65534 saw when it connected and sent a request.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Answer,
        Dropped,
        NoConnection,
    }

    /// Forks a child that becomes uid 65534, connects to `path` and sends a
    /// request; only async-signal-safe calls after the fork.
    fn ask_as_nobody(path: &Path) -> Seen {
        use std::os::unix::ffi::OsStrExt;
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        let request = b"{\"op\":\"standalone\"}\n";
        // SAFETY: the child only makes raw system calls and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    libc::_exit(10);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                if libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
                    libc::_exit(2);
                }
                libc::write(fd, request.as_ptr().cast(), request.len());
                let mut buf = [0u8; 64];
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::_exit(if n > 0 { 0 } else { 1 });
            },
            nix::unistd::ForkResult::Parent { child } => {
                match nix::sys::wait::waitpid(child, None).unwrap() {
                    nix::sys::wait::WaitStatus::Exited(_, 0) => Seen::Answer,
                    nix::sys::wait::WaitStatus::Exited(_, 1) => Seen::Dropped,
                    nix::sys::wait::WaitStatus::Exited(_, 2) => Seen::NoConnection,
                    other => panic!("child: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_client_that_is_not_root_is_refused_even_if_the_mode_let_it_in() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test forks a child that setuid's"
        );
        let dir = temp_dir("peer");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join("sock");
        let (_, rx) = serve(&path).unwrap();
        assert_eq!(
            ask_as_nobody(&path),
            Seen::NoConnection,
            "mode 0600 keeps it out"
        );
        // The attack: a socket mode gone wrong.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let answering = thread::spawn(move || {
            while let Ok(Inbox::Request(p)) = rx.recv() {
                p.reply.send(Response::ok()).unwrap();
            }
        });
        assert_eq!(
            ask_as_nobody(&path),
            Seen::Dropped,
            "uid 65534 must get no answer"
        );
        // Root still gets one.
        assert!(
            call(&path, &Request::Standalone, Duration::from_secs(5))
                .unwrap()
                .ok
        );
        drop(answering);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
