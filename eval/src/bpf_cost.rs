//! The schedulers' own cost, side by side (issue 15): what the BPF
//! callbacks of scx_gang and of scx_bpfland cost in one boot of the
//! lone-job benchmark, per context switch and per callback.
//!
//! Input: the `bpf_cost` lines the compute nodes write at the end of each
//! phase of `scripts/eval.sh --bpf-stats` (tests/vm/scenarios/cluster_eval.sh
//! runs `scx_gang bpf-cost` there; eval.sh gathers them into
//! DIR/bpf_cost.txt):
//!
//! ```text
//! bpf_cost node=1 phase=3 policy=bpfland bpfland_enqueue 13208 131292000
//! ```
//!
//! that is the program's runs and its time (ns) over the phase, from the
//! kernel's program statistics. A policy's figures are summed over its
//! phases and nodes. A callback is named without its scheduler's prefix
//! (`gang_enqueue` and `bpfland_enqueue` are both `enqueue`), so the rows
//! line up. The cost per context switch divides every callback's time by
//! the runs of `running` (ops.running: a task of the scheduler starts on a
//! CPU), which both schedulers implement.
//!
//! Why this figure: a lone job's time under two schedulers differs by a
//! few per cent at most, and this test bed's noise between two phases of
//! the same scheduler is larger; the time in the schedulers' own code does
//! not depend on how the host ran the vCPUs. Under emulation every figure
//! is the emulated time, far above native, for both alike.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One policy's callback, summed over its phases and nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sum {
    pub runs: u64,
    pub ns: u64,
}

/// Per policy (in the order first seen), its phases and its callbacks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Costs {
    pub policies: Vec<String>,
    pub phases: BTreeMap<String, Vec<u32>>,
    pub callbacks: BTreeMap<(String, String), Sum>,
}

/// sched_ext's callbacks (struct sched_ext_ops), to name a program whose
/// name the kernel cut at 15 bytes (`bpfland_dispatc`).
const OPS: &[&str] = &[
    "select_cpu",
    "enqueue",
    "dequeue",
    "dispatch",
    "tick",
    "runnable",
    "running",
    "stopping",
    "quiescent",
    "yield",
    "core_sched_before",
    "set_weight",
    "set_cpumask",
    "update_idle",
    "cpu_acquire",
    "cpu_release",
    "init_task",
    "exit_task",
    "enable",
    "disable",
    "dump",
    "dump_cpu",
    "dump_task",
    "cgroup_init",
    "cgroup_exit",
    "cgroup_prep_move",
    "cgroup_move",
    "cgroup_cancel_move",
    "cgroup_set_weight",
    "cpu_online",
    "cpu_offline",
    "init",
    "exit",
];

/// A callback's name without its scheduler's prefix, whole again if the
/// kernel cut it and one callback alone starts so.
fn callback(prog: &str) -> &str {
    let cut = prog.split_once('_').map_or(prog, |(_, c)| c);
    if prog.len() < 15 || OPS.contains(&cut) {
        return cut;
    }
    let mut whole = OPS.iter().filter(|op| op.starts_with(cut));
    match (whole.next(), whole.next()) {
        (Some(op), None) => op,
        _ => cut,
    }
}

/// Parses `bpf_cost` lines; other lines are skipped. A `bpf_cost` line
/// that does not parse is an error naming its line number.
pub fn parse(text: &str) -> Result<Costs, String> {
    let mut c = Costs::default();
    for (i, line) in text.lines().enumerate() {
        let mut f = line.split_whitespace();
        if f.next() != Some("bpf_cost") {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line:?}", i + 1);
        let mut field = |key: &str| {
            f.next()
                .and_then(|kv| kv.strip_prefix(key))
                .map(str::to_string)
                .ok_or_else(|| bad(&format!("no {key}")))
        };
        let _node = field("node=")?;
        let phase: u32 = field("phase=")?
            .parse()
            .map_err(|_| bad("phase is not a number"))?;
        let policy = field("policy=")?;
        let rest: Vec<&str> = f.collect();
        let [prog, runs, ns] = rest[..] else {
            return Err(bad("want PROGRAM RUNS NS after the policy"));
        };
        let runs: u64 = runs.parse().map_err(|_| bad("runs is not a number"))?;
        let ns: u64 = ns.parse().map_err(|_| bad("ns is not a number"))?;
        if !c.policies.contains(&policy) {
            c.policies.push(policy.clone());
        }
        let phases = c.phases.entry(policy.clone()).or_default();
        if !phases.contains(&phase) {
            phases.push(phase);
        }
        let s = c
            .callbacks
            .entry((policy, callback(prog).to_string()))
            .or_default();
        s.runs += runs;
        s.ns += ns;
    }
    Ok(c)
}

