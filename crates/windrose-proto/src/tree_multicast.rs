//! Tree multicast: the pieces of a [`Manifest`] pushed down one or more
//! planned trees. One machine serves two protocols of the MOB paper (seed 002):
//!
//! - **Balanced Multicasting**: several trees planned from the capacities known at the start
//!   ([`TreePlan::from_balanced`]), each with its own rate, enforced at every sender (traffic
//!   shaping), never re-planned;
//! - **MagPIe**: one tree, binomial inside clusters and flat between cluster coordinators
//!   ([`TreePlan::magpie`]), unshaped.
//!
//! # Which piece goes down which tree
//!
//! Every node computes the same assignment from the plan alone ([`TreePlan::piece_trees`]), so
//! a [`Piece`] frame needs no tree number: pieces are dealt to the trees in piece order by
//! Tijdeman's rule for the chairman assignment problem, with weights the trees' rates when every
//! tree has one (equal weights otherwise). With `p_k = w_k / Σw` and `s_k` pieces dealt to tree
//! `k` so far, piece `t` (counting from 1) goes to the tree with the earliest "deadline"
//! `(1 - δ + s_k) / p_k` among those with `t p_k - s_k >= δ`, where `δ = 1 / (2n - 2)` for `n`
//! trees (the lowest index among equals). This keeps every prefix of the data within
//! `1 - δ < 1` piece of each tree's share, for any number of trees (Tijdeman, 1980); the smooth
//! weighted round robin used before (the tree with the most credit takes the piece) drifts past
//! one piece with three or more trees (1.04 measured). So tree `k` gets a share `p_k` of the
//! pieces, spread evenly rather than in runs, and the trees finish together when each carries
//! its rate.
//!
//! # Forwarding
//!
//! The root hands every piece of tree `k` to its children in tree `k`, in piece order; every
//! other node forwards each piece of tree `k` it receives from its parent in tree `k`, once
//! verified (`setup.verifier`), to its own children in tree `k`, in the tree's send order.
//! Frames are [`PieceMsg::Piece`]; payloads are zero-copy slices of the root's data.
//!
//! # Traffic shaping (what exactly is shaped)
//!
//! With [`TreeMulticastConfig::shape`] and a tree with a rate `r`, every sender (the root and
//! every relay) paces each *edge* of that tree, i.e. each (tree, child) pair, on its own. The
//! edge keeps a schedule `next` (initially 0) and hands its pieces to the driver one at a time:
//! a piece of `len` payload bytes (the 16 bytes of frame overhead are not counted) may go when
//! `now ≥ next`, and then `next = max(next, now − len / r) + len / r`. So a backlogged edge
//! carries exactly `r` on average; a hand-over late by less than its own span `len / r` (a
//! runtime's coarse timer, a piece that arrived a little late) keeps the schedule and costs no
//! throughput; idle time earns at most one piece of credit, so over any interval of `T` seconds
//! an edge carries at most `r · T` bytes of payload plus two pieces. Pieces wait in a
//! per-edge FIFO; one timer ([`PACE_TIMER`]) fires at the earliest instant some edge may send.
//! What is *not* shaped: trees without a rate, every tree when `shape` is off (then forwards are
//! handed to the driver at once, and the driver's transport does the pacing), and repairs
//! (pieces re-sent in answer to a [`PieceMsg::Request`]).
//!
//! # Completion, progress, delivery
//!
//! Each newly verified piece is stored, the bytes that became contiguous are delivered in order
//! ([`Output::Deliver`]; the root, which has the data, delivers nothing) and the node reports
//! [`Report::Progress`] (the root once, complete, at start). A node pushes [`Output::Finished`]
//! when it holds every piece and has handed every forward to the driver; the root when it has
//! handed out everything (at once when unshaped). A finished node keeps answering repair
//! requests and ignores duplicate pieces.
//!
//! # Faults
//!
//! - A piece that fails verification is dropped (never stored or forwarded). If a relay sent
//!   it, the relay is dropped too (its pieces are ignored from then on) and every tree it fed
//!   this node takes its missing pieces from the root, as after a failure; if the root sent
//!   it, it is asked again with a [`PieceMsg::Request`] (a parent re-sends a held piece to a
//!   child of that piece's tree, the root to anyone), and after [`MAX_BAD_COPIES`] bad copies
//!   of one piece the root is treated as faulty ([`ProtocolError::Inconsistent`]).
//! - [`Input::PeerFailed`] of a child: that edge is dropped (its queued forwards too). Of the
//!   parent in a tree whose pieces are still missing: the node adopts the root as its parent in
//!   that tree and requests every missing piece of the tree from it (the root answers at once,
//!   unshaped, and the node forwards them as usual; late frames of the planned parent are
//!   still accepted); if the failed peer is the root, the node aborts with
//!   [`AbortReason::PeerFailed`]. A repair costs one scan of the pieces.
//! - With [`TreeMulticastConfig::idle_timeout_s`], a node that still misses pieces and has
//!   received none for that long aborts with [`AbortReason::Timeout`] ([`IDLE_TIMER`]), so a run
//!   never waits for ever on a silent parent.
//!
//! All state is indexed by vectors, sorted sets or the plan's order: the machine is
//! deterministic and draws no random numbers. Per received piece the work is O(children ·
//! log edges), independent of the number of pieces.

