//! The rotation under `switching = timed` (switch/timed.rs), as a
//! specification: plans instead of a switch per slot, acks, late nodes,
//! voluntary yield as an Amend, the nodes' Switched reports in the switch
//! log, and the knob switched both ways at run time. Times are µs for the
//! rotation; the cluster clock is µs × 1000 (its epoch is 0 here), so a
//! plan's boundaries read in ms.

mod common;

use std::collections::BTreeSet;

use common::{answer_all, knobs, show, started, Cluster};
use gang_coordinator::knobs::{ClusterKnobs, Switching};
use gang_coordinator::switch::planner::LinkTiming;
use gang_coordinator::switch::rotation::{ClusterView, Rotation, Table};
use gang_coordinator::switch::switch_log::{timed_line, LISTED_NODES};
use gang_coordinator::switch::timed::TimedRecord;
use gang_wire::proto::{FromAgent, Gen, JobId, NodeId, SwitchOutcome, SwitchReport};

/// A timed switch's switch-log line, parsed back.
fn timed_json(r: &TimedRecord) -> serde_json::Value {
    serde_json::from_str(&timed_line(r, LISTED_NODES)).expect("the switch log's line is JSON")
}

const MS: u64 = 1000;

/// 100 ms slots, timed.
fn timed() -> ClusterKnobs {
    ClusterKnobs {
        switching: Switching::Timed,
        ..knobs()
    }
}

fn ack(plan_id: u64) -> FromAgent {
    FromAgent::PlanAck { plan_id }
}

fn report(gen: u64, at_ns: u64, late_us: u64, outcome: SwitchOutcome) -> SwitchReport {
    SwitchReport {
        gen: Gen(gen),
        slot: 0,
        at_ns,
        late_us,
        outcome,
        drain: None,
        parked_us: 0,
        park_late_us: 0,
        lead_us: 0,
    }
}

fn switched(gen: u64, at_ns: u64, late_us: u64, outcome: SwitchOutcome) -> FromAgent {
    FromAgent::Switched {
        reports: vec![report(gen, at_ns, late_us, outcome)],
    }
}

fn owing(r: &Rotation) -> BTreeSet<NodeId> {
    r.timed().expect("timed").planner().owing()
}

/// Two nodes, jobs 1 (slot 0) and 2 (slot 1) on both.
fn two_jobs() -> Cluster {
    Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])])
}

/// Plan 0 ([0, 1] from 100 ms, generation 1) made at 0 and acked by both
/// nodes at 50 ms.
fn planned(c: &Cluster) -> Rotation {
    let mut r = Rotation::new();
    r.matrix_changed();
    r.tick(0, &timed(), c);
    for n in 0..2 {
        r.on_agent(NodeId(n), &ack(0), 50 * MS);
    }
    r
}

#[test]
fn a_matrix_change_sends_the_tables_then_a_plan_and_no_switch_per_slot() {
    let c = two_jobs();
    let mut r = Rotation::new();
    r.matrix_changed();
    let out = r.tick(0, &timed(), &c);
    assert_eq!(
        show(&out),
        [
            "0 Schedule 2 slots",
            "1 Schedule 2 slots",
            "0 Plan 0 [0, 1] g1 at 100ms from 100ms",
            "1 Plan 0 [0, 1] g1 at 100ms from 100ms",
        ]
    );
    assert!(!r.in_switch());
    for n in 0..2 {
        r.on_agent(NodeId(n), &ack(0), 50 * MS);
    }
    for t in (50..1000).step_by(10) {
        let out = r.tick(t * MS, &timed(), &c);
        assert!(out.is_empty(), "at {t} ms: {:?}", show(&out));
    }
    // The slot in force is the plan's.
    assert_eq!(r.current(), Some(0), "at 990 ms, generation 9: slot 0");
    assert_eq!(r.stats().switches, 0, "no report, no switch counted");

    // A third job: the tables, then a plan from the boundary one slot
    // ahead, starting after the slot in force, generations going on.
    let c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1]), (3, 2, &[0, 1])]);
    r.matrix_changed();
    assert_eq!(
        show(&r.tick(1000 * MS, &timed(), &c)),
        [
            "0 Schedule 3 slots",
            "1 Schedule 3 slots",
            "0 Plan 1 [2, 0, 1] g11 at 1100ms from 1100ms",
            "1 Plan 1 [2, 0, 1] g11 at 1100ms from 1100ms",
        ]
    );
    assert_eq!(r.stats().late_plans, 0);
}

