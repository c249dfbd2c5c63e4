//! The slot plan (gang_wire::plan), as a specification: which slot and
//! generation is in force at a time, the boundaries, amendments and their
//! validation; then properties over any plan and time.

use gang_wire::plan::{Amend, Plan, PlanError, PlannedSlot, SlotStart, MAX_PLAN_SLOTS};
use gang_wire::proto::Gen;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

/// Slots 2, 0, 1 of 100 ms from 1 s on, first generation 10.
fn plan() -> Plan {
    Plan {
        id: 7,
        epoch_ns: 1_000 * MS,
        slot_ms: 100,
        slots: [2, 0, 1].map(|slot| PlannedSlot { slot }).to_vec(),
        first_gen: Gen(10),
    }
}

#[test]
fn the_slot_in_force_cycles_through_the_slots_with_one_generation_each() {
    let p = plan();
    let at = |ms: u64| p.in_force(ms * MS).map(|f| (f.gen.0, f.slot));
    assert_eq!(at(1_000), Some((10, 2)));
    assert_eq!(at(1_099), Some((10, 2)));
    assert_eq!(at(1_100), Some((11, 0)));
    assert_eq!(at(1_250), Some((12, 1)));
    assert_eq!(at(1_300), Some((13, 2)), "the cycle starts again");
    let f = p.in_force(1_150 * MS).unwrap();
    assert_eq!((f.start_ns, f.end_ns), (1_100 * MS, 1_200 * MS));
}

#[test]
fn nothing_is_in_force_before_the_epoch() {
    assert_eq!(plan().in_force(999 * MS), None);
}

#[test]
fn the_boundary_at_or_after_a_time() {
    let p = plan();
    let b = |ms: u64| p.boundary_at_or_after(ms * MS).unwrap();
    assert_eq!(
        b(0),
        SlotStart {
            at_ns: 1_000 * MS,
            gen: Gen(10),
            slot: 2
        },
        "before the epoch: the epoch"
    );
    assert_eq!(
        b(1_100).at_ns,
        1_100 * MS,
        "a boundary is at or after itself"
    );
    assert_eq!(
        b(1_101),
        SlotStart {
            at_ns: 1_200 * MS,
            gen: Gen(12),
            slot: 1
        }
    );
}

#[test]
fn the_next_boundaries() {
    let got: Vec<_> = plan()
        .boundaries(1_150 * MS, 4)
        .iter()
        .map(|b| (b.at_ns / MS, b.gen.0, b.slot))
        .collect();
    assert_eq!(
        got,
        [
            (1_200, 12, 1),
            (1_300, 13, 2),
            (1_400, 14, 0),
            (1_500, 15, 1)
        ]
    );
}

#[test]
fn a_valid_plan_passes_and_each_fault_has_its_error() {
    assert_eq!(plan().validate(), Ok(()));
    let with = |f: fn(&mut Plan)| {
        let mut p = plan();
        f(&mut p);
        p.validate()
    };
    assert_eq!(with(|p| p.slots.clear()), Err(PlanError::NoSlots));
    assert_eq!(
        with(|p| p.slots = vec![PlannedSlot { slot: 0 }; MAX_PLAN_SLOTS + 1]),
        Err(PlanError::TooManySlots(MAX_PLAN_SLOTS + 1))
    );
    assert_eq!(
        with(|p| p.slots = vec![PlannedSlot { slot: 0 }; MAX_PLAN_SLOTS]),
        Ok(())
    );
    assert_eq!(
        with(|p| p.slots[0].slot = MAX_PLAN_SLOTS as u32),
        Err(PlanError::SlotOutOfRange(MAX_PLAN_SLOTS as u32))
    );
    assert_eq!(with(|p| p.slot_ms = 0), Err(PlanError::SlotMsOutOfRange(0)));
    assert_eq!(
        with(|p| p.slot_ms = 60_001),
        Err(PlanError::SlotMsOutOfRange(60_001))
    );
    assert_eq!(with(|p| p.slot_ms = 60_000), Ok(()));
    assert!(matches!(
        with(|p| p.epoch_ns = u64::MAX - 10),
        Err(PlanError::EpochOverflow { .. })
    ));
    assert!(matches!(
        with(|p| p.first_gen = Gen(u64::MAX - 1)),
        Err(PlanError::EpochOverflow { .. })
    ));
}

