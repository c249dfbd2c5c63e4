//! Step 2 of the benchmark's tables: results.csv (medians per N, method
//! and TQ over the good runs) and the text table, from runs.csv's rows and
//! each boot's round-trip times and host noise (see `mod.rs`).
//!
//! Known faults: a figure over no good run prints "-" or nothing, as the
//! awk did; a U_alone median of 0 gives an `inf` ratio where awk stopped.

use super::awk::{int, max_of, median, min_of, num, pad, Med};
use super::{BenchParams, Boot};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The per-N facts beside the runs: round-trip times and the host's noise.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootFacts {
    /// Runs that needed a retry; `None` without gang.jsonl.
    pub retried: Option<usize>,
    /// µs, or "-": the slowest peer's p50 (ping) or gangd's heartbeat.
    pub ping_idle: String,
    pub ping_loaded: String,
    pub hb_loaded: String,
    pub ping_scx_idle: String,
    pub hb_idle: String,
    /// % of the boot's samples with other VMs on the host, or "-".
    pub foreign_pct: String,
}

/// The largest p50_us of the `what` records of rtt.jsonl, "-" if none.
fn rtt(lines: Option<&[String]>, what: &str) -> String {
    let tag = format!("\"what\":\"{what}\"");
    lines
        .unwrap_or_default()
        .iter()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| {
            let v = l
                .rsplit("\"p50_us\":")
                .next()
                .filter(|_| l.contains("\"p50_us\":"))?;
            let d: String = v.chars().take_while(char::is_ascii_digit).collect();
            Some(d)
        })
        .max_by(|a, b| num(a).total_cmp(&num(b)))
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "-".into())
}

/// Share of the host samples ("epoch count") with another VM, in %.
fn foreign_pct(samples: &[String]) -> String {
    let busy = samples
        .iter()
        .filter(|l| num(l.split_whitespace().nth(1).unwrap_or("")) > 0.0)
        .count();
    match samples.len() {
        0 => "0".into(),
        n => (100 * busy / n).to_string(),
    }
}

/// What a boot tells beside its runs.
pub fn boot_facts(boot: &Boot) -> BootFacts {
    let r = boot.rtt.as_deref();
    BootFacts {
        retried: boot.gang.as_ref().map(|g| {
            g.iter()
                .filter(|l| {
                    l.match_indices("\"retries\":")
                        .any(|(i, k)| matches!(l.as_bytes().get(i + k.len()), Some(b'1'..=b'9')))
                })
                .count()
        }),
        ping_idle: rtt(r, "ping_idle"),
        ping_loaded: rtt(r, "ping_loaded"),
        hb_loaded: rtt(r, "gangd_hb_loaded"),
        ping_scx_idle: rtt(r, "ping_scx_idle"),
        hb_idle: rtt(r, "gangd_hb_idle"),
        foreign_pct: boot
            .foreign_vms
            .as_deref()
            .filter(|s| !s.is_empty())
            .map_or_else(|| "-".into(), foreign_pct),
    }
}

/// The lists of one (N, method, TQ) over its good runs.
#[derive(Default)]
struct Group {
    r: Vec<String>,
    over: Vec<String>,
    switches: Vec<String>,
    total: Vec<String>,
    skew: Vec<String>,
    freeze: Vec<String>,
    frozen: Vec<String>,
    est: Vec<String>,
    late: Vec<String>,
    rate: Vec<String>,
    early: f64,
    early_of: f64,
}

/// `%d µs`, or `%.1f ms` from 10 ms; "-" for nothing.
fn us(x: &Med) -> String {
    if x.text.is_empty() || x.text == "-" {
        "-".into()
    } else if x.value >= 10000.0 {
        format!("{:.1} ms", x.value / 1000.0)
    } else {
        format!("{} µs", x.value as i64)
    }
}

/// An overhead, µs per switch without decimals; "-" for nothing.
fn ov(x: Option<&Med>) -> String {
    match x {
        Some(x) if !x.text.is_empty() => format!("{:.0}", x.value),
        _ => "-".into(),
    }
}

