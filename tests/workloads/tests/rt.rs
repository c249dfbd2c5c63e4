//! rt: the token goes around 3, 2 ranks; wait policies; failures.
mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rt");

#[test]
fn three_ranks() {
    let vs = ok_run(BIN, "rt", 3, &["--rounds", "300"], Some(300));
    not_waited(&vs);
    assert_eq!(vs[0]["bytes"], 8);
}

#[test]
fn two_ranks_big_token() {
    let vs = ok_run(
        BIN,
        "rt",
        2,
        &["--rounds", "100", "--bytes", "100000"],
        Some(100),
    );
    assert_eq!(vs[1]["bytes"], 100000);
}

#[test]
fn one_rank() {
    ok_run(BIN, "rt", 1, &["--rounds", "10"], Some(10));
}

#[test]
fn wait_adaptive() {
    waited(&ok_run(
        BIN,
        "rt",
        3,
        &["--rounds", "200", "--wait", "adaptive"],
        Some(200),
    ));
}

#[test]
fn wait_inslot_and_yield() {
    let vs = ok_run(
        BIN,
        "rt",
        3,
        &["--rounds", "200", "--wait", "inslot:100", "--yield"],
        Some(200),
    );
    waited(&vs);
    for v in &vs {
        // No scheduler here: the waits degrade, and nothing yields.
        assert_eq!(v["yields"], 0, "{v}");
        assert_eq!(v["waits"], 200, "{v}");
    }
}

#[test]
fn wrong_env() {
    bad_env(BIN, "rt");
}

#[test]
fn missing_peer() {
    common::missing_peer(BIN, "rt", 3, &["--rounds", "10"]);
}

#[test]
fn wrong_token_detected() {
    fault_detected(BIN, "rt", 3, &["--rounds", "50"]);
}

#[test]
fn killed_peer() {
    // Rank 2 dies mid-run: the others see it and fail at once, without
    // waiting for the 120 s timeout.
    let mut job = Job::new(BIN, 3, &["--rounds", "100000000"]);
    job.kill = Some((2, Duration::from_millis(800)));
    job.limit = Duration::from_secs(10);
    let (outs, took) = job.run();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    all_failed(&outs[..2], "rt");
    assert_eq!(outs[2].code, None, "rank 2 was killed");
    assert!(
        outs[..2].iter().any(|o| o.stderr.contains("rank 2")),
        "{outs:?}"
    );
}

#[test]
fn bad_arguments() {
    bad_args(
        BIN,
        &[
            &["--rounds", "0"],
            &["--bytes", "7"],
            &["--rounds"],
            &["--frobnicate"],
            &["--wait", "sometimes"],
            &["--timeout", "-1"],
        ],
    );
}

#[test]
fn stalled_peer_times_out() {
    // Rank 2 stops (SIGSTOP) mid-run: the others give up after --timeout
    // (socket read timeout, no --wait).
    let mut job = Job::new(BIN, 3, &["--rounds", "100000000", "--timeout", "2"]);
    job.stop = Some((2, Duration::from_millis(800)));
    job.limit = Duration::from_secs(12);
    let (outs, took) = job.run();
    assert!(took < Duration::from_secs(8), "took {took:?}");
    all_failed(&outs[..2], "rt");
    assert!(
        outs[..2]
            .iter()
            .any(|o| o.stderr.contains("nothing for 2.0 s")),
        "{outs:?}"
    );
}
