//! gangd's knobs, served as files in /run/gangd (knobfs).
//!
//! A value is checked twice: its form (crate::knobs::ClusterKnobs::with),
//! then against the cluster by the coordinator's thread, which owns
//! the allocator (policy `scs` cannot be switched on under running jobs).
//! The FUSE write waits for that answer, so `echo` fails with EINVAL and
//! nothing changes whenever either check refuses.
//!
//! The coordinator's side (`impl Coordinator`): a knob write checked
//! against the allocator and applied (the nodes hear it at the next slot
//! boundary), and the status files (nodes, jobs, switch statistics)
//! republished after a change, at most once a second (mod.rs,
//! `StatusClock`).

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::knobs::{ClusterKnobs, READ_ONLY, WRITABLE};
use gang_wire::knobfs::{KnobError, KnobSet};

use super::{settings, Coordinator};

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
    /// Timed: node switches after their boundary (drain ended late).
    pub late_switches: u64,
    /// Timed: nodes that had not acknowledged a plan by its boundary.
    pub late_plans: u64,
    /// Timed: node switches made by command instead (the node's clock
    /// was not good enough: max_clock_error_us).
    pub commanded_switches: u64,
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
            "late_switches" => s.late_switches.to_string(),
            "late_plans" => s.late_plans.to_string(),
            "commanded_switches" => s.commanded_switches.to_string(),
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

    /// The status files changed: they are rewritten now if they were not
    /// in the last second, else at the end of that second (mod.rs,
    /// `StatusClock`): each write is O(nodes) strings.
    pub(super) fn publish_status(&mut self) {
        if self.status_clock.changed(std::time::Instant::now()) {
            self.write_status();
        }
    }

    /// Rewrites what the status files show. The nodes' lines are rebuilt
    /// when a node joined or left or a clock changed state, else at most
    /// every `node_lines_period` (their RTT and clock figures): 4096 lines
    /// a second were a twentieth of gangd's steady state at 4096 nodes.
    pub(super) fn write_status(&self) {
        let mut s = self.status.lock().unwrap();
        let now = std::time::Instant::now();
        let due = self.node_lines.get().is_none_or(|(epoch, at)| {
            epoch != self.links_epoch
                || now.saturating_duration_since(at) >= node_lines_period(self.nodes.len())
        });
        if due {
            s.nodes = self.nodes.values().map(|n| n.status_line()).collect();
            self.node_lines.set(Some((self.links_epoch, now)));
        }
        s.jobs = self.jobs.len();
        let stats = self.rotation.stats();
        s.switches = stats.switches;
        s.early_switches = stats.early_switches;
        s.drain_timeouts = stats.drain_timeouts;
        s.missed_switches = stats.missed;
        s.late_switches = stats.late_switches;
        s.late_plans = stats.late_plans;
        s.commanded_switches = stats.commanded_switches;
        s.last_switch = self.switch_log.last();
    }
}

/// How often the nodes' status lines are rebuilt when no node joined,
/// left or changed its clock's state: with every status write (a second)
/// up to 512 nodes, a second more per 512 past it.
pub fn node_lines_period(nodes: usize) -> std::time::Duration {
    std::time::Duration::from_secs(nodes.div_ceil(512).max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn node_lines_follow_every_write_up_to_512_nodes_and_slow_down_past_it() {
        assert_eq!(node_lines_period(0), Duration::from_secs(1));
        assert_eq!(node_lines_period(512), Duration::from_secs(1));
        assert_eq!(node_lines_period(513), Duration::from_secs(2));
        assert_eq!(node_lines_period(4096), Duration::from_secs(8));
    }
}
