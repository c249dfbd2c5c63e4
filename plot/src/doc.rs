//! The document builder and what every element is written with: escaping,
//! the number format of coordinates, path data.
//!
//! A [`Doc`] collects the body, one element a line, and writes the `<svg>`
//! root only in [`Doc::finish`], when the figure knows its size. Every
//! coordinate goes through [`num`] (two decimals at most, no trailing
//! zeros): a hundredth of a pixel is below what shows, and the trace
//! timeline's paths stay small. Text and attribute values from outside
//! (policy, gang and node names) go through [`esc`].
//!
//! Known faults: attributes passed as markup (`attrs`, `lead`, `trail`) are
//! written as given; escaping a value in them is the caller's part.

use std::fmt::Write as _;

/// The font of every picture (the first one the viewer has).
pub const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";

/// Escapes text for XML content and attribute values. Control characters,
/// which XML 1.0 does not allow at all, become '?'.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// `v` with at most `decimals` decimals and no trailing zeros ("-0" is "0").
pub fn trimmed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s.is_empty() || s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// A coordinate or length: at most two decimals, no trailing zeros.
pub fn num(v: f64) -> String {
    trimmed(v, 2)
}

/// A self-closing element: `<name{lead} k="v" ...{trail}/>`, the geometry
/// `(k, v)` formatted with [`num`]. `lead` and `trail` are attribute markup
/// (class and data attributes first, paint last).
pub fn element(name: &str, lead: &str, geometry: &[(&str, f64)], trail: &str) -> String {
    let mut s = format!("<{name}{lead}");
    for (k, v) in geometry {
        let _ = write!(s, " {k}=\"{}\"", num(*v));
    }
    let _ = write!(s, "{trail}/>");
    s
}

/// The `points` of a polygon: "x,y x,y ...".
pub fn points(pts: &[(f64, f64)]) -> String {
    let p: Vec<String> = pts
        .iter()
        .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
        .collect();
    p.join(" ")
}

/// Path data (`d`), written command by command.
#[derive(Debug, Default, Clone)]
pub struct PathData(String);

impl PathData {
    pub fn new() -> PathData {
        PathData::default()
    }

    /// One command and its numbers: `cmd('M', &[x, y])` writes "Mx y".
    pub fn cmd(&mut self, cmd: char, args: &[f64]) -> &mut Self {
        self.0.push(cmd);
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.0.push(' ');
            }
            self.0.push_str(&num(*a));
        }
        self
    }

    /// A closed rectangle subpath.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64) -> &mut Self {
        self.cmd('M', &[x, y])
            .cmd('h', &[w])
            .cmd('v', &[h])
            .cmd('h', &[-w])
            .cmd('z', &[])
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An SVG document being written.
#[derive(Debug, Default)]
pub struct Doc {
    body: String,
}

impl Doc {
    pub fn new() -> Doc {
        Doc::default()
    }

    /// Markup as given, on a line of its own.
    pub fn raw(&mut self, markup: &str) {
        self.body.push_str(markup);
        self.body.push('\n');
    }

    /// `<text x y{attrs}>content</text>`, the content escaped.
    pub fn text(&mut self, (x, y): (f64, f64), attrs: &str, content: &str) {
        let _ = writeln!(
            self.body,
            "<text x=\"{}\" y=\"{}\"{attrs}>{}</text>",
            num(x),
            num(y),
            esc(content)
        );
    }

    /// A straight line from `a` to `b`.
    pub fn line(&mut self, a: (f64, f64), b: (f64, f64), attrs: &str) {
        let geometry = [("x1", a.0), ("y1", a.1), ("x2", b.0), ("y2", b.1)];
        self.raw(&element("line", "", &geometry, attrs));
    }

    /// A path; nothing when `d` is empty.
    pub fn path(&mut self, d: &PathData, attrs: &str) {
        if !d.is_empty() {
            let _ = writeln!(self.body, "<path{attrs} d=\"{}\"/>", d.as_str());
        }
    }

    /// The whole document: the root of `width` × `height` with its title,
    /// `defs` (markup, may be empty), a white ground, then the body.
    pub fn finish(self, width: f64, height: f64, title: &str, defs: &str) -> String {
        let (w, h) = (num(width), num(height));
        let mut s = String::with_capacity(self.body.len() + 600);
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"{FONT}\" font-size=\"12\">"
        );
        let _ = writeln!(s, "<title>{}</title>", esc(title));
        if !defs.is_empty() {
            let _ = writeln!(s, "<defs>{defs}</defs>");
        }
        let _ = writeln!(
            s,
            "<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#FFFFFF\"/>"
        );
        s.push_str(&self.body);
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::well_formed;
    use proptest::prelude::*;

    #[test]
    fn escape_and_numbers() {
        assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(esc("a\u{1}b"), "a?b");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(12.50), "12.5");
        assert_eq!(num(0.004), "0");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(-3.456), "-3.46");
        assert_eq!(trimmed(200.0, 0), "200");
    }

    #[test]
    fn elements_and_paths_format_their_numbers() {
        assert_eq!(
            element(
                "rect",
                " class=\"bar\"",
                &[("x", 1.0), ("y", 2.5)],
                " fill=\"#000\""
            ),
            "<rect class=\"bar\" x=\"1\" y=\"2.5\" fill=\"#000\"/>"
        );
        assert_eq!(points(&[(1.0, 2.0), (3.25, 4.126)]), "1,2 3.25,4.13");
        let mut d = PathData::new();
        d.rect(1.0, 2.0, 3.5, 4.0)
            .cmd('M', &[0.0, 1.0])
            .cmd('V', &[9.0]);
        assert_eq!(d.as_str(), "M1 2h3.5v4h-3.5zM0 1V9");
    }

    #[test]
    fn a_document_is_well_formed_and_sized_at_the_end() {
        let mut d = Doc::new();
        d.text((1.0, 2.0), " fill=\"#000\"", "a < b & c");
        d.line((0.0, 0.0), (10.0, 10.0), " stroke=\"#000\"");
        d.path(&PathData::new(), "");
        let s = d.finish(100.0, 50.5, "t<1>", "<pattern id=\"p\"/>");
        well_formed(&s).unwrap();
        assert!(s.starts_with(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" height=\"50.5\""
        ));
        assert!(s.contains("<title>t&lt;1&gt;</title>"));
        assert!(s.contains(">a &lt; b &amp; c</text>"));
        assert!(!s.contains("<path"), "an empty path is not written");
    }

    proptest! {
        #[test]
        fn escaped_text_is_always_well_formed(s in any::<String>()) {
            let e = esc(&s);
            let doc = format!("<svg a=\"{e}\"><text>{e}</text></svg>");
            prop_assert!(well_formed(&doc).is_ok(), "{:?}", doc);
            prop_assert!(!e.contains(['<', '>', '"', '\'']));
        }

        #[test]
        fn num_round_trips_to_a_hundredth(v in -1e6f64..1e6) {
            let back: f64 = num(v).parse().unwrap();
            prop_assert!((back - v).abs() <= 0.005 + 1e-9);
        }
    }
}
