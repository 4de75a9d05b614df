//! Tree multicast (MagPIe, Balanced Multicasting) in the simulator: every byte reaches every
//! node on random platforms, traffic shaping holds a tree to its rate, and a Balanced plan
//! reaches its planned rate on the four-clusters platform.

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_proto::pieces::{ClusterLayout, Manifest, MemoVerifier, SwarmSetup};
use windrose_proto::tree_multicast::{PlanTree, TreeMulticast, TreeMulticastConfig, TreePlan};
use windrose_proto::TransferId;
use windrose_sim::engine::{SimConfig, Simulation};
use windrose_sim::metrics::{Metrics, NodeOutcome};
use windrose_trees::multicast::balanced::{plan_balanced, PlanOptions};
use windrose_trees::Tree;

fn layout_of(p: &Platform) -> ClusterLayout {
    ClusterLayout::new((0..p.node_count()).map(|i| {
        let n = NodeId::from(i);
        (n, p.cluster_of(n))
    }))
    .unwrap()
}

fn setup_for(p: &Platform, root: NodeId, data: &Bytes, piece_len: u32) -> SwarmSetup {
    SwarmSetup {
        transfer: TransferId(1),
        root,
        manifest: Arc::new(Manifest::build(data, piece_len).unwrap()),
        layout: Arc::new(layout_of(p)),
        verifier: Arc::new(MemoVerifier::new()),
        keeper: None,
    }
}

/// Runs the plan; returns the metrics and the simulation (for deliveries).
fn simulate(
    p: &Platform,
    setup: &SwarmSetup,
    data: &Bytes,
    plan: TreePlan,
    config: TreeMulticastConfig,
    record: bool,
) -> (Metrics, Simulation) {
    let plan = Arc::new(plan);
    let mut sim = Simulation::new(
        p.clone(),
        SimConfig {
            record_deliveries: record,
            strict: true,
            ..SimConfig::default()
        },
    );
    for i in 0..p.node_count() {
        let n = NodeId::from(i);
        let d = (n == setup.root).then(|| data.clone());
        sim.add_node(TreeMulticast::new(n, setup, d, plan.clone(), config).unwrap())
            .unwrap();
    }
    let m = sim.run().unwrap();
    (m, sim)
}

/// The time the last node finished.
fn completion_s(m: &Metrics, nodes: usize) -> f64 {
    (0..nodes)
        .map(|i| m.node(NodeId::from(i)).unwrap().finished_at_s.unwrap())
        .fold(0.0, f64::max)
}

fn check_all_delivered(m: &Metrics, sim: &Simulation, setup: &SwarmSetup, data: &Bytes) {
    assert!(m.all_finished(), "unfinished: {:?}", m.unfinished_nodes());
    for i in 0..sim.node_ids().len() {
        let n = NodeId::from(i);
        if n == setup.root {
            continue;
        }
        let mut at = 0;
        let mut got = Vec::with_capacity(data.len());
        for (offset, d) in sim.delivered(n) {
            assert_eq!(*offset, at, "node {n}");
            at += d.len() as u64;
            got.extend_from_slice(d);
        }
        assert_eq!(got, data[..], "node {n}");
    }
}

fn random_platform(rng: &mut ChaCha8Rng) -> Platform {
    let clusters = rng.gen_range(1..=4);
    let mut b = Platform::builder();
    for _ in 0..clusters {
        b = b.cluster(ClusterSpec::uniform(
            rng.gen_range(1..=6),
            rng.gen_range(1e6..1e8),
            rng.gen_range(1e7..1e9),
            rng.gen_range(1e-5..1e-3),
        ));
    }
    b.wan_all(rng.gen_range(1e5..1e7), rng.gen_range(1e-3..5e-2))
        .build()
        .unwrap()
}

