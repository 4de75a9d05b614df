//! Divisible-load scatter following a [`dlt::Schedule`](windrose_trees::dlt::Schedule).
//!
//! The root holds a load of `L` bytes. A node that holds its whole share (the root: the whole
//! load) cuts it with [`split_share`] into the part it keeps and one part per child, laid out in
//! this order inside the share: `[kept | child 1 | child 2 | ...]`, children in the schedule's
//! send order. It then, at the same time,
//! - asks its application to compute the kept part ([`Output::Compute`] with [`COMPUTE_TASK`];
//!   the simulator models the time by the node's speed, the runtime runs real work), and
//! - sends each child that child's part as [`ShareChunk`] frames, cut at the multiples of
//!   [`max_frame_payload`](ScatterConfig::max_frame_payload) in the load's coordinates (so relays
//!   forward received slices without copying and every edge carries exactly
//!   [`ScatterConfig::frames_for_share`] frames; an empty part is one empty frame). With [`SendMode::Sequential`] (the divisible-load model: one link at a time) it
//!   sends child `i + 1`'s part only after the driver reported child `i`'s last frame
//!   transmitted ([`Input::SendComplete`]); with [`SendMode::Parallel`] it hands all parts to the
//!   driver at once.
//!
//! A child starts only when its whole share has arrived (store-and-forward, as the schedule
//! assumes). When the application reports the computation done ([`Command::ComputeDone`]), the
//! node sends a [`ShareFinished`] report `{node, finish time}` to its parent; every node relays
//! its descendants' reports to its parent, so each tree edge `c -> parent` carries exactly one
//! report per node of `c`'s subtree. The root turns every report, its own included, into a
//! [`Report::ShareFinished`] output. A node finishes when it has computed its part and relayed
//! the reports of its whole subtree, so **the root finishing means the whole scatter is done**.
//!
//! # Rounding fractions to bytes
//!
//! Fractions become byte counts locally and deterministically, by cumulative rounding
//! ([`split_share`]): with weights `w_0 = fraction_kept` and `w_i` = the i-th send fraction, and
//! `W` their sum, the boundary after part `j` is `round(R * (w_0 + ... + w_j) / W)` (clamped to be
//! non-decreasing, the last boundary exactly `R`). The parts therefore sum exactly to the `R`
//! bytes received, each is within one byte of its exact value (for `R < 2^52`), and every node
//! computes the same numbers as [`plan`], which applies the same rule top-down over the tree.
//! So the kept parts of all nodes partition the load exactly.
//!
//! Failures: if the parent fails, or a child fails before its whole subtree has reported, a
//! running node aborts ([`AbortReason::PeerFailed`]).

use crate::frame::{self, Family, FrameError, KindLayout};
use crate::frame::{Message, MessageKind, TransferId};
use crate::node::{
    AbortReason, Command, ComputeTask, Input, Output, Outputs, Protocol, ProtocolError, Report,
    SendId, SetupError, Status, TaskId,
};
use crate::time::Time;
use crate::tree_broadcast::check_frame_payload;
use bytes::Bytes;
use bytes::{Buf, BufMut, BytesMut};
use std::collections::HashMap;
use std::ops::Range;
use windrose_model::NodeId;
use windrose_trees::dlt::{NodeShare, Schedule};

/// A piece of a divisible-load share: the receiver's share is bytes
/// `share_offset..share_offset + share_len` of the load, and `payload` holds bytes
/// `offset..offset + payload.len()` of the load (inside the share).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareChunk {
    /// The scatter this piece belongs to.
    pub transfer: TransferId,
    /// Position of the receiver's whole share in the load.
    pub share_offset: u64,
    /// Length of the receiver's whole share (what it keeps plus what it forwards).
    pub share_len: u64,
    /// Position of the payload's first byte in the load.
    pub offset: u64,
    /// The bytes (zero-copy).
    pub payload: Bytes,
}

impl ShareChunk {
    /// Checks that the share fits a `u64` range and the payload lies inside the share.
    pub fn validate(&self) -> Result<(), FrameError> {
        let bad = |what| Err(frame::inconsistent(ScatterMsg::SHARE, what));
        let Some(share_end) = self.share_offset.checked_add(self.share_len) else {
            return bad("share_offset + share_len overflows");
        };
        match self.offset.checked_add(self.payload.len() as u64) {
            Some(end) if self.offset >= self.share_offset && end <= share_end => Ok(()),
            _ => bad("payload lies outside the share"),
        }
    }
}

