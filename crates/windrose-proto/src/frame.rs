//! The wire format: versioned, length-prefixed frames, each carrying one typed [`Message`].
//!
//! Both drivers exchange exactly these bytes: the runtime writes them to TCP, the simulator
//! charges the network [`encoded_len`] bytes per message.
//!
//! # Layout (all integers big-endian)
//!
//! ```text
//! offset  size  field
//!      0     1  magic (high nibble, 0xB) | version (low nibble, currently 1): 0xB1
//!      1     1  kind (see MessageKind)
//!      2     2  flags: reserved, must be 0 in version 1
//!      4     4  body_len: bytes that follow the header
//!      8     *  body: the kind's fixed fields, then (for Data and Share) the payload
//! ```
//!
//! | kind | message             | fixed body fields                                          |
//! |------|---------------------|------------------------------------------------------------|
//! | 1    | [`DataSegment`]     | transfer u32, offset u64, total_len u64 (20 bytes)         |
//! | 2    | [`ShareChunk`]      | transfer u32, share_offset u64, share_len u64, offset u64 (28) |
//! | 3    | [`ShareFinished`]   | transfer u32, node u32, finished_at_ns u64 (16, exact)     |
//! | 4    | Ping ([`Probe`])    | nonce u64, sent_at_ns u64 (16, exact)                      |
//! | 5    | Pong ([`Probe`])    | nonce u64, sent_at_ns u64 (16, exact)                      |
//! | 6    | [`Bitfield`]        | transfer u32, pieces u32 (8), then ceil(pieces/8) bit bytes |
//! | 7    | Have ([`PieceRef`]) | transfer u32, piece u32 (8, exact)                         |
//! | 8    | Request ([`PieceRef`]) | transfer u32, piece u32 (8, exact)                      |
//! | 9    | [`Piece`]           | transfer u32, piece u32 (8), then the piece's bytes        |
//! | 10   | [`SignalMsg`]       | transfer u32, signal u8, arg u32 (9, exact)                |
//! | 11   | [`PeerList`]        | transfer u32 (4), then one u32 node id per peer            |
//! | 12   | [`SessionFrame`]    | none (0): the body is the [`crate::host`] session message  |
//!
//! For `Data`, `Share`, `Bitfield`, `Piece`, `PeerList` and `Session` the payload is the rest
//! of the body. A session frame's body belongs to the host's session, which owns its codec
//! (`crate::host::SessionMsg`); this module only bounds and carries it.
//! Kinds 6-11 carry the piece-based multicasts (MOB, BitTorrent, tree multicast): pieces are
//! numbered from 0 and described by a [`crate::pieces::Manifest`] every node is given.
//!
//! # Decoding
//!
//! [`Decoder`] takes a byte stream in arbitrary pieces and returns whole messages. It checks the
//! header as soon as its 8 bytes are there, so an oversized, unknown-version or unknown-kind
//! frame is rejected before its body is awaited or any memory is reserved for it; it never
//! reserves more than [`HEADER_LEN`] + its body limit for a frame, and never panics on any input.
//! Payloads are zero-copy slices ([`Bytes`]) of the receive buffer (so a payload kept by the
//! application keeps its part of that buffer alive). A stream that produced an error cannot be
//! resynchronised: the decoder keeps returning that error.

use crate::time::Time;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::fmt;
use windrose_model::NodeId;

/// The high nibble of the first header byte; anything else is not a windrose frame.
pub const MAGIC: u8 = 0xB0;
/// The wire format version this crate reads and writes (the low nibble of the first byte).
pub const VERSION: u8 = 1;
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 8;
/// The default limit on a frame's body length: 16 MiB.
pub const DEFAULT_MAX_BODY_LEN: u32 = 16 << 20;
/// The largest fixed part of any message body (a [`ShareChunk`]'s 28 bytes). A receiver whose
/// body limit is `L` accepts payloads of up to `L - MAX_FIXED_BODY_LEN` bytes of every kind.
pub const MAX_FIXED_BODY_LEN: usize = 28;

const DATA_FIXED: usize = 20;
const SHARE_FIXED: usize = 28;
const FINISHED_FIXED: usize = 16;
const PROBE_FIXED: usize = 16;
const BITFIELD_FIXED: usize = 8;
const PIECE_REF_FIXED: usize = 8;
const PIECE_FIXED: usize = 8;
const SIGNAL_FIXED: usize = 9;
const PEER_LIST_FIXED: usize = 4;
const SESSION_FIXED: usize = 0;

/// Which collective a message belongs to, so one connection can carry several.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct TransferId(pub u32);

impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The kind byte of a frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum MessageKind {
    /// A [`DataSegment`] of a broadcast.
    Data = 1,
    /// A [`ShareChunk`] of a divisible-load scatter.
    Share = 2,
    /// A [`ShareFinished`] report.
    ShareFinished = 3,
    /// A link probe request ([`Probe`]).
    Ping = 4,
    /// A link probe answer ([`Probe`]).
    Pong = 5,
    /// The pieces a node holds ([`Bitfield`]).
    Bitfield = 6,
    /// A node now holds a piece ([`PieceRef`]).
    Have = 7,
    /// Asks a peer for a piece ([`PieceRef`]).
    Request = 8,
    /// A piece's bytes ([`Piece`]).
    Piece = 9,
    /// A control signal without data ([`SignalMsg`]).
    Signal = 10,
    /// A list of peers ([`PeerList`]).
    PeerList = 11,
    /// A message of the host's session ([`SessionFrame`]).
    Session = 12,
}

impl MessageKind {
    /// Every kind, in kind-byte order.
    pub const ALL: [MessageKind; 12] = [
        MessageKind::Data,
        MessageKind::Share,
        MessageKind::ShareFinished,
        MessageKind::Ping,
        MessageKind::Pong,
        MessageKind::Bitfield,
        MessageKind::Have,
        MessageKind::Request,
        MessageKind::Piece,
        MessageKind::Signal,
        MessageKind::PeerList,
        MessageKind::Session,
    ];

    /// The kind of a kind byte, None if unknown.
    pub fn from_byte(byte: u8) -> Option<MessageKind> {
        MessageKind::ALL.into_iter().find(|k| *k as u8 == byte)
    }

    /// The name used in logs and JSON: `data`, `share`, `share_finished`, `ping`, `pong`,
    /// `bitfield`, `have`, `request`, `piece`, `signal`, `peer_list`, `session`.
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Data => "data",
            MessageKind::Share => "share",
            MessageKind::ShareFinished => "share_finished",
            MessageKind::Ping => "ping",
            MessageKind::Pong => "pong",
            MessageKind::Bitfield => "bitfield",
            MessageKind::Have => "have",
            MessageKind::Request => "request",
            MessageKind::Piece => "piece",
            MessageKind::Signal => "signal",
            MessageKind::PeerList => "peer_list",
            MessageKind::Session => "session",
        }
    }

    /// Bytes a frame of this kind takes besides its payload: the header plus the fixed body
    /// fields (e.g. 28 for data, 36 for share chunks, 16 for pieces).
    pub fn frame_overhead(self) -> usize {
        HEADER_LEN + self.fixed_len()
    }

    /// Length of this kind's fixed body fields.
    fn fixed_len(self) -> usize {
        match self {
            MessageKind::Data => DATA_FIXED,
            MessageKind::Share => SHARE_FIXED,
            MessageKind::ShareFinished => FINISHED_FIXED,
            MessageKind::Ping | MessageKind::Pong => PROBE_FIXED,
            MessageKind::Bitfield => BITFIELD_FIXED,
            MessageKind::Have | MessageKind::Request => PIECE_REF_FIXED,
            MessageKind::Piece => PIECE_FIXED,
            MessageKind::Signal => SIGNAL_FIXED,
            MessageKind::PeerList => PEER_LIST_FIXED,
            MessageKind::Session => SESSION_FIXED,
        }
    }

    /// True when the body may carry a payload after the fixed fields.
    fn has_payload(self) -> bool {
        matches!(
            self,
            MessageKind::Data
                | MessageKind::Share
                | MessageKind::Bitfield
                | MessageKind::Piece
                | MessageKind::PeerList
                | MessageKind::Session
        )
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

/// The body of a ping and of its pong: the pong echoes the ping's fields.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Probe {
    /// Random number chosen by the pinger, to match the pong to its ping.
    pub nonce: u64,
    /// When the ping was sent, on the pinger's clock.
    pub sent_at: Time,
}

/// The pieces a node holds, as a bit per piece (most significant bit of byte 0 = piece 0, as
/// in BitTorrent); bits past `pieces` are zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bitfield {
    /// The transfer.
    pub transfer: TransferId,
    /// Number of pieces the bits describe.
    pub pieces: u32,
    /// `ceil(pieces / 8)` bytes.
    pub bits: Bytes,
}

impl Bitfield {
    /// The bitfield of `pieces` pieces where `has(i)` holds.
    pub fn from_fn(transfer: TransferId, pieces: u32, has: impl Fn(u32) -> bool) -> Bitfield {
        let mut bits = vec![0u8; pieces.div_ceil(8) as usize];
        for i in (0..pieces).filter(|&i| has(i)) {
            bits[(i / 8) as usize] |= 0x80 >> (i % 8);
        }
        Bitfield {
            transfer,
            pieces,
            bits: Bytes::from(bits),
        }
    }

