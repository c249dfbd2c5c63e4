//! results.csv, short.csv and summary.txt, and writing the report directory
//! (the figures come from [`crate::figures`]).

use crate::metrics::{Analysis, CellStats};
use crate::records::Log;
use crate::targets::{Outcome, Status};
use crate::DEDICATED;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub const RESULTS_HEADER: &str = "policy,workload,mpl,reps,jobs,jobs_ok,time_s_mean,slowdown_mean,slowdown_max,elapsed_slowdown_mean,makespan_s,makespan_cv,makespan_ratio,switches_mean,switch_overhead_ms";

pub const SHORT_HEADER: &str = "policy,workload,behind,long_workload,reps,records,ok,response_s,dedicated_s,fifo_s,response_vs_dedicated,response_vs_fifo";

/// A number with `prec` decimals, or "" when missing.
pub fn num(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:.prec$}"),
        None => String::new(),
    }
}

/// A CSV field (quoted when it holds a comma, quote or line break).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn results_csv(a: &Analysis) -> String {
    let mut s = String::from(RESULTS_HEADER);
    s.push('\n');
    for c in &a.cells {
        let row = [
            field(&c.policy),
            field(&c.workload),
            c.mpl.to_string(),
            c.reps.to_string(),
            c.jobs.to_string(),
            c.jobs_ok.to_string(),
            num(c.time_s_mean, 3),
            num(c.slowdown_mean, 4),
            num(c.slowdown_max, 4),
            num(c.elapsed_slowdown_mean, 4),
            num(c.makespan_s, 3),
            num(c.makespan_cv, 4),
            num(c.makespan_ratio, 4),
            num(c.switches_mean, 1),
            num(c.switch_overhead_ms, 3),
        ];
        s += &row.join(",");
        s.push('\n');
    }
    s
}

pub fn short_csv(a: &Analysis) -> String {
    let mut s = String::from(SHORT_HEADER);
    s.push('\n');
    for x in &a.shorts {
        let row = [
            field(&x.policy),
            field(&x.workload),
            x.behind.to_string(),
            field(&x.long_workload),
            x.reps.to_string(),
            x.records.to_string(),
            x.ok.to_string(),
            num(x.response_s, 3),
            num(x.dedicated_s, 3),
            num(x.fifo_s, 3),
            num(x.vs_dedicated, 4),
            num(x.vs_fifo, 4),
        ];
        s += &row.join(",");
        s.push('\n');
    }
    s
}

/// A left-aligned first column, the others right-aligned.
fn table(rows: &[Vec<String>]) -> String {
    let ncol = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut width = vec![0; ncol];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            let pad = width[i] - c.chars().count();
            if i == 0 {
                line += c;
                line += &" ".repeat(pad);
            } else {
                line += "  ";
                line += &" ".repeat(pad);
                line += c;
            }
        }
        s += line.trim_end();
        s.push('\n');
    }
    s
}

/// One table per workload: policies as rows, MPLs as columns, `cellf` gives
/// the text of a cell (None: the policy has no such cell, shown "–").
fn per_workload_tables(
    a: &Analysis,
    out: &mut String,
    policies: &[String],
    include: impl Fn(&str) -> bool,
    cellf: impl Fn(&CellStats) -> String,
) {
    for w in &a.workloads {
        let mut mpls: Vec<u32> = a
            .cells
            .iter()
            .filter(|c| &c.workload == w && policies.contains(&c.policy) && include(&c.policy))
            .map(|c| c.mpl)
            .collect();
        mpls.sort_unstable();
        mpls.dedup();
        let pols: Vec<&String> = policies.iter().filter(|p| include(p)).collect();
        if mpls.is_empty() || pols.is_empty() {
            continue;
        }
        let mut rows = vec![std::iter::once(w.clone())
            .chain(mpls.iter().map(|m| format!("mpl={m}")))
            .collect::<Vec<_>>()];
        for p in pols {
            let mut r = vec![p.clone()];
            let mut any = false;
            for m in &mpls {
                match a.cell(p, w, *m) {
                    Some(c) => {
                        any = true;
                        r.push(cellf(c));
                    }
                    None => r.push("–".into()),
                }
            }
            if any {
                rows.push(r);
            }
        }
        if rows.len() > 1 {
            *out += &table(&rows);
            out.push('\n');
        }
    }
}

/// Whether a cell lacks jobs: failed ones, fewer than MPL per rep, or none
/// at all (only a `cell` record).
pub fn incomplete(c: &CellStats) -> bool {
    c.jobs == 0 || c.jobs_ok < c.jobs || c.jobs < c.mpl as usize * c.reps
}

