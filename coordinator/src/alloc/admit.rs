//! Admission: a job is accepted only if it fits the empty cluster under the
//! policy. The test is the policy's own chooser on an all-free slot, so a
//! job is refused exactly when it could never run, and an accepted job is
//! certain to fit a new slot.

use super::{policy, scs, AllocError, Allocator, JobSpec, Need, Policy};

impl Allocator {
    pub(super) fn check(&self, spec: &JobSpec) -> Result<Need, AllocError> {
        let name = spec.name.clone();
        check_name(&name)?;
        if let Some(job) = self.find(&name) {
            return Err(AllocError::DuplicateName { name, job });
        }
        if spec.ranks == 0 {
            return Err(AllocError::NoRanks { name });
        }
        if spec.per_node == Some(0) {
            return Err(AllocError::ZeroPerNode { name });
        }
        let cluster = self.matrix.cluster();
        let ranks = spec.ranks as usize;
        let gang_cpus = cluster.nr_columns();
        let node_cpus: Vec<usize> = cluster.nodes().iter().map(|n| n.gang_cpus.len()).collect();
        let cap = spec.per_node.map_or(usize::MAX, |k| k as usize);
        let room: usize = node_cpus.iter().map(|&n| n.min(cap)).sum();
        let per_node = spec.per_node.unwrap_or(0);
        let policy = self.settings.policy;
        if policy == Policy::Scs {
            let mpl_max = self.settings.mpl_max;
            return match scs::initial_allocation(
                ranks,
                spec.per_node.map(|k| k as usize),
                mpl_max,
                &node_cpus,
            ) {
                Some((cells, cap)) => Ok(Need { cells, cap }),
                None if ranks.div_ceil(mpl_max) > gang_cpus => Err(AllocError::ScsTooLarge {
                    name,
                    ranks: spec.ranks,
                    mpl_max,
                    cpus: ranks.div_ceil(mpl_max),
                    gang_cpus,
                }),
                None => Err(AllocError::ScsPerNode {
                    name,
                    ranks: spec.ranks,
                    per_node,
                    mpl_max,
                }),
            };
        }
        let need = Need { cells: ranks, cap };
        if self.choose(&vec![true; gang_cpus], ranks, need).is_some() {
            return Ok(need);
        }
        let block = policy::buddy_block(ranks);
        Err(match policy {
            Policy::Buddy if block > gang_cpus => AllocError::BuddyTooLarge {
                name,
                ranks: spec.ranks,
                block,
                gang_cpus,
            },
            _ if ranks > gang_cpus => AllocError::TooLarge {
                name,
                cpus: ranks,
                gang_cpus,
            },
            _ if ranks > room => AllocError::PerNodeLimit {
                name,
                ranks: spec.ranks,
                per_node,
                room,
            },
            _ => AllocError::BuddyPerNode {
                name,
                ranks: spec.ranks,
                block,
                per_node,
            },
        })
    }
}

/// The name becomes a cgroup directory below the gang root on every node
/// and travels in line-based text protocols.
fn check_name(name: &str) -> Result<(), AllocError> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "." || name == ".." {
        "it names a directory itself"
    } else if name.len() > 255 {
        "it is longer than 255 bytes"
    } else if name.contains('/') {
        "it contains '/'"
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "it contains white space or control characters"
    } else {
        return Ok(());
    };
    Err(AllocError::BadName {
        name: name.to_string(),
        why,
    })
}
