//! The encrypted data path (`NoiseHandshake::with_encryption`): runs complete with every byte
//! verified, members that disagree about encryption are refused with the reason on both sides,
//! and a byte flipped on the wire by someone on the path is caught at the next record on an
//! encrypted link (only by the final BLAKE3 check on a plain one).

mod common;

use common::{leave_all, pump, run, run_on, spawn_member, start_group};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use windrose_model::{ClusterId, NodeId};
use windrose_net::auth::{GroupKey, NoiseHandshake};
use windrose_net::group::{Group, Member};
use windrose_net::host_driver::GroupConfig;
use windrose_net::random_payload;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams};
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::Manifest;
use windrose_proto::Report;

fn keyed(c: &mut GroupConfig, encrypt: bool) {
    let key = GroupKey::from_bytes([4; 32]);
    c.handshake = Arc::new(NoiseHandshake::new(key).with_encryption(encrypt));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_broadcast_and_multicast_deliver_every_byte() {
    let (group, mut members) = start_group("enc", 4, 2, |c| keyed(c, true)).await;
    for multicast in [false, true] {
        let data = random_payload(3 << 20, 11);
        let spec = if multicast {
            CollectiveSpec::Multicast {
                protocol: MulticastProtocol::Mob,
                params: MulticastParams::Mob(MobConfig::default()),
                manifest: ManifestSpec::of(&Manifest::build(&data, 64 << 10).unwrap()),
            }
        } else {
            common::chain(&group, 64 << 10)
        };
        let (t, finished, failed) = run(&mut members, 0, spec, data.clone()).await;
        assert_eq!((finished, failed), (4, 0), "multicast {multicast}");
        for m in &members[1..] {
            assert!(m.got[&t] == data[..], "multicast {multicast}: wrong bytes");
        }
    }
    leave_all(members).await;
}

/// The receiver reads each record into buffers sized for it and, when its frame goes on past
/// it, for the rest of the frame: frames smaller than a record, of a record's size give or
/// take a byte, and larger than a record arrive whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_every_size_across_record_boundaries_arrive_whole() {
    let (group, mut members) = start_group("enc-frames", 3, 1, |c| keyed(c, true)).await;
    let record = windrose_net::secure::RECORD_PLAIN as u64;
    let data = random_payload((5 << 20) + 17, 12);
    for (frame, segment) in [
        (1000, 1000),
        (record - 30, record - 30),
        (record, record),
        (record + 1, 3 * record + 5),
        (1 << 20, 1 << 20),
        (3 << 20, 3 << 20),
    ] {
        let CollectiveSpec::Broadcast { tree, .. } = common::chain(&group, segment) else {
            unreachable!()
        };
        let spec = CollectiveSpec::Broadcast {
            tree,
            segment_bytes: segment,
            max_frame_payload: frame as u32,
        };
        let (t, finished, failed) = run(&mut members, 0, spec, data.clone()).await;
        assert_eq!((finished, failed), (3, 0), "frames of {frame} bytes");
        for m in &members[1..] {
            assert!(
                m.got[&t] == data[..],
                "frames of {frame} bytes: wrong bytes"
            );
        }
    }
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_disagree_about_encryption_are_refused_on_both_sides() {
    let (dialer, acceptor) = common::refused_pair("enc-mismatch", |c| {
        keyed(c, c.membership.me == NodeId(0));
    })
    .await;
    // Member 1 finds the mismatch and says why; member 0 hears the reason.
    let want = "data-path encryption differs: node 0 runs with --encrypt, node 1 without --encrypt";
    assert!(acceptor.contains(want), "acceptor: {acceptor}");
    assert!(
        dialer.contains(&format!("it rejected us: {want}")),
        "dialer: {dialer}"
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

/// Members 0 and 1, member 1 behind a proxy that flips one bit 1 MiB into member 0's stream,
/// run a 4 MiB chain broadcast from member 0 (digests of deliveries reported). Returns the
/// members after the collective completed at member 0.
async fn run_through_flipping_proxy(encrypt: bool) -> Vec<common::Member> {
    let real = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let own = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let members = vec![
        Member {
            id: NodeId(0),
            addr: own.local_addr().unwrap().to_string(),
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
    let tune = |c: &mut GroupConfig| {
        keyed(c, encrypt);
        common::quiet(c);
        c.digest_deliveries = true;
    };
    let mut members = vec![
        spawn_member(own, common::member_config(&group, 0, &tune)),
        spawn_member(real, common::member_config(&group, 1, &tune)),
    ];
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == 1)).await;
    let data = random_payload(4 << 20, 2);
    run_on(&mut members, &[], 0, common::chain(&group, 64 << 10), data).await;
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_on_the_path_is_caught_at_once_on_an_encrypted_link() {
    let members = run_through_flipping_proxy(true).await;
    assert_eq!(members[0].completions()[0].1, 1, "only member 0 finished");
    assert!(
        members[1]
            .lost
            .iter()
            .any(|(p, why)| *p == NodeId(0)
                && why.contains("does not decrypt with this session's keys")),
        "member 1: {:?}",
        members[1].lost
    );
    // On a plain link the flip goes through, and only the digest of what member 1 delivered
    // shows it.
    let data = random_payload(4 << 20, 2);
    let members = run_through_flipping_proxy(false).await;
    let digest = members[0].reports.iter().find_map(|r| match *r {
        Report::MemberDone {
            member: NodeId(1),
            finished: true,
            digest,
            ..
        } => digest,
        _ => None,
    });
    let digest = digest.expect("member 1 finished and reported a digest");
    assert_ne!(
        digest,
        *blake3::hash(&data).as_bytes(),
        "a flipped bit went unnoticed"
    );
    assert_ne!(
        members[1].digest(members[0].completions()[0].0).unwrap().0,
        blake3::hash(&data).to_hex().to_string()
    );
}
