//! SVG timeline of a [`Trace`]: one row per CPU, time in ms on x, colour by
//! gang, overlap hatched in red, fill tinted, slot switches as thin lines.
//!
//! Size is bounded by the picture, not the trace: segments of one style in
//! one row that are less than a pixel apart are merged, so a row holds at
//! most about one segment per pixel per style, and each style of all rows
//! is a single `<path>`.
//!
//! The drawing itself works on a [`Timeline`] (labelled rows of intervals,
//! switch times, legend figures), so that the cluster view (cluster.rs)
//! draws many nodes' CPUs the same way as [`render_svg`] draws one node's.
//! The document, escaping, numbers, ticks, text widths and the legend's
//! flow come from the shared toolkit, gang-plot.
//!
//! Known faults: row labels and legend entries are sized by an estimate of
//! their text width, so a long name may overrun its room.

use super::*;
use gang_plot::{esc, flow, nice_step, num, text_width, tick_label, ticks, Doc, PathData};
use std::borrow::Cow;

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 56.0;

/// Distinct gang colours, indexed by gang id modulo length. Grey and red are
/// left out: grey means "other", red means overlap.
const PALETTE: [&str; 12] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#393b79", "#637939", "#8c6d31", "#7b4173",
];
const OTHER_COLOUR: &str = "#9e9e9e";
const IDLE_COLOUR: &str = "#f2f2f2";
const OVERLAP_COLOUR: &str = "#d00000";

/// Paint style of a segment. Variant order is paint order: activity is drawn
/// over idle/other where sub-pixel merging makes segments overlap.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Style {
    Idle,
    Other,
    Fill(i32),
    Gang(i32),
}

pub(crate) fn gang_colour(gang: i32) -> &'static str {
    PALETTE[gang.rem_euclid(PALETTE.len() as i32) as usize]
}

/// `hex` ("#rrggbb") mixed 55% with white: the "lighter tint" of fill.
fn tint(hex: &str) -> String {
    let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0) as f64;
    let mix = |v: f64| (v + (255.0 - v) * 0.55).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(c(1)), mix(c(3)), mix(c(5)))
}

fn colour(style: Style) -> String {
    match style {
        Style::Idle => IDLE_COLOUR.into(),
        Style::Other => OTHER_COLOUR.into(),
        Style::Fill(g) => tint(gang_colour(g)),
        Style::Gang(g) => gang_colour(g).into(),
    }
}

/// One row of the picture: a label (e.g. "cpu3") and what ran there, in
/// time order, on the timeline's clock.
pub(crate) struct Row<'a> {
    pub label: String,
    pub intervals: Cow<'a, [Interval]>,
}

/// One gang's legend entry: colour from `id` (see [`gang_colour`]).
pub(crate) struct LegendGang {
    pub id: i32,
    pub name: String,
    pub share_of_cpu: f64,
    pub share_of_gang_time: f64,
}

/// The legend's gangs, ordered by id (so by colour): `(name, id, share of
/// CPU, share of gang time)` each.
pub(crate) fn legend_gangs<'a>(
    gangs: impl Iterator<Item = (&'a String, i32, f64, f64)>,
) -> Vec<LegendGang> {
    let mut v: Vec<LegendGang> = gangs
        .map(|(name, id, cpu, gang)| LegendGang {
            id,
            name: name.clone(),
            share_of_cpu: cpu,
            share_of_gang_time: gang,
        })
        .collect();
    v.sort_by_key(|g| g.id);
    v
}

/// Figures of the legend.
pub(crate) struct Legend {
    /// In the order shown.
    pub gangs: Vec<LegendGang>,
    pub cpu_time_ns: u64,
    pub other_ns: u64,
    pub idle_ns: u64,
    pub fill_ns: u64,
    /// Gang whose tint shows on the fill swatch.
    pub filler: i32,
    pub overlap_fraction: f64,
    /// Part of the overlap inside CPU stalls, as a fraction of gang time.
    pub stall_overlap_fraction: f64,
    /// Finish time (RUN_FINISH off the gang's CPUs) over gang time.
    pub finish_fraction: f64,
}

/// Everything a picture shows.
pub(crate) struct Timeline<'a> {
    pub title: String,
    pub subtitle: String,
    /// Window `[start_ns, end_ns)` on the rows' clock.
    pub start_ns: u64,
    pub end_ns: u64,
    pub rows: Vec<Row<'a>>,
    /// Times of the slot switches, ascending.
    pub switches: Vec<u64>,
    pub legend: Legend,
}

struct Layout {
    row_h: f64,
    row_pitch: f64,
    start: u64,
    scale: f64,
    /// Left edge of the plot: wide enough for the longest row label.
    left: f64,
    plot_w: f64,
}

