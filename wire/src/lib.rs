//! gang-wire: everything the node (`scx_gang` and its agent) and the
//! coordinator (`gangd`, `gang`) must agree on, and nothing else. Both
//! depend on this crate and neither on the other.
//!
//! - cluster_clock: a node's estimate of gangd's clock, with an honest
//!   error bound, from timestamped exchanges.
//! - proto: the agent link (frames, messages, versions) and its TLS 1.3
//!   with the cluster CA.
//! - pmix: what the agent and a job's PMIx server (gang-pmix-server, a
//!   child of the agent) say over their socketpair, and the job they serve.
//! - pmi: the PMI-1 protocol MPI ranks speak, the node's server half and
//!   the cluster's key-value space and barriers.
//! - trace: the node trace format, its analysis, the merged cluster trace
//!   and its SVG timeline.
//! - knobfs: the knob file system both daemons mount (true EINVAL).
//! - time: the clock every timestamp on the wire is read from.
//! - rx_stamp: when the kernel received what a TCP read returned (the
//!   clock exchange's arrival stamps).
//! - plan: the slot plan (the rotation sent ahead of time) and its
//!   amendments, as pure arithmetic on cluster time.

pub mod cluster_clock;
pub mod knobfs;
pub mod plan;
pub mod pmi;
pub mod pmix;
pub mod proto;
pub mod rx_stamp;
pub mod time;
pub mod trace;
