//! Specification of trace analysis and the SVG timeline, as tests.

use gang_wire::trace::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn meta(nr_cpus: u32, start_ns: u64, end_ns: u64) -> TraceMeta {
    let mut gang_names = BTreeMap::new();
    gang_names.insert(0, "A".to_string());
    gang_names.insert(1, "B".to_string());
    TraceMeta {
        nr_cpus,
        gang_names,
        start_ns,
        end_ns,
        node: "node1".into(),
    }
}

/// A switch at `ts` to a slot in which every CPU is owned by `owner`.
fn switch_to(ev: &mut Vec<TraceEvent>, ts: u64, gen: u64, nr: i32, owner: i32) {
    ev.push(TraceEvent::switch(ts, gen, (gen % 2) as u32, 1));
    for cpu in 0..nr {
        ev.push(TraceEvent::owner(ts, cpu, owner));
    }
}

/// Gangs A and B alternate every 10 ms on 2 CPUs for 100 ms, each CPU
/// switching to the new owner `delay` after the switch.
fn alternating(delay: u64) -> Vec<TraceEvent> {
    let mut ev = Vec::new();
    for i in 0..10u64 {
        let ts = i * 10 * MS;
        let g = (i % 2) as i32;
        switch_to(&mut ev, ts, i, 2, g);
        for cpu in 0..2 {
            ev.push(TraceEvent::run(ts + delay, cpu, g, 0));
        }
    }
    ev
}

#[test]
fn shares_of_two_alternating_gangs() {
    let t = analyze(meta(2, 0, 100 * MS), alternating(0));
    let s = &t.summary;
    assert_eq!(s.duration_ns, 100 * MS);
    assert_eq!(s.cpu_time_ns, 200 * MS);
    assert_eq!(s.gang_run_ns, 200 * MS);
    assert_eq!(s.gangs["A"].run_ns, 100 * MS);
    assert_eq!(s.gangs["B"].run_ns, 100 * MS);
    assert!((s.gangs["A"].share_of_cpu - 0.5).abs() < 1e-12);
    assert!((s.gangs["B"].share_of_gang_time - 0.5).abs() < 1e-12);
    assert_eq!(s.overlap_ns, 0);
    assert_eq!(s.overlap_fraction, 0.0);
    assert_eq!(s.switches, 10);
    assert_eq!(s.slot_len_ms.mean, 10.0);
    assert_eq!(s.slot_len_ms.p50, 10.0);
    assert_eq!(s.slot_len_ms.samples, 9);
    // Each CPU runs its owner from the switch on: latency 0 everywhere.
    assert_eq!(s.switch_latency_us.samples, 10);
    assert_eq!(s.switch_latency_us.max, 0.0);
    assert_eq!(t.cpus[0].len(), 10);
    assert!(t.cpus[0].iter().all(|iv| iv.gang == iv.owner && !iv.fill));
}

#[test]
fn late_preemption_is_overlap_and_latency() {
    // CPU 1 keeps running A for 200 µs after the switch to B.
    let mut ev = Vec::new();
    switch_to(&mut ev, 0, 1, 2, 0);
    ev.push(TraceEvent::run(0, 0, 0, 0));
    ev.push(TraceEvent::run(0, 1, 0, 0));
    switch_to(&mut ev, 10 * MS, 2, 2, 1);
    ev.push(TraceEvent::run(10 * MS + 5 * US, 0, 1, 0));
    ev.push(TraceEvent::run(10 * MS + 200 * US, 1, 1, 0));
    let t = analyze(meta(2, 0, 20 * MS), ev);
    let s = &t.summary;
    assert_eq!(s.overlap_ns, 200 * US + 5 * US);
    assert_eq!(s.gangs["A"].overlap_ns, 205 * US);
    assert_eq!(s.gangs["B"].overlap_ns, 0);
    assert!((s.overlap_fraction - (205 * US) as f64 / (40 * MS) as f64).abs() < 1e-12);
    assert_eq!(t.switches[0].latency_ns, Some(0));
    assert_eq!(t.switches[1].latency_ns, Some(200 * US));
    assert_eq!(s.switch_latency_us.max, 200.0);
    assert_eq!(s.switch_latency_us.p99, 200.0);
    // Nearest rank over [0, 200]: the 50th percentile is the first sample.
    assert_eq!(s.switch_latency_us.p50, 0.0);
    let overlap: Vec<&Interval> = t.cpus[1]
        .iter()
        .filter(|iv| iv.class() == IntervalClass::Overlap)
        .collect();
    assert_eq!(overlap.len(), 1);
    assert_eq!(
        (
            overlap[0].start_ns,
            overlap[0].end_ns,
            overlap[0].gang,
            overlap[0].owner
        ),
        (10 * MS, 10 * MS + 200 * US, 0, 1)
    );
}

