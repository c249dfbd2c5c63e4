//! The cluster's slot clock: every slot_ms, one [`SlotSwitch`] moves every
//! node to the next slot of the rotation; its record goes to the switch
//! log and the statistics. A slot ends early when every job running in it
//! has yielded it on every one of its nodes (voluntary yield): waiting out
//! the deadline would only leave their CPUs idle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use log::{debug, warn};
use serde_json::json;

use crate::barrier::{Failure, Outbox, SlotSwitch, SwitchRecord, SwitchSpec};
use gang_wire::proto::{Barrier, FromAgent, Gen, JobId, NodeId};

use super::knobs::ClusterKnobs;
use super::nodes::Node;

/// A node silent this long in one phase is left out of the switch (the
/// freeze phase adds drain_timeout_ms). It is not declared lost for that:
/// a slow node catches up at the next switch (or, when the slot in force is
/// alone in the rotation and no next switch would come, at a catch-up
/// switch of its own at the end of the slot), and only the heartbeat
/// timeout (or a closed connection) fails a node and its jobs.
const PHASE_TIMEOUT_US: u64 = 2_000_000;

pub struct Rotation {
    /// The slot the cluster runs; None before the first switch.
    current: Option<u32>,
    /// When the current slot started (its switch completed), µs.
    slot_start_us: u64,
    switch: Option<SlotSwitch>,
    next_gen: u64,
    /// The node tables must be sent again before the next switch.
    pub schedule_dirty: bool,
    /// Switch at once, even to the same slot: tables changed, and every
    /// node must be told which slot of its new table runs.
    pub force: bool,
    log: Option<File>,
    pub switches: u64,
    pub drain_timeouts: u64,
    /// Nodes left out of a switch for not answering in time.
    pub missed: u64,
    pub last_record: String,
    published: bool,
    /// The generation in force (the last switch's).
    current_gen: Option<Gen>,
    /// (job, node) pairs that yielded the slot in force.
    yielded: BTreeSet<(JobId, NodeId)>,
    /// Switches that came before the deadline: every job had yielded.
    pub early_switches: u64,
    /// Nodes left out of the switch into the slot in force: they still run
    /// another slot (or, before their first switch, nothing).
    behind: BTreeSet<NodeId>,
}

