//! Tree multicast (Balanced Multicasting, MagPIe) under a small in-test driver: virtual time,
//! every message through the real wire format, 1 µs per message, timers honoured (so shaped
//! plans run too), and a hook that may tamper with frames.

use bytes::Bytes;
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::frame::{self, Decoder};
use windrose_proto::pieces::PieceMsg;
use windrose_proto::pieces::{Blake3Verifier, ClusterLayout, Manifest, SwarmSetup};
use windrose_proto::tree_multicast::{PlanTree, TreeMulticast, TreeMulticastConfig, TreePlan};
use windrose_proto::{Input, Message, Output, Outputs, Protocol, Report, Time, TransferId};
use windrose_trees::Tree;

/// One piece frame on the wire.
#[derive(Clone, Debug)]
struct PieceFrame {
    from: NodeId,
    to: NodeId,
    piece: u32,
    payload: Bytes,
}

#[derive(Default, Debug)]
struct RunLog {
    pieces: Vec<PieceFrame>,
    requests: Vec<(NodeId, NodeId, u32)>,
    delivered: BTreeMap<NodeId, Vec<(u64, Bytes)>>,
    progress: BTreeMap<NodeId, Vec<(u64, u64)>>,
    finished: BTreeMap<NodeId, (usize, Time)>,
    end: Time,
}

type Tamper<'a> = dyn FnMut(NodeId, NodeId, &Message) -> Option<Message> + 'a;

/// Runs the machines until no event is left; `tamper` may replace a frame in transit.
fn run(nodes: &mut [TreeMulticast], tamper: &mut Tamper<'_>) -> RunLog {
    let index: HashMap<NodeId, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.node(), i))
        .collect();
    let mut heap: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut events: HashMap<u64, (usize, Input, Option<u64>)> = HashMap::new();
    let mut timers: HashMap<(usize, u32), u64> = HashMap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<Reverse<(u64, u64)>>,
                    events: &mut HashMap<u64, (usize, Input, Option<u64>)>,
                    at: u64,
                    node: usize,
                    input: Input,
                    gen: Option<u64>| {
        seq += 1;
        heap.push(Reverse((at, seq)));
        events.insert(seq, (node, input, gen));
        seq
    };
    for i in 0..nodes.len() {
        push(&mut heap, &mut events, 0, i, Input::Start, None);
    }
    // Per ordered pair: FIFO arrival (at or after the previous message's).
    let mut link_free: HashMap<(usize, usize), u64> = HashMap::new();
    let mut decoders: HashMap<(usize, usize), Decoder> = HashMap::new();
    let mut log = RunLog::default();
    let mut out = Outputs::new();
    let mut steps = 0u64;
    while let Some(Reverse((now, id))) = heap.pop() {
        steps += 1;
        assert!(steps < 5_000_000, "the run does not end");
        let (i, input, gen) = events.remove(&id).unwrap();
        if let (Input::Timer(t), Some(g)) = (&input, gen) {
            if timers.get(&(i, t.0)) != Some(&g) {
                continue; // moved or cancelled
            }
            timers.remove(&(i, t.0));
        }
        let me = nodes[i].node();
        log.end = Time::from_nanos(now);
        nodes[i]
            .handle(Time::from_nanos(now), input, &mut out)
            .unwrap_or_else(|e| panic!("node {me} rejected an input: {e}"));
        for output in out.drain() {
            match output {
                Output::Send(t) => {
                    let message = tamper(me, t.to, &t.message).unwrap_or(t.message);
                    let bytes = frame::encode(&message).unwrap();
                    let j = index[&t.to];
                    let dec = decoders.entry((i, j)).or_default();
                    dec.push(&bytes);
                    let message = dec.next_message().unwrap().expect("a whole frame");
                    match &message {
                        Message::Pieces(PieceMsg::Piece(p)) => log.pieces.push(PieceFrame {
                            from: me,
                            to: t.to,
                            piece: p.piece,
                            payload: p.payload.clone(),
                        }),
                        Message::Pieces(PieceMsg::Request(r)) => {
                            log.requests.push((me, t.to, r.piece))
                        }
                        _ => {}
                    }
                    let free = link_free.entry((i, j)).or_default();
                    *free = (*free).max(now) + 1_000;
                    let at = *free;
                    push(
                        &mut heap,
                        &mut events,
                        at,
                        j,
                        Input::Message { from: me, message },
                        None,
                    );
                }
                Output::SetTimer { timer, at } => {
                    let g = push(
                        &mut heap,
                        &mut events,
                        at.as_nanos().max(now),
                        i,
                        Input::Timer(timer),
                        Some(0),
                    );
                    // The generation is the event id itself.
                    events.get_mut(&g).unwrap().2 = Some(g);
                    timers.insert((i, timer.0), g);
                }
                Output::CancelTimer(timer) => {
                    timers.remove(&(i, timer.0));
                }
                Output::Deliver { offset, data, .. } => {
                    log.delivered.entry(me).or_default().push((offset, data))
                }
                Output::Report(Report::Progress {
                    done_bytes,
                    total_bytes,
                    ..
                }) => log
                    .progress
                    .entry(me)
                    .or_default()
                    .push((done_bytes, total_bytes)),
                Output::Report(_) | Output::Compute(_) => {}
                Output::Finished => {
                    let e = log.finished.entry(me).or_insert((0, Time::ZERO));
                    e.0 += 1;
                    e.1 = Time::from_nanos(now);
                }
                Output::Aborted(reason) => panic!("node {me} aborted: {reason}"),
            }
        }
    }
    log
}

