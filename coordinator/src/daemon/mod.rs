//! gangd: the coordinator daemon (see coordinator/DESIGN.md).
//!
//! One thread owns everything: the allocator, the nodes, the jobs and the
//! slot switch in flight. The agent loop and the front ends' threads
//! (net/) and knob writes (knobs.rs) post events to it; it answers by
//! queueing messages on the connections' links, which never block it.
//!
//! This file holds the event loop: `run` starts the listeners and the knob
//! files, `run_loop` waits for an event or the next due time, `handle`
//! dispatches an event, and every pass ends with the deadlines and the
//! slot switch. The `impl Coordinator` is split by concern, one block per
//! child module:
//! - nodes.rs: nodes joining, answering, lost; sending to nodes.
//! - adoption.rs: jobs taken back from the nodes after a restart.
//! - jobs.rs: a job's life, from its placement to its last rank's exit.
//! - clients.rs: the front ends' requests (submit, kill, ps, attach...).
//! - pmi_jobs.rs: the MPI ranks' PMI relayed between a job's nodes.
//! - traces.rs: cluster traces collected for a front end.
//! - knobs.rs: knob writes and the status files.
//! - switching.rs: driving the slot switch (crate::switch, whose top
//!   comment walks one switch through every hop).
//!
//! A pass handles queued events for at most MAX_DRAIN, so the timers run
//! under a flood of events; a node's liveness is the time its frames were
//! read by the agent loop (net/), not handled here (refresh_last_seen).
//!
//! What costs O(nodes) is done once per batch, not once per event
//! (docs/scale.md): nodes that join wait (unseen by the rest of gangd)
//! until the loop has nothing else queued and the last batch's work (its
//! rebuild, not its fsync) is under a tenth of the time since, or the
//! oldest has waited JOIN_BATCH
//! (`join_flush_due`); then they are recorded in the state file (one
//! fsync), put in the allocator's cluster (one rebuild) and welcomed
//! together (nodes.rs, `flush_joins`). A lone join is welcomed at once;
//! a flood costs gangd at most about a tenth of its time in rebuilds; the status files are
//! rewritten at most once a second (`StatusClock`). A node is declared
//! silent only against heartbeats that went out while gangd kept up
//! (nodes.rs, `Node::silent`): after a pass that took seconds (a huge
//! placement), or while the agent loop waited for room in the event
//! queue (its reads of the nodes' answers waited with it), every node is
//! asked again instead of dropped.
//!
//! Known faults: one thread does everything, so a slow allocator call
//! delays the switch; the loop wakes at least every 50 ms. The status
//! files may be a second behind; a node's Welcome up to JOIN_BATCH late.
//! A queue that fills between every two heartbeats would keep every node
//! from being found silent (the queue holds 64 Ki events; at 4096 nodes
//! a switch posts 8 Ki). A node's loss still rebuilds the cluster
//! (O(nodes)).

pub mod adoption;
mod clients;
mod jobs;
pub mod knobs;
pub mod net;
mod nodes;
mod pmi_jobs;
pub mod state;
mod switching;
mod traces;

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use log::info;

use crate::alloc::{Allocator, Settings};
use crate::matrix::Cluster;
use crate::switch::rotation::Rotation;
use crate::switch::switch_log::SwitchLog;
use gang_wire::knobfs::KnobMount;
use gang_wire::proto::tls::ServerTls;
use gang_wire::proto::{JobId, JobLimits, NodeId};

use crate::knobs::ClusterKnobs;
use jobs::Job;
use knobs::{KnobFiles, KnobWrite, Status};
use net::{ConnId, Cred, Link, NetEvent};

use nodes::Node;
use traces::TraceRun;

/// The longest one pass of the event loop spends on queued events before
/// it runs its timers (heartbeats, deadlines, the slot switch).
const MAX_DRAIN: Duration = Duration::from_millis(50);

/// The status files are rewritten at most this often.
const STATUS_PERIOD: Duration = Duration::from_secs(1);

