//! The rows build of the maintained MST ([`BuildAlgorithm::Rows`]): every node sends its row
//! to every other and computes the tree itself. On random complete graphs with ties, whose two
//! ends of a link disagree on its weight, every node's tree is Kruskal's (petgraph, GHS's
//! order `(w, min id, max id)`) of the smaller ends' weights; repairs then keep it the exact
//! MST; a failure rebuilds by rows among the survivors, also when some survivors see the
//! failure while the rows gather; bad rows are refused.

use petgraph::data::Element;
use petgraph::graph::UnGraph;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use windrose_model::NodeId;
use windrose_proto::ghs_repair::{encode_row, BuildAlgorithm, MaintainedMst, MstNodeMsg};

/// A tree as the rows build holds it: `(node, parent)` by node.
type Parents = Vec<(NodeId, Option<NodeId>)>;

/// `w[a][b]`: node a's measurement of the link a-b.
type Rows = Vec<Vec<f64>>;

fn random_rows(rng: &mut ChaCha8Rng, n: usize) -> Rows {
    let mut w = vec![vec![0.0; n]; n];
    for (a, row) in w.iter_mut().enumerate() {
        for (b, x) in row.iter_mut().enumerate() {
            if a != b {
                // Few distinct values: many ties.
                *x = f64::from(rng.gen_range(0..6u32)) * 0.5;
            }
        }
    }
    w
}

/// Kruskal by petgraph over the smaller ends' weights, keyed `(w, lo, hi)`, without `gone`.
fn kruskal(w: &Rows, gone: &BTreeSet<u32>) -> BTreeSet<(u32, u32)> {
    let n = w.len();
    let mut g = UnGraph::<(), (f64, u32, u32)>::new_undirected();
    let nodes: Vec<_> = (0..n).map(|_| g.add_node(())).collect();
    for a in 0..n as u32 {
        for b in a + 1..n as u32 {
            if !gone.contains(&a) && !gone.contains(&b) {
                g.add_edge(
                    nodes[a as usize],
                    nodes[b as usize],
                    (w[a as usize][b as usize], a, b),
                );
            }
        }
    }
    petgraph::algo::min_spanning_tree(&g)
        .filter_map(|e| match e {
            Element::Edge {
                weight: (_, lo, hi),
                ..
            } => Some((lo, hi)),
            Element::Node { .. } => None,
        })
        .collect()
}

/// Per-pair FIFO links delivered in a seeded random order.
struct Net {
    nodes: Vec<MaintainedMst>,
    links: BTreeMap<(u32, u32), std::collections::VecDeque<MstNodeMsg>>,
    dead: BTreeSet<u32>,
    frames: BTreeMap<&'static str, u64>,
}

impl Net {
    fn new(w: &Rows, build: BuildAlgorithm) -> Net {
        Net::with_rebuild_after(w, build, None)
    }

    /// Nodes that rebuild when `k` changes wait at the root.
    fn with_rebuild_after(w: &Rows, build: BuildAlgorithm, k: Option<usize>) -> Net {
        let n = w.len() as u32;
        Net {
            nodes: (0..n)
                .map(|v| {
                    let row = (0..n)
                        .filter(|&b| b != v)
                        .map(|b| (NodeId(b), w[v as usize][b as usize]));
                    MaintainedMst::gathering(NodeId(v), row)
                        .unwrap()
                        .with_build(build)
                        .with_rebuild_after(k)
                })
                .collect(),
            links: BTreeMap::new(),
            dead: BTreeSet::new(),
            frames: BTreeMap::new(),
        }
    }

    fn push(&mut self, from: u32, out: Vec<(NodeId, MstNodeMsg)>) {
        for (to, m) in out {
            let kind = match &m {
                MstNodeMsg::Row { .. } => "row",
                MstNodeMsg::Hello { .. } => "hello",
                MstNodeMsg::Ghs { .. } => "ghs",
                MstNodeMsg::Repair { .. } => "repair",
                MstNodeMsg::Recover { .. } => "recover",
            };
            *self.frames.entry(kind).or_default() += 1;
            self.links.entry((from, to.0)).or_default().push_back(m);
        }
    }

