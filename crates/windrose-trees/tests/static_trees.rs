//! Static broadcast trees: golden trees (MPICH positions, MagPIe layout, the six-site example of
//! Thomé & Drummond), property tests against independent implementations (petgraph's Kruskal, a
//! tie-aware Kruskal, Floyd–Warshall widest paths), and bad input.

use petgraph::algo::min_spanning_tree;
use petgraph::data::Element;
use petgraph::graph::UnGraph;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use windrose_model::{ClusterCosts, ClusterId, CostUnit, DenseCostMatrix, LinkCosts, NodeId};
use windrose_trees::static_trees::{
    binomial, binomial_all, flat, flat_all, magpie, max_bottleneck_tree, minimum_spanning_tree,
    minimum_spanning_tree_over,
};
use windrose_trees::{static_trees, Tree, TreeAlgorithm, TreeError};

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn ids(v: &[u32]) -> Vec<NodeId> {
    v.iter().copied().map(NodeId).collect()
}

/// The tree has exactly `members` (each once), N-1 edges, and every member reaches the root.
fn assert_spanning(t: &Tree, members: &[NodeId]) {
    let want: BTreeSet<NodeId> = members.iter().copied().collect();
    let got: BTreeSet<NodeId> = t.nodes().iter().copied().collect();
    assert_eq!(t.nodes().len(), got.len(), "a node appears twice");
    assert_eq!(got, want);
    assert_eq!(t.edges().len(), members.len() - 1);
    assert!(want.contains(&t.root()));
    for &m in members {
        assert!(t.contains(m));
        let mut hops = 0;
        let mut x = m;
        while let Some(p) = t.parent(x) {
            x = p;
            hops += 1;
            assert!(hops < members.len(), "cycle above {m}");
        }
        assert_eq!(x, t.root());
    }
}

/// Subtree heights (a leaf has 0), indexed by node id.
fn heights(t: &Tree) -> Vec<u32> {
    let mut h = vec![0u32; t.node_count()];
    for &u in t.nodes().iter().rev() {
        if let Some(p) = t.parent(u) {
            h[p.index()] = h[p.index()].max(h[u.index()] + 1);
        }
    }
    h
}

/// Children are sent deepest subtree first, ties by ascending id.
fn assert_deepest_first(t: &Tree) {
    let h = heights(t);
    for &u in t.nodes() {
        let kids = t.children(u);
        for w in kids.windows(2) {
            let (a, b) = (w[0], w[1]);
            let ok = h[a.index()] > h[b.index()] || (h[a.index()] == h[b.index()] && a < b);
            assert!(ok, "children of {u} out of order: {kids:?}");
        }
    }
}

fn matrix_from_upper(n: usize, upper: &[f64]) -> DenseCostMatrix<f64> {
    let mut it = upper.iter();
    DenseCostMatrix::from_fn(CostUnit::LatencyMs, n, |_, _| *it.next().unwrap())
}

fn edge_set(t: &Tree, costs: &impl LinkCosts) -> BTreeSet<(NodeId, NodeId, u64)> {
    t.edges()
        .into_iter()
        .map(|(c, p)| (c.min(p), c.max(p), costs.cost(c, p).to_bits()))
        .collect()
}

/// Kruskal with the strict order (w, min id, max id), over `nodes`: the unique MST.
fn kruskal_with_ties(costs: &impl LinkCosts, nodes: &[NodeId]) -> BTreeSet<(NodeId, NodeId, u64)> {
    let mut edges = Vec::new();
    for (i, &a) in nodes.iter().enumerate() {
        for &b in &nodes[i + 1..] {
            edges.push((costs.cost(a, b), a.min(b), a.max(b)));
        }
    }
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let mut uf: BTreeMap<NodeId, NodeId> = nodes.iter().map(|&v| (v, v)).collect();
    fn find(uf: &mut BTreeMap<NodeId, NodeId>, v: NodeId) -> NodeId {
        let p = uf[&v];
        if p == v {
            return v;
        }
        let r = find(uf, p);
        uf.insert(v, r);
        r
    }
    let mut out = BTreeSet::new();
    for (w, a, b) in edges {
        let (ra, rb) = (find(&mut uf, a), find(&mut uf, b));
        if ra != rb {
            uf.insert(ra, rb);
            out.insert((a, b, w.to_bits()));
        }
    }
    out
}

