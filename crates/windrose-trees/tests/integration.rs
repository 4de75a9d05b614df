//! windrose-trees's integration tests, one binary: each file of tests/ is a module here
//! (`cargo test -p windrose-trees --test integration -- FILE::` runs one file's tests).
//! One binary links the crate and its dependencies once instead of once per file, which
//! was most of the test build's time.

mod adaptive_props;
mod balanced_multicast;
mod bound;
mod dlt;
mod heterosort_paper;
mod heterosort_soo;
mod heterosort_torus;
mod paper_000;
mod sharing_props;
mod static_trees;
mod tree_algorithm;
