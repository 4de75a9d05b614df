//! The wire format: versioned, length-prefixed frames, each carrying one typed [`Message`].
//!
//! Both drivers exchange exactly these bytes: the runtime writes them to TCP, the simulator
//! charges the network [`encoded_len`] bytes per message.
//!
//! # Layout (all integers big-endian)
//!
//! ```text
//! offset  size  field
//!      0     1  magic (high nibble, 0xB) | version (low nibble, currently 2): 0xB2
//!      1     1  family: which protocol module owns the message (see the table)
//!      2     1  kind, numbered from 1 within the family
//!      3     1  flags: reserved, must be 0 in version 2
//!      4     4  body_len: bytes that follow the header
//!      8     *  body: the kind's fixed fields, then (for kinds with a payload) the payload
//! ```
//!
//! # Families: each protocol owns its messages
//!
//! This module keeps the header, the bounds checks and the dispatch by (family, kind); the
//! messages themselves, their fixed fields and their codec live with the protocol that sends
//! them, as one type implementing [`Family`]:
//!
//! | family | owner (type)                                   | kinds                                   |
//! |--------|------------------------------------------------|-----------------------------------------|
//! | 1      | [`crate::host`] ([`SessionFrame`](crate::host::SessionFrame)) | session                   |
//! | 2      | [`crate::probe`] ([`ProbeMsg`](crate::probe::ProbeMsg))        | ping, pong               |
//! | 3      | [`crate::tree_broadcast`] ([`BroadcastMsg`](crate::tree_broadcast::BroadcastMsg)) | data, adopt |
//! | 4      | [`crate::scatter`] ([`ScatterMsg`](crate::scatter::ScatterMsg)) | share, share_finished   |
//! | 5      | [`crate::pieces`] ([`PieceMsg`](crate::pieces::PieceMsg)) | bitfield, have, request, piece, signal, peer_list |
//! | 6      | [`crate::ghs`] ([`GhsFrame`](crate::ghs::GhsFrame)) | ghs_connect, ghs_initiate, ghs_test, ghs_accept, ghs_reject, ghs_report, ghs_change_root, ghs_done |
//! | 7      | [`crate::heterosort`] ([`HsortMsg`](crate::heterosort::HsortMsg)) | hsort_slice, hsort_check, hsort_verdict, hsort_backup, hsort_backup_ack, hsort_failed, hsort_samples, hsort_ready, hsort_commit |
//! | 8      | [`crate::sample_sort`] ([`SsortMsg`](crate::sample_sort::SsortMsg)) | ssort_samples, ssort_bucket |
//! | 9      | [`crate::ghs_repair`] ([`MstFrame`](crate::ghs_repair::MstFrame)) | mst_hello, mst_ghs, mst_request, mst_begin, mst_test, mst_accept, mst_reject, mst_echo, mst_stable, mst_parent, mst_row, mst_join, mst_count, mst_core, mst_settled, mst_rghs |
//!
//! Each family's module documents its kinds' fixed fields. Kind names are unique across
//! families (they name frames in logs, JSON and the frame-count tests).
//!
//! Adding a protocol's messages: define its message enum in its module, implement [`Family`]
//! with a family byte not in the table, and add one line to the `families!` list below (which
//! generates [`Message`]'s variant, the `From` conversion and the decoder's dispatch).
//!
//! # Decoding
//!
//! [`Decoder`] takes a byte stream in arbitrary pieces and returns whole messages. It checks the
//! header as soon as its 8 bytes are there, so an oversized, unknown-version, unknown-family or
//! unknown-kind frame, or one whose length cannot fit its kind, is rejected before its body is
//! awaited or any memory is reserved for it; it never reserves more than [`HEADER_LEN`] + its
//! body limit for a frame, and never panics on any input. Payloads are zero-copy slices
//! ([`Bytes`]) of the receive buffer (so a payload kept by the application keeps its part of
//! that buffer alive). A stream that produced an error cannot be resynchronised: the decoder
//! keeps returning that error.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The high nibble of the first header byte; anything else is not a windrose frame.
pub const MAGIC: u8 = 0xB0;
/// The wire format version this crate reads and writes (the low nibble of the first byte).
/// Version 2 split version 1's kind byte into (family, kind).
pub const VERSION: u8 = 2;
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 8;
/// The default limit on a frame's body length: 16 MiB.
pub const DEFAULT_MAX_BODY_LEN: u32 = 16 << 20;
/// The largest fixed part of any message body (a maintained MST's echo, 109 bytes, see
/// [`MstFrame`](crate::ghs_repair::MstFrame); before it, a GHS report's or done's 33, before
/// GHS a share chunk's 28). A receiver whose body limit is `L` accepts payloads of up to
/// `L - MAX_FIXED_BODY_LEN` bytes of every kind (checked by a test over every family), and
/// every payload-less frame as soon as `L >= MAX_FIXED_BODY_LEN`.
pub const MAX_FIXED_BODY_LEN: usize = 109;

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

