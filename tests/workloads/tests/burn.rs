//! burn: a long burn ends soon after its stop file appears, and prints its
//! record as if its time had run out; without the file it runs its time.
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_burn");

/// A path of this test's own under the temporary directory, not there yet.
fn scratch(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("burn-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn record(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "burn failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn a_stop_file_ends_a_long_burn_early_with_its_record() {
    let stop = scratch("stop");
    let t0 = Instant::now();
    let child = Command::new(BIN)
        .args([
            "--seconds",
            "300",
            "--threads",
            "2",
            "--name",
            "S",
            "--stop-file",
        ])
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&stop, "").unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&stop);
    let v = record(&out);
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "burn ran {:?} after its stop file appeared",
        t0.elapsed()
    );
    assert_eq!(v["name"], "S");
    assert!(v["units"].as_u64().unwrap() > 0, "{v}");
    assert!(v["elapsed_s"].as_f64().unwrap() >= 0.29, "{v}");
}

#[test]
fn without_its_stop_file_a_burn_runs_its_time() {
    let out = Command::new(BIN)
        .args(["--seconds", "0.5", "--stop-file"])
        .arg(scratch("never"))
        .output()
        .unwrap();
    let v = record(&out);
    assert!(v["elapsed_s"].as_f64().unwrap() >= 0.5, "{v}");
}

#[test]
fn a_stop_file_without_a_path_is_a_usage_error() {
    let out = Command::new(BIN)
        .args(["--seconds", "1", "--stop-file"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stop-file"));
}
