//! The load harness's table (issue 14): `scripts/bench_scale.sh` writes one
//! CSV row per node count (gang-load's `--header` names the columns); this
//! reads one or several such runs back, for the figure of gangd's costs
//! against N (`figures::scale_svg`, `gang-eval scale`).
//!
//! Columns are found by name, so gang-load may add some; an empty field is
//! a figure that was not measured (a phase that did not complete) and stays
//! empty, never zero. A malformed file is an error naming `file:line`.
//!
//! Known fault: one row per node count is expected; a second row of the
//! same N in one run replaces the first.

use std::collections::BTreeMap;

/// One node count of one run: its figures by column name.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleRow {
    pub nodes: u32,
    pub values: BTreeMap<String, f64>,
}

impl ScaleRow {
    pub fn get(&self, column: &str) -> Option<f64> {
        self.values.get(column).copied()
    }
}

/// A run: its label (the legend) and rows by node count, ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleRun {
    pub label: String,
    pub rows: Vec<ScaleRow>,
}

/// Parses one scale.csv; `name` is for errors.
pub fn parse(name: &str, text: &str) -> Result<Vec<ScaleRow>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| format!("{name}: empty file, no header"))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let at_nodes = cols
        .iter()
        .position(|c| *c == "nodes")
        .ok_or_else(|| format!("{name}:1: the header has no `nodes` column: {header}"))?;
    let mut rows: BTreeMap<u32, ScaleRow> = BTreeMap::new();
    for (i, line) in lines {
        let at = format!("{name}:{}", i + 1);
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != cols.len() {
            return Err(format!(
                "{at}: {} fields, the header has {}",
                fields.len(),
                cols.len()
            ));
        }
        let nodes: u32 = fields[at_nodes]
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                format!(
                    "{at}: nodes {:?} is not a positive whole number",
                    fields[at_nodes]
                )
            })?;
        let mut values = BTreeMap::new();
        for (c, f) in cols.iter().zip(&fields) {
            if f.is_empty() || *c == "nodes" {
                continue;
            }
            let v: f64 = f
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| format!("{at}: {c} {f:?} is not a number"))?;
            values.insert(c.to_string(), v);
        }
        rows.insert(nodes, ScaleRow { nodes, values });
    }
    if rows.is_empty() {
        return Err(format!("{name}: no rows under the header"));
    }
    Ok(rows.into_values().collect())
}

/// `LABEL=PATH` or `PATH` (the label is then the file's directory name).
pub fn label_and_path(arg: &str) -> (String, String) {
    match arg.split_once('=') {
        Some((l, p)) if !l.is_empty() => (l.to_string(), p.to_string()),
        _ => {
            let p = std::path::Path::new(arg);
            let label = p
                .parent()
                .and_then(|d| d.file_name())
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|| arg.to_string());
            (label, arg.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "nodes,cpus,join_s,cpu_steady_pct,place_all_ms\n\
                       256,4,0.97,8.40,245.58\n\
                       64,4,0.24,2.00,24.52\n\
                       4096,4,61.21,,\n";

    #[test]
    fn rows_come_back_by_node_count_and_empty_fields_stay_unmeasured() {
        let rows = parse("run", RUN).unwrap();
        assert_eq!(
            rows.iter().map(|r| r.nodes).collect::<Vec<_>>(),
            vec![64, 256, 4096]
        );
        assert_eq!(rows[1].get("cpu_steady_pct"), Some(8.4));
        assert_eq!(rows[2].get("cpu_steady_pct"), None, "not measured, not 0");
        assert_eq!(rows[2].get("join_s"), Some(61.21));
        assert_eq!(rows[0].get("no_such_column"), None);
    }

    #[test]
    fn a_malformed_file_names_its_line() {
        let cases = [
            ("", "empty file"),
            ("cpus,x\n1,2\n", "no `nodes` column"),
            ("nodes,x\n", "no rows"),
            ("nodes,x\n64,1\n128\n", "run:3: 1 fields, the header has 2"),
            ("nodes,x\n0,1\n", "run:2: nodes \"0\""),
            ("nodes,x\nmany,1\n", "run:2: nodes"),
            ("nodes,x\n64,fast\n", "run:2: x \"fast\" is not a number"),
            ("nodes,x\n64,inf\n", "run:2: x \"inf\""),
        ];
        for (text, want) in cases {
            let e = parse("run", text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_run_is_labelled_by_its_argument_or_its_directory() {
        assert_eq!(
            label_and_path("before=/a/b/scale.csv"),
            ("before".into(), "/a/b/scale.csv".into())
        );
        assert_eq!(
            label_and_path("/x/after/scale.csv"),
            ("after".into(), "/x/after/scale.csv".into())
        );
        assert_eq!(label_and_path("scale.csv").1, "scale.csv");
    }
}
