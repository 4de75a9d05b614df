//! Long-lived groups over TCP: one `Host` per member driven by `host_driver`, collectives
//! started by different members at once, the same delivered bytes as the simulator's hosts.

mod common;

use bytes::Bytes;
use common::{leave_all, pump, real_frames, sim_frames, spawn_group, spawn_member, Member, LIMIT};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_net::bootstrap::Membership;
use windrose_net::group::Group;
use windrose_net::host_driver::GroupConfig;
use windrose_net::piece_file::FileShelf;
use windrose_net::random_payload;
use windrose_net::trees::magpie_spec;
use windrose_proto::app::Application;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams, TreeSpec};
use windrose_proto::ghs::{MstResult, MstSpec, WeightMetric};
use windrose_proto::host::AppRequest;
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::{Blake3Verifier, Manifest, PieceMsg, PieceVerifier};
use windrose_proto::probe::ProbeMsg;
use windrose_proto::{ComputeTask, Report, TransferId};
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::group::{group as sim_group, start_input};
use windrose_trees::static_trees::binomial_all;

const N: usize = 4;

fn broadcast(root: u32) -> CollectiveSpec {
    CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&binomial_all(N, NodeId(root)).unwrap()),
        segment_bytes: 64 << 10,
        max_frame_payload: 64 << 10,
    }
}

fn mob(data: &Bytes) -> CollectiveSpec {
    CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Mob,
        params: MulticastParams::Mob(MobConfig::default()),
        manifest: ManifestSpec::of(&Manifest::build(data, 64 << 10).unwrap()),
    }
}

async fn start_group(name: &str) -> (Arc<Group>, Vec<Member>) {
    spawn_group(name, N, 2, |_| {}).await
}

async fn start_group_with(
    name: &str,
    tune: impl Fn(&mut GroupConfig),
) -> (Arc<Group>, Vec<Member>) {
    spawn_group(name, N, 2, tune).await
}

async fn start_group_of(
    name: &str,
    n: usize,
    tune: impl Fn(&mut GroupConfig),
) -> (Arc<Group>, Vec<Member>) {
    spawn_group(name, n, 2, tune).await
}