/// " !" on an incomplete cell (see the footnote).
fn flag(c: &CellStats) -> &'static str {
    if incomplete(c) {
        " !"
    } else {
        ""
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:.prec$}"),
        None => "–".into(),
    }
}

/// The summary: meta header, slowdown / makespan / switch-overhead tables,
/// the short-job table and the targets.
pub fn summary(log: &Log, a: &Analysis, targets: &[Outcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "gang-eval report: {} file(s): {}",
        log.files.len(),
        log.files.join(" ")
    );
    let meta = log.merged_meta();
    if !meta.is_empty() {
        let mut same = Vec::new();
        let mut differ = Vec::new();
        for (k, vals) in &meta {
            if vals.len() == 1 {
                same.push(format!("{k}={}", vals[0].0));
            } else {
                let alts: Vec<String> = vals
                    .iter()
                    .map(|(v, files)| format!("{v} ({})", files.join(" ")))
                    .collect();
                differ.push(format!("{k}: {}", alts.join(" | ")));
            }
        }
        let _ = writeln!(s, "run: {}", same.join(" "));
        for d in differ {
            let _ = writeln!(s, "run, differs between files: {d}");
        }
    }
    let failed: usize = a.cells.iter().map(|c| c.jobs - c.jobs_ok).sum();
    let jobs: usize = a.cells.iter().map(|c| c.jobs).sum();
    let _ = writeln!(
        s,
        "{jobs} jobs in {} cells, {failed} failed; {} short-job records",
        a.cells.len(),
        log.shorts.len()
    );
    s.push('\n');

    s += "Dedicated (baseline: each workload alone on the cluster, mean of its ok jobs)\n";
    let mut rows = vec![vec![
        "workload".to_string(),
        "time s".into(),
        "elapsed s".into(),
        "jobs ok".into(),
    ]];
    for w in &a.workloads {
        match a.dedicated.get(w) {
            Some(d) => rows.push(vec![
                w.clone(),
                opt(d.time_s, 3),
                opt(d.elapsed_s, 3),
                format!("{}/{}", d.jobs_ok, d.jobs),
            ]),
            None => rows.push(vec![
                w.clone(),
                "–".into(),
                "–".into(),
                "no dedicated job".into(),
            ]),
        }
    }
    s += &table(&rows);
    s.push('\n');

    let pols = a.policies.clone();
    s += "Slowdown: job response time / dedicated time, mean (max) over every ok job of the cell\n";
    s += "(1.00 = as fast as alone on the cluster; ! = the cell has failed or missing jobs, see below)\n\n";
    per_workload_tables(
        a,
        &mut s,
        &pols,
        |_| true,
        |c| {
            format!(
                "{} ({}){}",
                opt(c.slowdown_mean, 2),
                opt(c.slowdown_max, 2),
                flag(c)
            )
        },
    );

    s += "Slowdown from the workloads' own elapsed_s: mean elapsed / mean dedicated elapsed\n\n";
    per_workload_tables(
        a,
        &mut s,
        &pols,
        |_| true,
        |c| format!("{}{}", opt(c.elapsed_slowdown_mean, 2), flag(c)),
    );

    let bad: Vec<&CellStats> = a.cells.iter().filter(|c| incomplete(c)).collect();
    if !bad.is_empty() {
        s += "Cells with failed or missing jobs: times are over the ok jobs, makespans over the reps\n";
        s +=
            "whose MPL jobs all succeeded (gang-eval check lists every missing or failed record)\n";
        for c in bad {
            if c.jobs == 0 {
                let _ = writeln!(
                    s,
                    "  {} {} mpl={}: no job record, only a cell record",
                    c.policy, c.workload, c.mpl
                );
                continue;
            }
            let _ = writeln!(
                s,
                "  {} {} mpl={}: {} ok of {} recorded, {} expected ({} reps × {}); makespan from {} rep(s)",
                c.policy,
                c.workload,
                c.mpl,
                c.jobs_ok,
                c.jobs,
                c.mpl as usize * c.reps,
                c.reps,
                c.mpl,
                c.makespan_reps
            );
        }
        s.push('\n');
    }

    s += "Makespan: ratio to MPL × dedicated time (1.00 = as good as one after another; < 1: sharing gains),\n";
    s += "makespan in s and its CV across reps (reps whose jobs all succeeded)\n\n";
    per_workload_tables(
        a,
        &mut s,
        &pols,
        |p| p != DEDICATED,
        |c| {
            let cv = match c.makespan_cv {
                Some(v) => format!(" cv {:.1}%", v * 100.0),
                None => String::new(),
            };
            match c.makespan_s {
                Some(m) => format!("{} ({m:.1} s{cv}){}", opt(c.makespan_ratio, 2), flag(c)),
                None => format!("–{}", flag(c)),
            }
        },
    );

    let switching: Vec<String> = pols
        .iter()
        .filter(|p| {
            a.cells
                .iter()
                .any(|c| &c.policy == *p && c.switches_mean.is_some_and(|x| x > 0.0))
        })
        .cloned()
        .collect();
    s += "Per-switch overhead, ms: (makespan - MPL × dedicated) / switches, mean over reps (switches per rep)\n";
    s += "A throughput estimate: meaningful for compute-bound workloads (ep); for communicating ones it\n";
    s += "also counts the slowdown of sharing itself, and run-to-run noise can make it negative.\n\n";
    if switching.is_empty() {
        s += "(no policy made slot switches)\n\n";
    } else {
        per_workload_tables(
            a,
            &mut s,
            &switching,
            |_| true,
            |c| {
                format!(
                    "{} ({})",
                    opt(c.switch_overhead_ms, 1),
                    opt(c.switches_mean, 0)
                )
            },
        );
    }

    s += "Short job behind long jobs: response time vs FIFO queue and vs alone\n";
    s += "(FIFO = max(0, L × dedicated(long) - (submit - first long submit)) + dedicated(short))\n\n";
    if a.shorts.is_empty() {
        s += "(no short-job records)\n\n";
    } else {
        let mut rows = vec![vec![
            "policy".to_string(),
            "short".into(),
            "behind".into(),
            "ok/recs".into(),
            "response s".into(),
            "FIFO s".into(),
            "alone s".into(),
            "/FIFO".into(),
            "/alone".into(),
        ]];
        for x in &a.shorts {
            rows.push(vec![
                x.policy.clone(),
                x.workload.clone(),
                format!("{} × {}", x.behind, x.long_workload),
                format!("{}/{}", x.ok, x.records),
                opt(x.response_s, 2),
                opt(x.fifo_s, 2),
                opt(x.dedicated_s, 2),
                opt(x.vs_fifo, 2),
                opt(x.vs_dedicated, 2),
            ]);
        }
        s += &table(&rows);
        s.push('\n');
    }

    s += "Targets\n";
    s += "(slowdown = job time / dedicated time is ≈ MPL even under a perfect gang scheduler when the jobs\n";
    s += " share every CPU; --target-metric makespan-ratio judges the same targets normalised by the share)\n";
    let (mut met, mut not, mut na) = (0, 0, 0);
    for t in targets {
        match t.status {
            Status::Met => met += 1,
            Status::NotMet => not += 1,
            Status::NotApplicable(_) => na += 1,
        }
        let _ = writeln!(s, "  {t}");
    }
    let _ = writeln!(s, "  {met} met, {not} NOT met, {na} n/a");
    s
}

