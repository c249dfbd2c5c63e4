//! What the allocator shows: each job's placement, and each node's slot
//! table with the ranks it runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{scs, Allocator, Job, JobState, Policy};
use crate::matrix::{format_cpus, Cell, NodeId};
use gang_wire::proto::JobId;

/// One job as the front end shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: JobId,
    pub name: String,
    pub ranks: u32,
    pub per_node: Option<u32>,
    pub state: JobState,
    /// Its home slot; None while queued.
    pub slot: Option<usize>,
    /// Every slot it holds cells in: home and fill, ascending.
    pub slots: Vec<usize>,
    /// Its home cells in (node, cpu) order; the same cells in every slot it
    /// holds. Under buddy this is the whole block, idle cells included.
    pub cells: Vec<Cell>,
    /// The initial allocation (scs shrinks back to it); `cells` otherwise.
    pub initial: Vec<Cell>,
    /// `rank_cells[r]`: where rank r runs. Several ranks share a cell under
    /// scs.
    pub rank_cells: Vec<Cell>,
    /// Place in the queue, 0 first; None unless queued.
    pub queue_position: Option<usize>,
}

/// A gang's CPUs in one slot of a node's table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotPlacement {
    pub job: JobId,
    /// The job's name.
    pub gang: String,
    /// Ascending.
    pub cpus: Vec<u32>,
}

impl SlotPlacement {
    /// The CPUs in the kernel's list form, as the node's placement API
    /// takes them.
    pub fn cpulist(&self) -> String {
        format_cpus(&self.cpus)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankCpu {
    pub rank: u32,
    pub cpu: u32,
}

/// A job that runs ranks on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeJob {
    pub job: JobId,
    pub name: String,
    /// Its ranks on this node, ascending, with the CPU of each.
    pub ranks: Vec<RankCpu>,
}

/// What one node installs: its columns of the matrix, by gang name.
///
/// Only running jobs are listed, and only on the CPUs where they have
/// ranks. A suspended job's reserved cells and a buddy block's idle cells
/// are left unowned, so the node gives them to tasks of no gang; and a node
/// is never told of a gang that has no process there (a node refuses a
/// table naming a gang it does not know).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSchedule {
    pub node: NodeId,
    pub name: String,
    /// One entry per slot of the matrix, empty ones included, so that slot
    /// numbers are the same on every node; within a slot by job id.
    pub slots: Vec<Vec<SlotPlacement>>,
    /// By job id.
    pub jobs: Vec<NodeJob>,
}

/// How much of the machine a job holds, cheaply (no cell lists): what a
/// simulator needs after every event to give each job its share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    pub state: JobState,
    /// Slots it holds cells in, home and fill; 0 while queued.
    pub slots: usize,
    /// Home cells (under buddy the whole block; under scs what it has
    /// grown to); 0 while queued.
    pub cells: usize,
}

impl Holding {
    /// A queued job's, and what a new job counts as.
    pub const NOTHING: Holding = Holding {
        state: JobState::Queued,
        slots: 0,
        cells: 0,
    };
}

impl Allocator {
    /// The job's state and how many slots and cells it holds; O(log jobs).
    pub fn holding(&self, id: JobId) -> Option<Holding> {
        self.jobs.get(&id).map(holding)
    }

    /// The live jobs whose holding differs from what this call last
    /// reported (a new job counting as [`Holding::NOTHING`]), with the
    /// holding now; by id. Costs what changed, not the jobs: a simulator
    /// calls it after every call instead of asking every job. Finished
    /// jobs are not reported.
    pub fn take_changed(&mut self) -> Vec<(JobId, Holding)> {
        let mut out = vec![];
        for id in std::mem::take(&mut self.dirty) {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            job.dirty = false;
            let now = holding(job);
            if now != job.reported {
                job.reported = now;
                out.push((id, now));
            }
        }
        out.sort_unstable_by_key(|&(id, _)| id);
        out
    }

    pub fn job(&self, id: JobId) -> Option<JobView> {
        self.jobs.get(&id).map(|j| self.view(j))
    }

    /// Every live job, by id.
    pub fn jobs(&self) -> Vec<JobView> {
        self.jobs.values().map(|j| self.view(j)).collect()
    }

    /// Every job's slots (home and fill; none while queued), without the
    /// rest of its view (cells, ranks): gangd's rotation asks at every
    /// pass of its loop, where `jobs` cost O(cells) per job.
    pub fn slots_by_job(&self) -> Vec<(JobId, Vec<usize>)> {
        self.jobs
            .values()
            .map(|j| (j.id, self.slots_of(j).collect()))
            .collect()
    }

