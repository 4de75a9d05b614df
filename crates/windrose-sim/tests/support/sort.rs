//! What the sort tests (`heterosort.rs`, `sample_sort.rs`) share: the members' application, the
//! 4 x 4 platform and records they sort, and [`run_sort`]: start a sort on a group of Hosts,
//! ask every member to leave, run, and check that it completed with every member finished and
//! delivering one range.
#![allow(dead_code)]

use bytes::Bytes;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::records::{KeyDistribution, RecordGenerator, RecordSummary, RECORD_LEN};
use windrose_model::NodeId;
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::Report;
use windrose_proto::TransferId;
use windrose_sim::engine::{ComputeModel, RunLimits, SimConfig, Simulation};
use windrose_sim::group::{group, leave_input, start_input};
use windrose_sim::metrics::Metrics;

/// A member's application: its share of the records for either sort, BLAKE3 for the rest.
pub use windrose_sim::scenario::SortRecords as Share;

/// Four clusters of four nodes, 50 MB/s nodes, 5 MB/s and 10 ms between clusters.
pub fn platform() -> Platform {
    let mut b = Platform::builder();
    for _ in 0..4 {
        b = b.cluster(ClusterSpec::uniform(4, 50e6, 1e9, 1e-4));
    }
    b.wan_all(5e6, 0.01).build().unwrap()
}

/// `n` shares of skewed records, 100-260 records each.
pub fn shares(n: usize, seed: u64) -> Vec<Bytes> {
    let mut g = RecordGenerator::new(seed, KeyDistribution::Skewed { exponent: 4.0 }).unwrap();
    (0..n)
        .map(|i| {
            let mut buf = vec![0u8; (100 + 40 * (i % 5)) * RECORD_LEN];
            g.fill(&mut buf);
            Bytes::from(buf)
        })
        .collect()
}

/// Speed factors as each member's compute speed: one unit sorts and merges 20 MB/s.
pub fn units(speeds: &[f64]) -> Vec<(NodeId, f64)> {
    speeds
        .iter()
        .enumerate()
        .map(|(i, s)| (NodeId(i as u32), s * 20e6))
        .collect()
}

/// One sort to run: where, what, from whom.
pub struct SortCase<'a> {
    /// The platform; one member per node.
    pub platform: Platform,
    /// The sort.
    pub spec: CollectiveSpec,
    /// Each member's records, by node id.
    pub input: &'a [Bytes],
    /// Members' compute speeds, bytes/s (a member not listed: the engine's default).
    pub compute_bytes_s: Vec<(NodeId, f64)>,
    /// The member that starts the sort.
    pub initiator: NodeId,
    /// When every member is asked to leave (it leaves once the sort has ended).
    pub leave_at_s: f64,
    /// The engine's bounds.
    pub limits: RunLimits,
}

/// What a [`SortCase`] ended with.
pub struct SortRun {
    /// The sort's transfer.
    pub transfer: TransferId,
    /// When the initiator saw it complete, seconds.
    pub complete_s: f64,
    /// Each member's delivered range, by node id (snake order for HeteroSort, rank order for
    /// the sample sort: both are id order).
    pub delivered: Vec<Bytes>,
    /// When each member's sort ended, seconds.
    pub finished_s: Vec<f64>,
    /// The run's metrics.
    pub metrics: Metrics,
}

/// A strict group of Hosts on `platform` recording deliveries (seed 7), each member's
/// application holding its share of `input`, with the given compute speeds.
pub fn sort_sim(
    platform: Platform,
    input: &[Bytes],
    compute_bytes_s: &[(NodeId, f64)],
    limits: RunLimits,
) -> Simulation {
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        limits,
        ..SimConfig::default()
    };
    let mut sim = group(platform, config, 7, |h| {
        h.app = Arc::new(Share(input[h.me.index()].clone()));
    })
    .unwrap();
    for &(node, s) in compute_bytes_s {
        sim.set_compute(node, ComputeModel::BytesPerSecond(s))
            .unwrap();
    }
    sim
}

/// Runs `c` and checks what every run must hold: no protocol error, the initiator saw every
/// member finish and none fail, each member delivered its range once at offset 0 and ended
/// its sort finished.
pub fn run_sort(c: SortCase<'_>) -> SortRun {
    let n = c.platform.node_count();
    let mut sim = sort_sim(c.platform, c.input, &c.compute_bytes_s, c.limits);
    sim.input_at(c.initiator, 0.0, start_input(c.spec, Bytes::new(), None))
        .unwrap();
    for i in 0..n {
        sim.input_at(NodeId(i as u32), c.leave_at_s, leave_input())
            .unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let done = m
        .completion(c.initiator)
        .expect("the initiator saw the sort complete");
    assert_eq!((done.finished, done.failed), (n as u32, 0));
    let delivered = (0..n)
        .map(|i| {
            let d = sim.delivered_of(NodeId(i as u32), done.transfer);
            assert_eq!(d.len(), 1, "node {i} delivered {} times", d.len());
            assert_eq!(d[0].0, 0);
            d[0].1.clone()
        })
        .collect();
    let finished_s = m
        .nodes
        .iter()
        .map(|nm| {
            nm.reports
                .iter()
                .find_map(|r| match r.report {
                    Report::CollectiveEnded { finished, .. } => {
                        assert!(finished, "node {} ended unfinished", nm.node);
                        Some(r.at_s)
                    }
                    _ => None,
                })
                .unwrap_or_else(|| panic!("node {} never ended the sort", nm.node))
        })
        .collect();
    SortRun {
        transfer: done.transfer,
        complete_s: done.at_s,
        delivered,
        finished_s,
        metrics: m,
    }
}

/// The input's records together.
pub fn summary_of(input: &[Bytes]) -> RecordSummary {
    let mut want = RecordSummary::new();
    for s in input {
        want.push_all(s);
    }
    want
}

/// `out` (each member's range, in id order) holds exactly the records of `input`, globally
/// sorted: same count and order-independent checksum, sorted, and each range's first record
/// no lower than the last of the ranges before it.
pub fn assert_sorted_set(name: &str, input: &[Bytes], out: &[Bytes]) {
    let want = summary_of(input);
    let mut got = RecordSummary::new();
    for d in out {
        got = got.then(&RecordSummary::of(d));
    }
    assert_eq!(
        got.records, want.records,
        "{name}: records lost or duplicated"
    );
    assert_eq!(got.checksum, want.checksum, "{name}: the multiset changed");
    assert!(got.is_sorted(), "{name}: not sorted");
    let ranges: Vec<&Bytes> = out.iter().filter(|d| !d.is_empty()).collect();
    for w in ranges.windows(2) {
        assert!(
            w[0][w[0].len() - RECORD_LEN..] <= w[1][..RECORD_LEN],
            "{name}: two ranges overlap"
        );
    }
}
