//! Authenticated group membership: the Noise handshake keyed with the group key, against the
//! same key, a wrong key, no key and a replayed handshake; key files and the environment.

mod common;

use bytes::Bytes;
use common::{leave_all, loopback, run, run_on, start_group};
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
use windrose_net::host_driver::GroupConfig;
use windrose_net::multicast::{MobConfig, MulticastProtocol};
use windrose_net::wire::{FrameReader, Role};
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams};
use windrose_proto::pieces::Manifest;

fn key(b: u8) -> GroupKey {
    GroupKey::from_bytes([b; 32])
}

/// Keys `c`'s connections with `k` (None: plain).
fn keyed(c: &mut GroupConfig, k: Option<GroupKey>) {
    if let Some(k) = k {
        c.handshake = Arc::new(NoiseHandshake::new(k));
    }
}

fn mob(data: &Bytes, piece: u32) -> CollectiveSpec {
    CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Mob,
        params: MulticastParams::Mob(MobConfig::default()),
        manifest: ManifestSpec::of(&Manifest::build(data, piece).unwrap()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_broadcast_completes() {
    let (group, mut members) = start_group("auth-same", 3, 1, |c| keyed(c, Some(key(1)))).await;
    let data = Bytes::from(vec![7u8; 100_000]);
    let (t, finished, failed) =
        run(&mut members, 0, common::chain(&group, 4096), data.clone()).await;
    assert_eq!((finished, failed), (3, 0));
    for m in &members[1..] {
        assert!(m.got[&t] == data[..]);
    }
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_multicast_completes() {
    let (_, mut members) = start_group("auth-mob", 4, 2, |c| keyed(c, Some(key(9)))).await;
    let data = windrose_net::random_payload(300_000, 3);
    let (t, finished, failed) = run(&mut members, 0, mob(&data, 16 << 10), data.clone()).await;
    assert_eq!((finished, failed), (4, 0));
    for m in &members[1..] {
        assert!(m.got[&t] == data[..]);
    }
    leave_all(members).await;
}

/// Members 0 and 1 with keys `k0` and `k1` (None: plain): why each side refused
/// ([`common::refused_pair`]).
async fn refused_pair(name: &str, k0: Option<GroupKey>, k1: Option<GroupKey>) -> (String, String) {
    common::refused_pair(name, |c| {
        let k = if c.membership.me == NodeId(0) {
            &k0
        } else {
            &k1
        };
        keyed(c, k.clone());
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_is_refused_on_both_sides() {
    let (dialer, acceptor) = refused_pair("auth-wrong", Some(key(3)), Some(key(2))).await;
    assert!(dialer.contains(AUTH_FAILED), "dialer: {dialer}");
    assert!(
        acceptor.contains("authentication failed")
            && acceptor.contains("claiming to be node 0 from 127.0.0.1:"),
        "acceptor: {acceptor}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_dialer_is_refused_by_a_keyed_member() {
    let (dialer, acceptor) = refused_pair("auth-plain-dialer", None, Some(key(4))).await;
    assert!(
        dialer.contains("requires the group key"),
        "dialer: {dialer}"
    );
    assert!(
        acceptor.contains("authentication failed") && acceptor.contains("without the group key"),
        "acceptor: {acceptor}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_dialer_is_refused_by_a_plain_member() {
    let (dialer, acceptor) = refused_pair("auth-plain-acceptor", Some(key(5)), None).await;
    assert!(
        dialer.contains(AUTH_FAILED) && dialer.contains("node 1 has no group key"),
        "dialer: {dialer}"
    );
    assert!(
        acceptor.contains("the dialer holds a group key but node 1 has none"),
        "acceptor: {acceptor}"
    );
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
        .dial(&mut io, &group, NodeId(0), NodeId(1), Role::Peer)
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

/// A multicast whose manifest does not carry the MAC of the group's manifest key (here: hashes
/// changed after the MAC was made) is refused by every member before it builds its machine,
/// even over authenticated connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_manifest_is_refused() {
    let k = key(8);
    let (_, mut members) = start_group("auth-manifest", 2, 1, |c| keyed(c, Some(k.clone()))).await;
    let data = Bytes::from(vec![1u8; 10_000]);
    let mut manifest = ManifestSpec::of(&Manifest::build(&data, 4096).unwrap());
    manifest.mac = Some(windrose_net::auth::manifest_mac(
        &k.manifest_key(),
        data.len() as u64,
        manifest.piece_len,
        &manifest.hashes,
    ));
    manifest.hashes.replace_range(0..1, "f");
    let spec = CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Mob,
        params: MulticastParams::Mob(MobConfig::default()),
        manifest,
    };
    // The refusal calls the collective off before it starts: nobody's part ends, the
    // initiator's completion is what to wait for.
    let (_, finished, _) = run_on(&mut members, &[], 0, spec, data).await;
    assert_eq!(finished, 0);
    let why: Vec<&str> = members[0].failed.iter().map(|f| f.why.as_str()).collect();
    assert!(
        why.iter()
            .any(|w| w.contains("manifest's MAC does not match")),
        "{why:?}"
    );
    leave_all(members).await;
}
