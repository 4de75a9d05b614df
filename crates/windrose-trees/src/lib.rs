//! Pure tree algorithms of windrose: binomial positions, Balanced-Path construction, adaptive
//! binomial trees with incremental costs and the four swapping strategies of Figueira & Mendes,
//! and the static trees later layers compare against (MPICH-like binomial, MagPIe-like,
//! minimum spanning tree, maximum-bottleneck tree, flat tree).
//!
//! No clocks, no I/O, no global state: every function takes its costs (a
//! [`windrose_model::LinkCosts`]) and, where it draws random numbers, a seeded RNG.

pub mod adaptive;
pub mod balanced_path;
pub mod binomial;
pub mod segtree;
pub mod static_trees;
pub mod tree;

pub use static_trees::StaticAlgo;
pub use tree::{Tree, TreeError};