    /// The matrix in the text form of `gang matrix`.
    pub fn render(&self) -> String {
        self.matrix.render()
    }

    /// The slots the rotation visits: those where some job runs. A slot
    /// whose jobs are all suspended is skipped rather than left idle.
    pub fn rotation(&self) -> Vec<usize> {
        (0..self.matrix.nr_slots())
            .filter(|&s| {
                self.matrix.rows()[s]
                    .iter()
                    .flatten()
                    .any(|e| self.jobs[&e.job].state == JobState::Running)
            })
            .collect()
    }

    /// Every node's table, by node id. Each running job's ranks are
    /// sorted by node in one pass (O(ranks + nodes)), not searched by every
    /// node: the search was O(nodes × ranks) per call, a quarter of gangd's
    /// samples while it placed jobs of 16,384 ranks on 4096 nodes
    /// (docs/scale.md, "Placement at 4096 nodes").
    pub fn node_schedules(&self) -> Vec<NodeSchedule> {
        let mut by_node = vec![RanksHere::new(); self.cluster().nodes().len()];
        for (id, ranks) in self.ranked_columns() {
            for (rank, col) in ranks {
                let here = &mut by_node[self.cluster().node_of(col)];
                here.entry(id).or_default().push((rank, col));
            }
        }
        by_node
            .iter()
            .enumerate()
            .map(|(n, here)| self.node_schedule_at(n, here))
            .collect()
    }

