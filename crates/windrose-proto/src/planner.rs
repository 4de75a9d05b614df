//! Live broadcast trees: the tree of a broadcast planned at its root, when it starts, from the
//! group's current view ([`GroupView`](crate::weather::GroupView)), under one of three
//! policies compared side by side:
//!
//! - [`TreePolicy::Static`]: built on the view of the first broadcast from this root and kept
//!   whatever the weather does (what MPI libraries and our old runtime do);
//! - [`TreePolicy::Rebuild`]: built from scratch on the current view at every broadcast;
//! - [`TreePolicy::Adapt`]: a first tree fit for the message (see below), then repaired
//!   with the seed-000 swap strategies: a link whose cost moved by more than `threshold` (relative)
//!   since the tree last took it in is taken in ([`AdaptiveTree::on_link_cost_change`]: a rise
//!   on a tree link makes the strategy look for a swap back to the old cost, anything else
//!   only updates the path costs). Smaller moves are not taken in, so noise costs nothing and
//!   drift is taken in once it adds up. A member that failed leaves its position and joins
//!   again at the last one (a leaf: it receives nothing, and holds nobody up).
//! - [`TreePolicy::MstLive`]: the group's live minimum spanning tree ([`crate::mst_service`]),
//!   kept by the members themselves (GHS, then local repairs when a link's forecast moves past
//!   the service's threshold) and re-rooted at the broadcast's root. Nothing is computed at the
//!   root: every node holds the whole tree of the last stable epoch. A broadcast that starts
//!   while a repair runs uses the last stable tree (the repair's result is the next
//!   broadcast's); the `(generation, epoch)` it used is in its [`Plan`]. Before the first tree
//!   is complete (or with no service configured) the root falls back to `rebuild:mst` on its
//!   view, and says so (`built`, no epoch).
//!
//! # Adapt's first tree: latency- or bandwidth-bound
//!
//! The swap strategies repair a binomial-shaped tree (its positions hold the nodes) and rank
//! trees by their costliest root-to-leaf path, where each link's cost is what it adds to the
//! broadcast of this size ([`LinkTable::transfer_costs`](crate::weather::LinkTable)). That
//! ranking cannot see several tree edges crossing the same WAN path and sharing its
//! bandwidth, which is what a *bandwidth-bound* broadcast's time hinges on: Balanced-Path,
//! whose greedy fills a node's child slots with the cheapest nodes left, crossed one slow
//! WAN path three times in issue 16's series and ran ~4x slower than an MST. So the first
//! tree depends on the message ([`Bound`], decided by the caller from the view:
//! [`LinkTable::bound`](crate::weather::LinkTable::bound)):
//!
//! - latency-bound: Balanced-Path (seed 000's own start);
//! - bandwidth-bound: the *site-ordered* binomial tree ([`site_ordered`]) when it puts fewer
//!   tree edges on its busiest WAN path than Balanced-Path does ([`most_shared`]), else
//!   Balanced-Path. Site-ordered fills the positions site by site (the root's first), so
//!   every site is one contiguous range of positions; a binomial subtree is a contiguous
//!   range, so sites of one power-of-two size are whole subtrees joined by one edge each and
//!   every WAN path is crossed at most once (issue 16's 4 x 4 series). Other sizes do not
//!   align (three sites of three cross one path twice), and there Balanced-Path, the start
//!   the swaps were designed for, is kept: measured in crates/windrose-sim/tests/weather.rs,
//!   the site-ordered start left Position_Swapping at 4.3 s per broadcast after the change
//!   where Balanced-Path's reached 1.35 s. The order of the other sites is the one of least
//!   tree cost (every order up to 7 other sites, else nearest first).
//!
//! Either way the swap strategies are what repairs it afterwards. A root whose messages
//! change bound gets a new first tree (`built`), as a policy change does.
//!
//! # Sharing-aware swaps (the live planner's option)
//!
//! Ranked by the plain cost, the swaps undo the site-ordered start: as the view's
//! measurements replace its guesses they trade the tree that crosses every WAN path once
//! for cheaper-looking trees whose edges cross one path two or three times (issue 16's 4 x 4
//! series: 2-4.5 s per broadcast where the site-ordered tree runs 1.45 s). With
//! [`PlanRequest::bytes_ms`] the swaps rank trees by their sharing-aware cost instead
//! ([`windrose_trees::sharing`]): a tree edge from one site to another costs what it costs
//! alone plus, for every other tree edge on the same directed site pair, the whole
//! message's time at its bandwidth (the copies split the path). The Host passes it for
//! every broadcast it roots (a latency-bound message's bytes take little time, so it
//! changes little there). It is an option, not a change of the strategies, because seed
//! 000's published strategies, their golden tests and the offline reproductions rank by
//! the plain cost; the sharing-aware trial is an O(N log N) walk, where the plain one is
//! O(log² N), so the changed links are taken in without a search each and one search runs
//! after them ([`AdaptiveTree::improve_shared`]). Measured in the simulator
//! (`windrose reproduce weather`, 20 broadcasts, the WAN 0<->1 slowed after the fifth):
//! adapt's total fell from 100.1 to 42.0 s at 4 MiB and from 401.7 to 160.7 s at 16 MiB
//! (1.45 s per broadcast before the change instead of 2-4.5 s, 1.82 s after it instead of
//! 3.1 s; the oracle's: 1.45 and 1.52 s); most of what remains is the broadcast running when
//! the link slows, which only a change of tree during a broadcast could shorten.
//!
//! # When the swaps stall
//!
//! The swaps repair a tree a swap at a time around its costliest path, so they can stop in a
//! tree that no single swap improves but that is well above what adapt's first tree, built on
//! the view as it is now, costs (issue 16's series after the slowdown: 1.82 s per broadcast
//! where that tree, which the oracle uses, runs 1.52 s in the simulator; 8.1 s against 6.1 s
//! on the testbed at 16 MiB). So after a plan has taken in changed links and its swaps, the
//! planner also builds that first tree on the taken-in view and keeps it instead when it is
//! cheaper by more than [`REPLAN_MARGIN`] (both priced as the swaps price them, sharing-aware
//! or plain); the plan reports it as `built`. Between changes nothing is rebuilt, and the cost
//! is one first tree per plan that took in a change.
//!
//! # Which collective sees a new tree
//!
//! Only the next one: a running broadcast keeps the tree it was announced with. Every member
//! forwards by that tree, segments are pipelined along it and already in flight, and a change
//! mid-run would need every member to agree on the segment at which it applies (a second
//! agreement round per change) while the tree broadcast's own failure handling already
//! reroutes around a lost member. Weather changes over seconds to minutes
//! ([the forecasters](windrose_model::forecast) follow a step within a few probes); a group that
//! runs many collectives (an MPI program's thousands of broadcasts) meets the new tree at the
//! next one, and a single long transfer between clusters is MOB's job, whose receivers pull
//! from whoever is fastest as the run goes.
//!
//! The plan is made at the root only and travels in the announcement as a fixed
//! [`TreeSpec`](crate::collective::TreeSpec), so no two members can use different trees.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use windrose_model::{ClusterId, DenseCostMatrix, LinkCosts, LinkCostsMut, NodeId};
use windrose_trees::adaptive::{AdaptiveTree, Strategy};
use windrose_trees::binomial;
use windrose_trees::sharing::SiteSharing;
use windrose_trees::{Tree, TreeAlgorithm, TreeError};

