//! Keeping a GHS tree the exact minimum spanning tree while edge weights change: the local
//! update rules of seed 004 (Cheng-Cimet-Kumar style), one repair per *epoch*, as a sans-IO
//! machine ([`MstMaintainer`]) with its own messages ([`RepairMsg`]).
//!
//! # The rules (PAPER-NOTES, section 004)
//!
//! Weights are GHS's keys `(w, min id, max id)`, so the MST is unique. From the exact MST `T`
//! of the old weights, one edge `(a, b)` changes from key `old` to key `new`:
//! - a tree edge that gets worse (`new > old`): cut it; the minimum edge across the cut joins
//!   the two fragments (maybe `(a, b)` itself). Every other edge across the cut is heavier than
//!   `old` (the cut property of `T`), so only non-tree edges with keys in `(old, new)` are
//!   candidates, and only they are tested;
//! - a non-tree edge that gets better (`new < old`): the heaviest edge `m` on the tree path
//!   from `a` to `b` leaves and `(a, b)` enters if `m > new` (the cycle property);
//! - a tree edge that gets better, a non-tree edge that gets worse: the tree stays, only its
//!   total weight changes.
//!
//! # Epochs: one repair at a time, serialized by the root
//!
//! The rules assume the tree is the exact MST of the weights before the change, so repairs
//! never overlap: a change arriving during a repair is **queued**, not started as a concurrent
//! epoch (two concurrent cuts would each search across a cut the other one is changing, and
//! telling their tests apart would not make their results composable). The queue lives at the
//! tree's *root* (the smaller end of GHS's final core edge, or the tree's centre after the
//! [rows build](BuildAlgorithm::Rows); every node knows its parent, its in-branch): a change travels there as a `Request` along the parent pointers, and the root
//! runs the requests in arrival order, numbering the epochs 1, 2, ... (the build is
//! epoch 0). Every repair message carries its epoch; a message of a later epoch than the one a
//! node is in waits for it (like GHS's deferral of a `Test` from a higher level), one of an
//! epoch the node has finished is refused.
//!
//! **A backlog** ([`MstMaintainer::with_rebuild_after`], off by default): a root that finds
//! a backlog of `k` as an epoch could start (queued requests and the changes their owners
//! said wait behind them, or `k` epochs in a row for requests that waited out the one before)
//! asks for a rebuild instead, and
//! [`MaintainedMst`] starts a new generation whose build takes in every change fed so far
//! (each node builds with the last weight it fed): one rebuild instead of `k` epochs or more.
//!
//! **Who learns a new weight.** The driver of *one* endpoint feeds it
//! ([`MstMaintainer::change_weight`], the endpoint that measured it); the root's `Begin` for
//! that change carries it to both endpoints, which apply it when the epoch begins there, so
//! both ends of an edge switch keys within the same epoch (GHS needs both ends to agree bit
//! for bit). A node has at most one own change in flight to the root and coalesces the others
//! per edge (the latest weight wins), so the changes fed at one node are applied in the order
//! fed. Two endpoints feeding changes of one edge concurrently are applied in the root's order.
//!
//! # One epoch: three waves over the tree
//!
//! | message | wave |
//! |---------|------|
//! | `Begin(e, change, fragment)` | flooded from the root down the tree; each endpoint of the change applies the new weight; the child end of a tree edge that got worse names the cut-off subtree `S` (`fragment` = the cut's key bounds) for everything below it |
//! | `Test(e, F)` / `Accept(e)` / `Reject(e)` | GHS's test with the fragment identity of the epoch: each node of `S` tests its non-tree edges with keys in `(old, new)`, lightest first, until one is accepted (the other end is outside `S`) |
//! | `Echo(e, info)` | the convergecast back to the root: the lightest accepted edge below, the change as the endpoints saw it, and the path maxima from `a` and `b` up to here, resolved into the path's heaviest edge at their lowest common ancestor |
//! | `Stable(e, remove, add, nodes, total)` | the root's decision, flooded over the *new* tree: each node applies it to its own edges, takes the sender as its parent and knows the tree is stable again (the paper's `not_fail`/`not_fail_ack`/`gosleep_fail` idea: a wave out, an acknowledgement wave back, and a wave out that puts every node to sleep) |
//! | `Request(change, behind, waited)` | a change on its way to the root, with its owner's count of changes fed and not sent yet, and whether it waited out an epoch (the backlog rule's inputs) |
//!
//! A repair costs `3 (n - 1)` wave messages plus two per tested edge plus the request's hops,
//! against GHS's `5 n log2 n + 2 e` for a rebuild. No message of epoch `e` reaches a node
//! after its `Stable(e)`: a node echoes only once its tests are answered and its children have
//! echoed, and the root decides only after every echo.
//!
//! # On the wire
//!
//! [`MstFrame`] (frame family 9, fixed layouts but the rows build's `mst_row`; its module
//! documents the bytes) carries a [`MaintainedMst`]'s messages, GHS's included, tagged with
//! the generation, plus the live service's parent announcements. Repairs measured on the six-site platform through the
//! Hosts (crates/windrose-sim/tests/mst_live.rs): 3 (n - 1) = 69 wave frames per epoch for 24
//! nodes plus about two test frames, against 816 GHS frames, 552 Hellos and 552 parent
//! announcements for the build on the complete graph (the rows build: 552 rows alone).
//!
//! # Failures: [`MaintainedMst`]
//!
//! A failed node splits the tree into pieces that cannot all reach the root, so failures are
//! not repaired by these epochs: [`MaintainedMst`] wraps the whole life of a node (the
//! build, by GHS or by rows, then the maintainer) in *generations*, and a failure starts a
//! new one. A GHS-built tree at rest is **recovered locally** (the paper's `reiden`); in
//! every other case the generation **rebuilds** the tree among the survivors the same way
//! it was built, and the weight changes the rebuild did not see are fed again.
//!
//! **Why local recovery is exact.** With unique keys, every edge of the old MST `T` whose
//! ends both survive is an edge of `MST(G - F)` (`F` the failed nodes): removing a tree edge
//! `e` from `T` defines a cut of which `e` is the lightest crossing edge; in `G - F` the same
//! cut (less `F`) is crossed by a subset of those edges, `e` among them, so `e` is still the
//! lightest and stays (the cut property). So the pieces of `T - F` are *fragments* of the new
//! MST, and GHS's merges from them (each fragment joining over its lightest outgoing edge)
//! end at `MST(G - F)` exactly as they do from single nodes.
//!
//! **The recovery** (generation `g + 1`, messages [`RecoverMsg`], frame kinds `mst_join` ...
//! `mst_rghs`):
//!
//! | step | messages |
//! |------|----------|
//! | a survivor told of a failure (or reached by a message of `g + 1`) enters `g + 1` and sends `Join(epoch)` over each tree edge it still holds | `2` per surviving tree edge |
//! | once every tree neighbour joined or is known failed, the piece is known at the node; each node counts its subtree to its old parent if that parent joined, else it is the piece's **root** (the old root, or a node whose parent failed: one per piece) | `Count(nodes, weight, gone)`, one per piece edge |
//! | the root decides: if the piece holds every survivor (its nodes plus the most failed neighbours one of its nodes saw make the old tree's count) the tree is stable as it is | `Settled(nodes, total)` down the piece (the `gosleep` wave) |
//! | otherwise GHS goes on from the pieces: the root picks the edge to its child of least key as the piece's core, both ends start the search at level `floor(log2 nodes)` ([`Ghs::resume`], [`Ghs::initiate_as_core`]), single-node pieces wake as GHS's level-0 nodes | `Core(level)`, then GHS's own messages; its `Done` flood is the termination wave |
//!
//! Every node then holds the new tree, its parent, the node count and the total weight (from
//! `Settled` or `Done`, bit-identical everywhere), and the maintainer takes over as after a
//! build. A leaf's failure costs `3 (n - 2)` messages; an inner node's the waves plus GHS's
//! merges of its pieces, whose Tests stop at each node's first outgoing edge. Against the
//! rebuild of the same failure in the message-delay model (tests/ghs_repair.rs,
//! `local_recovery_against_rebuild_report`, data/mst/local-recovery.csv; the six sites and
//! random graphs of 32 to 256 nodes, test windows 1 and 16): 4-18 % of the rebuild's messages
//! for a leaf, 29-63 % for the node of the highest tree degree. In time, on the six sites
//! with the default window: 1.78 s for a leaf (the three waves cross the WAN) and 5.40 s for
//! S3's hub, against 6.40 s for the rebuild. Through the Hosts in the simulator
//! (crates/windrose-sim/tests/mst_live.rs, S5's hub failing at 37 s): 695 recovery frames
//! and 506 parent announcements, the tree whole everywhere at 41.8 s, against 506 Hellos,
//! 1,750 GHS frames and 506 announcements, whole at 44.1 s, for the rebuild.
//!
//! **When it rebuilds instead** (generation `g + 1`, or `g + 2` if the recovery had begun):
//! - the tree was not at rest: a repair epoch running at the node (its tree edges would mix two
//!   epochs' weights), a rows build (every node holds the whole tree; its rebuild is one
//!   message delay), or a build not finished;
//! - two ends of a tree edge disagree on the old tree (a `Join` over an edge the receiver does
//!   not hold as a tree edge, or of another epoch: a failure cut an epoch's `Stable` wave);
//! - a node that took part in the recovery fails during it (it joined, or sent any message of
//!   the generation), or a piece edge is lost: what it did cannot be taken back locally.
//!   A neighbour that never sent anything in the generation (it failed before, and this
//!   node's notice is late) just leaves: a Test waiting over its edge counts as rejected
//!   ([`Ghs::drop_silent_edge`]);
//! - two nodes entered the generation differently (one recovers, one rebuilds): both go on to
//!   a rebuild in the next generation, which every node follows.
//!
//! See [`MaintainedMst`]'s docs for the generations.

mod wire;

use crate::ghs::{EdgeKey, Ghs, GhsMsg};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use windrose_model::NodeId;
pub use wire::{encode_row, row_entries, MstFrame, MAX_MST_BODY_LEN, ROW_ENTRY_LEN};

/// A weight change of the edge `from`-`to`, measured at `from`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Change {
    /// The endpoint that measured it (its driver fed it).
    pub from: NodeId,
    /// The other endpoint.
    pub to: NodeId,
    /// The new weight (finite, >= 0).
    pub weight: f64,
}

/// The changed edge as its endpoints saw it when the epoch began.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ChangeSeen {
    /// The edge was in the tree.
    pub was_branch: bool,
    /// Its key before.
    pub old: EdgeKey,
    /// Its key now.
    pub new: EdgeKey,
}

/// What a subtree reports to the root in an [`RepairMsg::Echo`].
#[derive(Copy, Clone, Debug, PartialEq, Default)]
pub struct EchoInfo {
    /// The lightest edge leaving the cut-off fragment found in the subtree.
    pub best: Option<EdgeKey>,
    /// The change, if an endpoint is in the subtree.
    pub change: Option<ChangeSeen>,
    /// `Some(m)` if the change's `from` is in the subtree and the path to `to` does not close
    /// below: `m` is the heaviest tree edge from `from` up to the sender (None: no edge yet).
    pub from_path: Option<Option<EdgeKey>>,
    /// The same for `to`.
    pub to_path: Option<Option<EdgeKey>>,
    /// The heaviest tree edge on the path `from`..`to`, once both ends met below.
    pub path_max: Option<EdgeKey>,
}

