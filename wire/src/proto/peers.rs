//! A job's peer table: every rank's "host:port", sent to each node of the
//! job once (ToAgent::JobPeers) instead of in every SpawnRank.
//!
//! The table is per node: the node's address and runs of ranks that got
//! consecutive ports (`PortRun`: `count` ranks from `rank`, ports from
//! `port`). gangd hands each rank of a node the node's next port in rank
//! order, so a node usually holds one run and the table is O(nodes), where
//! the old per-rank list was O(ranks) in each of O(ranks) messages (a job
//! over 4096 nodes × 4 CPUs: 5.4 GB, docs/scale.md). The runs say the ports
//! outright, so the node needs no copy of gangd's port rule.
//!
//! The node expands the table (`PeerTable::expand`) into the list ranks
//! have always read, "host:port" by rank joined with ',', byte for byte what
//! gangd used to send. The list goes in GANG_PEERS when it fits in one
//! environment string (`fits_in_env`: Linux's MAX_ARG_STRLEN, 128 KiB),
//! else in a file named by GANG_PEERS_FILE; `peers_from_env` is the ranks'
//! side and reads either.
//!
//! The table comes off the network: `expand` checks it before allocating
//! anything in proportion to it (ranks at most MAX_RANKS, the list at most
//! MAX_PEERS_LEN bytes, every rank in range, named exactly once, addresses
//! of a bounded length and of address characters) and says what is wrong.
//!
//! Known faults: a node's ranks whose ports wrap around gangd's port range
//! take two runs (still exact, a few bytes more); the table is still sent
//! whole to every node, O(nodes²) bytes for a job over every node.

use serde::{Deserialize, Serialize};

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
/// Longest address of a node in a table.
pub const MAX_ADDR_LEN: usize = 255;
/// Linux's MAX_ARG_STRLEN: the longest "NAME=value" string execve takes.
pub const MAX_ENV_STRING: usize = 32 * 4096;

/// Every rank's address of one job, node by node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTable {
    /// Ranks of the job: the runs name each of 0..size exactly once.
    pub size: u32,
    pub nodes: Vec<PeerNode>,
}

/// One node of a job: its address and its ranks with their ports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerNode {
    /// The host part of its ranks' addresses, as gangd writes it (an IP
    /// address; IPv6 without brackets, as GANG_PEERS always had it).
    pub addr: String,
    pub runs: Vec<PortRun>,
}

/// `count` ranks from `rank` on, with ports from `port` on: rank
/// `rank + i` listens on `port + i`. On the wire, `[rank, count, port]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRun(pub u32, pub u32, pub u16);

impl PortRun {
    fn rank(&self) -> u32 {
        self.0
    }
    fn count(&self) -> u32 {
        self.1
    }
    fn port(&self) -> u16 {
        self.2
    }
}

impl PeerTable {
    /// The table of ranks `0..ranks.len()`: `ranks[r]` is rank r's node
    /// (any key) and port; `addr` gives a node's address, called once per
    /// node. Returns the table and the key of each of its nodes, in the
    /// order of their first rank.
    pub fn from_ranks<K: Ord + Copy>(
        ranks: &[(K, u16)],
        mut addr: impl FnMut(K) -> String,
    ) -> (PeerTable, Vec<K>) {
        let mut index = std::collections::BTreeMap::new();
        let mut keys = Vec::new();
        let mut nodes: Vec<PeerNode> = Vec::new();
        for (rank, &(key, port)) in ranks.iter().enumerate() {
            let rank = rank as u32;
            let i = *index.entry(key).or_insert_with(|| {
                keys.push(key);
                nodes.push(PeerNode {
                    addr: addr(key),
                    runs: Vec::new(),
                });
                nodes.len() - 1
            });
            let runs = &mut nodes[i].runs;
            match runs.last_mut() {
                Some(run)
                    if run.rank() + run.count() == rank
                        && u32::from(run.port()) + run.count() == u32::from(port) =>
                {
                    run.1 += 1
                }
                _ => runs.push(PortRun(rank, 1, port)),
            }
        }
        let table = PeerTable {
            size: ranks.len() as u32,
            nodes,
        };
        (table, keys)
    }

