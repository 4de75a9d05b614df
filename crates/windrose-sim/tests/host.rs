//! Long-lived groups in the simulator: one `Host` per node runs the session, several
//! collectives at once started by different members, failure detection by silence, leaving.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams, TreeSpec};
use windrose_proto::ghs::{MstResult, MstSpec, WeightMetric, DEFAULT_TEST_WINDOW};
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::Manifest;
use windrose_proto::Report;
use windrose_proto::TransferId;
use windrose_sim::engine::{FailureNotice, MemoryLog, NotifyPeers, SimConfig, Simulation};
use windrose_sim::group::{group, leave_input, start_input};
use windrose_sim::metrics::Metrics;
use windrose_trees::static_trees::binomial_all;

const N: u32 = 8;

/// Two clusters of four nodes, 50 MB/s nodes, 5 MB/s and 10 ms between the clusters.
fn platform() -> Platform {
    Platform::builder()
        .cluster(ClusterSpec::uniform(4, 50e6, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(4, 50e6, 1e9, 1e-4))
        .wan_all(5e6, 0.01)
        .build()
        .unwrap()
}

fn data(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Bytes::from((0..len).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>())
}

fn broadcast_spec(root: NodeId) -> CollectiveSpec {
    CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&binomial_all(N as usize, root).unwrap()),
        segment_bytes: 64 << 10,
        max_frame_payload: 64 << 10,
    }
}

fn mob_spec(data: &Bytes) -> CollectiveSpec {
    CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Mob,
        // Every member in the mob (the paper's shares), as before the default minimum share:
        // 122 pieces would make a mob of one per cluster, and the failure tests want the
        // failed node busy with a share of its own when it goes silent.
        params: MulticastParams::Mob(MobConfig {
            min_share_pieces: 0,
            ..MobConfig::default()
        }),
        manifest: ManifestSpec::of(&Manifest::build(data, 32 << 10).unwrap()),
    }
}

fn reports(m: &Metrics, node: u32) -> Vec<Report> {
    m.nodes[node as usize]
        .reports
        .iter()
        .map(|r| r.report)
        .collect()
}

/// The `CollectiveComplete` the initiator `node` reported, as (transfer, finished, failed).
fn completions(m: &Metrics, node: u32) -> Vec<(TransferId, u32, u32)> {
    m.completions(NodeId(node))
        .map(|c| (c.transfer, c.finished, c.failed))
        .collect()
}

fn started(m: &Metrics, node: u32) -> Vec<(TransferId, NodeId)> {
    reports(m, node)
        .into_iter()
        .filter_map(|r| match r {
            Report::CollectiveStarted {
                transfer,
                initiator,
            } => Some((transfer, initiator)),
            _ => None,
        })
        .collect()
}

fn reassembled(sim: &Simulation, node: u32, t: TransferId) -> Vec<u8> {
    let mut out = Vec::new();
    for (offset, d) in sim.delivered_of(NodeId(node), t) {
        assert_eq!(
            offset as usize,
            out.len(),
            "node {node} got data out of order"
        );
        out.extend_from_slice(&d);
    }
    out
}

