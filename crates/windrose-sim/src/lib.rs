//! The deterministic discrete-event driver of windrose (being built).
//!
//! - [`network`]: the flow-level network model — connections as FIFO flows over a
//!   [`Platform`](windrose_model::platform::Platform), max-min fair (optionally RTT-weighted)
//!   sharing by progressive filling, per-message latency, capacities and latencies that change
//!   over time. Validated against SimGrid (`validation/` at the workspace root).
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! use windrose_model::NodeId;
//! use windrose_sim::network::{Network, SharingPolicy};
//!
//! let p = Platform::builder()
//!     .cluster(ClusterSpec::uniform(2, 1e6, 1e9, 0.0))
//!     .build()
//!     .unwrap();
//! let mut net = Network::new(p, SharingPolicy::MaxMin);
//! net.send(0.0, NodeId(0), NodeId(1), 2_000_000, 0).unwrap();
//! assert_eq!(net.run_until_idle()[0].at, 2.0);
//! ```

pub mod network;
