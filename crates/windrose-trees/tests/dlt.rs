//! Divisible-load scheduling (Kim, Jee & Lee): Example 1 as golden tests, the optimal order
//! against brute force, and whole-tree schedules against an independent event-by-event
//! store-and-forward computation written here.

use proptest::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use windrose_model::{CostUnit, DenseCostMatrix, NodeId};
use windrose_trees::dlt::star::{self, EquivalentChild, MAX_RANKED_CHILDREN};
use windrose_trees::dlt::{self, paper, DltError, OrderPolicy, Schedule};
use windrose_trees::{Tree, TreeError};

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn rel_close(x: f64, y: f64, tol: f64) -> bool {
    (x - y).abs() <= tol * x.abs().max(y.abs())
}

/// `alpha_0` straight from the paper's equations (12)-(14): `q = sum_i prod_{j<=i} b_{j-1} /
/// (a_j + b_j) w_0` with `b_0 = 1`, each product recomputed from scratch.
fn alpha0_paper(w0: f64, in_order: &[(f64, f64)]) -> f64 {
    let mut q = 0.0;
    for i in 1..=in_order.len() {
        let mut term = w0;
        for j in 1..=i {
            let b_prev = if j == 1 { 1.0 } else { in_order[j - 2].1 };
            term *= b_prev / (in_order[j - 1].0 + in_order[j - 1].1);
        }
        q += term;
    }
    1.0 / (1.0 + q)
}

/// Every permutation of `items` (Heap's algorithm).
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    fn heap<T: Clone>(k: usize, a: &mut Vec<T>, out: &mut Vec<Vec<T>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k - 1 {
            heap(k - 1, a, out);
            if k & 1 == 0 {
                a.swap(i, k - 1);
            } else {
                a.swap(0, k - 1);
            }
        }
        heap(k - 1, a, out);
    }
    let mut a = items.to_vec();
    let mut out = Vec::new();
    heap(a.len(), &mut a, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Example 1 (golden)

#[test]
fn example1_left_to_right_is_132_over_139() {
    let children = paper::example1_children();
    let a: Vec<f64> = children.iter().map(|c| c.a).collect();
    assert_eq!(a, vec![20.0, 10.0, 5.0, 1.0]);
    let f = star::fractions_in_order(1.0, &children).unwrap();
    assert!((f.alpha0 - 132.0 / 139.0).abs() < 1e-12, "{}", f.alpha0);
    assert_eq!(f.order(), vec![n(1), n(2), n(3), n(4)]);
    // By hand: gamma = 1/21, 1/231, 1/1386, 1/2772, so alpha_i = gamma_i * 132/139.
    let gammas = [1.0 / 21.0, 1.0 / 231.0, 1.0 / 1386.0, 1.0 / 2772.0];
    for (&(_, alpha), g) in f.children.iter().zip(gammas) {
        assert!((alpha - g * 132.0 / 139.0).abs() < 1e-15);
    }
    assert!((f.finish_time_s(1.0) - 132.0 / 139.0).abs() < 1e-12);
}

#[test]
fn example1_right_to_left_is_252_over_401_and_optimal() {
    let mut children = paper::example1_children();
    children.reverse();
    let f = star::fractions_in_order(1.0, &children).unwrap();
    assert!((f.alpha0 - 252.0 / 401.0).abs() < 1e-12, "{}", f.alpha0);
    assert_eq!(f.order(), vec![n(4), n(3), n(2), n(1)]);
    // Theorem 1 finds the same order from the left-to-right input.
    let best = star::optimal_fractions(1.0, &paper::example1_children()).unwrap();
    assert_eq!(best, f);
    assert!((star::alpha0_in_order(1.0, &children).unwrap() - 252.0 / 401.0).abs() < 1e-12);
}

#[test]
fn example1_from_the_papers_raw_coefficients() {
    // w_i = 1, beta_i = 1 (leaves), z_i = a_i T_cp / T_cm with T_cp = 2 s, T_cm = 0.5 s.
    let (t_cp, t_cm) = (2.0, 0.5);
    let children: Vec<EquivalentChild> = [20.0, 10.0, 5.0, 1.0]
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            EquivalentChild::from_paper(n(i as u32 + 1), 1.0, a * t_cp / t_cm, 1.0, t_cp, t_cm)
                .unwrap()
        })
        .collect();
    let f = star::fractions_in_order(1.0, &children).unwrap();
    assert!((f.alpha0 - 132.0 / 139.0).abs() < 1e-12);
    assert!((f.finish_time_s(t_cp) - 2.0 * 132.0 / 139.0).abs() < 1e-12);
    // Equations (1)-(3) hold with the fractions found.
    let al: Vec<f64> = f.children.iter().map(|&(_, x)| x).collect();
    let sum: f64 = f.alpha0 + al.iter().sum::<f64>();
    assert!((sum - 1.0).abs() < 1e-15);
    assert!((f.alpha0 * 1.0 - al[0] * (20.0 + 1.0)).abs() < 1e-15);
    for i in 0..3 {
        assert!((al[i] * 1.0 - al[i + 1] * (children[i + 1].a + 1.0)).abs() < 1e-15);
    }
}

