//! gang-eval: the evaluation's raw records → results.
//!
//! `gang-eval report FILE... --out DIR`: results.csv, short.csv,
//! summary.txt (also printed) and the SVG figures.
//! `gang-eval check FILE... --policies ... --workloads ... --mpls ... --reps R [--short]`:
//! exit 0 when the run is complete, 1 listing what is missing or failed.
//! `gang-eval lone FILE... --out DIR [--policy P]`: the lone-job table
//! (MPL 1 jobs against eevdf and bpfland, with their rankprobe figures),
//! DIR/lone.txt (also printed) and DIR/lone.csv.
//! `gang-eval bench DIR --nodes "1 2 3" ...`: the cluster benchmark's
//! DIR/runs.csv, results.csv, timed_nodes.csv and table.txt (also printed)
//! from its boots in DIR/n<N>/.
//! `gang-eval scale [LABEL=]CSV... --out DIR`: DIR/scale.svg, the load
//! harness's figures against N (scripts/bench_scale.sh's scale.csv), a line
//! per run.
//! Malformed input or bad arguments: exit 2.

use clap::{Args, CommandFactory, Parser, Subcommand};
use gang_eval::bench::{write_tables, BenchParams};
use gang_eval::check::{check, Expect};
use gang_eval::metrics::analyse;
use gang_eval::records::Log;
use gang_eval::report::write_report;
use gang_eval::targets::{evaluate, TargetConfig, TargetMetric};
use gang_eval::{split_list, KNOWN_POLICIES};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gang-eval",
    version,
    about = "Turns the evaluation's raw records into CSV, a summary, SVG figures, and checks that a run is complete"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Writes DIR/results.csv, short.csv, summary.txt (also printed) and the figures.
    Report(ReportArgs),
    /// Exit 0 iff every expected record is there and ok; else 1 with the list.
    Check(CheckArgs),
    /// The cluster benchmark's DIR/runs.csv, results.csv, timed_nodes.csv and table.txt (printed).
    Bench(BenchArgs),
    /// The lone-job table: DIR/lone.txt (printed) and DIR/lone.csv.
    Lone(LoneArgs),
    /// DIR/scale.svg: gangd's costs against the number of nodes, a line per run.
    Scale(ScaleArgs),
}

#[derive(Args)]
struct ScaleArgs {
    /// scale.csv files of scripts/bench_scale.sh, as LABEL=PATH or PATH
    /// (labelled by its directory).
    #[arg(required = true)]
    runs: Vec<String>,
    /// Output directory (created if needed).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct LoneArgs {
    /// Record files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output directory (created if needed).
    #[arg(long)]
    out: PathBuf,
    /// The policy whose target is checked.
    #[arg(long, default_value = "gang-strict")]
    policy: String,
    /// The compute nodes' `bpf_cost` lines (scripts/eval.sh --bpf-stats:
    /// DIR/bpf_cost.txt): the schedulers' own BPF cost is added to the
    /// table and written to bpf_cost.csv.
    #[arg(long)]
    bpf_cost: Option<PathBuf>,
}

#[derive(Args)]
struct BenchArgs {
    /// The benchmark's output directory (its boots in DIR/n<N>/).
    dir: PathBuf,
    /// Node counts of the boots, in order ("1 2 3").
    #[arg(long, value_parser = mpls)]
    nodes: Mpls,
    /// qemu -icount shift of the boots (none: real time).
    #[arg(long, default_value = "")]
    icount: String,
    /// Host cores the VMs were pinned to.
    #[arg(long)]
    ncpu: u32,
    /// gangd's --fill.
    #[arg(long, default_value_t = 0)]
    fill: u32,
    /// The least window D per run, in seconds.
    #[arg(long)]
    seconds: u32,
    /// 1: node 0 was a head without ranks; 0: gangd ran among the ranks.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1))]
    head: u32,
}

