//! The cluster's node directory: every node's id, name and address, which
//! gangd gives each agent once, at join, and then only the changes.
//!
//! Why: a job's peer table used to carry every node's address, so each
//! node of a job over the whole cluster got O(nodes) bytes, O(nodes²) in
//! all (763 MB at 4096 nodes, docs/scale.md). With the directory on every
//! node, a table names nodes by id and by runs of ids (peers.rs: a job over
//! nodes a..b with k ranks each is a few bytes), and PmiStart's layout is
//! the same runs.
//!
//! On the wire, `ToAgent::NodeDirectory { you, reset, nodes }`, `nodes`
//! being entries `[id, name, addr]`. Right after its Welcome a node gets
//! `{you: its id, reset: true, nodes: []}` and then the whole directory in
//! chunks of at most CHUNK_BYTES (`chunks`), each `{reset: false}`; as
//! nodes join or join again (a node keeps its id by name, its address may
//! change), every other node gets the new entries. gangd sends the same
//! chunks to many nodes (encoded once, net/mod.rs). A removed node's entry
//! stays: no job names a node that is not in the cluster, and one that
//! comes back replaces it.
//!
//! The agent's side (`Directory::apply`) takes the messages off the
//! network: ids below MAX_NODES (the directory is a vector indexed by id,
//! so this bounds its memory), names and addresses of bounded length and
//! characters, and it says what is wrong.
//!
//! Known faults: the directory is O(nodes²) bytes over a cluster's joins
//! (each node learns every other), spread over the joins instead of paid
//! again at every job; clusters of more than MAX_NODES nodes are refused.

use serde::{Deserialize, Serialize};

use super::types::NodeId;

/// Most nodes a directory may hold: ids are below this.
pub const MAX_NODES: u32 = 1 << 16;
/// Longest name or address in the directory.
pub const MAX_FIELD_LEN: usize = 255;
/// A chunk's entries take at most about this many bytes of JSON (far
/// under a frame's MAX_PAYLOAD, whatever the entries' lengths).
pub const CHUNK_BYTES: usize = 256 << 10;

/// One node: `[id, name, addr]`. `addr` is the host part of its ranks'
/// addresses (an IP address, IPv6 without brackets); `name` its name in
/// the cluster (the hostname PMIx gives its ranks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry(pub NodeId, pub String, pub String);

/// The agent's copy of the directory.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    me: Option<NodeId>,
    nodes: Vec<Option<(String, String)>>,
}

impl Directory {
    /// A NodeDirectory message: `you` names this node (sent first, with
    /// `reset`), `reset` forgets every entry held, then `nodes` are added
    /// or replace the entries of their ids. Nothing is applied if `Err`.
    pub fn apply(
        &mut self,
        you: Option<NodeId>,
        reset: bool,
        nodes: &[DirEntry],
    ) -> Result<(), String> {
        for DirEntry(id, name, addr) in nodes {
            check_id(*id)?;
            check_field(name).map_err(|e| format!("node directory: node {id}'s name: {e}"))?;
            check_addr(addr).map_err(|e| format!("node directory: node {id}'s address: {e}"))?;
        }
        if let Some(id) = you {
            check_id(id)?;
            self.me = Some(id);
        }
        if reset {
            self.nodes.clear();
        }
        for DirEntry(id, name, addr) in nodes {
            let i = id.0 as usize;
            if i >= self.nodes.len() {
                self.nodes.resize(i + 1, None);
            }
            self.nodes[i] = Some((name.clone(), addr.clone()));
        }
        Ok(())
    }

    /// This node's id, once gangd said it.
    pub fn me(&self) -> Option<NodeId> {
        self.me
    }

    /// Node `id`'s (name, address).
    pub fn get(&self, id: u32) -> Option<(&str, &str)> {
        match self.nodes.get(id as usize) {
            Some(Some((n, a))) => Some((n, a)),
            _ => None,
        }
    }

