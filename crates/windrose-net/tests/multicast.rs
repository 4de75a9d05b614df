//! The piece-based multicasts (MOB, BitTorrent, Balanced Multicasting, MagPIe) run through the
//! Host driver over loopback TCP: 16 members in 4 clusters, every member connected to every
//! other, the root's manifest in the collective's spec and every piece checked with BLAKE3 on
//! arrival.
//!
//! - Every protocol: every member finishes and is delivered the root's bytes in order, and
//!   received every piece at least once (exactly once down the trees).
//! - A bad piece size is refused at the initiator, with its reason, before anything starts.
//! - A member killed mid-run: counted failed, nobody hangs, every other member still finishes.
//!
//! Sim-vs-real for every protocol is in `sim_vs_real.rs`.

mod common;

use common::{leave_all, pump, run, run_on, start_group, Member};
use std::collections::BTreeMap;
use windrose_model::NodeId;
use windrose_net::group::Group;
use windrose_net::random_payload;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec};
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::PieceMsg;
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::Report;

const NODES: usize = 16;
const CLUSTERS: usize = 4;
const ROOT: NodeId = NodeId(0);

fn spec(group: &Group, protocol: MulticastProtocol, manifest: ManifestSpec) -> CollectiveSpec {
    common::multicast(group, protocol, ROOT, manifest)
}

/// Piece frames each member received, from every member's frame counts.
fn pieces_received(members: &[Member]) -> BTreeMap<u32, u64> {
    let mut got = BTreeMap::new();
    for ((_, to, kind), (frames, _)) in common::real_frames(members) {
        if kind == PieceMsg::PIECE.name() {
            *got.entry(to).or_default() += frames;
        }
    }
    got
}

/// Every member gets every byte, verified, in order.
async fn every_member_gets_the_data(protocol: MulticastProtocol) {
    let (group, mut members) = start_group("multicast", NODES, CLUSTERS, |_| {}).await;
    // A short last piece, pieces small enough that there are many.
    let payload = random_payload((3 << 20) + 12_345, 7);
    let piece: u32 = 64 << 10;
    let pieces = payload.len().div_ceil(piece as usize) as u64;
    let spec = spec(&group, protocol, common::manifest(&payload, piece));
    let (t, finished, failed) = run(&mut members, ROOT.index(), spec, payload.clone()).await;
    assert_eq!((finished, failed), (NODES as u32, 0), "{protocol:?}");
    for (i, m) in members.iter().enumerate().skip(1) {
        assert_eq!(m.ended(t), Some(true), "{protocol:?}: member {i}");
        assert!(m.got[&t] == payload[..], "{protocol:?}: member {i}");
    }
    let got = pieces_received(&members);
    for i in 1..NODES as u32 {
        let n = got.get(&i).copied().unwrap_or(0);
        match protocol {
            MulticastProtocol::Balanced | MulticastProtocol::Magpie => {
                assert_eq!(n, pieces, "{protocol:?}: member {i}")
            }
            _ => assert!(n >= pieces, "{protocol:?}: member {i} got {n} of {pieces}"),
        }
    }
    // The data moved in piece frames only (no broadcast data frames).
    let frames = common::real_frames(&members);
    assert!(frames.keys().all(|k| k.2 != BroadcastMsg::DATA.name()));
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mob_delivers_verified_bytes_to_16_members_in_4_clusters() {
    every_member_gets_the_data(MulticastProtocol::Mob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bittorrent_delivers_verified_bytes_to_16_members_in_4_clusters() {
    every_member_gets_the_data(MulticastProtocol::BitTorrent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_delivers_verified_bytes_to_16_members_in_4_clusters() {
    every_member_gets_the_data(MulticastProtocol::Balanced).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn magpie_delivers_verified_bytes_to_16_members_in_4_clusters() {
    every_member_gets_the_data(MulticastProtocol::Magpie).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_piece_size_is_refused_at_the_initiator_before_anything_starts() {
    let (group, mut members) = start_group("bad-piece", 3, 1, |_| {}).await;
    let payload = random_payload(1000, 1);
    for piece_len in [0, windrose_net::MAX_PIECE_BYTES + 1] {
        let good = common::manifest(&payload, 256);
        let bad = ManifestSpec { piece_len, ..good };
        let spec = spec(&group, MulticastProtocol::Mob, bad);
        let (t, finished, failed) = run_on(&mut members, &[], 0, spec, payload.clone()).await;
        assert_eq!((finished, failed), (0, 1), "piece of {piece_len}");
        assert!(members[0]
            .reports
            .contains(&Report::CollectiveRefused { transfer: t }));
        let why = &members[0].failed.last().expect("a reason").why;
        assert!(why.contains("piece"), "piece of {piece_len}: {why}");
        // Nobody else heard of it.
        assert!(members[1..].iter().all(|m| m.ended(t).is_none()));
    }
    leave_all(members).await;
}

/// A member killed in the middle of the run (its task gone: every connection drops) is
/// counted failed, the collective still completes for every protocol, and every other member
/// finishes with the root's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_mid_run_never_hangs_the_multicast() {
    let victim = 6;
    let others: Vec<usize> = (0..NODES).filter(|&i| i != victim).collect();
    for protocol in MulticastProtocol::ALL {
        let (group, mut members) = start_group("lost", NODES, CLUSTERS, |_| {}).await;
        for m in &mut members {
            m.keep_bytes = false;
        }
        let payload = random_payload(48 << 20, 9);
        let want = (
            blake3::hash(&payload).to_hex().to_string(),
            payload.len() as u64,
        );
        let spec = spec(&group, protocol, common::manifest(&payload, 256 << 10));
        members[0].start(spec, payload);
        // Kill the victim at its first progress report (it is running).
        pump(&mut members, |ms| {
            ms[victim]
                .reports
                .iter()
                .any(|r| matches!(r, Report::Progress { .. }))
        })
        .await;
        let held = members[victim].digests.values().map(|d| d.1).sum::<u64>();
        assert!(held < want.1, "{protocol:?}: the victim finished first");
        members[victim].task.abort();
        pump(&mut members, |ms| {
            ms[0]
                .completions()
                .first()
                .is_some_and(|&(t, _, _)| others.iter().all(|&p| ms[p].ended(t).is_some()))
        })
        .await;
        let (t, finished, failed) = members[0].completions()[0];
        assert_eq!((finished, failed), (NODES as u32 - 1, 1), "{protocol:?}");
        // The initiator counted it out; every member's transport said why it went.
        assert!(members[0].reports.iter().any(|r| matches!(
            *r,
            Report::MemberDone { transfer, member, finished: false, .. }
                if transfer == t && member == NodeId::from(victim)
        )));
        for &i in &others {
            assert!(
                members[i]
                    .lost
                    .iter()
                    .any(|(p, why)| p.index() == victim && !why.is_empty()),
                "{protocol:?}: member {i}: {:?}",
                members[i].lost
            );
        }
        // The others drop it, fetch what it owed them elsewhere, and finish.
        for &i in others.iter().skip(1) {
            assert_eq!(members[i].ended(t), Some(true), "{protocol:?}: member {i}");
            assert_eq!(
                members[i].digest(t).as_ref(),
                Some(&want),
                "{protocol:?}: {i}"
            );
        }
        let victim_task = members.remove(victim);
        assert!(victim_task.task.await.unwrap_err().is_cancelled());
        leave_all(members).await;
    }
}
