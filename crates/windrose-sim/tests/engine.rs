//! The engine running protocol machines over the flow-level network: determinism of the event
//! log, tree broadcast delivering every byte for every tree algorithm on random platforms,
//! closed forms on chains (store-and-forward and pipelined), divisible-load scatter finishing
//! when the schedule predicts, failure injection and run limits.

use crate::engine_common;

use engine_common::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::scatter::{plan, ScatterConfig, SendMode};
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_proto::Report;
use windrose_proto::TransferId;
use windrose_sim::engine::{
    broadcast, broadcast_with, scatter, FailureNotice, MemoryLog, NotifyPeers, RunLimits,
    SimConfig, SimError,
};
use windrose_sim::metrics::{Limit, Metrics, NodeOutcome};
use windrose_sim::network::{Change, SharingPolicy};
use windrose_trees::dlt::{self, OrderPolicy};
use windrose_trees::Tree;

fn n(i: u32) -> NodeId {
    NodeId(i)
}

// ---------------------------------------------------------------------------------------------
// Determinism

/// A broadcast on two clusters with RTT-weighted sharing, a WAN capacity change and a failure.
fn eventful_run(log: &MemoryLog) -> Metrics {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(5, 1e6, 4e6, 1e-4))
        .cluster(ClusterSpec::uniform(4, 2e6, 3e6, 2e-4))
        .wan_all(1.5e6, 0.02)
        .build()
        .unwrap();
    let clusters = cluster_map(&p);
    let tree = make_tree("binomial", &clusters, n(0), 3);
    let mut cfg = BroadcastConfig::new(TransferId(5), 10_000);
    cfg.max_frame_payload = 4096;
    cfg.idle_timeout = Some(std::time::Duration::from_millis(500));
    let mut sim = broadcast(
        p,
        &tree,
        random_bytes(200_000, 1),
        cfg,
        SharingPolicy::RttWeighted,
    )
    .unwrap();
    sim.set_event_log(Box::new(log.clone()));
    sim.schedule_change(
        0.05,
        Change::Capacity {
            link: LinkId::Wan {
                from: ClusterId(0),
                to: ClusterId(1),
            },
            bytes_s: 5e5,
        },
    )
    .unwrap();
    sim.fail_node_at(n(6), 0.08).unwrap();
    sim.run().unwrap()
}

#[test]
fn same_setup_gives_a_byte_identical_event_log() {
    let (a, b) = (MemoryLog::new(), MemoryLog::new());
    let ma = eventful_run(&a);
    let mb = eventful_run(&b);
    let (la, lb) = (a.contents(), b.contents());
    assert!(la.len() > 10_000, "the log has {} bytes", la.len());
    assert_eq!(la, lb);
    assert_eq!(
        serde_json::to_string(&ma).unwrap(),
        serde_json::to_string(&mb).unwrap()
    );
    // Every line is a JSON object with a time, a node and an event name; times never go back.
    let mut last = 0.0;
    let mut kinds = std::collections::BTreeSet::new();
    for line in String::from_utf8(la).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["t"].as_f64().unwrap();
        assert!(t >= last);
        last = t;
        assert!(v["node"].is_u64());
        kinds.insert(v["ev"].as_str().unwrap().to_string());
    }
    for k in [
        "start",
        "send",
        "recv",
        "deliver",
        "finished",
        "fail",
        "peer_failed",
    ] {
        assert!(kinds.contains(k), "no {k} event in the log: {kinds:?}");
    }
    // The failure did something.
    assert_eq!(ma.failed, 1);
    assert!(ma.totals.messages_dropped > 0 || ma.aborted > 0);
}

