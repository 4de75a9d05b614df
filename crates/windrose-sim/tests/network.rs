//! The flow-level network: closed forms, FIFO connections, timed changes, determinism, and the
//! progressive-filling allocation against the max-min characterization and an independent
//! brute-force computation on random platforms.

use proptest::prelude::*;
use std::collections::BTreeMap;
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_sim::network::{Change, Delivered, Network, NetworkError, SharingPolicy};

use crate::support::max_min;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        assert!(close(a, b), "{} = {a} but expected {b}", stringify!($a));
    }};
}

/// Two clusters: cluster 0 has `n0` nodes, cluster 1 has `n1`; node links 100 B/s, access
/// links 1000 B/s, WAN 50 B/s each way; intra latency 0.002 s, WAN latency 0.1 s.
fn two_sites(n0: usize, n1: usize) -> Platform {
    Platform::builder()
        .cluster(ClusterSpec::uniform(n0, 100.0, 1000.0, 0.002))
        .cluster(ClusterSpec::uniform(n1, 100.0, 1000.0, 0.002))
        .wan_all(50.0, 0.1)
        .build()
        .unwrap()
}

const INTRA: f64 = 0.002;
const INTER: f64 = 0.001 + 0.1 + 0.001;

fn n(i: u32) -> NodeId {
    NodeId(i)
}

#[test]
fn one_flow_takes_latency_plus_bytes_over_the_narrowest_link() {
    for policy in [SharingPolicy::MaxMin, SharingPolicy::RttWeighted] {
        let mut net = Network::new(two_sites(2, 2), policy);
        net.send(0.0, n(0), n(1), 1000, 1).unwrap();
        let d = net.run_until_idle();
        assert_close!(d[0].at, INTRA + 1000.0 / 100.0);

        let mut net = Network::new(two_sites(2, 2), policy);
        net.send(3.0, n(0), n(3), 1000, 1).unwrap();
        let d = net.run_until_idle();
        assert_eq!(
            (d[0].src, d[0].dst, d[0].tag, d[0].bytes),
            (n(0), n(3), 1, 1000)
        );
        assert_eq!(d[0].sent_at, 3.0);
        assert_close!(d[0].at, 3.0 + INTER + 1000.0 / 50.0);
    }
}

#[test]
fn empty_message_takes_the_latency() {
    let mut net = Network::new(two_sites(2, 2), SharingPolicy::MaxMin);
    net.send(1.0, n(1), n(2), 0, 9).unwrap();
    let d = net.run_until_idle();
    assert_close!(d[0].at, 1.0 + INTER);
}

#[test]
fn equal_flows_share_one_link_equally() {
    for k in 1..=6u32 {
        // k senders to one receiver: its downlink (100 B/s) is shared k ways.
        let mut net = Network::new(two_sites(7, 1), SharingPolicy::MaxMin);
        for s in 0..k {
            net.send(0.0, n(s), n(6), 500, s as u64).unwrap();
        }
        net.advance_to(INTRA + 0.5);
        for s in 0..k {
            assert_close!(net.rate_bytes_s(n(s), n(6)), 100.0 / k as f64);
        }
        let d = net.run_until_idle();
        assert_eq!(d.len(), k as usize);
        for x in &d {
            assert_close!(x.at, INTRA + 500.0 * k as f64 / 100.0);
        }
        // Same instant: ordered by message id.
        assert!(d.windows(2).all(|w| w[0].id < w[1].id));
    }
}

#[test]
fn two_flows_on_different_bottlenecks() {
    // Node 0 (uplink 10 B/s) sends to node 3 across the WAN (50 B/s); node 1 (uplink 100 B/s)
    // also sends to node 2 across the WAN. Flow 0 is limited by its uplink at 10; flow 1 gets
    // the WAN's remaining 40.
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(2, 100.0, 1000.0, 0.002))
        .cluster(ClusterSpec::uniform(2, 100.0, 1000.0, 0.002))
        .wan_all(50.0, 0.1)
        .node_capacity(n(0), 10.0, 100.0)
        .build()
        .unwrap();
    let mut net = Network::new(p, SharingPolicy::MaxMin);
    net.send(0.0, n(0), n(3), 100, 0).unwrap();
    net.send(0.0, n(1), n(2), 400, 1).unwrap();
    net.advance_to(1.0);
    assert_close!(net.rate_bytes_s(n(0), n(3)), 10.0);
    assert_close!(net.rate_bytes_s(n(1), n(2)), 40.0);
    let wan = net.link_stats(LinkId::Wan {
        from: ClusterId(0),
        to: ClusterId(1),
    });
    assert_close!(wan.rate_bytes_s, 50.0);
    assert_eq!(wan.active_connections, 2);
    let d = net.run_until_idle();
    // Both finish at the same time: 100/10 = 400/40 = 10 s after the latency.
    assert_close!(d[0].at, INTER + 10.0);
    assert_close!(d[1].at, INTER + 10.0);
}

