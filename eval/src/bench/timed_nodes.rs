//! The timed runs node by node (issue 12): DIR/timed_nodes.csv and a
//! section of table.txt. The timed table of `summary.rs` gives one figure
//! per (N, TQ), the median over repetitions of each run's p50; what a
//! researcher looks for next is per run and per node: the skew's tail,
//! which node is late and how often, and where a node's idle time comes
//! from (its park starting late, the drain, the lead).
//!
//! Design. A pure function of one boot's records. A timed run's window is
//! the lines `log_from ..= log_to` of gangd's switch log its gang record
//! names (the last record of a (rep, method, tq) key counts, as in
//! `runs.rs`); of those, the lines of `"switching":"timed"`. Per run: the
//! switches, the p50 and p99 of `skew_us` (spread of the nodes' instants)
//! and the share of switches in which some node was late. Per node of a
//! run, over the switches it reported: `parked_us` (park → switch, the
//! CPU time the switch leaves idle), `park_late_us` (how late the park
//! started against boundary − lead), the drain's `drain_us` (park →
//! drained), `lead_us`, the share of its switches late (outcome `late` or
//! `timed_out`) and how many times it sent no report at all.
//!
//! The switch log's timed lines nest a map of nodes, so they are read as
//! JSON (serde_json, as gangd writes them), not with the flat-record
//! `field` of the other steps. A line that is not JSON, or a window
//! outside the log, is skipped, never a panic: the records come from a
//! guest.
//!
//! Percentiles are nearest-rank (the value at rank ⌈p·n⌉ of the sorted
//! list), so every figure is one that was measured.

use super::awk::{field, int};
use super::Boot;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

pub const TIMED_NODES_HEADER: &str = "nodes,rep,method,tq_ms,node,switches,idle_p50_us,park_late_p50_us,park_late_p90_us,drain_p50_us,drain_p90_us,lead_p50_us,late_pct,no_report";

