//! A real Open MPI program (Debian's libmpi, built here with
//! mpicc.openmpi: pmix/tests/clients/mpi_ring.c) started as one rank on
//! each of two agents, bootstrapping through each agent's per-job PMIx
//! server (gang-pmix-server, agent/pmix.rs) with gangd's half of the
//! fence (ClusterPmi) run by the test: MPI_Init's modex crosses the
//! "nodes" as a PMI barrier, the ring and allreduce are right, MPI_Abort
//! fails the job with its code, and a process outside the job's cgroup
//! cannot reach the job's server. Needs root, a writable cgroup2 and
//! mpicc.openmpi; skipped with a note where they are missing.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::sync::mpsc;

use gang_wire::pmi::cluster::Action;
use gang_wire::pmi::ClusterPmi;
use gang_wire::proto::{DirEntry, JobMap};

use super::*;

/// What a two-node Open MPI job did.
#[derive(Default, Debug)]
struct Run {
    out: BTreeMap<u32, String>,
    exits: BTreeMap<u32, ExitStatus>,
    failed: Option<(u32, Option<i64>, String)>,
    /// Barriers gangd completed (PMIx fences across the nodes).
    epochs: u64,
    /// What a probe outside the job's cgroup got when it tried the job's
    /// PMIx port on rank 0's node (once a rank was running).
    probe: Option<String>,
}

/// Two agents' links, as gangd holds them: node i + 1 is conns[i].
struct Pair {
    rx: mpsc::Receiver<(u32, FromAgent)>,
    writers: Vec<Arc<Session>>,
}

impl Pair {
    fn new(conns: Vec<Conn>) -> Pair {
        let (tx, rx) = mpsc::channel::<(u32, FromAgent)>();
        let mut writers = Vec::new();
        for (i, mut conn) in conns.into_iter().enumerate() {
            writers.push(conn.session.clone());
            let tx = tx.clone();
            thread::spawn(move || loop {
                let msg = match read_frame::<FromAgent>(&mut conn.reader) {
                    Ok(Some(m)) => m,
                    other => {
                        eprintln!("agent {}'s link ended: {other:?}", i + 1);
                        return;
                    }
                };
                if tx.send((i as u32 + 1, msg)).is_err() {
                    return;
                }
            });
        }
        Pair { rx, writers }
    }
}

/// Runs `argv` as rank r on agent r + 1 (r = 0, 1), gangd's half of PMI
/// in the test, until both ranks exit; a PMI failure kills the job as
/// gangd does.
fn run_two(pair: &Pair, job: JobId, argv: &[&str]) -> Run {
    let (rx, writers) = (&pair.rx, &pair.writers);
    let send = |node: u32, m: ToAgent| {
        write_frame(&mut SessionWriter(writers[node as usize - 1].clone()), &m).unwrap()
    };
    let mut pmi = ClusterPmi::new(job, vec![NodeId(1), NodeId(2)]);
    let route = |actions: Vec<Action>| {
        for a in actions {
            if let Action::ToNode(n, m) = a {
                send(n.0, m);
            }
        }
    };
    // gangd's node directory names the nodes as their certificates do.
    let nodes: Vec<DirEntry> = (1..=2)
        .map(|i| DirEntry(NodeId(i), format!("pmix-n{i}"), "127.0.0.1".into()))
        .collect();
    for n in [1, 2] {
        let (you, reset) = (None, false);
        let nodes = nodes.clone();
        send(n, ToAgent::NodeDirectory { you, reset, nodes });
    }
    let map = JobMap::from_ranks(&[(NodeId(1), 20000), (NodeId(2), 20000)]);
    let env = [("PATH", "/usr/bin:/bin")];
    // The same three messages for both nodes, as gangd sends them.
    let start = start_job(job.0, map.clone(), argv, &env);
    for n in [1, 2] {
        send(n, start[0].clone());
        send(n, pmi.start(&map));
        send(n, start[1].clone());
    }
    let mut run = Run::default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut beat, mut last_beat) = (0, Instant::now());
    while run.exits.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the job to end within 120 s: {run:?}"
        );
        // As gangd: a heartbeat every second (an agent drops a link that
        // stays silent for 15 s, and a loaded host can take that long).
        if last_beat.elapsed() >= Duration::from_secs(1) {
            beat += 1;
            last_beat = Instant::now();
            for n in [1, 2] {
                send(n, ToAgent::Heartbeat { seq: beat });
            }
        }
        let Ok((node, msg)) = rx.recv_timeout(Duration::from_millis(500)) else {
            continue;
        };
        match msg {
            FromAgent::RanksStarted { .. } if run.probe.is_none() => {
                run.probe = Some(probe_pmix_port(job));
            }
            FromAgent::RankOutput {
                rank, stream, data, ..
            } => {
                let text = String::from_utf8_lossy(&data.0).to_string();
                if stream == Stream::Stderr {
                    eprintln!("rank {rank}: {text}");
                }
                run.out.entry(rank).or_default().push_str(&text);
            }
            FromAgent::RankExited { rank, status, .. } => {
                run.exits.insert(rank, status);
            }
            FromAgent::PmiPuts { puts, .. } => route(pmi.on_puts(NodeId(node), puts).unwrap()),
            FromAgent::PmiBarrierIn {
                epoch, ranks, puts, ..
            } => route(
                pmi.on_barrier_in(NodeId(node), epoch, &ranks, puts)
                    .unwrap(),
            ),
            FromAgent::PmiFailed {
                rank,
                exitcode,
                reason,
                ..
            } => {
                run.failed = Some((rank, exitcode, reason));
                for n in [1, 2] {
                    send(n, ToAgent::KillJob { job, signal: 9 });
                }
            }
            FromAgent::Error { message } => eprintln!("agent {node}: {message}"),
            _ => {}
        }
    }
    run.epochs = pmi.epoch();
    run
}

