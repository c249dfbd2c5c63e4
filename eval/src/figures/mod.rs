//! Hand-written SVG figures, one per question:
//!
//! - slowdown.svg: how much slower does each job run when jobs share the
//!   cluster? (panel per workload, x = MPL, lines per policy, max whiskers)
//! - makespan.svg: how long does the whole batch take against running the
//!   jobs one after another? (grouped bars per MPL, panel per workload)
//! - switch_overhead.svg: what does one slot switch cost? (bars per
//!   switching policy, per workload at its highest MPL)
//! - short_job.svg: how long does a short job take behind long ones, against
//!   a FIFO queue and against running alone? (bars per policy)
//! - scale.svg: what does gangd cost as the cluster grows? (the load
//!   harness's figures against N, a line per run; issue 14)
//!
//! Every figure states its question in the title, labels its axes with
//! units, has a legend and prints each value. A policy keeps one colour (the
//! Okabe-Ito colour-blind-safe palette, fixed for the known policy names)
//! and one marker shape in every figure. A missing value is a gap: no
//! marker, no bar, a broken line; never a zero. Each policy's marks are in
//! one `<g class="series" data-policy="...">` per panel, and each point or
//! bar carries its `data-value`, so the figures can be checked by a program.
//!
//! Layout: one file per figure (slowdown, makespan, switch, short_job);
//! what they share is here (text, strokes, value labels, which policies and
//! workloads a figure shows), in `style` (a policy's colour and marker),
//! `axes` (panels, scales, frames), `bars` (grouped bars) and `page`
//! (title, subtitle, legend). The SVG document, escaping, numbers, ticks
//! and text widths are gang-plot's, the toolkit the trace timelines use too;
//! the tests check every figure with its `well_formed`.
//!
//! Known faults: text sizes are estimated, not measured (see gang-plot);
//! value labels of close points are pushed apart vertically only.

mod axes;
mod bars;
mod makespan;
mod page;
mod scale;
mod short_job;
mod slowdown;
mod style;
mod switch;

pub use axes::Scale;
pub use makespan::makespan_svg;
pub use scale::{scale_svg, SCALE_TITLE};
pub use short_job::short_job_svg;
pub use slowdown::slowdown_svg;
pub use style::{style, Marker, Style};
pub use switch::switch_overhead_svg;

use crate::metrics::Analysis;
use gang_plot::{esc, num, Doc};
use page::Swatch;

pub const SLOWDOWN_TITLE: &str = "How much slower does each job run when jobs share the cluster?";
pub const MAKESPAN_TITLE: &str =
    "How long does the whole batch take, against running its jobs one after another?";
pub const SWITCH_TITLE: &str = "What does one slot switch cost?";
pub const SHORT_TITLE: &str = "How long does a short job take when it arrives behind long jobs?";

/// Every figure, by file name.
pub fn figures(a: &Analysis) -> Vec<(&'static str, String)> {
    vec![
        ("slowdown.svg", slowdown_svg(a)),
        ("makespan.svg", makespan_svg(a)),
        ("switch_overhead.svg", switch_overhead_svg(a)),
        ("short_job.svg", short_job_svg(a)),
    ]
}

const AXIS: &str = "#444444";
/// A white outline behind a label, so that it stays readable over lines.
const HALO: &str =
    " paint-order=\"stroke\" stroke=\"#FFFFFF\" stroke-width=\"3\" stroke-linejoin=\"round\"";

/// A text of `size` px anchored at `anchor`, in `fill`; `extra` is more
/// attribute markup.
fn text(
    d: &mut Doc,
    at: (f64, f64),
    size: f64,
    anchor: &str,
    fill: &str,
    extra: &str,
    content: &str,
) {
    let attrs = format!(" font-size=\"{size}\" text-anchor=\"{anchor}\" fill=\"{fill}\"{extra}");
    d.text(at, &attrs, content);
}

