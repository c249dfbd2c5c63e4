//! A node as gangd sees it: its connection, its CPUs, and its clock's
//! offset from gangd's (for merged traces, from the heartbeats); the table
//! it was last sent is the rotation's (switch/rotation.rs). Its own
//! estimate of the cluster clock (FromAgent::ClockStatus, the agent's
//! ClusterClock fed by probes answered in net/) is kept as reported and
//! shown in the `nodes` status file (`Node::status_line`), nothing more:
//! gangd takes no decision on it yet.
//!
//! The coordinator's side (`impl Coordinator`): a node joining (refused,
//! welcomed, its live jobs adopted), its messages dispatched, its
//! heartbeats, and its loss (its jobs fail, its switch part is dropped).
//!
//! A join costs O(1) on its own: the name is looked up in `node_ids`, the
//! node's CPUs are checked alone, and the node waits in `joining`, unseen
//! by the rest of gangd. The O(nodes) part (the cluster rebuild, the state
//! file's fsync) is done once for every node waiting (`flush_joins`, when
//! the oldest has waited JOIN_BATCH: mod.rs), which then puts them in
//! `nodes` and sends their Welcome: a node is in the state file before it
//! hears it is in, and in the cluster from the moment it hears it. With
//! the Welcome a node gets the node directory (every node's id, name and
//! address: gang-wire's proto/directory.rs); every other node gets the
//! entries of the nodes that joined within a second, and before a job
//! names them (`sync_directory`), so that a job's peer table can name
//! nodes by id.
//!
//! Liveness: a node is lost when a heartbeat sent to it has gone
//! unanswered (nothing at all heard from the node since) for the node
//! timeout (`Node::silent`). Silence is counted from a heartbeat actually
//! sent, not from the last frame heard, so a loop that could not send
//! heartbeats for seconds does not find every node silent afterwards; and
//! a node whose link still holds output queued for it (its heartbeat is
//! behind that) is asked again rather than counted silent.
//!
//! Heartbeats only where needed (`Node::needs_heartbeat`): any frame
//! from a node proves it alive, so a node heard (or asked) within the
//! quiet period gets none at that tick; an idle node is then asked every
//! other period. The quiet period is the heartbeat period, or longer at
//! scale so that at most HEARTBEATS_PER_S go out in all, but at most half
//! the node timeout (`quiet_period`). A dead node is lost at most the
//! node timeout + the quiet period + two heartbeat periods after it was
//! last heard (was: timeout + two periods). Every node still gets one
//! every HEARTBEAT_REFRESH, so its round trip and clock offset stay fresh.
//!
//! Known faults: a node's id is kept by name for gangd's lifetime only
//! (a restart hands ids out again in join order).

use gang_wire::time::monotonic_ns;
use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use log::{info, warn};

use crate::matrix::{self, Cluster};
use crate::switch::barrier::Outbox;
use gang_wire::proto::directory::{self, DirEntry};
use gang_wire::proto::{
    ClockReport, ClockSource, ClockState, ExitStatus, FromAgent, NodeId, ToAgent, ToClient,
};

use super::jobs::Ending;
use super::net::{self, ConnId, Corks, Frame, Link};
use super::{Coordinator, JobId};

/// Heartbeats kept for the clock estimate.
const CLOCK_SAMPLES: usize = 16;
/// During a storm of joins a node hears of the nodes that joined at most
/// this often (and always before a job names them): a delta per join
/// batch to every node was millions of frames at 4096 nodes.
const DIRECTORY_PERIOD_NS: u64 = 1_000_000_000;
/// At most this many heartbeats a second in all (the quiet period grows
/// with the nodes past it, up to half the node timeout).
pub const HEARTBEATS_PER_S: u32 = 2048;
/// A node gets a heartbeat at least this often, however chatty it is.
pub const HEARTBEAT_REFRESH: Duration = Duration::from_secs(10);
/// Ports handed to ranks, per node, in turn.
const RANK_PORTS: std::ops::Range<u16> = 20000..60000;

pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub link: Link,
    pub addr: IpAddr,
    /// gangd's address as this node reaches it (for the ranks' PMI_PORT).
    pub gangd_addr: IpAddr,
    pub nr_cpus: u32,
    pub housekeeping: Vec<u32>,
    pub last_seen: Instant,
    /// The first heartbeat sent after `last_seen`: silence runs from here.
    asked_at: Option<Instant>,
    /// The last heartbeat sent (None: none yet, or gangd must ask again).
    last_heartbeat: Option<Instant>,
    next_seq: u64,
    /// Heartbeats in flight: (seq, gangd's monotonic ns when sent).
    sent: VecDeque<(u64, u64)>,
    /// (round trip, offset) of recent answers.
    samples: VecDeque<(u64, i64)>,
    next_port: u16,
    /// The node's last report of its cluster clock.
    pub clock: Option<ClockReport>,
    /// When it was welcomed (monotonic ns): its directory entry is news to
    /// every node whose directory is older (`sync_directory`).
    pub joined_ns: u64,
    /// The node's directory holds every node welcomed before this.
    pub directory_ns: u64,
}

impl Node {
    pub fn new(
        id: NodeId,
        name: String,
        link: Link,
        addr: IpAddr,
        nr_cpus: u32,
        housekeeping: Vec<u32>,
    ) -> Self {
        Self {
            id,
            name,
            link,
            addr,
            gangd_addr: addr,
            nr_cpus,
            housekeeping,
            last_seen: Instant::now(),
            asked_at: None,
            last_heartbeat: None,
            next_seq: 1,
            sent: VecDeque::new(),
            samples: VecDeque::new(),
            next_port: RANK_PORTS.start,
            clock: None,
            joined_ns: 0,
            directory_ns: 0,
        }
    }

