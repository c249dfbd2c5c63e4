//! Room for text, and legends laid out in rows.
//!
//! Widths are estimated, not measured: a character of the sans-serif fonts
//! we name is about 7/12 of the font size wide on average (7 px at 12 px,
//! [`text_width`]).
//! A legend is a row of entries that wraps at the right edge ([`flow`]).
//!
//! Known faults: the estimate is short for text of wide letters (capitals,
//! 'm', 'w') and long for narrow ones; bold text is about 5% wider.

/// Estimated width in px of `text` set at `font_size` px.
pub fn text_width(text: &str, font_size: f64) -> f64 {
    text.chars().count() as f64 * font_size * 7.0 / 12.0
}

/// Places entries of the given widths left to right from `(x0, y0)`,
/// starting a new row `row_h` lower when the next entry would pass
/// `x0 + max_w` (an entry wider than a row gets a row of its own). Returns
/// each entry's position and the y of the last row.
pub fn flow(
    widths: &[f64],
    (x0, y0): (f64, f64),
    max_w: f64,
    row_h: f64,
) -> (Vec<(f64, f64)>, f64) {
    let (mut x, mut y) = (x0, y0);
    let mut at = Vec::with_capacity(widths.len());
    for w in widths {
        if x > x0 && x + w > x0 + max_w {
            x = x0;
            y += row_h;
        }
        at.push((x, y));
        x += w;
    }
    (at, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_grow_with_characters_and_size() {
        assert_eq!(text_width("", 12.0), 0.0);
        assert!((text_width("abcd", 12.0) - 28.0).abs() < 1e-9);
        assert_eq!(
            text_width("µs", 10.0),
            text_width("ab", 10.0),
            "characters, not bytes"
        );
    }

    #[test]
    fn legends_wrap_at_the_right_edge() {
        let (at, last) = flow(&[40.0, 40.0, 40.0, 200.0], (10.0, 5.0), 100.0, 20.0);
        assert_eq!(
            at,
            vec![(10.0, 5.0), (50.0, 5.0), (10.0, 25.0), (10.0, 45.0)]
        );
        assert_eq!(last, 45.0);
        let (at, last) = flow(&[], (0.0, 7.0), 100.0, 20.0);
        assert!(at.is_empty());
        assert_eq!(last, 7.0);
    }
}
