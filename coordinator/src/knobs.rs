//! gangd's knob values: the cluster's settings an operator writes in
//! /run/gangd (daemon/knobs.rs serves the files), their names, ranges and
//! text forms. Pure, so the rotation (switch/) and the daemon both read it
//! from below.
//!
//! A value is checked here for its form (a number in range, a known word);
//! the daemon then checks it against the cluster (policy `scs` cannot be
//! switched on under running jobs) before anything changes.

use crate::alloc::Policy;
use gang_wire::knobfs::KnobError;
use gang_wire::proto::{Barrier, ClockSource, ToAgent};

/// The writable knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterKnobs {
    pub slot_ms: u32,
    pub mpl_max: u32,
    pub policy: Policy,
    pub fill: bool,
    pub barrier: Barrier,
    pub drain_timeout_ms: u32,
    pub switching: Switching,
    /// The nodes' cluster clock: gangd's, estimated by each agent, or
    /// their CLOCK_REALTIME (PTP or chrony keeps it).
    pub clock: ClockSource,
    /// With `clock = realtime`: the error bound the nodes state, µs.
    pub clock_error_us: u32,
    /// Timed switching: a node whose clock error bound is over this (or
    /// whose clock is not synchronised) is switched by command, µs.
    pub max_clock_error_us: u32,
}

/// How the cluster switches slots (docs/timed-switching.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Switching {
    /// A command per switch: the Freeze/Switch barrier (switch/barrier.rs).
    #[default]
    Commanded,
    /// Plans sent ahead of time (switch/timed.rs): nodes switch on their
    /// own clocks at the plan's boundaries.
    Timed,
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
            switching: Switching::Commanded,
            clock: ClockSource::Gangd,
            // chrony against a LAN server: tens of µs; a conservative
            // default until the operator says what their PTP achieves.
            clock_error_us: 1000,
            // A tenth of the default slot: past it the nodes' switch
            // instants differ by more than the drain they wait for.
            max_clock_error_us: 10_000,
        }
    }
}

pub const WRITABLE: [&str; 10] = [
    "slot_ms",
    "mpl_max",
    "policy",
    "fill",
    "barrier",
    "drain_timeout_ms",
    "switching",
    "clock",
    "clock_error_us",
    "max_clock_error_us",
];
pub const READ_ONLY: [&str; 10] = [
    "nodes",
    "jobs",
    "switches",
    "early_switches",
    "drain_timeouts",
    "missed_switches",
    "late_switches",
    "late_plans",
    "commanded_switches",
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
            clock: self.clock,
            clock_error_us: self.clock_error_us,
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
            "switching" => {
                self.switching = match value.trim() {
                    "commanded" => Switching::Commanded,
                    "timed" => Switching::Timed,
                    v => {
                        return Err(KnobError::Invalid(format!(
                            "switching must be commanded or timed, got {v:?}"
                        )))
                    }
                }
            }
            "clock" => {
                self.clock = match value.trim() {
                    "gangd" => ClockSource::Gangd,
                    "realtime" => ClockSource::Realtime,
                    v => {
                        return Err(KnobError::Invalid(format!(
                            "clock must be gangd or realtime, got {v:?}"
                        )))
                    }
                }
            }
            // 1 µs is better than PTP in software; 1 s is no clock for
            // switching slots of milliseconds.
            "clock_error_us" => {
                self.clock_error_us = number(value, 1, 1_000_000, "clock_error_us")?
            }
            "max_clock_error_us" => {
                self.max_clock_error_us = number(value, 1, 1_000_000, "max_clock_error_us")?
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
            "switching" => match self.switching {
                Switching::Commanded => "commanded".into(),
                Switching::Timed => "timed".into(),
            },
            "clock" => match self.clock {
                ClockSource::Gangd => "gangd".into(),
                ClockSource::Realtime => "realtime".into(),
            },
            "clock_error_us" => self.clock_error_us.to_string(),
            "max_clock_error_us" => self.max_clock_error_us.to_string(),
            _ => return None,
        })
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
        assert_eq!(k.switching, Switching::Commanded, "the default");
        assert_eq!(
            k.with("switching", "timed\n").unwrap().switching,
            Switching::Timed
        );
        assert!(!k.with("fill", "0").unwrap().fill);
        let rt = k.with("clock", "realtime\n").unwrap();
        assert_eq!(rt.clock, ClockSource::Realtime);
        assert!(matches!(
            rt.with("clock_error_us", "40").unwrap().message(),
            ToAgent::Knobs {
                clock: ClockSource::Realtime,
                clock_error_us: 40,
                ..
            }
        ));
        for (name, bad) in [
            ("slot_ms", "0"),
            ("slot_ms", "abc"),
            ("mpl_max", "17"),
            ("policy", "bogus"),
            ("fill", "2"),
            ("barrier", "loose"),
            ("switching", "sometimes"),
            ("switching", ""),
            ("drain_timeout_ms", "0"),
            ("clock", "ntp"),
            ("clock", ""),
            ("clock_error_us", "0"),
            ("clock_error_us", "1000001"),
            ("clock_error_us", "-5"),
            ("max_clock_error_us", "0"),
            ("max_clock_error_us", "1000001"),
            ("max_clock_error_us", "ten"),
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
            ("switching", "timed"),
            ("switching", "commanded"),
            ("clock", "realtime"),
            ("clock", "gangd"),
            ("clock_error_us", "250"),
            ("max_clock_error_us", "4000"),
        ] {
            assert_eq!(k.with(name, v).unwrap().get(name).unwrap(), v);
        }
    }
}
