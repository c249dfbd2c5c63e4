//! The slot-switch barrier as a specification: what gangd sends, when the
//! switch completes, and what the record says, with injected times (µs).

use std::collections::{BTreeMap, BTreeSet};

use gang_coordinator::switch::barrier::*;
use gang_wire::proto::{Barrier, FreezeReport, Gen, NodeId, ToAgent};
use proptest::prelude::*;

const G: Gen = Gen(7);

fn spec(n: u32, barrier: Barrier) -> SwitchSpec {
    SwitchSpec {
        gen: G,
        from_slot: 0,
        to_slot: 1,
        nodes: (0..n).map(NodeId).collect(),
        barrier,
        drain_timeout_ms: 5,
        phase_timeout_us: 100_000,
        slot_ms: 50,
    }
}

fn frozen(drain_us: u64, timed_out: bool) -> FreezeReport {
    FreezeReport {
        drained_bytes: 10,
        drain_us,
        timed_out,
        answer_us: drain_us + 50,
    }
}

fn freezes(out: &Outbox) -> Vec<NodeId> {
    out.iter()
        .filter(|(_, m)| matches!(m, ToAgent::Freeze { .. }))
        .map(|(n, _)| *n)
        .collect()
}

fn switches(out: &Outbox) -> Vec<NodeId> {
    out.iter()
        .filter(|(_, m)| matches!(m, ToAgent::Switch { .. }))
        .map(|(n, _)| *n)
        .collect()
}

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

#[test]
fn strict_happy_path_three_nodes() {
    let (mut sw, out) = SlotSwitch::start(spec(3, Barrier::Strict), 1_000);
    assert_eq!(
        out[0],
        (
            N0,
            ToAgent::Freeze {
                gen: G,
                from_slot: 0,
                to_slot: 1,
                drain_timeout_ms: 5
            }
        )
    );
    assert_eq!(freezes(&out), vec![N0, N1, N2]);
    assert_eq!(sw.phase(), Phase::Freezing);

    assert!(sw.on_frozen(N1, G, 0, frozen(300, false), 1_400).is_empty());
    assert!(sw.on_frozen(N0, G, 0, frozen(200, false), 1_500).is_empty());
    // The last Frozen releases Switch to everyone at once.
    let out = sw.on_frozen(N2, G, 0, frozen(600, false), 1_900);
    assert_eq!(
        out,
        vec![
            (
                N0,
                ToAgent::Switch {
                    gen: G,
                    slot: 1,
                    slot_ms: 50
                }
            ),
            (
                N1,
                ToAgent::Switch {
                    gen: G,
                    slot: 1,
                    slot_ms: 50
                }
            ),
            (
                N2,
                ToAgent::Switch {
                    gen: G,
                    slot: 1,
                    slot_ms: 50
                }
            ),
        ]
    );
    assert_eq!(sw.phase(), Phase::Switching);

    assert!(sw.on_running(N2, G, 1, 40, 2_000).is_empty());
    assert!(sw.on_running(N0, G, 1, 30, 2_050).is_empty());
    assert!(sw.record().is_none());
    assert!(sw.on_running(N1, G, 1, 35, 2_120).is_empty());
    assert!(sw.is_done());
    assert_eq!(sw.deadline_us(), None);

    let r = sw.record().unwrap();
    assert_eq!(r.freeze_us, Some(900));
    assert_eq!(r.switch_us, Some(220));
    assert_eq!(r.total_us, 1_120);
    assert_eq!(r.skew_us, Some(120));
    assert_eq!(r.drain_timeouts, 0);
    assert!(r.failed.is_empty());
    assert_eq!(r.switched().collect::<Vec<_>>(), vec![N0, N1, N2]);
    assert_eq!(r.nodes[&N2].frozen, Some(frozen(600, false)));
    assert_eq!(r.nodes[&N2].frozen_at_us, Some(900));
    assert_eq!(r.nodes[&N1].running_at_us, Some(1_120));
    assert_eq!(r.nodes[&N1].agent_switch_us, Some(35));
    assert_eq!((r.stale, r.duplicates, r.unexpected), (0, 0, 0));
}

