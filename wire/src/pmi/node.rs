//! One job's PMI service on one node: what the agent answers the job's
//! local ranks on their PMI_FD sockets, and what it relays to gangd
//! (`cluster` is the other half). Driven by events: a line from a rank, a
//! line too long, a rank's socket closing, gangd's barrier-out. Each event
//! returns the [`Action`]s to carry out, in order; nothing here touches a
//! socket, so the protocol is tested on the host.
//!
//! Rules (the wire messages are in the module doc of `pmi`):
//! - A rank is its socket: the caller names the rank a line came from by
//!   the fd it arrived on, never by what the line says. `initack pmiid=R`
//!   (only sent by clients given PMI_ID, which the agent never sets) is
//!   answered if R is the rank itself; claiming another rank is refused,
//!   the socket closed and the job failed.
//! - `init` once, everything else after it; abort also before.
//! - KVS, write once: a put of a key that exists (this rank's, another
//!   local rank's, another node's from an earlier barrier, or a preset) is
//!   refused with `rc=-1` and logged. Keys up to KEYLEN_MAX bytes, values
//!   up to VALLEN_MAX, at most MAX_KEYS_PER_RANK keys per rank. `get` is
//!   answered from this node's copy: the presets, the local puts, and
//!   what gangd sent at the previous barriers (PMI only promises other
//!   ranks' keys after a barrier).
//! - Barrier: when every local rank has entered, the node's puts since the
//!   previous barrier go to gangd with a PmiBarrierIn; gangd's
//!   PmiBarrierOut (every node in) brings the other nodes' puts and
//!   releases the local ranks.
//! - Bad lines (unparsable, too long, out of order, while in a barrier)
//!   are answered with an error; after MAX_BAD_LINES the rank is
//!   disconnected and the job fails.
//! - The job fails (PmiFailed to gangd, once) when a rank aborts, claims
//!   another rank's id, finalizes while another waits in a barrier, leaves
//!   before finalize (having sent at least one line: a program that never
//!   speaks PMI is no MPI program, and every rank gets a socket), enters a barrier that cannot complete (a local rank
//!   finalized) or floods; ranks waiting in a barrier then get
//!   `cmd=barrier_failed rc=-1` and every socket is closed. gangd kills
//!   the job's ranks everywhere.

use std::collections::BTreeMap;

use super::job::{
    chunks, entry_cost, response_of, JobConfig, KEYLEN_MAX, KVSNAME_MAX, MAX_BAD_LINES,
    MAX_KEYS_PER_RANK, VALLEN_MAX,
};
use super::wire::{error_reply, initack_reply, parse_request, token_safe, Line, Request};
use crate::proto::{FromAgent, JobId, PmiPut};

/// What the caller must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Write these bytes (complete lines) to the rank's socket.
    Send(u32, String),
    /// Close the rank's socket (after the sends before it).
    Close(u32),
    /// Send this to gangd.
    ToGangd(FromAgent),
}

#[derive(Debug, Default)]
pub(super) struct RankState {
    inited: bool,
    finalized: bool,
    pub(super) in_barrier: bool,
    /// Its socket is closed.
    gone: bool,
    /// It sent at least one line: it is a PMI client.
    spoke: bool,
    pub(super) keys: usize,
    bad_lines: u32,
}

#[derive(Debug)]
pub struct NodePmi {
    pub(super) job: JobId,
    pub(super) config: JobConfig,
    pub(super) ranks: BTreeMap<u32, RankState>,
    pub(super) kvs: BTreeMap<String, String>,
    /// Local puts since the previous barrier, for gangd.
    pub(super) puts: Vec<PmiPut>,
    /// Completed barriers.
    pub(super) epoch: u64,
    /// The current barrier went to gangd; waiting for its barrier-out.
    pub(super) relayed: bool,
    pub(super) failed: bool,
}

impl NodePmi {
    /// `ranks`: the job's ranks on this node (all of them enter every
    /// barrier).
    pub fn new(job: JobId, config: JobConfig, ranks: &[u32]) -> NodePmi {
        NodePmi {
            job,
            kvs: config.preset.iter().cloned().collect(),
            config,
            ranks: ranks.iter().map(|&r| (r, RankState::default())).collect(),
            puts: Vec::new(),
            epoch: 0,
            relayed: false,
            failed: false,
        }
    }

    pub fn config(&self) -> &JobConfig {
        &self.config
    }

    /// Whether `rank` is one of this node's ranks of the job.
    pub fn has_rank(&self, rank: u32) -> bool {
        self.ranks.contains_key(&rank)
    }

