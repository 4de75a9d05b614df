//! Eager sessions that relay the announcement along the tree (issue 17, the session floor of
//! seed 004's Figs. 5 and 7), through one Host per node in the simulator, on a platform whose
//! latencies break the triangle inequality: the root's direct message to the last nodes of a
//! chain takes 1 s, the chain's path 20 ms. A member starts on its parent's copy, so its data
//! arrives at the tree path's time; the root's direct copy still starts a member whose parent
//! died before relaying; the same seed gives the same event log.

use bytes::Bytes;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::TransferId;
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::group::{group, leave_input, start_input};

/// One cluster of 4 nodes, 10 ms between any two (1 GB/s links), except 1 s between node 0
/// and nodes 2 and 3, both ways.
fn triangle_breaking() -> Platform {
    let mut b = Platform::builder().cluster(ClusterSpec::uniform(4, 1e9, 1e9, 0.010));
    for far in [2, 3] {
        b = b
            .pair_latency(NodeId(0), NodeId(far), 1.0)
            .pair_latency(NodeId(far), NodeId(0), 1.0);
    }
    b.build().unwrap()
}

/// The chain 0 -> 1 -> 2 -> 3: node 2 is 20 ms down the tree and 1 s from the root directly.
fn chain() -> CollectiveSpec {
    CollectiveSpec::Broadcast {
        tree: TreeSpec {
            node_count: 4,
            root: NodeId(0),
            edges: vec![
                (NodeId(1), NodeId(0)),
                (NodeId(2), NodeId(1)),
                (NodeId(3), NodeId(2)),
            ],
        },
        segment_bytes: 1024,
        max_frame_payload: 1024,
    }
}

const START_S: f64 = 1.0;
const DATA: &[u8] = b"24 bytes, as in seed 004";

/// One eager broadcast from node 0 at [`START_S`] (node `dead`, if any, failing at `dead_at`):
/// each node's first delivery time (None: nothing delivered), the root's completion
/// (finished, failed) and the event log.
fn run(relay: bool, dead: Option<(u32, f64)>) -> (Vec<Option<f64>>, (u32, u32), Vec<u8>) {
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(triangle_breaking(), config, 17, |c| {
        c.heartbeat = None;
        c.eager = true;
        c.relay_announce = relay;
    })
    .unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    if let Some((node, at)) = dead {
        sim.fail_node_at(NodeId(node), at).unwrap();
    }
    sim.input_at(
        NodeId(0),
        START_S,
        start_input(chain(), Bytes::from_static(DATA), Some(TransferId(5))),
    )
    .unwrap();
    for v in 0..4 {
        if dead.is_none_or(|d| d.0 != v) {
            sim.input_at(NodeId(v), 30.0, leave_input()).unwrap();
        }
    }
    let m = sim.run().unwrap();
    let c = m
        .completion(NodeId(0))
        .expect("the root's broadcast completes");
    let log = log.contents();
    let mut first = vec![None; 4];
    for line in log.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        if v["ev"] == "deliver" {
            let node = v["node"].as_u64().unwrap() as usize;
            first[node].get_or_insert(v["t"].as_f64().unwrap());
        }
    }
    for v in 1..4u32 {
        if dead.is_none_or(|d| d.0 != v) {
            let got: Vec<u8> = sim
                .delivered_of(NodeId(v), TransferId(5))
                .into_iter()
                .flat_map(|(_, b)| b.to_vec())
                .collect();
            assert!(got.is_empty() || got == DATA, "node {v}: {got:?}");
        }
    }
    (first, (c.finished, c.failed), log)
}

/// With the relay, node 2's first data arrives at the tree path's time (20 ms and the
/// transmissions), node 3's at 30 ms; without it, an eager member waits for the root's direct
/// announcement, 1 s away, whatever the tree.
#[test]
fn a_member_starts_on_the_tree_path_not_on_the_roots_direct_copy() {
    let (relay, done, _) = run(true, None);
    assert_eq!(done, (4, 0));
    let after = |t: Option<f64>| t.unwrap() - START_S;
    for (node, hops) in [(1usize, 1.0), (2, 2.0), (3, 3.0)] {
        let t = after(relay[node]);
        assert!(
            (hops * 0.010..hops * 0.010 + 0.001).contains(&t),
            "node {node}: first data {t} s after the start"
        );
    }
    let (direct, done, _) = run(false, None);
    assert_eq!(done, (4, 0));
    for node in [2usize, 3] {
        let t = after(direct[node]);
        assert!(t >= 1.0, "node {node} without the relay: {t} s");
    }
    assert!(after(direct[1]) < 0.011);
}

/// Node 1 dies 5 ms after the start, before the root's announcement reaches it, so it relays
/// nothing (every host hears of the failure at once). Node 2 starts on the root's direct copy
/// (1 s), re-attaches to the root, relays to node 3, and both get the data: the root completes
/// with the three live members.
#[test]
fn a_parent_dead_before_relaying_still_lets_its_child_take_part() {
    let (first, done, _) = run(true, Some((1, START_S + 0.005)));
    assert_eq!(first[1], None);
    let t2 = first[2].expect("node 2 got the data") - START_S;
    let t3 = first[3].expect("node 3 got the data") - START_S;
    // The direct copy (1 s), node 2's request to the root and its answer (1 s each).
    assert!((3.0..3.01).contains(&t2), "{t2}");
    assert!((3.0..3.02).contains(&t3) && t3 > t2, "{t3}");
    assert_eq!(done.0, 3, "{done:?}");
}

/// The same seed, the same event log, byte for byte (with and without a failure).
#[test]
fn the_same_seed_gives_the_same_event_log() {
    for dead in [None, Some((1, START_S + 0.005))] {
        let (_, _, a) = run(true, dead);
        let (_, _, b) = run(true, dead);
        assert!(!a.is_empty());
        assert_eq!(a, b);
    }
}
