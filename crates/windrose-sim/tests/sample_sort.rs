//! The sample sort baseline through Hosts in the simulator, on the same 16-Host 4-cluster
//! platform, records and node speeds as HeteroSort's test (`heterosort.rs`): the members end
//! with the sorted set, a contiguous range each in id order, and the three sorts' completion
//! times are printed side by side (`--nocapture`).

use bytes::Bytes;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::records::{KeyDistribution, RecordGenerator, RecordSummary, RECORD_LEN};
use windrose_model::NodeId;
use windrose_proto::app::{Application, Blake3App};
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::heterosort::{HsortSpec, Slicing};
use windrose_proto::pieces::PieceVerifier;
use windrose_proto::sample_sort::SampleSortSpec;
use windrose_proto::{ComputeTask, TransferId};
use windrose_sim::engine::{ComputeModel, SimConfig};
use windrose_sim::group::{group, leave_input, start_input};

/// A member's application: its share of the records for either sort.
#[derive(Debug)]
struct Share(Bytes);

impl Application for Share {
    fn compute(&self, task: &ComputeTask) -> String {
        Blake3App.compute(task)
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Blake3App.verifier()
    }

    fn local_input(&self, _: TransferId, spec: &CollectiveSpec) -> Bytes {
        match spec {
            CollectiveSpec::HeteroSort(_) | CollectiveSpec::SampleSort(_) => self.0.clone(),
            _ => Bytes::new(),
        }
    }
}

/// Four clusters of four nodes, 50 MB/s nodes, 5 MB/s and 10 ms between clusters.
fn platform() -> Platform {
    let mut b = Platform::builder();
    for _ in 0..4 {
        b = b.cluster(ClusterSpec::uniform(4, 50e6, 1e9, 1e-4));
    }
    b.wan_all(5e6, 0.01).build().unwrap()
}

fn shares(n: usize, seed: u64) -> Vec<Bytes> {
    let mut g = RecordGenerator::new(seed, KeyDistribution::Skewed { exponent: 4.0 }).unwrap();
    (0..n)
        .map(|i| {
            let mut buf = vec![0u8; (100 + 40 * (i % 5)) * RECORD_LEN];
            g.fill(&mut buf);
            Bytes::from(buf)
        })
        .collect()
}

/// Runs `spec` started by member 3; returns (completion time at the initiator, each member's
/// delivered records in rank order).
fn run(spec: CollectiveSpec, speeds: &[f64], input: &[Bytes]) -> (f64, Vec<Bytes>) {
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 7, |c| {
        c.app = Arc::new(Share(input[c.me.index()].clone()));
    })
    .unwrap();
    for (i, s) in speeds.iter().enumerate() {
        // One unit of speed sorts and merges 20 MB/s, as in HeteroSort's test.
        sim.set_compute(NodeId(i as u32), ComputeModel::BytesPerSecond(s * 20e6))
            .unwrap();
    }
    sim.input_at(NodeId(3), 0.0, start_input(spec, Bytes::new(), None))
        .unwrap();
    for i in 0..16 {
        sim.input_at(NodeId(i), 60.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let done = m
        .completion(NodeId(3))
        .expect("the initiator saw the sort complete");
    assert_eq!((done.finished, done.failed), (16, 0));
    let (t, at) = (done.transfer, done.at_s);
    let delivered = (0..16)
        .map(|i| {
            let d = sim.delivered_of(NodeId(i), t);
            assert_eq!(d.len(), 1, "node {i} delivered {} times", d.len());
            assert_eq!(d[0].0, 0);
            d[0].1.clone()
        })
        .collect();
    (at, delivered)
}

#[test]
fn sixteen_hosts_sample_sort_their_records_beside_heterosort() {
    let speeds: Vec<f64> = (0..16).map(|i| [1.0, 2.0, 4.0][i % 3]).collect();
    let input = shares(16, 5);
    let mut want = RecordSummary::new();
    for s in &input {
        want.push_all(s);
    }
    let hsort = |slicing| {
        CollectiveSpec::HeteroSort(HsortSpec {
            rows: 4,
            cols: 4,
            record_len: RECORD_LEN as u32,
            slicing,
            speeds: speeds.clone(),
            backups: 0,
        })
    };
    let runs = [
        (
            "sample-sort",
            CollectiveSpec::SampleSort(SampleSortSpec::new(RECORD_LEN as u32)),
        ),
        ("heterosort-equal", hsort(Slicing::Equal)),
        ("heterosort", hsort(Slicing::Speed)),
    ];
    println!("protocol         | complete at (s) | range sizes min / max");
    for (name, spec) in runs {
        let sample = matches!(spec, CollectiveSpec::SampleSort(_));
        let (at, out) = run(spec, &speeds, &input);
        let mut got = RecordSummary::new();
        for d in &out {
            got = got.then(&RecordSummary::of(d));
        }
        assert_eq!(
            got.records, want.records,
            "{name}: records lost or duplicated"
        );
        assert_eq!(got.checksum, want.checksum, "{name}: the multiset changed");
        assert!(got.is_sorted(), "{name}: not sorted");
        let sizes: Vec<usize> = out.iter().map(|d| d.len() / RECORD_LEN).collect();
        println!(
            "{name:16} | {at:15.3} | {} / {}",
            sizes.iter().min().unwrap(),
            sizes.iter().max().unwrap()
        );
        if sample {
            // Equal weights whatever the speeds: no range above twice the mean.
            let mean = want.records as usize / 16;
            assert!(sizes.iter().all(|&s| s < 2 * mean), "{sizes:?}");
        }
    }
}