#[test]
fn different_setups_give_different_logs() {
    let a = MemoryLog::new();
    eventful_run(&a);
    let p = one_cluster(3, 1e6, 1e-3);
    let mut sim = broadcast(
        p,
        &chain(3),
        1000u64,
        BroadcastConfig::new(TransferId(1), 100),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    let b = MemoryLog::new();
    sim.set_event_log(Box::new(b.clone()));
    sim.run().unwrap();
    assert_ne!(a.contents(), b.contents());
    assert!(sim.take_event_log().unwrap().is_some());
}

// ---------------------------------------------------------------------------------------------
// Tree broadcast: every byte to every node, for every tree algorithm

#[allow(clippy::too_many_arguments)] // the proptest's parameters, one by one
fn check_broadcast(
    kind: &str,
    nodes: usize,
    root_pick: u32,
    seg: u64,
    frame: u32,
    len: usize,
    rtt: bool,
    seed: u64,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let p = random_platform(nodes, &mut rng);
    let root = n(root_pick % nodes as u32);
    let tree = make_tree(kind, &cluster_map(&p), root, seed);
    let payload = random_bytes(len, seed ^ 77);
    let mut cfg = BroadcastConfig::new(TransferId(9), seg);
    cfg.max_frame_payload = frame;
    let policy = if rtt {
        SharingPolicy::RttWeighted
    } else {
        SharingPolicy::MaxMin
    };
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::with_policy(policy)
    };
    let mut sim = broadcast_with(p, &tree, payload.clone(), cfg, config).unwrap();
    let m = sim.run().unwrap();
    assert!(m.all_finished(), "{kind}: not all finished\n{m}");
    assert!(m.errors.is_empty());
    for &v in tree.nodes() {
        let nm = m.node(v).unwrap();
        if v == root {
            assert_eq!(nm.app_bytes_delivered, 0);
            assert_eq!(nm.finished_at_s, Some(0.0));
            continue;
        }
        assert_eq!(nm.app_bytes_delivered, len as u64, "{kind}: node {v}");
        let mut got = Vec::with_capacity(len);
        for (offset, data) in sim.delivered(v) {
            assert_eq!(*offset, got.len() as u64, "{kind}: node {v} out of order");
            got.extend_from_slice(data);
        }
        assert_eq!(&got[..], &payload[..], "{kind}: node {v} got other bytes");
        // A node cannot finish before its parent's first byte could reach it.
        let parent = tree.parent(v).unwrap();
        let pf = m.node(parent).unwrap().started_at_s.unwrap();
        assert!(nm.finished_at_s.unwrap() >= pf);
    }
    let edges = (tree.len() - 1) as u64;
    assert_eq!(
        m.totals.wire_bytes_sent,
        edges * cfg.wire_bytes_per_edge(len as u64)
    );
    assert_eq!(m.totals.wire_bytes_delivered, m.totals.wire_bytes_sent);
    assert_eq!(
        m.totals.messages_sent,
        edges * cfg.frames_per_edge(len as u64)
    );
    assert_eq!(m.totals.app_bytes_delivered, edges * len as u64);
    // Every wire byte crossed its sender's uplink once.
    let up: f64 = tree
        .nodes()
        .iter()
        .map(|&v| m.link_bytes(LinkId::NodeUp(v)))
        .sum();
    assert!(close(up, m.totals.wire_bytes_sent as f64, 1e-9));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn broadcast_delivers_every_byte_for_every_tree(
        kind in 0..TREE_KINDS.len(),
        nodes in 1usize..=12,
        root_pick in any::<u32>(),
        seg in 1u64..=1500,
        frame in 1u32..=2000,
        len in prop_oneof![Just(0usize), 1usize..=4000],
        rtt in any::<bool>(),
        seed in any::<u64>(),
    ) {
        check_broadcast(TREE_KINDS[kind], nodes, root_pick, seg, frame, len, rtt, seed);
    }
}

#[test]
fn broadcast_every_tree_kind_once() {
    for (k, kind) in TREE_KINDS.iter().enumerate() {
        check_broadcast(kind, 10, 3, 700, 256, 5000, k % 2 == 0, k as u64);
    }
}

// ---------------------------------------------------------------------------------------------
// Closed forms on a chain

