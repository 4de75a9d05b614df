//! Sim-vs-real through the Host, for every protocol: the same collective, started by the same
//! member of the same group, run once by the discrete-event simulator (`windrose-sim`, one
//! `Host` per node) and once over loopback TCP (`host_driver`, one `Host` per member task).
//! Both must
//!
//! - deliver identical bytes: every member the same bytes of the collective (a broadcast's and
//!   a multicast's receivers the root's whole payload); a scatter's members the same share
//!   `(offset, len)` to compute, whose BLAKE3 (computed by the real members) is that slice's;
//! - send the same multiset of `(from, to, kind)` frames, with the same frame counts and wire
//!   bytes per entry, the session's frames included: the simulator's from the `send` lines of
//!   its JSONL event log, the members' from `frames_sent` (heartbeats and probes off, so only
//!   the session and the collective talk).
//!
//! MOB and BitTorrent choose pieces and peers by timing, so for them the delivered bytes, the
//! session's frames and the kinds carrying the data are compared, and every member must have
//! received every piece at least once.
//!
//! The MST (GHS) and HeteroSort collectives are compared the same way in `group.rs`.

mod common;

use bytes::Bytes;
use common::{leave_all, quiet, run, sim_frames, sim_platform, start_group, FrameSet};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use windrose_model::NodeId;
use windrose_net::group::Group;
use windrose_net::random_payload;
use windrose_net::trees::group_tree;
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::PieceMsg;
use windrose_proto::scatter::{ScatterConfig, ScatterMsg};
use windrose_proto::tree_broadcast::{BroadcastConfig, BroadcastMsg};
use windrose_proto::{MessageKind, TransferId};
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::group::{group as sim_group, start_input};
use windrose_trees::dlt::{self, OrderPolicy};
use windrose_trees::TreeAlgorithm;

const NODES: usize = 7;
const CLUSTERS: usize = 2;
/// The session's frames (announce, ready, reports, ...), one kind name for the family.
const SESSION: &str = "session";

/// What one run of a collective left behind, on either side.
struct Run {
    /// The collective.
    transfer: TransferId,
    /// Every frame sent.
    frames: FrameSet,
    /// What each member was delivered, in order.
    delivered: Vec<Vec<u8>>,
    /// The share each member computed, `(offset, len)`.
    shares: BTreeMap<u32, (u64, u64)>,
}

/// The collective for real: a fresh quiet group of [`NODES`] members, `who` starts `spec`, and
/// every member's share is checked against the load it was cut from.
async fn real(name: &str, who: usize, spec: &CollectiveSpec, data: &Bytes) -> Run {
    let (_, mut members) = start_group("sim-vs-real", NODES, CLUSTERS, quiet).await;
    let (transfer, finished, failed) = run(&mut members, who, spec.clone(), data.clone()).await;
    assert_eq!((finished, failed), (NODES as u32, 0), "{name}");
    let frames = common::real_frames(&members);
    let delivered = members
        .iter()
        .map(|m| m.got.get(&transfer).cloned().unwrap_or_default())
        .collect();
    let mut shares = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for (offset, len, hash) in &m.computed {
            let slice = &data[*offset as usize..(*offset + *len) as usize];
            assert_eq!(blake3::hash(slice).to_hex().as_str(), hash, "{name}: {i}");
            assert!(shares.insert(i as u32, (*offset, *len)).is_none());
        }
    }
    leave_all(members).await;
    Run {
        transfer,
        frames,
        delivered,
        shares,
    }
}

