//! Pipelined broadcast over any [`Tree`] of `windrose-trees`.
//!
//! The root's message (a [`Bytes`] of `L` bytes) is cut into segments of
//! [`segment_bytes`](BroadcastConfig::segment_bytes) (the last one shorter; one segment of `L`
//! bytes is store-and-forward). A node forwards a segment to its children as soon as the whole
//! segment has arrived, so segments flow down the tree in a pipeline. Per segment, children are
//! served in the tree's send order: every frame of the segment to child 1, then to child 2, and so
//! on. On the wire a segment travels as one or more [`DataSegment`] frames of at most
//! [`max_frame_payload`](BroadcastConfig::max_frame_payload) bytes; an empty message travels as
//! one empty frame, so every edge carries exactly [`BroadcastConfig::frames_per_edge`] frames.
//!
//! A node knows only its parent and its children (from the tree). Every non-root node delivers
//! each received frame's bytes to its application in order ([`Output::Deliver`]; the root, which
//! has the message, delivers nothing) and reports [`Report::Progress`] per forwarded segment. It
//! finishes when it holds all `L` bytes and has handed every send to the driver, which happens in
//! the same step: the root finishes on [`Input::Start`]. Payloads are never copied: every frame
//! carries a slice of the root's [`Bytes`] or of a receive buffer.
//!
//! Failures: a child declared failed is skipped from then on. A node whose parent fails
//! re-attaches to the root, the one node sure to hold the whole message (it keeps it; a relay
//! keeps only what it has not forwarded yet): it asks with a [`PieceMsg::Request`] whose `piece`
//! is the first segment it misses, the root sends every frame from there, and the node drops
//! the part of the first one it already holds, then forwards to its own children as before,
//! so the orphaned subtree hangs under the root without a rebuild. The root answers such
//! requests also after it has finished. A node that restarts, or joins late
//! ([`TreeBroadcast::rejoin`]), asks the root the same way from segment 0; its children were
//! re-attached when it failed, so it forwards nothing. A node takes data only from its
//! current parent: frames from a tree parent it counted failed (one that restarted and
//! forwards what its new life got before it heard its children were re-attached, or one found
//! silent that woke up) are dropped without an error, before or after the node finished, and
//! so are a restarted node's frames from its old parent. If the root fails, or — with an
//! [`idle_timeout`](BroadcastConfig::idle_timeout) — nothing arrives for that long, a node that
//! is not complete aborts. Timer: [`IDLE_TIMER`].

use crate::frame::{
    self, Family, FrameError, KindLayout, Message, MessageKind, TransferId, DEFAULT_MAX_BODY_LEN,
    MAX_FIXED_BODY_LEN,
};
use crate::node::{
    AbortReason, Input, Output, Outputs, Protocol, ProtocolError, Report, SetupError, Status,
    TimerId,
};
use crate::pieces::{PieceMsg, PieceRef};
use crate::time::Time;
use bytes::Bytes;
use bytes::{Buf, BufMut, BytesMut};
use std::collections::VecDeque;
use std::time::Duration;
use windrose_model::NodeId;
use windrose_trees::Tree;

/// A piece of a broadcast: `payload` holds bytes `offset..offset + payload.len()` of a message
/// of `total_len` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSegment {
    /// The broadcast this piece belongs to.
    pub transfer: TransferId,
    /// Position of the payload's first byte in the broadcast message.
    pub offset: u64,
    /// Length of the whole broadcast message.
    pub total_len: u64,
    /// The bytes (a zero-copy slice of the sender's message or of the receive buffer).
    pub payload: Bytes,
}

impl DataSegment {
    /// Checks that the payload lies inside the message: `offset + payload.len() <= total_len`
    /// (without overflow).
    pub fn validate(&self) -> Result<(), FrameError> {
        match self.offset.checked_add(self.payload.len() as u64) {
            Some(end) if end <= self.total_len => Ok(()),
            _ => Err(frame::inconsistent(
                BroadcastMsg::DATA,
                "payload runs past total_len",
            )),
        }
    }
}

/// The broadcast's messages (frame family 3). A receiver that restarted asks for the rest with
/// the piece family's `Request` (see the module docs).
///
/// | kind | message           | fixed body fields                                  |
/// |------|-------------------|----------------------------------------------------|
/// | 1    | [`DataSegment`]   | transfer u32, offset u64, total_len u64 (20 bytes), then the payload |
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BroadcastMsg {
    /// A segment of the message.
    Data(DataSegment),
}