#[test]
fn off_mode_sends_no_freeze() {
    let (mut sw, out) = SlotSwitch::start(spec(2, Barrier::Off), 0);
    assert!(freezes(&out).is_empty());
    assert_eq!(switches(&out), vec![N0, N1]);
    assert_eq!(sw.phase(), Phase::Switching);
    // A Frozen is no answer to anything here.
    assert!(sw.on_frozen(N0, G, 0, frozen(0, false), 5).is_empty());
    sw.on_running(N0, G, 1, 10, 20);
    sw.on_running(N1, G, 1, 10, 50);
    let r = sw.record().unwrap();
    assert_eq!(
        (r.freeze_us, r.switch_us, r.total_us, r.skew_us),
        (None, Some(50), 50, Some(30))
    );
    assert_eq!(r.unexpected, 1);
}

#[test]
fn stale_generation_is_ignored() {
    let (mut sw, _) = SlotSwitch::start(spec(1, Barrier::Strict), 0);
    assert!(sw.on_frozen(N0, Gen(6), 0, frozen(0, false), 10).is_empty());
    assert!(sw.on_running(N0, Gen(6), 1, 0, 11).is_empty());
    assert_eq!(sw.phase(), Phase::Freezing);
    assert_eq!(
        switches(&sw.on_frozen(N0, G, 0, frozen(0, false), 20)),
        vec![N0]
    );
    assert!(sw.on_frozen(N0, Gen(8), 0, frozen(0, false), 21).is_empty());
    sw.on_running(N0, G, 1, 0, 30);
    assert_eq!(sw.record().unwrap().stale, 3);
}

#[test]
fn duplicate_answers_are_ignored() {
    let (mut sw, _) = SlotSwitch::start(spec(2, Barrier::Strict), 0);
    sw.on_frozen(N0, G, 0, frozen(1, false), 10);
    assert!(sw.on_frozen(N0, G, 0, frozen(2, true), 15).is_empty());
    assert_eq!(sw.phase(), Phase::Freezing);
    assert_eq!(
        switches(&sw.on_frozen(N1, G, 0, frozen(1, false), 20)),
        vec![N0, N1]
    );
    sw.on_running(N0, G, 1, 0, 30);
    sw.on_running(N0, G, 1, 0, 35);
    assert!(!sw.is_done());
    sw.on_running(N1, G, 1, 0, 40);
    let r = sw.record().unwrap();
    assert_eq!(r.duplicates, 2);
    // The first answer counts.
    assert_eq!(r.nodes[&N0].frozen, Some(frozen(1, false)));
    assert_eq!(r.nodes[&N0].running_at_us, Some(30));
    assert_eq!(r.drain_timeouts, 0);
}

#[test]
fn silent_node_is_dropped_at_the_phase_timeout() {
    let (mut sw, _) = SlotSwitch::start(spec(3, Barrier::Strict), 0);
    sw.on_frozen(N0, G, 0, frozen(1, false), 10);
    sw.on_frozen(N2, G, 0, frozen(1, false), 20);
    // Freeze phase: phase timeout plus the drain timeout the node may use.
    assert_eq!(sw.deadline_us(), Some(105_000));
    assert!(sw.on_tick(104_999).is_empty());
    let out = sw.on_tick(105_000);
    assert_eq!(switches(&out), vec![N0, N2]);
    // Too late: N1 stays dropped, and never gets a Switch.
    assert!(sw.on_frozen(N1, G, 0, frozen(1, false), 105_001).is_empty());
    sw.on_running(N0, G, 1, 0, 105_100);
    sw.on_running(N2, G, 1, 0, 105_300);
    let r = sw.record().unwrap();
    assert_eq!(r.failed, vec![(N1, Failure::Silent(Phase::Freezing))]);
    assert_eq!(
        (r.freeze_us, r.switch_us, r.total_us),
        (Some(105_000), Some(300), 105_300)
    );
    assert_eq!(r.switched().collect::<Vec<_>>(), vec![N0, N2]);
}

#[test]
fn silent_in_switch_phase_is_dropped_too() {
    let (mut sw, _) = SlotSwitch::start(spec(2, Barrier::Off), 0);
    sw.on_running(N1, G, 1, 0, 10);
    assert_eq!(sw.deadline_us(), Some(100_000));
    sw.on_tick(200_000);
    let r = sw.record().unwrap();
    assert_eq!(r.failed, vec![(N0, Failure::Silent(Phase::Switching))]);
    assert_eq!((r.switch_us, r.skew_us), (Some(200_000), Some(0)));
}

