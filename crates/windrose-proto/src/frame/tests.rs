use super::*;
use crate::host::SessionFrame;
use crate::pieces::PieceMsg;
use crate::probe::ProbeMsg;
use crate::scatter::{ScatterMsg, ShareChunk};
use crate::tree_broadcast::{BroadcastMsg, DataSegment};
use std::collections::BTreeSet;

fn data(payload: &'static [u8]) -> Message {
    Message::from(DataSegment {
        transfer: TransferId(7),
        offset: 3,
        total_len: 100,
        payload: Bytes::from_static(payload),
    })
}

#[test]
fn families_and_names_are_unique_and_fixed_parts_bounded() {
    let families: BTreeSet<u8> = FAMILIES.iter().map(|(f, _)| *f).collect();
    assert_eq!(families.len(), FAMILIES.len(), "two families share a byte");
    assert!(
        !families.contains(&0),
        "family 0 is reserved (a zeroed header)"
    );
    let names: BTreeSet<&str> = MessageKind::all().map(MessageKind::name).collect();
    assert_eq!(
        names.len(),
        MessageKind::all().count(),
        "two kinds share a name"
    );
    for (_, kinds) in FAMILIES {
        let bytes: BTreeSet<u8> = kinds.iter().map(|k| k.kind).collect();
        assert_eq!(bytes.len(), kinds.len());
        assert!(!bytes.contains(&0));
        assert!(kinds.iter().all(|k| k.fixed <= MAX_FIXED_BODY_LEN));
    }
    for k in MessageKind::all() {
        assert_eq!(MessageKind::from_name(k.name()), Some(k));
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(serde_json::from_str::<MessageKind>(&json).unwrap(), k);
    }
    assert_eq!(BroadcastMsg::DATA.name(), "data");
    assert_eq!(PieceMsg::PIECE.frame_overhead(), 16);
    assert_eq!(ScatterMsg::SHARE.frame_overhead(), 36);
    // A maintained MST's echo sets the bound.
    let largest = MessageKind::all()
        .filter_map(|k| k.layout())
        .map(|l| l.fixed)
        .max();
    assert_eq!(largest, Some(MAX_FIXED_BODY_LEN));
    assert_eq!(
        crate::ghs_repair::MstFrame::kind_of(8).frame_overhead(),
        HEADER_LEN + crate::ghs_repair::MAX_MST_BODY_LEN
    );
    assert_eq!(crate::ghs_repair::MstFrame::kind_of(8).name(), "mst_echo");
    assert_eq!(crate::ghs::GhsFrame::kind_of(6).name(), "ghs_report");
    assert_eq!(
        crate::ghs::GhsFrame::kind_of(6).frame_overhead(),
        HEADER_LEN + 4 + crate::ghs::MAX_BODY_LEN
    );
    assert_eq!(SessionFrame::SESSION.name(), "session");
    assert!(serde_json::from_str::<MessageKind>("\"nope\"")
        .unwrap_err()
        .to_string()
        .contains("known: session, ping, pong, data"));
}

