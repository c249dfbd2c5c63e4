//! What a sched_ext scheduler's BPF callbacks cost, whichever scheduler it
//! is: per struct_ops program loaded on the node, its runs and the time
//! spent in it, from the kernel's BPF program statistics (counted only
//! while the sysctl kernel.bpf_stats_enabled is 1; all zero otherwise).
//!
//! `scx_gang bpf-cost` prints them for every struct_ops program loaded
//! now, ours or another scheduler's (scx_bpfland's): the lone-job benchmark
//! (issue 15) reads it at the end of each phase, so that the schedulers'
//! own cost per context switch stands side by side from one boot. That
//! figure does not move with the host's noise the way a job's time does:
//! it is the BPF code's own time (under emulation, its emulated time).
//! scx_gang also logs its own at exit and shows it in `--monitor`
//! (`Scheduler::bpf_cost`, from its skeleton's programs).
//!
//! The output, one line per program, sorted by name:
//! `<program name> <runs> <ns>`. Program names are the kernel's (at most
//! 15 bytes), e.g. `gang_enqueue`, `bpfland_enqueue`.
//!
//! Known faults: the kernel counts per program, not per scheduler, so two
//! struct_ops sets loaded at once (a scheduler and a TCP congestion
//! control in BPF) are listed together; the names tell them apart. A
//! program's time includes the kfuncs it calls (a DSQ insert does most of
//! its work there), which is what the scheduler costs.

use std::fmt::Write as _;

use libbpf_rs::query::ProgInfoIter;
use libbpf_rs::ProgramType;

/// One struct_ops program's statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Callback {
    pub name: String,
    pub runs: u64,
    pub ns: u64,
}

/// Every struct_ops program loaded now, sorted by name. Needs
/// CAP_SYS_ADMIN (or CAP_BPF and CAP_PERFMON): without it the kernel lists
/// no program, and so does this.
pub fn loaded() -> Vec<Callback> {
    let mut all: Vec<Callback> = ProgInfoIter::default()
        .filter(|p| p.ty == ProgramType::StructOps)
        .map(|p| Callback {
            name: p.name.to_string_lossy().into_owned(),
            runs: p.run_cnt,
            ns: p.run_time_ns,
        })
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

/// The lines `scx_gang bpf-cost` prints.
pub fn format(callbacks: &[Callback]) -> String {
    let mut out = String::new();
    for c in callbacks {
        let _ = writeln!(out, "{} {} {}", c.name, c.runs, c.ns);
    }
    out
}

/// `scx_gang bpf-cost`: fails if no struct_ops program is loaded (no
/// scheduler attached, or not allowed to list them), so a benchmark never
/// mistakes that for a free scheduler.
pub fn run() -> anyhow::Result<()> {
    let all = loaded();
    if all.is_empty() {
        anyhow::bail!(
            "no struct_ops BPF program is loaded (no sched_ext scheduler attached, or not allowed to list BPF programs: run as root)"
        );
    }
    print!("{}", format(&all));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_program_name_runs_ns() {
        let c = |name: &str, runs, ns| Callback {
            name: name.into(),
            runs,
            ns,
        };
        assert_eq!(
            format(&[c("gang_enqueue", 3, 30_000), c("gang_tick", 0, 0)]),
            "gang_enqueue 3 30000\ngang_tick 0 0\n"
        );
    }
}
