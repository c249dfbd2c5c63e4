//! What a sweep writes: one CSV row per (policy, load), and two SVG line
//! charts, mean response time and mean bounded slowdown against offered
//! load, one line per policy (drawn with gang-plot, like the evaluation's
//! figures; every point carries `data-policy` / `data-load` / `data-value`
//! so tests and scripts can read the picture back).
//!
//! The y axis is logarithmic: at high load the policies differ by orders
//! of magnitude. Known fault: with more than eight policies colours repeat.

use std::fmt::Write as _;

use gang_plot::{esc, nice_range, num, tick_label, ticks, Doc, PathData};

use crate::metrics::Summary;

#[derive(Clone, Debug)]
pub struct Row {
    pub policy: String,
    /// The load asked for.
    pub load: f64,
    /// The offered load of the scaled workload (equal up to rounding).
    pub offered: f64,
    pub summary: Summary,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

pub const CSV_HEADER: &str = "policy,load,offered_load,jobs,refused,mean_response_s,p95_response_s,mean_bounded_slowdown,utilisation,makespan_s,wall_s";

pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in rows {
        let m = &r.summary;
        let _ = writeln!(
            s,
            "{},{:.2},{:.4},{},{},{:.1},{:.1},{:.3},{:.4},{:.1},{:.2}",
            r.policy,
            r.load,
            r.offered,
            m.jobs,
            m.refused,
            m.mean_response_s,
            m.p95_response_s,
            m.mean_bsld,
            m.utilisation,
            m.makespan_s,
            r.wall_s
        );
    }
    s
}

/// A markdown table of the same rows (for the README).
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| policy | load | mean response (s) | p95 response (s) | mean bounded slowdown | utilisation | makespan (h) |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let m = &r.summary;
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.3} | {:.1} |",
            r.policy,
            r.load,
            m.mean_response_s,
            m.p95_response_s,
            m.mean_bsld,
            m.utilisation,
            m.makespan_s / 3600.0
        );
    }
    s
}

const COLOURS: [&str; 8] = [
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#999999",
];

/// A line chart of `value(summary)` against load, one line per policy in
/// the order of first appearance.
pub fn figure(rows: &[Row], title: &str, y_label: &str, value: fn(&Summary) -> f64) -> String {
    let (w, h) = (720.0, 440.0);
    let (left, right, top, bottom) = (70.0, 190.0, 40.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let mut policies: Vec<&str> = vec![];
    for r in rows {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.load, value(&r.summary).max(1e-3)))
        .collect();
    let (xlo, xhi, xstep) = nice_range(
        pts.iter()
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min)
            .min(1.0),
        pts.iter()
            .map(|p| p.0)
            .fold(f64::NEG_INFINITY, f64::max)
            .max(0.0),
        6.0,
    );
    let ylo = pts
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::INFINITY, f64::min)
        .floor();
    let yhi = pts
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil();
    let (ylo, yhi) = if yhi > ylo {
        (ylo, yhi)
    } else {
        (ylo, ylo + 1.0)
    };
    let x = |v: f64| left + (v - xlo) / (xhi - xlo).max(1e-9) * pw;
    let y = |v: f64| top + ph - (v.max(1e-3).log10() - ylo) / (yhi - ylo) * ph;
    let mut doc = Doc::new();
    doc.text((left, 24.0), " font-size=\"15\"", title);
    doc.raw(&format!(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\"/>",
        num(left),
        num(top),
        num(pw),
        num(ph)
    ));
    for t in ticks(xlo, xhi, xstep) {
        doc.line(
            (x(t), top + ph),
            (x(t), top + ph + 5.0),
            " stroke=\"#888888\"",
        );
        doc.text(
            (x(t), top + ph + 18.0),
            " text-anchor=\"middle\"",
            &tick_label(t, xstep),
        );
    }
    let mut e = ylo;
    while e <= yhi + 1e-9 {
        let yy = top + ph - (e - ylo) / (yhi - ylo) * ph;
        doc.line((left, yy), (left + pw, yy), " stroke=\"#DDDDDD\"");
        doc.text(
            (left - 6.0, yy + 4.0),
            " text-anchor=\"end\"",
            &tick_label(10f64.powf(e), 10f64.powf(e).min(1.0)),
        );
        e += 1.0;
    }
    doc.text(
        (left + pw / 2.0, h - 12.0),
        " text-anchor=\"middle\"",
        "offered load",
    );
    doc.text(
        (16.0, top + ph / 2.0),
        &format!(
            " text-anchor=\"middle\" transform=\"rotate(-90 16 {})\"",
            num(top + ph / 2.0)
        ),
        y_label,
    );
    for (k, p) in policies.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let mut d = PathData::new();
        let mine: Vec<&Row> = rows.iter().filter(|r| r.policy == *p).collect();
        for (i, r) in mine.iter().enumerate() {
            let v = value(&r.summary);
            d.cmd(if i == 0 { 'M' } else { 'L' }, &[x(r.load), y(v)]);
        }
        doc.path(
            &d,
            &format!(
                " fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\" data-policy=\"{}\"",
                esc(p)
            ),
        );
        for r in &mine {
            let v = value(&r.summary);
            doc.raw(&format!(
                "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{colour}\" data-policy=\"{}\" data-load=\"{}\" data-value=\"{}\"/>",
                num(x(r.load)),
                num(y(v)),
                esc(p),
                num(r.load),
                v
            ));
        }
        let ly = top + 10.0 + 18.0 * k as f64;
        doc.line(
            (w - right + 14.0, ly),
            (w - right + 38.0, ly),
            &format!(" stroke=\"{colour}\" stroke-width=\"2\""),
        );
        doc.text((w - right + 44.0, ly + 4.0), "", p);
    }
    doc.finish(w, h, title, "")
}