use crate::frame::Message;
use crate::node::{
    AbortReason, Input, Output, Outputs, Protocol, ProtocolError, Report, SetupError, Status,
    TimerId,
};
use crate::pieces::{ClusterLayout, Manifest, PieceStore, SourceMismatch, SwarmSetup};
use crate::pieces::{Piece, PieceMsg, PieceRef};
use crate::time::Time;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;
use windrose_model::{ClusterId, CostUnit, LinkCosts, NodeId};
use windrose_trees::multicast::balanced::BalancedPlan;
use windrose_trees::Tree;

/// Fires when nothing has arrived for [`TreeMulticastConfig::idle_timeout_s`] while pieces are
/// missing.
pub const IDLE_TIMER: TimerId = TimerId(0);

/// Fires at the earliest instant a shaped edge may hand over its next piece.
pub const PACE_TIMER: TimerId = TimerId(1);

/// Bad copies of one piece a node accepts from its parents (dropping each and asking again)
/// before it treats the sender as faulty: a corrupt link is retried, a lying parent is not
/// retried for ever. The same bound as MOB's and BitTorrent's.
pub use crate::pieces::MAX_BAD_COPIES;

/// One tree of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanTree {
    /// The tree, rooted at the multicast's root, over every member.
    pub tree: Tree,
    /// The rate every sender of this tree keeps to (bytes/s); None: as fast as TCP goes.
    pub rate_bytes_s: Option<f64>,
}

/// The trees pieces are pushed down.
#[derive(Clone, Debug, PartialEq)]
pub struct TreePlan {
    /// At least one tree.
    pub trees: Vec<PlanTree>,
}

/// Unit link costs, for the tree builders that want a cost model MagPIe does not consult.
struct UnitCosts(usize);

impl LinkCosts for UnitCosts {
    fn node_count(&self) -> usize {
        self.0
    }
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        if a == b {
            0.0
        } else {
            1.0
        }
    }
    fn unit(&self) -> CostUnit {
        CostUnit::Hops
    }
}

impl TreePlan {
    /// A plan of one unshaped tree: MagPIe, or any tree of `windrose-trees` run as a piece
    /// multicast.
    pub fn single(tree: Tree) -> TreePlan {
        TreePlan {
            trees: vec![PlanTree {
                tree,
                rate_bytes_s: None,
            }],
        }
    }

    /// The trees of a Balanced Multicasting plan, each with its planned rate, rooted at the
    /// plan's root (children in id order).
    ///
    /// Errors: no tree, a parent vector that does not span every node from the root, or a rate
    /// that is not finite and positive → [`SetupError::Schedule`].
    pub fn from_balanced(plan: &BalancedPlan) -> Result<TreePlan, SetupError> {
        if plan.trees.is_empty() {
            return Err(SetupError::Schedule("the balanced plan has no tree".into()));
        }
        let mut trees = Vec::with_capacity(plan.trees.len());
        for (k, t) in plan.trees.iter().enumerate() {
            if !t.spans_from(plan.root) {
                return Err(SetupError::Schedule(format!(
                    "tree {k} of the balanced plan does not span every node from root {}",
                    plan.root
                )));
            }
            check_rate(k, Some(t.rate_bytes_s))?;
            let edges: Vec<(NodeId, NodeId)> = t.edges().map(|(p, c)| (c, p)).collect();
            let tree = Tree::from_edges(t.parent.len(), plan.root, &edges)
                .map_err(|e| SetupError::Schedule(format!("tree {k}: {e}")))?;
            trees.push(PlanTree {
                tree,
                rate_bytes_s: Some(t.rate_bytes_s),
            });
        }
        Ok(TreePlan { trees })
    }

    /// MagPIe's one unshaped tree over the members of `layout` (their clusters are MagPIe's
    /// whole view of the network, so no link costs are needed): the root sends to every other
    /// cluster's coordinator (its lowest id) first, then a binomial tree runs inside every
    /// cluster; see `windrose_trees::static_trees::magpie`. Taking the layout, which every
    /// [`SwarmSetup`] carries, lets the simulator and the runtime build the same tree.
    ///
    /// Errors: node ids that are not exactly `0..n` → [`SetupError::Config`]; a root outside
    /// the layout → [`SetupError::NotInTree`].
    pub fn magpie(layout: &ClusterLayout, root: NodeId) -> Result<TreePlan, SetupError> {
        let n = layout.node_count();
        if layout.nodes().last().map(|x| x.index()) != Some(n - 1) {
            return Err(SetupError::Config {
                what: "MagPIe layout",
                requirement: "node ids 0..n",
                value: format!("{n} nodes, largest id {:?}", layout.nodes().last()),
            });
        }
        if !layout.contains(root) {
            return Err(SetupError::NotInTree { node: root });
        }
        let clusters: Vec<ClusterId> = layout
            .nodes()
            .map(|x| layout.cluster_of(x).expect("a member has a cluster"))
            .collect();
        let tree = windrose_trees::static_trees::magpie(&UnitCosts(n), &clusters, root)
            .map_err(|e| SetupError::Schedule(format!("MagPIe tree: {e}")))?;
        Ok(TreePlan::single(tree))
    }

    /// The plan's multicast rate, bytes/s: the sum of its trees' rates (None when a tree has
    /// none).
    pub fn rate_bytes_s(&self) -> Option<f64> {
        self.trees.iter().map(|t| t.rate_bytes_s).sum()
    }

    /// The weight of every tree in the piece assignment: the rates when every tree has one,
    /// else 1 each.
    fn weights(&self) -> Vec<f64> {
        match self
            .trees
            .iter()
            .map(|t| t.rate_bytes_s)
            .collect::<Option<Vec<f64>>>()
        {
            Some(rates) => rates,
            None => vec![1.0; self.trees.len()],
        }
    }

