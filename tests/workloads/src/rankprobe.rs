//! rankprobe: runs one rank's command and says where its node's time went
//! while it ran (issue 15: what a lone job pays under each scheduler).
//!
//!   rankprobe [--ok-on-exit] -- CMD [ARGS...]
//!
//! CMD runs as a child with everything inherited (environment, PMI_FD,
//! stdin/stdout/stderr). Around it rankprobe reads the node's counters and,
//! while it runs, samples the rank's and a few kernel threads' scheduling
//! delays. When CMD exits, one line goes to stdout:
//!
//!   rankprobe elapsed_ms=.. rank_cpu_ms=.. rank_wait_ms=.. rank_slices=..
//!     rank_vcsw=.. rank_nvcsw=.. node_run_ms=.. node_wait_ms=..
//!     node_slices=.. node_ctxt=.. node_softirq_ms=.. node_irq_ms=..
//!     net_rx=.. net_tx=.. ksoftirqd_cpu_ms=.. ksoftirqd_wait_ms=..
//!     daemon_cpu_ms=.. daemon_wait_ms=.. tcp_retrans=.. tcp_timeouts=..
//!
//! - rank_*: the child and all its threads. cpu and context switches are
//!   exact (wait4's rusage); wait (time runnable but not running, the
//!   kernel's sched_info run_delay) and slices (times it was put on a CPU)
//!   are summed over its threads' /proc/PID/task/*/schedstat, sampled every
//!   SAMPLE_MS: the last SAMPLE_MS before it exits are not seen.
//! - node_*: /proc/schedstat's cpu lines (run and wait time of every task,
//!   timeslices: core scheduler accounting, the same under every policy)
//!   and /proc/stat (context switches; softirq and irq time, in ticks of
//!   USER_HZ, so coarse), differences over the run, all CPUs.
//! - net_rx/net_tx: NET_RX/NET_TX softirqs raised (/proc/softirqs).
//! - tcp_retrans, tcp_timeouts: the node's TCP segments retransmitted and
//!   retransmission timeouts (/proc/net/snmp, netstat): a run that lost
//!   packets (the test bed's virtual switch drops some under load) waits
//!   for TCP's timers, whatever the scheduler.
//! - ksoftirqd_*, daemon_*: the ksoftirqd threads and the scx_gang daemon
//!   (by name), differences of their schedstat: is network work or the
//!   node's control plane delayed, or in the way?
//!
//! With --ok-on-exit, a program that prints no result line of its own (as
//! NetPIPE) gets `{"ok":true,"elapsed_s":S}` on stdout when it exits 0.
//! Exit status: CMD's, or 128 + the signal that ended it.
//!
//! Known faults: a thread that exits between samples loses its last
//! SAMPLE_MS (up to SAMPLE_MS of a join's wait); counters of the whole node include whatever else ran there.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{exit, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

const SAMPLE_MS: u64 = 100;
const USAGE: &str = "usage: rankprobe [--ok-on-exit] -- CMD [ARGS...]";

/// A task's /proc/.../schedstat: ns on a CPU, ns runnable and waiting, slices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sched {
    run_ns: u64,
    wait_ns: u64,
    slices: u64,
}

fn parse_task_schedstat(s: &str) -> Option<Sched> {
    let v: Vec<u64> = s
        .split_whitespace()
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    (v.len() >= 3).then(|| Sched {
        run_ns: v[0],
        wait_ns: v[1],
        slices: v[2],
    })
}

/// /proc/schedstat summed over its `cpuN` lines (fields 7, 8, 9: run ns,
/// wait ns, timeslices, in every version since 15).
fn parse_node_schedstat(s: &str) -> Sched {
    let mut sum = Sched::default();
    for line in s.lines().filter(|l| l.starts_with("cpu")) {
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.parse().ok())
            .collect();
        if f.len() >= 9 {
            sum.run_ns += f[6];
            sum.wait_ns += f[7];
            sum.slices += f[8];
        }
    }
    sum
}

/// /proc/stat: context switches, and the all-CPU softirq and irq ticks.
fn parse_stat(s: &str) -> (u64, u64, u64) {
    let (mut ctxt, mut irq, mut softirq) = (0, 0, 0);
    for line in s.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("ctxt") => ctxt = w.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            Some("cpu") => {
                let f: Vec<u64> = w.filter_map(|v| v.parse().ok()).collect();
                if f.len() >= 7 {
                    irq = f[5];
                    softirq = f[6];
                }
            }
            _ => {}
        }
    }
    (ctxt, irq, softirq)
}

