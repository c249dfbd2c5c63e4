//! The non-BPF modes against real processes: every gang here is a few
//! `sleep` children of the test, listed by a fake process source instead
//! of cgroups, and "stopped" means what /proc says ('T').

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::none::NoSwitching;
use super::signal::SignalNode;
use super::sigstop::{self, process_state, ProcessSource, Signaller, MAX_PASSES};
use super::*;
use crate::control::{GangCpus, Pending, Request, Response};
use crate::knobs::NodeKnobs;

/// Children of the test, killed (and reaped) when dropped: a failed test
/// leaves nothing stopped behind.
#[derive(Default)]
struct Children(Mutex<Vec<Child>>);

impl Children {
    fn spawn(&self) -> i32 {
        let child = Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawning sleep");
        let pid = child.id() as i32;
        self.0.lock().unwrap().push(child);
        pid
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in self.0.lock().unwrap().iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[derive(Default)]
struct Gangs {
    procs: BTreeMap<String, Vec<i32>>,
    /// Gang -> listings that each fork a new process right after listing
    /// (the new one is not in that listing: it was forked "meanwhile").
    forks_after_listing: BTreeMap<String, u32>,
}

/// A process source over the test's children. Clones share the gangs.
#[derive(Clone, Default)]
struct FakeSource {
    gangs: Arc<Mutex<Gangs>>,
    children: Arc<Children>,
}

impl FakeSource {
    /// A gang of `n` fresh processes; returns their pids.
    fn gang(&self, name: &str, n: usize) -> Vec<i32> {
        let pids: Vec<i32> = (0..n).map(|_| self.children.spawn()).collect();
        self.gangs
            .lock()
            .unwrap()
            .procs
            .entry(name.into())
            .or_default()
            .extend(&pids);
        pids
    }

    fn pids(&self, name: &str) -> Vec<i32> {
        self.gangs
            .lock()
            .unwrap()
            .procs
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    fn fork_after_next_listings(&self, name: &str, listings: u32) {
        self.gangs
            .lock()
            .unwrap()
            .forks_after_listing
            .insert(name.into(), listings);
    }
}

impl ProcessSource for FakeSource {
    fn processes(&self, gang: &str) -> io::Result<Vec<i32>> {
        let mut g = self.gangs.lock().unwrap();
        let listed = g.procs.get(gang).cloned().unwrap_or_default();
        if let Some(n) = g.forks_after_listing.get_mut(gang) {
            if *n > 0 {
                *n -= 1;
                let pid = self.children.spawn();
                g.procs.entry(gang.into()).or_default().push(pid);
            }
        }
        Ok(listed)
    }

    fn gangs(&self) -> io::Result<Vec<String>> {
        let g = self.gangs.lock().unwrap();
        Ok(g.procs
            .iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(n, _)| n.clone())
            .collect())
    }
}

fn stopped(pid: i32) -> bool {
    process_state(pid) == Some('T')
}

/// A stop takes effect when the process next runs: wait for it a little.
fn eventually_stopped(pid: i32) -> bool {
    sigstop::wait_parked(&[pid], Instant::now() + Duration::from_secs(5)) && stopped(pid)
}

fn all_stopped(pids: &[i32]) -> bool {
    pids.iter().all(|&p| eventually_stopped(p))
}

fn none_stopped(pids: &[i32]) -> bool {
    pids.iter().all(|&p| !stopped(p))
}

fn placements(slots: &[&[&str]]) -> Vec<Vec<GangCpus>> {
    slots
        .iter()
        .map(|s| {
            s.iter()
                .map(|g| GangCpus {
                    gang: g.to_string(),
                    cpus: "0".into(),
                })
                .collect()
        })
        .collect()
}

/// A coordinated node with gangs a (slot 0) and b (slot 1), two processes each.
fn two_slot_node() -> (FakeSource, SignalNode<FakeSource>, Vec<i32>, Vec<i32>) {
    let src = FakeSource::default();
    let a = src.gang("a", 2);
    let b = src.gang("b", 2);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    node.column(&placements(&[&["a"], &["b"]]), false).unwrap();
    (src, node, a, b)
}

// ---- the signaller -------------------------------------------------------------------

#[test]
fn stopping_a_gang_stops_each_of_its_processes_and_continuing_resumes_them() {
    let src = FakeSource::default();
    let pids = src.gang("a", 3);
    let mut s = Signaller::new(src.clone());
    let report = s.stop("a");
    assert_eq!(report.newly_stopped.len(), 3);
    assert!(all_stopped(&pids));
    assert_eq!(
        s.stop("a").newly_stopped,
        Vec::<i32>::new(),
        "stopping again is idempotent"
    );
    assert_eq!(s.continue_gang("a"), 3);
    assert!(none_stopped(&pids));
    assert!(s.stopped_gangs().is_empty());
}

#[test]
fn a_process_forked_between_listing_and_signalling_is_stopped_too() {
    let src = FakeSource::default();
    src.gang("a", 1);
    src.fork_after_next_listings("a", 2);
    let mut s = Signaller::new(src.clone());
    let report = s.stop("a");
    let all = src.pids("a");
    assert_eq!(all.len(), 3, "two processes appeared mid-stop");
    assert!(
        all_stopped(&all),
        "the late ones are caught by listing again"
    );
    assert_eq!(
        report.passes, 4,
        "three passes with new processes, one with none"
    );
    assert!(!report.escaped);
}

#[test]
fn a_gang_that_forks_at_every_listing_is_reported_not_chased_forever() {
    let src = FakeSource::default();
    src.gang("a", 1);
    src.fork_after_next_listings("a", 100);
    let mut s = Signaller::new(src.clone());
    let report = s.stop("a");
    assert!(report.escaped);
    assert_eq!(report.passes, MAX_PASSES + 1);
    drop(s);
    assert!(none_stopped(&src.pids("a")));
}

#[test]
fn dropping_the_signaller_continues_every_process_it_stopped() {
    let src = FakeSource::default();
    let a = src.gang("a", 2);
    let b = src.gang("b", 2);
    let mut s = Signaller::new(src.clone());
    s.stop("a");
    s.stop("b");
    assert!(all_stopped(&a) && all_stopped(&b));
    drop(s);
    assert!(none_stopped(&a) && none_stopped(&b));
}

#[test]
fn continuing_leaves_alone_what_someone_else_stopped() {
    let src = FakeSource::default();
    let a = src.gang("a", 1);
    let other = src.children.spawn();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(other),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let mut s = Signaller::new(src.clone());
    s.stop("a");
    s.continue_all();
    drop(s);
    assert!(none_stopped(&a));
    assert!(
        eventually_stopped(other),
        "a process the signaller never stopped stays as it was"
    );
}

#[test]
fn recovery_continues_only_processes_left_stopped() {
    let src = FakeSource::default();
    let pids = src.gang("a", 2);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    assert!(eventually_stopped(pids[0]));
    assert_eq!(
        sigstop::continue_stopped(&pids),
        1,
        "the running one gets no SIGCONT"
    );
    assert!(none_stopped(&pids));
}

// ---- the signal mode's node ------------------------------------------------------------

#[test]
fn a_switch_stops_the_other_slots_gangs_and_continues_the_incoming_ones() {
    let (_src, mut node, a, b) = two_slot_node();
    assert_eq!(node.mode(), Mode::Coordinated);
    assert!(none_stopped(&a), "slot 0 is in force: a runs");
    assert!(all_stopped(&b), "b waits for slot 1");
    node.switch(1, 7).unwrap();
    assert!(all_stopped(&a) && none_stopped(&b));
    node.switch(0, 8).unwrap();
    assert!(none_stopped(&a) && all_stopped(&b));
    assert_eq!(node.current_slot(), 0);
    assert_eq!(node.switches(), 2);
}

#[test]
fn a_switch_stops_the_outgoing_gang_before_it_continues_the_incoming_one() {
    // The order is seen from the incoming gang: when it runs again, every
    // process of the outgoing one is already stopped.
    let (_src, mut node, a, b) = two_slot_node();
    node.switch(1, 1).unwrap();
    assert!(
        a.iter().all(|&p| stopped(p)),
        "stopped without waiting: the switch waited"
    );
    assert!(none_stopped(&b));
}

#[test]
fn a_gang_in_two_slots_runs_in_both() {
    let src = FakeSource::default();
    let a = src.gang("a", 1);
    let b = src.gang("b", 1);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    let mut cols = placements(&[&["a", "b"], &["a"]]);
    cols[0][1].cpus = "1".into();
    node.column(&cols, false).unwrap();
    node.switch(1, 1).unwrap();
    assert!(none_stopped(&a) && all_stopped(&b));
    node.switch(0, 2).unwrap();
    assert!(none_stopped(&a) && none_stopped(&b));
}

#[test]
fn a_gang_placed_in_the_next_slot_too_is_not_stopped_by_the_freeze() {
    // a in both slots (fill), b in slot 0 only: the switch to slot 1
    // stops b alone; a runs on across it.
    let src = FakeSource::default();
    let a = src.gang("a", 2);
    let b = src.gang("b", 2);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    let cpus = |gang: &str, cpus: &str| GangCpus {
        gang: gang.into(),
        cpus: cpus.into(),
    };
    let table = vec![vec![cpus("a", "0"), cpus("b", "1")], vec![cpus("a", "0")]];
    node.column(&table, false).unwrap();
    node.switch(0, 1).unwrap();
    let report = node.freeze(2, Some(1), Duration::from_millis(100)).unwrap()().unwrap();
    assert_eq!(report.gangs, vec!["b".to_string()]);
    assert!(none_stopped(&a), "a runs in slot 1 too");
    assert!(all_stopped(&b));
    // Without the next slot (an old agent), every gang of the slot stops.
    node.switch(0, 3).unwrap();
    node.freeze(4, None, Duration::from_millis(100)).unwrap()().unwrap();
    assert!(all_stopped(&a) && all_stopped(&b));
}

#[test]
fn gangs_in_no_slot_are_never_stopped() {
    let (src, mut node, _a, _b) = two_slot_node();
    let outsider = src.gang("c", 2);
    for (slot, gen) in [(1, 1), (0, 2), (1, 3)] {
        node.switch(slot, gen).unwrap();
        node.rescan();
        assert!(none_stopped(&outsider), "after the switch to slot {slot}");
    }
    node.freeze(4, None, Duration::from_millis(100)).unwrap()().unwrap();
    assert!(
        none_stopped(&outsider),
        "a freeze stops only the slot's gangs"
    );
}

#[test]
fn a_gang_dropped_from_the_table_is_continued_at_once() {
    let (_src, mut node, a, b) = two_slot_node();
    assert!(all_stopped(&b));
    node.column(&placements(&[&["a"]]), false).unwrap();
    assert!(none_stopped(&b), "b is in no slot any more");
    assert!(none_stopped(&a));
}

#[test]
fn a_process_that_joins_a_held_gang_is_stopped_by_the_rescan() {
    let (src, mut node, _a, _b) = two_slot_node();
    let late = src.gang("b", 1);
    node.rescan();
    assert!(all_stopped(&late));
    let early = src.gang("a", 1);
    node.rescan();
    assert!(none_stopped(&early), "a's slot is in force");
}

#[test]
fn a_gang_of_the_schedule_that_starts_later_is_held_as_soon_as_it_appears() {
    let src = FakeSource::default();
    let a = src.gang("a", 1);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    node.column(&placements(&[&["a"], &["job9"]]), false)
        .expect("a column may name gangs with no processes here yet");
    let late = src.gang("job9", 2);
    node.rescan();
    assert!(all_stopped(&late) && none_stopped(&a));
}

#[test]
fn dropping_the_node_continues_everything_like_a_daemon_exit() {
    let (_src, mut node, a, b) = two_slot_node();
    node.freeze(1, None, Duration::from_millis(100)).unwrap()().unwrap();
    assert!(all_stopped(&a) && all_stopped(&b));
    drop(node);
    assert!(none_stopped(&a) && none_stopped(&b));
}

#[test]
fn freeze_stops_the_slots_own_gangs_and_reports_honestly() {
    let (_src, mut node, a, b) = two_slot_node();
    let wait = node.freeze(5, None, Duration::from_millis(500)).unwrap();
    let report = wait().unwrap();
    assert_eq!(report.gen, 5);
    assert_eq!(report.gangs, vec!["a".to_string()]);
    assert!(report.parked, "{report:?}");
    assert!(report.drained, "no sockets: nothing to drain: {report:?}");
    assert!(report.park_us <= report.drain_us, "{report:?}");
    assert!(report.drain_us < 500_000, "{report:?}");
    assert!(all_stopped(&a) && all_stopped(&b));
    node.switch(1, 6).unwrap();
    assert!(
        all_stopped(&a) && none_stopped(&b),
        "the switch continues only the incoming slot"
    );
}

#[test]
fn a_freeze_followed_by_a_switch_to_the_same_slot_continues_it() {
    let (_src, mut node, a, _b) = two_slot_node();
    node.freeze(1, None, Duration::from_millis(100)).unwrap()().unwrap();
    node.switch(0, 2).unwrap();
    assert!(none_stopped(&a));
}

#[test]
fn switch_and_freeze_need_a_schedule_and_an_existing_slot() {
    let src = FakeSource::default();
    src.gang("a", 1);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    let e = node.switch(0, 1).unwrap_err().to_string();
    assert!(e.contains("need an explicit schedule"), "{e}");
    assert!(node.freeze(1, None, Duration::ZERO).is_err());
    assert!(node.autonomous().is_err());
    node.column(&placements(&[&["a"], &[]]), false).unwrap();
    node.switch(1, 2)
        .expect("an empty trailing slot is still a slot");
    let e = node.switch(2, 3).unwrap_err().to_string();
    assert!(e.contains("slot 2 does not exist"), "{e}");
}

#[test]
fn a_bad_column_is_refused_whole_and_the_old_one_stays() {
    let (_src, mut node, a, b) = two_slot_node();
    let mut clash = placements(&[&["a", "b"]]);
    clash[0][1].cpus = "0".into();
    let e = format!("{:#}", node.column(&clash, false).unwrap_err());
    assert!(e.contains("placing gang b in slot 0"), "{e}");
    let mut bad = placements(&[&["a"]]);
    bad[0][0].cpus = "9".into();
    assert!(node.column(&bad, false).is_err(), "CPU 9 of 4");
    assert_eq!(node.table().len(), 2);
    assert!(none_stopped(&a) && all_stopped(&b));
}

#[test]
fn an_explicit_schedule_refuses_gangs_without_processes() {
    let src = FakeSource::default();
    src.gang("a", 1);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    let e = node
        .column(&placements(&[&["a"], &["ghost"]]), true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"ghost\" is not known"), "{e}");
    assert_eq!(node.mode(), Mode::Standalone);
}

#[test]
fn standalone_rotates_one_slot_per_gang_on_the_timer() {
    let src = FakeSource::default();
    let a = src.gang("a", 1);
    let b = src.gang("b", 1);
    let c = src.gang("c", 1);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    node.rescan();
    assert_eq!(node.table().len(), 3);
    assert!(none_stopped(&a) && all_stopped(&b) && all_stopped(&c));
    let due = node.next_wake().expect("the timer runs standalone");
    node.tick(due - Duration::from_millis(1));
    assert_eq!(node.current_slot(), 0, "not before the slot's end");
    node.tick(due);
    assert!(all_stopped(&a) && none_stopped(&b) && all_stopped(&c));
    let due = node.next_wake().unwrap();
    node.tick(due);
    node.tick(node.next_wake().unwrap());
    assert_eq!(node.current_slot(), 0, "round and round");
    assert!(none_stopped(&a) && all_stopped(&b) && all_stopped(&c));
}

#[test]
fn a_lone_gang_standalone_is_never_stopped() {
    let src = FakeSource::default();
    let a = src.gang("a", 2);
    let mut node = SignalNode::new(src.clone(), 4, 1);
    node.rescan();
    for _ in 0..3 {
        node.tick(node.next_wake().unwrap());
    }
    assert!(none_stopped(&a));
    assert_eq!(node.switches(), 0);
}

#[test]
fn rotate_continues_what_a_freeze_stopped_and_runs_the_table_on_the_timer() {
    let (_src, mut node, a, b) = two_slot_node();
    assert_eq!(
        node.next_wake(),
        None,
        "coordinated: switches come by command"
    );
    node.freeze(1, None, Duration::from_millis(100)).unwrap()().unwrap();
    node.autonomous().unwrap();
    assert_eq!(node.mode(), Mode::Autonomous);
    assert!(none_stopped(&a), "the frozen slot runs again");
    node.set_slot_ms(20);
    node.tick(node.next_wake().unwrap());
    assert!(all_stopped(&a) && none_stopped(&b));
    node.switch(0, 9).unwrap();
    assert_eq!(node.mode(), Mode::Coordinated, "a command takes over again");
    assert_eq!(node.next_wake(), None);
}

#[test]
fn back_to_standalone_gives_every_gang_a_slot_of_its_own() {
    let (src, mut node, _a, _b) = two_slot_node();
    src.gang("c", 1);
    node.standalone().unwrap();
    assert_eq!(node.mode(), Mode::Standalone);
    assert_eq!(node.table().len(), 3);
    assert!(node.next_wake().is_some());
}

#[test]
fn the_status_files_show_the_table_and_who_is_stopped() {
    let (_src, node, _a, _b) = two_slot_node();
    let st = node.status();
    assert_eq!(st.mode, "coordinated");
    assert_eq!((st.nr_slots, st.nr_gangs, st.current_slot), (2, 2, 0));
    assert!(
        st.gangs.contains("a slots=0x1 ranks=2 stopped=0"),
        "{}",
        st.gangs
    );
    assert!(
        st.gangs.contains("b slots=0x2 ranks=2 stopped=2"),
        "{}",
        st.gangs
    );
}

// ---- requests, the none mode, the main loop ------------------------------------------------

fn ask(local: &mut dyn Switcher, mode: Switching, request: Request) -> Response {
    ask_with(
        &SharedKnobs::new(NodeKnobs::default(), 4),
        local,
        mode,
        request,
    )
}

/// A request through `handle`, with the status files of `knobs`.
fn ask_with(
    knobs: &SharedKnobs,
    local: &mut dyn Switcher,
    mode: Switching,
    request: Request,
) -> Response {
    assert_eq!(local.switching(), mode);
    let (tx, rx) = mpsc::channel();
    handle(local, request, tx, knobs);
    rx.recv_timeout(Duration::from_secs(10)).expect("an answer")
}

#[test]
fn the_status_files_show_a_request_as_soon_as_it_is_answered() {
    let src = FakeSource::default();
    let _a = src.gang("a", 1);
    let _b = src.gang("b", 1);
    let mut node = SignalNode::new(src.clone(), 4, 50);
    node.rescan();
    let knobs = SharedKnobs::new(NodeKnobs::default(), 4);
    let mut ask_and_read = |request| {
        assert!(ask_with(&knobs, &mut node, Switching::Signal, request).ok);
        knobs.status.lock().unwrap().clone()
    };
    let st = ask_and_read(Request::Schedule {
        slots: placements(&[&["a"], &["b"]]),
    });
    assert_eq!((st.mode.as_str(), st.nr_slots), ("coordinated", 2));
    let st = ask_and_read(Request::Standalone);
    assert_eq!(st.mode, "standalone");
}

#[test]
fn trace_is_refused_without_bpf() {
    let src = FakeSource::default();
    for (mode, mut local) in [
        (
            Switching::Signal,
            Box::new(SignalNode::new(src.clone(), 4, 50)) as Box<dyn Switcher>,
        ),
        (Switching::None, Box::new(NoSwitching::new(src.clone()))),
    ] {
        let r = ask(local.as_mut(), mode, Request::Trace { seconds: 1.0 });
        assert!(!r.ok);
        assert!(r.error.unwrap().contains("trace needs --switching bpf"));
    }
}

#[test]
fn none_mode_accepts_every_scheduling_request_and_stops_nothing() {
    let src = FakeSource::default();
    let a = src.gang("a", 1);
    let b = src.gang("b", 1);
    let mut local = NoSwitching::new(src.clone());
    let m = Switching::None;
    for request in [
        Request::Column {
            slots: placements(&[&["a"], &["b"]]),
        },
        Request::Switch {
            slot: 1,
            gen: 1,
            slot_ms: 100,
            at_ns: 0,
        },
        Request::Autonomous,
        Request::Standalone,
    ] {
        assert!(ask(&mut local, m, request).ok);
    }
    let r = ask(
        &mut local,
        m,
        Request::Freeze {
            gen: 3,
            drain_timeout_ms: 100,
            to_slot: None,
        },
    );
    let f = r.frozen.expect("a freeze report");
    assert_eq!((f.gen, f.parked, f.drained), (3, false, false));
    assert!(f.gangs.is_empty());
    assert!(none_stopped(&a) && none_stopped(&b));
    assert_eq!(local.status().mode, "none");
}

#[test]
fn a_freeze_is_answered_with_its_report_through_the_request_path() {
    let (_src, mut node, a, _b) = two_slot_node();
    let r = ask(
        &mut node,
        Switching::Signal,
        Request::Freeze {
            gen: 4,
            drain_timeout_ms: 200,
            to_slot: None,
        },
    );
    assert!(r.ok, "{r:?}");
    assert_eq!(r.frozen.unwrap().gangs, vec!["a".to_string()]);
    assert!(all_stopped(&a));
}

#[test]
fn a_column_is_checked_as_a_whole_the_same_in_every_mode() {
    let place = |gang: &str, cpus: &str| GangCpus {
        gang: gang.into(),
        cpus: cpus.into(),
    };
    let empty = || SlotTable::new(4, CpuList::new());
    let ok = vec![
        vec![place("a", "0-1"), place("b", "2-3")],
        vec![place("a", "0-3")],
    ];
    assert!(check_column(empty(), &ok).is_ok());
    let twice = vec![vec![place("a", "0-1"), place("b", "1-2")]];
    let e = check_column(empty(), &twice).unwrap_err();
    assert!(
        format!("{e:#}").contains("placing gang b in slot 0"),
        "{e:#}"
    );
    assert!(check_column(empty(), &[vec![place("a", "9")]]).is_err());
    let housekeeping = SlotTable::new(4, CpuList::parse("0", 4).unwrap());
    assert!(check_column(housekeeping, &[vec![place("a", "0")]]).is_err());
    let too_many = vec![Vec::new(); crate::slots::MAX_SLOTS + 1];
    let e = check_column(empty(), &too_many).unwrap_err();
    assert!(e.to_string().contains("slots: at most"), "{e}");
}

#[test]
fn the_mode_flag_refuses_none_without_a_coordinator_and_stats_without_bpf() {
    let e = Switching::None.check(false, false).unwrap_err().to_string();
    assert!(e.contains("--switching none needs --coordinator"), "{e}");
    assert!(Switching::None.check(true, false).is_ok());
    assert!(
        Switching::Signal.check(false, false).is_ok(),
        "signal alone rotates the local gangs"
    );
    assert!(Switching::Signal.check(true, true).is_err());
    assert!(Switching::Bpf.check(false, true).is_ok());
    assert!(
        Switching::Bpf.uses_bpf() && !Switching::Signal.uses_bpf() && !Switching::None.uses_bpf()
    );
}

/// A gang root of plain files: cgroup.procs and cgroup.events of each gang.
fn fake_gang_root(test: &str, gangs: &[(&str, &[i32])]) -> PathBuf {
    let root =
        std::env::temp_dir().join(format!("scx-gang-switching-{}-{test}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    for (name, pids) in gangs {
        let dir = root.join(name);
        fs::create_dir_all(&dir).unwrap();
        let procs: String = pids.iter().map(|p| format!("{p}\n")).collect();
        fs::write(dir.join("cgroup.procs"), procs).unwrap();
        fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
    }
    root
}

#[test]
fn the_main_loop_switches_real_processes_and_continues_them_at_shutdown() {
    let children = Children::default();
    let a: Vec<i32> = (0..2).map(|_| children.spawn()).collect();
    let b: Vec<i32> = (0..2).map(|_| children.spawn()).collect();
    let root = fake_gang_root("loop", &[("job1", &a), ("job2", &b)]);
    let knobs = SharedKnobs::new(NodeKnobs::new(), 4);
    let (inbox, requests) = mpsc::channel();
    let cfg = LoopConfig {
        mode: Switching::Signal,
        gang_root: root.clone(),
        gang_watch: true,
        nr_cpus: 4,
        knobs: knobs.clone(),
        inbox: inbox.clone(),
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let stop = shutdown.clone();
    let daemon = std::thread::spawn(move || run_without_bpf(&cfg, &requests, &stop));
    let call = |request: Request| {
        let (reply, answer) = mpsc::channel();
        inbox
            .send(Inbox::Request(Pending { request, reply }))
            .unwrap();
        answer.recv_timeout(Duration::from_secs(10)).unwrap()
    };
    let column = placements(&[&["job1"], &["job2"]]);
    assert!(call(Request::Column { slots: column }).ok);
    assert!(none_stopped(&a) && all_stopped(&b));
    let r = call(Request::Switch {
        slot: 1,
        gen: 2,
        slot_ms: 100,
        at_ns: 0,
    });
    assert!(r.ok, "{r:?}");
    assert!(all_stopped(&a) && none_stopped(&b));
    let r = call(Request::Trace { seconds: 1.0 });
    assert!(r.error.unwrap().contains("trace needs --switching bpf"));
    shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    daemon.join().unwrap().unwrap();
    assert!(
        none_stopped(&a) && none_stopped(&b),
        "the daemon's exit continues everything"
    );
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn standalone_without_a_coordinator_rotates_the_gangs_of_the_root() {
    let children = Children::default();
    let a = [children.spawn()];
    let b = [children.spawn()];
    let root = fake_gang_root("standalone", &[("x", &a), ("y", &b)]);
    let mut k = NodeKnobs::new();
    k.slot_ms = 30;
    let knobs = SharedKnobs::new(k, 4);
    let (_inbox, requests) = mpsc::channel();
    let cfg = LoopConfig {
        mode: Switching::Signal,
        gang_root: root.clone(),
        gang_watch: true,
        nr_cpus: 4,
        knobs: knobs.clone(),
        inbox: _inbox.clone(),
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let stop = shutdown.clone();
    let daemon = std::thread::spawn(move || run_without_bpf(&cfg, &requests, &stop));
    // Sample both for a while: each is stopped some of the time, never
    // both at once (beyond a sample caught mid-switch).
    // 200 samples (at least 2 ms apart: a few slots of 30 ms however
    // loaded the host); two reads are not one instant, so a sample may
    // straddle a switch now and then.
    const SAMPLES: u32 = 200;
    let (mut a_only, mut b_only, mut both, mut neither) = (0, 0, 0, 0);
    for _ in 0..SAMPLES {
        match (stopped(a[0]), stopped(b[0])) {
            (false, true) => a_only += 1,
            (true, false) => b_only += 1,
            (false, false) => both += 1,
            (true, true) => neither += 1,
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    daemon.join().unwrap().unwrap();
    let counts = format!("a alone {a_only}, b alone {b_only}, both {both}, neither {neither}");
    assert!(
        a_only >= SAMPLES / 8 && b_only >= SAMPLES / 8,
        "both get turns: {counts}"
    );
    assert!(
        both + neither <= SAMPLES / 10,
        "one runs at a time: {counts}"
    );
    assert!(none_stopped(&a) && none_stopped(&b));
    assert!(
        knobs.status.lock().unwrap().switches >= 5,
        "{:?}",
        knobs.status.lock().unwrap()
    );
    let _ = fs::remove_dir_all(&root);
}

/// The main loop of a standalone node (signal mode) on a fake gang root,
/// watched or not; each gang of `names` is then made in the root, a
/// moment apart, and the time until the status counts it is returned.
fn times_to_see_new_gangs(test: &str, gang_watch: bool, names: &[&str]) -> Vec<Duration> {
    let children = Children::default();
    let first = [children.spawn()];
    let root = fake_gang_root(test, &[("job1", &first)]);
    let staging = root.with_extension("staging");
    let mut k = NodeKnobs::new();
    k.slot_ms = 10_000;
    let knobs = SharedKnobs::new(k, 4);
    let (inbox, requests) = mpsc::channel();
    let cfg = LoopConfig {
        mode: Switching::Signal,
        gang_root: root.clone(),
        gang_watch,
        nr_cpus: 4,
        knobs: knobs.clone(),
        inbox,
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let stop = shutdown.clone();
    let daemon = std::thread::spawn(move || run_without_bpf(&cfg, &requests, &stop));
    let nr_gangs = || knobs.status.lock().unwrap().nr_gangs as usize;
    let wait_for = |n: usize| {
        let t0 = Instant::now();
        while nr_gangs() != n {
            assert!(t0.elapsed() < Duration::from_secs(10), "never {n} gangs");
            std::thread::sleep(Duration::from_millis(2));
        }
        t0.elapsed()
    };
    wait_for(1);
    let mut times = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // Made aside and moved in, files and all, as cgroupfs makes one.
        let dir = staging.join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.procs"), format!("{}\n", children.spawn())).unwrap();
        fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        fs::rename(&dir, root.join(name)).unwrap();
        times.push(wait_for(i + 2));
    }
    shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    daemon.join().unwrap().unwrap();
    let _ = fs::remove_dir_all(&root);
    let _ = fs::remove_dir_all(&staging);
    times
}

#[test]
fn a_watched_gang_root_is_rescanned_when_a_gang_appears_not_a_second_later() {
    // The slow rescan behind the watch comes every SLOW_SCAN_PERIOD (1 s):
    // three gangs seen within a quarter of it each were seen by the watch
    // (by chance, with the slow rescan alone, one time in 64).
    let times = times_to_see_new_gangs("watched", true, &["job2", "job3", "job4"]);
    let limit = SLOW_SCAN_PERIOD / 4;
    assert!(
        times.iter().all(|t| *t < limit),
        "{times:?} (limit {limit:?})"
    );
}

#[test]
fn without_the_watch_the_root_is_rescanned_every_scan_period() {
    let times = times_to_see_new_gangs("unwatched", false, &["job2", "job3"]);
    let limit = SCAN_PERIOD * 5;
    assert!(
        times.iter().all(|t| *t < limit),
        "{times:?} (limit {limit:?})"
    );
}

// ---- real cgroups, where the host has a writable cgroup v2 ------------------------------

/// A fresh directory in a writable cgroup-v2 hierarchy (root only), or None
/// (the test then checks nothing: say so).
fn real_cgroup_root(test: &str) -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .filter(|m| crate::preflight::is_cgroup2(m))
        .find_map(|m| {
            let root = m.join(format!("scx-gang-test-{}-{test}", std::process::id()));
            fs::create_dir(&root).ok().map(|_| root)
        })
}

fn eventually(cond: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while !cond() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

fn join(dir: &std::path::Path, pid: i32) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
}

fn remove_cgroups(dir: &std::path::Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroups(&e.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

#[test]
fn on_real_cgroups_a_suspended_gang_stays_frozen_through_every_switch() {
    let Some(root) = real_cgroup_root("frozen") else {
        eprintln!("no writable cgroup v2 here (or not root): nothing checked");
        return;
    };
    let children = Children::default();
    let a = children.spawn();
    let b = children.spawn();
    // b's process is in a cgroup below its gang's: it belongs to the gang.
    join(&root.join("a"), a);
    join(&root.join("b/rank0"), b);
    let src = sigstop::CgroupProcesses::new(&root);
    assert_eq!(src.processes("b").unwrap(), vec![b]);
    let mut node = SignalNode::new(src, 4, 50);
    node.column(&placements(&[&["a"], &["b"]]), false).unwrap();
    assert!(all_stopped(&[b]) && none_stopped(&[a]));

    // The operator suspends a (the agent's FreezeHolds write cgroup.freeze).
    crate::freezer::set_frozen(&root.join("a"), true).unwrap();
    let frozen = || crate::freezer::is_frozen(&root.join("a"));
    assert!(eventually(frozen), "the freezer parks a");
    for (slot, gen) in [(1, 1), (0, 2), (1, 3), (0, 4)] {
        node.switch(slot, gen).unwrap();
        assert!(frozen(), "slot {slot}: SIGCONT never thaws a suspended job");
    }
    drop(node);
    assert!(frozen(), "nor does the daemon's exit");
    crate::freezer::set_frozen(&root.join("a"), false).unwrap();
    assert!(eventually(|| !frozen()));
    assert!(none_stopped(&[a, b]), "resumed, nothing is left stopped");
    drop(children);
    remove_cgroups(&root);
}