#[test]
fn a_command_applied_late_is_latency_not_overlap() {
    // A commanded switch to B at 10 ms takes the CPUs when the slot timer
    // fires, 7 ms later (EV_OWNER at 17 ms). Until then A's slot is in
    // force: A starting on CPU 1 at 10.1 ms is not overlap, and CPU 0 is
    // preempted 300 µs after the owners changed.
    let mut ev = Vec::new();
    switch_to(&mut ev, 0, 1, 2, 0);
    ev.push(TraceEvent::run(0, 0, 0, 0));
    ev.push(TraceEvent::run(0, 1, GANG_OTHER, 0));
    ev.push(TraceEvent::switch(10 * MS, 2, 1, 2));
    ev.push(TraceEvent::run(10 * MS + 100 * US, 1, 0, 0));
    for cpu in 0..2 {
        ev.push(TraceEvent::owner(17 * MS, cpu, 1));
    }
    ev.push(TraceEvent::run(17 * MS + 100 * US, 1, 1, 0));
    ev.push(TraceEvent::run(17 * MS + 300 * US, 0, 1, 0));
    let t = analyze(meta(2, 0, 20 * MS), ev);
    let s = &t.summary;
    assert_eq!(s.overlap_ns, 400 * US, "only the runs after 17 ms");
    assert_eq!(t.switches[1].delay_ns, 7 * MS);
    assert_eq!(t.switches[0].delay_ns, 0);
    // The latency counts from the command: the wait for the timer is in it.
    assert_eq!(t.switches[1].latency_ns, Some(7 * MS + 300 * US));
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["switches"][1]["delay_ns"], 7 * MS);
    // A record of an older analysis, without the field, still reads.
    let mut old = json.clone();
    old["switches"][1]
        .as_object_mut()
        .unwrap()
        .remove("delay_ns");
    let back: Trace = serde_json::from_value(old).unwrap();
    assert_eq!(back.switches[1].delay_ns, 0);
}

#[test]
fn fill_is_not_overlap() {
    // CPU 1 has no owner; gang A fills it on purpose.
    let mut ev = vec![
        TraceEvent::switch(0, 1, 0, 1),
        TraceEvent::owner(0, 0, 0),
        TraceEvent::owner(0, 1, GANG_NONE),
        TraceEvent::run(0, 0, 0, 0),
        TraceEvent::run(MS, 1, 0, RUN_FILL),
    ];
    // A gang task on an unowned CPU *without* the flag is overlap.
    ev.push(TraceEvent::run(6 * MS, 1, 0, 0));
    let t = analyze(meta(2, 0, 10 * MS), ev);
    let s = &t.summary;
    assert_eq!(s.fill_ns, 5 * MS);
    assert_eq!(s.gangs["A"].fill_ns, 5 * MS);
    assert_eq!(s.overlap_ns, 4 * MS);
    assert_eq!(s.gang_run_ns, 19 * MS);
    assert!(t.cpus[1][0].fill && !t.cpus[1][1].fill);
}

