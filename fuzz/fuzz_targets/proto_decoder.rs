//! Fuzzes `windrose_proto::frame::Decoder` (the proto wire format's incremental decoder).
//!
//! Input layout: `[limit_hi, limit_lo, split_seed, stream...]`. The body limit is
//! `u16::from_be_bytes([limit_hi, limit_lo]) % 1024` (small, so that oversized length fields
//! are common and the memory bound is meaningful); the stream is pushed into the decoder in
//! chunks of 1 to 32 bytes whose sizes come from a xorshift generator seeded with `split_seed`
//! (seed 0: the whole stream at once).
//!
//! Checked, on every input:
//! - no panic;
//! - memory: after the decoder asks for more bytes, it buffers less than one maximal frame
//!   (`HEADER_LEN + limit`) and its buffer's capacity stays within a small multiple of that —
//!   an oversized length field never makes it reserve what the header declares;
//! - errors are sticky: once `next_message` failed, later calls (even after more bytes) return
//!   the same error;
//! - `bytes_consumed` is the sum of the decoded frames' lengths;
//! - every decoded message is canonical and round-trips: `encode(m)` is exactly the bytes the
//!   decoder consumed for it, and `decode_bytes(encode(m))` gives `m` back;
//! - the incremental decoder agrees with the one-shot `decode_bytes` over the whole stream
//!   (same messages, same error).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use windrose_proto::frame::{decode_bytes, encode, encoded_len, Decoder, FrameError, HEADER_LEN};

const MAX_CHUNK: usize = 32;

struct Splitter(u64);

impl Splitter {
    fn next_len(&mut self, left: usize) -> usize {
        if self.0 == 0 {
            return left;
        }
        // xorshift64
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (1 + (self.0 % MAX_CHUNK as u64) as usize).min(left)
    }
}

/// The one-shot decoding of `stream`: the messages with their frame bytes, and the error that
/// stopped it (None: it ended between frames or inside a valid frame prefix).
fn one_shot(
    stream: &Bytes,
    limit: u32,
) -> (
    Vec<(windrose_proto::frame::Message, Bytes)>,
    Option<FrameError>,
) {
    let mut out = Vec::new();
    let mut rest = stream.clone();
    loop {
        match decode_bytes(&rest, limit) {
            Ok(Some((m, n))) => {
                assert!(n >= HEADER_LEN && n <= rest.len());
                out.push((m, rest.slice(..n)));
                rest = rest.slice(n..);
            }
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let limit = u32::from(u16::from_be_bytes([data[0], data[1]]) % 1024);
    let mut split = Splitter(u64::from(data[2]) * 0x9E37_79B9_7F4A_7C15);
    let stream = Bytes::copy_from_slice(&data[3..]);
    let max_frame = HEADER_LEN + limit as usize;
    // Generous but fixed: BytesMut may round its allocation up (doubling, the original
    // capacity it remembers), never to anything near a declared multi-MiB body.
    let max_capacity = 4 * (max_frame + MAX_CHUNK) + 1024;

    let mut dec = Decoder::with_max_body_len(limit);
    assert_eq!(dec.max_body_len(), limit);
    let mut decoded: Vec<windrose_proto::frame::Message> = Vec::new();
    let mut consumed = 0usize;
    let mut failed: Option<FrameError> = None;
    let mut pos = 0;
    while pos < stream.len() {
        let n = split.next_len(stream.len() - pos);
        dec.push(&stream[pos..pos + n]);
        pos += n;
        loop {
            match dec.next_message() {
                Ok(Some(m)) => {
                    assert!(failed.is_none(), "a message after an error");
                    let frame_len = encoded_len(&m);
                    assert!(
                        frame_len <= max_frame,
                        "a frame over the body limit was decoded"
                    );
                    // Canonical: the consumed bytes are exactly the encoding.
                    let enc = encode(&m).expect("a decoded message encodes");
                    assert_eq!(enc.len(), frame_len);
                    assert_eq!(
                        &enc[..],
                        &stream[consumed..consumed + frame_len],
                        "the encoding of a decoded message differs from the bytes it came from"
                    );
                    // Round trip.
                    let again = decode_bytes(&enc, limit).expect("re-encoded frame decodes");
                    assert_eq!(again, Some((m.clone(), frame_len)));
                    m.validate().expect("a decoded message is valid");
                    consumed += frame_len;
                    assert_eq!(dec.bytes_consumed(), consumed as u64);
                    decoded.push(m);
                }
                Ok(None) => {
                    assert!(
                        failed.is_none(),
                        "Ok(None) after an error: the error is not sticky"
                    );
                    let buffered = dec.buffered_len();
                    assert_eq!(buffered, pos - consumed);
                    assert!(
                        buffered < max_frame.max(HEADER_LEN),
                        "waiting with {buffered} bytes buffered, limit {limit}"
                    );
                    let cap = dec.buffer_mut().capacity();
                    assert!(
                        cap <= max_capacity,
                        "capacity {cap} for a body limit of {limit} (buffered {buffered})"
                    );
                    break;
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    match &failed {
                        Some(first) => {
                            assert_eq!(&e, first, "a different error after the first");
                            break;
                        }
                        None => {
                            failed = Some(e);
                            // Call once more in this round: must be the same error.
                        }
                    }
                }
            }
        }
    }
    // Sticky after more input, too.
    if let Some(first) = &failed {
        dec.push(&[0xB2, 2, 1, 0, 0, 0, 0, 16]); // a ping
        dec.push(&[0; 16]);
        assert_eq!(dec.next_message().as_ref(), Err(first));
    }

    // The one-shot decoder agrees.
    let (whole, whole_err) = one_shot(&stream, limit);
    let whole_msgs: Vec<_> = whole.iter().map(|(m, _)| m.clone()).collect();
    assert_eq!(
        whole_msgs, decoded,
        "one-shot and incremental decoders disagree"
    );
    assert_eq!(
        whole_err, failed,
        "one-shot and incremental decoders fail differently"
    );
});
