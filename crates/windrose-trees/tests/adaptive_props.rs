//! Property tests of the adaptive binomial tree against from-scratch recomputation.

use proptest::prelude::*;
use proptest::strategy::Strategy as Gen;
use windrose_model::{CostUnit, DenseCostMatrix, LinkCosts, LinkCostsMut, NodeId};
use windrose_trees::adaptive::{AdaptReport, AdaptiveTree, Strategy};
use windrose_trees::binomial;

#[derive(Clone, Debug)]
enum Op {
    Swap(usize, usize),
    Join(Vec<u8>, Option<Strategy>),
    Leave(usize, Option<Strategy>),
    /// Multiply the cost of the tree link into a position (rise or fall), then adapt.
    Scale(usize, u8, Strategy),
    /// Change a link that may or may not be in the tree.
    SetAny(usize, usize, u8),
}

fn strategy() -> impl Gen<Value = Strategy> {
    prop::sample::select(Strategy::ALL.to_vec())
}

fn op() -> impl Gen<Value = Op> {
    prop_oneof![
        (1usize..64, 1usize..64).prop_map(|(a, b)| Op::Swap(a, b)),
        (
            prop::collection::vec(0u8..12, 64),
            prop::option::of(strategy())
        )
            .prop_map(|(r, s)| Op::Join(r, s)),
        (1usize..64, prop::option::of(strategy())).prop_map(|(i, s)| Op::Leave(i, s)),
        (1usize..64, 0u8..40, strategy()).prop_map(|(p, f, s)| Op::Scale(p, f, s)),
        (0usize..64, 0usize..64, 0u8..30).prop_map(|(a, b, v)| Op::SetAny(a, b, v)),
    ]
}

