//! Failures at start and during a run: each gives a clear error on the nodes concerned, within
//! bounded time, and no node hangs or leaves a half-written output under its final name.

mod common;

use common::{loopback, oneshot::config};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use windrose_model::NodeId;
use windrose_net::group::{Group, Member};
use windrose_net::trees::group_tree;
use windrose_net::wire::{Control, FrameReader, Hello, Role, RunStatus, Welcome, WireFrame};
use windrose_net::{random_payload, run_node, run_root, NetError, OutputSpec, RootJob};
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_trees::TreeAlgorithm;

const SHORT: Duration = Duration::from_secs(2);
/// Every failing run must be over well within this.
const BOUND: Duration = Duration::from_secs(15);

fn chain(group: &Group) -> windrose_trees::Tree {
    group_tree(TreeAlgorithm::Chain, group, NodeId(0)).unwrap()
}

/// Runs the root over `group` with a chain, and nodes `1..` on `listeners` with `node_group`
/// (defaults to `group`); returns the root's result and each node's, all within [`BOUND`].
async fn run_all(
    group: &Arc<Group>,
    node_groups: Vec<Arc<Group>>,
    listeners: Vec<TcpListener>,
) -> (
    Result<windrose_net::RunOutcome, NetError>,
    Vec<Result<windrose_net::NodeOutcome, NetError>>,
) {
    let started = Instant::now();
    let mut nodes = Vec::new();
    for ((i, l), g) in listeners.into_iter().enumerate().skip(1).zip(node_groups) {
        nodes.push(tokio::spawn(run_node(l, config(&g, i as u32, SHORT))));
    }
    let job = RootJob::broadcast(chain(group), 1 << 16, random_payload(1 << 20, 3));
    let root = tokio::time::timeout(BOUND, run_root(config(group, 0, SHORT), job))
        .await
        .expect("the root does not hang");
    let mut results = Vec::new();
    for n in nodes {
        results.push(
            tokio::time::timeout(BOUND, n)
                .await
                .expect("no node hangs")
                .unwrap(),
        );
    }
    assert!(started.elapsed() < BOUND);
    (root, results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_group_name_is_rejected_on_both_sides() {
    let (group, listeners) = loopback("alpha", 4, 1).await;
    let renamed = Arc::new(Group::new("beta", group.members().to_vec()).unwrap());
    let groups = vec![group.clone(), renamed, group.clone()];
    let (root, nodes) = run_all(&group, groups, listeners).await;
    let root_err = root.unwrap_err().to_string();
    assert!(
        root_err.contains("node 2") && root_err.contains("group name mismatch"),
        "{root_err}"
    );
    // Node 2 refused the root, and says so when it gives up waiting for a job.
    let err2 = nodes[1].as_ref().unwrap_err().to_string();
    assert!(err2.contains("group name mismatch"), "{err2}");
    assert!(
        err2.contains("\"alpha\"") && err2.contains("\"beta\""),
        "{err2}"
    );
    // The others were told the run is off.
    for i in [0, 2] {
        let e = nodes[i].as_ref().unwrap_err();
        assert!(matches!(e, NetError::Aborted(_)), "{e}");
        assert!(e.to_string().contains("group name mismatch"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_id_mismatch_is_rejected_on_both_sides() {
    let (group, listeners) = loopback("ids", 3, 1).await;
    // The root believes node 1 listens where node 2 does, and the other way round.
    let mut swapped = group.members().to_vec();
    let (a1, a2) = (swapped[1].addr.clone(), swapped[2].addr.clone());
    swapped[1].addr = a2;
    swapped[2].addr = a1;
    let root_group = Arc::new(Group::new("ids", swapped).unwrap());
    let (root, nodes) = run_all(&root_group, vec![group.clone(), group.clone()], listeners).await;
    let root_err = root.unwrap_err().to_string();
    assert!(root_err.contains("node id mismatch"), "{root_err}");
    for n in &nodes {
        let e = n.as_ref().unwrap_err().to_string();
        assert!(e.contains("node id mismatch"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_node_at_start() {
    let (group, mut listeners) = loopback("gone", 4, 1).await;
    // Node 3 never runs: nothing listens on its address (one no other test binds, so its port
    // cannot be taken meanwhile).
    let port = listeners.pop().unwrap().local_addr().unwrap().port();
    let mut members = group.members().to_vec();
    members[3].addr = format!("127.0.0.253:{port}");
    let group = Arc::new(Group::new("gone", members).unwrap());
    let groups = vec![group.clone(); 2];
    let started = Instant::now();
    let (root, nodes) = run_all(&group, groups, listeners).await;
    // The root, or node 2 (node 3's parent, which dials it too), finds node 3 unreachable first.
    let e = root.unwrap_err().to_string();
    assert!(
        e.contains("node 3 at 127.0.0.253:") && e.contains("is unreachable"),
        "{e}"
    );
    // Gave up after about the connect timeout, not later.
    assert!(started.elapsed() < SHORT * 4, "{:?}", started.elapsed());
    for n in &nodes {
        let e = n.as_ref().unwrap_err();
        assert!(e.to_string().contains("node 3"), "{e}");
    }
}

/// What the fake relay sends its child once the run starts.
#[derive(Copy, Clone, Debug)]
enum Bad {
    /// Bytes that are no frame at all.
    Garbage,
    /// Half a data frame, then the connection closes.
    Truncated,
}

async fn read_control(stream: &mut TcpStream, reader: &mut FrameReader) -> Control {
    loop {
        if let Some(f) = reader.next_frame().unwrap() {
            match f {
                WireFrame::Control(c) => return c,
                WireFrame::Proto(_) => continue,
            }
        }
        let n = stream.read_buf(reader.buffer_mut()).await.unwrap();
        assert!(n > 0, "the peer closed early");
    }
}

/// Node 1 of a chain 0 -> 1 -> 2, played by hand: it passes every handshake and readiness check
/// like a real node, then sends its child `bad` instead of data.
async fn fake_relay(listener: TcpListener, group: Arc<Group>, bad: Bad) {
    let (mut root, _) = listener.accept().await.unwrap();
    let mut rr = FrameReader::new(1 << 20);
    rr.set_control_limit(1 << 24);
    let Control::Hello(h) = read_control(&mut root, &mut rr).await else {
        panic!("expected a hello")
    };
    let welcome = Control::Welcome(Welcome {
        group: h.group.clone(),
        protocol_version: h.protocol_version,
        wire_version: h.wire_version,
        node: NodeId(1),
        group_digest: h.group_digest.clone(),
    });
    root.write_all(&welcome.encode()).await.unwrap();
    let Control::Job(job) = read_control(&mut root, &mut rr).await else {
        panic!("expected a job")
    };
    let mut child = TcpStream::connect(&group.member(NodeId(2)).unwrap().addr)
        .await
        .unwrap();
    let hello = Control::Hello(Hello {
        group: group.name().into(),
        protocol_version: windrose_net::PROTOCOL_VERSION,
        wire_version: windrose_proto::frame::VERSION,
        from: NodeId(1),
        to: NodeId(2),
        role: Role::Peer,
        group_digest: group.digest(),
    });
    child.write_all(&hello.encode()).await.unwrap();
    let mut cr = FrameReader::new(1 << 20);
    assert!(matches!(
        read_control(&mut child, &mut cr).await,
        Control::Welcome(_)
    ));
    root.write_all(&Control::Ready.encode()).await.unwrap();
    assert_eq!(read_control(&mut root, &mut rr).await, Control::Go);
    // Node 2 gets its Go at about the same time; give it a moment so that the bad bytes
    // usually arrive once it runs (before, they end its setup instead: both are checked).
    tokio::time::sleep(Duration::from_millis(300)).await;
    match bad {
        Bad::Garbage => child.write_all(&[0x42; 64]).await.unwrap(),
        Bad::Truncated => {
            let frame = windrose_proto::frame::encode(&windrose_proto::Message::Broadcast(
                BroadcastMsg::Data(windrose_proto::tree_broadcast::DataSegment {
                    transfer: job.transfer,
                    offset: 0,
                    total_len: job.total_len,
                    payload: bytes::Bytes::from(vec![7u8; 1000]),
                }),
            ))
            .unwrap();
            child.write_all(&frame[..500]).await.unwrap();
            // Close the sending half, and read until node 2 closes too (an orderly close: a
            // reset would lose the half frame).
            child.shutdown().await.unwrap();
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(BOUND, child.read_to_end(&mut rest)).await;
        }
    }
    // Keep the root's connection until the root ends the run.
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(BOUND, root.read_to_end(&mut sink)).await;
}

async fn bad_parent(bad: Bad) {
    let (group, mut listeners) = loopback("hostile", 3, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("node-2.bin");
    let l2 = listeners.pop().unwrap();
    let l1 = listeners.pop().unwrap();
    let fake = tokio::spawn(fake_relay(l1, group.clone(), bad));
    let mut c2 = config(&group, 2, SHORT);
    c2.output = OutputSpec::File(out.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    c2.events = Some(tx);
    let node2 = tokio::spawn(run_node(l2, c2));
    let payload = random_payload(1 << 20, 3);
    let job = RootJob::broadcast(chain(&group), 1 << 16, payload.clone());
    let started = Instant::now();
    let outcome = tokio::time::timeout(BOUND, run_root(config(&group, 0, SHORT), job))
        .await
        .expect("the root does not hang")
        .unwrap();
    let r2 = tokio::time::timeout(BOUND, node2)
        .await
        .expect("node 2 does not hang")
        .unwrap();
    assert!(started.elapsed() < BOUND);
    let want = match bad {
        // Byte 129: the stream began with node 1's 129-byte hello.
        Bad::Garbage => "node 1 sent an invalid stream: not a windrose frame at byte 129: first byte 0x42",
        Bad::Truncated => "node 1 sent an invalid stream: the connection closed in the middle of a frame (500 bytes of it received, at byte 129)",
    };
    let r1 = outcome.nodes.iter().find(|n| n.node == NodeId(1)).unwrap();
    assert_eq!(r1.status, RunStatus::Failed);
    assert!(!outcome.all_verified());
    let root_view = outcome.nodes.iter().find(|n| n.node == NodeId(2)).unwrap();
    match r2 {
        Ok(o2) => {
            // Running: node 2 dropped node 1, saying why, re-attached to the root and got
            // every byte from it.
            let mut reasons = Vec::new();
            while let Ok(ev) = rx.try_recv() {
                if let windrose_net::NetEvent::PeerFailed { peer, reason } = ev {
                    reasons.push((peer, reason));
                }
            }
            assert!(
                reasons
                    .iter()
                    .any(|(p, r)| *p == NodeId(1) && r.contains(want)),
                "{reasons:?}"
            );
            assert_eq!(o2.report.bytes_received, payload.len() as u64);
            assert_eq!(std::fs::read(&out).unwrap(), payload[..]);
            assert_eq!(root_view.status, RunStatus::Finished);
            assert!(root_view.verified, "{root_view:?}");
        }
        Err(e) => {
            // Still setting up: the run fails at node 2 with the reason, and nothing is left
            // under its final name.
            let e = e.to_string();
            assert!(e.contains(want), "{e}");
            assert_eq!(root_view.status, RunStatus::Failed);
            assert!(
                root_view.error.as_deref().unwrap().contains(want),
                "{:?}",
                root_view.error
            );
            assert!(!out.exists());
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }
    fake.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_the_parent_is_dropped_or_ends_the_setup_cleanly() {
    bad_parent(Bad::Garbage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_from_the_parent_is_dropped_or_ends_the_setup_cleanly() {
    bad_parent(Bad::Truncated).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_mismatch_and_strangers_are_told_why() {
    let (group, mut listeners) = loopback("versions", 2, 1).await;
    let l1 = listeners.pop().unwrap();
    let node = tokio::spawn(run_node(l1, config(&group, 1, Duration::from_millis(1500))));
    let addr = group.member(NodeId(1)).unwrap().addr.clone();
    let ask = |hello: Hello| {
        let addr = addr.clone();
        async move {
            let mut s = TcpStream::connect(&addr).await.unwrap();
            s.write_all(&Control::Hello(hello).encode()).await.unwrap();
            let mut r = FrameReader::new(1 << 20);
            read_control(&mut s, &mut r).await
        }
    };
    let good = Hello {
        group: "versions".into(),
        protocol_version: windrose_net::PROTOCOL_VERSION,
        wire_version: windrose_proto::frame::VERSION,
        from: NodeId(0),
        to: NodeId(1),
        role: Role::Root,
        group_digest: group.digest(),
    };
    let cases = [
        (
            Hello {
                protocol_version: 99,
                ..good.clone()
            },
            "protocol version mismatch: the dialer (node 0) speaks version 99, this node version 1",
        ),
        (
            Hello {
                wire_version: 9,
                ..good.clone()
            },
            "wire format mismatch",
        ),
        (
            Hello {
                from: NodeId(7),
                ..good.clone()
            },
            "claims to be node 7, which is not another member",
        ),
    ];
    for (hello, want) in cases {
        match ask(hello).await {
            Control::Reject(reason) => assert!(reason.contains(want), "{reason}"),
            other => panic!("expected a reject, got {other:?}"),
        }
    }
    // Garbage instead of a hello: the node drops the connection and keeps waiting.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(SHORT, s.read_to_end(&mut rest)).await;
    // No root ever came: the node gives up after its join timeout, listing what it refused.
    let e = tokio::time::timeout(BOUND, node)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("timed out") && e.contains("refused 4 connection(s)"),
        "{e}"
    );
    assert!(
        e.contains("not a windrose frame at byte 0: first byte 0x47"),
        "{e}"
    );
    let _ = Member {
        id: NodeId(0),
        addr: String::new(),
        cluster: windrose_model::ClusterId(0),
    };
}
