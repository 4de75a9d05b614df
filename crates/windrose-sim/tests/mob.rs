//! MOB in the simulator: every node gets every byte on random platforms, each piece crosses
//! into each cluster exactly once (WAN payload = (clusters - 1) x data), runs replay bit for bit
//! from their seed, and (ignored by default) the Fig. 4 point measured against the max-flow bound.
//!
//! WAN payload is counted two ways that must agree: a wrapper around each node's machine adds
//! up the payload of every Piece frame it receives from another cluster (and the encoded size
//! of every frame from another cluster), and the network's per-link counters on the WAN links
//! must carry exactly those encoded bytes.

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::frame::encoded_len;
use windrose_proto::mob::{Mob, MobConfig, PieceChoice};
use windrose_proto::pieces::PieceMsg;
use windrose_proto::pieces::{ClusterLayout, Manifest, MemoVerifier, SwarmSetup};
use windrose_proto::{
    node_rng, Input, Message, Outputs, Protocol, ProtocolError, Status, Time, TransferId,
};
use windrose_sim::engine::{MemoryLog, RunLimits, SimConfig, Simulation};
use windrose_sim::metrics::Metrics;

/// Counts what a node receives from other clusters.
#[derive(Default)]
struct WanCount {
    piece_payload: AtomicU64,
    wire: AtomicU64,
    /// Nodes that took the stall fallback.
    fell_back: AtomicU64,
    /// Requests moved away from slow global peers ([`Mob::rerouted`]), over all nodes.
    rerouted: AtomicU64,
}

struct Counting {
    inner: Mob,
    clusters: Arc<Vec<ClusterId>>,
    count: Arc<WanCount>,
}

impl Protocol for Counting {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        if let Input::Message { from, message } = &input {
            let me = self.inner.node();
            if self.clusters[from.index()] != self.clusters[me.index()] {
                self.count
                    .wire
                    .fetch_add(encoded_len(message) as u64, Ordering::Relaxed);
                if let Message::Pieces(PieceMsg::Piece(p)) = message {
                    self.count
                        .piece_payload
                        .fetch_add(p.payload.len() as u64, Ordering::Relaxed);
                }
            }
        }
        let fell_back = self.inner.fell_back();
        let rerouted = self.inner.rerouted();
        let r = self.inner.handle(now, input, out);
        if !fell_back && self.inner.fell_back() {
            self.count.fell_back.fetch_add(1, Ordering::Relaxed);
        }
        self.count
            .rerouted
            .fetch_add(self.inner.rerouted() - rerouted, Ordering::Relaxed);
        r
    }

    fn status(&self) -> Status {
        self.inner.status()
    }
}

struct Run {
    sim: Simulation,
    metrics: Metrics,
    count: Arc<WanCount>,
    wall_s: f64,
}

fn layout_of(p: &Platform) -> ClusterLayout {
    ClusterLayout::new((0..p.node_count() as u32).map(|i| (NodeId(i), p.cluster_of(NodeId(i)))))
        .unwrap()
}

#[allow(clippy::too_many_arguments)]
fn run_mob(
    platform: Platform,
    root: NodeId,
    data: &Bytes,
    manifest: Arc<Manifest>,
    config: &MobConfig,
    seed: u64,
    log: Option<MemoryLog>,
    record: bool,
) -> Run {
    run_mob_failing(
        platform,
        root,
        data,
        manifest,
        config,
        seed,
        log,
        record,
        &[],
    )
}

#[allow(clippy::too_many_arguments)]
fn run_mob_failing(
    platform: Platform,
    root: NodeId,
    data: &Bytes,
    manifest: Arc<Manifest>,
    config: &MobConfig,
    seed: u64,
    log: Option<MemoryLog>,
    record: bool,
    failures: &[(NodeId, f64)],
) -> Run {
    let layout = Arc::new(layout_of(&platform));
    let clusters: Arc<Vec<ClusterId>> = Arc::new(
        (0..platform.node_count() as u32)
            .map(|i| platform.cluster_of(NodeId(i)))
            .collect(),
    );
    let setup = SwarmSetup {
        transfer: TransferId(2),
        root,
        manifest,
        layout: layout.clone(),
        verifier: Arc::new(MemoVerifier::new()),
        keeper: None,
    };
    let mut sim = Simulation::new(
        platform,
        SimConfig {
            record_deliveries: record,
            strict: true,
            limits: RunLimits {
                max_time_s: Some(1e7),
                max_events: Some(200_000_000),
            },
            ..SimConfig::default()
        },
    );
    if let Some(log) = log {
        sim.set_event_log(Box::new(log));
    }
    let count = Arc::new(WanCount::default());
    for n in layout.nodes() {
        let d = (n == root).then(|| data.clone());
        let inner = Mob::new(n, &setup, d, config.clone(), node_rng(seed, n)).unwrap();
        sim.add_node(Counting {
            inner,
            clusters: clusters.clone(),
            count: count.clone(),
        })
        .unwrap();
    }
    for &(n, at) in failures {
        sim.fail_node_at(n, at).unwrap();
    }
    let t = Instant::now();
    let metrics = sim.run().expect("the run ends");
    let wall_s = t.elapsed().as_secs_f64();
    Run {
        sim,
        metrics,
        count,
        wall_s,
    }
}

