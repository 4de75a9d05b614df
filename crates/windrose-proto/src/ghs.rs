//! The distributed minimum spanning tree of Gallager, Humblet and Spira (GHS, 1983) as a
//! sans-IO machine, with its own messages ([`GhsMsg`]) and their codec.
//!
//! Every node runs one [`Ghs`], knowing only its own id and the weights of its incident edges.
//! Nodes start in [`NodeState::Sleeping`]; any subset of them wakes up spontaneously
//! ([`Ghs::start`]) and a sleeping node wakes on its first message. When the algorithm ends,
//! every node knows which of its edges are in the minimum spanning tree
//! ([`Ghs::branch_edges`]) and that the tree is complete ([`Ghs::is_done`], [`Ghs::completion`]).
//!
//! # The algorithm (the classic one, step for step)
//!
//! Fragments (subtrees of the final MST) merge along their minimum-weight outgoing edges. A
//! fragment has a *level* and a *name* (the key of its core edge); each node is `Sleeping`,
//! `Find` (its fragment is looking for its minimum outgoing edge) or `Found`; each edge end is
//! `Basic` (not yet classified), `Branch` (in the tree) or `Rejected` (both ends in one
//! fragment).
//!
//! | message | meaning |
//! |---------|---------|
//! | `Connect(L)` | the sender's fragment, of level `L`, wants to join over this edge |
//! | `Initiate(L, F, S)` | the fragment is now `(L, F)`; `S = Find`: look for the minimum outgoing edge |
//! | `Test(L, F)` | is this edge outgoing from fragment `F` of level `L`? |
//! | `Accept` / `Reject` | yes (another fragment) / no (same fragment) |
//! | `Report(w)` | the lightest outgoing edge in the sender's subtree weighs `w` (infinity: none) |
//! | `ChangeRoot` | the route to the fragment's chosen edge: connect over it |
//! | `Done` | (ours) the tree is complete; flooded from the core over the branches |
//!
//! The three deferral rules: a `Connect(L)` with `L >=` the receiver's level on a `Basic` edge
//! waits (the receiver's fragment has not chosen that edge yet; when both sides choose it, the
//! fragments merge to level `L + 1`); a `Test(L, F)` with `L >` the receiver's level waits (the
//! receiver cannot tell yet whether it belongs to `F`); a `Report` on the in-branch while the
//! receiver is still in `Find` waits (the two core nodes compare their reports once both have
//! one). Deferred messages are kept in arrival order and retried after every message handled.
//!
//! # Example: a triangle, one node woken, FIFO delivery
//!
//! ```
//! use std::collections::VecDeque;
//! use windrose_model::NodeId;
//! use windrose_proto::ghs::{Ghs, GhsMsg};
//!
//! let n = NodeId;
//! let edges = [(0, 1, 2.0), (1, 2, 1.0), (0, 2, 3.0)];
//! let mut nodes: Vec<Ghs> = (0..3)
//!     .map(|v| {
//!         let mine = edges.iter().filter_map(|&(a, b, w)| match v {
//!             _ if v == a => Some((n(b), w)),
//!             _ if v == b => Some((n(a), w)),
//!             _ => None,
//!         });
//!         Ghs::new(n(v), mine).unwrap()
//!     })
//!     .collect();
//! let mut queue: VecDeque<(NodeId, NodeId, GhsMsg)> = VecDeque::new();
//! let mut out = Vec::new();
//! nodes[0].start(&mut out); // the others wake on their first message
//! queue.extend(out.drain(..).map(|(to, msg)| (n(0), to, msg)));
//! while let Some((from, to, msg)) = queue.pop_front() {
//!     nodes[to.index()].handle(from, msg, &mut out).unwrap();
//!     queue.extend(out.drain(..).map(|(t, msg)| (to, t, msg)));
//! }
//! assert!(nodes.iter().all(|g| g.is_done()));
//! assert_eq!(nodes[1].branch_edges(), vec![(n(2), 1.0), (n(0), 2.0)]);
//! assert_eq!(nodes[2].branch_edges(), vec![(n(1), 1.0)]);
//! assert_eq!(nodes[2].completion().unwrap().total_weight, 3.0);
//! ```
//!
//! # Weights and ties
//!
//! GHS needs distinct weights: an edge's weight is its [`EdgeKey`] `(w, min id, max id)`,
//! ordered by the weight `w` (finite, non-negative, `f64`), then by the smaller endpoint id, then
//! by the larger one. Keys are distinct because the graph is simple, so the MST is unique even
//! when many latencies are equal (the intra-site latencies of the paper's platform are all
//! zero), and equals Kruskal's on the same order. Both ends of an edge must be given the same
//! `w` (bit for bit) or the run is not a GHS run.
//!
//! # End of the algorithm
//!
//! The last phase's two core nodes both receive `Report(infinity)` over the core edge while
//! their own best is infinity: no fragment edge leaves the connected component, which is
//! therefore spanned. Each of them then sends [`GhsMsg::Done`] over its branches except the core
//! edge, and every node forwards it over its branches except the one it came from, so every
//! node learns the end; nothing arrives at a node after it is done (a message then is an error,
//! [`GhsError::AfterDone`]). `Done` carries the number of nodes and the total weight of the
//! tree: every `Report` carries its subtree's node count and weight, and in the last phase every
//! node of the component reports (nobody can join in `Found` state when no edge leaves), so the
//! core nodes add the two halves and the core edge. Both core nodes compute the total in the
//! same order, so every node receives bit-identical numbers; the float sum may differ in its
//! last bits from a sum of the same weights in another order.
//!
//! A node without edges is done when it wakes, alone in its tree. On a disconnected graph every
//! connected component builds its own MST and ends on its own (the spanning forest), as long as
//! at least one node of each component wakes spontaneously: a component nobody wakes stays
//! asleep.
//!
//! # Cost
//!
//! Classic GHS (a test window of 1, [`Ghs::new`]; see [the test window](#the-test-window) for
//! wider ones) sends at most `5 n log2 n + 2 e` messages of the seven classic kinds on a component of
//! `n` nodes and `e` edges: over the whole run an edge carries at most two messages of the
//! Test-Reject kind (a test answered by a rejection, or two crossing tests), and per level each
//! node receives at most one Initiate and one Accept and sends at most one Test that is
//! accepted, one Report and one ChangeRoot or Connect, with at most `log2 n` levels. The
//! announcement adds `n - 2` `Done` messages (for `n >= 2`: every node but the two core nodes
//! receives one). [`Ghs::messages_sent`] counts both.
//!
//! # The test window
//!
//! Classic GHS tests a node's Basic edges one at a time, lightest first, each a round trip:
//! on the six-site platform most Tests of WAN edges come back Reject (same fragment) after
//! 0.3-1.4 s, and the build takes 21.8 s. [`Ghs::with_test_window`]`(k)` keeps up to `k` Tests
//! waiting at once; `k = 1` is the classic algorithm above, message for message. With `k > 1`:
//!
//! - **The window.** In a search phase the node Tests the next Basic edges in key order until
//!   `k` wait; a Reject (or a crossing Test) frees a place and the window slides to the next
//!   edge. Once some Test is accepted, no heavier edge is tested.
//! - **The early report.** The node reports its lightest accepted edge as soon as every
//!   lighter Test of the phase is answered (and its children reported); the heavier Tests
//!   still waiting go *stale*: their answers no longer matter. A stale Reject still marks the
//!   edge Rejected (the answerer held the name the Test carried, so it is in this node's
//!   fragment for good); a stale Accept is dropped. An edge has at most one Test waiting: a
//!   later phase that reaches an edge with a stale Test waits for its answer before testing it
//!   again. A phase that found no outgoing edge reports only once no Test at all waits (stale
//!   ones included): in the last phase this is what makes every answer arrive before the end,
//!   so nothing reaches a node after it is done.
//! - **Crossing Tests** are matched by the names they carried: a node that gets `Test(L, F)`
//!   over an edge whose own waiting Test carried `F` takes each Test as the other's answer
//!   (both are in fragment `F`: the edge is Rejected) and sends nothing. Both ends compare the
//!   same two names, so both decide alike even when one Test is stale. With `k = 1` the waiting
//!   Test always carries the node's current name, which is the classic rule.
//! - **An Accept learnt for free.** A node whose phase Test over `j` waits and that gets
//!   `Test(L, F)` from `j` with `F` not its name and `L >=` its level answers Accept (as
//!   always) and takes its own Test as accepted: `j` was in fragment `F` of level `>= L` when
//!   it sent the Test, and this node's fragment cannot have merged with it since (it is still
//!   searching, and a fragment of level `<= L` absorbs none of level `>= L`). Its own Test's
//!   Accept still comes (`j`'s name is never this node's old name) and is taken as stale.
//!
//! Every run still builds Kruskal's tree (checked on the same 1,000 random graphs as the
//! classic mode, with windows 2, 3, 4, 8 and unbounded): the fragment's chosen edge is the
//! lightest outgoing one because each node reports its lightest outgoing edge after all
//! lighter ones are classified, exactly as before; an answer is used only by the phase that
//! asked. Progress: a fragment of the lowest level gets every Test answered (nothing it sends
//! is deferred, stale Tests included: they carry a level no higher), so it reports, as in
//! GHS's argument.
//!
//! **Messages** (`(3 n + 2 sum_v min(k, deg v)) log2 n + 4 e` on a component,
//! [`ghs_window_message_bound`](crate::ghs_timed::ghs_window_message_bound)): per level a node
//! still takes at most one Initiate and sends one Report and one ChangeRoot or Connect; its
//! phase sends at most `min(k, deg v)` Tests that get an Accept (the window holds `k` when
//! the first Accept stops it) and receives as many Accepts; a Test that is not accepted makes
//! its edge Rejected at its sender, which waits for it before any other Test on that edge, so
//! each end sends at most one such Test per edge, each answered by at most one Reject: `4 e`.
//! Classic GHS's `2 e` relies on a rejected edge never being tested from both ends with a
//! Reject each, which stale Tests can break.
//!
//! **Which `k`** ([`DEFAULT_TEST_WINDOW`] = 16): on the six-site platform with Hosts
//! (`windrose mst --scenario data/scenarios/seed004-six-sites.toml --initiator 12
//! --test-window K`) the build takes 21.8 s (k = 1, 816 frames), 13.0 s (2), 8.8 s (4), 7.1 s
//! (8) and 6.4 s (12, 16 and 23: every edge; 1,796 to 2,044 frames), 56 message delays on the
//! chain down to 22; in the message-delay model (`cargo test --release -p windrose-proto --test
//! ghs build_time -- --nocapture`) 16 is the fastest (4.6 s against 5.7 s at 12 and 23). Past
//! 16 nothing is gained here and every phase's Accepts grow with `k`, so 16 it is. The
//! remaining time is GHS's phases, not the tests: S2 joins the S1-S4 fragment while it
//! searches and must then test its 0.7 s links to Brazil (a round trip) before that fragment
//! can report, and the last phase still carries Initiate out to S2, a Test over a 0.7 s link,
//! the Reports back and `Done` out again. The issue's 3 s is not met.
//!
//! # Wire format
//!
//! Kinds are numbered within the GHS family; all integers big-endian, every kind of one fixed
//! length. An edge key is 16 bytes: the weight as IEEE-754 `f64` bits (u64; finite, sign bit
//! clear, so `-0.0` is refused and a weight round-trips exactly), then the smaller id (u32),
//! then the larger (u32, strictly greater). Levels are a u8 of at most [`MAX_LEVEL`] (a level-`L`
//! fragment has at least `2^L` nodes and ids are u32).
//!
//! | kind | message | body |
//! |------|---------|------|
//! | 1 | `Connect` | level u8 (1) |
//! | 2 | `Initiate` | level u8, fragment key, state u8 (1 find, 2 found) (18) |
//! | 3 | `Test` | level u8, fragment key (17) |
//! | 4 | `Accept` | empty (0) |
//! | 5 | `Reject` | empty (0) |
//! | 6 | `Report` | has-best u8 (0 infinity, 1 key), key (all zero for infinity), nodes u32 (>= 1), subtree weight f64 (29) |
//! | 7 | `ChangeRoot` | empty (0) |
//! | 8 | `Done` | fragment key, level u8, nodes u32 (>= 2), total weight f64 (29) |
//!
//! The encoding is canonical: [`GhsMsg::parse`] accepts exactly the bodies
//! [`GhsMsg::encode_body`] produces, and never panics.
//!
//! # On the wire: frame family 6
//!
//! A GHS message travels in a [`GhsFrame`]: frame family 6, one frame kind per GHS kind
//! (`ghs_connect` ... `ghs_done`, numbered as above), the fixed body being the run's
//! [`TransferId`] (u32) followed by the body above, so several MST runs (later: maintenance
//! epochs) share a connection. Every kind is a payload-less fixed layout of 4 + body bytes
//! (4 to 33), so the frame header alone settles the length; see [`GhsFrame`] for why this and
//! not a payload, and what it costs (`MAX_FIXED_BODY_LEN` 28 -> 33). A field out of range is a
//! [`FrameError::Invalid`] naming the frame kind and the value.
//!
//! # The collective: [`GhsProtocol`]
//!
//! [`GhsProtocol`] runs a [`Ghs`] as a [`Protocol`], built by the registry from
//! [`CollectiveSpec::Mst`](crate::collective::CollectiveSpec) ([`MstSpec`]: the weighted graph
//! and its [`WeightMetric`]; each node takes its incident edges), so an MST run is started by
//! any member through the [`Host`](crate::host::Host)'s session like any collective, in the
//! simulator and over TCP alike:
//! - `Input::Start` -> [`Ghs::start`] (every node wakes spontaneously under the driver
//!   contract, which GHS allows); `Input::Message` of its transfer -> [`Ghs::handle`]; each
//!   `(to, msg)` pushed -> `Output::Send` in order (GHS relies on FIFO links, which the driver
//!   contract gives);
//! - once [`Ghs::is_done`]: the node's result, [`MstResult`] (its tree edges, the node count
//!   and total weight every node learnt), as the bytes of an `Output::Deliver` at offset 0,
//!   then `Output::Finished`, exactly once (a node without edges does both at `Start`). The
//!   result is delivered rather than reported so that every driver hands it to its
//!   application unchanged (the simulator records it, the runtime emits it as a
//!   `Delivered` event) with no new report type; [`MstResult::parse`] reads it back;
//! - [`GhsError`] -> `ProtocolError::UnexpectedMessage` naming the sender, the frame kind and
//!   the reason; the machine is then unchanged and pushed nothing, as the contract asks;
//! - `Input::PeerFailed` -> `Output::Aborted` (GHS has no failure handling: that is the
//!   maintenance step); no timers, no `SendComplete`, no randomness. A run cannot take a
//!   restarted node back (`rejoins: false` in the registry).
//!
//! # After the build
//!
//! Keeping the tree the exact MST while weights change and nodes fail is
//! [`crate::ghs_repair`]: [`MstMaintainer`](crate::ghs_repair::MstMaintainer) takes over from a
//! finished [`Ghs`] (its tree edges, and [`Ghs::in_branch`] as the parent towards the core),
//! and [`MaintainedMst`](crate::ghs_repair::MaintainedMst) wraps a node's whole life: after a
//! failure, GHS goes on from the surviving pieces of the tree ([`Ghs::resume`],
//! [`Ghs::initiate_as_core`], [`Ghs::drop_silent_edge`]), or rebuilds. Their messages travel in frame family 9
//! ([`MstFrame`](crate::ghs_repair::MstFrame)), outside any collective: the Host's live MST
//! ([`crate::mst_service`]) runs one `MaintainedMst` per node for the life of the group.

