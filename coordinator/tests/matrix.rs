//! The allocator seen from outside, spelled out on small clusters: each
//! policy, slices, the queue, slice reduction, fill, refusals, suspension,
//! the node tables. Property tests are in matrix_props.rs.

use gang_coordinator::alloc::{
    AllocError, Allocator, JobSpec, JobState, JobView, Policy, Settings,
};
use gang_coordinator::matrix::{Cell, Cluster, NodeSpec};
use gang_wire::proto::JobId;

/// Nodes named a, b, c, ... with these CPU counts, no housekeeping CPUs.
fn cluster(shape: &[u32]) -> Cluster {
    Cluster::new(
        shape
            .iter()
            .enumerate()
            .map(|(i, &n)| NodeSpec {
                id: i as u32,
                name: ((b'a' + i as u8) as char).to_string(),
                nr_cpus: n,
                housekeeping: vec![],
            })
            .collect(),
    )
    .unwrap()
}

fn allocator(shape: &[u32], policy: Policy, mpl_max: usize, fill: bool) -> Allocator {
    Allocator::new(
        cluster(shape),
        Settings {
            policy,
            mpl_max,
            fill,
            backfill: false,
        },
    )
    .unwrap()
}

fn job(name: &str, ranks: u32) -> JobSpec {
    JobSpec {
        name: name.into(),
        ranks,
        per_node: None,
    }
}

fn submit(a: &mut Allocator, name: &str, ranks: u32) -> JobId {
    a.submit(job(name, ranks)).unwrap()
}

/// "a:0 a:1 b:3" for a list of cells.
fn names(a: &Allocator, cells: &[Cell]) -> String {
    let node = |id| a.cluster().node(id).unwrap().name.clone();
    cells
        .iter()
        .map(|c| format!("{}:{}", node(c.node), c.cpu))
        .collect::<Vec<_>>()
        .join(" ")
}

fn view(a: &Allocator, id: JobId) -> JobView {
    a.job(id).unwrap()
}

/// (home slot, cells) of a job.
fn at(a: &Allocator, id: JobId) -> (usize, String) {
    let v = view(a, id);
    (v.slot.expect("placed"), names(a, &v.cells))
}

fn home(slot: usize, cells: &str) -> (usize, String) {
    (slot, cells.to_string())
}

// ---- the policies on 2 nodes × 4 CPUs -------------------------------------

#[test]
fn first_fit_takes_the_first_free_cells_slot_by_slot() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 3, false);
    let j1 = submit(&mut a, "j1", 3);
    let j2 = submit(&mut a, "j2", 3);
    let j3 = submit(&mut a, "j3", 3);
    let j4 = submit(&mut a, "j4", 2);
    assert_eq!(at(&a, j1), home(0, "a:0 a:1 a:2"));
    assert_eq!(at(&a, j2), home(0, "a:3 b:0 b:1"));
    assert_eq!(
        at(&a, j3),
        home(1, "a:0 a:1 a:2"),
        "two cells left in slot 0: a new slot"
    );
    assert_eq!(at(&a, j4), home(0, "b:2 b:3"), "the first slot with room");
    assert_eq!(
        a.render(),
        "slot  a:0  a:1  a:2  a:3  b:0  b:1  b:2  b:3\n\
         \x20  0    1    1    1    2    2    2    4    4\n\
         \x20  1    3    3    3    .    .    .    .    .\n"
    );
    // Rank i on the i-th cell.
    assert_eq!(names(&a, &view(&a, j2).rank_cells), "a:3 b:0 b:1");
}

#[test]
fn best_fit_keeps_a_job_on_one_node_when_one_can_take_it() {
    let mut a = allocator(&[4, 4], Policy::BestFit, 3, false);
    let j1 = submit(&mut a, "j1", 2);
    let j2 = submit(&mut a, "j2", 3);
    let j3 = submit(&mut a, "j3", 2);
    let j4 = submit(&mut a, "j4", 1);
    assert_eq!(at(&a, j1), home(0, "a:0 a:1"));
    // First fit would take a:2 a:3 b:0; node b alone holds three.
    assert_eq!(at(&a, j2), home(0, "b:0 b:1 b:2"));
    // Node a has exactly two free: nothing is left over there.
    assert_eq!(at(&a, j3), home(0, "a:2 a:3"));
    assert_eq!(at(&a, j4), home(0, "b:3"));
    assert_eq!(a.nr_slots(), 1);

    let mut f = allocator(&[4, 4], Policy::FirstFit, 3, false);
    submit(&mut f, "j1", 2);
    let j2 = submit(&mut f, "j2", 3);
    assert_eq!(at(&f, j2), home(0, "a:2 a:3 b:0"));
}

