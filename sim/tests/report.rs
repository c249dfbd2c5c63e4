//! The outputs: the CSV has one row per (policy, load) under its header,
//! and each figure is well-formed SVG with one line per policy and a point
//! per row carrying its value.

use gang_sim::metrics::Summary;
use gang_sim::report::{csv, figure, Row, CSV_HEADER};

fn rows() -> Vec<Row> {
    let mut out = vec![];
    for policy in ["easy", "gang-first_fit-mpl4"] {
        for (k, load) in [0.5, 0.9].into_iter().enumerate() {
            out.push(Row {
                policy: policy.into(),
                load,
                offered: load,
                summary: Summary {
                    jobs: 10,
                    mean_response_s: 100.0 * (k + 1) as f64,
                    mean_bsld: 1.5,
                    ..Summary::default()
                },
                wall_s: 0.1,
            });
        }
    }
    out
}

#[test]
fn csv_has_a_header_and_a_row_per_policy_and_load() {
    let text = csv(&rows());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], CSV_HEADER);
    assert_eq!(lines.len(), 5);
    assert!(
        lines[1].starts_with("easy,0.50,0.5000,10,0,100.0,"),
        "{}",
        lines[1]
    );
}

#[test]
fn a_figure_is_well_formed_with_a_line_per_policy() {
    let svg = figure(&rows(), "Mean response <time>", "s", |s| s.mean_response_s);
    gang_plot::well_formed(&svg).unwrap();
    assert_eq!(svg.matches("<path").count(), 2);
    assert_eq!(svg.matches("data-load=").count(), 4);
    assert!(svg.contains("data-policy=\"easy\" data-load=\"0.9\" data-value=\"200\""));
}
