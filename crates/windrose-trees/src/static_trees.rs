//! The static broadcast trees adaptive trees are compared against: MPICH-like binomial,
//! MagPIe-like two-level, minimum spanning tree, maximum-bottleneck tree and the flat tree.
//!
//! Every builder is a pure function of its inputs and returns a [`Tree`] whose children are in
//! send order. Choices the papers leave open are fixed here and documented on each builder:
//! - ranks: members sorted by id, relative rank `(index - index_of_root) mod N` (MPICH);
//! - MagPIe coordinators: the root for its own cluster, the lowest-id member elsewhere;
//! - spanning trees: edges totally ordered by `(w, min id, max id)` so the tree is unique
//!   whatever the ties (PAPER-NOTES 004), children sent deepest subtree first.
//!
//! ```
//! use windrose_model::{ClusterCosts, CostUnit, NodeId};
//! use windrose_trees::static_trees::{binomial_all, magpie};
//!
//! let t = binomial_all(8, NodeId(0)).unwrap();
//! assert_eq!(t.children(NodeId(0)), &[NodeId(4), NodeId(2), NodeId(1)]);
//!
//! let costs = ClusterCosts::uniform(CostUnit::LatencyMs, 2, 3, 0.1, 20.0).unwrap();
//! let t = magpie(&costs, costs.clusters(), NodeId(4)).unwrap();
//! assert_eq!(t.parent(NodeId(0)), Some(NodeId(4))); // node 0 coordinates cluster 0
//! ```

use crate::binomial;
use crate::{Tree, TreeError};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use windrose_model::{ClusterId, LinkCosts, NodeId};

/// Sorts `nodes` by id and checks it is a non-empty set of ids below `node_count` that contains
/// `root`. Returns the sorted members and the root's index among them.
fn members(
    nodes: &[NodeId],
    node_count: usize,
    root: NodeId,
) -> Result<(Vec<NodeId>, usize), TreeError> {
    if nodes.is_empty() {
        return Err(TreeError::Invalid(
            "cannot build a tree over an empty node list".into(),
        ));
    }
    for &n in nodes.iter().chain(std::iter::once(&root)) {
        if n.index() >= node_count {
            return Err(TreeError::UnknownNode {
                node: n,
                node_count,
            });
        }
    }
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(TreeError::Duplicate { node: w[0] });
    }
    let root_index = sorted.binary_search(&root).map_err(|_| {
        TreeError::Invalid(format!(
            "root {root} is not among the {} given nodes",
            sorted.len()
        ))
    })?;
    Ok((sorted, root_index))
}

/// Size of the per-node tables of a tree over `nodes` when no cost model bounds the ids.
fn table_size(nodes: &[NodeId]) -> usize {
    nodes.iter().map(|n| n.index() + 1).max().unwrap_or(0)
}

/// `0..node_count` as node ids.
fn all_nodes(node_count: usize) -> Vec<NodeId> {
    (0..node_count).map(NodeId::from).collect()
}

/// Appends the `(child, parent)` edges of a binomial tree over `sorted` members rooted at
/// `sorted[root_index]`: relative rank r sits at binomial position r, and each parent's children
/// come largest subtree first (MPICH's mask loop sends in that order).
fn push_binomial_edges(sorted: &[NodeId], root_index: usize, edges: &mut Vec<(NodeId, NodeId)>) {
    let n = sorted.len();
    let at = |rank: usize| sorted[(root_index + rank) % n];
    for p in 0..n {
        edges.extend(binomial::children(p, n).map(|c| (at(c), at(p))));
    }
}

