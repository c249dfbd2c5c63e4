//! The node agent (`scx_gang --coordinator HOST:PORT`): a thread of the
//! node daemon that joins the cluster run by gangd and does what gangd asks
//! (see gang_wire::proto for the protocol).
//!
//! - mod.rs: the connection to gangd, the handshake, reconnecting forever
//!   with backoff while the daemon runs.
//! - handler.rs: what each message of gangd turns into; scheduling goes to
//!   the daemon's main loop as control requests (mainloop.rs), like the
//!   control socket's, so the thread owning BPF takes every action.
//! - link.rs: the sending half, shared by every thread; keeps rank output
//!   and exits while gangd is away.
//! - cluster_clock.rs: the node's estimate of gangd's clock, fed by
//!   probes of its own thread and echoes the reader takes (with t4 read on
//!   receipt, before the handler sees anything).
//! - plans.rs: gangd's plans for timed switching, kept fresh, and the
//!   node's switch reports batched for gangd.
//! - bell.rs: how the agent's timer threads sleep (until work is due or
//!   someone rings, never on a fixed tick).
//! - ranks.rs, cgroup.rs: the ranks and their job's cgroup.
//! - pmi.rs: MPI bootstrap, each rank's PMI_FD served here and relayed to
//!   gangd.
//! - prepare.rs: may a job start here?
//! - Below the agent (it imports them, they never import it): who holds a
//!   gang frozen (crate::freezer::FreezeHolds, shared with the switching)
//!   and the job<->gang naming (crate::gangs).
//!
//! While gangd is away the node keeps running its last schedule on its own
//! timer (Request::Autonomous) and never kills a rank for it; Hello tells
//! the next gangd which jobs still live here.

pub mod adopt;
pub mod bell;
pub mod cgroup;
pub mod cluster_clock;
mod ends;
mod handler;
pub mod link;
pub mod mainloop;
pub mod peers;
pub mod plans;
pub mod pmi;
pub mod pmix;
mod pmix_relay;
pub mod prepare;
pub mod ranks;
#[cfg(test)]
mod tests;
mod trace;
pub mod user;

use std::collections::VecDeque;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gang_wire::cluster_clock::Event;
use gang_wire::proto::tls::{self, ClientTls, Session, SessionWriter};
use gang_wire::proto::{write_frame, FrameDecoder, FromAgent, ToAgent};
use gang_wire::time::monotonic_ns;
use log::{info, warn};

use crate::control::Inbox;
use crate::freezer::FreezeHolds;
use crate::gangs;
use crate::knobs::SharedKnobs;
use crate::switching::follow::SwitchedSink;
use crate::switching::YieldSink;

use cluster_clock::SharedClusterClock;
use handler::Handler;
use link::Link;
use mainloop::MainLoop;
use pmix::PmixConfig;
pub use ranks::RankRules;
use ranks::Ranks;

/// First pause after a failed or lost connection; doubled up to MAX_BACKOFF.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// For the TLS handshake after connecting, and for Welcome after Hello.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// gangd sends heartbeats (every second by default): this much silence
/// means the connection is dead even if TCP has not noticed.
const SILENCE_TIMEOUT: Duration = Duration::from_secs(15);
/// A write to gangd that blocks this long drops the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a blocked read wakes to look at the shutdown flag.
const POLL: Duration = Duration::from_millis(200);

pub struct AgentConfig {
    /// gangd's agent address, HOST:PORT.
    pub coordinator: String,
    /// The node's certificate and the cluster CA; gangd is accepted only
    /// with a certificate of that CA naming "gangd" (proto::tls).
    pub tls: Arc<ClientTls>,
    /// This node's name in the cluster: the one in its certificate.
    pub node: String,
    pub nr_cpus: u32,
    /// Job cgroups go below it (the daemon's --gang-root). None: ranks are
    /// not placed in cgroups (for tests on hosts without cgroup2).
    pub gang_root: Option<PathBuf>,
    /// The PMIx server program for Open MPI jobs; None: next to this
    /// executable (pmix.rs).
    pub pmix_server: Option<PathBuf>,
    pub knobs: Arc<SharedKnobs>,
    /// Shared with the scheduler, which never thaws a suspended job.
    pub holds: FreezeHolds,
    /// Who may run ranks here, and the jobs' default limits.
    pub rules: RankRules,
    /// The node's cluster clock, kept by the agent, read by anyone.
    pub cluster_clock: Arc<SharedClusterClock>,
}

