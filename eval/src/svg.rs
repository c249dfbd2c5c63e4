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
//!
//! Every figure states its question in the title, labels its axes with
//! units, has a legend and prints each value. A policy keeps one colour (the
//! Okabe-Ito colour-blind-safe palette, fixed for the known policy names)
//! and one marker shape in every figure. A missing value is a gap: no
//! marker, no bar, a broken line; never a zero. Each policy's marks are in
//! one `<g class="series" data-policy="...">` per panel, and each point or
//! bar carries its `data-value`, so the figures can be checked by a program.

use crate::metrics::Analysis;
use crate::{DEDICATED, KNOWN_POLICIES};
use std::fmt::Write as _;

/// Colour (marks), colour (text on white) for the known policies, in the
/// order of [`KNOWN_POLICIES`]: Okabe-Ito.
const KNOWN_COLOURS: &[(&str, &str)] = &[
    ("#000000", "#000000"), // dedicated: black
    ("#E69F00", "#9A6A00"), // eevdf: orange
    ("#56B4E9", "#1F78B4"), // bpfland: sky blue
    ("#D55E00", "#B34D00"), // signal: vermillion
    ("#CC79A7", "#A0507D"), // spinblock: reddish purple
    ("#F0E442", "#8F8500"), // gang-off: yellow
    ("#0072B2", "#0072B2"), // gang-strict: blue
    ("#009E73", "#007A59"), // gang-yield: bluish green
];

/// For other names, in order of appearance (Paul Tol's muted scheme).
const EXTRA_COLOURS: &[(&str, &str)] = &[
    ("#882255", "#882255"),
    ("#44AA99", "#2E7D70"),
    ("#332288", "#332288"),
    ("#999933", "#6E6E1F"),
    ("#AA4499", "#AA4499"),
    ("#117733", "#117733"),
    ("#88CCEE", "#3A8FB7"),
    ("#DDCC77", "#8C7A1E"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    TriangleDown,
    Cross,
    Star,
    Hexagon,
}

/// Markers of the known policies, in the order of [`KNOWN_POLICIES`]: all
/// different, so a policy is told by its shape too.
const KNOWN_MARKERS: [Marker; 8] = [
    Marker::Hexagon,      // dedicated
    Marker::Square,       // eevdf
    Marker::Triangle,     // bpfland
    Marker::Diamond,      // signal
    Marker::TriangleDown, // spinblock
    Marker::Cross,        // gang-off
    Marker::Circle,       // gang-strict
    Marker::Star,         // gang-yield
];

/// Markers of other names, in order of appearance.
const MARKERS: [Marker; 8] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
    Marker::TriangleDown,
    Marker::Cross,
    Marker::Star,
    Marker::Hexagon,
];

/// How one policy is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub colour: &'static str,
    pub text: &'static str,
    pub marker: Marker,
}

/// The style of `policy`; `policies` is the display order (it decides the
/// style of names that are not known).
pub fn style(policies: &[String], policy: &str) -> Style {
    if let Some(i) = KNOWN_POLICIES.iter().position(|k| *k == policy) {
        let (colour, text) = KNOWN_COLOURS[i];
        return Style {
            colour,
            text,
            marker: KNOWN_MARKERS[i],
        };
    }
    let nth = policies
        .iter()
        .filter(|p| !KNOWN_POLICIES.contains(&p.as_str()))
        .position(|p| p == policy)
        .unwrap_or(0);
    let (colour, text) = EXTRA_COLOURS[nth % EXTRA_COLOURS.len()];
    Style {
        colour,
        text,
        marker: MARKERS[nth % MARKERS.len()],
    }
}

/// XML text / attribute escaping.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const GRID: &str = "#E4E4E4";
const AXIS: &str = "#444444";
const FIFO_FILL: &str = "#BBBBBB";
/// A white outline behind a label, so that it stays readable over lines.
const HALO: &str =
    " paint-order=\"stroke\" stroke=\"#FFFFFF\" stroke-width=\"3\" stroke-linejoin=\"round\"";

/// An SVG document being written.
struct Doc {
    s: String,
}

