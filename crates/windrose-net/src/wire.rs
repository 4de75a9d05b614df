//! What a windrose-net connection carries: the protocol frames of `windrose-proto`, and this
//! crate's own **control frames** for everything around a collective (the handshake, the job,
//! readiness, progress, reports, the end of the run).
//!
//! # Control frames
//!
//! They share the proto frame header's layout but not its magic, so one byte tells them apart
//! and the protocol wire format stays untouched:
//!
//! ```text
//! offset  size  field
//!      0     1  magic (high nibble 0xC) | control version (low nibble, 1): 0xC1
//!      1     1  kind (see ControlKind)
//!      2     2  flags: reserved, 0
//!      4     4  body_len (big-endian)
//!      8     *  body: the message as UTF-8 JSON
//! ```
//!
//! A stream is any sequence of proto frames (first byte `0xB2`) and control frames (`0xC1`).
//! [`FrameReader`] decodes both incrementally: the first byte of each frame picks the decoder,
//! proto frames go through `windrose_proto::frame::decode` (the function the proto `Decoder` is
//! built on, with the same body limit and zero-copy payloads), control frames are bounded by
//! their own (smaller) limit before their body is awaited. Errors name the byte offset in the
//! stream. A stream that failed cannot be resynchronised: the reader keeps returning the error.
//!
//! # The session
//!
//! 1. **Handshake** (every connection; see [`crate::bootstrap`]): the dialer sends
//!    [`Control::Hello`] (group name, protocol and wire versions, its id, the id it expects to
//!    reach, its role, the digest of its group file's members, addresses and clusters); the
//!    acceptor checks every field and answers [`Control::Welcome`] (its own group, versions, id
//!    and digest, which the dialer checks in turn) or [`Control::Reject`] with the
//!    reason. A dialer that finds a mismatch in the welcome sends a reject too, so both sides
//!    always learn why.
//!    With a group key the same hello and welcome travel encrypted inside a Noise handshake
//!    that proves both sides hold the key (see [`crate::auth`]), and a multicast job's
//!    manifest carries a MAC made with a key derived from it.
//! 2. **Job**: the root dials every node (role `Root`) and sends the [`Job`]; each node dials its
//!    tree neighbours (for a multicast: every member) with higher ids (role `Peer`; the lower
//!    id dials, so every unordered pair has exactly one connection) and answers [`Control::Ready`] once all its neighbours are
//!    connected, or [`Control::Abort`].
//! 3. **Go**: when every node is ready the root sends [`Control::Go`] and starts its machine;
//!    a node starts its machines on Go. Protocol frames flow. Nodes send [`Control::Progress`]
//!    to the root a few times per second.
//! 4. **Reports**: a node whose collective ended (finished or aborted) flushes its sends and its
//!    output, then sends its [`NodeReport`] (status, bytes, BLAKE3 of what it received, finish
//!    time, link measurements, frame counts) to the root.
//! 5. **Bye**: when the root has every report (or gave up waiting), it sends [`Control::Bye`];
//!    every side then shuts its sending half down and reads until the peer did the same, so no
//!    byte in flight is lost to a reset. [`Control::Abort`] ends the run early from either side.

use crate::measure::LinkMeasurements;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use windrose_model::NodeId;
use windrose_proto::frame::{self, FrameError, Message, MessageKind, TransferId, HEADER_LEN};

/// The high nibble of a control frame's first byte.
pub const CONTROL_MAGIC: u8 = 0xC0;
/// The control frame format version (low nibble of the first byte).
pub const CONTROL_VERSION: u8 = 1;
/// Body limit for control frames before the handshake completed (a Hello is ~200 bytes).
pub const HANDSHAKE_MAX_BODY: u32 = 64 << 10;
/// Body limit for control frames afterwards (a job carries the tree or schedule, a report the
/// link measurements).
pub const CONTROL_MAX_BODY: u32 = 16 << 20;