use crate::frame::{Family, FrameError, KindLayout, Message, MessageKind, TransferId};
use crate::node::{AbortReason, Command, Input, Output, Outputs, Protocol, ProtocolError, Status};
use crate::time::Time;
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fmt;
use windrose_model::NodeId;

/// The highest level a fragment can reach: a level-`L` fragment has at least `2^L` nodes.
pub const MAX_LEVEL: u8 = 32;

/// The test window MST runs use unless told otherwise (see the
/// [module docs](self#the-test-window) for why this value); 1 is classic GHS.
pub const DEFAULT_TEST_WINDOW: u32 = 16;

pub(crate) fn default_test_window() -> u32 {
    DEFAULT_TEST_WINDOW
}

/// Bytes of an [`EdgeKey`] on the wire.
pub const KEY_LEN: usize = 16;

/// The longest body of any GHS message (`Report` and `Done`, 29 bytes).
pub const MAX_BODY_LEN: usize = 29;

/// The weight of an edge in GHS's total order: `(w, min id, max id)`. See the
/// [module docs](self).
#[derive(Copy, Clone, Debug)]
pub struct EdgeKey {
    weight: f64,
    lo: NodeId,
    hi: NodeId,
}

impl EdgeKey {
    /// The key of the edge `a`-`b` of weight `weight`; None unless `a != b` and the weight is
    /// finite and non-negative (`-0.0` counts as `0.0`).
    pub fn new(a: NodeId, b: NodeId, weight: f64) -> Option<EdgeKey> {
        if a == b || !weight.is_finite() || weight < 0.0 {
            return None;
        }
        // `-0.0 < 0.0` is false, so a negative zero gets here: store it as `+0.0`.
        let weight = if weight == 0.0 { 0.0 } else { weight };
        Some(EdgeKey {
            weight,
            lo: a.min(b),
            hi: a.max(b),
        })
    }

    /// The edge's weight.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// The smaller endpoint id.
    pub fn lo(&self) -> NodeId {
        self.lo
    }

    /// The larger endpoint id.
    pub fn hi(&self) -> NodeId {
        self.hi
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) {
        dst.put_u64(self.weight.to_bits());
        dst.put_u32(self.lo.0);
        dst.put_u32(self.hi.0);
    }

    /// Parses 16 bytes (the caller checked the length).
    pub(crate) fn parse(kind: u8, b: &[u8]) -> Result<EdgeKey, GhsWireError> {
        let bits = be_u64(&b[0..8]);
        let weight = f64::from_bits(bits);
        let lo = be_u32(&b[8..12]);
        let hi = be_u32(&b[12..16]);
        if !weight.is_finite() || bits >> 63 != 0 {
            return Err(GhsWireError::invalid(
                kind,
                format!("edge weight bits {bits:#018x} are not a finite, non-negative f64 with the sign bit clear"),
            ));
        }
        if lo >= hi {
            return Err(GhsWireError::invalid(
                kind,
                format!("edge ids {lo} and {hi} are not strictly increasing"),
            ));
        }
        Ok(EdgeKey {
            weight,
            lo: NodeId(lo),
            hi: NodeId(hi),
        })
    }
}

impl PartialEq for EdgeKey {
    fn eq(&self, other: &EdgeKey) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for EdgeKey {}

impl PartialOrd for EdgeKey {
    fn partial_cmp(&self, other: &EdgeKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EdgeKey {
    fn cmp(&self, other: &EdgeKey) -> Ordering {
        self.weight
            .total_cmp(&other.weight)
            .then(self.lo.cmp(&other.lo))
            .then(self.hi.cmp(&other.hi))
    }
}

impl fmt::Display for EdgeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.weight, self.lo, self.hi)
    }
}

/// `a < b` where None is infinity.
fn lighter(a: Option<EdgeKey>, b: Option<EdgeKey>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The state carried by `Initiate`: look for the fragment's outgoing edge, or not.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SearchState {
    /// Look for the minimum outgoing edge and report it.
    Find,
    /// Just learn the new level and name (a fragment absorbed after its absorber reported).
    Found,
}

/// A node's state in GHS.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Not woken yet.
    Sleeping,
    /// Looking for the fragment's minimum outgoing edge.
    Find,
    /// Not looking (reported, or just woke up alone).
    Found,
}

/// The state of one end of an edge in GHS.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EdgeState {
    /// Not classified yet.
    Basic,
    /// In the tree.
    Branch,
    /// Both ends in one fragment, not in the tree.
    Rejected,
}

/// A GHS message: see the [module docs](self) for their meaning and wire format.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum GhsMsg {
    /// The sender's fragment, of this level, wants to join over this edge.
    Connect {
        /// The sender's fragment level.
        level: u8,
    },
    /// The fragment's new level, name and search state, sent down the tree.
    Initiate {
        /// The level.
        level: u8,
        /// The name: the core edge's key.
        fragment: EdgeKey,
        /// Find: look for the minimum outgoing edge.
        state: SearchState,
    },
    /// Is this edge outgoing from the sender's fragment?
    Test {
        /// The sender's fragment level.
        level: u8,
        /// The sender's fragment name.
        fragment: EdgeKey,
    },
    /// Yes, this node is in another fragment.
    Accept,
    /// No, this node is in the sender's fragment.
    Reject,
    /// The lightest outgoing edge of the sender's subtree.
    Report {
        /// Its key; None: no outgoing edge (infinity).
        best: Option<EdgeKey>,
        /// Nodes in the sender's subtree (itself included) among those that took part in this
        /// phase's search.
        nodes: u32,
        /// Sum of the weights of the tree edges in that subtree.
        weight: f64,
    },
    /// Connect over the fragment's chosen edge (sent along the path to it).
    ChangeRoot,
    /// The tree is complete (flooded from the core over the branches).
    Done {
        /// The final fragment's name.
        fragment: EdgeKey,
        /// Its level.
        level: u8,
        /// Nodes in the tree (the connected component).
        nodes: u32,
        /// Sum of the tree's edge weights.
        total_weight: f64,
    },
}

const K_CONNECT: u8 = 1;
const K_INITIATE: u8 = 2;
const K_TEST: u8 = 3;
const K_ACCEPT: u8 = 4;
const K_REJECT: u8 = 5;
const K_REPORT: u8 = 6;
const K_CHANGE_ROOT: u8 = 7;
const K_DONE: u8 = 8;

const NAMES: [&str; 8] = [
    "connect",
    "initiate",
    "test",
    "accept",
    "reject",
    "report",
    "change_root",
    "done",
];

pub(crate) const LENS: [usize; 8] = [1, 18, 17, 0, 0, 29, 0, 29];

impl GhsMsg {
    /// Every kind byte of the family, in order.
    pub const KINDS: std::ops::RangeInclusive<u8> = K_CONNECT..=K_DONE;

    /// The kind byte, 1..=8 (see the [module docs](self)).
    pub fn kind(&self) -> u8 {
        match self {
            GhsMsg::Connect { .. } => K_CONNECT,
            GhsMsg::Initiate { .. } => K_INITIATE,
            GhsMsg::Test { .. } => K_TEST,
            GhsMsg::Accept => K_ACCEPT,
            GhsMsg::Reject => K_REJECT,
            GhsMsg::Report { .. } => K_REPORT,
            GhsMsg::ChangeRoot => K_CHANGE_ROOT,
            GhsMsg::Done { .. } => K_DONE,
        }
    }

    /// The name of a kind byte in logs and errors (`connect`, `initiate`, `test`, `accept`,
    /// `reject`, `report`, `change_root`, `done`), None if unknown.
    pub fn kind_name(kind: u8) -> Option<&'static str> {
        NAMES.get(usize::from(kind).wrapping_sub(1)).copied()
    }

    /// This message's kind name.
    pub fn name(&self) -> &'static str {
        NAMES[usize::from(self.kind() - 1)]
    }

    /// True for the seven messages of the classic algorithm (not `Done`).
    pub fn is_classic(&self) -> bool {
        !matches!(self, GhsMsg::Done { .. })
    }

    /// Bytes of the body, fixed per kind.
    pub fn body_len(&self) -> usize {
        LENS[usize::from(self.kind() - 1)]
    }

    /// Appends the body (big-endian, [`body_len`](Self::body_len) bytes).
    pub fn encode_body(&self, dst: &mut BytesMut) {
        dst.reserve(self.body_len());
        match *self {
            GhsMsg::Connect { level } => dst.put_u8(level),
            GhsMsg::Initiate {
                level,
                fragment,
                state,
            } => {
                dst.put_u8(level);
                fragment.encode(dst);
                dst.put_u8(match state {
                    SearchState::Find => 1,
                    SearchState::Found => 2,
                });
            }
            GhsMsg::Test { level, fragment } => {
                dst.put_u8(level);
                fragment.encode(dst);
            }
            GhsMsg::Accept | GhsMsg::Reject | GhsMsg::ChangeRoot => {}
            GhsMsg::Report {
                best,
                nodes,
                weight,
            } => {
                match best {
                    Some(key) => {
                        dst.put_u8(1);
                        key.encode(dst);
                    }
                    None => {
                        dst.put_u8(0);
                        dst.put_bytes(0, KEY_LEN);
                    }
                }
                dst.put_u32(nodes);
                dst.put_u64(weight.to_bits());
            }
            GhsMsg::Done {
                fragment,
                level,
                nodes,
                total_weight,
            } => {
                fragment.encode(dst);
                dst.put_u8(level);
                dst.put_u32(nodes);
                dst.put_u64(total_weight.to_bits());
            }
        }
    }

    /// Parses the body of a message of kind `kind`: the exact inverse of
    /// [`encode_body`](Self::encode_body). Never panics; a wrong length, an unknown kind or an
    /// invalid field is an error naming the kind and what is wrong.
    pub fn parse(kind: u8, body: &[u8]) -> Result<GhsMsg, GhsWireError> {
        let Some(&expected) = LENS.get(usize::from(kind).wrapping_sub(1)) else {
            return Err(GhsWireError::UnknownKind { kind });
        };
        if body.len() != expected {
            return Err(GhsWireError::BodyLength {
                kind: NAMES[usize::from(kind - 1)],
                expected,
                found: body.len(),
            });
        }
        let level = |b: u8| {
            if b <= MAX_LEVEL {
                Ok(b)
            } else {
                Err(GhsWireError::invalid(
                    kind,
                    format!("level {b} exceeds {MAX_LEVEL}"),
                ))
            }
        };
        let amount = |b: &[u8], what: &str| {
            let bits = be_u64(b);
            let x = f64::from_bits(bits);
            if x.is_finite() && bits >> 63 == 0 {
                Ok(x)
            } else {
                Err(GhsWireError::invalid(
                    kind,
                    format!("{what} bits {bits:#018x} are not a finite, non-negative f64 with the sign bit clear"),
                ))
            }
        };
        let nodes = |b: &[u8], min: u32| {
            let n = be_u32(b);
            if n >= min {
                Ok(n)
            } else {
                Err(GhsWireError::invalid(
                    kind,
                    format!("node count {n} is below {min}"),
                ))
            }
        };
        Ok(match kind {
            K_CONNECT => GhsMsg::Connect {
                level: level(body[0])?,
            },
            K_INITIATE => GhsMsg::Initiate {
                level: level(body[0])?,
                fragment: EdgeKey::parse(kind, &body[1..17])?,
                state: match body[17] {
                    1 => SearchState::Find,
                    2 => SearchState::Found,
                    other => {
                        return Err(GhsWireError::invalid(
                            kind,
                            format!("state byte {other} is neither 1 (find) nor 2 (found)"),
                        ))
                    }
                },
            },
            K_TEST => GhsMsg::Test {
                level: level(body[0])?,
                fragment: EdgeKey::parse(kind, &body[1..17])?,
            },
            K_ACCEPT => GhsMsg::Accept,
            K_REJECT => GhsMsg::Reject,
            K_REPORT => GhsMsg::Report {
                best: match body[0] {
                    1 => Some(EdgeKey::parse(kind, &body[1..17])?),
                    0 if body[1..17].iter().all(|&b| b == 0) => None,
                    0 => {
                        return Err(GhsWireError::invalid(
                            kind,
                            "infinity (has-best 0) with non-zero key bytes".to_string(),
                        ))
                    }
                    other => {
                        return Err(GhsWireError::invalid(
                            kind,
                            format!("has-best byte {other} is neither 0 nor 1"),
                        ))
                    }
                },
                nodes: nodes(&body[17..21], 1)?,
                weight: amount(&body[21..29], "subtree weight")?,
            },
            K_CHANGE_ROOT => GhsMsg::ChangeRoot,
            _ => GhsMsg::Done {
                fragment: EdgeKey::parse(kind, &body[0..16])?,
                level: level(body[16])?,
                nodes: nodes(&body[17..21], 2)?,
                total_weight: amount(&body[21..29], "total weight")?,
            },
        })
    }
}

