//! Writes the seed corpus of the fuzz targets from real frames (run from `fuzz/`:
//! `cargo run --release --example seed_corpus`; then minimise with `cargo fuzz cmin`).
//!
//! - `corpus/proto_decoder/`: one file per proto message kind, plus a stream of all of them,
//!   each prefixed with the target's 3 config bytes (body limit 512, a few split seeds);
//! - `corpus/control_frames/`: every control message kind and a mixed proto/control stream,
//!   prefixed with the target's 2 config bytes;
//! - `corpus/handshake/`: good and bad plain hellos (mode byte 0) and a real Noise first
//!   message made with the fuzz target's group key (mode byte 1).

use bytes::Bytes;
use std::fs;
use std::path::Path;
use windrose_model::NodeId;
use windrose_net::auth::{GroupKey, NoiseHandshake};
use windrose_net::bootstrap::{Handshake, Transport};
use windrose_net::group::Group;
use windrose_net::measure::LinkMeasurements;
use windrose_net::wire::{
    CollectiveSpec, Control, FrameReader, Hello, Job, NodeReport, Progress, Role, RunStatus,
    TreeSpec, Welcome,
};
use windrose_proto::frame::{encode, Message, TransferId};
use windrose_proto::pieces::{Bitfield, PeerList, Piece, PieceMsg, PieceRef, Signal, SignalMsg};
use windrose_proto::probe::{Probe, ProbeMsg};
use windrose_proto::scatter::{ScatterMsg, ShareChunk, ShareFinished};
use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
use windrose_proto::Time;

fn write(dir: &str, name: &str, bytes: &[u8]) {
    let d = Path::new("corpus").join(dir);
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join(name), bytes).unwrap();
}

fn with(prefix: &[u8], frame: &[u8]) -> Vec<u8> {
    [prefix, frame].concat()
}

fn proto_messages() -> Vec<Message> {
    let t = TransferId(7);
    vec![
        Message::Broadcast(BroadcastMsg::Data(DataSegment {
            transfer: t,
            offset: 3,
            total_len: 100,
            payload: Bytes::from_static(b"hello"),
        })),
        Message::Scatter(ScatterMsg::Share(ShareChunk {
            transfer: t,
            share_offset: 10,
            share_len: 20,
            offset: 12,
            payload: Bytes::from_static(b"abc"),
        })),
        Message::Scatter(ScatterMsg::Finished(ShareFinished {
            transfer: t,
            node: NodeId(3),
            finished_at: Time::from_millis(5),
        })),
        Message::Probe(ProbeMsg::Ping(Probe {
            nonce: 42,
            sent_at: Time::from_millis(1),
        })),
        Message::Probe(ProbeMsg::Pong(Probe {
            nonce: 42,
            sent_at: Time::from_millis(1),
        })),
        Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(t, 13, |i| i % 3 == 0))),
        Message::Pieces(PieceMsg::Have(PieceRef {
            transfer: t,
            piece: 4,
        })),
        Message::Pieces(PieceMsg::Request(PieceRef {
            transfer: t,
            piece: 5,
        })),
        Message::Pieces(PieceMsg::Piece(Piece {
            transfer: t,
            piece: 5,
            payload: Bytes::from_static(b"piece bytes"),
        })),
        Message::Pieces(PieceMsg::Signal(SignalMsg {
            transfer: t,
            signal: Signal::Complete,
            arg: 2,
        })),
        Message::Pieces(PieceMsg::PeerList(PeerList::new(
            t,
            &[NodeId(1), NodeId(2), NodeId(9)],
        ))),
    ]
}

fn hello(group: &str, from: u32, to: u32) -> Control {
    Control::Hello(Hello {
        group: group.into(),
        protocol_version: windrose_net::PROTOCOL_VERSION,
        wire_version: windrose_proto::frame::VERSION,
        from: NodeId(from),
        to: NodeId(to),
        role: Role::Peer,
        group_digest: fuzz_group().digest(),
    })
}

/// The handshake target's group: the digest a good hello must carry.
fn fuzz_group() -> Group {
    Group::loopback("fuzz", 4, 1, 1).unwrap()
}

fn controls() -> Vec<Control> {
    vec![
        hello("fuzz", 0, 1),
        Control::Welcome(Welcome {
            group: "fuzz".into(),
            protocol_version: 1,
            wire_version: 1,
            node: NodeId(1),
            group_digest: fuzz_group().digest(),
        }),
        Control::Reject("group name mismatch".into()),
        Control::Job(Box::new(Job {
            session: 99,
            root: NodeId(0),
            transfer: TransferId(1),
            total_len: 1000,
            collective: CollectiveSpec::Broadcast {
                tree: TreeSpec {
                    node_count: 3,
                    root: NodeId(0),
                    edges: vec![(NodeId(1), NodeId(0)), (NodeId(2), NodeId(1))],
                },
                segment_bytes: 256,
                max_frame_payload: 128,
            },
            idle_timeout_ms: 1000,
            probe_period_ms: 0,
            seed: 5,
            // A rejoin job: node 2 taken back with node 1 counted down.
            rejoin: Some(vec![NodeId(1)]),
        })),
        Control::Ready,
        Control::Go,
        Control::Progress(Progress {
            done_bytes: 10,
            total_bytes: 100,
        }),
        Control::Report(Box::new(NodeReport {
            node: NodeId(2),
            status: RunStatus::Finished,
            error: None,
            bytes_received: 1000,
            blake3: Some("00".repeat(32)),
            finished_ns: Some(12345),
            complete_ns: Some(12000),
            share: None,
            measurements: LinkMeasurements { series: vec![] },
            frames_sent: vec![],
            resumed_bytes: Some(256),
        })),
        Control::Bye,
        Control::Abort("the root gave up".into()),
    ]
}

