//! Gang scheduling on gangd's own allocator, in a fluid approximation.
//!
//! The allocator (`gang_coordinator::alloc::Allocator`, the code gangd
//! runs) decides everything about placement: which slot and cells a job
//! gets, the FCFS queue, fill placements, slice reduction, scs growth. The
//! simulator only calls `submit` at each arrival and `finish` when a job's
//! work is done, and after each call takes the jobs whose holding (slots
//! and cells held) changed, `take_changed`, to set their rate of progress:
//!
//! - first fit, best fit, buddy: the rotation visits the `nr_slots` slots
//!   in turn for `slot_ms` each, and a job runs in the slots it holds, so
//!   its rate is slots / nr_slots × (1 − switch_ms / slot_ms), the second
//!   factor being the time each switch leaves every CPU idle. A lone slot
//!   is never switched (gangd does not park a slot alone in its rotation),
//!   so it runs at rate 1.
//! - scs: one slot, no switch; a job of r ranks on c cells time-shares them
//!   with itself, rate min(1, c / r).
//!
//! Between two events (an arrival, an end) rates are constant, so the
//! next end is computed exactly: this is the fluid limit of round-robin
//! slots, exact when the slot is short against the runtimes. Ends are kept
//! in virtual time (see `simulate`), so an instant costs the allocator's
//! calls and O(log jobs) per job whose holding changed: 100,000 jobs on
//! 4096 nodes take seconds of CPU, nearly all of it in the allocator.
//!
//! Known faults: a job that ends mid-slot frees its cells at once (gangd
//! would too, but the rotation's phase is not modelled); the switch cost is
//! one constant, with no dependence on the number of nodes; a job held in
//! every slot (fill) still pays the switch cost; memory, network and the
//! per-node gang limit's effect on the switch are not modelled.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Instant;

use anyhow::{Context, Result};
use gang_coordinator::alloc::{Allocator, JobSpec, JobState, Policy, Settings};
use gang_coordinator::matrix::Cluster;
use gang_wire::proto::JobId;

use crate::workload::{Job, Outcome};

#[derive(Clone, Copy, Debug)]
pub struct GangConfig {
    pub nodes: u32,
    pub cpus_per_node: u32,
    pub settings: Settings,
    pub slot_ms: f64,
    /// CPU time lost by every CPU at each switch.
    pub switch_ms: f64,
    /// Keep [`GangRun::log`] (for tests; costs memory on long runs).
    pub log: bool,
}

/// One allocator call of a run: which job arrived or ended and when, the
/// jobs the call started, and the matrix after it (`gang matrix` text).
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub kind: CallKind,
    pub job: usize,
    pub at: f64,
    pub started: Vec<usize>,
    pub matrix: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    Submit,
    Finish,
}

#[derive(Debug)]
pub struct GangRun {
    /// Per job; None when the allocator refused it (never fits).
    pub outcomes: Vec<Option<Outcome>>,
    pub refused: usize,
    /// Allocator calls in order, when asked for.
    pub log: Vec<Call>,
    /// The allocator at the end (tests compare it with a replay).
    pub allocator: Allocator,
    /// Wall-clock µs of every submit and finish call: gangd's allocation
    /// time per decision at this cluster size.
    pub call_us: Vec<f64>,
}

/// A started job's progress, in virtual time (see [`simulate`]).
#[derive(Clone, Copy, Debug)]
struct Progress {
    /// Virtual time of the last change of `weight`.
    v0: f64,
    /// Dedicated seconds of work left at `v0`.
    left0: f64,
    /// Work per unit of virtual time: slots held, or under scs the share
    /// of its ranks' cells.
    weight: f64,
    /// Bumped at every change, so older heap entries are ignored.
    generation: u32,
    running: bool,
}

/// A heap entry: the virtual time a job ends at if nothing changes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct End {
    at: f64,
    job: usize,
    generation: u32,
}

impl Eq for End {}

impl Ord for End {
    /// Reversed: the earliest end on top of the max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.total_cmp(&self.at).then(other.job.cmp(&self.job))
    }
}

