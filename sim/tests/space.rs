//! FCFS and EASY backfilling, as a specification: hand-computed schedules
//! of tiny traces, and EASY's promise as a property (a blocked head job
//! starts no later than the reservation it was first given).

use gang_sim::space::{simulate, Discipline};
use gang_sim::workload::{Job, Outcome};
use proptest::prelude::*;

fn job(id: u64, submit: f64, procs: u32, runtime: f64, estimate: f64) -> Job {
    Job::new(id, submit, runtime, procs, Some(estimate))
}

fn starts_ends(run: &[Option<Outcome>]) -> Vec<(f64, f64)> {
    run.iter()
        .map(|o| o.map(|o| (o.start, o.end)).unwrap())
        .collect()
}

/// 4 CPUs: A holds 2 until 10; B needs all 4; C needs 2 for 5 s.
fn abc(c_estimate: f64) -> Vec<Job> {
    vec![
        job(1, 0.0, 2, 10.0, 10.0),
        job(2, 1.0, 4, 10.0, 10.0),
        job(3, 2.0, 2, 5.0, c_estimate),
    ]
}

#[test]
fn fcfs_runs_jobs_in_arrival_order_even_when_a_later_one_would_fit() {
    let run = simulate(&abc(5.0), 4, Discipline::Fcfs);
    assert_eq!(
        starts_ends(&run.outcomes),
        vec![(0.0, 10.0), (10.0, 20.0), (20.0, 25.0)]
    );
}

#[test]
fn easy_backfills_a_job_that_ends_before_the_heads_reservation() {
    let run = simulate(&abc(5.0), 4, Discipline::Easy);
    assert_eq!(
        starts_ends(&run.outcomes),
        vec![(0.0, 10.0), (10.0, 20.0), (2.0, 7.0)]
    );
    assert_eq!(run.reservations[1], Some(10.0), "B is promised t = 10");
}

#[test]
fn easy_does_not_backfill_a_job_whose_estimate_passes_the_reservation() {
    // C asks for 20 s, past B's reservation at 10, and no CPU is spare then.
    let run = simulate(&abc(20.0), 4, Discipline::Easy);
    assert_eq!(
        starts_ends(&run.outcomes),
        vec![(0.0, 10.0), (10.0, 20.0), (20.0, 25.0)]
    );
}

#[test]
fn easy_backfills_a_long_job_onto_cpus_the_head_leaves_spare() {
    // 6 CPUs, A holds 4 until 10: B (4) is promised t = 10, when 6 will be
    // free, 2 of them extra; so C (2 CPUs, long) starts now although it
    // ends after the reservation.
    let jobs = vec![
        job(1, 0.0, 4, 10.0, 10.0),
        job(2, 1.0, 4, 10.0, 10.0),
        job(3, 2.0, 2, 50.0, 100.0),
    ];
    let run = simulate(&jobs, 6, Discipline::Easy);
    assert_eq!(
        starts_ends(&run.outcomes),
        vec![(0.0, 10.0), (10.0, 20.0), (2.0, 52.0)]
    );
}

#[test]
fn a_job_larger_than_the_machine_is_refused_and_blocks_nobody() {
    let jobs = vec![job(1, 0.0, 8, 10.0, 10.0), job(2, 1.0, 4, 10.0, 10.0)];
    for d in [Discipline::Fcfs, Discipline::Easy] {
        let run = simulate(&jobs, 4, d);
        assert_eq!(run.outcomes[0], None);
        assert_eq!(
            run.outcomes[1],
            Some(Outcome {
                start: 1.0,
                end: 11.0
            })
        );
    }
}

fn trace() -> impl Strategy<Value = Vec<Job>> {
    prop::collection::vec((0u32..40, 1u32..=8, 1u32..60, 1u32..4), 1..40).prop_map(|v| {
        let mut jobs: Vec<Job> = v
            .into_iter()
            .enumerate()
            .map(|(i, (gap, procs, run, over))| {
                job(i as u64, gap as f64, procs, run as f64, (run * over) as f64)
            })
            .collect();
        let mut t = 0.0;
        for j in &mut jobs {
            t += j.submit;
            j.submit = t;
        }
        jobs
    })
}

proptest! {
    #[test]
    fn easy_never_delays_the_head_jobs_reservation(jobs in trace()) {
        let run = simulate(&jobs, 8, Discipline::Easy);
        for (i, j) in jobs.iter().enumerate() {
            let o = run.outcomes[i].expect("every job fits 8 CPUs");
            prop_assert!(o.start >= j.submit);
            if let Some(r) = run.reservations[i] {
                prop_assert!(o.start <= r + 1e-9, "job {i} started at {} after its reservation {r}", o.start);
            }
        }
    }

    #[test]
    fn no_discipline_ever_uses_more_cpus_than_there_are(jobs in trace()) {
        for d in [Discipline::Fcfs, Discipline::Easy] {
            let run = simulate(&jobs, 8, d);
            let o: Vec<Outcome> = run.outcomes.iter().map(|o| o.unwrap()).collect();
            for probe in &o {
                let t = probe.start;
                let used: u32 = jobs.iter().zip(&o)
                    .filter(|(_, x)| x.start <= t && t < x.end)
                    .map(|(j, _)| j.procs)
                    .sum();
                prop_assert!(used <= 8, "{used} CPUs in use at {t}");
            }
        }
    }

    #[test]
    fn fcfs_starts_jobs_in_arrival_order(jobs in trace()) {
        let run = simulate(&jobs, 8, Discipline::Fcfs);
        let starts: Vec<f64> = run.outcomes.iter().map(|o| o.unwrap().start).collect();
        prop_assert!(starts.windows(2).all(|w| w[0] <= w[1]));
    }
}