/// Starts the agent thread. `inbox` is the daemon's main loop's (what
/// control::serve returns); the thread runs until `shutdown` is set. The
/// sinks tell gangd about yields (FromAgent::Yielded) and timed switches
/// (FromAgent::Switched).
pub fn start(
    cfg: AgentConfig,
    inbox: Sender<Inbox>,
    shutdown: Arc<AtomicBool>,
) -> io::Result<(JoinHandle<()>, YieldSink, SwitchedSink)> {
    let link = Arc::new(Link::new());
    let ranks = Ranks::new(
        cfg.node.clone(),
        cfg.gang_root.clone(),
        link.clone(),
        cfg.holds.clone(),
        cfg.rules,
        match &cfg.gang_root {
            Some(root) => PmixConfig::probe(root, cfg.pmix_server.as_deref(), &cfg.node),
            None => Err("ranks are not placed in cgroups here (no --gang-root)".into()),
        },
        shutdown.clone(),
    );
    // Ranks a previous daemon started, still running (adopt.rs).
    if let Some(root) = &cfg.gang_root {
        for found in adopt::scan(root) {
            ranks.adopt(found);
        }
    }
    let main = MainLoop::new(inbox);
    let plans = plans::Plans::new(cfg.cluster_clock.clone(), main.clone());
    plans.spawn_refresher(shutdown.clone())?;
    let handler = Handler::new(
        cfg.node.clone(),
        cfg.knobs.clone(),
        main,
        link.clone(),
        ranks,
        cfg.cluster_clock.clone(),
        plans,
    )?;
    let reports = plans::Reports::new(link.clone());
    reports.spawn_flusher(shutdown.clone())?;
    let switched = plans::switched_sink(cfg.cluster_clock.clone(), reports);
    cluster_clock::spawn_prober(
        cfg.cluster_clock.clone(),
        link.clone(),
        cfg.knobs.clone(),
        shutdown.clone(),
    )?;
    let yields = link.clone();
    let sink: YieldSink = Arc::new(move |gang: &str, gen: u64| {
        // Only jobs' gangs are the cluster's business; a yield notice is
        // worthless once gangd is away (the switch it would hasten is over).
        if let Some(job) = gangs::job_of_gang(gang) {
            if yields.is_connected() {
                yields.send(FromAgent::Yielded {
                    gen: gang_wire::proto::Gen(gen),
                    job,
                });
            }
        }
    });
    let agent = Agent { cfg, link, handler };
    let thread = thread::Builder::new()
        .name("agent".into())
        .spawn(move || agent.run(&shutdown))?;
    Ok((thread, sink, switched))
}

struct Agent {
    cfg: AgentConfig,
    link: Arc<Link>,
    handler: Handler,
}

/// How a connection ended.
enum End {
    /// The daemon is stopping.
    Stop,
    /// No connection, or no handshake.
    Failed(String),
    Refused(String),
    /// The node was in the cluster and lost the connection.
    Lost(String),
}

struct Backoff(Duration);

impl Backoff {
    fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (d * 2).min(MAX_BACKOFF);
        d
    }

    fn reset(&mut self) {
        self.0 = FIRST_BACKOFF;
    }
}

