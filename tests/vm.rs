//! Acceptance tests of the node scheduler, run in the VM test bed: a qemu VM
//! booting a Debian sched_ext kernel (the host kernel has no sched_ext).
//!
//! Each test boots one node with a scenario from tests/vm/scenarios/ and
//! checks what the scenario wrote back. They need the VM test bed
//! (scripts/setup.sh) and boot VMs, so they are ignored by a plain
//! `cargo test`; scripts/test.sh runs them with `--include-ignored`.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use common::{
    assert_overlap_below, assert_scheduler_never_failed, console_tail, hang_diagnosis, json,
    need_binaries, read, repo, tail,
};
use serde_json::Value;

/// The project's binaries for the image: the daemon and the workloads,
/// built into the same directory by `cargo build --workspace`.
fn binaries() -> Vec<PathBuf> {
    let daemon = PathBuf::from(env!("CARGO_BIN_EXE_scx_gang"));
    let dir = daemon.parent().unwrap().to_path_buf();
    let mut bins = vec![daemon];
    bins.extend(need_binaries(
        &dir,
        &[
            "burn",
            "sigswitch",
            "ring",
            "slotclock",
            "rt",
            "allreduce",
            "ep",
        ],
        "build the workspace first (cargo build --workspace)",
    ));
    bins
}

/// The node's initramfs, built once per test run.
fn image() -> &'static Path {
    common::image("scx_gang.cpio.gz", binaries, &[])
}

/// The known emulator fault: multi-threaded TCG sometimes runs stale code
/// while the guest kernel patches its own text (boot, static keys). It shows
/// as an int3 oops (a breakpoint the kernel has already taken out), or as an
/// invalid opcode at the kernel's own check in text_poke (the bytes read
/// back are not the ones written). It is qemu's, not the scheduler's, so
/// such a run is repeated; an oops anywhere else is a failure.
fn emulator_fault(console: &str) -> Option<&'static str> {
    if console.contains("Oops: int3") {
        Some("Oops: int3")
    } else if console.contains("Oops: invalid opcode") && console.contains("text_poke") {
        Some("Oops: invalid opcode in text_poke")
    } else {
        None
    }
}
/// Boots after the first that an emulator fault may cost a test. The
/// fault comes at any text patch (the kernel's at boot, sched_ext's static
/// keys at attach and detach, the syscall tracepoint the park turns on):
/// CI of 2026-12-08 had three in a row on `freeze` (at 27 s, 1.9 s and
/// 5.6 s), the fourth boot passing; a boot costs 5-30 s.
const EMULATOR_RETRIES: usize = 5;

#[test]
fn only_text_patching_oopses_count_as_emulator_faults() {
    assert_eq!(
        emulator_fault("[ 1.2] Oops: int3: 0000 [#1] SMP NOPTI\n"),
        Some("Oops: int3")
    );
    assert!(emulator_fault(
        "kernel BUG at arch/x86/kernel/alternative.c:2531!\n\
         Oops: invalid opcode: 0000 [#1] SMP NOPTI\nRIP: 0010:__text_poke+0x29c/0x400\n"
    )
    .is_some());
    // An invalid opcode elsewhere, any other oops, a clean boot: not qemu's.
    assert_eq!(
        emulator_fault("Oops: invalid opcode: 0000 [#1]\nRIP: 0010:scx_dispatch+0x10\n"),
        None
    );
    assert_eq!(
        emulator_fault("BUG: kernel NULL pointer dereference\nOops: 0000 [#1]\n"),
        None
    );
    assert_eq!(emulator_fault("reboot: Power down\n"), None);
}

/// Boots one node running `scenario` and returns its results. VMs use
/// multi-threaded TCG: with single-threaded TCG the vCPUs take turns and a
/// cross-CPU kick waits for the other vCPU's turn, which blurs every timing.
/// VM tests run one at a time: two VMs on two host cores blur it too.
fn run_scenario(scenario: &str, vcpus: u32, timeout_s: u32) -> PathBuf {
    boot(
        scenario,
        &["--vcpus", &vcpus.to_string(), "--mttcg"],
        timeout_s,
    )
}