#[test]
fn a_job_placed_but_not_started_makes_no_plan_and_sends_no_table() {
    let c = two_jobs();
    let mut r = planned(&c);
    let placed = Cluster {
        unstarted_rows: 1,
        ..two_jobs()
    };
    r.matrix_changed();
    for t in (60..400).step_by(10) {
        let out = r.tick(t * MS, &timed(), &placed);
        assert!(out.is_empty(), "at {t} ms: {:?}", show(&out));
    }
    assert_eq!(r.timed().unwrap().planner().stats().plans, 1);
}

#[test]
fn acks_clear_what_nodes_owe_and_stray_acks_are_counted() {
    let c = two_jobs();
    let mut r = Rotation::new();
    r.matrix_changed();
    r.tick(0, &timed(), &c);
    assert_eq!(owing(&r), [NodeId(0), NodeId(1)].into());
    r.on_agent(NodeId(0), &ack(0), 10 * MS);
    assert_eq!(owing(&r), [NodeId(1)].into());
    r.on_agent(NodeId(1), &ack(7), 10 * MS);
    r.on_agent(NodeId(1), &ack(0), 20 * MS);
    assert!(owing(&r).is_empty());
    let stats = r.timed().unwrap().planner().stats();
    assert_eq!(stats.stray_acks, 1);
}

#[test]
fn a_node_that_never_acks_is_offered_the_plan_again_at_every_boundary_and_counted() {
    let c = two_jobs();
    let mut r = Rotation::new();
    r.matrix_changed();
    r.tick(0, &timed(), &c);
    r.on_agent(NodeId(0), &ack(0), 10 * MS);
    assert!(r.tick(99 * MS, &timed(), &c).is_empty());
    assert_eq!(
        show(&r.tick(100 * MS, &timed(), &c)),
        ["1 Plan 0 [0, 1] g1 at 100ms from 200ms"]
    );
    assert_eq!(r.stats().late_plans, 1);
    assert!(r.tick(150 * MS, &timed(), &c).is_empty());
    assert_eq!(
        show(&r.tick(200 * MS, &timed(), &c)),
        ["1 Plan 0 [0, 1] g1 at 100ms from 300ms"]
    );
    assert_eq!(r.stats().late_plans, 2);
    r.on_agent(NodeId(1), &ack(0), 250 * MS);
    assert!(owing(&r).is_empty());
    assert!(r.tick(300 * MS, &timed(), &c).is_empty());
    assert_eq!(r.stats().late_plans, 2);
}

#[test]
fn once_every_node_of_the_slot_yielded_every_node_gets_one_amend() {
    let c = two_jobs();
    let mut r = planned(&c);
    let yielded = |gen| FromAgent::Yielded {
        gen: Gen(gen),
        job: JobId(1),
    };
    // Generation 1 (slot 0, job 1) runs from 100 ms to 200 ms.
    r.on_agent(NodeId(1), &yielded(7), 104 * MS);
    r.on_agent(NodeId(0), &yielded(1), 106 * MS);
    assert!(
        r.tick(108 * MS, &timed(), &c).is_empty(),
        "node 1 runs job 1"
    );
    r.on_agent(NodeId(1), &yielded(1), 110 * MS);
    // It ends as far ahead as a message to every node needs: the last
    // plan took 50 ms to reach both, so 5/4 of that + 1 ms clock error
    // (63.5 ms), longer than the slowest link's 2 × RTT 0 + 1 ms.
    assert_eq!(
        show(&r.tick(112 * MS, &timed(), &c)),
        ["0 Amend 0 g1 ends 175ms", "1 Amend 0 g1 ends 175ms"]
    );
    assert!(r.tick(112 * MS + 500, &timed(), &c).is_empty(), "once");
    assert!(r.tick(180 * MS, &timed(), &c).is_empty());
    assert_eq!(r.current(), Some(1), "generation 2 from 175.5 ms, not 200");
    assert_eq!(r.stats().early_switches, 1);
}

