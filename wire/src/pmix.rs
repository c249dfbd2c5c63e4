//! The agent ↔ PMIx server vocabulary: what the node agent and its
//! per-job child `gang-pmix-server` (pmix/src/bin/) say to each other over
//! a socketpair, in the frames of proto/frame.rs (channels `ToPmix` and
//! `FromPmix`).
//!
//! ```text
//! agent                                   gang-pmix-server (the job's user)
//!   Job{job}                        →     register_job
//!                                   ←     Ready{uri} | Failed{error} (then it exits)
//!   ForkEnv{rank}                   →
//!                                   ←     Env{rank, env, error}
//! a fence with ranks on other nodes (ids 0, 1, 2... in order):
//!                                   ←     FenceChunk{id, data}*  Fence{id, collect}
//!   FenceChunk{id, data}*  FenceDone{id, error}   →   (every node's blobs, joined in node order)
//!                                   ←     Abort{..}, Finalized{rank}
//!   EOF                             →     the server finalizes libpmix and exits
//! ```
//!
//! Fence data travels as chunks of at most [`FENCE_CHUNK`] raw bytes,
//! URL-safe base64 without padding ([`encode`]: only `A-Za-z0-9-_`, so the
//! agent can reuse a chunk as a PMI-1 KVS value). [`Assembly`] joins the
//! chunks of each fence under a bound ([`max_fence_bytes`]) on either
//! side. [`PmixJob`] is the job as the server registers it; `layout`
//! checks it (it crosses a process boundary: a bad one is an error, never
//! a panic or an allocation of its claimed size).
//!
//! Known faults: an oversized or undecodable fence is only reported at its
//! `Fence`/`FenceDone` (the chunks after the first bad one are dropped,
//! not refused one by one); nothing here says which node a blob came from
//! (the relay joins in node order).
use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::proto::{Channel, Message};

/// What one rank may contribute to a fence (gang_pmix refuses a node's
/// blob over this × its local ranks before the agent sees it).
pub const MAX_FENCE_BYTES_PER_RANK: usize = 16 << 20;
/// Raw bytes per `FenceChunk`: base64 makes 4/3 of it, so a frame stays
/// near 683 KiB, well under MAX_PAYLOAD (1 MiB).
pub const FENCE_CHUNK: usize = 512 << 10;
/// PMIX_MAX_NSLEN.
pub const MAX_NSPACE_BYTES: usize = 255;

/// The bound of one fence's data made by `ranks` ranks: a node's blob
/// (its local ranks), or a fence's joined result (the job's ranks).
pub fn max_fence_bytes(ranks: usize) -> usize {
    MAX_FENCE_BYTES_PER_RANK.saturating_mul(ranks.max(1))
}

/// A job's ranks and nodes, as the server registers it on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmixJob {
    /// The PMIx namespace (e.g. `gang.<job id>`).
    pub nspace: String,
    /// Number of ranks in the job.
    pub size: u32,
    /// Every node's hostname; a node's id is its index. `nodes[this_node]`
    /// must be the server's `--hostname`.
    pub nodes: Vec<String>,
    /// The ranks on each node, in the order of `nodes`.
    pub ranks_by_node: Vec<Vec<u32>>,
    /// Which of `nodes` this is.
    pub this_node: usize,
    /// The user the ranks run as (libpmix checks the client's claim).
    pub uid: u32,
    pub gid: u32,
}

/// A checked PmixJob: each rank once, on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// node index of each rank
    pub node_of: Vec<u32>,
    /// local rank of each rank (its place on its node)
    pub local_rank: Vec<u16>,
}

impl PmixJob {
    /// Checks the job: namespace, hostnames without `,;`, every rank on
    /// exactly one node.
    pub fn layout(&self) -> Result<Layout, String> {
        if self.nspace.is_empty()
            || self.nspace.len() > MAX_NSPACE_BYTES
            || self.nspace.contains('\0')
        {
            return Err(format!(
                "namespace {:.64?}: 1 to {MAX_NSPACE_BYTES} bytes, no NUL",
                self.nspace
            ));
        }
        if self.nodes.len() != self.ranks_by_node.len() || self.nodes.is_empty() {
            return Err(format!(
                "{} nodes but {} rank lists",
                self.nodes.len(),
                self.ranks_by_node.len()
            ));
        }
        if self.this_node >= self.nodes.len() {
            return Err(format!(
                "this node is {} of {}",
                self.this_node,
                self.nodes.len()
            ));
        }
        if let Some(h) = self
            .nodes
            .iter()
            .find(|h| h.is_empty() || h.contains([',', ';', '\0']))
        {
            return Err(format!("hostname {h:.64?}"));
        }
        // Before allocating anything of the claimed size.
        let placed: usize = self.ranks_by_node.iter().map(Vec::len).sum();
        if self.size == 0 || placed != self.size as usize {
            return Err(format!("a job of {} ranks with {placed} placed", self.size));
        }
        let mut node_of = vec![u32::MAX; placed];
        let mut local_rank = vec![0u16; placed];
        for (n, ranks) in self.ranks_by_node.iter().enumerate() {
            if ranks.len() > usize::from(u16::MAX) {
                return Err(format!("{} ranks on node {n}", ranks.len()));
            }
            for (l, &r) in ranks.iter().enumerate() {
                let Some(slot) = node_of.get_mut(r as usize) else {
                    return Err(format!("rank {r} in a job of {}", self.size));
                };
                if *slot != u32::MAX {
                    return Err(format!("rank {r} placed twice"));
                }
                *slot = n as u32;
                local_rank[r as usize] = l as u16;
            }
        }
        Ok(Layout {
            node_of,
            local_rank,
        })
    }