/// The shape of one kind of message: what the header check needs before the body arrives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KindLayout {
    /// The kind byte within its family (from 1).
    pub kind: u8,
    /// The name used in logs and JSON, unique across families.
    pub name: &'static str,
    /// Bytes of the fixed body fields.
    pub fixed: usize,
    /// True when a payload may follow the fixed fields (else the body is exactly `fixed`).
    pub payload: bool,
}

/// A protocol's own set of messages and their codec. The frame module carries any family's
/// messages without knowing their fields.
pub trait Family: Sized {
    /// The family byte of the header (unique; see the module's table).
    const FAMILY: u8;
    /// Every kind of the family.
    const KINDS: &'static [KindLayout];
    /// The kind byte of this message.
    fn kind(&self) -> u8;
    /// The collective it belongs to, None for messages outside any collective.
    fn transfer(&self) -> Option<TransferId>;
    /// The variable part of the body after the fixed fields, if the kind has one.
    fn payload(&self) -> Option<&Bytes>;
    /// Writes the fixed fields (exactly the kind's `fixed` bytes).
    fn put_fixed(&self, dst: &mut BytesMut);
    /// Parses a body whose length the header check has validated against the kind's layout
    /// (so reading the fixed fields cannot run short). Errors for contradicting fields (it
    /// calls [`validate`](Family::validate)).
    fn parse(kind: u8, body: Bytes) -> Result<Self, FrameError>;
    /// Checks that the fields do not contradict each other: what `parse` enforces, for
    /// messages that never crossed a wire (the simulator's).
    fn validate(&self) -> Result<(), FrameError> {
        Ok(())
    }
}

/// A boxed family is the family: what keeps a rare, large message kind from growing
/// [`Message`].
impl<T: Family> Family for Box<T> {
    const FAMILY: u8 = T::FAMILY;
    const KINDS: &'static [KindLayout] = T::KINDS;
    fn kind(&self) -> u8 {
        (**self).kind()
    }
    fn transfer(&self) -> Option<TransferId> {
        (**self).transfer()
    }
    fn payload(&self) -> Option<&Bytes> {
        (**self).payload()
    }
    fn put_fixed(&self, dst: &mut BytesMut) {
        (**self).put_fixed(dst)
    }
    fn parse(kind: u8, body: Bytes) -> Result<Self, FrameError> {
        T::parse(kind, body).map(Box::new)
    }
    fn validate(&self) -> Result<(), FrameError> {
        (**self).validate()
    }
}

/// A message kind: the family that owns it and the kind byte within the family.
/// Serialized as its name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageKind {
    /// The family byte.
    pub family: u8,
    /// The kind byte within the family.
    pub kind: u8,
}

impl MessageKind {
    /// The kind `kind` of the family `F`.
    pub const fn of<F: Family>(kind: u8) -> MessageKind {
        MessageKind {
            family: F::FAMILY,
            kind,
        }
    }