impl Doc {
    fn new(w: f64, h: f64) -> Doc {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"{FONT}\" font-size=\"12\">"
        );
        let _ = writeln!(
            s,
            "<rect x=\"0\" y=\"0\" width=\"{w:.0}\" height=\"{h:.0}\" fill=\"#FFFFFF\"/>"
        );
        Doc { s }
    }

    fn raw(&mut self, t: &str) {
        self.s.push_str(t);
        self.s.push('\n');
    }

    fn text(
        &mut self,
        (x, y): (f64, f64),
        size: f64,
        anchor: &str,
        fill: &str,
        extra: &str,
        content: &str,
    ) {
        let _ = writeln!(
            self.s,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" text-anchor=\"{anchor}\" fill=\"{fill}\"{extra}>{}</text>",
            esc(content)
        );
    }

    fn line(
        &mut self,
        (x1, y1): (f64, f64),
        (x2, y2): (f64, f64),
        stroke: &str,
        width: f64,
        extra: &str,
    ) {
        let _ = writeln!(
            self.s,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{stroke}\" stroke-width=\"{width}\"{extra}/>"
        );
    }

    fn finish(mut self) -> String {
        self.s.push_str("</svg>\n");
        self.s
    }
}

/// A marker of `style` centred on (x, y).
fn marker(style: &Style, x: f64, y: f64, r: f64) -> String {
    let fill = style.colour;
    let stroke = "#333333";
    match style.marker {
        Marker::Circle => format!(
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r:.1}\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"0.8\"/>"
        ),
        Marker::Square => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"0.8\"/>",
            x - r * 0.9,
            y - r * 0.9,
            r * 1.8,
            r * 1.8
        ),
        Marker::Triangle => poly(&[(x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)], fill, stroke),
        Marker::TriangleDown => poly(&[(x, y + r * 1.2), (x + r * 1.1, y - r * 0.8), (x - r * 1.1, y - r * 0.8)], fill, stroke),
        Marker::Diamond => poly(&[(x, y - r * 1.3), (x + r * 1.1, y), (x, y + r * 1.3), (x - r * 1.1, y)], fill, stroke),
        Marker::Star => {
            let pts: Vec<(f64, f64)> = (0..10)
                .map(|i| {
                    let ang = std::f64::consts::PI * (i as f64 / 5.0 - 0.5);
                    let rr = if i % 2 == 0 { r * 1.45 } else { r * 0.6 };
                    (x + rr * ang.cos(), y + rr * ang.sin())
                })
                .collect();
            poly(&pts, fill, stroke)
        }
        Marker::Hexagon => {
            let pts: Vec<(f64, f64)> = (0..6)
                .map(|i| {
                    let ang = std::f64::consts::PI * i as f64 / 3.0;
                    (x + r * 1.1 * ang.cos(), y + r * 1.1 * ang.sin())
                })
                .collect();
            poly(&pts, fill, stroke)
        }
        Marker::Cross => {
            let a = r * 0.45;
            let b = r * 1.2;
            poly(
                &[
                    (x - a, y - b), (x + a, y - b), (x + a, y - a), (x + b, y - a), (x + b, y + a), (x + a, y + a),
                    (x + a, y + b), (x - a, y + b), (x - a, y + a), (x - b, y + a), (x - b, y - a), (x - a, y - a),
                ],
                fill,
                stroke,
            )
        }
    }
}

fn poly(pts: &[(f64, f64)], fill: &str, stroke: &str) -> String {
    let p: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    format!(
        "<polygon points=\"{}\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"0.8\"/>",
        p.join(" ")
    )
}

/// A value axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Linear { lo: f64, hi: f64, step: f64 },
    Log { lo: f64, hi: f64 },
}

fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let e = raw.log10().floor();
    let base = 10f64.powf(e);
    let f = raw / base;
    let n = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * base
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
        let lo0 = min.min(0.0);
        let hi0 = (max * headroom).max(0.0);
        let hi0 = if hi0 <= lo0 { lo0 + 1.0 } else { hi0 };
        let step = nice_step((hi0 - lo0) / 5.0);
        let lo = (lo0 / step).floor() * step;
        let hi = (hi0 / step).ceil() * step;
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
            Scale::Linear { lo, hi, step } => {
                let n = ((hi - lo) / step).round() as i64;
                (0..=n).map(|i| lo + i as f64 * step).collect()
            }
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

    fn is_log(&self) -> bool {
        matches!(self, Scale::Log { .. })
    }
}