/// A message of the repair protocol (see the [module docs](self)).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum RepairMsg {
    /// A change on its way to the root, with what the root's backlog rule reads
    /// ([`MstMaintainer::with_rebuild_after`]).
    Request {
        /// The change.
        change: Change,
        /// Own changes its owner had fed and not yet sent when it sent this one (a node has
        /// one request in flight at a time, so these come one by one after it).
        behind: u32,
        /// It waited out an epoch on its way: held at a node, or queued at the root, while
        /// an epoch ran there.
        waited: bool,
    },
    /// Epoch `epoch` repairs `change`; `fragment`: the receiver is in the cut-off subtree,
    /// whose candidates have keys strictly between the two bounds `(old, new)`.
    Begin {
        /// The epoch.
        epoch: u32,
        /// The change it applies.
        change: Change,
        /// `(old, new)` keys of the cut edge, for the cut-off subtree only.
        fragment: Option<(EdgeKey, EdgeKey)>,
    },
    /// Is this edge outgoing from the cut-off fragment (named by the cut edge's new key)?
    Test {
        /// The epoch.
        epoch: u32,
        /// The fragment's name.
        fragment: EdgeKey,
    },
    /// Yes: the receiver of the test is outside the fragment.
    Accept {
        /// The epoch.
        epoch: u32,
    },
    /// No: both ends are in the fragment.
    Reject {
        /// The epoch.
        epoch: u32,
    },
    /// The subtree's answer, to the parent.
    Echo {
        /// The epoch.
        epoch: u32,
        /// The answer.
        info: EchoInfo,
    },
    /// The repair is over: the tree without `remove`, with `add`.
    Stable {
        /// The epoch.
        epoch: u32,
        /// The tree edge that leaves (None: none).
        remove: Option<EdgeKey>,
        /// The edge that enters (None: none).
        add: Option<EdgeKey>,
        /// Nodes in the tree.
        nodes: u32,
        /// The tree's total weight, bit-identical everywhere.
        total_weight: f64,
    },
}

/// Kind names, in the order of [`RepairMsg::kind_index`].
pub const KIND_NAMES: [&str; 7] = [
    "request", "begin", "test", "accept", "reject", "echo", "stable",
];

impl RepairMsg {
    /// 0..7, the index in [`KIND_NAMES`].
    pub fn kind_index(&self) -> usize {
        match self {
            RepairMsg::Request { .. } => 0,
            RepairMsg::Begin { .. } => 1,
            RepairMsg::Test { .. } => 2,
            RepairMsg::Accept { .. } => 3,
            RepairMsg::Reject { .. } => 4,
            RepairMsg::Echo { .. } => 5,
            RepairMsg::Stable { .. } => 6,
        }
    }

    /// The kind's name.
    pub fn name(&self) -> &'static str {
        KIND_NAMES[self.kind_index()]
    }

    /// The epoch (None for a request, which belongs to none yet).
    pub fn epoch(&self) -> Option<u32> {
        match *self {
            RepairMsg::Request { .. } => None,
            RepairMsg::Begin { epoch, .. }
            | RepairMsg::Test { epoch, .. }
            | RepairMsg::Accept { epoch }
            | RepairMsg::Reject { epoch }
            | RepairMsg::Echo { epoch, .. }
            | RepairMsg::Stable { epoch, .. } => Some(epoch),
        }
    }
}

/// Why a maintainer cannot be built, or refuses an input or a message; on a refused message
/// the machine is unchanged and pushed nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RepairError {
    /// The GHS machine has not finished.
    #[error("node {node}: the GHS build is not complete")]
    NotBuilt {
        /// The node.
        node: NodeId,
    },
    /// A change of an edge this node does not have.
    #[error("node {node}: no edge to {neighbour}")]
    NoSuchEdge {
        /// The node.
        node: NodeId,
        /// The neighbour named.
        neighbour: NodeId,
    },
    /// A weight that is NaN, infinite or negative.
    #[error(
        "node {node}: the edge to {neighbour} cannot weigh {weight}, expected a finite number >= 0"
    )]
    BadWeight {
        /// The node.
        node: NodeId,
        /// The neighbour.
        neighbour: NodeId,
        /// The weight given.
        weight: f64,
    },
    /// A message this node never gets in its state.
    #[error("node {node}: unexpected repair {kind} message from node {from}: {why}")]
    Unexpected {
        /// The node.
        node: NodeId,
        /// The sender.
        from: NodeId,
        /// The message's kind name.
        kind: &'static str,
        /// Why.
        why: &'static str,
    },
}

#[derive(Clone, Debug)]
struct REdge {
    to: NodeId,
    key: EdgeKey,
    branch: bool,
}

/// This node's part of the epoch in progress.
#[derive(Clone, Debug)]
struct Epoch {
    number: u32,
    /// The Begin's sender (None at the root).
    parent: Option<usize>,
    /// Echoes still expected from children.
    waiting: usize,
    /// In the cut-off subtree: the fragment's name (the cut edge's new key).
    fragment: Option<EdgeKey>,
    /// Edges still to test, heaviest first (popped from the back).
    candidates: Vec<usize>,
    testing: Option<usize>,
    acc: EchoInfo,
    echoed: bool,
}

/// One node's maintenance machine; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct MstMaintainer {
    me: NodeId,
    /// By neighbour id.
    edges: Vec<REdge>,
    is_root: bool,
    parent: Option<usize>,
    stable_epoch: u32,
    nodes: u32,
    total_weight: f64,
    epoch: Option<Epoch>,
    /// Requests waiting for this node's `Stable` (its parent may change).
    held: VecDeque<Queued>,
    /// At the root: requests waiting for their epoch.
    queue: VecDeque<Queued>,
    /// Own changes not sent yet, at most one per neighbour.
    mine: VecDeque<(NodeId, f64)>,
    outstanding: bool,
    /// Tests of a later epoch.
    deferred: VecDeque<(usize, RepairMsg)>,
    sent: [u64; 7],
    requests: RequestStats,
    /// At the root: with this many requests queued when an epoch could start, ask for a
    /// rebuild instead ([`MstMaintainer::with_rebuild_after`]).
    rebuild_after: Option<usize>,
    /// At the root: a rebuild is asked for; no epoch starts any more.
    rebuild_wanted: bool,
    /// At the root: each owner's `behind` in its last request (changes fed there, not sent).
    behind: BTreeMap<NodeId, u32>,
    /// At the root: epochs begun in a row, each for a request that waited out the one before.
    streak: usize,
}

/// A request on its way, as a node holds it ([`RepairMsg::Request`]'s fields).
#[derive(Copy, Clone, Debug)]
struct Queued {
    change: Change,
    behind: u32,
    waited: bool,
}

/// Where a node's repair requests came from and went (counters since the maintainer took
/// over): what tells a storm of repairs from its cause.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestStats {
    /// Own changes fed ([`MstMaintainer::change_weight`]).
    pub fed: u64,
    /// Own changes that replaced a change of the same edge not sent yet (the latest wins).
    pub merged: u64,
    /// Own changes sent towards the root (or queued here, at the root).
    pub sent: u64,
    /// Requests received from neighbours (to relay, or to queue at the root).
    pub received: u64,
    /// At the root: requests queued for an epoch (own and received).
    pub queued: u64,
    /// At the root: epochs started.
    pub epochs: u64,
    /// At the root: rebuilds started for a backlog of requests
    /// ([`MstMaintainer::with_rebuild_after`]; counted by [`MaintainedMst`] over its
    /// generations).
    pub rebuilds: u64,
}

impl RequestStats {
    /// Field by field. The pattern names every field, so a counter added later without its
    /// sum here does not compile (a forgotten one would silently read 0 across generations).
    fn add(&mut self, o: RequestStats) {
        let RequestStats {
            fed,
            merged,
            sent,
            received,
            queued,
            epochs,
            rebuilds,
        } = o;
        self.fed += fed;
        self.merged += merged;
        self.sent += sent;
        self.received += received;
        self.queued += queued;
        self.epochs += epochs;
        self.rebuilds += rebuilds;
    }
}

/// `a > b` for path maxima where None is "no edge".
fn max_key(a: Option<EdgeKey>, b: Option<EdgeKey>) -> Option<EdgeKey> {
    a.max(b)
}

fn same_edge(a: EdgeKey, b: EdgeKey) -> bool {
    a.lo() == b.lo() && a.hi() == b.hi()
}

impl MstMaintainer {
    /// Takes over from a finished GHS machine: its edges, its tree edges, its in-branch as the
    /// parent; the root is the smaller end of the final core edge.
    pub fn from_ghs(ghs: &Ghs) -> Result<MstMaintainer, RepairError> {
        let me = ghs.node();
        let done = ghs.completion().ok_or(RepairError::NotBuilt { node: me })?;
        let branches = ghs.branch_edges();
        let mut edges: Vec<REdge> = ghs
            .incident()
            .into_iter()
            .map(|(to, w)| REdge {
                to,
                key: EdgeKey::new(me, to, w).expect("GHS checked its weights"),
                branch: branches.iter().any(|&(b, _)| b == to),
            })
            .collect();
        edges.sort_by_key(|e| e.to);
        let is_root = done.fragment.is_none_or(|core| core.lo() == me);
        let parent = if is_root {
            None
        } else {
            ghs.in_branch()
                .and_then(|p| edges.binary_search_by_key(&p, |e| e.to).ok())
        };
        Ok(MstMaintainer::settled(
            me,
            edges,
            is_root,
            parent,
            done.nodes,
            done.total_weight,
        ))
    }

    /// Takes over a tree this node computed itself (the [rows build](BuildAlgorithm::Rows)):
    /// its incident edges `(neighbour, weight)` (the weights the tree was computed with), the
    /// neighbours it is joined to in the tree, its parent towards the root (None: this node
    /// is the root), the tree's nodes and total weight (bit-identical at every node). This is
    /// all the repairs need from a build: GHS's fragment names and levels play no part in
    /// them (a repair names its own fragment by the cut edge's key).
    pub fn from_tree(
        me: NodeId,
        incident: impl IntoIterator<Item = (NodeId, f64)>,
        branches: &BTreeSet<NodeId>,
        parent: Option<NodeId>,
        nodes: u32,
        total_weight: f64,
    ) -> Result<MstMaintainer, RepairError> {
        let mut edges = Vec::new();
        for (to, w) in incident {
            let key = EdgeKey::new(me, to, w).ok_or(RepairError::BadWeight {
                node: me,
                neighbour: to,
                weight: w,
            })?;
            edges.push(REdge {
                to,
                key,
                branch: branches.contains(&to),
            });
        }
        edges.sort_by_key(|e| e.to);
        if edges.windows(2).any(|w| w[0].to == w[1].to) {
            return Err(RepairError::Unexpected {
                node: me,
                from: me,
                kind: "tree",
                why: "a neighbour named twice",
            });
        }
        let no_edge = |n: NodeId| RepairError::NoSuchEdge {
            node: me,
            neighbour: n,
        };
        if let Some(&b) = branches
            .iter()
            .find(|b| edges.binary_search_by_key(*b, |e| e.to).is_err())
        {
            return Err(no_edge(b));
        }
        let parent = match parent {
            Some(p) => Some(
                edges
                    .binary_search_by_key(&p, |e| e.to)
                    .ok()
                    .filter(|&j| edges[j].branch)
                    .ok_or_else(|| no_edge(p))?,
            ),
            None => None,
        };
        Ok(MstMaintainer::settled(
            me,
            edges,
            parent.is_none(),
            parent,
            nodes,
            total_weight,
        ))
    }

