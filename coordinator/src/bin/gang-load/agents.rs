//! The fake agents of gang-load: many light node agents on a few threads.
//!
//! Each agent is one real agent link: a TCP connection to gangd, the TLS
//! 1.3 handshake with its own certificate from the cluster CA, `Hello`,
//! `Welcome`, then frames encoded by gang-wire's own encoder and decoded
//! by its `FrameDecoder`. What a real agent would do with a message is
//! replaced by an immediate answer: `Prepare` → `Prepared`,
//! `NodeDirectory` and `PmiStart` → nothing (counted: the directory is not
//! kept, its copies would be O(nodes²) in this one process), `JobPeers` →
//! the node's ranks noted (found in the map by the id of its Welcome, as
//! the real agent does), `StartJob` → `RanksStarted` for them (no
//! process), `KillJob` → `RankExited` (killed by its signal) for each of
//! the job's ranks, `Freeze` → `Frozen`, `Switch` → `Running`,
//! `Plan` → `PlanAck`, `Heartbeat` → `Heartbeat`; `ClockProbe`s on the
//! real agent's schedule, echoes fed to an estimator (each stamped with
//! when the kernel received it, gang_wire::rx_stamp, as the real agent's
//! are), and `ClockStatus` reports (clock.rs).
//!
//! How: the handshake and the Hello/Welcome exchange are done blocking on
//! a joiner thread; the agent is then handed to a worker, which owns
//! a few thousand agents and waits for all their sockets with one epoll
//! (mio, edge-triggered: each socket registered once, a wake-up costs
//! what is ready, not every socket; rustls driven by hand: read_tls,
//! process_new_packets, reader until the socket would block; writes go
//! through writer and write_tls, again on a writable edge while TLS bytes
//! remain unsent). The agents' clocks and reporters are ticked at most
//! every TICK. Commands (end a job's ranks, go silent, rejoin, stop) reach
//! a worker through a channel it looks at after every wait (≤ 10 ms).
//! (Until 2026-11-28 a poll(2) over every socket at every wake-up: a third
//! of the harness's CPU at 4096 nodes, on the cores gangd runs on.)
//!
//! What the agents saw is written into `Events` (shared, behind a mutex)
//! with the harness's clock: the first Freeze of each generation, the last
//! Running sent, the ranks each job's StartJobs started and when the last
//! StartJob arrived.
//!
//! A link that ends (gangd closed it, e.g. after declaring the node
//! silent) or a join that fails is tried again a second later, as a real
//! agent reconnects.
//!
//! Known faults: the harness's time is not gangd's, but both share the
//! machine's cores; the ticks of every clock and reporter are O(agents)
//! per TICK. A silent agent stops reading: gangd's writes to it
//! pile up in the socket buffers, as with a real hung node.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use gang_wire::cluster_clock::ScheduleConfig;
use gang_wire::proto::tls::rustls::ClientConnection;
use gang_wire::proto::tls::ClientTls;
use gang_wire::proto::{
    encode, ExitStatus, FrameDecoder, FreezeReport, FromAgent, JobId, NodeId, ToAgent,
};
use mio::{Interest, Token};

use crate::clock::AgentClock;
use crate::reports::{ReportMode, Reporter};

/// Everything the agents saw, on the harness's clock.
#[derive(Default)]
pub struct Events {
    pub inner: Mutex<Seen>,
    /// Messages from gangd by kind.
    pub freezes: AtomicU64,
    pub switches: AtomicU64,
    pub other: AtomicU64,
    /// Agents joined and not closed.
    pub live: AtomicU64,
}

#[derive(Default)]
pub struct Seen {
    /// Per generation: first Freeze received, last Running sent, how many.
    pub gens: HashMap<u64, GenTimes>,
    /// Per job: how many ranks its StartJobs started, and when the last
    /// StartJob arrived.
    pub spawned: HashMap<JobId, (u32, Instant)>,
    /// Nodes whose link ended (gangd closed it or it broke).
    pub closed: Vec<(usize, Instant)>,
    /// Per plan id, as the agents saw it.
    pub plans: HashMap<u64, PlanSeen>,
}

