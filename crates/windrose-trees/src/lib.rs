//! Pure tree algorithms of windrose: binomial positions, Balanced-Path construction, adaptive
//! binomial trees with incremental costs and the four swapping strategies of Figueira & Mendes,
//! and the static trees later layers compare against (MPICH-like binomial, MagPIe-like,
//! minimum spanning tree, maximum-bottleneck tree, flat tree, chain), all named by one
//! [`TreeAlgorithm`]. Besides trees: divisible-load scheduling ([`dlt`]), multicast plans and
//! bounds ([`multicast`]), and HeteroSort's snake order, trading partners and SOO sort-path
//! optimiser ([`heterosort`]).
//!
//! No clocks, no I/O, no global state: every function takes its costs (a
//! [`windrose_model::LinkCosts`]) and, where it draws random numbers, a seeded RNG.
//!
//! ```
//! use windrose_model::{fixtures, LinkCostsMut, NodeId, Overlay};
//! use windrose_trees::adaptive::{AdaptiveTree, Strategy};
//!
//! // The paper's Figure 1: Balanced-Path over Table 1, rooted at node 0; cost 3 hops.
//! let costs = fixtures::table1();
//! let mut tree = AdaptiveTree::balanced_path(&costs, NodeId(0)).unwrap();
//! assert_eq!(tree.cost(), 3.0);
//!
//! // The link 0-3 becomes 10 hops slower; Path_Swapping repairs the tree.
//! let mut now = Overlay::new(&costs);
//! now.set_cost(NodeId(0), NodeId(3), 10.0).unwrap();
//! let report = tree.on_link_cost_change(&now, NodeId(0), NodeId(3), Strategy::Path).unwrap();
//! assert!(report.final_cost < report.cost_after_change);
//! ```

pub mod adaptive;
pub mod algorithm;
pub mod balanced_path;
pub mod binomial;
pub mod dlt;
pub mod heterosort;
pub mod multicast;
pub mod names;
pub mod segtree;
pub mod sharing;
pub mod static_trees;
pub mod tree;

pub use algorithm::TreeAlgorithm;
pub use names::UnknownName;
pub use tree::{Tree, TreeError};
