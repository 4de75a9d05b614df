//! What the piece-based multicasts (MOB, BitTorrent, tree multicast) share: the root's
//! [`Manifest`] (size, piece size, BLAKE3 hash of every piece), how a received piece is checked
//! ([`PieceVerifier`]), the pieces a node holds ([`PieceStore`], which hands them to the
//! application in order) and who is in which cluster ([`ClusterLayout`]).
//!
//! Every node is given the manifest when the run is set up (the runtime ships it in the root's
//! job, the simulator hands the same `Arc` to every machine), so a node can check each piece the
//! moment it arrives: a piece is verified before it is stored, announced or forwarded. The
//! simulator's manifest is [`Manifest::with_shared_pieces`]: its nodes' stores, which all hold
//! slices of one buffer, keep a bit per piece instead of a handle each.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use windrose_model::{ClusterId, NodeId};

use crate::frame::TransferId;
use crate::frame::{self, Family, FrameError, KindLayout, Message, MessageKind};
use crate::node::SetupError;
use bytes::{Buf, BufMut, BytesMut};
use serde::{Deserialize, Serialize};

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
        let bad = |what| Err(frame::inconsistent(PieceMsg::BITFIELD, what));
        if self.bits.len() as u64 != u64::from(self.pieces).div_ceil(8) {
            return bad("bit bytes do not match the piece count");
        }
        let spare = (8 - self.pieces % 8) % 8;
        if spare > 0
            && self
                .bits
                .last()
                .is_some_and(|b| b & ((1u8 << spare) - 1) != 0)
        {
            return bad("bits set past the piece count");
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

/// The messages of the piece-based multicasts (frame family 5). Pieces are numbered from 0
/// and described by the [`Manifest`] every node is given.
///
/// | kind | message               | fixed body fields                                          |
/// |------|-----------------------|------------------------------------------------------------|
/// | 1    | [`Bitfield`]          | transfer u32, pieces u32 (8), then ceil(pieces/8) bit bytes |
/// | 2    | Have ([`PieceRef`])   | transfer u32, piece u32 (8, exact)                         |
/// | 3    | Request ([`PieceRef`]) | transfer u32, piece u32 (8, exact)                        |
/// | 4    | [`Piece`]             | transfer u32, piece u32 (8), then the piece's bytes        |
/// | 5    | [`SignalMsg`]         | transfer u32, signal u8, arg u32 (9, exact)                |
/// | 6    | [`PeerList`]          | transfer u32 (4), then one u32 node id per peer            |
///
/// The tree broadcast also sends `Request` (a restarted receiver asking for the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PieceMsg {
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
}

impl PieceMsg {
    /// The kind of [`PieceMsg::Bitfield`].
    pub const BITFIELD: MessageKind = MessageKind::of::<PieceMsg>(1);
    /// The kind of [`PieceMsg::Have`].
    pub const HAVE: MessageKind = MessageKind::of::<PieceMsg>(2);
    /// The kind of [`PieceMsg::Request`].
    pub const REQUEST: MessageKind = MessageKind::of::<PieceMsg>(3);
    /// The kind of [`PieceMsg::Piece`].
    pub const PIECE: MessageKind = MessageKind::of::<PieceMsg>(4);
    /// The kind of [`PieceMsg::Signal`].
    pub const SIGNAL: MessageKind = MessageKind::of::<PieceMsg>(5);
    /// The kind of [`PieceMsg::PeerList`].
    pub const PEER_LIST: MessageKind = MessageKind::of::<PieceMsg>(6);

    /// The transfer of any piece message.
    pub fn transfer_id(&self) -> TransferId {
        match self {
            PieceMsg::Bitfield(b) => b.transfer,
            PieceMsg::Have(r) | PieceMsg::Request(r) => r.transfer,
            PieceMsg::Piece(p) => p.transfer,
            PieceMsg::Signal(s) => s.transfer,
            PieceMsg::PeerList(p) => p.transfer,
        }
    }
}

impl From<Bitfield> for Message {
    fn from(b: Bitfield) -> Message {
        Message::Pieces(PieceMsg::Bitfield(b))
    }
}

impl From<Piece> for Message {
    fn from(p: Piece) -> Message {
        Message::Pieces(PieceMsg::Piece(p))
    }
}

impl From<SignalMsg> for Message {
    fn from(s: SignalMsg) -> Message {
        Message::Pieces(PieceMsg::Signal(s))
    }
}

