//! What gang-load measures outside the agents: gangd's CPU time, RSS and
//! threads from /proc/PID, percentiles, and the allocator's decision time
//! measured in-process on gangd's own allocation code.
//!
//! CPU is utime + stime of /proc/PID/stat (clock ticks, USER_HZ = 100 on
//! Linux: a 10 ms resolution, so windows of a few seconds). Known fault:
//! the allocation time is the library's, on this process, not inside
//! gangd; gangd does the same calls on the same matrix (the front end's
//! Submit → Accepted time is the end-to-end figure and is reported too).

use std::time::{Duration, Instant};

use gang_coordinator::alloc::{Allocator, JobSpec, Settings};
use gang_coordinator::matrix::Cluster;

/// One reading of gangd's /proc entries.
#[derive(Clone, Copy, Debug)]
pub struct ProcSample {
    pub at: Instant,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    pub rss_kb: u64,
    pub threads: u64,
}

pub fn sample(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(ProcSample {
        at: Instant::now(),
        ticks,
        rss_kb: field("VmRSS:"),
        threads: field("Threads:"),
    })
}

/// Percent of one core used between two samples.
pub fn cpu_pct(a: &ProcSample, b: &ProcSample) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    (b.ticks.saturating_sub(a.ticks)) as f64 / hz / secs * 100.0
}

/// The q-quantile (0..=1) of `v` by the nearest-rank method; NaN if empty.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A small deterministic generator (xorshift64*), for job sizes.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A job size in 1..=n nodes, log-uniform (as many small jobs as large
    /// ones per doubling, as in real workloads).
    pub fn nodes(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64).powf(u).floor() as usize).clamp(1, n)
    }
}

/// gangd's allocator on `nodes` × `cpus`, mpl 4 and fill like gangd's
/// defaults, with three jobs over every CPU (as the harness runs), then
/// `jobs` arrivals of 1–nodes nodes, each finished after its placement:
/// the microseconds of each placement decision (submit) and release
/// (finish).
pub fn allocation_us(nodes: usize, cpus: u32, jobs: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let cluster = Cluster::from_shape(&vec![cpus; nodes]).expect("a valid cluster shape");
    let mut alloc = Allocator::new(cluster, Settings::default()).expect("the default settings");
    let spec = |name: String, n: usize| JobSpec {
        name,
        ranks: n as u32 * cpus,
        per_node: Some(cpus),
    };
    for b in 0..3 {
        let _ = alloc.submit(spec(format!("bg{b}"), nodes));
    }
    let mut rng = Rng::new(seed);
    let (mut submit, mut finish) = (vec![], vec![]);
    for j in 0..jobs {
        let n = rng.nodes(nodes);
        let t = Instant::now();
        let id = alloc.submit(spec(format!("j{j}"), n));
        submit.push(t.elapsed().as_secs_f64() * 1e6);
        if let Ok(id) = id {
            let t = Instant::now();
            let _ = alloc.finish(id);
            finish.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    (submit, finish)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn job_sizes_stay_within_the_cluster() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            let n = r.nodes(64);
            assert!((1..=64).contains(&n));
        }
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_kb > 0 && s.threads >= 1);
    }
}
