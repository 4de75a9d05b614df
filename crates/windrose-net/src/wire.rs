//! What a windrose-net connection carries: the protocol frames of `windrose-proto` (the
//! Host's session messages among them), and this crate's own **control frames** for the
//! handshake that opens every connection and the refusal that may close it.
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
//! # The handshake
//!
//! Every connection starts with one (see [`crate::bootstrap`]): the dialer sends
//! [`Control::Hello`] (group name, protocol and wire versions, its id, the id it expects to
//! reach, its role, the digest of its group file's members, addresses and clusters); the
//! acceptor checks every field and answers [`Control::Welcome`] (its own group, versions, id
//! and digest, which the dialer checks in turn) or [`Control::Reject`] with the reason. A
//! dialer that finds a mismatch in the welcome sends a reject too, so both sides always learn
//! why. With a group key the same hello and welcome travel encrypted inside a Noise handshake
//! that proves both sides hold the key (see [`crate::auth`]). [`Control::Abort`] closes a
//! connection that is refused later, with the reason.
//!
//! Everything after the handshake is proto frames: the session (join, announcements,
//! readiness, reports, heartbeats, leave) is the Host's (`windrose_proto::host`), so the
//! simulator runs it too. Protocol version 1 had a session of control frames here (job, ready,
//! go, progress, report, bye: kinds 4 to 9); a version-1 peer is refused at its hello, and those
//! kinds are refused by name if they ever arrive.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use windrose_model::NodeId;
use windrose_proto::frame::{self, FrameError, Message, HEADER_LEN};

/// The high nibble of a control frame's first byte.
pub const CONTROL_MAGIC: u8 = 0xC0;
/// The control frame format version (low nibble of the first byte).
pub const CONTROL_VERSION: u8 = 1;
/// Body limit for control frames before the handshake completed (a Hello is ~200 bytes).
pub const HANDSHAKE_MAX_BODY: u32 = 64 << 10;
/// Body limit for control frames afterwards (a job carries the tree or schedule, a report the
/// link measurements).
pub const CONTROL_MAX_BODY: u32 = 16 << 20;

/// Why a member dials another.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A member's connection to a peer, for everything but the link probes.
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

/// Every control message.
#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// Handshake, dialer to acceptor.
    Hello(Hello),
    /// Handshake accepted.
    Welcome(Welcome),
    /// Handshake refused, with the reason in plain words.
    Reject(String),
    /// The connection is refused after the handshake, with the reason.
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
    // 4 to 9: protocol version 1's session (see [`RETIRED_KINDS`]).
    /// [`Control::Abort`].
    Abort = 10,
}

/// The control kinds of protocol version 1's session, by kind byte (4 to 9): never sent since
/// version 2, and named when refused.
pub const RETIRED_KINDS: [&str; 6] = ["job", "ready", "go", "progress", "report", "bye"];

impl ControlKind {
    fn from_byte(b: u8) -> Option<ControlKind> {
        use ControlKind::*;
        [Hello, Welcome, Reject, Abort]
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
            Control::Abort(_) => ControlKind::Abort,
        }
    }

    /// A short name for messages: `hello`, `abort`, ...
    pub fn name(&self) -> &'static str {
        match self {
            Control::Hello(_) => "hello",
            Control::Welcome(_) => "welcome",
            Control::Reject(_) => "reject",
            Control::Abort(_) => "abort",
        }
    }

    fn body(&self) -> Vec<u8> {
        let json = match self {
            Control::Hello(h) => serde_json::to_vec(h),
            Control::Welcome(w) => serde_json::to_vec(w),
            Control::Reject(r) | Control::Abort(r) => serde_json::to_vec(r),
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
                let kind = ControlKind::from_byte(self.buf[1]).ok_or_else(|| {
                    let b = self.buf[1];
                    bad(match RETIRED_KINDS.get(usize::from(b).wrapping_sub(4)) {
                        Some(name) => format!(
                            "control kind {b} ({name}) belongs to protocol version 1's session, \
                             which this build (version {}) no longer speaks",
                            crate::PROTOCOL_VERSION
                        ),
                        None => format!("unknown control kind {b}"),
                    })
                })?;
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
    use windrose_proto::collective::{ManifestSpec, TreeSpec};
    use windrose_proto::frame::TransferId;
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
            protocol_version: 2,
            wire_version: 1,
            from: NodeId(0),
            to: NodeId(2),
            role: Role::Peer,
            group_digest: "0123456789abcdef".into(),
        });
        let ping = Message::Probe(ProbeMsg::Ping(Probe {
            nonce: 9,
            sent_at: Time::from_millis(1),
        }));
        let mut stream = Vec::new();
        stream.extend_from_slice(&hello.encode());
        stream.extend_from_slice(&frame::encode(&data()).unwrap());
        stream.extend_from_slice(&Control::Abort("done".into()).encode());
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
                WireFrame::Control(Control::Abort("done".into())),
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
        c.push(&[0xC1, 1, 0, 0, 0x10, 0, 0, 0]);
        assert!(c
            .next_frame()
            .unwrap_err()
            .to_string()
            .contains("exceeds the limit"));
        // A version-1 session frame (a job), refused by name.
        let mut v1 = FrameReader::new(1 << 20);
        v1.push(&[0xC1, 4, 0, 0, 0, 0, 0, 2, b'{', b'}']);
        let e = v1.next_frame().unwrap_err().to_string();
        assert!(
            e.contains("control kind 4 (job)") && e.contains("version 1"),
            "{e}"
        );
        let mut unknown = FrameReader::new(1 << 20);
        unknown.push(&[0xC1, 11, 0, 0, 0, 0, 0, 0]);
        let e = unknown.next_frame().unwrap_err().to_string();
        assert!(e.contains("unknown control kind 11"), "{e}");
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