#[test]
fn node_lost_mid_switch() {
    let (mut sw, _) = SlotSwitch::start(spec(3, Barrier::Strict), 0);
    sw.on_frozen(N0, G, 0, frozen(1, false), 10);
    sw.on_frozen(N1, G, 0, frozen(1, false), 10);
    // Losing the last node owed a Frozen closes the freeze phase.
    assert_eq!(switches(&sw.on_node_lost(N2, 30)), vec![N0, N1]);
    sw.on_running(N0, G, 1, 0, 40);
    sw.on_node_lost(N1, 50);
    // Losing a node that has already answered Running is no failure.
    sw.on_node_lost(N0, 60);
    let r = sw.record().unwrap();
    assert_eq!(
        r.failed,
        vec![
            (N1, Failure::Lost(Phase::Switching)),
            (N2, Failure::Lost(Phase::Freezing))
        ]
    );
    assert_eq!(
        (r.freeze_us, r.switch_us, r.total_us),
        (Some(30), Some(20), 50)
    );
}

#[test]
fn every_node_lost_ends_without_switch() {
    let (mut sw, _) = SlotSwitch::start(spec(2, Barrier::Strict), 0);
    assert!(sw.on_node_lost(N0, 5).is_empty());
    assert!(sw.on_node_lost(N1, 9).is_empty());
    let r = sw.record().unwrap();
    assert_eq!(
        (r.freeze_us, r.switch_us, r.total_us, r.skew_us),
        (Some(9), None, 9, None)
    );
}

#[test]
fn empty_switch_is_done_at_once() {
    let (sw, out) = SlotSwitch::start(spec(0, Barrier::Strict), 3);
    assert!(out.is_empty());
    assert_eq!(sw.record().unwrap().total_us, 0);
}

#[test]
fn drain_timeouts_are_counted_not_failed() {
    let (mut sw, _) = SlotSwitch::start(spec(3, Barrier::Strict), 0);
    sw.on_frozen(N0, G, 0, frozen(5_000, true), 5_100);
    sw.on_frozen(N1, G, 0, frozen(20, false), 5_100);
    sw.on_frozen(N2, G, 0, frozen(5_000, true), 5_200);
    for n in [N0, N1, N2] {
        sw.on_running(n, G, 1, 0, 6_000);
    }
    let r = sw.record().unwrap();
    assert_eq!(r.drain_timeouts, 2);
    assert!(r.failed.is_empty());
    assert_eq!(r.nodes[&N0].frozen.unwrap().drain_us, 5_000);
}

#[test]
fn wrong_slot_or_early_running_is_unexpected() {
    let (mut sw, _) = SlotSwitch::start(spec(1, Barrier::Strict), 0);
    sw.on_running(N0, G, 1, 0, 1); // before Switch
    sw.on_frozen(N0, G, 3, frozen(0, false), 2); // not from_slot
    sw.on_frozen(NodeId(9), G, 0, frozen(0, false), 3); // not in the switch
    assert_eq!(sw.phase(), Phase::Freezing);
    sw.on_frozen(N0, G, 0, frozen(0, false), 4);
    sw.on_running(N0, G, 1, 0, 5);
    assert_eq!(sw.record().unwrap().unexpected, 3);
}

// --- property: random interleavings of answers, noise and losses ---

#[derive(Clone, Debug)]
enum Ev {
    /// The agent at this index answers what it owes, if anything.
    Answer(usize),
    /// The same, of an older generation.
    Stale(usize),
    /// Answer again what was already answered.
    Repeat(usize),
    Lost(usize),
    /// Time passes.
    Wait(u64),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        8 => any::<usize>().prop_map(Ev::Answer),
        1 => any::<usize>().prop_map(Ev::Stale),
        1 => any::<usize>().prop_map(Ev::Repeat),
        1 => any::<usize>().prop_map(Ev::Lost),
        3 => (0u64..60_000).prop_map(Ev::Wait),
    ]
}

