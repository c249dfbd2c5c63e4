//! gangd's slot planner (switch/planner.rs), as a specification: where a
//! new plan takes effect, who owes an ack, what happens to a late node, a
//! joining node, a lost node; then properties over any links and times.

use gang_coordinator::switch::planner::{
    AmendRefused, Change, LinkTiming, Offer, Planner, MAX_FANOUT_NS, REACH_WINDOW,
};
use gang_wire::plan::{PlanError, PlannedSlot};
use gang_wire::proto::{Gen, NodeId};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn change(slots: &[u32], slot_ms: u32) -> Change {
    Change {
        slots: slots.iter().map(|&slot| PlannedSlot { slot }).collect(),
        slot_ms,
    }
}

fn timing(rtt_ms: u64, err_ms: u64) -> LinkTiming {
    LinkTiming {
        rtt_ns: rtt_ms * MS,
        clock_error_ns: err_ms * MS,
        synchronised: true,
    }
}

/// Nodes 1, 2, 3 (RTT 1 ms, error 0.5 ms), first plan [0, 1] of 100 ms
/// made at 0 and acked by everyone, in force from 100 ms.
fn running() -> Planner {
    let mut p = Planner::new(Gen(5));
    for n in 1..=3 {
        p.timing(
            NodeId(n),
            LinkTiming {
                rtt_ns: MS,
                clock_error_ns: MS / 2,
                synchronised: true,
            },
        );
    }
    p.change(change(&[0, 1], 100), 0).unwrap();
    for n in 1..=3 {
        p.on_ack(NodeId(n), 0, 0);
    }
    assert_eq!(p.on_tick(100 * MS), vec![]);
    p
}

fn nodes_of(out: &[(NodeId, Offer)]) -> Vec<u32> {
    out.iter().map(|(n, _)| n.0).collect()
}

#[test]
fn the_first_plan_starts_one_slot_ahead_with_the_planners_generation() {
    let p = running();
    let plan = p.in_force().unwrap();
    assert_eq!(
        (plan.id, plan.epoch_ns, plan.first_gen),
        (0, 100 * MS, Gen(5))
    );
    assert_eq!(p.pending(), None);
    assert_eq!(p.stats().late_nodes, 0);
}

#[test]
fn a_change_is_offered_to_every_node_for_the_first_boundary_past_the_margin() {
    let mut p = running();
    // At 150 ms the margin is one slot (100 ms > 2 × 1 ms + 0.5 ms): the
    // boundary at or after 250 ms is 300 ms, where generation 7 starts.
    let out = p.change(change(&[1, 0, 2], 100), 150 * MS).unwrap();
    assert_eq!(nodes_of(&out), [1, 2, 3]);
    let plan = &out[0].1.plan;
    assert_eq!(
        (plan.id, plan.epoch_ns, plan.first_gen),
        (1, 300 * MS, Gen(7))
    );
    assert!(out.iter().all(|(_, o)| o.effective_ns == 300 * MS));
    assert_eq!(p.in_force().unwrap().id, 0, "the old plan runs until then");
}

#[test]
fn a_slow_link_pushes_the_activation_further() {
    let mut p = running();
    p.timing(NodeId(2), timing(80, 50)); // 2 × 80 + 50 = 210 ms
    let out = p.change(change(&[0], 100), 150 * MS).unwrap();
    assert_eq!(out[0].1.plan.epoch_ns, 400 * MS, "first boundary ≥ 360 ms");
}

#[test]
fn the_plan_takes_effect_at_its_boundary_when_everyone_acked() {
    let mut p = running();
    p.change(change(&[1], 50), 150 * MS).unwrap();
    for n in 1..=3 {
        p.on_ack(NodeId(n), 1, 0);
    }
    assert!(p.owing().is_empty());
    assert_eq!(p.on_tick(299 * MS), vec![]);
    assert_eq!(p.in_force().unwrap().id, 0);
    assert_eq!(p.on_tick(300 * MS), vec![]);
    assert_eq!(p.in_force().unwrap().id, 1);
    assert_eq!(p.stats().late_nodes, 0);
}