#[test]
fn known_bytes() {
    let frame = encode(&data(b"hi")).unwrap();
    assert_eq!(
        &frame[..],
        &[
            0xB2, 3, 1, 0, 0, 0, 0,
            22, // header: family 3 (broadcast), kind 1 (data), body 20 + 2
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
    let Some(Message::Broadcast(BroadcastMsg::Data(d))) =
        decode(&mut buf, DEFAULT_MAX_BODY_LEN).unwrap()
    else {
        panic!("expected a data frame");
    };
    assert_eq!(d.payload.as_ptr() as usize, base + HEADER_LEN + 20);
    let (m, n) = decode_bytes(&frame, DEFAULT_MAX_BODY_LEN).unwrap().unwrap();
    assert_eq!(n, frame.len());
    assert_eq!(
        m.payload().unwrap().as_ptr() as usize,
        frame.as_ptr() as usize + HEADER_LEN + 20
    );
}

#[test]
fn header_errors_come_before_the_body() {
    let limit = 64;
    let mut dec = Decoder::with_max_body_len(limit);
    dec.push(&[0xB2, 3, 1, 0, 0, 0, 1, 0]); // body of 256 bytes > 64
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

    for (bytes, want, text) in [
        (
            [0x11, 3, 1, 0, 0, 0, 0, 20],
            FrameError::BadMagic {
                found: 0x11,
                expected: 0xB2,
            },
            "not a windrose frame: first byte 0x11, expected 0xb2",
        ),
        (
            [0xB1, 1, 0, 0, 0, 0, 0, 20],
            FrameError::UnsupportedVersion {
                found: 1,
                supported: 2,
            },
            "unsupported wire format version 1 (this build speaks version 2)",
        ),
        (
            [0xB2, 99, 1, 0, 0, 0, 0, 20],
            FrameError::UnknownKind {
                family: 99,
                kind: 1,
            },
            "unknown message kind 1 of family 99",
        ),
        (
            [0xB2, 3, 9, 0, 0, 0, 0, 20],
            FrameError::UnknownKind { family: 3, kind: 9 },
            "unknown message kind 9 of family 3",
        ),
        (
            [0xB2, 3, 1, 4, 0, 0, 0, 20],
            FrameError::ReservedFlags { flags: 4 },
            "reserved flags set: 0x04",
        ),
        (
            [0xB2, 2, 1, 0, 0, 0, 0, 17],
            FrameError::BodyLength {
                kind: ProbeMsg::PING,
                found: 17,
                expected: 16,
                at_least: false,
            },
            "ping frame: body of 17 bytes, expected 16",
        ),
        (
            [0xB2, 4, 1, 0, 0, 0, 0, 27],
            FrameError::BodyLength {
                kind: ScatterMsg::SHARE,
                found: 27,
                expected: 28,
                at_least: true,
            },
            "share frame: body of 27 bytes, expected at least 28",
        ),
    ] {
        assert_eq!(peek_header(&bytes, limit), Err(want.clone()));
        assert_eq!(want.to_string(), text);
    }
}

#[test]
fn inconsistent_bodies() {
    let past_end = Message::from(DataSegment {
        transfer: TransferId(0),
        offset: u64::MAX,
        total_len: u64::MAX,
        payload: Bytes::from_static(b"x"),
    });
    let frame = encode(&past_end).unwrap();
    assert_eq!(
        decode_bytes(&frame, DEFAULT_MAX_BODY_LEN),
        Err(FrameError::Inconsistent {
            kind: BroadcastMsg::DATA,
            what: "payload runs past total_len"
        })
    );
    assert!(past_end.validate().is_err());
    let outside = Message::from(ShareChunk {
        transfer: TransferId(0),
        share_offset: 10,
        share_len: 5,
        offset: 9,
        payload: Bytes::from_static(b"x"),
    });
    assert!(outside.validate().is_err());
    assert!(data(b"ok").validate().is_ok());
}

/// Every machine output carries a `Message` by value, so the largest family sets the size of
/// every data-path output: a large control family boxed (the MST's, 152 bytes) kept the
/// simulator's broadcast bench at half the speed. The data path's own messages are up to 64.
#[test]
fn a_message_stays_as_small_as_the_data_path_needs() {
    use crate::pieces::PieceMsg;
    use crate::tree_broadcast::BroadcastMsg;
    let largest_data_path = std::mem::size_of::<BroadcastMsg>()
        .max(std::mem::size_of::<PieceMsg>())
        .max(std::mem::size_of::<crate::scatter::ScatterMsg>());
    assert!(
        std::mem::size_of::<Message>() <= largest_data_path + 8,
        "Message is {} bytes, the data path's largest message {largest_data_path}: box the \
         family that grew it (see `Mst`)",
        std::mem::size_of::<Message>()
    );
}