    /// True when piece `i` is set (false outside `0..pieces`).
    pub fn has(&self, i: u32) -> bool {
        i < self.pieces
            && self
                .bits
                .get((i / 8) as usize)
                .is_some_and(|b| b & (0x80 >> (i % 8)) != 0)
    }

    /// The pieces set, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.pieces).filter(|&i| self.has(i))
    }

    /// Checks the length of `bits` and that the bits past `pieces` are zero.
    pub fn validate(&self) -> Result<(), FrameError> {
        let inconsistent = |what| {
            Err(FrameError::Inconsistent {
                kind: MessageKind::Bitfield,
                what,
            })
        };
        if self.bits.len() as u64 != u64::from(self.pieces).div_ceil(8) {
            return inconsistent("bit bytes do not match the piece count");
        }
        let spare = (8 - self.pieces % 8) % 8;
        if spare > 0
            && self
                .bits
                .last()
                .is_some_and(|b| b & ((1u8 << spare) - 1) != 0)
        {
            return inconsistent("bits set past the piece count");
        }
        Ok(())
    }
}

/// A piece named by its index: the body of Have and Request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PieceRef {
    /// The transfer.
    pub transfer: TransferId,
    /// The piece.
    pub piece: u32,
}

/// The bytes of one piece.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The transfer.
    pub transfer: TransferId,
    /// The piece.
    pub piece: u32,
    /// Its bytes (zero-copy); checked against the manifest by the receiver.
    pub payload: Bytes,
}

/// A control signal of the piece-based multicasts; `arg` is a node id or 0 (see [`Signal`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SignalMsg {
    /// The transfer.
    pub transfer: TransferId,
    /// What is signalled.
    pub signal: Signal,
    /// Its argument (a node id for `Complete` and `AllComplete` relays; 0 otherwise).
    pub arg: u32,
}

/// The signals of [`SignalMsg`] (byte values on the wire in parentheses).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Signal {
    /// Opens a peering: the receiver adds the sender to its peers (1).
    Hello = 1,
    /// The sender wants pieces the receiver has (2).
    Interested = 2,
    /// The sender no longer wants any of the receiver's pieces (3).
    NotInterested = 3,
    /// The sender will not serve the receiver's requests (4).
    Choke = 4,
    /// The sender will serve the receiver's requests (5).
    Unchoke = 5,
    /// Asks the tracker for peers (6).
    Announce = 6,
    /// A node holds every piece (7).
    Complete = 7,
    /// Every node holds every piece: serving may stop (8).
    AllComplete = 8,
    /// The sender failed and restarted and joins the run again, as a guest that takes pieces
    /// from anyone and announces none: tell it of every piece, serve it, wait for it (9).
    Rejoin = 9,
}

impl Signal {
    /// Every signal, in byte order.
    pub const ALL: [Signal; 9] = [
        Signal::Hello,
        Signal::Interested,
        Signal::NotInterested,
        Signal::Choke,
        Signal::Unchoke,
        Signal::Announce,
        Signal::Complete,
        Signal::AllComplete,
        Signal::Rejoin,
    ];

    /// The signal of a byte, None if unknown.
    pub fn from_byte(byte: u8) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| *s as u8 == byte)
    }
}

/// A list of peers (the tracker's answer to an announce), one big-endian u32 node id each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerList {
    /// The transfer.
    pub transfer: TransferId,
    /// Four bytes per peer.
    pub peers: Bytes,
}

impl PeerList {
    /// The list of `nodes`.
    pub fn new(transfer: TransferId, nodes: &[NodeId]) -> PeerList {
        let mut b = BytesMut::with_capacity(4 * nodes.len());
        for n in nodes {
            b.put_u32(n.0);
        }
        PeerList {
            transfer,
            peers: b.freeze(),
        }
    }

    /// The peers, in order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers
            .chunks_exact(4)
            .map(|c| NodeId(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
    }
}

/// A message of the host's session (joining, starting a collective, readiness, reports,
/// heartbeats, leaving), opaque here: see `crate::host::SessionMsg`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionFrame {
    /// The encoded session message.
    pub body: Bytes,
}

/// Every message two windrose nodes exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A piece of a broadcast.
    Data(DataSegment),
    /// A piece of a divisible-load share.
    Share(ShareChunk),
    /// A node finished its share.
    ShareFinished(ShareFinished),
    /// A link probe request.
    Ping(Probe),
    /// The answer to a [`Message::Ping`], echoing its fields.
    Pong(Probe),
    /// The pieces a node holds.
    Bitfield(Bitfield),
    /// A node now holds a piece.
    Have(PieceRef),
    /// A request for a piece.
    Request(PieceRef),
    /// A piece's bytes.
    Piece(Piece),
    /// A control signal.
    Signal(SignalMsg),
    /// A list of peers.
    PeerList(PeerList),
    /// A message of the host's session.
    Session(SessionFrame),
}

