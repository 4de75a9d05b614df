//! Balanced-Path construction (O(N²)) on 16,384 nodes: the paper's dense random hops
//! (f32, 0..=10, ~1 GiB of matrix) and the cluster model (N/64 clusters). Group
//! `balanced_path/16384`, ids `cluster` and `dense-hops`; each build well under 1 s.
//!
//! Run: `cargo bench -p windrose-trees --bench balanced_path`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, SamplingMode};
use std::time::Duration;
use windrose_model::{LinkCosts, NodeId};
use windrose_trees::balanced_path::balanced_path;

#[allow(dead_code)]
mod support;

fn bench_one(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    costs: &impl LinkCosts,
) {
    group.bench_function(id, |b| {
        b.iter(|| balanced_path(costs, black_box(NodeId(0))).expect("valid costs"))
    });
}

fn balanced_path_16k(c: &mut Criterion) {
    let n = support::BP_SIZE;
    let mut group = c.benchmark_group(format!("balanced_path/{n}"));
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(5));

    let cluster = support::cluster_costs(n, &mut support::rng(0x200_0000 | n as u64));
    bench_one(&mut group, "cluster", &cluster);
    drop(cluster);

    let dense = support::dense_hops(n, &mut support::rng(0x300_0000 | n as u64));
    bench_one(&mut group, "dense-hops", &dense);
    group.finish();
}

criterion_group!(benches, balanced_path_16k);
criterion_main!(benches);