impl Layout {
    fn new(t: &Timeline) -> Self {
        let nr = t.rows.len();
        // Rows shrink for big machines so the picture stays readable.
        let row_h = if nr <= 32 {
            18.0
        } else if nr <= 128 {
            8.0
        } else {
            4.0
        };
        // Never narrower than the classic margin, never more than a third
        // of the picture.
        let font = f64::min(row_h, 12.0);
        let longest = t
            .rows
            .iter()
            .map(|r| text_width(&r.label, font))
            .fold(0.0, f64::max);
        let left = (10.0 + longest).clamp(LEFT, WIDTH / 3.0);
        let plot_w = WIDTH - left - RIGHT;
        let dur = t.end_ns.saturating_sub(t.start_ns);
        let scale = if dur == 0 { 0.0 } else { plot_w / dur as f64 };
        Layout {
            row_h,
            row_pitch: row_h + (row_h / 4.0).max(1.0),
            start: t.start_ns,
            scale,
            left,
            plot_w,
        }
    }
    fn x(&self, ts: u64) -> f64 {
        self.left + ts.saturating_sub(self.start) as f64 * self.scale
    }
    fn row_y(&self, cpu: usize) -> f64 {
        TOP + cpu as f64 * self.row_pitch
    }
    fn rows_bottom(&self, nr: usize) -> f64 {
        TOP + nr as f64 * self.row_pitch
    }
}

/// Appends [x0, x1) to `segs`, merging with the last one when less than a
/// pixel separates them.
fn push_merged(segs: &mut Vec<(f64, f64)>, x0: f64, x1: f64) {
    if let Some(last) = segs.last_mut() {
        if x0 - last.1 < 1.0 {
            last.1 = last.1.max(x1);
            return;
        }
    }
    segs.push((x0, x1));
}

/// Rectangle subpaths for one row's segments.
fn rects(d: &mut PathData, segs: &[(f64, f64)], y: f64, h: f64) {
    for &(x0, x1) in segs {
        d.rect(x0, y, x1 - x0, h);
    }
}

