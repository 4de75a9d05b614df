//! Our RTT-weighted network against SimGrid 3.32 (CM02, TCP-gamma 0, no cross-traffic, Full
//! update): the same scenarios run through `validation/simgrid_flows.py` and through
//! [`Network`](windrose_sim::network::Network) must give every message the same arrival time to
//! 1e-6 relative. See `validation/README.md` for the SimGrid set-up and what differs.
//!
//! When no Python with the `simgrid` module is found (`$WINDROSE_PYTHON`, `python3`,
//! `/usr/bin/python3`), each test prints that it skipped and passes. CI installs
//! `python3-simgrid`, so there they run for real.
//!
//! The 1024-host scenario (`generated_1024_hosts_4096_flows`) takes a few seconds in SimGrid; it
//! runs in release builds (`cargo test --release`, as CI does) and is ignored in debug builds,
//! where the 64-host variant still runs.

use crate::support::validation;

use validation::*;
use windrose_sim::network::SharingPolicy;

const TOLERANCE: f64 = 1e-6;

fn compare(path: &std::path::Path) {
    let Some(python) = simgrid_python() else {
        eprintln!(
            "skipped: no Python with the simgrid module (apt-get install python3-simgrid, or set \
             WINDROSE_PYTHON); {} not compared",
            path.display()
        );
        return;
    };
    let scenario = Scenario::load(path);
    let (ours, stats) = run_ours(&scenario, SharingPolicy::RttWeighted);
    let sg = run_simgrid(&python, path);
    let (err, (i, k)) = max_relative_error(&ours, &sg);
    eprintln!(
        "{}: {} messages, max relative difference {err:.3e} (flow {i} message {k}: ours {} s, \
         SimGrid {} s); {} solves; SimGrid run {:.3} s",
        scenario.name,
        scenario.message_count(),
        ours[i][k],
        sg.completions
            .iter()
            .find(|c| (c.0, c.1) == (i, k))
            .map_or(f64::NAN, |c| c.2),
        stats.solves,
        sg.run_wall_s,
    );
    assert!(
        err <= TOLERANCE,
        "{}: flow {i} message {k} differs by {err:e} relative (> {TOLERANCE:e})",
        scenario.name
    );
}

fn scenario(name: &str) -> std::path::PathBuf {
    validation_dir().join("scenarios").join(name)
}

#[test]
fn three_flows_share_one_wan_link() {
    compare(&scenario("three_flows.toml"));
}

#[test]
fn three_flows_with_wan_capacity_halved_at_10s() {
    compare(&scenario("three_flows_halved.toml"));
}

#[test]
fn duplex_exchange() {
    compare(&scenario("duplex.toml"));
}

#[test]
fn flows_with_different_route_latencies() {
    compare(&scenario("latencies.toml"));
}

#[test]
fn capacities_going_up_and_down_on_every_kind_of_link() {
    compare(&scenario("capacity_changes.toml"));
}

fn generated(params: GenParams, label: &str) {
    let path = scratch_file(label);
    std::fs::write(&path, generate(params)).expect("write the generated scenario");
    compare(&path);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn generated_64_hosts_256_flows() {
    generated(SMALL, "generated-small");
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "heavy: runs in release builds (cargo test --release)"
)]
fn generated_1024_hosts_4096_flows() {
    generated(LARGE, "generated-large");
}