pub(crate) fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_be_bytes(a)
}

pub(crate) fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_be_bytes(a)
}

/// A GHS message body that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GhsWireError {
    /// A kind byte outside 1..=8.
    #[error("unknown GHS message kind {kind}")]
    UnknownKind {
        /// The kind byte.
        kind: u8,
    },
    /// A body of the wrong length for its kind.
    #[error("GHS {kind} message: body of {found} bytes, expected {expected}")]
    BodyLength {
        /// The kind's name.
        kind: &'static str,
        /// Its fixed length.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// A field out of range.
    #[error("GHS {kind} message: {what}")]
    Invalid {
        /// The kind's name.
        kind: &'static str,
        /// What is wrong.
        what: String,
    },
}

impl GhsWireError {
    fn invalid(kind: u8, what: String) -> GhsWireError {
        GhsWireError::Invalid {
            kind: GhsMsg::kind_name(kind).unwrap_or("unknown"),
            what,
        }
    }
}

/// A GHS message on the wire: frame family 6, tagged with the [`TransferId`] of its run, so
/// several MST runs (and, later, the maintenance epochs) can share one connection.
///
/// Every kind is a payload-less fixed layout: the transfer id (u32), then the message's body
/// ([`GhsMsg::encode_body`]), so the frame header alone says whether the length is right and
/// a wrong one is refused before any body byte is awaited. Why not a payload: a payload kind
/// would let a peer declare any body length up to the frame limit and make the receiver wait
/// for (and buffer) it before [`GhsMsg::parse`] could refuse it; fixed layouts cost raising
/// [`MAX_FIXED_BODY_LEN`](crate::frame::MAX_FIXED_BODY_LEN) from 28 to 33 bytes, which lowers
/// the largest data or piece payload a default receiver accepts by 5 bytes (16 MiB - 33).
///
/// | kind | name              | fixed body                         |
/// |------|-------------------|------------------------------------|
/// | 1    | `ghs_connect`     | transfer u32, `Connect` body (5)   |
/// | 2    | `ghs_initiate`    | transfer u32, `Initiate` body (22) |
/// | 3    | `ghs_test`        | transfer u32, `Test` body (21)     |
/// | 4    | `ghs_accept`      | transfer u32 (4)                   |
/// | 5    | `ghs_reject`      | transfer u32 (4)                   |
/// | 6    | `ghs_report`      | transfer u32, `Report` body (33)   |
/// | 7    | `ghs_change_root` | transfer u32 (4)                   |
/// | 8    | `ghs_done`        | transfer u32, `Done` body (33)     |
///
/// Frames compare by their bytes (kind and encoded fields), so equality is an equivalence even
/// though the messages carry `f64`s.
#[derive(Copy, Clone, Debug)]
pub struct GhsFrame {
    /// The MST run the message belongs to.
    pub transfer: TransferId,
    /// The message.
    pub msg: GhsMsg,
}

impl GhsFrame {
    /// The frame kind of GHS kind byte `kind` (1..=8).
    pub const fn kind_of(kind: u8) -> MessageKind {
        MessageKind::of::<GhsFrame>(kind)
    }

    /// The frame kind of this message.
    pub fn message_kind(&self) -> MessageKind {
        GhsFrame::kind_of(self.msg.kind())
    }

    fn body(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(MAX_BODY_LEN);
        self.msg.encode_body(&mut b);
        b
    }
}

impl PartialEq for GhsFrame {
    fn eq(&self, other: &GhsFrame) -> bool {
        self.transfer == other.transfer
            && self.msg.kind() == other.msg.kind()
            && self.body() == other.body()
    }
}

impl Eq for GhsFrame {}

const fn layout(kind: u8, name: &'static str) -> KindLayout {
    KindLayout {
        kind,
        name,
        fixed: 4 + LENS[kind as usize - 1],
        payload: false,
    }
}

impl Family for GhsFrame {
    const FAMILY: u8 = 6;
    const KINDS: &'static [KindLayout] = &[
        layout(K_CONNECT, "ghs_connect"),
        layout(K_INITIATE, "ghs_initiate"),
        layout(K_TEST, "ghs_test"),
        layout(K_ACCEPT, "ghs_accept"),
        layout(K_REJECT, "ghs_reject"),
        layout(K_REPORT, "ghs_report"),
        layout(K_CHANGE_ROOT, "ghs_change_root"),
        layout(K_DONE, "ghs_done"),
    ];

    fn kind(&self) -> u8 {
        self.msg.kind()
    }

    fn transfer(&self) -> Option<TransferId> {
        Some(self.transfer)
    }

    fn payload(&self) -> Option<&Bytes> {
        None
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        dst.put_u32(self.transfer.0);
        self.msg.encode_body(dst);
    }

    fn parse(kind: u8, body: Bytes) -> Result<Self, FrameError> {
        let transfer = TransferId(be_u32(&body[..4]));
        let msg = GhsMsg::parse(kind, &body[4..]).map_err(|e| match e {
            GhsWireError::UnknownKind { kind } => FrameError::UnknownKind {
                family: Self::FAMILY,
                kind,
            },
            // The header check fixed the length; kept for a caller that did not.
            GhsWireError::BodyLength {
                expected, found, ..
            } => FrameError::BodyLength {
                kind: GhsFrame::kind_of(kind),
                found: (found + 4) as u32,
                expected: expected + 4,
                at_least: false,
            },
            GhsWireError::Invalid { what, .. } => FrameError::Invalid {
                kind: GhsFrame::kind_of(kind),
                what,
            },
        })?;
        Ok(GhsFrame { transfer, msg })
    }

    /// What `parse` refuses, for frames that never crossed a wire: the body must parse back.
    fn validate(&self) -> Result<(), FrameError> {
        let mut body = BytesMut::with_capacity(4 + MAX_BODY_LEN);
        self.put_fixed(&mut body);
        GhsFrame::parse(self.msg.kind(), body.freeze()).map(|_| ())
    }
}

/// Incident edges a [`Ghs`] machine cannot be built with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GhsSetupError {
    /// An edge from the node to itself.
    #[error("node {node}: an edge to itself")]
    SelfLoop {
        /// The node.
        node: NodeId,
    },
    /// Two edges to one neighbour.
    #[error("node {node}: two edges to neighbour {neighbour}")]
    DuplicateNeighbour {
        /// The node.
        node: NodeId,
        /// The neighbour.
        neighbour: NodeId,
    },
    /// A test window of 0 (at least one Test must be allowed).
    #[error("node {node}: a test window of 0, expected at least 1")]
    ZeroTestWindow {
        /// The node.
        node: NodeId,
    },
    /// A fragment edge ([`Ghs::resume`]) to a node that is not a neighbour.
    #[error("node {node}: a fragment edge to {branch}, which is not a neighbour")]
    NotANeighbour {
        /// The node.
        node: NodeId,
        /// The branch named.
        branch: NodeId,
    },
    /// A weight that is NaN, infinite or negative.
    #[error("node {node}: the edge to {neighbour} weighs {weight}, expected a finite number >= 0")]
    BadWeight {
        /// The node.
        node: NodeId,
        /// The neighbour.
        neighbour: NodeId,
        /// The weight given.
        weight: f64,
    },
}

/// A message a [`Ghs`] machine refuses; it is then unchanged and pushed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GhsError {
    /// From a node that is not a neighbour.
    #[error("GHS {kind} message from node {from}, which is not a neighbour")]
    NotANeighbour {
        /// The sender.
        from: NodeId,
        /// The message's kind name.
        kind: &'static str,
    },
    /// A message after this node learnt the end (no correct run sends one).
    #[error("GHS {kind} message from node {from} after the tree was complete")]
    AfterDone {
        /// The sender.
        from: NodeId,
        /// The message's kind name.
        kind: &'static str,
    },
    /// A message that the algorithm never sends to a node in this state.
    #[error("unexpected GHS {kind} message from node {from}: {why}")]
    Unexpected {
        /// The sender.
        from: NodeId,
        /// The message's kind name.
        kind: &'static str,
        /// Why.
        why: &'static str,
    },
}

/// What a node knows once the tree is complete.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Completion {
    /// The final fragment's name (the core edge); None for a node without edges.
    pub fragment: Option<EdgeKey>,
    /// The final level.
    pub level: u8,
    /// Nodes in the tree (the node's connected component).
    pub nodes: u32,
    /// Sum of the tree's edge weights.
    pub total_weight: f64,
}

/// One end of an edge, 16 bytes: a complete graph of 4,096 nodes holds 16.7 M of them and
/// every message reads one at random, so their size is the run's cache misses. The key's ids
/// are not stored (they are this node's and `to`, in order), nor the name of a waiting Test
/// (an index into [`Ghs`]'s `names`).
#[derive(Clone, Debug)]
struct Edge {
    weight: f64,
    to: NodeId,
    /// Bits 0-1: the [`EdgeState`]; bit 2: the waiting Test belongs to this phase's window
    /// (else it is stale: sent in an earlier phase whose report did not wait for it); bits
    /// 3-31: 0 if no Test of this node waits for its answer over this edge (at most one at a
    /// time), else 1 + the index in `names` of the fragment name it carried.
    tag: u32,
}

const STATE_MASK: u32 = 0b11;
const CURRENT: u32 = 0b100;
const ASKED_SHIFT: u32 = 3;
/// How many names the `asked` bits can index; past it the table is compacted.
const NAME_LIMIT: usize = if cfg!(test) { 3 } else { (1 << 29) - 1 };

impl Edge {
    fn state(&self) -> EdgeState {
        match self.tag & STATE_MASK {
            0 => EdgeState::Basic,
            1 => EdgeState::Branch,
            _ => EdgeState::Rejected,
        }
    }

    fn set_state(&mut self, s: EdgeState) {
        let bits = match s {
            EdgeState::Basic => 0,
            EdgeState::Branch => 1,
            EdgeState::Rejected => 2,
        };
        self.tag = (self.tag & !STATE_MASK) | bits;
    }

    fn current(&self) -> bool {
        self.tag & CURRENT != 0
    }

    /// Clears the current bit, returning it.
    fn take_current(&mut self) -> bool {
        let was = self.current();
        self.tag &= !CURRENT;
        was
    }

    /// 1 + the index in `names` of the waiting Test's name, 0 for none.
    fn asked(&self) -> u32 {
        self.tag >> ASKED_SHIFT
    }

    fn set_asked(&mut self, a: u32) {
        self.tag = (self.tag & (STATE_MASK | CURRENT)) | (a << ASKED_SHIFT);
    }
}

/// Neighbour id -> index of the edge. Every message but a Test answered by [`Contig`]'s bits
/// looks its sender up, so on large dense graphs (a complete graph of thousands of nodes) a
/// binary search's cache misses dominate the run: ids spanning at most twice the degree get a
/// direct table instead.
#[derive(Clone, Debug)]
enum Lookup {
    /// `(neighbour, index)` by neighbour id.
    Sorted(Vec<(NodeId, u32)>),
    /// `slot[id - first]` is the index, or `u32::MAX` for no edge.
    Dense { first: u32, slot: Vec<u32> },
}

impl Lookup {
    /// From `(neighbour, index)` sorted by neighbour, without duplicates.
    fn new(sorted: Vec<(NodeId, usize)>) -> Lookup {
        let (Some(&(lo, _)), Some(&(hi, _))) = (sorted.first(), sorted.last()) else {
            return Lookup::Sorted(Vec::new());
        };
        let span = (hi.0 - lo.0) as usize + 1;
        if span <= 2 * sorted.len() {
            let mut slot = vec![u32::MAX; span];
            for (id, i) in sorted {
                slot[(id.0 - lo.0) as usize] = i as u32;
            }
            Lookup::Dense { first: lo.0, slot }
        } else {
            Lookup::Sorted(sorted.into_iter().map(|(id, i)| (id, i as u32)).collect())
        }
    }

    fn get(&self, id: NodeId) -> Option<usize> {
        match self {
            Lookup::Sorted(v) => v
                .binary_search_by_key(&id, |&(n, _)| n)
                .ok()
                .map(|k| v[k].1 as usize),
            Lookup::Dense { first, slot } => {
                id.0.checked_sub(*first)
                    .and_then(|k| slot.get(k as usize))
                    .filter(|&&i| i != u32::MAX)
                    .map(|&i| i as usize)
            }
        }
    }
}

