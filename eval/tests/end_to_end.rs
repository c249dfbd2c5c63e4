//! End to end: a realistic synthetic run (the harness's record files, made
//! by a small generator with a seeded noise) → `gang-eval report` → the
//! files exist, the CSV has one row per cell with the expected values, the
//! figures are well formed; `gang-eval check` passes on the complete run and
//! names what a broken one lacks; bad input and bad arguments exit 2.

use gang_plot::well_formed;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const POLICIES: &[&str] = &["eevdf", "bpfland", "signal", "gang-strict", "gang-yield"];
/// (workload, dedicated time s, fine-grained?)
const WORKLOADS: &[(&str, f64, bool)] = &[
    ("allreduce", 8.0, true),
    ("rt", 5.0, true),
    ("ep", 10.0, false),
    ("alltoall", 12.0, false),
];
const MPLS: &[u32] = &[1, 2, 3];
const REPS: u32 = 2;

/// A small deterministic generator (no rand crate): xorshift.
struct Noise(u64);
impl Noise {
    /// A factor in [1 - a, 1 + a].
    fn jitter(&mut self, a: f64) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        1.0 + a * ((self.0 % 10_000) as f64 / 5_000.0 - 1.0)
    }
}

/// How much longer than a fair 1/MPL share a job takes (the model).
fn inefficiency(policy: &str, fine: bool, mpl: u32) -> f64 {
    if mpl == 1 {
        return 1.0;
    }
    match (policy, fine) {
        ("eevdf" | "bpfland", true) => 2.6, // ranks descheduled while peers wait
        ("eevdf" | "bpfland", false) => 1.0, // compute-bound: fair share
        ("signal", _) => 1.08,
        ("gang-strict", _) => 1.03,
        _ => 1.02, // gang-yield
    }
}

fn switches(policy: &str, mpl: u32, makespan_s: f64) -> Option<u64> {
    match policy {
        "eevdf" | "bpfland" => None,
        _ if mpl == 1 => Some(0),
        _ => Some((makespan_s * 10.0) as u64), // 100 ms slots
    }
}

/// The run's records, as two files (the harness may write one per phase).
fn generate() -> (String, String) {
    let mut n = Noise(0x9E3779B97F4A7C15);
    let mut a = String::from(
        "# gang-eval synthetic run\nmeta nodes=2 vcpus=1 pinned=yes slot_ms=100 size=reduced reps=2 host_cores=2 kernel=6.12.9\n",
    );
    let mut b = String::from("meta nodes=2 kernel=6.12.10\n");
    let mut t = 1_700_000_000_000.0f64; // the head node's clock, ms
    let line = |p: &str, w: &str, m: u32, r: u32, i: u32, t0: f64, dur: f64| {
        format!(
            "job policy={p} workload={w} mpl={m} rep={r} idx={i} submit_ms={t0:.0} end_ms={:.0} rc=0 ranks=2 ranks_ok=2 elapsed_s={:.3}\n",
            t0 + dur * 1000.0,
            dur * 0.97
        )
    };
    for r in 0..REPS {
        for &(w, d, _) in WORKLOADS {
            let dur = d * n.jitter(0.01);
            a += &line("dedicated", w, 1, r, 0, t, dur);
            a += &format!("cell policy=dedicated workload={w} mpl=1 rep={r} switches=0\n");
            t += dur * 1000.0 + 500.0;
        }
    }
    for &p in POLICIES {
        for &(w, d, fine) in WORKLOADS {
            for &m in MPLS {
                for r in 0..REPS {
                    let mut last: f64 = 0.0;
                    let mut recs = String::new();
                    for i in 0..m {
                        let dur = d * m as f64 * inefficiency(p, fine, m) * n.jitter(0.02);
                        last = last.max(dur);
                        recs += &line(p, w, m, r, i, t, dur);
                    }
                    let sw = switches(p, m, last);
                    recs += &match sw {
                        Some(s) => {
                            format!("cell policy={p} workload={w} mpl={m} rep={r} switches={s}\n")
                        }
                        None => format!("cell policy={p} workload={w} mpl={m} rep={r}\n"),
                    };
                    if p.starts_with("gang") || p == "signal" {
                        b += &recs;
                    } else {
                        a += &recs;
                    }
                    t += last * 1000.0 + 500.0;
                }
            }
        }
        // The short job: rt submitted 2 s after 2 long alltoall jobs.
        for r in 0..REPS {
            let since = 2.0;
            let resp = match p {
                "eevdf" | "bpfland" => 5.0 * 3.0 * 2.6,
                _ => 5.0 * 3.0 * 1.05,
            } * n.jitter(0.02);
            b += &format!(
                "short policy={p} rep={r} workload=rt behind=2 long_workload=alltoall first_long_submit_ms={:.0} submit_ms={:.0} end_ms={:.0} rc=0 ranks=2 ranks_ok=2\n",
                t,
                t + since * 1000.0,
                t + (since + resp) * 1000.0
            );
            t += 40_000.0;
        }
    }
    (a, b)
}

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gang-eval-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_run(d: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = generate();
    let (pa, pb) = (d.join("run-a.log"), d.join("run-b.log"));
    std::fs::write(&pa, a).unwrap();
    std::fs::write(&pb, b).unwrap();
    (pa, pb)
}

