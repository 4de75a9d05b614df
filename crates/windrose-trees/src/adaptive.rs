//! Dynamically adaptive binomial trees (Figueira & Mendes): a binomial-shaped tree whose
//! positions hold nodes, with the tree cost (costliest root-to-leaf path) kept incrementally.
//!
//! # Incremental cost
//! Position order is a depth-first order in which every subtree is a contiguous interval
//! (see [`crate::binomial`]). A segment tree over positions stores each position's root path
//! cost with lazy range-add and max. Changing the edge into position c adds the same delta to
//! every path in c's subtree: one range-add, O(log N). A swap of the nodes at two positions
//! changes at most the edges into them and out of them: O(degree) range-adds, so evaluating a
//! swap costs **O(degree · log N) = O(log² N)** instead of the paper's O(N) walk over affected
//! leaves. A trial swap writes nothing: the few edge deltas it implies are folded into one
//! bottom-up pass over the segment tree's touched ancestor paths
//! ([`MaxAddTree::max_after_subtree_adds`]), so the stored costs stay bit-for-bit unchanged. Joins and leaves change the
//! last position and one more: O(log N) plus the strategy's trials.

use crate::binomial::{self, Position};
use crate::segtree::MaxAddTree;
use crate::sharing::SharedPaths;
use crate::{Tree, TreeError};
use serde::{Deserialize, Serialize};
use windrose_model::{LinkCosts, NodeId};

/// The four swapping strategies of the paper.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Family_Swapping (3.1): the child end with its children, its parent, its siblings.
    Family,
    /// Path_Swapping (3.2): the parent end up towards the root, alternating with the child end
    /// down its costliest path.
    Path,
    /// Leaf_Swapping (3.3): each leaf in ascending position, with the parent end then the child
    /// end.
    Leaf,
    /// Position_Swapping (3.4): the parent end with positions x+1, x−1, x+2, x−2, …
    Position,
}

impl Strategy {
    /// All four, in the paper's order of presentation.
    pub const ALL: [Strategy; 4] = [
        Strategy::Family,
        Strategy::Path,
        Strategy::Leaf,
        Strategy::Position,
    ];

    /// Lower-case name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Family => "family",
            Strategy::Path => "path",
            Strategy::Leaf => "leaf",
            Strategy::Position => "position",
        }
    }
}

/// One swap a strategy evaluated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwapTrial {
    /// The node the strategy was finding a better place for.
    pub moved: NodeId,
    /// The node it was exchanged with.
    pub with: NodeId,
    /// Positions of `moved` and `with` before the swap.
    pub positions: (Position, Position),
    /// Tree cost with the swap in place.
    pub cost: f64,
}

/// What an adaptation did: the costs around the change, every swap tried, and the one made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptReport {
    /// Tree cost before the change (the target a strategy tries to get back to).
    pub cost_before: f64,
    /// Tree cost right after the change (link rise, join, or replacement of a failed node),
    /// before any swap: the paper's `increased_cost`.
    pub cost_after_change: f64,
    /// Tree cost at the end.
    pub final_cost: f64,
    /// Swaps evaluated, in order; `steps()` is their number.
    pub tried: Vec<SwapTrial>,
    /// The swap performed, if any.
    pub made: Option<SwapTrial>,
}

impl AdaptReport {
    /// The paper's steps: the number of swaps evaluated.
    pub fn steps(&self) -> usize {
        self.tried.len()
    }

    /// The paper's gain: `(increased_cost - new_cost) / increased_cost` (0 when the change left
    /// a zero-cost tree).
    pub fn gain(&self) -> f64 {
        if self.cost_after_change > 0.0 {
            (self.cost_after_change - self.final_cost) / self.cost_after_change
        } else {
            0.0
        }
    }

    /// True when the final cost is no higher than before the change.
    pub fn reached_target(&self) -> bool {
        self.final_cost <= self.cost_before
    }
}

