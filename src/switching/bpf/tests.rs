//! The BPF mode's switching logic against a fake scheduler: what it
//! writes into BPF for each request (the real scheduler is only exercised
//! by the VM tests). The gangs are plain directories of a fake gang root.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::sync::mpsc;

use super::*;
use crate::clock::ClockShare;
use crate::control::Request;
use crate::switching::handle;

/// Records what the switching logic asks of BPF.
#[derive(Default)]
struct FakeBpf {
    gangs: BTreeMap<u64, GangId>,
    /// Slot in force and its generation.
    cur: (u32, u64),
    nr_slots: u32,
    timer: bool,
    /// (slot, gen, slot_len_ns) of every switch.
    switched: Vec<(u32, u64, u64)>,
    rehomed: Vec<GangId>,
    released: Vec<GangId>,
    /// (mask, gen, until_ns) of every park_gangs.
    parks: Vec<(u64, u64, u64)>,
    /// System calls are tracked (sys_enter/sys_exit attached).
    tracking: bool,
    /// A timed switch armed and not fired yet: (slot, gen).
    armed: Option<(u32, u64)>,
    /// The last one that fired: (gen, ns).
    fired: (u64, u64),
    /// Tables written so far, and (slot, gen, tables written by then) of
    /// every switch: which table each switch went into.
    tables: u32,
    switched_after: Vec<(u32, u64, u32)>,
}

impl FakeBpf {
    /// The absolute timer expires.
    fn fire_armed(&mut self) {
        if let Some(cur) = self.armed.take() {
            self.cur = cur;
            self.fired = (cur.1, monotonic_ns());
        }
    }
}

impl BpfScheduler for FakeBpf {
    fn nr_cpus(&self) -> u32 {
        4
    }
    fn exited(&self) -> bool {
        false
    }
    fn add_gang(&mut self, cgroup_id: u64, gang: GangId) -> Result<()> {
        self.gangs.insert(cgroup_id, gang);
        Ok(())
    }
    fn remove_gang(&mut self, cgroup_id: u64) {
        self.gangs.remove(&cgroup_id);
    }
    fn set_ranks(&mut self, _ranks: &[u32]) {}
    fn write_table(&mut self, _table: &SlotTable, _masks: &[u32], nr_slots: u32) -> (u32, u64) {
        self.nr_slots = nr_slots;
        self.tables += 1;
        self.cur
    }
    fn write_knobs(&mut self, _knobs: &NodeKnobs) {}
    fn set_timer_switching(&mut self, on: bool) {
        self.timer = on;
    }
    fn switch_slot(
        &mut self,
        slot: u32,
        gen: u64,
        cause: u32,
        slot_len_ns: u64,
        at_ns: u64,
    ) -> Result<()> {
        // A timed switch fires when the test says so (fire_armed); one
        // armed after its instant fires at once, and says so, as in BPF.
        if at_ns > monotonic_ns() {
            self.armed = Some((slot, gen));
        } else {
            // One switch is pending at a time: this one replaces it.
            self.armed = None;
            self.cur = (slot, gen);
            if cause == gang_switch_cause_SWITCH_TIMED {
                self.fired = (gen, monotonic_ns());
            }
        }
        self.switched.push((slot, gen, slot_len_ns));
        self.switched_after.push((slot, gen, self.tables));
        Ok(())
    }
    fn rehome_gang(&mut self, gang: GangId) -> Result<()> {
        self.rehomed.push(gang);
        Ok(())
    }
    fn release_parked(&mut self, gang: GangId) -> Result<()> {
        self.released.push(gang);
        Ok(())
    }
    fn park_gangs(&mut self, mask: u64, gen: u64, until_ns: u64) -> Result<()> {
        self.parks.push((mask, gen, until_ns));
        Ok(())
    }
    fn track_syscalls(&mut self, on: bool) -> Result<()> {
        self.tracking = on;
        Ok(())
    }
    fn running_probe(&self) -> Result<park::RunningProbe> {
        // The kicks land at once: no CPU runs a parked gang.
        Ok(Box::new(|_| Ok(false)))
    }
    fn timed_fired(&self) -> (u64, u64) {
        self.fired
    }
    fn current(&self) -> (u32, u64) {
        self.cur
    }
    fn done_gen(&self, _gang: GangId) -> u64 {
        0
    }
    fn switches(&self) -> u64 {
        self.switched.len() as u64
    }
    fn slot_ends(&self, _gang: GangId) -> gang_slot_ends {
        unsafe { std::mem::zeroed() }
    }
    fn trace_start(&mut self) -> Result<()> {
        Ok(())
    }
    fn trace_stop(&mut self) {}
    fn take_events(&mut self) -> Vec<TraceEvent> {
        Vec::new()
    }
    fn serve_stats(&mut self, _nr_gangs: u64, _nr_slots: u64) -> Result<()> {
        Ok(())
    }
}