    /// A maintainer at rest on a built tree (whichever build made it): epoch 0 stable, nothing
    /// pending.
    fn settled(
        me: NodeId,
        edges: Vec<REdge>,
        is_root: bool,
        parent: Option<usize>,
        nodes: u32,
        total_weight: f64,
    ) -> MstMaintainer {
        MstMaintainer {
            me,
            edges,
            is_root,
            parent,
            stable_epoch: 0,
            nodes,
            total_weight,
            epoch: None,
            held: VecDeque::new(),
            queue: VecDeque::new(),
            mine: VecDeque::new(),
            outstanding: false,
            deferred: VecDeque::new(),
            sent: [0; 7],
            requests: RequestStats::default(),
            rebuild_after: None,
            rebuild_wanted: false,
            behind: BTreeMap::new(),
            streak: 0,
        }
    }

    /// The node.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// True if this node is the root (where changes queue).
    pub fn is_root(&self) -> bool {
        self.is_root
    }

    /// The parent in the current tree (None at the root).
    pub fn parent(&self) -> Option<NodeId> {
        self.parent.map(|j| self.edges[j].to)
    }

    /// True between epochs: the node knows its tree edges are the MST of the weights of every
    /// epoch up to [`stable_epoch`](Self::stable_epoch).
    pub fn is_stable(&self) -> bool {
        self.epoch.is_none()
    }

    /// The last epoch this node knows ended (0: the GHS build).
    pub fn stable_epoch(&self) -> u32 {
        self.stable_epoch
    }

    /// Nodes in the tree and its total weight, as of [`stable_epoch`](Self::stable_epoch).
    pub fn totals(&self) -> (u32, f64) {
        (self.nodes, self.total_weight)
    }

    /// Tree edges, `(neighbour, weight)`, by neighbour id.
    pub fn branch_edges(&self) -> Vec<(NodeId, f64)> {
        self.edges
            .iter()
            .filter(|e| e.branch)
            .map(|e| (e.to, e.key.weight()))
            .collect()
    }

    /// The weight of the edge to `neighbour` this node uses now.
    pub fn weight(&self, neighbour: NodeId) -> Option<f64> {
        self.index_of(neighbour).map(|j| self.edges[j].key.weight())
    }

    /// Own changes and relayed requests not yet on their way (0 when idle).
    pub fn pending_len(&self) -> usize {
        self.mine.len() + self.held.len() + self.queue.len() + usize::from(self.outstanding)
    }

    /// Messages waiting for a later epoch.
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    /// Messages sent, per kind ([`KIND_NAMES`] order).
    pub fn messages_sent(&self) -> [u64; 7] {
        self.sent
    }

    /// Requests fed, merged, sent, received, queued, and epochs started here.
    pub fn request_stats(&self) -> RequestStats {
        self.requests
    }

    /// The same maintainer asking for a rebuild, at the root, instead of starting the next
    /// epoch when it sees a backlog of `k` (None: never). Epochs run one at a time, each
    /// three waves over the tree, so a backlog of `q` changes costs `q` epochs where one
    /// rebuild takes every one of them in at once (on the emulated six sites an epoch took
    /// ~0.85 s and a rows rebuild ~2 message delays). As an epoch could start, the root
    /// rebuilds instead if
    /// - its queue plus the changes its owners said wait behind their last requests
    ///   ([`RepairMsg::Request`]'s `behind`) come to `k` or more, or
    /// - the epoch would be the `k`-th begun in a row for a request that waited out the epoch
    ///   before it (`waited`). Requests held inside an epoch reach the root one by one after
    ///   it, each finding the queue empty: without this a steady trickle ran as one epoch
    ///   each (7-13 on the testbed for one site link's step).
    ///
    /// The maintainer only asks ([`wants_rebuild`](Self::wants_rebuild)): the rebuild is a new generation of
    /// [`MaintainedMst`], which also takes in every change fed at its owner (the queued ones
    /// included), so nothing queued is lost. Only the root decides, and every other node
    /// follows the generation it starts, so the policy is the same everywhere by construction.
    pub fn with_rebuild_after(mut self, k: Option<usize>) -> MstMaintainer {
        self.rebuild_after = k.filter(|&k| k > 0);
        self
    }

    /// The root asks for a rebuild (see [`with_rebuild_after`](Self::with_rebuild_after)).
    pub fn wants_rebuild(&self) -> bool {
        self.rebuild_wanted
    }

    fn index_of(&self, id: NodeId) -> Option<usize> {
        self.edges.binary_search_by_key(&id, |e| e.to).ok()
    }

    fn send(&mut self, j: usize, msg: RepairMsg, out: &mut Vec<(NodeId, RepairMsg)>) {
        self.sent[msg.kind_index()] += 1;
        out.push((self.edges[j].to, msg));
    }

    /// The driver measured a new weight of the edge to `neighbour`: starts (or queues) its
    /// repair. Only this endpoint's driver feeds it (see the [module docs](self)).
    pub fn change_weight(
        &mut self,
        neighbour: NodeId,
        weight: f64,
        out: &mut Vec<(NodeId, RepairMsg)>,
    ) -> Result<(), RepairError> {
        if self.index_of(neighbour).is_none() {
            return Err(RepairError::NoSuchEdge {
                node: self.me,
                neighbour,
            });
        }
        if EdgeKey::new(self.me, neighbour, weight).is_none() {
            return Err(RepairError::BadWeight {
                node: self.me,
                neighbour,
                weight,
            });
        }
        self.requests.fed += 1;
        match self.mine.iter_mut().find(|(n, _)| *n == neighbour) {
            Some(slot) => {
                slot.1 = weight;
                self.requests.merged += 1;
            }
            None => self.mine.push_back((neighbour, weight)),
        }
        self.pump(out);
        Ok(())
    }

    /// Sends the next own change if none is in flight.
    fn pump(&mut self, out: &mut Vec<(NodeId, RepairMsg)>) {
        if self.outstanding {
            return;
        }
        if let Some((to, weight)) = self.mine.pop_front() {
            self.outstanding = true;
            self.requests.sent += 1;
            let request = Queued {
                change: Change {
                    from: self.me,
                    to,
                    weight,
                },
                behind: u32::try_from(self.mine.len()).unwrap_or(u32::MAX),
                waited: false,
            };
            self.route(request, out);
        }
    }

    /// Moves a request towards the root (or into the root's queue); one that has to wait
    /// for an epoch here is marked as having waited.
    fn route(&mut self, mut r: Queued, out: &mut Vec<(NodeId, RepairMsg)>) {
        if self.is_root {
            self.requests.queued += 1;
            r.waited |= self.epoch.is_some();
            self.behind.insert(r.change.from, r.behind);
            self.queue.push_back(r);
            self.try_start(out);
        } else if let (None, Some(p)) = (&self.epoch, self.parent) {
            let msg = RepairMsg::Request {
                change: r.change,
                behind: r.behind,
                waited: r.waited,
            };
            self.send(p, msg, out);
        } else {
            r.waited = true;
            self.held.push_back(r);
        }
    }

    fn try_start(&mut self, out: &mut Vec<(NodeId, RepairMsg)>) {
        if !self.is_root || self.epoch.is_some() || self.rebuild_wanted {
            return;
        }
        let Some(next) = self.queue.front() else {
            return;
        };
        let streak = if next.waited { self.streak + 1 } else { 0 };
        if let Some(k) = self.rebuild_after {
            let behind: usize = self.behind.values().map(|&b| b as usize).sum();
            if self.queue.len().saturating_add(behind) >= k || streak >= k {
                self.rebuild_wanted = true;
                self.requests.rebuilds += 1;
                return;
            }
        }
        if let Some(r) = self.queue.pop_front() {
            self.streak = streak;
            self.requests.epochs += 1;
            let number = self.stable_epoch + 1;
            self.begin(None, number, r.change, None, out);
        }
    }

    /// Handles a message from neighbour `from`. On error the machine is unchanged and nothing
    /// was pushed.
    pub fn handle(
        &mut self,
        from: NodeId,
        msg: RepairMsg,
        out: &mut Vec<(NodeId, RepairMsg)>,
    ) -> Result<(), RepairError> {
        let unexpected = |why| RepairError::Unexpected {
            node: self.me,
            from,
            kind: msg.name(),
            why,
        };
        let j = self
            .index_of(from)
            .ok_or_else(|| unexpected("not a neighbour"))?;
        self.check(j, &msg).map_err(unexpected)?;
        self.dispatch(j, msg, out);
        Ok(())
    }

    /// The epoch a node is in: the active one, else the last stable one.
    fn current(&self) -> u32 {
        self.epoch.as_ref().map_or(self.stable_epoch, |e| e.number)
    }

