//! The cluster's trace: every node's trace put on gangd's time line, each
//! analysed on its own (shares, overlap, switch latency), plus what only
//! the whole cluster shows: the **switch skew**, how far apart the nodes
//! carried out the same slot switch.
//!
//! Each node sends its raw trace (`{meta, events}`, the JSON of scx_gang's
//! RawTrace) and gangd adds the node's clock offset, measured with the
//! heartbeats: `gangd_ns = node_ns + offset_ns`.
//!
//! Input is untrusted like everywhere in `trace`: unreadable events are
//! counted and skipped, offsets or windows that would overflow are clamped,
//! nothing panics.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::analysis::ratio;
use super::svg::{self, Legend, Row, Timeline};
use super::*;

/// One node's raw trace as it came from gangd.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeTrace {
    /// The node's name as gangd knows it (rows of the picture are named
    /// after it, whatever `meta.node` says).
    pub node: String,
    /// gangd_ns = node_ns + offset_ns.
    pub offset_ns: i64,
    pub meta: TraceMeta,
    pub events: Vec<TraceEvent>,
    /// Events in the node's JSON that were not events at all (wrong kind,
    /// missing field...), skipped by [`parse_node`].
    #[serde(default)]
    pub unreadable_events: u64,
}

/// An element of `events` that may or may not be a TraceEvent.
#[derive(Deserialize)]
#[serde(untagged)]
enum MaybeEvent {
    Event(TraceEvent),
    Junk(IgnoredAny),
}

#[derive(Deserialize)]
struct RawNode {
    meta: TraceMeta,
    events: Vec<MaybeEvent>,
}

/// Reads a node's trace: JSON `{"meta": TraceMeta, "events": [TraceEvent]}`.
/// An event that does not parse is counted in `unreadable_events`; a
/// document that is not of that shape at all (or a meta that does not
/// parse) is an error.
pub fn parse_node(node: &str, offset_ns: i64, data: &[u8]) -> Result<NodeTrace, String> {
    let raw: RawNode =
        serde_json::from_slice(data).map_err(|e| format!("node {node}: unreadable trace: {e}"))?;
    let mut events = Vec::with_capacity(raw.events.len());
    let mut unreadable = 0;
    for e in raw.events {
        match e {
            MaybeEvent::Event(ev) => events.push(ev),
            MaybeEvent::Junk(_) => unreadable += 1,
        }
    }
    Ok(NodeTrace {
        node: node.to_string(),
        offset_ns,
        meta: raw.meta,
        events,
        unreadable_events: unreadable,
    })
}

/// One node's part of the cluster trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    pub node: String,
    pub offset_ns: i64,
    /// The node's analysis, in the node's own clock (add `offset_ns` for
    /// gangd's).
    pub trace: Trace,
    /// Events dropped before the analysis (see [`NodeTrace`]); those the
    /// analysis dropped are in `trace.summary.ignored_events`.
    pub unreadable_events: u64,
}

/// Skew of one switch generation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenSkew {
    pub gen: u64,
    /// Nodes whose trace holds this switch.
    pub nodes: u32,
    /// max - min of the nodes' switch times on gangd's clock.
    pub skew_ns: u64,
    /// When the first node switched, on gangd's clock.
    pub first_ns: u64,
    /// The node that switched first and the one that switched last.
    pub first_node: String,
    pub last_node: String,
}

/// Switch skew over the generations seen on two nodes or more, in µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SkewStats {
    /// Generations measured.
    pub samples: u64,
    /// Nearest-rank percentiles (see [`percentile_nearest_rank`]).
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// A gang (job) over the whole cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterGang {
    /// Index of the gang in the cluster trace (its colour).
    pub id: i32,
    pub run_ns: u64,
    /// run_ns / cpu_time_ns of the whole cluster.
    pub share_of_cpu: f64,
    /// run_ns / gang_run_ns of the whole cluster.
    pub share_of_gang_time: f64,
    pub overlap_ns: u64,
    pub fill_ns: u64,
    #[serde(default)]
    pub finish_ns: u64,
    /// Nodes where the gang ran or had a name.
    pub nodes: Vec<String>,
}

