//! Gang scheduling on gangd's own allocator, in a fluid approximation.
//!
//! The allocator (`gang_coordinator::alloc::Allocator`, the code gangd
//! runs) decides everything about placement: which slot and cells a job
//! gets, the FCFS queue, fill placements, slice reduction, scs growth. The
//! simulator only calls `submit` at each arrival and `finish` when a job's
//! work is done, and after each instant asks every running job's
//! `holding` (slots and cells held) to set its rate of progress:
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
//! slots, exact when the slot is short against the runtimes.
//!
//! Known faults: a job that ends mid-slot frees its cells at once (gangd
//! would too, but the rotation's phase is not modelled); the switch cost is
//! one constant, with no dependence on the number of nodes; a job held in
//! every slot (fill) still pays the switch cost; memory, network and the
//! per-node gang limit's effect on the switch are not modelled.

use std::collections::VecDeque;
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

struct Live {
    job: usize,
    id: JobId,
    /// Dedicated seconds of work left.
    remaining: f64,
    rate: f64,
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
/// Each instant costs two passes over the running jobs: one advances their
/// work to now and picks out those done, one (after the allocator calls)
/// sets their rates and finds the next end.
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
        starts: vec![f64::NAN; jobs.len()],
        waiting: VecDeque::new(),
        live: Vec::new(),
        log: Vec::new(),
        call_us: Vec::with_capacity(2 * jobs.len()),
    };
    let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let (mut refused, mut ended, mut next) = (0, 0, 0);
    let mut now = 0.0f64;
    let mut t_end = f64::INFINITY;
    let mut done = vec![];
    loop {
        let t = match jobs.get(next) {
            Some(j) => j.submit.min(t_end),
            None if t_end.is_finite() => t_end,
            None => break,
        };
        // Ends first, then arrivals, as in the space-sharing simulator.
        done.clear();
        let mut i = 0;
        while i < run.live.len() {
            let l = &mut run.live[i];
            l.remaining -= l.rate * (t - now);
            if l.remaining <= 1e-9 * jobs[l.job].runtime.max(1.0) {
                done.push(run.live.swap_remove(i));
            } else {
                i += 1;
            }
        }
        now = t;
        // In the order they were started, as when the ends were found one
        // by one.
        done.sort_by_key(|l| l.job);
        for l in &done {
            run.timed(|a| a.finish(l.id))
                .context("finishing a job the allocator placed")?;
            outcomes[l.job] = Some(Outcome {
                start: run.starts[l.job],
                end: now,
            });
            ended += 1;
            if ended % 1000 == 0 {
                progress(ended);
            }
            run.admit_and_log(CallKind::Finish, l.job, now);
        }
        while next < jobs.len() && jobs[next].submit <= now {
            match run.timed(|a| a.submit(job_spec(next, jobs[next].procs))) {
                Ok(id) => {
                    run.ids[next] = Some(id);
                    run.waiting.push_back(next);
                    run.admit_and_log(CallKind::Submit, next, now);
                }
                Err(_) => refused += 1,
            }
            next += 1;
        }
        t_end = run.set_rates(now);
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
    /// The allocator's id of each submitted job.
    ids: Vec<Option<JobId>>,
    starts: Vec<f64>,
    /// Submitted and not started, in submission order.
    waiting: VecDeque<usize>,
    live: Vec<Live>,
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

    /// After an allocator call about `job`: moves the jobs the allocator
    /// has started from `waiting` to `live`, and logs the call when asked.
    fn admit_and_log(&mut self, kind: CallKind, job: usize, now: f64) {
        let started = self.admit(now);
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

    /// Moves the jobs the allocator has started from `waiting` (submission
    /// order) to `live`; returns them. Without backfilling the allocator
    /// starts jobs in that order, so the scan stops at the first one still
    /// queued.
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
            self.live.push(Live {
                job: j,
                id,
                remaining: self.jobs[j].runtime,
                rate: 0.0,
            });
            started.push(j);
        }
        started
    }

    /// Sets every running job's rate from what it holds; returns the next
    /// end (infinite when none progresses).
    fn set_rates(&mut self, now: f64) -> f64 {
        let nr_slots = self.alloc.nr_slots().max(1);
        let scs = self.cfg.settings.policy == Policy::Scs;
        let switching = if nr_slots > 1 && !scs {
            (1.0 - self.cfg.switch_ms / self.cfg.slot_ms).max(0.0)
        } else {
            1.0
        };
        let mut t_end = f64::INFINITY;
        for l in &mut self.live {
            let Some(h) = self.alloc.holding(l.id) else {
                continue;
            };
            l.rate = if scs {
                (h.cells as f64 / self.jobs[l.job].procs as f64).min(1.0)
            } else {
                h.slots as f64 / nr_slots as f64 * switching
            };
            if l.rate > 0.0 {
                t_end = t_end.min(now + l.remaining / l.rate);
            }
        }
        t_end
    }
}