    /// Every local rank's socket is closed: the service can go.
    pub fn done(&self) -> bool {
        self.ranks.values().all(|r| r.gone)
    }

    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn kvs_get(&self, key: &str) -> Option<&str> {
        self.kvs.get(key).map(String::as_str)
    }

    /// One complete line from `rank`'s socket (its newline optional).
    pub fn on_line(&mut self, rank: u32, bytes: &[u8]) -> Vec<Action> {
        match self.ranks.get(&rank) {
            None => return Vec::new(),
            Some(r) if r.gone => return Vec::new(),
            Some(_) if self.failed => return vec![Action::Close(rank)],
            Some(_) => {}
        }
        self.ranks.get_mut(&rank).expect("checked").spoke = true;
        match parse_request(bytes) {
            Ok(req) => self.on_request(rank, req),
            Err((cmd, e)) => {
                let response = cmd
                    .map(|c| Request::response_name(&c))
                    .unwrap_or_else(|| "error".into());
                self.bad_line(rank, &response, &e.to_string())
            }
        }
    }

    /// A line longer than MAX_LINE from `rank` (its rest is discarded).
    pub fn on_too_long(&mut self, rank: u32) -> Vec<Action> {
        if self.failed || !self.ranks.contains_key(&rank) {
            return Vec::new();
        }
        self.ranks.get_mut(&rank).expect("checked").spoke = true;
        let e = super::wire::WireError::TooLong.to_string();
        self.bad_line(rank, "error", &e)
    }

    /// `rank`'s socket is closed (EOF or error). Before finalize, the job
    /// fails.
    pub fn on_disconnect(&mut self, rank: u32) -> Vec<Action> {
        let Some(r) = self.ranks.get_mut(&rank) else {
            return Vec::new();
        };
        if r.gone {
            return Vec::new();
        }
        r.gone = true;
        // A rank that never spoke PMI is not an MPI program (or ended
        // before MPI_Init): its exit status tells gangd how it went.
        if r.finalized || !r.spoke || self.failed {
            return Vec::new();
        }
        let reason = if r.in_barrier || self.ranks.values().any(|r| r.in_barrier) {
            format!("rank {rank} disconnected before PMI finalize, during a barrier")
        } else {
            format!("rank {rank} disconnected before PMI finalize")
        };
        self.fail(rank, None, reason)
    }

    /// gangd's PmiEntries: keys ahead of the coming barrier-out. Err: no
    /// barrier is pending (logged by the caller, ignored).
    pub fn on_entries(&mut self, entries: Vec<(String, String)>) -> Result<(), String> {
        if !self.relayed {
            return Err("keys from gangd while no barrier is pending".into());
        }
        self.merge(entries);
        Ok(())
    }

    /// gangd's PmiBarrierOut: every node entered barrier `epoch`. Err: not
    /// the barrier this node waits for (logged by the caller, ignored).
    pub fn on_barrier_out(
        &mut self,
        epoch: u64,
        entries: Vec<(String, String)>,
    ) -> Result<Vec<Action>, String> {
        if self.failed {
            return Ok(Vec::new());
        }
        if !self.relayed || epoch != self.epoch {
            return Err(format!(
                "barrier-out {epoch} while {}",
                if self.relayed {
                    format!("waiting for barrier {}", self.epoch)
                } else {
                    "no barrier is pending".into()
                }
            ));
        }
        self.merge(entries);
        self.epoch += 1;
        self.relayed = false;
        let line = Line::new("barrier_out").with("rc", 0).format();
        let mut out = Vec::new();
        for (&rank, r) in &mut self.ranks {
            if std::mem::take(&mut r.in_barrier) && !r.gone {
                out.push(Action::Send(rank, line.clone()));
            }
        }
        Ok(out)
    }

    /// gangd's keys into this node's copy (its own come back too).
    fn merge(&mut self, entries: Vec<(String, String)>) {
        for (key, value) in entries {
            match self.kvs.get(&key) {
                None => {
                    self.kvs.insert(key, value);
                }
                // Our own puts come back too.
                Some(v) if *v == value => {}
                Some(_) => log::warn!(
                    "pmi {}: gangd's value of {key} differs from this node's: kept this node's",
                    self.config.kvsname
                ),
            }
        }
    }

