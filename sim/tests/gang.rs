//! Gang scheduling on gangd's allocator, as a specification: hand-computed
//! ends of tiny traces under each policy, and agreement with the
//! allocator itself (replaying the simulator's calls on a fresh
//! `Allocator` gives the same matrix after every call and starts the same
//! jobs).

use gang_coordinator::alloc::{Allocator, JobState, Policy, Settings};
use gang_sim::gang::{cluster, job_spec, simulate, CallKind, GangConfig};
use gang_sim::workload::Job;
use proptest::prelude::*;

fn cfg(
    nodes: u32,
    cpus: u32,
    policy: Policy,
    mpl_max: usize,
    fill: bool,
    switch_ms: f64,
) -> GangConfig {
    GangConfig {
        nodes,
        cpus_per_node: cpus,
        settings: Settings {
            policy,
            mpl_max,
            fill,
            backfill: false,
        },
        slot_ms: 100.0,
        switch_ms,
        log: true,
    }
}

/// (procs, runtime) at t = 0.
fn at_zero(jobs: &[(u32, f64)]) -> Vec<Job> {
    jobs.iter()
        .enumerate()
        .map(|(i, &(p, r))| Job::new(i as u64, 0.0, r, p, None))
        .collect()
}

fn ends(jobs: &[Job], c: &GangConfig) -> Vec<f64> {
    let run = simulate(jobs, c, &mut |_| {}).unwrap();
    run.outcomes
        .iter()
        .map(|o| (o.unwrap().end * 1e6).round() / 1e6)
        .collect()
}

#[test]
fn two_slots_share_time_equally_and_pay_the_switch() {
    let jobs = at_zero(&[(4, 10.0), (4, 10.0)]);
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::FirstFit, 2, true, 0.0)),
        vec![20.0, 20.0]
    );
    // 10 ms of every 100 ms slot lost: rate 0.5 × 0.9.
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::FirstFit, 2, true, 10.0)),
        vec![22.222222, 22.222222]
    );
}

#[test]
fn mpl_1_is_fcfs_space_sharing() {
    let jobs = at_zero(&[(4, 10.0), (4, 10.0)]);
    let run = simulate(
        &jobs,
        &cfg(1, 4, Policy::FirstFit, 1, true, 10.0),
        &mut |_| {},
    )
    .unwrap();
    let o: Vec<(f64, f64)> = run
        .outcomes
        .iter()
        .map(|o| (o.unwrap().start, o.unwrap().end))
        .collect();
    assert_eq!(
        o,
        vec![(0.0, 10.0), (10.0, 20.0)],
        "a lone slot pays no switch"
    );
}

#[test]
fn jobs_sharing_one_slot_run_at_full_speed() {
    let jobs = at_zero(&[(2, 10.0), (2, 10.0)]);
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::FirstFit, 2, true, 10.0)),
        vec![10.0, 10.0]
    );
}

#[test]
fn fill_runs_a_job_in_every_slot_where_its_cells_are_free() {
    // Slot 0: A on cpus 0-2, C on 3; slot 1: B on 0-2, C's cpu 3 free.
    let jobs = at_zero(&[(3, 10.0), (3, 10.0), (1, 10.0)]);
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::FirstFit, 2, true, 0.0)),
        vec![20.0, 20.0, 10.0]
    );
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::FirstFit, 2, false, 0.0)),
        vec![20.0, 20.0, 20.0]
    );
}

#[test]
fn buddy_rounds_a_job_up_to_a_block_and_pushes_the_next_to_a_new_slot() {
    // A (3) takes the block of 4, so B (1) needs slot 1; under first fit
    // both share slot 0.
    let jobs = at_zero(&[(3, 10.0), (1, 10.0)]);
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::Buddy, 2, true, 0.0)),
        vec![20.0, 20.0]
    );
    assert_eq!(
        ends(&jobs, &cfg(1, 4, Policy::FirstFit, 2, true, 0.0)),
        vec![10.0, 10.0]
    );
}