/// A plan as the agents saw it.
#[derive(Clone, Debug, Default)]
pub struct PlanSeen {
    /// Its epoch (when it takes effect, unless a newer plan replaced it
    /// first).
    pub epoch_ns: u64,
    /// When each agent read it, in order (CLOCK_MONOTONIC ns, gangd's
    /// clock on this host; a node offered it again reads it again).
    pub reads: Vec<u64>,
    /// First offers (effective at the epoch) read after the epoch: nodes
    /// that ran the old plan past the boundary where this one began.
    pub late_reads: u32,
}

impl PlanSeen {
    /// An agent read the plan of `epoch_ns`, offered to it from
    /// `effective_ns`, at `read_ns`. A re-offer to a late node is
    /// effective at a later boundary: it is read again, not late again.
    pub fn read(&mut self, epoch_ns: u64, effective_ns: u64, read_ns: u64) {
        self.epoch_ns = epoch_ns;
        self.reads.push(read_ns);
        if effective_ns == epoch_ns && read_ns > epoch_ns {
            self.late_reads += 1;
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct GenTimes {
    pub first_freeze: Option<Instant>,
    pub first_switch: Option<Instant>,
    pub last_running: Instant,
    pub running: u32,
}

impl Events {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A node to be: its index, certificate and CPUs.
#[derive(Clone)]
pub struct NodeSpec {
    pub idx: usize,
    pub tls: Arc<ClientTls>,
    pub cpus: u32,
}

/// One joined agent, owned by a worker.
pub struct Agent {
    spec: NodeSpec,
    /// Non-blocking once joined.
    sock: mio::net::TcpStream,
    conn: ClientConnection,
    decoder: FrameDecoder<ToAgent>,
    /// Its id, from its Welcome.
    id: NodeId,
    /// Per job whose map came and whose StartJob did not yet: its ranks
    /// here.
    mapped: HashMap<JobId, Vec<u32>>,
    /// Ranks started here: (job, rank).
    ranks: Vec<(JobId, u32)>,
    /// Lost on purpose: reads and answers nothing.
    silent: bool,
    dead: bool,
    /// Its cluster clock (None: it sends no probes).
    clock: Option<AgentClock>,
    /// Its timed switches' reports (reports.rs).
    reporter: Option<Reporter>,
}

/// Joins `spec` to gangd at `addr`: handshake, Hello, Welcome. Messages
/// that came right behind Welcome are handled by the worker.
fn join(addr: SocketAddr, spec: NodeSpec) -> Result<(Agent, Vec<ToAgent>)> {
    let mut sock = TcpStream::connect(addr).context("connecting")?;
    sock.set_nodelay(true)?;
    // Echoes are stamped at their arrival, as the node agent's are.
    let _ = gang_wire::rx_stamp::enable(sock.as_raw_fd());
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut conn = spec.tls.connection().map_err(|e| anyhow!("TLS: {e}"))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).context("TLS handshake")?;
    }
    let hello = FromAgent::Hello {
        nr_cpus: spec.cpus,
        housekeeping_cpus: String::new(),
        agent_version: "gang-load".into(),
        jobs: vec![],
        schedule: vec![],
    };
    conn.writer().write_all(&encode(&hello)?)?;
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    let mut decoder = FrameDecoder::<ToAgent>::new();
    let mut buf = [0u8; 16384];
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.is_empty() {
        if Instant::now() > deadline {
            bail!("no Welcome in 30 s");
        }
        if conn.read_tls(&mut sock)? == 0 {
            bail!("gangd closed the connection before Welcome");
        }
        conn.process_new_packets()
            .map_err(|e| anyhow!("TLS: {e}"))?;
        loop {
            match conn.reader().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend(decoder.feed(&buf[..n])?),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    let id = match got.remove(0) {
        ToAgent::Welcome { node_id } => node_id,
        ToAgent::Refused { reason } => bail!("refused: {reason}"),
        other => bail!("expected Welcome, got {other:?}"),
    };
    sock.set_nonblocking(true)?;
    let agent = Agent {
        spec,
        sock: mio::net::TcpStream::from_std(sock),
        conn,
        decoder,
        id,
        mapped: HashMap::new(),
        ranks: vec![],
        silent: false,
        dead: false,
        clock: None,
        reporter: None,
    };
    Ok((agent, got))
}

pub enum Command {
    /// A node joined (by a joiner thread): answer what came behind Welcome.
    Joined(Box<Agent>, Vec<ToAgent>),
    /// The node did not join: it tries again a second later.
    Retry(NodeSpec),
    /// Every rank of the job exits with code 0.
    ExitJob(JobId),
    /// The node goes silent (a hung or cut-off node).
    Silence(usize),
    /// The node's link is closed and it joins again.
    Rejoin(usize),
    Stop,
}

/// The workers and their channels.
pub struct Pool {
    workers: Vec<(Sender<Command>, JoinHandle<()>)>,
    /// Nodes to join (not before the instant), taken by the joiners.
    joins: Sender<(NodeSpec, Instant)>,
    joiners: Vec<JoinHandle<()>>,
    pub events: Arc<Events>,
    /// Welcomes received (rejoins included).
    pub joined: Arc<AtomicU64>,
}

impl Pool {
    /// `workers` threads own the joined agents; `joiners` threads make
    /// the TLS handshakes, so that a worker never stops answering its
    /// agents while a node joins.
    pub fn new(
        addr: SocketAddr,
        workers: usize,
        joiners: usize,
        probe: Option<ScheduleConfig>,
        reports: ReportMode,
    ) -> Pool {
        let events = Arc::new(Events::default());
        let joined = Arc::new(AtomicU64::new(0));
        let (joins, join_rx) = mpsc::channel::<(NodeSpec, Instant)>();
        let join_rx = Arc::new(Mutex::new(join_rx));
        let chans: Vec<(Sender<Command>, Receiver<Command>)> =
            (0..workers.max(1)).map(|_| mpsc::channel()).collect();
        let txs: Vec<Sender<Command>> = chans.iter().map(|(tx, _)| tx.clone()).collect();
        let joiners = (0..joiners.max(1))
            .map(|_| {
                let (rx, txs) = (join_rx.clone(), txs.clone());
                thread::spawn(move || loop {
                    let (spec, at) = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    thread::sleep(at.saturating_duration_since(Instant::now()));
                    let idx = spec.idx;
                    let spec_again = spec.clone();
                    match join(addr, spec) {
                        Ok((agent, early)) => {
                            let w = &txs[idx % txs.len()];
                            let _ = w.send(Command::Joined(Box::new(agent), early));
                        }
                        Err(e) => {
                            eprintln!("gang-load: node {idx} did not join ({e:#}), trying again");
                            let _ = txs[idx % txs.len()].send(Command::Retry(spec_again));
                        }
                    }
                })
            })
            .collect();
        let workers = chans
            .into_iter()
            .enumerate()
            .map(|(w, (tx, rx))| {
                let (ev, j, again) = (events.clone(), joined.clone(), joins.clone());
                let h = thread::Builder::new()
                    .name(format!("load-worker-{w}"))
                    .spawn(move || Worker::new(rx, again, ev, j, probe, reports).run())
                    .expect("spawning a worker");
                (tx, h)
            })
            .collect();
        Pool {
            workers,
            joins,
            joiners,
            events,
            joined,
        }
    }

    fn worker_of(&self, idx: usize) -> &Sender<Command> {
        &self.workers[idx % self.workers.len()].0
    }

    pub fn join(&self, spec: NodeSpec) {
        let _ = self.joins.send((spec, Instant::now()));
    }

    pub fn silence(&self, idx: usize) {
        let _ = self.worker_of(idx).send(Command::Silence(idx));
    }

    pub fn rejoin(&self, idx: usize) {
        let _ = self.worker_of(idx).send(Command::Rejoin(idx));
    }

    pub fn exit_job(&self, job: JobId) {
        for (tx, _) in &self.workers {
            let _ = tx.send(Command::ExitJob(job));
        }
    }

    pub fn stop(self) {
        for (tx, _) in &self.workers {
            let _ = tx.send(Command::Stop);
        }
        for (_, h) in self.workers {
            let _ = h.join();
        }
        // The workers held the last other senders of `joins`.
        drop(self.joins);
        for h in self.joiners {
            let _ = h.join();
        }
    }
}

/// The agents' clocks and reporters are ticked at most this often.
const TICK: Duration = Duration::from_millis(2);

struct Worker {
    rx: Receiver<Command>,
    /// Every agent's socket, registered once (token: the node's index).
    poll: mio::Poll,
    ready: mio::Events,
    /// Node index → position in `agents`.
    pos: HashMap<usize, usize>,
    /// Where a rejoining node goes.
    joins: Sender<(NodeSpec, Instant)>,
    events: Arc<Events>,
    joined: Arc<AtomicU64>,
    probe: Option<ScheduleConfig>,
    reports: ReportMode,
    agents: Vec<Agent>,
}

impl Worker {
    fn new(
        rx: Receiver<Command>,
        joins: Sender<(NodeSpec, Instant)>,
        events: Arc<Events>,
        joined: Arc<AtomicU64>,
        probe: Option<ScheduleConfig>,
        reports: ReportMode,
    ) -> Worker {
        Worker {
            rx,
            poll: mio::Poll::new().expect("creating a worker's epoll"),
            ready: mio::Events::with_capacity(1024),
            pos: HashMap::new(),
            joins,
            events,
            joined,
            probe,
            reports,
            agents: vec![],
        }
    }

    fn run(mut self) {
        let mut last_tick = Instant::now() - TICK;
        loop {
            loop {
                match self.rx.try_recv() {
                    Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return,
                    Ok(cmd) => self.command(cmd),
                    Err(TryRecvError::Empty) => break,
                }
            }
            let (now_ns, now) = (gang_wire::time::monotonic_ns(), Instant::now());
            if now.duration_since(last_tick) < TICK {
                self.poll_once(TICK);
                continue;
            }
            last_tick = now;
            for i in 0..self.agents.len() {
                let msgs = match self.agents[i].clock.as_mut() {
                    Some(c) => c.tick(now_ns, now),
                    None => continue,
                };
                for msg in msgs {
                    self.send(i, &msg);
                }
            }
            for i in 0..self.agents.len() {
                let writes = match self.agents[i].reporter.as_mut() {
                    Some(r) => r.tick(now_ns, now),
                    None => continue,
                };
                for msg in writes {
                    self.send(i, &msg);
                }
            }
            self.poll_once(Duration::from_millis(10));
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Joined(mut agent, early) => {
                agent.clock = self.probe.map(AgentClock::new);
                agent.reporter = Some(Reporter::new(self.reports, Instant::now()));
                let idx = agent.spec.idx;
                let interest = Interest::READABLE | Interest::WRITABLE;
                if let Err(e) = self
                    .poll
                    .registry()
                    .register(&mut agent.sock, Token(idx), interest)
                {
                    eprintln!("gang-load: node {idx}: cannot poll its socket ({e}), joining again");
                    let _ = self.joins.send((agent.spec.clone(), Instant::now()));
                    return;
                }
                self.pos.insert(idx, self.agents.len());
                self.agents.push(*agent);
                self.joined.fetch_add(1, Ordering::Relaxed);
                self.events.live.fetch_add(1, Ordering::Relaxed);
                let i = self.agents.len() - 1;
                for msg in early {
                    self.handle(i, msg, None);
                }
                // Bytes behind Welcome may already sit in rustls.
                self.read(i);
            }
            Command::ExitJob(job) => {
                for i in 0..self.agents.len() {
                    self.exit_ranks(i, job, ExitStatus::Exited(0));
                }
            }
            Command::Silence(idx) => {
                if let Some(a) = self.agents.iter_mut().find(|a| a.spec.idx == idx) {
                    a.silent = true;
                }
            }
            Command::Rejoin(idx) => {
                if let Some(pos) = self.pos.remove(&idx) {
                    let mut a = self.agents.swap_remove(pos);
                    let _ = self.poll.registry().deregister(&mut a.sock);
                    if let Some(moved) = self.agents.get(pos) {
                        self.pos.insert(moved.spec.idx, pos);
                    }
                    self.events.live.fetch_sub(1, Ordering::Relaxed);
                    let _ = a.sock.shutdown(std::net::Shutdown::Both);
                    let _ = self.joins.send((a.spec, Instant::now()));
                }
            }
            Command::Retry(spec) => {
                let _ = self
                    .joins
                    .send((spec, Instant::now() + Duration::from_secs(1)));
            }
            Command::Stop => {}
        }
    }

    /// Every rank of `job` on agent `i` ends with `status`.
    fn exit_ranks(&mut self, i: usize, job: JobId, status: ExitStatus) {
        let mine: Vec<u32> = self.agents[i]
            .ranks
            .iter()
            .filter(|(j, _)| *j == job)
            .map(|(_, r)| *r)
            .collect();
        self.agents[i].ranks.retain(|(j, _)| *j != job);
        for rank in mine {
            self.send(i, &FromAgent::RankExited { job, rank, status });
        }
    }

    fn poll_once(&mut self, timeout: Duration) {
        if self.agents.is_empty() {
            thread::sleep(timeout);
            return;
        }
        if let Err(e) = self.poll.poll(&mut self.ready, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                eprintln!("gang-load: a worker's epoll failed: {e}");
                thread::sleep(timeout);
            }
            return;
        }
        let ready: Vec<(usize, bool, bool)> = self
            .ready
            .iter()
            .map(|ev| {
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                (ev.token().0, ev.is_writable(), readable)
            })
            .collect();
        for (idx, writable, readable) in ready {
            let Some(&i) = self.pos.get(&idx) else {
                continue;
            };
            if writable {
                self.flush(i);
            }
            if readable {
                self.read(i);
            }
        }
        if self.agents.iter().any(|a| a.dead) {
            // As a real agent does, a node whose link ended joins again
            // (after a second here).
            let now = Instant::now();
            let mut seen = self.events.seen();
            for a in self.agents.iter().filter(|a| a.dead) {
                seen.closed.push((a.spec.idx, now));
                self.events.live.fetch_sub(1, Ordering::Relaxed);
                let _ = self
                    .joins
                    .send((a.spec.clone(), now + Duration::from_secs(1)));
            }
            drop(seen);
            for a in self.agents.iter_mut().filter(|a| a.dead) {
                let _ = self.poll.registry().deregister(&mut a.sock);
            }
            self.agents.retain(|a| !a.dead);
            self.pos = (self.agents.iter().enumerate())
                .map(|(i, a)| (a.spec.idx, i))
                .collect();
        }
    }

    /// Reads whatever arrived for agent `i` and answers it.
    fn read(&mut self, i: usize) {
        let mut buf = [0u8; 16384];
        let mut got = Vec::new();
        {
            let a = &mut self.agents[i];
            if a.silent || a.dead {
                return;
            }
            // Plaintext is taken out after every TLS read: rustls refuses
            // to read more while its plaintext buffer is full.
            while !a.dead {
                let mut sock = gang_wire::rx_stamp::Reader::new(&mut a.sock);
                let read = a.conn.read_tls(&mut sock);
                let rx_ns = sock.rx_ns;
                match read {
                    Ok(0) => a.dead = true,
                    Ok(_) => {
                        if a.conn.process_new_packets().is_err() {
                            a.dead = true;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => a.dead = true,
                }
                loop {
                    match a.conn.reader().read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => match a.decoder.feed(&buf[..n]) {
                            Ok(msgs) => got.extend(msgs.into_iter().map(|m| (m, rx_ns))),
                            Err(e) => {
                                eprintln!("gang-load: node {}: {e}", a.spec.idx);
                                a.dead = true;
                                break;
                            }
                        },
                        Err(_) => break,
                    }
                }
            }
        }
        for (msg, rx_ns) in got {
            self.handle(i, msg, rx_ns);
        }
    }

    /// Handles `msg` to agent `i`, which the kernel received at `rx_ns`
    /// (None: not stamped).
    fn handle(&mut self, i: usize, msg: ToAgent, rx_ns: Option<u64>) {
        let now = Instant::now();
        let answer = match msg {
            ToAgent::Prepare { job, .. } => {
                self.events.other.fetch_add(1, Ordering::Relaxed);
                Some(FromAgent::Prepared { job, error: None })
            }
            ToAgent::JobPeers { job, map } => {
                self.events.other.fetch_add(1, Ordering::Relaxed);
                let a = &mut self.agents[i];
                let mine = map.ranks_of(a.id).into_iter().map(|(r, _)| r).collect();
                a.mapped.insert(job, mine);
                None
            }
            ToAgent::StartJob { job, .. } => {
                self.events.other.fetch_add(1, Ordering::Relaxed);
                let a = &mut self.agents[i];
                let mine = a.mapped.remove(&job).unwrap_or_default();
                a.ranks.extend(mine.iter().map(|&r| (job, r)));
                let mut seen = self.events.seen();
                let e = seen.spawned.entry(job).or_insert((0, now));
                e.0 += mine.len() as u32;
                e.1 = now;
                drop(seen);
                Some(FromAgent::RanksStarted {
                    job,
                    ranks: mine.iter().map(|&r| (r, 1000 + r)).collect(),
                })
            }
            // The real agent expands the directory and the PMI layout for
            // its ranks; that is the node's work, not gangd's, so the fake
            // agent only counts them.
            ToAgent::NodeDirectory { .. } | ToAgent::PmiStart { .. } => {
                self.events.other.fetch_add(1, Ordering::Relaxed);
                None
            }
            ToAgent::Freeze { gen, from_slot, .. } => {
                self.events.freezes.fetch_add(1, Ordering::Relaxed);
                self.with_gen(gen.0, now, |g| {
                    g.first_freeze.get_or_insert(now);
                });
                Some(FromAgent::Frozen {
                    gen,
                    slot: from_slot,
                    report: FreezeReport {
                        drained_bytes: 0,
                        drain_us: 0,
                        timed_out: false,
                        answer_us: 0,
                    },
                })
            }
            ToAgent::Switch { gen, slot, .. } => {
                self.events.switches.fetch_add(1, Ordering::Relaxed);
                self.with_gen(gen.0, now, |g| {
                    g.first_switch.get_or_insert(now);
                });
                Some(FromAgent::Running {
                    gen,
                    slot,
                    switch_us: 0,
                })
            }
            ToAgent::KillJob { job, signal } => {
                self.events.other.fetch_add(1, Ordering::Relaxed);
                self.exit_ranks(i, job, ExitStatus::Signaled(signal));
                None
            }
            ToAgent::Plan { plan, effective_ns } => {
                let plan_id = plan.id;
                let read_ns = gang_wire::time::monotonic_ns();
                let mut seen = self.events.seen();
                let p = seen.plans.entry(plan_id).or_default();
                p.read(plan.epoch_ns, effective_ns, read_ns);
                drop(seen);
                if let Some(r) = self.agents[i].reporter.as_mut() {
                    r.plan(plan, effective_ns);
                }
                Some(FromAgent::PlanAck { plan_id })
            }
            ToAgent::ClockEcho { t1, t2, t3, .. } => {
                let t4 = rx_ns.unwrap_or_else(gang_wire::time::monotonic_ns);
                if let Some(c) = self.agents[i].clock.as_mut() {
                    c.echo(t1, t2, t3, t4);
                }
                None
            }
            ToAgent::Heartbeat { seq } => Some(FromAgent::Heartbeat {
                seq,
                mono_ns: gang_wire::time::monotonic_ns(),
            }),
            _ => {
                self.events.other.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        if let Some(a) = answer {
            let running = matches!(a, FromAgent::Running { .. });
            self.send(i, &a);
            if let (true, FromAgent::Running { gen, .. }) = (running, &a) {
                let now = Instant::now();
                self.with_gen(gen.0, now, |g| {
                    g.last_running = now;
                    g.running += 1;
                });
            }
        }
    }

    /// Updates the times of generation `gen`.
    fn with_gen(&self, gen: u64, now: Instant, f: impl FnOnce(&mut GenTimes)) {
        let mut seen = self.events.seen();
        f(seen.gens.entry(gen).or_insert(GenTimes {
            first_freeze: None,
            first_switch: None,
            last_running: now,
            running: 0,
        }))
    }

    /// `msg` in one write to the socket.
    fn send(&mut self, i: usize, msg: &FromAgent) {
        let a = &mut self.agents[i];
        if a.silent || a.dead {
            return;
        }
        match encode(msg) {
            Ok(frame) => {
                if a.conn.writer().write_all(&frame).is_err() {
                    a.dead = true;
                }
            }
            Err(e) => eprintln!("gang-load: encoding {msg:?}: {e}"),
        }
        self.flush(i);
    }

    fn flush(&mut self, i: usize) {
        let a = &mut self.agents[i];
        if a.silent || a.dead {
            return;
        }
        while a.conn.wants_write() {
            match a.conn.write_tls(&mut a.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    a.dead = true;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PlanSeen;

    #[test]
    fn a_first_offer_read_after_its_epoch_is_late_and_a_reoffer_is_not() {
        let mut p = PlanSeen::default();
        p.read(1_000, 1_000, 900); // in time
        p.read(1_000, 1_000, 1_000); // at the boundary: in time
        p.read(1_000, 1_000, 1_050); // after it: the node ran the old plan
        p.read(1_000, 1_100, 1_060); // the re-offer, for the next boundary
        assert_eq!(p.reads, [900, 1_000, 1_050, 1_060]);
        assert_eq!(p.late_reads, 1);
    }
}
