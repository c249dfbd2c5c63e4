//! The switch log: one JSON line per finished cluster switch, appended to
//! the file given with gangd's --switch-log, and the last record kept for
//! the `last_switch` status file. A commanded switch (barrier.rs) and a
//! timed one (timed.rs, `"switching": "timed"`) share the names `gen`,
//! `to_slot`, `skew_us`, `nodes` and `failed`; a timed line has no
//! barrier phases, and its skew is the spread of the nodes' own switch
//! instants (cluster clock) instead of the spread of their answers at
//! gangd.
//!
//! Cost at scale: a timed line names every node while at most `listed`
//! reported (`--switch-log-nodes`, LISTED_NODES by default); past that it
//! names only the nodes whose switch was not on time (up to `listed`,
//! lowest ids first) and counts the rest (`reported`, `on_time`; skew and
//! lateness still over every report), and `nodes_listed` says which
//! (`all` or `not_on_time`). Naming all 4096 nodes was a 245 KB line 10
//! times a second (2.4 MB/s of log) and 7 % of gangd's steady samples
//! (docs/scale.md). Lines are serialised straight from
//! the records into one reused buffer (derived `Serialize` views, no
//! `serde_json::Value` tree: building and dropping that tree was 58 % of
//! gangd's coordinator thread at 4096 nodes, docs/scale.md), and the last
//! record is rendered for `last_switch` only when the status is written,
//! not at every switch.
//!
//! Known faults: a write error is logged and the line lost; the file is
//! never rotated; a commanded line still names every node (commanded
//! switching is not what runs at thousands of nodes).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::marker::PhantomData;
use std::path::Path;

use anyhow::{Context, Result};
use log::warn;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;

use super::barrier::{Failure, NodeRecord, SwitchRecord};
use super::timed::TimedRecord;
use gang_wire::proto::{FreezeReport, NodeId, SwitchOutcome, SwitchReport};

/// The last record written, rendered on demand.
#[derive(Default)]
enum Last {
    #[default]
    None,
    Commanded(SwitchRecord),
    Timed(TimedRecord),
}

/// A timed line names every node up to this many reports (the default of
/// gangd's --switch-log-nodes).
pub const LISTED_NODES: usize = 256;

pub struct SwitchLog {
    file: Option<File>,
    /// A timed line names every node up to this many reports.
    listed: usize,
    last: Last,
    /// One line's bytes, reused.
    buf: Vec<u8>,
}

impl SwitchLog {
    /// Appends to `path` if given; else only keeps the last record. A
    /// timed line names every node while at most `listed` reported.
    pub fn open(path: Option<&Path>, listed: usize) -> Result<Self> {
        let file = match path {
            Some(p) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("opening the switch log {}", p.display()))?,
            ),
            None => None,
        };
        Ok(Self {
            file,
            listed,
            last: Last::None,
            buf: Vec::new(),
        })
    }

    pub fn write(&mut self, rec: SwitchRecord) {
        self.append(&CommandedLine(&rec));
        self.last = Last::Commanded(rec);
    }

    pub fn write_timed(&mut self, rec: TimedRecord) {
        self.append(&TimedLine(&rec, self.listed));
        self.last = Last::Timed(rec);
    }

    fn append(&mut self, line: &impl Serialize) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, line).expect("a record serialises");
        self.buf.push(b'\n');
        if let Err(e) = f.write_all(&self.buf) {
            warn!("writing the switch log: {e}");
        }
    }

    /// The last record's line ("" before the first switch).
    pub fn last(&self) -> String {
        match &self.last {
            Last::None => String::new(),
            Last::Commanded(r) => record_line(r),
            Last::Timed(r) => timed_line(r, self.listed),
        }
    }
}

/// One commanded switch as its switch-log line (no newline).
pub fn record_line(r: &SwitchRecord) -> String {
    serde_json::to_string(&CommandedLine(r)).expect("a record serialises")
}

/// One timed switch (a generation of a plan) as its switch-log line,
/// every node named while at most `listed` reported.
pub fn timed_line(r: &TimedRecord, listed: usize) -> String {
    serde_json::to_string(&TimedLine(r, listed)).expect("a record serialises")
}

/// A commanded switch's line.
struct CommandedLine<'a>(&'a SwitchRecord);