/// Costs with fractions so sums are not exact in binary.
fn cost_of(v: u8) -> f64 {
    v as f64 * 0.7
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Checks the tree against a from-scratch recomputation and the binomial shape.
fn check_tree(t: &AdaptiveTree, m: &impl LinkCosts, live: &[NodeId]) -> Result<(), TestCaseError> {
    prop_assert!(
        close(t.cost(), t.cost_from_scratch(m)),
        "cost {} vs {}",
        t.cost(),
        t.cost_from_scratch(m)
    );
    let mut members = t.nodes().to_vec();
    members.sort();
    let mut expected = live.to_vec();
    expected.sort();
    prop_assert_eq!(members, expected, "positions hold exactly the live nodes");
    let tree = t.to_tree();
    let scratch = tree.path_costs(m);
    for p in 0..t.len() {
        let node = t.node_at(p);
        prop_assert_eq!(t.position_of(node), Some(p));
        prop_assert!(close(t.path_cost(p), scratch[node.index()]));
        if p > 0 {
            prop_assert_eq!(
                tree.parent(node),
                Some(t.node_at(binomial::parent(p))),
                "binomial shape"
            );
        }
    }
    for (p, _, c) in t.leaf_costs() {
        prop_assert!(binomial::is_leaf(p, t.len()));
        prop_assert!(close(c, t.path_cost(p)));
    }
    Ok(())
}

/// A strategy never ends worse than the change left it, nor than the best swap it tried, and
/// every trial's cost is what the swap really costs.
fn check_report(
    r: &AdaptReport,
    before_adapt: &AdaptiveTree,
    m: &impl LinkCosts,
) -> Result<(), TestCaseError> {
    prop_assert!(r.final_cost <= r.cost_after_change + 1e-9);
    for trial in &r.tried {
        prop_assert!(
            r.final_cost <= trial.cost + 1e-9 * trial.cost.max(1.0),
            "final {} > tried {}",
            r.final_cost,
            trial.cost
        );
        let mut copy = before_adapt.clone();
        copy.swap(m, trial.positions.0, trial.positions.1).unwrap();
        prop_assert!(close(copy.cost_from_scratch(m), trial.cost));
    }
    if let Some(made) = &r.made {
        prop_assert!(close(made.cost, r.final_cost));
    } else {
        prop_assert!(close(r.final_cost, r.cost_after_change));
    }
    if r.tried.is_empty() {
        prop_assert!(r.made.is_none());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn incremental_costs_equal_recomputation(
        n in 1usize..40,
        seed_costs in prop::collection::vec(0u8..12, 40 * 40),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut m = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, n, |i, j| cost_of(seed_costs[i * 40 + j]));
        let mut t = AdaptiveTree::balanced_path(&m, NodeId(0)).unwrap();
        let mut live: Vec<NodeId> = (0..n).map(NodeId::from).collect();
        check_tree(&t, &m, &live)?;
        for o in ops {
            let len = t.len();
            match o {
                Op::Swap(a, b) if len > 2 => {
                    let (x, y) = (1 + a % (len - 1), 1 + b % (len - 1));
                    let predicted = t.swap_cost(&m, x, y).unwrap();
                    t.swap(&m, x, y).unwrap();
                    prop_assert!(close(predicted, t.cost()));
                }
                Op::Join(row, s) => {
                    let k = m.node_count();
                    let r: Vec<f64> = (0..k).map(|j| cost_of(row[j % row.len()])).collect();
                    let id = m.push_node(&r).unwrap();
                    // Ids of nodes that left stay in the model but not in the tree.
                    let snapshot = t.clone();
                    let rep = t.join(&m, id, s).unwrap();
                    live.push(id);
                    let mut base = snapshot;
                    base.join(&m, id, None).unwrap();
                    check_report(&rep, &base, &m)?;
                }
                Op::Leave(i, s) if len > 1 => {
                    let node = t.node_at(1 + i % (len - 1));
                    let mut base = t.clone();
                    base.leave(&m, node, None).unwrap();
                    let rep = t.leave(&m, node, s).unwrap();
                    live.retain(|&x| x != node);
                    check_report(&rep, &base, &m)?;
                }
                Op::Scale(p, f, s) if len > 1 => {
                    let c = 1 + p % (len - 1);
                    let (a, b) = (t.node_at(binomial::parent(c)), t.node_at(c));
                    let old = m.cost(a, b);
                    m.set_cost(a, b, old * (f as f64) / 8.0).unwrap();
                    let mut base = t.clone();
                    base.update_link_cost(&m, a, b).unwrap();
                    let rep = t.on_link_cost_change(&m, a, b, s).unwrap();
                    check_report(&rep, &base, &m)?;
                    if m.cost(a, b) <= old {
                        prop_assert!(rep.tried.is_empty(), "a cheaper link never triggers swaps");
                    }
                }
                Op::SetAny(a, b, v) => {
                    let k = m.node_count();
                    let (a, b) = (NodeId::from(a % k), NodeId::from(b % k));
                    if a != b {
                        m.set_cost(a, b, cost_of(v)).unwrap();
                        if t.position_of(a).is_some() && t.position_of(b).is_some() {
                            t.update_link_cost(&m, a, b).unwrap();
                        }
                    }
                }
                _ => {}
            }
            check_tree(&t, &m, &live)?;
        }
    }
}

#[test]
fn bad_operations_are_errors_not_panics() {
    let m = windrose_model::fixtures::table1();
    let mut t = AdaptiveTree::balanced_path(&m, NodeId(0)).unwrap();
    assert!(
        t.leave(&m, NodeId(0), Some(Strategy::Path)).is_err(),
        "root"
    );
    assert!(t.leave(&m, NodeId(42), None).is_err(), "unknown node");
    assert!(t.join(&m, NodeId(3), None).is_err(), "already a member");
    assert!(
        t.join(&m, NodeId(8), None).is_err(),
        "not in the cost model"
    );
    assert!(t.swap(&m, 0, 3).is_err(), "root never swapped");
    assert!(t.swap(&m, 1, 8).is_err(), "outside the tree");
    assert!(AdaptiveTree::from_positions(&m, vec![]).is_err());
    assert!(AdaptiveTree::from_positions(&m, vec![NodeId(0), NodeId(0)]).is_err());
    assert!(AdaptiveTree::from_positions(&m, vec![NodeId(0), NodeId(9)]).is_err());
    assert!(t
        .on_link_cost_change(&m, NodeId(0), NodeId(77), Strategy::Leaf)
        .is_err());
    assert_eq!(t.cost(), 3.0, "failed operations change nothing");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `improve` never raises the cost, each round's report is consistent with a from-scratch
    /// recomputation, it stops at the first round that makes no swap, and the tree keeps its
    /// members.
    #[test]
    fn improving_never_raises_the_cost(
        n in 1usize..40,
        seed_costs in prop::collection::vec(0u8..12, 40 * 40),
        s in strategy(),
        limit in 0usize..20,
    ) {
        let m = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, n, |i, j| cost_of(seed_costs[i * 40 + j]));
        // A binomial tree in id order, not Balanced-Path's, so there is something to improve.
        let mut t = AdaptiveTree::from_positions(&m, (0..n).map(NodeId::from).collect()).unwrap();
        let live: Vec<NodeId> = (0..n).map(NodeId::from).collect();
        let start = t.cost();
        let rounds = t.improve(&m, s, limit);
        prop_assert!(rounds.len() <= limit);
        let mut last = start;
        for (i, r) in rounds.iter().enumerate() {
            prop_assert!(r.final_cost <= last + 1e-9 * last.max(1.0), "round {i}: {} after {last}", r.final_cost);
            if r.made.is_none() {
                prop_assert_eq!(i, rounds.len() - 1, "a round without a swap ends the search");
            }
            last = r.final_cost;
        }
        prop_assert!(close(t.cost(), last));
        check_tree(&t, &m, &live)?;
    }
}
