//! The rotation (gangd's slot clock) as a specification: what it sends to
//! which node, and when, fed with events and injected times (µs). A fake
//! view of the allocator (common/mod.rs) stands for gangd: nodes, their
//! tables, the slots holding a started job, and who runs in each slot.

mod common;

use common::{answer_all, frozen, knobs, running, show, started, Cluster, SLOT_US};
use gang_coordinator::knobs::ClusterKnobs;
use gang_coordinator::switch::rotation::{Rotation, PHASE_TIMEOUT_US};
use gang_wire::proto::{Barrier, FromAgent, Gen, JobId, NodeId};

#[test]
fn nothing_is_sent_before_the_matrix_has_a_started_job() {
    let mut r = Rotation::new();
    assert!(r.tick(0, &knobs(), &Cluster::new(2, &[])).is_empty());
    r.matrix_changed();
    let out = r.tick(1, &knobs(), &Cluster::new(2, &[]));
    assert_eq!(show(&out), ["0 Schedule 0 slots", "1 Schedule 0 slots"]);
    assert!(!r.in_switch() && r.current().is_none());
}

#[test]
fn new_tables_go_out_then_the_first_switch_freezes_slot_0_to_itself() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1])]);
    let mut r = Rotation::new();
    r.matrix_changed();
    let out = r.tick(0, &knobs(), &c);
    assert_eq!(
        show(&out),
        [
            "0 Schedule 1 slots",
            "1 Schedule 1 slots",
            "0 Freeze g1 0->0",
            "1 Freeze g1 0->0"
        ]
    );
    assert!(r.in_switch());
    assert_eq!(
        answer_all(&mut r, out, 10),
        ["0 Switch g1 0", "1 Switch g1 0"]
    );
    assert!(!r.in_switch());
    assert_eq!(r.current(), Some(0));
    let done = r.take_finished();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].gen, done[0].from_slot, done[0].to_slot),
        (Gen(1), 0, 0)
    );
    assert_eq!(r.stats().switches, 1);
    assert!(r.take_finished().is_empty(), "a record is handed out once");
}

#[test]
fn unchanged_tables_are_not_sent_again_and_force_no_switch() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    r.matrix_changed();
    assert!(r.tick(1_000, &knobs(), &c).is_empty());
}

#[test]
fn a_changed_table_goes_to_its_node_only_and_switches_at_once_to_the_slot_in_force() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0])]);
    let mut r = started(&c);
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0]), (3, 1, &[1])]);
    r.matrix_changed();
    let out = r.tick(1_000, &knobs(), &c);
    // Every node must hear which slot of its new table runs: all take part.
    assert_eq!(
        show(&out),
        ["1 Schedule 2 slots", "0 Freeze g2 0->0", "1 Freeze g2 0->0"]
    );
}

#[test]
fn a_job_placed_in_a_new_row_changes_no_table_until_it_starts() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    // Placed, not started: the matrix has a third row, empty in every
    // node's table. No node is sent anything for it.
    let placed = Cluster {
        unstarted_rows: 1,
        ..Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])])
    };
    r.matrix_changed();
    assert!(r.tick(1_000, &knobs(), &placed).is_empty());
    // Started on node 0: the rotation has three slots, every node's table
    // says so (node 1's with its third slot empty).
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1]), (3, 2, &[0])]);
    r.matrix_changed();
    assert_eq!(
        show(&r.tick(2_000, &knobs(), &c)),
        [
            "0 Schedule 3 slots",
            "1 Schedule 3 slots",
            "0 Freeze g2 0->0",
            "1 Freeze g2 0->0"
        ]
    );
}

#[test]
fn the_slot_ends_at_its_deadline_and_the_next_slot_of_the_rotation_comes() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    assert!(r.tick(SLOT_US - 1, &knobs(), &c).is_empty());
    let out = r.tick(SLOT_US, &knobs(), &c);
    assert_eq!(show(&out), ["0 Freeze g2 0->1", "1 Freeze g2 0->1"]);
    answer_all(&mut r, out, SLOT_US + 100);
    assert_eq!(r.current(), Some(1));
    // The next slot is measured from the end of the switch, and wraps.
    assert!(r.tick(2 * SLOT_US, &knobs(), &c).is_empty());
    let out = r.tick(2 * SLOT_US + 100, &knobs(), &c);
    assert_eq!(show(&out), ["0 Freeze g3 1->0", "1 Freeze g3 1->0"]);
}

#[test]
fn a_lone_slot_simply_goes_on() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1])]);
    let mut r = started(&c);
    assert!(r.tick(SLOT_US, &knobs(), &c).is_empty());
    assert!(r.tick(5 * SLOT_US, &knobs(), &c).is_empty());
    assert_eq!(r.stats().switches, 1);
}

#[test]
fn a_slot_ends_early_once_every_node_of_its_jobs_has_yielded() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    let yielded = |gen| FromAgent::Yielded {
        gen: Gen(gen),
        job: JobId(1),
    };
    // A yield for another generation is not one for the slot in force.
    assert!(r.on_agent(NodeId(0), &yielded(7), 10).is_empty());
    assert!(r.on_agent(NodeId(1), &yielded(7), 10).is_empty());
    assert!(r.tick(20, &knobs(), &c).is_empty());
    r.on_agent(NodeId(0), &yielded(1), 30);
    assert!(
        r.tick(40, &knobs(), &c).is_empty(),
        "node 1 still runs job 1"
    );
    r.on_agent(NodeId(1), &yielded(1), 50);
    let out = r.tick(60, &knobs(), &c);
    assert_eq!(show(&out), ["0 Freeze g2 0->1", "1 Freeze g2 0->1"]);
    answer_all(&mut r, out, 70);
    assert_eq!(r.stats().early_switches, 1);
}