#[test]
fn switched_reports_make_one_record_per_generation_with_its_skew() {
    let c = two_jobs();
    let mut r = planned(&c);
    r.on_agent(
        NodeId(0),
        &switched(1, 100_000_300, 0, SwitchOutcome::OnTime),
        101 * MS,
    );
    assert!(r.take_timed().is_empty(), "node 1 has not reported");
    r.on_agent(
        NodeId(1),
        &switched(1, 100_001_500, 1, SwitchOutcome::Late),
        102 * MS,
    );
    let recs = r.take_timed();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].gen, Gen(1));
    assert_eq!(recs[0].skew_ns(), Some(1_200));
    let line = timed_json(&recs[0]);
    assert_eq!(line["switching"], "timed");
    assert_eq!(line["skew_us"], 1);
    assert_eq!(line["late_us"], 1);
    assert_eq!(line["nodes"]["1"]["outcome"], "late");
    let s = r.stats();
    assert_eq!((s.switches, s.late_switches, s.missed), (1, 1, 0));

    // A late duplicate of a closed generation is dropped.
    r.on_agent(
        NodeId(1),
        &switched(1, 100_001_500, 1, SwitchOutcome::Late),
        103 * MS,
    );
    assert!(r.take_timed().is_empty());

    // Node 1 never reports generation 2: closed 2 s after the first
    // report, node 1 missing; a drain timeout is counted.
    r.on_agent(
        NodeId(0),
        &switched(2, 200_000_000, 200_000, SwitchOutcome::TimedOut),
        201 * MS,
    );
    assert!(r.tick(2200 * MS, &timed(), &c).is_empty());
    assert!(r.take_timed().is_empty(), "2 s after the first report");
    r.tick(2201 * MS, &timed(), &c);
    let recs = r.take_timed();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].missing, [NodeId(1)]);
    assert_eq!(timed_json(&recs[0])["failed"][0]["node"], 1);
    let s = r.stats();
    assert_eq!((s.switches, s.missed, s.drain_timeouts), (2, 1, 1));
}

#[test]
fn the_knob_switches_from_commanded_to_timed_and_back_at_run_time() {
    let c = two_jobs();
    // Commanded: generation 1 into slot 0 at 0.
    let mut r = started(&c);
    // Timed: a plan from one slot ahead, after the slot in force, the
    // generations going on; no Freeze.
    assert_eq!(
        show(&r.tick(10 * MS, &timed(), &c)),
        [
            "0 Plan 0 [1, 0] g2 at 110ms from 110ms",
            "1 Plan 0 [1, 0] g2 at 110ms from 110ms",
        ]
    );
    for n in 0..2 {
        r.on_agent(NodeId(n), &ack(0), 20 * MS);
    }
    for t in (20..300).step_by(10) {
        assert!(r.tick(t * MS, &timed(), &c).is_empty(), "at {t} ms");
    }
    assert_eq!(r.current(), Some(0), "generation 3, slot 0, from 210 ms");

    // Commanded again: a switch into the slot in force at once, which the
    // nodes take as the end of their plan.
    let out = r.tick(300 * MS, &knobs(), &c);
    assert_eq!(show(&out), ["0 Freeze g4 0->0", "1 Freeze g4 0->0"]);
    answer_all(&mut r, out, 301 * MS);
    assert!(r.timed().is_none());
    assert_eq!(r.current(), Some(0));
    let out = r.tick(401 * MS, &knobs(), &c);
    assert_eq!(show(&out), ["0 Freeze g5 0->1", "1 Freeze g5 0->1"]);
    answer_all(&mut r, out, 402 * MS);

    // And timed once more: plan ids keep increasing.
    assert_eq!(
        show(&r.tick(410 * MS, &timed(), &c)),
        [
            "0 Plan 1 [0, 1] g6 at 510ms from 510ms",
            "1 Plan 1 [0, 1] g6 at 510ms from 510ms",
        ]
    );
}

#[test]
fn a_joining_node_gets_the_plan_in_force_and_a_lost_one_owes_nothing() {
    let c = two_jobs();
    let mut r = planned(&c);
    let c3 = Cluster::new(3, &[(1, 0, &[0, 1]), (2, 1, &[0, 1])]);
    r.matrix_changed();
    let out = show(&r.tick(150 * MS, &timed(), &c3));
    assert_eq!(
        out[..2],
        [
            "2 Schedule 2 slots",
            "2 Plan 0 [0, 1] g1 at 100ms from 150ms",
        ]
    );
    // Its table is new: a new plan for every node.
    assert_eq!(out[2..].len(), 3);
    assert_eq!(owing(&r), [NodeId(0), NodeId(1), NodeId(2)].into());
    r.node_lost(NodeId(2), 160 * MS);
    assert_eq!(owing(&r), [NodeId(0), NodeId(1)].into());
}

