//! The flow-level network of the simulator: messages over a [`Platform`], bandwidth shared by
//! max-min fairness, capacities and latencies that change over time.
//!
//! # Model
//!
//! - **Connections are flows.** Each directed pair of nodes `(src, dst)` is one connection
//!   carrying its messages in FIFO order, like a TCP connection: message `k + 1` transfers its
//!   bytes only after message `k` has transferred all of its own.
//! - **Latency, then bytes.** A message sent at `s` over a route of latency `L` becomes
//!   *transferable* at `s + L`; its bytes then flow at the rate the sharing gives its connection,
//!   and it is delivered when its last byte has flowed. A message queued behind others on a busy
//!   connection does not pay its latency again once it is transferable: back-to-back messages
//!   stream. A connection is *active* while its head message is transferable; only active
//!   connections take bandwidth.
//! - **Sharing.** The rates of the active connections are the max-min fair allocation over the
//!   links of their [routes](Platform::route), computed by progressive filling. With
//!   [`SharingPolicy::RttWeighted`] it is the weighted max-min allocation with weight
//!   `1 / route latency` (a connection's share of a bottleneck is proportional to its weight),
//!   which is what SimGrid's CM02 model computes; a zero-latency route gets weight 1 (SimGrid
//!   uses a penalty of 1 in that case too).
//! - **Changes.** [`Network::schedule`] changes a link's capacity or a latency at a given time.
//!   A capacity change re-shares the bandwidth from that instant. A latency change applies to
//!   messages sent from that instant on (messages already in flight keep the latency they were
//!   sent with) and, under `RttWeighted`, re-weights the active connections whose route it
//!   touches — as SimGrid does when a link's latency changes. A [pair
//!   latency](Change::PairLatency) changes one connection's latency only (one ordered pair of
//!   nodes, e.g. one process pair of seed 004's Fig. 5); its route and so its share of the
//!   links stay. Each connection keeps its latency, so a send never looks a pair up: pair
//!   latencies cost nothing per message, only when a connection is created or re-latencied.
//!
//! # Time and determinism
//!
//! Time is an `f64` number of seconds since the start of the simulation: SimGrid uses the same
//! representation, which is what lets the validation compare completion times to 1e-6. The
//! network is deterministic: it reads no clock and no randomness, iterates no hash map, and
//! breaks ties between simultaneous events by kind (changes, completions, then latency
//! expiries) and then by connection id (creation order). Deliveries are returned in
//! `(time, message id)` order.
//!
//! # Complexity
//!
//! **Small components are re-shared whole.** Until a solve meets a component of more than
//! [`COMPONENT_LIMIT`] active connections, a solve re-shares the whole component of what changed:
//! the connections reachable from the changed links through the links they share, found breadth
//! first, filled from the full capacities. Nothing is kept between such solves. On a small network
//! this is the cheaper way: a 64-node pipelined broadcast re-shares 2.5 connections over 7.9 links
//! per solve, and keeping every link's ordered set and load up to date at each start, stop and rate
//! change (what the region solves below need) made its bench 1.2x slower than re-sharing the
//! component. The first solve whose component is larger lists every active connection on its links,
//! and from then on, for good, solves re-share regions as below: MOB moves at its first solve from
//! N = 64 on (330 connections start at once there; 1,341 at N = 256).
//! [`Network::set_component_limit`] sets the limit (0: regions from the start). Both compute the
//! max-min allocation; their rates may differ in the last bits.
//!
//! **Past it, sharing is incremental.** A region solve does not re-run progressive filling over the
//! connected component of what changed (SimGrid's lmm "selective update" does that: it re-solves
//! every variable reachable through shared constraints from a modified one). It uses the bottleneck
//! characterization of (weighted) max-min fairness (Bertsekas and Gallager, *Data Networks*, §6.5):
//! a feasible allocation is the max-min one iff every connection crosses a saturated link on which
//! its level `rate · penalty` is the highest. So a solve re-computes a *region*:
//!
//! 1. it starts from the connections whose own terms changed (started, re-weighted, or crossing
//!    a link whose capacity changed) and every connection listed on a saturated link one of
//!    them crosses (without these, the first filling gives such a seed almost nothing and the
//!    check of step 3 adds them anyway, one round later) — a connection that stopped only
//!    leaves its links dirty;
//! 2. it fills the region by progressive filling with the rates of every other connection
//!    taken off the capacities, which keeps the region's links feasible and gives each of the
//!    region's connections a saturated link where it is highest among the region;
//! 3. it checks the links the region crosses and the dirty links (the only links whose load or
//!    levels moved): an outside connection above the level at which the region saturated a
//!    link, or one that had a link as its bottleneck (at its old highest level) when that link
//!    stopped being saturated or its highest level rose, and has no bottleneck left, joins the
//!    region, and with each connection that joins, ahead of the next check, the *top group*
//!    (the connections at the highest level) of every saturated link it crosses, transitively:
//!    those are bottlenecked with it and move when it moves. If any joined, back to 2.
//!
//! The region only grows, so this ends, at worst on the whole component (then it is the old
//! solve). Every connection outside it kept a valid bottleneck, so the result is the max-min
//! allocation. The checks compare loads and levels with a relative slack of 1e-10
//! (`SATURATION_TOL`, rounding of sums); the property tests compare the rates with a filling
//! from scratch to 1e-9 after every event. A connection of the region whose new rate is above
//! its old one by less than 1e-13 of it (`ROUNDING_RISE`: a filling that summed in another
//! order, not a change) keeps its old rate and its completion entry; a lower rate keeps every
//! link feasible.
//!
//! Without the top groups of step 3 the region grows one hop per round, and each round fills
//! the whole region again: while MOB fills the root's cluster (every link there saturated by
//! 256 KiB pieces, every 16-byte Have or Request starting and stopping a connection on them),
//! a solve took 5 rounds and 343 fill-queue pops for 70 connections at N = 1,024; with them
//! 2.2 rounds and 115 pops for 78 connections (2026-11-27; the region grows by the few
//! connections the closure takes that keep their rate). Since the closure follows only top
//! groups of saturated links it stops where the rates stop moving.
//!
//! What makes it cheap: each link keeps its active connections ordered by level (a sorted vector
//! of `(level, id)`) and its load, both updated when a rate changes (the load is summed afresh
//! every 256 updates so that rounding cannot pile up). The filling reads the region's
//! connections of each link from a per-round adjacency, and the checks walk a link's ordered
//! set from the top only as far as the levels they concern. No step reads a whole link's list
//! or a whole component.
//!
//! Per instant with events, with `R` the final region, `H_R ≤ 5 R` its route hops, `T` the
//! links it touches, `k` the filling rounds, `d` the largest number of connections on a link,
//! `A` the set entries the checks walk (connections that join the region or are in it, and the
//! top group of a link that lost saturation) and `E` the event-heap entries (one completion
//! per active connection, plus pending changes and latency expiries):
//!
//! - [`Network::send`]: O(log E) (one hash lookup, one heap push when the connection was idle);
//! - a message completing on a connection whose next message is already transferable: O(log E)
//!   and no re-sharing (the connection keeps its route, weight and rate);
//! - any other instant: one solve, O(k·(H_R + Q·log T) + A·(log d + 5) + C·(5·(log d + m) +
//!   log E)) for the `C ≤ R` connections whose rate changed, with `Q ≤ T + H_R` the fill
//!   queue's entries per round (a binary heap of the region's links, 16 bytes an entry) and
//!   `m` the places a connection moves in a link's level set when its rate changes (usually
//!   a few; at worst `d`). The worst case is the whole component in `R` and `k` up to `R`; in
//!   practice `R` is close to the connections whose rate really changes and `k` about 2-3.
//!
//! None of these terms depends on N by itself. Measured on MOB (4 clusters, 64 MiB in
//! 256 KiB pieces) at N = 1,024: 22.9 connections and 24.7 links re-shared per solve in 2.48
//! rounds on average for 20.8 rate changes (13.4 M rate changes over the run's 644 k solves;
//! [`NetworkStats`] counts them), where the component solve re-shared 606 and 265. Before the
//! region was seeded from saturated links it took 2.69 rounds (2.97 at N = 4,096, now 2.73).
//! 58 % of the solves follow departures only; their first round fills nothing and their
//! region grows along the links whose top connections can rise, one hop per round, which is
//! where the remaining rounds come from. `d` is where N shows through: with 4 clusters every
//! connection between two clusters crosses one of 12 WAN links, and a connection starting on a
//! saturated one changes the rate of every connection bottlenecked there.
//!
//! The top groups of step 3 add `A` entries per solve (the top groups walked, each region
//! connection's links checked once) and cut `k`. Where MOB's time goes as N grows (measured
//! 2026-11-27, 4 clusters, 64 MiB):
//!
//! - **The root's cluster filling up** (the first 0.08 s simulated: 2 M of the 8 M events at
//!   N = 4,096, 8 M of the 32 M at 16,384). Every link of that cluster is saturated by pieces
//!   and every 16-byte Have or Request moves the rates of a cascade of connections: 60-90 rate
//!   changes per solve, on links carrying about 9 connections each. That is the max-min
//!   allocation really changing, not the solver's overhead; it was 78 % of the run's time at
//!   N = 4,096 with 5 rounds per solve, and the top groups cut the rounds to 2.2.
//! - **Thousands of connections on one WAN link** only while every node's Hello to its global
//!   peers crosses (4,096 per link for 25 ms simulated at N = 16,384, all started together, at
//!   one level, ending together). A shared rate per group of connections bottlenecked on one
//!   link at one level would make a start or stop there O(log n) instead of O(members) (each
//!   member's level-set move and completion entry); measured, the whole phase (the root's
//!   cluster filling up beside it) took 86 s of a 1,012 s run under load, so it is not built.
//!   Counted again 2026-11-28 (README, scale section; data/scale/sharedrate-counts.csv): at
//!   N = 4,096 the connections crossing a link with more than 256 make 0.02 % of the rate
//!   changes while the root's cluster fills up (two thirds of the CPU time) and 5.9 % after,
//!   and the connections a solve moves take 2.5 per distinct new level there (5.5 after), so
//!   grouping by shared rate has little to save (the same at 16,384, where a solve's
//!   region and rate changes are as at 4,096). What grows with N is the price of each
//!   touch of state: from 1,024 to 4,096 the CPU time per event grows 1.61x in a profile, the
//!   solve 1.63x, and `send`, `next_head` and the completion heap, whose work per event is
//!   fixed, 1.7x to 2.7x.
//! - **Memory**: past N = 4,096 the per-event costs of the engine, the protocol and the solve
//!   are cache misses on per-node and per-connection state (0.6 GB at N = 16,384; 1.6 GB
//!   before MOB's machines shared their mobs, which took 16 % off that run's CPU time), which
//!   is why the events per CPU second still fall with N although no term above grows with it.
//!
//! What a solve touches per connection is kept in two dense arrays, `Hot` (route, weight,
//! rate: one cache line) and `Sched` (progress: 24 bytes), so that at
//! N = 4,096 (60 k connections) they stay in cache; the rest of a connection (its queue and
//! statistics) is read only when a message is sent or delivered. The checks' questions are
//! answered from denser arrays still: whether a connection is in the region (4 bytes a
//! connection) and a link's capacity, load, highest level and level set (`LinkSet`, one cache
//! line a link, apart from the filling's scratch in `Link`). Measured 2026-11-27 (MOB, the
//! builds before and after run at once on a loaded machine, user seconds), this split changed
//! nothing measurable: 5.86 s against 5.87 at N = 1,024 (medians of 3 pairs), 39.8 against
//! 39.0 at 4,096 (one pair). What those lines wait for was not pinned down further; the level
//! sets' buffers are still read there.
//!
//! A link's byte count (a statistic, added to at every settle and completion) lives in its
//! `LinkSet` line, which a settle has just read to move the connection in the level set; in
//! `Link` it was a miss of its own at N = 4,096 (4 % of the solve in a profile, none at
//! 1,024). A connection's positions in its links' unordered `flows` lists live in a dense
//! array of their own (`Network::pos`, 20 bytes a connection), and each list entry names the
//! route hop as well, so a stop that moves another connection in a list writes its position
//! without reading its route or its `Conn`. Measured 2026-11-28 (MOB, before and after run at
//! once, user seconds, load average 7-21): 7.34 against 7.40 at N = 1,024, 53.30 against 52.48
//! at 4,096 (medians of 3 pairs): within the noise, kept for the layout (the rest of a
//! connection is now read only when a message is sent, delivered or dropped).
//!
//! The loops over a solve's region (settling, filling, `grow_ahead`) ask for the `Hot` and
//! `Sched` lines and the completion-heap position of the connection `AHEAD` (4) places further
//! on (the `prefetch` module), so that their misses overlap instead of coming one after the
//! other; the engine does the same for the next event's node. Measured 2026-11-27 (MOB, the
//! builds before and after run at once, user seconds, load average 8-13 on 2 cores): 8.06
//! against 7.79 at N = 1,024 (medians of 3 pairs, ratio 0.97; with MOB's peer index as a
//! sorted vector), at 4,096 52.4 against 50.1 (the prefetches alone) and 56.0 against 52.7
//! (both), ratios 0.95 and 0.94; at 16,384 (both, one pair, load 16) 324.3 against 299.8,
//! ratio 0.92: the growth exponent 1,024 -> 16,384 moves from 1.33 to 1.32, far from the 1.2
//! issue 20 asks. Event logs are byte-identical.
//!
//! A second stage (2026-11-28): the same loops ask, `SOON` (2) places ahead, for the lines of
//! the links on that connection's route (its `Hot` line, asked for two iterations earlier, has
//! come back by then): `Link` in the filling, `LinkSet` in the settling and in `grow_ahead`.
//! At N = 4,096 the first read of each such link was a miss (the filling's first touch of a
//! link 4 % of the solve, `grow_ahead`'s saturation check another 4 %). Measured (MOB, the
//! builds before and after run at once, user seconds, load average 5-19): 7.52 against 7.38
//! at N = 1,024 (medians of 3 pairs, ratio 0.98; faster in each pair), 59.91 against 56.50 at
//! 4,096 (medians of 3 pairs, ratio 0.94; 0.94-0.97 in each pair). Event logs are
//! byte-identical.
//!
//! Connections are numbered in creation order. Numbering them by sender instead (indices
//! given out in blocks of 16 per node, so a node's connections share the lines of `Sched`,
//! `pos` and `in_region`) was measured 2026-11-28 (MOB, builds alternated, CPU seconds, load
//! 10-13): 7.72 against 7.82 at N = 1,024 (medians of 3 pairs), 48.6-49.1 against 48.6 at
//! 4,096: no change, and it changes the event logs (indices break ties), so it was not kept
//! (data/scale/conn-block.patch; README, scale section).
//!
//! Completion times live in an indexed 4-ary heap with one entry per active connection, keyed
//! `(time, id)`: a rate change moves the connection's entry in place (up when it completes
//! sooner, down when later), O(log E), and nothing stale is ever kept or popped. Changes and
//! latency expiries live in a binary heap of `(time, kind, id)` entries; the next event is the
//! smaller of the two heaps' tops in the order `(time, kind, id)`, the order a single heap
//! gave. (Until 2026-11-27 completions were pushed afresh at every rate change and older
//! entries skipped as stale when they surfaced: at MOB N = 4,096 popping that heap was 14 % of
//! the run. Event logs are byte-identical across the change.)
//! Connections outside the region keep their rates and their heap entries untouched: the
//! remaining bytes of a connection are only brought up to date when its rate changes (lazy
//! settlement). The bench `network_vs_simgrid` measures a 1024-node, 4096-flow scenario against
//! SimGrid, the bench `scale` every protocol at N = 64 ... 16,384.
//!
//! # Example
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! use windrose_model::NodeId;
//! use windrose_sim::network::{Network, SharingPolicy};
//!
//! // One cluster of three nodes, 1000 bytes/s per node link, 1 ms between nodes.
//! let p = Platform::builder()
//!     .cluster(ClusterSpec::uniform(3, 1000.0, 1e6, 0.001))
//!     .build()
//!     .unwrap();
//! let mut net = Network::new(p, SharingPolicy::MaxMin);
//! // Nodes 0 and 1 both send 500 bytes to node 2: they share its downlink.
//! let a = net.send(0.0, NodeId(0), NodeId(2), 500, 7).unwrap();
//! let b = net.send(0.0, NodeId(1), NodeId(2), 500, 8).unwrap();
//! let done = net.run_until_idle();
//! assert_eq!(done.len(), 2);
//! assert_eq!((done[0].id, done[1].id), (a, b));
//! assert!((done[0].at - (0.001 + 1.0)).abs() < 1e-12); // latency + 500 B at 500 B/s
//! assert_eq!(done[1].tag, 8);
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use windrose_model::platform::{LinkId, Platform, PlatformError};
use windrose_model::{ClusterId, NodeId};