#[test]
fn max_min_redistributes_what_a_bottlenecked_flow_leaves() {
    // Receiver 3's downlink (100 B/s) is shared by senders 0, 1, 2; sender 0 also feeds node 4
    // and its uplink is 80 B/s. Max-min: the downlink of 3 saturates first (100/3 each, below
    // the uplink's 80/2); sender 0's uplink then has 80 - 33.3 = 46.7 for the flow to 4.
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(5, 100.0, 1000.0, 0.0))
        .node_capacity(n(0), 80.0, 100.0)
        .build()
        .unwrap();
    let mut net = Network::new(p, SharingPolicy::MaxMin);
    for s in 0..3 {
        net.send(0.0, n(s), n(3), 1_000_000, 0).unwrap();
    }
    net.send(0.0, n(0), n(4), 1_000_000, 0).unwrap();
    net.advance_to(1.0);
    for s in 0..3 {
        assert_close!(net.rate_bytes_s(n(s), n(3)), 100.0 / 3.0);
    }
    assert_close!(net.rate_bytes_s(n(0), n(4)), 80.0 - 100.0 / 3.0);

    // With a 60 B/s uplink, the uplink saturates first instead (30 each); the two other
    // senders then split what is left of 3's downlink (35 each).
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(5, 100.0, 1000.0, 0.0))
        .node_capacity(n(0), 60.0, 100.0)
        .build()
        .unwrap();
    let mut net = Network::new(p, SharingPolicy::MaxMin);
    for s in 0..3 {
        net.send(0.0, n(s), n(3), 1_000_000, 0).unwrap();
    }
    net.send(0.0, n(0), n(4), 1_000_000, 0).unwrap();
    net.advance_to(1.0);
    assert_close!(net.rate_bytes_s(n(0), n(3)), 30.0);
    assert_close!(net.rate_bytes_s(n(0), n(4)), 30.0);
    assert_close!(net.rate_bytes_s(n(1), n(3)), 35.0);
    assert_close!(net.rate_bytes_s(n(2), n(3)), 35.0);
}

#[test]
fn rtt_weighted_shares_in_inverse_proportion_to_latency() {
    // Cluster 0's access uplink (30 B/s) is shared by a flow to cluster 1 (route latency
    // 0.01 + ... ) and one to cluster 2 whose route latency is 3 times larger.
    let p = Platform::builder()
        .cluster(ClusterSpec {
            access_up_bytes_s: 30.0,
            ..ClusterSpec::uniform(2, 1000.0, 1000.0, 0.0)
        })
        .cluster(ClusterSpec::uniform(1, 1000.0, 1000.0, 0.0))
        .cluster(ClusterSpec::uniform(1, 1000.0, 1000.0, 0.0))
        .wan_all(1000.0, 0.1)
        .wan(ClusterId(0), ClusterId(2), 1000.0, 0.3)
        .build()
        .unwrap();
    let mut net = Network::new(p.clone(), SharingPolicy::RttWeighted);
    net.send(0.0, n(0), n(2), 1_000_000, 0).unwrap();
    net.send(0.0, n(1), n(3), 1_000_000, 0).unwrap();
    net.advance_to(1.0);
    assert_close!(net.rate_bytes_s(n(0), n(2)), 22.5);
    assert_close!(net.rate_bytes_s(n(1), n(3)), 7.5);
    // Plain max-min: equal shares.
    let mut net = Network::new(p, SharingPolicy::MaxMin);
    net.send(0.0, n(0), n(2), 1_000_000, 0).unwrap();
    net.send(0.0, n(1), n(3), 1_000_000, 0).unwrap();
    net.advance_to(1.0);
    assert_close!(net.rate_bytes_s(n(0), n(2)), 15.0);
}