#[test]
fn example1_all_24_orders_ranked() {
    let ranked = star::rank_orders(1.0, &paper::example1_children()).unwrap();
    assert_eq!(ranked.len(), 24);
    let best = &ranked[0];
    assert_eq!(best.order, vec![n(4), n(3), n(2), n(1)]);
    assert_eq!(best.a_in_order, vec![1.0, 5.0, 10.0, 20.0]);
    assert!((best.alpha0 - 252.0 / 401.0).abs() < 1e-12);
    let worst = &ranked[23];
    assert_eq!(worst.order, vec![n(1), n(2), n(3), n(4)]);
    assert!((worst.alpha0 - 132.0 / 139.0).abs() < 1e-12);
    let mut orders: Vec<Vec<NodeId>> = ranked.iter().map(|r| r.order.clone()).collect();
    orders.sort();
    orders.dedup();
    assert_eq!(orders.len(), 24, "every order exactly once");
    for (i, r) in ranked.iter().enumerate() {
        assert_eq!(r.rank, i + 1);
        let pairs: Vec<(f64, f64)> = r.a_in_order.iter().map(|&a| (a, 1.0)).collect();
        assert!((r.alpha0 - alpha0_paper(1.0, &pairs)).abs() < 1e-14);
        assert_eq!(r.finish_time, r.alpha0);
        if i > 0 {
            // All a differ, so no two orders tie here.
            assert!(ranked[i - 1].alpha0 < r.alpha0);
        }
    }
}

#[test]
fn example1_report_for_reproduce() {
    let e = paper::example1();
    assert_eq!(e.w0, 1.0);
    assert_eq!(e.ranked.len(), 24);
    let l = &e.left_to_right;
    assert_eq!(l.order, vec![n(1), n(2), n(3), n(4)]);
    assert_eq!((l.exact_numerator, l.exact_denominator), (132, 139));
    assert!((l.alpha0 - 132.0 / 139.0).abs() < 1e-12);
    assert_eq!(l.paper_alpha0, 0.9496);
    assert!(l.agrees_with_paper);
    assert_eq!(l.rank, 24);
    let r = &e.right_to_left;
    assert_eq!(r.order, vec![n(4), n(3), n(2), n(1)]);
    assert_eq!(r.a_in_order, vec![1.0, 5.0, 10.0, 20.0]);
    assert_eq!((r.exact_numerator, r.exact_denominator), (252, 401));
    assert!((r.alpha0 - 252.0 / 401.0).abs() < 1e-12);
    assert_eq!(r.paper_alpha0, 0.6284);
    assert!(r.agrees_with_paper);
    assert_eq!(r.rank, 1);
}

#[test]
fn example1_as_a_tree_schedule() {
    // Figure 3 as a tree with unit compute times and link times a_i (T_cp = 1 s).
    let tree = Tree::from_edges(
        5,
        n(0),
        &[(n(1), n(0)), (n(2), n(0)), (n(3), n(0)), (n(4), n(0))],
    )
    .unwrap();
    let compute = [1.0; 5];
    let link = [0.0, 20.0, 10.0, 5.0, 1.0];
    let given = dlt::schedule(&tree, &compute, &link, OrderPolicy::Given).unwrap();
    assert!((given.predicted_finish_s - 132.0 / 139.0).abs() < 1e-12);
    let best = dlt::schedule(&tree, &compute, &link, OrderPolicy::Optimal).unwrap();
    assert!((best.predicted_finish_s - 252.0 / 401.0).abs() < 1e-12);
    let root = best.node(n(0)).unwrap();
    let order: Vec<NodeId> = root.send_order.iter().map(|s| s.child).collect();
    assert_eq!(order, vec![n(4), n(3), n(2), n(1)]);
    assert_eq!(root.fraction_received, 1.0);
    assert!((root.fraction_kept - 252.0 / 401.0).abs() < 1e-12);
    // 1/2 of alpha_0 goes to n_4 (gamma_1 = 1/(1+1)).
    assert!((root.send_order[0].fraction - 126.0 / 401.0).abs() < 1e-12);
    check_against_events(&tree, &compute, &link, &best, OrderPolicy::Optimal).unwrap();
    check_against_events(&tree, &compute, &link, &given, OrderPolicy::Given).unwrap();
}

#[test]
fn single_node_tree_keeps_everything() {
    let tree = Tree::from_edges(1, n(0), &[]).unwrap();
    let s = dlt::schedule(&tree, &[3.0], &[0.0], OrderPolicy::Optimal).unwrap();
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.nodes[0].fraction_kept, 1.0);
    assert_eq!(s.predicted_finish_s, 3.0);
}

