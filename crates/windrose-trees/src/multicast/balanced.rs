//! Balanced Multicasting (den Burger, Kielmann & Bal, SC'05, as summarised in seed 002): several
//! multicast trees planned once from the capacities known at the start, each with its own rate,
//! enforced at the sender (traffic shaping) and never re-planned.
//!
//! # The heuristic (ours: the paper does not give its own)
//!
//! A tree is a parent for every node but the root. Sending at rate `r` down a tree loads every
//! link of the [route](Platform::route) of each of its edges with `r`: a node with `k` children
//! uses `k·r` of its uplink, a cluster with `k` edges leaving it `k·r` of its access uplink and
//! so on. A plan is feasible when the summed load of every link is within its capacity.
//!
//! Finding the best plan is a fractional packing of spanning arborescences, which
//! [`plan_balanced`] approximates in three steps:
//!
//! 1. **Multiplicative weights** (after Garg & Könemann's packing algorithm): every link has a
//!    length, initially `1 / capacity`. Each round takes the cheapest tree under these lengths
//!    (a tree costs the sum over its edges of the lengths of their route's links, so fan-out is
//!    paid for: `k` children cost `k` times the uplink), grown Prim-like from the root; it gets
//!    the rate its own bottleneck allows (`min capacity / uses`), and the length of every link it
//!    uses grows by `exp(ε · load / capacity)`. Crowded links become expensive, later trees avoid
//!    them. After `iterations` rounds the accumulated rates are scaled down until the plan is
//!    feasible.
//! 2. **Keeping few trees**: identical trees were merged as they came, each with the rate it
//!    accumulated (its weight). Each tree is a set of connections to open and shape, so at most
//!    `max_trees` are kept, in one of two ways, whichever plans more:
//!    - *scaled*: the `max_trees` heaviest (none below `min_tree_share` of the total weight),
//!      scaled together until a link is full, then each in turn, heaviest first, raised by
//!      what the residual capacities still allow;
//!    - *greedy*: from an empty plan, each tree in weight order takes all the residual
//!      capacities allow (trees that get nothing are skipped), until `max_trees` carry data.
//!
//! The result is always feasible and never above the [multicast bound](super::bound); how close
//! it comes is reported by `windrose bound --plan`.
//!
//! [`unshaped_rate_bytes_s`] gives what the same trees get *without* traffic shaping, when links
//! are shared max-min fairly among the trees (a tree using a link `k` times takes `k` shares):
//! the paper's Fig. 2 point that an unshaped plan loses throughput.
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! use windrose_model::NodeId;
//! use windrose_trees::multicast::balanced::{plan_balanced, PlanOptions};
//!
//! let site = ClusterSpec::uniform(2, 1e8, 1e9, 1e-4);
//! let p = Platform::builder().cluster(site).cluster(site).wan_all(1e6, 0.01).build().unwrap();
//! let plan = plan_balanced(&p, NodeId(0), &PlanOptions::default()).unwrap();
//! assert!(plan.max_utilisation(&p) <= 1.0 + 1e-9);
//! assert!(plan.rate_bytes_s() > 0.99e6 && plan.rate_bytes_s() <= 1e6 + 1e-3);
//! ```

use super::bound::BoundError;
use std::collections::HashMap;
use windrose_model::platform::Platform;
use windrose_model::NodeId;

/// One tree of a plan and the rate the root sends down it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlannedTree {
    /// Parent of each node (indexed by node id); None for the root.
    pub parent: Vec<Option<NodeId>>,
    /// Rate, bytes/s.
    pub rate_bytes_s: f64,
}

impl PlannedTree {
    /// The edges `(parent, child)`, children in id order.
    pub fn edges(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.parent
            .iter()
            .enumerate()
            .filter_map(|(c, p)| p.map(|p| (p, NodeId(c as u32))))
    }

