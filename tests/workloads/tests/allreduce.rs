//! allreduce: 3, 2, 1, 4 and 6 ranks; --seconds; wait policies; failures.
mod common;
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_allreduce");
const SHORT: [&str; 4] = ["--iters", "40", "--grain-us", "100"];

fn args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut a = SHORT.to_vec();
    a.extend_from_slice(more);
    a
}

#[test]
fn three_ranks() {
    let vs = ok_run(BIN, "allreduce", 3, &SHORT, Some(40));
    not_waited(&vs);
    for v in &vs {
        assert_eq!(v["grain_us"], 100);
        assert!(v["grain_loops"].as_u64().unwrap() > 0, "{v}");
        // Every iteration spins a grain: p50 of a 100 us grain + allreduce
        // cannot be below the grain's CPU time by much.
        assert!(v["iter_us"]["p50"].as_f64().unwrap() >= 50.0, "{v}");
    }
}

#[test]
fn two_ranks() {
    ok_run(BIN, "allreduce", 2, &SHORT, Some(40));
}

#[test]
fn one_rank() {
    ok_run(BIN, "allreduce", 1, &SHORT, Some(40));
}

#[test]
fn four_ranks() {
    ok_run(
        BIN,
        "allreduce",
        4,
        &["--iters", "20", "--grain-us", "50"],
        Some(20),
    );
}

#[test]
fn six_ranks_not_a_power_of_two() {
    ok_run(
        BIN,
        "allreduce",
        6,
        &["--iters", "20", "--grain-us", "50"],
        Some(20),
    );
}

#[test]
fn seconds_stop_together() {
    let vs = ok_run(
        BIN,
        "allreduce",
        3,
        &["--seconds", "0.3", "--grain-us", "200"],
        None,
    );
    let k = vs[0]["iters"].as_u64().unwrap();
    assert!(k > 1, "{:?}", vs);
    for v in &vs {
        assert_eq!(
            v["iters"].as_u64(),
            Some(k),
            "all ranks stop after the same iteration"
        );
    }
}

#[test]
fn wait_adaptive() {
    waited(&ok_run(
        BIN,
        "allreduce",
        3,
        &args(&["--wait", "adaptive"]),
        Some(40),
    ));
}

#[test]
fn wait_inslot_and_yield() {
    waited(&ok_run(
        BIN,
        "allreduce",
        3,
        &args(&["--wait", "inslot:100", "--yield"]),
        Some(40),
    ));
}

#[test]
fn wrong_env() {
    bad_env(BIN, "allreduce");
}

#[test]
fn missing_peer() {
    common::missing_peer(BIN, "allreduce", 3, &SHORT);
}

#[test]
fn wrong_sum_detected() {
    fault_detected(BIN, "allreduce", 3, &SHORT);
}

#[test]
fn bad_arguments() {
    bad_args(
        BIN,
        &[
            &["--iters", "0"],
            &["--iters", "5", "--seconds", "1"],
            &["--grain-us", "x"],
            &["--seconds", "-2"],
            &["extra"],
        ],
    );
}

#[test]
fn stalled_peer_times_out_in_wait() {
    // Rank 2 stops (SIGSTOP) mid-run: rank 0 gives up after --timeout in
    // gangrt::wait_readable, rank 1 then sees rank 0 gone.
    let mut job = Job::new(
        BIN,
        3,
        &[
            "--iters",
            "100000000",
            "--grain-us",
            "100",
            "--wait",
            "adaptive",
            "--timeout",
            "2",
        ],
    );
    job.stop = Some((2, std::time::Duration::from_millis(800)));
    job.limit = std::time::Duration::from_secs(12);
    let (outs, took) = job.run();
    assert!(took < std::time::Duration::from_secs(8), "took {took:?}");
    all_failed(&outs[..2], "allreduce");
    assert!(
        outs[0].stderr.contains("nothing from rank 2 for 2.0 s"),
        "{:?}",
        outs[0].stderr
    );
}