/// How a root's broadcast trees follow the weather. Written `static:ALGO`, `rebuild:ALGO`,
/// `adapt:STRATEGY`, `adapt:STRATEGY:THRESHOLD` (e.g. `adapt:path:0.2`) or `mst-live`.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum TreePolicy {
    /// Built once, on the first broadcast's view, and kept.
    Static {
        /// The algorithm.
        algorithm: TreeAlgorithm,
    },
    /// Built from scratch on the current view at every broadcast.
    Rebuild {
        /// The algorithm.
        algorithm: TreeAlgorithm,
    },
    /// Balanced-Path or a site-ordered tree ([`Bound`]), then repaired by swaps when links'
    /// costs move.
    Adapt {
        /// The swap strategy.
        strategy: Strategy,
        /// Relative change of a link's cost that the tree takes in.
        threshold: f64,
    },
    /// The group's live MST, kept by its members ([`crate::mst_service`]; its threshold and
    /// check period are the service's configuration).
    MstLive,
}

/// What a broadcast's time is bound by: decides `adapt`'s first tree (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Small messages: the links' latencies decide.
    Latency,
    /// Large messages: the links' bandwidths decide.
    Bandwidth,
}

/// Adapt's first tree (see the module docs): Balanced-Path, unless the broadcast is
/// bandwidth-bound and the site-ordered tree puts fewer tree edges on its busiest WAN path.
fn first_tree(
    costs: &DenseCostMatrix,
    clusters: &[ClusterId],
    root: NodeId,
    bound: Bound,
) -> Result<AdaptiveTree, TreeError> {
    let bp = AdaptiveTree::balanced_path(costs, root)?;
    if bound == Bound::Latency {
        return Ok(bp);
    }
    let so = site_ordered(costs, clusters, root)?;
    let busiest = |t: &AdaptiveTree| most_shared(&t.to_tree(), clusters);
    Ok(if busiest(&so) < busiest(&bp) { so } else { bp })
}