impl BroadcastMsg {
    /// The kind of [`BroadcastMsg::Data`].
    pub const DATA: MessageKind = MessageKind::of::<BroadcastMsg>(1);
}

impl From<DataSegment> for Message {
    fn from(d: DataSegment) -> Message {
        Message::Broadcast(BroadcastMsg::Data(d))
    }
}

impl Family for BroadcastMsg {
    const FAMILY: u8 = 3;
    const KINDS: &'static [KindLayout] = &[KindLayout {
        kind: 1,
        name: "data",
        fixed: 20,
        payload: true,
    }];

    fn kind(&self) -> u8 {
        1
    }

    fn transfer(&self) -> Option<TransferId> {
        let BroadcastMsg::Data(d) = self;
        Some(d.transfer)
    }

    fn payload(&self) -> Option<&Bytes> {
        let BroadcastMsg::Data(d) = self;
        Some(&d.payload)
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        let BroadcastMsg::Data(d) = self;
        dst.put_u32(d.transfer.0);
        dst.put_u64(d.offset);
        dst.put_u64(d.total_len);
    }

    fn parse(_kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        let d = DataSegment {
            transfer: TransferId(body.get_u32()),
            offset: body.get_u64(),
            total_len: body.get_u64(),
            payload: body,
        };
        d.validate()?;
        Ok(BroadcastMsg::Data(d))
    }

    fn validate(&self) -> Result<(), FrameError> {
        let BroadcastMsg::Data(d) = self;
        d.validate()
    }
}

/// The timer a non-root node sets when it has an idle timeout: it fires when nothing has arrived
/// from the parent for [`BroadcastConfig::idle_timeout`].
pub const IDLE_TIMER: TimerId = TimerId(0);

/// Parameters of a broadcast; every node of one broadcast must use the same values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BroadcastConfig {
    /// The id in every frame of this broadcast.
    pub transfer: TransferId,
    /// Bytes per segment, the unit of forwarding (at least 1).
    pub segment_bytes: u64,
    /// Largest payload per frame (1 ..= [`DEFAULT_MAX_BODY_LEN`] - [`MAX_FIXED_BODY_LEN`], so
    /// that receivers with the default frame limit accept every frame).
    pub max_frame_payload: u32,
    /// Abort when nothing arrives from the parent for this long (None: wait forever).
    pub idle_timeout: Option<Duration>,
}

impl BroadcastConfig {
    /// The default [`max_frame_payload`](Self::max_frame_payload): 1 MiB.
    pub const DEFAULT_MAX_FRAME_PAYLOAD: u32 = 1 << 20;

    /// A configuration with the default frame payload and no idle timeout.
    pub fn new(transfer: TransferId, segment_bytes: u64) -> BroadcastConfig {
        BroadcastConfig {
            transfer,
            segment_bytes,
            max_frame_payload: Self::DEFAULT_MAX_FRAME_PAYLOAD,
            idle_timeout: None,
        }
    }

    /// Checks the ranges documented on the fields.
    pub fn validate(&self) -> Result<(), SetupError> {
        if self.segment_bytes == 0 {
            return Err(SetupError::Config {
                what: "segment_bytes",
                requirement: "at least 1",
                value: "0".into(),
            });
        }
        check_frame_payload(self.max_frame_payload)?;
        if self.idle_timeout == Some(Duration::ZERO) {
            return Err(SetupError::Config {
                what: "idle_timeout",
                requirement: "positive (or None)",
                value: "0s".into(),
            });
        }
        Ok(())
    }

    /// Number of [`DataSegment`] frames every edge of the tree carries for a message of
    /// `total_len` bytes: each segment's frames, at least one (an empty message is one frame).
    pub fn frames_per_edge(&self, total_len: u64) -> u64 {
        let seg = self.segment_bytes.max(1);
        let max = u64::from(self.max_frame_payload.max(1));
        if total_len == 0 {
            return 1;
        }
        let full = total_len / seg;
        let rest = total_len % seg;
        full.saturating_mul(seg.div_ceil(max))
            .saturating_add(rest.div_ceil(max))
    }

    /// Bytes every edge of the tree carries for a message of `total_len` bytes: the message
    /// plus [`MessageKind::frame_overhead`] per frame. What the simulator's network moves, and
    /// what closed-form predictions must use.
    pub fn wire_bytes_per_edge(&self, total_len: u64) -> u64 {
        let overhead = BroadcastMsg::DATA.frame_overhead() as u64;
        total_len.saturating_add(self.frames_per_edge(total_len).saturating_mul(overhead))
    }
}