impl From<PeerList> for Message {
    fn from(p: PeerList) -> Message {
        Message::Pieces(PieceMsg::PeerList(p))
    }
}

impl Family for PieceMsg {
    const FAMILY: u8 = 5;
    const KINDS: &'static [KindLayout] = &[
        KindLayout {
            kind: 1,
            name: "bitfield",
            fixed: 8,
            payload: true,
        },
        KindLayout {
            kind: 2,
            name: "have",
            fixed: 8,
            payload: false,
        },
        KindLayout {
            kind: 3,
            name: "request",
            fixed: 8,
            payload: false,
        },
        KindLayout {
            kind: 4,
            name: "piece",
            fixed: 8,
            payload: true,
        },
        KindLayout {
            kind: 5,
            name: "signal",
            fixed: 9,
            payload: false,
        },
        KindLayout {
            kind: 6,
            name: "peer_list",
            fixed: 4,
            payload: true,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            PieceMsg::Bitfield(_) => 1,
            PieceMsg::Have(_) => 2,
            PieceMsg::Request(_) => 3,
            PieceMsg::Piece(_) => 4,
            PieceMsg::Signal(_) => 5,
            PieceMsg::PeerList(_) => 6,
        }
    }

    fn transfer(&self) -> Option<TransferId> {
        Some(self.transfer_id())
    }

    fn payload(&self) -> Option<&Bytes> {
        match self {
            PieceMsg::Bitfield(b) => Some(&b.bits),
            PieceMsg::Piece(p) => Some(&p.payload),
            PieceMsg::PeerList(p) => Some(&p.peers),
            PieceMsg::Have(_) | PieceMsg::Request(_) | PieceMsg::Signal(_) => None,
        }
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        dst.put_u32(self.transfer_id().0);
        match self {
            PieceMsg::Bitfield(b) => dst.put_u32(b.pieces),
            PieceMsg::Have(r) | PieceMsg::Request(r) => dst.put_u32(r.piece),
            PieceMsg::Piece(p) => dst.put_u32(p.piece),
            PieceMsg::Signal(s) => {
                dst.put_u8(s.signal as u8);
                dst.put_u32(s.arg);
            }
            PieceMsg::PeerList(_) => {}
        }
    }

    fn validate(&self) -> Result<(), FrameError> {
        match self {
            PieceMsg::Bitfield(b) => b.validate(),
            PieceMsg::PeerList(l) if l.peers.len() % 4 != 0 => Err(frame::inconsistent(
                PieceMsg::PEER_LIST,
                "peer list length is not a multiple of 4",
            )),
            _ => Ok(()),
        }
    }

    fn parse(kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        let transfer = TransferId(body.get_u32());
        Ok(match kind {
            1 => {
                let b = Bitfield {
                    transfer,
                    pieces: body.get_u32(),
                    bits: body,
                };
                b.validate()?;
                PieceMsg::Bitfield(b)
            }
            2 | 3 => {
                let r = PieceRef {
                    transfer,
                    piece: body.get_u32(),
                };
                if kind == 2 {
                    PieceMsg::Have(r)
                } else {
                    PieceMsg::Request(r)
                }
            }
            4 => PieceMsg::Piece(Piece {
                transfer,
                piece: body.get_u32(),
                payload: body,
            }),
            5 => {
                let signal = Signal::from_byte(body.get_u8())
                    .ok_or_else(|| frame::inconsistent(PieceMsg::SIGNAL, "unknown signal"))?;
                PieceMsg::Signal(SignalMsg {
                    transfer,
                    signal,
                    arg: body.get_u32(),
                })
            }
            6 => {
                let l = PieceMsg::PeerList(PeerList {
                    transfer,
                    peers: body,
                });
                l.validate()?;
                l
            }
            other => {
                return Err(FrameError::UnknownKind {
                    family: Self::FAMILY,
                    kind: other,
                })
            }
        })
    }
}

/// Bytes of a BLAKE3 hash.
pub const HASH_LEN: usize = 32;

/// The description of a transfer every node gets before it starts: its length, its piece
/// length and the BLAKE3 hash of every piece (the last piece may be shorter).
#[derive(Clone, Debug)]
pub struct Manifest {
    total_len: u64,
    piece_len: u32,
    hashes: Vec<[u8; HASH_LEN]>,
    /// Set by [`Manifest::with_shared_pieces`]: the stores made from it share one copy of
    /// each piece.
    shared: Option<SharedPieces>,
}