/// Stroke attributes: colour and width.
fn stroke(colour: &str, width: f64) -> String {
    format!(" stroke=\"{colour}\" stroke-width=\"{width}\"")
}

/// Turns a text a quarter left about (x, y): reads upwards.
fn rotated(x: f64, y: f64) -> String {
    format!(" transform=\"rotate(-90 {} {})\"", num(x), num(y))
}

/// A value label: 3 significant digits, at most 2 decimals for small values.
pub fn value_label(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Legend entries of `pols`: their lines with markers, or their bars.
fn policy_items(a: &Analysis, pols: &[String], bars: bool) -> Vec<(Swatch<'static>, String)> {
    pols.iter()
        .map(|p| {
            let st = style(&a.policies, p);
            let sw = if bars {
                Swatch::Bar(st.colour)
            } else {
                Swatch::Line(st)
            };
            (sw, p.clone())
        })
        .collect()
}

/// Policies (not the baseline) with at least one cell of `w`.
fn policies_of(a: &Analysis, w: &str) -> Vec<String> {
    a.shared_policies()
        .into_iter()
        .filter(|p| a.cells.iter().any(|c| &c.policy == p && c.workload == w))
        .collect()
}

/// Workloads with at least one non-baseline cell.
fn shared_workloads(a: &Analysis) -> Vec<String> {
    a.workloads
        .iter()
        .filter(|w| !a.mpls_of(w).is_empty())
        .cloned()
        .collect()
}

/// The panel of one workload in a figure with a panel per workload.
struct WorkloadPanel<'a> {
    w: &'a str,
    area: axes::Area,
    /// Its MPLs, ascending (the categories along x) and as labels.
    mpls: Vec<u32>,
    cats: Vec<String>,
    /// Policies (not the baseline) with a cell of the workload.
    pols: Vec<String>,
}

/// The panels of `ws`, `cols` a row, the first row at `top`.
fn workload_panels<'a>(
    a: &Analysis,
    ws: &'a [String],
    cols: usize,
    top: f64,
) -> Vec<WorkloadPanel<'a>> {
    ws.iter()
        .enumerate()
        .map(|(i, w)| {
            let mpls = a.mpls_of(w);
            WorkloadPanel {
                w,
                area: axes::panel_area(i, cols, top, axes::PANEL_W),
                cats: mpls.iter().map(|m| m.to_string()).collect(),
                mpls,
                pols: policies_of(a, w),
            }
        })
        .collect()
}

/// Policies (not the baseline) with a cell in any of `ws`.
fn policies_of_any(a: &Analysis, ws: &[String]) -> Vec<String> {
    a.shared_policies()
        .into_iter()
        .filter(|p| ws.iter().any(|w| policies_of(a, w).contains(p)))
        .collect()
}

/// What the figures' tests share: a small analysis and ways to cut a figure.
#[cfg(test)]
pub(crate) mod testing {
    use crate::metrics::{analyse, Analysis};
    use crate::records::Log;

    /// Panels of a figure: the text of each `<g class="panel" ...>` up to
    /// its matching `</g>`.
    pub fn panels(svg: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(p) = svg[from..].find("<g class=\"panel\"") {
            let start = from + p;
            let mut depth = 0;
            let mut k = start;
            loop {
                let next_open = svg[k..].find("<g").map(|x| x + k);
                let next_close = svg[k..].find("</g>").map(|x| x + k).expect("closed");
                match next_open {
                    Some(o) if o < next_close => {
                        depth += 1;
                        k = o + 2;
                    }
                    _ => {
                        depth -= 1;
                        k = next_close + 4;
                        if depth == 0 {
                            break;
                        }
                    }
                }
            }
            out.push(&svg[start..k]);
            from = k;
        }
        out
    }

    pub fn count(h: &str, n: &str) -> usize {
        h.matches(n).count()
    }