    /// Whether every node but `root` reaches `root` by following parents (no cycles, no
    /// orphans), and the root has no parent.
    pub fn spans_from(&self, root: NodeId) -> bool {
        let n = self.parent.len();
        if root.0 as usize >= n || self.parent[root.0 as usize].is_some() {
            return false;
        }
        (0..n).all(|start| {
            let mut v = start;
            for _ in 0..n {
                match self.parent[v] {
                    None => return v == root.0 as usize,
                    Some(p) if (p.0 as usize) < n => v = p.0 as usize,
                    Some(_) => return false,
                }
            }
            false
        })
    }
}

/// A Balanced Multicasting plan: trees from one root, each with its rate.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BalancedPlan {
    /// The root.
    pub root: NodeId,
    /// The trees, largest rate first.
    pub trees: Vec<PlannedTree>,
}

impl BalancedPlan {
    /// The multicast throughput of the plan: the sum of its trees' rates, bytes/s.
    pub fn rate_bytes_s(&self) -> f64 {
        self.trees.iter().map(|t| t.rate_bytes_s).sum()
    }

    /// The load of every link (indexed by [`Platform::link_index`]), bytes/s.
    pub fn link_loads(&self, platform: &Platform) -> Vec<f64> {
        let mut load = vec![0.0; platform.link_count()];
        for t in &self.trees {
            for (l, &k) in link_uses(platform, &t.parent).iter().enumerate() {
                load[l] += k as f64 * t.rate_bytes_s;
            }
        }
        load
    }

    /// The largest load / capacity ratio over the links: at most 1 for a feasible plan.
    pub fn max_utilisation(&self, platform: &Platform) -> f64 {
        self.link_loads(platform)
            .iter()
            .enumerate()
            .map(|(l, load)| load / platform.capacity_bytes_s(platform.link_at(l)))
            .fold(0.0, f64::max)
    }
}

/// Knobs of [`plan_balanced`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PlanOptions {
    /// Rounds of multiplicative weights.
    pub iterations: usize,
    /// Step of the length updates (larger: faster, coarser).
    pub epsilon: f64,
    /// Most trees kept.
    pub max_trees: usize,
    /// In the *scaled* candidate, trees below this fraction of the total weight are dropped.
    pub min_tree_share: f64,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            iterations: 300,
            epsilon: 0.1,
            max_trees: 16,
            min_tree_share: 0.01,
        }
    }
}

/// How many times a tree's edges cross each link (indexed by [`Platform::link_index`]).
pub fn link_uses(platform: &Platform, parent: &[Option<NodeId>]) -> Vec<u32> {
    let mut uses = vec![0u32; platform.link_count()];
    for (c, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            for &l in platform.route(*p, NodeId(c as u32)).links() {
                uses[platform.link_index(l)] += 1;
            }
        }
    }
    uses
}

/// Route link indices of every ordered pair, computed once.
struct Routes {
    n: usize,
    links: Vec<Vec<usize>>,
}

impl Routes {
    fn new(platform: &Platform) -> Self {
        let n = platform.node_count();
        let mut links = Vec::with_capacity(n * n);
        for u in 0..n as u32 {
            for v in 0..n as u32 {
                links.push(if u == v {
                    Vec::new()
                } else {
                    platform
                        .route(NodeId(u), NodeId(v))
                        .links()
                        .iter()
                        .map(|&l| platform.link_index(l))
                        .collect()
                });
            }
        }
        Routes { n, links }
    }

    fn cost(&self, u: usize, v: usize, length: &[f64]) -> f64 {
        self.links[u * self.n + v].iter().map(|&l| length[l]).sum()
    }
}