#[test]
fn a_node_that_did_not_ack_in_time_is_counted_and_gets_the_plan_at_the_next_boundary() {
    let mut p = running();
    p.change(change(&[1], 50), 150 * MS).unwrap();
    p.on_ack(NodeId(1), 1, 0);
    p.on_ack(NodeId(3), 1, 0);
    let out = p.on_tick(300 * MS);
    assert_eq!(nodes_of(&out), [2]);
    assert_eq!(out[0].1.plan.id, 1);
    assert_eq!(
        out[0].1.effective_ns,
        350 * MS,
        "the new plan's next boundary"
    );
    assert_eq!(p.stats().late_nodes, 1);
    // Still silent at 350 ms: counted again, offered for 400 ms.
    let out = p.on_tick(350 * MS);
    assert_eq!(out[0].1.effective_ns, 400 * MS);
    assert_eq!(p.stats().late_nodes, 2);
    // It acks: nothing more.
    p.on_ack(NodeId(2), 1, 0);
    assert_eq!(p.on_tick(400 * MS), vec![]);
    assert!(p.owing().is_empty());
}

#[test]
fn a_change_while_a_plan_is_pending_replaces_it() {
    let mut p = running();
    p.change(change(&[1], 100), 150 * MS).unwrap();
    let out = p.change(change(&[0, 1], 100), 160 * MS).unwrap();
    assert_eq!(out[0].1.plan.id, 2);
    for n in 1..=3 {
        p.on_ack(NodeId(n), 1, 0); // the replaced plan's acks count for nothing
    }
    assert_eq!(p.stats().stray_acks, 3);
    assert_eq!(p.owing().len(), 3);
}

#[test]
fn a_joining_node_gets_the_plan_in_force_at_once_and_owes_the_pending_one() {
    let mut p = running();
    p.change(change(&[1], 100), 150 * MS).unwrap();
    let out = p.node_joined(NodeId(9), timing(1, 0), 160 * MS);
    let got: Vec<_> = out
        .iter()
        .map(|(n, o)| (n.0, o.plan.id, o.effective_ns / MS))
        .collect();
    assert_eq!(got, [(9, 0, 160), (9, 1, 300)]);
    assert!(p.owing().contains(&NodeId(9)));
}

#[test]
fn a_lost_node_owes_nothing() {
    let mut p = running();
    p.change(change(&[1], 100), 150 * MS).unwrap();
    p.on_ack(NodeId(1), 1, 0);
    p.on_ack(NodeId(2), 1, 0);
    p.node_lost(NodeId(3));
    assert_eq!(p.on_tick(300 * MS), vec![]);
    assert_eq!(p.stats().late_nodes, 0);
}

#[test]
fn a_plan_reaches_the_cluster_when_the_last_node_it_went_to_acks() {
    let mut p = running();
    p.change(change(&[1], 100), 150 * MS).unwrap();
    assert_eq!(p.on_ack(NodeId(1), 1, 160 * MS), None);
    assert_eq!(
        p.on_ack(NodeId(1), 1, 165 * MS),
        None,
        "a second ack is stray"
    );
    assert_eq!(p.on_ack(NodeId(3), 1, 170 * MS), None);
    let r = p.on_ack(NodeId(2), 1, 182 * MS).expect("the last ack");
    assert_eq!((r.plan_id, r.nodes, r.after_ns), (1, 3, 32 * MS));
    assert_eq!(p.stats().reached, 2, "the first plan and this one");
    assert_eq!(p.on_ack(NodeId(2), 1, 190 * MS), None, "reached once");
}

#[test]
fn a_node_late_with_its_ack_makes_the_plans_reach_longer_not_left_out() {
    let mut p = running();
    p.change(change(&[1], 50), 150 * MS).unwrap();
    p.on_ack(NodeId(1), 1, 151 * MS);
    p.on_ack(NodeId(3), 1, 152 * MS);
    p.on_tick(300 * MS); // in force; node 2 late
    let r = p
        .on_ack(NodeId(2), 1, 320 * MS)
        .expect("node 2 was the last");
    assert_eq!((r.nodes, r.after_ns), (3, 170 * MS));
    assert_eq!(p.stats().late_nodes, 1);
}

#[test]
fn a_joining_node_is_waited_for_and_a_replaced_plan_never_reaches() {
    let mut p = running();
    p.change(change(&[1], 100), 150 * MS).unwrap();
    p.node_joined(NodeId(9), timing(1, 0), 155 * MS);
    for n in 1..=3 {
        assert_eq!(p.on_ack(NodeId(n), 1, 160 * MS), None);
    }
    let r = p
        .on_ack(NodeId(9), 1, 161 * MS)
        .expect("the joiner was the last");
    assert_eq!((r.nodes, r.after_ns), (4, 11 * MS));

    p.change(change(&[0], 100), 400 * MS).unwrap();
    p.change(change(&[0, 1], 100), 410 * MS).unwrap();
    for n in [1, 2, 3, 9] {
        assert_eq!(
            p.on_ack(NodeId(n), 2, 420 * MS),
            None,
            "plan 2 was replaced"
        );
    }
    let last: Vec<_> = [1, 2, 3, 9]
        .into_iter()
        .filter_map(|n| p.on_ack(NodeId(n), 3, 430 * MS))
        .collect();
    assert_eq!(last.len(), 1);
    assert_eq!((last[0].plan_id, last[0].after_ns), (3, 20 * MS));
}