#[test]
fn finishing_a_call_off_the_gangs_cpus_is_not_overlap() {
    // Slot 1 gives CPU 0 to gang B; gang A's task, inside a system call
    // or an RCU section, is kept there to finish it (RUN_FINISH), then a
    // task of A that was simply not preempted yet runs there: overlap.
    let ev = vec![
        TraceEvent::owner(0, 0, 0),
        TraceEvent::run(0, 0, 0, 0),
        TraceEvent::switch(2 * MS, 2, 1, 0),
        TraceEvent::owner(2 * MS, 0, 1),
        TraceEvent::run(2 * MS, 0, 0, RUN_FINISH),
        TraceEvent::run(5 * MS, 0, 0, 0),
        TraceEvent::run(6 * MS, 0, 1, 0),
        // The flag on the gang's own CPU changes nothing: it is owned time.
        TraceEvent::run(8 * MS, 0, 1, RUN_FINISH),
    ];
    let t = analyze(meta(1, 0, 10 * MS), ev);
    let s = &t.summary;
    assert_eq!(s.finish_ns, 3 * MS);
    assert_eq!(s.gangs["A"].finish_ns, 3 * MS);
    assert_eq!(s.gangs["B"].finish_ns, 0);
    assert_eq!(s.overlap_ns, MS);
    assert_eq!(s.fill_ns, 0);
    assert_eq!(s.gang_run_ns, 10 * MS);
    let classes: Vec<IntervalClass> = t.cpus[0].iter().map(|iv| iv.class()).collect();
    assert_eq!(
        classes,
        [
            IntervalClass::Owned,
            IntervalClass::Finish,
            IntervalClass::Overlap,
            IntervalClass::Owned,
            IntervalClass::Owned
        ]
    );
    // The picture draws finish as the gang's own and says its share.
    let svg = render_svg(&t);
    assert_well_formed(&svg);
    assert!(svg.contains("not overlap, finishing a system call or RCU section"));
    let none = analyze(meta(1, 0, 10 * MS), vec![TraceEvent::run(0, 0, 0, 0)]);
    assert!(!render_svg(&none).contains("finishing"));
}

#[test]
fn idle_and_other_accounting() {
    let ev = vec![
        TraceEvent::owner(0, 0, 0),
        TraceEvent::run(0, 0, GANG_IDLE, 0),
        TraceEvent::run(2 * MS, 0, GANG_OTHER, 0),
        TraceEvent::run(5 * MS, 0, 0, 0),
        TraceEvent::run(9 * MS, 0, GANG_IDLE, RUN_FILL), // flag meaningless off gangs
    ];
    let t = analyze(meta(1, 0, 10 * MS), ev);
    let s = &t.summary;
    assert_eq!(s.idle_ns, 3 * MS);
    assert_eq!(s.other_ns, 3 * MS);
    assert_eq!(s.gang_run_ns, 4 * MS);
    assert_eq!(s.cpu_time_ns, 10 * MS);
    assert_eq!(s.fill_ns, 0);
    assert!((s.gangs["A"].share_of_cpu - 0.4).abs() < 1e-12);
    assert_eq!(s.gangs["A"].share_of_gang_time, 1.0);
    assert_eq!(s.gangs["B"].run_ns, 0); // named gangs are listed even if idle
    assert!(!t.cpus[0][3].fill);
}

#[test]
fn time_before_first_run_is_not_attributed() {
    let ev = vec![TraceEvent::owner(0, 0, 0), TraceEvent::run(4 * MS, 0, 0, 0)];
    let t = analyze(meta(2, 0, 10 * MS), ev);
    assert_eq!(t.summary.cpu_time_ns, 6 * MS);
    assert!(t.cpus[1].is_empty());
}

/// Reorders events as a multi-CPU ring buffer might: groups of equal
/// timestamp keep their internal order (one CPU emits them in sequence, and
/// the stable sort must preserve that), but the groups are scrambled.
fn scramble(events: &[TraceEvent]) -> Vec<TraceEvent> {
    let mut sorted = events.to_vec();
    sorted.sort_by_key(|e| e.ts_ns);
    let mut groups: Vec<Vec<TraceEvent>> = sorted
        .chunk_by(|a, b| a.ts_ns == b.ts_ns)
        .map(|g| g.to_vec())
        .collect();
    groups.reverse();
    let n = groups.len();
    for i in (0..n).step_by(3) {
        groups.swap(i, n - 1 - i / 2);
    }
    groups.concat()
}

#[test]
fn out_of_order_events_are_sorted() {
    let ev = alternating(100 * US);
    let sorted = analyze(meta(2, 0, 100 * MS), ev.clone());
    let shuffled_ev = scramble(&ev);
    assert_ne!(shuffled_ev, ev);
    let shuffled = analyze(meta(2, 0, 100 * MS), shuffled_ev);
    assert_eq!(sorted, shuffled);
    assert_eq!(sorted.summary.switch_latency_us.max, 100.0);
    assert_eq!(sorted.summary.overlap_ns, 9 * 2 * 100 * US);
}