/// The most tree edges that join one pair of distinct sites (`clusters`: one per node): the
/// number of copies of the message its busiest WAN path carries.
pub fn most_shared(tree: &Tree, clusters: &[ClusterId]) -> usize {
    let mut count: BTreeMap<(ClusterId, ClusterId), usize> = BTreeMap::new();
    for (a, b) in tree.edges() {
        let (Some(&x), Some(&y)) = (clusters.get(a.index()), clusters.get(b.index())) else {
            continue;
        };
        if x != y {
            *count.entry((x.min(y), x.max(y))).or_default() += 1;
        }
    }
    count.into_values().max().unwrap_or(0)
}

/// Other sites up to which [`site_ordered`] tries every order of them (7! = 5040 trees).
const MAX_SITE_PERMUTATIONS: usize = 7;

/// Adapt's first tree for a bandwidth-bound broadcast: binomial positions filled site by site,
/// the root first and its site's other members next (by id), then each other site's members
/// (by id), the sites in the order of least tree cost on `costs`. `clusters` holds one site
/// per node of `costs`.
pub fn site_ordered(
    costs: &DenseCostMatrix,
    clusters: &[ClusterId],
    root: NodeId,
) -> Result<AdaptiveTree, TreeError> {
    let n = costs.node_count();
    if clusters.len() != n {
        return Err(TreeError::Invalid(format!(
            "{} clusters given for {n} nodes",
            clusters.len()
        )));
    }
    if root.index() >= n {
        return Err(TreeError::UnknownNode {
            node: root,
            node_count: n,
        });
    }
    let mut sites: BTreeMap<ClusterId, Vec<NodeId>> = BTreeMap::new();
    for (i, &c) in clusters.iter().enumerate() {
        if i != root.index() {
            sites.entry(c).or_default().push(NodeId(i as u32));
        }
    }
    let mut first = vec![root];
    first.extend(sites.remove(&clusters[root.index()]).unwrap_or_default());
    let others: Vec<Vec<NodeId>> = sites.into_values().collect();
    let order_of = |perm: &[usize]| -> Vec<NodeId> {
        let mut nodes = first.clone();
        for &i in perm {
            nodes.extend(&others[i]);
        }
        nodes
    };
    let mut perm: Vec<usize> = (0..others.len()).collect();
    if others.len() > MAX_SITE_PERMUTATIONS {
        // Nearest first: the next site is the one with the cheapest link from a node placed.
        let mut placed = first.clone();
        let mut left = perm.clone();
        perm.clear();
        while !left.is_empty() {
            let cheapest = |i: &usize| {
                let mut c = f64::INFINITY;
                for &a in &placed {
                    for &b in &others[*i] {
                        c = c.min(costs.cost(a, b));
                    }
                }
                c
            };
            let k = (0..left.len())
                .min_by(|&x, &y| cheapest(&left[x]).total_cmp(&cheapest(&left[y])))
                .expect("not empty");
            let i = left.remove(k);
            placed.extend(&others[i]);
            perm.push(i);
        }
        return AdaptiveTree::from_positions(costs, order_of(&perm));
    }
    let mut best = AdaptiveTree::from_positions(costs, order_of(&perm))?;
    while next_permutation(&mut perm) {
        let t = AdaptiveTree::from_positions(costs, order_of(&perm))?;
        if t.cost() < best.cost() {
            best = t;
        }
    }
    Ok(best)
}