// The requirement's text below names this bound.
const _: () = assert!(DEFAULT_MAX_BODY_LEN as usize - MAX_FIXED_BODY_LEN == 16_777_107);

/// Checks a `max_frame_payload` parameter.
pub(crate) fn check_frame_payload(max_frame_payload: u32) -> Result<(), SetupError> {
    let limit = DEFAULT_MAX_BODY_LEN as usize - MAX_FIXED_BODY_LEN;
    if max_frame_payload == 0 || max_frame_payload as usize > limit {
        return Err(SetupError::Config {
            what: "max_frame_payload",
            requirement: "between 1 and the default frame limit minus 109 bytes (16777107)",
            value: max_frame_payload.to_string(),
        });
    }
    Ok(())
}

/// Splits `piece` (starting at byte `offset`) into zero-copy chunks of at most `max` bytes,
/// appended to `chunks`; an empty piece gives one empty chunk.
fn chunk_into(offset: u64, piece: Bytes, max: u32, chunks: &mut Vec<(u64, Bytes)>) {
    let max = max.max(1) as usize;
    if piece.is_empty() {
        chunks.push((offset, piece));
        return;
    }
    let mut at = 0;
    while at < piece.len() {
        let end = (at + max).min(piece.len());
        chunks.push((offset + at as u64, piece.slice(at..end)));
        at = end;
    }
}

/// One node of a pipelined tree broadcast. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct TreeBroadcast {
    me: NodeId,
    /// The tree's root (None at the root itself).
    root: Option<NodeId>,
    parent: Option<NodeId>,
    children: Vec<NodeId>,
    child_alive: Vec<bool>,
    config: BroadcastConfig,
    started: bool,
    status: Status,
    /// Length of the message, once known (at the root from the start).
    total_len: Option<u64>,
    /// Bytes held: received (or, at the root, all of them once started).
    received: u64,
    /// Bytes forwarded to the children (a multiple of `segment_bytes`, or `total_len`).
    forwarded: u64,
    /// True once every segment (for an empty message: its one empty frame) was forwarded.
    forward_done: bool,
    /// Bytes `forwarded..received`, in order.
    pending: VecDeque<Bytes>,
    /// When the idle timer is due (non-root nodes with a timeout).
    idle_deadline: Option<Time>,
    /// The root: the whole message, for nodes that re-attach to it.
    root_data: Option<Bytes>,
    /// The parent now is the root after a repair (or a rejoin): frames may overlap what is held.
    reattached: bool,
    /// A restarted or late node's machine ([`TreeBroadcast::rejoin`]).
    rejoined: bool,
    /// The tree parent once it was counted failed (at a rejoining node: its tree parent,
    /// unless that is the root): its later frames are dropped (see the module docs).
    lost_parent: Option<NodeId>,
}

impl TreeBroadcast {
    /// The machine of node `me` in a broadcast over `tree`. The root passes the message as
    /// `data`; every other node passes None.
    ///
    /// Errors: `me` not in the tree, data given to a non-root or missing at the root, or an
    /// invalid `config`.
    pub fn new(
        me: NodeId,
        tree: &Tree,
        data: Option<Bytes>,
        config: BroadcastConfig,
    ) -> Result<TreeBroadcast, SetupError> {
        config.validate()?;
        if !tree.contains(me) {
            return Err(SetupError::NotInTree { node: me });
        }
        let is_root = tree.root() == me;
        let root_data = data.clone().filter(|_| is_root);
        let (total_len, pending) = match (is_root, data) {
            (true, Some(d)) => (Some(d.len() as u64), VecDeque::from([d])),
            (true, None) => {
                return Err(SetupError::Data {
                    node: me,
                    what: "the root needs the data to send",
                })
            }
            (false, Some(_)) => {
                return Err(SetupError::Data {
                    node: me,
                    what: "only the root is given data",
                })
            }
            (false, None) => (None, VecDeque::new()),
        };
        let children = tree.children(me).to_vec();
        Ok(TreeBroadcast {
            me,
            root: (!is_root).then(|| tree.root()),
            parent: tree.parent(me),
            child_alive: vec![true; children.len()],
            children,
            config,
            started: false,
            status: Status::Running,
            total_len,
            received: 0,
            forwarded: 0,
            forward_done: false,
            pending,
            idle_deadline: None,
            root_data,
            reattached: false,
            rejoined: false,
            lost_parent: None,
        })
    }