/// The cheapest tree under `length`, grown from the root like Prim's algorithm (ties: lowest
/// node id).
fn cheapest_tree(routes: &Routes, root: usize, length: &[f64]) -> Vec<Option<NodeId>> {
    let n = routes.n;
    let mut parent = vec![None; n];
    let mut in_tree = vec![false; n];
    let mut dist: Vec<f64> = (0..n).map(|v| routes.cost(root, v, length)).collect();
    let mut from = vec![root; n];
    in_tree[root] = true;
    for _ in 1..n {
        let mut best: Option<usize> = None;
        for v in 0..n {
            if in_tree[v] {
                continue;
            }
            match best {
                Some(b) if dist[v] >= dist[b] => {}
                _ => best = Some(v),
            }
        }
        let v = best.expect("a node outside the tree");
        in_tree[v] = true;
        parent[v] = Some(NodeId(from[v] as u32));
        for w in 0..n {
            if !in_tree[w] {
                let c = routes.cost(v, w, length);
                if c < dist[w] {
                    dist[w] = c;
                    from[w] = v;
                }
            }
        }
    }
    parent
}

/// Plans Balanced Multicasting from `root` to every other node of `platform` (see the [module
/// docs](self) for the heuristic).
pub fn plan_balanced(
    platform: &Platform,
    root: NodeId,
    options: &PlanOptions,
) -> Result<BalancedPlan, BoundError> {
    let n = platform.node_count();
    if !platform.has_node(root) {
        return Err(BoundError::UnknownRoot {
            root,
            node_count: n,
        });
    }
    if n < 2 {
        return Err(BoundError::NoReceivers);
    }
    let m = platform.link_count();
    let cap: Vec<f64> = (0..m)
        .map(|l| platform.capacity_bytes_s(platform.link_at(l)))
        .collect();
    let routes = Routes::new(platform);
    let mut length: Vec<f64> = cap.iter().map(|c| 1.0 / c).collect();
    // Distinct trees in order of first appearance, with their uses and accumulated rate.
    let mut index: HashMap<Vec<Option<NodeId>>, usize> = HashMap::new();
    let mut trees: Vec<Tree> = Vec::new();
    for _ in 0..options.iterations.max(1) {
        let parent = cheapest_tree(&routes, root.0 as usize, &length);
        let k = match index.get(&parent) {
            Some(&k) => k,
            None => {
                let uses = link_uses(platform, &parent);
                index.insert(parent.clone(), trees.len());
                trees.push((parent, uses, 0.0));
                trees.len() - 1
            }
        };
        let (_, uses, acc) = &mut trees[k];
        let rate = (0..m)
            .filter(|&l| uses[l] > 0)
            .map(|l| cap[l] / uses[l] as f64)
            .fold(f64::INFINITY, f64::min);
        *acc += rate;
        let mut longest = 0.0f64;
        for l in 0..m {
            if uses[l] > 0 {
                length[l] *= (options.epsilon * uses[l] as f64 * rate / cap[l]).exp();
            }
            longest = longest.max(length[l]);
        }
        // Keep the lengths in range; only their ratios matter.
        if longest > 1e100 {
            length.iter_mut().for_each(|x| *x /= longest);
        }
    }
    trees.sort_by(|a, b| b.2.total_cmp(&a.2));
    let max_trees = options.max_trees.max(1);
    let total: f64 = trees.iter().map(|t| t.2).sum();
    // Candidate A: the largest trees, scaled together to the first full link, then each raised
    // on the residue.
    let mut kept: Vec<_> = trees
        .iter()
        .take(max_trees)
        .filter(|t| t.2 >= options.min_tree_share * total)
        .cloned()
        .collect();
    if kept.is_empty() {
        kept.push(trees[0].clone());
    }
    let load = loads(&kept, m);
    let util = (0..m).map(|l| load[l] / cap[l]).fold(0.0, f64::max);
    if util > 0.0 {
        kept.iter_mut().for_each(|t| t.2 /= util);
    }
    fill(&mut kept, &cap);
    // Candidate B: from an empty plan, each tree in turn (largest weight first) takes what the
    // residual capacities allow, until max_trees trees carry something.
    let mut greedy: Vec<_> = Vec::new();
    for t in &trees {
        if greedy.len() == max_trees {
            break;
        }
        let mut t = t.clone();
        t.2 = 0.0;
        greedy.push(t);
        let last = greedy.len() - 1;
        fill_one(&mut greedy, last, &cap);
        if greedy[last].2 <= 0.0 {
            greedy.pop();
        }
    }
    let rate = |v: &[Tree]| v.iter().map(|t| t.2).sum::<f64>();
    let mut trees = if rate(&greedy) > rate(&kept) {
        greedy
    } else {
        kept
    };
    trees.sort_by(|a, b| b.2.total_cmp(&a.2));
    // Trees left with a rounding-error rate (a millionth of a byte per second next to megabytes)
    // would only be noise for a sender to shape; dropping them keeps the plan feasible.
    let negligible = 1e-9 * rate(&trees);
    Ok(BalancedPlan {
        root,
        trees: trees
            .into_iter()
            .filter(|t| t.2 > negligible)
            .map(|(parent, _, rate_bytes_s)| PlannedTree {
                parent,
                rate_bytes_s,
            })
            .collect(),
    })
}