/// The same collective in the simulator: one host per node of a platform with the group's
/// clusters, started by `who` at time 0.
fn simulated(group: &Group, who: usize, spec: &CollectiveSpec, data: &Bytes, t: TransferId) -> Run {
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = sim_group(sim_platform(group), config, 5, |c| c.heartbeat = None).unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    sim.input_at(
        NodeId::from(who),
        0.0,
        start_input(spec.clone(), data.clone(), None),
    )
    .unwrap();
    let metrics = sim.run().unwrap();
    assert!(metrics.errors.is_empty(), "{:?}", metrics.errors);
    let mut delivered = Vec::new();
    for i in 0..NODES {
        let mut bytes = Vec::new();
        for (offset, piece) in sim.delivered_of(NodeId::from(i), t) {
            assert_eq!(offset, bytes.len() as u64, "node {i}: in order");
            bytes.extend_from_slice(&piece);
        }
        delivered.push(bytes);
    }
    let mut shares = BTreeMap::new();
    for line in String::from_utf8(log.contents()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["ev"] == "compute" {
            let share = (v["offset"].as_u64().unwrap(), v["bytes"].as_u64().unwrap());
            let node = v["node"].as_u64().unwrap() as u32;
            assert!(
                shares.insert(node, share).is_none(),
                "node {node}: one share"
            );
        }
    }
    Run {
        transfer: t,
        frames: sim_frames(&log),
        delivered,
        shares,
    }
}

/// Runs `spec` both ways and checks the bytes (and, when `exact`, every frame) agree.
/// Returns the simulated run.
async fn compare(what: &str, who: usize, spec: CollectiveSpec, data: &Bytes, exact: bool) -> Run {
    let group = shape().await;
    let r = real(what, who, &spec, data).await;
    let s = simulated(&group, who, &spec, data, r.transfer);
    for i in 0..NODES {
        assert!(
            r.delivered[i] == s.delivered[i],
            "{what}: node {i} got different bytes for real and in the simulator"
        );
    }
    assert_eq!(r.shares, s.shares, "{what}: shares");
    assert!(s.frames.keys().any(|k| k.2 == SESSION), "{what}");
    if exact {
        assert_eq!(r.frames, s.frames, "{what}: frames (from, to, kind)");
    } else {
        let session = |set: &FrameSet| -> FrameSet {
            set.iter()
                .filter(|(k, _)| k.2 == SESSION)
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        };
        assert_eq!(session(&r.frames), session(&s.frames), "{what}: session");
        let kinds = |set: &FrameSet| -> BTreeSet<String> {
            set.keys()
                .filter(|k| k.2 == PieceMsg::PIECE.name() || k.2 == BroadcastMsg::DATA.name())
                .map(|k| k.2.clone())
                .collect()
        };
        assert_eq!(kinds(&r.frames), kinds(&s.frames), "{what}: data kinds");
    }
    s
}

/// A group like the real runs' (only its shape matters: trees, plans and the platform).
async fn shape() -> Arc<Group> {
    common::loopback("shape", NODES, CLUSTERS).await.0
}