#[test]
fn a_batch_of_reports_counts_as_each_of_its_switches() {
    // Each node sends its reports of generations 1–10 in one Switched:
    // ten records, each with both nodes, as ten messages would make.
    let c = two_jobs();
    let mut r = planned(&c);
    for node in [0, 1] {
        let reports = (1..=10)
            .map(|g| report(g, g * 100 * MS + node * 1000, 0, SwitchOutcome::OnTime))
            .collect();
        r.on_agent(
            NodeId(node as u32),
            &FromAgent::Switched { reports },
            1100 * MS,
        );
    }
    let recs = r.take_timed();
    assert_eq!(
        recs.iter().map(|rec| rec.gen.0).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    assert!(recs
        .iter()
        .all(|rec| rec.nodes.len() == 2 && rec.skew_ns() == Some(1000)));
    assert_eq!(r.stats().switches, 10);
    // An empty batch is nothing.
    r.on_agent(
        NodeId(0),
        &FromAgent::Switched { reports: vec![] },
        1200 * MS,
    );
    assert!(r.take_timed().is_empty());
}

#[test]
fn a_flood_in_one_batch_is_bounded_as_one_report_at_a_time() {
    let c = two_jobs();
    let mut r = planned(&c);
    let reports = (1..=1000)
        .map(|g| report(g, g * 1_000_000, 0, SwitchOutcome::OnTime))
        .collect();
    r.on_agent(NodeId(0), &FromAgent::Switched { reports }, 60 * MS);
    assert_eq!(r.take_timed().len(), 1000 - 64, "at most 64 stay open");
}

#[test]
fn a_node_flooding_reports_cannot_grow_gangds_memory() {
    let c = two_jobs();
    let mut r = planned(&c);
    // 1000 generations reported by node 0 only: at most 64 stay open, the
    // oldest are closed (node 1 missing) to make room.
    for g in 1..=1000 {
        r.on_agent(
            NodeId(0),
            &switched(g, g * 1_000_000, 0, SwitchOutcome::OnTime),
            60 * MS,
        );
    }
    let closed = r.take_timed();
    assert_eq!(closed.len(), 1000 - 64);
    assert!(closed.iter().all(|rec| rec.missing == [NodeId(1)]));
    // An older generation than every open one, once full, is dropped.
    r.on_agent(
        NodeId(1),
        &switched(3, 0, 0, SwitchOutcome::OnTime),
        60 * MS,
    );
    r.on_agent(
        NodeId(1),
        &switched(5000, 0, 0, SwitchOutcome::OnTime),
        60 * MS,
    );
    assert_eq!(r.take_timed().len(), 1, "5000 made room by closing 937");
    assert_eq!(r.timed().unwrap().stats().stray_reports, 1);
}

#[test]
fn a_nodes_second_report_of_a_generation_is_dropped_and_the_first_stands() {
    let c = two_jobs();
    let mut r = planned(&c);
    r.on_agent(
        NodeId(0),
        &switched(1, 100_000_000, 0, SwitchOutcome::OnTime),
        101 * MS,
    );
    // Node 0 again, saying otherwise: it does not complete the record.
    r.on_agent(
        NodeId(0),
        &switched(1, 900_000_000, 800_000, SwitchOutcome::TimedOut),
        102 * MS,
    );
    assert!(r.take_timed().is_empty(), "node 1 has not reported");
    r.on_agent(
        NodeId(1),
        &switched(1, 100_000_500, 0, SwitchOutcome::OnTime),
        103 * MS,
    );
    let recs = r.take_timed();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].nodes[&NodeId(0)].at_ns, 100_000_000);
    assert_eq!(recs[0].skew_ns(), Some(500));
    assert_eq!(r.timed().unwrap().stats().stray_reports, 1);
}

fn clock(error_us: u64, synchronised: bool) -> LinkTiming {
    LinkTiming {
        rtt_ns: 0,
        clock_error_ns: error_us * 1000,
        synchronised,
    }
}

