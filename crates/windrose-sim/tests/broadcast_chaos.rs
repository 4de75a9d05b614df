//! Tree broadcasts whose receivers crash, and some restart (issue 8): 1000 seeded runs on random
//! small platforms (2-4 clusters of 2-6 nodes, random capacities and latencies) over a random
//! tree shape (binomial, chain or flat, random root), random segment and frame sizes, with 1 to
//! 3 receivers failing at random times and about half of them restarting a while later with
//! nothing. The orphaned subtrees re-attach to the root and a restarted node asks the root for
//! the whole message, so every run must end (bounded simulated time) with no refused input,
//! and every node that did not fail, and every restarted one, must hold exactly the root's
//! bytes. `WINDROSE_CHAOS_RUNS=N` changes the number of runs, `WINDROSE_CHAOS_SEED=S` runs only
//! seed S (with `WINDROSE_CHAOS_LOG=FILE`, its event log is written to FILE).

use crate::support::chaos;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::Platform;
use windrose_model::NodeId;
use windrose_proto::tree_broadcast::{BroadcastConfig, TreeBroadcast};
use windrose_proto::TransferId;
use windrose_sim::engine::{broadcast_with, MemoryLog, RunLimits, SimConfig};
use windrose_sim::metrics::NodeOutcome;
use windrose_trees::static_trees::{binomial_all, chain_all, flat_all};
use windrose_trees::Tree;

struct Case {
    platform: Platform,
    tree: Tree,
    data: Bytes,
    config: BroadcastConfig,
    failures: Vec<(NodeId, f64)>,
    restarts: Vec<(NodeId, f64)>,
    limit_s: f64,
}

fn case(seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (platform, slowest) = chaos::random_platform(&mut rng);
    let n = platform.node_count();
    let root = NodeId(rng.gen_range(0..n as u32));
    let tree = match rng.gen_range(0..3) {
        0 => binomial_all(n, root),
        1 => chain_all(n, root),
        _ => flat_all(n, root),
    }
    .unwrap();
    let len = rng.gen_range(0..=200_000usize);
    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let mut config = BroadcastConfig::new(TransferId(3), rng.gen_range(1..=64 * 1024));
    config.max_frame_payload = rng.gen_range(512..=32 * 1024);
    // Depth times the data over the slowest link, plus round trips: about a run's length.
    let span_s = n as f64 * len as f64 / slowest + 0.5;
    let k = rng.gen_range(1..=3usize).min(n - 1);
    let mut victims: Vec<NodeId> = Vec::new();
    while victims.len() < k {
        let v = NodeId(rng.gen_range(0..n as u32));
        if v != root && !victims.contains(&v) {
            victims.push(v);
        }
    }
    let failures: Vec<(NodeId, f64)> = victims
        .into_iter()
        .map(|v| (v, rng.gen_range(0.0..0.3 * span_s)))
        .collect();
    let mut restarts = Vec::new();
    for &(v, at) in &failures {
        if rng.gen_bool(0.5) {
            restarts.push((v, at + rng.gen_range(0.0..0.1 * span_s)));
        }
    }
    Case {
        platform,
        tree,
        data: Bytes::from(data),
        config,
        failures,
        restarts,
        limit_s: 50.0 * span_s + 100.0,
    }
}

fn run_case(seed: u64) -> Result<usize, String> {
    let c = case(seed);
    let sim_config = SimConfig {
        record_deliveries: true,
        limits: RunLimits {
            max_time_s: Some(c.limit_s),
            max_events: Some(50_000_000),
        },
        ..SimConfig::default()
    };
    let mut sim = broadcast_with(
        c.platform.clone(),
        &c.tree,
        c.data.clone(),
        c.config,
        sim_config,
    )
    .map_err(|e| e.to_string())?;
    for &(v, at) in &c.failures {
        sim.fail_node_at(v, at).map_err(|e| e.to_string())?;
    }
    for &(v, at) in &c.restarts {
        let m = TreeBroadcast::rejoin(v, &c.tree, c.config).map_err(|e| e.to_string())?;
        sim.restart_node_at(Box::new(m), at)
            .map_err(|e| e.to_string())?;
    }
    let log = chaos::log_path().map(|_| MemoryLog::new());
    if let Some(l) = &log {
        sim.set_event_log(Box::new(l.clone()));
    }
    let result = sim.run();
    if let (Some(l), Some(path)) = (&log, chaos::log_path()) {
        std::fs::write(path, l.contents()).map_err(|e| e.to_string())?;
    }
    let m = result.map_err(|e| format!("the run did not end: {e}"))?;
    if !m.errors.is_empty() {
        return Err(format!("refused inputs: {:?}", m.errors));
    }
    let mut restarted_finished = 0;
    for &node in c.tree.nodes() {
        let restarted = c.restarts.iter().any(|r| r.0 == node);
        if c.failures.iter().any(|f| f.0 == node) && !restarted {
            continue;
        }
        let nm = m.node(node).ok_or("no metrics")?;
        if nm.outcome != NodeOutcome::Finished {
            return Err(format!(
                "node {node} ended {:?} ({:?})",
                nm.outcome, nm.abort_reason
            ));
        }
        restarted_finished += usize::from(restarted);
        if node == c.tree.root() {
            continue;
        }
        let mut got = Vec::with_capacity(c.data.len());
        for (offset, bytes) in sim.delivered(node) {
            if *offset as usize != got.len() {
                return Err(format!(
                    "node {node}: delivery at {offset}, expected {}",
                    got.len()
                ));
            }
            got.extend_from_slice(bytes);
        }
        if got[..] != c.data[..] {
            return Err(format!(
                "node {node} holds {} bytes that are not the root's {}",
                got.len(),
                c.data.len()
            ));
        }
    }
    Ok(restarted_finished)
}

#[test]
fn broadcast_receivers_complete_whatever_relays_fail_or_restart() {
    let seeds = chaos::seeds();
    let mut failed = Vec::new();
    let mut restarted = 0;
    for &seed in &seeds {
        match run_case(seed) {
            Ok(r) => restarted += r,
            Err(e) => failed.push(format!("seed {seed}: {e}")),
        }
    }
    eprintln!(
        "broadcast: {} runs, {restarted} restarted nodes finished",
        seeds.len()
    );
    chaos::assert_no_failures("broadcast", &failed, seeds.len());
    if seeds.len() >= 100 {
        assert!(restarted >= seeds.len() / 5, "only {restarted} restarts");
    }
}
