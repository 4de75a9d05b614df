//! Fuzzes `windrose_net::wire::FrameReader`, which splits a connection's stream into proto
//! frames (`0xB2`) and control frames (`0xC1`, JSON bodies: hello, welcome, reject, abort).
//!
//! Input layout: `[split_seed, config, stream...]`. `config` bit 0 picks the control body limit
//! (0: the handshake limit `HANDSHAKE_MAX_BODY`, 64 KiB; 1: a small limit of `4 * (config >> 1)`
//! bytes); the proto body limit is 512 bytes. The stream is pushed in chunks of 1 to 32 bytes
//! (sizes from a xorshift generator seeded with `split_seed`; seed 0: all at once).
//!
//! Checked, on every input:
//! - no panic;
//! - bounded memory: while the reader waits for more bytes it buffers less than one maximal
//!   frame (header + the larger limit) and its buffer's capacity stays within a small multiple
//!   of that;
//! - stream accounting: `position() + buffered_len()` is the number of bytes pushed;
//! - errors are sticky; `eof_error` is the error, or `Truncated` exactly when bytes are
//!   buffered;
//! - anything decoded re-encodes: a proto message's encoding is exactly the bytes it came
//!   from; a control message's `encode()` decodes (in a fresh reader) to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use windrose_net::wire::{FrameReader, WireError, WireFrame, CONTROL_MAX_BODY, HANDSHAKE_MAX_BODY};
use windrose_proto::frame::{encode, HEADER_LEN};

const MAX_CHUNK: usize = 32;
const PROTO_LIMIT: u32 = 512;

struct Splitter(u64);

impl Splitter {
    fn next_len(&mut self, left: usize) -> usize {
        if self.0 == 0 {
            return left;
        }
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (1 + (self.0 % MAX_CHUNK as u64) as usize).min(left)
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let mut split = Splitter(u64::from(data[0]) * 0x9E37_79B9_7F4A_7C15);
    let config = data[1];
    let control_limit = if config & 1 == 0 {
        HANDSHAKE_MAX_BODY
    } else {
        4 * u32::from(config >> 1)
    };
    let stream = &data[2..];
    let max_frame = HEADER_LEN + PROTO_LIMIT.max(control_limit) as usize;
    let max_capacity = 4 * (max_frame + MAX_CHUNK) + 1024;

    let mut r = FrameReader::new(PROTO_LIMIT);
    r.set_control_limit(control_limit);
    let mut failed: Option<WireError> = None;
    let mut pos = 0;
    while pos < stream.len() {
        let n = split.next_len(stream.len() - pos);
        r.push(&stream[pos..pos + n]);
        pos += n;
        loop {
            let before = r.position() as usize;
            match r.next_frame() {
                Ok(Some(f)) => {
                    assert!(failed.is_none(), "a frame after an error");
                    let after = r.position() as usize;
                    assert!(after > before && after <= pos);
                    assert!(
                        after - before <= max_frame,
                        "a frame over its limit was decoded"
                    );
                    let raw = &stream[before..after];
                    match f {
                        WireFrame::Proto(m) => {
                            let enc = encode(&m).expect("a decoded message encodes");
                            assert_eq!(&enc[..], raw, "proto re-encoding differs from its bytes");
                        }
                        WireFrame::Control(c) => {
                            assert_eq!(raw[0], 0xC1);
                            assert_eq!(raw[1], c.kind() as u8);
                            let enc = c.encode();
                            let mut again = FrameReader::new(PROTO_LIMIT);
                            again.set_control_limit(CONTROL_MAX_BODY);
                            again.push(&enc);
                            match again.next_frame() {
                                Ok(Some(WireFrame::Control(c2))) => assert_eq!(
                                    c2, c,
                                    "a control message changed in a re-encode/decode round trip"
                                ),
                                other => panic!(
                                    "the re-encoding of {c:?} ({} bytes) does not decode: {other:?}",
                                    enc.len()
                                ),
                            }
                            assert_eq!(again.buffered_len(), 0);
                            assert_eq!(again.position(), enc.len() as u64);
                        }
                    }
                }
                Ok(None) => {
                    assert!(
                        failed.is_none(),
                        "Ok(None) after an error: the error is not sticky"
                    );
                    let buffered = r.buffered_len();
                    assert_eq!(r.position() as usize + buffered, pos, "stream accounting");
                    assert!(
                        buffered < max_frame,
                        "waiting with {buffered} bytes buffered (limits {PROTO_LIMIT}/{control_limit})"
                    );
                    let cap = r.buffer_mut().capacity();
                    assert!(
                        cap <= max_capacity,
                        "capacity {cap} while waiting (limits {PROTO_LIMIT}/{control_limit})"
                    );
                    let _ = r.missing_hint();
                    match r.eof_error() {
                        None => assert_eq!(buffered, 0),
                        Some(WireError::Truncated { at, buffered: b }) => {
                            assert_eq!(at, r.position());
                            assert_eq!(b, buffered);
                            assert!(b > 0);
                        }
                        Some(e) => panic!("eof_error {e:?} without a failure"),
                    }
                    break;
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    match &failed {
                        Some(first) => {
                            assert_eq!(&e, first, "a different error after the first");
                            assert_eq!(r.eof_error().as_ref(), Some(first));
                            break;
                        }
                        None => failed = Some(e),
                    }
                }
            }
        }
    }
    if let Some(first) = &failed {
        r.push(&windrose_net::wire::Control::Abort("end".into()).encode());
        assert_eq!(
            r.next_frame().as_ref(),
            Err(first),
            "not sticky after more input"
        );
    }
});