#[test]
fn a_node_whose_clock_does_not_fit_is_switched_by_command_at_every_boundary() {
    // Node 1 has not synchronised yet: it gets no plan, and a Switch into
    // the slot in force at each boundary of node 0's plan.
    let mut c = two_jobs();
    c.links.insert(NodeId(1), clock(0, false));
    let mut r = Rotation::new();
    r.matrix_changed();
    assert_eq!(
        show(&r.tick(0, &timed(), &c)),
        [
            "0 Schedule 2 slots",
            "1 Schedule 2 slots",
            "0 Plan 0 [0, 1] g1 at 100ms from 100ms",
        ]
    );
    r.on_agent(NodeId(0), &ack(0), 50 * MS);
    assert!(r.tick(99 * MS, &timed(), &c).is_empty());
    assert_eq!(show(&r.tick(100 * MS, &timed(), &c)), ["1 Switch g1 0"]);
    assert!(
        r.tick(150 * MS, &timed(), &c).is_empty(),
        "once per generation"
    );
    assert_eq!(show(&r.tick(203 * MS, &timed(), &c)), ["1 Switch g2 1"]);

    // Generation 1's record: node 0 reported, node 1 was commanded, 0 ms
    // after the boundary.
    r.on_agent(
        NodeId(0),
        &switched(1, 100_000_300, 0, SwitchOutcome::OnTime),
        101 * MS,
    );
    let recs = r.take_timed();
    assert_eq!(recs.len(), 1, "both nodes accounted for");
    assert!(recs[0].missing.is_empty());
    let line = timed_json(&recs[0]);
    assert_eq!(line["nodes"]["1"]["outcome"], "commanded");
    assert_eq!(line["nodes"]["1"]["late_us"], 0);
    assert_eq!(r.stats().commanded_switches, 1);
    assert_eq!(r.stats().missed, 0);
    assert_eq!(
        r.timed().expect("timed").commanded(),
        BTreeSet::from([NodeId(1)])
    );
}

#[test]
fn a_rough_clock_moves_a_node_to_commands_and_a_good_one_back_to_the_plan() {
    let mut c = two_jobs();
    let mut r = planned(&c);
    let knobs = ClusterKnobs {
        max_clock_error_us: 4_000,
        ..timed()
    };
    assert!(r.tick(120 * MS, &knobs, &c).is_empty());
    // Node 1's bound grows past the knob: commanded from now, switched at
    // once into the slot in force.
    c.links.insert(NodeId(1), clock(4_001, true));
    assert_eq!(show(&r.tick(130 * MS, &knobs, &c)), ["1 Switch g1 0"]);
    assert_eq!(show(&r.tick(200 * MS, &knobs, &c)), ["1 Switch g2 1"]);
    // Back under the knob but above 3/4 of it: still commanded (no flap).
    c.links.insert(NodeId(1), clock(3_500, true));
    assert_eq!(show(&r.tick(300 * MS, &knobs, &c)), ["1 Switch g3 0"]);
    // Well under: the plan in force is offered again, no more commands.
    c.links.insert(NodeId(1), clock(2_000, true));
    assert_eq!(
        show(&r.tick(310 * MS, &knobs, &c)),
        ["1 Plan 0 [0, 1] g1 at 100ms from 310ms"]
    );
    assert!(r.tick(400 * MS, &knobs, &c).is_empty());
    assert!(r.timed().expect("timed").commanded().is_empty());
}

#[test]
fn a_stepped_clock_is_switched_by_command_until_it_is_good() {
    let mut c = two_jobs();
    let mut r = planned(&c);
    c.links.insert(NodeId(0), clock(500, false));
    assert_eq!(show(&r.tick(150 * MS, &timed(), &c)), ["0 Switch g1 0"]);
    c.links.remove(&NodeId(0));
    assert_eq!(
        show(&r.tick(160 * MS, &timed(), &c)),
        ["0 Plan 0 [0, 1] g1 at 100ms from 160ms"]
    );
}

/// Node 1 unsynchronised (switched by command), node 0 on plan 0 (acked at
/// 50 ms); at 100 ms node 1 got its Switch into generation 1.
fn one_commanded(knobs: &ClusterKnobs) -> (Cluster, Rotation) {
    let mut c = two_jobs();
    c.links.insert(NodeId(1), clock(0, false));
    let mut r = Rotation::new();
    r.matrix_changed();
    r.tick(0, knobs, &c);
    r.on_agent(NodeId(0), &ack(0), 50 * MS);
    assert_eq!(show(&r.tick(100 * MS, knobs, &c)), ["1 Switch g1 0"]);
    (c, r)
}