#[test]
fn buddy_gives_aligned_power_of_two_blocks_that_coalesce() {
    let mut a = allocator(&[4, 4], Policy::Buddy, 2, false);
    let j1 = submit(&mut a, "j1", 3);
    let j2 = submit(&mut a, "j2", 1);
    let j3 = submit(&mut a, "j3", 2);
    let j4 = submit(&mut a, "j4", 1);
    assert_eq!(
        at(&a, j1),
        home(0, "a:0 a:1 a:2 a:3"),
        "3 ranks round up to a block of 4"
    );
    assert_eq!(
        names(&a, &view(&a, j1).rank_cells),
        "a:0 a:1 a:2",
        "a:3 stays idle"
    );
    assert_eq!(at(&a, j2), home(0, "b:0"));
    assert_eq!(
        at(&a, j3),
        home(0, "b:2 b:3"),
        "b:1 is a block of 1; the 2-block comes from b:2-3"
    );
    assert_eq!(at(&a, j4), home(0, "b:1"));
    // b:0 and b:1 free again coalesce into a 2-block.
    let j5 = submit(&mut a, "j5", 2);
    assert_eq!(
        at(&a, j5),
        home(1, "a:0 a:1"),
        "no 2-block free in slot 0 yet"
    );
    a.finish(j5).unwrap();
    a.finish(j2).unwrap();
    a.finish(j4).unwrap();
    let j6 = submit(&mut a, "j6", 2);
    assert_eq!(at(&a, j6), home(0, "b:0 b:1"));
}

#[test]
fn buddy_refuses_a_block_larger_than_the_cluster() {
    let mut a = allocator(&[3, 3], Policy::Buddy, 2, false);
    let e = a.submit(job("lu", 5)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job \"lu\" of 5 ranks needs a block of 8 CPUs under the buddy policy (rounded up to a power of two) but the cluster has 6 gang CPUs"
    );
    // The same job fits the other policies.
    let mut f = allocator(&[3, 3], Policy::FirstFit, 2, false);
    assert!(f.submit(job("lu", 5)).is_ok());
}

/// SCS, MPL 4: jobs start on ⌈ranks / 4⌉ cells, grow into free cells of
/// their own nodes while nobody waits, shrink back when a newcomer does not
/// fit.
#[test]
fn scs_starts_small_grows_by_equipartition_and_shrinks_for_newcomers() {
    let mut a = allocator(&[4, 4], Policy::Scs, 4, false);
    let j1 = submit(&mut a, "j1", 8);
    let v = view(&a, j1);
    assert_eq!(
        names(&a, &v.initial),
        "a:0 a:1",
        "8 ranks, at most 4 per CPU"
    );
    // Nobody queued: j1 grows, but only on node a, where its ranks live.
    assert_eq!(names(&a, &v.cells), "a:0 a:1 a:2 a:3");
    assert_eq!(names(&a, &v.rank_cells), "a:0 a:0 a:1 a:1 a:2 a:2 a:3 a:3");

    let j2 = submit(&mut a, "j2", 4);
    assert_eq!(names(&a, &view(&a, j2).initial), "b:0");
    assert_eq!(names(&a, &view(&a, j2).cells), "b:0 b:1 b:2 b:3");

    // 16 ranks need 4 cells; none free: everyone shrinks back, then j3 fits.
    let j3 = submit(&mut a, "j3", 16);
    assert_eq!(names(&a, &view(&a, j3).cells), "a:2 a:3 b:1 b:2");
    assert_eq!(names(&a, &view(&a, j1).cells), "a:0 a:1");
    assert_eq!(
        names(&a, &view(&a, j2).cells),
        "b:0 b:3",
        "the one free cell goes to j2, the only job that can use it"
    );
    assert_eq!(a.nr_slots(), 1, "scs shares space only");

    let j4 = submit(&mut a, "j4", 4);
    assert_eq!(
        names(&a, &view(&a, j4).cells),
        "b:3",
        "j2 shrank to make room"
    );
    let j5 = submit(&mut a, "j5", 4);
    assert_eq!(view(&a, j5).state, JobState::Queued);

    // j3 ends: j5 starts on one cell, then the rest is shared out again.
    a.finish(j3).unwrap();
    assert_eq!(names(&a, &view(&a, j5).initial), "a:2");
    assert_eq!(names(&a, &view(&a, j1).cells), "a:0 a:1 a:3");
    assert_eq!(names(&a, &view(&a, j2).cells), "b:0 b:1");
    assert_eq!(names(&a, &view(&a, j4).cells), "b:2 b:3");
    assert_eq!(names(&a, &view(&a, j5).cells), "a:2");
}

