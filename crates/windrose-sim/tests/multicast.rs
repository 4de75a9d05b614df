//! The piece-based multicasts in the simulator: every protocol delivers every byte, verified,
//! and every node finishes, on random platforms; MOB moves each piece into each cluster exactly
//! once; runs replay bit for bit; `kind = "multicast"` scenarios parse (and bad ones are refused
//! with file:line:col); the seed-002 scenario files agree with `multicast::seed002`.

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::NodeId;
use windrose_proto::mob::MobConfig;
use windrose_proto::TransferId;
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::metrics::Metrics;
use windrose_sim::multicast::{
    prepare, run_multicast, seed002, spec_for, MulticastOutcome, MulticastProtocol, MulticastRun,
    SharedData,
};
use windrose_sim::scenario::{
    load_scenario, parse_scenario, run_scenario, MobVariant, ScenarioError, WorkloadKind,
};

/// A platform of `sizes.len()` clusters with capacities drawn from `rng`.
fn random_platform(rng: &mut ChaCha8Rng, sizes: &[usize]) -> Platform {
    let mut b = Platform::builder();
    for &n in sizes {
        let node = rng.gen_range(1e6..1e8);
        b = b.cluster(ClusterSpec::uniform(
            n,
            node,
            rng.gen_range(1e6..1e9),
            rng.gen_range(1e-5..1e-3),
        ));
    }
    b.wan_all(rng.gen_range(5e5..5e7), rng.gen_range(1e-3..3e-2))
        .build()
        .expect("a valid platform")
}

fn data(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Bytes::from((0..len).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>())
}

/// Runs `protocol` and returns what was measured; panics with the reason when set-up fails.
fn run(
    protocol: MulticastProtocol,
    platform: &Platform,
    root: NodeId,
    shared: &SharedData,
    seed: u64,
    record: bool,
) -> (MulticastOutcome, Metrics, Vec<Vec<(u64, Bytes)>>) {
    let spec = spec_for(protocol, platform, root).expect("a spec");
    let config = SimConfig {
        record_deliveries: record,
        strict: true,
        ..SimConfig::default()
    };
    let (mut sim, probe) = prepare(platform, root, shared, &spec, seed, TransferId(1), config)
        .unwrap_or_else(|e| panic!("{protocol}: {e}"));
    let metrics = sim.run().unwrap_or_else(|e| panic!("{protocol}: {e}"));
    let delivered = (0..platform.node_count())
        .map(|i| sim.delivered(NodeId::from(i)).to_vec())
        .collect();
    (probe.outcome(&metrics, None), metrics, delivered)
}

/// Every receiver got exactly `data`, in order; every node finished; nothing was refused.
fn check_delivery(
    protocol: MulticastProtocol,
    root: NodeId,
    data: &Bytes,
    outcome: &MulticastOutcome,
    metrics: &Metrics,
    delivered: &[Vec<(u64, Bytes)>],
) -> Result<(), TestCaseError> {
    prop_assert!(
        metrics.errors.is_empty(),
        "{protocol}: {:?}",
        metrics.errors
    );
    prop_assert!(
        metrics.all_finished(),
        "{protocol}: unfinished {:?}",
        metrics.unfinished_nodes()
    );
    prop_assert!(
        outcome.all_complete(),
        "{protocol}: {:?}",
        outcome.node_completion_s
    );
    for (i, d) in delivered.iter().enumerate() {
        if NodeId::from(i) == root {
            continue;
        }
        let mut next = 0u64;
        let mut got = Vec::with_capacity(data.len());
        for (offset, bytes) in d {
            prop_assert_eq!(*offset, next, "{}: node {} out of order", protocol, i);
            next += bytes.len() as u64;
            got.extend_from_slice(bytes);
        }
        prop_assert!(got == data[..], "{}: node {} got other bytes", protocol, i);
    }
    Ok(())
}

