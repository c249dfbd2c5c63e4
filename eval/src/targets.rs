//! The evaluation's targets, checked against the metrics.
//!
//! 1. Fine-grained workloads at their highest MPL: every gang policy's mean
//!    slowdown ≤ 1.1, every local scheduler's ≥ 2.0 (gang scheduling pays
//!    off where ranks talk all the time).
//! 2. `ep` (no communication): every gang policy's mean slowdown within 2 %
//!    of eevdf's at each MPL (gang scheduling costs nothing where it is not
//!    needed).
//! 3. Per-switch overhead: every gang policy's ≥ 10× below `signal`'s,
//!    compared on ep, or else on every workload where both have a value,
//!    at that workload's highest MPL where both do.
//!
//! A target whose cell or value is missing is n/a with the reason.
//!
//! "Slowdown" in 1. and 2. is the mean slowdown (job time / dedicated time)
//! by default. With MPL jobs sharing every CPU, a perfect gang scheduler
//! still gives each job 1/MPL of the machine, so that slowdown is ≈ MPL; the
//! targets can instead be judged on the makespan ratio (makespan / (MPL ×
//! dedicated)), the same question normalised by the share
//! ([`TargetMetric::MakespanRatio`]).

use crate::metrics::Analysis;
use std::fmt;

/// What targets 1 and 2 compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetMetric {
    /// Mean slowdown: job time / dedicated time.
    Slowdown,
    /// Makespan / (MPL × dedicated time).
    MakespanRatio,
}

