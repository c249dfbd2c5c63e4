//! makespan.svg: how long does the whole batch take, against running its
//! jobs one after another? A panel per workload, grouped bars per MPL (one
//! per policy) of makespan / (MPL × dedicated time), a dashed line at 1.
//!
//! Below 1, sharing the cluster gains; a cell without a makespan ratio
//! (incomplete reps, no dedicated time) is no bar.
//!
//! Known faults: the scale is always linear from 0, so a policy far above
//! the others flattens their bars.

use super::axes::{frame, grid, reference, Scale, PANEL_W};
use super::bars::{draw_bars, Bars};
use super::page::{empty_figure, Page, Swatch};
use super::MAKESPAN_TITLE;
use super::{esc, policies_of_any, policy_items, shared_workloads, style};
use super::{workload_panels, WorkloadPanel};
use crate::metrics::Analysis;
use crate::DEDICATED;

pub fn makespan_svg(a: &Analysis) -> String {
    let ws: Vec<String> = shared_workloads(a)
        .into_iter()
        .filter(|w| {
            a.cells
                .iter()
                .any(|c| &c.workload == w && c.policy != DEDICATED && c.makespan_ratio.is_some())
        })
        .collect();
    if ws.is_empty() {
        return empty_figure(
            MAKESPAN_TITLE,
            "no cell with a makespan ratio (complete reps and a dedicated time)",
        );
    }
    let all_pols = policies_of_any(a, &ws);
    let (cols, rows) = grid(ws.len());
    let mut items = policy_items(a, &all_pols, true);
    items.push((Swatch::Dashed, "1.0 = one after another, each alone".into()));
    let sub = [
        "Makespan (first submit to last end of a batch of MPL identical jobs) / (MPL × dedicated time), mean over reps;",
        "below 1: sharing the cluster gains; a missing cell is a gap.",
    ];
    let mut page = Page::new(20.0 + cols as f64 * PANEL_W, MAKESPAN_TITLE, &sub, &items);
    let (d, top) = (&mut page.doc, page.top);
    for WorkloadPanel {
        w,
        area,
        mpls,
        cats,
        pols,
    } in workload_panels(a, &ws, cols, top)
    {
        let series: Vec<(String, &str, Vec<Option<f64>>)> = pols
            .iter()
            .map(|p| {
                let vals = mpls
                    .iter()
                    .map(|m| a.cell(p, w, *m).and_then(|c| c.makespan_ratio))
                    .collect();
                (p.clone(), style(&a.policies, p).colour, vals)
            })
            .collect();
        let mut vals: Vec<f64> = series
            .iter()
            .flat_map(|s| s.2.iter().flatten().copied())
            .collect();
        vals.push(1.0);
        let scale = Scale::fit(&vals, false, 0.0, 1.25);
        d.raw(&format!("<g class=\"panel\" data-workload=\"{}\">", esc(w)));
        frame(
            d,
            &area,
            &scale,
            &format!("workload {w}"),
            "makespan / (MPL × dedicated)",
            "MPL (jobs in the batch)",
            &cats,
        );
        let b = Bars {
            cats: cats.clone(),
            series,
            cat_key: ("mpl", cats),
        };
        draw_bars(d, &area, &scale, &b);
        reference(d, &area, &scale, 1.0, "");
        d.raw("</g>");
    }
    page.finish(rows)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{count, panels, sample};
    use super::*;
    use gang_plot::well_formed;

    #[test]
    fn makespan_bars_leave_gaps_not_zeros() {
        let a = sample();
        let svg = makespan_svg(&a);
        well_formed(&svg).unwrap();
        let rt = panels(&svg)[1];
        let s = &rt[rt.find("data-policy=\"gang-strict\"").unwrap()..];
        let s = &s[..s.find("</g>").unwrap()];
        assert_eq!(count(s, "class=\"bar\""), 2);
        assert!(!s.contains("data-mpl=\"2\""));
        assert!(!svg.contains("data-value=\"0\""));
    }
}
