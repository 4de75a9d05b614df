//! The multicast bound: golden examples, Dinic against brute-force minimum cuts, and the
//! bound's obvious limits (root uplink, receivers' downlinks).

use proptest::prelude::*;
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_trees::multicast::bound::{
    completion_time_s, dynamic_completion_time_s, max_flow, multicast_bound, platform_network,
    BoundError, FlowNetwork,
};

/// The smallest cut separating `s` from `t`, by enumerating every vertex subset.
fn brute_force_min_cut(net: &FlowNetwork, s: usize, t: usize) -> f64 {
    let n = net.vertex_count();
    let others: Vec<usize> = (0..n).filter(|&v| v != s && v != t).collect();
    let mut best = f64::INFINITY;
    for mask in 0u64..(1u64 << others.len()) {
        let mut side = vec![false; n];
        side[s] = true;
        for (i, &v) in others.iter().enumerate() {
            side[v] = mask >> i & 1 == 1;
        }
        let cut: f64 = net
            .arcs()
            .filter(|a| side[a.from] && !side[a.to])
            .map(|a| a.capacity)
            .sum();
        best = best.min(cut);
    }
    best
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn two_clusters_behind_a_1_mb_s_wan() {
    let site = ClusterSpec::uniform(3, 1.25e8, 1.25e9, 1e-4);
    let p = Platform::builder()
        .cluster(site)
        .cluster(site)
        .wan_all(1e6, 0.01)
        .build()
        .unwrap();
    let b = multicast_bound(&p, NodeId(0)).unwrap();
    assert!(close(b.bytes_s, 1e6), "{}", b.bytes_s);
    assert_eq!(b.bottleneck_receiver, NodeId(3));
    // Inside the root's cluster the root's uplink (1.25e8) is the limit.
    assert!(close(b.per_receiver_bytes_s[1], 1.25e8));
    assert!(b.per_receiver_bytes_s[0].is_infinite());
}

#[test]
fn relays_through_a_third_cluster_add_up() {
    // Root cluster 0 reaches cluster 1 directly (1 MB/s) and relayed by cluster 2's node
    // (0.5 MB/s on 2->1): 1.5 MB/s; it reaches cluster 2 directly (2 MB/s) and relayed by
    // cluster 1 (1 MB/s): 3 MB/s. The bound is the smaller, 1.5 MB/s.
    let site = ClusterSpec::uniform(1, 1e8, 1e9, 1e-4);
    let wan = [[0.0, 1e6, 2e6], [1e6, 0.0, 1e6], [2e6, 0.5e6, 0.0]];
    let mut b = Platform::builder()
        .cluster(site)
        .cluster(site)
        .cluster(site);
    for (i, row) in wan.iter().enumerate() {
        for (j, &c) in row.iter().enumerate() {
            if i != j {
                b = b.wan(ClusterId(i as u32), ClusterId(j as u32), c, 0.01);
            }
        }
    }
    let p = b.build().unwrap();
    assert!(close(max_flow(&p, NodeId(0), NodeId(1)), 1.5e6));
    assert!(close(max_flow(&p, NodeId(0), NodeId(2)), 3e6));
    let bound = multicast_bound(&p, NodeId(0)).unwrap();
    assert!(close(bound.bytes_s, 1.5e6));
    assert_eq!(bound.bottleneck_receiver, NodeId(1));
}

#[test]
fn root_uplink_limits_a_flat_cluster() {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(4, 1e7, 1e9, 1e-4))
        .node_capacity(NodeId(0), 2e6, 1e7)
        .build()
        .unwrap();
    assert!(close(multicast_bound(&p, NodeId(0)).unwrap().bytes_s, 2e6));
}

#[test]
fn errors() {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(1, 1e7, 1e9, 1e-4))
        .build()
        .unwrap();
    assert_eq!(multicast_bound(&p, NodeId(0)), Err(BoundError::NoReceivers));
    assert!(matches!(
        multicast_bound(&p, NodeId(5)),
        Err(BoundError::UnknownRoot { .. })
    ));
}

