//! The agent against a fake gangd on loopback and a fake scheduler main
//! loop: no BPF, no root needed (except the cgroup test, which runs only
//! where a writable cgroup2 is mounted).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::proto::tls::testing::{self as tls_testing, TestCa};
use gang_wire::proto::tls::{self as gtls, rustls, Session, SessionReader, SessionWriter};
use gang_wire::proto::{
    read_frame, write_frame, Bytes, ClockSource, ClockState, DirEntry, ExitStatus, FromAgent, Gen,
    JobId, JobMap, LiveJob, NodeId, Placement, Stream, ToAgent, MAX_OUTPUT_CHUNK,
};
use gang_wire::trace::{EventKind, TraceEvent, TraceMeta};

use super::*;
use crate::control::{self, FrozenReport, Inbox, RawTrace, Request, Response};

/// The node hardening's attacks: users, limits, paths, restarts.
mod hardening;
use crate::knobs::NodeKnobs;
use gang_wire::time::monotonic_ns;

mod peer_lists;
mod pmi;
mod pmix;

// ---- a log that tests can read ----

struct Capture(Mutex<Vec<String>>);

static LOG: Capture = Capture(Mutex::new(Vec::new()));

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            // A test that failed while holding the lock must not fail others.
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{}", r.args()));
        }
    }
    fn flush(&self) {}
}

fn capture_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&LOG).unwrap();
        log::set_max_level(log::LevelFilter::Info);
    });
}