    /// The machine of `me` restarting, or joining late, in a running broadcast over `tree`: it
    /// holds nothing, asks the root for the whole message and forwards nothing (its children
    /// re-attached to the root when it was found missing).
    ///
    /// Errors: those of [`TreeBroadcast::new`]; the root cannot rejoin.
    pub fn rejoin(
        me: NodeId,
        tree: &Tree,
        config: BroadcastConfig,
    ) -> Result<TreeBroadcast, SetupError> {
        if tree.root() == me {
            return Err(SetupError::Data {
                node: me,
                what: "the root cannot rejoin: its failure ends the broadcast",
            });
        }
        let mut m = TreeBroadcast::new(me, tree, None, config)?;
        m.child_alive.iter_mut().for_each(|a| *a = false);
        m.parent = Some(tree.root());
        m.reattached = true;
        m.rejoined = true;
        m.lost_parent = tree.parent(me).filter(|&p| p != tree.root());
        Ok(m)
    }

    /// The root of the tree.
    fn tree_root(&self) -> Option<NodeId> {
        self.root
    }

    /// The parent (None at the root).
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// The children, in send order.
    pub fn children(&self) -> &[NodeId] {
        &self.children
    }

    /// The configuration.
    pub fn config(&self) -> &BroadcastConfig {
        &self.config
    }

    /// Length of the message, once known.
    pub fn total_len(&self) -> Option<u64> {
        self.total_len
    }

    /// Bytes held so far.
    pub fn received_bytes(&self) -> u64 {
        self.received
    }

    fn on_start(&mut self, now: Time, out: &mut Outputs) {
        if self.started {
            return;
        }
        self.started = true;
        if self.parent.is_none() {
            self.received = self.total_len.unwrap_or(0);
            self.forward_ready(out);
            self.check_finished(out);
        } else {
            if self.rejoined {
                self.ask_root(out);
            }
            self.arm_idle_timer(now, out);
        }
    }

    /// Asks the root for everything from the first segment this node misses.
    fn ask_root(&self, out: &mut Outputs) {
        let Some(root) = self.parent else { return };
        let first = self.received / self.config.segment_bytes;
        out.send(
            root,
            Message::Pieces(PieceMsg::Request(PieceRef {
                transfer: self.config.transfer,
                piece: u32::try_from(first).unwrap_or(u32::MAX),
            })),
        );
    }

