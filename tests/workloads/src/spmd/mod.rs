//! SPMD plumbing shared by the message-passing workloads `rt`, `allreduce`,
//! `alltoall` and `ep`: one process per rank, started by `gang run` (or by
//! hand, or by the host tests), talking over TCP.
//!
//! - **Environment** ([`Env::from_env`]): GANG_RANK, GANG_SIZE, GANG_PEERS
//!   (`host:port` of every rank, by rank, separated by commas or blanks; or
//!   the file GANG_PEERS_FILE names, when it is too long for the
//!   environment) and
//!   GANG_PORT (this rank's port; default: the port of its own entry).
//! - **Arguments** ([`parse_args`]): the common flags `--wait POLICY`
//!   (`block|spin[:US]|adaptive|inslot[:US]`, receives go through
//!   `gangrt::wait_readable`), `--yield` (`gangrt::yield_point()` at the end
//!   of every iteration) and `--timeout S` (default 120: the longest a rank
//!   waits for a peer's message or for a write to drain), plus the
//!   workload's own flags. Bad arguments: usage on stderr, exit 2.
//! - **Connections** ([`Comm::establish`], comm.rs): every rank listens on its port;
//!   for each pair of ranks the workload links, the lower rank connects to
//!   the higher one, retrying while it does not listen yet, and sends a
//!   hello (magic, rank, size); the higher rank accepts, checks the hello
//!   and answers with its own, which the lower rank checks. Connecting needs
//!   only the peer's listen backlog, so all ranks connect first and accept
//!   afterwards: no rank waits for another to accept, no deadlock. Ranks
//!   retry for 30 s (or `--timeout`, if shorter) while peers start.
//! - **Messages**: [`Comm::send`], [`Comm::recv`] (one `wait_readable` per
//!   message when `--wait` is given, then a blocking read of the whole
//!   message under the timeout) and [`Comm::exchange`] (send and receive
//!   with one peer at once; large messages are written by a sender thread,
//!   so two ranks exchanging big blocks cannot both stall on full socket
//!   buffers). [`Comm::finish`] closes every link in order: shut down the
//!   writing side, then read to EOF (nothing unexpected may follow), so no
//!   rank exits while a peer still reads from it.
//! - **Compute**: [`Spinner`], a fixed busy loop calibrated once at start
//!   (see there): a grain is a fixed amount of CPU work, not a time.
//! - **Results**: [`percentiles`] and [`Report::print`], one JSON line.
//!
//! Errors are `String`s naming what failed; [`fail`] prints
//! `WORKLOAD: rank R: MESSAGE` on stderr and exits 1.
//!
//! Fault injection for the tests: a rank whose environment has
//! `GANG_WL_FAULT=1` corrupts what it sends in iteration 1 (see
//! [`fault_injected`]); the receiving ranks must detect it.

use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use gangrt::WaitPolicy;

mod comm;
pub use comm::{Comm, CONNECT_FOR, INLINE_MAX};

struct Ident {
    name: &'static str,
    usage: &'static str,
    rank: Option<usize>,
}

static IDENT: OnceLock<Ident> = OnceLock::new();

fn ident() -> (&'static str, Option<usize>) {
    match IDENT.get() {
        Some(i) => (i.name, i.rank),
        None => ("workload", None),
    }
}

/// Prints `WORKLOAD: rank R: MSG` on stderr and exits 1.
pub fn fail(msg: impl std::fmt::Display) -> ! {
    note(msg);
    std::process::exit(1);
}

/// Prints `WORKLOAD: rank R: MSG` on stderr and goes on.
pub fn note(msg: impl std::fmt::Display) {
    let (name, rank) = ident();
    match rank {
        Some(r) => eprintln!("{name}: rank {r}: {msg}"),
        None => eprintln!("{name}: rank ?: {msg}"),
    }
}

/// Prints the usage on stderr and exits 2.
pub fn bad_usage(why: impl std::fmt::Display) -> ! {
    let (name, usage) = IDENT
        .get()
        .map(|i| (i.name, i.usage))
        .unwrap_or(("workload", ""));
    eprintln!("{name}: {why}");
    eprintln!("usage: {name} {usage}");
    std::process::exit(2);
}