impl PartialOrd for End {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

pub fn cluster(nodes: u32, cpus_per_node: u32) -> Result<Cluster> {
    Cluster::from_shape(&vec![cpus_per_node; nodes as usize]).context("the simulated cluster")
}

pub fn job_spec(job: usize, procs: u32) -> JobSpec {
    JobSpec {
        name: format!("j{job}"),
        ranks: procs,
        per_node: None,
    }
}

/// `jobs` sorted by submit time. `progress` is called with the number of
/// jobs ended so far, now and then.
///
/// Virtual time: every job's rate is its weight (slots held; under scs its
/// cells over its ranks, at most 1) times one factor common to all, g =
/// (1 − switch_ms / slot_ms) / nr_slots (1 for a lone slot and under scs).
/// Virtual time V advances at g, so a job whose weight stays put ends at a
/// fixed V: a heap of those ends gives the next one, a change of the
/// number of slots touches no job, and after each allocator call only the
/// jobs `Allocator::take_changed` names are updated. An instant costs the
/// allocator calls plus O(log jobs) per changed job, not a pass over the
/// running jobs.
pub fn simulate(
    jobs: &[Job],
    cfg: &GangConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<GangRun> {
    let alloc = Allocator::new(cluster(cfg.nodes, cfg.cpus_per_node)?, cfg.settings)
        .context("the allocator's settings")?;
    let mut run = Run {
        jobs,
        cfg,
        alloc,
        ids: vec![None; jobs.len()],
        jobs_by_id: HashMap::new(),
        starts: vec![f64::NAN; jobs.len()],
        waiting: VecDeque::new(),
        progress: vec![
            Progress {
                v0: 0.0,
                left0: 0.0,
                weight: 0.0,
                generation: 0,
                running: false,
            };
            jobs.len()
        ],
        ends: BinaryHeap::new(),
        v: 0.0,
        log: Vec::new(),
        call_us: Vec::with_capacity(2 * jobs.len()),
    };
    let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let (mut refused, mut ended, mut next) = (0, 0, 0);
    let mut now = 0.0f64;
    let mut done = vec![];
    loop {
        let g = run.speed();
        let v_end = run.next_end();
        let t_end = v_end.map_or(f64::INFINITY, |v| now + (v - run.v).max(0.0) / g);
        let t_arrival = jobs.get(next).map_or(f64::INFINITY, |j| j.submit);
        if t_arrival.is_infinite() && t_end.is_infinite() {
            break;
        }
        if t_end <= t_arrival {
            run.v = v_end.expect("a finite end").max(run.v);
            now = t_end;
        } else {
            run.v += g * (t_arrival - now);
            now = t_arrival;
        }
        // Ends first, then arrivals, as in the space-sharing simulator; ends
        // of one instant in submission order.
        done.clear();
        while let Some(j) = run.pop_ended() {
            done.push(j);
        }
        done.sort_unstable();
        for &j in &done {
            let id = run.ids[j].expect("a started job has an id");
            run.progress[j].running = false;
            run.timed(|a| a.finish(id))
                .context("finishing a job the allocator placed")?;
            outcomes[j] = Some(Outcome {
                start: run.starts[j],
                end: now,
            });
            ended += 1;
            if ended % 1000 == 0 {
                progress(ended);
            }
            run.after_call(CallKind::Finish, j, now);
        }
        while next < jobs.len() && jobs[next].submit <= now {
            match run.timed(|a| a.submit(job_spec(next, jobs[next].procs))) {
                Ok(id) => {
                    run.ids[next] = Some(id);
                    run.jobs_by_id.insert(id, next);
                    run.waiting.push_back(next);
                    run.after_call(CallKind::Submit, next, now);
                }
                Err(_) => refused += 1,
            }
            next += 1;
        }
    }
    Ok(GangRun {
        outcomes,
        refused,
        log: run.log,
        allocator: run.alloc,
        call_us: run.call_us,
    })
}

/// The state of one simulation between instants.
struct Run<'a> {
    jobs: &'a [Job],
    cfg: &'a GangConfig,
    alloc: Allocator,
    /// The allocator's id of each submitted job, and back.
    ids: Vec<Option<JobId>>,
    jobs_by_id: HashMap<JobId, usize>,
    starts: Vec<f64>,
    /// Submitted and not started, in submission order.
    waiting: VecDeque<usize>,
    progress: Vec<Progress>,
    ends: BinaryHeap<End>,
    /// Virtual time now.
    v: f64,
    log: Vec<Call>,
    call_us: Vec<f64>,
}

impl Run<'_> {
    /// One allocator call, its wall-clock time recorded.
    fn timed<T>(&mut self, call: impl FnOnce(&mut Allocator) -> T) -> T {
        let t0 = Instant::now();
        let out = call(&mut self.alloc);
        self.call_us.push(t0.elapsed().as_secs_f64() * 1e6);
        out
    }