fn random_bytes(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

fn wan_link_bytes(run: &Run) -> f64 {
    let p = run.sim.network().platform();
    let c = p.cluster_count() as u32;
    let mut sum = 0.0;
    for a in 0..c {
        for b in (0..c).filter(|&b| b != a) {
            sum += run.metrics.link_bytes(LinkId::Wan {
                from: ClusterId(a),
                to: ClusterId(b),
            });
        }
    }
    sum
}

/// Every node finished and every non-root node got exactly the data, in order.
fn check_complete(run: &Run, root: NodeId, data: &Bytes) {
    assert!(
        run.metrics.all_finished(),
        "unfinished: {:?}",
        run.metrics.unfinished_nodes()
    );
    assert!(run.metrics.errors.is_empty(), "{:?}", run.metrics.errors);
    for n in run.sim.node_ids() {
        let m = run.metrics.node(n).unwrap();
        let p = m.progress.expect("a progress report");
        assert_eq!(p.done_bytes, data.len() as u64, "node {n}");
        if n == root {
            continue;
        }
        let mut at = 0u64;
        let mut got = Vec::with_capacity(data.len());
        for (offset, d) in run.sim.delivered(n) {
            assert_eq!(*offset, at, "node {n}: in order");
            at += d.len() as u64;
            got.extend_from_slice(d);
        }
        assert!(got[..] == data[..], "node {n} got every byte");
    }
}

/// When the last node finished (simulated seconds): the run's makespan.
fn last_finish_s(run: &Run) -> f64 {
    run.metrics
        .nodes
        .iter()
        .map(|m| m.progress.unwrap().at_s)
        .fold(0.0, f64::max)
}

/// Exactly once: no request was moved away from a slow peer, and the WAN carried each piece
/// into each cluster but the root's once.
fn check_wan(run: &Run, clusters: usize, data_len: usize) {
    assert_eq!(
        run.count.rerouted.load(Ordering::Relaxed),
        0,
        "no request moved away from a slow global peer"
    );
    check_wan_moved(run, clusters, data_len, 0);
}

/// As [`check_wan`], where requests may have been moved away from slow global peers: each
/// moved request adds at most one piece (`piece_len` bytes) to the WAN payload. Returns the
/// extra payload (bytes).
fn check_wan_moved(run: &Run, clusters: usize, data_len: usize, piece_len: u64) -> u64 {
    assert_eq!(
        run.count.fell_back.load(Ordering::Relaxed),
        0,
        "no stall fallback"
    );
    let payload = run.count.piece_payload.load(Ordering::Relaxed);
    let once = (clusters as u64 - 1) * data_len as u64;
    let moved = run.count.rerouted.load(Ordering::Relaxed);
    assert!(
        (once..=once + moved * piece_len).contains(&payload),
        "WAN piece payload {payload} = (clusters - 1) x data size {once} plus at most one \
         {piece_len}-byte piece for each of {moved} moved requests"
    );
    let wire = run.count.wire.load(Ordering::Relaxed) as f64;
    let links = wan_link_bytes(run);
    assert!(
        (links - wire).abs() <= 1e-6 * wire.max(1.0),
        "WAN link counters {links} vs frames received from other clusters {wire}"
    );
    payload - once
}

fn random_platform(rng: &mut ChaCha8Rng, clusters: usize) -> Platform {
    let mut b = Platform::builder();
    for _ in 0..clusters {
        let nodes = rng.gen_range(1..=8);
        b = b.cluster(ClusterSpec {
            nodes,
            node_uplink_bytes_s: rng.gen_range(1e5..1e8),
            node_downlink_bytes_s: rng.gen_range(1e5..1e8),
            access_up_bytes_s: rng.gen_range(1e5..1e9),
            access_down_bytes_s: rng.gen_range(1e5..1e9),
            intra_latency_s: rng.gen_range(0.0..1e-3),
        });
    }
    for a in 0..clusters as u32 {
        for c in (0..clusters as u32).filter(|&c| c != a) {
            b = b.wan(
                ClusterId(a),
                ClusterId(c),
                rng.gen_range(1e4..1e7),
                rng.gen_range(0.0..0.05),
            );
        }
    }
    b.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn every_node_receives_every_byte(
        clusters in 1usize..=4,
        len in 0usize..60_000,
        piece in 1u32..8_000,
        platform_seed in any::<u64>(),
        seed in any::<u64>(),
        root_pick in any::<prop::sample::Index>(),
        few_local_peers in prop::option::of(1usize..5),
        outstanding in 1usize..6,
        random_choice in any::<bool>(),
        outstanding_bytes in 0u64..20_000,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(platform_seed);
        let platform = random_platform(&mut rng, clusters);
        let root = NodeId(root_pick.index(platform.node_count()) as u32);
        let data = random_bytes(len, seed);
        let manifest = Arc::new(Manifest::build(&data, piece).unwrap());
        let piece_choice = if random_choice { PieceChoice::Random } else { PieceChoice::RarestFirst };
        // With five local peers and at most eight nodes per cluster the local mesh is
        // connected whatever the draws, so the stall fallback is disabled and the mob rule
        // must hold exactly; with fewer peers a mesh may fall apart and the fallback (which
        // may take pieces from anywhere) must save the run.
        let config = MobConfig {
            local_peers: few_local_peers.unwrap_or(5),
            outstanding,
            piece_choice,
            outstanding_bytes,
            stall_timeout_s: if few_local_peers.is_some() { 60.0 } else { 0.0 },
            ..MobConfig::default()
        };
        let run = run_mob(platform, root, &data, manifest, &config, seed, None, true);
        check_complete(&run, root, &data);
        // Links differ up to a thousandfold here: requests to slow global peers may move, each
        // adding at most one piece crossing.
        if few_local_peers.is_none() {
            check_wan_moved(&run, clusters, len, u64::from(piece));
        }
    }
}

#[test]
fn wan_payload_is_clusters_minus_one_times_data() {
    // Four clusters of unequal sizes, the root in the middle of cluster 2.
    let mut b = Platform::builder();
    for (nodes, up) in [(5, 1e7), (9, 2e7), (3, 5e6), (16, 1.25e7)] {
        b = b.cluster(ClusterSpec::uniform(nodes, up, 1e9, 1e-4));
    }
    let platform = b.wan_all(2e6, 0.01).build().unwrap();
    let data = random_bytes(3_000_000, 5);
    let manifest = Arc::new(Manifest::build(&data, 16 * 1024).unwrap());
    let root = NodeId(15);
    let run = run_mob(
        platform,
        root,
        &data,
        manifest,
        &MobConfig::default(),
        9,
        None,
        true,
    );
    check_complete(&run, root, &data);
    check_wan(&run, 4, data.len());
}

/// MOB's fraction of the max-flow bound on a static WAN (80 MB in 256 KiB pieces, 20 ms round
/// trips) with the defaults and with the paper's random choice without the depth cap.
fn fractions_of_the_bound(sizes: &[usize], wan_bytes_s: &[[f64; 4]; 4]) -> (f64, f64) {
    let platform = || {
        let mut b = Platform::builder();
        for &n in sizes {
            b = b.cluster(ClusterSpec::uniform(n, 125e6, 1.25e9, 1e-4));
        }
        for (x, row) in wan_bytes_s.iter().enumerate() {
            for (y, &bytes_s) in row.iter().enumerate() {
                if x != y {
                    b = b.wan(ClusterId(x as u32), ClusterId(y as u32), bytes_s, 0.01);
                }
            }
        }
        b.build().unwrap()
    };
    let bound = windrose_trees::multicast::bound::multicast_bound(&platform(), NodeId(0))
        .unwrap()
        .bytes_s;
    let data = random_bytes(80_000_000, 6);
    let manifest = Arc::new(Manifest::build(&data, 256 << 10).unwrap());
    let fraction = |config: &MobConfig| {
        let run = run_mob(
            platform(),
            NodeId(0),
            &data,
            manifest.clone(),
            config,
            3,
            None,
            false,
        );
        assert!(run.metrics.all_finished());
        check_wan(&run, sizes.len(), data.len());
        let done = last_finish_s(&run);
        data.len() as f64 / done / bound
    };
    let ours = fraction(&MobConfig::default());
    let paper = fraction(&MobConfig {
        piece_choice: PieceChoice::Random,
        outstanding_bytes: 0,
        ..MobConfig::default()
    });
    println!(
        "clusters {sizes:?}: defaults {:.1} %, paper's choices {:.1} % of the bound",
        100.0 * ours,
        100.0 * paper
    );
    (ours, paper)
}

/// A small static version of the Fig. 4 point: 4 x 4 nodes, 2 MB/s between all clusters (each
/// rank's flow gets the paper's 0.5 MB/s). Simulated time only, so this is a deterministic
/// check that the defaults keep MOB near the max-flow bound, and that the paper's random choice
/// without the cap stays well below it (why the defaults differ). Measured: 89.6 % and 82.5 %.
#[test]
fn defaults_come_close_to_the_bound_on_a_static_wan() {
    let (ours, paper) = fractions_of_the_bound(&[4; 4], &[[2e6; 4]; 4]);
    assert!(
        ours >= 0.88,
        "defaults reach {:.1} % of the bound",
        100.0 * ours
    );
    assert!(paper < ours);
}

/// The same with clusters of different sizes (Fig. 5's shape, scaled down) and the fast-links
/// WAN of `data/scenarios/mob`: the clusters cut the pieces into different mob shares, and the
/// regions that keep them from drawing the same pieces from the root's cluster must still
/// agree. Measured: 90.8 % (79.6 % when regions were cut from each node's share).
#[test]
fn defaults_come_close_to_the_bound_with_clusters_of_different_sizes() {
    let wan = [
        [0.0, 3.5e6, 3.0e6, 3.0e6],
        [3.5e6, 0.0, 4.5e6, 5.0e6],
        [3.0e6, 4.5e6, 0.0, 4.0e6],
        [3.0e6, 5.0e6, 4.0e6, 0.0],
    ];
    let (ours, paper) = fractions_of_the_bound(&[4, 6, 8, 12], &wan);
    assert!(
        ours >= 0.9,
        "defaults reach {:.1} % of the bound",
        100.0 * ours
    );
    assert!(paper < ours);
}

/// MOB with more cluster members than a share can usefully cut the data for (issue 20): 4 x 48
/// nodes, 16 MiB in 256 KiB pieces (64 pieces, so every member would own one or two), the
/// fast-links WAN of `data/scenarios/mob`. With every member owning a share, each rank's WAN
/// flow gets 1/48 of a link and a piece takes seconds to cross; the clusters then cannot
/// relay to each other in time and every cluster takes its own copy from the root's cluster.
/// With the mob cut to [`MobConfig::min_share_pieces`]-piece shares (the default), MOB stays
/// near the bound. Measured: 89.3 % against 36.5 % with every member in the mob.
#[test]
fn a_large_cluster_keeps_its_mob_small_enough_for_whole_shares() {
    let wan = [
        [0.0, 3.5e6, 3.0e6, 3.0e6],
        [3.5e6, 0.0, 4.5e6, 5.0e6],
        [3.0e6, 4.5e6, 0.0, 4.0e6],
        [3.0e6, 5.0e6, 4.0e6, 0.0],
    ];
    let sizes = [48usize; 4];
    let mut b = Platform::builder();
    for &n in &sizes {
        b = b.cluster(ClusterSpec::uniform(n, 1.25e9, 1.25e9, 1e-4));
    }
    for (x, row) in wan.iter().enumerate() {
        for (y, &bytes_s) in row.iter().enumerate() {
            if x != y {
                b = b.wan(ClusterId(x as u32), ClusterId(y as u32), bytes_s, 0.01);
            }
        }
    }
    let platform = b.build().unwrap();
    let bound = windrose_trees::multicast::bound::multicast_bound(&platform, NodeId(0))
        .unwrap()
        .bytes_s;
    let data = random_bytes(16 << 20, 9);
    let manifest = Arc::new(Manifest::build(&data, 256 << 10).unwrap());
    let fraction = |config: &MobConfig| {
        let run = run_mob(
            platform.clone(),
            NodeId(0),
            &data,
            manifest.clone(),
            config,
            4,
            None,
            false,
        );
        assert!(run.metrics.all_finished());
        // Still exactly once per cluster: the members outside the mob take nothing from
        // outside.
        check_wan(&run, sizes.len(), data.len());
        let done = last_finish_s(&run);
        data.len() as f64 / done / bound
    };
    let capped = fraction(&MobConfig::default());
    let every_member = fraction(&MobConfig {
        min_share_pieces: 0,
        ..MobConfig::default()
    });
    println!(
        "4 x 48, 64 pieces: mob cut to whole shares {:.1} %, every member {:.1} % of the bound",
        100.0 * capped,
        100.0 * every_member
    );
    assert!(capped >= 0.85, "{:.1} % of the bound", 100.0 * capped);
    assert!(every_member < capped);
}

#[test]
fn survivors_finish_when_nodes_fail_mid_run() {
    // Three clusters of 6; a share owner of cluster 1 and a node of the root's cluster fail
    // while pieces are moving: the others take over their shares and the acknowledgement
    // tree skips them.
    let mut b = Platform::builder();
    for _ in 0..3 {
        b = b.cluster(ClusterSpec::uniform(6, 1e7, 1e9, 1e-4));
    }
    let platform = b.wan_all(2e6, 0.01).build().unwrap();
    let data = random_bytes(2_000_000, 8);
    let manifest = Arc::new(Manifest::build(&data, 32 * 1024).unwrap());
    let root = NodeId(0);
    let failed = [(NodeId(8), 0.3), (NodeId(3), 0.5)];
    let run = run_mob_failing(
        platform,
        root,
        &data,
        manifest,
        &MobConfig::default(),
        4,
        None,
        true,
        &failed,
    );
    assert!(run.metrics.errors.is_empty(), "{:?}", run.metrics.errors);
    assert_eq!(run.metrics.failed, 2);
    assert_eq!(
        run.metrics.finished,
        16,
        "{:?}",
        run.metrics.unfinished_nodes()
    );
    for n in run.sim.node_ids() {
        if n == root || failed.iter().any(|f| f.0 == n) {
            continue;
        }
        let got: Vec<u8> = run
            .sim
            .delivered(n)
            .iter()
            .flat_map(|(_, d)| d.iter().copied())
            .collect();
        assert!(got[..] == data[..], "node {n} got every byte");
    }
}

#[test]
fn same_seed_same_log_other_seed_other_run() {
    let platform = || {
        let mut b = Platform::builder();
        for _ in 0..4 {
            b = b.cluster(ClusterSpec::uniform(7, 1e7, 1e9, 1e-4));
        }
        b.wan_all(3e6, 0.01).build().unwrap()
    };
    let data = random_bytes(400_000, 1);
    let manifest = Arc::new(Manifest::build(&data, 8192).unwrap());
    let log_of = |seed: u64| {
        let log = MemoryLog::new();
        let mut run = run_mob(
            platform(),
            NodeId(3),
            &data,
            manifest.clone(),
            &MobConfig::default(),
            seed,
            Some(log.clone()),
            false,
        );
        assert!(run.metrics.all_finished());
        run.sim.take_event_log().unwrap();
        log.contents()
    };
    let a = log_of(42);
    assert!(!a.is_empty());
    assert_eq!(a, log_of(42), "same seed, same event log");
    let b = log_of(43);
    assert_ne!(a, b, "another seed, another run");
    // The difference starts with the peer choices: the Hellos sent at start.
    let hellos = |log: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(log)
            .lines()
            .filter(|l| l.contains("\"ev\":\"send\"") && l.contains("\"t\":0.0"))
            .map(str::to_owned)
            .collect()
    };
    assert_ne!(hellos(&a), hellos(&b), "other peers chosen");
}

