//! Bench binary: the 1024-host, 4-cluster, 4096-flow validation scenario in our network and in
//! SimGrid 3.32, measured in the same run.
//!
//! ```text
//! cargo bench -p windrose-sim --bench network_vs_simgrid [-- --runs N --simgrid-runs M --small]
//! ```
//!
//! Prints the median wall time of each side and their ratio, and checks the two agree (the
//! largest relative difference in arrival times). For SimGrid the time is that of
//! `engine.run()` as measured inside the Python script (platform construction excluded, the
//! Python actors that issue the communications included), and separately the whole process.
//! Without a Python that has the `simgrid` module, only our side is measured.

mod support;
#[path = "../tests/support/validation.rs"]
mod validation;

use std::time::Instant;
use support::{arg, median};
use validation::*;
use windrose_sim::network::SharingPolicy;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once without it: then
    // only smoke-run the small scenario.
    let smoke = !args.iter().any(|a| a == "--bench");
    let params = if smoke || args.iter().any(|a| a == "--small") {
        SMALL
    } else {
        LARGE
    };
    let runs = arg(&args, "--runs", if smoke { 1 } else { 7 });
    let sg_runs = arg(&args, "--simgrid-runs", if smoke { 0 } else { 3 });

    let text = generate(params);
    let path = scratch_file("bench-network");
    std::fs::write(&path, &text).expect("write the scenario");
    let scenario = Scenario::load(&path);
    println!(
        "scenario {}: {} nodes, {} flows, {} messages",
        scenario.name,
        scenario.platform.node_count(),
        scenario.flows.len(),
        scenario.message_count()
    );

    let mut ours_s = Vec::new();
    let mut ours = None;
    for _ in 0..runs {
        let t = Instant::now();
        let r = run_ours(&scenario, SharingPolicy::RttWeighted);
        ours_s.push(t.elapsed().as_secs_f64());
        ours = Some(r);
    }
    let (done, stats) = ours.expect("at least one run");
    let ours_med = median(&mut ours_s);
    println!(
        "windrose: median {:.4} s over {runs} runs ({} events, {} solves, {:.0} connections and {:.0} links \
         re-shared per solve on average, {} rate changes)",
        ours_med,
        stats.events,
        stats.solves,
        stats.solved_connections as f64 / stats.solves.max(1) as f64,
        stats.solved_links as f64 / stats.solves.max(1) as f64,
        stats.rate_changes
    );

    if sg_runs == 0 {
        let _ = std::fs::remove_file(&path);
        return;
    }
    let Some(python) = simgrid_python() else {
        println!("simgrid: skipped (no Python with the simgrid module)");
        let _ = std::fs::remove_file(&path);
        return;
    };
    let mut run_s = Vec::new();
    let mut proc_s = Vec::new();
    let mut worst = (0.0, (0, 0));
    for _ in 0..sg_runs {
        let t = Instant::now();
        let sg = run_simgrid(&python, &path);
        proc_s.push(t.elapsed().as_secs_f64());
        run_s.push(sg.run_wall_s);
        worst = max_relative_error(&done, &sg);
    }
    let sg_med = median(&mut run_s);
    let proc_med = median(&mut proc_s);
    println!(
        "simgrid:  median {sg_med:.4} s engine.run() over {sg_runs} runs ({proc_med:.4} s whole \
         process)"
    );
    println!(
        "ratio: windrose is {:.1}x faster than SimGrid's engine.run() ({:.1}x than the whole \
         process); max relative difference in arrival times {:.2e} (flow {} message {})",
        sg_med / ours_med,
        proc_med / ours_med,
        worst.0,
        worst.1 .0,
        worst.1 .1
    );
    let _ = std::fs::remove_file(&path);
}
