//! The Ousterhout matrix of the cluster.
//!
//! Rows are slots (time), columns are the gang CPUs of every node in
//! (node, cpu) order (space), and a cell holds at most one job. Each node's
//! columns are what its scx_gang slot table holds, so a row read node by
//! node is the table every node installs for that slot.
//!
//! The matrix only records; where a job goes is decided by [`crate::alloc`],
//! which is the only code that changes it.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

/// The most CPUs a node's slot table covers (GANG_MAX_CPUS in bpf/intf.h).
pub const NODE_MAX_CPUS: u32 = 256;

/// The most slots a node's slot table holds (GANG_MAX_SLOTS in bpf/intf.h).
/// Every node holds every slot of the matrix, so the matrix never has more.
pub const NODE_MAX_SLOTS: usize = 16;

/// A node's identifier, chosen by whoever describes the cluster. Columns are
/// ordered by it.
pub type NodeId = u32;

// A job's identifier is the wire's: ids are handed out in submission
// order, so comparing two ids compares their submission times.
use gang_wire::proto::JobId;

/// One column of the matrix: a CPU of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cell {
    pub node: NodeId,
    pub cpu: u32,
}

/// A node as it reports itself: its CPU count and the housekeeping CPUs
/// that are never given to a gang.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub id: NodeId,
    pub name: String,
    pub nr_cpus: u32,
    #[serde(default)]
    pub housekeeping: Vec<u32>,
}

/// A node of the cluster with the CPUs gangs may be given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub nr_cpus: u32,
    /// Ascending; the node's columns of the matrix, in this order.
    pub gang_cpus: Vec<u32>,
}

/// Why a cluster description was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterError {
    DuplicateId {
        id: NodeId,
    },
    DuplicateName {
        name: String,
    },
    EmptyName {
        id: NodeId,
    },
    TooManyCpus {
        name: String,
        nr_cpus: u32,
    },
    NoSuchCpu {
        name: String,
        cpu: u32,
        nr_cpus: u32,
    },
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicateId { id } => {
                write!(f, "node id {id} is given twice; node ids order the matrix columns and must be unique")
            }
            Self::DuplicateName { name } => write!(
                f,
                "node name {name:?} is given twice; nodes are addressed by name"
            ),
            Self::EmptyName { id } => write!(f, "node {id} has an empty name"),
            Self::TooManyCpus { name, nr_cpus } => {
                write!(f, "node {name:?} reports {nr_cpus} CPUs but a node's slot table covers at most {NODE_MAX_CPUS}")
            }
            Self::NoSuchCpu { name, cpu, nr_cpus } => write!(
                f,
                "node {name:?} names housekeeping CPU {cpu} but has only CPUs 0-{}",
                nr_cpus.saturating_sub(1)
            ),
        }
    }
}

impl std::error::Error for ClusterError {}

/// The nodes and the linearised column list. Fixed once built: a node that
/// joins or leaves means a new cluster and a new placement of every job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// By ascending id.
    nodes: Vec<Node>,
    /// Every (node, cpu) column, in order.
    columns: Vec<Cell>,
    /// columns[col] belongs to nodes[col_node[col]].
    col_node: Vec<usize>,
    /// nodes[i]'s columns are first_col[i]..first_col[i + 1].
    first_col: Vec<usize>,
    /// The most columns one node has.
    max_node_columns: usize,
}

impl Cluster {
    /// Nodes n0, n1, ... with `shape[i]` CPUs each and no housekeeping CPU
    /// (simulations and tests).
    pub fn from_shape(shape: &[u32]) -> Result<Self, ClusterError> {
        Self::new(
            shape
                .iter()
                .enumerate()
                .map(|(i, &n)| NodeSpec {
                    id: i as u32,
                    name: format!("n{i}"),
                    nr_cpus: n,
                    housekeeping: vec![],
                })
                .collect(),
        )
    }