// ---- slices, the queue, slice reduction ------------------------------------

#[test]
fn beyond_mpl_max_slots_jobs_queue_first_come_first_served() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 2, false);
    let j1 = submit(&mut a, "j1", 6);
    let j2 = submit(&mut a, "j2", 6);
    let j3 = submit(&mut a, "j3", 6);
    let j4 = submit(&mut a, "j4", 2);
    assert_eq!((at(&a, j1).0, at(&a, j2).0, a.nr_slots()), (0, 1, 2));
    assert_eq!(view(&a, j3).state, JobState::Queued);
    // j4 would fit slot 0, but j3 came first.
    assert_eq!(view(&a, j4).queue_position, Some(1));
    assert_eq!(a.queue(), [j3, j4]);

    a.finish(j1).unwrap();
    assert_eq!(
        at(&a, j3),
        home(1, "a:0 a:1 a:2 a:3 b:0 b:1"),
        "slot 0 emptied, removed, j3 in a new slot"
    );
    assert_eq!(at(&a, j2).0, 0);
    assert_eq!(at(&a, j4), home(0, "b:2 b:3"));
    assert!(a.queue().is_empty());
}

#[test]
fn backfill_lets_a_small_job_pass_a_blocked_one() {
    let settings = Settings {
        policy: Policy::FirstFit,
        mpl_max: 2,
        fill: false,
        backfill: true,
    };
    let mut a = Allocator::new(cluster(&[4, 4]), settings).unwrap();
    submit(&mut a, "j1", 6);
    submit(&mut a, "j2", 6);
    let j3 = submit(&mut a, "j3", 6);
    let j4 = submit(&mut a, "j4", 2);
    assert_eq!(view(&a, j3).state, JobState::Queued);
    assert_eq!(at(&a, j4), home(0, "b:2 b:3"));
}

#[test]
fn slice_reduction_closes_gaps_and_jobs_keep_their_cells() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 4, false);
    let j1 = submit(&mut a, "j1", 8);
    let j2 = submit(&mut a, "j2", 5);
    let j3 = submit(&mut a, "j3", 8);
    let j4 = submit(&mut a, "j4", 2);
    assert_eq!([at(&a, j2).0, at(&a, j3).0, at(&a, j4).0], [1, 2, 1]);
    let cells3 = view(&a, j3).rank_cells;
    a.finish(j1).unwrap();
    assert_eq!(a.nr_slots(), 2);
    assert_eq!([at(&a, j2).0, at(&a, j3).0, at(&a, j4).0], [0, 1, 0]);
    assert_eq!(view(&a, j3).rank_cells, cells3);
    a.finish(j2).unwrap();
    a.finish(j4).unwrap();
    assert_eq!(a.nr_slots(), 1);
    assert_eq!(at(&a, j3).0, 0);
}

// ---- fill (multiple tasks) --------------------------------------------------

