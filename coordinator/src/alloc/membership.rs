//! Changes of the cluster and of the settings while jobs run.
//!
//! gangd's cluster is the set of nodes that are connected: a node that joins
//! adds columns, a node that is lost takes its columns away. A rank cannot
//! move to another node, so a job keeps exactly the cells it has; only the
//! jobs that had a cell on a vanished node are dropped (gangd has already
//! failed them). Settings change the same way: running jobs stay where they
//! are and the new values apply to what is placed next.

use super::{AllocError, Allocator, Job, JobSpec, JobState, Need, Policy, Settings};
use crate::matrix::{Cell, Cluster, Entry, Matrix, NODE_MAX_SLOTS};
use gang_wire::proto::JobId;

impl Allocator {
    /// Moves every job onto `cluster`, cell for cell. Jobs with a cell the
    /// new cluster lacks are dropped and returned; queued jobs that can no
    /// longer fit even the empty cluster stay queued (the node may come
    /// back). Then the queue is served.
    pub fn set_cluster(&mut self, cluster: Cluster) -> Vec<JobId> {
        let old = self.matrix.cluster().clone();
        let mut matrix = Matrix::new(cluster);
        for _ in 0..self.matrix.nr_slots() {
            matrix.add_slot();
        }
        let remap = |cols: &[usize], m: &Matrix| -> Option<Vec<usize>> {
            cols.iter()
                .map(|&c| m.cluster().column(old.cell(c)))
                .collect()
        };
        let mut dropped = Vec::new();
        for job in self
            .jobs
            .values_mut()
            .filter(|j| j.state != JobState::Queued)
        {
            let (Some(cells), Some(initial)) =
                (remap(&job.cells, &matrix), remap(&job.initial, &matrix))
            else {
                dropped.push(job.id);
                continue;
            };
            matrix.fill_cells(
                job.slot,
                &cells,
                Entry {
                    job: job.id,
                    fill: false,
                },
            );
            for share in &mut job.shares {
                let id = old.nodes()[share.node].id;
                share.node = matrix
                    .cluster()
                    .nodes()
                    .iter()
                    .position(|n| n.id == id)
                    .expect("cells were remapped");
            }
            job.cells = cells;
            job.initial = initial;
        }
        for id in &dropped {
            self.jobs.remove(id);
        }
        self.matrix = matrix;
        self.reschedule();
        dropped
    }

    /// New settings for what is placed from now on. Moving to or from `scs`
    /// changes what a placement is (one slot, malleable jobs), so it is only
    /// allowed with no live job; mpl_max must stay in 1..=NODE_MAX_SLOTS.
    /// Lowering mpl_max below the current number of slots keeps those slots
    /// and only stops new ones from opening.
    pub fn set_settings(&mut self, settings: Settings) -> Result<(), AllocError> {
        if !(1..=NODE_MAX_SLOTS).contains(&settings.mpl_max) {
            return Err(AllocError::MplMax {
                value: settings.mpl_max,
            });
        }
        let scs_changes = (settings.policy == Policy::Scs) != (self.settings.policy == Policy::Scs);
        if scs_changes && !self.jobs.is_empty() {
            return Err(AllocError::PolicyBusy {
                from: self.settings.policy,
                to: settings.policy,
                jobs: self.jobs.len(),
            });
        }
        self.settings = settings;
        self.drop_fill();
        self.reschedule();
        Ok(())
    }

