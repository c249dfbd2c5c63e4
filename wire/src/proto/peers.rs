//! A job's peer table: which node runs each rank and on which port, sent
//! to each node of the job once (ToAgent::JobPeers) instead of a list in
//! every rank's start, and the same for every node (gangd encodes it once).
//!
//! The table (`JobMap`) names nodes by id, the addresses being in the
//! node directory every node holds (directory.rs), and by runs of ids:
//! `NodeRun [node, nodes, rank, per_node, port]` is nodes `node ..
//! node + nodes`, the j-th of them running ranks `rank + j * per_node`
//! onwards, `per_node` of them, on ports `port ..`. gangd hands each rank
//! of a node the node's next port in rank order, so a job over whole nodes
//! whose port counters agree is one run whatever its size: O(1) bytes,
//! where the per-node table before was O(nodes) per node (763 MB in all
//! for a job over 4096 × 4 CPUs, docs/scale.md) and the per-rank list
//! before that O(ranks) per rank. The runs say the ports outright, so the
//! node needs no copy of gangd's port rule.
//!
//! The node expands the table (`JobMap::expand`) into the list ranks have
//! always read, "host:port" by rank joined with ',', byte for byte what
//! gangd used to send. The list goes in GANG_PEERS when it fits in one
//! environment string (`fits_in_env`: Linux's MAX_ARG_STRLEN, 128 KiB),
//! else in a file named by GANG_PEERS_FILE; `peers_from_env` is the ranks'
//! side and reads either. PmiStart's layout (which node runs which ranks,
//! in one order every node shares) is the same table (`JobMap::layout`).
//!
//! The table comes off the network: `expand` checks it before allocating
//! anything in proportion to it (ranks at most MAX_RANKS, the list at most
//! MAX_PEERS_LEN bytes, every rank in range and named exactly once, every
//! node in the directory) and says what is wrong.
//!
//! Known faults: nodes whose port counters differ (a different history of
//! jobs) take a run each, O(nodes) bytes again, still sent once; a node's
//! ranks whose ports wrap around gangd's port range take two runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::directory::Directory;
use super::types::NodeId;

/// The ranks' environment variable holding the list.
pub const PEERS_ENV: &str = "GANG_PEERS";
/// The ranks' environment variable naming a file holding the list, when
/// it does not fit in the environment.
pub const PEERS_FILE_ENV: &str = "GANG_PEERS_FILE";
/// Most ranks a table may have (a node refuses more).
pub const MAX_RANKS: u32 = 1 << 20;
/// Most bytes of an expanded list (a node refuses a table that would
/// expand to more).
pub const MAX_PEERS_LEN: usize = 32 << 20;
/// Linux's MAX_ARG_STRLEN: the longest "NAME=value" string execve takes.
pub const MAX_ENV_STRING: usize = 32 * 4096;

/// Where every rank of one job runs, by runs of nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMap {
    /// Ranks of the job: the runs name each of 0..size exactly once.
    pub size: u32,
    pub runs: Vec<NodeRun>,
}

/// `[node, nodes, rank, per_node, port]`: nodes `node + j` for j in
/// `0..nodes`, node `node + j` running ranks `rank + j * per_node + i` on
/// port `port + i`, for i in `0..per_node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRun(pub u32, pub u32, pub u32, pub u32, pub u16);

impl NodeRun {
    fn node(&self) -> u32 {
        self.0
    }
    fn nodes(&self) -> u32 {
        self.1
    }
    fn rank(&self) -> u32 {
        self.2
    }
    fn per_node(&self) -> u32 {
        self.3
    }
    fn port(&self) -> u16 {
        self.4
    }
    /// Ranks it covers (u64: a hostile run may overflow u32).
    fn ranks(&self) -> u64 {
        u64::from(self.nodes()) * u64::from(self.per_node())
    }
    /// Its j-th node's ranks and ports, (rank, port) in rank order.
    fn of_node(&self, j: u32) -> impl Iterator<Item = (u32, u16)> + '_ {
        let first = self.rank() + j * self.per_node();
        (0..self.per_node()).map(move |i| (first + i, (u32::from(self.port()) + i) as u16))
    }
}

