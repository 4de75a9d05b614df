//! Divisible-load schedules for whole trees: bottom-up, every subtree becomes one equivalent
//! processor; top-down, every node learns its share of the total load.
//!
//! Bottom-up, a leaf keeps everything it receives (`beta = 1`). An internal node solves
//! equations (4)-(6) for its children with its own compute time as `w_0`; the resulting
//! `alpha_0` is its `beta`, and its parent sees it as one processor with `b = w beta`. Top-down,
//! the root receives the whole load; a node that receives the share `r` keeps `r beta` and
//! forwards `r alpha_i` to its `i`-th child. With these fractions every node finishes at the same
//! instant, `beta_root w_root`: the predicted finish time of the whole load.

use super::star::{fractions_unchecked, representable, theorem1_cmp, EquivalentChild};
use super::{non_negative, positive, DltError, OrderPolicy};
use crate::{Tree, TreeError};
use serde::{Deserialize, Serialize};
use windrose_model::{CostUnit, LinkCosts, NodeId};

/// One send of a parent: to whom and how much of the total load.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SendShare {
    /// The child sent to.
    pub child: NodeId,
    /// Share of the TOTAL load sent (the child's whole subtree's share).
    pub fraction: f64,
}

/// What one node of the tree does with the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeShare {
    /// The node.
    pub node: NodeId,
    /// Who sends to it (None for the root).
    pub parent: Option<NodeId>,
    /// Share of the TOTAL load it processes itself.
    pub fraction_kept: f64,
    /// Share of the TOTAL load it receives: what it keeps plus what it forwards (1 at the root).
    pub fraction_received: f64,
    /// Its children in the order it sends to them, with the share of the TOTAL load each gets.
    pub send_order: Vec<SendShare>,
    /// `fraction_kept / fraction_received`: the `alpha_0` of its subtree (1 for a leaf).
    pub beta: f64,
    /// Seconds it needs to process the whole load (input).
    pub compute_s_per_unit: f64,
    /// Seconds to send the whole load over the link from its parent (input; None at the root).
    pub link_s_per_unit: Option<f64>,
    /// When its whole share has arrived, in seconds from the start (0 at the root).
    pub received_at_s: f64,
    /// When it finishes its own share, in seconds: `received_at_s + fraction_kept *
    /// compute_s_per_unit`. Equal for every node (up to rounding).
    pub predicted_finish_s: f64,
}

/// The divisible-load schedule of a tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The node holding the load at the start.
    pub root: NodeId,
    /// How children were ordered.
    pub policy: OrderPolicy,
    /// When the whole load is processed, in seconds: `alpha_0 w_0 T_cp` at the root.
    pub predicted_finish_s: f64,
    /// Every member, breadth-first from the root, each parent's children in send order.
    pub nodes: Vec<NodeShare>,
}

impl Schedule {
    /// The entry of `node` (linear search; None when it is not in the tree).
    pub fn node(&self, node: NodeId) -> Option<&NodeShare> {
        self.nodes.iter().find(|s| s.node == node)
    }
}

/// The schedule of `tree` from per-node compute times and per-link transfer times.
///
/// `compute_s_per_unit[n]` is the seconds node `n` needs to process the whole load alone
/// (`w_n T_cp`, must be positive); `link_s_per_unit[c]` the seconds to send the whole load over
/// the link from `c`'s parent to `c` (`z_c T_cm`, must be non-negative; the root's entry is
/// ignored). Both are indexed by node id, must cover every member, and may not be longer than
/// [`Tree::node_count`]; entries of non-members are ignored.
pub fn schedule(
    tree: &Tree,
    compute_s_per_unit: &[f64],
    link_s_per_unit: &[f64],
    policy: OrderPolicy,
) -> Result<Schedule, DltError> {
    let members = members_bfs(tree)?;
    check_len("link_s_per_unit", link_s_per_unit.len(), tree, &members)?;
    schedule_checked(
        tree,
        &members,
        compute_s_per_unit,
        |_, c| link_s_per_unit[c.index()],
        policy,
    )
}

/// The schedule of `tree` with the link times given by a function: `link_s_per_unit(parent,
/// child)` is the seconds to send the whole load from `parent` to `child` (non-negative).
/// `compute_s_per_unit` is as in [`schedule`].
pub fn schedule_with_links(
    tree: &Tree,
    compute_s_per_unit: &[f64],
    link_s_per_unit: impl FnMut(NodeId, NodeId) -> f64,
    policy: OrderPolicy,
) -> Result<Schedule, DltError> {
    let members = members_bfs(tree)?;
    schedule_checked(tree, &members, compute_s_per_unit, link_s_per_unit, policy)
}

