//! Authenticated group membership: the Noise handshake keyed with the group key, against the
//! same key, a wrong key, no key and a replayed handshake; key files and the environment.

mod common;

use bytes::Bytes;
use common::{loopback, oneshot::config};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use windrose_model::NodeId;
use windrose_net::auth::{
    load_group_key, load_group_key_with, GroupKey, KeySource, NoiseHandshake, AUTH_FAILED, KEY_ENV,
    KEY_FILE_ENV,
};
use windrose_net::bootstrap::{Handshake, Transport};
use windrose_net::multicast::{MobConfig, MulticastProtocol, MulticastSpec};
use windrose_net::trees::group_tree;
use windrose_net::wire::{FrameReader, Role};
use windrose_net::{run_node, run_root, NetError, NetEvent, NodeConfig, OutputSpec, RootJob};
use windrose_trees::TreeAlgorithm;

const T: Duration = Duration::from_secs(1);

fn key(b: u8) -> GroupKey {
    GroupKey::from_bytes([b; 32])
}

fn keyed(mut c: NodeConfig, k: &GroupKey) -> NodeConfig {
    c.handshake = Arc::new(NoiseHandshake::new(k.clone()));
    c
}

/// Node 1's config with its events (to see what it refused).
fn node_with_events(c: NodeConfig) -> (NodeConfig, mpsc::UnboundedReceiver<NetEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut c = c;
    c.events = Some(tx);
    (c, rx)
}

fn rejections(rx: &mut mpsc::UnboundedReceiver<NetEvent>) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        if let NetEvent::Rejected { reason } = ev {
            v.push(reason);
        }
    }
    v
}

/// A broadcast from node 0 to node 1 with the given configs; the root's and the node's results.
async fn two_node_run(
    root: NodeConfig,
    node: NodeConfig,
    listener: TcpListener,
) -> (
    Result<windrose_net::RunOutcome, NetError>,
    Result<windrose_net::NodeOutcome, NetError>,
) {
    let group = root.group.clone();
    let n = tokio::spawn(run_node(listener, node));
    let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(0)).unwrap();
    let data = Bytes::from_static(b"only members may have this");
    let r = run_root(root, RootJob::broadcast(tree, 8, data)).await;
    let n = tokio::time::timeout(Duration::from_secs(8), n)
        .await
        .expect("the node ends in bounded time")
        .unwrap();
    (r, n)
}

#[tokio::test]
async fn same_key_broadcast_completes() {
    let (group, mut ls) = loopback("auth-same", 3, 1).await;
    let k = key(1);
    let mut nodes = Vec::new();
    for (i, l) in ls.drain(..).enumerate().skip(1) {
        let mut c = keyed(config(&group, i as u32, Duration::from_secs(5)), &k);
        c.output = OutputSpec::Memory;
        nodes.push(tokio::spawn(run_node(l, c)));
    }
    let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(0)).unwrap();
    let data = Bytes::from(vec![7u8; 100_000]);
    let root = keyed(config(&group, 0, Duration::from_secs(5)), &k);
    let outcome = run_root(root, RootJob::broadcast(tree, 4096, data.clone()))
        .await
        .unwrap();
    assert!(outcome.all_verified(), "{:?}", outcome.failures());
    for n in nodes {
        assert_eq!(n.await.unwrap().unwrap().delivered.to_vec(), data.to_vec());
    }
}

#[tokio::test]
async fn same_key_multicast_with_a_maced_manifest_completes() {
    let (group, mut ls) = loopback("auth-mob", 4, 2).await;
    let k = key(9);
    let mut nodes = Vec::new();
    for (i, l) in ls.drain(..).enumerate().skip(1) {
        let mut c = keyed(config(&group, i as u32, Duration::from_secs(5)), &k);
        c.output = OutputSpec::Memory;
        nodes.push(tokio::spawn(run_node(l, c)));
    }
    let data = windrose_net::random_payload(300_000, 3);
    let root = keyed(config(&group, 0, Duration::from_secs(5)), &k);
    let spec = MulticastSpec::Mob(MobConfig::default());
    let job = RootJob::multicast(MulticastProtocol::Mob, spec, 16 << 10, data.clone());
    let outcome = run_root(root, job).await.unwrap();
    assert!(outcome.all_verified(), "{:?}", outcome.failures());
    for n in nodes {
        assert_eq!(n.await.unwrap().unwrap().delivered.to_vec(), data.to_vec());
    }
}

