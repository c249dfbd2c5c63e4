//! The agent against a fake gangd on loopback and a fake scheduler main
//! loop: no BPF, no root needed (except the cgroup test, which runs only
//! where a writable cgroup2 is mounted).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use gang_coordinator::proto::auth::{self, ClusterKey};
use gang_coordinator::proto::{
    read_frame, write_frame, Bytes, ExitStatus, FromAgent, Gen, JobId, LiveJob, NodeId, Placement,
    Stream, ToAgent, MAX_OUTPUT_CHUNK,
};
use gang_coordinator::trace::{EventKind, TraceEvent, TraceMeta};

use super::*;
use crate::control::{self, FrozenReport, Inbox, RawTrace, Request, Response};
use crate::knobs::NodeKnobs;

// ---- a log that tests can read ----

struct Capture(Mutex<Vec<String>>);

static LOG: Capture = Capture(Mutex::new(Vec::new()));

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(format!("{}", r.args()));
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
                queued_bytes: 123,
                ..Default::default()
            }),
            ..Default::default()
        },
        _ => Response::ok(),
    })
}

/// The next request other than `Rotate`... or exactly the next one.
fn next_request(seen: &Receiver<Request>) -> Request {
    seen.recv_timeout(Duration::from_secs(10))
        .expect("the agent sent no request to the main loop")
}

// ---- the fake gangd ----

fn key(byte: u8) -> ClusterKey {
    ClusterKey::from_bytes(vec![byte; 32]).unwrap()
}

struct Gangd {
    listener: TcpListener,
    key: ClusterKey,
}

/// One accepted agent.
struct Conn {
    stream: TcpStream,
    hello: FromAgent,
}

impl Gangd {
    fn new(key: ClusterKey) -> Self {
        Self {
            listener: TcpListener::bind("127.0.0.1:0").unwrap(),
            key,
        }
    }

    fn addr(&self) -> String {
        self.listener.local_addr().unwrap().to_string()
    }

    /// Accepts the next agent, challenges it, and answers its Hello as
    /// gangd does: Welcome if the proof holds, else Refused and close.
    fn accept(&self, node_id: u32) -> Result<Conn, String> {
        self.listener.set_nonblocking(false).unwrap();
        let (mut stream, _) = self.listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let nonce = auth::new_nonce().unwrap();
        write_frame(
            &mut stream,
            &ToAgent::Challenge {
                nonce: Bytes(nonce.to_vec()),
            },
        )
        .unwrap();
        let hello: FromAgent = read_frame(&mut stream).unwrap().unwrap();
        let FromAgent::Hello {
            ref node,
            ref proof,
            ..
        } = hello
        else {
            panic!("expected hello, got {hello:?}");
        };
        if !auth::verify(&self.key, &nonce, node, &proof.0) {
            let reason = "bad proof: wrong cluster key".to_string();
            write_frame(
                &mut stream,
                &ToAgent::Refused {
                    reason: reason.clone(),
                },
            )
            .unwrap();
            return Err(reason);
        }
        write_frame(
            &mut stream,
            &ToAgent::Welcome {
                node_id: NodeId(node_id),
            },
        )
        .unwrap();
        Ok(Conn { stream, hello })
    }
}

impl Conn {
    fn send(&mut self, msg: ToAgent) {
        write_frame(&mut self.stream, &msg).unwrap();
    }

    fn recv(&mut self) -> FromAgent {
        read_frame(&mut self.stream)
            .unwrap()
            .expect("the agent closed the connection")
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
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }
}