/// At thousands of nodes a plan takes a fan-out to reach the last of them
/// (90–200 ms at 4096 nodes on loopback): a margin of one link's round
/// trip would let the last nodes get it after its epoch, and run the old
/// plan past the boundary. So the next plan leaves room for 5/4 of the
/// longest reach of the last plans, plus the largest clock error bound.
#[test]
fn a_plan_slow_to_reach_every_node_pushes_the_next_ones_epoch_past_that_time() {
    let mut p = running();
    // Plan 1 made at 150 ms, in force at 300 ms; node 3 acks at 330 ms:
    // late, and the plan took 180 ms to reach every node.
    p.change(change(&[1, 0], 100), 150 * MS).unwrap();
    p.on_ack(NodeId(1), 1, 160 * MS);
    p.on_ack(NodeId(2), 1, 170 * MS);
    p.on_tick(300 * MS);
    assert_eq!(p.stats().late_nodes, 1);
    let r = p.on_ack(NodeId(3), 1, 330 * MS).unwrap();
    assert_eq!(r.after_ns, 180 * MS);
    assert_eq!(
        p.fanout_margin_ns(),
        225 * MS + MS / 2,
        "5/4 of the reach + the clock error"
    );
    // A change at 1000 ms: not the boundary at 1100 ms (one slot ahead),
    // the first at or after 1000 + 225.5 ms.
    let out = p.change(change(&[0, 1], 100), 1000 * MS).unwrap();
    assert_eq!(out[0].1.plan.epoch_ns, 1300 * MS);
    // An amend (a message to every node as well) leaves the same room.
    assert_eq!(p.reach_margin_ns(), 225 * MS + MS / 2);
}

/// The margin follows the last REACH_WINDOW plans: once they reach every
/// node quickly again it is one slot again, and a plan that took
/// seconds (a stalled gangd) counts as MAX_FANOUT_NS.
#[test]
fn the_fanout_margin_forgets_old_plans_and_is_capped() {
    let mut p = running();
    let mut now = 150 * MS;
    let plan = |p: &mut Planner, now: &mut u64, reach: u64| {
        let out = p.change(change(&[1, 0], 100), *now).unwrap();
        let o = &out[0].1.plan;
        for n in 1..=3 {
            p.on_ack(NodeId(n), o.id, *now + reach);
        }
        *now = (*now + reach).max(o.epoch_ns);
        p.on_tick(*now);
        *now += 10 * MS;
    };
    let capped = MAX_FANOUT_NS + MAX_FANOUT_NS / 4 + MS / 2;
    plan(&mut p, &mut now, 5_000 * MS);
    assert_eq!(p.fanout_margin_ns(), capped, "capped");
    for _ in 0..REACH_WINDOW - 1 {
        plan(&mut p, &mut now, 4 * MS);
    }
    assert_eq!(p.fanout_margin_ns(), capped, "still remembered");
    plan(&mut p, &mut now, 4 * MS);
    assert_eq!(p.fanout_margin_ns(), 5 * MS + MS / 2, "forgotten");
    assert_eq!(p.margin_ns(100), 100 * MS, "one slot again");
}

#[test]
fn an_invalid_change_is_refused_and_changes_nothing() {
    let mut p = running();
    assert_eq!(p.change(change(&[], 100), 0), Err(PlanError::NoSlots));
    assert_eq!(
        p.change(change(&[0], 0), 0),
        Err(PlanError::SlotMsOutOfRange(0))
    );
    assert_eq!(p.pending(), None);
    assert_eq!(p.stats().plans, 1);
}