/// When the status files are rewritten: at once after a change if the
/// last write is a period old, else once at the end of the period, so an
/// operator sees every change within STATUS_PERIOD and a flood of changes
/// costs one write per period.
#[derive(Debug, Default)]
struct StatusClock {
    written: Option<Instant>,
    due: bool,
}

impl StatusClock {
    /// Something shown changed at `now`; true: write now.
    fn changed(&mut self, now: Instant) -> bool {
        self.due = true;
        self.tick(now)
    }

    /// The loop's timer at `now`; true: write now.
    fn tick(&mut self, now: Instant) -> bool {
        let ready = self
            .written
            .is_none_or(|w| now.saturating_duration_since(w) >= STATUS_PERIOD);
        if self.due && ready {
            self.due = false;
            self.written = Some(now);
            return true;
        }
        false
    }
}

/// How gangd is started.
pub struct Config {
    pub listen: SocketAddr,
    pub socket: PathBuf,
    pub knob_dir: Option<PathBuf>,
    /// gangd's certificate and the CA nodes are verified against.
    pub tls: Arc<ServerTls>,
    /// Jobs of users below this uid (root, system accounts) are refused;
    /// 0 allows every user.
    pub min_rank_uid: u32,
    /// The most a job may ask for with `gang run --max-pids/--max-memory`
    /// (None: no maximum); more is refused.
    pub max_job_limits: JobLimits,
    /// Jobs are refused until this many nodes have joined.
    pub min_nodes: usize,
    /// Where the next job id and the known nodes are kept (state.rs).
    pub state_dir: PathBuf,
    pub knobs: ClusterKnobs,
    pub heartbeat: Duration,
    /// A node silent this long is lost.
    pub node_timeout: Duration,
    /// One JSON line per cluster switch.
    pub switch_log: Option<PathBuf>,
    /// A timed line names every node up to this many reports
    /// (switch_log.rs).
    pub switch_log_nodes: usize,
    /// Event loop threads for the nodes' links (net/agents.rs).
    pub agent_loops: usize,
}

enum Event {
    Net(NetEvent),
    Knob(KnobWrite),
}

/// Events waiting for the coordinator thread, at most: two per node per
/// switch at 4096 nodes and more (an event is a few hundred bytes).
const EVENT_QUEUE: usize = 65536;

/// The longest an admitted node waits for the others joining with it: the
/// O(nodes) part of a join is done once per batch.
const JOIN_BATCH: Duration = Duration::from_millis(50);

/// Whether the nodes waiting to join are added now: the oldest has waited
/// JOIN_BATCH, or the loop is idle (`drained`) and the last batch took
/// under a tenth of the time since it ended.
fn join_flush_due(
    oldest_waited: Duration,
    drained: bool,
    since_last: Duration,
    last_cost: Duration,
) -> bool {
    oldest_waited >= JOIN_BATCH || (drained && since_last >= 10 * last_cost)
}

/// After a start, how long a front end's Attach waits for its job to be
/// adopted from the nodes as they rejoin, and how long submissions wait
/// for the nodes known before the restart (state.rs) to come back.
const ADOPTION_GRACE: Duration = Duration::from_secs(30);

