//! The automatic choice of protocol: from the message size, the root, the clusters and the
//! group's view of its links ([`LinkTable`], the view's forecasts with its guesses for links
//! nobody measured), predict when each candidate would complete and pick the fastest.
//!
//! # The candidates and their models
//!
//! Every model splits a run into a *start-up* (latencies and the first segment or piece, paid
//! once) and a *stream* (the message at the rate the protocol sustains). Rates come from the
//! view; nothing is fitted per network.
//!
//! - **broadcast** ([`crate::tree_broadcast`] over the tree the [`planner`](crate::planner)
//!   builds, or over the view's minimum spanning tree ([`view_mst`]) when the caller offers
//!   it and it is predicted faster: the planner's trees have the binomial shape of seed 000,
//!   and Balanced-Path may then send straight over a link a hundred times slower than a way
//!   around it through another site, which a spanning tree of the latencies takes; 43x on
//!   three sites of 8, 4 and 2 nodes with one 100 ms WAN link among 1 ms ones, for 1 KiB):
//!   every edge `p → c` of the tree gets a rate: the uplink of `p` (its fastest
//!   link inside its cluster, or its fastest link when it is alone) shared max-min among its
//!   children, each child capped by its own link's bandwidth, and a link between clusters
//!   divided by the tree edges crossing the same pair of clusters (they share one WAN path).
//!   The first segment reaches each child when the parent's flows, each starting after its
//!   latency, have moved it at their shared rates (the simulator's "latency, then bytes"), so
//!   a leaf completes at the sum of those hops over its path plus `(bytes - segment) / min
//!   rate` over its path (the rest, pipelined); the broadcast completes with its last leaf.
//! - **mob** ([`crate::mob`]): the receivers pull pieces from the clusters that have them
//!   over every WAN path at once, so its stream runs at a fraction `mob_efficiency` of the
//!   max-flow bound of the platform built from the view ([`view_platform`],
//!   `windrose_trees::multicast::bound`). Its start-up: `mob_startup_rtts` of the slowest
//!   round trip (what a peer holds, then a request and its answer); the request depth's
//!   growth from one piece per peer to a bandwidth-delay product, doubling per round trip;
//!   each other cluster's first pieces over its direct link from the root's cluster, one per
//!   WAN path (the swarm spreads them only once they are there); one piece inside the
//!   cluster. With fewer than two mob shares' worth of pieces every cluster's mob is one
//!   member, and the root's uplink serves every piece to each local peer and to each other
//!   cluster: MOB completes no sooner than that.
//! - **balanced** (Balanced Multicasting, [`crate::tree_multicast`], planned here from the
//!   view: [`balanced_from_view`]): several trees, each shaped at its planned rate, so the
//!   stream runs at the plan's rate; its start-up is the slowest root-to-leaf path of its
//!   trees, each hop its latency and one piece at the link's bandwidth.
//!
//! # Calibration
//!
//! The MOB constants ([`ChoiceModel`]) are the only ones not read off the view: global
//! constants set once against the simulator (`windrose-sim`'s flow model), never per
//! network. MOB's stream reached 80-97 % of the bound on the large seed-002 runs
//! ([`crate::mob`]) but less at mid sizes, where the swarm is still filling; 70 % with 1.5
//! round trips of start-up put `auto` within 10 % of the best candidate on the most points
//! of issue 16's grid (crates/windrose-sim/tests/auto.rs; `windrose reproduce auto` prints
//! the table). The broadcast and balanced models have no constant: shaped trees run at
//! their plan's rate, and the broadcast's hops are the simulator's own rules.
//!
//! # The choice
//!
//! The fastest prediction wins; ties go to the simpler protocol (broadcast, then balanced,
//! then mob: fewer connections). MOB's prediction is the least exact (the swarm's fill at
//! mid sizes is only bounded, not modelled), so it must win by `mob_margin` (20 %).
//! [`Choice::explain`] lists every candidate with its start-up and stream and names the
//! deciding factor: *latency* when the winner's lead over the runner-up comes mostly from its
//! start-up (small messages), *bandwidth* when it comes from its stream (large ones).

use crate::tree_multicast::TreePlan;
use crate::weather::{median, LinkTable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::units::format_size;
use windrose_model::{ClusterId, NodeId};
use windrose_trees::multicast::balanced::{plan_balanced, BalancedPlan, PlanOptions, PlannedTree};
use windrose_trees::multicast::bound::multicast_bound;
use windrose_trees::Tree;

/// A protocol the choice can make.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Candidate {
    /// Pipelined tree broadcast over the planner's tree.
    Broadcast,
    /// Balanced Multicasting planned from the view.
    Balanced,
    /// MOB.
    Mob,
}

impl Candidate {
    /// Every candidate, in the order ties are broken (simplest first).
    pub const ALL: [Candidate; 3] = [Candidate::Broadcast, Candidate::Balanced, Candidate::Mob];

    /// Its name in explanations, reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Candidate::Broadcast => "broadcast",
            Candidate::Balanced => "balanced",
            Candidate::Mob => "mob",
        }
    }
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One candidate's predicted run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The candidate.
    pub candidate: Candidate,
    /// When its last receiver completes, seconds after the start.
    pub completion_s: f64,
    /// The part paid once (latencies, the first segment or piece), seconds.
    pub startup_s: f64,
    /// The rate the message streams at, MB/s (10^6 bytes/s).
    pub rate_mb_s: f64,
}