impl Serialize for CommandedLine<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(Some(14))?;
        m.serialize_entry("gen", &r.gen.0)?;
        m.serialize_entry("from_slot", &r.from_slot)?;
        m.serialize_entry("to_slot", &r.to_slot)?;
        m.serialize_entry("barrier", &r.barrier)?;
        m.serialize_entry("freeze_us", &r.freeze_us)?;
        m.serialize_entry("switch_us", &r.switch_us)?;
        m.serialize_entry("total_us", &r.total_us)?;
        m.serialize_entry("skew_us", &r.skew_us)?;
        m.serialize_entry("drain_timeouts", &r.drain_timeouts)?;
        m.serialize_entry("stale", &r.stale)?;
        m.serialize_entry("duplicates", &r.duplicates)?;
        m.serialize_entry("unexpected", &r.unexpected)?;
        m.serialize_entry("nodes", &ByNode::<_, CommandedNode>(&r.nodes, PhantomData))?;
        m.serialize_entry("failed", &Failed(&r.failed))?;
        m.end()
    }
}

/// A timed switch's line; every node named while at most `.1` reported.
struct TimedLine<'a>(&'a TimedRecord, usize);

impl Serialize for TimedLine<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (r, listed) = (self.0, self.1);
        let all = r.nodes.len() <= listed;
        let mut m = s.serialize_map(Some(if all { 11 } else { 12 }))?;
        m.serialize_entry("switching", "timed")?;
        m.serialize_entry("gen", &r.gen.0)?;
        m.serialize_entry("to_slot", &r.slot)?;
        m.serialize_entry("skew_us", &r.skew_ns().map(|k| k / 1000))?;
        m.serialize_entry("late_us", &r.late_us())?;
        m.serialize_entry("drain_timeouts", &r.count(SwitchOutcome::TimedOut))?;
        m.serialize_entry("reported", &r.nodes.len())?;
        m.serialize_entry("on_time", &r.count(SwitchOutcome::OnTime))?;
        if all {
            m.serialize_entry("nodes_listed", "all")?;
            m.serialize_entry("nodes", &ByNode::<_, TimedNode>(&r.nodes, PhantomData))?;
        } else {
            let not_on_time = || {
                r.nodes
                    .iter()
                    .filter(|(_, n)| n.outcome != SwitchOutcome::OnTime)
            };
            let shown = not_on_time()
                .take(listed)
                .map(|(n, v)| (n.0, TimedNode::from(v)));
            m.serialize_entry("nodes_listed", "not_on_time")?;
            m.serialize_entry(
                "nodes_left_out",
                &not_on_time().count().saturating_sub(listed),
            )?;
            m.serialize_entry("nodes", &Entries(RefCell::new(Some(shown))))?;
        }
        m.serialize_entry("failed", &Missing(&r.missing))?;
        m.end()
    }
}

/// A map of the entries an iterator yields (serialised once).
struct Entries<I>(RefCell<Option<I>>);

impl<K: Serialize, V: Serialize, I: Iterator<Item = (K, V)>> Serialize for Entries<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let it = self.0.borrow_mut().take().expect("serialised once");
        s.collect_map(it)
    }
}

/// The `nodes` object: node id (a string key in JSON) → that node's
/// entry, `E` its view.
struct ByNode<'a, V, E>(&'a BTreeMap<NodeId, V>, PhantomData<E>);

impl<'a, V, E: From<&'a V> + Serialize> Serialize for ByNode<'a, V, E> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(n, v)| (n.0, E::from(v))))
    }
}

#[derive(Serialize)]
struct CommandedNode<'a> {
    frozen: Option<&'a FreezeReport>,
    frozen_at_us: Option<u64>,
    running_at_us: Option<u64>,
    agent_switch_us: Option<u64>,
}

impl<'a> From<&'a NodeRecord> for CommandedNode<'a> {
    fn from(r: &'a NodeRecord) -> Self {
        Self {
            frozen: r.frozen.as_ref(),
            frozen_at_us: r.frozen_at_us,
            running_at_us: r.running_at_us,
            agent_switch_us: r.agent_switch_us,
        }
    }
}

