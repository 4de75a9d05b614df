//! SOO and the store-and-forward costs it works on, against independent implementations:
//! petgraph's Dijkstra for the costs, brute force over every order for the exact search, and
//! the exact search for the genetic algorithm.

use petgraph::algo::dijkstra;
use petgraph::graph::{NodeIndex, UnGraph};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_trees::heterosort::{
    exact_sort_path, soo, HeteroSortError, Mesh, SooParams, SortPath, StoreForward, EXACT_MAX_NODES,
};

/// A random grid of at most `max_side x max_side` nodes: link costs 1 to 9, each link failed
/// with probability 0.15, each node with probability `node_failure`.
fn random_grid(rng: &mut ChaCha8Rng, max_side: usize, node_failure: f64) -> Mesh {
    let (r, c) = (rng.gen_range(1..=max_side), rng.gen_range(1..=max_side));
    let mut m = Mesh::grid(r, c).unwrap();
    for (a, b, _) in m.live_links() {
        m.set_link_cost(a, b, rng.gen_range(1..=9)).unwrap();
        if rng.gen_bool(0.15) {
            m.fail_link(a, b).unwrap();
        }
    }
    for n in 0..r * c {
        if rng.gen_bool(node_failure) {
            m.fail_node(n).unwrap();
        }
    }
    m
}

/// A random graph that is not a grid: 1 to `max_n` nodes, each pair linked with probability
/// 0.4.
fn random_graph(rng: &mut ChaCha8Rng, max_n: usize) -> Mesh {
    let n = rng.gen_range(1..=max_n);
    let mut m = Mesh::with_nodes(n).unwrap();
    for a in 0..n {
        for b in a + 1..n {
            if rng.gen_bool(0.4) {
                m.add_link(a, b, rng.gen_range(1..=20)).unwrap();
            }
        }
    }
    if n > 2 && rng.gen_bool(0.5) {
        m.fail_node(rng.gen_range(0..n)).unwrap();
    }
    m
}

/// Costs between live nodes by petgraph's Dijkstra over the live links: `None` when the live
/// nodes are split.
fn petgraph_costs(m: &Mesh) -> Option<(Vec<usize>, Vec<Vec<u64>>)> {
    let live = m.live_nodes();
    let mut g = UnGraph::<usize, u64>::new_undirected();
    let ix: Vec<NodeIndex> = live.iter().map(|&n| g.add_node(n)).collect();
    let pos = |n: usize| live.iter().position(|&x| x == n).unwrap();
    for (a, b, c) in m.live_links() {
        g.add_edge(ix[pos(a)], ix[pos(b)], u64::from(c));
    }
    let mut out = Vec::new();
    for &s in &ix {
        let d = dijkstra(&g, s, None, |e| *e.weight());
        let row: Option<Vec<u64>> = ix.iter().map(|t| d.get(t).copied()).collect();
        out.push(row?);
    }
    Some((live, out))
}

/// Every order of the live nodes (first node below the last, to skip reversals).
fn brute_force(live: &[usize], cost: &[Vec<u64>]) -> u64 {
    fn go(cost: &[Vec<u64>], path: &mut Vec<usize>, used: &mut [bool], best: &mut u64) {
        let k = used.len();
        if path.len() == k {
            if k < 2 || path[0] < path[k - 1] {
                let c = path.windows(2).map(|w| cost[w[0]][w[1]]).sum();
                *best = (*best).min(c);
            }
            return;
        }
        for i in 0..k {
            if !used[i] {
                used[i] = true;
                path.push(i);
                go(cost, path, used, best);
                path.pop();
                used[i] = false;
            }
        }
    }
    let mut best = u64::MAX;
    go(
        cost,
        &mut Vec::new(),
        &mut vec![false; live.len()],
        &mut best,
    );
    best
}