    /// The layout of this kind, None if no family declares it.
    pub fn layout(self) -> Option<&'static KindLayout> {
        let (_, kinds) = FAMILIES.iter().find(|(f, _)| *f == self.family)?;
        kinds.iter().find(|k| k.kind == self.kind)
    }

    /// The name used in logs and JSON (`data`, `piece`, `ping`, ...), or `unknown`.
    pub fn name(self) -> &'static str {
        self.layout().map_or("unknown", |l| l.name)
    }

    /// Every kind of every family, in (family, kind) order.
    pub fn all() -> impl Iterator<Item = MessageKind> {
        FAMILIES.iter().flat_map(|(family, kinds)| {
            kinds.iter().map(|k| MessageKind {
                family: *family,
                kind: k.kind,
            })
        })
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<MessageKind> {
        MessageKind::all().find(|k| k.name() == name)
    }

    /// Bytes a frame of this kind takes besides its payload: the header plus the fixed body
    /// fields (e.g. 28 for data, 36 for share chunks, 16 for pieces).
    pub fn frame_overhead(self) -> usize {
        HEADER_LEN + self.layout().map_or(0, |l| l.fixed)
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layout() {
            Some(l) => f.write_str(l.name),
            None => write!(f, "kind {} of family {}", self.kind, self.family),
        }
    }
}

impl Serialize for MessageKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for MessageKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        MessageKind::from_name(&name).ok_or_else(|| {
            let known: Vec<&str> = MessageKind::all().map(MessageKind::name).collect();
            serde::de::Error::custom(format!(
                "unknown message kind {name:?} (known: {})",
                known.join(", ")
            ))
        })
    }
}