use crate::prefetch::prefetch;

mod completion_heap;
mod fill_queue;
use completion_heap::CompletionHeap;
use fill_queue::FillQueue;

/// How active connections share the links they cross.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SharingPolicy {
    /// Plain max-min fairness: every connection has the same weight.
    MaxMin,
    /// Weighted max-min fairness with weight `1 / route latency` (SimGrid's CM02 sharing); a
    /// zero-latency route has weight 1.
    RttWeighted,
}

impl SharingPolicy {
    /// The *penalty* of a connection (the inverse of its weight): its rate on a bottleneck at
    /// fill level `λ` is `λ / penalty`. Same convention as SimGrid's lmm solver.
    fn penalty(self, latency_s: f64) -> f64 {
        match self {
            SharingPolicy::MaxMin => 1.0,
            SharingPolicy::RttWeighted if latency_s > 0.0 => latency_s,
            SharingPolicy::RttWeighted => 1.0,
        }
    }
}

/// Identifies a message; ids are handed out in send order, from 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub u64);

/// A message that has arrived.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered {
    /// The id [`Network::send`] returned.
    pub id: MessageId,
    /// Sender.
    pub src: NodeId,
    /// Receiver.
    pub dst: NodeId,
    /// The caller's tag, returned unchanged.
    pub tag: u64,
    /// Size of the message.
    pub bytes: u64,
    /// When it was sent, seconds.
    pub sent_at: f64,
    /// When its last byte arrived, seconds.
    pub at: f64,
}

/// A message discarded by [`Network::drop_node`] before it was delivered.
#[derive(Clone, Debug, PartialEq)]
pub struct Dropped {
    /// The id [`Network::send`] returned.
    pub id: MessageId,
    /// Sender.
    pub src: NodeId,
    /// Receiver.
    pub dst: NodeId,
    /// The caller's tag, returned unchanged.
    pub tag: u64,
    /// Size of the message.
    pub bytes: u64,
    /// When it was sent, seconds.
    pub sent_at: f64,
}