/// The first copy of each piece stored by any [`PieceStore`] made from one manifest (a
/// simulation's): a store holding that very copy (same memory) keeps a bit instead of a
/// 32-byte `Option<Bytes>`, which at 256 pieces was 8 KiB of every node's ~37 KiB.
#[derive(Clone)]
struct SharedPieces(Arc<[OnceLock<Bytes>]>);

impl PartialEq for Manifest {
    /// Same data description (whether pieces are shared is not compared).
    fn eq(&self, other: &Self) -> bool {
        (self.total_len, self.piece_len, &self.hashes)
            == (other.total_len, other.piece_len, &other.hashes)
    }
}

impl Eq for Manifest {}

impl std::fmt::Debug for SharedPieces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.0.iter().filter(|c| c.get().is_some()).count();
        write!(f, "SharedPieces({set} of {})", self.0.len())
    }
}

impl Manifest {
    /// Hashes `data` in pieces of `piece_len` bytes.
    ///
    /// Errors: a zero piece length, or more than `u32::MAX` pieces.
    pub fn build(data: &[u8], piece_len: u32) -> Result<Manifest, SetupError> {
        let count = piece_count(data.len() as u64, piece_len)?;
        let hashes = (0..count as usize)
            .map(|i| {
                let start = i * piece_len as usize;
                let end = (start + piece_len as usize).min(data.len());
                *blake3::hash(&data[start..end]).as_bytes()
            })
            .collect();
        Ok(Manifest {
            total_len: data.len() as u64,
            piece_len,
            hashes,
            shared: None,
        })
    }

    /// A manifest from its parts (as shipped in a job).
    ///
    /// Errors: a zero piece length, or a hash count that does not match the length.
    pub fn from_parts(
        total_len: u64,
        piece_len: u32,
        hashes: Vec<[u8; HASH_LEN]>,
    ) -> Result<Manifest, SetupError> {
        let count = piece_count(total_len, piece_len)?;
        if hashes.len() as u64 != u64::from(count) {
            return Err(SetupError::Config {
                what: "manifest hashes",
                requirement: "one per piece",
                value: format!("{} hashes for {count} pieces", hashes.len()),
            });
        }
        Ok(Manifest {
            total_len,
            piece_len,
            hashes,
            shared: None,
        })
    }

    /// This manifest with one copy of each piece shared by every in-memory [`PieceStore`]
    /// made from it (or from a clone): a store that holds the same memory as the first copy
    /// stored keeps one bit for it. For a simulation, whose nodes all hold zero-copy slices of
    /// one buffer; a copy in other memory is still kept by its store, so every store hands out
    /// exactly the bytes it was given. The copies live as long as the manifest.
    pub fn with_shared_pieces(mut self) -> Manifest {
        let table = (0..self.hashes.len()).map(|_| OnceLock::new()).collect();
        self.shared = Some(SharedPieces(table));
        self
    }

    /// Bytes of the whole data.
    pub fn total_len(&self) -> u64 {
        self.total_len
    }

    /// Bytes of every piece but the last.
    pub fn piece_len(&self) -> u32 {
        self.piece_len
    }

    /// Number of pieces (0 for empty data).
    pub fn piece_count(&self) -> u32 {
        self.hashes.len() as u32
    }

    /// The byte range of piece `i` in the data (None past the last piece).
    pub fn piece_range(&self, i: u32) -> Option<std::ops::Range<u64>> {
        (i < self.piece_count()).then(|| {
            let start = u64::from(i) * u64::from(self.piece_len);
            start..(start + u64::from(self.piece_len)).min(self.total_len)
        })
    }

    /// The expected hash of piece `i`.
    pub fn hash(&self, i: u32) -> Option<&[u8; HASH_LEN]> {
        self.hashes.get(i as usize)
    }

    /// Every piece's hash, in order.
    pub fn hashes(&self) -> &[[u8; HASH_LEN]] {
        &self.hashes
    }

    /// Piece `i` of the whole `data` (a zero-copy slice). Panics if `data` is not the data the
    /// manifest describes (shorter) or `i` is out of range.
    pub fn slice(&self, data: &Bytes, i: u32) -> Bytes {
        let r = self.piece_range(i).expect("piece index in range");
        data.slice(r.start as usize..r.end as usize)
    }
}

