//! One job's PMI state, driven by events: a line from a connection, a bad
//! line, a disconnect. Each event returns the [`Action`]s to carry out, in
//! order; nothing here touches a socket or a clock, so the whole protocol is
//! tested on the host.
//!
//! Rules (see the module doc of `pmi` for the wire messages):
//! - A connection is anonymous until `initack pmiid=R` with 0 <= R < size
//!   binds it to rank R. A rank binds once: a second connection for a rank
//!   that is connected (or was, and left) is refused and closed; so is an
//!   out-of-range id. Refusing a stray connection does not fail the job.
//! - `init` comes once per rank, after `initack`; everything else after
//!   `init`. Errors are answered with the response name the client waits
//!   for and `rc=-1 msg=...`; the job goes on.
//! - KVS: one per job, named `kvs_<job>_0`. Keys up to KEYLEN_MAX bytes,
//!   values up to VALLEN_MAX; a put is visible at once to every rank. A put
//!   of an existing key replaces the value (hydra's policy: MPICH re-puts
//!   keys, e.g. after a retry, and expects the last one to win). `get` of a
//!   missing key answers `rc=-1`. Preset attributes (PMI_process_mapping)
//!   are ordinary keys put at creation.
//! - Barrier: `barrier_out` goes to every rank at once when all `size`
//!   ranks have sent `barrier_in`; then the next epoch starts.
//! - The job fails (reported once by [`Action::Failed`]) when a bound rank
//!   disconnects before `finalize`, a rank aborts, a rank enters a barrier
//!   that can no longer complete (some rank finalized) or enters twice.
//!   Then ranks waiting in the barrier get `cmd=barrier_failed rc=-1
//!   msg=...` (not `barrier_out`: the 4.0 client ignores rc there), every
//!   connection is closed, and later connections are refused.

use std::collections::{BTreeMap, BTreeSet};

use super::wire::{
    error_reply, initack_reply, parse_request, token_safe, Line, Request, WireError,
};

/// Maxima advertised by `get_maxes`: hydra's (PMI_MAXKVSLEN, PMI_MAXKEYLEN,
/// PMI_MAXVALLEN in hydra's pmiserv common header), so MPICH behaves as
/// under mpiexec. The 4.0 client then lowers its own value limit to fit its
/// 1024-byte lines.
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// Keys stored per job, presets included; a put beyond it is refused.
/// MPICH puts a handful of keys per rank.
pub const MAX_KEYS_PER_RANK: usize = 1024;

/// A connection, as numbered by the caller.
pub type ConnId = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobConfig {
    /// The KVS name every rank gets from `get_my_kvsname`.
    pub kvsname: String,
    pub size: u32,
    /// `get_universe_size`; usually `size`.
    pub universe_size: u32,
    /// `get_appnum`; 0 for a single-executable job.
    pub appnum: i32,
    /// `cmd=set debug=`: 1 makes the MPICH client trace its PMI traffic.
    pub debug: bool,
    /// Keys present before any rank starts, e.g.
    /// `("PMI_process_mapping", process_mapping(..))`.
    pub preset: Vec<(String, String)>,
}

impl JobConfig {
    pub fn new(job: u64, size: u32) -> JobConfig {
        JobConfig {
            kvsname: format!("kvs_{job}_0"),
            size,
            universe_size: size,
            appnum: 0,
            debug: false,
            preset: Vec::new(),
        }
    }
}

/// The `PMI_process_mapping` value MPICH parses to learn which ranks share
/// a node: `(vector,(first_node,node_count,ranks_per_node),...)`, blocks in
/// rank order. `node_of_rank[r]` is any node label; nodes are numbered in
/// order of first appearance. None if there are no ranks or the value
/// would exceed VALLEN_MAX (MPICH then falls back to exchanging hostnames).
pub fn process_mapping<T: PartialEq>(node_of_rank: &[T]) -> Option<String> {
    let mut labels: Vec<&T> = Vec::new();
    let mut ids = Vec::with_capacity(node_of_rank.len());
    for n in node_of_rank {
        let id = match labels.iter().position(|l| *l == n) {
            Some(i) => i,
            None => {
                labels.push(n);
                labels.len() - 1
            }
        };
        ids.push(id);
    }
    // Runs of consecutive ranks on one node: (node, ranks).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for id in ids {
        match runs.last_mut() {
            Some((node, count)) if *node == id => *count += 1,
            _ => runs.push((id, 1)),
        }
    }
    // Blocks (first, nodes, per_node): merge runs on consecutive node ids
    // with the same count.
    let mut blocks: Vec<(usize, usize, usize)> = Vec::new();
    for (node, count) in runs {
        match blocks.last_mut() {
            Some((first, nodes, per)) if *per == count && *first + *nodes == node => *nodes += 1,
            _ => blocks.push((node, 1, count)),
        }
    }
    if blocks.is_empty() {
        return None;
    }
    let mut s = String::from("(vector");
    for (first, nodes, per) in blocks {
        s.push_str(&format!(",({first},{nodes},{per})"));
    }
    s.push(')');
    (s.len() <= VALLEN_MAX).then_some(s)
}

