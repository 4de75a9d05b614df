//! `windrose bound SCENARIO.toml [--seed S] [--plan] [--json]`: the physical limit of a multicast
//! from the workload's root on the scenario's platform (the minimum over receivers of the
//! max-flow from the root, see `windrose_trees::multicast::bound`), per interval between the
//! scenario's capacity changes and mayhem draws, and the earliest completion time of the
//! workload's message (relays may store data across changes: the time-expanded max-flow, a true
//! upper bound on every protocol). With `--plan`, the Balanced Multicasting plan made from the capacities
//! at time 0 and its rate as a fraction of the bound.
//!
//! Latency changes do not change a bound (it is a throughput) and node failures are ignored:
//! the bound is the platform's, for every node but the root as a receiver.

use crate::error::bad_input;
use crate::output::{num, print, print_json, vtable};
use crate::sim_cmd::scenario_error;
use anyhow::Result;
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use windrose_model::platform::Platform;
use windrose_model::units::format_size;
use windrose_model::NodeId;
use windrose_sim::network::Change;
use windrose_sim::scenario::{load_scenario, Mayhem, Scenario};
use windrose_trees::multicast::balanced::{plan_balanced, unshaped_rate_bytes_s, PlanOptions};
use windrose_trees::multicast::bound::{
    completion_time_s, dynamic_completion_time_s, multicast_bound,
};

/// Most intervals reported (a mayhem scenario whose bound is tiny would otherwise go on and on).
const MAX_INTERVALS: usize = 100_000;

