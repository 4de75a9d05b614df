//! `windrose tree adapt`.

use super::{leaves_table, positions_table, strategy_parser, LeafCost};
use crate::error::{bad_input, OrBadInput};
use crate::input;
use crate::output::{num, print, print_json, vtable};
use clap::{ArgGroup, Args};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use windrose_model::load::{parse_cost_row, CostModel};
use windrose_model::{CostUnit, LinkCosts, LinkCostsMut, NodeId};
use windrose_trees::adaptive::{AdaptReport, AdaptiveTree, Strategy};

/// Options of `windrose tree adapt`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("change").required(true)))]
pub struct AdaptArgs {
    /// Cost matrix or cluster model (CSV or TOML). Default: the 8-node Table 1 of Figueira &
    /// Mendes, built in.
    #[arg(long, value_name = "FILE")]
    costs: Option<PathBuf>,
    /// The binomial tree: JSON from `tree build --json` (or `tree adapt --json`), or the node at
    /// each position as plain text (`0 5 7 4 3 2 6 1`; commas or whitespace; `#` comments).
    #[arg(long, value_name = "FILE")]
    tree: PathBuf,
    /// The link A–B becomes FACTOR times as costly (FACTOR > 0; below 1 it gets cheaper).
    #[arg(long, value_name = "A,B,FACTOR", group = "change")]
    raise: Option<String>,
    /// A new node joins with these costs to nodes 0..N-1 (e.g. `4,2,5,0,0,4,4,3`); it gets id N.
    #[arg(
        long,
        value_name = "COSTS_ROW",
        group = "change",
        allow_hyphen_values = true
    )]
    join: Option<String>,
    /// This node leaves; the node at the last position takes its place.
    #[arg(long, value_name = "NODE", group = "change")]
    leave: Option<u32>,
    /// Swapping strategy run after the change. Required with --raise; without it a join or
    /// leave only places the nodes.
    #[arg(long, value_parser = strategy_parser(), required_unless_present_any = ["join", "leave"])]
    strategy: Option<Strategy>,
    /// Print one JSON object instead of tables (its `positions` can be fed back to --tree).
    #[arg(long)]
    json: bool,
}

/// The change that was applied.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Change {
    Raise {
        a: NodeId,
        b: NodeId,
        factor: f64,
        old_cost: f64,
        new_cost: f64,
        /// False when A–B is not an edge of the tree, so the tree cannot change.
        tree_link: bool,
    },
    Join {
        node: NodeId,
        costs: Vec<f64>,
    },
    Leave {
        node: NodeId,
    },
}

/// Everything `tree adapt` reports; printed as tables or as JSON.
#[derive(Debug, Serialize)]
struct AdaptOutput {
    change: Change,
    strategy: Option<Strategy>,
    node_count: usize,
    unit: CostUnit,
    costs: String,
    #[serde(flatten)]
    report: AdaptReport,
    steps: usize,
    gain: f64,
    reached_target: bool,
    /// Node at each position after the adaptation.
    positions: Vec<NodeId>,
    /// Leaves by ascending position, with their root-path costs.
    leaves: Vec<LeafCost>,
}

/// Runs `windrose tree adapt`.
pub fn run(args: AdaptArgs) -> anyhow::Result<()> {
    let input::Costs { mut model, source } = input::costs(args.costs.as_deref())?;
    let nodes = input::tree_positions(&args.tree, model.node_count())?;
    let mut tree =
        AdaptiveTree::from_positions(&model, nodes).or_bad_input_about(args.tree.display())?;
    let strategy = args.strategy;
    let (change, report) = if let Some(spec) = &args.raise {
        let r = input::raise(spec)?;
        let a = input::node(&model, r.a, &format!("--raise {spec}"))?;
        let b = input::node(&model, r.b, &format!("--raise {spec}"))?;
        let strategy = strategy.ok_or_else(|| bad_input("--raise needs --strategy"))?;
        let old_cost = model.cost(a, b);
        let new_cost = old_cost * r.factor;
        model
            .set_cost(a, b, new_cost)
            .or_bad_input_about(format_args!("--raise {spec}"))?;
        let change = Change::Raise {
            a,
            b,
            factor: r.factor,
            old_cost,
            new_cost,
            tree_link: tree.tree_link(a, b).is_some(),
        };
        let report = if tree.position_of(a).is_some() && tree.position_of(b).is_some() {
            tree.on_link_cost_change(&model, a, b, strategy)
                .or_bad_input_about(format_args!("--raise {spec}"))?
        } else {
            // A link to a node outside the tree (e.g. one that left): nothing to adapt.
            let cost = tree.cost();
            AdaptReport {
                cost_before: cost,
                cost_after_change: cost,
                final_cost: cost,
                tried: Vec::new(),
                made: None,
            }
        };
        (change, report)
    } else if let Some(row) = &args.join {
        let costs = parse_cost_row(row).map_err(|e| bad_input(format!("--join {row}: {e}")))?;
        let CostModel::Dense(matrix) = &mut model else {
            return Err(bad_input(format!(
                "--join needs a dense cost matrix, but {source} is a cluster model"
            )));
        };
        let node = matrix
            .push_node(&costs)
            .or_bad_input_about(format_args!("--join {row}"))?;
        let report = tree
            .join(&model, node, strategy)
            .or_bad_input_about(format_args!("--join {row}"))?;
        (Change::Join { node, costs }, report)
    } else if let Some(id) = args.leave {
        let node = NodeId(id);
        let report = tree
            .leave(&model, node, strategy)
            .or_bad_input_about(format_args!("--leave {id}"))?;
        (Change::Leave { node }, report)
    } else {
        return Err(bad_input("give one of --raise, --join or --leave"));
    };
    let out = AdaptOutput {
        change,
        strategy,
        node_count: model.node_count(),
        unit: model.unit(),
        costs: source,
        steps: report.steps(),
        gain: report.gain(),
        reached_target: report.reached_target(),
        report,
        positions: tree.nodes().to_vec(),
        leaves: tree
            .leaf_costs()
            .into_iter()
            .map(|(position, node, cost)| LeafCost {
                position: Some(position),
                node,
                cost,
            })
            .collect(),
    };
    if args.json {
        print_json(&out)
    } else {
        print(&render(&out))
    }
}

