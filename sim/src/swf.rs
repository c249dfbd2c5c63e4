//! The Standard Workload Format reader (Parallel Workloads Archive,
//! Feitelson et al., https://www.cs.huji.ac.il/labs/parallel/workload/swf.html).
//!
//! A trace is text: lines starting with `;` are header comments, blank
//! lines are ignored, and every other line is one job of exactly 18
//! white-space separated numbers, −1 meaning "unknown". We use field 1 (job
//! number), 2 (submit time, s), 4 (run time, s), 5 (allocated processors),
//! 8 (requested processors, used when 5 is unknown) and 9 (requested time,
//! s, EASY's estimate; the runtime when unknown).
//!
//! A line that is not 18 numbers is an error naming its line number; the
//! archive's advice for jobs with an unknown run time or processor count
//! is to leave them out, which we do and count ([`Trace::skipped`]).
//!
//! Known faults: the header (MaxProcs etc.) is not read, so the machine
//! size comes from the command line; fields are parsed as decimals, so a
//! trace with fractional seconds is accepted as it is.

use std::fmt;
use std::io::BufRead;

use crate::workload::Job;

pub const FIELDS: usize = 18;

/// The jobs of a trace and how many lines were left out.
#[derive(Debug, Default)]
pub struct Trace {
    pub jobs: Vec<Job>,
    /// Jobs with an unknown (−1) run time or processor count.
    pub skipped: usize,
}

#[derive(Debug, PartialEq)]
pub enum SwfError {
    /// Line `line` (from 1) is malformed.
    Line {
        line: usize,
        why: String,
    },
    Io(String),
}

impl fmt::Display for SwfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Line { line, why } => write!(f, "SWF line {line}: {why}"),
            Self::Io(e) => write!(f, "reading the SWF trace: {e}"),
        }
    }
}

impl std::error::Error for SwfError {}

pub fn read(input: impl BufRead) -> Result<Trace, SwfError> {
    let mut trace = Trace::default();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| SwfError::Io(e.to_string()))?;
        match parse_line(&line).map_err(|why| SwfError::Line { line: i + 1, why })? {
            Parsed::Blank => {}
            Parsed::Skipped => trace.skipped += 1,
            Parsed::Job(job) => trace.jobs.push(job),
        }
    }
    Ok(trace)
}

enum Parsed {
    Blank,
    Skipped,
    Job(Job),
}

fn parse_line(line: &str) -> Result<Parsed, String> {
    let text = line.trim();
    if text.is_empty() || text.starts_with(';') {
        return Ok(Parsed::Blank);
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() != FIELDS {
        return Err(format!(
            "{} fields, an SWF job line has {FIELDS}",
            words.len()
        ));
    }
    let mut f = [0f64; FIELDS];
    for (k, w) in words.iter().enumerate() {
        f[k] = w
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("field {} is {w:?}, not a number", k + 1))?;
    }
    let procs = if f[4] > 0.0 { f[4] } else { f[7] };
    if f[3] < 0.0 || procs <= 0.0 {
        return Ok(Parsed::Skipped);
    }
    if f[1] < 0.0 {
        return Err(format!("submit time {} is negative", f[1]));
    }
    if procs > u32::MAX as f64 {
        return Err(format!("{procs} processors"));
    }
    let requested = (f[8] > 0.0).then_some(f[8]);
    Ok(Parsed::Job(Job::new(
        f[0].max(0.0) as u64,
        f[1],
        f[3],
        procs.round() as u32,
        requested,
    )))
}

/// One job as an SWF line (unknown fields −1), for generated workloads.
pub fn format_job(job: &Job) -> String {
    format!(
        "{} {} -1 {} {} -1 -1 {} {} -1 1 -1 -1 -1 -1 -1 -1 -1",
        job.id, job.submit, job.runtime, job.procs, job.procs, job.estimate
    )
}
