//! The cluster benchmark's tables (`gang-eval bench DIR`): the raw records
//! of tests/vm/scenarios/cluster_bench.sh, one boot per node count N in
//! DIR/n<N>/, → DIR/runs.csv, DIR/results.csv and DIR/table.txt (seed 000
//! Table 4 on the VM cluster: T_overhead = TQ × (1 − r) per switch).
//!
//! Design. A pure function of the files' lines, in two steps, like the awk
//! of scripts/bench_cluster.sh it replaces (same columns, same formats):
//! 1. [`runs`]: per boot, one row per run: its work rate against its
//!    repetition's baseline (`alone`: burn alone, default scheduler, summed
//!    over the nodes; `scx_alone`: one job alone under scx_gang) and the
//!    overhead per switch; the baselines' rows too. [`idle_estimates`] adds
//!    the CPU time a strict switch leaves idle on a node, from gangd's switch
//!    log (`drain_us` + Frozen → Running at gangd, mean over the nodes,
//!    median over the run's window).
//! 2. [`summarise`]: medians per (N, method, TQ) over the good runs (ok 1)
//!    → results.csv, and the text table.
//! 3. [`timed_nodes`]: the timed runs per run and node (skew p99, the late
//!    share, park late, drain, lead) → timed_nodes.csv and the table's last
//!    section; read as JSON, since the switch log's timed lines nest.
//!
//! The records are flat JSON lines read the way the awk read them
//! ([`field`]: the text after the last `"name":` up to `"`, `,` or `}`), so
//! no JSON parser is needed and a record with extra keys still reads.
//! Numbers that pass through (a median of an odd count, a field) keep their
//! text; computed ones print like awk (`%.6g`, integers as integers).
//!
//! Files: `awk.rs` (the awk's text and number rules), `runs.rs` (step 1),
//! `summary.rs` (step 2), `timed_nodes.rs` (step 3), this file (the inputs, reading and writing).
//!
//! Known faults: none of the awk's beyond one fixed here: the largest start
//! spread of a signal run over its nodes is compared as a number (the awk
//! compared text, so "9" beat "10").

mod awk;
mod runs;
mod summary;
mod timed_nodes;

pub use awk::{awk_fmt, field, median, num, Med};
pub use runs::{idle_estimates, runs};
pub use summary::{boot_facts, summarise, BootFacts};
pub use timed_nodes::{timed_nodes, TIMED_NODES_HEADER};

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The benchmark's settings the table reports (bench_cluster.sh's options).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchParams {
    /// Node counts, in the order the boots ran (--nodes).
    pub nodes: Vec<u32>,
    /// qemu -icount shift, empty without.
    pub icount: String,
    /// Host cores the VMs were pinned to.
    pub ncpu: u32,
    /// gangd's --fill.
    pub fill: u32,
    /// The least window D in seconds (--seconds).
    pub seconds: u32,
    /// A head node 0 without ranks (1) or gangd among the ranks (0).
    pub head: bool,
}

/// The records of one boot (DIR/n<N>/), as lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Boot {
    /// N: compute nodes.
    pub n: u32,
    /// Every node's sig.jsonl, node0 first.
    pub sig: Vec<String>,
    /// node0/gang.jsonl; `None` if the boot left none.
    pub gang: Option<Vec<String>>,
    /// node0/switch.jsonl (gangd's switch log).
    pub switch_log: Vec<String>,
    /// node0/rtt.jsonl; `None` if missing.
    pub rtt: Option<Vec<String>>,
    /// host_foreign_vms ("epoch count" samples); `None` if missing or empty.
    pub foreign_vms: Option<Vec<String>>,
}

/// The four files' contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Tables {
    pub runs_csv: String,
    pub results_csv: String,
    pub timed_nodes_csv: String,
    pub table: String,
}

pub const RUNS_HEADER: &str = "nodes,rep,method,tq_ms,d_s,units,rate,alone_rate,r,overhead_us,switches,total_p50_us,skew_p50_us,freeze_p50_us,frozen_p50_us,idle_est_us,spread_ms,ok,early_switches,late_p50_us";
pub const RESULTS_HEADER: &str = "nodes,method,tq_ms,runs,r_median,overhead_us_median,overhead_us_min,overhead_us_max,switches_median,total_p50_us,skew_p50_us,freeze_p50_us,frozen_p50_us,idle_est_us,rtt_ping_idle_p50_us,rtt_ping_loaded_p50_us,rtt_gangd_hb_min_us,late_p50_us";

/// Lines from texts, for the tests of every step.
#[cfg(test)]
fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The four files' contents from every boot's records.
pub fn tables(p: &BenchParams, boots: &[Boot]) -> Tables {
    let mut runs_csv = format!("{RUNS_HEADER}\n");
    let mut timed_nodes_csv = format!("{TIMED_NODES_HEADER}\n");
    let mut per_node = String::new();
    let mut rows = Vec::new();
    let mut facts = BTreeMap::new();
    for b in boots {
        rows.extend(runs(b));
        facts.insert(b.n, boot_facts(b));
        let (node_rows, text) = timed_nodes(b);
        for r in node_rows {
            timed_nodes_csv += &r;
            timed_nodes_csv.push('\n');
        }
        per_node += &text;
    }
    for r in &rows {
        runs_csv += r;
        runs_csv.push('\n');
    }
    let (results, mut table) = summarise(p, &facts, &rows);
    if !per_node.is_empty() {
        table += "\nTimed runs per node (skew = spread of the nodes' switch instants; idle = parked_us, park to switch; \
                  park late = the park's start after boundary - lead; drain = park to drained; late = outcome late or timed_out; \
                  percentiles nearest-rank; DIR/timed_nodes.csv).\n";
        table += &per_node;
    }
    Tables {
        runs_csv,
        results_csv: format!("{RESULTS_HEADER}\n{results}"),
        timed_nodes_csv,
        table,
    }
}

fn lines_of(path: &Path) -> Option<Vec<String>> {
    let text = fs::read(path).ok()?;
    Some(
        String::from_utf8_lossy(&text)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// Reads the records of the boot of N compute nodes in `dir` (DIR/n<N>/).
pub fn load_boot(dir: &Path, n: u32) -> Boot {
    let mut nodes: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| f.starts_with("node"))
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    let node0 = dir.join("node0");
    Boot {
        n,
        sig: nodes
            .iter()
            .filter_map(|d| lines_of(&d.join("sig.jsonl")))
            .flatten()
            .collect(),
        gang: lines_of(&node0.join("gang.jsonl")),
        switch_log: lines_of(&node0.join("switch.jsonl")).unwrap_or_default(),
        rtt: lines_of(&node0.join("rtt.jsonl")),
        foreign_vms: lines_of(&dir.join("host_foreign_vms")).filter(|l| !l.is_empty()),
    }
}

/// Reads every boot of `p.nodes` under `out`, writes runs.csv, results.csv,
/// timed_nodes.csv and table.txt there and returns the table.
pub fn write_tables(p: &BenchParams, out: &Path) -> io::Result<String> {
    let boots: Vec<Boot> = p
        .nodes
        .iter()
        .map(|n| load_boot(&out.join(format!("n{n}")), *n))
        .collect();
    let t = tables(p, &boots);
    fs::write(out.join("runs.csv"), &t.runs_csv)?;
    fs::write(out.join("results.csv"), &t.results_csv)?;
    fs::write(out.join("timed_nodes.csv"), &t.timed_nodes_csv)?;
    fs::write(out.join("table.txt"), &t.table)?;
    Ok(t.table)
}