/// Why a job's PMI service failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFailure {
    pub rank: u32,
    /// `Some` when the rank called PMI_Abort.
    pub exitcode: Option<i64>,
    pub reason: String,
}

/// What the caller must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes (one or more complete lines) to the connection.
    Send(ConnId, String),
    /// Close the connection (after the sends before it).
    Close(ConnId),
    /// The job cannot go on; reported once. gangd should kill its ranks.
    Failed(JobFailure),
    /// Every rank has finalized; reported once.
    AllFinalized,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RankState {
    Waiting,
    Bound(ConnId),
    /// Was bound and disconnected (after finalize, or the job failed).
    Gone,
}

#[derive(Debug, Default)]
struct Conn {
    rank: Option<u32>,
    inited: bool,
    finalized: bool,
}

#[derive(Debug)]
pub struct PmiJob {
    config: JobConfig,
    kvs: BTreeMap<String, String>,
    ranks: Vec<RankState>,
    finalized: Vec<bool>,
    conns: BTreeMap<ConnId, Conn>,
    /// Ranks in the current barrier epoch.
    barrier: BTreeSet<u32>,
    epoch: u64,
    failure: Option<JobFailure>,
    all_finalized: bool,
}

impl PmiJob {
    pub fn new(config: JobConfig) -> PmiJob {
        let size = config.size as usize;
        let kvs = config.preset.iter().cloned().collect();
        PmiJob {
            config,
            kvs,
            ranks: vec![RankState::Waiting; size],
            finalized: vec![false; size],
            conns: BTreeMap::new(),
            barrier: BTreeSet::new(),
            epoch: 0,
            failure: None,
            all_finalized: false,
        }
    }

    pub fn config(&self) -> &JobConfig {
        &self.config
    }

    pub fn failure(&self) -> Option<&JobFailure> {
        self.failure.as_ref()
    }

    pub fn all_finalized(&self) -> bool {
        self.all_finalized
    }

    /// Completed barriers.
    pub fn barrier_epoch(&self) -> u64 {
        self.epoch
    }

    /// Ranks waiting in the current barrier.
    pub fn in_barrier(&self) -> Vec<u32> {
        self.barrier.iter().copied().collect()
    }

    pub fn kvs_get(&self, key: &str) -> Option<&str> {
        self.kvs.get(key).map(String::as_str)
    }

    /// The rank a connection is bound to.
    pub fn rank_of(&self, conn: ConnId) -> Option<u32> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    /// One complete line from `conn` (its trailing newline optional).
    pub fn on_line(&mut self, conn: ConnId, bytes: &[u8]) -> Vec<Action> {
        match parse_request(bytes) {
            Ok(req) => self.on_request(conn, req),
            Err((cmd, e)) => self.on_wire_error(conn, cmd.as_deref(), &e),
        }
    }

    /// A line that could not be parsed (or was too long: the caller
    /// discards the rest of it up to the newline). The answer names the
    /// command's response if it is known, else `cmd=error`.
    pub fn on_wire_error(&mut self, conn: ConnId, cmd: Option<&str>, e: &WireError) -> Vec<Action> {
        self.conns.entry(conn).or_default();
        let response = cmd
            .map(Request::response_name)
            .unwrap_or_else(|| "error".into());
        log::warn!("pmi {}: connection {conn}: {e}", self.config.kvsname);
        vec![Action::Send(conn, error_reply(&response, &e.to_string()))]
    }