/// A random recursive tree over `0..n` rooted at `root`.
fn random_tree(n: usize, root: NodeId, rng: &mut ChaCha8Rng) -> Tree {
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

fn random_bytes(len: usize, rng: &mut ChaCha8Rng) -> Bytes {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

struct Case {
    data: Bytes,
    setup: SwarmSetup,
    plan: Arc<TreePlan>,
}

fn case(n: usize, trees: usize, len: usize, piece_len: u32, rated: bool, seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let root = NodeId::from(rng.gen_range(0..n));
    let data = random_bytes(len, &mut rng);
    let plan = TreePlan {
        trees: (0..trees)
            .map(|_| PlanTree {
                tree: random_tree(n, root, &mut rng),
                // Rates such that a piece takes 10-200 µs per edge: shaping matters next to
                // the driver's 1 µs per message, runs stay short.
                rate_bytes_s: rated.then(|| f64::from(piece_len) * rng.gen_range(5e3..1e5)),
            })
            .collect(),
    };
    let c = rng.gen_range(1..=3u32);
    let setup = SwarmSetup {
        transfer: TransferId(3),
        root,
        manifest: Arc::new(Manifest::build(&data, piece_len).unwrap()),
        layout: Arc::new(
            ClusterLayout::new((0..n as u32).map(|i| (NodeId(i), ClusterId(i % c)))).unwrap(),
        ),
        verifier: Arc::new(Blake3Verifier),
        keeper: None,
    };
    Case {
        data,
        setup,
        plan: Arc::new(plan),
    }
}

fn machines(c: &Case, config: TreeMulticastConfig) -> Vec<TreeMulticast> {
    (0..c.setup.layout.node_count() as u32)
        .map(|i| {
            let node = NodeId(i);
            let data = (node == c.setup.root).then(|| c.data.clone());
            TreeMulticast::new(node, &c.setup, data, c.plan.clone(), config).unwrap()
        })
        .collect()
}

/// Every node but the root got every byte, in order, with monotone progress ending complete,
/// and finished exactly once.
fn check_delivery(c: &Case, log: &RunLog) {
    let total = c.data.len() as u64;
    for i in 0..c.setup.layout.node_count() as u32 {
        let node = NodeId(i);
        assert_eq!(log.finished.get(&node).map(|f| f.0), Some(1), "node {node}");
        let progress = &log.progress[&node];
        assert!(progress.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(progress.last(), Some(&(total, total)), "node {node}");
        if node == c.setup.root {
            assert!(!log.delivered.contains_key(&node));
            continue;
        }
        let mut at = 0u64;
        let mut got = Vec::with_capacity(c.data.len());
        for (offset, d) in log.delivered.get(&node).map_or(&[][..], Vec::as_slice) {
            assert_eq!(*offset, at, "node {node}: in order");
            at += d.len() as u64;
            got.extend_from_slice(d);
        }
        assert_eq!(got, c.data, "node {node}");
    }
}

/// Every ordered pair carried, as a multiset, exactly the pieces of the trees that have that
/// edge, each once per such tree.
fn check_edges(c: &Case, log: &RunLog) {
    let count = c.setup.manifest.piece_count();
    let tree_of = c.plan.piece_trees(count);
    let mut want: BTreeMap<(NodeId, NodeId), Vec<u32>> = BTreeMap::new();
    for (k, t) in c.plan.trees.iter().enumerate() {
        for (child, parent) in t.tree.edges() {
            let e = want.entry((parent, child)).or_default();
            e.extend((0..count).filter(|&p| usize::from(tree_of[p as usize]) == k));
        }
    }
    let mut got: BTreeMap<(NodeId, NodeId), Vec<u32>> = BTreeMap::new();
    for f in &log.pieces {
        got.entry((f.from, f.to)).or_default().push(f.piece);
    }
    for v in want.values_mut().chain(got.values_mut()) {
        v.sort_unstable();
    }
    want.retain(|_, v| !v.is_empty());
    assert_eq!(got, want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_node_gets_every_byte_down_its_trees(
        n in 2usize..12,
        trees in 1usize..5,
        len in 0usize..5000,
        piece_len in 1u32..700,
        rated in any::<bool>(),
        shape in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let c = case(n, trees, len, piece_len, rated, seed);
        let config = TreeMulticastConfig { shape, ..TreeMulticastConfig::default() };
        let mut nodes = machines(&c, config);
        let log = run(&mut nodes, &mut |_, _, _| None);
        check_delivery(&c, &log);
        check_edges(&c, &log);
        prop_assert!(log.requests.is_empty());
        prop_assert!(nodes.iter().all(|m| m.is_finished() && m.queued_pieces() == 0));
    }

    #[test]
    fn pieces_are_dealt_in_proportion_to_the_rates(
        rates in prop::collection::vec(0.1f64..100.0, 1..6),
        count in 0u32..3000,
    ) {
        let t = Tree::from_edges(1, NodeId(0), &[]).unwrap();
        let plan = TreePlan {
            trees: rates
                .iter()
                .map(|&r| PlanTree { tree: t.clone(), rate_bytes_s: Some(r) })
                .collect(),
        };
        let total: f64 = rates.iter().sum();
        let dealt = plan.piece_trees(count);
        // Every prefix is split in proportion, within 1 - 1/(2n - 2) piece per tree (Tijdeman's
        // bound; the smooth weighted round robin once dealt a tree 1.003 pieces short here).
        let n = rates.len() as f64;
        let bound = if rates.len() > 1 { 1.0 - 1.0 / (2.0 * n - 2.0) } else { 0.0 };
        let mut got = vec![0u32; rates.len()];
        for (i, &k) in dealt.iter().enumerate() {
            got[usize::from(k)] += 1;
            for (k, &r) in rates.iter().enumerate() {
                let ideal = (i + 1) as f64 * r / total;
                prop_assert!((f64::from(got[k]) - ideal).abs() <= bound + 1e-6,
                    "tree {k} after {} pieces: {} vs {ideal}", i + 1, got[k]);
            }
        }
    }
}

#[test]
fn shaped_trees_keep_their_rates() {
    // One chain 0 -> 1 -> 2, 40 pieces of 1000 bytes at 1 MB/s: a piece per ms per edge.
    let mut c = case(3, 1, 40_000, 1000, true, 1);
    let edges = [(NodeId(1), NodeId(0)), (NodeId(2), NodeId(1))];
    let chain = Tree::from_edges(3, NodeId(0), &edges).unwrap();
    c.setup.root = NodeId(0);
    c.plan = Arc::new(TreePlan {
        trees: vec![PlanTree {
            tree: chain,
            rate_bytes_s: Some(1e6),
        }],
    });
    let mut nodes = machines(&c, TreeMulticastConfig::default());
    let log = run(&mut nodes, &mut |_, _, _| None);
    check_delivery(&c, &log);
    // The last piece leaves the root at 39 ms, reaches node 2 two hops (2 µs) later.
    let done = log.finished[&NodeId(2)].1.as_secs_f64();
    assert!((done - 0.039_002).abs() < 1e-6, "{done}");
    // Unshaped, the same run takes 41 µs (40 frames queued on the root's link, then one hop).
    let mut nodes = machines(
        &c,
        TreeMulticastConfig {
            shape: false,
            ..TreeMulticastConfig::default()
        },
    );
    let log = run(&mut nodes, &mut |_, _, _| None);
    assert_eq!(log.finished[&NodeId(2)].1, Time::from_micros(41));
}

#[test]
fn a_tampered_piece_is_dropped_refetched_and_never_forwarded() {
    for seed in 0..20 {
        let c = case(9, 2, 3000, 100, seed % 2 == 0, seed);
        let root = c.setup.root;
        // Corrupt the first piece the root sends to a child that has children of its own in
        // that piece's tree, so the bad copy would be forwarded if it were not checked.
        let tree_of = c.plan.piece_trees(c.setup.manifest.piece_count());
        let plan = c.plan.clone();
        let mut victim = None;
        let mut tamper = |from: NodeId, to: NodeId, m: &Message| -> Option<Message> {
            let Message::Pieces(PieceMsg::Piece(p)) = m else {
                return None;
            };
            let tree = &plan.trees[usize::from(tree_of[p.piece as usize])].tree;
            if victim.is_some() || from != root || tree.children(to).is_empty() {
                return None;
            }
            victim = Some((to, p.piece));
            let mut bad = p.clone();
            let mut v = bad.payload.to_vec();
            v[0] ^= 0xff;
            bad.payload = Bytes::from(v);
            Some(Message::Pieces(PieceMsg::Piece(bad)))
        };
        let mut nodes = machines(&c, TreeMulticastConfig::default());
        let log = run(&mut nodes, &mut tamper);
        check_delivery(&c, &log);
        let Some((to, piece)) = victim else { continue };
        assert_eq!(log.requests, vec![(to, root, piece)], "seed {seed}");
        // Every frame but the tampered one carries the right bytes: nobody forwarded it.
        let bad = log
            .pieces
            .iter()
            .filter(|f| {
                let r = c.setup.manifest.piece_range(f.piece).unwrap();
                f.payload != c.data.slice(r.start as usize..r.end as usize)
            })
            .count();
        assert_eq!(bad, 1, "seed {seed}");
    }
}

#[test]
fn a_relay_that_sends_a_bad_piece_is_dropped_and_the_root_serves_its_child() {
    let mut hit = 0;
    for seed in 0..20 {
        let c = case(9, 2, 3000, 100, seed % 2 == 0, seed);
        let root = c.setup.root;
        // Corrupt the first piece a relay (not the root) sends to its child.
        let mut victim = None;
        let mut tamper = |from: NodeId, to: NodeId, m: &Message| -> Option<Message> {
            let Message::Pieces(PieceMsg::Piece(p)) = m else {
                return None;
            };
            if victim.is_some() || from == root {
                return None;
            }
            victim = Some((from, to, p.piece));
            let mut bad = p.clone();
            let mut v = bad.payload.to_vec();
            v[0] ^= 0xff;
            bad.payload = Bytes::from(v);
            Some(Message::Pieces(PieceMsg::Piece(bad)))
        };
        let mut nodes = machines(&c, TreeMulticastConfig::default());
        let log = run(&mut nodes, &mut tamper);
        check_delivery(&c, &log);
        let Some((relay, child, piece)) = victim else {
            continue;
        };
        hit += 1;
        // The child asked the root (never the relay) for the bad piece, and for nothing else
        // from the relay.
        assert!(
            log.requests.contains(&(child, root, piece)),
            "seed {seed}: {:?}",
            log.requests
        );
        assert!(
            log.requests
                .iter()
                .all(|&(from, to, _)| !(from == child && to == relay)),
            "seed {seed}: {:?}",
            log.requests
        );
    }
    assert!(hit >= 10, "only {hit} cases had a relay");
}

#[test]
fn a_failed_relay_is_bypassed_through_the_root() {
    // Chain 0 -> 1 -> 2 -> 3; node 1 fails after forwarding 3 pieces: node 2 adopts the root.
    let mut c = case(4, 1, 1000, 100, false, 5);
    let edges = [
        (NodeId(1), NodeId(0)),
        (NodeId(2), NodeId(1)),
        (NodeId(3), NodeId(2)),
    ];
    c.setup.root = NodeId(0);
    c.data = Bytes::from((0..1000u32).map(|i| i as u8).collect::<Vec<_>>());
    c.setup.manifest = Arc::new(Manifest::build(&c.data, 100).unwrap());
    c.plan = Arc::new(TreePlan::single(
        Tree::from_edges(4, NodeId(0), &edges).unwrap(),
    ));
    let config = TreeMulticastConfig::default();
    let mut n2 = TreeMulticast::new(NodeId(2), &c.setup, None, c.plan.clone(), config).unwrap();
    let mut out = Outputs::new();
    n2.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    for p in 0..3u32 {
        let r = c.setup.manifest.piece_range(p).unwrap();
        let message = Message::Pieces(PieceMsg::Piece(windrose_proto::pieces::Piece {
            transfer: c.setup.transfer,
            piece: p,
            payload: c.data.slice(r.start as usize..r.end as usize),
        }));
        n2.handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(1),
                message,
            },
            &mut out,
        )
        .unwrap();
    }
    out.clear();
    n2.handle(Time::ZERO, Input::PeerFailed(NodeId(1)), &mut out)
        .unwrap();
    let asked: Vec<(NodeId, u32)> = out
        .as_slice()
        .iter()
        .filter_map(|o| match o {
            Output::Send(t) => match &t.message {
                Message::Pieces(PieceMsg::Request(r)) => Some((t.to, r.piece)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(asked, (3..10).map(|p| (NodeId(0), p)).collect::<Vec<_>>());
    assert!(!n2.is_finished());
    // A failed child is dropped: the relay does not wait for it.
    out.clear();
    n2.handle(Time::ZERO, Input::PeerFailed(NodeId(3)), &mut out)
        .unwrap();
    // The root's failure, with pieces still missing, aborts.
    n2.handle(Time::ZERO, Input::PeerFailed(NodeId(0)), &mut out)
        .unwrap();
    assert_eq!(n2.status(), windrose_proto::Status::Aborted);
}

#[test]
fn foreign_and_out_of_range_frames_are_rejected() {
    let c = case(3, 1, 500, 100, false, 9);
    let mut nodes = machines(&c, TreeMulticastConfig::default());
    let root = c.setup.root;
    let other = nodes.iter().map(|m| m.node()).find(|&x| x != root).unwrap();
    let parent = c.plan.trees[0].tree.parent(other).unwrap();
    let m = nodes.iter_mut().find(|m| m.node() == other).unwrap();
    let mut out = Outputs::new();
    m.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    out.clear();
    let piece = |transfer: u32, piece: u32| Input::Message {
        from: parent,
        message: Message::Pieces(PieceMsg::Piece(windrose_proto::pieces::Piece {
            transfer: TransferId(transfer),
            piece,
            payload: Bytes::from_static(b"x"),
        })),
    };
    assert!(matches!(
        m.handle(Time::ZERO, piece(99, 0), &mut out),
        Err(windrose_proto::ProtocolError::WrongTransfer { .. })
    ));
    assert!(matches!(
        m.handle(Time::ZERO, piece(3, 5), &mut out),
        Err(windrose_proto::ProtocolError::Inconsistent { .. })
    ));
    // A bad copy is dropped and asked again, MAX_BAD_COPIES times; then the sender is faulty.
    for _ in 0..windrose_proto::tree_multicast::MAX_BAD_COPIES {
        m.handle(Time::ZERO, piece(3, 0), &mut out).unwrap();
    }
    assert!(m.handle(Time::ZERO, piece(3, 0), &mut out).is_err());
    assert!(out
        .as_slice()
        .iter()
        .all(|o| matches!(o, Output::Send(t) if matches!(t.message, Message::Pieces(PieceMsg::Request(_))))));
    assert_eq!(m.store().held(), 0);
}

/// Issue 21, defect 2: a root whose data changed after its manifest was made checks each
/// piece before it first sends it: it sends the pieces before the changed one, then calls the
/// run off naming it (before, it sent bytes every child refused).
#[test]
fn a_root_whose_data_changed_calls_the_run_off_before_sending_it() {
    let c = case(6, 2, 20_000, 1000, false, 41);
    let mut changed = c.data.to_vec();
    changed[9 * 1000] ^= 0x04;
    let mut root = TreeMulticast::new(
        c.setup.root,
        &c.setup,
        Some(Bytes::from(changed)),
        c.plan.clone(),
        TreeMulticastConfig::default(),
    )
    .unwrap();
    let mut out = Outputs::new();
    root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    let sent: Vec<u32> = out
        .as_slice()
        .iter()
        .filter_map(|o| match o {
            Output::Send(t) => match &t.message {
                Message::Pieces(PieceMsg::Piece(p)) => Some(p.piece),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(!sent.contains(&9), "the changed piece was sent: {sent:?}");
    assert!(out.as_slice().contains(&Output::Aborted(
        windrose_proto::AbortReason::SourceChanged { piece: 9 }
    )));
    assert_eq!(root.status(), windrose_proto::Status::Aborted);
}