/// The MOB paper's Fig. 4 point on a uniform WAN: 4 x 16 nodes, 600 MB from node 0, WAN 8 MB/s
/// between every pair of clusters (10 ms one way), 125 MB/s nodes. Prints the simulated
/// completion, the throughput as a fraction of the max-flow bound, and the wall time.
/// `cargo test --release -p windrose-sim --test integration -- mob:: --ignored --nocapture`; set
/// `MOB_CHOICE=random|rarest` to run one piece choice, `MOB_OUTSTANDING_BYTES=n` to cap the
/// bytes requested per peer, `MOB_NODES` (per cluster), `MOB_LATENCY` (WAN, one way, s) and
/// `MOB_WAN=mixed|fast|slow` to vary the platform, `MOB_MB` and `MOB_PIECE` the data.
#[test]
#[ignore]
fn fig4_point_against_the_bound() {
    let env = |k: &str, d: f64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let nodes = env("MOB_NODES", 16.0) as usize;
    let latency = env("MOB_LATENCY", 0.01);
    // MOB_WAN=mixed: the WAN of data/scenarios/four-clusters.toml (A-B 6.5, A-C 3, A-D 5,
    // B-C 4.5, B-D 7, C-D 8 MB/s); fast / slow: data/scenarios/mob's; otherwise 8 MB/s.
    let wan = std::env::var("MOB_WAN").unwrap_or_default();
    let links: Option<[f64; 6]> = match wan.as_str() {
        "mixed" => Some([6.5, 3.0, 5.0, 4.5, 7.0, 8.0]),
        // The lead's data/scenarios/mob fast-links and slow-links WANs.
        "fast" => Some([3.5, 3.0, 3.0, 4.5, 5.0, 4.0]),
        "slow" => Some([3.5, 3.0, 0.8, 0.8, 5.0, 4.0]),
        _ => None,
    };
    let platform = || {
        let mut b = Platform::builder();
        for _ in 0..4 {
            b = b.cluster(ClusterSpec::uniform(nodes, 125e6, 1.25e9, 1e-4));
        }
        if let Some(l) = links {
            for (k, (x, y)) in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
                .into_iter()
                .enumerate()
            {
                b = b.wan_both(ClusterId(x), ClusterId(y), l[k] * 1e6, latency);
            }
            b.build().unwrap()
        } else {
            b.wan_all(8e6, latency).build().unwrap()
        }
    };
    let bound = windrose_trees::multicast::bound::multicast_bound(&platform(), NodeId(0))
        .unwrap()
        .bytes_s;
    let len = env("MOB_MB", 600.0) as usize * 1_000_000;
    let t = Instant::now();
    let data = Bytes::from(
        (0..len)
            .map(|i| (i as u64).wrapping_mul(0x9E37_79B9) as u8)
            .collect::<Vec<u8>>(),
    );
    let choices = match std::env::var("MOB_CHOICE").as_deref() {
        Ok("random") => vec![PieceChoice::Random],
        Ok("rarest") => vec![PieceChoice::RarestFirst],
        _ => vec![PieceChoice::RarestFirst, PieceChoice::Random],
    };
    for piece_choice in choices {
        let pieces: Vec<u32> = match std::env::var("MOB_PIECE") {
            Ok(p) => vec![p.parse().unwrap()],
            Err(_) => vec![1 << 20, 256 << 10],
        };
        for piece in pieces {
            let manifest = Arc::new(Manifest::build(&data, piece).unwrap());
            let setup_s = t.elapsed().as_secs_f64();
            let outstanding_bytes = std::env::var("MOB_OUTSTANDING_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(MobConfig::default().outstanding_bytes);
            let config = MobConfig {
                piece_choice,
                outstanding_bytes,
                ..MobConfig::default()
            };
            let run = run_mob(
                platform(),
                NodeId(0),
                &data,
                manifest,
                &config,
                1,
                None,
                false,
            );
            assert!(run.metrics.all_finished());
            check_wan(&run, 4, len);
            let done = last_finish_s(&run);
            let rate = len as f64 / done;
            println!(
                "{piece_choice:?}, outstanding_bytes {outstanding_bytes}, piece {piece} B: last node complete at {done:.2} s, finished at {:.2} s; {:.2} MB/s = {:.1} % of the bound {:.2} MB/s; {} events; sim wall {:.2} s (setup {:.2} s)",
                run.metrics.makespan_s.unwrap(),
                rate / 1e6,
                100.0 * rate / bound,
                bound / 1e6,
                run.metrics.events,
                run.wall_s,
                setup_s,
            );
            let mut wan = Vec::new();
            for a in 0..4 {
                for b in (0..4).filter(|&b| b != a) {
                    let l = LinkId::Wan {
                        from: ClusterId(a),
                        to: ClusterId(b),
                    };
                    wan.push(format!("{a}->{b} {:.0}", run.metrics.link_bytes(l) / 1e6));
                }
            }
            println!("  WAN MB: {}", wan.join(", "));
        }
    }
}

/// Wraps a node's machine and records the most requests it ever had outstanding (sent and
/// not yet answered by a Piece), over all its peers.
struct DepthProbe {
    inner: Mob,
    in_flight: u64,
    max_in_flight: Arc<AtomicU64>,
}

impl Protocol for DepthProbe {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        if let Input::Message {
            message: Message::Pieces(PieceMsg::Piece(_)),
            ..
        } = &input
        {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        let before = out.len();
        let r = self.inner.handle(now, input, out);
        for o in &out.as_slice()[before..] {
            if let windrose_proto::Output::Send(t) = o {
                if matches!(t.message, Message::Pieces(PieceMsg::Request(_))) {
                    self.in_flight += 1;
                }
            }
        }
        self.max_in_flight
            .fetch_max(self.in_flight, Ordering::Relaxed);
        r
    }

    fn status(&self) -> Status {
        self.inner.status()
    }
}

/// One receiver in its own cluster, its only peer the root in another, across a WAN link of
/// `wan_bytes_s` and a 100 ms round trip: returns the receiver's throughput (bytes/s of
/// simulated time) and the most requests it had outstanding.
fn single_flow(config: &MobConfig, wan_bytes_s: f64, data: &Bytes, piece: u32) -> (f64, u64) {
    let platform = Platform::builder()
        .cluster(ClusterSpec::uniform(1, 1.25e9, 1.25e9, 1e-4))
        .cluster(ClusterSpec::uniform(1, 1.25e9, 1.25e9, 1e-4))
        .wan_all(wan_bytes_s, 0.05)
        .build()
        .unwrap();
    let layout = Arc::new(layout_of(&platform));
    let setup = SwarmSetup {
        transfer: TransferId(2),
        root: NodeId(0),
        manifest: Arc::new(Manifest::build(data, piece).unwrap()),
        layout: layout.clone(),
        verifier: Arc::new(MemoVerifier::new()),
        keeper: None,
    };
    let mut sim = Simulation::new(
        platform,
        SimConfig {
            strict: true,
            limits: RunLimits {
                max_time_s: Some(1e6),
                max_events: Some(10_000_000),
            },
            ..SimConfig::default()
        },
    );
    let max_in_flight = Arc::new(AtomicU64::new(0));
    for n in layout.nodes() {
        let d = (n == NodeId(0)).then(|| data.clone());
        let inner = Mob::new(n, &setup, d, config.clone(), node_rng(1, n)).unwrap();
        sim.add_node(DepthProbe {
            inner,
            in_flight: 0,
            max_in_flight: if n == NodeId(1) {
                max_in_flight.clone()
            } else {
                Arc::new(AtomicU64::new(0))
            },
        })
        .unwrap();
    }
    let metrics = sim.run().expect("the run ends");
    assert!(metrics.all_finished());
    let done = metrics.nodes[1].progress.unwrap().at_s;
    (
        data.len() as f64 / done,
        max_in_flight.load(Ordering::Relaxed),
    )
}

/// The adaptive request depth keeps a long fat flow full: one global peer behind a 100 ms /
/// 50 MB/s link gets close to the link's rate, where one request at a time (what a 1 MiB cap
/// gives 1 MiB pieces) idles the link most of each round trip. A slow flow on the same round
/// trip (1 MB/s: a piece takes ten round trips) keeps a single request outstanding, bar the
/// one probe that measures its rate. Simulated time only: deterministic.
#[test]
fn adaptive_depth_fills_a_long_fat_flow_and_limits_a_slow_one() {
    let piece = 1 << 20;
    let fast = random_bytes(200 << 20, 11);
    let adaptive = MobConfig {
        outstanding: 16,
        stall_timeout_s: 0.0,
        ..MobConfig::default()
    };
    assert!(adaptive.adaptive_depth && adaptive.outstanding_bytes == 0);
    let (rate, depth) = single_flow(&adaptive, 50e6, &fast, piece);
    let capped = MobConfig {
        adaptive_depth: false,
        outstanding_bytes: 1 << 20,
        ..adaptive.clone()
    };
    let (capped_rate, capped_depth) = single_flow(&capped, 50e6, &fast, piece);
    println!(
        "50 MB/s, 100 ms: adaptive {:.1} MB/s (depth {depth}), 1 MiB cap {:.1} MB/s (depth \
         {capped_depth})",
        rate / 1e6,
        capped_rate / 1e6
    );
    assert!(rate >= 0.9 * 50e6, "adaptive depth: {:.2} MB/s", rate / 1e6);
    assert!((5..=16).contains(&depth), "depth {depth}");
    assert_eq!(capped_depth, 1);
    assert!(capped_rate < 0.3 * 50e6);

    let slow = random_bytes(30 << 20, 12);
    let (rate, depth) = single_flow(&adaptive, 1e6, &slow, piece);
    println!(
        "1 MB/s, 100 ms: adaptive {:.3} MB/s (depth {depth})",
        rate / 1e6
    );
    assert!(depth <= 2, "a slow flow got {depth} requests outstanding");
    assert!(rate >= 0.85 * 1e6, "slow flow: {:.3} MB/s", rate / 1e6);
}

/// Issue 18's series after its change, in simulated time: `four-clusters.toml` (4 x 4 nodes,
/// 10 ms one way between clusters) with the series' 0 <-> 1 link slowed from 5 to 0.5 MB/s,
/// 4 MiB from node 0 in 256 KiB pieces (16 pieces: one mob member per cluster). Cluster 1 owns
/// a third of the pieces as its region and kept taking them one by one over the slow link,
/// each half a second: the run took 2.53 x the max-flow bound (6.5 MB/s, all of cluster 0's
/// three links; cluster 1's data mostly relayed by 2 and 3). With
/// [`MobConfig::reroute_slow`] (the default: a request to a slow global peer moved to one that
/// announced the piece and would deliver it much sooner; "Slow global peers" in `mob.rs`) it
/// takes 1.44 x; two requests move, so two pieces (512 KiB) cross into cluster 1 twice, and on
/// the same WAN unslowed nothing moves. The seeds agree: with one mob member per cluster
/// nothing is drawn at random.
#[test]
fn a_slowed_link_out_of_the_root_cluster_is_routed_around() {
    let wan = |slow: f64| {
        let mut wan = [
            [0.0, 5.0e6, 3.0e6, 3.0e6],
            [5.0e6, 0.0, 4.5e6, 5.0e6],
            [3.0e6, 4.5e6, 0.0, 4.0e6],
            [3.0e6, 5.0e6, 4.0e6, 0.0],
        ];
        wan[0][1] = slow;
        wan[1][0] = slow;
        let mut b = Platform::builder();
        for _ in 0..4 {
            b = b.cluster(ClusterSpec::uniform(4, 125e6, 1.25e9, 1e-4));
        }
        for (x, row) in wan.iter().enumerate() {
            for (y, &bytes_s) in row.iter().enumerate() {
                if x != y {
                    b = b.wan(ClusterId(x as u32), ClusterId(y as u32), bytes_s, 0.01);
                }
            }
        }
        b.build().unwrap()
    };
    let data = random_bytes(4 << 20, 18);
    let manifest = Arc::new(Manifest::build(&data, 256 << 10).unwrap());
    // Median completion over three seeds in seconds, and of the bound.
    let run = |slow: f64, reroute_slow: bool| {
        let bound = windrose_trees::multicast::bound::multicast_bound(&wan(slow), NodeId(0))
            .unwrap()
            .bytes_s;
        let mut ratios = Vec::new();
        for seed in [1, 2, 3] {
            let run = run_mob(
                wan(slow),
                NodeId(0),
                &data,
                manifest.clone(),
                &MobConfig {
                    reroute_slow,
                    ..MobConfig::default()
                },
                seed,
                None,
                true,
            );
            check_complete(&run, NodeId(0), &data);
            // Moved requests are counted, and each adds at most one piece to the WAN.
            let extra = check_wan_moved(&run, 4, data.len(), 256 << 10);
            let moved = run.count.rerouted.load(Ordering::Relaxed);
            let done = last_finish_s(&run);
            let over_01 = run.metrics.link_bytes(LinkId::Wan {
                from: ClusterId(0),
                to: ClusterId(1),
            });
            let ratio = done / (data.len() as f64 / bound);
            println!(
                "0<->1 at {:.1} MB/s, reroute_slow {reroute_slow}, seed {seed}: {done:.3} s, \
                 {ratio:.2} x the bound ({:.3} s at {:.2} MB/s); 0->1 carried {:.2} of each byte; \
                 {moved} requests moved, {extra} B crossed twice",
                slow / 1e6,
                data.len() as f64 / bound,
                bound / 1e6,
                over_01 / data.len() as f64
            );
            ratios.push((ratio, done, moved, extra));
        }
        ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
        ratios[1]
    };
    let before = run(5e6, true);
    let off = run(0.5e6, false);
    let on = run(0.5e6, true);
    println!(
        "median: {:.3} s before the change; after it {:.3} s without, {:.3} s with rerouting",
        before.1, off.1, on.1
    );
    assert!(off.0 > 2.0, "without rerouting {:.2} x the bound", off.0);
    assert!(on.0 <= 1.6, "with rerouting {:.2} x the bound", on.0);
    // No link slow: nothing moves, every piece enters every cluster once.
    assert_eq!((before.2, before.3), (0, 0), "moved on the unslowed WAN");
    // The slowed link: moves are few, and each crosses at most one piece twice.
    assert!(on.2 <= 2, "{} requests moved", on.2);
    assert!(on.3 <= 2 * (256 << 10), "{} B crossed twice", on.3);
}