fn petgraph_mst_total(costs: &impl LinkCosts) -> f64 {
    let k = costs.node_count();
    let mut g = UnGraph::<(), f64>::new_undirected();
    let v: Vec<_> = (0..k).map(|_| g.add_node(())).collect();
    for i in 0..k {
        for j in i + 1..k {
            g.add_edge(v[i], v[j], costs.cost(NodeId::from(i), NodeId::from(j)));
        }
    }
    min_spanning_tree(&g)
        .filter_map(|e| match e {
            Element::Edge { weight, .. } => Some(weight),
            Element::Node { .. } => None,
        })
        .sum()
}

/// Widest-path (max-min) values between all pairs, by Floyd–Warshall.
fn widest_paths(bw: &impl LinkCosts) -> Vec<Vec<f64>> {
    let k = bw.node_count();
    let mut w: Vec<Vec<f64>> = (0..k)
        .map(|i| {
            (0..k)
                .map(|j| {
                    if i == j {
                        f64::INFINITY
                    } else {
                        bw.cost(NodeId::from(i), NodeId::from(j))
                    }
                })
                .collect()
        })
        .collect();
    for m in 0..k {
        for i in 0..k {
            for j in 0..k {
                let via = w[i][m].min(w[m][j]);
                if via > w[i][j] {
                    w[i][j] = via;
                }
            }
        }
    }
    w
}

/// The relative-rank rule: the member at rank r has the member at rank `r & (r - 1)` as parent.
fn assert_mpich_ranks(t: &Tree, members: &[NodeId], root: NodeId) {
    let mut sorted = members.to_vec();
    sorted.sort();
    let k = sorted.len();
    let ri = sorted.binary_search(&root).unwrap();
    let at = |r: usize| sorted[(ri + r) % k];
    for r in 1..k {
        assert_eq!(t.parent(at(r)), Some(at(r & (r - 1))), "rank {r}");
    }
    for r in 0..k {
        let want: Vec<NodeId> = windrose_trees::binomial::children(r, k).map(at).collect();
        assert_eq!(t.children(at(r)), want.as_slice(), "send order at rank {r}");
    }
}

// ---------------------------------------------------------------------------------------------
// Goldens
// ---------------------------------------------------------------------------------------------

#[test]
fn binomial_all_root0_is_mpich() {
    let t = binomial_all(8, n(0)).unwrap();
    assert_spanning(&t, &ids(&[0, 1, 2, 3, 4, 5, 6, 7]));
    for p in 1..8u32 {
        assert_eq!(t.parent(n(p)), Some(n(p & (p - 1))), "node {p}");
    }
    assert_eq!(t.children(n(0)), &ids(&[4, 2, 1])[..]);
    assert_eq!(t.children(n(4)), &ids(&[6, 5])[..]);
    assert_eq!(t.leaves(), ids(&[1, 3, 5, 7]));
}

#[test]
fn binomial_all_root3_shifts_ranks() {
    let t = binomial_all(8, n(3)).unwrap();
    let at = |r: u32| n((3 + r) % 8);
    for r in 1..8u32 {
        assert_eq!(t.parent(at(r)), Some(at(r & (r - 1))), "rank {r}");
    }
    assert_eq!(t.children(n(3)), &[at(4), at(2), at(1)]);
    assert_eq!(t.children(n(3)), &ids(&[7, 5, 4])[..]);
    assert_eq!(t.parent(n(2)), Some(n(1))); // rank 7 under rank 6
}

#[test]
fn binomial_over_a_subset() {
    let members = ids(&[9, 2, 30, 4, 17]);
    let t = binomial(&members, n(17)).unwrap();
    assert_spanning(&t, &members);
    // sorted: 2 4 9 17 30; ranks from 17: 17 30 2 4 9
    assert_eq!(t.children(n(17)), &ids(&[9, 2, 30])[..]);
    assert_eq!(t.parent(n(4)), Some(n(2)));
    assert!(!t.contains(n(3)));
}

