//! scx_gang: the per-node half of a gang scheduler for Linux clusters.
//!
//! The library holds what does not touch the kernel, so it is tested on the
//! host: CPU lists, the slot table, the gang registry, knob values, the knob
//! file system, the control protocol and trace analysis, the node agent
//! that joins a gangd cluster (its scheduling goes through the daemon's main
//! loop), and the node's switching without BPF (`--switching signal|none`,
//! switching/: signals, or nothing). The daemon (src/main.rs, src/scheduler.rs) adds the BPF side.

pub mod agent;
pub mod bpf_intf;
pub mod clock;
pub mod control;
pub mod cpulist;
pub mod drain;
pub mod events;
pub mod freezer;
pub mod gangs;
pub mod knobs;
pub mod preflight;
pub mod slots;
pub mod switching;