/// A node's report that it finished computing its share, relayed up the tree to the root.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShareFinished {
    /// The scatter reported on.
    pub transfer: TransferId,
    /// The node that finished (not the relay that sends the frame).
    pub node: NodeId,
    /// When it finished, on its own driver's clock.
    pub finished_at: Time,
}

/// The scatter's messages (frame family 4).
///
/// | kind | message             | fixed body fields                                              |
/// |------|---------------------|----------------------------------------------------------------|
/// | 1    | [`ShareChunk`]      | transfer u32, share_offset u64, share_len u64, offset u64 (28), then the payload |
/// | 2    | [`ShareFinished`]   | transfer u32, node u32, finished_at_ns u64 (16, exact)         |
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScatterMsg {
    /// A piece of a share.
    Share(ShareChunk),
    /// A node finished its share.
    Finished(ShareFinished),
}

impl ScatterMsg {
    /// The kind of [`ScatterMsg::Share`].
    pub const SHARE: MessageKind = MessageKind::of::<ScatterMsg>(1);
    /// The kind of [`ScatterMsg::Finished`].
    pub const SHARE_FINISHED: MessageKind = MessageKind::of::<ScatterMsg>(2);
}

impl From<ShareChunk> for Message {
    fn from(c: ShareChunk) -> Message {
        Message::Scatter(ScatterMsg::Share(c))
    }
}

impl From<ShareFinished> for Message {
    fn from(f: ShareFinished) -> Message {
        Message::Scatter(ScatterMsg::Finished(f))
    }
}

impl Family for ScatterMsg {
    const FAMILY: u8 = 4;
    const KINDS: &'static [KindLayout] = &[
        KindLayout {
            kind: 1,
            name: "share",
            fixed: 28,
            payload: true,
        },
        KindLayout {
            kind: 2,
            name: "share_finished",
            fixed: 16,
            payload: false,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            ScatterMsg::Share(_) => 1,
            ScatterMsg::Finished(_) => 2,
        }
    }

    fn transfer(&self) -> Option<TransferId> {
        Some(match self {
            ScatterMsg::Share(c) => c.transfer,
            ScatterMsg::Finished(f) => f.transfer,
        })
    }

    fn payload(&self) -> Option<&Bytes> {
        match self {
            ScatterMsg::Share(c) => Some(&c.payload),
            ScatterMsg::Finished(_) => None,
        }
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        match self {
            ScatterMsg::Share(c) => {
                dst.put_u32(c.transfer.0);
                dst.put_u64(c.share_offset);
                dst.put_u64(c.share_len);
                dst.put_u64(c.offset);
            }
            ScatterMsg::Finished(f) => {
                dst.put_u32(f.transfer.0);
                dst.put_u32(f.node.0);
                dst.put_u64(f.finished_at.as_nanos());
            }
        }
    }

    fn parse(kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        if kind != 1 && kind != 2 {
            return Err(FrameError::UnknownKind {
                family: Self::FAMILY,
                kind,
            });
        }
        if kind == 2 {
            return Ok(ScatterMsg::Finished(ShareFinished {
                transfer: TransferId(body.get_u32()),
                node: NodeId(body.get_u32()),
                finished_at: Time::from_nanos(body.get_u64()),
            }));
        }
        let c = ShareChunk {
            transfer: TransferId(body.get_u32()),
            share_offset: body.get_u64(),
            share_len: body.get_u64(),
            offset: body.get_u64(),
            payload: body,
        };
        c.validate()?;
        Ok(ScatterMsg::Share(c))
    }

    fn validate(&self) -> Result<(), FrameError> {
        match self {
            ScatterMsg::Share(c) => c.validate(),
            ScatterMsg::Finished(_) => Ok(()),
        }
    }
}

/// The task id of a node's one computation.
pub const COMPUTE_TASK: TaskId = TaskId(0);

/// How a parent hands its children's shares to the driver.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum SendMode {
    /// One child after the other, each after the previous one's share was transmitted: the
    /// divisible-load model, whose finish times the schedule predicts. Needs the driver to feed
    /// [`Input::SendComplete`].
    #[default]
    Sequential,
    /// All children at once; the network shares the sender's link between them.
    Parallel,
}

/// Parameters of a scatter; every node of one scatter must use the same values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScatterConfig {
    /// The id in every frame of this scatter.
    pub transfer: TransferId,
    /// Largest payload per frame (same range as
    /// [`BroadcastConfig::max_frame_payload`](crate::tree_broadcast::BroadcastConfig::max_frame_payload)).
    pub max_frame_payload: u32,
    /// How children's shares are handed to the driver.
    pub send_mode: SendMode,
}