/// A binomial-shaped broadcast tree over positions `0..len()`, each holding one node, with
/// incremental path costs.
#[derive(Clone, Debug)]
pub struct AdaptiveTree {
    /// Node at each position.
    nodes: Vec<NodeId>,
    /// Position of each node id (None for ids not in the tree).
    pos_of: Vec<Option<Position>>,
    /// Cost of the edge into each position (0 for the root).
    edge: Vec<f64>,
    /// Root path cost of every position, with lazy range-add and max.
    paths: MaxAddTree,
    /// Reused buffer of trial edge deltas.
    scratch: Vec<(Position, f64)>,
}

/// What a strategy is repairing: a link whose cost rose (parent and child positions), or a node
/// that was just placed (a join, or the replacement of a failed node).
#[derive(Copy, Clone, Debug)]
enum Focus {
    Link { parent: Position, child: Position },
    Node(Position),
}

/// Relative slack when comparing a trial's cost with the target, so that float rounding in
/// latency sums never turns "back to the old cost" into "still worse".
const COST_SLACK: f64 = 1e-9;

fn at_most(cost: f64, target: f64) -> bool {
    cost <= target + COST_SLACK * target.abs().max(1.0)
}

impl AdaptiveTree {
    /// A tree with `nodes[p]` at position p (`nodes[0]` is the root).
    pub fn from_positions(costs: &impl LinkCosts, nodes: Vec<NodeId>) -> Result<Self, TreeError> {
        if nodes.is_empty() {
            return Err(TreeError::Invalid("a tree needs at least its root".into()));
        }
        let node_count = costs.node_count();
        let mut pos_of = vec![None; node_count];
        for (p, &node) in nodes.iter().enumerate() {
            if node.index() >= node_count {
                return Err(TreeError::UnknownNode { node, node_count });
            }
            if pos_of[node.index()].replace(p).is_some() {
                return Err(TreeError::Duplicate { node });
            }
        }
        let mut edge = vec![0.0; nodes.len()];
        let mut path = vec![0.0; nodes.len()];
        for p in 1..nodes.len() {
            let q = binomial::parent(p);
            edge[p] = costs.cost(nodes[q], nodes[p]);
            path[p] = path[q] + edge[p];
        }
        Ok(AdaptiveTree {
            nodes,
            pos_of,
            edge,
            paths: MaxAddTree::from_values(&path),
            scratch: Vec::new(),
        })
    }

    /// The Balanced-Path tree over every node of `costs`, rooted at `root`.
    pub fn balanced_path(costs: &impl LinkCosts, root: NodeId) -> Result<Self, TreeError> {
        Self::from_positions(costs, crate::balanced_path::balanced_path(costs, root)?)
    }

    /// Number of positions (= nodes in the tree).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true: the root is always there.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node at position 0.
    pub fn root(&self) -> NodeId {
        self.nodes[0]
    }

    /// The node at each position.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// The node at position `p`.
    pub fn node_at(&self, p: Position) -> NodeId {
        self.nodes[p]
    }

    /// The position of `node`, if it is in the tree.
    pub fn position_of(&self, node: NodeId) -> Option<Position> {
        self.pos_of.get(node.index()).copied().flatten()
    }

    /// The tree cost: the costliest root-to-leaf path. O(1).
    pub fn cost(&self) -> f64 {
        self.paths.max()
    }

    /// Root path cost of position `p`. O(log N).
    pub fn path_cost(&self, p: Position) -> f64 {
        self.paths.get(p)
    }

    /// `(position, node, path cost)` of every leaf, ascending by position (the paper's tables).
    pub fn leaf_costs(&self) -> Vec<(Position, NodeId, f64)> {
        binomial::leaves(self.len())
            .map(|p| (p, self.nodes[p], self.paths.get(p)))
            .collect()
    }