/// MPICH-like binomial tree over `nodes`, rooted at `root`.
///
/// Members are sorted by id; a member's relative rank is `(index - index_of_root) mod N`, and
/// rank r sits at binomial position r (`parent(r) = r & (r - 1)`). Each node sends to its
/// largest subtree first, like MPICH's mask loop. The tree knows nothing of link costs.
///
/// Errors: empty `nodes` → [`TreeError::Invalid`]; a repeated node → [`TreeError::Duplicate`];
/// `root` not among `nodes` → [`TreeError::Invalid`].
pub fn binomial(nodes: &[NodeId], root: NodeId) -> Result<Tree, TreeError> {
    let node_count = table_size(nodes).max(root.index() + 1);
    let (sorted, root_index) = members(nodes, node_count, root)?;
    let mut edges = Vec::with_capacity(sorted.len() - 1);
    push_binomial_edges(&sorted, root_index, &mut edges);
    Tree::from_edges(node_count, root, &edges)
}

/// [`binomial()`] over every node `0..node_count`; a root `>= node_count` is
/// [`TreeError::UnknownNode`].
pub fn binomial_all(node_count: usize, root: NodeId) -> Result<Tree, TreeError> {
    let (sorted, root_index) = members(&all_nodes(node_count), node_count, root)?;
    let mut edges = Vec::with_capacity(node_count - 1);
    push_binomial_edges(&sorted, root_index, &mut edges);
    Tree::from_edges(node_count, root, &edges)
}

/// Flat tree over `nodes`: the root sends to every other member itself, in ascending id order.
///
/// Errors as [`binomial()`].
pub fn flat(nodes: &[NodeId], root: NodeId) -> Result<Tree, TreeError> {
    let node_count = table_size(nodes).max(root.index() + 1);
    let (sorted, _) = members(nodes, node_count, root)?;
    flat_edges(node_count, &sorted, root)
}

/// [`flat`] over every node `0..node_count`; a root `>= node_count` is
/// [`TreeError::UnknownNode`].
pub fn flat_all(node_count: usize, root: NodeId) -> Result<Tree, TreeError> {
    let (sorted, _) = members(&all_nodes(node_count), node_count, root)?;
    flat_edges(node_count, &sorted, root)
}

/// A chain over every node `0..node_count` in relative-rank order, as [`binomial_all`] ranks
/// them: `root -> root+1 -> ... -> N-1 -> 0 -> ... -> root-1` (for root 0: `0 -> 1 -> ... ->
/// N-1`). The deepest tree there is: store-and-forward pays every hop, a pipelined broadcast
/// loads each link once. A root `>= node_count` is [`TreeError::UnknownNode`].
pub fn chain_all(node_count: usize, root: NodeId) -> Result<Tree, TreeError> {
    check_node(node_count, root)?;
    let order: Vec<NodeId> = (0..node_count)
        .map(|k| NodeId::from((root.index() + k) % node_count))
        .collect();
    let edges: Vec<(NodeId, NodeId)> = order.windows(2).map(|w| (w[1], w[0])).collect();
    Tree::from_edges(node_count, root, &edges)
}

fn flat_edges(node_count: usize, sorted: &[NodeId], root: NodeId) -> Result<Tree, TreeError> {
    let edges: Vec<_> = sorted
        .iter()
        .filter(|&&n| n != root)
        .map(|&n| (n, root))
        .collect();
    Tree::from_edges(node_count, root, &edges)
}

/// Checks a cluster map (one cluster per node, indexed by node id) against the cost model.
pub(crate) fn check_cluster_map(
    costs: &impl LinkCosts,
    clusters: &[ClusterId],
) -> Result<(), TreeError> {
    if clusters.len() == costs.node_count() {
        Ok(())
    } else {
        Err(TreeError::Invalid(format!(
            "the cluster map has {} entries but the cost model has {} nodes",
            clusters.len(),
            costs.node_count()
        )))
    }
}