impl ScatterConfig {
    /// The default [`max_frame_payload`](Self::max_frame_payload): 1 MiB.
    pub const DEFAULT_MAX_FRAME_PAYLOAD: u32 = 1 << 20;

    /// A configuration with the default frame payload and sequential sends.
    pub fn new(transfer: TransferId) -> ScatterConfig {
        ScatterConfig {
            transfer,
            max_frame_payload: Self::DEFAULT_MAX_FRAME_PAYLOAD,
            send_mode: SendMode::Sequential,
        }
    }

    /// Checks the ranges documented on the fields.
    pub fn validate(&self) -> Result<(), SetupError> {
        check_frame_payload(self.max_frame_payload)
    }

    /// Number of [`ShareChunk`] frames that carry the share `range` of the load down its edge:
    /// the cells of the `max_frame_payload` grid it touches, at least one (an empty share is one
    /// empty frame).
    pub fn frames_for_share(&self, range: Range<u64>) -> u64 {
        let max = u64::from(self.max_frame_payload.max(1));
        if range.start >= range.end {
            1
        } else {
            (range.end - 1) / max - range.start / max + 1
        }
    }

    /// Bytes that carry the share `range` down its edge: the share plus
    /// [`MessageKind::frame_overhead`] per frame. What the simulator's network moves, and what
    /// predictions compared with it must use.
    pub fn wire_bytes_for_share(&self, range: Range<u64>) -> u64 {
        let overhead = ScatterMsg::SHARE.frame_overhead() as u64;
        let len = range.end.saturating_sub(range.start);
        len.saturating_add(self.frames_for_share(range).saturating_mul(overhead))
    }
}

/// How a node cuts the `R` bytes it received: what it keeps and what each child gets, in send
/// order. `kept + sends.sum() == R`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSplit {
    /// Bytes kept (the first bytes of the share).
    pub kept: u64,
    /// Bytes for each child, in send order (laid out after the kept bytes, one after the other).
    pub sends: Vec<u64>,
}

/// Cuts `received_len` bytes in proportion to `fraction_kept` and `send_fractions` by cumulative
/// rounding (see the [module docs](self#rounding-fractions-to-bytes)).
///
/// Negative, infinite and NaN weights count as 0; if every weight is 0 the node keeps everything.
pub fn split_share(received_len: u64, fraction_kept: f64, send_fractions: &[f64]) -> ShareSplit {
    let weight = |f: f64| if f.is_finite() && f > 0.0 { f } else { 0.0 };
    let total: f64 = weight(fraction_kept) + send_fractions.iter().map(|&f| weight(f)).sum::<f64>();
    if !(total > 0.0 && total.is_finite()) {
        return ShareSplit {
            kept: received_len,
            sends: vec![0; send_fractions.len()],
        };
    }
    let r = received_len as f64;
    let last = send_fractions.len();
    let mut acc = 0.0;
    let mut prev = 0u64;
    let mut parts = Vec::with_capacity(last + 1);
    for (j, f) in std::iter::once(fraction_kept)
        .chain(send_fractions.iter().copied())
        .enumerate()
    {
        acc += weight(f);
        let bound = if j == last {
            received_len
        } else {
            // `as` saturates (NaN -> 0); the clamp keeps the boundaries ordered and in range.
            ((r * (acc / total)).round() as u64).clamp(prev, received_len)
        };
        parts.push(bound - prev);
        prev = bound;
    }
    let kept = parts[0];
    parts.remove(0);
    ShareSplit { kept, sends: parts }
}

/// What one node receives and keeps of a load, as byte ranges of the load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharePlan {
    /// The node.
    pub node: NodeId,
    /// Its whole share: what it keeps and what it forwards.
    pub received: Range<u64>,
    /// What it computes itself (the start of `received`).
    pub kept: Range<u64>,
}