    /// Checks the description and orders the nodes by id. A node whose CPUs
    /// are all housekeeping is kept; it just has no columns.
    pub fn new(specs: Vec<NodeSpec>) -> Result<Self, ClusterError> {
        let mut specs = specs;
        specs.sort_by_key(|s| s.id);
        let mut names = BTreeSet::new();
        let mut nodes = Vec::with_capacity(specs.len());
        for (i, s) in specs.into_iter().enumerate() {
            if i > 0 && nodes.last().is_some_and(|n: &Node| n.id == s.id) {
                return Err(ClusterError::DuplicateId { id: s.id });
            }
            if s.name.is_empty() {
                return Err(ClusterError::EmptyName { id: s.id });
            }
            if !names.insert(s.name.clone()) {
                return Err(ClusterError::DuplicateName { name: s.name });
            }
            if s.nr_cpus > NODE_MAX_CPUS {
                return Err(ClusterError::TooManyCpus {
                    name: s.name,
                    nr_cpus: s.nr_cpus,
                });
            }
            if let Some(&cpu) = s.housekeeping.iter().find(|&&c| c >= s.nr_cpus) {
                return Err(ClusterError::NoSuchCpu {
                    name: s.name,
                    cpu,
                    nr_cpus: s.nr_cpus,
                });
            }
            let gang_cpus = (0..s.nr_cpus)
                .filter(|c| !s.housekeeping.contains(c))
                .collect();
            nodes.push(Node {
                id: s.id,
                name: s.name,
                nr_cpus: s.nr_cpus,
                gang_cpus,
            });
        }
        let mut columns = Vec::new();
        let mut col_node = Vec::new();
        let mut first_col = Vec::with_capacity(nodes.len() + 1);
        for (i, n) in nodes.iter().enumerate() {
            first_col.push(columns.len());
            for &cpu in &n.gang_cpus {
                columns.push(Cell { node: n.id, cpu });
                col_node.push(i);
            }
        }
        first_col.push(columns.len());
        let max_node_columns = nodes.iter().map(|n| n.gang_cpus.len()).max().unwrap_or(0);
        Ok(Self {
            nodes,
            columns,
            col_node,
            first_col,
            max_node_columns,
        })
    }

    /// By ascending id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Every column in (node, cpu) order.
    pub fn columns(&self) -> &[Cell] {
        &self.columns
    }

    /// The number of gang CPUs in the cluster.
    pub fn nr_columns(&self) -> usize {
        self.columns.len()
    }

    /// The column index of `cell`, if it is a gang CPU of the cluster.
    pub fn column(&self, cell: Cell) -> Option<usize> {
        self.columns.binary_search(&cell).ok()
    }

    pub fn cell(&self, col: usize) -> Cell {
        self.columns[col]
    }

    /// The index (in [`Cluster::nodes`]) of the node holding column `col`.
    pub(crate) fn node_of(&self, col: usize) -> usize {
        self.col_node[col]
    }

    /// The most columns (gang CPUs) one node has.
    pub(crate) fn max_node_columns(&self) -> usize {
        self.max_node_columns
    }

    /// The columns of nodes()[node].
    pub(crate) fn node_columns(&self, node: usize) -> Range<usize> {
        self.first_col[node]..self.first_col[node + 1]
    }
}

/// What a cell of the matrix holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub job: JobId,
    /// An extra placement of a job that has its home in another slot (a
    /// "multiple task"): it only uses cells that would otherwise be idle and
    /// is the first thing given up when room is needed.
    pub fill: bool,
}

/// The slots × columns grid. Read-only outside this crate so that only the
/// allocator, which keeps the jobs' records in step, changes it.
///
/// Besides the cells it keeps, per slot, how many cells are free and how
/// many hold a home placement, and the list of fill placements written
/// since they were last dropped: the allocator asks these after every
/// call, and counting or scanning 16,384 columns × slots for them each
/// time was most of an allocation decision at 4096 nodes (issue 14).
#[derive(Clone, Debug)]
pub struct Matrix {
    cluster: Cluster,
    rows: Vec<Vec<Option<Entry>>>,
    /// Per slot.
    counts: Vec<RowCounts>,
    /// (slot, columns) of every fill placement since the last
    /// `clear_fill`; some may have been cleared since by `clear_job`.
    fills: Vec<(usize, Vec<usize>)>,
}

#[derive(Clone, Copy, Debug, Default)]
struct RowCounts {
    free: usize,
    homes: usize,
}

/// Two matrices are equal when their cells are (the counts follow from
/// them; the fill list is bookkeeping).
impl PartialEq for Matrix {
    fn eq(&self, other: &Self) -> bool {
        self.cluster == other.cluster && self.rows == other.rows
    }
}

impl Eq for Matrix {}