/// Who dials: the root of a run, or a node dialing a tree neighbour.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The root, setting up a run.
    Root,
    /// A node connecting to a tree neighbour.
    Peer,
    /// A group member's second connection to a peer, for the link probes: small frames that
    /// must not queue behind bulk data in the first connection's buffers (see
    /// [`crate::host_driver`]).
    Lane,
}

/// The dialer's first frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The dialer's group name.
    pub group: String,
    /// The dialer's session protocol version ([`crate::PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// The dialer's proto wire format version (`windrose_proto::frame::VERSION`).
    pub wire_version: u8,
    /// The dialer's node id.
    pub from: NodeId,
    /// The node id the dialer expects at this address.
    pub to: NodeId,
    /// Why it dials.
    pub role: Role,
    /// The dialer's [`crate::group::Group::digest`]: members, addresses and clusters must be
    /// the same in every member's group file (empty from a build that sent none: refused).
    #[serde(default)]
    pub group_digest: String,
}

/// The acceptor's answer to a good [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The acceptor's group name.
    pub group: String,
    /// The acceptor's session protocol version.
    pub protocol_version: u32,
    /// The acceptor's wire format version.
    pub wire_version: u8,
    /// The acceptor's node id.
    pub node: NodeId,
    /// The acceptor's [`crate::group::Group::digest`].
    #[serde(default)]
    pub group_digest: String,
}

pub use windrose_proto::collective::{
    CollectiveSpec, ManifestSpec, MulticastParams, PlanTreeSpec, TreeSpec,
};

/// What the root asks every node to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Random id of this run (in logs and reports).
    pub session: u64,
    /// The root.
    pub root: NodeId,
    /// The transfer id of every protocol frame.
    pub transfer: TransferId,
    /// Bytes of the root's data.
    pub total_len: u64,
    /// The collective.
    pub collective: CollectiveSpec,
    /// A non-root node aborts when nothing arrives from its parent for this long.
    pub idle_timeout_ms: u64,
    /// Link probe period (0: no probes).
    pub probe_period_ms: u64,
    /// Seed of the per-node RNGs (`windrose_proto::node_rng`).
    pub seed: u64,
    /// Set when the root takes the node back mid-run after losing it (the node restarted):
    /// the nodes the root counts as failed at that moment, which the node neither dials nor
    /// waits for. The node starts at once (no Ready, no Go) with a machine built to rejoin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejoin: Option<Vec<NodeId>>,
}

/// How a node's collective ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Completed.
    Finished,
    /// The protocol gave up (a peer failed, nothing arrived in time) or the driver failed.
    Failed,
}

/// What a scatter node computed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareResult {
    /// First byte of the kept share in the load.
    pub offset: u64,
    /// Bytes kept.
    pub len: u64,
    /// BLAKE3 of the kept share (hex).
    pub blake3: String,
    /// When the computation ended, nanoseconds after Go on the node's clock.
    pub computed_ns: u64,
}

/// Frames one node sent to one peer, by kind (for sim-vs-real comparisons).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FrameCount {
    /// The receiver.
    pub to: NodeId,
    /// The message kind.
    pub kind: MessageKind,
    /// How many frames.
    pub frames: u64,
    /// Their encoded bytes.
    pub bytes: u64,
}

/// A node's account of its run, sent to the root at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node.
    pub node: NodeId,
    /// How its collective ended.
    pub status: RunStatus,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Bytes of the collective's data it received.
    pub bytes_received: u64,
    /// BLAKE3 (hex) of the bytes delivered to it, in order (broadcast receivers).
    pub blake3: Option<String>,
    /// Nanoseconds from Go to the end of its collective, on its own clock.
    pub finished_ns: Option<u64>,
    /// Nanoseconds from Go until it held all the data, on its own clock: a multicast node may
    /// keep serving its peers long after that, so its completion is this, not `finished_ns`.
    #[serde(default)]
    pub complete_ns: Option<u64>,
    /// The scatter share it computed.
    pub share: Option<ShareResult>,
    /// Its link measurements.
    pub measurements: LinkMeasurements,
    /// Protocol frames it sent, by peer and kind.
    pub frames_sent: Vec<FrameCount>,
    /// Set when the node rejoined the run after a restart: the bytes it found verified on disk
    /// from its earlier life and did not fetch again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_bytes: Option<u64>,
}

