//! Property tests of the wire format: round trips, arbitrary splitting of a stream, truncation
//! and corruption of valid frames, and arbitrary bytes — errors, never panics.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use windrose_model::NodeId;
use windrose_proto::frame::{
    self, Decoder, FrameError, Message, TransferId, DEFAULT_MAX_BODY_LEN, HEADER_LEN,
};
use windrose_proto::ghs::{EdgeKey, GhsFrame, GhsMsg, SearchState, MAX_LEVEL};
use windrose_proto::ghs_repair::{
    encode_row, Change, ChangeSeen, EchoInfo, MstFrame, MstNodeMsg, RecoverMsg, RepairMsg,
};
use windrose_proto::heterosort::HsortMsg;
use windrose_proto::host::SessionFrame;
use windrose_proto::pieces::{Bitfield, PeerList, Piece, PieceMsg, PieceRef, Signal, SignalMsg};
use windrose_proto::probe::{Probe, ProbeMsg};
use windrose_proto::sample_sort::SsortMsg;
use windrose_proto::scatter::{ScatterMsg, ShareChunk, ShareFinished};
use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
use windrose_proto::Time;

fn payload() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from)
}

/// Any valid GHS frame: every kind, levels, keys and amounts over their whole ranges.
fn ghs_frame() -> impl Strategy<Value = Message> {
    let key = (
        prop_oneof![Just(0.0), Just(f64::MAX), 0.0..1e9f64],
        any::<u32>(),
        any::<u32>(),
    )
        .prop_filter_map("distinct ends", |(w, a, b)| {
            EdgeKey::new(NodeId(a), NodeId(b), w)
        });
    let amount = prop_oneof![Just(0.0), Just(f64::MAX), 0.0..1e12f64];
    (
        any::<u32>(),
        1u8..=8,
        0..=MAX_LEVEL,
        key,
        any::<bool>(),
        2..=u32::MAX,
        amount,
    )
        .prop_map(|(t, kind, level, key, flag, nodes, amount)| {
            let msg = match kind {
                1 => GhsMsg::Connect { level },
                2 => GhsMsg::Initiate {
                    level,
                    fragment: key,
                    state: if flag {
                        SearchState::Find
                    } else {
                        SearchState::Found
                    },
                },
                3 => GhsMsg::Test {
                    level,
                    fragment: key,
                },
                4 => GhsMsg::Accept,
                5 => GhsMsg::Reject,
                6 => GhsMsg::Report {
                    best: flag.then_some(key),
                    nodes,
                    weight: amount,
                },
                7 => GhsMsg::ChangeRoot,
                _ => GhsMsg::Done {
                    fragment: key,
                    level,
                    nodes,
                    total_weight: amount,
                },
            };
            Message::Ghs(GhsFrame {
                transfer: TransferId(t),
                msg,
            })
        })
}

