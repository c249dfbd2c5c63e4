//! What both halves of a job's PMI service share (see the module doc of
//! `pmi`): the job's configuration, the limits every put is held to, the
//! process mapping, the failure report. The halves: `node` (the agent's,
//! serving the ranks of one node over their PMI_FD) and `cluster` (gangd's,
//! joining the nodes' barriers and KVS).

use super::wire::Request;

/// Maxima advertised by `get_maxes`: hydra's (PMI_MAXKVSLEN, PMI_MAXKEYLEN,
/// PMI_MAXVALLEN in hydra's pmiserv common header), so MPICH behaves as
/// under mpiexec. The 4.0 client then lowers its own value limit to fit its
/// 1024-byte lines.
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// Keys one rank may put; a put beyond it is refused. MPICH puts a
/// handful of keys per rank (its business card, split in VALLEN_MAX
/// pieces when longer).
pub const MAX_KEYS_PER_RANK: usize = 128;
/// Bytes of keys and values a job's KVS may hold: gangd fails a job that
/// puts more, so that neither gangd nor an agent holds more for it.
pub const MAX_KVS_BYTES: usize = 32 << 20;
/// Cost budget of the keys in one relay message (see [`entry_cost`]):
/// half of a frame's MAX_PAYLOAD, so that a message always fits one frame.
pub const MAX_CHUNK: usize = 512 << 10;
/// Malformed or out-of-order lines a rank may send before it is
/// disconnected (and its job fails): a confused client gets a few error
/// answers, a flood ends.
pub const MAX_BAD_LINES: u32 = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobConfig {
    /// The KVS name every rank gets from `get_my_kvsname`.
    pub kvsname: String,
    pub size: u32,
    /// `get_universe_size`; usually `size`.
    pub universe_size: u32,
    /// `get_appnum`; 0 for a single-executable job.
    pub appnum: i32,
    /// `cmd=set debug=`: 1 makes the MPICH client trace its PMI traffic.
    pub debug: bool,
    /// Keys present before any rank starts, e.g.
    /// `("PMI_process_mapping", process_mapping(..))`.
    pub preset: Vec<(String, String)>,
}

impl JobConfig {
    pub fn new(job: u64, size: u32) -> JobConfig {
        JobConfig {
            kvsname: format!("kvs_{job}_0"),
            size,
            universe_size: size,
            appnum: 0,
            debug: false,
            preset: Vec::new(),
        }
    }
}

/// The `PMI_process_mapping` value MPICH parses to learn which ranks share
/// a node: `(vector,(first_node,node_count,ranks_per_node),...)`, blocks in
/// rank order. `node_of_rank[r]` is any node label; nodes are numbered in
/// order of first appearance. None if there are no ranks or the value
/// would exceed VALLEN_MAX (MPICH then falls back to exchanging hostnames).
pub fn process_mapping<T: Eq + std::hash::Hash>(node_of_rank: &[T]) -> Option<String> {
    // Nodes numbered in order of first appearance; a hash map, not a scan
    // of the nodes seen (that was O(ranks × nodes): 12 ms for a job over
    // 4096 × 4 CPUs, at every placement).
    let mut labels: std::collections::HashMap<&T, usize> = std::collections::HashMap::new();
    let mut ids = Vec::with_capacity(node_of_rank.len());
    for n in node_of_rank {
        let next = labels.len();
        ids.push(*labels.entry(n).or_insert(next));
    }
    // Runs of consecutive ranks on one node: (node, ranks).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for id in ids {
        match runs.last_mut() {
            Some((node, count)) if *node == id => *count += 1,
            _ => runs.push((id, 1)),
        }
    }
    // Blocks (first, nodes, per_node): merge runs on consecutive node ids
    // with the same count.
    let mut blocks: Vec<(usize, usize, usize)> = Vec::new();
    for (node, count) in runs {
        match blocks.last_mut() {
            Some((first, nodes, per)) if *per == count && *first + *nodes == node => *nodes += 1,
            _ => blocks.push((node, 1, count)),
        }
    }
    if blocks.is_empty() {
        return None;
    }
    let mut s = String::from("(vector");
    for (first, nodes, per) in blocks {
        s.push_str(&format!(",({first},{nodes},{per})"));
    }
    s.push(')');
    (s.len() <= VALLEN_MAX).then_some(s)
}

/// Why a job's PMI service failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFailure {
    pub rank: u32,
    /// `Some` when the rank called PMI_Abort.
    pub exitcode: Option<i64>,
    pub reason: String,
}

/// An upper bound of what one key and its value add to a message as JSON
/// (every byte escaped to two, plus the field names and the rank).
pub fn entry_cost(key: &str, value: &str) -> usize {
    2 * (key.len() + value.len()) + 64
}

/// Cuts `items` into runs of at most MAX_CHUNK cost, in order; always at
/// least one run (maybe empty), the last of which rides with the barrier
/// message itself.
pub fn chunks<T>(items: Vec<T>, cost: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new()];
    let mut used = 0;
    for item in items {
        let c = cost(&item);
        if used + c > MAX_CHUNK && !out.last().expect("one run").is_empty() {
            out.push(Vec::new());
            used = 0;
        }
        used += c;
        out.last_mut().expect("one run").push(item);
    }
    out
}

/// The response name a request waits for (for error answers).
pub fn response_of(req: &Request) -> String {
    let cmd = match req {
        Request::Initack { .. } => "initack",
        Request::Init { .. } => "init",
        Request::GetMaxes => "get_maxes",
        Request::GetAppnum => "get_appnum",
        Request::GetMyKvsname => "get_my_kvsname",
        Request::GetUniverseSize => "get_universe_size",
        Request::Put { .. } => "put",
        Request::Get { .. } => "get",
        Request::BarrierIn { .. } => "barrier_in",
        Request::Finalize => "finalize",
        Request::Abort { .. } => "abort",
        Request::Unsupported { cmd } => cmd,
    };
    Request::response_name(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        assert_eq!(
            process_mapping(&["a", "a", "b", "b"]).unwrap(),
            "(vector,(0,2,2))"
        );
        assert_eq!(process_mapping(&[0, 0, 0]).unwrap(), "(vector,(0,1,3))");
        assert_eq!(
            process_mapping(&["a", "b", "a", "b"]).unwrap(),
            "(vector,(0,2,1),(0,2,1))"
        );
        assert_eq!(
            process_mapping(&[1, 1, 2]).unwrap(),
            "(vector,(0,1,2),(1,1,1))"
        );
        assert_eq!(process_mapping::<u8>(&[]), None);
    }

    #[test]
    fn chunks_fit_the_budget_and_keep_the_order() {
        assert_eq!(chunks(Vec::<u32>::new(), |_| 1), vec![Vec::<u32>::new()]);
        let items: Vec<usize> = (0..10).collect();
        let c = chunks(items.clone(), |_| MAX_CHUNK / 3);
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|run| run.len() <= 3));
        assert_eq!(c.concat(), items);
        // One item over the budget still goes, alone.
        assert_eq!(chunks(vec![1, 2], |_| MAX_CHUNK + 1).len(), 2);
    }
}
