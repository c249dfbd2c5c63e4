//! One job's PMI service in gangd: joins the barriers and KVS of the nodes
//! that run the job's ranks (`node` is the agents' half). Driven by the
//! agents' messages; returns the [`Action`]s to carry out. Pure, tested on
//! the host.
//!
//! Trust: an agent is authenticated (TLS, its name from its certificate),
//! but a node may only speak for the ranks placed on it. A message is
//! refused (Err, logged by the caller, the job unaffected) when the node
//! runs no rank of the job, names a rank placed elsewhere, does not list
//! exactly its ranks in a barrier, enters a barrier other than the current
//! one or twice, or relays a put gangd would not accept from a rank: a key
//! or value too long or not one token (no whitespace or control
//! character: values are echoed into other ranks' lines), more than
//! MAX_KEYS_PER_RANK keys of one rank. Write once across nodes: the first
//! node to relay a key owns it; a later put of it is dropped and logged.
//!
//! A barrier completes when every node with ranks of the job has entered:
//! each node then gets PmiBarrierOut with every key put since the previous
//! barrier (preceded by PmiEntries when they do not fit one message; a
//! node's puts likewise come in PmiPuts ahead of its PmiBarrierIn). The
//! job fails (reported once by [`Action::Failed`]) when a node reports
//! PmiFailed for one of its ranks, enters a barrier after some rank
//! finalized or a rank finalizes while a node waits in a barrier (it could
//! never complete), or the KVS grows past
//! MAX_KVS_BYTES.

use std::collections::{BTreeMap, BTreeSet};

use super::job::{
    chunks, entry_cost, process_mapping, JobConfig, JobFailure, KEYLEN_MAX, MAX_KEYS_PER_RANK,
    MAX_KVS_BYTES, VALLEN_MAX,
};
use crate::proto::{JobId, JobMap, NodeId, PmiPut, ToAgent};

/// Longest failure reason kept from an agent (it reaches the front end).
pub const MAX_REASON: usize = 512;

/// What gangd must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    ToNode(NodeId, ToAgent),
    /// The job cannot go on; reported once. Kill its ranks.
    Failed(JobFailure),
    /// Every rank finalized; reported once.
    AllFinalized,
}

#[derive(Debug)]
pub struct ClusterPmi {
    job: JobId,
    config: JobConfig,
    rank_node: Vec<NodeId>,
    /// Each node's ranks, in rank order.
    nodes: BTreeMap<NodeId, Vec<u32>>,
    /// Keys written so far (presets included), for write-once.
    keys: BTreeSet<String>,
    keys_of_rank: Vec<usize>,
    epoch: u64,
    entered: BTreeSet<NodeId>,
    /// Keys put since the previous barrier, for every node.
    pending: Vec<(String, String)>,
    /// Bytes of every key and value put so far.
    kvs_bytes: usize,
    finalized: Vec<bool>,
    failure: Option<JobFailure>,
    all_finalized: bool,
}

impl ClusterPmi {
    /// `rank_node[r]`: the node rank r runs on. The KVS has the job's
    /// PMI_process_mapping from the start.
    pub fn new(job: JobId, rank_node: Vec<NodeId>) -> ClusterPmi {
        let size = rank_node.len() as u32;
        let mut config = JobConfig::new(job.0, size);
        if let Some(mapping) = process_mapping(&rank_node) {
            config.preset.push(("PMI_process_mapping".into(), mapping));
        }
        let mut nodes: BTreeMap<NodeId, Vec<u32>> = BTreeMap::new();
        for (rank, &n) in rank_node.iter().enumerate() {
            nodes.entry(n).or_default().push(rank as u32);
        }
        ClusterPmi {
            job,
            keys: config.preset.iter().map(|(k, _)| k.clone()).collect(),
            config,
            keys_of_rank: vec![0; rank_node.len()],
            finalized: vec![false; rank_node.len()],
            rank_node,
            nodes,
            epoch: 0,
            entered: BTreeSet::new(),
            pending: Vec::new(),
            kvs_bytes: 0,
            failure: None,
            all_finalized: false,
        }
    }

