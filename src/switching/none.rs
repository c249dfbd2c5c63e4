//! The `none` mode's node: no switching at all. The agent still starts and
//! stops ranks in their job cgroups; the kernel's own scheduler (EEVDF, or a
//! sched_ext scheduler the operator attached separately) runs them. The
//! coordinator's scheduling requests are accepted so that gangd's rotation
//! goes on unchanged, and do nothing.
//!
//! Known fault: the status files show the coordinator's slot numbers,
//! though nothing here enforces them.

use std::time::Duration;

use anyhow::Result;

use crate::control::{FrozenReport, GangCpus};
use crate::knobs::{NodeKnobs, NodeStatus};

use super::sigstop::ProcessSource;
use super::{FreezeJob, Switcher, Switching};

/// The `none` mode: accepts every scheduling request, switches nothing.
pub struct NoSwitching<S: ProcessSource> {
    source: S,
    /// What the coordinator last said (for the status files only).
    nr_slots: usize,
    slot: u32,
}

impl<S: ProcessSource> NoSwitching<S> {
    pub fn new(source: S) -> Self {
        Self {
            source,
            nr_slots: 0,
            slot: 0,
        }
    }
}

impl<S: ProcessSource> Switcher for NoSwitching<S> {
    fn switching(&self) -> Switching {
        Switching::None
    }

    fn column(&mut self, slots: Vec<Vec<GangCpus>>, _strict: bool) -> Result<()> {
        self.nr_slots = slots.len();
        Ok(())
    }

    fn switch(&mut self, slot: u32, _gen: u64, _slot_ms: u32, _at_ns: u64) -> Result<()> {
        self.slot = slot;
        Ok(())
    }

    fn autonomous(&mut self) -> Result<()> {
        Ok(())
    }

    fn standalone(&mut self) -> Result<()> {
        Ok(())
    }

    /// Nothing is parked or drained: the report says so (parked and
    /// drained false, no gangs), at once.
    fn freeze(&mut self, gen: u64, _to_slot: Option<u32>, _timeout: Duration) -> Result<FreezeJob> {
        Ok(Box::new(move || {
            Ok(FrozenReport {
                gen,
                parked: false,
                drained: false,
                ..Default::default()
            })
        }))
    }

    fn knobs_changed(&mut self, _knobs: &NodeKnobs) -> Result<()> {
        Ok(())
    }

    fn rescan(&mut self) {}

    fn status(&self) -> NodeStatus {
        let gangs = self.source.gangs().unwrap_or_default();
        NodeStatus {
            mode: "none".into(),
            current_slot: self.slot,
            switches: 0,
            nr_gangs: gangs.len() as u32,
            nr_slots: self.nr_slots as u32,
            gangs: gangs
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let ranks = self.source.processes(g).map(|p| p.len()).unwrap_or(0);
                    format!("{i} {g} ranks={ranks}")
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}
