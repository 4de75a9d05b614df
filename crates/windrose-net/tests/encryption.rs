//! The encrypted data path (`NoiseHandshake::with_encryption`): runs complete with every byte
//! verified, members that disagree about encryption are refused with the reason on both sides,
//! and a byte flipped on the wire by someone on the path is caught at the next record on an
//! encrypted link (only by the final BLAKE3 check on a plain one).

mod common;

use common::{loopback, oneshot::config};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use windrose_model::{ClusterId, NodeId};
use windrose_net::auth::{GroupKey, NoiseHandshake};
use windrose_net::group::{Group, Member};
use windrose_net::multicast::{MobConfig, MulticastProtocol, MulticastSpec};
use windrose_net::trees::group_tree;
use windrose_net::{
    random_payload, run_node, run_root, NetError, NetEvent, NodeConfig, OutputSpec, RootJob,
    RunOutcome,
};
use windrose_trees::TreeAlgorithm;

const T: Duration = Duration::from_secs(5);
const BOUND: Duration = Duration::from_secs(30);

fn keyed(mut c: NodeConfig, encrypt: bool) -> NodeConfig {
    let key = GroupKey::from_bytes([4; 32]);
    c.handshake = Arc::new(NoiseHandshake::new(key).with_encryption(encrypt));
    c
}

fn chain_broadcast(group: &Group, data: bytes::Bytes) -> RootJob {
    let tree = group_tree(TreeAlgorithm::Chain, group, NodeId(0)).unwrap();
    RootJob::broadcast(tree, 64 << 10, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_broadcast_and_multicast_deliver_every_byte() {
    for multicast in [false, true] {
        let (group, mut ls) = loopback("enc", 4, 2).await;
        let mut nodes = Vec::new();
        for (i, l) in ls.drain(..).enumerate().skip(1) {
            let mut c = keyed(config(&group, i as u32, T), true);
            c.output = OutputSpec::Memory;
            nodes.push(tokio::spawn(run_node(l, c)));
        }
        let data = random_payload(3 << 20, 11);
        let job = if multicast {
            let spec = MulticastSpec::Mob(MobConfig::default());
            RootJob::multicast(MulticastProtocol::Mob, spec, 64 << 10, data.clone())
        } else {
            chain_broadcast(&group, data.clone())
        };
        let outcome = tokio::time::timeout(BOUND, run_root(keyed(config(&group, 0, T), true), job))
            .await
            .expect("the run ends")
            .unwrap();
        assert!(outcome.all_verified(), "{:?}", outcome.failures());
        for n in nodes {
            let got = n.await.unwrap().unwrap().delivered.to_vec();
            assert!(got == data.to_vec(), "multicast {multicast}: wrong bytes");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_disagree_about_encryption_are_refused_on_both_sides() {
    let (group, mut ls) = loopback("enc-mismatch", 2, 1).await;
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut node = keyed(config(&group, 1, Duration::from_secs(1)), false);
    node.events = Some(tx);
    let n = tokio::spawn(run_node(ls.remove(1), node));
    let root = keyed(config(&group, 0, Duration::from_secs(1)), true);
    let r = run_root(root, chain_broadcast(&group, random_payload(1000, 1))).await;
    // Node 1 finds the mismatch and says why; the root passes the reason on.
    let want = "data-path encryption differs: node 0 runs with --encrypt, node 1 without --encrypt";
    let e = r.unwrap_err().to_string();
    assert!(e.contains(&format!("it rejected us: {want}")), "root: {e}");
    let _ = tokio::time::timeout(BOUND, n).await.expect("the node ends");
    let mut refused = Vec::new();
    while let Ok(ev) = events.try_recv() {
        if let NetEvent::Rejected { reason } = ev {
            refused.push(reason);
        }
    }
    assert!(
        refused.iter().any(|r| r.contains(want)),
        "node: {refused:?}"
    );
}

/// Forwards one connection to `target`, flipping one bit of the byte at `flip_at` of the
/// dialer's stream: someone on the path.
async fn flipping_proxy(listener: TcpListener, target: String, flip_at: u64) {
    let (inbound, _) = listener.accept().await.unwrap();
    drop(listener);
    let outbound = TcpStream::connect(target).await.unwrap();
    let (mut ri, mut wi) = inbound.into_split();
    let (mut ro, mut wo) = outbound.into_split();
    let down = async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut seen = 0u64;
        loop {
            let n = match ri.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if (seen..seen + n as u64).contains(&flip_at) {
                buf[(flip_at - seen) as usize] ^= 0x20;
            }
            seen += n as u64;
            if wo.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = wo.shutdown().await;
    };
    let up = async move {
        let _ = tokio::io::copy(&mut ro, &mut wi).await;
        let _ = wi.shutdown().await;
    };
    tokio::join!(down, up);
}

/// A root and node 1 behind a proxy that flips one bit 1 MiB into the root's stream; the
/// root's outcome and the node's result.
async fn run_through_flipping_proxy(
    encrypt: bool,
) -> (RunOutcome, Result<windrose_net::NodeOutcome, NetError>) {
    let real = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let members = vec![
        Member {
            id: NodeId(0),
            addr: "127.0.0.1:1".into(),
            cluster: ClusterId(0),
        },
        Member {
            id: NodeId(1),
            addr: proxy.local_addr().unwrap().to_string(),
            cluster: ClusterId(0),
        },
    ];
    let group = Arc::new(Group::new(format!("flip-{encrypt}"), members).unwrap());
    tokio::spawn(flipping_proxy(
        proxy,
        real.local_addr().unwrap().to_string(),
        1 << 20,
    ));
    let node = tokio::spawn(run_node(real, keyed(config(&group, 1, T), encrypt)));
    let job = chain_broadcast(&group, random_payload(4 << 20, 2));
    let outcome = tokio::time::timeout(BOUND, run_root(keyed(config(&group, 0, T), encrypt), job))
        .await
        .expect("the run ends")
        .unwrap();
    let n = tokio::time::timeout(BOUND, node)
        .await
        .expect("the node ends")
        .unwrap();
    (outcome, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_on_the_path_is_caught_at_once_on_an_encrypted_link() {
    let (outcome, node) = run_through_flipping_proxy(true).await;
    assert!(!outcome.all_verified());
    let e = node.unwrap_err().to_string();
    assert!(
        e.contains("lost the root") && e.contains("does not decrypt with this session's keys"),
        "node: {e}"
    );
    // On a plain link the flip goes through, and only the root's final check sees it.
    let (outcome, node) = run_through_flipping_proxy(false).await;
    let n = &outcome.nodes[0];
    assert_eq!(n.status, windrose_net::wire::RunStatus::Finished, "{n:?}");
    assert!(!n.verified, "a flipped bit went unnoticed: {n:?}");
    assert!(node.is_ok());
}