/// MagPIe-like two-level tree over all nodes of `costs`: flat between clusters, binomial inside.
///
/// `clusters[i]` is node i's cluster (any ids; empty clusters are fine). The coordinator of the
/// root's cluster is the root; every other cluster's coordinator is its lowest-id member (MagPIe
/// fixes one gateway per cluster; the lowest id is our deterministic choice). The root sends to
/// the other coordinators directly, in ascending cluster id, *before* its local children — the
/// WAN sends go first, as in MagPIe, because they are the slow ones. Every coordinator then runs
/// a [`binomial()`] over its own cluster, relative ranks counted from the coordinator. So exactly
/// `clusters - 1` edges cross clusters, all of them at the root. Link costs are not consulted:
/// the cluster map is MagPIe's whole view of the network.
///
/// Errors: `root` unknown → [`TreeError::UnknownNode`]; `clusters.len() != node_count` →
/// [`TreeError::Invalid`] naming both lengths.
pub fn magpie(
    costs: &impl LinkCosts,
    clusters: &[ClusterId],
    root: NodeId,
) -> Result<Tree, TreeError> {
    let node_count = costs.node_count();
    check_node(node_count, root)?;
    check_cluster_map(costs, clusters)?;
    // Members of each cluster, ascending id (node ids are visited in order).
    let mut by_cluster: BTreeMap<ClusterId, Vec<NodeId>> = BTreeMap::new();
    for (i, &c) in clusters.iter().enumerate() {
        by_cluster.entry(c).or_default().push(NodeId::from(i));
    }
    let root_cluster = clusters[root.index()];
    let mut edges = Vec::with_capacity(node_count.saturating_sub(1));
    // WAN first: the root's sends to the other coordinators precede its local sends.
    for (&c, nodes) in &by_cluster {
        if c != root_cluster {
            edges.push((nodes[0], root));
        }
    }
    for (&c, nodes) in &by_cluster {
        let coordinator_index = if c == root_cluster {
            nodes
                .binary_search(&root)
                .expect("root is in its own cluster")
        } else {
            0
        };
        push_binomial_edges(nodes, coordinator_index, &mut edges);
    }
    Tree::from_edges(node_count, root, &edges)
}

pub(crate) fn check_node(node_count: usize, node: NodeId) -> Result<(), TreeError> {
    if node.index() < node_count {
        Ok(())
    } else {
        Err(TreeError::UnknownNode { node, node_count })
    }
}

/// Which spanning tree Prim grows.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Goal {
    /// Minimum total weight: edges ordered by `(w, min id, max id)`.
    Minimum,
    /// Maximum total weight (maximum bottleneck): edges ordered by `(-w, min id, max id)`.
    Maximum,
}

/// An edge with the strict total order the spanning trees use.
#[derive(Copy, Clone)]
struct EdgeKey {
    w: f64,
    lo: NodeId,
    hi: NodeId,
}

impl EdgeKey {
    fn new(w: f64, a: NodeId, b: NodeId) -> Self {
        EdgeKey {
            // `+ 0.0` turns -0.0 into 0.0 so `total_cmp` sees them as equal weights.
            w: w + 0.0,
            lo: a.min(b),
            hi: a.max(b),
        }
    }

    /// `Less` when `self` is preferred: lighter (or heavier, for [`Goal::Maximum`]) first, then
    /// lower ids, so no two distinct edges tie.
    fn cmp(&self, other: &EdgeKey, goal: Goal) -> Ordering {
        let by_weight = match goal {
            Goal::Minimum => self.w.total_cmp(&other.w),
            Goal::Maximum => other.w.total_cmp(&self.w),
        };
        by_weight
            .then(self.lo.cmp(&other.lo))
            .then(self.hi.cmp(&other.hi))
    }
}

