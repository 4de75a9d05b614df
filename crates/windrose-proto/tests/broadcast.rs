//! Tree broadcast under the in-test driver, over every tree kind, random segment sizes, frame
//! sizes and payloads.

use crate::common;

use common::{make_tree, random_bytes, run, FrameLog, TREE_KINDS};
use proptest::prelude::*;
use std::collections::BTreeMap;
use windrose_model::NodeId;
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::tree_broadcast::{BroadcastConfig, TreeBroadcast};
use windrose_proto::{Protocol, Report, TransferId};
use windrose_trees::Tree;

/// The frames a node must send, in order: per segment, per child in send order, the segment's
/// chunks.
fn expected_sends(tree: &Tree, node: NodeId, cfg: &BroadcastConfig, total: u64) -> Vec<FrameLog> {
    let mut chunks_per_segment: Vec<Vec<u64>> = Vec::new();
    if total == 0 {
        chunks_per_segment.push(vec![0]);
    }
    let mut start = 0;
    while start < total {
        let end = (start + cfg.segment_bytes).min(total);
        chunks_per_segment.push(
            (start..end)
                .step_by(cfg.max_frame_payload as usize)
                .collect(),
        );
        start = end;
    }
    let mut frames = Vec::new();
    for chunks in &chunks_per_segment {
        for &child in tree.children(node) {
            for &offset in chunks {
                frames.push(FrameLog {
                    from: node,
                    to: child,
                    kind: BroadcastMsg::DATA,
                    offset: Some(offset),
                });
            }
        }
    }
    frames
}

fn check_broadcast(tree: &Tree, cfg: BroadcastConfig, payload_len: usize, seed: u64) {
    let message = random_bytes(payload_len, seed);
    let root = tree.root();
    let mut nodes: Vec<TreeBroadcast> = tree
        .nodes()
        .iter()
        .map(|&n| {
            let data = (n == root).then(|| message.clone());
            TreeBroadcast::new(n, tree, data, cfg).unwrap()
        })
        .collect();
    let log = run(&mut nodes);
    let total = payload_len as u64;

    for m in &nodes {
        let n = m.node();
        assert!(m.is_finished(), "node {n} did not finish");
        assert_eq!(
            log.finished.get(&n),
            Some(&1),
            "node {n} finished more than once"
        );
        let delivered = log.delivered.get(&n).cloned().unwrap_or_default();
        if n == root {
            assert!(delivered.is_empty(), "the root delivers nothing");
            continue;
        }
        // Delivered in order, contiguous, exactly the root's bytes.
        let mut next = 0;
        let mut bytes = Vec::new();
        for (offset, data) in &delivered {
            assert_eq!(*offset, next, "node {n} delivered out of order");
            next += data.len() as u64;
            bytes.extend_from_slice(data);
        }
        assert_eq!(bytes, message, "node {n} delivered other bytes");
        if total > 0 {
            let last_progress = log.reports[&n].iter().rev().find_map(|r| match r {
                Report::Progress {
                    done_bytes,
                    total_bytes,
                    ..
                } => Some((*done_bytes, *total_bytes)),
                _ => None,
            });
            assert_eq!(last_progress, Some((total, total)));
        }
    }

    // Exactly the frames the tree implies, each sender in segment-then-child order.
    let mut by_sender: BTreeMap<NodeId, Vec<FrameLog>> = BTreeMap::new();
    for f in &log.frames {
        by_sender.entry(f.from).or_default().push(f.clone());
    }
    for &n in tree.nodes() {
        let want = expected_sends(tree, n, &cfg, total);
        assert_eq!(
            by_sender.remove(&n).unwrap_or_default(),
            want,
            "frames of node {n}"
        );
    }
    assert!(by_sender.is_empty());
    let edges = tree.len() as u64 - 1;
    assert_eq!(log.frames.len() as u64, edges * cfg.frames_per_edge(total));
    // Wire accounting: the message once per edge plus 28 bytes per frame.
    assert_eq!(log.wire_bytes, edges * total + log.frames.len() as u64 * 28);
    assert_eq!(log.wire_bytes, edges * cfg.wire_bytes_per_edge(total));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_node_delivers_the_roots_bytes(
        kind in 0..TREE_KINDS.len(),
        n in 1usize..=20,
        root_pick in any::<u32>(),
        segment in 1u64..=64,
        frame_payload in 1u32..=40,
        len in prop_oneof![Just(0usize), 1usize..=700],
        seed in any::<u64>(),
    ) {
        let root = NodeId(root_pick % n as u32);
        let tree = make_tree(TREE_KINDS[kind], n, root, seed);
        let mut cfg = BroadcastConfig::new(TransferId(seed as u32), segment);
        cfg.max_frame_payload = frame_payload;
        check_broadcast(&tree, cfg, len, seed);
    }
}

#[test]
fn every_tree_kind_store_and_forward_and_pipelined() {
    for (i, kind) in TREE_KINDS.iter().enumerate() {
        let tree = make_tree(kind, 24, NodeId(5), i as u64);
        // One segment: store-and-forward.
        check_broadcast(&tree, BroadcastConfig::new(TransferId(1), 10_000), 5_000, 1);
        // Many segments, frames smaller than segments.
        let mut cfg = BroadcastConfig::new(TransferId(2), 256);
        cfg.max_frame_payload = 100;
        check_broadcast(&tree, cfg, 5_000, 2);
    }
}
