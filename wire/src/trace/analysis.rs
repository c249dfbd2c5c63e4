//! Event stream -> per-CPU intervals, switch records and a summary.
//!
//! One pass over the events sorted by time. Each CPU is a small state
//! machine (owner, what runs); every change closes the current interval.
//! Each in-window EV_SWITCH opens an "epoch" that lasts until the next
//! switch; when an epoch closes, its switch latency is resolved from what
//! the epoch saw on each CPU.

use super::*;

/// Nearest-rank percentile of an ascending slice: the smallest value such
/// that at least `p`% of the samples are <= it, i.e. `sorted[ceil(p/100 *
/// n) - 1]` (p = 0 gives the minimum). No interpolation, so the result is
/// always a value that was actually measured. `None` for an empty slice.
pub fn percentile_nearest_rank(sorted: &[u64], p: u32) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u128;
    let p = p.min(100) as u128;
    let rank = (p * n).div_ceil(100).clamp(1, n);
    Some(sorted[(rank - 1) as usize])
}

/// What a CPU runs: a gang id (or GANG_OTHER / GANG_IDLE) and how it got
/// there (the EV_RUN flags, kept for gang ids only).
#[derive(Clone, Copy, PartialEq)]
struct Running {
    gang: i32,
    fill: bool,
    finish: bool,
}

/// State of one CPU while walking the events.
#[derive(Clone)]
struct CpuState {
    /// Owner in the slot in force; unknown counts as GANG_NONE.
    owner: i32,
    /// What now runs; None until the CPU's first EV_RUN, and time before
    /// that is not attributed.
    running: Option<Running>,
    /// When `owner`/`running` last changed.
    since: u64,
}

/// What one CPU did during the current epoch, for switch latency. Entries
/// are reused across epochs: `stamp` tells whether one belongs to the
/// current epoch, so opening an epoch costs O(1), not O(nr_cpus).
#[derive(Clone, Default)]
struct EpochCpu {
    stamp: u64,
    /// What ran when the switch happened.
    at_switch: Option<i32>,
    /// Owner from this epoch's last EV_OWNER for the CPU.
    owner: Option<i32>,
    /// First time each gang started running in the epoch.
    first_run: Vec<(i32, u64)>,
}

struct Epoch {
    /// Index in the switch records; stamps are idx + 1 (0 = never).
    idx: usize,
    ts: u64,
    touched: Vec<usize>,
    /// The epoch's first EV_OWNER was seen (its time is the switch's delay).
    owned: bool,
}

struct Walker {
    start: u64,
    end: u64,
    cpus: Vec<CpuState>,
    out: Vec<Vec<Interval>>,
    switches: Vec<TracedSwitch>,
    epoch: Option<Epoch>,
    epoch_cpus: Vec<EpochCpu>,
    ignored: u64,
    unreached: u64,
    /// Per CPU: its stalls, merged, in time order, clipped to the window.
    stalls: Vec<Vec<(u64, u64)>>,
    stall_count: u64,
}

impl Walker {
    fn new(start: u64, end: u64, nr: usize) -> Self {
        Walker {
            start,
            end,
            cpus: vec![
                CpuState {
                    owner: GANG_NONE,
                    running: None,
                    since: start
                };
                nr
            ],
            out: vec![Vec::new(); nr],
            switches: Vec::new(),
            epoch: None,
            epoch_cpus: vec![EpochCpu::default(); nr],
            ignored: 0,
            unreached: 0,
            stalls: vec![Vec::new(); nr],
            stall_count: 0,
        }
    }

    /// Attributes [since, ts) of `cpu` to its current state, clipped to the
    /// window; extends the previous interval when nothing changed, so only
    /// real changes split intervals.
    fn close_interval(&mut self, cpu: usize, ts: u64) {
        let st = &self.cpus[cpu];
        let Some(Running { gang, fill, finish }) = st.running else {
            return;
        };
        let s = st.since.max(self.start);
        let e = ts.min(self.end);
        if e <= s {
            return;
        }
        let list = &mut self.out[cpu];
        if let Some(last) = list.last_mut() {
            if last.end_ns == s
                && last.gang == gang
                && last.owner == st.owner
                && last.fill == fill
                && last.finish == finish
            {
                last.end_ns = e;
                return;
            }
        }
        list.push(Interval {
            start_ns: s,
            end_ns: e,
            gang,
            owner: st.owner,
            fill,
            finish,
        });
    }