/// A prediction as a report carries it ([`crate::Report::ProtocolChosen`]): whole
/// nanoseconds and bytes per second, so reports stay `Copy` and `Eq`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictedRun {
    /// [`Prediction::completion_s`].
    #[serde(rename = "completion_s", with = "crate::time::secs")]
    pub completion: std::time::Duration,
    /// [`Prediction::startup_s`].
    #[serde(rename = "startup_s", with = "crate::time::secs")]
    pub startup: std::time::Duration,
    /// [`Prediction::rate_mb_s`], in bytes per second.
    pub rate_bytes_s: u64,
}

fn duration(s: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(std::time::Duration::MAX)
}

impl From<&Prediction> for PredictedRun {
    fn from(p: &Prediction) -> Self {
        PredictedRun {
            completion: duration(p.completion_s),
            startup: duration(p.startup_s),
            rate_bytes_s: (p.rate_mb_s * 1e6).round() as u64,
        }
    }
}

/// The constants of the models that are not read off the view (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChoiceModel {
    /// The fraction of the max-flow bound MOB's stream reaches.
    pub mob_efficiency: f64,
    /// Round trips (the slowest link's) before MOB's first piece moves.
    pub mob_startup_rtts: f64,
    /// How much faster MOB must be predicted to be chosen: its model is the least exact
    /// (the swarm's fill at mid sizes is not modelled), the others' are close to exact.
    pub mob_margin: f64,
}

impl Default for ChoiceModel {
    fn default() -> Self {
        ChoiceModel {
            mob_efficiency: 0.7,
            mob_startup_rtts: 1.5,
            mob_margin: 1.2,
        }
    }
}

/// What the choice is made from.
#[derive(Clone, Copy, Debug)]
pub struct ChoiceInput<'a> {
    /// Bytes of the message.
    pub bytes: u64,
    /// The member that has it.
    pub root: NodeId,
    /// Every link of the group (the view with its guesses).
    pub links: &'a LinkTable,
    /// The broadcast's tree, as the planner would build it for this message.
    pub tree: &'a Tree,
    /// Another tree the broadcast may run over (the view's MST, [`view_mst`]; None: only
    /// `tree`): the broadcast candidate takes the one predicted faster, `tree` on a tie.
    pub alternative: Option<&'a Tree>,
    /// The broadcast's segment size, bytes.
    pub segment_bytes: u64,
    /// The multicasts' piece size, bytes.
    pub piece_bytes: u32,
    /// The models' constants.
    pub model: ChoiceModel,
}

/// The choice, with every candidate's prediction.
#[derive(Clone, Debug)]
pub struct Choice {
    /// Bytes of the message.
    pub bytes: u64,
    /// The fastest candidate.
    pub chosen: Candidate,
    /// Every candidate that could be planned, in [`Candidate::ALL`] order.
    pub predictions: Vec<Prediction>,
    /// Candidates that could not be planned, and why.
    pub unavailable: Vec<(Candidate, String)>,
    /// The Balanced Multicasting plan (None: it could not be planned), so the caller starts
    /// exactly what was predicted.
    pub balanced: Option<TreePlan>,
    /// Set when the broadcast candidate runs over [`ChoiceInput::alternative`]: what the
    /// planner's tree was predicted to take, seconds (None: over the planner's tree).
    pub planned_tree_s: Option<f64>,
}

/// Why no choice could be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChoiceError {
    /// The root is not a member of the view.
    #[error("the root, node {0}, is not a member of the group's view")]
    UnknownRoot(NodeId),
    /// The tree does not fit the view.
    #[error("the broadcast's tree spans {tree} node ids, the view {view}")]
    TreeMismatch {
        /// The tree's node count.
        tree: usize,
        /// The view's.
        view: usize,
    },
}

impl Choice {
    /// The predictions as a report carries them, in [`Candidate::ALL`] order.
    pub fn predicted(&self) -> [Option<PredictedRun>; 3] {
        Candidate::ALL.map(|c| self.prediction(c).map(PredictedRun::from))
    }

    /// The choice a [`crate::Report::ProtocolChosen`] describes (to [`explain`](Self::explain)
    /// it where the report arrives; it holds no plan).
    pub fn from_report(
        bytes: u64,
        chosen: Candidate,
        predicted: &[Option<PredictedRun>; 3],
    ) -> Choice {
        let predictions = Candidate::ALL
            .iter()
            .zip(predicted)
            .filter_map(|(&candidate, p)| {
                p.map(|p| Prediction {
                    candidate,
                    completion_s: p.completion.as_secs_f64(),
                    startup_s: p.startup.as_secs_f64(),
                    rate_mb_s: p.rate_bytes_s as f64 / 1e6,
                })
            })
            .collect();
        Choice {
            bytes,
            chosen,
            predictions,
            unavailable: Vec::new(),
            balanced: None,
            planned_tree_s: None,
        }
    }

    /// The prediction of `candidate` (None: it could not be planned).
    pub fn prediction(&self, candidate: Candidate) -> Option<&Prediction> {
        self.predictions.iter().find(|p| p.candidate == candidate)
    }

    /// The chosen candidate's prediction (None only for a report that lacked it).
    pub fn chosen_prediction(&self) -> Option<&Prediction> {
        self.prediction(self.chosen)
    }

