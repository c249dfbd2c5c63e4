//! gangd driving the slot switch (crate::switch, whose top comment walks
//! one switch through every hop): once per pass of the event loop, the
//! rotation gets the time, the knobs and a [`Boundary`], a read-only view
//! of the allocator, the jobs and the nodes; what it queues goes out on the
//! nodes' links, and the switches it finished go to the switch log and the
//! status files. Under `switching = timed` the rotation plans instead
//! (switch/timed.rs); the view gives it each node's link timing: the
//! heartbeat's shortest RTT and the clock as the node last reported it
//! (ClockStatus: its state and error bound). A node that has not reported
//! yet counts as unsynchronised, so it is switched by command until it
//! says its clock is good. The planner reads the timing of every node
//! again when a node joins or is lost or a clock changes state (the view's
//! `links_epoch`), and once a second for RTTs and error bounds; never at
//! every pass (at 4096 nodes that pass was most of gangd's idle CPU).
//!
//! Only started jobs (every rank spawned) count: a slot whose jobs are all
//! still preparing is not rotated to, and tables name started jobs only.
//!
//! Known faults: the view is rebuilt at every call, costing a pass over the
//! allocator's jobs and the matrix's slots each time (`slots`: O(jobs ×
//! slots), not O(cells): a view of every job per slot was most of gangd's
//! CPU at 4096 nodes).

use std::collections::{BTreeMap, BTreeSet};

use crate::alloc::Allocator;
use crate::switch::planner::LinkTiming;
use crate::switch::rotation::{ClusterView, Table};
use crate::switch::timed::DEFAULT_CLOCK_ERROR_NS;
use gang_wire::proto::{ClockState, JobId, NodeId, Placement};

use super::jobs::{Job, Phase};
use super::nodes::Node;
use super::Coordinator;

/// What the rotation sees of gangd at a slot boundary.
pub struct Boundary<'a> {
    alloc: &'a Allocator,
    nodes: &'a BTreeMap<NodeId, Node>,
    /// The jobs whose ranks are all spawned.
    started: BTreeSet<JobId>,
    /// The coordinator's count of joins, losses and clock state changes.
    links_epoch: u64,
}

impl<'a> Boundary<'a> {
    pub fn new(
        alloc: &'a Allocator,
        nodes: &'a BTreeMap<NodeId, Node>,
        jobs: &BTreeMap<JobId, Job>,
        links_epoch: u64,
    ) -> Self {
        let started = jobs
            .iter()
            .filter(|(_, j)| j.phase == Phase::Started)
            .map(|(&k, _)| k)
            .collect();
        Self {
            alloc,
            nodes,
            started,
            links_epoch,
        }
    }
}

impl ClusterView for Boundary<'_> {
    fn nodes(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Each live node's column of the matrix: only started jobs, named by
    /// id.
    fn tables(&self) -> Vec<(NodeId, Table)> {
        self.alloc
            .node_tables(|job| self.started.contains(&job))
            .into_iter()
            .filter(|(node, _)| self.nodes.contains_key(&NodeId(*node)))
            .map(|(node, slots)| {
                let slots = slots
                    .into_iter()
                    .map(|row| {
                        row.into_iter()
                            .map(|(job, cpus)| Placement { job, cpus })
                            .collect()
                    })
                    .collect();
                (NodeId(node), slots)
            })
            .collect()
    }

    fn slots(&self) -> Vec<u32> {
        let held = self.alloc.slots_by_job();
        self.alloc
            .rotation()
            .into_iter()
            .filter(|s| {
                held.iter()
                    .any(|(id, slots)| slots.contains(s) && self.started.contains(id))
            })
            .map(|s| s as u32)
            .collect()
    }

    fn running(&self, slot: u32) -> BTreeSet<(JobId, NodeId)> {
        self.alloc
            .jobs()
            .iter()
            .filter(|v| v.slots.contains(&(slot as usize)) && self.started.contains(&v.id))
            .flat_map(|v| {
                self.alloc
                    .nodes_of(v.id)
                    .into_iter()
                    .map(move |n| (v.id, NodeId(n)))
            })
            .collect()
    }

    fn links_epoch(&self) -> u64 {
        self.links_epoch
    }

    fn link(&self, node: NodeId) -> LinkTiming {
        let n = self.nodes.get(&node);
        let rtt_us = n.and_then(Node::min_rtt_us);
        let clock = n.and_then(|n| n.clock);
        LinkTiming {
            rtt_ns: rtt_us.unwrap_or(0).saturating_mul(1000),
            clock_error_ns: clock.map_or(DEFAULT_CLOCK_ERROR_NS, |c| c.error_bound_ns),
            synchronised: clock.is_some_and(|c| c.state == ClockState::Good),
        }
    }
}

impl Coordinator {
    /// One pass of the slot clock: see crate::switch, steps 2 to 4 and 8.
    pub(super) fn drive_switch(&mut self) {
        let now = self.now_us();
        let view = Boundary::new(&self.alloc, &self.nodes, &self.jobs, self.links_epoch);
        let out = self.rotation.tick(now, &self.knobs, &view);
        self.send_to_nodes(out);
        let finished = self.rotation.take_finished();
        let timed = self.rotation.take_timed();
        let any = !finished.is_empty() || !timed.is_empty();
        for rec in finished {
            self.switch_log.write(rec);
        }
        for rec in timed {
            self.switch_log.write_timed(rec);
        }
        if any {
            self.publish_status();
        }
    }
}