    /// The epoch entry of `cpu`, reset (with what ran at the switch) the
    /// first time the CPU is seen in this epoch. None outside any epoch.
    fn epoch_cpu(&mut self, cpu: usize) -> Option<&mut EpochCpu> {
        let ep = self.epoch.as_mut()?;
        let stamp = ep.idx as u64 + 1;
        let entry = &mut self.epoch_cpus[cpu];
        if entry.stamp != stamp {
            entry.stamp = stamp;
            entry.at_switch = self.cpus[cpu].running.map(|r| r.gang);
            entry.owner = None;
            entry.first_run.clear();
            ep.touched.push(cpu);
        }
        Some(entry)
    }

    fn on_owner(&mut self, cpu: usize, ts: u64, gang: i32) {
        if let Some(e) = self.epoch_cpu(cpu) {
            e.owner = Some(gang);
        }
        if let Some(ep) = self.epoch.as_mut().filter(|ep| !ep.owned) {
            ep.owned = true;
            self.switches[ep.idx].delay_ns = ts - ep.ts;
        }
        self.close_interval(cpu, ts);
        let st = &mut self.cpus[cpu];
        st.owner = gang;
        st.since = ts;
    }

    fn on_run(&mut self, cpu: usize, ts: u64, run: Running) {
        let gang = run.gang;
        if let Some(e) = self.epoch_cpu(cpu) {
            if !e.first_run.iter().any(|&(g, _)| g == gang) {
                e.first_run.push((gang, ts));
            }
        }
        self.close_interval(cpu, ts);
        let st = &mut self.cpus[cpu];
        st.running = Some(run);
        st.since = ts;
    }

    /// A stall of `cpu` ending at `ts`, `gap_us` long. Events come in time
    /// order, so a new stall ends last; it may start before earlier ones
    /// (a longer gap), which it then swallows.
    fn on_stall(&mut self, cpu: usize, ts: u64, gap_us: u32) {
        let s = ts.saturating_sub(u64::from(gap_us) * 1000).max(self.start);
        let e = ts.min(self.end);
        if e <= s {
            return;
        }
        self.stall_count += 1;
        let list = &mut self.stalls[cpu];
        let (mut s, mut e) = (s, e);
        while let Some(&(ls, le)) = list.last() {
            if le < s {
                break;
            }
            list.pop();
            s = s.min(ls);
            e = e.max(le);
        }
        list.push((s, e));
    }

    fn on_switch(&mut self, ev: &TraceEvent) {
        self.close_epoch();
        self.switches.push(TracedSwitch {
            ts_ns: ev.ts_ns,
            gen: ev.gen,
            slot: ev.slot,
            cause: ev.cause,
            latency_ns: None,
            delay_ns: 0,
        });
        self.epoch = Some(Epoch {
            idx: self.switches.len() - 1,
            ts: ev.ts_ns,
            touched: Vec::new(),
            owned: false,
        });
    }

    /// Resolves the latency of the current epoch's switch: per CPU given an
    /// owner o >= 0, 0 if it already ran o at the switch, else the delay to
    /// the first EV_RUN of o in the epoch; the switch's latency is the max.
    fn close_epoch(&mut self) {
        let Some(ep) = self.epoch.take() else { return };
        let mut latency: Option<u64> = None;
        for &cpu in &ep.touched {
            let e = &self.epoch_cpus[cpu];
            let Some(o) = e.owner.filter(|&o| o >= 0) else {
                continue;
            };
            let lat = if e.at_switch == Some(o) {
                Some(0)
            } else {
                e.first_run
                    .iter()
                    .find(|&&(g, _)| g == o)
                    .map(|&(_, t)| t - ep.ts)
            };
            match lat {
                Some(l) => latency = Some(latency.map_or(l, |m| m.max(l))),
                None => self.unreached += 1,
            }
        }
        self.switches[ep.idx].latency_ns = latency;
    }
}