    /// Why the winner won: `latency` or `bandwidth`, and the runner-up (None: no other
    /// candidate could be planned).
    pub fn deciding_factor(&self) -> Option<(&'static str, &Prediction)> {
        let win = self.chosen_prediction()?;
        let second = self
            .predictions
            .iter()
            .filter(|p| p.candidate != self.chosen)
            .min_by(|a, b| a.completion_s.total_cmp(&b.completion_s))?;
        let d_startup = second.startup_s - win.startup_s;
        let d_stream =
            (second.completion_s - second.startup_s) - (win.completion_s - win.startup_s);
        Some((
            if d_startup >= d_stream {
                "latency"
            } else {
                "bandwidth"
            },
            second,
        ))
    }

    /// A human explanation: the candidates, their predictions and the deciding factor.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "{} to send; predicted completion of each protocol:\n",
            format_size(self.bytes)
        );
        for p in &self.predictions {
            let _ = writeln!(
                s,
                "  {} {:<9} {:>10.4} s  (start-up {:.4} s, then {:.2} MB/s)",
                if p.candidate == self.chosen { "*" } else { " " },
                p.candidate.name(),
                p.completion_s,
                p.startup_s,
                p.rate_mb_s
            );
        }
        for (c, why) in &self.unavailable {
            let _ = writeln!(s, "    {:<9} not planned: {why}", c.name());
        }
        if let (Some(planned), Some(b)) =
            (self.planned_tree_s, self.prediction(Candidate::Broadcast))
        {
            let _ = writeln!(
                s,
                "    (the broadcast over the view's MST: {:.4} s against {planned:.4} s over the \
                 planner's tree)",
                b.completion_s
            );
        }
        let win = match self.chosen_prediction() {
            Some(w) => w,
            None => {
                let _ = write!(s, "chose {}", self.chosen);
                return s;
            }
        };
        match self.deciding_factor() {
            Some(("latency", second)) => {
                let _ = write!(
                    s,
                    "chose {}: latency decides at this size; its start-up is {:.4} s against \
                     {:.4} s for {} (the runner-up, {:.2}x slower)",
                    self.chosen,
                    win.startup_s,
                    second.startup_s,
                    second.candidate,
                    second.completion_s / win.completion_s.max(1e-12)
                );
            }
            Some((_, second)) => {
                let _ = write!(
                    s,
                    "chose {}: bandwidth decides at this size; it streams at {:.2} MB/s against \
                     {:.2} MB/s for {} (the runner-up, {:.2}x slower)",
                    self.chosen,
                    win.rate_mb_s,
                    second.rate_mb_s,
                    second.candidate,
                    second.completion_s / win.completion_s.max(1e-12)
                );
            }
            None => {
                let _ = write!(s, "chose {}: the only candidate planned", self.chosen);
            }
        }
        s
    }
}

/// Predicts every candidate and chooses the fastest.
pub fn choose(input: &ChoiceInput<'_>) -> Result<Choice, ChoiceError> {
    let links = input.links;
    if links.cluster(input.root).is_none() {
        return Err(ChoiceError::UnknownRoot(input.root));
    }
    for tree in std::iter::once(input.tree).chain(input.alternative) {
        if tree.node_count() != links.node_count() {
            return Err(ChoiceError::TreeMismatch {
                tree: tree.node_count(),
                view: links.node_count(),
            });
        }
    }
    let planned = predict_broadcast(input, input.tree);
    let (broadcast, planned_tree_s) = match input.alternative.map(|a| predict_broadcast(input, a)) {
        Some(alt) if alt.completion_s < planned.completion_s => (alt, Some(planned.completion_s)),
        _ => (planned, None),
    };
    let mut predictions = vec![broadcast];
    let mut unavailable = Vec::new();
    let mut balanced = None;
    match view_platform(links) {
        Ok(vp) => {
            match balanced_plan(&vp, input.root) {
                Ok((plan, tree_plan)) => {
                    predictions.push(predict_balanced(input, &plan, &vp));
                    balanced = Some(tree_plan);
                }
                Err(e) => unavailable.push((Candidate::Balanced, e)),
            }
            match predict_mob(input, &vp) {
                Ok(p) => predictions.push(p),
                Err(e) => unavailable.push((Candidate::Mob, e)),
            }
        }
        Err(e) => {
            unavailable.push((Candidate::Balanced, e.clone()));
            unavailable.push((Candidate::Mob, e));
        }
    }
    predictions.sort_by_key(|p| p.candidate);
    let judged = |p: &Prediction| match p.candidate {
        Candidate::Mob => p.completion_s * input.model.mob_margin,
        _ => p.completion_s,
    };
    let chosen = predictions
        .iter()
        .min_by(|a, b| {
            judged(a)
                .total_cmp(&judged(b))
                .then(a.candidate.cmp(&b.candidate))
        })
        .expect("the broadcast is always predicted")
        .candidate;
    Ok(Choice {
        bytes: input.bytes,
        chosen,
        predictions,
        unavailable,
        balanced,
        planned_tree_s,
    })
}

/// The view's minimum spanning tree for a message of `bytes` in segments of `segment` bytes
/// (the planner's costs, [`LinkTable::transfer_costs`]), rooted at `root`: the alternative a
/// broadcast's choice weighs against the planner's tree ([`ChoiceInput::alternative`]). None
/// when it cannot be built (a root outside the view).
pub fn view_mst(links: &LinkTable, root: NodeId, bytes: u64, segment: u64) -> Option<Tree> {
    let costs = links.transfer_costs(bytes, segment);
    windrose_trees::TreeAlgorithm::Mst
        .build(&costs, None, root)
        .ok()
}

