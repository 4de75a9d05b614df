//! BitTorrent in the simulator: every node receives every byte and finishes on random
//! platforms, runs are reproducible from their seed, a failure does not stop the run, and (an
//! ignored test, run by hand in release) the paper's Fig. 4 point with its numbers.

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::bittorrent::{BitTorrent, BitTorrentConfig};
use windrose_proto::frame::TransferId;
use windrose_proto::node_rng;
use windrose_proto::pieces::{ClusterLayout, Manifest, MemoVerifier, PieceVerifier, SwarmSetup};
use windrose_sim::engine::{MemoryLog, RunLimits, SimConfig, Simulation};
use windrose_sim::metrics::Metrics;

fn random_bytes(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

fn swarm(p: &Platform, data: &Bytes, piece_len: u32, root: NodeId) -> SwarmSetup {
    let layout = ClusterLayout::new(
        (0..p.node_count() as u32).map(|i| (NodeId(i), p.cluster_of(NodeId(i)))),
    )
    .unwrap();
    SwarmSetup {
        transfer: TransferId(3),
        root,
        manifest: Arc::new(Manifest::build(data, piece_len).unwrap()),
        layout: Arc::new(layout),
        verifier: Arc::new(MemoVerifier::new()) as Arc<dyn PieceVerifier>,
        keeper: None,
    }
}

/// A simulation of BitTorrent from `root` with every node's machine added.
fn simulation(
    p: Platform,
    data: &Bytes,
    piece_len: u32,
    root: NodeId,
    config: &BitTorrentConfig,
    seed: u64,
    limits: RunLimits,
) -> (Simulation, SwarmSetup) {
    let s = swarm(&p, data, piece_len, root);
    let nodes = p.node_count() as u32;
    let mut sim = Simulation::new(
        p,
        SimConfig {
            record_deliveries: true,
            strict: true,
            limits,
            ..SimConfig::default()
        },
    );
    for i in 0..nodes {
        let x = NodeId(i);
        let d = (x == root).then(|| data.clone());
        sim.add_node(BitTorrent::new(x, &s, d, config.clone(), node_rng(seed, x)).unwrap())
            .unwrap();
    }
    (sim, s)
}

fn assert_all_received(sim: &Simulation, m: &Metrics, data: &Bytes, root: NodeId) {
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    assert!(m.all_finished(), "unfinished: {:?}", m.unfinished_nodes());
    for x in sim.node_ids() {
        if x == root {
            continue;
        }
        let got: Vec<u8> = sim
            .delivered(x)
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect();
        assert_eq!(got.len(), data.len(), "node {x}");
        assert!(got[..] == data[..], "node {x} got other bytes");
        let progress = m.node(x).unwrap().progress.unwrap();
        assert_eq!(progress.done_bytes, data.len() as u64);
    }
}

fn limits() -> RunLimits {
    RunLimits {
        max_time_s: Some(1e6),
        max_events: Some(50_000_000),
    }
}

#[derive(Debug, Clone)]
struct Case {
    clusters: Vec<(usize, f64, f64, f64)>,
    wan: Vec<(f64, f64)>,
    len: usize,
    piece: u32,
    root: u32,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        // Capacities log-uniform, so that some runs last long enough for many rechokes.
        proptest::collection::vec((1usize..=8, 4f64..8.0, 4f64..9.0, 1e-5f64..1e-3), 1..=4),
        proptest::collection::vec((4f64..7.0, 1e-4f64..5e-2), 12),
        0usize..300_000,
        1000u32..40_000,
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(clusters, wan, len, piece, root, seed)| Case {
            clusters,
            wan,
            len,
            piece,
            root,
            seed,
        })
}