#[test]
fn knobs_reach_every_node_between_switches_never_during_one() {
    let c = Cluster::new(2, &[(1, 0, &[0])]);
    let mut r = Rotation::new();
    r.matrix_changed();
    let out = r.tick(0, &knobs(), &c);
    assert_eq!(show(&out)[2..], ["0 Freeze g1 0->0", "1 Freeze g1 0->0"]);
    r.knobs_changed();
    assert!(r.tick(10, &knobs(), &c).is_empty(), "a switch is in flight");
    answer_all(&mut r, out, 20);
    assert_eq!(show(&r.tick(30, &knobs(), &c)), ["0 Knobs", "1 Knobs"]);
    assert!(r.tick(40, &knobs(), &c).is_empty(), "sent once");
}

#[test]
fn a_node_silent_past_the_phase_timeout_is_left_out_and_counted() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    let out = r.tick(SLOT_US, &knobs(), &c);
    assert_eq!(show(&out), ["0 Freeze g2 0->1", "1 Freeze g2 0->1"]);
    assert!(r
        .on_agent(NodeId(0), &frozen(2, 0), SLOT_US + 10)
        .is_empty());
    let deadline = SLOT_US + 200_000 + PHASE_TIMEOUT_US;
    assert!(r.tick(deadline - 1, &knobs(), &c).is_empty());
    assert_eq!(show(&r.tick(deadline, &knobs(), &c)), ["0 Switch g2 1"]);
    r.on_agent(NodeId(0), &running(2, 1), deadline + 10);
    assert_eq!(r.current(), Some(1));
    assert_eq!(r.stats().missed, 1);
    let rec = r.take_finished().pop().unwrap();
    assert_eq!(rec.failed.len(), 1);
}

#[test]
fn a_node_that_missed_the_switch_into_a_lone_slot_catches_up_alone_at_its_end() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1])]);
    let mut r = Rotation::new();
    r.matrix_changed();
    let out = r.tick(0, &knobs(), &c);
    assert_eq!(show(&out)[2..], ["0 Freeze g1 0->0", "1 Freeze g1 0->0"]);
    r.on_agent(NodeId(0), &frozen(1, 0), 10);
    let deadline = 200_000 + PHASE_TIMEOUT_US;
    assert_eq!(show(&r.tick(deadline, &knobs(), &c)), ["0 Switch g1 0"]);
    r.on_agent(NodeId(0), &running(1, 0), deadline);
    assert_eq!(r.current(), Some(0));
    let out = r.tick(deadline + SLOT_US, &knobs(), &c);
    assert_eq!(show(&out), ["1 Freeze g2 0->0"]);
    answer_all(&mut r, out, deadline + SLOT_US + 10);
    // Caught up: the lone slot goes on without switches again.
    assert!(r.tick(deadline + 3 * SLOT_US, &knobs(), &c).is_empty());
}

#[test]
fn a_lost_node_leaves_the_switch_and_gets_its_table_again_when_back() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    r.tick(SLOT_US, &knobs(), &c);
    assert!(r
        .on_agent(NodeId(0), &frozen(2, 0), SLOT_US + 10)
        .is_empty());
    assert!(r.node_lost(NodeId(1), SLOT_US + 20).is_empty());
    // The loss closed the freeze phase: node 0 alone is switched.
    assert!(r.in_switch());
    let out = r.on_agent(NodeId(0), &running(2, 1), SLOT_US + 30);
    assert!(out.is_empty() && !r.in_switch());
    assert_eq!(r.current(), Some(1));
    // Back (as gangd sees it, a new node with the same id): its table
    // goes out again though it did not change.
    r.matrix_changed();
    let out = r.tick(SLOT_US + 40, &knobs(), &c);
    assert_eq!(
        show(&out),
        ["1 Schedule 2 slots", "0 Freeze g3 1->1", "1 Freeze g3 1->1"]
    );
}

#[test]
fn frozen_and_running_outside_a_switch_are_ignored() {
    let c = Cluster::new(1, &[(1, 0, &[0])]);
    let mut r = started(&c);
    assert!(r.on_agent(NodeId(0), &frozen(1, 0), 10).is_empty());
    assert!(r.on_agent(NodeId(0), &running(1, 0), 10).is_empty());
    assert!(r.take_finished().is_empty());
}

#[test]
fn the_loop_wakes_at_the_slots_end_or_the_phase_deadline_and_never_spins() {
    let c = Cluster::new(1, &[(1, 0, &[0]), (2, 1, &[0])]);
    let mut r = Rotation::new();
    assert_eq!(r.next_wakeup(100, 0), SLOT_US);
    r.matrix_changed();
    r.tick(0, &knobs(), &c);
    // Freezing: the deadline is the drain timeout plus the phase timeout.
    assert_eq!(r.next_wakeup(100, 0), 200_000 + PHASE_TIMEOUT_US);
    assert!(r.tick(0, &knobs(), &c).is_empty());
    r.on_agent(NodeId(0), &frozen(1, 0), 5);
    r.on_agent(NodeId(0), &running(1, 0), 5);
    assert_eq!(r.next_wakeup(100, 5), SLOT_US);
    assert_eq!(r.next_wakeup(100, SLOT_US + 5), 1_000, "at least 1 ms");
}

#[test]
fn with_the_barrier_off_the_switch_goes_out_at_once() {
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    let mut r = started(&c);
    let off = ClusterKnobs {
        barrier: Barrier::Off,
        ..knobs()
    };
    let out = r.tick(SLOT_US, &off, &c);
    assert_eq!(show(&out), ["0 Switch g2 1", "1 Switch g2 1"]);
    answer_all(&mut r, out, SLOT_US + 10);
    assert_eq!(r.current(), Some(1));
    assert_eq!(r.stats().switches, 2);
}