/// The members of the view in platform order (by cluster, then id), and their clusters.
fn members(links: &LinkTable) -> Vec<(ClusterId, NodeId)> {
    let mut m: Vec<(ClusterId, NodeId)> = (0..links.node_count())
        .filter_map(|i| {
            let n = NodeId(i as u32);
            links.cluster(n).map(|c| (c, n))
        })
        .collect();
    m.sort_unstable();
    m
}

/// The uplink of `p`: its fastest link inside its cluster (its fastest link when alone).
fn uplink_mb_s(links: &LinkTable, p: NodeId) -> f64 {
    let mine = links.cluster(p);
    let mut intra = 0.0f64;
    let mut any = 0.0f64;
    for i in 0..links.node_count() {
        let q = NodeId(i as u32);
        if q == p || links.cluster(q).is_none() {
            continue;
        }
        let bw = links.link(p, q).1;
        any = any.max(bw);
        if links.cluster(q) == mine {
            intra = intra.max(bw);
        }
    }
    if intra > 0.0 {
        intra
    } else {
        any
    }
}

/// Max-min shares of `capacity` among flows capped at `caps`.
fn max_min(capacity: f64, caps: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..caps.len()).collect();
    order.sort_by(|&a, &b| caps[a].total_cmp(&caps[b]));
    let mut left = capacity;
    let mut share = vec![0.0; caps.len()];
    for (k, &i) in order.iter().enumerate() {
        let fair = left / (caps.len() - k) as f64;
        share[i] = caps[i].min(fair);
        left -= share[i];
    }
    share
}

/// When each of a sender's flows completes: flow `i` starts at `start_s[i]` (its latency)
/// with `bytes[i]` to move at most at `caps[i]` (bytes/s), all sharing `capacity` max-min
/// (the simulator's rule: latency first, then the bytes at the shared rate).
fn shared_finish(capacity: f64, start_s: &[f64], bytes: &[f64], caps: &[f64]) -> Vec<f64> {
    let n = start_s.len();
    let mut left = bytes.to_vec();
    let mut done = vec![f64::NAN; n];
    let mut now = start_s.iter().copied().fold(f64::INFINITY, f64::min);
    while done.iter().any(|d| d.is_nan()) {
        let active: Vec<usize> = (0..n)
            .filter(|&i| done[i].is_nan() && start_s[i] <= now)
            .collect();
        let next_start = (0..n)
            .filter(|&i| done[i].is_nan() && start_s[i] > now)
            .map(|i| start_s[i])
            .fold(f64::INFINITY, f64::min);
        if active.is_empty() {
            now = next_start;
            continue;
        }
        let rates = max_min(
            capacity,
            &active.iter().map(|&i| caps[i]).collect::<Vec<_>>(),
        );
        let step = active
            .iter()
            .zip(&rates)
            .map(|(&i, &r)| left[i] / r)
            .fold(next_start - now, f64::min);
        for (&i, &r) in active.iter().zip(&rates) {
            left[i] -= r * step;
            if left[i] <= 1e-9 * bytes[i].max(1.0) {
                done[i] = now + step;
            }
        }
        now += step;
    }
    done
}

fn predict_broadcast(input: &ChoiceInput<'_>, tree: &Tree) -> Prediction {
    let links = input.links;
    let cluster = |n: NodeId| links.cluster(n);
    // Tree edges crossing each ordered pair of clusters share its WAN path: pipelined they
    // run at once, one segment they cross one after the other; the path carries k copies
    // either way.
    let key = |p: NodeId, c: NodeId| (cluster(p), cluster(c));
    let mut crossing: BTreeMap<_, usize> = BTreeMap::new();
    for &p in tree.nodes() {
        for &c in tree.children(p) {
            if cluster(p) != cluster(c) {
                *crossing.entry(key(p, c)).or_default() += 1;
            }
        }
    }
    let segment = input.segment_bytes.clamp(1, input.bytes.max(1)) as f64;
    let mut rate = vec![f64::INFINITY; tree.node_count()];
    // The first segment's hop to each node: its parent's sends, each after its latency.
    let mut hop = vec![0.0; tree.node_count()];
    for &p in tree.nodes() {
        let children = tree.children(p);
        let caps: Vec<f64> = children
            .iter()
            .map(|&c| {
                let bw = links.link(p, c).1;
                match crossing.get(&key(p, c)) {
                    Some(&k) => bw / k as f64,
                    None => bw,
                }
            })
            .collect();
        let uplink = uplink_mb_s(links, p);
        for (&c, r) in children.iter().zip(max_min(uplink, &caps)) {
            rate[c.index()] = r.max(1e-9);
        }
        let start: Vec<f64> = children.iter().map(|&c| links.link(p, c).0 / 2e3).collect();
        let caps_b: Vec<f64> = caps.iter().map(|c| c.max(1e-9) * 1e6).collect();
        let sizes = vec![segment; children.len()];
        for (&c, t) in children.iter().zip(shared_finish(
            uplink.max(1e-9) * 1e6,
            &start,
            &sizes,
            &caps_b,
        )) {
            hop[c.index()] = t;
        }
    }
    let bytes = input.bytes as f64;
    // Per node: (start-up to it, slowest rate on its path), parents before children.
    let mut reach = vec![(0.0, f64::INFINITY); tree.node_count()];
    let (mut startup, mut done, mut slowest) = (0.0f64, 0.0f64, f64::INFINITY);
    for &n in tree.nodes() {
        let Some(p) = tree.parent(n) else { continue };
        let (s, r) = reach[p.index()];
        let here = (s + hop[n.index()], r.min(rate[n.index()]));
        reach[n.index()] = here;
        let t = here.0 + (bytes - segment).max(0.0) / (here.1 * 1e6);
        if t > done {
            (done, startup, slowest) = (t, here.0, here.1);
        }
    }
    Prediction {
        candidate: Candidate::Broadcast,
        completion_s: done,
        startup_s: startup,
        rate_mb_s: if slowest.is_finite() { slowest } else { 0.0 },
    }
}

