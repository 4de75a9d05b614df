//! Bench binary: the MOB paper's Fig. 4 point in the simulator — 4 clusters of 16 nodes on the
//! seed-002 testbed (fast links, 20 ms round trips), 600 MB from a root in A in 256 KiB pieces —
//! for MOB (ours, then the paper's piece choice and request depth: `MobConfig::paper`), then
//! BitTorrent and Balanced Multicasting on the same platform and data.
//!
//! ```text
//! cargo bench -p windrose-sim --bench mob [-- --runs N --mb M --piece-kib K]
//! ```
//!
//! Prints per protocol the median wall time of building and running the simulation (goal for
//! MOB: under 5 s), the simulated throughput, its fraction of the max-flow bound and the WAN
//! payload, then MOB's ratios to the others. The manifest of the data (600 MB of zeros) is
//! built once, outside the timed part, as a sweep would share it.

mod support;
use std::time::Instant;
use support::{arg, median};
use windrose_model::NodeId;
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::MulticastSpec;
use windrose_sim::engine::SimConfig;
use windrose_sim::multicast::{
    run_multicast, seed002, spec_for, MulticastOutcome, MulticastProtocol, MulticastRun, SharedData,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once without it: then
    // only smoke-run a small multicast.
    let smoke = !args.iter().any(|a| a == "--bench");
    let runs = arg(&args, "--runs", if smoke { 1 } else { 5 }) as usize;
    let mb = arg(&args, "--mb", if smoke { 8 } else { 600 });
    let piece = arg(&args, "--piece-kib", if smoke { 64 } else { 256 }) << 10;

    let p = seed002::platform(
        [16; 4],
        &seed002::FAST_WAN_MB_S,
        seed002::LATENCY_20MS_RTT_S,
        seed002::MYRINET_BYTES_S,
    );
    let t = Instant::now();
    let data = SharedData::zeros(mb * 1_000_000, piece as u32).expect("a manifest");
    println!(
        "seed 002 Fig. 4 point: {} nodes (4 clusters x 16), fast links, {} MB in {} KiB pieces \
         ({} pieces); manifest built in {:.3} s",
        p.node_count(),
        mb,
        piece >> 10,
        data.manifest.piece_count(),
        t.elapsed().as_secs_f64()
    );
    let mut results: Vec<(&str, MulticastOutcome, f64)> = Vec::new();
    for (label, protocol) in [
        ("mob", MulticastProtocol::Mob),
        ("mob-paper", MulticastProtocol::Mob),
        ("bittorrent", MulticastProtocol::BitTorrent),
        ("balanced", MulticastProtocol::Balanced),
    ] {
        let mut walls = Vec::with_capacity(runs);
        let mut last = None;
        for _ in 0..runs {
            let start = Instant::now();
            let spec = match spec_for(protocol, &p, NodeId(0)) {
                Ok(MulticastSpec::Mob(_)) if label == "mob-paper" => {
                    MulticastSpec::Mob(MobConfig::paper())
                }
                Ok(s) => s,
                Err(e) => {
                    println!("{protocol}: cannot plan: {e}");
                    break;
                }
            };
            match run_multicast(&MulticastRun {
                platform: &p,
                changes: &[],
                root: NodeId(0),
                data: &data,
                spec: &spec,
                seed: 2,
                config: SimConfig::default(),
                bound_completion_s: None,
            }) {
                Ok((o, _)) => {
                    walls.push(start.elapsed().as_secs_f64());
                    assert!(o.all_complete(), "{protocol}: a node missed data");
                    last = Some(o);
                }
                Err(e) => {
                    println!("{protocol}: cannot run: {e}");
                    break;
                }
            }
        }
        let Some(o) = last else { continue };
        let wall = median(&mut walls);
        println!(
            "{label:>10}: wall median {wall:.3} s over {} runs (min {:.3}, max {:.3}); \
             {:.3} MB/s simulated, {:.1} % of the {:.3} MB/s bound; WAN payload {:.2} x the \
             data; {} events",
            walls.len(),
            walls[0],
            walls[walls.len() - 1],
            o.throughput_mb_s.unwrap_or(0.0),
            100.0 * o.fraction_of_bound.unwrap_or(0.0),
            o.bound_bytes_s / 1e6,
            o.wan_payload_bytes as f64 / o.data_bytes as f64,
            o.events
        );
        results.push((label, o, wall));
    }
    if let Some((_, mob, mob_wall)) = results.iter().find(|r| r.0 == "mob") {
        for (p, o, w) in results.iter().filter(|r| r.0 != "mob") {
            println!(
                "MOB / {p}: throughput x {:.2}, wall x {:.2}",
                mob.throughput_mb_s.unwrap_or(0.0) / o.throughput_mb_s.unwrap_or(f64::NAN),
                mob_wall / w
            );
        }
    }
}