#[test]
fn messages_on_one_connection_complete_in_order_back_to_back() {
    let mut net = Network::new(two_sites(2, 2), SharingPolicy::MaxMin);
    let sizes = [300u64, 0, 100, 600];
    let ids: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(k, &b)| net.send(0.0, n(0), n(1), b, k as u64).unwrap())
        .collect();
    let d = net.run_until_idle();
    assert_eq!(d.iter().map(|x| x.id).collect::<Vec<_>>(), ids);
    // No latency between messages: the k-th arrives after the bytes of all before it.
    let mut cum = 0;
    for (x, &b) in d.iter().zip(&sizes) {
        cum += b;
        assert_close!(x.at, INTRA + cum as f64 / 100.0);
    }
    let st = net.connection_stats(n(0), n(1)).unwrap();
    assert_eq!((st.messages_sent, st.messages_delivered), (4, 4));
    assert_eq!(st.bytes_delivered, 1000);
    assert_close!(st.active_s, 10.0);
    // Streaming needed one solve for the start and one for the end, none in between.
    assert_eq!(net.stats().solves, 2);
}

#[test]
fn a_message_sent_to_a_busy_connection_streams_once_transferable() {
    let mut net = Network::new(two_sites(2, 2), SharingPolicy::MaxMin);
    net.send(0.0, n(0), n(1), 1000, 0).unwrap(); // transfers from 0.002 to 10.002
    net.advance_to(4.0);
    net.send(4.0, n(0), n(1), 200, 1).unwrap(); // transferable at 4.002: streams at 10.002
    let mut d = net.advance_to(12.001);
    net.send(12.001, n(0), n(1), 100, 2).unwrap(); // transferable at 12.003: a 1 ms gap
    d.extend(net.run_until_idle());
    assert_close!(d[0].at, INTRA + 10.0);
    assert_close!(d[1].at, INTRA + 12.0);
    assert_close!(d[2].at, 12.001 + INTRA + 1.0);
    // The connection was idle during the gap.
    assert_close!(
        net.connection_stats(n(0), n(1)).unwrap().active_s,
        13.003 - INTRA - 0.001
    );
}

#[test]
fn capacity_change_mid_transfer() {
    let mut net = Network::new(two_sites(2, 2), SharingPolicy::MaxMin);
    let wan = LinkId::Wan {
        from: ClusterId(0),
        to: ClusterId(1),
    };
    net.set_capacity(wan, 5.0, 25.0).unwrap();
    net.set_capacity(wan, 9.0, 100.0).unwrap(); // the node links (100 B/s) then limit
    net.send(0.0, n(0), n(2), 1000, 0).unwrap();
    let d = net.run_until_idle();
    // 50 B/s from INTER to 5, 25 B/s from 5 to 9, then 100 B/s.
    let left = 1000.0 - 50.0 * (5.0 - INTER) - 25.0 * 4.0;
    assert_close!(d[0].at, 9.0 + left / 100.0);
    assert_eq!(net.platform().capacity_bytes_s(wan), 100.0);
    let st = net.link_stats(wan);
    assert_close!(st.bytes, 1000.0);
    assert_eq!(st.rate_bytes_s, 0.0);
}

#[test]
fn latency_change_applies_to_later_messages_and_reweights() {
    let mut net = Network::new(two_sites(2, 2), SharingPolicy::RttWeighted);
    net.set_wan_latency(ClusterId(0), ClusterId(1), 1.0, 0.5)
        .unwrap();
    net.send(0.0, n(0), n(2), 100, 0).unwrap();
    net.advance_to(1.0);
    net.send(1.0, n(1), n(3), 0, 1).unwrap();
    let d = net.run_until_idle();
    // The message in flight keeps its latency; the later one pays the new one.
    assert_eq!(d[1].tag, 0);
    assert_close!(d[1].at, INTER + 2.0);
    assert_eq!(d[0].tag, 1);
    assert_close!(d[0].at, 1.0 + 0.001 + 0.5 + 0.001);

    // Two flows share the WAN; when the latency of one's route doubles its weight halves.
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(2, 1000.0, 1000.0, 0.0))
        .cluster(ClusterSpec::uniform(1, 1000.0, 1000.0, 0.0))
        .cluster(ClusterSpec::uniform(1, 1000.0, 1000.0, 0.0))
        .wan_all(1000.0, 0.1)
        .build()
        .unwrap();
    let mut net = Network::new(p, SharingPolicy::RttWeighted);
    // Both cross cluster 0's access uplink (1000 B/s); equal latencies at first.
    net.send(0.0, n(0), n(2), 1_000_000, 0).unwrap();
    net.send(0.0, n(1), n(3), 1_000_000, 0).unwrap();
    net.set_wan_latency(ClusterId(0), ClusterId(2), 2.0, 0.3)
        .unwrap();
    net.advance_to(1.0);
    assert_close!(net.rate_bytes_s(n(0), n(2)), 500.0);
    net.advance_to(2.0);
    assert_close!(net.rate_bytes_s(n(0), n(2)), 750.0);
    assert_close!(net.rate_bytes_s(n(1), n(3)), 250.0);
}

