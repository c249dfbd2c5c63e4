//! scale.svg: what does gangd cost as the cluster grows? The load
//! harness's figures (`scripts/bench_scale.sh`, gang-load) against the
//! number of nodes, a panel per figure, a line per run (say, before and
//! after a change, measured back to back), issue 14's targets as dashed
//! lines where it sets one.
//!
//! Node counts are categories along x (the harness doubles or quadruples
//! N, so equal spacing reads as a log axis); a value the run did not
//! measure is a gap. Values span decades between 64 and 4096 nodes, so a
//! panel turns log past 8×.
//!
//! Known fault: runs with different node counts share the union of them;
//! a run without a count has a gap there.

use super::axes::{frame, grid, panel_area, reference, Scale, PANEL_W};
use super::page::{empty_figure, Page, Swatch};
use super::slowdown::{lines, Point};
use super::style::marker;
use super::{esc, style, text, value_label, HALO};
use crate::scale::ScaleRun;

pub const SCALE_TITLE: &str = "What does gangd cost as the cluster grows?";

/// A panel: the CSV column, its title, the value axis, the target if any.
struct Panel {
    column: &'static str,
    title: &'static str,
    ylabel: &'static str,
    target: Option<(f64, &'static str)>,
}

const PANELS: &[Panel] = &[
    Panel {
        column: "cpu_steady_pct",
        title: "gangd CPU, jobs switching",
        ylabel: "% of one core",
        target: Some((10.0, "target at 4096: 10 %")),
    },
    Panel {
        column: "cpu_idle_pct",
        title: "gangd CPU, no job",
        ylabel: "% of one core",
        target: None,
    },
    Panel {
        column: "place_all_ms",
        title: "a placement on every node",
        ylabel: "ms",
        target: Some((100.0, "target: 100 ms")),
    },
    Panel {
        column: "plan_p50_ms",
        title: "a plan to every node (timed), p50",
        ylabel: "ms",
        target: Some((100.0, "target at 4096: 100 ms")),
    },
    Panel {
        column: "switch_p99_ms",
        title: "switch, start to last Running, p99",
        ylabel: "ms",
        target: None,
    },
    Panel {
        column: "switches_per_s",
        title: "switches per second (100 ms slots)",
        ylabel: "switches / s",
        target: Some((10.0, "one per slot")),
    },
    Panel {
        column: "alloc_p99_us",
        title: "allocation decision, p99",
        ylabel: "µs",
        target: Some((1000.0, "target: 1 ms")),
    },
];

pub fn scale_svg(runs: &[ScaleRun]) -> String {
    let mut ns: Vec<u32> = runs
        .iter()
        .flat_map(|r| r.rows.iter().map(|x| x.nodes))
        .collect();
    ns.sort_unstable();
    ns.dedup();
    if ns.is_empty() {
        return empty_figure(SCALE_TITLE, "no run with a row");
    }
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    let (cols, rows) = grid(PANELS.len());
    let mut items: Vec<(Swatch, String)> = labels
        .iter()
        .map(|l| (Swatch::Line(style(&labels, l)), l.clone()))
        .collect();
    items.push((Swatch::Dashed, "issue 14's target".into()));
    let sub = [
        "gang-load's light agents on loopback against one gangd, 4 CPUs per node, 100 ms slots (scripts/bench_scale.sh);",
        "the agents share the machine's cores with gangd; a figure a run did not measure is a gap.",
    ];
    let mut page = Page::new(20.0 + cols as f64 * PANEL_W, SCALE_TITLE, &sub, &items);
    let (d, top) = (&mut page.doc, page.top);
    let cats: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
    for (i, p) in PANELS.iter().enumerate() {
        let area = panel_area(i, cols, top, PANEL_W);
        let value = |run: &ScaleRun, n: u32| {
            run.rows
                .iter()
                .find(|r| r.nodes == n)
                .and_then(|r| r.get(p.column))
        };
        let mut vals: Vec<f64> = runs
            .iter()
            .flat_map(|r| ns.iter().filter_map(|&n| value(r, n)))
            .collect();
        vals.extend(p.target.map(|t| t.0));
        let scale = Scale::fit(&vals, true, 8.0, 1.08);
        d.raw(&format!(
            "<g class=\"panel\" data-column=\"{}\">",
            esc(p.column)
        ));
        frame(d, &area, &scale, p.title, p.ylabel, "nodes", &cats);
        if let Some((v, l)) = p.target {
            reference(d, &area, &scale, v, l);
        }
        for run in runs {
            let st = style(&labels, &run.label);
            d.raw(&format!(
                "<g class=\"series\" data-run=\"{}\">",
                esc(&run.label)
            ));
            let pts: Vec<Option<Point>> = ns
                .iter()
                .enumerate()
                .map(|(k, &n)| {
                    let v = value(run, n)?;
                    Some(Point {
                        x: area.xcat(k, ns.len()),
                        y: area.ymap(&scale, v),
                        max: None,
                        v,
                    })
                })
                .collect();
            lines(d, &pts, st.colour);
            for (k, pt) in pts.iter().enumerate() {
                let Some(pt) = pt else { continue };
                d.raw(&format!(
                    "<g class=\"point\" data-nodes=\"{}\" data-value=\"{}\">{}</g>",
                    ns[k],
                    pt.v,
                    marker(&st, pt.x, pt.y, 4.5)
                ));
                text(
                    d,
                    (pt.x + 7.0, pt.y - 6.0),
                    10.0,
                    "start",
                    st.text,
                    &format!(" class=\"value\"{HALO}"),
                    &value_label(pt.v),
                );
            }
            d.raw("</g>");
        }
        d.raw("</g>");
    }
    page.finish(rows)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{count, panels};
    use super::*;
    use crate::scale::parse;

    fn run(label: &str, csv: &str) -> ScaleRun {
        ScaleRun {
            label: label.into(),
            rows: parse(label, csv).unwrap(),
        }
    }

    const BEFORE: &str = "nodes,cpu_steady_pct,place_all_ms,alloc_p99_us\n64,6.4,28.4,6.5\n1024,25.6,3681,60.3\n4096,,,2478\n";
    const AFTER: &str =
        "nodes,cpu_steady_pct,place_all_ms,alloc_p99_us\n64,2.0,24.5,4.4\n256,8.4,245.6,12.8\n";

    #[test]
    fn a_panel_per_figure_a_series_per_run_and_gaps_where_unmeasured() {
        let svg = scale_svg(&[run("before", BEFORE), run("after", AFTER)]);
        gang_plot::well_formed(&svg).unwrap();
        let ps = panels(&svg);
        assert_eq!(ps.len(), PANELS.len());
        let steady = ps
            .iter()
            .find(|p| p.contains("data-column=\"cpu_steady_pct\""))
            .unwrap();
        assert_eq!(count(steady, "class=\"series\""), 2);
        // before: 64 and 1024 (4096 unmeasured); after: 64 and 256.
        assert_eq!(count(steady, "class=\"point\""), 4, "{steady}");
        assert!(steady.contains("data-nodes=\"1024\" data-value=\"25.6\""));
        assert!(!steady.contains("data-nodes=\"4096\""), "a gap, not a zero");
        // The categories are the union of node counts.
        for n in ["64", "256", "1024", "4096"] {
            assert!(steady.contains(&format!(">{n}</text>")), "{n}");
        }
        let alloc = ps
            .iter()
            .find(|p| p.contains("data-column=\"alloc_p99_us\""))
            .unwrap();
        assert!(alloc.contains("data-nodes=\"4096\" data-value=\"2478\""));
        assert_eq!(count(alloc, "class=\"reference\""), 1, "the 1 ms target");
        let idle = ps
            .iter()
            .find(|p| p.contains("data-column=\"cpu_idle_pct\""))
            .unwrap();
        assert_eq!(count(idle, "class=\"point\""), 0, "no run measured it");
        let plan = ps
            .iter()
            .find(|p| p.contains("data-column=\"plan_p50_ms\""))
            .unwrap();
        assert_eq!(count(plan, "class=\"reference\""), 1, "the 100 ms target");
    }

    #[test]
    fn no_rows_is_a_figure_that_says_so() {
        let svg = scale_svg(&[]);
        gang_plot::well_formed(&svg).unwrap();
        assert!(svg.contains("no-data"));
    }
}