/// Which gang ids make sense for each event kind; anything else is garbage.
fn valid_gang(kind: EventKind, gang: i32) -> bool {
    match kind {
        EventKind::Switch => true,
        EventKind::Owner => gang >= 0 || gang == GANG_NONE,
        EventKind::Run | EventKind::Stall => gang >= 0 || gang == GANG_OTHER || gang == GANG_IDLE,
    }
}

/// Builds the [`Trace`]: see the module doc of `trace` for the contract.
///
/// - Events are stable-sorted by timestamp first.
/// - The window is half-open, `[start_ns, end_ns)`. Events before it set
///   CPU state but attribute no time; events at or after `end_ns` are
///   dropped (not counted as ignored): they could attribute nothing, and a
///   switch there could never show a latency. Only in-window switches are
///   recorded and counted.
/// - EV_OWNER/EV_RUN with a CPU outside `0..nr_cpus`, an EV_OWNER gang other
///   than >= 0 or GANG_NONE, or an EV_RUN gang other than >= 0, GANG_OTHER or
///   GANG_IDLE are dropped and counted in `summary.ignored_events`.
/// - A CPU's owner changes at its EV_OWNER, which may come after the
///   EV_SWITCH (a command applied when the slot timer fired): runs in
///   between are the old slot's. The switch's `delay_ns` is from its
///   EV_SWITCH to its first EV_OWNER.
/// - Switch latency: for each in-window switch, over CPUs that got an
///   EV_OWNER o >= 0 before the next switch: 0 if the CPU was already
///   running o at the switch, else the time to its first EV_RUN of o before
///   the next switch (or window end). The switch's latency is the max over
///   those CPUs; CPUs that never ran o are counted in
///   `switch_latency_us.unreached` instead.
/// - Stalls: an EV_STALL of `cause` µs at ts covers `[ts - cause, ts)` of
///   its CPU (clipped to the window; overlapping stalls of a CPU merge).
///   Overlap inside a stall is also counted in `stall_overlap_ns`, and
///   `overlap_outside_stalls_fraction` leaves it out. Stalls change no
///   interval and no switch latency.
/// - A gang's run on a CPU it does not own is fill if flagged RUN_FILL,
///   else finish if flagged RUN_FINISH, else overlap: each in its own sum.
pub fn analyze(meta: TraceMeta, mut events: Vec<TraceEvent>) -> Trace {
    let start = meta.start_ns;
    let end = meta.end_ns.max(start);
    let nr = meta.nr_cpus.min(MAX_TRACE_CPUS) as usize;
    // sort_by_key is stable: same-ts events of one CPU keep emission order.
    events.sort_by_key(|e| e.ts_ns);

    let mut w = Walker::new(start, end, nr);
    for ev in events.iter().take_while(|e| e.ts_ns < end) {
        if !valid_gang(ev.kind, ev.gang) {
            w.ignored += 1;
            continue;
        }
        if ev.kind == EventKind::Switch {
            if ev.ts_ns >= start {
                w.on_switch(ev);
            }
            continue;
        }
        let cpu = match usize::try_from(ev.cpu) {
            Ok(c) if c < nr => c,
            _ => {
                w.ignored += 1;
                continue;
            }
        };
        if ev.kind == EventKind::Owner {
            w.on_owner(cpu, ev.ts_ns, ev.gang);
        } else if ev.kind == EventKind::Stall {
            w.on_stall(cpu, ev.ts_ns, ev.cause);
        } else {
            let gang = ev.gang >= 0;
            let run = Running {
                gang: ev.gang,
                fill: gang && ev.flags & RUN_FILL != 0,
                finish: gang && ev.flags & RUN_FINISH != 0,
            };
            w.on_run(cpu, ev.ts_ns, run);
        }
    }
    w.close_epoch();
    for cpu in 0..nr {
        w.close_interval(cpu, end);
    }

    let summary = summarize(&meta, start, end, &w);
    Trace {
        meta,
        cpus: w.out,
        switches: w.switches,
        summary,
    }
}