    fn step(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let busy: Vec<(u32, u32)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&k, _)| k)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[rng.gen_range(0..busy.len())];
        let m = self
            .links
            .get_mut(&(from, to))
            .unwrap()
            .pop_front()
            .unwrap();
        if self.dead.contains(&to) {
            return true;
        }
        let mut out = Vec::new();
        self.nodes[to as usize]
            .handle(NodeId(from), m, &mut out)
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
        self.push(to, out);
        true
    }

    fn settle(&mut self, rng: &mut ChaCha8Rng) {
        let mut steps = 0u64;
        while self.step(rng) {
            steps += 1;
            assert!(steps < 10_000_000, "no end");
        }
    }

    fn start(&mut self, v: u32) {
        let mut out = Vec::new();
        self.nodes[v as usize].start(&mut out);
        self.push(v, out);
    }

    fn fail(&mut self, v: u32, seen_by: impl IntoIterator<Item = u32>) {
        self.dead.insert(v);
        for s in seen_by {
            let mut out = Vec::new();
            self.nodes[s as usize].peer_failed(NodeId(v), &mut out);
            self.push(s, out);
        }
    }

    /// Every live node's tree edges, `(lo, hi)`, as its maintainer holds them (each edge
    /// from both ends).
    fn branches(&self) -> BTreeSet<(u32, u32)> {
        let mut t = BTreeSet::new();
        for (v, m) in self.nodes.iter().enumerate() {
            if self.dead.contains(&(v as u32)) {
                continue;
            }
            let m = m
                .maintainer()
                .unwrap_or_else(|| panic!("node {v} not built"));
            assert!(m.is_stable(), "node {v}");
            for (b, _) in m.branch_edges() {
                let (a, b) = (v as u32, b.0);
                t.insert((a.min(b), a.max(b)));
            }
        }
        t
    }

    /// The tree every live node computed, checked equal at all of them.
    fn built(&self) -> BTreeSet<(u32, u32)> {
        let mut seen: Option<BTreeSet<(u32, u32)>> = None;
        for (v, m) in self.nodes.iter().enumerate() {
            if self.dead.contains(&(v as u32)) {
                continue;
            }
            let t: BTreeSet<(u32, u32)> = m
                .built_tree()
                .unwrap_or_else(|| panic!("node {v}: no tree"))
                .iter()
                .filter_map(|&(c, p)| p.map(|p| (c.0.min(p.0), c.0.max(p.0))))
                .collect();
            match &seen {
                Some(s) => assert_eq!(&t, s, "node {v}"),
                None => seen = Some(t),
            }
        }
        seen.unwrap()
    }
}

/// The smaller end's weight of every link (what the build used).
/// A random edge's smaller end feeds it a random weight, as the live service's owner of the
/// edge does (a node re-feeds its last measurement after a rebuild); `truth` follows.
fn feed_random_change(net: &mut Net, rng: &mut ChaCha8Rng, n: usize, truth: &mut Rows) {
    let a = rng.gen_range(0..n as u32 - 1);
    let b = rng.gen_range(a + 1..n as u32);
    let x = f64::from(rng.gen_range(0..8u32)) * 0.5;
    let mut out = Vec::new();
    net.nodes[a as usize]
        .change_weight(NodeId(b), x, &mut out)
        .unwrap();
    net.push(a, out);
    truth[a as usize][b as usize] = x;
    truth[b as usize][a as usize] = x;
}

fn symmetric(w: &Rows) -> Rows {
    let n = w.len();
    let mut s = w.clone();
    for a in 0..n {
        for b in 0..a {
            s[a][b] = w[b][a];
        }
    }
    s
}

