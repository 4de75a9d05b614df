//! Every worked example of Figueira & Mendes, "Dynamically Adaptive Binomial Trees for
//! Broadcasting in Heterogeneous Networks of Workstations", as golden tests.

use windrose_model::fixtures::{table1, table5};
use windrose_model::{LinkCosts, LinkCostsMut, NodeId, Overlay};
use windrose_trees::adaptive::{AdaptiveTree, Strategy};

fn ids(v: &[NodeId]) -> Vec<u32> {
    v.iter().map(|n| n.0).collect()
}

/// (leaf node, cost) in ascending position order, as the paper's tables list them.
fn table(t: &AdaptiveTree) -> Vec<(u32, f64)> {
    t.leaf_costs().iter().map(|&(_, n, c)| (n.0, c)).collect()
}

fn figure1() -> AdaptiveTree {
    AdaptiveTree::balanced_path(&table1(), NodeId(0)).unwrap()
}

#[test]
fn figure1_and_table2_balanced_path() {
    let t = figure1();
    assert_eq!(ids(t.nodes()), vec![0, 5, 7, 4, 3, 2, 6, 1]);
    assert_eq!(table(&t), vec![(5, 3.0), (4, 3.0), (2, 2.0), (1, 2.0)]);
    assert_eq!(t.cost(), 3.0);
}

#[test]
fn table3_swapping_nodes_5_and_6() {
    let m = table1();
    let mut t = figure1();
    let (p5, p6) = (
        t.position_of(NodeId(5)).unwrap(),
        t.position_of(NodeId(6)).unwrap(),
    );
    assert_eq!(t.swap_cost(&m, p5, p6).unwrap(), 8.0);
    assert_eq!(
        table(&t),
        vec![(5, 3.0), (4, 3.0), (2, 2.0), (1, 2.0)],
        "trial left no trace"
    );
    t.swap(&m, p5, p6).unwrap();
    assert_eq!(table(&t), vec![(6, 0.0), (4, 3.0), (2, 2.0), (1, 8.0)]);
    assert_eq!(t.cost(), 8.0);
}

#[test]
fn tables4_and_6_node_8_joins_with_position_swapping() {
    let m = table5();
    let mut plain = AdaptiveTree::from_positions(&m, figure1().nodes().to_vec()).unwrap();
    let r = plain.join(&m, NodeId(8), None).unwrap();
    assert_eq!(plain.position_of(NodeId(8)), Some(8));
    assert_eq!(
        table(&plain),
        vec![(5, 3.0), (4, 3.0), (2, 2.0), (1, 2.0), (8, 4.0)]
    );
    assert_eq!(
        (r.cost_before, r.cost_after_change, r.steps()),
        (3.0, 4.0, 0)
    );

    let mut t = AdaptiveTree::from_positions(&m, figure1().nodes().to_vec()).unwrap();
    let r = t.join(&m, NodeId(8), Some(Strategy::Position)).unwrap();
    let tried: Vec<(usize, u32)> = r.tried.iter().map(|s| (s.positions.1, s.with.0)).collect();
    assert_eq!(
        tried,
        vec![(7, 1), (6, 6)],
        "tries position 7 (node 1), then 6 (node 6)"
    );
    assert_eq!(r.tried[0].cost, 4.0);
    assert_eq!(r.made.as_ref().unwrap().with, NodeId(6));
    assert_eq!(r.final_cost, 3.0);
    assert_eq!(
        table(&t),
        vec![(5, 3.0), (4, 3.0), (2, 2.0), (1, 2.0), (6, 0.0)]
    );
}

#[test]
fn table7_node_7_fails_and_node_1_replaces_it() {
    let m = table1();
    let mut t = figure1();
    let r = t.leave(&m, NodeId(7), None).unwrap();
    assert_eq!(t.position_of(NodeId(1)), Some(2));
    assert_eq!(table(&t), vec![(5, 3.0), (4, 7.0), (2, 2.0), (6, 0.0)]);
    assert_eq!(
        (r.cost_before, r.cost_after_change, r.final_cost),
        (3.0, 7.0, 7.0)
    );
}

