//! How a policy is drawn in every figure: its colour (marks), its colour
//! for text on white, its marker shape.
//!
//! The known policies have fixed Okabe-Ito colours (colour-blind safe) and
//! each its own marker, whatever order they come in; other names take
//! Paul Tol's muted colours and the markers in order of appearance.
//!
//! Known faults: past eight unknown names, colours and markers repeat.

use crate::KNOWN_POLICIES;
use gang_plot::{element, points};

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
    ("#882255", "#882255"), // gang-timed: wine (Tol)
];

/// For other names, in order of appearance (Paul Tol's muted scheme).
pub(super) const EXTRA_COLOURS: &[(&str, &str)] = &[
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
    Pentagon,
}

/// Markers of the known policies, in the order of [`KNOWN_POLICIES`]: all
/// different, so a policy is told by its shape too.
const KNOWN_MARKERS: [Marker; 9] = [
    Marker::Hexagon,      // dedicated
    Marker::Square,       // eevdf
    Marker::Triangle,     // bpfland
    Marker::Diamond,      // signal
    Marker::TriangleDown, // spinblock
    Marker::Cross,        // gang-off
    Marker::Circle,       // gang-strict
    Marker::Star,         // gang-yield
    Marker::Pentagon,     // gang-timed
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

/// The outline of every marker and bar.
pub const OUTLINE: &str = "#333333";

/// A marker of `style` centred on (x, y), `r` its radius.
pub fn marker(style: &Style, x: f64, y: f64, r: f64) -> String {
    let paint = format!(
        " fill=\"{}\" stroke=\"{OUTLINE}\" stroke-width=\"0.8\"",
        style.colour
    );
    let poly = |pts: &[(f64, f64)]| format!("<polygon points=\"{}\"{paint}/>", points(pts));
    match style.marker {
        Marker::Circle => element("circle", "", &[("cx", x), ("cy", y), ("r", r)], &paint),
        Marker::Square => {
            let geometry = [
                ("x", x - r * 0.9),
                ("y", y - r * 0.9),
                ("width", r * 1.8),
                ("height", r * 1.8),
            ];
            element("rect", "", &geometry, &paint)
        }
        Marker::Triangle => poly(&[
            (x, y - r * 1.2),
            (x + r * 1.1, y + r * 0.8),
            (x - r * 1.1, y + r * 0.8),
        ]),
        Marker::TriangleDown => poly(&[
            (x, y + r * 1.2),
            (x + r * 1.1, y - r * 0.8),
            (x - r * 1.1, y - r * 0.8),
        ]),
        Marker::Diamond => poly(&[
            (x, y - r * 1.3),
            (x + r * 1.1, y),
            (x, y + r * 1.3),
            (x - r * 1.1, y),
        ]),
        Marker::Star => {
            let pts: Vec<(f64, f64)> = (0..10)
                .map(|i| {
                    let ang = std::f64::consts::PI * (i as f64 / 5.0 - 0.5);
                    let rr = if i % 2 == 0 { r * 1.45 } else { r * 0.6 };
                    (x + rr * ang.cos(), y + rr * ang.sin())
                })
                .collect();
            poly(&pts)
        }
        Marker::Pentagon => {
            let pts: Vec<(f64, f64)> = (0..5)
                .map(|i| {
                    let ang = std::f64::consts::PI * (i as f64 * 0.4 - 0.5);
                    (x + r * 1.15 * ang.cos(), y + r * 1.15 * ang.sin())
                })
                .collect();
            poly(&pts)
        }
        Marker::Hexagon => {
            let pts: Vec<(f64, f64)> = (0..6)
                .map(|i| {
                    let ang = std::f64::consts::PI * i as f64 / 3.0;
                    (x + r * 1.1 * ang.cos(), y + r * 1.1 * ang.sin())
                })
                .collect();
            poly(&pts)
        }
        Marker::Cross => {
            let a = r * 0.45;
            let b = r * 1.2;
            poly(&[
                (x - a, y - b),
                (x + a, y - b),
                (x + a, y - a),
                (x + b, y - a),
                (x + b, y + a),
                (x + a, y + a),
                (x + a, y + b),
                (x - a, y + b),
                (x - a, y + a),
                (x - b, y + a),
                (x - b, y - a),
                (x - a, y - a),
            ])
        }
    }
}
