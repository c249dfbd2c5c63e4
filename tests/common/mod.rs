//! Helpers shared by the VM test suites (tests/vm.rs, tests/vm_cluster.rs,
//! tests/vm_eval.rs), each of which says `mod common;`.
//!
//! What is here is what every suite did the same way: where the repository
//! is, checking the binaries that go into an image, building the initramfs
//! once per test binary (scripts/image.sh), reading what a node wrote back,
//! and the check that sched_ext was only ever detached on purpose. Booting
//! stays in each suite (one node with emulator-fault retries in vm.rs, a
//! cluster with network retries in vm_cluster.rs, scripts/eval.sh in
//! vm_eval.rs): the runs differ in what they retry and report.
//!
//! Known faults: every suite compiles its own copy of this module (cargo's
//! way for test helpers), so a helper a suite does not use is dead code
//! there, hence the `allow` below. `image` keeps one image per test
//! binary: a suite that needed two images would need two names here.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The repository (the scx_gang package's directory).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The paths of `names` in `dir`, each of which must exist (`hint`: how to
/// build them, for the failure message).
pub fn need_binaries(dir: &Path, names: &[&str], hint: &str) -> Vec<PathBuf> {
    names
        .iter()
        .map(|name| {
            let p = dir.join(name);
            assert!(p.exists(), "{} is missing: {hint}", p.display());
            p
        })
        .collect()
}

/// Builds the initramfs target/vm/`file` once per test binary
/// (scripts/image.sh with every binary of `bins`, the `extra` options, and
/// the scenarios of tests/vm/scenarios) and returns its path.
pub fn image(file: &str, bins: impl FnOnce() -> Vec<PathBuf>, extra: &[&str]) -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let out = repo().join("target/vm").join(file);
        fs::create_dir_all(out.parent().unwrap()).unwrap();
        let mut cmd = Command::new(repo().join("scripts/image.sh"));
        cmd.arg(&out);
        for b in bins() {
            cmd.arg("--bin").arg(b);
        }
        cmd.args(extra);
        cmd.arg("--scenarios")
            .arg(repo().join("tests/vm/scenarios"));
        let status = cmd.status().expect("running scripts/image.sh");
        assert!(status.success(), "scripts/image.sh failed");
        out
    })
}

/// Whatever the scenario, sched_ext must only ever have been detached on
/// purpose on `node` (its results directory): no watchdog stall, no error
/// exit of the BPF scheduler.
pub fn assert_scheduler_never_failed(node: &Path) {
    let dmesg = fs::read_to_string(node.join("dmesg.txt")).unwrap_or_default();
    for line in dmesg.lines().filter(|l| l.contains("sched_ext")) {
        assert!(
            !line.contains("stall") && !line.contains("error"),
            "{}: sched_ext failed: {line}",
            node.display()
        );
        if line.contains("disabled (") {
            assert!(
                line.contains("disabled (unregistered from user space)"),
                "{}: sched_ext failed: {line}",
                node.display()
            );
        }
    }
}

/// The file `name` of `dir`, trimmed; panics naming it if it is missing.
pub fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
        .trim()
        .to_string()
}

/// The file `name` of `dir`, parsed as one JSON value.
pub fn json(dir: &Path, name: &str) -> Value {
    serde_json::from_str(&read(dir, name))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
}

/// What a failed node's logs say of a hang, which the tails leave out:
/// the daemon's report of a main loop that did not answer (its first one,
/// with its thread listing: src/switching/stuck.rs) and the kernel's
/// hung-task and lockup lines. Empty when there is none.
pub fn hang_diagnosis(node: &Path) -> String {
    let mut out = String::new();
    let log = fs::read_to_string(node.join("scx_gang.log")).unwrap_or_default();
    let mut lines = log.lines();
    if let Some(first) = lines.find(|l| l.contains("main loop did not answer")) {
        out += first;
        // The thread listing's lines follow, indented.
        for l in lines.take_while(|l| l.starts_with("  ")).take(60) {
            out += "\n";
            out += l;
        }
    }
    let dmesg = fs::read_to_string(node.join("dmesg.txt")).unwrap_or_default();
    for l in dmesg.lines().filter(|l| {
        [
            "blocked for more than",
            "soft lockup",
            "detected stalls",
            "Tasks blocked on",
        ]
        .iter()
        .any(|w| l.contains(w))
    }) {
        out += "\n";
        out += l;
    }
    out
}

/// The last `lines` lines of a file, for failure messages.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|_| "(missing)".into());
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The last `lines` lines of a VM's console log, without the firmware's
/// terminal control sequences (screen clear, colours) and carriage returns.
pub fn console_tail(path: &Path, lines: usize) -> String {
    let raw = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    let mut clean = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ params letter; otherwise ESC letter.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    while let Some(&n) = chars.peek() {
                        chars.next();
                        if n.is_ascii_alphabetic() {
                            break;
                        }
                    }
                } else {
                    chars.next();
                    clean.push('\n');
                }
            }
            '\r' => {}
            c => clean.push(c),
        }
    }
    let all: Vec<&str> = clean.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Overlap a trace summary (a node's `summary` or a cluster trace) charges
/// to the scheduler: gang time on a CPU the gang did not own, minus the
/// part inside CPU stalls (EV_STALL: the guest's vCPU was not running on
/// the host, so no kick could land), over all gang time. The raw overlap is
/// in the message so a failure shows both. Time a task was kept off its
/// gang's CPUs on purpose (`finish_ns`: an RCU section or, in a park, a
/// system call) is not overlap; it is bounded too, at five times `bound`,
/// so a runaway escape fails the test.
pub fn assert_overlap_below(s: &Value, bound: f64, what: &str) {
    let n = |k: &str| {
        s[k].as_f64()
            .unwrap_or_else(|| panic!("{what}: {k} missing in {s}"))
    };
    let gang = n("gang_run_ns");
    let beyond = if gang > 0.0 {
        (n("overlap_ns") - n("stall_overlap_ns")).max(0.0) / gang
    } else {
        0.0
    };
    assert!(
        beyond < bound,
        "{what}: overlap outside CPU stalls {beyond:.4} (raw {:.4}, stalled {:.1} ms): {s}",
        n("overlap_fraction"),
        n("stalled_ns") / 1e6
    );
    let finish = if gang > 0.0 {
        n("finish_ns") / gang
    } else {
        0.0
    };
    assert!(
        finish < 5.0 * bound,
        "{what}: gang time finishing an RCU section or system call off its CPUs {finish:.4}: {s}"
    );
}