#[test]
fn flat_sends_in_id_order() {
    let t = flat_all(5, n(2)).unwrap();
    assert_eq!(t.children(n(2)), &ids(&[0, 1, 3, 4])[..]);
    let t = flat(&ids(&[8, 3, 5]), n(5)).unwrap();
    assert_eq!(t.children(n(5)), &ids(&[3, 8])[..]);
    assert_eq!(t.len(), 3);
    let t = flat(&ids(&[6]), n(6)).unwrap();
    assert_eq!(t.len(), 1);
}

#[test]
fn magpie_three_clusters() {
    let costs = ClusterCosts::uniform(CostUnit::LatencyMs, 3, 4, 0.1, 20.0).unwrap();
    let t = magpie(&costs, costs.clusters(), n(5)).unwrap();
    assert_spanning(&t, &ids(&(0..12).collect::<Vec<_>>()));
    // WAN first (coordinators 0 and 8, ascending cluster), then the local binomial of
    // cluster 1 = [4 5 6 7] ranked from 5: 5 6 7 4 -> positions 2, 1 = nodes 7, 6.
    assert_eq!(t.children(n(5)), &ids(&[0, 8, 7, 6])[..]);
    assert_eq!(t.children(n(7)), &ids(&[4])[..]);
    assert_eq!(t.children(n(0)), &ids(&[2, 1])[..]);
    assert_eq!(t.children(n(2)), &ids(&[3])[..]);
    assert_eq!(t.children(n(8)), &ids(&[10, 9])[..]);
    assert_eq!(t.children(n(10)), &ids(&[11])[..]);
    let inter: Vec<_> = t
        .edges()
        .into_iter()
        .filter(|&(c, p)| costs.cluster_of(c) != costs.cluster_of(p))
        .collect();
    assert_eq!(inter, vec![(n(0), n(5)), (n(8), n(5))]);
    for v in 0..12u32 {
        // every node hangs below its own cluster's coordinator
        let coord = [n(0), n(5), n(8)][costs.cluster_of(n(v)).index()];
        let mut x = n(v);
        while x != coord {
            x = t.parent(x).unwrap();
            assert_eq!(costs.cluster_of(x), costs.cluster_of(n(v)));
        }
    }
}

#[test]
fn mst_ties_give_a_star_on_the_lowest_id() {
    // All costs equal: (w, min id, max id) prefers every edge at node 0.
    let costs = DenseCostMatrix::<f64>::zeros(CostUnit::Hops, 5);
    let t = minimum_spanning_tree(&costs, n(3)).unwrap();
    assert_eq!(t.children(n(3)), &ids(&[0])[..]);
    assert_eq!(t.children(n(0)), &ids(&[1, 2, 4])[..]);
}

#[test]
fn mst_sends_to_the_deepest_subtree_first() {
    // A path 0-1-2-3 plus a leaf 4 on node 0 (every other link is expensive).
    let cheap = [(0, 1), (1, 2), (2, 3), (0, 4)];
    let costs = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 5, |i, j| {
        if cheap.contains(&(i, j)) {
            1.0
        } else {
            10.0
        }
    });
    let t = minimum_spanning_tree(&costs, n(0)).unwrap();
    assert_eq!(t.children(n(0)), &ids(&[1, 4])[..]);
    let t = minimum_spanning_tree(&costs, n(1)).unwrap();
    assert_eq!(t.children(n(1)), &ids(&[0, 2])[..]); // heights 1 and 1: ascending id
    let t = minimum_spanning_tree(&costs, n(2)).unwrap();
    assert_eq!(t.children(n(2)), &ids(&[1, 3])[..]); // height 2 before height 0
}

