//! The switch log: one JSON line per finished cluster switch, appended to
//! the file given with gangd's --switch-log, and the last line kept for the
//! `last_switch` status file. A commanded switch (barrier.rs) and a timed
//! one (timed.rs, `"switching": "timed"`) share the names `gen`,
//! `to_slot`, `skew_us`, `nodes` and `failed`; a timed line has no
//! barrier phases, and its skew is the spread of the nodes' own switch
//! instants (cluster clock) instead of the spread of their answers at
//! gangd.
//!
//! Known faults: a write error is logged and the line lost; the file is
//! never rotated.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use log::warn;
use serde_json::json;

use super::barrier::{Failure, SwitchRecord};
use super::timed::TimedRecord;
use gang_wire::proto::{Barrier, FreezeReport, SwitchOutcome};

#[derive(Default)]
pub struct SwitchLog {
    file: Option<File>,
    /// The last record's line ("" before the first switch).
    last: String,
}

impl SwitchLog {
    /// Appends to `path` if given; else only keeps the last line.
    pub fn open(path: Option<&Path>) -> Result<Self> {
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
            last: String::new(),
        })
    }

    pub fn write(&mut self, rec: &SwitchRecord) {
        self.write_line(record_json(rec).to_string());
    }

    pub fn write_timed(&mut self, rec: &TimedRecord) {
        self.write_line(timed_json(rec).to_string());
    }

    fn write_line(&mut self, line: String) {
        if let Some(f) = self.file.as_mut() {
            if let Err(e) = writeln!(f, "{line}") {
                warn!("writing the switch log: {e}");
            }
        }
        self.last = line;
    }

    pub fn last(&self) -> &str {
        &self.last
    }
}

/// One switch as a JSON object (the switch log's line).
pub fn record_json(r: &SwitchRecord) -> serde_json::Value {
    let nodes: serde_json::Map<String, serde_json::Value> = r
        .nodes
        .iter()
        .map(|(n, rec)| {
            let frozen = rec.frozen.as_ref().map(freeze_json);
            (
                n.0.to_string(),
                json!({
                    "frozen": frozen,
                    "frozen_at_us": rec.frozen_at_us,
                    "running_at_us": rec.running_at_us,
                    "agent_switch_us": rec.agent_switch_us,
                }),
            )
        })
        .collect();
    let failed: Vec<serde_json::Value> = r
        .failed
        .iter()
        .map(|(n, f)| {
            let why = match f {
                Failure::Lost(p) => format!("lost in {p:?}"),
                Failure::Silent(p) => format!("silent in {p:?}"),
            };
            json!({"node": n.0, "why": why})
        })
        .collect();
    json!({
        "gen": r.gen.0,
        "from_slot": r.from_slot,
        "to_slot": r.to_slot,
        "barrier": match r.barrier { Barrier::Strict => "strict", Barrier::Off => "off" },
        "freeze_us": r.freeze_us,
        "switch_us": r.switch_us,
        "total_us": r.total_us,
        "skew_us": r.skew_us,
        "drain_timeouts": r.drain_timeouts,
        "stale": r.stale,
        "duplicates": r.duplicates,
        "unexpected": r.unexpected,
        "nodes": nodes,
        "failed": failed,
    })
}

fn freeze_json(f: &FreezeReport) -> serde_json::Value {
    json!({"drained_bytes": f.drained_bytes, "drain_us": f.drain_us, "timed_out": f.timed_out, "answer_us": f.answer_us})
}

/// One timed switch (a generation of a plan) as a JSON object.
pub fn timed_json(r: &TimedRecord) -> serde_json::Value {
    let nodes: serde_json::Map<String, serde_json::Value> = r
        .nodes
        .iter()
        .map(|(n, s)| {
            let outcome = match s.outcome {
                SwitchOutcome::OnTime => "on_time",
                SwitchOutcome::Late => "late",
                SwitchOutcome::TimedOut => "timed_out",
                SwitchOutcome::Commanded => "commanded",
            };
            (
                n.0.to_string(),
                json!({
                    "at_ns": s.at_ns,
                    "late_us": s.late_us,
                    "outcome": outcome,
                    "drain": s.drain.as_ref().map(freeze_json),
                    "parked_us": s.parked_us,
                }),
            )
        })
        .collect();
    let failed: Vec<serde_json::Value> = r
        .missing
        .iter()
        .map(|n| json!({"node": n.0, "why": "no report"}))
        .collect();
    json!({
        "switching": "timed",
        "gen": r.gen.0,
        "to_slot": r.slot,
        "skew_us": r.skew_ns().map(|k| k / 1000),
        "late_us": r.late_us(),
        "drain_timeouts": r.count(SwitchOutcome::TimedOut),
        "nodes": nodes,
        "failed": failed,
    })
}