/// The next argument as a `T`, or usage and exit 2.
pub fn value<T: FromStr>(flag: &str, args: &mut dyn Iterator<Item = String>) -> T {
    let v = args
        .next()
        .unwrap_or_else(|| bad_usage(format!("{flag} needs a value")));
    v.trim()
        .parse()
        .unwrap_or_else(|_| bad_usage(format!("{flag}: bad value {v:?}")))
}

/// The flags every workload takes.
#[derive(Clone, Copy, Debug)]
pub struct Common {
    pub wait: Option<WaitPolicy>,
    pub yields: bool,
    pub timeout: Duration,
}

/// The usage text of the common flags.
pub const COMMON_USAGE: &str =
    "[--wait block|spin[:US]|adaptive|inslot[:US]] [--yield] [--timeout S]";

/// Parses the command line: the common flags here, the others by `own`
/// (which returns false for a flag it does not know). `usage` is the
/// workload's synopsis without its name. Also records the workload's name
/// (and GANG_RANK, if it is a number) for error messages.
pub fn parse_args(
    name: &'static str,
    usage: &'static str,
    mut own: impl FnMut(&str, &mut dyn Iterator<Item = String>) -> bool,
) -> Common {
    let rank = std::env::var("GANG_RANK")
        .ok()
        .and_then(|r| r.trim().parse().ok());
    let _ = IDENT.set(Ident { name, usage, rank });
    let mut common = Common {
        wait: None,
        yields: false,
        timeout: Duration::from_secs(120),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("usage: {name} {usage}");
                std::process::exit(0);
            }
            "--wait" => {
                let v: String = value("--wait", &mut args);
                common.wait = Some(
                    gangrt::parse_wait_policy(&v)
                        .unwrap_or_else(|e| bad_usage(format!("--wait: {e}"))),
                );
            }
            "--yield" => common.yields = true,
            "--timeout" => {
                let t: f64 = value("--timeout", &mut args);
                if !(t > 0.0 && t <= 1e6) {
                    bad_usage("--timeout must be a positive number of seconds");
                }
                common.timeout = Duration::from_secs_f64(t);
            }
            flag => {
                if !own(flag, &mut args) {
                    bad_usage(format!("unknown argument {flag:?}"));
                }
            }
        }
    }
    common
}

/// This rank's place in the job, from the environment.
#[derive(Clone, Debug)]
pub struct Env {
    pub rank: usize,
    pub size: usize,
    pub peers: Vec<String>,
    pub port: u16,
    /// GANG_NODE, if set (reported as is).
    pub node: String,
}

impl Env {
    pub fn from_env() -> Result<Env, String> {
        let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
        let rank: usize = var("GANG_RANK")?
            .trim()
            .parse()
            .map_err(|_| "GANG_RANK is not a number".to_string())?;
        let size: usize = var("GANG_SIZE")?
            .trim()
            .parse()
            .map_err(|_| "GANG_SIZE is not a number".to_string())?;
        let peers = gang_wire::proto::peers::peers_from_env()?;
        Env::new(rank, size, peers, std::env::var("GANG_PORT").ok())
    }

    /// Checks and builds an environment (`port`: GANG_PORT, if set).
    pub fn new(
        rank: usize,
        size: usize,
        peers: Vec<String>,
        port: Option<String>,
    ) -> Result<Env, String> {
        if size == 0 {
            return Err("GANG_SIZE is 0".into());
        }
        if rank >= size {
            return Err(format!("GANG_RANK {rank} is not below GANG_SIZE {size}"));
        }
        if peers.len() != size {
            return Err(format!(
                "GANG_PEERS names {} peers, GANG_SIZE is {size}",
                peers.len()
            ));
        }
        let port = match port {
            Some(p) => p
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("GANG_PORT {p:?} is not a port"))?,
            None => peers[rank]
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .filter(|&p| p != 0)
                .ok_or_else(|| {
                    format!(
                        "GANG_PORT is not set and my GANG_PEERS entry {:?} has no port",
                        peers[rank]
                    )
                })?,
        };
        Ok(Env {
            rank,
            size,
            peers,
            port,
            node: std::env::var("GANG_NODE").unwrap_or_default(),
        })
    }
}

