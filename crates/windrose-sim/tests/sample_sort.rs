//! The sample sort baseline through Hosts in the simulator, on the same 16-Host 4-cluster
//! platform, records and node speeds as HeteroSort's test (`heterosort.rs`): the members end
//! with the sorted set, a contiguous range each in id order, and the three sorts' completion
//! times are printed side by side (`--nocapture`).

use crate::support::sort;

use bytes::Bytes;
use sort::{assert_sorted_set, platform, run_sort, shares, summary_of, units, SortCase};
use windrose_model::records::RECORD_LEN;
use windrose_model::NodeId;
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::heterosort::{HsortSpec, Slicing};
use windrose_proto::sample_sort::SampleSortSpec;
use windrose_sim::engine::RunLimits;

/// Runs `spec` started by member 3; returns (completion time at the initiator, each member's
/// delivered records in rank order).
fn run(spec: CollectiveSpec, speeds: &[f64], input: &[Bytes]) -> (f64, Vec<Bytes>) {
    let r = run_sort(SortCase {
        platform: platform(),
        spec,
        input,
        // One unit of speed sorts and merges 20 MB/s, as in HeteroSort's test.
        compute_bytes_s: units(speeds),
        initiator: NodeId(3),
        leave_at_s: 60.0,
        limits: RunLimits::default(),
    });
    (r.complete_s, r.delivered)
}

#[test]
fn sixteen_hosts_sample_sort_their_records_beside_heterosort() {
    let speeds: Vec<f64> = (0..16).map(|i| [1.0, 2.0, 4.0][i % 3]).collect();
    let input = shares(16, 5);
    let want = summary_of(&input);
    let hsort = |slicing| {
        CollectiveSpec::HeteroSort(HsortSpec {
            rows: 4,
            cols: 4,
            record_len: RECORD_LEN as u32,
            slicing,
            speeds: speeds.clone(),
            backups: 0,
            compress: windrose_proto::sort_zip::Compress::None,
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
        assert_sorted_set(name, &input, &out);
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
