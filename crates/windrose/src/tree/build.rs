//! `windrose tree build`.

use super::{algorithm_parser, leaves_table, positions_table, LeafCost};
use crate::error::{bad_input, OrBadInput};
use crate::input;
use crate::output::{htable, num, print, print_json};
use clap::Args;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use windrose_model::{CostUnit, LinkCosts, NodeId};
use windrose_trees::binomial;
use windrose_trees::{Tree, TreeAlgorithm};

/// Options of `windrose tree build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Cost matrix or cluster model (CSV or TOML; see the windrose_model::load docs). Default:
    /// the 8-node Table 1 of Figueira & Mendes, built in.
    #[arg(long, value_name = "FILE")]
    costs: Option<PathBuf>,
    /// Tree algorithm.
    #[arg(long, value_parser = algorithm_parser())]
    algo: TreeAlgorithm,
    /// Node the broadcast starts from.
    #[arg(long, value_name = "NODE")]
    root: u32,
    /// Cluster of each node, for cluster-aware algorithms (magpie). Default: the cost model's
    /// clusters when it is a cluster model.
    #[arg(long, value_name = "FILE")]
    clusters: Option<PathBuf>,
    /// Time a node spends on each send, in the cost unit (e.g. ms), for the broadcast-time
    /// estimate.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    send_gap: f64,
    /// Print one JSON object instead of tables (readable back by `tree adapt --tree`).
    #[arg(long)]
    json: bool,
}

/// Everything `tree build` reports; printed as tables or as JSON.
#[derive(Debug, Serialize)]
struct BuildReport {
    algorithm: &'static str,
    root: NodeId,
    node_count: usize,
    unit: CostUnit,
    /// The cost file, or a note that the built-in default was used.
    costs: String,
    /// Node at each binomial position (binomial-shaped trees only).
    #[serde(skip_serializing_if = "Option::is_none")]
    positions: Option<Vec<NodeId>>,
    /// Parent of each node id (null for the root).
    parents: Vec<Option<NodeId>>,
    /// Children of each node id, in the order it sends to them (empty for leaves); read by
    /// `windrose dlt --order given`.
    children: Vec<Vec<NodeId>>,
    /// Leaves with their root-path costs: by ascending position for binomial-shaped trees,
    /// else by ascending node id.
    leaves: Vec<LeafCost>,
    /// Costliest root-to-leaf path.
    cost: f64,
    send_gap: f64,
    /// `Tree::broadcast_time(costs, send_gap)`.
    broadcast_time: f64,
}

/// Runs `windrose tree build`.
pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let costs = input::costs(args.costs.as_deref())?;
    let model = &costs.model;
    let root = input::node(model, args.root, &format!("--root {}", args.root))?;
    if !(args.send_gap.is_finite() && args.send_gap >= 0.0) {
        return Err(bad_input(format!(
            "--send-gap {}: must be a finite number >= 0",
            args.send_gap
        )));
    }
    let algo = args.algo;
    let clusters = input::clusters(args.clusters.as_deref(), model)?;
    if algo == TreeAlgorithm::Magpie && clusters.is_none() {
        return Err(bad_input(
            "--algo magpie needs a cluster map: --clusters FILE, or a cluster cost model",
        ));
    }
    let tree = algo
        .build(model, clusters.as_deref(), root)
        .or_bad_input_about(format_args!("--algo {algo}"))?;
    let positions = match algo {
        TreeAlgorithm::BalancedPath | TreeAlgorithm::Binomial => binomial_positions(&tree),
        _ => None,
    };
    let path_costs = tree.path_costs(model);
    let leaves = match &positions {
        Some(nodes) => binomial::leaves(nodes.len())
            .map(|p| LeafCost {
                position: Some(p),
                node: nodes[p],
                cost: path_costs[nodes[p].index()],
            })
            .collect(),
        None => tree
            .leaves()
            .into_iter()
            .map(|n| LeafCost {
                position: None,
                node: n,
                cost: path_costs[n.index()],
            })
            .collect(),
    };
    let report = BuildReport {
        algorithm: algo.name(),
        root,
        node_count: model.node_count(),
        unit: model.unit(),
        costs: costs.source,
        parents: (0..model.node_count())
            .map(|i| tree.parent(NodeId::from(i)))
            .collect(),
        children: (0..model.node_count())
            .map(|i| tree.children(NodeId::from(i)).to_vec())
            .collect(),
        positions,
        leaves,
        cost: tree.cost(model),
        send_gap: args.send_gap,
        broadcast_time: tree.broadcast_time(model, args.send_gap),
    };
    if args.json {
        print_json(&report)
    } else {
        print(&render(&report))
    }
}

/// The node at each position when `tree` has the binomial shape of its size (MPICH numbering,
/// children in send order largest subtree first), else None.
///
/// Positions are a preorder that visits children smallest subtree first (every subtree is the
/// interval `p .. p + lowbit(p)`); the shape is then checked parent by parent.
fn binomial_positions(tree: &Tree) -> Option<Vec<NodeId>> {
    let mut nodes = Vec::with_capacity(tree.len());
    let mut stack = vec![tree.root()];
    while let Some(u) = stack.pop() {
        nodes.push(u);
        stack.extend_from_slice(tree.children(u));
    }
    (1..nodes.len())
        .all(|p| tree.parent(nodes[p]) == Some(nodes[binomial::parent(p)]))
        .then_some(nodes)
}

/// The human-readable form of a build report.
fn render(r: &BuildReport) -> String {
    let unit = r.unit.name();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tree build: {}, root {}, N = {}, unit {unit}",
        r.algorithm, r.root, r.node_count
    );
    let _ = writeln!(out, "costs: {}", r.costs);
    if let Some(positions) = &r.positions {
        out.push('\n');
        out.push_str(&positions_table(positions));
    }
    out.push('\n');
    out.push_str(&htable(&[
        (
            "Node",
            (0..r.parents.len()).map(|i| i.to_string()).collect(),
        ),
        (
            "Parent",
            r.parents
                .iter()
                .map(|p| p.map_or("-".to_string(), |p| p.to_string()))
                .collect(),
        ),
    ]));
    out.push('\n');
    out.push_str(&leaves_table(&r.leaves));
    out.push('\n');
    let _ = writeln!(
        out,
        "tree cost: {} {unit} (the costliest root-to-leaf path)",
        num(r.cost)
    );
    let _ = writeln!(
        out,
        "broadcast time: {} {unit} (send gap {})",
        num(r.broadcast_time),
        num(r.send_gap)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use windrose_trees::adaptive::AdaptiveTree;

    #[test]
    fn binomial_positions_round_trip() {
        let m = windrose_model::fixtures::table1();
        let t = AdaptiveTree::balanced_path(&m, NodeId(0)).unwrap();
        assert_eq!(binomial_positions(&t.to_tree()).unwrap(), t.nodes());
        // `tree build` reads Balanced-Path's positions back from its tree: any size, any root.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in 1..40 {
            let m = windrose_model::random::uniform_hops(&mut rng, n, 10);
            let root = NodeId::from(n * 7 / 3 % n);
            let t = AdaptiveTree::balanced_path(&m, root).unwrap();
            assert_eq!(
                binomial_positions(&t.to_tree()).unwrap(),
                t.nodes(),
                "N = {n}"
            );
        }
        // A chain of three is not binomial-shaped.
        let chain = Tree::from_edges(
            3,
            NodeId(0),
            &[(NodeId(1), NodeId(0)), (NodeId(2), NodeId(1))],
        )
        .unwrap();
        assert_eq!(binomial_positions(&chain), None);
    }
}