#[test]
fn the_rows_build_is_kruskals_tree_at_every_node_then_repairs_keep_it_exact() {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    for case in 0..300 {
        let n = rng.gen_range(2..=32usize);
        let w = random_rows(&mut rng, n);
        let mut net = Net::new(&w, BuildAlgorithm::Rows);
        // Nodes start in a random order, some while rows are already arriving.
        let mut order: Vec<u32> = (0..n as u32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        for &v in &order {
            net.start(v);
            for _ in 0..rng.gen_range(0..3 * n) {
                net.step(&mut rng);
            }
        }
        net.settle(&mut rng);
        let mut truth = symmetric(&w);
        let want = kruskal(&truth, &BTreeSet::new());
        assert_eq!(net.built(), want, "case {case}");
        assert_eq!(net.branches(), want, "case {case}");
        // n (n - 1) rows and nothing else.
        assert_eq!(
            net.frames,
            BTreeMap::from([("row", (n * (n - 1)) as u64)]),
            "case {case}"
        );
        // The same weights built by GHS give the same tree.
        let mut ghs = Net::new(&w, BuildAlgorithm::Ghs);
        for v in 0..n as u32 {
            ghs.start(v);
        }
        ghs.settle(&mut rng);
        assert_eq!(ghs.branches(), want, "case {case}: GHS");

        // Changes fed at random ends, some during others' repairs: the exact MST after each
        // burst.
        if n < 3 {
            continue;
        }
        for _ in 0..3 {
            for _ in 0..rng.gen_range(1..4) {
                feed_random_change(&mut net, &mut rng, n, &mut truth);
                for _ in 0..rng.gen_range(0..n) {
                    net.step(&mut rng);
                }
            }
            net.settle(&mut rng);
            assert_eq!(
                net.branches(),
                kruskal(&truth, &BTreeSet::new()),
                "case {case}: after changes"
            );
        }
        // A failure seen by every survivor: a new generation built by rows.
        let gone = rng.gen_range(0..n as u32);
        let rest: Vec<u32> = (0..n as u32).filter(|&v| v != gone).collect();
        net.fail(gone, rest.iter().copied());
        net.settle(&mut rng);
        let gone_set = BTreeSet::from([gone]);
        let want = kruskal(&truth, &gone_set);
        assert_eq!(net.built(), want, "case {case}: after the failure");
        assert_eq!(net.branches(), want, "case {case}: after the failure");
        for &v in &rest {
            assert_eq!(net.nodes[v as usize].generation(), 1, "case {case}");
        }
    }
}

/// A member fails while the rows of a generation gather: some survivors see it before its
/// row reaches them, some after they built with it. No two survivors ever hold different
/// trees of one generation, and all end at the survivors' MST.
#[test]
fn a_failure_while_the_rows_gather_ends_at_the_survivors_tree() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for case in 0..300 {
        let n = rng.gen_range(3..=16usize);
        let w = random_rows(&mut rng, n);
        let mut net = Net::new(&w, BuildAlgorithm::Rows);
        let gone = rng.gen_range(0..n as u32);
        for v in 0..n as u32 {
            net.start(v);
        }
        // Some rows get through, then the member dies; the survivors' detectors see it one
        // by one, rows moving in between.
        for _ in 0..rng.gen_range(0..n * n) {
            net.step(&mut rng);
        }
        net.dead.insert(gone);
        let mut rest: Vec<u32> = (0..n as u32).filter(|&v| v != gone).collect();
        for i in (1..rest.len()).rev() {
            rest.swap(i, rng.gen_range(0..=i));
        }
        for &s in &rest {
            net.fail(gone, [s]);
            for _ in 0..rng.gen_range(0..2 * n) {
                net.step(&mut rng);
                // Whoever built in the current generation built the same tree.
                let mut by_gen: BTreeMap<u32, BTreeSet<Parents>> = BTreeMap::new();
                for &v in &rest {
                    let m = &net.nodes[v as usize];
                    if let Some(t) = m.built_tree() {
                        by_gen.entry(m.generation()).or_default().insert(t.to_vec());
                    }
                }
                assert!(
                    by_gen.values().all(|s| s.len() == 1),
                    "case {case}: {by_gen:?}"
                );
            }
        }
        net.settle(&mut rng);
        let want = kruskal(&symmetric(&w), &BTreeSet::from([gone]));
        assert_eq!(net.built(), want, "case {case}");
        assert_eq!(net.branches(), want, "case {case}");
    }
}

