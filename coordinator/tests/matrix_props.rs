//! Property tests of the allocator: random clusters and random histories of
//! submit / finish / suspend / resume, run under every policy with fill on
//! and off, checked after every step.

use std::collections::{BTreeMap, BTreeSet};

use gang_coordinator::alloc::{
    AllocError, Allocator, JobSpec, JobState, JobView, Policy, Settings,
};
use gang_coordinator::matrix::{Cell, Cluster, NodeSpec};
use gang_wire::proto::JobId;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Submit { ranks: u32, per_node: Option<u32> },
    Finish(usize),
    Suspend(usize),
    Resume(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..=12, proptest::option::weighted(0.3, 1u32..=4)).prop_map(|(ranks, per_node)| Op::Submit { ranks, per_node }),
        3 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Suspend),
        1 => any::<usize>().prop_map(Op::Resume),
    ]
}

/// 1 to 4 nodes of 1 to 6 CPUs, some of them housekeeping.
fn cluster_shape() -> impl Strategy<Value = Vec<NodeSpec>> {
    proptest::collection::vec(
        (
            1u32..=6,
            proptest::collection::vec(proptest::bool::weighted(0.15), 6),
        ),
        1..=4,
    )
    .prop_map(|nodes| {
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, (nr_cpus, hk))| NodeSpec {
                id: 10 * i as u32 + 3,
                name: format!("n{i}"),
                nr_cpus,
                housekeeping: (0..nr_cpus).filter(|&c| hk[c as usize]).collect(),
            })
            .collect()
    })
}

fn column(a: &Allocator, c: Cell) -> usize {
    a.cluster().column(c).expect("a cell of the cluster")
}