    /// Sends a heartbeat at `now`; silence is counted from the first one
    /// the node has not answered (nor sent anything since).
    pub fn send_heartbeat(&mut self, now: Instant) {
        if self.asked_at.is_none_or(|a| a <= self.last_seen) {
            self.asked_at = Some(now);
        }
        self.last_heartbeat = Some(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sent.push_back((seq, monotonic_ns()));
        while self.sent.len() > CLOCK_SAMPLES {
            self.sent.pop_front();
        }
        self.link.send(&ToAgent::Heartbeat { seq });
    }

    /// Whether the node needs a heartbeat at `now`: never asked (or to
    /// be asked again), or neither heard nor asked within `quiet`, or its
    /// last heartbeat is HEARTBEAT_REFRESH old.
    pub fn needs_heartbeat(&self, now: Instant, quiet: Duration) -> bool {
        let Some(asked) = self.last_heartbeat else {
            return true;
        };
        let ago = |t: Instant| now.saturating_duration_since(t);
        ago(asked) >= HEARTBEAT_REFRESH || ago(asked.max(self.last_seen)) >= quiet
    }

    /// Whether the node has left a heartbeat unanswered (and said nothing
    /// else) for longer than `timeout` at `now`.
    pub fn silent(&self, now: Instant, timeout: Duration) -> bool {
        self.asked_at
            .is_some_and(|a| a > self.last_seen && now.saturating_duration_since(a) > timeout)
    }

    /// Forgets the heartbeats sent so far for silence: gangd could not
    /// send them in time or read their answers (its loop stalled).
    pub fn ask_again(&mut self) {
        self.asked_at = None;
        self.last_heartbeat = None;
    }

    /// An answer: the node's clock was `node_ns` somewhere inside the round
    /// trip; the middle is the best guess.
    pub fn heartbeat_answer(&mut self, seq: u64, node_ns: u64) {
        let Some(i) = self.sent.iter().position(|&(s, _)| s == seq) else {
            return;
        };
        let (_, sent_ns) = self.sent.remove(i).expect("found");
        if node_ns == 0 {
            return;
        }
        let rtt = monotonic_ns().saturating_sub(sent_ns);
        let offset = (sent_ns + rtt / 2) as i64 - node_ns as i64;
        self.samples.push_back((rtt, offset));
        while self.samples.len() > CLOCK_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// gangd_ns = node_ns + offset_ns, from the answer with the shortest
    /// round trip (the least room for error); 0 if none yet.
    pub fn offset_ns(&self) -> i64 {
        self.samples
            .iter()
            .min_by_key(|(rtt, _)| *rtt)
            .map_or(0, |&(_, o)| o)
    }

    /// The shortest heartbeat round trip seen recently, in µs.
    pub fn min_rtt_us(&self) -> Option<u64> {
        self.samples.iter().map(|(rtt, _)| rtt / 1000).min()
    }

    /// The node's line in the `nodes` status file.
    pub fn status_line(&self) -> String {
        let rtt = self.min_rtt_us().map_or("-".to_string(), |r| r.to_string());
        format!(
            "{} {} {} cpus={} rtt_us={rtt} {}\n",
            self.id.0,
            self.name,
            self.addr,
            self.nr_cpus,
            clock_columns(self.clock.as_ref())
        )
    }

    pub fn next_port(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port = if p + 1 >= RANK_PORTS.end {
            RANK_PORTS.start
        } else {
            p + 1
        };
        p
    }
}

/// How long a node may be quiet before it gets a heartbeat: `period`,
/// or at scale long enough for at most HEARTBEATS_PER_S in all, but never
/// past half the node `timeout` (nor under `period`).
pub fn quiet_period(period: Duration, timeout: Duration, nodes: usize) -> Duration {
    let nodes = u32::try_from(nodes).unwrap_or(u32::MAX);
    let scaled = Duration::from_secs(1) * nodes / HEARTBEATS_PER_S;
    period.max(scaled.min(timeout / 2))
}

/// What the allocator's cluster knows of a node.
fn node_spec(n: &Node) -> matrix::NodeSpec {
    matrix::NodeSpec {
        id: n.id.0,
        name: n.name.clone(),
        nr_cpus: n.nr_cpus,
        housekeeping: n.housekeeping.clone(),
    }
}

/// The cluster clock columns of a node's status line: its source, state,
/// offset (cluster − node, ns) and error bound (ns), "-" before the first
/// report.
fn clock_columns(report: Option<&ClockReport>) -> String {
    let Some(r) = report else {
        return "clock=- clock_state=- clock_offset_ns=- clock_bound_ns=-".into();
    };
    let source = match r.source {
        ClockSource::Gangd => "gangd",
        ClockSource::Realtime => "realtime",
    };
    let state = match r.state {
        ClockState::Unsynchronised => "unsynchronised",
        ClockState::Good => "good",
        ClockState::Stepped => "stepped",
    };
    format!(
        "clock={source} clock_state={state} clock_offset_ns={} clock_bound_ns={}",
        r.offset_ns, r.error_bound_ns
    )
}

impl Coordinator {
    pub(super) fn node_joined(
        &mut self,
        conn: ConnId,
        link: Link,
        addr: std::net::IpAddr,
        local: std::net::IpAddr,
        hello: net::Hello,
    ) {
        let name = hello.node.clone();
        let known = self.node_ids.get(&name);
        let linked = |id: &NodeId| {
            self.nodes.contains_key(id) || self.joining.iter().any(|(_, n)| n.id == *id)
        };
        if known.is_some_and(linked) {
            let reason = format!("a node named {name} is already connected");
            warn!("refusing agent: {reason}");
            link.send(&ToAgent::Refused { reason });
            link.close();
            return;
        }
        let housekeeping = match matrix::parse_cpus(&hello.housekeeping_cpus) {
            Ok(h) => h,
            Err(e) => {
                link.send(&ToAgent::Refused { reason: e.clone() });
                link.close();
                warn!("refusing node {name}: {e}");
                return;
            }
        };
        let next = NodeId(self.node_ids.len() as u32);
        let id = *self.node_ids.entry(name.clone()).or_insert_with(|| {
            self.node_names.push(name.clone());
            next
        });
        let mut node = Node::new(id, name.clone(), link, addr, hello.nr_cpus, housekeeping);
        node.gangd_addr = local;
        // The node alone: names and ids are unique by the checks above, so
        // it fits the cluster iff it is valid on its own (matrix.rs).
        if let Err(e) = Cluster::new(vec![node_spec(&node)]) {
            warn!("refusing node {name}: {e}");
            node.link.send(&ToAgent::Refused {
                reason: format!("node {name} does not fit the matrix"),
            });
            node.link.close();
            return;
        }
        info!(
            "node {name} joined as node {} ({addr}, {} CPUs, agent {})",
            id.0, hello.nr_cpus, hello.agent_version
        );
        self.joining.push((conn, node));
        self.joining_since.get_or_insert_with(Instant::now);
        if !hello.jobs.is_empty() {
            // Adoption places the jobs on the node: it must be in the
            // cluster first.
            self.flush_joins();
            for lj in &hello.jobs {
                self.adopt(id, &name, lj, &hello.schedule);
            }
            self.placement_changed();
        }
    }

    /// The O(nodes) part of the joins waiting, once: the state file
    /// written, the cluster rebuilt, then each node welcomed. Returns the
    /// time the rebuild and what follows it took (the fsync is I/O, not
    /// the loop's work: mod.rs paces batches by this).
    pub(super) fn flush_joins(&mut self) -> std::time::Duration {
        self.joining_since = None;
        if self.joining.is_empty() {
            return std::time::Duration::ZERO;
        }
        let mut joined = Vec::with_capacity(self.joining.len());
        for (conn, node) in std::mem::take(&mut self.joining) {
            // Recorded before the node hears it is in: a restart right
            // after still waits for it (and its jobs).
            self.state.note_node(&node.name);
            self.conn_node.insert(conn, node.id);
            joined.push(node.id);
            self.nodes.insert(node.id, node);
        }
        self.links_epoch += 1;
        if let Err(e) = self.state.flush() {
            warn!(
                "cannot record {} joined node(s) in the state directory: {e}",
                joined.len()
            );
        }
        let work = Instant::now();
        if !self.rebuild_cluster(None, None) {
            // Cannot happen (each node was checked alone, names and ids
            // are unique); refuse them rather than run without them.
            for id in joined {
                if let Some(n) = self.nodes.remove(&id) {
                    n.link.send(&ToAgent::Refused {
                        reason: format!("node {} does not fit the matrix", n.name),
                    });
                    n.link.close();
                }
            }
            self.conn_node.retain(|_, id| self.nodes.contains_key(id));
            return work.elapsed();
        }
        self.welcome(&joined);
        self.check_adoption();
        self.placement_changed();
        self.publish_status();
        work.elapsed()
    }

    /// Welcomes the nodes just `joined`: each gets its Welcome, its id
    /// in the node directory and the whole directory, then the knobs (the
    /// directory encoded once for all of them); the other nodes hear of
    /// them within DIRECTORY_PERIOD_NS, and before any job names them
    /// (`sync_directory`).
    fn welcome(&mut self, joined: &[NodeId]) {
        let now = monotonic_ns();
        let whole = directory_frames(self.nodes.values().map(entry).collect());
        let knobs = Frame::new(&self.knobs.message());
        for id in joined {
            let Some(n) = self.nodes.get_mut(id) else {
                continue;
            };
            (n.joined_ns, n.directory_ns) = (now, now);
            n.link.send(&ToAgent::Welcome { node_id: n.id });
            n.link.send(&ToAgent::NodeDirectory {
                you: Some(n.id),
                reset: true,
                nodes: Vec::new(),
            });
            for f in whole.iter().chain(&knobs) {
                n.link.send_frame(f);
            }
        }
        let all: Vec<NodeId> = self.nodes.keys().copied().collect();
        self.sync_directory(&all, DIRECTORY_PERIOD_NS);
    }

    /// Sends each node of `ids` whose directory is at least `age_ns` old
    /// the entries of the nodes welcomed since (0: every node behind).
    /// Nodes brought up to date at the same time get the same frames,
    /// encoded once.
    pub(super) fn sync_directory(&mut self, ids: &[NodeId], age_ns: u64) {
        let now = monotonic_ns();
        let latest = self.nodes.values().map(|n| n.joined_ns).max().unwrap_or(0);
        let mut behind: std::collections::BTreeMap<u64, Vec<NodeId>> = Default::default();
        for id in ids {
            if let Some(n) = self.nodes.get(id) {
                if n.directory_ns < latest && now.saturating_sub(n.directory_ns) >= age_ns {
                    behind.entry(n.directory_ns).or_default().push(n.id);
                }
            }
        }
        for (since, group) in behind {
            let news = directory_frames(
                self.nodes
                    .values()
                    .filter(|n| n.joined_ns > since)
                    .map(entry)
                    .collect(),
            );
            for id in group {
                if let Some(n) = self.nodes.get_mut(&id) {
                    for f in &news {
                        n.link.send_frame(f);
                    }
                    n.directory_ns = now;
                }
            }
        }
    }

    /// Rebuilds the allocator's cluster from the live nodes, plus `add`,
    /// minus `remove`. Returns false if the new cluster is invalid.
    pub(super) fn rebuild_cluster(&mut self, add: Option<&Node>, remove: Option<NodeId>) -> bool {
        let specs = self
            .nodes
            .values()
            .filter(|n| Some(n.id) != remove)
            .chain(add)
            .map(node_spec)
            .collect();
        match Cluster::new(specs) {
            Ok(c) => {
                for dropped in self.alloc.set_cluster(c) {
                    // gangd fails such jobs before removing their node.
                    log::debug!("job {dropped} left the matrix with its node");
                }
                true
            }
            Err(e) => {
                warn!("cluster refused: {e}");
                false
            }
        }
    }

    pub(super) fn node_lost(&mut self, id: NodeId, why: &str) {
        let Some(node) = self.nodes.remove(&id) else {
            return;
        };
        self.links_epoch += 1;
        node.link.close();
        warn!("node {} lost: {why}", node.name);
        let now = self.now_us();
        let out = self.rotation.node_lost(id, now);
        self.send_to_nodes(out);
        let affected: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.nodes().contains(&id))
            .map(|(&k, _)| k)
            .collect();
        for job in affected {
            if let Some(j) = self.jobs.get_mut(&job) {
                let lost: Vec<u32> = j
                    .live
                    .iter()
                    .copied()
                    .filter(|&r| j.rank_node[r as usize] == id)
                    .collect();
                for r in lost {
                    j.live.remove(&r);
                    j.exits.insert(r, ExitStatus::Signaled(9));
                }
                if j.ending.is_none() {
                    j.ending = Some(Ending::NodeLost {
                        node: node.name.clone(),
                    });
                }
            }
            self.kill_job(job, libc::SIGKILL);
            self.maybe_end(job);
        }
        self.trace_node_lost(id, &node.name);
        self.rebuild_cluster(None, None);
        self.placement_changed();
        self.publish_status();
    }

    /// Drops the silent nodes and sends a heartbeat to every node that
    /// needs one (`Node::needs_heartbeat`); after a `stalled` loop,
    /// silence is counted again from this heartbeat.
    pub(super) fn heartbeats(&mut self, stalled: bool) {
        let (timeout, now) = (self.cfg.node_timeout, Instant::now());
        for n in self.nodes.values_mut() {
            // A heartbeat behind gangd's own backlog of output (a big
            // placement) has not reached the node yet; a node that does not
            // read at all is dropped by the link's output cap instead.
            if stalled || n.link.backlog() > 0 {
                n.ask_again();
            }
        }
        let silent: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|n| n.silent(now, timeout))
            .map(|n| n.id)
            .collect();
        for id in silent {
            self.node_lost(
                id,
                &format!("silent for more than {} ms", timeout.as_millis()),
            );
        }
        let now = Instant::now();
        let quiet = quiet_period(self.cfg.heartbeat, timeout, self.nodes.len());
        for n in self.nodes.values_mut() {
            if n.needs_heartbeat(now, quiet) {
                n.send_heartbeat(now);
            }
        }
    }