/// Options of `windrose bound`.
#[derive(Debug, Args)]
pub struct BoundArgs {
    /// The scenario file (TOML, as for `windrose sim run`).
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: PathBuf,
    /// Seed of the mayhem draws; default: the file's `seed`, else 0.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also plan Balanced Multicasting (trees and rates from the capacities at time 0).
    #[arg(long)]
    pub plan: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The bound while the capacities are constant.
#[derive(Debug, serde::Serialize)]
struct Interval {
    start_s: f64,
    /// None for the last interval (it lasts for ever).
    end_s: Option<f64>,
    bound_bytes_s: f64,
    bottleneck_receiver: NodeId,
}

#[derive(Debug, serde::Serialize)]
struct PlanTree {
    rate_bytes_s: f64,
    /// Parent of each node; null for the root.
    parent: Vec<Option<NodeId>>,
}

#[derive(Debug, serde::Serialize)]
struct PlanReport {
    rate_bytes_s: f64,
    fraction_of_bound: f64,
    unshaped_rate_bytes_s: f64,
    trees: Vec<PlanTree>,
}

#[derive(Debug, serde::Serialize)]
pub(crate) struct BoundReport {
    scenario: String,
    root: NodeId,
    nodes: usize,
    message_bytes: u64,
    seed: u64,
    intervals: Vec<Interval>,
    /// True when the intervals stop at MAX_INTERVALS before the message is delivered.
    truncated: bool,
    /// The earliest any protocol can deliver the message: relays may keep data between
    /// capacity changes (the time-expanded max-flow; equal to `completion_without_storage_s`
    /// when nothing changes).
    pub(crate) completion_s: Option<f64>,
    /// Interval by interval, each at its own max-flow, nothing carried over.
    completion_without_storage_s: Option<f64>,
    mean_throughput_bytes_s: Option<f64>,
    plan: Option<PlanReport>,
}

/// Runs `windrose bound …`.
pub fn run(args: BoundArgs) -> Result<()> {
    let scenario = load_scenario(&args.scenario).map_err(scenario_error)?;
    let seed = args.seed.unwrap_or(scenario.default_seed);
    let report = bound_report(&scenario, seed, args.plan)?;
    if args.json {
        print_json(&report)
    } else {
        print(&render(&report))
    }
}

fn apply(platform: &mut Platform, change: &Change) -> Result<()> {
    if let Change::Capacity { link, bytes_s } = *change {
        platform
            .set_capacity(link, bytes_s)
            .map_err(|e| bad_input(format!("cannot apply a change: {e}")))?;
    }
    Ok(())
}

pub(crate) fn bound_report(scenario: &Scenario, seed: u64, with_plan: bool) -> Result<BoundReport> {
    let root = scenario.workload.root;
    let message = scenario.workload.message_bytes as f64;
    let source = scenario.source.display();
    let mut platform = scenario.platform.clone();
    let mut fixed: Vec<_> = scenario.changes.iter().collect();
    fixed.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut next_fixed = 0;
    let mut mayhem = scenario.mayhem.as_ref().map(|m| {
        let links = m.selected_links(&scenario.platform);
        (m, Mayhem::rng(seed), links)
    });
    let mut next_draw = 0u64;

    let mut intervals: Vec<Interval> = Vec::new();
    let mut left = message;
    let mut t = 0.0f64;
    let mut truncated = false;
    // The platform as the planner sees it: after everything at time 0 (a mayhem draw at 0 too).
    let mut start_platform: Option<Platform> = None;
    // The platform of every interval, for the time-expanded bound.
    let mut phases: Vec<(f64, Platform)> = Vec::new();
    loop {
        // What happens up to now: mayhem draws first, then timed changes (file order).
        if let Some((m, rng, links)) = mayhem.as_mut() {
            while m.draw_time(next_draw).is_some_and(|at| at <= t) {
                for c in m.draw(rng, &scenario.platform, links) {
                    apply(&mut platform, &c)?;
                }
                next_draw += 1;
            }
        }
        while next_fixed < fixed.len() && fixed[next_fixed].at_s <= t {
            apply(&mut platform, &fixed[next_fixed].change)?;
            next_fixed += 1;
        }
        if start_platform.is_none() {
            start_platform = Some(platform.clone());
        }
        let b = multicast_bound(&platform, root)
            .map_err(|e| bad_input(format!("{source}: workload.root: {e}")))?;
        phases.push((t, platform.clone()));
        if let Some(last) = intervals.last_mut() {
            last.end_s = Some(t);
        }
        intervals.push(Interval {
            start_s: t,
            end_s: None,
            bound_bytes_s: b.bytes_s,
            bottleneck_receiver: b.bottleneck_receiver,
        });
        // The next instant anything changes; mayhem only while the message is on its way.
        let next_change = fixed.get(next_fixed).map(|c| c.at_s);
        let next_mayhem = mayhem.as_ref().and_then(|(m, _, _)| m.draw_time(next_draw));
        let done_at = t + left / b.bytes_s;
        let next = match (next_change, next_mayhem) {
            (Some(c), Some(d)) if d < done_at => Some(c.min(d)),
            (Some(c), _) => Some(c),
            (None, Some(d)) if d < done_at => Some(d),
            _ => None,
        };
        let Some(next) = next else { break };
        left = (left - b.bytes_s * (next - t)).max(0.0);
        t = next;
        if intervals.len() >= MAX_INTERVALS {
            truncated = left > 0.0;
            break;
        }
    }
    let steps: Vec<(f64, f64)> = intervals
        .iter()
        .map(|i| (i.start_s, i.bound_bytes_s))
        .collect();
    let completion_without_storage_s = if truncated {
        None
    } else {
        completion_time_s(&steps, message)
    };
    let completion_s = match completion_without_storage_s {
        Some(upper) if phases.len() > 1 => {
            let phases: Vec<(f64, &Platform)> = phases.iter().map(|(t, p)| (*t, p)).collect();
            dynamic_completion_time_s(&phases, root, message, upper)
                .map_err(|e| bad_input(format!("{source}: workload.root: {e}")))?
        }
        other => other,
    };
    let start = start_platform.unwrap_or_else(|| scenario.platform.clone());
    let plan = if with_plan {
        let p = plan_balanced(&start, root, &PlanOptions::default())
            .map_err(|e| bad_input(format!("{source}: workload.root: {e}")))?;
        let rate = p.rate_bytes_s();
        Some(PlanReport {
            rate_bytes_s: rate,
            fraction_of_bound: rate / intervals[0].bound_bytes_s,
            unshaped_rate_bytes_s: unshaped_rate_bytes_s(&start, &p.trees),
            trees: p
                .trees
                .into_iter()
                .map(|t| PlanTree {
                    rate_bytes_s: t.rate_bytes_s,
                    parent: t.parent,
                })
                .collect(),
        })
    } else {
        None
    };
    Ok(BoundReport {
        scenario: scenario.name.clone(),
        root,
        nodes: scenario.platform.node_count(),
        message_bytes: scenario.workload.message_bytes,
        seed,
        intervals,
        truncated,
        completion_s,
        completion_without_storage_s,
        mean_throughput_bytes_s: completion_s.filter(|&c| c > 0.0).map(|c| message / c),
        plan,
    })
}

fn mb_s(v: f64) -> String {
    format!("{:.3}", v / 1e6)
}

fn render(r: &BoundReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: multicast from node {} to {} other nodes, {} message (seed {})",
        r.scenario,
        r.root,
        r.nodes.saturating_sub(1),
        format_size(r.message_bytes),
        r.seed
    );
    out.push_str("\nBound per interval (max-flow from the root to its worst receiver)\n");
    let rows: Vec<Vec<String>> = r
        .intervals
        .iter()
        .map(|i| {
            vec![
                num(i.start_s),
                i.end_s.map_or_else(|| "-".to_string(), num),
                mb_s(i.bound_bytes_s),
                i.bottleneck_receiver.to_string(),
            ]
        })
        .collect();
    for l in vtable(&["from s", "to s", "MB/s", "worst receiver"], &rows) {
        let _ = writeln!(out, "{l}");
    }
    out.push('\n');
    match (r.completion_s, r.mean_throughput_bytes_s) {
        (Some(c), Some(tp)) => {
            let _ = writeln!(
                out,
                "At the bound the message is delivered after {c:.6} s (mean {} MB/s).",
                mb_s(tp)
            );
            if let Some(w) = r
                .completion_without_storage_s
                .filter(|_| r.intervals.len() > 1)
            {
                let _ = writeln!(
                    out,
                    "(Relays keeping data across capacity changes, a time-expanded max-flow; \
                     interval by interval with nothing carried over it would be {w:.6} s.)"
                );
            }
        }
        (Some(c), None) => {
            let _ = writeln!(out, "At the bound the message is delivered after {c:.6} s.");
        }
        _ => {
            let _ = writeln!(
                out,
                "The message is not delivered within the first {} intervals.",
                r.intervals.len()
            );
        }
    }
    if let Some(p) = &r.plan {
        let _ = writeln!(
            out,
            "\nBalanced Multicasting plan (capacities at 0 s): {} MB/s in {} tree(s), {:.1} % of the bound at 0 s; unshaped, the same trees get {} MB/s",
            mb_s(p.rate_bytes_s),
            p.trees.len(),
            100.0 * p.fraction_of_bound,
            mb_s(p.unshaped_rate_bytes_s)
        );
        let rows: Vec<Vec<String>> =
            p.trees
                .iter()
                .enumerate()
                .map(|(k, t)| {
                    let fanout = t.parent.iter().flatten().fold(
                        vec![0usize; t.parent.len()],
                        |mut acc, p| {
                            acc[p.0 as usize] += 1;
                            acc
                        },
                    );
                    let forwarders = fanout.iter().filter(|&&f| f > 0).count();
                    vec![
                        k.to_string(),
                        mb_s(t.rate_bytes_s),
                        forwarders.to_string(),
                        fanout.iter().max().copied().unwrap_or(0).to_string(),
                    ]
                })
                .collect();
        for l in vtable(&["tree", "MB/s", "forwarders", "max children"], &rows) {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}