impl Message {
    /// The kind byte this message is sent with.
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Data(_) => MessageKind::Data,
            Message::Share(_) => MessageKind::Share,
            Message::ShareFinished(_) => MessageKind::ShareFinished,
            Message::Ping(_) => MessageKind::Ping,
            Message::Pong(_) => MessageKind::Pong,
            Message::Bitfield(_) => MessageKind::Bitfield,
            Message::Have(_) => MessageKind::Have,
            Message::Request(_) => MessageKind::Request,
            Message::Piece(_) => MessageKind::Piece,
            Message::Signal(_) => MessageKind::Signal,
            Message::PeerList(_) => MessageKind::PeerList,
            Message::Session(_) => MessageKind::Session,
        }
    }

    /// The variable part of the body (the payload of `Data`, `Share` and `Piece`, the bits of
    /// a `Bitfield`, the ids of a `PeerList`).
    pub fn payload(&self) -> Option<&Bytes> {
        match self {
            Message::Data(d) => Some(&d.payload),
            Message::Share(s) => Some(&s.payload),
            Message::Bitfield(b) => Some(&b.bits),
            Message::Piece(p) => Some(&p.payload),
            Message::PeerList(p) => Some(&p.peers),
            Message::Session(s) => Some(&s.body),
            _ => None,
        }
    }

    /// The transfer a message belongs to (None for the transfer-less probes).
    pub fn transfer(&self) -> Option<TransferId> {
        match self {
            Message::Data(d) => Some(d.transfer),
            Message::Share(s) => Some(s.transfer),
            Message::ShareFinished(f) => Some(f.transfer),
            Message::Ping(_) | Message::Pong(_) | Message::Session(_) => None,
            Message::Bitfield(b) => Some(b.transfer),
            Message::Have(r) | Message::Request(r) => Some(r.transfer),
            Message::Piece(p) => Some(p.transfer),
            Message::Signal(s) => Some(s.transfer),
            Message::PeerList(p) => Some(p.transfer),
        }
    }

    /// Bytes of the body: fixed fields plus payload.
    pub fn body_len(&self) -> usize {
        self.kind().fixed_len() + self.payload().map_or(0, Bytes::len)
    }

    /// Checks the invariants the decoder enforces: see [`DataSegment::validate`] and
    /// [`ShareChunk::validate`]; other kinds are always valid.
    pub fn validate(&self) -> Result<(), FrameError> {
        match self {
            Message::Data(d) => d.validate(),
            Message::Share(s) => s.validate(),
            Message::Bitfield(b) => b.validate(),
            Message::PeerList(p) if p.peers.len() % 4 != 0 => Err(FrameError::Inconsistent {
                kind: MessageKind::PeerList,
                what: "peer list length is not a multiple of 4",
            }),
            _ => Ok(()),
        }
    }
}

impl DataSegment {
    /// Checks that the payload lies inside the message: `offset + payload.len() <= total_len`
    /// (without overflow).
    pub fn validate(&self) -> Result<(), FrameError> {
        match self.offset.checked_add(self.payload.len() as u64) {
            Some(end) if end <= self.total_len => Ok(()),
            _ => Err(FrameError::Inconsistent {
                kind: MessageKind::Data,
                what: "payload runs past total_len",
            }),
        }
    }
}

impl ShareChunk {
    /// Checks that the share fits a `u64` range and the payload lies inside the share.
    pub fn validate(&self) -> Result<(), FrameError> {
        let inconsistent = |what| {
            Err(FrameError::Inconsistent {
                kind: MessageKind::Share,
                what,
            })
        };
        let Some(share_end) = self.share_offset.checked_add(self.share_len) else {
            return inconsistent("share_offset + share_len overflows");
        };
        match self.offset.checked_add(self.payload.len() as u64) {
            Some(end) if self.offset >= self.share_offset && end <= share_end => Ok(()),
            _ => inconsistent("payload lies outside the share"),
        }
    }
}

/// A decoded frame header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The message kind.
    pub kind: MessageKind,
    /// The flags (always 0 in version 1).
    pub flags: u16,
    /// Bytes of body after the header.
    pub body_len: u32,
}

impl FrameHeader {
    /// Header plus body.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }
}

