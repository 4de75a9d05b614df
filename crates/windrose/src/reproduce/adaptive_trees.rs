//! `windrose reproduce adaptive-trees`: the worked examples (Tables 2, 3, 4, 6, 7, 8) and the
//! experiments (Figures 7, 8, 9) of Figueira & Mendes, "Dynamically Adaptive Binomial Trees for
//! Broadcasting in Heterogeneous Networks of Workstations".
//!
//! # Choices where the paper is silent
//! - **Random topologies**: every pair of nodes gets a distance drawn uniformly from
//!   `0..=max_hops` (symmetric, zero diagonal; [`random::uniform_hops`]), one ChaCha8 generator
//!   per topology seeded from `(--seed, experiment, topology index)` through SplitMix64, so any
//!   topology can be rebuilt alone and results do not depend on the number of threads.
//!   `--min-hops 1` draws from `1..=max_hops` instead (no "directly connected" pairs), a
//!   sensitivity check: with 0-hop distances almost every Balanced-Path link costs 0.
//! - **Common random numbers (Figures 7-8)**: every cost factor and every strategy sees the same
//!   topologies, the same Balanced-Path tree (rooted at node 0) and the same raised link, so the
//!   differences between curves are the strategies', not sampling noise.
//! - **Which link is raised (Figures 7-8)**: a uniformly random tree link (a non-root position p
//!   and its parent) among those with a **non-zero** cost (`--link nonzero`, the default). With
//!   distances uniform in 0..=10 most Balanced-Path links cost 0 hops, and 0 × factor stays 0:
//!   such a "rise" changes nothing. We count the zero-cost tree links and report them;
//!   `--link any` draws among all tree links instead (zero links then score gain 0, steps 0).
//! - **Averages** are over every topology, including those where the raised link is not on a
//!   costliest path, so the tree cost did not rise: the strategy then does not run (gain 0,
//!   steps 0), as the paper's stopping rule implies (the target is already met).
//! - **Stopping rule, gain, steps, benefit**: those of `windrose_trees::adaptive`: a strategy
//!   stops at the first swap that brings the cost back to at most its value before the change;
//!   otherwise it performs its best swap if that beats the increased cost. Steps = swaps
//!   evaluated; gain = (increased − final) / increased; benefit = average gain / average steps.
//! - **Figure 9 operations**: each operation is a join or a leave with probability ½; a leave
//!   removes a uniformly random live non-root node (a join is forced if none is left); a joining
//!   node gets a fresh id and distances uniform in `0..=max_hops` to every id so far (ids that
//!   left stay in the matrix, outside the tree). The three variants run in lockstep on the
//!   identical operation sequence and the same matrix.

use super::output::{create_dir, write_atomic};
use super::plot::{self, Bars, Labels, Line};
use super::{mark, AdaptiveTreesArgs, LinkChoice};
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use windrose_model::{
    fixtures, random, CostUnit, DenseCostMatrix, LinkCosts, LinkCostsMut, NodeId, Overlay,
};
use windrose_trees::adaptive::{AdaptReport, AdaptiveTree, Strategy};
use windrose_trees::binomial::{self, Position};

// ---------------------------------------------------------------------------------------------
// Sizes and seeds
// ---------------------------------------------------------------------------------------------

/// How big the experiments are.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Sizes {
    /// Nodes of each Figure 7-8 topology.
    pub fig78_nodes: usize,
    /// Random topologies of Figures 7-8.
    pub fig78_topologies: usize,
    /// Largest distance (hops) of Figures 7-8.
    pub fig78_max_hops: u32,
    /// Cost factors of Figures 7-8.
    pub factors: Vec<f64>,
    /// Initial nodes of each Figure 9 tree.
    pub fig9_nodes: usize,
    /// Trees per maximum distance in Figure 9.
    pub fig9_trees: usize,
    /// Join/leave operations per tree in Figure 9.
    pub fig9_ops: usize,
    /// Maximum distances (hops) of Figure 9.
    pub fig9_max_hops: Vec<u32>,
}

impl Sizes {
    /// The paper's sizes.
    pub fn paper() -> Sizes {
        Sizes {
            fig78_nodes: 1024,
            fig78_topologies: 1000,
            fig78_max_hops: 10,
            factors: vec![2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0],
            fig9_nodes: 1024,
            fig9_trees: 100,
            fig9_ops: 1000,
            fig9_max_hops: vec![10, 30, 50],
        }
    }

    /// Smoke-test sizes: a few seconds in a release build.
    pub fn quick() -> Sizes {
        Sizes {
            fig78_nodes: 128,
            fig78_topologies: 20,
            fig78_max_hops: 10,
            factors: vec![2.0, 10.0, 40.0],
            fig9_nodes: 128,
            fig9_trees: 10,
            fig9_ops: 100,
            fig9_max_hops: vec![10, 30, 50],
        }
    }
}

/// Experiment tags mixed into the seeds, so the experiments draw independent numbers.
const TAG_FIG78: u64 = 78;
const TAG_FIG9: u64 = 9;

/// SplitMix64 finaliser: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seed of item `index` of the experiment `tag` (a topology, a tree) under the user's seed.
fn item_seed(seed: u64, tag: u64, index: u64) -> u64 {
    mix(seed ^ mix(mix(tag) ^ index))
}

/// Everything that defines a run: sizes, seed and the choices the paper leaves open.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Setup {
    pub sizes: Sizes,
    /// Smaller sizes than the paper's.
    pub quick: bool,
    pub seed: u64,
    /// Which tree link Figures 7-8 raise.
    pub link: LinkChoice,
    /// Smallest distance between two nodes (0 in the paper's Table 1; 1 = "0 hops" never drawn).
    pub min_hops: u32,
    /// Also run Figures 7-9 with this smallest distance and judge the claims on both draws.
    pub compare_min_hops: Option<u32>,
}

impl Setup {
    /// Checks the choices against the sizes.
    fn validate(&self) -> Result<()> {
        let maxes = std::iter::once(self.sizes.fig78_max_hops)
            .chain(self.sizes.fig9_max_hops.iter().copied());
        let min = self.min_hops.max(self.compare_min_hops.unwrap_or(0));
        if let Some(max) = maxes.filter(|&m| m < min).min() {
            bail!(
                "--min-hops {} is larger than the maximum distance {max} of an experiment",
                self.min_hops
            );
        }
        if self.sizes.fig78_nodes < 2 || self.sizes.fig9_nodes < 2 {
            bail!("the experiments need at least 2 nodes");
        }
        Ok(())
    }
}

/// A random topology: distances uniform in `min..=max` hops. With `min = 0` this is exactly
/// [`random::uniform_hops`].
fn topology(rng: &mut ChaCha8Rng, n: usize, min: u32, max: u32) -> DenseCostMatrix<f32> {
    if min == 0 {
        random::uniform_hops(rng, n, max)
    } else {
        DenseCostMatrix::from_fn(CostUnit::Hops, n, |_, _| rng.gen_range(min..=max) as f64)
    }
}

/// A joining node's distances to `n` ids, uniform in `min..=max` hops. With `min = 0` this is
/// exactly [`random::uniform_hops_row`].
fn join_row(rng: &mut ChaCha8Rng, n: usize, min: u32, max: u32) -> Vec<f64> {
    if min == 0 {
        random::uniform_hops_row(rng, n, max)
    } else {
        (0..n).map(|_| rng.gen_range(min..=max) as f64).collect()
    }
}

/// Writes a number the way the paper does: integers without decimals.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

// ---------------------------------------------------------------------------------------------
// Tables 2, 3, 4, 6, 7, 8
// ---------------------------------------------------------------------------------------------

/// One swap a strategy evaluated, as the paper describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Trial {
    /// Position of the node it was exchanged with.
    pub position: Position,
    /// That node.
    pub node: u32,
    /// Tree cost with the swap in place (None where the paper gives no number).
    pub cost: Option<f64>,
}

/// A tree state in the terms of the paper's tables.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct TableState {
    /// Leaves in ascending position order.
    pub leaves: Vec<u32>,
    /// Root-to-leaf path cost of each leaf.
    pub costs: Vec<f64>,
    /// The tree cost (costliest path).
    pub tree_cost: f64,
    /// Swaps evaluated, for states produced by a strategy.
    pub trials: Option<Vec<Trial>>,
    /// The swap made as (moved node, other node), for states produced by a strategy.
    pub made: Option<Option<(u32, u32)>>,
}

/// One worked example: what we compute beside what the paper prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct TableCheck {
    /// "Table 2", …
    pub name: &'static str,
    /// What the table shows.
    pub what: &'static str,
    pub ours: TableState,
    pub paper: TableState,
    /// True when every number the paper gives matches.
    pub ok: bool,
}

fn paper_state(
    leaves: &[u32],
    costs: &[f64],
    tree_cost: f64,
    trials: Option<&[(Position, u32, Option<f64>)]>,
    made: Option<Option<(u32, u32)>>,
) -> TableState {
    TableState {
        leaves: leaves.to_vec(),
        costs: costs.to_vec(),
        tree_cost,
        trials: trials.map(|t| {
            t.iter()
                .map(|&(position, node, cost)| Trial {
                    position,
                    node,
                    cost,
                })
                .collect()
        }),
        made,
    }
}

fn our_state(tree: &AdaptiveTree, report: Option<&AdaptReport>) -> TableState {
    let leaf_costs = tree.leaf_costs();
    TableState {
        leaves: leaf_costs.iter().map(|&(_, n, _)| n.0).collect(),
        costs: leaf_costs.iter().map(|&(_, _, c)| c).collect(),
        tree_cost: tree.cost(),
        trials: report.map(|r| {
            r.tried
                .iter()
                .map(|t| Trial {
                    position: t.positions.1,
                    node: t.with.0,
                    cost: Some(t.cost),
                })
                .collect()
        }),
        made: report.map(|r| r.made.as_ref().map(|m| (m.moved.0, m.with.0))),
    }
}