/// Named counters of /proc/net/snmp or /proc/net/netstat (a header line
/// of names, then a line of values, per protocol).
fn parse_snmp(s: &str, proto: &str, name: &str) -> u64 {
    let mut lines = s.lines().filter(|l| l.starts_with(proto));
    while let (Some(h), Some(v)) = (lines.next(), lines.next()) {
        if let Some(i) = h.split_whitespace().position(|w| w == name) {
            return v
                .split_whitespace()
                .nth(i)
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

/// /proc/softirqs: one row summed over CPUs.
fn parse_softirq(s: &str, row: &str) -> u64 {
    s.lines()
        .find(|l| l.trim_start().starts_with(row))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Pids of the tasks whose comm starts with one of `names`.
fn pids_named(names: &[&str]) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = read(&format!("/proc/{pid}/comm"));
        if let Some(n) = names.iter().find(|n| comm.trim_end().starts_with(**n)) {
            out.push((n.to_string(), pid));
        }
    }
    out
}

/// The threads of `pid` by name: (cpu ns, slices) summed per name.
fn threads_by_name(pid: u32) -> BTreeMap<String, Sched> {
    let mut m: BTreeMap<String, Sched> = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let tid = e.file_name().to_string_lossy().to_string();
        let comm = read(&format!("/proc/{pid}/task/{tid}/comm"))
            .trim_end()
            .to_string();
        if let Some(s) = parse_task_schedstat(&read(&format!("/proc/{pid}/task/{tid}/schedstat"))) {
            let e = m.entry(comm).or_default();
            e.run_ns += s.run_ns;
            e.wait_ns += s.wait_ns;
            e.slices += s.slices;
        }
    }
    m
}

/// Each group's schedstat, summed over its tasks.
fn group_sched(pids: &[(String, u32)]) -> BTreeMap<String, Sched> {
    let mut m: BTreeMap<String, Sched> = BTreeMap::new();
    for (name, pid) in pids {
        if let Some(s) = parse_task_schedstat(&read(&format!("/proc/{pid}/schedstat"))) {
            let e = m.entry(name.clone()).or_default();
            e.run_ns += s.run_ns;
            e.wait_ns += s.wait_ns;
            e.slices += s.slices;
        }
    }
    m
}

struct Node {
    sched: Sched,
    stat: (u64, u64, u64),
    net_rx: u64,
    net_tx: u64,
    tcp_retrans: u64,
    tcp_timeouts: u64,
    groups: BTreeMap<String, Sched>,
}

fn node(groups: &[(String, u32)]) -> Node {
    let soft = read("/proc/softirqs");
    Node {
        sched: parse_node_schedstat(&read("/proc/schedstat")),
        stat: parse_stat(&read("/proc/stat")),
        net_rx: parse_softirq(&soft, "NET_RX:"),
        net_tx: parse_softirq(&soft, "NET_TX:"),
        tcp_retrans: parse_snmp(&read("/proc/net/snmp"), "Tcp:", "RetransSegs"),
        tcp_timeouts: parse_snmp(&read("/proc/net/netstat"), "TcpExt:", "TCPTimeouts"),
        groups: group_sched(groups),
    }
}

/// The child's threads, each one's last sample kept (a thread that exits
/// keeps what it had).
fn sample_threads(pid: u32, last: &mut BTreeMap<u32, Sched>) {
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(s) = parse_task_schedstat(&read(&format!("/proc/{pid}/task/{tid}/schedstat"))) {
            last.insert(tid, s);
        }
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut ok_on_exit, mut i) = (false, 0);
    while i < args.len() && args[i] != "--" {
        match args[i].as_str() {
            "--ok-on-exit" => ok_on_exit = true,
            a => {
                eprintln!("rankprobe: unknown argument {a}\n{USAGE}");
                exit(2);
            }
        }
        i += 1;
    }
    let cmd = args.get(i + 1..).unwrap_or_default();
    if cmd.is_empty() {
        eprintln!("rankprobe: no command\n{USAGE}");
        exit(2);
    }
    // USER_HZ is 100 on every Linux architecture we run on.
    let tick_ns = 10_000_000u64;
    let groups = pids_named(&["ksoftirqd", "scx_gang"]);
    let daemon = groups
        .iter()
        .find(|(n, _)| n == "scx_gang")
        .map(|(_, pid)| *pid);
    let daemon_before = daemon.map(threads_by_name).unwrap_or_default();
    let before = node(&groups);
    let t0 = Instant::now();
    let mut child = match Command::new(&cmd[0]).args(&cmd[1..]).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rankprobe: cannot start {}: {e}", cmd[0]);
            exit(127);
        }
    };
    // The main thread waits (the exit is seen at once); a sampler thread
    // reads the rank's threads until then.
    let pid = child.id();
    let threads = Arc::new(Mutex::new(BTreeMap::new()));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (threads, done) = (threads.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                sample_threads(pid, &mut threads.lock().unwrap());
                sleep(Duration::from_millis(SAMPLE_MS));
            }
        })
    };
    let status = match child.wait() {
        Ok(st) => st,
        Err(e) => {
            eprintln!("rankprobe: waiting for {}: {e}", cmd[0]);
            exit(1);
        }
    };
    let elapsed = t0.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let threads = threads.lock().unwrap();
    let after = node(&groups);
    // The daemon's threads, on stderr for people: which of them ran, how
    // often (slices) and how long.
    if let Some(pid) = daemon {
        let mut line = String::from("rankprobe daemon threads (cpu ms/slices):");
        for (name, a) in threads_by_name(pid) {
            let b = daemon_before.get(&name).copied().unwrap_or_default();
            let (cpu, slices) = (
                a.run_ns.saturating_sub(b.run_ns),
                a.slices.saturating_sub(b.slices),
            );
            if slices > 0 {
                line += &format!(" {name}={}/{slices}", ms(cpu));
            }
        }
        eprintln!("{line}");
    }
    // The child's own totals (exact): its threads, reaped.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv_ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    let rank: Sched = threads.values().fold(Sched::default(), |a, s| Sched {
        run_ns: a.run_ns + s.run_ns,
        wait_ns: a.wait_ns + s.wait_ns,
        slices: a.slices + s.slices,
    });
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let group = |name: &str| {
        let (b, a) = (
            before.groups.get(name).copied().unwrap_or_default(),
            after.groups.get(name).copied().unwrap_or_default(),
        );
        (d(b.run_ns, a.run_ns), d(b.wait_ns, a.wait_ns))
    };
    let (ks_cpu, ks_wait) = group("ksoftirqd");
    let (dm_cpu, dm_wait) = group("scx_gang");
    println!(
        "rankprobe elapsed_ms={} rank_cpu_ms={} rank_wait_ms={} rank_slices={} rank_vcsw={} rank_nvcsw={} \
         node_run_ms={} node_wait_ms={} node_slices={} node_ctxt={} node_softirq_ms={} node_irq_ms={} \
         net_rx={} net_tx={} ksoftirqd_cpu_ms={} ksoftirqd_wait_ms={} daemon_cpu_ms={} daemon_wait_ms={} \
         tcp_retrans={} tcp_timeouts={}",
        ms(elapsed.as_nanos() as u64),
        ms(tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime)),
        ms(rank.wait_ns),
        rank.slices,
        ru.ru_nvcsw,
        ru.ru_nivcsw,
        ms(d(before.sched.run_ns, after.sched.run_ns)),
        ms(d(before.sched.wait_ns, after.sched.wait_ns)),
        d(before.sched.slices, after.sched.slices),
        d(before.stat.0, after.stat.0),
        ms(d(before.stat.2, after.stat.2) * tick_ns),
        ms(d(before.stat.1, after.stat.1) * tick_ns),
        d(before.net_rx, after.net_rx),
        d(before.net_tx, after.net_tx),
        ms(ks_cpu),
        ms(ks_wait),
        ms(dm_cpu),
        ms(dm_wait),
        d(before.tcp_retrans, after.tcp_retrans),
        d(before.tcp_timeouts, after.tcp_timeouts),
    );
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if ok_on_exit && code == 0 {
        println!("{{\"ok\":true,\"elapsed_s\":{:.6}}}", elapsed.as_secs_f64());
    }
    exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_schedstat_is_run_wait_and_slices() {
        let s = parse_task_schedstat("123456 7890 42\n").unwrap();
        assert_eq!(
            s,
            Sched {
                run_ns: 123456,
                wait_ns: 7890,
                slices: 42
            }
        );
        assert_eq!(parse_task_schedstat("1 2\n"), None);
        assert_eq!(parse_task_schedstat("1 x 3\n"), None);
    }

    #[test]
    fn the_node_schedstat_sums_the_cpu_lines() {
        let s = "version 15\ntimestamp 4295\n\
                 cpu0 0 0 10 4 6 2 1000 200 30\ndomain0 3 1 2 3\n\
                 cpu1 0 0 10 4 6 2 500 100 20\n";
        assert_eq!(
            parse_node_schedstat(s),
            Sched {
                run_ns: 1500,
                wait_ns: 300,
                slices: 50
            }
        );
    }

    #[test]
    fn proc_stat_gives_ctxt_irq_and_softirq() {
        let s = "cpu  10 0 20 300 1 7 9 0 0 0\ncpu0 10 0 20 300 1 7 9 0 0 0\nctxt 5555\nbtime 1\n";
        assert_eq!(parse_stat(s), (5555, 7, 9));
    }

    #[test]
    fn snmp_counters_are_found_by_name_under_their_protocol() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 17 0\n";
        assert_eq!(parse_snmp(snmp, "Tcp:", "RetransSegs"), 17);
        assert_eq!(parse_snmp(snmp, "Tcp:", "Nope"), 0);
        let netstat =
            "TcpExt: SyncookiesSent TCPTimeouts\nTcpExt: 0 4\nIpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(parse_snmp(netstat, "TcpExt:", "TCPTimeouts"), 4);
    }

    #[test]
    fn a_softirq_row_is_summed_over_cpus() {
        let s = "                    CPU0       CPU1\n          HI:          1          0\n      NET_TX:          3          4\n      NET_RX:        100         23\n";
        assert_eq!(parse_softirq(s, "NET_RX:"), 123);
        assert_eq!(parse_softirq(s, "NET_TX:"), 7);
        assert_eq!(parse_softirq(s, "BLOCK:"), 0);
    }
}
