//! The node's knobs: their names, ranges and text forms, and the read-only
//! status files. Served as files by the knob file system (knobfs) and set
//! from the command line at start; both go through `NodeKnobs::set`, so a
//! value is checked the same way wherever it comes from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cpulist::CpuList;
pub use crate::drain::DrainCheck;
use gang_wire::knobfs::{KnobError, KnobSet};

pub const SLOT_MS_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000;
pub const MIN_OTHER_SHARE_RANGE: std::ops::RangeInclusive<u32> = 1..=50;
/// 0 turns voluntary yield off; at most 1 s (slots are 1 ms to 10 s).
pub const YIELD_LEAD_US_RANGE: std::ops::RangeInclusive<u32> = 0..=1_000_000;
/// A fixed drain lead of at most 1 s (it is capped at a quarter slot too).
pub const DRAIN_LEAD_US_RANGE: std::ops::RangeInclusive<u32> = 0..=1_000_000;
/// The quantile of the recent park + drain times an adaptive lead is taken
/// at: from the median (least idle) to p99 (least late).
pub const DRAIN_LEAD_PCT_RANGE: std::ops::RangeInclusive<u32> = 50..=99;
/// An injected clock fault of at most 10 s either way.
pub const CLOCK_FAULT_US_RANGE: std::ops::RangeInclusive<i64> = -10_000_000..=10_000_000;

/// How a strict switch parks the outgoing gangs before their drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Park {
    /// The BPF scheduler stops running them (a task inside a system call
    /// runs on to its end): microseconds.
    Bpf,
    /// The cgroup freezer (cgroup.freeze), which stops tasks at their
    /// return to user space: milliseconds under emulation.
    Freezer,
}

impl Park {
    pub fn name(self) -> &'static str {
        match self {
            Park::Bpf => "bpf",
            Park::Freezer => "freezer",
        }
    }
}

/// The knobs an operator sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeKnobs {
    /// Slot length of the standalone rotation; applies from the next slot.
    pub slot_ms: u32,
    /// An idle CPU may run another gang's task (never delaying the owner).
    pub fill: bool,
    /// CPUs never given to a gang: they run the tasks of no gang.
    pub housekeeping: CpuList,
    /// Minimum share of each CPU for waiting tasks of no gang.
    pub min_other_share_pct: u32,
    /// A rank's yield_point() this close to its slot's end ends the slot
    /// for the rank (the scheduler parks it until its gang's next slot).
    pub yield_lead_us: u32,
    /// A fault for tests of timed switching's fallback (issue 12): a value
    /// written here shifts the node's cluster clock estimate by that many
    /// µs once (the agent's prober takes it and it reads 0 again), as an
    /// undetected step would. The next clock exchange reveals it, and
    /// gangd switches the node by command until its clock is good again.
    pub clock_fault_us: i64,
    /// How a strict switch parks the outgoing gangs (BPF mode).
    pub park: Park,
    /// Timed strict switching: how long before the boundary the outgoing
    /// gangs are parked, in µs (at most a quarter slot). None ("auto"):
    /// adapted to the node's recent park + drain times (switching/lead.rs).
    pub drain_lead_us: Option<u32>,
    /// The adaptive lead (drain_lead_us = auto): this quantile, in percent,
    /// of the node's recent park + drain times (switching/lead.rs says why
    /// 75 by default).
    pub drain_lead_pct: u32,
    /// Where a strict switch's drain check reads the gangs' sockets.
    pub drain_check: DrainCheck,
}

impl NodeKnobs {
    pub fn new() -> Self {
        Self {
            slot_ms: 50,
            fill: false,
            housekeeping: CpuList::new(),
            min_other_share_pct: 5,
            yield_lead_us: 5_000,
            clock_fault_us: 0,
            park: Park::Bpf,
            drain_lead_us: None,
            drain_lead_pct: 75,
            drain_check: DrainCheck::Watch,
        }
    }