/// True when this rank is to corrupt its data (GANG_WL_FAULT=1; tests).
pub fn fault_injected() -> bool {
    std::env::var("GANG_WL_FAULT").is_ok_and(|v| v.trim() == "1")
}

/// A fixed busy loop (a multiply-add chain the compiler cannot remove).
/// Returns a value derived from every step.
#[inline(never)]
pub fn spin_loops(loops: u64) -> u64 {
    let mut x = std::hint::black_box(0x2545_f491_4f6c_dd1du64);
    for _ in 0..loops {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x = std::hint::black_box(x);
    }
    x
}

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID): it stands still
/// while the thread is descheduled.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid pointer to a timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU work in fixed grains. Calibrated once at start against the
/// thread's CPU-time clock (time spent descheduled during calibration does
/// not count): the loop is timed on runs of at least 2 ms of CPU time, five
/// times, and the fastest rate is kept. A grain is then a fixed number of
/// loop steps: when the rank is descheduled mid-grain the grain takes
/// longer in wall time, it does not end early as a clock-bound spin would.
#[derive(Clone, Copy, Debug)]
pub struct Spinner {
    pub loops_per_us: f64,
}

impl Spinner {
    pub fn calibrate() -> Spinner {
        let timed = |n: u64| {
            let t = thread_cpu_time();
            std::hint::black_box(spin_loops(n));
            thread_cpu_time().saturating_sub(t)
        };
        let mut n: u64 = 10_000;
        // Grow the run until it takes at least 2 ms.
        while timed(n) < Duration::from_millis(2) && n < 1 << 40 {
            n *= 2;
        }
        let mut best: f64 = 0.0;
        for _ in 0..5 {
            let us = timed(n).as_secs_f64() * 1e6;
            best = best.max(n as f64 / us.max(1e-3));
        }
        Spinner { loops_per_us: best }
    }

    /// The loop steps of a grain of `us` microseconds.
    pub fn loops_for(&self, us: u64) -> u64 {
        (self.loops_per_us * us as f64).round().max(1.0) as u64
    }
}

