//! gangd as its agents and front ends see it: the real daemon on loopback,
//! with fake node agents that answer the protocol at once and a front end
//! speaking frames on the Unix socket. Scheduling itself is shown in the VM
//! cluster; these tests pin down the coordinator's side of every exchange.

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::proto::tls::testing::{self, TestCa};
use gang_wire::proto::tls::{ClientTls, SessionReader, SessionWriter};
use gang_wire::proto::*;

struct Gangd {
    child: Child,
    dir: PathBuf,
    port: u16,
    /// The cluster's CA: gangd's certificate, and the nodes' on demand.
    ca: TestCa,
    args: Vec<String>,
}

impl Drop for Gangd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("GANGD_TEST_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Gangd {
    fn start(name: &str, nodes: usize, extra: &[&str]) -> Gangd {
        let dir = std::env::temp_dir().join(format!("gangd-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = TestCa::new(&format!("gangd-{name}"));
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut args = vec!["--nodes".to_string(), nodes.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Self::spawn(&dir, &ca, port, &args);
        let g = Gangd {
            child,
            dir,
            port,
            ca,
            args,
        };
        g.wait_listening();
        g
    }

    fn spawn(dir: &Path, ca: &TestCa, port: u16, args: &[String]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("gangd.log"))
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_gangd"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--no-knobs"])
            .arg("--socket")
            .arg(dir.join("sock"))
            .arg("--ca-dir")
            .arg(ca.dir())
            // The tests' jobs run as root (unless a test says otherwise).
            .args(if args.iter().any(|a| a == "--min-rank-uid") {
                &[][..]
            } else {
                &["--min-rank-uid", "0"][..]
            })
            .arg("--switch-log")
            .arg(dir.join("switches.jsonl"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(args)
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap()
    }

    fn wait_listening(&self) {
        wait_until("gangd listening", || {
            TcpStream::connect(("127.0.0.1", self.port)).is_ok() && self.sock().exists()
        });
    }

    /// Stops gangd (SIGKILL: nothing is saved on the way out) and starts it
    /// again with the same CA, port and state directory.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.sock());
        self.child = Self::spawn(&self.dir, &self.ca, self.port, &self.args);
        self.wait_listening();
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("gangd.log")).unwrap_or_default()
    }

    fn switches(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("switches.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A node agent that answers everything at once, and remembers what it got.
struct FakeAgent {
    name: String,
    /// Its id, from its Welcome.
    id: NodeId,
    got: Arc<Mutex<Vec<ToAgent>>>,
    tx: Arc<Mutex<SessionWriter>>,
    /// How many Freezes still go unanswered (a node too slow to answer).
    deaf_to_freezes: Arc<AtomicU32>,
}

/// Node `me`'s ranks of `job`, as the last map (JobPeers) of the job it
/// got gives them.
fn ranks_here(got: &[ToAgent], job: JobId, me: NodeId) -> Vec<u32> {
    let map = got.iter().rev().find_map(|m| match m {
        ToAgent::JobPeers { job: j, map } if *j == job => Some(map),
        _ => None,
    });
    map.map_or_else(Vec::new, |m| {
        m.ranks_of(me).into_iter().map(|(r, _)| r).collect()
    })
}

impl FakeAgent {
    fn join(g: &Gangd, name: &str, cpus: u32) -> FakeAgent {
        Self::try_join(g, cpus, &g.ca.client(name))
            .unwrap_or_else(|e| panic!("{name} not admitted: {e}"))
    }

    /// Joins with the certificate `tls` (the name is the certificate's).
    fn try_join(g: &Gangd, cpus: u32, tls: &ClientTls) -> Result<FakeAgent, String> {
        Self::join_with(g, cpus, tls, vec![], vec![])
    }

    fn join_with(
        g: &Gangd,
        cpus: u32,
        tls: &ClientTls,
        jobs: Vec<LiveJob>,
        schedule: Vec<Vec<Placement>>,
    ) -> Result<FakeAgent, String> {
        let name = tls.node.clone();
        let session =
            testing::connect(("127.0.0.1", g.port), tls).map_err(|e| format!("TLS: {e}"))?;
        let mut r = BufReader::new(SessionReader {
            session: session.clone(),
            timeout: None,
        });
        let hello = FromAgent::Hello {
            nr_cpus: cpus,
            housekeeping_cpus: String::new(),
            agent_version: "test".into(),
            jobs,
            schedule,
        };
        let mut w = SessionWriter(session);
        write_frame(&mut w, &hello).map_err(|e| format!("hello: {e}"))?;
        let id = match read_frame::<ToAgent>(&mut r) {
            Ok(Some(ToAgent::Welcome { node_id })) => node_id,
            Ok(Some(ToAgent::Refused { reason })) => return Err(reason),
            other => return Err(format!("{other:?}")),
        };
        let got = Arc::new(Mutex::new(Vec::new()));
        let tx = Arc::new(Mutex::new(w));
        let deaf_to_freezes = Arc::new(AtomicU32::new(0));
        let (g2, t2, deaf) = (got.clone(), tx.clone(), deaf_to_freezes.clone());
        thread::spawn(move || {
            while let Ok(Some(msg)) = read_frame::<ToAgent>(&mut r) {
                let answer = match &msg {
                    ToAgent::Freeze { .. }
                        if deaf
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok() =>
                    {
                        None
                    }
                    ToAgent::Prepare { job, .. } => Some(FromAgent::Prepared {
                        job: *job,
                        error: None,
                    }),
                    ToAgent::StartJob { job, .. } => Some(FromAgent::RanksStarted {
                        job: *job,
                        ranks: ranks_here(&g2.lock().unwrap(), *job, id)
                            .into_iter()
                            .map(|r| (r, 1000 + r))
                            .collect(),
                    }),
                    ToAgent::Freeze { gen, from_slot, .. } => Some(FromAgent::Frozen {
                        gen: *gen,
                        slot: *from_slot,
                        report: FreezeReport {
                            drained_bytes: 0,
                            drain_us: 5,
                            timed_out: false,
                            answer_us: 10,
                        },
                    }),
                    ToAgent::Switch { gen, slot, .. } => Some(FromAgent::Running {
                        gen: *gen,
                        slot: *slot,
                        switch_us: 7,
                    }),
                    ToAgent::Plan { plan, .. } => Some(FromAgent::PlanAck { plan_id: plan.id }),
                    ToAgent::Heartbeat { seq } => Some(FromAgent::Heartbeat {
                        seq: *seq,
                        mono_ns: 1,
                    }),
                    _ => None,
                };
                g2.lock().unwrap().push(msg);
                if let Some(a) = answer {
                    if write_frame(&mut *t2.lock().unwrap(), &a).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(FakeAgent {
            name,
            id,
            got,
            tx,
            deaf_to_freezes,
        })
    }

    fn send(&self, msg: FromAgent) {
        write_frame(&mut *self.tx.lock().unwrap(), &msg).unwrap();
    }

    fn got(&self) -> Vec<ToAgent> {
        self.got.lock().unwrap().clone()
    }

    /// The ranks of `job` it was asked to start: none before its
    /// StartJob, then those the job's map gives it.
    fn spawned(&self, job: JobId) -> Vec<u32> {
        let got = self.got();
        if !got
            .iter()
            .any(|m| matches!(m, ToAgent::StartJob { job: j, .. } if *j == job))
        {
            return vec![];
        }
        ranks_here(&got, job, self.id)
    }

    /// Every rank it was asked to start exits with `status`.
    fn exit_all(&self, job: JobId, status: ExitStatus) {
        wait_until("a rank to exit", || !self.spawned(job).is_empty());
        for rank in self.spawned(job) {
            self.send(FromAgent::RankExited { job, rank, status });
        }
    }

    /// The next `n` Freezes go unanswered.
    fn ignore_freezes(&self, n: u32) {
        self.deaf_to_freezes.store(n, Ordering::SeqCst);
    }

    fn switched_to(&self) -> Vec<u32> {
        self.got()
            .iter()
            .filter_map(|m| match m {
                ToAgent::Switch { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect()
    }

    fn kill(&self) {
        self.tx.lock().unwrap().0.close();
    }

    /// Its TCP connection ends without a TLS close, as when its host dies.
    fn crash(&self) {
        let _ = self
            .tx
            .lock()
            .unwrap()
            .0
            .socket()
            .shutdown(std::net::Shutdown::Both);
    }
}

struct FrontEnd {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl FrontEnd {
    fn connect(g: &Gangd) -> FrontEnd {
        let s = UnixStream::connect(g.sock()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        FrontEnd {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn send(&mut self, msg: FromClient) {
        write_frame(&mut self.w, &msg).unwrap();
    }

    fn recv(&mut self) -> ToClient {
        read_frame::<ToClient>(&mut self.r)
            .unwrap()
            .expect("gangd closed the connection")
    }

    fn submit(&mut self, name: &str, ranks: u32, argv: &[&str]) -> ToClient {
        self.submit_with(name, ranks, argv, JobLimits::default())
    }

    fn submit_with(
        &mut self,
        name: &str,
        ranks: u32,
        argv: &[&str],
        limits: JobLimits,
    ) -> ToClient {
        self.send(FromClient::Submit {
            name: name.into(),
            ranks,
            per_node: None,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("HOME".into(), "/root".into())],
            cwd: "/".into(),
            label_output: false,
            ship_executable: false,
            limits,
        });
        self.recv()
    }

    fn ended(&mut self) -> (i32, String, Option<RankFailure>) {
        loop {
            if let ToClient::JobEnded {
                exit_code,
                summary,
                failure,
                ..
            } = self.recv()
            {
                return (exit_code, summary, failure);
            }
        }
    }
}

fn accepted(reply: ToClient) -> JobId {
    match reply {
        ToClient::Accepted { job } => job,
        other => panic!("not accepted: {other:?}"),
    }
}

fn three_nodes(g: &Gangd) -> Vec<FakeAgent> {
    (0..3)
        .map(|i| FakeAgent::join(g, &format!("n{i}"), 1))
        .collect()
}

#[test]
fn two_jobs_of_three_ranks_alternate_on_every_node_through_the_strict_barrier() {
    let g = Gangd::start("alternate", 3, &["--slot-ms", "50"]);
    let agents = three_nodes(&g);
    let mut fe = FrontEnd::connect(&g);
    let a = accepted(fe.submit("a", 3, &["/bin/true"]));
    let mut fe2 = FrontEnd::connect(&g);
    let b = accepted(fe2.submit("b", 3, &["/bin/true"]));
    for ag in &agents {
        wait_until("spawns", || {
            ag.spawned(a).len() == 1 && ag.spawned(b).len() == 1
        });
    }
    // Every node gets the job's start as three messages, the same for all
    // (the map, PmiStart, StartJob, in that order, once each); with the
    // node directory it got at its Welcome the map expands to every rank,
    // in rank order, and gives each node its own rank.
    let mut maps = Vec::new();
    let mut starts = Vec::new();
    let mut all_mine = Vec::new();
    for (i, ag) in agents.iter().enumerate() {
        let got = ag.got();
        let mut dir = Directory::default();
        for m in &got {
            if let ToAgent::NodeDirectory { you, reset, nodes } = m {
                dir.apply(*you, *reset, nodes).unwrap();
            }
        }
        assert_eq!(dir.len(), 3, "node {i} knows every node");
        let of_a: Vec<&ToAgent> = got
            .iter()
            .filter(|m| match m {
                ToAgent::JobPeers { job, .. }
                | ToAgent::PmiStart { job, .. }
                | ToAgent::StartJob { job, .. } => *job == a,
                _ => false,
            })
            .collect();
        let [ToAgent::JobPeers { map: table, .. }, ToAgent::PmiStart { map: pmi_map, .. }, start @ ToAgent::StartJob { size: 3, .. }] =
            of_a[..]
        else {
            panic!("node {i}: the map, PmiStart, StartJob once each: {of_a:?}");
        };
        assert_eq!(table, pmi_map, "node {i}: PMI's layout is the map");
        maps.push(table.clone());
        starts.push(start.clone());
        let list = table.expand(&dir).unwrap();
        let peers: Vec<&str> = list.split(',').collect();
        assert_eq!(peers.len(), 3, "{list}");
        assert!(peers.iter().all(|p| p.starts_with("127.0.0.1:")), "{list}");
        let mine = table.ranks_of(dir.me().unwrap());
        assert_eq!(mine.len(), 1, "node {i}: {mine:?}");
        all_mine.push(mine[0].0);
    }
    all_mine.sort();
    assert_eq!(all_mine, [0, 1, 2], "each rank on one node");
    assert!(starts.windows(2).all(|w| w[0] == w[1]), "{starts:?}");
    assert!(maps.windows(2).all(|w| w[0] == w[1]), "{maps:?}");
    wait_until("ten switches", || g.switches().len() >= 10);
    for ag in &agents {
        let got = ag.got();
        let slots: Vec<Vec<Placement>> = got
            .iter()
            .rev()
            .find_map(|m| match m {
                ToAgent::Schedule { slots } => Some(slots.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(slots.len(), 2, "{}: one slot per job: {slots:?}", ag.name);
        let switched: Vec<u32> = got
            .iter()
            .filter_map(|m| match m {
                ToAgent::Switch { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        let tail = &switched[switched.len() - 6..];
        assert!(
            tail.windows(2).all(|w| w[0] != w[1]),
            "{}: slots alternate: {switched:?}",
            ag.name
        );
        // Strict: a Freeze of the same generation comes before each Switch.
        let mut frozen = None;
        for m in &got {
            match m {
                ToAgent::Freeze { gen, .. } => frozen = Some(*gen),
                ToAgent::Switch { gen, .. } => {
                    assert_eq!(
                        frozen,
                        Some(*gen),
                        "{}: switch {gen} without freeze",
                        ag.name
                    )
                }
                _ => {}
            }
        }
    }
    let rec = g.switches().pop().unwrap();
    assert_eq!(rec["barrier"], "strict");
    assert!(
        rec["freeze_us"].is_u64() && rec["switch_us"].is_u64() && rec["skew_us"].is_u64(),
        "{rec}"
    );
    assert_eq!(rec["nodes"].as_object().unwrap().len(), 3);

    fe.send(FromClient::Ps);
    let ToClient::PsReply { jobs } = fe.recv() else {
        panic!()
    };
    assert_eq!(jobs.len(), 2);
    assert!(
        jobs.iter()
            .all(|j| j.state == JobState::Running && j.nodes.len() == 3),
        "{jobs:?}"
    );
    fe.send(FromClient::Matrix);
    let ToClient::MatrixReply { text } = fe.recv() else {
        panic!()
    };
    assert!(text.contains("n0:0") && text.contains("n2:0"), "{text}");

    for ag in &agents {
        ag.exit_all(a, ExitStatus::Exited(0));
    }
    assert_eq!(fe.ended(), (0, format!("job {a}: 3 ranks exited 0"), None));
    for ag in &agents {
        ag.exit_all(b, ExitStatus::Exited(0));
    }
    assert_eq!(fe2.ended().0, 0);
}

#[test]
fn under_timed_switching_nodes_get_a_plan_after_the_tables_and_no_freeze_or_switch() {
    let g = Gangd::start("timed", 3, &["--slot-ms", "50", "--switching", "timed"]);
    let agents = three_nodes(&g);
    // Nodes 0 and 1 say their clock is good; node 2 is still
    // synchronising: it is switched by command.
    for (i, ag) in agents.iter().enumerate() {
        ag.send(clock_status(i < 2));
    }
    let mut fe = FrontEnd::connect(&g);
    let a = accepted(fe.submit("a", 3, &["/bin/true"]));
    let mut fe2 = FrontEnd::connect(&g);
    let b = accepted(fe2.submit("b", 3, &["/bin/true"]));
    let plan_of = |ag: &FakeAgent| {
        ag.got().iter().rev().find_map(|m| match m {
            ToAgent::Plan { plan, .. } if plan.slots.len() == 2 => Some(plan.clone()),
            _ => None,
        })
    };
    for ag in &agents[..2] {
        wait_until("a plan of both jobs", || plan_of(ag).is_some());
    }
    // Past the plan's epoch (one 50 ms slot and the margin) and a few
    // boundaries: the fake answered PlanAck, so nothing more is owed.
    thread::sleep(Duration::from_millis(400));
    let commanded = agents[2].got();
    assert!(
        plan_of(&agents[2]).is_none(),
        "no plan for an unsynchronised clock"
    );
    let switches = commanded
        .iter()
        .filter(|m| matches!(m, ToAgent::Switch { .. }))
        .count();
    assert!(
        switches >= 4,
        "node 2 switched by command at each boundary: {switches}"
    );
    for ag in &agents[..2] {
        let got = ag.got();
        let plan = got
            .iter()
            .position(|m| matches!(m, ToAgent::Plan { plan, .. } if plan.slots.len() == 2));
        let table = got.iter().position(|m| match m {
            ToAgent::Schedule { slots } => slots.iter().filter(|s| !s.is_empty()).count() == 2,
            _ => false,
        });
        assert!(
            table.is_some() && table < plan,
            "{}: the table comes before the plan",
            ag.name
        );
        assert!(
            !got.iter()
                .any(|m| matches!(m, ToAgent::Freeze { .. } | ToAgent::Switch { .. })),
            "{}: no commanded switch under timed switching",
            ag.name
        );
    }
    // The nodes' reports of a generation make one timed line of the log.
    let plan = plan_of(&agents[0]).unwrap();
    for (i, ag) in agents[..2].iter().enumerate() {
        ag.send(FromAgent::Switched {
            reports: vec![SwitchReport {
                gen: plan.first_gen,
                slot: plan.slots[0].slot,
                at_ns: plan.epoch_ns + 100 * i as u64,
                late_us: 0,
                outcome: SwitchOutcome::OnTime,
                drain: None,
                parked_us: 0,
                park_late_us: 0,
                lead_us: 0,
            }],
        });
    }
    wait_until("a timed switch record", || {
        g.switches().iter().any(|r| r["switching"] == "timed")
    });
    let rec = g
        .switches()
        .into_iter()
        .find(|r| r["gen"] == plan.first_gen.0)
        .unwrap();
    assert_eq!(rec["nodes"].as_object().unwrap().len(), 3);
    assert_eq!(rec["nodes"]["2"]["outcome"], "commanded");
    assert_eq!(rec["failed"].as_array().unwrap().len(), 0);
    // Node 2's clock is good now: it gets the plan in force.
    agents[2].send(clock_status(true));
    wait_until("the plan for node 2", || plan_of(&agents[2]).is_some());
    for ag in &agents {
        ag.exit_all(a, ExitStatus::Exited(0));
        ag.exit_all(b, ExitStatus::Exited(0));
    }
    assert_eq!(fe.ended().0, 0);
    assert_eq!(fe2.ended().0, 0);
}

/// A node's clock report: good (within 500 µs) or still synchronising.
fn clock_status(good: bool) -> FromAgent {
    FromAgent::ClockStatus {
        report: ClockReport {
            source: ClockSource::Gangd,
            state: if good {
                ClockState::Good
            } else {
                ClockState::Unsynchronised
            },
            offset_ns: 0,
            rate_ppb: 0,
            error_bound_ns: if good { 500_000 } else { 0 },
            samples: if good { 8 } else { 0 },
            steps: 0,
        },
    }
}

#[test]
fn a_rank_that_dies_ends_its_job_everywhere_with_a_report() {
    let g = Gangd::start("rankdies", 3, &[]);
    let agents = three_nodes(&g);
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("r", 3, &["/bin/sleep", "100"]));
    for ag in &agents {
        wait_until("spawn", || ag.spawned(job).len() == 1);
    }
    let rank = agents[1].spawned(job)[0];
    agents[1].send(FromAgent::RankExited {
        job,
        rank,
        status: ExitStatus::Signaled(9),
    });
    for ag in [&agents[0], &agents[2]] {
        wait_until("kill", || {
            ag.got()
                .iter()
                .any(|m| matches!(m, ToAgent::KillJob { job: j, signal: 9 } if *j == job))
        });
        ag.exit_all(job, ExitStatus::Signaled(9));
    }
    let (code, summary, failure) = fe.ended();
    assert_eq!(code, 137);
    assert_eq!(
        summary,
        format!("job {job} failed: rank {rank} on n1 killed by signal 9 (SIGKILL)")
    );
    assert_eq!(
        failure,
        Some(RankFailure {
            rank,
            node: "n1".into(),
            status: ExitStatus::Signaled(9)
        })
    );
}

#[test]
fn losing_a_node_fails_its_job_and_spares_the_others() {
    let g = Gangd::start("nodeloss", 3, &["--node-timeout-ms", "1000"]);
    let agents = three_nodes(&g);
    let mut fe = FrontEnd::connect(&g);
    // 2 ranks on n0-n1, then 1 rank: first fit puts it on n2.
    let wide = accepted(fe.submit("wide", 2, &["/bin/true"]));
    let mut fe2 = FrontEnd::connect(&g);
    let narrow = accepted(fe2.submit("narrow", 1, &["/bin/true"]));
    wait_until("spawn", || agents[2].spawned(narrow).len() == 1);
    agents[2].kill();
    let (code, summary, failure) = fe2.ended();
    assert_eq!(code, 1);
    assert!(summary.contains("node n2 was lost"), "{summary}");
    assert_eq!(failure.unwrap().node, "n2");
    assert!(g.log().contains("node n2 lost"), "{}", g.log());
    // The other job is untouched and ends normally.
    assert!(!agents[0]
        .got()
        .iter()
        .any(|m| matches!(m, ToAgent::KillJob { job, .. } if *job == wide)));
    for ag in &agents[..2] {
        ag.exit_all(wide, ExitStatus::Exited(0));
    }
    assert_eq!(fe.ended().0, 0);
}

#[test]
fn a_node_whose_last_frame_and_close_arrive_together_is_lost_at_once() {
    // The agent loop stops reading a socket at a short read (agent_conn.rs,
    // ShortRead), except when the peer closed: its end is then queued
    // behind the data and no later readiness would announce it. gangd is
    // stopped while a node sends a frame and its TCP end (a crash: no TLS
    // close), so both wait for it in one readiness. With a minute's node
    // timeout, only the link's end can make the node lost; a heartbeat
    // period of a second would find it within that second.
    let g = Gangd::start("lastframe", 3, &["--node-timeout-ms", "60000"]);
    let ag = FakeAgent::join(&g, "m0", 1);
    let pid = g.child.id() as i32;
    // SAFETY: signals to our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    ag.send(FromAgent::Heartbeat { seq: 0, mono_ns: 0 });
    ag.crash();
    thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    wait_until("the node lost on its link's end", || {
        g.log().contains("node m0 lost")
    });
    // Not at gangd's next heartbeat to it, a second on (its next write:
    // what an unread end waited for).
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "lost {:?} after gangd went on",
        t.elapsed()
    );
}

#[test]
fn bad_input_is_refused_and_disturbs_nothing() {
    let g = Gangd::start("badinput", 3, &[]);
    // A node must be admitted before the cluster is up.
    let mut fe = FrontEnd::connect(&g);
    match fe.submit("early", 1, &["/bin/true"]) {
        ToClient::Refused { reason } => assert!(reason.contains("0 of 3 nodes"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A node whose certificate another CA issued never gets a hello in.
    let other_ca = TestCa::new("gangd-badinput-other");
    let err = FakeAgent::try_join(&g, 1, &other_ca.client("intruder"))
        .err()
        .unwrap();
    assert!(err.contains("TLS"), "{err}");
    wait_until("the intruder logged", || {
        g.log().contains("refused") && g.log().contains("TLS handshake")
    });
    let agents = three_nodes(&g);
    match fe.submit("huge", 99, &["/bin/true"]) {
        ToClient::Refused { reason } => {
            assert!(reason.contains("99") && reason.contains("3"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Garbage on the agents' port: that connection is dropped with a log line.
    let mut s = TcpStream::connect(("127.0.0.1", g.port)).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\nthis is not a frame at all")
        .unwrap();
    wait_until("garbage logged", || g.log().contains("refused"));
    // A node that cannot run the program refuses before anything starts.
    agents[1].send(FromAgent::Error {
        message: "ignored".into(),
    });
    let job = accepted(fe.submit("ok", 3, &["/bin/true"]));
    fe.send(FromClient::Ps);
    let ToClient::PsReply { jobs } = fe.recv() else {
        panic!()
    };
    assert_eq!(jobs[0].job, job, "gangd still serves after the garbage");
    // Another user cannot act on the job: root can, so check the refusal
    // of an unknown job instead (the owner check needs two uids).
    fe.send(FromClient::Kill { job: JobId(999) });
    assert!(matches!(fe.recv(), ToClient::Refused { .. }));
    for ag in &agents {
        ag.exit_all(job, ExitStatus::Exited(0));
    }
    assert_eq!(fe.ended().0, 0);
}

#[test]
fn a_missing_program_is_refused_before_any_rank_starts() {
    let g = Gangd::start("prepare", 2, &[]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    // n1 cannot run the program.
    let session = testing::connect(("127.0.0.1", g.port), &g.ca.client("n1")).unwrap();
    let mut r = BufReader::new(SessionReader {
        session: session.clone(),
        timeout: None,
    });
    let mut w = SessionWriter(session);
    let hello = FromAgent::Hello {
        nr_cpus: 1,
        housekeeping_cpus: String::new(),
        agent_version: "test".into(),
        jobs: vec![],
        schedule: vec![],
    };
    write_frame(&mut w, &hello).unwrap();
    assert!(matches!(
        read_frame::<ToAgent>(&mut r).unwrap(),
        Some(ToAgent::Welcome { .. })
    ));
    let n1 = thread::spawn(move || {
        let mut spawned = false;
        while let Ok(Some(m)) = read_frame::<ToAgent>(&mut r) {
            match m {
                ToAgent::Prepare { job, .. } => write_frame(
                    &mut w,
                    &FromAgent::Prepared {
                        job,
                        error: Some("n1: /no/such: no such file or directory".into()),
                    },
                )
                .unwrap(),
                ToAgent::StartJob { .. } => spawned = true,
                ToAgent::Heartbeat { seq } => {
                    write_frame(&mut w, &FromAgent::Heartbeat { seq, mono_ns: 1 }).unwrap()
                }
                _ => {}
            }
            if spawned {
                break;
            }
        }
        spawned
    });
    let mut fe = FrontEnd::connect(&g);
    match fe.submit("nosuch", 2, &["/no/such"]) {
        ToClient::Refused { reason } => assert!(reason.contains("/no/such"), "{reason}"),
        other => panic!("{other:?}"),
    }
    thread::sleep(Duration::from_millis(300));
    assert!(n0.spawned(JobId(1)).is_empty(), "nothing started anywhere");
    fe.send(FromClient::Ps);
    assert_eq!(fe.recv(), ToClient::PsReply { jobs: vec![] });
    drop(g);
    assert!(!n1.join().unwrap());
}

#[test]
fn the_front_end_going_away_kills_its_job() {
    let g = Gangd::start("frontend", 1, &[]);
    let n0 = FakeAgent::join(&g, "n0", 2);
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("x", 2, &["/bin/sleep", "100"]));
    wait_until("spawn", || n0.spawned(job).len() == 2);
    drop(fe);
    wait_until("kill", || {
        n0.got()
            .iter()
            .any(|m| matches!(m, ToAgent::KillJob { job: j, signal: 9 } if *j == job))
    });
}

#[test]
fn a_restarted_gangd_adopts_the_jobs_its_nodes_still_run() {
    let g = Gangd::start("adopt", 2, &[]);
    let old = JobId(41);
    let live = |ranks: Vec<u32>| LiveJob {
        job: old,
        name: "lu".into(),
        size: 2,
        uid: 1000,
        gid: 1000,
        ranks,
    };
    // The old gangd had the job in slot 1 (slot 0's job has ended since).
    let sched = vec![
        vec![],
        vec![Placement {
            job: old,
            cpus: "0".into(),
        }],
    ];
    // The front end may come back before the nodes: its Attach waits.
    let mut fe = FrontEnd::connect(&g);
    fe.send(FromClient::Attach { job: old });
    thread::sleep(Duration::from_millis(200));
    let n0 = FakeAgent::join_with(
        &g,
        1,
        &g.ca.client("n0"),
        vec![live(vec![0])],
        sched.clone(),
    )
    .unwrap();
    assert_eq!(fe.recv(), ToClient::Done);
    let n1 = FakeAgent::join_with(&g, 1, &g.ca.client("n1"), vec![live(vec![1])], sched).unwrap();
    fe.send(FromClient::Ps);
    let ToClient::PsReply { jobs } = fe.recv() else {
        panic!()
    };
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (jobs[0].job, jobs[0].uid, jobs[0].state),
        (old, 1000, JobState::Running)
    );
    assert_eq!(jobs[0].nodes, vec!["n0".to_string(), "n1".to_string()]);
    // Nothing of it is killed; its table is sent back with it in it.
    wait_until("schedule", || {
        n1.got().iter().any(|m| matches!(m, ToAgent::Schedule { slots } if slots.iter().flatten().any(|p| p.job == old)))
    });
    assert!(!n0
        .got()
        .iter()
        .any(|m| matches!(m, ToAgent::KillJob { .. })));
    // New jobs are numbered after it.
    let mut fe2 = FrontEnd::connect(&g);
    match fe2.submit("new", 2, &["/bin/true"]) {
        ToClient::Accepted { job } => assert!(job.0 > old.0, "{job}"),
        other => panic!("{other:?}"),
    }
    n0.send(FromAgent::RankExited {
        job: old,
        rank: 0,
        status: ExitStatus::Exited(0),
    });
    n1.send(FromAgent::RankExited {
        job: old,
        rank: 1,
        status: ExitStatus::Exited(0),
    });
    assert_eq!(fe.ended().0, 0);
}

#[test]
fn job_ids_are_never_handed_out_twice_across_restarts() {
    let mut g = Gangd::start("ids", 1, &[]);
    let n0 = FakeAgent::join(&g, "n0", 2);
    let first = accepted(FrontEnd::connect(&g).submit("a", 1, &["/bin/true"]));
    let second = accepted(FrontEnd::connect(&g).submit("b", 1, &["/bin/true"]));
    drop(n0);
    g.restart();
    let _n0 = FakeAgent::join(&g, "n0", 2);
    // The node came back without them (they ended while gangd was away):
    // a new job still never gets their ids.
    wait_until("submissions open", || g.log().contains("adoption over"));
    let third = accepted(FrontEnd::connect(&g).submit("c", 1, &["/bin/true"]));
    assert!(first < second && second < third, "{first} {second} {third}");
}

#[test]
fn after_a_restart_no_job_is_accepted_until_the_known_nodes_are_back() {
    // One node is enough to run jobs, but two were known before the restart.
    let mut g = Gangd::start("adoption-window", 1, &[]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    let n1 = FakeAgent::join(&g, "n1", 1);
    drop((n0, n1));
    g.restart();
    let _n0 = FakeAgent::join(&g, "n0", 1);
    match FrontEnd::connect(&g).submit("early", 1, &["/bin/true"]) {
        ToClient::Refused { reason } => assert!(reason.contains("restarted"), "{reason}"),
        other => panic!("accepted while n1 may still bring back its jobs: {other:?}"),
    }
    let _n1 = FakeAgent::join(&g, "n1", 1);
    wait_until("adoption over", || {
        g.log().contains("adoption over: every known node is back")
    });
    accepted(FrontEnd::connect(&g).submit("late", 1, &["/bin/true"]));
}

#[test]
fn a_node_reporting_another_users_job_under_a_known_id_is_not_merged_into_it() {
    let g = Gangd::start("uid-mismatch", 2, &[]);
    let live = |uid: u32, rank: u32| LiveJob {
        job: JobId(7),
        name: "lu".into(),
        size: 2,
        uid,
        gid: uid,
        ranks: vec![rank],
    };
    let sched = vec![vec![Placement {
        job: JobId(7),
        cpus: "0".into(),
    }]];
    let _a = FakeAgent::join_with(
        &g,
        1,
        &g.ca.client("n0"),
        vec![live(1000, 0)],
        sched.clone(),
    )
    .unwrap();
    let b = FakeAgent::join_with(&g, 1, &g.ca.client("n1"), vec![live(1001, 1)], sched).unwrap();
    let mut fe = FrontEnd::connect(&g);
    fe.send(FromClient::Ps);
    let ToClient::PsReply { jobs } = fe.recv() else {
        panic!()
    };
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!((jobs[0].job, jobs[0].uid), (JobId(7), 1000));
    assert_eq!(
        jobs[0].nodes,
        vec!["n0".to_string()],
        "uid 1001's rank merged in"
    );
    assert!(g.log().contains("not adopting its job 7"), "{}", g.log());
    // Killing uid 1000's job 7 never reaches uid 1001's ranks on n1.
    fe.send(FromClient::Kill { job: JobId(7) });
    thread::sleep(Duration::from_millis(300));
    assert!(!b.got().iter().any(|m| matches!(m, ToAgent::KillJob { .. })));
}

#[test]
fn a_node_cannot_have_gangd_adopt_a_root_job_or_a_giant_one() {
    let g = Gangd::start("adopt-bounds", 1, &["--min-rank-uid", "1000"]);
    let claim = |job: u64, uid: u32, size: u32| LiveJob {
        job: JobId(job),
        name: "x".into(),
        size,
        uid,
        gid: uid,
        ranks: vec![0],
    };
    let sched = vec![vec![
        Placement {
            job: JobId(3),
            cpus: "0".into(),
        },
        Placement {
            job: JobId(4),
            cpus: "1".into(),
        },
    ]];
    // A root job, and a job of u32::MAX ranks (gangd would size a table
    // by it): the node is welcome, neither job is taken.
    let _n0 = FakeAgent::join_with(
        &g,
        2,
        &g.ca.client("n0"),
        vec![claim(3, 0, 1), claim(4, 1000, u32::MAX)],
        sched,
    )
    .unwrap();
    let mut fe = FrontEnd::connect(&g);
    fe.send(FromClient::Ps);
    let ToClient::PsReply { jobs } = fe.recv() else {
        panic!()
    };
    assert!(jobs.is_empty(), "{jobs:?}");
    let log = g.log();
    assert!(log.contains("not adopting its job 3 of uid 0"), "{log}");
    assert!(log.contains("job 4 claims 4294967295 ranks"), "{log}");
}

#[test]
fn a_rank_whose_status_its_restarted_node_lost_does_not_fail_the_job() {
    let g = Gangd::start("unknown-exit", 2, &[]);
    let (n0, n1) = (FakeAgent::join(&g, "n0", 1), FakeAgent::join(&g, "n1", 1));
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("long", 2, &["/bin/sleep", "100"]));
    wait_until("spawn", || {
        n0.spawned(job).len() + n1.spawned(job).len() == 2
    });
    // n0's scx_gang restarted and took its rank back: its end is unknown.
    n0.exit_all(job, ExitStatus::Unknown);
    thread::sleep(Duration::from_millis(300));
    assert!(
        !n1.got()
            .iter()
            .any(|m| matches!(m, ToAgent::KillJob { .. })),
        "the job's other rank was killed"
    );
    n1.exit_all(job, ExitStatus::Exited(0));
    let (code, summary, failure) = fe.ended();
    assert_eq!((code, failure), (0, None));
    assert!(
        summary.contains("1 ranks exited 0, 1 ended with an unknown status"),
        "{summary}"
    );
}

#[test]
fn traces_are_for_root_and_one_at_a_time() {
    use std::os::unix::process::CommandExt;
    let g = Gangd::start("trace-limits", 1, &[]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    std::fs::set_permissions(&g.dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gang"))
        .arg("--socket")
        .arg(g.sock())
        .args(["trace", "--seconds", "600"])
        .uid(1001)
        .gid(1001)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("root only"), "{err}");
    assert!(g.log().contains("trace refused to uid 1001"), "{}", g.log());
    assert!(!n0.got().iter().any(|m| matches!(m, ToAgent::Trace { .. })));
    // Root's trace runs (the fake node never answers it); a second waits.
    let mut first = FrontEnd::connect(&g);
    first.send(FromClient::Trace { ms: 60_000 });
    wait_until("trace sent", || {
        n0.got().iter().any(|m| matches!(m, ToAgent::Trace { .. }))
    });
    let mut second = FrontEnd::connect(&g);
    second.send(FromClient::Trace { ms: 1000 });
    match second.recv() {
        ToClient::Refused { reason } => assert!(reason.contains("already"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let traces = n0
        .got()
        .iter()
        .filter(|m| matches!(m, ToAgent::Trace { .. }))
        .count();
    assert_eq!(traces, 1);
}

#[test]
fn another_user_can_neither_kill_nor_suspend_a_job() {
    use std::os::unix::process::CommandExt;
    let g = Gangd::start("owner", 1, &[]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    let mut fe = FrontEnd::connect(&g);
    // Submitted by root (this test); uid 1001 is someone else.
    let job = accepted(fe.submit("mine", 1, &["/bin/sleep", "100"]));
    wait_until("spawn", || n0.spawned(job).len() == 1);
    std::fs::set_permissions(&g.dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for verb in ["kill", "suspend"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gang"))
            .arg("--socket")
            .arg(g.sock())
            .args([verb, &job.0.to_string()])
            .uid(1001)
            .gid(1001)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("belongs to another user"), "{verb}: {err}");
    }
    assert!(!n0
        .got()
        .iter()
        .any(|m| matches!(m, ToAgent::KillJob { .. } | ToAgent::SuspendJob { .. })));
    assert!(
        g.log().contains("uid 1001 may not act on job"),
        "{}",
        g.log()
    );
    fe.send(FromClient::Kill { job });
    assert_eq!(fe.recv(), ToClient::Done, "the owner (root) may");
}

#[test]
fn a_lone_job_is_not_frozen_at_every_slot_boundary() {
    let g = Gangd::start("lone", 1, &["--slot-ms", "20"]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("alone", 1, &["/bin/true"]));
    wait_until("spawn", || n0.spawned(job).len() == 1);
    thread::sleep(Duration::from_millis(500));
    let freezes = n0
        .got()
        .iter()
        .filter(|m| matches!(m, ToAgent::Freeze { .. }))
        .count();
    assert!(
        freezes <= 2,
        "{freezes} freezes in 25 slots: only a change of the table may switch a lone job"
    );
}

#[test]
fn a_node_too_slow_for_the_switch_into_a_lone_slot_catches_up_at_the_slots_end() {
    let g = Gangd::start("catch-up", 2, &["--slot-ms", "200"]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    let n1 = FakeAgent::join(&g, "n1", 1);
    // n1 misses the phase timeout of the first switch: it is left out.
    n1.ignore_freezes(1);
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("lone", 2, &["/bin/true"]));
    wait_until("both ranks spawned", || {
        n0.spawned(job).len() + n1.spawned(job).len() == 2
    });
    wait_until("n0 runs the job's slot", || !n0.switched_to().is_empty());
    wait_until("the switch that left n1 out", || {
        g.switches()
            .iter()
            .any(|s| !s["failed"].as_array().unwrap().is_empty())
    });
    assert!(
        n1.switched_to().is_empty(),
        "n1 answered no Freeze, yet was switched"
    );
    // The slot is alone in the rotation, so no next switch would come: n1
    // must be switched into it all the same, without freezing n0 again.
    let n0_switches = n0.switched_to().len();
    wait_until("n1 catches up", || !n1.switched_to().is_empty());
    assert_eq!(n1.switched_to(), n0.switched_to()[..1].to_vec());
    assert_eq!(
        n0.switched_to().len(),
        n0_switches,
        "the catch-up switched n0 too"
    );
}

/// The slot in force on a fake agent: the last Switch's generation and the
/// job its table runs in that slot.
fn running_on(ag: &FakeAgent) -> (Gen, JobId, u32) {
    let got = ag.got();
    let (gen, slot, slot_ms) = got
        .iter()
        .rev()
        .find_map(|m| match m {
            ToAgent::Switch { gen, slot, slot_ms } => Some((*gen, *slot, *slot_ms)),
            _ => None,
        })
        .unwrap();
    let job = got
        .iter()
        .rev()
        .find_map(|m| match m {
            ToAgent::Schedule { slots } => Some(slots[slot as usize][0].job),
            _ => None,
        })
        .unwrap();
    (gen, job, slot_ms)
}

#[test]
fn a_slot_ends_early_once_every_node_of_its_job_has_yielded() {
    // Slots of a minute: only yields can end one within the test.
    let g = Gangd::start("yield", 3, &["--slot-ms", "60000"]);
    let agents = three_nodes(&g);
    let mut fe = FrontEnd::connect(&g);
    let a = accepted(fe.submit("a", 3, &["/bin/true"]));
    let mut fe2 = FrontEnd::connect(&g);
    let b = accepted(fe2.submit("b", 3, &["/bin/true"]));
    for ag in &agents {
        wait_until("spawns", || {
            ag.spawned(a).len() == 1 && ag.spawned(b).len() == 1
        });
    }
    // Both jobs started: the tables changed, so one switch comes at once.
    wait_until("a first switch", || {
        agents
            .iter()
            .all(|ag| ag.got().iter().any(|m| matches!(m, ToAgent::Switch { .. })))
            && !g.switches().is_empty()
    });
    thread::sleep(Duration::from_millis(300));
    let before = g.switches().len();
    let (gen, job, slot_ms) = running_on(&agents[0]);
    assert_eq!(slot_ms, 60000, "the nodes learn the slot's length");

    // Two of three nodes, a stale generation, another job: no switch.
    for ag in &agents[..2] {
        ag.send(FromAgent::Yielded { gen, job });
    }
    agents[2].send(FromAgent::Yielded {
        gen: Gen(gen.0 - 1),
        job,
    });
    let other = if job == a { b } else { a };
    agents[2].send(FromAgent::Yielded { gen, job: other });
    thread::sleep(Duration::from_millis(500));
    assert_eq!(g.switches().len(), before, "not every node yielded yet");

    // The last node yields: the slot ends now, not in a minute.
    agents[2].send(FromAgent::Yielded { gen, job });
    wait_until("an early switch", || g.switches().len() > before);
    let (next_gen, next_job, _) = running_on(&agents[0]);
    assert!(next_gen.0 > gen.0);
    assert_eq!(next_job, other, "the other job's slot comes");
    for ag in &agents {
        ag.exit_all(a, ExitStatus::Exited(0));
        ag.exit_all(b, ExitStatus::Exited(0));
    }
    assert_eq!(fe.ended().0, 0);
    assert_eq!(fe2.ended().0, 0);
}

/// The PmiStart this fake node got for `job`: (its ranks in the map, the
/// preset).
fn pmi_start(ag: &FakeAgent, job: JobId) -> (Vec<u32>, Vec<(String, String)>) {
    ag.got()
        .iter()
        .find_map(|m| match m {
            ToAgent::PmiStart {
                job: j,
                preset,
                map,
                ..
            } if *j == job && map.size == 3 => {
                let ranks = map.ranks_of(ag.id).into_iter().map(|(r, _)| r).collect();
                Some((ranks, preset.clone()))
            }
            _ => None,
        })
        .expect("a PmiStart")
}

fn barrier_outs(ag: &FakeAgent, job: JobId) -> Vec<(u64, Vec<(String, String)>)> {
    ag.got()
        .iter()
        .filter_map(|m| match m {
            ToAgent::PmiBarrierOut {
                job: j,
                epoch,
                entries,
            } if *j == job => Some((*epoch, entries.clone())),
            _ => None,
        })
        .collect()
}

/// TCP ports `pid` listens on (from /proc: its socket inodes in LISTEN).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().to_string();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A: LISTEN), inode.
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// A node that knows none of its ranks at StartJob (its map refused or
/// lost) answers StartFailed: its ranks count as exited 127, which fails
/// the job and kills the other nodes' ranks.
#[test]
fn a_node_that_cannot_start_its_ranks_fails_the_job_with_127() {
    let g = Gangd::start("startfail", 3, &[]);
    let agents = three_nodes(&g);
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("sf", 3, &["/bin/true"]));
    for ag in &agents {
        wait_until("spawns", || ag.spawned(job).len() == 1);
    }
    let bad = &agents[1];
    bad.send(FromAgent::StartFailed {
        job: JobId(job.0 + 100),
        reason: "a job gangd does not run: ignored".into(),
    });
    bad.send(FromAgent::StartFailed {
        job,
        reason: format!("no peer table for job {job}"),
    });
    for ag in [&agents[0], &agents[2]] {
        wait_until("the others killed", || {
            ag.got()
                .iter()
                .any(|m| matches!(m, ToAgent::KillJob { job: j, .. } if *j == job))
        });
        ag.exit_all(job, ExitStatus::Signaled(9));
    }
    let (code, summary, failure) = fe.ended();
    assert_eq!(code, 127, "{summary}");
    let failure = failure.expect("the failed rank");
    assert_eq!(failure.node, bad.name);
    assert_eq!(failure.rank, bad.spawned(job)[0]);
    assert_eq!(failure.status, ExitStatus::Exited(127));
}

#[test]
fn mpi_ranks_find_each_other_through_their_agents_and_an_abort_ends_the_job() {
    let g = Gangd::start("pmi", 3, &[]);
    let agents = three_nodes(&g);
    let mut fe = FrontEnd::connect(&g);
    let job = accepted(fe.submit("mpi", 3, &["/bin/true"]));
    for ag in &agents {
        wait_until("spawns", || ag.spawned(job).len() == 1);
    }
    // The old attack surface is gone: gangd listens on its agent port
    // only, and no rank is told of a PMI port.
    assert_eq!(listening_ports(g.child.id()), [g.port]);
    for ag in &agents {
        for m in ag.got() {
            if let ToAgent::StartJob { env, .. } = m {
                assert!(env.iter().all(|(k, _)| !k.starts_with("PMI_")), "{env:?}");
            }
        }
        let first_start = ag
            .got()
            .iter()
            .position(|m| matches!(m, ToAgent::PmiStart { .. }));
        let first_spawn = ag
            .got()
            .iter()
            .position(|m| matches!(m, ToAgent::StartJob { .. }));
        assert!(first_start < first_spawn, "PmiStart comes before the ranks");
    }
    let starts: Vec<_> = agents.iter().map(|ag| pmi_start(ag, job)).collect();
    let mut ranks: Vec<u32> = starts.iter().flat_map(|(r, _)| r.clone()).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2]);
    assert!(starts.iter().all(|(_, p)| p
        == &[(
            "PMI_process_mapping".to_string(),
            "(vector,(0,3,1))".to_string()
        )]));

    // A node relaying for a job gangd does not run, or for a rank it does
    // not run, is refused.
    agents[0].send(FromAgent::PmiFailed {
        job: JobId(job.0 + 100),
        rank: 0,
        exitcode: Some(1),
        reason: "forged".into(),
    });
    let rank_of = |i: usize| starts[i].0[0];
    agents[0].send(FromAgent::PmiBarrierIn {
        job,
        epoch: 0,
        ranks: vec![rank_of(1)],
        puts: vec![],
    });
    // Each node enters barrier 0 with its rank's business card.
    for (i, ag) in agents.iter().enumerate() {
        let r = rank_of(i);
        ag.send(FromAgent::PmiBarrierIn {
            job,
            epoch: 0,
            ranks: vec![r],
            puts: vec![PmiPut {
                rank: r,
                key: format!("card{r}"),
                value: format!("addr{r}"),
            }],
        });
    }
    for ag in &agents {
        wait_until("barrier out", || !barrier_outs(ag, job).is_empty());
        let outs = barrier_outs(ag, job);
        assert_eq!(outs.len(), 1);
        let (epoch, mut entries) = outs[0].clone();
        entries.sort();
        assert_eq!(epoch, 0);
        assert_eq!(
            entries,
            (0..3)
                .map(|r| (format!("card{r}"), format!("addr{r}")))
                .collect::<Vec<_>>()
        );
    }
    assert!(g.log().contains("PMI message refused"), "{}", g.log());
    assert!(
        g.log().contains("which gangd does not run: refused"),
        "{}",
        g.log()
    );

    // Rank 0 aborts: gangd kills the whole job.
    let node0 = (0..3).find(|&i| rank_of(i) == 0).unwrap();
    agents[node0].send(FromAgent::PmiFailed {
        job,
        rank: 0,
        exitcode: Some(7),
        reason: "rank 0 called PMI_Abort(7)".into(),
    });
    for ag in &agents {
        wait_until("a kill", || {
            ag.got()
                .iter()
                .any(|m| matches!(m, ToAgent::KillJob { job: j, .. } if *j == job))
        });
        ag.exit_all(job, ExitStatus::Signaled(9));
    }
    let (code, summary, failure) = fe.ended();
    assert_eq!(code, 7, "MPI abort's exit code: {summary}");
    assert_eq!(failure.map(|f| f.rank), Some(0), "{summary}");
    assert!(g.log().contains("called MPI abort"), "{}", g.log());
}

#[test]
fn job_limits_beyond_gangds_maximum_are_refused_and_the_others_reach_the_node() {
    let g = Gangd::start(
        "limits",
        1,
        &["--max-job-pids", "100", "--max-job-memory", "1G"],
    );
    let agent = FakeAgent::join(&g, "n0", 1);
    let mut fe = FrontEnd::connect(&g);
    let ask = |p, m| JobLimits {
        max_pids: p,
        max_memory: m,
    };
    match fe.submit_with("greedy", 1, &["/bin/true"], ask(Some(101), None)) {
        ToClient::Refused { reason } => assert_eq!(
            reason,
            "--max-pids 101 is more than the cluster allows (100)"
        ),
        other => panic!("{other:?}"),
    }
    let mut fe = FrontEnd::connect(&g);
    match fe.submit_with("greedy2", 1, &["/bin/true"], ask(None, Some(2 << 30))) {
        ToClient::Refused { reason } => assert!(reason.contains("--max-memory"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let mut fe = FrontEnd::connect(&g);
    let within = ask(Some(64), Some(512 << 20));
    let job = accepted(fe.submit_with("modest", 1, &["/bin/true"], within));
    wait_until("the spawn", || agent.spawned(job).len() == 1);
    let limits = agent
        .got()
        .iter()
        .find_map(|m| match m {
            ToAgent::StartJob { job: j, limits, .. } if *j == job => Some(*limits),
            _ => None,
        })
        .unwrap();
    assert_eq!(limits, within);
}

#[test]
fn a_clock_probe_is_echoed_with_gangds_receive_and_send_times() {
    let g = Gangd::start("clock", 1, &[]);
    let n0 = FakeAgent::join(&g, "n0", 1);
    let echo = || {
        n0.got().into_iter().find_map(|m| match m {
            ToAgent::ClockEcho { seq, t1, t2, t3 } => Some((seq, t1, t2, t3)),
            _ => None,
        })
    };
    n0.send(FromAgent::ClockProbe { seq: 5, t1: 42 });
    wait_until("the echo", || echo().is_some());
    let (seq, t1, t2, t3) = echo().unwrap();
    assert_eq!((seq, t1), (5, 42), "the probe's own seq and t1 come back");
    // gangd's CLOCK_MONOTONIC: read on receipt, then just before the write.
    assert!(t2 > 0 && t2 <= t3, "t2 {t2} t3 {t3}");
    // A report is kept, not echoed; the node stays in the cluster.
    n0.send(FromAgent::ClockStatus {
        report: ClockReport {
            source: ClockSource::Gangd,
            state: ClockState::Good,
            offset_ns: 7,
            rate_ppb: 0,
            error_bound_ns: 100_000,
            samples: 3,
            steps: 0,
        },
    });
    n0.send(FromAgent::ClockProbe { seq: 6, t1: 43 });
    wait_until("the second echo", || {
        n0.got()
            .iter()
            .any(|m| matches!(m, ToAgent::ClockEcho { seq: 6, t1: 43, .. }))
    });
}