/// Why bytes are not a valid frame (or a message cannot be encoded).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The first byte's high nibble is not [`MAGIC`]: not a windrose stream, or out of sync.
    #[error("not a windrose frame: first byte {found:#04x}, expected {expected:#04x}")]
    BadMagic {
        /// The byte read.
        found: u8,
        /// `MAGIC | VERSION`.
        expected: u8,
    },
    /// A windrose frame of another wire format version.
    #[error("unsupported wire format version {found} (this build speaks version {supported})")]
    UnsupportedVersion {
        /// The version read.
        found: u8,
        /// [`VERSION`].
        supported: u8,
    },
    /// A kind byte this version does not know.
    #[error("unknown message kind {kind}")]
    UnknownKind {
        /// The kind byte read.
        kind: u8,
    },
    /// Flags set that version 1 reserves.
    #[error("reserved flags set: {flags:#06x}")]
    ReservedFlags {
        /// The flags read.
        flags: u16,
    },
    /// A body longer than the limit (decoding) or than a `u32` can describe (encoding).
    #[error("frame body of {body_len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The declared or needed body length.
        body_len: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A body too short for its kind's fixed fields, or of the wrong length for a fixed-size kind.
    #[error("{kind} frame: body of {found} bytes, expected {expected}")]
    BodyLength {
        /// The kind.
        kind: MessageKind,
        /// The body length read.
        found: u32,
        /// What the kind needs, e.g. "16" or "at least 20".
        expected: &'static str,
    },
    /// Fields that contradict each other.
    #[error("{kind} frame: {what}")]
    Inconsistent {
        /// The kind.
        kind: MessageKind,
        /// What is wrong.
        what: &'static str,
    },
}

/// Bytes the frame of `message` takes on the wire (header + body). What the simulator charges.
pub fn encoded_len(message: &Message) -> usize {
    HEADER_LEN + message.body_len()
}

/// The frame of `message` in two parts, for vectored writes without copying the payload:
/// `head` (header and fixed fields, freshly written) and `payload` (a reference-counted clone of
/// the message's payload, empty for kinds without one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameParts {
    /// Header and fixed body fields.
    pub head: Bytes,
    /// The payload, zero-copy.
    pub payload: Bytes,
}

impl FrameParts {
    /// Bytes of the whole frame.
    pub fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }

    /// Never true: a frame has at least its header.
    pub fn is_empty(&self) -> bool {
        self.head.is_empty() && self.payload.is_empty()
    }
}

/// Writes the header and fixed fields of `message` to `dst`.
fn put_head(message: &Message, dst: &mut BytesMut) -> Result<(), FrameError> {
    let body_len = message.body_len();
    let body_len_u32 = u32::try_from(body_len).map_err(|_| FrameError::TooLarge {
        body_len: body_len as u64,
        limit: u32::MAX as u64,
    })?;
    let kind = message.kind();
    dst.reserve(HEADER_LEN + kind.fixed_len());
    dst.put_u8(MAGIC | VERSION);
    dst.put_u8(kind as u8);
    dst.put_u16(0);
    dst.put_u32(body_len_u32);
    match message {
        Message::Data(d) => {
            dst.put_u32(d.transfer.0);
            dst.put_u64(d.offset);
            dst.put_u64(d.total_len);
        }
        Message::Share(s) => {
            dst.put_u32(s.transfer.0);
            dst.put_u64(s.share_offset);
            dst.put_u64(s.share_len);
            dst.put_u64(s.offset);
        }
        Message::ShareFinished(f) => {
            dst.put_u32(f.transfer.0);
            dst.put_u32(f.node.0);
            dst.put_u64(f.finished_at.as_nanos());
        }
        Message::Ping(p) | Message::Pong(p) => {
            dst.put_u64(p.nonce);
            dst.put_u64(p.sent_at.as_nanos());
        }
        Message::Bitfield(b) => {
            dst.put_u32(b.transfer.0);
            dst.put_u32(b.pieces);
        }
        Message::Have(r) | Message::Request(r) => {
            dst.put_u32(r.transfer.0);
            dst.put_u32(r.piece);
        }
        Message::Piece(p) => {
            dst.put_u32(p.transfer.0);
            dst.put_u32(p.piece);
        }
        Message::Signal(s) => {
            dst.put_u32(s.transfer.0);
            dst.put_u8(s.signal as u8);
            dst.put_u32(s.arg);
        }
        Message::PeerList(p) => dst.put_u32(p.transfer.0),
        Message::Session(_) => {}
    }
    Ok(())
}

/// Appends the frame of `message` to `dst` (copies the payload).
///
/// Errors only when the body does not fit a `u32` length ([`FrameError::TooLarge`]); nothing is
/// written then. Invalid field combinations (see [`Message::validate`]) are written as they are
/// and rejected by the receiver.
pub fn encode_into(message: &Message, dst: &mut BytesMut) -> Result<(), FrameError> {
    put_head(message, dst)?;
    if let Some(p) = message.payload() {
        dst.extend_from_slice(p);
    }
    Ok(())
}

