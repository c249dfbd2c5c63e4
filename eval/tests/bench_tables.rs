//! `gang-eval bench`: the cluster benchmark's tables from a sample of its
//! raw records (tests/data/bench: two boots, N = 1 and 2, the files
//! tests/vm/scenarios/cluster_bench.sh writes) are the tables the awk of
//! scripts/bench_cluster.sh printed for them (tests/data/bench_expected,
//! see its README for the one fixed difference).

use gang_eval::bench::{load_boot, tables, write_tables, BenchParams};
use std::fs;
use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn params() -> BenchParams {
    BenchParams {
        nodes: vec![1, 2],
        icount: String::new(),
        ncpu: 2,
        fill: 0,
        seconds: 6,
        head: true,
    }
}

fn expected(name: &str) -> String {
    fs::read_to_string(data().join("bench_expected").join(name)).unwrap()
}

#[test]
fn the_sample_gives_the_awks_tables() {
    let boots: Vec<_> = [1, 2]
        .iter()
        .map(|n| load_boot(&data().join(format!("bench/n{n}")), *n))
        .collect();
    let t = tables(&params(), &boots);
    assert_eq!(t.runs_csv, expected("runs.csv"));
    assert_eq!(t.results_csv, expected("results.csv"));
    assert_eq!(t.table, expected("table.txt"));
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn write_tables_writes_the_four_files_into_the_directory() {
    let dir = std::env::temp_dir().join(format!("gang-eval-bench-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    copy_dir(&data().join("bench"), &dir);
    let table = write_tables(&params(), &dir).unwrap();
    assert_eq!(table, expected("table.txt"));
    for f in ["runs.csv", "results.csv", "table.txt"] {
        assert_eq!(fs::read_to_string(dir.join(f)).unwrap(), expected(f), "{f}");
    }
    // The sample has no timed runs: the header alone.
    assert_eq!(
        fs::read_to_string(dir.join("timed_nodes.csv")).unwrap(),
        format!("{}\n", gang_eval::bench::TIMED_NODES_HEADER)
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_boot_that_left_nothing_gives_headers_and_no_rows() {
    let mut p = params();
    p.nodes = vec![3];
    let t = tables(&p, &[load_boot(&data().join("bench/n3-missing"), 3)]);
    assert_eq!(t.runs_csv.lines().count(), 1, "{}", t.runs_csv);
    assert_eq!(t.results_csv.lines().count(), 1, "{}", t.results_csv);
    assert!(t.table.starts_with("Cluster benchmark"));
}