/// Frames of `kind` in `set`, by receiver.
fn received(set: &FrameSet, kind: MessageKind) -> BTreeMap<u32, u64> {
    let mut got = BTreeMap::new();
    for ((_, to, k), (frames, _)) in set {
        if k == kind.name() {
            *got.entry(*to).or_default() += frames;
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_over_every_tree_matches_the_simulator() {
    let group = shape().await;
    let payload = random_payload((1 << 20) + 12_345, 3);
    // (segment bytes, largest frame payload): pipelined in whole frames, segments cut into
    // several frames (the last shorter), and store-and-forward in 256 KiB frames.
    let cases: [(u64, u32); 3] = [
        (64 << 10, BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD),
        (100_000, 40_000),
        (payload.len() as u64, 256 << 10),
    ];
    let mut runs = 0;
    for kind in TreeAlgorithm::ALL {
        let tree = group_tree(kind, &group, NodeId(0)).unwrap();
        for (segment_bytes, max_frame_payload) in cases {
            let what =
                format!("{kind}, segments of {segment_bytes}, frames of {max_frame_payload}");
            let spec = CollectiveSpec::Broadcast {
                tree: TreeSpec::of(&tree),
                segment_bytes,
                max_frame_payload,
            };
            let s = compare(&what, 0, spec, &payload, true).await;
            for i in 1..NODES {
                assert!(s.delivered[i] == payload[..], "{what}: node {i}");
            }
            // Data down one edge per non-root member, nothing else but the session.
            assert_eq!(received(&s.frames, BroadcastMsg::DATA).len(), NODES - 1);
            assert!(s
                .frames
                .keys()
                .all(|k| k.2 == SESSION || k.2 == BroadcastMsg::DATA.name()));
            runs += 1;
        }
    }
    assert_eq!(runs, TreeAlgorithm::ALL.len() * cases.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_broadcast_from_another_member_matches_the_simulator() {
    let group = shape().await;
    let tree = group_tree(TreeAlgorithm::Binomial, &group, NodeId(4)).unwrap();
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&tree),
        segment_bytes: 1 << 20,
        max_frame_payload: BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD,
    };
    let s = compare("empty", 4, spec, &Bytes::new(), true).await;
    assert!(s.delivered.iter().all(Vec::is_empty));
    // One empty frame per edge.
    let data = received(&s.frames, BroadcastMsg::DATA);
    assert_eq!(data.len(), NODES - 1);
    assert!(data.values().all(|&frames| frames == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scatter_matches_the_simulator() {
    let group = shape().await;
    let load = random_payload((2 << 20) + 7, 11);
    // Heterogeneous nodes and links, so shares differ.
    let compute_s: Vec<f64> = (0..NODES).map(|i| 1.0 + 0.5 * (i % 3) as f64).collect();
    let link_s: Vec<f64> = (0..NODES).map(|i| 0.05 + 0.1 * (i % 4) as f64).collect();
    let cases = [
        (
            TreeAlgorithm::Binomial,
            false,
            ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
        ),
        (TreeAlgorithm::Binomial, true, 64 << 10),
        (TreeAlgorithm::Chain, false, 100_000),
        (TreeAlgorithm::Flat, true, 64 << 10),
        (TreeAlgorithm::Magpie, false, 256 << 10),
        (TreeAlgorithm::BalancedPath, true, 100_000),
        (
            TreeAlgorithm::Mst,
            false,
            ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
        ),
    ];
    for (kind, parallel, max_frame_payload) in cases {
        let what = format!("{kind}, parallel {parallel}, frames of {max_frame_payload}");
        let tree = group_tree(kind, &group, NodeId(0)).unwrap();
        let schedule = dlt::schedule(&tree, &compute_s, &link_s, OrderPolicy::Optimal).unwrap();
        let spec = CollectiveSpec::Scatter {
            schedule,
            max_frame_payload,
            parallel,
        };
        let s = compare(&what, 0, spec, &load, true).await;
        // Every member computed one share, and the shares partition the load.
        assert_eq!(s.shares.len(), NODES, "{what}");
        let mut by_offset: Vec<(u64, u64)> = s.shares.values().copied().collect();
        by_offset.sort();
        let mut next = 0;
        for (offset, len) in by_offset {
            assert_eq!(offset, next, "{what}");
            next += len;
        }
        assert_eq!(next, load.len() as u64, "{what}");
        // Shares go down every edge, finish reports up every edge.
        let edges = |k: MessageKind| s.frames.keys().filter(|key| key.2 == k.name()).count();
        assert_eq!(edges(ScatterMsg::SHARE), NODES - 1, "{what}");
        assert_eq!(edges(ScatterMsg::SHARE_FINISHED), NODES - 1, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_multicast_protocol_matches_the_simulator() {
    let group = shape().await;
    let payload = random_payload((1 << 20) + 12_345, 5);
    let root: usize = 2;
    for protocol in MulticastProtocol::ALL {
        // Tree multicasts move the same frames whatever the timing; swarms do not.
        let exact = matches!(
            protocol,
            MulticastProtocol::Magpie | MulticastProtocol::Balanced
        );
        for piece in [64u32 << 10, 100_000] {
            let what = format!("{}, pieces of {piece}", protocol.name());
            let manifest = common::manifest(&payload, piece);
            let spec = common::multicast(&group, protocol, NodeId::from(root), manifest);
            let s = compare(&what, root, spec, &payload, exact).await;
            let pieces = payload.len().div_ceil(piece as usize) as u64;
            let got = received(&s.frames, PieceMsg::PIECE);
            for i in (0..NODES).filter(|&i| i != root) {
                assert!(s.delivered[i] == payload[..], "{what}: node {i}");
                let n = got.get(&(i as u32)).copied().unwrap_or(0);
                if exact {
                    assert_eq!(n, pieces, "{what}: node {i} once per piece");
                } else {
                    assert!(n >= pieces, "{what}: node {i} got {n} of {pieces}");
                }
            }
        }
    }
}