/// Two bits per neighbour id, for a node whose neighbours are every id of `first..end` but
/// its own (a complete graph's): a Test of this node waits over the edge, and a Test that
/// arrived over it rejected it. Most messages of a complete graph are Tests, and with these
/// bits (2 KiB a node at 4,096 nodes, all of them cached) a Test is answered without reading
/// the lookup table or the edge, two cache misses in tables of 67 and 268 MB.
#[derive(Clone, Debug)]
struct Contig {
    first: u32,
    end: u32,
    /// Bit `2 p` of the `p`-th pair (p = id - first): asked; bit `2 p + 1`: rejected.
    bits: Vec<u64>,
}

impl Contig {
    /// From the neighbour ids sorted, without duplicates; None unless they are contiguous
    /// but for `me`.
    fn new(me: NodeId, sorted: &[(NodeId, usize)]) -> Option<Contig> {
        let (first, last) = (sorted.first()?.0 .0, sorted.last()?.0 .0);
        let end = last.checked_add(1)?;
        let span = (end - first) as usize;
        let holes = usize::from((first..end).contains(&me.0));
        (span == sorted.len() + holes).then(|| Contig {
            first,
            end,
            bits: vec![0; span.div_ceil(32)],
        })
    }

    /// The pair of neighbour `id` (None: not a neighbour; the caller excludes `me`).
    fn pos(&self, id: NodeId) -> Option<usize> {
        (self.first..self.end)
            .contains(&id.0)
            .then(|| (id.0 - self.first) as usize)
    }

    fn get(&self, p: usize, bit: usize) -> bool {
        self.bits[p / 32] >> (2 * (p % 32) + bit) & 1 != 0
    }

    fn set(&mut self, p: usize, bit: usize, on: bool) {
        let m = 1u64 << (2 * (p % 32) + bit);
        if on {
            self.bits[p / 32] |= m;
        } else {
            self.bits[p / 32] &= !m;
        }
    }
}

const ASKED_BIT: usize = 0;
const REJECTED_BIT: usize = 1;

/// One node's GHS machine: see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Ghs {
    me: NodeId,
    /// Incident edges, lightest first.
    edges: Vec<Edge>,
    /// Neighbour id -> index in `edges`.
    by_id: Lookup,
    /// Neighbours `first..end` but this node: per neighbour id, whether a Test waits over the
    /// edge (kept with [`Edge::tag`]'s) and whether an arriving Test rejected it (a Basic
    /// edge with this bit is Rejected: see [`Ghs::state_of`]).
    contig: Option<Contig>,
    /// The Branch edges' indices, ascending (lightest first): Initiate and Done go over the
    /// branches, and scanning every edge for them cost more than the Tests on a complete graph.
    branches: Vec<u32>,
    /// The fragment names this node's waiting Tests carried (see [`Edge::tag`]); a name is
    /// added when a Test carries one that differs from the last one added.
    names: Vec<EdgeKey>,
    /// No edge before this index is Basic (edges only leave Basic).
    basic_from: usize,
    state: NodeState,
    level: u8,
    fragment: Option<EdgeKey>,
    in_branch: Option<usize>,
    best_edge: Option<usize>,
    best: Option<EdgeKey>,
    /// Tests at most this many edges at once (1: the classic algorithm).
    window: usize,
    /// This phase's Tests waiting for an answer (edges with `current` set), in send order
    /// (lightest first).
    window_tests: Vec<usize>,
    /// Stale Tests waiting for an answer (edges with `asked` set and `current` not).
    stale: usize,
    /// This phase's next edge to consider for a Test (edges before it were tested this phase
    /// or are not Basic).
    probe: usize,
    /// The lightest edge this phase's Tests found outgoing (an Accept): no heavier edge needs
    /// a Test.
    accepted: Option<usize>,
    find_count: u32,
    /// This phase's subtree: nodes and tree weight (for `Done`).
    sub_nodes: u32,
    sub_weight: f64,
    deferred: VecDeque<(usize, GhsMsg)>,
    completion: Option<Completion>,
    sent_classic: u64,
    sent_done: u64,
}