impl Rotation {
    pub fn new(log: Option<PathBuf>) -> Result<Self> {
        let log = match log {
            Some(p) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                    .with_context(|| format!("opening the switch log {}", p.display()))?,
            ),
            None => None,
        };
        Ok(Self {
            current: None,
            slot_start_us: 0,
            switch: None,
            next_gen: 1,
            schedule_dirty: false,
            force: false,
            log,
            switches: 0,
            drain_timeouts: 0,
            missed: 0,
            last_record: String::new(),
            published: false,
            current_gen: None,
            yielded: BTreeSet::new(),
            early_switches: 0,
            behind: BTreeSet::new(),
        })
    }

    pub fn in_switch(&self) -> bool {
        self.switch.is_some()
    }

    /// µs until something is due.
    pub fn next_wakeup(&self, slot_ms: u32, now_us: u64) -> u64 {
        let due = match &self.switch {
            Some(sw) => sw.deadline_us().unwrap_or(now_us),
            None => self.slot_start_us + u64::from(slot_ms) * 1000,
        };
        // At least 1 ms: a due time that cannot be acted on must not spin.
        due.saturating_sub(now_us).max(1000)
    }

    fn send(out: Outbox, nodes: &BTreeMap<NodeId, Node>) {
        for (n, msg) in out {
            if let Some(node) = nodes.get(&n) {
                node.outlet.send(&msg);
            }
        }
    }

    /// A node says every rank of `job` there yielded in `gen`.
    pub fn on_yielded(&mut self, gen: Gen, job: JobId, node: NodeId) {
        if self.current_gen == Some(gen) && self.switch.is_none() {
            self.yielded.insert((job, node));
        } else {
            debug!("yield of job {job} on node {node} for gen {gen}: not the slot in force");
        }
    }

    /// The slot in force, if any.
    pub fn current(&self) -> Option<u32> {
        self.current
    }

    /// Starts the next switch if one is due: the slot is over (or every
    /// one of `running` — the (job, node) pairs of the slot in force — has
    /// yielded it), the current slot left the rotation, or the tables
    /// changed.
    pub fn maybe_switch(
        &mut self,
        rotation: &[u32],
        // Who takes part: every node, except in a catch-up switch.
        mut nodes: Vec<NodeId>,
        running: &BTreeSet<(JobId, NodeId)>,
        knobs: &ClusterKnobs,
        now_us: u64,
        all: &BTreeMap<NodeId, Node>,
    ) {
        if self.switch.is_some() {
            return;
        }
        let deadline = now_us >= self.slot_start_us + u64::from(knobs.slot_ms) * 1000;
        let all_yielded = !running.is_empty() && running.is_subset(&self.yielded);
        let slot_over = deadline || all_yielded;
        if rotation.is_empty() || nodes.is_empty() {
            // Nothing to switch: the next look is a slot from now, not a
            // busy loop.
            if slot_over {
                self.slot_start_us = now_us;
            }
            return;
        }
        let to = match self.current {
            Some(c) if rotation.contains(&c) => {
                let next =
                    rotation[(rotation.iter().position(|&s| s == c).unwrap() + 1) % rotation.len()];
                if self.force {
                    if slot_over {
                        next
                    } else {
                        c
                    }
                } else if slot_over && next != c {
                    next
                } else if slot_over && nodes.iter().any(|n| self.behind.contains(n)) {
                    // Alone in the rotation, but some nodes missed the switch
                    // into it: with no next switch to catch up at, they
                    // would never run it. Only they take part.
                    nodes.retain(|n| self.behind.contains(n));
                    c
                } else {
                    if slot_over {
                        // Alone in the rotation: the slot simply goes on.
                        self.slot_start_us = now_us;
                    }
                    return;
                }
            }
            _ => rotation[0],
        };
        self.force = false;
        if all_yielded && !deadline {
            self.early_switches += 1;
        }
        let gen = Gen(self.next_gen);
        self.next_gen += 1;
        let spec = SwitchSpec {
            gen,
            // Before the first switch nothing runs: freeze "slot" to itself.
            from_slot: self.current.unwrap_or(to),
            to_slot: to,
            nodes,
            barrier: knobs.barrier,
            drain_timeout_ms: knobs.drain_timeout_ms,
            phase_timeout_us: PHASE_TIMEOUT_US,
            slot_ms: knobs.slot_ms,
        };
        self.yielded.clear();
        let (sw, out) = SlotSwitch::start(spec, now_us);
        Self::send(out, all);
        self.switch = Some(sw);
        self.finish_if_done(now_us);
    }

    /// Feeds a Frozen or Running.
    pub fn on_agent(
        &mut self,
        node: NodeId,
        msg: &FromAgent,
        now_us: u64,
        all: &BTreeMap<NodeId, Node>,
    ) {
        let Some(sw) = self.switch.as_mut() else {
            debug!("answer outside a switch from node {node}: {msg:?}");
            return;
        };
        let out = sw.on_agent(node, msg, now_us);
        Self::send(out, all);
        self.finish_if_done(now_us);
    }

    pub fn tick(&mut self, now_us: u64, all: &BTreeMap<NodeId, Node>) {
        let Some(sw) = self.switch.as_mut() else {
            return;
        };
        let out = sw.on_tick(now_us);
        Self::send(out, all);
        self.finish_if_done(now_us);
    }

    pub fn node_lost(&mut self, node: NodeId, now_us: u64) {
        if let Some(sw) = self.switch.as_mut() {
            // Nothing to send to the others: a loss only closes a phase.
            let _ = sw.on_node_lost(node, now_us);
        }
        self.finish_if_done(now_us);
    }

    /// True once after the statistics changed.
    pub fn take_published(&mut self) -> bool {
        std::mem::take(&mut self.published)
    }

    fn finish_if_done(&mut self, now_us: u64) {
        let Some(rec) = self
            .switch
            .as_ref()
            .filter(|s| s.is_done())
            .and_then(|s| s.record().cloned())
        else {
            return;
        };
        self.switch = None;
        let caught_up = self.current == Some(rec.to_slot);
        if !caught_up {
            self.behind.clear();
        }
        for n in rec.switched() {
            self.behind.remove(&n);
        }
        self.behind.extend(rec.failed.iter().map(|(n, _)| *n));
        self.current = Some(rec.to_slot);
        self.current_gen = Some(rec.gen);
        self.slot_start_us = now_us;
        self.switches += 1;
        self.drain_timeouts += u64::from(rec.drain_timeouts);
        let line = record_json(&rec).to_string();
        if let Some(f) = self.log.as_mut() {
            if let Err(e) = writeln!(f, "{line}") {
                warn!("writing the switch log: {e}");
            }
        }
        if rec.drain_timeouts > 0 {
            warn!(
                "switch {}: {} node(s) hit the drain timeout",
                rec.gen, rec.drain_timeouts
            );
        }
        for (n, f) in &rec.failed {
            if let Failure::Silent(phase) = f {
                self.missed += 1;
                warn!(
                    "switch {}: node {n} silent in {phase:?}, left out of this switch",
                    rec.gen
                );
            }
        }
        self.last_record = line;
        self.published = true;
    }
}

/// One switch as a JSON object (the switch log's line).
pub fn record_json(r: &SwitchRecord) -> serde_json::Value {
    let nodes: serde_json::Map<String, serde_json::Value> = r
        .nodes
        .iter()
        .map(|(n, rec)| {
            let frozen = rec.frozen.map(|f| {
                json!({"drained_bytes": f.drained_bytes, "drain_us": f.drain_us, "timed_out": f.timed_out, "freeze_us": f.freeze_us})
            });
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
