//! Sharing-aware tree costs (crates/windrose-trees/src/sharing.rs) against an independent
//! computation on the tree's edges, and sharing-aware swaps that never raise them.

use proptest::prelude::*;
use proptest::strategy::Strategy as Gen;
use windrose_model::{ClusterId, CostUnit, DenseCostMatrix, LinkCosts, NodeId};
use windrose_trees::adaptive::{AdaptiveTree, Strategy};
use windrose_trees::sharing::SiteSharing;
use windrose_trees::Tree;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The sharing-aware cost computed from the general tree alone: for every node, walk up to
/// the root adding each edge's cost plus, for each *other* tree edge from the same site to the
/// same (different) site, the message's time on the edge; the costliest node's sum.
fn brute_force(
    tree: &Tree,
    costs: &DenseCostMatrix,
    bytes: &DenseCostMatrix,
    sites: &[ClusterId],
) -> f64 {
    let members: Vec<NodeId> = (0..sites.len() as u32)
        .map(NodeId)
        .filter(|&v| v == tree.root() || tree.parent(v).is_some())
        .collect();
    let crossing = |u: NodeId, v: NodeId| -> usize {
        members
            .iter()
            .filter_map(|&w| tree.parent(w).map(|p| (p, w)))
            .filter(|&(p, w)| {
                sites[p.index()] == sites[u.index()]
                    && sites[w.index()] == sites[v.index()]
                    && sites[u.index()] != sites[v.index()]
            })
            .count()
    };
    let mut worst = 0.0f64;
    for &v in &members {
        let mut sum = 0.0;
        let mut at = v;
        while let Some(p) = tree.parent(at) {
            let others = crossing(p, at).saturating_sub(1);
            sum += costs.cost(p, at) + others as f64 * bytes.cost(p, at);
            at = p;
        }
        worst = worst.max(sum);
    }
    worst
}

#[derive(Debug, Clone)]
struct Case {
    order: Vec<NodeId>,
    sites: Vec<ClusterId>,
    costs: DenseCostMatrix,
    bytes: DenseCostMatrix,
}

