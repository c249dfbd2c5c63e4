//! gang-eval: turns the evaluation harness's raw records into the answer.
//!
//! Design. The harness runs batches of jobs on the VM cluster under several
//! scheduling policies and appends one text record per fact (a job, a cell's
//! switch count, a short job, free facts about the run). This crate is a pure
//! function of those files, in one direction, one concern per module:
//!
//! - [`records`]: the line format and nothing else. Every malformed line is
//!   an error naming `file:line`; nothing is skipped silently. Unknown keys
//!   are kept, so the harness can add facts without breaking this crate.
//! - [`metrics`]: per cell (policy × workload × MPL) over its repetitions:
//!   slowdown against the `dedicated` baseline, makespan and its CV, makespan
//!   ratio, per-switch overhead; the short-job scenario against FIFO. Failed
//!   jobs are counted, never averaged in.
//! - [`targets`]: the evaluation's claims checked against the metrics (met,
//!   NOT met, or n/a with the reason).
//! - [`report`]: CSV files and the text summary (tables), and writing them.
//! - [`figures`]: hand-written SVG figures, one per question, with a fixed
//!   colour-blind-friendly colour per policy.
//! - [`check`]: is the run complete? Every expected job, cell and baseline
//!   record present and ok, or the list of what is not.
//! - [`bench`]: the cluster benchmark's tables (scripts/bench_cluster.sh's
//!   boots: per-switch overhead against the baselines, medians, the text
//!   table), from its own JSON-line records.
//!
//! - [`lone`]: the lone-job table (MPL 1 against eevdf and bpfland, with
//!   the ranks' rankprobe figures: issue 15).
//!
//! - [`scale`]: the load harness's table (scripts/bench_scale.sh), read
//!   back for the figure of gangd's costs against N (issue 14).
//!
//! `src/main.rs` is only the command line (`gang-eval report|check|bench|lone|scale`).

pub mod bench;
pub mod bpf_cost;
pub mod check;
pub mod figures;
pub mod lone;
pub mod metrics;
pub mod records;
pub mod report;
pub mod scale;
pub mod targets;

/// Policy names the evaluation knows (their colours are fixed).
pub const KNOWN_POLICIES: &[&str] = &[
    "dedicated",
    "eevdf",
    "bpfland",
    "signal",
    "spinblock",
    "gang-off",
    "gang-strict",
    "gang-yield",
    "gang-timed",
];

/// The baseline policy: every workload alone on the cluster.
pub const DEDICATED: &str = "dedicated";

/// Splits a list argument ("a b c" or "a,b,c") into its words.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}
