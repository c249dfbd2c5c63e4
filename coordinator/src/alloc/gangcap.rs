//! The per-node gang limit: a node's scheduler holds at most
//! NODE_MAX_GANGS gangs, and each job with a cell on the node (in any
//! slot, home or fill) is one. The choosers only see free masks, so the
//! limit is applied to the mask: the columns of a node that already has
//! that many other jobs are not free for a new one. A job that finds no
//! room because of it waits in the queue like any job that does not fit,
//! and starts when a job on the full node ends.
//!
//! Known fault: a node with many CPUs (cells ≥ NODE_MAX_GANGS) still has
//! its set of jobs rebuilt at every placement attempt.

use std::collections::BTreeSet;

use super::Allocator;
use gang_wire::proto::{JobId, NODE_MAX_GANGS};

impl Allocator {
    /// Whether some node has cells enough to reach the limit at all.
    pub(super) fn gang_limit_binds(&self) -> bool {
        self.matrix.cluster().max_node_columns() * self.matrix.nr_slots() >= NODE_MAX_GANGS
    }

    /// `free` without the columns of the nodes where job `id` would be a
    /// gang too many. A node with fewer cells (columns × slots) than the
    /// limit can never hold that many jobs and is not looked at: with a
    /// few CPUs per node that is every node, so the check costs a pass
    /// over the nodes, not a set of jobs per node per placement attempt
    /// (which made allocation at 1024 nodes take 4.8 ms p99, and gang-sim
    /// minutes; docs/scale.md). When no node has that many cells the pass
    /// over the nodes is skipped too.
    pub(super) fn within_gang_limit(&self, id: JobId, mut free: Vec<bool>) -> Vec<bool> {
        let cluster = self.matrix.cluster();
        let rows = self.matrix.rows();
        if !self.gang_limit_binds() {
            return free;
        }
        for n in 0..cluster.nodes().len() {
            let cols = cluster.node_columns(n);
            if cols.len() * rows.len() < NODE_MAX_GANGS {
                continue;
            }
            let gangs: BTreeSet<JobId> = rows
                .iter()
                .flat_map(|row| row[cols.clone()].iter().flatten().map(|e| e.job))
                .collect();
            if gangs.len() >= NODE_MAX_GANGS && !gangs.contains(&id) {
                for col in cols {
                    free[col] = false;
                }
            }
        }
        free
    }
}

#[cfg(test)]
mod tests {
    use crate::alloc::{Allocator, JobSpec, JobState, Policy, Settings};
    use crate::matrix::{Cluster, NodeSpec};
    use gang_wire::proto::NODE_MAX_GANGS;

    fn node(id: u32, nr_cpus: u32) -> NodeSpec {
        NodeSpec {
            id,
            name: format!("n{id}"),
            nr_cpus,
            housekeeping: vec![],
        }
    }

    fn one_rank(i: usize) -> JobSpec {
        JobSpec {
            name: format!("j{i}"),
            ranks: 1,
            per_node: None,
        }
    }

    /// One node of 80 CPUs: room for 80 one-rank jobs in one slot, but its
    /// scheduler holds 64 gangs.
    #[test]
    fn a_node_never_gets_a_65th_gang() {
        for policy in [
            Policy::FirstFit,
            Policy::BestFit,
            Policy::Buddy,
            Policy::Scs,
        ] {
            let cluster = Cluster::new(vec![node(0, 80)]).unwrap();
            let settings = Settings {
                policy,
                mpl_max: 2,
                fill: true,
                backfill: false,
            };
            let mut a = Allocator::new(cluster, settings).unwrap();
            let ids: Vec<_> = (0..NODE_MAX_GANGS + 2)
                .map(|i| a.submit(one_rank(i)).unwrap())
                .collect();
            let state = |a: &Allocator, id| a.job(id).unwrap().state;
            for &id in &ids[..NODE_MAX_GANGS] {
                assert_eq!(state(&a, id), JobState::Running, "{policy}");
            }
            for &id in &ids[NODE_MAX_GANGS..] {
                assert_eq!(state(&a, id), JobState::Queued, "{policy}: job {id}");
            }
            // One ends: the first queued takes its place, the next waits.
            a.finish(ids[0]).unwrap();
            assert_eq!(
                state(&a, ids[NODE_MAX_GANGS]),
                JobState::Running,
                "{policy}"
            );
            assert_eq!(
                state(&a, ids[NODE_MAX_GANGS + 1]),
                JobState::Queued,
                "{policy}"
            );
        }
    }

    /// With a second node the 65th job goes there instead of waiting.
    #[test]
    fn a_full_node_is_skipped_for_one_with_room() {
        let cluster = Cluster::new(vec![node(0, 80), node(1, 4)]).unwrap();
        let mut a = Allocator::new(cluster, Settings::default()).unwrap();
        let ids: Vec<_> = (0..=NODE_MAX_GANGS)
            .map(|i| a.submit(one_rank(i)).unwrap())
            .collect();
        let last = a.job(ids[NODE_MAX_GANGS]).unwrap();
        assert_eq!(last.state, JobState::Running);
        assert!(last.cells.iter().all(|c| c.node == 1), "{last:?}");
    }
}
