//! scx_gang: the per-node half of a gang scheduler for Linux clusters.
//!
//! The library holds what does not need the BPF scheduler loaded, so it is
//! tested on the host: CPU lists, the slot table, the gang registry, knob
//! values, the knob file system, the control protocol and trace analysis,
//! the node's switching (switching/: one main loop over the `bpf`, `signal`
//! and `none` modes), and the node agent that joins a gangd cluster (on
//! top: its scheduling goes through the main loop). The daemon (src/main.rs)
//! adds the BPF plumbing (src/scheduler.rs: load, attach, maps, ring
//! buffers, restart), which the `bpf` mode drives through a trait.
//! `pmix_guard` loads a BPF program of its own (cgroup connect hooks, not
//! the scheduler): who may connect to a job's PMIx server; `sock_watch`
//! too (a tracepoint and two iterators): the gangs' TCP sockets for the
//! drain check.

pub mod agent;
pub mod bpf_cost;
pub mod bpf_intf;
pub mod clock;
pub mod control;
pub mod cpulist;
pub mod drain;
pub mod events;
pub mod freezer;
pub mod gang_watch;
pub mod gangs;
pub mod knobs;
pub mod park_bench;
pub mod pmix_guard;
pub mod preflight;
pub mod slots;
pub mod sock_watch;
pub mod sockets_cmd;
pub mod switching;