#[test]
fn duplex_directions_are_independent() {
    let mut net = Network::new(two_sites(1, 1), SharingPolicy::MaxMin);
    net.send(0.0, n(0), n(1), 500, 0).unwrap();
    net.send(0.0, n(1), n(0), 500, 1).unwrap();
    let d = net.run_until_idle();
    assert_close!(d[0].at, INTER + 10.0);
    assert_close!(d[1].at, INTER + 10.0);
}

#[test]
fn link_and_connection_statistics_add_up() {
    let mut net = Network::new(two_sites(3, 2), SharingPolicy::MaxMin);
    net.send(0.0, n(0), n(3), 700, 0).unwrap();
    net.send(0.0, n(1), n(4), 300, 0).unwrap();
    net.advance_to(0.5);
    net.send(0.5, n(2), n(0), 250, 0).unwrap();
    net.advance_to(3.0);
    // Mid-transfer, the WAN has carried what the two flows have sent so far.
    let wan = LinkId::Wan {
        from: ClusterId(0),
        to: ClusterId(1),
    };
    assert_close!(net.link_stats(wan).bytes, 50.0 * (3.0 - INTER));
    net.run_until_idle();
    assert_close!(net.link_stats(wan).bytes, 1000.0);
    assert_close!(net.link_stats(LinkId::AccessUp(ClusterId(0))).bytes, 1000.0);
    assert_close!(net.link_stats(LinkId::NodeDown(n(0))).bytes, 250.0);
    assert_close!(net.link_stats(LinkId::AccessUp(ClusterId(1))).bytes, 0.0);
    let conns: Vec<_> = net.connections().collect();
    assert_eq!(conns.len(), 3);
    assert_eq!((conns[2].src, conns[2].dst), (n(2), n(0)));
    assert!(net.is_idle());
    assert_eq!(net.active_connections().count(), 0);
}

#[test]
fn bad_calls_are_errors() {
    let mut net = Network::new(two_sites(2, 2), SharingPolicy::MaxMin);
    assert!(matches!(
        net.send(0.0, n(0), n(9), 1, 0),
        Err(NetworkError::UnknownNode { .. })
    ));
    assert!(matches!(
        net.send(0.0, n(1), n(1), 1, 0),
        Err(NetworkError::SelfSend { .. })
    ));
    assert!(matches!(
        net.send(f64::NAN, n(0), n(1), 1, 0),
        Err(NetworkError::BadTime { .. })
    ));
    net.send(0.0, n(0), n(1), 100, 0).unwrap();
    let e = net.send(5.0, n(0), n(1), 1, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot act at 5 s: an event is pending at 0.002 s; call advance_to(0.002) first"
    );
    net.advance_to(2.0);
    assert!(matches!(
        net.send(1.0, n(0), n(1), 1, 0),
        Err(NetworkError::InThePast { .. })
    ));
    assert!(net.set_capacity(LinkId::NodeUp(n(0)), 3.0, 0.0).is_err());
    assert!(net
        .set_capacity(
            LinkId::Wan {
                from: ClusterId(1),
                to: ClusterId(1)
            },
            3.0,
            1.0
        )
        .is_err());
    assert!(net
        .schedule(
            3.0,
            Change::IntraLatency {
                cluster: ClusterId(5),
                latency_s: 1.0
            }
        )
        .is_err());
    assert!(net.set_capacity(LinkId::NodeUp(n(0)), 1.0, 5.0).is_err());
}