#[test]
fn window_clips_intervals_and_switches() {
    // Window [25 ms, 55 ms] of the alternating trace.
    let t = analyze(meta(2, 25 * MS, 55 * MS), alternating(0));
    let s = &t.summary;
    assert_eq!(s.duration_ns, 30 * MS);
    assert_eq!(s.cpu_time_ns, 60 * MS);
    // Slot i (from i*10 ms) is owned by gang i % 2: 20-30 A, 30-40 B, ...
    assert_eq!(s.gangs["A"].run_ns, 2 * (5 + 10) * MS);
    assert_eq!(s.gangs["B"].run_ns, 2 * (10 + 5) * MS);
    assert_eq!(s.switches, 3); // at 30, 40, 50
    assert_eq!(t.switches[0].ts_ns, 30 * MS);
    for row in &t.cpus {
        assert_eq!(row.first().unwrap().start_ns, 25 * MS);
        assert_eq!(row.last().unwrap().end_ns, 55 * MS);
    }
    // Half-open window: a switch exactly at the end is outside.
    let t = analyze(meta(2, 25 * MS, 50 * MS), alternating(0));
    assert_eq!(t.summary.switches, 2);
}

#[test]
fn garbage_cpu_ids_are_ignored_and_counted() {
    let mut ev = alternating(0);
    ev.push(TraceEvent::run(MS, 2, 0, 0));
    ev.push(TraceEvent::run(MS, -1, 0, 0));
    ev.push(TraceEvent::owner(MS, i32::MAX, 0));
    ev.push(TraceEvent::owner(MS, i32::MIN, 0));
    ev.push(TraceEvent::run(2 * MS, 0, GANG_NONE, 0)); // not a thing a CPU runs
    ev.push(TraceEvent::owner(2 * MS, 0, GANG_IDLE)); // not an owner
    let t = analyze(meta(2, 0, 100 * MS), ev);
    let mut expected = analyze(meta(2, 0, 100 * MS), alternating(0));
    expected.summary.ignored_events = 6;
    assert_eq!(t, expected);
}

#[test]
fn empty_input_gives_zero_summary() {
    for m in [meta(4, 0, 10 * MS), meta(0, 0, 0), meta(4, 10 * MS, 5 * MS)] {
        let t = analyze(m, Vec::new());
        let s = &t.summary;
        assert_eq!(s.cpu_time_ns, 0);
        assert_eq!(s.overlap_fraction, 0.0);
        assert_eq!(s.switches, 0);
        assert_eq!(s.switch_latency_us, LatencyStats::default());
        assert_eq!(s.slot_len_ms, SlotLenStats::default());
        assert!(s
            .gangs
            .values()
            .all(|g| g.run_ns == 0 && g.share_of_cpu == 0.0 && g.share_of_gang_time == 0.0));
        // JSON has no NaN (serde_json would write null) and round-trips.
        let json = serde_json::to_string(&t).unwrap();
        assert!(!json.contains("null") && !json.contains("NaN"));
        assert_eq!(serde_json::from_str::<Trace>(&json).unwrap(), t);
        assert!(render_svg(&t).starts_with("<svg"));
    }
}

#[test]
fn cpu_already_running_new_owner_has_zero_latency() {
    // No EV_RUN follows the switches: what runs does not change. CPU 0 keeps
    // A across two slots of A; CPU 1 was filled with B, and B now owns it.
    let mut ev = vec![
        TraceEvent::switch(0, 1, 0, 1),
        TraceEvent::owner(0, 0, 0),
        TraceEvent::owner(0, 1, GANG_NONE),
        TraceEvent::run(0, 0, 0, 0),
        TraceEvent::run(MS, 1, 1, RUN_FILL),
    ];
    ev.push(TraceEvent::switch(5 * MS, 2, 1, 2));
    ev.push(TraceEvent::owner(5 * MS, 0, 0));
    ev.push(TraceEvent::owner(5 * MS, 1, 1));
    let t = analyze(meta(2, 0, 10 * MS), ev);
    assert_eq!(t.switches[1].latency_ns, Some(0));
    assert_eq!(t.switches[1].cause, 2);
    assert_eq!(t.summary.switch_latency_us.unreached, 0);
    // Once B owns CPU 1 its run there is no longer fill.
    assert_eq!(t.summary.fill_ns, 4 * MS);
    assert_eq!(t.cpus[1].last().unwrap().class(), IntervalClass::Owned);
}