/// Connects, from this process (not in the job's cgroup), to every
/// 127.0.0.1 port gang-pmix-server listens on; what happened, e.g.
/// "refused: Operation not permitted".
fn probe_pmix_port(job: JobId) -> String {
    // The server says where it is in its tmpdir's name only through the
    // agent's log; ss is not needed: /proc/net/tcp lists listeners (state
    // 0A) with their inode, and the server's fds hold that inode.
    thread::sleep(Duration::from_millis(200));
    let ports = pmix_listen_ports();
    if ports.is_empty() {
        return format!("job {job}: no gang-pmix-server listening");
    }
    let mut said = Vec::new();
    for port in ports {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(_) => said.push(format!("{port}: connected")),
            Err(e) => said.push(format!("{port}: refused: {e}")),
        }
    }
    said.join("; ")
}

/// The TCP ports gang-pmix-server processes listen on.
fn pmix_listen_ports() -> Vec<u16> {
    let mut inodes = Vec::new();
    for p in fs::read_dir("/proc").unwrap().flatten() {
        let comm = fs::read_to_string(p.path().join("comm")).unwrap_or_default();
        if comm.trim() != "gang-pmix-serve" {
            continue;
        }
        let Ok(fds) = fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(t) = fs::read_link(fd.path()) {
                let t = t.to_string_lossy().to_string();
                if let Some(i) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    inodes.push(i.to_string());
                }
            }
        }
    }
    let tcp = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    tcp.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            (*state == "0A" && inodes.iter().any(|i| i == inode))
                .then(|| u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok())
                .flatten()
        })
        .collect()
}

#[test]
fn an_open_mpi_job_on_two_agents_bootstraps_through_their_pmix_servers() {
    let Some(mount) = cgroup2_mount() else {
        eprintln!("no writable cgroup2 here: the PMIx servers (guarded by cgroup) not tested");
        return;
    };
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: the PMIx connect guard cannot be attached; not tested");
        return;
    }
    let Some(program) = super::pmi::build_mpi("mpicc.openmpi", "pmix/tests/clients/mpi_ring.c")
    else {
        return;
    };
    let argv = program.to_str().unwrap();
    let root = mount.join(format!("scx-gang-pmix-test-{}", std::process::id()));
    let ca = TestCa::new("agent-pmix");
    let gangd = Gangd::new(&ca);
    let roots = [root.join("a"), root.join("b")];
    let _a = start_agent(
        "pmix-n1",
        gangd.addr(),
        &ca,
        Some(roots[0].clone()),
        accept_all(),
    );
    let c1 = gangd.accept(1).unwrap();
    let _b = start_agent(
        "pmix-n2",
        gangd.addr(),
        &ca,
        Some(roots[1].clone()),
        accept_all(),
    );
    let c2 = gangd.accept(2).unwrap();

    let pair = Pair::new(vec![c1, c2]);
    let run = run_two(&pair, JobId(41), &[argv]);
    assert_eq!(run.failed, None, "{run:?}");
    assert_eq!(run.exits[&0], ExitStatus::Exited(0), "{run:?}");
    assert_eq!(run.exits[&1], ExitStatus::Exited(0), "{run:?}");
    assert!(run.out[&0].contains("ok rank 0 of 2"), "{run:?}");
    assert!(run.out[&1].contains("ok rank 1 of 2"), "{run:?}");
    // MPI_Init's modex and two empty fences, each one barrier of the job.
    assert!(run.epochs >= 2, "{run:?}");
    let probe = run.probe.clone().unwrap();
    assert!(
        probe.contains("refused") && !probe.contains("connected"),
        "a process outside the job's cgroup reached its PMIx server: {probe}"
    );
    eprintln!("probe of the job's PMIx port from outside its cgroup: {probe}");

    // MPI_Abort(.., 3) on rank 0: the job fails with 3, as gangd sees it.
    let run = run_two(&pair, JobId(42), &[argv, "abort", "3"]);
    let (rank, code, why) = run.failed.clone().expect("the abort fails the job");
    assert_eq!((rank, code), (0, Some(3)), "{why}");
    assert!(why.contains("PMIx_Abort(3)"), "{why}");
    assert!(
        pmix_listen_ports().is_empty() || {
            thread::sleep(Duration::from_secs(4));
            pmix_listen_ports().is_empty()
        },
        "the jobs' PMIx servers went with their ranks"
    );
    let _ = fs::remove_file(&program);
}
