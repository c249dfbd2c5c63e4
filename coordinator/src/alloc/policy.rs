//! Choosing cells within one slot: first fit, best fit and binary buddy.
//!
//! Each chooser sees one row of the matrix as a free mask over the columns
//! and returns the columns it picks in (node, cpu) order, or None when the
//! row has no room. `cap` is the most ranks one node may take (the job's
//! per-node limit, usize::MAX without one). Choosers never look at other
//! slots: which slot to try is the caller's business (first slot with room).

use crate::matrix::Cluster;

/// The first free cells in (node, cpu) order, at most `cap` per node. On a
/// cluster any CPU reaches any other through the network, so unlike on a
/// mesh the cells need not be contiguous.
pub(crate) fn first_fit(
    cluster: &Cluster,
    free: &[bool],
    need: usize,
    cap: usize,
) -> Option<Vec<usize>> {
    let mut picked = Vec::with_capacity(need);
    for n in 0..cluster.nodes().len() {
        if picked.len() == need {
            break;
        }
        let mut on_node = 0;
        for col in cluster.node_columns(n) {
            if picked.len() == need || on_node == cap {
                break;
            }
            if free[col] {
                picked.push(col);
                on_node += 1;
            }
        }
    }
    (picked.len() == need).then_some(picked)
}

/// Best fit over nodes, so the free fragments left behind are few and
/// large:
/// - if one node can take the whole request, the node left with the fewest
///   free cells (ties: a node already partly used, then the lowest id);
/// - otherwise whole nodes' free cells are taken, partly used nodes first
///   (they are the fragments), then larger ones first (fewer nodes spanned),
///   until the rest fits one node, which is then chosen as above.
///
/// Within a node the lowest free CPUs are taken.
pub(crate) fn best_fit(
    cluster: &Cluster,
    free: &[bool],
    need: usize,
    cap: usize,
) -> Option<Vec<usize>> {
    #[derive(Clone, Copy)]
    struct Cand {
        node: usize,
        nr_free: usize,
        used: bool,
    }
    if cap == 0 {
        return None;
    }
    let mut cands: Vec<Cand> = Vec::new();
    for n in 0..cluster.nodes().len() {
        let range = cluster.node_columns(n);
        let nr_free = free[range.clone()].iter().filter(|&&f| f).count();
        if nr_free > 0 {
            cands.push(Cand {
                node: n,
                nr_free,
                used: nr_free < range.len(),
            });
        }
    }
    let avail = |c: &Cand| c.nr_free.min(cap);
    // The node left with the fewest free cells that takes `left` alone.
    let single = |cands: &[Cand], left: usize| {
        cands
            .iter()
            .filter(|c| avail(c) >= left)
            .min_by_key(|c| (c.nr_free - left, !c.used, c.node))
            .copied()
    };
    // The lowest `take` free columns of a node.
    let lowest = |c: &Cand, take: usize| {
        cluster
            .node_columns(c.node)
            .filter(|&col| free[col])
            .take(take)
    };
    if let Some(c) = single(&cands, need) {
        return Some(lowest(&c, need).collect());
    }
    if cands.iter().map(avail).sum::<usize>() < need {
        return None;
    }
    // Whole nodes are taken in this order (partly used first, then the
    // most cells, then the lowest id) until one node left can take the
    // rest alone; `most[k]`: the most any of order[k..] can take.
    cands.sort_unstable_by_key(|c| (!c.used, usize::MAX - avail(c), c.node));
    let mut most = vec![0; cands.len() + 1];
    for k in (0..cands.len()).rev() {
        most[k] = most[k + 1].max(avail(&cands[k]));
    }
    let mut picked = Vec::with_capacity(need);
    let mut left = need;
    let mut k = 0;
    while left > 0 {
        if most[k] >= left {
            let c = single(&cands[k..], left).expect("most[k] says one can");
            picked.extend(lowest(&c, left));
            break;
        }
        let c = cands.get(k)?;
        let take = avail(c);
        picked.extend(lowest(c, take));
        left -= take;
        k += 1;
    }
    picked.sort_unstable();
    Some(picked)
}

/// The block size the buddy policy gives a job of `ranks` ranks.
pub(crate) fn buddy_block(ranks: usize) -> usize {
    ranks.max(1).next_power_of_two()
}