fn gang_eval(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gang-eval"))
        .args(args)
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn check_args<'a>(files: &'a [&'a str]) -> Vec<&'a str> {
    let mut v = vec!["check"];
    v.extend_from_slice(files);
    v.extend_from_slice(&[
        "--policies",
        "dedicated eevdf bpfland signal gang-strict gang-yield",
        "--workloads",
        "allreduce rt ep alltoall",
        "--mpls",
        "1 2 3",
        "--reps",
        "2",
        "--short",
    ]);
    v
}

/// The CSV as header → value maps.
fn rows(csv: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            head.iter()
                .map(|h| h.to_string())
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

#[test]
fn report_writes_every_file_with_the_expected_rows() {
    let d = dir("report");
    let (a, b) = write_run(&d);
    let out = d.join("out");
    let o = gang_eval(&[
        "report",
        s(&a),
        s(&b),
        "--out",
        s(&out),
        "--policies",
        "gang-yield gang-strict signal bpfland eevdf dedicated",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "results.csv",
        "short.csv",
        "summary.txt",
        "slowdown.svg",
        "makespan.svg",
        "switch_overhead.svg",
        "short_job.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        summary,
        "the summary is printed as written"
    );
    assert!(summary.contains("run: nodes=2 vcpus=1 pinned=yes slot_ms=100"));
    assert!(
        summary.contains("kernel: 6.12.9 ("),
        "differing meta shown: {summary}"
    );

    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(
        csv.lines().next().unwrap(),
        gang_eval::report::RESULTS_HEADER
    );
    let r = rows(&csv);
    // 5 policies × 4 workloads × 3 MPLs, plus the dedicated cells.
    assert_eq!(r.len(), 5 * 4 * 3 + 4);
    // --policies sets the order; dedicated last as asked.
    assert_eq!(r[0]["policy"], "gang-yield");
    assert_eq!(r.last().unwrap()["policy"], "dedicated");
    for row in &r {
        assert_eq!(row.len(), 15);
        assert_eq!(row["reps"], "2");
        assert_eq!(row["jobs"], row["jobs_ok"]);
        let m: f64 = row["mpl"].parse().unwrap();
        assert_eq!(row["jobs"].parse::<f64>().unwrap(), 2.0 * m);
        let sd: f64 = row["slowdown_mean"].parse().unwrap();
        let ratio: f64 = row["makespan_ratio"].parse().unwrap();
        // The model: slowdown ≈ MPL × inefficiency, makespan ratio ≈ inefficiency.
        let fine = ["allreduce", "rt"].contains(&row["workload"].as_str());
        let ineff = if row["policy"] == "dedicated" {
            1.0
        } else {
            inefficiency(&row["policy"], fine, m as u32)
        };
        assert!((sd / (m * ineff) - 1.0).abs() < 0.05, "{row:?}");
        assert!(ratio > ineff * 0.95 && ratio < ineff * 1.06, "{row:?}");
        assert!(!row["makespan_cv"].is_empty(), "2 reps: a CV");
        // Overhead only where switches were made.
        let switching = row["switches_mean"].parse::<f64>().is_ok_and(|x| x > 0.0);
        assert_eq!(!row["switch_overhead_ms"].is_empty(), switching, "{row:?}");
    }
    let short = std::fs::read_to_string(out.join("short.csv")).unwrap();
    let sr = rows(&short);
    assert_eq!(sr.len(), 5);
    for row in &sr {
        assert_eq!((row["reps"].as_str(), row["ok"].as_str()), ("2", "2"));
        // FIFO: 2 × 12 s - 2 s + 5 s = 27 s.
        let fifo: f64 = row["fifo_s"].parse().unwrap();
        assert!((fifo - 27.0).abs() < 0.6, "{row:?}");
    }

    for f in [
        "slowdown.svg",
        "makespan.svg",
        "switch_overhead.svg",
        "short_job.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        well_formed(&svg).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!svg.contains("no-data"), "{f} has data");
    }
    let sl = std::fs::read_to_string(out.join("slowdown.svg")).unwrap();
    // 4 panels × 5 policies.
    assert_eq!(sl.matches("class=\"series\"").count(), 20);

    // The targets are judged: with slowdown, gang at MPL 3 (≈ 3.1) misses
    // ≤ 1.1; normalised by the share (makespan ratio) it meets it.
    assert!(summary.contains("target slowdown gang-strict allreduce mpl=3 ≤ 1.10"));
    assert!(summary.contains("NOT met"));
    let o = gang_eval(&[
        "report",
        s(&a),
        s(&b),
        "--out",
        s(&d.join("out2")),
        "--target-metric",
        "makespan-ratio",
        "-q",
    ]);
    assert!(o.status.success());
    assert!(o.stdout.is_empty(), "--quiet");
    let s2 = std::fs::read_to_string(d.join("out2/summary.txt")).unwrap();
    for w in ["allreduce", "rt"] {
        for p in ["gang-strict", "gang-yield"] {
            let t = format!("target makespan-ratio {p} {w} mpl=3 ≤ 1.10");
            let line = s2
                .lines()
                .find(|l| l.contains(&t))
                .unwrap_or_else(|| panic!("{t}: {s2}"));
            assert!(line.ends_with("  met"), "{line}");
        }
        for p in ["eevdf", "bpfland"] {
            let t = format!("target makespan-ratio {p} {w} mpl=3 ≥ 2.00");
            let line = s2.lines().find(|l| l.contains(&t)).unwrap();
            assert!(line.ends_with("  met"), "{line}");
        }
    }
    // mpi_allreduce is not in this run.
    assert!(s2.contains("mpi_allreduce: makespan-ratio of gang ≤ 1.1 and local ≥ 2  n/a: no cell of workload mpi_allreduce"));
    // Gang switches every 100 ms like signal but costs less per switch:
    // the model's overheads are (1.03 - 1) vs (1.08 - 1) of the makespan, 2.7× apart.
    assert!(s2
        .lines()
        .any(|l| l.contains("per-switch overhead gang-strict ep mpl=3") && l.ends_with("NOT met")));
}

#[test]
fn check_passes_on_the_complete_run_and_names_what_is_missing() {
    let d = dir("check");
    let (a, b) = write_run(&d);
    let files = [s(&a), s(&b)];
    let o = gang_eval(&check_args(&files));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("check: complete"));

    // Without run-b (gang, signal, short records): exit 1, every item listed.
    let o = gang_eval(&check_args(&files[..1]));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("gang-strict allreduce mpl=3 rep=1: job idx=2 missing"));
    assert!(out.contains("signal ep mpl=1 rep=0: no cell record"));
    assert!(out.contains("gang-yield short: no short records at all"));
    assert!(out.lines().last().unwrap().contains("problem(s)"));

    // One job failed.
    let text = std::fs::read_to_string(&b).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let i = lines
        .iter()
        .position(|l| l.starts_with("job policy=signal workload=rt mpl=2 rep=1 idx=0 "))
        .unwrap();
    lines[i] = lines[i].replace("rc=0 ranks=2 ranks_ok=2", "rc=1 ranks=2 ranks_ok=1");
    let lineno = i + 1;
    let bad = lines.join("\n");
    let pb = d.join("run-b-failed.log");
    std::fs::write(&pb, bad).unwrap();
    let o = gang_eval(&check_args(&[s(&a), s(&pb)]));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    let want = "signal rt mpl=2 rep=1: job idx=0 failed: rc=1 ranks_ok=1/2";
    assert!(out.lines().next().unwrap().starts_with(want), "{out}");
    assert!(
        out.contains(&format!("run-b-failed.log:{lineno})")),
        "{out}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
}

#[test]
fn malformed_input_and_bad_arguments_exit_2() {
    let d = dir("bad");
    let (a, _) = write_run(&d);
    let bad = d.join("bad.log");
    std::fs::write(
        &bad,
        "# ok\nmeta nodes=2\njob policy=eevdf workload=ep mpl=x rep=0\n",
    )
    .unwrap();
    for cmd in [
        vec!["report", s(&a), s(&bad), "--out", s(&d)],
        check_args(&[s(&a), s(&bad)]),
    ] {
        let o = gang_eval(&cmd);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("{}:3: mpl=x: not a whole number", s(&bad))),
            "{err}"
        );
    }
    let o = gang_eval(&["report", s(&d.join("nonexistent.log")), "--out", s(&d)]);
    assert_eq!(o.status.code(), Some(2));
    for args in [
        vec!["report", s(&a)],          // no --out
        vec!["report", "--out", s(&d)], // no file
        vec![
            "check",
            s(&a),
            "--policies",
            "eevdf",
            "--workloads",
            "ep",
            "--mpls",
            "1 x",
            "--reps",
            "1",
        ],
        vec![
            "check",
            s(&a),
            "--policies",
            "",
            "--workloads",
            "ep",
            "--mpls",
            "1",
            "--reps",
            "1",
        ],
        vec![
            "check",
            s(&a),
            "--policies",
            "eevdf",
            "--workloads",
            "ep",
            "--mpls",
            "1",
            "--reps",
            "0",
        ],
        vec![
            "check",
            s(&a),
            "--policies",
            "eevdf",
            "--workloads",
            "ep",
            "--mpls",
            "0",
            "--reps",
            "1",
        ],
        vec![
            "check",
            s(&a),
            "--policies",
            "eevdf",
            "--workloads",
            "ep",
            "--mpls",
            "1",
        ], // no --reps
        vec!["frobnicate"],
        vec![],
    ] {
        let o = gang_eval(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Usage"),
            "{args:?}"
        );
    }
}
