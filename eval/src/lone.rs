//! The lone-job table (issue 15): what a job alone on the cluster pays
//! under each scheduler, and where its nodes' time went.
//!
//! Input: the MPL 1 `job` records of a run (`scripts/eval.sh --size lone`),
//! several repetitions per (workload, policy), every rank under rankprobe
//! (the records' `probe_*` extras, summed over the job's ranks, and
//! NetPIPE's `np_1k_us`). Per cell the median over its ok repetitions of:
//!
//! - the job's time (the ranks' own elapsed time, the longest rank; the
//!   launch is the same for every policy and only adds noise), and its
//!   ratio to `eevdf`'s median and to `bpfland`'s: the target is
//!   every workload within 5 % of EEVDF (ratio <= 1.05) and at or below
//!   scx_bpfland;
//! - rank 0's median iteration time (`iter_p50_us`; for rt the round-trip
//!   latency) and NetPIPE's 1 KiB one-way time;
//! - the probe's figures that say where time went: the ranks' wait to run
//!   per slice (µs; runnable but not running), their involuntary context
//!   switches, the node's context switches and NET_RX softirqs per second
//!   of the job, ksoftirqd's wait, the scx_gang daemon's CPU time.
//!
//! Paired ratios: repetition r of every policy ran in the same round of a
//! run with `--rounds` (the policies' phases in turn, scripts/eval.sh), so
//! the ratio of a policy's repetition r to eevdf's repetition r cancels a
//! drift of the host over the boot that the ratio of medians does not. The
//! table shows their median and quartiles, and the target's verdict uses
//! the paired median wherever a cell has pairs (the ratio of medians
//! otherwise).
//!
//! `dedicated` is the same kernel scheduler as `eevdf` in another phase of
//! the same boot: their difference is the run's noise floor, shown as its
//! own row. Failed jobs are left out and counted, and so are lossy ones: a
//! repetition in which a rank's node had a TCP retransmission timeout
//! (`probe_tcp_timeouts`) waited for TCP's timers (200 ms and more, backing
//! off), whatever the scheduler; the test bed's virtual switch drops
//! packets under load. They are shown (`ok!failed~lossy`), never averaged in.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::records::{Job, Log};

/// The target: a lone job within this factor of EEVDF.
pub const EEVDF_TARGET: f64 = 1.05;

/// The probe figures shown, as (record key, column title, per second of
/// the job instead of per job).
const PROBES: &[(&str, &str, bool)] = &[
    ("probe_rank_nvcsw", "rank invol cs/s", true),
    ("probe_node_ctxt", "node cs/s", true),
    ("probe_net_rx", "NET_RX/s", true),
    ("probe_ksoftirqd_wait_ms", "ksoftirqd wait ms", false),
    ("probe_daemon_cpu_ms", "daemon cpu ms/s", true),
    ("probe_tcp_retrans", "tcp retrans", false),
];

/// One (workload, policy) cell.
#[derive(Debug, Clone, PartialEq)]
pub struct LoneCell {
    pub workload: String,
    pub policy: String,
    /// Ok repetitions, and failed ones.
    pub ok: usize,
    pub failed: usize,
    pub lossy: usize,
    /// Median time of the ok repetitions (s).
    pub time_s: f64,
    /// Median over repetitions of (rank wait / rank slices), µs.
    pub wait_per_slice_us: Option<f64>,
    /// Median NetPIPE 1 KiB one-way time, µs.
    pub np_1k_us: Option<f64>,
    /// Median of rank 0's median iteration (rt: the round trip), µs.
    pub iter_p50_us: Option<f64>,
    /// Median of each PROBES figure.
    pub probes: Vec<Option<f64>>,
    /// Every ok repetition's time (s), by repetition index.
    pub reps: Vec<(u32, f64)>,
}

/// Ratios of one cell's repetitions to another's of the same index:
/// median, first and third quartile, and how many pairs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub pairs: usize,
}

fn median(xs: Vec<f64>) -> Option<f64> {
    quantile(xs, 0.5)
}

/// The q-quantile, linear between the closest ranks (the median of an even
/// count is the mean of the middle two).
fn quantile(mut xs: Vec<f64>, q: f64) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let pos = q * (xs.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo as f64))
}

fn extra(job: &Job, key: &str) -> Option<f64> {
    job.extra
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
}

fn job_time(job: &Job) -> f64 {
    job.elapsed_s
        .filter(|&s| s > 0.0)
        .unwrap_or_else(|| job.time_s())
}