    fn check(&self, j: usize, msg: &RepairMsg) -> Result<(), &'static str> {
        let active = self.epoch.as_ref();
        match *msg {
            RepairMsg::Request { change: c, .. } => {
                if EdgeKey::new(c.from, c.to, c.weight).is_none() {
                    return Err("a change that is not an edge of a finite weight >= 0");
                }
            }
            RepairMsg::Begin { epoch, change, .. } => {
                if active.is_some() || epoch != self.stable_epoch + 1 {
                    return Err("begin of an epoch that does not follow the last stable one");
                }
                if !self.edges[j].branch || Some(j) != self.parent {
                    return Err("begin from a node that is not the parent");
                }
                if EdgeKey::new(change.from, change.to, change.weight).is_none() {
                    return Err("a change that is not an edge of a finite weight >= 0");
                }
                let other = match self.me {
                    m if m == change.from => Some(change.to),
                    m if m == change.to => Some(change.from),
                    _ => None,
                };
                if other.is_some_and(|o| self.index_of(o).is_none()) {
                    return Err("a change of an edge this node does not have");
                }
            }
            RepairMsg::Test { epoch, .. } => {
                // A node may have echoed and still be tested (its echo does not wait for
                // other nodes' tests), but not after its Stable.
                if epoch < self.current() || (epoch == self.current() && active.is_none()) {
                    return Err("test of a finished epoch");
                }
                // A test of a later epoch may cross the Stable that removes a tree edge.
                if epoch == self.current() && self.edges[j].branch {
                    return Err("test over a tree edge");
                }
            }
            RepairMsg::Accept { epoch } | RepairMsg::Reject { epoch } => {
                if active.is_none_or(|e| e.number != epoch || e.testing != Some(j)) {
                    return Err("no test of this epoch is waiting over this edge");
                }
            }
            RepairMsg::Echo { epoch, .. } => {
                let Some(e) = active else {
                    return Err("echo between epochs");
                };
                if e.number != epoch
                    || e.waiting == 0
                    || !self.edges[j].branch
                    || e.parent == Some(j)
                {
                    return Err("echo from a node that is not a waited-for child");
                }
            }
            RepairMsg::Stable { epoch, .. } => {
                if active.is_none_or(|e| e.number != epoch || !e.echoed) {
                    return Err("stable of an epoch this node has not echoed");
                }
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, j: usize, msg: RepairMsg, out: &mut Vec<(NodeId, RepairMsg)>) {
        match msg {
            RepairMsg::Request {
                change,
                behind,
                waited,
            } => {
                self.requests.received += 1;
                let r = Queued {
                    change,
                    behind,
                    waited,
                };
                self.route(r, out)
            }
            RepairMsg::Begin {
                epoch,
                change,
                fragment,
            } => {
                self.begin(Some(j), epoch, change, fragment, out);
                self.retry_deferred(out);
            }
            RepairMsg::Test { epoch, fragment } => {
                if epoch > self.current() {
                    self.deferred.push_back((j, msg));
                    return;
                }
                let mine = self.epoch.as_ref().and_then(|e| e.fragment);
                let answer = if mine == Some(fragment) {
                    RepairMsg::Reject { epoch }
                } else {
                    RepairMsg::Accept { epoch }
                };
                self.send(j, answer, out);
            }
            RepairMsg::Accept { .. } => {
                let key = self.edges[j].key;
                if let Some(e) = self.epoch.as_mut() {
                    e.testing = None;
                    e.candidates.clear();
                    e.acc.best = Some(e.acc.best.map_or(key, |b| b.min(key)));
                }
                self.advance(out);
            }
            RepairMsg::Reject { .. } => {
                if let Some(e) = self.epoch.as_mut() {
                    e.testing = None;
                }
                self.advance(out);
            }
            RepairMsg::Echo { info, .. } => {
                let k = self.edges[j].key;
                if let Some(e) = self.epoch.as_mut() {
                    e.waiting -= 1;
                    merge(&mut e.acc, info, k);
                }
                self.advance(out);
            }
            RepairMsg::Stable {
                epoch,
                remove,
                add,
                nodes,
                total_weight,
            } => self.stabilize(Some(j), epoch, remove, add, nodes, total_weight, out),
        }
    }

    fn retry_deferred(&mut self, out: &mut Vec<(NodeId, RepairMsg)>) {
        for _ in 0..self.deferred.len() {
            let Some((j, msg)) = self.deferred.pop_front() else {
                break;
            };
            self.dispatch(j, msg, out);
        }
    }

    fn begin(
        &mut self,
        parent: Option<usize>,
        number: u32,
        change: Change,
        fragment: Option<(EdgeKey, EdgeKey)>,
        out: &mut Vec<(NodeId, RepairMsg)>,
    ) {
        if change.from == self.me {
            self.outstanding = false;
        }
        let mut acc = EchoInfo::default();
        let mut bounds = fragment;
        let other = match self.me {
            m if m == change.from => Some(change.to),
            m if m == change.to => Some(change.from),
            _ => None,
        };
        if let Some(o) = other.and_then(|o| self.index_of(o)) {
            let old = self.edges[o].key;
            let new =
                EdgeKey::new(self.me, self.edges[o].to, change.weight).expect("checked on arrival");
            self.edges[o].key = new;
            let was_branch = self.edges[o].branch;
            acc.change = Some(ChangeSeen {
                was_branch,
                old,
                new,
            });
            // The child end of a tree edge that got worse heads the cut-off subtree.
            if was_branch && new > old && parent == Some(o) {
                bounds = Some((old, new));
            }
        }
        if self.me == change.from {
            acc.from_path = Some(None);
        }
        if self.me == change.to {
            acc.to_path = Some(None);
        }
        let mut candidates = Vec::new();
        if let Some((lo, hi)) = bounds {
            candidates = (0..self.edges.len())
                .filter(|&i| {
                    let e = &self.edges[i];
                    !e.branch && e.key > lo && e.key < hi
                })
                .collect();
            candidates.sort_by_key(|&i| std::cmp::Reverse(self.edges[i].key));
        }
        let children: Vec<usize> = (0..self.edges.len())
            .filter(|&i| self.edges[i].branch && Some(i) != parent)
            .collect();
        for &c in &children {
            self.send(
                c,
                RepairMsg::Begin {
                    epoch: number,
                    change,
                    fragment: bounds,
                },
                out,
            );
        }
        self.epoch = Some(Epoch {
            number,
            parent,
            waiting: children.len(),
            fragment: bounds.map(|b| b.1),
            candidates,
            testing: None,
            acc,
            echoed: false,
        });
        // Requests that arrived while stable were sent on; new ones wait for the Stable.
        self.advance(out);
    }

    /// Tests the next candidate, or echoes once everything below has answered.
    fn advance(&mut self, out: &mut Vec<(NodeId, RepairMsg)>) {
        let Some(e) = self.epoch.as_mut() else {
            return;
        };
        if e.testing.is_some() || e.echoed {
            return;
        }
        if let Some(t) = e.candidates.pop() {
            e.testing = Some(t);
            let msg = RepairMsg::Test {
                epoch: e.number,
                fragment: e.fragment.expect("only the cut-off subtree tests"),
            };
            self.send(t, msg, out);
            return;
        }
        if e.waiting > 0 {
            return;
        }
        e.echoed = true;
        let (number, info, parent) = (e.number, e.acc, e.parent);
        match parent {
            Some(p) => self.send(
                p,
                RepairMsg::Echo {
                    epoch: number,
                    info,
                },
                out,
            ),
            None => self.decide(number, info, out),
        }
    }

    /// The root, every echo in: applies the rules and floods the result.
    fn decide(&mut self, number: u32, info: EchoInfo, out: &mut Vec<(NodeId, RepairMsg)>) {
        let mut total = self.total_weight;
        let (mut remove, mut add) = (None, None);
        if let Some(seen) = info.change {
            let (old, new) = (seen.old, seen.new);
            if seen.was_branch {
                total = (total - old.weight()) + new.weight();
                if new > old {
                    if let Some(best) = info.best.filter(|&b| b < new) {
                        remove = Some(new);
                        add = Some(best);
                        total = (total - new.weight()) + best.weight();
                    }
                }
            } else if new < old {
                if let Some(m) = info.path_max.filter(|&m| m > new) {
                    remove = Some(m);
                    add = Some(new);
                    total = (total - m.weight()) + new.weight();
                }
            }
        }
        let nodes = self.nodes;
        self.stabilize(None, number, remove, add, nodes, total, out);
    }

    #[allow(clippy::too_many_arguments)]
    fn stabilize(
        &mut self,
        sender: Option<usize>,
        number: u32,
        remove: Option<EdgeKey>,
        add: Option<EdgeKey>,
        nodes: u32,
        total_weight: f64,
        out: &mut Vec<(NodeId, RepairMsg)>,
    ) {
        for e in &mut self.edges {
            if remove.is_some_and(|r| same_edge(r, e.key)) {
                e.branch = false;
            }
            if add.is_some_and(|a| same_edge(a, e.key)) {
                e.branch = true;
            }
        }
        self.epoch = None;
        self.stable_epoch = number;
        self.parent = sender;
        self.nodes = nodes;
        self.total_weight = total_weight;
        for i in 0..self.edges.len() {
            if self.edges[i].branch && Some(i) != sender {
                self.send(
                    i,
                    RepairMsg::Stable {
                        epoch: number,
                        remove,
                        add,
                        nodes,
                        total_weight,
                    },
                    out,
                );
            }
        }
        for r in std::mem::take(&mut self.held) {
            self.route(r, out);
        }
        self.pump(out);
        self.try_start(out);
    }
}

/// A message of [`MaintainedMst`]: its generation, then a GHS or repair message.
#[derive(Clone, Debug, PartialEq)]
pub enum MstNodeMsg {
    /// The rows build's Hello: the sender entered `generation` and holds these members alive,
    /// with its weight of the link to each ([`encode_row`]; every entry, not only the edges it
    /// owns, so the receiver also learns whom the sender counts alive).
    Row {
        /// The generation.
        generation: u32,
        /// The entries, as [`encode_row`] writes them.
        row: Bytes,
    },
    /// The sender entered `generation`; `weight` is its weight of this edge (the smaller end's
    /// weight is the edge's weight in the generation's build).
    Hello {
        /// The generation.
        generation: u32,
        /// The sender's current weight of the edge.
        weight: f64,
    },
    /// A message of the generation's GHS build.
    Ghs {
        /// The generation.
        generation: u32,
        /// The message.
        msg: GhsMsg,
    },
    /// A message of the generation's repairs.
    Repair {
        /// The generation.
        generation: u32,
        /// The message.
        msg: RepairMsg,
    },
    /// A message of the generation's local failure recovery (see [`MaintainedMst`]).
    Recover {
        /// The generation.
        generation: u32,
        /// The message.
        msg: RecoverMsg,
    },
}

/// A message of the local failure recovery ([`MaintainedMst`], "Failures: local recovery").
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum RecoverMsg {
    /// The sender entered the recovery over the old tree as of its stable `epoch` and still
    /// holds this edge as a tree edge (sent over every surviving tree edge, both ways).
    Join {
        /// The sender's last stable repair epoch.
        epoch: u32,
    },
    /// The piece of the old tree below the sender, to its parent: nodes, tree weight, and the
    /// most neighbours one node of it saw fail since the old tree was built.
    Count {
        /// Nodes in the sender's subtree (>= 1).
        nodes: u32,
        /// The subtree's tree weight.
        weight: f64,
        /// The most failed neighbours one node of the subtree knows.
        gone: u32,
    },
    /// The piece's root chose the edge to the receiver as the piece's core: both ends start
    /// GHS's search at `level`, the piece named by the edge ([`Ghs::initiate_as_core`]).
    Core {
        /// The piece's level (>= 1): `floor(log2 nodes)`.
        level: u8,
    },
    /// The piece spans every survivor: the tree is stable, with these totals.
    Settled {
        /// Nodes in the tree.
        nodes: u32,
        /// The tree's total weight, bit-identical everywhere.
        total_weight: f64,
    },
    /// A GHS message of the pieces' merges.
    Ghs(GhsMsg),
}

impl RecoverMsg {
    /// The kind's name, as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            RecoverMsg::Join { .. } => "join",
            RecoverMsg::Count { .. } => "count",
            RecoverMsg::Core { .. } => "core",
            RecoverMsg::Settled { .. } => "settled",
            RecoverMsg::Ghs(m) => m.name(),
        }
    }
}

