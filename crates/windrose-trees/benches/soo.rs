//! SOO (HeteroSort's sort-path genetic algorithm, default parameters) against exact search:
//! Fig. 2's 5 x 5 mesh with two failed nodes, a 4 x 4 mesh with random bus costs and two
//! failed nodes (where Held-Karp is the alternative), and a 16 x 16 mesh with 16 failed nodes.
//! Group `soo`, ids `fig2-5x5`, `4x4-ga`, `4x4-exact`, `16x16-ga`.
//!
//! Run: `cargo bench -p windrose-trees --bench soo`.

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use windrose_trees::heterosort::{exact_sort_path, soo, Mesh, SooParams, StoreForward};

/// A `side x side` grid with bus costs 1 to 9 and `failed` distinct nodes failed, redrawn
/// until the live nodes stay connected.
fn mesh(side: usize, failed: usize, unit: bool, seed: u64) -> StoreForward {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    loop {
        let mut m = Mesh::grid(side, side).expect("a grid");
        if !unit {
            for (a, b, _) in m.live_links() {
                m.set_link_cost(a, b, rng.gen_range(1..=9)).expect("a link");
            }
        }
        let mut down = 0;
        while down < failed {
            let n = rng.gen_range(0..side * side);
            if m.is_live(n) {
                m.fail_node(n).expect("a node");
                down += 1;
            }
        }
        if let Ok(sf) = StoreForward::new(&m) {
            return sf;
        }
    }
}

fn soo_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("soo");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(3));
    let params = SooParams::default();
    let fig2 = mesh(5, 2, true, 1);
    group.bench_function("fig2-5x5", |b| {
        b.iter(|| soo(&fig2, &params, &mut ChaCha8Rng::seed_from_u64(7)).expect("a path"))
    });
    let small = mesh(4, 2, false, 2);
    group.bench_function("4x4-ga", |b| {
        b.iter(|| soo(&small, &params, &mut ChaCha8Rng::seed_from_u64(7)).expect("a path"))
    });
    group.bench_function("4x4-exact", |b| {
        b.iter(|| exact_sort_path(&small).expect("a path"))
    });
    let big = mesh(16, 16, false, 3);
    group.bench_function("16x16-ga", |b| {
        b.iter(|| soo(&big, &params, &mut ChaCha8Rng::seed_from_u64(7)).expect("a path"))
    });
    group.finish();
}

criterion_group!(benches, soo_bench);
criterion_main!(benches);