/// Boots one node running `scenario` with scripts/cluster.sh's `options`
/// (vCPUs, TCG mode, kernel arguments) and returns its results.
fn boot(scenario: &str, options: &[&str], timeout_s: u32) -> PathBuf {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = repo().join("target/vm/results").join(scenario);
    let node = out.join("node0");
    for attempt in 0..=EMULATOR_RETRIES {
        let _ = fs::remove_dir_all(&out);
        let status = Command::new(repo().join("scripts/cluster.sh"))
            .arg("--image")
            .arg(image())
            .args(["--scenario", scenario, "--nodes", "1"])
            .args(options)
            .args(["--timeout", &timeout_s.to_string()])
            .arg("--out")
            .arg(&out)
            .status()
            .expect("running scripts/cluster.sh");
        if status.success() {
            assert_scheduler_never_failed(&node);
            return node;
        }
        // Each failed boot is kept beside the results for whoever looks.
        let kept = out.with_extension(format!("failed-{attempt}"));
        let _ = fs::remove_dir_all(&kept);
        let _ = fs::rename(&out, &kept);
        let console = fs::read_to_string(kept.join("node0.console.log")).unwrap_or_default();
        if let Some(fault) = emulator_fault(&console).filter(|_| attempt < EMULATOR_RETRIES) {
            eprintln!(
                "scenario {scenario}: emulator fault ({fault}), booting again (that boot in {})",
                kept.display()
            );
            continue;
        }
        let node = kept.join("node0");
        let mut msg = format!(
            "scenario {scenario} failed on boot {} (results in {}; host at boot: {})\n\
             failure: {}\n--- scenario.log ---\n{}\n--- scx_gang.log ---\n{}\n--- console ---\n{}",
            attempt + 1,
            kept.display(),
            fs::read_to_string(kept.join("host_load"))
                .unwrap_or_default()
                .replace('\n', ", "),
            fs::read_to_string(node.join("failure"))
                .unwrap_or_else(|_| "(none written)".into())
                .trim(),
            tail(&node.join("scenario.log"), 15),
            tail(&node.join("scx_gang.log"), 25),
            console_tail(&kept.join("node0.console.log"), 40),
        );
        let hang = hang_diagnosis(&node);
        if !hang.is_empty() {
            msg += &format!("\n--- hang ---\n{hang}");
        }
        panic!("{msg}");
    }
    unreachable!()
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for key in path {
        cur = &cur[*key];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

fn summary(dir: &Path) -> Value {
    json(dir, "trace.json")["summary"].clone()
}

/// Share of all gang run time that `gang` got.
fn gang_share(summary: &Value, gang: &str) -> f64 {
    f(summary, &["gangs", gang, "share_of_gang_time"])
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn loads_attaches_and_detaches_cleanly() {
    let r = run_scenario("attach", 2, 180);
    assert_eq!(read(&r, "state_before"), "disabled");
    assert!(
        read(&r, "ops").starts_with("gang"),
        "the attached scheduler is ours: {}",
        read(&r, "ops")
    );
    let knobs = read(&r, "knobs");
    for k in [
        "slot_ms",
        "fill",
        "housekeeping_cpus",
        "min_other_share_pct",
        "mode",
        "current_slot",
        "switches",
        "nr_gangs",
    ] {
        assert!(
            knobs.lines().any(|l| l == k),
            "knob file {k} missing: {knobs}"
        );
    }
    assert_ne!(
        read(&r, "second.rc"),
        "0",
        "a second scheduler must be refused"
    );
    assert!(
        read(&r, "second.out").contains("another sched_ext scheduler is attached"),
        "{}",
        read(&r, "second.out")
    );
    assert_ne!(read(&r, "badflag.rc"), "0");
    assert!(
        read(&r, "badflag.out").contains("slot_ms must be in"),
        "{}",
        read(&r, "badflag.out")
    );
    assert_eq!(read(&r, "scx_gang.rc"), "0", "Ctrl-C is a clean exit");
    assert!(
        read(&r, "scx_gang.log").contains("[scx_gang] gangs 0 slots 0"),
        "--stats printed nothing"
    );
    assert_ne!(read(&r, "nocgroup.rc"), "0");
    assert!(
        read(&r, "nocgroup.out").contains("cgroup v2 is not mounted at /tmp"),
        "{}",
        read(&r, "nocgroup.out")
    );
    assert_eq!(
        read(&r, "state_after"),
        "disabled",
        "back on the default scheduler"
    );
    let dmesg = read(&r, "dmesg.txt");
    assert!(dmesg.contains("sched_ext: BPF scheduler \"gang"), "{dmesg}");
    assert!(
        dmesg.contains("disabled (unregistered from user space)"),
        "{dmesg}"
    );
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn two_gangs_alternate_without_overlap_and_others_progress() {
    let r = run_scenario("two_gangs", 2, 240);
    let s = summary(&r);
    for g in ["a", "b"] {
        let share = gang_share(&s, g);
        assert!(
            (0.40..=0.60).contains(&share),
            "gang {g} got {share:.3} of gang time: {s}"
        );
        let of_cpu = f(&s, &["gangs", g, "share_of_cpu"]);
        assert!(
            of_cpu >= 0.35,
            "gang {g} got {of_cpu:.3} of all CPU time: {s}"
        );
    }
    assert_overlap_below(&s, 0.01, "two gangs");
    assert!(f(&s, &["switches"]) >= 100.0, "10 s at 50 ms slots: {s}");
    let other = json(&r, "other.json");
    assert!(
        f(&other, &["units"]) > 0.0,
        "the task of no gang made no progress: {other}"
    );
    assert!(
        f(&other, &["cpu_s"]) >= 0.05,
        "the task of no gang got almost no CPU: {other}"
    );
    assert!(f(&s, &["other_ns"]) > 0.0);
    assert_eq!(read(&r, "scx_gang.rc"), "0");
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn slot_ms_knob_changes_the_slot_and_refuses_bad_values() {
    let r = run_scenario("slot_knob", 2, 240);
    assert_eq!(read(&r, "write20.rc"), "0");
    assert_eq!(read(&r, "after20"), "20");
    for bad in ["write0", "writeabc"] {
        assert_ne!(read(&r, &format!("{bad}.rc")), "0", "{bad} was accepted");
        let err = read(&r, &format!("{bad}.err"));
        assert!(err.contains("Invalid argument"), "{bad}: {err}");
    }
    assert_ne!(
        read(&r, "writero.rc"),
        "0",
        "a read-only knob accepted a write"
    );
    assert_eq!(
        read(&r, "after_bad"),
        "20",
        "a refused write changed the value"
    );
    let s = summary(&r);
    let slot = f(&s, &["slot_len_ms", "p50"]);
    assert!(
        (16.0..=24.0).contains(&slot),
        "observed slot length {slot} ms, expected 20 ± 20 %: {s}"
    );
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn kill_9_returns_the_node_to_the_default_scheduler() {
    let r = run_scenario("kill9", 2, 180);
    let ms: u64 = read(&r, "detach_ms").parse().unwrap();
    assert!(ms <= 1000, "detached after {ms} ms");
    assert_eq!(read(&r, "state_after"), "disabled");
    assert_eq!(read(&r, "workloads_after_kill"), "alive");
    for g in ["a", "b"] {
        assert_eq!(read(&r, &format!("{g}.rc")), "0");
        assert!(f(&json(&r, &format!("{g}.json")), &["units"]) > 0.0);
    }
    assert_eq!(
        read(&r, "scx_gang.rc"),
        "0",
        "a new instance starts and stops cleanly after kill -9"
    );
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn a_gang_that_exits_gives_its_slot_back() {
    let r = run_scenario("gang_exit", 2, 180);
    assert_eq!(read(&r, "nr_slots_after"), "1");
    let s = summary(&r);
    let long = f(&s, &["gangs", "long", "share_of_cpu"]);
    assert!(
        long >= 0.90,
        "the remaining gang got {long:.3} of the CPUs: {s}"
    );
}

/// Run time of gang `name` on `cpu` in a trace's timeline.
fn run_on_cpu(trace: &Value, cpu: usize, name: &str) -> f64 {
    let id: i64 = trace["meta"]["gang_names"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, v)| v.as_str() == Some(name))
        .map(|(k, _)| k.parse().unwrap())
        .unwrap_or_else(|| panic!("gang {name} not in the trace"));
    trace["cpus"][cpu]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["gang"].as_i64() == Some(id))
        .map(|i| (i["end_ns"].as_u64().unwrap() - i["start_ns"].as_u64().unwrap()) as f64)
        .sum()
}

fn all_gang_run_on_cpu(trace: &Value, cpu: usize) -> f64 {
    trace["cpus"][cpu]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["gang"].as_i64().unwrap() >= 0)
        .map(|i| (i["end_ns"].as_u64().unwrap() - i["start_ns"].as_u64().unwrap()) as f64)
        .sum()
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn the_placement_api_space_shares_switches_by_command_and_refuses_bad_tables() {
    let r = run_scenario("placement", 2, 240);
    assert_eq!(read(&r, "mode_coordinated"), "coordinated");

    // One slot, a on CPU 0 and b on CPU 1: each stays on its CPU.
    let space = json(&r, "space.json");
    assert!(run_on_cpu(&space, 0, "a") > 0.8 * f(&space, &["summary", "duration_ns"]));
    assert!(run_on_cpu(&space, 1, "b") > 0.8 * f(&space, &["summary", "duration_ns"]));
    assert_eq!(run_on_cpu(&space, 0, "b"), 0.0, "b ran on a's CPU");
    assert_eq!(run_on_cpu(&space, 1, "a"), 0.0, "a ran on b's CPU");

    for (case, msg) in [
        ("double", "already belongs to gang"),
        ("nocpu", "CPU 7 does not exist"),
        ("nogang", "gang \"zzz\" is not known"),
        ("noslot", "slot 5 does not exist"),
        ("garbage", "not a valid request"),
    ] {
        assert_ne!(read(&r, &format!("{case}.rc")), "0", "{case} accepted");
        let err = read(&r, &format!("{case}.err"));
        assert!(err.contains(msg), "{case}: {err}");
    }
    assert_eq!(
        read(&r, "nr_slots_after_refusals"),
        "1",
        "a refused schedule changed the table"
    );

    // Switches by command: tagged as commands, with the generations sent.
    let cmd = json(&r, "command.json");
    let switches = cmd["switches"].as_array().unwrap();
    let by_command: Vec<&Value> = switches.iter().filter(|s| s["cause"] == 2).collect();
    assert!(
        by_command.len() >= 15,
        "{} command switches",
        by_command.len()
    );
    assert!(by_command.iter().all(|s| s["gen"].as_u64().unwrap() > 1000));
    assert!(
        switches.iter().all(|s| s["cause"] == 2),
        "the timer switched in coordinated mode"
    );
    // A command takes the CPUs when the slot timer fires: the wait is
    // part of the switch's latency, and the old slot's runs before it are
    // not overlap (the owners change then, not at the command).
    let mut delays_us: Vec<f64> = by_command
        .iter()
        .map(|s| s["delay_ns"].as_f64().unwrap() / 1e3)
        .collect();
    delays_us.sort_by(f64::total_cmp);
    eprintln!(
        "command switches: timer delay p50 {:.0} µs, max {:.0} µs; latency p50 {:.0} µs, max {:.0} µs",
        delays_us[delays_us.len() / 2],
        delays_us[delays_us.len() - 1],
        cmd["summary"]["switch_latency_us"]["p50"],
        cmd["summary"]["switch_latency_us"]["max"],
    );
    for s in &by_command {
        if let Some(lat) = s["latency_ns"].as_u64() {
            assert!(
                s["delay_ns"].as_u64().unwrap() <= lat,
                "delay past latency: {s}"
            );
        }
    }
    assert_overlap_below(&cmd["summary"], 0.01, "coordinated");

    // Timed switches: each fired on its absolute timer at the instant it
    // was armed for, never before (a timer that ignored BPF_F_TIMER_ABS
    // would fire 60 ms early, at once), and soon after.
    let armed: BTreeMap<u64, u64> = read(&r, "timed.out")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            assert_eq!(v["answer"]["ok"], true, "{l}");
            (v["gen"].as_u64().unwrap(), v["at_ns"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(armed.len(), 30, "{armed:?}");
    let timed = json(&r, "timed.json");
    let mut late_us: Vec<f64> = timed["switches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["cause"] == 4)
        .map(|s| {
            let gen = s["gen"].as_u64().unwrap();
            let at = armed[&gen] as f64;
            (s["ts_ns"].as_f64().unwrap() - at) / 1e3
        })
        .collect();
    late_us.sort_by(f64::total_cmp);
    assert!(
        late_us.len() >= 15,
        "{} timed switches traced",
        late_us.len()
    );
    assert!(late_us[0] >= 0.0, "a timed switch fired early: {late_us:?}");
    let p50 = late_us[late_us.len() / 2];
    eprintln!(
        "timed switches: lateness p50 {p50:.0} µs, max {:.0} µs",
        late_us[late_us.len() - 1]
    );
    assert!(p50 < 10_000.0, "timed switches fire late: {late_us:?}");
    assert_overlap_below(&timed["summary"], 0.01, "timed");

    // Standalone again, CPU 0 kept for housekeeping: no gang runs there.
    assert_eq!(read(&r, "mode_standalone"), "standalone");
    let hk = json(&r, "housekeeping.json");
    assert_eq!(
        all_gang_run_on_cpu(&hk, 0),
        0.0,
        "a gang ran on the housekeeping CPU"
    );
    let on_cpu1 = all_gang_run_on_cpu(&hk, 1) / f(&hk, &["summary", "duration_ns"]);
    assert!(
        on_cpu1 > 0.8,
        "gangs ran {on_cpu1:.3} of CPU 1 with CPU 0 kept for housekeeping"
    );

    // A task pinned to the housekeeping CPU cannot run where its gang runs:
    // it runs as a task of no gang instead of waiting forever.
    assert_eq!(read(&r, "pinned.rc"), "0");
    assert!(
        f(&json(&r, "pinned.json"), &["cpu_s"]) > 0.5,
        "{}",
        read(&r, "pinned.json")
    );
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn fill_uses_idle_cpus_without_delaying_the_owner() {
    let r = run_scenario("fill", 2, 240);
    let nofill = json(&r, "nofill.json")["summary"].clone();
    let fill = json(&r, "fill.json")["summary"].clone();
    assert_eq!(f(&nofill, &["fill_ns"]), 0.0, "fill off, yet fill time");
    assert_overlap_below(&nofill, 0.01, "fill off");
    assert!(
        f(&fill, &["fill_ns"]) > 0.1 * f(&fill, &["duration_ns"]),
        "fill on, but idle CPUs stayed idle: {fill}"
    );
    assert_overlap_below(&fill, 0.01, "fill on");
    let a_before = f(&nofill, &["gangs", "a", "run_ns"]) / f(&nofill, &["duration_ns"]);
    let a_after = f(&fill, &["gangs", "a", "run_ns"]) / f(&fill, &["duration_ns"]);
    assert!(
        a_after >= 0.9 * a_before,
        "the owner lost time to fill: {a_before:.3} -> {a_after:.3}"
    );
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn freeze_parks_the_slot_and_reports_the_drain() {
    let r = run_scenario("freeze", 2, 240);
    let freezes: Vec<Value> = read(&r, "freezes.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v.get("frozen").cloned())
        .collect();
    assert_eq!(freezes.len(), 10, "one report per freeze");
    for f in &freezes {
        assert_eq!(f["parked"], true, "{f}");
        assert_eq!(f["drained"], true, "a reading sink always drains: {f}");
        assert_eq!(f["gangs"].as_array().unwrap().len(), 1, "{f}");
    }
    let streaming: Vec<&Value> = freezes.iter().filter(|f| f["gangs"][0] == "a").collect();
    assert!(
        streaming
            .iter()
            .all(|f| f["sockets"].as_u64().unwrap() >= 1),
        "{streaming:?}"
    );
    let trace = json(&r, "trace.json");
    assert_overlap_below(&trace["summary"], 0.01, "strict barrier");

    let timeout = json(&r, "timeout.json")["frozen"].clone();
    assert_eq!(timeout["parked"], true, "{timeout}");
    assert_eq!(
        timeout["drained"], false,
        "a sink that does not read cannot drain: {timeout}"
    );
    assert!(
        timeout["drain_us"].as_u64().unwrap() >= 300_000,
        "{timeout}"
    );
    assert!(timeout["drained_bytes"].as_u64().unwrap() > 0, "{timeout}");
    // The drain check read the socket watch (it loaded), and a sock_diag
    // dump of the same stuck socket agrees with it.
    let log = read(&r, "scx_gang.log");
    assert!(
        log.contains("the drain check reads the gangs' sockets from the socket watch"),
        "the socket watch did not load: {log}"
    );
    assert_eq!(read(&r, "drain_check"), "sock_diag");
    // `scx_gang sockets`: its own watch's seed finds the stuck socket, as
    // the dump does; a cgroup outside the gang root is refused.
    let sockets = read(&r, "sockets.txt");
    assert_eq!(read(&r, "sockets.rc"), "0", "{sockets}");
    assert!(
        sockets.contains("sockets: watch 1, sock_diag 1, both 1"),
        "{sockets}"
    );
    assert!(sockets.contains("sock_diag / watch at p50"), "{sockets}");
    assert_ne!(read(&r, "sockets_sink.rc"), "0");
    assert!(read(&r, "sockets_sink.txt").contains("is not a gang"));
    let dumped = json(&r, "timeout_sock_diag.json")["frozen"].clone();
    assert_eq!(dumped["drained"], false, "{dumped}");
    assert!(dumped["drained_bytes"].as_u64().unwrap() > 0, "{dumped}");
    for field in ["sockets", "busy_sockets"] {
        assert_eq!(
            timeout[field], dumped[field],
            "{field}: the watch {timeout} against sock_diag {dumped}"
        );
    }

    assert_ne!(read(&r, "standalone.rc"), "0");
    assert!(read(&r, "standalone.err").contains("freeze needs an explicit schedule"));
    assert_eq!(
        read(&r, "thawed"),
        "frozen 0",
        "park = bpf (default): the cgroup freezer is never used"
    );
    // The park was the scheduler's: CPUs running a parked gang were
    // preempted, or tasks inside a system call ran to its end and stopped
    // there (the counters at exit: "park kicks K syscalls S exits E").
    let after = |word: &str| exit_counter(&log, word);
    assert!(
        after("park kicks ") + after(" exits ") > 0,
        "ten parks, none in BPF: {}",
        exit_counter_line(&log)
    );
}

/// The daemon's "counters at exit" line in its log.
fn exit_counter_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.contains("counters at exit"))
        .expect("the counters at exit")
}

/// The number after `word` in the counters at exit ("park kicks 3 ...").
fn exit_counter(log: &str, word: &str) -> u64 {
    let counters = exit_counter_line(log);
    let rest = &counters[counters
        .find(word)
        .unwrap_or_else(|| panic!("{word} in {counters}"))
        + word.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn tasks_of_one_gang_take_turns_of_a_time_sharing_slice() {
    let r = run_scenario("gang_turns", 2, 240);
    // Two processes of a gang spin on its two CPUs; a third wakes every
    // 20 ms and waits for the nearer end of their turns (GANG_SLICE_NS,
    // 5 ms, seen at a 4 ms tick): 3.96-3.99 ms late (p50) in two runs. A
    // slice of 20 ms for a task with none of its gang waiting, cut at a
    // tick once one waits, made it 4.6-6.5 ms (max 24); uncut, 8.1 ms.
    let napper = json(&r, "napper.json");
    let late = f(&napper, &["nap_late_p50_ms"]);
    assert!(f(&napper, &["naps"]) >= 100.0, "{napper}");
    assert!(
        late <= 6.0,
        "a woken task of the gang ran {late:.2} ms late (p50): {napper}"
    );
    // Three spinning processes take turns: each gets its third of the
    // CPUs (two thirds of one) and waits about one turn at a time.
    for i in 1..=3 {
        let b = json(&r, &format!("turn{i}.json"));
        let share = f(&b, &["cpu_s"]) / f(&b, &["elapsed_s"]);
        assert!(
            (0.45..=0.85).contains(&share),
            "turn{i} ran {share:.3} of the time: {b}"
        );
        assert!(f(&b, &["wait_p50_ms"]) <= 9.0, "turn{i}: {b}");
    }
    assert_eq!(read(&r, "scx_gang.rc"), "0");
}

/// Counters of one gang in the node's `gangs` status file.
fn slot_ends(status: &str, gang: &str) -> std::collections::HashMap<String, f64> {
    let line = status
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(gang))
        .unwrap_or_else(|| panic!("gang {gang} not in the status:\n{status}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn yielding_ranks_end_their_slots_voluntarily_and_wait_policies_lose_nothing() {
    let r = run_scenario("yield", 2, 420);
    let (before, after) = (read(&r, "gangs_before"), read(&r, "gangs_after"));
    let delta =
        |gang: &str, key: &str| slot_ends(&after, gang)[key] - slot_ends(&before, gang)[key];
    // Gang a yields at every iteration: its slots end by its own choice.
    let (vol, forced) = (delta("a", "voluntary"), delta("a", "forced"));
    assert!(vol + forced >= 40.0, "8 s of 50 ms slots: {after}");
    assert!(
        vol / (vol + forced) >= 0.9,
        "gang a: {vol} voluntary, {forced} forced ends of slot:\n{before}\n{after}"
    );
    assert!(delta("a", "yields") >= vol, "{after}");
    assert!(delta("a", "early") > 0.0, "no slot ended early: {after}");
    assert_eq!(slot_ends(&after, "a")["ranks"], 2.0, "{after}");
    // Gang b never yields: it is still switched, at the deadline.
    let (bvol, bforced) = (delta("b", "voluntary"), delta("b", "forced"));
    assert_eq!(bvol, 0.0, "{after}");
    assert!(bforced >= 40.0, "gang b forced ends: {bforced}: {after}");
    let s = summary(&r);
    assert_overlap_below(&s, 0.01, "yield");
    // Yielding gives back only the tail of each slot.
    let a_share = gang_share(&s, "a");
    assert!(
        (0.25..=0.55).contains(&a_share),
        "gang a got {a_share:.3}: {s}"
    );
    for i in 0..2 {
        assert!(f(&json(&r, &format!("a{i}.json")), &["yields"]) > 0.0);
        assert_eq!(f(&json(&r, &format!("b{i}.json")), &["yields"]), 0.0);
    }

    // Every wait policy gets every token, in order, and ends.
    for policy in ["block", "spin", "adaptive", "inslot"] {
        for rank in 0..2 {
            let name = format!("ring_{policy}_{rank}");
            assert_eq!(
                read(&r, &format!("{name}.rc")),
                "0",
                "{name}: {}",
                read(&r, &format!("{name}.err"))
            );
            let out = json(&r, &format!("{name}.json"));
            assert_eq!(f(&out, &["rounds"]), 300.0, "{out}");
            assert!(f(&out, &["waits"]) >= 300.0, "{out}");
            if policy == "block" {
                assert_eq!(f(&out, &["spin_hits"]), 0.0, "{out}");
            }
            eprintln!("{name}: {out}");
        }
    }
}

/// Issue 15: a job alone pays little for scx_gang, measured where the
/// host's load cannot move it: one node whose guest time counts
/// instructions (qemu -icount), the lone-job benchmark's scenario
/// (scripts/bench.sh --only lone) with three rounds of EEVDF and scx_gang,
/// medians compared (the guest's seconds take under a minute here);
/// scx_bpfland is left to the benchmark (its load alone takes minutes).
/// One vCPU with two ranks, as the cluster's nodes are (every wake-up
/// through ops.enqueue): there every run repeats within 0.4 %, and
/// scx_gang measured rt 1.04, allreduce and ep 1.00 of EEVDF and 2.06 us
/// of BPF per context switch. On two vCPUs EEVDF's rt is bimodal (the two
/// ranks on one CPU or on two: 0.37-0.42 s) and would make the bound a
/// coin toss. The bounds catch a regression of the wake-up path (a
/// cgroup walk per wake-up would be far more), not noise.
#[test]
#[ignore = "boots a VM: run by scripts/test.sh"]
fn a_lone_job_pays_little_for_scx_gang_in_instruction_counted_time() {
    let r = boot(
        "lone_bench",
        &[
            "--vcpus",
            "1",
            "--icount",
            "0",
            "--append",
            "env.LONE_ROUNDS=3 env.LONE_POLICIES=eevdf,gang",
        ],
        900,
    );
    let log = gang_eval::records::Log::load(&[r.join("records.txt")]).expect("records.txt parses");
    let cells = gang_eval::lone::cells(&log);
    for (workload, bound) in [("rt", 1.10), ("allreduce", 1.02), ("ep", 1.02)] {
        for policy in ["eevdf", "gang"] {
            let c = cells
                .iter()
                .find(|c| c.workload == workload && c.policy == policy)
                .unwrap_or_else(|| panic!("no {workload} job under {policy}"));
            assert_eq!(
                (c.ok, c.failed),
                (3, 0),
                "{workload} under {policy}: {}",
                read(&r, "scenario.log")
            );
        }
        let gang = cells
            .iter()
            .find(|c| c.workload == workload && c.policy == "gang")
            .unwrap();
        let ratio = gang_eval::lone::ratio(&cells, gang, "eevdf").expect("an EEVDF time");
        println!("{workload} alone: scx_gang {ratio:.3} of EEVDF (bound {bound})");
        assert!(
            ratio <= bound,
            "{workload} alone took {ratio:.3} of EEVDF's time under scx_gang, past {bound}"
        );
    }
    let costs = gang_eval::bpf_cost::parse(&read(&r, "bpf_cost.txt")).expect("bpf_cost.txt parses");
    let per_switch = costs
        .per_switch_us("gang")
        .expect("scx_gang's callbacks listed, with context switches");
    println!("BPF per context switch under scx_gang: {per_switch:.2} us (bound 3.0)");
    assert!(
        per_switch <= 3.0,
        "scx_gang's BPF cost {per_switch:.2} us per context switch, past 3.0"
    );
}