#[test]
fn store_and_forward_chain_matches_the_closed_form() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for case in 0..40 {
        let nodes = rng.gen_range(2..=9);
        let bw = rng.gen_range(1e4..1e8);
        let lat = if case % 4 == 0 {
            0.0
        } else {
            rng.gen_range(0.0..0.05)
        };
        let len = rng.gen_range(0..200_000u64);
        // One segment; frames of any size (they stream back to back on the connection).
        let mut cfg = BroadcastConfig::new(TransferId(1), len.max(1));
        cfg.max_frame_payload = rng.gen_range(1000..=300_000);
        let policy = if case % 2 == 0 {
            SharingPolicy::MaxMin
        } else {
            SharingPolicy::RttWeighted
        };
        let mut sim =
            broadcast(one_cluster(nodes, bw, lat), &chain(nodes), len, cfg, policy).unwrap();
        let m = sim.run().unwrap();
        let hop = lat + cfg.wire_bytes_per_edge(len) as f64 / bw;
        for d in 0..nodes {
            let f = m.node(NodeId::from(d)).unwrap().finished_at_s.unwrap();
            let want = d as f64 * hop;
            assert!(
                close(f, want, 1e-9),
                "case {case}: node {d} finished at {f}, closed form {want}"
            );
        }
    }
}