/// A tick label: as few decimals as the value needs.
fn tick_label(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    if s == "-0" {
        "0".into()
    } else {
        s
    }
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

/// The plot area of one panel.
#[derive(Debug, Clone, Copy)]
struct Area {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Area {
    fn bottom(&self) -> f64 {
        self.y + self.h
    }
    fn ymap(&self, s: &Scale, v: f64) -> f64 {
        s.map(v, self.bottom(), self.y)
    }
    /// Centre of category `i` of `n`.
    fn xcat(&self, i: usize, n: usize) -> f64 {
        self.x + self.w * (i as f64 + 0.5) / n as f64
    }
}

/// Panel title, grid, value axis with ticks, category labels, axis labels.
fn frame(
    d: &mut Doc,
    a: &Area,
    s: &Scale,
    title: &str,
    ylabel: &str,
    xlabel: &str,
    cats: &[String],
) {
    d.text(
        (a.x + a.w / 2.0, a.y - 12.0),
        13.0,
        "middle",
        "#000000",
        " font-weight=\"bold\"",
        title,
    );
    for t in s.ticks() {
        let y = a.ymap(s, t);
        d.line((a.x, y), (a.x + a.w, y), GRID, 1.0, "");
        d.text((a.x - 6.0, y + 4.0), 11.0, "end", AXIS, "", &tick_label(t));
    }
    if let Scale::Linear { lo, .. } = s {
        if *lo < 0.0 {
            let y = a.ymap(s, 0.0);
            d.line((a.x, y), (a.x + a.w, y), AXIS, 1.0, "");
        }
    }
    d.line((a.x, a.y), (a.x, a.bottom()), AXIS, 1.0, "");
    d.line((a.x, a.bottom()), (a.x + a.w, a.bottom()), AXIS, 1.0, "");
    for (i, c) in cats.iter().enumerate() {
        let x = a.xcat(i, cats.len());
        d.line((x, a.bottom()), (x, a.bottom() + 4.0), AXIS, 1.0, "");
        d.text((x, a.bottom() + 17.0), 11.0, "middle", AXIS, "", c);
    }
    d.text(
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
    d.text(
        (lx, ly),
        12.0,
        "middle",
        "#000000",
        &format!(" transform=\"rotate(-90 {lx:.1} {ly:.1})\""),
        &yl,
    );
}

/// A horizontal reference line across a panel, labelled at its right end.
fn reference(d: &mut Doc, a: &Area, s: &Scale, v: f64, label: &str) {
    let y = a.ymap(s, v);
    d.raw(&format!(
        "<line class=\"reference\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#000000\" stroke-width=\"1.2\" stroke-dasharray=\"6 4\"/>",
        a.x,
        a.x + a.w
    ));
    if !label.is_empty() {
        d.text(
            (a.x + a.w - 2.0, y - 4.0),
            10.0,
            "end",
            "#000000",
            HALO,
            label,
        );
    }
}

enum Swatch<'a> {
    /// A policy's line with its marker.
    Line(Style),
    /// A policy's bar.
    Bar(&'a str),
    /// A dashed reference line.
    Dashed,
    /// A faint whisker.
    Whisker,
}

/// Lays the legend out in rows within `width`, from `y`; returns the y below it.
fn legend(d: &mut Doc, x0: f64, y: f64, width: f64, items: &[(Swatch, String)]) -> f64 {
    let mut x = x0;
    let mut y = y;
    d.raw("<g class=\"legend\">");
    for (sw, label) in items {
        let w = 34.0 + label.chars().count() as f64 * 6.8;
        if x + w > x0 + width && x > x0 {
            x = x0;
            y += 20.0;
        }
        match sw {
            Swatch::Line(st) => {
                d.line((x, y), (x + 24.0, y), st.colour, 2.5, "");
                d.raw(&marker(st, x + 12.0, y, 4.5));
            }
            Swatch::Bar(fill) => d.raw(&format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"24\" height=\"12\" fill=\"{fill}\" stroke=\"#333333\" stroke-width=\"0.6\"/>",
                x,
                y - 6.0
            )),
            Swatch::Dashed => d.line((x, y), (x + 24.0, y), "#000000", 1.2, " stroke-dasharray=\"6 4\""),
            Swatch::Whisker => {
                d.line((x + 12.0, y - 7.0), (x + 12.0, y + 7.0), "#555555", 1.5, " stroke-opacity=\"0.5\"");
                d.line((x + 8.0, y - 7.0), (x + 16.0, y - 7.0), "#555555", 1.5, " stroke-opacity=\"0.5\"");
            }
        }
        d.text((x + 30.0, y + 4.0), 12.0, "start", "#000000", "", label);
        x += w;
    }
    d.raw("</g>");
    y + 20.0
}

/// Title (the question), subtitle (what is plotted), legend; returns the y
/// where panels may start.
fn header(
    d: &mut Doc,
    width: f64,
    title: &str,
    subtitle: &[&str],
    items: &[(Swatch, String)],
) -> f64 {
    d.text(
        (20.0, 28.0),
        17.0,
        "start",
        "#000000",
        " font-weight=\"bold\"",
        title,
    );
    let mut y = 48.0;
    for s in subtitle {
        d.text((20.0, y), 12.0, "start", "#444444", "", s);
        y += 16.0;
    }
    legend(d, 20.0, y + 6.0, width - 40.0, items) + 22.0
}

/// Width a figure needs for its title and subtitle (estimated from the
/// number of characters).
fn text_width(title: &str, subtitle: &[&str]) -> f64 {
    let t = title.chars().count() as f64 * 17.0 * 0.6;
    let s = subtitle
        .iter()
        .map(|l| l.chars().count() as f64 * 12.0 * 0.56)
        .fold(0.0, f64::max);
    40.0 + t.max(s)
}

/// Height of the header for a given legend, computed by a dry run.
fn header_height(width: f64, title: &str, subtitle: &[&str], items: &[(Swatch, String)]) -> f64 {
    let mut dry = Doc { s: String::new() };
    header(&mut dry, width, title, subtitle, items)
}

/// A figure with nothing to show (the file exists and says why).
fn empty_figure(title: &str, why: &str) -> String {
    let mut d = Doc::new(720.0, 120.0);
    d.text(
        (20.0, 28.0),
        17.0,
        "start",
        "#000000",
        " font-weight=\"bold\"",
        title,
    );
    d.text(
        (20.0, 70.0),
        13.0,
        "start",
        "#444444",
        " class=\"no-data\"",
        &format!("No data: {why}"),
    );
    d.finish()
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

const PANEL_W: f64 = 440.0;
const PANEL_H: f64 = 330.0;
/// Inside a panel box: room for the value axis, the title, the categories.
const PAD_L: f64 = 70.0;
const PAD_R: f64 = 24.0;
const PAD_T: f64 = 34.0;
const PAD_B: f64 = 56.0;

fn panel_area(i: usize, cols: usize, top: f64, pw: f64) -> Area {
    let (r, c) = (i / cols, i % cols);
    Area {
        x: 10.0 + c as f64 * pw + PAD_L,
        y: top + r as f64 * PANEL_H + PAD_T,
        w: pw - PAD_L - PAD_R,
        h: PANEL_H - PAD_T - PAD_B,
    }
}

fn grid(n: usize) -> (usize, usize) {
    let cols = n.clamp(1, 3);
    (cols, n.div_ceil(cols))
}

pub const SLOWDOWN_TITLE: &str = "How much slower does each job run when jobs share the cluster?";
pub const MAKESPAN_TITLE: &str =
    "How long does the whole batch take, against running its jobs one after another?";
pub const SWITCH_TITLE: &str = "What does one slot switch cost?";
pub const SHORT_TITLE: &str = "How long does a short job take when it arrives behind long jobs?";

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

/// A plotted mean (pixels), its max and value.
struct Point {
    x: f64,
    y: f64,
    max: Option<f64>,
    v: f64,
}

/// A value label of one point.
#[derive(Clone)]
struct Label {
    y: f64,
    text: String,
    colour: &'static str,
}

pub fn slowdown_svg(a: &Analysis) -> String {
    let ws = shared_workloads(a);
    let all_pols: Vec<String> = a
        .shared_policies()
        .into_iter()
        .filter(|p| ws.iter().any(|w| policies_of(a, w).contains(p)))
        .collect();
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
    let width = (20.0 + cols as f64 * PANEL_W).max(text_width(SLOWDOWN_TITLE, &sub));
    let top = header_height(width, SLOWDOWN_TITLE, &sub, &items);
    let mut d = Doc::new(width, top + rows as f64 * PANEL_H + 10.0);
    header(&mut d, width, SLOWDOWN_TITLE, &sub, &items);

    for (pi, w) in ws.iter().enumerate() {
        let area = panel_area(pi, cols, top, PANEL_W);
        let mpls = a.mpls_of(w);
        let pols = policies_of(a, w);
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
        let cats: Vec<String> = mpls.iter().map(|m| m.to_string()).collect();
        d.raw(&format!("<g class=\"panel\" data-workload=\"{}\">", esc(w)));
        frame(
            &mut d,
            &area,
            &scale,
            &format!("workload {w}"),
            "mean slowdown (× dedicated time)",
            "MPL (jobs sharing the cluster)",
            &cats,
        );
        reference(&mut d, &area, &scale, 1.0, "dedicated");
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
            // Lines only between neighbouring present points: gaps stay gaps.
            let mut run: Vec<(f64, f64)> = Vec::new();
            let flush = |run: &mut Vec<(f64, f64)>, d: &mut Doc| {
                if run.len() >= 2 {
                    let path: Vec<String> = run
                        .iter()
                        .enumerate()
                        .map(|(i, (x, y))| {
                            format!("{}{x:.1} {y:.1}", if i == 0 { "M" } else { "L" })
                        })
                        .collect();
                    d.raw(&format!(
                        "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.2\"/>",
                        path.join(" "),
                        st.colour
                    ));
                }
                run.clear();
            };
            for pt in &pts {
                match pt {
                    Some(pt) => run.push((pt.x, pt.y)),
                    None => flush(&mut run, &mut d),
                }
            }
            flush(&mut run, &mut d);
            for (i, pt) in pts.iter().enumerate() {
                let Some(Point { x, y, max, v }) = pt else {
                    continue;
                };
                if let Some(mx) = max {
                    let ym = area.ymap(&scale, *mx);
                    if (ym - y).abs() > 0.5 {
                        d.raw(&format!(
                            "<g class=\"whisker\" data-value=\"{mx}\" stroke=\"{}\" stroke-width=\"1.5\" stroke-opacity=\"0.45\"><line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{ym:.1}\"/><line x1=\"{:.1}\" y1=\"{ym:.1}\" x2=\"{:.1}\" y2=\"{ym:.1}\"/></g>",
                            st.colour,
                            x - 3.0,
                            x + 3.0
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
                d.text(
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
    d.finish()
}

/// Grouped bars in one panel: categories × series, each value Option.
struct Bars<'a> {
    cats: Vec<String>,
    /// (policy or name, style colour, values per category, data key per category)
    series: Vec<(String, &'a str, Vec<Option<f64>>)>,
    /// data-* name of the category (mpl, workload, ...), and its values.
    cat_key: (&'a str, Vec<String>),
}

fn draw_bars(d: &mut Doc, area: &Area, scale: &Scale, b: &Bars) {
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
            d.raw(&format!(
                "<rect class=\"bar\" data-{}=\"{}\" data-value=\"{v}\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" stroke=\"#333333\" stroke-width=\"0.6\"/>",
                b.cat_key.0,
                esc(&b.cat_key.1[i]),
                (bw - 1.0).max(1.0),
                h.max(0.5)
            ));
            // The value, rotated, just past the bar's end.
            let cx = x + bw / 2.0 + 3.5;
            let (ly, anchor) = if *v >= base {
                (y - 4.0, "start")
            } else {
                (y + 4.0, "end")
            };
            d.text(
                (cx, ly),
                10.0,
                anchor,
                "#222222",
                &format!(" class=\"value\" transform=\"rotate(-90 {cx:.1} {ly:.1})\"{HALO}"),
                &value_label(*v),
            );
        }
        d.raw("</g>");
    }
}

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
    let all_pols: Vec<String> = a
        .shared_policies()
        .into_iter()
        .filter(|p| ws.iter().any(|w| policies_of(a, w).contains(p)))
        .collect();
    let (cols, rows) = grid(ws.len());
    let mut items = policy_items(a, &all_pols, true);
    items.push((Swatch::Dashed, "1.0 = one after another, each alone".into()));
    let sub = [
        "Makespan (first submit to last end of a batch of MPL identical jobs) / (MPL × dedicated time), mean over reps;",
        "below 1: sharing the cluster gains; a missing cell is a gap.",
    ];
    let width = (20.0 + cols as f64 * PANEL_W).max(text_width(MAKESPAN_TITLE, &sub));
    let top = header_height(width, MAKESPAN_TITLE, &sub, &items);
    let mut d = Doc::new(width, top + rows as f64 * PANEL_H + 10.0);
    header(&mut d, width, MAKESPAN_TITLE, &sub, &items);
    for (pi, w) in ws.iter().enumerate() {
        let area = panel_area(pi, cols, top, PANEL_W);
        let mpls = a.mpls_of(w);
        let pols = policies_of(a, w);
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
        let cats: Vec<String> = mpls.iter().map(|m| m.to_string()).collect();
        d.raw(&format!("<g class=\"panel\" data-workload=\"{}\">", esc(w)));
        frame(
            &mut d,
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
        draw_bars(&mut d, &area, &scale, &b);
        reference(&mut d, &area, &scale, 1.0, "");
        d.raw("</g>");
    }
    d.finish()
}

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
    let pw = (PANEL_W).max(PAD_L + PAD_R + ws.len() as f64 * (pols.len() as f64 * 30.0 + 30.0));
    let items = policy_items(a, &pols, true);
    let sub = [
        "Per-switch overhead in ms = (makespan - MPL × dedicated time) / slot switches, mean over reps, at each workload's highest MPL.",
        "A throughput estimate: meaningful for compute-bound workloads (ep); noise can make it negative. Missing: a gap.",
    ];
    let width = (20.0 + pw).max(text_width(SWITCH_TITLE, &sub));
    let pw = width - 20.0;
    let top = header_height(width, SWITCH_TITLE, &sub, &items);
    let mut d = Doc::new(width, top + PANEL_H + 10.0);
    header(&mut d, width, SWITCH_TITLE, &sub, &items);
    let area = panel_area(0, 1, top, pw);
    let cats: Vec<String> = ws.iter().map(|(w, m)| format!("{w} (mpl={m})")).collect();
    d.raw("<g class=\"panel\">");
    frame(
        &mut d,
        &area,
        &scale,
        "per-switch overhead by workload",
        "overhead per switch (ms)",
        "workload (at its highest MPL)",
        &cats,
    );
    let keys = ws.iter().map(|(w, _)| w.clone()).collect();
    draw_bars(
        &mut d,
        &area,
        &scale,
        &Bars {
            cats,
            series,
            cat_key: ("workload", keys),
        },
    );
    d.raw("</g>");
    d.finish()
}

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
    let width = (20.0 + cols as f64 * pw).max(text_width(SHORT_TITLE, &sub));
    let pw = (width - 20.0) / cols as f64;
    let top = header_height(width, SHORT_TITLE, &sub, &items);
    let mut d = Doc::new(width, top + rows as f64 * PANEL_H + 10.0);
    header(&mut d, width, SHORT_TITLE, &sub, &items);
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
            &mut d,
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
                d.raw(&format!(
                    "<rect class=\"bar {class}\" data-value=\"{v}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" stroke=\"#333333\" stroke-width=\"0.6\"/>",
                    (bw - 1.0).max(1.0),
                    (y0 - y).max(0.5)
                ));
                let cx = x + bw / 2.0 + 3.5;
                let ly = y - 4.0;
                d.text(
                    (cx, ly),
                    10.0,
                    "start",
                    "#222222",
                    &format!(" class=\"value\" transform=\"rotate(-90 {cx:.1} {ly:.1})\"{HALO}"),
                    &format!("{} s", value_label(v)),
                );
            }
            d.raw("</g>");
        }
        if let Some(ded) = recs.iter().find_map(|s| s.dedicated_s) {
            reference(
                &mut d,
                &area,
                &scale,
                ded,
                &format!("alone {} s", value_label(ded)),
            );
        }
        d.raw("</g>");
    }
    d.finish()
}

/// Every figure, by file name.
pub fn figures(a: &Analysis) -> Vec<(&'static str, String)> {
    vec![
        ("slowdown.svg", slowdown_svg(a)),
        ("makespan.svg", makespan_svg(a)),
        ("switch_overhead.svg", switch_overhead_svg(a)),
        ("short_job.svg", short_job_svg(a)),
    ]
}

/// A minimal XML well-formedness check for the figures (tests use it):
/// balanced and properly nested tags, quoted attributes, escaped text, one
/// root `svg` element.
pub fn well_formed(doc: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let mut roots = 0;
    let b = doc.as_bytes();
    let mut i = 0;
    let check_text = |t: &str| -> Result<(), String> {
        if t.contains('>') {
            return Err(format!("unescaped '>' in text {t:?}"));
        }
        let mut rest = t;
        while let Some(p) = rest.find('&') {
            let after = &rest[p..];
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| after.starts_with(e))
                || (after.starts_with("&#") && after.find(';').is_some());
            if !ok {
                return Err(format!("bad entity in {t:?}"));
            }
            rest = &after[1..];
        }
        Ok(())
    };
    while i < b.len() {
        if b[i] != b'<' {
            let end = doc[i..].find('<').map_or(doc.len(), |p| i + p);
            let t = &doc[i..end];
            if stack.is_empty() && !t.trim().is_empty() {
                return Err(format!("text outside the root: {t:?}"));
            }
            check_text(t)?;
            i = end;
            continue;
        }
        if doc[i..].starts_with("<!--") {
            i += doc[i..].find("-->").ok_or("unterminated comment")? + 3;
            continue;
        }
        if doc[i..].starts_with("<?") {
            i += doc[i..].find("?>").ok_or("unterminated declaration")? + 2;
            continue;
        }
        // A tag: find its end outside quotes.
        let mut j = i + 1;
        let mut quote: Option<u8> = None;
        while j < b.len() {
            match (quote, b[j]) {
                (None, b'"') | (None, b'\'') => quote = Some(b[j]),
                (Some(q), c) if c == q => quote = None,
                (Some(_), b'<') => return Err(format!("'<' inside an attribute at byte {j}")),
                (None, b'>') => break,
                _ => {}
            }
            j += 1;
        }
        if j >= b.len() {
            return Err("unterminated tag".into());
        }
        let inner = &doc[i + 1..j];
        i = j + 1;
        if let Some(name) = inner.strip_prefix('/') {
            let name = name.trim();
            match stack.pop() {
                Some(open) if open == name => continue,
                Some(open) => return Err(format!("</{name}> closes <{open}>")),
                None => return Err(format!("</{name}> without an open tag")),
            }
        }
        let self_closing = inner.ends_with('/');
        let inner = inner.trim_end_matches('/');
        let name: String = inner.chars().take_while(|c| !c.is_whitespace()).collect();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':' || c == '_')
        {
            return Err(format!("bad tag name {name:?}"));
        }
        // Attributes: name="value" pairs.
        let mut rest = inner[name.len()..].trim_start();
        let mut seen: Vec<&str> = Vec::new();
        while !rest.is_empty() {
            let eq = rest
                .find('=')
                .ok_or_else(|| format!("attribute without value in <{name}>"))?;
            let an = rest[..eq].trim();
            if an.is_empty() || an.contains(char::is_whitespace) {
                return Err(format!("bad attribute name {an:?} in <{name}>"));
            }
            if seen.contains(&an) {
                return Err(format!("attribute {an} twice in <{name}>"));
            }
            seen.push(an);
            let after = rest[eq + 1..].trim_start();
            let q = after.chars().next().ok_or("missing attribute value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted attribute {an} in <{name}>"));
            }
            let close = after[1..].find(q).ok_or("unterminated attribute")?;
            check_text(&after[1..1 + close])?;
            rest = after[close + 2..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
            if name != "svg" {
                return Err(format!("root element is <{name}>, not <svg>"));
            }
        }
        if !self_closing {
            stack.push(name);
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> never closed"));
    }
    if roots != 1 {
        return Err(format!("{roots} root elements"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::analyse;
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

    fn count(h: &str, n: &str) -> usize {
        h.matches(n).count()
    }

    fn sample() -> Analysis {
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

    #[test]
    fn short_job_has_response_and_fifo_per_policy() {
        let a = sample();
        let svg = short_job_svg(&a);
        assert_eq!(count(&svg, "class=\"bar response\""), 4);
        assert_eq!(count(&svg, "class=\"bar fifo\""), 4);
        assert!(svg.contains("alone 10.0 s"));
    }

    #[test]
    fn empty_inputs_give_a_figure_that_says_so() {
        let a = analyse(&Log::default(), None);
        for (name, svg) in figures(&a) {
            well_formed(&svg).unwrap();
            assert!(svg.contains("class=\"no-data\""), "{name}");
        }
    }

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
    fn the_checker_rejects_broken_xml() {
        assert!(well_formed("<svg><g></svg>").is_err());
        assert!(well_formed("<svg><g></g>").is_err());
        assert!(well_formed("<svg a=b></svg>").is_err());
        assert!(well_formed("<svg><text>a & b</text></svg>").is_err());
        assert!(well_formed("<svg></svg><svg></svg>").is_err());
        assert!(well_formed("<svg x=\"1\"><text>a &amp; b</text><g/></svg>\n").is_ok());
    }
}
