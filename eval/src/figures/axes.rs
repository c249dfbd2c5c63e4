//! Panels and their value axes: where a panel sits on the page, the scale
//! of its values (linear from 0, or log when they span decades), its frame
//! (title, grid, ticks, categories, axis labels) and reference lines.
//!
//! Linear scales take their 1-2-5 steps and ticks from gang-plot; the log
//! scale is ours: 1-2-5 values around the data as its ends, ticks on 1-2-5
//! values over up to 2.5 decades, else on decades.
//!
//! Known faults: a log scale maps values at or below 0 to the bottom edge
//! (figures choose log only when every value is positive).

use super::{stroke, text, AXIS, HALO};
use gang_plot::{nice_range, tick_label, ticks, Doc};

/// A value axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Linear { lo: f64, hi: f64, step: f64 },
    Log { lo: f64, hi: f64 },
}

impl Scale {
    /// A scale holding every value and 0 (linear), or a log scale when
    /// `allow_log`, every value is positive and they span more than
    /// `log_ratio`. `headroom` stretches the top (room for labels).
    pub fn fit(values: &[f64], allow_log: bool, log_ratio: f64, headroom: f64) -> Scale {
        let vals: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if vals.is_empty() {
            return Scale::Linear {
                lo: 0.0,
                hi: 1.0,
                step: 0.2,
            };
        }
        if allow_log && min > 0.0 && max / min > log_ratio {
            // The nearest 1-2-5 values around the data.
            let steps = |v: f64| {
                let e = v.log10().floor() as i32;
                [-1, 0, 1]
                    .into_iter()
                    .flat_map(move |k| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e + k)))
            };
            let lo = steps(min)
                .filter(|c| *c <= min * 1.0001)
                .fold(f64::NAN, f64::max);
            let top = max * headroom;
            let hi = steps(top)
                .filter(|c| *c >= top * 0.9999)
                .fold(f64::NAN, f64::min);
            return Scale::Log { lo, hi };
        }
        let (lo, hi, step) = nice_range(min.min(0.0), (max * headroom).max(0.0), 5.0);
        Scale::Linear { lo, hi, step }
    }

    /// Pixel position between `bottom` (lo) and `top` (hi).
    pub fn map(&self, v: f64, bottom: f64, top: f64) -> f64 {
        let t = match *self {
            Scale::Linear { lo, hi, .. } => (v - lo) / (hi - lo),
            Scale::Log { lo, hi } => {
                (v.max(lo * 1e-3).log10() - lo.log10()) / (hi.log10() - lo.log10())
            }
        };
        bottom + (top - bottom) * t
    }

    /// Where a bar starts: 0 (linear) or the bottom of a log axis.
    pub fn base(&self) -> f64 {
        match *self {
            Scale::Linear { lo, .. } => lo.max(0.0),
            Scale::Log { lo, .. } => lo,
        }
    }

    pub fn ticks(&self) -> Vec<f64> {
        match *self {
            Scale::Linear { lo, hi, step } => ticks(lo, hi, step),
            Scale::Log { lo, hi } => {
                // 1-2-5 ticks over up to 2.5 decades, else decades; and the ends.
                let mults: &[f64] = if hi / lo <= 10f64.powf(2.5) {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let mut t = vec![lo];
                let mut d = 10f64.powf(lo.log10().floor());
                while d <= hi * 1.0001 {
                    for m in mults {
                        let v = d * m;
                        if v > lo * 1.0001 && v < hi * 0.9999 {
                            t.push(v);
                        }
                    }
                    d *= 10.0;
                }
                t.push(hi);
                t
            }
        }
    }

    /// The label of tick `v`: the decimals of the step (linear), of the
    /// value itself (log: every tick is a 1-2-5 value).
    fn label(&self, v: f64) -> String {
        match *self {
            Scale::Linear { step, .. } => tick_label(v, step),
            Scale::Log { .. } => tick_label(v, v),
        }
    }

    fn is_log(&self) -> bool {
        matches!(self, Scale::Log { .. })
    }
}

