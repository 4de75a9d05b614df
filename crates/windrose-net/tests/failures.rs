//! Failures at start and during a run of a long-lived group: each gives a clear reason on the
//! members concerned, nobody hangs, and the collectives that can go on do.

mod common;

use bytes::Bytes;
use common::{leave_all, member_config, pump, run, run_on, spawn_member, Member};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use windrose_model::NodeId;
use windrose_net::group::Group;
use windrose_net::host_driver::GroupConfig;
use windrose_net::random_payload;
use windrose_net::wire::{Control, FrameReader, Hello, Role, Welcome, WireFrame};
use windrose_net::Timeouts;
use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
use windrose_proto::TransferId;

const SHORT: Duration = Duration::from_secs(2);
/// Far past every deadline; only so a regression fails instead of hanging.
const BOUND: Duration = Duration::from_secs(15);

/// Short connect and handshake deadlines, so refusals show at once.
fn short(c: &mut GroupConfig) {
    c.timeouts.connect = SHORT;
    c.timeouts.handshake = SHORT;
}

/// Members `0..listeners.len()` on `listeners`, member `i` with its own copy of the group
/// `groups[i]`.
fn spawn_with_groups(groups: &[Arc<Group>], listeners: Vec<TcpListener>) -> Vec<Member> {
    listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| spawn_member(l, member_config(&groups[i], i, &short)))
        .collect()
}

