//! Balanced Multicasting plans: the paper's Fig. 2 arithmetic, feasibility and spanning on
//! random platforms, and how close the plan comes to the bound on the example scenarios.

use proptest::prelude::*;
use std::path::Path;
use windrose_model::platform::{load_platform, ClusterSpec, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_trees::multicast::balanced::{
    plan_balanced, unshaped_rate_bytes_s, BalancedPlan, PlanOptions, PlannedTree,
};
use windrose_trees::multicast::bound::multicast_bound;

const U: f64 = 1e6;

/// Fig. 2 as we model it (the figure's WAN values are not in the text; these are ours, chosen
/// so that its trees 4, 1, 4 fill x's local capacity of 10): three one-node sites x, y, z with
/// local capacity 10, WAN x-y 5, x-z 5, y-z 4 (both directions).
fn fig2() -> Platform {
    let site = ClusterSpec::uniform(1, 10.0 * U, 1e3 * U, 1e-4);
    Platform::builder()
        .cluster(site)
        .cluster(site)
        .cluster(site)
        .wan_both(ClusterId(0), ClusterId(1), 5.0 * U, 0.01)
        .wan_both(ClusterId(0), ClusterId(2), 5.0 * U, 0.01)
        .wan_both(ClusterId(1), ClusterId(2), 4.0 * U, 0.01)
        .build()
        .unwrap()
}

fn tree(parent: [Option<u32>; 3], rate: f64) -> PlannedTree {
    PlannedTree {
        parent: parent.iter().map(|p| p.map(NodeId)).collect(),
        rate_bytes_s: rate * U,
    }
}

#[test]
fn fig2_paper_trees_9_shaped_7_5_unshaped() {
    let p = fig2();
    let (x, y, z) = (0, 1, 2);
    let paper = BalancedPlan {
        root: NodeId(x),
        trees: vec![
            tree([None, Some(x), Some(y)], 4.0), // x -> y -> z
            tree([None, Some(x), Some(x)], 1.0), // x -> y, x -> z: x's LAN twice
            tree([None, Some(z), Some(x)], 4.0), // x -> z -> y
        ],
    };
    // 4 + 1×2 + 4 = 10 units of x's local capacity, 9 of throughput.
    let loads = paper.link_loads(&p);
    assert!((loads[p.link_index(LinkId::NodeUp(NodeId(x)))] - 10.0 * U).abs() < 1e-6);
    assert!((paper.rate_bytes_s() - 9.0 * U).abs() < 1e-6);
    assert!(paper.max_utilisation(&p) <= 1.0 + 1e-12);
    // Unshaped, x's LAN is split four ways: 3 × 10/4 = 7.5.
    assert!((unshaped_rate_bytes_s(&p, &paper.trees) - 7.5 * U).abs() < 1e-6);
    // 9 is also the physical limit, and our planner finds (nearly) it.
    let bound = multicast_bound(&p, NodeId(x)).unwrap().bytes_s;
    assert!((bound - 9.0 * U).abs() < 1e-6);
    let plan = plan_balanced(&p, NodeId(x), &PlanOptions::default()).unwrap();
    assert!(plan.max_utilisation(&p) <= 1.0 + 1e-9);
    assert!(
        plan.rate_bytes_s() >= 0.97 * bound,
        "planned {} of bound {bound}",
        plan.rate_bytes_s()
    );
}

/// The example scenarios' platforms and roots (the roots of their `[workload]`).
const SCENARIOS: [(&str, u32); 4] = [
    ("four-clusters.toml", 0),
    ("mayhem.toml", 0),
    ("scatter-two-sites.toml", 0),
    ("seed004-six-sites.toml", 12),
];

#[test]
fn example_scenarios_planned_rate_against_bound() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios");
    for (file, root) in SCENARIOS {
        let p = load_platform(&dir.join(file)).unwrap();
        let bound = multicast_bound(&p, NodeId(root)).unwrap().bytes_s;
        let plan = plan_balanced(&p, NodeId(root), &PlanOptions::default()).unwrap();
        let rate = plan.rate_bytes_s();
        println!(
            "{file}: bound {:.3} MB/s, planned {:.3} MB/s in {} trees ({:.1} %), unshaped {:.3} MB/s",
            bound / 1e6,
            rate / 1e6,
            plan.trees.len(),
            100.0 * rate / bound,
            unshaped_rate_bytes_s(&p, &plan.trees) / 1e6
        );
        assert!(plan.max_utilisation(&p) <= 1.0 + 1e-9, "{file}");
        assert!(rate <= bound * (1.0 + 1e-9), "{file}");
        assert!(rate >= 0.8 * bound, "{file}: {rate} of {bound}");
        for t in &plan.trees {
            assert!(t.spans_from(NodeId(root)), "{file}");
        }
    }
}

fn platform() -> impl Strategy<Value = Platform> {
    (
        prop::collection::vec(1usize..=3, 1..=3),
        prop::collection::vec(0.5f64..10.0, 9 + 36),
    )
        .prop_map(|(sizes, caps)| {
            let mut it = caps.into_iter();
            let mut b = Platform::builder();
            for &s in &sizes {
                b = b.cluster(ClusterSpec::uniform(s, 1.0, 1.0, 1e-4));
            }
            let c = sizes.len();
            for i in 0..c {
                for j in 0..c {
                    let w = it.next().unwrap();
                    if i != j {
                        b = b.wan(ClusterId(i as u32), ClusterId(j as u32), w, 0.01);
                    }
                }
            }
            let mut p = b.build().unwrap();
            let links: Vec<LinkId> = p
                .links()
                .filter(|l| !matches!(l, LinkId::Wan { .. }))
                .collect();
            for l in links {
                p.set_capacity(l, it.next().unwrap()).unwrap();
            }
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn plans_span_are_feasible_and_below_the_bound(p in platform(), r in 0u32..9) {
        let n = p.node_count() as u32;
        prop_assume!(n >= 2);
        let root = NodeId(r % n);
        let options = PlanOptions { iterations: 100, ..PlanOptions::default() };
        let plan = plan_balanced(&p, root, &options).unwrap();
        prop_assert!(!plan.trees.is_empty());
        prop_assert!(plan.trees.len() <= options.max_trees);
        for t in &plan.trees {
            prop_assert!(t.spans_from(root));
            prop_assert!(t.rate_bytes_s > 0.0);
        }
        prop_assert!(plan.max_utilisation(&p) <= 1.0 + 1e-9);
        let bound = multicast_bound(&p, root).unwrap().bytes_s;
        prop_assert!(plan.rate_bytes_s() <= bound * (1.0 + 1e-9));
        // Fair sharing of the same trees is a feasible plan too, so it cannot beat the bound.
        prop_assert!(unshaped_rate_bytes_s(&p, &plan.trees) <= bound * (1.0 + 1e-9));
    }
}