#[test]
fn policy_names_round_trip() {
    for p in OrderPolicy::ALL {
        assert_eq!(p.name().parse::<OrderPolicy>().unwrap(), p);
        assert_eq!(p.to_string(), p.name());
    }
    let e = "fastest".parse::<OrderPolicy>().unwrap_err();
    assert!(e.contains("fastest") && e.contains("optimal"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Inputs from the model

#[test]
fn bandwidth_model_gives_the_same_schedule_as_seconds() {
    // 0 -> {1, 2}, 1 -> 3; bandwidths in MB/s, speeds in MB/s, 100 MB of load.
    let bw = DenseCostMatrix::<f64>::from_rows(
        CostUnit::BandwidthMbS,
        &[
            vec![0.0, 50.0, 20.0, 1.0],
            vec![50.0, 0.0, 1.0, 40.0],
            vec![20.0, 1.0, 0.0, 1.0],
            vec![1.0, 40.0, 1.0, 0.0],
        ],
    )
    .unwrap();
    let tree = Tree::from_edges(4, n(0), &[(n(1), n(0)), (n(2), n(0)), (n(3), n(1))]).unwrap();
    let speeds = [10.0, 25.0, 5.0, 8.0];
    let load = 100.0;
    let from_model =
        dlt::schedule_from_model(&tree, &bw, &speeds, load, OrderPolicy::Optimal).unwrap();
    let compute: Vec<f64> = speeds.iter().map(|s| load / s).collect();
    let link = [0.0, load / 50.0, load / 20.0, load / 40.0];
    let from_seconds = dlt::schedule(&tree, &compute, &link, OrderPolicy::Optimal).unwrap();
    assert_eq!(from_model, from_seconds);
    let with_fn = dlt::schedule_with_links(
        &tree,
        &compute,
        |p, c| load / bw_of(&bw, p, c),
        OrderPolicy::Optimal,
    )
    .unwrap();
    assert_eq!(with_fn, from_seconds);
    check_against_events(&tree, &compute, &link, &from_model, OrderPolicy::Optimal).unwrap();
    // Fractions do not depend on the load size; times scale with it.
    let half = dlt::schedule_from_model(&tree, &bw, &speeds, 50.0, OrderPolicy::Optimal).unwrap();
    assert!(rel_close(
        half.predicted_finish_s * 2.0,
        from_model.predicted_finish_s,
        1e-12
    ));
    for (x, y) in half.nodes.iter().zip(&from_model.nodes) {
        assert!(rel_close(x.fraction_kept, y.fraction_kept, 1e-12));
    }
    // The root sends to 1 first (50 MB/s beats 20 MB/s).
    assert_eq!(from_model.nodes[0].send_order[0].child, n(1));
}

fn bw_of(m: &DenseCostMatrix<f64>, a: NodeId, b: NodeId) -> f64 {
    use windrose_model::LinkCosts;
    m.cost(a, b)
}

// ---------------------------------------------------------------------------------------------
// Bad input

fn star_tree() -> Tree {
    Tree::from_edges(4, n(0), &[(n(1), n(0)), (n(2), n(0)), (n(3), n(2))]).unwrap()
}

#[test]
fn bad_compute_speeds_name_the_node() {
    let tree = star_tree();
    let link = [0.0, 1.0, 1.0, 1.0];
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let compute = [1.0, 1.0, 1.0, bad];
        let e = dlt::schedule(&tree, &compute, &link, OrderPolicy::Optimal).unwrap_err();
        assert!(
            matches!(e, DltError::NodeSpeed { node, .. } if node == n(3)),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("node 3") && msg.contains("compute_s_per_unit"),
            "{msg}"
        );
    }
}

#[test]
fn bad_link_times_name_the_link() {
    let tree = star_tree();
    let compute = [1.0; 4];
    for bad in [-0.5, f64::NAN, f64::INFINITY] {
        let link = [0.0, 1.0, 1.0, bad];
        let e = dlt::schedule(&tree, &compute, &link, OrderPolicy::Given).unwrap_err();
        assert!(
            matches!(e, DltError::LinkSpeed { parent, child, .. } if parent == n(2) && child == n(3)),
            "{e:?}"
        );
        assert!(e.to_string().contains("link 2->3"), "{e}");
    }
    // A zero link time (an infinitely fast link) is allowed; the root's entry is ignored.
    let link = [f64::NAN, 0.0, 1.0, 0.0];
    dlt::schedule(&tree, &compute, &link, OrderPolicy::Given).unwrap();
}

#[test]
fn vectors_must_match_the_tree_ids() {
    let tree = star_tree();
    let e = dlt::schedule(&tree, &[1.0; 3], &[1.0; 4], OrderPolicy::Optimal).unwrap_err();
    assert_eq!(
        e,
        DltError::VectorTooShort {
            what: "compute_s_per_unit",
            len: 3,
            node: n(3)
        }
    );
    assert!(e.to_string().contains("node 3"), "{e}");
    let e = dlt::schedule(&tree, &[1.0; 4], &[1.0; 2], OrderPolicy::Optimal).unwrap_err();
    assert!(
        matches!(e, DltError::VectorTooShort { what: "link_s_per_unit", node, .. } if node == n(2)),
        "{e:?}"
    );
    let e = dlt::schedule(&tree, &[1.0; 6], &[1.0; 4], OrderPolicy::Optimal).unwrap_err();
    assert!(
        matches!(
            e,
            DltError::VectorTooLong {
                len: 6,
                node_count: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("do not match"), "{e}");
    // Entries of ids the tree can hold but does not contain are ignored.
    let sub = Tree::from_edges(6, n(0), &[(n(2), n(0))]).unwrap();
    let s = dlt::schedule(
        &sub,
        &[1.0, f64::NAN, 1.0],
        &[0.0, -1.0, 1.0],
        OrderPolicy::Optimal,
    )
    .unwrap();
    assert_eq!(s.nodes.len(), 2);
}

#[test]
fn model_errors_are_clear() {
    let tree = star_tree();
    let bw =
        DenseCostMatrix::<f64>::from_fn(
            CostUnit::BandwidthMbS,
            4,
            |a, b| {
                if a == b {
                    0.0
                } else {
                    10.0
                }
            },
        );
    let speeds = [1.0; 4];
    let lat = DenseCostMatrix::<f64>::zeros(CostUnit::LatencyMs, 4);
    let e = dlt::schedule_from_model(&tree, &lat, &speeds, 1.0, OrderPolicy::Optimal).unwrap_err();
    assert_eq!(
        e,
        DltError::WrongUnit {
            unit: CostUnit::LatencyMs
        }
    );
    assert!(e.to_string().contains("bandwidth_mb_s"), "{e}");
    for load in [0.0, -3.0, f64::NAN] {
        let e =
            dlt::schedule_from_model(&tree, &bw, &speeds, load, OrderPolicy::Optimal).unwrap_err();
        assert!(
            matches!(
                e,
                DltError::Parameter {
                    what: "load_mb",
                    ..
                }
            ),
            "{e:?}"
        );
    }
    let small = DenseCostMatrix::<f64>::zeros(CostUnit::BandwidthMbS, 3);
    let e =
        dlt::schedule_from_model(&tree, &small, &speeds, 1.0, OrderPolicy::Optimal).unwrap_err();
    assert_eq!(
        e,
        DltError::NodeNotInModel {
            node: n(3),
            node_count: 3
        }
    );
    let e = dlt::schedule_from_model(&tree, &bw, &[1.0, 0.0, 1.0, 1.0], 1.0, OrderPolicy::Optimal)
        .unwrap_err();
    assert!(
        matches!(e, DltError::NodeSpeed { node, what: "compute_mb_s", .. } if node == n(1)),
        "{e:?}"
    );
    // A zero bandwidth on a tree link.
    let mut rows = bw.to_rows();
    rows[2][3] = 0.0;
    rows[3][2] = 0.0;
    let cut = DenseCostMatrix::<f64>::from_rows(CostUnit::BandwidthMbS, &rows).unwrap();
    let e = dlt::schedule_from_model(&tree, &cut, &speeds, 1.0, OrderPolicy::Optimal).unwrap_err();
    assert!(
        matches!(e, DltError::LinkSpeed { what: "bandwidth_mb_s", child, .. } if child == n(3)),
        "{e:?}"
    );
    assert!(e.to_string().contains("link 2->3"), "{e}");
}

#[test]
fn star_inputs_are_checked() {
    let ok = EquivalentChild::new(n(1), 1.0, 1.0);
    for w0 in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = star::fractions_in_order(w0, &[ok]).unwrap_err();
        assert!(matches!(e, DltError::Parameter { what: "w0", .. }), "{e:?}");
    }
    let e =
        star::fractions_in_order(1.0, &[ok, EquivalentChild::new(n(2), -1.0, 1.0)]).unwrap_err();
    assert!(e.to_string().contains("child 2: a must be"), "{e}");
    let e = star::optimal_fractions(1.0, &[EquivalentChild::new(n(5), 1.0, 0.0)]).unwrap_err();
    assert!(e.to_string().contains("child 5: b must be"), "{e}");
    let e = star::fractions_in_order(1.0, &[ok, ok]).unwrap_err();
    assert_eq!(e, DltError::DuplicateChild { child: n(1) });
    let many: Vec<EquivalentChild> = (0..MAX_RANKED_CHILDREN as u32 + 1)
        .map(|i| EquivalentChild::new(n(i), 1.0, 1.0))
        .collect();
    let e = star::rank_orders(1.0, &many).unwrap_err();
    assert!(matches!(e, DltError::TooManyChildren { .. }), "{e:?}");
    assert!(EquivalentChild::from_paper(n(1), 1.0, 1.0, 1.5, 1.0, 1.0)
        .unwrap_err()
        .to_string()
        .contains("beta"));
    assert!(EquivalentChild::from_paper(n(1), 1.0, 1.0, 1.0, 0.0, 1.0).is_err());
    assert!(EquivalentChild::from_paper(n(1), 0.0, 1.0, 1.0, 1.0, 1.0).is_err());
    let c = EquivalentChild::from_seconds(n(1), 3.0, 2.0, 0.5).unwrap();
    assert_eq!((c.a, c.b), (3.0, 1.0));
}

/// Builds a tree from edges and schedules it: a broken edge list comes back as a `DltError`.
fn schedule_edges(node_count: usize, edges: &[(NodeId, NodeId)]) -> Result<Schedule, DltError> {
    let tree = Tree::from_edges(node_count, n(0), edges)?;
    dlt::schedule(
        &tree,
        &vec![1.0; node_count],
        &vec![1.0; node_count],
        OrderPolicy::Optimal,
    )
}

#[test]
fn a_tree_that_is_not_a_tree_is_an_error() {
    let e = schedule_edges(3, &[(n(1), n(2)), (n(2), n(1))]).unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::Disconnected { .. })),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("not a valid tree"), "{e}");
    let e = schedule_edges(3, &[(n(1), n(0)), (n(1), n(2))]).unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::Duplicate { .. })),
        "{e:?}"
    );
    let e = schedule_edges(3, &[(n(7), n(0))]).unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::UnknownNode { .. })),
        "{e:?}"
    );
}