fn piece_count(total_len: u64, piece_len: u32) -> Result<u32, SetupError> {
    if piece_len == 0 {
        return Err(SetupError::Config {
            what: "piece length",
            requirement: "at least 1 byte",
            value: "0".into(),
        });
    }
    u32::try_from(total_len.div_ceil(u64::from(piece_len))).map_err(|_| SetupError::Config {
        what: "piece count",
        requirement: "at most 2^32 - 1 (use larger pieces)",
        value: total_len.div_ceil(u64::from(piece_len)).to_string(),
    })
}

/// Bad copies of one piece a node accepts, from any senders, dropping each and asking again,
/// before it gives up: a corrupt link is retried, but a source whose bytes no longer match the
/// manifest (the root's file changed during the run) is not asked again for ever.
pub const MAX_BAD_COPIES: u32 = 3;

/// Checks a received piece against the manifest. Machines call it before they store, announce
/// or forward a piece.
pub trait PieceVerifier: Send + Sync {
    /// True when `data` is piece `piece` of `manifest` (right length and hash).
    fn verify(&self, manifest: &Manifest, piece: u32, data: &Bytes) -> bool;
}

/// Hashes every piece with BLAKE3: what a real node does.
#[derive(Copy, Clone, Debug, Default)]
pub struct Blake3Verifier;

impl PieceVerifier for Blake3Verifier {
    fn verify(&self, manifest: &Manifest, piece: u32, data: &Bytes) -> bool {
        let (Some(range), Some(want)) = (manifest.piece_range(piece), manifest.hash(piece)) else {
            return false;
        };
        data.len() as u64 == range.end - range.start && blake3::hash(data).as_bytes() == want
    }
}

/// A BLAKE3 verifier for a simulation, where every node's copy of a piece is a zero-copy
/// slice of one buffer: a piece that is the very same memory (pointer and length) as a copy
/// already hashed and found good is good, so each piece is hashed once per run instead of once
/// per node. A tampered or differently allocated piece is still hashed. The verifier keeps a
/// clone of every verified piece, so the memory it remembers cannot be freed and reused.
#[derive(Debug, Default)]
pub struct MemoVerifier {
    verified: Mutex<BTreeMap<u32, Bytes>>,
}

impl MemoVerifier {
    /// A verifier that remembers nothing yet.
    pub fn new() -> MemoVerifier {
        MemoVerifier::default()
    }
}

impl PieceVerifier for MemoVerifier {
    fn verify(&self, manifest: &Manifest, piece: u32, data: &Bytes) -> bool {
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = verified.get(&piece) {
            if known.as_ptr() == data.as_ptr() && known.len() == data.len() {
                return true;
            }
        }
        let ok = Blake3Verifier.verify(manifest, piece, data);
        if ok {
            verified.entry(piece).or_insert_with(|| data.clone());
        }
        ok
    }
}

/// Where a node keeps the verified pieces it received, when not in memory: the runtime puts
/// each one at its offset in a memory-mapped file (the output's partial file, or an unlinked
/// temporary one), so a multicast of more data than the node has memory works, the page cache
/// deciding what stays resident, and a restarted node finds every piece it had, not only a
/// prefix. The simulator keeps pieces in memory (no keeper).
pub trait PieceKeeper: Send + Sync {
    /// Takes a verified piece that starts at byte `offset` of the data and returns the bytes to
    /// hold from now on (the same bytes, kept elsewhere). Called once per piece.
    fn keep(&self, piece: u32, offset: u64, data: Bytes) -> Bytes;
}

/// The pieces a node holds, and the in-order delivery of their bytes to the application.
#[derive(Clone)]
pub struct PieceStore {
    pieces: Slots,
    held: u32,
    held_bytes: u64,
    /// Pieces `0..delivered` have been handed out by [`PieceStore::take_deliverable`].
    delivered: u32,
    /// Bytes of every piece but the last (for the offsets given to the keeper).
    piece_len: u64,
    keeper: Option<Arc<dyn PieceKeeper>>,
    /// A root's pieces not yet checked against the manifest (empty at a receiver, whose pieces
    /// were verified on arrival): each is checked the first time it is sent.
    unchecked: Vec<bool>,
}

/// A root's own piece no longer matches the manifest: its source changed after the manifest
/// was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceMismatch {
    /// The piece.
    pub piece: u32,
}

impl std::fmt::Debug for PieceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceStore")
            .field("pieces", &self.pieces.count())
            .field("held", &self.held)
            .field("held_bytes", &self.held_bytes)
            .field("delivered", &self.delivered)
            .field("keeper", &self.keeper.is_some())
            .finish()
    }
}

