//! The `none` mode's node: no switching at all. The agent still starts and
//! stops ranks in their job cgroups; the kernel's own scheduler (EEVDF, or a
//! sched_ext scheduler the operator attached separately) runs them. The
//! coordinator's scheduling requests are accepted so that gangd's rotation
//! goes on unchanged, and do nothing.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::control::{FrozenReport, Placement};
use crate::knobs::NodeStatus;

use super::signal::ProcessSource;
use super::{FreezeJob, LocalSwitching};

pub struct Passive<S: ProcessSource> {
    source: S,
    /// What the coordinator last said (for the status files only).
    nr_slots: usize,
    slot: u32,
}

impl<S: ProcessSource> Passive<S> {
    pub fn new(source: S) -> Self {
        Self {
            source,
            nr_slots: 0,
            slot: 0,
        }
    }
}

impl<S: ProcessSource> LocalSwitching for Passive<S> {
    fn column(&mut self, slots: &[Vec<Placement>], _strict: bool) -> Result<()> {
        self.nr_slots = slots.len();
        Ok(())
    }

    fn switch(&mut self, slot: u32, _gen: u64) -> Result<()> {
        self.slot = slot;
        Ok(())
    }

    fn rotate(&mut self) -> Result<()> {
        Ok(())
    }

    fn standalone(&mut self) -> Result<()> {
        Ok(())
    }

    /// Nothing is parked or drained: the report says so (parked and
    /// drained false, no gangs), at once.
    fn freeze(&mut self, gen: u64, _timeout: Duration) -> Result<FreezeJob> {
        Ok(Box::new(move || {
            Ok(FrozenReport {
                gen,
                parked: false,
                drained: false,
                ..Default::default()
            })
        }))
    }

    fn tick(&mut self, _now: Instant) {}

    fn next_wake(&self) -> Option<Instant> {
        None
    }

    fn rescan(&mut self) {}

    fn set_slot_ms(&mut self, _slot_ms: u32) {}

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
