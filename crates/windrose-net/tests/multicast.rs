//! The piece-based multicasts (MOB, BitTorrent, Balanced Multicasting, MagPIe) run by the real
//! driver over loopback TCP: 16 nodes in 4 clusters, every node connected to every other, the
//! root's manifest shipped in the job and every piece checked with BLAKE3 on arrival.
//!
//! - Every protocol: every node finishes, holds the root's bytes in order (its in-memory output
//!   equals the payload, its BLAKE3 the root's) and received every piece at least once (exactly
//!   once down the trees).
//! - Sim-vs-real for the tree multicast: the same group, plan and payload in `windrose-sim` and
//!   on loopback deliver identical bytes and send the same multiset of `(from, to, kind)` frames
//!   with the same wire bytes. MOB and BitTorrent choose pieces and peers by timing, so for them
//!   only the delivered bytes and the kinds carrying the data are compared.
//! - A node killed mid-run: reported failed, nobody hangs, every other node still finishes.

mod common;

use bytes::Bytes;
use common::{loopback, oneshot::config};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_net::group::Group;
use windrose_net::trees::{balanced_spec, equal_platform, magpie_spec};
use windrose_net::wire::{FrameCount, RunStatus};
use windrose_net::{random_payload, run_node, run_root, RootJob};
use windrose_net::{NodeOutcome, RunOutcome};
use windrose_proto::multicast::{self, MulticastProtocol, MulticastSpec};
use windrose_proto::pieces::PieceMsg;
use windrose_proto::pieces::{ClusterLayout, Manifest, MemoVerifier, PieceVerifier, SwarmSetup};
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::TransferId;
use windrose_sim::engine::{MemoryLog, SimConfig, Simulation};

/// `(from, to, kind)` → `(frames, wire bytes)`.
type FrameSet = BTreeMap<(u32, u32, String), (u64, u64)>;

const NODES: usize = 16;
const CLUSTERS: usize = 4;
const ROOT: NodeId = NodeId(0);
/// Bound on one real run (a few MiB take well under a second).
const RUN_LIMIT: Duration = Duration::from_secs(25);

/// The machines' parameters for `protocol` over `group` (balanced planned on equal
/// capacities, as `windrose multicast` does without a platform).
fn spec(group: &Group, protocol: MulticastProtocol) -> MulticastSpec {
    match protocol {
        MulticastProtocol::Mob => MulticastSpec::Mob(Default::default()),
        MulticastProtocol::BitTorrent => MulticastSpec::BitTorrent(Default::default()),
        MulticastProtocol::Magpie => magpie_spec(group, ROOT).unwrap(),
        MulticastProtocol::Balanced => {
            let platform = equal_platform(group, 1.25e8, 1e-4).unwrap();
            balanced_spec(group, &platform, ROOT).unwrap().0
        }
    }
}

fn layout(group: &Group) -> Arc<ClusterLayout> {
    Arc::new(ClusterLayout::new(group.members().iter().map(|m| (m.id, m.cluster))).unwrap())
}

fn setup(group: &Group, manifest: Arc<Manifest>, verifier: Arc<dyn PieceVerifier>) -> SwarmSetup {
    SwarmSetup {
        transfer: TransferId(1),
        root: ROOT,
        manifest,
        layout: layout(group),
        verifier,
        keeper: None,
    }
}

/// Runs `job` on a fresh loopback group of 16 nodes in 4 clusters; the nodes keep what they
/// receive in memory. Returns the root's outcome and every node's.
async fn run_real(job: RootJob) -> (RunOutcome, BTreeMap<NodeId, NodeOutcome>) {
    let timeout = Duration::from_secs(10);
    common::oneshot::run_in_memory("multicast", NODES, CLUSTERS, job, timeout, RUN_LIMIT).await
}

/// A group like the real runs' (only its shape matters: plans, layout, the platform).
async fn shape() -> Arc<Group> {
    loopback("shape", NODES, CLUSTERS).await.0
}

