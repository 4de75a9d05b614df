//! Per-node-pair latencies (issue 17, seed 004's Fig. 5 as the paper ran it): a `pair:A:B`
//! change sets the latency of the messages between two nodes and of no others; their route and
//! the capacities it shares stay. Checked in the network against hand-computed routes (a table
//! and a property test), in scenario files (`[[change]]` and `[[platform.pair]]`, with their
//! errors), and through the Hosts' prober, whose round trips between A and B measure it.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use windrose_model::platform::{parse_platform_toml, ClusterSpec, Platform, PlatformError};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::probe::ProbeConfig;
use windrose_proto::Report;
use windrose_sim::engine::SimConfig;
use windrose_sim::group::{group, leave_input};
use windrose_sim::network::{Change, Network, NetworkError, SharingPolicy};
use windrose_sim::scenario::parse_scenario;

use crate::support::scenario_text;
use scenario_text::{err, line_of, small, PLATFORM};

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Two clusters of 3 nodes: 1000 B/s node links, 10 kB/s access, 500 B/s WAN; 2 ms inside a
/// cluster, 100 ms between the gateways.
fn two_sites() -> Platform {
    Platform::builder()
        .cluster(ClusterSpec::uniform(3, 1000.0, 10_000.0, 0.002))
        .cluster(ClusterSpec::uniform(3, 1000.0, 10_000.0, 0.002))
        .wan_all(500.0, 0.1)
        .build()
        .unwrap()
}

/// The arrival of one empty message from `a` to `b` sent at `at`, on a network where `pairs`
/// were scheduled at time 1 (`(from, to, latency)`, one direction each).
fn empty_message_latency(pairs: &[(u32, u32, f64)], a: u32, b: u32) -> f64 {
    let mut net = Network::new(two_sites(), SharingPolicy::MaxMin);
    for &(x, y, l) in pairs {
        net.set_pair_latency(n(x), n(y), 1.0, l).unwrap();
    }
    net.advance_to(2.0);
    net.send(2.0, n(a), n(b), 0, 0).unwrap();
    let d = net.run_until_idle();
    d[0].at - 2.0
}

/// Pair latencies `(from, to, seconds)`.
type Pairs<'a> = &'a [(u32, u32, f64)];

/// The table: the pair's messages take its latency, in its direction(s) only; every other
/// message keeps its route's (hand-computed: intra inside a site, intra/2 + WAN + intra/2
/// across).
#[test]
fn the_pair_takes_its_latency_and_no_other_message_does() {
    const INTRA: f64 = 0.002;
    const ACROSS: f64 = 0.001 + 0.1 + 0.001;
    let both = [(0, 2, 9.999), (2, 0, 9.999)];
    let one_way = [(1, 4, 0.045)];
    // (pairs, from, to, expected one-way latency)
    let table: &[(Pairs, u32, u32, f64)] = &[
        (&[], 0, 2, INTRA),
        (&both, 0, 2, 9.999),
        (&both, 2, 0, 9.999),
        (&both, 0, 1, INTRA),
        (&both, 1, 2, INTRA),
        (&both, 2, 1, INTRA),
        (&both, 0, 3, ACROSS),
        (&both, 2, 5, ACROSS),
        (&one_way, 1, 4, 0.045),
        (&one_way, 4, 1, ACROSS),
        (&one_way, 1, 3, ACROSS),
        (&one_way, 0, 4, ACROSS),
        // A pair may be faster than its route.
        (&[(3, 0, 0.0)], 3, 0, 0.0),
    ];
    for &(pairs, a, b, want) in table {
        let got = empty_message_latency(pairs, a, b);
        assert!(
            close(got, want),
            "{a} -> {b} with {pairs:?}: {got} s, expected {want} s"
        );
    }
}