#[tokio::test]
async fn wrong_key_is_refused_on_both_sides() {
    let (group, mut ls) = loopback("auth-wrong", 2, 1).await;
    let l = ls.remove(1);
    let (node, mut events) = node_with_events(keyed(config(&group, 1, T), &key(2)));
    let root = keyed(config(&group, 0, T), &key(3));
    let (r, n) = two_node_run(root, node, l).await;
    let e = r.unwrap_err().to_string();
    assert!(e.contains(AUTH_FAILED), "root: {e}");
    let refused = rejections(&mut events);
    assert!(
        refused.iter().any(|r| r.contains("authentication failed")
            && r.contains("claiming to be node 0 from 127.0.0.1:")),
        "node: {refused:?}"
    );
    let ne = n.unwrap_err().to_string();
    assert!(ne.contains("authentication failed"), "node: {ne}");
}

#[tokio::test]
async fn plain_dialer_is_refused_by_a_keyed_node() {
    let (group, mut ls) = loopback("auth-plain-dialer", 2, 1).await;
    let l = ls.remove(1);
    let (node, mut events) = node_with_events(keyed(config(&group, 1, T), &key(4)));
    let root = config(&group, 0, T);
    let (r, n) = two_node_run(root, node, l).await;
    let e = r.unwrap_err().to_string();
    assert!(e.contains("requires the group key"), "root: {e}");
    let refused = rejections(&mut events);
    assert!(
        refused
            .iter()
            .any(|r| r.contains("authentication failed") && r.contains("without the group key")),
        "node: {refused:?}"
    );
    assert!(n.is_err());
}

#[tokio::test]
async fn keyed_dialer_is_refused_by_a_plain_node() {
    let (group, mut ls) = loopback("auth-plain-acceptor", 2, 1).await;
    let l = ls.remove(1);
    let (node, mut events) = node_with_events(config(&group, 1, T));
    let root = keyed(config(&group, 0, T), &key(5));
    let (r, n) = two_node_run(root, node, l).await;
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains(AUTH_FAILED) && e.contains("node 1 has no group key"),
        "root: {e}"
    );
    let refused = rejections(&mut events);
    assert!(
        refused
            .iter()
            .any(|r| r.contains("the dialer holds a group key but node 1 has none")),
        "node: {refused:?}"
    );
    assert!(n.is_err());
}

/// Runs one keyed handshake through a proxy that records what the dialer sent, then replays
/// those bytes to the acceptor from a fresh connection: refused.
#[tokio::test]
async fn replayed_handshake_is_refused() {
    let (group, mut ls) = loopback("auth-replay", 2, 1).await;
    let acceptor = ls.remove(1);
    let acceptor_addr = acceptor.local_addr().unwrap();
    let hs = Arc::new(NoiseHandshake::new(key(6)));

    // The acceptor: two handshakes, their results sent back.
    let (tx, mut results) = mpsc::unbounded_channel();
    {
        let (hs, group) = (hs.clone(), group.clone());
        tokio::spawn(async move {
            for _ in 0..2 {
                let (stream, remote) = acceptor.accept().await.unwrap();
                let mut io = Transport {
                    stream,
                    reader: FrameReader::new(1 << 20),
                };
                let r = tokio::time::timeout(
                    Duration::from_secs(3),
                    hs.accept(&mut io, &group, NodeId(1), remote),
                )
                .await
                .unwrap_or_else(|_| panic!("the acceptor hangs"));
                tx.send(r).unwrap();
            }
        });
    }

    // The recording proxy.
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = proxy.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::<u8>::new()));
    {
        let recorded = recorded.clone();
        tokio::spawn(async move {
            let (client, _) = proxy.accept().await.unwrap();
            let server = TcpStream::connect(acceptor_addr).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
            });
            let mut buf = vec![0u8; 4096];
            loop {
                let n = cr.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                recorded.lock().unwrap().extend_from_slice(&buf[..n]);
                if sw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
    }

    // A genuine handshake through the proxy.
    let mut io = Transport {
        stream: TcpStream::connect(proxy_addr).await.unwrap(),
        reader: FrameReader::new(1 << 20),
    };
    let est = hs
        .dial(&mut io, &group, NodeId(0), NodeId(1), Role::Root)
        .await
        .unwrap();
    assert_eq!(est.peer, NodeId(1));
    let first = results.recv().await.unwrap().unwrap();
    assert_eq!(first.peer, NodeId(0));

    // The replay: every byte the dialer sent, from a new connection.
    let bytes = recorded.lock().unwrap().clone();
    assert!(!bytes.is_empty());
    let mut replay = TcpStream::connect(acceptor_addr).await.unwrap();
    replay.write_all(&bytes).await.unwrap();
    let e = results.recv().await.unwrap().unwrap_err().to_string();
    assert!(
        e.contains("authentication failed") && e.contains("replayed"),
        "acceptor: {e}"
    );
    drop(io);
}

