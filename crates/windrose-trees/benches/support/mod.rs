//! Workloads shared by the windrose-trees benches and the `swap_speedup` example: seeded cost
//! models, trees, pre-drawn swap pairs, and the O(N) full-recomputation baseline that the
//! incremental swap evaluation of [`AdaptiveTree`] is measured against.
//!
//! Every cost here is a multiple of 0.25 and every root path sums at most a few dozen of them,
//! so all path costs are exact in f64 whatever the order of the additions. That is what lets
//! [`check_agreement`] demand bit-identical costs from the incremental segment tree and from
//! the top-down recomputation.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::{
    random, ClusterCosts, ClusterId, CostUnit, DenseCostMatrix, LinkCosts, NodeId,
};
use windrose_trees::adaptive::AdaptiveTree;
use windrose_trees::binomial::{self, Position};

/// Tree sizes of the swap-evaluation benches.
pub const SIZES: [usize; 3] = [1_024, 16_384, 131_072];

/// Size of the Balanced-Path benches.
pub const BP_SIZE: usize = 16_384;

/// Number of swap pairs drawn per workload (the timed loops cycle through them).
pub const PAIRS: usize = 1_024;

/// Average number of nodes per cluster in [`cluster_costs`].
pub const NODES_PER_CLUSTER: usize = 64;

/// A seeded RNG; a different `stream` gives an independent sequence for the same experiment.
pub fn rng(stream: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(0x77_696e_6472_6f73 ^ stream)
}

/// `k` quarters of a millisecond, for `k` drawn uniformly from `range`.
fn quarters(rng: &mut ChaCha8Rng, range: std::ops::RangeInclusive<u32>) -> f64 {
    f64::from(rng.gen_range(range)) * 0.25
}

/// A cluster model of `n` nodes in `n / 64` clusters (node i in cluster `i * clusters / n`),
/// with a random intra-cluster latency per cluster (0.25..=2 ms) and a random symmetric
/// inter-cluster latency per pair of clusters (5..=100 ms), all multiples of 0.25 ms.
pub fn cluster_costs(n: usize, rng: &mut ChaCha8Rng) -> ClusterCosts {
    let clusters = (n / NODES_PER_CLUSTER).max(1);
    let cluster_of = (0..n).map(|i| ClusterId::from(i * clusters / n)).collect();
    let intra = (0..clusters).map(|_| quarters(rng, 1..=8)).collect();
    // Draw the upper triangle in row order, then mirror it.
    let mut upper = vec![0.0; clusters * clusters];
    for (k, v) in upper.iter_mut().enumerate() {
        if k / clusters < k % clusters {
            *v = quarters(rng, 20..=400);
        }
    }
    let inter = (0..clusters)
        .map(|i| {
            (0..clusters)
                .map(|j| upper[i.min(j) * clusters + i.max(j)])
                .collect()
        })
        .collect();
    ClusterCosts::new(CostUnit::LatencyMs, cluster_of, intra, inter)
        .expect("the generated cluster model is valid")
}

/// The paper's random topology: `n` nodes, every distance uniform in 0..=10 hops (f32, dense).
pub fn dense_hops(n: usize, rng: &mut ChaCha8Rng) -> DenseCostMatrix<f32> {
    random::uniform_hops(rng, n, 10)
}

/// Every node of `costs` at a random position (a seeded permutation; its first node is the root).
pub fn random_tree(costs: &impl LinkCosts, rng: &mut ChaCha8Rng) -> AdaptiveTree {
    let mut nodes: Vec<NodeId> = (0..costs.node_count()).map(NodeId::from).collect();
    nodes.shuffle(rng);
    AdaptiveTree::from_positions(costs, nodes).expect("a permutation of the nodes is a valid tree")
}

/// `count` random swaps of two distinct non-root positions of a tree of `n` positions (n ≥ 3).
pub fn swap_pairs(n: usize, count: usize, rng: &mut ChaCha8Rng) -> Vec<(Position, Position)> {
    assert!(n >= 3, "a swap needs two distinct non-root positions");
    (0..count)
        .map(|_| {
            let x = rng.gen_range(1..n);
            let mut y = rng.gen_range(1..n - 1);
            if y >= x {
                y += 1;
            }
            (x, y)
        })
        .collect()
}