    pub fn sample() -> Analysis {
        let mut text = String::new();
        for w in ["ep", "rt"] {
            text += &format!("job policy=dedicated workload={w} mpl=1 rep=0 idx=0 submit_ms=0 end_ms=10000 rc=0 ranks=2 ranks_ok=2\n");
        }
        for (p, f) in [
            ("eevdf", 2.0),
            ("gang-strict", 1.05),
            ("signal", 1.3),
            ("my<pol>&", 1.5),
        ] {
            for w in ["ep", "rt"] {
                for m in [1u32, 2, 3] {
                    // gang-strict has no rt mpl=2: a gap.
                    if p == "gang-strict" && w == "rt" && m == 2 {
                        continue;
                    }
                    for i in 0..m {
                        let end = 10_000.0 * f * m as f64 + i as f64 * 100.0;
                        text += &format!("job policy={p} workload={w} mpl={m} rep=0 idx={i} submit_ms=0 end_ms={end} rc=0 ranks=2 ranks_ok=2\n");
                    }
                    let sw = if p == "eevdf" { 0 } else { 50 * m };
                    text += &format!("cell policy={p} workload={w} mpl={m} rep=0 switches={sw}\n");
                }
            }
            text += &format!("short policy={p} rep=0 workload=rt behind=2 long_workload=ep first_long_submit_ms=0 submit_ms=1000 end_ms=5000 rc=0 ranks=2 ranks_ok=2\n");
        }
        let mut l = Log::default();
        l.add_str("s", &text).unwrap();
        analyse(&l, None)
    }
}

#[cfg(test)]
mod tests {
    use super::style::EXTRA_COLOURS;
    use super::testing::sample;
    use super::*;
    use crate::metrics::analyse;
    use crate::records::Log;
    use gang_plot::well_formed;

    #[test]
    fn every_figure_is_well_formed_and_asks_its_question() {
        let a = sample();
        let figs = figures(&a);
        assert_eq!(figs.len(), 4);
        for (name, svg) in &figs {
            well_formed(svg).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(svg.contains("class=\"legend\""), "{name}");
            assert!(svg.contains("class=\"value\""), "{name}: values labelled");
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{name}");
        }
        assert!(figs[0].1.contains(&esc(SLOWDOWN_TITLE)));
        assert!(figs[0].1.contains("MPL (jobs sharing the cluster)"));
        assert!(figs[0].1.contains("mean slowdown (× dedicated time)"));
        assert!(figs[2].1.contains("overhead per switch (ms)"));
        assert!(figs[3].1.contains("response time (s)"));
    }

    #[test]
    fn colours_are_fixed_per_policy_and_shared_across_figures() {
        let a = sample();
        let pols = a.policies.clone();
        assert_eq!(style(&pols, "gang-strict").colour, "#0072B2");
        assert_eq!(style(&pols, "eevdf").colour, "#E69F00");
        // Known policies keep their colours whatever the order.
        let rev: Vec<String> = pols.iter().rev().cloned().collect();
        assert_eq!(style(&rev, "signal"), style(&pols, "signal"));
        assert_eq!(style(&pols, "my<pol>&").colour, EXTRA_COLOURS[0].0);
        let mk = makespan_svg(&a);
        let g = &mk[mk.find("class=\"series\" data-policy=\"signal\"").unwrap()..];
        let bar = &g[g.find("<rect class=\"bar\"").unwrap()..];
        assert!(bar[..bar.find("/>").unwrap()].contains("fill=\"#D55E00\""));
        let sl = slowdown_svg(&a);
        let s = &sl[sl.find("data-policy=\"signal\"").unwrap()..];
        assert!(s[..400].contains("#D55E00"));
    }

    #[test]
    fn empty_inputs_give_a_figure_that_says_so() {
        let a = analyse(&Log::default(), None);
        for (name, svg) in figures(&a) {
            well_formed(&svg).unwrap();
            assert!(svg.contains("class=\"no-data\""), "{name}");
        }
    }
}