    /// The tree as a general [`Tree`], children in binomial send order (largest subtree first).
    pub fn to_tree(&self) -> Tree {
        let n = self.len();
        let edges: Vec<(NodeId, NodeId)> = (0..n)
            .flat_map(|p| binomial::children(p, n).map(move |c| (c, p)))
            .map(|(c, p)| (self.nodes[c], self.nodes[p]))
            .collect();
        let node_count = self.nodes.iter().map(|n| n.index() + 1).max().unwrap_or(0);
        Tree::from_edges(node_count.max(self.pos_of.len()), self.root(), &edges)
            .expect("an adaptive tree is always a spanning tree of its members")
    }

    /// The tree cost recomputed from scratch by walking every position: O(N). For checks and
    /// benchmarks; [`cost`](Self::cost) gives the same number in O(1).
    pub fn cost_from_scratch(&self, costs: &impl LinkCosts) -> f64 {
        let mut path = vec![0.0; self.len()];
        let mut worst = 0.0f64;
        for p in 1..self.len() {
            let q = binomial::parent(p);
            path[p] = path[q] + costs.cost(self.nodes[q], self.nodes[p]);
            worst = worst.max(path[p]);
        }
        worst
    }

    fn check_swappable(&self, x: Position, y: Position) -> Result<(), TreeError> {
        let n = self.len();
        if x >= n || y >= n {
            return Err(TreeError::Invalid(format!(
                "position {} is outside the tree (positions 0 to {})",
                x.max(y),
                n.saturating_sub(1)
            )));
        }
        if x == 0 || y == 0 {
            return Err(TreeError::Invalid("the root is never swapped".into()));
        }
        Ok(())
    }

    /// Tree cost if the nodes at positions `x` and `y` were swapped; the tree is unchanged
    /// afterwards. O(degree · log N).
    pub fn swap_cost(
        &mut self,
        costs: &impl LinkCosts,
        x: Position,
        y: Position,
    ) -> Result<f64, TreeError> {
        self.check_swappable(x, y)?;
        Ok(self.trial_cost(costs, x, y))
    }

    /// Swaps the nodes at positions `x` and `y` (neither the root). O(degree · log N).
    pub fn swap(
        &mut self,
        costs: &impl LinkCosts,
        x: Position,
        y: Position,
    ) -> Result<(), TreeError> {
        self.check_swappable(x, y)?;
        self.apply_swap(costs, x, y);
        Ok(())
    }

    fn trial_cost(&mut self, costs: &impl LinkCosts, x: Position, y: Position) -> f64 {
        if x == y {
            return self.cost();
        }
        let n = self.len();
        let (nx, ny) = (self.nodes[x], self.nodes[y]);
        let at = |p: Position| {
            if p == x {
                ny
            } else if p == y {
                nx
            } else {
                self.nodes[p]
            }
        };
        let mut adds = std::mem::take(&mut self.scratch);
        adds.clear();
        let fx = std::iter::once(x).chain(binomial::children(x, n));
        let fy = std::iter::once(y)
            .chain(binomial::children(y, n))
            .filter(|&c| c != x && !(c == y && binomial::parent(y) == x));
        for c in fx.chain(fy) {
            let new = costs.cost(at(binomial::parent(c)), at(c));
            let delta = new - self.edge[c];
            if delta != 0.0 {
                adds.push((c, delta));
            }
        }
        let cost = self.paths.max_after_subtree_adds(&mut adds);
        self.scratch = adds;
        cost
    }

    /// Exchanges the nodes at x and y in the position tables only.
    fn exchange(&mut self, x: Position, y: Position) {
        self.nodes.swap(x, y);
        self.pos_of[self.nodes[x].index()] = Some(x);
        self.pos_of[self.nodes[y].index()] = Some(y);
    }

