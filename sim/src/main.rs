//! gang-sim: sweeps offered load over a workload (an SWF trace or the
//! Lublin–Feitelson generator) and runs FCFS, EASY and gang scheduling
//! under each allocation policy and MPL on the same jobs; writes
//! results.csv, table.md and the two figures to --out, and prints the
//! table. Progress and the wall-clock time of every run go to stderr.
//!
//! Design: the loop is policy × load over pure simulators (lib.rs); this
//! file only parses flags and writes files. Known fault: runs are
//! sequential (the machine has 2 shared cores).

use std::fs;
use std::io::BufReader;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use gang_coordinator::alloc::{Policy, Settings};
use gang_sim::gang::{self, GangConfig};
use gang_sim::report::{self, Row};
use gang_sim::space::{self, Discipline};
use gang_sim::workload::{offered_load, scale_to_load, Job};
use gang_sim::{lublin, metrics, swf};

/// The per-switch cost: gangd's switch log in the evaluation (README
/// "Evaluation figures", 2026-11-24): p50 from a switch's start to the last
/// Running, strict barrier.
const STRICT_SWITCH_MS: f64 = 36.0;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Switch {
    Off,
    On,
}

#[derive(Parser, Debug)]
#[command(
    about = "Trace-driven cluster simulator: gang scheduling on gangd's allocator vs FCFS and EASY",
    args_override_self = true
)]
struct Args {
    /// Nodes (100,000 jobs on 4096 nodes: 10-50 s per gang run,
    /// docs/simulator.md).
    #[arg(long, default_value_t = 256)]
    nodes: u32,
    #[arg(long, default_value_t = 4)]
    cpus_per_node: u32,
    /// An SWF trace; without it, --jobs jobs of the Lublin–Feitelson model.
    #[arg(long)]
    swf: Option<PathBuf>,
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Offered loads to scale the workload to (0: the trace's own times).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.6,0.7,0.8,0.9")]
    loads: Vec<f64>,
    /// fcfs, easy, and gang allocation policies (first_fit, best_fit,
    /// buddy, scs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fcfs,easy,first_fit,best_fit,buddy,scs"
    )]
    policies: Vec<String>,
    /// MPL values for the gang policies (slots; scs: ranks per cell).
    #[arg(long, value_delimiter = ',', default_value = "4")]
    mpl: Vec<usize>,
    /// The allocator's own backfilling for gang runs (a queued job that fits
    /// overtakes older ones; no reservation): off, on, or both (two runs).
    #[arg(long, value_delimiter = ',', default_value = "off")]
    gang_backfill: Vec<Switch>,
    /// Turn off fill placements (multiple tasks).
    #[arg(long)]
    no_fill: bool,
    #[arg(long, default_value_t = 1000.0)]
    slot_ms: f64,
    /// CPU time lost at each switch (default: the strict barrier's measured
    /// switch time, see docs/simulator.md).
    #[arg(long, default_value_t = STRICT_SWITCH_MS)]
    switch_ms: f64,
    /// Where results.csv, table.md, response.svg and slowdown.svg go.
    #[arg(long, default_value = "target/sim")]
    out: PathBuf,
    /// Write the (generated or read) workload at each load as SWF too.
    #[arg(long)]
    write_swf: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(args.slot_ms > 0.0 && args.switch_ms >= 0.0 && args.switch_ms < args.slot_ms) {
        bail!("need 0 <= --switch-ms < --slot-ms");
    }
    let cpus = args.nodes as u64 * args.cpus_per_node as u64;
    if cpus == 0 || cpus > u32::MAX as u64 {
        bail!("{cpus} CPUs");
    }
    let base = workload(&args, cpus as u32)?;
    eprintln!(
        "{} jobs, offered load {:.3} as given, on {} nodes x {} CPUs",
        base.len(),
        offered_load(&base, cpus),
        args.nodes,
        args.cpus_per_node
    );
    fs::create_dir_all(&args.out).with_context(|| format!("{}", args.out.display()))?;
    let mut rows = vec![];
    for &load in &args.loads {
        let jobs = scale_to_load(&base, cpus, load);
        if args.write_swf {
            let text: String = jobs.iter().map(|j| swf::format_job(j) + "\n").collect();
            fs::write(args.out.join(format!("workload-{load:.2}.swf")), text)?;
        }
        let offered = offered_load(&jobs, cpus);
        for p in &args.policies {
            for (label, outcomes) in run_policy(&args, p, &jobs, cpus, load)? {
                let (outcomes, wall_s) = outcomes;
                let summary = metrics::summarise(&jobs, &outcomes, cpus);
                eprintln!(
                    "timing: {label} at load {load:.2}: {} jobs in {wall_s:.2} s",
                    jobs.len()
                );
                rows.push(Row {
                    policy: label,
                    load: if load > 0.0 { load } else { offered },
                    offered,
                    summary,
                    wall_s,
                });
            }
        }
    }
    rows.sort_by(|a, b| a.policy.cmp(&b.policy).then(a.load.total_cmp(&b.load)));
    let table = report::markdown(&rows);
    fs::write(args.out.join("results.csv"), report::csv(&rows))?;
    fs::write(args.out.join("table.md"), &table)?;
    let what = format!("{} nodes x {} CPUs", args.nodes, args.cpus_per_node);
    fs::write(
        args.out.join("response.svg"),
        report::figure(
            &rows,
            &format!("Mean response time, {what}"),
            "mean response time (s)",
            |s| s.mean_response_s,
        ),
    )?;
    fs::write(
        args.out.join("slowdown.svg"),
        report::figure(
            &rows,
            &format!("Mean bounded slowdown (tau 10 s), {what}"),
            "mean bounded slowdown",
            |s| s.mean_bsld,
        ),
    )?;
    print!("{table}");
    eprintln!(
        "wrote {}/results.csv, table.md, response.svg, slowdown.svg",
        args.out.display()
    );
    Ok(())
}