proptest! {
    /// The planner never activates a plan before every node could have
    /// acked it, and always at a boundary of the plan in force; a node
    /// that never acks is offered the plan again at every boundary it
    /// misses, each effective no earlier than it could arrive and no later
    /// than the first boundary after that.
    #[test]
    fn activation_leaves_room_for_every_node_and_no_node_behind(
        links in prop::collection::vec((0u64..300, 0u64..100), 1..6),
        slot_ms in 1u32..500,
        new_ms in 1u32..500,
        now_ms in 0u64..10_000,
        acks in prop::collection::vec(any::<bool>(), 6),
    ) {
        let mut p = Planner::new(Gen(0));
        for (i, &(rtt, err)) in links.iter().enumerate() {
            p.timing(NodeId(i as u32), timing(rtt, err));
        }
        p.change(change(&[0, 1], slot_ms), 0).unwrap();
        let first = p.pending().unwrap().clone();
        for i in 0..links.len() {
            p.on_ack(NodeId(i as u32), first.id, 0);
        }
        p.on_tick(first.epoch_ns);
        let now = first.epoch_ns + now_ms * MS;
        let out = p.change(change(&[1], new_ms), now).unwrap();
        let plan = out[0].1.plan.clone();
        let worst = links.iter().map(|&(r, e)| (2 * r + e) * MS).max().unwrap();
        prop_assert!(plan.epoch_ns >= now + worst);
        prop_assert!(plan.epoch_ns >= now + first.slot_ns().max(plan.slot_ns()));
        let b = first.boundary_at_or_after(plan.epoch_ns).unwrap();
        prop_assert_eq!(b.at_ns, plan.epoch_ns, "a boundary of the old plan");
        prop_assert_eq!(b.gen, plan.first_gen, "generations go on");
        let late: Vec<u32> = (0..links.len() as u32).filter(|&i| !acks[i as usize]).collect();
        for i in 0..links.len() as u32 {
            if acks[i as usize] {
                p.on_ack(NodeId(i), plan.id, 0);
            }
        }
        // Ticks at every boundary from the activation on: the late nodes are
        // re-offered each time their offer falls due.
        let mut t = plan.epoch_ns;
        for round in 1..=3u64 {
            let out = p.on_tick(t);
            for (n, o) in &out {
                prop_assert!(late.contains(&n.0));
                let m = timing(links[n.0 as usize].0, links[n.0 as usize].1).margin_ns();
                prop_assert!(o.effective_ns >= t + m);
                prop_assert!(o.effective_ns < t + m + plan.slot_ns());
            }
            prop_assert_eq!(p.stats().late_nodes, round * late.len() as u64);
            t = out.iter().map(|(_, o)| o.effective_ns).max().unwrap_or(t);
            if out.is_empty() { break; }
        }
    }
}

#[test]
fn an_amend_ends_the_slot_early_for_every_node() {
    let mut p = running();
    // Generation 6 runs 200..300 ms; its ranks all yielded: it ends at 230.
    let out = p.amend(Gen(6), 230 * MS).unwrap();
    let got: Vec<_> = out
        .iter()
        .map(|(n, a)| (n.0, a.plan_id, a.gen.0, a.ends_at_ns / MS))
        .collect();
    assert_eq!(got, [(1, 0, 6, 230), (2, 0, 6, 230), (3, 0, 6, 230)]);
    let plan = p.in_force().unwrap();
    assert_eq!((plan.epoch_ns, plan.first_gen), (230 * MS, Gen(7)));
    // A change now takes effect at the amended boundaries.
    let out = p.change(change(&[1], 100), 240 * MS).unwrap();
    assert_eq!(out[0].1.plan.epoch_ns, 430 * MS);
}

#[test]
fn an_amend_moves_a_late_nodes_reoffer_with_its_boundary() {
    let mut p = running();
    p.change(change(&[1], 100), 150 * MS).unwrap();
    p.on_ack(NodeId(1), 1, 0);
    p.on_ack(NodeId(3), 1, 0);
    let out = p.on_tick(300 * MS);
    assert_eq!(out[0].1.effective_ns, 400 * MS);
    // Generation 7 (300..400 ms) ends at 340: node 2's turn comes at 340.
    p.amend(Gen(7), 340 * MS).unwrap();
    assert_eq!(p.on_tick(339 * MS), vec![]);
    let out = p.on_tick(340 * MS);
    assert_eq!(nodes_of(&out), [2]);
    assert_eq!(out[0].1.plan.epoch_ns, 340 * MS, "the amended plan");
    assert_eq!(out[0].1.effective_ns, 440 * MS);
}

#[test]
fn an_amend_is_refused_with_no_plan_a_pending_plan_or_an_impossible_end() {
    let mut p = Planner::new(Gen(0));
    assert_eq!(p.amend(Gen(0), 0), Err(AmendRefused::NoPlan));
    let mut p = running();
    assert!(matches!(
        p.amend(Gen(6), 301 * MS),
        Err(AmendRefused::Invalid(PlanError::EndsAfterPlannedEnd { .. }))
    ));
    assert!(matches!(
        p.amend(Gen(4), 90 * MS),
        Err(AmendRefused::Invalid(PlanError::PastGeneration { .. }))
    ));
    p.change(change(&[1], 100), 150 * MS).unwrap();
    assert_eq!(p.amend(Gen(6), 230 * MS), Err(AmendRefused::PlanPending));
}
