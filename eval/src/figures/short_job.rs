//! short_job.svg: how long does a short job take when it arrives behind
//! long jobs? A panel per configuration (short workload, L long jobs, long
//! workload), two bars per policy: the short job's response time (the
//! policy's colour) and what it would take in a FIFO queue behind the long
//! jobs (grey, computed from dedicated times); its time alone as a dashed
//! line.
//!
//! Known faults: a configuration some policy did not run shows only the
//! policies that did, so panels may differ in their categories.

use super::axes::{frame, grid, panel_area, reference, Scale, PAD_L, PAD_R, PANEL_W};
use super::page::{empty_figure, Page, Swatch};
use super::style::OUTLINE;
use super::{esc, policy_items, rotated, style, text, value_label, HALO, SHORT_TITLE};
use crate::metrics::Analysis;
use gang_plot::element;

/// The FIFO bars and their legend swatch.
const FIFO_FILL: &str = "#BBBBBB";

pub fn short_job_svg(a: &Analysis) -> String {
    if a.shorts.is_empty() {
        return empty_figure(SHORT_TITLE, "no short-job records");
    }
    // One panel per configuration (short workload, L, long workload).
    let mut confs: Vec<(String, u32, String)> = Vec::new();
    for s in &a.shorts {
        let c = (s.workload.clone(), s.behind, s.long_workload.clone());
        if !confs.contains(&c) {
            confs.push(c);
        }
    }
    let all_pols: Vec<String> = a
        .policies
        .iter()
        .filter(|p| a.shorts.iter().any(|s| &s.policy == *p))
        .cloned()
        .collect();
    let (cols, rows) = grid(confs.len());
    let pw = PANEL_W.max(PAD_L + PAD_R + all_pols.len() as f64 * 70.0);
    let mut items = policy_items(a, &all_pols, true);
    items.push((
        Swatch::Bar(FIFO_FILL),
        "FIFO queue: wait for the long jobs, then run alone".into(),
    ));
    items.push((Swatch::Dashed, "alone (dedicated)".into()));
    let sub = [
        "Response time (s) of a short job submitted while L long jobs run, mean over reps, next to what it would take",
        "in a FIFO queue behind them (computed from dedicated times) and alone on the cluster. A missing value is a gap.",
    ];
    let mut page = Page::new(20.0 + cols as f64 * pw, SHORT_TITLE, &sub, &items);
    let pw = (page.width - 20.0) / cols as f64;
    let (d, top) = (&mut page.doc, page.top);
    for (ci, (w, behind, lw)) in confs.iter().enumerate() {
        let area = panel_area(ci, cols, top, pw);
        let recs: Vec<_> = all_pols
            .iter()
            .filter_map(|p| {
                a.shorts.iter().find(|s| {
                    &s.policy == p
                        && &s.workload == w
                        && s.behind == *behind
                        && &s.long_workload == lw
                })
            })
            .collect();
        let cats: Vec<String> = recs.iter().map(|s| s.policy.clone()).collect();
        let mut vals: Vec<f64> = recs
            .iter()
            .flat_map(|s| [s.response_s, s.fifo_s, s.dedicated_s])
            .flatten()
            .collect();
        vals.push(0.0);
        let scale = Scale::fit(&vals, false, 0.0, 1.3);
        d.raw(&format!("<g class=\"panel\" data-workload=\"{}\">", esc(w)));
        frame(
            d,
            &area,
            &scale,
            &format!("{w} behind {behind} × {lw}"),
            "response time (s)",
            "policy",
            &cats,
        );
        // Two bars per policy: its response (its colour) and its FIFO time (grey).
        let nc = cats.len().max(1);
        let slot = area.w / nc as f64;
        let bw = (slot * 0.8 / 2.0).min(40.0);
        let y0 = area.ymap(&scale, 0.0);
        for (i, s) in recs.iter().enumerate() {
            let st = style(&a.policies, &s.policy);
            d.raw(&format!(
                "<g class=\"series\" data-policy=\"{}\">",
                esc(&s.policy)
            ));
            for (k, (v, fill, class)) in [
                (s.response_s, st.colour, "response"),
                (s.fifo_s, FIFO_FILL, "fifo"),
            ]
            .into_iter()
            .enumerate()
            {
                let Some(v) = v else { continue };
                let x = area.xcat(i, nc) + (k as f64 - 1.0) * bw;
                let y = area.ymap(&scale, v);
                d.raw(&element(
                    "rect",
                    &format!(" class=\"bar {class}\" data-value=\"{v}\""),
                    &[
                        ("x", x),
                        ("y", y),
                        ("width", (bw - 1.0).max(1.0)),
                        ("height", (y0 - y).max(0.5)),
                    ],
                    &format!(" fill=\"{fill}\" stroke=\"{OUTLINE}\" stroke-width=\"0.6\""),
                ));
                let cx = x + bw / 2.0 + 3.5;
                let ly = y - 4.0;
                text(
                    d,
                    (cx, ly),
                    10.0,
                    "start",
                    "#222222",
                    &format!(" class=\"value\"{}{HALO}", rotated(cx, ly)),
                    &format!("{} s", value_label(v)),
                );
            }
            d.raw("</g>");
        }
        if let Some(ded) = recs.iter().find_map(|s| s.dedicated_s) {
            reference(
                d,
                &area,
                &scale,
                ded,
                &format!("alone {} s", value_label(ded)),
            );
        }
        d.raw("</g>");
    }
    page.finish(rows)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{count, sample};
    use super::*;

    #[test]
    fn short_job_has_response_and_fifo_per_policy() {
        let a = sample();
        let svg = short_job_svg(&a);
        assert_eq!(count(&svg, "class=\"bar response\""), 4);
        assert_eq!(count(&svg, "class=\"bar fifo\""), 4);
        assert!(svg.contains("alone 10.0 s"));
    }
}