/// A timed change of the platform; see [`Network::schedule`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Change {
    /// A link's capacity becomes `bytes_s` (positive, finite).
    Capacity {
        /// The link.
        link: LinkId,
        /// New capacity, bytes/s.
        bytes_s: f64,
    },
    /// A cluster's intra-cluster latency becomes `latency_s`.
    IntraLatency {
        /// The cluster.
        cluster: ClusterId,
        /// New latency, seconds.
        latency_s: f64,
    },
    /// The latency of the WAN link `from → to` becomes `latency_s`.
    WanLatency {
        /// Source cluster.
        from: ClusterId,
        /// Destination cluster.
        to: ClusterId,
        /// New latency, seconds.
        latency_s: f64,
    },
    /// The latency of the messages from node `from` to node `to`, and no others, becomes
    /// `latency_s` ([`Platform::set_pair_latency`]): it replaces their route's sum of link
    /// latencies from then on, whatever later changes the route's links get. Their route and
    /// the capacities it shares stay as they were. One direction; schedule the reverse pair
    /// too for both.
    PairLatency {
        /// Sender.
        from: NodeId,
        /// Receiver.
        to: NodeId,
        /// New latency, seconds.
        latency_s: f64,
    },
}

/// What is wrong with a call to the network.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum NetworkError {
    /// A node outside the platform.
    #[error("unknown node {node}: the platform has {node_count} nodes ({})", windrose_model::error::ids_in_words(*.node_count))]
    UnknownNode {
        /// The id given.
        node: NodeId,
        /// Number of nodes.
        node_count: usize,
    },
    /// A message from a node to itself (there is no route).
    #[error("node {node} cannot send a message to itself over the network")]
    SelfSend {
        /// The node.
        node: NodeId,
    },
    /// A time that is NaN or infinite.
    #[error("time {time} is not a finite number of seconds")]
    BadTime {
        /// The time given.
        time: f64,
    },
    /// A time before the network's clock.
    #[error("time {time} s is in the past: the network is at {now} s")]
    InThePast {
        /// The time given.
        time: f64,
        /// The network's clock.
        now: f64,
    },
    /// A send at a time beyond pending events: advance the network first.
    #[error("cannot act at {time} s: an event is pending at {pending} s; call advance_to({pending}) first")]
    EventsPending {
        /// The time given.
        time: f64,
        /// The earliest pending event.
        pending: f64,
    },
    /// An invalid change (unknown link or cluster, bad value).
    #[error(transparent)]
    Platform(#[from] PlatformError),
}

/// Statistics of one connection (one directed pair of nodes that has carried a message).
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionStats {
    /// Sender.
    pub src: NodeId,
    /// Receiver.
    pub dst: NodeId,
    /// Messages sent so far.
    pub messages_sent: u64,
    /// Messages delivered so far.
    pub messages_delivered: u64,
    /// Bytes of the messages sent so far.
    pub bytes_sent: u64,
    /// Bytes of the messages delivered so far.
    pub bytes_delivered: u64,
    /// Messages discarded by [`Network::drop_node`].
    pub messages_dropped: u64,
    /// Total time the connection has been active (had a transferable message), seconds.
    pub active_s: f64,
    /// Current rate, bytes/s (0 when idle).
    pub rate_bytes_s: f64,
}

/// Statistics of one link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkStats {
    /// The link.
    pub link: LinkId,
    /// Current capacity, bytes/s.
    pub capacity_bytes_s: f64,
    /// Bytes carried so far.
    pub bytes: f64,
    /// Sum of the rates of the connections crossing it now, bytes/s.
    pub rate_bytes_s: f64,
    /// Number of active connections crossing it now.
    pub active_connections: usize,
}

/// Work counters, to see what the incremental re-sharing saves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkStats {
    /// Events handled (changes, completions, latency expiries).
    pub events: u64,
    /// Progressive-filling runs (at most one per instant with events).
    pub solves: u64,
    /// Sum over solves of the connections in the re-shared component.
    pub solved_connections: u64,
    /// Sum over solves of the links in the re-shared component.
    pub solved_links: u64,
    /// Connections whose rate changed (each needs a new completion time).
    pub rate_changes: u64,
    /// Filling rounds, summed over solves (the region is filled again each time it grows).
    pub rounds: u64,
}

// ---------------------------------------------------------------------------------------------
// Internal state

/// A non-negative `f64` (a time or a fill level) as a heap key. For non-negative numbers the
/// IEEE-754 bit patterns, read as unsigned integers, are ordered like the numbers, and integer
/// comparisons are much cheaper than `f64::total_cmp` in the heaps' inner loops.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u64);

impl Key {
    fn new(x: f64) -> Key {
        debug_assert!(x >= 0.0, "heap keys are non-negative, got {x}");
        // `+ 0.0` turns -0.0 into +0.0.
        Key((x + 0.0).to_bits())
    }

    fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// The key of the connection `src → dst` in `Network::conn_of`.
fn pair(src: NodeId, dst: NodeId) -> u64 {
    u64::from(src.0) << 32 | u64::from(dst.0)
}

/// The hasher of `Network::conn_of`, whose keys are [`pair`]s: one multiply and a fold
/// (every key bit reaches the high bits hashbrown's control bytes use and the low bits of
/// the bucket index). The default SipHash cost a tenth of a send at N = 16,384. The map is
/// never iterated, so the hash cannot reach any result.
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let m = u128::from(self.0 ^ x) * u128::from(0x9e37_79b9_7f4a_7c15_u64);
        self.0 = (m >> 64) as u64 ^ m as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Relative slack of the region's checks: a link within it of its capacity is saturated, a
/// level within it of a link's highest is the highest (rounding of sums of rates).
const SATURATION_TOL: f64 = 1e-10;

/// Relative rise of a connection's rate that a solve takes for rounding (see `solve`): far
/// below `SATURATION_TOL`, far above the few ulps sums of rates differ by when taken in another
/// order.
const ROUNDING_RISE: f64 = 1e-13;

/// Event kinds, in the order they are handled at one instant.
const EV_CHANGE: u8 = 0;
const EV_COMPLETE: u8 = 1;
const EV_READY: u8 = 2;

/// A change or a latency expiry (completions live in [`CompletionHeap`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    time: Key,
    kind: u8,
    /// Connection index, or change index.
    id: u32,
}

#[derive(Clone, Debug)]
struct Msg {
    id: MessageId,
    tag: u64,
    bytes: u64,
    sent_at: f64,
    ready_at: f64,
}

/// What the solver reads and writes of a connection, kept apart from the rest so that it fits
/// in one cache line (the solver visits every connection of a component several times).
#[derive(Copy, Clone, Debug, Default)]
struct Hot {
    /// Link indices of the route.
    route: [u32; 5],
    route_len: u32,
    /// Inverse of the weight; see [`SharingPolicy`].
    penalty: f64,
    /// `1 / penalty`.
    weight: f64,
    /// Current rate, bytes/s (0 when idle).
    rate: f64,
    /// Rate computed by the running solve.
    new_rate: f64,
    /// Fixed by the filling (round stamp). Whether it is in the region being re-shared is
    /// `Network::in_region`, a dense array of its own.
    fixed: u32,
}

impl Hot {
    fn route(&self) -> &[u32] {
        &self.route[..self.route_len as usize]
    }
}

/// A connection's transfer progress, kept apart from [`Conn`] (its queue and statistics) like
/// [`Hot`]: a solve settles and reschedules every connection whose rate changed, so these 24
/// bytes are read far more often than the rest, and a dense array keeps them in cache at large
/// N.
#[derive(Copy, Clone, Debug, Default)]
struct Sched {
    /// Bytes of the head message left at `t_last`.
    remaining: f64,
    t_last: f64,
    /// The level key under which the connection is listed on its links, when active.
    listed_level: u64,
}

#[derive(Clone, Debug)]
struct Conn {
    src: NodeId,
    dst: NodeId,
    latency_s: f64,
    queue: VecDeque<Msg>,
    active: bool,
    active_since: f64,
    active_s: f64,
    // Statistics.
    messages_sent: u64,
    messages_delivered: u64,
    bytes_sent: u64,
    bytes_delivered: u64,
    messages_dropped: u64,
}

/// An active connection on a link's `flows`: the connection and which hop of its route the
/// link is, so that moving it in the list (a `swap_remove` of another) updates its position in
/// `Network::pos` without reading its route.
#[derive(Copy, Clone, Debug)]
struct Flow {
    conn: u32,
    hop: u32,
}

#[derive(Clone, Debug, Default)]
struct Link {
    /// Active connections crossing the link (unordered; positions kept in `Network::pos`).
    flows: Vec<Flow>,
    // Solver scratch.
    /// Crossed by the region this round (round stamp).
    seen: u32,
    /// Marked dirty this solve (epoch stamp), and the load and highest level it had then.
    dirty: u32,
    pre_load: f64,
    pre_max: f64,
    remaining: f64,
    usage: f64,
    unfixed: u32,
    /// The fill queue's current entry for the link (its push number), or `STALE` once a
    /// connection fixed elsewhere raised the link's level.
    queued: u32,
    /// Level at which the filling saturated the link this round (infinite if it did not).
    level: f64,
    /// Over the region's connections on the link: their old rates, their new rates, and
    /// their highest new level.
    old_sum: f64,
    new_sum: f64,
    new_max: f64,
    /// The link's load with the region's new rates.
    new_load: f64,
    /// The region's connections on the link: `adj[adj_start..adj_start + adj_len]`.
    adj_start: u32,
    adj_len: u32,
}

/// What the region checks read of a link, apart from [`Link`] (the filling's scratch) in one
/// cache line per link: whether it is saturated (capacity and load), its highest level, and
/// where its level set is. The checks visit many links whose scratch they never read (every
/// link of a connection that joins the region, and of an outside connection looking for its
/// bottleneck), and at N = 4,096 and more each of those visits was a cache miss or two on
/// `Link`'s three lines and then one on the set's buffer; an unsaturated link now costs one
/// line.
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
struct LinkSet {
    capacity: f64,
    /// Bytes carried by settled transfer segments. Here rather than with the filling's scratch
    /// in [`Link`]: a settle follows a move of the same connection in this set (its line is
    /// loaded) and a completion reads nothing else of the link, where in `Link` each was a
    /// cache miss of its own at N = 4,096 (4 % of the solve in a profile).
    bytes: f64,
    // Kept up to date as rates change, once solves re-share regions (empty before).
    /// Sum of the rates of the connections in `levels`.
    load: f64,
    /// The key of the highest level in `levels` (0, the key of 0.0, when empty).
    max: u64,
    /// Updates of `load` since it was last summed afresh.
    load_updates: u32,
    /// The active connections crossing the link, sorted by level (`rate · penalty`), then id.
    /// A sorted vector: most links carry a few connections, and moving a few thousand entries
    /// costs less than a B-tree's allocations and pointer chasing.
    levels: Vec<(u64, u32)>,
}