#[test]
fn fill_places_a_job_again_where_its_cells_are_free_and_gives_way() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 3, true);
    submit(&mut a, "j1", 4);
    submit(&mut a, "j2", 6);
    submit(&mut a, "j3", 2);
    let j4 = submit(&mut a, "j4", 2);
    // j4 (b:2 b:3 in slot 0) finds the same cells free in slot 1.
    assert_eq!(view(&a, j4).slots, [0, 1]);
    assert_eq!(
        a.render(),
        "slot  a:0  a:1  a:2  a:3  b:0  b:1  b:2  b:3\n\
         \x20  0    1    1    1    1    3    3    4    4\n\
         \x20  1    2    2    2    2    2    2    4    4\n"
    );
    // A newcomer takes those cells: the extra placement gives way.
    let j5 = submit(&mut a, "j5", 2);
    assert_eq!(at(&a, j5), home(1, "b:2 b:3"));
    assert_eq!(view(&a, j4).slots, [0]);
    assert_eq!(a.nr_slots(), 2);

    // Without fill, j4 runs in slot 0 only.
    let mut b = allocator(&[4, 4], Policy::FirstFit, 3, false);
    for (n, r) in [("j1", 4), ("j2", 6), ("j3", 2)] {
        submit(&mut b, n, r);
    }
    let j4 = submit(&mut b, "j4", 2);
    assert_eq!(view(&b, j4).slots, [0]);
}

#[test]
fn a_slot_held_only_by_fill_placements_is_removed() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 3, true);
    submit(&mut a, "j1", 6);
    let j2 = submit(&mut a, "j2", 4);
    let j3 = submit(&mut a, "j3", 2);
    assert_eq!((at(&a, j2).0, at(&a, j3).0), (1, 0));
    assert_eq!(view(&a, j3).slots, [0, 1], "b:2 b:3 are free in slot 1 too");
    // j2 ends: slot 1 holds only j3's extra placement, which keeps no slot.
    a.finish(j2).unwrap();
    assert_eq!(a.nr_slots(), 1);
    assert_eq!(view(&a, j3).slots, [0]);
}

// ---- refusals ---------------------------------------------------------------

#[test]
fn jobs_that_could_never_run_are_refused_with_the_reason() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 2, false);
    let e = a.submit(job("big", 12)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job \"big\" needs 12 CPUs but the cluster has 8 gang CPUs"
    );
    let e = a
        .submit(JobSpec {
            name: "wide".into(),
            ranks: 6,
            per_node: Some(2),
        })
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "job \"wide\" needs 6 CPUs at most 2 per node, but at that limit the cluster's nodes hold only 4"
    );
    assert!(matches!(
        a.submit(job("none", 0)),
        Err(AllocError::NoRanks { .. })
    ));
    assert!(matches!(
        a.submit(job("a/b", 1)),
        Err(AllocError::BadName { .. })
    ));
    assert!(matches!(
        a.submit(job("", 1)),
        Err(AllocError::BadName { .. })
    ));
    assert!(a.jobs().is_empty(), "a refused job leaves no trace");

    let j = submit(&mut a, "lu", 2);
    let e = a.submit(job("lu", 2)).unwrap_err();
    assert_eq!(
        e,
        AllocError::DuplicateName {
            name: "lu".into(),
            job: j
        }
    );

    let mut s = allocator(&[4, 4], Policy::Scs, 4, false);
    let e = s.submit(job("huge", 40)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job \"huge\" needs at least 10 CPUs under scs (40 ranks, at most 4 per CPU) but the cluster has 8 gang CPUs"
    );
    assert!(
        s.submit(job("fine", 32)).is_ok(),
        "32 ranks on 8 CPUs is MPL 4"
    );
}

#[test]
fn a_per_node_limit_spreads_ranks() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 2, false);
    let j = a
        .submit(JobSpec {
            name: "w".into(),
            ranks: 4,
            per_node: Some(2),
        })
        .unwrap();
    assert_eq!(at(&a, j), home(0, "a:0 a:1 b:0 b:1"));
}

#[test]
fn settings_and_policy_knobs_are_checked() {
    assert_eq!("best_fit\n".parse::<Policy>().unwrap(), Policy::BestFit);
    let e = "worst_fit".parse::<Policy>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown policy \"worst_fit\": valid policies are first_fit, best_fit, buddy, scs"
    );
    for p in Policy::ALL {
        assert_eq!(p.to_string().parse::<Policy>().unwrap(), p);
    }
    let bad = Settings {
        mpl_max: 17,
        ..Settings::default()
    };
    let e = Allocator::new(cluster(&[2]), bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "mpl_max must be 1 to 16 (a node's slot table holds 16 slots), not 17"
    );
    assert!(Allocator::new(
        cluster(&[2]),
        Settings {
            mpl_max: 0,
            ..Settings::default()
        }
    )
    .is_err());
}

