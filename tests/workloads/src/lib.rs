//! Shared code of the gang-workloads binaries.
//!
//! [`spmd`]: environment, connections, messages, compute grains and result
//! lines of the SPMD workloads `rt`, `allreduce`, `alltoall` and `ep`.

pub mod spmd;