#[test]
fn switch_without_reached_owner_has_no_latency() {
    let mut ev = Vec::new();
    switch_to(&mut ev, 0, 1, 1, 0);
    ev.push(TraceEvent::run(0, 0, GANG_OTHER, 0));
    switch_to(&mut ev, 5 * MS, 2, 1, GANG_NONE);
    let t = analyze(meta(1, 0, 10 * MS), ev);
    assert_eq!(t.switches[0].latency_ns, None);
    assert_eq!(t.switches[1].latency_ns, None);
    assert_eq!(t.summary.switch_latency_us.samples, 0);
    assert_eq!(t.summary.switch_latency_us.unreached, 1);
}

#[test]
fn json_field_names() {
    let t = analyze(meta(2, 0, 100 * MS), alternating(0));
    let v: serde_json::Value = serde_json::to_value(&t).unwrap();
    for k in ["meta", "cpus", "switches", "summary"] {
        assert!(v.get(k).is_some(), "{k}");
    }
    let s = &v["summary"];
    for k in [
        "duration_ns",
        "cpu_time_ns",
        "gangs",
        "gang_run_ns",
        "other_ns",
        "idle_ns",
        "overlap_ns",
        "overlap_fraction",
        "fill_ns",
        "finish_ns",
        "switches",
        "slot_len_ms",
        "switch_latency_us",
        "ignored_events",
    ] {
        assert!(s.get(k).is_some(), "{k}");
    }
    for k in ["run_ns", "share_of_cpu", "share_of_gang_time"] {
        assert!(s["gangs"]["A"].get(k).is_some(), "{k}");
    }
    for k in ["p50", "p99", "max", "samples"] {
        assert!(s["switch_latency_us"].get(k).is_some(), "{k}");
    }
    for k in ["mean", "p50"] {
        assert!(s["slot_len_ms"].get(k).is_some(), "{k}");
    }
}

// ---- SVG ----

/// Well-formed (the checker of every picture, gang-plot's): begins with
/// `<svg`, every tag closed in order, no stray '<' or '&' in text.
fn assert_well_formed(svg: &str) {
    assert!(svg.starts_with("<svg"), "must start with <svg");
    assert!(svg.trim_end().ends_with("</svg>"));
    if let Err(e) = gang_plot::well_formed(svg) {
        panic!("{e}");
    }
}

#[test]
fn svg_is_well_formed_with_rows_and_legend() {
    let mut m = meta(3, 0, 100 * MS);
    m.gang_names.insert(0, "a<b>&\"c\"".into());
    m.node = "n<1>&".into();
    let mut ev = alternating(300 * US);
    ev.push(TraceEvent::run(3 * MS, 2, 1, RUN_FILL));
    let t = analyze(m, ev);
    let svg = render_svg(&t);
    assert_well_formed(&svg);
    for cpu in 0..3 {
        assert_eq!(
            svg.matches(&format!(">cpu{cpu}</text>")).count(),
            1,
            "cpu{cpu}"
        );
    }
    assert!(svg.contains("a&lt;b&gt;&amp;&quot;c&quot;"));
    assert!(svg.contains("n&lt;1&gt;&amp;"));
    assert!(svg.contains("url(#hatch)"), "overlap must be drawn");
    assert!(svg.contains("p50") && svg.contains("p99"));
    assert!(svg.contains(">B: "), "legend names each gang");
    assert!(
        svg.contains(">0</text>") && svg.contains(">100</text>"),
        "axis ticks in ms"
    );
}