/// A minimal serde data format, to read `Tree` values that `Tree::from_edges` would refuse (as a
/// tree file read with serde could contain).
mod value {
    use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
    use serde::de::{Deserializer, IntoDeserializer, Visitor};

    pub enum V {
        U(u64),
        B(bool),
        Null,
        Seq(Vec<V>),
        Map(Vec<(&'static str, V)>),
    }

    impl<'de> Deserializer<'de> for V {
        type Error = Error;
        fn deserialize_any<W: Visitor<'de>>(self, v: W) -> Result<W::Value, Error> {
            match self {
                V::U(x) => v.visit_u64(x),
                V::B(b) => v.visit_bool(b),
                V::Null => v.visit_none(),
                V::Seq(xs) => v.visit_seq(SeqDeserializer::new(xs.into_iter())),
                V::Map(m) => v.visit_map(MapDeserializer::new(m.into_iter())),
            }
        }
        fn deserialize_option<W: Visitor<'de>>(self, v: W) -> Result<W::Value, Error> {
            match self {
                V::Null => v.visit_none(),
                other => v.visit_some(other),
            }
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
            ignored_any
        }
    }

    impl<'de> IntoDeserializer<'de, Error> for V {
        type Deserializer = V;
        fn into_deserializer(self) -> V {
            self
        }
    }

