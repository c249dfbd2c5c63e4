//! gangd: the coordinator daemon (see coordinator/DESIGN.md).
//!
//! One thread owns everything: the allocator, the nodes, the jobs and the
//! slot switch in flight. Connection threads (net.rs) and knob writes
//! (knobs.rs) post events to it; it answers by queueing messages on the
//! connections' outlets, which never block it.

pub mod adoption;
mod jobs;
pub mod knobs;
pub mod net;
mod nodes;
mod pmi_jobs;
mod rotation;
pub mod state;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use log::{info, warn};

use crate::alloc::{AllocError, Allocator, JobSpec, JobState as AllocState, Settings};
use gang_wire::knobfs::{KnobError, KnobMount};
use crate::matrix::{self, Cluster};
use gang_wire::proto::tls::ServerTls;
use gang_wire::proto::{
    Bytes, ExitStatus, FromAgent, FromClient, JobId, JobInfo, JobLimits, JobState, NodeId,
    RankFailure, ToAgent, ToClient,
};

use jobs::{Ending, Job, Phase};
use knobs::{ClusterKnobs, KnobFiles, KnobWrite, Status};
use net::{ConnId, Cred, NetEvent, Outlet};
use nodes::Node;
use rotation::Rotation;

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
}

enum Event {
    Net(NetEvent),
    Knob(KnobWrite),
}

/// Events waiting for the coordinator thread, at most.
const EVENT_QUEUE: usize = 4096;

/// After a start, how long a front end's Attach waits for its job to be
/// adopted from the nodes as they rejoin, and how long submissions wait
/// for the nodes known before the restart (state.rs) to come back.
const ADOPTION_GRACE: Duration = Duration::from_secs(30);

/// A SIGKILL'd rank that never reports is given up on after this long.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// A trace being collected for a front end.
struct TraceRun {
    client: ConnId,
    waiting: BTreeSet<NodeId>,
    errors: Vec<String>,
    deadline: Instant,
}

pub struct Coordinator {
    cfg: Config,
    knobs: ClusterKnobs,
    /// Knob values the nodes have not been sent yet (next slot boundary).
    knobs_pending: bool,
    shared_knobs: Arc<Mutex<ClusterKnobs>>,
    status: Arc<Mutex<Status>>,
    alloc: Allocator,
    nodes: BTreeMap<NodeId, Node>,
    conn_node: HashMap<ConnId, NodeId>,
    /// Node ids by name: a node that comes back keeps its id.
    node_ids: BTreeMap<String, NodeId>,
    clients: HashMap<ConnId, (Outlet, Cred)>,
    jobs: BTreeMap<JobId, Job>,
    /// Submissions so far; makes the allocator's job names unique (users
    /// may give two jobs the same name).
    submissions: u64,
    rotation: Rotation,
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
}

fn aid(id: JobId) -> matrix::JobId {
    matrix::JobId(id.0)
}

