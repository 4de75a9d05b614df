//! Pipelined broadcast over any [`Tree`] of `windrose-trees`.
//!
//! The root's message (a [`Bytes`] of `L` bytes) is cut into segments of
//! [`segment_bytes`](BroadcastConfig::segment_bytes) (the last one shorter; one segment of `L`
//! bytes is store-and-forward). A node forwards a segment to its children as soon as the whole
//! segment has arrived, so segments flow down the tree in a pipeline. Per segment, children are
//! served in the tree's send order: every frame of the segment to child 1, then to child 2, and so
//! on (a large message is paced per child: see "Leaving a link that slows"). On the wire a segment travels as one or more [`DataSegment`] frames of at most
//! [`max_frame_payload`](BroadcastConfig::max_frame_payload) bytes; an empty message travels as
//! one empty frame, so every edge carries exactly [`BroadcastConfig::frames_per_edge`] frames.
//!
//! A node knows only its parent and its children (from the tree). Every non-root node delivers
//! each received frame's bytes to its application in order ([`Output::Deliver`]; the root, which
//! has the message, delivers nothing) and reports [`Report::Progress`] per forwarded segment. It
//! finishes when it holds all `L` bytes and has handed every send to the driver: a root whose
//! message fits the window finishes on [`Input::Start`]. Payloads are never copied: every frame
//! carries a slice of the root's [`Bytes`] or of a receive buffer.
//!
//! Failures: a child declared failed is skipped from then on. A node whose parent fails
//! re-attaches to the root, the one node sure to hold the whole message (a relay holds only what
//! reached it so far): it asks with a [`PieceMsg::Request`] whose `piece`
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
//!
//! # Leaving a link that slows (between segments)
//!
//! A broadcast planned on the weather before a link slowed would otherwise send every segment
//! over it: at 4 MiB, one broadcast of issue 16's series took 8.65 s where the oracle's tree
//! takes 1.52 s. So a sender may hand a child over to another of its children while it runs.
//!
//! - **Paced sends.** A sender keeps a window of segments handed to the driver and not yet
//!   completed per child; the last frame of each segment asks for its completion. The
//!   window starts at [`WINDOW_BYTES`] (at least [`MIN_WINDOW_SEGMENTS`] segments), and the
//!   host's view sizes it per child at the start ([`Protocol::steer`]): twice the link's
//!   bandwidth-delay product plus a segment, so a fast, distant link is not throttled.
//!   Messages of no more segments than the starting window, and every message under a
//!   driver without a host (nothing steers the machine before its start), are sent at once
//!   without completions, exactly as before. Segments still go out segment by segment, each to
//!   every child due it in send order; a child whose window is full is skipped until a
//!   completion frees it, so fast children are not held back by a slow one.
//! - **Detection, at the sender.** Each completion on a child's busy connection gives its
//!   rate in this broadcast: from the previous completion, or for the first of a busy period
//!   from the send that started it, less the link's one-way latency in the host's view.
//!   After each completion the host offers its view ([`Protocol::steer`]): a child is
//!   *slowed* when its rate is [`SLOWED_BY`] times below the sender's own measured forecast
//!   of that link (no forecast: never), and it is handed over when its remaining bytes at
//!   that rate would take [`HANDOFF_GAIN`] times longer than over the cheapest detour
//!   `p -> c` in the host's view, `p` any other live child of the sender that is not handed
//!   over itself, takes every segment from `s` on from it, and is not slowed itself (by its
//!   last sample, or by a segment in flight [`SLOWED_BY`] times longer than its link should
//!   take). A child that adopted another is never handed away: its adoptee's segments come
//!   through it, and its new parent's adopt could overtake the sender's, queued behind data
//!   on a slowed link (a loopback run once failed so). If its own link slows, it stays. A
//!   detour that leaves the
//!   sender's site towards `c`'s, as the slowed link does, is priced at the slowed rate
//!   (it crosses the same WAN path). The slowed rate goes to the host's forecast of the
//!   link too: a link left after a few segments would never fill a sample of the host's
//!   meter, and the next plan must know it.
//! - **Hand-off.** With `s` the next segment the sender would send `c`, the sender sends
//!   `p` an [`Adopt`] `{child: c, from_segment: s}` and never sends `c` a segment `>= s`.
//!   `p` sends `c` an [`Adopt`] `{child: c, from_segment: s}` (before any data, FIFO per
//!   connection), adds `c` as a child of its own from segment `s` (after its other children
//!   in send order) and serves it every segment `>= s` it holds or will receive: a relay keeps
//!   the segments it received for this (zero-copy slices of what it delivered). `c` takes
//!   segments `< s` from its old parent and `>= s` from `p` ([`TreeBroadcast::parent_of_segment`]);
//!   `p`'s frames that arrive before the old parent's last one are held until the gap is
//!   filled.
//! - **Why every node gets every byte exactly once, in order.** For each segment `k` the
//!   senders form a tree: a hand-off at `s` moves `c` under `p` for segments `>= s` only,
//!   where `p` is `x`'s child for every such segment (it was not handed away, and was
//!   `x`'s child from a segment `<= s`), so `p` is not in `c`'s subtree and no cycle forms;
//!   segments `< s` keep their tree. A node accepts segment `k`'s frames only from its parent
//!   of segment `k`; each parent sends each segment once, over a FIFO connection, so each
//!   range arrives in order without duplicates, and delivery is in offset order (held frames
//!   wait for the gap below them). The old parent sent exactly the segments `< s` (it stops
//!   at `s`, the first it had not sent), and `p` sends exactly `>= s` (it starts at `s`).
//! - **Failures.** `p` fails: the sender sends `c` the rest itself from `s` on; `c`, if it
//!   had heard of the hand-off, re-attaches to the root as for any lost parent (asking from
//!   its first missing segment) and drops the frames of its other parents from then on, so
//!   what it takes is the root's contiguous stream (overlaps are trimmed as in any
//!   re-attach). `c` fails: both senders skip it; its children re-attach to the root. The
//!   old parent `x` fails: if `c` holds every segment `< s`, nothing changes; otherwise `c`
//!   re-attaches to the root (and `p`, whose parent `x` was, re-attaches too and keeps
//!   serving its children, `c` dropping its frames). The root failing aborts, as before.
//! - **Limits.** Detection needs one completion on the slowed connection, and a window is
//!   already handed to the driver then: at 256 KiB segments and 0.5 MB/s three segments
//!   still cross the slowed link (1.6 s). Over TCP a completion means written into the
//!   kernel, so what the socket buffers hold also crosses it. Only a child of the sender can
//!   adopt (one hop of detour; the sender itself cannot route around the link to a node
//!   that is not its child). The sender keeps paying the slowed link if the adopter fails
//!   and `c` had re-attached to the root (its frames are then dropped). A steered node keeps
//!   the last [`RETAIN_BYTES`] of the segments it forwarded, so its memory stays bounded
//!   whatever the message's size, and a child is handed only to a sibling that still holds
//!   the child's next segment (the sender knows what it sent that sibling; a sibling too far
//!   ahead is not offered). A host with
//!   [`steer_broadcasts`](crate::host::HostConfig::steer_broadcasts) off (the MPI shim: a
//!   rank progresses only inside its calls, and receives into the caller's buffer) neither
//!   paces nor hands off, and its relays release each segment once every child was sent it.