/// The byte ranges of every node of `schedule` for a load of `load_len` bytes, in the
/// schedule's (breadth-first) order: exactly what the [`Scatter`] machines will do, for drivers
/// that want to predict or check it.
pub fn plan(schedule: &Schedule, load_len: u64) -> Result<Vec<SharePlan>, SetupError> {
    let index = ScheduleIndex::new(schedule)?;
    let mut received: Vec<Range<u64>> = vec![0..0; schedule.nodes.len()];
    received[0] = 0..load_len;
    let mut plans = Vec::with_capacity(schedule.nodes.len());
    for (i, share) in schedule.nodes.iter().enumerate() {
        let r = received[i].clone();
        let fractions: Vec<f64> = share.send_order.iter().map(|s| s.fraction).collect();
        let split = split_share(r.end - r.start, share.fraction_kept, &fractions);
        let mut at = r.start + split.kept;
        for (send, len) in share.send_order.iter().zip(&split.sends) {
            received[index.position[&send.child]] = at..at + len;
            at += len;
        }
        plans.push(SharePlan {
            node: share.node,
            kept: r.start..r.start + split.kept,
            received: r,
        });
    }
    Ok(plans)
}

/// A checked view of a schedule: every node's position and subtree size.
struct ScheduleIndex {
    position: HashMap<NodeId, usize>,
    /// Nodes in the subtree of each entry of `schedule.nodes`, itself included.
    subtree: Vec<u32>,
}

impl ScheduleIndex {
    /// Checks that `schedule` is a tree listed parents first with usable fractions. O(N).
    fn new(schedule: &Schedule) -> Result<ScheduleIndex, SetupError> {
        let bad = |msg: String| Err(SetupError::Schedule(msg));
        let nodes = &schedule.nodes;
        match nodes.first() {
            None => return bad("no nodes".into()),
            Some(first) if first.node != schedule.root || first.parent.is_some() => {
                return bad(format!(
                    "the first entry must be the root {} without a parent",
                    schedule.root
                ))
            }
            Some(_) => {}
        }
        let mut position = HashMap::with_capacity(nodes.len());
        for (i, s) in nodes.iter().enumerate() {
            if position.insert(s.node, i).is_some() {
                return bad(format!("node {} is listed twice", s.node));
            }
        }
        for (i, s) in nodes.iter().enumerate() {
            let usable = |f: f64| f.is_finite() && f >= 0.0;
            if !usable(s.fraction_kept) || s.send_order.iter().any(|x| !usable(x.fraction)) {
                return bad(format!(
                    "node {} has a negative or non-finite fraction",
                    s.node
                ));
            }
            if i > 0 {
                let Some(p) = s.parent else {
                    return bad(format!("node {} has no parent", s.node));
                };
                let listed = position.get(&p).is_some_and(|&pi| {
                    pi < i && nodes[pi].send_order.iter().any(|x| x.child == s.node)
                });
                if !listed {
                    return bad(format!(
                        "node {} names parent {p}, which does not come before it and send to it",
                        s.node
                    ));
                }
            }
            for send in &s.send_order {
                if nodes
                    .get(position.get(&send.child).copied().unwrap_or(usize::MAX))
                    .and_then(|c| c.parent)
                    != Some(s.node)
                {
                    return bad(format!(
                        "node {} sends to {}, whose parent is not {}",
                        s.node, send.child, s.node
                    ));
                }
            }
        }
        let mut subtree = vec![1u32; nodes.len()];
        for i in (1..nodes.len()).rev() {
            if let Some(p) = nodes[i].parent {
                let pi = position[&p];
                subtree[pi] = subtree[pi].saturating_add(subtree[i]);
            }
        }
        Ok(ScheduleIndex { position, subtree })
    }
}

/// One child of a node: who, its fraction of the total load, its subtree's size, and the
/// progress of its share and reports.
#[derive(Clone, Debug)]
struct Child {
    node: NodeId,
    fraction: f64,
    subtree: u32,
    reports: u32,
    /// Its share as frames, ready to send (filled when this node's share is complete).
    chunks: Vec<(u64, Bytes)>,
    range: Range<u64>,
}

/// One node of a divisible-load scatter. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Scatter {
    me: NodeId,
    parent: Option<NodeId>,
    fraction_kept: f64,
    children: Vec<Child>,
    config: ScatterConfig,
    started: bool,
    status: Status,
    /// This node's whole share, once known (at the root: the whole load).
    share: Option<Range<u64>>,
    /// Bytes of the share received so far.
    received: u64,
    /// The share's bytes as they arrived (released once cut into parts).
    pieces: Vec<(u64, Bytes)>,
    /// The kept range, once the share is complete.
    kept: Option<Range<u64>>,
    compute_pending: bool,
    computed_at: Option<Time>,
    /// Sequential mode: the child whose share is being transmitted.
    in_flight: Option<usize>,
}