/// The schedule of `tree` for a load of `load_mb` megabytes, from the nodes' compute speeds in
/// MB/s (`compute_mb_s`, indexed by node id as in [`schedule`]) and the link bandwidths of a
/// cost model in [`CostUnit::BandwidthMbS`]: node `n` needs `load_mb / compute_mb_s[n]` seconds
/// for the whole load and the link `p -> c` needs `load_mb / bandwidth(p, c)` seconds.
///
/// The fractions do not depend on `load_mb`; the times scale with it.
pub fn schedule_from_model(
    tree: &Tree,
    links: &impl LinkCosts,
    compute_mb_s: &[f64],
    load_mb: f64,
    policy: OrderPolicy,
) -> Result<Schedule, DltError> {
    if links.unit() != CostUnit::BandwidthMbS {
        return Err(DltError::WrongUnit { unit: links.unit() });
    }
    if !positive(load_mb) {
        return Err(DltError::Parameter {
            what: "load_mb",
            value: load_mb,
        });
    }
    let members = members_bfs(tree)?;
    if let Some(&node) = members.iter().find(|n| n.index() >= links.node_count()) {
        return Err(DltError::NodeNotInModel {
            node,
            node_count: links.node_count(),
        });
    }
    check_len("compute_mb_s", compute_mb_s.len(), tree, &members)?;
    let mut compute_s = vec![0.0; tree.node_count()];
    for &n in &members {
        let speed = compute_mb_s[n.index()];
        if !positive(speed) {
            return Err(DltError::NodeSpeed {
                node: n,
                what: "compute_mb_s",
                value: speed,
            });
        }
        compute_s[n.index()] = load_mb / speed;
        if !positive(compute_s[n.index()]) {
            return Err(DltError::NodeSpeed {
                node: n,
                what: "compute_s_per_unit (load_mb / compute_mb_s)",
                value: compute_s[n.index()],
            });
        }
    }
    // Check the bandwidths first so the error names the model's number, not a derived one.
    for &c in &members {
        if let Some(p) = tree.parent(c) {
            let bw = links.cost(p, c);
            if !positive(bw) {
                return Err(DltError::LinkSpeed {
                    parent: p,
                    child: c,
                    what: "bandwidth_mb_s",
                    requirement: "a positive finite number",
                    value: bw,
                });
            }
        }
    }
    schedule_checked(
        tree,
        &members,
        &compute_s,
        |p, c| load_mb / links.cost(p, c),
        policy,
    )
}

/// Members of `tree` in breadth-first order, after checking that it really is a tree: the root
/// has no parent, every child names its parent back, nobody is reached twice, every member is
/// reached. (A `Tree` read with serde is not checked by [`Tree::from_edges`].)
fn members_bfs(tree: &Tree) -> Result<Vec<NodeId>, DltError> {
    let node_count = tree.node_count();
    let root = tree.root();
    if root.index() >= node_count {
        return Err(TreeError::UnknownNode {
            node: root,
            node_count,
        }
        .into());
    }
    if let Some(p) = tree.parent(root) {
        return Err(TreeError::Invalid(format!("the root {root} has a parent ({p})")).into());
    }
    let mut seen = vec![false; node_count];
    seen[root.index()] = true;
    let mut order = vec![root];
    let mut i = 0;
    while i < order.len() {
        let u = order[i];
        i += 1;
        for &c in tree.children(u) {
            if c.index() >= node_count {
                return Err(TreeError::UnknownNode {
                    node: c,
                    node_count,
                }
                .into());
            }
            if seen[c.index()] {
                return Err(TreeError::Duplicate { node: c }.into());
            }
            if tree.parent(c) != Some(u) {
                return Err(TreeError::Invalid(format!(
                    "node {c} is listed as a child of {u} but its parent is {}",
                    tree.parent(c)
                        .map_or_else(|| "none".to_string(), |p| p.to_string())
                ))
                .into());
            }
            seen[c.index()] = true;
            order.push(c);
        }
    }
    if let Some(&n) = tree
        .nodes()
        .iter()
        .find(|n| n.index() >= node_count || !seen[n.index()])
    {
        return Err(TreeError::Disconnected { node: n, root }.into());
    }
    if order.len() != tree.len() {
        let n = order.iter().copied().find(|n| !tree.nodes().contains(n));
        return Err(TreeError::Invalid(format!(
            "the tree lists {} members but {} are reachable from the root {root}{}",
            tree.len(),
            order.len(),
            n.map_or_else(String::new, |n| format!(" (e.g. node {n})"))
        ))
        .into());
    }
    Ok(order)
}

