//! The rigid jobs a simulation runs, and the offered load.
//!
//! A job asks for `procs` processors (CPUs, one rank each) for `runtime`
//! seconds of dedicated time; `estimate` is the user's requested time,
//! which only EASY uses. Estimates shorter than the runtime are raised to
//! it (a real batch system would kill the job at its limit; here the job
//! runs to its end and the reservations stay valid).
//!
//! Offered load = Σ procs × runtime / (cpus × span), span = last submit −
//! first submit. [`scale_to_load`] multiplies every inter-arrival time by
//! one factor so that the offered load is the one asked for; job sizes and
//! runtimes are unchanged.
//!
//! Known fault: with few jobs the span is dominated by a few gaps, so the
//! offered load of a short trace is a rough figure.

/// One job of the input.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Its number in the trace (SWF field 1), for messages.
    pub id: u64,
    /// Seconds from the start of the trace.
    pub submit: f64,
    /// Seconds on dedicated processors; > 0.
    pub runtime: f64,
    /// Processors (ranks); ≥ 1.
    pub procs: u32,
    /// Requested time, ≥ runtime.
    pub estimate: f64,
}

impl Job {
    pub fn new(id: u64, submit: f64, runtime: f64, procs: u32, requested: Option<f64>) -> Job {
        Job {
            id,
            submit,
            runtime,
            procs,
            estimate: requested.unwrap_or(runtime).max(runtime),
        }
    }

    /// procs × runtime, in CPU-seconds.
    pub fn work(&self) -> f64 {
        self.procs as f64 * self.runtime
    }
}

/// What a simulator says of one job: when it first ran and when it ended.
/// `None` for a job the policy refused (larger than the machine).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub start: f64,
    pub end: f64,
}

/// Σ work / (cpus × span); 0 for fewer than two jobs or a zero span.
pub fn offered_load(jobs: &[Job], cpus: u64) -> f64 {
    let span = span(jobs);
    if span <= 0.0 || cpus == 0 {
        return 0.0;
    }
    jobs.iter().map(Job::work).sum::<f64>() / (cpus as f64 * span)
}

fn span(jobs: &[Job]) -> f64 {
    let lo = jobs.iter().map(|j| j.submit).fold(f64::INFINITY, f64::min);
    let hi = jobs
        .iter()
        .map(|j| j.submit)
        .fold(f64::NEG_INFINITY, f64::max);
    if jobs.len() < 2 {
        0.0
    } else {
        hi - lo
    }
}

/// The jobs with every submit time moved so that the offered load on
/// `cpus` is `load`: times are measured from the first submit and scaled
/// by one factor. Sorted by submit time (ties: input order).
pub fn scale_to_load(jobs: &[Job], cpus: u64, load: f64) -> Vec<Job> {
    let mut out = jobs.to_vec();
    out.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    let now = offered_load(&out, cpus);
    if now <= 0.0 || load <= 0.0 {
        return out;
    }
    let t0 = out.first().map_or(0.0, |j| j.submit);
    let factor = now / load;
    for j in &mut out {
        j.submit = (j.submit - t0) * factor;
    }
    out
}