    /// Takes back a job that a previous gangd placed, as its nodes report
    /// it after a restart: its `cells` on one node (other nodes' cells of
    /// the same job come with their own calls). The job keeps its id, and
    /// new ids count on after it. The slot the old gangd used is only a
    /// preference: slots are renumbered by slice reduction as jobs come
    /// back, so a job goes to the first slot where its cells are free. Its
    /// later cells join it in its slot. Refused if a cell is unknown or the
    /// job's slot has it taken.
    pub fn adopt(
        &mut self,
        id: JobId,
        spec: JobSpec,
        slot: usize,
        cells: &[Cell],
    ) -> Result<(), AllocError> {
        let conflict = AllocError::AdoptConflict { job: id };
        let cols: Vec<usize> = cells
            .iter()
            .map(|&c| self.matrix.cluster().column(c).ok_or(conflict.clone()))
            .collect::<Result<_, _>>()?;
        self.drop_fill();
        let free = |m: &Matrix, s: usize| {
            cols.iter()
                .all(|&c| m.get(s, c).is_none_or(|e| e.job == id))
        };
        let slot = match self.jobs.get(&id) {
            Some(j) if j.state == JobState::Queued => None,
            Some(j) => free(&self.matrix, j.slot).then_some(j.slot),
            None => std::iter::once(slot)
                .chain(0..self.matrix.nr_slots())
                .find(|&s| s < self.matrix.nr_slots() && free(&self.matrix, s))
                .or_else(|| {
                    (self.matrix.nr_slots() < NODE_MAX_SLOTS).then(|| self.matrix.add_slot())
                }),
        };
        let Some(slot) = slot else {
            self.reschedule();
            return Err(conflict);
        };
        self.matrix.fill_cells(
            slot,
            &cols,
            Entry {
                job: id,
                fill: false,
            },
        );
        let need = Need {
            cells: spec.ranks as usize,
            cap: spec.per_node.map_or(usize::MAX, |k| k as usize),
        };
        let job = self
            .jobs
            .entry(id)
            .or_insert_with(|| Job::new(id, spec, JobState::Running, need, slot));
        job.mark(&mut self.dirty);
        for c in cols {
            if let Err(at) = job.cells.binary_search(&c) {
                job.cells.insert(at, c);
            }
        }
        job.initial = job.cells.clone();
        self.next_id = self.next_id.max(id.0 + 1);
        self.reschedule();
        Ok(())
    }