    pub(super) fn on_agent_message(&mut self, node: NodeId, msg: FromAgent) {
        let now = self.now_us();
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        n.last_seen = Instant::now();
        match msg {
            FromAgent::Heartbeat { seq, mono_ns } => n.heartbeat_answer(seq, mono_ns),
            FromAgent::ClockStatus { report } => {
                if n.clock.map(|c| c.state) != Some(report.state) {
                    self.links_epoch += 1;
                }
                n.clock = Some(report);
            }
            // Answered by the agent loop (net/), never posted.
            FromAgent::ClockProbe { .. } => {}
            FromAgent::Frozen { .. }
            | FromAgent::Running { .. }
            | FromAgent::Yielded { .. }
            | FromAgent::PlanAck { .. }
            | FromAgent::Switched { .. } => {
                let out = self.rotation.on_agent(node, &msg, now);
                self.send_to_nodes(out);
            }
            FromAgent::Prepared { job, error } => self.prepared(job, node, error),
            FromAgent::RanksStarted { job, ranks } => {
                log::debug!(
                    "job {job}: ranks started on {} (rank, pid): {ranks:?}",
                    self.name_of(node)
                );
            }
            FromAgent::StartFailed { job, reason } => self.start_failed(job, node, &reason),
            FromAgent::RankOutput {
                job,
                rank,
                stream,
                data,
            } => {
                if let Some(conn) = self.jobs.get(&job).and_then(|j| j.client) {
                    if let Some((o, _)) = self.clients.get(&conn) {
                        o.send(&ToClient::Output {
                            job,
                            rank,
                            stream,
                            data,
                        });
                    }
                }
            }
            FromAgent::RankExited { job, rank, status } => {
                self.rank_exited(job, rank, node, status)
            }
            FromAgent::TraceChunk { id, data, last } => self.trace_chunk(id, node, data, last),
            FromAgent::Error { message } => warn!("node {}: {message}", self.name_of(node)),
            FromAgent::Hello { .. } => {
                warn!("node {} sent a second hello; ignored", self.name_of(node))
            }
            FromAgent::PmiBarrierIn { .. }
            | FromAgent::PmiFinalized { .. }
            | FromAgent::PmiFailed { .. }
            | FromAgent::PmiPuts { .. } => self.on_pmi(node, msg),
        }
    }

