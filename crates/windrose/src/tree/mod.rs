//! `windrose tree …`: build a broadcast tree from a cost model, and adapt a binomial tree to a
//! link-cost rise, a node joining or a node leaving.

mod adapt;
mod build;

use crate::output::{htable, num};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Subcommand;
use serde::Serialize;
use windrose_model::NodeId;
use windrose_trees::adaptive::Strategy;
use windrose_trees::binomial::Position;
use windrose_trees::TreeAlgorithm;

/// The tree subcommands.
#[derive(Debug, Subcommand)]
pub enum TreeCommand {
    /// Build a broadcast tree and print its positions, parents, leaf path costs, cost and
    /// broadcast-time estimate.
    Build(build::BuildArgs),
    /// Apply one change (a link cost rise, a join, a leave) to a binomial tree and adapt it with
    /// a swapping strategy of Figueira & Mendes.
    Adapt(adapt::AdaptArgs),
}

/// Runs a tree subcommand.
pub fn run(cmd: TreeCommand) -> anyhow::Result<()> {
    match cmd {
        TreeCommand::Build(args) => build::run(args),
        TreeCommand::Adapt(args) => adapt::run(args),
    }
}

/// `--algo`, `--tree`: the names of [`TreeAlgorithm::ALL`].
pub(crate) fn algorithm_parser() -> impl TypedValueParser<Value = TreeAlgorithm> {
    by_name(TreeAlgorithm::ALL, TreeAlgorithm::name)
}

/// A clap parser accepting exactly the names of `all` (listed in `--help` and in errors).
fn by_name<T: Copy + Send + Sync + 'static>(
    all: impl IntoIterator<Item = T>,
    name: fn(T) -> &'static str,
) -> impl TypedValueParser<Value = T> {
    let all: Vec<T> = all.into_iter().collect();
    let names: Vec<&'static str> = all.iter().map(|&t| name(t)).collect();
    PossibleValuesParser::new(names).try_map(move |s| {
        all.iter()
            .copied()
            .find(|&t| name(t) == s)
            .ok_or_else(|| format!("unknown value '{s}'"))
    })
}

/// `--strategy`: the names of [`Strategy::ALL`].
fn strategy_parser() -> impl TypedValueParser<Value = Strategy> {
    by_name(Strategy::ALL, Strategy::name)
}

/// A leaf and the cost of its path from the root.
#[derive(Debug, Serialize)]
struct LeafCost {
    /// Its binomial position, for binomial-shaped trees.
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<Position>,
    node: NodeId,
    cost: f64,
}

/// The `Position` / `Node` table of a binomial tree.
fn positions_table(positions: &[NodeId]) -> String {
    htable(&[
        (
            "Position",
            (0..positions.len()).map(|p| p.to_string()).collect(),
        ),
        ("Node", positions.iter().map(|n| n.to_string()).collect()),
    ])
}

/// The paper's leaf table: `Leaf` over `Cost`, under `Position` when leaves have positions.
fn leaves_table(leaves: &[LeafCost]) -> String {
    let mut rows = Vec::with_capacity(3);
    let positions: Option<Vec<String>> = leaves
        .iter()
        .map(|l| l.position.map(|p| p.to_string()))
        .collect();
    if let Some(positions) = positions {
        rows.push(("Position", positions));
    }
    rows.push(("Leaf", leaves.iter().map(|l| l.node.to_string()).collect()));
    rows.push(("Cost", leaves.iter().map(|l| num(l.cost)).collect()));
    htable(&rows)
}
