//! The top of every figure: its title (the question), the subtitle (what is
//! plotted) and the legend; and the figure that says there is no data.
//!
//! The legend's entries flow in rows (gang-plot's `flow`), each a swatch
//! and its label; a figure's width is at least what its title and subtitle
//! need (gang-plot's `text_width`).
//!
//! Known faults: widths are estimated from the number of characters, so a
//! title of wide letters may pass the right edge.

use super::axes::PANEL_H;
use super::style::{marker, Style, OUTLINE};
use super::{stroke, text};
use gang_plot::{element, flow, text_width, Doc};

/// What stands before a legend label.
pub enum Swatch<'a> {
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
    let widths: Vec<f64> = items
        .iter()
        .map(|(_, label)| 34.0 + text_width(label, 12.0))
        .collect();
    let (at, last_y) = flow(&widths, (x0, y), width, 20.0);
    d.raw("<g class=\"legend\">");
    for ((sw, label), (x, y)) in items.iter().zip(at) {
        match sw {
            Swatch::Line(st) => {
                d.line((x, y), (x + 24.0, y), &stroke(st.colour, 2.5));
                d.raw(&marker(st, x + 12.0, y, 4.5));
            }
            Swatch::Bar(fill) => d.raw(&element(
                "rect",
                "",
                &[("x", x), ("y", y - 6.0), ("width", 24.0), ("height", 12.0)],
                &format!(" fill=\"{fill}\" stroke=\"{OUTLINE}\" stroke-width=\"0.6\""),
            )),
            Swatch::Dashed => d.line(
                (x, y),
                (x + 24.0, y),
                &format!("{}{}", stroke("#000000", 1.2), super::axes::DASHED),
            ),
            Swatch::Whisker => {
                let faint = format!("{} stroke-opacity=\"0.5\"", stroke("#555555", 1.5));
                d.line((x + 12.0, y - 7.0), (x + 12.0, y + 7.0), &faint);
                d.line((x + 8.0, y - 7.0), (x + 16.0, y - 7.0), &faint);
            }
        }
        text(d, (x + 30.0, y + 4.0), 12.0, "start", "#000000", "", label);
    }
    d.raw("</g>");
    last_y + 20.0
}

/// The figure's title (its question), top left.
fn title_text(d: &mut Doc, title: &str) {
    text(
        d,
        (20.0, 28.0),
        17.0,
        "start",
        "#000000",
        " font-weight=\"bold\"",
        title,
    );
}

/// A figure being drawn: its header is there, its panels come below `top`.
pub struct Page {
    pub doc: Doc,
    /// At least what the panels need, and what the header needs.
    pub width: f64,
    /// Where the panels start.
    pub top: f64,
    title: &'static str,
}

impl Page {
    /// Title (the question), subtitle (what is plotted), legend, on a page
    /// `panels_w` wide or wider if the header needs it.
    pub fn new(
        panels_w: f64,
        title: &'static str,
        subtitle: &[&str],
        items: &[(Swatch, String)],
    ) -> Page {
        let sub_w = subtitle
            .iter()
            .map(|l| text_width(l, 12.0))
            .fold(0.0, f64::max);
        let width = panels_w.max(40.0 + text_width(title, 17.0).max(sub_w));
        let mut doc = Doc::new();
        title_text(&mut doc, title);
        let mut y = 48.0;
        for s in subtitle {
            text(&mut doc, (20.0, y), 12.0, "start", "#444444", "", s);
            y += 16.0;
        }
        let top = legend(&mut doc, 20.0, y + 6.0, width - 40.0, items) + 22.0;
        Page {
            doc,
            width,
            top,
            title,
        }
    }

    /// The document, `rows` rows of panels high.
    pub fn finish(self, rows: usize) -> String {
        let height = self.top + rows as f64 * PANEL_H + 10.0;
        self.doc.finish(self.width, height, self.title, "")
    }
}

/// A figure with nothing to show (the file exists and says why).
pub fn empty_figure(title: &str, why: &str) -> String {
    let mut d = Doc::new();
    title_text(&mut d, title);
    text(
        &mut d,
        (20.0, 70.0),
        13.0,
        "start",
        "#444444",
        " class=\"no-data\"",
        &format!("No data: {why}"),
    );
    d.finish(720.0, 120.0, title, "")
}