/// A gang root of plain directories, each with a cgroup.events that says
/// it is populated.
fn gang_root(test: &str, gangs: &[&str]) -> PathBuf {
    let root = std::env::temp_dir().join(format!("scx-gang-bpf-{}-{test}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    for g in gangs {
        let dir = root.join(g);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        fs::write(dir.join("cgroup.procs"), "").unwrap();
    }
    root
}

/// A switcher over the fake, parking with the cgroup freezer (here plain
/// files: the wait for "frozen 1" times out), as most tests below do.
fn switcher(root: &std::path::Path) -> (BpfSwitcher<FakeBpf>, Arc<SharedKnobs>) {
    let mut k = NodeKnobs::new();
    k.park = crate::knobs::Park::Freezer;
    switcher_with(root, k)
}

fn switcher_with(root: &std::path::Path, k: NodeKnobs) -> (BpfSwitcher<FakeBpf>, Arc<SharedKnobs>) {
    let knobs = SharedKnobs::new(k.clone(), 4);
    let cfg = BpfConfig {
        gang_root: root.to_path_buf(),
        holds: FreezeHolds::new(),
        clock: ClockShare::new(),
        on_all_yielded: None,
        shared_knobs: knobs.clone(),
    };
    let sw = BpfSwitcher::new(FakeBpf::default(), cfg, k).unwrap();
    (sw, knobs)
}

/// A column from (gang, CPUs) pairs by slot.
pub(super) fn column(slots: &[&[(&str, &str)]]) -> Vec<Vec<GangCpus>> {
    slots
        .iter()
        .map(|s| {
            s.iter()
                .map(|(g, c)| GangCpus {
                    gang: g.to_string(),
                    cpus: c.to_string(),
                })
                .collect()
        })
        .collect()
}

/// A Freeze for generation `gen` of the slot in force, nothing kept across.
fn freeze_request(gen: u64, drain_timeout_ms: u64) -> Request {
    Request::Freeze {
        gen,
        drain_timeout_ms,
        to_slot: None,
    }
}

fn ask(sw: &mut BpfSwitcher<FakeBpf>, knobs: &SharedKnobs, request: Request) -> Response {
    let (tx, rx) = mpsc::channel();
    handle(sw, request, tx, knobs);
    rx.recv_timeout(Duration::from_secs(10)).expect("an answer")
}

#[test]
fn standalone_gives_each_gang_a_slot_on_the_bpf_timer() {
    let root = gang_root("standalone", &["job1", "job2"]);
    let (sw, _) = switcher(&root);
    assert_eq!(sw.mode, Mode::Standalone);
    assert_eq!(sw.bpf.gangs.len(), 2, "both gangs registered");
    assert_eq!(sw.bpf.nr_slots, 2);
    assert_eq!(sw.status().mode, "standalone");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn commands_need_an_explicit_schedule_first() {
    let root = gang_root("refused", &["job1"]);
    let (mut sw, knobs) = switcher(&root);
    let switch = Request::Switch {
        slot: 0,
        gen: 1,
        slot_ms: 50,
        at_ns: 0,
    };
    let e = ask(&mut sw, &knobs, switch).error.unwrap();
    assert!(
        e.contains("switch commands need an explicit schedule"),
        "{e}"
    );
    let freeze = freeze_request(1, 10);
    let e = ask(&mut sw, &knobs, freeze).error.unwrap();
    assert!(e.contains("freeze needs an explicit schedule"), "{e}");
    let e = ask(&mut sw, &knobs, Request::Autonomous).error.unwrap();
    assert!(e.contains("node is standalone"), "{e}");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_column_stops_the_timer_and_a_switch_lasts_what_the_coordinator_said() {
    let root = gang_root("column", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")], &[]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    assert!(!sw.bpf.timer, "coordinated: only commands switch");
    assert_eq!(sw.bpf.nr_slots, 3, "the column's empty slot counts");
    assert_eq!(knobs.status.lock().unwrap().mode, "coordinated");
    let r = ask(
        &mut sw,
        &knobs,
        Request::Switch {
            slot: 1,
            gen: 9,
            slot_ms: 40,
            at_ns: 0,
        },
    );
    assert!(r.ok, "{r:?}");
    assert_eq!(sw.bpf.switched.last(), Some(&(1, 9, 40_000_000)));
    let r = ask(
        &mut sw,
        &knobs,
        Request::Switch {
            slot: 3,
            gen: 10,
            slot_ms: 40,
            at_ns: 0,
        },
    );
    assert!(r.error.unwrap().contains("slot 3 does not exist"));
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn autonomous_runs_the_table_on_the_timer_until_the_next_command() {
    let root = gang_root("autonomous", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    assert!(ask(&mut sw, &knobs, Request::Autonomous).ok);
    assert!(sw.bpf.timer);
    assert_eq!(knobs.status.lock().unwrap().mode, "autonomous");
    let switch = Request::Switch {
        slot: 0,
        gen: 5,
        slot_ms: 50,
        at_ns: 0,
    };
    assert!(ask(&mut sw, &knobs, switch).ok);
    assert!(!sw.bpf.timer, "a command takes over again");
    assert_eq!(knobs.status.lock().unwrap().mode, "coordinated");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_freeze_parks_the_slots_gangs_until_the_next_switch() {
    let root = gang_root("freeze", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let freeze = freeze_request(3, 50);
    let r = ask(&mut sw, &knobs, freeze);
    // No freezer here: the plain cgroup.freeze file is written, the wait
    // for "frozen 1" times out.
    let report = r.frozen.expect("a freeze report");
    assert_eq!(report.gangs, vec!["job1".to_string()]);
    assert_eq!(sw.bpf.released.len(), 1, "its yielded tasks are let run");
    assert_eq!(
        fs::read_to_string(root.join("job1/cgroup.freeze")).unwrap(),
        "1"
    );
    let switch = Request::Switch {
        slot: 1,
        gen: 4,
        slot_ms: 50,
        at_ns: 0,
    };
    assert!(ask(&mut sw, &knobs, switch).ok);
    assert_eq!(
        fs::read_to_string(root.join("job1/cgroup.freeze")).unwrap(),
        "0",
        "the switch thaws it"
    );
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_gang_placed_in_the_next_slot_too_is_not_parked() {
    // job1 in both slots (fill), job2 in slot 0 only: a freeze for the
    // switch to slot 1 parks job2 alone.
    let root = gang_root("keep", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-1"), ("job2", "2-3")], &[("job1", "0-1")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let freeze = Request::Freeze {
        gen: 3,
        drain_timeout_ms: 10,
        to_slot: Some(1),
    };
    let report = ask(&mut sw, &knobs, freeze).frozen.expect("a report");
    assert_eq!(report.gangs, vec!["job2".to_string()]);
    let frozen =
        |g: &str| fs::read_to_string(root.join(g).join("cgroup.freeze")).unwrap_or_default();
    assert_eq!(frozen("job2"), "1");
    assert_ne!(frozen("job1"), "1", "job1 runs on in slot 1");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_timed_switch_thaws_the_parked_gangs_only_once_it_fired() {
    let root = gang_root("timed", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let freeze = freeze_request(3, 10);
    assert!(ask(&mut sw, &knobs, freeze).frozen.is_some());
    let at_ns = monotonic_ns() + 60_000_000_000;
    let switch = Request::Switch {
        slot: 1,
        gen: 4,
        slot_ms: 50,
        at_ns,
    };
    assert!(ask(&mut sw, &knobs, switch).ok);
    assert_eq!(sw.bpf.armed, Some((1, 4)), "armed in BPF, not switched");
    let frozen = || fs::read_to_string(root.join("job1/cgroup.freeze")).unwrap();
    sw.tick(Instant::now());
    assert_eq!(frozen(), "1", "job1 owns its CPUs until the instant");
    let wake = sw.next_wake().expect("the loop wakes at the instant");
    assert!(wake > Instant::now() + Duration::from_secs(59));
    sw.bpf.fire_armed();
    sw.tick(Instant::now());
    assert_eq!(frozen(), "0", "thawed once the timer fired");
    assert_eq!(sw.next_wake(), None);

    // An instant already past: at once, thawed at once.
    assert!(ask(&mut sw, &knobs, freeze_request(5, 10)).frozen.is_some());
    let late = Request::Switch {
        slot: 0,
        gen: 6,
        slot_ms: 50,
        at_ns: 1,
    };
    assert!(ask(&mut sw, &knobs, late).ok);
    assert_eq!(sw.bpf.cur, (0, 6));
    assert_eq!(
        fs::read_to_string(root.join("job2/cgroup.freeze")).unwrap(),
        "0"
    );
    let _ = fs::remove_dir_all(&root);
}

/// A gang that joins (or leaves) while a timed switch is armed changes the
/// table at once, and the armed switch stays: a switch at once to re-install
/// the slot in force would replace it in BPF, and the node missed its
/// boundary and the next ones for a second (the cluster benchmark: 20
/// switches of 50 ms unreported by one node at a run's start). Back to
/// standalone, the armed switch goes.
#[test]
fn a_gang_joining_keeps_the_timed_switch_armed_and_standalone_drops_it() {
    let root = gang_root("join-armed", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "2-3"), ("job3", "0-1")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let switch = Request::Switch {
        slot: 1,
        gen: 4,
        slot_ms: 50,
        at_ns: monotonic_ns() + 60_000_000_000,
    };
    assert!(ask(&mut sw, &knobs, switch).ok);
    let (tables, switches) = (sw.bpf.tables, sw.bpf.switched.len());

    fs::create_dir_all(root.join("job3")).unwrap();
    fs::write(root.join("job3/cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
    fs::write(root.join("job3/cgroup.procs"), "").unwrap();
    sw.rescan();
    assert_eq!(sw.registry.by_id().len(), 3, "job3 joined");
    assert_eq!(
        sw.bpf.tables,
        tables + 1,
        "the new table is written at once"
    );
    assert_eq!(sw.bpf.switched.len(), switches, "no switch at once");
    assert_eq!(sw.bpf.armed, Some((1, 4)), "the timed switch stays armed");
    sw.bpf.fire_armed();
    sw.tick(Instant::now());
    assert_eq!(sw.bpf.cur, (1, 4));

    // Armed again, then standalone: the switch at once replaces it.
    let switch = Request::Switch {
        slot: 0,
        gen: 5,
        slot_ms: 50,
        at_ns: monotonic_ns() + 60_000_000_000,
    };
    assert!(ask(&mut sw, &knobs, switch).ok);
    assert_eq!(sw.timed_replaced(), None, "gen 4 fired, nothing replaced");
    assert!(ask(&mut sw, &knobs, Request::Standalone).ok);
    assert_eq!(sw.bpf.armed, None, "standalone replaced the armed switch");
    assert_eq!(sw.timed_replaced(), Some(5), "the follower is told");
    assert_eq!(sw.timed_replaced(), None, "once");
    assert_eq!(
        sw.next_wake(),
        None,
        "nothing armed for the loop to wake on"
    );
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn with_park_bpf_a_freeze_parks_in_the_scheduler_and_the_switch_ends_it() {
    let root = gang_root("bpfpark", &["job1", "job2"]);
    let (mut sw, knobs) = switcher_with(&root, NodeKnobs::new());
    let id1 = sw.registry.get("job1").unwrap().id;
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let gen_in_force = sw.bpf.cur.1;
    let freeze = freeze_request(3, 50);
    let report = ask(&mut sw, &knobs, freeze)
        .frozen
        .expect("a freeze report");
    assert_eq!(report.gangs, vec!["job1".to_string()]);
    assert!(report.parked, "no CPU runs job1");
    assert!(report.drained, "no socket: drained");
    let (mask, gen, until) = sw.bpf.parks[0];
    assert_eq!(mask, 1 << id1, "job1 alone, the gang of the slot in force");
    assert_eq!(gen, gen_in_force, "for the generation in force");
    let now = monotonic_ns();
    assert!(
        until > now && until < now + 10_000_000_000,
        "bounded: {until} vs {now}"
    );
    assert!(
        sw.bpf.released.is_empty(),
        "yielded ranks stay parked by BPF"
    );
    assert_ne!(
        fs::read_to_string(root.join("job1/cgroup.freeze")).unwrap_or_default(),
        "1",
        "the freezer is not used"
    );
    // A switch at once ends the park in BPF (by its generation), not by a
    // second command that could land before the switch does.
    let switch = Request::Switch {
        slot: 1,
        gen: 4,
        slot_ms: 50,
        at_ns: 0,
    };
    assert!(ask(&mut sw, &knobs, switch).ok);
    assert_eq!(sw.bpf.parks.len(), 1, "no unpark command after a switch");
    // Going standalone ends a park explicitly.
    assert!(ask(&mut sw, &knobs, freeze_request(5, 10)).frozen.is_some());
    assert!(ask(&mut sw, &knobs, Request::Standalone).ok);
    assert_eq!(sw.bpf.parks.last(), Some(&(0, 0, 0)), "the park ended");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn system_calls_are_tracked_only_while_a_park_in_bpf_may_come() {
    let root = gang_root("tracking", &["job1", "job2"]);
    let (mut sw, knobs) = switcher_with(&root, NodeKnobs::new());
    assert!(!sw.bpf.tracking, "standalone: nothing is parked");
    let one = column(&[&[("job1", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: one }).ok);
    assert!(!sw.bpf.tracking, "one slot: a lone job's node pays nothing");
    let two = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: two }).ok);
    assert!(sw.bpf.tracking, "two slots, coordinated, park = bpf");
    let mut k = NodeKnobs::new();
    k.park = crate::knobs::Park::Freezer;
    sw.knobs_changed(&k).unwrap();
    assert!(!sw.bpf.tracking, "park = freezer needs none");
    sw.knobs_changed(&NodeKnobs::new()).unwrap();
    assert!(sw.bpf.tracking);
    assert!(ask(&mut sw, &knobs, Request::Standalone).ok);
    assert!(!sw.bpf.tracking, "standalone again");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_gang_that_loses_its_last_slot_stops_waiting_for_one() {
    let root = gang_root("rehome", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let id2 = sw.registry.get("job2").unwrap().id;
    let only_job1 = column(&[&[("job1", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: only_job1 }).ok);
    assert_eq!(sw.bpf.rehomed, vec![id2]);
    let _ = fs::remove_dir_all(&root);
}

/// The main loop's follower over this switcher: a plan is armed boundary
/// by boundary on the absolute timer, and every switch that fired is
/// reported; strict, each is parked first (here the fake freezer never
/// reports frozen: the first park waits out its 5 ms, past the 2 ms lead,
/// so that switch is late; the lead learns from it).
#[test]
fn a_plan_is_followed_boundary_by_boundary_and_each_switch_reported() {
    use crate::switching::follow::Follow;
    use crate::switching::timed::Done;
    use gang_wire::plan::{Plan, PlannedSlot};
    use gang_wire::proto::{Gen, SwitchOutcome};
    use std::sync::Mutex;

    for strict in [false, true] {
        let root = gang_root(&format!("follow-{strict}"), &["job1", "job2"]);
        let (mut sw, knobs) = switcher(&root);
        let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
        assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
        let reports: Arc<Mutex<Vec<Done>>> = Arc::default();
        let seen = reports.clone();
        let mut follow = Follow::new(
            Some(Arc::new(
                move |d: &Done, _: Option<&crate::control::FrozenReport>| {
                    seen.lock().unwrap().push(*d)
                },
            )),
            None,
        );
        let epoch = monotonic_ns() + 40_000_000;
        let plan = Request::Plan {
            plan: Plan {
                id: 1,
                epoch_ns: epoch,
                slot_ms: 60,
                slots: vec![PlannedSlot { slot: 1 }, PlannedSlot { slot: 0 }],
                first_gen: Gen(40),
            },
            effective_ns: epoch,
            strict,
            drain_timeout_ms: 5,
        };
        assert!(follow.take(&mut sw, &plan, monotonic_ns()).unwrap().is_ok());
        let deadline = Instant::now() + Duration::from_secs(5);
        while reports.lock().unwrap().len() < 2 && Instant::now() < deadline {
            follow.turn(&mut sw, monotonic_ns());
            // The absolute timer: fires at its instant, not before.
            if let Some((_, gen)) = sw.bpf.armed {
                let boundary = epoch + (gen - 40) * 60_000_000;
                if monotonic_ns() >= boundary {
                    sw.bpf.fire_armed();
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let got = reports.lock().unwrap().clone();
        assert_eq!(got.len(), 2, "strict {strict}: {got:?}");
        assert_eq!((got[0].gen, got[0].slot), (40, 1));
        assert_eq!((got[1].gen, got[1].slot), (41, 0));
        for d in &got {
            if !strict {
                assert_eq!(d.outcome, SwitchOutcome::OnTime, "armed ahead: {d:?}");
            } else if d.gen == 40 {
                assert_eq!(d.outcome, SwitchOutcome::Late, "{d:?}");
                assert!(d.late_ns > 0, "{d:?}");
            } else {
                // The lead learnt the first park's time (timed.rs tests
                // it exactly); here, on a busy host, it may still be late.
                assert_ne!(d.outcome, SwitchOutcome::TimedOut, "{d:?}");
            }
        }
        // A command from outside ends the plan.
        let switch = Request::Switch {
            slot: 0,
            gen: 99,
            slot_ms: 60,
            at_ns: 0,
        };
        assert!(
            follow.take(&mut sw, &switch, monotonic_ns()).is_none(),
            "handled by the switcher"
        );
        assert_eq!(follow.wait(monotonic_ns()), None);
        let _ = fs::remove_dir_all(&root);
    }
}

/// A switch armed after its instant (a node behind its plan, a drain that
/// ended past the boundary) fires at once in BPF, and the loop learns it
/// within a millisecond: nothing is armed ahead for the switcher to wake
/// the loop on, so the follower's own wait is what bounds the loop's sleep.
/// (It was the loop's idle period, 100 ms: at 50 ms slots the next boundary
/// was then missed too, and a node stayed late for whole runs.)
#[test]
fn a_switch_armed_late_is_reported_within_a_poll_not_at_the_idle_period() {
    use crate::switching::timed::FIRED_POLL_NS;
    use gang_wire::proto::SwitchOutcome;

    let root = gang_root("late-arm", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let (mut follow, reports) = follow_with_reports();
    // The plan (60 ms slots) began 130 ms ago: generation 42, slot 0, is
    // in force, and the node is behind it.
    let epoch = monotonic_ns() - 130_000_000;
    let plan = plan_request(1, epoch, 40, &[0, 1]);
    assert!(follow.take(&mut sw, &plan, monotonic_ns()).unwrap().is_ok());
    follow.turn(&mut sw, monotonic_ns());
    assert_eq!(sw.bpf.cur, (0, 42), "switched at once");
    assert!(
        reports.lock().unwrap().is_empty(),
        "reported at the next turn"
    );
    assert_eq!(sw.next_wake(), None, "nothing armed ahead");
    let wait = follow
        .wait(monotonic_ns())
        .expect("the follower waits for the fire");
    assert!(wait <= Duration::from_nanos(FIRED_POLL_NS), "{wait:?}");
    follow.turn(&mut sw, monotonic_ns());
    let got = reports.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].gen, got[0].outcome), (42, SwitchOutcome::Late));
    let _ = fs::remove_dir_all(&root);
}

/// A timed switch armed ahead and then replaced in BPF by a switch at once
/// (here a table without its slot) never fires. The follower hears it from
/// the switcher and goes on to the next boundary, instead of waiting for
/// the lost switch until ARM_LOST (a second) after its instant and then
/// finding itself behind the plan.
#[test]
fn a_timed_switch_replaced_before_it_fired_is_given_up_at_once() {
    use crate::switching::follow::Follow;
    use crate::switching::timed::ARM_LOST_NS;

    let root = gang_root("replaced-arm", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let slots = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots }).ok);
    let (mut follow, reports) = follow_with_reports();
    // Slots 0, 1 of 60 ms from 100 ms ahead: gen 10 is slot 0, 11 slot 1.
    let epoch = monotonic_ns() + 100_000_000;
    let boundary = |gen: u64| epoch + (gen - 10) * 60_000_000;
    let plan = plan_request(1, epoch, 10, &[0, 1]);
    assert!(follow.take(&mut sw, &plan, monotonic_ns()).unwrap().is_ok());
    // The loop's turns; an armed switch fires at its instant.
    let turn = |follow: &mut Follow, sw: &mut BpfSwitcher<FakeBpf>| {
        turn_firing(follow, sw, &boundary);
        std::thread::sleep(Duration::from_millis(1));
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while sw.bpf.armed != Some((1, 11)) && Instant::now() < deadline {
        turn(&mut follow, &mut sw);
    }
    assert_eq!(sw.bpf.armed, Some((1, 11)), "the switch to gen 11 armed");
    // A table without slot 1, before gen 11's instant: installed with a
    // switch at once, which replaces the armed one.
    sw.column(column(&[&[("job1", "0-3")]]), false).unwrap();
    assert_eq!(sw.bpf.armed, None, "replaced in BPF");
    let before = reports.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(5);
    while reports.lock().unwrap().len() == before && Instant::now() < deadline {
        turn(&mut follow, &mut sw);
    }
    let got = reports.lock().unwrap().clone();
    let next = got.get(before).expect("a switch after the replaced one");
    assert_eq!(next.gen, 12, "the next boundary's switch: {got:?}");
    assert!(
        next.at_ns < boundary(11) + ARM_LOST_NS / 2,
        "{} ms after the replaced switch's instant",
        (next.at_ns - boundary(11)) / 1_000_000
    );
    let _ = fs::remove_dir_all(&root);
}

/// The knob drain_lead_us fixes the lead whenever it is written: before
/// the plan came or after, and a new plan (gangd sends one whenever the
/// node's clock estimate moves) keeps it; auto gives the adaptive lead back
/// (here its floor: no switch measured yet, a clock error of 0).
#[test]
fn the_drain_lead_knob_fixes_the_lead_across_plans_until_set_to_auto() {
    use crate::switching::follow::Follow;
    let root = gang_root("lead-knob", &["job1", "job2"]);
    let (mut sw, _) = switcher(&root);
    let mut follow = Follow::new(None, None);
    follow.set_lead(Some(7_000), 75);
    assert_eq!(follow.lead_ns(), None, "no plan, no lead");
    let epoch = monotonic_ns() + 1_000_000_000;
    let plan = plan_request_with(1, epoch, 40, &[0, 1], true, 5);
    assert!(follow.take(&mut sw, &plan, monotonic_ns()).unwrap().is_ok());
    assert_eq!(follow.lead_ns(), Some(7_000_000), "set before the plan");
    follow.set_lead(Some(40_000), 75);
    assert_eq!(
        follow.lead_ns(),
        Some(15_000_000),
        "a quarter of the 60 ms slot at most"
    );
    follow.set_lead(Some(0), 75);
    assert!(follow.take(&mut sw, &plan, monotonic_ns()).unwrap().is_ok());
    assert_eq!(follow.lead_ns(), Some(0), "kept by the plan sent again");
    follow.set_lead(None, 75);
    assert_eq!(
        follow.lead_ns(),
        Some(2_000_000),
        "auto: the adaptive lead's floor"
    );
    let _ = fs::remove_dir_all(&root);
}

/// A follower whose reports (Done) are kept, and the list they go to.
#[cfg(test)]
fn follow_with_reports() -> (
    crate::switching::follow::Follow,
    Arc<std::sync::Mutex<Vec<crate::switching::timed::Done>>>,
) {
    use crate::switching::timed::Done;
    let reports: Arc<std::sync::Mutex<Vec<Done>>> = Arc::default();
    let seen = reports.clone();
    let follow = crate::switching::follow::Follow::new(
        Some(Arc::new(
            move |d: &Done, _: Option<&crate::control::FrozenReport>| seen.lock().unwrap().push(*d),
        )),
        None,
    );
    (follow, reports)
}

/// A plan of `slots` slot numbers, `slot_ms` each, from `epoch` on.
#[cfg(test)]
fn plan_request(id: u64, epoch: u64, first_gen: u64, slots: &[u32]) -> Request {
    plan_request_with(id, epoch, first_gen, slots, false, 5)
}

#[cfg(test)]
fn plan_request_with(
    id: u64,
    epoch: u64,
    first_gen: u64,
    slots: &[u32],
    strict: bool,
    drain_timeout_ms: u32,
) -> Request {
    use gang_wire::plan::{Plan, PlannedSlot};
    Request::Plan {
        plan: Plan {
            id,
            epoch_ns: epoch,
            slot_ms: 60,
            slots: slots.iter().map(|&slot| PlannedSlot { slot }).collect(),
            first_gen: gang_wire::proto::Gen(first_gen),
        },
        effective_ns: epoch,
        strict,
        drain_timeout_ms,
    }
}

/// gangd sends a node's new Schedule, then the Plan it goes with, which
/// takes effect at a boundary ahead. Installed on receipt, the new table
/// would run under the old plan until then (each node from the moment its
/// Schedule came): it is held, and installed at the new plan's first
/// boundary, with that switch.
#[test]
fn a_column_that_comes_with_a_plan_takes_effect_at_its_first_boundary() {
    use crate::switching::follow::Follow;

    let root = gang_root("column-at-plan", &["job1", "job2", "job3"]);
    let (mut sw, knobs) = switcher(&root);
    let id = |sw: &BpfSwitcher<FakeBpf>, g: &str| sw.registry.get(g).unwrap().id;
    let old = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: old }).ok);
    let (mut follow, reports) = follow_with_reports();
    // The loop's turns until `n` switches were reported; the armed timer
    // fires at once (barrier off arms half a slot ahead); `each` looks on.
    let run_until = |follow: &mut Follow,
                     sw: &mut BpfSwitcher<FakeBpf>,
                     n: usize,
                     each: &mut dyn FnMut(&BpfSwitcher<FakeBpf>)| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while reports.lock().unwrap().len() < n && Instant::now() < deadline {
            follow.turn(sw, monotonic_ns());
            sw.bpf.fire_armed();
            each(sw);
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let epoch = monotonic_ns() + 20_000_000;
    let plan1 = plan_request(1, epoch, 10, &[0, 1]);
    assert!(follow
        .take(&mut sw, &plan1, monotonic_ns())
        .unwrap()
        .is_ok());
    run_until(&mut follow, &mut sw, 1, &mut |_| {});
    assert_eq!(reports.lock().unwrap().len(), 1);

    // The new column while plan 1 is followed: held, the old table stays.
    let new = column(&[&[("job3", "0-3")], &[("job1", "0-3")]]);
    let taken = follow.take(&mut sw, &Request::Column { slots: new }, monotonic_ns());
    assert!(taken.unwrap().is_ok());
    assert_eq!(
        sw.table.owner(0, 0),
        Some(id(&sw, "job1")),
        "not installed on receipt"
    );
    // Plan 1 converted again (same id): the column still waits.
    let again = plan_request(1, epoch, 10, &[0, 1]);
    assert!(follow
        .take(&mut sw, &again, monotonic_ns())
        .unwrap()
        .is_ok());
    // Plan 2 from a boundary 150 ms ahead.
    let effective = monotonic_ns() + 150_000_000;
    let plan2 = plan_request(2, effective, 20, &[0, 1]);
    assert!(follow
        .take(&mut sw, &plan2, monotonic_ns())
        .unwrap()
        .is_ok());
    let job3 = id(&sw, "job3");
    let mut changed_at = None;
    let reports_before = reports.lock().unwrap().len();
    run_until(&mut follow, &mut sw, reports_before + 1, &mut |sw| {
        if changed_at.is_none() && sw.table.owner(0, 0) == Some(job3) {
            changed_at = Some(monotonic_ns());
        }
    });
    let got = reports.lock().unwrap().clone();
    let first = got.last().unwrap();
    assert_eq!((first.gen, first.slot), (20, 0), "{got:?}");
    let at = changed_at.expect("the new table was installed");
    assert!(
        at >= effective,
        "installed {} µs before the boundary",
        (effective - at) / 1000
    );
    assert_eq!(
        sw.bpf.cur,
        (0, 20),
        "the boundary's switch, with the new table"
    );
    assert_eq!(sw.table.owner(1, 0), Some(id(&sw, "job1")));

    // A column held when commands take over is installed at once.
    let last = column(&[&[("job2", "0-3")]]);
    assert!(follow
        .take(&mut sw, &Request::Column { slots: last }, monotonic_ns())
        .unwrap()
        .is_ok());
    assert_eq!(sw.table.owner(0, 0), Some(job3));
    let switch = Request::Switch {
        slot: 0,
        gen: 99,
        slot_ms: 60,
        at_ns: 0,
    };
    assert!(follow.take(&mut sw, &switch, monotonic_ns()).is_none());
    assert_eq!(
        sw.table.owner(0, 0),
        Some(id(&sw, "job2")),
        "installed before the command"
    );
    // Without a plan, a column is installed on receipt, as always.
    let plain = column(&[&[("job1", "0-3")]]);
    assert!(follow
        .take(&mut sw, &Request::Column { slots: plain }, monotonic_ns())
        .is_none());
    let _ = fs::remove_dir_all(&root);
}

/// The old plan's switch still in progress when the new plan comes (its
/// park outlasts the new plan's effective instant, here the same boundary
/// with another slot) is carried out with the old table, as it was
/// planned; the column goes with the new plan's own next switch.
#[test]
fn the_old_plans_switch_in_progress_keeps_the_old_table() {
    let root = gang_root("column-old-step", &["job1", "job2", "job3"]);
    let (mut sw, knobs) = switcher(&root);
    let id = |sw: &BpfSwitcher<FakeBpf>, g: &str| sw.registry.get(g).unwrap().id;
    let old = column(&[&[("job1", "0-3")], &[("job2", "0-3")], &[("job3", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: old }).ok);
    let (mut follow, reports) = follow_with_reports();
    // Strict; the fake freezer never reports frozen, so each park lasts
    // its 300 ms timeout: the switch to gen 11 (slot 1) is parked for long.
    let epoch = monotonic_ns() + 30_000_000;
    let plan1 = plan_request_with(1, epoch, 10, &[0, 1, 2], true, 300);
    assert!(follow
        .take(&mut sw, &plan1, monotonic_ns())
        .unwrap()
        .is_ok());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sent = false;
    let mut old_tables = 0;
    while reports.lock().unwrap().len() < 3 && Instant::now() < deadline {
        let now = monotonic_ns();
        follow.turn(&mut sw, now);
        if let Some((_, gen)) = sw.bpf.armed {
            if now >= epoch + (gen - 10) * 60_000_000 {
                sw.bpf.fire_armed();
            }
        }
        // While the park for gen 11 waits: the new column and plan 2,
        // effective at that very boundary, where its gen 11 is slot 0.
        let parking = follow.parking();
        if parking && !sent && reports.lock().unwrap().len() == 1 {
            sent = true;
            old_tables = sw.bpf.tables;
            let new = column(&[&[("job3", "0-3")], &[("job1", "0-3")]]);
            assert!(follow
                .take(&mut sw, &Request::Column { slots: new }, now)
                .unwrap()
                .is_ok());
            let plan2 = plan_request_with(2, epoch + 60_000_000, 11, &[0, 1], true, 300);
            assert!(follow.take(&mut sw, &plan2, now).unwrap().is_ok());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(sent, "the park for gen 11 was never seen");
    let got = reports.lock().unwrap().clone();
    assert!(got.len() >= 3, "{got:?}");
    assert_eq!(
        (got[1].gen, got[1].slot),
        (11, 1),
        "the old plan's switch: {got:?}"
    );
    let into = |gen: u64| {
        let found = sw.bpf.switched_after.iter().find(|x| x.1 == gen);
        found.map(|&(_, _, tables)| tables)
    };
    assert_eq!(
        into(11),
        Some(old_tables),
        "the old plan's switch, into the old table"
    );
    assert_eq!(
        into(got[2].gen),
        Some(old_tables + 1),
        "the new plan's, into the new one"
    );
    assert!(got[2].gen > 11, "{got:?}");
    assert_eq!(
        sw.table.owner(0, 0),
        Some(id(&sw, "job3")),
        "the new table is in force"
    );
    assert!(
        sw.bpf.switched.iter().any(|&(s, g, _)| (s, g) == (1, 11)),
        "{:?}",
        sw.bpf.switched
    );
    let _ = fs::remove_dir_all(&root);
}

/// One turn of the loop at now (returned); an armed switch whose
/// boundary (`boundary(gen)`) has come fires, as BPF's timer would.
#[cfg(test)]
fn turn_firing(
    follow: &mut crate::switching::follow::Follow,
    sw: &mut BpfSwitcher<FakeBpf>,
    boundary: &dyn Fn(u64) -> u64,
) -> u64 {
    let now = monotonic_ns();
    follow.turn(sw, now);
    if let Some((_, gen)) = sw.bpf.armed {
        if now >= boundary(gen) {
            sw.bpf.fire_armed();
            sw.tick(Instant::now());
        }
    }
    now
}

/// The armed switch into `gen` was reported, and no two reports are half
/// of ARM_LOST apart: a switch lost in BPF shows as such a gap (a boundary
/// a busy host's loop missed is skipped, not a gap).
#[cfg(test)]
fn no_switch_lost(got: &[crate::switching::timed::Done], gen: u64, what: &str) {
    use crate::switching::timed::ARM_LOST_NS;
    let gens: Vec<u64> = got.iter().map(|d| d.gen).collect();
    assert!(
        gens.contains(&gen),
        "{what}gen {gen} not reported: {gens:?}"
    );
    for w in got.windows(2) {
        assert!(
            w[1].at_ns - w[0].at_ns < ARM_LOST_NS / 2,
            "{what}{} ms between gens {} and {}: {got:?}",
            (w[1].at_ns - w[0].at_ns) / 1_000_000,
            w[0].gen,
            w[1].gen
        );
    }
}

/// A job joins a lone one: the node follows a one-slot plan, whose switch
/// into the slot already running is armed half a slot ahead, when the
/// two-slot table and the plan that goes with it come, effective at that
/// very boundary with the other slot (gangd starts a new cycle at the slot
/// after the one in force). No boundary may be lost: the evaluation showed
/// both nodes losing that switch and the next ten (ARM_LOST).
#[test]
fn a_second_job_joining_a_lone_ones_plan_loses_no_boundary() {
    let root = gang_root("join-lone", &["job1", "job2"]);
    let (mut sw, knobs) = switcher(&root);
    let one = column(&[&[("job1", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: one }).ok);
    let (mut follow, reports) = follow_with_reports();
    let epoch = monotonic_ns() + 30_000_000;
    let boundary = |gen: u64| epoch + (gen - 10) * 60_000_000;
    let plan1 = plan_request_with(1, epoch, 10, &[0], true, 5);
    assert!(follow
        .take(&mut sw, &plan1, monotonic_ns())
        .unwrap()
        .is_ok());
    let mut sent = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while reports.lock().unwrap().iter().all(|d| d.gen < 16) && Instant::now() < deadline {
        let now = turn_firing(&mut follow, &mut sw, &boundary);
        if !sent && sw.bpf.armed == Some((0, 12)) {
            sent = true;
            let two = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
            assert!(follow
                .take(&mut sw, &Request::Column { slots: two }, now)
                .unwrap()
                .is_ok());
            let plan2 = plan_request_with(2, boundary(12), 12, &[1, 0], true, 5);
            assert!(follow.take(&mut sw, &plan2, now).unwrap().is_ok());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(sent, "gen 12 was never armed");
    no_switch_lost(&reports.lock().unwrap(), 12, "");
    let _ = fs::remove_dir_all(&root);
}

/// The same, with a third job right behind the second: the three-slot
/// table and its plan (replacing the two-slot plan before it took effect)
/// come a few ms later, while gen 12 is still armed.
#[test]
fn two_jobs_joining_a_lone_ones_plan_at_once_lose_no_boundary() {
    for third_at in [12u64, 13] {
        let root = gang_root("join-lone2", &["job1", "job2", "job3"]);
        let (mut sw, knobs) = switcher(&root);
        let one = column(&[&[("job1", "0-3")]]);
        assert!(ask(&mut sw, &knobs, Request::Column { slots: one }).ok);
        let (mut follow, reports) = follow_with_reports();
        let epoch = monotonic_ns() + 30_000_000;
        let boundary = |gen: u64| epoch + (gen - 10) * 60_000_000;
        let plan1 = plan_request_with(1, epoch, 10, &[0], true, 5);
        assert!(follow
            .take(&mut sw, &plan1, monotonic_ns())
            .unwrap()
            .is_ok());
        let mut step = 0;
        let mut sent_at = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while reports.lock().unwrap().iter().all(|d| d.gen < 17) && Instant::now() < deadline {
            let now = turn_firing(&mut follow, &mut sw, &boundary);
            if step == 0 && sw.bpf.armed == Some((0, 12)) {
                step = 1;
                sent_at = now;
                let two = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
                assert!(follow
                    .take(&mut sw, &Request::Column { slots: two }, now)
                    .unwrap()
                    .is_ok());
                let plan2 = plan_request_with(2, boundary(12), 12, &[1, 0], true, 5);
                assert!(follow.take(&mut sw, &plan2, now).unwrap().is_ok());
            }
            if step == 1 && now >= sent_at + 5_000_000 {
                step = 2;
                let three = column(&[&[("job1", "0-3")], &[("job2", "0-3")], &[("job3", "0-3")]]);
                assert!(follow
                    .take(&mut sw, &Request::Column { slots: three }, now)
                    .unwrap()
                    .is_ok());
                let slots: &[u32] = if third_at == 12 {
                    &[1, 2, 0]
                } else {
                    &[0, 1, 2]
                };
                let plan3 = plan_request_with(3, boundary(third_at), third_at, slots, true, 5);
                assert!(follow.take(&mut sw, &plan3, now).unwrap().is_ok());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(step, 2, "third plan {third_at}: gen 12 was never armed");
        no_switch_lost(
            &reports.lock().unwrap(),
            12,
            &format!("third plan at {third_at}: "),
        );
        let _ = fs::remove_dir_all(&root);
    }
}

/// Two jobs start a moment apart beside a lone one: the second's table
/// and plan come, the plan's first switch becomes due (carried out by the
/// loop at its boundary with that table: nothing is armed in BPF for it),
/// and then the third's table comes. The due switch still happens, with
/// its own table, and the newer table waits for its own plan. It replaced
/// the due one before: the follower then waited for a switch nothing had
/// armed, until ARM_LOST (the evaluation: gen 1527 and the next ten lost
/// on both nodes at such a start).
#[test]
fn a_column_coming_while_a_held_ones_switch_is_due_loses_no_switch() {
    let root = gang_root("due-column", &["job1", "job2", "job3"]);
    let (mut sw, knobs) = switcher(&root);
    let id = |sw: &BpfSwitcher<FakeBpf>, g: &str| sw.registry.get(g).unwrap().id;
    let one = column(&[&[("job1", "0-3")]]);
    assert!(ask(&mut sw, &knobs, Request::Column { slots: one }).ok);
    let (mut follow, reports) = follow_with_reports();
    let epoch = monotonic_ns() + 30_000_000;
    let boundary = |gen: u64| epoch + (gen - 10) * 60_000_000;
    let plan1 = plan_request(1, epoch, 10, &[0]);
    assert!(follow
        .take(&mut sw, &plan1, monotonic_ns())
        .unwrap()
        .is_ok());
    let (mut step, mut was_due) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(5);
    while reports.lock().unwrap().iter().all(|d| d.gen < 16) && Instant::now() < deadline {
        let now = turn_firing(&mut follow, &mut sw, &boundary);
        if step == 0 && !reports.lock().unwrap().is_empty() {
            // The second job: two slots from gen 12 (slot 1, then 0).
            step = 1;
            let two = column(&[&[("job1", "0-3")], &[("job2", "0-3")]]);
            assert!(follow
                .take(&mut sw, &Request::Column { slots: two }, now)
                .unwrap()
                .is_ok());
            let plan2 = plan_request(2, boundary(12), 12, &[1, 0]);
            assert!(follow.take(&mut sw, &plan2, now).unwrap().is_ok());
        }
        if step == 1 && follow.switch_due() {
            // The third job's table while gen 12's switch is due, and its
            // plan from gen 14.
            step = 2;
            was_due = sw.bpf.armed.is_none();
            let three = column(&[&[("job1", "0-3")], &[("job2", "0-3")], &[("job3", "0-3")]]);
            assert!(follow
                .take(&mut sw, &Request::Column { slots: three }, now)
                .unwrap()
                .is_ok());
            let plan3 = plan_request(3, boundary(14), 14, &[2, 0, 1]);
            assert!(follow.take(&mut sw, &plan3, now).unwrap().is_ok());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(step, 2, "gen 12's switch never became due");
    assert!(was_due, "nothing armed in BPF for the due switch");
    let got = reports.lock().unwrap().clone();
    no_switch_lost(&got, 12, "");
    let at12 = got.iter().find(|d| d.gen == 12).unwrap();
    assert_eq!(at12.slot, 1, "gen 12 into the second job's slot: {got:?}");
    assert_eq!(
        sw.table.owner(2, 0),
        Some(id(&sw, "job3")),
        "the third table in force by gen 14: {got:?}"
    );
    let _ = fs::remove_dir_all(&root);
}