/// The result of [`merge`]; what `gang trace --json FILE` writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterTrace {
    /// The union of the nodes' windows, on gangd's clock.
    pub start_ns: u64,
    pub end_ns: u64,
    /// In the order given to [`merge`].
    pub nodes: Vec<NodeResult>,
    /// Keyed by gang name (e.g. "job3"); a gang without a name on a node
    /// is "node:id", so that unnamed gangs of two nodes stay apart.
    pub gangs: BTreeMap<String, ClusterGang>,
    pub cpu_time_ns: u64,
    pub gang_run_ns: u64,
    pub other_ns: u64,
    pub idle_ns: u64,
    pub overlap_ns: u64,
    pub fill_ns: u64,
    /// Sum of the nodes' `Summary::finish_ns`.
    #[serde(default)]
    pub finish_ns: u64,
    /// overlap_ns / gang_run_ns, 0 when no gang ran.
    pub overlap_fraction: f64,
    /// Sums of the nodes' stall figures (see `Summary::stalls`).
    #[serde(default)]
    pub stalled_ns: u64,
    #[serde(default)]
    pub stall_overlap_ns: u64,
    /// Switch skew in µs.
    pub skew_us: SkewStats,
    /// Per generation, ascending; generations seen on one node only (or
    /// gen 0: a node's own switch, while gangd was away) are not here.
    pub skew: Vec<GenSkew>,
    /// Events dropped on all nodes: unreadable plus ignored by analysis.
    pub bad_events: u64,
}

/// `ts` of a node's clock on gangd's, clamped to u64.
pub fn to_gangd(ts: u64, offset_ns: i64) -> u64 {
    (ts as i128 + offset_ns as i128).clamp(0, u64::MAX as i128) as u64
}

/// The cluster-wide name of a node's gang id.
fn gang_name(node: &str, meta: &TraceMeta, id: i32) -> String {
    match meta.gang_names.get(&id) {
        Some(name) => name.clone(),
        None => format!("{node}:{id}"),
    }
}

/// Order of gangs in the cluster: "jobN" by N, then other names.
fn gang_order(name: &str) -> (u64, &str) {
    let n = name
        .strip_prefix("job")
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    (n, name)
}