/// What `report` wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub summary: String,
}

/// Writes results.csv, short.csv, summary.txt and the figures into `out`
/// (created if needed).
pub fn write_report(
    log: &Log,
    a: &Analysis,
    targets: &[Outcome],
    out: &Path,
) -> std::io::Result<Written> {
    std::fs::create_dir_all(out)?;
    let summary = summary(log, a, targets);
    let mut files = Vec::new();
    let mut put = |name: &str, text: &str| -> std::io::Result<()> {
        let p = out.join(name);
        std::fs::write(&p, text)?;
        files.push(p);
        Ok(())
    };
    put("results.csv", &results_csv(a))?;
    put("short.csv", &short_csv(a))?;
    put("summary.txt", &summary)?;
    for (name, svg) in crate::figures::figures(a) {
        put(name, &svg)?;
    }
    Ok(Written { files, summary })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::analyse;
    use crate::targets::{evaluate, TargetConfig};

    fn sample() -> (Log, Analysis) {
        let mut l = Log::default();
        l.add_str(
            "a.log",
            "meta nodes=2 kernel=6.12\n\
             job policy=dedicated workload=ep mpl=1 rep=0 idx=0 submit_ms=0 end_ms=10000 rc=0 ranks=2 ranks_ok=2 elapsed_s=9.5\n\
             job policy=eevdf workload=ep mpl=2 rep=0 idx=0 submit_ms=0 end_ms=20000 rc=0 ranks=2 ranks_ok=2 elapsed_s=19\n\
             job policy=eevdf workload=ep mpl=2 rep=0 idx=1 submit_ms=0 end_ms=21000 rc=0 ranks=2 ranks_ok=2 elapsed_s=20\n\
             cell policy=eevdf workload=ep mpl=2 rep=0 switches=0\n\
             job policy=gang-strict,x workload=ep mpl=2 rep=0 idx=0 submit_ms=0 end_ms=20000 rc=0 ranks=2 ranks_ok=2\n\
             job policy=gang-strict,x workload=ep mpl=2 rep=0 idx=1 submit_ms=0 end_ms=4000 rc=1 ranks=2 ranks_ok=1\n\
             cell policy=gang-strict,x workload=ep mpl=2 rep=0 switches=40\n",
        )
        .unwrap();
        l.add_str("b.log", "meta nodes=2 kernel=6.13\n").unwrap();
        let a = analyse(&l, None);
        (l, a)
    }

    #[test]
    fn results_csv_has_the_header_and_one_row_per_cell_with_gaps_empty() {
        let (_, a) = sample();
        let csv = results_csv(&a);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], RESULTS_HEADER);
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[1],
            "dedicated,ep,1,1,1,1,10.000,1.0000,1.0000,1.0000,10.000,,1.0000,,"
        );
        assert_eq!(
            lines[2],
            "eevdf,ep,2,1,2,2,20.500,2.0500,2.1000,2.0526,21.000,,1.0500,0.0,"
        );
        // A comma in a name is quoted; a failed job: no makespan, no overhead.
        assert_eq!(
            lines[3],
            "\"gang-strict,x\",ep,2,1,2,1,20.000,2.0000,2.0000,,,,,40.0,"
        );
        for l in &lines {
            assert_eq!(l.replace("\"gang-strict,x\"", "g").split(',').count(), 15);
        }
    }

    #[test]
    fn summary_has_meta_tables_and_targets() {
        let (l, a) = sample();
        let t = evaluate(&a, &TargetConfig::default());
        let s = summary(&l, &a, &t);
        assert!(s.contains("run: nodes=2"), "{s}");
        assert!(
            s.contains("run, differs between files: kernel: 6.12 (a.log) | 6.13 (b.log)"),
            "{s}"
        );
        assert!(
            s.contains("\neevdf                    –    2.05 (2.10)\n"),
            "{s}"
        );
        assert!(s.contains("\neevdf          1.05 (21.0 s)\n"), "{s}");
        assert!(s.contains("2.00 (2.00) !"), "{s}");
        assert!(
            s.contains("  gang-strict,x ep mpl=2: 1 ok of 2 recorded, 2 expected (1 reps × 2); makespan from 0 rep(s)\n"),
            "{s}"
        );
        assert!(s.contains("meaningful for compute-bound workloads"));
        assert!(s.contains("(no short-job records)"));
        assert!(s.contains("Targets\n"));
        assert!(s.contains("n/a: no cell of workload allreduce"), "{s}");
    }

    #[test]
    fn a_cell_record_without_jobs_is_an_incomplete_row_with_gaps() {
        let mut l = Log::default();
        l.add_str(
            "c",
            "cell policy=signal workload=ep mpl=2 rep=0 switches=7\n",
        )
        .unwrap();
        let a = analyse(&l, None);
        assert_eq!(
            results_csv(&a).lines().nth(1).unwrap(),
            "signal,ep,2,0,0,0,,,,,,,,7.0,"
        );
        assert!(incomplete(&a.cells[0]));
        let s = summary(&l, &a, &[]);
        assert!(
            s.contains("  signal ep mpl=2: no job record, only a cell record\n"),
            "{s}"
        );
    }

    #[test]
    fn short_csv_rows() {
        let mut l = Log::default();
        l.add_str(
            "s",
            "job policy=dedicated workload=rt mpl=1 rep=0 idx=0 submit_ms=0 end_ms=1000 rc=0 ranks=2 ranks_ok=2\n\
             short policy=eevdf rep=0 workload=rt behind=2 long_workload=ep first_long_submit_ms=0 submit_ms=500 end_ms=3500 rc=0 ranks=2 ranks_ok=2\n",
        )
        .unwrap();
        let a = analyse(&l, None);
        let csv = short_csv(&a);
        assert_eq!(
            csv.lines().nth(1).unwrap(),
            "eevdf,rt,2,ep,1,1,1,3.000,1.000,,3.0000,"
        );
    }
}
