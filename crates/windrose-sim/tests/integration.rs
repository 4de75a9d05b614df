//! windrose-sim's integration tests, one binary: each file of tests/ is a module here
//! (`cargo test -p windrose-sim --test integration -- FILE::` runs one file's tests).
//! One binary links the crate and its dependencies once instead of once per file, which
//! was most of the test build's time.

/// Helpers several files share, compiled once.
mod support {
    pub mod chaos;
    pub mod durations;
    pub mod max_min;
    pub mod scenario_text;
    pub mod sort;
    pub mod three_sites;
    pub mod validation;
}
mod announce_relay;
mod auto;
mod auto_weather;
mod bittorrent;
mod broadcast_chaos;
mod calibrated_scatter;
mod engine;
mod engine_common;
mod engine_driver;
mod heterosort;
mod host;
mod host_chaos;
mod mob;
mod mst_live;
mod multicast;
mod multicast_chaos;
mod network;
mod network_modes;
mod pair_latency;
mod sample_sort;
mod scenario;
mod simgrid;
mod tree_multicast;
mod weather;
mod weather_members;
mod weather_midrun;
mod workloads;