/// Why `m` lost `peer`, joined (empty: it did not).
fn lost(m: &Member, peer: u32) -> String {
    m.lost
        .iter()
        .filter(|(p, _)| p.0 == peer)
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_group_name_is_rejected_on_both_sides_and_the_rest_runs() {
    let (group, listeners) = common::loopback("alpha", 4, 1).await;
    let renamed = Arc::new(Group::new("beta", group.members().to_vec()).unwrap());
    let groups = [group.clone(), group.clone(), renamed, group.clone()];
    let mut members = spawn_with_groups(&groups, listeners);
    // Members 0 and 1 dial member 2 and are refused; member 2 dials 3 and is refused.
    pump(&mut members, |ms| {
        !lost(&ms[0], 2).is_empty() && !lost(&ms[1], 2).is_empty() && ms[2].refused.len() >= 2
    })
    .await;
    for i in [0, 1] {
        let e = lost(&members[i], 2);
        assert!(e.contains("group name mismatch"), "member {i}: {e}");
    }
    for r in &members[2].refused {
        assert!(r.contains("group name mismatch"), "{r}");
        assert!(r.contains("\"alpha\"") && r.contains("\"beta\""), "{r}");
    }
    // A broadcast from member 0 leaves member 2 out (it was never in) and reaches the others,
    // member 3 too although the chain ran through member 2.
    let data = random_payload(1 << 20, 3);
    let (t, finished, failed) = run_on(
        &mut members,
        &[0, 1, 3],
        0,
        common::chain(&group, 1 << 16),
        data.clone(),
    )
    .await;
    assert_eq!((finished, failed), (3, 0));
    assert!(members[1].got[&t] == data[..] && members[3].got[&t] == data[..]);
    assert_eq!(members[2].ended(t), None);
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_id_mismatch_is_rejected_on_both_sides() {
    let (group, listeners) = common::loopback("ids", 3, 1).await;
    // Member 0 believes member 1 listens where member 2 does, and the other way round.
    let mut swapped = group.members().to_vec();
    let (a1, a2) = (swapped[1].addr.clone(), swapped[2].addr.clone());
    swapped[1].addr = a2;
    swapped[2].addr = a1;
    let swapped = Arc::new(Group::new("ids", swapped).unwrap());
    let mut members = spawn_with_groups(&[swapped, group.clone(), group.clone()], listeners);
    pump(&mut members, |ms| {
        !lost(&ms[0], 1).is_empty()
            && !lost(&ms[0], 2).is_empty()
            && !ms[1].refused.is_empty()
            && !ms[2].refused.is_empty()
    })
    .await;
    for p in [1, 2] {
        let e = lost(&members[0], p);
        assert!(e.contains("node id mismatch"), "member 0 about {p}: {e}");
        let r = members[p as usize].refused.join("; ");
        assert!(r.contains("node id mismatch"), "member {p}: {r}");
    }
    // Members 1 and 2 agree with each other.
    assert!(members[1].connected >= 1 && members[2].connected >= 1);
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_member_is_named_and_left_out() {
    let (group, mut listeners) = common::loopback("gone", 4, 1).await;
    // Member 3 never runs: nothing listens on its address (one no other test binds, so its
    // port cannot be taken meanwhile).
    let port = listeners.pop().unwrap().local_addr().unwrap().port();
    let mut all = group.members().to_vec();
    all[3].addr = format!("127.0.0.253:{port}");
    let group = Arc::new(Group::new("gone", all).unwrap());
    let mut members = spawn_with_groups(&[group.clone(), group.clone(), group.clone()], listeners);
    pump(&mut members, |ms| ms.iter().all(|m| !lost(m, 3).is_empty())).await;
    for (i, m) in members.iter().enumerate() {
        let e = lost(m, 3);
        assert!(
            e.contains("node 3 at 127.0.0.253:") && e.contains("is unreachable"),
            "member {i}: {e}"
        );
    }
    // The chain's leaf was never there: the collective runs among the others (a member down
    // when a collective starts is left out, not counted failed), and they get every byte.
    let data = random_payload(1 << 20, 3);
    let (t, finished, failed) = run(
        &mut members,
        0,
        common::chain(&group, 1 << 16),
        data.clone(),
    )
    .await;
    assert_eq!((finished, failed), (3, 0));
    for m in &members[1..] {
        assert!(m.got[&t] == data[..]);
    }
    leave_all(members).await;
}

/// What the fake member sends member 2 once connected.
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

/// Member 1 of a group of three, played by hand: it passes the handshakes with members 0
/// (which dials it) and 2 (which it dials) like a real member, then sends member 2 `bad`
/// instead of frames, and keeps member 0's connection open without a word.
async fn fake_member(listener: TcpListener, group: Arc<Group>, bad: Bad) {
    let (mut zero, _) = listener.accept().await.unwrap();
    let mut zr = FrameReader::new(1 << 20);
    let Control::Hello(h) = read_control(&mut zero, &mut zr).await else {
        panic!("expected a hello")
    };
    let welcome = Control::Welcome(Welcome {
        group: h.group.clone(),
        protocol_version: h.protocol_version,
        wire_version: h.wire_version,
        node: NodeId(1),
        group_digest: h.group_digest.clone(),
    });
    zero.write_all(&welcome.encode()).await.unwrap();
    let mut two = TcpStream::connect(&group.member(NodeId(2)).unwrap().addr)
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
    two.write_all(&hello.encode()).await.unwrap();
    let mut tr = FrameReader::new(1 << 20);
    assert!(matches!(
        read_control(&mut two, &mut tr).await,
        Control::Welcome(_)
    ));
    match bad {
        Bad::Garbage => two.write_all(&[0x42; 64]).await.unwrap(),
        Bad::Truncated => {
            let frame = windrose_proto::frame::encode(&windrose_proto::Message::Broadcast(
                BroadcastMsg::Data(DataSegment {
                    transfer: TransferId(1),
                    offset: 0,
                    total_len: 1000,
                    payload: Bytes::from(vec![7u8; 1000]),
                }),
            ))
            .unwrap();
            two.write_all(&frame[..500]).await.unwrap();
            // Close the sending half, and read until member 2 closes too (an orderly close:
            // a reset would lose the half frame).
            two.shutdown().await.unwrap();
        }
    }
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(BOUND, two.read_to_end(&mut rest)).await;
    // Member 0's connection stays until member 0 gives the fake up.
    let _ = tokio::time::timeout(BOUND, zero.read_to_end(&mut rest)).await;
}

/// Member 2 drops the fake member 1 with the reason; a broadcast from member 0 over a chain
/// through member 1 counts the silent fake out, and member 2 still gets every byte.
async fn bad_member(bad: Bad) {
    let (group, mut listeners) = common::loopback("hostile", 3, 1).await;
    let l2 = listeners.pop().unwrap();
    let l1 = listeners.pop().unwrap();
    let fake = tokio::spawn(fake_member(l1, group.clone(), bad));
    // No probe lanes (the fake takes one connection from member 0); heartbeats find it silent.
    let tune = |c: &mut GroupConfig| {
        c.probe_period = None;
        c.timeouts = Timeouts {
            silent: SHORT,
            ..Timeouts::default()
        };
    };
    let mut members = vec![
        spawn_member(listeners.pop().unwrap(), member_config(&group, 0, &tune)),
        spawn_member(l2, member_config(&group, 2, &tune)),
    ];
    let want = match bad {
        Bad::Garbage => "node 1 sent an invalid stream: not a windrose frame at byte",
        Bad::Truncated => {
            "node 1 sent an invalid stream: the connection closed in the middle of a frame (500 bytes of it received"
        }
    };
    pump(&mut members, |ms| !lost(&ms[1], 1).is_empty()).await;
    let e = lost(&members[1], 1);
    assert!(e.contains(want), "{e}");
    if matches!(bad, Bad::Garbage) {
        assert!(e.contains("first byte 0x42"), "{e}");
    }
    let data = random_payload(1 << 20, 3);
    let (t, finished, failed) = run_on(
        &mut members,
        &[0, 1],
        0,
        common::chain(&group, 1 << 16),
        data.clone(),
    )
    .await;
    assert_eq!((finished, failed), (2, 1));
    assert!(members[1].got[&t] == data[..]);
    leave_all(members).await;
    fake.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_a_member_drops_it_and_the_others_go_on() {
    bad_member(Bad::Garbage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_frame_from_a_member_drops_it_and_the_others_go_on() {
    bad_member(Bad::Truncated).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_mismatch_and_strangers_are_told_why() {
    let (group, mut listeners) = common::loopback("versions", 2, 1).await;
    let l1 = listeners.pop().unwrap();
    let mut members = vec![spawn_member(l1, member_config(&group, 1, &short))];
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
        role: Role::Peer,
        group_digest: group.digest(),
    };
    let cases = [
        (
            // A build of version 1 (the one-shot session before the Host).
            Hello {
                protocol_version: 1,
                ..good.clone()
            },
            "protocol version mismatch: the dialer (node 0) speaks version 1, this node version 2",
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
    // Garbage instead of a hello: the member drops the connection and keeps serving.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(BOUND, s.read_to_end(&mut rest)).await;
    // The member said why for each of the four.
    pump(&mut members, |ms| ms[0].refused.len() >= 4).await;
    let refused = members[0].refused.join("\n");
    assert_eq!(members[0].refused.len(), 4, "{refused}");
    assert!(
        refused.contains("not a windrose frame at byte 0: first byte 0x47"),
        "{refused}"
    );
    leave_all(members).await;
}

/// Bytes per second each trickling proxy passes in each direction.
const TRICKLE: usize = 256 << 10;

/// Copies `rd` to `wr` at about [`TRICKLE`] bytes a second, in small chunks: a slow link that
/// carries a large frame a few KiB at a time.
async fn trickle(mut rd: tokio::net::tcp::OwnedReadHalf, mut wr: tokio::net::tcp::OwnedWriteHalf) {
    const CHUNK: usize = 4 << 10;
    let mut buf = vec![0u8; CHUNK];
    let pause = Duration::from_secs_f64(CHUNK as f64 / TRICKLE as f64);
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if wr.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
        tokio::time::sleep(pause).await;
    }
    let _ = wr.shutdown().await;
}

/// Serves a member's group address: every connection goes on to `target`, both ways trickled.
async fn trickle_proxy(listener: TcpListener, target: String) {
    while let Ok((dialer, _)) = listener.accept().await {
        let Ok(acceptor) = TcpStream::connect(&target).await else {
            return;
        };
        let (drd, dwr) = dialer.into_split();
        let (ard, awr) = acceptor.into_split();
        tokio::spawn(trickle(drd, awr));
        tokio::spawn(trickle(ard, dwr));
    }
}

/// Issue 19's false give-up: a frame that takes longer than `silent` to cross a slow link,
/// with the sender's heartbeats queued behind it, is not silence. Two members, every byte
/// between them through a proxy passing 256 KiB/s; member 0 broadcasts 1 MiB in one frame
/// (about 4 s on the way) to member 1, which gives a member up after 1 s of silence (heartbeats
/// every 200 ms, no probes). The bytes of the frame arriving keep member 0 alive: the broadcast
/// finishes at both and nobody is lost. (Before the driver told the host of bytes that are not
/// yet a frame, member 1 gave member 0 up mid-frame and its part ended unfinished.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_frame_on_a_slow_link_is_not_silence() {
    let mut real = Vec::new();
    let mut members = Vec::new();
    for i in 0..2 {
        let own = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.push(windrose_net::group::Member {
            id: NodeId::from(i),
            addr: front.local_addr().unwrap().to_string(),
            cluster: windrose_model::ClusterId(0),
        });
        tokio::spawn(trickle_proxy(front, own.local_addr().unwrap().to_string()));
        real.push(own);
    }
    let group = Arc::new(Group::new("slow-link", members).unwrap());
    let tune = |c: &mut GroupConfig| {
        c.heartbeat = Some(Duration::from_millis(200));
        c.timeouts.silent = Duration::from_secs(1);
        c.probe_period = None;
        c.gossip = None;
    };
    let mut members: Vec<Member> = real
        .into_iter()
        .enumerate()
        .map(|(i, l)| spawn_member(l, member_config(&group, i, &tune)))
        .collect();
    pump(&mut members, |ms| ms.iter().all(|m| m.connected >= 1)).await;
    let tree =
        windrose_net::trees::group_tree(windrose_trees::TreeAlgorithm::Chain, &group, NodeId(0))
            .unwrap();
    let spec = windrose_proto::collective::CollectiveSpec::Broadcast {
        tree: windrose_proto::collective::TreeSpec::of(&tree),
        segment_bytes: 1 << 20,
        max_frame_payload: 1 << 20,
    };
    let data = random_payload(1 << 20, 19);
    let (t, finished, failed) = run(&mut members, 0, spec, data.clone()).await;
    assert_eq!((finished, failed), (2, 0), "{:?}", members[1].reports);
    assert_eq!(members[1].ended(t), Some(true));
    assert_eq!(members[1].got[&t], data.to_vec());
    for (i, m) in members.iter().enumerate() {
        assert!(m.lost.is_empty(), "member {i} lost {:?}", m.lost);
        assert!(
            !m.reports
                .iter()
                .any(|r| matches!(r, windrose_proto::Report::PeerDown { .. })),
            "member {i} gave a member up: {:?}",
            m.reports
        );
    }
    leave_all(members).await;
}