    /// Every node's slots alone, as the rotation sends them: per node (by
    /// id, in cluster order) one entry per slot of the matrix, each the
    /// jobs `keep` says (by id) with their ranked CPUs there, in the
    /// kernel's list form. The same slots as [`Self::node_schedules`]
    /// without its names and ranks: that view, built at every matrix
    /// change, took 14-57 ms at 4096 nodes and was most of a plan's way to
    /// the nodes (docs/scale.md, "A plan to every node").
    pub fn node_tables(&self, keep: impl Fn(JobId) -> bool) -> Vec<(NodeId, NodeTable)> {
        // A job with a rank on each of its cells (the common case) is
        // ranked wherever it is in the matrix, which only ever holds a job
        // on its cells: its id is enough. The others (scs, an adopted job
        // known on fewer cells) by (column, job). Both sorted. Checking
        // every cell against one (column, job) list of all ranks was half
        // of the tables' time at 4096 nodes (its sort and its searches).
        let mut whole: Vec<JobId> = vec![];
        let mut ranked: Vec<(usize, JobId)> = vec![];
        for j in self.jobs.values() {
            if j.state != JobState::Running || !keep(j.id) {
                continue;
            }
            let cols = self.rank_columns(j);
            if self.settings.policy != Policy::Scs && cols.len() == j.cells.len() {
                whole.push(j.id);
            } else {
                ranked.extend(cols.into_iter().map(|c| (c, j.id)));
            }
        }
        whole.sort_unstable();
        ranked.sort_unstable();
        ranked.dedup();
        let is_ranked = |col: usize, job: JobId| {
            whole.binary_search(&job).is_ok() || ranked.binary_search(&(col, job)).is_ok()
        };
        let cluster = self.cluster();
        cluster
            .nodes()
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let slots = self.node_rows(n, is_ranked);
                let slots = slots
                    .into_iter()
                    .map(|row| {
                        row.chunk_by(|a, b| a.0 == b.0)
                            .map(|run| {
                                let cpus: Vec<u32> = run.iter().map(|&(_, c)| c).collect();
                                (run[0].0, format_cpus(&cpus))
                            })
                            .collect()
                    })
                    .collect();
                (node.id, slots)
            })
            .collect()
    }

    /// Node `n`'s slots: per row of the matrix, the (job, CPU) of each
    /// column of the node whose job has a rank there (`ranked`), sorted.
    fn node_rows(&self, n: usize, ranked: impl Fn(usize, JobId) -> bool) -> Vec<Vec<(JobId, u32)>> {
        let cluster = self.cluster();
        let range = cluster.node_columns(n);
        self.matrix
            .rows()
            .iter()
            .map(|row| {
                let mut here: Vec<(JobId, u32)> = range
                    .clone()
                    .filter_map(|col| {
                        row[col]
                            .filter(|e| ranked(col, e.job))
                            .map(|e| (e.job, cluster.cell(col).cpu))
                    })
                    .collect();
                here.sort_unstable();
                here
            })
            .collect()
    }

    pub fn node_schedule(&self, node: NodeId) -> Option<NodeSchedule> {
        let n = self.cluster().nodes().iter().position(|x| x.id == node)?;
        let here: RanksHere = self
            .ranked_columns()
            .into_iter()
            .map(|(id, ranks)| {
                let mine = ranks
                    .into_iter()
                    .filter(|&(_, c)| self.cluster().node_of(c) == n);
                (id, mine.collect::<Vec<_>>())
            })
            .filter(|(_, ranks)| !ranks.is_empty())
            .collect();
        Some(self.node_schedule_at(n, &here))
    }

    fn view(&self, job: &Job) -> JobView {
        let cluster = self.cluster();
        let cells = |cols: &[usize]| cols.iter().map(|&c| cluster.cell(c)).collect();
        let placed = job.state != JobState::Queued;
        JobView {
            id: job.id,
            name: job.spec.name.clone(),
            ranks: job.spec.ranks,
            per_node: job.spec.per_node,
            state: job.state,
            slot: placed.then_some(job.slot),
            slots: self.slots_of(job).collect(),
            cells: cells(&job.cells),
            initial: cells(&job.initial),
            rank_cells: cells(&self.rank_columns(job)),
            queue_position: self.queue.iter().position(|&q| q == job.id),
        }
    }

    /// The slots holding the job (the home slot and the fill slots). A placement always covers all of the
    /// job's cells, so looking at its first cell in each slot is enough.
    fn slots_of<'a>(&'a self, job: &'a Job) -> impl Iterator<Item = usize> + 'a {
        let col = job.cells.first().filter(|_| job.state != JobState::Queued);
        let slots = if col.is_some() {
            0..self.matrix.nr_slots()
        } else {
            0..0
        };
        slots.filter(move |&s| {
            col.is_some_and(|&c| self.matrix.get(s, c).is_some_and(|e| e.job == job.id))
        })
    }

    /// rank_columns[r]: the column rank r runs on; empty while queued.
    /// Outside scs rank i takes the i-th cell in (node, cpu) order.
    fn rank_columns(&self, job: &Job) -> Vec<usize> {
        match (job.state, self.settings.policy) {
            (JobState::Queued, _) => vec![],
            (_, Policy::Scs) => scs::rank_columns(self.cluster(), &job.shares, &job.cells),
            // An adopted job may be known on fewer cells than it has ranks
            // until all its nodes are back.
            _ => job.cells[..(job.spec.ranks as usize).min(job.cells.len())].to_vec(),
        }
    }

    /// For every running job: (rank, column) of each rank, in rank order.
    fn ranked_columns(&self) -> BTreeMap<JobId, Vec<(u32, usize)>> {
        self.jobs
            .values()
            .filter(|j| j.state == JobState::Running)
            .map(|j| {
                (
                    j.id,
                    self.rank_columns(j)
                        .into_iter()
                        .enumerate()
                        .map(|(r, c)| (r as u32, c))
                        .collect(),
                )
            })
            .collect()
    }

    /// Node `n`'s table from `here`, the running jobs' ranks on it.
    fn node_schedule_at(&self, n: usize, here: &RanksHere) -> NodeSchedule {
        let node = &self.cluster().nodes()[n];
        let ranked = |col, job| {
            here.get(&job)
                .is_some_and(|rc| rc.iter().any(|&(_, c)| c == col))
        };
        let slots = self
            .node_rows(n, ranked)
            .into_iter()
            .map(|row| {
                row.chunk_by(|a, b| a.0 == b.0)
                    .map(|run| SlotPlacement {
                        job: run[0].0,
                        gang: self.jobs[&run[0].0].spec.name.clone(),
                        cpus: run.iter().map(|&(_, c)| c).collect(),
                    })
                    .collect()
            })
            .collect();
        let jobs = here
            .iter()
            .map(|(id, ranks)| NodeJob {
                job: *id,
                name: self.jobs[id].spec.name.clone(),
                ranks: ranks
                    .iter()
                    .map(|&(rank, c)| RankCpu {
                        rank,
                        cpu: self.cluster().cell(c).cpu,
                    })
                    .collect(),
            })
            .collect();
        NodeSchedule {
            node: node.id,
            name: node.name.clone(),
            slots,
            jobs,
        }
    }
}

/// The running jobs' ranks on one node: (rank, column), in rank order.
type RanksHere = BTreeMap<JobId, Vec<(u32, usize)>>;

/// A node's slots for the rotation: per slot, each job with its CPUs there
/// in the kernel's list form ([`Allocator::node_tables`]).
pub type NodeTable = Vec<Vec<(JobId, String)>>;

/// A placed job holds its home slot and its fill slots.
fn holding(job: &Job) -> Holding {
    let placed = job.state != JobState::Queued;
    Holding {
        state: job.state,
        slots: if placed { 1 + job.fill_slots } else { 0 },
        cells: if placed { job.cells.len() } else { 0 },
    }
}