fn delivers_everything(
    protocol: MulticastProtocol,
    sizes: &[usize],
    len: usize,
    piece: u32,
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let platform = random_platform(&mut rng, sizes);
    let n = platform.node_count();
    if n < 2 {
        return Ok(());
    }
    let root = NodeId::from(rng.gen_range(0..n));
    let bytes = data(len, seed);
    let shared = SharedData::new(bytes.clone(), piece).expect("a manifest");
    let (outcome, metrics, delivered) = run(protocol, &platform, root, &shared, seed, true);
    check_delivery(protocol, root, &bytes, &outcome, &metrics, &delivered)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn mob_delivers_every_byte_and_finishes(
        sizes in prop::collection::vec(1usize..6, 1..4),
        len in 1usize..40_000,
        piece in 1u32..9_000,
        seed in any::<u64>(),
    ) {
        delivers_everything(MulticastProtocol::Mob, &sizes, len, piece, seed)?;
    }

    #[test]
    fn bittorrent_delivers_every_byte_and_finishes(
        sizes in prop::collection::vec(1usize..6, 1..4),
        len in 1usize..40_000,
        piece in 1u32..9_000,
        seed in any::<u64>(),
    ) {
        delivers_everything(MulticastProtocol::BitTorrent, &sizes, len, piece, seed)?;
    }

    #[test]
    fn balanced_delivers_every_byte_and_finishes(
        sizes in prop::collection::vec(1usize..6, 1..4),
        len in 1usize..40_000,
        piece in 1u32..9_000,
        seed in any::<u64>(),
    ) {
        delivers_everything(MulticastProtocol::Balanced, &sizes, len, piece, seed)?;
    }

    #[test]
    fn magpie_delivers_every_byte_and_finishes(
        sizes in prop::collection::vec(1usize..6, 1..4),
        len in 1usize..40_000,
        piece in 1u32..9_000,
        seed in any::<u64>(),
    ) {
        delivers_everything(MulticastProtocol::Magpie, &sizes, len, piece, seed)?;
    }

    /// Each piece enters each cluster once: (clusters - 1) x size of payload crosses the WAN,
    /// and the WAN links' counters carry at least that.
    #[test]
    fn mob_moves_each_piece_into_each_cluster_once(
        sizes in prop::collection::vec(1usize..6, 2..5),
        len in 1usize..60_000,
        piece in 512u32..8_192,
        seed in any::<u64>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let platform = random_platform(&mut rng, &sizes);
        let shared = SharedData::new(data(len, seed), piece).expect("a manifest");
        let (outcome, metrics, _) =
            run(MulticastProtocol::Mob, &platform, NodeId(0), &shared, seed, false);
        prop_assert!(outcome.all_complete());
        let expected = (sizes.len() as u64 - 1) * len as u64;
        prop_assert_eq!(outcome.wan_payload_bytes, expected);
        let wan_wire: f64 = platform
            .links()
            .filter(|l| matches!(l, LinkId::Wan { .. }))
            .map(|l| metrics.link_bytes(l))
            .sum();
        prop_assert!(wan_wire >= expected as f64 * (1.0 - 1e-9));
    }
}

/// The same seed gives the same event log, byte for byte.
fn same_seed_same_event_log(protocol: MulticastProtocol) {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let platform = random_platform(&mut rng, &[3, 4, 2]);
    let shared = SharedData::new(data(50_000, 9), 4096).unwrap();
    let log = |seed: u64| {
        let spec = spec_for(protocol, &platform, NodeId(1)).unwrap();
        let (mut sim, _) = prepare(
            &platform,
            NodeId(1),
            &shared,
            &spec,
            seed,
            TransferId(3),
            SimConfig::default(),
        )
        .unwrap_or_else(|e| panic!("{protocol}: {e}"));
        let mem = MemoryLog::new();
        sim.set_event_log(Box::new(mem.clone()));
        let m = sim.run().unwrap();
        assert!(m.all_finished(), "{protocol}");
        sim.take_event_log().unwrap();
        mem.contents()
    };
    let a = log(5);
    assert!(a.len() > 1000);
    assert_eq!(a, log(5), "{protocol}: two runs with seed 5 differ");
}

#[test]
fn mob_replays_bit_for_bit() {
    same_seed_same_event_log(MulticastProtocol::Mob);
}

#[test]
fn bittorrent_replays_bit_for_bit() {
    same_seed_same_event_log(MulticastProtocol::BitTorrent);
}

#[test]
fn balanced_replays_bit_for_bit() {
    same_seed_same_event_log(MulticastProtocol::Balanced);
}

#[test]
fn magpie_replays_bit_for_bit() {
    same_seed_same_event_log(MulticastProtocol::Magpie);
}