    /// The tree of every piece `0..piece_count`, dealt by Tijdeman's rule (see the
    /// [module docs](self)): what every node computes, so frames need not carry a tree number.
    pub fn piece_trees(&self, piece_count: u32) -> Vec<u16> {
        let w = self.weights();
        let total: f64 = w.iter().sum();
        let share: Vec<f64> = w.iter().map(|x| x / total).collect();
        let n = share.len();
        let delta = if n > 1 {
            1.0 / (2.0 * n as f64 - 2.0)
        } else {
            0.0
        };
        // Rounding must not make the eligible set empty (the theorem says it never is).
        const EPS: f64 = 1e-9;
        let mut dealt = vec![0u32; n];
        let mut out = Vec::with_capacity(piece_count as usize);
        for t in 1..=piece_count {
            let t = f64::from(t);
            let mut best: Option<(f64, usize)> = None;
            for (k, &p) in share.iter().enumerate() {
                let s = f64::from(dealt[k]);
                if t * p - s < delta - EPS {
                    continue;
                }
                let deadline = (1.0 - delta + s) / p;
                let earlier = match best {
                    None => true,
                    Some((d, _)) => deadline < d - EPS,
                };
                if earlier {
                    best = Some((deadline, k));
                }
            }
            // Unreachable by the theorem; the most-behind tree keeps the deal total anyway.
            let k = best.map_or_else(
                || {
                    (0..n)
                        .max_by(|&a, &b| {
                            (t * share[a] - f64::from(dealt[a]))
                                .total_cmp(&(t * share[b] - f64::from(dealt[b])))
                        })
                        .unwrap_or(0)
                },
                |(_, k)| k,
            );
            dealt[k] += 1;
            out.push(k as u16);
        }
        out
    }

    /// Checks the plan against a run: at least one tree and at most 65 535, every tree rooted
    /// at `root` with exactly the members of `layout`, every rate finite and positive.
    pub fn validate(&self, layout: &ClusterLayout, root: NodeId) -> Result<(), SetupError> {
        if self.trees.is_empty() || self.trees.len() > usize::from(u16::MAX) {
            return Err(SetupError::Config {
                what: "tree plan",
                requirement: "1 to 65535 trees",
                value: self.trees.len().to_string(),
            });
        }
        for (k, t) in self.trees.iter().enumerate() {
            check_rate(k, t.rate_bytes_s)?;
            if t.tree.root() != root {
                return Err(SetupError::Schedule(format!(
                    "tree {k} is rooted at node {}, the multicast's root is node {root}",
                    t.tree.root()
                )));
            }
            if let Some(x) = layout.nodes().find(|&x| !t.tree.contains(x)) {
                return Err(SetupError::Schedule(format!(
                    "tree {k} misses node {x} of the group"
                )));
            }
            if t.tree.len() != layout.node_count() {
                let x = t.tree.nodes().iter().find(|&&x| !layout.contains(x));
                return Err(SetupError::Schedule(format!(
                    "tree {k} has node {} outside the group",
                    x.copied().unwrap_or(root)
                )));
            }
        }
        Ok(())
    }
}

fn check_rate(k: usize, rate: Option<f64>) -> Result<(), SetupError> {
    match rate {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(SetupError::Config {
            what: "tree rate (bytes/s)",
            requirement: "finite and positive",
            value: format!("{r} (tree {k})"),
        }),
        _ => Ok(()),
    }
}

/// Knobs of the tree multicast.
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TreeMulticastConfig {
    /// Enforce each tree's rate at its senders (traffic shaping).
    pub shape: bool,
    /// Abort when pieces are missing and none has arrived for this many seconds (None: wait
    /// for ever), so a node below a silent parent does not hang a run.
    pub idle_timeout_s: Option<f64>,
}

impl TreeMulticastConfig {
    /// The defaults with shaping on (Balanced Multicasting) or off (MagPIe): what both drivers
    /// run.
    pub fn with_shape(shape: bool) -> TreeMulticastConfig {
        TreeMulticastConfig {
            shape,
            ..TreeMulticastConfig::default()
        }
    }

    /// The default [`idle_timeout_s`](Self::idle_timeout_s): two minutes, far longer than a
    /// piece takes on any link a multicast is worth running over.
    pub const DEFAULT_IDLE_TIMEOUT_S: f64 = 120.0;

    fn idle_timeout(&self) -> Result<Option<Duration>, SetupError> {
        match self.idle_timeout_s {
            None => Ok(None),
            Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(SetupError::Config {
                what: "idle_timeout_s",
                requirement: "finite and positive (or None)",
                value: s.to_string(),
            }),
        }
    }
}

impl Default for TreeMulticastConfig {
    fn default() -> Self {
        TreeMulticastConfig {
            shape: true,
            idle_timeout_s: Some(Self::DEFAULT_IDLE_TIMEOUT_S),
        }
    }
}

/// A (tree, child) pair this node sends to.
#[derive(Clone, Debug)]
struct Edge {
    tree: usize,
    child: NodeId,
    alive: bool,
    /// Pieces waiting for their turn (shaped edges only).
    queue: VecDeque<u32>,
    /// Earliest instant, in seconds, the next piece may be handed over (shaped edges).
    next_s: f64,
    /// True while the edge is in the pacer's set.
    waiting: bool,
}

