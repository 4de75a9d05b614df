//! Sim-vs-real equivalence: the same group, tree (or schedule) and payload run once in the
//! discrete-event simulator (`windrose-sim`) and once for real over loopback TCP (one task per
//! node, each with its own connections). Both must
//!
//! - deliver identical bytes: a broadcast's receivers the root's whole payload (the simulator's
//!   `Output::Deliver`s reassembled, the runtime's in-memory output), a scatter's nodes the same
//!   share `(offset, len, BLAKE3)` to compute (hashed from the `Output::Compute` data on both
//!   sides);
//! - send the same multiset of `(from, to, message kind)` frames, with the same frame counts and
//!   wire bytes per entry: the simulator's from the `send` lines of its JSONL event log, the
//!   runtime's from every node's `frames_sent` (link probes off, so only the collective talks).
//!
//! Several tree kinds, segment sizes, frame sizes and both scatter send modes are covered.

mod common;

use bytes::Bytes;
use common::loopback;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_net::group::Group;
use windrose_net::trees::group_tree;
use windrose_net::wire::{FrameCount, RunStatus};
use windrose_net::{random_payload, Collective, RootJob};
use windrose_net::{NodeOutcome, RunOutcome};
use windrose_proto::scatter::ScatterMsg;
use windrose_proto::scatter::{Scatter, ScatterConfig, SendMode};
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::{Input, MessageKind, Output, Outputs, Protocol, ProtocolError, Status};
use windrose_proto::{Time, TransferId};
use windrose_sim::engine::{broadcast_with, ComputeModel, MemoryLog, SimConfig, Simulation};
use windrose_trees::dlt::{self, OrderPolicy, Schedule};
use windrose_trees::Tree;
use windrose_trees::TreeAlgorithm;

/// `(from, to, kind)` → `(frames, wire bytes)`.
type FrameSet = BTreeMap<(u32, u32, String), (u64, u64)>;

/// A share a node computed: `(offset, len, BLAKE3)`.
type Share = (u64, u64, String);

const NODES: usize = 7;
const CLUSTERS: usize = 2;
/// Bound on one real run (it takes tens of milliseconds).
const RUN_LIMIT: Duration = Duration::from_secs(60);

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

/// Runs `job` for real on a fresh loopback group like `group` (same size and clusters); the
/// nodes keep what they receive in memory. Returns the root's outcome and every node's.
async fn run_real(job: RootJob) -> (RunOutcome, BTreeMap<NodeId, NodeOutcome>) {
    let timeout = Duration::from_secs(20);
    common::run_in_memory("sim-vs-real", NODES, CLUSTERS, job, timeout, RUN_LIMIT).await
}

/// A group like the real runs' (only its shape matters: trees and the platform).
async fn shape() -> Arc<Group> {
    loopback("shape", NODES, CLUSTERS).await.0
}