/// A message sent before the change keeps its latency; a later intra or WAN change leaves the
/// pair's latency alone and still reaches the other pairs.
#[test]
fn in_flight_messages_keep_their_latency_and_link_changes_leave_the_pair() {
    let mut net = Network::new(two_sites(), SharingPolicy::MaxMin);
    net.send(0.0, n(0), n(2), 0, 1).unwrap();
    net.set_pair_latency(n(0), n(2), 0.0005, 5.0).unwrap();
    net.set_intra_latency(ClusterId(0), 1.0, 0.5).unwrap();
    let mut d = net.advance_to(1.5);
    net.send(1.5, n(0), n(2), 0, 2).unwrap();
    net.send(1.5, n(0), n(1), 0, 3).unwrap();
    d.extend(net.run_until_idle());
    let at = |tag: u64| d.iter().find(|x| x.tag == tag).unwrap().at;
    assert!(close(at(1), 0.002), "{}", at(1));
    assert!(close(at(2), 1.5 + 5.0), "{}", at(2));
    assert!(close(at(3), 1.5 + 0.5), "{}", at(3));
    assert_eq!(net.platform().pair_latency_s(n(0), n(2)), Some(5.0));
    assert_eq!(net.platform().pair_latency_s(n(2), n(0)), None);
    assert_eq!(net.platform().route(n(0), n(2)).latency_s(), 5.0);
}

/// The pair's bytes still cross its route's links: two senders to one receiver share its
/// downlink whatever the latency of one of them.
#[test]
fn a_pair_shares_the_capacities_of_its_route() {
    let mut net = Network::new(two_sites(), SharingPolicy::MaxMin);
    net.set_pair_latency(n(0), n(2), 0.0, 0.5).unwrap();
    net.advance_to(0.0);
    net.send(0.0, n(0), n(2), 1000, 1).unwrap();
    net.send(0.0, n(1), n(2), 1000, 2).unwrap();
    net.advance_to(0.6);
    // Both active on node 2's 1000 B/s downlink: 500 B/s each.
    assert!(close(net.rate_bytes_s(n(0), n(2)), 500.0));
    assert!(close(net.rate_bytes_s(n(1), n(2)), 500.0));
    let d = net.run_until_idle();
    // Node 1's message alone from 0.002 to 0.5 (498 B), then both at 500 B/s; node 1's
    // remaining 502 B end at 0.5 + 502/500; node 0's 1000 B then take the whole link.
    let at = |tag: u64| d.iter().find(|x| x.tag == tag).unwrap().at;
    assert!(close(at(2), 0.5 + 502.0 / 500.0), "{}", at(2));
    assert!(close(at(1), at(2) + (1000.0 - 502.0) / 1000.0), "{}", at(1));
}

#[test]
fn a_bad_pair_is_refused() {
    let mut net = Network::new(two_sites(), SharingPolicy::MaxMin);
    let e = net.set_pair_latency(n(0), n(9), 1.0, 0.1).unwrap_err();
    assert!(
        matches!(
            e,
            NetworkError::Platform(PlatformError::UnknownNode {
                node: NodeId(9),
                ..
            })
        ),
        "{e}"
    );
    let e = net.set_pair_latency(n(3), n(3), 1.0, 0.1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a pair latency joins two different nodes, but both ends are node 3"
    );
    let e = net.set_pair_latency(n(3), n(4), 1.0, -0.1).unwrap_err();
    assert!(e.to_string().contains("latency of the pair 3->4"), "{e}");
    let e = net.set_pair_latency(n(3), n(4), 1.0, f64::NAN).unwrap_err();
    assert!(e.to_string().contains("latency of the pair 3->4"), "{e}");
    let mut p = two_sites();
    assert!(p.set_pair_latency(n(6), n(0), 0.1).is_err());
    assert!(p.set_pair_latency(n(0), n(0), 0.1).is_err());
    assert!(p.set_pair_latency(n(0), n(1), f64::INFINITY).is_err());
    assert_eq!(p, two_sites(), "a refused pair changes nothing");
}