impl LinkSet {
    /// The highest level of the connections listed on the link (0 when none).
    fn max_level(&self) -> f64 {
        Key(self.max).get()
    }

    /// Brings `max` up to date after `levels` changed.
    fn set_max(&mut self) {
        self.max = self.levels.last().map_or(0, |&(k, _)| k);
    }

    /// Whether the link is saturated, to the checks' slack.
    fn saturated(&self) -> bool {
        self.load >= self.capacity * (1.0 - SATURATION_TOL)
    }

    /// Adds `delta` to the load; every [`LOAD_RESUM`] updates the load is summed afresh from
    /// the connections' rates, so rounding cannot pile up.
    fn add_load(&mut self, delta: f64, hot: &[Hot]) {
        self.add_load_skipping(delta, hot, None);
    }

    /// [`LinkSet::add_load`] as if the entry at `skip` were not in the level set (a connection
    /// being moved within it).
    fn add_load_skipping(&mut self, delta: f64, hot: &[Hot], skip: Option<usize>) {
        self.load_updates += 1;
        if self.load_updates >= LOAD_RESUM {
            self.load_updates = 0;
            self.load = (self.levels.iter().enumerate())
                .filter(|&(i, _)| Some(i) != skip)
                .map(|(_, &(_, g))| hot[g as usize].rate)
                .sum();
        } else {
            self.load += delta;
        }
        if self.levels.len() == usize::from(skip.is_some()) {
            self.load = 0.0;
        }
    }
}

// One cache line a link: see `LinkSet`.
const _: () = assert!(std::mem::size_of::<LinkSet>() == 64);

/// [`Link::queued`] of a link whose fill queue entries are all out of date.
const STALE: u32 = u32::MAX;

/// See [`Link::add_load`].
const LOAD_RESUM: u32 = 256;

/// How many connections ahead the loops over a solve's region ask for the next ones' lines
/// (see [`crate::prefetch`]): far enough for a miss to come back, near enough to stay cached.
const AHEAD: usize = 4;

/// How many connections ahead those loops ask for the lines of the links on the next ones'
/// routes (`Link` in the filling, `LinkSet` in the settling and `grow_ahead`): a second stage
/// behind [`AHEAD`], whose `Hot` line (the route) has come back by then. At N = 4,096 the
/// first read of each such link was a miss (8 % of the solve in a profile).
const SOON: usize = 2;

/// The flow-level network; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct Network {
    platform: Platform,
    policy: SharingPolicy,
    now: f64,
    links: Vec<Link>,
    /// Each link's capacity, load and level set, same index as `links`.
    sets: Vec<LinkSet>,
    conns: Vec<Conn>,
    /// Solver state of each connection, same index as `conns`.
    hot: Vec<Hot>,
    /// Position of each active connection in each of its route links' `flows`, same index as
    /// `conns`: a stop moves another connection in those lists, and writing its position here
    /// (20 bytes a connection) costs one line where its `Conn` (its queue and statistics,
    /// 128 bytes) was read at random, a miss at large N.
    pos: Vec<[u32; 5]>,
    /// Progress and completion entry of each connection, same index as `conns`.
    sched: Vec<Sched>,
    /// Whether each connection is in the region being re-shared (the solve's epoch stamp),
    /// same index as `conns`: the checks ask it of many connections whose `Hot` line they
    /// never read otherwise, and 4 bytes a connection stay in cache where 64 do not.
    in_region: Vec<u32>,
    /// Lookup only (never iterated): `(src, dst)` → index in `conns`.
    conn_of: HashMap<u64, u32, BuildHasherDefault<PairHasher>>,
    /// Changes and latency expiries.
    events: BinaryHeap<Reverse<Event>>,
    /// The active connections' completion times, one entry each.
    completions: CompletionHeap,
    changes: Vec<Change>,
    next_message: u64,
    /// Stamps of the current solve and of its current filling round.
    epoch: u32,
    round: u32,
    dirty: Vec<u32>,
    /// Connections whose own terms changed since the last solve (started, re-weighted, or on a
    /// link whose capacity changed): the region starts from them.
    seeds: Vec<u32>,
    /// Scratch of `grow_region` and `fill_region`.
    grown: Vec<u32>,
    adj: Vec<u32>,
    comp_links: Vec<u32>,
    comp_flows: Vec<u32>,
    fill: FillQueue,
    stats: NetworkStats,
    /// Whether solves re-share regions (level sets and loads kept up to date) rather than
    /// whole components; see [`Network::set_component_limit`].
    region: bool,
    /// The largest component re-shared whole before the network moves to region solves.
    component_limit: usize,
}

/// Default of [`Network::set_component_limit`].
pub const COMPONENT_LIMIT: usize = 256;

impl Network {
    /// A network over `platform`, idle, at time 0.
    pub fn new(platform: Platform, policy: SharingPolicy) -> Self {
        let links = vec![Link::default(); platform.link_count()];
        let sets = (0..platform.link_count())
            .map(|i| LinkSet {
                capacity: platform.capacity_bytes_s(platform.link_at(i)),
                ..LinkSet::default()
            })
            .collect();
        Network {
            platform,
            policy,
            now: 0.0,
            links,
            sets,
            conns: Vec::new(),
            hot: Vec::new(),
            pos: Vec::new(),
            sched: Vec::new(),
            in_region: Vec::new(),
            conn_of: HashMap::default(),
            events: BinaryHeap::new(),
            completions: CompletionHeap::default(),
            changes: Vec::new(),
            next_message: 0,
            epoch: 1,
            round: 1,
            dirty: Vec::new(),
            seeds: Vec::new(),
            grown: Vec::new(),
            adj: Vec::new(),
            comp_links: Vec::new(),
            comp_flows: Vec::new(),
            fill: FillQueue::default(),
            stats: NetworkStats::default(),
            region: false,
            component_limit: COMPONENT_LIMIT,
        }
    }

    /// Re-shares whole components (a progressive filling from scratch of everything that
    /// shares a link, transitively, with what changed) until a solve meets a component of more
    /// than `connections` active connections; from then on, solves re-share regions (see the
    /// [module documentation](self)). The default is [`COMPONENT_LIMIT`]; 0 moves to region
    /// solves at once. Small components cost less whole than the level sets and loads region
    /// solves keep up to date at every rate change; past the limit, regions are cheaper. Both
    /// compute the max-min allocation; their rates may differ in the last bits (sums taken
    /// in another order). The move happens once and never back, at a point that depends only
    /// on the inputs, so runs stay deterministic.
    pub fn set_component_limit(&mut self, connections: usize) {
        self.component_limit = connections;
        if !self.region && connections == 0 {
            self.start_regions();
        }
    }

    /// Whether solves re-share regions now (see [`Network::set_component_limit`]).
    pub fn solves_regions(&self) -> bool {
        self.region
    }

    /// Moves to region solves: lists every active connection on its links at its current
    /// rate and sums the links' loads. Every active connection has its rate, as this runs
    /// between solves.
    fn start_regions(&mut self) {
        self.region = true;
        for c in 0..self.conns.len() {
            if self.conns[c].active {
                let h = &self.hot[c];
                self.sched[c].listed_level = Key::new(h.rate * h.penalty).0;
            }
        }
        let (hot, sched) = (&self.hot, &self.sched);
        for (link, set) in self.links.iter().zip(&mut self.sets) {
            set.levels.clear();
            set.levels.extend(
                link.flows
                    .iter()
                    .map(|f| (sched[f.conn as usize].listed_level, f.conn)),
            );
            set.levels.sort_unstable();
            set.set_max();
            set.load = set.levels.iter().map(|&(_, f)| hot[f as usize].rate).sum();
            set.load_updates = 0;
        }
    }

    /// The platform as it is now (with the changes applied so far).
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// The sharing policy.
    pub fn policy(&self) -> SharingPolicy {
        self.policy
    }

    /// The network's clock, seconds: the last time it was advanced to or acted at.
    pub fn now(&self) -> f64 {
        self.now
    }

    fn check_time(&mut self, time: f64) -> Result<(), NetworkError> {
        if !time.is_finite() {
            return Err(NetworkError::BadTime { time });
        }
        if time < self.now {
            return Err(NetworkError::InThePast {
                time,
                now: self.now,
            });
        }
        Ok(())
    }

    fn check_node(&self, node: NodeId) -> Result<(), NetworkError> {
        if self.platform.has_node(node) {
            Ok(())
        } else {
            Err(NetworkError::UnknownNode {
                node,
                node_count: self.platform.node_count(),
            })
        }
    }