/// A path visits every live node once, and its cost is what it claims.
fn check_valid(sf: &StoreForward, p: &SortPath) -> Result<(), TestCaseError> {
    prop_assert_eq!(p.order.len(), sf.len());
    prop_assert_eq!(sf.path_cost(&p.order), Ok(p.cost));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn store_and_forward_costs_match_petgraph(seed in any::<u64>(), grid in any::<bool>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let m = if grid { random_grid(&mut rng, 6, 0.15) } else { random_graph(&mut rng, 11) };
        let Some((live, want)) = petgraph_costs(&m) else {
            prop_assume!(!m.live_nodes().is_empty());
            let split = matches!(StoreForward::new(&m), Err(HeteroSortError::Split { .. }));
            prop_assert!(split);
            return Ok(());
        };
        prop_assume!(!live.is_empty());
        let sf = StoreForward::new(&m).unwrap();
        prop_assert_eq!(sf.live(), &live[..]);
        for (i, &a) in live.iter().enumerate() {
            for (j, &b) in live.iter().enumerate() {
                prop_assert_eq!(sf.cost(a, b).unwrap(), want[i][j]);
                // The route is a walk over live links whose costs add up to the cost.
                let r = sf.route(a, b).unwrap();
                prop_assert_eq!((r[0], *r.last().unwrap()), (a, b));
                let mut sum = 0;
                for w in r.windows(2) {
                    sum += u64::from(m.link_cost(w[0], w[1]).expect("a live link"));
                }
                prop_assert_eq!(sum, want[i][j]);
            }
        }
    }

    #[test]
    fn exact_search_equals_brute_force(seed in any::<u64>(), grid in any::<bool>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let m = if grid { random_grid(&mut rng, 3, 0.2) } else { random_graph(&mut rng, 8) };
        let Some((live, cost)) = petgraph_costs(&m) else { return Ok(()) };
        prop_assume!(!live.is_empty() && live.len() <= 8);
        let sf = StoreForward::new(&m).unwrap();
        let p = exact_sort_path(&sf).unwrap();
        check_valid(&sf, &p)?;
        prop_assert_eq!(p.cost, brute_force(&live, &cost));
    }
}

proptest! {
    // Fixed seed: the GA-quality claims below are about these cases, so they cannot flake.
    #![proptest_config(ProptestConfig {
        cases: 200,
        rng_seed: RngSeed::Fixed(0x5007),
        ..ProptestConfig::default()
    })]

    #[test]
    fn soo_is_valid_never_below_exact_exact_on_six_nodes_and_close_above(seed in any::<u64>(), grid in any::<bool>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let m = if grid { random_grid(&mut rng, 4, 0.2) } else { random_graph(&mut rng, 10) };
        let sf = match StoreForward::new(&m) {
            Ok(sf) => sf,
            Err(_) => return Ok(()),
        };
        let best = exact_sort_path(&sf).unwrap();
        for polish_rate in [SooParams::default().polish_rate, 0.0] {
            let params = SooParams { polish_rate, ..SooParams::default() };
            let p = soo(&sf, &params, &mut rng).unwrap();
            check_valid(&sf, &p)?;
            prop_assert!(p.cost >= best.cost);
            if sf.len() <= 6 {
                prop_assert_eq!(p.cost, best.cost, "polish_rate {}", polish_rate);
            } else {
                // Within 25% of the optimum, polished or not.
                prop_assert!(p.cost * 4 <= best.cost * 5, "polish_rate {}: {} vs {}", polish_rate, p.cost, best.cost);
            }
        }
    }
}

/// The check: on 4 x 4 meshes with failed nodes and buses, SOO (default parameters)
/// finds the exact optimum every time; the plain GA without local search stays within 25% and
/// finds it on at least 70% (measured: 156 connected meshes, plain GA exact on 117, at worst
/// 1.087 x the optimum).
#[test]
fn soo_equals_exact_on_4x4_meshes_with_failures() {
    let (mut cases, mut plain_exact) = (0, 0);
    let mut worst_plain = 1.0f64;
    for seed in 0..200u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut m = Mesh::grid(4, 4).unwrap();
        for (a, b, _) in m.live_links() {
            m.set_link_cost(a, b, rng.gen_range(1..=9)).unwrap();
        }
        for _ in 0..rng.gen_range(0..=3) {
            let (a, b, _) = *m.live_links().choose_one(&mut rng);
            m.fail_link(a, b).unwrap();
        }
        for _ in 0..rng.gen_range(1..=4) {
            m.fail_node(rng.gen_range(0..16)).unwrap();
        }
        let Ok(sf) = StoreForward::new(&m) else {
            continue;
        };
        cases += 1;
        let best = exact_sort_path(&sf).unwrap();
        let p = soo(&sf, &SooParams::default(), &mut rng).unwrap();
        assert_eq!(sf.path_cost(&p.order), Ok(p.cost));
        assert_eq!(p.cost, best.cost, "seed {seed}: {p:?} vs {best:?}");
        let plain = SooParams {
            polish_rate: 0.0,
            ..SooParams::default()
        };
        let q = soo(&sf, &plain, &mut rng).unwrap();
        assert_eq!(sf.path_cost(&q.order), Ok(q.cost));
        assert!(q.cost >= best.cost);
        worst_plain = worst_plain.max(q.cost as f64 / best.cost as f64);
        plain_exact += usize::from(q.cost == best.cost);
    }
    assert!(cases >= 150, "only {cases} connected meshes");
    assert!(worst_plain <= 1.25, "plain GA {worst_plain} x the optimum");
    assert!(
        plain_exact * 10 >= cases * 7,
        "plain GA exact on {plain_exact} of {cases}"
    );
}