/// Any valid maintained-MST frame: every kind, optional fields present and absent.
fn mst_frame() -> impl Strategy<Value = Message> {
    let key = || {
        (
            prop_oneof![Just(0.0), Just(f64::MAX), 0.0..1e9f64],
            any::<u32>(),
            any::<u32>(),
        )
            .prop_filter_map("distinct ends", |(w, a, b)| {
                EdgeKey::new(NodeId(a), NodeId(b), w)
            })
    };
    let opt = || prop::option::of(key());
    let path = || prop::option::of(prop::option::of(key()));
    let change =
        (any::<u32>(), any::<u32>(), 0.0..1e9f64).prop_filter_map("distinct ends", |(a, b, w)| {
            (a != b).then_some(Change {
                from: NodeId(a),
                to: NodeId(b),
                weight: w,
            })
        });
    let seen = prop::option::of((any::<bool>(), key(), key()).prop_map(
        |(was_branch, old, new)| ChangeSeen {
            was_branch,
            old,
            new,
        },
    ));
    (
        (
            any::<u32>(),
            any::<u32>(),
            0u8..16,
            any::<bool>(),
            1..=u32::MAX,
        ),
        (key(), opt(), opt(), opt(), seen, path(), path()),
        change,
        ghs_frame(),
    )
        .prop_map(
            |((generation, epoch, kind, flag, nodes), (k, o1, o2, o3, seen, p1, p2), c, g)| {
                let repair = |msg| MstNodeMsg::Repair { generation, msg };
                let node = match kind {
                    0 => MstNodeMsg::Hello {
                        generation,
                        weight: k.weight(),
                    },
                    1 => match g {
                        Message::Ghs(f) => MstNodeMsg::Ghs {
                            generation,
                            msg: f.msg,
                        },
                        _ => unreachable!(),
                    },
                    2 => repair(RepairMsg::Request {
                        change: c,
                        behind: nodes,
                        waited: flag,
                    }),
                    3 => repair(RepairMsg::Begin {
                        epoch,
                        change: c,
                        fragment: o1.zip(o2),
                    }),
                    4 => repair(RepairMsg::Test { epoch, fragment: k }),
                    5 => repair(RepairMsg::Accept { epoch }),
                    6 => repair(RepairMsg::Reject { epoch }),
                    7 => repair(RepairMsg::Echo {
                        epoch,
                        info: EchoInfo {
                            best: o1,
                            change: seen,
                            from_path: p1,
                            to_path: p2,
                            path_max: o3,
                        },
                    }),
                    8 => repair(RepairMsg::Stable {
                        epoch,
                        remove: o1,
                        add: o2,
                        nodes,
                        total_weight: k.weight(),
                    }),
                    9 => {
                        // A row of up to 16 entries, ids increasing from `epoch % 1000`.
                        let len = (nodes % 17) as usize;
                        let start = epoch % 1000;
                        let entries: Vec<(NodeId, f64)> = (0..len as u32)
                            .map(|i| (NodeId(start + 3 * i), k.weight() + f64::from(i)))
                            .collect();
                        MstNodeMsg::Row {
                            generation,
                            row: encode_row(&entries),
                        }
                    }
                    10 => MstNodeMsg::Recover {
                        generation,
                        msg: RecoverMsg::Join { epoch },
                    },
                    11 => MstNodeMsg::Recover {
                        generation,
                        msg: RecoverMsg::Count {
                            nodes,
                            weight: k.weight(),
                            gone: epoch,
                        },
                    },
                    12 => MstNodeMsg::Recover {
                        generation,
                        msg: RecoverMsg::Core {
                            level: (epoch % 32) as u8 + 1,
                        },
                    },
                    13 => MstNodeMsg::Recover {
                        generation,
                        msg: RecoverMsg::Settled {
                            nodes,
                            total_weight: k.weight(),
                        },
                    },
                    14 => match g {
                        Message::Ghs(f) => MstNodeMsg::Recover {
                            generation,
                            msg: RecoverMsg::Ghs(f.msg),
                        },
                        _ => unreachable!(),
                    },
                    _ => {
                        return Message::Mst(Box::new(MstFrame::Parent {
                            generation,
                            parent: flag.then_some(NodeId(epoch)),
                        }))
                    }
                };
                Message::Mst(Box::new(MstFrame::Node(node)))
            },
        )
}

