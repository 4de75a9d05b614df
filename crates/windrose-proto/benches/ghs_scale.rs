//! Bench binary: classic GHS (a test window of 1) on a complete graph of N nodes in the
//! message-delay model, the growth rows of `windrose reproduce mst-collectives --full` alone
//! (issue 17). The graph is the reproduction's: clusters of 32 nodes, a seeded cost model
//! (0.05-0.5 ms inside a cluster, 5-100 ms between clusters, seed N), every message taking its
//! link's latency, the tree checked against the central MST.
//!
//! ```text
//! cargo bench -p windrose-proto --bench ghs_scale [-- 1024 2048 4096 --no-check]
//! ```
//!
//! Prints per N: the edges, wall seconds to build the machines (each node sorts its edges) and
//! to run GHS, the simulated time, the chain and the messages by kind (these must not change
//! with the machine's layout: the same messages in the same order). Run one N per process
//! under `/usr/bin/time -f "%U %S %e %M"` for its CPU seconds and peak memory. Without
//! `--bench` (`cargo test --benches`) it runs N = 64 only.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use windrose_model::{ClusterCosts, ClusterId, CostUnit, LinkCosts, NodeId};
use windrose_proto::ghs::Ghs;
use windrose_proto::ghs_timed::TimedRun;
use windrose_trees::TreeAlgorithm;

/// Processes per cluster (the reproduction's `SCALE_CLUSTER`).
const CLUSTER: usize = 32;

/// The reproduction's `scale_costs`, draw for draw.
fn costs(n: usize, seed: u64) -> ClusterCosts {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let c = n.div_ceil(CLUSTER);
    let intra = (0..c)
        .map(|_| f64::from(rng.gen_range(5u32..=50)) / 100.0)
        .collect();
    let upper: Vec<f64> = (0..c * (c - 1) / 2)
        .map(|_| f64::from(rng.gen_range(50u32..=1000)) / 10.0)
        .collect();
    let at = |lo: usize, hi: usize| upper[lo * c - lo * (lo + 1) / 2 + hi - lo - 1];
    let inter = (0..c)
        .map(|x| {
            (0..c)
                .map(|y| if x == y { 0.0 } else { at(x.min(y), x.max(y)) })
                .collect()
        })
        .collect();
    let clusters = (0..n).map(|v| ClusterId::from(v / CLUSTER)).collect();
    ClusterCosts::new(CostUnit::LatencyMs, clusters, intra, inter).expect("a valid cost model")
}

fn row(n: usize, check: bool) {
    let costs = costs(n, n as u64);
    let ms = |a: NodeId, b: NodeId| if a == b { 0.0 } else { costs.cost(a, b) };
    let setup = Instant::now();
    let nodes = (0..n as u32)
        .map(|a| {
            Ghs::new(
                NodeId(a),
                (0..n as u32)
                    .filter(|&b| b != a)
                    .map(|b| (NodeId(b), ms(NodeId(a), NodeId(b)) / 1e3)),
            )
            .expect("valid edges")
        })
        .collect::<Vec<Ghs>>();
    let mut run = TimedRun::new(nodes, |a, b| ms(a, b) / 1e3);
    let setup_s = setup.elapsed().as_secs_f64();
    let wall = Instant::now();
    run.wake_all();
    let span = run.run().expect("a correct run");
    let run_s = wall.elapsed().as_secs_f64();
    let mut checked = "unchecked";
    if check {
        let mut got: Vec<(u32, u32)> = run
            .nodes()
            .iter()
            .flat_map(|g| {
                let me = g.node().0;
                g.branch_edges()
                    .into_iter()
                    .filter(move |(to, _)| to.0 > me)
                    .map(move |(to, _)| (me, to.0))
            })
            .collect();
        got.sort_unstable();
        let tree = TreeAlgorithm::Mst
            .build(&costs, None, NodeId(0))
            .expect("a central MST");
        let mut want: Vec<(u32, u32)> = tree
            .edges()
            .iter()
            .map(|&(a, b)| (a.0.min(b.0), a.0.max(b.0)))
            .collect();
        want.sort_unstable();
        assert!(run.nodes().iter().all(Ghs::is_done), "{n}: not all done");
        assert_eq!(got, want, "GHS on {n} nodes did not end at the central MST");
        checked = "= central MST";
    }
    let kinds: Vec<String> = span
        .by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "n {n} edges {} setup_s {setup_s:.3} run_s {run_s:.3} sim_s {:.9} chain {} messages {} ({}) {checked}",
        n * (n - 1) / 2,
        span.seconds(),
        span.chain,
        span.messages(),
        kinds.join(", "),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let check = !args.iter().any(|a| a == "--no-check");
    let mut sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = if bench {
            vec![1024, 2048, 4096]
        } else {
            vec![64]
        };
    }
    for n in sizes {
        row(n, check);
    }
}