/// Node 0 broadcasts 1 MB and node 5 multicasts 2 MB with MOB, both at t = 0, in one group;
/// everyone leaves at t = 30 s. Returns the run and its metrics.
fn two_collectives(log: Option<MemoryLog>) -> (Simulation, Metrics, Bytes, Bytes) {
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 7, |_| {}).unwrap();
    if let Some(log) = log {
        sim.set_event_log(Box::new(log));
    }
    let a = data(1_000_000, 1);
    let b = data(2_000_000, 2);
    sim.input_at(
        NodeId(0),
        0.0,
        start_input(broadcast_spec(NodeId(0)), a.clone(), None),
    )
    .unwrap();
    sim.input_at(NodeId(5), 0.0, start_input(mob_spec(&b), b.clone(), None))
        .unwrap();
    for i in 0..N {
        sim.input_at(NodeId(i), 30.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    (sim, m, a, b)
}

#[test]
fn two_members_start_two_collectives_at_once_and_both_complete() {
    let (sim, m, a, b) = two_collectives(None);
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let from0 = completions(&m, 0);
    let from5 = completions(&m, 5);
    assert_eq!(from0.len(), 1, "{:?}", reports(&m, 0));
    assert_eq!(from5.len(), 1, "{:?}", reports(&m, 5));
    let (t_bcast, t_mob) = (from0[0].0, from5[0].0);
    assert_ne!(t_bcast, t_mob, "two initiators drew the same transfer id");
    assert_eq!((from0[0].1, from0[0].2), (N, 0));
    assert_eq!((from5[0].1, from5[0].2), (N, 0));
    for i in 0..N {
        // Every member took part in both, each knowing who started it.
        let mut s = started(&m, i);
        s.sort();
        let mut want = vec![(t_bcast, NodeId(0)), (t_mob, NodeId(5))];
        want.sort();
        assert_eq!(s, want, "node {i}");
        if i != 0 {
            assert_eq!(
                reassembled(&sim, i, t_bcast),
                a.to_vec(),
                "broadcast at node {i}"
            );
        }
        if i != 5 {
            assert_eq!(
                reassembled(&sim, i, t_mob),
                b.to_vec(),
                "multicast at node {i}"
            );
        }
        // Everyone left (the hosts finished) once both had ended.
        assert!(
            m.nodes[i as usize].finished_at_s.is_some(),
            "node {i} did not leave"
        );
    }
    assert_eq!(m.finished, N as usize);
}

#[test]
fn a_group_run_replays_bit_for_bit() {
    let (l1, l2) = (MemoryLog::new(), MemoryLog::new());
    let (_, m1, _, _) = two_collectives(Some(l1.clone()));
    let (_, m2, _, _) = two_collectives(Some(l2.clone()));
    assert_eq!(m1.events, m2.events);
    assert_eq!(m1.end_time_s, m2.end_time_s);
    assert!(!l1.contents().is_empty());
    assert_eq!(l1.contents(), l2.contents());
}

#[test]
fn back_to_back_collectives_from_every_member_all_complete() {
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 3, |_| {}).unwrap();
    let payload = data(10_000, 9);
    // Each member broadcasts three times, the next as soon as the application asks (every
    // 10 ms), so up to 24 collectives overlap.
    for k in 0..3 {
        for i in 0..N {
            let at = 0.01 * f64::from(k * N + i);
            sim.input_at(
                NodeId(i),
                at,
                start_input(broadcast_spec(NodeId(i)), payload.clone(), None),
            )
            .unwrap();
        }
    }
    for i in 0..N {
        sim.input_at(NodeId(i), 20.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let mut all = Vec::new();
    for i in 0..N {
        let c = completions(&m, i);
        assert_eq!(c.len(), 3, "node {i}: {c:?}");
        for (t, finished, failed) in c {
            assert_eq!((finished, failed), (N, 0));
            for j in 0..N {
                if j != i {
                    assert_eq!(reassembled(&sim, j, t), payload.to_vec(), "{t} at {j}");
                }
            }
            all.push(t);
        }
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 24, "transfer ids collided");
}

#[test]
fn a_silent_member_is_declared_failed_and_the_multicast_completes_without_it() {
    // No notices from the engine: the hosts' heartbeats must find the failure.
    let config = SimConfig {
        record_deliveries: true,
        failure_notice: FailureNotice {
            peers: NotifyPeers::Connected,
            delay_s: 1e9,
        },
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 11, |c| {
        c.heartbeat = Some(Duration::from_millis(200));
        c.silent_after = Duration::from_secs(1);
    })
    .unwrap();
    let b = data(4_000_000, 4);
    sim.input_at(NodeId(0), 0.0, start_input(mob_spec(&b), b.clone(), None))
        .unwrap();
    sim.fail_node_at(NodeId(6), 0.3).unwrap();
    for i in 0..N {
        sim.input_at(NodeId(i), 60.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    let c = completions(&m, 0);
    assert_eq!(c.len(), 1, "{:?}", reports(&m, 0));
    assert_eq!((c[0].1, c[0].2), (N - 1, 1));
    for i in 1..N {
        if i == 6 {
            continue;
        }
        // Declared by silence (1 s after its last frame), long before the engine's notice.
        let down = m.nodes[i as usize]
            .reports
            .iter()
            .find(|r| r.report == Report::PeerDown { peer: NodeId(6) })
            .unwrap_or_else(|| panic!("node {i} never declared node 6 failed"));
        assert!(
            down.at_s > 1.3 && down.at_s < 1.6,
            "node {i} at {}",
            down.at_s
        );
        assert_eq!(reassembled(&sim, i, c[0].0), b.to_vec(), "node {i}");
    }
}

#[test]
fn a_spec_a_member_cannot_build_is_refused_and_nobody_starts() {
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 5, |_| {}).unwrap();
    // A tree over 6 of the 8 members: every member refuses it (it does not span the group).
    let tree = binomial_all(6, NodeId(0)).unwrap();
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&tree),
        segment_bytes: 1000,
        max_frame_payload: 1000,
    };
    sim.input_at(NodeId(0), 0.0, start_input(spec, data(5000, 1), None))
        .unwrap();
    for i in 0..N {
        sim.input_at(NodeId(i), 5.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    assert!(reports(&m, 0)
        .iter()
        .any(|r| matches!(r, Report::CollectiveRefused { .. })));
    assert_eq!(m.totals.app_bytes_delivered, 0);
    assert_eq!(m.finished, N as usize);
}

/// A member killed mid-collective and restarted with a fresh host is taken back into the
/// running collective by its initiator (announced again, rejoining) and finishes it.
fn restart_run(spec: impl Fn(&Bytes) -> CollectiveSpec) -> (Simulation, Metrics, Bytes) {
    let config = SimConfig {
        record_deliveries: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 13, |c| {
        c.heartbeat = Some(Duration::from_millis(200));
        c.silent_after = Duration::from_secs(1);
    })
    .unwrap();
    let b = data(4_000_000, 6);
    sim.input_at(NodeId(0), 0.0, start_input(spec(&b), b.clone(), None))
        .unwrap();
    sim.fail_node_at(NodeId(6), 0.3).unwrap();
    let members = windrose_sim::group::members_of(&platform());
    let mut c = windrose_proto::host::HostConfig::new(NodeId(6), members, 13);
    c.heartbeat = Some(Duration::from_millis(200));
    c.silent_after = Duration::from_secs(1);
    sim.restart_node_at(Box::new(windrose_proto::host::Host::new(c).unwrap()), 0.6)
        .unwrap();
    for i in 0..N {
        sim.input_at(NodeId(i), 60.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    (sim, m, b)
}

#[test]
fn a_restarted_member_rejoins_a_running_mob_multicast_and_finishes_it() {
    let (sim, m, b) = restart_run(mob_spec);
    let c = completions(&m, 0);
    assert_eq!(c.len(), 1, "{:?}", reports(&m, 0));
    assert_eq!((c[0].1, c[0].2), (N, 0), "{:?}", reports(&m, 0));
    assert!(reports(&m, 0).contains(&Report::PeerRejoined {
        peer: NodeId(6),
        transfer: c[0].0
    }));
    for i in 1..N {
        assert_eq!(reassembled(&sim, i, c[0].0), b.to_vec(), "node {i}");
    }
}

#[test]
fn a_restarted_member_rejoins_a_running_broadcast_and_finishes_it() {
    let (sim, m, b) = restart_run(|_| broadcast_spec(NodeId(0)));
    let c = completions(&m, 0);
    assert_eq!(c.len(), 1, "{:?}", reports(&m, 0));
    assert_eq!((c[0].1, c[0].2), (N, 0), "{:?}", reports(&m, 0));
    for i in 1..N {
        assert_eq!(reassembled(&sim, i, c[0].0), b.to_vec(), "node {i}");
    }
}

/// The hosts' weather service in the simulator: every member probes every other every 500 ms,
/// and when the WAN's one-way latency steps from 10 ms to 40 ms at t = 10 s each member's
/// round-trip forecast for the other cluster follows within a few probes.
#[test]
fn each_host_forecasts_its_links_round_trips_and_follows_a_latency_step() {
    use windrose_proto::probe::ProbeConfig;
    use windrose_sim::network::Change;
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 3, |c| {
        c.probe = Some(ProbeConfig {
            period: Duration::from_millis(500),
            rounds: u32::MAX,
        })
    })
    .unwrap();
    for (from, to) in [(0, 1), (1, 0)] {
        sim.schedule_change(
            10.0,
            Change::WanLatency {
                from: windrose_model::ClusterId(from),
                to: windrose_model::ClusterId(to),
                latency_s: 0.04,
            },
        )
        .unwrap();
    }
    for n in 0..N {
        sim.input_at(NodeId(n), 20.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    for node in [0u32, 6] {
        let peer = NodeId(if node < 4 { 5 } else { 1 });
        let of = |want_forecast: bool, from: f64, to: f64| -> Vec<f64> {
            m.nodes[node as usize]
                .reports
                .iter()
                .filter(|r| r.at_s >= from && r.at_s < to)
                .filter_map(|r| match r.report {
                    Report::LinkForecast { peer: p, rtt, .. } if p == peer && want_forecast => {
                        Some(rtt.as_secs_f64())
                    }
                    Report::RoundTrip { peer: p, rtt } if p == peer && !want_forecast => {
                        Some(rtt.as_secs_f64())
                    }
                    _ => None,
                })
                .collect()
        };
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (before, after) = (median(of(false, 5.0, 10.0)), median(of(false, 13.0, 20.0)));
        assert!(
            (0.019..0.022).contains(&before),
            "node {node}: {before} s before the step"
        );
        assert!(
            (0.079..0.082).contains(&after),
            "node {node}: {after} s after it"
        );
        // Steady: the forecast is the link's round trip.
        for f in of(true, 5.0, 10.0) {
            assert!(
                (f - before).abs() <= 0.02 * before,
                "node {node}: forecast {f} s, link {before} s"
            );
        }
        // After the step, from the third probe on (the change-point rule needs two samples
        // beyond the band), the forecast is the new round trip.
        let late = of(true, 11.6, 20.0);
        assert!(
            late.len() >= 10,
            "node {node}: {} forecasts after the step",
            late.len()
        );
        for f in late {
            assert!(
                (f - after).abs() <= 0.05 * after,
                "node {node}: forecast {f} s, link {after} s"
            );
        }
    }
}

/// The weights of seed 004's 24 processes (data/scenarios/seed004-six-sites.toml): one-way
/// latency in seconds, 0 inside a site and Table 1's between sites.
fn six_site_latencies(platform: &Platform) -> Vec<Vec<f64>> {
    let n = platform.node_count();
    (0..n as u32)
        .map(|a| {
            (0..n as u32)
                .map(|b| {
                    let (ca, cb) = (
                        platform.cluster_of(NodeId(a)),
                        platform.cluster_of(NodeId(b)),
                    );
                    match () {
                        _ if a == b => 0.0,
                        _ if ca == cb => platform.intra_latency_s(ca),
                        _ => platform.wan_latency_s(ca, cb),
                    }
                })
                .collect()
        })
        .collect()
}

/// Kruskal's minimum spanning tree (petgraph) on GHS's order `(w, min id, max id)`:
/// `(min id, max id) -> w`.
fn kruskal(spec: &MstSpec, n: usize) -> BTreeMap<(u32, u32), f64> {
    use petgraph::data::Element;
    let mut g = petgraph::graph::UnGraph::<(), (f64, u32, u32)>::new_undirected();
    let nodes: Vec<_> = (0..n).map(|_| g.add_node(())).collect();
    for &(a, b, w) in &spec.edges {
        let (lo, hi) = (a.0.min(b.0), a.0.max(b.0));
        g.add_edge(nodes[a.index()], nodes[b.index()], (w, lo, hi));
    }
    petgraph::algo::min_spanning_tree(&g)
        .filter_map(|e| match e {
            Element::Edge {
                weight: (w, lo, hi),
                ..
            } => Some(((lo, hi), w)),
            Element::Node { .. } => None,
        })
        .collect()
}

/// Seed 004's 24 processes build the MST of their six-site latencies (GHS, `mst` collective),
/// started by process 12 through the session: every member delivers its tree edges once, all
/// of them together are Kruskal's tree with each edge known at both ends, every member knows
/// the 24 nodes and the same total (758.6 ms), and the initiator counts 24 finished members.
#[test]
fn twenty_four_members_build_the_six_site_mst_started_by_one_member() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/scenarios/seed004-six-sites.toml");
    let platform = windrose_model::platform::load_platform(&path).unwrap();
    let n = platform.node_count();
    assert_eq!(n, 24);
    let spec = MstSpec::complete(WeightMetric::LatencyS, &six_site_latencies(&platform)).unwrap();
    assert_eq!(spec.edges.len(), 276);
    let want = kruskal(&spec, n);
    assert_eq!(want.len(), 23);
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform, config, 4, |_| {}).unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    sim.input_at(
        NodeId(12),
        0.0,
        start_input(CollectiveSpec::Mst(spec), Bytes::new(), None),
    )
    .unwrap();
    for i in 0..n as u32 {
        sim.input_at(NodeId(i), 120.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let c = completions(&m, 12);
    assert_eq!(c.len(), 1, "{:?}", reports(&m, 12));
    let (t, finished, failed) = c[0];
    assert_eq!((finished, failed), (n as u32, 0));
    let mut got: BTreeMap<(u32, u32), (f64, u32)> = BTreeMap::new();
    let mut totals = BTreeSet::new();
    for v in 0..n as u32 {
        let d = sim.delivered_of(NodeId(v), t);
        assert_eq!(d.len(), 1, "node {v} delivered {} times", d.len());
        assert_eq!(d[0].0, 0);
        let r = MstResult::parse(&d[0].1).unwrap();
        assert_eq!(r.nodes, n as u32, "node {v}");
        totals.insert(r.total_weight.to_bits());
        for (to, w) in r.branches {
            let e = got.entry((v.min(to.0), v.max(to.0))).or_insert((w, 0));
            assert_eq!(e.0.to_bits(), w.to_bits());
            e.1 += 1;
        }
        assert!(
            m.nodes[v as usize].finished_at_s.is_some(),
            "node {v} did not leave"
        );
    }
    assert_eq!(totals.len(), 1, "the members disagree on the total");
    let total = f64::from_bits(*totals.first().unwrap());
    assert!((total - 0.7586).abs() < 1e-12, "{total}");
    assert!(got.values().all(|&(_, ends)| ends == 2), "{got:?}");
    let got: BTreeMap<(u32, u32), f64> = got.into_iter().map(|(k, (w, _))| (k, w)).collect();
    assert_eq!(got, want);
    // GHS frames by kind, from the event log (printed with --nocapture).
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8(log.contents()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_ne!(v["ev"], "drop", "the simulator dropped a message: {line}");
        let kind = v["msg"].as_str().unwrap_or("");
        if v["ev"] == "send" && kind.starts_with("ghs_") {
            *by_kind.entry(kind.to_string()).or_default() += 1;
        }
    }
    let done_at = m.completion(NodeId(12)).unwrap().at_s;
    eprintln!(
        "24 members: {} GHS frames {by_kind:?}; complete at the initiator at {done_at:.3} s",
        by_kind.values().sum::<u64>()
    );
    assert_eq!(by_kind["ghs_done"], n as u64 - 2);
}

/// A seeded random connected graph on `n` members: a random spanning tree plus each other pair
/// with probability 0.4, weights from a few values (ties) or spread.
fn random_mst_spec(rng: &mut ChaCha8Rng, n: u32) -> MstSpec {
    let weight = |rng: &mut ChaCha8Rng| {
        if rng.gen_bool(0.5) {
            f64::from(rng.gen_range(0..3u32)) * 0.5
        } else {
            rng.gen::<f64>() * 0.1
        }
    };
    let mut edges = Vec::new();
    for v in 1..n {
        let parent = rng.gen_range(0..v);
        edges.push((NodeId(parent), NodeId(v), weight(rng)));
    }
    for a in 0..n {
        for b in a + 1..n {
            let known = edges
                .iter()
                .any(|&(x, y, _)| (x.0, y.0) == (a, b) || (x.0, y.0) == (b, a));
            if !known && rng.gen_bool(0.4) {
                edges.push((NodeId(a), NodeId(b), weight(rng)));
            }
        }
    }
    MstSpec {
        metric: WeightMetric::LatencyS,
        edges,
        test_window: [1, 2, DEFAULT_TEST_WINDOW][rng.gen_range(0..3)],
    }
}

/// Chaos for the `mst` collective (which takes no member back): 40 seeded runs on the
/// 8-member platform, each on its own random graph, member 0 starting it through its host, and
/// in three runs of four one member failing at a random time, during the build or after it. No
/// input is ever refused; member 0 reports the run complete exactly once with every member
/// counted; every member that finished holds exactly its part of Kruskal's tree with the same
/// total as the others; a member that did not finish either failed or aborted on hearing of
/// the failure; and a run without a failure finishes everywhere.
#[test]
fn mst_runs_with_a_member_failing_at_random_end_consistently() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x006d_7374);
    let mut aborted_runs = 0;
    for run in 0..40u64 {
        let spec = random_mst_spec(&mut rng, N);
        let want = kruskal(&spec, N as usize);
        let victim = (rng.gen_ratio(3, 4))
            .then(|| (NodeId(rng.gen_range(1..N)), rng.gen_range(0.0..0.4f64)));
        let config = SimConfig {
            record_deliveries: true,
            strict: true,
            ..SimConfig::default()
        };
        let mut sim = group(platform(), config, run, |_| {}).unwrap();
        sim.input_at(
            NodeId(0),
            0.0,
            start_input(CollectiveSpec::Mst(spec), Bytes::new(), None),
        )
        .unwrap();
        if let Some((v, at)) = victim {
            sim.fail_node_at(v, at).unwrap();
        }
        for i in 0..N {
            if victim.map(|(v, _)| v) != Some(NodeId(i)) {
                sim.input_at(NodeId(i), 60.0, leave_input()).unwrap();
            }
        }
        let m = sim.run().unwrap();
        let ctx = format!("run {run}, victim {victim:?}");
        assert!(m.errors.is_empty(), "{ctx}: {:?}", m.errors);
        let c = completions(&m, 0);
        assert_eq!(c.len(), 1, "{ctx}: {:?}", reports(&m, 0));
        let (t, finished, failed) = c[0];
        assert_eq!(finished + failed, N, "{ctx}");
        let mut totals = BTreeSet::new();
        let mut done = 0;
        for v in 0..N {
            let d = sim.delivered_of(NodeId(v), t);
            let ended: Vec<bool> = reports(&m, v)
                .into_iter()
                .filter_map(|r| match r {
                    Report::CollectiveEnded { transfer, finished } if transfer == t => {
                        Some(finished)
                    }
                    _ => None,
                })
                .collect();
            if d.is_empty() {
                assert!(
                    victim.is_some() && ended != [true],
                    "{ctx}: node {v} neither delivered nor failed: {ended:?}"
                );
                continue;
            }
            assert_eq!(d.len(), 1, "{ctx}: node {v}");
            if victim.map(|(x, _)| x) != Some(NodeId(v)) {
                assert_eq!(ended, [true], "{ctx}: node {v}");
            }
            done += 1;
            let r = MstResult::parse(&d[0].1).unwrap();
            assert_eq!(r.nodes, N, "{ctx}: node {v}");
            totals.insert(r.total_weight.to_bits());
            let mine: BTreeMap<(u32, u32), f64> = r
                .branches
                .iter()
                .map(|&(to, w)| ((v.min(to.0), v.max(to.0)), w))
                .collect();
            let expected: BTreeMap<(u32, u32), f64> = want
                .iter()
                .filter(|((a, b), _)| *a == v || *b == v)
                .map(|(&k, &w)| (k, w))
                .collect();
            assert_eq!(mine, expected, "{ctx}: node {v}");
        }
        assert!(totals.len() <= 1, "{ctx}: totals differ");
        assert!(done >= finished, "{ctx}");
        if victim.is_none() {
            assert_eq!((finished, failed, done), (N, 0, N), "{ctx}");
        } else if done < N {
            aborted_runs += 1;
        }
    }
    // The failures hit some builds in flight (the seed makes this fixed).
    eprintln!("mst chaos: {aborted_runs} of 40 runs lost members to a failure mid-build");
    assert!(aborted_runs > 0);
}
