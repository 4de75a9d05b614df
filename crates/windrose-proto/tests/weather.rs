//! The weather service's pieces by hand and against independent computations: the sender's
//! bandwidth meter, the group's view from shared rows, tree policies and the planner.

use proptest::prelude::*;
use std::time::Duration;
use windrose_model::{ClusterId, CostUnit, DenseCostMatrix, LinkCosts, LinkCostsMut, NodeId};
use windrose_proto::planner::{most_shared, site_ordered, Bound, PlanRequest, Planner, TreePolicy};
use windrose_proto::weather::{Guesses, LinkEntry, LinkTable, SendMeter, Weather, WeatherConfig};
use windrose_proto::Time;
use windrose_trees::adaptive::AdaptiveTree;
use windrose_trees::adaptive::Strategy;
use windrose_trees::TreeAlgorithm;

fn ms(x: u64) -> Time {
    Time::from_millis(x)
}

#[test]
fn a_busy_link_is_measured_at_its_drain_rate_and_its_latency_is_not_counted() {
    // 10 sends of 100 kB queued at once on a 1 MB/s link with 50 ms latency: they complete at
    // 150, 250, ..., 1050 ms. The first completion starts the clock.
    let mut m = SendMeter::default();
    for _ in 0..10 {
        m.sent(100_000);
    }
    let mut samples = vec![];
    for k in 0..10u64 {
        if let Some(r) = m.completed(ms(150 + 100 * k), 100_000, 300_000) {
            samples.push(r);
        }
    }
    // Samples after 300 kB past the first completion: at 450 ms and at 750 ms, and 1050 ms.
    assert_eq!(samples.len(), 3, "{samples:?}");
    for r in samples {
        assert!((r - 1e6).abs() < 1e-6 * 1e6, "{r} B/s");
    }
}

#[test]
fn an_idle_gap_starts_a_new_busy_period_and_a_starved_sender_takes_no_sample() {
    let mut m = SendMeter::default();
    // One send at a time, each completing before the next is handed over (a sender starved by
    // a slow link upstream): never two completions in one busy period.
    for k in 0..20u64 {
        m.sent(1_000_000);
        assert_eq!(m.completed(ms(1000 * k + 10), 1_000_000, 1), None);
    }
}