#[test]
fn a_commanded_node_is_frozen_ahead_of_the_boundary_and_switched_once_frozen() {
    // Node 1 is switched by command. Its Freeze for generation 2 goes out
    // 20 ms (2 RTT + the park allowance) before the boundary at 200 ms; its
    // Switch once it answered Frozen and the boundary came, with the drain
    // it reported in the record.
    let (c, mut r) = one_commanded(&timed());
    assert!(r.tick(179 * MS, &timed(), &c).is_empty());
    assert_eq!(show(&r.tick(181 * MS, &timed(), &c)), ["1 Freeze g2 0->1"]);
    assert!(r.tick(190 * MS, &timed(), &c).is_empty(), "one Freeze");
    assert!(
        r.tick(201 * MS, &timed(), &c).is_empty(),
        "no Switch before Frozen"
    );
    let out = r.on_agent(NodeId(1), &common::frozen(2, 0), 205 * MS);
    assert_eq!(show(&out), ["1 Switch g2 1"], "at once: the boundary came");
    r.on_agent(
        NodeId(0),
        &switched(2, 200_000_000, 0, SwitchOutcome::OnTime),
        206 * MS,
    );
    let recs = r.take_timed();
    let line = timed_json(recs.iter().find(|r| r.gen == Gen(2)).expect("generation 2"));
    assert_eq!(line["nodes"]["1"]["outcome"], "commanded");
    assert_eq!(line["nodes"]["1"]["late_us"], 5_000);
    assert_eq!(
        line["nodes"]["1"]["parked_us"], 24_000,
        "from its Freeze at 181 ms"
    );
    assert!(
        line["nodes"]["1"]["drain"].is_object(),
        "its drain report: {line}"
    );

    // Frozen before the boundary: the Switch waits for it.
    assert_eq!(show(&r.tick(281 * MS, &timed(), &c)), ["1 Freeze g3 1->0"]);
    assert!(r
        .on_agent(NodeId(1), &common::frozen(3, 1), 290 * MS)
        .is_empty());
    assert_eq!(show(&r.tick(300 * MS, &timed(), &c)), ["1 Switch g3 0"]);
    // A Frozen of no Freeze out is dropped.
    assert!(r
        .on_agent(NodeId(1), &common::frozen(9, 1), 310 * MS)
        .is_empty());
    assert!(r.tick(310 * MS, &timed(), &c).is_empty());
}

#[test]
fn a_commanded_node_that_never_answers_frozen_is_switched_at_the_drain_timeout() {
    let knobs = ClusterKnobs {
        drain_timeout_ms: 30,
        ..timed()
    };
    let (c, mut r) = one_commanded(&knobs);
    assert_eq!(show(&r.tick(185 * MS, &knobs, &c)), ["1 Freeze g2 0->1"]);
    assert!(
        r.tick(229 * MS, &knobs, &c).is_empty(),
        "waiting for Frozen"
    );
    assert_eq!(
        show(&r.tick(230 * MS, &knobs, &c)),
        ["1 Switch g2 1"],
        "the boundary + 30 ms"
    );
    // The next boundary's Freeze comes as usual.
    assert_eq!(show(&r.tick(285 * MS, &knobs, &c)), ["1 Freeze g3 1->0"]);
}

#[test]
fn gangd_wakes_for_a_commanded_nodes_freeze() {
    let (_, r) = one_commanded(&timed());
    assert_eq!(
        r.next_wakeup(100, 120 * MS),
        60 * MS,
        "at 180 ms, not at the boundary"
    );
}

/// The cluster of `two_jobs` with an epoch set by hand and a count of the
/// planner's reads of a node's link.
struct Counted {
    inner: Cluster,
    epoch: u64,
    reads: std::cell::Cell<u64>,
}

impl ClusterView for Counted {
    fn nodes(&self) -> Vec<NodeId> {
        self.inner.nodes()
    }
    fn tables(&self) -> Vec<(NodeId, Table)> {
        self.inner.tables()
    }
    fn slots(&self) -> Vec<u32> {
        self.inner.slots()
    }
    fn running(&self, slot: u32) -> BTreeSet<(JobId, NodeId)> {
        self.inner.running(slot)
    }
    fn links_epoch(&self) -> u64 {
        self.epoch
    }
    fn link(&self, node: NodeId) -> LinkTiming {
        self.reads.set(self.reads.get() + 1);
        self.inner.link(node)
    }
}

