//! burn: a CPU-bound test workload.
//!
//!   burn --seconds S [--threads T]   spin for S seconds of wall time
//!   burn --work N [--threads T]      spin N work units (a fixed loop count,
//!                                    ~0.1 ms each) and stop
//!   burn --window S E [--threads T]  sleep until CLOCK_MONOTONIC S, spin until
//!                                    E: several processes given the same
//!                                    window compete over exactly that time
//!   burn --busy-window LEAD D TAIL [--threads T]
//!                                    spin from the start for LEAD + D + TAIL
//!                                    seconds, counting only the units done
//!                                    between start + LEAD and start + LEAD + D
//!                                    (CLOCK_MONOTONIC): processes started
//!                                    less than LEAD apart and given the same
//!                                    D, on any nodes whatever their clocks,
//!                                    compete over each other's whole window
//!                                    if TAIL covers the spread of the starts
//!
//!   --yield-every N                  call the gang runtime's yield_point()
//!                                    every N units (a safe point)
//!   --waits                          with --seconds: spin reading the clock
//!                                    instead of work units, and report the
//!                                    times the thread did not run (gaps of
//!                                    more than 0.5 ms between two reads:
//!                                    preempted, or its vCPU stalled) as
//!                                    "waits", "wait_p50_ms", "wait_max_ms"
//!   --naps MS                        with --seconds: sleep MS at a time
//!                                    instead of spinning, and report how
//!                                    late each wake-up ran (past MS) as
//!                                    "naps", "nap_late_p50_ms",
//!                                    "nap_late_max_ms"
//!   --stop-file PATH                 also stop (as if its time had run out)
//!                                    once PATH exists, looked at every 256
//!                                    units: a scenario ends a long-lived job
//!                                    when its checks are done instead of
//!                                    waiting out a worst-case length
//!
//! Prints one JSON line at the end: work done, wall time, CPU time and the
//! start and end on CLOCK_MONOTONIC, so a test can see how much CPU a task
//! got and a benchmark how long fixed work took (or the makespan of several).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Loop iterations of one work unit (about 0.1 ms on an unloaded native
/// core; the exact time does not matter, only that it is fixed and small
/// enough for a fine count).
const UNIT: u64 = 20_000;

fn spin_unit(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..UNIT {
        x = black_box(
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        );
    }
    x
}

enum Stop {
    After(Duration),
    Units(u64),
    Until(f64),
    /// Count units done in [from, until), spin on until `end`.
    Span {
        from: f64,
        until: f64,
        end: f64,
    },
}

/// How often (in units) a worker looks for the stop file.
const STOP_FILE_EVERY: u64 = 256;

fn worker(stop: &Stop, yield_every: u64, stop_file: Option<&Path>) -> u64 {
    let start = Instant::now();
    let mut units = 0u64;
    let mut acc = 0u64;
    let mut iter = 0u64;
    loop {
        if let Some(f) = stop_file {
            if iter.is_multiple_of(STOP_FILE_EVERY) && f.exists() {
                break;
            }
        }
        iter += 1;
        // A safe point of an iterative program: the end of an iteration.
        if yield_every > 0 && units.is_multiple_of(yield_every) {
            gangrt::yield_point();
        }
        match stop {
            Stop::After(d) if start.elapsed() >= *d => break,
            Stop::Units(n) if units >= *n => break,
            Stop::Until(end) if clock_seconds(CLOCK_MONOTONIC) >= *end => break,
            Stop::Span { from, until, end } => {
                acc ^= spin_unit(acc);
                let now = clock_seconds(CLOCK_MONOTONIC);
                if now >= *from && now < *until {
                    units += 1;
                }
                if now >= *end {
                    break;
                }
                continue;
            }
            _ => {}
        }
        acc ^= spin_unit(units);
        units += 1;
    }
    black_box(acc);
    units
}

/// A gap between two clock reads longer than this is a wait: the thread
/// did not run (a read takes about a microsecond, even under emulation).
const WAIT_MIN: Duration = Duration::from_micros(500);

/// Spins reading the clock for `d`; returns the waits (see `--waits`).
fn waits_worker(d: Duration) -> Vec<Duration> {
    let start = Instant::now();
    let (mut last, mut waits) = (start, Vec::new());
    while last - start < d {
        let now = Instant::now();
        if now - last > WAIT_MIN {
            waits.push(now - last);
        }
        last = now;
    }
    waits
}

/// Sleeps `nap` at a time for `d`; returns how late each wake-up ran.
fn naps_worker(d: Duration, nap: Duration) -> Vec<Duration> {
    let start = Instant::now();
    let mut late = Vec::new();
    while start.elapsed() < d {
        let t0 = Instant::now();
        std::thread::sleep(nap);
        late.push(t0.elapsed().saturating_sub(nap));
    }
    late
}