#[test]
fn the_views_links_join_both_ends_and_drop_poisoned_entries() {
    let members = [
        (NodeId(0), ClusterId(0)),
        (NodeId(1), ClusterId(0)),
        (NodeId(2), ClusterId(1)),
    ];
    let mut w = Weather::new(NodeId(0), WeatherConfig::default()).unwrap();
    for _ in 0..5 {
        w.observe_rtt(ms(1), NodeId(2), Duration::from_millis(20));
    }
    w.take_row(
        ms(2),
        NodeId(2),
        vec![
            LinkEntry {
                peer: NodeId(0),
                rtt_ms: Some((30.0, 1.0)),
                mb_s: Some((4.0, 0.5)),
                mb_s_age_ms: None,
            },
            LinkEntry {
                peer: NodeId(1),
                rtt_ms: Some((f64::NAN, 0.0)),
                mb_s: None,
                mb_s_age_ms: None,
            },
        ],
    );
    w.take_row(
        ms(2),
        NodeId(1),
        vec![LinkEntry {
            peer: NodeId(2),
            rtt_ms: None,
            mb_s: Some((-1.0, 0.0)),
            mb_s_age_ms: None,
        }],
    );
    let v = w.view(ms(3), &members);
    assert_eq!(v.rtt_ms(NodeId(0), NodeId(2)), Some(25.0)); // mean of 20 and 30
    assert_eq!(v.rtt_ms(NodeId(2), NodeId(0)), Some(25.0));
    assert_eq!(v.mb_s(NodeId(2), NodeId(0)), Some(4.0));
    assert_eq!(v.rtt_ms(NodeId(1), NodeId(2)), None, "NaN dropped");
    assert_eq!(v.mb_s(NodeId(1), NodeId(2)), None, "negative dropped");
    // Unmeasured links: the class's median (inter: 25 ms, 4 MB/s), else the defaults.
    let g = v.guesses(Guesses::default());
    assert_eq!((g.inter_rtt_ms, g.inter_mb_s), (25.0, 4.0));
    assert_eq!(g.intra_rtt_ms, Guesses::default().intra_rtt_ms);
    // Store and forward (one segment): latency plus the bytes at the bandwidth.
    let c = v.transfer_costs(4_000_000, 4_000_000, Guesses::default());
    // 0 - 2: 12.5 ms one way + 4 MB at 4 MB/s.
    assert!((c.cost(NodeId(0), NodeId(2)) - 1012.5).abs() < 1e-9);
    // 1 - 2 is unmeasured: the inter-cluster guesses.
    assert!((c.cost(NodeId(1), NodeId(2)) - 1012.5).abs() < 1e-9);
    let intra = Guesses::default();
    let want = intra.intra_rtt_ms / 2.0 + 4_000_000.0 / (intra.intra_mb_s * 1e3);
    assert!((c.cost(NodeId(0), NodeId(1)) - want).abs() < 1e-9);
    // Pipelined in 1 MB segments: one segment at the link's bandwidth, the rest at what it
    // takes beyond the fastest link (the default 117 MB/s inside cluster 0).
    let p = v.transfer_costs(4_000_000, 1_000_000, Guesses::default());
    let want = 12.5 + (1e6 / 4.0 + 3e6 * (1.0 / 4.0 - 1.0 / 117.0)) / 1e3;
    assert!(
        (p.cost(NodeId(0), NodeId(2)) - want).abs() < 1e-9,
        "{}",
        p.cost(NodeId(0), NodeId(2))
    );
    let fast = 0.1 + 1e6 / 117.0 / 1e3;
    assert!((p.cost(NodeId(0), NodeId(1)) - fast).abs() < 1e-9);
}

#[test]
fn a_bandwidth_forecast_is_forgotten_after_its_ttl() {
    let config = WeatherConfig {
        sample_bytes: 1,
        bandwidth_ttl: Duration::from_secs(5),
        ..WeatherConfig::default()
    };
    let mut w = Weather::new(NodeId(0), config).unwrap();
    w.sent(NodeId(1), 300);
    assert!(w.completed(ms(100), NodeId(1), 100).is_none()); // starts the clock
    assert!(w.completed(ms(200), NodeId(1), 100).is_some());
    assert!(w.links(ms(1000))[0].bandwidth.is_some());
    assert!(w.links(ms(5300))[0].bandwidth.is_none());
    assert!(w.row(ms(5300)).is_empty());
}