impl Ghs {
    /// The machine of node `me`, whose incident edges are `(neighbour, weight)` (any order).
    pub fn new(
        me: NodeId,
        edges: impl IntoIterator<Item = (NodeId, f64)>,
    ) -> Result<Ghs, GhsSetupError> {
        let mut list = Vec::new();
        for (to, weight) in edges {
            if to == me {
                return Err(GhsSetupError::SelfLoop { node: me });
            }
            let key = EdgeKey::new(me, to, weight).ok_or(GhsSetupError::BadWeight {
                node: me,
                neighbour: to,
                weight,
            })?;
            list.push(Edge {
                weight: key.weight,
                to,
                tag: 0,
            });
        }
        // Key order. Every key here has this node as one end, so two keys of one weight
        // compare as their other ends' ids do ((a, me) < (me, b) when a < me < b); and for
        // finite weights >= 0 (without -0.0) the order of the bits is the order of the
        // numbers. Keys are distinct once duplicates are refused below, so an unstable sort
        // gives the one order.
        list.sort_unstable_by_key(|e| (e.weight.to_bits(), e.to));
        let mut by_id: Vec<(NodeId, usize)> =
            list.iter().enumerate().map(|(i, e)| (e.to, i)).collect();
        by_id.sort_unstable();
        if let Some(w) = by_id.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(GhsSetupError::DuplicateNeighbour {
                node: me,
                neighbour: w[0].0,
            });
        }
        let contig = Contig::new(me, &by_id);
        let by_id = Lookup::new(by_id);
        Ok(Ghs {
            me,
            edges: list,
            by_id,
            contig,
            branches: Vec::new(),
            names: Vec::new(),
            basic_from: 0,
            state: NodeState::Sleeping,
            level: 0,
            fragment: None,
            in_branch: None,
            best_edge: None,
            best: None,
            window: 1,
            window_tests: Vec::new(),
            stale: 0,
            probe: 0,
            accepted: None,
            find_count: 0,
            sub_nodes: 1,
            sub_weight: 0.0,
            deferred: VecDeque::new(),
            completion: None,
            sent_classic: 0,
            sent_done: 0,
        })
    }

    /// The same machine testing up to `window` edges at once (see the
    /// [module docs](self#the-test-window)); 1 is the classic algorithm, which
    /// [`new`](Self::new) builds. Only before the node wakes.
    pub fn with_test_window(mut self, window: u32) -> Result<Ghs, GhsSetupError> {
        if window == 0 {
            return Err(GhsSetupError::ZeroTestWindow { node: self.me });
        }
        debug_assert_eq!(self.state, NodeState::Sleeping);
        self.window = window as usize;
        Ok(self)
    }

    /// The machine of node `me` resuming inside a fragment that already exists: the edges to
    /// `branches` are Branch (the fragment's tree edges around this node), the others Basic,
    /// and the node is awake in `Found` at level 0 without a name until its fragment's
    /// `Initiate` (or [`initiate_as_core`](Self::initiate_as_core)) gives it both. Until then
    /// it defers every Test and Connect of a level above 0 and accepts Tests of level 0 (a
    /// singleton's: another fragment). For the failure recovery of
    /// [`MaintainedMst`](crate::ghs_repair::MaintainedMst): the pieces of the old tree that
    /// survive a failure are fragments of the new MST, and GHS goes on from them.
    pub fn resume(
        me: NodeId,
        edges: impl IntoIterator<Item = (NodeId, f64)>,
        branches: &std::collections::BTreeSet<NodeId>,
        window: u32,
    ) -> Result<Ghs, GhsSetupError> {
        let mut g = Ghs::new(me, edges)?.with_test_window(window)?;
        for &b in branches {
            let j = g.index_of(b).ok_or(GhsSetupError::NotANeighbour {
                node: me,
                branch: b,
            })?;
            g.set_branch(j);
        }
        if !branches.is_empty() {
            g.state = NodeState::Found;
        }
        Ok(g)
    }

    /// A [`resume`](Self::resume)d node at one end of its fragment's chosen core edge (to
    /// `partner`) starts the fragment's search at `level`, named by the core edge, as if the
    /// partner had sent it `Initiate(level, core, Find)`; the partner does the same. Refused
    /// (nothing changed) unless the edge is a Branch and the level at most [`MAX_LEVEL`].
    pub fn initiate_as_core(
        &mut self,
        partner: NodeId,
        level: u8,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) -> Result<(), GhsError> {
        let j = self.index_of(partner).ok_or(GhsError::NotANeighbour {
            from: partner,
            kind: "initiate",
        })?;
        if self.state_of(j) != EdgeState::Branch || level > MAX_LEVEL || self.is_done() {
            return Err(GhsError::Unexpected {
                from: partner,
                kind: "initiate",
                why: "a core edge that is not a branch, or a level above the maximum",
            });
        }
        let fragment = self.key(j);
        self.on_initiate(j, level, fragment, SearchState::Find, out);
        self.retry_deferred(out);
        Ok(())
    }

    /// The neighbour `peer` failed without ever sending this node a message of this run: its
    /// edge leaves the search (a Test waiting over it is answered as a Reject would be, and the
    /// edge is never tested again). Refused (nothing changed) for a Branch edge, whose loss
    /// breaks a fragment: the caller starts over.
    pub fn drop_silent_edge(
        &mut self,
        peer: NodeId,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) -> Result<(), GhsError> {
        let Some(j) = self.index_of(peer) else {
            return Ok(());
        };
        if self.state_of(j) == EdgeState::Branch {
            return Err(GhsError::Unexpected {
                from: peer,
                kind: "failure",
                why: "a tree edge of the fragment failed",
            });
        }
        self.deferred.retain(|&(d, _)| d != j);
        if self.is_done() {
            self.reject(j);
            return Ok(());
        }
        if self.edges[j].asked() != 0 {
            self.dispatch(j, GhsMsg::Reject, out);
        } else if self.state_of(j) == EdgeState::Basic {
            self.reject(j);
            if self.state == NodeState::Find {
                self.test(out);
            }
        }
        self.retry_deferred(out);
        Ok(())
    }

    /// How many Tests the node keeps waiting at once (1: classic GHS).
    pub fn test_window(&self) -> u32 {
        self.window as u32
    }

    /// The node.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// Sleeping, Find or Found.
    pub fn state(&self) -> NodeState {
        self.state
    }

    /// The fragment's level.
    pub fn level(&self) -> u8 {
        self.level
    }

    /// The fragment's name (None before the first Initiate).
    pub fn fragment(&self) -> Option<EdgeKey> {
        self.fragment
    }

    /// True once the node knows the tree is complete.
    pub fn is_done(&self) -> bool {
        self.completion.is_some()
    }

    /// What the node learnt at the end (None before).
    pub fn completion(&self) -> Option<Completion> {
        self.completion
    }

    /// The node's tree edges so far, `(neighbour, weight)`, lightest first; once
    /// [`is_done`](Self::is_done), exactly its edges in the minimum spanning tree.
    pub fn branch_edges(&self) -> Vec<(NodeId, f64)> {
        self.branches
            .iter()
            .map(|&i| {
                let e = &self.edges[i as usize];
                (e.to, e.weight)
            })
            .collect()
    }

    /// The state of this node's end of the edge to `neighbour` (None if not a neighbour).
    pub fn edge_state(&self, neighbour: NodeId) -> Option<EdgeState> {
        self.index_of(neighbour).map(|i| self.state_of(i))
    }

    /// The neighbour over this node's in-branch (towards the core), None before the first
    /// Initiate. Once [`is_done`](Self::is_done) the in-branches form the tree rooted at the
    /// core edge: each core node's in-branch is the other one.
    pub fn in_branch(&self) -> Option<NodeId> {
        self.in_branch.map(|j| self.edges[j].to)
    }

    /// Every incident edge, `(neighbour, weight)`, lightest first (what the node was built
    /// with).
    pub fn incident(&self) -> Vec<(NodeId, f64)> {
        self.edges.iter().map(|e| (e.to, e.weight)).collect()
    }

    /// Messages waiting for a deferral rule to lift.
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    /// Messages this node has sent: `(classic, done)`, the seven GHS kinds and the `Done`
    /// announcements.
    pub fn messages_sent(&self) -> (u64, u64) {
        (self.sent_classic, self.sent_done)
    }

    /// Spontaneous wakeup; does nothing if the node is already awake.
    pub fn start(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        if self.state == NodeState::Sleeping {
            self.wakeup(out);
        }
    }

    /// Handles a message from neighbour `from`, pushing the messages to send in order. On error
    /// the machine is unchanged and nothing was pushed.
    pub fn handle(
        &mut self,
        from: NodeId,
        msg: GhsMsg,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) -> Result<(), GhsError> {
        let kind = msg.name();
        if let GhsMsg::Test { level, fragment } = msg {
            if self.quick_test(from, level, fragment, out) {
                return Ok(());
            }
        }
        let j = match msg {
            // The answer to a Test of the window: its edge without the lookup.
            GhsMsg::Accept | GhsMsg::Reject => self
                .window_tests
                .iter()
                .take(4)
                .copied()
                .find(|&t| self.edges[t].to == from)
                .or_else(|| self.index_of(from)),
            _ => self.index_of(from),
        };
        let Some(j) = j else {
            return Err(GhsError::NotANeighbour { from, kind });
        };
        if self.completion.is_some() {
            return Err(GhsError::AfterDone { from, kind });
        }
        self.check(j, &msg)
            .map_err(|why| GhsError::Unexpected { from, kind, why })?;
        if self.state == NodeState::Sleeping {
            self.wakeup(out);
        }
        self.dispatch(j, msg, out);
        self.retry_deferred(out);
        Ok(())
    }

    fn index_of(&self, id: NodeId) -> Option<usize> {
        self.by_id.get(id)
    }

    /// Answers a Test by [`Contig`]'s bits alone when that is what [`handle`](Self::handle)
    /// would do: the node awake and not done, from a neighbour over an edge without a Test of
    /// its own waiting, nothing deferred and no deferral; then it is an Accept (another name)
    /// or a Reject (that marks the edge Rejected unless it is a Branch: the bit does not
    /// override a Branch). True if answered; false: nothing was done.
    fn quick_test(
        &mut self,
        from: NodeId,
        level: u8,
        fragment: EdgeKey,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) -> bool {
        let Some(c) = &mut self.contig else {
            return false;
        };
        let Some(p) = c.pos(from) else {
            return false;
        };
        if from == self.me
            || c.get(p, ASKED_BIT)
            || self.completion.is_some()
            || self.state == NodeState::Sleeping
            || level > self.level
            || !self.deferred.is_empty()
        {
            return false;
        }
        if self.fragment != Some(fragment) {
            self.send_to(from, GhsMsg::Accept, out);
        } else {
            c.set(p, REJECTED_BIT, true);
            self.send_to(from, GhsMsg::Reject, out);
        }
        true
    }

    /// The state of edge `j`: see [`Ghs::contig`].
    fn state_of(&self, j: usize) -> EdgeState {
        let e = &self.edges[j];
        let s = e.state();
        if s == EdgeState::Basic {
            if let Some(c) = &self.contig {
                if c.pos(e.to).is_some_and(|p| c.get(p, REJECTED_BIT)) {
                    return EdgeState::Rejected;
                }
            }
        }
        s
    }

    /// Sets edge `j`'s waiting Test (0: none, else 1 + its name's index).
    fn set_asked(&mut self, j: usize, asked: u32) {
        let e = &mut self.edges[j];
        e.set_asked(asked);
        if let Some(c) = &mut self.contig {
            if let Some(p) = c.pos(e.to) {
                c.set(p, ASKED_BIT, asked != 0);
            }
        }
    }

    /// Edge `j`'s key: `(weight, min id, max id)` of this node and the neighbour.
    fn key(&self, j: usize) -> EdgeKey {
        let e = &self.edges[j];
        EdgeKey {
            weight: e.weight,
            lo: self.me.min(e.to),
            hi: self.me.max(e.to),
        }
    }

    /// The name carried by this node's Test waiting over edge `j`, if one waits.
    fn asked_name(&self, j: usize) -> Option<EdgeKey> {
        match self.edges[j].asked() {
            0 => None,
            a => Some(self.names[a as usize - 1]),
        }
    }

    /// The `asked` bits of a Test carrying `name`.
    fn name_index(&mut self, name: EdgeKey) -> u32 {
        if self.names.last() != Some(&name) {
            if self.names.len() >= NAME_LIMIT {
                self.compact_names();
            }
            self.names.push(name);
        }
        self.names.len() as u32
    }

    /// Keeps only the names of Tests still waiting (a name is added per new fragment name,
    /// so only a run with hundreds of millions of Initiates at one node gets here; at most
    /// one name per edge is then kept).
    fn compact_names(&mut self) {
        let mut kept: Vec<EdgeKey> = Vec::new();
        let mut map: std::collections::BTreeMap<u32, u32> = std::collections::BTreeMap::new();
        for e in &mut self.edges {
            let a = e.asked();
            if a != 0 {
                let new = *map.entry(a).or_insert_with(|| {
                    kept.push(self.names[a as usize - 1]);
                    kept.len() as u32
                });
                e.set_asked(new);
            }
        }
        self.names = kept;
    }

    /// Edge `j` joins the tree.
    fn set_branch(&mut self, j: usize) {
        if self.state_of(j) != EdgeState::Branch {
            self.edges[j].set_state(EdgeState::Branch);
            let at = self.branches.partition_point(|&b| (b as usize) < j);
            self.branches.insert(at, j as u32);
        }
    }

    /// A Basic edge `j` is Rejected (a Branch stays one).
    fn reject(&mut self, j: usize) {
        if self.state_of(j) == EdgeState::Basic {
            self.edges[j].set_state(EdgeState::Rejected);
        }
    }

    /// Refuses messages GHS never sends to a node in this state (checked on arrival, before
    /// any change; deferred messages were checked when they arrived).
    fn check(&self, j: usize, msg: &GhsMsg) -> Result<(), &'static str> {
        let branch = self.state_of(j) == EdgeState::Branch;
        match *msg {
            GhsMsg::Connect { level }
            | GhsMsg::Initiate { level, .. }
            | GhsMsg::Test { level, .. }
            | GhsMsg::Done { level, .. }
                if level > MAX_LEVEL =>
            {
                return Err("level above the maximum")
            }
            GhsMsg::Connect { level } => {
                if self.state_of(j) == EdgeState::Rejected {
                    return Err("connect over an edge this node rejected");
                }
                if level > self.level {
                    return Err("connect from a fragment of a higher level");
                }
            }
            GhsMsg::Initiate { .. } if !branch => return Err("initiate over a non-branch edge"),
            GhsMsg::Test { .. } => {}
            GhsMsg::Accept | GhsMsg::Reject if self.edges[j].asked() == 0 => {
                return Err("no test is waiting for an answer over this edge")
            }
            GhsMsg::Report { .. } if !branch => return Err("report over a non-branch edge"),
            GhsMsg::Report { .. } if self.in_branch != Some(j) && self.find_count == 0 => {
                return Err("report from a node this node is not waiting for")
            }
            GhsMsg::ChangeRoot
                if self.in_branch != Some(j)
                    || self.state != NodeState::Found
                    || self.best_edge.is_none() =>
            {
                return Err("change-root while not on the path to the fragment's best edge")
            }
            GhsMsg::Done { .. } if self.in_branch != Some(j) || self.state != NodeState::Found => {
                return Err("done over an edge that does not lead to the core")
            }
            _ => {}
        }
        Ok(())
    }

    fn send(&mut self, j: usize, msg: GhsMsg, out: &mut Vec<(NodeId, GhsMsg)>) {
        self.send_to(self.edges[j].to, msg, out);
    }

    fn send_to(&mut self, to: NodeId, msg: GhsMsg, out: &mut Vec<(NodeId, GhsMsg)>) {
        if msg.is_classic() {
            self.sent_classic += 1;
        } else {
            self.sent_done += 1;
        }
        out.push((to, msg));
    }

    fn wakeup(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        self.level = 0;
        self.state = NodeState::Found;
        self.find_count = 0;
        if self.edges.is_empty() {
            self.completion = Some(Completion {
                fragment: None,
                level: 0,
                nodes: 1,
                total_weight: 0.0,
            });
            return;
        }
        // The lightest edge is edges[0].
        self.set_branch(0);
        self.send(0, GhsMsg::Connect { level: 0 }, out);
    }

    /// True when a deferral rule holds for this message now.
    fn must_wait(&self, j: usize, msg: &GhsMsg) -> bool {
        match *msg {
            GhsMsg::Connect { level } => {
                level >= self.level && self.state_of(j) == EdgeState::Basic
            }
            GhsMsg::Test { level, .. } => level > self.level,
            GhsMsg::Report { .. } => self.in_branch == Some(j) && self.state == NodeState::Find,
            _ => false,
        }
    }

    fn dispatch(&mut self, j: usize, msg: GhsMsg, out: &mut Vec<(NodeId, GhsMsg)>) {
        if self.must_wait(j, &msg) {
            self.deferred.push_back((j, msg));
            return;
        }
        match msg {
            GhsMsg::Connect { level } => self.on_connect(j, level, out),
            GhsMsg::Initiate {
                level,
                fragment,
                state,
            } => self.on_initiate(j, level, fragment, state, out),
            GhsMsg::Test { level, fragment } => self.on_test(j, level, fragment, out),
            GhsMsg::Accept => {
                if self.answered(j) {
                    self.found_outgoing(j, out);
                } else if self.state == NodeState::Find {
                    // A stale Accept says nothing now; the edge may be tested again.
                    self.test(out);
                }
            }
            GhsMsg::Reject => {
                let current = self.answered(j);
                self.reject(j);
                if current || self.state == NodeState::Find {
                    self.test(out);
                }
            }
            GhsMsg::Report {
                best,
                nodes,
                weight,
            } => self.on_report(j, best, nodes, weight, out),
            GhsMsg::ChangeRoot => self.change_root(out),
            GhsMsg::Done {
                fragment,
                level,
                nodes,
                total_weight,
            } => {
                self.completion = Some(Completion {
                    fragment: Some(fragment),
                    level,
                    nodes,
                    total_weight,
                });
                self.announce(j, msg, out);
            }
        }
    }

    fn retry_deferred(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        loop {
            let mut progressed = false;
            for _ in 0..self.deferred.len() {
                let Some((j, msg)) = self.deferred.pop_front() else {
                    break;
                };
                if self.must_wait(j, &msg) {
                    self.deferred.push_back((j, msg));
                } else {
                    self.dispatch(j, msg, out);
                    progressed = true;
                }
            }
            if !progressed {
                return;
            }
        }
    }

    fn on_connect(&mut self, j: usize, level: u8, out: &mut Vec<(NodeId, GhsMsg)>) {
        if level < self.level {
            // Absorb the lower-level fragment.
            self.set_branch(j);
            let fragment = self.fragment_name();
            let state = match self.state {
                NodeState::Find => SearchState::Find,
                _ => SearchState::Found,
            };
            self.send(
                j,
                GhsMsg::Initiate {
                    level: self.level,
                    fragment,
                    state,
                },
                out,
            );
            if state == SearchState::Find {
                self.find_count += 1;
            }
        } else {
            // Both fragments chose this edge (it is Branch here): merge into a new core.
            let fragment = self.key(j);
            self.send(
                j,
                GhsMsg::Initiate {
                    level: self.level + 1,
                    fragment,
                    state: SearchState::Find,
                },
                out,
            );
        }
    }

    /// The fragment's name; only asked for at a level >= 1 (set by an Initiate), or at level 0
    /// when absorbing, which a level-0 node never does (nothing is below level 0).
    fn fragment_name(&self) -> EdgeKey {
        match self.fragment {
            Some(f) => f,
            None => self.key(0),
        }
    }

    fn on_initiate(
        &mut self,
        j: usize,
        level: u8,
        fragment: EdgeKey,
        state: SearchState,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) {
        self.level = level;
        self.fragment = Some(fragment);
        self.state = match state {
            SearchState::Find => NodeState::Find,
            SearchState::Found => NodeState::Found,
        };
        self.in_branch = Some(j);
        self.best_edge = None;
        self.best = None;
        self.sub_nodes = 1;
        self.sub_weight = 0.0;
        // A node reports before a new Initiate, and its report made the phase's Tests stale:
        // in a correct run nothing of this phase waits here. (A hostile sender can make it so;
        // such Tests go stale too.)
        self.make_stale();
        self.probe = self.basic_from;
        self.accepted = None;
        for k in 0..self.branches.len() {
            let i = self.branches[k] as usize;
            if i != j {
                self.send(
                    i,
                    GhsMsg::Initiate {
                        level,
                        fragment,
                        state,
                    },
                    out,
                );
                if state == SearchState::Find {
                    self.find_count += 1;
                }
            }
        }
        if state == SearchState::Find {
            self.test(out);
        }
    }

    /// This phase's Test over edge `j` found it outgoing.
    fn found_outgoing(&mut self, j: usize, out: &mut Vec<(NodeId, GhsMsg)>) {
        if self.accepted.is_none_or(|a| j < a) {
            self.accepted = Some(j);
        }
        let key = self.key(j);
        if lighter(Some(key), self.best) {
            self.best_edge = Some(j);
            self.best = Some(key);
        }
        self.report(out);
    }

    /// The Test over edge `j` is answered (an Accept, a Reject, or a crossing Test); true if
    /// it was one of this phase's.
    fn answered(&mut self, j: usize) -> bool {
        self.set_asked(j, 0);
        if self.edges[j].take_current() {
            self.window_tests.retain(|&t| t != j);
            true
        } else {
            self.stale -= 1;
            false
        }
    }

    /// Fills the window: Tests the next Basic edges of this phase, lightest first, until
    /// `window` Tests wait, an Accept made heavier edges useless, or the next edge still waits
    /// for a stale Test's answer; then reports if the phase's search is over. With a window of
    /// 1 this is the classic `test` procedure.
    fn test(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        while self.basic_from < self.edges.len()
            && self.state_of(self.basic_from) != EdgeState::Basic
        {
            self.basic_from += 1;
        }
        self.probe = self.probe.max(self.basic_from);
        while self.window_tests.len() < self.window
            && self.accepted.is_none()
            && self.probe < self.edges.len()
        {
            let t = self.probe;
            if self.state_of(t) != EdgeState::Basic {
                self.probe += 1;
                continue;
            }
            if self.edges[t].asked() != 0 {
                // One Test per edge at a time: wait for the stale one's answer.
                break;
            }
            self.probe += 1;
            let fragment = self.fragment_name();
            let asked = self.name_index(fragment);
            self.set_asked(t, asked);
            self.edges[t].tag |= CURRENT;
            self.window_tests.push(t);
            let msg = GhsMsg::Test {
                level: self.level,
                fragment,
            };
            self.send(t, msg, out);
        }
        self.report(out);
    }

    fn on_test(&mut self, j: usize, level: u8, fragment: EdgeKey, out: &mut Vec<(NodeId, GhsMsg)>) {
        if self.asked_name(j) == Some(fragment) {
            // Crossing Tests of one fragment: each answers the other. Both ends compare the
            // same two names (the one each Test carried), so both take this branch.
            self.reject(j);
            if self.answered(j) || self.state == NodeState::Find {
                self.test(out);
            }
            return;
        }
        if self.fragment != Some(fragment) {
            self.send(j, GhsMsg::Accept, out);
            if self.window > 1 && self.edges[j].current() && level >= self.level {
                // j was in another fragment of a level >= ours when it sent this, and ours
                // cannot have joined it since (we still search): the edge is outgoing now, as
                // the Accept that j will send says. That Accept is awaited as a stale one.
                self.edges[j].take_current();
                self.window_tests.retain(|&t| t != j);
                self.stale += 1;
                self.found_outgoing(j, out);
            }
            return;
        }
        self.reject(j);
        self.send(j, GhsMsg::Reject, out);
    }

    /// This phase's waiting Tests become stale.
    fn make_stale(&mut self) {
        for t in std::mem::take(&mut self.window_tests) {
            self.edges[t].take_current();
            self.stale += 1;
        }
    }

    /// True when this node's search is over: every child reported, and either a Test found an
    /// outgoing edge and every lighter Test of the phase is answered, or no Test is waiting
    /// (stale ones included, so that nothing arrives after the end) and no Basic edge is left.
    fn search_over(&self) -> bool {
        if self.find_count != 0 || self.state != NodeState::Find {
            return false;
        }
        match self.accepted {
            Some(a) => self.window_tests.iter().all(|&t| t > a),
            None => {
                self.window_tests.is_empty() && self.stale == 0 && self.probe >= self.edges.len()
            }
        }
    }

    fn report(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        if !self.search_over() {
            return;
        }
        let Some(parent) = self.in_branch else {
            // Only a node in Find reports, and Find comes with an in-branch.
            return;
        };
        // Tests heavier than the accepted edge go stale: their answers no longer matter.
        self.make_stale();
        self.state = NodeState::Found;
        let msg = GhsMsg::Report {
            best: self.best,
            nodes: self.sub_nodes,
            weight: self.sub_weight,
        };
        self.send(parent, msg, out);
    }

    fn on_report(
        &mut self,
        j: usize,
        best: Option<EdgeKey>,
        nodes: u32,
        weight: f64,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) {
        if self.in_branch != Some(j) {
            // Checked > 0 on arrival (reports off the in-branch are never deferred).
            self.find_count = self.find_count.saturating_sub(1);
            self.sub_nodes = self.sub_nodes.saturating_add(nodes);
            self.sub_weight += weight + self.edges[j].weight;
            if lighter(best, self.best) {
                self.best = best;
                self.best_edge = Some(j);
            }
            self.report(out);
        } else if lighter(self.best, best) {
            self.change_root(out);
        } else if best.is_none() && self.best.is_none() {
            self.halt(j, nodes, weight, out);
        }
    }

    fn change_root(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        let Some(b) = self.best_edge else {
            return;
        };
        if self.state_of(b) == EdgeState::Branch {
            self.send(b, GhsMsg::ChangeRoot, out);
        } else {
            self.send(b, GhsMsg::Connect { level: self.level }, out);
            self.set_branch(b);
        }
    }

    /// The core node's end: the other core node reported `nodes` and `weight` over `core`.
    fn halt(&mut self, core: usize, nodes: u32, weight: f64, out: &mut Vec<(NodeId, GhsMsg)>) {
        let fragment = self.fragment_name();
        // Both core nodes add (mine + theirs) + core, and + is commutative: identical results.
        let total_weight = (self.sub_weight + weight) + self.edges[core].weight;
        let nodes = self.sub_nodes.saturating_add(nodes);
        self.completion = Some(Completion {
            fragment: Some(fragment),
            level: self.level,
            nodes,
            total_weight,
        });
        let done = GhsMsg::Done {
            fragment,
            level: self.level,
            nodes,
            total_weight,
        };
        self.announce(core, done, out);
    }

    /// Sends `done` over every branch but `except`.
    fn announce(&mut self, except: usize, done: GhsMsg, out: &mut Vec<(NodeId, GhsMsg)>) {
        for k in 0..self.branches.len() {
            let i = self.branches[k] as usize;
            if i != except {
                self.send(i, done, out);
            }
        }
    }
}

