//! Divisible-load scatter under the in-test driver: every node computes exactly its share's
//! bytes, the shares partition the load, the root hears from every node, and the frames are
//! what the tree implies.

use crate::common;

use common::{make_tree, random_bytes, run, TREE_KINDS};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use windrose_model::NodeId;
use windrose_proto::frame::MessageKind;
use windrose_proto::scatter::ScatterMsg;
use windrose_proto::scatter::{plan, Scatter, ScatterConfig, SendMode, SharePlan};
use windrose_proto::{Protocol, Report, TransferId};
use windrose_trees::dlt::{self, OrderPolicy, Schedule};
use windrose_trees::Tree;

fn random_schedule(tree: &Tree, policy: OrderPolicy, seed: u64) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let n = tree.node_count();
    let compute: Vec<f64> = (0..n).map(|_| rng.gen_range(0.1..10.0)).collect();
    let links: Vec<f64> = (0..n).map(|_| rng.gen_range(0.0..5.0)).collect();
    dlt::schedule(tree, &compute, &links, policy).unwrap()
}

fn subtree_sizes(tree: &Tree) -> BTreeMap<NodeId, u64> {
    let mut size: BTreeMap<NodeId, u64> = tree.nodes().iter().map(|&n| (n, 1)).collect();
    for &n in tree.nodes().iter().rev() {
        if let Some(p) = tree.parent(n) {
            let s = size[&n];
            *size.get_mut(&p).unwrap() += s;
        }
    }
    size
}

fn check_scatter(tree: &Tree, schedule: &Schedule, cfg: ScatterConfig, len: usize, seed: u64) {
    let load = random_bytes(len, seed);
    let total = len as u64;
    let mut nodes = Scatter::all(schedule, load.clone(), cfg).unwrap();
    let log = run(&mut nodes);
    let plans: BTreeMap<NodeId, SharePlan> = plan(schedule, total)
        .unwrap()
        .into_iter()
        .map(|p| (p.node, p))
        .collect();
    assert_eq!(plans.len(), tree.len());

    // The kept ranges partition the load.
    let mut kept: Vec<_> = plans.values().map(|p| p.kept.clone()).collect();
    kept.sort_by_key(|r| (r.start, r.end));
    let mut next = 0;
    for r in &kept {
        assert_eq!(r.start, next, "kept ranges must tile the load");
        next = r.end;
    }
    assert_eq!(next, total);

    let root = tree.root();
    for m in &nodes {
        let n = m.node();
        let p = &plans[&n];
        assert!(m.is_finished(), "node {n} did not finish");
        assert_eq!(log.finished.get(&n), Some(&1));
        assert_eq!(m.share(), Some(p.received.clone()));
        assert_eq!(m.kept(), Some(p.kept.clone()));
        // Exactly one computation, over exactly the kept bytes.
        let tasks = &log.computed[&n];
        assert_eq!(tasks.len(), 1, "node {n} computed {} times", tasks.len());
        let task = &tasks[0];
        assert_eq!(
            (task.offset, task.offset + task.len),
            (p.kept.start, p.kept.end)
        );
        let bytes: Vec<u8> = task.data.iter().flat_map(|b| b.iter().copied()).collect();
        assert_eq!(
            &bytes[..],
            &load[p.kept.start as usize..p.kept.end as usize]
        );
        // Rounding: within one byte per level of the exact fraction of the load.
        let share = schedule.node(n).unwrap();
        let exact = share.fraction_kept * total as f64;
        let err = (task.len as f64 - exact).abs();
        assert!(
            err <= tree.depth(n) as f64 + 1.0 + 1e-6 * total as f64,
            "node {n}: kept {} bytes, exact {exact}",
            task.len
        );
    }

    // The root heard from every node exactly once, with its compute time.
    let mut heard: BTreeMap<NodeId, usize> = BTreeMap::new();
    for r in &log.reports[&root] {
        if let Report::ShareFinished { node, at } = r {
            *heard.entry(*node).or_default() += 1;
            let m = nodes.iter().find(|m| m.node() == *node).unwrap();
            assert_eq!(m.computed_at(), Some(*at));
        }
    }
    assert_eq!(heard.len(), tree.len());
    assert!(heard.values().all(|&c| c == 1));

    // Frames: share chunks down each edge, one report per subtree node up each edge.
    let sizes = subtree_sizes(tree);
    let mut counts: BTreeMap<(NodeId, NodeId, MessageKind), u64> = BTreeMap::new();
    for f in &log.frames {
        *counts.entry((f.from, f.to, f.kind)).or_default() += 1;
    }
    let mut want: BTreeMap<(NodeId, NodeId, MessageKind), u64> = BTreeMap::new();
    let mut wire = 0;
    for (c, p) in tree.edges() {
        wire += cfg.wire_bytes_for_share(plans[&c].received.clone()) + 24 * sizes[&c];
        let r = &plans[&c].received;
        let chunks = cfg.frames_for_share(r.clone());
        want.insert((p, c, ScatterMsg::SHARE), chunks);
        want.insert((c, p, ScatterMsg::SHARE_FINISHED), sizes[&c]);
    }
    assert_eq!(counts, want);
    assert_eq!(log.wire_bytes, wire);

    // Every parent sends its children's shares in send order, one child after the other.
    for &n in tree.nodes() {
        let order: Vec<NodeId> = log
            .frames
            .iter()
            .filter(|f| f.from == n && f.kind == ScatterMsg::SHARE)
            .map(|f| f.to)
            .collect();
        let mut dedup = order.clone();
        dedup.dedup();
        let send_order: Vec<NodeId> = schedule
            .node(n)
            .unwrap()
            .send_order
            .iter()
            .map(|s| s.child)
            .collect();
        assert_eq!(dedup, send_order, "node {n} send order");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_node_computes_exactly_its_share(
        kind in 0..TREE_KINDS.len(),
        n in 1usize..=20,
        root_pick in any::<u32>(),
        optimal in any::<bool>(),
        sequential in any::<bool>(),
        frame_payload in 1u32..=500,
        len in prop_oneof![Just(0usize), 1usize..=5000],
        seed in any::<u64>(),
    ) {
        let root = NodeId(root_pick % n as u32);
        let tree = make_tree(TREE_KINDS[kind], n, root, seed);
        let policy = if optimal { OrderPolicy::Optimal } else { OrderPolicy::Given };
        let schedule = random_schedule(&tree, policy, seed);
        let mut cfg = ScatterConfig::new(TransferId(7));
        cfg.max_frame_payload = frame_payload;
        cfg.send_mode = if sequential { SendMode::Sequential } else { SendMode::Parallel };
        check_scatter(&tree, &schedule, cfg, len, seed);
    }
}

#[test]
fn machines_built_one_by_one_match_all() {
    let tree = make_tree("binomial", 12, NodeId(3), 4);
    let schedule = random_schedule(&tree, OrderPolicy::Optimal, 4);
    let load = random_bytes(1000, 4);
    let cfg = ScatterConfig::new(TransferId(1));
    let mut one_by_one: Vec<Scatter> = schedule
        .nodes
        .iter()
        .map(|s| {
            let data = (s.node == tree.root()).then(|| load.clone());
            Scatter::new(s.node, &schedule, data, cfg).unwrap()
        })
        .collect();
    let a = run(&mut one_by_one);
    let mut all = Scatter::all(&schedule, load, cfg).unwrap();
    let b = run(&mut all);
    assert_eq!(a.frames, b.frames);
    assert_eq!(a.wire_bytes, b.wire_bytes);
}