/// The first message a keyed dialer (node 0 -> node 1, group "fuzz", key [7; 32]) sends.
fn noise_first_message() -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let group = Group::loopback("fuzz", 4, 1, 1).unwrap();
        let hs = NoiseHandshake::new(GroupKey::from_bytes([7; 32]));
        let dialer = async {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut io = Transport {
                stream,
                reader: FrameReader::new(1 << 20),
            };
            let _ = hs
                .dial(&mut io, &group, NodeId(0), NodeId(1), Role::Peer)
                .await;
        };
        let recorder = async {
            use tokio::io::AsyncReadExt;
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = vec![0u8; 4096];
            let mut n = 0;
            // Read what arrives within 300 ms, then hang up (the dialer then fails).
            let _ = tokio::time::timeout(std::time::Duration::from_millis(300), async {
                loop {
                    match s.read(&mut got[n..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                }
            })
            .await;
            got.truncate(n);
            got
        };
        let ((), got) = tokio::join!(dialer, recorder);
        got
    })
}

fn main() {
    // proto_decoder: [limit_hi, limit_lo, split_seed]
    let msgs = proto_messages();
    let mut all = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let f = encode(m).unwrap();
        all.extend_from_slice(&f);
        write(
            "proto_decoder",
            &format!("seed-{i:02}-{}", m.kind()),
            &with(&[2, 0, 0], &f),
        );
    }
    write(
        "proto_decoder",
        "seed-stream-whole",
        &with(&[2, 0, 0], &all),
    );
    write(
        "proto_decoder",
        "seed-stream-split",
        &with(&[2, 0, 77], &all),
    );
    write(
        "proto_decoder",
        "seed-stream-small-limit",
        &with(&[0, 16, 3], &all),
    );

    // control_frames: [split_seed, config]
    let mut mixed = Vec::new();
    for (i, c) in controls().iter().enumerate() {
        let f = c.encode();
        write(
            "control_frames",
            &format!("seed-{i:02}-{}", c.name()),
            &with(&[0, 0], &f),
        );
        mixed.extend_from_slice(&f);
        mixed.extend_from_slice(&encode(&msgs[i % msgs.len()]).unwrap());
    }
    write("control_frames", "seed-mixed-whole", &with(&[0, 0], &mixed));
    write(
        "control_frames",
        "seed-mixed-split",
        &with(&[91, 0], &mixed),
    );
    write(
        "control_frames",
        "seed-mixed-small-limit",
        &with(&[5, 0x41], &mixed),
    );

    // handshake: [mode] (even: plain, odd: keyed)
    let good = hello("fuzz", 0, 1).encode();
    write("handshake", "plain-good-hello", &with(&[0], &good));
    let mut good_then_data = good.to_vec();
    good_then_data.extend_from_slice(&encode(&msgs[3]).unwrap());
    write(
        "handshake",
        "plain-good-hello-then-ping",
        &with(&[0], &good_then_data),
    );
    write(
        "handshake",
        "plain-wrong-group",
        &with(&[0], &hello("other", 0, 1).encode()),
    );
    let mut other_copy = hello("fuzz", 0, 1);
    if let Control::Hello(h) = &mut other_copy {
        h.group_digest = "0123456789abcdef".into();
    }
    write(
        "handshake",
        "plain-wrong-digest",
        &with(&[0], &other_copy.encode()),
    );
    write(
        "handshake",
        "plain-wrong-to",
        &with(&[0], &hello("fuzz", 0, 2).encode()),
    );
    write(
        "handshake",
        "plain-self",
        &with(&[0], &hello("fuzz", 1, 1).encode()),
    );
    write(
        "handshake",
        "plain-stranger",
        &with(&[0], &hello("fuzz", 9, 1).encode()),
    );
    write(
        "handshake",
        "plain-bye-first",
        &with(&[0], &Control::Bye.encode()),
    );
    write(
        "handshake",
        "plain-proto-first",
        &with(&[0], &encode(&msgs[0]).unwrap()),
    );
    write(
        "handshake",
        "plain-truncated",
        &with(&[0], &good[..good.len() / 2]),
    );
    write("handshake", "keyed-plain-hello", &with(&[1], &good));
    let noise = noise_first_message();
    assert!(!noise.is_empty(), "no noise message captured");
    write("handshake", "keyed-noise-msg1", &with(&[1], &noise));
    println!("seed corpus written ({} byte noise message)", noise.len());
}