/// Analyses every node and measures the switch skew. See the module doc.
///
/// Skew: for every switch generation `gen != 0` present among the in-window
/// switches of at least two nodes, the spread (max - min) of those nodes'
/// switch times on gangd's clock. A node with two switches of one
/// generation counts with its first.
pub fn merge(nodes: Vec<NodeTrace>) -> ClusterTrace {
    let mut ct = ClusterTrace::default();
    let mut window: Option<(u64, u64)> = None;
    // gen -> (node index, gangd time of its first switch of that gen)
    let mut gens: BTreeMap<u64, Vec<(usize, i128)>> = BTreeMap::new();
    // name -> accumulated figures
    let mut gangs: BTreeMap<String, ClusterGang> = BTreeMap::new();

    for (i, mut n) in nodes.into_iter().enumerate() {
        if n.meta.node.is_empty() {
            n.meta.node = n.node.clone();
        }
        let meta_for_names = n.meta.clone();
        let trace = analyze(n.meta, n.events);
        let s = &trace.summary;

        let start = to_gangd(trace.meta.start_ns, n.offset_ns);
        let end = to_gangd(trace.meta.end_ns.max(trace.meta.start_ns), n.offset_ns);
        window = Some(match window {
            None => (start, end),
            Some((a, b)) => (a.min(start), b.max(end)),
        });

        let mut first_of_gen: HashMap<u64, i128> = HashMap::new();
        for sw in trace.switches.iter().filter(|sw| sw.gen != 0) {
            let t = sw.ts_ns as i128 + n.offset_ns as i128;
            first_of_gen
                .entry(sw.gen)
                .and_modify(|v| *v = (*v).min(t))
                .or_insert(t);
        }
        for (gen, t) in first_of_gen {
            gens.entry(gen).or_default().push((i, t));
        }

        for g in s.gangs.values() {
            let name = gang_name(&n.node, &meta_for_names, g.id);
            let acc = gangs.entry(name).or_default();
            acc.run_ns = acc.run_ns.saturating_add(g.run_ns);
            acc.overlap_ns = acc.overlap_ns.saturating_add(g.overlap_ns);
            acc.fill_ns = acc.fill_ns.saturating_add(g.fill_ns);
            acc.finish_ns = acc.finish_ns.saturating_add(g.finish_ns);
            if !acc.nodes.contains(&n.node) {
                acc.nodes.push(n.node.clone());
            }
        }
        ct.cpu_time_ns = ct.cpu_time_ns.saturating_add(s.cpu_time_ns);
        ct.gang_run_ns = ct.gang_run_ns.saturating_add(s.gang_run_ns);
        ct.other_ns = ct.other_ns.saturating_add(s.other_ns);
        ct.idle_ns = ct.idle_ns.saturating_add(s.idle_ns);
        ct.overlap_ns = ct.overlap_ns.saturating_add(s.overlap_ns);
        ct.fill_ns = ct.fill_ns.saturating_add(s.fill_ns);
        ct.finish_ns = ct.finish_ns.saturating_add(s.finish_ns);
        ct.stalled_ns = ct.stalled_ns.saturating_add(s.stalled_ns);
        ct.stall_overlap_ns = ct.stall_overlap_ns.saturating_add(s.stall_overlap_ns);
        ct.bad_events = ct
            .bad_events
            .saturating_add(s.ignored_events)
            .saturating_add(n.unreadable_events);
        ct.nodes.push(NodeResult {
            node: n.node,
            offset_ns: n.offset_ns,
            trace,
            unreadable_events: n.unreadable_events,
        });
    }
    (ct.start_ns, ct.end_ns) = window.unwrap_or((0, 0));
    ct.overlap_fraction = ratio(ct.overlap_ns, ct.gang_run_ns);

    let mut names: Vec<String> = gangs.keys().cloned().collect();
    names.sort_by(|a, b| gang_order(a).cmp(&gang_order(b)));
    for (id, name) in names.iter().enumerate() {
        if let Some(g) = gangs.get_mut(name) {
            g.id = i32::try_from(id).unwrap_or(i32::MAX);
            g.share_of_cpu = ratio(g.run_ns, ct.cpu_time_ns);
            g.share_of_gang_time = ratio(g.run_ns, ct.gang_run_ns);
        }
    }
    ct.gangs = gangs;

    for (gen, times) in gens {
        if times.len() < 2 {
            continue;
        }
        let (first_i, first_t) = *times.iter().min_by_key(|(_, t)| *t).expect("two or more");
        let (last_i, last_t) = *times.iter().max_by_key(|(_, t)| *t).expect("two or more");
        ct.skew.push(GenSkew {
            gen,
            nodes: times.len() as u32,
            skew_ns: (last_t - first_t).clamp(0, u64::MAX as i128) as u64,
            first_ns: first_t.clamp(0, u64::MAX as i128) as u64,
            first_node: ct.nodes[first_i].node.clone(),
            last_node: ct.nodes[last_i].node.clone(),
        });
    }
    let mut skews: Vec<u64> = ct.skew.iter().map(|g| g.skew_ns).collect();
    skews.sort_unstable();
    let us = |p| percentile_nearest_rank(&skews, p).unwrap_or(0) as f64 / 1e3;
    ct.skew_us = SkewStats {
        samples: skews.len() as u64,
        p50: us(50),
        p99: us(99),
        max: us(100),
    };
    ct
}

/// A node's interval on gangd's clock with the cluster's gang ids.
fn remap(iv: &Interval, offset_ns: i64, ids: &HashMap<i32, i32>) -> Interval {
    let map = |g: i32| {
        if g >= 0 {
            // Every id that ran is in the summary, so in `ids`; an owner
            // that never ran may not be: it is only ever compared.
            ids.get(&g).copied().unwrap_or(GANG_NONE)
        } else {
            g
        }
    };
    let gang = map(iv.gang);
    let owner = if iv.owner >= 0 && iv.owner == iv.gang {
        gang
    } else if iv.owner >= 0 {
        match ids.get(&iv.owner) {
            // Another gang of the same name is still another owner.
            Some(&o) if o != gang => o,
            _ => GANG_NONE,
        }
    } else {
        iv.owner
    };
    Interval {
        start_ns: to_gangd(iv.start_ns, offset_ns),
        end_ns: to_gangd(iv.end_ns, offset_ns),
        gang,
        owner,
        fill: iv.fill,
        finish: iv.finish,
    }
}

fn fmt_us(v: f64) -> String {
    format!("{v:.0} µs")
}