    /// Swaps nodes and updates every edge that changed.
    fn apply_swap(&mut self, costs: &impl LinkCosts, x: Position, y: Position) {
        if x == y {
            return;
        }
        self.exchange(x, y);
        let n = self.len();
        let mut touched: [Position; 2 * (usize::BITS as usize + 1)] =
            [0; 2 * (usize::BITS as usize + 1)];
        let mut k = 0;
        for p in [x, y] {
            touched[k] = p;
            k += 1;
            for c in binomial::children(p, n) {
                touched[k] = c;
                k += 1;
            }
        }
        let touched = &mut touched[..k];
        touched.sort_unstable();
        let mut last = usize::MAX;
        for &c in touched.iter() {
            if c == last || c == 0 {
                continue;
            }
            last = c;
            self.refresh_edge(costs, c);
        }
    }

    /// Recomputes the edge into position `c` from the current nodes and shifts c's subtree.
    fn refresh_edge(&mut self, costs: &impl LinkCosts, c: Position) {
        let new = costs.cost(self.nodes[binomial::parent(c)], self.nodes[c]);
        let old = self.edge[c];
        if new != old {
            self.edge[c] = new;
            self.paths.add_subtree(c, new - old);
        }
    }

    /// The tree link between `a` and `b` as (parent position, child position), if they are
    /// neighbours in the tree.
    pub fn tree_link(&self, a: NodeId, b: NodeId) -> Option<(Position, Position)> {
        let (pa, pb) = (self.position_of(a)?, self.position_of(b)?);
        if pb > 0 && binomial::parent(pb) == pa {
            Some((pa, pb))
        } else if pa > 0 && binomial::parent(pa) == pb {
            Some((pb, pa))
        } else {
            None
        }
    }

    fn require_member(&self, node: NodeId) -> Result<Position, TreeError> {
        self.position_of(node)
            .ok_or_else(|| TreeError::Invalid(format!("node {node} is not in the tree")))
    }

    /// Takes a new cost of the link `a`–`b` (already in `costs`) into the path costs, without
    /// swapping anything: what the paper does when a link gets cheaper. Returns the tree link as
    /// (parent position, child position), or None when `a`–`b` is not a tree link (then nothing
    /// changes). O(log N).
    pub fn update_link_cost(
        &mut self,
        costs: &impl LinkCosts,
        a: NodeId,
        b: NodeId,
    ) -> Result<Option<(Position, Position)>, TreeError> {
        self.require_member(a)?;
        self.require_member(b)?;
        let link = self.tree_link(a, b);
        if let Some((_, child)) = link {
            self.refresh_edge(costs, child);
        }
        Ok(link)
    }

    /// Reacts to a new cost of the link `a`–`b` (already in `costs`). If it is a tree link and
    /// the tree cost rose, `strategy` looks for a swap that brings the cost back to at most its
    /// value before the change; a cheaper link only updates the costs.
    pub fn on_link_cost_change(
        &mut self,
        costs: &impl LinkCosts,
        a: NodeId,
        b: NodeId,
        strategy: Strategy,
    ) -> Result<AdaptReport, TreeError> {
        let cost_before = self.cost();
        let link = self.update_link_cost(costs, a, b)?;
        let focus = link.map(|(parent, child)| Focus::Link { parent, child });
        Ok(self.repair(costs, cost_before, focus, Some(strategy)))
    }

