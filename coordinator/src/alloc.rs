//! Space-time allocation: where and when each job runs.
//!
//! A job gets cells of one slot of the matrix (its home), chosen by the
//! policy. Slots are slices in the sense of time sharing over a partitioned
//! machine: a job goes into the first slot with room for it, else into a new
//! slot, up to `mpl_max` slots; beyond that it waits in a
//! first-come-first-served queue. A new slot is only opened when no slot has
//! room, since every extra slot lengthens the rotation of every job. When
//! jobs end, slots left with no job are removed and the rest closed up
//! (slice reduction), then the queue is served.
//!
//! With `fill`, a job whose exact cells are free in another slot runs there
//! too (a "multiple task"), using cells that would otherwise idle. These
//! extra placements are recomputed from scratch after every change, so they
//! never stand in the way of a real placement: they are dropped first.
//! Dropping them walks the matrix's list of fill placements, not the
//! matrix, and a slot with fewer free cells than a job needs is skipped
//! from its count: at 4096 nodes × 4 CPUs a decision costs passes over
//! the columns of the slots tried, not over the whole matrix
//! (`tests/alloc_recorded.rs` holds the decisions to the old ones).
//!
//! Under `scs` there is one slot and jobs instead grow and shrink in space:
//! a job may get fewer cells than ranks and time-share them with itself.
//!
//! Everything is deterministic: the same calls give the same matrix.

mod admit;
mod error;
mod gangcap;
mod membership;
mod policy;
mod scs;
mod view;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::matrix::{Cluster, Entry, Matrix, NODE_MAX_SLOTS};
pub use error::AllocError;
use gang_wire::proto::JobId;
pub use view::{Holding, JobView, NodeJob, NodeSchedule, RankCpu, SlotPlacement};

/// How cells are chosen within a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// The first free cells in (node, cpu) order.
    FirstFit,
    /// The nodes whose free CPUs match the request best, leaving few,
    /// large fragments.
    BestFit,
    /// Aligned power-of-two blocks of the linearised column list.
    Buddy,
    /// Self co-scheduling: fewer cells than ranks, one slot, malleable in
    /// space.
    Scs,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::FirstFit,
        Policy::BestFit,
        Policy::Buddy,
        Policy::Scs,
    ];

    /// The knob string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstFit => "first_fit",
            Self::BestFit => "best_fit",
            Self::Buddy => "buddy",
            Self::Scs => "scs",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = AllocError;

    /// Parses a knob value; surrounding white space (a trailing newline from
    /// `echo`) is ignored.
    fn from_str(s: &str) -> Result<Self, AllocError> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| AllocError::UnknownPolicy {
                given: s.to_string(),
            })
    }
}

/// The allocator's settings, fixed for its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub policy: Policy,
    /// The most slots (the multiprogramming level in time); under `scs`,
    /// the most ranks sharing one cell (the level in space).
    pub mpl_max: usize,
    /// Place jobs also in other slots where their exact cells are free
    /// ("multiple tasks"). Not the node knob of the same name, which lets an
    /// idle CPU run another gang's task. No effect under `scs` (one slot).
    pub fill: bool,
    /// Let a queued job that fits start before an older one that does not.
    /// Without runtime estimates there is no reservation for the older job,
    /// so a large job can wait as long as small ones keep fitting.
    pub backfill: bool,
}

impl Default for Settings {
    /// MPL 4: the level the SCS evaluation found best for SCS, and beyond 6
    /// more slots are known to bring nothing.
    fn default() -> Self {
        Self {
            policy: Policy::FirstFit,
            mpl_max: 4,
            fill: true,
            backfill: false,
        }
    }
}

/// A job as submitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The gang's name: the cgroup directory of the job on each node.
    pub name: String,
    /// Processes of the job, one per rank.
    pub ranks: u32,
    /// At most this many ranks on one node (`--per-node K`), as when a
    /// node's memory holds only K of them.
    #[serde(default)]
    pub per_node: Option<u32>,
}

/// Where a job is in its life. Finished jobs are forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Placed and in the rotation.
    Running,
    /// Waiting for room.
    Queued,
    /// Placed but out of the rotation. A suspended job keeps its home cells:
    /// its processes stay where they are on their nodes (a rank cannot move
    /// to another node), so resuming always succeeds at once. It gives up
    /// its fill placements and, under scs, what it grew beyond its initial
    /// allocation.
    Suspended,
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Running => "running",
            Self::Queued => "queued",
            Self::Suspended => "suspended",
        })
    }
}

/// What placing a job takes: `cells` cells (ranks for first_fit, best_fit
/// and buddy, which rounds up itself; the initial allocation for scs) with
/// at most `cap` per node.
#[derive(Clone, Copy, Debug)]
struct Need {
    cells: usize,
    cap: usize,
}