#[test]
fn tree_policies_parse_and_print_and_bad_ones_are_named() {
    for s in [
        "static:magpie",
        "rebuild:balanced-path",
        "adapt:family:0.5",
        "mst-live",
    ] {
        let p: TreePolicy = s.parse().unwrap();
        assert_eq!(p.to_string(), s);
    }
    assert_eq!(
        "adapt".parse::<TreePolicy>().unwrap(),
        TreePolicy::default()
    );
    for (bad, says) in [
        ("static", "name the algorithm"),
        ("rebuild:kruskal", "balanced-path"),
        ("adapt:sideways", "unknown strategy"),
        ("adapt:path:-1", "threshold"),
        ("adapt:path:0.2:9", "expected"),
        ("grow", "expected"),
        ("mst-live:0.1", "mst-live"),
    ] {
        let e = bad.parse::<TreePolicy>().unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// Two sites of three nodes, 1 ms inside, 10 ms between (node 0 is the root).
fn two_sites() -> (DenseCostMatrix, Vec<ClusterId>) {
    let clusters: Vec<ClusterId> = (0..6).map(|i| ClusterId(i / 3)).collect();
    let c = DenseCostMatrix::from_fn(CostUnit::LatencyMs, 6, |a, b| {
        if clusters[a] == clusters[b] {
            1.0
        } else {
            10.0
        }
    });
    (c, clusters)
}

#[test]
fn static_keeps_its_tree_and_rebuild_follows_the_costs() {
    let (mut costs, clusters) = two_sites();
    let mut p = Planner::new();
    let st = TreePolicy::Static {
        algorithm: TreeAlgorithm::BalancedPath,
    };
    let first = p
        .plan(NodeId(0), st, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    assert!(first.built);
    // Every link of the tree's first site-crossing edge becomes very slow.
    let (a, b) = first
        .tree
        .edges()
        .into_iter()
        .find(|(c, par)| clusters[c.index()] != clusters[par.index()])
        .unwrap();
    costs.set_cost(a, b, 1000.0).unwrap();
    let again = p
        .plan(NodeId(0), st, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    assert!(!again.built);
    assert_eq!(again.tree.edges(), first.tree.edges());
    assert!((again.cost - again.tree.cost(&costs)).abs() < 1e-9);
    let rb = TreePolicy::Rebuild {
        algorithm: TreeAlgorithm::BalancedPath,
    };
    let rebuilt = p
        .plan(NodeId(0), rb, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    let direct = TreeAlgorithm::BalancedPath
        .build(&costs, Some(&clusters), NodeId(0))
        .unwrap();
    assert_eq!(rebuilt.tree.edges(), direct.edges());
    assert!(
        rebuilt.cost <= again.cost,
        "{} vs {}",
        rebuilt.cost,
        again.cost
    );
}

#[test]
fn adapt_ignores_small_moves_and_takes_in_large_ones() {
    let (mut costs, clusters) = two_sites();
    let mut p = Planner::new();
    let pol = TreePolicy::Adapt {
        strategy: Strategy::Position,
        threshold: 0.2,
    };
    let first = p
        .plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    // +10 % everywhere: below the threshold, nothing taken in.
    let noisy = DenseCostMatrix::from_fn(CostUnit::LatencyMs, 6, |a, b| {
        costs.cost(NodeId(a as u32), NodeId(b as u32)) * 1.1
    });
    let same = p
        .plan(NodeId(0), pol, &noisy, &clusters, &[], Bound::Latency)
        .unwrap();
    assert_eq!((same.changed_links, same.swaps), (0, 0));
    assert_eq!(same.tree.edges(), first.tree.edges());
    // A tree link 30x dearer: taken in, and the tree's cost is what the costs give it.
    let (a, b) = first.tree.edges()[0];
    costs.set_cost(a, b, costs.cost(a, b) * 30.0).unwrap();
    let moved = p
        .plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    assert_eq!(moved.changed_links, 1);
    let taken = p.taken_costs(NodeId(0)).unwrap();
    assert!((moved.cost - moved.tree.cost(taken)).abs() < 1e-9);
}

#[test]
fn adapt_parks_a_failed_member_at_a_leaf() {
    let (costs, clusters) = two_sites();
    let mut p = Planner::new();
    let pol = TreePolicy::default();
    let first = p
        .plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    // The root's first child has children of its own (6 nodes, binomial shape).
    let inner = *first
        .tree
        .children(NodeId(0))
        .iter()
        .find(|c| !first.tree.children(**c).is_empty())
        .unwrap();
    let plan = p
        .plan(NodeId(0), pol, &costs, &clusters, &[inner], Bound::Latency)
        .unwrap();
    assert!(plan.tree.children(inner).is_empty(), "{:?}", plan.tree);
    assert_eq!(plan.tree.len(), 6);
}

/// `sites` sites of `size` nodes (site of node i: i / size), 1 inside a site, `wan[x][y]`
/// between sites x and y.
fn sites_of(size: usize, wan: &[Vec<f64>]) -> (DenseCostMatrix, Vec<ClusterId>) {
    let n = size * wan.len();
    let clusters: Vec<ClusterId> = (0..n).map(|i| ClusterId((i / size) as u32)).collect();
    let c = DenseCostMatrix::from_fn(CostUnit::LatencyMs, n, |a, b| {
        let (x, y) = (a / size, b / size);
        if x == y {
            1.0
        } else {
            wan[x][y]
        }
    });
    (c, clusters)
}

/// How many of `tree`'s edges join two distinct sites.
fn site_crossings(tree: &windrose_trees::Tree, clusters: &[ClusterId]) -> usize {
    tree.edges()
        .into_iter()
        .filter(|(a, b)| clusters[a.index()] != clusters[b.index()])
        .count()
}

#[test]
fn adapt_starts_from_balanced_path_when_latency_bound_and_site_ordered_when_bandwidth_bound() {
    let wan = vec![
        vec![0.0, 40.0, 30.0, 30.0],
        vec![40.0, 0.0, 45.0, 50.0],
        vec![30.0, 45.0, 0.0, 40.0],
        vec![30.0, 50.0, 40.0, 0.0],
    ];
    let (costs, clusters) = sites_of(4, &wan);
    let pol = TreePolicy::default();
    let mut p = Planner::new();
    let small = p
        .plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Latency)
        .unwrap();
    let bp = AdaptiveTree::balanced_path(&costs, NodeId(0)).unwrap();
    assert_eq!(small.tree.edges(), bp.to_tree().edges());
    // Balanced-Path fills the root's slots with the cheapest nodes left: it crosses one WAN
    // path more than once (what a bandwidth-bound broadcast cannot afford).
    assert!(most_shared(&small.tree, &clusters) > 1, "{:?}", small.tree);
    // The bound changed: a new first tree, site-ordered.
    let large = p
        .plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Bandwidth)
        .unwrap();
    assert!(large.built);
    let so = site_ordered(&costs, &clusters, NodeId(0)).unwrap();
    assert_eq!(large.tree.edges(), so.to_tree().edges());
    let again = p
        .plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Bandwidth)
        .unwrap();
    assert!(!again.built);
}

#[test]
fn a_broadcast_is_bandwidth_bound_past_the_alpha_beta_crossover() {
    // Two sites, 20 ms round trips and 5 MB/s between them: the bytes take longer than the
    // 10 ms one way from 50 kB on.
    let links = LinkTable::from_fn((0..4).map(|i| Some(ClusterId(i / 2))).collect(), |a, b| {
        if a / 2 == b / 2 {
            (0.2, 117.0)
        } else {
            (20.0, 5.0)
        }
    });
    assert_eq!(links.bound(1 << 10), Bound::Latency);
    assert_eq!(links.bound(40_000), Bound::Latency);
    assert_eq!(links.bound(60_000), Bound::Bandwidth);
    assert_eq!(links.bound(16 << 20), Bound::Bandwidth);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Over any storm of cost changes, the adapted tree's reported cost is its cost computed
    /// from scratch on the costs it has taken in, it spans every member, and every taken-in
    /// cost is within the threshold of the latest costs.
    #[test]
    fn adapts_cost_is_its_from_scratch_cost(
        n in 2usize..12,
        seed_costs in proptest::collection::vec(1.0f64..100.0, 66),
        storm in proptest::collection::vec((0usize..12, 0usize..12, 0.1f64..10.0), 1..30),
        strategy in 0usize..4,
    ) {
        let clusters = vec![ClusterId(0); n];
        let idx = |a: usize, b: usize| { let (l, h) = (a.min(b), a.max(b)); h * (h - 1) / 2 + l };
        let mut costs = DenseCostMatrix::from_fn(CostUnit::LatencyMs, n, |a, b| seed_costs[idx(a, b)]);
        let pol = TreePolicy::Adapt { strategy: Strategy::ALL[strategy], threshold: 0.2 };
        let mut p = Planner::new();
        p.plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Latency).unwrap();
        for (a, b, f) in storm {
            let (a, b) = (a % n, b % n);
            if a == b { continue; }
            let (na, nb) = (NodeId(a as u32), NodeId(b as u32));
            let c = costs.cost(na, nb) * f;
            costs.set_cost(na, nb, c).unwrap();
            let plan = p.plan(NodeId(0), pol, &costs, &clusters, &[], Bound::Latency).unwrap();
            let taken = p.taken_costs(NodeId(0)).unwrap();
            prop_assert_eq!(plan.tree.len(), n);
            let scratch = plan.tree.cost(taken);
            prop_assert!((plan.cost - scratch).abs() <= 1e-9 * scratch.max(1.0), "{} vs {}", plan.cost, scratch);
            for x in 0..n {
                for y in x + 1..n {
                    let (nx, ny) = (NodeId(x as u32), NodeId(y as u32));
                    let (t, c) = (taken.cost(nx, ny), costs.cost(nx, ny));
                    prop_assert!((t - c).abs() <= 0.2 * t + 1e-9, "{x}-{y}: taken {t}, now {c}");
                }
            }
        }
    }
}

/// A sender behind a transport buffer of `buffer` bytes that drains into a link of `rate`
/// bytes per second (the kernel's socket buffers over TCP): `frames` frames of `frame` bytes
/// handed over at once, each completing when its last byte fits in the buffer, i.e. when the
/// bytes written so far are at most `buffer + rate * t`. Returns the meter's samples.
fn buffered_sender(
    meter: &mut SendMeter,
    buffer: u64,
    rate: f64,
    frame: u64,
    frames: u64,
    sample: u64,
) -> Vec<f64> {
    for _ in 0..frames {
        meter.sent(frame);
    }
    (1..=frames)
        .filter_map(|k| {
            let at_s = ((k * frame) as f64 - buffer as f64).max(0.0) / rate;
            meter.completed(Time::from_nanos((at_s * 1e9).round() as u64), frame, sample)
        })
        .collect()
}

#[test]
fn a_meter_told_of_the_buffer_reads_the_link_and_one_that_is_not_reads_memory_speed() {
    // 8 MiB of socket buffers in front of a 10 MB/s link, 40 frames of 1 MiB.
    let (buffer, rate, frame) = (8u64 << 20, 10e6, 1u64 << 20);
    let blind = buffered_sender(&mut SendMeter::default(), buffer, rate, frame, 40, frame);
    // The first eight frames complete at once; the first sample counts them all over the
    // time the ninth took: 8x the link.
    assert!(blind[0] > 7.0 * rate, "{blind:?}");
    let told = buffered_sender(
        &mut SendMeter::with_buffer(buffer),
        buffer,
        rate,
        frame,
        40,
        frame,
    );
    // The ninth frame's completion fills the buffers and starts the clock; each later one is
    // a sample.
    assert_eq!(told.len(), 31, "{told:?}");
    for r in &told {
        assert!((r / rate - 1.0).abs() < 1e-6, "{r} B/s vs {rate}");
    }
    // Through the weather service: the driver's figure per link.
    let config = WeatherConfig {
        sample_bytes: frame,
        ..WeatherConfig::default()
    };
    let mut w = Weather::new(NodeId(0), config).unwrap();
    w.set_buffered(NodeId(1), buffer);
    let mut last = None;
    for _ in 0..40 {
        w.sent(NodeId(1), frame);
    }
    for k in 1..=40u64 {
        let at_s = ((k * frame) as f64 - buffer as f64).max(0.0) / rate;
        if let Some(f) = w.completed(Time::from_nanos((at_s * 1e9) as u64), NodeId(1), frame) {
            last = Some(f.value);
        }
    }
    let mb_s = last.expect("a sample");
    assert!((mb_s - 10.0).abs() < 0.01, "{mb_s} MB/s");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the buffer, the link and the frames: a meter told a bound at least the real
    /// buffer only samples the link's rate; a busy period no longer than the buffer gives
    /// no sample at all.
    #[test]
    fn a_buffer_bound_keeps_memory_speed_out_of_every_sample(
        buffer_kib in 0u64..16_384,
        slack_kib in 0u64..4096,
        rate in 1e5f64..1e9,
        frame_kib in 8u64..2048,
        frames in 1u64..200,
        sample_kib in 1u64..4096,
    ) {
        let (buffer, frame) = (buffer_kib << 10, frame_kib << 10);
        let mut m = SendMeter::with_buffer(buffer + (slack_kib << 10));
        let samples = buffered_sender(&mut m, buffer, rate, frame, frames, sample_kib << 10);
        for r in &samples {
            // Completions are rounded to whole nanoseconds.
            prop_assert!((r / rate - 1.0).abs() < 1e-3, "{} vs {}", r, rate);
        }
        if frames * frame <= buffer {
            prop_assert!(samples.is_empty());
        }
    }
}

#[test]
fn compute_speeds_are_timed_shared_and_guessed_for_members_nobody_measured() {
    let members = [
        (NodeId(0), ClusterId(0)),
        (NodeId(1), ClusterId(0)),
        (NodeId(2), ClusterId(1)),
        (NodeId(3), ClusterId(1)),
    ];
    let config = WeatherConfig {
        gossip: Some(Duration::from_secs(1)),
        ..WeatherConfig::default()
    };
    let mut w = Weather::new(NodeId(0), config).unwrap();
    // Smaller than a bandwidth sample, or instant: no sample.
    assert!(w
        .observe_compute(ms(1), (1 << 20) - 1, Duration::from_millis(1))
        .is_none());
    assert!(w.observe_compute(ms(1), 1 << 20, Duration::ZERO).is_none());
    // 50 MB in 1 s.
    let f = w
        .observe_compute(ms(2), 50_000_000, Duration::from_secs(1))
        .unwrap();
    assert_eq!(f.value, 50.0);
    // Shared with the row, even with no link measured yet.
    let row = w.gossip_due(ms(3)).expect("a row with the compute speed");
    assert!(row.links.is_empty());
    assert_eq!(row.compute_mb_s, Some((50.0, f.error)));
    assert_eq!(
        w.take_compute(NodeId(2), Some((200.0, 1.0))),
        Some((200.0, 1.0))
    );
    assert_eq!(w.take_compute(NodeId(1), Some((f64::NAN, 0.0))), None);
    assert_eq!(w.take_compute(NodeId(3), Some((0.0, 0.0))), None);
    let v = w.view(ms(4), &members);
    assert_eq!(v.compute_mb_s(NodeId(0)), Some(50.0));
    assert_eq!(v.compute_mb_s(NodeId(2)), Some(200.0));
    assert_eq!(v.compute_mb_s(NodeId(1)), None, "NaN dropped");
    assert_eq!(v.compute_mb_s(NodeId(3)), None, "zero dropped");
    // Nobody measured 1 and 3: the median of the measured (50 and 200).
    assert_eq!(v.guesses(Guesses::default()).compute_mb_s, 125.0);
    use windrose_proto::weather::Basis;
    let est = v.estimator(Guesses::default());
    assert_eq!(est.compute_mb_s(NodeId(2)), (200.0, Basis::Measured));
    assert_eq!(est.compute_mb_s(NodeId(3)), (125.0, Basis::Guessed));
    // A row of an older member without the field still parses.
    let old = r#"{"t":"weather","links":[]}"#;
    let msg: windrose_proto::host::SessionMsg = serde_json::from_str(old).unwrap();
    assert!(matches!(
        msg,
        windrose_proto::host::SessionMsg::Weather {
            compute_mb_s: None,
            ..
        }
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With sites of one power-of-two size, the site-ordered tree keeps every site one
    /// subtree and crosses each WAN path at most once (sites - 1 crossings), and its cost is
    /// the least over every order of the other sites, each computed from scratch on the
    /// plain tree (not the adaptive tree's incremental costs).
    #[test]
    fn site_ordered_crosses_each_wan_path_once_at_the_least_cost_order(
        log_size in 0u32..3,
        sites in 2usize..6,
        root in 0usize..64,
        wan_costs in proptest::collection::vec(2.0f64..100.0, 15),
    ) {
        let size = 1usize << log_size;
        // Site pair (x, y), x < y, is the k-th in row-major order of the upper triangle.
        let pair = |x: usize, y: usize| {
            let (x, y) = (x.min(y), x.max(y));
            x * (2 * sites - x - 1) / 2 + (y - x - 1)
        };
        let wan: Vec<Vec<f64>> = (0..sites)
            .map(|x| (0..sites).map(|y| if x == y { 0.0 } else { wan_costs[pair(x, y)] }).collect())
            .collect();
        let (costs, clusters) = sites_of(size, &wan);
        let root = NodeId((root % (size * sites)) as u32);
        let tree = site_ordered(&costs, &clusters, root).unwrap().to_tree();
        prop_assert_eq!(tree.len(), size * sites);
        prop_assert_eq!(site_crossings(&tree, &clusters), sites - 1, "{:?}", tree);
        prop_assert_eq!(most_shared(&tree, &clusters), 1);
        // Brute force over the other sites' orders.
        let rs = clusters[root.index()].0 as usize;
        let others: Vec<usize> = (0..sites).filter(|&x| x != rs).collect();
        let mut best = f64::INFINITY;
        let mut perm = others.clone();
        permutations(&mut perm, 0, &mut |order| {
            let mut nodes = vec![root];
            nodes.extend((0..size).map(|i| NodeId((rs * size + i) as u32)).filter(|&v| v != root));
            for &x in order {
                nodes.extend((0..size).map(|i| NodeId((x * size + i) as u32)));
            }
            let t = AdaptiveTree::from_positions(&costs, nodes).unwrap().to_tree();
            best = best.min(t.cost(&costs));
        });
        let got = tree.cost(&costs);
        prop_assert!((got - best).abs() <= 1e-9 * best, "{} vs {}", got, best);
    }
}

/// Calls `f` with every permutation of `v[k..]` (after `v[..k]`).
fn permutations(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
    if k == v.len() {
        f(v);
        return;
    }
    for i in k..v.len() {
        v.swap(k, i);
        permutations(v, k + 1, f);
        v.swap(k, i);
    }
}

/// The four-clusters series' links (4 x 4, 20 ms round trips between sites at 3-5 MB/s,
/// 0.2 ms and 125 MB/s inside), the WAN 0<->1 at `wan01` MB/s.
fn four_clusters(wan01: f64) -> LinkTable {
    let wan = [
        [0.0, wan01, 3.0, 3.0],
        [wan01, 0.0, 4.5, 5.0],
        [3.0, 4.5, 0.0, 4.0],
        [3.0, 5.0, 4.0, 0.0],
    ];
    LinkTable::from_fn((0..16).map(|i| Some(ClusterId(i / 4))).collect(), |a, b| {
        let (x, y) = (a / 4, b / 4);
        if x == y {
            (0.2, 125.0)
        } else {
            (20.0, wan[x][y])
        }
    })
}

/// Where the swaps stall after a change, adapt's first tree on the taken-in view replaces
/// their tree: after the four-clusters slowdown both the plain and the sharing-aware plans
/// are the tree a fresh planner builds on the slowed view (the oracle's), reported as built,
/// and a plan without a change keeps its tree.
#[test]
fn stalled_swaps_give_way_to_the_first_tree_on_the_new_view() {
    let (bytes, segment) = (4u64 << 20, 256u64 << 10);
    let clusters: Vec<ClusterId> = (0..16).map(|i| ClusterId(i / 4)).collect();
    let plan = |p: &mut Planner, links: &LinkTable, sharing: bool| {
        let (costs, bytes_ms) = (links.transfer_costs(bytes, segment), links.bytes_ms(bytes));
        p.plan_request(&PlanRequest {
            root: NodeId(0),
            policy: TreePolicy::default(),
            costs: &costs,
            bytes_ms: sharing.then_some(&bytes_ms),
            clusters: &clusters,
            failed: &[],
            bound: links.bound(bytes),
        })
        .unwrap()
    };
    let (before, after) = (four_clusters(5.0), four_clusters(0.5));
    for sharing in [false, true] {
        let mut p = Planner::new();
        plan(&mut p, &before, sharing);
        let kept = plan(&mut p, &before, sharing);
        assert!(!kept.built && kept.changed_links == 0, "sharing {sharing}");
        let changed = plan(&mut p, &after, sharing);
        let oracle = plan(&mut Planner::new(), &after, sharing);
        assert!(
            changed.changed_links > 0 && changed.built,
            "sharing {sharing}"
        );
        assert_eq!(
            changed.tree.edges(),
            oracle.tree.edges(),
            "sharing {sharing}"
        );
        assert!((changed.cost - oracle.cost).abs() <= 1e-9 * oracle.cost);
        let again = plan(&mut p, &after, sharing);
        assert!(!again.built, "sharing {sharing}: no change, no rebuild");
    }
}

#[test]
fn sharing_aware_swaps_leave_the_slowed_path_and_plan_no_dearer_than_plain_swaps() {
    let (bytes, segment) = (4u64 << 20, 256u64 << 10);
    let clusters: Vec<ClusterId> = (0..16).map(|i| ClusterId(i / 4)).collect();
    let pol = TreePolicy::default();
    let before = four_clusters(5.0);
    let after = four_clusters(0.5);
    assert_eq!(before.bound(bytes), Bound::Bandwidth);
    let plan = |p: &mut Planner, links: &LinkTable, sharing: bool| {
        let (costs, bytes_ms) = (links.transfer_costs(bytes, segment), links.bytes_ms(bytes));
        p.plan_request(&PlanRequest {
            root: NodeId(0),
            policy: pol,
            costs: &costs,
            bytes_ms: sharing.then_some(&bytes_ms),
            clusters: &clusters,
            failed: &[],
            bound: links.bound(bytes),
        })
        .unwrap()
    };
    let (mut plain, mut aware) = (Planner::new(), Planner::new());
    let (p0, a0) = (
        plan(&mut plain, &before, false),
        plan(&mut aware, &before, true),
    );
    // The same site-ordered start, one copy per WAN path.
    assert_eq!(p0.tree.edges(), a0.tree.edges());
    assert_eq!(most_shared(&a0.tree, &clusters), 1);
    let (p1, a1) = (
        plan(&mut plain, &after, false),
        plan(&mut aware, &after, true),
    );
    assert!(p1.changed_links > 0 && a1.changed_links > 0);
    // Both left the slowed path 0 -> 1.
    let crosses_01 = |t: &windrose_trees::Tree| {
        t.edges().iter().any(|&(a, b)| {
            let (x, y) = (clusters[a.index()], clusters[b.index()]);
            (x.min(y), x.max(y)) == (ClusterId(0), ClusterId(1))
        })
    };
    assert!(!crosses_01(&a1.tree), "{:?}", a1.tree);
    // The sharing-aware plan's cost is the sharing-aware cost of its tree (computed here from
    // the tree's edges), and below that of the plain swaps' tree (which shares a path more).
    let (costs, bytes_ms) = (after.transfer_costs(bytes, segment), after.bytes_ms(bytes));
    let shared_cost = |t: &windrose_trees::Tree| {
        let edges: Vec<(NodeId, NodeId)> = (0..16u32)
            .map(NodeId)
            .filter_map(|v| t.parent(v).map(|p| (p, v)))
            .collect();
        let site = |v: NodeId| clusters[v.index()];
        let mut worst = 0.0f64;
        for &(_, leaf) in &edges {
            let (mut sum, mut at) = (0.0, leaf);
            while let Some(p) = t.parent(at) {
                let k = edges
                    .iter()
                    .filter(|&&(a, b)| site(a) == site(p) && site(b) == site(at))
                    .count();
                let extra = if site(p) != site(at) { k - 1 } else { 0 };
                sum += costs.cost(p, at) + extra as f64 * bytes_ms.cost(p, at);
                at = p;
            }
            worst = worst.max(sum);
        }
        worst
    };
    let (plain_cost, aware_cost) = (shared_cost(&p1.tree), shared_cost(&a1.tree));
    assert!(
        (a1.cost - aware_cost).abs() <= 1e-9 * aware_cost,
        "{} vs {aware_cost}",
        a1.cost
    );
    assert!(aware_cost <= plain_cost, "{aware_cost} vs {plain_cost}");
    eprintln!(
        "plain: most shared {} cost {:.1} ms; aware: most shared {} cost {:.1} ms",
        most_shared(&p1.tree, &clusters),
        plain_cost,
        most_shared(&a1.tree, &clusters),
        aware_cost
    );
}