/// One line of the table: its 13 columns padded as the awk's printf did.
fn table_line(c: [&str; 13]) -> String {
    const WIDTH: [usize; 12] = [6, 24, 9, 9, 9, 24, 9, 24, 7, 11, 24, 8];
    let p = |i: usize| pad(c[i], WIDTH[i]);
    format!(
        "   {} | {} {} {} {} | {} {} | {} {} {} | {} | {} | {}\n",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        p(6),
        p(7),
        p(8),
        p(9),
        p(10),
        p(11),
        c[12]
    )
}

/// Timed switching (issue 12) next to the commanded barrier, per N and
/// TQ: overhead per switch, the idle time a switch leaves on a node, the
/// skew of the nodes' switch instants, the latest node's lateness, all
/// against the RTT of the same boot. Empty without timed runs.
fn timed_table(g: &Groups, med: &Overheads, fact: &dyn Fn(&str) -> BootFacts) -> String {
    let (groups, ns, tqs) = (&g.groups, &g.ns, &g.tqs);
    if !groups.keys().any(|k| k.1.starts_with("timed")) {
        return String::new();
    }
    let mut t = String::from(
        "\nTimed switching (switching = timed: every node switches on its own clock at the plan's boundaries) next to the commanded barrier.\n\
         idle = CPU time a switch leaves idle on a node (timed strict: the nodes' parked_us, park to switch; commanded strict: Frozen -> Running at gangd); \
         timed-strict parks in BPF (knob park = bpf) and reads the drain's sockets from the socket watch (drain_check = watch); \
         its variants set one node knob otherwise: timed-strict-freezer park = freezer (the cgroup freezer), timed-strict-sockdiag drain_check = sock_diag (a dump per check), timed-strict-p50 and -p90 drain_lead_pct = 50 and 90 (75 otherwise); \
         skew = spread of the nodes' switch instants (timed) or of the Running answers (commanded); late = the latest node's lateness (timed).\n",
    );
    let empty = Group::default();
    // timed-strict with one node knob set otherwise, as the runs have them.
    let mut variants: Vec<&str> = groups
        .keys()
        .map(|k| k.1.as_str())
        .filter(|m| m.starts_with("timed-strict-"))
        .collect();
    variants.sort_unstable();
    variants.dedup();
    for n in ns {
        let f = fact(n);
        let _ = writeln!(
            t,
            "\nN={}   RTT ping p50 idle {} / busy {}",
            int(n),
            us(&Med::of(&f.ping_idle)),
            us(&Med::of(&f.ping_loaded))
        );
        let variant_head: String = variants
            .iter()
            .map(|v| format!(" | {v:>24} {:>9} {:>9}", "idle", "late"))
            .collect();
        let _ = writeln!(
            t,
            "   {:>6} | {:>24} {:>9} {:>9} {:>9}{variant_head} | {:>24} {:>9} {:>9} | {:>24} {:>9} {:>9}",
            "TQ",
            "timed-strict µs/sw",
            "idle",
            "skew",
            "late",
            "timed-off µs/sw",
            "skew",
            "late",
            "strict µs/sw",
            "idle",
            "skew"
        );
        for tq in tqs.get(n).map(Vec::as_slice).unwrap_or_default() {
            let key = |m: &str| (n.clone(), m.to_string(), tq.clone());
            let grp = |m: &str| groups.get(&key(m)).unwrap_or(&empty);
            let cell = |m: &str| {
                let x = med.get(&key(m));
                format!("{}{}", ov(x.map(|x| &x.0)), x.map_or("", |x| x.1.as_str()))
            };
            let (ts, to, cs) = (grp("timed-strict"), grp("timed-off"), grp("strict"));
            let variant_cells: String = variants
                .iter()
                .map(|v| {
                    let g = grp(v);
                    format!(
                        " | {:>24} {:>9} {:>9}",
                        cell(v),
                        us(&median(&g.frozen)),
                        us(&median(&g.late))
                    )
                })
                .collect();
            let _ = writeln!(
                t,
                "   {:>6} | {:>24} {:>9} {:>9} {:>9}{variant_cells} | {:>24} {:>9} {:>9} | {:>24} {:>9} {:>9}",
                format!("{tq} ms"),
                cell("timed-strict"),
                us(&median(&ts.frozen)),
                us(&median(&ts.skew)),
                us(&median(&ts.late)),
                cell("timed-off"),
                us(&median(&to.skew)),
                us(&median(&to.late)),
                cell("strict"),
                us(&median(&cs.frozen)),
                us(&median(&cs.skew))
            );
        }
    }
    t
}