/// The human-readable form of an adaptation.
fn render(o: &AdaptOutput) -> String {
    let unit = o.unit.name();
    let r = &o.report;
    let mut out = String::new();
    let what = match &o.change {
        Change::Raise {
            a,
            b,
            factor,
            old_cost,
            new_cost,
            ..
        } => format!(
            "link {a}-{b} cost x{} ({} -> {} {unit})",
            num(*factor),
            num(*old_cost),
            num(*new_cost)
        ),
        Change::Join { node, costs } => format!(
            "node {node} joins (costs {})",
            costs.iter().map(|&c| num(c)).collect::<Vec<_>>().join(",")
        ),
        Change::Leave { node } => format!("node {node} leaves"),
    };
    let strategy = o.strategy.map_or("none (placement only)", |s| s.name());
    let _ = writeln!(out, "tree adapt: {what}, strategy {strategy}");
    let _ = writeln!(out, "N = {}, unit {unit}; costs: {}", o.node_count, o.costs);
    match &o.change {
        Change::Raise {
            a,
            b,
            tree_link: false,
            ..
        } => {
            let _ = writeln!(
                out,
                "note: {a}-{b} is not a tree link, so the tree and its cost do not change"
            );
        }
        Change::Raise {
            old_cost, new_cost, ..
        } if new_cost <= old_cost => {
            let _ = writeln!(
                out,
                "note: the cost did not rise; the strategies run only when a tree link gets costlier"
            );
        }
        _ => {}
    }

    out.push('\n');
    let _ = writeln!(out, "Swaps tried: {}", r.steps());
    if !r.tried.is_empty() {
        let made = r
            .made
            .as_ref()
            .and_then(|m| r.tried.iter().rposition(|t| t == m));
        let rows: Vec<Vec<String>> = r
            .tried
            .iter()
            .enumerate()
            .map(|(i, t)| {
                vec![
                    (i + 1).to_string(),
                    t.moved.to_string(),
                    t.with.to_string(),
                    format!("{} <-> {}", t.positions.0, t.positions.1),
                    num(t.cost),
                ]
            })
            .collect();
        let lines = vtable(&["step", "moved", "with", "positions", "cost"], &rows);
        for (i, line) in lines.iter().enumerate() {
            let mark = if i > 0 && made == Some(i - 1) {
                "  <- made"
            } else {
                ""
            };
            let _ = writeln!(out, "{line}{mark}");
        }
    }
    if r.made.is_none() && !r.tried.is_empty() {
        let _ = writeln!(out, "No swap made.");
    }

    out.push('\n');
    let _ = writeln!(out, "Cost before the change: {} {unit}", num(r.cost_before));
    let _ = writeln!(
        out,
        "Cost after the change:  {} {unit}",
        num(r.cost_after_change)
    );
    let verdict = if r.reached_target() {
        "back to the cost before the change"
    } else {
        "above the cost before the change"
    };
    let _ = writeln!(
        out,
        "Final cost:             {} {unit} ({verdict}; gain {}%)",
        num(r.final_cost),
        num((1000.0 * r.gain()).round() / 10.0)
    );

    out.push('\n');
    out.push_str(&positions_table(&o.positions));
    out.push('\n');
    out.push_str(&leaves_table(&o.leaves));
    out
}