impl Scatter {
    /// The machine of node `me` in a scatter following `schedule`. The root passes the load as
    /// `load`; every other node passes None. O(N) for the schedule's checks: build all nodes of a
    /// large run with [`Scatter::all`].
    ///
    /// Errors: `me` not in the schedule, data given to a non-root or missing at the root, an
    /// invalid schedule (not a tree listed parents first, negative or non-finite fractions), or an
    /// invalid `config`.
    pub fn new(
        me: NodeId,
        schedule: &Schedule,
        load: Option<Bytes>,
        config: ScatterConfig,
    ) -> Result<Scatter, SetupError> {
        config.validate()?;
        let index = ScheduleIndex::new(schedule)?;
        let &i = index
            .position
            .get(&me)
            .ok_or(SetupError::NotInTree { node: me })?;
        Scatter::from_index(schedule, &index, i, load, config)
    }

    /// The machines of every node of `schedule`, in its (breadth-first) order, the root's holding
    /// `load`. O(N) in all.
    pub fn all(
        schedule: &Schedule,
        load: Bytes,
        config: ScatterConfig,
    ) -> Result<Vec<Scatter>, SetupError> {
        config.validate()?;
        let index = ScheduleIndex::new(schedule)?;
        let mut load = Some(load);
        (0..schedule.nodes.len())
            .map(|i| {
                let data = if i == 0 { load.take() } else { None };
                Scatter::from_index(schedule, &index, i, data, config)
            })
            .collect()
    }

    fn from_index(
        schedule: &Schedule,
        index: &ScheduleIndex,
        i: usize,
        load: Option<Bytes>,
        config: ScatterConfig,
    ) -> Result<Scatter, SetupError> {
        let share: &NodeShare = &schedule.nodes[i];
        let me = share.node;
        let is_root = i == 0;
        let (range, pieces) = match (is_root, load) {
            (true, Some(l)) => (Some(0..l.len() as u64), vec![(0, l)]),
            (true, None) => {
                return Err(SetupError::Data {
                    node: me,
                    what: "the root needs the load to scatter",
                })
            }
            (false, Some(_)) => {
                return Err(SetupError::Data {
                    node: me,
                    what: "only the root is given data",
                })
            }
            (false, None) => (None, Vec::new()),
        };
        let children = share
            .send_order
            .iter()
            .map(|s| Child {
                node: s.child,
                fraction: s.fraction,
                subtree: index.subtree[index.position[&s.child]],
                reports: 0,
                chunks: Vec::new(),
                range: 0..0,
            })
            .collect();
        Ok(Scatter {
            me,
            parent: share.parent,
            fraction_kept: share.fraction_kept,
            children,
            config,
            started: false,
            status: Status::Running,
            received: if is_root {
                range.as_ref().map_or(0, |r| r.end)
            } else {
                0
            },
            share: range,
            pieces,
            kept: None,
            compute_pending: false,
            computed_at: None,
            in_flight: None,
        })
    }

    /// The parent (None at the root).
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// The children, in send order.
    pub fn children(&self) -> Vec<NodeId> {
        self.children.iter().map(|c| c.node).collect()
    }

    /// This node's whole share of the load, once known.
    pub fn share(&self) -> Option<Range<u64>> {
        self.share.clone()
    }

    /// The part this node computes, once its share is complete.
    pub fn kept(&self) -> Option<Range<u64>> {
        self.kept.clone()
    }

    /// When the application finished computing the kept part.
    pub fn computed_at(&self) -> Option<Time> {
        self.computed_at
    }

    /// Bytes of the share received so far.
    pub fn received_bytes(&self) -> u64 {
        self.received
    }

    /// The share is complete: cut it, start computing, start sending.
    fn on_share_complete(&mut self, out: &mut Outputs) {
        let Some(share) = self.share.clone() else {
            return;
        };
        let fractions: Vec<f64> = self.children.iter().map(|c| c.fraction).collect();
        let split = split_share(share.end - share.start, self.fraction_kept, &fractions);
        let pieces = std::mem::take(&mut self.pieces);
        let kept = share.start..share.start + split.kept;
        let mut at = kept.end;
        for (child, &len) in self.children.iter_mut().zip(&split.sends) {
            child.range = at..at + len;
            at += len;
            let mut chunks = Vec::new();
            for (offset, piece) in slice_pieces(&pieces, child.range.clone()) {
                chunk_on_grid(offset, piece, self.config.max_frame_payload, &mut chunks);
            }
            if chunks.is_empty() {
                chunks.push((child.range.start, Bytes::new()));
            }
            child.chunks = chunks;
        }
        out.push(Output::Compute(ComputeTask {
            task: COMPUTE_TASK,
            offset: kept.start,
            len: kept.end - kept.start,
            data: slice_pieces(&pieces, kept.clone())
                .into_iter()
                .map(|(_, b)| b)
                .collect(),
            work: None,
        }));
        self.kept = Some(kept);
        self.compute_pending = true;
        match self.config.send_mode {
            SendMode::Sequential => {
                if !self.children.is_empty() {
                    self.send_child(0, out);
                }
            }
            SendMode::Parallel => {
                for i in 0..self.children.len() {
                    self.send_child(i, out);
                }
            }
        }
    }

