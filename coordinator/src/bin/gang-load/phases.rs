//! The measured phases of gang-load (main.rs's top comment lists them) and
//! the CSV line they fill.
//!
//! The line is filled column by column as the phases go: a phase that
//! fails (gangd never holds every node at once, a placement that does not
//! reach its nodes in time) ends the run with the columns measured so far
//! and the rest empty, and says why on stderr. That is a result too: at
//! some N, gangd does not get that far.
//!
//! Known faults: arrivals are one at a time (the front end waits for each
//! to end); the loss is node 0's, which every background job spans.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gang_wire::proto::tls::ClientTls;
use gang_wire::proto::JobId;

use crate::agents::{NodeSpec, Pool};
use crate::measure::{self, cpu_pct, ms, quantile, sample, Rng};
use crate::{frontend, progress, wait_for, Opts};

/// The CSV columns, in order.
pub const COLUMNS: &[&str] = &[
    "nodes",
    "cpus",
    "join_s",
    "threads",
    "rss_mb",
    "cpu_idle_pct",
    "cpu_steady_pct",
    "cpu_arrivals_pct",
    "switches_per_s",
    "switch_msgs_per_s",
    "switch_p50_ms",
    "switch_p99_ms",
    "place_all_ms",
    "place_p50_ms",
    "place_p99_ms",
    "accept_p50_ms",
    "accept_p99_ms",
    "arrived_jobs",
    "alloc_p50_us",
    "alloc_p99_us",
    "lost_detect_ms",
    "rejoin_ms",
    "relinks",
    "plans_made",
    "plans_reached",
    "plan_read_p50_ms",
    "plan_read_p99_ms",
    "plan_p50_ms",
    "plan_p99_ms",
    "plans_in_force",
    "plan_lead_p50_ms",
    "plan_late_reads",
];

/// The CSV line being filled.
struct Row(Vec<String>);

impl Row {
    fn index(col: &str) -> usize {
        COLUMNS
            .iter()
            .position(|c| *c == col)
            .unwrap_or_else(|| panic!("no column {col}"))
    }

    fn set(&mut self, col: &str, v: impl ToString) {
        self.0[Self::index(col)] = v.to_string();
    }

    fn is_set(&self, col: &str) -> bool {
        !self.0[Self::index(col)].is_empty()
    }

    fn num(&mut self, col: &str, x: f64) {
        self.set(
            col,
            if x.is_nan() {
                String::new()
            } else {
                format!("{x:.2}")
            },
        );
    }
}

/// Runs every phase; returns the CSV line (partial if a phase failed).
pub fn run(opts: &Opts, pid: u32, pool: &Pool, tls: &[Arc<ClientTls>]) -> Result<String> {
    let mut row = Row(vec![String::new(); COLUMNS.len()]);
    row.set("nodes", opts.nodes);
    row.set("cpus", opts.cpus);
    // Allocation, in-process on gangd's allocator (see measure.rs), first:
    // while gangd is idle, not while it switches on the same cores.
    let (alloc, _) = measure::allocation_us(opts.nodes, opts.cpus, 200, opts.nodes as u64);
    row.num("alloc_p50_us", quantile(&alloc, 0.5));
    row.num("alloc_p99_us", quantile(&alloc, 0.99));
    let mut arrivals = None;
    let outcome = phases(opts, pid, pool, tls, &mut row, &mut arrivals);
    // Threads and RSS of steady switching, or of the end if it never came.
    if let (false, Some(s)) = (row.is_set("threads"), sample(pid)) {
        row.set("threads", s.threads);
        row.num("rss_mb", s.rss_kb as f64 / 1024.0);
    }
    // Every Welcome beyond one per node and node 0's planned rejoin.
    let planned = opts.nodes as u64 + u64::from(outcome.is_ok());
    let relinks = pool.joined.load(Ordering::Relaxed).saturating_sub(planned);
    row.set("relinks", relinks);
    if relinks > 0 {
        progress(
            opts.nodes,
            &format!("{relinks} link(s) ended by gangd and joined again (see its log)"),
        );
    }
    // Timed switching: how long each plan made during the arrivals took
    // to reach every node it was offered to (gangd's log, one line per
    // plan).
    let log = std::fs::read_to_string(opts.dir.join("gangd.log"));
    if let (Ok(log), Some(window)) = (log, arrivals) {
        let reached = plans_reached(&log, window);
        if !reached.is_empty() {
            let reach: Vec<f64> = reached.iter().map(|r| r.after_ms).collect();
            let seen = pool.events.inner.lock().unwrap_or_else(|e| e.into_inner());
            // From gangd's making it to the last agent reading it (the
            // rest of the reach is the acks' way back).
            let read: Vec<f64> = reached
                .iter()
                .filter_map(|r| {
                    // The read that completed the plan's first offers
                    // (two worker threads: in order only once sorted).
                    let mut reads = seen.plans.get(&r.plan_id)?.reads.clone();
                    reads.sort_unstable();
                    let all = reads.get(r.nodes.checked_sub(1)?)?;
                    Some(all.saturating_sub(r.made_ns) as f64 / 1e6)
                })
                .collect();
            // Plans the agents first saw in the window, reached or
            // replaced before that.
            let first: Vec<FirstRead> = seen
                .plans
                .iter()
                .filter_map(|(&id, p)| {
                    Some(FirstRead {
                        id,
                        read_ns: *p.reads.iter().min()?,
                        epoch_ns: p.epoch_ns,
                        late_reads: p.late_reads,
                    })
                })
                .collect();
            drop(seen);
            // The plans of the window: how far ahead of their epoch they
            // were first read, and how many nodes read theirs after it.
            let in_window = || {
                first
                    .iter()
                    .filter(|p| (window.0..window.1).contains(&p.read_ns))
            };
            let lead: Vec<f64> = in_window()
                .map(|p| p.epoch_ns.saturating_sub(p.read_ns) as f64 / 1e6)
                .collect();
            let late: u32 = in_window().map(|p| p.late_reads).sum();
            row.num("plan_lead_p50_ms", quantile(&lead, 0.5));
            row.set("plan_late_reads", late);
            let made = in_window().count();
            row.set("plans_made", made);
            row.set("plans_in_force", plans_in_force(&first, window));
            row.set("plans_reached", reach.len());
            row.num("plan_read_p50_ms", quantile(&read, 0.5));
            row.num("plan_read_p99_ms", quantile(&read, 0.99));
            row.num("plan_p50_ms", quantile(&reach, 0.5));
            row.num("plan_p99_ms", quantile(&reach, 0.99));
        }
    }
    match outcome {
        Ok(()) => progress(opts.nodes, "done"),
        Err(e) if sample(pid).is_none() => return Err(e.context("gangd exited")),
        Err(e) => progress(
            opts.nodes,
            &format!("stopped, the rest of the line is empty: {e:#}"),
        ),
    }
    Ok(row.0.join(","))
}

