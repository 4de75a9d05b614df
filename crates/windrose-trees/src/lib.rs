//! Pure tree algorithms of windrose: binomial positions, Balanced-Path construction, adaptive
//! binomial trees with incremental costs and the four swapping strategies of Figueira & Mendes,
//! and the static trees later layers compare against (MPICH-like binomial, MagPIe-like,
//! minimum spanning tree, maximum-bottleneck tree, flat tree).
//!
//! No clocks, no I/O, no global state: every function takes its costs (a
//! [`windrose_model::LinkCosts`]) and, where it draws random numbers, a seeded RNG.

pub mod binomial;
pub mod tree;

pub use tree::{Tree, TreeError};