    /// Hands child `i`'s share to the driver (and releases it here).
    fn send_child(&mut self, i: usize, out: &mut Outputs) {
        let sequential = self.config.send_mode == SendMode::Sequential;
        let child = &mut self.children[i];
        let chunks = std::mem::take(&mut child.chunks);
        let last = chunks.len().saturating_sub(1);
        for (k, (offset, payload)) in chunks.into_iter().enumerate() {
            let message = Message::Scatter(ScatterMsg::Share(ShareChunk {
                transfer: self.config.transfer,
                share_offset: child.range.start,
                share_len: child.range.end - child.range.start,
                offset,
                payload,
            }));
            if sequential && k == last {
                out.send_notify(child.node, message, SendId(i as u64));
            } else {
                out.send(child.node, message);
            }
        }
        if sequential {
            self.in_flight = Some(i);
        }
    }

    fn on_chunk(
        &mut self,
        from: NodeId,
        chunk: ShareChunk,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = ScatterMsg::SHARE;
        if self.status == Status::Aborted {
            return Ok(());
        }
        if Some(from) != self.parent {
            let why = if self.parent.is_none() {
                "the root receives no share"
            } else {
                "the sender is not this node's parent"
            };
            return Err(ProtocolError::UnexpectedMessage { from, kind, why });
        }
        ProtocolError::check_transfer(from, kind, self.config.transfer, chunk.transfer)?;
        chunk
            .validate()
            .map_err(|source| ProtocolError::Frame { from, source })?;
        let declared = chunk.share_offset..chunk.share_offset + chunk.share_len;
        if self.kept.is_some() {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "this node's share is already complete",
            });
        }
        if self.share.as_ref().is_some_and(|s| *s != declared) {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "share_offset or share_len differs from earlier chunks",
            });
        }
        let expected = declared.start + self.received;
        if chunk.offset != expected {
            return Err(ProtocolError::OutOfOrder {
                from,
                kind,
                expected,
                found: chunk.offset,
            });
        }
        if chunk.payload.is_empty() && chunk.share_len > 0 {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "empty chunk of a non-empty share",
            });
        }
        // Accepted.
        self.started = true;
        self.received += chunk.payload.len() as u64;
        if !chunk.payload.is_empty() {
            self.pieces.push((chunk.offset, chunk.payload));
        }
        self.share = Some(declared.clone());
        out.push(Output::Report(Report::Progress {
            transfer: self.config.transfer,
            done_bytes: self.received,
            total_bytes: declared.end - declared.start,
        }));
        if self.received == declared.end - declared.start {
            self.on_share_complete(out);
        }
        Ok(())
    }

    fn on_report(
        &mut self,
        from: NodeId,
        report: ShareFinished,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = ScatterMsg::SHARE_FINISHED;
        if self.status == Status::Aborted {
            return Ok(());
        }
        let Some(i) = self.children.iter().position(|c| c.node == from) else {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "the sender is not this node's child",
            });
        };
        ProtocolError::check_transfer(from, kind, self.config.transfer, report.transfer)?;
        let child = &mut self.children[i];
        if child.reports >= child.subtree {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "more reports than the sender's subtree has nodes",
            });
        }
        child.reports += 1;
        self.emit_report(report, out);
        self.check_finished(out);
        Ok(())
    }

    /// Passes a finish report on: up to the parent, or at the root to the driver.
    fn emit_report(&self, report: ShareFinished, out: &mut Outputs) {
        match self.parent {
            Some(p) => out.send(p, Message::Scatter(ScatterMsg::Finished(report))),
            None => out.push(Output::Report(Report::ShareFinished {
                node: report.node,
                at: report.finished_at,
            })),
        }
    }

    fn on_compute_done(
        &mut self,
        now: Time,
        task: TaskId,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        if task != COMPUTE_TASK || !self.compute_pending {
            return Err(ProtocolError::UnknownTask { task });
        }
        self.compute_pending = false;
        if self.status == Status::Aborted {
            return Ok(());
        }
        self.computed_at = Some(now);
        self.emit_report(
            ShareFinished {
                transfer: self.config.transfer,
                node: self.me,
                finished_at: now,
            },
            out,
        );
        self.check_finished(out);
        Ok(())
    }

    fn on_send_complete(
        &mut self,
        to: NodeId,
        id: SendId,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let Some(i) = self.in_flight else {
            return Err(ProtocolError::UnknownSend { to, id });
        };
        if id != SendId(i as u64) || self.children[i].node != to {
            return Err(ProtocolError::UnknownSend { to, id });
        }
        self.in_flight = None;
        if self.status != Status::Aborted && i + 1 < self.children.len() {
            self.send_child(i + 1, out);
        }
        Ok(())
    }

    fn check_finished(&mut self, out: &mut Outputs) {
        if self.status == Status::Running
            && self.computed_at.is_some()
            && self.children.iter().all(|c| c.reports == c.subtree)
        {
            self.status = Status::Finished;
            out.push(Output::Finished);
        }
    }
}