fn states_match(ours: &TableState, paper: &TableState) -> bool {
    let trials_match = match (&ours.trials, &paper.trials) {
        (None, None) => true,
        (Some(o), Some(p)) => {
            o.len() == p.len()
                && o.iter().zip(p).all(|(a, b)| {
                    a.position == b.position && a.node == b.node && b.cost.is_none()
                        || a.cost == b.cost
                })
        }
        _ => false,
    };
    ours.leaves == paper.leaves
        && ours.costs == paper.costs
        && ours.tree_cost == paper.tree_cost
        && ours.made == paper.made
        && trials_match
}

fn check(
    name: &'static str,
    what: &'static str,
    ours: TableState,
    paper: TableState,
) -> TableCheck {
    let ok = states_match(&ours, &paper);
    TableCheck {
        name,
        what,
        ours,
        paper,
        ok,
    }
}

fn position(tree: &AdaptiveTree, node: u32) -> Result<Position> {
    tree.position_of(NodeId(node))
        .ok_or_else(|| anyhow!("node {node} is not in the Balanced-Path tree of Table 1"))
}

/// Recomputes every worked example of the paper from Table 1 and Table 5.
pub(crate) fn paper_tables() -> Result<Vec<TableCheck>> {
    let t1 = fixtures::table1();
    let mut t5 = fixtures::table1();
    t5.push_node(&fixtures::table5_join_row())
        .context("adding node 8 of Table 5")?;
    let base = AdaptiveTree::balanced_path(&t1, NodeId(0)).context("Balanced-Path on Table 1")?;
    let mut out = Vec::new();

    out.push(check(
        "Table 2",
        "Balanced-Path tree of Table 1, root 0",
        our_state(&base, None),
        paper_state(&[5, 4, 2, 1], &[3.0, 3.0, 2.0, 2.0], 3.0, None, None),
    ));

    let mut t = base.clone();
    let (x, y) = (position(&t, 5)?, position(&t, 6)?);
    t.swap(&t1, x, y).context("swapping nodes 5 and 6")?;
    out.push(check(
        "Table 3",
        "after swapping nodes 5 and 6",
        our_state(&t, None),
        paper_state(&[6, 4, 2, 1], &[0.0, 3.0, 2.0, 8.0], 8.0, None, None),
    ));

    let mut t = base.clone();
    t.join(&t5, NodeId(8), None).context("node 8 joins")?;
    out.push(check(
        "Table 4",
        "node 8 joins (Table 5 distances), no swap",
        our_state(&t, None),
        paper_state(
            &[5, 4, 2, 1, 8],
            &[3.0, 3.0, 2.0, 2.0, 4.0],
            4.0,
            None,
            None,
        ),
    ));

    let mut t = base.clone();
    let r = t
        .join(&t5, NodeId(8), Some(Strategy::Position))
        .context("node 8 joins with Position_Swapping")?;
    out.push(check(
        "Table 6",
        "node 8 joins, then Position_Swapping",
        our_state(&t, Some(&r)),
        paper_state(
            &[5, 4, 2, 1, 6],
            &[3.0, 3.0, 2.0, 2.0, 0.0],
            3.0,
            // "A swap with the node in position 7, node 1 is first attempted" (no gain stated as
            // a number), then position 6 (node 6) reaches 3.
            Some(&[(7, 1, None), (6, 6, Some(3.0))]),
            Some(Some((8, 6))),
        ),
    ));

    let mut t = base.clone();
    t.leave(&t1, NodeId(7), None).context("node 7 fails")?;
    out.push(check(
        "Table 7",
        "node 7 fails, replaced by node 1 (last position), no swap",
        our_state(&t, None),
        paper_state(&[5, 4, 2, 6], &[3.0, 7.0, 2.0, 0.0], 7.0, None, None),
    ));

    let mut t = base.clone();
    let r = t
        .leave(&t1, NodeId(7), Some(Strategy::Path))
        .context("node 7 fails, Path_Swapping")?;
    out.push(check(
        "Fig. 6 left",
        "node 7 fails, then Path_Swapping: only 1<->4 (cost 8), not made",
        our_state(&t, Some(&r)),
        paper_state(
            &[5, 4, 2, 6],
            &[3.0, 7.0, 2.0, 0.0],
            7.0,
            Some(&[(3, 4, Some(8.0))]),
            Some(None),
        ),
    ));

    let mut t = base.clone();
    let r = t
        .leave(&t1, NodeId(7), Some(Strategy::Position))
        .context("node 7 fails, Position_Swapping")?;
    out.push(check(
        "Table 8",
        "node 7 fails, then Position_Swapping",
        our_state(&t, Some(&r)),
        paper_state(
            &[1, 4, 2, 6],
            &[2.0, 3.0, 2.0, 0.0],
            3.0,
            Some(&[(3, 4, Some(8.0)), (1, 5, Some(3.0))]),
            Some(Some((1, 5))),
        ),
    ));
    Ok(out)
}