/// A per-node vector must cover every member and no id beyond the tree's id range.
fn check_len(
    what: &'static str,
    len: usize,
    tree: &Tree,
    members: &[NodeId],
) -> Result<(), DltError> {
    if let Some(&node) = members
        .iter()
        .filter(|n| n.index() >= len)
        .min_by_key(|n| n.index())
    {
        return Err(DltError::VectorTooShort { what, len, node });
    }
    if len > tree.node_count() {
        return Err(DltError::VectorTooLong {
            what,
            len,
            node_count: tree.node_count(),
        });
    }
    Ok(())
}

/// Validates the per-node and per-link times, then runs the bottom-up and top-down passes.
fn schedule_checked(
    tree: &Tree,
    members: &[NodeId],
    compute_s_per_unit: &[f64],
    mut link_s_per_unit: impl FnMut(NodeId, NodeId) -> f64,
    policy: OrderPolicy,
) -> Result<Schedule, DltError> {
    check_len(
        "compute_s_per_unit",
        compute_s_per_unit.len(),
        tree,
        members,
    )?;
    let n = tree.node_count();
    let mut compute = vec![0.0; n];
    let mut link = vec![0.0; n];
    for &u in members {
        let w = compute_s_per_unit[u.index()];
        if !positive(w) {
            return Err(DltError::NodeSpeed {
                node: u,
                what: "compute_s_per_unit",
                value: w,
            });
        }
        compute[u.index()] = w;
        if let Some(p) = tree.parent(u) {
            let z = link_s_per_unit(p, u);
            if !non_negative(z) {
                return Err(DltError::LinkSpeed {
                    parent: p,
                    child: u,
                    what: "link_s_per_unit",
                    requirement: "a non-negative finite number",
                    value: z,
                });
            }
            link[u.index()] = z;
        }
    }

    // Bottom-up: reverse breadth-first order visits every child before its parent.
    let mut beta = vec![1.0; n];
    let mut sends: Vec<Vec<(NodeId, f64)>> = vec![Vec::new(); n];
    for &u in members.iter().rev() {
        let mut kids = Vec::with_capacity(tree.children(u).len());
        for &c in tree.children(u) {
            let b = compute[c.index()] * beta[c.index()];
            if !positive(b) {
                return Err(DltError::Numerical { node: c });
            }
            kids.push(EquivalentChild::new(c, link[c.index()], b));
        }
        if policy == OrderPolicy::Optimal {
            kids.sort_by(theorem1_cmp);
        }
        let f = fractions_unchecked(compute[u.index()], &kids);
        if !representable(&f) {
            return Err(DltError::Numerical { node: u });
        }
        beta[u.index()] = f.alpha0;
        sends[u.index()] = f.children;
    }

    // Top-down: shares of the total load, arrival times in send order.
    let root = tree.root();
    let mut received = vec![0.0; n];
    let mut arrival = vec![0.0; n];
    received[root.index()] = 1.0;
    let mut order = vec![root];
    let mut i = 0;
    while i < order.len() {
        let u = order[i];
        i += 1;
        let mut t = arrival[u.index()];
        for &(c, alpha) in &sends[u.index()] {
            received[c.index()] = received[u.index()] * alpha;
            t += received[c.index()] * link[c.index()];
            arrival[c.index()] = t;
            order.push(c);
        }
    }
    let nodes = order
        .iter()
        .map(|&u| {
            let k = u.index();
            let kept = received[k] * beta[k];
            NodeShare {
                node: u,
                parent: tree.parent(u),
                fraction_kept: kept,
                fraction_received: received[k],
                send_order: sends[k]
                    .iter()
                    .map(|&(c, _)| SendShare {
                        child: c,
                        fraction: received[c.index()],
                    })
                    .collect(),
                beta: beta[k],
                compute_s_per_unit: compute[k],
                link_s_per_unit: tree.parent(u).map(|_| link[k]),
                received_at_s: arrival[k],
                predicted_finish_s: arrival[k] + kept * compute[k],
            }
        })
        .collect();
    Ok(Schedule {
        root,
        policy,
        predicted_finish_s: beta[root.index()] * compute[root.index()],
        nodes,
    })
}
