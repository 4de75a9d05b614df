//! Helpers shared by the engine tests: platforms, trees, payloads.

#![allow(dead_code)] // each test file uses part of it

use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{random, ClusterId, NodeId};
use windrose_trees::adaptive::AdaptiveTree;
use windrose_trees::{static_trees, Tree, TreeAlgorithm};

/// Relative closeness, with an absolute floor of `tol` for values near 0.
pub fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-3)
}

/// One cluster of `n` nodes with `bytes_s` node links and `latency_s` between nodes.
pub fn one_cluster(n: usize, bytes_s: f64, latency_s: f64) -> Platform {
    Platform::builder()
        .cluster(ClusterSpec::uniform(n, bytes_s, 1e12, latency_s))
        .build()
        .unwrap()
}

/// A random platform of `n` nodes in 1 to 3 clusters with random capacities and latencies.
pub fn random_platform(n: usize, rng: &mut ChaCha8Rng) -> Platform {
    let clusters = rng.gen_range(1..=3usize.min(n));
    // Split n nodes into `clusters` non-empty parts.
    let mut sizes = vec![1usize; clusters];
    for _ in clusters..n {
        let k = rng.gen_range(0..clusters);
        sizes[k] += 1;
    }
    let mut b = Platform::builder();
    for &s in &sizes {
        b = b.cluster(ClusterSpec {
            nodes: s,
            node_uplink_bytes_s: rng.gen_range(1e5..1e7),
            node_downlink_bytes_s: rng.gen_range(1e5..1e7),
            access_up_bytes_s: rng.gen_range(1e6..1e8),
            access_down_bytes_s: rng.gen_range(1e6..1e8),
            intra_latency_s: rng.gen_range(0.0..1e-3),
        });
    }
    for from in 0..clusters {
        for to in 0..clusters {
            if from != to {
                b = b.wan(
                    ClusterId::from(from),
                    ClusterId::from(to),
                    rng.gen_range(1e5..1e7),
                    rng.gen_range(0.0..0.05),
                );
            }
        }
    }
    b.build().unwrap()
}

/// The tree kinds the tests run over: every static algorithm, Balanced-Path and random trees.
pub const TREE_KINDS: [&str; 7] = [
    "binomial",
    "magpie",
    "mst",
    "max-bottleneck",
    "flat",
    "balanced-path",
    "random",
];

/// A tree of `kind` over the `n` nodes of a platform whose cluster map is `clusters`, rooted at
/// `root`, on a random hop matrix.
pub fn make_tree(kind: &str, clusters: &[ClusterId], root: NodeId, seed: u64) -> Tree {
    let n = clusters.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let costs = random::uniform_hops(&mut rng, n, 10);
    match kind {
        "balanced-path" => AdaptiveTree::balanced_path(&costs, root).unwrap().to_tree(),
        "random" => random_tree(n, root, &mut rng),
        // The hops read as capacities: the widest tree, a shape unlike the MST's (the
        // algorithm itself builds the MST from hops).
        "max-bottleneck" => static_trees::max_bottleneck_tree(&costs, root).unwrap(),
        name => {
            let algo: TreeAlgorithm = name.parse().unwrap();
            algo.build(&costs, Some(clusters), root).unwrap()
        }
    }
}

/// The cluster map of a platform.
pub fn cluster_map(p: &Platform) -> Vec<ClusterId> {
    (0..p.node_count())
        .map(|i| p.cluster_of(NodeId::from(i)))
        .collect()
}

/// A random recursive tree: nodes join in a random order, each under a random earlier one.
pub fn random_tree(n: usize, root: NodeId, rng: &mut ChaCha8Rng) -> Tree {
    let mut order: Vec<NodeId> = (0..n).map(NodeId::from).filter(|&x| x != root).collect();
    order.shuffle(rng);
    let mut placed = vec![root];
    let mut edges = Vec::new();
    for c in order {
        let p = placed[rng.gen_range(0..placed.len())];
        edges.push((c, p));
        placed.push(c);
    }
    Tree::from_edges(n, root, &edges).unwrap()
}

/// A chain 0 -> 1 -> ... -> n-1.
pub fn chain(n: usize) -> Tree {
    let edges: Vec<(NodeId, NodeId)> = (1..n)
        .map(|i| (NodeId::from(i), NodeId::from(i - 1)))
        .collect();
    Tree::from_edges(n, NodeId(0), &edges).unwrap()
}

/// `len` seeded random bytes.
pub fn random_bytes(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}