/// The frame of `message` as one buffer (copies the payload; see [`encode_parts`] to avoid it).
pub fn encode(message: &Message) -> Result<Bytes, FrameError> {
    let mut dst = BytesMut::with_capacity(encoded_len(message));
    encode_into(message, &mut dst)?;
    Ok(dst.freeze())
}

/// The frame of `message` as [`FrameParts`], without copying the payload.
pub fn encode_parts(message: &Message) -> Result<FrameParts, FrameError> {
    let mut head = BytesMut::new();
    put_head(message, &mut head)?;
    Ok(FrameParts {
        head: head.freeze(),
        payload: message.payload().cloned().unwrap_or_default(),
    })
}

/// Reads a frame header from the start of `buf`: `Ok(None)` if fewer than [`HEADER_LEN`] bytes
/// are there, an error if the header is invalid or declares a body over `max_body_len`.
pub fn peek_header(buf: &[u8], max_body_len: u32) -> Result<Option<FrameHeader>, FrameError> {
    let Some(head) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let first = head[0];
    if first & 0xF0 != MAGIC {
        return Err(FrameError::BadMagic {
            found: first,
            expected: MAGIC | VERSION,
        });
    }
    if first & 0x0F != VERSION {
        return Err(FrameError::UnsupportedVersion {
            found: first & 0x0F,
            supported: VERSION,
        });
    }
    let kind = MessageKind::from_byte(head[1]).ok_or(FrameError::UnknownKind { kind: head[1] })?;
    let flags = u16::from_be_bytes([head[2], head[3]]);
    if flags != 0 {
        return Err(FrameError::ReservedFlags { flags });
    }
    let body_len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if body_len > max_body_len {
        return Err(FrameError::TooLarge {
            body_len: body_len as u64,
            limit: max_body_len as u64,
        });
    }
    let fixed = kind.fixed_len();
    let length_ok = if kind.has_payload() {
        body_len as usize >= fixed
    } else {
        body_len as usize == fixed
    };
    if !length_ok {
        return Err(FrameError::BodyLength {
            kind,
            found: body_len,
            expected: expected_len_text(kind),
        });
    }
    Ok(Some(FrameHeader {
        kind,
        flags,
        body_len,
    }))
}

fn expected_len_text(kind: MessageKind) -> &'static str {
    match kind {
        MessageKind::Data => "at least 20",
        MessageKind::Share => "at least 28",
        MessageKind::ShareFinished | MessageKind::Ping | MessageKind::Pong => "16",
        MessageKind::Bitfield | MessageKind::Piece => "at least 8",
        MessageKind::Have | MessageKind::Request => "8",
        MessageKind::Signal => "9",
        MessageKind::PeerList => "at least 4",
        MessageKind::Session => "at least 0",
    }
}

/// Parses a body whose length the header check has already validated.
fn parse_body(kind: MessageKind, mut body: Bytes) -> Result<Message, FrameError> {
    // `peek_header` guarantees `body.len() >= kind.fixed_len()`, so these reads cannot run short.
    let message = match kind {
        MessageKind::Data => {
            let transfer = TransferId(body.get_u32());
            let offset = body.get_u64();
            let total_len = body.get_u64();
            Message::Data(DataSegment {
                transfer,
                offset,
                total_len,
                payload: body,
            })
        }
        MessageKind::Share => {
            let transfer = TransferId(body.get_u32());
            let share_offset = body.get_u64();
            let share_len = body.get_u64();
            let offset = body.get_u64();
            Message::Share(ShareChunk {
                transfer,
                share_offset,
                share_len,
                offset,
                payload: body,
            })
        }
        MessageKind::ShareFinished => Message::ShareFinished(ShareFinished {
            transfer: TransferId(body.get_u32()),
            node: NodeId(body.get_u32()),
            finished_at: Time::from_nanos(body.get_u64()),
        }),
        MessageKind::Ping | MessageKind::Pong => {
            let probe = Probe {
                nonce: body.get_u64(),
                sent_at: Time::from_nanos(body.get_u64()),
            };
            if kind == MessageKind::Ping {
                Message::Ping(probe)
            } else {
                Message::Pong(probe)
            }
        }
        MessageKind::Bitfield => Message::Bitfield(Bitfield {
            transfer: TransferId(body.get_u32()),
            pieces: body.get_u32(),
            bits: body,
        }),
        MessageKind::Have | MessageKind::Request => {
            let r = PieceRef {
                transfer: TransferId(body.get_u32()),
                piece: body.get_u32(),
            };
            if kind == MessageKind::Have {
                Message::Have(r)
            } else {
                Message::Request(r)
            }
        }
        MessageKind::Piece => Message::Piece(Piece {
            transfer: TransferId(body.get_u32()),
            piece: body.get_u32(),
            payload: body,
        }),
        MessageKind::Signal => {
            let transfer = TransferId(body.get_u32());
            let byte = body.get_u8();
            let signal = Signal::from_byte(byte).ok_or(FrameError::Inconsistent {
                kind,
                what: "unknown signal",
            })?;
            Message::Signal(SignalMsg {
                transfer,
                signal,
                arg: body.get_u32(),
            })
        }
        MessageKind::PeerList => Message::PeerList(PeerList {
            transfer: TransferId(body.get_u32()),
            peers: body,
        }),
        MessageKind::Session => Message::Session(SessionFrame { body }),
    };
    message.validate()?;
    Ok(message)
}