    /// Carries `strategy` on as a local search: while the tree has a swap among those the
    /// strategy tries around the costliest link of its costliest root-to-leaf path that lowers
    /// the tree cost, makes it; stops when none does or after `max_swaps` swaps. The paper
    /// makes one swap per change, which a large change (a WAN link ten times slower) can leave
    /// far from a good tree; each round here costs what one such repair costs, and the cost
    /// never rises. Returns each round's report (the last one made no swap, unless the limit
    /// stopped it).
    pub fn improve(
        &mut self,
        costs: &impl LinkCosts,
        strategy: Strategy,
        max_swaps: usize,
    ) -> Vec<AdaptReport> {
        let mut rounds = Vec::new();
        while rounds.len() < max_swaps && self.len() > 1 {
            // The leaf of the costliest path, then the costliest edge on its way up.
            let Some((leaf, _, _)) = self
                .leaf_costs()
                .into_iter()
                .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)))
            else {
                break;
            };
            let (parent, child) = costliest_edge_above(leaf, &self.edge);
            let report = self.repair(
                costs,
                just_below(self.cost()),
                Some(Focus::Link { parent, child }),
                Some(strategy),
            );
            let made = report.made.is_some();
            rounds.push(report);
            if !made {
                break;
            }
        }
        rounds
    }

    /// Adds `node` (already in `costs`) at the next binomial position, then, if that raised the
    /// tree cost, runs `strategy` on it (the paper uses Position_Swapping). O(log N) plus the
    /// strategy's trials.
    pub fn join(
        &mut self,
        costs: &impl LinkCosts,
        node: NodeId,
        strategy: Option<Strategy>,
    ) -> Result<AdaptReport, TreeError> {
        costs.check_node(node).map_err(|_| TreeError::UnknownNode {
            node,
            node_count: costs.node_count(),
        })?;
        if self.position_of(node).is_some() {
            return Err(TreeError::Invalid(format!(
                "node {node} is already in the tree"
            )));
        }
        let cost_before = self.cost();
        let p = self.len();
        if self.pos_of.len() <= node.index() {
            self.pos_of.resize(node.index() + 1, None);
        }
        self.nodes.push(node);
        self.pos_of[node.index()] = Some(p);
        let q = binomial::parent(p);
        let e = costs.cost(self.nodes[q], node);
        self.edge.push(e);
        self.paths.set(p, self.paths.get(q) + e);
        Ok(self.repair(costs, cost_before, Some(Focus::Node(p)), strategy))
    }

    /// Removes `node` (it left or failed). The node at the last position takes its place, then,
    /// if that raised the tree cost, `strategy` runs on the replacement (the paper uses
    /// Path_Swapping or Position_Swapping). The root cannot leave.
    pub fn leave(
        &mut self,
        costs: &impl LinkCosts,
        node: NodeId,
        strategy: Option<Strategy>,
    ) -> Result<AdaptReport, TreeError> {
        let p = self.require_member(node)?;
        if p == 0 {
            return Err(TreeError::Invalid(format!(
                "node {node} is the root; a broadcast tree cannot lose its root"
            )));
        }
        let cost_before = self.cost();
        let last = self.len() - 1;
        let replacement = self.nodes[last];
        self.paths.pop();
        self.nodes.pop();
        self.edge.pop();
        self.pos_of[node.index()] = None;
        if p == last {
            return Ok(self.repair(costs, cost_before, None, None));
        }
        self.nodes[p] = replacement;
        self.pos_of[replacement.index()] = Some(p);
        let n = self.len();
        self.refresh_edge(costs, p);
        for c in binomial::children(p, n) {
            self.refresh_edge(costs, c);
        }
        Ok(self.repair(costs, cost_before, Some(Focus::Node(p)), strategy))
    }

    /// Runs `strategy` when the change raised the cost above `cost_before`; stops at the first
    /// trial that is back at or below it, else performs the best trial if it beats the current
    /// cost.
    fn repair(
        &mut self,
        costs: &impl LinkCosts,
        cost_before: f64,
        focus: Option<Focus>,
        strategy: Option<Strategy>,
    ) -> AdaptReport {
        self.repair_by(
            costs,
            cost_before,
            focus,
            strategy,
            &|t: &Self| t.cost(),
            &mut |t: &mut Self, x, y| t.trial_cost(costs, x, y),
        )
    }

    /// [`repair`](Self::repair) with the tree cost given by `measure` and a trial swap's by
    /// `trial` (the plain costs, or the sharing-aware ones).
    fn repair_by(
        &mut self,
        costs: &impl LinkCosts,
        cost_before: f64,
        focus: Option<Focus>,
        strategy: Option<Strategy>,
        measure: &dyn Fn(&Self) -> f64,
        trial: &mut dyn FnMut(&mut Self, Position, Position) -> f64,
    ) -> AdaptReport {
        let cost_after_change = measure(self);
        let mut report = AdaptReport {
            cost_before,
            cost_after_change,
            final_cost: cost_after_change,
            tried: Vec::new(),
            made: None,
        };
        let (Some(focus), Some(strategy)) = (focus, strategy) else {
            return report;
        };
        if at_most(cost_after_change, cost_before) {
            return report;
        }
        let candidates = self.candidates(focus, strategy);
        let mut best: Option<usize> = None;
        let mut reached = None;
        for (moved, other) in candidates {
            let cost = trial(self, moved, other);
            report.tried.push(SwapTrial {
                moved: self.nodes[moved],
                with: self.nodes[other],
                positions: (moved, other),
                cost,
            });
            let i = report.tried.len() - 1;
            if at_most(cost, cost_before) {
                reached = Some(i);
                break;
            }
            if best.is_none_or(|b| cost < report.tried[b].cost) {
                best = Some(i);
            }
        }
        let chosen = reached.or(best.filter(|&b| report.tried[b].cost < cost_after_change));
        if let Some(i) = chosen {
            let (x, y) = report.tried[i].positions;
            self.apply_swap(costs, x, y);
            report.made = Some(report.tried[i].clone());
        }
        report.final_cost = measure(self);
        report
    }

    /// The swaps `strategy` would try, in order, after the cost of the tree link `a`–`b` rose:
    /// `(node being moved, node it is exchanged with)`. A run stops early when a swap reaches
    /// the target, so the swaps it reports are a prefix of this list.
    pub fn visiting_order_for_link(
        &self,
        a: NodeId,
        b: NodeId,
        strategy: Strategy,
    ) -> Result<Vec<(NodeId, NodeId)>, TreeError> {
        let (parent, child) = self
            .tree_link(a, b)
            .ok_or_else(|| TreeError::Invalid(format!("{a}-{b} is not a link of the tree")))?;
        Ok(self.named(self.candidates(Focus::Link { parent, child }, strategy)))
    }

    /// The swaps `strategy` would try for a node just placed (a join or a replacement), in
    /// order: `(node, node it is exchanged with)`.
    pub fn visiting_order_for_node(
        &self,
        node: NodeId,
        strategy: Strategy,
    ) -> Result<Vec<(NodeId, NodeId)>, TreeError> {
        let p = self.require_member(node)?;
        Ok(self.named(self.candidates(Focus::Node(p), strategy)))
    }

    fn named(&self, swaps: Vec<(Position, Position)>) -> Vec<(NodeId, NodeId)> {
        swaps
            .into_iter()
            .map(|(x, y)| (self.nodes[x], self.nodes[y]))
            .collect()
    }

    /// The swaps a strategy tries, in the paper's visiting order, as (moved, other) positions.
    /// Never includes the root.
    fn candidates(&self, focus: Focus, strategy: Strategy) -> Vec<(Position, Position)> {
        let n = self.len();
        let (upper, lower) = match focus {
            Focus::Link { parent, child } => (parent, child),
            Focus::Node(p) => (p, p),
        };
        let mut out = Vec::new();
        match strategy {
            Strategy::Family => {
                // The child end with its children, its parent, then its siblings (ascending).
                let b = lower;
                let mut kids: Vec<Position> = binomial::children(b, n).collect();
                kids.reverse();
                out.extend(kids.into_iter().map(|c| (b, c)));
                let a = binomial::parent(b);
                if a != 0 {
                    out.push((b, a));
                }
                let mut sibs: Vec<Position> =
                    binomial::children(a, n).filter(|&s| s != b).collect();
                sibs.reverse();
                out.extend(sibs.into_iter().map(|s| (b, s)));
            }
            Strategy::Path => {
                // Parent end up towards the root, alternating with the child end down its
                // costliest path.
                let up: Vec<(Position, Position)> = binomial::ancestors(upper)
                    .filter(|&q| q != 0)
                    .map(|q| (upper, q))
                    .collect();
                let down: Vec<(Position, Position)> = self
                    .costliest_path_below(lower)
                    .into_iter()
                    .map(|d| (lower, d))
                    .collect();
                let (mut u, mut d) = (up.into_iter(), down.into_iter());
                loop {
                    let (x, y) = (u.next(), d.next());
                    if x.is_none() && y.is_none() {
                        break;
                    }
                    out.extend(x);
                    out.extend(y);
                }
            }
            Strategy::Leaf => {
                // Every leaf in ascending position, with the parent end then the child end.
                for leaf in binomial::leaves(n) {
                    for m in [upper, lower] {
                        if m != 0
                            && leaf != upper
                            && leaf != lower
                            && out.last() != Some(&(m, leaf))
                        {
                            out.push((m, leaf));
                        }
                    }
                }
            }
            Strategy::Position => {
                // The parent end (the child end if the parent is the root) with x+1, x-1, x+2, …
                let x = if upper != 0 { upper } else { lower };
                for k in 1..n {
                    if x + k < n {
                        out.push((x, x + k));
                    }
                    if k < x {
                        out.push((x, x - k));
                    }
                }
            }
        }
        out.retain(|&(m, o)| m != 0 && o != 0 && m != o);
        out
    }

    /// Positions below `p` along its costliest path to a leaf: at each step the child whose
    /// subtree holds the costliest root path (ties to the larger subtree).
    fn costliest_path_below(&self, p: Position) -> Vec<Position> {
        let n = self.len();
        let mut out = Vec::new();
        let mut at = p;
        loop {
            let mut best: Option<(f64, Position)> = None;
            for c in binomial::children(at, n) {
                let m = self.paths.range_max(c, binomial::subtree_end(c, n));
                if best.is_none_or(|(bm, _)| m > bm) {
                    best = Some((m, c));
                }
            }
            match best {
                Some((_, c)) => {
                    out.push(c);
                    at = c;
                }
                None => return out,
            }
        }
    }
}