impl PieceStore {
    /// An empty store for `manifest`, holding its pieces in memory.
    pub fn new(manifest: &Manifest) -> PieceStore {
        let count = manifest.piece_count() as usize;
        PieceStore {
            pieces: match &manifest.shared {
                Some(shared) => Slots::Shared {
                    held: vec![0; count.div_ceil(64)],
                    first: shared.clone(),
                    own: BTreeMap::new(),
                },
                None => Slots::Own(vec![None; count]),
            },
            held: 0,
            held_bytes: 0,
            delivered: 0,
            piece_len: u64::from(manifest.piece_len()),
            keeper: None,
            unchecked: Vec::new(),
        }
    }

    /// An empty store for `manifest` that hands every piece it stores to `keeper`.
    pub fn with_keeper(manifest: &Manifest, keeper: Option<Arc<dyn PieceKeeper>>) -> PieceStore {
        PieceStore {
            keeper,
            ..PieceStore::new(manifest)
        }
    }

    /// A store holding every piece of `data` (the root's), each checked against `manifest`
    /// the first time it is sent ([`PieceStore::to_send`]).
    pub fn full(manifest: &Manifest, data: &Bytes) -> PieceStore {
        let mut s = PieceStore::new(manifest);
        for i in 0..manifest.piece_count() {
            s.insert(i, manifest.slice(data, i));
        }
        s.unchecked = vec![true; manifest.piece_count() as usize];
        s
    }

    /// The bytes of held piece `piece` to send (None: not held). A root's own piece is checked
    /// against `manifest` the first time: a source that changed after the manifest was made
    /// (a file modified during the run) is an error, and the caller calls the run off rather
    /// than send bytes every receiver would refuse.
    pub fn to_send(
        &mut self,
        piece: u32,
        manifest: &Manifest,
        verifier: &dyn PieceVerifier,
    ) -> Result<Option<Bytes>, SourceMismatch> {
        let Some(data) = self.pieces.get(piece) else {
            return Ok(None);
        };
        if let Some(unchecked @ true) = self.unchecked.get_mut(piece as usize) {
            if !verifier.verify(manifest, piece, data) {
                return Err(SourceMismatch { piece });
            }
            *unchecked = false;
        }
        Ok(Some(data.clone()))
    }

    /// Stores a piece (verified by the caller); false if it was already held or is out of range.
    pub fn insert(&mut self, piece: u32, data: Bytes) -> bool {
        if piece >= self.pieces.count() || self.pieces.has(piece) {
            return false;
        }
        let data = match &self.keeper {
            Some(k) => k.keep(piece, u64::from(piece) * self.piece_len, data),
            None => data,
        };
        self.held_bytes += data.len() as u64;
        self.pieces.put(piece, data);
        self.held += 1;
        true
    }

    /// True when piece `piece` is held.
    pub fn has(&self, piece: u32) -> bool {
        self.pieces.has(piece)
    }

    /// The bytes of a held piece.
    pub fn get(&self, piece: u32) -> Option<&Bytes> {
        self.pieces.get(piece)
    }

    /// Number of pieces held.
    pub fn held(&self) -> u32 {
        self.held
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Number of pieces of the transfer.
    pub fn piece_count(&self) -> u32 {
        self.pieces.count()
    }

    /// True when every piece is held.
    pub fn is_complete(&self) -> bool {
        self.held == self.pieces.count()
    }

    /// The pieces held, as a bitfield message body.
    pub fn bitfield(&self, transfer: TransferId) -> Bitfield {
        Bitfield::from_fn(transfer, self.piece_count(), |i| self.has(i))
    }

    /// The held pieces that continue the bytes already delivered, as `(offset, bytes)` in
    /// order; each is returned once. Push them as `Output::Deliver`.
    pub fn take_deliverable(&mut self, manifest: &Manifest) -> Vec<(u64, Bytes)> {
        let mut out = Vec::new();
        while let Some(b) = self.pieces.get(self.delivered) {
            let offset = manifest.piece_range(self.delivered).map_or(0, |r| r.start);
            out.push((offset, b.clone()));
            self.delivered += 1;
        }
        out
    }
}

/// A store's pieces: its own copies, or (a manifest [`Manifest::with_shared_pieces`]) one bit
/// per piece held in the manifest's shared copy and the copies (as the keeper returned them)
/// that are not that memory.
#[derive(Clone)]
enum Slots {
    Own(Vec<Option<Bytes>>),
    Shared {
        /// Bit `i`: piece `i` is held.
        held: Vec<u64>,
        first: SharedPieces,
        /// Held pieces whose bytes are not the shared copy's memory.
        own: BTreeMap<u32, Bytes>,
    },
}

impl Slots {
    fn count(&self) -> u32 {
        match self {
            Slots::Own(v) => v.len() as u32,
            Slots::Shared { first, .. } => first.0.len() as u32,
        }
    }

