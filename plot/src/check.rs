//! The well-formedness checker every picture of ours is tested with.
//!
//! It scans the document once: text between tags, tags with their quoted
//! attributes, a stack of open elements. It accepts exactly the XML our
//! pictures are written in: the document begins with `<svg`, one root,
//! tags balanced and nested, attributes `name="value"` (or single quotes)
//! each once, text and values escaped with the five named entities, no
//! control characters.
//!
//! Known faults: it is stricter than XML where we never need more (no
//! prolog, comments, CDATA, or numeric character references) and knows no
//! SVG: an unknown element or attribute passes.

/// `Ok` when `doc` is a well-formed picture as described in the module
/// doc, else what is wrong first.
pub fn well_formed(doc: &str) -> Result<(), String> {
    if !doc.starts_with("<svg") {
        return Err("the document does not begin with <svg".into());
    }
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let b = doc.as_bytes();
    let mut i = 0;
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
        // A tag: find its end outside quotes.
        let mut j = i + 1;
        let mut quote: Option<u8> = None;
        while j < b.len() {
            match (quote, b[j]) {
                (None, b'"') | (None, b'\'') => quote = Some(b[j]),
                (Some(q), c) if c == q => quote = None,
                (_, b'<') => return Err(format!("'<' inside a tag at byte {j}")),
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
        let name_len = inner.find(char::is_whitespace).unwrap_or(inner.len());
        let name = &inner[..name_len];
        if !is_name(name) {
            return Err(format!("bad tag name {name:?}"));
        }
        check_attributes(name, &inner[name_len..])?;
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

fn is_name(n: &str) -> bool {
    !n.is_empty()
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':' || c == '_')
}

/// Attributes of `<name ...>`: name="value" pairs, each name once.
fn check_attributes(name: &str, attrs: &str) -> Result<(), String> {
    let mut rest = attrs.trim_start();
    let mut seen: Vec<&str> = Vec::new();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("attribute without value in <{name}>"))?;
        let an = rest[..eq].trim();
        if !is_name(an) {
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
        let after_value = &after[close + 2..];
        if !after_value.is_empty() && !after_value.starts_with(char::is_whitespace) {
            return Err(format!("no space after attribute {an} in <{name}>"));
        }
        rest = after_value.trim_start();
    }
    Ok(())
}

/// Text or an attribute value: no '<' or '>', '&' only in a named entity,
/// no control characters.
fn check_text(t: &str) -> Result<(), String> {
    if t.contains(['<', '>']) {
        return Err(format!("unescaped '<' or '>' in text {t:?}"));
    }
    if t.chars()
        .any(|c| (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r')
    {
        return Err(format!("control character in {t:?}"));
    }
    let mut rest = t;
    while let Some(p) = rest.find('&') {
        let after = &rest[p..];
        let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
            .iter()
            .any(|e| after.starts_with(e));
        if !ok {
            return Err(format!("bad entity in {t:?}"));
        }
        rest = &after[1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_checker_rejects_broken_xml() {
        assert!(well_formed("<svg><g></svg>").is_err());
        assert!(well_formed("<svg><g></g>").is_err());
        assert!(well_formed("<svg a=b></svg>").is_err());
        assert!(well_formed("<svg><text>a & b</text></svg>").is_err());
        assert!(well_formed("<svg></svg><svg></svg>").is_err());
        assert!(well_formed("<svg x=\"1\"><text>a &amp; b</text><g/></svg>\n").is_ok());
    }

    #[test]
    fn it_accepts_only_what_we_write() {
        // The root comes first.
        assert!(well_formed(" <svg></svg>").is_err());
        assert!(well_formed("<?xml version=\"1.0\"?><svg></svg>").is_err());
        assert!(well_formed("<g></g>").is_err());
        assert!(well_formed("<svg></svg>x").is_err());
        // Inside tags.
        assert!(well_formed("<svg <g=\"1\"></svg>").is_err());
        assert!(well_formed("<svg a=\"1\" a=\"2\"></svg>").is_err());
        assert!(well_formed("<svg a=\"1\"b=\"2\"></svg>").is_err());
        assert!(well_formed("<svg a=\"x<y\"></svg>").is_err());
        assert!(well_formed("<svg a='1'></svg>").is_ok());
        // Text.
        assert!(well_formed("<svg><!-- c --></svg>").is_err());
        assert!(well_formed("<svg>&#65;</svg>").is_err());
        assert!(well_formed("<svg>a > b</svg>").is_err());
        assert!(well_formed("<svg>a\u{1}b</svg>").is_err());
        assert!(well_formed("<svg>\n\t&lt;&gt;&quot;&apos;</svg>").is_ok());
        assert!(well_formed("<svg><g").is_err());
        assert!(well_formed("<svg></g></svg>").is_err());
    }

    /// A random tree of nested elements with escaped text.
    fn arb_tree() -> impl Strategy<Value = String> {
        let leaf = "[a-z<>&\"' ]{0,6}".prop_map(|t| crate::esc(&t));
        leaf.prop_recursive(4, 32, 4, |inner| {
            (
                prop::collection::vec(inner, 0..4),
                "[a-z]{1,4}",
                "[a-z<&>\"]{0,4}",
            )
                .prop_map(|(kids, name, v)| {
                    format!(
                        "<{name} v=\"{}\">{}</{name}>",
                        crate::esc(&v),
                        kids.concat()
                    )
                })
        })
    }

    proptest! {
        #[test]
        fn nested_escaped_trees_pass_and_any_cut_fails(tree in arb_tree(), cut in 0usize..1000) {
            let doc = format!("<svg>{tree}</svg>\n");
            prop_assert!(well_formed(&doc).is_ok(), "{}", doc);
            // Cut inside the root: an element is left open or a tag broken.
            let cut = 1 + cut % (doc.trim_end().len() - 1);
            if doc.is_char_boundary(cut) {
                prop_assert!(well_formed(&doc[..cut]).is_err(), "{}", &doc[..cut]);
            }
        }
    }
}