    /// Sends `bytes` from `src` to `dst` at time `now` on their connection, behind the messages
    /// already queued there; `tag` comes back in the [`Delivered`] record.
    ///
    /// `now` must not be before the network's clock nor after a pending event (call
    /// [`Network::advance_to`] first); the clock moves to `now`.
    pub fn send(
        &mut self,
        now: f64,
        src: NodeId,
        dst: NodeId,
        bytes: u64,
        tag: u64,
    ) -> Result<MessageId, NetworkError> {
        self.check_time(now)?;
        self.check_node(src)?;
        self.check_node(dst)?;
        if src == dst {
            return Err(NetworkError::SelfSend { node: src });
        }
        if let Some(pending) = self.next_event_time() {
            if pending < now {
                return Err(NetworkError::EventsPending { time: now, pending });
            }
        }
        self.now = now;
        let c = self.connection(src, dst);
        let id = MessageId(self.next_message);
        self.next_message += 1;
        let conn = &mut self.conns[c as usize];
        let ready_at = now + conn.latency_s;
        let was_empty = conn.queue.is_empty();
        conn.queue.push_back(Msg {
            id,
            tag,
            bytes,
            sent_at: now,
            ready_at,
        });
        conn.messages_sent += 1;
        conn.bytes_sent += bytes;
        if was_empty {
            self.push(ready_at, EV_READY, c);
        }
        Ok(id)
    }

    /// Index of the connection `src → dst`, created on first use.
    fn connection(&mut self, src: NodeId, dst: NodeId) -> u32 {
        if let Some(&c) = self.conn_of.get(&pair(src, dst)) {
            return c;
        }
        let c = u32::try_from(self.conns.len()).expect("more than 2^32 connections");
        let r = self.platform.route(src, dst);
        let mut route = [0u32; 5];
        for (k, l) in r.links().iter().enumerate() {
            route[k] = self.platform.link_index(*l) as u32;
        }
        let latency_s = r.latency_s();
        self.hot.push(Hot {
            route,
            route_len: r.links().len() as u32,
            penalty: self.policy.penalty(latency_s),
            weight: 1.0 / self.policy.penalty(latency_s),
            ..Hot::default()
        });
        self.sched.push(Sched {
            t_last: self.now,
            ..Sched::default()
        });
        self.in_region.push(0);
        self.pos.push([0; 5]);
        self.conns.push(Conn {
            src,
            dst,
            latency_s,
            queue: VecDeque::new(),
            active: false,
            active_since: 0.0,
            active_s: 0.0,
            messages_sent: 0,
            messages_delivered: 0,
            bytes_sent: 0,
            bytes_delivered: 0,
            messages_dropped: 0,
        });
        self.conn_of.insert(pair(src, dst), c);
        c
    }

