//! The calibrated scatter's plan against the divisible-load schedule builder: a view whose
//! speeds are the given ones plans exactly the schedule the builder makes on them, and every
//! figure the plan took says whether it was measured, guessed or given.

use proptest::prelude::*;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::scatter_plan::{plan, GivenSpeeds};
use windrose_proto::weather::{Basis, GroupView, Guesses, LinkEntry, Weather, WeatherConfig};
use windrose_proto::Time;
use windrose_trees::dlt::{self, OrderPolicy};
use windrose_trees::Tree;

/// A tree over `n` nodes rooted at 0, node `i` hanging under `parents[i - 1] % i`.
fn tree(n: usize, parents: &[usize]) -> Tree {
    let edges: Vec<(NodeId, NodeId)> = (1..n)
        .map(|i| (NodeId(i as u32), NodeId((parents[i - 1] % i) as u32)))
        .collect();
    Tree::from_edges(n, NodeId(0), &edges).unwrap()
}

/// The view of node 0 after every member shared its compute speed (`compute[i]`, None: not
/// measured) and every parent the bandwidth of its links to its children (`link[c]`).
fn view(t: &Tree, compute: &[Option<f64>], link: &[Option<f64>]) -> GroupView {
    let n = t.node_count();
    let members: Vec<(NodeId, ClusterId)> = (0..n as u32)
        .map(|i| (NodeId(i), ClusterId(i % 2)))
        .collect();
    let mut w = Weather::new(NodeId(0), WeatherConfig::default()).unwrap();
    for i in 0..n as u32 {
        let node = NodeId(i);
        let row = t
            .children(node)
            .iter()
            .filter_map(|&c| {
                link[c.index()].map(|l| LinkEntry {
                    peer: c,
                    rtt_ms: None,
                    mb_s: Some((l, 0.0)),
                    mb_s_age_ms: None,
                })
            })
            .collect();
        w.take_row(Time::ZERO, node, row);
        w.take_compute(node, compute[i as usize].map(|c| (c, 0.0)));
    }
    w.view(Time::ZERO, &members)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Measured speeds everywhere: the plan is the builder's schedule on those speeds, to the
    /// last bit; given uniform speeds: the builder's uniform schedule, whatever the view.
    #[test]
    fn the_plan_on_the_view_is_the_builders_schedule_on_the_same_speeds(
        n in 2usize..24,
        parents in proptest::collection::vec(0usize..1000, 23),
        compute in proptest::collection::vec(1.0f64..5000.0, 24),
        link in proptest::collection::vec(0.5f64..2000.0, 24),
        load in 1u64..1 << 34,
        optimal in any::<bool>(),
    ) {
        let t = tree(n, &parents);
        let order = if optimal { OrderPolicy::Optimal } else { OrderPolicy::Given };
        let l = load as f64;
        let v = view(
            &t,
            &compute[..n].iter().map(|&c| Some(c)).collect::<Vec<_>>(),
            &link[..n].iter().map(|&b| Some(b)).collect::<Vec<_>>(),
        );
        let p = plan(&v, Guesses::default(), &t, load, order, GivenSpeeds::default()).unwrap();
        let compute_s: Vec<f64> = compute[..n].iter().map(|c| l / (c * 1e6)).collect();
        let link_s: Vec<f64> = link[..n].iter().map(|b| l / (b * 1e6)).collect();
        let want = dlt::schedule(&t, &compute_s, &link_s, order).unwrap();
        prop_assert_eq!(&p.schedule, &want);
        prop_assert_eq!(p.measured(), (n, n - 1));
        for s in &p.speeds {
            prop_assert_eq!(s.compute_mb_s, compute[s.node.index()]);
            prop_assert_eq!(s.link_mb_s.is_none(), s.node == NodeId(0));
        }

        // Given speeds for every node and link: the uniform schedule of `windrose scatter`.
        let given = GivenSpeeds { compute_mb_s: Some(compute[0]), link_mb_s: Some(link[0]) };
        let p = plan(&v, Guesses::default(), &t, load, order, given).unwrap();
        let want = dlt::schedule(
            &t,
            &vec![l / (compute[0] * 1e6); n],
            &vec![l / (link[0] * 1e6); n],
            order,
        )
        .unwrap();
        prop_assert_eq!(&p.schedule, &want);
        prop_assert!(p.speeds.iter().all(|s| s.compute == Basis::Given));
        prop_assert_eq!(p.measured(), (0, 0));
    }
}

#[test]
fn unmeasured_speeds_are_guessed_and_said_so() {
    // A chain 0 - 1 - 2 - 3; node 1 and the link into 3 measured.
    let t = tree(4, &[0, 1, 2]);
    let v = view(
        &t,
        &[None, Some(400.0), None, None],
        &[None, None, None, Some(30.0)],
    );
    let p = plan(
        &v,
        Guesses::default(),
        &t,
        1 << 30,
        OrderPolicy::Optimal,
        GivenSpeeds::default(),
    )
    .unwrap();
    assert_eq!(p.measured(), (1, 1));
    let by = |i: u32| *p.speeds.iter().find(|s| s.node == NodeId(i)).unwrap();
    // Unmeasured members take the median of the measured ones.
    assert_eq!((by(0).compute_mb_s, by(0).compute), (400.0, Basis::Guessed));
    assert_eq!(
        (by(1).compute_mb_s, by(1).compute),
        (400.0, Basis::Measured)
    );
    assert_eq!(by(3).link_mb_s, Some((30.0, Basis::Measured)));
    // 1 -> 2 crosses clusters (odd and even ids) like 2 -> 3: its site pair's median.
    assert_eq!(by(2).link_mb_s, Some((30.0, Basis::Guessed)));
    // 0 -> 1 crosses clusters 0 and 1 as well.
    assert_eq!(by(1).link_mb_s.map(|l| l.1), Some(Basis::Guessed));
    // A bad given speed is named.
    let bad = GivenSpeeds {
        compute_mb_s: Some(0.0),
        link_mb_s: None,
    };
    let e = plan(&v, Guesses::default(), &t, 1, OrderPolicy::Optimal, bad).unwrap_err();
    assert!(e.to_string().contains("compute_mb_s"), "{e}");
}