    /// The ranks on this node (none if `this_node` is out of range).
    pub fn local_ranks(&self) -> &[u32] {
        self.ranks_by_node
            .get(self.this_node)
            .map_or(&[], Vec::as_slice)
    }

    /// "h0,h1,..." for PMIx_generate_regex.
    pub fn node_list(&self) -> String {
        self.nodes.join(",")
    }

    /// "0,1;2,3" (each node's ranks) for PMIx_generate_ppn.
    pub fn proc_list(&self) -> String {
        let per_node: Vec<String> = self
            .ranks_by_node
            .iter()
            .map(|rs| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .collect();
        per_node.join(";")
    }
}

/// Agent → server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToPmix {
    /// The first message, once.
    Job { job: PmixJob },
    /// Answered by `Env`.
    ForkEnv { rank: u32 },
    /// Part of fence `id`'s result ([`encode`]d).
    FenceChunk { id: u64, data: String },
    /// None: the fence completes with its chunks joined; Some: it fails.
    FenceDone { id: u64, error: Option<String> },
}

/// Server → agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromPmix {
    /// The job is registered; `uri` is PMIX_SERVER_URI41's value.
    Ready {
        uri: String,
    },
    /// `rank`'s environment: the server's fork environment and
    /// gang_pmix::OMPI_ENV (empty with an error).
    Env {
        rank: u32,
        env: Vec<(String, String)>,
        error: Option<String>,
    },
    /// Part of this node's blob for fence `id` ([`encode`]d).
    FenceChunk {
        id: u64,
        data: String,
    },
    /// This node's fence `id` (0, 1, 2... in order) is complete here.
    Fence {
        id: u64,
        collect: bool,
    },
    Abort {
        rank: u32,
        status: i32,
        message: String,
    },
    Finalized {
        rank: u32,
    },
    /// Could not start or register: the server exits after this.
    Failed {
        error: String,
    },
}

impl Message for ToPmix {
    const CHANNEL: Channel = Channel::ToPmix;
    const TYPES: &'static [&'static str] = &["job", "fork_env", "fence_chunk", "fence_done"];
}

impl Message for FromPmix {
    const CHANNEL: Channel = Channel::FromPmix;
    const TYPES: &'static [&'static str] = &[
        "ready",
        "env",
        "fence_chunk",
        "fence",
        "abort",
        "finalized",
        "failed",
    ];
}

/// URL-safe base64 without padding: `A-Za-z0-9-_` only.
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The inverse of [`encode`]; anything it would not have made (padding,
/// other characters, stray trailing bits) is an error.
pub fn decode(s: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|e| format!("fence chunk: {e}"))
}

/// `data` as the `data` of successive FenceChunks (none for no data).
pub fn fence_chunks(data: &[u8]) -> impl Iterator<Item = String> + '_ {
    data.chunks(FENCE_CHUNK).map(encode)
}

/// The TCP port of a PMIx server URI:
/// `"pmix-server.123;tcp4://127.0.0.1:4567"` → 4567 (also `tcp6://[::1]:p`).
pub fn port_of_uri(uri: &str) -> Option<u16> {
    let (_, addr) = uri.split_once(';')?;
    let addr = addr
        .strip_prefix("tcp4://")
        .or_else(|| addr.strip_prefix("tcp6://"))?;
    let (host, port) = addr.rsplit_once(':')?;
    if host.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    port.parse().ok()
}

/// The fences being received in chunks, each joined under one bound.
/// Feed every chunk of a fence the caller knows (`chunk`), then take it
/// (`finish`) at its `Fence`/`FenceDone`. A fence that went over the
/// bound or had a bad chunk keeps only its error, not its bytes.
#[derive(Debug)]
pub struct Assembly {
    limit: usize,
    open: BTreeMap<u64, Result<Vec<u8>, String>>,
}

impl Assembly {
    /// Fences of at most `limit` bytes each.
    pub fn new(limit: usize) -> Assembly {
        Assembly {
            limit,
            open: BTreeMap::new(),
        }
    }

    /// Adds one chunk of fence `id`.
    pub fn chunk(&mut self, id: u64, data: &str) -> Result<(), String> {
        let limit = self.limit;
        let entry = self.open.entry(id).or_insert_with(|| Ok(Vec::new()));
        let Ok(held) = entry else { return Ok(()) };
        // A chunk's decoded size is known before decoding it.
        let add = data.len() * 3 / 4;
        let result = if held.len() + add > limit {
            Err(format!("fence {id}: over {limit} bytes"))
        } else {
            decode(data).map(|bytes| held.extend_from_slice(&bytes))
        };
        if let Err(e) = &result {
            *entry = Err(e.clone());
        }
        result
    }

    /// Fence `id`'s data (empty if no chunk came), or why it failed.
    pub fn finish(&mut self, id: u64) -> Result<Vec<u8>, String> {
        self.open.remove(&id).unwrap_or(Ok(Vec::new()))
    }

    /// Fences with chunks and no finish yet.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}
