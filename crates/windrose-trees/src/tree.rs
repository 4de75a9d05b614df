//! One tree type for every broadcast tree windrose builds: who is the root, each node's parent,
//! its children in the order it sends to them, and its depth.

use serde::{Deserialize, Serialize};
use windrose_model::{LinkCosts, NodeId};

/// Something wrong with a tree or with how it was asked for.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum TreeError {
    /// A node id outside the cost model.
    #[error("unknown node {node}: the cost model has {node_count} nodes")]
    UnknownNode { node: NodeId, node_count: usize },
    /// A node given a parent twice, or the root given a parent.
    #[error("node {node} appears more than once in the tree")]
    Duplicate { node: NodeId },
    /// A node whose parent is not in the tree, or a cycle.
    #[error("node {node} is not connected to the root {root}")]
    Disconnected { node: NodeId, root: NodeId },
    /// An operation that needs a non-empty tree or a non-root node.
    #[error("{0}")]
    Invalid(String),
}

/// A rooted spanning tree over a set of nodes (all nodes of a cost model, or the live ones).
///
/// Per-node data is indexed by node id; nodes that are not members have no parent and no
/// children. `children(n)` is in send order: a node sends to its first child first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    root: NodeId,
    parent: Vec<Option<NodeId>>,
    children: Vec<Vec<NodeId>>,
    depth: Vec<u32>,
    member: Vec<bool>,
    /// Members in breadth-first order from the root.
    order: Vec<NodeId>,
}

impl Tree {
    /// Builds a tree from its root and each other member's `(child, parent)` edge.
    ///
    /// Children are kept in the order their edges appear. `node_count` sizes the per-node
    /// tables (ids must be below it).
    pub fn from_edges(
        node_count: usize,
        root: NodeId,
        edges: &[(NodeId, NodeId)],
    ) -> Result<Tree, TreeError> {
        let check = |n: NodeId| {
            if n.index() < node_count {
                Ok(())
            } else {
                Err(TreeError::UnknownNode {
                    node: n,
                    node_count,
                })
            }
        };
        check(root)?;
        let mut parent = vec![None; node_count];
        let mut children = vec![Vec::new(); node_count];
        let mut has_parent = vec![false; node_count];
        for &(c, p) in edges {
            check(c)?;
            check(p)?;
            if c == root || has_parent[c.index()] {
                return Err(TreeError::Duplicate { node: c });
            }
            has_parent[c.index()] = true;
            parent[c.index()] = Some(p);
            children[p.index()].push(c);
        }
        let mut depth = vec![0u32; node_count];
        let mut member = vec![false; node_count];
        let mut order = Vec::with_capacity(edges.len() + 1);
        member[root.index()] = true;
        order.push(root);
        let mut i = 0;
        while i < order.len() {
            let u = order[i];
            i += 1;
            for &c in &children[u.index()] {
                member[c.index()] = true;
                depth[c.index()] = depth[u.index()] + 1;
                order.push(c);
            }
        }
        if let Some(&(c, _)) = edges.iter().find(|(c, _)| !member[c.index()]) {
            return Err(TreeError::Disconnected { node: c, root });
        }
        Ok(Tree {
            root,
            parent,
            children,
            depth,
            member,
            order,
        })
    }

    /// The node every broadcast starts from.
    pub fn root(&self) -> NodeId {
        self.root
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Never true: a tree has at least its root.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Size of the per-node tables (one more than the largest id they can hold).
    pub fn node_count(&self) -> usize {
        self.parent.len()
    }

    /// True when `node` is in the tree.
    pub fn contains(&self, node: NodeId) -> bool {
        self.member.get(node.index()).copied().unwrap_or(false)
    }

    /// Parent of `node` (None for the root and for non-members).
    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        self.parent.get(node.index()).copied().flatten()
    }