// ---------------------------------------------------------------------------------------------
// Property: empty messages against a hand-computed route, under random pair, intra and WAN
// latency changes.

#[derive(Clone, Debug)]
enum Op {
    Pair(u32, u32, f64),
    Intra(u32, f64),
    Wan(u32, u32, f64),
    Send(u32, u32),
}

#[derive(Clone, Debug)]
struct Case {
    sizes: Vec<usize>,
    intra: Vec<f64>,
    wan: Vec<f64>,
    ops: Vec<Op>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=3)
        .prop_flat_map(|c| {
            (
                prop::collection::vec(1usize..=3, c),
                prop::collection::vec(0.0..0.01f64, c),
                prop::collection::vec(0.0..0.5f64, c * c),
                prop::collection::vec((0u8..4, 0u32..9, 0u32..9, 0.0..2.0f64), 1..40),
            )
        })
        .prop_filter("two nodes at least", |(sizes, ..)| {
            sizes.iter().sum::<usize>() >= 2
        })
        .prop_map(|(sizes, intra, wan, raw)| {
            let total = sizes.iter().sum::<usize>() as u32;
            let c = sizes.len() as u32;
            let ops = raw
                .into_iter()
                .filter_map(|(k, a, b, x)| {
                    let (a, b) = (a % total, b % total);
                    match k {
                        0 if a != b => Some(Op::Pair(a, b, x)),
                        1 => Some(Op::Intra(a % c, x / 100.0)),
                        2 if a % c != b % c => Some(Op::Wan(a % c, b % c, x / 4.0)),
                        _ if a != b => Some(Op::Send(a, b)),
                        _ => None,
                    }
                })
                .collect();
            Case {
                sizes,
                intra,
                wan,
                ops,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every empty message arrives after exactly its pair's latency if one is set, its
    /// route's (intra/2 + WAN + intra/2, or intra) otherwise, whatever changed before.
    #[test]
    fn empty_messages_take_the_pair_or_the_route_latency(case in case()) {
        let c = case.sizes.len();
        let mut b = Platform::builder();
        for (k, &size) in case.sizes.iter().enumerate() {
            b = b.cluster(ClusterSpec::uniform(size, 1e6, 1e7, case.intra[k]));
        }
        for x in 0..c {
            for y in (0..c).filter(|&y| y != x) {
                b = b.wan(ClusterId(x as u32), ClusterId(y as u32), 1e6, case.wan[x * c + y]);
            }
        }
        let p = b.build().unwrap();
        let cluster: Vec<usize> = (0..p.node_count() as u32)
            .map(|v| p.cluster_of(NodeId(v)).index())
            .collect();
        let mut net = Network::new(p, SharingPolicy::MaxMin);
        let (mut intra, mut wan) = (case.intra.clone(), case.wan.clone());
        let mut pairs: BTreeMap<(u32, u32), f64> = BTreeMap::new();
        // One op every 10 s: no message is still in flight when the next one is sent.
        for (i, op) in case.ops.iter().enumerate() {
            let t = 10.0 * (i + 1) as f64;
            match *op {
                Op::Pair(a, b, l) => {
                    net.schedule(t, Change::PairLatency { from: n(a), to: n(b), latency_s: l }).unwrap();
                    pairs.insert((a, b), l);
                }
                Op::Intra(k, l) => {
                    net.set_intra_latency(ClusterId(k), t, l).unwrap();
                    intra[k as usize] = l;
                }
                Op::Wan(x, y, l) => {
                    net.set_wan_latency(ClusterId(x), ClusterId(y), t, l).unwrap();
                    wan[x as usize * c + y as usize] = l;
                }
                Op::Send(a, b) => {
                    net.advance_to(t);
                    net.send(t, n(a), n(b), 0, i as u64).unwrap();
                    let d = net.advance_to(t + 5.0);
                    prop_assert_eq!(d.len(), 1);
                    let (ca, cb) = (cluster[a as usize], cluster[b as usize]);
                    let want = match pairs.get(&(a, b)) {
                        Some(&l) => l,
                        None if ca == cb => intra[ca],
                        None => intra[ca] / 2.0 + wan[ca * c + cb] + intra[cb] / 2.0,
                    };
                    prop_assert!(
                        close(d[0].at - t, want),
                        "{} -> {}: {} s, expected {} s", a, b, d[0].at - t, want
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario files

#[test]
fn pair_changes_are_read_both_ways_unless_told() {
    let text = small(
        "[[change]]\nat_s = 2\nlink = \"pair:0:4\"\nlatency_s = 9.999\n\
         [[change]]\nat_s = 3\nlink = \"pair:1:2\"\nlatency_s = 0.5\nboth_directions = false\n",
    );
    let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
    let got: Vec<(f64, Change)> = s.changes.iter().map(|c| (c.at_s, c.change)).collect();
    let pair = |a, b, l| Change::PairLatency {
        from: n(a),
        to: n(b),
        latency_s: l,
    };
    assert_eq!(
        got,
        [
            (2.0, pair(0, 4, 9.999)),
            (2.0, pair(4, 0, 9.999)),
            (3.0, pair(1, 2, 0.5)),
        ]
    );
}

#[test]
fn a_bad_pair_in_a_scenario_names_file_line_and_key() {
    // (text, needle on the faulty line, what the message says)
    let cases: Vec<(String, &str, &str)> = vec![
        (
            small("[[change]]\nat_s = 1\nlink = \"pair:0:5\"\nlatency_s = 1\n"),
            "link = \"pair:0:5\"",
            "`change[0].link`: link \"pair:0:5\": node 5 does not exist: the platform has 5 nodes",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"pair:3:3\"\nlatency_s = 1\n"),
            "link = \"pair:3:3\"",
            "a pair joins two different nodes, but both ends are node 3",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"pair:3\"\nlatency_s = 1\n"),
            "link = \"pair:3\"",
            "expected node_up:N, node_down:N, access_up:C, access_down:C, wan:FROM:TO, intra:C or pair:A:B",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"pair:0:3\"\nfraction = 0.5\n"),
            "fraction = 0.5",
            "`change[0].link`: `pair:0:3` has only a latency",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"pair:0:3\"\nlatency_s = 1\nbytes_s = 5\n"),
            "bytes_s = 5",
            "`pair:0:3` has only a latency",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"pair:0:3\"\nlatency_s = -1\n"),
            "latency_s = -1",
            "change[0].latency_s",
        ),
        (
            small("[[platform.pair]]\na = 0\nb = 7\nlatency_s = 1\n"),
            "b = 7",
            "`platform.pair[0].b`: node 7 does not exist: the clusters have 5 nodes",
        ),
        (
            small("[[platform.pair]]\na = 2\nb = 2\nlatency_s = 1\n"),
            "b = 2",
            "`platform.pair[0].b`: a pair joins two different nodes, but both ends are node 2",
        ),
        (
            small("[[platform.pair]]\na = 2\nb = 1\nlatency_s = -3\n"),
            "latency_s = -3",
            "`platform.pair[0].latency_s` must be a finite, non-negative number of seconds",
        ),
        (
            small("[[platform.pair]]\na = 2\nb = 1\nbytes_s = 3\n"),
            "bytes_s = 3",
            "unknown field `bytes_s`",
        ),
    ];
    for (text, needle, says) in cases {
        let e = err(&text);
        let line = line_of(&text, needle);
        assert!(
            e.starts_with(&format!("s.toml:{line}:")),
            "expected line {line} ({needle}) in: {e}"
        );
        assert!(e.contains(says), "expected {says:?} in: {e}");
    }
    // A missing latency names the table.
    let text = small("[[platform.pair]]\na = 2\nb = 1\n");
    assert!(
        err(&text).contains("`platform.pair[0].latency_s` is missing"),
        "{}",
        err(&text)
    );
}

#[test]
fn platform_pairs_are_read_and_written_back() {
    let text = format!(
        "{PLATFORM}[[platform.pair]]\na = 0\nb = 4\nlatency_s = 2.5\n\
         [[platform.pair]]\na = 1\nb = 2\nlatency_s = 0.25\nboth_directions = false\n"
    );
    let p = parse_platform_toml(&text, Path::new("p.toml")).unwrap();
    let pairs: Vec<_> = p.pair_latencies().collect();
    assert_eq!(
        pairs,
        [(n(0), n(4), 2.5), (n(1), n(2), 0.25), (n(4), n(0), 2.5)]
    );
    assert_eq!(p.route(n(4), n(0)).latency_s(), 2.5);
    assert_eq!(p.route(n(2), n(1)).latency_s(), 0.001);
    let back = parse_platform_toml(&p.to_toml(), Path::new("back.toml")).unwrap();
    assert_eq!(back, p);
}

// ---------------------------------------------------------------------------------------------
// Through the Hosts: the prober measures the pair.

/// Eight Hosts on two sites (10 ms WAN, 0.1 ms inside a site) probe each other every 500 ms;
/// at 10 s the pair (1, 2) inside site 0 goes to 50 ms both ways and 0 -> 5 to 30 ms one way.
/// Round trips 1 <-> 2 then measure 100 ms, 0 <-> 5 measure 30 + 10.1 ms, and every other
/// pair measured by the same nodes keeps its route's round trip.
#[test]
fn the_hosts_probes_measure_the_pair() {
    let platform = Platform::builder()
        .cluster(ClusterSpec::uniform(4, 50e6, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(4, 50e6, 1e9, 1e-4))
        .wan_all(5e6, 0.01)
        .build()
        .unwrap();
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform, config, 3, |c| {
        c.probe = Some(ProbeConfig {
            period: Duration::from_millis(500),
            rounds: u32::MAX,
        })
    })
    .unwrap();
    for (a, b, l) in [(1, 2, 0.05), (2, 1, 0.05), (0, 5, 0.03)] {
        sim.schedule_change(
            10.0,
            Change::PairLatency {
                from: n(a),
                to: n(b),
                latency_s: l,
            },
        )
        .unwrap();
    }
    for v in 0..8 {
        sim.input_at(n(v), 20.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    let median_rtt = |node: u32, peer: u32, from: f64, to: f64| -> f64 {
        let mut v: Vec<f64> = m.nodes[node as usize]
            .reports
            .iter()
            .filter(|r| r.at_s >= from && r.at_s < to)
            .filter_map(|r| match r.report {
                Report::RoundTrip { peer: p, rtt } if p == n(peer) => Some(rtt.as_secs_f64()),
                _ => None,
            })
            .collect();
        assert!(
            v.len() >= 5,
            "{node} -> {peer}: {} round trips in [{from}, {to})",
            v.len()
        );
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // (node, peer, round trip before, after), s
    let table = [
        (1, 2, 2e-4, 0.1),
        (2, 1, 2e-4, 0.1),
        (1, 3, 2e-4, 2e-4),
        (2, 0, 2e-4, 2e-4),
        (0, 5, 0.0202, 0.03 + 0.0101),
        (5, 0, 0.0202, 0.03 + 0.0101),
        (0, 4, 0.0202, 0.0202),
        (5, 1, 0.0202, 0.0202),
    ];
    for (node, peer, before, after) in table {
        let (b, a) = (
            median_rtt(node, peer, 3.0, 10.0),
            median_rtt(node, peer, 12.0, 20.0),
        );
        // Probe frames cost their bytes too: 0.2 ms over the 5 MB/s WAN.
        assert!(
            (b - before).abs() < 1e-3,
            "{node} -> {peer}: {b} s before, expected {before} s"
        );
        assert!(
            (a - after).abs() < 1e-3,
            "{node} -> {peer}: {a} s after, expected {after} s"
        );
    }
}
