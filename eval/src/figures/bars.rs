//! Grouped bars in one panel (makespan, switch overhead): categories along
//! x, one bar per series in each, its value printed past its end.
//!
//! A bar starts at the scale's base (0, or the bottom of a log axis) and
//! grows up, or down for a value below it. A missing value is no bar.
//!
//! Known faults: with many series the bars get thin (at most 40 px each,
//! 80% of a category's width shared) and their rotated labels may touch.

use super::axes::{Area, Scale};
use super::style::OUTLINE;
use super::{esc, text, value_label, HALO};
use gang_plot::{element, Doc};

/// Grouped bars: categories × series, each value Option.
pub struct Bars<'a> {
    pub cats: Vec<String>,
    /// (policy or name, colour, values per category)
    pub series: Vec<(String, &'a str, Vec<Option<f64>>)>,
    /// data-* name of the category (mpl, workload, ...), and its values.
    pub cat_key: (&'a str, Vec<String>),
}

pub fn draw_bars(d: &mut Doc, area: &Area, scale: &Scale, b: &Bars) {
    let nc = b.cats.len().max(1);
    let ns = b.series.len().max(1);
    let slot = area.w / nc as f64;
    let bw = (slot * 0.8 / ns as f64).min(40.0);
    let base = scale.base();
    let y0 = area.ymap(scale, base);
    for (k, (name, colour, vals)) in b.series.iter().enumerate() {
        d.raw(&format!(
            "<g class=\"series\" data-policy=\"{}\">",
            esc(name)
        ));
        for (i, v) in vals.iter().enumerate() {
            let Some(v) = v else { continue };
            let x = area.xcat(i, nc) + (k as f64 - ns as f64 / 2.0) * bw;
            let y = area.ymap(scale, *v);
            let (top, h) = if y < y0 { (y, y0 - y) } else { (y0, y - y0) };
            d.raw(&element(
                "rect",
                &format!(
                    " class=\"bar\" data-{}=\"{}\" data-value=\"{v}\"",
                    b.cat_key.0,
                    esc(&b.cat_key.1[i])
                ),
                &[
                    ("x", x),
                    ("y", top),
                    ("width", (bw - 1.0).max(1.0)),
                    ("height", h.max(0.5)),
                ],
                &format!(" fill=\"{colour}\" stroke=\"{OUTLINE}\" stroke-width=\"0.6\""),
            ));
            // The value, rotated, just past the bar's end.
            let cx = x + bw / 2.0 + 3.5;
            let (ly, anchor) = if *v >= base {
                (y - 4.0, "start")
            } else {
                (y + 4.0, "end")
            };
            text(
                d,
                (cx, ly),
                10.0,
                anchor,
                "#222222",
                &format!(" class=\"value\"{}{HALO}", super::rotated(cx, ly)),
                &value_label(*v),
            );
        }
        d.raw("</g>");
    }
}