#[cfg(unix)]
#[test]
fn key_files_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("group.key");
    let k = GroupKey::generate();
    k.write_new_file(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(GroupKey::load_file(&path).unwrap(), k);
    // An existing file is never overwritten.
    assert!(k.write_new_file(&path).is_err());
    // Readable by others: refused, like ssh.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = GroupKey::load_file(&path).unwrap_err().to_string();
    assert!(e.contains("too open") && e.contains("chmod 600"), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(GroupKey::load_file(&path).is_err());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(GroupKey::load_file(&path).unwrap(), k);
    // A missing file names itself.
    let missing = dir.path().join("missing.key");
    let e = GroupKey::load_file(&missing).unwrap_err().to_string();
    assert!(e.contains("missing.key"), "{e}");
}

#[test]
fn keys_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.key");
    let file_key = key(0x11);
    file_key.write_new_file(&path).unwrap();
    let hex_key = key(0x22);
    let hex = hex_key.to_hex();
    let path_s = path.display().to_string();

    let none = |_: &str| None::<String>;
    assert!(load_group_key_with(None, none).unwrap().is_none());
    // Hex in WINDROSE_GROUP_KEY.
    let env = |n: &str| (n == KEY_ENV).then(|| hex.clone());
    let (k, src) = load_group_key_with(None, env).unwrap().unwrap();
    assert_eq!((k, src), (hex_key.clone(), KeySource::Env));
    // WINDROSE_GROUP_KEY_FILE wins over WINDROSE_GROUP_KEY, --key-file over both.
    let both = |n: &str| match n {
        KEY_ENV => Some(hex.clone()),
        KEY_FILE_ENV => Some(path_s.clone()),
        _ => None,
    };
    let (k, src) = load_group_key_with(None, both).unwrap().unwrap();
    assert_eq!(
        (k, src),
        (file_key.clone(), KeySource::EnvFile(path.clone()))
    );
    let (k, src) = load_group_key_with(Some(&path), env).unwrap().unwrap();
    assert_eq!((k, src), (file_key.clone(), KeySource::File(path.clone())));
    // A malformed key names the variable.
    let bad = |n: &str| (n == KEY_ENV).then(|| "xyz".to_string());
    let e = load_group_key_with(None, bad).unwrap_err().to_string();
    assert!(e.contains(KEY_ENV), "{e}");

    // And the real environment (the only test here that reads it).
    std::env::set_var(KEY_ENV, hex_key.to_hex());
    std::env::remove_var(KEY_FILE_ENV);
    let (k, _) = load_group_key(None).unwrap().unwrap();
    std::env::remove_var(KEY_ENV);
    assert_eq!(k, hex_key);
}

/// A job whose manifest does not carry the MAC of the group's manifest key (here: hashes
/// changed after the MAC was made) is refused by the node before it builds its machine, even
/// over an authenticated connection.
#[tokio::test]
async fn tampered_manifest_is_refused() {
    use windrose_net::wire::{CollectiveSpec, Control, Job, ManifestSpec, MulticastParams};
    use windrose_proto::frame::TransferId;
    use windrose_proto::pieces::Manifest;

    let (group, mut ls) = loopback("auth-manifest", 2, 1).await;
    let k = key(8);
    let node = tokio::spawn(run_node(ls.remove(1), keyed(config(&group, 1, T), &k)));

    let data = vec![1u8; 10_000];
    let mut manifest = ManifestSpec::of(&Manifest::build(&data, 4096).unwrap());
    manifest.mac = Some(windrose_net::auth::manifest_mac(
        &k.manifest_key(),
        data.len() as u64,
        manifest.piece_len,
        &manifest.hashes,
    ));
    manifest.hashes.replace_range(0..1, "f");
    let job = Job {
        session: 1,
        root: NodeId(0),
        transfer: TransferId(1),
        total_len: data.len() as u64,
        collective: CollectiveSpec::Multicast {
            protocol: MulticastProtocol::Mob,
            params: MulticastParams::Mob(MobConfig::default()),
            manifest,
        },
        idle_timeout_ms: 1000,
        probe_period_ms: 0,
        seed: 1,
        rejoin: None,
    };
    let addr = group.member(NodeId(1)).unwrap().addr.clone();
    let mut io = Transport {
        stream: TcpStream::connect(addr).await.unwrap(),
        reader: FrameReader::new(1 << 20),
    };
    NoiseHandshake::new(k)
        .dial(&mut io, &group, NodeId(0), NodeId(1), Role::Root)
        .await
        .unwrap();
    io.stream
        .write_all(&Control::Job(Box::new(job)).encode())
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), node)
        .await
        .expect("the node ends in bounded time")
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("manifest's MAC does not match"), "node: {e}");
}