/// The frames of a real run: the root's and every node's `frames_sent`.
fn real_frames(outcome: &RunOutcome) -> FrameSet {
    let mut set = FrameSet::new();
    let mut add = |from: NodeId, counts: &[FrameCount]| {
        for c in counts {
            let e = set
                .entry((from.0, c.to.0, c.kind.name().to_string()))
                .or_default();
            e.0 += c.frames;
            e.1 += c.bytes;
        }
    };
    add(outcome.root, &outcome.root_frames_sent);
    for n in &outcome.nodes {
        let r = n.report.as_ref().expect("every node reported");
        add(n.node, &r.frames_sent);
    }
    set
}

/// The frames of a simulated run, from the `send` lines of its event log (and no `drop`s).
fn sim_frames(log: &MemoryLog) -> FrameSet {
    let mut set = FrameSet::new();
    for line in String::from_utf8(log.contents()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_ne!(v["ev"], "drop", "the simulator dropped a message: {line}");
        if v["ev"] != "send" {
            continue;
        }
        let key = (
            v["node"].as_u64().unwrap() as u32,
            v["peer"].as_u64().unwrap() as u32,
            v["msg"].as_str().unwrap().to_string(),
        );
        let e = set.entry(key).or_default();
        e.0 += 1;
        e.1 += v["bytes"].as_u64().unwrap();
    }
    set
}

/// Piece frames each node received, from a frame set.
fn pieces_received(set: &FrameSet) -> BTreeMap<u32, u64> {
    let mut got = BTreeMap::new();
    for ((_, to, kind), (frames, _)) in set {
        if kind == PieceMsg::PIECE.name() {
            *got.entry(*to).or_default() += frames;
        }
    }
    got
}

/// A platform with the group's clusters (contiguous blocks, as `common::loopback` makes them):
/// 100 MB/s node links, 1 GB/s access links, 0.1 ms inside a cluster, 10 MB/s and 5 ms between.
fn platform(group: &Group) -> Platform {
    let mut sizes = vec![0usize; group.cluster_count()];
    for c in group.clusters() {
        sizes[c.index()] += 1;
    }
    let mut b = Platform::builder();
    for n in sizes {
        b = b.cluster(ClusterSpec::uniform(n, 1e8, 1e9, 1e-4));
    }
    b.wan_all(1e7, 5e-3).build().unwrap()
}

/// The same multicast in the simulator: every node's delivered bytes (reassembled, checked in
/// order) and the frames sent.
fn simulate(
    group: &Group,
    spec: &MulticastSpec,
    payload: &Bytes,
    piece: u32,
) -> (BTreeMap<NodeId, Vec<u8>>, FrameSet) {
    let manifest = Arc::new(Manifest::build(payload, piece).unwrap());
    let s = setup(group, manifest, Arc::new(MemoVerifier::new()));
    let mut sim = Simulation::new(
        platform(group),
        SimConfig {
            record_deliveries: true,
            strict: true,
            ..SimConfig::default()
        },
    );
    for m in group.members() {
        let data = (m.id == ROOT).then(|| payload.clone());
        let machine = multicast::build(m.id, &s, data, spec, 1).unwrap();
        sim.add_boxed_node(machine, 0.0).unwrap();
    }
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    let metrics = sim.run().unwrap();
    assert!(metrics.all_finished(), "the simulated multicast finished");
    let mut delivered = BTreeMap::new();
    for m in group.members().iter().filter(|m| m.id != ROOT) {
        let mut bytes = Vec::new();
        for (offset, piece) in sim.delivered(m.id) {
            assert_eq!(*offset, bytes.len() as u64, "node {}: in order", m.id);
            bytes.extend_from_slice(piece);
        }
        delivered.insert(m.id, bytes);
    }
    (delivered, sim_frames(&log))
}