/// Key of a group of runs: (N, method, TQ) as runs.csv spells them.
type Key = (String, String, String);

/// The good runs (ok 1) by key, in the order they came, and the others.
#[derive(Default)]
struct Groups {
    keys: Vec<Key>,
    groups: HashMap<Key, Group>,
    /// The node counts, in order.
    ns: Vec<String>,
    /// Per N, its TQs of switched runs, in order.
    tqs: BTreeMap<String, Vec<String>>,
    /// "N method TQ" → runs not ok, left out.
    bad: BTreeMap<String, usize>,
}

/// Groups runs.csv's rows.
fn group(runs: &[String]) -> Groups {
    let Groups {
        mut keys,
        mut groups,
        mut ns,
        mut tqs,
        mut bad,
    } = Groups::default();
    for row in runs {
        let c: Vec<String> = row.split(',').map(str::to_string).collect();
        let c = |i: usize| c.get(i - 1).cloned().unwrap_or_default();
        let k = (c(1), c(3), c(4));
        if num(&c(18)) != 1.0 {
            *bad.entry(format!("{} {} {}", k.0, k.1, k.2)).or_default() += 1;
            continue;
        }
        if !groups.contains_key(&k) {
            keys.push(k.clone());
        }
        if !ns.contains(&c(1)) {
            ns.push(c(1));
        }
        let baseline = c(3) == "alone" || c(3) == "scx_alone";
        let t = tqs.entry(c(1)).or_default();
        if !baseline && !t.contains(&c(4)) {
            t.push(c(4));
        }
        let g = groups.entry(k).or_default();
        g.r.push(c(9));
        g.over.push(c(10));
        g.switches.push(c(11));
        for (v, i) in [
            (&mut g.total, 12),
            (&mut g.skew, 13),
            (&mut g.freeze, 14),
            (&mut g.frozen, 15),
            (&mut g.est, 16),
            (&mut g.late, 20),
        ] {
            if !c(i).is_empty() {
                v.push(c(i));
            }
        }
        if baseline {
            g.rate.push(c(7));
        }
        if !c(19).is_empty() {
            g.early += num(&c(19));
            g.early_of += num(&c(11));
        }
    }
    Groups {
        keys,
        groups,
        ns,
        tqs,
        bad,
    }
}

/// The median overhead of each group and its range (" [min..max]" over
/// more than one run).
type Overheads = HashMap<Key, (Med, String)>;

/// results.csv's rows (without the header) and each group's overhead.
fn results(g: &Groups, fact: &dyn Fn(&str) -> BootFacts) -> (String, Overheads) {
    let (keys, groups) = (&g.keys, &g.groups);
    let mut results = String::new();
    let mut med: Overheads = HashMap::new();
    for k in keys {
        let g = &groups[k];
        let o = median(&g.over);
        let range = if g.over.len() > 1 {
            format!(" [{:.0}..{:.0}]", min_of(&g.over), max_of(&g.over))
        } else {
            String::new()
        };
        let f = fact(&k.0);
        let _ = writeln!(
            results,
            "{},{},{},{},{:.5},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{}",
            int(&k.0),
            k.1,
            int(&k.2),
            g.over.len(),
            median(&g.r).value,
            o.value,
            min_of(&g.over),
            max_of(&g.over),
            median(&g.switches).text,
            median(&g.total).text,
            median(&g.skew).text,
            median(&g.freeze).text,
            median(&g.frozen).text,
            median(&g.est).text,
            f.ping_idle,
            f.ping_loaded,
            f.hb_loaded,
            median(&g.late).text
        );
        med.insert(k.clone(), (o, range));
    }

    (results, med)
}