#[test]
fn path_swapping_after_the_failure_cannot_help() {
    let m = table1();
    let mut t = figure1();
    let r = t.leave(&m, NodeId(7), Some(Strategy::Path)).unwrap();
    let tried: Vec<(u32, u32, f64)> = r
        .tried
        .iter()
        .map(|s| (s.moved.0, s.with.0, s.cost))
        .collect();
    assert_eq!(tried, vec![(1, 4, 8.0)], "only 1<->4, which costs 8");
    assert!(r.made.is_none());
    assert_eq!(r.final_cost, 7.0);
    assert_eq!(table(&t), vec![(5, 3.0), (4, 7.0), (2, 2.0), (6, 0.0)]);
}

#[test]
fn table8_position_swapping_after_the_failure() {
    let m = table1();
    let mut t = figure1();
    let r = t.leave(&m, NodeId(7), Some(Strategy::Position)).unwrap();
    let tried: Vec<(usize, u32)> = r.tried.iter().map(|s| (s.positions.1, s.with.0)).collect();
    assert_eq!(
        tried,
        vec![(3, 4), (1, 5)],
        "position 3 (node 4), then position 1 (node 5)"
    );
    assert_eq!(r.final_cost, 3.0);
    assert_eq!(table(&t), vec![(1, 2.0), (4, 3.0), (2, 2.0), (6, 0.0)]);
}

/// Figure 2-3's 16-node trees have node i at position i. The visiting orders the paper gives.
fn identity16() -> (windrose_model::DenseCostMatrix<f64>, AdaptiveTree) {
    let m = windrose_model::DenseCostMatrix::<f64>::from_fn(
        windrose_model::CostUnit::Hops,
        16,
        |_, _| 1.0,
    );
    let t = AdaptiveTree::from_positions(&m, (0..16).map(NodeId::from).collect()).unwrap();
    (m, t)
}

fn visit_order(a: u32, b: u32, strategy: Strategy) -> Vec<(u32, u32)> {
    let (_, t) = identity16();
    let order = t
        .visiting_order_for_link(NodeId(a), NodeId(b), strategy)
        .unwrap();
    order.iter().map(|(m, w)| (m.0, w.0)).collect()
}

#[test]
fn a_run_tries_a_prefix_of_the_visiting_order() {
    let (m, t) = identity16();
    for s in Strategy::ALL {
        let mut t = t.clone();
        let order = t.visiting_order_for_link(NodeId(8), NodeId(12), s).unwrap();
        let mut raised = Overlay::new(&m);
        raised.set_cost(NodeId(8), NodeId(12), 1000.0).unwrap();
        let r = t
            .on_link_cost_change(&raised, NodeId(8), NodeId(12), s)
            .unwrap();
        let tried: Vec<(NodeId, NodeId)> = r.tried.iter().map(|x| (x.moved, x.with)).collect();
        assert!(!tried.is_empty() && order.starts_with(&tried), "{s:?}");
        assert!(
            r.reached_target(),
            "{s:?}: some swap moves the slow link off every path"
        );
        assert_eq!(raised.cost(NodeId(8), NodeId(12)), 1000.0);
    }
}

#[test]
fn figure2_family_swapping_order() {
    // Link 8-12: node 12 with its children 13, 14, its parent 8, its siblings 9, 10.
    assert_eq!(
        visit_order(8, 12, Strategy::Family),
        vec![(12, 13), (12, 14), (12, 8), (12, 9), (12, 10)]
    );
}

#[test]
fn figure2_path_swapping_order() {
    // Link 12-14: 12 with 8, then 14 with 15; 12 never with the root 0.
    assert_eq!(visit_order(12, 14, Strategy::Path), vec![(12, 8), (14, 15)]);
}

#[test]
fn figure3_leaf_swapping_order() {
    // Link 8-12: each leaf (1, 3, 5, …) with 8, then with 12.
    let order = visit_order(8, 12, Strategy::Leaf);
    assert_eq!(&order[..4], &[(8, 1), (12, 1), (8, 3), (12, 3)]);
    assert_eq!(order.len(), 16, "8 leaves × 2 ends");
}

#[test]
fn figure3_position_swapping_order() {
    // Link 6-7: node 6 with positions 7, 5, 8, 4, 9, 3, 10, 2, 11, 1, 12, 13, 14, 15.
    let order: Vec<u32> = visit_order(6, 7, Strategy::Position)
        .iter()
        .map(|&(_, w)| w)
        .collect();
    assert_eq!(order, vec![7, 5, 8, 4, 9, 3, 10, 2, 11, 1, 12, 13, 14, 15]);
}
