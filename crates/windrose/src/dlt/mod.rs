//! `windrose dlt`: divisible-load scheduling on a tree (Kim, Jee & Lee, after Cheng &
//! Robertazzi). Given a tree, how long every node needs to process the whole load and how long
//! every link needs to carry it, print the share of the TOTAL load each node keeps and receives,
//! the order in which each parent sends its children their shares, and when everything is done.
//!
//! The computation is [`windrose_trees::dlt::schedule()`]; this module reads the files
//! ([`crate::input::parent_tree`], [`speeds`]) and prints the result.

pub mod speeds;

use crate::error::OrBadInput;
use crate::input;
use crate::output::{num, print, print_json, vtable};
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::PathBuf;
use windrose_trees::dlt::{self, OrderPolicy, Schedule};

/// The file formats, shown by `windrose dlt --help`.
const FORMATS_HELP: &str = "\
Tree file (--tree): either the JSON written by `windrose tree build --json` (its `parents` array,
and its `children` send order when present), or text with one `node,parent` line per node, the
root's parent `-`, `#` comments. Nodes are 0..N-1, each listed once.

    # node,parent
    0,-
    1,0
    2,0

Speeds file (--speeds): seconds for the WHOLE load, by extension.
  .toml: [compute_s_per_unit] node = seconds it needs to process the whole load alone (> 0);
         [link_s_per_unit] child = seconds to send the whole load to it from its parent (>= 0),
         keyed by the child (`2 = 10.0`) or by the link (`0-2 = 10.0`); no entry for the root.

    [compute_s_per_unit]
    0 = 1.0
    1 = 1.0
    2 = 1.0
    [link_s_per_unit]
    1 = 20.0
    0-2 = 10.0

  .csv:  node,compute_s_per_unit,link_s_per_unit (header required; the root's link is `-`)

From speeds in MB/s and a load of L MB: compute_s_per_unit = L / compute_mb_s and
link_s_per_unit = L / bandwidth_mb_s. The fractions depend only on the ratios of the times.

Model: store-and-forward; a node starts computing its share as soon as its whole share has
arrived and meanwhile sends each child its subtree's share, one child after the other. With
the computed fractions every node finishes at the same instant.

Examples: data/dlt/example1.toml with data/dlt/example1-tree.csv (the paper's Example 1), and
data/dlt/multilevel.toml with data/dlt/multilevel-tree.json.";

/// Options of `windrose dlt`.
#[derive(Debug, Args)]
#[command(after_long_help = FORMATS_HELP)]
pub struct DltArgs {
    /// The tree: the JSON of `windrose tree build --json`, or `node,parent` lines with `-` as the
    /// root's parent (see --help).
    #[arg(long, value_name = "FILE")]
    tree: PathBuf,
    /// Seconds each node needs to process the whole load (`compute_s_per_unit`) and each link to
    /// carry it (`link_s_per_unit`), as .toml or .csv (see --help).
    #[arg(long, value_name = "FILE")]
    speeds: PathBuf,
    /// In which order every parent sends its children their shares.
    #[arg(long, value_enum, default_value_t = Order::Optimal)]
    order: Order,
    /// Print the schedule as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// `--order`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Order {
    /// Fastest link first at every parent (ascending link time; Theorem 1 of Kim, Jee & Lee).
    Optimal,
    /// The tree file's order: its `children` lists (JSON), ascending id (JSON without
    /// `children`), or the order of its lines (text).
    Given,
}

impl From<Order> for OrderPolicy {
    fn from(o: Order) -> OrderPolicy {
        match o {
            Order::Optimal => OrderPolicy::Optimal,
            Order::Given => OrderPolicy::Given,
        }
    }
}

/// Runs `windrose dlt`.
pub fn run(args: DltArgs) -> anyhow::Result<()> {
    let tree = input::parent_tree(&args.tree)?;
    let sp = speeds::load(&args.speeds, &tree.tree, &args.tree)?;
    let policy = OrderPolicy::from(args.order);
    let schedule = dlt::schedule(
        &tree.tree,
        &sp.compute_s_per_unit,
        &sp.link_s_per_unit,
        policy,
    )
    .or_bad_input_about(format_args!(
        "{} with {}",
        args.speeds.display(),
        args.tree.display()
    ))?;
    if args.json {
        return print_json(&schedule);
    }
    let order_text = match policy {
        OrderPolicy::Optimal => {
            "optimal: fastest link first at every parent (Theorem 1 of Kim, Jee & Lee)".to_string()
        }
        OrderPolicy::Given => format!("given: {}", tree.send_order.describe()),
    };
    print(&render(
        &schedule,
        &args.tree.display().to_string(),
        &args.speeds.display().to_string(),
        &order_text,
    ))
}

/// A share of the load or a computed time: six decimals, so columns line up; scientific
/// notation when that would hide the value (below 5e-7) or make it very long (1e9 and above).
fn fixed(v: f64) -> String {
    if v != 0.0 && (v.abs() < 5e-7 || v.abs() >= 1e9) {
        format!("{v:.3e}")
    } else {
        format!("{v:.6}")
    }
}

/// An input time as the user wrote it (`1`, `2.5`), in scientific notation when very large or
/// very small.
fn input_time(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-6 || v.abs() >= 1e9) {
        format!("{v:e}")
    } else {
        num(v)
    }
}

/// The human-readable schedule.
fn render(s: &Schedule, tree_file: &str, speeds_file: &str, order_text: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "dlt: {} nodes, root {}, send order {order_text}",
        s.nodes.len(),
        s.root
    );
    let _ = writeln!(out, "tree: {tree_file}");
    let _ = writeln!(out, "speeds: {speeds_file} (seconds for the whole load)");
    let _ = writeln!(
        out,
        "Shares are of the TOTAL load; received_at_s and finish_s are seconds from the start."
    );
    out.push('\n');
    let header = [
        "node",
        "parent",
        "compute_s",
        "link_s",
        "received",
        "kept",
        "received_at_s",
        "finish_s",
    ];
    let rows: Vec<Vec<String>> = s
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.node.to_string(),
                n.parent.map_or("-".into(), |p| p.to_string()),
                input_time(n.compute_s_per_unit),
                n.link_s_per_unit.map_or("-".into(), input_time),
                fixed(n.fraction_received),
                fixed(n.fraction_kept),
                fixed(n.received_at_s),
                fixed(n.predicted_finish_s),
            ]
        })
        .collect();
    let lines = vtable(&header, &rows);
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        if i == 0 {
            out.push_str("  sends, in order (child: share of the total load)");
        } else {
            let sends = &s.nodes[i - 1].send_order;
            if !sends.is_empty() {
                out.push_str("  ");
                out.push_str(
                    &sends
                        .iter()
                        .map(|x| format!("{}: {}", x.child, fixed(x.fraction)))
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
        }
        out.push('\n');
    }
    out.push('\n');
    let kept: f64 = s.nodes.iter().map(|n| n.fraction_kept).sum();
    let root_kept = s.nodes.first().map_or(1.0, |n| n.fraction_kept);
    let _ = writeln!(
        out,
        "The root keeps alpha_0 = {} of the load; the shares kept add up to {}.",
        fixed(root_kept),
        fixed(kept)
    );
    let _ = writeln!(
        out,
        "Predicted finish time of the whole load: {} s (every node finishes then).",
        fixed(s.predicted_finish_s)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_stay_short() {
        assert_eq!(fixed(0.628428927), "0.628429");
        assert_eq!(fixed(0.0), "0.000000");
        assert_eq!(fixed(2.5e-9), "2.500e-9");
        assert_eq!(fixed(3e12), "3.000e12");
        assert_eq!(input_time(2.5), "2.5");
        assert_eq!(input_time(1e300), "1e300");
        assert_eq!(input_time(1e-300), "1e-300");
        assert_eq!(input_time(0.0), "0");
    }
}