/// A candidate tree: parents, link uses, rate.
type Tree = (Vec<Option<NodeId>>, Vec<u32>, f64);

fn loads(trees: &[Tree], m: usize) -> Vec<f64> {
    let mut load = vec![0.0; m];
    for (_, uses, r) in trees {
        for l in 0..m {
            load[l] += uses[l] as f64 * r;
        }
    }
    load
}

/// Raises tree `k` by what the residual capacities allow.
fn fill_one(trees: &mut [Tree], k: usize, cap: &[f64]) {
    let load = loads(trees, cap.len());
    let uses = &trees[k].1;
    let extra = (0..cap.len())
        .filter(|&l| uses[l] > 0)
        .map(|l| ((cap[l] - load[l]) / uses[l] as f64).max(0.0))
        .fold(f64::INFINITY, f64::min);
    if extra.is_finite() {
        trees[k].2 += extra * (1.0 - 1e-12);
    }
}

/// Raises each tree in turn by what the residual capacities allow.
fn fill(trees: &mut [Tree], cap: &[f64]) {
    for k in 0..trees.len() {
        fill_one(trees, k, cap);
    }
}

/// The total rate the trees get without traffic shaping: every tree sends as fast as it can and
/// links are shared max-min fairly between trees, a tree crossing a link `k` times taking `k`
/// shares of it (progressive filling). The rates in `trees` are ignored.
pub fn unshaped_rate_bytes_s(platform: &Platform, trees: &[PlannedTree]) -> f64 {
    let m = platform.link_count();
    let uses: Vec<Vec<u32>> = trees
        .iter()
        .map(|t| link_uses(platform, &t.parent))
        .collect();
    let mut rate = vec![0.0; trees.len()];
    let mut frozen = vec![false; trees.len()];
    loop {
        let mut level = f64::INFINITY;
        let mut tight = Vec::new();
        for l in 0..m {
            let cap = platform.capacity_bytes_s(platform.link_at(l));
            let (mut fixed, mut count) = (0.0, 0u32);
            for (t, u) in uses.iter().enumerate() {
                if frozen[t] {
                    fixed += u[l] as f64 * rate[t];
                } else {
                    count += u[l];
                }
            }
            if count > 0 {
                let lambda = ((cap - fixed) / count as f64).max(0.0);
                if lambda < level * (1.0 - 1e-12) {
                    level = lambda;
                    tight = vec![l];
                } else if lambda <= level * (1.0 + 1e-12) {
                    tight.push(l);
                }
            }
        }
        if !level.is_finite() {
            break;
        }
        for t in 0..trees.len() {
            if !frozen[t] {
                rate[t] = level;
                if tight.iter().any(|&l| uses[t][l] > 0) {
                    frozen[t] = true;
                }
            }
        }
        if frozen.iter().all(|&f| f) {
            break;
        }
    }
    rate.iter().sum()
}