    /// A live node's name, for a log line ("?" if it is gone).
    fn name_of(&self, node: NodeId) -> &str {
        self.nodes.get(&node).map_or("?", |n| n.name.as_str())
    }

    /// A node's name, live or gone (None only for an id never given).
    pub(super) fn node_name(&self, id: NodeId) -> Option<String> {
        self.node_names.get(id.0 as usize).cloned()
    }

    /// Sends each node its messages (if still connected). A message equal to the one before is
    /// not encoded again (a plan, a Freeze or a table the same for many
    /// nodes is encoded once), and the agent loop is woken once for the
    /// whole outbox (each loop it goes to: `Corks`), so each link's
    /// messages of it go out in one write.
    pub(super) fn send_to_nodes(&self, out: Outbox) {
        let mut corks = Corks::default();
        let mut last: Option<(ToAgent, Frame)> = None;
        for (n, msg) in out {
            let Some(node) = self.nodes.get(&n) else {
                continue;
            };
            corks.hold(&node.link);
            if last.as_ref().is_none_or(|(m, _)| *m != msg) {
                last = Frame::new(&msg).map(|f| (msg, f));
            }
            if let Some((_, frame)) = &last {
                node.link.send_frame(frame);
            }
        }
    }
}

/// The links of those of `ids` that are live nodes.
pub(super) fn links_of(
    nodes: &BTreeMap<NodeId, Node>,
    ids: impl IntoIterator<Item = NodeId>,
) -> Vec<&Link> {
    let live = ids.into_iter().filter_map(|n| nodes.get(&n));
    live.map(|n| &n.link).collect()
}

