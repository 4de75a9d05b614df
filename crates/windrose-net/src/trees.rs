//! The broadcast trees a run can use, by the names the command line takes, and the default
//! link costs they are built from when no measured or given costs exist.

use crate::group::Group;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use windrose_model::{ClusterCosts, ClusterId, CostUnit, LinkCosts, NodeId};
use windrose_trees::adaptive::AdaptiveTree;
use windrose_trees::{static_trees, StaticAlgo, Tree, TreeError};

/// Latency assumed between two nodes of one cluster when no costs are given, in ms.
pub const DEFAULT_INTRA_MS: f64 = 0.1;
/// Latency assumed between two clusters when no costs are given, in ms.
pub const DEFAULT_INTER_MS: f64 = 10.0;

/// A tree algorithm for a broadcast.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TreeKind {
    /// Minimum spanning tree of the costs.
    Mst,
    /// MagPIe-like: flat between clusters, binomial inside.
    Magpie,
    /// MPICH-like binomial tree.
    Binomial,
    /// Balanced-Path binomial tree of Figueira & Mendes.
    BalancedPath,
    /// A path through every node in relative-rank order ([`static_trees::chain_all`]; for root
    /// 0: `0 -> 1 -> ... -> N-1`).
    Chain,
    /// The root sends to every node itself.
    Flat,
}

impl TreeKind {
    /// Every kind, in help-text order.
    pub const ALL: [TreeKind; 6] = [
        TreeKind::Mst,
        TreeKind::Magpie,
        TreeKind::Binomial,
        TreeKind::BalancedPath,
        TreeKind::Chain,
        TreeKind::Flat,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            TreeKind::Mst => "mst",
            TreeKind::Magpie => "magpie",
            TreeKind::Binomial => "binomial",
            TreeKind::BalancedPath => "balanced-path",
            TreeKind::Chain => "chain",
            TreeKind::Flat => "flat",
        }
    }

    /// Builds the tree over all nodes of `costs`, rooted at `root`; `clusters` (one per node) is
    /// needed by [`TreeKind::Magpie`].
    pub fn build(
        self,
        costs: &impl LinkCosts,
        clusters: &[ClusterId],
        root: NodeId,
    ) -> Result<Tree, TreeError> {
        match self {
            TreeKind::Mst => StaticAlgo::Mst.build(costs, Some(clusters), root),
            TreeKind::Magpie => StaticAlgo::Magpie.build(costs, Some(clusters), root),
            TreeKind::Binomial => StaticAlgo::Binomial.build(costs, Some(clusters), root),
            TreeKind::Flat => StaticAlgo::Flat.build(costs, Some(clusters), root),
            TreeKind::BalancedPath => Ok(AdaptiveTree::balanced_path(costs, root)?.to_tree()),
            TreeKind::Chain => static_trees::chain_all(costs.node_count(), root),
        }
    }
}

impl fmt::Display for TreeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TreeKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TreeKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown tree {s:?}: expected one of mst, magpie, binomial, balanced-path, chain, flat"
                )
            })
    }
}

/// Link costs from a group's clusters alone: [`DEFAULT_INTRA_MS`] inside a cluster,
/// [`DEFAULT_INTER_MS`] between clusters (latency in ms). O(N + C²) memory.
pub fn group_costs(group: &Group) -> ClusterCosts {
    let c = group.cluster_count().max(1);
    let inter = (0..c)
        .map(|a| {
            (0..c)
                .map(|b| if a == b { 0.0 } else { DEFAULT_INTER_MS })
                .collect()
        })
        .collect();
    ClusterCosts::new(
        CostUnit::LatencyMs,
        group.clusters(),
        vec![DEFAULT_INTRA_MS; c],
        inter,
    )
    .expect("a group's clusters are dense and the default costs are finite")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_spans_the_group() {
        let g = Group::loopback("t", 8, 2, 7000).unwrap();
        let costs = group_costs(&g);
        for kind in TreeKind::ALL {
            let t = kind.build(&costs, &g.clusters(), NodeId(0)).unwrap();
            assert_eq!(t.len(), 8, "{kind}");
            assert_eq!(kind.name().parse::<TreeKind>().unwrap(), kind);
        }
        assert!("tree".parse::<TreeKind>().is_err());
    }
}