#[derive(Args)]
struct ReportArgs {
    /// Record files (several runs may be merged).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output directory (created if needed).
    #[arg(long)]
    out: PathBuf,
    /// Display order of policies ("a b c"); others follow as first seen.
    #[arg(long)]
    policies: Option<String>,
    /// Fine-grained workloads of the slowdown targets.
    #[arg(long, default_value = "allreduce rt mpi_allreduce ompi_allreduce")]
    fine_workloads: String,
    /// Gang policies (targets: slowdown ≤ 1.1, ep within 2 %, switch cost).
    #[arg(long, default_value = "gang-strict gang-yield")]
    gang_policies: String,
    /// Local schedulers (target: slowdown ≥ 2.0 on fine-grained workloads).
    #[arg(long, default_value = "eevdf bpfland")]
    local_policies: String,
    /// Signal-based switching, the per-switch overhead reference.
    #[arg(long, default_value = "signal")]
    signal_policy: String,
    /// Compute-bound workload of the ep target.
    #[arg(long, default_value = "ep")]
    ep_workload: String,
    /// What the slowdown targets compare: slowdown (job time / dedicated)
    /// or makespan-ratio (makespan / (MPL × dedicated), normalised by the share).
    #[arg(long, default_value = "slowdown", value_parser = ["slowdown", "makespan-ratio"])]
    target_metric: String,
    /// Don't print the summary.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args)]
struct CheckArgs {
    /// Record files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Policies expected ("a b c"; dedicated is always checked as the baseline).
    #[arg(long, value_parser = words)]
    policies: List,
    /// Workloads expected.
    #[arg(long, value_parser = words)]
    workloads: List,
    /// MPLs expected ("1 2 3").
    #[arg(long, value_parser = mpls)]
    mpls: Mpls,
    /// Repetitions per cell.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// Number of the first rep (reps are first-rep..first-rep+reps-1).
    #[arg(long, default_value_t = 0)]
    first_rep: u32,
    /// Also expect the short-job scenario for every policy.
    #[arg(long)]
    short: bool,
}

/// A list argument: "a b c" (or "a,b,c").
#[derive(Clone, Debug)]
struct List(Vec<String>);

/// MPLs: "1 2 3".
#[derive(Clone, Debug)]
struct Mpls(Vec<u32>);

/// A non-empty list of words.
fn words(s: &str) -> Result<List, String> {
    let v = split_list(s);
    if v.is_empty() {
        Err("an empty list".into())
    } else {
        Ok(List(v))
    }
}

/// A non-empty list of MPLs ≥ 1.
fn mpls(s: &str) -> Result<Mpls, String> {
    let v = words(s)?.0;
    v.iter()
        .map(|w| match w.parse::<u32>() {
            Ok(m) if m >= 1 => Ok(m),
            _ => Err(format!("'{w}' is not an MPL (a whole number ≥ 1)")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Mpls)
}

fn load(files: &[PathBuf]) -> Result<Log, ExitCode> {
    Log::load(files).map_err(|e| {
        eprintln!("gang-eval: bad input: {e}");
        ExitCode::from(2)
    })
}

fn report(a: ReportArgs) -> ExitCode {
    let log = match load(&a.files) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let order = a.policies.as_deref().map(split_list);
    if let Some(order) = &order {
        for p in order {
            if !log.policies.contains(p) {
                let known = if KNOWN_POLICIES.contains(&p.as_str()) {
                    ""
                } else {
                    " (not a known policy name either)"
                };
                eprintln!("gang-eval: warning: --policies names {p}, which no record has{known}");
            }
        }
    }
    let analysis = analyse(&log, order.as_deref());
    let cfg = TargetConfig {
        metric: if a.target_metric == "makespan-ratio" {
            TargetMetric::MakespanRatio
        } else {
            TargetMetric::Slowdown
        },
        fine_workloads: split_list(&a.fine_workloads),
        gang_policies: split_list(&a.gang_policies),
        local_policies: split_list(&a.local_policies),
        signal_policy: a.signal_policy,
        ep_workload: a.ep_workload,
        ..TargetConfig::default()
    };
    let targets = evaluate(&analysis, &cfg);
    match write_report(&log, &analysis, &targets, &a.out) {
        Ok(w) => {
            if !a.quiet {
                print!("{}", w.summary);
            }
            eprintln!(
                "gang-eval: wrote {}",
                w.files
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "gang-eval: cannot write the report into {}: {e}",
                a.out.display()
            );
            ExitCode::from(1)
        }
    }
}

fn run_check(a: CheckArgs) -> ExitCode {
    let log = match load(&a.files) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let e = Expect {
        policies: a.policies.0,
        workloads: a.workloads.0,
        mpls: a.mpls.0,
        reps: a.reps,
        first_rep: a.first_rep,
        short: a.short,
    };
    let problems = check(&log, &e);
    if problems.is_empty() {
        println!(
            "check: complete: {} policies × {} workloads × MPL {:?} × {} reps, dedicated baseline{}",
            e.policies.iter().filter(|p| *p != "dedicated").count(),
            e.workloads.len(),
            e.mpls,
            e.reps,
            if e.short { ", short-job scenario" } else { "" }
        );
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            println!("{p}");
        }
        println!(
            "check: {} problem(s): the run is not complete",
            problems.len()
        );
        ExitCode::from(1)
    }
}

fn lone(a: LoneArgs) -> ExitCode {
    let log = match load(&a.files) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let cells = gang_eval::lone::cells(&log);
    if cells.is_empty() {
        eprintln!("gang-eval: no MPL 1 job records in the input");
        return ExitCode::from(2);
    }
    let (mut table, csv) = gang_eval::lone::render(&cells, &a.policy);
    let mut cost_csv = None;
    if let Some(path) = &a.bpf_cost {
        let costs = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|text| {
                gang_eval::bpf_cost::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
            });
        match costs {
            Ok(c) if c.policies.is_empty() => {
                eprintln!("gang-eval: {}: no bpf_cost line", path.display());
                return ExitCode::from(2);
            }
            Ok(c) => {
                let (t, csv) = gang_eval::bpf_cost::render(&c);
                table.push_str(&t);
                cost_csv = Some(csv);
            }
            Err(e) => {
                eprintln!("gang-eval: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let written = std::fs::create_dir_all(&a.out)
        .and_then(|_| std::fs::write(a.out.join("lone.txt"), &table))
        .and_then(|_| std::fs::write(a.out.join("lone.csv"), &csv))
        .and_then(|_| match &cost_csv {
            Some(c) => std::fs::write(a.out.join("bpf_cost.csv"), c),
            None => Ok(()),
        });
    print!("{table}");
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "gang-eval: cannot write lone.txt/lone.csv/bpf_cost.csv into {}: {e}",
                a.out.display()
            );
            ExitCode::from(1)
        }
    }
}

fn scale(a: ScaleArgs) -> ExitCode {
    let mut runs = Vec::new();
    for arg in &a.runs {
        let (label, path) = gang_eval::scale::label_and_path(arg);
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| format!("{path}: {e}"))
            .and_then(|text| gang_eval::scale::parse(&path, &text));
        match parsed {
            Ok(rows) => runs.push(gang_eval::scale::ScaleRun { label, rows }),
            Err(e) => {
                eprintln!("gang-eval: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let svg = gang_eval::figures::scale_svg(&runs);
    let out = a.out.join("scale.svg");
    match std::fs::create_dir_all(&a.out).and_then(|_| std::fs::write(&out, svg)) {
        Ok(()) => {
            println!("{}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gang-eval: cannot write {}: {e}", out.display());
            ExitCode::from(1)
        }
    }
}

fn bench(a: BenchArgs) -> ExitCode {
    let p = BenchParams {
        nodes: a.nodes.0,
        icount: a.icount,
        ncpu: a.ncpu,
        fill: a.fill,
        seconds: a.seconds,
        head: a.head == 1,
    };
    match write_tables(&p, &a.dir) {
        Ok(table) => {
            print!("{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "gang-eval: cannot write the tables into {}: {e}",
                a.dir.display()
            );
            ExitCode::from(1)
        }
    }
}

/// Parses the command line; a bad one prints the error with the usage and
/// exits 2 (help and version exit 0).
fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let msg = e.render().to_string();
            eprint!("{msg}");
            if !msg.contains("Usage:") {
                let mut cmd = Cli::command();
                cmd.build();
                let sub = std::env::args().nth(1).unwrap_or_default();
                let usage = match cmd.find_subcommand_mut(&sub) {
                    Some(sc) => sc.render_usage(),
                    None => cmd.render_usage(),
                };
                eprintln!("\n{usage}");
            }
            std::process::exit(2);
        }
    }
}

fn main() -> ExitCode {
    let cli = parse();
    match cli.cmd {
        Cmd::Report(a) => report(a),
        Cmd::Check(a) => run_check(a),
        Cmd::Bench(a) => bench(a),
        Cmd::Lone(a) => lone(a),
        Cmd::Scale(a) => scale(a),
    }
}
