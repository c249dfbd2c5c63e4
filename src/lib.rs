//! scx_gang: the per-node half of a gang scheduler for Linux clusters.
//!
//! The library holds the logic that does not touch the kernel, so it is
//! tested on the host: CPU lists, the slot table, knob values, the knob file
//! system and trace analysis. The daemon (src/main.rs) adds the BPF side.

pub mod cpulist;
pub mod knobfs;
pub mod trace;