fn start_agent(
    node: &str,
    addr: String,
    key: ClusterKey,
    gang_root: Option<PathBuf>,
    answer: Answer,
) -> Running {
    capture_log();
    let (inbox, seen) = fake_main_loop(answer);
    let knobs = SharedKnobs::new(NodeKnobs::new(), 4);
    let holds = FreezeHolds::new();
    let shutdown = Arc::new(AtomicBool::new(false));
    start(
        AgentConfig {
            coordinator: addr,
            key,
            node: node.into(),
            nr_cpus: 4,
            gang_root,
            knobs: knobs.clone(),
            holds: holds.clone(),
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
    }
}

fn ids() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

fn spawn_rank(job: u64, rank: u32, argv: &[&str], env: &[(&str, &str)]) -> ToAgent {
    let (uid, gid) = ids();
    ToAgent::SpawnRank {
        job: JobId(job),
        name: format!("test{job}"),
        rank,
        size: 2,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        cwd: "/".into(),
        uid,
        gid,
        peers: vec!["h1:100".into(), "h2:200".into()],
    }
}

// ---- the tests ----

#[test]
fn a_good_key_is_welcomed_and_heartbeats_are_echoed_with_the_clock() {
    let gangd = Gangd::new(key(1));
    let _agent = start_agent("hb-node", gangd.addr(), key(1), None, accept_all());
    let mut conn = gangd.accept(4).unwrap();
    match &conn.hello {
        FromAgent::Hello {
            node,
            nr_cpus,
            housekeeping_cpus,
            agent_version,
            jobs,
            schedule,
            ..
        } => {
            assert_eq!(node, "hb-node");
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

#[test]
fn a_wrong_key_is_refused_logged_and_retried() {
    let gangd = Gangd::new(key(2));
    let _agent = start_agent("wrong-key-node", gangd.addr(), key(3), None, accept_all());
    let first = Instant::now();
    assert!(gangd.accept(1).is_err());
    wait_for_log(&["refused node wrong-key-node", "wrong cluster key"]);
    assert!(gangd.accept(1).is_err(), "the agent tries again");
    assert!(
        first.elapsed() >= Duration::from_millis(150),
        "after a pause"
    );
}

#[test]
fn prepare_names_a_missing_program_or_cwd() {
    let gangd = Gangd::new(key(4));
    let _agent = start_agent("prep-node", gangd.addr(), key(4), None, accept_all());
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
    let gangd = Gangd::new(key(5));
    let answer: Answer = Box::new(|r| match r {
        Request::Column { slots } if slots.iter().flatten().any(|p| p.cpus == "99") => {
            Response::error("CPU 99 does not exist (this node has 4 CPUs)")
        }
        r => accept_all()(r),
    });
    let agent = start_agent("sched-node", gangd.addr(), key(5), None, answer);
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
                vec![control::Placement {
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
            slot_ms: 40
        }
    );

    conn.send(ToAgent::Freeze {
        gen: Gen(4),
        from_slot: 1,
        to_slot: 0,
        drain_timeout_ms: 50,
    });
    match conn.recv() {
        FromAgent::Frozen {
            gen,
            slot,
            drained_bytes,
            drain_us,
            timed_out,
            freeze_us,
        } => {
            assert_eq!((gen, slot, drained_bytes, drain_us), (Gen(4), 1, 123, 456));
            assert!(!timed_out);
            assert!(freeze_us < 5_000_000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        next_request(&agent.seen),
        Request::Freeze {
            gen: 4,
            drain_timeout_ms: 50
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
    assert_eq!(next_request(&agent.seen), Request::Rotate);
    let conn = gangd.accept(2).unwrap();
    match conn.hello {
        FromAgent::Hello { schedule, .. } => assert_eq!(schedule, slots),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_freeze_is_still_answered() {
    let gangd = Gangd::new(key(6));
    let answer: Answer = Box::new(|r| match r {
        Request::Freeze { .. } => Response::error("freeze: cgroup.freeze: Permission denied"),
        _ => Response::ok(),
    });
    let _agent = start_agent("freeze-node", gangd.addr(), key(6), None, answer);
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
        FromAgent::Frozen {
            gen,
            slot,
            timed_out,
            drained_bytes,
            ..
        } => assert_eq!((gen, slot, timed_out, drained_bytes), (Gen(8), 0, true, 0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn knobs_from_gangd_become_the_node_knobs() {
    let gangd = Gangd::new(key(7));
    let agent = start_agent("knob-node", gangd.addr(), key(7), None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Knobs {
        slot_ms: 30,
        drain_timeout_ms: 100,
        barrier: gang_coordinator::proto::Barrier::Strict,
        fill: true,
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
        barrier: gang_coordinator::proto::Barrier::Off,
        fill: true,
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
    let gangd = Gangd::new(key(8));
    let answer: Answer = Box::new(|r| match r {
        Request::Trace { seconds } if *seconds == 0.25 => Response {
            ok: true,
            trace: Some(big_trace()),
            ..Default::default()
        },
        Request::Trace { .. } => Response::error("seconds must be in (0, 600]"),
        _ => Response::ok(),
    });
    let agent = start_agent("trace-node", gangd.addr(), key(8), None, answer);
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
fn ranks_get_their_environment_and_report_output_then_exit() {
    let gangd = Gangd::new(key(9));
    let _agent = start_agent("rank-node", gangd.addr(), key(9), None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let script = r#"echo "$GANG_RANK $GANG_SIZE $GANG_JOB $GANG_JOB_NAME $GANG_NODE $GANG_PEERS $GANG_PORT $FOO ${HOME-nohome} $0"; [ "$(cut -d' ' -f6 /proc/$$/stat)" = $$ ] && echo own-session; echo oops >&2; exit 3"#;
    conn.send(spawn_rank(
        7,
        1,
        &["sh", "-c", script, "argv0"],
        &[("FOO", "bar"), ("PATH", "/usr/bin:/bin")],
    ));
    let pid = match conn.recv() {
        FromAgent::RankStarted { job, rank, pid } => {
            assert_eq!((job, rank), (JobId(7), 1));
            pid
        }
        other => panic!("{other:?}"),
    };
    assert!(pid > 0);
    let (out, err, status) = conn.rank_until_exit(JobId(7), 1);
    assert_eq!(
        out,
        "1 2 7 test7 rank-node h1:100,h2:200 200 bar nohome argv0\nown-session\n"
    );
    assert_eq!(err, "oops\n");
    assert_eq!(status, ExitStatus::Exited(3));
    wait_for_log(&["job 7 rank 1", "exited 3"]);

    // Output larger than a chunk comes in chunks, all before the exit.
    conn.send(spawn_rank(
        8,
        0,
        &["/bin/sh", "-c", "head -c 200000 /dev/zero"],
        &[],
    ));
    assert!(matches!(conn.recv(), FromAgent::RankStarted { .. }));
    let (out, _, status) = conn.rank_until_exit(JobId(8), 0);
    assert_eq!(out.len(), 200_000);
    assert_eq!(status, ExitStatus::Exited(0));
}

#[test]
fn a_rank_that_cannot_start_exits_127_with_the_reason() {
    let gangd = Gangd::new(key(10));
    let _agent = start_agent("bad-node", gangd.addr(), key(10), None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send(spawn_rank(3, 0, &["/no/such/program"], &[]));
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
    let gangd = Gangd::new(key(11));
    let agent = start_agent("keep-node", gangd.addr(), key(11), None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Schedule {
        slots: vec![vec![Placement {
            job: JobId(21),
            cpus: "1".into(),
        }]],
    });
    // Prints once gangd is gone, then waits for a signal.
    conn.send(spawn_rank(
        21,
        0,
        &[
            "/bin/sh",
            "-c",
            "trap 'echo term; exit 5' TERM; sleep 0.5; echo while-away; while :; do sleep 0.05; done",
        ],
        &[],
    ));
    assert!(matches!(conn.recv(), FromAgent::RankStarted { .. }));
    assert!(matches!(next_request(&agent.seen), Request::Column { .. }));
    drop(conn);
    assert_eq!(next_request(&agent.seen), Request::Rotate);
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
    conn.send(spawn_rank(
        22,
        1,
        &["sleep", "30"],
        &[("PATH", "/bin:/usr/bin")],
    ));
    assert!(matches!(conn.recv(), FromAgent::RankStarted { .. }));
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
    let gangd = Gangd::new(key(12));
    let agent = start_agent(
        "cg-node",
        gangd.addr(),
        key(12),
        Some(root.clone()),
        accept_all(),
    );
    let mut conn = gangd.accept(1).unwrap();
    let job_dir = root.join("job31");

    conn.send(spawn_rank(31, 0, &["/bin/cat", "/proc/self/cgroup"], &[]));
    assert!(matches!(conn.recv(), FromAgent::RankStarted { .. }));
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
    conn.send(spawn_rank(
        32,
        0,
        &[
            "/bin/sh",
            "-c",
            "trap 'exit 4' TERM; while :; do sleep 0.05; done",
        ],
        &[],
    ));
    assert!(matches!(conn.recv(), FromAgent::RankStarted { .. }));
    let dir = root.join("job32");
    let freeze = || fs::read_to_string(dir.join("cgroup.freeze")).unwrap();
    conn.send(ToAgent::SuspendJob { job: JobId(32) });
    conn.send(ToAgent::Heartbeat { seq: 1 });
    assert!(matches!(conn.recv(), FromAgent::Heartbeat { .. }));
    assert_eq!(freeze().trim(), "1");
    assert!(agent.holds.is_suspended(&dir));
    conn.send(ToAgent::ResumeJob { job: JobId(32) });
    conn.send(ToAgent::Heartbeat { seq: 2 });
    assert!(matches!(conn.recv(), FromAgent::Heartbeat { .. }));
    assert_eq!(freeze().trim(), "0");
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
    conn.send(spawn_rank(
        33,
        0,
        &["/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
        &[],
    ));
    assert!(matches!(conn.recv(), FromAgent::RankStarted { .. }));
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