// ---------------------------------------------------------------------------------------------
// Determinism

fn random_run(seed: u64, policy: SharingPolicy) -> (Vec<Delivered>, String) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(8, 1e6, 4e6, 1e-4))
        .cluster(ClusterSpec::uniform(8, 2e6, 3e6, 2e-4))
        .cluster(ClusterSpec::uniform(8, 5e5, 1e7, 3e-4))
        .wan_all(2e6, 0.02)
        .wan(ClusterId(1), ClusterId(2), 1e6, 0.05)
        .build()
        .unwrap();
    let mut net = Network::new(p, policy);
    for k in 0..20 {
        let l = net
            .platform()
            .link_at(rng.gen_range(0..net.platform().link_count()));
        net.set_capacity(l, k as f64 * 0.3, rng.gen_range(1e5..1e7))
            .unwrap();
    }
    let mut out = Vec::new();
    let mut t = 0.0;
    for _ in 0..400 {
        let src = rng.gen_range(0..24u32);
        let dst = (src + rng.gen_range(1..24u32)) % 24;
        net.send(t, n(src), n(dst), rng.gen_range(0..2_000_000), 0)
            .unwrap();
        t += rng.gen_range(0.0..0.02);
        if let Some(e) = net.next_event_time() {
            if e < t {
                net.advance_into(e, &mut out);
                t = t.max(net.now());
            }
        }
        net.advance_into(t, &mut out);
    }
    out.extend(net.run_until_idle());
    let summary = format!(
        "{:?} {:?}",
        net.stats(),
        net.connections().collect::<Vec<_>>()
    );
    (out, summary)
}

#[test]
fn same_inputs_same_results_bit_for_bit() {
    for policy in [SharingPolicy::MaxMin, SharingPolicy::RttWeighted] {
        let (a, sa) = random_run(11, policy);
        let (b, sb) = random_run(11, policy);
        assert_eq!(a.len(), 400);
        assert_eq!(sa, sb);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x, y);
            assert_eq!(x.at.to_bits(), y.at.to_bits());
        }
        // Deliveries are in (time, id) order.
        assert!(a
            .windows(2)
            .all(|w| (w[0].at, w[0].id) <= (w[1].at, w[1].id)));
    }
}

// ---------------------------------------------------------------------------------------------
// The allocation against max-min fairness, on random platforms

#[derive(Debug, Clone)]
struct RandomCase {
    clusters: Vec<(usize, f64, f64, f64, f64, f64)>,
    wan: Vec<(f64, f64)>,
    sends: Vec<(u32, u32, u64, f64)>,
    /// (link, time, capacity): the link index is taken modulo the link count.
    changes: Vec<(usize, f64, f64)>,
    rtt: bool,
}

fn random_case() -> impl Strategy<Value = RandomCase> {
    let cluster = (
        1usize..4,
        1.0..100.0f64,
        1.0..100.0f64,
        1.0..300.0f64,
        1.0..300.0f64,
        0.0..0.01f64,
    );
    (prop::collection::vec(cluster, 1..4), any::<bool>()).prop_flat_map(|(clusters, rtt)| {
        let nodes: usize = clusters.iter().map(|c| c.0).sum();
        let c = clusters.len();
        let wan = prop::collection::vec((1.0..200.0f64, 0.0..0.2f64), c * c);
        let sends = prop::collection::vec(
            (0..nodes as u32, 0..nodes as u32, 0u64..2000, 0.0..2.0f64),
            1..16,
        );
        let changes = prop::collection::vec((any::<usize>(), 0.0..20.0f64, 1.0..300.0f64), 0..6);
        (Just(clusters), wan, sends, changes, Just(rtt)).prop_map(
            |(clusters, wan, sends, changes, rtt)| RandomCase {
                clusters,
                wan,
                sends,
                changes,
                rtt,
            },
        )
    })
}