/// This node's view of one tree.
#[derive(Clone, Debug)]
struct TreeView {
    parent: Option<NodeId>,
    /// The parent the plan gave (still accepted after a repair: its last frames may be late).
    planned_parent: Option<NodeId>,
    /// Indices of this node's edges in that tree.
    edges: Range<usize>,
    /// The pacing rate of its edges (None: unshaped).
    pace: Option<f64>,
    /// Pieces of the tree this node does not hold yet.
    missing: u32,
}

/// A tree multicast node. See the [module docs](self).
pub struct TreeMulticast {
    node: NodeId,
    root: NodeId,
    setup: SwarmSetup,
    config: TreeMulticastConfig,
    idle_timeout: Option<Duration>,
    /// The tree of every piece (empty when the plan has one tree).
    piece_tree: Vec<u16>,
    trees: Vec<TreeView>,
    edges: Vec<Edge>,
    store: PieceStore,
    status: Status,
    started: bool,
    /// Pieces waiting in shaped edges' queues.
    queued: usize,
    /// Shaped edges with queued pieces, by the nanosecond they may send next.
    pacer: BTreeSet<(u64, usize)>,
    /// When the pace timer is set for.
    pace_armed: Option<u64>,
    /// When a piece last arrived (or the start).
    last_heard: Time,
    idle_armed: bool,
    /// Bad copies received, per piece.
    bad: BTreeMap<u32, u32>,
    /// A restarted node's machine ([`TreeMulticast::rejoin`]).
    rejoined: bool,
    /// Relays that sent a piece that failed verification: their pieces are ignored.
    banned: BTreeSet<NodeId>,
}

impl std::fmt::Debug for TreeMulticast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeMulticast")
            .field("node", &self.node)
            .field("status", &self.status)
            .field("held", &self.store.held())
            .field("pieces", &self.store.piece_count())
            .field("queued", &self.queued)
            .finish()
    }
}

/// The first nanosecond at or after `s` seconds.
fn ceil_ns(s: f64) -> u64 {
    // `as` saturates: NaN and negatives give 0.
    (s * 1e9).ceil() as u64
}

impl TreeMulticast {
    /// The machine of `node`: `data` at the root only, the same `plan` and `config` at every
    /// node.
    ///
    /// Errors: `setup.check` fails (node or root outside the layout, data at the wrong node or
    /// of the wrong length), the plan does not fit the run ([`TreePlan::validate`]), or a
    /// config value is out of range.
    pub fn new(
        node: NodeId,
        setup: &SwarmSetup,
        data: Option<Bytes>,
        plan: Arc<TreePlan>,
        config: TreeMulticastConfig,
    ) -> Result<TreeMulticast, SetupError> {
        setup.check(node, data.as_ref())?;
        plan.validate(&setup.layout, setup.root)?;
        let idle_timeout = config.idle_timeout()?;
        let manifest: &Manifest = &setup.manifest;
        let piece_tree = if plan.trees.len() > 1 {
            plan.piece_trees(manifest.piece_count())
        } else {
            Vec::new()
        };
        let mut per_tree_pieces = vec![0u32; plan.trees.len()];
        if piece_tree.is_empty() {
            per_tree_pieces[0] = manifest.piece_count();
        } else {
            for &k in &piece_tree {
                per_tree_pieces[usize::from(k)] += 1;
            }
        }
        let is_root = node == setup.root;
        let mut trees = Vec::with_capacity(plan.trees.len());
        let mut edges = Vec::new();
        for (k, t) in plan.trees.iter().enumerate() {
            let start = edges.len();
            for &child in t.tree.children(node) {
                edges.push(Edge {
                    tree: k,
                    child,
                    alive: true,
                    queue: VecDeque::new(),
                    next_s: 0.0,
                    waiting: false,
                });
            }
            trees.push(TreeView {
                parent: t.tree.parent(node),
                planned_parent: t.tree.parent(node),
                edges: start..edges.len(),
                pace: t.rate_bytes_s.filter(|_| config.shape),
                missing: if is_root { 0 } else { per_tree_pieces[k] },
            });
        }
        let store = match &data {
            Some(d) => PieceStore::full(manifest, d),
            None => setup.empty_store(),
        };
        Ok(TreeMulticast {
            node,
            root: setup.root,
            setup: setup.clone(),
            config,
            idle_timeout,
            piece_tree,
            trees,
            edges,
            store,
            status: Status::Running,
            started: false,
            queued: 0,
            pacer: BTreeSet::new(),
            pace_armed: None,
            last_heard: Time::ZERO,
            idle_armed: false,
            bad: BTreeMap::new(),
            rejoined: false,
            banned: BTreeSet::new(),
        })
    }

