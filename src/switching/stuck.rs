//! Where the main loop is, for whoever waits on it too long.
//!
//! The main loop (mainloop.rs) is the one thread that touches the BPF
//! scheduler; the agent waits for its answers with a timeout. When one
//! times out the node is in trouble (gangd counts the node's switches as
//! failed, its gangs may stay parked), and the question is always the same:
//! what was the loop doing? The loop marks each step it enters here (an
//! atomic store, nothing more), and `report` turns the mark and every
//! thread's state in /proc (its name, state, wait channel, system call and
//! kernel stack) into one log text. `report_once_a_minute` keeps a node
//! whose loop hangs for good from filling its log.

use std::fs;
use std::sync::atomic::{AtomicU64, Ordering};

use gang_wire::time::monotonic_ns;

/// The steps of one turn of the main loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    /// The switcher's own polling (trace events, statistics).
    Poll = 1,
    /// Waiting for the inbox: idle.
    Wait,
    /// Carrying out a request (control socket, agent).
    Request,
    /// Applying knob values.
    Knobs,
    /// The switcher's timer.
    Tick,
    /// The plan follower's turn (timed switching).
    Follow,
    /// The rescan of the gang root and the status files.
    Rescan,
}

impl Step {
    fn name(code: u64) -> &'static str {
        match code {
            1 => "polling the scheduler",
            2 => "waiting for work (idle)",
            3 => "carrying out a request",
            4 => "applying knobs",
            5 => "its timer",
            6 => "following the plan",
            7 => "rescanning the gangs",
            _ => "not started",
        }
    }
}

/// The step (low 8 bits) and when it began (CLOCK_MONOTONIC ns, the rest).
static MARK: AtomicU64 = AtomicU64::new(0);
/// When the last report was logged (CLOCK_MONOTONIC ns).
static LAST_REPORT: AtomicU64 = AtomicU64::new(0);
/// The main loop's thread id.
static LOOP_TID: AtomicU64 = AtomicU64::new(0);

/// The main loop enters `step` now.
pub fn enter(step: Step) {
    MARK.store((monotonic_ns() << 8) | step as u64, Ordering::Relaxed);
}

/// The calling thread is the main loop.
pub fn loop_started() {
    LOOP_TID.store(nix::unistd::gettid().as_raw() as u64, Ordering::Relaxed);
    enter(Step::Poll);
}

/// What the main loop is doing, and since how long (ms).
pub fn step() -> (&'static str, u64) {
    let mark = MARK.load(Ordering::Relaxed);
    let since = mark >> 8;
    let ms = if since == 0 {
        0
    } else {
        monotonic_ns().saturating_sub(since) / 1_000_000
    };
    (Step::name(mark & 0xff), ms)
}

/// One line per thread of this process: tid, name, state, wait channel,
/// system call, and the kernel stack (root only) of the main loop.
pub fn threads(me: u64) -> String {
    let mut out = String::new();
    let Ok(dir) = fs::read_dir("/proc/self/task") else {
        return "no /proc/self/task".into();
    };
    let mut tids: Vec<u64> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    for tid in tids {
        let read = |f: &str| {
            fs::read_to_string(format!("/proc/self/task/{tid}/{f}"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let stat = read("stat");
        // "tid (name) S ...": the state is the first field after the name.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let syscall = read("syscall");
        let nr = syscall.split_whitespace().next().unwrap_or("?");
        out += &format!(
            "\n  {tid} {}{} state {state} wchan {} syscall {nr}",
            read("comm"),
            if tid == me { " (main loop)" } else { "" },
            read("wchan"),
        );
        if tid == me {
            for frame in read("stack").lines() {
                out += &format!("\n      {frame}");
            }
        }
    }
    out
}

/// The whole diagnosis: the loop's step and every thread.
pub fn report() -> String {
    let (step, ms) = step();
    format!(
        "the main loop is {step} (for {ms} ms); threads:{}",
        threads(LOOP_TID.load(Ordering::Relaxed))
    )
}

/// `report()` if none was given in the last minute.
pub fn report_once_a_minute() -> Option<String> {
    let now = monotonic_ns();
    let last = LAST_REPORT.load(Ordering::Relaxed);
    if !due(last, now)
        || LAST_REPORT
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    Some(report())
}

/// A report is due at `now` if none was given (`last` 0) or the last is a
/// minute old.
fn due(last: u64, now: u64) -> bool {
    last == 0 || now.saturating_sub(last) >= 60_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_step_and_lists_every_thread() {
        // Other tests run main loops at the same time: the step is theirs
        // or this one's, the listing has this thread whatever the mark.
        enter(Step::Request);
        let r = report();
        assert!(r.starts_with("the main loop is "), "{r}");
        assert!(r.contains(" ms); threads:\n  "), "{r}");
        let me = nix::unistd::gettid().as_raw() as u64;
        let listing = threads(me);
        let line = listing
            .lines()
            .find(|l| l.contains(" (main loop) "))
            .unwrap_or_else(|| panic!("this thread is not listed: {listing}"));
        // It is running: it reads its own state.
        assert!(line.contains(" state R "), "{line}");
        assert!(line.trim_start().starts_with(&me.to_string()), "{line}");
    }

    #[test]
    fn steps_are_named() {
        assert_eq!(Step::name(Step::Follow as u64), "following the plan");
        assert_eq!(Step::name(0), "not started");
    }

    #[test]
    fn a_hung_loop_is_reported_once_a_minute_not_at_every_timeout() {
        let s = 1_000_000_000;
        assert!(due(0, 5 * s), "the first is");
        assert!(!due(5 * s, 6 * s));
        assert!(!due(5 * s, 64 * s));
        assert!(due(5 * s, 65 * s));
    }
}
