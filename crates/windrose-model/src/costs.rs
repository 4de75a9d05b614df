//! The link-cost abstraction every tree algorithm is written against.

use crate::{ModelError, NodeId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a cost number means. Trees minimise costs in `Hops` and `LatencyMs`; bandwidth is a
/// capacity (bigger is better) and only the bandwidth-aware algorithms use it directly.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CostUnit {
    /// Network distance in hops (the unit of the adaptive-trees paper).
    #[default]
    Hops,
    /// One-way latency in milliseconds.
    LatencyMs,
    /// Available bandwidth in megabytes per second.
    BandwidthMbS,
}

impl CostUnit {
    /// The name used in files and output (`hops`, `latency_ms`, `bandwidth_mb_s`).
    pub fn name(self) -> &'static str {
        match self {
            CostUnit::Hops => "hops",
            CostUnit::LatencyMs => "latency_ms",
            CostUnit::BandwidthMbS => "bandwidth_mb_s",
        }
    }

    /// Parses a unit name as written by [`CostUnit::name`].
    pub fn parse(s: &str) -> Option<CostUnit> {
        match s.trim() {
            "hops" => Some(CostUnit::Hops),
            "latency_ms" | "ms" => Some(CostUnit::LatencyMs),
            "bandwidth_mb_s" | "mb_s" => Some(CostUnit::BandwidthMbS),
            _ => None,
        }
    }

    /// True when larger values are better (capacities), false for distances and latencies.
    pub fn is_capacity(self) -> bool {
        matches!(self, CostUnit::BandwidthMbS)
    }
}

impl fmt::Display for CostUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Symmetric, non-negative link costs between the nodes `0..node_count()`.
///
/// `cost(a, a)` is 0. Implementations must be cheap to query: tree algorithms call `cost` in
/// their inner loops.
pub trait LinkCosts {
    /// Number of nodes; valid ids are `0..node_count()`.
    fn node_count(&self) -> usize;
    /// Cost of the link between `a` and `b` (same as between `b` and `a`).
    fn cost(&self, a: NodeId, b: NodeId) -> f64;
    /// What the numbers mean.
    fn unit(&self) -> CostUnit;

    /// Checks that `node` exists, with an error naming it otherwise.
    fn check_node(&self, node: NodeId) -> Result<(), ModelError> {
        if node.index() < self.node_count() {
            Ok(())
        } else {
            Err(ModelError::UnknownNode {
                node,
                node_count: self.node_count(),
            })
        }
    }
}

/// Link costs that can change: a link's cost rises or falls, a node joins.
pub trait LinkCostsMut: LinkCosts {
    /// Sets the cost of the link `a`–`b` (both directions).
    fn set_cost(&mut self, a: NodeId, b: NodeId, value: f64) -> Result<(), ModelError>;
}

impl<T: LinkCosts + ?Sized> LinkCosts for &T {
    fn node_count(&self) -> usize {
        (**self).node_count()
    }
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        (**self).cost(a, b)
    }
    fn unit(&self) -> CostUnit {
        (**self).unit()
    }
}

/// Validates one cost value: finite and non-negative.
pub(crate) fn check_value(a: NodeId, b: NodeId, value: f64) -> Result<(), ModelError> {
    if !value.is_finite() {
        return Err(ModelError::NotFinite { a, b, value });
    }
    if value < 0.0 {
        return Err(ModelError::Negative { a, b, value });
    }
    Ok(())
}

/// Validates a new cost for the link `a`–`b` of `model`: both nodes exist, the value is finite
/// and non-negative, and a node's cost to itself stays 0. Returns false for the (valid, no-op)
/// `a == b` case so callers store nothing.
pub(crate) fn check_new_cost(
    model: &(impl LinkCosts + ?Sized),
    a: NodeId,
    b: NodeId,
    value: f64,
) -> Result<bool, ModelError> {
    model.check_node(a)?;
    model.check_node(b)?;
    check_value(a, b, value)?;
    if a == b {
        return if value == 0.0 {
            Ok(false)
        } else {
            Err(ModelError::NonZeroDiagonal { node: a, value })
        };
    }
    Ok(true)
}