    /// The machine of `node` restarting mid-run with the pieces it kept (e.g. read back from
    /// its partial output file): each is verified against the manifest and kept only if it
    /// matches. Its children were re-attached to the root when it failed, so it forwards
    /// nothing; at start it asks the root for every piece it misses, as a node whose parent
    /// failed does (the root serves requests even after it has finished).
    ///
    /// Errors: those of [`TreeMulticast::new`]; the root cannot rejoin.
    pub fn rejoin(
        node: NodeId,
        setup: &SwarmSetup,
        plan: Arc<TreePlan>,
        config: TreeMulticastConfig,
        held: impl IntoIterator<Item = (u32, Bytes)>,
    ) -> Result<TreeMulticast, SetupError> {
        if node == setup.root {
            return Err(SetupError::Data {
                node,
                what: "the root cannot rejoin: its failure ends the run",
            });
        }
        let mut m = TreeMulticast::new(node, setup, None, plan, config)?;
        for (i, data) in setup.verified_pieces(held) {
            m.store.insert(i, data);
            let k = m.tree_of(i);
            m.trees[k].missing -= 1;
        }
        for edge in &mut m.edges {
            edge.alive = false;
        }
        for t in &mut m.trees {
            t.parent = Some(setup.root);
        }
        m.rejoined = true;
        Ok(m)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &TreeMulticastConfig {
        &self.config
    }

    /// The pieces it holds.
    pub fn store(&self) -> &PieceStore {
        &self.store
    }

    /// Pieces handed to shaped edges and not yet to the driver.
    pub fn queued_pieces(&self) -> usize {
        self.queued
    }

    fn tree_of(&self, piece: u32) -> usize {
        self.piece_tree
            .get(piece as usize)
            .map_or(0, |&k| usize::from(k))
    }

    fn total_bytes(&self) -> u64 {
        self.setup.manifest.total_len()
    }

    fn progress(&self, out: &mut Outputs) {
        out.push(Output::Report(Report::Progress {
            transfer: self.setup.transfer,
            done_bytes: self.store.held_bytes(),
            total_bytes: self.total_bytes(),
        }));
    }

    fn piece_message(&self, piece: u32, payload: Bytes) -> Message {
        Message::Pieces(PieceMsg::Piece(Piece {
            transfer: self.setup.transfer,
            piece,
            payload,
        }))
    }

    fn on_start(&mut self, now: Time, out: &mut Outputs) {
        if self.started {
            return;
        }
        self.started = true;
        self.last_heard = now;
        if self.node == self.root {
            self.progress(out);
            for p in 0..self.store.piece_count() {
                self.forward(now, p, out);
            }
        } else if self.rejoined {
            for (offset, data) in self.store.take_deliverable(&self.setup.manifest) {
                out.push(Output::Deliver {
                    transfer: self.setup.transfer,
                    offset,
                    data,
                });
            }
            self.progress(out);
            for p in (0..self.store.piece_count()).filter(|&p| !self.store.has(p)) {
                out.send(
                    self.root,
                    Message::Pieces(PieceMsg::Request(PieceRef {
                        transfer: self.setup.transfer,
                        piece: p,
                    })),
                );
            }
            if let Some(t) = self.idle_timeout.filter(|_| !self.store.is_complete()) {
                self.idle_armed = true;
                out.push(Output::SetTimer {
                    timer: IDLE_TIMER,
                    at: now + t,
                });
            }
        } else if self.store.is_complete() {
            self.progress(out); // an empty transfer
        } else if let Some(t) = self.idle_timeout {
            self.idle_armed = true;
            out.push(Output::SetTimer {
                timer: IDLE_TIMER,
                at: now + t,
            });
        }
        self.rearm_pacer(out);
        self.check_finished(out);
    }

    /// Hands piece `p` (held) to every live edge of its tree: at once when unshaped, through
    /// the edge's queue when shaped.
    fn forward(&mut self, now: Time, p: u32, out: &mut Outputs) {
        let k = self.tree_of(p);
        let range = self.trees[k].edges.clone();
        let Some(payload) = self.piece_to_send(p, out) else {
            return;
        };
        for e in range {
            if !self.edges[e].alive {
                continue;
            }
            if self.trees[k].pace.is_some() {
                self.edges[e].queue.push_back(p);
                self.queued += 1;
                if !self.edges[e].waiting {
                    self.pump(now, e, out);
                }
            } else {
                out.send(self.edges[e].child, self.piece_message(p, payload.clone()));
            }
        }
    }

    /// Hands over the pieces a shaped edge may send now; if some remain, puts the edge in the
    /// pacer's set at the instant it may send the next one. The caller re-arms the timer.
    fn pump(&mut self, now: Time, e: usize, out: &mut Outputs) {
        let Some(rate) = self.trees[self.edges[e].tree].pace else {
            return;
        };
        let now_ns = now.as_nanos();
        while let Some(&p) = self.edges[e].queue.front() {
            let edge = &mut self.edges[e];
            let due = ceil_ns(edge.next_s);
            if now_ns < due {
                break;
            }
            edge.queue.pop_front();
            self.queued -= 1;
            let child = edge.child;
            let Some(payload) = self.piece_to_send(p, out) else {
                return;
            };
            let span = payload.len() as f64 / rate;
            // A hand-over late by less than its own span (a timer that fired late) keeps the
            // schedule, so late timers cost no throughput; an idle edge restarts from now.
            let base = self.edges[e].next_s.max(now.as_secs_f64() - span);
            self.edges[e].next_s = base + span;
            out.send(child, self.piece_message(p, payload));
        }
        let edge = &mut self.edges[e];
        if !edge.queue.is_empty() {
            edge.waiting = true;
            self.pacer.insert((ceil_ns(edge.next_s), e));
        }
    }

    /// Points the pace timer at the pacer's earliest instant (or cancels it).
    fn rearm_pacer(&mut self, out: &mut Outputs) {
        let first = self.pacer.first().map(|&(t, _)| t);
        if first == self.pace_armed {
            return;
        }
        match first {
            Some(t) => out.push(Output::SetTimer {
                timer: PACE_TIMER,
                at: Time::from_nanos(t),
            }),
            None => out.push(Output::CancelTimer(PACE_TIMER)),
        }
        self.pace_armed = first;
    }

    fn on_pace_timer(&mut self, now: Time, out: &mut Outputs) {
        if self.status == Status::Aborted {
            return;
        }
        // Drop the pace_armed mark only when the timer really is the one that was set.
        if self.pace_armed.is_some_and(|t| t <= now.as_nanos()) {
            self.pace_armed = None;
        }
        while let Some(&(t, e)) = self.pacer.first() {
            if t > now.as_nanos() {
                break;
            }
            self.pacer.pop_first();
            self.edges[e].waiting = false;
            if self.edges[e].alive {
                self.pump(now, e, out);
            }
        }
        self.rearm_pacer(out);
        self.check_finished(out);
    }

    fn on_piece(
        &mut self,
        now: Time,
        from: NodeId,
        piece: Piece,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = PieceMsg::PIECE;
        ProtocolError::check_transfer(from, kind, self.setup.transfer, piece.transfer)?;
        let p = piece.piece;
        if p >= self.store.piece_count() {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "piece index past the last piece",
            });
        }
        if self.status == Status::Aborted || self.store.has(p) || self.banned.contains(&from) {
            // A gave-up node, a duplicate (a repair that crossed the original), or a relay
            // dropped for sending a bad piece.
            return Ok(());
        }
        let k = self.tree_of(p);
        let view = &self.trees[k];
        if view.parent != Some(from) && view.planned_parent != Some(from) {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "the sender is not this node's parent in the piece's tree",
            });
        }
        if !self
            .setup
            .verifier
            .verify(&self.setup.manifest, p, &piece.payload)
        {
            if from != self.root {
                // A relay sent a bad piece: drop it, and take its trees from the root.
                self.banned.insert(from);
                if self.trees[k].parent != Some(from) {
                    // Its planned parent, already bypassed: ask the root for this piece.
                    out.send(
                        self.root,
                        Message::Pieces(PieceMsg::Request(PieceRef {
                            transfer: self.setup.transfer,
                            piece: p,
                        })),
                    );
                }
                self.reparent_to_root(now, from, out);
                return Ok(());
            }
            let bad = self.bad.get(&p).copied().unwrap_or(0);
            if bad >= MAX_BAD_COPIES {
                return Err(ProtocolError::Inconsistent {
                    from,
                    kind,
                    what: "piece fails verification again",
                });
            }
            self.bad.insert(p, bad + 1);
            out.send(
                from,
                Message::Pieces(PieceMsg::Request(PieceRef {
                    transfer: self.setup.transfer,
                    piece: p,
                })),
            );
            return Ok(());
        }
        self.last_heard = now;
        self.store.insert(p, piece.payload);
        self.trees[k].missing -= 1;
        for (offset, data) in self.store.take_deliverable(&self.setup.manifest) {
            out.push(Output::Deliver {
                transfer: self.setup.transfer,
                offset,
                data,
            });
        }
        self.progress(out);
        self.forward(now, p, out);
        self.rearm_pacer(out);
        self.check_finished(out);
        Ok(())
    }

    fn on_request(
        &mut self,
        from: NodeId,
        r: PieceRef,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = PieceMsg::REQUEST;
        ProtocolError::check_transfer(from, kind, self.setup.transfer, r.transfer)?;
        if r.piece >= self.store.piece_count() {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "piece index past the last piece",
            });
        }
        let k = self.tree_of(r.piece);
        let edge = self.trees[k]
            .edges
            .clone()
            .find(|&e| self.edges[e].child == from);
        if self.node != self.root && edge.is_none() {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "only the root and the piece's parent serve requests",
            });
        }
        // A relay serves only its live children; the root serves anyone, also a child it saw
        // fail that restarted and asks again.
        if (self.node != self.root && edge.is_some_and(|e| !self.edges[e].alive))
            || self.status == Status::Aborted
        {
            return Ok(());
        }
        if let Some(payload) = self.piece_to_send(r.piece, out) {
            out.send(from, self.piece_message(r.piece, payload));
        }
        Ok(())
    }

    fn on_peer_failed(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        if self.status != Status::Running {
            return;
        }
        for e in 0..self.edges.len() {
            if self.edges[e].child == peer && self.edges[e].alive {
                let edge = &mut self.edges[e];
                edge.alive = false;
                self.queued -= edge.queue.len();
                edge.queue.clear();
                if edge.waiting {
                    edge.waiting = false;
                    self.pacer.remove(&(ceil_ns(edge.next_s), e));
                }
            }
        }
        if peer == self.root
            && (0..self.trees.len())
                .any(|k| self.trees[k].parent == Some(peer) && self.trees[k].missing > 0)
        {
            self.abort(AbortReason::PeerFailed { peer }, out);
            return;
        }
        self.reparent_to_root(now, peer, out);
        self.rearm_pacer(out);
        self.check_finished(out);
    }

    /// Every tree whose pieces came from `peer` (failed or dropped) and still misses some now
    /// takes them from the root: the missing ones are asked for at once.
    fn reparent_to_root(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        let orphaned: Vec<usize> = (0..self.trees.len())
            .filter(|&k| self.trees[k].parent == Some(peer) && self.trees[k].missing > 0)
            .collect();
        if !orphaned.is_empty() {
            for &k in &orphaned {
                self.trees[k].parent = Some(self.root);
            }
            for p in 0..self.store.piece_count() {
                if !self.store.has(p) && orphaned.contains(&self.tree_of(p)) {
                    out.send(
                        self.root,
                        Message::Pieces(PieceMsg::Request(PieceRef {
                            transfer: self.setup.transfer,
                            piece: p,
                        })),
                    );
                }
            }
            self.last_heard = now;
        }
    }

    fn on_idle_timer(&mut self, now: Time, out: &mut Outputs) {
        if self.status != Status::Running || !self.idle_armed {
            return;
        }
        let Some(t) = self.idle_timeout else { return };
        let due = self.last_heard + t;
        if now >= due {
            self.abort(AbortReason::Timeout { waited: t }, out);
        } else {
            out.push(Output::SetTimer {
                timer: IDLE_TIMER,
                at: due,
            });
        }
    }

    fn cancel_timers(&mut self, out: &mut Outputs) {
        if std::mem::take(&mut self.idle_armed) {
            out.push(Output::CancelTimer(IDLE_TIMER));
        }
        if self.pace_armed.take().is_some() {
            out.push(Output::CancelTimer(PACE_TIMER));
        }
    }

    fn check_finished(&mut self, out: &mut Outputs) {
        if self.status == Status::Running
            && self.started
            && self.store.is_complete()
            && self.queued == 0
        {
            self.status = Status::Finished;
            self.cancel_timers(out);
            out.push(Output::Finished);
        }
    }

    /// Held piece `p`'s bytes to send; None when it is not held, or when the root's own copy
    /// no longer matches the manifest, which aborts the run.
    fn piece_to_send(&mut self, p: u32, out: &mut Outputs) -> Option<Bytes> {
        match self
            .store
            .to_send(p, &self.setup.manifest, &*self.setup.verifier)
        {
            Ok(payload) => payload,
            Err(SourceMismatch { piece }) => {
                self.abort(AbortReason::SourceChanged { piece }, out);
                None
            }
        }
    }

    fn abort(&mut self, reason: AbortReason, out: &mut Outputs) {
        self.status = Status::Aborted;
        for edge in &mut self.edges {
            edge.queue.clear();
            edge.waiting = false;
        }
        self.queued = 0;
        self.pacer.clear();
        self.cancel_timers(out);
        out.push(Output::Aborted(reason));
    }
}