/// Every invariant that must hold between operations.
fn check_state(a: &Allocator) -> Result<(), TestCaseError> {
    let s = a.settings();
    let m = a.matrix();
    let scs = s.policy == Policy::Scs;
    let views: BTreeMap<JobId, JobView> = a.jobs().into_iter().map(|v| (v.id, v)).collect();

    prop_assert!(
        a.nr_slots() <= s.mpl_max,
        "{} slots > mpl_max {}",
        a.nr_slots(),
        s.mpl_max
    );
    if scs {
        prop_assert!(a.nr_slots() <= 1);
    }

    // The views and the matrix agree, and no cell is booked twice in a slot.
    let mut booked: BTreeMap<(usize, usize), JobId> = BTreeMap::new();
    for v in views.values() {
        if v.state == JobState::Queued {
            prop_assert!(
                v.slot.is_none()
                    && v.slots.is_empty()
                    && v.cells.is_empty()
                    && v.rank_cells.is_empty()
            );
            continue;
        }
        let home = v.slot.unwrap();
        prop_assert!(v.slots.contains(&home));
        if v.state == JobState::Suspended || !s.fill || scs {
            prop_assert_eq!(
                &v.slots,
                &vec![home],
                "only running jobs get fill placements, and only with fill"
            );
        }
        for &slot in &v.slots {
            for &c in &v.cells {
                let col = column(a, c);
                prop_assert!(
                    booked.insert((slot, col), v.id).is_none(),
                    "cell {:?} of slot {} booked twice",
                    c,
                    slot
                );
                let e = m.get(slot, col).expect("the matrix holds the job's cells");
                prop_assert_eq!(e.job, v.id);
                prop_assert_eq!(e.fill, slot != home);
            }
        }
    }
    let entries = m.rows().iter().flatten().flatten().count();
    prop_assert_eq!(entries, booked.len(), "the matrix holds cells of no job");

    // No slot without a home placement.
    for (slot, row) in m.rows().iter().enumerate() {
        prop_assert!(
            row.iter().flatten().any(|e| !e.fill),
            "slot {} is empty",
            slot
        );
    }

    // The queue: FCFS order, positions, and nobody waits while a slot could
    // still be added (or, under scs, while jobs hold more than their start).
    let queue = a.queue();
    prop_assert!(
        queue.windows(2).all(|w| w[0] < w[1]),
        "queue out of submission order: {:?}",
        queue
    );
    for (i, id) in queue.iter().enumerate() {
        prop_assert_eq!(views[id].queue_position, Some(i));
        prop_assert_eq!(views[id].state, JobState::Queued);
    }
    prop_assert_eq!(
        views
            .values()
            .filter(|v| v.state == JobState::Queued)
            .count(),
        queue.len()
    );
    if !queue.is_empty() && !scs {
        prop_assert_eq!(
            a.nr_slots(),
            s.mpl_max,
            "a job waits though a slot could be added"
        );
    }

    // Cells and ranks per policy.
    for v in views.values().filter(|v| v.state != JobState::Queued) {
        let ranks = v.ranks as usize;
        prop_assert_eq!(v.rank_cells.len(), ranks);
        prop_assert!(v.rank_cells.iter().all(|c| v.cells.contains(c)));
        prop_assert!(
            v.cells.windows(2).all(|w| w[0] < w[1]),
            "cells in (node, cpu) order"
        );
        if let Some(k) = v.per_node {
            let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
            for c in &v.rank_cells {
                *per_node.entry(c.node).or_default() += 1;
            }
            prop_assert!(
                per_node.values().all(|&n| n <= k),
                "more than {} ranks on a node: {:?}",
                k,
                per_node
            );
        }
        match s.policy {
            Policy::FirstFit | Policy::BestFit => {
                prop_assert_eq!(&v.rank_cells, &v.cells, "one rank per cell, in order");
            }
            Policy::Buddy => {
                let block = ranks.next_power_of_two();
                let cols: Vec<usize> = v.cells.iter().map(|&c| column(a, c)).collect();
                prop_assert_eq!(cols.len(), block);
                prop_assert_eq!(cols[0] % block, 0, "block not aligned: {:?}", cols);
                prop_assert!(
                    cols.windows(2).all(|w| w[1] == w[0] + 1),
                    "block not contiguous: {:?}",
                    cols
                );
                prop_assert_eq!(&v.rank_cells[..], &v.cells[..ranks]);
            }
            Policy::Scs => {
                prop_assert!(
                    v.initial.iter().all(|c| v.cells.contains(c)),
                    "scs below its initial allocation"
                );
                prop_assert!(
                    v.cells.len() <= ranks,
                    "scs: {} cells for {} ranks",
                    v.cells.len(),
                    ranks
                );
                prop_assert!(
                    v.initial.len() >= ranks.div_ceil(s.mpl_max),
                    "initial allocation below ranks / mpl_max"
                );
                let mut per_cell: BTreeMap<Cell, usize> = BTreeMap::new();
                for c in &v.rank_cells {
                    *per_cell.entry(*c).or_default() += 1;
                }
                prop_assert!(
                    per_cell.values().all(|&n| n <= s.mpl_max),
                    "more than mpl_max ranks on a cell"
                );
                prop_assert_eq!(per_cell.len(), v.cells.len(), "a cell without ranks");
                if v.state == JobState::Suspended || !queue.is_empty() {
                    prop_assert_eq!(&v.cells, &v.initial, "not shrunk back");
                }
            }
        }
        if s.policy != Policy::Scs {
            prop_assert_eq!(&v.initial, &v.cells);
        }
    }

    // Fill is as full as it can be: no running job has its exact cells free
    // in a slot it is not in.
    if s.fill && !scs {
        for v in views.values().filter(|v| v.state == JobState::Running) {
            for slot in (0..a.nr_slots()).filter(|s| !v.slots.contains(s)) {
                let all_free = v.cells.iter().all(|&c| m.get(slot, column(a, c)).is_none());
                prop_assert!(!all_free, "job {} could also run in slot {}", v.id, slot);
            }
        }
    }

    // The rotation: the slots with a running job.
    let rotation: Vec<usize> = (0..a.nr_slots())
        .filter(|slot| {
            views
                .values()
                .any(|v| v.state == JobState::Running && v.slots.contains(slot))
        })
        .collect();
    prop_assert_eq!(a.rotation(), rotation);

    // Node tables: per slot, each running job's ranked CPUs on that node.
    let tables = a.node_schedules();
    // The rotation's lighter tables say the same, for any subset of jobs.
    let light = a.node_tables(|job| job.0 % 2 == 0);
    prop_assert_eq!(light.len(), tables.len());
    for ((node, slots), t) in light.iter().zip(&tables) {
        prop_assert_eq!(*node, t.node);
        let want: Vec<Vec<(JobId, String)>> = t
            .slots
            .iter()
            .map(|row| {
                row.iter()
                    .filter(|p| p.job.0 % 2 == 0)
                    .map(|p| (p.job, p.cpulist()))
                    .collect()
            })
            .collect();
        prop_assert_eq!(slots, &want, "node {}", t.name);
    }
    prop_assert_eq!(tables.len(), a.cluster().nodes().len());
    for t in &tables {
        prop_assert_eq!(t.slots.len(), a.nr_slots());
        for (slot, placements) in t.slots.iter().enumerate() {
            let got: BTreeSet<(String, u32)> = placements
                .iter()
                .flat_map(|p| p.cpus.iter().map(move |&c| (p.gang.clone(), c)))
                .collect();
            let cpus: usize = placements.iter().map(|p| p.cpus.len()).sum();
            prop_assert_eq!(got.len(), cpus, "a CPU twice in a node's slot");
            let want: BTreeSet<(String, u32)> = views
                .values()
                .filter(|v| v.state == JobState::Running && v.slots.contains(&slot))
                .flat_map(|v| {
                    v.rank_cells
                        .iter()
                        .filter(|c| c.node == t.node)
                        .map(move |c| (v.name.clone(), c.cpu))
                })
                .collect();
            prop_assert_eq!(got, want, "node {} slot {}", t.name, slot);
        }
        for nj in &t.jobs {
            let v = &views[&nj.job];
            let want: Vec<(u32, u32)> = v
                .rank_cells
                .iter()
                .enumerate()
                .filter(|(_, c)| c.node == t.node)
                .map(|(r, c)| (r as u32, c.cpu))
                .collect();
            let got: Vec<(u32, u32)> = nj.ranks.iter().map(|r| (r.rank, r.cpu)).collect();
            prop_assert_eq!(got, want);
        }
        let listed: BTreeSet<JobId> = t.jobs.iter().map(|j| j.job).collect();
        let want: BTreeSet<JobId> = views
            .values()
            .filter(|v| {
                v.state == JobState::Running && v.rank_cells.iter().any(|c| c.node == t.node)
            })
            .map(|v| v.id)
            .collect();
        prop_assert_eq!(listed, want);
        // One node's table alone is the same as in the whole set (two
        // paths: the set sorts every rank by node once).
        let alone = a.node_schedule(t.node);
        prop_assert_eq!(alone.as_ref(), Some(t), "node {} alone", t.name);
    }
    Ok(())
}