/// The text table.
fn table(p: &BenchParams, g: &Groups, med: &Overheads, fact: &dyn Fn(&str) -> BootFacts) -> String {
    let (groups, ns, tqs, bad) = (&g.groups, &g.ns, &g.tqs, &g.bad);
    let mut t = String::new();
    t += "Cluster benchmark, seed 000 Table 4 method: T_overhead = TQ * (1 - (U_a+U_b)/U_alone), medians over repetitions.\n";
    let clock = if p.icount.is_empty() {
        "guest time = host real time (no -icount): every figure includes the host's scheduling noise".to_string()
    } else {
        format!(
            "qemu -icount shift={}: guest time counts instructions, RTT and barrier times are NOT physical",
            p.icount
        )
    };
    let ncpu = p.ncpu;
    if p.head {
        let _ = writeln!(
            t,
            "N compute nodes (node 1..N, ranks) + head node 0 (gangd, front ends, no ranks); 1 vCPU each, qemu pinned to host core i % {ncpu}: {}.",
            if ncpu == 2 {
                "node 2 shares core 0 with the (mostly idle) head, nodes 1 and 3 share core 1"
            } else {
                "see n<N>/"
            }
        );
    } else {
        let _ = writeln!(
            t,
            "N compute nodes, gangd on node 0 among its ranks; 1 vCPU each, qemu pinned to host core i % {ncpu}{}.",
            if ncpu == 2 { " (3 nodes: nodes 0 and 2 share core 0)" } else { "" }
        );
    }
    let _ = writeln!(t, "{clock}.");
    let _ = writeln!(
        t,
        "Window D >= {} s per run; gangd fill={}; scx_gang against one job alone under scx_gang, SIGSTOP (sigswitch) against burn alone on the default scheduler, every node at once.",
        p.seconds, p.fill
    );
    t += "yield = the strict barrier with ranks that call yield_point() at every work unit (seed 000 Table 5); early = share of its switches gangd brought forward because every rank had yielded; strict/yld = strict overhead over yield overhead.\n";
    t += "total = barrier start -> last node Running (gangd switch log, p50 over the window); idle≈ = CPU time a strict switch leaves idle on a node, from the switch log: its park+drain time plus its Frozen -> Running at gangd (the direct cost, immune to host noise); skew = spread of the Running answers; RTT = ping node0 -> slowest compute node, p50, idle and while every compute node runs a job.\n";
    let empty = Group::default();
    for n in ns {
        let key = |m: &str, tq: &str| (n.clone(), m.to_string(), tq.to_string());
        let grp = |m: &str, tq: &str| groups.get(&key(m, tq)).unwrap_or(&empty);
        let a = &grp("alone", "0").rate;
        let b = &grp("scx_alone", "0").rate;
        let scxrel = if groups.contains_key(&key("scx_alone", "0"))
            && groups.contains_key(&key("alone", "0"))
        {
            format!("{:.4}", median(b).value / median(a).value)
        } else {
            "-".into()
        };
        let f = fact(n);
        let _ = writeln!(
            t,
            "\nN={} node{}   U_alone: default scheduler {} units/s, under scx_gang {} of that",
            int(n),
            if num(n) > 1.0 { "s" } else { "" },
            median(a).text,
            scxrel
        );
        let _ = writeln!(
            t,
            "   RTT: ping idle p50 {}, ping idle under scx_gang {}, ping with every node busy {}; gangd heartbeat min {} idle, {} busy",
            us(&Med::of(&f.ping_idle)),
            us(&Med::of(&f.ping_scx_idle)),
            us(&Med::of(&f.ping_loaded)),
            us(&Med::of(&f.hb_idle)),
            us(&Med::of(&f.hb_loaded))
        );
        let spread = |v: &[String]| {
            if v.len() > 1 {
                (max_of(v) - min_of(v)) / median(v).value
            } else {
                -1.0
            }
        };
        let (sa, sb) = (spread(a), spread(b));
        let pct = |s: f64| {
            if s >= 0.0 {
                format!("{:.1} %", 100.0 * s)
            } else {
                "-".into()
            }
        };
        if sa >= 0.0 || sb >= 0.0 {
            let _ = writeln!(
                t,
                "   noise: U_alone ranges over {} (default scheduler) and {} (scx_gang) of its median between repetitions: a per-switch figure below ~TQ x that ({:.0} µs at TQ=100 ms) is not resolved",
                pct(sa),
                pct(sb),
                100000.0 * sa.max(sb)
            );
        }
        let _ = writeln!(
            t,
            "   host: other VMs (not this benchmark's) running during {} % of this boot",
            f.foreign_pct
        );
        t += &table_line([
            "TQ",
            "strict µs/sw [min..max]",
            "total",
            "idle≈",
            "skew",
            "off µs/sw [min..max]",
            "total",
            "yield µs/sw [min..max]",
            "early",
            "strict/yld",
            "SIGSTOP µs/sw [min..max]",
            "SIG/strict",
            "RTT p50 idle / busy",
        ]);
        for tq in tqs.get(n).map(Vec::as_slice).unwrap_or_default() {
            let m = |meth: &str| med.get(&key(meth, tq));
            let (ks, ko, kg, ky) = (m("strict"), m("off"), m("sigstop"), m("yield"));
            let pos = |x: Option<&(Med, String)>| x.map(|x| x.0.value).filter(|v| *v > 0.0);
            let ratio = match (pos(ks), pos(kg)) {
                (Some(s), Some(g)) => format!("{:.2}x", g / s),
                _ => "-".into(),
            };
            let yratio = match (pos(ks), pos(ky)) {
                (Some(s), Some(y)) => format!("{:.2}x", s / y),
                _ => "-".into(),
            };
            let gy = grp("yield", tq);
            let early = if groups.contains_key(&key("yield", tq)) && gy.early_of > 0.0 {
                format!("{:.0} %", 100.0 * gy.early / gy.early_of)
            } else {
                "-".into()
            };
            let cell = |x: Option<&(Med, String)>| {
                format!("{}{}", ov(x.map(|x| &x.0)), x.map_or("", |x| x.1.as_str()))
            };
            let gs = grp("strict", tq);
            t += &table_line([
                &format!("{tq} ms"),
                &cell(ks),
                &us(&median(&gs.total)),
                &us(&median(&gs.est)),
                &us(&median(&gs.skew)),
                &cell(ko),
                &us(&median(&grp("off", tq).total)),
                &cell(ky),
                &early,
                &yratio,
                &cell(kg),
                &ratio,
                &format!(
                    "{} / {}",
                    us(&Med::of(&f.ping_idle)),
                    us(&Med::of(&f.ping_loaded))
                ),
            ]);
        }
    }
    t += &timed_table(g, med, fact);
    for n in ns {
        if let Some(r) = fact(n).retried.filter(|r| *r > 0) {
            let _ = writeln!(
                t,
                "\nnote: N={}: {r} gang run(s) needed a retry (a job failed, e.g. gangd dropped a node silent 2 s in a barrier; see n{n}/node0/tries.jsonl)",
                int(n)
            );
        }
    }
    for (k, count) in bad {
        let _ = writeln!(
            t,
            "\nnote: {count} run(s) of {k} left out (ok 0: a job failed, a node did not report, or the starts spread more than LEAD)"
        );
    }
    t
}

