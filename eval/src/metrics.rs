//! Metrics per cell (policy × workload × MPL) over its repetitions, and of
//! the short-job scenario.
//!
//! - dedicated(W): mean response time of the ok `dedicated` jobs of W (each
//!   alone on the cluster); the same for their elapsed_s.
//! - slowdown of a job: its response time / dedicated(W); per cell the mean
//!   and max over every ok job of every rep. The elapsed-based ratio is mean
//!   elapsed_s of the cell's ok jobs / mean dedicated elapsed_s.
//! - makespan of a rep: last end - first submit, over the reps whose mpl jobs
//!   are all present and ok (a failed job can end early and shorten it);
//!   mean over reps, CV = sample std / mean (reps ≥ 2); ratio = makespan /
//!   (M × dedicated(W)).
//! - per-switch overhead of a rep: (makespan - M × dedicated(W)) / switches,
//!   for reps with switches > 0; mean over reps (throughput estimate).
//! - short job: response T1 - T0; FIFO response = max(0, L × dedicated(LW)
//!   - (T0 - TL)) + dedicated(W), all in seconds; means over ok records.
//!
//! Failed jobs are counted (jobs vs jobs_ok) and never enter a time.

use crate::records::{Job, Log};
use crate::DEDICATED;
use std::collections::{BTreeMap, BTreeSet};

/// The baseline of one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Dedicated {
    /// Mean response time (s) of the ok dedicated jobs; None if there is none.
    pub time_s: Option<f64>,
    /// Mean elapsed_s of the ok dedicated jobs that reported one.
    pub elapsed_s: Option<f64>,
    pub jobs: usize,
    pub jobs_ok: usize,
}

/// One row of results.csv.
#[derive(Debug, Clone, PartialEq)]
pub struct CellStats {
    pub policy: String,
    pub workload: String,
    pub mpl: u32,
    /// Distinct reps with job records.
    pub reps: usize,
    pub jobs: usize,
    pub jobs_ok: usize,
    pub time_s_mean: Option<f64>,
    pub slowdown_mean: Option<f64>,
    pub slowdown_max: Option<f64>,
    pub elapsed_slowdown_mean: Option<f64>,
    pub makespan_s: Option<f64>,
    /// Reps whose makespan counted (all mpl jobs present and ok).
    pub makespan_reps: usize,
    pub makespan_cv: Option<f64>,
    pub makespan_ratio: Option<f64>,
    pub switches_mean: Option<f64>,
    pub switch_overhead_ms: Option<f64>,
}

/// The short-job scenario of one policy (and one configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct ShortStats {
    pub policy: String,
    pub workload: String,
    pub behind: u32,
    pub long_workload: String,
    pub reps: usize,
    pub records: usize,
    pub ok: usize,
    pub response_s: Option<f64>,
    pub dedicated_s: Option<f64>,
    pub fifo_s: Option<f64>,
    pub vs_dedicated: Option<f64>,
    pub vs_fifo: Option<f64>,
}

/// Everything the report shows.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// Display order of policies.
    pub policies: Vec<String>,
    /// Workloads in first-seen order.
    pub workloads: Vec<String>,
    pub dedicated: BTreeMap<String, Dedicated>,
    /// Ordered by policy (display order), workload, mpl.
    pub cells: Vec<CellStats>,
    pub shorts: Vec<ShortStats>,
}

impl Analysis {
    pub fn cell(&self, policy: &str, workload: &str, mpl: u32) -> Option<&CellStats> {
        self.cells
            .iter()
            .find(|c| c.policy == policy && c.workload == workload && c.mpl == mpl)
    }

    /// MPLs with a cell of this workload (any policy but dedicated), ascending.
    pub fn mpls_of(&self, workload: &str) -> Vec<u32> {
        let set: BTreeSet<u32> = self
            .cells
            .iter()
            .filter(|c| c.workload == workload && c.policy != DEDICATED)
            .map(|c| c.mpl)
            .collect();
        set.into_iter().collect()
    }