/// A data-less progress note.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Bytes held.
    pub done_bytes: u64,
    /// Bytes expected.
    pub total_bytes: u64,
}

/// Every control message.
#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// Handshake, dialer to acceptor.
    Hello(Hello),
    /// Handshake accepted.
    Welcome(Welcome),
    /// Handshake (or job) refused, with the reason in plain words.
    Reject(String),
    /// The run to do (root to node).
    Job(Box<Job>),
    /// The node is connected to all its neighbours (node to root).
    Ready,
    /// Start (root to node).
    Go,
    /// Progress of a node (node to root).
    Progress(Progress),
    /// The node's collective ended (node to root).
    Report(Box<NodeReport>),
    /// The run is over (root to node).
    Bye,
    /// The run is called off, with the reason.
    Abort(String),
}

/// The kind byte of a control frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ControlKind {
    /// [`Control::Hello`].
    Hello = 1,
    /// [`Control::Welcome`].
    Welcome = 2,
    /// [`Control::Reject`].
    Reject = 3,
    /// [`Control::Job`].
    Job = 4,
    /// [`Control::Ready`].
    Ready = 5,
    /// [`Control::Go`].
    Go = 6,
    /// [`Control::Progress`].
    Progress = 7,
    /// [`Control::Report`].
    Report = 8,
    /// [`Control::Bye`].
    Bye = 9,
    /// [`Control::Abort`].
    Abort = 10,
}

impl ControlKind {
    fn from_byte(b: u8) -> Option<ControlKind> {
        use ControlKind::*;
        [
            Hello, Welcome, Reject, Job, Ready, Go, Progress, Report, Bye, Abort,
        ]
        .into_iter()
        .find(|k| *k as u8 == b)
    }
}

impl Control {
    /// Its kind byte.
    pub fn kind(&self) -> ControlKind {
        match self {
            Control::Hello(_) => ControlKind::Hello,
            Control::Welcome(_) => ControlKind::Welcome,
            Control::Reject(_) => ControlKind::Reject,
            Control::Job(_) => ControlKind::Job,
            Control::Ready => ControlKind::Ready,
            Control::Go => ControlKind::Go,
            Control::Progress(_) => ControlKind::Progress,
            Control::Report(_) => ControlKind::Report,
            Control::Bye => ControlKind::Bye,
            Control::Abort(_) => ControlKind::Abort,
        }
    }

    /// A short name for messages: `hello`, `job`, ...
    pub fn name(&self) -> &'static str {
        match self {
            Control::Hello(_) => "hello",
            Control::Welcome(_) => "welcome",
            Control::Reject(_) => "reject",
            Control::Job(_) => "job",
            Control::Ready => "ready",
            Control::Go => "go",
            Control::Progress(_) => "progress",
            Control::Report(_) => "report",
            Control::Bye => "bye",
            Control::Abort(_) => "abort",
        }
    }

    fn body(&self) -> Vec<u8> {
        let json = match self {
            Control::Hello(h) => serde_json::to_vec(h),
            Control::Welcome(w) => serde_json::to_vec(w),
            Control::Reject(r) | Control::Abort(r) => serde_json::to_vec(r),
            Control::Job(j) => serde_json::to_vec(j),
            Control::Ready | Control::Go | Control::Bye => Ok(b"{}".to_vec()),
            Control::Progress(p) => serde_json::to_vec(p),
            Control::Report(r) => serde_json::to_vec(r),
        };
        // Serialising these plain structs cannot fail (no maps with non-string keys, no
        // non-finite floats are rejected by serde_json: they become null).
        json.unwrap_or_else(|_| b"{}".to_vec())
    }

    /// The frame of this message.
    pub fn encode(&self) -> Bytes {
        let body = self.body();
        let mut b = BytesMut::with_capacity(HEADER_LEN + body.len());
        b.put_u8(CONTROL_MAGIC | CONTROL_VERSION);
        b.put_u8(self.kind() as u8);
        b.put_u16(0);
        b.put_u32(body.len() as u32);
        b.extend_from_slice(&body);
        b.freeze()
    }

    fn decode_body(kind: ControlKind, body: &[u8]) -> Result<Control, serde_json::Error> {
        Ok(match kind {
            ControlKind::Hello => Control::Hello(serde_json::from_slice(body)?),
            ControlKind::Welcome => Control::Welcome(serde_json::from_slice(body)?),
            ControlKind::Reject => Control::Reject(serde_json::from_slice(body)?),
            ControlKind::Job => Control::Job(Box::new(serde_json::from_slice(body)?)),
            ControlKind::Ready => Control::Ready,
            ControlKind::Go => Control::Go,
            ControlKind::Progress => Control::Progress(serde_json::from_slice(body)?),
            ControlKind::Report => Control::Report(Box::new(serde_json::from_slice(body)?)),
            ControlKind::Bye => Control::Bye,
            ControlKind::Abort => Control::Abort(serde_json::from_slice(body)?),
        })
    }
}