/// The slowest round trip of the view, ms.
fn slowest_rtt_ms(links: &LinkTable) -> f64 {
    let m = members(links);
    let mut worst = 0.0f64;
    for (i, &(_, a)) in m.iter().enumerate() {
        for &(_, b) in &m[i + 1..] {
            worst = worst.max(links.link(a, b).0);
        }
    }
    worst
}

/// The fastest link inside a cluster (of any link when every cluster is one node), MB/s,
/// and per cluster other than the root's the fastest direct link into it from the root's
/// cluster (MB/s): the way a cluster's first pieces come.
fn mob_links_mb_s(links: &LinkTable, root: NodeId) -> (f64, Vec<f64>) {
    let m = members(links);
    let home = links.cluster(root);
    let (mut lan, mut any) = (0.0f64, 0.0f64);
    let mut direct: BTreeMap<ClusterId, f64> = BTreeMap::new();
    for (i, &(ca, a)) in m.iter().enumerate() {
        for &(cb, b) in &m[i + 1..] {
            let bw = links.link(a, b).1;
            any = any.max(bw);
            if ca == cb {
                lan = lan.max(bw);
            } else if Some(ca) == home || Some(cb) == home {
                let other = if Some(ca) == home { cb } else { ca };
                let d = direct.entry(other).or_default();
                *d = d.max(bw);
            }
        }
    }
    let lan = if lan > 0.0 { lan } else { any };
    (
        lan.max(1e-9),
        direct.into_values().map(|d| d.max(1e-9)).collect(),
    )
}

fn predict_mob(input: &ChoiceInput<'_>, vp: &ViewPlatform) -> Result<Prediction, String> {
    let bound = multicast_bound(&vp.platform, vp.index_of(input.root))
        .map_err(|e| e.to_string())?
        .bytes_s;
    if !(bound.is_finite() && bound > 0.0) {
        return Err(format!("the view's max-flow bound is {bound} bytes/s"));
    }
    let rate = bound * input.model.mob_efficiency;
    let bytes = input.bytes as f64;
    let piece = (input.piece_bytes as u64).clamp(1, input.bytes.max(1)) as f64;
    let pieces = (bytes / piece).ceil().max(1.0);
    let rtt_s = slowest_rtt_ms(input.links) / 1e3;
    let (lan, direct) = mob_links_mb_s(input.links, input.root);
    // Each other cluster's first pieces come straight from the root's cluster, one per WAN
    // path (the swarm spreads them only once they are there): the slowest cluster's direct
    // link sets when the stream can run at the bound.
    let paths = (direct.len() as f64).min(pieces);
    let first = direct
        .iter()
        .map(|d| paths * piece / (d * 1e6))
        .fold(0.0f64, f64::max);
    // The request depth grows from one piece per peer to a bandwidth-delay product, doubling
    // per round trip.
    let ramp = rtt_s * (1.0 + (rate * rtt_s / piece).min(pieces - 1.0)).log2();
    let startup = input.model.mob_startup_rtts * rtt_s + ramp + first + piece / (lan * 1e6);
    let streamed = if direct.is_empty() {
        pieces - 1.0
    } else {
        pieces - paths
    };
    // With fewer than two shares' worth of pieces every cluster's mob is one member
    // (`MobConfig::min_share_pieces`), so the root's uplink serves each piece to the other
    // members of its cluster (up to its local peers) and to every other cluster's member.
    let config = crate::mob::MobConfig::default();
    let served_by_root = if pieces < 2.0 * f64::from(config.min_share_pieces) {
        let k_root = members(input.links)
            .iter()
            .filter(|(c, _)| Some(*c) == input.links.cluster(input.root))
            .count();
        let requesters = (k_root - 1).min(config.local_peers) + direct.len();
        input.model.mob_startup_rtts * rtt_s
            + pieces * piece * requesters as f64 / (uplink_mb_s(input.links, input.root) * 1e6)
    } else {
        0.0
    };
    Ok(Prediction {
        candidate: Candidate::Mob,
        completion_s: (startup + streamed * piece / rate).max(served_by_root),
        startup_s: startup,
        rate_mb_s: rate / 1e6,
    })
}

fn predict_balanced(input: &ChoiceInput<'_>, plan: &BalancedPlan, vp: &ViewPlatform) -> Prediction {
    let rate = plan.rate_bytes_s();
    let piece = (input.piece_bytes as u64).clamp(1, input.bytes.max(1)) as f64;
    let mut startup = 0.0f64;
    for t in &plan.trees {
        // Path latencies along each tree (platform indexes): parents first by memoising.
        let n = t.parent.len();
        let mut at = vec![None; n];
        fn reach(
            i: usize,
            t: &PlannedTree,
            at: &mut [Option<f64>],
            hop: &dyn Fn(usize, usize) -> f64,
        ) -> f64 {
            if let Some(v) = at[i] {
                return v;
            }
            let v = match t.parent[i] {
                None => 0.0,
                Some(p) => reach(p.index(), t, at, hop) + hop(p.index(), i),
            };
            at[i] = Some(v);
            v
        }
        let hop = |p: usize, c: usize| {
            let (a, b) = (vp.nodes[p], vp.nodes[c]);
            let (rtt, bw) = input.links.link(a, b);
            rtt / 2e3 + piece / (bw * 1e6)
        };
        for i in 0..n {
            startup = startup.max(reach(i, t, &mut at, &hop));
        }
    }
    Prediction {
        candidate: Candidate::Balanced,
        completion_s: startup + (input.bytes as f64 - piece).max(0.0) / rate,
        startup_s: startup,
        rate_mb_s: rate / 1e6,
    }
}