/// The costliest edge, by `edge` (the cost of the edge into each position), on the way from
/// `leaf` up to the root (ties: the deepest), as (parent, child): where the improving rounds
/// focus their swaps.
fn costliest_edge_above(leaf: Position, edge: &[f64]) -> (Position, Position) {
    let mut child = leaf;
    let mut p = leaf;
    while p != 0 {
        if edge[p] > edge[child] {
            child = p;
        }
        p = binomial::parent(p);
    }
    (binomial::parent(child), child)
}

/// The target of an improving round: just below `cost`, so that any swap that lowers the
/// cost is taken.
fn just_below(cost: f64) -> f64 {
    cost - 1e-6 * cost.abs().max(1.0)
}

/// Sharing-aware evaluation ([`crate::sharing`]): the tree cost with every edge priced at the
/// number of tree edges that cross its path. An option beside the paper's strategies, which
/// are unchanged: the same visiting orders, each trial ranked by the sharing-aware cost (an
/// O(N) walk, where the plain cost's trial is O(log² N)), because moving one node changes the
/// price of every edge on the paths it leaves and joins.
impl AdaptiveTree {
    /// Every node of the tree is a node of `shared`.
    fn check_shared(&self, shared: &impl SharedPaths) -> Result<(), TreeError> {
        let node_count = shared.node_count();
        match self.nodes.iter().find(|n| n.index() >= node_count) {
            Some(&node) => Err(TreeError::UnknownNode { node, node_count }),
            None => Ok(()),
        }
    }