    /// Children of `node` in send order.
    pub fn children(&self, node: NodeId) -> &[NodeId] {
        self.children
            .get(node.index())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Edges from the root down to `node`.
    pub fn depth(&self, node: NodeId) -> u32 {
        self.depth[node.index()]
    }

    /// Members in breadth-first order from the root.
    pub fn nodes(&self) -> &[NodeId] {
        &self.order
    }

    /// Members without children, ascending by id.
    pub fn leaves(&self) -> Vec<NodeId> {
        let mut l: Vec<NodeId> = self
            .order
            .iter()
            .copied()
            .filter(|&n| self.children(n).is_empty())
            .collect();
        l.sort();
        l
    }

    /// Every `(child, parent)` edge, in breadth-first order of the child.
    pub fn edges(&self) -> Vec<(NodeId, NodeId)> {
        self.order
            .iter()
            .filter_map(|&c| self.parent(c).map(|p| (c, p)))
            .collect()
    }

    /// Sum of link costs from the root to `node`.
    pub fn path_cost(&self, node: NodeId, costs: &impl LinkCosts) -> f64 {
        let mut total = 0.0;
        let mut n = node;
        while let Some(p) = self.parent(n) {
            total += costs.cost(p, n);
            n = p;
        }
        total
    }

    /// Path cost of every node, indexed by node id (0 for non-members), computed top-down.
    pub fn path_costs(&self, costs: &impl LinkCosts) -> Vec<f64> {
        let mut pc = vec![0.0; self.node_count()];
        for &u in &self.order {
            if let Some(p) = self.parent(u) {
                pc[u.index()] = pc[p.index()] + costs.cost(p, u);
            }
        }
        pc
    }

    /// `(leaf, root-to-leaf path cost)` for every leaf, ascending by leaf id.
    pub fn leaf_path_costs(&self, costs: &impl LinkCosts) -> Vec<(NodeId, f64)> {
        let pc = self.path_costs(costs);
        self.leaves()
            .into_iter()
            .map(|l| (l, pc[l.index()]))
            .collect()
    }

    /// The tree cost of Figueira & Mendes: the costliest root-to-leaf path.
    pub fn cost(&self, costs: &impl LinkCosts) -> f64 {
        self.path_costs(costs).into_iter().fold(0.0, f64::max)
    }

    /// Sum of the costs of all edges (what a minimum spanning tree minimises).
    pub fn total_edge_cost(&self, costs: &impl LinkCosts) -> f64 {
        self.edges().iter().map(|&(c, p)| costs.cost(p, c)).sum()
    }

    /// Time for a broadcast to reach every member under a simple latency model: a node that has
    /// the message sends it to its children one after the other in send order, each send
    /// occupying the sender for `send_gap` (in the cost's unit, e.g. ms), and the message arrives
    /// `cost(parent, child)` after its send completes. With `send_gap = 0` this is the tree cost.
    pub fn broadcast_time(&self, costs: &impl LinkCosts, send_gap: f64) -> f64 {
        let mut arrival = vec![0.0; self.node_count()];
        let mut last = 0.0f64;
        for &u in &self.order {
            let t = arrival[u.index()];
            last = last.max(t);
            for (i, &c) in self.children(u).iter().enumerate() {
                arrival[c.index()] = t + (i as f64 + 1.0) * send_gap + costs.cost(u, c);
            }
        }
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_model::fixtures::table1;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn builds_and_measures() {
        let m = table1();
        // root 0 -> 3 -> 6, 0 -> 7
        let t = Tree::from_edges(8, n(0), &[(n(3), n(0)), (n(6), n(3)), (n(7), n(0))]).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.children(n(0)), &[n(3), n(7)]);
        assert_eq!(t.depth(n(6)), 2);
        assert_eq!(t.leaves(), vec![n(6), n(7)]);
        assert_eq!(t.cost(&m), 0.0);
        assert!(!t.contains(n(5)));
        assert_eq!(t.broadcast_time(&m, 1.0), 2.0);
    }

    #[test]
    fn rejects_broken_trees() {
        assert!(matches!(
            Tree::from_edges(3, n(0), &[(n(1), n(2)), (n(2), n(1))]),
            Err(TreeError::Disconnected { .. })
        ));
        assert!(matches!(
            Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(1), n(0))]),
            Err(TreeError::Duplicate { .. })
        ));
        assert!(matches!(
            Tree::from_edges(3, n(0), &[(n(5), n(0))]),
            Err(TreeError::UnknownNode { .. })
        ));
    }
}