/// Fills `row`; `arrivals` gets the arrival phase's start and end,
/// CLOCK_MONOTONIC ns (gangd's clock on loopback), once it ran.
fn phases(
    opts: &Opts,
    pid: u32,
    pool: &Pool,
    tls: &[Arc<ClientTls>],
    row: &mut Row,
    arrivals: &mut Option<(u64, u64)>,
) -> Result<()> {
    let n = opts.nodes;
    let sock = opts.dir.join("sock");
    let gangd = || sample(pid).context("gangd exited");

    // 1. join, idle.
    progress(n, "joining");
    let t0 = Instant::now();
    for (idx, tls) in tls.iter().enumerate() {
        pool.join(NodeSpec {
            idx,
            tls: tls.clone(),
            cpus: opts.cpus,
        });
    }
    let a = gangd()?;
    let joined = wait_for(
        "every node linked at once",
        Duration::from_secs_f64(opts.join_timeout),
        || pool.events.live.load(Ordering::Relaxed) >= n as u64 || sample(pid).is_none(),
    );
    if let Err(e) = joined {
        let b = gangd()?;
        let live = pool.events.live.load(Ordering::Relaxed);
        bail!(
            "{e}: {live} linked at the end, gangd at {:.0} % of a core",
            cpu_pct(&a, &b)
        );
    }
    gangd()?;
    let join_s = t0.elapsed().as_secs_f64();
    row.num("join_s", join_s);
    progress(n, &format!("joined in {join_s:.1} s; idle"));
    thread::sleep(Duration::from_secs_f64(opts.settle));
    let a = gangd()?;
    thread::sleep(Duration::from_secs_f64(opts.idle));
    let b = gangd()?;
    row.num("cpu_idle_pct", cpu_pct(&a, &b));

    // 2. steady: three jobs over every CPU.
    let per_node = opts.bg_per_node.unwrap_or(opts.cpus).clamp(1, opts.cpus);
    progress(
        n,
        &format!("placing three jobs of {per_node} rank(s) on every node"),
    );
    let ranks = n as u32 * per_node;
    let mut background = vec![];
    for i in 0..3 {
        let sub = frontend::submit(&sock, &format!("bg{i}"), ranks, per_node)?;
        let job = sub.job;
        wait_for("a job on every node", Duration::from_secs(60), || {
            reached(pool, job) >= ranks
        })?;
        if i == 0 {
            row.num(
                "place_all_ms",
                ms(last_spawn(pool, job).duration_since(sub.sent)),
            );
        }
        background.push(sub);
    }
    thread::sleep(Duration::from_millis(500));
    progress(n, "steady switching");
    let (f0, s0) = counts(pool);
    let a = gangd()?;
    let w0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(opts.steady));
    let w1 = Instant::now();
    let b = gangd()?;
    let (f1, s1) = counts(pool);
    let cpu_steady = cpu_pct(&a, &b);
    let secs = w1.duration_since(w0).as_secs_f64();
    let switch_ms: Vec<f64> = {
        let seen = pool.events.inner.lock().unwrap_or_else(|e| e.into_inner());
        seen.gens
            .values()
            .filter_map(|g| {
                let f = g.first_freeze.or(g.first_switch)?;
                (f >= w0 && f < w1 && g.running as usize >= n)
                    .then(|| ms(g.last_running.duration_since(f)))
            })
            .collect()
    };
    let switches_per_s = switch_ms.len() as f64 / secs;
    row.num("cpu_steady_pct", cpu_steady);
    row.set("threads", b.threads);
    row.num("rss_mb", b.rss_kb as f64 / 1024.0);
    row.num("switches_per_s", switches_per_s);
    row.num("switch_msgs_per_s", ((f1 - f0) + (s1 - s0)) as f64 / secs);
    row.num("switch_p50_ms", quantile(&switch_ms, 0.5));
    row.num("switch_p99_ms", quantile(&switch_ms, 0.99));
    progress(
        n,
        &format!("{switches_per_s:.1} switches/s, gangd at {cpu_steady:.1} % of a core"),
    );

    // 3. arrivals.
    progress(n, "jobs of 1-N nodes arriving");
    let mut rng = Rng::new(n as u64);
    let (mut place, mut accept) = (vec![], vec![]);
    let a = gangd()?;
    let from_ns = gang_wire::time::monotonic_ns();
    let end = Instant::now() + Duration::from_secs_f64(opts.arrivals);
    let mut j = 0;
    while Instant::now() < end {
        let k = rng.nodes(n);
        let ranks = k as u32 * opts.cpus;
        let sub = frontend::submit(&sock, &format!("j{j}"), ranks, opts.cpus)?;
        j += 1;
        accept.push(ms(sub.accepted.duration_since(sub.sent)));
        wait_for("an arrival on its nodes", Duration::from_secs(30), || {
            reached(pool, sub.job) >= ranks
        })?;
        place.push(ms(last_spawn(pool, sub.job).duration_since(sub.sent)));
        let gap = Duration::from_millis(opts.arrival_gap_ms);
        thread::sleep(gap);
        pool.exit_job(sub.job);
        wait_for("an arrival to end", Duration::from_secs(30), || {
            sub.ended().is_some()
        })?;
        thread::sleep(gap);
    }
    *arrivals = Some((from_ns, gang_wire::time::monotonic_ns()));
    let b = gangd()?;
    row.num("cpu_arrivals_pct", cpu_pct(&a, &b));
    row.set("arrived_jobs", j);
    row.num("place_p50_ms", quantile(&place, 0.5));
    row.num("place_p99_ms", quantile(&place, 0.99));
    row.num("accept_p50_ms", quantile(&accept, 0.5));
    row.num("accept_p99_ms", quantile(&accept, 0.99));

    // 4. loss and rejoin.
    progress(n, "node 0 goes silent");
    let joined = pool.joined.load(Ordering::Relaxed);
    let t = Instant::now();
    pool.silence(0);
    wait_for(
        "the jobs of the lost node to fail",
        Duration::from_secs(60),
        || background.iter().all(|s| s.ended().is_some()),
    )?;
    let lost = background
        .iter()
        .filter_map(|s| s.ended())
        .min()
        .map_or(f64::NAN, |e| ms(e.duration_since(t)));
    row.num("lost_detect_ms", lost);
    let t = Instant::now();
    pool.rejoin(0);
    wait_for("node 0 to join again", Duration::from_secs(60), || {
        pool.joined.load(Ordering::Relaxed) > joined
    })?;
    row.num("rejoin_ms", ms(t.elapsed()));
    Ok(())
}