impl Agent {
    fn run(mut self, shutdown: &AtomicBool) {
        info!(
            "node agent: joining gangd at {} as {}",
            self.cfg.coordinator, self.cfg.node
        );
        let mut backoff = Backoff(FIRST_BACKOFF);
        let mut failures = 0u64;
        loop {
            let end = self.session(shutdown);
            self.link.detach();
            let addr = &self.cfg.coordinator;
            match end {
                End::Stop => break,
                End::Lost(why) => {
                    warn!("lost gangd at {addr}: {why}; reconnecting");
                    backoff.reset();
                    failures = 0;
                }
                End::Refused(reason) => {
                    warn!(
                        "gangd at {addr} refused node {}: {reason}; retrying",
                        self.cfg.node
                    );
                }
                End::Failed(why) => {
                    failures += 1;
                    if failures == 1 {
                        warn!(
                            "cannot join gangd at {addr}: {why}; retrying (every {} s at most)",
                            MAX_BACKOFF.as_secs()
                        );
                    } else {
                        info!("still cannot join gangd at {addr} (attempt {failures}): {why}");
                    }
                }
            }
            self.handler.on_lost();
            let deadline = Instant::now() + backoff.next();
            while Instant::now() < deadline {
                if shutdown.load(Ordering::Relaxed) {
                    return;
                }
                thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
            }
        }
        info!("node agent stopped");
    }

    fn session(&mut self, shutdown: &AtomicBool) -> End {
        if shutdown.load(Ordering::Relaxed) {
            return End::Stop;
        }
        let stream = match connect(&self.cfg.coordinator) {
            Ok(s) => s,
            Err(e) => return End::Failed(format!("connecting: {e}")),
        };
        // Switch messages are small and urgent.
        if let Err(e) = stream.set_nodelay(true) {
            return End::Failed(format!("setting up the connection: {e}"));
        }
        // Clock echoes are stamped at their arrival (t4): a reader thread
        // that runs late does not lengthen the sample's round trip.
        if let Err(e) = gang_wire::rx_stamp::enable(stream.as_raw_fd()) {
            warn!("clock echoes stamped when read, not when received: {e}");
        }
        let session = match self.cfg.tls.connection().and_then(|c| {
            tls::handshake(stream, c, Instant::now() + HANDSHAKE_TIMEOUT)
                .map_err(anyhow::Error::from)
        }) {
            Ok(s) => Arc::new(s),
            // An impostor without gangd's certificate ends here, before a
            // single message of it is read.
            Err(e) => return End::Failed(format!("TLS handshake: {e:#}")),
        };
        if let Err(e) = session.socket().set_write_timeout(Some(WRITE_TIMEOUT)) {
            return End::Failed(format!("setting up the connection: {e}"));
        }
        let mut reader = Reader::new(session.clone(), self.cfg.cluster_clock.clone());
        info!(
            "connected to gangd at {} (TLS, its certificate verified)",
            self.cfg.coordinator
        );

        let jobs = self.handler.ranks.live_jobs();
        let hello = FromAgent::Hello {
            nr_cpus: self.cfg.nr_cpus,
            housekeeping_cpus: self.cfg.knobs.snapshot().housekeeping.to_string(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            jobs: jobs.clone(),
            schedule: self.handler.schedule.clone(),
        };
        if let Err(e) = write_frame(&mut SessionWriter(session.clone()), &hello) {
            return End::Failed(format!("sending hello: {e}"));
        }
        match reader.next(HANDSHAKE_TIMEOUT, shutdown) {
            Ok(ToAgent::Welcome { node_id }) => {
                info!(
                    "joined cluster as node {node_id} ({} at gangd {}); {} jobs live here, last schedule of {} slots",
                    self.cfg.node,
                    self.cfg.coordinator,
                    jobs.len(),
                    self.handler.schedule.len()
                );
            }
            Ok(ToAgent::Refused { reason }) => return End::Refused(reason),
            Ok(other) => {
                return End::Failed(format!("expected welcome or refusal, got {}", kind(&other)))
            }
            Err(None) => return End::Stop,
            Err(Some(why)) => return End::Failed(format!("waiting for the welcome: {why}")),
        }
        // A new connection, maybe a new gangd: its clock is estimated anew.
        self.cfg.cluster_clock.reset();
        if let Err(e) = self.link.attach(session) {
            return End::Lost(format!("sending what was kept: {e}"));
        }
        // The prober sleeps while there is no link: it probes now.
        self.cfg.cluster_clock.wake();
        loop {
            match reader.next(SILENCE_TIMEOUT, shutdown) {
                Ok(msg) => self.handler.handle(msg),
                Err(None) => return End::Stop,
                Err(Some(why)) => return End::Lost(why),
            }
        }
    }
}

fn connect(addr: &str) -> io::Result<TcpStream> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
}