/// Decodes the frame at the start of `buf` and removes it: `Ok(None)` when more bytes are needed
/// (then capacity for the rest of the frame, at most `HEADER_LEN + max_body_len`, is reserved).
/// The payload is a zero-copy slice of `buf`'s memory.
pub fn decode(buf: &mut BytesMut, max_body_len: u32) -> Result<Option<Message>, FrameError> {
    let Some(header) = peek_header(buf, max_body_len)? else {
        return Ok(None);
    };
    let frame_len = header.frame_len();
    if buf.len() < frame_len {
        make_room(buf, frame_len - buf.len(), frame_len);
        return Ok(None);
    }
    let mut frame = buf.split_to(frame_len).freeze();
    frame.advance(HEADER_LEN);
    parse_body(header.kind, frame).map(Some)
}

/// Makes room for `additional` more bytes in `buf`, growing it to at most
/// `max(needed, cap)` bytes. `BytesMut::reserve` may double, or keep the size of an earlier
/// shared allocation, so a buffer fed in small pieces could drift past any bound; this keeps the
/// receive buffer proportional to the frame limit (`cap`), whatever the stream says. A growth
/// copies what is buffered (less than one frame); doubling up to `cap` keeps a stream fed a
/// byte at a time linear.
fn make_room(buf: &mut BytesMut, additional: usize, cap: usize) {
    let need = buf.len() + additional;
    if buf.capacity() >= need {
        return;
    }
    let grown = (2 * buf.capacity()).min(cap).max(need);
    let mut fresh = BytesMut::with_capacity(grown);
    fresh.extend_from_slice(buf);
    *buf = fresh;
}

/// Decodes the frame at the start of `buf` without consuming it: the message (its payload a
/// zero-copy slice of `buf`) and the frame's length, or `Ok(None)` when `buf` is a proper prefix
/// of a valid frame.
pub fn decode_bytes(
    buf: &Bytes,
    max_body_len: u32,
) -> Result<Option<(Message, usize)>, FrameError> {
    let Some(header) = peek_header(buf, max_body_len)? else {
        return Ok(None);
    };
    let frame_len = header.frame_len();
    if buf.len() < frame_len {
        return Ok(None);
    }
    let body = buf.slice(HEADER_LEN..frame_len);
    parse_body(header.kind, body).map(|m| Some((m, frame_len)))
}