/// A node's entry in the node directory.
fn entry(n: &Node) -> DirEntry {
    DirEntry(n.id, n.name.clone(), n.addr.to_string())
}

/// NodeDirectory messages of `entries`, encoded once for many links.
fn directory_frames(entries: Vec<DirEntry>) -> Vec<Frame> {
    directory::chunks(entries)
        .into_iter()
        .filter_map(|nodes| {
            Frame::new(&ToAgent::NodeDirectory {
                you: None,
                reset: false,
                nodes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node::new(
            NodeId(3),
            "n3".into(),
            Link::new(std::io::sink(), std::sync::Arc::new(|| {}), "test".into()),
            IpAddr::from([10, 0, 0, 3]),
            8,
            vec![0],
        )
    }

    #[test]
    fn a_node_is_silent_only_a_timeout_after_a_heartbeat_it_left_unanswered() {
        let timeout = std::time::Duration::from_millis(3000);
        let ms = std::time::Duration::from_millis;
        let mut n = node();
        let t0 = n.last_seen;
        // Never asked: however long gangd took to get round to it.
        assert!(!n.silent(t0 + ms(10_000), timeout));
        n.send_heartbeat(t0 + ms(10_000));
        assert!(!n.silent(t0 + ms(13_000), timeout));
        // More heartbeats do not move the start of the silence.
        n.send_heartbeat(t0 + ms(10_500));
        assert!(n.silent(t0 + ms(13_001), timeout));
        // Heard (anything) after the first unanswered heartbeat: not
        // silent, and the next heartbeat starts the count again.
        n.last_seen = t0 + ms(12_000);
        assert!(!n.silent(t0 + ms(20_000), timeout));
        n.send_heartbeat(t0 + ms(20_000));
        assert!(!n.silent(t0 + ms(23_000), timeout));
        assert!(n.silent(t0 + ms(23_001), timeout));
    }

    #[test]
    fn after_a_stall_silence_counts_from_the_next_heartbeat() {
        let timeout = std::time::Duration::from_millis(3000);
        let ms = std::time::Duration::from_millis;
        let mut n = node();
        let t0 = n.last_seen;
        n.send_heartbeat(t0 + ms(100));
        // gangd's loop stalls 7 s (the answer may be unread): it asks again.
        n.ask_again();
        assert!(!n.silent(t0 + ms(7_100), timeout));
        n.send_heartbeat(t0 + ms(7_100));
        assert!(!n.silent(t0 + ms(10_100), timeout));
        assert!(n.silent(t0 + ms(10_101), timeout));
    }

    /// gangd's ticks every `period` (as `heartbeats` runs them: the
    /// silence check, then the heartbeats) over a node that answers each
    /// heartbeat 1 ms later and says something else at `chatter` times,
    /// until it dies at `dies`: the heartbeats sent, and when it was found
    /// silent (from the node's start).
    fn ticks(
        period: Duration,
        quiet: Duration,
        dies: Duration,
        chatter: &[Duration],
        end: Duration,
    ) -> (usize, Option<Duration>) {
        let timeout = Duration::from_millis(3000);
        let mut n = node();
        let t0 = n.last_seen;
        let (mut sent, mut t) = (0, Duration::ZERO);
        while t <= end {
            let now = t0 + t;
            if let Some(&c) = chatter.iter().rev().find(|&&c| c <= t && c < dies) {
                n.last_seen = n.last_seen.max(t0 + c);
            }
            if n.silent(now, timeout) {
                return (sent, Some(t));
            }
            if n.needs_heartbeat(now, quiet) {
                n.send_heartbeat(now);
                sent += 1;
                if t < dies {
                    n.last_seen = now + Duration::from_millis(1);
                }
            }
            t += period;
        }
        (sent, None)
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn an_idle_node_is_asked_every_other_period() {
        let (sent, lost) = ticks(MS(500), MS(500), MS(u64::MAX), &[], MS(60_000));
        assert_eq!(lost, None);
        // 121 ticks in 60 s: the first, then every other one.
        assert_eq!(sent, 61);
    }

    #[test]
    fn a_node_that_keeps_talking_is_asked_only_every_refresh() {
        let chatter: Vec<Duration> = (0..600).map(|i| MS(i * 100)).collect();
        let (sent, lost) = ticks(MS(500), MS(500), MS(u64::MAX), &chatter, MS(60_000));
        assert_eq!(lost, None);
        // At the start, then every HEARTBEAT_REFRESH (10 s).
        assert_eq!(sent, 7);
    }

    #[test]
    fn a_dead_node_is_found_within_the_timeout_the_quiet_period_and_two_periods() {
        for quiet in [MS(500), MS(1_500)] {
            for dies in (0..40).map(|i| MS(20_000 + i * 37)) {
                let (_, lost) = ticks(MS(500), quiet, dies, &[], MS(60_000));
                let lost = lost.expect("found");
                // Never sooner than the timeout less a period after it
                // died (its last answer came at most quiet + a period
                // before), never later than timeout + quiet + two periods.
                let after = lost - dies;
                assert!(
                    after > MS(3_000) - MS(1_000),
                    "{quiet:?} {dies:?}: {after:?}"
                );
                assert!(
                    after <= MS(3_000) + quiet + MS(1_000),
                    "{quiet:?} {dies:?}: {after:?}"
                );
            }
        }
    }

    #[test]
    fn a_node_that_stops_talking_is_asked_after_the_quiet_period() {
        let chatter: Vec<Duration> = (0..200).map(|i| MS(i * 100)).collect();
        let (_, lost) = ticks(MS(500), MS(500), MS(20_000), &chatter, MS(60_000));
        let after = lost.expect("found") - MS(20_000);
        assert!(after > MS(3_000) && after <= MS(4_500), "{after:?}");
    }

    #[test]
    fn the_quiet_period_grows_with_the_nodes_up_to_half_the_timeout() {
        let (hb, timeout) = (MS(500), MS(3_000));
        assert_eq!(quiet_period(hb, timeout, 64), hb);
        assert_eq!(quiet_period(hb, timeout, 1024), hb);
        assert_eq!(quiet_period(hb, timeout, 2048), MS(1_000));
        assert_eq!(quiet_period(hb, timeout, 4096), MS(1_500));
        assert_eq!(quiet_period(hb, timeout, 1 << 20), MS(1_500));
        // Never under the heartbeat period, whatever the timeout.
        assert_eq!(quiet_period(hb, MS(600), 4096), hb);
    }

    #[test]
    fn a_stalled_loop_asks_every_node_again_at_once() {
        let mut n = node();
        let t0 = n.last_seen;
        n.send_heartbeat(t0);
        n.last_seen = t0 + MS(1);
        assert!(!n.needs_heartbeat(t0 + MS(300), MS(500)));
        n.ask_again();
        assert!(n.needs_heartbeat(t0 + MS(300), MS(500)));
    }

    #[test]
    fn the_status_line_shows_the_nodes_last_clock_report() {
        let mut n = node();
        assert_eq!(
            n.status_line(),
            "3 n3 10.0.0.3 cpus=8 rtt_us=- clock=- clock_state=- clock_offset_ns=- clock_bound_ns=-\n"
        );
        n.clock = Some(ClockReport {
            source: ClockSource::Gangd,
            state: ClockState::Good,
            offset_ns: -1_234_567,
            rate_ppb: 20_000,
            error_bound_ns: 85_000,
            samples: 16,
            steps: 0,
        });
        assert_eq!(
            n.status_line(),
            "3 n3 10.0.0.3 cpus=8 rtt_us=- clock=gangd clock_state=good clock_offset_ns=-1234567 clock_bound_ns=85000\n"
        );
        n.clock = Some(ClockReport {
            source: ClockSource::Realtime,
            state: ClockState::Stepped,
            offset_ns: 0,
            rate_ppb: 0,
            error_bound_ns: 0,
            samples: 0,
            steps: 2,
        });
        assert!(n
            .status_line()
            .ends_with("clock=realtime clock_state=stepped clock_offset_ns=0 clock_bound_ns=0\n"));
    }
}