impl TargetMetric {
    pub fn name(&self) -> &'static str {
        match self {
            TargetMetric::Slowdown => "slowdown",
            TargetMetric::MakespanRatio => "makespan-ratio",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TargetConfig {
    pub metric: TargetMetric,
    pub fine_workloads: Vec<String>,
    pub gang_policies: Vec<String>,
    pub local_policies: Vec<String>,
    pub gang_max_slowdown: f64,
    pub local_min_slowdown: f64,
    pub ep_workload: String,
    pub ep_reference: String,
    pub ep_tolerance: f64,
    pub signal_policy: String,
    pub switch_factor: f64,
}

impl Default for TargetConfig {
    fn default() -> Self {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        TargetConfig {
            metric: TargetMetric::Slowdown,
            fine_workloads: v(&["allreduce", "rt", "mpi_allreduce", "ompi_allreduce"]),
            gang_policies: v(&["gang-strict", "gang-yield"]),
            local_policies: v(&["eevdf", "bpfland"]),
            gang_max_slowdown: 1.1,
            local_min_slowdown: 2.0,
            ep_workload: "ep".into(),
            ep_reference: "eevdf".into(),
            ep_tolerance: 0.02,
            signal_policy: "signal".into(),
            switch_factor: 10.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Met,
    NotMet,
    /// Could not be judged, and why.
    NotApplicable(String),
}

/// One judged target.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// What was required, of which cell.
    pub target: String,
    /// What was measured ("" when n/a).
    pub measured: String,
    pub status: Status,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            Status::Met => write!(f, "target {}  measured {}  met", self.target, self.measured),
            Status::NotMet => write!(
                f,
                "target {}  measured {}  NOT met",
                self.target, self.measured
            ),
            Status::NotApplicable(why) => write!(f, "target {}  n/a: {why}", self.target),
        }
    }
}

fn na(target: String, why: String) -> Outcome {
    Outcome {
        target,
        measured: String::new(),
        status: Status::NotApplicable(why),
    }
}

fn judged(target: String, measured: String, met: bool) -> Outcome {
    Outcome {
        target,
        measured,
        status: if met { Status::Met } else { Status::NotMet },
    }
}

/// A cell's value of `metric`, or why it is missing.
fn metric_of(a: &Analysis, metric: TargetMetric, p: &str, w: &str, m: u32) -> Result<f64, String> {
    let Some(c) = a.cell(p, w, m) else {
        return Err(format!("no cell {p}/{w}/mpl={m} in the records"));
    };
    let v = match metric {
        TargetMetric::Slowdown => c.slowdown_mean,
        TargetMetric::MakespanRatio => c.makespan_ratio,
    };
    if let Some(v) = v {
        return Ok(v);
    }
    if a.dedicated_time(w).is_none() {
        Err(format!("no ok dedicated job of {w}"))
    } else if metric == TargetMetric::MakespanRatio {
        Err(format!("no rep of {p}/{w}/mpl={m} with every job ok"))
    } else {
        Err(format!("no ok job in {p}/{w}/mpl={m}"))
    }
}

pub fn evaluate(a: &Analysis, cfg: &TargetConfig) -> Vec<Outcome> {
    let mut out = Vec::new();
    let metric = cfg.metric.name();
    let slowdown_of = |p: &str, w: &str, m: u32| metric_of(a, cfg.metric, p, w, m);

    // 1. Fine-grained workloads at the highest MPL.
    for w in &cfg.fine_workloads {
        let mpls = a.mpls_of(w);
        let Some(&m) = mpls.last() else {
            out.push(na(
                format!(
                    "fine-grained {w}: {metric} of gang ≤ {} and local ≥ {}",
                    cfg.gang_max_slowdown, cfg.local_min_slowdown
                ),
                format!("no cell of workload {w} in the records"),
            ));
            continue;
        };
        let groups = [
            (&cfg.gang_policies, "≤", cfg.gang_max_slowdown),
            (&cfg.local_policies, "≥", cfg.local_min_slowdown),
        ];
        for (pols, op, bound) in groups {
            for p in pols {
                let target = format!("{metric} {p} {w} mpl={m} {op} {bound:.2}");
                match slowdown_of(p, w, m) {
                    Ok(s) => {
                        let met = if op == "≤" { s <= bound } else { s >= bound };
                        out.push(judged(target, format!("{s:.3}"), met));
                    }
                    Err(why) => out.push(na(target, why)),
                }
            }
        }
    }

    // 2. ep: gang within 2 % of the reference at each MPL.
    let ep = &cfg.ep_workload;
    let reference = &cfg.ep_reference;
    let tol_pct = cfg.ep_tolerance * 100.0;
    let mpls = a.mpls_of(ep);
    if mpls.is_empty() {
        out.push(na(
            format!("{ep}: gang {metric} within {tol_pct:.0} % of {reference}'s"),
            format!("no cell of workload {ep} in the records"),
        ));
    }
    for &m in &mpls {
        for p in &cfg.gang_policies {
            let target =
                format!("{metric} {p} {ep} mpl={m} within {tol_pct:.0} % of {reference}'s");
            match (slowdown_of(p, ep, m), slowdown_of(reference, ep, m)) {
                (Ok(g), Ok(r)) => {
                    let diff = g / r - 1.0;
                    out.push(judged(
                        target,
                        format!("{g:.3} vs {r:.3} ({:+.1} %)", diff * 100.0),
                        diff.abs() <= cfg.ep_tolerance,
                    ));
                }
                (Err(why), _) | (_, Err(why)) => out.push(na(target, why)),
            }
        }
    }

    // 3. Per-switch overhead against signal's.
    let sig = &cfg.signal_policy;
    let f = cfg.switch_factor;
    for p in &cfg.gang_policies {
        let both = |w: &str| -> Option<(u32, f64, f64)> {
            a.mpls_of(w).into_iter().rev().find_map(|m| {
                let g = a.cell(p, w, m)?.switch_overhead_ms?;
                let s = a.cell(sig, w, m)?.switch_overhead_ms?;
                Some((m, g, s))
            })
        };
        let mut cmp: Vec<(String, u32, f64, f64)> = Vec::new();
        if let Some((m, g, s)) = both(ep) {
            cmp.push((ep.clone(), m, g, s));
        } else {
            for w in &a.workloads {
                if let Some((m, g, s)) = both(w) {
                    cmp.push((w.clone(), m, g, s));
                }
            }
        }
        if cmp.is_empty() {
            out.push(na(
                format!("per-switch overhead {p} ≥ {f:.0}× below {sig}'s"),
                format!("no workload where both {p} and {sig} have a per-switch overhead"),
            ));
        }
        for (w, m, g, s) in cmp {
            let target = format!("per-switch overhead {p} {w} mpl={m} ≥ {f:.0}× below {sig}'s");
            if s <= 0.0 {
                out.push(na(
                    target,
                    format!(
                        "{sig}'s overhead is {s:.1} ms ≤ 0: below the throughput method's noise"
                    ),
                ));
            } else if g <= 0.0 {
                out.push(judged(
                    target,
                    format!("{g:.1} ms vs {s:.1} ms ({p} ≤ 0: within the method's noise)"),
                    true,
                ));
            } else {
                let r = s / g;
                out.push(judged(
                    target,
                    format!("{g:.1} ms vs {s:.1} ms ({r:.1}× below)"),
                    r >= f,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::analyse;
    use crate::records::Log;

    /// One job per cell and rep; time `t` (s) with dedicated 10 s.
    fn cell(
        p: &str,
        w: &str,
        m: u32,
        slowdown: f64,
        switches: Option<u64>,
        makespan: Option<f64>,
    ) -> String {
        let mut s = String::new();
        let t = slowdown * 10.0;
        for i in 0..m {
            let end = if i == 0 { makespan.unwrap_or(t) } else { t };
            s += &format!(
                "job policy={p} workload={w} mpl={m} rep=0 idx={i} submit_ms=0 end_ms={} rc=0 ranks=2 ranks_ok=2\n",
                end * 1000.0
            );
        }
        if let Some(sw) = switches {
            s += &format!("cell policy={p} workload={w} mpl={m} rep=0 switches={sw}\n");
        }
        s
    }

    fn analysis(text: &str) -> Analysis {
        let mut l = Log::default();
        let mut base = String::new();
        for w in ["allreduce", "rt", "ep"] {
            base += &format!("job policy=dedicated workload={w} mpl=1 rep=0 idx=0 submit_ms=0 end_ms=10000 rc=0 ranks=2 ranks_ok=2\n");
        }
        l.add_str("t", &(base + text)).unwrap();
        analyse(&l, None)
    }

    fn find<'a>(o: &'a [Outcome], needle: &str) -> &'a Outcome {
        o.iter()
            .find(|x| x.target.contains(needle))
            .unwrap_or_else(|| panic!("no target '{needle}' in {o:#?}"))
    }

    #[test]
    fn fine_grained_met_not_met_and_na() {
        let text = [
            cell("gang-strict", "allreduce", 2, 1.5, None, None),
            cell("gang-strict", "allreduce", 3, 1.05, None, None),
            cell("gang-yield", "allreduce", 3, 1.2, None, None),
            cell("eevdf", "allreduce", 3, 2.5, None, None),
            cell("bpfland", "allreduce", 3, 1.9, None, None),
        ]
        .concat();
        let o = evaluate(&analysis(&text), &TargetConfig::default());
        // Highest MPL (3) is judged, not 2.
        let g = find(&o, "slowdown gang-strict allreduce mpl=3");
        assert_eq!(
            (g.status.clone(), g.measured.as_str()),
            (Status::Met, "1.050")
        );
        assert_eq!(
            find(&o, "slowdown gang-yield allreduce mpl=3").status,
            Status::NotMet
        );
        assert_eq!(
            find(&o, "slowdown eevdf allreduce mpl=3").status,
            Status::Met
        );
        assert_eq!(
            find(&o, "slowdown bpfland allreduce mpl=3").status,
            Status::NotMet
        );
        // rt and mpi_allreduce have no cells at all.
        for w in ["rt", "mpi_allreduce"] {
            let x = find(&o, &format!("fine-grained {w}"));
            assert!(
                matches!(&x.status, Status::NotApplicable(r) if r.contains("no cell of workload")),
                "{x}"
            );
        }
        let line = find(&o, "slowdown gang-yield allreduce mpl=3").to_string();
        assert!(
            line.starts_with("target slowdown gang-yield allreduce mpl=3 ≤ 1.10"),
            "{line}"
        );
        assert!(line.ends_with("measured 1.200  NOT met"), "{line}");
    }

    #[test]
    fn targets_can_be_judged_on_the_makespan_ratio() {
        // mpl=3, each job 3 × 10.2 s (dedicated 10 s): slowdown 3.06 but
        // makespan ratio 30.6 / 30 = 1.02.
        let text = cell("gang-strict", "allreduce", 3, 3.06, None, None);
        let a = analysis(&text);
        let o = evaluate(&a, &TargetConfig::default());
        assert_eq!(
            find(&o, "slowdown gang-strict allreduce mpl=3").status,
            Status::NotMet
        );
        let cfg = TargetConfig {
            metric: TargetMetric::MakespanRatio,
            ..TargetConfig::default()
        };
        let o = evaluate(&a, &cfg);
        let x = find(&o, "makespan-ratio gang-strict allreduce mpl=3 ≤ 1.10");
        assert_eq!(
            (x.status.clone(), x.measured.as_str()),
            (Status::Met, "1.020")
        );
    }

    #[test]
    fn a_missing_cell_is_na_with_the_reason() {
        let text = cell("gang-strict", "rt", 2, 1.0, None, None);
        let o = evaluate(&analysis(&text), &TargetConfig::default());
        let x = find(&o, "slowdown eevdf rt mpl=2");
        assert_eq!(
            x.status,
            Status::NotApplicable("no cell eevdf/rt/mpl=2 in the records".into())
        );
        assert!(x.to_string().contains("n/a: no cell eevdf/rt/mpl=2"));
    }

    #[test]
    fn ep_within_two_percent_of_eevdf() {
        let text = [
            cell("eevdf", "ep", 2, 2.0, None, None),
            cell("gang-strict", "ep", 2, 2.03, None, None),
            cell("gang-yield", "ep", 2, 2.05, None, None),
            cell("eevdf", "ep", 3, 3.0, None, None),
            cell("gang-strict", "ep", 3, 2.95, None, None),
        ]
        .concat();
        let o = evaluate(&analysis(&text), &TargetConfig::default());
        let s = find(&o, "slowdown gang-strict ep mpl=2 within 2 %");
        assert_eq!(s.status, Status::Met);
        assert_eq!(s.measured, "2.030 vs 2.000 (+1.5 %)");
        assert_eq!(
            find(&o, "slowdown gang-yield ep mpl=2 within").status,
            Status::NotMet
        );
        assert_eq!(
            find(&o, "slowdown gang-strict ep mpl=3 within").status,
            Status::Met
        );
        assert!(matches!(
            find(&o, "slowdown gang-yield ep mpl=3 within").status,
            Status::NotApplicable(_)
        ));
    }

    #[test]
    fn switch_overhead_against_signal() {
        // mpl=2, dedicated 10 s: overhead = (makespan - 20 s) / switches.
        let text = [
            // signal: 2 s over 100 switches = 20 ms
            cell("signal", "ep", 2, 1.0, Some(100), Some(22.0)),
            // gang-strict: 0.1 s / 100 = 1 ms → 20× below: met
            cell("gang-strict", "ep", 2, 1.0, Some(100), Some(20.1)),
            // gang-yield: 0.5 s / 100 = 5 ms → 4×: not met
            cell("gang-yield", "ep", 2, 1.0, Some(100), Some(20.5)),
        ]
        .concat();
        let o = evaluate(&analysis(&text), &TargetConfig::default());
        let s = find(&o, "per-switch overhead gang-strict ep mpl=2");
        assert_eq!(s.status, Status::Met);
        assert_eq!(s.measured, "1.0 ms vs 20.0 ms (20.0× below)");
        assert_eq!(
            find(&o, "per-switch overhead gang-yield ep mpl=2").status,
            Status::NotMet
        );
    }

    #[test]
    fn switch_overhead_falls_back_to_other_workloads_or_na() {
        let text = [
            cell("signal", "rt", 2, 1.0, Some(100), Some(22.0)),
            cell("gang-strict", "rt", 2, 1.0, Some(100), Some(19.0)),
        ]
        .concat();
        let o = evaluate(&analysis(&text), &TargetConfig::default());
        let s = find(&o, "per-switch overhead gang-strict rt mpl=2");
        assert_eq!(s.status, Status::Met, "{s}");
        assert!(s.measured.contains("within the method's noise"));
        let y = find(&o, "per-switch overhead gang-yield");
        assert!(
            matches!(&y.status, Status::NotApplicable(r) if r.contains("no workload where both"))
        );
    }

    #[test]
    fn signal_overhead_at_or_below_zero_cannot_be_beaten_tenfold() {
        let text = [
            cell("signal", "ep", 2, 1.0, Some(100), Some(19.0)),
            cell("gang-strict", "ep", 2, 1.0, Some(100), Some(20.1)),
        ]
        .concat();
        let o = evaluate(&analysis(&text), &TargetConfig::default());
        assert!(
            matches!(&find(&o, "per-switch overhead gang-strict ep").status, Status::NotApplicable(r) if r.contains("noise"))
        );
    }
}