    fn on_request(&mut self, rank: u32, req: Request) -> Vec<Action> {
        let kvsname = self.config.kvsname.clone();
        let r = self.ranks.get_mut(&rank).expect("checked by on_line");
        match req {
            Request::Initack { pmiid } if pmiid == i64::from(rank) => {
                if r.inited {
                    return self.bad_line(rank, "initack", "initack after init");
                }
                return vec![Action::Send(
                    rank,
                    initack_reply(rank, self.config.size, self.config.debug),
                )];
            }
            Request::Initack { pmiid } => {
                let reason = format!("rank {rank} claimed to be pmiid {pmiid} on its PMI_FD");
                let mut out = vec![Action::Send(rank, error_reply("initack", &reason))];
                out.extend(self.fail(rank, None, reason));
                return out;
            }
            Request::Abort { exitcode, message } => {
                // Also before init: the client aborts when init fails.
                let reason = match message {
                    Some(m) => format!("rank {rank} called PMI_Abort({exitcode}): {m}"),
                    None => format!("rank {rank} called PMI_Abort({exitcode})"),
                };
                return self.fail(rank, Some(exitcode), reason);
            }
            Request::Init {
                version,
                subversion,
            } => {
                if r.inited {
                    return self.bad_line(rank, "response_to_init", "double init");
                }
                if version != 1 {
                    let reply = Line::new("response_to_init")
                        .with("rc", -1)
                        .with("pmi_version", 1)
                        .with("pmi_subversion", 1)
                        .with(
                            "msg",
                            token_safe(&format!("unsupported PMI version {version}.{subversion}")),
                        )
                        .format();
                    return vec![Action::Send(rank, reply)];
                }
                r.inited = true;
                // Always 1.1: 1.2 would switch the 4.1+ client to tagged,
                // grouped barriers this service does not serve.
                let reply = Line::new("response_to_init")
                    .with("rc", 0)
                    .with("pmi_version", 1)
                    .with("pmi_subversion", 1)
                    .format();
                return vec![Action::Send(rank, reply)];
            }
            _ => {}
        }
        let response = response_of(&req);
        if !r.inited {
            return self.bad_line(rank, &response, "send cmd=init first");
        }
        if r.in_barrier {
            return self.bad_line(rank, &response, "in a barrier: wait for barrier_out");
        }
        if r.finalized {
            return self.bad_line(rank, &response, "already finalized");
        }
        let reply = |line: Line| vec![Action::Send(rank, line.with_rc_first().format())];
        match req {
            Request::Initack { .. } | Request::Init { .. } | Request::Abort { .. } => {
                unreachable!("handled above")
            }
            Request::GetMaxes => reply(
                Line::new("maxes")
                    .with("kvsname_max", KVSNAME_MAX)
                    .with("keylen_max", KEYLEN_MAX)
                    .with("vallen_max", VALLEN_MAX),
            ),
            Request::GetAppnum => reply(Line::new("appnum").with("appnum", self.config.appnum)),
            Request::GetMyKvsname => reply(Line::new("my_kvsname").with("kvsname", &kvsname)),
            Request::GetUniverseSize => {
                reply(Line::new("universe_size").with("size", self.config.universe_size))
            }
            Request::Put {
                kvsname: name,
                key,
                value,
            } => {
                if let Some(e) = self.check_kvsname(name.as_deref()) {
                    return self.refuse(rank, "put_result", &e);
                }
                if key.len() > KEYLEN_MAX {
                    return self.refuse(
                        rank,
                        "put_result",
                        &format!("key longer than {KEYLEN_MAX} bytes"),
                    );
                }
                if value.len() > VALLEN_MAX {
                    return self.refuse(
                        rank,
                        "put_result",
                        &format!("value longer than {VALLEN_MAX} bytes"),
                    );
                }
                if self.kvs.contains_key(&key) {
                    log::warn!(
                        "pmi {kvsname}: rank {rank} put {key}, which is already written: refused"
                    );
                    return self.refuse(rank, "put_result", &format!("key {key} already written"));
                }
                let r = self.ranks.get_mut(&rank).expect("checked by on_line");
                if r.keys >= MAX_KEYS_PER_RANK {
                    return self.refuse(
                        rank,
                        "put_result",
                        &format!("more than {MAX_KEYS_PER_RANK} keys"),
                    );
                }
                r.keys += 1;
                self.kvs.insert(key.clone(), value.clone());
                self.puts.push(PmiPut { rank, key, value });
                reply(Line::new("put_result"))
            }
            Request::Get { kvsname: name, key } => {
                if let Some(e) = self.check_kvsname(name.as_deref()) {
                    return self.refuse(rank, "get_result", &e);
                }
                match self.kvs.get(&key) {
                    Some(v) => reply(Line::new("get_result").with("value", v)),
                    None => self.refuse(rank, "get_result", &format!("key {key} not found")),
                }
            }
            Request::BarrierIn { group } => self.barrier_in(rank, group),
            Request::Finalize => {
                if let Some((&waiting, _)) = self.ranks.iter().find(|(_, r)| r.in_barrier) {
                    let reason = format!(
                        "rank {rank} finalized while rank {waiting} waits in a barrier: it can never complete"
                    );
                    return self.fail(rank, None, reason);
                }
                self.ranks.get_mut(&rank).expect("checked").finalized = true;
                vec![
                    Action::Send(rank, Line::new("finalize_ack").with("rc", 0).format()),
                    Action::ToGangd(FromAgent::PmiFinalized {
                        job: self.job,
                        rank,
                    }),
                ]
            }
            Request::Unsupported { cmd } => {
                let e = format!("{cmd} is not supported by scx_gang");
                self.refuse(rank, &Request::response_name(&cmd), &e)
            }
        }
    }