#[derive(Default, Debug)]
struct Agent {
    freezes: u32,
    switches: u32,
    frozen: bool,
    running: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_completes_consistently(
        n in 0u32..6,
        strict in any::<bool>(),
        events in prop::collection::vec(ev(), 0..60),
    ) {
        let barrier = if strict { Barrier::Strict } else { Barrier::Off };
        let mut now = 1_000u64;
        let (mut sw, out) = SlotSwitch::start(spec(n, barrier), now);
        let mut agents: BTreeMap<NodeId, Agent> = (0..n).map(|i| (NodeId(i), Agent::default())).collect();
        let mut frozen_seen = BTreeSet::new();
        let mut lost = BTreeSet::new();
        let deliver = |out: Outbox, agents: &mut BTreeMap<NodeId, Agent>, frozen_seen: &BTreeSet<NodeId>, lost: &BTreeSet<NodeId>| {
            if strict && !switches(&out).is_empty() {
                // Switch never precedes all Frozen: every node is Frozen
                // or already dropped (lost, or silent — silent ones get
                // no Switch, checked below via the record).
                for id in agents.keys() {
                    let switched = switches(&out).contains(id);
                    prop_assert!(!switched || frozen_seen.contains(id));
                    prop_assert!(switched || !frozen_seen.contains(id) || lost.contains(id));
                }
            }
            for (node, msg) in out {
                let a = agents.get_mut(&node).unwrap();
                match msg {
                    ToAgent::Freeze { .. } => a.freezes += 1,
                    ToAgent::Switch { .. } => a.switches += 1,
                    other => prop_assert!(false, "unexpected {other:?}"),
                }
                prop_assert!(a.freezes <= 1 && a.switches <= 1);
                prop_assert!(strict || a.freezes == 0);
            }
            Ok(())
        };
        deliver(out, &mut agents, &frozen_seen, &lost)?;
        let ids: Vec<NodeId> = agents.keys().copied().collect();
        for e in events {
            let pick = |i: usize| (!ids.is_empty()).then(|| ids[i % ids.len()]);
            let out = match e {
                Ev::Wait(d) => { now += d; sw.on_tick(now) }
                Ev::Lost(i) => match pick(i) {
                    Some(id) => { lost.insert(id); sw.on_node_lost(id, now) }
                    None => Outbox::new(),
                },
                Ev::Answer(i) | Ev::Stale(i) | Ev::Repeat(i) => {
                    let Some(id) = pick(i) else { continue };
                    if lost.contains(&id) { continue }
                    let a = &agents[&id];
                    let gen = if matches!(e, Ev::Stale(_)) { Gen(G.0 - 1) } else { G };
                    let repeat = matches!(e, Ev::Repeat(_));
                    now += 7;
                    if a.switches == 1 && (a.running == repeat) {
                        if gen == G { agents.get_mut(&id).unwrap().running = true; }
                        sw.on_running(id, gen, 1, 3, now)
                    } else if a.freezes == 1 && (a.frozen == repeat) {
                        if gen == G { frozen_seen.insert(id); agents.get_mut(&id).unwrap().frozen = true; }
                        sw.on_frozen(id, gen, 0, frozen(now % 9_000, now % 3 == 0), now)
                    } else {
                        Outbox::new()
                    }
                }
            };
            deliver(out, &mut agents, &frozen_seen, &lost)?;
        }
        // Whatever happened, at most two deadlines later the switch is done.
        for _ in 0..2 {
            if let Some(d) = sw.deadline_us() {
                now = now.max(d);
                let out = sw.on_tick(now);
                deliver(out, &mut agents, &frozen_seen, &lost)?;
            }
        }
        prop_assert!(sw.is_done());
        let r = sw.record().unwrap().clone();

        // Latencies agree with each other.
        prop_assert!(r.total_us <= now - 1_000);
        prop_assert_eq!(r.freeze_us.is_some(), strict);
        if let Some(f) = r.freeze_us { prop_assert!(f <= r.total_us); }
        if let Some(s) = r.switch_us { prop_assert!(s <= r.total_us); }
        if let (Some(f), Some(s)) = (r.freeze_us, r.switch_us) { prop_assert_eq!(f + s, r.total_us); }
        if let (Some(k), Some(s)) = (r.skew_us, r.switch_us) { prop_assert!(k <= s); }
        prop_assert_eq!(r.skew_us.is_some(), r.switched().next().is_some());
        let timeouts = r.nodes.values().filter(|x| x.frozen.is_some_and(|f| f.timed_out)).count() as u32;
        prop_assert_eq!(r.drain_timeouts, timeouts);

        // Every node either switched or failed, never both; those that got
        // a Switch are exactly those still in the barrier after freezing.
        let failed: BTreeSet<NodeId> = r.failed.iter().map(|(id, _)| *id).collect();
        let switched: BTreeSet<NodeId> = r.switched().collect();
        prop_assert!(failed.is_disjoint(&switched));
        prop_assert_eq!(failed.len() + switched.len(), n as usize);
        for (id, a) in &agents {
            let dropped_freezing = r.failed.iter().any(|&(x, f)| x == *id && matches!(f, Failure::Lost(Phase::Freezing) | Failure::Silent(Phase::Freezing)));
            prop_assert_eq!(a.switches == 1, !dropped_freezing, "node {}", id);
            prop_assert!(!strict || a.freezes == 1);
        }
    }
}