/// Splits `piece` (starting at load offset `offset`) into zero-copy chunks at the multiples of
/// `max` in the load's coordinates, appended to `chunks`. Received chunks never straddle a grid
/// line, so a relay re-cutting any sub-range of them gets back whole received pieces.
fn chunk_on_grid(offset: u64, piece: Bytes, max: u32, chunks: &mut Vec<(u64, Bytes)>) {
    let max = u64::from(max.max(1));
    let end = offset + piece.len() as u64;
    let mut at = offset;
    while at < end {
        let cell_end = (at / max).saturating_add(1).saturating_mul(max).min(end);
        chunks.push((
            at,
            piece.slice((at - offset) as usize..(cell_end - offset) as usize),
        ));
        at = cell_end;
    }
}

/// Zero-copy slices of `pieces` (contiguous, in order, each `(offset, bytes)`) covering `range`.
fn slice_pieces(pieces: &[(u64, Bytes)], range: Range<u64>) -> Vec<(u64, Bytes)> {
    let mut parts = Vec::new();
    if range.start >= range.end {
        return parts;
    }
    // First piece that ends after range.start.
    let first = pieces.partition_point(|(off, b)| off + b.len() as u64 <= range.start);
    for (off, bytes) in &pieces[first..] {
        if *off >= range.end {
            break;
        }
        let from = range.start.max(*off) - off;
        let to = range.end.min(off + bytes.len() as u64) - off;
        parts.push((off + from, bytes.slice(from as usize..to as usize)));
    }
    parts
}