#[derive(Serialize)]
struct TimedNode<'a> {
    at_ns: u64,
    late_us: u64,
    outcome: SwitchOutcome,
    drain: Option<&'a FreezeReport>,
    parked_us: u64,
    park_late_us: u64,
    lead_us: u64,
}

impl<'a> From<&'a SwitchReport> for TimedNode<'a> {
    fn from(n: &'a SwitchReport) -> Self {
        Self {
            at_ns: n.at_ns,
            late_us: n.late_us,
            outcome: n.outcome,
            drain: n.drain.as_ref(),
            parked_us: n.parked_us,
            park_late_us: n.park_late_us,
            lead_us: n.lead_us,
        }
    }
}

/// A commanded switch's `failed`: [{"node": id, "why": "lost in Freezing"}].
struct Failed<'a>(&'a [(NodeId, Failure)]);

impl Serialize for Failed<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut q = s.serialize_seq(Some(self.0.len()))?;
        for (n, f) in self.0 {
            let why = match f {
                Failure::Lost(p) => format!("lost in {p:?}"),
                Failure::Silent(p) => format!("silent in {p:?}"),
            };
            q.serialize_element(&NodeWhy {
                node: n.0,
                why: &why,
            })?;
        }
        q.end()
    }
}

/// A timed switch's `failed`: the nodes that sent no report.
struct Missing<'a>(&'a [NodeId]);

impl Serialize for Missing<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|n| NodeWhy {
            node: n.0,
            why: "no report",
        }))
    }
}