#[test]
fn links_are_read_again_when_the_epoch_moves_or_a_second_passed_not_at_every_pass() {
    let mut c = Counted {
        inner: two_jobs(),
        epoch: 7,
        reads: Default::default(),
    };
    let knobs = ClusterKnobs {
        max_clock_error_us: 4_000,
        ..timed()
    };
    let mut r = Rotation::new();
    r.matrix_changed();
    r.tick(0, &knobs, &c);
    let first = c.reads.get();
    assert!(first >= 2, "both nodes read at the first tick");
    for ms in (10..900).step_by(10) {
        r.tick(ms * MS, &knobs, &c);
    }
    assert_eq!(c.reads.get(), first, "no read while nothing changed");

    // A node's bound grows past the knob, unannounced: seen at the next
    // refresh, a second after the last read, and switched by command.
    c.inner.links.insert(NodeId(1), clock(4_001, true));
    let out = show(&r.tick(990 * MS, &knobs, &c));
    assert!(!out.iter().any(|l| l.starts_with("1 Switch")), "{out:?}");
    assert!(
        r.timed().expect("timed").commanded().is_empty(),
        "not yet seen"
    );
    let out = show(&r.tick(1_000 * MS, &knobs, &c));
    assert!(c.reads.get() > first, "read again after a second");
    assert!(out.iter().any(|l| l.starts_with("1 Switch")), "{out:?}");
    assert_eq!(
        r.timed().expect("timed").commanded(),
        BTreeSet::from([NodeId(1)])
    );

    // A node leaves: the epoch moves and the planner forgets it at once.
    let reads = c.reads.get();
    c.inner.nodes.retain(|&n| n != NodeId(1));
    r.tick(1_010 * MS, &knobs, &c);
    assert_eq!(c.reads.get(), reads, "the epoch did not move: not seen yet");
    c.epoch += 1;
    r.tick(1_020 * MS, &knobs, &c);
    assert!(c.reads.get() > reads);
    assert!(
        r.timed().expect("timed").commanded().is_empty(),
        "node 1 gone"
    );
}

#[test]
fn when_the_last_job_ends_the_plan_ends_and_the_next_job_plans_on_from_later_generations() {
    // Node 1 switched by command, node 0 on plan 0; both jobs end at
    // 250 ms (generation 2, slot 1, in force).
    let (mut c, mut r) = one_commanded(&timed());
    c.jobs.clear();
    r.matrix_changed();
    assert_eq!(
        show(&r.tick(250 * MS, &timed(), &c)),
        ["0 Schedule 0 slots", "1 Schedule 0 slots"],
        "the tables of no slot, and no plan"
    );
    let t = r.timed().expect("timed");
    assert!(t.planner().in_force().is_none() && t.planner().pending().is_none());
    // No Freeze or Switch into a slot the nodes no longer have, no offer.
    for ms in (260..2000).step_by(10) {
        let out = r.tick(ms * MS, &timed(), &c);
        assert!(out.is_empty(), "at {ms} ms: {:?}", show(&out));
    }
    assert_eq!(
        r.timed().expect("timed").next_due_ns(2000 * MS * 1000),
        None
    );

    // A job again at 2 s: a plan from scratch, its generations after
    // plan 0's (generation 3 was its next boundary, maybe armed ahead).
    c.jobs.push((JobId(3), 0, vec![NodeId(0), NodeId(1)]));
    r.matrix_changed();
    let out = show(&r.tick(2000 * MS, &timed(), &c));
    assert_eq!(out[..2], ["0 Schedule 1 slots", "1 Schedule 1 slots"]);
    assert_eq!(out[2], "0 Plan 1 [0] g4 at 2100ms from 2100ms", "{out:?}");
}