/// One picture of the whole cluster: a row per node:cpu, all on gangd's
/// clock, one colour per gang (by name, so a job has the same colour on
/// every node), overlap in red, the switches of all nodes as lines.
pub fn render_cluster_svg(ct: &ClusterTrace) -> String {
    let mut rows = Vec::new();
    let mut switches = Vec::new();
    for n in &ct.nodes {
        let meta = &n.trace.meta;
        let ids: HashMap<i32, i32> = meta
            .gang_names
            .keys()
            .copied()
            .chain(n.trace.summary.gangs.values().map(|g| g.id))
            .filter(|&id| id >= 0)
            .filter_map(|id| {
                ct.gangs
                    .get(&gang_name(&n.node, meta, id))
                    .map(|g| (id, g.id))
            })
            .collect();
        for (cpu, row) in n.trace.cpus.iter().enumerate() {
            rows.push(Row {
                label: format!("{}:cpu{cpu}", n.node),
                intervals: Cow::Owned(row.iter().map(|iv| remap(iv, n.offset_ns, &ids)).collect()),
            });
        }
        switches.extend(
            n.trace
                .switches
                .iter()
                .map(|sw| to_gangd(sw.ts_ns, n.offset_ns)),
        );
    }
    switches.sort_unstable();

    let gangs = svg::legend_gangs(
        ct.gangs
            .iter()
            .map(|(n, g)| (n, g.id, g.share_of_cpu, g.share_of_gang_time)),
    );
    let k = &ct.skew_us;
    let title = format!(
        "scx_gang on {} nodes: {}, overlap {:.2}%, switch skew p50 {} / p99 {} ({} switches)",
        ct.nodes.len(),
        svg::fmt_duration(ct.end_ns.saturating_sub(ct.start_ns)),
        ct.overlap_fraction * 100.0,
        fmt_us(k.p50),
        fmt_us(k.p99),
        k.samples
    );
    let subtitle = format!(
        "{} CPUs on {}; skew max {}; time on gangd's clock; {} events ignored",
        rows.len(),
        ct.nodes
            .iter()
            .map(|n| n.node.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        fmt_us(k.max),
        ct.bad_events
    );
    let timeline = Timeline {
        title,
        subtitle,
        start_ns: ct.start_ns,
        end_ns: ct.end_ns,
        rows,
        switches,
        legend: Legend {
            gangs,
            cpu_time_ns: ct.cpu_time_ns,
            other_ns: ct.other_ns,
            idle_ns: ct.idle_ns,
            fill_ns: ct.fill_ns,
            filler: ct
                .gangs
                .values()
                .find(|g| g.fill_ns > 0)
                .map_or(0, |g| g.id),
            overlap_fraction: ct.overlap_fraction,
            stall_overlap_fraction: ratio(ct.stall_overlap_ns, ct.gang_run_ns),
            finish_fraction: ratio(ct.finish_ns, ct.gang_run_ns),
        },
    };
    svg::render_timeline(&timeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_mapping_clamps() {
        assert_eq!(to_gangd(10, -3), 7);
        assert_eq!(to_gangd(2, -3), 0);
        assert_eq!(to_gangd(u64::MAX, 5), u64::MAX);
        assert_eq!(to_gangd(u64::MAX, i64::MIN), u64::MAX - (1u64 << 63));
    }

    #[test]
    fn jobs_sort_by_number() {
        let mut v = vec!["job10", "x", "job2", "job1"];
        v.sort_by(|a, b| gang_order(a).cmp(&gang_order(b)));
        assert_eq!(v, ["job1", "job2", "job10", "x"]);
    }

    #[test]
    fn junk_events_are_counted() {
        let json = br#"{"meta":{"nr_cpus":1,"gang_names":{"0":"job1"},"start_ns":0,"end_ns":10,"node":"n"},
            "events":[{"ts_ns":1,"gen":0,"kind":"Run","cpu":0,"gang":0,"slot":0,"cause":0,"flags":0},
                      {"ts_ns":1,"kind":"Bogus"}, 7, null]}"#;
        let n = parse_node("n", 0, json).unwrap();
        assert_eq!(n.events.len(), 1);
        assert_eq!(n.unreadable_events, 3);
        assert!(parse_node("n", 0, b"[1,2]").is_err());
        assert!(parse_node("n", 0, b"").is_err());
    }
}