use crate::frame::{
    self, Family, FrameError, KindLayout, Message, MessageKind, TransferId, DEFAULT_MAX_BODY_LEN,
    MAX_FIXED_BODY_LEN,
};
use crate::node::{
    AbortReason, Input, Output, Outputs, Protocol, ProtocolError, Report, SendId, SetupError,
    Status, TimerId, Transmit,
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

/// A hand-off between segments (see the module docs, "Leaving a link that slows"): sent by a
/// parent `x` to its child `p`, it asks `p` to adopt `child` from segment `from_segment` on;
/// sent by `p` to `child` (then `child` is the receiver itself), it says that `p` is the
/// receiver's parent for segments `from_segment` and later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adopt {
    /// The broadcast.
    pub transfer: TransferId,
    /// The node that changes parent.
    pub child: NodeId,
    /// The first segment (index, in units of the broadcast's `segment_bytes`) the new parent
    /// sends it.
    pub from_segment: u64,
}

/// The broadcast's messages (frame family 3). A receiver that restarted asks for the rest with
/// the piece family's `Request` (see the module docs).
///
/// | kind | message           | fixed body fields                                  |
/// |------|-------------------|----------------------------------------------------|
/// | 1    | [`DataSegment`]   | transfer u32, offset u64, total_len u64 (20 bytes), then the payload |
/// | 2    | [`Adopt`]         | transfer u32, child u32, from_segment u64 (16 bytes) |
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BroadcastMsg {
    /// A segment of the message.
    Data(DataSegment),
    /// A hand-off of a child to a new parent between segments.
    Adopt(Adopt),
}

impl BroadcastMsg {
    /// The kind of [`BroadcastMsg::Data`].
    pub const DATA: MessageKind = MessageKind::of::<BroadcastMsg>(1);
    /// The kind of [`BroadcastMsg::Adopt`].
    pub const ADOPT: MessageKind = MessageKind::of::<BroadcastMsg>(2);
}

impl From<DataSegment> for Message {
    fn from(d: DataSegment) -> Message {
        Message::Broadcast(BroadcastMsg::Data(d))
    }
}

