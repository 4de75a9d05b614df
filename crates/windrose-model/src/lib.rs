//! The network model of windrose: who the nodes are, which cluster each belongs to, and what a
//! link between two of them costs (hops, latency in ms, or bandwidth in MB/s).
//!
//! Algorithms never read files or clocks; they take a [`LinkCosts`] and ask it for costs. Two
//! implementations cover the cases we meet:
//! - [`DenseCostMatrix`]: every pair stored (f32 or f64), for measured or generated topologies;
//! - [`ClusterCosts`]: per-cluster tables plus sparse per-pair overrides, O(N + C²) memory, for
//!   large N.
//!
//! Measurements of the links as a run goes ([`measurements`]) feed NWS-style forecasters
//! ([`forecast`]): each series gets a forecast of its next value with an error estimate, chosen
//! among simple predictors by their errors so far, and restarted when the level changes.
//!
//! Files of sort-benchmark records (100 bytes, a 10-byte key) are generated, checksummed and
//! checked by [`records`]: a seeded generator whose record `i` depends on `(seed, i)` alone,
//! an order-independent checksum, and summaries that combine across consecutive parts.
//!
//! ```
//! use windrose_model::{CostUnit, DenseCostMatrix, LinkCosts, NodeId};
//! let m = DenseCostMatrix::<f64>::from_rows(CostUnit::Hops, &[
//!     vec![0.0, 2.0],
//!     vec![2.0, 0.0],
//! ]).unwrap();
//! assert_eq!(m.cost(NodeId(0), NodeId(1)), 2.0);
//! ```

pub mod cluster;
pub mod costs;
pub mod dense;
pub mod error;
pub mod fixtures;
pub mod forecast;
pub mod ids;
pub mod load;
pub mod measurements;
pub mod overlay;
pub mod platform;
pub mod random;
pub mod records;
pub mod units;

pub use cluster::ClusterCosts;
pub use costs::{CostUnit, LinkCosts, LinkCostsMut};
pub use dense::{CostValue, DenseCostMatrix};
pub use error::ModelError;
pub use forecast::{Forecast, ForecastConfig, ForecastError, Forecaster, Method};
pub use ids::{ClusterId, NodeId};
pub use load::{
    load_clusters, load_costs, parse_clusters_csv, parse_clusters_toml, parse_cost_row,
    parse_costs_csv, parse_costs_toml, write_costs_csv, CostModel,
};
pub use overlay::Overlay;
pub use platform::{
    load_platform, parse_platform_toml, ClusterSpec, LinkId, Platform, PlatformBuilder,
    PlatformError, Route,
};
pub use units::{format_size, parse_size, SizeError};
