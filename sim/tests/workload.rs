//! The workload: offered load and its scaling, the Lublin–Feitelson
//! generator's determinism and ranges, and the metrics of a tiny run.

use gang_sim::lublin::generate;
use gang_sim::metrics::summarise;
use gang_sim::workload::{offered_load, scale_to_load, Job, Outcome};

#[test]
fn offered_load_is_work_over_cpus_times_span() {
    // 2 jobs of 4 CPUs × 10 s submitted 20 s apart on 4 CPUs: 80 / 80.
    let jobs = vec![
        Job::new(1, 0.0, 10.0, 4, None),
        Job::new(2, 20.0, 10.0, 4, None),
    ];
    assert_eq!(offered_load(&jobs, 4), 1.0);
    let half = scale_to_load(&jobs, 4, 0.5);
    assert_eq!(half[1].submit, 40.0, "inter-arrival times doubled");
    assert!((offered_load(&half, 4) - 0.5).abs() < 1e-12);
}

#[test]
fn the_generator_is_deterministic_and_within_the_machine() {
    let a = generate(2000, 1024, 7);
    assert_eq!(a, generate(2000, 1024, 7));
    assert_ne!(a, generate(2000, 1024, 8));
    assert!(a.iter().all(|j| (1..=1024).contains(&j.procs)));
    assert!(a
        .iter()
        .all(|j| j.runtime >= 1.0 && j.runtime <= 12f64.exp() + 1.0));
    assert!(a.windows(2).all(|w| w[0].submit <= w[1].submit));
    let serial = a.iter().filter(|j| j.procs == 1).count() as f64 / 2000.0;
    assert!(
        (0.2..0.3).contains(&serial),
        "serial share {serial}, model 0.244"
    );
    let pow2 = a.iter().filter(|j| j.procs.is_power_of_two()).count() as f64 / 2000.0;
    assert!(
        pow2 > 0.75,
        "serial + power-of-two jobs {pow2}, model 0.82 or more"
    );
}

#[test]
fn metrics_of_two_jobs_by_hand() {
    let jobs = vec![
        Job::new(1, 0.0, 10.0, 2, None),
        Job::new(2, 0.0, 2.0, 2, None),
    ];
    let outcomes = vec![
        Some(Outcome {
            start: 0.0,
            end: 10.0,
        }),
        Some(Outcome {
            start: 10.0,
            end: 30.0,
        }),
    ];
    let s = summarise(&jobs, &outcomes, 4);
    assert_eq!(s.mean_response_s, 20.0);
    assert_eq!(s.p95_response_s, 30.0);
    // Slowdowns 10/10 = 1 and 30/max(2, τ = 10) = 3.
    assert_eq!(s.mean_bsld, 2.0);
    assert_eq!(s.makespan_s, 30.0);
    assert!((s.utilisation - 24.0 / 120.0).abs() < 1e-12);
}
