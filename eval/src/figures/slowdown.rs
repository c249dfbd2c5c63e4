//! slowdown.svg: how much slower does each job run when jobs share the
//! cluster? A panel per workload, MPL along x, a line per policy through
//! its mean slowdowns, a faint whisker up to the cell's worst job, the
//! dedicated time as a dashed line at 1.
//!
//! Points of one MPL are dodged sideways so that equal values stay apart;
//! their value labels stand right of them, pushed apart vertically. The
//! scale turns log when the values span more than 8×.
//!
//! Known faults: with many policies the labels of one MPL may reach the
//! next MPL's points.

use super::axes::{frame, grid, reference, Scale, PANEL_W};
use super::page::{empty_figure, Page, Swatch};
use super::style::marker;
use super::{esc, policies_of_any, policy_items, shared_workloads, style, text};
use super::{value_label, workload_panels, WorkloadPanel, HALO, SLOWDOWN_TITLE};
use crate::metrics::Analysis;
use gang_plot::{element, Doc, PathData};

/// A plotted mean (pixels), its max and value.
pub(super) struct Point {
    pub x: f64,
    pub y: f64,
    pub max: Option<f64>,
    pub v: f64,
}

/// A value label of one point.
#[derive(Clone)]
struct Label {
    y: f64,
    text: String,
    colour: &'static str,
}

/// Pushes labels apart vertically (at least `gap` px), keeping their order.
fn spread(ys: &mut [(f64, usize)], gap: f64) {
    ys.sort_by(|a, b| a.0.total_cmp(&b.0));
    for i in 1..ys.len() {
        if ys[i].0 - ys[i - 1].0 < gap {
            ys[i].0 = ys[i - 1].0 + gap;
        }
    }
}

/// Lines only between neighbouring present points: gaps stay gaps.
pub(super) fn lines(d: &mut Doc, pts: &[Option<Point>], colour: &str) {
    for run in pts.split(Option::is_none) {
        if run.len() < 2 {
            continue;
        }
        let mut path = PathData::new();
        for (i, pt) in run.iter().flatten().enumerate() {
            path.cmd(if i == 0 { 'M' } else { 'L' }, &[pt.x, pt.y]);
        }
        d.path(
            &path,
            &format!(" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2.2\""),
        );
    }
}