#[test]
fn an_invalid_plan_answers_no_slot_rather_than_panicking() {
    let mut p = plan();
    p.slot_ms = 0;
    assert_eq!(p.in_force(2_000 * MS), None);
    assert_eq!(p.boundary_at_or_after(2_000 * MS), None);
    p.slot_ms = 100;
    p.slots.clear();
    assert_eq!(p.boundaries(0, 3), vec![]);
}

#[test]
fn an_amend_ends_the_slot_early_and_shifts_every_later_boundary() {
    let p = plan();
    // Generation 11 (slot 0, 1100..1200 ms) ends at 1130 ms: 70 ms early.
    let a = p
        .amended(&Amend {
            plan_id: 7,
            gen: Gen(11),
            ends_at_ns: 1_130 * MS,
        })
        .unwrap();
    assert_eq!(a.id, 7, "the same plan, amended");
    let got: Vec<_> = a
        .boundaries(0, 4)
        .iter()
        .map(|b| (b.at_ns / MS, b.gen.0, b.slot))
        .collect();
    assert_eq!(
        got,
        [
            (1_130, 12, 1),
            (1_230, 13, 2),
            (1_330, 14, 0),
            (1_430, 15, 1)
        ]
    );
    assert_eq!(a.in_force(1_135 * MS).map(|f| f.gen), Some(Gen(12)));
}

#[test]
fn an_amend_is_refused_for_another_plan_a_past_generation_or_an_impossible_end() {
    let p = plan();
    let amend = |plan_id, gen, ms: u64| {
        p.amended(&Amend {
            plan_id,
            gen: Gen(gen),
            ends_at_ns: ms * MS,
        })
    };
    assert_eq!(
        amend(8, 11, 1_130),
        Err(PlanError::OtherPlan {
            plan_id: 7,
            amend_plan_id: 8
        })
    );
    assert_eq!(
        amend(7, 9, 990),
        Err(PlanError::PastGeneration {
            gen: Gen(9),
            first_gen: Gen(10)
        })
    );
    assert_eq!(
        amend(7, 11, 1_099),
        Err(PlanError::EndsBeforeStart {
            gen: Gen(11),
            ends_at_ns: 1_099 * MS,
            start_ns: 1_100 * MS
        })
    );
    assert!(matches!(
        amend(7, 11, 1_201),
        Err(PlanError::EndsAfterPlannedEnd { .. })
    ));
    assert!(amend(7, 11, 1_100).is_ok(), "a slot may end as it starts");
    assert!(amend(7, 11, 1_200).is_ok(), "or at its planned end");
}

#[test]
fn the_same_amend_twice_is_refused_as_past() {
    let a = Amend {
        plan_id: 7,
        gen: Gen(11),
        ends_at_ns: 1_130 * MS,
    };
    let once = plan().amended(&a).unwrap();
    assert!(matches!(
        once.amended(&a),
        Err(PlanError::PastGeneration { .. })
    ));
}

#[test]
fn plans_and_amends_go_over_the_wire_as_json() {
    let p = plan();
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Plan>(&text).unwrap(), p);
    let a = Amend {
        plan_id: 7,
        gen: Gen(11),
        ends_at_ns: 5,
    };
    let text = serde_json::to_string(&a).unwrap();
    assert_eq!(text, r#"{"plan_id":7,"gen":11,"ends_at_ns":5}"#);
}