/// Any valid message, edge values included.
fn message() -> impl Strategy<Value = Message> {
    let big = || {
        prop_oneof![
            Just(0u64),
            Just(u64::MAX >> 2),
            any::<u64>().prop_map(|x| x >> 2)
        ]
    };
    prop_oneof![
        (any::<u32>(), big(), big(), payload()).prop_map(|(t, offset, extra, payload)| {
            let total_len = offset + payload.len() as u64 + extra;
            Message::Broadcast(BroadcastMsg::Data(DataSegment {
                transfer: TransferId(t),
                offset,
                total_len,
                payload,
            }))
        }),
        (any::<u32>(), big(), big(), big(), payload()).prop_map(
            |(t, start, pre, post, payload)| {
                Message::Scatter(ScatterMsg::Share(ShareChunk {
                    transfer: TransferId(t),
                    share_offset: start,
                    share_len: pre + payload.len() as u64 + post,
                    offset: start + pre,
                    payload,
                }))
            }
        ),
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(t, n, at)| {
            Message::Scatter(ScatterMsg::Finished(ShareFinished {
                transfer: TransferId(t),
                node: NodeId(n),
                finished_at: Time::from_nanos(at),
            }))
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(nonce, at)| Message::Probe(ProbeMsg::Ping(
            Probe {
                nonce,
                sent_at: Time::from_nanos(at)
            }
        ))),
        (any::<u64>(), any::<u64>()).prop_map(|(nonce, at)| Message::Probe(ProbeMsg::Pong(
            Probe {
                nonce,
                sent_at: Time::from_nanos(at)
            }
        ))),
        (any::<u32>(), prop::collection::vec(any::<bool>(), 0..40)).prop_map(|(t, bits)| {
            Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(
                TransferId(t),
                bits.len() as u32,
                |i| bits[i as usize],
            )))
        }),
        (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(t, piece, have)| {
            let r = PieceRef {
                transfer: TransferId(t),
                piece,
            };
            if have {
                Message::Pieces(PieceMsg::Have(r))
            } else {
                Message::Pieces(PieceMsg::Request(r))
            }
        }),
        (any::<u32>(), any::<u32>(), payload()).prop_map(|(t, piece, payload)| {
            Message::Pieces(PieceMsg::Piece(Piece {
                transfer: TransferId(t),
                piece,
                payload,
            }))
        }),
        (
            any::<u32>(),
            prop::sample::select(Signal::ALL.to_vec()),
            any::<u32>()
        )
            .prop_map(
                |(t, signal, arg)| Message::Pieces(PieceMsg::Signal(SignalMsg {
                    transfer: TransferId(t),
                    signal,
                    arg,
                }))
            ),
        (any::<u32>(), prop::collection::vec(any::<u32>(), 0..20)).prop_map(|(t, ids)| {
            let nodes: Vec<NodeId> = ids.into_iter().map(NodeId).collect();
            Message::Pieces(PieceMsg::PeerList(PeerList::new(TransferId(t), &nodes)))
        }),
        payload().prop_map(|body| Message::Session(SessionFrame { body })),
        ghs_frame(),
        hsort_frame(),
        ssort_frame(),
        mst_frame(),
    ]
}

/// Any valid sample sort frame: samples (no more than the count) or a bucket of whole records.
fn ssort_frame() -> impl Strategy<Value = Message> {
    (
        any::<u32>(),
        any::<bool>(),
        1u16..=40,
        0usize..8,
        any::<u64>(),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(t, samples, record_len, records, count, more, byte)| {
            let transfer = TransferId(t);
            let bytes = Bytes::from(vec![byte; usize::from(record_len) * records]);
            Message::SampleSort(if samples {
                SsortMsg::Samples {
                    transfer,
                    count: count.max(records as u64),
                    record_len,
                    samples: bytes,
                }
            } else {
                SsortMsg::Bucket {
                    transfer,
                    record_len,
                    // A compressed frame: the raw length is whole records, at least one.
                    packed: (more && records > 0)
                        .then_some(u32::from(record_len) * (count % 9 + 1) as u32),
                    records: bytes,
                    more,
                }
            })
        })
}