#[test]
fn svg_of_long_busy_trace_stays_small() {
    // 10 s, 20 switches/s, 8 CPUs, and something else running for 50 µs
    // every millisecond on every CPU: ~20 000 intervals per CPU.
    let nr = 8;
    let mut ev = Vec::new();
    for i in 0..200u64 {
        let ts = i * 50 * MS;
        let g = (i % 3) as i32;
        switch_to(&mut ev, ts, i, nr, g);
        for cpu in 0..nr {
            ev.push(TraceEvent::run(ts + 150 * US, cpu, g, 0));
            for k in 1..50u64 {
                ev.push(TraceEvent::run(ts + k * MS, cpu, GANG_OTHER, 0));
                ev.push(TraceEvent::run(ts + k * MS + 50 * US, cpu, g, 0));
            }
        }
    }
    let t = analyze(meta(nr as u32, 0, 10_000 * MS), ev);
    assert!(t.cpus[0].len() > 19_000);
    let svg = render_svg(&t);
    assert_well_formed(&svg);
    assert!(svg.len() < 500_000, "svg is {} bytes", svg.len());
}

#[test]
fn svg_survives_degenerate_traces() {
    let t = analyze(meta(0, 5, 5), vec![TraceEvent::switch(5, 0, 0, 0)]);
    assert_well_formed(&render_svg(&t));
    let t = analyze(
        TraceMeta {
            nr_cpus: 300,
            end_ns: u64::MAX,
            ..Default::default()
        },
        vec![TraceEvent::run(1, 299, 7, 0)],
    );
    let svg = render_svg(&t);
    assert_well_formed(&svg);
    assert!(svg.contains(">cpu299</text>"));
}

// ---- stalls ----

/// A late preemption (50 ms) that a stall of the CPU explains: overlap is
/// still overlap, but the part inside the stall is told apart.
#[test]
fn overlap_inside_a_stall_is_told_apart() {
    let mut ev = alternating(0);
    // The switch at 20 ms (to A): CPU 1 keeps running B until 25 ms...
    ev.retain(|e| !(e.kind == EventKind::Run && e.cpu == 1 && e.ts_ns == 20 * MS));
    ev.push(TraceEvent::run(25 * MS, 1, 0, 0));
    // ...and its tick came 6 ms late at 24 ms: it was stalled 18-24 ms.
    ev.push(TraceEvent::stall(24 * MS, 1, 1, 6_000));
    let s = analyze(meta(2, 0, 100 * MS), ev).summary;
    assert_eq!(s.overlap_ns, 5 * MS);
    assert_eq!(s.stalls, 1);
    assert_eq!(s.stalled_ns, 6 * MS);
    assert_eq!(
        s.stall_overlap_ns,
        4 * MS,
        "20-24 ms of the 20-25 ms overlap"
    );
    assert!((s.overlap_fraction - 5.0 / 200.0).abs() < 1e-12);
    assert!((s.overlap_outside_stalls_fraction - 1.0 / 200.0).abs() < 1e-12);
}

/// A stall where the right gang ran explains no overlap; one on another
/// CPU explains nothing either.
#[test]
fn a_stall_elsewhere_explains_nothing() {
    let mut ev = alternating(0);
    ev.retain(|e| !(e.kind == EventKind::Run && e.cpu == 1 && e.ts_ns == 20 * MS));
    ev.push(TraceEvent::run(25 * MS, 1, 0, 0));
    ev.push(TraceEvent::stall(25 * MS, 0, 0, 10_000));
    ev.push(TraceEvent::stall(60 * MS, 1, 0, 10_000));
    let s = analyze(meta(2, 0, 100 * MS), ev).summary;
    assert_eq!(s.overlap_ns, 5 * MS);
    assert_eq!(s.stalls, 2);
    assert_eq!(s.stalled_ns, 20 * MS);
    assert_eq!(s.stall_overlap_ns, 0);
    assert_eq!(s.overlap_outside_stalls_fraction, s.overlap_fraction);
}

/// Stalls of one CPU that overlap are merged; they are clipped to the
/// window; a stall out of range or with a nonsense gang is garbage.
#[test]
fn stalls_merge_clip_and_reject_garbage() {
    let ev = vec![
        TraceEvent::run(0, 0, 0, 0),
        TraceEvent::stall(30 * MS, 0, 0, 10_000),
        TraceEvent::stall(35 * MS, 0, 0, 20_000), // 15-35 swallows 20-30
        TraceEvent::stall(12 * MS, 0, 0, 5_000),  // 7-12: starts before the window
        TraceEvent::stall(130 * MS, 0, 0, 40_000), // 90-130: ends after it
        TraceEvent::stall(50 * MS, 7, 0, 1_000),  // no CPU 7
        TraceEvent::stall(50 * MS, 0, -9, 1_000), // no such gang
    ];
    let s = analyze(meta(1, 10 * MS, 100 * MS), ev).summary;
    // The 90-130 one ends after the window and is dropped, like every
    // event at or after its end.
    assert_eq!(s.stalls, 3);
    assert_eq!(s.stalled_ns, 2 * MS + 20 * MS);
    assert_eq!(s.ignored_events, 2);
}

