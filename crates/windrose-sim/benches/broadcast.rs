//! Bench binary: a 64-node pipelined broadcast of 1 GiB in 256 KiB segments over a MagPIe tree
//! (4 clusters of 16 nodes), through the whole engine (machines, events, flow-level network).
//!
//! ```text
//! cargo bench -p windrose-sim --bench broadcast [-- --runs N --mib M --segment-kib K]
//! ```
//!
//! Prints the median wall time of building and running the simulation (goal: under 2 s), the
//! simulated makespan and the event counts. The payload is 1 GiB of zeros allocated lazily: the
//! simulator never touches the bytes, only slices them.

mod support;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use support::{arg, median};
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{random, ClusterId, NodeId};
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_proto::TransferId;
use windrose_sim::engine::broadcast;
use windrose_sim::network::SharingPolicy;
use windrose_trees::TreeAlgorithm;

/// 4 clusters of 16 nodes: 1 Gb/s node links, 10 Gb/s access links, 0.1 ms inside a cluster;
/// 1 Gb/s WAN links with 10 ms latency.
fn platform() -> Platform {
    let site = ClusterSpec::uniform(16, 1.25e8, 1.25e9, 1e-4);
    Platform::builder()
        .cluster(site)
        .cluster(site)
        .cluster(site)
        .cluster(site)
        .wan_all(1.25e8, 0.01)
        .build()
        .expect("a valid platform")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once without it: then
    // only smoke-run a small broadcast.
    let smoke = !args.iter().any(|a| a == "--bench");
    let runs = arg(&args, "--runs", if smoke { 1 } else { 7 }) as usize;
    let mib = arg(&args, "--mib", if smoke { 16 } else { 1024 });
    let segment = arg(&args, "--segment-kib", 256) << 10;
    let len = mib << 20;

    let p = platform();
    let clusters: Vec<ClusterId> = (0..p.node_count())
        .map(|i| p.cluster_of(NodeId::from(i)))
        .collect();
    // MagPIe reads only the cluster map; the costs just size the tree.
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let costs = random::uniform_hops(&mut rng, p.node_count(), 1);
    let tree = TreeAlgorithm::Magpie
        .build(&costs, Some(&clusters), NodeId(0))
        .expect("a MagPIe tree");
    let cfg = BroadcastConfig::new(TransferId(1), segment);
    println!(
        "pipelined broadcast: {} nodes (4 clusters x 16), MagPIe tree, {} MiB in {} KiB segments, \
         {} frames per edge",
        p.node_count(),
        mib,
        segment >> 10,
        cfg.frames_per_edge(len)
    );

    let mut walls = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let mut sim = broadcast(p.clone(), &tree, len, cfg, SharingPolicy::MaxMin)
            .expect("a valid broadcast");
        let m = sim.run().expect("the broadcast completes");
        walls.push(start.elapsed().as_secs_f64());
        assert!(m.all_finished());
        last = Some(m);
    }
    let m = last.expect("at least one run");
    let wall = median(&mut walls);
    println!(
        "simulated makespan {:.6} s, {} engine events, {} network events, {} messages, {} solves",
        m.makespan_s.unwrap_or(0.0),
        m.events,
        m.network.events,
        m.totals.messages_sent,
        m.network.solves
    );
    let per_solve = |x: u64| x as f64 / m.network.solves.max(1) as f64;
    println!(
        "per solve: {:.2} connections, {:.2} links, {:.2} filling rounds, {:.2} rate changes",
        per_solve(m.network.solved_connections),
        per_solve(m.network.solved_links),
        per_solve(m.network.rounds),
        per_solve(m.network.rate_changes)
    );
    println!(
        "wall time: median {:.3} s over {} runs (min {:.3} s, max {:.3} s); {:.2} M engine events/s",
        wall,
        runs,
        walls[0],
        walls[walls.len() - 1],
        m.events as f64 / wall / 1e6
    );
}