impl Matrix {
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster,
            rows: Vec::new(),
            counts: Vec::new(),
            fills: Vec::new(),
        }
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn nr_slots(&self) -> usize {
        self.rows.len()
    }

    /// `rows()[slot][col]`: who holds column `col` in `slot`.
    pub fn rows(&self) -> &[Vec<Option<Entry>>] {
        &self.rows
    }

    pub fn get(&self, slot: usize, col: usize) -> Option<Entry> {
        self.rows.get(slot)?.get(col).copied().flatten()
    }

    /// Slots where `job` has cells (home or fill), ascending.
    pub fn slots_of(&self, job: JobId) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&s| self.rows[s].iter().flatten().any(|e| e.job == job))
            .collect()
    }

    /// free[col]: nobody holds the cell in `slot`.
    pub(crate) fn free(&self, slot: usize) -> Vec<bool> {
        self.rows[slot].iter().map(Option::is_none).collect()
    }

    /// How many cells of `slot` nobody holds; O(1).
    pub(crate) fn nr_free(&self, slot: usize) -> usize {
        self.counts[slot].free
    }

    pub(crate) fn add_slot(&mut self) -> usize {
        self.rows.push(vec![None; self.cluster.nr_columns()]);
        self.counts.push(RowCounts {
            free: self.cluster.nr_columns(),
            homes: 0,
        });
        self.rows.len() - 1
    }

    /// Puts `entry` in the given cells of `slot`. The caller has checked
    /// they are free (or held by the same job).
    pub(crate) fn fill_cells(&mut self, slot: usize, cols: &[usize], entry: Entry) {
        for &c in cols {
            let old = self.rows[slot][c];
            debug_assert!(
                old.is_none_or(|e| e.job == entry.job),
                "cell {c} of slot {slot} is taken"
            );
            self.uncount(slot, old);
            self.rows[slot][c] = Some(entry);
            self.counts[slot].free -= 1;
            self.counts[slot].homes += usize::from(!entry.fill);
        }
        if entry.fill {
            self.fills.push((slot, cols.to_vec()));
        }
    }

    /// The counts of `slot` without the entry a cell held.
    fn uncount(&mut self, slot: usize, old: Option<Entry>) {
        if let Some(e) = old {
            self.counts[slot].free += 1;
            self.counts[slot].homes -= usize::from(!e.fill);
        }
    }

    pub(crate) fn clear_cells(&mut self, slot: usize, cols: &[usize]) {
        for &c in cols {
            let old = self.rows[slot][c].take();
            self.uncount(slot, old);
        }
    }

    /// Takes every cell of `job` back, in every slot. `cols` are the job's
    /// cells: a job holds the same cells in every slot it is in.
    pub(crate) fn clear_job(&mut self, job: JobId, cols: &[usize]) {
        for slot in 0..self.rows.len() {
            for &c in cols {
                if self.rows[slot][c].is_some_and(|e| e.job == job) {
                    self.clear_cells(slot, &[c]);
                }
            }
        }
    }

    /// Drops every fill placement.
    pub(crate) fn clear_fill(&mut self) {
        for (slot, cols) in std::mem::take(&mut self.fills) {
            for c in cols {
                if self.rows[slot][c].is_some_and(|e| e.fill) {
                    self.clear_cells(slot, &[c]);
                }
            }
        }
    }

    /// Slice reduction: removes every slot that holds no home placement (fill
    /// placements alone do not keep a slot alive) and closes the gaps, keeping
    /// the order of the others. Returns new_index[old_index].
    pub(crate) fn compact(&mut self) -> Vec<Option<usize>> {
        let mut map = Vec::with_capacity(self.rows.len());
        let mut kept = 0;
        for counts in &self.counts {
            if counts.homes > 0 {
                map.push(Some(kept));
                kept += 1;
            } else {
                map.push(None);
            }
        }
        if kept == self.rows.len() {
            return map;
        }
        let rows = std::mem::take(&mut self.rows);
        let counts = std::mem::take(&mut self.counts);
        for ((row, counts), to) in rows.into_iter().zip(counts).zip(&map) {
            if to.is_some() {
                self.rows.push(row);
                self.counts.push(counts);
            }
        }
        self.fills = std::mem::take(&mut self.fills)
            .into_iter()
            .filter_map(|(slot, cols)| Some((map[slot]?, cols)))
            .collect();
        map
    }

    /// The text form `gang matrix` prints: a header row of "node:cpu"
    /// labels, then one line per slot with the job id in each cell and "."
    /// where the cell is empty.
    pub fn render(&self) -> String {
        let mut header = vec!["slot".to_string()];
        header.extend(self.cluster.columns.iter().map(|c| {
            let node = self.cluster.node(c.node).map_or("?", |n| n.name.as_str());
            format!("{node}:{}", c.cpu)
        }));
        let mut lines = vec![header];
        for (s, row) in self.rows.iter().enumerate() {
            let mut line = vec![s.to_string()];
            line.extend(
                row.iter()
                    .map(|e| e.map_or(".".to_string(), |e| e.job.to_string())),
            );
            lines.push(line);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for line in &lines {
            let cells: Vec<String> = line
                .iter()
                .zip(&widths)
                .map(|(t, w)| format!("{t:>w$}"))
                .collect();
            out.push_str(&cells.join("  "));
            out.push('\n');
        }
        out
    }
}

