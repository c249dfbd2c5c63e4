//! `gang trace`: gather every node's trace from gangd, merge them
//! (trace::cluster) and show the result.

use std::collections::BTreeMap;

use gang_wire::proto::ToClient;
use gang_wire::trace::cluster::{parse_node, ClusterTrace, NodeTrace};

use super::table::{render_table, sanitize};

/// A node's trace larger than this is given up (counted as an error): a
/// node cannot make us hold unbounded memory.
pub const MAX_NODE_TRACE: usize = 1 << 30;

#[derive(Default)]
struct Partial {
    offset_ns: i64,
    data: Vec<u8>,
    /// Too big or otherwise spoiled: the rest of its chunks are dropped.
    spoiled: bool,
}

/// Reassembles the TraceData chunks of every node.
#[derive(Default)]
pub struct TraceCollector {
    partial: BTreeMap<String, Partial>,
    /// In the order their last chunk came.
    done: Vec<NodeTrace>,
    finished_nodes: Vec<String>,
    pub errors: Vec<String>,
}

impl TraceCollector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one TraceData chunk.
    pub fn chunk(&mut self, node: &str, offset_ns: i64, data: &[u8], last: bool) {
        if self.finished_nodes.iter().any(|n| n == node) {
            self.errors.push(format!(
                "node {node}: trace data after its last chunk, ignored"
            ));
            return;
        }
        let p = self.partial.entry(node.to_string()).or_default();
        p.offset_ns = offset_ns;
        if !p.spoiled {
            if p.data.len().saturating_add(data.len()) > MAX_NODE_TRACE {
                p.spoiled = true;
                p.data = Vec::new();
                self.errors.push(format!(
                    "node {node}: trace larger than {} MiB, ignored",
                    MAX_NODE_TRACE >> 20
                ));
            } else {
                p.data.extend_from_slice(data);
            }
        }
        if last {
            let p = self.partial.remove(node).unwrap_or_default();
            self.finished_nodes.push(node.to_string());
            if p.spoiled {
                return;
            }
            if p.data.is_empty() {
                // A node that could not trace sends one empty last chunk
                // (its error comes in TraceEnd).
                return;
            }
            match parse_node(node, p.offset_ns, &p.data) {
                Ok(t) => self.done.push(t),
                Err(e) => self.errors.push(e),
            }
        }
    }

    /// Feeds one message; true when it was TraceEnd (whose errors are
    /// added to ours).
    pub fn message(&mut self, m: ToClient) -> bool {
        match m {
            ToClient::TraceData {
                node,
                offset_ns,
                data,
                last,
            } => {
                self.chunk(&node, offset_ns, &data.0, last);
                false
            }
            ToClient::TraceEnd { errors } => {
                self.errors.extend(errors);
                true
            }
            _ => false,
        }
    }

    /// The complete node traces, once TraceEnd came. Nodes whose last chunk
    /// never came are reported as errors.
    pub fn finish(mut self) -> (Vec<NodeTrace>, Vec<String>) {
        for node in self.partial.keys() {
            self.errors
                .push(format!("node {node}: trace cut short (no last chunk)"));
        }
        (self.done, self.errors)
    }
}

fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

/// The text `gang trace` prints: one line per node, then the skew.
pub fn summary_text(ct: &ClusterTrace) -> String {
    let header = [
        "NODE",
        "OFFSET_MS",
        "OVERLAP",
        "SWITCHES",
        "LAT_P50",
        "LAT_P99",
        "IGNORED",
        "GANGS",
    ];
    let rows: Vec<Vec<String>> = ct
        .nodes
        .iter()
        .map(|n| {
            let s = &n.trace.summary;
            let mut gangs: Vec<(&String, f64)> = s
                .gangs
                .iter()
                .map(|(name, g)| (name, g.share_of_cpu))
                .collect();
            gangs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            let gangs = gangs
                .iter()
                .map(|(name, share)| format!("{}={:.1}%", sanitize(name), share * 100.0))
                .collect::<Vec<_>>()
                .join(" ");
            vec![
                sanitize(&n.node),
                format!("{:.3}", n.offset_ns as f64 / 1e6),
                pct(s.overlap_fraction),
                s.switches.to_string(),
                format!("{:.0}us", s.switch_latency_us.p50),
                format!("{:.0}us", s.switch_latency_us.p99),
                (s.ignored_events.saturating_add(n.unreadable_events)).to_string(),
                if gangs.is_empty() { "-".into() } else { gangs },
            ]
        })
        .collect();
    let mut out = render_table(&header, &rows);
    let k = &ct.skew_us;
    if k.samples == 0 {
        out.push_str("switch skew: no switch seen on two nodes\n");
    } else {
        out.push_str(&format!(
            "switch skew over {} switches: p50 {:.0}us, p99 {:.0}us, max {:.0}us\n",
            k.samples, k.p50, k.p99, k.max
        ));
    }
    out.push_str(&format!(
        "cluster: overlap {} of gang time, {} events ignored\n",
        pct(ct.overlap_fraction),
        ct.bad_events
    ));
    out
}