    pub fn config(&self) -> &JobConfig {
        &self.config
    }

    pub fn failure(&self) -> Option<&JobFailure> {
        self.failure.as_ref()
    }

    /// The job's nodes, by id.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.keys().copied()
    }

    /// Completed barriers.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The PmiStart every node of the job gets before its StartJob: one
    /// message for all of them (gangd encodes it once). `map` is the
    /// job's JobPeers map (proto::peers): a node finds its ranks in it by
    /// its own id, and its `layout` lists the nodes by id as `self.nodes`
    /// does, so every node numbers the job's nodes as this service does.
    pub fn start(&self, map: &JobMap) -> ToAgent {
        ToAgent::PmiStart {
            job: self.job,
            kvsname: self.config.kvsname.clone(),
            preset: self.config.preset.clone(),
            map: map.clone(),
        }
    }

    /// The node's ranks, or why it may not speak for this job.
    fn ranks_of(&self, node: NodeId) -> Result<&[u32], String> {
        self.nodes
            .get(&node)
            .map(Vec::as_slice)
            .ok_or_else(|| format!("node {node} runs no rank of job {}", self.job))
    }

    fn check_rank(&self, node: NodeId, rank: u32) -> Result<(), String> {
        self.ranks_of(node)?;
        match self.rank_node.get(rank as usize) {
            Some(&n) if n == node => Ok(()),
            _ => Err(format!(
                "node {node} spoke for rank {rank} of job {}, not placed on it",
                self.job
            )),
        }
    }

    /// PmiBarrierIn from `node`.
    pub fn on_barrier_in(
        &mut self,
        node: NodeId,
        epoch: u64,
        ranks: &[u32],
        puts: Vec<PmiPut>,
    ) -> Result<Vec<Action>, String> {
        let mine = self.ranks_of(node)?;
        if ranks != mine {
            return Err(format!(
                "node {node} entered a barrier of job {} for ranks {ranks:?}; its ranks are {mine:?}",
                self.job
            ));
        }
        if self.failure.is_some() {
            return Ok(Vec::new());
        }
        if epoch != self.epoch || self.entered.contains(&node) {
            return Err(format!(
                "node {node} entered barrier {epoch} of job {} (current: {}, entered already: {})",
                self.job,
                self.epoch,
                self.entered.contains(&node)
            ));
        }
        let failed = self.take_puts(node, puts)?;
        if !failed.is_empty() {
            return Ok(failed);
        }
        if let Some(done) = self.finalized.iter().position(|f| *f) {
            let rank = ranks.first().copied().unwrap_or_default();
            let reason = format!(
                "node {node} entered a PMI barrier after rank {done} finalized: it can never complete"
            );
            return Ok(self.fail(rank, None, reason));
        }
        self.entered.insert(node);
        if self.entered.len() < self.nodes.len() {
            return Ok(Vec::new());
        }
        let epoch = self.epoch;
        self.epoch += 1;
        self.entered.clear();
        // Each message fits a frame: the keys go in runs, the last with
        // the barrier-out.
        let mut runs = chunks(std::mem::take(&mut self.pending), |(k, v)| entry_cost(k, v));
        let last = runs.pop().expect("at least one run");
        let mut out = Vec::new();
        for &n in self.nodes.keys() {
            for entries in &runs {
                out.push(Action::ToNode(
                    n,
                    ToAgent::PmiEntries {
                        job: self.job,
                        entries: entries.clone(),
                    },
                ));
            }
            out.push(Action::ToNode(
                n,
                ToAgent::PmiBarrierOut {
                    job: self.job,
                    epoch,
                    entries: last.clone(),
                },
            ));
        }
        Ok(out)
    }

    /// PmiPuts from `node`: puts ahead of its PmiBarrierIn.
    pub fn on_puts(&mut self, node: NodeId, puts: Vec<PmiPut>) -> Result<Vec<Action>, String> {
        self.ranks_of(node)?;
        if self.failure.is_some() {
            return Ok(Vec::new());
        }
        self.take_puts(node, puts)
    }

    /// Checks `node`'s puts (all refused if one is bad), keeps the new
    /// keys for the next barrier-out; fails the job past MAX_KVS_BYTES.
    fn take_puts(&mut self, node: NodeId, puts: Vec<PmiPut>) -> Result<Vec<Action>, String> {
        self.check_puts(node, &puts)?;
        let mut last_rank = None;
        for p in puts {
            if !self.keys.insert(p.key.clone()) {
                log::warn!(
                    "job {}: rank {} put {} already written by another rank: dropped",
                    self.job,
                    p.rank,
                    p.key
                );
                continue;
            }
            self.keys_of_rank[p.rank as usize] += 1;
            self.kvs_bytes += p.key.len() + p.value.len();
            last_rank = Some(p.rank);
            self.pending.push((p.key, p.value));
        }
        match last_rank {
            Some(rank) if self.kvs_bytes > MAX_KVS_BYTES => {
                let reason = format!("the job's PMI KVS holds more than {MAX_KVS_BYTES} bytes");
                Ok(self.fail(rank, None, reason))
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Every put is of one of the node's ranks and within the limits; the
    /// whole message is refused otherwise.
    fn check_puts(&self, node: NodeId, puts: &[PmiPut]) -> Result<(), String> {
        let mut count: BTreeMap<u32, usize> = BTreeMap::new();
        for p in puts {
            self.check_rank(node, p.rank)?;
            if p.key.is_empty() || p.key.len() > KEYLEN_MAX || !one_token(&p.key) {
                return Err(format!("node {node}: rank {}: bad key {:?}", p.rank, p.key));
            }
            if p.value.is_empty() || p.value.len() > VALLEN_MAX || !one_token(&p.value) {
                return Err(format!(
                    "node {node}: rank {}: bad value of {}",
                    p.rank, p.key
                ));
            }
            let c = count
                .entry(p.rank)
                .or_insert(self.keys_of_rank[p.rank as usize]);
            *c += 1;
            if *c > MAX_KEYS_PER_RANK {
                return Err(format!(
                    "node {node}: rank {} put more than {MAX_KEYS_PER_RANK} keys",
                    p.rank
                ));
            }
        }
        Ok(())
    }

    /// PmiFinalized from `node`.
    pub fn on_finalized(&mut self, node: NodeId, rank: u32) -> Result<Vec<Action>, String> {
        self.check_rank(node, rank)?;
        if self.failure.is_some() {
            return Ok(Vec::new());
        }
        if let Some(&waiting) = self.entered.first() {
            let reason = format!(
                "rank {rank} finalized while node {waiting} waits in a PMI barrier: it can never complete"
            );
            return Ok(self.fail(rank, None, reason));
        }
        self.finalized[rank as usize] = true;
        if !self.all_finalized && self.finalized.iter().all(|f| *f) {
            self.all_finalized = true;
            return Ok(vec![Action::AllFinalized]);
        }
        Ok(Vec::new())
    }

    /// PmiFailed from `node`.
    pub fn on_failed(
        &mut self,
        node: NodeId,
        rank: u32,
        exitcode: Option<i64>,
        reason: &str,
    ) -> Result<Vec<Action>, String> {
        self.check_rank(node, rank)?;
        if self.failure.is_some() {
            return Ok(Vec::new());
        }
        // At most MAX_REASON characters, on one line.
        let reason: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_REASON)
            .collect();
        Ok(self.fail(rank, exitcode, reason))
    }

    fn fail(&mut self, rank: u32, exitcode: Option<i64>, reason: String) -> Vec<Action> {
        let failure = JobFailure {
            rank,
            exitcode,
            reason,
        };
        self.failure = Some(failure.clone());
        vec![Action::Failed(failure)]
    }
}

/// Usable as one value on a PMI line.
fn one_token(s: &str) -> bool {
    !s.chars().any(|c| c.is_whitespace() || c.is_control())
}