/// Every node gets every byte, verified, in order; the outcome says so node by node.
async fn every_node_gets_the_data(protocol: MulticastProtocol) {
    let group = shape().await;
    // A short last piece, pieces small enough that there are many.
    let payload = random_payload((3 << 20) + 12_345, 7);
    let piece: u32 = 64 << 10;
    let pieces = payload.len().div_ceil(piece as usize) as u64;
    let job = RootJob::multicast(protocol, spec(&group, protocol), piece, payload.clone());
    let (outcome, outs) = run_real(job).await;

    assert_eq!(outcome.collective, "multicast");
    assert_eq!(outcome.protocol, Some(protocol));
    assert_eq!(outcome.nodes.len(), NODES - 1);
    let root_hash = blake3::hash(&payload).to_hex().to_string();
    assert_eq!(outcome.root_blake3, root_hash);
    for n in &outcome.nodes {
        assert_eq!(n.status, RunStatus::Finished, "node {}", n.node);
        assert_eq!(n.bytes_received, payload.len() as u64, "node {}", n.node);
        assert_eq!(
            n.blake3.as_deref(),
            Some(root_hash.as_str()),
            "node {}",
            n.node
        );
        let c = n
            .completion_s
            .expect("a finished node has a completion time");
        assert!(
            c > 0.0 && c <= outcome.elapsed_s + 1.0,
            "node {}: {c}",
            n.node
        );
        assert!(
            outs[&n.node].delivered.to_vec() == payload,
            "node {}",
            n.node
        );
    }
    // Every node received every piece (exactly once when pushed down trees).
    let frames = real_frames(&outcome);
    let got = pieces_received(&frames);
    for i in 1..NODES as u32 {
        let n = got.get(&i).copied().unwrap_or(0);
        match protocol {
            MulticastProtocol::Balanced | MulticastProtocol::Magpie => {
                assert_eq!(n, pieces, "{protocol}: node {i}")
            }
            _ => assert!(
                n >= pieces,
                "{protocol}: node {i} got {n} of {pieces} pieces"
            ),
        }
    }
    // The data moved in piece frames only (no broadcast Data frames).
    assert!(frames.keys().all(|k| k.2 != BroadcastMsg::DATA.name()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mob_delivers_verified_bytes_to_16_nodes_in_4_clusters() {
    every_node_gets_the_data(MulticastProtocol::Mob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bittorrent_delivers_verified_bytes_to_16_nodes_in_4_clusters() {
    every_node_gets_the_data(MulticastProtocol::BitTorrent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_delivers_verified_bytes_to_16_nodes_in_4_clusters() {
    every_node_gets_the_data(MulticastProtocol::Balanced).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn magpie_delivers_verified_bytes_to_16_nodes_in_4_clusters() {
    every_node_gets_the_data(MulticastProtocol::Magpie).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_multicast_matches_the_simulator() {
    let group = shape().await;
    let payload = random_payload((1 << 20) + 12_345, 3);
    let mut runs = 0;
    for protocol in [MulticastProtocol::Magpie, MulticastProtocol::Balanced] {
        let spec = spec(&group, protocol);
        if let MulticastSpec::Trees { plan, .. } = &spec {
            assert!(!plan.trees.is_empty());
        }
        for piece in [64u32 << 10, 100_000] {
            let what = format!("{protocol}, pieces of {piece}");
            let (sim_bytes, sim_set) = simulate(&group, &spec, &payload, piece);
            let mut job = RootJob::multicast(protocol, spec.clone(), piece, payload.clone());
            job.probe_period = None;
            let (outcome, outs) = run_real(job).await;
            for (id, bytes) in &sim_bytes {
                assert!(*bytes == payload, "{what}: node {id} in the simulator");
                assert!(
                    outs[id].delivered.to_vec() == *bytes,
                    "{what}: node {id} for real"
                );
            }
            let real_set = real_frames(&outcome);
            assert_eq!(real_set, sim_set, "{what}: frames (from, to, kind)");
            assert!(sim_set.keys().all(|k| k.2 == PieceMsg::PIECE.name()));
            runs += 1;
        }
    }
    assert_eq!(runs, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_protocols_deliver_what_the_simulator_delivers() {
    let group = shape().await;
    let payload = random_payload((1 << 20) + 777, 5);
    let piece: u32 = 32 << 10;
    for protocol in [MulticastProtocol::Mob, MulticastProtocol::BitTorrent] {
        let spec = spec(&group, protocol);
        let (sim_bytes, sim_set) = simulate(&group, &spec, &payload, piece);
        let mut job = RootJob::multicast(protocol, spec, piece, payload.clone());
        job.probe_period = None;
        let (outcome, outs) = run_real(job).await;
        for (id, bytes) in &sim_bytes {
            assert!(*bytes == payload, "{protocol}: node {id} in the simulator");
            assert!(
                outs[id].delivered.to_vec() == *bytes,
                "{protocol}: node {id} for real"
            );
        }
        // The data travels in the same kind of frame on both sides.
        let payload_kinds = |set: &FrameSet| -> BTreeSet<String> {
            set.keys()
                .filter(|k| k.2 == PieceMsg::PIECE.name() || k.2 == BroadcastMsg::DATA.name())
                .map(|k| k.2.clone())
                .collect()
        };
        let real_set = real_frames(&outcome);
        assert_eq!(
            payload_kinds(&real_set),
            payload_kinds(&sim_set),
            "{protocol}"
        );
        assert_eq!(
            payload_kinds(&real_set),
            BTreeSet::from([PieceMsg::PIECE.name().to_string()]),
            "{protocol}"
        );
        for (n, got) in pieces_received(&real_set) {
            assert!(
                got >= payload.len().div_ceil(piece as usize) as u64,
                "{protocol}: node {n}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_piece_size_is_refused_before_anything_starts() {
    let (group, _listeners) = loopback("bad-piece", 3, 1).await;
    let payload = random_payload(1000, 1);
    for piece in [0, windrose_net::MAX_PIECE_BYTES + 1] {
        let job = RootJob::multicast(
            MulticastProtocol::Mob,
            MulticastSpec::Mob(Default::default()),
            piece,
            payload.clone(),
        );
        let e = run_root(config(&group, 0, Duration::from_secs(5)), job)
            .await
            .unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        assert!(e.to_string().contains("piece size"), "{e}");
    }
}

/// A node killed in the middle of the run (its process gone: every connection drops) is
/// reported failed, the run still ends in bounded time for every protocol, and every other
/// node finishes with the root's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_mid_run_never_hangs_the_multicast() {
    for protocol in MulticastProtocol::ALL {
        let (group, mut listeners) = loopback("lost", NODES, CLUSTERS).await;
        let payload = random_payload(48 << 20, 9);
        let victim = NodeId(6);
        let mut nodes = Vec::new();
        let mut victim_events = None;
        for (i, l) in listeners.drain(..).enumerate().skip(1) {
            let mut c = config(&group, i as u32, Duration::from_secs(5));
            if NodeId::from(i) == victim {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                c.events = Some(tx);
                victim_events = Some(rx);
            }
            nodes.push((NodeId::from(i), tokio::spawn(run_node(l, c))));
        }
        let job = RootJob::multicast(protocol, spec(&group, protocol), 256 << 10, payload);
        let root = tokio::spawn(run_root(config(&group, 0, Duration::from_secs(5)), job));
        // Kill the victim at its first progress note (it is running).
        let mut events = victim_events.unwrap();
        let mut held = 0;
        while let Some(e) = events.recv().await {
            if let windrose_net::NetEvent::Progress { done_bytes, .. } = e {
                held = done_bytes;
                break;
            }
        }
        assert!(
            held < 48 << 20,
            "{protocol}: the victim finished before it was killed"
        );
        let idx = nodes.iter().position(|(id, _)| *id == victim).unwrap();
        nodes[idx].1.abort();
        let outcome = tokio::time::timeout(RUN_LIMIT, root)
            .await
            .unwrap_or_else(|_| panic!("{protocol}: the root hangs"))
            .unwrap()
            .unwrap();
        let v = outcome.nodes.iter().find(|n| n.node == victim).unwrap();
        assert_eq!(v.status, RunStatus::Failed, "{protocol}");
        // The others drop it, fetch what it owed them elsewhere, and finish.
        for n in outcome.nodes.iter().filter(|n| n.node != victim) {
            assert!(
                n.status == RunStatus::Finished && n.verified,
                "{protocol}: node {}: {:?}",
                n.node,
                n.error
            );
        }
        for (id, n) in nodes {
            let r = tokio::time::timeout(RUN_LIMIT, n).await;
            assert!(r.is_ok(), "{protocol}: node {id} hangs");
        }
    }
}