impl Protocol for Scatter {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => {
                if !self.started {
                    self.started = true;
                    if self.parent.is_none() {
                        self.on_share_complete(out);
                    }
                }
                Ok(())
            }
            Input::Message {
                from,
                message: Message::Scatter(ScatterMsg::Share(chunk)),
            } => self.on_chunk(from, chunk, out),
            Input::Message {
                from,
                message: Message::Scatter(ScatterMsg::Finished(report)),
            } => self.on_report(from, report, out),
            Input::Message { from, message } => Err(ProtocolError::UnexpectedMessage {
                from,
                kind: message.kind(),
                why: "not part of a scatter",
            }),
            Input::Command(Command::ComputeDone { task }) => self.on_compute_done(now, task, out),
            Input::SendComplete { to, id } => self.on_send_complete(to, id, out),
            Input::Timer(_) => Ok(()), // the scatter sets no timers
            // Requests of the application are the host's business.
            Input::App(_) => Ok(()),
            Input::PeerFailed(peer) => {
                let depends = Some(peer) == self.parent
                    || self
                        .children
                        .iter()
                        .any(|c| c.node == peer && c.reports < c.subtree);
                if depends && self.status == Status::Running {
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
    use windrose_trees::dlt::{self, OrderPolicy};
    use windrose_trees::Tree;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn split_sums_and_rounds() {
        assert_eq!(
            split_share(10, 0.5, &[0.25, 0.25]),
            ShareSplit {
                kept: 5,
                sends: vec![3, 2]
            }
        );
        assert_eq!(
            split_share(7, 0.0, &[0.0, 0.0]),
            ShareSplit {
                kept: 7,
                sends: vec![0, 0]
            }
        );
        assert_eq!(split_share(0, 0.3, &[0.7]).sends, vec![0]);
        let s = split_share(u64::MAX, 1.0, &[1.0, 1.0]);
        assert_eq!(s.kept.wrapping_add(s.sends.iter().sum::<u64>()), u64::MAX);
        assert!(s.kept <= u64::MAX - s.sends.iter().sum::<u64>());
        assert_eq!(split_share(9, f64::NAN, &[1.0]).kept, 0);
    }

    #[test]
    fn slices_cover_ranges() {
        let pieces = vec![
            (10, Bytes::from_static(b"abc")),
            (13, Bytes::from_static(b"defg")),
        ];
        let got: Vec<_> = slice_pieces(&pieces, 12..15)
            .into_iter()
            .map(|(o, b)| (o, b.to_vec()))
            .collect();
        assert_eq!(got, vec![(12, b"c".to_vec()), (13, b"de".to_vec())]);
        assert!(slice_pieces(&pieces, 15..15).is_empty());
    }

    #[test]
    fn sequential_sends_wait_for_completion() {
        let tree = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(0))]).unwrap();
        let s = dlt::schedule(&tree, &[1.0; 3], &[0.0, 0.1, 0.2], OrderPolicy::Given).unwrap();
        let load = Bytes::from(vec![7u8; 1000]);
        let mut root =
            Scatter::new(n(0), &s, Some(load), ScatterConfig::new(TransferId(3))).unwrap();
        let mut out = Outputs::new();
        root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        let sent_to: Vec<NodeId> = out
            .as_slice()
            .iter()
            .filter_map(|o| match o {
                Output::Send(t) => Some(t.to),
                _ => None,
            })
            .collect();
        assert_eq!(sent_to, vec![n(1)]);
        assert!(matches!(out.as_slice()[0], Output::Compute(_)));
        out.clear();
        assert!(root
            .handle(
                Time::ZERO,
                Input::SendComplete {
                    to: n(2),
                    id: SendId(0)
                },
                &mut out
            )
            .is_err());
        root.handle(
            Time::ZERO,
            Input::SendComplete {
                to: n(1),
                id: SendId(0),
            },
            &mut out,
        )
        .unwrap();
        assert!(matches!(&out.as_slice()[0], Output::Send(t) if t.to == n(2)));
        // A failed child before its report: the root cannot complete.
        out.clear();
        root.handle(Time::ZERO, Input::PeerFailed(n(2)), &mut out)
            .unwrap();
        assert_eq!(root.status(), Status::Aborted);
    }

    #[test]
    fn plan_partitions_the_load() {
        let tree = Tree::from_edges(
            5,
            n(0),
            &[(n(1), n(0)), (n(2), n(0)), (n(3), n(1)), (n(4), n(1))],
        )
        .unwrap();
        let s = dlt::schedule(
            &tree,
            &[1.0, 2.0, 0.5, 1.5, 1.0],
            &[0.0, 0.2, 0.1, 0.3, 0.05],
            OrderPolicy::Optimal,
        )
        .unwrap();
        let p = plan(&s, 12345).unwrap();
        let mut kept: Vec<_> = p.iter().map(|x| x.kept.clone()).collect();
        kept.sort_by_key(|r| r.start);
        assert_eq!(kept.first().unwrap().start, 0);
        assert_eq!(kept.last().unwrap().end, 12345);
        assert!(kept.windows(2).all(|w| w[0].end == w[1].start));
    }

    #[test]
    fn broken_schedules_are_rejected() {
        let tree = Tree::from_edges(2, n(0), &[(n(1), n(0))]).unwrap();
        let good = dlt::schedule(&tree, &[1.0, 1.0], &[0.0, 0.5], OrderPolicy::Optimal).unwrap();
        let cfg = ScatterConfig::new(TransferId(0));
        let mut s = good.clone();
        s.nodes[1].fraction_kept = f64::NAN;
        assert!(matches!(
            Scatter::new(n(1), &s, None, cfg),
            Err(SetupError::Schedule(_))
        ));
        let mut s = good.clone();
        s.nodes.swap(0, 1);
        assert!(Scatter::new(n(1), &s, None, cfg).is_err());
        let mut s = good.clone();
        s.nodes[0].send_order.clear();
        assert!(Scatter::new(n(1), &s, None, cfg).is_err());
        assert!(matches!(
            Scatter::new(n(5), &good, None, cfg),
            Err(SetupError::NotInTree { .. })
        ));
        assert!(Scatter::new(n(0), &good, None, cfg).is_err());
    }
}