    /// The sharing-aware cost of the edge into every position and the root path cost of
    /// every position. O(N + P) for path indices below P.
    fn shared_paths(&self, shared: &impl SharedPaths) -> (Vec<f64>, Vec<f64>) {
        let n = self.len();
        let mut on_path = vec![None; n];
        let mut count: Vec<usize> = Vec::new();
        for (p, slot) in on_path.iter_mut().enumerate().skip(1) {
            let k = shared.path(self.nodes[binomial::parent(p)], self.nodes[p]);
            if let Some(k) = k {
                if k >= count.len() {
                    count.resize(k + 1, 0);
                }
                count[k] += 1;
            }
            *slot = k;
        }
        let (mut edge, mut path) = (vec![0.0; n], vec![0.0; n]);
        for p in 1..n {
            // A parent's position is below its children's: its path is already known.
            let q = binomial::parent(p);
            let k = on_path[p].map_or(1, |k| count[k]);
            edge[p] = shared.shared_cost(self.nodes[q], self.nodes[p], k);
            path[p] = path[q] + edge[p];
        }
        (edge, path)
    }

    fn shared_cost_of(&self, shared: &impl SharedPaths) -> f64 {
        self.shared_paths(shared).1.into_iter().fold(0.0, f64::max)
    }

    /// The sharing-aware tree cost: the costliest root-to-leaf path, each edge priced by
    /// `shared` at the number of tree edges that cross its path. O(N + P) for path indices below P.
    pub fn shared_cost(&self, shared: &impl SharedPaths) -> Result<f64, TreeError> {
        self.check_shared(shared)?;
        Ok(self.shared_cost_of(shared))
    }