/// Any valid HeteroSort frame: slices of whole records with any handoff, checks with or
/// without a maximum, verdicts; cycles and counts over their ranges.
fn hsort_frame() -> impl Strategy<Value = Message> {
    (
        any::<u32>(),
        1..=u32::MAX,
        0u8..6,
        any::<u64>(),
        1u16..=40,
        0usize..8,
        any::<bool>(),
        any::<u8>(),
        any::<u32>(),
    )
        .prop_map(
            |(t, cycle, kind, count, record_len, records, flag, byte, epoch)| {
                let transfer = TransferId(t);
                let bytes = Bytes::from(vec![byte; usize::from(record_len) * records]);
                Message::HeteroSort(match kind {
                    0 => HsortMsg::Slice {
                        transfer,
                        epoch,
                        cycle,
                        count,
                        record_len,
                        handoff: (count % (records as u64 + 1)) as u32,
                        records: bytes,
                        more: flag,
                        packed: None,
                    },
                    1 => HsortMsg::Check {
                        transfer,
                        epoch,
                        cycle,
                        ok: flag,
                        max: if flag { bytes } else { Bytes::new() },
                    },
                    2 => HsortMsg::Verdict {
                        transfer,
                        epoch,
                        cycle,
                        sorted: flag,
                    },
                    3 => HsortMsg::Backup {
                        transfer,
                        record_len,
                        records: bytes,
                        more: flag,
                    },
                    4 if records > 0 && flag => HsortMsg::Slice {
                        // Compressed: no handoff, a raw length of whole records.
                        transfer,
                        epoch,
                        cycle,
                        count,
                        record_len,
                        handoff: 0,
                        records: bytes,
                        more: byte % 2 == 0,
                        packed: Some(u32::from(record_len) * (count % 9 + 1) as u32),
                    },
                    4 => HsortMsg::BackupAck { transfer },
                    _ => {
                        // Ascending member ranks, 1 to 8 of them.
                        let ranks: Vec<usize> =
                            (0..=records).map(|i| i * 3 + usize::from(byte)).collect();
                        HsortMsg::failed(transfer, &ranks)
                    }
                })
            },
        )
}

#[test]
fn swarm_bodies_are_checked() {
    // A bitfield whose bit bytes do not match its count, or with a bit past the count.
    for bad in [
        Bitfield {
            transfer: TransferId(1),
            pieces: 9,
            bits: Bytes::from_static(&[0xFF]),
        },
        Bitfield {
            transfer: TransferId(1),
            pieces: 9,
            bits: Bytes::from_static(&[0xFF, 0x40]),
        },
    ] {
        let f = frame::encode(&Message::Pieces(PieceMsg::Bitfield(bad))).unwrap();
        assert!(matches!(
            frame::decode_bytes(&f, DEFAULT_MAX_BODY_LEN),
            Err(FrameError::Inconsistent { .. })
        ));
    }
    let list = Message::Pieces(PieceMsg::PeerList(PeerList {
        transfer: TransferId(1),
        peers: Bytes::from_static(&[0, 0, 0]),
    }));
    assert!(frame::decode_bytes(&frame::encode(&list).unwrap(), DEFAULT_MAX_BODY_LEN).is_err());
    // An unknown signal byte.
    let mut f = frame::encode(&Message::Pieces(PieceMsg::Signal(SignalMsg {
        transfer: TransferId(1),
        signal: Signal::Hello,
        arg: 0,
    })))
    .unwrap()
    .to_vec();
    f[HEADER_LEN + 4] = 200;
    assert!(frame::decode_bytes(&Bytes::from(f), DEFAULT_MAX_BODY_LEN).is_err());
    let ok = PeerList::new(TransferId(3), &[NodeId(7), NodeId(1)]);
    assert_eq!(ok.nodes().collect::<Vec<_>>(), vec![NodeId(7), NodeId(1)]);
}

