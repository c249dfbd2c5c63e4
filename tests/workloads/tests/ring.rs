//! ring: the token ring's own checks, and a peer that stops reading.
mod common;
use common::*;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ring");

/// Three ranks streaming 1 MiB tokens; rank 1 stops reading after 0.3 s;
/// the others give up after `timeout` seconds without a round.
fn stop_reading_job(timeout: &str) -> Job {
    Job::new(
        BIN,
        3,
        &[
            "--seconds",
            "60",
            "--bytes",
            "1048576",
            "--timeout",
            timeout,
            "--stop-reading",
            "1:0.3",
        ],
    )
}

#[test]
fn three_ranks_stream_and_check_every_token() {
    let (outs, _) = Job::new(BIN, 3, &["--rounds", "50", "--bytes", "65536"]).run();
    for o in &outs {
        assert_eq!(o.code, Some(0), "{o:?}");
        let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).expect("one JSON line");
        assert_eq!(
            (v["ok"].as_bool(), v["rounds"].as_u64(), v["size"].as_u64()),
            (Some(true), Some(50), Some(3)),
            "{v}"
        );
    }
}

#[test]
fn a_rank_that_stops_reading_leaves_its_peers_waiting_until_their_timeout() {
    // Rank 1 stops reading after 0.3 s and sleeps; rank 0's 1 MiB tokens
    // fill its socket and rank 2 waits for rounds that never come: both
    // give up at their 1.5 s timeout. Rank 1 sleeps until it is killed.
    let mut job = stop_reading_job("1.5");
    job.kill = Some((1, Duration::from_secs(8)));
    let (outs, took) = job.run();
    assert!(outs[1].stderr.contains("stops reading"), "{:?}", outs[1]);
    assert_eq!(
        outs[1].code, None,
        "rank 1 sleeps until killed: {:?}",
        outs[1]
    );
    for r in [0, 2] {
        assert_eq!(outs[r].code, Some(1), "rank {r}: {:?}", outs[r]);
    }
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn the_data_sent_to_a_rank_that_stopped_reading_never_drains() {
    // What the drain tests in the VM cluster rely on: once rank 1 stops
    // reading, rank 0's socket to it holds unsent bytes at every look, not
    // only until the last token has landed in rank 1's receive buffer.
    let ports = free_ports(3);
    let mut job = stop_reading_job("5");
    job.ports = Some(ports.clone());
    job.kill = Some((1, Duration::from_secs(8)));
    let to_rank1 = ports[1];
    let watcher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        (0..25)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(100));
                send_queues_to(to_rank1)
            })
            .collect::<Vec<_>>()
    });
    let (outs, _) = job.run();
    let looks = watcher.join().unwrap();
    assert!(outs[1].stderr.contains("stops reading"), "{:?}", outs[1]);
    assert!(
        looks.iter().all(|q| q.len() == 1 && q[0] > 0),
        "rank 0's link to rank 1 drained (send queues at each look): {looks:?}"
    );
}

#[test]
fn stop_reading_wants_rank_colon_seconds() {
    for bad in ["1", "x:1", "1:-2", "1:nan"] {
        let (outs, _) = Job::new(BIN, 1, &["--rounds", "1", "--stop-reading", bad]).run();
        assert_eq!(outs[0].code, Some(2), "{bad}: {:?}", outs[0]);
    }
}