/// One frame read from a connection.
#[derive(Clone, Debug, PartialEq)]
pub enum WireFrame {
    /// A protocol message, for the machines.
    Proto(Message),
    /// A control message, for the driver.
    Control(Control),
}

/// Why the bytes of a stream are not valid frames. Offsets count from the stream's start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A proto frame the proto decoder rejected.
    #[error("bad frame at byte {at}: {source}")]
    Proto {
        /// Stream offset of the frame.
        at: u64,
        /// The decoder's reason.
        source: FrameError,
    },
    /// A first byte that starts no known frame.
    #[error("not a windrose frame at byte {at}: first byte {found:#04x}, expected 0xb2 (protocol) or 0xc1 (control)")]
    BadMagic {
        /// Stream offset.
        at: u64,
        /// The byte.
        found: u8,
    },
    /// A control frame that is malformed.
    #[error("bad control frame at byte {at}: {what}")]
    Control {
        /// Stream offset of the frame.
        at: u64,
        /// What is wrong.
        what: String,
    },
    /// The stream ended inside a frame.
    #[error("the connection closed in the middle of a frame ({buffered} bytes of it received, at byte {at})")]
    Truncated {
        /// Stream offset of the incomplete frame.
        at: u64,
        /// Bytes of it received.
        buffered: usize,
    },
}

/// Incremental reader of a stream of proto and control frames. See the [module docs](self).
#[derive(Debug)]
pub struct FrameReader {
    buf: BytesMut,
    max_body_len: u32,
    control_max: u32,
    consumed: u64,
    failed: Option<WireError>,
}

impl FrameReader {
    /// A reader with the proto body limit `max_body_len` and the handshake control limit.
    pub fn new(max_body_len: u32) -> FrameReader {
        FrameReader {
            buf: BytesMut::new(),
            max_body_len,
            control_max: HANDSHAKE_MAX_BODY,
            consumed: 0,
            failed: None,
        }
    }

    /// Raises (or lowers) the control body limit: [`CONTROL_MAX_BODY`] once the handshake is
    /// done.
    pub fn set_control_limit(&mut self, limit: u32) {
        self.control_max = limit;
    }

    /// The receive buffer, to read into (e.g. with tokio's `read_buf`).
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received and not yet returned as frames.
    pub fn buffered_len(&self) -> usize {
        self.buf.len()
    }

    /// Stream offset of the next frame.
    pub fn position(&self) -> u64 {
        self.consumed
    }