fn list(v: &[impl ToString]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn costs_list(v: &[f64]) -> String {
    v.iter().map(|&c| num(c)).collect::<Vec<_>>().join(" ")
}

fn trials_text(trials: &Option<Vec<Trial>>) -> String {
    match trials {
        None => "-".into(),
        Some(t) if t.is_empty() => "none".into(),
        Some(t) => t
            .iter()
            .map(|t| {
                let cost = t.cost.map_or_else(|| "no gain".into(), num);
                format!("pos {} (node {}) -> {cost}", t.position, t.node)
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn made_text(made: &Option<Option<(u32, u32)>>) -> String {
    match made {
        None => "-".into(),
        Some(None) => "no swap".into(),
        Some(Some((a, b))) => format!("{a}<->{b}"),
    }
}

fn tables_text(tables: &[TableCheck]) -> String {
    let mut s = String::new();
    for t in tables {
        let _ = writeln!(s, "{:<12} {:<62} {}", t.name, t.what, mark(t.ok));
        let _ = writeln!(s, "    {:<10} {:<28} paper", "", "ours");
        let rows = [
            ("leaf", list(&t.ours.leaves), list(&t.paper.leaves)),
            (
                "cost",
                costs_list(&t.ours.costs),
                costs_list(&t.paper.costs),
            ),
            ("tree cost", num(t.ours.tree_cost), num(t.paper.tree_cost)),
        ];
        for (label, o, p) in rows {
            let _ = writeln!(s, "    {label:<10} {o:<28} {p}");
        }
        if t.paper.trials.is_some() {
            let _ = writeln!(
                s,
                "    {:<10} ours:  {}",
                "tried",
                trials_text(&t.ours.trials)
            );
            let _ = writeln!(s, "    {:<10} paper: {}", "", trials_text(&t.paper.trials));
            let _ = writeln!(
                s,
                "    {:<10} {:<28} {}",
                "swap made",
                made_text(&t.ours.made),
                made_text(&t.paper.made)
            );
        }
    }
    s
}

fn tables_csv(tables: &[TableCheck]) -> String {
    let mut s = String::from("table,index,our_leaf,our_cost,paper_leaf,paper_cost,table_matches\n");
    for t in tables {
        let n = t.ours.leaves.len().max(t.paper.leaves.len());
        for i in 0..n {
            let cell = |v: Option<String>| v.unwrap_or_default();
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{}",
                t.name,
                i,
                cell(t.ours.leaves.get(i).map(|x| x.to_string())),
                cell(t.ours.costs.get(i).map(|&c| num(c))),
                cell(t.paper.leaves.get(i).map(|x| x.to_string())),
                cell(t.paper.costs.get(i).map(|&c| num(c))),
                t.ok
            );
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Progress
// ---------------------------------------------------------------------------------------------

fn progress(len: usize, what: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:<18} [{bar:40.cyan/blue}] {pos}/{len} ({elapsed_precise}, eta {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// Figures 7 and 8
// ---------------------------------------------------------------------------------------------

/// What one strategy did on one topology at one cost factor.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
struct Outcome {
    gain: f64,
    steps: usize,
    reached: bool,
    raised: bool,
    cost_after_change: f64,
    final_cost: f64,
}

/// Everything one Figure 7-8 topology contributes.
#[derive(Clone, Debug, PartialEq)]
struct TopologyResult {
    tree_cost: f64,
    zero_links: usize,
    /// The raised link's base cost, None when the tree had no eligible link.
    link_cost: Option<f64>,
    /// The raised link ends in a leaf (its child end has no children).
    link_to_leaf: bool,
    /// Ancestors of the raised link's parent end, root excluded (what Path can move it to).
    link_up: usize,
    /// `outcomes[factor * 4 + strategy]`, strategies in [`Strategy::ALL`] order.
    outcomes: Vec<Outcome>,
}

fn run_topology(setup: &Setup, i: usize) -> Result<TopologyResult> {
    let sizes = &setup.sizes;
    let n = sizes.fig78_nodes;
    let mut rng = ChaCha8Rng::seed_from_u64(item_seed(setup.seed, TAG_FIG78, i as u64));
    let m = topology(&mut rng, n, setup.min_hops, sizes.fig78_max_hops);
    let tree = AdaptiveTree::balanced_path(&m, NodeId(0))
        .with_context(|| format!("Balanced-Path on topology {i}"))?;
    let edge = |p: Position| m.cost(tree.node_at(binomial::parent(p)), tree.node_at(p));
    let nonzero: Vec<Position> = (1..n).filter(|&p| edge(p) > 0.0).collect();
    let zero_links = (n - 1) - nonzero.len();
    let picked = match setup.link {
        LinkChoice::Nonzero => nonzero.choose(&mut rng).copied(),
        LinkChoice::Any => (n > 1).then(|| rng.gen_range(1..n)),
    };
    let mut result = TopologyResult {
        tree_cost: tree.cost(),
        zero_links,
        link_cost: None,
        link_to_leaf: false,
        link_up: 0,
        outcomes: Vec::with_capacity(sizes.factors.len() * Strategy::ALL.len()),
    };
    let Some(p) = picked else {
        return Ok(result);
    };
    let (a, b) = (tree.node_at(binomial::parent(p)), tree.node_at(p));
    let old = m.cost(a, b);
    result.link_cost = Some(old);
    result.link_to_leaf = binomial::is_leaf(p, n);
    result.link_up = binomial::ancestors(binomial::parent(p))
        .filter(|&q| q != 0)
        .count();
    for &factor in &sizes.factors {
        let mut costs = Overlay::new(&m);
        costs.set_cost(a, b, old * factor)?;
        for strategy in Strategy::ALL {
            let mut t = tree.clone();
            let r = t
                .on_link_cost_change(&costs, a, b, strategy)
                .with_context(|| format!("topology {i}, factor {factor}, {}", strategy.name()))?;
            result.outcomes.push(Outcome {
                gain: r.gain(),
                steps: r.steps(),
                reached: r.reached_target(),
                raised: r.cost_after_change > r.cost_before,
                cost_after_change: r.cost_after_change,
                final_cost: r.final_cost,
            });
        }
    }
    Ok(result)
}

/// One point of Figures 7 and 8: a strategy at a cost factor, averaged over the topologies.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Fig78Row {
    pub factor: f64,
    pub strategy: &'static str,
    /// Average of (increased − final) / increased.
    pub avg_gain: f64,
    /// Average number of swaps evaluated.
    pub avg_steps: f64,
    /// The paper's benefit: avg_gain / avg_steps (0 when no steps).
    pub benefit: f64,
    /// Fraction of topologies whose final cost is at most the cost before the rise.
    pub reached_fraction: f64,
    /// Fraction of topologies where the rise raised the tree cost (the strategy ran).
    pub raised_fraction: f64,
    /// Average steps over the topologies where the strategy ran.
    pub avg_steps_when_raised: f64,
    /// Fraction of topologies where the rise raised the tree cost but the strategy had no
    /// candidate swap at all.
    pub idle_fraction: f64,
    /// Average tree cost right after the rise.
    pub avg_cost_after_change: f64,
    /// Average tree cost after the strategy.
    pub avg_final_cost: f64,
}

/// Figures 7 and 8.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Fig78 {
    pub nodes: usize,
    pub topologies: usize,
    pub max_hops: u32,
    /// Smallest distance drawn (0 = the paper's reading).
    pub min_hops: u32,
    pub link_choice: &'static str,
    /// Topologies with an eligible link (the averages are over these).
    pub used_topologies: usize,
    /// Average Balanced-Path tree cost.
    pub avg_tree_cost: f64,
    /// Average number of zero-cost tree links per tree (out of nodes − 1).
    pub avg_zero_links: f64,
    /// Average base cost of the raised link.
    pub avg_link_cost: f64,
    /// Share of raised links whose child end is a leaf.
    pub leaf_link_fraction: f64,
    /// Average number of non-root ancestors of the raised link's parent end.
    pub avg_link_up: f64,
    pub rows: Vec<Fig78Row>,
}

impl Fig78 {
    /// The row of `strategy` at factor index `fi`.
    fn row(&self, fi: usize, strategy: Strategy) -> &Fig78Row {
        let si = Strategy::ALL
            .iter()
            .position(|&s| s == strategy)
            .unwrap_or(0);
        &self.rows[fi * Strategy::ALL.len() + si]
    }

    fn factors(&self) -> Vec<f64> {
        let mut f: Vec<f64> = self.rows.iter().map(|r| r.factor).collect();
        f.dedup();
        f
    }
}

/// Runs Figures 7 and 8 (parallel over topologies; the result does not depend on the threads).
pub(crate) fn fig78(setup: &Setup, show: bool) -> Result<Fig78> {
    let sizes = &setup.sizes;
    let pb = progress(sizes.fig78_topologies, "figures 7-8", show);
    let results: Vec<TopologyResult> = (0..sizes.fig78_topologies)
        .into_par_iter()
        .map(|i| {
            let r = run_topology(setup, i);
            pb.inc(1);
            r
        })
        .collect::<Result<_>>()?;
    pb.finish_and_clear();

    let used: Vec<&TopologyResult> = results.iter().filter(|r| r.link_cost.is_some()).collect();
    let count = used.len().max(1) as f64;
    let all = results.len().max(1) as f64;
    let mut rows = Vec::new();
    for (fi, &factor) in sizes.factors.iter().enumerate() {
        for (si, strategy) in Strategy::ALL.iter().enumerate() {
            let k = fi * Strategy::ALL.len() + si;
            let (mut gain, mut steps, mut reached, mut raised) = (0.0, 0usize, 0usize, 0usize);
            let (mut raised_steps, mut idle, mut after, mut fin) = (0usize, 0usize, 0.0, 0.0);
            for r in &used {
                let o = r.outcomes[k];
                gain += o.gain;
                steps += o.steps;
                reached += o.reached as usize;
                raised += o.raised as usize;
                if o.raised {
                    raised_steps += o.steps;
                    idle += (o.steps == 0) as usize;
                }
                after += o.cost_after_change;
                fin += o.final_cost;
            }
            let avg_gain = gain / count;
            let avg_steps = steps as f64 / count;
            rows.push(Fig78Row {
                factor,
                strategy: strategy.name(),
                avg_gain,
                avg_steps,
                benefit: if avg_steps > 0.0 {
                    avg_gain / avg_steps
                } else {
                    0.0
                },
                reached_fraction: reached as f64 / count,
                raised_fraction: raised as f64 / count,
                avg_steps_when_raised: if raised > 0 {
                    raised_steps as f64 / raised as f64
                } else {
                    0.0
                },
                idle_fraction: idle as f64 / count,
                avg_cost_after_change: after / count,
                avg_final_cost: fin / count,
            });
        }
    }
    Ok(Fig78 {
        nodes: sizes.fig78_nodes,
        topologies: sizes.fig78_topologies,
        max_hops: sizes.fig78_max_hops,
        link_choice: setup.link.name(),
        min_hops: setup.min_hops,
        used_topologies: used.len(),
        avg_tree_cost: results.iter().map(|r| r.tree_cost).sum::<f64>() / all,
        avg_zero_links: results.iter().map(|r| r.zero_links as f64).sum::<f64>() / all,
        avg_link_cost: used.iter().filter_map(|r| r.link_cost).sum::<f64>() / count,
        leaf_link_fraction: used.iter().filter(|r| r.link_to_leaf).count() as f64 / count,
        avg_link_up: used.iter().map(|r| r.link_up as f64).sum::<f64>() / count,
        rows,
    })
}

/// How the raised link was chosen, in one sentence.
fn link_sentence(choice: &str) -> &'static str {
    if choice == LinkChoice::Any.name() {
        "The link is drawn uniformly among all tree links (`--link any`): a zero-cost link stays \
         0 and scores gain 0, steps 0."
    } else {
        "The link is drawn uniformly among the tree links with a non-zero cost (`--link nonzero`, \
         the default): a 0-hop link multiplied by any factor stays 0 and could never change \
         anything."
    }
}

fn fig78_csv(f: &Fig78) -> String {
    let mut s = String::from("factor,strategy,avg_gain,avg_steps,benefit,reached_fraction\n");
    for r in &f.rows {
        let _ = writeln!(
            s,
            "{},{},{:.6},{:.6},{:.6},{:.6}",
            num(r.factor),
            r.strategy,
            r.avg_gain,
            r.avg_steps,
            r.benefit,
            r.reached_fraction
        );
    }
    s
}

fn fig78_text(f: &Fig78) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} topologies of {} nodes, distances uniform in {}..={} hops, Balanced-Path tree rooted at 0",
        f.topologies, f.nodes, f.min_hops, f.max_hops
    );
    let _ = writeln!(
        s,
        "same topologies, tree and raised link at every factor (common random numbers); link: {} \
         ({} of {} topologies had one)",
        f.link_choice, f.used_topologies, f.topologies
    );
    let _ = writeln!(
        s,
        "avg tree cost {:.2} hops; avg zero-cost tree links {:.1} of {}; raised link: avg cost {:.2} \
         hops, ends in a leaf {}, {:.2} non-root ancestors above it",
        f.avg_tree_cost,
        f.avg_zero_links,
        f.nodes - 1,
        f.avg_link_cost,
        pct(f.leaf_link_fraction),
        f.avg_link_up
    );
    let _ = writeln!(
        s,
        "{:>6}  {:<9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>11}",
        "factor", "strategy", "gain", "steps", "benefit", "reached", "raised", "final cost"
    );
    for r in &f.rows {
        let _ = writeln!(
            s,
            "{:>6}  {:<9} {:>8} {:>9.2} {:>9.4} {:>8} {:>8} {:>11.2}",
            num(r.factor),
            r.strategy,
            pct(r.avg_gain),
            r.avg_steps,
            r.benefit,
            pct(r.reached_fraction),
            pct(r.raised_fraction),
            r.avg_final_cost
        );
    }
    s
}

fn fig78_plots(f: &Fig78, dir: &Path) -> Result<()> {
    let lines = |value: fn(&Fig78Row) -> f64| -> Vec<Line> {
        Strategy::ALL
            .iter()
            .map(|s| Line {
                name: s.name().to_string(),
                points: f
                    .rows
                    .iter()
                    .filter(|r| r.strategy == s.name())
                    .map(|r| (r.factor, value(r)))
                    .collect(),
            })
            .collect()
    };
    let sub = format!("{} nodes, max distance {} hops", f.nodes, f.max_hops);
    plot::line_chart(
        &dir.join("fig7_gain.png"),
        &Labels {
            title: &format!("Fig. 7: average gain ({sub})"),
            x: "cost factor",
            y: "average gain (%)",
        },
        &lines(|r| r.avg_gain * 100.0),
    )?;
    plot::line_chart(
        &dir.join("fig7_steps.png"),
        &Labels {
            title: &format!("Fig. 7: average steps ({sub})"),
            x: "cost factor",
            y: "average steps (swaps evaluated)",
        },
        &lines(|r| r.avg_steps),
    )?;
    plot::line_chart(
        &dir.join("fig8_benefit.png"),
        &Labels {
            title: &format!("Fig. 8: benefit = avg gain / avg steps ({sub})"),
            x: "cost factor",
            y: "benefit",
        },
        &lines(|r| r.benefit),
    )
}

// ---------------------------------------------------------------------------------------------
// Figure 9
// ---------------------------------------------------------------------------------------------

/// How a Figure 9 tree repairs itself after a join and after a leave.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Variant {
    /// No swapping.
    None,
    /// Position_Swapping after a join, Path_Swapping after a leave.
    PositionPath,
    /// Position_Swapping after both.
    PositionPosition,
}

impl Variant {
    const ALL: [Variant; 3] = [
        Variant::None,
        Variant::PositionPath,
        Variant::PositionPosition,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::PositionPath => "position/path",
            Variant::PositionPosition => "position/position",
        }
    }

    fn on_join(self) -> Option<Strategy> {
        match self {
            Variant::None => None,
            _ => Some(Strategy::Position),
        }
    }

    fn on_leave(self) -> Option<Strategy> {
        match self {
            Variant::None => None,
            Variant::PositionPath => Some(Strategy::Path),
            Variant::PositionPosition => Some(Strategy::Position),
        }
    }
}

/// One Figure 9 tree after its operations, per variant.
#[derive(Clone, Debug, PartialEq)]
struct ChurnResult {
    initial_cost: f64,
    final_cost: [f64; 3],
    steps: [usize; 3],
    /// Operations that raised the tree cost (the only ones where a strategy runs), per variant
    /// and kind (0 = join, 1 = leave).
    raised: [[usize; 2]; 3],
    /// Of those, the ones brought back to at most the cost before the operation.
    repaired: [[usize; 2]; 3],
    joins: usize,
    final_len: usize,
}

fn run_churn(setup: &Setup, hi: usize, t: usize) -> Result<ChurnResult> {
    let sizes = &setup.sizes;
    let max_hops = sizes.fig9_max_hops[hi];
    let n = sizes.fig9_nodes;
    let tag = TAG_FIG9 ^ ((hi as u64 + 1) << 32);
    let mut rng = ChaCha8Rng::seed_from_u64(item_seed(setup.seed, tag, t as u64));
    let mut m = topology(&mut rng, n, setup.min_hops, max_hops);
    let base = AdaptiveTree::balanced_path(&m, NodeId(0))
        .with_context(|| format!("Balanced-Path on Figure 9 tree {t} (max {max_hops} hops)"))?;
    let initial_cost = base.cost();
    let mut trees = [base.clone(), base.clone(), base];
    let mut steps = [0usize; 3];
    let mut raised = [[0usize; 2]; 3];
    let mut repaired = [[0usize; 2]; 3];
    let mut record = |k: usize, kind: usize, r: &AdaptReport| {
        steps[k] += r.steps();
        if r.cost_after_change > r.cost_before {
            raised[k][kind] += 1;
            repaired[k][kind] += r.reached_target() as usize;
        }
    };
    let mut live: Vec<NodeId> = (1..n).map(NodeId::from).collect();
    let mut joins = 0;
    for op in 0..sizes.fig9_ops {
        let join = rng.gen_bool(0.5) || live.is_empty();
        if join {
            joins += 1;
            let row = join_row(&mut rng, m.node_count(), setup.min_hops, max_hops);
            let node = m.push_node(&row)?;
            live.push(node);
            for (k, v) in Variant::ALL.iter().enumerate() {
                let r = trees[k]
                    .join(&m, node, v.on_join())
                    .with_context(|| format!("tree {t}, operation {op}: node {node} joins"))?;
                record(k, 0, &r);
            }
        } else {
            let node = live.swap_remove(rng.gen_range(0..live.len()));
            for (k, v) in Variant::ALL.iter().enumerate() {
                let r = trees[k]
                    .leave(&m, node, v.on_leave())
                    .with_context(|| format!("tree {t}, operation {op}: node {node} leaves"))?;
                record(k, 1, &r);
            }
        }
    }
    Ok(ChurnResult {
        initial_cost,
        final_cost: [trees[0].cost(), trees[1].cost(), trees[2].cost()],
        steps,
        raised,
        repaired,
        joins,
        final_len: trees[0].len(),
    })
}

/// One bar of Figure 9.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Fig9Row {
    pub max_hops: u32,
    pub variant: &'static str,
    /// Average Balanced-Path cost before the operations.
    pub avg_initial_cost: f64,
    /// Average tree cost after the operations.
    pub avg_final_cost: f64,
    /// avg_final_cost / that of "none" at the same maximum distance.
    pub ratio_to_none: f64,
    /// Swaps evaluated per operation.
    pub avg_steps_per_op: f64,
    /// Share of operations that raised the tree cost (a strategy runs only on those).
    pub raised_fraction: f64,
    /// Share of those brought back to at most the cost before the operation.
    pub repaired_fraction: f64,
    /// The same share among the leaves only (where Path and Position differ).
    pub leave_repaired_fraction: f64,
}

