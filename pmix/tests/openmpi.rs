//! Open MPI 4.1 programs (tests/clients/mpi_ring.c, built with
//! mpicc.openmpi) started without mpirun: each rank is exec'ed straight
//! from the test with the server's fork environment and
//! gang_pmix::OMPI_ENV.
mod common;

use std::time::Duration;

use common::{
    assert_all_ok, assert_said, build, fixture, have, one_node, run_ranks, spawn_ranks, wait_ranks,
    Event,
};

const LIMIT: Duration = Duration::from_secs(120);

fn ring() -> std::path::PathBuf {
    build("mpi_ring.c", "mpicc.openmpi", &[])
}

fn ompi_env() -> Vec<(&'static str, &'static str)> {
    gang_pmix::OMPI_ENV.to_vec()
}

#[test]
fn an_open_mpi_ring_and_allreduce_run_as_2_and_3_ranks_without_mpirun() {
    if !have(true) {
        return;
    }
    let f = fixture();
    for size in [2u32, 3] {
        let ns = format!("ring{size}");
        f.server.register_job(&one_node(&ns, size)).unwrap();
        let ranks: Vec<u32> = (0..size).collect();
        let outs = run_ranks(&f.server, &ns, &ranks, &ring(), &[], &ompi_env(), LIMIT);
        assert_all_ok(&outs);
        assert_said(&outs, &ranks, &format!("ok rank {{r}} of {size}"));
        for o in &outs {
            // A launch-free start is quiet: no warning about a missing
            // launcher, transport or binding.
            assert!(
                o.stderr.is_empty(),
                "stderr: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        f.server.deregister_job(&ns);
    }
}

#[test]
fn an_mpi_abort_reaches_the_host_with_its_code() {
    if !have(true) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("mpiabort", 2)).unwrap();
    // The host does not end the job here (the agent will): once the abort
    // is in, the test kills what is left (rank 1, in its barrier).
    let mut children = spawn_ranks(
        &f.server,
        "mpiabort",
        &[0, 1],
        &ring(),
        &["abort", "3"],
        &ompi_env(),
    );
    let got = f.host.wait_for(
        LIMIT,
        |e| matches!(e, Event::Abort { nspace, .. } if nspace == "mpiabort"),
    );
    let _ = children[1].kill();
    let outs = wait_ranks(children, LIMIT);
    assert_eq!(
        outs[0].status.code(),
        Some(3),
        "MPI_Abort exits with its code: {:?}",
        outs[0]
    );
    match got {
        Some(Event::Abort { rank, status, .. }) => assert_eq!((rank, status), (0, 3)),
        other => panic!("no abort from MPI_Abort: {other:?}"),
    }
    f.server.deregister_job("mpiabort");
}

/// Stops every rank (SIGSTOP, as the signal switcher does; the cgroup
/// freezer stops them the same way, all threads at once) for `pause`
/// in the middle of a run, then continues them: the run must finish right.
/// `btl` replaces OMPI_ENV's transports.
fn stopped_and_continued(nspace: &str, size: u32, btl: &str, pause: Duration) {
    let f = fixture();
    f.server.register_job(&one_node(nspace, size)).unwrap();
    let ranks: Vec<u32> = (0..size).collect();
    let env: Vec<(&str, &str)> = ompi_env()
        .into_iter()
        .map(|(k, v)| {
            if k == "OMPI_MCA_btl" {
                (k, btl)
            } else {
                (k, v)
            }
        })
        .collect();
    let mut children = spawn_ranks(&f.server, nspace, &ranks, &ring(), &["long", "2000"], &env);
    std::thread::sleep(Duration::from_millis(300));
    for c in &mut children {
        assert!(
            c.try_wait().unwrap().is_none(),
            "a rank ended before it could be stopped"
        );
    }
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    for &p in &pids {
        unsafe { libc::kill(p, libc::SIGSTOP) };
    }
    std::thread::sleep(pause);
    for &p in &pids {
        unsafe { libc::kill(p, libc::SIGCONT) };
    }
    let outs = wait_ranks(children, LIMIT);
    assert_all_ok(&outs);
    assert_said(&outs, &ranks, &format!("ok rank {{r}} of {size}"));
    f.server.deregister_job(nspace);
}

#[test]
fn open_mpi_ranks_stopped_for_10_s_mid_run_finish_right_over_shared_memory() {
    if !have(true) {
        return;
    }
    stopped_and_continued("stopped-vader", 2, "self,vader", Duration::from_secs(10));
}

#[test]
fn open_mpi_ranks_stopped_for_10_s_mid_run_finish_right_over_tcp() {
    if !have(true) {
        return;
    }
    stopped_and_continued("stopped-tcp", 2, "self,tcp", Duration::from_secs(10));
}