#[derive(Clone, Debug)]
struct Job {
    id: JobId,
    spec: JobSpec,
    state: JobState,
    need: Need,
    /// The home slot; meaningful unless queued.
    slot: usize,
    /// Home cells, sorted; empty while queued.
    cells: Vec<usize>,
    /// The cells first given (scs shrinks back to them); equal to `cells`
    /// under the other policies.
    initial: Vec<usize>,
    /// scs only: which ranks live on which node.
    shares: Vec<scs::NodeRanks>,
    /// Slots it has a fill placement in.
    fill_slots: usize,
    /// What [`Allocator::take_changed`] last reported of it.
    reported: Holding,
    /// In `Allocator::dirty`.
    dirty: bool,
}

impl Job {
    fn new(id: JobId, spec: JobSpec, state: JobState, need: Need, slot: usize) -> Self {
        Self {
            id,
            spec,
            state,
            need,
            slot,
            cells: vec![],
            initial: vec![],
            shares: vec![],
            fill_slots: 0,
            reported: Holding::NOTHING,
            dirty: false,
        }
    }

    /// Its holding may have changed: [`Allocator::take_changed`] looks.
    fn mark(&mut self, dirty: &mut Vec<JobId>) {
        if !self.dirty {
            self.dirty = true;
            dirty.push(self.id);
        }
    }
}

/// The cluster's allocator: the matrix, the jobs and the queue.
///
/// The queue is strictly first come, first served unless `backfill` is
/// set: a queued job that still does not fit blocks every job behind it,
/// and a new job joins the back of a non-empty queue even if it would fit.
/// That keeps large jobs from starving behind a stream of small ones.
#[derive(Clone, Debug)]
pub struct Allocator {
    settings: Settings,
    matrix: Matrix,
    jobs: BTreeMap<JobId, Job>,
    queue: VecDeque<JobId>,
    next_id: u64,
    /// Jobs with a fill placement.
    filled: Vec<JobId>,
    /// Jobs whose holding may have changed since `take_changed`; each once,
    /// live jobs only (bounded by the jobs).
    dirty: Vec<JobId>,
}

