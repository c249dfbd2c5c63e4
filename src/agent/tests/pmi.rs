//! A real MPICH program (Debian's libmpich, built here with mpicc) started
//! as two ranks by the agent, bootstrapping over PMI_FD through the
//! agent's relay, with gangd's half of PMI (ClusterPmi) run by the fake
//! gangd: MPI_Init, the business-card exchange and MPI_Finalize work, and
//! no rank is told of a PMI port. Skipped (with a note) where mpicc is
//! missing.

use std::collections::BTreeMap;
use std::process::Command;

use gang_wire::pmi::cluster::Action;
use gang_wire::pmi::ClusterPmi;
use gang_wire::proto::JobMap;

use super::*;

/// Builds mpi_ring.c with MPICH's mpicc (by name: Debian's plain `mpicc`
/// is Open MPI's when both are installed); None if there is none.
fn mpi_ring() -> Option<PathBuf> {
    build_mpi("mpicc.mpich", "src/agent/tests/mpi_ring.c")
}

/// Builds `src` (from the repository's root) with the MPI compiler `cc`
/// into a temporary file; None (and a note) if there is no such compiler.
pub(super) fn build_mpi(cc: &str, src: &str) -> Option<PathBuf> {
    let name = Path::new(src)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let out = std::env::temp_dir().join(format!("scx-gang-{cc}-{name}-{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    match Command::new(cc).arg(&src).arg("-o").arg(&out).status() {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("{cc} failed: {s}"),
        Err(e) => {
            eprintln!("no {cc} ({e}): skipping this MPI test");
            None
        }
    }
}

/// What a job of the MPI program did, as the fake gangd saw it.
#[derive(Default)]
struct MpiRun {
    out: BTreeMap<u32, String>,
    exits: BTreeMap<u32, ExitStatus>,
    finalized: u32,
    failed: Option<(u32, Option<i64>, String)>,
}

/// Two ranks on node 1, the agent's id (tests.rs's Gangd sends the
/// directory naming it "node1"): the map of every job here.
fn two_ranks_here() -> JobMap {
    JobMap::from_ranks(&[(NodeId(1), 20000), (NodeId(1), 20001)])
}

/// Starts `argv` as two ranks of `job` on the agent behind `conn`, with
/// gangd's half of PMI in `pmi`, until both exit. A PMI failure is
/// answered as gangd does: the job is killed.
fn run_mpi(conn: &mut Conn, pmi: &mut ClusterPmi, job: JobId, argv: &[&str]) -> MpiRun {
    let send = |conn: &mut Conn, actions: Vec<Action>| {
        for a in actions {
            if let Action::ToNode(_, m) = a {
                conn.send(m);
            }
        }
    };
    conn.send(pmi.start(&two_ranks_here()));
    // UCX's shared memory needs nothing from the host; keep it off the
    // network so that the test runs in a sandbox.
    let env = [("PATH", "/usr/bin:/bin"), ("UCX_TLS", "self,sm")];
    conn.send_all(start_job(job.0, two_ranks_here(), argv, &env));
    let mut run = MpiRun::default();
    while run.exits.len() < 2 {
        match conn.recv() {
            FromAgent::RanksStarted { ranks, .. } => {
                let started: Vec<u32> = ranks.iter().map(|&(r, _)| r).collect();
                assert_eq!(started, [0, 1], "one answer for both ranks here");
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
            FromAgent::PmiPuts { puts, .. } => send(conn, pmi.on_puts(NodeId(1), puts).unwrap()),
            FromAgent::PmiBarrierIn {
                epoch, ranks, puts, ..
            } => send(
                conn,
                pmi.on_barrier_in(NodeId(1), epoch, &ranks, puts).unwrap(),
            ),
            FromAgent::PmiFinalized { rank, .. } => {
                run.finalized += 1;
                send(conn, pmi.on_finalized(NodeId(1), rank).unwrap());
            }
            FromAgent::PmiFailed {
                rank,
                exitcode,
                reason,
                ..
            } => {
                run.failed = Some((rank, exitcode, reason));
                conn.send(ToAgent::KillJob { job, signal: 9 });
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    run
}

#[test]
fn an_mpich_program_bootstraps_over_pmi_fd_through_the_agent() {
    let Some(program) = mpi_ring() else { return };
    let ca = TestCa::new("agent-mpi");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("mpi-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let argv = program.to_str().unwrap();

    let job = JobId(21);
    let mut pmi = ClusterPmi::new(job, vec![NodeId(1); 2]);
    let run = run_mpi(&mut conn, &mut pmi, job, &[argv]);
    let out = &run.out;
    assert_eq!(run.failed, None, "{out:?}");
    assert_eq!(run.exits[&0], ExitStatus::Exited(0), "{out:?}");
    assert_eq!(run.exits[&1], ExitStatus::Exited(0), "{out:?}");
    assert!(
        out[&0].contains("rank 0 of 2 got 1, no PMI port"),
        "{out:?}"
    );
    assert!(
        out[&1].contains("rank 1 of 2 got 0, no PMI port"),
        "{out:?}"
    );
    assert_eq!(run.finalized, 2);
    assert!(pmi.epoch() >= 1, "MPI_Init went through a barrier");

    // MPI_Abort reaches gangd with its exit code.
    let job = JobId(23);
    let mut pmi = ClusterPmi::new(job, vec![NodeId(1); 2]);
    let run = run_mpi(&mut conn, &mut pmi, job, &[argv, "abort"]);
    let _ = std::fs::remove_file(&program);
    let (rank, exitcode, reason) = run.failed.expect("the abort reached gangd");
    assert_eq!((rank, exitcode), (1, Some(7)), "{reason}");
}

#[test]
fn each_rank_holds_its_own_pmi_socket_and_no_other() {
    let ca = TestCa::new("agent-mpi-fds");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("fd-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let job = JobId(22);
    let pmi = ClusterPmi::new(job, vec![NodeId(1); 2]);
    conn.send(pmi.start(&two_ranks_here()));
    // Each rank lists the sockets it holds (its shell's fds are what it
    // inherited) and its PMI environment; rank 0 is still alive, holding
    // its socket, when rank 1 starts.
    let script = r#"echo "$PMI_FD $PMI_RANK $PMI_SIZE ${PMI_PORT-noport} ${PMI_ID-noid}"; for f in /proc/$$/fd/*; do readlink $f; done | grep -c socket; sleep 0.3"#;
    let env = [("PATH", "/usr/bin:/bin"), ("PMI_PORT", "10.0.0.1:99")];
    conn.send_all(start_job(
        job.0,
        two_ranks_here(),
        &["sh", "-c", script],
        &env,
    ));
    let mut out: BTreeMap<u32, String> = BTreeMap::new();
    let mut exits = 0;
    while exits < 2 {
        match conn.recv() {
            FromAgent::RankOutput { rank, data, .. } => out
                .entry(rank)
                .or_default()
                .push_str(&String::from_utf8_lossy(&data.0)),
            FromAgent::RankExited { status, .. } => {
                assert_eq!(status, ExitStatus::Exited(0), "{out:?}");
                exits += 1;
            }
            FromAgent::RanksStarted { ranks, .. } => {
                let started: Vec<u32> = ranks.iter().map(|&(r, _)| r).collect();
                assert_eq!(started, [0, 1], "one answer for both ranks here");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for rank in 0..2 {
        let lines: Vec<&str> = out[&rank].lines().collect();
        let env: Vec<&str> = lines[0].split(' ').collect();
        assert!(env[0].parse::<u32>().unwrap() > 2, "{out:?}");
        assert_eq!(
            env[1..],
            [&rank.to_string(), "2", "noport", "noid"],
            "{out:?}"
        );
        assert_eq!(lines[1], "1", "exactly one socket, its own: {out:?}");
    }
}
