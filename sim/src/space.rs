//! Space sharing: FCFS and EASY backfilling on `cpus` interchangeable
//! processors (a job takes any `procs` free ones and keeps them to its end).
//!
//! Event-driven: the clock jumps to the next arrival or end; after each
//! batch of events at one instant the queue is served:
//! - FCFS starts queued jobs in order while the head fits.
//! - EASY (Lifka 1995; Mu'alem and Feitelson 2001) then gives the blocked
//!   head a reservation: the shadow time, when enough processors will be
//!   free if every running job ends at its estimate (start + requested
//!   time), and the extra processors left over then. A later job may start
//!   now if it fits and either ends (by its estimate) before the shadow
//!   time or uses only extra processors. The head's reservation is thus
//!   never delayed; [`SpaceRun::reservations`] keeps the first one each
//!   job got, so a test can check its start against it.
//!
//! Known faults: processors are a count, not a topology (a job of 3 on
//! 4-CPU nodes spans nodes freely, as under gangd's first fit); ties at one
//! instant are served ends first, then arrivals in trace order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::workload::{Job, Outcome};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    Fcfs,
    Easy,
}

/// A run's outcome per job (None: larger than the machine, refused).
#[derive(Debug)]
pub struct SpaceRun {
    pub outcomes: Vec<Option<Outcome>>,
    /// The first shadow time each job was given as the blocked head (EASY).
    pub reservations: Vec<Option<f64>>,
}

/// f64 seconds ordered for the heap (times are finite).
#[derive(Clone, Copy)]
struct T(f64);
impl PartialEq for T {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for T {}
impl PartialOrd for T {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for T {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

struct Running {
    job: usize,
    /// start + estimate.
    est_end: f64,
}

/// `jobs` sorted by submit time.
pub fn simulate(jobs: &[Job], cpus: u64, discipline: Discipline) -> SpaceRun {
    let mut outcomes = vec![None; jobs.len()];
    let mut reservations: Vec<Option<f64>> = vec![None; jobs.len()];
    let mut free = cpus;
    let mut ends: BinaryHeap<Reverse<(T, usize)>> = BinaryHeap::new();
    let mut running: Vec<Running> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut next = 0;
    loop {
        let t_arrival = jobs.get(next).map(|j| j.submit);
        let t_end = ends.peek().map(|Reverse((t, _))| t.0);
        let now = match (t_arrival, t_end) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (Some(a), Some(e)) => a.min(e),
        };
        while let Some(&Reverse((t, j))) = ends.peek() {
            if t.0 > now {
                break;
            }
            ends.pop();
            free += jobs[j].procs as u64;
            running.retain(|r| r.job != j);
        }
        while next < jobs.len() && jobs[next].submit <= now {
            if jobs[next].procs as u64 <= cpus {
                queue.push_back(next);
            }
            next += 1;
        }
        let mut start = |j: usize, free: &mut u64, running: &mut Vec<Running>| {
            *free -= jobs[j].procs as u64;
            let end = now + jobs[j].runtime;
            outcomes[j] = Some(Outcome { start: now, end });
            running.push(Running {
                job: j,
                est_end: now + jobs[j].estimate,
            });
            ends.push(Reverse((T(end), j)));
        };
        while let Some(&head) = queue.front() {
            if jobs[head].procs as u64 > free {
                break;
            }
            queue.pop_front();
            start(head, &mut free, &mut running);
        }
        if discipline == Discipline::Fcfs || queue.len() < 2 {
            if let Some(&head) = queue.front() {
                if discipline == Discipline::Easy && reservations[head].is_none() {
                    reservations[head] = Some(shadow(&running, free, jobs[head].procs, jobs).0);
                }
            }
            continue;
        }
        let head = queue[0];
        let (shadow_t, mut extra) = shadow(&running, free, jobs[head].procs, jobs);
        reservations[head].get_or_insert(shadow_t);
        let mut i = 1;
        while i < queue.len() && free > 0 {
            let j = queue[i];
            let p = jobs[j].procs as u64;
            let before_shadow = now + jobs[j].estimate <= shadow_t;
            if p <= free && (before_shadow || p <= extra) {
                if !before_shadow {
                    extra -= p;
                }
                queue.remove(i);
                start(j, &mut free, &mut running);
            } else {
                i += 1;
            }
        }
    }
    SpaceRun {
        outcomes,
        reservations,
    }
}

/// When `need` processors will be free if every running job ends at its
/// estimate, and how many more than `need` are free then.
fn shadow(running: &[Running], free: u64, need: u32, jobs: &[Job]) -> (f64, u64) {
    let mut by_end: Vec<(f64, u64)> = running
        .iter()
        .map(|r| (r.est_end, jobs[r.job].procs as u64))
        .collect();
    by_end.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut avail = free;
    for (t, p) in by_end {
        avail += p;
        if avail >= need as u64 {
            return (t, avail - need as u64);
        }
    }
    unreachable!("a queued job fits the empty machine")
}
