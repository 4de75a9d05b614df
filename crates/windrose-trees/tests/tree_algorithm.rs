//! `TreeAlgorithm`: its names (the ones command lines and scenario files have always used)
//! round-trip through FromStr, Display and serde, an unknown name lists the valid ones, and
//! every algorithm builds a spanning tree rooted where asked from dense and cluster costs.

use proptest::prelude::*;
use std::collections::BTreeSet;
use windrose_model::{ClusterCosts, ClusterId, CostUnit, DenseCostMatrix, LinkCosts, NodeId};
use windrose_trees::static_trees::{max_bottleneck_tree, minimum_spanning_tree};
use windrose_trees::{Tree, TreeAlgorithm, UnknownName};

/// The names `--algo`, `--tree` and `tree = "…"` accept, in help-text order.
const NAMES: [&str; 7] = [
    "balanced-path",
    "binomial",
    "magpie",
    "mst",
    "max-bottleneck",
    "flat",
    "chain",
];

#[test]
fn every_name_round_trips() {
    assert_eq!(TreeAlgorithm::NAMES, NAMES);
    assert_eq!(TreeAlgorithm::ALL.len(), NAMES.len());
    for (a, name) in TreeAlgorithm::ALL.into_iter().zip(NAMES) {
        assert_eq!(a.name(), name);
        assert_eq!(a.to_string(), name);
        assert_eq!(name.parse::<TreeAlgorithm>(), Ok(a));
        assert_eq!(format!(" {name}\n").parse::<TreeAlgorithm>(), Ok(a));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, format!("\"{name}\""));
        assert_eq!(serde_json::from_str::<TreeAlgorithm>(&json).unwrap(), a);
        // The name is the variant in kebab-case, as serde's `rename_all` would have it.
        let mut kebab = String::new();
        for (i, c) in format!("{a:?}").chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                kebab.push('-');
            }
            kebab.push(c.to_ascii_lowercase());
        }
        assert_eq!(kebab, name);
    }
}

#[test]
fn an_unknown_name_lists_the_valid_ones() {
    let e = "mts".parse::<TreeAlgorithm>().unwrap_err();
    assert_eq!(
        e,
        UnknownName {
            what: "tree algorithm",
            input: "mts".into(),
            expected: &NAMES,
        }
    );
    assert_eq!(
        e.to_string(),
        "unknown tree algorithm \"mts\": expected one of balanced-path, binomial, magpie, mst, \
         max-bottleneck, flat, chain"
    );
    // Names are case-sensitive, like every name in files and on the command line.
    assert!("MST".parse::<TreeAlgorithm>().is_err());
    let e = serde_json::from_str::<TreeAlgorithm>("\"kruskal\"").unwrap_err();
    assert!(
        e.to_string().contains("\"kruskal\"") && e.to_string().contains("max-bottleneck"),
        "{e}"
    );
    let e = serde_json::from_str::<TreeAlgorithm>("3").unwrap_err();
    assert!(e.to_string().contains("a tree algorithm: one of"), "{e}");
}

/// `t` holds every node `0..n` once, is rooted at `root`, and every node reaches the root.
fn assert_spanning(t: &Tree, n: usize, root: NodeId) {
    assert_eq!(t.root(), root);
    let got: BTreeSet<NodeId> = t.nodes().iter().copied().collect();
    assert_eq!(got.len(), t.nodes().len(), "a node appears twice");
    assert_eq!(got, (0..n).map(NodeId::from).collect());
    for v in (0..n).map(NodeId::from) {
        let mut x = v;
        let mut hops = 0;
        while let Some(p) = t.parent(x) {
            x = p;
            hops += 1;
            assert!(hops < n, "cycle above {v}");
        }
        assert_eq!(x, root, "{v} does not reach the root");
    }
}

/// A symmetric `n` x `n` table, zero on the diagonal, the pair `a < b` taking
/// `upper[k % upper.len()]` for its index `k` in the row-major upper triangle.
fn symmetric(n: usize, upper: &[f64]) -> Vec<Vec<f64>> {
    let at = |a: usize, b: usize| {
        let (a, b) = (a.min(b), a.max(b));
        upper[(a * n - a * (a + 1) / 2 + b - a - 1) % upper.len()]
    };
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if i == j { 0.0 } else { at(i, j) })
                .collect()
        })
        .collect()
}

fn unit() -> impl Strategy<Value = CostUnit> {
    prop_oneof![
        Just(CostUnit::Hops),
        Just(CostUnit::LatencyMs),
        Just(CostUnit::BandwidthMbS)
    ]
}

/// Checks every algorithm on `costs` with the cluster map `clusters`.
fn check_all(costs: &impl LinkCosts, clusters: &[ClusterId], root: NodeId) {
    let n = costs.node_count();
    for a in TreeAlgorithm::ALL {
        let t = a.build(costs, Some(clusters), root).unwrap();
        assert_spanning(&t, n, root);
        // Max-bottleneck widens capacities and narrows the rest (the MST's minimax paths).
        if a == TreeAlgorithm::MaxBottleneck {
            let want = if costs.unit().is_capacity() {
                max_bottleneck_tree(costs, root)
            } else {
                minimum_spanning_tree(costs, root)
            };
            assert_eq!(t, want.unwrap());
        }
    }
}

proptest! {
    #[test]
    fn every_algorithm_spans_dense_costs(
        n in 1usize..24,
        upper in prop::collection::vec(0.0f64..100.0, 1..50),
        unit in unit(),
        c in 1usize..5,
        root in 0usize..24,
    ) {
        let costs = DenseCostMatrix::<f64>::from_rows(unit, &symmetric(n, &upper)).unwrap();
        let clusters: Vec<ClusterId> = (0..n).map(|i| ClusterId::from(i % c)).collect();
        check_all(&costs, &clusters, NodeId::from(root % n));
    }

    #[test]
    fn every_algorithm_spans_cluster_costs(
        of_node in prop::collection::vec(0u32..4, 1..40),
        intra in prop::collection::vec(0.0f64..1.0, 4),
        inter in prop::collection::vec(1.0f64..100.0, 1..7),
        unit in unit(),
        root in 0usize..40,
    ) {
        let table = symmetric(4, &inter);
        let of_node: Vec<ClusterId> = of_node.into_iter().map(ClusterId).collect();
        let costs = ClusterCosts::new(unit, of_node.clone(), intra, table).unwrap();
        check_all(&costs, &of_node, NodeId::from(root % of_node.len()));
    }
}