/// What must hold across one operation: placed jobs stay placed on the same
/// cells with the same ranks (under scs: the same initial cells, and every
/// rank on the same node); without backfill nobody is placed while an older
/// job keeps waiting.
fn check_step(a: &Allocator, before: &BTreeMap<JobId, JobView>) -> Result<(), TestCaseError> {
    let s = a.settings();
    let queue = a.queue();
    for v in a.jobs() {
        let Some(old) = before.get(&v.id) else {
            // Just submitted.
            if !s.backfill && v.state == JobState::Running {
                prop_assert!(
                    queue.iter().all(|&q| q > v.id),
                    "job {} started ahead of an older queued job",
                    v.id
                );
            }
            continue;
        };
        if old.state != JobState::Queued {
            prop_assert!(
                v.state != JobState::Queued,
                "job {} went back to the queue",
                v.id
            );
            prop_assert_eq!(&v.initial, &old.initial);
            if s.policy == Policy::Scs {
                let nodes = |v: &JobView| v.rank_cells.iter().map(|c| c.node).collect::<Vec<_>>();
                prop_assert_eq!(nodes(&v), nodes(old), "a rank of job {} changed node", v.id);
            } else {
                prop_assert_eq!(&v.cells, &old.cells);
                prop_assert_eq!(&v.rank_cells, &old.rank_cells);
            }
        } else if v.state != JobState::Queued && !s.backfill {
            prop_assert!(
                queue.iter().all(|&q| q > v.id),
                "job {} started ahead of an older queued job",
                v.id
            );
        }
    }
    Ok(())
}

