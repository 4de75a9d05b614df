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
//! leaves. A trial swap is undone exactly from a journal of the segment-tree cells it touched,
//! so evaluation leaves the stored costs bit-for-bit unchanged. Joins and leaves change the
//! last position and one more: O(log N) plus the strategy's trials.

use crate::binomial::{self, Position};
use crate::segtree::MaxAddTree;
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
}
