//! The network's two kinds of solve (region solves, and whole components up to a limit; see
//! `Network::set_component_limit`) against max-min filling from scratch, on random small
//! platforms with ties, churn, capacity and latency changes, and the switch between them.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_sim::network::{Delivered, Network, SharingPolicy};

use crate::support::max_min;

const BW: [f64; 4] = [10.0, 20.0, 30.0, 60.0];

/// Whether the network's rates are the from-scratch allocation to 1e-9.
fn check(net: &Network, seed: u64) {
    let max_min::Snapshot {
        active,
        capacity,
        routes,
        weights,
    } = max_min::snapshot(net);
    let expected = max_min::brute_force(&capacity, &routes, &weights);
    for (&(s, d, rate), &want) in active.iter().zip(&expected) {
        assert!(
            (rate - want).abs() <= 1e-9 * want.abs().max(1e-12),
            "seed {seed}, {s} -> {d} at {} s: rate {rate}, from scratch {want}",
            net.now()
        );
    }
}

/// A random run checked after every instant; `limit` as in [`Network::set_component_limit`]
/// (`None`: the default). Returns the deliveries and whether it ended on region solves.
fn run(seed: u64, limit: Option<usize>) -> (Vec<Delivered>, bool) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let bw = |rng: &mut ChaCha8Rng| BW[rng.gen_range(0..BW.len())];
    let (node_bw, access_bw, wan_bw) = (bw(&mut rng), bw(&mut rng), bw(&mut rng));
    let clusters = rng.gen_range(1..4);
    let mut b = Platform::builder();
    for _ in 0..clusters {
        b = b.cluster(ClusterSpec {
            nodes: rng.gen_range(2..7),
            node_uplink_bytes_s: node_bw,
            node_downlink_bytes_s: node_bw,
            access_up_bytes_s: access_bw,
            access_down_bytes_s: access_bw,
            intra_latency_s: 0.01,
        });
    }
    let p = b.wan_all(wan_bw, 0.02).build().unwrap();
    let policy = if rng.gen_bool(0.5) {
        SharingPolicy::RttWeighted
    } else {
        SharingPolicy::MaxMin
    };
    let (nodes, links) = (p.node_count() as u32, p.link_count());
    let mut net = Network::new(p, policy);
    if let Some(limit) = limit {
        net.set_component_limit(limit);
    }
    for _ in 0..rng.gen_range(0..6) {
        let link = net.platform().link_at(rng.gen_range(0..links));
        let (at, bytes_s) = (rng.gen_range(0.0..6.0), bw(&mut rng));
        net.set_capacity(link, at, bytes_s).unwrap();
    }
    for _ in 0..rng.gen_range(0..4) {
        let (a, z) = (rng.gen_range(0..clusters), rng.gen_range(0..clusters));
        let (at, latency) = (rng.gen_range(0.0..6.0), rng.gen_range(0.0..0.05));
        if a == z {
            net.set_intra_latency(ClusterId::from(a), at, latency)
                .unwrap();
        } else {
            (net.set_wan_latency(ClusterId::from(a), ClusterId::from(z), at, latency)).unwrap();
        }
    }
    let mut sends: Vec<(u32, u32, u64, f64)> = (0..rng.gen_range(10..120))
        .map(|_| {
            let bytes = [0u64, 5, 10, 20, 40, 100][rng.gen_range(0..6)];
            let at = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0][rng.gen_range(0..6)];
            (rng.gen_range(0..nodes), rng.gen_range(0..nodes), bytes, at)
        })
        .collect();
    sends.sort_by(|a, b| a.3.total_cmp(&b.3));
    let mut out = Vec::new();
    for (s, d, bytes, at) in sends {
        if s == d {
            continue;
        }
        while let Some(t) = net.next_event_time().filter(|&t| t <= at) {
            out.extend(net.advance_to(t));
            check(&net, seed);
        }
        net.advance_to(at);
        net.send(at, NodeId(s), NodeId(d), bytes, 0).unwrap();
    }
    while let Some(t) = net.next_event_time() {
        out.extend(net.advance_to(t));
        check(&net, seed);
    }
    (out, net.solves_regions())
}

#[test]
fn both_kinds_of_solve_equal_filling_from_scratch_under_churn() {
    let (mut switched, mut stayed) = (0, 0);
    for seed in 0..300 {
        let (regions, on_regions) = run(seed, Some(0));
        assert!(on_regions);
        let (components, _) = run(seed, None);
        let limit = ChaCha8Rng::seed_from_u64(seed).gen_range(1..12);
        let (mixed, moved) = run(seed, Some(limit));
        if moved {
            switched += 1;
        } else {
            stayed += 1;
        }
        // Same messages at the same times to rounding, whichever solve ran.
        for other in [&components, &mixed] {
            assert_eq!(regions.len(), other.len(), "seed {seed}");
            let mut a: Vec<_> = regions.iter().map(|d| (d.id, d.at)).collect();
            let mut b: Vec<_> = other.iter().map(|d| (d.id, d.at)).collect();
            a.sort_by_key(|x| x.0);
            b.sort_by_key(|x| x.0);
            for ((ia, ta), (ib, tb)) in a.into_iter().zip(b) {
                assert_eq!(ia, ib, "seed {seed}");
                assert!(
                    (ta - tb).abs() <= 1e-9 * ta.max(1.0),
                    "seed {seed}: {ta} vs {tb}"
                );
            }
        }
    }
    // The random limits moved some runs mid-way and left others on components.
    assert!(
        switched > 20 && stayed > 20,
        "{switched} moved, {stayed} stayed"
    );
}

/// The move to region solves happens at the first solve whose component exceeds the limit.
#[test]
fn a_component_above_the_limit_moves_to_region_solves() {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(4, 100.0, 1000.0, 0.001))
        .build()
        .unwrap();
    for (limit, moves) in [(2, false), (1, true)] {
        let mut net = Network::new(p.clone(), SharingPolicy::MaxMin);
        net.set_component_limit(limit);
        net.send(0.0, NodeId(0), NodeId(3), 100, 0).unwrap();
        net.send(0.0, NodeId(1), NodeId(3), 100, 0).unwrap();
        net.advance_to(0.5);
        assert_eq!(net.solves_regions(), moves, "limit {limit}");
        assert_eq!(net.rate_bytes_s(NodeId(0), NodeId(3)), 50.0);
        // A third connection on the same downlink: re-shared either way.
        net.send(0.5, NodeId(2), NodeId(3), 100, 0).unwrap();
        net.advance_to(1.0);
        let third = 100.0 / 3.0;
        assert!((net.rate_bytes_s(NodeId(2), NodeId(3)) - third).abs() < 1e-9);
        assert!((net.rate_bytes_s(NodeId(0), NodeId(3)) - third).abs() < 1e-9);
    }
}