/// results.csv's rows and the table from the runs of every boot (`facts`:
/// per N) and the settings.
pub fn summarise(
    p: &BenchParams,
    facts: &BTreeMap<u32, BootFacts>,
    runs: &[String],
) -> (String, String) {
    let g = group(runs);
    let fact = |n: &str| facts.get(&(num(n) as u32)).cloned().unwrap_or_default();

    let (results, med) = results(&g, &fact);
    let table = table(p, &g, &med, &fact);
    (results, table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::strings;

    #[test]
    fn runs_not_ok_are_left_out_of_the_medians_and_noted() {
        let p = BenchParams {
            nodes: vec![2],
            icount: String::new(),
            ncpu: 4,
            fill: 0,
            seconds: 6,
            head: true,
        };
        let rows = strings(&[
            "2,1,off,100,5,800,160.00,200.00,0.80000,20000.0,50,70,8,0,,,4,1,0",
            "2,2,off,100,5,800,160.00,200.00,0.70000,30000.0,50,70,8,0,,,4,0,0",
            "2,3,off,100,5,800,160.00,200.00,0.60000,40000.0,50,70,8,0,,,4,1,0",
        ]);
        let (results, table) = summarise(&p, &BTreeMap::new(), &rows);
        // The good runs 1 and 3: medians of two are means.
        assert_eq!(
            results,
            "2,off,100,2,0.70000,30000.0,20000.0,40000.0,50,70,8,0,,,,,,\n"
        );
        assert!(
            table.contains("note: 1 run(s) of 2 off 100 left out"),
            "{table}"
        );
        assert!(table.contains("see n<N>/"), "ncpu 4: {table}");
    }

    #[test]
    fn timed_runs_get_their_own_table_next_to_commanded_strict() {
        let p = BenchParams {
            nodes: vec![2],
            icount: String::new(),
            ncpu: 2,
            fill: 0,
            seconds: 6,
            head: true,
        };
        let rows = strings(&[
            "2,1,strict,100,5,700,140.00,200.00,0.70000,30000.0,50,45000,9000,20000,28000,,4,1,0,",
            "2,1,timed-strict,100,5,900,180.00,200.00,0.90000,10000.0,50,0,600,0,3100,,4,1,0,150",
            "2,1,timed-strict-freezer,100,5,800,160.00,200.00,0.80000,20000.0,50,0,700,0,9100,,4,1,0,450",
            "2,1,timed-off,100,5,950,190.00,200.00,0.95000,5000.0,50,0,500,0,,,4,1,0,90",
        ]);
        let (results, table) = summarise(&p, &BTreeMap::new(), &rows);
        assert!(
            results.contains("2,timed-strict,100,1,0.90000,10000.0,"),
            "{results}"
        );
        assert!(results.ends_with(",90\n"), "late last: {results}");
        let timed = &table[table.find("Timed switching").expect("a timed table")..];
        let line = timed
            .lines()
            .find(|l| l.trim_start().starts_with("100 ms"))
            .unwrap();
        for cell in [
            "10000", "3100 µs", "600 µs", "150 µs", "5000", "30000", "28.0 ms", "20000", "9100 µs",
            "450 µs",
        ] {
            assert!(line.contains(cell), "{cell} in {line}");
        }
        // Without timed runs, no timed table.
        let (_, table) = summarise(&p, &BTreeMap::new(), &rows[..1]);
        assert!(!table.contains("Timed switching"), "{table}");
    }

    #[test]
    fn the_slowest_peer_gives_the_rtt_and_retried_runs_are_counted() {
        let b = Boot {
            n: 2,
            gang: Some(strings(&[
                r#"{"rep":1,"retries":0}"#,
                r#"{"rep":2,"retries":2}"#,
            ])),
            rtt: Some(strings(&[
                r#"{"what":"ping_idle","peer":"node1","p50_us":900,"min_us":1,"n":20}"#,
                r#"{"what":"ping_idle","peer":"node2","p50_us":1200,"min_us":1,"n":20}"#,
            ])),
            foreign_vms: Some(strings(&["1 0", "3 2", "5 0", "7 0"])),
            ..Boot::default()
        };
        let f = boot_facts(&b);
        assert_eq!(f.retried, Some(1));
        assert_eq!(f.ping_idle, "1200");
        assert_eq!(f.ping_loaded, "-");
        assert_eq!(f.foreign_pct, "25");
        assert_eq!(boot_facts(&Boot::default()).retried, None);
        assert_eq!(boot_facts(&Boot::default()).foreign_pct, "-");
    }
}