/// `num / den`, 0 when `den` is 0 (no gang time, no CPU time).
pub(crate) fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

#[derive(Default)]
struct GangAcc {
    run: u64,
    overlap: u64,
    fill: u64,
    finish: u64,
}

fn summarize(meta: &TraceMeta, start: u64, end: u64, w: &Walker) -> Summary {
    let mut s = Summary {
        duration_ns: end - start,
        ignored_events: w.ignored,
        ..Default::default()
    };
    // Named gangs appear even when they never ran: a zero is information.
    let mut per_gang: BTreeMap<i32, GangAcc> = meta
        .gang_names
        .keys()
        .filter(|&&id| id >= 0)
        .map(|&id| (id, GangAcc::default()))
        .collect();

    // Saturating sums: a corrupt meta (window of ~u64::MAX on many CPUs)
    // must not overflow.
    for iv in w.out.iter().flatten() {
        let d = iv.duration_ns();
        s.cpu_time_ns = s.cpu_time_ns.saturating_add(d);
        let class = iv.class();
        match class {
            IntervalClass::Idle => s.idle_ns = s.idle_ns.saturating_add(d),
            IntervalClass::Other => s.other_ns = s.other_ns.saturating_add(d),
            IntervalClass::Owned
            | IntervalClass::Fill
            | IntervalClass::Finish
            | IntervalClass::Overlap => {
                let acc = per_gang.entry(iv.gang).or_default();
                acc.run = acc.run.saturating_add(d);
                match class {
                    IntervalClass::Fill => acc.fill = acc.fill.saturating_add(d),
                    IntervalClass::Finish => acc.finish = acc.finish.saturating_add(d),
                    IntervalClass::Overlap => acc.overlap = acc.overlap.saturating_add(d),
                    _ => {}
                }
            }
        }
    }
    for acc in per_gang.values() {
        s.gang_run_ns = s.gang_run_ns.saturating_add(acc.run);
        s.overlap_ns = s.overlap_ns.saturating_add(acc.overlap);
        s.fill_ns = s.fill_ns.saturating_add(acc.fill);
        s.finish_ns = s.finish_ns.saturating_add(acc.finish);
    }
    s.overlap_fraction = ratio(s.overlap_ns, s.gang_run_ns);
    s.stalls = w.stall_count;
    for (ivs, stalls) in w.out.iter().zip(&w.stalls) {
        s.stalled_ns = stalls
            .iter()
            .fold(s.stalled_ns, |acc, (a, b)| acc.saturating_add(b - a));
        s.stall_overlap_ns = s
            .stall_overlap_ns
            .saturating_add(overlap_inside(ivs, stalls));
    }
    s.overlap_outside_stalls_fraction = ratio(
        s.overlap_ns.saturating_sub(s.stall_overlap_ns),
        s.gang_run_ns,
    );

    let keys = gang_keys(meta, per_gang.keys().copied());
    for ((&id, acc), key) in per_gang.iter().zip(keys) {
        let g = GangSummary {
            id,
            run_ns: acc.run,
            share_of_cpu: ratio(acc.run, s.cpu_time_ns),
            share_of_gang_time: ratio(acc.run, s.gang_run_ns),
            overlap_ns: acc.overlap,
            fill_ns: acc.fill,
            finish_ns: acc.finish,
        };
        s.gangs.insert(key, g);
    }

    s.switches = w.switches.len() as u64;
    let mut gaps: Vec<u64> = w
        .switches
        .windows(2)
        .map(|p| p[1].ts_ns - p[0].ts_ns)
        .collect();
    gaps.sort_unstable();
    if !gaps.is_empty() {
        let sum: f64 = gaps.iter().map(|&g| g as f64).sum();
        s.slot_len_ms = SlotLenStats {
            mean: sum / gaps.len() as f64 / 1e6,
            p50: percentile_nearest_rank(&gaps, 50).unwrap_or(0) as f64 / 1e6,
            samples: gaps.len() as u64,
        };
    }

    let mut lats: Vec<u64> = w.switches.iter().filter_map(|r| r.latency_ns).collect();
    lats.sort_unstable();
    let us = |p| percentile_nearest_rank(&lats, p).unwrap_or(0) as f64 / 1e3;
    s.switch_latency_us = LatencyStats {
        p50: us(50),
        p99: us(99),
        max: us(100),
        samples: lats.len() as u64,
        unreached: w.unreached,
    };
    s
}