fn platform(c: &Case) -> Platform {
    let mut b = Platform::builder();
    for &(nodes, node_exp, access_exp, lat) in &c.clusters {
        b = b.cluster(ClusterSpec::uniform(
            nodes,
            10f64.powf(node_exp),
            10f64.powf(access_exp),
            lat,
        ));
    }
    let k = c.clusters.len();
    let mut w = 0;
    for from in 0..k {
        for to in 0..k {
            if from != to {
                let (bw_exp, lat) = c.wan[w];
                w += 1;
                b = b.wan(
                    ClusterId::from(from),
                    ClusterId::from(to),
                    10f64.powf(bw_exp),
                    lat,
                );
            }
        }
    }
    b.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_node_receives_every_byte_on_random_platforms(c in case()) {
        let p = platform(&c);
        let root = NodeId(c.root % p.node_count() as u32);
        let data = random_bytes(c.len, c.seed);
        let (mut sim, _) = simulation(
            p, &data, c.piece, root, &BitTorrentConfig::default(), c.seed, limits(),
        );
        let m = sim.run().unwrap();
        assert_all_received(&sim, &m, &data, root);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn the_others_complete_when_a_receiver_fails(
        c in case(),
        victim in any::<u32>(),
        at in 0.0f64..2.0,
    ) {
        let p = platform(&c);
        let nodes = p.node_count() as u32;
        prop_assume!(nodes >= 2);
        let root = NodeId(c.root % nodes);
        let victim = NodeId((root.0 + 1 + victim % (nodes - 1)) % nodes);
        let data = random_bytes(c.len, c.seed);
        let (mut sim, _) = simulation(
            p, &data, c.piece, root, &BitTorrentConfig::default(), c.seed, limits(),
        );
        sim.fail_node_at(victim, at).unwrap();
        let m = sim.run().unwrap();
        prop_assert!(m.errors.is_empty(), "{:?}", m.errors);
        prop_assert_eq!(m.failed, 1);
        prop_assert_eq!(m.finished as u32, nodes - 1);
        for x in sim.node_ids().into_iter().filter(|&x| x != root && x != victim) {
            let got: u64 = sim.delivered(x).iter().map(|(_, b)| b.len() as u64).sum();
            prop_assert_eq!(got, data.len() as u64, "node {}", x);
        }
    }
}

fn four_clusters(per: usize) -> Platform {
    let site = ClusterSpec::uniform(per, 1.25e8, 1.25e9, 1e-4);
    Platform::builder()
        .cluster(site)
        .cluster(site)
        .cluster(site)
        .cluster(site)
        .wan_all(8e6, 0.01)
        .build()
        .unwrap()
}

fn logged_run(seed: u64) -> (Vec<u8>, String) {
    let data = random_bytes(2_000_000, 5);
    let (mut sim, _) = simulation(
        four_clusters(4),
        &data,
        64 * 1024,
        NodeId(0),
        &BitTorrentConfig::default(),
        seed,
        limits(),
    );
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    let m = sim.run().unwrap();
    assert_all_received(&sim, &m, &data, NodeId(0));
    (log.contents(), serde_json::to_string(&m).unwrap())
}

#[test]
fn same_seed_same_event_log() {
    let (a, ma) = logged_run(17);
    let (b, mb) = logged_run(17);
    assert!(a.len() > 100_000, "log of {} bytes", a.len());
    assert!(a == b, "the event logs differ");
    assert_eq!(ma, mb);
    let (c, _) = logged_run(18);
    assert!(a != c, "another seed gives the same run");
}

#[test]
fn a_failed_receiver_does_not_stop_the_others() {
    let data = random_bytes(3_000_000, 8);
    let (mut sim, _) = simulation(
        four_clusters(3),
        &data,
        100_000,
        NodeId(0),
        &BitTorrentConfig::default(),
        4,
        limits(),
    );
    sim.fail_node_at(NodeId(7), 0.1).unwrap();
    let m = sim.run().unwrap();
    assert_eq!(m.failed, 1);
    assert_eq!(m.finished, 11);
    for x in (1..12).filter(|&x| x != 7) {
        let got: u64 = sim
            .delivered(NodeId(x))
            .iter()
            .map(|(_, b)| b.len() as u64)
            .sum();
        assert_eq!(got, data.len() as u64, "node {x}");
    }
}

/// The Fig. 4 point: 4 clusters x 16 nodes, 600 MB from node 0, WAN 8 MB/s and 10 ms one way
/// between every pair, 125 MB/s nodes. Run by hand:
/// `cargo test --release -p windrose-sim --test integration -- bittorrent:: --ignored --nocapture`.
#[test]
#[ignore]
fn fig4_point() {
    let size = 600_000_000usize;
    let data = Bytes::from(vec![7u8; size]);
    // The third run sends every have, as the original client: same protocol decisions, more
    // tiny messages (compare the wall time).
    for (piece, redundant_haves) in [(1u32 << 20, false), (256 << 10, false), (1 << 20, true)] {
        let config = BitTorrentConfig {
            redundant_haves,
            ..BitTorrentConfig::default()
        };
        let p = four_clusters(16);
        let bound = windrose_trees::multicast::bound::multicast_bound(&p, NodeId(0))
            .unwrap()
            .bytes_s;
        let wall = std::time::Instant::now();
        let (mut sim, _) = simulation(
            p.clone(),
            &data,
            piece,
            NodeId(0),
            &config,
            1,
            RunLimits {
                max_time_s: Some(1e5),
                max_events: Some(2_000_000_000),
            },
        );
        let m = sim.run().unwrap();
        let wall = wall.elapsed().as_secs_f64();
        assert!(m.all_finished());
        let done = m
            .nodes
            .iter()
            .filter_map(|n| n.progress.map(|p| p.at_s))
            .fold(0.0f64, f64::max);
        let mut times: Vec<f64> = m
            .nodes
            .iter()
            .filter(|n| n.node != NodeId(0))
            .filter_map(|n| n.progress.map(|p| p.at_s))
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "piece {piece} B, redundant haves {redundant_haves}: receivers complete at min {:.1} s, median {:.1} s, 90 % {:.1} s, \
             max {:.1} s",
            times[0],
            times[times.len() / 2],
            times[times.len() * 9 / 10],
            times[times.len() - 1]
        );
        let mut wan = 0.0;
        for from in 0..4 {
            for to in 0..4 {
                if from != to {
                    wan += m.link_bytes(LinkId::Wan {
                        from: ClusterId(from),
                        to: ClusterId(to),
                    });
                }
            }
        }
        println!(
            "piece {piece} B, redundant haves {redundant_haves}: last node complete at {done:.2} s (finished {:.2} s), \
             throughput {:.3} MB/s = {:.1} % of the bound {:.3} MB/s; WAN bytes {:.3e} = {:.2} x \
             (clusters-1) x size; events {}; wall {wall:.2} s",
            m.makespan_s.unwrap(),
            size as f64 / done / 1e6,
            100.0 * size as f64 / done / bound,
            bound / 1e6,
            wan,
            wan / (3.0 * size as f64),
            m.events,
        );
    }
}
