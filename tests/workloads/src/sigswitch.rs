//! sigswitch: the classic way to gang-schedule, for comparison. Every
//! `--slot-ms` it stops every process of the outgoing gang with SIGSTOP and
//! continues every process of the incoming one with SIGCONT (SCore-D's first
//! implementation, and Slurm's gang scheduling), or with `--freezer` freezes
//! and thaws the gangs' cgroups through cgroup.freeze.
//!
//!   sigswitch --slot-ms MS [--freezer] [--seconds S] CGROUP_DIR...
//!
//! Runs until SIGTERM/SIGINT or S seconds, then continues everything, and
//! prints one JSON line: switches made and how long each took to issue.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn signal(sig: i32, handler: extern "C" fn(i32)) -> usize;
}

const SIGINT: i32 = 2;
const SIGCONT: i32 = 18;
const SIGSTOP: i32 = 19;
const SIGTERM: i32 = 15;

fn pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn set_running(dir: &Path, run: bool, freezer: bool) {
    if freezer {
        let _ = fs::write(dir.join("cgroup.freeze"), if run { "0" } else { "1" });
    } else {
        for pid in pids(dir) {
            unsafe { kill(pid, if run { SIGCONT } else { SIGSTOP }) };
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: sigswitch --slot-ms MS [--freezer] [--seconds S] CGROUP_DIR...");
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut slot_ms, mut freezer, mut seconds, mut gangs) =
        (0u64, false, f64::INFINITY, Vec::<PathBuf>::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--slot-ms" => {
                slot_ms = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--freezer" => freezer = true,
            _ if a.starts_with('-') => usage(),
            _ => gangs.push(PathBuf::from(a)),
        }
    }
    if slot_ms == 0 || gangs.is_empty() {
        usage();
    }
    unsafe {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
    }

    let start = Instant::now();
    let slot = Duration::from_millis(slot_ms);
    let (mut current, mut switches, mut issue_ns) = (0usize, 0u64, Vec::new());
    for (i, g) in gangs.iter().enumerate() {
        set_running(g, i == 0, freezer);
    }
    let mut next = Instant::now() + slot;
    while !STOP.load(Ordering::Relaxed) && start.elapsed().as_secs_f64() < seconds {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += slot;
        let t = Instant::now();
        let incoming = (current + 1) % gangs.len();
        if incoming != current {
            set_running(&gangs[current], false, freezer);
            set_running(&gangs[incoming], true, freezer);
            current = incoming;
        }
        issue_ns.push(t.elapsed().as_nanos() as u64);
        switches += 1;
    }
    for g in &gangs {
        set_running(g, true, freezer);
    }
    issue_ns.sort_unstable();
    let p50 = issue_ns.get(issue_ns.len() / 2).copied().unwrap_or(0);
    println!(
        "{{\"switches\":{switches},\"method\":\"{}\",\"issue_p50_us\":{:.1}}}",
        if freezer { "freezer" } else { "sigstop" },
        p50 as f64 / 1000.0
    );
}