pub struct Coordinator {
    cfg: Config,
    knobs: ClusterKnobs,
    shared_knobs: Arc<Mutex<ClusterKnobs>>,
    status: Arc<Mutex<Status>>,
    alloc: Allocator,
    nodes: BTreeMap<NodeId, Node>,
    /// Bumped when a node joins or is lost, or its clock changes state
    /// (Good or not): the timed planner reads every node's link again then
    /// (`ClusterView::links_epoch`), else only once a second.
    links_epoch: u64,
    conn_node: HashMap<ConnId, NodeId>,
    /// Node ids by name: a node that comes back keeps its id.
    node_ids: BTreeMap<String, NodeId>,
    /// Node names by id, the other way (`node_ids` gives a new name the
    /// next id, so ids are dense): a name is found in O(1), also for a node
    /// that is gone (a rank's exit at a job's end, a trace's late node).
    node_names: Vec<String>,
    clients: HashMap<ConnId, (Link, Cred)>,
    jobs: BTreeMap<JobId, Job>,
    /// Submissions so far; makes the allocator's job names unique (users
    /// may give two jobs the same name).
    submissions: u64,
    /// The slot clock and the switch in flight (crate::switch).
    rotation: Rotation,
    /// Where finished switches are written (--switch-log) and the last one
    /// kept for the status files.
    switch_log: SwitchLog,
    traces: BTreeMap<u64, TraceRun>,
    next_trace: u64,
    /// Attach requests for jobs not (yet) adopted after a restart.
    pending_attach: Vec<(ConnId, JobId)>,
    epoch: Instant,
    /// Job ids and known nodes, kept across restarts.
    state: state::State,
    /// Set once every node known before the start has rejoined (or the
    /// adoption grace has passed): jobs are accepted from then on.
    adoption_over: bool,
    status_clock: StatusClock,
    /// The links epoch and the time the nodes' status lines were last
    /// built (knobs.rs, `write_status`).
    node_lines: std::cell::Cell<Option<(u64, Instant)>>,
    /// Nodes admitted but not yet in `nodes`, the allocator's cluster nor
    /// welcomed, and since when the oldest waits (nodes.rs, `flush_joins`).
    joining: Vec<(ConnId, Node)>,
    joining_since: Option<Instant>,
    /// When the last batch of joins ended and what it cost.
    last_join_flush: (Instant, Duration),
    /// CLOCK_MONOTONIC ns when the agent loop last found the event queue
    /// full (0: never): it stopped reading the nodes until there was room.
    queue_full_ns: Arc<AtomicU64>,
}

fn settings(k: &ClusterKnobs) -> Settings {
    Settings {
        policy: k.policy,
        mpl_max: k.mpl_max as usize,
        fill: k.fill,
        backfill: false,
    }
}

/// Runs gangd until `shutdown` is set.
pub fn run(cfg: Config, shutdown: Arc<AtomicBool>) -> Result<()> {
    // Bounded: the agent loop and the front ends' threads wait (and their
    // peers with them) rather
    // than letting a flood of frames grow gangd's memory.
    let (tx, rx) = mpsc::sync_channel::<Event>(EVENT_QUEUE);
    let listener =
        TcpListener::bind(cfg.listen).with_context(|| format!("listening on {}", cfg.listen))?;
    let queue_full_ns = Arc::new(AtomicU64::new(0));
    let post = {
        let (tx, full) = (tx.clone(), queue_full_ns.clone());
        move |ev: NetEvent| {
            if let Err(mpsc::TrySendError::Full(ev)) = tx.try_send(Event::Net(ev)) {
                full.store(gang_wire::time::monotonic_ns(), Ordering::Relaxed);
                let _ = tx.send(ev);
            }
        }
    };
    net::serve_agents(listener, cfg.tls.clone(), post.clone(), cfg.agent_loops)?;
    net::serve_clients(&cfg.socket, post)?;
    let mut co = Coordinator::new(cfg)?;
    co.queue_full_ns = queue_full_ns;
    let (ktx, krx) = mpsc::channel::<KnobWrite>();
    let _mount = match &co.cfg.knob_dir {
        Some(dir) => {
            let files = KnobFiles {
                current: co.shared_knobs.clone(),
                status: co.status.clone(),
                writes: Mutex::new(ktx),
            };
            let m = KnobMount::mount(dir, Arc::new(files))?;
            let tx = tx.clone();
            std::thread::Builder::new()
                .name("knob-writes".into())
                .spawn(move || {
                    for w in krx {
                        if tx.send(Event::Knob(w)).is_err() {
                            break;
                        }
                    }
                })?;
            Some(m)
        }
        None => None,
    };
    info!(
        "gangd listening on {} (agents) and {} (front ends); waiting for {} node(s)",
        co.cfg.listen,
        co.cfg.socket.display(),
        co.cfg.min_nodes
    );
    co.run_loop(&rx, &shutdown);
    info!("gangd stopping");
    let _ = std::fs::remove_file(&co.cfg.socket);
    Ok(())
}

