//! alltoall: 3, 2, 1, 4 ranks; wait policies; failures.
mod common;
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_alltoall");

#[test]
fn three_ranks() {
    let vs = ok_run(BIN, "alltoall", 3, &["--iters", "20"], Some(20));
    not_waited(&vs);
    for v in &vs {
        assert_eq!(v["bytes"], 65536);
        assert_eq!(v["rounds"], 3);
    }
}

#[test]
fn two_ranks_one_mib() {
    // Blocks far larger than the socket buffers, sent both ways at once.
    ok_run(
        BIN,
        "alltoall",
        2,
        &["--iters", "5", "--bytes", "1048576"],
        Some(5),
    );
}

#[test]
fn one_rank() {
    ok_run(BIN, "alltoall", 1, &["--iters", "3"], Some(3));
}

#[test]
fn four_ranks_odd_bytes() {
    let vs = ok_run(
        BIN,
        "alltoall",
        4,
        &["--iters", "10", "--bytes", "10007"],
        Some(10),
    );
    assert_eq!(vs[0]["rounds"], 3);
}

#[test]
fn wait_adaptive() {
    waited(&ok_run(
        BIN,
        "alltoall",
        3,
        &["--iters", "20", "--wait", "adaptive"],
        Some(20),
    ));
}

#[test]
fn wait_inslot_and_yield() {
    let vs = ok_run(
        BIN,
        "alltoall",
        3,
        &["--iters", "20", "--wait", "inslot:100", "--yield"],
        Some(20),
    );
    waited(&vs);
    for v in &vs {
        // One wait per received block: 2 peers x 20 iterations.
        assert_eq!(v["waits"], 40, "{v}");
    }
}

#[test]
fn wrong_env() {
    bad_env(BIN, "alltoall");
}

#[test]
fn missing_peer() {
    common::missing_peer(BIN, "alltoall", 3, &["--iters", "5"]);
}

#[test]
fn wrong_block_detected() {
    fault_detected(BIN, "alltoall", 3, &["--iters", "5", "--bytes", "1000"]);
}

#[test]
fn bad_arguments() {
    bad_args(
        BIN,
        &[
            &["--iters", "0"],
            &["--bytes", "0"],
            &["--bytes"],
            &["--seconds", "1"],
        ],
    );
}
