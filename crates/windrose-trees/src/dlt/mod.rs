//! Divisible-load scheduling on trees (Kim, Jee & Lee, after Cheng & Robertazzi): how much of
//! one big, arbitrarily divisible load each node of a tree processes, and in which order every
//! parent sends its children their shares, so that the whole load is done as early as possible.
//!
//! The model is store-and-forward with sequential sends: a node that has received its whole share
//! starts computing the part it keeps and, at the same time, sends each child that child's
//! share one after the other (one link at a time). A child starts forwarding only after its
//! whole share has arrived. Computing a fraction `f` of the load on node `n` takes
//! `f * compute_s_per_unit[n]` seconds (the paper's `f w T_cp`); sending it over the link into
//! child `c` takes `f * link_s_per_unit[c]` seconds (the paper's `f z T_cm`).
//!
//! - [`star`]: one parent and `k` children (equations (1)-(9)): the fractions for a given send
//!   order, the optimal order (ascending `a_i`, Theorem 1) and all `k!` orders ranked.
//! - [`schedule`](mod@schedule): whole trees, bottom-up (every subtree reduced to one equivalent
//!   processor) then top-down (every node's share of the total load), from per-node and
//!   per-link times or from a [`windrose_model::LinkCosts`] in MB/s.
//! - [`paper`]: the paper's Example 1, as `windrose reproduce dlt` prints it.
//!
//! Times are in seconds. Fractions are dimensionless and do not depend on the load size: only
//! the ratios of the times matter.
//!
//! ```
//! use windrose_model::NodeId;
//! use windrose_trees::dlt::{self, star, OrderPolicy};
//! use windrose_trees::Tree;
//!
//! // Example 1 of the paper: four children with a = 20, 10, 5, 1 and b = 1, w_0 = 1.
//! let children = dlt::paper::example1_children();
//! let given = star::fractions_in_order(1.0, &children).unwrap();
//! assert!((given.alpha0 - 132.0 / 139.0).abs() < 1e-12);
//! let best = star::optimal_fractions(1.0, &children).unwrap();
//! assert!((best.alpha0 - 252.0 / 401.0).abs() < 1e-12);
//!
//! // A three-node tree: 0 sends to 1, 1 forwards to 2. Every node needs 1 s for the whole load,
//! // every link 0.5 s.
//! let n = NodeId;
//! let tree = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(1))]).unwrap();
//! let s = dlt::schedule(&tree, &[1.0, 1.0, 1.0], &[0.0, 0.5, 0.5], OrderPolicy::Optimal).unwrap();
//! let kept: f64 = s.nodes.iter().map(|x| x.fraction_kept).sum();
//! assert!((kept - 1.0).abs() < 1e-12);
//! assert!(s.predicted_finish_s < 1.0); // faster than the root alone
//! ```

pub mod paper;
pub mod schedule;
pub mod star;

pub use schedule::{
    schedule, schedule_from_model, schedule_with_links, NodeShare, Schedule, SendShare,
};
pub use star::{EquivalentChild, RankedOrder, StarFractions};

use crate::TreeError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use windrose_model::{CostUnit, NodeId};

/// How each parent orders the children it sends to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OrderPolicy {
    /// Ascending `a_i` (fastest link first; Theorem 1), ties to the lower child id. The
    /// children's compute speeds do not matter.
    #[default]
    Optimal,
    /// The tree's own send order ([`Tree::children`](crate::Tree::children)), e.g. the
    /// left-to-right order Cheng & Robertazzi assumed.
    Given,
}

impl OrderPolicy {
    /// Both policies, in the order a CLI lists them.
    pub const ALL: [OrderPolicy; 2] = [OrderPolicy::Optimal, OrderPolicy::Given];

    /// The name used on the command line and in JSON (`optimal`, `given`).
    pub fn name(self) -> &'static str {
        match self {
            OrderPolicy::Optimal => "optimal",
            OrderPolicy::Given => "given",
        }
    }
}

impl fmt::Display for OrderPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OrderPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "optimal" => Ok(OrderPolicy::Optimal),
            "given" => Ok(OrderPolicy::Given),
            other => Err(format!(
                "unknown send order `{other}`: expected `optimal` or `given`"
            )),
        }
    }
}

/// Something wrong with the input of a divisible-load computation. Every variant names the node,
/// link or parameter at fault.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum DltError {
    /// A node's compute time or speed is zero, negative, infinite or NaN.
    #[error("node {node}: {what} must be a positive finite number, got {value}")]
    NodeSpeed {
        node: NodeId,
        /// Which input: `compute_s_per_unit`, `compute_mb_s`, ...
        what: &'static str,
        value: f64,
    },
    /// A link's transfer time or bandwidth is out of range.
    #[error("link {parent}->{child}: {what} must be {requirement}, got {value}")]
    LinkSpeed {
        parent: NodeId,
        child: NodeId,
        /// Which input: `link_s_per_unit`, `bandwidth_mb_s`, ...
        what: &'static str,
        /// "a positive finite number" or "a non-negative finite number".
        requirement: &'static str,
        value: f64,
    },
    /// A child of a one-level subtree with a bad `a`, `b`, `w`, `z` or `beta`.
    #[error("child {child}: {what} must be {requirement}, got {value}")]
    ChildParameter {
        child: NodeId,
        what: &'static str,
        requirement: &'static str,
        value: f64,
    },
    /// A scalar parameter (`w0`, `t_cp_s`, `load_mb`, ...) out of range.
    #[error("{what} must be a positive finite number, got {value}")]
    Parameter { what: &'static str, value: f64 },
    /// The same child listed twice under one parent.
    #[error("child {child} is listed more than once")]
    DuplicateChild { child: NodeId },
    /// A per-node vector too short for the tree's ids.
    #[error(
        "{what} has {len} entries but the tree contains node {node} (needs at least {})",
        node.index() + 1
    )]
    VectorTooShort {
        what: &'static str,
        len: usize,
        node: NodeId,
    },
    /// A per-node vector with entries for ids the tree cannot hold.
    #[error(
        "{what} has {len} entries but the tree's node ids stop below {node_count}: \
         ids do not match"
    )]
    VectorTooLong {
        what: &'static str,
        len: usize,
        node_count: usize,
    },
    /// A tree node the link-cost model does not know.
    #[error("tree node {node} is not in the link-cost model ({node_count} nodes)")]
    NodeNotInModel { node: NodeId, node_count: usize },
    /// Link costs in a unit that is not a bandwidth.
    #[error("divisible-load scheduling needs link costs in bandwidth_mb_s, got {unit}")]
    WrongUnit { unit: CostUnit },
    /// Too many children to enumerate every order.
    #[error("cannot rank all orders of {children} children (at most {max})")]
    TooManyChildren { children: usize, max: usize },
    /// Fractions that over- or underflowed (speeds many orders of magnitude apart).
    #[error(
        "the fractions under node {node} are not representable (speeds differ by too many \
         orders of magnitude)"
    )]
    Numerical { node: NodeId },
    /// The tree is not a tree (or could not be built).
    #[error("not a valid tree: {0}")]
    Tree(#[from] TreeError),
}

/// True when `value` is finite and positive.
pub(crate) fn positive(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

/// True when `value` is finite and not negative.
pub(crate) fn non_negative(value: f64) -> bool {
    value.is_finite() && value >= 0.0
}