/// The next permutation of `v` in lexicographic order; false (and `v` unchanged) at the last.
fn next_permutation(v: &mut [usize]) -> bool {
    let Some(i) = (1..v.len()).rev().find(|&i| v[i - 1] < v[i]) else {
        return false;
    };
    let j = (i..v.len())
        .rev()
        .find(|&j| v[j] > v[i - 1])
        .expect("v[i] is one");
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

/// Swaps `adapt` may make after taking changes in, beyond the one per changed link
/// ([`AdaptiveTree::improve`]).
pub const MAX_IMPROVING_SWAPS: usize = 64;

/// How much cheaper than the swapped tree adapt's first tree on the current view must be to
/// replace it, after links changed (see the module docs, "When the swaps stall"): a margin,
/// so that view noise does not flip between two trees of about one cost.
pub const REPLAN_MARGIN: f64 = 0.05;

/// The default threshold of `adapt`: a link whose cost moved by a fifth.
pub const DEFAULT_THRESHOLD: f64 = 0.2;

impl Default for TreePolicy {
    /// `adapt:position:0.2` (in the simulator's three-site series, crates/windrose-sim/tests/
    /// weather.rs, Position_Swapping left a slowed WAN link where Path_Swapping did not).
    fn default() -> Self {
        TreePolicy::Adapt {
            strategy: Strategy::Position,
            threshold: DEFAULT_THRESHOLD,
        }
    }
}

impl fmt::Display for TreePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreePolicy::Static { algorithm } => write!(f, "static:{algorithm}"),
            TreePolicy::Rebuild { algorithm } => write!(f, "rebuild:{algorithm}"),
            TreePolicy::Adapt {
                strategy,
                threshold,
            } => write!(f, "adapt:{}:{threshold}", strategy.name()),
            TreePolicy::MstLive => f.write_str("mst-live"),
        }
    }
}

impl FromStr for TreePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let usage =
            "static:ALGO, rebuild:ALGO, adapt:STRATEGY, adapt:STRATEGY:THRESHOLD or mst-live";
        if s == "mst-live" {
            return Ok(TreePolicy::MstLive);
        }
        let mut parts = s.split(':');
        let kind = parts.next().unwrap_or("");
        let arg = parts.next();
        let extra = parts.next();
        let algorithm = |a: Option<&str>| -> Result<TreeAlgorithm, String> {
            a.ok_or_else(|| format!("tree policy {s:?}: name the algorithm ({usage})"))?
                .parse::<TreeAlgorithm>()
                .map_err(|e| format!("tree policy {s:?}: {e}"))
        };
        let policy = match kind {
            "static" => TreePolicy::Static {
                algorithm: algorithm(arg)?,
            },
            "rebuild" => TreePolicy::Rebuild {
                algorithm: algorithm(arg)?,
            },
            "adapt" => {
                let name = arg.unwrap_or("position");
                let strategy = Strategy::ALL
                    .into_iter()
                    .find(|st| st.name() == name)
                    .ok_or_else(|| {
                        format!(
                            "tree policy {s:?}: unknown strategy {name:?} (family, path, leaf, position)"
                        )
                    })?;
                if parts.next().is_some() {
                    return Err(format!("tree policy {s:?}: expected {usage}"));
                }
                let threshold = match extra {
                    None => DEFAULT_THRESHOLD,
                    Some(t) => t
                        .parse::<f64>()
                        .ok()
                        .filter(|t| t.is_finite() && *t >= 0.0)
                        .ok_or_else(|| {
                            format!("tree policy {s:?}: threshold {t:?} is not a number >= 0")
                        })?,
                };
                return Ok(TreePolicy::Adapt {
                    strategy,
                    threshold,
                });
            }
            _ => return Err(format!("tree policy {s:?}: expected {usage}")),
        };
        if extra.is_some() {
            return Err(format!("tree policy {s:?}: expected {usage}"));
        }
        Ok(policy)
    }
}

