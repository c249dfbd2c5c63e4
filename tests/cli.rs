//! The daemon's command line on the host: bad input gets a clear error and
//! changes nothing. The host kernel has no sched_ext, which is itself a case
//! to report clearly.

use std::path::Path;
use std::process::{Command, Output};

fn scx_gang(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scx_gang"))
        .args(args)
        .output()
        .expect("running scx_gang")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_knob_flags_are_refused_before_anything_is_loaded() {
    for (args, expected) in [
        (
            &["--slot-ms", "0"][..],
            "--slot-ms: slot_ms must be in 1..=10000, got 0",
        ),
        (
            &["--slot-ms", "abc"][..],
            "--slot-ms: slot_ms must be a number",
        ),
        (&["--fill", "2"][..], "--fill: fill must be in 0..=1"),
        (&["--min-other-share-pct", "0"][..], "--min-other-share-pct"),
        (
            &["--housekeeping-cpus", "9999"][..],
            "CPU 9999 does not exist",
        ),
    ] {
        let o = scx_gang(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(expected), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_kernel_without_sched_ext_is_reported_as_such() {
    let o = scx_gang(&[
        "--gang-root",
        "/sys/fs/cgroup/scx_gang_host_test",
        "--knob-dir",
        "/tmp/scx_gang_host_test",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    if !Path::new("/sys/kernel/sched_ext").exists() {
        assert!(err.contains("this kernel has no sched_ext"), "{err}");
    } else if !nix_is_root() {
        assert!(err.contains("must run as root"), "{err}");
    } else {
        // A sched_ext host: then the refusal is about the scheduler already
        // attached or the cgroup mount; either way nothing was created.
        assert!(!err.is_empty());
    }
    assert!(
        !Path::new("/sys/fs/cgroup/scx_gang_host_test").exists(),
        "the gang root was created anyway"
    );
    assert!(
        !Path::new("/tmp/scx_gang_host_test").exists(),
        "the knob dir was created anyway"
    );
}

#[test]
fn trace_without_a_daemon_says_so() {
    let o = scx_gang(&[
        "trace",
        "--seconds",
        "1",
        "--socket",
        "/nonexistent/scx_gang.sock",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot reach scx_gang"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn ctl_refuses_malformed_requests_locally() {
    let o = scx_gang(&["ctl", "--socket", "/nonexistent/scx_gang.sock", "{not json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a valid request"), "{}", stderr(&o));
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}