impl MstNodeMsg {
    /// The generation.
    pub fn generation(&self) -> u32 {
        match *self {
            MstNodeMsg::Hello { generation, .. }
            | MstNodeMsg::Row { generation, .. }
            | MstNodeMsg::Ghs { generation, .. }
            | MstNodeMsg::Repair { generation, .. }
            | MstNodeMsg::Recover { generation, .. } => generation,
        }
    }
}

#[derive(Clone, Debug)]
enum Phase {
    /// Waiting for every surviving neighbour's Hello; messages of the generation wait too.
    Gathering {
        heard: BTreeMap<NodeId, f64>,
        buffer: Vec<(NodeId, MstNodeMsg)>,
        /// The rows build: each neighbour's last row.
        rows: BTreeMap<NodeId, Vec<(NodeId, f64)>>,
        /// The rows build: the row this node last sent.
        sent_row: Vec<(NodeId, f64)>,
    },
    /// GHS runs; repair messages of the generation wait for its end.
    Building {
        ghs: Box<Ghs>,
        buffer: Vec<(NodeId, RepairMsg)>,
    },
    /// The tree is built; weight changes are repaired.
    Maintaining(Box<MstMaintainer>),
    /// The local recovery after a failure: the pieces of the old tree re-identify themselves
    /// and GHS joins them.
    Recovering(Box<Recovery>),
}

/// One node's part of a local recovery (see [`MaintainedMst`]).
#[derive(Clone, Debug)]
struct Recovery {
    /// The old tree's edges here whose other end is not known failed.
    tree: BTreeSet<NodeId>,
    /// The parent in the old tree (None: its root).
    parent: Option<NodeId>,
    /// The old tree's last stable epoch here; both ends of a tree edge must agree.
    epoch: u32,
    /// Nodes in the old tree.
    old_nodes: u32,
    /// Tree neighbours whose `Join` came: this node's piece edges.
    joined: BTreeSet<NodeId>,
    /// Neighbours any message of this generation came from: their failure is no longer
    /// silent.
    heard: BTreeSet<NodeId>,
    /// Children's counts.
    counts: BTreeMap<NodeId, (u32, f64, u32)>,
    /// The piece is known here and this node counted (to its parent, or decided as root).
    counted: bool,
    /// The piece's parent (None: the piece's root), once counted.
    up: Option<NodeId>,
    /// The merges, once counted (None after a `Settled`-only ending).
    ghs: Option<Box<Ghs>>,
    /// Recovery messages that wait for the count.
    buffer: Vec<(NodeId, RecoverMsg)>,
    /// Repair messages of the generation that wait for its tree.
    repairs: Vec<(NodeId, RepairMsg)>,
}

/// One node's MST for its whole life: GHS builds it, [`MstMaintainer`] repairs it after
/// weight changes, and a node failure starts a new *generation* that rebuilds it among the
/// survivors.
///
/// # Failures: a new generation
///
/// [`peer_failed`](Self::peer_failed) (the driver's `Input::PeerFailed`) starts generation
/// `g + 1`, which recovers locally when the tree is at rest (GHS-built, no repair running
/// here; see the [module docs](crate::ghs_repair) for the protocol and when it
/// rebuilds instead) and otherwise rebuilds: the node drops the edge, abandons whatever runs
/// (a build or a repair) and sends `Hello(g + 1, its weight)` to every surviving neighbour; a
/// node entering a generation on a neighbour's message does the same. Once a node has every
/// surviving neighbour's Hello it builds the MST of its component with a fresh GHS, each edge
/// weighing what its smaller end said (both ends agree without a further exchange), and
/// wakes. Messages of an older generation are dropped (they were in flight when it ended);
/// messages of the current one that arrive early wait. A failure during a rebuild starts yet
/// another generation. A survivor graph that falls apart gives each component its own tree.
/// Weight changes fed during a rebuild or a recovery, or lost with an abandoned repair, are
/// fed again to the new tree's maintainer where the built weight differs from the last one
/// measured, so the last weight fed at a node always wins.
///
/// A rebuild costs a GHS build plus `2 e` Hellos; a local recovery `3 (n - 2)` messages for a
/// leaf, and GHS's merges of the pieces for an inner node.
#[derive(Clone, Debug)]
pub struct MaintainedMst {
    me: NodeId,
    /// Surviving incident edges and their weights as of the generation's start.
    weights: BTreeMap<NodeId, f64>,
    dead: BTreeSet<NodeId>,
    /// The last weight fed per edge measured here.
    measured: BTreeMap<NodeId, f64>,
    generation: u32,
    phase: Phase,
    started: bool,
    dropped: u64,
    /// Messages that waited for the build and were then refused (no correct run has any).
    faults: u64,
    /// GHS's test window for every build of this node (1: classic GHS).
    window: u32,
    /// How each generation's tree is built.
    build: BuildAlgorithm,
    /// The rows build: the whole tree of the current generation, `(node, parent)` by node.
    tree: Option<Vec<(NodeId, Option<NodeId>)>>,
    /// Every generation's maintainer asks for a rebuild past this backlog (see
    /// [`MstMaintainer::with_rebuild_after`]).
    rebuild_after: Option<usize>,
    /// The request counters of the generations before this one.
    past_requests: RequestStats,
    /// Failures are recovered locally when they can be (GHS builds only).
    local_recovery: bool,
    /// The current generation recovers locally (else it rebuilds).
    local: bool,
    /// Neighbours known to be nodes of the tree held (or last held): every neighbour after a
    /// build, the ones heard from during a local recovery. A node whose failure notice comes
    /// late may be a neighbour that was already gone before the tree was built.
    members: BTreeSet<NodeId>,
    /// Of those, how many failed since: a lower bound on the tree's nodes lost.
    lost: u32,
}

/// How a [`MaintainedMst`] builds each generation's tree.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum BuildAlgorithm {
    /// GHS ([`Ghs`]) on the node's incident edges, after one `Hello` per edge (`2 e` frames)
    /// that settles each edge's weight: the paper's build.
    #[default]
    Ghs,
    /// Every node sends its whole row (its weight of every link, [`MstNodeMsg::Row`]) to
    /// every neighbour instead of the Hello, and computes the MST of the rows itself once
    /// every neighbour's row is in: Kruskal in GHS's key order `(w, min id, max id)`, each
    /// edge weighing what its smaller end's row says, so every node computes the same tree,
    /// the one GHS would build. Only for a **complete** graph (every node a neighbour of
    /// every other), where GHS's own `2 e` frames are as many: `n (n - 1)` frames of
    /// `12 (n - 1)` payload bytes, one message delay (the slowest link) from the last start
    /// to the end, and every node holds the whole tree ([`MaintainedMst::built_tree`]). The
    /// root for the repairs is the tree's centre (the least eccentricity in weight, the
    /// smaller id on a tie), so their waves are as short as the tree allows.
    ///
    /// The nodes must agree on who is alive: a node builds only when every row it holds
    /// names exactly the members it holds alive. A member seen failing while the rows
    /// gather is dropped from this node's row, which is sent again (the first without it,
    /// the one change a row may have); so a node that still counts the failed member waits,
    /// and one that built with it (every row named it) starts the next generation when its
    /// own detector sees the failure. Two nodes never build different trees in one
    /// generation.
    Rows,
}

impl std::fmt::Display for BuildAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BuildAlgorithm::Ghs => "ghs",
            BuildAlgorithm::Rows => "rows",
        })
    }
}

impl std::str::FromStr for BuildAlgorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ghs" => Ok(BuildAlgorithm::Ghs),
            "rows" => Ok(BuildAlgorithm::Rows),
            _ => Err(format!("MST build {s:?}: expected rows or ghs")),
        }
    }
}

/// The MST of a complete graph given by rows, as every node of the
/// [rows build](BuildAlgorithm::Rows) computes it: `weight(lo, hi)` is the edge's weight (the
/// smaller end's), `nodes` sorted. Returns the tree edges in Kruskal's order (GHS's key
/// order), so summing them in that order gives the same bits everywhere.
pub fn kruskal_complete(
    nodes: &[NodeId],
    weight: impl Fn(NodeId, NodeId) -> f64,
) -> Result<Vec<EdgeKey>, String> {
    let mut keys = Vec::with_capacity(nodes.len() * nodes.len().saturating_sub(1) / 2);
    for (i, &a) in nodes.iter().enumerate() {
        for &b in &nodes[i + 1..] {
            let w = weight(a, b);
            keys.push(
                EdgeKey::new(a, b, w)
                    .ok_or_else(|| format!("the edge {a}-{b} cannot weigh {w}"))?,
            );
        }
    }
    keys.sort_unstable();
    let index = |n: NodeId| nodes.binary_search(&n).expect("an edge of the nodes");
    let mut up: Vec<usize> = (0..nodes.len()).collect();
    fn find(up: &mut [usize], mut x: usize) -> usize {
        while up[x] != x {
            up[x] = up[up[x]];
            x = up[x];
        }
        x
    }
    let mut tree = Vec::with_capacity(nodes.len().saturating_sub(1));
    for k in keys {
        let (a, b) = (find(&mut up, index(k.lo())), find(&mut up, index(k.hi())));
        if a != b {
            up[a] = b;
            tree.push(k);
            if tree.len() + 1 == nodes.len() {
                break;
            }
        }
    }
    Ok(tree)
}

/// The tree's centre: the node of least eccentricity (the heaviest path from it, by weight),
/// the smaller id on a tie; then every node's parent towards it. `nodes` sorted, `tree` a
/// spanning tree of them.
pub fn rooted_at_centre(
    nodes: &[NodeId],
    tree: &[EdgeKey],
) -> (NodeId, Vec<(NodeId, Option<NodeId>)>) {
    let index = |n: NodeId| nodes.binary_search(&n).expect("a tree node");
    let mut adj: Vec<Vec<(usize, f64)>> = vec![Vec::new(); nodes.len()];
    for k in tree {
        let (a, b) = (index(k.lo()), index(k.hi()));
        adj[a].push((b, k.weight()));
        adj[b].push((a, k.weight()));
    }
    // Each walk visits the tree from one node: (parent index, distance) per node.
    let walk = |from: usize| {
        let mut parent = vec![usize::MAX; nodes.len()];
        let mut dist = vec![0.0f64; nodes.len()];
        let mut stack = vec![from];
        parent[from] = from;
        while let Some(u) = stack.pop() {
            for &(v, w) in &adj[u] {
                if parent[v] == usize::MAX {
                    parent[v] = u;
                    dist[v] = dist[u] + w;
                    stack.push(v);
                }
            }
        }
        (parent, dist)
    };
    let mut best = (f64::INFINITY, 0);
    for i in 0..nodes.len() {
        let (_, dist) = walk(i);
        let ecc = dist.iter().copied().fold(0.0, f64::max);
        if ecc < best.0 {
            best = (ecc, i);
        }
    }
    let root = best.1;
    let (parent, _) = walk(root);
    let parents = nodes
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, (i != root).then(|| nodes[parent[i]])))
        .collect();
    (nodes[root], parents)
}