/// Declares the families [`Message`] carries: one variant per protocol's message type.
macro_rules! families {
    ($( $(#[$doc:meta])* $variant:ident($ty:ty), )*) => {
        /// Every message two windrose nodes exchange: one variant per family, each holding
        /// the owning protocol's message type.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Message {
            $( $(#[$doc])* $variant($ty), )*
        }

        $(
            impl From<$ty> for Message {
                fn from(m: $ty) -> Message {
                    Message::$variant(m)
                }
            }
        )*

        /// (family byte, kinds) of every family.
        const FAMILIES: &[(u8, &[KindLayout])] = &[
            $( (<$ty as Family>::FAMILY, <$ty as Family>::KINDS), )*
        ];

        impl Message {
            /// The (family, kind) this message is sent with.
            pub fn kind(&self) -> MessageKind {
                match self {
                    $( Message::$variant(m) => MessageKind {
                        family: <$ty as Family>::FAMILY,
                        kind: m.kind(),
                    }, )*
                }
            }

            /// The variable part of the body (a data segment's or piece's bytes, a bitfield's
            /// bits, a session message's body), None for kinds without one.
            pub fn payload(&self) -> Option<&Bytes> {
                match self {
                    $( Message::$variant(m) => m.payload(), )*
                }
            }

            /// The transfer a message belongs to (None for the probes and the session).
            pub fn transfer(&self) -> Option<TransferId> {
                match self {
                    $( Message::$variant(m) => m.transfer(), )*
                }
            }

            fn put_fixed(&self, dst: &mut BytesMut) {
                match self {
                    $( Message::$variant(m) => m.put_fixed(dst), )*
                }
            }

            /// Checks the invariants the decoder enforces (the family's
            /// [`validate`](Family::validate)), for messages that never crossed a wire.
            pub fn validate(&self) -> Result<(), FrameError> {
                match self {
                    $( Message::$variant(m) => m.validate(), )*
                }
            }
        }

        /// Parses a body whose length the header check validated.
        fn parse_body(kind: MessageKind, body: Bytes) -> Result<Message, FrameError> {
            $(
                if kind.family == <$ty as Family>::FAMILY {
                    return <$ty as Family>::parse(kind.kind, body).map(Message::$variant);
                }
            )*
            Err(FrameError::UnknownKind {
                family: kind.family,
                kind: kind.kind,
            })
        }
    };
}

families! {
    /// A message of the host's session.
    Session(crate::host::SessionFrame),
    /// A link probe (ping or pong).
    Probe(crate::probe::ProbeMsg),
    /// A segment of a tree broadcast.
    Broadcast(crate::tree_broadcast::BroadcastMsg),
    /// A divisible-load scatter's share chunk or finish report.
    Scatter(crate::scatter::ScatterMsg),
    /// A message of the piece-based multicasts (MOB, BitTorrent, tree multicast).
    Pieces(crate::pieces::PieceMsg),
    /// A message of the distributed minimum spanning tree (GHS), tagged with its run.
    Ghs(crate::ghs::GhsFrame),
    /// A HeteroSort trade, termination check or verdict.
    HeteroSort(crate::heterosort::HsortMsg),
    /// A sample sort's samples or bucket.
    SampleSort(crate::sample_sort::SsortMsg),
    /// A message of a node's maintained MST (its GHS builds and repairs; no transfer). Boxed:
    /// its largest kind is twice the data path's, and every `Message` (so every output of
    /// every machine) is as large as the largest family.
    Mst(Box<crate::ghs_repair::MstFrame>),
}

impl Message {
    /// Bytes of the body: fixed fields plus payload.
    pub fn body_len(&self) -> usize {
        self.kind().layout().map_or(0, |l| l.fixed) + self.payload().map_or(0, Bytes::len)
    }
}

/// The error for a body whose fields contradict each other.
pub fn inconsistent(kind: MessageKind, what: &'static str) -> FrameError {
    FrameError::Inconsistent { kind, what }
}

/// A decoded frame header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The message kind (family and kind byte).
    pub kind: MessageKind,
    /// The flags (always 0 in version 2).
    pub flags: u8,
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
    /// A (family, kind) pair this version does not know.
    #[error("unknown message kind {kind} of family {family}")]
    UnknownKind {
        /// The family byte read.
        family: u8,
        /// The kind byte read.
        kind: u8,
    },
    /// Flags set that version 2 reserves.
    #[error("reserved flags set: {flags:#04x}")]
    ReservedFlags {
        /// The flags read.
        flags: u8,
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
    #[error("{kind} frame: body of {found} bytes, expected {}{expected}", if *.at_least { "at least " } else { "" })]
    BodyLength {
        /// The kind.
        kind: MessageKind,
        /// The body length read.
        found: u32,
        /// The kind's fixed length.
        expected: usize,
        /// True when a payload may follow (the body may be longer).
        at_least: bool,
    },
    /// Fields that contradict each other.
    #[error("{kind} frame: {what}")]
    Inconsistent {
        /// The kind.
        kind: MessageKind,
        /// What is wrong.
        what: &'static str,
    },
    /// A field out of its range, as the owning family's codec words it (with the value read).
    #[error("{kind} frame: {what}")]
    Invalid {
        /// The kind.
        kind: MessageKind,
        /// What is wrong.
        what: String,
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
    dst.reserve(HEADER_LEN + MAX_FIXED_BODY_LEN);
    dst.put_u8(MAGIC | VERSION);
    dst.put_u8(kind.family);
    dst.put_u8(kind.kind);
    dst.put_u8(0);
    dst.put_u32(body_len_u32);
    message.put_fixed(dst);
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
/// are there, an error if the header is invalid or declares a body over `max_body_len` or of a
/// length its kind cannot have.
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
    let kind = MessageKind {
        family: head[1],
        kind: head[2],
    };
    let layout = kind.layout().ok_or(FrameError::UnknownKind {
        family: head[1],
        kind: head[2],
    })?;
    let flags = head[3];
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
    let length_ok = if layout.payload {
        body_len as usize >= layout.fixed
    } else {
        body_len as usize == layout.fixed
    };
    if !length_ok {
        return Err(FrameError::BodyLength {
            kind,
            found: body_len,
            expected: layout.fixed,
            at_least: layout.payload,
        });
    }
    Ok(Some(FrameHeader {
        kind,
        flags,
        body_len,
    }))
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
mod tests;