#[derive(Serialize)]
struct NodeWhy<'a> {
    node: u32,
    why: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::barrier::Phase;
    use gang_wire::proto::{Barrier, Gen};
    use serde_json::{json, Value};

    fn parse(line: &str) -> Value {
        serde_json::from_str(line).expect("a switch-log line is JSON")
    }

    /// A node's report of the record below (generation 7, slot 1).
    fn node(
        at_ns: u64,
        late_us: u64,
        outcome: SwitchOutcome,
        drain: Option<FreezeReport>,
    ) -> SwitchReport {
        SwitchReport {
            gen: Gen(7),
            slot: 1,
            at_ns,
            late_us,
            outcome,
            drain,
            parked_us: 1200,
            park_late_us: 150,
            lead_us: 2000,
        }
    }

    fn timed() -> TimedRecord {
        let drain = FreezeReport {
            drained_bytes: 4096,
            drain_us: 700,
            timed_out: false,
            answer_us: 900,
        };
        TimedRecord {
            gen: Gen(7),
            slot: 1,
            nodes: BTreeMap::from([
                (
                    NodeId(2),
                    node(5_000_000, 0, SwitchOutcome::OnTime, Some(drain)),
                ),
                (NodeId(10), node(5_300_000, 300, SwitchOutcome::Late, None)),
            ]),
            missing: vec![NodeId(3)],
        }
    }

    #[test]
    fn a_timed_line_names_every_node_its_skew_lateness_and_the_missing() {
        let v = parse(&timed_line(&timed(), LISTED_NODES));
        assert_eq!(v["switching"], "timed");
        assert_eq!(
            (v["reported"].clone(), v["on_time"].clone()),
            (json!(2), json!(1))
        );
        assert_eq!(v["nodes_listed"], "all");
        assert_eq!(v["gen"], 7);
        assert_eq!(v["to_slot"], 1);
        assert_eq!(v["skew_us"], 300, "max − min of the instants");
        assert_eq!(v["late_us"], 300);
        assert_eq!(v["drain_timeouts"], 0);
        assert_eq!(
            v["nodes"]["2"],
            json!({"at_ns": 5_000_000u64, "late_us": 0, "outcome": "on_time", "parked_us": 1200,
                   "park_late_us": 150, "lead_us": 2000,
                   "drain": {"drained_bytes": 4096, "drain_us": 700, "timed_out": false, "answer_us": 900}})
        );
        assert_eq!(v["nodes"]["10"]["outcome"], "late");
        assert_eq!(v["nodes"]["10"]["drain"], Value::Null);
        assert_eq!(v["failed"], json!([{"node": 3, "why": "no report"}]));
    }

    /// Past `listed` reports a line names the nodes that were not on time
    /// (at most `listed`, lowest ids first) and counts the rest; its skew
    /// and lateness are still over every node.
    #[test]
    fn a_line_of_many_nodes_names_those_not_on_time_and_counts_the_rest() {
        let mut rec = timed();
        for i in 20..30 {
            rec.nodes
                .insert(NodeId(i), node(5_100_000, 0, SwitchOutcome::OnTime, None));
        }
        rec.nodes
            .insert(NodeId(40), node(5_900_000, 900, SwitchOutcome::Late, None));
        rec.nodes.insert(
            NodeId(41),
            node(5_000_000, 0, SwitchOutcome::Commanded, None),
        );
        let v = parse(&timed_line(&rec, 14));
        assert_eq!(v["nodes_listed"], "all", "14 reports: every node");
        assert_eq!(v["nodes"].as_object().unwrap().len(), 14);
        let v = parse(&timed_line(&rec, 13));
        assert_eq!(v["nodes_listed"], "not_on_time");
        let named: Vec<&String> = v["nodes"].as_object().unwrap().keys().collect();
        assert_eq!(named, ["10", "40", "41"]);
        assert_eq!(v["nodes"]["40"]["late_us"], 900);
        assert_eq!(v["nodes_left_out"], 0);
        assert_eq!(
            (v["reported"].clone(), v["on_time"].clone()),
            (json!(14), json!(11))
        );
        assert_eq!(v["skew_us"], 900, "over every report");
        assert_eq!(v["late_us"], 900);
        assert_eq!(v["failed"], json!([{"node": 3, "why": "no report"}]));
        let v = parse(&timed_line(&rec, 2));
        let named: Vec<&String> = v["nodes"].as_object().unwrap().keys().collect();
        assert_eq!(named, ["10", "40"], "at most `listed`, lowest ids first");
        assert_eq!(v["nodes_left_out"], 1);
    }

    #[test]
    fn a_commanded_line_keeps_its_phases_nodes_and_failures() {
        let rec = SwitchRecord {
            gen: Gen(3),
            from_slot: 0,
            to_slot: 1,
            barrier: Barrier::Strict,
            freeze_us: Some(9000),
            switch_us: Some(4000),
            total_us: 13000,
            skew_us: Some(250),
            drain_timeouts: 1,
            nodes: BTreeMap::from([(
                NodeId(1),
                NodeRecord {
                    frozen: Some(FreezeReport::default()),
                    frozen_at_us: Some(8000),
                    running_at_us: Some(12000),
                    agent_switch_us: Some(30),
                },
            )]),
            failed: vec![(NodeId(4), Failure::Silent(Phase::Freezing))],
            stale: 2,
            duplicates: 0,
            unexpected: 1,
        };
        let v = parse(&record_line(&rec));
        assert_eq!(v["barrier"], "strict");
        assert_eq!(
            (v["freeze_us"].clone(), v["total_us"].clone()),
            (json!(9000), json!(13000))
        );
        assert_eq!(
            (v["stale"].clone(), v["unexpected"].clone()),
            (json!(2), json!(1))
        );
        assert_eq!(v["nodes"]["1"]["running_at_us"], 12000);
        assert_eq!(v["nodes"]["1"]["frozen"]["timed_out"], false);
        assert_eq!(
            v["failed"],
            json!([{"node": 4, "why": "silent in Freezing"}])
        );
    }

    #[test]
    fn the_file_gets_one_line_per_switch_and_last_is_the_latest() {
        let path = std::env::temp_dir().join(format!("switch-log-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut log = SwitchLog::open(Some(&path), LISTED_NODES).unwrap();
        assert_eq!(log.last(), "", "nothing before the first switch");
        let mut rec = timed();
        log.write_timed(rec.clone());
        rec.gen = Gen(8);
        log.write_timed(rec.clone());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text.lines().map(parse).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (lines[0]["gen"].clone(), lines[1]["gen"].clone()),
            (json!(7), json!(8))
        );
        assert_eq!(log.last(), timed_line(&rec, LISTED_NODES));
        assert!(text.ends_with('\n'));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn without_a_file_only_the_last_record_is_kept() {
        let mut log = SwitchLog::open(None, LISTED_NODES).unwrap();
        log.write_timed(timed());
        assert_eq!(parse(&log.last())["gen"], 7);
    }
}