/// Figure 9.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Fig9 {
    pub nodes: usize,
    /// Smallest distance drawn.
    pub min_hops: u32,
    pub trees: usize,
    pub ops: usize,
    /// Average share of joins among the operations.
    pub join_fraction: f64,
    /// Average tree size at the end.
    pub avg_final_nodes: f64,
    pub rows: Vec<Fig9Row>,
}

impl Fig9 {
    fn row(&self, max_hops: u32, v: Variant) -> Option<&Fig9Row> {
        self.rows
            .iter()
            .find(|r| r.max_hops == max_hops && r.variant == v.name())
    }

    fn max_hops(&self) -> Vec<u32> {
        let mut h: Vec<u32> = self.rows.iter().map(|r| r.max_hops).collect();
        h.dedup();
        h
    }
}

/// Runs Figure 9 (parallel over trees; the result does not depend on the threads).
pub(crate) fn fig9(setup: &Setup, show: bool) -> Result<Fig9> {
    let sizes = &setup.sizes;
    let items: Vec<(usize, usize)> = (0..sizes.fig9_max_hops.len())
        .flat_map(|h| (0..sizes.fig9_trees).map(move |t| (h, t)))
        .collect();
    let pb = progress(items.len(), "figure 9", show);
    let results: Vec<ChurnResult> = items
        .par_iter()
        .map(|&(h, t)| {
            let r = run_churn(setup, h, t);
            pb.inc(1);
            r
        })
        .collect::<Result<_>>()?;
    pb.finish_and_clear();

    let trees = sizes.fig9_trees.max(1) as f64;
    let mut rows = Vec::new();
    for (h, &max_hops) in sizes.fig9_max_hops.iter().enumerate() {
        let group: Vec<&ChurnResult> = items
            .iter()
            .zip(&results)
            .filter(|((hh, _), _)| *hh == h)
            .map(|(_, r)| r)
            .collect();
        let initial = group.iter().map(|r| r.initial_cost).sum::<f64>() / trees;
        let finals: Vec<f64> = (0..3)
            .map(|k| group.iter().map(|r| r.final_cost[k]).sum::<f64>() / trees)
            .collect();
        for (k, v) in Variant::ALL.iter().enumerate() {
            let steps: usize = group.iter().map(|r| r.steps[k]).sum();
            let sum = |x: fn(&ChurnResult) -> &[[usize; 2]; 3], kinds: &[usize]| -> usize {
                group
                    .iter()
                    .map(|r| kinds.iter().map(|&j| x(r)[k][j]).sum::<usize>())
                    .sum()
            };
            let raised = sum(|r| &r.raised, &[0, 1]);
            let repaired = sum(|r| &r.repaired, &[0, 1]);
            let leave_raised = sum(|r| &r.raised, &[1]);
            let leave_repaired = sum(|r| &r.repaired, &[1]);
            let ops = trees * sizes.fig9_ops.max(1) as f64;
            rows.push(Fig9Row {
                max_hops,
                variant: v.name(),
                avg_initial_cost: initial,
                avg_final_cost: finals[k],
                ratio_to_none: if finals[0] > 0.0 {
                    finals[k] / finals[0]
                } else {
                    1.0
                },
                avg_steps_per_op: steps as f64 / ops,
                raised_fraction: raised as f64 / ops,
                repaired_fraction: if raised > 0 {
                    repaired as f64 / raised as f64
                } else {
                    1.0
                },
                leave_repaired_fraction: if leave_raised > 0 {
                    leave_repaired as f64 / leave_raised as f64
                } else {
                    1.0
                },
            });
        }
    }
    let all = results.len().max(1) as f64;
    Ok(Fig9 {
        nodes: sizes.fig9_nodes,
        min_hops: setup.min_hops,
        trees: sizes.fig9_trees,
        ops: sizes.fig9_ops,
        join_fraction: results.iter().map(|r| r.joins as f64).sum::<f64>()
            / (all * sizes.fig9_ops.max(1) as f64),
        avg_final_nodes: results.iter().map(|r| r.final_len as f64).sum::<f64>() / all,
        rows,
    })
}

fn fig9_csv(f: &Fig9) -> String {
    let mut s = String::from(
        "max_hops,variant,avg_initial_cost,avg_final_cost,ratio_to_none,avg_steps_per_op\n",
    );
    for r in &f.rows {
        let _ = writeln!(
            s,
            "{},{},{:.6},{:.6},{:.6},{:.6}",
            r.max_hops,
            r.variant,
            r.avg_initial_cost,
            r.avg_final_cost,
            r.ratio_to_none,
            r.avg_steps_per_op
        );
    }
    s
}