impl MaintainedMst {
    /// Node `me` with its incident edges `(neighbour, weight)`, in generation 0, asleep.
    pub fn new(
        me: NodeId,
        edges: impl IntoIterator<Item = (NodeId, f64)>,
    ) -> Result<MaintainedMst, crate::ghs::GhsSetupError> {
        let edges: Vec<(NodeId, f64)> = edges.into_iter().collect();
        let ghs = Ghs::new(me, edges.iter().copied())?;
        Ok(MaintainedMst {
            me,
            weights: edges.into_iter().collect(),
            dead: BTreeSet::new(),
            measured: BTreeMap::new(),
            generation: 0,
            phase: Phase::Building {
                ghs: Box::new(ghs),
                buffer: Vec::new(),
            },
            started: false,
            dropped: 0,
            faults: 0,
            window: 1,
            build: BuildAlgorithm::Ghs,
            tree: None,
            rebuild_after: None,
            past_requests: RequestStats::default(),
            local_recovery: true,
            local: false,
            members: BTreeSet::new(),
            lost: 0,
        })
    }

    /// The same node recovering from failures locally (`true`, the default) or by a rebuild
    /// in a new generation (`false`). Only the GHS build recovers locally: a rows build
    /// always rebuilds. Every node of a group must be set alike (a node that rebuilds meets
    /// one that recovers and both rebuild, which is correct but costs both).
    pub fn with_local_recovery(mut self, on: bool) -> MaintainedMst {
        self.local_recovery = on;
        self
    }

    /// True if this generation's tree came (or is coming) from a local recovery.
    pub fn recovered_locally(&self) -> bool {
        self.local
    }

    /// The same node building (and rebuilding) with GHS's test window `window`
    /// ([`Ghs::with_test_window`]; 1, what [`new`](Self::new) gives, is classic GHS). Only
    /// before the start.
    pub fn with_test_window(
        mut self,
        window: u32,
    ) -> Result<MaintainedMst, crate::ghs::GhsSetupError> {
        if let Phase::Building { ghs, .. } = &mut self.phase {
            **ghs = ghs.as_ref().clone().with_test_window(window)?;
        } else if window == 0 {
            return Err(crate::ghs::GhsSetupError::ZeroTestWindow { node: self.me });
        }
        self.window = window;
        Ok(self)
    }

    /// The same node building every generation's tree with `build` (only before the start;
    /// [`BuildAlgorithm::Rows`] only for a [`gathering`](Self::gathering) node on a complete
    /// graph).
    pub fn with_build(mut self, build: BuildAlgorithm) -> MaintainedMst {
        self.build = build;
        self
    }

    /// How this node builds.
    pub fn build(&self) -> BuildAlgorithm {
        self.build
    }

    /// The same node rebuilding (a new generation, built as [`build`](Self::build) says)
    /// when `k` repair requests or more wait at the root for their epochs (None: repairs only;
    /// see [`MstMaintainer::with_rebuild_after`]). Only the root's `k` counts; the other
    /// nodes follow the generation it starts.
    pub fn with_rebuild_after(mut self, k: Option<usize>) -> MaintainedMst {
        self.rebuild_after = k.filter(|&k| k > 0);
        self
    }

    /// This node's repair requests over every generation (fed, merged, sent, received, and at
    /// the root queued, epochs and rebuilds).
    pub fn request_stats(&self) -> RequestStats {
        let mut s = self.past_requests;
        if let Some(m) = self.maintainer() {
            s.add(m.request_stats());
        }
        s
    }

    /// A rebuild the root's maintainer asked for: the next generation.
    fn rebuild_if_wanted(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        if self.maintainer().is_some_and(|m| m.wants_rebuild()) {
            self.enter(self.generation + 1, out);
        }
    }

    /// The rows build's whole tree of the current generation once it is built, `(node,
    /// parent)` for every node of it by id (None: the root); None with GHS, which leaves each
    /// node only its own edges.
    pub fn built_tree(&self) -> Option<&[(NodeId, Option<NodeId>)]> {
        match self.phase {
            Phase::Maintaining(_) => self.tree.as_deref(),
            _ => None,
        }
    }

    /// Node `me` with its incident edges `(neighbour, weight)`, in generation 0, asleep, whose
    /// first build starts like a rebuild: [`start`](Self::start) sends `Hello(0, weight)` to
    /// every neighbour and GHS runs once every neighbour's Hello is in, each edge weighing what
    /// its smaller end measured. For nodes whose weights are their own measurements (the
    /// Host's [live MST](crate::mst_service)), which the two ends of a link need not agree on;
    /// it costs `2 e` Hellos more than [`new`](Self::new). A Hello that arrives before the start
    /// waits for it.
    pub fn gathering(
        me: NodeId,
        edges: impl IntoIterator<Item = (NodeId, f64)>,
    ) -> Result<MaintainedMst, crate::ghs::GhsSetupError> {
        let mut m = MaintainedMst::new(me, edges)?;
        m.phase = Phase::Gathering {
            heard: BTreeMap::new(),
            buffer: Vec::new(),
            rows: BTreeMap::new(),
            sent_row: Vec::new(),
        };
        Ok(m)
    }

    /// The node.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// The current generation (0 until the first failure).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The maintainer once the generation's tree is built.
    pub fn maintainer(&self) -> Option<&MstMaintainer> {
        match &self.phase {
            Phase::Maintaining(m) => Some(m),
            _ => None,
        }
    }

    /// True when the tree is built and no repair runs at this node.
    pub fn is_stable(&self) -> bool {
        self.maintainer().is_some_and(|m| m.is_stable())
    }

    /// Messages of ended generations dropped here.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Messages that waited for this node's build and were refused when it was done (a
    /// protocol fault: zero in every correct run).
    pub fn faults(&self) -> u64 {
        self.faults
    }

    /// The neighbours this node knows have failed.
    pub fn failed(&self) -> &BTreeSet<NodeId> {
        &self.dead
    }

    /// Spontaneous wakeup of the first build.
    pub fn start(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        if self.started {
            return;
        }
        if matches!(self.phase, Phase::Gathering { .. }) {
            self.enter(self.generation, out);
            return;
        }
        self.started = true;
        if let Phase::Building { ghs, .. } = &mut self.phase {
            let mut o = Vec::new();
            ghs.start(&mut o);
            self.wrap_ghs(o, out);
        }
        self.after_ghs(out);
    }

    fn wrap_ghs(&self, o: Vec<(NodeId, GhsMsg)>, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let generation = self.generation;
        out.extend(
            o.into_iter()
                .map(|(to, msg)| (to, MstNodeMsg::Ghs { generation, msg })),
        );
    }

    fn wrap_repair(&self, o: Vec<(NodeId, RepairMsg)>, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let generation = self.generation;
        out.extend(
            o.into_iter()
                .map(|(to, msg)| (to, MstNodeMsg::Repair { generation, msg })),
        );
    }

    /// The driver measured a new weight of the edge to `neighbour` (one endpoint feeds it).
    pub fn change_weight(
        &mut self,
        neighbour: NodeId,
        weight: f64,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) -> Result<(), RepairError> {
        if !self.weights.contains_key(&neighbour) {
            return Err(RepairError::NoSuchEdge {
                node: self.me,
                neighbour,
            });
        }
        if EdgeKey::new(self.me, neighbour, weight).is_none() {
            return Err(RepairError::BadWeight {
                node: self.me,
                neighbour,
                weight,
            });
        }
        self.measured.insert(neighbour, weight);
        if let Phase::Maintaining(m) = &mut self.phase {
            let mut o = Vec::new();
            m.change_weight(neighbour, weight, &mut o)?;
            self.wrap_repair(o, out);
        }
        self.rebuild_if_wanted(out);
        Ok(())
    }

    /// The driver's `Input::PeerFailed`: a neighbour is gone; a new generation rebuilds.
    pub fn peer_failed(&mut self, peer: NodeId, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        if !self.weights.contains_key(&peer) {
            return;
        }
        self.refresh_weights();
        self.weights.remove(&peer);
        self.measured.remove(&peer);
        self.dead.insert(peer);
        if self.members.remove(&peer) {
            self.lost = self.lost.saturating_add(1);
        }
        if let Phase::Recovering(r) = &mut self.phase {
            if r.joined.contains(&peer) || r.heard.contains(&peer) {
                // It took part in this recovery: what it did cannot be taken back locally.
                self.enter(self.generation + 1, out);
                return;
            }
            // A silent failure (before this generation, or a node that never reached it):
            // its edge simply leaves the recovery.
            r.tree.remove(&peer);
            let mut o = Vec::new();
            let dropped = r
                .ghs
                .as_mut()
                .map_or(Ok(()), |g| g.drop_silent_edge(peer, &mut o));
            if dropped.is_err() {
                self.enter(self.generation + 1, out);
                return;
            }
            self.wrap_recover(o, out);
            self.progress(out);
            self.finish_ghs(out);
            return;
        }
        if self.can_recover_locally() {
            self.enter_local(self.generation + 1, out);
            return;
        }
        if let Phase::Gathering {
            heard,
            rows,
            sent_row,
            ..
        } = &mut self.phase
        {
            // Nothing is built yet in this generation: no edge to the peer is in use anywhere
            // but here, so the generation goes on without it.
            heard.remove(&peer);
            rows.remove(&peer);
            if self.started && sent_row.iter().any(|&(n, _)| n == peer) {
                // The rows build: the row sent names the peer; the others learn it is gone
                // here (see `BuildAlgorithm::Rows`).
                sent_row.retain(|&(n, _)| n != peer);
                let row = encode_row(sent_row);
                let generation = self.generation;
                for &n in self.weights.keys() {
                    out.push((
                        n,
                        MstNodeMsg::Row {
                            generation,
                            row: row.clone(),
                        },
                    ));
                }
            }
            self.try_build(out);
            return;
        }
        self.enter(self.generation + 1, out);
    }

    /// Takes the weights the maintainer has applied (they change with repairs).
    fn refresh_weights(&mut self) {
        if let Phase::Maintaining(m) = &self.phase {
            for (n, w) in self.weights.iter_mut() {
                if let Some(x) = m.weight(*n) {
                    *w = x;
                }
            }
        }
    }

    fn enter(&mut self, generation: u32, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        self.refresh_weights();
        if let Phase::Maintaining(m) = &self.phase {
            self.past_requests.add(m.request_stats());
        }
        // The build starts from the last weight fed here, not the one applied: a change still
        // queued at the root (or lost with an abandoned repair) is built in, not repaired
        // again after the build (the smaller end's weight still wins either way).
        for (n, w) in self.weights.iter_mut() {
            if let Some(&x) = self.measured.get(n) {
                *w = x;
            }
        }
        let first = generation == self.generation && !self.started;
        self.generation = generation;
        self.started = true;
        self.local = false;
        if !(first && matches!(self.phase, Phase::Gathering { .. })) {
            // Hellos heard before a `gathering` node's start are kept.
            self.phase = Phase::Gathering {
                heard: BTreeMap::new(),
                buffer: Vec::new(),
                rows: BTreeMap::new(),
                sent_row: Vec::new(),
            };
        }
        self.tree = None;
        match self.build {
            BuildAlgorithm::Ghs => {
                for (&n, &weight) in &self.weights {
                    out.push((n, MstNodeMsg::Hello { generation, weight }));
                }
            }
            BuildAlgorithm::Rows => {
                let entries: Vec<(NodeId, f64)> =
                    self.weights.iter().map(|(&n, &w)| (n, w)).collect();
                let row = encode_row(&entries);
                if let Phase::Gathering { sent_row, .. } = &mut self.phase {
                    *sent_row = entries;
                }
                for &n in self.weights.keys() {
                    out.push((
                        n,
                        MstNodeMsg::Row {
                            generation,
                            row: row.clone(),
                        },
                    ));
                }
            }
        }
        self.try_build(out);
    }