fn random_data(len: usize, rng: &mut ChaCha8Rng) -> Bytes {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn magpie_and_balanced_deliver_everything(
        seed in any::<u64>(),
        len in 1usize..200_000,
        piece_len in 1000u32..40_000,
        shape in any::<bool>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let p = random_platform(&mut rng);
        if p.node_count() < 2 {
            return Ok(());
        }
        let root = NodeId::from(rng.gen_range(0..p.node_count()));
        let data = random_data(len, &mut rng);
        let setup = setup_for(&p, root, &data, piece_len);
        let config = TreeMulticastConfig { shape, ..TreeMulticastConfig::default() };

        let magpie = TreePlan::magpie(&setup.layout, root).unwrap();
        let (m, sim) = simulate(&p, &setup, &data, magpie, config, true);
        check_all_delivered(&m, &sim, &setup, &data);

        let options = PlanOptions { iterations: 60, ..PlanOptions::default() };
        let plan = plan_balanced(&p, root, &options).unwrap();
        let balanced = TreePlan::from_balanced(&plan).unwrap();
        let (m, sim) = simulate(&p, &setup, &data, balanced, config, true);
        check_all_delivered(&m, &sim, &setup, &data);
    }
}

#[test]
fn a_shaped_tree_runs_at_its_rate() {
    // One fast cluster (100 MB/s per node): a chain and a binomial tree shaped to 2 MB/s.
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(8, 1e8, 1e9, 1e-4))
        .build()
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let data = random_data(4_000_000, &mut rng);
    let setup = setup_for(&p, NodeId(0), &data, 40_000);
    let rate = 2e6;
    let chain: Vec<_> = (1..8u32).map(|i| (NodeId(i), NodeId(i - 1))).collect();
    let trees = [
        Tree::from_edges(8, NodeId(0), &chain).unwrap(),
        TreePlan::magpie(&setup.layout, NodeId(0)).unwrap().trees[0]
            .tree
            .clone(),
    ];
    for tree in trees {
        let plan = TreePlan {
            trees: vec![PlanTree {
                tree,
                rate_bytes_s: Some(rate),
            }],
        };
        let (m, _) = simulate(
            &p,
            &setup,
            &data,
            plan.clone(),
            TreeMulticastConfig::default(),
            false,
        );
        let t = completion_s(&m, 8);
        let ideal = data.len() as f64 / rate; // 2 s
        assert!((t - ideal).abs() < 0.02 * ideal, "{t} vs {ideal}");
        // Unshaped, the network's 100 MB/s goes far faster.
        let unshaped = TreeMulticastConfig {
            shape: false,
            ..TreeMulticastConfig::default()
        };
        let (m, _) = simulate(&p, &setup, &data, plan, unshaped, false);
        assert!(completion_s(&m, 8) < 0.2 * ideal);
    }
}

#[test]
fn balanced_reaches_its_planned_rate_on_four_clusters() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios/four-clusters.toml");
    let scenario = windrose_sim::scenario::load_scenario(&path).unwrap();
    let p = scenario.platform;
    let root = NodeId(0);
    let plan = plan_balanced(&p, root, &PlanOptions::default()).unwrap();
    let planned = plan.rate_bytes_s();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let data = random_data(64 << 20, &mut rng);
    let setup = setup_for(&p, root, &data, 256 << 10);
    let tree_plan = TreePlan::from_balanced(&plan).unwrap();
    assert_eq!(tree_plan.rate_bytes_s(), Some(planned));
    let (m, _) = simulate(
        &p,
        &setup,
        &data,
        tree_plan,
        TreeMulticastConfig::default(),
        false,
    );
    assert!(m.all_finished());
    let got = data.len() as f64 / completion_s(&m, p.node_count());
    eprintln!(
        "balanced on four-clusters: {got:.0} B/s, planned {planned:.0} B/s in {} trees",
        plan.trees.len()
    );
    assert!(
        got >= 0.9 * planned,
        "{got:.0} B/s vs planned {planned:.0} B/s"
    );
}