/// Everything a root plans a broadcast tree from ([`Planner::plan_request`]).
#[derive(Clone, Copy, Debug)]
pub struct PlanRequest<'a> {
    /// The broadcast's root.
    pub root: NodeId,
    /// How its trees follow the weather.
    pub policy: TreePolicy,
    /// What each link adds to the broadcast alone
    /// ([`LinkTable::transfer_costs`](crate::weather::LinkTable::transfer_costs)); every
    /// member: ids `0..costs.node_count()`.
    pub costs: &'a DenseCostMatrix,
    /// The option of sharing-aware swaps for `adapt`
    /// ([`LinkTable::bytes_ms`](crate::weather::LinkTable::bytes_ms): the whole message's
    /// time at each link's bandwidth). With it, the swaps rank trees by their cost with
    /// every tree edge that crosses a WAN path (a directed pair of sites) priced at the
    /// number of tree edges crossing it ([`windrose_trees::sharing::SiteSharing`]), so they
    /// do not trade a tree that crosses every WAN path once for cheaper-looking trees whose
    /// edges share one; links whose cost moved past the threshold are taken in without a
    /// swap each, then one sharing-aware search runs ([`AdaptiveTree::improve_shared`]),
    /// and the plan's cost is sharing-aware. None: seed 000's per-link repairs on the plain
    /// costs (the published strategies, and what offline reproductions use).
    pub bytes_ms: Option<&'a DenseCostMatrix>,
    /// One site per node.
    pub clusters: &'a [ClusterId],
    /// Members now failed.
    pub failed: &'a [NodeId],
    /// What the broadcast is bound by (`adapt`'s first tree).
    pub bound: Bound,
}

/// What one planning did.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The tree, over every member.
    pub tree: Tree,
    /// Its cost (costliest root-to-leaf path, ms) on the costs it was planned with (for
    /// `adapt`: the costs it has taken in; sharing-aware when its swaps are,
    /// [`PlanRequest::bytes_ms`]).
    pub cost: f64,
    /// Built from scratch this time (the first plan, a rebuild, a policy change).
    pub built: bool,
    /// Links whose change the tree took in (`adapt`).
    pub changed_links: usize,
    /// Swaps made (`adapt`); for `mst-live`, edges the repairs since the root's last plan
    /// swapped.
    pub swaps: usize,
    /// `mst-live`: the `(generation, epoch)` of the live tree used (None: the fallback).
    pub mst: Option<(u32, u32)>,
}

#[derive(Clone)]
enum Kept {
    Fixed(Tree),
    Adaptive {
        tree: AdaptiveTree,
        /// The costs the tree has taken in.
        taken: DenseCostMatrix,
        /// Sharing-aware swaps: the message's time at each link's bandwidth, taken in with
        /// `taken` (see [`PlanRequest::bytes_ms`]).
        taken_bytes: Option<DenseCostMatrix>,
    },
}

#[derive(Clone)]
struct Live {
    policy: TreePolicy,
    /// The bound its tree was first built for.
    bound: Bound,
    kept: Kept,
}

impl Live {
    /// Whether its swaps count sharing (it keeps the message's times to price sharing with).
    fn shares(&self) -> bool {
        matches!(
            self.kept,
            Kept::Adaptive {
                taken_bytes: Some(_),
                ..
            }
        )
    }
}

/// The trees a node keeps for the broadcasts it roots, one per root and policy in force.
/// `Clone`, so a plan can be tried on a copy (an automatic start's prediction).
#[derive(Clone, Default)]
pub struct Planner {
    live: BTreeMap<NodeId, Live>,
    /// `mst-live`: the last live tree each root used, and its `(generation, epoch)`.
    live_mst: BTreeMap<NodeId, ((u32, u32), Tree)>,
}