/// Binary buddy over the linearised column list. The request is rounded up
/// to a power of two; blocks are aligned to their size. Of the maximal free
/// blocks (free, and whose buddy is not free, so freed blocks have
/// coalesced) the smallest that can hold the request is split, lowest
/// address first, as a buddy allocator splits its smallest free block. The
/// first `ranks` cells of the block run the ranks; the rest stay idle, and
/// only those first cells count against the per-node cap. Columns past the
/// end of the list (up to the next power of two) never exist, so a block
/// reaching them is never free.
pub(crate) fn buddy(
    cluster: &Cluster,
    free: &[bool],
    ranks: usize,
    cap: usize,
) -> Option<Vec<usize>> {
    let len = free.len();
    let block = buddy_block(ranks);
    if block > len {
        return None;
    }
    let universe = len.next_power_of_two();
    // taken[i]: cells below column i that are not free, so a block's
    // freedom is one subtraction.
    let mut taken = Vec::with_capacity(len + 1);
    taken.push(0usize);
    for &f in free {
        taken.push(taken.last().unwrap() + usize::from(!f));
    }
    let is_free = |off: usize, size: usize| off + size <= len && taken[off + size] == taken[off];
    // A node's columns are contiguous: count the run on each node.
    let fits = |off: usize| {
        let mut run = (usize::MAX, 0usize);
        (off..off + ranks).all(|c| {
            let n = cluster.node_of(c);
            run = if run.0 == n { (n, run.1 + 1) } else { (n, 1) };
            run.1 <= cap
        })
    };
    let mut size = block;
    while size <= universe {
        for off in (0..universe).step_by(size) {
            let parent = off - off % (2 * size);
            let maximal = is_free(off, size) && (size == universe || !is_free(parent, 2 * size));
            if !maximal {
                continue;
            }
            if let Some(sub) = (off..off + size).step_by(block).find(|&o| fits(o)) {
                return Some((sub..sub + block).collect());
            }
        }
        size *= 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(shape: &[u32]) -> Cluster {
        Cluster::from_shape(shape).unwrap()
    }

    /// A free mask from a picture: '.' free, anything else taken.
    fn mask(row: &str) -> Vec<bool> {
        row.chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| c == '.')
            .collect()
    }

    #[test]
    fn first_fit_takes_the_first_free_cells_and_respects_the_cap() {
        let c = cluster(&[4, 4]);
        assert_eq!(
            first_fit(&c, &mask("x.x. ...."), 3, usize::MAX),
            Some(vec![1, 3, 4])
        );
        assert_eq!(first_fit(&c, &mask(".... ...."), 3, 1), None);
        assert_eq!(first_fit(&c, &mask(".... ...."), 2, 1), Some(vec![0, 4]));
    }

    #[test]
    fn best_fit_picks_the_tightest_node() {
        let c = cluster(&[4, 4, 4]);
        // Free: node 0 has 4, node 1 has 2, node 2 has 3. Two cells fit
        // node 1 exactly.
        assert_eq!(
            best_fit(&c, &mask(".... xx.. x..."), 2, usize::MAX),
            Some(vec![6, 7])
        );
        // Three: node 2 leaves none, node 0 would leave one.
        assert_eq!(
            best_fit(&c, &mask(".... xx.. x..."), 3, usize::MAX),
            Some(vec![9, 10, 11])
        );
    }

    #[test]
    fn best_fit_fills_fragments_before_breaking_whole_nodes() {
        let c = cluster(&[4, 4, 4]);
        // Five cells, no node has five: the partly used nodes go first,
        // the larger fragment first (node 2, three cells), and the last two
        // fill node 1 exactly. Node 0 stays whole; first fit would have
        // broken it.
        let free = mask(".... xx.. x...");
        assert_eq!(
            best_fit(&c, &free, 5, usize::MAX),
            Some(vec![6, 7, 9, 10, 11])
        );
        assert_eq!(
            first_fit(&c, &free, 5, usize::MAX),
            Some(vec![0, 1, 2, 3, 6])
        );
    }

    #[test]
    fn best_fit_prefers_a_partly_used_node_on_a_tie() {
        // Node 0 has 3 free of 4 (partly used), node 1 has 3 free of 3:
        // both are left with nothing, node 0 wins as the fragment.
        let c = cluster(&[4, 3]);
        assert_eq!(
            best_fit(&c, &mask("x... ..."), 3, usize::MAX),
            Some(vec![1, 2, 3])
        );
    }

    #[test]
    fn buddy_takes_aligned_power_of_two_blocks() {
        let c = cluster(&[4, 4]);
        assert_eq!(buddy_block(3), 4);
        assert_eq!(
            buddy(&c, &mask(".... ...."), 3, usize::MAX),
            Some(vec![0, 1, 2, 3])
        );
        // Cells 1 taken: the free blocks are {0}, {2,3}, {4..7}; a 2-block
        // comes from {2,3}, the smallest that holds it, not from 4..7.
        assert_eq!(
            buddy(&c, &mask(".x.. ...."), 2, usize::MAX),
            Some(vec![2, 3])
        );
        // A 4-block cannot start at 2: not aligned.
        assert_eq!(buddy(&c, &mask("xx.. ..xx"), 3, usize::MAX), None);
    }

    #[test]
    fn buddy_blocks_never_reach_past_the_last_column() {
        let c = cluster(&[3, 3]);
        assert_eq!(
            buddy(&c, &mask("... ..."), 5, usize::MAX),
            None,
            "8 > 6 columns"
        );
        assert_eq!(
            buddy(&c, &mask("... ..."), 4, usize::MAX),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(buddy(&c, &mask("x.. ..."), 2, usize::MAX), Some(vec![2, 3]));
        // 4..5 is a whole 2-block even though its 4-parent runs off the end.
        assert_eq!(buddy(&c, &mask("xxx x.."), 2, usize::MAX), Some(vec![4, 5]));
    }

    #[test]
    fn buddy_cap_counts_only_cells_with_ranks() {
        let c = cluster(&[2, 2, 2, 2]);
        // 3 ranks in a 4-block at most 2 per node: ranks on nodes 0,0,1.
        assert_eq!(
            buddy(&c, &mask(".. .. .. .."), 3, 2),
            Some(vec![0, 1, 2, 3])
        );
        // At most 1 per node: no aligned 4-block spreads 3 ranks that thin.
        assert_eq!(buddy(&c, &mask(".. .. .. .."), 3, 1), None);
    }
}
