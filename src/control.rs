//! The daemon's control socket: a local Unix socket speaking one JSON request
//! per line, one JSON response per line. `scx_gang trace` uses it, and so
//! does the placement API (explicit slot table + switch commands) that the
//! cluster coordinator drives.
//!
//! The socket thread only parses and forwards: every request is handled by
//! the scheduler's main loop, which owns the BPF state.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::trace::{TraceEvent, TraceMeta};

/// Longest request line accepted; anything longer drops the connection.
const MAX_REQUEST: usize = 1 << 20;

/// One gang's CPUs in one slot of an explicit schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
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
    /// stop the standalone rotation: switches then come by `Switch`.
    Schedule { slots: Vec<Vec<Placement>> },
    /// Switch to `slot` now, tagging the switch with generation `gen`.
    /// `slot_ms` (0 or absent: unknown) dates the slot's end in the ranks'
    /// slot clock, so they can yield before it.
    Switch {
        slot: u32,
        gen: u64,
        #[serde(default)]
        slot_ms: u32,
    },
    /// Back to standalone: one slot per gang, rotated by the BPF timer.
    Standalone,
    /// First half of a coordinated switch: park the tasks of the slot's
    /// gangs (cgroup freezer), then wait up to `drain_timeout_ms` for their
    /// TCP traffic to reach steady state. Answered with a `frozen` report;
    /// the next `Switch` thaws them.
    Freeze { gen: u64, drain_timeout_ms: u64 },
    /// The cluster coordinator's schedule for this node (its column of the
    /// matrix), as the node agent installs it. Like `Schedule`, with three
    /// differences that keep a node in step with the cluster: a gang that
    /// is not (or no longer) populated here is left out instead of refusing
    /// the table, and gets its CPUs as soon as it appears (the table is
    /// kept by name and resolved again whenever gangs come and go); the
    /// table has `slots.len()` slots even if the last ones are empty here,
    /// so the coordinator's slot numbers stay valid for `Switch`. A bad CPU
    /// list or a CPU given twice still refuses it.
    Column { slots: Vec<Vec<Placement>> },
    /// Rotate the explicit schedule in force on the node's own timer
    /// (slot_ms), e.g. while the coordinator is away, and thaw the gangs a
    /// freeze left parked. The next `Schedule`, `Column`, `Switch` or
    /// `Freeze` hands the switches back to commands.
    Rotate,
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
    pub freeze_us: u64,
    /// Steady state reached; false: the drain timeout fired first.
    pub drained: bool,
    /// From the command to steady state (or to the timeout).
    pub drain_us: u64,
    /// TCP sockets of the parked gangs.
    pub sockets: u32,
    /// When parked: sockets with data in flight or queued, and how much.
    pub busy_sockets: u32,
    pub unacked_segs: u64,
    pub queued_bytes: u64,
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
        freeze_us: u64,
        drain: &crate::drain::DrainReport,
        start: std::time::Instant,
    ) -> Self {
        Self {
            gen,
            gangs,
            parked,
            freeze_us,
            drained: drain.drained,
            drain_us: start.elapsed().as_micros() as u64,
            sockets: drain.initial.sockets,
            busy_sockets: drain.initial.busy_sockets,
            unacked_segs: drain.initial.unacked_segs,
            queued_bytes: drain.initial.queued_bytes,
            yielded: Vec::new(),
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
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    let (tx, rx) = mpsc::channel();
    let inbox = tx.clone();
    thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
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
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"op":"switch","slot":1,"gen":7,"slot_ms":0}"#);
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        let sched: Request =
            serde_json::from_str(r#"{"op":"schedule","slots":[[{"gang":"a","cpus":"0"}]]}"#)
                .unwrap();
        assert!(matches!(sched, Request::Schedule { .. }));
        assert_eq!(
            serde_json::to_string(&Request::Rotate).unwrap(),
            r#"{"op":"rotate"}"#
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
            },
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(err.to_string().contains("slot 9"));
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
