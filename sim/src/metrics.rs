//! The figures of one run: mean and p95 response time, mean bounded
//! slowdown, utilisation and makespan, over the jobs that ran.
//!
//! - response = end − submit;
//! - bounded slowdown = max(1, response / max(runtime, τ)), τ = 10 s
//!   (Feitelson et al., "Theory and practice in parallel job scheduling",
//!   1997), so that very short jobs do not dominate the mean;
//! - makespan = last end − first submit;
//! - utilisation = Σ procs × runtime of the jobs that ran / (cpus ×
//!   makespan): useful work only, so the time lost to switches lowers it.
//!
//! p95 is the nearest-rank percentile. Known fault: no warm-up or
//! cool-down is cut, so a short run's figures include the empty start and
//! the drain at the end.

use crate::workload::{Job, Outcome};

pub const TAU_S: f64 = 10.0;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub jobs: usize,
    /// Jobs the policy could not run (larger than the machine).
    pub refused: usize,
    pub mean_response_s: f64,
    pub p95_response_s: f64,
    pub mean_bsld: f64,
    pub utilisation: f64,
    pub makespan_s: f64,
}

pub fn summarise(jobs: &[Job], outcomes: &[Option<Outcome>], cpus: u64) -> Summary {
    let ran: Vec<(&Job, &Outcome)> = jobs
        .iter()
        .zip(outcomes)
        .filter_map(|(j, o)| o.as_ref().map(|o| (j, o)))
        .collect();
    if ran.is_empty() {
        return Summary {
            refused: jobs.len(),
            ..Summary::default()
        };
    }
    let mut responses: Vec<f64> = ran.iter().map(|(j, o)| o.end - j.submit).collect();
    let n = ran.len() as f64;
    let mean_response_s = responses.iter().sum::<f64>() / n;
    let mean_bsld = ran
        .iter()
        .map(|(j, o)| ((o.end - j.submit) / j.runtime.max(TAU_S)).max(1.0))
        .sum::<f64>()
        / n;
    responses.sort_by(f64::total_cmp);
    let first = ran
        .iter()
        .map(|(j, _)| j.submit)
        .fold(f64::INFINITY, f64::min);
    let last = ran
        .iter()
        .map(|(_, o)| o.end)
        .fold(f64::NEG_INFINITY, f64::max);
    let makespan_s = last - first;
    let work: f64 = ran.iter().map(|(j, _)| j.work()).sum();
    Summary {
        jobs: ran.len(),
        refused: jobs.len() - ran.len(),
        mean_response_s,
        p95_response_s: percentile(&responses, 0.95),
        mean_bsld,
        utilisation: if makespan_s > 0.0 {
            work / (cpus as f64 * makespan_s)
        } else {
            0.0
        },
        makespan_s,
    }
}

/// The nearest-rank `q` quantile of ascending `sorted`; 0 when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
