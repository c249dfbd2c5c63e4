//! Text for `gang ps`: the job table, compact node lists, durations.

use gang_wire::proto::{JobInfo, JobState};

/// A user's name for `uid` (passwd lookup), or the number.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => uid.to_string(),
    }
}

/// Elapsed time the way `ps` users read it: `45s`, `1m02s`, `2h03m04s`,
/// `3d04h05m`.
pub fn format_elapsed(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}h{m:02}m")
    } else if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

/// Text from gangd (other users' job names, node names) made safe for a
/// terminal: control characters would let a job name move the cursor or
/// recolour the screen, and whitespace would break the columns.
pub fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_control() || c.is_whitespace() {
                '?'
            } else {
                c
            }
        })
        .collect();
    if out.is_empty() {
        "-".into()
    } else {
        out
    }
}

/// A message from gangd (a refusal's reason, a job's summary) made safe
/// for a terminal: one line, control characters shown as `?`.
pub fn sanitize_line(s: &str) -> String {
    s.trim_end()
        .chars()
        .map(|c| match c {
            '\n' | '\t' => ' ',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// Splits "node12" into ("node", "12"); the digits are the name's trailing
/// run of ASCII digits (may be empty).
fn split_index(name: &str) -> (&str, &str) {
    let cut = name
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit())
        .last()
        .map_or(name.len(), |(i, _)| i);
    name.split_at(cut)
}

/// Node names compacted the Slurm way: `node0,node1,node2,node5,gpu1` is
/// `node[0-2,5],gpu1`. Names that share a prefix and an index width (so
/// `node01` and `node1` stay apart) are grouped and their indices sorted;
/// groups keep the order of their first name. Duplicates are shown once.
pub fn compact_nodes(nodes: &[String]) -> String {
    // (prefix, width) -> indices, in order of first appearance.
    let mut groups: Vec<((&str, usize), Vec<u64>)> = Vec::new();
    let mut plain: Vec<(usize, &str)> = Vec::new();
    let mut order: Vec<Result<usize, usize>> = Vec::new();
    for name in nodes {
        let (prefix, digits) = split_index(name);
        let idx = if digits.is_empty() || digits.len() > 18 {
            None
        } else {
            digits.parse::<u64>().ok()
        };
        match idx {
            Some(i) => {
                let key = (prefix, digits.len());
                match groups.iter_mut().position(|(k, _)| *k == key) {
                    Some(g) => groups[g].1.push(i),
                    None => {
                        groups.push((key, vec![i]));
                        order.push(Ok(groups.len() - 1));
                    }
                }
            }
            None => {
                if !plain.iter().any(|(_, n)| *n == name.as_str()) {
                    plain.push((order.len(), name));
                    order.push(Err(plain.len() - 1));
                }
            }
        }
    }
    let mut parts = Vec::new();
    for o in order {
        match o {
            Err(p) => parts.push(plain[p].1.to_string()),
            Ok(g) => {
                let ((prefix, width), idx) = &mut groups[g];
                idx.sort_unstable();
                idx.dedup();
                if idx.len() == 1 {
                    parts.push(format!("{prefix}{:0width$}", idx[0], width = *width));
                    continue;
                }
                let mut ranges: Vec<String> = Vec::new();
                let mut i = 0;
                while i < idx.len() {
                    let mut j = i;
                    while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
                        j += 1;
                    }
                    if j == i {
                        ranges.push(format!("{:0w$}", idx[i], w = *width));
                    } else {
                        ranges.push(format!("{:0w$}-{:0w$}", idx[i], idx[j], w = *width));
                    }
                    i = j + 1;
                }
                parts.push(format!("{prefix}[{}]", ranges.join(",")));
            }
        }
    }
    parts.join(",")
}

fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Queued => "queued",
        JobState::Running => "running",
        JobState::Suspended => "suspended",
    }
}

/// Columns padded to their widest cell; the last column is not padded.
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            l.push_str(cell);
            if i + 1 < widths.len() {
                for _ in cell.chars().count()..widths[i] {
                    l.push(' ');
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The `gang ps` table: JOB NAME USER STATE RANKS SLOT NODES ELAPSED, one
/// line per job in the order given. `user` maps a uid to a name (see
/// [`user_name`]; a parameter so tests do not depend on the host).
pub fn ps_table(jobs: &[JobInfo], user: impl Fn(u32) -> String) -> String {
    let header = [
        "JOB", "NAME", "USER", "STATE", "RANKS", "SLOT", "NODES", "ELAPSED",
    ];
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let nodes = if j.nodes.is_empty() {
                "-".to_string()
            } else {
                let clean: Vec<String> = j.nodes.iter().map(|n| sanitize(n)).collect();
                compact_nodes(&clean)
            };
            vec![
                j.job.to_string(),
                sanitize(&j.name),
                sanitize(&user(j.uid)),
                state_name(j.state).to_string(),
                j.ranks.to_string(),
                j.slot.map_or("-".to_string(), |s| s.to_string()),
                nodes,
                format_elapsed(j.elapsed_ms),
            ]
        })
        .collect();
    render_table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn elapsed() {
        assert_eq!(format_elapsed(0), "0s");
        assert_eq!(format_elapsed(45_999), "45s");
        assert_eq!(format_elapsed(62_000), "1m02s");
        assert_eq!(format_elapsed(3_600_000 + 3 * 60_000 + 4_000), "1h03m04s");
        assert_eq!(format_elapsed(2 * 86_400_000 + 5 * 3_600_000), "2d05h00m");
    }

    #[test]
    fn node_lists() {
        assert_eq!(
            compact_nodes(&names(&["node0", "node1", "node2"])),
            "node[0-2]"
        );
        assert_eq!(
            compact_nodes(&names(&["node5", "node0", "gpu1", "node1", "node2"])),
            "node[0-2,5],gpu1"
        );
        assert_eq!(compact_nodes(&names(&["a", "b", "a"])), "a,b");
        assert_eq!(compact_nodes(&names(&["n01", "n02", "n1"])), "n[01-02],n1");
        assert_eq!(compact_nodes(&names(&["node3"])), "node3");
        assert_eq!(compact_nodes(&names(&["7", "8"])), "[7-8]");
        assert_eq!(compact_nodes(&names(&["x1", "x1"])), "x1");
        assert_eq!(compact_nodes(&names(&["é9", "é10"])), "é9,é10");
        assert_eq!(compact_nodes(&[]), "");
    }

    #[test]
    fn sanitizing() {
        assert_eq!(sanitize("a\x1b[31mb c"), "a?[31mb?c");
        assert_eq!(sanitize(""), "-");
        assert_eq!(sanitize_line("no\nsuch\x07 job\n"), "no such? job");
    }
}