/// Up to 10 nodes on up to 4 sites, in a random position order (node 0 not always the root);
/// links inside a site cheap, between sites dearer, each with its message time.
fn case() -> impl Gen<Value = Case> {
    (1usize..=10, 1u32..=4).prop_flat_map(|(n, s)| {
        (
            Just(n),
            prop::collection::vec(0..s, n),
            prop::collection::vec(1u32..100, n * n),
            prop::collection::vec(0u32..100, n * n),
            Just((0..n as u32).map(NodeId).collect::<Vec<_>>()).prop_shuffle(),
        )
            .prop_map(|(n, sites, c, b, order)| {
                let sites: Vec<ClusterId> = sites.into_iter().map(ClusterId).collect();
                let wan = |i: usize, j: usize| if sites[i] != sites[j] { 10.0 } else { 1.0 };
                let costs = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, n, |i, j| {
                    wan(i, j) * c[i * n + j] as f64 * 0.37
                });
                let bytes = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, n, |i, j| {
                    wan(i, j) * b[i * n + j] as f64 * 0.53
                });
                Case {
                    order,
                    sites,
                    costs,
                    bytes,
                }
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn shared_cost_equals_the_independent_computation(c in case()) {
        let shared = SiteSharing::new(&c.costs, &c.bytes, &c.sites).unwrap();
        let t = AdaptiveTree::from_positions(&c.costs, c.order.clone()).unwrap();
        let got = t.shared_cost(&shared).unwrap();
        let want = brute_force(&t.to_tree(), &c.costs, &c.bytes, &c.sites);
        prop_assert!(close(got, want), "{got} vs {want}");
        // Sharing only adds: never below the plain cost, equal when no path is shared.
        prop_assert!(got >= t.cost() - 1e-9 * t.cost().max(1.0));
        let one_site = vec![ClusterId(0); c.sites.len()];
        let alone = SiteSharing::new(&c.costs, &c.bytes, &one_site).unwrap();
        prop_assert!(close(t.shared_cost(&alone).unwrap(), t.cost()));
    }

    #[test]
    fn every_trial_swap_equals_the_swapped_tree(c in case()) {
        let shared = SiteSharing::new(&c.costs, &c.bytes, &c.sites).unwrap();
        let mut t = AdaptiveTree::from_positions(&c.costs, c.order.clone()).unwrap();
        let before = t.shared_cost(&shared).unwrap();
        for x in 1..t.len() {
            for y in 1..t.len() {
                let got = t.swap_shared_cost(&shared, x, y).unwrap();
                let mut order = c.order.clone();
                order.swap(x, y);
                let swapped = AdaptiveTree::from_positions(&c.costs, order).unwrap();
                let want = brute_force(&swapped.to_tree(), &c.costs, &c.bytes, &c.sites);
                prop_assert!(close(got, want), "swap {x}<->{y}: {got} vs {want}");
            }
        }
        prop_assert_eq!(t.nodes(), &c.order[..], "trials leave the tree as it was");
        prop_assert_eq!(t.shared_cost(&shared).unwrap(), before);
    }

    #[test]
    fn sharing_aware_swaps_never_raise_the_cost(c in case(), s in prop::sample::select(Strategy::ALL.to_vec())) {
        let shared = SiteSharing::new(&c.costs, &c.bytes, &c.sites).unwrap();
        let mut t = AdaptiveTree::from_positions(&c.costs, c.order.clone()).unwrap();
        let start = t.shared_cost(&shared).unwrap();
        let rounds = t.improve_shared(&c.costs, &shared, s, 64).unwrap();
        let mut last = start;
        for r in &rounds {
            prop_assert!(close(r.cost_after_change, last), "each round starts where the last ended");
            prop_assert!(r.final_cost <= r.cost_after_change);
            match &r.made {
                Some(m) => {
                    prop_assert!(m.cost < r.cost_after_change, "a made swap lowers the cost");
                    prop_assert!(close(r.final_cost, m.cost));
                }
                None => prop_assert_eq!(r.final_cost, r.cost_after_change),
            }
            for trial in &r.tried {
                let (x, y) = trial.positions;
                prop_assert!(x != 0 && y != 0 && x != y);
            }
            last = r.final_cost;
        }
        let end = t.shared_cost(&shared).unwrap();
        prop_assert!(close(end, last));
        prop_assert!(end <= start);
        prop_assert!(close(end, brute_force(&t.to_tree(), &c.costs, &c.bytes, &c.sites)));
        // The plain path costs followed every swap.
        prop_assert!(close(t.cost(), t.cost_from_scratch(&c.costs)));
        let mut members = t.nodes().to_vec();
        members.sort();
        let mut want = c.order.clone();
        want.sort();
        prop_assert_eq!(members, want);
        prop_assert_eq!(t.root(), c.order[0]);
    }
}

/// Two sites of two: the tree that crosses the WAN once looks dearer on the plain costs than
/// one whose two WAN edges share the path, because site B's own link is slow. Plain swaps take
/// the sharing tree; sharing-aware swaps keep the one-crossing tree, and repair the other.
#[test]
fn sharing_aware_swaps_keep_one_copy_per_wan_path() {
    let sites = [ClusterId(0), ClusterId(0), ClusterId(1), ClusterId(1)];
    let costs = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 4, |i, j| match (i, j) {
        (0, 1) => 1.0,
        (2, 3) => 5.0,
        _ => 10.0,
    });
    let bytes = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 4, |i, j| {
        if sites[i] != sites[j] {
            40.0
        } else {
            0.1
        }
    });
    let shared = SiteSharing::new(&costs, &bytes, &sites).unwrap();
    // Positions 0..4: 1 and 2 are the root's children, 3 is 2's.
    let one_copy = vec![NodeId(0), NodeId(1), NodeId(2), NodeId(3)];
    let t = AdaptiveTree::from_positions(&costs, one_copy.clone()).unwrap();
    assert_eq!(t.cost(), 15.0); // 0 -> 2 -> 3
    assert_eq!(t.shared_cost(&shared).unwrap(), 15.0);
    let two_copies = vec![NodeId(0), NodeId(2), NodeId(1), NodeId(3)];
    let t2 = AdaptiveTree::from_positions(&costs, two_copies.clone()).unwrap();
    assert_eq!(t2.cost(), 11.0); // 0 -> 1 -> 3
    assert_eq!(t2.shared_cost(&shared).unwrap(), 51.0); // 1 + 10 + 40

    let mut plain = t.clone();
    plain.improve(&costs, Strategy::Position, 64);
    assert_eq!(
        plain.nodes(),
        &two_copies[..],
        "plain swaps take the sharing tree"
    );

    let mut aware = t.clone();
    let rounds = aware
        .improve_shared(&costs, &shared, Strategy::Position, 64)
        .unwrap();
    assert_eq!(aware.nodes(), &one_copy[..]);
    assert!(rounds.iter().all(|r| r.made.is_none()));

    let mut repaired = t2.clone();
    repaired
        .improve_shared(&costs, &shared, Strategy::Position, 64)
        .unwrap();
    assert_eq!(repaired.nodes(), &one_copy[..]);
    assert_eq!(repaired.shared_cost(&shared).unwrap(), 15.0);
}

#[test]
fn mismatched_sharing_inputs_are_errors() {
    let costs = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 3, |_, _| 1.0);
    let bytes = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 2, |_, _| 1.0);
    let sites = [ClusterId(0); 3];
    let e = SiteSharing::new(&costs, &bytes, &sites).unwrap_err();
    assert!(e.to_string().contains("2 of message times"), "{e}");
    let e = SiteSharing::new(&costs, &costs, &sites[..2]).unwrap_err();
    assert!(e.to_string().contains("2 sites"), "{e}");
    // A tree with a node the model does not know.
    let big = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 4, |_, _| 1.0);
    let t = AdaptiveTree::from_positions(&big, vec![NodeId(0), NodeId(3)]).unwrap();
    let shared = SiteSharing::new(&costs, &costs, &sites).unwrap();
    assert!(t.shared_cost(&shared).is_err());
}