    fn has(&self, i: u32) -> bool {
        match self {
            Slots::Own(v) => v.get(i as usize).is_some_and(Option::is_some),
            Slots::Shared { held, .. } => held
                .get(i as usize / 64)
                .is_some_and(|w| w & (1 << (i % 64)) != 0),
        }
    }

    fn get(&self, i: u32) -> Option<&Bytes> {
        match self {
            Slots::Own(v) => v.get(i as usize).and_then(Option::as_ref),
            Slots::Shared { first, own, .. } => {
                if !self.has(i) {
                    return None;
                }
                own.get(&i).or_else(|| first.0[i as usize].get())
            }
        }
    }

    /// Stores piece `i` (in range, not held).
    fn put(&mut self, i: u32, data: Bytes) {
        match self {
            Slots::Own(v) => v[i as usize] = Some(data),
            Slots::Shared { held, first, own } => {
                let kept = first.0[i as usize].get_or_init(|| data.clone());
                if kept.as_ptr() != data.as_ptr() || kept.len() != data.len() {
                    own.insert(i, data);
                }
                held[i as usize / 64] |= 1 << (i % 64);
            }
        }
    }
}

/// Who is in which cluster, with each node's rank in its cluster (members sorted by id, rank
/// from 0): what MOB's mob shares and global-peer rule are computed from.
#[derive(Clone, Debug)]
pub struct ClusterLayout {
    cluster_of: BTreeMap<NodeId, ClusterId>,
    members: BTreeMap<ClusterId, Vec<NodeId>>,
    /// Every node by id: positions by binary search, shared by all the machines of a run
    /// (a per-machine map of every node was N^2 memory at scale).
    ids: Vec<NodeId>,
    /// [`ClusterLayout::members_without`] for the last node asked (a run asks for its root
    /// only), shared by every machine of the run: MOB's mobs before any failure, which each
    /// machine held a copy of (N^2 memory, 1.07 GB of the 1.47 GB of MOB's setup at N =
    /// 16,384).
    without: OnceLock<(NodeId, Arc<Members>)>,
}

/// The members of every cluster, sorted by id.
pub type Members = BTreeMap<ClusterId, Vec<NodeId>>;

impl PartialEq for ClusterLayout {
    /// Same nodes in the same clusters (the cache of `members_without` is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.cluster_of == other.cluster_of
    }
}

impl Eq for ClusterLayout {}

impl ClusterLayout {
    /// The layout of `(node, cluster)` pairs.
    ///
    /// Errors: no node, or a node listed twice.
    pub fn new(nodes: impl IntoIterator<Item = (NodeId, ClusterId)>) -> Result<Self, SetupError> {
        let mut cluster_of = BTreeMap::new();
        let mut members: BTreeMap<ClusterId, Vec<NodeId>> = BTreeMap::new();
        for (n, c) in nodes {
            if cluster_of.insert(n, c).is_some() {
                return Err(SetupError::Config {
                    what: "cluster layout",
                    requirement: "each node listed once",
                    value: format!("node {n} listed twice"),
                });
            }
            members.entry(c).or_default().push(n);
        }
        if cluster_of.is_empty() {
            return Err(SetupError::Config {
                what: "cluster layout",
                requirement: "at least one node",
                value: "none".into(),
            });
        }
        for m in members.values_mut() {
            m.sort();
        }
        let ids = cluster_of.keys().copied().collect();
        Ok(ClusterLayout {
            cluster_of,
            members,
            ids,
            without: OnceLock::new(),
        })
    }

    /// The members of every cluster without `node`, sorted by id: one map shared by every
    /// caller that asks for the same node as the first caller did (a run's machines all ask
    /// for its root), a fresh one for any other node.
    pub fn members_without(&self, node: NodeId) -> Arc<Members> {
        let build = || {
            Arc::new(
                (self.members.iter())
                    .map(|(&c, m)| (c, m.iter().copied().filter(|&n| n != node).collect()))
                    .collect(),
            )
        };
        let (first, shared) = self.without.get_or_init(|| (node, build()));
        if *first == node {
            Arc::clone(shared)
        } else {
            build()
        }
    }