fn pid(id: matrix::JobId) -> JobId {
    JobId(id.0)
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
    // Bounded: connection threads wait (and their peers with them) rather
    // than letting a flood of frames grow gangd's memory.
    let (tx, rx) = mpsc::sync_channel::<Event>(EVENT_QUEUE);
    let listener =
        TcpListener::bind(cfg.listen).with_context(|| format!("listening on {}", cfg.listen))?;
    let post = {
        let tx = tx.clone();
        move |ev: NetEvent| {
            let _ = tx.send(Event::Net(ev));
        }
    };
    net::serve_agents(listener, cfg.tls.clone(), post.clone())?;
    net::serve_clients(&cfg.socket, post)?;
    let mut co = Coordinator::new(cfg)?;
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
            knobs_pending: false,
            shared_knobs: Arc::new(Mutex::new(knobs)),
            status: Arc::new(Mutex::new(Status::default())),
            alloc,
            nodes: BTreeMap::new(),
            conn_node: HashMap::new(),
            node_ids: BTreeMap::new(),
            clients: HashMap::new(),
            jobs: BTreeMap::new(),
            submissions: 0,
            rotation: Rotation::new(cfg.switch_log.clone())?,
            traces: BTreeMap::new(),
            next_trace: 1,
            pending_attach: Vec::new(),
            epoch: Instant::now(),
            cfg,
        })
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn run_loop(&mut self, rx: &Receiver<Event>, shutdown: &AtomicBool) {
        let mut next_heartbeat = Instant::now();
        while !shutdown.load(Ordering::Relaxed) {
            let wait = self.rotation.next_wakeup(self.knobs.slot_ms, self.now_us());
            let wait = Duration::from_micros(wait).min(Duration::from_millis(50));
            match rx.recv_timeout(wait) {
                Ok(ev) => self.handle(ev),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            while let Ok(ev) = rx.try_recv() {
                self.handle(ev);
            }
            if Instant::now() >= next_heartbeat {
                self.heartbeats();
                next_heartbeat = Instant::now() + self.cfg.heartbeat;
            }
            self.check_deadlines();
            self.drive_rotation();
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
                outlet,
                addr,
                local,
                hello,
            }) => self.node_joined(conn, outlet, addr, local, hello),
            Event::Net(NetEvent::Agent { conn, msg }) => {
                if let Some(&node) = self.conn_node.get(&conn) {
                    self.on_agent_message(node, msg);
                }
            }
            Event::Net(NetEvent::AgentGone { conn, why }) => {
                if let Some(node) = self.conn_node.remove(&conn) {
                    self.node_lost(node, &why);
                }
            }
            Event::Net(NetEvent::ClientJoined { conn, outlet, cred }) => {
                self.clients.insert(conn, (outlet, cred));
            }
            Event::Net(NetEvent::Client { conn, msg }) => self.on_client_message(conn, msg),
            Event::Net(NetEvent::ClientGone { conn }) => self.client_gone(conn),
        }
    }

    // ---- knobs ----

    fn set_knobs(&mut self, k: ClusterKnobs) -> Result<(), KnobError> {
        let s = settings(&k);
        if s != self.alloc.settings() {
            self.alloc
                .set_settings(s)
                .map_err(|e| KnobError::Invalid(e.to_string()))?;
            self.placement_changed();
        }
        self.knobs = k;
        *self.shared_knobs.lock().unwrap() = k;
        self.knobs_pending = true;
        Ok(())
    }

    fn knobs_msg(&self) -> ToAgent {
        ToAgent::Knobs {
            slot_ms: self.knobs.slot_ms,
            drain_timeout_ms: self.knobs.drain_timeout_ms,
            barrier: self.knobs.barrier,
            fill: self.knobs.fill,
        }
    }

    fn publish_status(&self) {
        let mut s = self.status.lock().unwrap();
        s.nodes = self
            .nodes
            .values()
            .map(|n| {
                let rtt = n.min_rtt_us().map_or("-".to_string(), |r| r.to_string());
                format!(
                    "{} {} {} cpus={} rtt_us={rtt}\n",
                    n.id.0, n.name, n.addr, n.nr_cpus
                )
            })
            .collect();
        s.jobs = self.jobs.len();
        s.switches = self.rotation.switches;
        s.early_switches = self.rotation.early_switches;
        s.drain_timeouts = self.rotation.drain_timeouts;
        s.missed_switches = self.rotation.missed;
        s.last_switch = self.rotation.last_record.clone();
    }

    // ---- nodes ----

    fn node_joined(
        &mut self,
        conn: ConnId,
        outlet: Outlet,
        addr: std::net::IpAddr,
        local: std::net::IpAddr,
        hello: net::Hello,
    ) {
        let name = hello.node.clone();
        if self.nodes.values().any(|n| n.name == name) {
            let reason = format!("a node named {name} is already connected");
            warn!("refusing agent: {reason}");
            outlet.send(&ToAgent::Refused { reason });
            outlet.close();
            return;
        }
        let housekeeping = match matrix::parse_cpus(&hello.housekeeping_cpus) {
            Ok(h) => h,
            Err(e) => {
                outlet.send(&ToAgent::Refused { reason: e.clone() });
                outlet.close();
                warn!("refusing node {name}: {e}");
                return;
            }
        };
        let next = NodeId(self.node_ids.len() as u32);
        let id = *self.node_ids.entry(name.clone()).or_insert(next);
        let mut node = Node::new(id, name.clone(), outlet, addr, hello.nr_cpus, housekeeping);
        node.gangd_addr = local;
        if !self.rebuild_cluster(Some(&node), None) {
            node.outlet.send(&ToAgent::Refused {
                reason: format!("node {name} does not fit the matrix"),
            });
            node.outlet.close();
            return;
        }
        // Recorded before the node hears it is in: a restart right after
        // still waits for it (and its jobs).
        if let Err(e) = self.state.add_node(&name) {
            warn!("cannot record node {name} in the state directory: {e}");
        }
        node.outlet.send(&ToAgent::Welcome { node_id: id });
        node.outlet.send(&self.knobs_msg());
        info!(
            "node {name} joined as node {} ({addr}, {} CPUs, agent {})",
            id.0, hello.nr_cpus, hello.agent_version
        );
        self.conn_node.insert(conn, id);
        self.nodes.insert(id, node);
        for lj in &hello.jobs {
            self.adopt(id, &name, lj, &hello.schedule);
        }
        self.check_adoption();
        self.placement_changed();
        self.publish_status();
    }

    /// A job a previous gangd started, reported live by a node that joins:
    /// it is taken back as it is (same id, same CPUs, ranks untouched), so
    /// a gangd restart kills nothing. Its front end may `Attach` again.
    fn adopt(
        &mut self,
        node: NodeId,
        node_name: &str,
        lj: &gang_wire::proto::LiveJob,
        schedule: &[Vec<gang_wire::proto::Placement>],
    ) {
        if lj.uid < self.cfg.min_rank_uid {
            warn!(
                "node {node_name}: not adopting its job {} of uid {} (below --min-rank-uid {})",
                lj.job, lj.uid, self.cfg.min_rank_uid
            );
            return;
        }
        if let Some(known) = self.jobs.get(&lj.job) {
            if (known.cred.uid, known.cred.gid) != (lj.uid, lj.gid) || known.ranks != lj.size {
                // Never merge two users' jobs: the ids were reused (a
                // state directory lost) or the node lies.
                warn!(
                    "node {node_name}: not adopting its job {} (uid {}, {} ranks): job {} here \
                     is uid {}'s with {} ranks; its ranks there keep running unscheduled",
                    lj.job, lj.uid, lj.size, lj.job, known.cred.uid, known.ranks
                );
                return;
            }
        }
        let plan = match adoption::plan(lj, schedule) {
            Ok(p) => p,
            Err(e) => {
                warn!("node {node_name}: {e}; not adopted");
                return;
            }
        };
        let spec = JobSpec {
            name: format!("{}#adopted{}", lj.name, lj.job.0),
            ranks: lj.size,
            per_node: None,
        };
        if let Some((slot, cpus)) = &plan.placed {
            let cells: Vec<_> = cpus
                .iter()
                .map(|&cpu| matrix::Cell { node: node.0, cpu })
                .collect();
            if let Err(e) = self.alloc.adopt(aid(lj.job), spec, *slot, &cells) {
                warn!("node {node_name}: {e}; its ranks keep running unscheduled");
            }
        }
        let job = self.jobs.entry(lj.job).or_insert_with(|| Job {
            accepted: true,
            phase: Phase::Started,
            rank_node: vec![NodeId(u32::MAX); lj.size as usize],
            ..Job::new(
                lj.name.clone(),
                Cred {
                    uid: lj.uid,
                    gid: lj.gid,
                    pid: 0,
                },
                lj.size,
                vec![],
                vec![],
                String::new(),
            )
        });
        for &r in &plan.ranks {
            if let Some(slot) = job.rank_node.get_mut(r as usize) {
                *slot = node;
                job.live.insert(r);
            }
        }
        if let Err(e) = self.state.reserve_ids_below(self.alloc.next_id()) {
            warn!("cannot record job ids in the state directory: {e}");
        }
        info!(
            "job {} ({}) adopted: ranks {:?} live on {node_name}",
            lj.job, lj.name, lj.ranks
        );
    }

    /// Rebuilds the allocator's cluster from the live nodes, plus `add`,
    /// minus `remove`. Returns false if the new cluster is invalid.
    fn rebuild_cluster(&mut self, add: Option<&Node>, remove: Option<NodeId>) -> bool {
        let specs = self
            .nodes
            .values()
            .filter(|n| Some(n.id) != remove)
            .chain(add)
            .map(|n| matrix::NodeSpec {
                id: n.id.0,
                name: n.name.clone(),
                nr_cpus: n.nr_cpus,
                housekeeping: n.housekeeping.clone(),
            })
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

    fn node_lost(&mut self, id: NodeId, why: &str) {
        let Some(node) = self.nodes.remove(&id) else {
            return;
        };
        node.outlet.close();
        warn!("node {} lost: {why}", node.name);
        let now = self.now_us();
        self.rotation.node_lost(id, now);
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
        for t in self.traces.values_mut() {
            if t.waiting.remove(&id) {
                t.errors
                    .push(format!("{}: lost during the trace", node.name));
            }
        }
        self.rebuild_cluster(None, None);
        self.placement_changed();
        self.publish_status();
    }

    /// Adoption is over once every node known before the start is back,
    /// or after ADOPTION_GRACE: a node rejoining later still has its jobs
    /// adopted, under ids no new job can have been given.
    fn check_adoption(&mut self) {
        if self.adoption_over {
            return;
        }
        let missing: Vec<&String> = self
            .state
            .data
            .nodes
            .iter()
            .filter(|n| !self.nodes.values().any(|m| &&m.name == n))
            .collect();
        if missing.is_empty() || self.epoch.elapsed() >= ADOPTION_GRACE {
            self.adoption_over = true;
            if missing.is_empty() {
                info!("adoption over: every known node is back; jobs are accepted");
            } else {
                warn!(
                    "adoption over after {} s without {} node(s) ({}); jobs are accepted",
                    ADOPTION_GRACE.as_secs(),
                    missing.len(),
                    missing
                        .iter()
                        .take(8)
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
    }

    fn heartbeats(&mut self) {
        let timeout = self.cfg.node_timeout;
        let silent: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|n| n.last_seen.elapsed() > timeout)
            .map(|n| n.id)
            .collect();
        for id in silent {
            self.node_lost(
                id,
                &format!("silent for more than {} ms", timeout.as_millis()),
            );
        }
        for n in self.nodes.values_mut() {
            n.send_heartbeat();
        }
    }

    fn on_agent_message(&mut self, node: NodeId, msg: FromAgent) {
        let now = self.now_us();
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        n.last_seen = Instant::now();
        let name = n.name.clone();
        match msg {
            FromAgent::Heartbeat { seq, mono_ns } => n.heartbeat_answer(seq, mono_ns),
            FromAgent::Frozen { .. } | FromAgent::Running { .. } => {
                self.rotation.on_agent(node, &msg, now, &self.nodes);
            }
            FromAgent::Yielded { gen, job } => self.rotation.on_yielded(gen, job, node),
            FromAgent::Prepared { job, error } => self.prepared(job, node, error),
            FromAgent::RankStarted { job, rank, pid } => {
                log::debug!("job {job} rank {rank} started on {name} as pid {pid}");
            }
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
            FromAgent::Error { message } => warn!("node {name}: {message}"),
            FromAgent::Hello { .. } => warn!("node {name} sent a second hello; ignored"),
            FromAgent::PmiBarrierIn { .. }
            | FromAgent::PmiFinalized { .. }
            | FromAgent::PmiFailed { .. }
            | FromAgent::PmiPuts { .. } => self.on_pmi(node, msg),
        }
    }

    /// A node's PMI relay: answered to the job's nodes; a failure ends the
    /// job like a rank failure (the other ranks would wait for it).
    fn on_pmi(&mut self, node: NodeId, msg: FromAgent) {
        let job = pmi_jobs::job_of(&msg);
        let pmi = job
            .and_then(|id| self.jobs.get_mut(&id))
            .and_then(|j| j.pmi.as_mut());
        let out = pmi_jobs::relay(pmi, node, msg);
        for (n, m) in out.send {
            if let Some(n) = self.nodes.get(&n) {
                n.outlet.send(&m);
            }
        }
        if let (Some(id), Some((rank, code, why))) = (job, out.failed) {
            self.pmi_failed(id, rank, code, why);
        }
    }

    // ---- front ends ----

    fn reply(&self, conn: ConnId, msg: ToClient) {
        if let Some((o, _)) = self.clients.get(&conn) {
            o.send(&msg);
        }
    }

    fn on_client_message(&mut self, conn: ConnId, msg: FromClient) {
        let Some(&(_, cred)) = self.clients.get(&conn) else {
            return;
        };
        match msg {
            FromClient::Submit {
                name,
                ranks,
                per_node,
                argv,
                env,
                cwd,
                label_output,
                ship_executable,
                limits,
            } => {
                let _ = label_output; // the front end labels lines itself
                let r = self.submit(
                    conn,
                    cred,
                    name,
                    ranks,
                    per_node,
                    argv,
                    env,
                    cwd,
                    ship_executable,
                    limits,
                );
                if let Err(reason) = r {
                    info!("submission by uid {} refused: {reason}", cred.uid);
                    self.reply(conn, ToClient::Refused { reason });
                }
            }
            FromClient::Kill { job } => self.on_job_request(conn, cred, job, |co, job, who| {
                co.end_by_request(job, who);
                Ok(())
            }),
            FromClient::Signal { job, signal } => {
                self.on_job_request(conn, cred, job, move |co, job, _| {
                    if !(1..=64).contains(&signal) {
                        return Err(format!("{signal} is not a signal number"));
                    }
                    co.kill_job(job, signal);
                    Ok(())
                })
            }
            FromClient::Suspend { job } => {
                self.on_job_request(conn, cred, job, |co, job, _| co.suspend(job, true))
            }
            FromClient::Resume { job } => {
                self.on_job_request(conn, cred, job, |co, job, _| co.suspend(job, false))
            }
            FromClient::Attach { job }
                if !self.jobs.contains_key(&job) && self.epoch.elapsed() < ADOPTION_GRACE =>
            {
                // Just restarted: the job may come back with its nodes.
                self.pending_attach.push((conn, job));
            }
            FromClient::Attach { job } => self.on_job_request(conn, cred, job, |co, job, _| {
                if let Some(j) = co.jobs.get_mut(&job) {
                    j.client = Some(conn);
                }
                Ok(())
            }),
            FromClient::Ps => {
                let jobs = self.ps();
                self.reply(conn, ToClient::PsReply { jobs });
            }
            FromClient::Matrix => {
                let text = self.alloc.render();
                self.reply(conn, ToClient::MatrixReply { text });
            }
            FromClient::Trace { ms } => self.start_trace(conn, cred, ms),
        }
    }

    /// A request about one job, allowed to its owner and root only.
    fn on_job_request(
        &mut self,
        conn: ConnId,
        cred: Cred,
        job: JobId,
        act: impl FnOnce(&mut Self, JobId, String) -> Result<(), String>,
    ) {
        let owner = match self.jobs.get(&job) {
            None => {
                return self.reply(
                    conn,
                    ToClient::Refused {
                        reason: format!("no job {job}"),
                    },
                )
            }
            Some(j) => j.cred.uid,
        };
        if cred.uid != 0 && cred.uid != owner {
            warn!("uid {} may not act on job {job} of uid {owner}", cred.uid);
            return self.reply(
                conn,
                ToClient::Refused {
                    reason: format!("job {job} belongs to another user"),
                },
            );
        }
        match act(self, job, user_name(cred.uid)) {
            Ok(()) => self.reply(conn, ToClient::Done),
            Err(reason) => self.reply(conn, ToClient::Refused { reason }),
        }
    }

    fn client_gone(&mut self, conn: ConnId) {
        self.clients.remove(&conn);
        let followed: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.client == Some(conn))
            .map(|(&k, _)| k)
            .collect();
        for job in followed {
            if let Some(j) = self.jobs.get_mut(&job) {
                j.client = None;
            }
            info!("the front end of job {job} went away: killing the job");
            self.end_by_request(job, "its front end exiting".into());
        }
        self.traces.retain(|_, t| t.client != conn);
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        conn: ConnId,
        cred: Cred,
        name: String,
        ranks: u32,
        per_node: Option<u32>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        ship_executable: bool,
        limits: JobLimits,
    ) -> Result<(), String> {
        if let Some(why) = limits.beyond(&self.cfg.max_job_limits) {
            return Err(why);
        }
        if ship_executable {
            return Err("shipping the executable is not supported: the program must exist at the same path on every node".into());
        }
        if argv.is_empty() || argv[0].is_empty() {
            return Err("no program given".into());
        }
        if cred.uid < self.cfg.min_rank_uid {
            return Err(format!(
                "uid {} may not run jobs: ranks run as users from uid {} up (gangd --min-rank-uid)",
                cred.uid, self.cfg.min_rank_uid
            ));
        }
        if self.nodes.len() < self.cfg.min_nodes {
            return Err(format!(
                "the cluster is not up yet: {} of {} nodes have joined",
                self.nodes.len(),
                self.cfg.min_nodes
            ));
        }
        if !self.adoption_over {
            return Err(format!(
                "gangd has just restarted and is taking back the running jobs from its nodes; \
                 jobs are accepted within {} s",
                ADOPTION_GRACE
                    .saturating_sub(self.epoch.elapsed())
                    .as_secs()
                    + 1
            ));
        }
        // Recorded before it is handed out: an id is never given twice,
        // even across restarts (state.rs).
        self.state
            .reserve_ids_below(self.alloc.next_id() + 1)
            .map_err(|e| format!("gangd cannot record job ids ({e}); no job is accepted"))?;
        self.submissions += 1;
        let internal = format!("{name}#{}", self.submissions);
        let id = self
            .alloc
            .submit(JobSpec {
                name: internal.clone(),
                ranks,
                per_node,
            })
            .map_err(|e| match e {
                AllocError::BadName { .. } => format!(
                    "bad job name {name:?}: {}",
                    e.to_string().split(": ").last().unwrap_or("")
                ),
                e => e
                    .to_string()
                    .replace(&format!("{internal:?}"), &format!("{name:?}"))
                    .replace(&internal, &name),
            })?;
        let id = pid(id);
        info!(
            "job {id} ({name}, {ranks} ranks) submitted by uid {}",
            cred.uid
        );
        self.jobs.insert(
            id,
            Job {
                client: Some(conn),
                limits,
                ..Job::new(name, cred, ranks, argv, env, cwd)
            },
        );
        if self
            .alloc
            .job(aid(id))
            .is_some_and(|v| v.state == AllocState::Queued)
        {
            // Accepted now; it starts when room appears.
            self.jobs.get_mut(&id).unwrap().accepted = true;
            self.reply(conn, ToClient::Accepted { job: id });
        }
        self.placement_changed();
        self.publish_status();
        Ok(())
    }

    fn ps(&self) -> Vec<JobInfo> {
        self.jobs
            .iter()
            .map(|(&id, j)| {
                let view = self.alloc.job(aid(id));
                let state = match view.as_ref().map(|v| v.state) {
                    Some(AllocState::Suspended) => JobState::Suspended,
                    Some(AllocState::Running) if j.phase == Phase::Started => JobState::Running,
                    _ => JobState::Queued,
                };
                let nodes = j
                    .nodes()
                    .iter()
                    .filter_map(|n| self.node_name(*n))
                    .collect();
                JobInfo {
                    job: id,
                    name: j.name.clone(),
                    uid: j.cred.uid,
                    ranks: j.ranks,
                    state,
                    slot: view.and_then(|v| v.slot).map(|s| s as u32),
                    nodes,
                    elapsed_ms: j.submitted.elapsed().as_millis() as u64,
                }
            })
            .collect()
    }

    fn node_name(&self, id: NodeId) -> Option<String> {
        self.node_ids
            .iter()
            .find(|(_, &v)| v == id)
            .map(|(k, _)| k.clone())
    }

    // ---- job life ----

    /// After any change of the allocator: start jobs that just got a place,
    /// and mark the node tables for an update at the next boundary.
    fn placement_changed(&mut self) {
        let placed: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(&id, j)| {
                j.phase == Phase::Queued
                    && self
                        .alloc
                        .job(aid(id))
                        .is_some_and(|v| v.state != AllocState::Queued)
            })
            .map(|(&k, _)| k)
            .collect();
        for job in placed {
            self.prepare(job);
        }
        self.rotation.schedule_dirty = true;
    }

    fn prepare(&mut self, id: JobId) {
        let Some(view) = self.alloc.job(aid(id)) else {
            return;
        };
        let rank_node: Vec<NodeId> = view.rank_cells.iter().map(|c| NodeId(c.node)).collect();
        let j = self.jobs.get_mut(&id).expect("job of the table");
        j.rank_node = rank_node;
        let waiting: BTreeSet<NodeId> = j.rank_node.iter().copied().collect();
        for n in &waiting {
            if let Some(node) = self.nodes.get(n) {
                node.outlet.send(&ToAgent::Prepare {
                    job: id,
                    argv: j.argv.clone(),
                    env: j.env.clone(),
                    cwd: j.cwd.clone(),
                    uid: j.cred.uid,
                    gid: j.cred.gid,
                });
            }
        }
        j.phase = Phase::Preparing { waiting };
    }

    fn prepared(&mut self, id: JobId, node: NodeId, error: Option<String>) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        let Phase::Preparing { waiting } = &mut j.phase else {
            return;
        };
        if let Some(reason) = error {
            info!("job {id} cannot start: {reason}");
            let client = j.client;
            let accepted = j.accepted;
            self.jobs.remove(&id);
            let _ = self.alloc.finish(aid(id));
            if let Some(conn) = client {
                if accepted {
                    self.reply(
                        conn,
                        ToClient::JobEnded {
                            job: id,
                            exit_code: 127,
                            summary: reason,
                            failure: None,
                        },
                    );
                } else {
                    self.reply(conn, ToClient::Refused { reason });
                }
            }
            self.placement_changed();
            self.publish_status();
            return;
        }
        waiting.remove(&node);
        if waiting.is_empty() {
            self.spawn(id);
        }
    }

    fn spawn(&mut self, id: JobId) {
        let j = self.jobs.get_mut(&id).expect("job of the table");
        let mut peers = Vec::with_capacity(j.rank_node.len());
        for &n in &j.rank_node {
            let node = self
                .nodes
                .get_mut(&n)
                .expect("a preparing job's nodes are live");
            let port = node.next_port();
            peers.push(format!("{}:{}", node.addr, port));
        }
        let pmi = gang_wire::pmi::ClusterPmi::new(id, j.rank_node.clone());
        for a in pmi.start() {
            if let gang_wire::pmi::cluster::Action::ToNode(n, m) = a {
                self.nodes[&n].outlet.send(&m);
            }
        }
        j.pmi = Some(pmi);
        for (rank, &n) in j.rank_node.iter().enumerate() {
            let env = j.env.clone();
            self.nodes[&n].outlet.send(&ToAgent::SpawnRank {
                job: id,
                name: j.name.clone(),
                rank: rank as u32,
                size: j.ranks,
                argv: j.argv.clone(),
                env,
                cwd: j.cwd.clone(),
                uid: j.cred.uid,
                gid: j.cred.gid,
                peers: peers.clone(),
                limits: j.limits,
            });
        }
        j.live = (0..j.ranks).collect();
        j.phase = Phase::Started;
        info!("job {id} ({}) started: {} ranks", j.name, j.ranks);
        if !j.accepted {
            j.accepted = true;
            if let Some(conn) = j.client {
                self.reply(conn, ToClient::Accepted { job: id });
            }
        }
        self.rotation.schedule_dirty = true;
    }

    fn rank_exited(&mut self, id: JobId, rank: u32, node: NodeId, status: ExitStatus) {
        let node_name = self.node_name(node).unwrap_or_default();
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        if !j.live.remove(&rank) {
            return;
        }
        j.exits.insert(rank, status);
        if jobs::is_failure(status) && j.ending.is_none() {
            info!("job {id}: rank {rank} on {node_name} {status}");
            j.failure = Some(RankFailure {
                rank,
                node: node_name,
                status,
            });
            j.ending = Some(Ending::Failed);
            self.kill_job(id, libc::SIGKILL);
        }
        self.maybe_end(id);
    }

    /// Kill, Ctrl-C, or the front end gone.
    fn end_by_request(&mut self, id: JobId, by: String) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        if j.ending.is_none() {
            j.ending = Some(Ending::Killed { by });
        }
        if j.phase == Phase::Started {
            self.kill_job(id, libc::SIGKILL);
        } else {
            j.live.clear();
        }
        self.maybe_end(id);
    }

    fn kill_job(&mut self, id: JobId, signal: i32) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        if signal == libc::SIGKILL && j.kill_sent.is_none() {
            j.kill_sent = Some(Instant::now());
        }
        for n in j.live_nodes() {
            if let Some(node) = self.nodes.get(&n) {
                node.outlet.send(&ToAgent::KillJob { job: id, signal });
            }
        }
    }

    fn suspend(&mut self, id: JobId, suspend: bool) -> Result<(), String> {
        let r = if suspend {
            self.alloc.suspend(aid(id))
        } else {
            self.alloc.resume(aid(id))
        };
        r.map_err(|e| e.to_string())?;
        let j = &self.jobs[&id];
        for n in j.live_nodes() {
            if let Some(node) = self.nodes.get(&n) {
                node.outlet.send(&if suspend {
                    ToAgent::SuspendJob { job: id }
                } else {
                    ToAgent::ResumeJob { job: id }
                });
            }
        }
        info!("job {id} {}", if suspend { "suspended" } else { "resumed" });
        self.placement_changed();
        Ok(())
    }

    /// Ends the job once no rank is left.
    fn maybe_end(&mut self, id: JobId) {
        let Some(j) = self.jobs.get(&id) else { return };
        if !j.live.is_empty() {
            return;
        }
        let j = self.jobs.remove(&id).expect("just seen");
        let _ = self.alloc.finish(aid(id));
        let exit_code = jobs::exit_code(&j);
        let summary = jobs::summary(id.0, &j);
        info!("{summary}");
        if let Some(conn) = j.client {
            let failure = j.failure.clone().or_else(|| match &j.ending {
                Some(Ending::NodeLost { node }) => {
                    let rank = j
                        .exits
                        .iter()
                        .find(|(_, s)| **s == ExitStatus::Signaled(9))
                        .map_or(0, |(r, _)| *r);
                    Some(RankFailure {
                        rank,
                        node: node.clone(),
                        status: ExitStatus::Signaled(9),
                    })
                }
                _ => None,
            });
            self.reply(
                conn,
                ToClient::JobEnded {
                    job: id,
                    exit_code,
                    summary,
                    failure,
                },
            );
        }
        self.placement_changed();
        self.publish_status();
    }

    /// Serves the Attach requests whose job is now known, and refuses the
    /// rest once the grace period is over.
    fn serve_pending_attach(&mut self) {
        let grace_over = self.epoch.elapsed() >= ADOPTION_GRACE;
        for (conn, job) in std::mem::take(&mut self.pending_attach) {
            if !self.clients.contains_key(&conn) {
                continue;
            }
            if self.jobs.contains_key(&job) || grace_over {
                self.on_client_message(conn, FromClient::Attach { job });
            } else {
                self.pending_attach.push((conn, job));
            }
        }
    }

    /// A PMI failure (an MPI rank aborted, or left before finalize) ends
    /// the job like a rank failure: the other ranks would wait for it.
    fn pmi_failed(&mut self, id: JobId, rank: u32, code: i32, why: String) {
        let Some(j) = self.jobs.get(&id) else { return };
        let node = j
            .rank_node
            .get(rank as usize)
            .and_then(|&n| self.node_name(n))
            .unwrap_or_default();
        let j = self.jobs.get_mut(&id).expect("just seen");
        if j.ending.is_none() {
            info!("job {id}: {why}: ending it");
            j.failure = Some(RankFailure {
                rank,
                node,
                status: ExitStatus::Exited(code),
            });
            j.ending = Some(Ending::Failed);
            self.kill_job(id, libc::SIGKILL);
        }
    }

    fn check_deadlines(&mut self) {
        self.check_adoption();
        if !self.pending_attach.is_empty() {
            self.serve_pending_attach();
        }
        let overdue: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.kill_sent.is_some_and(|t| t.elapsed() > KILL_GRACE))
            .map(|(&k, _)| k)
            .collect();
        for id in overdue {
            let j = self.jobs.get_mut(&id).unwrap();
            warn!(
                "job {id}: ranks {:?} never reported their exit after SIGKILL; giving up on them",
                j.live
            );
            j.live.clear();
            self.maybe_end(id);
        }
        let now = Instant::now();
        let late: Vec<u64> = self
            .traces
            .iter()
            .filter(|(_, t)| now > t.deadline)
            .map(|(&k, _)| k)
            .collect();
        for id in late {
            let mut t = self.traces.remove(&id).unwrap();
            for n in &t.waiting {
                t.errors.push(format!(
                    "{}: no trace within the deadline",
                    self.node_name(*n).unwrap_or_default()
                ));
            }
            self.reply(t.client, ToClient::TraceEnd { errors: t.errors });
        }
    }

    // ---- traces ----

    /// A trace shows every user's gangs and costs every node memory and
    /// link time: root only, one at a time in the cluster.
    fn start_trace(&mut self, conn: ConnId, cred: Cred, ms: u64) {
        let refuse = |reason: String| ToClient::Refused { reason };
        if cred.uid != 0 {
            warn!("trace refused to uid {} (root only)", cred.uid);
            return self.reply(conn, refuse("tracing the cluster is for root only".into()));
        }
        if !self.traces.is_empty() {
            return self.reply(
                conn,
                refuse("a trace is already being recorded; try again when it ends".into()),
            );
        }
        if !(1..=600_000).contains(&ms) {
            return self.reply(
                conn,
                ToClient::Refused {
                    reason: "a trace lasts 1 ms to 600 s".into(),
                },
            );
        }
        let id = self.next_trace;
        self.next_trace += 1;
        let waiting: BTreeSet<NodeId> = self.nodes.keys().copied().collect();
        for n in self.nodes.values() {
            n.outlet.send(&ToAgent::Trace { id, ms });
        }
        let deadline = Instant::now() + Duration::from_millis(ms) + Duration::from_secs(30);
        let run = TraceRun {
            client: conn,
            waiting,
            errors: vec![],
            deadline,
        };
        if run.waiting.is_empty() {
            return self.reply(
                conn,
                ToClient::TraceEnd {
                    errors: vec!["no node in the cluster".into()],
                },
            );
        }
        self.traces.insert(id, run);
    }

    fn trace_chunk(&mut self, id: u64, node: NodeId, data: Bytes, last: bool) {
        let Some(t) = self.traces.get_mut(&id) else {
            return;
        };
        let Some(n) = self.nodes.get(&node) else {
            return;
        };
        let client = t.client;
        let msg = ToClient::TraceData {
            node: n.name.clone(),
            offset_ns: n.offset_ns(),
            data,
            last,
        };
        if last {
            t.waiting.remove(&node);
        }
        let done = t.waiting.is_empty();
        self.reply(client, msg);
        if done {
            let t = self.traces.remove(&id).unwrap();
            self.reply(client, ToClient::TraceEnd { errors: t.errors });
        }
    }

    // ---- rotation ----

    fn drive_rotation(&mut self) {
        let now = self.now_us();
        self.rotation.tick(now, &self.nodes);
        if self.rotation.in_switch() {
            return;
        }
        if self.knobs_pending {
            let msg = self.knobs_msg();
            for n in self.nodes.values() {
                n.outlet.send(&msg);
            }
            self.knobs_pending = false;
        }
        if self.rotation.schedule_dirty {
            self.push_schedules();
        }
        let live: BTreeSet<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.phase == Phase::Started)
            .map(|(&k, _)| k)
            .collect();
        let rotation: Vec<u32> = self
            .alloc
            .rotation()
            .into_iter()
            .filter(|&s| {
                self.alloc
                    .jobs()
                    .iter()
                    .any(|v| v.slots.contains(&s) && live.contains(&pid(v.id)))
            })
            .map(|s| s as u32)
            .collect();
        let nodes: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|n| n.has_schedule())
            .map(|n| n.id)
            .collect();
        // The (job, node) pairs running now: all must yield for an early switch.
        let running: BTreeSet<(JobId, NodeId)> = match self.rotation.current() {
            Some(slot) => self
                .alloc
                .jobs()
                .iter()
                .filter(|v| v.slots.contains(&(slot as usize)) && live.contains(&pid(v.id)))
                .flat_map(|v| {
                    self.alloc
                        .nodes_of(v.id)
                        .into_iter()
                        .map(move |n| (pid(v.id), NodeId(n)))
                })
                .collect(),
            None => BTreeSet::new(),
        };
        self.rotation
            .maybe_switch(&rotation, nodes, &running, &self.knobs, now, &self.nodes);
        if self.rotation.take_published() {
            self.publish_status();
        }
    }

    /// Sends every node whose table changed its new column of the matrix:
    /// only started jobs, named by id.
    fn push_schedules(&mut self) {
        self.rotation.schedule_dirty = false;
        let started: BTreeSet<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.phase == Phase::Started)
            .map(|(&k, _)| k)
            .collect();
        for sched in self.alloc.node_schedules() {
            let Some(node) = self.nodes.get_mut(&NodeId(sched.node)) else {
                continue;
            };
            let slots: Vec<Vec<gang_wire::proto::Placement>> = sched
                .slots
                .iter()
                .map(|row| {
                    row.iter()
                        .filter(|p| started.contains(&pid(p.job)))
                        .map(|p| gang_wire::proto::Placement {
                            job: pid(p.job),
                            cpus: p.cpulist(),
                        })
                        .collect()
                })
                .collect();
            if node.install(slots) {
                self.rotation.force = true;
            }
        }
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
