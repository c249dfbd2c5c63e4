//! Self co-scheduling (SCS) on a cluster.
//!
//! A job may get fewer cells than ranks; its ranks then time-share its cells
//! (the job contends with itself, not with other jobs), at most `mpl_max`
//! ranks per cell. SCS is space sharing: under it the matrix has a single
//! slot, since a second slot would bring back the contention between jobs
//! that SCS exists to avoid.
//!
//! Unlike on the shared-memory machine SCS comes from, a rank cannot move
//! to another node. So the initial allocation fixes which ranks live on
//! which node for good; when a job later grows (free cells shared out by
//! equipartition while nobody is queued) it grows only on its own nodes, at
//! most one cell per rank there, and when it shrinks it goes back to exactly
//! its initial cells.
//!
//! Ranks are mapped in blocks: a node's consecutive ranks are spread over
//! its cells in order, cell i taking ranks lo + ⌊i·r/m⌋ .. lo + ⌊(i+1)·r/m⌋
//! (r ranks and m cells on the node). Neighbouring ranks, which usually
//! talk most, so share a CPU or at least a node.

use crate::matrix::Cluster;

/// One node's share of a job: ranks `lo..hi` live on node index `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeRanks {
    pub node: usize,
    pub lo: u32,
    pub hi: u32,
}

/// The initial allocation of a job: how many cells, and at most how many of
/// them on one node. It is the smallest allocation that puts at most
/// `mpl_max` ranks on a cell (⌈ranks / mpl_max⌉ cells) and, with a per-node
/// limit K, can also keep every node at K ranks or fewer: a node with q
/// cells gets at most q·⌈ranks / cells⌉ ranks, so q ≤ K / ⌈ranks / cells⌉.
/// None when no allocation fits the cluster even empty.
pub(crate) fn initial_allocation(
    ranks: usize,
    per_node: Option<usize>,
    mpl_max: usize,
    node_cpus: &[usize],
) -> Option<(usize, usize)> {
    let total: usize = node_cpus.iter().sum();
    let lo = ranks.div_ceil(mpl_max).max(1);
    (lo..=ranks.min(total)).find_map(|cells| {
        let cap = per_node.map_or(usize::MAX, |k| k / ranks.div_ceil(cells));
        let room: usize = node_cpus.iter().map(|&n| n.min(cap)).sum();
        (cap > 0 && room >= cells).then_some((cells, cap))
    })
}

/// Which ranks each node of an initial allocation holds: the cells (sorted)
/// take ranks in blocks, a node the union of its cells' blocks.
pub(crate) fn node_ranks(cluster: &Cluster, cells: &[usize], ranks: u32) -> Vec<NodeRanks> {
    let c = cells.len() as u64;
    let start = |i: usize| (i as u64 * ranks as u64 / c) as u32;
    let mut out: Vec<NodeRanks> = Vec::new();
    for (i, &col) in cells.iter().enumerate() {
        let node = cluster.node_of(col);
        match out.last_mut() {
            Some(last) if last.node == node => last.hi = start(i + 1),
            _ => out.push(NodeRanks {
                node,
                lo: start(i),
                hi: start(i + 1),
            }),
        }
    }
    out
}

/// rank_cols[rank]: the cell each rank runs on, given the job's current
/// cells (sorted).
pub(crate) fn rank_columns(cluster: &Cluster, shares: &[NodeRanks], cells: &[usize]) -> Vec<usize> {
    let mut out = Vec::new();
    for share in shares {
        let on_node: Vec<usize> = cells
            .iter()
            .copied()
            .filter(|&c| cluster.node_of(c) == share.node)
            .collect();
        let (r, m) = ((share.hi - share.lo) as usize, on_node.len());
        for (i, &col) in on_node.iter().enumerate() {
            out.extend(std::iter::repeat_n(col, (i + 1) * r / m - i * r / m));
        }
    }
    out
}

