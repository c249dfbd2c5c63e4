//! Step 1 of the benchmark's tables: runs.csv, one row per run of one boot
//! (see `mod.rs`), and the idle estimate of its strict runs from gangd's
//! switch log.
//!
//! Known faults: a run's key is (rep, method, tq); a later record of the
//! same key replaces an earlier one, as in the awk.

use super::awk::{awk_fmt, field, int, median, num};
use super::Boot;
use std::collections::{BTreeMap, HashMap};

/// Per strict run of `gang` (rep, tq) → the CPU time one switch leaves idle
/// on a node, in µs: in the run's window of the switch log (lines log_from
/// ..= log_to), per switch the mean over its nodes of drain_us + running_at
/// − frozen_at; the median over the switches, truncated.
pub fn idle_estimates(gang: &[String], switch_log: &[String]) -> HashMap<(String, String), String> {
    let mut out = HashMap::new();
    for line in gang {
        if field(line, "method") != "strict" || !line.contains("\"method\":\"strict\"") {
            continue;
        }
        let (rep, tq) = (field(line, "rep"), field(line, "tq"));
        let (from, to) = (field(line, "log_from"), field(line, "log_to"));
        if [&rep, &tq, &from, &to]
            .iter()
            .any(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let (from, to) = (int(&from).max(1) as usize, int(&to) as usize);
        if to < from {
            continue;
        }
        let means: Vec<String> = switch_log
            .iter()
            .take(to)
            .skip(from - 1)
            .filter_map(|l| switch_idle_mean(l))
            // awk printed each mean with %.6g before sorting them.
            .map(awk_fmt)
            .collect();
        if !means.is_empty() {
            out.insert((rep, tq), (median(&means).value as i64).to_string());
        }
    }
    out
}

/// One switch record: the mean over its nodes of drain_us + running_at_us −
/// frozen_at_us (each node's `"drain_us":D,…},"frozen_at_us":F,"running_at_us":R`).
fn switch_idle_mean(line: &str) -> Option<f64> {
    let (mut total, mut n) = (0.0, 0);
    let mut s = line;
    while let Some(at) = s.find("\"drain_us\":") {
        let rest = &s[at + "\"drain_us\":".len()..];
        let d_end = rest.bytes().take_while(u8::is_ascii_digit).count();
        let found = (|| {
            if d_end == 0 || !rest[d_end..].starts_with(',') {
                return None;
            }
            let close = rest.find('}')?;
            let after = rest[close + 1..].strip_prefix(",\"frozen_at_us\":")?;
            let f_end = after.bytes().take_while(u8::is_ascii_digit).count();
            let after2 = after[f_end..].strip_prefix(",\"running_at_us\":")?;
            let r_end = after2.bytes().take_while(u8::is_ascii_digit).count();
            if f_end == 0 || r_end == 0 {
                return None;
            }
            let used = rest.len() - after2.len() + r_end;
            Some((
                num(&rest[..d_end]) + num(&after2[..r_end]) - num(&after[..f_end]),
                used,
            ))
        })();
        match found {
            Some((t, used)) => {
                total += t;
                n += 1;
                s = &rest[used..];
            }
            None => s = rest,
        }
    }
    (n > 0).then(|| total / n as f64)
}

/// Sums of one (rep, method, tq) of the signal runs over the nodes.
#[derive(Default)]
struct SigRun {
    units: f64,
    nodes: usize,
    d: String,
    switches: f64,
    spread: f64,
}

/// A run against its repetition's baseline: ok, its work rate, the
/// baseline's, r = their ratio and the overhead per switch TQ × (1 − r) in
/// µs; all 0 for a run not ok.
#[derive(Default)]
struct Against {
    ok: bool,
    rate: f64,
    base: f64,
    r: f64,
    over: f64,
}

/// `units` done in `d` s at slot `tq` (ms) against the `base` rate: ok if
/// the run was and there is a baseline.
fn against(ok: bool, units: f64, d: f64, base: Option<&f64>, tq: &str) -> Against {
    match base {
        Some(&base) if ok => {
            let rate = units / d;
            let r = rate / base;
            let over = num(tq) * (1.0 - r) * 1000.0;
            Against {
                ok: true,
                rate,
                base,
                r,
                over,
            }
        }
        _ => Against::default(),
    }
}

/// The rows of runs.csv for one boot, sorted (N, method, TQ, rep).
pub fn runs(boot: &Boot) -> Vec<String> {
    let n = boot.n;
    let key = |l: &str| (field(l, "rep"), field(l, "method"), field(l, "tq"));
    let mut sig: BTreeMap<(String, String, String), SigRun> = BTreeMap::new();
    for l in &boot.sig {
        let s = sig.entry(key(l)).or_default();
        s.units += num(&field(l, "units"));
        s.nodes += 1;
        s.d = field(l, "d");
        s.switches += num(&field(l, "switches"));
        s.spread = s.spread.max(num(&field(l, "spread_ms")));
    }
    let gang_lines = boot.gang.as_deref().unwrap_or_default();
    let mut gang: BTreeMap<(String, String, String), &String> = BTreeMap::new();
    for l in gang_lines {
        gang.insert(key(l), l);
    }
    let idle = idle_estimates(gang_lines, &boot.switch_log);

    let mut alone: BTreeMap<String, f64> = BTreeMap::new();
    for ((rep, m, _), s) in &sig {
        if m == "alone" && s.nodes == n as usize && num(&s.d) > 0.0 && s.units > 0.0 {
            alone.insert(rep.clone(), s.units / num(&s.d));
        }
    }
    let mut scx: BTreeMap<String, f64> = BTreeMap::new();
    for ((rep, m, _), l) in &gang {
        let (u, d) = (num(&field(l, "units")), num(&field(l, "d")));
        if m == "scx_alone" && num(&field(l, "ok")) == 1.0 && d > 0.0 && u > 0.0 {
            scx.insert(rep.clone(), u / d);
        }
    }

    let mut rows = Vec::new();
    for ((rep, m, tq), s) in &sig {
        if m == "alone" {
            continue;
        }
        let d = num(&s.d);
        let ok = s.nodes == n as usize && d > 0.0;
        let a = against(ok, s.units, d, alone.get(rep), tq);
        rows.push(format!(
            "{n},{},sigstop,{},{},{},{:.2},{:.2},{:.5},{:.1},{},,,,,,{},{},,",
            int(rep),
            int(tq),
            s.d,
            s.units as i64,
            a.rate,
            a.base,
            a.r,
            a.over,
            (s.switches / s.nodes.max(1) as f64) as i64,
            s.spread as i64,
            a.ok as u8
        ));
    }
    for ((rep, m, tq), l) in &gang {
        if m == "scx_alone" {
            continue;
        }
        let f = |name: &str| field(l, name);
        let (u, d) = (num(&f("units")), num(&f("d")));
        let ok = num(&f("ok")) == 1.0 && d > 0.0;
        let a = against(ok, u, d, scx.get(rep), tq);
        let strict = m == "strict";
        // The idle time per switch on a node: commanded strict's Frozen ->
        // Running at gangd, timed strict's parked_us as the nodes report it.
        let frozen = if strict || m.starts_with("timed-strict") {
            f("idle_p50_us")
        } else {
            String::new()
        };
        let late = if m.starts_with("timed") {
            f("late_p50_us")
        } else {
            String::new()
        };
        let est = match idle.get(&(rep.clone(), tq.clone())) {
            Some(e) if strict => e.clone(),
            _ => String::new(),
        };
        rows.push(format!(
            "{n},{},{m},{},{},{},{:.2},{:.2},{:.5},{:.1},{},{},{},{},{frozen},{est},{},{},{},{late}",
            int(rep),
            int(tq),
            f("d"),
            u as i64,
            a.rate,
            a.base,
            a.r,
            a.over,
            int(&f("switches")),
            f("total_p50_us"),
            f("skew_p50_us"),
            f("freeze_p50_us"),
            int(&f("spread_ms")),
            a.ok as u8,
            f("early")
        ));
    }
    for (rep, a) in &alone {
        rows.push(format!(
            "{n},{},alone,0,,,{a:.2},{a:.2},1,0,0,,,,,,,1,,",
            int(rep)
        ));
    }
    for (rep, s) in &scx {
        let a = alone.get(rep).copied();
        rows.push(format!(
            "{n},{},scx_alone,0,,,{s:.2},{:.2},{:.5},0,0,,,,,,,1,,",
            int(rep),
            a.unwrap_or(0.0),
            a.map_or(0.0, |a| s / a)
        ));
    }
    // sort -t, -k1,1n -k3,3 -k4,4n -k2,2n (then the whole line).
    rows.sort_by(|x, y| {
        let (a, b): (Vec<&str>, Vec<&str>) = (x.split(',').collect(), y.split(',').collect());
        num(a[0])
            .total_cmp(&num(b[0]))
            .then_with(|| a[2].cmp(b[2]))
            .then_with(|| num(a[3]).total_cmp(&num(b[3])))
            .then_with(|| num(a[1]).total_cmp(&num(b[1])))
            .then_with(|| x.cmp(y))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::strings;

    fn switch(nodes: &[(u64, u64, u64)]) -> String {
        let n: Vec<String> = nodes
            .iter()
            .enumerate()
            .map(|(i, (d, f, r))| {
                format!(
                    r#""{}":{{"agent_switch_us":5,"frozen":{{"drain_us":{d},"drained_bytes":0,"answer_us":9,"timed_out":false}},"frozen_at_us":{f},"running_at_us":{r}}}"#,
                    i + 1
                )
            })
            .collect();
        format!(r#"{{"gen":1,"nodes":{{{}}},"total_us":3}}"#, n.join(","))
    }

    #[test]
    fn a_strict_switch_leaves_a_node_idle_for_its_drain_and_its_frozen_to_running() {
        // Nodes: 100 + (1500 - 1000) = 600 and 300 + (2200 - 2000) = 500: mean 550.
        assert_eq!(
            switch_idle_mean(&switch(&[(100, 1000, 1500), (300, 2000, 2200)])),
            Some(550.0)
        );
        assert_eq!(switch_idle_mean(r#"{"gen":1,"nodes":{}}"#), None);
        // A node without a freeze report (barrier off) counts no idle time.
        assert_eq!(
            switch_idle_mean(
                r#"{"nodes":{"1":{"frozen":null,"frozen_at_us":null,"running_at_us":7}}}"#
            ),
            None
        );
    }

    #[test]
    fn the_idle_estimate_of_a_strict_run_is_the_median_over_its_window() {
        let log = vec![
            switch(&[(0, 0, 999)]), // before the window
            switch(&[(100, 0, 100)]),
            switch(&[(100, 0, 200)]),
            switch(&[(100, 0, 301)]),
        ];
        let gang = strings(&[
            r#"{"rep":1,"method":"strict","tq":100,"d":6,"log_from":2,"log_to":4}"#,
            r#"{"rep":1,"method":"off","tq":100,"d":6,"log_from":1,"log_to":4}"#,
            r#"{"rep":2,"method":"strict","tq":100,"d":6,"log_from":3,"log_to":2}"#,
        ]);
        let idle = idle_estimates(&gang, &log);
        assert_eq!(
            idle.get(&("1".into(), "100".into())).map(String::as_str),
            Some("300")
        );
        assert_eq!(
            idle.len(),
            1,
            "off runs and empty windows have none: {idle:?}"
        );
    }

    fn boot(sig: &[&str], gang: &[&str]) -> Boot {
        Boot {
            n: 2,
            sig: strings(sig),
            gang: Some(strings(gang)),
            ..Boot::default()
        }
    }

    #[test]
    fn a_run_is_measured_against_its_repetitions_baseline() {
        let b = boot(
            &[
                r#"{"rep":1,"method":"alone","tq":0,"d":5,"node":1,"units":500,"spread_ms":0,"switches":0}"#,
                r#"{"rep":1,"method":"alone","tq":0,"d":5,"node":2,"units":500,"spread_ms":0,"switches":0}"#,
                r#"{"rep":1,"method":"sigstop","tq":100,"d":5,"node":1,"units":450,"spread_ms":9,"switches":50}"#,
                r#"{"rep":1,"method":"sigstop","tq":100,"d":5,"node":2,"units":450,"spread_ms":10,"switches":51}"#,
            ],
            &[
                r#"{"rep":1,"method":"scx_alone","tq":0,"d":5,"units":1000,"ok":1}"#,
                r#"{"rep":1,"method":"off","tq":100,"d":5,"units":800,"ok":1,"switches":50,"total_p50_us":70,"skew_p50_us":8,"freeze_p50_us":0,"idle_p50_us":1,"spread_ms":4,"early":0}"#,
            ],
        );
        assert_eq!(
            runs(&b),
            [
                // alone: 1000 units in 5 s over both nodes = 200/s.
                "2,1,alone,0,,,200.00,200.00,1,0,0,,,,,,,1,,",
                // off: 800/5 = 160 against 200 under scx_gang: r 0.8, T = 100 ms × 0.2.
                "2,1,off,100,5,800,160.00,200.00,0.80000,20000.0,50,70,8,0,,,4,1,0,",
                "2,1,scx_alone,0,,,200.00,200.00,1.00000,0,0,,,,,,,1,,",
                // sigstop: 900/5 = 180 against 200: T = 10 ms; switches the
                // mean over the nodes, the spread the largest (10, not "9").
                "2,1,sigstop,100,5,900,180.00,200.00,0.90000,10000.0,50,,,,,,10,1,,",
            ]
        );
    }

    #[test]
    fn timed_runs_carry_their_idle_and_lateness() {
        let b = boot(
            &[],
            &[
                r#"{"rep":1,"method":"scx_alone","tq":0,"d":5,"units":1000,"ok":1}"#,
                r#"{"rep":1,"method":"timed-strict","tq":100,"d":5,"units":900,"ok":1,"switches":50,"total_p50_us":0,"skew_p50_us":600,"freeze_p50_us":0,"idle_p50_us":3100,"late_p50_us":150,"spread_ms":4,"early":0}"#,
                r#"{"rep":1,"method":"timed-off","tq":100,"d":5,"units":950,"ok":1,"switches":50,"total_p50_us":0,"skew_p50_us":500,"freeze_p50_us":0,"idle_p50_us":0,"late_p50_us":90,"spread_ms":4,"early":0}"#,
            ],
        );
        let rows = runs(&b);
        assert!(
            rows.contains(&"2,1,timed-strict,100,5,900,180.00,200.00,0.90000,10000.0,50,0,600,0,3100,,4,1,0,150".to_string()),
            "{rows:?}"
        );
        assert!(
            rows.contains(
                &"2,1,timed-off,100,5,950,190.00,200.00,0.95000,5000.0,50,0,500,0,,,4,1,0,90"
                    .to_string()
            ),
            "{rows:?}"
        );
    }

    #[test]
    fn without_its_baseline_or_all_its_nodes_a_run_is_not_ok() {
        let b = boot(
            &[
                r#"{"rep":1,"method":"sigstop","tq":100,"d":5,"node":1,"units":450,"spread_ms":9,"switches":50}"#,
            ],
            &[r#"{"rep":2,"method":"strict","tq":100,"d":5,"units":800,"ok":1,"switches":50}"#],
        );
        let rows = runs(&b);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert!(
            rows.iter().all(|r| r.contains(",0.00,0.00,0.00000,0.0,")),
            "{rows:?}"
        );
        assert!(
            rows.iter().all(|r| r.split(',').nth(17) == Some("0")),
            "{rows:?}"
        );
    }
}