#[test]
fn the_subtree_of_a_failed_relay_is_served_by_the_root() {
    let site = ClusterSpec::uniform(6, 2e7, 1e9, 1e-4);
    let p = Platform::builder()
        .cluster(site)
        .cluster(site)
        .wan_all(5e6, 0.005)
        .build()
        .unwrap();
    let root = NodeId(0);
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let data = random_data(3_000_000, &mut rng);
    let setup = setup_for(&p, root, &data, 50_000);
    let balanced = plan_balanced(&p, root, &PlanOptions::default()).unwrap();
    let plans = [
        TreePlan::magpie(&setup.layout, root).unwrap(),
        TreePlan::from_balanced(&balanced).unwrap(),
    ];
    for plan in plans {
        // A relay of the first tree, failed a third of the way through the run.
        let relay = (1..12u32)
            .map(NodeId)
            .find(|&x| !plan.trees[0].tree.children(x).is_empty())
            .unwrap();
        let (m, _) = simulate(
            &p,
            &setup,
            &data,
            plan.clone(),
            TreeMulticastConfig::default(),
            false,
        );
        let t = completion_s(&m, 12);
        let plan = Arc::new(plan);
        let mut sim = Simulation::new(
            p.clone(),
            SimConfig {
                record_deliveries: true,
                strict: true,
                ..SimConfig::default()
            },
        );
        for i in 0..12u32 {
            let n = NodeId(i);
            let d = (n == root).then(|| data.clone());
            let config = TreeMulticastConfig::default();
            sim.add_node(TreeMulticast::new(n, &setup, d, plan.clone(), config).unwrap())
                .unwrap();
        }
        sim.fail_node_at(relay, t / 3.0).unwrap();
        let m = sim.run().unwrap();
        assert_eq!(m.nodes_with(NodeOutcome::Failed), vec![relay]);
        let finished = m.nodes_with(NodeOutcome::Finished);
        assert_eq!(finished.len(), 11, "{:?}", m.unfinished_nodes());
        // The relay's children asked the root for what they missed (the root gets nothing else).
        assert!(m.node(root).unwrap().messages_received > 0);
        for i in (0..12u32).map(NodeId).filter(|&x| x != root && x != relay) {
            let got: Vec<u8> = sim
                .delivered(i)
                .iter()
                .flat_map(|(_, d)| d.to_vec())
                .collect();
            assert_eq!(got, data[..], "node {i}");
        }
    }
}

/// The measurement: 4 x 16 nodes, 600 MB in 1 MiB pieces, WAN 8 MB/s and 10 ms one-way
/// between every pair of clusters; then the same on the four-clusters platform (nominal
/// capacities). Run with
/// `cargo test --release -p windrose-sim --test integration -- tree_multicast:: --ignored --nocapture`.
#[test]
#[ignore]
fn measure_four_by_sixteen() {
    let cluster = ClusterSpec::uniform(16, 1.25e8, 1.25e9, 1e-4);
    let uniform = Platform::builder()
        .cluster(cluster)
        .cluster(cluster)
        .cluster(cluster)
        .cluster(cluster)
        .wan_all(8e6, 0.01)
        .build()
        .unwrap();
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios/four-clusters.toml");
    let four = windrose_sim::scenario::load_scenario(&path)
        .unwrap()
        .platform;
    let data = Bytes::from(vec![7u8; 600_000_000]);
    for (platform, p) in [("wan-8MB/s", uniform), ("four-clusters", four)] {
        let root = NodeId(0);
        let bound = windrose_trees::multicast::bound::multicast_bound(&p, root)
            .unwrap()
            .bytes_s;
        let setup = setup_for(&p, root, &data, 1 << 20);
        let t0 = std::time::Instant::now();
        let plan = plan_balanced(&p, root, &PlanOptions::default()).unwrap();
        let plan_wall = t0.elapsed().as_secs_f64();
        println!(
            "{platform}: bound {:.3} MB/s; balanced plan {:.3} MB/s in {} trees (planned in {plan_wall:.3} s)",
            bound / 1e6,
            plan.rate_bytes_s() / 1e6,
            plan.trees.len()
        );
        // Warm the verifier (hashes each piece once per run), so wall times are the engine's.
        for i in 0..setup.manifest.piece_count() {
            let piece = setup.manifest.slice(&data, i);
            assert!(setup.verifier.verify(&setup.manifest, i, &piece));
        }
        let runs = [
            ("magpie", TreePlan::magpie(&setup.layout, root).unwrap()),
            ("balanced", TreePlan::from_balanced(&plan).unwrap()),
        ];
        for (name, tree_plan) in runs {
            let t0 = std::time::Instant::now();
            let (m, sim) = simulate(
                &p,
                &setup,
                &data,
                tree_plan,
                TreeMulticastConfig::default(),
                false,
            );
            let wall = t0.elapsed().as_secs_f64();
            assert!(m.all_finished());
            let t = completion_s(&m, p.node_count());
            let thr = data.len() as f64 / t;
            println!(
                "  {name}: completion {t:.2} s simulated, {:.3} MB/s = {:.1} % of the bound, wall {wall:.3} s, {} events",
                thr / 1e6,
                100.0 * thr / bound,
                sim.events()
            );
        }
    }
}
