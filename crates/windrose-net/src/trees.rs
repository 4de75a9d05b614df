//! The default link costs a run builds its broadcast tree from when no measured or given costs
//! exist (the trees themselves are `windrose_trees::TreeAlgorithm`'s); and the tree plans of the
//! two tree multicasts (MagPIe, Balanced Multicasting) over a group.

use crate::group::Group;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{ClusterCosts, ClusterId, CostUnit, NodeId};
use windrose_proto::multicast::MulticastSpec;
use windrose_proto::pieces::ClusterLayout;
use windrose_proto::tree_multicast::{PlanTree, TreeMulticastConfig, TreePlan};
use windrose_trees::multicast::balanced::{plan_balanced, PlanOptions};
use windrose_trees::{Tree, TreeAlgorithm, TreeError};

/// Latency assumed between two nodes of one cluster when no costs are given, in ms.
pub const DEFAULT_INTRA_MS: f64 = 0.1;
/// Latency assumed between two clusters when no costs are given, in ms.
pub const DEFAULT_INTER_MS: f64 = 10.0;

/// The tree `algo` over every member of `group`, rooted at `root`, from the group's clusters and
/// the default costs of [`group_costs`] (what a run uses when it is given no costs).
pub fn group_tree(algo: TreeAlgorithm, group: &Group, root: NodeId) -> Result<Tree, TreeError> {
    algo.build(&group_costs(group), Some(&group.clusters()), root)
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

/// Capacity of every link of the platform a Balanced Multicasting plan assumes when none is
/// given (gigabit Ethernet), bytes/s: with all links alike the plan only avoids fan-out.
pub const EQUAL_CAPACITY_BYTES_S: f64 = 1.25e8;

/// MagPIe's multicast over `group` from `root`: one tree (the root sends to every other
/// cluster's coordinator, then binomial trees inside the clusters), unshaped. The tree is
/// `TreePlan::magpie` of the group's cluster layout, the very tree the simulator runs.
pub fn magpie_spec(group: &Group, root: NodeId) -> Result<MulticastSpec, String> {
    let layout = ClusterLayout::new(group.members().iter().map(|m| (m.id, m.cluster)))
        .map_err(|e| e.to_string())?;
    let plan = TreePlan::magpie(&layout, root).map_err(|e| e.to_string())?;
    Ok(MulticastSpec::Trees {
        plan: Arc::new(plan),
        config: TreeMulticastConfig::with_shape(false),
    })
}

/// A platform shaped like `group` (its clusters and their sizes) with every link at `bytes_s`
/// and `latency_s`, the one [`balanced_spec`] plans on when no capacities are known.
pub fn equal_platform(group: &Group, bytes_s: f64, latency_s: f64) -> Result<Platform, String> {
    let mut b = Platform::builder();
    for size in cluster_sizes(group) {
        b = b.cluster(ClusterSpec::uniform(size, bytes_s, bytes_s, latency_s));
    }
    b.wan_all(bytes_s, latency_s)
        .build()
        .map_err(|e| e.to_string())
}

/// Balanced Multicasting's plan over `group` from `root`, computed from `platform`'s capacities
/// (`windrose_trees::multicast::balanced`), each tree shaped to its rate; and the planned rate in
/// bytes/s.
///
/// The platform numbers its nodes through its clusters in order; the group's members are
/// matched to them the same way (by cluster, then id), so the platform must have the group's
/// clusters with the same sizes. Errors say how they differ, or why nothing could be planned.
pub fn balanced_spec(
    group: &Group,
    platform: &Platform,
    root: NodeId,
) -> Result<(MulticastSpec, f64), String> {
    let sizes = cluster_sizes(group);
    let platform_sizes: Vec<usize> = (0..platform.cluster_count())
        .map(|c| platform.nodes_of(ClusterId::from(c)).len())
        .collect();
    if sizes != platform_sizes {
        return Err(format!(
            "the platform's clusters have {platform_sizes:?} nodes, the group's {sizes:?}"
        ));
    }
    // Platform index k is the k-th member by (cluster, id).
    let mut order: Vec<(ClusterId, NodeId)> =
        group.members().iter().map(|m| (m.cluster, m.id)).collect();
    order.sort();
    let to_group: Vec<NodeId> = order.iter().map(|&(_, id)| id).collect();
    let mut to_platform = vec![NodeId(0); group.len()];
    for (k, &id) in to_group.iter().enumerate() {
        to_platform[id.index()] = NodeId::from(k);
    }
    let plan = plan_balanced(platform, to_platform[root.index()], &PlanOptions::default())
        .map_err(|e| e.to_string())?;
    let mut trees = Vec::with_capacity(plan.trees.len());
    for t in &plan.trees {
        // Breadth-first edges, children in id order: a valid, deterministic send order.
        let mut edges: Vec<(NodeId, NodeId)> = t
            .edges()
            .map(|(p, c)| (to_group[c.index()], to_group[p.index()]))
            .collect();
        edges.sort_by_key(|&(c, p)| (p, c));
        let tree = Tree::from_edges(group.len(), root, &edges).map_err(|e| e.to_string())?;
        trees.push(PlanTree {
            tree,
            rate_bytes_s: Some(t.rate_bytes_s),
        });
    }
    if trees.is_empty() {
        return Err("the platform allows no multicast rate from the root".into());
    }
    Ok((
        MulticastSpec::Trees {
            plan: Arc::new(TreePlan { trees }),
            config: TreeMulticastConfig::with_shape(true),
        },
        plan.rate_bytes_s(),
    ))
}

/// Members per non-empty cluster, by cluster id.
fn cluster_sizes(group: &Group) -> Vec<usize> {
    let mut sizes = vec![0usize; group.cluster_count()];
    for c in group.clusters() {
        sizes[c.index()] += 1;
    }
    sizes.retain(|&n| n > 0);
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_spans_the_group() {
        let g = Group::loopback("t", 8, 2, 7000).unwrap();
        for algo in TreeAlgorithm::ALL {
            for root in [NodeId(0), NodeId(5)] {
                let t = group_tree(algo, &g, root).unwrap();
                assert_eq!(t.len(), 8, "{algo}");
                assert_eq!(t.root(), root, "{algo}");
            }
        }
        // Latency costs: the best worst link on every root path is the MST's.
        assert_eq!(
            group_tree(TreeAlgorithm::MaxBottleneck, &g, NodeId(3)),
            group_tree(TreeAlgorithm::Mst, &g, NodeId(3))
        );
    }

    /// Members in interleaved clusters (node i in cluster i % 2), so platform numbering and
    /// group ids differ.
    fn interleaved(n: usize) -> Group {
        let members = (0..n)
            .map(|i| crate::group::Member {
                id: NodeId::from(i),
                addr: format!("127.0.0.1:{}", 7000 + i),
                cluster: ClusterId::from(i % 2),
            })
            .collect();
        Group::new("i", members).unwrap()
    }

    #[test]
    fn balanced_plans_map_platform_nodes_back_to_group_ids() {
        let g = interleaved(7);
        // Cluster 0 (nodes 0, 2, 4, 6) fast inside, a thin WAN to cluster 1 (nodes 1, 3, 5).
        let p = Platform::builder()
            .cluster(ClusterSpec::uniform(4, 1e8, 1e9, 1e-4))
            .cluster(ClusterSpec::uniform(3, 1e8, 1e9, 1e-4))
            .wan_all(1e6, 5e-3)
            .build()
            .unwrap();
        for root in [NodeId(0), NodeId(3)] {
            let (spec, rate) = balanced_spec(&g, &p, root).unwrap();
            assert!(rate > 0.0 && rate <= 1e6 + 1e-3, "{rate}");
            let MulticastSpec::Trees { plan, config } = spec else {
                panic!("a tree plan")
            };
            assert!(config.shape);
            let mut sum = 0.0;
            for t in &plan.trees {
                assert_eq!(t.tree.root(), root);
                assert_eq!(t.tree.len(), 7);
                sum += t.rate_bytes_s.unwrap();
                // The WAN is the bottleneck: each tree crosses it once (one edge between
                // the group's clusters), which only holds if ids were mapped back right.
                let crossings = t
                    .tree
                    .nodes()
                    .iter()
                    .filter(|&&n| {
                        t.tree
                            .parent(n)
                            .is_some_and(|par| par.index() % 2 != n.index() % 2)
                    })
                    .count();
                assert_eq!(crossings, 1, "{:?}", t.tree);
            }
            assert!((sum - rate).abs() < 1e-6 * rate);
        }
        // Cluster sizes that do not match the group's.
        let wrong = Platform::builder()
            .cluster(ClusterSpec::uniform(3, 1e8, 1e9, 1e-4))
            .cluster(ClusterSpec::uniform(4, 1e8, 1e9, 1e-4))
            .wan_all(1e6, 5e-3)
            .build()
            .unwrap();
        let e = balanced_spec(&g, &wrong, NodeId(0)).unwrap_err();
        assert!(e.contains("[3, 4] nodes, the group's [4, 3]"), "{e}");
        // The equal platform has the group's shape, so it always plans.
        let eq = equal_platform(&g, EQUAL_CAPACITY_BYTES_S, 1e-4).unwrap();
        assert!(balanced_spec(&g, &eq, NodeId(6)).unwrap().1 > 0.0);
    }

    #[test]
    fn magpie_is_one_unshaped_tree_over_the_group() {
        let g = interleaved(6);
        let MulticastSpec::Trees { plan, .. } = magpie_spec(&g, NodeId(1)).unwrap() else {
            panic!("a tree plan")
        };
        assert_eq!(plan.trees.len(), 1);
        assert_eq!(plan.trees[0].rate_bytes_s, None);
        assert_eq!(plan.trees[0].tree.root(), NodeId(1));
        assert_eq!(plan.trees[0].tree.len(), 6);
    }
}
