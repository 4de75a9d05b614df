//! A tiny in-test driver: instant delivery, one FIFO queue, no network model. Every message goes
//! through the real wire format (encode, then a per-connection streaming decoder), compute tasks
//! complete at once, and sends asked to notify complete right after their delivery.

#![allow(dead_code)] // each test file uses part of it

pub mod records;

use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap, VecDeque};
use windrose_model::{random, ClusterId, NodeId};
use windrose_proto::frame::{self, Decoder, MessageKind};
use windrose_proto::scatter::ScatterMsg;
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::{Command, ComputeTask, Input, Output, Outputs, Protocol, Report, Time};
use windrose_trees::adaptive::AdaptiveTree;
use windrose_trees::{static_trees, Tree, TreeAlgorithm};

/// One frame on the wire.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameLog {
    pub from: NodeId,
    pub to: NodeId,
    pub kind: MessageKind,
    /// The data offset for data-carrying frames.
    pub offset: Option<u64>,
}

/// What a run produced, per node.
#[derive(Default, Debug)]
pub struct RunLog {
    /// Frames in the order they were handed to the driver.
    pub frames: Vec<FrameLog>,
    pub delivered: BTreeMap<NodeId, Vec<(u64, Bytes)>>,
    pub computed: BTreeMap<NodeId, Vec<ComputeTask>>,
    pub reports: BTreeMap<NodeId, Vec<Report>>,
    pub finished: BTreeMap<NodeId, usize>,
    pub wire_bytes: u64,
}

/// Runs `nodes` (started in the given order) until nothing is left to do.
pub fn run<P: Protocol>(nodes: &mut [P]) -> RunLog {
    let index: HashMap<NodeId, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.node(), i))
        .collect();
    let mut queue: VecDeque<(NodeId, Input)> =
        nodes.iter().map(|p| (p.node(), Input::Start)).collect();
    let mut decoders: HashMap<(NodeId, NodeId), Decoder> = HashMap::new();
    let mut log = RunLog::default();
    let mut out = Outputs::new();
    let mut step = 0u64;
    while let Some((me, input)) = queue.pop_front() {
        step += 1;
        assert!(step < 5_000_000, "the run does not end");
        let now = Time::from_nanos(step);
        nodes[index[&me]]
            .handle(now, input, &mut out)
            .unwrap_or_else(|e| panic!("node {me} rejected an input: {e}"));
        for output in out.drain() {
            match output {
                Output::Send(t) => {
                    let bytes = frame::encode(&t.message).unwrap();
                    assert_eq!(bytes.len(), frame::encoded_len(&t.message));
                    log.wire_bytes += bytes.len() as u64;
                    let dec = decoders.entry((me, t.to)).or_default();
                    dec.push(&bytes);
                    let message = dec.next_message().unwrap().expect("a whole frame");
                    assert_eq!(dec.next_message(), Ok(None));
                    assert_eq!(message, t.message);
                    let offset = match &message {
                        windrose_proto::Message::Broadcast(BroadcastMsg::Data(d)) => Some(d.offset),
                        windrose_proto::Message::Scatter(ScatterMsg::Share(s)) => Some(s.offset),
                        _ => None,
                    };
                    log.frames.push(FrameLog {
                        from: me,
                        to: t.to,
                        kind: message.kind(),
                        offset,
                    });
                    queue.push_back((t.to, Input::Message { from: me, message }));
                    if let Some(id) = t.notify {
                        queue.push_back((me, Input::SendComplete { to: t.to, id }));
                    }
                }
                Output::SetTimer { .. } | Output::CancelTimer(_) => {}
                Output::Deliver { offset, data, .. } => {
                    log.delivered.entry(me).or_default().push((offset, data))
                }
                Output::Compute(task) => {
                    queue.push_back((me, Input::Command(Command::ComputeDone { task: task.task })));
                    log.computed.entry(me).or_default().push(task);
                }
                Output::Report(r) => log.reports.entry(me).or_default().push(r),
                Output::Finished => *log.finished.entry(me).or_default() += 1,
                Output::Aborted(reason) => panic!("node {me} aborted: {reason}"),
            }
        }
    }
    log
}

/// The tree kinds the tests run over.
pub const TREE_KINDS: [&str; 7] = [
    "binomial",
    "magpie",
    "mst",
    "max-bottleneck",
    "flat",
    "balanced-path",
    "random",
];

/// A tree of `kind` over `n` nodes rooted at `root`, on a random hop matrix and cluster map.
pub fn make_tree(kind: &str, n: usize, root: NodeId, seed: u64) -> Tree {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let costs = random::uniform_hops(&mut rng, n, 10);
    match kind {
        "balanced-path" => AdaptiveTree::balanced_path(&costs, root).unwrap().to_tree(),
        "random" => random_tree(n, root, &mut rng),
        // The hops read as capacities: the widest tree, a shape unlike the MST's (the
        // algorithm itself builds the MST from hops).
        "max-bottleneck" => static_trees::max_bottleneck_tree(&costs, root).unwrap(),
        name => {
            let algo: TreeAlgorithm = name.parse().unwrap();
            let c = rng.gen_range(1..=3usize);
            let clusters: Vec<ClusterId> = (0..n).map(|i| ClusterId::from(i % c)).collect();
            algo.build(&costs, Some(&clusters), root).unwrap()
        }
    }
}

/// A random recursive tree: nodes join in a random order, each under a random earlier one.
pub fn random_tree(n: usize, root: NodeId, rng: &mut ChaCha8Rng) -> Tree {
    let mut order: Vec<NodeId> = (0..n).map(NodeId::from).filter(|&x| x != root).collect();
    order.shuffle(rng);
    let mut placed = vec![root];
    let mut edges = Vec::new();
    for c in order {
        let p = placed[rng.gen_range(0..placed.len())];
        edges.push((c, p));
        placed.push(c);
    }
    Tree::from_edges(n, root, &edges).unwrap()
}

/// `len` seeded random bytes.
pub fn random_bytes(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}
