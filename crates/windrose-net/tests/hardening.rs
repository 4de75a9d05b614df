//! Issue 21's defects of the real runtime, in process: strangers at a waiting node, group files
//! that differ between members, sources that change during a run.

mod common;

use common::{config, loopback};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use windrose_model::NodeId;
use windrose_net::trees::{group_costs, TreeKind};
use windrose_net::wire::{Control, FrameReader, Hello, Role, WireFrame};
use windrose_net::{random_payload, run_node, run_root, NetEvent, OutputSpec, RootJob};

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

    let tree = TreeKind::Chain
        .build(&group_costs(&group), &group.clusters(), NodeId(0))
        .unwrap();
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
        let tree = TreeKind::Chain
            .build(&group_costs(&group), &group.clusters(), NodeId(0))
            .unwrap();
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