/// What a node of an MST run hands to its application when the tree is complete: its own
/// tree edges and what every node learnt with the end. Delivered once, as the bytes of
/// [`MstResult::encode`] in an [`Output::Deliver`] at offset 0 (before `Output::Finished`), so
/// any driver hands it to the application like a broadcast's data and a test reads it back
/// with [`MstResult::parse`].
///
/// Encoding (big-endian): nodes u32, total weight f64 bits, branch count u32, then per tree
/// edge of this node, lightest first: neighbour u32, weight f64 bits (16 + 12 per edge bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct MstResult {
    /// Nodes in the tree (the node's connected component of the spec's graph).
    pub nodes: u32,
    /// Sum of the tree's edge weights, bit-identical at every node.
    pub total_weight: f64,
    /// This node's tree edges, `(neighbour, weight)`, lightest first (GHS's key order).
    pub branches: Vec<(NodeId, f64)>,
}

impl MstResult {
    /// The result of a machine that is done (None before).
    pub fn of(ghs: &Ghs) -> Option<MstResult> {
        let c = ghs.completion()?;
        Some(MstResult {
            nodes: c.nodes,
            total_weight: c.total_weight,
            branches: ghs.branch_edges(),
        })
    }

    /// The bytes delivered (see the type's docs).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(16 + 12 * self.branches.len());
        b.put_u32(self.nodes);
        b.put_u64(self.total_weight.to_bits());
        b.put_u32(self.branches.len() as u32);
        for &(to, w) in &self.branches {
            b.put_u32(to.0);
            b.put_u64(w.to_bits());
        }
        b.freeze()
    }

    /// Reads what [`encode`](Self::encode) wrote; an error for any other length.
    pub fn parse(bytes: &[u8]) -> Result<MstResult, String> {
        if bytes.len() < 16 {
            return Err(format!(
                "an MST result of {} bytes, at least 16 expected",
                bytes.len()
            ));
        }
        let count = u64::from(be_u32(&bytes[12..16]));
        let expected = 16 + 12 * count;
        if bytes.len() as u64 != expected {
            return Err(format!(
                "an MST result of {} bytes for {count} edges, expected {expected}",
                bytes.len()
            ));
        }
        Ok(MstResult {
            nodes: be_u32(&bytes[0..4]),
            total_weight: f64::from_bits(be_u64(&bytes[4..12])),
            branches: bytes[16..]
                .chunks_exact(12)
                .map(|e| (NodeId(be_u32(&e[..4])), f64::from_bits(be_u64(&e[4..]))))
                .collect(),
        })
    }
}

/// What the weights of an MST spec's graph measure (the issue's two metrics).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightMetric {
    /// One-way latency in seconds: the tree of least total latency, for short messages.
    LatencyS,
    /// The inverse of the link's bandwidth, s/byte: for large messages (a minimum spanning
    /// tree is also a minimum-bottleneck tree, so it keeps the slowest link used fast).
    InverseBandwidth,
}

/// The parameters of an MST run ([`CollectiveSpec::Mst`](crate::collective::CollectiveSpec)):
/// the weighted graph, as undirected edges `(a, b, weight)`, each pair at most once; each node
/// takes its incident edges. A member in no edge is a tree of its own (done at its start); a
/// disconnected graph gives each component its own tree (every node wakes at the start).
/// Both ends of an edge must hold its weight bit for bit: the initiator builds from the spec
/// itself and the others from its JSON, which the workspace parses exactly (serde_json's
/// `float_roundtrip`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MstSpec {
    /// What the weights measure (documentation for the application; GHS only compares them).
    pub metric: WeightMetric,
    /// The edges, weights finite and >= 0.
    pub edges: Vec<(NodeId, NodeId, f64)>,
    /// Every node tests up to this many edges at once ([`Ghs::with_test_window`]; 1: classic
    /// GHS); [`DEFAULT_TEST_WINDOW`] when absent from the JSON.
    #[serde(default = "default_test_window")]
    pub test_window: u32,
}

impl MstSpec {
    /// The complete graph of a symmetric matrix `weights[a][b]` (the diagonal is ignored).
    pub fn complete(metric: WeightMetric, weights: &[Vec<f64>]) -> Result<MstSpec, String> {
        let n = weights.len();
        let mut edges = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        for (a, row) in weights.iter().enumerate() {
            if row.len() != n {
                return Err(format!(
                    "row {a} of the weights has {} entries, not {n}",
                    row.len()
                ));
            }
            for b in a + 1..n {
                if row[b].to_bits() != weights[b][a].to_bits() {
                    return Err(format!(
                        "the weights are not symmetric: {a}-{b} is {}, {b}-{a} is {}",
                        row[b], weights[b][a]
                    ));
                }
                edges.push((NodeId(a as u32), NodeId(b as u32), row[b]));
            }
        }
        Ok(MstSpec {
            metric,
            edges,
            test_window: DEFAULT_TEST_WINDOW,
        })
    }

    /// Node `me`'s incident edges, `(neighbour, weight)`.
    pub fn incident(&self, me: NodeId) -> Vec<(NodeId, f64)> {
        self.edges
            .iter()
            .filter_map(|&(a, b, w)| match me {
                _ if me == a => Some((b, w)),
                _ if me == b => Some((a, w)),
                _ => None,
            })
            .collect()
    }

    /// Checks that every edge joins two distinct members by a weight GHS takes, each pair once.
    pub fn check(&self, is_member: impl Fn(NodeId) -> bool) -> Result<(), String> {
        if self.test_window == 0 {
            return Err("the MST's test window is 0: expected at least 1".into());
        }
        let mut pairs = Vec::with_capacity(self.edges.len());
        for &(a, b, w) in &self.edges {
            for end in [a, b] {
                if !is_member(end) {
                    return Err(format!(
                        "the MST graph's edge {a}-{b} names node {end}, not a member"
                    ));
                }
            }
            if EdgeKey::new(a, b, w).is_none() {
                return Err(format!(
                    "the MST graph's edge {a}-{b} of weight {w}: expected two distinct nodes and a finite weight >= 0"
                ));
            }
            pairs.push((a.min(b), a.max(b)));
        }
        pairs.sort_unstable();
        if let Some(w) = pairs.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!(
                "the MST graph has the edge {}-{} twice",
                w[0].0, w[0].1
            ));
        }
        Ok(())
    }
}

/// One node of an MST run as a [`Protocol`]: [`Ghs`] with its messages in [`GhsFrame`]s.
///
/// - `Input::Start` wakes the node ([`Ghs::start`]; under the driver contract every node wakes
///   spontaneously, which GHS allows); `Input::Message` of its transfer goes to
///   [`Ghs::handle`]; the messages GHS pushes become `Output::Send`s in the same order (GHS
///   relies on FIFO links, which the contract gives).
/// - Once [`Ghs::is_done`]: the node's [`MstResult`] as an `Output::Deliver`, then
///   `Output::Finished`, exactly once (a node without edges does both at `Start`). A done node
///   sends nothing more; a GHS message after that is refused (no correct run sends one).
/// - A refused GHS message ([`GhsError`]) is a [`ProtocolError::UnexpectedMessage`] naming the
///   sender and the frame kind; a frame of another run is [`ProtocolError::WrongTransfer`]; a
///   frame of another family is unexpected. The machine is then unchanged.
/// - `Input::PeerFailed` while running: `Output::Aborted` (GHS has no failure handling; any
///   member lost leaves the spec's graph without a spanning tree). After the end it is ignored.
/// - No timers, no send completions, no compute tasks, no randomness.
#[derive(Clone, Debug)]
pub struct GhsProtocol {
    ghs: Ghs,
    transfer: TransferId,
    started: bool,
    status: Status,
    scratch: Vec<(NodeId, GhsMsg)>,
}

impl GhsProtocol {
    /// The machine of node `me` in the run `transfer`, with its incident edges (see
    /// [`Ghs::new`]).
    pub fn new(
        me: NodeId,
        transfer: TransferId,
        edges: impl IntoIterator<Item = (NodeId, f64)>,
    ) -> Result<GhsProtocol, GhsSetupError> {
        Ok(GhsProtocol {
            ghs: Ghs::new(me, edges)?,
            transfer,
            started: false,
            status: Status::Running,
            scratch: Vec::new(),
        })
    }

    /// The same machine testing up to `window` edges at once ([`Ghs::with_test_window`]).
    pub fn with_test_window(mut self, window: u32) -> Result<GhsProtocol, GhsSetupError> {
        self.ghs = self.ghs.with_test_window(window)?;
        Ok(self)
    }

    /// The GHS machine (its state, branches, counters).
    pub fn ghs(&self) -> &Ghs {
        &self.ghs
    }

    /// Sends what GHS pushed, then ends if GHS is done.
    fn emit(&mut self, out: &mut Outputs) {
        for (to, msg) in self.scratch.drain(..) {
            out.send(
                to,
                Message::Ghs(GhsFrame {
                    transfer: self.transfer,
                    msg,
                }),
            );
        }
        if self.status == Status::Running {
            if let Some(result) = MstResult::of(&self.ghs) {
                out.push(Output::Deliver {
                    transfer: self.transfer,
                    offset: 0,
                    data: result.encode(),
                });
                self.status = Status::Finished;
                out.push(Output::Finished);
            }
        }
    }
}