/// Pushes `bytes` to a fresh decoder cut at `cuts` and collects everything it returns.
fn decode_split(
    bytes: &[u8],
    cuts: &[usize],
    limit: u32,
) -> (Vec<Message>, Result<(), FrameError>, Decoder) {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c % (bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    let mut dec = Decoder::with_max_body_len(limit);
    let mut got = Vec::new();
    for w in points.windows(2) {
        dec.push(&bytes[w[0]..w[1]]);
        loop {
            match dec.next_message() {
                Ok(Some(m)) => got.push(m),
                Ok(None) => break,
                Err(e) => return (got, Err(e), dec),
            }
        }
    }
    (got, Ok(()), dec)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn round_trip(m in message()) {
        let bytes = frame::encode(&m).unwrap();
        prop_assert_eq!(bytes.len(), frame::encoded_len(&m));
        let parts = frame::encode_parts(&m).unwrap();
        prop_assert_eq!([&parts.head[..], &parts.payload[..]].concat(), bytes.to_vec());
        let (back, used) = frame::decode_bytes(&bytes, DEFAULT_MAX_BODY_LEN).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(&back, &m);
        let mut buf = BytesMut::from(&bytes[..]);
        prop_assert_eq!(frame::decode(&mut buf, DEFAULT_MAX_BODY_LEN).unwrap(), Some(m));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn stream_split_anywhere(
        ms in prop::collection::vec(message(), 0..12),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let mut stream = BytesMut::new();
        for m in &ms {
            frame::encode_into(m, &mut stream).unwrap();
        }
        let (got, res, dec) = decode_split(&stream, &cuts, DEFAULT_MAX_BODY_LEN);
        prop_assert_eq!(res, Ok(()));
        prop_assert_eq!(got, ms);
        prop_assert_eq!(dec.buffered_len(), 0);
        prop_assert_eq!(dec.bytes_consumed(), stream.len() as u64);
    }

    #[test]
    fn every_truncation_needs_more(m in message()) {
        let bytes = frame::encode(&m).unwrap();
        for len in 0..bytes.len() {
            let prefix = bytes.slice(..len);
            prop_assert_eq!(frame::decode_bytes(&prefix, DEFAULT_MAX_BODY_LEN), Ok(None));
            let mut dec = Decoder::new();
            dec.push(&prefix);
            prop_assert_eq!(dec.next_message(), Ok(None));
        }
    }

    #[test]
    fn corrupt_headers_are_errors(m in message(), byte in any::<u8>(), flags in 1u8.., cut in any::<usize>()) {
        let good = frame::encode(&m).unwrap();
        let check = |bad: Vec<u8>, limit: u32| -> Result<(), TestCaseError> {
            // Whole, and cut anywhere after the header: always the same error, never a message.
            let whole = frame::decode_bytes(&Bytes::from(bad.clone()), limit);
            prop_assert!(whole.is_err(), "decoded {:?}", whole);
            let (got, res, _) = decode_split(&bad, &[cut], limit);
            prop_assert!(got.is_empty());
            prop_assert_eq!(res, Err(whole.unwrap_err()));
            Ok(())
        };
        // Bad magic or version.
        let mut bad = good.to_vec();
        bad[0] = if byte == 0xB2 { 0xB1 } else { byte };
        check(bad, DEFAULT_MAX_BODY_LEN)?;
        // Unknown family, and unknown kind within a known family.
        let mut bad = good.to_vec();
        bad[1] = if (1..=9).contains(&byte) { byte + 9 } else { byte };
        check(bad, DEFAULT_MAX_BODY_LEN)?;
        let mut bad = good.to_vec();
        bad[2] = if (1..=16).contains(&byte) { byte + 16 } else { byte };
        check(bad, DEFAULT_MAX_BODY_LEN)?;
        // Reserved flags.
        let mut bad = good.to_vec();
        bad[3] = flags;
        check(bad, DEFAULT_MAX_BODY_LEN)?;
        // Body over the limit: the frame itself, with a limit one byte short.
        let body = (good.len() - HEADER_LEN) as u32;
        if body > 0 {
            check(good.to_vec(), body - 1)?;
        }
        // Fixed-size kinds with another length.
        if m.payload().is_none() {
            let mut bad = good.to_vec();
            bad[4..8].copy_from_slice(&(body + 1 + (byte as u32)).to_be_bytes());
            bad.extend(vec![0u8; 1 + byte as usize]);
            check(bad, DEFAULT_MAX_BODY_LEN)?;
        }
    }

    #[test]
    fn inconsistent_bodies_are_errors(m in message(), shrink in 1u64..) {
        // Move the declared whole so the payload no longer fits in it.
        let bad = match m {
            Message::Broadcast(BroadcastMsg::Data(mut d)) if !d.payload.is_empty() || d.offset > 0 => {
                let end = d.offset + d.payload.len() as u64;
                d.total_len = end - 1 - (shrink % end);
                Message::Broadcast(BroadcastMsg::Data(d))
            }
            Message::Scatter(ScatterMsg::Share(mut s)) if !s.payload.is_empty() => {
                s.share_len = s.offset - s.share_offset + s.payload.len() as u64 - 1;
                Message::Scatter(ScatterMsg::Share(s))
            }
            Message::Scatter(ScatterMsg::Share(mut s)) => {
                s.share_offset = s.offset + 1;
                Message::Scatter(ScatterMsg::Share(s))
            }
            _ => return Ok(()),
        };
        prop_assert!(bad.validate().is_err());
        let bytes = frame::encode(&bad).unwrap();
        prop_assert!(
            matches!(
                frame::decode_bytes(&bytes, DEFAULT_MAX_BODY_LEN),
                Err(FrameError::Inconsistent { .. })
            ),
            "{:?}",
            frame::decode_bytes(&bytes, DEFAULT_MAX_BODY_LEN)
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2000),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
        limit in 0u32..1024,
    ) {
        let (_, _, mut dec) = decode_split(&bytes, &cuts, limit);
        // Room is reserved only for frames within the limit (plus the buffer's growth policy).
        let bound = 4 * (bytes.len() + HEADER_LEN + limit as usize);
        prop_assert!(dec.buffer_mut().capacity() <= bound);
        let _ = frame::decode_bytes(&Bytes::from(bytes), limit);
    }

    #[test]
    fn frames_with_a_valid_header_and_arbitrary_body_never_panic(
        family in 1u8..=9,
        kind in 1u8..=10,
        body in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = vec![0xB2, family, kind, 0];
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
        match frame::decode_bytes(&Bytes::from(bytes), DEFAULT_MAX_BODY_LEN) {
            Ok(Some((m, _))) => prop_assert!(m.validate().is_ok()),
            Ok(None) => prop_assert!(false, "a whole frame cannot need more"),
            Err(_) => {}
        }
    }
}

#[test]
fn a_huge_declared_length_reserves_nothing() {
    let mut dec = Decoder::new();
    dec.push(&[0xB2, 3, 1, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
    assert!(matches!(
        dec.next_message(),
        Err(FrameError::TooLarge { .. })
    ));
    assert!(dec.buffer_mut().capacity() < 1024);
}

/// The fuzzer's find (fuzz/artifacts-found/proto_decoder-capacity-drift), replayed as the
/// `proto_decoder` target feeds it (`[limit_hi, limit_lo, split_seed, stream...]`: pieces of 1
/// to 32 bytes from a xorshift generator, or all at once for seed 0) with every decoded message (a zero-copy slice of the
/// buffer) kept: the receive buffer never grows past one maximal frame and a piece, whatever
/// `BytesMut`'s own growth (doubling, remembering an earlier shared allocation's size) would do.
#[test]
fn receive_buffer_stays_within_one_frame_of_its_limit() {
    const MAX_CHUNK: usize = 32;
    let input = include_bytes!("../../../fuzz/artifacts-found/proto_decoder-capacity-drift");
    let limit = u32::from(u16::from_be_bytes([input[0], input[1]]) % 1024);
    let mut state = u64::from(input[2]) * 0x9E37_79B9_7F4A_7C15;
    let stream = &input[3..];
    let max_frame = HEADER_LEN + limit as usize;
    let mut dec = Decoder::with_max_body_len(limit);
    let mut kept = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let n = if state == 0 {
            stream.len() - at
        } else {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (1 + (state % MAX_CHUNK as u64) as usize).min(stream.len() - at)
        };
        dec.push(&stream[at..at + n]);
        at += n;
        while let Ok(Some(m)) = dec.next_message() {
            kept.push(m);
        }
        let cap = dec.buffer_mut().capacity();
        assert!(
            cap <= max_frame + MAX_CHUNK,
            "at byte {at}: capacity {cap} for frames of at most {max_frame} bytes"
        );
    }
    assert!(!kept.is_empty());
}