/// A plan that reached every node, as gangd's log says it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reached {
    pub plan_id: u64,
    /// The nodes it was offered to.
    pub nodes: usize,
    /// When gangd made it, CLOCK_MONOTONIC ns.
    pub made_ns: u64,
    /// From then to the last node's ack.
    pub after_ms: f64,
}

/// From gangd's log, the plans made within `window` (CLOCK_MONOTONIC ns,
/// start included) that reached every node they were offered to: its lines
/// "plan ID reached every node (N) in X ms, made at T ns"
/// (switch/timed.rs). N is not checked against the cluster's size: a
/// node whose clock gangd found too rough at the time is switched by
/// command, not offered the plan.
pub fn plans_reached(log: &str, window: (u64, u64)) -> Vec<Reached> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("plan ")? + "plan ".len()..];
            let (id, rest) = rest.split_once(" reached every node (")?;
            let (n, rest) = rest.split_once(") in ")?;
            let (ms, rest) = rest.split_once(" ms, made at ")?;
            let made = rest.strip_suffix(" ns")?;
            let made_ns = made
                .parse()
                .ok()
                .filter(|t| (window.0..window.1).contains(t))?;
            Some(Reached {
                plan_id: id.parse().ok()?,
                nodes: n.parse().ok()?,
                made_ns,
                after_ms: ms.parse().ok()?,
            })
        })
        .collect()
}