/// Every MPL 1 cell, workloads and policies in the order first seen.
pub fn cells(log: &Log) -> Vec<LoneCell> {
    let mut by: BTreeMap<(usize, usize), Vec<&Job>> = BTreeMap::new();
    for j in log.jobs.iter().filter(|j| j.mpl == 1) {
        let w = log
            .workloads
            .iter()
            .position(|w| *w == j.workload)
            .unwrap_or(usize::MAX);
        let p = log
            .policies
            .iter()
            .position(|p| *p == j.policy)
            .unwrap_or(usize::MAX);
        by.entry((w, p)).or_default().push(j);
    }
    by.into_values()
        .map(|jobs| {
            let lossy = |j: &Job| extra(j, "probe_tcp_timeouts").is_some_and(|t| t > 0.0);
            let ok: Vec<&Job> = jobs
                .iter()
                .copied()
                .filter(|j| j.ok() && !lossy(j))
                .collect();
            let n_lossy = jobs.iter().filter(|j| j.ok() && lossy(j)).count();
            let per =
                |f: &dyn Fn(&Job) -> Option<f64>| median(ok.iter().filter_map(|j| f(j)).collect());
            LoneCell {
                workload: jobs[0].workload.clone(),
                policy: jobs[0].policy.clone(),
                ok: ok.len(),
                failed: jobs.len() - ok.len() - n_lossy,
                lossy: n_lossy,
                time_s: median(ok.iter().map(|j| job_time(j)).collect()).unwrap_or(f64::NAN),
                wait_per_slice_us: per(&|j| {
                    let (w, s) = (
                        extra(j, "probe_rank_wait_ms")?,
                        extra(j, "probe_rank_slices")?,
                    );
                    (s > 0.0).then(|| w * 1000.0 / s)
                }),
                np_1k_us: per(&|j| extra(j, "np_1k_us")),
                iter_p50_us: per(&|j| extra(j, "iter_p50_us")),
                probes: PROBES
                    .iter()
                    .map(|(key, _, per_s)| {
                        per(&|j| {
                            let v = extra(j, key)?;
                            Some(if *per_s { v / job_time(j).max(1e-3) } else { v })
                        })
                    })
                    .collect(),
                reps: ok.iter().map(|j| (j.rep, job_time(j))).collect(),
            }
        })
        .collect()
}

fn find<'a>(cells: &'a [LoneCell], w: &str, p: &str) -> Option<&'a LoneCell> {
    cells
        .iter()
        .find(|c| c.workload == w && c.policy == p && c.ok > 0)
}

/// Ratio of a cell's time to `policy`'s in the same workload.
pub fn ratio(cells: &[LoneCell], c: &LoneCell, policy: &str) -> Option<f64> {
    find(cells, &c.workload, policy)
        .map(|b| c.time_s / b.time_s)
        .filter(|r| r.is_finite())
}

/// A cell's repetitions against `policy`'s of the same index, in the same
/// workload; None without a pair.
pub fn paired(cells: &[LoneCell], c: &LoneCell, policy: &str) -> Option<Paired> {
    let base = find(cells, &c.workload, policy)?;
    let ratios: Vec<f64> = c
        .reps
        .iter()
        .filter_map(|(r, t)| base.reps.iter().find(|(b, _)| b == r).map(|(_, bt)| t / bt))
        .filter(|x| x.is_finite())
        .collect();
    Some(Paired {
        median: median(ratios.clone())?,
        q1: quantile(ratios.clone(), 0.25)?,
        q3: quantile(ratios.clone(), 0.75)?,
        pairs: ratios.len(),
    })
}

/// What the verdict compares: the paired median where there are pairs,
/// the ratio of medians otherwise.
fn verdict_ratio(cells: &[LoneCell], c: &LoneCell, policy: &str) -> Option<f64> {
    paired(cells, c, policy)
        .map(|p| p.median)
        .or_else(|| ratio(cells, c, policy))
}

