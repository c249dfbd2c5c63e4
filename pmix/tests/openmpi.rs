//! Open MPI 4.1 programs (tests/clients/mpi_ring.c, built with
//! mpicc.openmpi) started without mpirun: each rank is exec'ed straight
//! from the test with the server's fork environment and
//! gang_pmix::OMPI_ENV.
mod common;

use std::time::Duration;

use common::{assert_all_ok, assert_said, build, fixture, have, one_node, run_ranks, Event};

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
    // The host does not kill the job here (the agent will): rank 1, left
    // in its barrier, is killed at the time limit.
    let _ = run_ranks(&f.server, "mpiabort", &[0, 1], &ring(), &["abort", "3"], &ompi_env(), Duration::from_secs(20));
    let got = f
        .host
        .wait_for(Duration::from_secs(5), |e| matches!(e, Event::Abort { nspace, .. } if nspace == "mpiabort"));
    match got {
        Some(Event::Abort { rank, status, .. }) => assert_eq!((rank, status), (0, 3)),
        other => panic!("no abort from MPI_Abort: {other:?}"),
    }
    f.server.deregister_job("mpiabort");
}

