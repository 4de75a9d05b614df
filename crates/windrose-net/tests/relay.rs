//! A keyed group's announcements relayed along the tree over TCP (issue 17,
//! `GroupConfig::relay_announce`): the relayed copies carry the initiator's announcement MAC
//! (the group key's, `auth::announcement_mac`) and verify; a copy altered on its way is
//! refused with a reason naming the relay. Every member's address in the group is a proxy on
//! the path to its real port, which knows each connection's two ends from the dialer's first
//! (clear) handshake bytes and can drop, alter or hold any protocol frame between two given
//! members, whichever of the two dialed. The data path after the handshake is in the clear
//! (no `--encrypt`), so an on-path attacker could do the same.

mod common;

use bytes::{Buf, Bytes, BytesMut};
use common::{chain, leave_all, member_config, pump, quiet, run, spawn_member, Member};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use windrose_model::{ClusterId, NodeId};
use windrose_net::auth::{GroupKey, NoiseHandshake, AUTH_MAGIC};
use windrose_net::group::{Group, Member as GroupMember, SessionSettings};
use windrose_net::host_driver::GroupConfig;
use windrose_net::wire::CONTROL_MAGIC;
use windrose_proto::frame::{self, Message, DEFAULT_MAX_BODY_LEN};
use windrose_proto::host::SessionMsg;

/// What the proxy does with a protocol frame.
enum Fate {
    Pass,
    Drop,
    /// Sent as this message instead.
    Alter(Message),
    /// Sent once the semaphore has a permit (the frames behind it wait too).
    Hold(Arc<Semaphore>),
}

/// Decides each protocol frame's fate from `(from, to, message)`.
type Rule = Arc<dyn Fn(NodeId, NodeId, &Message) -> Fate + Send + Sync>;

/// Announcements seen by the proxies: `(from, to, the message)`.
type Seen = Arc<Mutex<Vec<(NodeId, NodeId, SessionMsg)>>>;

/// The length of the whole frame at the start of `buf` (auth, control or protocol frame), once
/// its header is there.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let first = *buf.first()?;
    if first == AUTH_MAGIC {
        let h = buf.get(..4)?;
        return Some(4 + usize::from(u16::from_be_bytes([h[2], h[3]])));
    }
    if first & 0xF0 == CONTROL_MAGIC {
        let h = buf.get(..8)?;
        return Some(8 + u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize);
    }
    frame::peek_header(buf, DEFAULT_MAX_BODY_LEN)
        .expect("a windrose frame")
        .map(|h| h.frame_len())
}