/// An incremental decoder for one byte stream (one connection's receive side).
///
/// Feed it bytes with [`push`](Decoder::push) (or read into [`buffer_mut`](Decoder::buffer_mut)
/// directly, e.g. with tokio's `read_buf`) and take messages with
/// [`next_message`](Decoder::next_message) until it returns `Ok(None)`.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max_body_len: u32,
    consumed: u64,
    failed: Option<FrameError>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder with the [`DEFAULT_MAX_BODY_LEN`] limit.
    pub fn new() -> Decoder {
        Decoder::with_max_body_len(DEFAULT_MAX_BODY_LEN)
    }

    /// A decoder that rejects frames whose body exceeds `max_body_len` bytes.
    pub fn with_max_body_len(max_body_len: u32) -> Decoder {
        Decoder {
            buf: BytesMut::new(),
            max_body_len,
            consumed: 0,
            failed: None,
        }
    }

    /// The body limit in force.
    pub fn max_body_len(&self) -> u32 {
        self.max_body_len
    }

    /// Appends received bytes (copied once into the receive buffer, which grows to at most
    /// one maximal frame beyond what is pushed at once).
    pub fn push(&mut self, bytes: &[u8]) {
        let max_frame = HEADER_LEN + self.max_body_len as usize;
        make_room(&mut self.buf, bytes.len(), max_frame);
        self.buf.extend_from_slice(bytes);
    }

    /// The receive buffer, to read into without an intermediate copy. Bytes appended here are
    /// decoded like pushed ones; do not remove any.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Bytes received but not yet returned as messages.
    pub fn buffered_len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of the stream consumed by the messages returned so far: the stream position of the
    /// next frame, handy in error messages.
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// The next complete message, `Ok(None)` if more bytes are needed, or the error that made
    /// the stream unreadable (returned again on every later call).
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let before = self.buf.len();
        match decode(&mut self.buf, self.max_body_len) {
            Ok(Some(m)) => {
                self.consumed += (before - self.buf.len()) as u64;
                Ok(Some(m))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(payload: &'static [u8]) -> Message {
        Message::Data(DataSegment {
            transfer: TransferId(7),
            offset: 3,
            total_len: 100,
            payload: Bytes::from_static(payload),
        })
    }

    #[test]
    fn known_bytes() {
        let frame = encode(&data(b"hi")).unwrap();
        assert_eq!(
            &frame[..],
            &[
                0xB1, 1, 0, 0, 0, 0, 0, 22, // header: body 20 + 2
                0, 0, 0, 7, // transfer
                0, 0, 0, 0, 0, 0, 0, 3, // offset
                0, 0, 0, 0, 0, 0, 0, 100, // total_len
                b'h', b'i'
            ][..]
        );
        assert_eq!(encoded_len(&data(b"hi")), frame.len());
        let parts = encode_parts(&data(b"hi")).unwrap();
        assert_eq!(parts.len(), frame.len());
        assert_eq!(
            [&parts.head[..], &parts.payload[..]].concat(),
            frame.to_vec()
        );
    }

    #[test]
    fn payload_is_zero_copy() {
        let frame = encode(&data(b"hello")).unwrap();
        let mut buf = BytesMut::from(&frame[..]);
        let base = buf.as_ptr() as usize;
        let Some(Message::Data(d)) = decode(&mut buf, DEFAULT_MAX_BODY_LEN).unwrap() else {
            panic!("expected a data frame");
        };
        assert_eq!(d.payload.as_ptr() as usize, base + HEADER_LEN + DATA_FIXED);
        let (m, n) = decode_bytes(&frame, DEFAULT_MAX_BODY_LEN).unwrap().unwrap();
        assert_eq!(n, frame.len());
        assert_eq!(
            m.payload().unwrap().as_ptr() as usize,
            frame.as_ptr() as usize + HEADER_LEN + DATA_FIXED
        );
    }

    #[test]
    fn header_errors_come_before_the_body() {
        let limit = 64;
        let mut dec = Decoder::with_max_body_len(limit);
        dec.push(&[0xB1, 1, 0, 0, 0, 0, 1, 0]); // body of 256 bytes > 64
        assert_eq!(
            dec.next_message(),
            Err(FrameError::TooLarge {
                body_len: 256,
                limit: 64
            })
        );
        assert!(dec.buffer_mut().capacity() < 256);
        // Poisoned: the same error again.
        dec.push(&encode(&data(b"")).unwrap());
        assert!(matches!(
            dec.next_message(),
            Err(FrameError::TooLarge { .. })
        ));

        for (bytes, want) in [
            (
                [0x11, 1, 0, 0, 0, 0, 0, 20],
                FrameError::BadMagic {
                    found: 0x11,
                    expected: 0xB1,
                },
            ),
            (
                [0xB2, 1, 0, 0, 0, 0, 0, 20],
                FrameError::UnsupportedVersion {
                    found: 2,
                    supported: 1,
                },
            ),
            (
                [0xB1, 99, 0, 0, 0, 0, 0, 20],
                FrameError::UnknownKind { kind: 99 },
            ),
            (
                [0xB1, 1, 0, 4, 0, 0, 0, 20],
                FrameError::ReservedFlags { flags: 4 },
            ),
            (
                [0xB1, 4, 0, 0, 0, 0, 0, 17],
                FrameError::BodyLength {
                    kind: MessageKind::Ping,
                    found: 17,
                    expected: "16",
                },
            ),
            (
                [0xB1, 2, 0, 0, 0, 0, 0, 27],
                FrameError::BodyLength {
                    kind: MessageKind::Share,
                    found: 27,
                    expected: "at least 28",
                },
            ),
        ] {
            assert_eq!(peek_header(&bytes, limit), Err(want.clone()));
            assert!(!want.to_string().is_empty());
        }
    }

    #[test]
    fn inconsistent_bodies() {
        let past_end = Message::Data(DataSegment {
            transfer: TransferId(0),
            offset: u64::MAX,
            total_len: u64::MAX,
            payload: Bytes::from_static(b"x"),
        });
        let frame = encode(&past_end).unwrap();
        assert!(matches!(
            decode_bytes(&frame, DEFAULT_MAX_BODY_LEN),
            Err(FrameError::Inconsistent { .. })
        ));
        let outside = Message::Share(ShareChunk {
            transfer: TransferId(0),
            share_offset: 10,
            share_len: 5,
            offset: 9,
            payload: Bytes::from_static(b"x"),
        });
        assert!(outside.validate().is_err());
    }
}