impl Family for BroadcastMsg {
    const FAMILY: u8 = 3;
    const KINDS: &'static [KindLayout] = &[
        KindLayout {
            kind: 1,
            name: "data",
            fixed: 20,
            payload: true,
        },
        KindLayout {
            kind: 2,
            name: "adopt",
            fixed: 16,
            payload: false,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            BroadcastMsg::Data(_) => 1,
            BroadcastMsg::Adopt(_) => 2,
        }
    }

    fn transfer(&self) -> Option<TransferId> {
        match self {
            BroadcastMsg::Data(d) => Some(d.transfer),
            BroadcastMsg::Adopt(a) => Some(a.transfer),
        }
    }

    fn payload(&self) -> Option<&Bytes> {
        match self {
            BroadcastMsg::Data(d) => Some(&d.payload),
            BroadcastMsg::Adopt(_) => None,
        }
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        match self {
            BroadcastMsg::Data(d) => {
                dst.put_u32(d.transfer.0);
                dst.put_u64(d.offset);
                dst.put_u64(d.total_len);
            }
            BroadcastMsg::Adopt(a) => {
                dst.put_u32(a.transfer.0);
                dst.put_u32(a.child.0);
                dst.put_u64(a.from_segment);
            }
        }
    }

    fn parse(kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        if kind == 2 {
            return Ok(BroadcastMsg::Adopt(Adopt {
                transfer: TransferId(body.get_u32()),
                child: NodeId(body.get_u32()),
                from_segment: body.get_u64(),
            }));
        }
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
        match self {
            BroadcastMsg::Data(d) => d.validate(),
            BroadcastMsg::Adopt(_) => Ok(()),
        }
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

/// Bytes a sender keeps handed to the driver and not completed per child (at least
/// [`MIN_WINDOW_SEGMENTS`] segments): what lets it leave a link that slows between segments
/// (see the module docs). Messages no longer than this are sent at once, as they always were.
pub const WINDOW_BYTES: u64 = 512 << 10;

/// What a steered node keeps of the segments it has forwarded (at least a window's worth),
/// so a child handed to it can be served from a segment it already passed on, and its
/// memory stays bounded for any message.
pub const RETAIN_BYTES: u64 = 64 << 20;
/// The fewest segments a sender keeps in flight per child.
pub const MIN_WINDOW_SEGMENTS: u64 = 2;
/// A child's link counts as slowed when its rate in this broadcast is this many times below
/// the sender's measured figure for it.
pub const SLOWED_BY: f64 = 3.0;
/// A slowed child is handed over when its remaining segments would take this many times
/// longer over its link than over the best detour.
pub const HANDOFF_GAIN: f64 = 2.0;

/// A node this one sends to: a tree child, or a child adopted between segments.
#[derive(Clone, Debug)]
struct Child {
    node: NodeId,
    alive: bool,
    /// The next segment to send it.
    next: u64,
    /// The first segment it takes from this node (0 for a tree child).
    from: u64,
    /// Handed to another parent: (first segment it no longer takes from here, that parent).
    handed: Option<(u64, NodeId)>,
    /// Segments sent whose last frame has not completed (paced sends only).
    inflight: u64,
    /// The clock of the busy period: the last completion, or the send that started the
    /// period (then `true`: the time to the next completion includes the link's latency).
    clock: Option<(Time, bool)>,
    /// The last sample not yet looked at by [`TreeBroadcast::steer`]: (bytes, seconds,
    /// whether the seconds include the latency).
    fresh: Option<(u64, f64, bool)>,
    /// Segments kept in flight to it (sized by the host's view at the first
    /// [`TreeBroadcast::steer`]).
    window: u64,
    /// The window was sized from the host's view.
    sized: bool,
    /// Its last rate sample was [`SLOWED_BY`] below the forecast: it adopts nobody.
    slowed: bool,
    /// Another child was handed to it: it is not handed away itself.
    adopting: bool,
}

impl Child {
    fn new(node: NodeId, from: u64) -> Child {
        Child {
            node,
            alive: true,
            next: from,
            from,
            handed: None,
            inflight: 0,
            clock: None,
            fresh: None,
            window: 0,
            sized: false,
            slowed: false,
            adopting: false,
        }
    }

    /// The first segment it does not take from this node.
    fn end(&self, count: u64) -> u64 {
        self.handed.map_or(count, |(s, _)| s.min(count))
    }
}

/// Segments of a message of `total` bytes (an empty message is one empty segment).
fn segment_count(total: u64, seg: u64) -> u64 {
    if total == 0 {
        1
    } else {
        total.div_ceil(seg.max(1))
    }
}

/// One node of a pipelined tree broadcast. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct TreeBroadcast {
    me: NodeId,
    /// The tree's root (None at the root itself).
    root: Option<NodeId>,
    /// The parent for segment 0 on (the tree's, or the root after a re-attach).
    parent: Option<NodeId>,
    /// Parents that took over between segments: (first segment, parent), ascending.
    later_parents: Vec<(u64, NodeId)>,
    /// The tree's children, in send order.
    children: Vec<NodeId>,
    /// Every node this one sends to: the tree's children, then adopted ones.
    kids: Vec<Child>,
    config: BroadcastConfig,
    started: bool,
    status: Status,
    /// Length of the message, once known (at the root from the start).
    total_len: Option<u64>,
    /// Bytes held: received (or, at the root, all of them once started).
    received: u64,
    /// Bytes `complete * segment_bytes..received`, in order: the segment being received.
    pending: VecDeque<Bytes>,
    /// Whole segments held (at the root: all of them once started).
    complete: u64,
    /// Segments reported with [`Report::Progress`].
    reported: u64,
    /// A relay's whole segments, as the frames they arrived in. A segment every child has
    /// been sent is released (below `released`): at once when unsteered (nobody can be
    /// handed to this node then), once it is [`RETAIN_BYTES`] behind the newest when steered
    /// (a child handed to this node is served from what it still holds).
    held: Vec<Vec<(u64, Bytes)>>,
    /// Segments below this one are released from `held`.
    released: u64,
    /// Frames from a later parent that arrived before the earlier parent's last segment.
    early: std::collections::BTreeMap<u64, DataSegment>,
    /// When the idle timer is due (non-root nodes with a timeout).
    idle_deadline: Option<Time>,
    /// The root: the whole message, for nodes that re-attach to it.
    root_data: Option<Bytes>,
    /// The parent now is the root after a repair (or a rejoin): frames may overlap what is held.
    reattached: bool,
    /// A restarted or late node's machine ([`TreeBroadcast::rejoin`]).
    rejoined: bool,
    /// Parents counted failed or left (at a rejoining node: its tree parent, unless that is
    /// the root): their later frames are dropped (see the module docs).
    lost_parents: Vec<NodeId>,
    /// Hand-offs this node made: (child, first segment, new parent).
    handoffs: Vec<(NodeId, u64, NodeId)>,
    /// The time of the input being handled.
    now: Time,
    /// A host offered its view ([`TreeBroadcast::steer`]) before the first send: only then
    /// are sends paced (a driver without a host sends everything at once, as before).
    steered: bool,
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
        let total_len = match (is_root, data) {
            (true, Some(d)) => Some(d.len() as u64),
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
            (false, None) => None,
        };
        let children = tree.children(me).to_vec();
        Ok(TreeBroadcast {
            me,
            root: (!is_root).then(|| tree.root()),
            parent: tree.parent(me),
            later_parents: Vec::new(),
            kids: children.iter().map(|&c| Child::new(c, 0)).collect(),
            children,
            config,
            started: false,
            status: Status::Running,
            total_len,
            received: 0,
            pending: VecDeque::new(),
            complete: 0,
            reported: 0,
            held: Vec::new(),
            early: std::collections::BTreeMap::new(),
            idle_deadline: None,
            root_data,
            reattached: false,
            rejoined: false,
            lost_parents: Vec::new(),
            handoffs: Vec::new(),
            now: Time::ZERO,
            steered: false,
            released: 0,
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
        m.kids.iter_mut().for_each(|c| c.alive = false);
        m.parent = Some(tree.root());
        m.reattached = true;
        m.rejoined = true;
        m.lost_parents
            .extend(tree.parent(me).filter(|&p| p != tree.root()));
        Ok(m)
    }

    /// The root of the tree.
    fn tree_root(&self) -> Option<NodeId> {
        self.root
    }

    /// The parent for the first segments (None at the root).
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// The parent of segment `k` now: the last hand-off that covers it, else [`parent`].
    ///
    /// [`parent`]: TreeBroadcast::parent
    pub fn parent_of_segment(&self, k: u64) -> Option<NodeId> {
        self.later_parents
            .iter()
            .rev()
            .find(|(s, _)| *s <= k)
            .map(|&(_, p)| p)
            .or(self.parent)
    }

    /// The tree's children, in send order.
    pub fn children(&self) -> &[NodeId] {
        &self.children
    }

    /// The hand-offs this node made as a sender: (child, first segment, new parent).
    pub fn handoffs(&self) -> &[(NodeId, u64, NodeId)] {
        &self.handoffs
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

    /// Bytes of forwarded segments this node still keeps for a child that may be handed to it
    /// (at most [`RETAIN_BYTES`] plus a window when steered, nothing it has sent to every
    /// child when not).
    pub fn kept_bytes(&self) -> u64 {
        self.held
            .iter()
            .flatten()
            .map(|(_, b)| b.len() as u64)
            .sum()
    }

    /// Segments kept in flight per child: [`WINDOW_BYTES`] of them, at least
    /// [`MIN_WINDOW_SEGMENTS`].
    fn window(&self) -> u64 {
        (WINDOW_BYTES / self.config.segment_bytes.max(1)).max(MIN_WINDOW_SEGMENTS)
    }

    /// Segments a steered node keeps after forwarding them ([`RETAIN_BYTES`], at least a
    /// window).
    fn retained(&self) -> u64 {
        (RETAIN_BYTES / self.config.segment_bytes.max(1)).max(self.window())
    }

    /// Whether sends are paced (the message has more segments than the window): only then
    /// does the node ask for completions and can it hand a child over.
    fn paced(&self) -> bool {
        self.steered
            && self
                .total_len
                .is_some_and(|t| segment_count(t, self.config.segment_bytes) > self.window())
    }

    fn on_start(&mut self, now: Time, out: &mut Outputs) {
        if self.started {
            return;
        }
        self.started = true;
        if self.parent.is_none() {
            let total = self.total_len.unwrap_or(0);
            self.received = total;
            self.complete = segment_count(total, self.config.segment_bytes);
            self.pump(out);
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

    /// The frames of segment `k` (held: `k < complete`).
    fn segment_frames(&self, k: u64) -> Vec<(u64, Bytes)> {
        let mut chunks = Vec::new();
        if let Some(data) = &self.root_data {
            let total = data.len() as u64;
            if total == 0 {
                chunks.push((0, Bytes::new()));
                return chunks;
            }
            let seg = self.config.segment_bytes;
            let at = k.saturating_mul(seg).min(total);
            let end = at.saturating_add(seg).min(total);
            chunk_into(
                at,
                data.slice(at as usize..end as usize),
                self.config.max_frame_payload,
                &mut chunks,
            );
            return chunks;
        }
        self.held.get(k as usize).cloned().unwrap_or_default()
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
        for k in u64::from(r.piece)..segment_count(total, seg) {
            for (offset, payload) in self.segment_frames(k) {
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
        if self.lost_parents.contains(&from) {
            // A parent counted failed (or left behind by a re-attach) forwards what it still
            // has (a restarted life's data, a silent one that woke up): this node takes its
            // data from its current parents, or already holds it all.
            return Ok(());
        }
        let known = Some(from) == self.parent || self.later_parents.iter().any(|&(_, p)| p == from);
        if !known {
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
            if (self.reattached && Some(from) == self.parent) || !self.later_parents.is_empty() {
                // After a hand-off, an old parent resumes sending when the adopter fails
                // (and the root may send a re-attached node a range twice): nothing is
                // missing, so it is dropped.
                return Ok(());
            }
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "the broadcast is already complete",
            });
        }
        let segsize = self.config.segment_bytes;
        let waiting_on = self.parent_of_segment(self.received / segsize);
        if seg.offset > self.received
            && waiting_on != Some(from)
            && self.parent_of_segment(seg.offset / segsize) == Some(from)
        {
            // A later parent runs ahead of the earlier one: held until the gap is filled.
            if self.total_len.is_some_and(|t| t != seg.total_len) {
                return Err(ProtocolError::Inconsistent {
                    from,
                    kind,
                    what: "total_len differs from earlier segments",
                });
            }
            if self.early.contains_key(&seg.offset) {
                return Err(ProtocolError::Inconsistent {
                    from,
                    kind,
                    what: "the same frame twice from a new parent",
                });
            }
            self.early.insert(seg.offset, seg);
            self.arm_idle_timer(now, out);
            return Ok(());
        }
        if Some(from) != waiting_on {
            if self.parent_of_segment(seg.offset / segsize) != Some(from) {
                // An old parent that resumed after the adopter failed, before this node
                // heard of that failure: the re-attach that failure brings serves these
                // bytes (see the module docs).
                return Ok(());
            }
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "the sender is not this segment's parent",
            });
        }
        self.accept(now, from, seg, out)?;
        while let Some(next) = self.early.remove(&self.received) {
            if self.status != Status::Running {
                break;
            }
            let sender = self
                .parent_of_segment(next.offset / segsize)
                .unwrap_or(from);
            self.accept(now, sender, next, out)?;
        }
        Ok(())
    }

    /// Takes a frame that continues the data held (after the checks of `on_data`).
    fn accept(
        &mut self,
        now: Time,
        from: NodeId,
        seg: DataSegment,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = BroadcastMsg::DATA;
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
        self.collect_segments();
        self.pump(out);
        if !self.check_finished(out) {
            if self.total_len == Some(self.received) {
                // Everything is here: a paced sender that still feeds its children waits
                // for nobody.
                if self.idle_deadline.take().is_some() {
                    out.push(Output::CancelTimer(IDLE_TIMER));
                }
            } else {
                self.arm_idle_timer(now, out);
            }
        }
        Ok(())
    }

    /// Moves every segment that is complete from `pending` to `held`.
    fn collect_segments(&mut self) {
        let Some(total) = self.total_len else { return };
        let seg = self.config.segment_bytes;
        if total == 0 {
            if self.complete == 0 {
                self.complete = 1;
                self.held.push(vec![(0, Bytes::new())]);
            }
            return;
        }
        loop {
            let start = self.complete.saturating_mul(seg);
            if start >= total {
                break;
            }
            let end = start.saturating_add(seg).min(total);
            if end > self.received {
                break;
            }
            let mut chunks = Vec::new();
            let mut need = (end - start) as usize;
            let mut at = start;
            while need > 0 {
                let Some(front) = self.pending.front_mut() else {
                    break; // cannot happen: pending holds the segment being received
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
            self.held.push(chunks);
            self.complete += 1;
        }
    }

    /// Reports segment `reported` as done (it was sent to every child due it, or held).
    fn report_progress(&mut self, total: u64, out: &mut Outputs) {
        let seg = self.config.segment_bytes;
        self.reported += 1;
        if total == 0 {
            return; // an empty message reports no progress
        }
        out.push(Output::Report(Report::Progress {
            transfer: self.config.transfer,
            done_bytes: self.reported.saturating_mul(seg).min(total),
            total_bytes: total,
        }));
    }

    /// Sends what the children can take: segment by segment, each to every child that is due
    /// it in send order, within each child's window when paced.
    fn pump(&mut self, out: &mut Outputs) {
        if self.status == Status::Aborted {
            return;
        }
        let Some(total) = self.total_len else { return };
        let count = segment_count(total, self.config.segment_bytes);
        let paced = self.paced();
        let window = self.window();
        let now = self.now;
        let complete = self.complete;
        let due = |c: &Child| {
            c.alive
                && c.next < c.end(count)
                && c.next < complete
                && (!paced || c.inflight < c.window.max(window))
        };
        while let Some(k) = self.kids.iter().filter(|c| due(c)).map(|c| c.next).min() {
            if k > self.reported && self.reported < complete {
                // Held segments no child is due yet (every child is past them).
                while self.reported < k.min(complete) {
                    self.report_progress(total, out);
                }
            }
            let frames = self.segment_frames(k);
            for i in 0..self.kids.len() {
                if !(due(&self.kids[i]) && self.kids[i].next == k) {
                    continue;
                }
                let to = self.kids[i].node;
                for (j, (offset, payload)) in frames.iter().enumerate() {
                    let notify =
                        (paced && j + 1 == frames.len()).then_some(SendId(((i as u64) << 32) | k));
                    out.push(Output::Send(Transmit {
                        to,
                        message: Message::Broadcast(BroadcastMsg::Data(DataSegment {
                            transfer: self.config.transfer,
                            offset: *offset,
                            total_len: total,
                            payload: payload.clone(),
                        })),
                        notify,
                    }));
                }
                let c = &mut self.kids[i];
                c.next += 1;
                if paced {
                    if c.inflight == 0 {
                        c.clock = Some((now, true));
                    }
                    c.inflight += 1;
                }
            }
            if k == self.reported {
                self.report_progress(total, out);
            }
        }
        while self.reported < complete {
            self.report_progress(total, out);
        }
        {
            // What every child has been sent is not needed again when nobody can be handed to
            // this node (the driver's buffers, the caller's own under MPI, are free once
            // sent); steered, the last RETAIN_BYTES of it are kept for a child handed here.
            let mut past = self
                .kids
                .iter()
                .filter(|c| c.alive)
                .map(|c| c.next)
                .min()
                .unwrap_or(complete)
                .min(complete);
            if self.steered {
                past = past.min(complete.saturating_sub(self.retained()));
            }
            for k in self.released..past {
                if let Some(h) = self.held.get_mut(k as usize) {
                    *h = Vec::new();
                }
            }
            self.released = self.released.max(past);
        }
    }

    /// A paced send's last frame completed: the window moves, and the child's rate is
    /// sampled.
    fn on_sent(
        &mut self,
        now: Time,
        to: NodeId,
        id: SendId,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let i = (id.0 >> 32) as usize;
        let k = id.0 & 0xffff_ffff;
        let seg = self.config.segment_bytes;
        let total = self.total_len.unwrap_or(0);
        let Some(c) = self
            .kids
            .get_mut(i)
            .filter(|c| c.node == to && c.inflight > 0 && k < c.next)
        else {
            return Err(ProtocolError::UnknownSend { to, id });
        };
        c.inflight -= 1;
        let bytes = k
            .saturating_add(1)
            .saturating_mul(seg)
            .min(total)
            .saturating_sub(k.saturating_mul(seg));
        if let Some((t0, latency)) = c.clock {
            let secs = now.saturating_since(t0).as_secs_f64();
            if secs > 0.0 {
                c.fresh = Some((bytes, secs, latency));
            }
        }
        c.clock = (c.inflight > 0).then_some((now, false));
        self.pump(out);
        Ok(())
    }

    /// Looks at the children with a fresh rate sample: one whose link runs [`SLOWED_BY`]
    /// times below what this node measured on it before, and whose remaining segments would
    /// take [`HANDOFF_GAIN`] times longer than over the cheapest detour through another
    /// child (priced by `links`), is handed to that child (see the module docs).
    pub fn steer(
        &mut self,
        now: Time,
        links: &mut dyn FnMut(NodeId, NodeId) -> crate::node::LinkPrice,
        out: &mut Outputs,
    ) -> Vec<(NodeId, f64)> {
        self.now = now;
        if !self.started {
            self.steered = true;
        }
        let mut slowed = Vec::new();
        if self.status == Status::Aborted
            || !self.kids.iter().any(|c| c.fresh.is_some() || !c.sized)
        {
            return slowed;
        }
        let Some(total) = self.total_len else {
            return slowed;
        };
        let seg = self.config.segment_bytes;
        let count = segment_count(total, seg);
        let retained = self.retained();
        let mut grew = false;
        // First every fresh sample, so that no child slowed in this round adopts another.
        let mut rates: Vec<(usize, f64)> = Vec::new();
        for i in 0..self.kids.len() {
            let fresh = self.kids[i].fresh.take();
            if !self.kids[i].sized {
                // Enough in flight to keep the link busy while completions come back: twice
                // its bandwidth-delay product, plus a segment.
                let l = links(self.me, self.kids[i].node);
                let bdp = 2.0 * l.bytes_per_s * l.latency_s.max(0.0);
                let w = if bdp.is_finite() {
                    (bdp / seg.max(1) as f64).ceil() as u64 + 1
                } else {
                    u64::MAX
                };
                let before = self.kids[i].window.max(self.window());
                let c = &mut self.kids[i];
                c.sized = true;
                grew |= w > before;
                c.window = w;
            }
            let Some((bytes, secs, with_latency)) = fresh else {
                continue;
            };
            let c = &self.kids[i];
            if !c.alive || c.handed.is_some() || c.next >= c.end(count) {
                continue;
            }
            let direct = links(self.me, c.node);
            let secs = if with_latency {
                secs - direct.latency_s.max(0.0)
            } else {
                secs
            };
            if secs <= 0.0 {
                continue;
            }
            let rate = bytes as f64 / secs;
            if !direct.measured {
                continue;
            }
            let is_slowed = rate * SLOWED_BY < direct.bytes_per_s;
            if is_slowed {
                slowed.push((c.node, rate));
                rates.push((i, rate));
            }
            self.kids[i].slowed = is_slowed;
        }
        for (i, rate) in rates {
            let c = &self.kids[i];
            if c.adopting {
                // Its adoptees' segments come through it: handing it away would feed them
                // by a path no hand-off checked (and its new parent's adopt could overtake
                // this node's, queued behind data on the slowed link).
                continue;
            }
            let (cn, s) = (c.node, c.next);
            let bytes = total.saturating_sub(s.saturating_mul(seg)) as f64;
            let t_direct = bytes / rate.max(f64::MIN_POSITIVE);
            let mut best: Option<(f64, usize)> = None;
            for (j, p) in self.kids.iter().enumerate() {
                // `p` holds what it got of segments `>= p.next - retained` (its releases stop
                // short of that, and nothing newer reaches it before this adopt): it can
                // serve `cn` from `s` only if `s` is no older.
                if j == i
                    || !p.alive
                    || p.handed.is_some()
                    || p.slowed
                    || self.overdue(p, &mut *links)
                    || p.from > s
                    || p.node == cn
                    || p.next > s.saturating_add(retained)
                {
                    continue;
                }
                let l = links(p.node, cn);
                // A detour over the WAN path the slowed link takes is as slow as it.
                let bw = if l.shares_hosts_path {
                    l.bytes_per_s.min(rate)
                } else {
                    l.bytes_per_s
                };
                let t = bytes / bw.max(f64::MIN_POSITIVE) + l.latency_s.max(0.0);
                if best.is_none_or(|(b, _)| t < b) {
                    best = Some((t, j));
                }
            }
            let Some((t_detour, j)) = best else { continue };
            if t_direct < HANDOFF_GAIN * t_detour {
                continue;
            }
            let p = self.kids[j].node;
            self.kids[j].adopting = true;
            self.kids[i].handed = Some((s, p));
            self.handoffs.push((cn, s, p));
            out.send(
                p,
                Message::Broadcast(BroadcastMsg::Adopt(Adopt {
                    transfer: self.config.transfer,
                    child: cn,
                    from_segment: s,
                })),
            );
        }
        if grew && self.started {
            self.pump(out);
        }
        if self.started {
            self.check_finished(out);
        }
        slowed
    }

    /// `c` has a segment in flight for [`SLOWED_BY`] times longer than its link should take
    /// to carry it: slowed too, before its completion can tell (it would be no detour).
    fn overdue(
        &self,
        c: &Child,
        links: &mut dyn FnMut(NodeId, NodeId) -> crate::node::LinkPrice,
    ) -> bool {
        let Some((since, _)) = c.clock else {
            return false;
        };
        if c.inflight == 0 {
            return false;
        }
        let l = links(self.me, c.node);
        if !l.measured {
            return false;
        }
        let expected =
            self.config.segment_bytes as f64 / l.bytes_per_s.max(f64::MIN_POSITIVE) + l.latency_s;
        (self.now.as_secs_f64() - since.as_secs_f64()) > SLOWED_BY * expected
    }

    /// A hand-off: from this node's parent ("adopt `child`"), or from this node's new parent
    /// ("I send you from `from_segment` on").
    fn on_adopt(
        &mut self,
        now: Time,
        from: NodeId,
        a: Adopt,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = BroadcastMsg::ADOPT;
        ProtocolError::check_transfer(from, kind, self.config.transfer, a.transfer)?;
        if self.status == Status::Aborted || self.lost_parents.contains(&from) {
            return Ok(());
        }
        if a.child == self.me {
            // The new parent for segments from_segment and later.
            if self.reattached || self.status == Status::Finished {
                // The root serves everything now (or nothing is missing): its frames are
                // not needed.
                self.lost_parents.push(from);
                return Ok(());
            }
            if Some(from) == self.parent
                || self.later_parents.iter().any(|&(_, p)| p == from)
                || self
                    .later_parents
                    .last()
                    .is_some_and(|&(s, _)| s > a.from_segment)
            {
                return Err(ProtocolError::Inconsistent {
                    from,
                    kind,
                    what: "a hand-off that does not follow the earlier ones",
                });
            }
            self.later_parents.push((a.from_segment, from));
            self.arm_idle_timer(now, out);
            return Ok(());
        }
        if self.parent_of_segment(a.from_segment) != Some(from) {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "only this node's parent hands it a child",
            });
        }
        if a.child == from || self.kids.iter().any(|c| c.node == a.child) {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "a child this node already has, or its own parent",
            });
        }
        out.send(
            a.child,
            Message::Broadcast(BroadcastMsg::Adopt(Adopt {
                transfer: self.config.transfer,
                child: a.child,
                from_segment: a.from_segment,
            })),
        );
        self.kids.push(Child::new(a.child, a.from_segment));
        self.pump(out);
        Ok(())
    }

    /// Finishes when everything is held and handed to every child; returns true when
    /// finished now.
    fn check_finished(&mut self, out: &mut Outputs) -> bool {
        let Some(total) = self.total_len else {
            return false;
        };
        let count = segment_count(total, self.config.segment_bytes);
        if self.status != Status::Running
            || self.received != total
            || self.kids.iter().any(|c| c.alive && c.next < c.end(count))
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

    /// A peer failed: as a child it is skipped; a child handed to it comes back; as a parent
    /// of segments not yet held, this node re-attaches to the root.
    fn on_peer_failed(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        for c in self.kids.iter_mut() {
            if c.node == peer {
                c.alive = false;
            }
            if c.handed.is_some_and(|(_, p)| p == peer) {
                // Its new parent is gone: this node sends it the rest (it re-attaches to the
                // root if it had heard of the hand-off, and then drops these frames).
                c.handed = None;
            }
        }
        self.handoffs.retain(|&(_, _, p)| p != peer);
        let is_parent =
            Some(peer) == self.parent || self.later_parents.iter().any(|&(_, p)| p == peer);
        if is_parent {
            self.lost_parents.push(peer);
            let seg = self.config.segment_bytes;
            // Is every segment this parent sends already held?
            let mut owed = false;
            let mut ranges: Vec<(u64, NodeId)> = Vec::new();
            ranges.extend(self.parent.map(|p| (0, p)));
            ranges.extend(self.later_parents.iter().copied());
            for (n, &(s, p)) in ranges.iter().enumerate() {
                let end = ranges.get(n + 1).map_or(u64::MAX, |&(e, _)| e);
                if p == peer && end > s && self.received < end.saturating_mul(seg) {
                    owed = true;
                }
            }
            if self.total_len.is_some_and(|t| self.received >= t) {
                owed = false;
            }
            if self.status != Status::Running || !owed {
                // Finished, gave up, or nothing more is needed from it.
            } else if self.root_data.is_none() && Some(peer) != self.tree_root() {
                // Re-attach to the root and ask for what is missing; every other parent's
                // frames are dropped from now on.
                let root = self.tree_root();
                for p in ranges.iter().map(|&(_, p)| p) {
                    if Some(p) != root && !self.lost_parents.contains(&p) {
                        self.lost_parents.push(p);
                    }
                }
                self.parent = root;
                self.later_parents.clear();
                self.early.clear();
                self.reattached = true;
                self.ask_root(out);
                self.arm_idle_timer(now, out);
            } else {
                self.abort(AbortReason::PeerFailed { peer }, out);
            }
        }
        self.pump(out);
        self.check_finished(out);
    }
}

impl Protocol for TreeBroadcast {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        self.now = now;
        match input {
            Input::Start => self.on_start(now, out),
            Input::Message {
                from,
                message: Message::Broadcast(BroadcastMsg::Data(seg)),
            } => self.on_data(now, from, seg, out)?,
            Input::Message {
                from,
                message: Message::Broadcast(BroadcastMsg::Adopt(a)),
            } => self.on_adopt(now, from, a, out)?,
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
                    if now >= due && self.total_len != Some(self.received) {
                        let waited = self.config.idle_timeout.unwrap_or_default();
                        self.abort(AbortReason::Timeout { waited }, out);
                    }
                }
            }
            Input::Timer(_) => {} // not ours: stale or foreign timers are harmless
            Input::Command(crate::node::Command::ComputeDone { task }) => {
                return Err(ProtocolError::UnknownTask { task })
            }
            Input::SendComplete { to, id } => return self.on_sent(now, to, id, out),
            // Requests of the application are the host's business.
            Input::App(_) => {}
            Input::PeerFailed(peer) => self.on_peer_failed(now, peer, out),
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.status
    }

    fn steer(
        &mut self,
        now: Time,
        links: &mut dyn FnMut(NodeId, NodeId) -> crate::node::LinkPrice,
        out: &mut Outputs,
    ) -> Vec<(NodeId, f64)> {
        TreeBroadcast::steer(self, now, links, out)
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
    fn an_adopt_frame_round_trips() {
        let m = Message::Broadcast(BroadcastMsg::Adopt(Adopt {
            transfer: TransferId(9),
            child: n(4),
            from_segment: 7,
        }));
        let bytes = frame::encode(&m).unwrap();
        assert_eq!(bytes.len(), frame::encoded_len(&m));
        let mut d = frame::Decoder::default();
        d.push(&bytes);
        assert_eq!(d.next_message().unwrap(), Some(m));
        assert_eq!(BroadcastMsg::ADOPT.name(), "adopt");
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