impl Costs {
    fn of<'a>(&'a self, policy: &'a str) -> impl Iterator<Item = (&'a str, &'a Sum)> + 'a {
        self.callbacks
            .iter()
            .filter(move |((p, _), _)| p == policy)
            .map(|((_, cb), s)| (cb.as_str(), s))
    }

    /// A policy's context switches (runs of `running`), if it has them.
    pub fn switches(&self, policy: &str) -> Option<u64> {
        self.of(policy)
            .find(|(cb, _)| *cb == "running")
            .map(|(_, s)| s.runs)
            .filter(|&r| r > 0)
    }

    /// A policy's time in all its callbacks, ns.
    pub fn total_ns(&self, policy: &str) -> u64 {
        self.of(policy).map(|(_, s)| s.ns).sum()
    }

    /// µs of BPF per context switch.
    pub fn per_switch_us(&self, policy: &str) -> Option<f64> {
        let n = self.switches(policy)?;
        Some(self.total_ns(policy) as f64 / n as f64 / 1000.0)
    }
}

/// The table (text) and its CSV (policy, callback, runs, ns, mean µs, runs
/// and µs per context switch; a `total` row per policy).
pub fn render(c: &Costs) -> (String, String) {
    let mut t = String::new();
    let mut csv = String::from("policy,callback,runs,ns,mean_us,runs_per_switch,us_per_switch\n");
    let _ = writeln!(
        t,
        "\nThe schedulers' BPF callbacks (kernel.bpf_stats, summed over each policy's phases and compute nodes)"
    );
    let _ = writeln!(
        t,
        "{:<14} {:>6} {:>12} {:>12} {:>16}",
        "policy", "phases", "ctx switches", "BPF ms", "BPF us / switch"
    );
    for p in &c.policies {
        let phases = c.phases.get(p).map_or(0, Vec::len);
        let sw = c.switches(p);
        let per = c.per_switch_us(p);
        let _ = writeln!(
            t,
            "{:<14} {:>6} {:>12} {:>12.1} {:>16}",
            p,
            phases,
            sw.map_or("-".into(), |n| n.to_string()),
            c.total_ns(p) as f64 / 1e6,
            per.map_or("-".into(), |u| format!("{u:.2}")),
        );
        let _ = writeln!(
            csv,
            "{p},total,{},{},,,{}",
            sw.unwrap_or(0),
            c.total_ns(p),
            per.map_or(String::new(), |u| format!("{u:.3}"))
        );
    }
    let _ = writeln!(
        t,
        "{:<14} {:<16} {:>10} {:>10} {:>12} {:>12}",
        "policy", "callback", "runs", "mean us", "runs/switch", "us/switch"
    );
    for p in &c.policies {
        let sw = c.switches(p);
        for (cb, s) in c.of(p).filter(|(_, s)| s.runs > 0) {
            let mean = s.ns as f64 / s.runs as f64 / 1000.0;
            let per_runs = sw.map(|n| s.runs as f64 / n as f64);
            let per_us = sw.map(|n| s.ns as f64 / n as f64 / 1000.0);
            let _ = writeln!(
                t,
                "{:<14} {:<16} {:>10} {:>10.2} {:>12} {:>12}",
                p,
                cb,
                s.runs,
                mean,
                per_runs.map_or("-".into(), |r| format!("{r:.2}")),
                per_us.map_or("-".into(), |u| format!("{u:.2}")),
            );
            let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
            let _ = writeln!(
                csv,
                "{p},{cb},{},{},{mean:.3},{},{}",
                s.runs,
                s.ns,
                opt(per_runs),
                opt(per_us)
            );
        }
    }
    (t, csv)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &str = "\
noise before
bpf_cost node=1 phase=3 policy=gang-strict gang_enqueue 100 1000000
bpf_cost node=1 phase=3 policy=gang-strict gang_running 200 600000
bpf_cost node=2 phase=3 policy=gang-strict gang_running 200 600000
bpf_cost node=1 phase=5 policy=bpfland bpfland_enqueue 50 400000
bpf_cost node=1 phase=5 policy=bpfland bpfland_running 100 100000
bpf_cost node=1 phase=5 policy=bpfland bpfland_exit 0 0
";

    #[test]
    fn sums_a_policy_over_its_nodes_and_names_callbacks_without_prefix() {
        let c = parse(LINES).unwrap();
        assert_eq!(c.policies, ["gang-strict", "bpfland"]);
        assert_eq!(c.phases["gang-strict"], [3]);
        let running = &c.callbacks[&("gang-strict".into(), "running".into())];
        assert_eq!((running.runs, running.ns), (400, 1_200_000));
        assert_eq!(c.switches("gang-strict"), Some(400));
        // (1 ms + 1.2 ms) over 400 context switches.
        assert_eq!(c.per_switch_us("gang-strict"), Some(5.5));
        assert_eq!(c.per_switch_us("bpfland"), Some(5.0));
    }

    #[test]
    fn a_policy_without_running_has_no_per_switch_figure() {
        let c = parse("bpf_cost node=1 phase=1 policy=x x_enqueue 5 50\n").unwrap();
        assert_eq!(c.switches("x"), None);
        let (table, csv) = render(&c);
        assert!(
            table.contains("x                   1            -"),
            "{table}"
        );
        assert!(csv.contains("x,total,0,50,,,\n"), "{csv}");
    }

    #[test]
    fn the_table_lists_callbacks_that_ran_with_their_share_per_switch() {
        let (table, csv) = render(&parse(LINES).unwrap());
        assert!(
            table.contains(
                "bpfland        enqueue                  50       8.00         0.50         4.00"
            ),
            "{table}"
        );
        assert!(
            !table.contains("exit"),
            "a callback that never ran: {table}"
        );
        assert!(
            csv.contains("gang-strict,enqueue,100,1000000,10.000,0.250,2.500\n"),
            "{csv}"
        );
    }

    #[test]
    fn a_name_the_kernel_cut_at_15_bytes_is_made_whole_when_only_one_callback_fits() {
        assert_eq!(callback("bpfland_dispatc"), "dispatch");
        assert_eq!(callback("gang_update_idl"), "update_idle");
        assert_eq!(callback("gang_set_cpumas"), "set_cpumask");
        // Two callbacks start so: left as it is.
        assert_eq!(callback("abcdefghi_cgrou"), "cgrou");
        assert_eq!(callback("gang_enqueue"), "enqueue");
        assert_eq!(callback("bpfland_init"), "init");
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it() {
        for (line, why) in [
            (
                "bpf_cost node=1 phase=x policy=p p_enqueue 1 1",
                "phase is not a number",
            ),
            ("bpf_cost node=1 policy=p p_enqueue 1 1", "no phase="),
            (
                "bpf_cost node=1 phase=1 policy=p p_enqueue 1",
                "want PROGRAM RUNS NS",
            ),
            (
                "bpf_cost node=1 phase=1 policy=p p_enqueue -1 1",
                "runs is not a number",
            ),
        ] {
            let e = parse(&format!("ok\n{line}\n")).unwrap_err();
            assert!(e.starts_with("line 2: ") && e.contains(why), "{line}: {e}");
        }
    }
}