#[test]
fn pipelined_chain_matches_the_closed_form() {
    // S segments of s bytes, one frame each, on a uniform chain of N nodes: node d holds
    // segment k at d*L + (d + k)*t_seg, so the last node finishes at
    // (N-1)*L + (N-1 + S-1)*t_seg with t_seg = (s + 28) / B.
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for case in 0..40 {
        let nodes = rng.gen_range(2..=9usize);
        let bw = rng.gen_range(1e4..1e8);
        let lat = if case % 3 == 0 {
            0.0
        } else {
            rng.gen_range(0.0..0.02)
        };
        let s = rng.gen_range(1..50_000u64);
        let segments = rng.gen_range(1..=40u64);
        let cfg = BroadcastConfig::new(TransferId(1), s);
        assert_eq!(cfg.frames_per_edge(s * segments), segments);
        let policy = if case % 2 == 0 {
            SharingPolicy::MaxMin
        } else {
            SharingPolicy::RttWeighted
        };
        let mut sim = broadcast(
            one_cluster(nodes, bw, lat),
            &chain(nodes),
            s * segments,
            cfg,
            policy,
        )
        .unwrap();
        let m = sim.run().unwrap();
        let t_seg = cfg.wire_bytes_per_edge(s) as f64 / bw;
        for d in 1..nodes {
            let f = m.node(NodeId::from(d)).unwrap().finished_at_s.unwrap();
            let want = d as f64 * lat + (d as f64 + segments as f64 - 1.0) * t_seg;
            assert!(
                close(f, want, 1e-9),
                "case {case}: N={nodes} S={segments}: node {d} finished at {f}, closed form {want}"
            );
        }
        // Pipelining beats store-and-forward whenever there are several segments and hops.
        if segments > 1 && nodes > 2 {
            let sf = (nodes - 1) as f64 * (lat + cfg.wire_bytes_per_edge(s * segments) as f64 / bw);
            assert!(m.makespan_s.unwrap() < sf);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Divisible-load scatter: every node finishes when the schedule predicts

/// Checks a scatter of `load` bytes on a random tree: each parent->child route has one
/// bottleneck, the child's downlink of `bw[c]` bytes/s (uplinks are far faster), latency 0, so
/// the link time of a share is its wire bytes over `bw[c]`, as the schedule assumes.
fn check_dlt(
    nodes: usize,
    root_pick: u32,
    load: u64,
    frame: u32,
    optimal: bool,
    rtt: bool,
    seed: u64,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let root = n(root_pick % nodes as u32);
    let tree = random_tree(nodes, root, &mut rng);
    let bw: Vec<f64> = (0..nodes).map(|_| rng.gen_range(1e5..1e8)).collect();
    let speed: Vec<f64> = (0..nodes).map(|_| rng.gen_range(1e5..1e8)).collect();
    let mut b = Platform::builder().cluster(ClusterSpec::uniform(nodes, 1e15, 1e15, 0.0));
    for (i, &down) in bw.iter().enumerate() {
        b = b.node_capacity(NodeId::from(i), 1e15, down);
    }
    let platform = b.build().unwrap();
    let l = load as f64;
    let compute_s: Vec<f64> = speed.iter().map(|s| l / s).collect();
    let link_s: Vec<f64> = bw.iter().map(|b| l / b).collect();
    let policy = if optimal {
        OrderPolicy::Optimal
    } else {
        OrderPolicy::Given
    };
    let schedule = dlt::schedule(&tree, &compute_s, &link_s, policy).unwrap();
    let mut cfg = ScatterConfig::new(TransferId(4));
    cfg.max_frame_payload = frame;
    assert_eq!(cfg.send_mode, SendMode::Sequential);
    let sharing = if rtt {
        SharingPolicy::RttWeighted
    } else {
        SharingPolicy::MaxMin
    };
    let mut sim = scatter(platform, &schedule, load, cfg, &speed, sharing).unwrap();
    let m = sim.run().unwrap();
    assert!(m.all_finished(), "{m}");
    assert!(m.errors.is_empty(), "{:?}", m.errors);

    // The prediction: the schedule's store-and-forward, sequential-send model with the exact
    // bytes the machines use (plan) and the wire bytes that carry them.
    let plans = plan(&schedule, load).unwrap();
    let mut received_at = vec![0.0f64; nodes];
    let mut predicted = vec![0.0f64; nodes];
    for (share, p) in schedule.nodes.iter().zip(&plans) {
        assert_eq!(share.node, p.node);
        let mut t = received_at[share.node.index()];
        for send in &share.send_order {
            let c = send.child;
            let range = plans.iter().find(|q| q.node == c).unwrap().received.clone();
            t += cfg.wire_bytes_for_share(range) as f64 / bw[c.index()];
            received_at[c.index()] = t;
        }
        let kept = (p.kept.end - p.kept.start) as f64;
        predicted[share.node.index()] =
            received_at[share.node.index()] + kept / speed[share.node.index()];
    }
    let root_reports = &m.node(root).unwrap().reports;
    assert_eq!(root_reports.len(), nodes);
    for &v in tree.nodes() {
        let nm = m.node(v).unwrap();
        let done = nm.compute_done_at_s.unwrap();
        let want = predicted[v.index()];
        assert!(
            close(done, want, 1e-9),
            "node {v}: computed until {done}, predicted {want} (schedule: {})",
            schedule.predicted_finish_s
        );
        // The root heard the finish time the node's machine saw (nanoseconds).
        let heard = root_reports
            .iter()
            .find_map(|r| match r.report {
                Report::ShareFinished { node, at } if node == v => Some(at.as_secs_f64()),
                _ => None,
            })
            .unwrap();
        assert!((heard - done).abs() <= 1e-9 * done.max(1.0));
        assert_eq!(nm.compute_tasks, 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn dlt_scatter_finishes_when_the_schedule_predicts(
        nodes in 1usize..=14,
        root_pick in any::<u32>(),
        load in 10_000u64..=5_000_000,
        frame in prop_oneof![Just(1u32 << 20), 1000u32..=200_000],
        optimal in any::<bool>(),
        rtt in any::<bool>(),
        seed in any::<u64>(),
    ) {
        check_dlt(nodes, root_pick, load, frame, optimal, rtt, seed);
    }
}

#[test]
fn dlt_scatter_matches_the_schedules_own_finish_time() {
    // With a large load the rounding to bytes is negligible and the frame overhead (36 bytes
    // per MiB frame, 3.4e-5 of a link time) small: every node finishes within 1e-4 of the
    // schedule's fractional prediction.
    let nodes = 10;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let tree = random_tree(nodes, n(0), &mut rng);
    let bw: Vec<f64> = (0..nodes).map(|_| rng.gen_range(1e6..1e7)).collect();
    let speed: Vec<f64> = (0..nodes).map(|_| rng.gen_range(1e6..1e7)).collect();
    let load = 200_000_000u64;
    let mut b = Platform::builder().cluster(ClusterSpec::uniform(nodes, 1e15, 1e15, 0.0));
    for (i, &down) in bw.iter().enumerate() {
        b = b.node_capacity(NodeId::from(i), 1e15, down);
    }
    let l = load as f64;
    let compute_s: Vec<f64> = speed.iter().map(|s| l / s).collect();
    let link_s: Vec<f64> = bw.iter().map(|b| l / b).collect();
    let schedule = dlt::schedule(&tree, &compute_s, &link_s, OrderPolicy::Optimal).unwrap();
    let cfg = ScatterConfig::new(TransferId(1));
    let mut sim = scatter(
        b.build().unwrap(),
        &schedule,
        load,
        cfg,
        &speed,
        SharingPolicy::MaxMin,
    )
    .unwrap();
    let m = sim.run().unwrap();
    for s in &schedule.nodes {
        let done = m.node(s.node).unwrap().compute_done_at_s.unwrap();
        assert!(
            close(done, s.predicted_finish_s, 1e-4),
            "node {}: {done} vs schedule {}",
            s.node,
            s.predicted_finish_s
        );
    }
}

#[test]
fn parallel_scatter_on_random_platforms_computes_the_whole_load() {
    for seed in 0..20u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let nodes = rng.gen_range(1..=12);
        let p = random_platform(nodes, &mut rng);
        let tree = make_tree(
            TREE_KINDS[seed as usize % TREE_KINDS.len()],
            &cluster_map(&p),
            n(0),
            seed,
        );
        let compute_s: Vec<f64> = (0..nodes).map(|_| rng.gen_range(0.1..10.0)).collect();
        let link_s: Vec<f64> = (0..nodes).map(|_| rng.gen_range(0.0..5.0)).collect();
        let schedule = dlt::schedule(&tree, &compute_s, &link_s, OrderPolicy::Optimal).unwrap();
        let mut cfg = ScatterConfig::new(TransferId(3));
        cfg.send_mode = SendMode::Parallel;
        cfg.max_frame_payload = rng.gen_range(100..=100_000);
        let load = rng.gen_range(0..1_000_000u64);
        let speed: Vec<f64> = (0..nodes)
            .map(|i| if i % 3 == 0 { f64::INFINITY } else { 1e6 })
            .collect();
        let mut sim = scatter(p, &schedule, load, cfg, &speed, SharingPolicy::RttWeighted).unwrap();
        let m = sim.run().unwrap();
        assert!(m.all_finished(), "seed {seed}: {m}");
        assert!(m.errors.is_empty());
        let computed: u64 = m.nodes.iter().map(|x| x.compute_bytes).sum();
        assert_eq!(computed, load);
        assert_eq!(m.node(n(0)).unwrap().reports.len(), nodes);
        // The root finishes last: when the last report reached it.
        assert_eq!(m.makespan_s, m.node(n(0)).unwrap().finished_at_s);
    }
}

// ---------------------------------------------------------------------------------------------
// Failures

/// An 8-node binomial broadcast (one cluster) where node `victim` fails at `at`.
fn failing_broadcast(
    victim: NodeId,
    at: f64,
    notice: FailureNotice,
    idle: bool,
) -> (Tree, Metrics, Vec<String>) {
    let tree = windrose_trees::static_trees::binomial_all(8, n(0)).unwrap();
    let mut cfg = BroadcastConfig::new(TransferId(2), 20_000);
    if idle {
        // Above the gaps between segments (the root serves three children at 1 MB/s).
        cfg.idle_timeout = Some(std::time::Duration::from_millis(500));
    }
    let config = SimConfig {
        failure_notice: notice,
        ..SimConfig::default()
    };
    let mut sim =
        broadcast_with(one_cluster(8, 1e6, 1e-3), &tree, 1_000_000u64, cfg, config).unwrap();
    sim.fail_node_at(victim, at).unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    let m = sim.run().expect("a failure never makes the run hang");
    let lines = String::from_utf8(log.contents())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (tree, m, lines)
}

fn subtree(tree: &Tree, v: NodeId) -> Vec<NodeId> {
    let mut out = vec![v];
    let mut i = 0;
    while i < out.len() {
        out.extend_from_slice(tree.children(out[i]));
        i += 1;
    }
    out
}

#[test]
fn a_failure_mid_broadcast_is_announced_and_the_run_ends() {
    // Without failures the broadcast takes about 2 s; the victim fails at 0.5 s.
    let tree = windrose_trees::static_trees::binomial_all(8, n(0)).unwrap();
    let victim = *tree
        .nodes()
        .iter()
        .find(|&&v| {
            v != tree.root()
                && tree
                    .children(v)
                    .iter()
                    .any(|&c| !tree.children(c).is_empty())
        })
        .expect("a node with grandchildren");
    let (tree, m, lines) = failing_broadcast(victim, 0.5, FailureNotice::default(), false);
    let below = subtree(&tree, victim);
    let parent = tree.parent(victim).unwrap();
    assert_eq!(m.node(victim).unwrap().outcome, NodeOutcome::Failed);
    assert_eq!(m.node(victim).unwrap().failed_at_s, Some(0.5));
    // Its parent and children were told.
    for peer in std::iter::once(parent).chain(tree.children(victim).iter().copied()) {
        let told = lines.iter().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ev"] == "peer_failed" && v["node"] == peer.0 && v["peer"] == victim.0
        });
        assert!(told, "node {peer} was not told that {victim} failed");
    }
    // Its children re-attach to the root (which resends from the first segment they miss)
    // and feed their own subtrees: everyone but the victim finishes, with every byte.
    for &c in tree.children(victim) {
        let asked = lines.iter().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ev"] == "send" && v["node"] == c.0 && v["peer"] == 0 && v["msg"] == "request"
        });
        assert!(asked, "node {c} did not ask the root");
    }
    assert!(
        below.len() > 1 + tree.children(victim).len(),
        "grandchildren exist"
    );
    for &v in tree.nodes().iter().filter(|&&v| v != victim) {
        let nm = m.node(v).unwrap();
        assert_eq!(nm.outcome, NodeOutcome::Finished, "node {v}");
        if v != tree.root() {
            assert_eq!(nm.app_bytes_delivered, 1_000_000, "node {v}");
        }
    }
    assert_eq!(m.finished, 7);
    assert_eq!(m.failed, 1);
    assert!(m.totals.messages_dropped > 0);
}