    /// Sets one knob from its text form. On error nothing changes.
    pub fn set(&mut self, name: &str, value: &str, nr_cpus: u32) -> Result<(), KnobError> {
        let value = value.trim();
        match name {
            "slot_ms" => self.slot_ms = parse_in_range(name, value, SLOT_MS_RANGE)?,
            "fill" => self.fill = parse_in_range(name, value, 0..=1)? == 1,
            "min_other_share_pct" => {
                self.min_other_share_pct = parse_in_range(name, value, MIN_OTHER_SHARE_RANGE)?
            }
            "yield_lead_us" => {
                self.yield_lead_us = parse_in_range(name, value, YIELD_LEAD_US_RANGE)?
            }
            "clock_fault_us" => {
                let n: i64 = value.parse().ok().filter(|n| CLOCK_FAULT_US_RANGE.contains(n)).ok_or_else(|| {
                    KnobError::Invalid(format!(
                        "clock_fault_us must be a whole number of µs in {CLOCK_FAULT_US_RANGE:?}, got {value:?}"
                    ))
                })?;
                self.clock_fault_us = n;
            }
            "park" => {
                self.park = parse_choice(
                    name,
                    value,
                    &[("bpf", Park::Bpf), ("freezer", Park::Freezer)],
                )?
            }
            "drain_lead_us" => {
                self.drain_lead_us = match value {
                    "auto" => None,
                    _ => Some(
                        value
                            .parse()
                            .ok()
                            .filter(|n| DRAIN_LEAD_US_RANGE.contains(n))
                            .ok_or_else(|| {
                                KnobError::Invalid(format!(
                                    "drain_lead_us must be auto or a number of µs in {DRAIN_LEAD_US_RANGE:?}, got {value:?}"
                                ))
                            })?,
                    ),
                }
            }
            "drain_lead_pct" => {
                self.drain_lead_pct = parse_in_range(name, value, DRAIN_LEAD_PCT_RANGE)?
            }
            "drain_check" => {
                self.drain_check = parse_choice(
                    name,
                    value,
                    &[
                        ("watch", DrainCheck::Watch),
                        ("sock_diag", DrainCheck::SockDiag),
                    ],
                )?
            }
            "housekeeping_cpus" => {
                let list = CpuList::parse(value, nr_cpus)
                    .map_err(|e| KnobError::Invalid(format!("housekeeping_cpus: {e}")))?;
                if list.len() >= nr_cpus as usize {
                    return Err(KnobError::Invalid(
                        "housekeeping_cpus must leave at least one CPU for gangs".into(),
                    ));
                }
                self.housekeeping = list;
            }
            _ if STATUS_NAMES.contains(&name) => return Err(KnobError::ReadOnly),
            _ => return Err(KnobError::NotFound),
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "slot_ms" => self.slot_ms.to_string(),
            "fill" => (self.fill as u32).to_string(),
            "min_other_share_pct" => self.min_other_share_pct.to_string(),
            "housekeeping_cpus" => self.housekeeping.to_string(),
            "yield_lead_us" => self.yield_lead_us.to_string(),
            "clock_fault_us" => self.clock_fault_us.to_string(),
            "park" => self.park.name().to_string(),
            "drain_check" => self.drain_check.name().to_string(),
            "drain_lead_us" => match self.drain_lead_us {
                Some(us) => us.to_string(),
                None => "auto".to_string(),
            },
            "drain_lead_pct" => self.drain_lead_pct.to_string(),
            _ => return None,
        })
    }
}

impl Default for NodeKnobs {
    fn default() -> Self {
        Self::new()
    }
}

/// One of `choices` by its name, or an error that lists them.
fn parse_choice<T: Copy>(name: &str, value: &str, choices: &[(&str, T)]) -> Result<T, KnobError> {
    choices
        .iter()
        .find(|(n, _)| *n == value)
        .map(|&(_, v)| v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            KnobError::Invalid(format!(
                "{name} must be {}, got {value:?}",
                names.join(" or ")
            ))
        })
}