    /// Bytes of the frame being received that are still missing (0 when unknown or none).
    pub fn missing_hint(&self) -> usize {
        if self.buf.len() < HEADER_LEN {
            return 0;
        }
        let len = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]) as usize;
        (HEADER_LEN + len).saturating_sub(self.buf.len())
    }

    /// The error for an end of stream now: None when it ended between frames.
    pub fn eof_error(&self) -> Option<WireError> {
        if let Some(e) = &self.failed {
            return Some(e.clone());
        }
        (!self.buf.is_empty()).then(|| WireError::Truncated {
            at: self.consumed,
            buffered: self.buf.len(),
        })
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed, or the error that made
    /// the stream unreadable (returned again on every later call).
    pub fn next_frame(&mut self) -> Result<Option<WireFrame>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.decode_one();
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn decode_one(&mut self) -> Result<Option<WireFrame>, WireError> {
        let Some(&first) = self.buf.first() else {
            return Ok(None);
        };
        let at = self.consumed;
        match first & 0xF0 {
            frame::MAGIC => {
                let before = self.buf.len();
                match frame::decode(&mut self.buf, self.max_body_len) {
                    Ok(Some(m)) => {
                        self.consumed += (before - self.buf.len()) as u64;
                        Ok(Some(WireFrame::Proto(m)))
                    }
                    Ok(None) => Ok(None),
                    Err(source) => Err(WireError::Proto { at, source }),
                }
            }
            CONTROL_MAGIC => {
                let bad = |what: String| WireError::Control { at, what };
                if first & 0x0F != CONTROL_VERSION {
                    return Err(bad(format!(
                        "unsupported control version {} (this build speaks version {CONTROL_VERSION})",
                        first & 0x0F
                    )));
                }
                if self.buf.len() < HEADER_LEN {
                    return Ok(None);
                }
                let kind = ControlKind::from_byte(self.buf[1])
                    .ok_or_else(|| bad(format!("unknown control kind {}", self.buf[1])))?;
                let flags = u16::from_be_bytes([self.buf[2], self.buf[3]]);
                if flags != 0 {
                    return Err(bad(format!("reserved flags set: {flags:#06x}")));
                }
                let len = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
                if len > self.control_max {
                    return Err(bad(format!(
                        "body of {len} bytes exceeds the limit of {} bytes",
                        self.control_max
                    )));
                }
                let frame_len = HEADER_LEN + len as usize;
                if self.buf.len() < frame_len {
                    self.buf.reserve(frame_len - self.buf.len());
                    return Ok(None);
                }
                let mut frame = self.buf.split_to(frame_len);
                frame.advance(HEADER_LEN);
                let control = Control::decode_body(kind, &frame)
                    .map_err(|e| bad(format!("{kind:?} body is not valid: {e}")))?;
                self.consumed += frame_len as u64;
                Ok(Some(WireFrame::Control(control)))
            }
            _ => Err(WireError::BadMagic { at, found: first }),
        }
    }
}

