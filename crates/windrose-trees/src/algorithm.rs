//! [`TreeAlgorithm`]: every broadcast-tree algorithm by the name the command line (`--algo`,
//! `--tree`), scenario files (`tree = "…"`) and reports use, and one way to build each from any
//! cost model.
//!
//! ```
//! use windrose_model::{ClusterCosts, CostUnit, NodeId};
//! use windrose_trees::TreeAlgorithm;
//!
//! let costs = ClusterCosts::uniform(CostUnit::LatencyMs, 2, 3, 0.1, 20.0).unwrap();
//! let algo: TreeAlgorithm = "magpie".parse().unwrap();
//! let t = algo.build(&costs, Some(costs.clusters()), NodeId(4)).unwrap();
//! assert_eq!(t.parent(NodeId(0)), Some(NodeId(4))); // node 0 coordinates cluster 0
//! assert!("kruskal".parse::<TreeAlgorithm>().unwrap_err().to_string().contains("balanced-path"));
//! ```

use crate::adaptive::AdaptiveTree;
use crate::static_trees;
use crate::{Tree, TreeError};
use windrose_model::{ClusterId, LinkCosts, NodeId};

crate::named_enum! {
    /// A broadcast-tree algorithm; see [`TreeAlgorithm::build`] for what each reads.
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
    pub enum TreeAlgorithm: "tree algorithm" {
        /// Balanced-Path binomial tree of Figueira & Mendes ([`AdaptiveTree::balanced_path`]).
        BalancedPath = "balanced-path",
        /// MPICH-like binomial tree ([`static_trees::binomial_all`]); no costs.
        Binomial = "binomial",
        /// MagPIe-like: flat between clusters, binomial inside ([`static_trees::magpie`]).
        Magpie = "magpie",
        /// Minimum spanning tree ([`static_trees::minimum_spanning_tree`]).
        Mst = "mst",
        /// Maximum-bottleneck tree: every root path's worst link is as good as can be.
        MaxBottleneck = "max-bottleneck",
        /// The root sends to every node itself ([`static_trees::flat_all`]); no costs.
        Flat = "flat",
        /// `root -> root+1 -> … -> N-1 -> 0 -> … -> root-1` ([`static_trees::chain_all`]); no
        /// costs.
        Chain = "chain",
    }
}

impl TreeAlgorithm {
    /// True when the algorithm is best fed capacities (a [`LinkCosts`] whose unit
    /// [`is_capacity`](windrose_model::CostUnit::is_capacity)), as max-bottleneck is; the others
    /// minimise distances or latencies. Callers that can derive either (the simulator from its
    /// platform) ask this.
    pub fn prefers_capacities(self) -> bool {
        self == TreeAlgorithm::MaxBottleneck
    }

    /// Builds this tree over every node of `costs`, rooted at `root`.
    ///
    /// Balanced-Path and the MST minimise `costs`; magpie reads only `clusters` (one entry per
    /// node, required); binomial, flat and chain read nothing but the node count. Max-bottleneck
    /// follows the cost unit: capacities are widened ([`static_trees::max_bottleneck_tree`]),
    /// distances and latencies narrowed, where the best worst link on every root path is the
    /// MST's (an MST's paths are minimax paths). `clusters` is checked whenever it is given, so
    /// a wrong map is reported rather than silently unused.
    ///
    /// Errors: `root` unknown → [`TreeError::UnknownNode`]; a cluster map of the wrong length,
    /// or magpie without one → [`TreeError::Invalid`].
    pub fn build(
        self,
        costs: &impl LinkCosts,
        clusters: Option<&[ClusterId]>,
        root: NodeId,
    ) -> Result<Tree, TreeError> {
        let n = costs.node_count();
        static_trees::check_node(n, root)?;
        if let Some(map) = clusters {
            static_trees::check_cluster_map(costs, map)?;
        }
        match self {
            TreeAlgorithm::BalancedPath => Ok(AdaptiveTree::balanced_path(costs, root)?.to_tree()),
            TreeAlgorithm::Binomial => static_trees::binomial_all(n, root),
            TreeAlgorithm::Magpie => {
                let map = clusters.ok_or_else(|| {
                    TreeError::Invalid("magpie needs a cluster map (one cluster per node)".into())
                })?;
                static_trees::magpie(costs, map, root)
            }
            TreeAlgorithm::Mst => static_trees::minimum_spanning_tree(costs, root),
            TreeAlgorithm::MaxBottleneck if costs.unit().is_capacity() => {
                static_trees::max_bottleneck_tree(costs, root)
            }
            TreeAlgorithm::MaxBottleneck => static_trees::minimum_spanning_tree(costs, root),
            TreeAlgorithm::Flat => static_trees::flat_all(n, root),
            TreeAlgorithm::Chain => static_trees::chain_all(n, root),
        }
    }
}