fn parse_in_range(
    name: &str,
    value: &str,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, KnobError> {
    let n: u32 = value.parse().map_err(|_| {
        KnobError::Invalid(format!(
            "{name} must be a number in {range:?}, got {value:?}"
        ))
    })?;
    if !range.contains(&n) {
        return Err(KnobError::Invalid(format!(
            "{name} must be in {range:?}, got {n}"
        )));
    }
    Ok(n)
}

pub const KNOB_NAMES: &[&str] = &[
    "slot_ms",
    "fill",
    "housekeeping_cpus",
    "min_other_share_pct",
    "yield_lead_us",
    "clock_fault_us",
    "park",
    "drain_lead_us",
    "drain_lead_pct",
    "drain_check",
];
pub const STATUS_NAMES: &[&str] = &[
    "mode",
    "current_slot",
    "switches",
    "nr_gangs",
    "nr_slots",
    "gangs",
];

/// What the node is doing, refreshed by the daemon's main loop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStatus {
    /// "standalone" (the BPF timer rotates) or "coordinated".
    pub mode: String,
    pub current_slot: u32,
    pub switches: u64,
    pub nr_gangs: u32,
    pub nr_slots: u32,
    /// One line per gang: "id name slots ranks yields voluntary forced early".
    pub gangs: String,
}

impl NodeStatus {
    fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "mode" => self.mode.clone(),
            "current_slot" => self.current_slot.to_string(),
            "switches" => self.switches.to_string(),
            "nr_gangs" => self.nr_gangs.to_string(),
            "nr_slots" => self.nr_slots.to_string(),
            "gangs" => self.gangs.clone(),
            _ => return None,
        })
    }
}

/// Knobs and status shared by the knob files and the daemon's main loop.
/// Every accepted write bumps `generation`, which the main loop watches.
pub struct SharedKnobs {
    pub knobs: Mutex<NodeKnobs>,
    pub status: Mutex<NodeStatus>,
    generation: AtomicU64,
    nr_cpus: u32,
    /// Called after every accepted write (wake the main loop and the
    /// agent's clock prober).
    on_change: Mutex<Vec<Box<dyn Fn() + Send>>>,
}

impl SharedKnobs {
    pub fn new(knobs: NodeKnobs, nr_cpus: u32) -> Arc<Self> {
        Arc::new(Self {
            knobs: Mutex::new(knobs),
            status: Mutex::new(NodeStatus::default()),
            generation: AtomicU64::new(0),
            nr_cpus,
            on_change: Mutex::new(Vec::new()),
        })
    }

    /// `notify` runs after every accepted write, besides those given
    /// before.
    pub fn on_change(&self, notify: impl Fn() + Send + 'static) {
        self.on_change.lock().unwrap().push(Box::new(notify));
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn snapshot(&self) -> NodeKnobs {
        self.knobs.lock().unwrap().clone()
    }

    /// The pending clock fault (µs), taken: the knob reads 0 again.
    pub fn take_clock_fault_us(&self) -> i64 {
        std::mem::take(&mut self.knobs.lock().unwrap().clock_fault_us)
    }

    pub fn set_status(&self, status: NodeStatus) {
        *self.status.lock().unwrap() = status;
    }
}

impl KnobSet for SharedKnobs {
    fn names(&self) -> Vec<String> {
        KNOB_NAMES
            .iter()
            .chain(STATUS_NAMES)
            .map(|s| s.to_string())
            .collect()
    }

    fn is_writable(&self, name: &str) -> bool {
        KNOB_NAMES.contains(&name)
    }

    fn read(&self, name: &str) -> Result<String, KnobError> {
        if let Some(v) = self.knobs.lock().unwrap().get(name) {
            return Ok(v);
        }
        self.status
            .lock()
            .unwrap()
            .get(name)
            .ok_or(KnobError::NotFound)
    }