/// Waits until a log line contains every one of `words`.
fn wait_for_log(words: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if LOG
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no log line with {words:?} in {:#?}",
            LOG.0.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- the fake scheduler main loop ----

type Answer = Box<dyn Fn(&Request) -> Response + Send>;

/// Answers every request with `answer` and hands a copy to the test.
fn fake_main_loop(answer: Answer) -> (Sender<Inbox>, Receiver<Request>) {
    let (inbox, requests) = mpsc::channel::<Inbox>();
    let (seen_tx, seen) = mpsc::channel();
    std::thread::spawn(move || {
        for msg in requests {
            if let Inbox::Request(p) = msg {
                let response = answer(&p.request);
                let _ = seen_tx.send(p.request);
                let _ = p.reply.send(response);
            }
        }
    });
    (inbox, seen)
}

fn accept_all() -> Answer {
    Box::new(|r| match r {
        Request::Freeze { gen, .. } => Response {
            ok: true,
            frozen: Some(FrozenReport {
                gen: *gen,
                drained: true,
                drain_us: 456,
                drained_bytes: 123,
                ..Default::default()
            }),
            ..Default::default()
        },
        _ => Response::ok(),
    })
}

/// The next request other than `Autonomous`... or exactly the next one.
/// No plan reaches the main loop for longer than a refresh period: the
/// agent forgot its plan.
fn assert_plan_forgotten(seen: &Receiver<Request>) {
    thread::sleep(Duration::from_millis(1_500));
    assert!(seen.try_iter().all(|r| !matches!(r, Request::Plan { .. })));
}

fn next_request(seen: &Receiver<Request>) -> Request {
    seen.recv_timeout(Duration::from_secs(10))
        .expect("the agent sent no request to the main loop")
}

// ---- the fake gangd ----

struct Gangd {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
}

/// One accepted agent.
struct Conn {
    session: Arc<Session>,
    reader: std::io::BufReader<SessionReader>,
    /// The node's name, from its certificate.
    node: String,
    hello: FromAgent,
}

impl Gangd {
    /// A gangd with the CA's real certificate.
    fn new(ca: &TestCa) -> Self {
        Self::with_config(ca.server().config())
    }

    /// A gangd presenting whatever `tls` holds (an impostor's).
    fn with_config(tls: Arc<rustls::ServerConfig>) -> Self {
        Self {
            listener: TcpListener::bind("127.0.0.1:0").unwrap(),
            tls,
        }
    }

    fn addr(&self) -> String {
        self.listener.local_addr().unwrap().to_string()
    }

    /// Accepts the next agent and answers its Hello as gangd does, after
    /// the TLS handshake (Err: the handshake failed, and why).
    fn accept(&self, node_id: u32) -> Result<Conn, String> {
        self.listener.set_nonblocking(false).unwrap();
        let (stream, _) = self.listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(self.tls.clone()).unwrap();
        let session = Arc::new(
            gtls::handshake(stream, conn, Instant::now() + Duration::from_secs(10))
                .map_err(|e| e.to_string())?,
        );
        let node = session
            .with_connection(gtls::peer_node)
            .map_err(|e| e.to_string())?;
        let mut reader = std::io::BufReader::new(SessionReader {
            session: session.clone(),
            timeout: Some(Duration::from_secs(10)),
        });
        let hello: FromAgent = read_frame(&mut reader).unwrap().unwrap();
        assert!(
            matches!(hello, FromAgent::Hello { .. }),
            "expected hello, got {hello:?}"
        );
        write_frame(
            &mut SessionWriter(session.clone()),
            &ToAgent::Welcome {
                node_id: NodeId(node_id),
            },
        )
        .unwrap();
        // The node directory, as gangd sends it after the Welcome: nodes
        // 0..4 named node<i>, at 10.0.0.<i + 1>.
        let nodes = (0..4)
            .map(|i| DirEntry(NodeId(i), format!("node{i}"), format!("10.0.0.{}", i + 1)))
            .collect();
        for m in [
            ToAgent::NodeDirectory {
                you: Some(NodeId(node_id)),
                reset: true,
                nodes: Vec::new(),
            },
            ToAgent::NodeDirectory {
                you: None,
                reset: false,
                nodes,
            },
        ] {
            write_frame(&mut SessionWriter(session.clone()), &m).unwrap();
        }
        Ok(Conn {
            session,
            reader,
            node,
            hello,
        })
    }
}

impl Conn {
    fn send(&mut self, msg: ToAgent) {
        write_frame(&mut SessionWriter(self.session.clone()), &msg).unwrap();
    }

    fn send_all(&mut self, msgs: impl IntoIterator<Item = ToAgent>) {
        for m in msgs {
            self.send(m);
        }
    }

    /// The RanksStarted of `job`: its (rank, pid)s.
    fn started(&mut self, job: u64) -> Vec<(u32, u32)> {
        match self.recv() {
            FromAgent::RanksStarted { job: j, ranks } if j == JobId(job) => ranks,
            other => panic!("expected job {job}'s RanksStarted, got {other:?}"),
        }
    }

    /// The next message other than the cluster clock's (ClockProbe and
    /// ClockStatus come every 250 ms to 8 s whatever else happens).
    fn recv(&mut self) -> FromAgent {
        loop {
            match self.recv_any() {
                FromAgent::ClockProbe { .. } | FromAgent::ClockStatus { .. } => {}
                msg => return msg,
            }
        }
    }

    /// The next message, whatever it is.
    fn recv_any(&mut self) -> FromAgent {
        read_frame(&mut self.reader)
            .unwrap()
            .expect("the agent closed the connection")
    }

    /// Echoes every probe as gangd would if its clock were this machine's
    /// plus `ahead_ns`, until the agent reports its clock other than still
    /// synchronising (at once when its state changes, else every 4 s).
    fn echo_until_report(&mut self, ahead_ns: u64) -> gang_wire::proto::ClockReport {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            assert!(std::time::Instant::now() < deadline, "no clock report");
            match self.recv_any() {
                FromAgent::ClockProbe { seq, t1 } => {
                    let t2 = monotonic_ns() + ahead_ns;
                    let t3 = monotonic_ns() + ahead_ns;
                    self.send(ToAgent::ClockEcho { seq, t1, t2, t3 });
                }
                FromAgent::ClockStatus { report } if report.state != ClockState::Unsynchronised => {
                    return report
                }
                FromAgent::ClockStatus { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }

    /// The next probe (answering nothing else).
    fn next_probe(&mut self) -> (u64, u64) {
        loop {
            if let FromAgent::ClockProbe { seq, t1 } = self.recv_any() {
                return (seq, t1);
            }
        }
    }

    /// The rank's messages up to and including its exit: (stdout, stderr,
    /// exit status), checking that all output came before the exit.
    fn rank_until_exit(&mut self, job: JobId, rank: u32) -> (String, String, ExitStatus) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        loop {
            match self.recv() {
                FromAgent::RankOutput {
                    job: j,
                    rank: r,
                    stream,
                    data,
                } if j == job && r == rank => {
                    assert!(data.0.len() <= MAX_OUTPUT_CHUNK);
                    match stream {
                        Stream::Stdout => out.extend(data.0),
                        Stream::Stderr => err.extend(data.0),
                    }
                }
                FromAgent::RankExited {
                    job: j,
                    rank: r,
                    status,
                } if j == job && r == rank => {
                    return (
                        String::from_utf8(out).unwrap(),
                        String::from_utf8(err).unwrap(),
                        status,
                    )
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

/// A running agent; dropping it stops the thread.
struct Running {
    shutdown: Arc<AtomicBool>,
    seen: Receiver<Request>,
    knobs: Arc<SharedKnobs>,
    holds: FreezeHolds,
    cluster_clock: Arc<SharedClusterClock>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }
}

/// Tests run ranks as themselves (root): allowed, with no cgroup limits
/// (the host's cgroup2 may lack the controllers).
const TEST_RULES: RankRules = RankRules {
    min_uid: 0,
    default_limits: gang_wire::proto::JobLimits {
        max_pids: None,
        max_memory: None,
    },
};

/// The workspace's gang-pmix-server (the tests run from target/*/deps).
fn pmix_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap()
    } else {
        dir
    };
    dir.join("gang-pmix-server")
}

fn start_agent(
    node: &str,
    addr: String,
    ca: &TestCa,
    gang_root: Option<PathBuf>,
    answer: Answer,
) -> Running {
    start_agent_with(node, addr, ca, gang_root, answer, TEST_RULES)
}

fn start_agent_with(
    node: &str,
    addr: String,
    ca: &TestCa,
    gang_root: Option<PathBuf>,
    answer: Answer,
    rules: RankRules,
) -> Running {
    capture_log();
    let (inbox, seen) = fake_main_loop(answer);
    let knobs = SharedKnobs::new(NodeKnobs::new(), 4);
    let holds = FreezeHolds::new();
    let shutdown = Arc::new(AtomicBool::new(false));
    let cluster_clock = Arc::new(SharedClusterClock::new());
    start(
        AgentConfig {
            coordinator: addr,
            tls: ca.client(node),
            node: node.into(),
            nr_cpus: 4,
            gang_root,
            pmix_server: Some(pmix_server()),
            knobs: knobs.clone(),
            holds: holds.clone(),
            rules,
            cluster_clock: cluster_clock.clone(),
        },
        inbox,
        shutdown.clone(),
    )
    .unwrap();
    Running {
        shutdown,
        seen,
        knobs,
        holds,
        cluster_clock,
    }
}

fn ids() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// A job of two ranks with rank `rank` on node 1 (the agent the tests
/// accept as node 1) from port 30000, the other on node 0 from 20000.
fn one_rank_here(rank: u32) -> JobMap {
    let mut ranks = [(NodeId(0), 20000); 2];
    ranks[rank as usize] = (NodeId(1), 30000);
    JobMap::from_ranks(&ranks)
}

/// gangd's start of `job` as every node of it gets it: its map
/// (JobPeers), then StartJob, which starts the ranks the map gives the
/// node.
fn start_job(job: u64, map: JobMap, argv: &[&str], env: &[(&str, &str)]) -> [ToAgent; 2] {
    let (uid, gid) = ids();
    let size = map.size;
    [
        ToAgent::JobPeers {
            job: JobId(job),
            map,
        },
        ToAgent::StartJob {
            job: JobId(job),
            name: format!("test{job}"),
            size,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: "/".into(),
            uid,
            gid,
            limits: Default::default(),
        },
    ]
}

/// Rank `rank` of a two-rank job started on the agent as node 1
/// (`one_rank_here`).
fn start_rank(job: u64, rank: u32, argv: &[&str], env: &[(&str, &str)]) -> [ToAgent; 2] {
    start_job(job, one_rank_here(rank), argv, env)
}

// ---- the tests ----

#[test]
fn a_node_of_the_cluster_ca_is_welcomed_by_its_certificate_name_and_heartbeats_carry_its_clock() {
    let ca = TestCa::new("agent1");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("hb-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(4).unwrap();
    assert_eq!(
        conn.node, "hb-node",
        "gangd reads the name from the certificate"
    );
    match &conn.hello {
        FromAgent::Hello {
            nr_cpus,
            housekeeping_cpus,
            agent_version,
            jobs,
            schedule,
        } => {
            assert_eq!(*nr_cpus, 4);
            assert_eq!(housekeeping_cpus, "");
            assert_eq!(agent_version, env!("CARGO_PKG_VERSION"));
            assert!(jobs.is_empty() && schedule.is_empty());
        }
        other => panic!("{other:?}"),
    }
    wait_for_log(&["joined cluster as node 4", "hb-node"]);

    let before = monotonic_ns();
    conn.send(ToAgent::Heartbeat { seq: 9 });
    match conn.recv() {
        FromAgent::Heartbeat { seq, mono_ns } => {
            assert_eq!(seq, 9);
            assert!(
                before <= mono_ns && mono_ns <= monotonic_ns(),
                "the node's CLOCK_MONOTONIC"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// gangd's clock in the clock tests: this machine's, 3.5 s ahead.
const GANGD_AHEAD_NS: u64 = 3_500_000_000;

#[test]
fn the_cluster_clock_converges_on_gangds_within_its_stated_bound_and_is_reported() {
    let ca = TestCa::new("clock1");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("clock-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    // Reported at once when good, then with every probe while young (the
    // probes backing off meanwhile: the bound is small on loopback).
    let first = conn.echo_until_report(GANGD_AHEAD_NS);
    assert_eq!(first.state, ClockState::Good, "{first:?}");
    let report = loop {
        let r = conn.echo_until_report(GANGD_AHEAD_NS);
        if r.samples >= 3 {
            break r;
        }
    };
    assert_eq!(report.state, ClockState::Good, "{report:?}");
    assert_eq!((report.source, report.steps), (ClockSource::Gangd, 0));
    let error = report.offset_ns.abs_diff(GANGD_AHEAD_NS as i64);
    assert!(
        error <= report.error_bound_ns,
        "offset {} is {error} ns off, beyond its bound {} ns",
        report.offset_ns,
        report.error_bound_ns
    );
    // Loopback round trips are well under a millisecond; the bound is
    // half of the best plus drift since it (ms on a loaded test host).
    assert!(report.error_bound_ns < 5_000_000, "{report:?}");
    assert!(report.samples >= 3, "{report:?}");
    // The main loop's view: a local instant for a cluster instant.
    let now = monotonic_ns();
    let (local, bound) = agent
        .cluster_clock
        .to_local(now + GANGD_AHEAD_NS + 1_000_000)
        .unwrap();
    assert!(
        local.abs_diff(now + 1_000_000) <= bound,
        "{local} ± {bound}"
    );
    assert_eq!(agent.cluster_clock.dropped(), 0);
}

/// gangd's plan: refused while the clock is unsynchronised; once it is,
/// converted to this node's clock for the main loop and acked; a command
/// (Switch) forgets it.
#[test]
fn a_plan_is_followed_on_this_nodes_clock_until_a_command_comes() {
    use gang_wire::plan::{Plan, PlannedSlot};
    let ca = TestCa::new("plan1");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("plan-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let plan = |epoch_ns| Plan {
        id: 7,
        epoch_ns,
        slot_ms: 100,
        slots: vec![PlannedSlot { slot: 0 }, PlannedSlot { slot: 1 }],
        first_gen: Gen(40),
    };
    // Before any probe was answered: no clock, no plan.
    let cluster_soon = monotonic_ns() + GANGD_AHEAD_NS + 2_000_000_000;
    conn.send(ToAgent::Plan {
        plan: plan(cluster_soon),
        effective_ns: cluster_soon,
    });
    loop {
        match conn.recv_any() {
            FromAgent::Error { message } => {
                assert!(message.contains("not synchronised"), "{message}");
                break;
            }
            FromAgent::ClockProbe { .. } | FromAgent::ClockStatus { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    let report = conn.echo_until_report(GANGD_AHEAD_NS);
    assert_eq!(report.state, ClockState::Good, "{report:?}");
    let cluster_soon = monotonic_ns() + GANGD_AHEAD_NS + 2_000_000_000;
    conn.send(ToAgent::Plan {
        plan: plan(cluster_soon),
        effective_ns: cluster_soon,
    });
    assert_eq!(conn.recv(), FromAgent::PlanAck { plan_id: 7 });
    let local_soon = cluster_soon - GANGD_AHEAD_NS;
    match next_request(&agent.seen) {
        Request::Plan {
            plan: p,
            effective_ns,
            strict,
            ..
        } => {
            let slack = report.error_bound_ns + 1_000_000;
            assert!(p.epoch_ns.abs_diff(local_soon) <= slack, "{p:?}");
            assert!(effective_ns.abs_diff(local_soon) <= slack);
            assert_eq!((p.id, p.first_gen, p.slot_ms), (7, Gen(40), 100));
            assert!(strict, "gangd's barrier is strict until it says");
        }
        other => panic!("{other:?}"),
    }
    // Refreshed every second: the same plan again.
    assert!(matches!(next_request(&agent.seen), Request::Plan { .. }));
    conn.send(ToAgent::Switch {
        gen: Gen(39),
        slot: 1,
        slot_ms: 100,
    });
    loop {
        match next_request(&agent.seen) {
            Request::Plan { .. } => continue,
            Request::Switch { gen, .. } => {
                assert_eq!(gen, 39);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_plan_forgotten(&agent.seen);
}

/// The cluster's last job ended: gangd's Schedule of no slot ends the plan
/// (the main loop is told Unplan and refreshes stop), so an idle node does
/// not arm every boundary into a slot its table no longer has.
#[test]
fn a_schedule_of_no_slot_ends_the_plan() {
    use gang_wire::plan::{Plan, PlannedSlot};
    let ca = TestCa::new("plan-end");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("plan-end-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let report = conn.echo_until_report(GANGD_AHEAD_NS);
    assert_eq!(report.state, ClockState::Good, "{report:?}");
    let cluster_soon = monotonic_ns() + GANGD_AHEAD_NS + 2_000_000_000;
    conn.send(ToAgent::Plan {
        plan: Plan {
            id: 3,
            epoch_ns: cluster_soon,
            slot_ms: 100,
            slots: vec![PlannedSlot { slot: 0 }, PlannedSlot { slot: 1 }],
            first_gen: Gen(1),
        },
        effective_ns: cluster_soon,
    });
    assert_eq!(conn.recv(), FromAgent::PlanAck { plan_id: 3 });
    assert!(matches!(next_request(&agent.seen), Request::Plan { .. }));
    conn.send(ToAgent::Schedule { slots: vec![] });
    loop {
        match next_request(&agent.seen) {
            Request::Plan { .. } => continue,
            Request::Unplan => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        matches!(next_request(&agent.seen), Request::Column { slots } if slots.is_empty()),
        "the empty column is installed after the plan ended"
    );
    assert_plan_forgotten(&agent.seen);
}

#[test]
fn a_new_connection_is_a_new_gangd_clock_estimated_from_scratch() {
    let ca = TestCa::new("clock4");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("clock-again", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let first = conn.echo_until_report(GANGD_AHEAD_NS);
    assert_eq!(first.state, ClockState::Good, "{first:?}");
    drop(conn);
    // Another gangd, 2 s further ahead: not a step of the old one.
    let mut conn = gangd.accept(1).unwrap();
    let ahead = GANGD_AHEAD_NS + 2_000_000_000;
    let second = conn.echo_until_report(ahead);
    assert_eq!(
        (second.state, second.steps),
        (ClockState::Good, 0),
        "{second:?}"
    );
    assert!(
        second.offset_ns.abs_diff(ahead as i64) <= second.error_bound_ns,
        "{second:?}"
    );
    assert_eq!(agent.cluster_clock.dropped(), 0);
}

#[test]
fn absurd_clock_echoes_are_dropped_and_counted_not_fed() {
    let ca = TestCa::new("clock2");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("clock-bad", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let (seq, t1) = conn.next_probe();
    let t2 = monotonic_ns() + GANGD_AHEAD_NS;
    // Answered before it was received; a probe never sent; not our t1.
    conn.send(ToAgent::ClockEcho {
        seq,
        t1,
        t2,
        t3: t2 - 1,
    });
    conn.send(ToAgent::ClockEcho {
        seq: seq + 1_000_000,
        t1,
        t2,
        t3: t2,
    });
    let (seq, t1) = conn.next_probe();
    conn.send(ToAgent::ClockEcho {
        seq,
        t1: t1 + 1,
        t2,
        t3: t2,
    });
    // gangd's echo of the real probe after the refusals would be fine;
    // a replay of the refused one is not (its probe is answered).
    conn.send(ToAgent::ClockEcho {
        seq,
        t1,
        t2,
        t3: t2 - 1,
    });
    conn.send(ToAgent::Heartbeat { seq: 77 });
    assert!(
        matches!(conn.recv(), FromAgent::Heartbeat { seq: 77, .. }),
        "the connection goes on"
    );
    assert_eq!(agent.cluster_clock.dropped(), 4);
    assert_eq!(
        agent.cluster_clock.report(monotonic_ns()).state,
        ClockState::Unsynchronised,
        "nothing was fed"
    );
    wait_for_log(&["clock echo", "dropped"]);
}

#[test]
fn with_the_realtime_clock_knob_no_probes_go_out() {
    let ca = TestCa::new("clock3");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("clock-rt", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Knobs {
        slot_ms: 100,
        drain_timeout_ms: 100,
        barrier: gang_wire::proto::Barrier::Strict,
        fill: true,
        clock: ClockSource::Realtime,
        clock_error_us: 40,
    });
    wait_for_log(&["cluster clock is Realtime"]);
    // A probe and a report (Unsynchronised: the prober probes as soon as
    // the link is up) sent before the knob arrived may still come; then
    // the report of the new source, and no probe.
    let report = loop {
        match conn.recv_any() {
            FromAgent::ClockStatus { report } if report.source == ClockSource::Gangd => {
                assert_eq!(report.state, ClockState::Unsynchronised, "{report:?}");
            }
            FromAgent::ClockStatus { report } => break report,
            _ => {}
        }
    };
    assert_eq!(
        (report.source, report.state, report.error_bound_ns),
        (ClockSource::Realtime, ClockState::Good, 40_000)
    );
    conn.send(ToAgent::Heartbeat { seq: 1 });
    loop {
        match conn.recv_any() {
            FromAgent::Heartbeat { seq: 1, .. } => break,
            FromAgent::ClockProbe { .. } => panic!("a probe with clock = realtime"),
            _ => {}
        }
    }
    assert_eq!(agent.cluster_clock.source(), ClockSource::Realtime);
}

/// The attack of the issue: a user binds gangd's port while gangd is away
/// and answers the agent. With anything but gangd's certificate from the
/// cluster CA the agent stops at the TLS handshake, sends no Hello, obeys
/// nothing, says why in its log, and tries again later.
#[test]
fn an_impostor_gangd_is_refused_at_the_handshake_logged_and_retried() {
    let ca = TestCa::new("agent2");
    let other = TestCa::new("agent2-other");
    let node_dir = ca.node_dir("victim-node");
    let impostors = [
        // gangd's certificate of another CA (a self-made "cluster").
        (
            "another CA's gangd",
            other.server().config(),
            "invalid peer certificate",
        ),
        // A node's own certificate of the right CA: it names the node, not
        // gangd, and is for clients only.
        (
            "a node's certificate",
            tls_testing::impostor_config(
                &node_dir.join("ca.crt"),
                &node_dir.join("node.crt"),
                &node_dir.join("node.key"),
            ),
            "invalid peer certificate",
        ),
    ];
    for (what, config, why) in impostors {
        let fake = Gangd::with_config(config);
        let agent = start_agent("victim-node", fake.addr(), &ca, None, accept_all());
        let first = Instant::now();
        let err = fake
            .accept(1)
            .err()
            .unwrap_or_else(|| panic!("{what}: the agent completed a handshake with an impostor"));
        assert!(!err.is_empty());
        wait_for_log(&[&fake.addr(), "TLS handshake", why]);
        assert!(fake.accept(1).is_err(), "{what}: the agent tries again");
        assert!(
            first.elapsed() >= Duration::from_millis(150),
            "{what}: after a pause"
        );
        assert!(
            agent.seen.try_recv().is_err(),
            "{what}: nothing reached the node's main loop"
        );
        drop(agent);
    }
}

/// A node whose certificate is not the cluster's is refused by gangd, and
/// never learns anything but the refusal.
#[test]
fn a_node_with_another_cas_certificate_is_refused_by_gangd() {
    let ca = TestCa::new("agent3");
    let other = TestCa::new("agent3-other");
    let gangd = Gangd::new(&ca);
    // The node trusts gangd's CA but holds another CA's certificate.
    let mixed = ca.root.join("mixed");
    gang_wire::proto::tls::testing::copy_dir(&other.node_dir("rogue"), &mixed);
    std::fs::copy(ca.dir().join("ca.crt"), mixed.join("ca.crt")).unwrap();
    capture_log();
    let (inbox, seen) = fake_main_loop(accept_all());
    let shutdown = Arc::new(AtomicBool::new(false));
    let tls = Arc::new(gtls::ClientTls::load(&mixed).unwrap());
    start(
        AgentConfig {
            coordinator: gangd.addr(),
            tls,
            node: "rogue".into(),
            nr_cpus: 4,
            gang_root: None,
            pmix_server: None,
            knobs: SharedKnobs::new(NodeKnobs::new(), 4),
            holds: FreezeHolds::new(),
            rules: TEST_RULES,
            cluster_clock: Arc::new(SharedClusterClock::new()),
        },
        inbox,
        shutdown.clone(),
    )
    .unwrap();
    let err = gangd.accept(1).err().expect("gangd must refuse it");
    assert!(
        err.contains("UnknownIssuer") || err.contains("certificate"),
        "{err}"
    );
    // TLS 1.3: the node's handshake ends before gangd has checked its
    // certificate, so the refusal arrives as an alert on the first read.
    wait_for_log(&[&gangd.addr(), "cannot join", "UnknownCA"]);
    assert!(seen.try_recv().is_err());
    shutdown.store(true, Ordering::Relaxed);
}

#[test]
fn prepare_names_a_missing_program_or_cwd() {
    let ca = TestCa::new("agent4");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("prep-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let mut prepare = |argv: &str, cwd: &str| {
        conn.send(ToAgent::Prepare {
            job: JobId(11),
            argv: vec![argv.into(), "-c".into(), "true".into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: cwd.into(),
            uid: 0,
            gid: 0,
        });
        match conn.recv() {
            FromAgent::Prepared { job, error } => {
                assert_eq!(job, JobId(11));
                error
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        prepare("/bin/nope", "/").as_deref(),
        Some("prep-node: /bin/nope: no such file")
    );
    assert_eq!(
        prepare("/bin/sh", "/no/such/dir").as_deref(),
        Some("prep-node: cwd /no/such/dir: no such directory")
    );
    assert_eq!(prepare("/bin/sh", "/"), None);
    assert_eq!(prepare("sh", "/tmp"), None, "found in the job's PATH");
}

#[test]
fn schedule_switch_and_freeze_go_through_the_main_loop() {
    let ca = TestCa::new("agent5");
    let gangd = Gangd::new(&ca);
    let answer: Answer = Box::new(|r| match r {
        Request::Column { slots } if slots.iter().flatten().any(|p| p.cpus == "99") => {
            Response::error("CPU 99 does not exist (this node has 4 CPUs)")
        }
        r => accept_all()(r),
    });
    let agent = start_agent("sched-node", gangd.addr(), &ca, None, answer);
    let mut conn = gangd.accept(2).unwrap();

    let slots = vec![
        vec![Placement {
            job: JobId(5),
            cpus: "0-1".into(),
        }],
        vec![],
    ];
    conn.send(ToAgent::Schedule {
        slots: slots.clone(),
    });
    conn.send(ToAgent::Switch {
        gen: Gen(3),
        slot: 1,
        slot_ms: 40,
    });
    match conn.recv() {
        FromAgent::Running {
            gen,
            slot,
            switch_us,
        } => {
            assert_eq!((gen, slot), (Gen(3), 1));
            assert!(switch_us < 5_000_000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        next_request(&agent.seen),
        Request::Column {
            slots: vec![
                vec![control::GangCpus {
                    gang: "job5".into(),
                    cpus: "0-1".into()
                }],
                vec![]
            ]
        }
    );
    assert_eq!(
        next_request(&agent.seen),
        Request::Switch {
            slot: 1,
            gen: 3,
            slot_ms: 40,
            at_ns: 0,
        }
    );

    conn.send(ToAgent::Freeze {
        gen: Gen(4),
        from_slot: 1,
        to_slot: 0,
        drain_timeout_ms: 50,
    });
    match conn.recv() {
        FromAgent::Frozen { gen, slot, report } => {
            assert_eq!(
                (gen, slot, report.drained_bytes, report.drain_us),
                (Gen(4), 1, 123, 456)
            );
            assert!(!report.timed_out);
            assert!(report.answer_us < 5_000_000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        next_request(&agent.seen),
        Request::Freeze {
            gen: 4,
            drain_timeout_ms: 50,
            to_slot: Some(0),
        }
    );

    conn.send(ToAgent::Schedule {
        slots: vec![vec![Placement {
            job: JobId(6),
            cpus: "99".into(),
        }]],
    });
    match conn.recv() {
        FromAgent::Error { message } => {
            assert!(
                message.starts_with("sched-node: schedule refused"),
                "{message}"
            );
            assert!(message.contains("CPU 99 does not exist"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(next_request(&agent.seen), Request::Column { .. }));

    // A refused schedule is not the last schedule: Hello still has the first.
    drop(conn);
    wait_for_log(&["lost gangd", "gangd closed the connection"]);
    assert_eq!(next_request(&agent.seen), Request::Autonomous);
    let conn = gangd.accept(2).unwrap();
    match conn.hello {
        FromAgent::Hello { schedule, .. } => assert_eq!(schedule, slots),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_freeze_is_still_answered() {
    let ca = TestCa::new("agent6");
    let gangd = Gangd::new(&ca);
    let answer: Answer = Box::new(|r| match r {
        Request::Freeze { .. } => Response::error("freeze: cgroup.freeze: Permission denied"),
        _ => Response::ok(),
    });
    let _agent = start_agent("freeze-node", gangd.addr(), &ca, None, answer);
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Freeze {
        gen: Gen(8),
        from_slot: 0,
        to_slot: 1,
        drain_timeout_ms: 10,
    });
    match conn.recv() {
        FromAgent::Error { message } => assert!(message.contains("Permission denied"), "{message}"),
        other => panic!("{other:?}"),
    }
    match conn.recv() {
        FromAgent::Frozen { gen, slot, report } => assert_eq!(
            (gen, slot, report.timed_out, report.drained_bytes),
            (Gen(8), 0, true, 0)
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn knobs_from_gangd_become_the_node_knobs() {
    let ca = TestCa::new("agent7");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("knob-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Knobs {
        slot_ms: 30,
        drain_timeout_ms: 100,
        barrier: gang_wire::proto::Barrier::Strict,
        fill: true,
        clock: Default::default(),
        clock_error_us: 0,
    });
    conn.send(ToAgent::Heartbeat { seq: 1 });
    assert!(matches!(conn.recv(), FromAgent::Heartbeat { seq: 1, .. }));
    let k = agent.knobs.snapshot();
    assert_eq!((k.slot_ms, k.fill), (30, true));
    assert_eq!(agent.knobs.generation(), 2, "two knob writes");
    // The same values again change nothing (no needless wake-up).
    conn.send(ToAgent::Knobs {
        slot_ms: 30,
        drain_timeout_ms: 100,
        barrier: gang_wire::proto::Barrier::Off,
        fill: true,
        clock: Default::default(),
        clock_error_us: 0,
    });
    conn.send(ToAgent::Heartbeat { seq: 2 });
    assert!(matches!(conn.recv(), FromAgent::Heartbeat { seq: 2, .. }));
    assert_eq!(agent.knobs.generation(), 2);
}

fn big_trace() -> RawTrace {
    RawTrace {
        meta: TraceMeta {
            nr_cpus: 4,
            gang_names: [(0, "job1".to_string())].into_iter().collect(),
            start_ns: 1,
            end_ns: 2,
            node: "n".into(),
        },
        events: (0..3000)
            .map(|i| TraceEvent {
                ts_ns: i,
                gen: i,
                kind: EventKind::Run,
                cpu: 1,
                gang: 0,
                slot: 0,
                cause: 0,
                flags: 0,
            })
            .collect(),
    }
}

#[test]
fn a_trace_comes_back_in_chunks() {
    let ca = TestCa::new("agent8");
    let gangd = Gangd::new(&ca);
    let answer: Answer = Box::new(|r| match r {
        Request::Trace { seconds } if *seconds == 0.25 => Response {
            ok: true,
            trace: Some(big_trace()),
            ..Default::default()
        },
        Request::Trace { .. } => Response::error("seconds must be in (0, 600]"),
        _ => Response::ok(),
    });
    let agent = start_agent("trace-node", gangd.addr(), &ca, None, answer);
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Trace { id: 77, ms: 250 });
    // The link stays responsive while the trace is recorded.
    conn.send(ToAgent::Heartbeat { seq: 3 });
    let mut data = Vec::new();
    let mut chunks = 0;
    loop {
        match conn.recv() {
            FromAgent::Heartbeat { .. } => {}
            FromAgent::TraceChunk { id, data: d, last } => {
                assert_eq!(id, 77);
                assert!(d.0.len() <= MAX_OUTPUT_CHUNK);
                data.extend(d.0);
                chunks += 1;
                if last {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(chunks > 1, "{} bytes in {chunks} chunks", data.len());
    let got: RawTrace = serde_json::from_slice(&data).unwrap();
    assert_eq!(got, big_trace());
    assert_eq!(next_request(&agent.seen), Request::Trace { seconds: 0.25 });

    conn.send(ToAgent::Trace {
        id: 78,
        ms: 1_000_000_000,
    });
    match conn.recv() {
        FromAgent::Error { message } => assert!(message.contains("trace failed"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        conn.recv(),
        FromAgent::TraceChunk {
            id: 78,
            data: Bytes::default(),
            last: true
        }
    );
}

#[test]
fn a_second_trace_is_refused_while_one_is_recorded() {
    let ca = TestCa::new("agent8b");
    let gangd = Gangd::new(&ca);
    let answer: Answer = Box::new(|r| match r {
        Request::Trace { seconds } => {
            thread::sleep(Duration::from_secs_f64(*seconds));
            Response {
                ok: true,
                trace: Some(big_trace()),
                ..Default::default()
            }
        }
        _ => Response::ok(),
    });
    let _agent = start_agent("trace-once", gangd.addr(), &ca, None, answer);
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Trace { id: 1, ms: 600 });
    conn.send(ToAgent::Trace { id: 2, ms: 600 });
    match conn.recv() {
        FromAgent::Error { message } => assert!(message.contains("already"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        conn.recv(),
        FromAgent::TraceChunk {
            id: 2,
            data: Bytes::default(),
            last: true
        }
    );
    // The first one completes, and frees the node's trace slot.
    while !matches!(
        conn.recv(),
        FromAgent::TraceChunk {
            id: 1,
            last: true,
            ..
        }
    ) {}
    conn.send(ToAgent::Trace { id: 3, ms: 10 });
    loop {
        match conn.recv() {
            FromAgent::TraceChunk {
                id: 3,
                last: true,
                data,
            } => {
                assert!(!data.0.is_empty());
                break;
            }
            FromAgent::TraceChunk { id: 3, .. } => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn ranks_get_their_environment_and_report_output_then_exit() {
    let ca = TestCa::new("agent9");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("rank-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let script = r#"echo "$GANG_RANK $GANG_SIZE $GANG_JOB $GANG_JOB_NAME $GANG_NODE $GANG_PEERS $GANG_PORT $FOO ${HOME-nohome} $0"; [ "$(cut -d' ' -f6 /proc/$$/stat)" = $$ ] && echo own-session; echo oops >&2; exit 3"#;
    conn.send_all(start_rank(
        7,
        1,
        &["sh", "-c", script, "argv0"],
        &[("FOO", "bar"), ("PATH", "/usr/bin:/bin")],
    ));
    let started = conn.started(7);
    assert!(matches!(started[..], [(1, pid)] if pid > 0), "{started:?}");
    let (out, err, status) = conn.rank_until_exit(JobId(7), 1);
    assert_eq!(
        out,
        "1 2 7 test7 rank-node 10.0.0.1:20000,10.0.0.2:30000 30000 bar nohome argv0\nown-session\n"
    );
    assert_eq!(err, "oops\n");
    assert_eq!(status, ExitStatus::Exited(3));
    wait_for_log(&["job 7 rank 1", "exited with code 3"]);

    // Output larger than a chunk comes in chunks, all before the exit.
    conn.send_all(start_rank(
        8,
        0,
        &["/bin/sh", "-c", "head -c 200000 /dev/zero"],
        &[],
    ));
    conn.started(8);
    let (out, _, status) = conn.rank_until_exit(JobId(8), 0);
    assert_eq!(out.len(), 200_000);
    assert_eq!(status, ExitStatus::Exited(0));
}

#[test]
fn a_rank_that_cannot_start_exits_127_with_the_reason() {
    let ca = TestCa::new("agent10");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("bad-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send_all(start_rank(3, 0, &["/no/such/program"], &[]));
    match conn.recv() {
        FromAgent::Error { message } => assert_eq!(
            message,
            "bad-node: job 3 rank 0: /no/such/program: no such file"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        conn.recv(),
        FromAgent::RankExited {
            job: JobId(3),
            rank: 0,
            status: ExitStatus::Exited(127)
        }
    );
}

#[test]
fn ranks_outlive_gangd_and_are_reported_to_the_next_one() {
    let ca = TestCa::new("agent11");
    let gangd = Gangd::new(&ca);
    let agent = start_agent("keep-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Schedule {
        slots: vec![vec![Placement {
            job: JobId(21),
            cpus: "1".into(),
        }]],
    });
    // Prints once gangd is gone, then waits for a signal.
    conn.send_all(start_rank(
        21,
        0,
        &[
            "/bin/sh",
            "-c",
            "trap 'echo term; exit 5' TERM; sleep 0.5; echo while-away; while :; do sleep 0.05; done",
        ],
        &[],
    ));
    conn.started(21);
    assert!(matches!(next_request(&agent.seen), Request::Column { .. }));
    drop(conn);
    assert_eq!(next_request(&agent.seen), Request::Autonomous);
    wait_for_log(&["rotating the last schedule"]);
    std::thread::sleep(Duration::from_millis(800));

    let mut conn = gangd.accept(1).unwrap();
    match &conn.hello {
        FromAgent::Hello { jobs, schedule, .. } => {
            assert_eq!(
                *jobs,
                vec![LiveJob {
                    job: JobId(21),
                    name: "test21".into(),
                    size: 2,
                    uid: ids().0,
                    gid: ids().1,
                    ranks: vec![0],
                }]
            );
            assert_eq!(schedule.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    // What it printed while gangd was away comes after the Welcome.
    conn.send(ToAgent::KillJob {
        job: JobId(21),
        signal: libc::SIGTERM,
    });
    let (out, _, status) = conn.rank_until_exit(JobId(21), 0);
    assert_eq!(out, "while-away\nterm\n");
    assert_eq!(status, ExitStatus::Exited(5));

    // A rank killed by a signal it does not handle.
    conn.send_all(start_rank(
        22,
        1,
        &["sleep", "30"],
        &[("PATH", "/bin:/usr/bin")],
    ));
    conn.started(22);
    conn.send(ToAgent::KillJob {
        job: JobId(22),
        signal: libc::SIGKILL,
    });
    let (_, _, status) = conn.rank_until_exit(JobId(22), 1);
    assert_eq!(status, ExitStatus::Signaled(libc::SIGKILL));
}

fn wait_gone(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() {
        assert!(
            Instant::now() < deadline,
            "the job's cgroup {} was not removed",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A writable cgroup2 mount, if the host has one.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })?;
    let probe = mount.join(format!("scx-gang-probe-{}", std::process::id()));
    fs::create_dir(&probe).ok()?;
    let _ = fs::remove_dir(&probe);
    Some(mount)
}

#[test]
fn ranks_run_in_their_job_cgroup_which_goes_with_the_last_rank() {
    let Some(mount) = cgroup2_mount() else {
        eprintln!("no writable cgroup2 here: cgroup placement not tested");
        return;
    };
    let root = mount.join(format!("scx-gang-agent-test-{}", std::process::id()));
    let ca = TestCa::new("agent12");
    let gangd = Gangd::new(&ca);
    let agent = start_agent(
        "cg-node",
        gangd.addr(),
        &ca,
        Some(root.clone()),
        accept_all(),
    );
    let mut conn = gangd.accept(1).unwrap();
    let job_dir = root.join("job31");

    conn.send_all(start_rank(31, 0, &["/bin/cat", "/proc/self/cgroup"], &[]));
    conn.started(31);
    let (out, _, status) = conn.rank_until_exit(JobId(31), 0);
    assert_eq!(status, ExitStatus::Exited(0));
    let rel = job_dir.strip_prefix(&mount).unwrap();
    assert!(
        out.lines()
            .any(|l| l.starts_with("0::/") && l.ends_with(&format!("{}", rel.display()))),
        "in the job's cgroup from its first instruction: {out}"
    );
    wait_gone(&job_dir);

    // Suspend / resume / a signal to a suspended job.
    conn.send_all(start_rank(
        32,
        0,
        &[
            "/bin/sh",
            "-c",
            "trap 'exit 4' TERM; echo trapped; while :; do sleep 0.05; done",
        ],
        &[],
    ));
    conn.started(32);
    // Its trap is set before it is suspended.
    match conn.recv() {
        FromAgent::RankOutput { data, .. } => assert_eq!(data.0, b"trapped\n"),
        other => panic!("{other:?}"),
    }
    let dir = root.join("job32");
    let freeze = || fs::read_to_string(dir.join("cgroup.freeze")).unwrap();
    // Job actions run on the job worker, in order, after the reader.
    let settles = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while freeze().trim() != want {
            assert!(Instant::now() < deadline, "cgroup.freeze never {want}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    conn.send(ToAgent::SuspendJob { job: JobId(32) });
    settles("1");
    assert!(agent.holds.is_suspended(&dir));
    conn.send(ToAgent::ResumeJob { job: JobId(32) });
    settles("0");
    conn.send(ToAgent::SuspendJob { job: JobId(32) });
    conn.send(ToAgent::KillJob {
        job: JobId(32),
        signal: libc::SIGTERM,
    });
    let (_, _, status) = conn.rank_until_exit(JobId(32), 0);
    assert_eq!(status, ExitStatus::Exited(4), "thawed to handle SIGTERM");
    assert!(!agent.holds.is_suspended(&dir));
    wait_gone(&dir);

    // What a rank leaves behind is killed with the job's last rank.
    conn.send_all(start_rank(
        33,
        0,
        &["/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
        &[],
    ));
    conn.started(33);
    let (out, _, status) = conn.rank_until_exit(JobId(33), 0);
    assert_eq!(status, ExitStatus::Exited(0));
    wait_gone(&root.join("job33"));
    let leftover = out.trim();
    assert!(
        !Path::new(&format!("/proc/{leftover}")).exists()
            || fs::read_to_string(format!("/proc/{leftover}/stat"))
                .is_ok_and(|s| s.contains(") Z")),
        "the leftover sleep {leftover} was killed"
    );
    let _ = fs::remove_dir(&root);
}
