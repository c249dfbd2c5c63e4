//! switch_overhead.svg: what does one slot switch cost? One panel: a group
//! of bars per workload at its highest MPL, one bar per policy that makes
//! slot switches, of the per-switch overhead in ms = (makespan - MPL ×
//! dedicated time) / slot switches.
//!
//! A throughput estimate: meaningful for compute-bound workloads; noise
//! can make it negative (a bar down from 0). The scale turns log when the
//! values span more than 20×.
//!
//! Known faults: the panel widens with workloads × policies and has no
//! upper bound.

use super::axes::{frame, panel_area, Scale, PAD_L, PAD_R, PANEL_W};
use super::bars::{draw_bars, Bars};
use super::page::{empty_figure, Page};
use super::{policy_items, shared_workloads, style, SWITCH_TITLE};
use crate::metrics::Analysis;

pub fn switch_overhead_svg(a: &Analysis) -> String {
    let pols: Vec<String> = a
        .shared_policies()
        .into_iter()
        .filter(|p| {
            a.cells
                .iter()
                .any(|c| &c.policy == p && c.switch_overhead_ms.is_some())
        })
        .collect();
    let ws: Vec<(String, u32)> = shared_workloads(a)
        .into_iter()
        .filter_map(|w| {
            let m = *a.mpls_of(&w).last()?;
            pols.iter()
                .any(|p| {
                    a.cell(p, &w, m)
                        .and_then(|c| c.switch_overhead_ms)
                        .is_some()
                })
                .then_some((w, m))
        })
        .collect();
    if pols.is_empty() || ws.is_empty() {
        return empty_figure(
            SWITCH_TITLE,
            "no policy with slot switches and a per-switch overhead at a workload's highest MPL",
        );
    }
    let series: Vec<(String, &str, Vec<Option<f64>>)> = pols
        .iter()
        .map(|p| {
            let vals = ws
                .iter()
                .map(|(w, m)| a.cell(p, w, *m).and_then(|c| c.switch_overhead_ms))
                .collect();
            (p.clone(), style(&a.policies, p).colour, vals)
        })
        .collect();
    let vals: Vec<f64> = series
        .iter()
        .flat_map(|s| s.2.iter().flatten().copied())
        .collect();
    let scale = Scale::fit(&vals, true, 20.0, 1.6);
    let pw = PANEL_W.max(PAD_L + PAD_R + ws.len() as f64 * (pols.len() as f64 * 30.0 + 30.0));
    let items = policy_items(a, &pols, true);
    let sub = [
        "Per-switch overhead in ms = (makespan - MPL × dedicated time) / slot switches, mean over reps, at each workload's highest MPL.",
        "A throughput estimate: meaningful for compute-bound workloads (ep); noise can make it negative. Missing: a gap.",
    ];
    let mut page = Page::new(20.0 + pw, SWITCH_TITLE, &sub, &items);
    let pw = page.width - 20.0;
    let (d, top) = (&mut page.doc, page.top);
    let area = panel_area(0, 1, top, pw);
    let cats: Vec<String> = ws.iter().map(|(w, m)| format!("{w} (mpl={m})")).collect();
    d.raw("<g class=\"panel\">");
    frame(
        d,
        &area,
        &scale,
        "per-switch overhead by workload",
        "overhead per switch (ms)",
        "workload (at its highest MPL)",
        &cats,
    );
    let keys = ws.iter().map(|(w, _)| w.clone()).collect();
    draw_bars(
        d,
        &area,
        &scale,
        &Bars {
            cats,
            series,
            cat_key: ("workload", keys),
        },
    );
    d.raw("</g>");
    page.finish(1)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{count, sample};
    use super::*;

    #[test]
    fn switch_overhead_only_for_switching_policies_at_the_highest_mpl() {
        let a = sample();
        let svg = switch_overhead_svg(&a);
        assert!(
            !svg.contains("data-policy=\"eevdf\""),
            "eevdf makes no switches"
        );
        assert_eq!(count(&svg, "class=\"series\""), 3);
        assert!(svg.contains("ep (mpl=3)") && svg.contains("rt (mpl=3)"));
        // signal ep mpl=3: makespan 3 × 1.3 × 10 s + 0.2 s = 39.2 s against
        // 30 s, over 150 switches: 61.33 ms.
        assert!(
            svg.contains("data-workload=\"ep\" data-value=\"61.33"),
            "{svg}"
        );
    }
}