    fn write(&self, name: &str, value: &str) -> Result<(), KnobError> {
        self.knobs.lock().unwrap().set(name, value, self.nr_cpus)?;
        self.generation.fetch_add(1, Ordering::AcqRel);
        for notify in self.on_change.lock().unwrap().iter() {
            notify();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_fault_us_takes_whole_microseconds_within_10_s_and_is_taken_once() {
        let mut k = NodeKnobs::new();
        k.set("clock_fault_us", "-50000", 2).unwrap();
        assert_eq!(k.clock_fault_us, -50_000);
        for bad in [
            "10000001",
            "-10000001",
            "1.5",
            "",
            "abc",
            "9223372036854775808",
        ] {
            let err = k.set("clock_fault_us", bad, 2).unwrap_err();
            assert!(matches!(err, KnobError::Invalid(_)), "{bad:?}: {err}");
            assert_eq!(k.clock_fault_us, -50_000, "a refused value changes nothing");
        }
        let shared = SharedKnobs::new(k, 2);
        assert_eq!(shared.take_clock_fault_us(), -50_000);
        assert_eq!(shared.take_clock_fault_us(), 0, "once");
        assert_eq!(shared.read("clock_fault_us").unwrap(), "0");
    }

    #[test]
    fn slot_ms_takes_1_to_10000_and_nothing_else() {
        let mut k = NodeKnobs::new();
        k.set("slot_ms", "20\n", 2).unwrap();
        assert_eq!(k.slot_ms, 20);
        for bad in ["0", "10001", "abc", "", "-5", "2.5", "20 30"] {
            let err = k.set("slot_ms", bad, 2).unwrap_err();
            assert!(matches!(err, KnobError::Invalid(_)), "{bad:?}: {err}");
            assert_eq!(k.slot_ms, 20, "a refused value changes nothing");
        }
    }

    #[test]
    fn yield_lead_us_takes_0_to_one_second() {
        let mut k = NodeKnobs::new();
        assert_eq!(k.get("yield_lead_us").unwrap(), "5000");
        k.set("yield_lead_us", "0", 2).unwrap();
        assert_eq!(k.yield_lead_us, 0, "0 turns voluntary yield off");
        k.set("yield_lead_us", "250", 2).unwrap();
        for bad in ["1000001", "-1", "1ms", ""] {
            assert!(k.set("yield_lead_us", bad, 2).is_err(), "{bad:?}");
            assert_eq!(k.yield_lead_us, 250, "a refused value changes nothing");
        }
    }

    #[test]
    fn drain_lead_us_is_auto_or_0_to_one_second() {
        let mut k = NodeKnobs::new();
        assert_eq!(k.get("drain_lead_us").unwrap(), "auto");
        k.set("drain_lead_us", "3000\n", 2).unwrap();
        assert_eq!(k.drain_lead_us, Some(3_000));
        assert_eq!(k.get("drain_lead_us").unwrap(), "3000");
        k.set("drain_lead_us", "0", 2).unwrap();
        assert_eq!(k.drain_lead_us, Some(0), "0: park at the boundary");
        for bad in ["1000001", "-1", "3ms", "", "Auto", "2.5"] {
            let err = k.set("drain_lead_us", bad, 2).unwrap_err();
            assert!(matches!(err, KnobError::Invalid(_)), "{bad:?}");
            assert_eq!(k.drain_lead_us, Some(0), "a refused value changes nothing");
        }
        k.set("drain_lead_us", "auto", 2).unwrap();
        assert_eq!(k.drain_lead_us, None);
    }

    #[test]
    fn drain_lead_pct_is_a_quantile_from_the_median_to_p99() {
        let mut k = NodeKnobs::new();
        assert_eq!(k.get("drain_lead_pct").unwrap(), "75");
        k.set("drain_lead_pct", "50\n", 2).unwrap();
        assert_eq!(k.drain_lead_pct, 50);
        k.set("drain_lead_pct", "99", 2).unwrap();
        assert_eq!(k.get("drain_lead_pct").unwrap(), "99");
        for bad in ["49", "100", "0", "-75", "75%", "", "p75", "7.5"] {
            let err = k.set("drain_lead_pct", bad, 2).unwrap_err();
            assert!(matches!(err, KnobError::Invalid(_)), "{bad:?}");
            assert_eq!(k.drain_lead_pct, 99, "a refused value changes nothing");
        }
    }

    #[test]
    fn park_and_drain_check_take_one_of_their_names_and_nothing_else() {
        for (name, default, other, bad) in [
            (
                "park",
                "bpf",
                "freezer",
                ["", "BPF", "cgroup", "1", "bpf freezer"],
            ),
            (
                "drain_check",
                "watch",
                "sock_diag",
                ["", "Watch", "sockdiag", "1", "watch sock_diag"],
            ),
        ] {
            let mut k = NodeKnobs::new();
            assert_eq!(k.get(name).unwrap(), default);
            k.set(name, &format!("{other}\n"), 2).unwrap();
            assert_eq!(k.get(name).unwrap(), other);
            let set = k.clone();
            for b in bad {
                let err = k.set(name, b, 2).unwrap_err();
                assert!(
                    matches!(&err, KnobError::Invalid(m) if m.contains(default) && m.contains(other)),
                    "{name} {b:?}: {err}"
                );
                assert_eq!(k, set, "{name}: a refused value changes nothing");
            }
            k.set(name, default, 2).unwrap();
            assert_eq!(k.get(name).unwrap(), default);
        }
        assert_eq!(NodeKnobs::new().park, Park::Bpf);
        assert_eq!(NodeKnobs::new().drain_check, DrainCheck::Watch);
    }

    #[test]
    fn fill_is_a_boolean() {
        let mut k = NodeKnobs::new();
        k.set("fill", "1", 2).unwrap();
        assert!(k.fill);
        assert!(k.set("fill", "2", 2).is_err());
        assert!(k.fill);
    }

    #[test]
    fn housekeeping_must_exist_and_leave_a_gang_cpu() {
        let mut k = NodeKnobs::new();
        k.set("housekeeping_cpus", "0", 2).unwrap();
        assert_eq!(k.get("housekeeping_cpus").unwrap(), "0");
        assert!(k.set("housekeeping_cpus", "0-1", 2).is_err());
        assert!(k.set("housekeeping_cpus", "7", 2).is_err());
        assert_eq!(k.get("housekeeping_cpus").unwrap(), "0");
        k.set("housekeeping_cpus", "", 2).unwrap();
        assert!(k.housekeeping.is_empty());
    }

    #[test]
    fn the_minimum_share_of_others_cannot_be_zero() {
        let mut k = NodeKnobs::new();
        assert!(k.set("min_other_share_pct", "0", 2).is_err());
        assert!(k.set("min_other_share_pct", "51", 2).is_err());
        k.set("min_other_share_pct", "10", 2).unwrap();
        assert_eq!(k.min_other_share_pct, 10);
    }

    #[test]
    fn status_files_are_read_only_and_unknown_names_are_not_found() {
        let shared = SharedKnobs::new(NodeKnobs::new(), 2);
        assert!(matches!(
            shared.write("switches", "5"),
            Err(KnobError::ReadOnly)
        ));
        assert!(matches!(
            shared.write("nope", "5"),
            Err(KnobError::NotFound)
        ));
        assert_eq!(shared.generation(), 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let (tx2, rx2) = std::sync::mpsc::channel();
        shared.on_change(move || tx.send(()).unwrap());
        shared.on_change(move || tx2.send(()).unwrap());
        shared.write("slot_ms", "30").unwrap();
        assert_eq!(shared.generation(), 1);
        assert!(rx.try_recv().is_ok(), "an accepted write notifies");
        assert!(rx2.try_recv().is_ok(), "every listener");
        assert!(shared.write("slot_ms", "0").is_err());
        assert!(rx.try_recv().is_err(), "a refused write does not");
        assert_eq!(shared.read("slot_ms").unwrap(), "30");
    }
}
