//! gangd's knobs, served as files in /run/gangd (knobfs).
//!
//! A value is checked twice: its form here (a number in range, a known
//! word), then against the cluster by the coordinator's thread, which owns
//! the allocator (policy `scs` cannot be switched on under running jobs).
//! The FUSE write waits for that answer, so `echo` fails with EINVAL and
//! nothing changes whenever either check refuses.
//!
//! The coordinator's side (`impl Coordinator`): a knob write checked
//! against the allocator and applied (the nodes hear it at the next slot
//! boundary), and the status files (nodes, jobs, switch statistics)
//! republished after every change.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::alloc::Policy;
use gang_wire::knobfs::{KnobError, KnobSet};
use gang_wire::proto::{Barrier, ToAgent};

use super::{settings, Coordinator};

/// The writable knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterKnobs {
    pub slot_ms: u32,
    pub mpl_max: u32,
    pub policy: Policy,
    pub fill: bool,
    pub barrier: Barrier,
    pub drain_timeout_ms: u32,
}

impl Default for ClusterKnobs {
    fn default() -> Self {
        Self {
            slot_ms: 100,
            mpl_max: 4,
            policy: Policy::FirstFit,
            fill: true,
            barrier: Barrier::Strict,
            drain_timeout_ms: 200,
        }
    }
}

pub const WRITABLE: [&str; 6] = [
    "slot_ms",
    "mpl_max",
    "policy",
    "fill",
    "barrier",
    "drain_timeout_ms",
];
pub const READ_ONLY: [&str; 7] = [
    "nodes",
    "jobs",
    "switches",
    "early_switches",
    "drain_timeouts",
    "missed_switches",
    "last_switch",
];

fn number(value: &str, lo: u32, hi: u32, what: &str) -> Result<u32, KnobError> {
    match value.trim().parse::<u32>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(KnobError::Invalid(format!(
            "{what} must be in {lo}..={hi}, got {value:?}"
        ))),
    }
}

impl ClusterKnobs {
    /// The knobs every node must know (sent at its Welcome and at the
    /// first slot boundary after a change).
    pub fn message(&self) -> ToAgent {
        ToAgent::Knobs {
            slot_ms: self.slot_ms,
            drain_timeout_ms: self.drain_timeout_ms,
            barrier: self.barrier,
            fill: self.fill,
        }
    }

    /// This set with `name` changed to `value`, if the value is well formed.
    pub fn with(mut self, name: &str, value: &str) -> Result<Self, KnobError> {
        match name {
            // Below ~10 ms a slot is mostly barrier; above 60 s the rotation
            // meets the node's RCU-stall cap anyway.
            "slot_ms" => self.slot_ms = number(value, 1, 60_000, "slot_ms")?,
            "mpl_max" => {
                self.mpl_max = number(value, 1, crate::matrix::NODE_MAX_SLOTS as u32, "mpl_max")?
            }
            "policy" => {
                self.policy = value
                    .parse()
                    .map_err(|e: crate::alloc::AllocError| KnobError::Invalid(e.to_string()))?
            }
            "fill" => self.fill = number(value, 0, 1, "fill")? == 1,
            "barrier" => {
                self.barrier = match value.trim() {
                    "strict" => Barrier::Strict,
                    "off" => Barrier::Off,
                    v => {
                        return Err(KnobError::Invalid(format!(
                            "barrier must be strict or off, got {v:?}"
                        )))
                    }
                }
            }
            "drain_timeout_ms" => {
                self.drain_timeout_ms = number(value, 1, 10_000, "drain_timeout_ms")?
            }
            _ if READ_ONLY.contains(&name) => return Err(KnobError::ReadOnly),
            _ => return Err(KnobError::NotFound),
        }
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "slot_ms" => self.slot_ms.to_string(),
            "mpl_max" => self.mpl_max.to_string(),
            "policy" => self.policy.to_string(),
            "fill" => u8::from(self.fill).to_string(),
            "barrier" => match self.barrier {
                Barrier::Strict => "strict".into(),
                Barrier::Off => "off".into(),
            },
            "drain_timeout_ms" => self.drain_timeout_ms.to_string(),
            _ => return None,
        })
    }
}

/// What the read-only knobs show; the coordinator refreshes it.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// One line per node: "id name address cpus".
    pub nodes: String,
    pub jobs: usize,
    pub switches: u64,
    /// Switches before the slot's end: every job of the slot had yielded.
    pub early_switches: u64,
    pub drain_timeouts: u64,
    /// Times a node was left out of a switch for answering too late.
    pub missed_switches: u64,
    /// The last switch's record, one JSON line.
    pub last_switch: String,
}

/// A knob write waiting for the coordinator's verdict.
pub struct KnobWrite {
    pub knobs: ClusterKnobs,
    pub reply: Sender<Result<(), KnobError>>,
}