impl Coordinator {
    fn new(cfg: Config) -> Result<Self> {
        let knobs = cfg.knobs;
        let alloc = Allocator::new(
            Cluster::new(vec![]).expect("an empty cluster is valid"),
            settings(&knobs),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let state = state::State::open(&cfg.state_dir)?;
        let mut alloc = alloc;
        alloc.skip_ids_below(state.data.next_job);
        info!(
            "state {}: next job id {}, {} known node(s)",
            cfg.state_dir.display(),
            state.data.next_job,
            state.data.nodes.len()
        );
        Ok(Self {
            adoption_over: state.data.nodes.is_empty(),
            state,
            knobs,
            shared_knobs: Arc::new(Mutex::new(knobs)),
            status: Arc::new(Mutex::new(Status::default())),
            alloc,
            nodes: BTreeMap::new(),
            conn_node: HashMap::new(),
            node_ids: BTreeMap::new(),
            node_names: Vec::new(),
            clients: HashMap::new(),
            jobs: BTreeMap::new(),
            submissions: 0,
            rotation: {
                // The cluster clock is gangd's CLOCK_MONOTONIC; `epoch`
                // below is read right after, so the two agree within µs.
                let mut r = Rotation::new();
                r.set_cluster_epoch_ns(gang_wire::time::monotonic_ns());
                r
            },
            switch_log: SwitchLog::open(cfg.switch_log.as_deref(), cfg.switch_log_nodes)?,
            traces: BTreeMap::new(),
            next_trace: 1,
            pending_attach: Vec::new(),
            epoch: Instant::now(),
            status_clock: StatusClock::default(),
            node_lines: std::cell::Cell::new(None),
            joining: Vec::new(),
            joining_since: None,
            links_epoch: 0,
            last_join_flush: (Instant::now(), Duration::ZERO),
            queue_full_ns: Arc::new(AtomicU64::new(0)),
            cfg,
        })
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn run_loop(&mut self, rx: &Receiver<Event>, shutdown: &AtomicBool) {
        let mut next_heartbeat = Instant::now();
        let mut last_timers = Instant::now();
        let mut last_check_ns = 0;
        while !shutdown.load(Ordering::Relaxed) {
            let wait = self.rotation.next_wakeup(self.knobs.slot_ms, self.now_us());
            let wait = Duration::from_micros(wait).min(Duration::from_millis(50));
            match rx.recv_timeout(wait) {
                Ok(ev) => self.handle(ev),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            // Whatever else is queued, but not for ever: under a flood of
            // events (thousands of nodes joining) the timers below must
            // still run, or no heartbeat goes out and every node looks
            // silent.
            let pass_end = Instant::now() + MAX_DRAIN;
            let mut drained = false;
            while Instant::now() < pass_end {
                match rx.try_recv() {
                    Ok(ev) => self.handle(ev),
                    Err(_) => {
                        drained = true;
                        break;
                    }
                }
            }
            let now = Instant::now();
            if let Some(since) = self.joining_since {
                let (last_end, last_cost) = self.last_join_flush;
                let due = join_flush_due(
                    now.saturating_duration_since(since),
                    drained,
                    now.saturating_duration_since(last_end),
                    last_cost,
                );
                if due {
                    let cost = self.flush_joins();
                    self.last_join_flush = (Instant::now(), cost);
                }
            }
            // The loop did not get here for two heartbeats (one event took
            // that long): the heartbeats it owed never went out.
            let loop_stalled = now.saturating_duration_since(last_timers) > 2 * self.cfg.heartbeat;
            last_timers = now;
            if now >= next_heartbeat || loop_stalled {
                // Or the agent loop waited for room in the queue since the
                // last check: the nodes' answers waited unread.
                let full_ns = self.queue_full_ns.load(Ordering::Relaxed);
                let stalled = loop_stalled || full_ns > last_check_ns;
                last_check_ns = gang_wire::time::monotonic_ns();
                self.refresh_last_seen();
                self.heartbeats(stalled);
                next_heartbeat = Instant::now() + self.cfg.heartbeat;
            }
            self.check_deadlines();
            self.drive_switch();
            if self.status_clock.tick(Instant::now()) {
                self.write_status();
            }
        }
        self.write_status();
    }

    /// A node is heard when the agent loop reads a frame, not when this
    /// loop gets to it: a frame still queued behind other events counts
    /// (net/mod.rs, `Link::heard_ns`).
    fn refresh_last_seen(&mut self) {
        let (now, now_ns) = (Instant::now(), gang_wire::time::monotonic_ns());
        for n in self.nodes.values_mut() {
            let heard = n.link.heard_ns();
            if heard == 0 {
                continue;
            }
            let ago = Duration::from_nanos(now_ns.saturating_sub(heard));
            if let Some(at) = now.checked_sub(ago) {
                n.last_seen = n.last_seen.max(at);
            }
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Knob(w) => {
                let verdict = self.set_knobs(w.knobs);
                let _ = w.reply.send(verdict);
            }
            Event::Net(NetEvent::AgentJoined {
                conn,
                link,
                addr,
                local,
                hello,
            }) => self.node_joined(conn, link, addr, local, hello),
            Event::Net(NetEvent::Agents(frames)) => {
                for (conn, msg) in frames {
                    if let Some(&node) = self.conn_node.get(&conn) {
                        self.on_agent_message(node, msg);
                    }
                }
            }
            Event::Net(NetEvent::AgentGone { conn, why }) => {
                if let Some(node) = self.conn_node.remove(&conn) {
                    self.node_lost(node, &why);
                } else {
                    self.joining.retain(|(c, _)| *c != conn);
                }
            }
            Event::Net(NetEvent::ClientJoined { conn, link, cred }) => {
                self.clients.insert(conn, (link, cred));
            }
            Event::Net(NetEvent::Client { conn, msg }) => self.on_client_message(conn, msg),
            Event::Net(NetEvent::ClientGone { conn }) => self.client_gone(conn),
        }
    }

    fn check_deadlines(&mut self) {
        self.check_adoption();
        if !self.pending_attach.is_empty() {
            self.serve_pending_attach();
        }
        self.give_up_overdue_kills();
        self.expire_traces();
    }
}

/// The user's name for logs and messages, or the number.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid {uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_are_added_at_once_when_idle_and_batched_under_a_flood() {
        let ms = Duration::from_millis;
        // Idle, the last batch long ago: at once.
        assert!(join_flush_due(ms(0), true, ms(1000), ms(3)));
        // Events still queued: wait for the others...
        assert!(!join_flush_due(ms(10), false, ms(1000), ms(3)));
        // ...but never past JOIN_BATCH.
        assert!(join_flush_due(JOIN_BATCH, false, ms(0), ms(3)));
        // Idle, but the last batch (3 ms) ended 20 ms ago: rebuilds would
        // take more than a tenth of the loop, so wait.
        assert!(!join_flush_due(ms(1), true, ms(20), ms(3)));
        assert!(join_flush_due(ms(1), true, ms(30), ms(3)));
    }

    #[test]
    fn the_status_is_written_at_once_then_at_most_once_a_period() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut c = StatusClock::default();
        assert!(!c.tick(at(0)), "nothing changed, nothing to write");
        assert!(c.changed(at(0)), "the first change is written at once");
        // A flood of changes within the period: none written...
        for ms in 1..1000 {
            assert!(!c.changed(at(ms)));
            assert!(!c.tick(at(ms)));
        }
        // ...until the period is over: one write for all of them.
        assert!(c.tick(at(1000)));
        assert!(!c.tick(at(1001)), "written: nothing due");
        assert!(!c.tick(at(5000)));
        // A change long after the last write is written at once again.
        assert!(c.changed(at(5000)));
    }
}