/// Prim's algorithm in O(k²) over the k `nodes`, querying `costs` directly (the dense view), and
/// children ordered deepest subtree first.
fn prim(
    costs: &impl LinkCosts,
    nodes: &[NodeId],
    root: NodeId,
    goal: Goal,
) -> Result<Tree, TreeError> {
    let node_count = costs.node_count();
    let (sorted, root_index) = members(nodes, node_count, root)?;
    let k = sorted.len();
    let mut in_tree = vec![false; k];
    // best[v]: the preferred edge from the tree to v found so far, with its tree endpoint.
    let mut best: Vec<Option<(EdgeKey, usize)>> = vec![None; k];
    let mut parent = vec![usize::MAX; k];
    let mut added = Vec::with_capacity(k);
    let mut u = root_index;
    loop {
        in_tree[u] = true;
        added.push(u);
        let mut next: Option<(EdgeKey, usize)> = None;
        for v in 0..k {
            if in_tree[v] {
                continue;
            }
            let cand = EdgeKey::new(costs.cost(sorted[u], sorted[v]), sorted[u], sorted[v]);
            let b = match best[v] {
                Some((b, _)) if b.cmp(&cand, goal) == Ordering::Less => b,
                _ => {
                    best[v] = Some((cand, u));
                    cand
                }
            };
            if !matches!(next, Some((n, _)) if n.cmp(&b, goal) == Ordering::Less) {
                next = Some((b, v));
            }
        }
        match next {
            Some((_, v)) => {
                parent[v] = best[v].expect("candidate has an edge").1;
                u = v;
            }
            None => break,
        }
    }
    // Subtree heights, children before parents (reverse insertion order).
    let mut height = vec![0u32; k];
    for &v in added.iter().rev().filter(|&&v| v != root_index) {
        let p = parent[v];
        height[p] = height[p].max(height[v] + 1);
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); k];
    for &v in &added[1..] {
        children[parent[v]].push(v);
    }
    let mut edges = Vec::with_capacity(k - 1);
    for (p, kids) in children.iter_mut().enumerate() {
        // Deepest subtree first so the longest chain starts earliest; ties by ascending id
        // (local indices follow id order).
        kids.sort_by(|&a, &b| height[b].cmp(&height[a]).then(a.cmp(&b)));
        edges.extend(kids.iter().map(|&c| (sorted[c], sorted[p])));
    }
    Tree::from_edges(node_count, root, &edges)
}

/// Minimum spanning tree of all nodes of `costs`, rooted at `root`.
///
/// Prim in O(N²) on the dense cost view. Edges are strictly ordered by `(w, min id, max id)`,
/// so the MST is unique even with many equal costs (e.g. intra-site latencies all ~0) and equals
/// the one GHS or Kruskal with the same order would build (PAPER-NOTES 004). Each node sends to
/// the child with the deepest subtree first, ties by ascending id.
///
/// Errors: `root` unknown → [`TreeError::UnknownNode`]; no nodes → [`TreeError::UnknownNode`]
/// too (no root can exist).
pub fn minimum_spanning_tree(costs: &impl LinkCosts, root: NodeId) -> Result<Tree, TreeError> {
    check_node(costs.node_count(), root)?;
    prim(costs, &all_nodes(costs.node_count()), root, Goal::Minimum)
}

/// [`minimum_spanning_tree`] over the subset `nodes` (e.g. the live nodes); other nodes are not
/// in the tree.
///
/// Errors: an id outside the model → [`TreeError::UnknownNode`]; empty `nodes` or `root` not
/// among them → [`TreeError::Invalid`]; a repeated node → [`TreeError::Duplicate`].
pub fn minimum_spanning_tree_over(
    costs: &impl LinkCosts,
    nodes: &[NodeId],
    root: NodeId,
) -> Result<Tree, TreeError> {
    prim(costs, nodes, root, Goal::Minimum)
}

/// Maximum-bottleneck tree: the maximum spanning tree of `bandwidth` (bigger is better), rooted
/// at `root`.
///
/// Edges are strictly ordered by `(-w, min id, max id)`. A maximum spanning tree is a widest-path
/// tree: every node's root path has the largest possible minimum-bandwidth link, so a pipelined
/// broadcast's throughput to it is as high as any tree allows. Children order as
/// [`minimum_spanning_tree`]. The costs are read as capacities whatever their
/// [`unit`](LinkCosts::unit) says.
///
/// Errors: `root` unknown → [`TreeError::UnknownNode`].
pub fn max_bottleneck_tree(bandwidth: &impl LinkCosts, root: NodeId) -> Result<Tree, TreeError> {
    check_node(bandwidth.node_count(), root)?;
    prim(
        bandwidth,
        &all_nodes(bandwidth.node_count()),
        root,
        Goal::Maximum,
    )
}
