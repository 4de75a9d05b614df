//! Issue 21's defects of the real runtime, in process: strangers at a waiting node, group files
//! that differ between members, sources that change during a run.

mod common;

use common::{loopback, oneshot::config};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use windrose_model::NodeId;
use windrose_net::trees::group_tree;
use windrose_net::wire::{Control, FrameReader, Hello, Role, WireFrame};
use windrose_net::{random_payload, run_node, run_root, NetEvent, OutputSpec, RootJob};
use windrose_trees::TreeAlgorithm;

/// Every wait of these tests: far past the deadlines they use, only so a regression fails
/// instead of hanging.
const BOUND: Duration = Duration::from_secs(30);

async fn read_control(stream: &mut TcpStream, reader: &mut FrameReader) -> Control {
    loop {
        if let Some(WireFrame::Control(c)) = reader.next_frame().unwrap() {
            return c;
        }
        let n = stream.read_buf(reader.buffer_mut()).await.unwrap();
        assert!(n > 0, "the node closed early");
    }
}

/// Defect 9: in an unkeyed group a stranger says hello as a root and hangs up without a job.
/// The waiting node keeps waiting (until its join deadline) and then serves the real root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_root_that_hangs_up_does_not_end_the_wait() {
    let (group, mut listeners) = loopback("stranger", 2, 1).await;
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut c = config(&group, 1, Duration::from_secs(2));
    c.timeouts.join = BOUND;
    c.output = OutputSpec::Memory;
    c.events = Some(tx);
    let node = tokio::spawn(run_node(listeners.pop().unwrap(), c));

    let addr = group.member(NodeId(1)).unwrap().addr.clone();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let hello = Hello {
        group: "stranger".into(),
        protocol_version: windrose_net::PROTOCOL_VERSION,
        wire_version: windrose_proto::frame::VERSION,
        from: NodeId(0),
        to: NodeId(1),
        role: Role::Root,
        group_digest: group.digest(),
    };
    s.write_all(&Control::Hello(hello).encode()).await.unwrap();
    let mut r = FrameReader::new(1 << 20);
    let answer = read_control(&mut s, &mut r).await;
    assert!(matches!(answer, Control::Welcome(_)), "{answer:?}");
    drop(s);
    // The node has seen the stranger go.
    tokio::time::timeout(BOUND, async {
        while let Some(e) = events.recv().await {
            if matches!(
                e,
                NetEvent::PeerFailed {
                    peer: NodeId(0),
                    ..
                }
            ) {
                return;
            }
        }
    })
    .await
    .expect("the node notices the stranger left");

    let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(0)).unwrap();
    let data = random_payload(1 << 20, 9);
    let job = RootJob::broadcast(tree, 1 << 16, data.clone());
    let outcome = tokio::time::timeout(
        BOUND,
        run_root(config(&group, 0, Duration::from_secs(2)), job),
    )
    .await
    .expect("the root does not hang")
    .expect("the node still serves the real root");
    assert!(outcome.all_verified(), "{:?}", outcome.failures());
    let got = tokio::time::timeout(BOUND, node)
        .await
        .expect("the node ends")
        .unwrap()
        .expect("the node's run succeeds");
    assert_eq!(got.delivered.to_vec(), data.to_vec());
}