/// A plan as the agents saw it: when the first of them read it, and when
/// it was to take effect.
#[derive(Clone, Copy, Debug)]
pub struct FirstRead {
    pub id: u64,
    pub read_ns: u64,
    pub epoch_ns: u64,
    /// Its first offers read after the epoch (`PlanSeen::late_reads`).
    pub late_reads: u32,
}

/// Of the plans first read within `window`, those that took effect: no
/// newer plan reached any agent before their epoch (a newer plan replaces
/// one still waiting for its epoch). On loopback an agent's first read is
/// within a write of gangd's making the plan.
pub fn plans_in_force(plans: &[FirstRead], window: (u64, u64)) -> usize {
    let mut by_id = plans.to_vec();
    by_id.sort_unstable_by_key(|p| p.id);
    // The earliest first read of any newer plan, from the newest back.
    let mut next_read = u64::MAX;
    let mut n = 0;
    for p in by_id.iter().rev() {
        if (window.0..window.1).contains(&p.read_ns) && p.epoch_ns <= next_read {
            n += 1;
        }
        next_read = next_read.min(p.read_ns);
    }
    n
}

/// How many ranks of `job` the agents' StartJobs started.
fn reached(pool: &Pool, job: JobId) -> u32 {
    let seen = pool.events.inner.lock().unwrap_or_else(|e| e.into_inner());
    seen.spawned.get(&job).map_or(0, |(ranks, _)| *ranks)
}

/// When the last StartJob of `job` arrived (called once every rank started).
fn last_spawn(pool: &Pool, job: JobId) -> Instant {
    let seen = pool.events.inner.lock().unwrap_or_else(|e| e.into_inner());
    seen.spawned
        .get(&job)
        .map_or_else(Instant::now, |(_, t)| *t)
}

fn counts(pool: &Pool) -> (u64, u64) {
    (
        pool.events.freezes.load(Ordering::Relaxed),
        pool.events.switches.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::{plans_in_force, plans_reached, FirstRead, Reached};

    #[test]
    fn a_plan_took_effect_unless_a_newer_one_came_before_its_epoch() {
        let p = |id, read_ns, epoch_ns| FirstRead {
            id,
            read_ns,
            epoch_ns,
            late_reads: 0,
        };
        // Plan 1 is replaced by plan 2 (read at 150, before 1's epoch
        // 200); 2 takes effect at 250, before 3 is read at 300; 3 is the
        // newest and stands; 0 was read before the window.
        let plans = [p(3, 300, 400), p(1, 100, 200), p(2, 150, 250), p(0, 5, 60)];
        assert_eq!(plans_in_force(&plans, (10, 1000)), 2);
        assert_eq!(plans_in_force(&plans, (0, 1000)), 3);
        assert_eq!(plans_in_force(&plans, (0, 120)), 1);
        assert_eq!(plans_in_force(&[], (0, 1000)), 0);
    }

    #[test]
    fn plan_reach_is_read_from_gangds_lines_of_the_plans_made_in_the_window() {
        let log = "16:01:02 [INFO] plan 3 reached every node (4096) in 85.2 ms, made at 70 ns\n\
                   16:01:02 [INFO] plan 2 reached every node (17) in 3.0 ms, made at 9 ns\n\
                   16:01:03 [WARN] something else\n\
                   16:01:04 [INFO] plan 4 reached every node (4090) in 120.0 ms, made at 80 ns\n\
                   16:01:04 [INFO] plan 7 reached every node (4096) in 2.0 ms, made at 100 ns\n\
                   16:01:05 [INFO] plan 5 reached every node (x) in 1.0 ms, made at 71 ns\n\
                   16:01:05 [INFO] plan 6 reached every node (4096) in 1.0 ms\n";
        let got = plans_reached(log, (10, 100));
        let want = [(3, 4096, 70, 85.2), (4, 4090, 80, 120.0)].map(
            |(plan_id, nodes, made_ns, after_ms)| Reached {
                plan_id,
                nodes,
                made_ns,
                after_ms,
            },
        );
        assert_eq!(got, want);
    }
}