trait ChooseOne<T> {
    fn choose_one(&self, rng: &mut ChaCha8Rng) -> &T;
}

impl<T> ChooseOne<T> for Vec<T> {
    fn choose_one(&self, rng: &mut ChaCha8Rng) -> &T {
        &self[rng.gen_range(0..self.len())]
    }
}

#[test]
fn store_and_forward_through_a_visited_node() {
    // A plus sign: the 3 x 3 grid without its corners. Every order must pass the centre more
    // than once: arm, centre, arm, then two arm-to-arm steps of 2 hops = 6.
    let mut m = Mesh::grid(3, 3).unwrap();
    for corner in [0, 2, 6, 8] {
        m.fail_node(corner).unwrap();
    }
    let sf = StoreForward::new(&m).unwrap();
    assert_eq!(sf.route(3, 5).unwrap(), vec![3, 4, 5]);
    assert_eq!(exact_sort_path(&sf).unwrap().cost, 6);
    let p = soo(
        &sf,
        &SooParams::default(),
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert_eq!(p.cost, 6);
    // A failed bus forces a detour: 0-1 down, so 0 reaches 1 through 3, 4 (2 x 2 grid).
    let mut m = Mesh::grid(2, 2).unwrap();
    m.fail_link(0, 1).unwrap();
    let sf = StoreForward::new(&m).unwrap();
    assert_eq!(sf.route(0, 1).unwrap(), vec![0, 2, 3, 1]);
    assert_eq!(sf.cost(0, 1).unwrap(), 3);
    assert_eq!(m.link_cost(0, 1), None);
}

#[test]
fn slow_bus_moves_the_sort_path() {
    // A 2 x 3 grid whose last column (nodes 2 and 5) hangs off the rest by two slow buses,
    // 1-2 and 4-5 at cost 10. The snake 0 1 2 5 4 3 crosses them twice (23); the best path
    // keeps 2 and 5 at one end and crosses once: 4 x 1 + 10 = 14.
    let mut m = Mesh::grid(2, 3).unwrap();
    m.set_link_cost(1, 2, 10).unwrap();
    m.set_link_cost(4, 5, 10).unwrap();
    let sf = StoreForward::new(&m).unwrap();
    let best = exact_sort_path(&sf).unwrap();
    assert_eq!(best.cost, 14);
    let p = soo(
        &sf,
        &SooParams::default(),
        &mut ChaCha8Rng::seed_from_u64(3),
    )
    .unwrap();
    assert_eq!(p.cost, 14);
}

#[test]
fn same_seed_same_path() {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let mut m = random_grid(&mut rng, 6, 0.0);
    while StoreForward::new(&m).is_err() {
        m = random_grid(&mut rng, 6, 0.0);
    }
    let sf = StoreForward::new(&m).unwrap();
    let params = SooParams {
        generations: 50,
        ..SooParams::default()
    };
    let a = soo(&sf, &params, &mut ChaCha8Rng::seed_from_u64(5)).unwrap();
    let b = soo(&sf, &params, &mut ChaCha8Rng::seed_from_u64(5)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn one_and_two_live_nodes() {
    let mut m = Mesh::grid(1, 3).unwrap();
    m.fail_node(0).unwrap();
    m.fail_node(2).unwrap();
    let sf = StoreForward::new(&m).unwrap();
    let want = SortPath {
        order: vec![1],
        cost: 0,
    };
    assert_eq!(exact_sort_path(&sf).unwrap(), want);
    assert_eq!(
        soo(
            &sf,
            &SooParams::default(),
            &mut ChaCha8Rng::seed_from_u64(0)
        )
        .unwrap(),
        want
    );
    let mut m = Mesh::grid(1, 2).unwrap();
    m.set_link_cost(0, 1, 7).unwrap();
    let sf = StoreForward::new(&m).unwrap();
    assert_eq!(exact_sort_path(&sf).unwrap().cost, 7);
    let p = soo(
        &sf,
        &SooParams::default(),
        &mut ChaCha8Rng::seed_from_u64(0),
    )
    .unwrap();
    assert_eq!(p.cost, 7);
}

#[test]
fn errors_name_what_and_where() {
    assert_eq!(Mesh::grid(0, 3).unwrap_err(), HeteroSortError::EmptyMesh);
    assert_eq!(Mesh::with_nodes(0).unwrap_err(), HeteroSortError::EmptyMesh);
    let mut m = Mesh::grid(5, 5).unwrap();
    assert_eq!(
        m.fail_node(25).unwrap_err().to_string(),
        "node 25 is outside the mesh of 25 nodes (ids 0 to 24)"
    );
    assert_eq!(
        m.fail_link(0, 6).unwrap_err().to_string(),
        "nodes 0 and 6 have no link between them in the mesh"
    );
    assert_eq!(
        m.set_link_cost(0, 6, 3).unwrap_err(),
        HeteroSortError::NotALink { a: 0, b: 6 }
    );
    assert_eq!(
        m.add_link(3, 3, 1).unwrap_err().to_string(),
        "node 3 cannot be linked to itself"
    );
    assert_eq!(
        m.add_link(0, 1, 0).unwrap_err().to_string(),
        "link 0-1: a cost must be at least 1, got 0"
    );
    assert_eq!(
        m.grid_id(5, 0).unwrap_err().to_string(),
        "position (row 5, column 0) is outside the 5 x 5 grid"
    );
    assert_eq!(
        exact_sort_path(&StoreForward::new(&m).unwrap()).unwrap_err(),
        HeteroSortError::TooManyForExact {
            live: 25,
            max: EXACT_MAX_NODES
        }
    );
    m.fail_node(7).unwrap();
    let sf = StoreForward::new(&m).unwrap();
    assert_eq!(
        sf.cost(7, 0).unwrap_err().to_string(),
        "the sort path names node 7, which is not a live node of the mesh"
    );
    let mut order: Vec<usize> = sf.live().to_vec();
    order[3] = order[1];
    assert_eq!(
        sf.path_cost(&order).unwrap_err().to_string(),
        "the sort path visits node 1 twice (at steps 1 and 3)"
    );
    assert_eq!(
        sf.path_cost(&sf.live()[1..]).unwrap_err().to_string(),
        "the sort path leaves out live node 0"
    );
    let graph = Mesh::with_nodes(2).unwrap();
    assert_eq!(graph.grid_id(0, 0), Err(HeteroSortError::NotAGrid));
    let one = SortPath {
        order: vec![0],
        cost: 0,
    };
    assert_eq!(
        one.on_grid(&graph).unwrap_err().to_string(),
        "the mesh was not built as a grid: it has no rows and columns"
    );
    assert_eq!(
        SortPath {
            order: vec![30],
            cost: 0
        }
        .on_grid(&m)
        .unwrap_err(),
        HeteroSortError::NodeOutsideMesh {
            node: 30,
            nodes: 25
        }
    );
    let mut all_failed = Mesh::grid(1, 2).unwrap();
    all_failed.fail_node(0).unwrap();
    all_failed.fail_node(1).unwrap();
    assert_eq!(
        StoreForward::new(&all_failed).unwrap_err(),
        HeteroSortError::NoLiveNodes
    );

    let bad = |p: SooParams| soo(&sf, &p, &mut ChaCha8Rng::seed_from_u64(0)).unwrap_err();
    let d = SooParams::default();
    assert_eq!(
        bad(SooParams {
            population: 1,
            ..d.clone()
        })
        .to_string(),
        "SOO parameter population must be at least 2, got 1"
    );
    assert_eq!(
        bad(SooParams {
            mutation_rate: 1.5,
            ..d.clone()
        })
        .to_string(),
        "SOO parameter mutation_rate must be between 0 and 1, got 1.5"
    );
    assert!(matches!(
        bad(SooParams {
            crossover_rate: f64::NAN,
            ..d.clone()
        }),
        HeteroSortError::Parameter {
            what: "crossover_rate",
            ..
        }
    ));
    assert!(matches!(
        bad(SooParams {
            polish_rate: -0.1,
            ..d.clone()
        }),
        HeteroSortError::Parameter {
            what: "polish_rate",
            ..
        }
    ));
    assert!(matches!(
        bad(SooParams {
            tournament: 0,
            ..d.clone()
        }),
        HeteroSortError::Parameter {
            what: "tournament",
            ..
        }
    ));
    assert!(matches!(
        bad(SooParams { elite: 64, ..d }),
        HeteroSortError::Parameter { what: "elite", .. }
    ));
}