#[test]
fn bad_rows_are_refused_naming_why() {
    let w = vec![vec![1.0; 4]; 4];
    let mut net = Net::new(&w, BuildAlgorithm::Rows);
    net.start(0);
    let node = &mut net.nodes[0];
    let row = |ids: &[u32]| MstNodeMsg::Row {
        generation: 0,
        row: encode_row(&ids.iter().map(|&i| (NodeId(i), 1.0)).collect::<Vec<_>>()),
    };
    let refuse = |node: &mut MaintainedMst, from: u32, msg: MstNodeMsg, needle: &str| {
        let mut out = Vec::new();
        let e = node.handle(NodeId(from), msg, &mut out).unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
        assert!(out.is_empty());
    };
    refuse(node, 1, row(&[0, 1, 2, 3]), "naming its sender");
    refuse(node, 1, row(&[0, 2, 9]), "not a neighbour");
    refuse(
        node,
        1,
        MstNodeMsg::Hello {
            generation: 0,
            weight: 1.0,
        },
        "rows and GHS mixed",
    );
    let mut out = Vec::new();
    node.handle(NodeId(1), row(&[0, 2, 3]), &mut out).unwrap();
    // A second row may only drop members.
    refuse(node, 1, row(&[0, 2, 3]), "less failed members");
    let mut ghs = Net::new(&w, BuildAlgorithm::Ghs);
    ghs.start(0);
    refuse(&mut ghs.nodes[0], 1, row(&[0, 2, 3]), "rows and GHS mixed");
}

/// Bursts of changes (1-12 at random owners, delivered in random orders, many while repairs
/// run) on rows-built trees whose root rebuilds by rows when 2 or more wait for their epochs,
/// then a failure: after each burst the tree is the exact MST of the last weights fed, every
/// node at rest with nothing pending; backlogs were rebuilt, and lone changes repaired.
#[test]
fn backlog_rebuilds_by_rows_keep_the_tree_exact() {
    let mut rng = ChaCha8Rng::seed_from_u64(1704);
    let (mut rebuilds, mut epochs) = (0u64, 0u64);
    for case in 0..300 {
        let n = rng.gen_range(3..=24usize);
        let w = random_rows(&mut rng, n);
        let mut net = Net::with_rebuild_after(&w, BuildAlgorithm::Rows, Some(2));
        for v in 0..n as u32 {
            net.start(v);
        }
        net.settle(&mut rng);
        let mut truth = symmetric(&w);
        for burst in 0..4 {
            for _ in 0..rng.gen_range(1..=12) {
                feed_random_change(&mut net, &mut rng, n, &mut truth);
                for _ in 0..rng.gen_range(0..2 * n) {
                    net.step(&mut rng);
                }
            }
            net.settle(&mut rng);
            let ctx = format!("case {case}, burst {burst}");
            assert_eq!(net.branches(), kruskal(&truth, &BTreeSet::new()), "{ctx}");
            for (v, node) in net.nodes.iter().enumerate() {
                let m = node.maintainer().unwrap();
                assert_eq!((m.pending_len(), node.faults()), (0, 0), "{ctx}: node {v}");
                for b in (0..n as u32).filter(|&b| b != v as u32) {
                    assert_eq!(
                        m.weight(NodeId(b)),
                        Some(truth[v][b as usize]),
                        "{ctx}: {v}'s weight to {b}"
                    );
                }
            }
        }
        let gone = rng.gen_range(0..n as u32);
        let rest: Vec<u32> = (0..n as u32).filter(|&v| v != gone).collect();
        net.fail(gone, rest.iter().copied());
        net.settle(&mut rng);
        let want = kruskal(&truth, &BTreeSet::from([gone]));
        assert_eq!(net.built(), want, "case {case}: after the failure");
        assert_eq!(net.branches(), want, "case {case}: after the failure");
        for node in &net.nodes {
            let s = node.request_stats();
            rebuilds += s.rebuilds;
            epochs += s.epochs;
        }
    }
    eprintln!("300 cases: {rebuilds} backlog rebuilds, {epochs} epochs");
    assert!(
        rebuilds > 0 && epochs > 0,
        "{rebuilds} rebuilds, {epochs} epochs"
    );
}