impl Protocol for GhsProtocol {
    fn node(&self) -> NodeId {
        self.ghs.node()
    }

    fn handle(&mut self, _now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => {
                if !self.started && self.status == Status::Running {
                    self.started = true;
                    self.ghs.start(&mut self.scratch);
                    self.emit(out);
                }
                Ok(())
            }
            Input::Message {
                from,
                message: Message::Ghs(frame),
            } => {
                let kind = frame.message_kind();
                ProtocolError::check_transfer(from, kind, self.transfer, frame.transfer)?;
                if self.status == Status::Aborted {
                    // Neighbours still running do not know yet; nothing to do here.
                    return Ok(());
                }
                let why = |e: GhsError| match e {
                    GhsError::NotANeighbour { .. } => "from a node that is not a neighbour",
                    GhsError::AfterDone { .. } => "after the tree was complete",
                    GhsError::Unexpected { why, .. } => why,
                };
                self.ghs
                    .handle(from, frame.msg, &mut self.scratch)
                    .map_err(|e| ProtocolError::UnexpectedMessage {
                        from,
                        kind,
                        why: why(e),
                    })?;
                self.emit(out);
                Ok(())
            }
            Input::Message { from, message } => Err(ProtocolError::UnexpectedMessage {
                from,
                kind: message.kind(),
                why: "an MST node takes only GHS messages",
            }),
            // No timers are set; a stale one from a driver is harmless.
            Input::Timer(_) | Input::App(_) => Ok(()),
            Input::Command(Command::ComputeDone { task }) => {
                Err(ProtocolError::UnknownTask { task })
            }
            Input::SendComplete { to, id } => Err(ProtocolError::UnknownSend { to, id }),
            Input::PeerFailed(peer) => {
                if self.status == Status::Running {
                    self.status = Status::Aborted;
                    out.push(Output::Aborted(AbortReason::PeerFailed { peer }));
                }
                Ok(())
            }
        }
    }

    fn status(&self) -> Status {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both lookups (a direct table for ids spanning at most twice the degree, a binary
    /// search otherwise) agree with a linear search, for members and strangers alike.
    /// An edge end is 16 bytes (it was 48): on a complete graph of 4,096 nodes, 268 MB
    /// instead of 805 MB, read at random by every message.
    #[test]
    fn an_edge_end_takes_16_bytes() {
        assert_eq!(std::mem::size_of::<Edge>(), 16);
    }

    /// The table of the names waiting Tests carried keeps only those still waiting once it
    /// is full (3 names in unit tests).
    #[test]
    fn the_names_of_waiting_tests_survive_compaction() {
        let edges = (1..6).map(|i| (n(i), f64::from(i)));
        let mut g = Ghs::new(n(0), edges).unwrap();
        let (a, b, c, d) = (
            key(7, 8, 1.0),
            key(7, 9, 1.0),
            key(8, 9, 2.0),
            key(1, 2, 3.0),
        );
        let ia = g.name_index(a);
        assert_eq!(g.name_index(a), ia, "the last name is not added again");
        g.set_asked(0, ia);
        let ib = g.name_index(b);
        let ic = g.name_index(c);
        g.set_asked(3, ic);
        g.set_asked(4, ic);
        assert_eq!((ia, ib, ic, g.names.len()), (1, 2, 3, 3));
        // Full: b (no Test waits with it) goes, a and c stay, d comes.
        let id = g.name_index(d);
        g.set_asked(1, id);
        assert_eq!(g.names, vec![a, c, d]);
        let asked: Vec<Option<EdgeKey>> = (0..5).map(|j| g.asked_name(j)).collect();
        assert_eq!(asked, vec![Some(a), Some(d), None, Some(c), Some(c)]);
        // The neighbours are 1..=5: the per-id bits follow the edges.
        let c2 = g.contig.as_ref().unwrap();
        let bits: Vec<bool> = (0..5).map(|p| c2.get(p, ASKED_BIT)).collect();
        assert_eq!(bits, vec![true, true, false, true, true]);
    }

    /// GHS on complete graphs, run once with ids `0..n` (the Tests answered by the per-id bits)
    /// and once with ids `0, 2, 4...` (every message by the lookup and the edges): the same
    /// messages in the same order, with every window.
    #[test]
    fn the_per_id_bits_answer_tests_as_the_edges_do() {
        use rand::{Rng, SeedableRng};
        for (seed, nodes, window) in [(1u64, 12u32, 1u32), (2, 17, 1), (3, 16, 3), (4, 20, 16)] {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            // Few distinct weights: many ties, broken by the ids. The upper triangle, row by row.
            let upper: Vec<f64> = (0..nodes * (nodes - 1) / 2)
                .map(|_| f64::from(rng.gen_range(0u32..4)))
                .collect();
            let w = |a: u32, b: u32| {
                let (lo, hi) = (a.min(b), a.max(b));
                upper[(lo * nodes - lo * (lo + 1) / 2 + hi - lo - 1) as usize]
            };
            let run = |stride: u32| {
                let mut g: Vec<Ghs> = (0..nodes)
                    .map(|a| {
                        let mine = (0..nodes)
                            .filter(|&b| b != a)
                            .map(|b| (n(b * stride), w(a, b)));
                        Ghs::new(n(a * stride), mine)
                            .unwrap()
                            .with_test_window(window)
                            .unwrap()
                    })
                    .collect();
                assert_eq!(g[1].contig.is_some(), stride == 1);
                let mut queue = std::collections::VecDeque::new();
                let mut out = Vec::new();
                let mut log = Vec::new();
                for (a, m) in g.iter_mut().enumerate() {
                    m.start(&mut out);
                    queue.extend(
                        out.drain(..)
                            .map(|(to, msg)| (a as u32, to.0 / stride, msg)),
                    );
                }
                while let Some((from, to, msg)) = queue.pop_front() {
                    log.push((from, to, msg));
                    g[to as usize]
                        .handle(n(from * stride), msg, &mut out)
                        .unwrap();
                    queue.extend(out.drain(..).map(|(t, msg)| (to, t.0 / stride, msg)));
                }
                assert!(g.iter().all(Ghs::is_done));
                log
            };
            let (dense, spread) = (run(1), run(2));
            assert_eq!(dense.len(), spread.len(), "seed {seed}");
            for (x, y) in dense.iter().zip(&spread) {
                // Names and Done's fragment carry ids: compare kinds and ends.
                assert_eq!(
                    (x.0, x.1, x.2.kind()),
                    (y.0, y.1, y.2.kind()),
                    "seed {seed}"
                );
            }
        }
    }

    #[test]
    fn neighbour_lookup() {
        for ids in [vec![1u32, 2, 3, 5], vec![7, 100, 4000], vec![9], vec![]] {
            let g = Ghs::new(NodeId(0), ids.iter().map(|&i| (NodeId(i), f64::from(i)))).unwrap();
            assert_eq!(
                matches!(g.by_id, Lookup::Dense { .. }),
                ids.len() == 4 || ids.len() == 1
            );
            for probe in 0..4100 {
                let want = g.edges.iter().position(|e| e.to == NodeId(probe));
                assert_eq!(g.index_of(NodeId(probe)), want, "{ids:?}, {probe}");
            }
        }
    }

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    fn key(a: u32, b: u32, w: f64) -> EdgeKey {
        EdgeKey::new(n(a), n(b), w).unwrap()
    }

    /// `g` takes an Initiate from node `from`.
    fn initiate(
        g: &mut Ghs,
        from: u32,
        level: u8,
        fragment: EdgeKey,
        state: SearchState,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) {
        let msg = GhsMsg::Initiate {
            level,
            fragment,
            state,
        };
        g.handle(n(from), msg, out).unwrap();
    }

    /// `g` takes a Test from node `from`.
    fn test(g: &mut Ghs, from: u32, level: u8, fragment: EdgeKey, out: &mut Vec<(NodeId, GhsMsg)>) {
        g.handle(n(from), GhsMsg::Test { level, fragment }, out)
            .unwrap();
    }

    #[test]
    fn keys_order_by_weight_then_ids() {
        assert!(key(5, 6, 1.0) < key(0, 1, 2.0));
        assert!(key(0, 9, 1.0) < key(1, 2, 1.0));
        assert!(key(1, 2, 1.0) < key(1, 3, 1.0));
        assert_eq!(key(3, 1, 1.0), key(1, 3, 1.0));
        assert_eq!(key(1, 3, -0.0).weight().to_bits(), 0);
        assert!(EdgeKey::new(n(1), n(1), 1.0).is_none());
        assert!(EdgeKey::new(n(1), n(2), -1.0).is_none());
        assert!(EdgeKey::new(n(1), n(2), f64::NAN).is_none());
        assert!(EdgeKey::new(n(1), n(2), f64::INFINITY).is_none());
        assert!(lighter(Some(key(0, 1, 9.0)), None));
        assert!(!lighter(None, None));
        assert!(!lighter(None, Some(key(0, 1, 9.0))));
    }

    #[test]
    fn bad_edges_are_refused() {
        assert_eq!(
            Ghs::new(n(1), [(n(1), 1.0)]).unwrap_err(),
            GhsSetupError::SelfLoop { node: n(1) }
        );
        assert_eq!(
            Ghs::new(n(1), [(n(2), 1.0), (n(3), 1.0), (n(2), 5.0)]).unwrap_err(),
            GhsSetupError::DuplicateNeighbour {
                node: n(1),
                neighbour: n(2)
            }
        );
        for w in [-0.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = Ghs::new(n(1), [(n(2), w)]).unwrap_err();
            assert!(matches!(err, GhsSetupError::BadWeight { neighbour, .. } if neighbour == n(2)));
            assert!(err.to_string().contains("finite number >= 0"), "{err}");
        }
    }

    #[test]
    fn wakeup_connects_over_the_lightest_edge() {
        let mut g = Ghs::new(n(5), [(n(9), 3.0), (n(2), 1.0), (n(7), 1.0)]).unwrap();
        assert_eq!(g.state(), NodeState::Sleeping);
        let mut out = Vec::new();
        g.start(&mut out);
        // Ties: (1.0, 2, 5) < (1.0, 5, 7).
        assert_eq!(out, vec![(n(2), GhsMsg::Connect { level: 0 })]);
        assert_eq!(g.state(), NodeState::Found);
        assert_eq!(g.branch_edges(), vec![(n(2), 1.0)]);
        out.clear();
        g.start(&mut out);
        assert!(out.is_empty(), "a second wakeup does nothing");
    }

    #[test]
    fn an_isolated_node_is_done_when_it_wakes() {
        let mut g = Ghs::new(n(3), []).unwrap();
        assert!(!g.is_done());
        let mut out = Vec::new();
        g.start(&mut out);
        assert!(out.is_empty());
        let c = g.completion().unwrap();
        assert_eq!((c.fragment, c.nodes, c.total_weight), (None, 1, 0.0));
    }

    /// Two nodes, messages handed over by hand: the whole exchange.
    #[test]
    fn two_nodes_by_hand() {
        let mut a = Ghs::new(n(0), [(n(1), 2.5)]).unwrap();
        let mut b = Ghs::new(n(1), [(n(0), 2.5)]).unwrap();
        let mut out = Vec::new();
        a.start(&mut out);
        assert_eq!(out, vec![(n(1), GhsMsg::Connect { level: 0 })]);
        out.clear();
        // b sleeps: it wakes (Connect(0) to a), then sees a's Connect on its branch: merge.
        b.handle(n(0), GhsMsg::Connect { level: 0 }, &mut out)
            .unwrap();
        let core = key(0, 1, 2.5);
        let init = GhsMsg::Initiate {
            level: 1,
            fragment: core,
            state: SearchState::Find,
        };
        assert_eq!(
            out,
            vec![(n(0), GhsMsg::Connect { level: 0 }), (n(0), init)]
        );
        out.clear();
        a.handle(n(1), GhsMsg::Connect { level: 0 }, &mut out)
            .unwrap();
        assert_eq!(out, vec![(n(1), init)]);
        out.clear();
        // a gets b's Initiate: Find, nothing to test, Report(inf).
        a.handle(n(1), init, &mut out).unwrap();
        let report = GhsMsg::Report {
            best: None,
            nodes: 1,
            weight: 0.0,
        };
        assert_eq!(out, vec![(n(1), report)]);
        assert_eq!(a.state(), NodeState::Found);
        out.clear();
        // Out of FIFO order (a's Report before a's Initiate, which a link never does): b, at
        // level 0 without an in-branch, waits for no report and refuses it, unchanged.
        assert!(matches!(
            b.handle(n(0), report, &mut out),
            Err(GhsError::Unexpected { .. })
        ));
        assert!(out.is_empty());
        b.handle(n(0), init, &mut out).unwrap();
        assert_eq!(out, vec![(n(0), report)]);
        out.clear();
        b.handle(n(0), report, &mut out).unwrap();
        assert!(
            out.is_empty(),
            "no branch besides the core: no Done to send"
        );
        a.handle(n(1), report, &mut out).unwrap();
        for g in [&a, &b] {
            let c = g.completion().unwrap();
            assert_eq!(c.fragment, Some(core));
            assert_eq!((c.level, c.nodes, c.total_weight), (1, 2, 2.5));
            assert_eq!(g.deferred_len(), 0);
            assert_eq!(g.messages_sent(), (3, 0));
        }
        // Nothing is accepted after the end.
        assert_eq!(
            a.handle(n(1), GhsMsg::Accept, &mut out),
            Err(GhsError::AfterDone {
                from: n(1),
                kind: "accept"
            })
        );
    }

    /// The test window by hand: node 1 with edges to 0 (w 1, its core edge), 2 (w 2), 3 (w 3),
    /// 4 (w 4) and a window of 2.
    #[test]
    fn test_window_by_hand() {
        assert_eq!(
            Ghs::new(n(1), [(n(0), 1.0)])
                .unwrap()
                .with_test_window(0)
                .unwrap_err(),
            GhsSetupError::ZeroTestWindow { node: n(1) }
        );
        let edges = [(n(0), 1.0), (n(2), 2.0), (n(3), 3.0), (n(4), 4.0)];
        let mut g = Ghs::new(n(1), edges).unwrap().with_test_window(2).unwrap();
        assert_eq!(g.test_window(), 2);
        let mut out = Vec::new();
        g.start(&mut out);
        assert_eq!(out, vec![(n(0), GhsMsg::Connect { level: 0 })]);
        out.clear();
        // The merge with 0: two Tests at once, the lightest Basic edges.
        let core = key(0, 1, 1.0);
        let find = |level, fragment| GhsMsg::Initiate {
            level,
            fragment,
            state: SearchState::Find,
        };
        g.handle(n(0), find(1, core), &mut out).unwrap();
        let test = |level, fragment| GhsMsg::Test { level, fragment };
        assert_eq!(out, vec![(n(2), test(1, core)), (n(3), test(1, core))]);
        out.clear();
        // 2 rejects: the window slides to 4.
        g.handle(n(2), GhsMsg::Reject, &mut out).unwrap();
        assert_eq!(out, vec![(n(4), test(1, core))]);
        assert_eq!(g.edge_state(n(2)), Some(EdgeState::Rejected));
        out.clear();
        // 3 accepts: nothing lighter waits, so node 1 reports at once; the Test to 4 goes
        // stale.
        g.handle(n(3), GhsMsg::Accept, &mut out).unwrap();
        let best = key(1, 3, 3.0);
        assert_eq!(
            out,
            vec![(
                n(0),
                GhsMsg::Report {
                    best: Some(best),
                    nodes: 1,
                    weight: 0.0
                }
            )]
        );
        assert_eq!(g.state(), NodeState::Found);
        out.clear();
        // The stale Test's Accept changes nothing; a second one is refused.
        g.handle(n(4), GhsMsg::Accept, &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(g.edge_state(n(4)), Some(EdgeState::Basic));
        assert!(g.handle(n(4), GhsMsg::Accept, &mut out).is_err());
        // Next phase (level 2, new core 1-3): the Tests start again at 3.
        g.handle(n(0), GhsMsg::ChangeRoot, &mut out).unwrap();
        assert_eq!(out, vec![(n(3), GhsMsg::Connect { level: 1 })]);
        out.clear();
        let core2 = key(1, 3, 3.0);
        g.handle(n(3), find(2, core2), &mut out).unwrap();
        assert_eq!(out, vec![(n(0), find(2, core2)), (n(4), test(2, core2))]);
        out.clear();
        // 4's own Test carrying the same name crosses ours: each answers the other, no
        // reply; node 1 waits only for 0's report.
        g.handle(n(4), test(2, core2), &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(g.edge_state(n(4)), Some(EdgeState::Rejected));
        let none = GhsMsg::Report {
            best: None,
            nodes: 1,
            weight: 0.0,
        };
        g.handle(n(0), none, &mut out).unwrap();
        assert_eq!(
            out,
            vec![(
                n(3),
                GhsMsg::Report {
                    best: None,
                    nodes: 2,
                    weight: 1.0
                }
            )]
        );
    }

    /// A Test learnt for free: node 1 (window 2) waits for its Test over 2 when 2's own Test
    /// arrives from another fragment of the same level; both are accepted.
    #[test]
    fn an_accept_learnt_from_a_crossing_test() {
        let edges = [(n(0), 1.0), (n(2), 2.0), (n(3), 3.0)];
        let mut g = Ghs::new(n(1), edges).unwrap().with_test_window(2).unwrap();
        let mut out = Vec::new();
        g.start(&mut out);
        let core = key(0, 1, 1.0);
        initiate(&mut g, 0, 1, core, SearchState::Find, &mut out);
        out.clear();
        // 2's fragment (level 1, another name) tests the edge: Accept, and ours counts as
        // accepted: 2 is the lightest, so node 1 reports without waiting for 3.
        let other = key(2, 5, 0.5);
        test(&mut g, 2, 1, other, &mut out);
        assert_eq!(
            out,
            vec![
                (n(2), GhsMsg::Accept),
                (
                    n(0),
                    GhsMsg::Report {
                        best: Some(key(1, 2, 2.0)),
                        nodes: 1,
                        weight: 0.0
                    }
                )
            ]
        );
        out.clear();
        // 2's Accept of our Test then comes, and 3's answer: both stale.
        g.handle(n(2), GhsMsg::Accept, &mut out).unwrap();
        g.handle(n(3), GhsMsg::Reject, &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(g.edge_state(n(3)), Some(EdgeState::Rejected));
        // With a window of 1 (classic) the same Test is only answered.
        let mut c = Ghs::new(n(1), edges).unwrap();
        c.start(&mut out);
        initiate(&mut c, 0, 1, core, SearchState::Find, &mut out);
        out.clear();
        test(&mut c, 2, 1, other, &mut out);
        assert_eq!(out, vec![(n(2), GhsMsg::Accept)]);
    }

    #[test]
    fn deferral_rules() {
        // Node 1 with edges to 0 (w 1) and 2 (w 5), awake at level 0.
        let mut g = Ghs::new(n(1), [(n(0), 1.0), (n(2), 5.0)]).unwrap();
        let mut out = Vec::new();
        g.start(&mut out);
        out.clear();
        // Test of level 1 while at level 0: waits.
        let f = key(2, 3, 0.5);
        test(&mut g, 2, 1, f, &mut out);
        assert_eq!(g.deferred_len(), 1);
        // Connect(0) on the Basic edge to 2 at level 0: waits too.
        g.handle(n(2), GhsMsg::Connect { level: 0 }, &mut out)
            .unwrap();
        assert_eq!(g.deferred_len(), 2);
        assert!(out.is_empty());
        // Merge with 0 at level 1: the Test (level 1 <= 1, other fragment) is accepted; the
        // Connect(0) from the lower level is absorbed with the current search state.
        let core = key(0, 1, 1.0);
        initiate(&mut g, 0, 1, core, SearchState::Find, &mut out);
        assert_eq!(g.deferred_len(), 0);
        assert_eq!(g.state(), NodeState::Find);
        assert!(out.contains(&(n(2), GhsMsg::Accept)));
        assert!(out.contains(&(
            n(2),
            GhsMsg::Initiate {
                level: 1,
                fragment: core,
                state: SearchState::Find
            }
        )));
        assert_eq!(g.edge_state(n(2)), Some(EdgeState::Branch));
        // A Report over the in-branch while in Find waits.
        out.clear();
        let from_core = GhsMsg::Report {
            best: None,
            nodes: 1,
            weight: 0.0,
        };
        g.handle(n(0), from_core, &mut out).unwrap();
        assert_eq!(g.deferred_len(), 1);
        assert!(out.is_empty());
        // Node 2's subtree reports infinity, but node 1's own Test to 2 is unanswered: no
        // report yet.
        g.handle(
            n(2),
            GhsMsg::Report {
                best: None,
                nodes: 1,
                weight: 0.0,
            },
            &mut out,
        )
        .unwrap();
        assert!(out.is_empty());
        assert_eq!(g.state(), NodeState::Find);
        // 2 (now in the fragment) rejects the test: the edge stays a branch, nothing is left
        // to test, node 1 reports, then the deferred core report (infinity) ends the run here.
        g.handle(n(2), GhsMsg::Reject, &mut out).unwrap();
        assert_eq!(g.edge_state(n(2)), Some(EdgeState::Branch));
        assert_eq!(
            out[0],
            (
                n(0),
                GhsMsg::Report {
                    best: None,
                    nodes: 2,
                    weight: 5.0
                }
            )
        );
        assert_eq!(g.deferred_len(), 0);
        assert!(g.is_done());
        let c = g.completion().unwrap();
        assert_eq!((c.nodes, c.total_weight), (3, 6.0));
        assert_eq!(
            out.last(),
            Some(&(
                n(2),
                GhsMsg::Done {
                    fragment: core,
                    level: 1,
                    nodes: 3,
                    total_weight: 6.0
                }
            ))
        );
    }

    #[test]
    fn refused_messages_change_nothing() {
        let mut g = Ghs::new(n(1), [(n(0), 1.0), (n(2), 5.0)]).unwrap();
        let mut out = Vec::new();
        let f = key(0, 1, 1.0);
        let cases = [
            (n(7), GhsMsg::Accept, "not a neighbour"),
            (n(0), GhsMsg::Accept, "no test is waiting"),
            (n(0), GhsMsg::Reject, "no test is waiting"),
            (n(2), GhsMsg::ChangeRoot, "change-root"),
            (n(2), GhsMsg::Connect { level: 3 }, "higher level"),
            (
                n(2),
                GhsMsg::Initiate {
                    level: 1,
                    fragment: f,
                    state: SearchState::Find,
                },
                "non-branch",
            ),
            (
                n(2),
                GhsMsg::Report {
                    best: None,
                    nodes: 1,
                    weight: 0.0,
                },
                "non-branch",
            ),
            (
                n(0),
                GhsMsg::Done {
                    fragment: f,
                    level: 1,
                    nodes: 2,
                    total_weight: 1.0,
                },
                "core",
            ),
        ];
        for (from, msg, why) in cases {
            let err = g.handle(from, msg, &mut out).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
            assert!(out.is_empty());
            assert_eq!(
                g.state(),
                NodeState::Sleeping,
                "a refused message does not wake"
            );
        }
    }

    #[test]
    fn kind_names() {
        assert_eq!(GhsMsg::kind_name(0), None);
        assert_eq!(GhsMsg::kind_name(1), Some("connect"));
        assert_eq!(GhsMsg::kind_name(7), Some("change_root"));
        assert_eq!(GhsMsg::kind_name(8), Some("done"));
        assert_eq!(GhsMsg::kind_name(9), None);
        assert_eq!(GhsMsg::kind_name(255), None);
        assert_eq!(GhsMsg::KINDS.count(), NAMES.len());
    }

    #[test]
    fn wire_errors_name_the_kind_and_the_fault() {
        let e = GhsMsg::parse(9, &[]).unwrap_err();
        assert_eq!(e, GhsWireError::UnknownKind { kind: 9 });
        let e = GhsMsg::parse(0, &[]).unwrap_err();
        assert_eq!(e, GhsWireError::UnknownKind { kind: 0 });
        let e = GhsMsg::parse(4, &[0]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GHS accept message: body of 1 bytes, expected 0"
        );
        let e = GhsMsg::parse(1, &[33]).unwrap_err();
        assert_eq!(e.to_string(), "GHS connect message: level 33 exceeds 32");
        let mut b = BytesMut::new();
        GhsMsg::Initiate {
            level: 2,
            fragment: key(3, 4, 0.25),
            state: SearchState::Found,
        }
        .encode_body(&mut b);
        let mut bad = b.to_vec();
        bad[17] = 7;
        let e = GhsMsg::parse(2, &bad).unwrap_err();
        assert!(e.to_string().contains("state byte 7"), "{e}");
        let mut bad = b.to_vec();
        bad[9..13].copy_from_slice(&4u32.to_be_bytes()); // lo = hi = 4
        let e = GhsMsg::parse(2, &bad).unwrap_err();
        assert!(e.to_string().contains("ids 4 and 4"), "{e}");
        let mut bad = b.to_vec();
        bad[1..9].copy_from_slice(&(-0.0f64).to_bits().to_be_bytes());
        let e = GhsMsg::parse(2, &bad).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("GHS initiate message: edge weight bits"),
            "{e}"
        );
        let mut bad = b.to_vec();
        bad[1..9].copy_from_slice(&f64::NAN.to_bits().to_be_bytes());
        assert!(GhsMsg::parse(2, &bad).is_err());
        // Report: infinity must come with a zero key, counts at least 1.
        let mut r = BytesMut::new();
        GhsMsg::Report {
            best: None,
            nodes: 3,
            weight: 1.5,
        }
        .encode_body(&mut r);
        assert_eq!(r.len(), 29);
        let mut bad = r.to_vec();
        bad[5] = 1;
        assert!(GhsMsg::parse(6, &bad)
            .unwrap_err()
            .to_string()
            .contains("non-zero key"));
        let mut bad = r.to_vec();
        bad[0] = 2;
        assert!(GhsMsg::parse(6, &bad)
            .unwrap_err()
            .to_string()
            .contains("has-best byte 2"));
        let mut bad = r.to_vec();
        bad[17..21].copy_from_slice(&0u32.to_be_bytes());
        assert!(GhsMsg::parse(6, &bad)
            .unwrap_err()
            .to_string()
            .contains("node count 0"));
        let mut bad = r.to_vec();
        bad[21..29].copy_from_slice(&f64::INFINITY.to_bits().to_be_bytes());
        assert!(GhsMsg::parse(6, &bad)
            .unwrap_err()
            .to_string()
            .contains("subtree weight"));
    }
}
