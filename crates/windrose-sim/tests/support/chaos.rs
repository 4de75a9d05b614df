//! What the chaos tests (`broadcast_chaos.rs`, `multicast_chaos.rs`) share: the random small
//! platforms they run on and the loop over seeds with its environment variables.
#![allow(dead_code)]

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::ClusterId;

/// 2-4 clusters of 2-6 nodes, node links of 2-20 MB/s, access links of 20-200 MB/s, WAN links
/// of 0.5-5 MB/s with 1-30 ms of latency, all drawn from `rng`; with the slowest WAN capacity.
pub fn random_platform(rng: &mut ChaCha8Rng) -> (Platform, f64) {
    let clusters = rng.gen_range(2..=4usize);
    let mut b = Platform::builder();
    for _ in 0..clusters {
        b = b.cluster(ClusterSpec::uniform(
            rng.gen_range(2..=6),
            rng.gen_range(2e6..2e7),
            rng.gen_range(2e7..2e8),
            rng.gen_range(1e-5..1e-3),
        ));
    }
    let mut slowest = f64::INFINITY;
    for x in 0..clusters as u32 {
        for y in (0..clusters as u32).filter(|&y| y != x) {
            let bytes_s = rng.gen_range(5e5..5e6);
            slowest = slowest.min(bytes_s);
            b = b.wan(
                ClusterId(x),
                ClusterId(y),
                bytes_s,
                rng.gen_range(1e-3..3e-2),
            );
        }
    }
    (b.build().unwrap(), slowest)
}

/// The seeds to run: `0..WINDROSE_CHAOS_RUNS` (default 1000), or only `WINDROSE_CHAOS_SEED`.
pub fn seeds() -> Vec<u64> {
    let runs: u64 = std::env::var("WINDROSE_CHAOS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    match std::env::var("WINDROSE_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(s) => vec![s],
        None => (0..runs).collect(),
    }
}

/// Fails with the first few failing seeds (each line says how to replay it).
pub fn assert_no_failures(what: &str, failed: &[String], runs: usize) {
    assert!(
        failed.is_empty(),
        "{what}: {} of {runs} chaos runs failed (replay one with WINDROSE_CHAOS_SEED=S):\n{}",
        failed.len(),
        failed
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The event log file asked for with `WINDROSE_CHAOS_LOG`, if any.
pub fn log_path() -> Option<std::ffi::OsString> {
    std::env::var_os("WINDROSE_CHAOS_LOG")
}