    /// The connection is gone (EOF or error). Leaving before `finalize`
    /// fails the job, if the connection was bound to a rank.
    pub fn on_disconnect(&mut self, conn: ConnId) -> Vec<Action> {
        let Some(c) = self.conns.remove(&conn) else {
            return Vec::new();
        };
        let Some(rank) = c.rank else {
            return Vec::new();
        };
        self.ranks[rank as usize] = RankState::Gone;
        if c.finalized || self.failure.is_some() {
            return Vec::new();
        }
        let reason = if self.barrier.is_empty() {
            format!("rank {rank} disconnected before PMI finalize")
        } else {
            format!("rank {rank} disconnected before PMI finalize, during a barrier")
        };
        self.fail(rank, None, reason)
    }

    fn on_request(&mut self, conn: ConnId, req: Request) -> Vec<Action> {
        let kvsname = self.config.kvsname.clone();
        if let Some(f) = &self.failure {
            // Connections of a failed job were closed; a new one is refused.
            let msg = format!("job failed: {}", f.reason);
            return vec![
                Action::Send(conn, error_reply(&response_of(&req), &msg)),
                Action::Close(conn),
            ];
        }
        self.conns.entry(conn).or_default();
        if let Request::Initack { pmiid } = req {
            return self.initack(conn, pmiid);
        }
        let c = &self.conns[&conn];
        let Some(rank) = c.rank else {
            let msg = "send cmd=initack pmiid=N first (the rank needs PMI_ID)";
            return vec![Action::Send(conn, error_reply(&response_of(&req), msg))];
        };
        if c.finalized {
            return vec![Action::Send(
                conn,
                error_reply(&response_of(&req), "rank already finalized"),
            )];
        }
        if let Request::Init {
            version,
            subversion,
        } = req
        {
            if c.inited {
                return vec![Action::Send(
                    conn,
                    error_reply("response_to_init", "double init"),
                )];
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
                return vec![Action::Send(conn, reply)];
            }
            self.conns.get_mut(&conn).expect("conn").inited = true;
            // Always 1.1: 1.2 would switch the 4.1+ client to tagged,
            // grouped barriers this server does not serve.
            let reply = Line::new("response_to_init")
                .with("rc", 0)
                .with("pmi_version", 1)
                .with("pmi_subversion", 1)
                .format();
            return vec![Action::Send(conn, reply)];
        }
        if let Request::Abort { exitcode, message } = req {
            // Also before init: the client aborts when init fails.
            let reason = match message {
                Some(m) => format!("rank {rank} called PMI_Abort({exitcode}): {m}"),
                None => format!("rank {rank} called PMI_Abort({exitcode})"),
            };
            // No answer: the 4.0 client waits for a line it does not
            // check; closing ends that wait (fail closes every conn).
            return self.fail(rank, Some(exitcode), reason);
        }
        if !c.inited {
            return vec![Action::Send(
                conn,
                error_reply(&response_of(&req), "send cmd=init first"),
            )];
        }
        let reply = |line: Line| vec![Action::Send(conn, line.with_rc_first().format())];
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
                    return vec![Action::Send(conn, error_reply("put_result", &e))];
                }
                if key.len() > KEYLEN_MAX {
                    let e = format!("key longer than {KEYLEN_MAX} bytes");
                    return vec![Action::Send(conn, error_reply("put_result", &e))];
                }
                if value.len() > VALLEN_MAX {
                    let e = format!("value longer than {VALLEN_MAX} bytes");
                    return vec![Action::Send(conn, error_reply("put_result", &e))];
                }
                let cap = MAX_KEYS_PER_RANK * self.config.size.max(1) as usize;
                if !self.kvs.contains_key(&key) && self.kvs.len() >= cap {
                    return vec![Action::Send(conn, error_reply("put_result", "kvs full"))];
                }
                self.kvs.insert(key, value);
                reply(Line::new("put_result"))
            }
            Request::Get { kvsname: name, key } => {
                if let Some(e) = self.check_kvsname(name.as_deref()) {
                    return vec![Action::Send(conn, error_reply("get_result", &e))];
                }
                match self.kvs.get(&key) {
                    Some(v) => reply(Line::new("get_result").with("value", v)),
                    None => vec![Action::Send(
                        conn,
                        error_reply("get_result", &format!("key {key} not found")),
                    )],
                }
            }
            Request::BarrierIn { group } => self.barrier_in(conn, rank, group),
            Request::Finalize => {
                self.conns.get_mut(&conn).expect("conn").finalized = true;
                self.finalized[rank as usize] = true;
                let mut out = reply(Line::new("finalize_ack"));
                if !self.all_finalized && self.finalized.iter().all(|f| *f) {
                    self.all_finalized = true;
                    log::info!("pmi {kvsname}: all {} ranks finalized", self.config.size);
                    out.push(Action::AllFinalized);
                }
                out
            }
            Request::Unsupported { cmd } => {
                let e = format!("{cmd} is not supported by gangd");
                vec![Action::Send(
                    conn,
                    error_reply(&Request::response_name(&cmd), &e),
                )]
            }
        }
    }

    fn check_kvsname(&self, name: Option<&str>) -> Option<String> {
        match name {
            Some(n) if n != self.config.kvsname => Some(format!("unknown kvsname {n}")),
            _ => None,
        }
    }

    fn initack(&mut self, conn: ConnId, pmiid: i64) -> Vec<Action> {
        let refuse = |msg: String| {
            vec![
                Action::Send(conn, error_reply("initack", &msg)),
                Action::Close(conn),
            ]
        };
        if self.conns[&conn].rank.is_some() {
            return vec![Action::Send(conn, error_reply("initack", "double initack"))];
        }
        let size = self.config.size;
        let rank = match u32::try_from(pmiid) {
            Ok(r) if r < size => r,
            _ => {
                log::warn!(
                    "pmi {}: connection {conn}: pmiid {pmiid} out of range 0..{size}",
                    self.config.kvsname
                );
                self.conns.remove(&conn);
                return refuse(format!("pmiid {pmiid} out of range 0..{size}"));
            }
        };
        match self.ranks[rank as usize] {
            RankState::Waiting => {}
            RankState::Bound(_) | RankState::Gone => {
                log::warn!(
                    "pmi {}: connection {conn}: rank {rank} connected twice",
                    self.config.kvsname
                );
                self.conns.remove(&conn);
                return refuse(format!("rank {rank} is already connected"));
            }
        }
        self.ranks[rank as usize] = RankState::Bound(conn);
        self.conns.get_mut(&conn).expect("conn").rank = Some(rank);
        vec![Action::Send(
            conn,
            initack_reply(rank, size, self.config.debug),
        )]
    }

    fn barrier_in(&mut self, _conn: ConnId, rank: u32, group: Option<String>) -> Vec<Action> {
        if let Some(g) = group.filter(|g| g != "WORLD") {
            return self.fail(
                rank,
                None,
                format!("rank {rank} entered a group barrier ({g}), unsupported"),
            );
        }
        if self.barrier.contains(&rank) {
            return self.fail(
                rank,
                None,
                format!("rank {rank} entered barrier {} twice", self.epoch),
            );
        }
        if let Some(done) = self.finalized.iter().position(|f| *f) {
            return self.fail(
                rank,
                None,
                format!("rank {rank} entered a barrier after rank {done} finalized: it can never complete"),
            );
        }
        self.barrier.insert(rank);
        if self.barrier.len() < self.config.size as usize {
            return Vec::new();
        }
        // Everyone is in: release all, in rank order.
        self.epoch += 1;
        self.barrier.clear();
        let line = Line::new("barrier_out").with("rc", 0).format();
        self.ranks
            .iter()
            .filter_map(|r| match r {
                RankState::Bound(c) => Some(Action::Send(*c, line.clone())),
                _ => None,
            })
            .collect()
    }

    fn fail(&mut self, rank: u32, exitcode: Option<i64>, reason: String) -> Vec<Action> {
        log::error!("pmi {}: job failed: {reason}", self.config.kvsname);
        let failure = JobFailure {
            rank,
            exitcode,
            reason: reason.clone(),
        };
        self.failure = Some(failure.clone());
        let mut out = Vec::new();
        let line = error_reply("barrier_failed", &reason);
        for r in std::mem::take(&mut self.barrier) {
            if let RankState::Bound(c) = self.ranks[r as usize] {
                out.push(Action::Send(c, line.clone()));
            }
        }
        for (conn, c) in std::mem::take(&mut self.conns) {
            if let Some(r) = c.rank {
                self.ranks[r as usize] = RankState::Gone;
            }
            out.push(Action::Close(conn));
        }
        out.push(Action::Failed(failure));
        out
    }
}

