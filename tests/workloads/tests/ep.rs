//! ep: 3, 2, 1 ranks; --work-ms; wait policies; failures.
mod common;
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_ep");
const SHORT: [&str; 4] = ["--iters", "30", "--grain-us", "300"];

fn args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut a = SHORT.to_vec();
    a.extend_from_slice(more);
    a
}

#[test]
fn three_ranks() {
    let vs = ok_run(BIN, "ep", 3, &SHORT, Some(30));
    not_waited(&vs);
    for v in &vs {
        // A grain is CPU work: it cannot take much less than its length.
        assert!(v["iter_us"]["p50"].as_f64().unwrap() >= 150.0, "{v}");
    }
}

#[test]
fn two_ranks() {
    ok_run(BIN, "ep", 2, &SHORT, Some(30));
}

#[test]
fn one_rank() {
    ok_run(BIN, "ep", 1, &SHORT, Some(30));
}

#[test]
fn work_ms_makes_grains() {
    // 50 ms of 1000 us grains: 50 grains; 10 ms of 3000 us grains: 4.
    ok_run(BIN, "ep", 2, &["--work-ms", "50"], Some(50));
    ok_run(
        BIN,
        "ep",
        2,
        &["--work-ms", "10", "--grain-us", "3000"],
        Some(4),
    );
}

#[test]
fn wait_adaptive() {
    let vs = ok_run(BIN, "ep", 3, &args(&["--wait", "adaptive"]), Some(30));
    waited(&vs);
    // Rank 0 waits for two parts, the others for the total.
    assert_eq!(vs[0]["waits"], 2);
    assert_eq!(vs[1]["waits"], 1);
}

#[test]
fn wait_inslot_and_yield() {
    waited(&ok_run(
        BIN,
        "ep",
        3,
        &args(&["--wait", "inslot:100", "--yield"]),
        Some(30),
    ));
}

#[test]
fn wrong_env() {
    bad_env(BIN, "ep");
}

#[test]
fn missing_peer() {
    common::missing_peer(BIN, "ep", 3, &SHORT);
}

#[test]
fn wrong_sum_detected() {
    fault_detected(BIN, "ep", 3, &SHORT);
}

#[test]
fn bad_arguments() {
    bad_args(
        BIN,
        &[
            &["--iters", "0"],
            &["--work-ms", "0"],
            &["--grain-us", "0"],
            &["--iters", "3", "--work-ms", "3"],
            &["--wait"],
        ],
    );
}