    /// Every node, by id.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.cluster_of.keys().copied()
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.ids.len()
    }

    /// The position of `node` among every node by id.
    pub fn index_of(&self, node: NodeId) -> Option<usize> {
        self.ids.binary_search(&node).ok()
    }

    /// The node at position `i` among every node by id.
    pub fn node_at(&self, i: usize) -> Option<NodeId> {
        self.ids.get(i).copied()
    }

    /// True when `node` is in the layout.
    pub fn contains(&self, node: NodeId) -> bool {
        self.cluster_of.contains_key(&node)
    }

    /// The cluster of `node`.
    pub fn cluster_of(&self, node: NodeId) -> Option<ClusterId> {
        self.cluster_of.get(&node).copied()
    }

    /// Every cluster, by id.
    pub fn clusters(&self) -> impl Iterator<Item = ClusterId> + '_ {
        self.members.keys().copied()
    }

    /// The members of `cluster`, sorted by id (empty for an unknown cluster).
    pub fn members(&self, cluster: ClusterId) -> &[NodeId] {
        self.members.get(&cluster).map_or(&[], Vec::as_slice)
    }

    /// r(x, n): the rank of `node` in its cluster.
    pub fn rank(&self, node: NodeId) -> Option<usize> {
        let c = self.cluster_of(node)?;
        self.members(c).binary_search(&node).ok()
    }

    /// s(x): the size of `node`'s cluster.
    pub fn cluster_size_of(&self, node: NodeId) -> Option<usize> {
        self.cluster_of(node).map(|c| self.members(c).len())
    }
}

/// What every machine of one piece-based multicast is built from, shared by all of them.
#[derive(Clone)]
pub struct SwarmSetup {
    /// Tags every frame.
    pub transfer: TransferId,
    /// The node that starts with the data.
    pub root: NodeId,
    /// The data's description.
    pub manifest: Arc<Manifest>,
    /// The members and their clusters.
    pub layout: Arc<ClusterLayout>,
    /// How received pieces are checked.
    pub verifier: Arc<dyn PieceVerifier>,
    /// Where received pieces are kept (None: in memory).
    pub keeper: Option<Arc<dyn PieceKeeper>>,
}

impl std::fmt::Debug for SwarmSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwarmSetup")
            .field("transfer", &self.transfer)
            .field("root", &self.root)
            .field("pieces", &self.manifest.piece_count())
            .field("nodes", &self.layout.node_count())
            .finish()
    }
}

impl SwarmSetup {
    /// The store of a node that starts without the data: empty, with this setup's keeper.
    pub fn empty_store(&self) -> PieceStore {
        PieceStore::with_keeper(&self.manifest, self.keeper.clone())
    }