pub fn slowdown_svg(a: &Analysis) -> String {
    let ws = shared_workloads(a);
    let all_pols = policies_of_any(a, &ws);
    if ws.is_empty() {
        return empty_figure(
            SLOWDOWN_TITLE,
            "no cell under a policy other than dedicated",
        );
    }
    let (cols, rows) = grid(ws.len());
    let mut items = policy_items(a, &all_pols, false);
    items.push((Swatch::Whisker, "max over the cell's jobs".into()));
    items.push((Swatch::Dashed, "1.0 = as fast as alone (dedicated)".into()));
    let sub = [
        "Mean slowdown of a job (its response time / the same workload alone on the cluster) at each multiprogramming level;",
        "values printed at each point; a missing cell is a gap.",
    ];
    let mut page = Page::new(20.0 + cols as f64 * PANEL_W, SLOWDOWN_TITLE, &sub, &items);
    let (d, top) = (&mut page.doc, page.top);
    for WorkloadPanel {
        w,
        area,
        mpls,
        cats,
        pols,
    } in workload_panels(a, &ws, cols, top)
    {
        let mut vals = vec![1.0];
        for p in &pols {
            for m in &mpls {
                if let Some(c) = a.cell(p, w, *m) {
                    vals.extend(c.slowdown_mean);
                    vals.extend(c.slowdown_max);
                }
            }
        }
        let scale = Scale::fit(&vals, true, 8.0, 1.08);
        d.raw(&format!("<g class=\"panel\" data-workload=\"{}\">", esc(w)));
        frame(
            d,
            &area,
            &scale,
            &format!("workload {w}"),
            "mean slowdown (× dedicated time)",
            "MPL (jobs sharing the cluster)",
            &cats,
        );
        reference(d, &area, &scale, 1.0, "dedicated");
        let n = pols.len();
        let slot = area.w / mpls.len() as f64;
        let dodge = (slot * 0.3 / n.max(1) as f64).min(7.0);
        // Labels per category, placed after the series.
        let mut labels: Vec<Vec<Label>> = vec![Vec::new(); mpls.len()];
        for (k, p) in pols.iter().enumerate() {
            let st = style(&a.policies, p);
            let off = (k as f64 - (n as f64 - 1.0) / 2.0) * dodge;
            d.raw(&format!("<g class=\"series\" data-policy=\"{}\">", esc(p)));
            let pts: Vec<Option<Point>> = mpls
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let c = a.cell(p, w, *m)?;
                    let v = c.slowdown_mean?;
                    Some(Point {
                        x: area.xcat(i, mpls.len()) + off,
                        y: area.ymap(&scale, v),
                        max: c.slowdown_max,
                        v,
                    })
                })
                .collect();
            lines(d, &pts, st.colour);
            for (i, pt) in pts.iter().enumerate() {
                let Some(Point { x, y, max, v }) = pt else {
                    continue;
                };
                if let Some(mx) = max {
                    let ym = area.ymap(&scale, *mx);
                    if (ym - y).abs() > 0.5 {
                        d.raw(&format!(
                            "<g class=\"whisker\" data-value=\"{mx}\" stroke=\"{}\" stroke-width=\"1.5\" stroke-opacity=\"0.45\">{}{}</g>",
                            st.colour,
                            element("line", "", &[("x1", *x), ("y1", *y), ("x2", *x), ("y2", ym)], ""),
                            element("line", "", &[("x1", x - 3.0), ("y1", ym), ("x2", x + 3.0), ("y2", ym)], ""),
                        ));
                    }
                }
                d.raw(&format!(
                    "<g class=\"point\" data-mpl=\"{}\" data-value=\"{v}\">{}</g>",
                    mpls[i],
                    marker(&st, *x, *y, 4.5)
                ));
                labels[i].push(Label {
                    y: *y,
                    text: value_label(*v),
                    colour: st.text,
                });
            }
            d.raw("</g>");
        }
        // Value labels right of each category's points, pushed apart.
        for (i, ls) in labels.iter().enumerate() {
            let mut ys: Vec<(f64, usize)> =
                ls.iter().enumerate().map(|(j, l)| (l.y + 4.0, j)).collect();
            spread(&mut ys, 12.0);
            let x = area.xcat(i, mpls.len()) + dodge * n as f64 / 2.0 + 10.0;
            for (y, j) in ys {
                let l = &ls[j];
                text(
                    d,
                    (x, y),
                    10.0,
                    "start",
                    l.colour,
                    &format!(" class=\"value\"{HALO}"),
                    &l.text,
                );
            }
        }
        d.raw("</g>");
    }
    page.finish(rows)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{count, panels, sample};
    use super::*;

    #[test]
    fn slowdown_has_one_series_per_policy_per_panel_and_a_gap() {
        let a = sample();
        let svg = slowdown_svg(&a);
        let ps = panels(&svg);
        assert_eq!(ps.len(), 2);
        for p in &ps {
            assert_eq!(count(p, "class=\"series\""), 4, "{p}");
            for pol in ["eevdf", "gang-strict", "signal", "my&lt;pol&gt;&amp;"] {
                assert_eq!(
                    count(p, &format!("class=\"series\" data-policy=\"{pol}\"")),
                    1
                );
            }
            assert_eq!(count(p, "class=\"reference\""), 1);
        }
        // rt: gang-strict has points at mpl 1 and 3 only, and no line joins
        // them across the gap.
        let rt = ps[1];
        let s = &rt[rt.find("data-policy=\"gang-strict\"").unwrap()..];
        let s = &s[..s.find("data-policy=\"signal\"").unwrap()];
        assert_eq!(count(s, "class=\"point\""), 2);
        assert!(
            s.contains("data-mpl=\"1\"")
                && s.contains("data-mpl=\"3\"")
                && !s.contains("data-mpl=\"2\"")
        );
        assert_eq!(count(s, "<path"), 0, "no line across the gap: {s}");
        // ep: a full line of 3 points.
        let ep = ps[0];
        let s = &ep[ep.find("data-policy=\"gang-strict\"").unwrap()..];
        let s = &s[..s.find("</g>\n<g class=\"series\"").unwrap()];
        assert_eq!(count(s, "class=\"point\""), 3);
        assert_eq!(count(s, "<path"), 1);
    }
}
