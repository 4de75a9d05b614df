//! Sans-IO protocol state machines of windrose and their wire format.
//!
//! Every distributed protocol of windrose is a [`Protocol`]: a state machine that takes one
//! [`Input`] at a time (the run starts, a message arrives from a peer, a timer fires, the
//! application answers a command, a send completed, a peer was declared failed) together with
//! the current time, and pushes the resulting [`Output`]s (send a message, set or cancel a timer,
//! deliver data, ask the application to compute, report progress, finished or aborted) to a
//! buffer the driver owns. Machines never touch sockets, threads, clocks or global state, so the
//! very same code is driven by the discrete-event simulator (`windrose-sim`) and by the tokio
//! runtime (`windrose-net`); the [`frame`] module defines the bytes both exchange.
//!
//! - [`host`]: the [`Host`](host::Host), one per node: many collectives at once keyed by
//!   transfer, the link prober as a service, and the session of a long-lived group (a
//!   collective started by any member: announce, ready, go, reports; heartbeats and failure
//!   detection; leaving). Drivers drive a `Host` like any machine.
//! - [`weather`]: what the host measures on its links (round trips from the prober, bandwidth
//!   metered from its own sends), forecasts (NWS-style) and shares with the group, and the
//!   group's view a root plans from; [`planner`]: broadcast trees planned from that view at
//!   every broadcast under a policy (static, rebuild, adapt with seed 000's swaps).
//! - [`choice`]: the automatic choice of protocol (tree broadcast, MOB or Balanced
//!   Multicasting) from the message size and the group's view, with predictions and an
//!   explanation.
//! - [`collective`]: the registry of collectives: one serde
//!   [`CollectiveSpec`](collective::CollectiveSpec) every front end parses into, one
//!   descriptor per protocol, [`build`](collective::build) for every driver, and the checklist
//!   for adding a protocol.
//! - [`frame`]: versioned, length-prefixed frames carrying any protocol's messages by (family,
//!   kind): each protocol module owns its message enum and codec ([`frame::Family`]), the
//!   frame module only the header, the bounds checks and the dispatch; an incremental,
//!   bounds-checked [`Decoder`] with zero-copy payloads; [`encoded_len`](frame::encoded_len)
//!   for the simulator's accounting.
//! - [`tree_broadcast`]: pipelined broadcast of a message over any `windrose_trees::Tree`.
//! - [`scatter`]: divisible-load scatter following a `windrose_trees::dlt::Schedule`, with the
//!   exact byte split every node computes.
//! - [`ghs`]: the distributed minimum spanning tree (Gallager-Humblet-Spira): the machine, its
//!   messages and codec, their frame family ([`ghs::GhsFrame`]), the collective's
//!   [`Protocol`] adapter ([`ghs::GhsProtocol`]), its spec and the result every node delivers;
//!   [`ghs_repair`]: keeping it the exact MST after weight changes (local repairs in epochs)
//!   and failures (a new GHS generation), with its frames ([`ghs_repair::MstFrame`]);
//!   [`ghs_timed`]: both in the message-delay model of GHS's analysis (messages by kind, time,
//!   the critical chain's delays), for thousands of nodes;
//!   [`mst_service`]: the Host's live MST built and repaired from the links' forecasts, the
//!   trees of `mst-live` broadcasts.
//! - [`heterosort`]: HeteroSort, the distributed sort over a conceptual torus in snake order:
//!   every member starts with its own records and ends with a sorted contiguous range.
//! - [`sample_sort`]: the sample sort baseline over the same records: equal-weight splitters
//!   from regular samples, one all-to-all exchange.
//! - [`probe`]: round-trip measurement with ping/pong frames, for the runtime's link probes.
//! - [`app`]: the application's effects behind one trait ([`Application`](app::Application):
//!   deliver, compute, verify), BLAKE3 by default ([`Blake3App`](app::Blake3App)).
//! - [`node`]: the trait, inputs, outputs and the driver's contract; [`time`]: [`Time`].
//!
//! # Why `handle(now, input, &mut outputs)` and not quinn-style `poll_*`
//!
//! quinn-proto's connection takes events with `handle_*` and is then *polled* (`poll_transmit`,
//! `poll_timeout`, `poll`) because it produces packets lazily: congestion control and pacing
//! decide when the next packet may leave, so the driver asks whenever its socket can take one.
//! raft-rs instead collects everything a step produced into a `Ready` batch the caller performs
//! (then calls `advance`, because raft must persist entries before it sends). Our machines are
//! closer to raft: every input has a small, finite set of consequences decided at that instant,
//! and transport pacing belongs to the driver (TCP in the runtime, the flow model in the
//! simulator). So `handle` pushes all consequences at once, in the order they must be performed:
//! - a discrete-event engine turns each output into events stamped `now` right away, with no
//!   "did I forget to poll something" loop after every event, and the order of sends is the
//!   protocol's (children in send order), which keeps runs deterministic;
//! - a tokio driver performs the same list: writes frames to per-peer queues, arms timers, hands
//!   data to the application;
//! - the buffer ([`Outputs`]) is the driver's and reused, so a step allocates nothing once warm;
//! - there is no persistence step, hence no `advance`.
//!
//! Where a protocol does want to wait for the transport (the divisible-load model sends to one
//! child after the other), it says so explicitly: a send carries a `notify` id and the driver
//! answers [`Input::SendComplete`], which both drivers can provide.
//!
//! # Time and randomness
//!
//! Time is the [`Time`] the driver passes in (nanoseconds since the run's start). Machines that
//! draw random numbers (today the [`probe::LinkProber`]'s nonces) take a seeded
//! `rand_chacha::ChaCha8Rng` at construction; drivers derive it from the run seed and the node id
//! with [`node_rng`], so a simulated run is reproducible bit for bit. The broadcast and the
//! scatter are deterministic and take none.
//!
//! # Example: a broadcast on a chain, driven by a ten-line driver
//!
//! ```
//! use std::collections::VecDeque;
//! use bytes::Bytes;
//! use windrose_model::NodeId;
//! use windrose_proto::frame::{self, Decoder, TransferId};
//! use windrose_proto::tree_broadcast::{BroadcastConfig, TreeBroadcast};
//! use windrose_proto::{Input, Output, Outputs, Protocol, Time};
//! use windrose_trees::Tree;
//!
//! // A chain 0 -> 1 -> 2; the root broadcasts 10 bytes in segments of 4.
//! let n = NodeId;
//! let tree = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(1))]).unwrap();
//! let config = BroadcastConfig::new(TransferId(1), 4);
//! let message = Bytes::from_static(b"windrose!!");
//! let mut nodes: Vec<TreeBroadcast> = (0..3)
//!     .map(|i| {
//!         let data = (i == 0).then(|| message.clone());
//!         TreeBroadcast::new(n(i), &tree, data, config).unwrap()
//!     })
//!     .collect();
//!
//! // Instant delivery through the real wire format, one FIFO queue, time standing still.
//! let mut queue: VecDeque<(NodeId, Input)> = (0..3).map(|i| (n(i), Input::Start)).collect();
//! let mut out = Outputs::new();
//! let mut received = vec![Vec::new(); 3];
//! while let Some((node, input)) = queue.pop_front() {
//!     nodes[node.index()].handle(Time::ZERO, input, &mut out).unwrap();
//!     for output in out.drain() {
//!         match output {
//!             Output::Send(t) => {
//!                 let mut decoder = Decoder::new();
//!                 decoder.push(&frame::encode(&t.message).unwrap());
//!                 let message = decoder.next_message().unwrap().unwrap();
//!                 queue.push_back((t.to, Input::Message { from: node, message }));
//!             }
//!             Output::Deliver { data, .. } => received[node.index()].extend_from_slice(&data),
//!             _ => {}
//!         }
//!     }
//! }
//! assert!(nodes.iter().all(|m| m.is_finished()));
//! assert_eq!(received[2], b"windrose!!");
//! ```

#![warn(missing_docs)]

pub mod app;
pub mod bittorrent;
pub mod choice;
pub mod collective;
pub mod frame;
pub mod ghs;
pub mod ghs_repair;
pub mod ghs_timed;
pub mod heterosort;
pub mod host;
pub mod mob;
pub mod mst_service;
pub mod multicast;
pub mod node;
pub mod pieces;
pub mod planner;
pub mod probe;
pub mod sample_sort;
pub mod scatter;
pub mod scatter_plan;
pub mod sort_zip;
pub mod time;
pub mod tree_broadcast;
pub mod tree_multicast;
pub mod weather;

pub use frame::{Decoder, FrameError, Message, MessageKind, TransferId};
pub use node::{
    node_rng, AbortReason, Command, ComputeTask, ComputedShare, Input, LinkPrice, Output, Outputs,
    Protocol, ProtocolError, Report, SendId, SetupError, Status, TaskId, TimerId, Transmit,
};
pub use time::Time;