    /// Checks the table and returns its runs sorted by rank, each with its
    /// node's index; `Err` says what is wrong. Allocates O(runs) only.
    fn checked_runs(&self) -> Result<Vec<(PortRun, usize)>, String> {
        if self.size > MAX_RANKS {
            return Err(format!(
                "peer table of {} ranks (at most {MAX_RANKS})",
                self.size
            ));
        }
        let mut runs = Vec::new();
        let mut len: u64 = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            check_addr(&node.addr).map_err(|e| format!("peer table node {i}: {e}"))?;
            if node.runs.is_empty() {
                return Err(format!("peer table node {i} ({}) has no rank", node.addr));
            }
            for &run in &node.runs {
                let end = u64::from(run.rank()) + u64::from(run.count());
                let last_port = u64::from(run.port()) + u64::from(run.count()) - 1;
                if run.count() == 0 || end > u64::from(self.size) {
                    return Err(format!(
                        "peer table node {i} ({}): ranks {}..{end} are not within 0..{}",
                        node.addr,
                        run.rank(),
                        self.size
                    ));
                }
                if run.port() == 0 || last_port > u64::from(u16::MAX) {
                    return Err(format!(
                        "peer table node {i} ({}): ports {}..={last_port} are not within 1..=65535",
                        node.addr,
                        run.port()
                    ));
                }
                // "addr:port," at most: a bound of the list's length.
                len += u64::from(run.count()) * (node.addr.len() as u64 + 7);
                if len > MAX_PEERS_LEN as u64 {
                    return Err(format!(
                        "peer table expands to more than {MAX_PEERS_LEN} bytes"
                    ));
                }
                runs.push((run, i));
            }
        }
        runs.sort_unstable_by_key(|(run, _)| run.rank());
        let mut next = 0u32;
        for (run, i) in &runs {
            if run.rank() < next {
                return Err(format!(
                    "peer table names rank {} twice (again on node {i})",
                    run.rank()
                ));
            }
            if run.rank() > next {
                return Err(format!("peer table has no address for rank {next}"));
            }
            next = run.rank() + run.count();
        }
        if next != self.size {
            return Err(format!("peer table has no address for rank {next}"));
        }
        Ok(runs)
    }

    /// The list ranks read: "host:port" of every rank, in rank order,
    /// joined with ','. Errors on a table that is not exactly every rank
    /// once, or too large (see the top of this file).
    pub fn expand(&self) -> Result<String, String> {
        use std::fmt::Write;
        let runs = self.checked_runs()?;
        let bound: usize = runs
            .iter()
            .map(|(run, i)| run.count() as usize * (self.nodes[*i].addr.len() + 7))
            .sum();
        let mut list = String::with_capacity(bound);
        for (run, i) in runs {
            let addr = &self.nodes[i].addr;
            for k in 0..run.count() {
                if !list.is_empty() {
                    list.push(',');
                }
                let port = u32::from(run.port()) + k;
                let _ = write!(list, "{addr}:{port}");
            }
        }
        Ok(list)
    }

    /// Rank `rank`'s port, if the table names it (the table is not checked).
    pub fn port_of(&self, rank: u32) -> Option<u16> {
        self.nodes.iter().flat_map(|n| &n.runs).find_map(|run| {
            let k = rank.checked_sub(run.rank())?;
            (k < run.count()).then(|| u16::try_from(u32::from(run.port()) + k).ok())?
        })
    }

    /// The ranks of node `node` (index in `nodes`), in order.
    pub fn ranks_of(&self, node: usize) -> Vec<u32> {
        self.nodes.get(node).map_or_else(Vec::new, |n| {
            n.runs
                .iter()
                .flat_map(|run| run.rank()..run.rank().saturating_add(run.count()))
                .collect()
        })
    }
}

/// An address a rank can be told: not empty, at most MAX_ADDR_LEN bytes,
/// of the characters of host names and IP addresses only (no ',' that would
/// split the list, no space or control character).
fn check_addr(addr: &str) -> Result<(), String> {
    if addr.is_empty() || addr.len() > MAX_ADDR_LEN {
        return Err(format!(
            "address of {} bytes (1 to {MAX_ADDR_LEN})",
            addr.len()
        ));
    }
    match addr
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || ".:-_[]%".contains(*c)))
    {
        Some(c) => Err(format!("address {addr:?} holds {c:?}")),
        None => Ok(()),
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