    fn try_build(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        if self.build == BuildAlgorithm::Rows {
            self.try_build_rows(out);
            return;
        }
        let Phase::Gathering { heard, buffer, .. } = &mut self.phase else {
            return;
        };
        if !self.started || self.weights.keys().any(|n| !heard.contains_key(n)) {
            return;
        }
        for (n, w) in self.weights.iter_mut() {
            if *n < self.me {
                *w = heard[n];
            }
        }
        let buffer = std::mem::take(buffer);
        let mut ghs = Ghs::new(self.me, self.weights.iter().map(|(&n, &w)| (n, w)))
            .and_then(|g| g.with_test_window(self.window))
            .expect("weights and window were checked when they arrived");
        let mut o = Vec::new();
        ghs.start(&mut o);
        self.phase = Phase::Building {
            ghs: Box::new(ghs),
            buffer: Vec::new(),
        };
        self.wrap_ghs(o, out);
        self.after_ghs(out);
        for (from, msg) in buffer {
            if self.handle(from, msg, out).is_err() {
                self.faults += 1;
            }
        }
    }

    /// The rows build: once every neighbour's row is in and every row names exactly the
    /// members this node holds alive, the MST of the rows, the maintainer over it.
    fn try_build_rows(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let Phase::Gathering { rows, buffer, .. } = &mut self.phase else {
            return;
        };
        if !self.started || self.weights.keys().any(|n| !rows.contains_key(n)) {
            return;
        }
        let mut nodes: Vec<NodeId> = self.weights.keys().copied().collect();
        nodes.push(self.me);
        nodes.sort_unstable();
        // A row that still names a member this node knows failed is waited out: its sender
        // sends it again without the member once its own detector sees the failure (or, if
        // it built with the member, starts the next generation then).
        let agree = rows.iter().all(|(&from, row)| {
            row.iter()
                .map(|&(n, _)| n)
                .eq(nodes.iter().copied().filter(|&n| n != from))
        });
        if !agree {
            return; // a failure not seen everywhere yet
        }
        // Each edge weighs what its smaller end's row says.
        let rows = std::mem::take(rows);
        let row_of = |a: NodeId, b: NodeId| -> f64 {
            if a == self.me {
                self.weights[&b]
            } else {
                let r = &rows[&a];
                r[r.binary_search_by_key(&b, |e| e.0).expect("rows agree")].1
            }
        };
        let tree = kruskal_complete(&nodes, row_of).expect("weights checked when they arrived");
        for (n, w) in self.weights.iter_mut() {
            if *n < self.me {
                let r = &rows[n];
                *w = r[r
                    .binary_search_by_key(&self.me, |e| e.0)
                    .expect("rows agree")]
                .1;
            }
        }
        let total = tree.iter().fold(0.0, |t, k| t + k.weight());
        let (_, parents) = rooted_at_centre(&nodes, &tree);
        let branches: BTreeSet<NodeId> = tree
            .iter()
            .filter_map(|k| {
                if k.lo() == self.me {
                    Some(k.hi())
                } else if k.hi() == self.me {
                    Some(k.lo())
                } else {
                    None
                }
            })
            .collect();
        let parent = parents
            .iter()
            .find(|(n, _)| *n == self.me)
            .and_then(|&(_, p)| p);
        let m = MstMaintainer::from_tree(
            self.me,
            self.weights.iter().map(|(&n, &w)| (n, w)),
            &branches,
            parent,
            nodes.len() as u32,
            total,
        )
        .expect("a spanning tree of this node's edges");
        let buffer = std::mem::take(buffer);
        self.tree = Some(parents);
        self.take_over(m, Vec::new(), out);
        for (from, msg) in buffer {
            if self.handle(from, msg, out).is_err() {
                self.faults += 1;
            }
        }
    }

    /// Once GHS is done: the maintainer takes over, waiting repair messages go to it and the
    /// changes measured here that the build does not have are fed again.
    fn after_ghs(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let Phase::Building { ghs, buffer } = &mut self.phase else {
            return;
        };
        if !ghs.is_done() {
            return;
        }
        let m = MstMaintainer::from_ghs(ghs).expect("GHS is done");
        let buffer = std::mem::take(buffer);
        self.take_over(m, buffer, out);
    }

    /// The maintainer takes over the generation's tree: the repair messages that waited for
    /// it go to it, and the changes measured here that the build does not have are fed again.
    fn take_over(
        &mut self,
        m: MstMaintainer,
        buffer: Vec<(NodeId, RepairMsg)>,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) {
        let m = m.with_rebuild_after(self.rebuild_after);
        // After a local recovery only the neighbours heard from in it are known members of
        // the tree; after a build, every neighbour sent its Hello (or was given, at the start).
        self.members = match &self.phase {
            Phase::Recovering(r) => r.heard.clone(),
            _ => self.weights.keys().copied().collect(),
        };
        self.phase = Phase::Maintaining(Box::new(m));
        self.lost = 0;
        for (from, msg) in buffer {
            let msg = MstNodeMsg::Repair {
                generation: self.generation,
                msg,
            };
            if self.handle(from, msg, out).is_err() {
                self.faults += 1;
            }
        }
        let again: Vec<(NodeId, f64)> = self
            .measured
            .iter()
            .filter(|&(n, &w)| {
                self.weights
                    .get(n)
                    .is_some_and(|&x| x.to_bits() != w.to_bits())
            })
            .map(|(&n, &w)| (n, w))
            .collect();
        if let Phase::Maintaining(m) = &mut self.phase {
            let mut o = Vec::new();
            for (n, w) in again {
                m.change_weight(n, w, &mut o).expect("a surviving edge");
            }
            self.wrap_repair(o, out);
        }
        self.rebuild_if_wanted(out);
    }

    /// Handles a message from neighbour `from`.
    pub fn handle(
        &mut self,
        from: NodeId,
        msg: MstNodeMsg,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) -> Result<(), RepairError> {
        let g = msg.generation();
        if self.dead.contains(&from) || g < self.generation {
            self.dropped += 1;
            return Ok(());
        }
        if !self.weights.contains_key(&from) {
            return Err(RepairError::Unexpected {
                node: self.me,
                from,
                kind: "generation",
                why: "not a neighbour",
            });
        }
        let local_msg = matches!(msg, MstNodeMsg::Recover { .. });
        if g > self.generation {
            if !local_msg {
                self.enter(g, out);
            } else if self.can_recover_locally() {
                self.enter_local(g, out);
            } else {
                // This node cannot recover locally (its tree is not at rest): a rebuild,
                // which the sender will follow.
                self.enter(g + 1, out);
                self.dropped += 1;
                return Ok(());
            }
        } else if local_msg != self.local && !matches!(msg, MstNodeMsg::Repair { .. }) {
            // Two nodes entered this generation differently (one recovers, one rebuilds): a
            // rebuild in the next generation settles it.
            self.enter(g + 1, out);
            self.dropped += 1;
            return Ok(());
        }
        let rows_build = self.build == BuildAlgorithm::Rows;
        if rows_build == matches!(msg, MstNodeMsg::Hello { .. })
            && matches!(msg, MstNodeMsg::Hello { .. } | MstNodeMsg::Row { .. })
        {
            return Err(RepairError::Unexpected {
                node: self.me,
                from,
                kind: if rows_build { "hello" } else { "row" },
                why: "the members do not build the same way (rows and GHS mixed)",
            });
        }
        match (&mut self.phase, msg) {
            (Phase::Gathering { rows, .. }, MstNodeMsg::Row { row, .. }) => {
                let entries: Vec<(NodeId, f64)> = row_entries(&row).collect();
                let me = self.me;
                let known =
                    |n: NodeId| n == me || self.weights.contains_key(&n) || self.dead.contains(&n);
                let why = if entries.iter().any(|&(n, _)| n == from) {
                    Some("a row naming its sender")
                } else if entries.iter().any(|&(n, _)| !known(n)) {
                    Some("a row naming a node that is not a neighbour (the rows build needs a complete graph)")
                } else if rows.get(&from).is_some_and(|old| {
                    // A second row may only drop members.
                    entries.len() >= old.len()
                        || entries.iter().any(|e| {
                            old.binary_search_by_key(&e.0, |o| o.0)
                                .map_or(true, |j| old[j].1.to_bits() != e.1.to_bits())
                        })
                }) {
                    Some("a second row that is not the first one less failed members")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(RepairError::Unexpected {
                        node: self.me,
                        from,
                        kind: "row",
                        why,
                    });
                }
                rows.insert(from, entries);
                self.try_build(out);
            }
            // A row sent again after this node built: the sender saw a failure this node's
            // detector will see too (and start the next generation then).
            (_, MstNodeMsg::Row { .. }) => {}
            (Phase::Gathering { heard, .. }, MstNodeMsg::Hello { weight, .. }) => {
                if EdgeKey::new(self.me, from, weight).is_none() || heard.contains_key(&from) {
                    return Err(RepairError::Unexpected {
                        node: self.me,
                        from,
                        kind: "hello",
                        why: "a second hello or a bad weight",
                    });
                }
                heard.insert(from, weight);
                self.try_build(out);
            }
            (Phase::Gathering { buffer, .. }, msg) => buffer.push((from, msg)),
            (Phase::Building { buffer, .. }, MstNodeMsg::Repair { msg, .. }) => {
                buffer.push((from, msg))
            }
            (Phase::Building { ghs, .. }, MstNodeMsg::Ghs { msg, .. }) => {
                let mut o = Vec::new();
                ghs.handle(from, msg, &mut o)
                    .map_err(|_| RepairError::Unexpected {
                        node: self.me,
                        from,
                        kind: msg.name(),
                        why: "refused by GHS",
                    })?;
                self.wrap_ghs(o, out);
                self.after_ghs(out);
            }
            (Phase::Recovering(r), MstNodeMsg::Repair { msg, .. }) => r.repairs.push((from, msg)),
            (Phase::Recovering(_), MstNodeMsg::Recover { msg, .. }) => {
                self.on_recover(from, msg, out)?
            }
            (Phase::Maintaining(m), MstNodeMsg::Repair { msg, .. }) => {
                let mut o = Vec::new();
                m.handle(from, msg, &mut o)?;
                self.wrap_repair(o, out);
                self.rebuild_if_wanted(out);
            }
            (_, msg) => {
                return Err(RepairError::Unexpected {
                    node: self.me,
                    from,
                    kind: match msg {
                        MstNodeMsg::Hello { .. } => "hello",
                        MstNodeMsg::Row { .. } => "row",
                        MstNodeMsg::Ghs { .. } => "ghs",
                        MstNodeMsg::Repair { .. } => "repair",
                        MstNodeMsg::Recover { msg, .. } => msg.name(),
                    },
                    why: "not expected in this phase of the generation",
                })
            }
        }
        Ok(())
    }
}