/// `run_multicast` applies timed changes: halving every WAN link at 0 halves the bound the run
/// is measured against only through `bound_completion_s`, but slows the run itself.
#[test]
fn timed_changes_slow_a_multicast_down() {
    let site = ClusterSpec::uniform(2, 1e8, 1e9, 1e-4);
    let platform = Platform::builder()
        .cluster(site)
        .cluster(site)
        .wan_all(1e6, 0.005)
        .build()
        .unwrap();
    let shared = SharedData::new(data(400_000, 1), 16_384).unwrap();
    let spec = spec_for(MulticastProtocol::Magpie, &platform, NodeId(0)).unwrap();
    let slow: Vec<_> = platform
        .links()
        .filter(|l| matches!(l, LinkId::Wan { .. }))
        .map(|link| windrose_sim::scenario::TimedChange {
            at_s: 0.0,
            change: windrose_sim::network::Change::Capacity {
                link,
                bytes_s: 2.5e5,
            },
        })
        .collect();
    let go = |changes: &[windrose_sim::scenario::TimedChange]| {
        run_multicast(&MulticastRun {
            platform: &platform,
            changes,
            root: NodeId(0),
            data: &shared,
            spec: &spec,
            seed: 1,
            config: SimConfig::default(),
            bound_completion_s: None,
        })
        .unwrap()
        .0
    };
    let fast = go(&[]);
    let slowed = go(&slow);
    let (f, s) = (fast.completion_s.unwrap(), slowed.completion_s.unwrap());
    assert!(s > 3.0 * f, "fast {f} s, slowed {s} s");
    // The static bound (1 MB/s at the start) is the same for both.
    assert_eq!(fast.bound_bytes_s, slowed.bound_bytes_s);
    assert!(fast.fraction_of_bound.unwrap() <= 1.0 + 1e-9);
}

const MULTICAST_SCENARIO: &str = r#"
seed = 3
[platform]
[[platform.cluster]]
nodes = 3
node_uplink_bytes_s = 1e7
node_downlink_bytes_s = 1e7
access_up_bytes_s = 1e8
access_down_bytes_s = 1e8
intra_latency_s = 0.001
[[platform.cluster]]
nodes = 2
node_uplink_bytes_s = 1e7
node_downlink_bytes_s = 1e7
access_up_bytes_s = 1e8
access_down_bytes_s = 1e8
intra_latency_s = 0.001
[platform.wan]
bytes_s = [[0, 1e6], [1e6, 0]]
latency_s = [[0, 0.01], [0.01, 0]]

[workload]
kind = "multicast"
protocol = "magpie"
root = 0
message_bytes = "1MB"
piece_bytes = "64KiB"
"#;