fn build(case: &RandomCase) -> Platform {
    let mut b = Platform::builder();
    for &(nodes, up, down, aup, adown, lat) in &case.clusters {
        b = b.cluster(ClusterSpec {
            nodes,
            node_uplink_bytes_s: up,
            node_downlink_bytes_s: down,
            access_up_bytes_s: aup,
            access_down_bytes_s: adown,
            intra_latency_s: lat,
        });
    }
    let c = case.clusters.len();
    for a in 0..c {
        for z in 0..c {
            if a != z {
                let (bw, lat) = case.wan[a * c + z];
                b = b.wan(ClusterId::from(a), ClusterId::from(z), bw, lat);
            }
        }
    }
    b.build().unwrap()
}

/// Checks the network's current rates: feasible, equal to the brute-force allocation, and
/// every active connection has a saturated link on which its normalized rate is maximal.
fn check_allocation(net: &Network) -> Result<(), TestCaseError> {
    let max_min::Snapshot {
        active,
        capacity,
        routes,
        weights,
    } = max_min::snapshot(net);
    let mut load = vec![0.0; capacity.len()];
    for (f, r) in routes.iter().enumerate() {
        prop_assert!(active[f].2 > 0.0, "active connection with rate 0");
        for &l in r {
            load[l] += active[f].2;
        }
    }
    let tol = 1e-9;
    for (l, &c) in capacity.iter().enumerate() {
        prop_assert!(
            load[l] <= c * (1.0 + tol),
            "link {l} overloaded: {} > {c}",
            load[l]
        );
    }
    for (f, r) in routes.iter().enumerate() {
        let norm = active[f].2 / weights[f];
        let bottleneck = r.iter().any(|&l| {
            load[l] >= capacity[l] * (1.0 - tol)
                && routes.iter().enumerate().all(|(g, rg)| {
                    !rg.contains(&l) || active[g].2 / weights[g] <= norm * (1.0 + tol)
                })
        });
        prop_assert!(
            bottleneck,
            "connection {f} has no bottleneck link: {active:?}"
        );
    }
    let reference = max_min::brute_force(&capacity, &routes, &weights);
    for (f, &r) in reference.iter().enumerate() {
        prop_assert!(
            (active[f].2 - r).abs() <= 1e-9 * r.max(1e-9),
            "connection {f}: network {} vs brute force {r}",
            active[f].2
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn allocation_is_max_min_fair_at_every_event(case in random_case(), regions in any::<bool>()) {
        let policy = if case.rtt { SharingPolicy::RttWeighted } else { SharingPolicy::MaxMin };
        let p = build(&case);
        let nodes = p.node_count() as u32;
        let links = p.link_count();
        let mut net = Network::new(p, policy);
        // These platforms are small: without this the solver re-shares whole components only.
        if regions {
            net.set_component_limit(0);
        }
        for &(l, at, bytes_s) in &case.changes {
            let link = net.platform().link_at(l % links);
            net.set_capacity(link, at, bytes_s).unwrap();
        }
        let mut sends = case.sends.clone();
        sends.sort_by(|a, b| a.3.total_cmp(&b.3));
        let mut expected = BTreeMap::new();
        for (s, d, bytes, at) in sends {
            let (s, d) = (s % nodes, d % nodes);
            if s == d {
                continue;
            }
            while let Some(t) = net.next_event_time().filter(|&t| t <= at) {
                for x in net.advance_to(t) {
                    expected.remove(&x.id);
                }
                check_allocation(&net)?;
            }
            net.advance_to(at);
            let id = net.send(at, NodeId(s), NodeId(d), bytes, 0).unwrap();
            expected.insert(id, bytes);
        }
        while let Some(t) = net.next_event_time() {
            for x in net.advance_to(t) {
                prop_assert_eq!(expected.remove(&x.id), Some(x.bytes));
            }
            check_allocation(&net)?;
        }
        prop_assert!(expected.is_empty(), "messages never delivered: {:?}", expected);
    }
}

// The incremental solver under churn: many connections on few, equal capacities (ties between
// levels everywhere), starts, completions, capacity and latency changes; after every event the
// rates must equal a from-scratch progressive filling.

#[derive(Debug, Clone)]
struct ChurnCase {
    /// Nodes per cluster.
    clusters: Vec<usize>,
    /// Capacities are drawn from a few values so that levels tie across links.
    node_bw: f64,
    access_bw: f64,
    wan_bw: f64,
    /// (src, dst, bytes, time).
    sends: Vec<(u32, u32, u64, f64)>,
    /// (link, time, capacity index); the link index is taken modulo the link count.
    capacity_changes: Vec<(usize, f64, usize)>,
    /// (cluster, other cluster, time, latency); `other == cluster` changes the intra latency.
    latency_changes: Vec<(usize, usize, f64, f64)>,
    rtt: bool,
}

const CHURN_BW: [f64; 4] = [10.0, 20.0, 30.0, 60.0];

fn churn_case() -> impl Strategy<Value = ChurnCase> {
    (
        prop::collection::vec(2usize..7, 1..4),
        0..CHURN_BW.len(),
        0..CHURN_BW.len(),
        0..CHURN_BW.len(),
        any::<bool>(),
    )
        .prop_flat_map(|(clusters, nb, ab, wb, rtt)| {
            let nodes: usize = clusters.iter().sum();
            let c = clusters.len();
            let sends = prop::collection::vec(
                (
                    0..nodes as u32,
                    0..nodes as u32,
                    prop::sample::select(vec![0u64, 5, 10, 20, 40, 100]),
                    prop::sample::select(vec![0.0, 0.5, 1.0, 1.5, 2.0, 3.0]),
                ),
                10..120,
            );
            let capacity_changes =
                prop::collection::vec((any::<usize>(), 0.0..6.0f64, 0..CHURN_BW.len()), 0..6);
            let latency_changes =
                prop::collection::vec((0..c, 0..c, 0.0..6.0f64, 0.0..0.05f64), 0..4);
            (
                Just(clusters),
                sends,
                capacity_changes,
                latency_changes,
                Just((nb, ab, wb, rtt)),
            )
                .prop_map(
                    |(clusters, sends, capacity_changes, latency_changes, (nb, ab, wb, rtt))| {
                        ChurnCase {
                            clusters,
                            node_bw: CHURN_BW[nb],
                            access_bw: CHURN_BW[ab],
                            wan_bw: CHURN_BW[wb],
                            sends,
                            capacity_changes,
                            latency_changes,
                            rtt,
                        }
                    },
                )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn incremental_sharing_equals_filling_from_scratch_under_churn(case in churn_case(), regions in any::<bool>()) {
        let policy = if case.rtt { SharingPolicy::RttWeighted } else { SharingPolicy::MaxMin };
        let mut b = Platform::builder();
        for &nodes in &case.clusters {
            b = b.cluster(ClusterSpec {
                nodes,
                node_uplink_bytes_s: case.node_bw,
                node_downlink_bytes_s: case.node_bw,
                access_up_bytes_s: case.access_bw,
                access_down_bytes_s: case.access_bw,
                intra_latency_s: 0.01,
            });
        }
        let p = b.wan_all(case.wan_bw, 0.02).build().unwrap();
        let nodes = p.node_count() as u32;
        let links = p.link_count();
        let mut net = Network::new(p, policy);
        // These platforms are small: without this the solver re-shares whole components only.
        if regions {
            net.set_component_limit(0);
        }
        for &(l, at, k) in &case.capacity_changes {
            let link = net.platform().link_at(l % links);
            net.set_capacity(link, at, CHURN_BW[k]).unwrap();
        }
        for &(a, z, at, lat) in &case.latency_changes {
            if a == z {
                net.set_intra_latency(ClusterId::from(a), at, lat).unwrap();
            } else {
                net.set_wan_latency(ClusterId::from(a), ClusterId::from(z), at, lat).unwrap();
            }
        }
        let mut sends = case.sends.clone();
        sends.sort_by(|a, b| a.3.total_cmp(&b.3));
        let mut expected = BTreeMap::new();
        for (s, d, bytes, at) in sends {
            let (s, d) = (s % nodes, d % nodes);
            if s == d {
                continue;
            }
            while let Some(t) = net.next_event_time().filter(|&t| t <= at) {
                for x in net.advance_to(t) {
                    expected.remove(&x.id);
                }
                check_allocation(&net)?;
            }
            net.advance_to(at);
            let id = net.send(at, NodeId(s), NodeId(d), bytes, 0).unwrap();
            expected.insert(id, bytes);
        }
        while let Some(t) = net.next_event_time() {
            for x in net.advance_to(t) {
                prop_assert_eq!(expected.remove(&x.id), Some(x.bytes));
            }
            check_allocation(&net)?;
        }
        prop_assert!(expected.is_empty(), "messages never delivered: {:?}", expected);
    }
}
