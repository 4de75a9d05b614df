//! Bench binary: incremental swap evaluation against full recomputation, measured in one run.
//!
//! For each workload (the cluster model at N = 1,024, 16,384 and 131,072 with nodes at random
//! positions, and the paper's dense random hops with a Balanced-Path tree at 1,024), it times a
//! batch of pre-drawn swaps each way with `Instant`, 11 times, interleaving the two methods, and
//! prints the median ns per swap of each and their ratio. Then it times Balanced-Path on 16,384
//! nodes (median of 3). Before timing, every workload is checked once: both methods give
//! bit-identical costs on every pair. Nothing here asserts on a time.
//!
//! ```text
//! cargo run --release -p windrose-trees --example swap_speedup            # everything
//! cargo run --release -p windrose-trees --example swap_speedup -- --skip-bp
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};
use windrose_model::{LinkCosts, NodeId};
use windrose_trees::balanced_path::balanced_path;

#[allow(dead_code)]
#[path = "../benches/support/mod.rs"]
mod support;

use support::{full_swap_cost, Workload};

const REPEATS: usize = 11;
const BP_REPEATS: usize = 3;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Median ns/swap of (incremental, full) over [`REPEATS`] interleaved batches.
fn time_workload<C: LinkCosts>(w: &mut Workload<C>) -> (f64, f64) {
    let n = w.tree.len();
    let pairs = &w.pairs;
    // Batches of roughly 10-50 ms each.
    let k_incremental = 1 << 16;
    let k_full = ((1usize << 24) / n).max(64);
    let mut nodes = w.tree.nodes().to_vec();
    let mut path = vec![0.0; n];
    let (mut inc, mut full) = (Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        let start = Instant::now();
        for &(x, y) in pairs.iter().cycle().take(k_incremental) {
            black_box(
                w.tree
                    .swap_cost(&w.costs, black_box(x), black_box(y))
                    .expect("valid swap"),
            );
        }
        inc.push(start.elapsed().as_nanos() as f64 / k_incremental as f64);

        let start = Instant::now();
        for &(x, y) in pairs.iter().cycle().take(k_full) {
            black_box(full_swap_cost(
                &w.costs,
                &mut nodes,
                &mut path,
                black_box(x),
                black_box(y),
            ));
        }
        full.push(start.elapsed().as_nanos() as f64 / k_full as f64);
    }
    (median(inc), median(full))
}

fn time_balanced_path(costs: &impl LinkCosts) -> Duration {
    let mut runs: Vec<Duration> = (0..BP_REPEATS)
        .map(|_| {
            let start = Instant::now();
            black_box(balanced_path(costs, black_box(NodeId(0))).expect("valid costs"));
            start.elapsed()
        })
        .collect();
    runs.sort();
    runs[runs.len() / 2]
}

fn print_row(name: &str, n: usize, (inc, full): (f64, f64)) {
    println!(
        "{name:<10} {n:>8} {inc:>16.1} {full:>16.1} {:>10.0}x",
        full / inc
    );
}

fn main() {
    let skip_bp = std::env::args().skip(1).any(|a| a == "--skip-bp");
    println!(
        "swap evaluation, median of {REPEATS} batches, {} pre-drawn pairs per workload",
        support::PAIRS
    );
    println!(
        "{:<10} {:>8} {:>16} {:>16} {:>11}",
        "workload", "N", "incremental ns", "full ns", "speedup"
    );
    for n in support::SIZES {
        let mut w = support::cluster_workload(n);
        print_row(w.name, n, time_workload(&mut w));
    }
    let mut w = support::dense_bp_workload(1_024);
    print_row(w.name, 1_024, time_workload(&mut w));
    drop(w);

    if skip_bp {
        return;
    }
    let n = support::BP_SIZE;
    println!("\nBalanced-Path construction, N = {n}, median of {BP_REPEATS}");
    let cluster = support::cluster_costs(n, &mut support::rng(0x200_0000 | n as u64));
    println!(
        "{:<10} {:>10.3} s",
        "cluster",
        time_balanced_path(&cluster).as_secs_f64()
    );
    drop(cluster);
    let dense = support::dense_hops(n, &mut support::rng(0x300_0000 | n as u64));
    println!(
        "{:<10} {:>10.3} s",
        "dense-hops",
        time_balanced_path(&dense).as_secs_f64()
    );
}