#[test]
fn with_an_idle_timeout_the_nodes_below_a_failure_reattach_and_finish() {
    let tree = windrose_trees::static_trees::binomial_all(8, n(0)).unwrap();
    let victim = tree.children(n(0))[0];
    let (tree, m, _) = failing_broadcast(victim, 0.3, FailureNotice::default(), true);
    let below = subtree(&tree, victim);
    for &v in &below[1..] {
        assert_eq!(
            m.node(v).unwrap().outcome,
            NodeOutcome::Finished,
            "node {v}"
        );
    }
    assert_eq!(m.unfinished, 0);
    assert_eq!(m.aborted, 0);
    assert_eq!(m.finished, 7);
}

#[test]
fn connected_notice_reaches_only_peers_with_a_connection_after_the_delay() {
    let tree = windrose_trees::static_trees::binomial_all(8, n(0)).unwrap();
    let victim = tree.children(n(0))[0];
    let notice = FailureNotice {
        peers: NotifyPeers::Connected,
        delay_s: 0.25,
    };
    let (tree, _, lines) = failing_broadcast(victim, 0.3, notice, false);
    let told: Vec<(f64, u64)> = lines
        .iter()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["ev"] == "peer_failed")
                .then(|| (v["t"].as_f64().unwrap(), v["node"].as_u64().unwrap()))
        })
        .collect();
    let mut want: Vec<u64> = std::iter::once(n(0))
        .chain(tree.children(victim).iter().copied())
        .map(|v| u64::from(v.0))
        .collect();
    want.sort();
    let mut got: Vec<u64> = told.iter().map(|&(_, v)| v).collect();
    got.sort();
    assert_eq!(got, want);
    assert!(told.iter().all(|&(t, _)| close(t, 0.55, 1e-12)));
}