/// The nearest-rank p-quantile (0 < p ≤ 1) of `v`, sorted here; None if empty.
fn quantile(v: &mut [u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = (p * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

/// One node's switches in a run.
#[derive(Default)]
struct NodeFigures {
    parked: Vec<u64>,
    park_late: Vec<u64>,
    drain: Vec<u64>,
    lead: Vec<u64>,
    late: usize,
    no_report: usize,
}

/// One timed run: its switches, their skews, how many had a late node,
/// and per node id its figures.
#[derive(Default)]
struct RunFigures {
    switches: usize,
    skew: Vec<u64>,
    late: usize,
    nodes: BTreeMap<u64, NodeFigures>,
}

fn u(v: &Value) -> Option<u64> {
    v.as_u64()
}

impl RunFigures {
    fn add(&mut self, line: &Value) {
        self.switches += 1;
        if let Some(s) = u(&line["skew_us"]) {
            self.skew.push(s);
        }
        let mut any_late = false;
        if let Some(nodes) = line["nodes"].as_object() {
            for (id, n) in nodes {
                let Ok(id) = id.parse::<u64>() else { continue };
                let f = self.nodes.entry(id).or_default();
                f.parked.extend(u(&n["parked_us"]));
                f.park_late.extend(u(&n["park_late_us"]));
                f.drain.extend(u(&n["drain"]["drain_us"]));
                f.lead.extend(u(&n["lead_us"]));
                if matches!(n["outcome"].as_str(), Some("late" | "timed_out")) {
                    f.late += 1;
                    any_late = true;
                }
            }
        }
        if let Some(failed) = line["failed"].as_array() {
            for id in failed.iter().filter_map(|f| u(&f["node"])) {
                self.nodes.entry(id).or_default().no_report += 1;
            }
        }
        self.late += usize::from(any_late);
    }
}

/// A figure in ms with one decimal, `-` if there is none.
fn ms(v: Option<u64>) -> String {
    v.map_or("-".into(), |x| format!("{:.1}", x as f64 / 1000.0))
}

fn pct(part: usize, whole: usize) -> u64 {
    if whole == 0 {
        0
    } else {
        (100.0 * part as f64 / whole as f64).round() as u64
    }
}

/// The timed runs of one boot: (CSV rows without header, text section).
pub fn timed_nodes(boot: &Boot) -> (Vec<String>, String) {
    let key = |l: &str| {
        (
            int(&field(l, "tq")),
            field(l, "method"),
            int(&field(l, "rep")),
        )
    };
    let mut gang: BTreeMap<(i64, String, i64), &String> = BTreeMap::new();
    for l in boot.gang.as_deref().unwrap_or_default() {
        if field(l, "method").starts_with("timed") {
            gang.insert(key(l), l);
        }
    }
    let (mut rows, mut text) = (Vec::new(), String::new());
    let n = boot.n;
    for ((tq, method, rep), l) in &gang {
        let window = |name: &str| field(l, name).parse::<usize>().ok();
        let (Some(from), Some(to)) = (window("log_from"), window("log_to")) else {
            continue;
        };
        let mut run = RunFigures::default();
        for line in boot
            .switch_log
            .iter()
            .take(to)
            .skip(from.max(1) - 1)
            .filter_map(|s| serde_json::from_str::<Value>(s).ok())
            .filter(|v| v["switching"] == "timed")
        {
            run.add(&line);
        }
        let _ = writeln!(
            text,
            "N={n} {method:<21} TQ {tq:>4} rep {rep}: {} switches, skew p50/p99 {}/{} ms, a node late in {} %",
            run.switches,
            ms(quantile(&mut run.skew, 0.5)),
            ms(quantile(&mut run.skew, 0.99)),
            pct(run.late, run.switches)
        );
        for (id, f) in &mut run.nodes {
            let reported = f.parked.len().max(f.lead.len());
            let q = |v: &mut Vec<u64>, p| quantile(v, p);
            let (idle, pl50, pl90) = (
                q(&mut f.parked, 0.5),
                q(&mut f.park_late, 0.5),
                q(&mut f.park_late, 0.9),
            );
            let (d50, d90, lead) = (
                q(&mut f.drain, 0.5),
                q(&mut f.drain, 0.9),
                q(&mut f.lead, 0.5),
            );
            let late = pct(f.late, reported);
            let _ = writeln!(
                text,
                "    node {id}: idle p50 {} ms, park late p50/p90 {}/{} ms, drain p50/p90 {}/{} ms, lead p50 {} ms, late {late} %, no report {}",
                ms(idle), ms(pl50), ms(pl90), ms(d50), ms(d90), ms(lead), f.no_report
            );
            let c = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
            rows.push(format!(
                "{n},{rep},{method},{tq},{id},{reported},{},{},{},{},{},{},{late},{}",
                c(idle),
                c(pl50),
                c(pl90),
                c(d50),
                c(d90),
                c(lead),
                f.no_report
            ));
        }
    }
    (rows, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::strings;

    /// A timed switch-log line: (node, parked, park_late, drain, lead, outcome).
    fn line(skew: u64, nodes: &[(u64, u64, u64, u64, u64, &str)], failed: &[u64]) -> String {
        let nodes: Vec<String> = nodes
            .iter()
            .map(|(id, parked, pl, d, lead, o)| {
                format!(
                    r#""{id}":{{"at_ns":1,"late_us":0,"outcome":"{o}","drain":{{"drained_bytes":0,"drain_us":{d},"timed_out":false,"answer_us":0}},"parked_us":{parked},"park_late_us":{pl},"lead_us":{lead}}}"#
                )
            })
            .collect();
        let failed: Vec<String> = failed
            .iter()
            .map(|id| format!(r#"{{"node":{id},"why":"no report"}}"#))
            .collect();
        format!(
            r#"{{"switching":"timed","gen":7,"to_slot":1,"skew_us":{skew},"late_us":0,"drain_timeouts":0,"nodes":{{{}}},"failed":[{}]}}"#,
            nodes.join(","),
            failed.join(",")
        )
    }

    fn boot(gang: &[&str], log: Vec<String>) -> Boot {
        Boot {
            n: 2,
            gang: Some(strings(gang)),
            switch_log: log,
            ..Boot::default()
        }
    }

    #[test]
    fn nearest_rank_quantiles_are_measured_values() {
        let mut v = vec![5, 1, 4, 2, 3];
        assert_eq!(quantile(&mut v, 0.5), Some(3));
        assert_eq!(quantile(&mut v, 0.99), Some(5));
        assert_eq!(quantile(&mut v, 0.2), Some(1));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn a_run_reads_only_its_window_and_names_each_node() {
        let mut log = vec![r#"{"switching":"commanded","gen":1}"#.to_string()];
        // Lines 2-4: the run's window; line 5 belongs to the next run.
        log.push(line(
            1000,
            &[
                (1, 3000, 500, 1500, 4000, "on_time"),
                (2, 5000, 2000, 1700, 4000, "late"),
            ],
            &[],
        ));
        log.push(line(
            3000,
            &[
                (1, 3200, 600, 1600, 4000, "on_time"),
                (2, 6000, 2500, 1800, 4000, "on_time"),
            ],
            &[],
        ));
        log.push(line(9000, &[(1, 3400, 700, 1400, 4000, "late")], &[2]));
        log.push(line(
            99_000,
            &[(1, 99_000, 99_000, 99_000, 99_000, "late")],
            &[],
        ));
        let gang = [r#"{"rep":1,"method":"timed-strict","tq":50,"log_from":2,"log_to":4,"ok":1}"#];
        let (rows, text) = timed_nodes(&boot(&gang, log));
        assert_eq!(
            rows,
            [
                "2,1,timed-strict,50,1,3,3200,600,700,1500,1600,4000,33,0",
                "2,1,timed-strict,50,2,2,5000,2000,2500,1700,1800,4000,50,1",
            ]
        );
        assert!(
            text.starts_with("N=2 timed-strict          TQ   50 rep 1: 3 switches, skew p50/p99 3.0/9.0 ms, a node late in 67 %\n"),
            "{text}"
        );
        assert!(
            text.contains("    node 2: idle p50 5.0 ms, park late p50/p90 2.0/2.5 ms"),
            "{text}"
        );
        assert!(text.contains("late 50 %, no report 1"), "{text}");
    }

    #[test]
    fn the_last_record_of_a_run_counts_and_commanded_runs_are_left_out() {
        let log = vec![
            line(1000, &[(1, 3000, 500, 1500, 4000, "on_time")], &[]),
            line(2000, &[(1, 4000, 500, 1500, 4000, "on_time")], &[]),
        ];
        let gang = [
            r#"{"rep":1,"method":"timed-off","tq":100,"log_from":1,"log_to":1,"ok":0}"#,
            r#"{"rep":1,"method":"timed-off","tq":100,"log_from":2,"log_to":2,"ok":1}"#,
            r#"{"rep":1,"method":"strict","tq":100,"log_from":1,"log_to":2,"ok":1}"#,
        ];
        let (rows, _) = timed_nodes(&boot(&gang, log));
        assert_eq!(
            rows,
            ["2,1,timed-off,100,1,1,4000,500,500,1500,1500,4000,0,0"]
        );
    }

    #[test]
    fn broken_lines_and_windows_outside_the_log_are_skipped() {
        let log = vec![
            "not json".to_string(),
            line(1000, &[], &[]),
            "{\"switching\":\"timed\"".into(),
        ];
        let gang = [
            r#"{"rep":1,"method":"timed-off","tq":50,"log_from":1,"log_to":3,"ok":1}"#,
            r#"{"rep":2,"method":"timed-off","tq":50,"log_from":40,"log_to":90,"ok":1}"#,
            r#"{"rep":3,"method":"timed-off","tq":50,"log_from":"x","log_to":2,"ok":1}"#,
        ];
        let (rows, text) = timed_nodes(&boot(&gang, log));
        assert!(rows.is_empty(), "{rows:?}");
        assert!(
            text.contains("rep 1: 1 switches, skew p50/p99 1.0/1.0 ms, a node late in 0 %"),
            "{text}"
        );
        assert!(
            text.contains("rep 2: 0 switches, skew p50/p99 -/- ms"),
            "{text}"
        );
        assert!(!text.contains("rep 3"), "{text}");
    }
}