    /// Discards, at time `now`, every message queued on a connection from or to `node` (the
    /// node failed: its connections are gone), and returns them in connection creation order,
    /// then queue order. Bytes a discarded message had already moved count on its links; the
    /// bandwidth it held is re-shared from `now`. Later sends to or from `node` are accepted
    /// as usual (a driver that models a dead node simply stops sending to it).
    ///
    /// `now` must satisfy the same conditions as in [`Network::send`]. O(C) for the C
    /// connections ever opened, plus one solve when an active connection was dropped.
    pub fn drop_node(&mut self, now: f64, node: NodeId) -> Result<Vec<Dropped>, NetworkError> {
        self.check_time(now)?;
        self.check_node(node)?;
        if let Some(pending) = self.next_event_time() {
            if pending < now {
                return Err(NetworkError::EventsPending { time: now, pending });
            }
        }
        self.now = now;
        let mut dropped = Vec::new();
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            if (conn.src != node && conn.dst != node) || conn.queue.is_empty() {
                continue;
            }
            if conn.active {
                // Settle the head's bytes moved so far, then release the links.
                let h = self.hot[c];
                let sc = &mut self.sched[c];
                let moved = (h.rate * (now - sc.t_last)).clamp(0.0, sc.remaining);
                sc.remaining = 0.0;
                sc.t_last = now;
                if moved > 0.0 {
                    for &l in h.route() {
                        self.sets[l as usize].bytes += moved;
                    }
                }
                self.deactivate(c as u32);
            }
            let conn = &mut self.conns[c];
            conn.messages_dropped += conn.queue.len() as u64;
            for msg in conn.queue.drain(..) {
                dropped.push(Dropped {
                    id: msg.id,
                    src: conn.src,
                    dst: conn.dst,
                    tag: msg.tag,
                    bytes: msg.bytes,
                    sent_at: msg.sent_at,
                });
            }
        }
        if !self.dirty.is_empty() {
            self.solve();
        }
        Ok(dropped)
    }

    /// Schedules a change of the platform at time `at` (not before the clock). It takes effect
    /// when the network is advanced to `at`; changes at the same instant apply in the order they
    /// were scheduled, before the completions of that instant.
    pub fn schedule(&mut self, at: f64, change: Change) -> Result<(), NetworkError> {
        self.check_time(at)?;
        // Validate now, so that a bad change fails here rather than when it applies.
        let p = &self.platform;
        let bad_latency = |what: String, value: f64| {
            if value.is_finite() && value >= 0.0 {
                Ok(())
            } else {
                Err(PlatformError::BadLatency { what, value })
            }
        };
        match change {
            Change::Capacity { link, bytes_s } => {
                p.check_link(link)?;
                if !(bytes_s.is_finite() && bytes_s > 0.0) {
                    return Err(PlatformError::BadCapacity {
                        link,
                        value: bytes_s,
                    }
                    .into());
                }
            }
            Change::IntraLatency { cluster, latency_s } => {
                p.check_link(LinkId::AccessUp(cluster))?;
                bad_latency(
                    format!("intra-cluster latency of cluster {cluster}"),
                    latency_s,
                )?;
            }
            Change::WanLatency {
                from,
                to,
                latency_s,
            } => {
                p.check_link(LinkId::Wan { from, to })?;
                bad_latency(format!("latency of WAN link {from}->{to}"), latency_s)?;
            }
            Change::PairLatency {
                from,
                to,
                latency_s,
            } => {
                p.check_pair(from, to)?;
                bad_latency(format!("latency of the pair {from}->{to}"), latency_s)?;
            }
        }
        let k = u32::try_from(self.changes.len()).expect("more than 2^32 changes");
        self.changes.push(change);
        self.push(at, EV_CHANGE, k);
        Ok(())
    }

    /// Schedules a capacity change of `link` at time `at`; see [`Network::schedule`].
    pub fn set_capacity(
        &mut self,
        link: LinkId,
        at: f64,
        bytes_s: f64,
    ) -> Result<(), NetworkError> {
        self.schedule(at, Change::Capacity { link, bytes_s })
    }

    /// Schedules a change of a cluster's intra-cluster latency at time `at`.
    pub fn set_intra_latency(
        &mut self,
        cluster: ClusterId,
        at: f64,
        latency_s: f64,
    ) -> Result<(), NetworkError> {
        self.schedule(at, Change::IntraLatency { cluster, latency_s })
    }

    /// Schedules a change of the latency between two nodes, `from → to` only, at time `at`
    /// (see [`Change::PairLatency`]).
    pub fn set_pair_latency(
        &mut self,
        from: NodeId,
        to: NodeId,
        at: f64,
        latency_s: f64,
    ) -> Result<(), NetworkError> {
        self.schedule(
            at,
            Change::PairLatency {
                from,
                to,
                latency_s,
            },
        )
    }

    /// Schedules a change of the latency of the WAN link `from → to` at time `at`.
    pub fn set_wan_latency(
        &mut self,
        from: ClusterId,
        to: ClusterId,
        at: f64,
        latency_s: f64,
    ) -> Result<(), NetworkError> {
        self.schedule(
            at,
            Change::WanLatency {
                from,
                to,
                latency_s,
            },
        )
    }

    fn push(&mut self, time: f64, kind: u8, id: u32) {
        self.events.push(Reverse(Event {
            time: Key::new(time),
            kind,
            id,
        }));
    }

    /// The next event, not taken: a change or expiry, or a completion, whichever comes first
    /// in the order `(time, kind, id)`.
    fn peek_event(&self) -> Option<Event> {
        let other = self.events.peek().map(|&Reverse(ev)| ev);
        let done = self.completions.peek().map(|(time, id)| Event {
            time: Key(time),
            kind: EV_COMPLETE,
            id,
        });
        match (other, done) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes `ev`, the event [`Network::peek_event`] returned, off its heap.
    fn take_event(&mut self, ev: Event) {
        if ev.kind == EV_COMPLETE {
            self.completions.pop();
        } else {
            self.events.pop();
        }
    }

    /// When the next event happens (a message arrives, a latency expires, a change applies), or
    /// `None` when the network is idle.
    pub fn next_event_time(&mut self) -> Option<f64> {
        self.peek_event().map(|ev| ev.time.get())
    }

    /// Whether nothing is pending: no message in flight, no change scheduled.
    pub fn is_idle(&mut self) -> bool {
        self.next_event_time().is_none()
    }

    /// Processes every event up to and including time `t`, moves the clock to `t`, and returns
    /// the messages delivered, in `(time, id)` order.
    ///
    /// # Panics
    /// If `t` is not finite or is before the clock (to run everything, use
    /// [`Network::run_until_idle`]).
    pub fn advance_to(&mut self, t: f64) -> Vec<Delivered> {
        let mut out = Vec::new();
        self.advance_into(t, &mut out);
        out
    }

    /// [`Network::advance_to`], appending the deliveries to `out` (to reuse its allocation).
    pub fn advance_into(&mut self, t: f64, out: &mut Vec<Delivered>) {
        assert!(
            t.is_finite() && t >= self.now,
            "advance_to({t}): time must be finite and must not go back (the network is at {} s)",
            self.now
        );
        let start = out.len();
        while let Some(time) = self.next_event_time() {
            if time > t {
                break;
            }
            self.now = time;
            while let Some(ev) = self.peek_event() {
                if ev.time.get() != time {
                    break;
                }
                self.take_event(ev);
                self.stats.events += 1;
                match ev.kind {
                    EV_CHANGE => self.apply_change(ev.id),
                    EV_COMPLETE => self.complete(ev.id, out),
                    _ => {
                        if !self.conns[ev.id as usize].active {
                            self.next_head(ev.id, out);
                        }
                    }
                }
            }
            if !self.dirty.is_empty() {
                self.solve();
            }
        }
        self.now = t;
        out[start..].sort_by(|a, b| a.at.total_cmp(&b.at).then(a.id.cmp(&b.id)));
    }

    /// Advances until nothing is pending and returns every delivery.
    pub fn run_until_idle(&mut self) -> Vec<Delivered> {
        let mut out = Vec::new();
        while let Some(t) = self.next_event_time() {
            self.advance_into(t, &mut out);
        }
        out
    }

    /// Marks a link for the next solve, remembering its load and highest level before the
    /// change (what the solve's checks compare with).
    fn mark_dirty(&mut self, link: u32) {
        let l = &mut self.links[link as usize];
        if l.dirty != self.epoch {
            l.dirty = self.epoch;
            if self.region {
                let set = &self.sets[link as usize];
                l.pre_load = set.load;
                l.pre_max = set.max_level();
            }
            self.dirty.push(link);
        }
    }

    fn apply_change(&mut self, k: u32) {
        match self.changes[k as usize] {
            Change::Capacity { link, bytes_s } => {
                self.platform
                    .set_capacity(link, bytes_s)
                    .expect("checked when scheduled");
                let i = self.platform.link_index(link);
                self.sets[i].capacity = bytes_s;
                if !self.links[i].flows.is_empty() {
                    self.mark_dirty(i as u32);
                    self.seeds
                        .extend(self.links[i].flows.iter().map(|f| f.conn));
                }
            }
            Change::IntraLatency { cluster, latency_s } => {
                self.platform
                    .set_intra_latency(cluster, latency_s)
                    .expect("checked when scheduled");
                self.refresh_latencies(|p, c| {
                    p.cluster_of(c.src) == cluster || p.cluster_of(c.dst) == cluster
                });
            }
            Change::WanLatency {
                from,
                to,
                latency_s,
            } => {
                self.platform
                    .set_wan_latency(from, to, latency_s)
                    .expect("checked when scheduled");
                self.refresh_latencies(|p, c| {
                    p.cluster_of(c.src) == from && p.cluster_of(c.dst) == to
                });
            }
            Change::PairLatency {
                from,
                to,
                latency_s,
            } => {
                self.platform
                    .set_pair_latency(from, to, latency_s)
                    .expect("checked when scheduled");
                if let Some(&c) = self.conn_of.get(&pair(from, to)) {
                    self.refresh_latency(c as usize);
                }
            }
        }
    }

    /// Recomputes the route latency (and weight) of the connections `touched` selects; active
    /// connections whose weight changed get their links re-shared.
    fn refresh_latencies(&mut self, touched: impl Fn(&Platform, &Conn) -> bool) {
        for c in 0..self.conns.len() {
            if touched(&self.platform, &self.conns[c]) {
                self.refresh_latency(c);
            }
        }
    }

    /// Recomputes connection `c`'s route latency (a pair latency included) and weight; if it
    /// is active and its weight changed, its links get re-shared.
    fn refresh_latency(&mut self, c: usize) {
        let conn = &self.conns[c];
        let latency_s = self.platform.route(conn.src, conn.dst).latency_s();
        let penalty = self.policy.penalty(latency_s);
        let reshare = conn.active && penalty != self.hot[c].penalty;
        self.conns[c].latency_s = latency_s;
        self.hot[c].penalty = penalty;
        self.hot[c].weight = 1.0 / penalty;
        if reshare {
            // Still listed at its old level until the solve re-lists it: the solve sees
            // the change of level as a change of the links' highest level.
            self.seeds.push(c as u32);
            let h = self.hot[c];
            for &l in h.route() {
                self.mark_dirty(l);
            }
        }
    }

    fn deliver(&mut self, c: u32, msg: Msg, out: &mut Vec<Delivered>) {
        let conn = &mut self.conns[c as usize];
        conn.messages_delivered += 1;
        conn.bytes_delivered += msg.bytes;
        out.push(Delivered {
            id: msg.id,
            src: conn.src,
            dst: conn.dst,
            tag: msg.tag,
            bytes: msg.bytes,
            sent_at: msg.sent_at,
            at: self.now,
        });
    }

    /// The head message of connection `c` has transferred its last byte.
    fn complete(&mut self, c: u32, out: &mut Vec<Delivered>) {
        let conn = &mut self.conns[c as usize];
        let msg = conn
            .queue
            .pop_front()
            .expect("a completing connection has a head");
        let sc = &mut self.sched[c as usize];
        let done = sc.remaining;
        sc.remaining = 0.0;
        sc.t_last = self.now;
        let h = self.hot[c as usize];
        for &l in h.route() {
            self.sets[l as usize].bytes += done;
        }
        self.deliver(c, msg, out);
        self.next_head(c, out);
    }

    /// Looks at connection `c`'s head after a completion or a latency expiry: delivers
    /// transferable empty messages, keeps streaming, or goes idle until the head is
    /// transferable.
    fn next_head(&mut self, c: u32, out: &mut Vec<Delivered>) {
        loop {
            let now = self.now;
            let conn = &mut self.conns[c as usize];
            let Some(head) = conn.queue.front() else {
                if conn.active {
                    self.deactivate(c);
                }
                return;
            };
            if head.ready_at > now {
                let ready_at = head.ready_at;
                if conn.active {
                    self.deactivate(c);
                }
                self.push(ready_at, EV_READY, c);
                return;
            }
            if head.bytes == 0 {
                let msg = conn.queue.pop_front().expect("head exists");
                self.deliver(c, msg, out);
                continue;
            }
            let remaining = head.bytes as f64;
            let sc = &mut self.sched[c as usize];
            sc.remaining = remaining;
            sc.t_last = now;
            if conn.active {
                // Streaming on: same route, same weight, same rate.
                let t = now + remaining / self.hot[c as usize].rate;
                self.completions.set(c, Key::new(t).0);
            } else {
                self.activate(c);
            }
            return;
        }
    }

    fn activate(&mut self, c: u32) {
        self.completions.remove(c);
        let conn = &mut self.conns[c as usize];
        conn.active = true;
        conn.active_since = self.now;
        self.hot[c as usize].rate = 0.0;
        let h = self.hot[c as usize];
        for (k, &l) in h.route().iter().enumerate() {
            let flows = &mut self.links[l as usize].flows;
            self.pos[c as usize][k] = flows.len() as u32;
            flows.push(Flow {
                conn: c,
                hop: k as u32,
            });
            self.mark_dirty(l);
        }
        if self.region {
            self.list(c);
            self.seeds.push(c);
        }
    }

    fn deactivate(&mut self, c: u32) {
        let now = self.now;
        self.completions.remove(c);
        let conn = &mut self.conns[c as usize];
        conn.active = false;
        conn.active_s += now - conn.active_since;
        let pos = self.pos[c as usize];
        let h = self.hot[c as usize];
        for &l in h.route() {
            self.mark_dirty(l);
        }
        if self.region {
            self.unlist(c);
        }
        self.hot[c as usize].rate = 0.0;
        let h = self.hot[c as usize];
        for (k, &l) in h.route().iter().enumerate() {
            let p = pos[k] as usize;
            let flows = &mut self.links[l as usize].flows;
            flows.swap_remove(p);
            if let Some(&moved) = flows.get(p) {
                self.pos[moved.conn as usize][moved.hop as usize] = p as u32;
            }
            self.mark_dirty(l);
        }
    }

    /// Re-shares the bandwidth around what changed and reschedules the connections whose rate
    /// changed.
    ///
    /// The re-shared *region* starts as the connections whose own terms changed (`seeds`:
    /// started, re-weighted, or crossing a link whose capacity changed) and the connections of
    /// the saturated links they cross; every other connection keeps its rate. The region is filled (progressive filling with the other connections'
    /// rates taken off the capacities), then checked against the bottleneck characterization
    /// of max-min fairness: an allocation is the (weighted) max-min one iff it is feasible and
    /// every connection crosses a saturated link on which its level (`rate · penalty`) is the
    /// highest. The filling keeps the region's links feasible and gives the region's
    /// connections a saturated link; an outside connection whose level on such a link is
    /// higher, or that lost its bottleneck on a link the region or a departure touched, joins
    /// the region, which is filled again. The region only grows, so this ends, at worst on the
    /// whole component.
    fn solve(&mut self) {
        self.stats.solves += 1;
        let epoch = self.epoch;
        self.comp_flows.clear();
        if self.region {
            for &f in &self.seeds {
                let seen = &mut self.in_region[f as usize];
                if *seen != epoch && self.conns[f as usize].active {
                    *seen = epoch;
                    self.comp_flows.push(f);
                }
            }
            self.seed_saturated();
        } else {
            self.seed_component();
        }
        self.seeds.clear();
        loop {
            self.stats.rounds += 1;
            self.next_round();
            self.fill_region();
            // A whole component needs no check: the connections the check could add are
            // outside ones on its links, and it has none.
            if !self.region || !self.grow_region() {
                break;
            }
        }
        self.stats.solved_links += self.comp_links.len() as u64;
        self.stats.solved_connections += self.comp_flows.len() as u64;

        // Settle and reschedule the connections whose rate changed.
        let now = self.now;
        for i in 0..self.comp_flows.len() {
            if let Some(&next) = self.comp_flows.get(i + AHEAD) {
                prefetch(&self.hot, next as usize);
                prefetch(&self.sched, next as usize);
                self.completions.prefetch(next);
            }
            if let Some(&soon) = self.comp_flows.get(i + SOON) {
                // Its `Hot` line was asked for `AHEAD - SOON` iterations ago: now its route's
                // level sets, which `relist` reads.
                for &m in self.hot[soon as usize].route() {
                    prefetch(&self.sets, m as usize);
                }
            }
            let f = self.comp_flows[i];
            let h = self.hot[f as usize];
            // A rise by rounding only (a connection of the region whose bottleneck kept its
            // level, re-filled from sums taken in another order) keeps the old rate: moving and
            // rescheduling it would cost a level-set move and a heap push per link for nothing,
            // and the old rate, being lower, keeps every link feasible.
            let same = h.new_rate >= h.rate && h.new_rate - h.rate <= h.rate * ROUNDING_RISE;
            if same {
                if self.region
                    && self.sched[f as usize].listed_level != Key::new(h.rate * h.penalty).0
                {
                    // Re-weighted, same rate.
                    self.unlist(f);
                    self.list(f);
                }
                continue;
            }
            let sc = &mut self.sched[f as usize];
            let moved = (h.rate * (now - sc.t_last)).min(sc.remaining);
            sc.remaining -= moved;
            sc.t_last = now;
            let remaining = sc.remaining;
            if self.region {
                self.relist(f, h.new_rate);
            } else {
                self.hot[f as usize].rate = h.new_rate;
            }
            if moved > 0.0 {
                for &l in h.route() {
                    self.sets[l as usize].bytes += moved;
                }
            }
            self.stats.rate_changes += 1;
            self.completions
                .set(f, Key::new(now + remaining / h.new_rate).0);
        }
        self.dirty.clear();
        let component = self.comp_flows.len();
        self.next_epoch();
        if !self.region && component > self.component_limit {
            self.start_regions();
        }
    }

    /// The region of a component solve: every active connection reachable from the dirty
    /// links through links they share, breadth first (links are stamped with the epoch as
    /// they are reached, as the dirty ones are).
    fn seed_component(&mut self) {
        let epoch = self.epoch;
        let mut queue = std::mem::take(&mut self.grown);
        queue.clear();
        queue.extend_from_slice(&self.dirty);
        let mut next = 0;
        while next < queue.len() {
            let l = queue[next] as usize;
            next += 1;
            for k in 0..self.links[l].flows.len() {
                let f = self.links[l].flows[k].conn;
                let seen = &mut self.in_region[f as usize];
                if *seen == epoch {
                    continue;
                }
                *seen = epoch;
                self.comp_flows.push(f);
                let h = self.hot[f as usize];
                for &m in h.route() {
                    let link = &mut self.links[m as usize];
                    if link.dirty != epoch {
                        link.dirty = epoch;
                        queue.push(m);
                    }
                }
            }
        }
        self.grown = queue;
    }

    /// Adds to the region every connection listed on a saturated link that a seed crosses. A
    /// seed on such a link gets almost nothing in a filling without them (the others' rates
    /// take the whole capacity), which makes the check add the link's connections above that
    /// level (nearly all of them) and fill again, and a second saturated link of the seed's
    /// route is only found in a third round. Seeding them at once saves those rounds: it
    /// changes what the filling sums first, so rates may differ in their last bits from the
    /// rounds' result (both are the max-min allocation to rounding).
    fn seed_saturated(&mut self) {
        let epoch = self.epoch;
        for i in 0..self.seeds.len() {
            let f = self.seeds[i] as usize;
            if !self.conns[f].active {
                continue;
            }
            let h = self.hot[f];
            for &l in h.route() {
                let set = &self.sets[l as usize];
                if !set.saturated() {
                    continue;
                }
                for &(_, g) in &set.levels {
                    let seen = &mut self.in_region[g as usize];
                    if *seen != epoch {
                        *seen = epoch;
                        self.comp_flows.push(g);
                    }
                }
            }
        }
    }

    /// Takes active connection `f` (at its current rate and penalty) off its links' level sets
    /// and loads.
    fn unlist(&mut self, f: u32) {
        let h = self.hot[f as usize];
        let key = (self.sched[f as usize].listed_level, f);
        for &l in h.route() {
            let set = &mut self.sets[l as usize];
            let at = set
                .levels
                .binary_search(&key)
                .unwrap_or_else(|_| panic!("connection {f} is listed on link {l}"));
            set.levels.remove(at);
            set.set_max();
            set.add_load(-h.rate, &self.hot);
        }
    }

    /// Moves active connection `f` to rate `rate` in its links' level sets and loads: what
    /// [`Network::unlist`] then [`Network::list`] at the new rate do, with the same loads to the
    /// last bit, but one binary search per link for each key and only the entries between the
    /// old and the new position moved (a rate change usually moves a connection a few places).
    fn relist(&mut self, f: u32, rate: f64) {
        let h = self.hot[f as usize];
        let old = (self.sched[f as usize].listed_level, f);
        let new = (Key::new(rate * h.penalty).0, f);
        self.sched[f as usize].listed_level = new.0;
        self.hot[f as usize].rate = rate;
        let hot = &self.hot;
        for &l in h.route() {
            let set = &mut self.sets[l as usize];
            let at = set
                .levels
                .binary_search(&old)
                .unwrap_or_else(|_| panic!("connection {f} is listed on link {l}"));
            // The load as `unlist` leaves it: `f` off the set.
            set.add_load_skipping(-h.rate, hot, Some(at));
            let (Ok(to) | Err(to)) = set.levels.binary_search(&new);
            if to > at {
                set.levels[at..to].rotate_left(1);
                set.levels[to - 1] = new;
            } else {
                set.levels[to..=at].rotate_right(1);
                set.levels[to] = new;
            }
            set.set_max();
            set.add_load(rate, hot);
        }
    }

    /// Puts active connection `f` (at its current rate and penalty) on its links' level sets
    /// and loads.
    fn list(&mut self, f: u32) {
        let h = self.hot[f as usize];
        let key = (Key::new(h.rate * h.penalty).0, f);
        self.sched[f as usize].listed_level = key.0;
        for &l in h.route() {
            let set = &mut self.sets[l as usize];
            let at = set.levels.binary_search(&key).unwrap_err();
            set.levels.insert(at, key);
            set.set_max();
            set.add_load(h.rate, &self.hot);
        }
    }

    /// Progressive filling of the region (`comp_flows`, the connections stamped with the
    /// epoch) over the links it crosses and the dirty links (`comp_links`, found here), with
    /// the rates of the connections outside the region taken off those links' capacities.
    /// Sets `new_rate` of the region's connections, and of each link the level at which it
    /// fixed some of them and the sum and highest level of their new rates. O(H_R) plus the
    /// queue, for the H_R route hops of the region: no link's whole list is read.
    fn fill_region(&mut self) {
        let round = self.round;
        let region = self.region;
        let links = &mut self.links;
        let sets = &self.sets;
        let hot = &mut self.hot;
        let comp_links = &mut self.comp_links;
        let comp_flows = &self.comp_flows;
        let adj = &mut self.adj;
        let fill = &mut self.fill;
        comp_links.clear();
        fill.clear();
        let mut touch = |l: u32, links: &mut Vec<Link>| {
            let link = &mut links[l as usize];
            if link.seen != round {
                link.seen = round;
                link.unfixed = 0;
                link.usage = 0.0;
                link.old_sum = 0.0;
                link.new_sum = 0.0;
                link.new_max = 0.0;
                link.level = f64::INFINITY;
                comp_links.push(l);
            }
        };
        for &l in &self.dirty {
            touch(l, links);
        }
        for (i, &f) in comp_flows.iter().enumerate() {
            if let Some(&next) = comp_flows.get(i + AHEAD) {
                prefetch(hot, next as usize);
            }
            if let Some(&soon) = comp_flows.get(i + SOON) {
                for &m in hot[soon as usize].route() {
                    prefetch(links, m as usize);
                }
            }
            let h = &hot[f as usize];
            for &m in h.route() {
                touch(m, links);
                let link = &mut links[m as usize];
                link.unfixed += 1;
                link.usage += h.weight;
                link.old_sum += h.rate;
            }
        }
        // The region's connections of each link, contiguous in `adj`.
        let mut offset = 0;
        for &l in comp_links.iter() {
            let link = &mut links[l as usize];
            link.adj_start = offset;
            link.adj_len = 0;
            offset += link.unfixed;
        }
        adj.clear();
        adj.resize(offset as usize, 0);
        for &f in comp_flows {
            for &m in hot[f as usize].route() {
                let link = &mut links[m as usize];
                adj[(link.adj_start + link.adj_len) as usize] = f;
                link.adj_len += 1;
            }
        }
        for &l in comp_links.iter() {
            let link = &mut links[l as usize];
            let set = &sets[l as usize];
            link.remaining = if region {
                let outside = set.load - link.old_sum;
                (set.capacity - outside).max(0.0)
            } else {
                set.capacity
            };
            link.queued = STALE;
            if link.unfixed > 0 {
                link.queued = fill.push(Key::new(link.remaining / link.usage).0, l);
            }
        }

        // A link's fill level is its remaining capacity over the sum of the weights
        // (1 / penalty) of its unfixed connections; the link with the lowest level saturates
        // next and fixes its unfixed connections at level / penalty.
        //
        // Fixing a connection at level λ raises the level of every other link it crosses (λ is
        // at most their level), so a queued entry can only underestimate its link's level:
        // entries are not updated in place but re-queued with the current level when they
        // surface out of date (`Link::queued`), which saves a queue operation per route hop. As
        // levels only rise, the first entry of a link that surfaces current is its level (see
        // `fill_queue` for the order of ties). Filling stops as soon
        // as every connection is fixed: the links still queued are then all unsaturated.
        let mut unfixed_flows = comp_flows.len();
        while unfixed_flows > 0 {
            let Some((key, l, entry)) = fill.pop() else {
                break;
            };
            let l = l as usize;
            if links[l].unfixed == 0 {
                continue;
            }
            let key = Key(key).get();
            let (start, end) = {
                let link = &links[l];
                (
                    link.adj_start as usize,
                    (link.adj_start + link.adj_len) as usize,
                )
            };
            if links[l].queued != entry {
                if links[l].usage <= 0.0 {
                    // Rounding ate the weights: recompute them exactly.
                    let usage = adj[start..end]
                        .iter()
                        .map(|&g| &hot[g as usize])
                        .filter(|g| g.fixed != round)
                        .fold(0.0, |u, g| u + g.weight);
                    links[l].usage = usage;
                }
                let link = &mut links[l];
                // The level only rose since the entry was queued; clamp rounding.
                let current = (link.remaining / link.usage).max(key);
                link.queued = fill.push(Key::new(current).0, l as u32);
                continue;
            }
            let level = key;
            links[l].level = level;
            for &f in &adj[start..end] {
                let h = &mut hot[f as usize];
                if h.fixed == round {
                    continue;
                }
                h.fixed = round;
                unfixed_flows -= 1;
                let rate = level / h.penalty;
                let weight = h.weight;
                h.new_rate = rate;
                for &m in &h.route[..h.route_len as usize] {
                    let m = m as usize;
                    let link = &mut links[m];
                    link.unfixed -= 1;
                    link.new_sum += rate;
                    link.new_max = link.new_max.max(level);
                    if m != l {
                        link.remaining -= rate;
                        link.usage -= weight;
                        link.queued = STALE;
                    }
                }
            }
        }
    }

    /// Checks the filled region against the bottleneck characterization and adds to it the
    /// outside connections that break it. Only the touched links (`comp_links`) changed load
    /// or levels, so only their outside connections can break it, and of those only the ones
    /// listed above a level: above the level at which the region saturated the link, or, when
    /// the link stopped being saturated or its highest level rose, the ones that had it as
    /// their bottleneck (at its old highest level). Returns whether the region grew.
    fn grow_region(&mut self) -> bool {
        let epoch = self.epoch;
        let mut grown = std::mem::take(&mut self.grown);
        grown.clear();
        for i in 0..self.comp_links.len() {
            let l = self.comp_links[i] as usize;
            let link = &mut self.links[l];
            link.new_load = self.sets[l].load - link.old_sum + link.new_sum;
        }
        for i in 0..self.comp_links.len() {
            let l = self.comp_links[i] as usize;
            let link = &self.links[l];
            let set = &self.sets[l];
            let tol_cap = set.capacity * (1.0 - SATURATION_TOL);
            if link.level.is_finite() {
                let above = link.level * (1.0 + SATURATION_TOL);
                for &(k, g) in set.levels.iter().rev() {
                    if Key(k).get() <= above {
                        break;
                    }
                    if self.in_region[g as usize] != epoch {
                        grown.push(g);
                    }
                }
            }
            let (old_load, old_max) = if link.dirty == epoch {
                (link.pre_load, link.pre_max)
            } else {
                (set.load, set.max_level())
            };
            let was_saturated = old_load >= tol_cap;
            // Outside levels are unchanged and at most `old_max`, so the highest level rose iff
            // the region's did.
            if was_saturated && (link.new_load < tol_cap || link.new_max > old_max) {
                let floor = old_max * (1.0 - SATURATION_TOL);
                for &(k, g) in set.levels.iter().rev() {
                    if Key(k).get() < floor {
                        break;
                    }
                    if self.in_region[g as usize] != epoch && !self.has_bottleneck(g) {
                        grown.push(g);
                    }
                }
            }
        }
        let first = self.comp_flows.len();
        for &g in &grown {
            let seen = &mut self.in_region[g as usize];
            if *seen != epoch {
                *seen = epoch;
                self.comp_flows.push(g);
            }
        }
        self.grown = grown;
        if self.comp_flows.len() == first {
            return false;
        }
        self.grow_ahead(first);
        true
    }

    /// Adds to the region, ahead of the checks, what the connections that just joined it
    /// (`comp_flows[first..]`) will move: the top group (the connections at the highest level,
    /// within `SATURATION_TOL`) of every saturated link one of them crosses, and so on for
    /// those, transitively. A connection that joins changes its rate, which moves the
    /// connections bottlenecked with it on its saturated links the other way, then theirs on
    /// their own links: the check of the next round would find them one hop per round, each
    /// round filling the whole region again (about 5 rounds per solve while MOB fills the
    /// root's cluster at N = 1,024; 2.2 with this). The closure follows only top groups of
    /// saturated links, so it stays near the connections whose rates really change; a region
    /// larger than needed is still filled to the max-min allocation (see `solve`).
    fn grow_ahead(&mut self, first: usize) {
        let epoch = self.epoch;
        let mut i = first;
        while i < self.comp_flows.len() {
            if let Some(&next) = self.comp_flows.get(i + AHEAD) {
                prefetch(&self.hot, next as usize);
            }
            if let Some(&soon) = self.comp_flows.get(i + SOON) {
                for &m in self.hot[soon as usize].route() {
                    prefetch(&self.sets, m as usize);
                }
            }
            let g = self.comp_flows[i];
            i += 1;
            let h = self.hot[g as usize];
            for &m in h.route() {
                let set = &self.sets[m as usize];
                if !set.saturated() {
                    continue;
                }
                let floor = set.max_level() * (1.0 - SATURATION_TOL);
                for &(k, f) in set.levels.iter().rev() {
                    if Key(k).get() < floor {
                        break;
                    }
                    let seen = &mut self.in_region[f as usize];
                    if *seen != epoch {
                        *seen = epoch;
                        self.comp_flows.push(f);
                    }
                }
            }
        }
    }

    /// Whether the outside connection `g` crosses a saturated link on which no connection has a
    /// higher level, with the region's new rates.
    fn has_bottleneck(&self, g: u32) -> bool {
        let h = &self.hot[g as usize];
        let level = h.rate * h.penalty;
        let top = |max: f64| level >= max * (1.0 - SATURATION_TOL);
        h.route().iter().any(|&m| {
            let link = &self.links[m as usize];
            let set = &self.sets[m as usize];
            if link.seen != self.round {
                return set.saturated() && top(set.max_level());
            }
            if link.new_load < set.capacity * (1.0 - SATURATION_TOL) || !top(link.new_max) {
                return false;
            }
            // The listed levels of the region's connections are their old ones: skip them down
            // to the first outside connection, or to a level `g` is at the top of.
            for &(k, f) in set.levels.iter().rev() {
                if top(Key(k).get()) {
                    return true;
                }
                if self.in_region[f as usize] != self.epoch {
                    return false;
                }
            }
            true
        })
    }

    /// Moves to the next solve's epoch stamp; on wrap-around, clears every stamp so that an old
    /// one can never be mistaken for the current one.
    fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            for l in &mut self.links {
                l.dirty = 0;
            }
            self.in_region.fill(0);
            self.epoch = 1;
        }
    }

    /// Moves to the next filling round's stamp (same wrap-around rule as the epoch).
    fn next_round(&mut self) {
        self.round = self.round.wrapping_add(1);
        if self.round == 0 {
            for l in &mut self.links {
                l.seen = 0;
            }
            for h in &mut self.hot {
                h.fixed = 0;
            }
            self.round = 1;
        }
    }

    /// The current rate of the connection `src → dst`, bytes/s (0 if idle or unknown).
    pub fn rate_bytes_s(&self, src: NodeId, dst: NodeId) -> f64 {
        self.conn_of
            .get(&pair(src, dst))
            .map_or(0.0, |&c| self.hot[c as usize].rate)
    }

    /// Statistics of the connection `src → dst`, if it has ever carried a message.
    pub fn connection_stats(&self, src: NodeId, dst: NodeId) -> Option<ConnectionStats> {
        self.conn_of
            .get(&pair(src, dst))
            .map(|&c| self.conn_stats(c as usize))
    }

    fn conn_stats(&self, c: usize) -> ConnectionStats {
        let conn = &self.conns[c];
        let active_s = conn.active_s
            + if conn.active {
                self.now - conn.active_since
            } else {
                0.0
            };
        ConnectionStats {
            src: conn.src,
            dst: conn.dst,
            messages_sent: conn.messages_sent,
            messages_delivered: conn.messages_delivered,
            bytes_sent: conn.bytes_sent,
            bytes_delivered: conn.bytes_delivered,
            messages_dropped: conn.messages_dropped,
            active_s,
            rate_bytes_s: self.hot[c].rate,
        }
    }

    /// Statistics of every connection, in creation order.
    pub fn connections(&self) -> impl Iterator<Item = ConnectionStats> + '_ {
        (0..self.conns.len()).map(|c| self.conn_stats(c))
    }

    /// The active connections, as `(src, dst, rate in bytes/s)`, in creation order.
    pub fn active_connections(&self) -> impl Iterator<Item = (NodeId, NodeId, f64)> + '_ {
        self.conns
            .iter()
            .zip(&self.hot)
            .filter(|(c, _)| c.active)
            .map(|(c, h)| (c.src, c.dst, h.rate))
    }

    /// Statistics of a link. Panics if the link does not exist in the platform.
    pub fn link_stats(&self, link: LinkId) -> LinkStats {
        let i = self.platform.link_index(link);
        let l = &self.links[i];
        let mut bytes = self.sets[i].bytes;
        let mut rate = 0.0;
        for f in l.flows.iter().map(|f| f.conn) {
            let (sc, h) = (&self.sched[f as usize], &self.hot[f as usize]);
            bytes += (h.rate * (self.now - sc.t_last)).min(sc.remaining);
            rate += h.rate;
        }
        LinkStats {
            link,
            capacity_bytes_s: self.sets[i].capacity,
            bytes,
            rate_bytes_s: rate,
            active_connections: l.flows.len(),
        }
    }

    /// Work counters since the network was created.
    pub fn stats(&self) -> &NetworkStats {
        &self.stats
    }
}