impl fmt::Display for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// A CPU list in the kernel's text form ("0-3,8"), the form a node's
/// placement API takes.
pub fn format_cpus(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Parses a CPU list in the kernel's text form ("0-3,8"; empty = none), as
/// a node reports its housekeeping CPUs. Ascending, without duplicates.
pub fn parse_cpus(text: &str) -> Result<Vec<u32>, String> {
    // A set, not a list: "0-255,0-255,..." must not grow with the text.
    let mut cpus = [false; NODE_MAX_CPUS as usize];
    for part in text
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("bad CPU list {text:?}: {t:?} is not a CPU number"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi || hi >= NODE_MAX_CPUS {
            return Err(format!("bad CPU list {text:?}: range {part:?}"));
        }
        cpus[lo as usize..=hi as usize].fill(true);
    }
    Ok((0..NODE_MAX_CPUS).filter(|&c| cpus[c as usize]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_back_what_format_writes() {
        assert_eq!(parse_cpus("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpus("0-3,8\n").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(
            parse_cpus(&format_cpus(&[5, 1, 2, 3])).unwrap(),
            vec![1, 2, 3, 5]
        );
        for bad in ["x", "3-1", "1-", "256", "0,,a"] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
    }

    fn spec(id: NodeId, name: &str, nr_cpus: u32, housekeeping: &[u32]) -> NodeSpec {
        NodeSpec {
            id,
            name: name.into(),
            nr_cpus,
            housekeeping: housekeeping.to_vec(),
        }
    }

    #[test]
    fn columns_are_gang_cpus_in_node_id_then_cpu_order() {
        let c = Cluster::new(vec![spec(7, "b", 3, &[0]), spec(2, "a", 2, &[])]).unwrap();
        let cols: Vec<(u32, u32)> = c.columns().iter().map(|c| (c.node, c.cpu)).collect();
        assert_eq!(cols, [(2, 0), (2, 1), (7, 1), (7, 2)]);
        assert_eq!(c.column(Cell { node: 7, cpu: 1 }), Some(2));
        assert_eq!(
            c.column(Cell { node: 7, cpu: 0 }),
            None,
            "housekeeping CPUs are no column"
        );
        assert_eq!(c.node_columns(1), 2..4);
        assert_eq!(c.node_of(3), 1);
    }

    #[test]
    fn bad_cluster_descriptions_are_refused_with_the_reason() {
        let e = Cluster::new(vec![spec(1, "a", 2, &[]), spec(1, "b", 2, &[])]).unwrap_err();
        assert_eq!(e, ClusterError::DuplicateId { id: 1 });
        let e = Cluster::new(vec![spec(1, "a", 2, &[]), spec(2, "a", 2, &[])]).unwrap_err();
        assert!(e.to_string().contains("\"a\" is given twice"), "{e}");
        let e = Cluster::new(vec![spec(1, "a", 2, &[2])]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node \"a\" names housekeeping CPU 2 but has only CPUs 0-1"
        );
        let e = Cluster::new(vec![spec(1, "a", 300, &[])]).unwrap_err();
        assert!(e.to_string().contains("at most 256"), "{e}");
    }

    #[test]
    fn compaction_drops_slots_with_only_fill_or_nothing() {
        let c = Cluster::new(vec![spec(0, "n", 2, &[])]).unwrap();
        let mut m = Matrix::new(c);
        for _ in 0..4 {
            m.add_slot();
        }
        m.fill_cells(
            0,
            &[0],
            Entry {
                job: JobId(1),
                fill: false,
            },
        );
        m.fill_cells(
            1,
            &[0],
            Entry {
                job: JobId(1),
                fill: true,
            },
        );
        m.fill_cells(
            3,
            &[1],
            Entry {
                job: JobId(2),
                fill: false,
            },
        );
        assert_eq!(m.compact(), [Some(0), None, None, Some(1)]);
        assert_eq!(m.get(1, 1).map(|e| e.job), Some(JobId(2)));
    }

    #[test]
    fn render_has_a_header_and_one_line_per_slot() {
        let c = Cluster::new(vec![spec(0, "a", 2, &[]), spec(1, "b", 1, &[])]).unwrap();
        let mut m = Matrix::new(c);
        m.add_slot();
        m.add_slot();
        m.fill_cells(
            0,
            &[0, 1],
            Entry {
                job: JobId(1),
                fill: false,
            },
        );
        m.fill_cells(
            1,
            &[2],
            Entry {
                job: JobId(12),
                fill: false,
            },
        );
        assert_eq!(
            m.render(),
            "slot  a:0  a:1  b:0\n   0    1    1    .\n   1    .    .   12\n"
        );
    }

    #[test]
    fn cpu_lists_in_kernel_form() {
        assert_eq!(format_cpus(&[3, 0, 1, 2, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpus(&[]), "");
        assert_eq!(format_cpus(&[5]), "5");
    }
}