    /// At the root: a node that re-attached asks for every frame from segment `r.piece` on.
    fn on_request(
        &self,
        from: NodeId,
        r: PieceRef,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = PieceMsg::REQUEST;
        let Some(data) = &self.root_data else {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "only the root serves a node that re-attaches",
            });
        };
        ProtocolError::check_transfer(from, kind, self.config.transfer, r.transfer)?;
        let total = data.len() as u64;
        let seg = self.config.segment_bytes;
        let start = u64::from(r.piece).saturating_mul(seg);
        if start > total || (start == total && total > 0) {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "a segment past the end of the message",
            });
        }
        if self.status == Status::Aborted {
            return Ok(());
        }
        let mut chunks = Vec::new();
        if total == 0 {
            chunks.push((0, Bytes::new()));
        }
        let mut at = start;
        while at < total {
            let end = (at / seg + 1).saturating_mul(seg).min(total);
            chunk_into(
                at,
                data.slice(at as usize..end as usize),
                self.config.max_frame_payload,
                &mut chunks,
            );
            at = end;
        }
        for (offset, payload) in chunks {
            out.send(
                from,
                Message::Broadcast(BroadcastMsg::Data(DataSegment {
                    transfer: self.config.transfer,
                    offset,
                    total_len: total,
                    payload,
                })),
            );
        }
        Ok(())
    }

    fn arm_idle_timer(&mut self, now: Time, out: &mut Outputs) {
        if let Some(timeout) = self.config.idle_timeout {
            let at = now + timeout;
            self.idle_deadline = Some(at);
            out.push(Output::SetTimer {
                timer: IDLE_TIMER,
                at,
            });
        }
    }

    fn on_data(
        &mut self,
        now: Time,
        from: NodeId,
        seg: DataSegment,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = BroadcastMsg::DATA;
        if self.status == Status::Aborted {
            return Ok(()); // late data for a node that gave up: nothing to do
        }
        if self.lost_parent == Some(from) {
            // A parent counted failed forwards what it still has (a restarted life's data,
            // a silent one that woke up): this node takes its data from its current parent
            // (the root, once re-attached), or already holds it all.
            return Ok(());
        }
        if Some(from) != self.parent {
            let why = if self.parent.is_none() {
                "the root receives no data"
            } else {
                "the sender is not this node's parent"
            };
            return Err(ProtocolError::UnexpectedMessage { from, kind, why });
        }
        ProtocolError::check_transfer(from, kind, self.config.transfer, seg.transfer)?;
        seg.validate()
            .map_err(|source| ProtocolError::Frame { from, source })?;
        if self.status == Status::Finished {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "the broadcast is already complete",
            });
        }
        if self.total_len.is_some_and(|t| t != seg.total_len) {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "total_len differs from earlier segments",
            });
        }
        let mut seg = seg;
        if self.reattached && seg.offset < self.received && self.total_len.is_some() {
            // The root resends from the start of a segment: drop what is already held.
            let end = seg.offset + seg.payload.len() as u64;
            if end <= self.received {
                return Ok(());
            }
            let skip = (self.received - seg.offset) as usize;
            seg.payload = seg.payload.slice(skip..);
            seg.offset = self.received;
        }
        if seg.offset != self.received {
            return Err(ProtocolError::OutOfOrder {
                from,
                kind,
                expected: self.received,
                found: seg.offset,
            });
        }
        if seg.payload.is_empty() && seg.total_len > 0 {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "empty segment of a non-empty message",
            });
        }
        // Accepted: from here on the machine changes.
        self.started = true;
        self.total_len = Some(seg.total_len);
        self.received += seg.payload.len() as u64;
        if !seg.payload.is_empty() {
            out.push(Output::Deliver {
                transfer: self.config.transfer,
                offset: seg.offset,
                data: seg.payload.clone(),
            });
            self.pending.push_back(seg.payload);
        }
        self.forward_ready(out);
        if !self.check_finished(out) {
            self.arm_idle_timer(now, out);
        }
        Ok(())
    }

    /// Forwards every segment that is complete and not yet forwarded.
    fn forward_ready(&mut self, out: &mut Outputs) {
        let Some(total) = self.total_len else { return };
        if total == 0 {
            if !self.forward_done {
                self.forward_done = true;
                self.forward(&[(0, Bytes::new())], 0, out);
            }
            return;
        }
        let seg = self.config.segment_bytes;
        while self.forwarded < total {
            let end = (self.forwarded / seg)
                .saturating_add(1)
                .saturating_mul(seg)
                .min(total);
            if end > self.received {
                break;
            }
            let mut chunks = Vec::new();
            let mut need = (end - self.forwarded) as usize;
            let mut at = self.forwarded;
            while need > 0 {
                let Some(front) = self.pending.front_mut() else {
                    break; // cannot happen: pending holds forwarded..received
                };
                let piece = if front.len() <= need {
                    self.pending.pop_front().unwrap_or_default()
                } else {
                    front.split_to(need)
                };
                need -= piece.len();
                let len = piece.len() as u64;
                chunk_into(at, piece, self.config.max_frame_payload, &mut chunks);
                at += len;
            }
            self.forward(&chunks, total, out);
            self.forwarded = end;
            out.push(Output::Report(Report::Progress {
                transfer: self.config.transfer,
                done_bytes: end,
                total_bytes: total,
            }));
        }
        self.forward_done = self.forwarded == total;
    }

    /// Sends `chunks` (one segment) to every live child, child by child in send order.
    fn forward(&self, chunks: &[(u64, Bytes)], total: u64, out: &mut Outputs) {
        for (&child, _) in self
            .children
            .iter()
            .zip(&self.child_alive)
            .filter(|(_, alive)| **alive)
        {
            for (offset, payload) in chunks {
                out.send(
                    child,
                    Message::Broadcast(BroadcastMsg::Data(DataSegment {
                        transfer: self.config.transfer,
                        offset: *offset,
                        total_len: total,
                        payload: payload.clone(),
                    })),
                );
            }
        }
    }

    /// Finishes when everything is held and forwarded; returns true when finished now.
    fn check_finished(&mut self, out: &mut Outputs) -> bool {
        if self.status != Status::Running
            || !self.forward_done
            || self.total_len != Some(self.received)
        {
            return false;
        }
        self.status = Status::Finished;
        if self.idle_deadline.take().is_some() {
            out.push(Output::CancelTimer(IDLE_TIMER));
        }
        out.push(Output::Finished);
        true
    }

    fn abort(&mut self, reason: AbortReason, out: &mut Outputs) {
        self.status = Status::Aborted;
        if self.idle_deadline.take().is_some() {
            out.push(Output::CancelTimer(IDLE_TIMER));
        }
        out.push(Output::Aborted(reason));
    }
}

