//! Swap evaluation: the adaptive tree's incremental `swap_cost` (segment tree, O(degree·log N))
//! against the paper's full recomputation of every root path (O(N)), at N = 1,024, 16,384 and
//! 131,072 nodes.
//!
//! Groups `swap_eval/incremental/<N>` and `swap_eval/full/<N>` use the cluster model (N/64
//! clusters, seeded random latencies) and a seeded random placement of the nodes;
//! `.../dense-bp-1024` is the paper's setting (random hops 0..=10, Balanced-Path tree). One
//! criterion iteration is one swap evaluation, cycling through 1,024 pre-drawn pairs, so the
//! reported times are per swap. Before timing, each workload is checked once: both methods give
//! bit-identical costs on every pair (a correctness check, not a timing assertion).
//!
//! Run: `cargo bench -p windrose-trees --bench swap_eval`. For the speedup ratio measured in one
//! run, see `cargo run --release -p windrose-trees --example swap_speedup`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use std::time::Duration;
use windrose_model::LinkCosts;

#[allow(dead_code)]
mod support;

use support::{full_swap_cost, Workload};

/// Times one workload both ways, under `id` in both groups.
fn bench_workload<C: LinkCosts>(c: &mut Criterion, id: &str, w: &mut Workload<C>) {
    let n = w.tree.len();
    let pairs = &w.pairs;

    let mut group = c.benchmark_group("swap_eval/incremental");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let (costs, tree) = (&w.costs, &mut w.tree);
    group.bench_function(BenchmarkId::from_parameter(id), |b| {
        let mut i = 0;
        b.iter(|| {
            let (x, y) = pairs[i];
            i = (i + 1) % pairs.len();
            tree.swap_cost(costs, black_box(x), black_box(y))
                .expect("valid swap")
        })
    });
    group.finish();

    let mut group = c.benchmark_group("swap_eval/full");
    group
        .sample_size(if n > 100_000 { 10 } else { 20 })
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut nodes = w.tree.nodes().to_vec();
    let mut path = vec![0.0; n];
    group.bench_function(BenchmarkId::from_parameter(id), |b| {
        let mut i = 0;
        b.iter(|| {
            let (x, y) = pairs[i];
            i = (i + 1) % pairs.len();
            full_swap_cost(costs, &mut nodes, &mut path, black_box(x), black_box(y))
        })
    });
    group.finish();
}

fn swap_eval(c: &mut Criterion) {
    for n in support::SIZES {
        let mut w = support::cluster_workload(n);
        bench_workload(c, &n.to_string(), &mut w);
    }
    let mut w = support::dense_bp_workload(1_024);
    bench_workload(c, &format!("{}-1024", w.name), &mut w);
}

criterion_group!(benches, swap_eval);
criterion_main!(benches);