impl Protocol for TreeMulticast {
    fn node(&self) -> NodeId {
        self.node
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => self.on_start(now, out),
            Input::Message {
                from,
                message: Message::Pieces(PieceMsg::Piece(piece)),
            } => self.on_piece(now, from, piece, out)?,
            Input::Message {
                from,
                message: Message::Pieces(PieceMsg::Request(r)),
            } => self.on_request(from, r, out)?,
            Input::Message { from, message } => {
                return Err(ProtocolError::UnexpectedMessage {
                    from,
                    kind: message.kind(),
                    why: "not part of a tree multicast",
                })
            }
            Input::Timer(IDLE_TIMER) => self.on_idle_timer(now, out),
            Input::Timer(PACE_TIMER) => self.on_pace_timer(now, out),
            Input::Timer(_) => {} // not ours: harmless
            Input::Command(crate::node::Command::ComputeDone { task }) => {
                return Err(ProtocolError::UnknownTask { task })
            }
            Input::SendComplete { to, id } => return Err(ProtocolError::UnknownSend { to, id }),
            // Requests of the application are the host's business.
            Input::App(_) => {}
            Input::PeerFailed(peer) => self.on_peer_failed(now, peer, out),
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::TransferId;
    use crate::pieces::Blake3Verifier;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    fn setup(data: &Bytes, piece_len: u32, nodes: u32) -> SwarmSetup {
        SwarmSetup {
            transfer: TransferId(7),
            root: n(0),
            manifest: Arc::new(Manifest::build(data, piece_len).unwrap()),
            layout: Arc::new(
                ClusterLayout::new((0..nodes).map(|i| (n(i), ClusterId(i / 2)))).unwrap(),
            ),
            verifier: Arc::new(Blake3Verifier),
            keeper: None,
        }
    }

    fn chain(len: u32) -> Tree {
        let edges: Vec<_> = (1..len).map(|i| (n(i), n(i - 1))).collect();
        Tree::from_edges(len as usize, n(0), &edges).unwrap()
    }

    fn piece_sends(out: &Outputs) -> Vec<(NodeId, u32)> {
        out.as_slice()
            .iter()
            .filter_map(|o| match o {
                Output::Send(t) => match &t.message {
                    Message::Pieces(PieceMsg::Piece(p)) => Some((t.to, p.piece)),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    #[test]
    fn smooth_round_robin_follows_the_rates() {
        let t = chain(2);
        let plan = TreePlan {
            trees: vec![
                PlanTree {
                    tree: t.clone(),
                    rate_bytes_s: Some(3.0),
                },
                PlanTree {
                    tree: t,
                    rate_bytes_s: Some(1.0),
                },
            ],
        };
        assert_eq!(plan.piece_trees(8), vec![0, 0, 1, 0, 0, 0, 1, 0]);
        assert_eq!(plan.rate_bytes_s(), Some(4.0));
    }

    #[test]
    fn shaped_root_paces_each_edge() {
        let data = Bytes::from(vec![5u8; 400]);
        let s = setup(&data, 100, 2);
        let plan = Arc::new(TreePlan {
            trees: vec![PlanTree {
                tree: chain(2),
                rate_bytes_s: Some(1000.0), // 100 bytes per 0.1 s
            }],
        });
        let mut root =
            TreeMulticast::new(n(0), &s, Some(data), plan, TreeMulticastConfig::default()).unwrap();
        let mut out = Outputs::new();
        root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        assert_eq!(piece_sends(&out), vec![(n(1), 0)]);
        assert!(out.as_slice().contains(&Output::SetTimer {
            timer: PACE_TIMER,
            at: Time::from_millis(100)
        }));
        out.clear();
        // Early (stale) firing: nothing.
        root.handle(Time::from_millis(50), Input::Timer(PACE_TIMER), &mut out)
            .unwrap();
        assert!(piece_sends(&out).is_empty());
        let mut at = Time::from_millis(100);
        for i in 1..4 {
            out.clear();
            root.handle(at, Input::Timer(PACE_TIMER), &mut out).unwrap();
            assert_eq!(piece_sends(&out), vec![(n(1), i)]);
            if let Some(&Output::SetTimer { at: next, .. }) = out
                .as_slice()
                .iter()
                .find(|o| matches!(o, Output::SetTimer { .. }))
            {
                // 100 bytes at 1000 B/s: 0.1 s later, to the nanosecond (rounded up).
                let gap = next.as_nanos() - at.as_nanos();
                assert!((100_000_000..=100_000_001).contains(&gap), "{gap}");
                at = next;
            }
        }
        assert!(root.is_finished());
        assert_eq!(out.as_slice().last(), Some(&Output::Finished));
    }

    #[test]
    fn late_timers_keep_the_schedule() {
        let data = Bytes::from(vec![5u8; 400]);
        let s = setup(&data, 100, 2);
        let plan = Arc::new(TreePlan {
            trees: vec![PlanTree {
                tree: chain(2),
                rate_bytes_s: Some(1000.0),
            }],
        });
        let mut root =
            TreeMulticast::new(n(0), &s, Some(data), plan, TreeMulticastConfig::default()).unwrap();
        let mut out = Outputs::new();
        root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        // Every timer fires 30 ms late: each piece still leaves within 30 ms of 0.1 s · i,
        // as the schedule does not slip.
        for i in 1..4u64 {
            out.clear();
            let at = Time::from_millis(100 * i + 30);
            root.handle(at, Input::Timer(PACE_TIMER), &mut out).unwrap();
            assert_eq!(piece_sends(&out), vec![(n(1), i as u32)]);
            if i < 3 {
                let next = out.as_slice().iter().find_map(|o| match o {
                    Output::SetTimer { at, .. } => Some(at.as_nanos()),
                    _ => None,
                });
                let want = 100_000_000 * (i + 1);
                assert!(
                    next.is_some_and(|t| (want..=want + 1).contains(&t)),
                    "{next:?}"
                );
            }
        }
        assert!(root.is_finished());
        // Idle for long, an edge earns one piece of credit, not more.
        let data = Bytes::from(vec![5u8; 300]);
        let s = setup(&data, 100, 3);
        let plan = Arc::new(TreePlan {
            trees: vec![PlanTree {
                tree: chain(3),
                rate_bytes_s: Some(1000.0),
            }],
        });
        let mut mid =
            TreeMulticast::new(n(1), &s, None, plan, TreeMulticastConfig::default()).unwrap();
        mid.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        out.clear();
        for p in 0..3u32 {
            let message = Message::Pieces(PieceMsg::Piece(Piece {
                transfer: s.transfer,
                piece: p,
                payload: data.slice(100 * p as usize..100 * (p as usize + 1)),
            }));
            mid.handle(
                Time::from_secs_f64(10.0),
                Input::Message {
                    from: n(0),
                    message,
                },
                &mut out,
            )
            .unwrap();
        }
        assert_eq!(piece_sends(&out), vec![(n(2), 0), (n(2), 1)]);
    }

    #[test]
    fn setup_errors() {
        let data = Bytes::from(vec![1u8; 10]);
        let s = setup(&data, 4, 3);
        let ok = Arc::new(TreePlan::single(chain(3)));
        let cfg = TreeMulticastConfig::default();
        assert!(TreeMulticast::new(n(1), &s, None, ok.clone(), cfg).is_ok());
        let short = Arc::new(TreePlan::single(chain(2)));
        assert!(matches!(
            TreeMulticast::new(n(1), &s, None, short, cfg),
            Err(SetupError::Schedule(_))
        ));
        let other_root = Tree::from_edges(3, n(1), &[(n(0), n(1)), (n(2), n(1))]).unwrap();
        assert!(matches!(
            TreeMulticast::new(n(1), &s, None, Arc::new(TreePlan::single(other_root)), cfg),
            Err(SetupError::Schedule(_))
        ));
        assert!(TreeMulticast::new(n(1), &s, Some(data), ok.clone(), cfg).is_err());
        let bad_rate = Arc::new(TreePlan {
            trees: vec![PlanTree {
                tree: chain(3),
                rate_bytes_s: Some(0.0),
            }],
        });
        assert!(TreeMulticast::new(n(1), &s, None, bad_rate, cfg).is_err());
        let empty = Arc::new(TreePlan { trees: vec![] });
        assert!(TreeMulticast::new(n(1), &s, None, empty, cfg).is_err());
        let bad_idle = TreeMulticastConfig {
            idle_timeout_s: Some(-1.0),
            ..cfg
        };
        assert!(TreeMulticast::new(n(1), &s, None, ok, bad_idle).is_err());
    }

    #[test]
    fn magpie_plan_spans_the_layout() {
        let layout = ClusterLayout::new((0..10).map(|i| (n(i), ClusterId(i / 4)))).unwrap();
        let plan = TreePlan::magpie(&layout, n(5)).unwrap();
        assert_eq!(plan.trees.len(), 1);
        plan.validate(&layout, n(5)).unwrap();
        // The root sends to the other coordinators (0 and 8) first.
        assert_eq!(&plan.trees[0].tree.children(n(5))[..2], &[n(0), n(8)]);
        let sparse = ClusterLayout::new([(n(0), ClusterId(0)), (n(2), ClusterId(0))]).unwrap();
        assert!(TreePlan::magpie(&sparse, n(0)).is_err());
    }
}