#[test]
fn multicast_scenario_parses() {
    let s = parse_scenario(MULTICAST_SCENARIO, Path::new("m.toml")).unwrap();
    assert_eq!(s.workload.kind, WorkloadKind::Multicast);
    let m = s.workload.multicast.unwrap();
    assert_eq!(m.protocol, MulticastProtocol::Magpie);
    assert_eq!(m.piece_bytes, 64 << 10);
    assert_eq!(s.workload.message_bytes, 1_000_000);
    for p in MulticastProtocol::ALL {
        let text = MULTICAST_SCENARIO.replace("\"magpie\"", &format!("\"{p}\""));
        let s = parse_scenario(&text, Path::new("m.toml")).unwrap();
        assert_eq!(s.workload.multicast.unwrap().protocol, p);
    }
    // The piece size defaults to 1 MiB.
    let text = MULTICAST_SCENARIO.replace("piece_bytes = \"64KiB\"\n", "");
    let s = parse_scenario(&text, Path::new("m.toml")).unwrap();
    assert_eq!(s.workload.multicast.unwrap().piece_bytes, 1 << 20);
    // MOB: ours by default, the paper's on request.
    let mob = MULTICAST_SCENARIO.replace("\"magpie\"", "\"mob\"");
    let s = parse_scenario(&mob, Path::new("m.toml")).unwrap();
    assert_eq!(
        s.workload.multicast.unwrap().mob_variant,
        MobVariant::Windrose
    );
    let paper = mob.replace("root = 0", "root = 0\nmob_variant = \"paper\"");
    let s = parse_scenario(&paper, Path::new("m.toml")).unwrap();
    assert_eq!(s.workload.multicast.unwrap().mob_variant, MobVariant::Paper);
    assert_eq!(MobVariant::Paper.config(), MobConfig::paper());
    // Unknown variants, and a variant for another protocol, name file, line and column.
    let e = parse_scenario(
        &mob.replace("root = 0", "root = 0\nmob_variant = \"fast\""),
        Path::new("m.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("m.toml:26:15:") && e.contains("workload.mob_variant"),
        "{e}"
    );
    let e = parse_scenario(
        &MULTICAST_SCENARIO.replace("root = 0", "root = 0\nmob_variant = \"paper\""),
        Path::new("m.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("m.toml:26:15:") && e.contains("protocol = \"mob\""),
        "{e}"
    );
}

/// The error of `text` with `from` replaced by `to`: `m.toml:LINE:COL: …`.
fn error_of(from: &str, to: &str) -> String {
    assert!(MULTICAST_SCENARIO.contains(from), "{from}");
    let text = MULTICAST_SCENARIO.replace(from, to);
    let e = parse_scenario(&text, Path::new("m.toml")).unwrap_err();
    assert!(matches!(e, ScenarioError::File { .. }), "{e:?}");
    e.to_string()
}

#[test]
fn bad_multicast_workloads_are_refused_with_file_line_and_column() {
    // Lines: the workload table starts at line 22 of the text (1-based, after the blank first
    // line), `kind` on 23, `protocol` on 24, `message_bytes` on 26, `piece_bytes` on 27.
    let cases = [
        (
            "protocol = \"magpie\"",
            "protocol = \"mobb\"",
            "m.toml:24:12:",
            "workload.protocol",
        ),
        (
            "kind = \"multicast\"",
            "kind = \"multicat\"",
            "m.toml:23:8:",
            "workload.kind",
        ),
        (
            "piece_bytes = \"64KiB\"",
            "piece_bytes = 0",
            "m.toml:27:15:",
            "workload.piece_bytes",
        ),
        (
            "piece_bytes = \"64KiB\"",
            "piece_bytes = \"8GiB\"",
            "m.toml:27:15:",
            "workload.piece_bytes",
        ),
        (
            "piece_bytes = \"64KiB\"",
            "piece_bytes = \"64 parsecs\"",
            "m.toml:27:15:",
            "unknown unit",
        ),
        (
            "message_bytes = \"1MB\"",
            "message_bytes = 0",
            "m.toml:26:17:",
            "at least 1 byte",
        ),
        ("root = 0", "root = 9", "m.toml:25:8:", "does not exist"),
        (
            "piece_bytes = \"64KiB\"",
            "piece_bytes = \"64KiB\"\ntree = \"flat\"",
            "m.toml:28:8:",
            "workload.tree",
        ),
        (
            "piece_bytes = \"64KiB\"",
            "piece_bytes = \"64KiB\"\nsegment_bytes = 10",
            "m.toml:28:17:",
            "workload.segment_bytes",
        ),
        (
            "kind = \"multicast\"\n",
            "",
            "m.toml:23:12:",
            "kind = \"multicast\"",
        ),
    ];
    for (from, to, at, key) in cases {
        let e = error_of(from, to);
        assert!(e.starts_with(at), "{to:?}: {e}");
        assert!(e.contains(key), "{to:?}: {e}");
    }
    // `kind` may name a broadcast too; `protocol` must then agree with it.
    let text = MULTICAST_SCENARIO.replace(
        "kind = \"multicast\"\nprotocol = \"magpie\"",
        "kind = \"broadcast\"\ntree = \"flat\"",
    );
    let text = text.replace("piece_bytes = \"64KiB\"\n", "");
    let s = parse_scenario(&text, Path::new("b.toml")).unwrap();
    assert_eq!(s.workload.kind, WorkloadKind::Broadcast);
    assert!(s.workload.multicast.is_none());
    let text = text.replace("tree = \"flat\"", "tree = \"flat\"\nprotocol = \"scatter\"");
    let e = parse_scenario(&text, Path::new("b.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("b.toml:25:12:") && e.contains("contradicts"),
        "{e}"
    );
    // piece_bytes outside a multicast.
    let text = MULTICAST_SCENARIO.replace(
        "kind = \"multicast\"\nprotocol = \"magpie\"",
        "protocol = \"broadcast\"\ntree = \"flat\"",
    );
    let e = parse_scenario(&text, Path::new("b.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("b.toml:27:15:") && e.contains("multicasts only"),
        "{e}"
    );
}

/// A multicast scenario runs through `run_scenario` and reports what the probe measured.
#[test]
fn multicast_scenario_runs() {
    let s = parse_scenario(MULTICAST_SCENARIO, Path::new("m.toml")).unwrap();
    let mut log = Vec::new();
    let r = run_scenario(&s, 3, Some(&mut log)).unwrap();
    assert!(r.all_finished(), "{:?}", r.nodes);
    assert_eq!(r.multicast.len(), 1);
    let m = &r.multicast[0];
    assert!(m.all_complete());
    assert_eq!(m.data_bytes, 1_000_000);
    // The WAN link (1 MB/s) is the bound; MagPIe sends the data over it once.
    assert!((m.bound_bytes_s - 1e6).abs() < 1e-3);
    assert_eq!(m.wan_payload_bytes, 1_000_000);
    assert!(m.fraction_of_bound.unwrap() <= 1.0 + 1e-9);
    assert!(r.summary().contains("magpie multicast"));
    let text = String::from_utf8(log).unwrap();
    assert!(text.lines().count() > 10);
    // Same seed, same log.
    let mut again = Vec::new();
    run_scenario(&s, 3, Some(&mut again)).unwrap();
    assert_eq!(text.as_bytes(), &again[..]);
}

fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios/mob")
}

/// Every seed-002 file parses, is a multicast from node 0, and its platform is
/// `multicast::seed002`'s.
#[test]
fn seed002_scenario_files_agree_with_the_code() {
    let fast = seed002::FAST_WAN_MB_S;
    let slow = seed002::slow_wan_mb_s();
    let myri = seed002::MYRINET_BYTES_S;
    let (l20, l100) = (seed002::LATENCY_20MS_RTT_S, seed002::LATENCY_100MS_RTT_S);
    let cases: Vec<(&str, Platform, usize)> = vec![
        (
            "fast-links",
            seed002::platform([16; 4], &fast, l20, myri),
            0,
        ),
        (
            "slow-links",
            seed002::platform([16; 4], &slow, l20, myri),
            0,
        ),
        ("fast-slow", seed002::platform([16; 4], &fast, l20, myri), 4),
        ("slow-fast", seed002::platform([16; 4], &slow, l20, myri), 4),
        ("mayhem", seed002::platform([16; 4], &fast, l20, myri), 0),
        (
            "fast-links-100ms",
            seed002::platform([16; 4], &fast, l100, myri),
            0,
        ),
        (
            "slow-links-100ms",
            seed002::platform([16; 4], &slow, l100, myri),
            0,
        ),
        (
            "fast-slow-100ms",
            seed002::platform([16; 4], &fast, l100, myri),
            4,
        ),
        (
            "slow-fast-100ms",
            seed002::platform([16; 4], &slow, l100, myri),
            4,
        ),
        (
            "mayhem-100ms",
            seed002::platform([16; 4], &fast, l100, myri),
            0,
        ),
        (
            "fast-links-4-12-16-32",
            seed002::platform([4, 12, 16, 32], &fast, l20, myri),
            0,
        ),
        (
            "local-bottleneck-16",
            seed002::platform([16; 4], &[[1250.0; 4]; 4], l20, 1.25e7),
            0,
        ),
    ];
    for (name, platform, changes) in cases {
        let s = load_scenario(&scenario_dir().join(format!("{name}.toml")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.platform, platform, "{name}");
        assert_eq!(s.changes.len(), changes, "{name}");
        assert_eq!(s.workload.kind, WorkloadKind::Multicast, "{name}");
        assert_eq!(s.workload.root, NodeId(0), "{name}");
        assert_eq!(s.workload.message_bytes, 600_000_000, "{name}");
        assert_eq!(s.mayhem.is_some(), name.starts_with("mayhem"), "{name}");
        if let Some(m) = s.mayhem {
            assert_eq!(
                (m.period_s, m.min_fraction, m.max_fraction),
                (5.0, 0.1, 1.0)
            );
        }
        for c in &s.changes {
            assert_eq!(c.at_s, seed002::SWITCH_S, "{name}");
        }
    }
}