/// Builds a map rank by rank, in rank order (`JobMap::from_ranks`).
struct Builder {
    runs: Vec<NodeRun>,
    /// The run being built and how many ranks its last node has so far.
    cur: Option<(NodeRun, u32)>,
}

impl Builder {
    fn push(&mut self, node: u32, rank: u32, port: u16) {
        if let Some((run, filled)) = &mut self.cur {
            let last = run.node() + run.nodes() - 1;
            let next_port = u32::from(run.port()) + *filled;
            if node == last && u32::from(port) == next_port {
                if run.nodes() == 1 {
                    run.3 += 1;
                    *filled += 1;
                    return;
                }
                if *filled < run.per_node() {
                    *filled += 1;
                    return;
                }
            }
            if *filled == run.per_node() && last.checked_add(1) == Some(node) && port == run.port()
            {
                run.1 += 1;
                *filled = 1;
                return;
            }
        }
        self.finish();
        self.cur = Some((NodeRun(node, 1, rank, 1, port), 1));
    }

    /// Ends the run being built; a last node with fewer ranks than the
    /// others becomes a run of its own.
    fn finish(&mut self) {
        let Some((run, filled)) = self.cur.take() else {
            return;
        };
        if filled < run.per_node() {
            let last = run.nodes() - 1;
            self.runs.push(NodeRun(run.0, last, run.2, run.3, run.4));
            let rank = run.rank() + last * run.per_node();
            self.runs
                .push(NodeRun(run.node() + last, 1, rank, filled, run.port()));
        } else {
            self.runs.push(run);
        }
    }
}

impl JobMap {
    /// The map of ranks `0..ranks.len()`: `ranks[r]` is rank r's node and
    /// port.
    pub fn from_ranks(ranks: &[(NodeId, u16)]) -> JobMap {
        let mut b = Builder {
            runs: Vec::new(),
            cur: None,
        };
        for (rank, &(node, port)) in ranks.iter().enumerate() {
            b.push(node.0, rank as u32, port);
        }
        b.finish();
        JobMap {
            size: ranks.len() as u32,
            runs: b.runs,
        }
    }

    /// Checks the map against the directory and returns its runs sorted
    /// by rank; `Err` says what is wrong. Allocates O(runs) only.
    fn checked_runs(&self, dir: &Directory) -> Result<Vec<NodeRun>, String> {
        if self.size > MAX_RANKS {
            return Err(format!(
                "peer table of {} ranks (at most {MAX_RANKS})",
                self.size
            ));
        }
        let mut covered: u64 = 0;
        for (i, run) in self.runs.iter().enumerate() {
            let end = u64::from(run.rank()) + run.ranks();
            if run.ranks() == 0 || end > u64::from(self.size) {
                return Err(format!(
                    "peer table run {i}: ranks {}..{end} are not within 0..{}",
                    run.rank(),
                    self.size
                ));
            }
            let last_port = u64::from(run.port()) + u64::from(run.per_node()) - 1;
            if run.port() == 0 || last_port > u64::from(u16::MAX) {
                return Err(format!(
                    "peer table run {i}: ports {}..={last_port} are not within 1..=65535",
                    run.port()
                ));
            }
            // Bounds the work below by the job's size: runs that overlap
            // are refused once sorted.
            covered += run.ranks();
            if covered > u64::from(self.size) {
                return Err(format!(
                    "peer table names more than its {} ranks",
                    self.size
                ));
            }
        }
        let mut len: u64 = 0;
        for (i, run) in self.runs.iter().enumerate() {
            for j in 0..run.nodes() {
                let node = u64::from(run.node()) + u64::from(j);
                let addr = u32::try_from(node)
                    .ok()
                    .and_then(|n| dir.get(n))
                    .map(|(_, a)| a)
                    .ok_or_else(|| {
                        format!("peer table run {i}: node {node} is not in the node directory")
                    })?;
                // "addr:port," at most: a bound of the list's length.
                len += u64::from(run.per_node()) * (addr.len() as u64 + 7);
                if len > MAX_PEERS_LEN as u64 {
                    return Err(format!(
                        "peer table expands to more than {MAX_PEERS_LEN} bytes"
                    ));
                }
            }
        }
        let mut runs = self.runs.clone();
        runs.sort_unstable_by_key(NodeRun::rank);
        let mut next = 0u32;
        for run in &runs {
            if run.rank() < next {
                return Err(format!("peer table names rank {} twice", run.rank()));
            }
            if run.rank() > next {
                return Err(format!("peer table has no node for rank {next}"));
            }
            next = run.rank() + run.nodes() * run.per_node();
        }
        if next != self.size {
            return Err(format!("peer table has no node for rank {next}"));
        }
        Ok(runs)
    }