fn tree(group: &Group, kind: TreeAlgorithm) -> Tree {
    group_tree(kind, group, NodeId(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_matches_the_simulator() {
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
        let tree = tree(&group, kind);
        for &(segment_bytes, max_frame_payload) in &cases {
            let what =
                format!("{kind}, segments of {segment_bytes}, frames of {max_frame_payload}");
            // The simulator.
            let log = MemoryLog::new();
            let cfg = BroadcastConfig {
                max_frame_payload,
                ..BroadcastConfig::new(TransferId(1), segment_bytes)
            };
            let sim_config = SimConfig {
                record_deliveries: true,
                strict: true,
                ..SimConfig::default()
            };
            let mut sim =
                broadcast_with(platform(&group), &tree, payload.clone(), cfg, sim_config).unwrap();
            sim.set_event_log(Box::new(log.clone()));
            let metrics = sim.run().unwrap();
            assert!(metrics.all_finished(), "{what}: the simulated run finished");
            // The real nodes.
            let mut job = RootJob::broadcast(tree.clone(), segment_bytes, payload.clone());
            job.probe_period = None;
            job.max_frame_payload = max_frame_payload;
            let (outcome, outs) = run_real(job).await;

            for n in 1..NODES {
                let id = NodeId::from(n);
                let mut sim_bytes = Vec::new();
                for (offset, piece) in sim.delivered(id) {
                    assert_eq!(*offset, sim_bytes.len() as u64, "{what}: in order");
                    sim_bytes.extend_from_slice(piece);
                }
                let real_bytes = outs[&id].delivered.to_vec();
                assert!(sim_bytes == payload, "{what}: node {n} in the simulator");
                assert!(real_bytes == sim_bytes, "{what}: node {n} for real");
            }
            let (sim_set, real_set) = (sim_frames(&log), real_frames(&outcome));
            assert_eq!(real_set, sim_set, "{what}: frames (from, to, kind)");
            // One edge per non-root node, all data.
            assert_eq!(sim_set.len(), NODES - 1, "{what}");
            assert!(sim_set.keys().all(|k| k.2 == BroadcastMsg::DATA.name()));
            runs += 1;
        }
    }
    assert_eq!(runs, TreeAlgorithm::ALL.len() * cases.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_broadcast_matches_the_simulator() {
    let group = shape().await;
    let tree = tree(&group, TreeAlgorithm::Binomial);
    let log = MemoryLog::new();
    let mut sim = broadcast_with(
        platform(&group),
        &tree,
        Bytes::new(),
        BroadcastConfig::new(TransferId(1), 1 << 20),
        SimConfig::default(),
    )
    .unwrap();
    sim.set_event_log(Box::new(log.clone()));
    assert!(sim.run().unwrap().all_finished());
    let mut job = RootJob::broadcast(tree, 1 << 20, Bytes::new());
    job.probe_period = None;
    let (outcome, outs) = run_real(job).await;
    assert!(outs.values().all(|o| o.delivered.to_vec().is_empty()));
    let sim_set = sim_frames(&log);
    assert_eq!(real_frames(&outcome), sim_set);
    // One empty frame per edge.
    assert!(sim_set.values().all(|&(frames, _)| frames == 1));
}

/// A scatter machine that also records the share its node is asked to compute, hashed from the
/// very bytes of the `Output::Compute` (what the runtime hashes as its real compute step).
struct Recording {
    inner: Scatter,
    shares: Arc<Mutex<BTreeMap<NodeId, Share>>>,
}

impl Protocol for Recording {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        let before = out.len();
        self.inner.handle(now, input, out)?;
        for o in &out.as_slice()[before..] {
            if let Output::Compute(task) = o {
                let mut h = blake3::Hasher::new();
                for piece in &task.data {
                    h.update(piece);
                }
                let share = (task.offset, task.len, h.finalize().to_hex().to_string());
                self.shares.lock().unwrap().insert(self.node(), share);
            }
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.inner.status()
    }
}

/// The scatter in the simulator: every node computing at the speed its schedule entry says.
/// Returns the shares computed and the frames sent.
fn sim_scatter(
    group: &Group,
    schedule: &Schedule,
    load: &Bytes,
    config: ScatterConfig,
) -> (BTreeMap<NodeId, Share>, FrameSet) {
    let shares = Arc::new(Mutex::new(BTreeMap::new()));
    let log = MemoryLog::new();
    let mut sim = Simulation::new(
        platform(group),
        SimConfig {
            strict: true,
            ..SimConfig::default()
        },
    );
    for m in Scatter::all(schedule, load.clone(), config).unwrap() {
        let n = m.node();
        sim.add_node(Recording {
            inner: m,
            shares: shares.clone(),
        })
        .unwrap();
        let s = schedule.node(n).unwrap();
        let bytes_s = load.len().max(1) as f64 / s.compute_s_per_unit;
        sim.set_compute(n, ComputeModel::BytesPerSecond(bytes_s))
            .unwrap();
    }
    sim.set_event_log(Box::new(log.clone()));
    let metrics = sim.run().unwrap();
    assert!(metrics.all_finished(), "the simulated scatter finished");
    let shares = shares.lock().unwrap().clone();
    (shares, sim_frames(&log))
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
        (
            TreeAlgorithm::Flat,
            true,
            ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
        ),
        (TreeAlgorithm::Flat, false, 64 << 10),
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
        let tree = tree(&group, kind);
        let schedule = dlt::schedule(&tree, &compute_s, &link_s, OrderPolicy::Optimal).unwrap();
        let config = ScatterConfig {
            transfer: TransferId(1),
            max_frame_payload,
            send_mode: if parallel {
                SendMode::Parallel
            } else {
                SendMode::Sequential
            },
        };
        let (sim_shares, sim_set) = sim_scatter(&group, &schedule, &load, config);

        let job = RootJob {
            collective: Collective::Scatter {
                schedule: schedule.clone(),
                parallel,
            },
            data: load.clone(),
            seed: 1,
            probe_period: None,
            max_frame_payload,
            source: None,
        };
        let (outcome, outs) = run_real(job).await;
        let mut real_shares = BTreeMap::new();
        let root = outcome.root_share.as_ref().expect("the root computed");
        real_shares.insert(NodeId(0), (root.offset, root.len, root.blake3.clone()));
        for n in &outcome.nodes {
            assert_eq!(n.status, RunStatus::Finished, "{what}");
            let s = n.share.as_ref().expect("every node computed");
            real_shares.insert(n.node, (s.offset, s.len, s.blake3.clone()));
            assert_eq!(outs[&n.node].report.share.as_ref(), Some(s), "{what}");
        }
        assert_eq!(sim_shares.len(), NODES, "{what}");
        assert_eq!(real_shares, sim_shares, "{what}: shares computed");
        // The kept shares partition the load, and hash to its slices.
        let mut next = 0;
        let mut by_offset: Vec<&Share> = sim_shares.values().collect();
        by_offset.sort();
        for (offset, len, hash) in by_offset {
            assert_eq!(*offset, next, "{what}");
            let slice = &load[*offset as usize..(*offset + *len) as usize];
            assert_eq!(blake3::hash(slice).to_hex().as_str(), hash, "{what}");
            next += len;
        }
        assert_eq!(next, load.len() as u64, "{what}");

        let real_set = real_frames(&outcome);
        assert_eq!(real_set, sim_set, "{what}: frames (from, to, kind)");
        // Shares go down every edge, finish reports up every edge.
        let kinds = |k: MessageKind| sim_set.keys().filter(|key| key.2 == k.name()).count();
        assert_eq!(kinds(ScatterMsg::SHARE), NODES - 1, "{what}");
        assert_eq!(kinds(ScatterMsg::SHARE_FINISHED), NODES - 1, "{what}");
        assert_eq!(sim_set.len(), 2 * (NODES - 1), "{what}");
    }
}