// ---- properties ----

fn arb_event() -> impl Strategy<Value = TraceEvent> {
    let kind = prop_oneof![
        Just(EventKind::Switch),
        Just(EventKind::Owner),
        Just(EventKind::Run),
        Just(EventKind::Stall)
    ];
    (
        0u64..2_000_000,
        0u64..20,
        kind,
        -2i32..6,
        -4i32..5,
        0u32..4,
        prop_oneof![0u32..3, 0u32..2_000],
        0u32..4, // RUN_FILL, RUN_FINISH, both
    )
        .prop_map(
            |(ts_ns, gen, kind, cpu, gang, slot, cause, flags)| TraceEvent {
                ts_ns,
                gen,
                kind,
                cpu,
                gang,
                slot,
                cause,
                flags,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_invariants(
        events in prop::collection::vec(arb_event(), 0..200),
        nr in 0u32..5,
        start in 0u64..1_000_000,
        len in 0u64..1_500_000,
    ) {
        let t = analyze(meta(nr, start, start + len), events.clone());
        let s = &t.summary;
        prop_assert_eq!(t.cpus.len(), nr as usize);
        let mut total = 0;
        for row in &t.cpus {
            let mut prev_end = start;
            let mut cpu_ns = 0;
            for iv in row {
                prop_assert!(iv.start_ns >= prev_end && iv.end_ns > iv.start_ns);
                prop_assert!(iv.end_ns <= start + len);
                prop_assert!(iv.gang >= 0 || iv.gang == GANG_OTHER || iv.gang == GANG_IDLE);
                prev_end = iv.end_ns;
                cpu_ns += iv.duration_ns();
            }
            prop_assert!(cpu_ns <= len);
            total += cpu_ns;
        }
        prop_assert_eq!(s.cpu_time_ns, total);
        prop_assert_eq!(s.cpu_time_ns, s.gang_run_ns + s.other_ns + s.idle_ns);
        let cpu_share: f64 = s.gangs.values().map(|g| g.share_of_cpu).sum();
        let gang_share: f64 = s.gangs.values().map(|g| g.share_of_gang_time).sum();
        prop_assert!(cpu_share <= 1.0 + 1e-9 && gang_share <= 1.0 + 1e-9);
        prop_assert!(s.overlap_ns + s.fill_ns + s.finish_ns <= s.gang_run_ns);
        prop_assert!((0.0..=1.0).contains(&s.overlap_fraction));
        prop_assert!(s.stall_overlap_ns <= s.overlap_ns);
        prop_assert!(s.stalled_ns <= u64::from(nr) * len);
        prop_assert!(s.overlap_outside_stalls_fraction <= s.overlap_fraction);
        prop_assert!(s.stalls <= events.len() as u64);
        for f in [s.overlap_fraction, s.slot_len_ms.mean, s.slot_len_ms.p50, s.switch_latency_us.p50,
                  s.switch_latency_us.p99, s.switch_latency_us.max] {
            prop_assert!(f.is_finite() && f >= 0.0);
        }
        prop_assert!(s.switch_latency_us.p50 <= s.switch_latency_us.p99);
        prop_assert!(s.switch_latency_us.p99 <= s.switch_latency_us.max);
        prop_assert!(s.ignored_events <= events.len() as u64);
        prop_assert!(t.switches.iter().all(|r| r.ts_ns >= start && r.ts_ns < start + len));
        prop_assert!(t.switches.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        // Arrival order across timestamps never matters.
        prop_assert_eq!(&analyze(meta(nr, start, start + len), scramble(&events)), &t);
        let svg = render_svg(&t);
        assert_well_formed(&svg);
        for cpu in 0..nr {
            let label = format!(">cpu{}</text>", cpu);
            prop_assert!(svg.contains(&label));
        }
    }
}