fn fig9_text(f: &Fig9) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} trees of {} nodes per max distance (distances from {} hops), {} operations each (joins \
         {:.1} %, final size {:.0} nodes on average), identical operation sequence for every variant",
        f.trees,
        f.nodes,
        f.min_hops,
        f.ops,
        f.join_fraction * 100.0,
        f.avg_final_nodes
    );
    let _ = writeln!(
        s,
        "{:>8}  {:<18} {:>12} {:>11} {:>9} {:>11} {:>9} {:>9} {:>9}",
        "max hops",
        "variant",
        "initial cost",
        "final cost",
        "vs none",
        "steps / op",
        "raised",
        "repaired",
        "(leaves)"
    );
    for r in &f.rows {
        let _ = writeln!(
            s,
            "{:>8}  {:<18} {:>12.2} {:>11.2} {:>9} {:>11.2} {:>9} {:>9} {:>9}",
            r.max_hops,
            r.variant,
            r.avg_initial_cost,
            r.avg_final_cost,
            pct(r.ratio_to_none),
            r.avg_steps_per_op,
            pct(r.raised_fraction),
            pct(r.repaired_fraction),
            pct(r.leave_repaired_fraction)
        );
    }
    s
}

fn fig9_plot(f: &Fig9, dir: &Path) -> Result<()> {
    let hops = f.max_hops();
    let groups: Vec<String> = hops.iter().map(|h| format!("max {h} hops")).collect();
    let bars: Vec<Bars> = Variant::ALL
        .iter()
        .map(|&v| Bars {
            name: v.name().to_string(),
            values: hops
                .iter()
                .map(|&h| f.row(h, v).map_or(0.0, |r| r.avg_final_cost))
                .collect(),
        })
        .collect();
    plot::grouped_bars(
        &dir.join("fig9.png"),
        &Labels {
            title: &format!(
                "Fig. 9: average tree cost after {} joins/leaves ({} trees of {} nodes)",
                f.ops, f.trees, f.nodes
            ),
            x: "maximum distance between nodes",
            y: "average tree cost (hops)",
        },
        &groups,
        &bars,
    )
}

// ---------------------------------------------------------------------------------------------
// Paper vs us
// ---------------------------------------------------------------------------------------------

/// How well our run supports one of the paper's claims.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    Agrees,
    Partly,
    Differs,
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Agrees => "agrees",
            Verdict::Partly => "partly",
            Verdict::Differs => "differs",
        }
    }

    fn from_count(hits: usize, of: usize) -> Verdict {
        if hits == of {
            Verdict::Agrees
        } else if hits == 0 {
            Verdict::Differs
        } else {
            Verdict::Partly
        }
    }
}

/// One claim of the paper, what we got, and why we might differ.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Claim {
    pub paper: String,
    pub ours: String,
    pub verdict: Verdict,
    pub why: String,
}