/// Reads the next whole frame from `rd` (None at the end of the stream).
async fn next_frame(rd: &mut OwnedReadHalf, buf: &mut BytesMut) -> Option<Bytes> {
    loop {
        if let Some(len) = frame_len(buf) {
            if buf.len() >= len {
                return Some(buf.split_to(len).freeze());
            }
        }
        match rd.read_buf(buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Copies frames from `from`'s side to `to`'s, each as `rule` says.
async fn pipe(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    mut buf: BytesMut,
    (from, to): (NodeId, NodeId),
    rule: Rule,
    seen: Seen,
) {
    while let Some(f) = next_frame(&mut rd, &mut buf).await {
        let mut out = f.clone();
        if f[0] & 0xF0 == frame::MAGIC {
            let (message, _) = frame::decode_bytes(&f, DEFAULT_MAX_BODY_LEN)
                .unwrap()
                .unwrap();
            if let Message::Session(s) = &message {
                if let Ok(m @ SessionMsg::Announce { .. }) = SessionMsg::from_frame(s) {
                    seen.lock().unwrap().push((from, to, m));
                }
            }
            match rule(from, to, &message) {
                Fate::Pass => {}
                Fate::Drop => continue,
                Fate::Alter(m) => out = frame::encode(&m).unwrap(),
                Fate::Hold(gate) => drop(gate.acquire().await.unwrap()),
            }
        }
        if wr.write_all(&out).await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

/// Serves member `me`'s group address: every connection to it goes on to `target`, its real
/// port, through two [`pipe`]s.
async fn proxy(listener: TcpListener, me: NodeId, target: String, rule: Rule, seen: Seen) {
    while let Ok((dialer, _)) = listener.accept().await {
        let Ok(acceptor) = TcpStream::connect(&target).await else {
            return;
        };
        let (rule, seen) = (rule.clone(), seen.clone());
        tokio::spawn(async move {
            let (mut drd, dwr) = dialer.into_split();
            let (ard, mut awr) = acceptor.into_split();
            // The dialer's first frame opens with its id (the Noise prologue, in the clear).
            let mut buf = BytesMut::new();
            let Some(first) = next_frame(&mut drd, &mut buf).await else {
                return;
            };
            let them = NodeId((&first[4..8]).get_u32());
            if awr.write_all(&first).await.is_err() {
                return;
            }
            tokio::spawn(pipe(
                ard,
                dwr,
                BytesMut::new(),
                (me, them),
                rule.clone(),
                seen.clone(),
            ));
            pipe(drd, awr, buf, (them, me), rule, seen).await;
        });
    }
}

/// `n` keyed members on loopback, eager and relaying, each reached through its proxy.
async fn proxied_group(name: &str, n: usize, rule: Rule) -> (Arc<Group>, Vec<Member>, Seen) {
    let seen = Seen::default();
    let mut real = Vec::new();
    let mut members = Vec::new();
    for i in 0..n {
        let own = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.push(GroupMember {
            id: NodeId::from(i),
            addr: front.local_addr().unwrap().to_string(),
            cluster: ClusterId(0),
        });
        let target = own.local_addr().unwrap().to_string();
        tokio::spawn(proxy(
            front,
            NodeId::from(i),
            target,
            rule.clone(),
            seen.clone(),
        ));
        real.push(own);
    }
    // Eager and relaying by the group's session settings, as a group file's `[session]`
    // table gives them: the members' configurations take them from there.
    let session = SessionSettings {
        eager: true,
        relay_announce: true,
    };
    let group = Arc::new(
        Group::new(name, members)
            .unwrap()
            .with_session(session)
            .unwrap(),
    );
    let key = GroupKey::from_bytes([3; 32]);
    let tune = |c: &mut GroupConfig| {
        quiet(c);
        c.handshake = Arc::new(NoiseHandshake::new(key.clone()));
    };
    let mut members: Vec<Member> = real
        .into_iter()
        .enumerate()
        .map(|(i, l)| spawn_member(l, member_config(&group, i, &tune)))
        .collect();
    pump(&mut members, |ms| ms.iter().all(|m| m.connected >= n - 1)).await;
    (group, members, seen)
}

fn is_announce(m: &Message) -> bool {
    matches!(m, Message::Session(f)
        if matches!(SessionMsg::from_frame(f), Ok(SessionMsg::Announce { .. })))
}

/// With the root's direct announcements to members 2 and 3 of the chain 0 -> 1 -> 2 -> 3 lost
/// on their way, members 2 and 3 start on the copies their parents relay: every copy carries
/// the initiator's 64-digit MAC, it verifies, and every member gets the root's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_group_starts_on_relayed_copies_that_carry_the_mac() {
    let rule: Rule = Arc::new(|from, to, m| {
        if from == NodeId(0) && to.0 >= 2 && is_announce(m) {
            Fate::Drop
        } else {
            Fate::Pass
        }
    });
    let (group, mut members, seen) = proxied_group("relay-keyed", 4, rule).await;
    let data = windrose_net::random_payload(200_000, 11);
    let (t, finished, failed) = run(&mut members, 0, chain(&group, 16 << 10), data.clone()).await;
    assert_eq!((finished, failed), (4, 0));
    for m in &members[1..] {
        assert!(m.got[&t] == data[..]);
        assert!(m.lost.is_empty(), "{:?}", m.lost);
    }
    let seen = seen.lock().unwrap().clone();
    let relays: Vec<(u32, u32)> = seen
        .iter()
        .filter(|(f, _, _)| f.0 != 0)
        .map(|(f, t, _)| (f.0, t.0))
        .collect();
    assert_eq!(relays, vec![(1, 2), (2, 3)]);
    assert!(seen.iter().all(|(_, _, m)| matches!(m,
        SessionMsg::Announce { mac: Some(mac), .. } if mac.len() == 64)));
    leave_all(members).await;
}

/// Member 1's relayed copy to member 2 is altered on its way (member 3 added to the members
/// left out, the MAC kept): member 2 refuses it and drops its connection with member 1 with a
/// reason naming the relay. The root's direct copy, held until then, starts member 2, which
/// takes the data from the root (its parent counted gone) and passes it on: every member
/// gets the root's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_relayed_copy_is_refused_over_tcp() {
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let rule: Rule = Arc::new(move |from, to, m| {
        if !is_announce(m) {
            return Fate::Pass;
        }
        if from == NodeId(0) && to == NodeId(2) {
            return Fate::Hold(held.clone());
        }
        if from == NodeId(1) && to == NodeId(2) {
            let Message::Session(f) = m else {
                unreachable!()
            };
            let mut msg = SessionMsg::from_frame(f).unwrap();
            if let SessionMsg::Announce { excluded, .. } = &mut msg {
                excluded.push(NodeId(3));
            }
            return Fate::Alter(msg.to_message());
        }
        Fate::Pass
    });
    let (group, mut members, seen) = proxied_group("relay-altered", 4, rule).await;
    let data = windrose_net::random_payload(200_000, 12);
    members[0].start(chain(&group, 16 << 10), data.clone());
    let refused = |ms: &[Member]| {
        ms[2]
            .lost
            .iter()
            .any(|(p, why)| *p == NodeId(1) && why.contains("fails the group's check"))
    };
    pump(&mut members, refused).await;
    gate.add_permits(1);
    pump(&mut members, |ms| {
        ms[0]
            .completions()
            .first()
            .is_some_and(|&(t, _, _)| ms.iter().all(|m| m.ended(t).is_some()))
    })
    .await;
    let (t, finished, failed) = members[0].completions()[0];
    assert_eq!((finished, failed), (4, 0));
    for m in &members[1..] {
        assert!(m.got[&t] == data[..]);
    }
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|(f, t, _)| (f.0, t.0) == (1, 2)),
        "member 1 relayed"
    );
    leave_all(members).await;
}