#[test]
fn completion_time_integrates_the_rate() {
    // 10 B/s for 2 s, then 5 B/s: 30 bytes take 2 + 10/5 = 4 s.
    assert_eq!(
        completion_time_s(&[(0.0, 10.0), (2.0, 5.0)], 30.0),
        Some(4.0)
    );
    assert_eq!(
        completion_time_s(&[(0.0, 10.0), (2.0, 5.0)], 10.0),
        Some(1.0)
    );
    assert_eq!(completion_time_s(&[(0.0, 10.0), (2.0, 0.0)], 30.0), None);
    assert_eq!(completion_time_s(&[], 30.0), None);
}

fn capacity() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(1.0),
        Just(2.0),
        Just(3.0),
        Just(5.0),
        Just(8.0),
        0.5f64..10.0
    ]
}

/// Random platforms of 1-3 clusters with small node counts, every capacity drawn.
fn platform() -> impl Strategy<Value = Platform> {
    platform_of(1..=2, 1..=3)
}

/// Platforms of `clusters` clusters of `sizes` nodes each, every capacity (WAN and access links
/// included) drawn from [`capacity`].
fn platform_of(
    sizes: std::ops::RangeInclusive<usize>,
    clusters: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = Platform> {
    prop::collection::vec(sizes, clusters)
        .prop_flat_map(|sizes| {
            let c = sizes.len();
            let n: usize = sizes.iter().sum();
            (
                Just(sizes),
                prop::collection::vec(capacity(), 2 * n + 2 * c + c * c),
            )
        })
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
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn platform_max_flow_equals_brute_force_min_cut(p in platform(), r in 0u32..6, x in 0u32..6) {
        let n = p.node_count() as u32;
        let (root, to) = (NodeId(r % n), NodeId(x % n));
        prop_assume!(root != to);
        let g = platform_network(&p);
        let cut = brute_force_min_cut(&g.network, g.vertex(root), g.vertex(to));
        let flow = max_flow(&p, root, to);
        prop_assert!(close(flow, cut), "flow {flow} vs cut {cut}");
    }

    #[test]
    fn bound_is_below_root_uplink_and_every_downlink(p in platform(), r in 0u32..6) {
        let n = p.node_count() as u32;
        prop_assume!(n >= 2);
        let root = NodeId(r % n);
        let b = multicast_bound(&p, root).unwrap();
        prop_assert!(b.bytes_s <= p.capacity_bytes_s(LinkId::NodeUp(root)) * (1.0 + 1e-12));
        for v in (0..n).map(NodeId).filter(|&v| v != root) {
            prop_assert!(b.bytes_s <= p.capacity_bytes_s(LinkId::NodeDown(v)) * (1.0 + 1e-12));
            prop_assert!(b.bytes_s <= b.per_receiver_bytes_s[v.0 as usize] * (1.0 + 1e-12));
        }
    }

    #[test]
    fn dinic_equals_brute_force_on_random_graphs(
        n in 2usize..9,
        arcs in prop::collection::vec((0usize..9, 0usize..9, 0.0f64..10.0), 0..30),
    ) {
        let mut net = FlowNetwork::new(n);
        for (a, b, c) in arcs {
            if a % n != b % n {
                net.add_arc(a % n, b % n, c);
            }
        }
        let cut = brute_force_min_cut(&net, 0, n - 1);
        let flow = net.max_flow(0, n - 1);
        prop_assert!((flow - cut).abs() <= 1e-9 * cut.max(1.0), "flow {flow} vs cut {cut}");
        // The flow respects capacities and is conserved at inner vertices.
        let mut excess = vec![0.0; n];
        for a in net.arcs() {
            prop_assert!(a.flow >= -1e-9 && a.flow <= a.capacity + 1e-9);
            excess[a.from] -= a.flow;
            excess[a.to] += a.flow;
        }
        for (v, e) in excess.iter().enumerate().take(n - 1).skip(1) {
            prop_assert!(e.abs() < 1e-9, "vertex {v} excess {e}");
        }
    }
}

/// Root 0 and node 1 in cluster A, node 2 in cluster B. First the WAN is almost shut while the
/// root's uplink is fast; then the root's uplink is almost shut while the WAN is fast. Without
/// storage every interval's bound is tiny; with it node 1 takes everything early and relays it.
#[test]
fn dynamic_bound_lets_relays_store_and_forward() {
    let tiny = 1e3;
    let site_a = ClusterSpec::uniform(2, 1e7, 1e9, 1e-4);
    let site_b = ClusterSpec::uniform(1, 1e7, 1e9, 1e-4);
    let early = Platform::builder()
        .cluster(site_a)
        .cluster(site_b)
        .wan_all(tiny, 0.01)
        .build()
        .unwrap();
    let mut late = early.clone();
    late.set_capacity(LinkId::NodeUp(NodeId(0)), tiny).unwrap();
    for (a, b) in [(0, 1), (1, 0)] {
        let link = LinkId::Wan {
            from: ClusterId(a),
            to: ClusterId(b),
        };
        late.set_capacity(link, 1e7).unwrap();
    }
    let message = 1e8; // 10 s at 10 MB/s
    let phases = [(0.0, &early), (10.0, &late)];
    let steps: Vec<(f64, f64)> = phases
        .iter()
        .map(|&(t, p)| (t, multicast_bound(p, NodeId(0)).unwrap().bytes_s))
        .collect();
    let no_storage = completion_time_s(&steps, message).unwrap();
    assert!(no_storage > 1e4, "{no_storage}");
    let t = dynamic_completion_time_s(&phases, NodeId(0), message, no_storage)
        .unwrap()
        .unwrap();
    // Node 1 holds everything at 10 s and sends it to node 2 at 10 MB/s (the tiny links add
    // a few kilobytes per second).
    assert!((t - 20.0).abs() < 0.01, "{t}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// With one phase the dynamic bound is the static one; with several it is never later
    /// than the interval-by-interval integration, and never earlier than the root's uplink
    /// allows (every byte leaves the root at least once).
    #[test]
    fn dynamic_bound_brackets(
        sizes in prop::collection::vec(1usize..4, 1..4),
        caps in prop::collection::vec(1e5f64..1e7, 24),
        switch_s in 0.5f64..20.0,
        message in 1e5f64..1e8,
    ) {
        let mut b = Platform::builder();
        for (i, &k) in sizes.iter().enumerate() {
            b = b.cluster(ClusterSpec::uniform(k, caps[i], caps[4 + i] * 10.0, 1e-4));
        }
        let c = sizes.len();
        for x in 0..c {
            for y in 0..c {
                if x != y {
                    b = b.wan(ClusterId(x as u32), ClusterId(y as u32), caps[8 + x * 3 + y % 3], 0.01);
                }
            }
        }
        let Ok(p0) = b.build() else { return Ok(()) };
        if p0.node_count() < 2 {
            return Ok(());
        }
        let root = NodeId(0);
        let one = multicast_bound(&p0, root).unwrap().bytes_s;
        let t1 = dynamic_completion_time_s(&[(0.0, &p0)], root, message, 2.0 * message / one)
            .unwrap()
            .unwrap();
        prop_assert!((t1 - message / one).abs() <= 1e-6 * t1, "{} vs {}", t1, message / one);

        let mut p1 = p0.clone();
        for (i, l) in p0.links().collect::<Vec<_>>().into_iter().enumerate() {
            let f = 0.1 + (caps[(i * 7) % 24] / 1e7);
            p1.set_capacity(l, p0.capacity_bytes_s(l) * f).unwrap();
        }
        let phases = [(0.0, &p0), (switch_s, &p1)];
        let rates: Vec<f64> = phases.iter().map(|&(_, p)| multicast_bound(p, root).unwrap().bytes_s).collect();
        let steps = [(0.0, rates[0]), (switch_s, rates[1])];
        let no_storage = completion_time_s(&steps, message).unwrap();
        let t = dynamic_completion_time_s(&phases, root, message, no_storage).unwrap().unwrap();
        prop_assert!(t <= no_storage * (1.0 + 1e-6), "{} > {}", t, no_storage);
        let up = |p: &Platform| p.capacity_bytes_s(LinkId::NodeUp(root));
        let fastest = up(&p0).max(up(&p1));
        prop_assert!(t >= message / fastest * (1.0 - 1e-6), "{} < {}", t, message / fastest);
    }
}

/// The bound as it was computed before one max-flow per cluster: one max-flow from the root to
/// every receiver (the reference for `one_max_flow_per_cluster_equals_one_per_receiver`).
fn reference_bound(p: &Platform, root: NodeId) -> (f64, NodeId, Vec<f64>) {
    let mut g = platform_network(p);
    let s = g.vertex(root);
    let n = p.node_count();
    let mut per = vec![f64::INFINITY; n];
    let mut best: Option<(f64, NodeId)> = None;
    for v in (0..n as u32).map(NodeId).filter(|&v| v != root) {
        let f = g.network.max_flow(s, g.vertex(v));
        per[v.0 as usize] = f;
        match best {
            Some((b, _)) if f >= b => {}
            _ => best = Some((f, v)),
        }
    }
    let (b, at) = best.unwrap();
    (b, at, per)
}

/// Platforms of 1-4 clusters of 1-4 nodes; capacities drawn from a few values (so receivers
/// tie, within and across clusters) or from a range, WAN and access links included.
fn wider_platform() -> impl Strategy<Value = Platform> {
    platform_of(1..=4, 1..=4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `multicast_bound` (one max-flow per cluster, `min(downlink, flow into the cluster)` per
    /// receiver) gives every receiver the max-flow the per-receiver reference computes, and the
    /// same bound and bottleneck receiver.
    #[test]
    fn one_max_flow_per_cluster_equals_one_per_receiver(p in wider_platform(), r in 0u32..16) {
        let n = p.node_count() as u32;
        prop_assume!(n >= 2);
        let root = NodeId(r % n);
        let (bytes_s, at, per) = reference_bound(&p, root);
        let b = multicast_bound(&p, root).unwrap();
        prop_assert_eq!(b.per_receiver_bytes_s.len(), per.len());
        for (v, (&new, &old)) in b.per_receiver_bytes_s.iter().zip(&per).enumerate() {
            prop_assert!(new == old || close(new, old), "receiver {}: {} vs {}", v, new, old);
        }
        prop_assert!(close(b.bytes_s, bytes_s), "bound {} vs {}", b.bytes_s, bytes_s);
        // The same receiver unless two tie within rounding; then the lowest id at the bound.
        let at_new = b.bottleneck_receiver;
        prop_assert!(at_new == at || close(per[at_new.0 as usize], bytes_s), "{} vs {}", at_new, at);
        for v in (0..at_new.0).filter(|&v| v != root.0) {
            prop_assert!(b.per_receiver_bytes_s[v as usize] > b.bytes_s);
        }
    }
}

/// At 1,024 nodes in 4 clusters (three node speeds, so classes differ within a cluster) the
/// bound equals the per-receiver reference on every receiver.
#[test]
fn one_max_flow_per_cluster_at_a_thousand_nodes() {
    let mut b = Platform::builder();
    for k in 0..4 {
        b = b.cluster(ClusterSpec::uniform(
            256,
            1.25e9,
            1.25e9 * (k + 1) as f64,
            1e-4,
        ));
    }
    let wan = [
        [0.0, 3.5e6, 3.0e6, 3.0e6],
        [3.5e6, 0.0, 4.5e6, 5.0e6],
        [3.0e6, 4.5e6, 0.0, 4.0e6],
        [3.0e6, 5.0e6, 4.0e6, 0.0],
    ];
    for (i, row) in wan.iter().enumerate() {
        for (j, &w) in row.iter().enumerate() {
            if i != j {
                b = b.wan(ClusterId(i as u32), ClusterId(j as u32), w, 0.01);
            }
        }
    }
    let mut p = b.build().unwrap();
    for v in 0..1024u32 {
        let speed = [1.0, 0.5, 1e-3][v as usize % 3] * 1.25e9;
        p.set_capacity(LinkId::NodeDown(NodeId(v)), speed).unwrap();
        p.set_capacity(LinkId::NodeUp(NodeId(v)), speed).unwrap();
    }
    for root in [NodeId(0), NodeId(300), NodeId(1023)] {
        let (bytes_s, at, per) = reference_bound(&p, root);
        let b = multicast_bound(&p, root).unwrap();
        for (v, (&new, &old)) in b.per_receiver_bytes_s.iter().zip(&per).enumerate() {
            assert!(
                new == old || close(new, old),
                "root {root}, receiver {v}: {new} vs {old}"
            );
        }
        assert!(close(b.bytes_s, bytes_s));
        assert_eq!(b.bottleneck_receiver, at);
    }
}