/// Is the target met for `policy` (default gang-strict) on every workload?
/// None when EEVDF or bpfland or the policy is missing somewhere.
pub fn target_met(cells: &[LoneCell], policy: &str) -> Option<bool> {
    let mut any = false;
    for c in cells.iter().filter(|c| c.policy == policy) {
        let (e, b) = (
            verdict_ratio(cells, c, "eevdf")?,
            verdict_ratio(cells, c, "bpfland")?,
        );
        any = true;
        if e > EEVDF_TARGET || b > 1.0 {
            return Some(false);
        }
    }
    any.then_some(true)
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// One row of the table: per column (csv key, title, width, text for
/// people, text for the CSV).
fn row(
    cells: &[LoneCell],
    c: &LoneCell,
) -> Vec<(&'static str, &'static str, usize, String, String)> {
    let (e, b) = (ratio(cells, c, "eevdf"), ratio(cells, c, "bpfland"));
    let (pe, pb) = (paired(cells, c, "eevdf"), paired(cells, c, "bpfland"));
    let num = |key, title, width, v: Option<f64>, prec: usize| {
        (key, title, width, opt(v, prec), opt(v, prec + 1))
    };
    // "median [q1-q3]" for people; the CSV has each as its own column.
    let pair = |p: Option<Paired>| {
        p.map_or("-".into(), |p| {
            format!("{:.3} [{:.2}-{:.2}]", p.median, p.q1, p.q3)
        })
    };
    let ok = format!(
        "{}{}{}",
        c.ok,
        if c.failed > 0 {
            format!("!{}", c.failed)
        } else {
            String::new()
        },
        if c.lossy > 0 {
            format!("~{}", c.lossy)
        } else {
            String::new()
        }
    );
    let mut cols = vec![
        (
            "workload",
            "workload",
            10,
            c.workload.clone(),
            c.workload.clone(),
        ),
        ("policy", "policy", 12, c.policy.clone(), c.policy.clone()),
        ("ok", "ok", 6, ok, c.ok.to_string()),
        ("failed", "", 0, String::new(), c.failed.to_string()),
        ("lossy", "", 0, String::new(), c.lossy.to_string()),
        (
            "time_s",
            "time s",
            8,
            format!("{:.3}", c.time_s),
            format!("{:.6}", c.time_s),
        ),
        num("vs_eevdf", "/eevdf", 8, e, 3),
        num("vs_bpfland", "/bpfland", 8, b, 3),
        (
            "paired_eevdf",
            "paired /eevdf [q1-q3]",
            21,
            pair(pe),
            opt(pe.map(|p| p.median), 4),
        ),
        (
            "paired_eevdf_q1",
            "",
            0,
            String::new(),
            opt(pe.map(|p| p.q1), 4),
        ),
        (
            "paired_eevdf_q3",
            "",
            0,
            String::new(),
            opt(pe.map(|p| p.q3), 4),
        ),
        (
            "paired_bpfland",
            "paired /bpfland [q1-q3]",
            23,
            pair(pb),
            opt(pb.map(|p| p.median), 4),
        ),
        (
            "paired_bpfland_q1",
            "",
            0,
            String::new(),
            opt(pb.map(|p| p.q1), 4),
        ),
        (
            "paired_bpfland_q3",
            "",
            0,
            String::new(),
            opt(pb.map(|p| p.q3), 4),
        ),
        num(
            "wait_per_slice_us",
            "wait/slc us",
            11,
            c.wait_per_slice_us,
            1,
        ),
        num("iter_p50_us", "p50 it us", 9, c.iter_p50_us, 1),
        num("np_1k_us", "np 1k us", 8, c.np_1k_us, 1),
    ];
    for ((key, title, _), v) in PROBES.iter().zip(&c.probes) {
        cols.push(num(key, title, 17, *v, 1));
    }
    cols
}

/// The table for people, and lone.csv's text.
pub fn render(cells: &[LoneCell], policy: &str) -> (String, String) {
    let (mut t, mut csv) = (String::new(), String::new());
    for (i, c) in cells.iter().enumerate() {
        let cols = row(cells, c);
        if i == 0 {
            let keys: Vec<&str> = cols.iter().map(|c| c.0).collect();
            let _ = writeln!(csv, "{}", keys.join(","));
            for (j, (_, title, w, _, _)) in cols.iter().enumerate().filter(|(_, c)| c.2 > 0) {
                let _ = if j < 2 {
                    write!(t, "{title:<w$} ")
                } else {
                    write!(t, "{title:>w$} ")
                };
            }
            t = t.trim_end().to_string() + "\n";
        }
        let mut line = String::new();
        for (j, (_, _, w, text, _)) in cols.iter().enumerate().filter(|(_, c)| c.2 > 0) {
            let _ = if j < 2 {
                write!(line, "{text:<w$} ")
            } else {
                write!(line, "{text:>w$} ")
            };
        }
        let _ = writeln!(t, "{}", line.trim_end());
        let values: Vec<&str> = cols.iter().map(|c| c.4.as_str()).collect();
        let _ = writeln!(csv, "{}", values.join(","));
    }
    let verdict = match target_met(cells, policy) {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a (eevdf, bpfland or the policy missing)",
    };
    let _ = writeln!(
        t,
        "\ntarget ({policy} alone within {:.0} % of eevdf and at or below bpfland, every workload; paired medians): {verdict}",
        (EEVDF_TARGET - 1.0) * 100.0
    );
    if cells.iter().any(|c| c.lossy > 0) {
        let _ = writeln!(t, "~N: N repetitions left out, a rank's node had TCP retransmission timeouts (packet loss)");
    }
    if cells.iter().any(|c| c.policy == "dedicated") {
        let _ = writeln!(
            t,
            "noise floor: dedicated is eevdf in another phase of the same boot (its /eevdf column)"
        );
    }
    (t, csv)
}
