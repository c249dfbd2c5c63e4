//! Why the allocator refused something. Each message says what was refused
//! and why, in the terms of the request, so a user can fix it.

use std::fmt;

use super::{JobState, Policy};
use crate::matrix::NODE_MAX_SLOTS;
use gang_wire::proto::JobId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// A policy knob value that names no policy.
    UnknownPolicy {
        given: String,
    },
    /// A job reported by the nodes after a gangd restart does not fit what
    /// is already known.
    AdoptConflict {
        job: JobId,
    },
    /// A policy change to or from scs while jobs are live.
    PolicyBusy {
        from: Policy,
        to: Policy,
        jobs: usize,
    },
    /// mpl_max outside 1..=NODE_MAX_SLOTS.
    MplMax {
        value: usize,
    },
    /// A job name that cannot be a cgroup directory name.
    BadName {
        name: String,
        why: &'static str,
    },
    /// Another live job has this name; the name is the gang's directory on
    /// every node, so it must be unique.
    DuplicateName {
        name: String,
        job: JobId,
    },
    NoRanks {
        name: String,
    },
    ZeroPerNode {
        name: String,
    },
    /// More CPUs than the cluster has gang CPUs.
    TooLarge {
        name: String,
        cpus: usize,
        gang_cpus: usize,
    },
    /// The per-node limit leaves too few places for the ranks.
    PerNodeLimit {
        name: String,
        ranks: u32,
        per_node: u32,
        room: usize,
    },
    /// buddy: the rounded-up block is larger than the cluster.
    BuddyTooLarge {
        name: String,
        ranks: u32,
        block: usize,
        gang_cpus: usize,
    },
    /// buddy: no aligned block keeps the per-node limit.
    BuddyPerNode {
        name: String,
        ranks: u32,
        block: usize,
        per_node: u32,
    },
    /// scs: even at mpl_max ranks per CPU the job needs more CPUs than exist.
    ScsTooLarge {
        name: String,
        ranks: u32,
        mpl_max: usize,
        cpus: usize,
        gang_cpus: usize,
    },
    /// scs: no allocation keeps both mpl_max per CPU and the per-node limit.
    ScsPerNode {
        name: String,
        ranks: u32,
        per_node: u32,
        mpl_max: usize,
    },
    NoSuchJob {
        job: JobId,
    },
    /// Only a running job can be suspended.
    NotRunning {
        job: JobId,
        state: JobState,
    },
    /// Only a suspended job can be resumed.
    NotSuspended {
        job: JobId,
        state: JobState,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AdoptConflict { job } => {
                write!(f, "job {job} as the nodes report it conflicts with the matrix (unknown or taken cells)")
            }
            Self::PolicyBusy { from, to, jobs } => write!(
                f,
                "cannot change policy from {from} to {to} while {jobs} job(s) are live: scs places jobs differently; wait until the cluster is empty"
            ),
            Self::UnknownPolicy { given } => {
                let valid: Vec<&str> = Policy::ALL.iter().map(|p| p.as_str()).collect();
                write!(f, "unknown policy {given:?}: valid policies are {}", valid.join(", "))
            }
            Self::MplMax { value } => write!(
                f,
                "mpl_max must be 1 to {NODE_MAX_SLOTS} (a node's slot table holds {NODE_MAX_SLOTS} slots), not {value}"
            ),
            Self::BadName { name, why } => write!(f, "job name {name:?} cannot name a gang: {why}"),
            Self::DuplicateName { name, job } => {
                write!(f, "job name {name:?} is taken by job {job}; a gang's name must be unique on the cluster")
            }
            Self::NoRanks { name } => write!(f, "job {name:?} has no ranks; it needs at least one"),
            Self::ZeroPerNode { name } => {
                write!(f, "job {name:?} allows 0 ranks per node, so it could run nowhere; the limit must be 1 or more")
            }
            Self::TooLarge { name, cpus, gang_cpus } => {
                write!(f, "job {name:?} needs {cpus} CPUs but the cluster has {gang_cpus} gang CPUs")
            }
            Self::PerNodeLimit { name, ranks, per_node, room } => write!(
                f,
                "job {name:?} needs {ranks} CPUs at most {per_node} per node, but at that limit the cluster's nodes hold only {room}"
            ),
            Self::BuddyTooLarge { name, ranks, block, gang_cpus } => write!(
                f,
                "job {name:?} of {ranks} ranks needs a block of {block} CPUs under the buddy policy (rounded up to a power of two) but the cluster has {gang_cpus} gang CPUs"
            ),
            Self::BuddyPerNode { name, ranks, block, per_node } => write!(
                f,
                "job {name:?}: no aligned block of {block} CPUs puts its {ranks} ranks at most {per_node} per node"
            ),
            Self::ScsTooLarge { name, ranks, mpl_max, cpus, gang_cpus } => write!(
                f,
                "job {name:?} needs at least {cpus} CPUs under scs ({ranks} ranks, at most {mpl_max} per CPU) but the cluster has {gang_cpus} gang CPUs"
            ),
            Self::ScsPerNode { name, ranks, per_node, mpl_max } => write!(
                f,
                "job {name:?}: no allocation under scs puts its {ranks} ranks at most {per_node} per node and at most {mpl_max} per CPU"
            ),
            Self::NoSuchJob { job } => write!(f, "no job {job}: it never existed or has finished"),
            Self::NotRunning { job, state } => write!(f, "job {job} is {state}; only a running job can be suspended"),
            Self::NotSuspended { job, state } => write!(f, "job {job} is {state}; only a suspended job can be resumed"),
        }
    }
}

impl std::error::Error for AllocError {}