/// The KnobSet served on /run/gangd.
pub struct KnobFiles {
    pub current: Arc<Mutex<ClusterKnobs>>,
    pub status: Arc<Mutex<Status>>,
    pub writes: Mutex<Sender<KnobWrite>>,
}

impl KnobSet for KnobFiles {
    fn names(&self) -> Vec<String> {
        WRITABLE
            .iter()
            .chain(READ_ONLY.iter())
            .map(|s| s.to_string())
            .collect()
    }

    fn is_writable(&self, name: &str) -> bool {
        WRITABLE.contains(&name)
    }

    fn read(&self, name: &str) -> Result<String, KnobError> {
        if let Some(v) = self.current.lock().unwrap().get(name) {
            return Ok(v);
        }
        let s = self.status.lock().unwrap();
        Ok(match name {
            "nodes" => s.nodes.clone(),
            "jobs" => s.jobs.to_string(),
            "switches" => s.switches.to_string(),
            "early_switches" => s.early_switches.to_string(),
            "drain_timeouts" => s.drain_timeouts.to_string(),
            "missed_switches" => s.missed_switches.to_string(),
            "last_switch" => s.last_switch.clone(),
            _ => return Err(KnobError::NotFound),
        })
    }

    fn write(&self, name: &str, value: &str) -> Result<(), KnobError> {
        let knobs = self.current.lock().unwrap().with(name, value)?;
        let (tx, rx) = mpsc::channel();
        let sent = self
            .writes
            .lock()
            .unwrap()
            .send(KnobWrite { knobs, reply: tx });
        if sent.is_err() {
            return Err(KnobError::Invalid("gangd is shutting down".into()));
        }
        let verdict = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| Err(KnobError::Invalid("gangd did not answer".into())));
        if let Err(e) = &verdict {
            log::warn!("knob {name} = {value:?} refused: {e}");
        } else {
            log::info!("knob {name} = {value}");
        }
        verdict
    }
}

impl Coordinator {
    pub(super) fn set_knobs(&mut self, k: ClusterKnobs) -> Result<(), KnobError> {
        let s = settings(&k);
        if s != self.alloc.settings() {
            self.alloc
                .set_settings(s)
                .map_err(|e| KnobError::Invalid(e.to_string()))?;
            self.placement_changed();
        }
        self.knobs = k;
        *self.shared_knobs.lock().unwrap() = k;
        self.rotation.knobs_changed();
        Ok(())
    }

    pub(super) fn publish_status(&self) {
        let mut s = self.status.lock().unwrap();
        s.nodes = self
            .nodes
            .values()
            .map(|n| {
                let rtt = n.min_rtt_us().map_or("-".to_string(), |r| r.to_string());
                format!(
                    "{} {} {} cpus={} rtt_us={rtt}\n",
                    n.id.0, n.name, n.addr, n.nr_cpus
                )
            })
            .collect();
        s.jobs = self.jobs.len();
        let stats = self.rotation.stats();
        s.switches = stats.switches;
        s.early_switches = stats.early_switches;
        s.drain_timeouts = stats.drain_timeouts;
        s.missed_switches = stats.missed;
        s.last_switch = self.switch_log.last().to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_before_anything_changes() {
        let k = ClusterKnobs::default();
        assert_eq!(k.with("slot_ms", "20\n").unwrap().slot_ms, 20);
        assert_eq!(
            k.with("policy", "best_fit").unwrap().policy,
            Policy::BestFit
        );
        assert_eq!(k.with("barrier", "off").unwrap().barrier, Barrier::Off);
        assert!(!k.with("fill", "0").unwrap().fill);
        for (name, bad) in [
            ("slot_ms", "0"),
            ("slot_ms", "abc"),
            ("mpl_max", "17"),
            ("policy", "bogus"),
            ("fill", "2"),
            ("barrier", "loose"),
            ("drain_timeout_ms", "0"),
        ] {
            assert!(
                matches!(k.with(name, bad), Err(KnobError::Invalid(_))),
                "{name}={bad}"
            );
        }
        assert_eq!(k.with("switches", "1"), Err(KnobError::ReadOnly));
        assert_eq!(k.with("nope", "1"), Err(KnobError::NotFound));
    }

    #[test]
    fn every_writable_knob_reads_back_what_was_written() {
        let k = ClusterKnobs::default();
        for (name, v) in [
            ("slot_ms", "77"),
            ("mpl_max", "3"),
            ("policy", "scs"),
            ("fill", "0"),
            ("barrier", "off"),
            ("drain_timeout_ms", "9"),
        ] {
            assert_eq!(k.with(name, v).unwrap().get(name).unwrap(), v);
        }
    }
}