/// The next cell a running job grows by, if any: a free cell on one of its
/// nodes that has fewer cells than ranks, the node whose ranks are most
/// crowded (most ranks per cell; ties: lowest node) and its lowest free CPU.
pub(crate) fn growth_cell(
    cluster: &Cluster,
    free: &[bool],
    shares: &[NodeRanks],
    cells: &[usize],
) -> Option<usize> {
    let mut best: Option<(usize, usize, usize)> = None; // (ranks, cells, col)
    for share in shares {
        let r = (share.hi - share.lo) as usize;
        // `cells` is sorted and a node's columns are contiguous.
        let range = cluster.node_columns(share.node);
        let m =
            cells.partition_point(|&c| c < range.end) - cells.partition_point(|&c| c < range.start);
        if m >= r {
            continue;
        }
        let Some(col) = cluster.node_columns(share.node).find(|&c| free[c]) else {
            continue;
        };
        if best.is_none_or(|(br, bm, _)| r * bm > br * m) {
            best = Some((r, m, col));
        }
    }
    best.map(|(_, _, col)| col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(shape: &[u32]) -> Cluster {
        Cluster::from_shape(shape).unwrap()
    }

    #[test]
    fn initial_allocation_is_ranks_over_mpl_rounded_up() {
        assert_eq!(
            initial_allocation(8, None, 4, &[4, 4]),
            Some((2, usize::MAX))
        );
        assert_eq!(
            initial_allocation(9, None, 4, &[4, 4]),
            Some((3, usize::MAX))
        );
        assert_eq!(
            initial_allocation(1, None, 4, &[4, 4]),
            Some((1, usize::MAX))
        );
        assert_eq!(
            initial_allocation(40, None, 4, &[4, 4]),
            None,
            "10 cells > 8"
        );
    }

    #[test]
    fn a_per_node_limit_can_raise_the_initial_allocation() {
        // 8 ranks, MPL 4, at most 2 ranks per node: 2 cells would put 4
        // ranks on a cell, so each cell must hold 2 or fewer: 4 cells, one
        // per node.
        assert_eq!(
            initial_allocation(8, Some(2), 4, &[4, 4, 4, 4]),
            Some((4, 1))
        );
        assert_eq!(
            initial_allocation(8, Some(2), 4, &[4, 4, 4]),
            None,
            "3 nodes hold 6 ranks"
        );
        // A limit that two cells on one node already meet changes nothing.
        assert_eq!(initial_allocation(8, Some(8), 4, &[4, 4]), Some((2, 2)));
    }

    #[test]
    fn ranks_stay_on_their_node_and_spread_over_its_cells() {
        let c = cluster(&[4, 4]);
        // 6 ranks on cells 2, 3 (node 0) and 4 (node 1): blocks 0-1, 2-3, 4-5.
        let shares = node_ranks(&c, &[2, 3, 4], 6);
        assert_eq!(
            shares,
            [
                NodeRanks {
                    node: 0,
                    lo: 0,
                    hi: 4
                },
                NodeRanks {
                    node: 1,
                    lo: 4,
                    hi: 6
                }
            ]
        );
        assert_eq!(rank_columns(&c, &shares, &[2, 3, 4]), [2, 2, 3, 3, 4, 4]);
        // Grown by one cell on node 1: its ranks 4 and 5 get a cell each.
        assert_eq!(rank_columns(&c, &shares, &[2, 3, 4, 5]), [2, 2, 3, 3, 4, 5]);
    }

    #[test]
    fn growth_goes_to_the_most_crowded_node_and_stops_at_one_cell_per_rank() {
        let c = cluster(&[4, 4]);
        let shares = [
            NodeRanks {
                node: 0,
                lo: 0,
                hi: 2,
            },
            NodeRanks {
                node: 1,
                lo: 2,
                hi: 5,
            },
        ];
        let free = [false, true, true, true, false, true, true, true];
        // Node 0: 2 ranks on 1 cell; node 1: 3 ranks on 1 cell: node 1.
        assert_eq!(growth_cell(&c, &free, &shares, &[0, 4]), Some(5));
        // Node 1 at 3 cells for 3 ranks: only node 0 can grow.
        assert_eq!(growth_cell(&c, &free, &shares, &[0, 4, 5, 6]), Some(1));
        assert_eq!(growth_cell(&c, &free, &shares, &[0, 1, 4, 5, 6]), None);
    }
}