/// Defect 4: a member whose copy of the group file puts a node in another cluster (the rest
/// unchanged: name, version, ids, addresses) is refused in the handshake, plain or keyed, with
/// both digests named; the root's run does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_another_copy_of_the_group_is_refused_with_both_digests() {
    use std::sync::Arc;
    use windrose_model::ClusterId;
    use windrose_net::auth::{GroupKey, NoiseHandshake};
    use windrose_net::group::Group;
    for keyed in [false, true] {
        let (group, mut listeners) = loopback("digest", 3, 1).await;
        let mut members = group.members().to_vec();
        members[2].cluster = ClusterId(1);
        let other = Arc::new(Group::new("digest", members).unwrap());
        assert_ne!(group.digest(), other.digest());
        let with_key = |mut c: windrose_net::NodeConfig| {
            if keyed {
                c.handshake = Arc::new(NoiseHandshake::new(GroupKey::from_bytes([3; 32])));
            }
            c
        };
        let t = Duration::from_secs(2);
        let n2 = tokio::spawn(run_node(
            listeners.pop().unwrap(),
            with_key(config(&other, 2, t)),
        ));
        let n1 = tokio::spawn(run_node(
            listeners.pop().unwrap(),
            with_key(config(&group, 1, t)),
        ));
        let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(0)).unwrap();
        let job = RootJob::broadcast(tree, 1 << 16, random_payload(1 << 16, 1));
        let e = tokio::time::timeout(BOUND, run_root(with_key(config(&group, 0, t)), job))
            .await
            .expect("the root does not hang")
            .unwrap_err()
            .to_string();
        for want in [
            "group description mismatch".to_string(),
            group.digest(),
            other.digest(),
        ] {
            assert!(e.contains(&want), "keyed {keyed}: {want:?} not in {e}");
        }
        for n in [n1, n2] {
            let r = tokio::time::timeout(BOUND, n).await.expect("no node hangs");
            assert!(r.unwrap().is_err(), "keyed {keyed}: a node ran");
        }
    }
}

/// Defect 8: a keyed node whose dialer hangs up after the first handshake message (as a
/// dialer does when its own deadline passes under load) blamed "a replayed or forged
/// handshake". The reason now says the dialer gave up waiting, or replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialer_that_gives_up_mid_handshake_is_not_called_forged() {
    use std::sync::Arc;
    use windrose_net::auth::{GroupKey, NoiseHandshake};
    use windrose_net::bootstrap::{Handshake, Transport};
    let (group, mut listeners) = loopback("gave-up", 2, 1).await;
    let key = GroupKey::from_bytes([5; 32]);
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut c = config(&group, 1, Duration::from_secs(2));
    c.handshake = Arc::new(NoiseHandshake::new(key.clone()));
    c.timeouts.join = BOUND;
    c.events = Some(tx);
    let node = tokio::spawn(run_node(listeners.pop().unwrap(), c));
    // A real dialer's first message, recorded by a listener that then hangs up.
    let recorder = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = recorder.local_addr().unwrap();
    let dial = {
        let group = group.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let stream = TcpStream::connect(at).await.unwrap();
            let mut io = Transport {
                stream,
                reader: FrameReader::new(1 << 20),
            };
            let hs = NoiseHandshake::new(key);
            let _ = hs
                .dial(&mut io, &group, NodeId(0), NodeId(1), Role::Root)
                .await;
        })
    };
    let (mut s, _) = recorder.accept().await.unwrap();
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await.unwrap();
    let mut msg1 = head.to_vec();
    msg1.resize(4 + usize::from(u16::from_be_bytes([head[2], head[3]])), 0);
    s.read_exact(&mut msg1[4..]).await.unwrap();
    drop(s);
    let _ = dial.await;
    // Sent to the node, which answers; then the dialer hangs up without confirming.
    let addr = group.member(NodeId(1)).unwrap().addr.clone();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&msg1).await.unwrap();
    let mut answer = [0u8; 4];
    s.read_exact(&mut answer).await.unwrap();
    drop(s);
    let reason = tokio::time::timeout(BOUND, async {
        while let Some(e) = events.recv().await {
            if let NetEvent::Rejected { reason } = e {
                return reason;
            }
        }
        panic!("the node stopped")
    })
    .await
    .expect("the node reports the refused connection");
    assert!(
        reason.contains("closed the connection without confirming the handshake")
            && reason.contains("gave up waiting"),
        "{reason}"
    );
    assert!(!reason.contains("forged"), "{reason}");
    node.abort();
}