impl Allocator {
    /// mpl_max must be 1..=NODE_MAX_SLOTS: every node holds every slot.
    pub fn new(cluster: Cluster, settings: Settings) -> Result<Self, AllocError> {
        if !(1..=NODE_MAX_SLOTS).contains(&settings.mpl_max) {
            return Err(AllocError::MplMax {
                value: settings.mpl_max,
            });
        }
        Ok(Self {
            settings,
            matrix: Matrix::new(cluster),
            jobs: BTreeMap::new(),
            queue: VecDeque::new(),
            next_id: 1,
            filled: Vec::new(),
            dirty: Vec::new(),
        })
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// The id the next submission gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Ids below `next` are never handed out (they were, before a restart).
    pub fn skip_ids_below(&mut self, next: u64) {
        self.next_id = self.next_id.max(next);
    }

    pub fn matrix(&self) -> &Matrix {
        &self.matrix
    }

    pub fn cluster(&self) -> &Cluster {
        self.matrix.cluster()
    }

    pub fn nr_slots(&self) -> usize {
        self.matrix.nr_slots()
    }

    /// Queued jobs, first to be served first.
    pub fn queue(&self) -> Vec<JobId> {
        self.queue.iter().copied().collect()
    }

    /// The live job of that name.
    pub fn find(&self, name: &str) -> Option<JobId> {
        self.jobs
            .values()
            .find(|j| j.spec.name == name)
            .map(|j| j.id)
    }

    /// Accepts a job: it runs at once if there is room, else it is queued.
    /// A job that could not run even on an empty cluster is refused, and
    /// nothing changes. Ids count up from 1 (or `skip_ids_below`'s floor) in
    /// submission order.
    pub fn submit(&mut self, spec: JobSpec) -> Result<JobId, AllocError> {
        let need = self.check(&spec)?;
        let id = JobId(self.next_id);
        self.next_id += 1;
        self.jobs
            .insert(id, Job::new(id, spec, JobState::Queued, need, 0));
        self.drop_fill();
        // FCFS: nobody overtakes a queued job unless backfilling.
        let may_start = self.queue.is_empty() || self.settings.backfill;
        if !(may_start && self.place(id, true)) {
            self.queue.push_back(id);
        }
        self.reschedule();
        Ok(id)
    }

    /// The job has ended (or is cancelled while queued): its cells are given
    /// back, empty slots removed, and the queue served.
    pub fn finish(&mut self, id: JobId) -> Result<(), AllocError> {
        let job = self
            .jobs
            .remove(&id)
            .ok_or(AllocError::NoSuchJob { job: id })?;
        if job.state == JobState::Queued {
            self.queue.retain(|&q| q != id);
        } else {
            self.matrix.clear_job(id, &job.cells);
        }
        self.drop_fill();
        self.reschedule();
        Ok(())
    }

    /// Takes a running job out of the rotation; see [`JobState::Suspended`].
    pub fn suspend(&mut self, id: JobId) -> Result<(), AllocError> {
        let state = self
            .jobs
            .get(&id)
            .ok_or(AllocError::NoSuchJob { job: id })?
            .state;
        if state != JobState::Running {
            return Err(AllocError::NotRunning { job: id, state });
        }
        self.drop_fill();
        self.shrink(id);
        self.job_mut(id).state = JobState::Suspended;
        self.mark(id);
        self.reschedule();
        Ok(())
    }

    /// Puts a suspended job back in the rotation, on the cells it kept.
    pub fn resume(&mut self, id: JobId) -> Result<(), AllocError> {
        let state = self
            .jobs
            .get(&id)
            .ok_or(AllocError::NoSuchJob { job: id })?
            .state;
        if state != JobState::Suspended {
            return Err(AllocError::NotSuspended { job: id, state });
        }
        self.drop_fill();
        self.job_mut(id).state = JobState::Running;
        self.mark(id);
        self.reschedule();
        Ok(())
    }

    fn job_mut(&mut self, id: JobId) -> &mut Job {
        self.jobs.get_mut(&id).expect("job of the table")
    }

    fn mark(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("job of the table");
        job.mark(&mut self.dirty);
    }

    /// Drops every fill placement, in the matrix and in the jobs' counts.
    fn drop_fill(&mut self) {
        self.matrix.clear_fill();
        for id in std::mem::take(&mut self.filled) {
            if let Some(job) = self.jobs.get_mut(&id) {
                job.fill_slots = 0;
                job.mark(&mut self.dirty);
            }
        }
    }

    /// After any change, with fill placements already dropped: slice
    /// reduction, then the queue, then (scs) growth or (fill) extra
    /// placements in what is left idle.
    ///
    /// The queue is FCFS: a queued job that still does not fit blocks the
    /// ones behind it, unless `backfill` is set.
    fn reschedule(&mut self) {
        let map = self.matrix.compact();
        for job in self
            .jobs
            .values_mut()
            .filter(|j| j.state != JobState::Queued)
        {
            job.slot = map[job.slot].expect("a slot with a home placement is kept");
        }
        let mut i = 0;
        while i < self.queue.len() {
            if self.place(self.queue[i], false) {
                self.queue.remove(i);
            } else if self.settings.backfill {
                i += 1;
            } else {
                break;
            }
        }
        if self.settings.policy == Policy::Scs {
            if self.queue.is_empty() {
                self.equipartition();
            }
        } else if self.settings.fill {
            self.add_fill();
        }
    }

    /// Gives a queued job its home: the first slot with room, else a new
    /// slot if fewer than mpl_max exist. Under scs, when the initial
    /// allocation does not fit and `may_shrink` (a new arrival), every job
    /// first shrinks back to its initial allocation.
    fn place(&mut self, id: JobId, may_shrink: bool) -> bool {
        let need = self.jobs[&id].need;
        let ranks = self.jobs[&id].spec.ranks as usize;
        if self.settings.policy == Policy::Scs {
            if self.matrix.nr_slots() == 0 {
                self.matrix.add_slot();
            }
            // Fewer free cells than the initial allocation: first fit
            // cannot succeed, and the free mask is not built.
            let mut cols = (self.matrix.nr_free(0) >= need.cells)
                .then(|| self.choose(&self.free_for(id, 0), ranks, need))
                .flatten();
            if cols.is_none() && may_shrink {
                let placed: Vec<JobId> = self
                    .jobs
                    .values()
                    .filter(|j| j.state != JobState::Queued)
                    .map(|j| j.id)
                    .collect();
                for j in placed {
                    self.shrink(j);
                }
                cols = self.choose(&self.free_for(id, 0), ranks, need);
            }
            return cols.map(|cols| self.put(id, 0, cols)).is_some();
        }
        // A slot with fewer free cells than the job takes cannot hold it
        // (every chooser takes at least that many): skipped without
        // building its free mask.
        let least = match self.settings.policy {
            Policy::Buddy => policy::buddy_block(ranks),
            _ => need.cells,
        };
        for slot in 0..self.matrix.nr_slots() {
            if self.matrix.nr_free(slot) < least {
                continue;
            }
            if let Some(cols) = self.choose(&self.free_for(id, slot), ranks, need) {
                self.put(id, slot, cols);
                return true;
            }
        }
        if self.matrix.nr_slots() < self.settings.mpl_max {
            // A new slot is all free, but for the nodes at their gang limit.
            let empty = vec![true; self.matrix.cluster().nr_columns()];
            let Some(cols) = self.choose(&self.within_gang_limit(id, empty), ranks, need) else {
                return false;
            };
            let slot = self.matrix.add_slot();
            self.put(id, slot, cols);
            return true;
        }
        false
    }

    /// The cells of `slot` job `id` may take: free, on nodes where it is
    /// not a gang too many.
    fn free_for(&self, id: JobId, slot: usize) -> Vec<bool> {
        self.within_gang_limit(id, self.matrix.free(slot))
    }

    fn choose(&self, free: &[bool], ranks: usize, need: Need) -> Option<Vec<usize>> {
        let cluster = self.matrix.cluster();
        match self.settings.policy {
            Policy::FirstFit | Policy::Scs => {
                policy::first_fit(cluster, free, need.cells, need.cap)
            }
            Policy::BestFit => policy::best_fit(cluster, free, need.cells, need.cap),
            Policy::Buddy => policy::buddy(cluster, free, ranks, need.cap),
        }
    }

    fn put(&mut self, id: JobId, slot: usize, cols: Vec<usize>) {
        self.matrix.fill_cells(
            slot,
            &cols,
            Entry {
                job: id,
                fill: false,
            },
        );
        let scs = self.settings.policy == Policy::Scs;
        let cluster = self.matrix.cluster();
        let job = self.jobs.get_mut(&id).expect("job of the table");
        job.state = JobState::Running;
        job.slot = slot;
        if scs {
            job.shares = scs::node_ranks(cluster, &cols, job.spec.ranks);
        }
        job.initial = cols.clone();
        job.cells = cols;
        job.mark(&mut self.dirty);
    }

    /// scs: back to the initial allocation. A no-op under other policies.
    fn shrink(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("job of the table");
        let grown: Vec<usize> = job
            .cells
            .iter()
            .copied()
            .filter(|c| !job.initial.contains(c))
            .collect();
        self.matrix.clear_cells(job.slot, &grown);
        job.cells = job.initial.clone();
        if !grown.is_empty() {
            job.mark(&mut self.dirty);
        }
    }

    /// scs, nobody queued: the free cells are handed out one at a time to
    /// the running jobs in turn (submission order), so each gets an equal
    /// share of them, give or take one, until no job can use more.
    fn equipartition(&mut self) {
        if self.matrix.nr_slots() == 0 {
            return;
        }
        let running: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running)
            .map(|j| j.id)
            .collect();
        let mut free = self.matrix.free(0);
        let binds = self.gang_limit_binds();
        // A job that cannot grow in a round never can later (free cells
        // only go), so each round asks only the jobs that grew in the last.
        let mut growing = running;
        while !growing.is_empty() {
            let mut grew = Vec::with_capacity(growing.len());
            for &id in &growing {
                let job = &self.jobs[&id];
                let limited;
                let mine: &[bool] = if binds {
                    limited = self.within_gang_limit(id, free.clone());
                    &limited
                } else {
                    &free
                };
                let Some(col) =
                    scs::growth_cell(self.matrix.cluster(), mine, &job.shares, &job.cells)
                else {
                    continue;
                };
                self.matrix.fill_cells(
                    0,
                    &[col],
                    Entry {
                        job: id,
                        fill: false,
                    },
                );
                free[col] = false;
                let job = self.jobs.get_mut(&id).expect("job of the table");
                let at = job.cells.partition_point(|&c| c < col);
                job.cells.insert(at, col);
                job.mark(&mut self.dirty);
                grew.push(id);
            }
            growing = grew;
        }
    }

    /// Multiple tasks: each running job, in submission order, is also placed
    /// in every other slot where all its home cells are free.
    fn add_fill(&mut self) {
        for job in self
            .jobs
            .values_mut()
            .filter(|j| j.state == JobState::Running)
        {
            for slot in 0..self.matrix.nr_slots() {
                if slot != job.slot
                    && job
                        .cells
                        .iter()
                        .all(|&c| self.matrix.get(slot, c).is_none())
                {
                    self.matrix.fill_cells(
                        slot,
                        &job.cells,
                        Entry {
                            job: job.id,
                            fill: true,
                        },
                    );
                    if job.fill_slots == 0 {
                        self.filled.push(job.id);
                    }
                    job.fill_slots += 1;
                    job.mark(&mut self.dirty);
                }
            }
        }
    }
}