/// `,"NAME":N,"P_p50_ms":X,"P_max_ms":Y` of all threads' durations.
fn durations_json(name: &str, p: &str, mut all: Vec<Duration>) -> String {
    all.sort();
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
    format!(
        ",\"{name}\":{},\"{p}_p50_ms\":{:.3},\"{p}_max_ms\":{:.3}",
        all.len(),
        ms(all.get(all.len() / 2)),
        ms(all.last())
    )
}

const CLOCK_MONOTONIC: i32 = 1;
const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;

fn clock_seconds(clock: i32) -> f64 {
    let mut ts = libc_timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[repr(C)]
struct libc_timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clk: i32, ts: *mut libc_timespec) -> i32;
}

fn usage() -> ! {
    eprintln!(
        "usage: burn (--seconds S | --work N | --window FROM UNTIL | --busy-window LEAD D TAIL) [--threads T] [--name NAME] [--yield-every N] [--stop-file PATH] [--waits | --naps MS]"
    );
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut stop, mut threads, mut name) = (None, 1usize, String::from("burn"));
    let mut yield_every = 0u64;
    let mut stop_file: Option<PathBuf> = None;
    let mut waits = false;
    let mut naps: Option<Duration> = None;
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--seconds" => {
                stop = Some(Stop::After(Duration::from_secs_f64(
                    val().parse().unwrap_or_else(|_| usage()),
                )))
            }
            "--work" => stop = Some(Stop::Units(val().parse().unwrap_or_else(|_| usage()))),
            "--window" => {
                let from: f64 = val().parse().unwrap_or_else(|_| usage());
                let until: f64 = val().parse().unwrap_or_else(|_| usage());
                let wait = from - clock_seconds(CLOCK_MONOTONIC);
                if wait > 0.0 {
                    std::thread::sleep(Duration::from_secs_f64(wait));
                }
                stop = Some(Stop::Until(until));
            }
            "--busy-window" => {
                let mut secs = || -> f64 {
                    let v: f64 = val().parse().unwrap_or_else(|_| usage());
                    if v.is_nan() || v < 0.0 {
                        usage()
                    }
                    v
                };
                let (lead, d, tail) = (secs(), secs(), secs());
                let from = clock_seconds(CLOCK_MONOTONIC) + lead;
                stop = Some(Stop::Span {
                    from,
                    until: from + d,
                    end: from + d + tail,
                });
            }
            "--threads" => threads = val().parse().unwrap_or_else(|_| usage()),
            "--yield-every" => yield_every = val().parse().unwrap_or_else(|_| usage()),
            "--name" => name = val(),
            "--stop-file" => stop_file = Some(PathBuf::from(val())),
            "--waits" => waits = true,
            "--naps" => {
                naps = Some(Duration::from_millis(
                    val().parse().unwrap_or_else(|_| usage()),
                ))
            }
            _ => usage(),
        }
    }
    let stop = stop.unwrap_or_else(|| usage());
    let start = Instant::now();
    let start_mono = clock_seconds(CLOCK_MONOTONIC);
    // What each of the threads returns, in thread order.
    fn per_thread<T: Send>(threads: usize, work: &(dyn Fn() -> T + Sync)) -> Vec<T> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(work)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }
    // Each thread's durations (waits or late wake-ups), all together.
    let each = |work: &(dyn Fn() -> Vec<Duration> + Sync)| -> Vec<Duration> {
        per_thread(threads, work).into_iter().flatten().collect()
    };
    let (units, waits): (u64, String) = match (&stop, waits, naps) {
        (Stop::After(d), true, None) => (
            0,
            durations_json("waits", "wait", each(&|| waits_worker(*d))),
        ),
        (Stop::After(d), false, Some(nap)) => (
            0,
            durations_json("naps", "nap_late", each(&|| naps_worker(*d, nap))),
        ),
        (_, true, _) | (_, _, Some(_)) => usage(),
        _ => {
            let units = per_thread(threads, &|| {
                worker(&stop, yield_every, stop_file.as_deref())
            });
            (units.into_iter().sum(), String::new())
        }
    };
    // start_s/end_s are CLOCK_MONOTONIC, comparable between processes.
    println!(
        "{{\"name\":\"{name}\",\"units\":{units},\"threads\":{threads},\"elapsed_s\":{:.6},\"cpu_s\":{:.6},\"start_s\":{:.6},\"end_s\":{:.6},\"yields\":{}{waits}}}",
        start.elapsed().as_secs_f64(),
        clock_seconds(CLOCK_PROCESS_CPUTIME_ID),
        start_mono,
        clock_seconds(CLOCK_MONOTONIC),
        gangrt::yield_count()
    );
}
