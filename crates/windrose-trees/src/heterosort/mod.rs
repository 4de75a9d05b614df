//! HeteroSort's pure algorithms (Yang et al., "Reconfigurable Parallel Sorting and Load
//! Balancing on a Beowulf Cluster: HeteroSort"): the snake sort order over a conceptual torus,
//! each node's trading partners and the order in which it hands them slices of its sorted data,
//! and SOO, the genetic algorithm that picks a cheap sort path over an irregular mesh.
//!
//! - [`torus`]: the snake order on any `R x C` torus, the four partners with wrap-around
//!   (sequence, transcoil and transedge partners), Table 1's odd- and even-cycle lists.
//! - [`slices`](mod@slices): how a node cuts its sorted data among its list (equal or weighted).
//! - [`mesh`]: a physical mesh with failed nodes and failed or slow links, and the
//!   store-and-forward cost between every two live nodes.
//! - [`paper`]: Fig. 1 and Table 1 as printed, and ours beside them.
//! - [`soo`](mod@soo): the genetic algorithm; [`exact`]: Held-Karp search, the check on small
//!   meshes.
//!
//! # Numbering
//! In code a torus node *is* its 0-based snake rank: node 0 ends with the lowest keys and node
//! `R*C - 1` with the highest. The paper numbers the same nodes from 1;
//! [`Torus::from_paper`] and [`Torus::paper_list`] convert, so the golden tests read like
//! Fig. 1 and Table 1. Mesh nodes (SOO's input) are physical ids, row-major on a grid.
//!
//! ```
//! use windrose_trees::heterosort::{Cycle, Torus};
//!
//! let t = Torus::new(4, 4).unwrap();
//! // Fig. 1: node 7's partners are 2, 6, 8 and 10 (paper numbers).
//! assert_eq!(t.paper_list(7, Cycle::Odd).unwrap(), vec![2, 6, 7, 8, 10]);
//! assert_eq!(t.paper_list(7, Cycle::Even).unwrap(), vec![6, 2, 7, 10, 8]);
//!
//! // SOO on a 3 x 3 mesh whose centre failed: the best sort path walks the ring, 7 steps of 1.
//! use rand::SeedableRng;
//! use rand_chacha::ChaCha8Rng;
//! use windrose_trees::heterosort::{exact_sort_path, soo, Mesh, SooParams, StoreForward};
//!
//! let mut mesh = Mesh::grid(3, 3).unwrap();
//! mesh.fail_node(4).unwrap();
//! let sf = StoreForward::new(&mesh).unwrap();
//! let path = soo(&sf, &SooParams::default(), &mut ChaCha8Rng::seed_from_u64(1)).unwrap();
//! assert_eq!(path.cost, 7);
//! assert_eq!(exact_sort_path(&sf).unwrap().cost, 7);
//! ```

pub mod exact;
pub mod mesh;
pub mod paper;
pub mod slices;
pub mod soo;
pub mod torus;

pub use exact::{exact_sort_path, EXACT_MAX_NODES};
pub use mesh::{Mesh, SortPath, StoreForward};
pub use slices::{equal_slices, weighted_slices, Slice};
pub use soo::{soo, SooParams};
pub use torus::{Cycle, Direction, Neighbours, Partner, PartnerKind, Position, Torus};

/// Something wrong with a HeteroSort input. Every variant names the node, link or parameter at
/// fault and the size of the torus or mesh it was checked against.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum HeteroSortError {
    /// A torus with no row or no column.
    #[error("a torus needs at least 1 row and 1 column, got {rows} x {cols}")]
    EmptyTorus { rows: usize, cols: usize },
    /// A torus or mesh whose node count overflows `usize`.
    #[error("a {rows} x {cols} grid has too many nodes to number")]
    TooLarge { rows: usize, cols: usize },
    /// A torus node (0-based snake rank) out of range.
    #[error("node {node} is outside the {rows} x {cols} torus (nodes 0 to {last})", last = rows * cols - 1)]
    NodeOutsideTorus {
        node: usize,
        rows: usize,
        cols: usize,
    },
    /// A paper (1-based) node number out of range.
    #[error(
        "paper node {number} is outside the {rows} x {cols} torus (paper numbers 1 to {n})",
        n = rows * cols
    )]
    PaperNumberOutside {
        number: usize,
        rows: usize,
        cols: usize,
    },
    /// A grid position out of range.
    #[error("position (row {row}, column {col}) is outside the {rows} x {cols} grid")]
    PositionOutside {
        row: usize,
        col: usize,
        rows: usize,
        cols: usize,
    },
    /// A mesh with no node at all.
    #[error("a mesh needs at least one node")]
    EmptyMesh,
    /// A mesh node id out of range.
    #[error("node {node} is outside the mesh of {nodes} nodes (ids 0 to {last})", last = nodes - 1)]
    NodeOutsideMesh { node: usize, nodes: usize },
    /// A link from a node to itself.
    #[error("node {node} cannot be linked to itself")]
    SelfLink { node: usize },
    /// Two nodes with no link (bus) between them in the mesh.
    #[error("nodes {a} and {b} have no link between them in the mesh")]
    NotALink { a: usize, b: usize },
    /// A link cost of zero: store-and-forward never moves data for free.
    #[error("link {a}-{b}: a cost must be at least 1, got 0")]
    ZeroLinkCost { a: usize, b: usize },
    /// Every node of the mesh has failed.
    #[error("every node of the mesh has failed: there is nothing to sort on")]
    NoLiveNodes,
    /// Failed nodes or links cut the live nodes into parts no path can join.
    #[error(
        "live nodes {a} and {b} cannot reach each other: failed nodes or links split the mesh"
    )]
    Split { a: usize, b: usize },
    /// A sort path that names a failed node or one outside the mesh.
    #[error("the sort path names node {node}, which is not a live node of the mesh")]
    NotLive { node: usize },
    /// A sort path that visits a node twice.
    #[error("the sort path visits node {node} twice (at steps {first} and {second})")]
    Repeated {
        node: usize,
        first: usize,
        second: usize,
    },
    /// A sort path that leaves out a live node.
    #[error("the sort path leaves out live node {node}")]
    Missing { node: usize },
    /// Too many live nodes for exact search.
    #[error("exact search handles at most {max} live nodes, the mesh has {live}")]
    TooManyForExact { live: usize, max: usize },
    /// A genetic-algorithm parameter out of range.
    #[error("SOO parameter {what} must be {requirement}, got {value}")]
    Parameter {
        what: &'static str,
        requirement: &'static str,
        value: String,
    },
    /// A grid-only operation on a mesh that was not built as a grid.
    #[error("the mesh was not built as a grid: it has no rows and columns")]
    NotAGrid,
    /// Slice weights that are empty or all zero.
    #[error("slice weights must hold at least one positive weight, got {weights:?}")]
    NoWeight { weights: Vec<u64> },
}