    /// The list ranks read: "host:port" of every rank, in rank order,
    /// joined with ','. Errors on a map that is not exactly every rank
    /// once, names a node the directory lacks, or is too large (see the
    /// top of this file).
    pub fn expand(&self, dir: &Directory) -> Result<String, String> {
        use std::fmt::Write;
        let runs = self.checked_runs(dir)?;
        let mut list = String::new();
        for run in runs {
            for j in 0..run.nodes() {
                let (_, addr) = dir.get(run.node() + j).expect("checked");
                for (_, port) in run.of_node(j) {
                    if !list.is_empty() {
                        list.push(',');
                    }
                    let _ = write!(list, "{addr}:{port}");
                }
            }
        }
        Ok(list)
    }

    /// Node `node`'s ranks and their ports, in rank order (the map is
    /// checked by `expand` first).
    pub fn ranks_of(&self, node: NodeId) -> Vec<(u32, u16)> {
        let mut out: Vec<(u32, u16)> = self
            .runs
            .iter()
            .filter_map(|run| {
                let j = node.0.checked_sub(run.node())?;
                (j < run.nodes()).then(|| run.of_node(j).collect::<Vec<_>>())
            })
            .flatten()
            .collect();
        out.sort_unstable();
        out
    }

    /// Every node of the job with its ranks, nodes by id and ranks in
    /// order, by name from the directory: PmiStart's layout, the order
    /// gangd's ClusterPmi numbers the nodes in (pmi/cluster.rs).
    pub fn layout(&self, dir: &Directory) -> Result<Vec<(String, Vec<u32>)>, String> {
        let runs = self.checked_runs(dir)?;
        let mut by_node: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for run in runs {
            for j in 0..run.nodes() {
                by_node
                    .entry(run.node() + j)
                    .or_default()
                    .extend(run.of_node(j).map(|(r, _)| r));
            }
        }
        Ok(by_node
            .into_iter()
            .map(|(n, mut ranks)| {
                ranks.sort_unstable();
                (dir.get(n).expect("checked").0.to_string(), ranks)
            })
            .collect())
    }
}

/// Whether `list` fits in the environment as GANG_PEERS (one execve
/// string, "GANG_PEERS=<list>" and its NUL, at most MAX_ARG_STRLEN).
pub fn fits_in_env(list: &str) -> bool {
    PEERS_ENV.len() + 1 + list.len() < MAX_ENV_STRING
}

/// Splits a list as ranks read it: entries separated by ',' or white
/// space (a file's last newline, a list set by hand); "" is no peer.
pub fn split_list(list: &str) -> Vec<String> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The ranks' side: every rank's "host:port" from GANG_PEERS, or else from
/// the file GANG_PEERS_FILE names. Errors name what is missing or
/// unreadable.
pub fn peers_from_env() -> Result<Vec<String>, String> {
    if let Ok(list) = std::env::var(PEERS_ENV) {
        return Ok(split_list(&list));
    }
    let Ok(path) = std::env::var(PEERS_FILE_ENV) else {
        return Err(format!("neither {PEERS_ENV} nor {PEERS_FILE_ENV} is set"));
    };
    read_list(std::path::Path::new(&path))
        .map(|list| split_list(&list))
        .map_err(|e| format!("{PEERS_FILE_ENV} {path}: {e}"))
}

/// Reads a list file, refusing one longer than MAX_PEERS_LEN.
fn read_list(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut list = String::new();
    std::fs::File::open(path)?
        .take(MAX_PEERS_LEN as u64 + 2)
        .read_to_string(&mut list)?;
    if list.len() > MAX_PEERS_LEN + 1 {
        return Err(std::io::Error::other(format!(
            "longer than {MAX_PEERS_LEN} bytes"
        )));
    }
    Ok(list)
}