/// Encoded size of a proto message (what the simulator charges), re-exported for reports.
pub fn proto_frame_len(message: &Message) -> usize {
    frame::encoded_len(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_proto::pieces::Manifest;
    use windrose_proto::probe::{Probe, ProbeMsg};
    use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
    use windrose_proto::Time;
    use windrose_trees::Tree;

    fn data() -> Message {
        Message::Broadcast(BroadcastMsg::Data(DataSegment {
            transfer: TransferId(3),
            offset: 0,
            total_len: 5,
            payload: Bytes::from_static(b"hello"),
        }))
    }

    #[test]
    fn interleaved_frames_round_trip_byte_by_byte() {
        let hello = Control::Hello(Hello {
            group: "g".into(),
            protocol_version: 1,
            wire_version: 1,
            from: NodeId(0),
            to: NodeId(2),
            role: Role::Root,
            group_digest: "0123456789abcdef".into(),
        });
        let ping = Message::Probe(ProbeMsg::Ping(Probe {
            nonce: 9,
            sent_at: Time::from_millis(1),
        }));
        let mut stream = Vec::new();
        stream.extend_from_slice(&hello.encode());
        stream.extend_from_slice(&frame::encode(&data()).unwrap());
        stream.extend_from_slice(&Control::Bye.encode());
        stream.extend_from_slice(&frame::encode(&ping).unwrap());
        let mut r = FrameReader::new(1 << 20);
        let mut got = Vec::new();
        for b in &stream {
            r.push(&[*b]);
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(
            got,
            vec![
                WireFrame::Control(hello),
                WireFrame::Proto(data()),
                WireFrame::Control(Control::Bye),
                WireFrame::Proto(ping)
            ]
        );
        assert_eq!(r.position(), stream.len() as u64);
        assert_eq!(r.eof_error(), None);
    }

    #[test]
    fn errors_name_the_offset_and_stick() {
        let frame = frame::encode(&data()).unwrap();
        let mut r = FrameReader::new(1 << 20);
        r.push(&frame);
        r.push(&[0x42, 0, 0, 0]);
        assert!(matches!(r.next_frame(), Ok(Some(WireFrame::Proto(_)))));
        let e = r.next_frame().unwrap_err();
        assert_eq!(
            e,
            WireError::BadMagic {
                at: frame.len() as u64,
                found: 0x42
            }
        );
        assert_eq!(r.next_frame().unwrap_err(), e);

        let mut t = FrameReader::new(1 << 20);
        t.push(&frame[..10]);
        assert_eq!(t.next_frame().unwrap(), None);
        assert_eq!(
            t.eof_error(),
            Some(WireError::Truncated {
                at: 0,
                buffered: 10
            })
        );

        // Oversized control body, rejected from its header alone.
        let mut c = FrameReader::new(1 << 20);
        c.push(&[0xC1, 4, 0, 0, 0x10, 0, 0, 0]);
        assert!(c
            .next_frame()
            .unwrap_err()
            .to_string()
            .contains("exceeds the limit"));
        // Garbage JSON.
        let mut j = FrameReader::new(1 << 20);
        j.push(&[0xC1, 1, 0, 0, 0, 0, 0, 2, b'{', b'x']);
        assert!(j
            .next_frame()
            .unwrap_err()
            .to_string()
            .contains("Hello body is not valid"));
        // Oversized proto frame.
        let mut p = FrameReader::new(16);
        p.push(&frame);
        assert!(matches!(
            p.next_frame(),
            Err(WireError::Proto { at: 0, .. })
        ));
    }

    #[test]
    fn manifest_spec_round_trips_and_rejects_bad_hex() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let m = Manifest::build(&data, 300).unwrap();
        let spec = ManifestSpec::of(&m);
        assert_eq!(spec.hashes.len(), 4 * 64);
        assert_eq!(spec.hashes[..64], blake3::hash(&data[..300]).to_hex()[..]);
        assert_eq!(spec.to_manifest(1000).unwrap(), m);
        // Upper-case digits are accepted too.
        let upper = ManifestSpec {
            hashes: spec.hashes.to_uppercase(),
            ..spec.clone()
        };
        assert_eq!(upper.to_manifest(1000).unwrap(), m);
        // A length that needs another piece, a truncated hash, a non-hex digit.
        assert!(spec.to_manifest(1201).is_err());
        let short = ManifestSpec {
            hashes: spec.hashes[..100].to_string(),
            ..spec.clone()
        };
        assert!(short
            .to_manifest(1000)
            .unwrap_err()
            .contains("multiple of 64"));
        let mut bad = spec.hashes.clone();
        bad.replace_range(10..11, "g");
        let bad = ManifestSpec {
            hashes: bad,
            ..spec
        };
        assert!(bad
            .to_manifest(1000)
            .unwrap_err()
            .contains("not a hex digit"));
    }

    #[test]
    fn tree_spec_round_trips() {
        let n = NodeId;
        let t = Tree::from_edges(4, n(2), &[(n(0), n(2)), (n(3), n(2)), (n(1), n(0))]).unwrap();
        let spec = TreeSpec::of(&t);
        assert_eq!(spec.to_tree().unwrap(), t);
        let bad = TreeSpec {
            node_count: 2,
            root: n(0),
            edges: vec![(n(5), n(0))],
        };
        assert!(bad.to_tree().is_err());
    }
}