#[test]
fn max_bottleneck_takes_the_wide_detour() {
    // 0-2 is thin (1 MB/s); 0-1-2 is wide (10 and 8 MB/s).
    let bw = DenseCostMatrix::<f64>::from_rows(
        CostUnit::BandwidthMbS,
        &[
            vec![0.0, 10.0, 1.0],
            vec![10.0, 0.0, 8.0],
            vec![1.0, 8.0, 0.0],
        ],
    )
    .unwrap();
    let t = max_bottleneck_tree(&bw, n(0)).unwrap();
    assert_eq!(t.parent(n(2)), Some(n(1)));
    assert_eq!(t.parent(n(1)), Some(n(0)));
}

/// Table 1 of Thomé & Drummond (seed 004): inter-site latencies in ms, six sites S0..S5 of four
/// processes each (S0 = 00-03, S1 = 04-07, ..., S5 = 20-23).
const SITES_MS: [[f64; 6]; 6] = windrose_model::fixtures::SEED004_SITES_MS;

fn six_sites_24_processes() -> ClusterCosts {
    let table: Vec<Vec<f64>> = SITES_MS.iter().map(|r| r.to_vec()).collect();
    let cluster_of = (0..24).map(|i| ClusterId::from(i / 4)).collect();
    ClusterCosts::new(CostUnit::LatencyMs, cluster_of, vec![0.0; 6], table).unwrap()
}

fn site_pairs(t: &Tree, costs: &ClusterCosts) -> BTreeSet<(u32, u32, u64)> {
    t.edges()
        .into_iter()
        .filter_map(|(c, p)| {
            let (a, b) = (costs.cluster_of(c).0, costs.cluster_of(p).0);
            (a != b).then(|| (a.min(b), a.max(b), costs.cost(c, p).to_bits()))
        })
        .collect()
}

fn expected_site_mst() -> BTreeSet<(u32, u32, u64)> {
    [
        (1, 4, 13.5),
        (0, 3, 14.9),
        (3, 5, 35.1),
        (3, 4, 331.0),
        (1, 2, 364.1),
    ]
    .into_iter()
    .map(|(a, b, w): (u32, u32, f64)| (a, b, w.to_bits()))
    .collect()
}

#[test]
fn paper004_site_level_mst() {
    let rows: Vec<Vec<f64>> = SITES_MS.iter().map(|r| r.to_vec()).collect();
    let sites = DenseCostMatrix::<f64>::from_rows(CostUnit::LatencyMs, &rows).unwrap();
    let t = minimum_spanning_tree(&sites, n(3)).unwrap();
    let got: BTreeSet<(u32, u32, u64)> = edge_set(&t, &sites)
        .into_iter()
        .map(|(a, b, w)| (a.0, b.0, w))
        .collect();
    assert_eq!(got, expected_site_mst());
    assert!((t.total_edge_cost(&sites) - 758.6).abs() < 1e-9);
}

#[test]
fn paper004_process_level_mst_uses_the_site_mst() {
    let costs = six_sites_24_processes();
    let t = minimum_spanning_tree(&costs, n(12)).unwrap();
    assert_spanning(&t, &ids(&(0..24).collect::<Vec<_>>()));
    assert_eq!(site_pairs(&t, &costs), expected_site_mst());
    assert!((t.total_edge_cost(&costs) - 758.6).abs() < 1e-9);
    assert_deepest_first(&t);
}

#[test]
fn paper004_mpich_vs_magpie_to_process_0() {
    let costs = six_sites_24_processes();
    let mpich = binomial_all(24, n(12)).unwrap();
    assert_eq!(mpich.parent(n(0)), Some(n(20)));
    assert_eq!(mpich.parent(n(20)), Some(n(12)));
    assert!((mpich.path_cost(n(0), &costs) - 96.5).abs() < 1e-9);
    // Process 8 (S2) also waits for two inter-site sends under MPICH-like: 12 -> 4 -> 8.
    assert_eq!(mpich.parent(n(8)), Some(n(4)));
    assert_eq!(mpich.parent(n(4)), Some(n(12)));

    let mag = magpie(&costs, costs.clusters(), n(12)).unwrap();
    assert_eq!(mag.parent(n(0)), Some(n(12)));
    assert!((mag.path_cost(n(0), &costs) - 14.9).abs() < 1e-9);
    assert_eq!(mag.parent(n(8)), Some(n(12)));
    assert_eq!(&mag.children(n(12))[..5], &ids(&[0, 4, 8, 16, 20])[..]);
    assert_eq!(site_pairs(&mag, &costs).len(), 5);
}

