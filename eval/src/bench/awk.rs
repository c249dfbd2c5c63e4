//! The text and number rules of the awk the benchmark's tables came from
//! (scripts/bench_cluster.sh), kept so that the tables stay the same: a
//! field of a flat JSON line, awk's number of a text and text of a number,
//! its median, its byte-counted padding.
//!
//! Known faults: [`field`] is no JSON parser (a value holding `,` `"` or
//! `}` is cut there); it reads the records cluster_bench.sh writes, which
//! hold numbers and plain words.

/// The value of key `name` in a flat JSON line: the text after the last
/// `"name":` (and an opening quote) up to the first `"`, `,` or `}`; empty
/// when the key is absent.
pub fn field(line: &str, name: &str) -> String {
    let key = format!("\"{name}\":");
    let Some(at) = line.rfind(&key) else {
        return String::new();
    };
    let rest = &line[at + key.len()..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let end = rest.find(['"', ',', '}']).unwrap_or(rest.len());
    rest[..end].to_string()
}

/// awk's number of a text: its leading number, 0 if none.
pub fn num(s: &str) -> f64 {
    let s = s.trim_start();
    let mut end = 0;
    let b = s.as_bytes();
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    if end < b.len() && (b[end] == b'-' || b[end] == b'+') {
        end += 1;
    }
    end = digits(end);
    if end < b.len() && b[end] == b'.' {
        end = digits(end + 1);
    }
    if end < b.len() && (b[end] == b'e' || b[end] == b'E') {
        let mut e = end + 1;
        if e < b.len() && (b[e] == b'-' || b[e] == b'+') {
            e += 1;
        }
        let e2 = digits(e);
        if e2 > e {
            end = e2;
        }
    }
    s[..end].parse().unwrap_or(0.0)
}

/// awk's text of a computed number: an integer as one, else `%.6g`.
pub fn awk_fmt(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e16 {
        return format!("{}", x as i64);
    }
    let exp = if x == 0.0 {
        0
    } else {
        x.abs().log10().floor() as i32
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{x:.5e}");
        let (m, e) = s.split_once('e').unwrap();
        let m = trim_zeros(m);
        let e: i32 = e.parse().unwrap();
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim_zeros(&format!("{x:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// `%d` of a text (truncated toward zero).
pub(super) fn int(s: &str) -> i64 {
    num(s) as i64
}

/// A median as awk had it: `text` is what `%s` printed (the middle text of
/// an odd count, the mean of the two middle numbers as awk prints a
/// number, empty for none), `value` the exact number.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Med {
    pub text: String,
    pub value: f64,
}

impl Med {
    /// A text taken as it is (a field), its number awk's.
    pub fn of(text: &str) -> Med {
        Med {
            text: text.to_string(),
            value: num(text),
        }
    }
}

/// The median of `list` (awk's): the middle text of an odd count, the mean
/// of the two middle numbers otherwise; empty for none.
pub fn median(list: &[String]) -> Med {
    let mut v: Vec<&String> = list.iter().collect();
    v.sort_by(|a, b| num(a).total_cmp(&num(b)));
    let n = v.len();
    match n {
        0 => Med::default(),
        _ if n % 2 == 1 => Med::of(v[n / 2]),
        _ => {
            let value = (num(v[n / 2 - 1]) + num(v[n / 2])) / 2.0;
            Med {
                text: awk_fmt(value),
                value,
            }
        }
    }
}

/// `%-Ns` as awk under LC_ALL=C pads: to `width` bytes.
pub(super) fn pad(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(s.len())))
}

pub(super) fn min_of(list: &[String]) -> f64 {
    list.iter().map(|s| num(s)).fold(f64::INFINITY, f64::min)
}

pub(super) fn max_of(list: &[String]) -> f64 {
    list.iter()
        .map(|s| num(s))
        .fold(f64::NEG_INFINITY, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::strings;

    #[test]
    fn a_field_is_the_text_after_its_last_key_up_to_a_quote_comma_or_brace() {
        let l = r#"{"rep":2,"method":"strict","tq":100,"d":6.5,"early":""}"#;
        assert_eq!(field(l, "rep"), "2");
        assert_eq!(field(l, "method"), "strict");
        assert_eq!(field(l, "d"), "6.5");
        assert_eq!(field(l, "early"), "");
        assert_eq!(field(l, "missing"), "");
        assert_eq!(field(r#"{"a":1,"x":{"a":7}}"#, "a"), "7", "the last one");
    }

    #[test]
    fn numbers_read_and_print_like_awk() {
        assert_eq!(num("12.5 ms"), 12.5);
        assert_eq!(num(""), 0.0);
        assert_eq!(num("-"), 0.0);
        assert_eq!(num("1e3"), 1000.0);
        assert_eq!(awk_fmt(1500.0), "1500");
        assert_eq!(awk_fmt(1234.5678), "1234.57");
        assert_eq!(awk_fmt(0.953125), "0.953125");
        assert_eq!(awk_fmt(1234567.5), "1.23457e+06");
        assert_eq!(pad("µs", 3), "µs", "padded by bytes: µ is two");
        assert_eq!(pad("µs", 4), "µs ");
    }

    #[test]
    fn a_median_keeps_the_middle_text_or_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&strings(&["3", "1.50", "2"])).text, "2");
        assert_eq!(
            median(&strings(&["10", "9", "1.50"])).text,
            "9",
            "numeric order"
        );
        let even = median(&strings(&["4", "1", "2", "3"]));
        assert_eq!((even.text.as_str(), even.value), ("2.5", 2.5));
        assert_eq!(median(&[]), Med::default());
    }
}