    /// The sharing-aware tree cost if the nodes at positions `x` and `y` were swapped; the
    /// tree is unchanged afterwards. O(N + P).
    pub fn swap_shared_cost(
        &mut self,
        shared: &impl SharedPaths,
        x: Position,
        y: Position,
    ) -> Result<f64, TreeError> {
        self.check_swappable(x, y)?;
        self.check_shared(shared)?;
        Ok(self.shared_trial(shared, x, y))
    }

    fn shared_trial(&mut self, shared: &impl SharedPaths, x: Position, y: Position) -> f64 {
        self.exchange(x, y);
        let cost = self.shared_cost_of(shared);
        self.exchange(x, y);
        cost
    }

    /// [`improve`](Self::improve) ranked by the sharing-aware cost: while a swap that
    /// `strategy` tries around the costliest edge of the costliest root-to-leaf path (both
    /// priced by `shared`) lowers the sharing-aware cost, makes it; at most `max_swaps`.
    /// `costs` are the links alone (the plain path costs are kept up to date with them, as
    /// every swap does). The reports' costs are sharing-aware; the cost never rises.
    pub fn improve_shared(
        &mut self,
        costs: &impl LinkCosts,
        shared: &impl SharedPaths,
        strategy: Strategy,
        max_swaps: usize,
    ) -> Result<Vec<AdaptReport>, TreeError> {
        self.check_shared(shared)?;
        let mut rounds = Vec::new();
        while rounds.len() < max_swaps && self.len() > 1 {
            let (edge, path) = self.shared_paths(shared);
            // The leaf of the costliest path (ties: the lowest position), then the costliest
            // edge on its way up (ties: the deepest).
            let Some(leaf) =
                binomial::leaves(self.len()).fold(None, |best: Option<Position>, p| match best {
                    Some(b) if path[p] <= path[b] => Some(b),
                    _ => Some(p),
                })
            else {
                break;
            };
            let (parent, child) = costliest_edge_above(leaf, &edge);
            let report = self.repair_by(
                costs,
                just_below(path[leaf]),
                Some(Focus::Link { parent, child }),
                Some(strategy),
                &|t: &Self| t.shared_cost_of(shared),
                &mut |t: &mut Self, x, y| t.shared_trial(shared, x, y),
            );
            let made = report.made.is_some();
            rounds.push(report);
            if !made {
                break;
            }
        }
        Ok(rounds)
    }
}
