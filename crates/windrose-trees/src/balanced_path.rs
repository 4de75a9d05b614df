//! Balanced-Path construction of a topology-aware binomial tree (Figueira, VECPAR'02, as used
//! by Figueira & Mendes).
//!
//! One child position is filled per step. The parent served is the filled position with the most
//! undefined children; ties go to the deeper parent (more edges from the root), then to the
//! parent filled earlier. A parent fills its largest-subtree child first, with the closest node
//! left, distance ties to the lowest node id. These are the rules that reproduce the paper's
//! Figure 1 tree from Table 1 (see PAPER-NOTES): trace 0→pos4=3, 3→pos6=6, 0→pos2=7, 6→pos7=1,
//! 3→pos5=2, 7→pos3=4, 0→pos1=5.
//!
//! Cost: N steps, each a heap operation and a scan of the nodes left: O(N²) time, O(N) memory.

use crate::binomial::{self, Position};
use crate::TreeError;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use windrose_model::{LinkCosts, NodeId};

/// Balanced-Path over every node of `costs`, rooted at `root`; returns the node at each position.
pub fn balanced_path(costs: &impl LinkCosts, root: NodeId) -> Result<Vec<NodeId>, TreeError> {
    let nodes: Vec<NodeId> = (0..costs.node_count()).map(NodeId::from).collect();
    balanced_path_over(costs, root, &nodes)
}

/// Balanced-Path over the given members (which must include `root`); returns the node at each
/// position.
pub fn balanced_path_over(
    costs: &impl LinkCosts,
    root: NodeId,
    members: &[NodeId],
) -> Result<Vec<NodeId>, TreeError> {
    let node_count = costs.node_count();
    let mut seen = vec![false; node_count];
    for &m in members {
        if m.index() >= node_count {
            return Err(TreeError::UnknownNode {
                node: m,
                node_count,
            });
        }
        if std::mem::replace(&mut seen[m.index()], true) {
            return Err(TreeError::Duplicate { node: m });
        }
    }
    if root.index() >= node_count {
        return Err(TreeError::UnknownNode {
            node: root,
            node_count,
        });
    }
    if !seen[root.index()] {
        return Err(TreeError::Invalid(format!(
            "root {root} is not among the tree's members"
        )));
    }
    let n = members.len();
    let mut placed = vec![root; n];
    let mut left: Vec<NodeId> = members.iter().copied().filter(|&m| m != root).collect();
    // Next child (largest subtree first) still to fill, per position.
    let mut next_child: Vec<Option<Position>> = vec![None; n];
    let mut heap = BinaryHeap::new();
    let mut filled_seq = 0usize;
    let enqueue = |heap: &mut BinaryHeap<Parent>, next_child: &mut [Option<Position>], p, seq| {
        next_child[p] = binomial::children(p, n).next();
        let undefined = binomial::child_count(p, n);
        if undefined > 0 {
            heap.push(Parent {
                undefined,
                depth: binomial::depth(p),
                seq: Reverse(seq),
                pos: p,
            });
        }
    };
    enqueue(&mut heap, &mut next_child, 0, filled_seq);
    while let Some(mut parent) = heap.pop() {
        let p = parent.pos;
        let child = next_child[p].expect("a queued parent has an undefined child");
        // Children are p + 2^k in decreasing k; the next one halves the step.
        let step = child - p;
        next_child[p] = (step > 1).then(|| p + step / 2);
        let from = placed[p];
        let best = closest(costs, from, &left);
        placed[child] = left.swap_remove(best);
        filled_seq += 1;
        enqueue(&mut heap, &mut next_child, child, filled_seq);
        parent.undefined -= 1;
        if parent.undefined > 0 {
            heap.push(parent);
        }
    }
    Ok(placed)
}

/// Index in `left` of the node closest to `from`, distance ties to the lowest id.
#[inline]
fn closest(costs: &impl LinkCosts, from: NodeId, left: &[NodeId]) -> usize {
    let mut best = 0;
    let mut best_cost = f64::INFINITY;
    let mut best_id = NodeId(u32::MAX);
    for (i, &v) in left.iter().enumerate() {
        let c = costs.cost(from, v);
        if c < best_cost || (c == best_cost && v < best_id) {
            best = i;
            best_cost = c;
            best_id = v;
        }
    }
    best
}

/// A filled position that still has undefined children, ordered by serving priority.
#[derive(PartialEq, Eq)]
struct Parent {
    undefined: usize,
    depth: u32,
    seq: Reverse<usize>,
    pos: Position,
}

impl Ord for Parent {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.undefined, self.depth, self.seq).cmp(&(other.undefined, other.depth, other.seq))
    }
}

impl PartialOrd for Parent {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_model::fixtures::table1;

    #[test]
    fn figure1_tree_from_table1() {
        let placed = balanced_path(&table1(), NodeId(0)).unwrap();
        let ids: Vec<u32> = placed.iter().map(|n| n.0).collect();
        assert_eq!(ids, vec![0, 5, 7, 4, 3, 2, 6, 1]);
    }

    #[test]
    fn any_size_places_every_member_once() {
        let m = windrose_model::DenseCostMatrix::<f64>::from_fn(
            windrose_model::CostUnit::Hops,
            37,
            |i, j| ((i * 31 + j * 17) % 7) as f64,
        );
        for root in [0u32, 5, 36] {
            let mut placed = balanced_path(&m, NodeId(root)).unwrap();
            assert_eq!(placed[0], NodeId(root));
            placed.sort();
            assert_eq!(placed, (0..37).map(NodeId::from).collect::<Vec<_>>());
        }
        assert!(balanced_path(&m, NodeId(99)).is_err());
    }
}