    /// Policies other than the baseline, in display order.
    pub fn shared_policies(&self) -> Vec<String> {
        self.policies
            .iter()
            .filter(|p| *p != DEDICATED)
            .cloned()
            .collect()
    }

    pub fn dedicated_time(&self, workload: &str) -> Option<f64> {
        self.dedicated.get(workload).and_then(|d| d.time_s)
    }
}

pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        None
    } else {
        Some(xs.iter().sum::<f64>() / xs.len() as f64)
    }
}

/// Sample standard deviation / mean; None with fewer than 2 values or a
/// zero mean.
pub fn cv(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    if m == 0.0 {
        return None;
    }
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    Some(var.sqrt() / m)
}

/// The baseline of every workload with dedicated job records.
pub fn dedicated(log: &Log) -> BTreeMap<String, Dedicated> {
    let mut by: BTreeMap<String, Vec<&Job>> = BTreeMap::new();
    for j in log.jobs.iter().filter(|j| j.policy == DEDICATED) {
        by.entry(j.workload.clone()).or_default().push(j);
    }
    by.into_iter()
        .map(|(w, jobs)| {
            let ok: Vec<&Job> = jobs.iter().copied().filter(|j| j.ok()).collect();
            let times: Vec<f64> = ok.iter().map(|j| j.time_s()).collect();
            let el: Vec<f64> = ok.iter().filter_map(|j| j.elapsed_s).collect();
            (
                w,
                Dedicated {
                    time_s: mean(&times),
                    elapsed_s: mean(&el),
                    jobs: jobs.len(),
                    jobs_ok: ok.len(),
                },
            )
        })
        .collect()
}