fn workload(args: &Args, cpus: u32) -> Result<Vec<Job>> {
    let Some(path) = &args.swf else {
        return Ok(lublin::generate(args.jobs, cpus, args.seed));
    };
    let file = fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let trace = swf::read(BufReader::new(file)).with_context(|| format!("{}", path.display()))?;
    eprintln!(
        "{}: {} jobs, {} skipped (unknown runtime or processors)",
        path.display(),
        trace.jobs.len(),
        trace.skipped
    );
    Ok(trace.jobs)
}

type Timed = (Vec<Option<gang_sim::workload::Outcome>>, f64);

/// One policy name gives one run (fcfs, easy) or one per MPL (gang).
fn run_policy(
    args: &Args,
    name: &str,
    jobs: &[Job],
    cpus: u64,
    load: f64,
) -> Result<Vec<(String, Timed)>> {
    let t0 = Instant::now();
    let discipline = match name {
        "fcfs" => Some(Discipline::Fcfs),
        "easy" => Some(Discipline::Easy),
        _ => None,
    };
    if let Some(d) = discipline {
        let run = space::simulate(jobs, cpus, d);
        return Ok(vec![(
            name.to_string(),
            (run.outcomes, t0.elapsed().as_secs_f64()),
        )]);
    }
    let policy: Policy = name.parse().with_context(|| format!("policy {name:?}"))?;
    let mut out = vec![];
    let runs = args.mpl.iter().flat_map(|&m| {
        args.gang_backfill
            .iter()
            .map(move |&b| (m, b == Switch::On))
    });
    for (mpl_max, backfill) in runs {
        let t0 = Instant::now();
        let cfg = GangConfig {
            nodes: args.nodes,
            cpus_per_node: args.cpus_per_node,
            settings: Settings {
                policy,
                mpl_max,
                fill: !args.no_fill,
                backfill,
            },
            slot_ms: args.slot_ms,
            switch_ms: args.switch_ms,
            log: false,
        };
        let bf = if backfill { "-bf" } else { "" };
        let label = format!("gang-{name}-mpl{mpl_max}{bf}");
        let total = jobs.len();
        let mut progress = |done: usize| {
            eprint!("\r{label} at load {load:.2}: {done}/{total} jobs ended   ");
        };
        let run = gang::simulate(jobs, &cfg, &mut progress)?;
        eprint!("\r");
        let mut us = run.call_us.clone();
        us.sort_by(f64::total_cmp);
        let pct = |q: f64| metrics::percentile(&us, q);
        let in_alloc: f64 = us.iter().sum::<f64>() / 1e6;
        eprintln!(
            "{label} at load {load:.2}: allocator {} calls, p50 {:.0} us, p99 {:.0} us, {in_alloc:.2} s of {:.2} s",
            us.len(),
            pct(0.5),
            pct(0.99),
            t0.elapsed().as_secs_f64()
        );
        if run.refused > 0 {
            eprintln!(
                "{label}: {} jobs refused by the allocator (never fit)",
                run.refused
            );
        }
        out.push((label, (run.outcomes, t0.elapsed().as_secs_f64())));
    }
    Ok(out)
}