fn draw_rows(svg: &mut Doc, t: &Timeline, lay: &Layout) {
    let mut paths: BTreeMap<Style, PathData> = BTreeMap::new();
    let mut hatch = PathData::new();
    let mut marks = PathData::new();
    let mut outlines = PathData::new();
    for (i, row) in t.rows.iter().enumerate() {
        let y = lay.row_y(i);
        outlines.rect(lay.left, y, lay.plot_w, lay.row_h);
        let mut segs: BTreeMap<Style, Vec<(f64, f64)>> = BTreeMap::new();
        let mut over: Vec<(f64, f64)> = Vec::new();
        let mut over_marks: Vec<(f64, f64)> = Vec::new();
        for iv in row.intervals.iter() {
            let (x0, x1) = (lay.x(iv.start_ns), lay.x(iv.end_ns));
            let style = match iv.class() {
                IntervalClass::Idle => Style::Idle,
                IntervalClass::Other => Style::Other,
                IntervalClass::Fill => Style::Fill(iv.gang),
                IntervalClass::Owned | IntervalClass::Finish | IntervalClass::Overlap => {
                    Style::Gang(iv.gang)
                }
            };
            push_merged(segs.entry(style).or_default(), x0, x1);
            if iv.class() == IntervalClass::Overlap {
                push_merged(&mut over, x0, x1);
                // The marker is at least a pixel wide so that even a 100 µs
                // overlap in a 10 s trace shows; it covers only the top of
                // the row so that frequent short overlaps do not hide what
                // mostly ran.
                push_merged(&mut over_marks, x0, x1.max(x0 + 1.0));
            }
        }
        for (style, s) in &segs {
            rects(paths.entry(*style).or_default(), s, y, lay.row_h);
        }
        rects(&mut hatch, &over, y, lay.row_h);
        rects(&mut marks, &over_marks, y, (lay.row_h / 5.0).max(1.5));
    }
    svg.path(
        &outlines,
        r##" fill="#ffffff" stroke="#cccccc" stroke-width="0.5""##,
    );
    for (style, d) in &paths {
        svg.path(d, &format!(r#" fill="{}""#, colour(*style)));
    }
    // Both empty when nothing overlapped.
    svg.path(&hatch, r#" fill="url(#hatch)""#);
    svg.path(&marks, &format!(r#" fill="{OVERLAP_COLOUR}""#));
    let font = lay.row_h.min(12.0);
    let attrs = format!(r#" font-size="{}" text-anchor="end""#, num(font));
    for (i, row) in t.rows.iter().enumerate() {
        let y = lay.row_y(i) + lay.row_h / 2.0 + font * 0.35;
        svg.text((lay.left - 6.0, y), &attrs, &row.label);
    }
}

fn draw_switches(svg: &mut Doc, t: &Timeline, lay: &Layout) {
    let bottom = lay.rows_bottom(t.rows.len());
    let xs: Vec<f64> = t.switches.iter().map(|&ts| lay.x(ts)).collect();
    // Lines through the rows help while slots are several pixels wide; when
    // they are denser they would grey the whole plot, so only a tick above
    // the rows marks each switch.
    let mean_gap = match (xs.first(), xs.last()) {
        (Some(a), Some(b)) if xs.len() > 1 => (b - a) / (xs.len() - 1) as f64,
        _ => f64::INFINITY,
    };
    let y_end = if mean_gap >= 6.0 { bottom } else { TOP - 1.0 };
    let mut d = PathData::new();
    let mut last_x = f64::NEG_INFINITY;
    for x in xs {
        // Lines closer than a pixel look like one: draw one.
        if x - last_x >= 1.0 {
            d.cmd('M', &[x, TOP - 5.0]).cmd('V', &[y_end]);
            last_x = x;
        }
    }
    svg.path(
        &d,
        r##" stroke="#333333" stroke-width="0.6" stroke-opacity="0.6""##,
    );
}

/// Time axis under the rows; returns the y below it.
fn draw_axis(svg: &mut Doc, t: &Timeline, lay: &Layout) -> f64 {
    let y = lay.rows_bottom(t.rows.len()) + 4.0;
    let dur_ms = t.end_ns.saturating_sub(t.start_ns) as f64 / 1e6;
    let step = nice_step(dur_ms, 10.0);
    let mut d = PathData::new();
    d.cmd('M', &[lay.left, y]).cmd('h', &[lay.plot_w]);
    let mut labels = Vec::new();
    for v in ticks(0.0, dur_ms, step) {
        let x = if dur_ms > 0.0 {
            lay.left + v / dur_ms * lay.plot_w
        } else {
            lay.left
        };
        d.cmd('M', &[x, y]).cmd('v', &[5.0]);
        labels.push((x, tick_label(v, step)));
    }
    svg.path(&d, r##" stroke="#000000" stroke-width="1" fill="none""##);
    let middle = r#" text-anchor="middle""#;
    for (x, label) in labels {
        svg.text((x, y + 17.0), middle, &label);
    }
    svg.text(
        (lay.left + lay.plot_w / 2.0, y + 33.0),
        middle,
        "time (ms since start)",
    );
    y + 44.0
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Legend entries: (swatch fill, text). Returns the y below the legend.
fn draw_legend(svg: &mut Doc, legend: &Legend, lay: &Layout, y0: f64) -> f64 {
    let s = legend;
    let mut items: Vec<(String, String)> = Vec::new();
    for g in &s.gangs {
        let text = format!(
            "{}: {} of CPU, {} of gang time",
            g.name,
            pct(g.share_of_cpu),
            pct(g.share_of_gang_time)
        );
        items.push((gang_colour(g.id).into(), text));
    }
    let cpu = s.cpu_time_ns;
    let frac = |v: u64| if cpu == 0 { 0.0 } else { v as f64 / cpu as f64 };
    items.push((
        OTHER_COLOUR.into(),
        format!("other (no gang): {} of CPU", pct(frac(s.other_ns))),
    ));
    items.push((
        IDLE_COLOUR.into(),
        format!("idle: {} of CPU", pct(frac(s.idle_ns))),
    ));
    items.push((
        tint(gang_colour(s.filler)),
        format!("fill (light tint): {} of CPU", pct(frac(s.fill_ns))),
    ));
    let mut overlap = format!("overlap (red): {} of gang time", pct(s.overlap_fraction));
    if s.stall_overlap_fraction > 0.0 {
        overlap += &format!(" ({} inside CPU stalls)", pct(s.stall_overlap_fraction));
    }
    // Finish runs are drawn as the gang's own (the scheduler let them run
    // on purpose) but counted here, so that a costly escape is seen.
    if s.finish_fraction > 0.0 {
        overlap += &format!(
            "; not overlap, finishing a system call or RCU section: {}",
            pct(s.finish_fraction)
        );
    }
    items.push(("url(#hatch)".into(), overlap));

    // Items advance by their estimated text width and wrap at the right edge.
    let widths: Vec<f64> = items
        .iter()
        .map(|(_, text)| 19.0 + text_width(text, 12.0) + 24.0)
        .collect();
    let (at, y) = flow(&widths, (lay.left, y0), WIDTH - RIGHT - lay.left, 20.0);
    for ((fill, text), (x, y)) in items.iter().zip(at) {
        svg.raw(&format!(
            r##"<rect x="{}" y="{}" width="14" height="12" fill="{fill}" stroke="#666666" stroke-width="0.5"/><text x="{}" y="{}">{}</text>"##,
            num(x),
            num(y),
            num(x + 19.0),
            num(y + 10.5),
            esc(text)
        ));
    }
    y + 28.0
}

pub(crate) fn fmt_duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

fn title_lines(trace: &Trace) -> (String, String) {
    let s = &trace.summary;
    let l = &s.switch_latency_us;
    let node = if trace.meta.node.is_empty() {
        "?"
    } else {
        &trace.meta.node
    };
    let title = format!(
        "scx_gang on {node}: {}, overlap {:.2}%, switch latency p50 {:.0} µs / p99 {:.0} µs ({} samples)",
        fmt_duration(s.duration_ns),
        s.overlap_fraction * 100.0,
        l.p50,
        l.p99,
        l.samples
    );
    let sub = format!(
        "{} CPUs, {} switches, slot mean {:.1} ms / p50 {:.1} ms, latency max {:.0} µs, {} CPUs never reached owner, {} events ignored",
        trace.cpus.len(),
        s.switches,
        s.slot_len_ms.mean,
        s.slot_len_ms.p50,
        l.max,
        l.unreached,
        s.ignored_events
    );
    (title, sub)
}

/// Renders the timeline. Pure function of the trace; never panics on any
/// trace `analyze` can produce (nor on hand-made ones with odd windows).
pub fn render_svg(trace: &Trace) -> String {
    let s = &trace.summary;
    let (title, subtitle) = title_lines(trace);
    let gangs = legend_gangs(
        s.gangs
            .iter()
            .map(|(n, g)| (n, g.id, g.share_of_cpu, g.share_of_gang_time)),
    );
    let timeline = Timeline {
        title,
        subtitle,
        start_ns: trace.meta.start_ns,
        end_ns: trace.meta.end_ns,
        rows: trace
            .cpus
            .iter()
            .enumerate()
            .map(|(cpu, row)| Row {
                label: format!("cpu{cpu}"),
                intervals: Cow::Borrowed(row.as_slice()),
            })
            .collect(),
        switches: trace.switches.iter().map(|sw| sw.ts_ns).collect(),
        legend: Legend {
            gangs,
            cpu_time_ns: s.cpu_time_ns,
            other_ns: s.other_ns,
            idle_ns: s.idle_ns,
            fill_ns: s.fill_ns,
            // Show the tint of a gang that actually filled, so the swatch
            // matches.
            filler: s.gangs.values().find(|g| g.fill_ns > 0).map_or(0, |g| g.id),
            overlap_fraction: s.overlap_fraction,
            stall_overlap_fraction: s.overlap_fraction - s.overlap_outside_stalls_fraction,
            finish_fraction: analysis::ratio(s.finish_ns, s.gang_run_ns),
        },
    };
    render_timeline(&timeline)
}

/// Renders any [`Timeline`]; [`render_svg`] is the one-node case.
pub(crate) fn render_timeline(t: &Timeline) -> String {
    let lay = Layout::new(t);
    let mut body = Doc::new();
    body.text(
        (lay.left, 20.0),
        r#" font-size="15" font-weight="bold""#,
        &t.title,
    );
    body.text((lay.left, 38.0), r##" fill="#444444""##, &t.subtitle);
    draw_rows(&mut body, t, &lay);
    draw_switches(&mut body, t, &lay);
    let y = draw_axis(&mut body, t, &lay);
    let height = draw_legend(&mut body, &t.legend, &lay, y);
    // Red stripes on a transparent ground: the overrunning gang's colour
    // stays visible between them.
    let hatch = format!(
        r##"<pattern id="hatch" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="1.6" height="4" fill="{OVERLAP_COLOUR}"/></pattern>"##
    );
    body.finish(WIDTH, height, &t.title, &hatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Escaping, numbers and ticks are specified in gang-plot (doc.rs,
    // axis.rs), where these tests' other assertions moved.
    #[test]
    fn tint_mixes_with_white() {
        assert_eq!(tint("#000000"), "#8c8c8c");
    }

    #[test]
    fn merging_bounds_segments_per_row() {
        let mut segs = Vec::new();
        for i in 0..10_000 {
            let x = i as f64 * 0.1;
            push_merged(&mut segs, x, x + 0.05);
        }
        assert_eq!(segs.len(), 1);
    }
}
