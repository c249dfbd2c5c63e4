//! The load harness itself (gang-load, scripts/bench_scale.sh): run small
//! against the real gangd, it must join every node, place jobs over every
//! CPU, see complete switches, place arriving jobs, detect a silent node
//! and let it join again, and say so in one CSV line of known columns. So
//! the harness cannot rot unseen between the benchmark's runs.

use std::collections::HashMap;
use std::process::Command;

fn run_load(nodes: usize, extra: &[&str]) -> HashMap<String, String> {
    // One directory per run: the tests of this file run at once.
    let tag = extra.join("").replace('-', "");
    let dir = std::env::temp_dir().join(format!("gang-load-test-{}{tag}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_gang-load"))
        .args(["--gangd", env!("CARGO_BIN_EXE_gangd")])
        .arg("--dir")
        .arg(&dir)
        .args(["--nodes", &nodes.to_string(), "--header"])
        .args(["--idle", "0.5", "--steady", "1.5", "--arrivals", "1"])
        .args(["--node-timeout-ms", "1000"])
        .args(extra)
        .output()
        .expect("running gang-load");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gang-load failed:\n{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one line: {stdout}");
    let names: Vec<&str> = lines[0].split(',').collect();
    let values: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(names.len(), values.len(), "{stdout}");
    names
        .into_iter()
        .zip(values)
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn num(row: &HashMap<String, String>, col: &str) -> f64 {
    let v = row.get(col).unwrap_or_else(|| panic!("no column {col}"));
    v.parse()
        .unwrap_or_else(|_| panic!("{col} = {v:?} is not a number: {row:?}"))
}

#[test]
fn sixteen_fake_agents_join_switch_place_and_lose_a_node() {
    let row = run_load(16, &[]);
    assert_eq!(num(&row, "nodes"), 16.0);
    // Three jobs over every CPU of every node reached every node...
    assert!(num(&row, "place_all_ms") > 0.0);
    // ...and gangd switched between them, every node answering.
    assert!(num(&row, "switches_per_s") >= 1.0, "{row:?}");
    assert!(num(&row, "switch_msgs_per_s") >= 16.0, "{row:?}");
    assert!(num(&row, "switch_p99_ms") >= num(&row, "switch_p50_ms"));
    // Jobs arrived, were placed on all their nodes and ended.
    assert!(num(&row, "arrived_jobs") >= 1.0, "{row:?}");
    assert!(num(&row, "place_p50_ms") > 0.0);
    assert!(num(&row, "alloc_p99_us") > 0.0);
    // A silent node is lost after the node timeout, not before, and joins
    // again.
    assert!(num(&row, "lost_detect_ms") >= 1000.0, "{row:?}");
    assert!(num(&row, "rejoin_ms") > 0.0);
    // gangd was measured from /proc.
    assert!(num(&row, "threads") > 1.0 && num(&row, "rss_mb") > 0.0);
}

#[test]
fn under_timed_switching_every_plan_of_back_to_back_arrivals_takes_effect() {
    // Jobs arrive back to back, each start and end a change of the cycle,
    // far closer together than a plan's margin (a 100 ms slot): each
    // change waits for the plan before it, so every plan the agents saw
    // took effect (a plan replaced while it waited for its epoch never
    // did: one of hundreds, before).
    let row = run_load(16, &["--switching", "timed", "--switch-log"]);
    let made = num(&row, "plans_made");
    assert!(made >= 3.0, "{row:?}");
    assert_eq!(num(&row, "plans_in_force"), made, "{row:?}");
    assert!(num(&row, "plans_reached") >= 1.0, "{row:?}");
    assert!(
        num(&row, "plan_p99_ms") >= num(&row, "plan_p50_ms"),
        "{row:?}"
    );
    assert!(num(&row, "arrived_jobs") >= 1.0, "{row:?}");
}