/// The local failure recovery (see [`MaintainedMst`], "Failures: local recovery").
impl MaintainedMst {
    /// A GHS-built node whose tree is at rest (no repair epoch running here) can recover
    /// locally: its tree edges are the exact MST of the weights both ends hold.
    fn can_recover_locally(&self) -> bool {
        self.local_recovery
            && self.build == BuildAlgorithm::Ghs
            && matches!(&self.phase, Phase::Maintaining(m) if m.is_stable() && !m.wants_rebuild())
    }

    fn wrap_recover(&self, o: Vec<(NodeId, GhsMsg)>, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let generation = self.generation;
        out.extend(o.into_iter().map(|(to, msg)| {
            (
                to,
                MstNodeMsg::Recover {
                    generation,
                    msg: RecoverMsg::Ghs(msg),
                },
            )
        }));
    }

    fn send_recover(&self, to: NodeId, msg: RecoverMsg, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        out.push((
            to,
            MstNodeMsg::Recover {
                generation: self.generation,
                msg,
            },
        ));
    }

    /// Enters `generation` as a local recovery: `Join` over every surviving tree edge.
    fn enter_local(&mut self, generation: u32, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        self.refresh_weights();
        let Phase::Maintaining(m) = &self.phase else {
            return;
        };
        self.past_requests.add(m.request_stats());
        let tree: BTreeSet<NodeId> = m
            .branch_edges()
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| self.weights.contains_key(n))
            .collect();
        let r = Recovery {
            parent: m.parent(),
            epoch: m.stable_epoch(),
            old_nodes: m.totals().0,
            tree,
            joined: BTreeSet::new(),
            heard: BTreeSet::new(),
            counts: BTreeMap::new(),
            counted: false,
            up: None,
            ghs: None,
            buffer: Vec::new(),
            repairs: Vec::new(),
        };
        self.generation = generation;
        self.local = true;
        self.tree = None;
        let epoch = r.epoch;
        for &n in &r.tree {
            self.send_recover(n, RecoverMsg::Join { epoch }, out);
        }
        self.phase = Phase::Recovering(Box::new(r));
        self.progress(out);
    }

    /// Once every surviving tree neighbour joined and every piece child counted: counts to
    /// the piece's parent, or, at the piece's root, decides.
    fn progress(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let Phase::Recovering(r) = &mut self.phase else {
            return;
        };
        if r.counted || r.tree.iter().any(|n| !r.joined.contains(n)) {
            return;
        }
        let up = r.parent.filter(|p| r.joined.contains(p));
        let children: Vec<NodeId> = r
            .joined
            .iter()
            .copied()
            .filter(|&c| Some(c) != up)
            .collect();
        if children.iter().any(|c| !r.counts.contains_key(c)) {
            return;
        }
        let (mut nodes, mut weight, mut gone) = (1u32, 0.0f64, self.lost);
        for c in &children {
            let (n, w, g) = r.counts[c];
            nodes = nodes.saturating_add(n);
            weight += w + self.weights[c];
            gone = gone.max(g);
        }
        r.counted = true;
        r.up = up;
        let edges = self.weights.iter().map(|(&n, &w)| (n, w));
        let ghs = if r.joined.is_empty() {
            Ghs::new(self.me, edges).and_then(|g| g.with_test_window(self.window))
        } else {
            Ghs::resume(self.me, edges, &r.joined, self.window)
        };
        r.ghs = Some(Box::new(ghs.expect("weights and window were checked")));
        let joined = r.joined.clone();
        let old_nodes = r.old_nodes;
        match up {
            Some(p) => self.send_recover(
                p,
                RecoverMsg::Count {
                    nodes,
                    weight,
                    gone,
                },
                out,
            ),
            None if nodes.saturating_add(gone) == old_nodes => {
                // The piece holds every survivor (`gone` distinct members of the old tree
                // failed, the piece counts the rest): the tree is stable as it is.
                self.settle(None, &joined, nodes, weight, out);
                return;
            }
            None => {
                let mut o = Vec::new();
                let Phase::Recovering(r) = &mut self.phase else {
                    return;
                };
                let ghs = r.ghs.as_mut().expect("made above");
                match children
                    .iter()
                    .min_by_key(|&&c| EdgeKey::new(self.me, c, self.weights[&c]))
                {
                    None => ghs.start(&mut o),
                    Some(&core) => {
                        let level = (nodes.ilog2() as u8).min(crate::ghs::MAX_LEVEL);
                        self.send_recover(core, RecoverMsg::Core { level }, out);
                        let Phase::Recovering(r) = &mut self.phase else {
                            return;
                        };
                        r.ghs
                            .as_mut()
                            .expect("made above")
                            .initiate_as_core(core, level, &mut o)
                            .expect("a piece edge of a level <= MAX_LEVEL");
                    }
                }
                self.wrap_recover(o, out);
            }
        }
        // Messages that waited for the piece.
        let waiting = match &mut self.phase {
            Phase::Recovering(r) => std::mem::take(&mut r.buffer),
            _ => Vec::new(),
        };
        let generation = self.generation;
        for (from, msg) in waiting {
            if self.generation != generation {
                self.dropped += 1; // a fallback ended the recovery
            } else if !matches!(self.phase, Phase::Recovering(_))
                || self.on_recover(from, msg, out).is_err()
            {
                self.faults += 1;
            }
        }
        self.finish_ghs(out);
    }

    /// The tree is stable (the piece spans the survivors, or GHS ended): the maintainer takes
    /// over. `up`: the parent (None: the root); `Settled` goes on to the other tree edges.
    fn settle(
        &mut self,
        up: Option<NodeId>,
        branches: &BTreeSet<NodeId>,
        nodes: u32,
        total_weight: f64,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) {
        for &c in branches.iter().filter(|&&c| Some(c) != up) {
            self.send_recover(
                c,
                RecoverMsg::Settled {
                    nodes,
                    total_weight,
                },
                out,
            );
        }
        self.take_recovered(branches, up, nodes, total_weight, out);
    }

    fn take_recovered(
        &mut self,
        branches: &BTreeSet<NodeId>,
        up: Option<NodeId>,
        nodes: u32,
        total_weight: f64,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) {
        let repairs = match &mut self.phase {
            Phase::Recovering(r) => std::mem::take(&mut r.repairs),
            _ => Vec::new(),
        };
        let m = MstMaintainer::from_tree(
            self.me,
            self.weights.iter().map(|(&n, &w)| (n, w)),
            branches,
            up,
            nodes,
            total_weight,
        )
        .expect("the recovered tree's edges are this node's surviving edges");
        self.take_over(m, repairs, out);
    }

    /// GHS ended here: its tree, rooted like a GHS build's (the smaller end of the core).
    fn finish_ghs(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        let Phase::Recovering(r) = &self.phase else {
            return;
        };
        let Some(done) = r.ghs.as_ref().and_then(|g| g.completion()) else {
            return;
        };
        let ghs = r.ghs.as_ref().expect("completed");
        let branches: BTreeSet<NodeId> = ghs.branch_edges().into_iter().map(|(n, _)| n).collect();
        let root = done.fragment.is_none_or(|core| core.lo() == self.me);
        let up = if root { None } else { ghs.in_branch() };
        self.take_recovered(&branches, up, done.nodes, done.total_weight, out);
    }

    /// A recovery message of the current generation.
    fn on_recover(
        &mut self,
        from: NodeId,
        msg: RecoverMsg,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) -> Result<(), RepairError> {
        let me = self.me;
        let unexpected = |why| RepairError::Unexpected {
            node: me,
            from,
            kind: msg.name(),
            why,
        };
        let Phase::Recovering(r) = &mut self.phase else {
            return Err(unexpected("not recovering"));
        };
        match msg {
            RecoverMsg::Join { epoch } => {
                if r.joined.contains(&from) || r.counted {
                    return Err(unexpected("a second join"));
                }
                if !r.tree.contains(&from) || epoch != r.epoch {
                    // The two ends do not hold the same old tree: a rebuild settles it.
                    self.enter(self.generation + 1, out);
                    return Ok(());
                }
                r.heard.insert(from);
                r.joined.insert(from);
                self.progress(out);
            }
            RecoverMsg::Count {
                nodes,
                weight,
                gone,
            } => {
                let parent = r.parent;
                if !r.joined.contains(&from)
                    || Some(from) == parent
                    || r.counts.contains_key(&from)
                    || r.counted
                    || nodes == 0
                    || EdgeKey::new(me, from, weight).is_none()
                {
                    return Err(unexpected("a count that is not a waited-for child's"));
                }
                r.heard.insert(from);
                r.counts.insert(from, (nodes, weight, gone));
                self.progress(out);
            }
            _ if !r.counted => {
                r.heard.insert(from);
                r.buffer.push((from, msg));
            }
            RecoverMsg::Core { level } => {
                if r.up != Some(from) || level == 0 {
                    return Err(unexpected(
                        "a core from a node that is not the piece's parent",
                    ));
                }
                let mut o = Vec::new();
                let ghs = r
                    .ghs
                    .as_mut()
                    .ok_or_else(|| unexpected("the recovery is over"))?;
                ghs.initiate_as_core(from, level, &mut o)
                    .map_err(|_| unexpected("refused by GHS"))?;
                r.heard.insert(from);
                self.wrap_recover(o, out);
                self.finish_ghs(out);
            }
            RecoverMsg::Settled {
                nodes,
                total_weight,
            } => {
                if r.up != Some(from) {
                    return Err(unexpected(
                        "settled from a node that is not the piece's parent",
                    ));
                }
                let joined = r.joined.clone();
                self.settle(Some(from), &joined, nodes, total_weight, out);
            }
            RecoverMsg::Ghs(m) => {
                let mut o = Vec::new();
                let ghs = r
                    .ghs
                    .as_mut()
                    .ok_or_else(|| unexpected("the recovery is over"))?;
                ghs.handle(from, m, &mut o)
                    .map_err(|_| unexpected("refused by GHS"))?;
                r.heard.insert(from);
                self.wrap_recover(o, out);
                self.finish_ghs(out);
            }
        }
        Ok(())
    }
}

/// Adds a child's echo, received over the tree edge of key `k`, to this node's.
fn merge(acc: &mut EchoInfo, child: EchoInfo, k: EdgeKey) {
    acc.best = match (acc.best, child.best) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    acc.change = acc.change.or(child.change);
    if let Some(m) = child.from_path {
        acc.from_path = Some(max_key(m, Some(k)));
    }
    if let Some(m) = child.to_path {
        acc.to_path = Some(max_key(m, Some(k)));
    }
    acc.path_max = acc.path_max.or(child.path_max);
    if let (Some(a), Some(b)) = (acc.from_path, acc.to_path) {
        acc.path_max = max_key(a, b);
        acc.from_path = None;
        acc.to_path = None;
    }
}