#[test]
fn every_algorithm_builds_a_spanning_tree() {
    let costs = ClusterCosts::uniform(CostUnit::LatencyMs, 3, 5, 0.5, 30.0).unwrap();
    let all = ids(&(0..15).collect::<Vec<_>>());
    for a in TreeAlgorithm::ALL {
        let t = a.build(&costs, Some(costs.clusters()), n(7)).unwrap();
        assert_eq!(t.root(), n(7), "{a}");
        assert_spanning(&t, &all);
    }
    assert_eq!(
        TreeAlgorithm::Mst.build(&costs, None, n(7)).unwrap(),
        minimum_spanning_tree(&costs, n(7)).unwrap()
    );
    assert_eq!(
        TreeAlgorithm::Binomial.build(&costs, None, n(7)).unwrap(),
        binomial_all(15, n(7)).unwrap()
    );
    assert_eq!(
        TreeAlgorithm::Chain.build(&costs, None, n(7)).unwrap(),
        static_trees::chain_all(15, n(7)).unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_root_is_reported() {
    let costs = ClusterCosts::uniform(CostUnit::LatencyMs, 2, 3, 0.1, 20.0).unwrap();
    let unknown = TreeError::UnknownNode {
        node: n(6),
        node_count: 6,
    };
    assert_eq!(binomial_all(6, n(6)), Err(unknown.clone()));
    assert_eq!(flat_all(6, n(6)), Err(unknown.clone()));
    assert_eq!(minimum_spanning_tree(&costs, n(6)), Err(unknown.clone()));
    assert_eq!(max_bottleneck_tree(&costs, n(6)), Err(unknown.clone()));
    assert_eq!(magpie(&costs, costs.clusters(), n(6)), Err(unknown.clone()));
    for a in TreeAlgorithm::ALL {
        assert_eq!(
            a.build(&costs, Some(costs.clusters()), n(6)),
            Err(unknown.clone())
        );
        assert_eq!(a.build(&costs, None, n(6)), Err(unknown.clone()));
    }
    assert_eq!(
        minimum_spanning_tree_over(&costs, &ids(&[0, 1, 9]), n(0)),
        Err(TreeError::UnknownNode {
            node: n(9),
            node_count: 6
        })
    );
    // A root that exists but is not among the members.
    assert!(matches!(
        binomial(&ids(&[1, 2]), n(5)),
        Err(TreeError::Invalid(m)) if m.contains("root 5")
    ));
    assert!(matches!(
        minimum_spanning_tree_over(&costs, &ids(&[1, 2]), n(0)),
        Err(TreeError::Invalid(_))
    ));
}

#[test]
fn empty_and_repeated_node_lists_are_rejected() {
    let costs = DenseCostMatrix::<f64>::zeros(CostUnit::Hops, 4);
    assert!(matches!(binomial(&[], n(0)), Err(TreeError::Invalid(_))));
    assert!(matches!(flat(&[], n(0)), Err(TreeError::Invalid(_))));
    assert!(matches!(binomial_all(0, n(0)), Err(TreeError::Invalid(_))));
    assert!(matches!(
        minimum_spanning_tree_over(&costs, &[], n(0)),
        Err(TreeError::Invalid(_))
    ));
    assert_eq!(
        binomial(&ids(&[3, 1, 3]), n(1)),
        Err(TreeError::Duplicate { node: n(3) })
    );
    assert_eq!(
        minimum_spanning_tree_over(&costs, &ids(&[0, 2, 2]), n(0)),
        Err(TreeError::Duplicate { node: n(2) })
    );
}

#[test]
fn cluster_map_problems_are_reported() {
    let costs = ClusterCosts::uniform(CostUnit::LatencyMs, 2, 3, 0.1, 20.0).unwrap();
    let short = &costs.clusters()[..4];
    for e in [
        magpie(&costs, short, n(0)).unwrap_err(),
        TreeAlgorithm::Magpie
            .build(&costs, Some(short), n(0))
            .unwrap_err(),
        TreeAlgorithm::Mst
            .build(&costs, Some(short), n(0))
            .unwrap_err(),
        TreeAlgorithm::Chain
            .build(&costs, Some(short), n(0))
            .unwrap_err(),
    ] {
        assert!(
            matches!(&e, TreeError::Invalid(m) if m.contains('4') && m.contains('6')),
            "{e}"
        );
    }
    assert_eq!(
        TreeAlgorithm::Magpie.build(&costs, None, n(0)),
        Err(TreeError::Invalid(
            "magpie needs a cluster map (one cluster per node)".into()
        ))
    );
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// A node count and the upper triangle of a symmetric matrix with integer weights 0..=5.
fn tied_matrix() -> impl Strategy<Value = (usize, Vec<f64>)> {
    (1usize..=40).prop_flat_map(|k| {
        (
            Just(k),
            prop::collection::vec((0u8..=5).prop_map(f64::from), k * (k - 1) / 2),
        )
    })
}

/// A node count and the upper triangle of a symmetric matrix with random f64 weights.
fn real_matrix(lo: f64) -> impl Strategy<Value = (usize, Vec<f64>)> {
    (1usize..=40).prop_flat_map(move |k| {
        (
            Just(k),
            prop::collection::vec(lo..1000.0f64, k * (k - 1) / 2),
        )
    })
}

fn check_mst(k: usize, upper: &[f64], root_seed: usize) -> Result<(), TestCaseError> {
    let costs = matrix_from_upper(k, upper);
    let root = NodeId::from(root_seed % k);
    let t = minimum_spanning_tree(&costs, root).unwrap();
    let all: Vec<NodeId> = (0..k).map(NodeId::from).collect();
    assert_spanning(&t, &all);
    assert_deepest_first(&t);
    let total = t.total_edge_cost(&costs);
    let reference = petgraph_mst_total(&costs);
    prop_assert!(
        (total - reference).abs() <= 1e-9 * reference.max(1.0),
        "prim {total} vs kruskal {reference}"
    );
    // With the (w, min id, max id) order the MST is unique: same edges as a tie-aware Kruskal.
    prop_assert_eq!(edge_set(&t, &costs), kruskal_with_ties(&costs, &all));
    Ok(())
}

proptest! {
    #[test]
    fn mst_matches_kruskal_with_many_ties((k, upper) in tied_matrix(), root in 0usize..40) {
        check_mst(k, &upper, root)?;
    }

    #[test]
    fn mst_matches_kruskal_real_weights((k, upper) in real_matrix(0.0), root in 0usize..40) {
        check_mst(k, &upper, root)?;
    }

    #[test]
    fn mst_over_subset_is_the_subset_mst(
        (k, upper) in tied_matrix(),
        pick in prop::collection::vec(any::<bool>(), 40),
        root in 0usize..40,
    ) {
        let costs = matrix_from_upper(k, &upper);
        let mut members: Vec<NodeId> =
            (0..k).filter(|&i| pick[i]).map(NodeId::from).collect();
        if members.is_empty() {
            members.push(NodeId(0));
        }
        let r = members[root % members.len()];
        let t = minimum_spanning_tree_over(&costs, &members, r).unwrap();
        assert_spanning(&t, &members);
        assert_deepest_first(&t);
        prop_assert_eq!(edge_set(&t, &costs), kruskal_with_ties(&costs, &members));
    }

    #[test]
    fn max_bottleneck_paths_are_widest(
        (k, upper) in prop_oneof![tied_matrix(), real_matrix(0.1)],
        root in 0usize..40,
    ) {
        let bw = matrix_from_upper(k, &upper);
        let root = NodeId::from(root % k);
        let t = max_bottleneck_tree(&bw, root).unwrap();
        let all: Vec<NodeId> = (0..k).map(NodeId::from).collect();
        assert_spanning(&t, &all);
        assert_deepest_first(&t);
        let widest = widest_paths(&bw);
        for &v in &all {
            if v == root {
                continue;
            }
            let mut bottleneck = f64::INFINITY;
            let mut x = v;
            while let Some(p) = t.parent(x) {
                bottleneck = bottleneck.min(bw.cost(p, x));
                x = p;
            }
            prop_assert_eq!(bottleneck, widest[root.index()][v.index()], "node {}", v);
        }
    }

    #[test]
    fn binomial_and_flat_span_their_members(
        pick in prop::collection::vec(any::<bool>(), 1..60),
        root in 0usize..60,
    ) {
        let mut members: Vec<NodeId> = pick
            .iter()
            .enumerate()
            .filter(|(_, &b)| b)
            .map(|(i, _)| NodeId::from(i))
            .collect();
        if members.is_empty() {
            members.push(NodeId::from(pick.len() - 1));
        }
        members.reverse(); // input order must not matter
        let r = members[root % members.len()];
        let t = binomial(&members, r).unwrap();
        assert_spanning(&t, &members);
        assert_mpich_ranks(&t, &members, r);
        let f = flat(&members, r).unwrap();
        assert_spanning(&f, &members);
        prop_assert_eq!(f.len() - 1, f.children(r).len());
    }

    #[test]
    fn magpie_spans_with_one_wan_edge_per_other_cluster(
        map in prop::collection::vec(0u32..6, 1..40),
        root in 0usize..40,
    ) {
        let k = map.len();
        let clusters: Vec<ClusterId> = map.iter().copied().map(ClusterId).collect();
        let costs = DenseCostMatrix::<f64>::zeros(CostUnit::LatencyMs, k);
        let root = NodeId::from(root % k);
        let t = magpie(&costs, &clusters, root).unwrap();
        let all: Vec<NodeId> = (0..k).map(NodeId::from).collect();
        assert_spanning(&t, &all);

        let mut by_cluster: BTreeMap<ClusterId, Vec<NodeId>> = BTreeMap::new();
        for &v in &all {
            by_cluster.entry(clusters[v.index()]).or_default().push(v);
        }
        let cluster = |v: NodeId| clusters[v.index()];
        let inter: Vec<(NodeId, NodeId)> =
            t.edges().into_iter().filter(|&(c, p)| cluster(c) != cluster(p)).collect();
        prop_assert_eq!(inter.len(), by_cluster.len() - 1);

        let mut wan_children = Vec::new();
        for (&c, members) in &by_cluster {
            let coord = if c == cluster(root) { root } else { members[0] };
            if coord != root {
                prop_assert_eq!(t.parent(coord), Some(root));
                wan_children.push(coord);
            }
            // Inside the cluster: exactly the binomial tree ranked from the coordinator.
            let local = binomial(members, coord).unwrap();
            for &v in members {
                if v != coord {
                    prop_assert_eq!(t.parent(v), local.parent(v));
                    prop_assert_eq!(t.children(v), local.children(v));
                }
            }
            let local_kids = local.children(coord);
            let kids = t.children(coord);
            prop_assert_eq!(&kids[kids.len() - local_kids.len()..], local_kids);
        }
        // WAN first at the root, in ascending cluster id.
        prop_assert_eq!(&t.children(root)[..wan_children.len()], &wan_children[..]);
    }
}

#[test]
fn chain_follows_relative_ranks() {
    let c = static_trees::chain_all(4, NodeId(2)).unwrap();
    assert_eq!(c.children(NodeId(2)), &[NodeId(3)]);
    assert_eq!(c.children(NodeId(3)), &[NodeId(0)]);
    assert_eq!(c.children(NodeId(0)), &[NodeId(1)]);
    assert!(c.children(NodeId(1)).is_empty());
    let c0 = static_trees::chain_all(5, NodeId(0)).unwrap();
    assert_eq!(c0.depth(NodeId(4)), 4);
    assert!(static_trees::chain_all(4, NodeId(4)).is_err());
}
