//! The deterministic discrete-event driver of windrose: the protocol machines and the `Host`s
//! the runtime runs, unchanged, over a flow-level network model, so a failing run replays
//! exactly from its seed.
//!
//! - [`network`]: the flow-level network model — connections as FIFO flows over a
//!   [`Platform`](windrose_model::platform::Platform), max-min fair (optionally RTT-weighted)
//!   sharing by progressive filling (whole components while they are small, then only the
//!   region whose rates can change), per-message latency, capacities and latencies (per site
//!   pair or per node pair) that change over time. Validated against SimGrid (`validation/` at
//!   the workspace root).
//! - [`auto`]: the automatic choice of protocol checked against simulating every candidate
//!   (issue 16's grid).
//! - [`engine`]: the discrete-event engine that runs one `windrose_proto` machine per node over
//!   the network (messages charged their encoded size, timers, send completions, compute time,
//!   failure injection, timed network changes, run limits, a JSONL event log), and the
//!   ready-made [`broadcast`](engine::broadcast) and [`scatter`](engine::scatter) runs.
//! - [`group`]: a long-lived group in the simulator: one `windrose_proto` `Host` per node (the
//!   session and many collectives at once, exactly as the runtime runs them), collectives
//!   started by applications at given times ([`Simulation::input_at`](engine::Simulation::input_at)).
//! - [`scenario`]: scenario files (platform, timed changes, mayhem, failures, node speeds, and a
//!   workload: a broadcast, scatter or multicast; a sort of generated records through Hosts
//!   with its check; or a broadcast whose protocol the automatic choice picks) and
//!   [`run_scenario`](scenario::run_scenario), behind `windrose sim run`.
//! - [`multicast`]: piece-based multicasts (MOB, BitTorrent, Balanced Multicasting, MagPIe)
//!   run on a platform, with per-node completion, WAN payload and the fraction of the max-flow
//!   bound they reach.
//! - [`metrics`]: what a run measured (per-node outcomes and finish times, bytes delivered,
//!   bytes per link, throughput, reports), serializable for `--json`.
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

pub mod auto;
pub mod engine;
pub mod group;
pub mod metrics;
pub mod multicast;
pub mod network;
mod prefetch;
pub mod scenario;
