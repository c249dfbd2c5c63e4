//! A PMIx fence carried by the PMI-1 barrier: Open MPI's ranks bootstrap
//! through a PMIx server (a child of the agent per job, gang-pmix-server),
//! whose fence joins every node's blob. Rather than a second relay, a
//! node's fence *is* a barrier of the job's PMI service: its blob goes to
//! gangd as ordinary keys, gangd's ClusterPmi joins the nodes exactly as
//! for MPICH (same bounds, same failure rules), and the barrier-out brings
//! every node's blob back. gangd needs nothing new.
//!
//! - The agent cuts the blob into values (URL-safe base64 pieces of at
//!   most VALLEN_MAX bytes, gang_wire::pmix) and calls [`NodePmi::fence`]
//!   with this node's index in the job's layout (the order every node got
//!   in PmiStart). Keys: `pmix.<epoch>.<node>.<i>` for the pieces and
//!   `pmix.<epoch>.<node>.n` for their count, so an empty blob (a fence
//!   without data) is one key. Keys are charged to the node's ranks in
//!   turn against MAX_KEYS_PER_RANK, over the whole job as gangd counts
//!   them: a node's fences carry at most MAX_KEYS_PER_RANK × local ranks
//!   keys in all (96 KiB of data per local rank); more is refused before
//!   anything goes out, and the agent fails the fence.
//! - After the barrier-out of that epoch, [`NodePmi::fence_values`] takes
//!   every node's pieces in node order out of this node's copy (they are
//!   read once: nothing of a fence stays held).
//! - A PMIx abort fails the job as PMI_Abort does ([`NodePmi::abort`]).
//!
//! One job uses one bootstrap: a PMI-1 barrier entered while a fence is
//! relayed fails the job (node.rs), and a fence while ranks wait in a
//! PMI-1 barrier is refused.

use super::job::{MAX_KEYS_PER_RANK, VALLEN_MAX};
use super::node::{Action, NodePmi};
use crate::proto::PmiPut;

/// The key of piece `piece` (None: the count) of `node`'s blob at `epoch`.
pub fn fence_key(epoch: u64, node: usize, piece: Option<usize>) -> String {
    match piece {
        Some(i) => format!("pmix.{epoch}.{node}.{i}"),
        None => format!("pmix.{epoch}.{node}.n"),
    }
}

impl NodePmi {
    /// Completed barriers (PMI-1 barriers and PMIx fences alike).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This node's PMIx fence: every local rank is in (its PMIx server
    /// says so). Ok: the epoch whose barrier-out completes it, and what
    /// to send gangd.
    pub fn fence(
        &mut self,
        node: usize,
        values: Vec<String>,
    ) -> Result<(u64, Vec<Action>), String> {
        if self.failed {
            return Err("the job's PMI service has failed".into());
        }
        if self.relayed {
            return Err(format!("barrier {} is still pending", self.epoch));
        }
        if let Some((rank, _)) = self.ranks.iter().find(|(_, r)| r.in_barrier) {
            return Err(format!("rank {rank} waits in a PMI-1 barrier"));
        }
        if let Some(bad) = values.iter().position(|v| {
            v.is_empty()
                || v.len() > VALLEN_MAX
                || v.chars().any(|c| c.is_whitespace() || c.is_control())
        }) {
            return Err(format!("piece {bad} of the fence data is not a PMI value"));
        }
        let ranks: Vec<u32> = self.ranks.keys().copied().collect();
        let room: usize = self
            .ranks
            .values()
            .map(|r| MAX_KEYS_PER_RANK.saturating_sub(r.keys))
            .sum();
        let wanted = values.len() + 1;
        if ranks.is_empty() || wanted > room {
            return Err(format!(
                "fence data of {} pieces: this node's ranks have room for {} more keys in this job",
                values.len(),
                room.saturating_sub(1)
            ));
        }
        let epoch = self.epoch;
        let count = (fence_key(epoch, node, None), values.len().to_string());
        let keyed = values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (fence_key(epoch, node, Some(i)), v));
        let mut next = 0;
        for (key, value) in keyed.chain(std::iter::once(count)) {
            // The next rank with room, in turn.
            let rank = loop {
                let r = ranks[next % ranks.len()];
                next += 1;
                if self.ranks[&r].keys < MAX_KEYS_PER_RANK {
                    break r;
                }
            };
            self.ranks.get_mut(&rank).expect("a local rank").keys += 1;
            self.kvs.insert(key.clone(), value.clone());
            self.puts.push(PmiPut { rank, key, value });
        }
        Ok((epoch, self.relay_barrier()))
    }

    /// After barrier-out `epoch`: every node's pieces, nodes 0..`nodes` in
    /// order, taken out of this node's copy.
    pub fn fence_values(&mut self, epoch: u64, nodes: usize) -> Result<Vec<String>, String> {
        if epoch >= self.epoch {
            return Err(format!("fence {epoch} is not complete"));
        }
        let mut out = Vec::new();
        for node in 0..nodes {
            let key = fence_key(epoch, node, None);
            let count: usize = self
                .kvs
                .remove(&key)
                .ok_or_else(|| format!("node {node} brought no data to fence {epoch}"))?
                .parse()
                .map_err(|_| format!("{key} is not a count"))?;
            for i in 0..count {
                let key = fence_key(epoch, node, Some(i));
                out.push(
                    self.kvs
                        .remove(&key)
                        .ok_or_else(|| format!("{key} is missing"))?,
                );
            }
        }
        Ok(out)
    }

    /// A rank called PMIx_Abort (MPI_Abort) with `status`: the job fails
    /// with that exit code, as for PMI_Abort.
    pub fn abort(&mut self, rank: u32, status: i64, message: &str) -> Vec<Action> {
        if self.failed || !self.has_rank(rank) {
            return Vec::new();
        }
        let reason = if message.is_empty() {
            format!("rank {rank} called PMIx_Abort({status})")
        } else {
            let message: String = message
                .chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect();
            format!("rank {rank} called PMIx_Abort({status}): {message}")
        };
        self.fail(rank, Some(status), reason)
    }
}