    /// g: virtual time per second, from the number of slots now.
    fn speed(&self) -> f64 {
        let nr_slots = self.alloc.nr_slots().max(1);
        if nr_slots == 1 || self.cfg.settings.policy == Policy::Scs {
            1.0
        } else {
            (1.0 - self.cfg.switch_ms / self.cfg.slot_ms).max(0.0) / nr_slots as f64
        }
    }

    /// The virtual time of the next end, stale heap entries dropped.
    fn next_end(&mut self) -> Option<f64> {
        while let Some(e) = self.ends.peek() {
            let p = &self.progress[e.job];
            if p.running && p.generation == e.generation {
                return Some(e.at);
            }
            self.ends.pop();
        }
        None
    }

    /// A job whose work is done by now (within 1e-9 of its runtime).
    fn pop_ended(&mut self) -> Option<usize> {
        let at = self.next_end()?;
        let e = *self.ends.peek().expect("next_end saw it");
        let left = (at - self.v) * self.progress[e.job].weight;
        if left > 1e-9 * self.jobs[e.job].runtime.max(1.0) {
            return None;
        }
        self.ends.pop();
        Some(e.job)
    }

    /// After an allocator call about `job`: moves the jobs the allocator
    /// has started from `waiting` to running, updates the jobs whose
    /// holding changed, and logs the call when asked.
    fn after_call(&mut self, kind: CallKind, job: usize, now: f64) {
        let started = self.admit(now);
        for (id, h) in self.alloc.take_changed() {
            let Some(&j) = self.jobs_by_id.get(&id) else {
                continue;
            };
            if self.progress[j].running {
                let weight = if self.cfg.settings.policy == Policy::Scs {
                    (h.cells as f64 / self.jobs[j].procs as f64).min(1.0)
                } else {
                    h.slots as f64
                };
                self.reweigh(j, weight);
            }
        }
        if self.cfg.log {
            self.log.push(Call {
                kind,
                job,
                at: now,
                started,
                matrix: self.alloc.render(),
            });
        }
    }

    /// Job `j` progresses at `weight` from now on.
    fn reweigh(&mut self, j: usize, weight: f64) {
        let p = &mut self.progress[j];
        p.left0 -= p.weight * (self.v - p.v0);
        p.v0 = self.v;
        p.weight = weight;
        p.generation += 1;
        if weight > 0.0 {
            self.ends.push(End {
                at: self.v + p.left0.max(0.0) / weight,
                job: j,
                generation: p.generation,
            });
        }
    }

    /// Moves the jobs the allocator has started from `waiting` (submission
    /// order) to running; returns them. Without backfilling the allocator
    /// starts jobs in that order, so the scan stops at the first one still
    /// queued. Their weight comes with `take_changed`.
    fn admit(&mut self, now: f64) -> Vec<usize> {
        let backfill = self.alloc.settings().backfill;
        let mut started = vec![];
        let mut i = 0;
        while i < self.waiting.len() {
            let j = self.waiting[i];
            let id = self.ids[j].expect("a submitted job has an id");
            let queued = self
                .alloc
                .holding(id)
                .is_none_or(|h| h.state == JobState::Queued);
            if queued {
                if !backfill {
                    break;
                }
                i += 1;
                continue;
            }
            self.waiting.remove(i);
            self.starts[j] = now;
            let generation = self.progress[j].generation;
            self.progress[j] = Progress {
                v0: self.v,
                left0: self.jobs[j].runtime,
                weight: 0.0,
                generation,
                running: true,
            };
            started.push(j);
        }
        started
    }
}