/// A message's type, for logs (never its content).
fn kind(msg: &ToAgent) -> String {
    serde_json::to_value(msg)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The receiving half: frames from gangd, read with a short timeout so the
/// agent notices the daemon stopping and a silent gangd. Clock echoes are
/// taken here, with t4 read as soon as their bytes were read, and fed to
/// the cluster clock: they never reach the handler.
struct Reader {
    session: Arc<Session>,
    decoder: FrameDecoder<ToAgent>,
    /// Decoded messages, each with the local time its bytes were read.
    ready: VecDeque<(ToAgent, u64)>,
    buf: Vec<u8>,
    clock: Arc<SharedClusterClock>,
    /// When an echo was last refused in the log (one line a minute).
    refused_logged: Option<Instant>,
}

impl Reader {
    fn new(session: Arc<Session>, clock: Arc<SharedClusterClock>) -> Self {
        Self {
            session,
            decoder: FrameDecoder::new(),
            ready: VecDeque::new(),
            buf: vec![0; 64 << 10],
            clock,
            refused_logged: None,
        }
    }

    /// Feeds an echo received at `t4` to the cluster clock.
    fn take_echo(&mut self, seq: u64, t1: u64, t2: u64, t3: u64, t4: u64) {
        match self.clock.echo(seq, t1, t2, t3, t4) {
            Ok(Event::Accepted) => {}
            Ok(Event::Stepped {
                offset_change_ns,
                bound_ns,
            }) => warn!("gangd's clock stepped by {offset_change_ns} ns (beyond ±{bound_ns} ns): its estimate starts over"),
            Err(e) => {
                if self
                    .refused_logged
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
                {
                    warn!(
                        "{e}: dropped ({} clock echoes dropped so far)",
                        self.clock.dropped()
                    );
                    self.refused_logged = Some(Instant::now());
                }
            }
        }
    }

    /// The next message. Err(None): the daemon is stopping; Err(Some):
    /// the connection is over (closed, bad frame, silent for `silence`).
    fn next(
        &mut self,
        silence: Duration,
        shutdown: &AtomicBool,
    ) -> Result<ToAgent, Option<String>> {
        let mut heard = Instant::now();
        loop {
            if let Some((msg, t4)) = self.ready.pop_front() {
                match msg {
                    ToAgent::ClockEcho { seq, t1, t2, t3 } => {
                        self.take_echo(seq, t1, t2, t3, t4);
                        continue;
                    }
                    msg => return Ok(msg),
                }
            }
            if shutdown.load(Ordering::Relaxed) {
                return Err(None);
            }
            match self.session.read_timeout(&mut self.buf, Some(POLL)) {
                Ok(0) => {
                    return Err(Some(match self.decoder.finish() {
                        Ok(()) => "gangd closed the connection".into(),
                        Err(e) => format!("bad frame from gangd: {e}"),
                    }))
                }
                Ok(n) => {
                    // When the kernel received them (else now).
                    let t4 = self.session.rx_ns().unwrap_or_else(monotonic_ns);
                    heard = Instant::now();
                    let msgs = self
                        .decoder
                        .feed(&self.buf[..n])
                        .map_err(|e| Some(format!("bad frame from gangd: {e}")))?;
                    self.ready.extend(msgs.into_iter().map(|m| (m, t4)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if heard.elapsed() >= silence {
                        return Err(Some(format!(
                            "no word from gangd for {} s",
                            silence.as_secs()
                        )));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(Some("gangd closed the connection".into()))
                }
                Err(e) => return Err(Some(format!("reading: {e}"))),
            }
        }
    }
}