#[test]
fn a_node_failing_before_its_start_never_starts() {
    let mut sim = broadcast(
        one_cluster(3, 1e6, 0.0),
        &chain(3),
        10_000u64,
        BroadcastConfig::new(TransferId(1), 1000),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    sim.fail_node_at(n(1), 0.0).unwrap();
    let m = sim.run().unwrap();
    assert_eq!(m.node(n(1)).unwrap().outcome, NodeOutcome::Failed);
    assert_eq!(m.node(n(1)).unwrap().started_at_s, None);
    // Its child hears of it and re-attaches to the root.
    assert_eq!(m.node(n(2)).unwrap().outcome, NodeOutcome::Finished);
    assert_eq!(m.node(n(2)).unwrap().app_bytes_delivered, 10_000);
    assert_eq!(m.node(n(0)).unwrap().outcome, NodeOutcome::Finished);
}

// ---------------------------------------------------------------------------------------------
// Run limits

#[test]
fn a_time_limit_with_unfinished_nodes_is_a_clear_error() {
    let mut sim = broadcast(
        one_cluster(4, 1e6, 1e-3),
        &chain(4),
        1_000_000u64,
        BroadcastConfig::new(TransferId(1), 10_000),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    sim.set_limits(RunLimits {
        max_time_s: Some(0.5),
        max_events: None,
    });
    match sim.run() {
        Err(SimError::LimitReached {
            limit: Limit::Time { max_time_s },
            at_s,
            unfinished,
            ..
        }) => {
            assert_eq!(max_time_s, 0.5);
            assert!(at_s <= 0.5);
            assert_eq!(unfinished, vec![n(1), n(2), n(3)]);
        }
        other => panic!("expected a time limit error, got {other:?}"),
    }
    let text = sim.run().unwrap_err().to_string();
    assert!(
        text.contains("time limit of 0.5 s") && text.contains("1, 2, 3"),
        "{text}"
    );
    // The partial metrics are still there.
    let m = sim.metrics();
    assert!(m.node(n(1)).unwrap().app_bytes_delivered > 0);
}

#[test]
fn an_event_limit_stops_the_run() {
    let mut sim = broadcast(
        one_cluster(4, 1e6, 1e-3),
        &chain(4),
        1_000_000u64,
        BroadcastConfig::new(TransferId(1), 1000),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    sim.set_limits(RunLimits {
        max_time_s: None,
        max_events: Some(100),
    });
    let err = sim.run().unwrap_err();
    assert!(matches!(
        err,
        SimError::LimitReached {
            limit: Limit::Events { max_events: 100 },
            events: 100,
            ..
        }
    ));
}

#[test]
fn a_limit_after_every_node_ended_is_not_an_error() {
    // The root finishes at 0; the others too, long before the limit: the run is fine.
    let mut sim = broadcast(
        one_cluster(2, 1e6, 0.0),
        &chain(2),
        1000u64,
        BroadcastConfig::new(TransferId(1), 1000),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    sim.set_limits(RunLimits {
        max_time_s: Some(10.0),
        max_events: Some(1000),
    });
    let m = sim.run().unwrap();
    assert!(m.all_finished());
    assert_eq!(m.stopped_by, None);
}

#[test]
fn run_until_pauses_and_resumes_to_the_same_result() {
    let make = || {
        broadcast(
            one_cluster(5, 1e6, 1e-3),
            &windrose_trees::static_trees::binomial_all(5, n(0)).unwrap(),
            300_000u64,
            BroadcastConfig::new(TransferId(1), 10_000),
            SharingPolicy::MaxMin,
        )
        .unwrap()
    };
    let whole = make().run().unwrap();
    let mut sim = make();
    let mut t = 0.0;
    let mut pauses = 0;
    while sim.run_until(t).unwrap() == windrose_sim::engine::RunState::Paused {
        t += 0.05;
        pauses += 1;
    }
    assert!(pauses > 3);
    assert_eq!(sim.metrics(), whole);
}

// ---------------------------------------------------------------------------------------------
// Metrics

#[test]
fn metrics_count_links_and_serialize() {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(2, 1e6, 1e7, 0.0))
        .cluster(ClusterSpec::uniform(2, 1e6, 1e7, 0.0))
        .wan_all(5e5, 0.01)
        .build()
        .unwrap();
    let tree = Tree::from_edges(4, n(0), &[(n(2), n(0)), (n(3), n(2)), (n(1), n(0))]).unwrap();
    let cfg = BroadcastConfig::new(TransferId(1), 50_000);
    let mut sim = broadcast(p, &tree, 100_000u64, cfg, SharingPolicy::MaxMin).unwrap();
    let m = sim.run().unwrap();
    let wire = cfg.wire_bytes_per_edge(100_000) as f64;
    let wan = LinkId::Wan {
        from: ClusterId(0),
        to: ClusterId(1),
    };
    assert!(close(m.link_bytes(wan), wire, 1e-12));
    assert!(close(m.link_bytes(LinkId::NodeUp(n(0))), 2.0 * wire, 1e-12));
    assert_eq!(m.link_bytes(LinkId::NodeUp(n(1))), 0.0);
    assert_eq!(m.makespan_s, m.node(n(3)).unwrap().finished_at_s);
    let tp = m.throughput_bytes_s.unwrap();
    assert!(close(tp, 300_000.0 / m.makespan_s.unwrap(), 1e-12));
    assert!(m.node(n(1)).unwrap().throughput_bytes_s().unwrap() > 0.0);
    let json = serde_json::to_string_pretty(&m).unwrap();
    let back: Metrics = serde_json::from_str(&json).unwrap();
    assert_eq!(back.nodes.len(), m.nodes.len());
    assert_eq!(back.totals, m.totals);
    assert!(json.contains("\"kind\": \"wan\""));
    let table = m.to_string();
    assert!(table.contains("4 nodes: 4 finished"));
}

// ---------------------------------------------------------------------------------------------
// Restarts

#[test]
fn a_restarted_node_starts_again_with_its_new_machine_and_its_record_shows_both_lives() {
    use windrose_proto::tree_broadcast::TreeBroadcast;
    let tree = chain(2);
    let cfg = BroadcastConfig::new(TransferId(1), 1000);
    // 1 MB at 1 MB/s: the receiver fails at 0.3 s, long before the end, and is back at 0.5 s.
    let mut sim = broadcast(
        one_cluster(2, 1e6, 1e-3),
        &tree,
        1_000_000u64,
        cfg,
        SharingPolicy::MaxMin,
    )
    .unwrap();
    sim.fail_node_at(n(1), 0.3).unwrap();
    let fresh = TreeBroadcast::new(n(1), &tree, None, cfg).unwrap();
    sim.restart_node_at(Box::new(fresh), 0.5).unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    let m = sim.run().unwrap();
    let node = m.node(n(1)).unwrap();
    assert_eq!(node.restarts.len(), 1);
    assert_eq!(node.restarts[0].failed_at_s, 0.3);
    assert_eq!(node.restarts[0].restarted_at_s, 0.5);
    assert_eq!(node.failed_at_s, None);
    assert_eq!(node.started_at_s, Some(0.5));
    // The root took it for dead and finished; the new machine never hears from it again (a
    // broadcast receiver does not rejoin) and is still waiting, not failed.
    assert_eq!(node.outcome, NodeOutcome::Running);
    assert_eq!(m.node(n(0)).unwrap().outcome, NodeOutcome::Finished);
    let text = String::from_utf8(log.contents()).unwrap();
    assert!(text
        .lines()
        .any(|l| l.contains("\"ev\":\"restart\"") && l.contains("\"node\":1")));
    // Nothing the first life was sent arrives in the second: every delivery is before 0.3 s.
    for line in text.lines().filter(|l| l.contains("\"ev\":\"recv\"")) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["node"] == 1 {
            assert!(v["t"].as_f64().unwrap() <= 0.3, "{line}");
        }
    }
}

#[test]
fn restarting_a_live_node_is_an_error_and_keeps_its_machine() {
    use windrose_proto::tree_broadcast::TreeBroadcast;
    let tree = chain(2);
    let cfg = BroadcastConfig::new(TransferId(1), 1000);
    let mut sim = broadcast(
        one_cluster(2, 1e6, 1e-3),
        &tree,
        10_000u64,
        cfg,
        SharingPolicy::MaxMin,
    )
    .unwrap();
    let fresh = TreeBroadcast::new(n(1), &tree, None, cfg).unwrap();
    sim.restart_node_at(Box::new(fresh), 0.001).unwrap();
    let m = sim.run().unwrap();
    assert_eq!(m.errors.len(), 1, "{:?}", m.errors);
    assert!(
        m.errors[0].error.contains("has not failed"),
        "{:?}",
        m.errors
    );
    let node = m.node(n(1)).unwrap();
    assert!(node.restarts.is_empty());
    assert_eq!(node.outcome, NodeOutcome::Finished);
}