impl fmt::Debug for Planner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Planner")
            .field("roots", &self.live.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Planner {
    /// A planner that keeps nothing yet.
    pub fn new() -> Planner {
        Planner::default()
    }

    /// The tree of the next broadcast from `root` under `policy`, on `costs` (every member:
    /// ids `0..costs.node_count()`), with `clusters` (one per node), the members now
    /// `failed`, and what the broadcast is bound by (`adapt`'s first tree).
    pub fn plan(
        &mut self,
        root: NodeId,
        policy: TreePolicy,
        costs: &DenseCostMatrix,
        clusters: &[ClusterId],
        failed: &[NodeId],
        bound: Bound,
    ) -> Result<Plan, TreeError> {
        self.plan_request(&PlanRequest {
            root,
            policy,
            costs,
            bytes_ms: None,
            clusters,
            failed,
            bound,
        })
    }

    /// [`plan`](Self::plan) with every input named, and the option of sharing-aware swaps
    /// ([`PlanRequest::bytes_ms`]).
    pub fn plan_request(&mut self, r: &PlanRequest<'_>) -> Result<Plan, TreeError> {
        let PlanRequest {
            root,
            policy,
            costs,
            bytes_ms,
            clusters,
            failed,
            bound,
        } = *r;
        if let Some(b) = bytes_ms {
            if b.node_count() != costs.node_count() {
                return Err(TreeError::Invalid(format!(
                    "{} nodes of message times for {} nodes of costs",
                    b.node_count(),
                    costs.node_count()
                )));
            }
        }
        if policy == TreePolicy::MstLive {
            // The fallback before the live tree is whole: the central MST of the view.
            let tree = TreeAlgorithm::Mst.build(costs, Some(clusters), root)?;
            let cost = tree.cost(costs);
            return Ok(Plan {
                tree,
                cost,
                built: true,
                changed_links: 0,
                swaps: 0,
                mst: None,
            });
        }
        let reuse = self.live.get(&root).is_some_and(|l| {
            l.policy == policy
                && ((l.bound == bound && l.shares() == bytes_ms.is_some())
                    || !matches!(policy, TreePolicy::Adapt { .. }))
        });
        if !reuse {
            let kept = match policy {
                TreePolicy::Static { algorithm } | TreePolicy::Rebuild { algorithm } => {
                    Kept::Fixed(algorithm.build(costs, Some(clusters), root)?)
                }
                TreePolicy::Adapt { .. } => Kept::Adaptive {
                    tree: first_tree(costs, clusters, root, bound)?,
                    taken: costs.clone(),
                    taken_bytes: bytes_ms.cloned(),
                },
                TreePolicy::MstLive => unreachable!("returned above"),
            };
            self.live.insert(
                root,
                Live {
                    policy,
                    bound,
                    kept,
                },
            );
        }
        let live = self.live.get_mut(&root).expect("inserted above");
        let (mut built, mut changed_links, mut swaps) = (!reuse, 0, 0);
        let (tree, cost) = match (&policy, &mut live.kept) {
            (TreePolicy::Rebuild { algorithm }, Kept::Fixed(tree)) => {
                if reuse {
                    *tree = algorithm.build(costs, Some(clusters), root)?;
                    built = true;
                }
                (tree.clone(), tree.cost(costs))
            }
            (TreePolicy::Static { .. }, Kept::Fixed(tree)) => (tree.clone(), tree.cost(costs)),
            (
                TreePolicy::Adapt {
                    strategy,
                    threshold,
                },
                Kept::Adaptive {
                    tree,
                    taken,
                    taken_bytes,
                },
            ) => {
                let n = costs.node_count();
                let invalid = |e: windrose_model::ModelError| TreeError::Invalid(e.to_string());
                for a in 0..n {
                    for b in a + 1..n {
                        let (na, nb) = (NodeId(a as u32), NodeId(b as u32));
                        let (old, new) = (taken.cost(na, nb), costs.cost(na, nb));
                        if (new - old).abs() <= threshold * old.abs().max(f64::MIN_POSITIVE) {
                            continue;
                        }
                        taken.set_cost(na, nb, new).map_err(invalid)?;
                        changed_links += 1;
                        match (taken_bytes.as_mut(), bytes_ms) {
                            (Some(tb), Some(bm)) => {
                                // Sharing-aware: take the link in; the search below repairs.
                                tb.set_cost(na, nb, bm.cost(na, nb)).map_err(invalid)?;
                                tree.update_link_cost(taken, na, nb)?;
                            }
                            _ => {
                                let r = tree.on_link_cost_change(taken, na, nb, *strategy)?;
                                swaps += usize::from(r.made.is_some());
                            }
                        }
                    }
                }
                if changed_links > 0 {
                    let rounds = match taken_bytes.as_ref() {
                        Some(tb) => {
                            let shared = SiteSharing::new(&*taken, tb, clusters)?;
                            tree.improve_shared(taken, &shared, *strategy, MAX_IMPROVING_SWAPS)?
                        }
                        None => tree.improve(taken, *strategy, MAX_IMPROVING_SWAPS),
                    };
                    swaps += rounds.iter().filter(|r| r.made.is_some()).count();
                    // The swaps are a local search: where they stop well short of adapt's
                    // first tree on the view now, that tree replaces theirs.
                    let fresh = first_tree(taken, clusters, root, bound)?;
                    let cost_of = |t: &AdaptiveTree| match taken_bytes.as_ref() {
                        Some(tb) => t.shared_cost(&SiteSharing::new(&*taken, tb, clusters)?),
                        None => Ok(t.cost()),
                    };
                    if cost_of(&fresh)? < (1.0 - REPLAN_MARGIN) * cost_of(tree)? {
                        *tree = fresh;
                        built = true;
                    }
                }
                // Failed members leave for the last position (a leaf), after the swaps so
                // none of them moves one back inside.
                for &f in failed {
                    let Some(p) = tree.position_of(f) else {
                        continue;
                    };
                    if f != root && !binomial::is_leaf(p, tree.len()) {
                        tree.leave(taken, f, None)?;
                        tree.join(taken, f, None)?;
                    }
                }
                let cost = match taken_bytes.as_ref() {
                    Some(tb) => tree.shared_cost(&SiteSharing::new(&*taken, tb, clusters)?)?,
                    None => tree.cost(),
                };
                (tree.to_tree(), cost)
            }
            _ => unreachable!("a kept tree matches its policy"),
        };
        Ok(Plan {
            tree,
            cost,
            built,
            changed_links,
            swaps,
            mst: None,
        })
    }

    /// The plan of a broadcast from `root` over the live MST's `tree` of `(generation,
    /// epoch)`: `built` when the generation is new to this root, `changed_links` the epochs
    /// (repairs) since its last plan, `swaps` the edges they swapped.
    pub fn plan_live(
        &mut self,
        root: NodeId,
        tree: Tree,
        at: (u32, u32),
        costs: &DenseCostMatrix,
    ) -> Plan {
        let edges = |t: &Tree| -> std::collections::BTreeSet<(NodeId, NodeId)> {
            t.edges()
                .into_iter()
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect()
        };
        let previous = self.live_mst.insert(root, (at, tree.clone()));
        let (built, changed_links, swaps) = match previous {
            Some(((g, e), old)) if g == at.0 => {
                let (before, now) = (edges(&old), edges(&tree));
                (
                    false,
                    at.1.saturating_sub(e) as usize,
                    now.difference(&before).count(),
                )
            }
            _ => (true, at.1 as usize, 0),
        };
        let cost = tree.cost(costs);
        Plan {
            tree,
            cost,
            built,
            changed_links,
            swaps,
            mst: Some(at),
        }
    }

    /// The costs the `adapt` tree of `root` has taken in (None under other policies).
    pub fn taken_costs(&self, root: NodeId) -> Option<&DenseCostMatrix> {
        match &self.live.get(&root)?.kept {
            Kept::Adaptive { taken, .. } => Some(taken),
            Kept::Fixed(_) => None,
        }
    }
}