impl Protocol for TreeBroadcast {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => self.on_start(now, out),
            Input::Message {
                from,
                message: Message::Broadcast(BroadcastMsg::Data(seg)),
            } => self.on_data(now, from, seg, out)?,
            Input::Message {
                from,
                message: Message::Pieces(PieceMsg::Request(r)),
            } => self.on_request(from, r, out)?,
            Input::Message { from, message } => {
                return Err(ProtocolError::UnexpectedMessage {
                    from,
                    kind: message.kind(),
                    why: "not part of a broadcast",
                })
            }
            Input::Timer(IDLE_TIMER) => {
                if let (Status::Running, Some(due)) = (self.status, self.idle_deadline) {
                    if now >= due {
                        let waited = self.config.idle_timeout.unwrap_or_default();
                        self.abort(AbortReason::Timeout { waited }, out);
                    }
                }
            }
            Input::Timer(_) => {} // not ours: stale or foreign timers are harmless
            Input::Command(crate::node::Command::ComputeDone { task }) => {
                return Err(ProtocolError::UnknownTask { task })
            }
            Input::SendComplete { to, id } => return Err(ProtocolError::UnknownSend { to, id }),
            // Requests of the application are the host's business.
            Input::App(_) => {}
            Input::PeerFailed(peer) => {
                if Some(peer) == self.parent {
                    self.lost_parent = Some(peer);
                    if self.status != Status::Running {
                        // Finished (or gave up): nothing more is needed from it.
                    } else if self.root_data.is_none() && Some(peer) != self.tree_root() {
                        // Re-attach to the root and ask for what is missing.
                        self.parent = self.tree_root();
                        self.reattached = true;
                        self.ask_root(out);
                        self.arm_idle_timer(now, out);
                    } else {
                        self.abort(AbortReason::PeerFailed { peer }, out);
                    }
                } else if let Some(i) = self.children.iter().position(|&c| c == peer) {
                    self.child_alive[i] = false;
                }
            }
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

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    fn chain3() -> Tree {
        Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(1))]).unwrap()
    }

    fn sends(out: &Outputs) -> Vec<(NodeId, u64, usize)> {
        out.as_slice()
            .iter()
            .filter_map(|o| match o {
                Output::Send(t) => match &t.message {
                    Message::Broadcast(BroadcastMsg::Data(d)) => {
                        Some((t.to, d.offset, d.payload.len()))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    #[test]
    fn root_sends_segments_child_by_child() {
        let tree = Tree::from_edges(3, n(0), &[(n(2), n(0)), (n(1), n(0))]).unwrap();
        let mut cfg = BroadcastConfig::new(TransferId(1), 4);
        cfg.max_frame_payload = 3;
        let mut root =
            TreeBroadcast::new(n(0), &tree, Some(Bytes::from_static(b"abcdefghij")), cfg).unwrap();
        let mut out = Outputs::new();
        root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        // Segments [0,4) [4,8) [8,10); frames of at most 3 bytes; child 2 before child 1.
        assert_eq!(
            sends(&out),
            vec![
                (n(2), 0, 3),
                (n(2), 3, 1),
                (n(1), 0, 3),
                (n(1), 3, 1),
                (n(2), 4, 3),
                (n(2), 7, 1),
                (n(1), 4, 3),
                (n(1), 7, 1),
                (n(2), 8, 2),
                (n(1), 8, 2),
            ]
        );
        assert_eq!(cfg.frames_per_edge(10), 5);
        assert_eq!(out.as_slice().last(), Some(&Output::Finished));
        assert!(root.is_finished());
    }

    #[test]
    fn relay_forwards_whole_segments_only() {
        let cfg = BroadcastConfig::new(TransferId(1), 4);
        let mut mid = TreeBroadcast::new(n(1), &chain3(), None, cfg).unwrap();
        let mut out = Outputs::new();
        mid.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        let data = |offset: u64, p: &'static [u8]| Input::Message {
            from: n(0),
            message: Message::Broadcast(BroadcastMsg::Data(DataSegment {
                transfer: TransferId(1),
                offset,
                total_len: 6,
                payload: Bytes::from_static(p),
            })),
        };
        mid.handle(Time::ZERO, data(0, b"abc"), &mut out).unwrap();
        assert!(sends(&out).is_empty());
        assert_eq!(out.len(), 1); // delivered, not forwarded
        out.clear();
        mid.handle(Time::ZERO, data(3, b"de"), &mut out).unwrap();
        // Segment [0,4) is complete: forwarded as the pieces it arrived in, "abc" and "d".
        assert_eq!(sends(&out), vec![(n(2), 0, 3), (n(2), 3, 1)]);
        out.clear();
        // Out of order, wrong sender, wrong transfer: rejected without any output.
        assert!(matches!(
            mid.handle(Time::ZERO, data(4, b"f"), &mut out),
            Err(ProtocolError::OutOfOrder {
                expected: 5,
                found: 4,
                ..
            })
        ));
        let from2 = Input::Message {
            from: n(2),
            message: Message::Broadcast(BroadcastMsg::Data(DataSegment {
                transfer: TransferId(1),
                offset: 5,
                total_len: 6,
                payload: Bytes::from_static(b"f"),
            })),
        };
        assert!(mid.handle(Time::ZERO, from2, &mut out).is_err());
        assert!(out.is_empty());
        mid.handle(Time::ZERO, data(5, b"f"), &mut out).unwrap();
        // Pieces are forwarded as they are (never copied to coalesce them): "e" and "f".
        assert_eq!(sends(&out), vec![(n(2), 4, 1), (n(2), 5, 1)]);
        assert!(mid.is_finished());
        assert!(mid.handle(Time::ZERO, data(6, b""), &mut out).is_err());
    }

    #[test]
    fn empty_message_is_one_empty_frame() {
        let cfg = BroadcastConfig::new(TransferId(0), 8);
        let mut root = TreeBroadcast::new(n(0), &chain3(), Some(Bytes::new()), cfg).unwrap();
        let mut out = Outputs::new();
        root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        assert_eq!(sends(&out), vec![(n(1), 0, 0)]);
        assert!(root.is_finished());
    }

    #[test]
    fn idle_timeout_and_parent_failure_abort() {
        let mut cfg = BroadcastConfig::new(TransferId(0), 8);
        cfg.idle_timeout = Some(Duration::from_millis(5));
        let mut leaf = TreeBroadcast::new(n(2), &chain3(), None, cfg).unwrap();
        let mut out = Outputs::new();
        leaf.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        assert_eq!(
            out.as_slice(),
            &[Output::SetTimer {
                timer: IDLE_TIMER,
                at: Time::from_millis(5)
            }]
        );
        out.clear();
        // A stale firing (before the deadline) is ignored.
        leaf.handle(Time::from_millis(1), Input::Timer(IDLE_TIMER), &mut out)
            .unwrap();
        assert!(out.is_empty() && leaf.status() == Status::Running);
        leaf.handle(Time::from_millis(5), Input::Timer(IDLE_TIMER), &mut out)
            .unwrap();
        assert_eq!(leaf.status(), Status::Aborted);
        assert!(matches!(
            out.as_slice().last(),
            Some(Output::Aborted(AbortReason::Timeout { .. }))
        ));

        let mut mid = TreeBroadcast::new(n(1), &chain3(), None, cfg).unwrap();
        out.clear();
        mid.handle(Time::ZERO, Input::PeerFailed(n(2)), &mut out)
            .unwrap();
        assert_eq!(mid.status(), Status::Running);
        mid.handle(Time::ZERO, Input::PeerFailed(n(0)), &mut out)
            .unwrap();
        assert_eq!(mid.status(), Status::Aborted);
    }

    /// A node takes data only from its current parent: after its tree parent is counted
    /// failed, that parent's frames (a restarted life forwarding from offset 0, or a silent
    /// one that woke up) are dropped without an error, whether the node re-attached to the
    /// root or had finished; a rejoining node drops its old parent's frames too. A parent
    /// never counted failed still may not send past the end.
    #[test]
    fn a_lost_parents_frames_are_dropped_quietly() {
        let cfg = BroadcastConfig::new(TransferId(1), 4);
        let data = |from: u32, offset: u64, p: &'static [u8]| Input::Message {
            from: n(from),
            message: Message::Broadcast(BroadcastMsg::Data(DataSegment {
                transfer: TransferId(1),
                offset,
                total_len: 6,
                payload: Bytes::from_static(p),
            })),
        };
        let delivered = |out: &Outputs| -> Vec<(u64, usize)> {
            out.as_slice()
                .iter()
                .filter_map(|o| match o {
                    Output::Deliver { offset, data, .. } => Some((*offset, data.len())),
                    _ => None,
                })
                .collect()
        };
        // Re-attached: node 1's frames from any offset are dropped, the root's are taken.
        let mut leaf = TreeBroadcast::new(n(2), &chain3(), None, cfg).unwrap();
        let mut out = Outputs::new();
        leaf.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        leaf.handle(Time::ZERO, data(1, 0, b"abcd"), &mut out)
            .unwrap();
        leaf.handle(Time::ZERO, Input::PeerFailed(n(1)), &mut out)
            .unwrap();
        assert_eq!(leaf.parent(), Some(n(0)));
        out.clear();
        let again: [(u64, &'static [u8]); 3] = [(0, b"abcd"), (4, b"ef"), (0, b"ab")];
        for (offset, p) in again {
            leaf.handle(Time::ZERO, data(1, offset, p), &mut out)
                .unwrap();
        }
        assert!(out.is_empty(), "{out:?}");
        leaf.handle(Time::ZERO, data(0, 4, b"ef"), &mut out)
            .unwrap();
        assert_eq!(delivered(&out), vec![(4, 2)]);
        assert!(leaf.is_finished());
        leaf.handle(Time::ZERO, data(1, 0, b"abcd"), &mut out)
            .unwrap();
        // Finished before its parent was counted failed: the parent's later frames too.
        let mut done = TreeBroadcast::new(n(2), &chain3(), None, cfg).unwrap();
        done.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        done.handle(Time::ZERO, data(1, 0, b"abcd"), &mut out)
            .unwrap();
        done.handle(Time::ZERO, data(1, 4, b"ef"), &mut out)
            .unwrap();
        assert!(done.is_finished());
        assert!(done
            .handle(Time::ZERO, data(1, 0, b"abcd"), &mut out)
            .is_err());
        done.handle(Time::ZERO, Input::PeerFailed(n(1)), &mut out)
            .unwrap();
        out.clear();
        done.handle(Time::ZERO, data(1, 0, b"abcd"), &mut out)
            .unwrap();
        assert!(out.is_empty(), "{out:?}");
        // Rejoining: frames its old parent had on the way are dropped, the root's taken.
        let mut back = TreeBroadcast::rejoin(n(2), &chain3(), cfg).unwrap();
        back.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        out.clear();
        back.handle(Time::ZERO, data(1, 4, b"ef"), &mut out)
            .unwrap();
        assert!(out.is_empty(), "{out:?}");
        back.handle(Time::ZERO, data(0, 0, b"abcd"), &mut out)
            .unwrap();
        assert_eq!(delivered(&out), vec![(0, 4)]);
        // Another node is still refused.
        let e = back.handle(Time::ZERO, data(3, 4, b"ef"), &mut out);
        assert!(e.is_err());
        // A rejoining child of the root takes the root's frames.
        let mut mid = TreeBroadcast::rejoin(n(1), &chain3(), cfg).unwrap();
        mid.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        out.clear();
        mid.handle(Time::ZERO, data(0, 0, b"abcd"), &mut out)
            .unwrap();
        assert_eq!(delivered(&out), vec![(0, 4)]);
    }

    #[test]
    fn setup_errors() {
        let cfg = BroadcastConfig::new(TransferId(0), 8);
        let t = chain3();
        assert!(matches!(
            TreeBroadcast::new(n(0), &t, None, cfg),
            Err(SetupError::Data { .. })
        ));
        assert!(matches!(
            TreeBroadcast::new(n(1), &t, Some(Bytes::new()), cfg),
            Err(SetupError::Data { .. })
        ));
        assert!(matches!(
            TreeBroadcast::new(n(7), &t, None, cfg),
            Err(SetupError::NotInTree { .. })
        ));
        let zero = BroadcastConfig::new(TransferId(0), 0);
        assert!(TreeBroadcast::new(n(1), &t, None, zero).is_err());
        let mut big = cfg;
        big.max_frame_payload = u32::MAX;
        assert!(big.validate().is_err());
    }
}