/// Nearest-rank percentiles of samples (any order): p50, p90, p99, max.
/// All zero when there are none.
pub fn percentiles(samples: &[f64]) -> [f64; 4] {
    if samples.is_empty() {
        return [0.0; 4];
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| {
        let k = ((p / 100.0) * s.len() as f64).ceil() as usize;
        s[k.clamp(1, s.len()) - 1]
    };
    [at(50.0), at(90.0), at(99.0), s[s.len() - 1]]
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_f64(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".into()
    }
}

/// The result of one rank, printed as one JSON line.
pub struct Report {
    pub workload: &'static str,
    pub rank: usize,
    pub size: usize,
    pub iters: u64,
    pub elapsed: Duration,
    /// Per-iteration times in microseconds.
    pub iter_us: Vec<f64>,
    /// What was verified.
    pub check: String,
    /// Further fields: name and JSON value.
    pub extra: Vec<(&'static str, String)>,
    pub node: String,
}

impl Report {
    pub fn line(&self) -> String {
        let [p50, p90, p99, max] = percentiles(&self.iter_us);
        let w = gangrt::wait_stats();
        let mut o = format!(
            "{{\"workload\":{},\"rank\":{},\"size\":{},\"iters\":{},\"elapsed_s\":{:.9},\
             \"iter_us\":{{\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}},\"ok\":true,\"check\":{},\
             \"waits\":{},\"spin_hits\":{},\"blocks\":{},\"spin_ns\":{},\"yields\":{}",
            json_str(self.workload),
            self.rank,
            self.size,
            self.iters,
            self.elapsed.as_secs_f64(),
            json_f64(p50),
            json_f64(p90),
            json_f64(p99),
            json_f64(max),
            json_str(&self.check),
            w.waits,
            w.spin_hits,
            w.blocks,
            w.spin_ns,
            gangrt::yield_count(),
        );
        for (k, v) in &self.extra {
            o.push_str(&format!(",{}:{v}", json_str(k)));
        }
        o.push_str(&format!(",\"node\":{}}}", json_str(&self.node)));
        o
    }

    pub fn print(&self) {
        println!("{}", self.line());
    }
}

/// A well-mixed 64-bit value of `x` (splitmix64's finalizer).
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Fills `buf` with the pattern of `seed` (xorshift64 of a mixed seed).
pub fn fill_pattern(buf: &mut [u8], seed: u64) {
    let mut x = mix64(seed) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// The first byte where `buf` differs from the pattern of `seed`.
pub fn check_pattern(buf: &[u8], seed: u64) -> Option<usize> {
    let mut x = mix64(seed) | 1;
    for (i, chunk) in buf.chunks(8).enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let want = &x.to_le_bytes()[..chunk.len()];
        if chunk != want {
            let k = chunk.iter().zip(want).position(|(a, b)| a != b).unwrap();
            return Some(i * 8 + k);
        }
    }
    None
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let s: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentiles(&s), [50.0, 90.0, 99.0, 100.0]);
        assert_eq!(percentiles(&[7.0]), [7.0; 4]);
        assert_eq!(percentiles(&[]), [0.0; 4]);
        assert_eq!(percentiles(&[1.0, 2.0]), [1.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn pattern_roundtrip_and_detects_one_byte() {
        for len in [0, 1, 7, 8, 9, 1000] {
            let mut b = vec![0u8; len];
            fill_pattern(&mut b, 42);
            assert_eq!(check_pattern(&b, 42), None);
            if len >= 8 {
                assert!(check_pattern(&b, 43).is_some());
            }
            if len > 0 {
                b[len - 1] ^= 1;
                assert_eq!(check_pattern(&b, 42), Some(len - 1));
            }
        }
    }

    #[test]
    fn env_checks() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = Env::new(1, 2, p(&["h:1", "h:2"]), None).unwrap();
        assert_eq!(e.port, 2);
        assert_eq!(
            Env::new(0, 2, p(&["h:1", "h:2"]), Some("9".into()))
                .unwrap()
                .port,
            9
        );
        assert!(Env::new(0, 3, p(&["h:1", "h:2"]), None).is_err());
        assert!(Env::new(2, 2, p(&["h:1", "h:2"]), None).is_err());
        assert!(Env::new(0, 0, p(&[]), None).is_err());
        assert!(Env::new(0, 1, p(&["h"]), None).is_err());
        assert!(Env::new(0, 1, p(&["h:1"]), Some("x".into())).is_err());
    }

    #[test]
    fn spinner_grain_is_work() {
        let s = Spinner::calibrate();
        assert!(s.loops_per_us > 0.0);
        assert!(s.loops_for(1000) >= s.loops_for(10));
        assert_ne!(spin_loops(10), spin_loops(11));
    }

    #[test]
    fn json_line_has_the_fields() {
        let r = Report {
            workload: "x",
            rank: 1,
            size: 2,
            iters: 3,
            elapsed: Duration::from_millis(5),
            iter_us: vec![1.0, 2.0, 3.0],
            check: "a \"quoted\" check".into(),
            extra: vec![("bytes", "8".into())],
            node: String::new(),
        };
        let l = r.line();
        assert!(l.starts_with("{\"workload\":\"x\",\"rank\":1,\"size\":2,\"iters\":3,"));
        assert!(l.contains("\"iter_us\":{\"p50\":2.000,\"p90\":3.000,\"p99\":3.000,\"max\":3.000}"));
        assert!(l.contains("\"check\":\"a \\\"quoted\\\" check\""));
        assert!(l.contains("\"bytes\":8"));
        assert!(l.ends_with('}'));
    }
}