fn any_plan() -> impl Strategy<Value = Plan> {
    (
        0u64..1 << 50,
        1u32..=60_000,
        prop::collection::vec(0u32..16, 1..6),
        0u64..1 << 40,
    )
        .prop_map(|(epoch_ns, slot_ms, slots, gen)| Plan {
            id: 1,
            epoch_ns,
            slot_ms,
            slots: slots.into_iter().map(|slot| PlannedSlot { slot }).collect(),
            first_gen: Gen(gen),
        })
}

proptest! {
    #[test]
    fn the_slot_in_force_lies_between_two_consecutive_boundaries(
        p in any_plan(), dt in 0u64..1 << 45,
    ) {
        let t = p.epoch_ns + dt;
        let f = p.in_force(t).unwrap();
        prop_assert!(f.start_ns <= t && t < f.end_ns);
        prop_assert_eq!(f.end_ns - f.start_ns, p.slot_ns());
        // The boundary after t starts the next generation, and the one at
        // or after the slot's start is the slot's own.
        let next = p.boundary_at_or_after(t + 1).unwrap();
        prop_assert_eq!(next.at_ns, f.end_ns);
        prop_assert_eq!(next.gen.0, f.gen.0 + 1);
        let own = p.boundary_at_or_after(f.start_ns).unwrap();
        prop_assert_eq!((own.gen, own.slot), (f.gen, f.slot));
    }

    #[test]
    fn boundaries_are_one_slot_apart_with_consecutive_generations(
        p in any_plan(), t in 0u64..1 << 52, n in 1usize..20,
    ) {
        let bs = p.boundaries(t, n);
        prop_assert_eq!(bs.len(), n);
        prop_assert!(bs[0].at_ns >= t);
        prop_assert!(bs[0].at_ns == p.epoch_ns || bs[0].at_ns - t < p.slot_ns());
        for w in bs.windows(2) {
            prop_assert_eq!(w[1].at_ns - w[0].at_ns, p.slot_ns());
            prop_assert_eq!(w[1].gen.0, w[0].gen.0 + 1);
        }
        for b in &bs {
            let f = p.in_force(b.at_ns).unwrap();
            prop_assert_eq!((f.gen, f.slot, f.start_ns), (b.gen, b.slot, b.at_ns));
        }
    }

    #[test]
    fn an_amend_shifts_every_later_boundary_by_the_same_amount(
        p in any_plan(), k in 0u64..50, early_permille in 0u64..=1000, n in 1usize..12,
    ) {
        let gen = Gen(p.first_gen.0 + k);
        let end = p.boundary(k + 1).unwrap().at_ns;
        let shift = p.slot_ns() / 1000 * early_permille;
        let a = p.amended(&Amend { plan_id: p.id, gen, ends_at_ns: end - shift }).unwrap();
        let before = p.boundaries(end, n);
        let after = a.boundaries(0, n);
        prop_assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            prop_assert_eq!(b.at_ns - a.at_ns, shift);
            prop_assert_eq!((b.gen, b.slot), (a.gen, a.slot));
        }
    }
}

#[test]
fn a_plan_restated_from_later_has_the_same_boundaries() {
    let p = Plan {
        id: 4,
        epoch_ns: 1_000,
        slot_ms: 2,
        slots: vec![
            PlannedSlot { slot: 0 },
            PlannedSlot { slot: 1 },
            PlannedSlot { slot: 2 },
        ],
        first_gen: Gen(7),
    };
    assert_eq!(p.restated_from(500), Some(p.clone()), "before the epoch");
    // t inside boundary 4 (at 1_000 + 4 × 2 ms).
    let r = p.restated_from(1_000 + 9_000_000).unwrap();
    assert_eq!(r.epoch_ns, 1_000 + 8_000_000);
    assert_eq!(r.first_gen, Gen(11));
    assert_eq!(r.id, 4);
    assert_eq!(
        r.boundaries(r.epoch_ns, 5),
        p.boundaries(r.epoch_ns, 5),
        "same slots, generations and instants"
    );
}