fn run(nodes: &[NodeSpec], settings: Settings, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut a = Allocator::new(Cluster::new(nodes.to_vec()).unwrap(), settings).unwrap();
    let mut live: Vec<JobId> = Vec::new();
    let mut n = 0;
    for op in ops {
        let before: BTreeMap<JobId, JobView> = a.jobs().into_iter().map(|v| (v.id, v)).collect();
        let rendered = a.render();
        let pick = |i: usize| (!live.is_empty()).then(|| live[i % live.len()]);
        let result = match *op {
            Op::Submit { ranks, per_node } => {
                n += 1;
                let r = a.submit(JobSpec {
                    name: format!("job{n}"),
                    ranks,
                    per_node,
                });
                if let Ok(id) = r {
                    prop_assert!(
                        !before.contains_key(&id) && live.iter().all(|&l| l < id),
                        "ids follow submission order"
                    );
                    live.push(id);
                }
                r.map(|_| ())
            }
            Op::Finish(i) => match pick(i) {
                Some(id) => {
                    live.retain(|&l| l != id);
                    a.finish(id)
                }
                None => continue,
            },
            Op::Suspend(i) => match pick(i) {
                Some(id) => a.suspend(id),
                None => continue,
            },
            Op::Resume(i) => match pick(i) {
                Some(id) => a.resume(id),
                None => continue,
            },
        };
        if let Err(e) = result {
            // A refusal changes nothing and says why.
            prop_assert!(!e.to_string().is_empty());
            let after: BTreeMap<JobId, JobView> = a.jobs().into_iter().map(|v| (v.id, v)).collect();
            prop_assert_eq!(&after, &before, "refused: {}", e);
            prop_assert_eq!(a.render(), rendered);
            match op {
                Op::Submit { .. } => {}
                Op::Suspend(_) => prop_assert!(matches!(e, AllocError::NotRunning { .. }), "{}", e),
                Op::Resume(_) => {
                    prop_assert!(matches!(e, AllocError::NotSuspended { .. }), "{}", e)
                }
                Op::Finish(_) => prop_assert!(false, "finishing a live job failed: {}", e),
            }
        }
        // Never lost: exactly the live jobs are known.
        let known: Vec<JobId> = a.jobs().iter().map(|v| v.id).collect();
        prop_assert_eq!(&known, &live);
        check_state(&a)?;
        check_step(&a, &before)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Every policy, fill on and off, on the same random cluster and history.
    #[test]
    fn allocation_invariants(
        nodes in cluster_shape(),
        mpl_max in 1usize..=4,
        backfill in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        for policy in Policy::ALL {
            for fill in [false, true] {
                run(&nodes, Settings { policy, mpl_max, fill, backfill }, &ops)?;
            }
        }
    }

    /// Submission alone: a job is refused exactly when it could not run on
    /// the empty cluster, and an accepted job that is not queued runs at
    /// once.
    #[test]
    fn refused_exactly_when_the_empty_cluster_cannot_hold_it(
        nodes in cluster_shape(),
        ranks in 1u32..=24,
        per_node in proptest::option::of(1u32..=4),
        mpl_max in 1usize..=4,
    ) {
        for policy in Policy::ALL {
            let settings = Settings { policy, mpl_max, fill: false, backfill: false };
            let mut a = Allocator::new(Cluster::new(nodes.clone()).unwrap(), settings).unwrap();
            match a.submit(JobSpec { name: "x".into(), ranks, per_node }) {
                Ok(id) => prop_assert_eq!(a.job(id).unwrap().state, JobState::Running),
                Err(e) => {
                    let gang_cpus = a.cluster().nr_columns() as u32;
                    let room: u32 = a.cluster().nodes().iter().map(|n| (n.gang_cpus.len() as u32).min(per_node.unwrap_or(u32::MAX))).sum();
                    let need = match policy {
                        Policy::Scs => ranks.div_ceil(mpl_max as u32),
                        Policy::Buddy => ranks.next_power_of_two(),
                        _ => ranks,
                    };
                    // Without a per-node limit the only reason is size.
                    if per_node.is_none() {
                        prop_assert!(need > gang_cpus, "{}: refused though it fits: {}", policy, e);
                    } else if policy != Policy::Scs && policy != Policy::Buddy {
                        prop_assert!(ranks > room, "{}: refused though it fits: {}", policy, e);
                    }
                }
            }
        }
    }
}
