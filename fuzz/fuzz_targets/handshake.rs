//! Fuzzes the acceptor's side of the handshake, driven for real: the input is what the peer
//! sends on a loopback TCP connection (127.0.0.1), and the acceptor is
//! `windrose_net::bootstrap::PlainHandshake::accept` (first byte even) or
//! `windrose_net::auth::NoiseHandshake::accept` with a fixed group key (first byte odd), node 1
//! of a four-node group "fuzz". One current-thread tokio runtime and one listener serve every
//! run; each run opens a fresh connection, writes the bytes, half-closes, and gives the
//! acceptor at most 2 seconds.
//!
//! Checked, on every input:
//! - no panic, and the acceptor returns (success or error) within the bound once the peer's
//!   bytes end: garbage, oversized length fields or a truncated hello never hang it;
//! - plain: it accepts only when the stream starts with a control Hello from another member of
//!   group "fuzz" (node 0, 2 or 3) addressed to node 1 with this build's protocol and wire
//!   versions and the group's digest, and then answers exactly one Welcome (group "fuzz", node 1); a hello that fails
//!   a check is answered by exactly one Reject; otherwise it answers nothing or a Reject;
//! - plain, against a dialer that opens with an auth frame (`0xA1`, it holds a group key):
//!   refused, with nothing or exactly one auth refusal frame;
//! - keyed (Noise): without the group key, no input is accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use windrose_model::NodeId;
use windrose_net::auth::{GroupKey, NoiseHandshake};
use windrose_net::bootstrap::{Handshake, PlainHandshake, Transport};
use windrose_net::group::Group;
use windrose_net::wire::{Control, FrameReader, WireFrame, HANDSHAKE_MAX_BODY};
use windrose_net::PROTOCOL_VERSION;
use windrose_proto::frame::VERSION as WIRE_VERSION;

const ME: NodeId = NodeId(1);
const BOUND: Duration = Duration::from_secs(2);

struct Env {
    rt: Runtime,
    listener: TcpListener,
    addr: SocketAddr,
    group: Group,
    noise: NoiseHandshake,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        Env {
            rt,
            listener,
            addr,
            group: Group::loopback("fuzz", 4, 1, 1).expect("group"),
            noise: NoiseHandshake::new(GroupKey::from_bytes([7; 32])),
        }
    })
}

/// What a correct plain acceptor decides from the first frame alone.
enum Expect {
    /// A good hello: accept and welcome.
    Accept(NodeId),
    /// A hello that fails a check: reject.
    Reject,
    /// Anything else: fail (with or without a reject).
    Fail,
}

fn expect_plain(input: &[u8]) -> Expect {
    let mut r = FrameReader::new(windrose_proto::frame::DEFAULT_MAX_BODY_LEN);
    r.set_control_limit(HANDSHAKE_MAX_BODY);
    r.push(input);
    match r.next_frame() {
        Ok(Some(WireFrame::Control(Control::Hello(h)))) => {
            let ok = h.group == "fuzz"
                && h.group_digest == env().group.digest()
                && h.protocol_version == PROTOCOL_VERSION
                && h.wire_version == WIRE_VERSION
                && h.to == ME
                && h.from != ME
                && h.from.0 < 4;
            if ok {
                Expect::Accept(h.from)
            } else {
                Expect::Reject
            }
        }
        _ => Expect::Fail,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else {
        return;
    };
    let keyed = mode & 1 == 1;
    let env = env();
    let (result, reply) = env.rt.block_on(async {
        let mut client = TcpStream::connect(env.addr).await.expect("connect");
        let (server, remote) = env.listener.accept().await.expect("accept");
        let mut io = Transport {
            stream: server,
            reader: FrameReader::new(windrose_proto::frame::DEFAULT_MAX_BODY_LEN),
        };
        // The peer: write everything, half-close, then read the acceptor's answer to the end.
        let peer = async {
            let _ = client.write_all(input).await;
            let _ = client.shutdown().await;
            let mut reply = Vec::new();
            let _ = tokio::time::timeout(BOUND, client.read_to_end(&mut reply)).await;
            reply
        };
        let acceptor = async {
            let r = if keyed {
                tokio::time::timeout(BOUND, env.noise.accept(&mut io, &env.group, ME, remote)).await
            } else {
                tokio::time::timeout(
                    BOUND,
                    PlainHandshake.accept(&mut io, &env.group, ME, remote),
                )
                .await
            };
            drop(io); // closes the connection, so the peer's read ends
            r
        };
        let (r, reply) = tokio::join!(acceptor, peer);
        (r, reply)
    });
    let result = result.unwrap_or_else(|_| {
        panic!(
            "the {} acceptor did not finish within {BOUND:?} of the peer's end of stream",
            if keyed { "keyed" } else { "plain" }
        )
    });
    if keyed {
        assert!(
            result.is_err(),
            "the keyed acceptor accepted a peer without the key: {result:?}"
        );
        return;
    }
    // A dialer that opens with an auth frame (0xA1: it holds a group key) is refused in kind:
    // exactly one auth refusal frame (0xA1, kind 2, u16 length, reason).
    if input.first() == Some(&0xA1) {
        assert!(
            result.is_err(),
            "the plain acceptor accepted an auth frame: {result:?}"
        );
        if !reply.is_empty() {
            assert!(reply.len() >= 4, "a truncated auth refusal: {reply:?}");
            assert_eq!(&reply[..2], &[0xA1, 2], "not an auth refusal: {reply:?}");
            let len = usize::from(u16::from_be_bytes([reply[2], reply[3]]));
            assert_eq!(
                reply.len(),
                4 + len,
                "the auth refusal is not one whole frame"
            );
        }
        return;
    }
    // The acceptor's answer, as frames.
    let mut rr = FrameReader::new(windrose_proto::frame::DEFAULT_MAX_BODY_LEN);
    rr.push(&reply);
    let mut answers = Vec::new();
    while let Ok(Some(f)) = rr.next_frame() {
        answers.push(f);
    }
    assert_eq!(
        rr.buffered_len(),
        0,
        "the acceptor's answer is not whole frames"
    );
    match (expect_plain(input), &result) {
        (Expect::Accept(from), Ok(est)) => {
            assert_eq!(est.peer, from);
            assert_eq!(answers.len(), 1, "one welcome: {answers:?}");
            match &answers[0] {
                WireFrame::Control(Control::Welcome(w)) => {
                    assert_eq!(w.group, "fuzz");
                    assert_eq!(w.group_digest, env.group.digest());
                    assert_eq!(w.node, ME);
                    assert_eq!(w.protocol_version, PROTOCOL_VERSION);
                    assert_eq!(w.wire_version, WIRE_VERSION);
                }
                other => panic!("accepted but answered {other:?}"),
            }
        }
        (Expect::Accept(_), Err(e)) => panic!("a good hello was refused: {e}"),
        (Expect::Reject, Err(_)) => {
            assert!(
                matches!(answers.as_slice(), [WireFrame::Control(Control::Reject(_))]),
                "a bad hello must be answered by exactly one reject: {answers:?}"
            );
        }
        (Expect::Reject | Expect::Fail, Ok(est)) => {
            panic!("accepted a bad or missing hello: {est:?}")
        }
        (Expect::Fail, Err(_)) => {
            assert!(
                answers.is_empty()
                    || matches!(answers.as_slice(), [WireFrame::Control(Control::Reject(_))]),
                "answered {answers:?} to a failed handshake"
            );
        }
    }
});