/// Time of one CPU's Overlap-class intervals inside its stalls; both lists
/// are in time order and non-overlapping, so one merge-like pass.
fn overlap_inside(ivs: &[Interval], stalls: &[(u64, u64)]) -> u64 {
    let mut total = 0u64;
    let mut j = 0;
    for iv in ivs.iter().filter(|iv| iv.class() == IntervalClass::Overlap) {
        while j < stalls.len() && stalls[j].1 <= iv.start_ns {
            j += 1;
        }
        let mut k = j;
        while k < stalls.len() && stalls[k].0 < iv.end_ns {
            let (a, b) = stalls[k];
            total = total.saturating_add(b.min(iv.end_ns) - a.max(iv.start_ns));
            k += 1;
        }
    }
    total
}

/// Summary keys for `ids` (ascending): the gang's label, or "label#id" when
/// two ids would get the same label, so no gang silently absorbs another.
fn gang_keys(meta: &TraceMeta, ids: impl Iterator<Item = i32>) -> Vec<String> {
    let labels: Vec<(i32, String)> = ids.map(|id| (id, gang_label(meta, id))).collect();
    let mut taken = std::collections::BTreeSet::new();
    labels
        .iter()
        .map(|(id, label)| {
            let dup = labels.iter().filter(|(_, l)| l == label).count() > 1;
            let mut key = if dup {
                format!("{label}#{id}")
            } else {
                label.clone()
            };
            while !taken.insert(key.clone()) {
                key.push('#');
            }
            key
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
        assert_eq!(percentile_nearest_rank(&v, 50), Some(50));
        assert_eq!(percentile_nearest_rank(&v, 99), Some(100));
        assert_eq!(percentile_nearest_rank(&v, 0), Some(10));
        assert_eq!(percentile_nearest_rank(&v, 100), Some(100));
        assert_eq!(percentile_nearest_rank(&[7], 50), Some(7));
        assert_eq!(percentile_nearest_rank(&[1, 2], 50), Some(1));
        assert_eq!(percentile_nearest_rank(&[], 50), None);
    }

    #[test]
    fn duplicate_names_get_distinct_keys() {
        let mut meta = TraceMeta::default();
        meta.gang_names.insert(0, "job".into());
        meta.gang_names.insert(1, "job".into());
        meta.gang_names.insert(2, "3".into());
        let keys = gang_keys(&meta, [0, 1, 2, 3].into_iter());
        assert_eq!(keys, vec!["job#0", "job#1", "3#2", "3#3"]);
    }

    #[test]
    fn unchanged_state_does_not_split_intervals() {
        let meta = TraceMeta {
            nr_cpus: 1,
            start_ns: 0,
            end_ns: 100,
            ..Default::default()
        };
        let ev = vec![
            TraceEvent::run(0, 0, 0, 0),
            TraceEvent::owner(10, 0, GANG_NONE),
            TraceEvent::run(50, 0, 0, 0),
        ];
        let t = analyze(meta, ev);
        assert_eq!(t.cpus[0].len(), 1);
        assert_eq!((t.cpus[0][0].start_ns, t.cpus[0][0].end_ns), (0, 100));
    }
}