/// A platform built from a view, and how its node indexes map to the group's ids.
#[derive(Clone, Debug)]
pub struct ViewPlatform {
    /// The platform: one cluster per cluster of the view, in id order.
    pub platform: Platform,
    /// The group id of each platform node.
    pub nodes: Vec<NodeId>,
}

impl ViewPlatform {
    /// The platform index of member `n`.
    ///
    /// Panics when `n` is not a member (callers check the view first).
    pub fn index_of(&self, n: NodeId) -> NodeId {
        NodeId(
            self.nodes
                .iter()
                .position(|&m| m == n)
                .expect("a member of the view") as u32,
        )
    }
}

/// The platform Balanced Multicasting and the bound need, built from the view: a cluster per
/// cluster of the view; each node's links run at the median bandwidth of its cluster's links
/// (a lone node: its fastest link), the access links never limit (the view cannot tell them
/// from the WAN), and the WAN path between two clusters has the median bandwidth of the links
/// between them; latencies are half the median round trips, the WAN's what the two clusters'
/// own latencies leave of it.
pub fn view_platform(links: &LinkTable) -> Result<ViewPlatform, String> {
    let m = members(links);
    if m.len() < 2 {
        return Err("a multicast needs two members".into());
    }
    let mut clusters: Vec<(ClusterId, Vec<NodeId>)> = Vec::new();
    for &(c, n) in &m {
        match clusters.last_mut() {
            Some((last, v)) if *last == c => v.push(n),
            _ => clusters.push((c, vec![n])),
        }
    }
    // Every link between `a` and `b` (each once when they are the same cluster).
    let pairs = |a: &[NodeId], b: &[NodeId], same: bool| -> (Vec<f64>, Vec<f64>) {
        let (mut rtt, mut bw) = (Vec::new(), Vec::new());
        for &x in a {
            for &y in b {
                if x != y && (!same || x < y) {
                    let (r, w) = links.link(x, y);
                    rtt.push(r);
                    bw.push(w);
                }
            }
        }
        (rtt, bw)
    };
    let mut builder = Platform::builder();
    let mut intra_lat = Vec::new();
    for (_, nodes) in &clusters {
        let (rtt, bw) = pairs(nodes, nodes, true);
        let node_bw = median(bw).unwrap_or_else(|| uplink_mb_s(links, nodes[0])) * 1e6;
        let lat = median(rtt).unwrap_or(0.0) / 2e3;
        intra_lat.push(lat);
        let access = node_bw * nodes.len() as f64 * 4.0;
        builder = builder.cluster(ClusterSpec::uniform(nodes.len(), node_bw, access, lat));
    }
    for (i, (_, a)) in clusters.iter().enumerate() {
        for (j, (_, b)) in clusters.iter().enumerate() {
            if i == j {
                continue;
            }
            let (rtt, bw) = pairs(a, b, false);
            let bw = median(bw).expect("two non-empty clusters have links") * 1e6;
            let lat = (median(rtt).expect("likewise") / 2e3 - (intra_lat[i] + intra_lat[j]) / 2.0)
                .max(0.0);
            builder = builder.wan(ClusterId(i as u32), ClusterId(j as u32), bw, lat);
        }
    }
    let platform = builder.build().map_err(|e| e.to_string())?;
    Ok(ViewPlatform {
        platform,
        nodes: m.into_iter().map(|(_, n)| n).collect(),
    })
}

fn balanced_plan(vp: &ViewPlatform, root: NodeId) -> Result<(BalancedPlan, TreePlan), String> {
    let plan = plan_balanced(&vp.platform, vp.index_of(root), &PlanOptions::default())
        .map_err(|e| e.to_string())?;
    let n = vp.nodes.iter().map(|m| m.index() + 1).max().unwrap_or(0);
    if n != vp.nodes.len() {
        return Err(format!(
            "Balanced Multicasting needs member ids 0..{}, the group's run to {}",
            vp.nodes.len(),
            n - 1
        ));
    }
    let trees = plan
        .trees
        .iter()
        .map(|t| {
            let mut parent = vec![None; n];
            for (i, p) in t.parent.iter().enumerate() {
                parent[vp.nodes[i].index()] = p.map(|p| vp.nodes[p.index()]);
            }
            PlannedTree {
                parent,
                rate_bytes_s: t.rate_bytes_s,
            }
        })
        .collect();
    let ours = BalancedPlan { root, trees };
    let tree_plan = TreePlan::from_balanced(&ours).map_err(|e| e.to_string())?;
    Ok((plan, tree_plan))
}

/// Balanced Multicasting planned from the view ([`view_platform`]), over the group's ids.
pub fn balanced_from_view(links: &LinkTable, root: NodeId) -> Result<TreePlan, String> {
    if links.cluster(root).is_none() {
        return Err(ChoiceError::UnknownRoot(root).to_string());
    }
    Ok(balanced_plan(&view_platform(links)?, root)?.1)
}