    /// A `Tree` with the given tables (depth all 0, every listed node a member).
    pub fn tree(
        root: u64,
        parent: &[Option<u64>],
        children: &[&[u64]],
        order: &[u64],
    ) -> windrose_trees::Tree {
        let ids = |xs: &[u64]| V::Seq(xs.iter().map(|&x| V::U(x)).collect());
        let v = V::Map(vec![
            ("root", V::U(root)),
            (
                "parent",
                V::Seq(parent.iter().map(|p| p.map_or(V::Null, V::U)).collect()),
            ),
            (
                "children",
                V::Seq(children.iter().map(|c| ids(c)).collect()),
            ),
            ("depth", V::Seq(parent.iter().map(|_| V::U(0)).collect())),
            (
                "member",
                V::Seq(parent.iter().map(|_| V::B(true)).collect()),
            ),
            ("order", ids(order)),
        ]);
        serde::Deserialize::deserialize(v).expect("well-formed tables")
    }
}

#[test]
fn a_deserialized_non_tree_is_an_error_not_a_panic() {
    let run = |t: &Tree| dlt::schedule(t, &[1.0; 3], &[1.0; 3], OrderPolicy::Optimal);
    // Sanity: the format reads a real tree (depths aside, which this format leaves at 0).
    let good = value::tree(0, &[None, Some(0), Some(1)], &[&[1], &[2], &[]], &[0, 1, 2]);
    let real = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(1))]).unwrap();
    assert_eq!(good.edges(), real.edges());
    assert_eq!(good.children(n(1)), real.children(n(1)));
    run(&good).unwrap();
    // 1 and 2 form a cycle away from the root.
    let cycle = value::tree(0, &[None, Some(2), Some(1)], &[&[], &[2], &[1]], &[0, 1, 2]);
    let e = run(&cycle).unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::Disconnected { .. })),
        "{e:?}"
    );
    // A child whose parent table disagrees.
    let e = run(&value::tree(
        0,
        &[None, Some(2), Some(0)],
        &[&[1, 2], &[], &[]],
        &[0, 1, 2],
    ))
    .unwrap_err();
    assert!(
        e.to_string().contains("child of 0 but its parent is 2"),
        "{e}"
    );
    // A child listed twice.
    let e = run(&value::tree(
        0,
        &[None, Some(0), None],
        &[&[1, 1], &[], &[]],
        &[0, 1],
    ))
    .unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::Duplicate { .. })),
        "{e:?}"
    );
    // A child id beyond the tables, a root with a parent, a root beyond the tables.
    let e = run(&value::tree(
        0,
        &[None, None, None],
        &[&[9], &[], &[]],
        &[0, 9],
    ))
    .unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::UnknownNode { .. })),
        "{e:?}"
    );
    let e = run(&value::tree(
        0,
        &[Some(1), Some(0), None],
        &[&[1], &[], &[]],
        &[0, 1],
    ))
    .unwrap_err();
    assert!(e.to_string().contains("root 0 has a parent"), "{e}");
    let e = run(&value::tree(5, &[None, None, None], &[&[], &[], &[]], &[5])).unwrap_err();
    assert!(
        matches!(e, DltError::Tree(TreeError::UnknownNode { .. })),
        "{e:?}"
    );
    // The member list is missing a reachable node.
    let e = run(&value::tree(
        0,
        &[None, Some(0), None],
        &[&[1], &[], &[]],
        &[0],
    ))
    .unwrap_err();
    assert!(e.to_string().contains("reachable"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The independent event-by-event store-and-forward computation

#[derive(Debug, PartialEq)]
enum Ev {
    /// A node's whole share has arrived.
    Arrived(NodeId),
    /// A node has finished sending to its `i`-th child (in send order).
    Sent(NodeId, usize),
    /// A node has finished computing what it keeps.
    Computed(NodeId),
}

struct Timed {
    t: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    /// Earliest first in a max-heap.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// Plays the schedule's fractions out event by event: sequential sends from each parent in its
/// send order, a child starts only when its whole share has arrived, the parent computes its kept
/// share while it sends; link time = fraction * link_s, compute time = fraction * compute_s.
/// Checks conservation, that every member computes, and that every node finishes at the
/// predicted instant (1e-9 relative). Uses the test's own inputs, not the schedule's copies.
fn check_against_events(
    tree: &Tree,
    compute_s: &[f64],
    link_s: &[f64],
    s: &Schedule,
    policy: OrderPolicy,
) -> Result<(), TestCaseError> {
    let nc = tree.node_count();
    let mut kept = vec![f64::NAN; nc];
    let mut sends: Vec<Vec<(NodeId, f64)>> = vec![Vec::new(); nc];
    let mut listed = vec![false; nc];
    for x in &s.nodes {
        prop_assert!(!listed[x.node.index()], "node {} listed twice", x.node);
        listed[x.node.index()] = true;
        prop_assert_eq!(x.parent, tree.parent(x.node));
        kept[x.node.index()] = x.fraction_kept;
        sends[x.node.index()] = x.send_order.iter().map(|y| (y.child, y.fraction)).collect();
        // The children sent to are exactly the tree's, in the policy's order.
        let sent: Vec<NodeId> = x.send_order.iter().map(|y| y.child).collect();
        let mut expect = tree.children(x.node).to_vec();
        if policy == OrderPolicy::Optimal {
            expect.sort_by(|a, b| {
                link_s[a.index()]
                    .total_cmp(&link_s[b.index()])
                    .then(a.cmp(b))
            });
        }
        prop_assert_eq!(sent, expect, "send order of {}", x.node);
        // What it keeps plus what it forwards is what it received.
        let out: f64 = x.fraction_kept + x.send_order.iter().map(|y| y.fraction).sum::<f64>();
        prop_assert!(
            (out - x.fraction_received).abs() <= 1e-12 * x.fraction_received.max(1e-300),
            "node {}: kept + sent {} vs received {}",
            x.node,
            out,
            x.fraction_received
        );
        prop_assert!(x.fraction_kept >= 0.0 && x.fraction_kept <= 1.0);
    }
    prop_assert_eq!(s.nodes.len(), tree.len(), "every member listed");
    let total: f64 = s.nodes.iter().map(|x| x.fraction_kept).sum();
    prop_assert!((total - 1.0).abs() < 1e-12, "fractions sum to {}", total);

    let mut received = vec![f64::NAN; nc];
    let mut finish = vec![f64::NAN; nc];
    let mut heap = BinaryHeap::new();
    let mut seq = 0;
    let mut push = |heap: &mut BinaryHeap<Timed>, t: f64, ev: Ev| {
        seq += 1;
        heap.push(Timed { t, seq, ev });
    };
    received[tree.root().index()] = 1.0;
    push(&mut heap, 0.0, Ev::Arrived(tree.root()));
    while let Some(Timed { t, ev, .. }) = heap.pop() {
        match ev {
            Ev::Arrived(u) => {
                let k = kept[u.index()];
                push(&mut heap, t + k * compute_s[u.index()], Ev::Computed(u));
                if let Some(&(c, f)) = sends[u.index()].first() {
                    push(&mut heap, t + f * link_s[c.index()], Ev::Sent(u, 0));
                }
            }
            Ev::Sent(u, i) => {
                let (c, f) = sends[u.index()][i];
                received[c.index()] = f;
                push(&mut heap, t, Ev::Arrived(c));
                if let Some(&(c2, f2)) = sends[u.index()].get(i + 1) {
                    push(&mut heap, t + f2 * link_s[c2.index()], Ev::Sent(u, i + 1));
                }
            }
            Ev::Computed(u) => finish[u.index()] = t,
        }
    }
    for x in &s.nodes {
        let u = x.node.index();
        prop_assert_eq!(received[u], x.fraction_received, "node {} received", x.node);
        prop_assert!(
            rel_close(finish[u], s.predicted_finish_s, 1e-9),
            "node {} finishes at {} but the prediction is {}",
            x.node,
            finish[u],
            s.predicted_finish_s
        );
        prop_assert!(
            rel_close(x.predicted_finish_s, s.predicted_finish_s, 1e-9),
            "node {}: own prediction {} vs {}",
            x.node,
            x.predicted_finish_s,
            s.predicted_finish_s
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Property tests

/// A positive time, log-uniform over five decades.
fn time_s() -> impl Strategy<Value = f64> {
    (-2.0f64..3.0).prop_map(|e| 10f64.powf(e))
}

/// A link time: sometimes 0, sometimes from a small set (ties), else log-uniform.
fn link_time_s() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(0.0),
        2 => prop::sample::select(vec![0.5, 1.0, 2.0]),
        7 => (-3.0f64..2.0).prop_map(|e| 10f64.powf(e)),
    ]
}

fn children_strategy(min: usize, max: usize) -> impl Strategy<Value = (f64, Vec<EquivalentChild>)> {
    (
        time_s(),
        prop::collection::vec((link_time_s(), time_s()), min..=max),
    )
        .prop_map(|(w0, ab)| {
            let children = ab
                .into_iter()
                .enumerate()
                .map(|(i, (a, b))| EquivalentChild::new(NodeId(i as u32 * 3 + 1), a, b))
                .collect();
            (w0, children)
        })
}

/// A random tree: `members` nodes among `members + spare` ids, a random recursive shape (node `i`
/// of the shape hangs under a random earlier one), ids shuffled, edges in random order; and
/// per-id compute and link times (non-members get garbage that must be ignored).
#[derive(Clone, Debug)]
struct Case {
    tree: Tree,
    compute_s: Vec<f64>,
    link_s: Vec<f64>,
}

fn case_strategy(max_members: usize) -> impl Strategy<Value = Case> {
    (1..=max_members, 0usize..3)
        .prop_flat_map(|(m, spare)| {
            let nc = m + spare;
            (
                Just(m),
                prop::collection::vec(any::<prop::sample::Index>(), m),
                Just((0..nc as u32).collect::<Vec<u32>>()).prop_shuffle(),
                prop::collection::vec(time_s(), nc),
                prop::collection::vec(link_time_s(), nc),
                Just((0..m.saturating_sub(1)).collect::<Vec<usize>>()).prop_shuffle(),
            )
        })
        .prop_map(
            |(_members, parents, ids, mut compute_s, mut link_s, edge_order)| {
                let nc = ids.len();
                let id = |i: usize| NodeId(ids[i]);
                let edges: Vec<(NodeId, NodeId)> = edge_order
                    .iter()
                    .map(|&e| {
                        let child = e + 1;
                        (id(child), id(parents[child].index(child)))
                    })
                    .collect();
                let tree = Tree::from_edges(nc, id(0), &edges).unwrap();
                for i in 0..nc as u32 {
                    if !tree.contains(NodeId(i)) {
                        compute_s[i as usize] = f64::NAN;
                        link_s[i as usize] = -1.0;
                    }
                }
                link_s[id(0).index()] = f64::NAN; // the root's entry is never read
                Case {
                    tree,
                    compute_s,
                    link_s,
                }
            },
        )
}

/// Every way of ordering every parent's children, as trees with those send orders.
fn all_orderings(tree: &Tree) -> Vec<Tree> {
    let parents: Vec<NodeId> = tree
        .nodes()
        .iter()
        .copied()
        .filter(|&u| !tree.children(u).is_empty())
        .collect();
    let choices: Vec<Vec<Vec<NodeId>>> = parents
        .iter()
        .map(|&u| permutations(tree.children(u)))
        .collect();
    let mut out = Vec::new();
    let mut pick = vec![0usize; parents.len()];
    loop {
        let mut edges = Vec::new();
        for (p, &u) in parents.iter().enumerate() {
            for &c in &choices[p][pick[p]] {
                edges.push((c, u));
            }
        }
        out.push(Tree::from_edges(tree.node_count(), tree.root(), &edges).unwrap());
        let mut i = 0;
        loop {
            if i == pick.len() {
                return out;
            }
            pick[i] += 1;
            if pick[i] < choices[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Theorem 1: ascending a gives the minimum alpha_0 over all k! orders (k <= 7).
    #[test]
    fn optimal_order_beats_every_order((w0, children) in children_strategy(0, 7)) {
        let best = star::optimal_fractions(w0, &children).unwrap();
        let mut min = f64::INFINITY;
        for p in permutations(&children) {
            let pairs: Vec<(f64, f64)> = p.iter().map(|c| (c.a, c.b)).collect();
            min = min.min(alpha0_paper(w0, &pairs));
        }
        prop_assert!(rel_close(best.alpha0, min, 1e-12), "optimal {} vs brute force {}", best.alpha0, min);
        // The order is ascending a, ties by id.
        let order = best.order();
        let mut expect = children.clone();
        expect.sort_by(|x, y| x.a.total_cmp(&y.a).then(x.id.cmp(&y.id)));
        prop_assert_eq!(order, expect.iter().map(|c| c.id).collect::<Vec<_>>());
        // Equations (1)-(3) hold for the optimal fractions.
        let a: Vec<f64> = expect.iter().map(|c| c.a).collect();
        let b: Vec<f64> = expect.iter().map(|c| c.b).collect();
        let al: Vec<f64> = best.children.iter().map(|&(_, x)| x).collect();
        prop_assert!((best.alpha0 + al.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mut prev = best.alpha0 * w0;
        for i in 0..al.len() {
            let rhs = al[i] * (a[i] + b[i]);
            prop_assert!((prev - rhs).abs() <= 1e-12 * prev.max(rhs), "equation ({}) at {}", if i == 0 { 1 } else { 2 }, i);
            prev = al[i] * b[i];
        }
    }

    /// rank_orders lists every order once, sorted, the first one optimal; each alpha_0 agrees
    /// with the paper's closed form.
    #[test]
    fn ranking_is_complete_and_sorted((w0, children) in children_strategy(0, 5)) {
        let ranked = star::rank_orders(w0, &children).unwrap();
        let k = children.len();
        prop_assert_eq!(ranked.len(), (1..=k).product::<usize>());
        let best = star::optimal_fractions(w0, &children).unwrap();
        prop_assert!(rel_close(ranked[0].alpha0, best.alpha0, 1e-12));
        for w in ranked.windows(2) {
            prop_assert!(w[0].alpha0 <= w[1].alpha0);
        }
        for r in &ranked {
            let in_order: Vec<EquivalentChild> = r.order.iter()
                .map(|id| *children.iter().find(|c| c.id == *id).unwrap()).collect();
            let pairs: Vec<(f64, f64)> = in_order.iter().map(|c| (c.a, c.b)).collect();
            prop_assert!(rel_close(r.alpha0, alpha0_paper(w0, &pairs), 1e-12));
        }
    }

    /// Lemma 1: swapping neighbours with a_i >= a_{i+1} never increases alpha_0.
    #[test]
    fn lemma1_adjacent_swap((w0, children) in children_strategy(2, 7), at in any::<prop::sample::Index>()) {
        let i = at.index(children.len() - 1);
        let mut sorted = children.clone();
        if sorted[i].a < sorted[i + 1].a {
            sorted.swap(i, i + 1);
        }
        let before = star::alpha0_in_order(w0, &sorted).unwrap();
        let mut swapped = sorted.clone();
        swapped.swap(i, i + 1);
        let after = star::alpha0_in_order(w0, &swapped).unwrap();
        prop_assert!(after <= before * (1.0 + 1e-12), "{} -> {}", before, after);
        if sorted[i].a == sorted[i + 1].a {
            prop_assert!(rel_close(after, before, 1e-12));
        }
    }

    /// Random trees up to 64 nodes: the event-by-event computation agrees with the prediction,
    /// every node finishes at the same instant, fractions sum to 1; and ordering optimally never
    /// loses to the given order.
    #[test]
    fn tree_schedule_matches_event_simulation(case in case_strategy(64)) {
        let Case { tree, compute_s, link_s } = &case;
        let best = dlt::schedule(tree, compute_s, link_s, OrderPolicy::Optimal).unwrap();
        check_against_events(tree, compute_s, link_s, &best, OrderPolicy::Optimal)?;
        let given = dlt::schedule(tree, compute_s, link_s, OrderPolicy::Given).unwrap();
        check_against_events(tree, compute_s, link_s, &given, OrderPolicy::Given)?;
        prop_assert!(best.predicted_finish_s <= given.predicted_finish_s * (1.0 + 1e-12));
        prop_assert!(best.predicted_finish_s <= compute_s[tree.root().index()]);
        prop_assert_eq!(best.root, tree.root());
        prop_assert_eq!(best.nodes[0].node, tree.root());
    }

    /// Small trees: ordering every level by ascending link time is as fast as the best of all
    /// combinations of send orders (each evaluated with the given-order policy).
    #[test]
    fn levelwise_optimal_is_globally_optimal(case in case_strategy(7)) {
        let Case { tree, compute_s, link_s } = &case;
        let best = dlt::schedule(tree, compute_s, link_s, OrderPolicy::Optimal).unwrap();
        let mut min = f64::INFINITY;
        for t in all_orderings(tree) {
            let s = dlt::schedule(&t, compute_s, link_s, OrderPolicy::Given).unwrap();
            min = min.min(s.predicted_finish_s);
        }
        prop_assert!(rel_close(best.predicted_finish_s, min, 1e-12), "{} vs {}", best.predicted_finish_s, min);
    }

    /// Garbage in (any number, any vector length): an error or a valid schedule, never a panic.
    #[test]
    fn bad_input_never_panics(
        case in case_strategy(12),
        bad in prop::collection::vec(
            (any::<prop::sample::Index>(), prop_oneof![
                Just(0.0), Just(-1.0), Just(f64::NAN), Just(f64::INFINITY),
                Just(f64::NEG_INFINITY), Just(1e-310), Just(1e300), Just(f64::MIN_POSITIVE)
            ], any::<bool>()),
            0..4),
        cut in 0usize..3,
        grow in 0usize..3,
    ) {
        let Case { tree, mut compute_s, mut link_s } = case;
        for (at, v, which) in bad {
            let v_len = compute_s.len();
            if which { compute_s[at.index(v_len)] = v } else { link_s[at.index(v_len)] = v }
        }
        compute_s.truncate(compute_s.len().saturating_sub(cut));
        link_s.extend(vec![1.0; grow]);
        for policy in OrderPolicy::ALL {
            match dlt::schedule(&tree, &compute_s, &link_s, policy) {
                Ok(s) => {
                    let total: f64 = s.nodes.iter().map(|x| x.fraction_kept).sum();
                    prop_assert!((total - 1.0).abs() < 1e-9);
                    prop_assert!(s.predicted_finish_s.is_finite() && s.predicted_finish_s > 0.0);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