fn strategy_values(
    f: &Fig78,
    fi: usize,
    value: fn(&Fig78Row) -> f64,
    fmt: fn(f64) -> String,
) -> String {
    Strategy::ALL
        .iter()
        .map(|&s| format!("{} {}", s.name(), fmt(value(f.row(fi, s)))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compares our Figures 7-9 with what the paper says about them, and explains the differences
/// with the run's own numbers.
pub(crate) fn claims(f: &Fig78, g: &Fig9) -> Vec<Claim> {
    use Strategy::{Family, Leaf, Path, Position};
    let factors = f.factors();
    let nf = factors.len();
    if nf == 0 {
        return Vec::new();
    }
    let last = nf - 1;
    let fl = num(factors[last]);
    let at = |fi: usize, s: Strategy| f.row(fi, s);
    let mut out = Vec::new();
    let eps = 1e-12;

    // 1. Family gives the smallest gain.
    let family_min = (0..nf)
        .filter(|&fi| {
            let fam = at(fi, Family).avg_gain;
            Strategy::ALL
                .iter()
                .all(|&s| at(fi, s).avg_gain + eps >= fam)
        })
        .count();
    let family_max = (0..nf)
        .map(|fi| at(fi, Family).avg_gain)
        .fold(0.0, f64::max);
    out.push(Claim {
        paper: "Family_Swapping gives the smallest gain (Fig. 7)".into(),
        ours: format!(
            "smallest at {family_min} of {nf} factors; at factor {fl}: {}",
            strategy_values(f, last, |r| r.avg_gain, pct)
        ),
        verdict: Verdict::from_count(family_min, nf),
        why: format!(
            "Family moves only the child end b of the raised link a-b. Swapping b with its parent \
             or a sibling leaves b attached to a, so the costly link stays in the tree; only a swap \
             with one of b's own children removes it. {} of our raised links end in a leaf, which \
             has no children{}",
            pct(f.leaf_link_fraction),
            if family_max == 0.0 {
                ": Family never removes the link and its gain is exactly 0 at every factor. If the \
                 paper's Family curve is above 0 (the figure is not in our copy of the text), its \
                 raised links must more often have had children."
            } else {
                "."
            }
        ),
    });

    // 2. Leaf and Position take the most steps.
    let most_steps = (0..nf)
        .filter(|&fi| {
            let mut by: Vec<(f64, Strategy)> = Strategy::ALL
                .iter()
                .map(|&s| (at(fi, s).avg_steps, s))
                .collect();
            by.sort_by(|a, b| b.0.total_cmp(&a.0));
            let top: Vec<Strategy> = by.iter().take(2).map(|x| x.1).collect();
            top.contains(&Leaf) && top.contains(&Position)
        })
        .count();
    out.push(Claim {
        paper: "Leaf_Swapping and Position_Swapping take the most steps (Fig. 7)".into(),
        ours: format!(
            "the two largest at {most_steps} of {nf} factors; at factor {fl}: {}",
            strategy_values(f, last, |r| r.avg_steps, |v| format!("{v:.2}"))
        ),
        verdict: Verdict::from_count(most_steps, nf),
        why: format!(
            "Both may try O(N) swaps (every leaf; every position outward from x) before giving up, \
             Family and Path only O(log N). At factor {fl} Position misses the old cost in {} of \
             the topologies and then tries all ~{} positions, hence {:.1} steps on average; Leaf \
             reaches it in {} of them after {:.1} steps on average.",
            pct(1.0 - at(last, Position).reached_fraction),
            f.nodes.saturating_sub(2),
            at(last, Position).avg_steps,
            pct(at(last, Leaf).reached_fraction),
            at(last, Leaf).avg_steps
        ),
    });

    // 3. Path has the best benefit at every factor.
    let mut not_best = Vec::new();
    for (fi, factor) in factors.iter().enumerate() {
        let p = at(fi, Path).benefit;
        let best = Strategy::ALL
            .iter()
            .copied()
            .max_by(|&a, &b| at(fi, a).benefit.total_cmp(&at(fi, b).benefit))
            .unwrap_or(Path);
        if at(fi, best).benefit > p + eps {
            not_best.push(format!(
                "factor {}: {} {:.4} vs path {:.4}",
                num(*factor),
                best.name(),
                at(fi, best).benefit,
                p
            ));
        }
    }
    let path_best = nf - not_best.len();
    let path_fewest = (0..nf)
        .filter(|&fi| {
            Strategy::ALL
                .iter()
                .all(|&s| at(fi, s).avg_steps + eps >= at(fi, Path).avg_steps)
        })
        .count();
    out.push(Claim {
        paper: "Path_Swapping has the best benefit (gain / steps) at every cost factor (Fig. 8)"
            .into(),
        ours: format!(
            "best at {path_best} of {nf} factors{}; at factor {fl}: {}",
            if not_best.is_empty() {
                String::new()
            } else {
                format!(" (not at {})", not_best.join("; "))
            },
            strategy_values(f, last, |r| r.benefit, |v| format!("{v:.4}"))
        ),
        verdict: Verdict::from_count(path_best, nf),
        why: format!(
            "Path takes the fewest steps at {path_fewest} of {nf} factors, but in our trees it has \
             little to try: {} of the \
             raised links end in a leaf (nothing below the child end) and their parent end has \
             {:.2} non-root ancestors on average, so at factor {fl} Path has no candidate at all \
             in {} of the topologies and gets back to the old cost in only {}. Its steps average \
             {:.2} (below 1), which props up gain / steps once the factor is large enough for a \
             partial repair to count; at small factors its gain is about 0 and Leaf, which repairs \
             almost everything in a few steps, has the better ratio. The benefit of the paper is a \
             ratio of averages, so it rewards doing nothing cheaply.",
            pct(f.leaf_link_fraction),
            f.avg_link_up,
            pct(at(last, Path).idle_fraction),
            pct(at(last, Path).reached_fraction),
            at(last, Path).avg_steps
        ),
    });

    // 4. Gain grows with the cost factor.
    let growing: Vec<&'static str> = Strategy::ALL
        .iter()
        .filter(|&&s| {
            (1..nf).all(|fi| at(fi, s).avg_gain + 1e-9 >= at(fi - 1, s).avg_gain)
                && at(last, s).avg_gain > at(0, s).avg_gain
        })
        .map(|s| s.name())
        .collect();
    out.push(Claim {
        paper: "The gain grows with the cost factor (Fig. 7)".into(),
        ours: format!(
            "grows for {} of 4 strategies ({}); factor {} -> {fl}: {}",
            growing.len(),
            if growing.is_empty() {
                "none".to_string()
            } else {
                growing.join(", ")
            },
            num(factors[0]),
            Strategy::ALL
                .iter()
                .map(|&s| format!(
                    "{} {} -> {}",
                    s.name(),
                    pct(at(0, s).avg_gain),
                    pct(at(last, s).avg_gain)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        verdict: Verdict::from_count(growing.len(), Strategy::ALL.len()),
        why: format!(
            "The increased cost grows linearly with the factor while a repaired tree's cost does \
             not, so the gain grows for every strategy that finds a swap at all{}. At factor {} the \
             rise raises the tree cost in only {} of the topologies (the link is not on a costliest \
             path), which keeps the small-factor gains low.",
            if growing.len() < Strategy::ALL.len() {
                " (a strategy that never finds one stays flat, see 1)"
            } else {
                ""
            },
            num(factors[0]),
            pct(at(0, Path).raised_fraction)
        ),
    });

    // 5. ~80 % at factor 40.
    let best = Strategy::ALL
        .iter()
        .copied()
        .max_by(|&a, &b| at(last, a).avg_gain.total_cmp(&at(last, b).avg_gain))
        .unwrap_or(Leaf);
    let best_gain = at(last, best).avg_gain;
    let at40 = (factors[last] - 40.0).abs() < 1e-9;
    let verdict = if !at40 {
        Verdict::Partly
    } else if (0.7..=0.9).contains(&best_gain) {
        Verdict::Agrees
    } else if (0.6..=0.95).contains(&best_gain) {
        Verdict::Partly
    } else {
        Verdict::Differs
    };
    out.push(Claim {
        paper: "The gain can be as high as 80 % at cost factor 40 (Fig. 7)".into(),
        ours: format!(
            "largest average gain at factor {fl}: {} ({})",
            pct(best_gain),
            best.name()
        ),
        verdict,
        why: format!(
            "At factor {fl} the tree cost rises from {:.2} to {:.2} hops on average and {} brings \
             it back to {:.2}: the gain is about 1 - (tree cost) / (tree cost + (factor - 1) x link \
             cost), so it is set by how costly the raised link is ({:.2} hops on average) next to \
             the tree, i.e. by the distance distribution and the choice of link, more than by the \
             strategy. {}",
            f.avg_tree_cost,
            at(last, best).avg_cost_after_change,
            best.name(),
            at(last, best).avg_final_cost,
            f.avg_link_cost,
            if f.min_hops == 0 {
                "With distances from 0 hops our Balanced-Path trees are very cheap (most links \
                 cost 0), which pushes the gain above the paper's; `--min-hops 1` (no 0-hop \
                 distances) gives costlier trees and smaller gains."
            } else {
                "Without 0-hop distances every tree link costs at least 1 hop and the trees are \
                 costlier, which lowers the gain."
            }
        ),
    });

    // 6. Fig. 9: about half of "none".
    let hops = g.max_hops();
    let row = |h: u32, v: Variant| g.row(h, v);
    let mut halves = Vec::new();
    let (mut near_half, mut below, mut total) = (0, 0, 0);
    for &h in &hops {
        for v in [Variant::PositionPath, Variant::PositionPosition] {
            if let Some(r) = row(h, v) {
                halves.push(format!(
                    "{} at {h} hops: {}",
                    v.name(),
                    pct(r.ratio_to_none)
                ));
                near_half += (0.35..=0.65).contains(&r.ratio_to_none) as usize;
                below += (r.ratio_to_none < 1.0) as usize;
                total += 1;
            }
        }
    }
    let avg_of = |v: Variant, x: fn(&Fig9Row) -> f64| -> f64 {
        let vals: Vec<f64> = hops.iter().filter_map(|&h| row(h, v)).map(x).collect();
        vals.iter().sum::<f64>() / vals.len().max(1) as f64
    };
    out.push(Claim {
        paper: "Position/Path and Position/Position cut the tree cost to about half of \"none\" \
                (Fig. 9)"
            .into(),
        ours: format!("final cost relative to none: {}", halves.join(", ")),
        verdict: if total > 0 && near_half == total {
            Verdict::Agrees
        } else if total > 0 && below == total {
            Verdict::Partly
        } else {
            Verdict::Differs
        },
        why: format!(
            "Both cut the cost, but not by the same amount: position/position ends at {} of none \
             on average and position/path at {}. A strategy runs only when an operation raises the \
             tree cost ({} of the operations for position/path, {} for position/position); costly \
             links that land off the costliest path are never revisited and pile up (none grows \
             from {:.1} to {:.1} hops at {} hops). After a cost-raising leave Path can only move \
             the replacement along its own root path and costliest path down, and repairs {} of \
             them against {} for Position. The paper does not say whether its strategies also ran \
             when an operation left the cost unchanged (Section 4.1 hints they might), nor how it \
             drew the leaving nodes and the newcomers' distances.",
            pct(avg_of(Variant::PositionPosition, |r| r.ratio_to_none)),
            pct(avg_of(Variant::PositionPath, |r| r.ratio_to_none)),
            pct(avg_of(Variant::PositionPath, |r| r.raised_fraction)),
            pct(avg_of(Variant::PositionPosition, |r| r.raised_fraction)),
            hops.first()
                .and_then(|&h| row(h, Variant::None))
                .map_or(0.0, |r| r.avg_initial_cost),
            hops.first()
                .and_then(|&h| row(h, Variant::None))
                .map_or(0.0, |r| r.avg_final_cost),
            hops.first().copied().unwrap_or(0),
            pct(avg_of(Variant::PositionPath, |r| r.leave_repaired_fraction)),
            pct(avg_of(Variant::PositionPosition, |r| r.leave_repaired_fraction))
        ),
    });

    // 7. Position/Position < Position/Path < none.
    let ordered = hops
        .iter()
        .filter(|&&h| {
            match (
                row(h, Variant::None),
                row(h, Variant::PositionPath),
                row(h, Variant::PositionPosition),
            ) {
                (Some(a), Some(b), Some(c)) => {
                    c.avg_final_cost < b.avg_final_cost && b.avg_final_cost < a.avg_final_cost
                }
                _ => false,
            }
        })
        .count();
    out.push(Claim {
        paper: "Position/Position ends cheaper than Position/Path, which ends cheaper than none \
                (Fig. 9)"
            .into(),
        ours: format!(
            "order holds at {ordered} of {} maximum distances; final costs {}",
            hops.len(),
            hops.iter()
                .map(|&h| {
                    let c = |v| row(h, v).map_or(0.0, |r| r.avg_final_cost);
                    format!(
                        "{h} hops: none {:.2}, position/path {:.2}, position/position {:.2}",
                        c(Variant::None),
                        c(Variant::PositionPath),
                        c(Variant::PositionPosition)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        ),
        verdict: Verdict::from_count(ordered, hops.len()),
        why: format!(
            "As the paper explains, Position can try every position while Path is confined to \
             one path; the price is {:.1} swaps per operation against {:.2}.",
            avg_of(Variant::PositionPosition, |r| r.avg_steps_per_op),
            avg_of(Variant::PositionPath, |r| r.avg_steps_per_op)
        ),
    });
    out
}

fn claims_text(claims: &[Claim]) -> String {
    let mut s = String::new();
    for (i, c) in claims.iter().enumerate() {
        let _ = writeln!(s, "{}. paper: {}", i + 1, c.paper);
        let _ = writeln!(s, "   ours:  {}", c.ours);
        let _ = writeln!(s, "   => {}", c.verdict.text());
        if !c.why.is_empty() {
            let _ = writeln!(s, "   why:   {}", c.why);
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// REPORT.md
// ---------------------------------------------------------------------------------------------

/// Everything one run produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Reproduction {
    pub setup: Setup,
    pub tables: Vec<TableCheck>,
    pub fig78: Fig78,
    pub fig9: Fig9,
    pub claims: Vec<Claim>,
    /// The same figures from the other topology draw, when both ran.
    pub other_draw: Option<OtherDraw>,
}

/// Figures 7-9 and the claims from the second topology draw (`compare_min_hops`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct OtherDraw {
    pub min_hops: u32,
    pub fig78: Fig78,
    pub fig9: Fig9,
    pub claims: Vec<Claim>,
}

/// A verdict as a mark: ✓ only when our run agrees.
fn verdict_mark(v: Verdict) -> String {
    format!("{} {}", mark(v == Verdict::Agrees), v.text())
}

/// Why the two draws differ: the zero-cost tree links of the first.
fn draws_reason(f: &Fig78, o: &Fig78) -> String {
    format!(
        "distances {} to {} hops leave {:.0} of the {} Balanced-Path tree links at 0 hops on \
         average (a 0-hop link raised by any factor still costs 0, and the trees are nearly \
         free); distances {} to {} leave {:.0}: average tree cost {:.2} against {:.2} hops",
        f.min_hops,
        f.max_hops,
        f.avg_zero_links,
        f.nodes.saturating_sub(1),
        o.min_hops,
        o.max_hops,
        o.avg_zero_links,
        f.avg_tree_cost,
        o.avg_tree_cost
    )
}

/// The claims judged on both draws, one line each, for stdout.
fn both_draws_text(r: &Reproduction, o: &OtherDraw) -> String {
    let (f, g) = (&r.fig78, &o.fig78);
    let mut s = format!(
        "claim: distances {} to {} hops (the paper's words) | {} to {}\n",
        f.min_hops, f.max_hops, g.min_hops, g.max_hops
    );
    for (i, (a, b)) in r.claims.iter().zip(&o.claims).enumerate() {
        let _ = writeln!(
            s,
            "{}. {}: {} | {}",
            i + 1,
            a.paper,
            verdict_mark(a.verdict),
            verdict_mark(b.verdict)
        );
    }
    let _ = writeln!(s, "why the draws differ: {}", draws_reason(f, g));
    s
}

fn report_md(r: &Reproduction) -> String {
    let mut s = String::new();
    let f = &r.fig78;
    let g = &r.fig9;
    let _ = writeln!(
        s,
        "# Reproduction: Figueira & Mendes, dynamically adaptive binomial trees\n"
    );
    let _ = writeln!(
        s,
        "Generated by `windrose reproduce adaptive-trees{} --seed {} --link {}{}`. Same \
         command, same bytes: every topology and operation comes from a ChaCha8 generator seeded \
         from the seed, and results are reduced in a fixed order whatever the number of threads.\n",
        if r.setup.quick { " --quick" } else { "" },
        r.setup.seed,
        f.link_choice,
        if r.setup.compare_min_hops.is_some() {
            String::new()
        } else {
            format!(" --min-hops {}", r.setup.min_hops)
        }
    );
    if r.setup.quick {
        let _ = writeln!(
            s,
            "**Quick run**: smaller than the paper (see the sizes below); the tables are always \
             the full ones.\n"
        );
    }

    let _ = writeln!(s, "## Worked examples (Tables 2, 3, 4, 6, 7, 8)\n");
    let _ = writeln!(
        s,
        "Leaves in ascending position order, root-to-leaf path cost of each, as in the paper.\n"
    );
    let _ = writeln!(
        s,
        "| table | what | leaves (ours) | costs (ours) | leaves (paper) | costs (paper) | match |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for t in &r.tables {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            t.name,
            t.what,
            list(&t.ours.leaves),
            costs_list(&t.ours.costs),
            list(&t.paper.leaves),
            costs_list(&t.paper.costs),
            mark(t.ok)
        );
    }
    let _ = writeln!(
        s,
        "\nSwaps the strategies evaluated (position and node exchanged, resulting tree cost):\n"
    );
    for t in r.tables.iter().filter(|t| t.paper.trials.is_some()) {
        let _ = writeln!(
            s,
            "- {}: ours {} (made: {}); paper {} (made: {}) {}",
            t.name,
            trials_text(&t.ours.trials),
            made_text(&t.ours.made),
            trials_text(&t.paper.trials),
            made_text(&t.paper.made),
            mark(t.ok)
        );
    }

    let _ = writeln!(
        s,
        "\n## Figures 7 and 8: adapting to a link whose cost rises\n"
    );
    let _ = writeln!(
        s,
        "{} random topologies of {} nodes, distances uniform in {}..={} hops; Balanced-Path tree \
         rooted at node 0. In each topology one tree link is raised to old cost × factor; the \
         **same topologies, tree and link are used at every cost factor and for every strategy** \
         (common random numbers). {} On average {:.1} of the {} tree links cost 0 hops \
         (0 × factor = 0); {} of {} topologies had an eligible link; the raised link cost {:.2} \
         hops on average, {} of the raised links end in a leaf, and their parent end has {:.2} \
         non-root ancestors on average. Average Balanced-Path tree cost: {:.2} hops.\n",
        f.topologies,
        f.nodes,
        f.min_hops,
        f.max_hops,
        link_sentence(f.link_choice),
        f.avg_zero_links,
        f.nodes - 1,
        f.used_topologies,
        f.topologies,
        f.avg_link_cost,
        pct(f.leaf_link_fraction),
        f.avg_link_up,
        f.avg_tree_cost
    );
    let _ = writeln!(
        s,
        "Gain = (increased − final) / increased; steps = swaps evaluated; benefit = average gain / \
         average steps (the paper's definitions). *Reached* = final cost ≤ cost before the rise; \
         *raised* = the rise increased the tree cost (otherwise nothing runs: gain 0, steps 0; \
         these topologies stay in the averages).\n"
    );
    let _ = writeln!(
        s,
        "| factor | strategy | avg gain | avg steps | benefit | reached | raised | steps when raised | cost after rise | final cost |"
    );
    let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &f.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {:.4} | {} | {} | {:.2} | {:.2} | {:.2} |",
            num(row.factor),
            row.strategy,
            pct(row.avg_gain),
            row.avg_steps,
            row.benefit,
            pct(row.reached_fraction),
            pct(row.raised_fraction),
            row.avg_steps_when_raised,
            row.avg_cost_after_change,
            row.avg_final_cost
        );
    }
    let _ = writeln!(
        s,
        "\n![Fig. 7 gain](fig7_gain.png)\n![Fig. 7 steps](fig7_steps.png)\n![Fig. 8 benefit](fig8_benefit.png)\n"
    );

    let _ = writeln!(s, "## Figure 9: nodes joining and leaving\n");
    let _ = writeln!(
        s,
        "{} trees of {} nodes per maximum distance; {} operations per tree, each a join or a leave \
         with probability ½ (joins were {:.1} %; trees end with {:.0} nodes on average). A leave \
         removes a uniformly random live non-root node, whose place the last position's node \
         takes; a join adds a fresh id with distances uniform in {}..=max to every id so far \
         (`push_node` on an f32 matrix). The three variants replay the identical operation \
         sequence on the same matrix. *Raised* = share of operations that raised the tree cost \
         (a strategy runs only on those); *repaired* = share of those brought back to at most \
         the cost before the operation.\n",
        g.trees,
        g.nodes,
        g.ops,
        g.join_fraction * 100.0,
        g.avg_final_nodes,
        g.min_hops
    );
    let _ = writeln!(
        s,
        "| max hops | variant | initial cost | final cost | vs none | steps / op | raised | repaired | repaired (leaves) |"
    );
    let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in &g.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} | {} | {:.2} | {} | {} | {} |",
            row.max_hops,
            row.variant,
            row.avg_initial_cost,
            row.avg_final_cost,
            pct(row.ratio_to_none),
            row.avg_steps_per_op,
            pct(row.raised_fraction),
            pct(row.repaired_fraction),
            pct(row.leave_repaired_fraction)
        );
    }
    let _ = writeln!(s, "\n![Fig. 9](fig9.png)\n");

    let _ = writeln!(s, "## Paper vs us\n");
    let _ = writeln!(s, "| # | the paper says | we got | verdict |");
    let _ = writeln!(s, "|---|---|---|---|");
    for (i, c) in r.claims.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            i + 1,
            c.paper,
            c.ours,
            c.verdict.text()
        );
    }
    let _ = writeln!(s);
    for (i, c) in r.claims.iter().enumerate() {
        if !c.why.is_empty() {
            let _ = writeln!(s, "{}. {}\n", i + 1, c.why);
        }
    }
    if let Some(o) = &r.other_draw {
        let (f, g) = (&r.fig78, &o.fig78);
        let _ = writeln!(s, "## Both topology draws\n");
        let _ = writeln!(
            s,
            "The paper's \"0 hops\" (Table 1: directly connected) suggests distances from 0; \
             distances from 1 are the other reading. Figures 7-9 ran on both (files \
             `fig7_8-min{m}.csv`, `fig9-min{m}.csv` for the second); each claim judged on each:\n",
            m = o.min_hops
        );
        let _ = writeln!(
            s,
            "| # | the paper says | distances {} to {} hops (the paper's words) | we got | distances {} to {} | we got |",
            f.min_hops, f.max_hops, g.min_hops, g.max_hops
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for (i, (a, b)) in r.claims.iter().zip(&o.claims).enumerate() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                i + 1,
                a.paper,
                verdict_mark(a.verdict),
                a.ours,
                verdict_mark(b.verdict),
                b.ours
            );
        }
        let _ = writeln!(s, "\nWhy the draws differ: {}.\n", draws_reason(f, g));
    }

    let _ = writeln!(s, "## Sizes\n");
    let z = &r.setup.sizes;
    let _ = writeln!(
        s,
        "- Figures 7-8: {} topologies × {} nodes, max {} hops, factors {}\n- Figure 9: {} trees × {} \
         nodes per max distance {}, {} operations each\n",
        z.fig78_topologies,
        z.fig78_nodes,
        z.fig78_max_hops,
        costs_list(&z.factors),
        z.fig9_trees,
        z.fig9_nodes,
        list(&z.fig9_max_hops),
        z.fig9_ops
    );
    let _ = writeln!(
        s,
        "Files: `tables.csv`, `fig7_8.csv`, `fig9.csv`, `results.json`, `fig7_gain.png`, \
         `fig7_steps.png`, `fig8_benefit.png`, `fig9.png`. Timings are printed on stdout only, so \
         this report is reproducible byte for byte."
    );
    s
}

// ---------------------------------------------------------------------------------------------
// Driver
// ---------------------------------------------------------------------------------------------

/// Runs everything, prints to `w`, writes the files into `dir`. Returns the results even when a
/// table does not match (the caller decides to fail).
pub(crate) fn reproduce(
    setup: &Setup,
    dir: &Path,
    show_progress: bool,
    w: &mut dyn Write,
) -> Result<Reproduction> {
    setup.validate()?;
    create_dir(dir)?;
    let started = Instant::now();
    writeln!(
        w,
        "Figueira & Mendes, adaptive binomial trees{} (seed {}, {} threads)\n",
        if setup.quick { " — quick sizes" } else { "" },
        setup.seed,
        rayon::current_num_threads()
    )?;

    let t0 = Instant::now();
    let tables = paper_tables()?;
    write_atomic(&dir.join("tables.csv"), tables_csv(&tables).as_bytes())?;
    writeln!(w, "== Worked examples: Tables 2, 3, 4, 6, 7, 8 ==")?;
    write!(w, "{}", tables_text(&tables))?;
    let matched = tables.iter().filter(|t| t.ok).count();
    writeln!(
        w,
        "{matched} of {} match the paper {} ({})\n",
        tables.len(),
        mark(matched == tables.len()),
        secs(t0.elapsed())
    )?;

    writeln!(w, "== Figures 7 and 8: a link's cost rises ==")?;
    let t0 = Instant::now();
    let f = fig78(setup, show_progress)?;
    let elapsed = t0.elapsed();
    write_atomic(&dir.join("fig7_8.csv"), fig78_csv(&f).as_bytes())?;
    fig78_plots(&f, dir)?;
    write!(w, "{}", fig78_text(&f))?;
    writeln!(w, "(figures 7-8: {})\n", secs(elapsed))?;

    writeln!(w, "== Figure 9: nodes join and leave ==")?;
    let t0 = Instant::now();
    let g = fig9(setup, show_progress)?;
    let elapsed = t0.elapsed();
    write_atomic(&dir.join("fig9.csv"), fig9_csv(&g).as_bytes())?;
    fig9_plot(&g, dir)?;
    write!(w, "{}", fig9_text(&g))?;
    writeln!(w, "(figure 9: {})\n", secs(elapsed))?;

    let claims = claims(&f, &g);
    writeln!(w, "== Paper vs us ==")?;
    write!(w, "{}", claims_text(&claims))?;

    let other_draw = match setup.compare_min_hops {
        Some(min_hops) => {
            let t0 = Instant::now();
            let other = Setup {
                min_hops,
                compare_min_hops: None,
                ..setup.clone()
            };
            let f = fig78(&other, show_progress)?;
            let g = fig9(&other, show_progress)?;
            write_atomic(
                &dir.join(format!("fig7_8-min{min_hops}.csv")),
                fig78_csv(&f).as_bytes(),
            )?;
            write_atomic(
                &dir.join(format!("fig9-min{min_hops}.csv")),
                fig9_csv(&g).as_bytes(),
            )?;
            let claims = self::claims(&f, &g);
            writeln!(
                w,
                "\n== Paper vs us on both topology draws (the second: {}) ==",
                secs(t0.elapsed())
            )?;
            Some(OtherDraw {
                min_hops,
                fig78: f,
                fig9: g,
                claims,
            })
        }
        None => None,
    };
    let r = Reproduction {
        setup: setup.clone(),
        tables,
        fig78: f,
        fig9: g,
        claims,
        other_draw,
    };
    if let Some(o) = &r.other_draw {
        write!(w, "{}", both_draws_text(&r, o))?;
    }
    write_atomic(&dir.join("REPORT.md"), report_md(&r).as_bytes())?;
    let json = serde_json::to_string_pretty(&r).context("encoding results.json")?;
    write_atomic(&dir.join("results.json"), json.as_bytes())?;
    writeln!(
        w,
        "\nWrote tables.csv, fig7_8.csv, fig9.csv, results.json, REPORT.md and 4 PNG plots to {} \
         (total {})",
        dir.display(),
        secs(started.elapsed())
    )?;
    Ok(r)
}

/// `windrose reproduce adaptive-trees`.
pub(crate) fn run(args: &AdaptiveTreesArgs) -> Result<()> {
    let setup = Setup {
        sizes: if args.quick {
            Sizes::quick()
        } else {
            Sizes::paper()
        },
        quick: args.quick,
        seed: args.seed,
        link: args.link,
        min_hops: args.min_hops.unwrap_or(0),
        compare_min_hops: args.min_hops.is_none().then_some(1),
    };
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let r = reproduce(&setup, &args.out, true, &mut w)?;
    w.flush()?;
    let failed: Vec<&str> = r.tables.iter().filter(|t| !t.ok).map(|t| t.name).collect();
    if !failed.is_empty() {
        bail!(
            "{} of the paper's worked examples did not match: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(seed: u64) -> Setup {
        Setup {
            sizes: Sizes::quick(),
            quick: true,
            seed,
            link: LinkChoice::Nonzero,
            min_hops: 0,
            compare_min_hops: None,
        }
    }

    fn table<'a>(tables: &'a [TableCheck], name: &str) -> &'a TableState {
        &tables.iter().find(|t| t.name == name).expect(name).ours
    }

    fn trials(state: &TableState) -> Vec<(Position, u32)> {
        state
            .trials
            .as_ref()
            .expect("a strategy ran")
            .iter()
            .map(|t| (t.position, t.node))
            .collect()
    }

    #[test]
    fn worked_examples_match_the_paper_exactly() {
        let tables = paper_tables().unwrap();
        for t in &tables {
            assert!(t.ok, "{} does not match: {:?}", t.name, t);
        }
        let t2 = table(&tables, "Table 2");
        assert_eq!(t2.leaves, [5, 4, 2, 1]);
        assert_eq!(t2.costs, [3.0, 3.0, 2.0, 2.0]);
        let t3 = table(&tables, "Table 3");
        assert_eq!(t3.leaves, [6, 4, 2, 1]);
        assert_eq!(t3.costs, [0.0, 3.0, 2.0, 8.0]);
        assert_eq!(t3.tree_cost, 8.0);
        let t4 = table(&tables, "Table 4");
        assert_eq!(t4.leaves, [5, 4, 2, 1, 8]);
        assert_eq!(t4.costs, [3.0, 3.0, 2.0, 2.0, 4.0]);
        let t6 = table(&tables, "Table 6");
        assert_eq!(t6.leaves, [5, 4, 2, 1, 6]);
        assert_eq!(t6.costs, [3.0, 3.0, 2.0, 2.0, 0.0]);
        assert_eq!(trials(t6), [(7, 1), (6, 6)]);
        assert_eq!(t6.made, Some(Some((8, 6))));
        let t7 = table(&tables, "Table 7");
        assert_eq!(t7.leaves, [5, 4, 2, 6]);
        assert_eq!(t7.costs, [3.0, 7.0, 2.0, 0.0]);
        assert_eq!(t7.tree_cost, 7.0);
        let path = table(&tables, "Fig. 6 left");
        assert_eq!(trials(path), [(3, 4)]);
        assert_eq!(path.trials.as_ref().unwrap()[0].cost, Some(8.0));
        assert_eq!(path.made, Some(None));
        assert_eq!(path.tree_cost, 7.0);
        let t8 = table(&tables, "Table 8");
        assert_eq!(t8.leaves, [1, 4, 2, 6]);
        assert_eq!(t8.costs, [2.0, 3.0, 2.0, 0.0]);
        assert_eq!(trials(t8), [(3, 4), (1, 5)]);
        assert_eq!(t8.made, Some(Some((1, 5))));
    }

    #[test]
    fn a_wrong_paper_value_is_caught() {
        let tables = paper_tables().unwrap();
        let t = &tables[0];
        let mut paper = t.paper.clone();
        paper.costs[0] += 1.0;
        assert!(!states_match(&t.ours, &paper));
        let t = tables.iter().find(|t| t.name == "Table 8").unwrap();
        let mut paper = t.paper.clone();
        paper.trials.as_mut().unwrap().reverse();
        assert!(!states_match(&t.ours, &paper));
    }

    #[test]
    fn quick_runs_with_the_same_seed_write_identical_files() {
        let files = [
            "tables.csv",
            "fig7_8.csv",
            "fig9.csv",
            "REPORT.md",
            "results.json",
        ];
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        reproduce(&quick(7), a.path(), false, &mut std::io::sink()).unwrap();
        reproduce(&quick(7), b.path(), false, &mut std::io::sink()).unwrap();
        reproduce(&quick(8), c.path(), false, &mut std::io::sink()).unwrap();
        for f in files {
            let x = std::fs::read(a.path().join(f)).unwrap();
            assert_eq!(x, std::fs::read(b.path().join(f)).unwrap(), "{f} differs");
        }
        let csv = |d: &tempfile::TempDir| std::fs::read(d.path().join("fig7_8.csv")).unwrap();
        assert_ne!(csv(&a), csv(&c), "the seed must matter");
        for png in [
            "fig7_gain.png",
            "fig7_steps.png",
            "fig8_benefit.png",
            "fig9.png",
        ] {
            let bytes = std::fs::read(a.path().join(png)).unwrap();
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
        // Nothing but the results: no temporary files left behind.
        let names: Vec<String> = std::fs::read_dir(a.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let setup = quick(11);
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| (fig78(&setup, false).unwrap(), fig9(&setup, false).unwrap()))
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
    }

    #[test]
    fn quick_experiments_give_sane_values() {
        let setup = quick(2004);
        let f = fig78(&setup, false).unwrap();
        assert_eq!(
            f.rows.len(),
            setup.sizes.factors.len() * Strategy::ALL.len()
        );
        assert_eq!(f.used_topologies, setup.sizes.fig78_topologies);
        for r in &f.rows {
            assert!((0.0..=1.0).contains(&r.avg_gain), "{r:?}");
            assert!((0.0..=1.0).contains(&r.reached_fraction), "{r:?}");
            assert!(r.benefit.is_finite() && r.benefit >= 0.0, "{r:?}");
            assert!(r.avg_final_cost <= r.avg_cost_after_change + 1e-9, "{r:?}");
            if r.strategy == "leaf" || r.strategy == "position" {
                // They always have candidates: every change that raised the cost was worked on.
                assert!(
                    r.raised_fraction == 0.0 || r.avg_steps_when_raised >= 1.0,
                    "{r:?}"
                );
            }
        }
        // At the largest factor every rise matters and the thorough strategies repair most.
        let last = setup.sizes.factors.len() - 1;
        for s in [Strategy::Leaf, Strategy::Position] {
            let (lo, hi) = (f.row(0, s), f.row(last, s));
            assert!(hi.avg_gain > lo.avg_gain, "{s:?}: {lo:?} {hi:?}");
            assert!(hi.avg_steps >= 1.0, "{hi:?}");
        }

        let g = fig9(&setup, false).unwrap();
        assert_eq!(g.rows.len(), 3 * setup.sizes.fig9_max_hops.len());
        for &h in &setup.sizes.fig9_max_hops {
            let none = g.row(h, Variant::None).unwrap();
            let pos = g.row(h, Variant::PositionPosition).unwrap();
            assert_eq!(none.avg_steps_per_op, 0.0);
            assert!(
                pos.avg_final_cost <= none.avg_final_cost,
                "{pos:?} vs {none:?}"
            );
            assert!(pos.avg_steps_per_op > 0.0);
        }
        let claims = claims(&f, &g);
        assert_eq!(claims.len(), 7);
        assert!(claims
            .iter()
            .all(|c| !c.ours.is_empty() && !c.why.is_empty()));
    }

    #[test]
    fn min_hops_without_zero_distances() {
        let mut setup = quick(3);
        setup.min_hops = 1;
        let f = fig78(&setup, false).unwrap();
        assert_eq!(f.avg_zero_links, 0.0);
        setup.min_hops = 11;
        assert!(setup.validate().is_err());
    }

    #[test]
    fn seeds_are_spread() {
        let mut seen = std::collections::HashSet::new();
        for tag in [TAG_FIG78, TAG_FIG9, TAG_FIG9 ^ (1 << 32)] {
            for i in 0..1000 {
                assert!(seen.insert(item_seed(2004, tag, i)));
            }
        }
    }
}