/// The baseline, the paper's way to evaluate a swap: exchange the nodes at `x` and `y` in a
/// plain position array, recompute every root path top-down
/// (`path[p] = path[parent(p)] + cost(node[parent(p)], node[p])`), take the costliest, and
/// exchange the nodes back. O(N) per swap; `path` is caller-provided scratch of `nodes.len()`.
pub fn full_swap_cost(
    costs: &impl LinkCosts,
    nodes: &mut [NodeId],
    path: &mut [f64],
    x: Position,
    y: Position,
) -> f64 {
    nodes.swap(x, y);
    let mut worst = 0.0f64;
    path[0] = 0.0;
    for p in 1..nodes.len() {
        let q = binomial::parent(p);
        let c = path[q] + costs.cost(nodes[q], nodes[p]);
        path[p] = c;
        worst = worst.max(c);
    }
    nodes.swap(x, y);
    worst
}

/// Correctness check, never timed: for every pair, the incremental evaluation and the full
/// recomputation give the same cost bit for bit, and the tree is left unchanged. Panics (with
/// the pair at fault) otherwise.
pub fn check_agreement(
    label: &str,
    costs: &impl LinkCosts,
    tree: &mut AdaptiveTree,
    pairs: &[(Position, Position)],
) {
    let before = tree.cost();
    assert_eq!(
        before.to_bits(),
        tree.cost_from_scratch(costs).to_bits(),
        "{label}: stored tree cost differs from a recomputation"
    );
    let mut nodes = tree.nodes().to_vec();
    let mut path = vec![0.0; nodes.len()];
    for &(x, y) in pairs {
        let incremental = tree.swap_cost(costs, x, y).expect("valid swap");
        let full = full_swap_cost(costs, &mut nodes, &mut path, x, y);
        assert_eq!(
            incremental.to_bits(),
            full.to_bits(),
            "{label}: swap ({x}, {y}) costs {incremental} incrementally but {full} recomputed"
        );
    }
    assert_eq!(tree.nodes(), &nodes[..], "{label}: swap_cost moved nodes");
    assert_eq!(
        tree.cost().to_bits(),
        before.to_bits(),
        "{label}: swap_cost changed the tree cost"
    );
}

/// A swap-evaluation workload: a cost model, a tree over all its nodes, and the swaps to time.
pub struct Workload<C> {
    /// What the workload is, for labels (`cluster`, `dense-bp`).
    pub name: &'static str,
    /// The link costs.
    pub costs: C,
    /// The tree the swaps are evaluated on.
    pub tree: AdaptiveTree,
    /// Pre-drawn swaps of two distinct non-root positions.
    pub pairs: Vec<(Position, Position)>,
}

/// Cluster model of `n` nodes, random tree, [`PAIRS`] random swaps; checked with
/// [`check_agreement`] before it is returned.
pub fn cluster_workload(n: usize) -> Workload<ClusterCosts> {
    let mut r = rng(n as u64);
    let costs = cluster_costs(n, &mut r);
    let mut tree = random_tree(&costs, &mut r);
    let pairs = swap_pairs(n, PAIRS, &mut r);
    check_agreement(&format!("cluster/{n}"), &costs, &mut tree, &pairs);
    Workload {
        name: "cluster",
        costs,
        tree,
        pairs,
    }
}

/// The paper's setting: dense random hops over `n` nodes, Balanced-Path tree rooted at node 0
/// (O(N²) to build: keep `n` small), [`PAIRS`] random swaps; checked before it is returned.
pub fn dense_bp_workload(n: usize) -> Workload<DenseCostMatrix<f32>> {
    let mut r = rng(0x100_0000 | n as u64);
    let costs = dense_hops(n, &mut r);
    let mut tree = AdaptiveTree::balanced_path(&costs, NodeId(0)).expect("valid costs");
    let pairs = swap_pairs(n, PAIRS, &mut r);
    check_agreement(&format!("dense-bp/{n}"), &costs, &mut tree, &pairs);
    Workload {
        name: "dense-bp",
        costs,
        tree,
        pairs,
    }
}