    fn check_kvsname(&self, name: Option<&str>) -> Option<String> {
        match name {
            Some(n) if n != self.config.kvsname => Some(format!("unknown kvsname {n}")),
            _ => None,
        }
    }

    /// An answer with rc=-1 to a well-formed request (a missing key, a
    /// refused put): the client decides; not counted as a bad line.
    fn refuse(&self, rank: u32, response: &str, msg: &str) -> Vec<Action> {
        vec![Action::Send(rank, error_reply(response, msg))]
    }

    /// A line the rank should not have sent: an error answer, and after
    /// MAX_BAD_LINES of them the end of the job.
    fn bad_line(&mut self, rank: u32, response: &str, msg: &str) -> Vec<Action> {
        log::warn!("pmi {}: rank {rank}: {msg}", self.config.kvsname);
        let r = self.ranks.get_mut(&rank).expect("a local rank");
        r.bad_lines += 1;
        let mut out = vec![Action::Send(rank, error_reply(response, msg))];
        if r.bad_lines >= MAX_BAD_LINES {
            let reason = format!("rank {rank} sent {MAX_BAD_LINES} bad PMI lines: disconnected");
            out.extend(self.fail(rank, None, reason));
        }
        out
    }

    fn barrier_in(&mut self, rank: u32, group: Option<String>) -> Vec<Action> {
        if self.relayed {
            // Only a PMIx fence (fence.rs) relays a barrier while a rank
            // can still speak: the job mixes the two bootstraps.
            let reason = format!("rank {rank} entered a PMI-1 barrier during a PMIx fence");
            return self.fail(rank, None, reason);
        }
        if let Some(g) = group.filter(|g| g != "WORLD") {
            let reason = format!("rank {rank} entered a group barrier ({g}), unsupported");
            return self.fail(rank, None, reason);
        }
        if let Some((&done, _)) = self.ranks.iter().find(|(_, r)| r.finalized) {
            let reason = format!(
                "rank {rank} entered a barrier after rank {done} finalized: it can never complete"
            );
            return self.fail(rank, None, reason);
        }
        self.ranks.get_mut(&rank).expect("checked").in_barrier = true;
        if !self.ranks.values().all(|r| r.in_barrier) {
            return Vec::new();
        }
        self.relay_barrier()
    }

    /// Every local rank is in: this node's puts and its barrier-in go to
    /// gangd (also a PMIx fence's, fence.rs).
    pub(super) fn relay_barrier(&mut self) -> Vec<Action> {
        self.relayed = true;
        // Each message fits a frame: the puts go in runs, the last with
        // the barrier.
        let mut runs = chunks(std::mem::take(&mut self.puts), |p| {
            entry_cost(&p.key, &p.value)
        });
        let last = runs.pop().expect("at least one run");
        let mut out: Vec<Action> = runs
            .into_iter()
            .map(|puts| {
                Action::ToGangd(FromAgent::PmiPuts {
                    job: self.job,
                    puts,
                })
            })
            .collect();
        out.push(Action::ToGangd(FromAgent::PmiBarrierIn {
            job: self.job,
            epoch: self.epoch,
            ranks: self.ranks.keys().copied().collect(),
            puts: last,
        }));
        out
    }

    pub(super) fn fail(&mut self, rank: u32, exitcode: Option<i64>, reason: String) -> Vec<Action> {
        log::error!("pmi {}: job failed: {reason}", self.config.kvsname);
        self.failed = true;
        let mut out = Vec::new();
        let line = error_reply("barrier_failed", &reason);
        for (&r, state) in &mut self.ranks {
            if std::mem::take(&mut state.in_barrier) && !state.gone {
                out.push(Action::Send(r, line.clone()));
            }
        }
        for (&r, state) in &self.ranks {
            if !state.gone {
                out.push(Action::Close(r));
            }
        }
        out.push(Action::ToGangd(FromAgent::PmiFailed {
            job: self.job,
            rank,
            exitcode,
            reason,
        }));
        out
    }
}
