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
pub fn simulate(
    jobs: &[Job],
    cfg: &GangConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<GangRun> {
    let mut alloc = Allocator::new(cluster(cfg.nodes, cfg.cpus_per_node)?, cfg.settings)
        .context("the allocator's settings")?;
    let mut ids: Vec<Option<JobId>> = vec![None; jobs.len()];
    let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut starts = vec![f64::NAN; jobs.len()];
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut live: Vec<Live> = Vec::new();
    let mut log = Vec::new();
    let mut call_us = Vec::with_capacity(2 * jobs.len());
    let (mut refused, mut ended, mut next) = (0, 0, 0);
    let mut now = 0.0f64;
    loop {
        let t_arrival = jobs.get(next).map(|j| j.submit);
        let t_end = live
            .iter()
            .filter(|l| l.rate > 0.0)
            .map(|l| now + l.remaining / l.rate)
            .fold(f64::INFINITY, f64::min);
        let t = match t_arrival {
            Some(a) => a.min(t_end),
            None if t_end.is_finite() => t_end,
            None => break,
        };
        for l in &mut live {
            l.remaining -= l.rate * (t - now);
        }
        now = t;
        // Ends first, then arrivals, as in the space-sharing simulator.
        let mut i = 0;
        while i < live.len() {
            let l = &live[i];
            if l.remaining <= 1e-9 * jobs[l.job].runtime.max(1.0) {
                let l = live.swap_remove(i);
                let t0 = Instant::now();
                alloc
                    .finish(l.id)
                    .context("finishing a job the allocator placed")?;
                call_us.push(t0.elapsed().as_secs_f64() * 1e6);
                outcomes[l.job] = Some(Outcome {
                    start: starts[l.job],
                    end: now,
                });
                ended += 1;
                if ended % 1000 == 0 {
                    progress(ended);
                }
                let started = admit(
                    &alloc,
                    &mut waiting,
                    &ids,
                    jobs,
                    &mut live,
                    &mut starts,
                    now,
                );
                if cfg.log {
                    log.push(Call {
                        kind: CallKind::Finish,
                        job: l.job,
                        at: now,
                        started,
                        matrix: alloc.render(),
                    });
                }
            } else {
                i += 1;
            }
        }
        while next < jobs.len() && jobs[next].submit <= now {
            let t0 = Instant::now();
            let submitted = alloc.submit(job_spec(next, jobs[next].procs));
            call_us.push(t0.elapsed().as_secs_f64() * 1e6);
            match submitted {
                Ok(id) => {
                    ids[next] = Some(id);
                    waiting.push_back(next);
                    let started = admit(
                        &alloc,
                        &mut waiting,
                        &ids,
                        jobs,
                        &mut live,
                        &mut starts,
                        now,
                    );
                    if cfg.log {
                        log.push(Call {
                            kind: CallKind::Submit,
                            job: next,
                            at: now,
                            started,
                            matrix: alloc.render(),
                        });
                    }
                }
                Err(_) => refused += 1,
            }
            next += 1;
        }
        set_rates(&alloc, cfg, &mut live, jobs);
    }
    Ok(GangRun {
        outcomes,
        refused,
        log,
        allocator: alloc,
        call_us,
    })
}

/// Moves the jobs the allocator has started from `waiting` (submission
/// order) to `live`; returns them. Without backfilling the allocator starts
/// jobs in that order, so the scan stops at the first one still queued.
fn admit(
    alloc: &Allocator,
    waiting: &mut VecDeque<usize>,
    ids: &[Option<JobId>],
    jobs: &[Job],
    live: &mut Vec<Live>,
    starts: &mut [f64],
    now: f64,
) -> Vec<usize> {
    let backfill = alloc.settings().backfill;
    let mut started = vec![];
    let mut i = 0;
    while i < waiting.len() {
        let j = waiting[i];
        let id = ids[j].expect("a submitted job has an id");
        let queued = alloc
            .holding(id)
            .is_none_or(|h| h.state == JobState::Queued);
        if queued {
            if !backfill {
                break;
            }
            i += 1;
            continue;
        }
        waiting.remove(i);
        starts[j] = now;
        live.push(Live {
            job: j,
            id,
            remaining: jobs[j].runtime,
            rate: 0.0,
        });
        started.push(j);
    }
    started
}

fn set_rates(alloc: &Allocator, cfg: &GangConfig, live: &mut [Live], jobs: &[Job]) {
    let nr_slots = alloc.nr_slots().max(1);
    let scs = cfg.settings.policy == Policy::Scs;
    let switching = if nr_slots > 1 && !scs {
        (1.0 - cfg.switch_ms / cfg.slot_ms).max(0.0)
    } else {
        1.0
    };
    for l in live {
        let Some(h) = alloc.holding(l.id) else {
            continue;
        };
        l.rate = if scs {
            (h.cells as f64 / jobs[l.job].procs as f64).min(1.0)
        } else {
            h.slots as f64 / nr_slots as f64 * switching
        };
    }
}