    /// Checks that `node` and the root are members and that `data` is given exactly to the
    /// root and matches the manifest's length.
    pub fn check(&self, node: NodeId, data: Option<&Bytes>) -> Result<(), SetupError> {
        for n in [node, self.root] {
            if !self.layout.contains(n) {
                return Err(SetupError::NotInTree { node: n });
            }
        }
        match (node == self.root, data) {
            (true, None) => Err(SetupError::Data {
                node,
                what: "the root needs the data to send",
            }),
            (false, Some(_)) => Err(SetupError::Data {
                node,
                what: "only the root is given data",
            }),
            (true, Some(d)) if d.len() as u64 != self.manifest.total_len() => {
                Err(SetupError::Config {
                    what: "root data length",
                    requirement: "the manifest's total length",
                    value: d.len().to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    /// What a restarted node may keep of the pieces it `held` (e.g. read back from its partial
    /// output file): those in the manifest that pass verification, each index once.
    pub fn verified_pieces(
        &self,
        held: impl IntoIterator<Item = (u32, Bytes)>,
    ) -> Vec<(u32, Bytes)> {
        let mut seen = std::collections::BTreeSet::new();
        held.into_iter()
            .filter(|(i, data)| {
                *i < self.manifest.piece_count()
                    && self.verifier.verify(&self.manifest, *i, data)
                    && seen.insert(*i)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `members_without` leaves out exactly the node asked for; the first node's map is
    /// shared between callers, another node's is its own and right too.
    #[test]
    fn members_without_a_node_are_shared_for_the_first_node_asked() {
        let nodes = [3u32, 5, 8, 13, 21, 34].map(|i| (NodeId(i), ClusterId(i % 2)));
        let layout = ClusterLayout::new(nodes).unwrap();
        let expect = |left_out: u32| -> Members {
            layout
                .clusters()
                .map(|c| {
                    let m = layout.members(c).iter().copied();
                    (c, m.filter(|n| n.0 != left_out).collect())
                })
                .collect()
        };
        let a = layout.members_without(NodeId(8));
        assert_eq!(*a, expect(8));
        assert!(Arc::ptr_eq(&a, &layout.members_without(NodeId(8))));
        let b = layout.members_without(NodeId(13));
        assert_eq!(*b, expect(13));
        assert!(!Arc::ptr_eq(&b, &layout.members_without(NodeId(13))));
        assert_eq!(layout.clone(), layout);
    }

    #[test]
    fn manifest_pieces_and_verification() {
        let data = Bytes::from((0..1000u32).map(|i| i as u8).collect::<Vec<_>>());
        let m = Manifest::build(&data, 300).unwrap();
        assert_eq!(m.piece_count(), 4);
        assert_eq!(m.piece_range(3), Some(900..1000));
        assert_eq!(m.piece_range(4), None);
        for i in 0..4 {
            assert!(Blake3Verifier.verify(&m, i, &m.slice(&data, i)));
        }
        assert!(!Blake3Verifier.verify(&m, 0, &m.slice(&data, 1)));
        assert!(!Blake3Verifier.verify(&m, 9, &m.slice(&data, 1)));
        let mut bad = m.slice(&data, 2).to_vec();
        bad[5] ^= 1;
        assert!(!Blake3Verifier.verify(&m, 2, &Bytes::from(bad)));
        assert!(Manifest::build(&data, 0).is_err());
        assert_eq!(Manifest::build(&[], 10).unwrap().piece_count(), 0);
        let again = Manifest::from_parts(1000, 300, m.hashes().to_vec()).unwrap();
        assert_eq!(again, m);
        assert!(Manifest::from_parts(1000, 300, vec![]).is_err());
    }

    #[test]
    fn memo_verifier_hashes_a_copy_it_has_not_seen() {
        let data = Bytes::from(vec![7u8; 64]);
        let m = Manifest::build(&data, 16).unwrap();
        let v = MemoVerifier::new();
        assert!(v.verify(&m, 1, &m.slice(&data, 1)));
        assert!(v.verify(&m, 1, &m.slice(&data, 1)));
        // Same bytes elsewhere: hashed, good. Tampered copy: hashed, bad.
        assert!(v.verify(&m, 1, &Bytes::from(vec![7u8; 16])));
        assert!(!v.verify(&m, 1, &Bytes::from(vec![8u8; 16])));
        assert!(!v.verify(&m, 2, &Bytes::from(vec![8u8; 16])));
    }

    #[test]
    fn store_delivers_in_order() {
        let data = Bytes::from((0..10u8).collect::<Vec<_>>());
        let m = Manifest::build(&data, 3).unwrap();
        let mut s = PieceStore::new(&m);
        assert!(s.insert(2, m.slice(&data, 2)));
        assert!(!s.insert(2, m.slice(&data, 2)));
        assert!(s.take_deliverable(&m).is_empty());
        assert!(s.insert(0, m.slice(&data, 0)));
        let d = s.take_deliverable(&m);
        assert_eq!(d.len(), 1);
        s.insert(1, m.slice(&data, 1));
        s.insert(3, m.slice(&data, 3));
        let d = s.take_deliverable(&m);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 6, 9]);
        assert!(s.is_complete());
        assert_eq!(s.held_bytes(), 10);
        let bf = s.bitfield(TransferId(1));
        assert_eq!(bf.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(bf.validate().is_ok());
    }

    #[test]
    fn layout_ranks() {
        let l = ClusterLayout::new([
            (NodeId(5), ClusterId(1)),
            (NodeId(0), ClusterId(0)),
            (NodeId(3), ClusterId(1)),
            (NodeId(9), ClusterId(1)),
        ])
        .unwrap();
        assert_eq!(l.rank(NodeId(9)), Some(2));
        assert_eq!(l.rank(NodeId(3)), Some(0));
        assert_eq!(l.cluster_size_of(NodeId(5)), Some(3));
        assert_eq!(l.members(ClusterId(0)), &[NodeId(0)]);
        assert!(
            ClusterLayout::new([(NodeId(1), ClusterId(0)), (NodeId(1), ClusterId(1))]).is_err()
        );
    }
}