/// The link table of a platform as a perfect view would see it: every pair's round trip
/// (twice its route's latency) and bandwidth (its route's narrowest link).
pub fn platform_links(platform: &Platform) -> LinkTable {
    let n = platform.node_count();
    let clusters = (0..n)
        .map(|i| Some(platform.cluster_of(NodeId(i as u32))))
        .collect();
    LinkTable::from_fn(clusters, |a, b| {
        let route = platform.route(NodeId(a as u32), NodeId(b as u32));
        let back = platform.route(NodeId(b as u32), NodeId(a as u32));
        let bw = route
            .links()
            .iter()
            .chain(back.links())
            .map(|&l| platform.capacity_bytes_s(l))
            .fold(f64::INFINITY, f64::min);
        ((route.latency_s() + back.latency_s()) * 1e3, bw / 1e6)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_trees::TreeAlgorithm;

    fn grid(clusters: &[usize], wan_mb_s: f64, wan_ms: f64) -> Platform {
        let mut b = Platform::builder();
        for &k in clusters {
            b = b.cluster(ClusterSpec::uniform(k, 117e6, 1e10, 1e-4));
        }
        b.wan_all(wan_mb_s * 1e6, wan_ms / 1e3).build().unwrap()
    }

    fn choice(p: &Platform, bytes: u64) -> Choice {
        let links = platform_links(p);
        let costs = links.transfer_costs(bytes, 256 << 10);
        let clusters: Vec<ClusterId> = (0..p.node_count())
            .map(|i| p.cluster_of(NodeId(i as u32)))
            .collect();
        let tree = TreeAlgorithm::BalancedPath
            .build(&costs, Some(&clusters), NodeId(0))
            .unwrap();
        choose(&ChoiceInput {
            bytes,
            root: NodeId(0),
            links: &links,
            tree: &tree,
            alternative: None,
            segment_bytes: 256 << 10,
            piece_bytes: 256 << 10,
            model: ChoiceModel::default(),
        })
        .unwrap()
    }

    /// Three sites of 8, 4 and 2 nodes, 1 ms between them but 100 ms between sites 0 and 1:
    /// Balanced-Path's binomial tree sends 1 KiB straight over the slow link, the view's MST
    /// goes round it through site 2. Offered the MST, the choice runs the broadcast over it
    /// (predicted 43x faster) and says so; not offered, over the planner's tree as before.
    #[test]
    fn a_broadcast_goes_round_a_slow_wan_link_over_the_views_mst() {
        let mut b = Platform::builder();
        for k in [8, 4, 2] {
            b = b.cluster(ClusterSpec::uniform(k, 117e6, 1e10, 1e-4));
        }
        let p = b
            .wan_all(1e8, 1e-3)
            .wan_both(ClusterId(0), ClusterId(1), 1e8, 0.1)
            .build()
            .unwrap();
        let links = platform_links(&p);
        let bytes = 1024;
        let costs = links.transfer_costs(bytes, 256 << 10);
        let clusters: Vec<ClusterId> = (0..p.node_count())
            .map(|i| p.cluster_of(NodeId(i as u32)))
            .collect();
        let bp = TreeAlgorithm::BalancedPath
            .build(&costs, Some(&clusters), NodeId(0))
            .unwrap();
        let mst = view_mst(&links, NodeId(0), bytes, 256 << 10).unwrap();
        let input = |alternative| ChoiceInput {
            bytes,
            root: NodeId(0),
            links: &links,
            tree: &bp,
            alternative,
            segment_bytes: 256 << 10,
            piece_bytes: 256 << 10,
            model: ChoiceModel::default(),
        };
        let alone = choose(&input(None)).unwrap();
        let offered = choose(&input(Some(&mst))).unwrap();
        let b_alone = alone.prediction(Candidate::Broadcast).unwrap().completion_s;
        let b_mst = offered
            .prediction(Candidate::Broadcast)
            .unwrap()
            .completion_s;
        assert_eq!(alone.planned_tree_s, None);
        assert!(b_alone > 0.1, "{}", alone.explain());
        assert!(b_mst < 0.005, "{}", offered.explain());
        assert_eq!(offered.planned_tree_s, Some(b_alone));
        assert_eq!(
            offered.chosen,
            Candidate::Broadcast,
            "{}",
            offered.explain()
        );
        assert!(
            offered.explain().contains("over the view's MST"),
            "{}",
            offered.explain()
        );
        // No MST edge joins sites 0 and 1.
        for (c, par) in mst.edges() {
            let pair = (
                p.cluster_of(c).0.min(p.cluster_of(par).0),
                p.cluster_of(c).0.max(p.cluster_of(par).0),
            );
            assert_ne!(pair, (0, 1), "{c} - {par}");
        }
        // Where the planner's tree is the faster, it stays: the MST offered on the uniform
        // grid of the other tests never makes a broadcast slower than predicted without it.
        let g = grid(&[4, 4, 4, 4], 1.0, 20.0);
        let links = platform_links(&g);
        let costs = links.transfer_costs(64 << 20, 256 << 10);
        let clusters: Vec<ClusterId> = (0..g.node_count())
            .map(|i| g.cluster_of(NodeId(i as u32)))
            .collect();
        let bp = TreeAlgorithm::BalancedPath
            .build(&costs, Some(&clusters), NodeId(0))
            .unwrap();
        let mst = view_mst(&links, NodeId(0), 64 << 20, 256 << 10).unwrap();
        let mut i = input(None);
        (i.links, i.tree, i.bytes) = (&links, &bp, 64 << 20);
        let without = choose(&i).unwrap();
        i.alternative = Some(&mst);
        let with = choose(&i).unwrap();
        let w = |c: &Choice| c.prediction(Candidate::Broadcast).unwrap().completion_s;
        assert!(w(&with) <= w(&without));
    }

    #[test]
    fn the_view_platform_of_a_platform_has_its_bound_and_latencies() {
        let p = grid(&[4, 4], 5.0, 20.0);
        let links = platform_links(&p);
        let (rtt, bw) = links.link(NodeId(0), NodeId(5));
        assert!((rtt - 40.2).abs() < 1e-9, "{rtt}");
        assert!((bw - 5.0).abs() < 1e-9, "{bw}");
        let vp = view_platform(&links).unwrap();
        let a = multicast_bound(&p, NodeId(0)).unwrap().bytes_s;
        let b = multicast_bound(&vp.platform, NodeId(0)).unwrap().bytes_s;
        assert!((a - b).abs() < 1e-6 * a, "{a} {b}");
        for (x, y) in [(0u32, 1u32), (0, 5), (6, 7)] {
            let (x, y) = (NodeId(x), NodeId(y));
            let want = p.route(x, y).latency_s();
            let got = vp.platform.route(x, y).latency_s();
            assert!((want - got).abs() < 1e-12, "{x}->{y}: {want} {got}");
        }
    }

    #[test]
    fn members_out_of_cluster_order_map_back_to_their_ids() {
        // Nodes 0 and 2 in cluster 1, node 1 in cluster 0.
        let c = |i: u32| Some(ClusterId(i));
        let links = LinkTable::from_fn(vec![c(1), c(0), c(1)], |a, b| {
            if (a, b) == (0, 2) {
                (0.2, 100.0)
            } else {
                (20.0, 2.0)
            }
        });
        let plan = balanced_from_view(&links, NodeId(2)).unwrap();
        for t in &plan.trees {
            assert_eq!(t.tree.root(), NodeId(2));
            assert_eq!(t.tree.len(), 3);
        }
        let rate: f64 = plan.trees.iter().filter_map(|t| t.rate_bytes_s).sum();
        assert!((rate - 2e6).abs() < 1e-3 * 2e6, "{rate}");
    }

    #[test]
    fn small_messages_take_the_tree_and_large_ones_over_a_narrow_wan_do_not() {
        let p = grid(&[4, 4, 4, 4], 1.0, 20.0);
        let small = choice(&p, 1024);
        assert_ne!(small.chosen, Candidate::Mob, "{}", small.explain());
        assert_eq!(small.deciding_factor().unwrap().0, "latency");
        let large = choice(&p, 256 << 20);
        assert_ne!(large.chosen, Candidate::Broadcast, "{}", large.explain());
        assert_eq!(large.deciding_factor().unwrap().0, "bandwidth");
        let text = large.explain();
        for c in Candidate::ALL {
            assert!(text.contains(c.name()), "{text}");
        }
        assert!(text.contains("256 MiB"), "{text}");
    }

    #[test]
    fn the_broadcast_model_is_exact_on_a_chain_of_equal_links() {
        // 0 -> 1 -> 2, 100 MB/s, 1 ms round trips: the first segment crosses two hops, the
        // rest streams behind it.
        let c = Some(ClusterId(0));
        let links = LinkTable::from_fn(vec![c, c, c], |_, _| (1.0, 100.0));
        let tree = Tree::from_edges(
            3,
            NodeId(0),
            &[(NodeId(1), NodeId(0)), (NodeId(2), NodeId(1))],
        )
        .unwrap();
        let input = ChoiceInput {
            bytes: 10_000_000,
            root: NodeId(0),
            links: &links,
            tree: &tree,
            alternative: None,
            segment_bytes: 1_000_000,
            piece_bytes: 1 << 20,
            model: ChoiceModel::default(),
        };
        let p = predict_broadcast(&input, &tree);
        let want = 2.0 * (0.5e-3 + 0.01) + 0.09;
        assert!((p.completion_s - want).abs() < 1e-12, "{p:?}");
        assert_eq!(p.rate_mb_s, 100.0);
    }

    #[test]
    fn shared_flows_start_after_their_latency_and_share_what_is_left() {
        // Two flows of 10 bytes on 10 bytes/s: the first alone until 1 s, the second from
        // then on, alone too.
        let f = shared_finish(10.0, &[0.0, 1.0], &[10.0, 10.0], &[100.0, 100.0]);
        assert_eq!(f, vec![1.0, 2.0]);
        // Both at 0: 5 bytes/s each, done at 2; a cap of 2 leaves 8 to the other.
        let f = shared_finish(10.0, &[0.0, 0.0], &[10.0, 10.0], &[100.0, 100.0]);
        assert_eq!(f, vec![2.0, 2.0]);
        let f = shared_finish(10.0, &[0.0, 0.0], &[4.0, 16.0], &[2.0, 100.0]);
        assert_eq!(f, vec![2.0, 2.0]);
    }

    #[test]
    fn max_min_shares_are_fair_and_capped() {
        let s = max_min(10.0, &[1.0, 100.0, 100.0]);
        assert_eq!(s, vec![1.0, 4.5, 4.5]);
        assert_eq!(max_min(10.0, &[2.0, 3.0]), vec![2.0, 3.0]);
    }
}