#[test]
fn best_fit_keeps_a_node_whole_so_a_job_runs_in_both_slots() {
    // 2 nodes × 4. A (1, long) on n0. Best fit puts B (4) on n1, C (4) in
    // slot 1 on n0, and B fills slot 1 on n1: B runs all the time. First
    // fit spreads B over n0 and n1, so it runs half the time. A runs half
    // the time until C ends at 20 (10 s done), then alone: 20 + 90.
    let jobs = at_zero(&[(1, 100.0), (4, 10.0), (4, 10.0)]);
    assert_eq!(
        ends(&jobs, &cfg(2, 4, Policy::BestFit, 2, true, 0.0)),
        vec![110.0, 10.0, 20.0]
    );
    assert_eq!(
        ends(&jobs, &cfg(2, 4, Policy::FirstFit, 2, true, 0.0)),
        vec![110.0, 20.0, 20.0]
    );
}

#[test]
fn scs_runs_a_job_on_fewer_cells_than_ranks_at_their_ratio() {
    // 8 ranks at MPL 2 on 4 cells: half speed.
    assert_eq!(
        ends(
            &at_zero(&[(8, 10.0)]),
            &cfg(1, 4, Policy::Scs, 2, true, 10.0)
        ),
        vec![20.0]
    );
    // 2 ranks start on 1 cell and grow to 2 (nobody queued): full speed.
    assert_eq!(
        ends(
            &at_zero(&[(2, 10.0)]),
            &cfg(1, 4, Policy::Scs, 2, true, 10.0)
        ),
        vec![10.0]
    );
}

#[test]
fn the_allocators_backfilling_lets_a_small_job_overtake() {
    // MPL 1: A (3) runs; B (4) waits; C (1) fits beside A only if it may
    // overtake B.
    let jobs = vec![
        Job::new(0, 0.0, 10.0, 3, None),
        Job::new(1, 1.0, 10.0, 4, None),
        Job::new(2, 2.0, 5.0, 1, None),
    ];
    let mut c = cfg(1, 4, Policy::FirstFit, 1, true, 0.0);
    assert_eq!(ends(&jobs, &c), vec![10.0, 20.0, 25.0]);
    c.settings.backfill = true;
    assert_eq!(ends(&jobs, &c), vec![10.0, 20.0, 7.0]);
}

#[test]
fn a_job_that_never_fits_is_refused_and_counted() {
    let jobs = at_zero(&[(9, 10.0), (4, 10.0)]);
    let run = simulate(
        &jobs,
        &cfg(2, 4, Policy::FirstFit, 2, true, 0.0),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(run.refused, 1);
    assert!(run.outcomes[0].is_none() && run.outcomes[1].is_some());
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

fn trace() -> impl Strategy<Value = Vec<Job>> {
    prop::collection::vec((0u32..20, 1u32..=8, 1u32..40), 1..30).prop_map(|v| {
        let mut t = 0.0;
        v.into_iter()
            .enumerate()
            .map(|(i, (gap, procs, run))| {
                t += gap as f64;
                Job::new(i as u64, t, run as f64, procs, None)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn the_simulator_and_the_allocator_agree_on_every_placement(
        jobs in trace(), policy in policy(), mpl in 1usize..=4, fill: bool, backfill: bool,
    ) {
        let mut c = cfg(2, 4, policy, mpl, fill, 5.0);
        c.settings.backfill = backfill;
        let run = simulate(&jobs, &c, &mut |_| {}).unwrap();
        let mut alloc = Allocator::new(cluster(2, 4).unwrap(), c.settings).unwrap();
        let mut ids = vec![None; jobs.len()];
        let mut running = vec![false; jobs.len()];
        for call in &run.log {
            match call.kind {
                CallKind::Submit => ids[call.job] = Some(alloc.submit(job_spec(call.job, jobs[call.job].procs)).unwrap()),
                CallKind::Finish => alloc.finish(ids[call.job].unwrap()).unwrap(),
            }
            prop_assert_eq!(&alloc.render(), &call.matrix);
            let mut started = vec![];
            for (j, id) in ids.iter().enumerate() {
                let now = id.and_then(|id| alloc.holding(id)).is_some_and(|h| h.state == JobState::Running);
                if now && !running[j] {
                    started.push(j);
                }
                running[j] = now;
            }
            prop_assert_eq!(&started, &call.started);
        }
        // Every job the allocator accepted ran to its end.
        let accepted = ids.iter().filter(|i| i.is_some()).count();
        prop_assert_eq!(accepted + run.refused, jobs.len());
        prop_assert!(run.outcomes.iter().zip(&ids).all(|(o, id)| o.is_some() == id.is_some()));
    }
}