#[test]
fn a_commanded_node_gets_no_command_into_a_slot_its_new_table_does_not_have() {
    // Jobs in slots 0, 1 and 2 on both nodes; node 1 switched by command.
    // The job of slot 2 ends at 290 ms while slot 1 (generation 2) runs and
    // node 1 holds a Freeze for generation 3 into slot 2. Node 1 applies
    // its new table of 2 slots at once (node 0 holds it until the new
    // plan's epoch), so the old plan's boundary into slot 2 at 300 ms is
    // not commanded to it (the node would refuse it: no such slot); the
    // new plan's first boundary moves it.
    let mut c = Cluster::new(2, &[(1, 0, &[0, 1]), (2, 1, &[0, 1]), (3, 2, &[0, 1])]);
    c.links.insert(NodeId(1), clock(0, false));
    let mut r = Rotation::new();
    r.matrix_changed();
    let t = timed();
    r.tick(0, &t, &c);
    r.on_agent(NodeId(0), &ack(0), 50 * MS);
    assert_eq!(show(&r.tick(100 * MS, &t, &c)), ["1 Switch g1 0"]);
    assert_eq!(show(&r.tick(181 * MS, &t, &c)), ["1 Freeze g2 0->1"]);
    r.on_agent(NodeId(1), &common::frozen(2, 0), 185 * MS);
    assert_eq!(show(&r.tick(200 * MS, &t, &c)), ["1 Switch g2 1"]);
    assert_eq!(show(&r.tick(281 * MS, &t, &c)), ["1 Freeze g3 1->2"]);
    r.on_agent(NodeId(1), &common::frozen(3, 1), 285 * MS);

    c.jobs.retain(|j| j.1 != 2);
    r.matrix_changed();
    let mut sent = vec![];
    for ms in (290..=500).step_by(5) {
        let out = r.tick(ms * MS, &t, &c);
        if show(&out).iter().any(|l| l.contains(" Plan ")) {
            r.on_agent(NodeId(0), &ack(1), ms * MS);
        }
        sent.extend(show(&out).iter().map(|l| format!("{ms}: {l}")));
        let to_node_1 = out.into_iter().filter(|(n, _)| n.0 == 1).collect();
        sent.extend(answer_all(&mut r, to_node_1, ms * MS));
    }
    assert_eq!(
        sent,
        [
            "290: 0 Schedule 2 slots",
            "290: 1 Schedule 2 slots",
            "290: 0 Plan 1 [0, 1] g4 at 400ms from 400ms",
            // Nothing at 300 ms (generation 3, slot 2) nor a Freeze from
            // slot 2: node 1's gangs of slot 1 stay parked until 400 ms.
            "400: 1 Switch g4 0",
            "480: 1 Freeze g5 0->1",
            "500: 1 Switch g5 1",
        ]
    );
    let timed = r.timed().expect("timed");
    assert_eq!(timed.stats().skipped_commands, 1, "generation 3, once");
}

/// Jobs 1..=k, job j alone in slot j - 1 on both nodes.
fn jobs_upto(k: u64) -> Cluster {
    let jobs: Vec<(u64, u32, &[u32])> =
        (1..=k).map(|j| (j, j as u32 - 1, &[0u32, 1][..])).collect();
    Cluster::new(2, &jobs)
}

#[test]
fn a_change_while_a_plan_waits_for_its_epoch_waits_with_it_so_churn_cannot_starve_a_job() {
    // A job starts every 20 ms for a second, each a matrix change. Were each
    // change to replace the plan waiting for its boundary (one slot ahead),
    // no plan would ever take effect until the churn stopped, and no job
    // started in it would run. A change waits for the plan before it to
    // take effect instead: every job is in the plan in force within two
    // slots (and one tick) of its start, and at most one plan is made per
    // slot.
    let mut r = planned(&jobs_upto(2));
    let mut started_at: Vec<(u64, u64)> = vec![]; // (jobs, at ms)
    let mut offered = BTreeSet::new();
    for t in (1000..2600).step_by(10) {
        let jobs = if t < 2000 { 3 + (t - 1000) / 20 } else { 52 };
        if started_at.last().is_none_or(|&(k, _)| k != jobs) {
            started_at.push((jobs, t));
            r.matrix_changed();
        }
        let out = r.tick(t * MS, &timed(), &jobs_upto(jobs));
        for (node, msg) in &out {
            if let gang_wire::proto::ToAgent::Plan { plan, .. } = msg {
                offered.insert(plan.id);
                r.on_agent(*node, &ack(plan.id), t * MS);
            }
        }
        let in_force = r.timed().unwrap().planner().in_force().unwrap().slots.len() as u64;
        for &(k, at) in &started_at {
            assert!(
                in_force >= k || t < at + 210,
                "at {t} ms the plan in force has {in_force} slots: job {k}, started at {at} ms, is not in it"
            );
        }
    }
    let plans = r.timed().unwrap().planner().stats().plans;
    assert!(
        plans <= 1 + 16 + 1,
        "{plans} plans for 1.6 s of 100 ms slots"
    );
    assert_eq!(
        offered.len() as u64,
        plans - 1,
        "plan 0 was offered by `planned`"
    );
    assert_eq!(
        r.timed().unwrap().planner().in_force().unwrap().slots.len(),
        52
    );
}