fn response_of(req: &Request) -> String {
    let cmd = match req {
        Request::Initack { .. } => "initack",
        Request::Init { .. } => "init",
        Request::GetMaxes => "get_maxes",
        Request::GetAppnum => "get_appnum",
        Request::GetMyKvsname => "get_my_kvsname",
        Request::GetUniverseSize => "get_universe_size",
        Request::Put { .. } => "put",
        Request::Get { .. } => "get",
        Request::BarrierIn { .. } => "barrier_in",
        Request::Finalize => "finalize",
        Request::Abort { .. } => "abort",
        Request::Unsupported { cmd } => cmd,
    };
    Request::response_name(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sends(actions: &[Action]) -> Vec<(ConnId, &str)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(c, s) => Some((*c, s.as_str())),
                _ => None,
            })
            .collect()
    }

    fn ready(job: &mut PmiJob, conn: ConnId, rank: u32) {
        job.on_line(conn, format!("cmd=initack pmiid={rank}\n").as_bytes());
        job.on_line(conn, b"cmd=init pmi_version=1 pmi_subversion=1\n");
    }

    #[test]
    fn handshake_and_kvs() {
        let mut job = PmiJob::new(JobConfig::new(7, 2));
        let a = job.on_line(10, b"cmd=initack pmiid=1\n");
        assert_eq!(
            sends(&a),
            vec![(10, "cmd=initack rc=0 rank=1 size=2 debug=0\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n")]
        );
        let a = job.on_line(10, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        assert_eq!(
            sends(&a),
            vec![(
                10,
                "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
            )]
        );
        let a = job.on_line(10, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        assert_eq!(
            sends(&a),
            vec![(10, "cmd=response_to_init rc=-1 msg=double_init\n")]
        );
        let a = job.on_line(10, b"cmd=get_my_kvsname\n");
        assert_eq!(
            sends(&a),
            vec![(10, "cmd=my_kvsname rc=0 kvsname=kvs_7_0\n")]
        );
        let a = job.on_line(10, b"cmd=put kvsname=kvs_7_0 key=k value=v1\n");
        assert_eq!(sends(&a), vec![(10, "cmd=put_result rc=0\n")]);
        job.on_line(10, b"cmd=put kvsname=kvs_7_0 key=k value=v2\n");
        let a = job.on_line(10, b"cmd=get kvsname=kvs_7_0 key=k\n");
        assert_eq!(sends(&a), vec![(10, "cmd=get_result rc=0 value=v2\n")]);
        let a = job.on_line(10, b"cmd=get kvsname=other key=k\n");
        assert_eq!(
            sends(&a),
            vec![(10, "cmd=get_result rc=-1 msg=unknown_kvsname_other\n")]
        );
        let long = format!("cmd=put key={} value=v\n", "k".repeat(KEYLEN_MAX + 1));
        let a = job.on_line(10, long.as_bytes());
        assert_eq!(
            sends(&a),
            vec![(10, "cmd=put_result rc=-1 msg=key_longer_than_64_bytes\n")]
        );
    }

    #[test]
    fn identity_errors() {
        let mut job = PmiJob::new(JobConfig::new(1, 2));
        let a = job.on_line(1, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        assert!(sends(&a)[0]
            .1
            .starts_with("cmd=response_to_init rc=-1 msg="));
        let a = job.on_line(2, b"cmd=initack pmiid=2\n");
        assert_eq!(
            a,
            vec![
                Action::Send(
                    2,
                    "cmd=initack rc=-1 msg=pmiid_2_out_of_range_0..2\n".into()
                ),
                Action::Close(2)
            ]
        );
        let a = job.on_line(3, b"cmd=initack pmiid=-1\n");
        assert_eq!(a.last(), Some(&Action::Close(3)));
        job.on_line(4, b"cmd=initack pmiid=0\n");
        let a = job.on_line(5, b"cmd=initack pmiid=0\n");
        assert_eq!(a.last(), Some(&Action::Close(5)));
        assert_eq!(job.failure(), None);
        // An anonymous connection leaving does not fail the job.
        assert!(job.on_disconnect(1).is_empty());
        assert_eq!(job.failure(), None);
    }

    #[test]
    fn barrier_waits_for_all_then_releases_all() {
        let mut job = PmiJob::new(JobConfig::new(1, 3));
        for r in 0..3 {
            ready(&mut job, 100 + u64::from(r), r);
        }
        assert!(job.on_line(102, b"cmd=barrier_in\n").is_empty());
        assert!(job.on_line(100, b"cmd=barrier_in\n").is_empty());
        assert_eq!(job.in_barrier(), vec![0, 2]);
        let a = job.on_line(101, b"cmd=barrier_in\n");
        assert_eq!(
            sends(&a),
            vec![
                (100, "cmd=barrier_out rc=0\n"),
                (101, "cmd=barrier_out rc=0\n"),
                (102, "cmd=barrier_out rc=0\n")
            ]
        );
        assert_eq!(job.barrier_epoch(), 1);
        for c in 100..103 {
            let a = job.on_line(c, b"cmd=finalize\n");
            assert_eq!(sends(&a), vec![(c, "cmd=finalize_ack rc=0\n")]);
        }
        assert!(job.all_finalized());
        for c in 100..103 {
            assert!(job.on_disconnect(c).is_empty());
        }
        assert_eq!(job.failure(), None);
    }

    #[test]
    fn disconnect_mid_barrier_fails_everyone() {
        let mut job = PmiJob::new(JobConfig::new(1, 3));
        for r in 0..3 {
            ready(&mut job, u64::from(r), r);
        }
        job.on_line(0, b"cmd=barrier_in\n");
        job.on_line(1, b"cmd=barrier_in\n");
        let a = job.on_disconnect(2);
        let msg = "cmd=barrier_failed rc=-1 msg=rank_2_disconnected_before_PMI_finalize,_during_a_barrier\n";
        assert_eq!(sends(&a), vec![(0, msg), (1, msg)]);
        assert!(a.contains(&Action::Close(0)) && a.contains(&Action::Close(1)));
        assert!(matches!(
            a.last(),
            Some(Action::Failed(JobFailure {
                rank: 2,
                exitcode: None,
                ..
            }))
        ));
        // Later connections are refused.
        let a = job.on_line(9, b"cmd=initack pmiid=2\n");
        assert_eq!(a.last(), Some(&Action::Close(9)));
    }

    #[test]
    fn abort_fails_the_job() {
        let mut job = PmiJob::new(JobConfig::new(1, 2));
        ready(&mut job, 0, 0);
        ready(&mut job, 1, 1);
        let a = job.on_line(1, b"cmd=abort exitcode=5 message=out of memory\n");
        let f = job.failure().unwrap();
        assert_eq!((f.rank, f.exitcode), (1, Some(5)));
        assert!(f.reason.contains("out of memory"));
        assert!(a.contains(&Action::Close(0)) && a.contains(&Action::Close(1)));
    }

    #[test]
    fn abort_before_init_fails_the_job() {
        let mut job = PmiJob::new(JobConfig::new(1, 2));
        job.on_line(0, b"cmd=initack pmiid=0\n");
        job.on_line(0, b"cmd=abort exitcode=255\n");
        assert_eq!(job.failure().map(|f| f.exitcode), Some(Some(255)));
    }

    #[test]
    fn barrier_after_finalize_fails() {
        let mut job = PmiJob::new(JobConfig::new(1, 2));
        ready(&mut job, 0, 0);
        ready(&mut job, 1, 1);
        job.on_line(0, b"cmd=finalize\n");
        let a = job.on_line(1, b"cmd=barrier_in\n");
        assert!(matches!(a.last(), Some(Action::Failed(_))));
    }

    #[test]
    fn mapping() {
        assert_eq!(
            process_mapping(&["a", "a", "b", "b"]).unwrap(),
            "(vector,(0,2,2))"
        );
        assert_eq!(process_mapping(&[0, 0, 0]).unwrap(), "(vector,(0,1,3))");
        assert_eq!(
            process_mapping(&["a", "b", "a", "b"]).unwrap(),
            "(vector,(0,2,1),(0,2,1))"
        );
        assert_eq!(
            process_mapping(&[1, 1, 2]).unwrap(),
            "(vector,(0,1,2),(1,1,1))"
        );
        assert_eq!(process_mapping::<u8>(&[]), None);
    }
}