fn completions(m: &Member) -> Vec<(TransferId, u32, u32)> {
    m.completions()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_and_a_mob_multicast_from_two_members_at_once() {
    let (_, mut members) = start_group("two-at-once").await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let a = random_payload(3_000_000, 1);
    let b = random_payload(5_000_000, 2);
    assert!(members[0].handle.request(AppRequest::StartCollective {
        spec: broadcast(0),
        data: a.clone(),
        transfer: None,
    }));
    assert!(members[3].handle.request(AppRequest::StartCollective {
        spec: mob(&b),
        data: b.clone(),
        transfer: None,
    }));
    pump(&mut members, |ms| {
        completions(&ms[0]).len() == 1 && completions(&ms[3]).len() == 1
    })
    .await;
    let (ta, fa, xa) = completions(&members[0])[0];
    let (tb, fb, xb) = completions(&members[3])[0];
    assert_ne!(ta, tb);
    assert_eq!((fa, xa), (N as u32, 0));
    assert_eq!((fb, xb), (N as u32, 0));
    for (i, m) in members.iter().enumerate() {
        if i != 0 {
            assert!(
                m.got.get(&ta).map(|v| v[..] == a[..]).unwrap_or(false),
                "broadcast at {i}"
            );
        }
        if i != 3 {
            assert!(
                m.got.get(&tb).map(|v| v[..] == b[..]).unwrap_or(false),
                "multicast at {i}"
            );
        }
    }
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_broadcasts_back_to_back_over_one_group() {
    let (_, mut members) = start_group("back-to-back").await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let payload = random_payload(1024, 3);
    const K: usize = 48; // 12 from each member
    for k in 0..K {
        let root = k % N;
        assert!(members[root].handle.request(AppRequest::StartCollective {
            spec: broadcast(root as u32),
            data: payload.clone(),
            transfer: None,
        }));
    }
    pump(&mut members, |ms| {
        ms.iter().map(|m| completions(m).len()).sum::<usize>() == K
    })
    .await;
    for m in &members {
        for (t, finished, failed) in completions(m) {
            assert_eq!((finished, failed), (N as u32, 0), "{t}");
        }
    }
    // Every member received every broadcast it did not start.
    for m in &members {
        assert_eq!(m.got.len(), K - K / N);
        assert!(m.got.values().all(|v| v[..] == payload[..]));
    }
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_runs_the_same_group_with_the_same_bytes_and_frames() {
    // No heartbeats and no probes: what remains is the session and the protocols, which move
    // the same frames whatever the timing (a tree broadcast and a MagPIe multicast).
    let quiet = |c: &mut GroupConfig| {
        c.heartbeat = None;
        c.probe_period = None;
    };
    let (group, mut members) = start_group_with("sim-vs-real", quiet).await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let a = random_payload(2_000_000, 11);
    let b = random_payload(3_000_000, 12);
    let spec_a = broadcast(0);
    let spec_b = CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Magpie,
        params: MulticastParams::of(&magpie_spec(&group, NodeId(3)).unwrap()),
        manifest: ManifestSpec::of(&Manifest::build(&b, 64 << 10).unwrap()),
    };
    let starts = [(0u32, spec_a, a.clone()), (3u32, spec_b, b.clone())];
    for (who, spec, data) in &starts {
        assert!(members[*who as usize]
            .handle
            .request(AppRequest::StartCollective {
                spec: spec.clone(),
                data: data.clone(),
                transfer: None,
            }));
    }
    pump(&mut members, |ms| {
        completions(&ms[0]).len() == 1 && completions(&ms[3]).len() == 1
    })
    .await;
    let real = real_frames(&members);
    let real_got: Vec<BTreeMap<TransferId, Vec<u8>>> =
        members.iter().map(|m| m.got.clone()).collect();
    leave_all(members).await;

    let platform = Platform::builder()
        .cluster(ClusterSpec::uniform(N / 2, 1e8, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(N / 2, 1e8, 1e9, 1e-4))
        .wan_all(1e7, 5e-3)
        .build()
        .unwrap();
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = sim_group(platform, config, 5, |c| c.heartbeat = None).unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    for (who, spec, data) in starts {
        sim.input_at(NodeId(who), 0.0, start_input(spec, data, None))
            .unwrap();
    }
    let metrics = sim.run().unwrap();
    assert!(metrics.errors.is_empty(), "{:?}", metrics.errors);
    let simulated = sim_frames(&log);
    assert!(simulated.keys().any(|k| k.2 == "session"));
    assert_eq!(simulated, real);
    for (i, got) in real_got.iter().enumerate() {
        for (&t, bytes) in got {
            let sim_bytes: Vec<u8> = sim
                .delivered_of(NodeId(i as u32), t)
                .into_iter()
                .flat_map(|(_, d)| d.to_vec())
                .collect();
            assert_eq!(&sim_bytes, bytes, "node {i}, transfer {t}");
        }
        assert_eq!(got.len(), if i == 0 || i == 3 { 1 } else { 2 }, "node {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pair_gets_a_probe_lane_and_the_prober_measures_over_it() {
    let fast = |c: &mut GroupConfig| c.probe_period = Some(Duration::from_millis(20));
    let (_, mut members) = start_group_with("lanes", fast).await;
    // Five rounds of probes after every lane is up.
    pump(&mut members, |ms| ms.iter().all(|m| m.lanes == N - 1)).await;
    let before: Vec<usize> = members.iter().map(|m| m.reports.len()).collect();
    pump(&mut members, |ms| {
        ms.iter().zip(&before).all(|(m, &b)| {
            let rtts = m.reports[b..]
                .iter()
                .filter(|r| matches!(r, Report::RoundTrip { .. }))
                .count();
            rtts >= 5 * (N - 1)
        })
    })
    .await;
    // The pings went over the lanes, not the data connections.
    for (i, m) in members.iter().enumerate() {
        let probes: u64 = m
            .handle
            .frames_sent()
            .iter()
            .filter(|c| matches!(c.kind, ProbeMsg::PING | ProbeMsg::PONG))
            .map(|c| c.frames)
            .sum();
        let on_lanes = m.handle.lane_frames_sent();
        assert!(
            on_lanes > 0 && on_lanes <= probes,
            "member {i}: {on_lanes} of {probes}"
        );
    }
    leave_all(members).await;
}

/// An application that counts what the driver and the machines hand it, checking pieces with
/// BLAKE3 underneath.
#[derive(Debug, Default)]
struct CountingApp {
    delivered: AtomicU64,
    verified: Arc<AtomicU64>,
}

#[derive(Debug)]
struct CountingVerifier(Arc<AtomicU64>);

impl PieceVerifier for CountingVerifier {
    fn verify(&self, manifest: &Manifest, piece: u32, data: &Bytes) -> bool {
        self.0.fetch_add(1, Ordering::Relaxed);
        Blake3Verifier.verify(manifest, piece, data)
    }
}

impl Application for CountingApp {
    fn deliver(&self, _: TransferId, _: u64, data: &Bytes) {
        self.delivered
            .fetch_add(data.len() as u64, Ordering::Relaxed);
    }

    fn compute(&self, task: &ComputeTask) -> String {
        format!("{} bytes", task.len)
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Arc::new(CountingVerifier(self.verified.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_and_piece_checks_go_through_the_members_application() {
    let apps: Vec<Arc<CountingApp>> = (0..N).map(|_| Arc::default()).collect();
    let for_config = apps.clone();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (_, mut members) = start_group_with("own-app", move |c| {
        let i = next.fetch_add(1, Ordering::Relaxed);
        c.app = for_config[i].clone();
    })
    .await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let data = random_payload(1_000_000, 9);
    let pieces = Manifest::build(&data, 64 << 10).unwrap().piece_count();
    assert!(members[1].handle.request(AppRequest::StartCollective {
        spec: mob(&data),
        data: data.clone(),
        transfer: None,
    }));
    pump(&mut members, |ms| completions(&ms[1]).len() == 1).await;
    leave_all(members).await;
    for (i, app) in apps.iter().enumerate() {
        if i == 1 {
            continue; // the root holds the data: nothing to receive or check
        }
        assert_eq!(
            app.delivered.load(Ordering::Relaxed),
            data.len() as u64,
            "node {i}"
        );
        assert!(
            app.verified.load(Ordering::Relaxed) >= u64::from(pieces),
            "node {i} checked {} pieces of {pieces}",
            app.verified.load(Ordering::Relaxed)
        );
    }
}

/// Seed 004's Table 1 (one-way latencies between the six sites, ms).
const TABLE1_MS: [[f64; 6]; 6] = windrose_model::fixtures::SEED004_SITES_MS;

/// The six sites' sparse graph of windrose-proto's tests/ghs.rs: Table 1's MST edges and three
/// heavier edges closing cycles, on which GHS sends the same frames under every schedule
/// (checked there over 3,000 schedules), so a TCP run and a simulated one can be compared
/// frame for frame. Its MST: 1-4, 0-3, 3-5, 3-4, 1-2 (758.6 ms).
fn six_site_mst_spec() -> MstSpec {
    let t = |a: u32, b: u32| (NodeId(a), NodeId(b), TABLE1_MS[a as usize][b as usize]);
    MstSpec {
        metric: WeightMetric::LatencyS,
        edges: vec![
            t(1, 4),
            t(0, 3),
            t(3, 5),
            t(3, 4),
            t(1, 2),
            t(0, 5),
            t(2, 4),
            t(4, 5),
        ],
        // Classic GHS: its frames do not depend on the schedule on this graph (a wider window
        // makes some Tests' answers race their own).
        test_window: 1,
    }
}

/// A member's `MstResult`: its tree edges as (lo, hi) -> weight bits, the node count, the
/// total weight's bits.
type MstOf = (BTreeMap<(u32, u32), u64>, u32, u64);

/// Each member's delivered `MstResult` (bytes given by `delivered`).
fn mst_results(delivered: impl Fn(u32) -> Vec<u8>, n: u32) -> Vec<MstOf> {
    (0..n)
        .map(|v| {
            let r = MstResult::parse(&delivered(v)).unwrap_or_else(|e| panic!("node {v}: {e}"));
            let edges = r
                .branches
                .iter()
                .map(|&(to, w)| ((v.min(to.0), v.max(to.0)), w.to_bits()))
                .collect();
            (edges, r.nodes, r.total_weight.to_bits())
        })
        .collect()
}

/// The `mst` collective over TCP: six members on loopback, member 3 starts GHS on the six-site
/// graph through the session; every member delivers its tree edges (together Table 1's MST,
/// each edge at both ends, 758.6 ms), and the simulator's hosts, run on the same spec, deliver
/// the same results and send the same multiset of (from, to, kind) frames, session included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mst_collective_over_tcp_matches_the_simulator_frame_for_frame() {
    const M: usize = 6;
    let quiet = |c: &mut GroupConfig| {
        c.heartbeat = None;
        c.probe_period = None;
    };
    let (_, mut members) = start_group_of("mst", M, quiet).await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == M - 1)).await;
    let spec = CollectiveSpec::Mst(six_site_mst_spec());
    assert!(members[3].handle.request(AppRequest::StartCollective {
        spec: spec.clone(),
        data: Bytes::new(),
        transfer: None,
    }));
    pump(&mut members, |ms| completions(&ms[3]).len() == 1).await;
    let (t, finished, failed) = completions(&members[3])[0];
    assert_eq!((finished, failed), (M as u32, 0));
    let real = real_frames(&members);
    let real_results = mst_results(|v| members[v as usize].got[&t].clone(), M as u32);
    leave_all(members).await;

    // Every member: its part of Table 1's MST, the whole of it across the members.
    let want: BTreeMap<(u32, u32), u64> = [(1, 4), (0, 3), (3, 5), (3, 4), (1, 2)]
        .into_iter()
        .map(|(a, b)| ((a, b), TABLE1_MS[a as usize][b as usize].to_bits()))
        .collect();
    let mut ends: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for (v, (edges, nodes, total)) in real_results.iter().enumerate() {
        assert_eq!(*nodes, M as u32, "node {v}");
        assert!((f64::from_bits(*total) - 758.6).abs() < 1e-9, "node {v}");
        for (e, w) in edges {
            assert_eq!(
                want.get(e),
                Some(w),
                "node {v}: edge {e:?} is not in the MST"
            );
            *ends.entry(*e).or_default() += 1;
        }
    }
    assert_eq!(
        ends.keys().copied().collect::<Vec<_>>(),
        want.keys().copied().collect::<Vec<_>>()
    );
    assert!(ends.values().all(|&k| k == 2), "{ends:?}");

    // The simulator's hosts on six nodes (two clusters, as the loopback group).
    let platform = Platform::builder()
        .cluster(ClusterSpec::uniform(M / 2, 1e8, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(M / 2, 1e8, 1e9, 1e-4))
        .wan_all(1e7, 5e-3)
        .build()
        .unwrap();
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = sim_group(platform, config, 5, |c| c.heartbeat = None).unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    sim.input_at(NodeId(3), 0.0, start_input(spec, Bytes::new(), None))
        .unwrap();
    let metrics = sim.run().unwrap();
    assert!(metrics.errors.is_empty(), "{:?}", metrics.errors);
    let simulated = sim_frames(&log);
    let sim_results = mst_results(
        |v| {
            let d = sim.delivered_of(NodeId(v), t);
            assert_eq!(d.len(), 1, "node {v}");
            d[0].1.to_vec()
        },
        M as u32,
    );
    assert_eq!(sim_results, real_results);
    let ghs: u64 = real
        .iter()
        .filter(|(k, _)| k.2.starts_with("ghs_"))
        .map(|(_, c)| c.0)
        .sum();
    assert_eq!(ghs, 52, "{real:?}");
    assert!(simulated.keys().any(|k| k.2 == "session"));
    assert_eq!(simulated, real);
}

/// A member's application for a sort: its own records, handed to the Host when it builds the
/// member's machine.
#[derive(Debug)]
struct SortShare(Bytes);

impl Application for SortShare {
    fn compute(&self, task: &ComputeTask) -> String {
        format!("{} bytes", task.len)
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Arc::new(Blake3Verifier)
    }

    fn local_input(&self, _: TransferId, spec: &CollectiveSpec) -> Bytes {
        match spec {
            CollectiveSpec::HeteroSort(_) => self.0.clone(),
            _ => Bytes::new(),
        }
    }
}

/// HeteroSort over TCP on a 2 x 2 torus: every member sorts its own records with the others
/// and ends with a contiguous range; the cycles do not depend on timing, so the simulator's
/// hosts deliver the very same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heterosort_over_tcp_sorts_every_members_records_like_the_simulator() {
    use windrose_proto::heterosort::{HsortSpec, Slicing};
    const REC: usize = 100;
    let shares: Vec<Bytes> = (0..N)
        .map(|i| random_payload(REC * (50 + 30 * i), 40 + i as u64))
        .collect();
    let spec = CollectiveSpec::HeteroSort(HsortSpec {
        rows: 2,
        cols: 2,
        record_len: REC as u32,
        slicing: Slicing::Speed,
        speeds: vec![1.0, 2.0, 4.0, 1.0],
        backups: 1,
        compress: windrose_proto::sort_zip::Compress::None,
    });
    let for_config = shares.clone();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (_, mut members) = start_group_with("hsort", move |c| {
        let i = next.fetch_add(1, Ordering::Relaxed);
        c.app = Arc::new(SortShare(for_config[i].clone()));
    })
    .await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    assert!(members[2].handle.request(AppRequest::StartCollective {
        spec: spec.clone(),
        data: Bytes::new(),
        transfer: None,
    }));
    pump(&mut members, |ms| completions(&ms[2]).len() == 1).await;
    let (t, finished, failed) = completions(&members[2])[0];
    assert_eq!((finished, failed), (N as u32, 0));
    let real: Vec<Vec<u8>> = members.iter().map(|m| m.got[&t].clone()).collect();
    leave_all(members).await;
    let mut want: Vec<&[u8]> = shares.iter().flat_map(|s| s.chunks(REC)).collect();
    want.sort_unstable();
    let got: Vec<&[u8]> = real.iter().flat_map(|s| s.chunks(REC)).collect();
    assert_eq!(
        got, want,
        "the concatenation in snake order is the sorted input"
    );

    let platform = Platform::builder()
        .cluster(ClusterSpec::uniform(N / 2, 1e8, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(N / 2, 1e8, 1e9, 1e-4))
        .wan_all(1e7, 5e-3)
        .build()
        .unwrap();
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = sim_group(platform, config, 5, |c| {
        c.heartbeat = None;
        c.app = Arc::new(SortShare(shares[c.me.index()].clone()));
    })
    .unwrap();
    sim.input_at(NodeId(2), 0.0, start_input(spec, Bytes::new(), None))
        .unwrap();
    let metrics = sim.run().unwrap();
    assert!(metrics.errors.is_empty(), "{:?}", metrics.errors);
    for (v, bytes) in real.iter().enumerate() {
        let d = sim.delivered_of(NodeId(v as u32), t);
        assert_eq!(d.len(), 1, "node {v}");
        assert_eq!(
            &d[0].1[..],
            &bytes[..],
            "node {v}: TCP and simulator differ"
        );
    }
}

/// An application whose first delivery blocks its member's whole event loop until released
/// (a member that stops reading: the run cannot end without it).
#[derive(Debug, Default)]
struct Stalling {
    stalled: std::sync::atomic::AtomicBool,
    gate: std::sync::Mutex<bool>,
    open: std::sync::Condvar,
}

impl Stalling {
    fn release(&self) {
        *self.gate.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.open.notify_all();
    }
}

/// Releases a [`Stalling`] member when dropped: a failing test must not leave a runtime
/// thread blocked (the test would hang instead of failing).
struct Release(Arc<Stalling>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Application for Stalling {
    fn deliver(&self, _: TransferId, _: u64, _: &Bytes) {
        self.stalled.store(true, Ordering::SeqCst);
        let mut open = self.gate.lock().unwrap();
        while !*open {
            open = self.open.wait(open).unwrap();
        }
    }

    fn compute(&self, task: &ComputeTask) -> String {
        format!("{} bytes", task.len)
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Arc::new(Blake3Verifier)
    }
}

/// Issue 21's defect 2 through the Host: the root's source file is modified while a
/// broadcast is held open by a relay that stopped reading. The root's watch calls the
/// collective off: it completes at the root with the relay and its child counted failed for
/// the file's change, and the child, still receiving, ends aborted, told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_changed_during_a_broadcast_calls_it_off_and_members_hear_why() {
    use std::os::unix::fs::FileExt;
    // A relay stops reading; its child cannot finish either.
    let tree = binomial_all(N, NodeId(0)).unwrap();
    let relay = (1..N)
        .find(|&i| !tree.children(NodeId::from(i)).is_empty())
        .unwrap();
    let below = tree.children(NodeId::from(relay))[0].index();
    let stalling = Arc::new(Stalling::default());
    let _release = Release(stalling.clone());
    let app = stalling.clone();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (_, mut members) = start_group_with("source-changed", move |c| {
        if next.fetch_add(1, Ordering::Relaxed) == relay {
            c.app = app.clone();
        }
    })
    .await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("source.bin");
    std::fs::write(&path, random_payload(32 << 20, 3)).unwrap();
    let (data, file) = windrose_net::SourceFile::map(&path).unwrap();
    let t = TransferId(77);
    assert!(members[0].handle.request(AppRequest::StartCollective {
        spec: broadcast(0),
        data,
        transfer: Some(t),
    }));
    let _watch = members[0].handle.watch_source(t, file);
    let deadline = std::time::Instant::now() + LIMIT;
    while !stalling.stalled.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the relay got nothing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"changed", 1000).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1000))
        .unwrap();
    pump(&mut members, |ms| {
        completions(&ms[0]).len() == 1
            && ms[below].reports.contains(&Report::CollectiveEnded {
                transfer: t,
                finished: false,
            })
    })
    .await;
    let (_, finished, failed) = completions(&members[0])[0];
    assert_eq!(finished + failed, N as u32);
    let at_root = &members[0].failed;
    for node in [relay, below] {
        assert!(
            at_root
                .iter()
                .any(|f| f.member == NodeId::from(node)
                    && f.why.contains("was modified during the run")),
            "node {node}: {at_root:?}"
        );
    }
    let at_below = &members[below].failed;
    assert!(
        at_below.iter().any(|f| f.member == NodeId::from(below)
            && f.why
                .starts_with("node 0 called the collective off: the source file")),
        "{at_below:?}"
    );
    stalling.release();
    leave_all(members).await;
}

/// Pieces `m` has sent to `to` so far.
fn pieces_sent_by(m: &Member, to: usize) -> u64 {
    m.handle
        .frames_sent()
        .into_iter()
        .filter(|c| c.to == NodeId::from(to) && c.kind == PieceMsg::PIECE)
        .map(|c| c.frames)
        .sum()
}

/// Issue 8's restart through the long-lived group: a MOB receiver's process dies mid-run
/// (its driver is dropped, its connections close) and a new one starts over the same folder.
/// The root takes it back, its piece file hands it every piece its earlier life verified, and
/// it fetches only the rest: fewer pieces than the whole reach it after the restart, it
/// resumes at least what it had delivered, and it ends with the root's bytes. Node 3 stops
/// reading (its first delivery blocks) so the run is still going when node 2 comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_mid_mob_resumes_from_its_piece_file() {
    let dir = tempfile::tempdir().unwrap();
    let shelf = Arc::new(FileShelf::new(dir.path()));
    let stalling = Arc::new(Stalling::default());
    let _release = Release(stalling.clone());
    let (app, on_disk) = (stalling.clone(), shelf.clone());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (group, mut members) = start_group_with("restart", move |c| {
        match next.fetch_add(1, Ordering::Relaxed) {
            2 => c.shelf = Some(on_disk.clone()),
            3 => c.app = app.clone(),
            _ => {}
        }
    })
    .await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let data = random_payload(8 << 20, 4);
    let pieces = Manifest::build(&data, 64 << 10).unwrap().piece_count() as u64;
    let t = TransferId(5);
    assert!(members[0].handle.request(AppRequest::StartCollective {
        spec: mob(&data),
        data: data.clone(),
        transfer: Some(t),
    }));
    pump(&mut members, |ms| {
        ms[2].got.get(&t).is_some_and(|g| g.len() >= 1 << 20)
    })
    .await;
    let had = members[2].got[&t].len() as u64;
    assert!(
        had < data.len() as u64,
        "node 2 finished before it was killed"
    );

    // Node 2 dies and starts again, with a fresh shelf over the same folder.
    let old = members.remove(2);
    old.task.abort();
    let _ = old.task.await;
    let shelf = Arc::new(FileShelf::new(dir.path()));
    let mut c = GroupConfig::new(Membership {
        group: group.clone(),
        me: NodeId(2),
    });
    c.seed = 5;
    c.shelf = Some(shelf.clone());
    let listener = windrose_net::bind(&group, NodeId(2)).await.unwrap();
    members.insert(2, spawn_member(listener, c));
    pump(&mut members, |ms| {
        ms[0].reports.contains(&Report::PeerRejoined {
            peer: NodeId(2),
            transfer: t,
        }) && ms[2]
            .reports
            .iter()
            .any(|r| matches!(r, Report::CollectiveStarted { .. }))
    })
    .await;
    stalling.release();
    // What each member sends node 2 once it has heard the earlier life is gone goes to the new
    // life. Before that, a member answers the earlier life's requests still queued at it
    // (node 3, whose loop was blocked, answers them all once released): those sends are
    // counted as sent but go to the closed connection, so they are not the new life's fetches.
    let heard: std::cell::RefCell<BTreeMap<usize, u64>> = Default::default();
    pump(&mut members, |ms| {
        let mut heard = heard.borrow_mut();
        for (i, m) in ms.iter().enumerate().filter(|(i, _)| *i != 2) {
            if !heard.contains_key(&i) && m.lost.iter().any(|(p, _)| *p == NodeId(2)) {
                heard.insert(i, pieces_sent_by(m, 2));
            }
        }
        completions(&ms[0]).len() == 1 && heard.len() == ms.len() - 1
    })
    .await;
    assert_eq!(completions(&members[0]), vec![(t, N as u32, 0)]);
    assert_eq!(members[2].got[&t], data.to_vec());
    let resumed = shelf.resumed_bytes(t);
    assert!(
        resumed >= had,
        "resumed {resumed} bytes, had delivered {had}"
    );
    let heard = heard.into_inner();
    let fetched: u64 = members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(i, m)| pieces_sent_by(m, 2) - heard[&i])
        .sum();
    assert!(
        fetched + resumed / (64 << 10) <= pieces,
        "fetched {fetched} pieces after the restart, resumed {resumed} bytes, of {pieces} pieces"
    );
    leave_all(members).await;
}

/// `--measurements` through the Host: after a broadcast, the root holds a send-throughput
/// series (MB/s > 0) for each of its tree children, each child a receive series from the
/// root, and round trips from the prober.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_records_its_links_throughput_and_round_trips() {
    use windrose_net::measure::Metric;
    let (_, mut members) = start_group("measured").await;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == N - 1)).await;
    let data = random_payload(4 << 20, 8);
    assert!(members[0].handle.request(AppRequest::StartCollective {
        spec: broadcast(0),
        data,
        transfer: None,
    }));
    pump(&mut members, |ms| completions(&ms[0]).len() == 1).await;
    let tree = binomial_all(N, NodeId(0)).unwrap();
    let has = |m: &Member, peer: NodeId, metric: Metric| {
        m.handle.measurements().series.iter().any(|s| {
            s.peer == peer && s.metric == metric && s.samples.iter().any(|x| x.value > 0.0)
        })
    };
    let deadline = std::time::Instant::now() + LIMIT;
    let children = tree.children(NodeId(0)).to_vec();
    while !(children.iter().all(|&c| {
        has(&members[0], c, Metric::SendMbS) && has(&members[c.index()], NodeId(0), Metric::RecvMbS)
    }) && (1..N).all(|p| has(&members[0], NodeId::from(p), Metric::RttMs)))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            members[0].handle.measurements()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(members[0]
        .handle
        .measurements()
        .series
        .iter()
        .all(|s| s.node == NodeId(0)));
    leave_all(members).await;
}
