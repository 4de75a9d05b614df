//! HeteroSort through Hosts in the simulator: every member's application hands its own
//! records to its machine ([`Application::local_input`]), the simulator charges each cycle's
//! compute task by the node's speed, and the members end with the sorted set, each a
//! contiguous range in snake order.

use bytes::Bytes;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::records::{KeyDistribution, RecordGenerator, RecordSummary, RECORD_LEN};
use windrose_model::NodeId;
use windrose_proto::app::{Application, Blake3App};
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::heterosort::{HsortSpec, Slicing};
use windrose_proto::pieces::PieceVerifier;
use windrose_proto::{ComputeTask, TransferId};
use windrose_sim::engine::{ComputeModel, SimConfig};
use windrose_sim::group::{group, leave_input, start_input};
use windrose_sim::metrics::ReportData;

/// A member's application: its share of the records, BLAKE3 for the rest.
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
            CollectiveSpec::HeteroSort(_) => self.0.clone(),
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

/// Runs a 4 x 4 sort started by member 3; returns (completion time at the initiator, each
/// member's delivered records in snake order, each member's finish time).
fn run(slicing: Slicing, speeds: &[f64], input: &[Bytes]) -> (f64, Vec<Bytes>, Vec<f64>) {
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
        // One unit of speed sorts and merges 20 MB/s.
        sim.set_compute(NodeId(i as u32), ComputeModel::BytesPerSecond(s * 20e6))
            .unwrap();
    }
    let spec = CollectiveSpec::HeteroSort(HsortSpec {
        rows: 4,
        cols: 4,
        record_len: RECORD_LEN as u32,
        slicing,
        speeds: speeds.to_vec(),
        backups: 1,
    });
    sim.input_at(NodeId(3), 0.0, start_input(spec, Bytes::new(), None))
        .unwrap();
    for i in 0..16 {
        sim.input_at(NodeId(i), 60.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let (t, at) = m.nodes[3]
        .reports
        .iter()
        .find_map(|r| match r.report {
            ReportData::CollectiveComplete {
                transfer,
                finished,
                failed,
            } => {
                assert_eq!((finished, failed), (16, 0));
                Some((transfer, r.at_s))
            }
            _ => None,
        })
        .expect("the initiator saw the sort complete");
    let delivered = (0..16)
        .map(|i| {
            let d = sim.delivered_of(NodeId(i), t);
            assert_eq!(d.len(), 1, "node {i} delivered {} times", d.len());
            assert_eq!(d[0].0, 0);
            d[0].1.clone()
        })
        .collect();
    let finished = m
        .nodes
        .iter()
        .map(|n| {
            n.reports
                .iter()
                .find_map(|r| match r.report {
                    ReportData::CollectiveEnded { finished, .. } => {
                        assert!(finished);
                        Some(r.at_s)
                    }
                    _ => None,
                })
                .unwrap()
        })
        .collect();
    (at, delivered, finished)
}

#[test]
fn sixteen_hosts_sort_their_own_records_equal_and_by_speed() {
    let speeds: Vec<f64> = (0..16).map(|i| [1.0, 2.0, 4.0][i % 3]).collect();
    let input = shares(16, 5);
    let mut want = RecordSummary::new();
    for s in &input {
        want.push_all(s);
    }
    println!("slicing | complete at (s) | max/mean finish | records at speed 1 / 2 / 4 (mean)");
    for slicing in [Slicing::Equal, Slicing::Speed] {
        let (at, out, finish) = run(slicing, &speeds, &input);
        let mut got = RecordSummary::new();
        for d in &out {
            assert!(!d.is_empty());
            got = got.then(&RecordSummary::of(d));
        }
        assert_eq!(
            got.records, want.records,
            "{slicing:?}: records lost or duplicated"
        );
        assert_eq!(
            got.checksum, want.checksum,
            "{slicing:?}: the multiset changed"
        );
        assert!(got.is_sorted(), "{slicing:?}: not sorted");
        for w in out.windows(2) {
            assert!(w[0][w[0].len() - RECORD_LEN..] <= w[1][..RECORD_LEN]);
        }
        let mean = |sp: f64| {
            let v: Vec<f64> = (0..16)
                .filter(|&i| speeds[i] == sp)
                .map(|i| (out[i].len() / RECORD_LEN) as f64)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let fmean = finish.iter().sum::<f64>() / 16.0;
        let fmax = finish.iter().copied().fold(0.0, f64::max);
        println!(
            "{:7} | {at:15.3} | {:15.3} | {:.0} / {:.0} / {:.0} (finish mean {fmean:.3} s, max {fmax:.3} s)",
            format!("{slicing:?}").to_lowercase(),
            fmax / fmean,
            mean(1.0),
            mean(2.0),
            mean(4.0)
        );
        if slicing == Slicing::Speed {
            assert!(mean(4.0) > 2.0 * mean(1.0), "the fast nodes hold more");
        }
    }
}

#[test]
fn a_member_without_its_share_refuses_and_nobody_starts() {
    let input: Vec<Bytes> = (0..16)
        .map(|i| {
            if i == 9 {
                Bytes::new()
            } else {
                Bytes::from(vec![i as u8; RECORD_LEN])
            }
        })
        .collect();
    let config = SimConfig {
        record_deliveries: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 7, |c| {
        c.app = Arc::new(Share(input[c.me.index()].clone()));
    })
    .unwrap();
    let spec = CollectiveSpec::HeteroSort(HsortSpec {
        rows: 4,
        cols: 4,
        record_len: RECORD_LEN as u32,
        slicing: Slicing::Equal,
        speeds: Vec::new(),
        backups: 1,
    });
    sim.input_at(NodeId(0), 0.0, start_input(spec, Bytes::new(), None))
        .unwrap();
    for i in 0..16 {
        sim.input_at(NodeId(i), 30.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    let refused = m.nodes[9]
        .reports
        .iter()
        .any(|r| matches!(r.report, ReportData::CollectiveRefused { .. }));
    assert!(refused, "node 9 has no records and must refuse");
    let complete = m.nodes[0].reports.iter().find_map(|r| match r.report {
        ReportData::CollectiveComplete {
            finished, failed, ..
        } => Some((finished, failed)),
        _ => None,
    });
    assert_eq!(complete.map(|(f, _)| f), Some(0), "{complete:?}");
}