    /// The nodes (by id) holding a home cell of `job`.
    pub fn nodes_of(&self, job: JobId) -> Vec<crate::matrix::NodeId> {
        let Some(j) = self.jobs.get(&job) else {
            return vec![];
        };
        let cluster = self.matrix.cluster();
        let mut nodes: Vec<_> = j.cells.iter().map(|&c| cluster.cell(c).node).collect();
        nodes.dedup();
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::NodeSpec;

    fn spec(name: &str, ranks: u32) -> JobSpec {
        JobSpec {
            name: name.into(),
            ranks,
            per_node: None,
        }
    }

    fn nodes(ids: &[u32], cpus: u32) -> Cluster {
        Cluster::new(
            ids.iter()
                .map(|&id| NodeSpec {
                    id,
                    name: format!("n{id}"),
                    nr_cpus: cpus,
                    housekeeping: vec![],
                })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_joining_node_keeps_every_job_on_its_cells_and_serves_the_queue() {
        let mut a = Allocator::new(
            nodes(&[0], 2),
            Settings {
                mpl_max: 1,
                ..Settings::default()
            },
        )
        .unwrap();
        let j1 = a.submit(spec("a", 2)).unwrap();
        let j2 = a.submit(spec("b", 2)).unwrap();
        assert_eq!(a.job(j2).unwrap().state, JobState::Queued);
        let before = a.job(j1).unwrap().cells;
        assert!(a.set_cluster(nodes(&[0, 1], 2)).is_empty());
        assert_eq!(
            a.job(j1).unwrap().cells,
            before,
            "a running job never moves"
        );
        let b = a.job(j2).unwrap();
        assert_eq!(
            b.state,
            JobState::Running,
            "the new node's CPUs serve the queue"
        );
        assert!(b.cells.iter().all(|c| c.node == 1));
    }

    #[test]
    fn a_lost_node_drops_exactly_the_jobs_with_a_cell_there() {
        let mut a = Allocator::new(nodes(&[0, 1, 2], 1), Settings::default()).unwrap();
        let wide = a.submit(spec("wide", 3)).unwrap();
        let narrow = a
            .submit(JobSpec {
                name: "narrow".into(),
                ranks: 2,
                per_node: None,
            })
            .unwrap();
        let dropped = a.set_cluster(nodes(&[0, 1], 1));
        assert_eq!(dropped, vec![wide]);
        assert!(a.job(wide).is_none());
        let n = a.job(narrow).unwrap();
        assert_eq!(n.state, JobState::Running);
        assert_eq!(
            n.cells,
            vec![Cell { node: 0, cpu: 0 }, Cell { node: 1, cpu: 0 }]
        );
        assert_eq!(a.nr_slots(), 1, "the wide job's slot is reduced away");
    }

    #[test]
    fn scs_cannot_be_switched_on_under_running_jobs_but_other_settings_can() {
        let mut a = Allocator::new(nodes(&[0], 2), Settings::default()).unwrap();
        let j = a.submit(spec("a", 2)).unwrap();
        let err = a
            .set_settings(Settings {
                policy: Policy::Scs,
                ..Settings::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("scs"), "{err}");
        assert_eq!(a.settings().policy, Policy::FirstFit, "nothing changed");
        a.set_settings(Settings {
            policy: Policy::BestFit,
            mpl_max: 2,
            fill: false,
            backfill: false,
        })
        .unwrap();
        assert_eq!(a.job(j).unwrap().state, JobState::Running);
        assert!(a
            .set_settings(Settings {
                mpl_max: 0,
                ..Settings::default()
            })
            .is_err());
        assert_eq!(a.settings().mpl_max, 2);
        a.finish(j).unwrap();
        a.set_settings(Settings {
            policy: Policy::Scs,
            ..Settings::default()
        })
        .unwrap();
    }

    #[test]
    fn an_adopted_job_keeps_its_id_slot_and_cells_and_new_ids_count_on() {
        let mut a = Allocator::new(nodes(&[0, 1], 1), Settings::default()).unwrap();
        let s = JobSpec {
            name: "old".into(),
            ranks: 2,
            per_node: None,
        };
        a.adopt(JobId(7), s.clone(), 1, &[Cell { node: 1, cpu: 0 }])
            .unwrap();
        a.adopt(JobId(7), s.clone(), 1, &[Cell { node: 0, cpu: 0 }])
            .unwrap();
        let v = a.job(JobId(7)).unwrap();
        assert_eq!(
            (v.state, v.slot),
            (JobState::Running, Some(0)),
            "the empty slot 0 is reduced away"
        );
        assert_eq!(v.cells.len(), 2);
        // Another old job on the same cells goes to a slot of its own.
        a.adopt(
            JobId(3),
            JobSpec {
                name: "older".into(),
                ranks: 1,
                per_node: None,
            },
            0,
            &[Cell { node: 0, cpu: 0 }],
        )
        .unwrap();
        assert_eq!(a.job(JobId(3)).unwrap().slot, Some(1));
        assert!(
            a.adopt(JobId(9), s, 0, &[Cell { node: 5, cpu: 0 }])
                .is_err(),
            "no such node"
        );
        let next = a.submit(spec("new", 1)).unwrap();
        assert_eq!(next, JobId(8), "ids count on after the adopted ones");
    }

    #[test]
    fn scs_shares_follow_their_node_when_columns_shift() {
        let mut a = Allocator::new(
            nodes(&[1, 2], 2),
            Settings {
                policy: Policy::Scs,
                ..Settings::default()
            },
        )
        .unwrap();
        let j = a.submit(spec("s", 4)).unwrap();
        let ranks_before = a.job(j).unwrap().rank_cells;
        // A node with a lower id joins: every column index shifts.
        a.set_cluster(nodes(&[0, 1, 2], 2));
        assert_eq!(a.job(j).unwrap().rank_cells, ranks_before);
    }
}
