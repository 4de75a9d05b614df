//! windrose-proto's integration tests, one binary: each file of tests/ is a module here
//! (`cargo test -p windrose-proto --test integration -- FILE::` runs one file's tests).
//! One binary links the crate and its dependencies once instead of once per file, which
//! was most of the test build's time.

/// Helpers several files share, compiled once.
mod support {
    pub mod host_outputs;
}
mod bittorrent;
mod broadcast;
mod broadcast_handoff;
mod common;
mod frame;
mod ghs;
mod ghs_repair;
mod heterosort;
mod host;
mod host_relay;
mod mob;
mod mst_rows;
mod mst_service;
mod pieces;
mod sample_sort;
mod scatter;
mod scatter_plan;
mod tree_multicast;
mod weather;