/// Display order: `order` first (names not in the records are dropped),
/// then every other policy of the records in first-seen order.
pub fn policy_order(log: &Log, order: Option<&[String]>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if let Some(order) = order {
        for p in order {
            if log.policies.contains(p) && !out.contains(p) {
                out.push(p.clone());
            }
        }
    }
    for p in &log.policies {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Computes every metric. `order`: the --policies display order, if given.
pub fn analyse(log: &Log, order: Option<&[String]>) -> Analysis {
    let policies = policy_order(log, order);
    let ded = dedicated(log);
    let mut workloads = log.workloads.clone();
    for s in &log.shorts {
        for w in [&s.workload, &s.long_workload] {
            if !workloads.contains(w) {
                workloads.push(w.clone());
            }
        }
    }

    // Group jobs and cell records by cell.
    type Key = (String, String, u32);
    let mut jobs: BTreeMap<Key, Vec<&Job>> = BTreeMap::new();
    for j in &log.jobs {
        jobs.entry((j.policy.clone(), j.workload.clone(), j.mpl))
            .or_default()
            .push(j);
    }
    let mut switches: BTreeMap<Key, BTreeMap<u32, Vec<u64>>> = BTreeMap::new();
    for c in &log.cells {
        let e = switches
            .entry((c.policy.clone(), c.workload.clone(), c.mpl))
            .or_default();
        let reps = e.entry(c.rep).or_default();
        if let Some(s) = c.switches {
            reps.push(s);
        }
    }
    let mut keys: BTreeSet<Key> = jobs.keys().cloned().collect();
    keys.extend(switches.keys().cloned());

    let mut cells = Vec::new();
    for key in keys {
        let (policy, workload, mpl) = key.clone();
        let list = jobs.get(&key).cloned().unwrap_or_default();
        let sw = switches.get(&key).cloned().unwrap_or_default();
        let d = ded.get(&workload);
        let d_time = d.and_then(|d| d.time_s).filter(|t| *t > 0.0);
        let d_el = d.and_then(|d| d.elapsed_s);

        let ok: Vec<&Job> = list.iter().copied().filter(|j| j.ok()).collect();
        let times: Vec<f64> = ok.iter().map(|j| j.time_s()).collect();
        let slow: Vec<f64> = match d_time {
            Some(dt) => times.iter().map(|t| t / dt).collect(),
            None => Vec::new(),
        };
        let elapsed: Vec<f64> = ok.iter().filter_map(|j| j.elapsed_s).collect();

        let mut by_rep: BTreeMap<u32, Vec<&Job>> = BTreeMap::new();
        for j in &list {
            by_rep.entry(j.rep).or_default().push(j);
        }
        let mut makespans = Vec::new();
        let mut overheads = Vec::new();
        for (rep, rj) in &by_rep {
            let idxs: BTreeSet<u32> = rj.iter().map(|j| j.idx).collect();
            let complete = rj.len() == mpl as usize
                && idxs.len() == mpl as usize
                && idxs.iter().all(|i| *i < mpl)
                && rj.iter().all(|j| j.ok());
            if !complete {
                continue;
            }
            let first = rj.iter().map(|j| j.submit_ms).fold(f64::INFINITY, f64::min);
            let last = rj
                .iter()
                .map(|j| j.end_ms)
                .fold(f64::NEG_INFINITY, f64::max);
            let ms = (last - first) / 1000.0;
            makespans.push(ms);
            if let (Some(dt), Some(s)) = (d_time, sw.get(rep).and_then(|v| mean_u64(v))) {
                if s > 0.0 {
                    overheads.push((ms - mpl as f64 * dt) * 1000.0 / s);
                }
            }
        }
        let all_sw: Vec<f64> = sw.values().flatten().map(|s| *s as f64).collect();
        let makespan_s = mean(&makespans);

        let time_s_mean = mean(&times);
        cells.push(CellStats {
            reps: by_rep.len(),
            jobs: list.len(),
            jobs_ok: ok.len(),
            time_s_mean,
            slowdown_mean: mean(&slow),
            slowdown_max: slow.iter().copied().reduce(f64::max),
            elapsed_slowdown_mean: ratio(mean(&elapsed), d_el),
            makespan_s,
            makespan_reps: makespans.len(),
            makespan_cv: cv(&makespans),
            makespan_ratio: ratio(makespan_s, d_time.map(|dt| mpl as f64 * dt)),
            switches_mean: mean(&all_sw),
            switch_overhead_ms: mean(&overheads),
            policy,
            workload,
            mpl,
        });
    }
    let rank = |p: &str| policies.iter().position(|x| x == p).unwrap_or(usize::MAX);
    let wrank = |w: &str| workloads.iter().position(|x| x == w).unwrap_or(usize::MAX);
    cells.sort_by(|a, b| {
        (rank(&a.policy), wrank(&a.workload), a.mpl).cmp(&(
            rank(&b.policy),
            wrank(&b.workload),
            b.mpl,
        ))
    });

    let shorts = short_stats(log, &ded, &policies);
    Analysis {
        policies,
        workloads,
        dedicated: ded,
        cells,
        shorts,
    }
}

fn mean_u64(v: &[u64]) -> Option<f64> {
    mean(&v.iter().map(|x| *x as f64).collect::<Vec<_>>())
}

/// FIFO response (s) of a short job submitted `since_s` after `behind` long
/// jobs of dedicated time `long_s`: it waits for what is left of them, then
/// runs alone for `short_s`.
pub fn fifo_response(behind: u32, long_s: f64, since_s: f64, short_s: f64) -> f64 {
    (behind as f64 * long_s - since_s).max(0.0) + short_s
}

fn short_stats(
    log: &Log,
    ded: &BTreeMap<String, Dedicated>,
    policies: &[String],
) -> Vec<ShortStats> {
    type Key = (usize, String, u32, String, String);
    let mut groups: BTreeMap<Key, Vec<&crate::records::Short>> = BTreeMap::new();
    for s in &log.shorts {
        let rank = policies
            .iter()
            .position(|p| *p == s.policy)
            .unwrap_or(usize::MAX);
        groups
            .entry((
                rank,
                s.workload.clone(),
                s.behind,
                s.long_workload.clone(),
                s.policy.clone(),
            ))
            .or_default()
            .push(s);
    }
    let dt = |w: &str| ded.get(w).and_then(|d| d.time_s);
    groups
        .into_iter()
        .map(|((_, workload, behind, long_workload, policy), recs)| {
            let ok: Vec<_> = recs.iter().filter(|s| s.ok()).collect();
            let resp: Vec<f64> = ok.iter().map(|s| s.response_s()).collect();
            let d_short = dt(&workload);
            let fifo: Vec<f64> = match (d_short, dt(&long_workload)) {
                (Some(ds), Some(dl)) => ok
                    .iter()
                    .map(|s| {
                        let since = (s.submit_ms - s.first_long_submit_ms) / 1000.0;
                        fifo_response(s.behind, dl, since, ds)
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let response_s = mean(&resp);
            let fifo_s = mean(&fifo);
            let reps: BTreeSet<u32> = recs.iter().map(|s| s.rep).collect();
            ShortStats {
                policy,
                workload,
                behind,
                long_workload,
                reps: reps.len(),
                records: recs.len(),
                ok: ok.len(),
                response_s,
                dedicated_s: d_short,
                fifo_s,
                vs_dedicated: ratio(response_s, d_short),
                vs_fifo: ratio(response_s, fifo_s),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(p: &str, w: &str, mpl: u32, rep: u32, idx: u32, t0: f64, t1: f64) -> String {
        format!(
            "job policy={p} workload={w} mpl={mpl} rep={rep} idx={idx} submit_ms={t0} end_ms={t1} rc=0 ranks=2 ranks_ok=2 elapsed_s={}",
            (t1 - t0) / 1000.0 - 0.5
        )
    }

    fn log(lines: &[String]) -> Log {
        let mut l = Log::default();
        l.add_str("t.log", &lines.join("\n")).unwrap();
        l
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    /// dedicated(ep) = mean(10 s, 12 s) = 11 s.
    fn baseline() -> Vec<String> {
        vec![
            job("dedicated", "ep", 1, 0, 0, 0.0, 10_000.0),
            job("dedicated", "ep", 1, 1, 0, 50_000.0, 62_000.0),
        ]
    }

    #[test]
    fn dedicated_is_the_mean_of_ok_jobs_and_a_failed_job_is_excluded() {
        let mut lines = baseline();
        lines.push(
            "job policy=dedicated workload=ep mpl=1 rep=2 idx=0 submit_ms=0 end_ms=1000 rc=1 ranks=2 ranks_ok=1".into(),
        );
        let a = analyse(&log(&lines), None);
        let d = &a.dedicated["ep"];
        assert!(close(d.time_s, 11.0));
        assert!(close(d.elapsed_s, 10.5));
        assert_eq!((d.jobs, d.jobs_ok), (3, 2));
        // The dedicated cell itself: 3 jobs, 2 ok; slowdown over the ok ones.
        let c = a.cell("dedicated", "ep", 1).unwrap();
        assert_eq!((c.jobs, c.jobs_ok, c.reps), (3, 2, 3));
        assert!(close(c.slowdown_mean, 1.0));
        assert!(close(c.slowdown_max, 12.0 / 11.0));
        assert!(close(c.elapsed_slowdown_mean, 1.0));
        // Rep 2 failed: its makespan does not count.
        assert_eq!(c.makespan_reps, 2);
        assert!(close(c.makespan_s, 11.0));
        assert!(close(c.makespan_ratio, 1.0));
    }

    #[test]
    fn a_dedicated_like_cell_has_slowdown_one() {
        // eevdf at mpl=1 taking exactly the dedicated times.
        let mut lines = baseline();
        lines.push(job("eevdf", "ep", 1, 0, 0, 0.0, 11_000.0));
        lines.push(job("eevdf", "ep", 1, 1, 0, 0.0, 11_000.0));
        let a = analyse(&log(&lines), None);
        let c = a.cell("eevdf", "ep", 1).unwrap();
        assert!(close(c.slowdown_mean, 1.0));
        assert!(close(c.slowdown_max, 1.0));
        assert!(close(c.makespan_ratio, 1.0));
        assert_eq!(c.makespan_cv, Some(0.0));
    }

    /// mpl=2, two reps, hand-computed:
    /// rep 0: jobs 0→20 s and 1→22 s (submitted at once): makespan 22 s
    /// rep 1: jobs 100→124 s and 100→126 s: makespan 26 s
    /// slowdowns 20/11, 22/11, 24/11, 26/11: mean 23/11 = 2.0909, max 26/11
    /// makespan mean 24, sample std sqrt(8) → cv 0.11785; ratio 24/22.
    /// switches 100 and 200: overheads (22-22)/100 s = 0 ms and
    /// (26-22)/200 s = 20 ms → mean 10 ms.
    #[test]
    fn slowdown_makespan_cv_and_switch_overhead_by_hand() {
        let mut lines = baseline();
        lines.push(job("gang-strict", "ep", 2, 0, 0, 0.0, 20_000.0));
        lines.push(job("gang-strict", "ep", 2, 0, 1, 0.0, 22_000.0));
        lines.push(job("gang-strict", "ep", 2, 1, 0, 100_000.0, 124_000.0));
        lines.push(job("gang-strict", "ep", 2, 1, 1, 100_000.0, 126_000.0));
        lines.push("cell policy=gang-strict workload=ep mpl=2 rep=0 switches=100".into());
        lines.push("cell policy=gang-strict workload=ep mpl=2 rep=1 switches=200".into());
        let a = analyse(&log(&lines), None);
        let c = a.cell("gang-strict", "ep", 2).unwrap();
        assert_eq!((c.reps, c.jobs, c.jobs_ok, c.makespan_reps), (2, 4, 4, 2));
        assert!(close(c.time_s_mean, 23.0));
        assert!(close(c.slowdown_mean, 23.0 / 11.0));
        assert!(close(c.slowdown_max, 26.0 / 11.0));
        // elapsed: (19.5+21.5+23.5+25.5)/4 = 22.5 vs 10.5.
        assert!(close(c.elapsed_slowdown_mean, 22.5 / 10.5));
        assert!(close(c.makespan_s, 24.0));
        assert!(close(c.makespan_cv, 8f64.sqrt() / 24.0));
        assert!(close(c.makespan_ratio, 24.0 / 22.0));
        assert!(close(c.switches_mean, 150.0));
        assert!(close(c.switch_overhead_ms, 10.0));
    }

    #[test]
    fn no_switches_no_overhead_and_one_rep_no_cv() {
        let mut lines = baseline();
        lines.push(job("eevdf", "ep", 2, 0, 0, 0.0, 20_000.0));
        lines.push(job("eevdf", "ep", 2, 0, 1, 0.0, 22_000.0));
        lines.push("cell policy=eevdf workload=ep mpl=2 rep=0 switches=0".into());
        lines.push(job("bpfland", "ep", 2, 0, 0, 0.0, 20_000.0));
        lines.push(job("bpfland", "ep", 2, 0, 1, 0.0, 22_000.0));
        lines.push("cell policy=bpfland workload=ep mpl=2 rep=0".into());
        let a = analyse(&log(&lines), None);
        for p in ["eevdf", "bpfland"] {
            let c = a.cell(p, "ep", 2).unwrap();
            assert_eq!(c.switch_overhead_ms, None, "{p}");
            assert_eq!(c.makespan_cv, None, "{p}");
            assert!(close(c.makespan_s, 22.0));
        }
        assert!(close(a.cell("eevdf", "ep", 2).unwrap().switches_mean, 0.0));
        assert_eq!(a.cell("bpfland", "ep", 2).unwrap().switches_mean, None);
    }

    #[test]
    fn a_failed_job_counts_as_not_ok_and_drops_its_reps_makespan() {
        let mut lines = baseline();
        lines.push(job("signal", "ep", 2, 0, 0, 0.0, 20_000.0));
        lines.push(
            "job policy=signal workload=ep mpl=2 rep=0 idx=1 submit_ms=0 end_ms=3000 rc=137 ranks=2 ranks_ok=0 elapsed_s=".into(),
        );
        let a = analyse(&log(&lines), None);
        let c = a.cell("signal", "ep", 2).unwrap();
        assert_eq!((c.jobs, c.jobs_ok), (2, 1));
        assert!(close(c.slowdown_mean, 20.0 / 11.0));
        assert_eq!(c.makespan_s, None);
        assert_eq!(c.makespan_ratio, None);
    }

    #[test]
    fn without_a_baseline_ratios_are_empty_not_zero() {
        let lines = vec![job("eevdf", "rt", 1, 0, 0, 0.0, 5_000.0)];
        let a = analyse(&log(&lines), None);
        let c = a.cell("eevdf", "rt", 1).unwrap();
        assert!(close(c.time_s_mean, 5.0));
        assert!(close(c.makespan_s, 5.0));
        assert_eq!((c.slowdown_mean, c.makespan_ratio), (None, None));
    }

    #[test]
    fn cv_is_sample_std_over_mean() {
        assert_eq!(cv(&[5.0]), None);
        assert!(close(cv(&[2.0, 4.0, 6.0]), 2.0 / 4.0));
    }

    #[test]
    fn fifo_response_waits_for_whats_left_of_the_long_jobs() {
        // 2 long jobs of 10 s, short submitted 5 s after them, 1 s alone:
        // waits 15 s, then runs 1 s.
        assert_eq!(fifo_response(2, 10.0, 5.0, 1.0), 16.0);
        // Submitted after they would all have finished: just its own time.
        assert_eq!(fifo_response(2, 10.0, 30.0, 1.0), 1.0);
    }

    #[test]
    fn short_job_against_fifo_and_dedicated() {
        let mut lines = baseline(); // dedicated(ep) = 11 s
        lines.push(job("dedicated", "rt", 1, 0, 0, 0.0, 2_000.0)); // 2 s
        for (rep, end) in [(0, 7_000.0), (1, 9_000.0)] {
            lines.push(format!(
                "short policy=gang-yield rep={rep} workload=rt behind=2 long_workload=ep first_long_submit_ms=0 submit_ms=2000 end_ms={end} rc=0 ranks=2 ranks_ok=2"
            ));
        }
        lines.push("short policy=gang-yield rep=2 workload=rt behind=2 long_workload=ep first_long_submit_ms=0 submit_ms=2000 end_ms=2500 rc=1 ranks=2 ranks_ok=0".into());
        let a = analyse(&log(&lines), None);
        let s = &a.shorts[0];
        assert_eq!((s.records, s.ok, s.reps), (3, 2, 3));
        assert!(close(s.response_s, 6.0)); // mean(5, 7)
        assert!(close(s.dedicated_s, 2.0));
        // FIFO: 2 × 11 - 2 = 20 s of waiting + 2 s.
        assert!(close(s.fifo_s, 22.0));
        assert!(close(s.vs_dedicated, 3.0));
        assert!(close(s.vs_fifo, 6.0 / 22.0));
    }

    #[test]
    fn policy_order_first_seen_unless_given() {
        let lines = vec![
            job("signal", "ep", 1, 0, 0, 0.0, 1000.0),
            job("eevdf", "ep", 1, 0, 0, 0.0, 1000.0),
            job("gang-yield", "ep", 1, 0, 0, 0.0, 1000.0),
        ];
        let l = log(&lines);
        assert_eq!(
            policy_order(&l, None),
            vec!["signal", "eevdf", "gang-yield"]
        );
        let given: Vec<String> = ["eevdf", "nothere", "signal"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            policy_order(&l, Some(&given)),
            vec!["eevdf", "signal", "gang-yield"]
        );
        let a = analyse(&l, Some(&given));
        let order: Vec<&str> = a.cells.iter().map(|c| c.policy.as_str()).collect();
        assert_eq!(order, vec!["eevdf", "signal", "gang-yield"]);
    }
}