/// The plot area of one panel.
#[derive(Debug, Clone, Copy)]
pub struct Area {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Area {
    pub fn bottom(&self) -> f64 {
        self.y + self.h
    }
    pub fn ymap(&self, s: &Scale, v: f64) -> f64 {
        s.map(v, self.bottom(), self.y)
    }
    /// Centre of category `i` of `n`.
    pub fn xcat(&self, i: usize, n: usize) -> f64 {
        self.x + self.w * (i as f64 + 0.5) / n as f64
    }
}

pub const PANEL_W: f64 = 440.0;
pub const PANEL_H: f64 = 330.0;
/// Inside a panel box: room for the value axis, the title, the categories.
pub const PAD_L: f64 = 70.0;
pub const PAD_R: f64 = 24.0;
const PAD_T: f64 = 34.0;
const PAD_B: f64 = 56.0;
const GRID: &str = "#E4E4E4";

/// The plot area of panel `i` in a grid of `cols` columns of width `pw`
/// whose first row starts at `top`.
pub fn panel_area(i: usize, cols: usize, top: f64, pw: f64) -> Area {
    let (r, c) = (i / cols, i % cols);
    Area {
        x: 10.0 + c as f64 * pw + PAD_L,
        y: top + r as f64 * PANEL_H + PAD_T,
        w: pw - PAD_L - PAD_R,
        h: PANEL_H - PAD_T - PAD_B,
    }
}

/// (columns, rows) for `n` panels: up to three a row.
pub fn grid(n: usize) -> (usize, usize) {
    let cols = n.clamp(1, 3);
    (cols, n.div_ceil(cols))
}

/// Panel title, grid, value axis with ticks, category labels, axis labels.
pub fn frame(
    d: &mut Doc,
    a: &Area,
    s: &Scale,
    title: &str,
    ylabel: &str,
    xlabel: &str,
    cats: &[String],
) {
    text(
        d,
        (a.x + a.w / 2.0, a.y - 12.0),
        13.0,
        "middle",
        "#000000",
        " font-weight=\"bold\"",
        title,
    );
    for t in s.ticks() {
        let y = a.ymap(s, t);
        d.line((a.x, y), (a.x + a.w, y), &stroke(GRID, 1.0));
        text(d, (a.x - 6.0, y + 4.0), 11.0, "end", AXIS, "", &s.label(t));
    }
    if let Scale::Linear { lo, .. } = s {
        if *lo < 0.0 {
            let y = a.ymap(s, 0.0);
            d.line((a.x, y), (a.x + a.w, y), &stroke(AXIS, 1.0));
        }
    }
    d.line((a.x, a.y), (a.x, a.bottom()), &stroke(AXIS, 1.0));
    d.line(
        (a.x, a.bottom()),
        (a.x + a.w, a.bottom()),
        &stroke(AXIS, 1.0),
    );
    for (i, c) in cats.iter().enumerate() {
        let x = a.xcat(i, cats.len());
        d.line((x, a.bottom()), (x, a.bottom() + 4.0), &stroke(AXIS, 1.0));
        text(d, (x, a.bottom() + 17.0), 11.0, "middle", AXIS, "", c);
    }
    text(
        d,
        (a.x + a.w / 2.0, a.bottom() + 36.0),
        12.0,
        "middle",
        "#000000",
        "",
        xlabel,
    );
    let yl = if s.is_log() {
        format!("{ylabel}, log scale")
    } else {
        ylabel.to_string()
    };
    let (lx, ly) = (a.x - 46.0, a.y + a.h / 2.0);
    text(
        d,
        (lx, ly),
        12.0,
        "middle",
        "#000000",
        &super::rotated(lx, ly),
        &yl,
    );
}

/// The dash pattern of reference lines.
pub const DASHED: &str = " stroke-dasharray=\"6 4\"";

/// A horizontal reference line across a panel, labelled at its right end.
pub fn reference(d: &mut Doc, a: &Area, s: &Scale, v: f64, label: &str) {
    let y = a.ymap(s, v);
    d.raw(&gang_plot::element(
        "line",
        " class=\"reference\"",
        &[("x1", a.x), ("y1", y), ("x2", a.x + a.w), ("y2", y)],
        &format!("{}{DASHED}", stroke("#000000", 1.2)),
    ));
    if !label.is_empty() {
        text(
            d,
            (a.x + a.w - 2.0, y - 4.0),
            10.0,
            "end",
            "#000000",
            HALO,
            label,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_scale_when_the_range_is_wide() {
        assert!(matches!(
            Scale::fit(&[0.5, 200.0], true, 20.0, 1.0),
            Scale::Log { .. }
        ));
        assert!(matches!(
            Scale::fit(&[-1.0, 200.0], true, 20.0, 1.0),
            Scale::Linear { .. }
        ));
        assert!(matches!(
            Scale::fit(&[5.0, 20.0], true, 20.0, 1.0),
            Scale::Linear { .. }
        ));
        let s = Scale::fit(&[0.5, 200.0], true, 20.0, 1.0);
        assert_eq!(s.ticks(), vec![0.5, 1.0, 10.0, 100.0, 200.0]);
        let l = Scale::fit(&[1.0, 2.3], false, 0.0, 1.0);
        assert_eq!(
            l,
            Scale::Linear {
                lo: 0.0,
                hi: 2.5,
                step: 0.5
            }
        );
    }

    #[test]
    fn tick_labels_have_the_decimals_they_need() {
        let l = Scale::fit(&[1.0, 2.3], false, 0.0, 1.0);
        let labels: Vec<String> = l.ticks().iter().map(|t| l.label(*t)).collect();
        assert_eq!(labels, ["0", "0.5", "1", "1.5", "2", "2.5"]);
        let s = Scale::fit(&[0.5, 200.0], true, 20.0, 1.0);
        let labels: Vec<String> = s.ticks().iter().map(|t| s.label(*t)).collect();
        assert_eq!(labels, ["0.5", "1", "10", "100", "200"]);
    }
}