    /// Nodes held.
    pub fn len(&self) -> usize {
        self.nodes.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// gangd's side: `entries` cut into chunks of at most about CHUNK_BYTES
/// of JSON each, in order (none if `entries` is empty).
pub fn chunks(entries: Vec<DirEntry>) -> Vec<Vec<DirEntry>> {
    let mut out = Vec::new();
    let mut chunk = Vec::new();
    let mut bytes = 0;
    for e in entries {
        // `[id,"name","addr"],`; names and addresses need no escapes.
        let len = e.1.len() + e.2.len() + 20;
        if bytes + len > CHUNK_BYTES && !chunk.is_empty() {
            out.push(std::mem::take(&mut chunk));
            bytes = 0;
        }
        bytes += len;
        chunk.push(e);
    }
    if !chunk.is_empty() {
        out.push(chunk);
    }
    out
}

fn check_id(id: NodeId) -> Result<(), String> {
    if id.0 >= MAX_NODES {
        return Err(format!(
            "node directory: node id {id} (ids are below {MAX_NODES})"
        ));
    }
    Ok(())
}

/// A name: 1 to MAX_FIELD_LEN bytes, no control character, no ',' or
/// white space.
fn check_field(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_FIELD_LEN {
        return Err(format!("{} bytes (1 to {MAX_FIELD_LEN})", s.len()));
    }
    match s
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || *c == ',')
    {
        Some(c) => Err(format!("{s:?} holds {c:?}")),
        None => Ok(()),
    }
}

/// An address a rank can be told: not empty, at most MAX_FIELD_LEN bytes,
/// of the characters of host names and IP addresses only (no ',' that
/// would split the list, no space or control character).
pub(crate) fn check_addr(addr: &str) -> Result<(), String> {
    if addr.is_empty() || addr.len() > MAX_FIELD_LEN {
        return Err(format!(
            "address of {} bytes (1 to {MAX_FIELD_LEN})",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u32, name: &str, addr: &str) -> DirEntry {
        DirEntry(NodeId(id), name.into(), addr.into())
    }

    #[test]
    fn entries_are_added_replaced_and_reset() {
        let mut d = Directory::default();
        d.apply(Some(NodeId(1)), true, &[]).unwrap();
        assert_eq!(d.me(), Some(NodeId(1)));
        d.apply(None, false, &[e(0, "a", "10.0.0.1"), e(3, "b", "fd00::3")])
            .unwrap();
        assert_eq!(d.get(3), Some(("b", "fd00::3")));
        assert_eq!(d.get(2), None);
        assert_eq!(d.len(), 2);
        // A node that joins again from elsewhere.
        d.apply(None, false, &[e(3, "b", "10.0.0.3")]).unwrap();
        assert_eq!(d.get(3), Some(("b", "10.0.0.3")));
        d.apply(None, true, &[]).unwrap();
        assert!(d.is_empty());
        assert_eq!(d.me(), Some(NodeId(1)));
    }

    #[test]
    fn hostile_entries_are_refused_whole() {
        let mut d = Directory::default();
        for (bad, what) in [
            (e(MAX_NODES, "a", "1.2.3.4"), "ids are below"),
            (e(0, "", "1.2.3.4"), "name: 0 bytes"),
            (e(0, "a b", "1.2.3.4"), "holds ' '"),
            (e(0, "a", "1.2.3.4,5"), "holds ','"),
            (e(0, "a", &"1".repeat(MAX_FIELD_LEN + 1)), "address of 256"),
        ] {
            let err = d
                .apply(None, false, &[e(1, "ok", "1.1.1.1"), bad])
                .unwrap_err();
            assert!(err.contains(what), "{err}");
            assert!(d.is_empty(), "nothing applied");
        }
        assert!(d.apply(Some(NodeId(u32::MAX)), true, &[]).is_err());
    }

    #[test]
    fn chunks_stay_far_under_a_frame() {
        let long = "h".repeat(MAX_FIELD_LEN);
        let entries: Vec<DirEntry> = (0..5000).map(|i| e(i, &long, &long)).collect();
        let chunks = chunks(entries.clone());
        assert!(chunks.len() > 1);
        assert_eq!(chunks.concat(), entries);
        for c in &chunks {
            let json = serde_json::to_string(c).unwrap();
            assert!(json.len() <= CHUNK_BYTES + 600, "{}", json.len());
        }
        assert!(super::chunks(Vec::new()).is_empty());
    }
}
