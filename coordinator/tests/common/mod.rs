//! The fakes of the rotation's tests (rotation.rs, timed.rs): a cluster
//! as the rotation sees it (jobs placed in slots on nodes), the agents'
//! answers to a commanded switch, and outboxes shown as short lines.

#![allow(dead_code)] // each test crate uses its part

use std::collections::{BTreeMap, BTreeSet};

use gang_coordinator::knobs::ClusterKnobs;
use gang_coordinator::switch::barrier::Outbox;
use gang_coordinator::switch::planner::LinkTiming;
use gang_coordinator::switch::rotation::{ClusterView, Rotation, Table};
use gang_wire::proto::{FreezeReport, FromAgent, Gen, JobId, NodeId, Placement, ToAgent};

/// 100 ms slots, strict barrier, 200 ms drain timeout.
pub fn knobs() -> ClusterKnobs {
    ClusterKnobs::default()
}
pub const SLOT_US: u64 = 100_000;

/// The cluster as the rotation sees it: jobs placed in slots on nodes.
#[derive(Default)]
pub struct Cluster {
    pub nodes: Vec<NodeId>,
    /// (job, slot, its nodes)
    pub jobs: Vec<(JobId, u32, Vec<NodeId>)>,
    /// Nodes whose link timing is not the default (no RTT, a good clock
    /// within 1 ms).
    pub links: BTreeMap<NodeId, LinkTiming>,
    /// Empty slots after the last job's in every table: the matrix's rows
    /// of jobs placed but not started, which gangd's tables hold too.
    pub unstarted_rows: u32,
}

impl Cluster {
    pub fn new(nodes: u32, jobs: &[(u64, u32, &[u32])]) -> Self {
        Cluster {
            nodes: (0..nodes).map(NodeId).collect(),
            jobs: jobs
                .iter()
                .map(|&(j, s, ns)| (JobId(j), s, ns.iter().map(|&n| NodeId(n)).collect()))
                .collect(),
            links: BTreeMap::new(),
            unstarted_rows: 0,
        }
    }
}

impl ClusterView for Cluster {
    fn nodes(&self) -> Vec<NodeId> {
        self.nodes.clone()
    }

    /// Moves with any change of the nodes or their links (the tests edit
    /// both between ticks and expect the planner to see it at once).
    fn links_epoch(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.nodes.iter().for_each(|n| n.0.hash(&mut h));
        for (n, l) in &self.links {
            (n.0, l.rtt_ns, l.clock_error_ns, l.synchronised).hash(&mut h);
        }
        h.finish()
    }

    fn tables(&self) -> Vec<(NodeId, Table)> {
        let rows = self.jobs.iter().map(|j| j.1 + 1).max().unwrap_or(0) + self.unstarted_rows;
        self.nodes
            .iter()
            .map(|&n| {
                let table = (0..rows)
                    .map(|s| {
                        self.jobs
                            .iter()
                            .filter(|(_, slot, ns)| *slot == s && ns.contains(&n))
                            .map(|(job, _, _)| Placement {
                                job: *job,
                                cpus: "0".into(),
                            })
                            .collect()
                    })
                    .collect();
                (n, table)
            })
            .collect()
    }

    fn slots(&self) -> Vec<u32> {
        let s: BTreeSet<u32> = self.jobs.iter().map(|j| j.1).collect();
        s.into_iter().collect()
    }

    fn running(&self, slot: u32) -> BTreeSet<(JobId, NodeId)> {
        self.jobs
            .iter()
            .filter(|j| j.1 == slot)
            .flat_map(|(job, _, ns)| ns.iter().map(move |&n| (*job, n)))
            .collect()
    }

    fn link(&self, node: NodeId) -> LinkTiming {
        self.links.get(&node).copied().unwrap_or(LinkTiming {
            rtt_ns: 0,
            clock_error_ns: 1_000_000,
            synchronised: true,
        })
    }
}

/// An outbox as short lines: "node message".
pub fn show(out: &Outbox) -> Vec<String> {
    out.iter()
        .map(|(n, m)| {
            let what = match m {
                ToAgent::Freeze {
                    gen,
                    from_slot,
                    to_slot,
                    ..
                } => format!("Freeze g{} {from_slot}->{to_slot}", gen.0),
                ToAgent::Switch { gen, slot, .. } => format!("Switch g{} {slot}", gen.0),
                ToAgent::Schedule { slots } => format!("Schedule {} slots", slots.len()),
                ToAgent::Knobs { .. } => "Knobs".to_string(),
                ToAgent::Plan { plan, effective_ns } => {
                    let slots: Vec<u32> = plan.slots.iter().map(|s| s.slot).collect();
                    format!(
                        "Plan {} {slots:?} g{} at {}ms from {}ms",
                        plan.id,
                        plan.first_gen.0,
                        plan.epoch_ns / 1_000_000,
                        effective_ns / 1_000_000
                    )
                }
                ToAgent::Amend { amend } => format!(
                    "Amend {} g{} ends {}ms",
                    amend.plan_id,
                    amend.gen.0,
                    amend.ends_at_ns / 1_000_000
                ),
                m => format!("{m:?}"),
            };
            format!("{} {what}", n.0)
        })
        .collect()
}

pub fn frozen(gen: u64, slot: u32) -> FromAgent {
    FromAgent::Frozen {
        gen: Gen(gen),
        slot,
        report: FreezeReport {
            drained_bytes: 0,
            drain_us: 10,
            timed_out: false,
            answer_us: 20,
        },
    }
}

pub fn running(gen: u64, slot: u32) -> FromAgent {
    FromAgent::Running {
        gen: Gen(gen),
        slot,
        switch_us: 5,
    }
}

/// Every node of `out` answers at `now`: Frozen to Freeze, Running to
/// Switch, until the switch is done. Returns what was sent on the way.
pub fn answer_all(r: &mut Rotation, out: Outbox, now: u64) -> Vec<String> {
    let mut sent = vec![];
    let mut queue = out;
    while !queue.is_empty() {
        let mut next = Outbox::new();
        for (n, m) in queue {
            let reply = match m {
                ToAgent::Freeze { gen, from_slot, .. } => frozen(gen.0, from_slot),
                ToAgent::Switch { gen, slot, .. } => running(gen.0, slot),
                _ => continue,
            };
            let out = r.on_agent(n, &reply, now);
            sent.extend(show(&out));
            next.extend(out);
        }
        queue = next;
    }
    sent
}

/// A rotation that has just switched the whole cluster into slot 0 at t=0.
pub fn started(cluster: &Cluster) -> Rotation {
    let mut r = Rotation::new();
    r.matrix_changed();
    let out = r.tick(0, &knobs(), cluster);
    answer_all(&mut r, out, 0);
    assert_eq!(r.current(), Some(0));
    r.take_finished();
    r
}