// ---- suspension --------------------------------------------------------------

#[test]
fn a_suspended_job_keeps_its_cells_and_leaves_the_rotation() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 3, true);
    let j1 = submit(&mut a, "j1", 8);
    let j2 = submit(&mut a, "j2", 4);
    assert_eq!(at(&a, j2), home(1, "a:0 a:1 a:2 a:3"));
    assert_eq!(a.rotation(), [0, 1]);
    a.suspend(j1).unwrap();
    assert_eq!(view(&a, j1).state, JobState::Suspended);
    assert_eq!(at(&a, j1), home(0, "a:0 a:1 a:2 a:3 b:0 b:1 b:2 b:3"));
    assert_eq!(a.rotation(), [1], "slot 0 has nothing to run");
    assert!(a.node_schedules().iter().all(|n| n.slots[0].is_empty()));
    // Its cells stay reserved: a newcomer cannot take slot 0.
    let j3 = submit(&mut a, "j3", 4);
    assert_eq!(at(&a, j3), home(1, "b:0 b:1 b:2 b:3"));
    a.resume(j1).unwrap();
    assert_eq!(a.rotation(), [0, 1]);
    assert_eq!(at(&a, j1).1, "a:0 a:1 a:2 a:3 b:0 b:1 b:2 b:3");

    assert_eq!(
        a.resume(j1),
        Err(AllocError::NotSuspended {
            job: j1,
            state: JobState::Running
        })
    );
    let j4 = submit(&mut a, "j4", 8);
    assert_eq!(at(&a, j4).0, 2);
    let j5 = submit(&mut a, "j5", 8);
    assert_eq!(view(&a, j5).state, JobState::Queued);
    let e = a.suspend(j5).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("job {j5} is queued; only a running job can be suspended")
    );
    assert_eq!(
        a.finish(JobId(99)),
        Err(AllocError::NoSuchJob { job: JobId(99) })
    );
    // A queued job can be cancelled.
    a.finish(j5).unwrap();
    assert!(a.queue().is_empty());
}

// ---- the node tables -------------------------------------------------------

#[test]
fn each_node_gets_its_columns_by_gang_name_with_its_ranks() {
    let mut a = allocator(&[4, 4], Policy::FirstFit, 2, false);
    submit(&mut a, "lu", 6);
    submit(&mut a, "cg", 2);
    submit(&mut a, "ep", 3);
    let b = a.node_schedule(1).unwrap();
    assert_eq!(b.name, "b");
    let slot = |s: usize| -> Vec<(String, String)> {
        b.slots[s]
            .iter()
            .map(|p| (p.gang.clone(), p.cpulist()))
            .collect()
    };
    assert_eq!(
        slot(0),
        [
            ("lu".to_string(), "0-1".to_string()),
            ("cg".to_string(), "2-3".to_string())
        ]
    );
    assert!(
        slot(1).is_empty(),
        "ep is on node a only, but slot 1 exists on b too"
    );
    let lu = &b.jobs[0];
    assert_eq!(lu.name, "lu");
    let ranks: Vec<(u32, u32)> = lu.ranks.iter().map(|r| (r.rank, r.cpu)).collect();
    assert_eq!(ranks, [(4, 0), (5, 1)]);
}

#[test]
fn housekeeping_cpus_are_never_cells() {
    let c = Cluster::new(vec![NodeSpec {
        id: 0,
        name: "a".into(),
        nr_cpus: 4,
        housekeeping: vec![0],
    }])
    .unwrap();
    let mut a = Allocator::new(c, Settings::default()).unwrap();
    let e = a.submit(job("x", 4)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job \"x\" needs 4 CPUs but the cluster has 3 gang CPUs"
    );
    let j = submit(&mut a, "y", 3);
    assert_eq!(at(&a, j), home(0, "a:1 a:2 a:3"));
}
