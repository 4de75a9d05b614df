//! The discrete-event engine: runs one sans-IO protocol machine per node over the flow-level
//! [`Network`], deterministically.
//!
//! # What it does
//!
//! A [`Simulation`] owns a [`Network`] (over a [`Platform`]), one
//! [`Protocol`] machine per participating node, and a priority queue of timestamped events. It
//! is the driver of `windrose_proto`'s contract (see [`windrose_proto::node`]):
//!
//! - **start**: every machine gets `Input::Start` at its start time (0, or later for a node that
//!   joins; inputs that reach a node before its start wait and follow its `Start`);
//! - **messages**: an `Output::Send` becomes one network message of [`encoded_len`] bytes on
//!   the `(sender, receiver)` connection (FIFO, as TCP). The engine keeps the [`Message`] object itself and hands it to
//!   the receiver when the network delivers its last byte: nothing is encoded or decoded, but
//!   the network carries exactly the bytes the runtime would write. With a platform
//!   [`SendCost`] (LogP's `o` and `g`) a message enters the network only when its sender has
//!   paid for it: it starts once the sender's previous message has left and at least `g` after
//!   that one's start, and leaves `o` later (a node sending to many children pays each);
//! - **send completion**: a send with `notify` gets `Input::SendComplete` when its last byte has
//!   arrived;
//! - **timers**: `Output::SetTimer` arms (or moves) a timer, `Output::CancelTimer` forgets it;
//! - **compute**: `Output::Compute` of `len` bytes occupies the node's processor for the time
//!   its [`ComputeModel`] gives (tasks of one node run one after the other, in order), then the
//!   machine gets `Input::Command(ComputeDone)`;
//! - **failures**: [`Simulation::fail_node_at`] stops a node at a given time: it gets no more
//!   inputs, the messages queued on its connections (both directions) are dropped
//!   ([`Network::drop_node`]), later sends to it are dropped, and the peers chosen by
//!   [`FailureNotice`] get `Input::PeerFailed` after its delay;
//! - **restarts**: [`Simulation::restart_node_at`] brings a failed node back with a new
//!   machine (a restarted process: whatever it kept, e.g. verified pieces on disk, is the
//!   machine's own state): the messages still queued on its connections are dropped as at the
//!   failure, and its peers are not told; they learn of it from its messages, as over TCP. The
//!   restarted machine gets `Input::PeerFailed` for every node that is down at that instant
//!   (its dials to them would fail), then `Input::Start`;
//! - **network changes**: [`Simulation::schedule_change`] delegates to [`Network::schedule`].
//!
//! A message to a node of the platform that has no machine crosses the network and is counted
//! as dropped when it arrives; a send a machine cannot make (to itself, outside the platform)
//! and an input a machine refuses are recorded in [`Metrics::errors`] (or end the run in
//! [strict](SimConfig::strict) mode).
//!
//! Machines are given time as [`Time`] (nanoseconds, rounded from the engine's clock); the
//! engine's own clock is `f64` seconds, the network's representation, so that closed-form
//! predictions hold to the last few ulps rather than to the nanosecond.
//!
//! # Determinism
//!
//! Events are ordered by `(time, kind, sequence number)`, the kinds at one instant in this
//! order: failures, starts, message arrivals, send completions, compute completions, timers,
//! failure notices, restarts; the sequence number is the order in which events were created. Arrivals the
//! network reports at one instant are queued in message id order. No hash map is iterated and no
//! clock or randomness is read, so a run is a pure function of its inputs, bit for bit, and so
//! is its [event log](Simulation::set_event_log).
//!
//! # Cost
//!
//! Per event: O(log Q) for the engine's queue of Q pending events, one call of a machine, and
//! per message sent or delivered the network's cost (see [`crate::network`]: O(log E) when a
//! connection keeps streaming, one incremental re-sharing otherwise). Messages in flight live in
//! a table indexed by network tag (O(1) per send and arrival) whose freed slots are reused, so
//! it holds only what is in flight now. Nothing is proportional to the
//! number of nodes except setup, failures (O(N + connections)) and [`Simulation::metrics`]. The
//! `broadcast` bench (64 nodes, 1 GiB in 256 KiB segments over a MagPIe tree: 258 048 messages)
//! runs in about 0.1 s.
//!
//! # Ending
//!
//! A run ends when no machine has anything pending: no start, timer, computation or failure
//! to come and no message in flight (platform changes scheduled after that are never applied,
//! so a scenario may schedule changes far beyond the end of its protocol). [`RunLimits`] bound the simulated time and the number of events; hitting a limit while some
//! node is neither finished, aborted nor failed is [`SimError::LimitReached`] (the partial
//! metrics stay available from [`Simulation::metrics`]). A run that ends with nodes still
//! waiting (e.g. below a failed node, without an idle timeout) is not an error: the
//! [`Metrics`] say who finished.
//!
//! # Example
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! use windrose_model::NodeId;
//! use windrose_proto::tree_broadcast::BroadcastConfig;
//! use windrose_proto::TransferId;
//! use windrose_sim::engine::broadcast;
//! use windrose_sim::network::SharingPolicy;
//! use windrose_trees::Tree;
//!
//! // A chain 0 -> 1 -> 2 in one cluster: 1 MB/s node links, 1 ms between nodes.
//! let p = Platform::builder()
//!     .cluster(ClusterSpec::uniform(3, 1e6, 1e9, 0.001))
//!     .build()
//!     .unwrap();
//! let n = NodeId;
//! let tree = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(1))]).unwrap();
//! // Store-and-forward: one segment of 100 kB.
//! let cfg = BroadcastConfig::new(TransferId(1), 100_000);
//! let mut sim = broadcast(p, &tree, 100_000u64, cfg, SharingPolicy::MaxMin).unwrap();
//! let metrics = sim.run().unwrap();
//! assert!(metrics.all_finished());
//! // Each hop: latency + wire bytes / bandwidth.
//! let hop = 0.001 + cfg.wire_bytes_per_edge(100_000) as f64 / 1e6;
//! let leaf = metrics.node(n(2)).unwrap().finished_at_s.unwrap();
//! assert!((leaf - 2.0 * hop).abs() < 1e-12);
//! ```

use crate::metrics::{
    ErrorRecord, Limit, LinkMetrics, Metrics, NetworkWork, NodeMetrics, NodeOutcome,
    ProgressRecord, ReportRecord, Restart, Totals,
};
use crate::network::{Change, Delivered, Network, NetworkError, SharingPolicy};
use crate::prefetch::prefetch;
use bytes::Bytes;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use windrose_model::platform::{Platform, SendCost};
use windrose_model::NodeId;
use windrose_proto::frame::{encoded_len, TransferId};
use windrose_proto::scatter::ScatterMsg;
use windrose_proto::scatter::{Scatter, ScatterConfig};
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::tree_broadcast::{BroadcastConfig, TreeBroadcast};
use windrose_proto::{
    Command, Input, Message, Output, Outputs, Protocol, ProtocolError, Report, SendId, SetupError,
    TaskId, Time, TimerId,
};
use windrose_trees::dlt::Schedule;
use windrose_trees::Tree;

/// The default [`RunLimits::max_events`]: a billion events (minutes of wall time), so that a
/// machine that never stops (a timer re-armed forever) cannot hang a run.
pub const DEFAULT_MAX_EVENTS: u64 = 1_000_000_000;

/// Bounds on a run, so that no run hangs.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RunLimits {
    /// Process no event later than this many simulated seconds (None: no bound).
    pub max_time_s: Option<f64>,
    /// Process at most this many engine events (None: no bound).
    pub max_events: Option<u64>,
}

impl Default for RunLimits {
    /// No time bound, [`DEFAULT_MAX_EVENTS`] events.
    fn default() -> Self {
        RunLimits {
            max_time_s: None,
            max_events: Some(DEFAULT_MAX_EVENTS),
        }
    }
}

/// Which peers learn that a node failed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum NotifyPeers {
    /// Every other node with a machine that has not failed (a membership service announces the
    /// failure). Machines ignore failures of nodes they do not depend on.
    #[default]
    All,
    /// Only the nodes that have a connection with the failed node (a message went either way
    /// before the failure), as lost TCP connections would tell them.
    Connected,
}

/// How a failure is announced: to whom, and how long after it happened.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct FailureNotice {
    /// Who is told.
    pub peers: NotifyPeers,
    /// Seconds between the failure and `Input::PeerFailed` (non-negative; default 0).
    pub delay_s: f64,
}

/// Settings of a [`Simulation`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// How the network shares bandwidth.
    pub policy: SharingPolicy,
    /// Bounds on the run.
    pub limits: RunLimits,
    /// How failures are announced.
    pub failure_notice: FailureNotice,
    /// Keep every `Output::Deliver`'s bytes (zero-copy) for [`Simulation::delivered`].
    pub record_deliveries: bool,
    /// End the run with [`SimError::Protocol`] on the first refused input or impossible output
    /// (otherwise they are recorded in [`Metrics::errors`] and the run goes on).
    pub strict: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            policy: SharingPolicy::MaxMin,
            limits: RunLimits::default(),
            failure_notice: FailureNotice::default(),
            record_deliveries: false,
            strict: false,
        }
    }
}

impl SimConfig {
    /// The defaults with this sharing policy.
    pub fn with_policy(policy: SharingPolicy) -> SimConfig {
        SimConfig {
            policy,
            ..SimConfig::default()
        }
    }
}

/// How long a node takes to process the bytes of an `Output::Compute`.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum ComputeModel {
    /// No time at all (the default).
    #[default]
    Instant,
    /// `len / speed` seconds (positive; infinite means instant).
    BytesPerSecond(f64),
    /// `len * cost` seconds (non-negative, finite).
    SecondsPerByte(f64),
}

/// As an error message names it (`1e300 bytes/s`), not its Debug form.
impl std::fmt::Display for ComputeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use windrose_model::error::compact;
        match *self {
            ComputeModel::Instant => f.write_str("instant"),
            ComputeModel::BytesPerSecond(v) => write!(f, "{} bytes/s", compact(v)),
            ComputeModel::SecondsPerByte(v) => write!(f, "{} s per byte", compact(v)),
        }
    }
}

impl ComputeModel {
    /// Seconds to process `len` bytes.
    pub fn duration_s(&self, len: u64) -> f64 {
        match *self {
            ComputeModel::Instant => 0.0,
            ComputeModel::BytesPerSecond(speed) => len as f64 / speed,
            ComputeModel::SecondsPerByte(cost) => len as f64 * cost,
        }
    }

    fn is_valid(&self) -> bool {
        match *self {
            ComputeModel::Instant => true,
            ComputeModel::BytesPerSecond(s) => s > 0.0 && !s.is_nan(),
            ComputeModel::SecondsPerByte(c) => c.is_finite() && c >= 0.0,
        }
    }
}

/// The data of a broadcast or scatter: given, or `n` zero bytes (allocated lazily by the OS, so
/// a gigabyte costs nothing until touched; the simulator never touches it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// These bytes.
    Data(Bytes),
    /// This many zero bytes.
    Zeros(u64),
}

impl Payload {
    /// The bytes (zeros are allocated here).
    pub fn into_bytes(self) -> Bytes {
        match self {
            Payload::Data(b) => b,
            Payload::Zeros(n) => Bytes::from(vec![0u8; n as usize]),
        }
    }
}

impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Payload {
        Payload::Data(b)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload::Data(Bytes::from(v))
    }
}

impl From<u64> for Payload {
    fn from(n: u64) -> Payload {
        Payload::Zeros(n)
    }
}

impl From<usize> for Payload {
    fn from(n: usize) -> Payload {
        Payload::Zeros(n as u64)
    }
}

/// Why a simulation could not be set up or could not complete. Every variant names what is at
/// fault.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A node outside the platform.
    #[error("node {node} is not in the platform ({node_count} nodes, {})", windrose_model::error::ids_in_words(*.node_count))]
    UnknownNode {
        /// The node.
        node: NodeId,
        /// Nodes in the platform.
        node_count: usize,
    },
    /// A second machine for one node.
    #[error("node {node} already has a protocol machine")]
    DuplicateNode {
        /// The node.
        node: NodeId,
    },
    /// An operation on a node that has no machine.
    #[error("node {node} has no protocol machine")]
    NoMachine {
        /// The node.
        node: NodeId,
    },
    /// A time that is negative, not finite, or already past.
    #[error("{what}: {value} s is not a valid time (finite, not negative, not before the engine's clock at {now} s)")]
    BadTime {
        /// Which time.
        what: &'static str,
        /// The value given.
        value: f64,
        /// The engine's clock.
        now: f64,
    },
    /// An invalid compute model.
    #[error("compute model of node {node}: {model} is invalid (speeds must be positive, costs finite and non-negative)")]
    BadCompute {
        /// The node.
        node: NodeId,
        /// The model.
        model: ComputeModel,
    },
    /// A per-node vector that does not cover a node.
    #[error("{what} has {len} entries but node {node} needs one")]
    VectorTooShort {
        /// Which vector.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The node without an entry.
        node: NodeId,
    },
    /// A machine could not be built.
    #[error("building the protocol machines: {0}")]
    Setup(#[from] SetupError),
    /// The network refused a change or an operation.
    #[error("network: {0}")]
    Network(#[from] NetworkError),
    /// A run limit was reached while some nodes had not ended.
    #[error(
        "run stopped by the {limit} at {at_s} s after {events} events with {} node(s) unfinished: {}",
        unfinished.len(),
        list_nodes(unfinished)
    )]
    LimitReached {
        /// The limit.
        limit: Limit,
        /// The engine's clock.
        at_s: f64,
        /// Events processed.
        events: u64,
        /// Nodes neither finished, aborted nor failed.
        unfinished: Vec<NodeId>,
    },
    /// In [strict](SimConfig::strict) mode: a machine refused an input or pushed an output the
    /// engine cannot perform.
    #[error("at {at_s} s, node {node}: {error}")]
    Protocol {
        /// Engine time.
        at_s: f64,
        /// The node.
        node: NodeId,
        /// The error.
        error: String,
    },
    /// Writing the event log failed.
    #[error("writing the event log: {0}")]
    Log(#[from] io::Error),
}

fn list_nodes(nodes: &[NodeId]) -> String {
    let mut s: Vec<String> = nodes.iter().take(16).map(|n| n.to_string()).collect();
    if nodes.len() > 16 {
        s.push(format!("... ({} more)", nodes.len() - 16));
    }
    s.join(", ")
}

/// How far [`Simulation::run_until`] got.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Nothing is pending: the run is over.
    Idle,
    /// The next event is after the requested time; call again to go on.
    Paused,
}

/// An event log in memory that several owners can share: give a clone to
/// [`Simulation::set_event_log`] and read it back with [`MemoryLog::contents`].
#[derive(Clone, Debug, Default)]
pub struct MemoryLog(Arc<Mutex<Vec<u8>>>);

impl MemoryLog {
    /// An empty log.
    pub fn new() -> MemoryLog {
        MemoryLog::default()
    }

    /// A copy of everything written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Removes and returns the complete lines written so far (up to the last newline), leaving
    /// a partly written line in place: for a reader that streams the log while the run goes on.
    pub fn take_complete_lines(&self) -> io::Result<Vec<u8>> {
        let mut buf = self
            .0
            .lock()
            .map_err(|_| io::Error::other("event log poisoned"))?;
        Ok(match buf.iter().rposition(|&b| b == b'\n') {
            Some(end) => buf.drain(..=end).collect(),
            None => Vec::new(),
        })
    }
}

impl Write for MemoryLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("event log poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Events

/// Event kinds, in the order they are handled at one instant.
const K_FAIL: u8 = 0;
const K_START: u8 = 1;
const K_ARRIVE: u8 = 2;
const K_SEND_DONE: u8 = 3;
const K_COMPUTE_DONE: u8 = 4;
const K_TIMER: u8 = 5;
const K_PEER_FAILED: u8 = 6;
/// After the failure notices, so a node failed and restarted at one instant is back.
const K_RESTART: u8 = 7;
/// Last: an application's request sees everything else that happened at its instant.
const K_APP: u8 = 8;
/// A message leaving its sender after the platform's send cost (only with a non-zero one).
const K_INJECT: u8 = 9;

#[derive(Copy, Clone, Debug)]
enum Ev {
    Fail,
    Start,
    /// A message whose last byte arrived: its slot in the in-flight table.
    Arrive {
        slot: u64,
    },
    SendDone {
        to: NodeId,
        id: SendId,
    },
    ComputeDone {
        task: TaskId,
    },
    Timer {
        timer: TimerId,
        gen: u64,
        at: Time,
    },
    PeerFailed {
        peer: NodeId,
    },
    /// The machine waiting in `Simulation::restarts[index]`.
    Restart {
        index: usize,
    },
    /// The input waiting in `Simulation::app_inputs[index]`.
    App {
        index: usize,
    },
    /// The message in the in-flight table's `slot` leaves its sender now.
    Inject {
        slot: u64,
    },
}

#[derive(Copy, Clone, Debug)]
struct Entry {
    /// Bits of a non-negative `f64` time: ordered like the times.
    key: u64,
    kind: u8,
    seq: u64,
    node: u32,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.key, self.kind, self.seq) == (other.key, other.kind, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.key, self.kind, self.seq).cmp(&(other.key, other.kind, other.seq))
    }
}

fn key_of(t: f64) -> u64 {
    debug_assert!(t >= 0.0);
    (t + 0.0).to_bits()
}

/// A message in the network.
struct InFlight {
    from: NodeId,
    to: NodeId,
    message: Message,
    notify: Option<SendId>,
    wire_bytes: u64,
    /// Still paying its sender's send cost: not in the network yet.
    waiting: bool,
}

/// The messages in the network or paying their send cost, by slot (the tag the network carries
/// back). A freed slot is reused, last freed first, so the table holds what is in flight now
/// rather than everything sent since the oldest message still in flight (a broadcast's first
/// message to its last child kept a whole run's messages alive).
#[derive(Default)]
struct InFlightTable {
    slots: Vec<Option<InFlight>>,
    free: Vec<u64>,
}

impl InFlightTable {
    /// The slot the next [`insert`](Self::insert) uses.
    fn next_slot(&self) -> u64 {
        self.free.last().copied().unwrap_or(self.slots.len() as u64)
    }

    fn insert(&mut self, m: InFlight) -> u64 {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(m);
                slot
            }
            None => {
                self.slots.push(Some(m));
                self.slots.len() as u64 - 1
            }
        }
    }

    fn get_mut(&mut self, slot: u64) -> Option<&mut InFlight> {
        self.slots.get_mut(usize::try_from(slot).ok()?)?.as_mut()
    }

    /// Takes the message out and frees its slot.
    fn take(&mut self, slot: u64) -> Option<InFlight> {
        let m = self.slots.get_mut(usize::try_from(slot).ok()?)?.take()?;
        self.free.push(slot);
        Some(m)
    }

    /// Frees a slot emptied by [`drop_waiting`](Self::drop_waiting), when the injection event
    /// that names it comes.
    fn release(&mut self, slot: u64) {
        debug_assert!(self.slots[slot as usize].is_none());
        self.free.push(slot);
    }

    /// Drops the messages still paying their send cost that `dead` selects and returns how
    /// many; their slots stay taken until their injection events come (which
    /// [`release`](Self::release) them), so that those events cannot name a reused slot.
    fn drop_waiting(&mut self, dead: impl Fn(&InFlight) -> bool) -> u64 {
        let mut n = 0;
        for m in &mut self.slots {
            if m.as_ref().is_some_and(|m| m.waiting && dead(m)) {
                *m = None;
                n += 1;
            }
        }
        n
    }

    fn is_empty(&self) -> bool {
        self.slots.len() == self.free.len()
    }
}

/// What every message checks of both its ends, kept apart from [`Slot`] in one dense array:
/// the slots are large and, at N = 16,384, reading a peer's slot for these two flags missed
/// the cache on most messages.
#[derive(Copy, Clone, Default)]
struct NodeState {
    /// The node has a machine (set once: a machine is replaced, never removed).
    machine: bool,
    failed: bool,
}

/// One node of the platform, as the engine sees it.
#[derive(Default)]
struct Slot {
    machine: Option<Box<dyn Protocol + Send>>,
    started: bool,
    /// Inputs that arrived before the start.
    waiting: Vec<Input>,
    /// Armed timers and their generation.
    timers: Vec<(TimerId, u64)>,
    compute: ComputeModel,
    busy_until: f64,
    /// The platform's LogP-style send cost, and when the last message started and left.
    send_cost: SendCost,
    last_send_start: f64,
    last_send_leave: f64,
    metrics: Option<NodeMetrics>,
    delivered: Vec<(u64, Bytes)>,
    /// The collective of each entry of `delivered`.
    delivered_transfers: Vec<TransferId>,
}

impl Slot {
    fn metrics(&mut self) -> &mut NodeMetrics {
        self.metrics
            .as_mut()
            .expect("a slot with a machine has metrics")
    }
}

/// One line of the event log.
#[derive(Serialize)]
struct LogLine<'a> {
    t: f64,
    node: u32,
    ev: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    msg: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    len: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

impl<'a> LogLine<'a> {
    fn new(t: f64, node: NodeId, ev: &'a str) -> Self {
        LogLine {
            t,
            node: node.0,
            ev,
            peer: None,
            msg: None,
            bytes: None,
            offset: None,
            len: None,
            id: None,
            at: None,
            detail: None,
        }
    }

    fn message(mut self, m: &Message) -> Self {
        self.msg = Some(m.kind().name());
        match m {
            Message::Broadcast(BroadcastMsg::Data(d)) => {
                self.offset = Some(d.offset);
                self.len = Some(d.payload.len() as u64);
            }
            Message::Scatter(ScatterMsg::Share(s)) => {
                self.offset = Some(s.offset);
                self.len = Some(s.payload.len() as u64);
            }
            _ => {}
        }
        self
    }
}

// ---------------------------------------------------------------------------------------------
// The simulation

/// A run in the making or in progress: a network, one protocol machine per participating node,
/// and the event queue. See the [module docs](self).
pub struct Simulation {
    net: Network,
    config: SimConfig,
    slots: Vec<Slot>,
    /// Same index as `slots`.
    state: Vec<NodeState>,
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    now: f64,
    events: u64,
    /// Messages in the network, by network tag.
    in_flight: InFlightTable,
    timer_gen: u64,
    arrivals: Vec<Delivered>,
    out: Outputs,
    log: Option<Box<dyn Write + Send>>,
    totals: Totals,
    errors: Vec<ErrorRecord>,
    stopped_by: Option<Limit>,
    /// Machines of scheduled restarts, taken when their event comes.
    restarts: Vec<Option<Box<dyn Protocol + Send>>>,
    /// Application inputs scheduled with [`Simulation::input_at`], taken when their event
    /// comes.
    app_inputs: Vec<Option<Input>>,
}

impl fmt::Debug for Simulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulation")
            .field("now", &self.now)
            .field("events", &self.events)
            .field("nodes", &self.node_ids())
            .field("pending", &self.heap.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// An empty simulation over `platform`, at time 0. Add machines with
    /// [`add_node`](Self::add_node), then [`run`](Self::run).
    pub fn new(platform: Platform, config: SimConfig) -> Simulation {
        let n = platform.node_count();
        let mut slots = Vec::with_capacity(n);
        slots.resize_with(n, Slot::default);
        for (v, slot) in slots.iter_mut().enumerate() {
            slot.send_cost = platform.send_cost(NodeId::from(v));
            slot.last_send_start = f64::NEG_INFINITY;
        }
        Simulation {
            net: Network::new(platform, config.policy),
            config,
            slots,
            state: vec![NodeState::default(); n],
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0.0,
            events: 0,
            in_flight: InFlightTable::default(),
            timer_gen: 0,
            arrivals: Vec::new(),
            out: Outputs::new(),
            log: None,
            totals: Totals::default(),
            errors: Vec::new(),
            stopped_by: None,
            restarts: Vec::new(),
            app_inputs: Vec::new(),
        }
    }

    /// Adds the machine of node `machine.node()`, started at time 0.
    pub fn add_node<P: Protocol + Send + 'static>(&mut self, machine: P) -> Result<(), SimError> {
        self.add_boxed_node(Box::new(machine), 0.0)
    }

    /// Adds the machine of node `machine.node()`, started (it joins) at `start_at_s`.
    pub fn add_node_at<P: Protocol + Send + 'static>(
        &mut self,
        machine: P,
        start_at_s: f64,
    ) -> Result<(), SimError> {
        self.add_boxed_node(Box::new(machine), start_at_s)
    }

    /// Adds a boxed machine, started at `start_at_s` (not before the engine's clock).
    ///
    /// Errors: the node is outside the platform or already has a machine; a bad time.
    pub fn add_boxed_node(
        &mut self,
        machine: Box<dyn Protocol + Send>,
        start_at_s: f64,
    ) -> Result<(), SimError> {
        let node = machine.node();
        let slot = self.slot_index(node)?;
        if self.state[slot].machine {
            return Err(SimError::DuplicateNode { node });
        }
        self.check_time("start time", start_at_s)?;
        self.slots[slot].machine = Some(machine);
        self.state[slot].machine = true;
        self.slots[slot].metrics = Some(NodeMetrics::new(node));
        self.push(start_at_s, K_START, node, Ev::Start);
        Ok(())
    }

    /// Sets how long `node` takes to compute (default [`ComputeModel::Instant`]).
    pub fn set_compute(&mut self, node: NodeId, model: ComputeModel) -> Result<(), SimError> {
        let slot = self.slot_index(node)?;
        if !model.is_valid() {
            return Err(SimError::BadCompute { node, model });
        }
        self.slots[slot].compute = model;
        Ok(())
    }

    /// Injects the failure of `node` at `at_s`: see the [module docs](self).
    pub fn fail_node_at(&mut self, node: NodeId, at_s: f64) -> Result<(), SimError> {
        self.check_time("failure time", at_s)?;
        self.slot_index(node)?;
        self.push(at_s, K_FAIL, node, Ev::Fail);
        Ok(())
    }

    /// Restarts the node of `machine.node()` at `at_s` with `machine`: see the [module
    /// docs](self). The node must have failed by then ([`fail_node_at`](Self::fail_node_at) at
    /// or before `at_s`); a restart of a live node is recorded in [`Metrics::errors`] (or ends
    /// a [strict](SimConfig::strict) run) and the node keeps its machine.
    ///
    /// Errors: the node is outside the platform or never had a machine; a bad time.
    pub fn restart_node_at(
        &mut self,
        machine: Box<dyn Protocol + Send>,
        at_s: f64,
    ) -> Result<(), SimError> {
        let node = machine.node();
        let slot = self.slot_index(node)?;
        if !self.state[slot].machine {
            return Err(SimError::NoMachine { node });
        }
        self.check_time("restart time", at_s)?;
        self.restarts.push(Some(machine));
        let index = self.restarts.len() - 1;
        self.push(at_s, K_RESTART, node, Ev::Restart { index });
        Ok(())
    }

    /// Feeds `input` to `node`'s machine at `at_s`, as its application would (e.g. a
    /// [`Host`](windrose_proto::host::Host) asked to start a collective with
    /// `Input::App`); after everything else that happens at that instant. An input for a node
    /// that has failed by then is dropped.
    ///
    /// Errors: the node is outside the platform or has no machine; a bad time.
    pub fn input_at(&mut self, node: NodeId, at_s: f64, input: Input) -> Result<(), SimError> {
        let slot = self.slot_index(node)?;
        if !self.state[slot].machine {
            return Err(SimError::NoMachine { node });
        }
        self.check_time("input time", at_s)?;
        self.app_inputs.push(Some(input));
        let index = self.app_inputs.len() - 1;
        self.push(at_s, K_APP, node, Ev::App { index });
        Ok(())
    }

    /// Schedules a change of the platform at `at_s` ([`Network::schedule`]).
    pub fn schedule_change(&mut self, at_s: f64, change: Change) -> Result<(), SimError> {
        self.check_time("change time", at_s)?;
        self.net.schedule(at_s, change)?;
        Ok(())
    }

    /// Writes one JSON line per event to `log` from now on (see the [module
    /// docs](self#determinism)); replaces an earlier log.
    ///
    /// Each line has `t` (seconds), `node`, `ev` and, depending on the event, `peer`, `msg` (the
    /// message kind), `bytes` (wire bytes, or bytes for `deliver` and `compute`), `offset`/`len`
    /// (payload position), `id` (timer, task or send id), `at` (when a timer or computation is
    /// due) and `detail` (abort reasons, errors). Events: `start`, `recv`, `send`, `drop`,
    /// `send_complete`, `deliver`, `compute`, `compute_done`, `set_timer`, `cancel_timer`,
    /// `timer`, `report`, `finished`, `aborted`, `fail`, `peer_failed`, `restart`, `error`.
    pub fn set_event_log(&mut self, log: Box<dyn Write + Send>) {
        self.log = Some(log);
    }

    /// Flushes and removes the event log.
    pub fn take_event_log(&mut self) -> Result<Option<Box<dyn Write + Send>>, SimError> {
        if let Some(log) = self.log.as_mut() {
            log.flush()?;
        }
        Ok(self.log.take())
    }

    /// Replaces the run limits.
    pub fn set_limits(&mut self, limits: RunLimits) {
        self.config.limits = limits;
    }

    /// The settings.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The engine's clock: the time of the last event processed (by a machine or by the
    /// network), seconds. Failures, changes and joins may be scheduled at any time from here on.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Engine events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The network (its platform, connection and link statistics).
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// How many nodes with a machine have finished, aborted or failed (cheap: for progress
    /// bars between [`run_until`](Self::run_until) calls).
    pub fn ended_count(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.metrics.as_ref())
            .filter(|m| outcome_of(m).is_ended())
            .count()
    }

    /// True when every node with a machine has finished, aborted or failed.
    pub fn all_ended(&self) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.metrics.as_ref())
            .all(|m| outcome_of(m).is_ended())
    }

    /// The nodes that have a machine, by id.
    pub fn node_ids(&self) -> Vec<NodeId> {
        (0..self.slots.len())
            .filter(|&i| self.state[i].machine)
            .map(NodeId::from)
            .collect()
    }

    /// The machine of `node`, to inspect its state.
    pub fn machine(&self, node: NodeId) -> Option<&(dyn Protocol + Send)> {
        self.slots.get(node.index())?.machine.as_deref()
    }

    /// What `node`'s application received, as `(offset, bytes)` in order; empty unless
    /// [`SimConfig::record_deliveries`] is set.
    pub fn delivered(&self, node: NodeId) -> &[(u64, Bytes)] {
        self.slots
            .get(node.index())
            .map_or(&[], |s| s.delivered.as_slice())
    }

    /// What `node`'s application received of collective `transfer`, as `(offset, bytes)` in
    /// order; empty unless [`SimConfig::record_deliveries`] is set.
    pub fn delivered_of(&self, node: NodeId, transfer: TransferId) -> Vec<(u64, Bytes)> {
        let Some(s) = self.slots.get(node.index()) else {
            return Vec::new();
        };
        s.delivered
            .iter()
            .zip(&s.delivered_transfers)
            .filter(|(_, t)| **t == transfer)
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// Runs until nothing is pending and returns the metrics.
    ///
    /// Errors: [`SimError::LimitReached`] when a [run limit](RunLimits) stops the run while some
    /// node has not ended; [`SimError::Protocol`] in strict mode; [`SimError::Log`].
    pub fn run(&mut self) -> Result<Metrics, SimError> {
        self.run_until(f64::INFINITY)?;
        Ok(self.metrics())
    }

    /// Processes every event up to and including time `t` (seconds), e.g. to draw a progress
    /// bar between calls. Errors as [`run`](Self::run).
    pub fn run_until(&mut self, t: f64) -> Result<RunState, SimError> {
        loop {
            if self.heap.is_empty() && self.in_flight.is_empty() {
                // Nothing for any machine any more: network changes still scheduled would
                // change nothing anyone sees.
                return Ok(RunState::Idle);
            }
            let t_net = self.net.next_event_time();
            let t_eng = self.heap.peek().map(|Reverse(e)| f64::from_bits(e.key));
            let next = match (t_net, t_eng) {
                (None, None) => return Ok(RunState::Idle),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (Some(a), Some(b)) => a.min(b),
            };
            if next > t {
                return Ok(RunState::Paused);
            }
            if let Some(max_time_s) = self.config.limits.max_time_s {
                if next > max_time_s {
                    return self.limit_hit(Limit::Time { max_time_s });
                }
            }
            if t_net == Some(next) {
                // The clock follows the network too, so that anything scheduled from outside
                // between two `run_until` calls is never behind the network's clock.
                self.now = next;
                self.pull_arrivals(next);
                continue;
            }
            if let Some(max_events) = self.config.limits.max_events {
                if self.events >= max_events {
                    return self.limit_hit(Limit::Events { max_events });
                }
            }
            let Reverse(entry) = self.heap.pop().expect("peeked");
            if let Some(Reverse(next)) = self.heap.peek() {
                self.prefetch_event(next);
            }
            if self.is_dead_timer(&entry) {
                // A cancelled or moved timer is not an event: it must not move the clock (a
                // finished run would otherwise "end" at its longest cancelled timeout).
                continue;
            }
            self.now = next;
            self.events += 1;
            self.process(entry)?;
        }
    }

    fn limit_hit(&mut self, limit: Limit) -> Result<RunState, SimError> {
        let unfinished = self.unfinished();
        if unfinished.is_empty() {
            self.stopped_by = Some(limit);
            // Everything pending is discarded: the run is over.
            self.heap.clear();
            return Ok(RunState::Idle);
        }
        Err(SimError::LimitReached {
            limit,
            at_s: self.now,
            events: self.events,
            unfinished,
        })
    }

    fn unfinished(&self) -> Vec<NodeId> {
        self.slots
            .iter()
            .filter_map(|s| s.metrics.as_ref())
            .filter(|m| !outcome_of(m).is_ended())
            .map(|m| m.node)
            .collect()
    }

    /// The metrics so far (complete once [`run`](Self::run) returned).
    pub fn metrics(&self) -> Metrics {
        let mut nodes: Vec<NodeMetrics> = self
            .slots
            .iter()
            .filter_map(|s| s.metrics.clone())
            .collect();
        let (mut finished, mut aborted, mut failed, mut unfinished) = (0, 0, 0, 0);
        let mut makespan: Option<f64> = None;
        for m in &mut nodes {
            m.outcome = outcome_of(m);
            match m.outcome {
                NodeOutcome::Finished => {
                    finished += 1;
                    let f = m.finished_at_s.unwrap_or(0.0);
                    makespan = Some(makespan.map_or(f, |x: f64| x.max(f)));
                }
                NodeOutcome::Aborted => aborted += 1,
                NodeOutcome::Failed => failed += 1,
                NodeOutcome::Running | NodeOutcome::NotStarted => unfinished += 1,
            }
        }
        let platform = self.net.platform();
        let links = platform
            .links()
            .map(|l| self.net.link_stats(l))
            .filter(|s| s.bytes > 0.0)
            .map(|s| LinkMetrics {
                link: s.link.into(),
                capacity_bytes_s: s.capacity_bytes_s,
                bytes: s.bytes,
            })
            .collect();
        let totals = self.totals;
        Metrics {
            end_time_s: self.now,
            events: self.events,
            stopped_by: self.stopped_by,
            finished,
            aborted,
            failed,
            unfinished,
            makespan_s: makespan,
            throughput_bytes_s: makespan
                .filter(|&m| m > 0.0)
                .map(|m| totals.app_bytes_delivered as f64 / m),
            totals,
            nodes,
            links,
            errors: self.errors.clone(),
            network: NetworkWork::from(self.net.stats()),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Internals

    fn check_time(&self, what: &'static str, t: f64) -> Result<(), SimError> {
        if t.is_finite() && t >= 0.0 && t >= self.now {
            Ok(())
        } else {
            Err(SimError::BadTime {
                what,
                value: t,
                now: self.now,
            })
        }
    }

    fn slot_index(&self, node: NodeId) -> Result<usize, SimError> {
        if node.index() < self.slots.len() {
            Ok(node.index())
        } else {
            Err(SimError::UnknownNode {
                node,
                node_count: self.slots.len(),
            })
        }
    }

    fn push(&mut self, t: f64, kind: u8, node: NodeId, ev: Ev) {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            key: key_of(t),
            kind,
            seq,
            node: node.0,
            ev,
        }));
    }

    /// Advances the network to `t` and queues what arrived, in message id order.
    fn pull_arrivals(&mut self, t: f64) {
        let mut arrivals = std::mem::take(&mut self.arrivals);
        arrivals.clear();
        self.net.advance_into(t, &mut arrivals);
        for d in &arrivals {
            self.push(d.at, K_ARRIVE, d.dst, Ev::Arrive { slot: d.tag });
        }
        self.arrivals = arrivals;
    }

    fn take_in_flight(&mut self, slot: u64) -> Option<InFlight> {
        self.in_flight.take(slot)
    }

    fn log_line(&mut self, line: LogLine<'_>) -> Result<(), SimError> {
        if let Some(log) = self.log.as_mut() {
            serde_json::to_writer(&mut *log, &line).map_err(io::Error::from)?;
            log.write_all(b"\n")?;
        }
        Ok(())
    }

    fn logging(&self) -> bool {
        self.log.is_some()
    }

    fn time_now(&self) -> Time {
        Time::from_secs_f64(self.now)
    }

    /// Records (and in strict mode returns) an error of `node`'s machine or output.
    fn error(&mut self, node: NodeId, peer: Option<NodeId>, error: String) -> Result<(), SimError> {
        if self.logging() {
            let mut l = LogLine::new(self.now, node, "error");
            l.peer = peer.map(|p| p.0);
            l.detail = Some(error.clone());
            self.log_line(l)?;
        }
        if self.config.strict {
            return Err(SimError::Protocol {
                at_s: self.now,
                node,
                error,
            });
        }
        self.errors.push(ErrorRecord {
            at_s: self.now,
            node,
            peer,
            error,
        });
        Ok(())
    }

    /// True for a timer entry that was cancelled or moved, or whose node has failed.
    /// Asks for the lines event `e` will read first (its node's slot, state and metrics, and
    /// an arrival's message), so that they load while the event before it runs: at large N
    /// each of them is a cache miss (see [`crate::prefetch`]).
    fn prefetch_event(&self, e: &Entry) {
        let i = e.node as usize;
        prefetch(&self.state, i);
        prefetch(&self.slots, i);
        if let Some(slot) = self.slots.get(i) {
            // An address only: nothing of the slot is read here.
            prefetch(std::slice::from_ref(&slot.metrics), 0);
        }
        if let Ev::Arrive { slot } = e.ev {
            prefetch(&self.in_flight.slots, slot as usize);
        }
    }

    fn is_dead_timer(&self, e: &Entry) -> bool {
        let Ev::Timer { timer, gen, .. } = e.ev else {
            return false;
        };
        let i = NodeId(e.node).index();
        let slot = &self.slots[i];
        self.state[i].failed || !slot.timers.iter().any(|&(t, g)| t == timer && g == gen)
    }

    fn process(&mut self, e: Entry) -> Result<(), SimError> {
        let node = NodeId(e.node);
        let i = node.index();
        match e.ev {
            Ev::Fail => self.on_fail(node),
            Ev::Start => {
                if self.state[i].failed || self.slots[i].started {
                    return Ok(());
                }
                self.slots[i].started = true;
                self.slots[i].metrics().started_at_s = Some(self.now);
                if self.logging() {
                    self.log_line(LogLine::new(self.now, node, "start"))?;
                }
                self.dispatch(node, Input::Start, None, self.time_now())?;
                for input in std::mem::take(&mut self.slots[i].waiting) {
                    if self.state[i].failed {
                        break;
                    }
                    let peer = match &input {
                        Input::Message { from, .. } | Input::PeerFailed(from) => Some(*from),
                        _ => None,
                    };
                    self.dispatch(node, input, peer, self.time_now())?;
                }
                Ok(())
            }
            Ev::Arrive { slot } => {
                let Some(m) = self.take_in_flight(slot) else {
                    return Ok(()); // dropped at a failure
                };
                self.on_arrival(m)
            }
            Ev::SendDone { to, id } => {
                if self.state[i].failed {
                    return Ok(());
                }
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "send_complete");
                    l.peer = Some(to.0);
                    l.id = Some(id.0);
                    self.log_line(l)?;
                }
                self.input(node, Input::SendComplete { to, id }, Some(to))
            }
            Ev::ComputeDone { task } => {
                if self.state[i].failed {
                    return Ok(());
                }
                self.slots[i].metrics().compute_done_at_s = Some(self.now);
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "compute_done");
                    l.id = Some(u64::from(task.0));
                    self.log_line(l)?;
                }
                self.input(node, Input::Command(Command::ComputeDone { task }), None)
            }
            Ev::Timer { timer, gen, at } => {
                if self.state[i].failed {
                    return Ok(());
                }
                let slot = &mut self.slots[i];
                let Some(k) = slot
                    .timers
                    .iter()
                    .position(|&(t, g)| t == timer && g == gen)
                else {
                    return Ok(()); // moved or cancelled
                };
                slot.timers.swap_remove(k);
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "timer");
                    l.id = Some(u64::from(timer.0));
                    self.log_line(l)?;
                }
                // Never earlier than asked, whatever the rounding to nanoseconds.
                let now = self.time_now().max(at);
                self.dispatch(node, Input::Timer(timer), None, now)
            }
            Ev::PeerFailed { peer } => {
                if self.state[i].failed {
                    return Ok(());
                }
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "peer_failed");
                    l.peer = Some(peer.0);
                    self.log_line(l)?;
                }
                self.input(node, Input::PeerFailed(peer), Some(peer))
            }
            Ev::Restart { index } => {
                let machine = self.restarts[index]
                    .take()
                    .expect("a restart is taken once");
                self.on_restart(node, machine)
            }
            Ev::Inject { slot } => self.inject(node, slot),
            Ev::App { index } => {
                let input = self.app_inputs[index]
                    .take()
                    .expect("an application input is taken once");
                if self.state[i].failed {
                    return Ok(());
                }
                if self.logging() {
                    self.log_line(LogLine::new(self.now, node, "app"))?;
                }
                self.input(node, input, None)
            }
        }
    }

    fn on_restart(
        &mut self,
        node: NodeId,
        machine: Box<dyn Protocol + Send>,
    ) -> Result<(), SimError> {
        let i = node.index();
        if !self.state[i].failed {
            let at = self.now;
            return self.error(
                node,
                None,
                format!("restart at {at} s of a node that has not failed"),
            );
        }
        for d in self.net.drop_node(self.now, node)? {
            if self.take_in_flight(d.tag).is_some() {
                self.totals.messages_dropped += 1;
            }
        }
        let now = self.now;
        let slot = &mut self.slots[i];
        slot.machine = Some(machine);
        self.state[i].failed = false;
        slot.started = true;
        slot.timers.clear();
        slot.waiting.clear();
        slot.busy_until = now;
        slot.delivered.clear();
        slot.delivered_transfers.clear();
        let m = slot.metrics();
        let failed_at_s = m.failed_at_s.take().unwrap_or(now);
        m.restarts.push(Restart {
            failed_at_s,
            restarted_at_s: now,
        });
        m.started_at_s = Some(now);
        m.finished_at_s = None;
        m.aborted_at_s = None;
        m.abort_reason = None;
        m.app_bytes_delivered = 0;
        m.progress = None;
        if self.logging() {
            self.log_line(LogLine::new(now, node, "restart"))?;
        }
        // A restarted process finds the nodes that are down by failing to reach them: it is
        // told before it starts, so it does not count on them.
        let down: Vec<NodeId> = (0..self.slots.len())
            .filter(|&j| j != i && self.state[j].machine && self.state[j].failed)
            .map(NodeId::from)
            .collect();
        for p in down {
            self.dispatch(node, Input::PeerFailed(p), Some(p), self.time_now())?;
        }
        self.dispatch(node, Input::Start, None, self.time_now())
    }

    /// Feeds `input` to a live node now, or keeps it for after its start.
    fn input(&mut self, node: NodeId, input: Input, peer: Option<NodeId>) -> Result<(), SimError> {
        if self.state[node.index()].failed {
            return Ok(());
        }
        let slot = &mut self.slots[node.index()];
        if !slot.started {
            slot.waiting.push(input);
            return Ok(());
        }
        self.dispatch(node, input, peer, self.time_now())
    }

    fn on_arrival(&mut self, m: InFlight) -> Result<(), SimError> {
        let to = m.to.index();
        let from = self.state[m.from.index()];
        if from.machine && !from.failed {
            if let Some(id) = m.notify {
                self.push(self.now, K_SEND_DONE, m.from, Ev::SendDone { to: m.to, id });
            }
        }
        if !self.state[to].machine || self.state[to].failed {
            self.totals.messages_dropped += 1;
            if self.logging() {
                let mut l = LogLine::new(self.now, m.to, "drop").message(&m.message);
                l.peer = Some(m.from.0);
                l.bytes = Some(m.wire_bytes);
                self.log_line(l)?;
            }
            return Ok(());
        }
        self.totals.messages_delivered += 1;
        self.totals.wire_bytes_delivered += m.wire_bytes;
        let metrics = self.slots[to].metrics();
        metrics.messages_received += 1;
        metrics.wire_bytes_received += m.wire_bytes;
        if self.logging() {
            let mut l = LogLine::new(self.now, m.to, "recv").message(&m.message);
            l.peer = Some(m.from.0);
            l.bytes = Some(m.wire_bytes);
            self.log_line(l)?;
        }
        self.input(
            m.to,
            Input::Message {
                from: m.from,
                message: m.message,
            },
            Some(m.from),
        )
    }

    /// With a send cost, when the message sent now leaves (None: now, as without one). LogP:
    /// a send starts once the previous one has left and at least `gap` after its start, and
    /// leaves `overhead` later, so a node sending to k children pays k times.
    fn leave_time(&mut self, i: usize) -> Option<f64> {
        let slot = &mut self.slots[i];
        if slot.send_cost.is_zero() {
            return None;
        }
        let start = self
            .now
            .max(slot.last_send_start + slot.send_cost.gap_s)
            .max(slot.last_send_leave);
        let leave = start + slot.send_cost.overhead_s;
        slot.last_send_start = start;
        slot.last_send_leave = leave;
        Some(leave)
    }

    /// A message whose send cost is paid enters the network, unless an end failed meanwhile.
    fn inject(&mut self, from: NodeId, slot: u64) -> Result<(), SimError> {
        let Some(m) = self.in_flight.get_mut(slot) else {
            // Dropped at a failure of one of its ends.
            self.in_flight.release(slot);
            return Ok(());
        };
        m.waiting = false;
        let (to, wire_bytes) = (m.to, m.wire_bytes);
        if self.state[from.index()].failed || self.state[to.index()].failed {
            self.take_in_flight(slot);
            self.totals.messages_dropped += 1;
            return Ok(());
        }
        self.net.send(self.now, from, to, wire_bytes, slot)?;
        Ok(())
    }

    fn on_fail(&mut self, node: NodeId) -> Result<(), SimError> {
        let i = node.index();
        if self.state[i].failed {
            return Ok(());
        }
        self.state[i].failed = true;
        let slot = &mut self.slots[i];
        slot.timers.clear();
        slot.waiting.clear();
        if let Some(m) = slot.metrics.as_mut() {
            m.failed_at_s = Some(self.now);
        }
        if self.logging() {
            self.log_line(LogLine::new(self.now, node, "fail"))?;
        }
        let connected: Vec<bool> = match self.config.failure_notice.peers {
            NotifyPeers::All => vec![true; self.slots.len()],
            NotifyPeers::Connected => {
                let mut c = vec![false; self.slots.len()];
                for s in self.net.connections() {
                    if s.src == node {
                        c[s.dst.index()] = true;
                    } else if s.dst == node {
                        c[s.src.index()] = true;
                    }
                }
                c
            }
        };
        for d in self.net.drop_node(self.now, node)? {
            if self.take_in_flight(d.tag).is_some() {
                self.totals.messages_dropped += 1;
            }
        }
        // What is left from or to the node is still paying a send cost: it dies with the node
        // (even if the node restarts before its injection time).
        self.totals.messages_dropped += self
            .in_flight
            .drop_waiting(|m| m.from == node || m.to == node);
        let at = self.now + self.config.failure_notice.delay_s.max(0.0);
        for (p, &c) in connected.iter().enumerate() {
            let s = self.state[p];
            if c && p != i && s.machine && !s.failed {
                self.push(
                    at,
                    K_PEER_FAILED,
                    NodeId::from(p),
                    Ev::PeerFailed { peer: node },
                );
            }
        }
        Ok(())
    }

    /// Calls the machine of `node` and performs its outputs.
    fn dispatch(
        &mut self,
        node: NodeId,
        input: Input,
        peer: Option<NodeId>,
        now: Time,
    ) -> Result<(), SimError> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let machine = self.slots[node.index()]
            .machine
            .as_mut()
            .expect("dispatch to a node with a machine");
        let result = machine.handle(now, input, &mut out);
        let r = match result {
            Err(e) => self.error(node, peer, protocol_error_text(&e)),
            Ok(()) => {
                let mut r = Ok(());
                for o in out.drain() {
                    r = self.perform(node, o);
                    if r.is_err() {
                        break;
                    }
                }
                r
            }
        };
        out.clear();
        self.out = out;
        r
    }

    fn perform(&mut self, node: NodeId, output: Output) -> Result<(), SimError> {
        let i = node.index();
        match output {
            Output::Send(t) => {
                let wire_bytes = encoded_len(&t.message) as u64;
                if t.to == node || t.to.index() >= self.slots.len() {
                    let why = if t.to == node {
                        format!("a {} message to itself cannot be sent", t.message.kind())
                    } else {
                        format!(
                            "a {} message to node {}, outside the platform, cannot be sent",
                            t.message.kind(),
                            t.to
                        )
                    };
                    return self.error(node, Some(t.to), why);
                }
                let m = self.slots[i].metrics();
                m.messages_sent += 1;
                m.wire_bytes_sent += wire_bytes;
                self.totals.messages_sent += 1;
                self.totals.wire_bytes_sent += wire_bytes;
                if self.state[t.to.index()].failed {
                    self.totals.messages_dropped += 1;
                    if self.logging() {
                        let mut l = LogLine::new(self.now, node, "drop").message(&t.message);
                        l.peer = Some(t.to.0);
                        l.bytes = Some(wire_bytes);
                        self.log_line(l)?;
                    }
                    return Ok(());
                }
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "send").message(&t.message);
                    l.peer = Some(t.to.0);
                    l.bytes = Some(wire_bytes);
                    l.id = t.notify.map(|s| s.0);
                    self.log_line(l)?;
                }
                let slot = self.in_flight.next_slot();
                let leave = self.leave_time(i);
                match leave {
                    Some(at) => self.push(at, K_INJECT, node, Ev::Inject { slot }),
                    None => {
                        self.net.send(self.now, node, t.to, wire_bytes, slot)?;
                    }
                }
                let taken = self.in_flight.insert(InFlight {
                    from: node,
                    to: t.to,
                    message: t.message,
                    notify: t.notify,
                    wire_bytes,
                    waiting: leave.is_some(),
                });
                debug_assert_eq!(taken, slot);
                Ok(())
            }
            Output::SetTimer { timer, at } => {
                self.timer_gen += 1;
                let gen = self.timer_gen;
                let timers = &mut self.slots[i].timers;
                match timers.iter_mut().find(|(t, _)| *t == timer) {
                    Some(entry) => entry.1 = gen,
                    None => timers.push((timer, gen)),
                }
                let when = at.as_secs_f64().max(self.now);
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "set_timer");
                    l.id = Some(u64::from(timer.0));
                    l.at = Some(when);
                    self.log_line(l)?;
                }
                self.push(when, K_TIMER, node, Ev::Timer { timer, gen, at });
                Ok(())
            }
            Output::CancelTimer(timer) => {
                self.slots[i].timers.retain(|(t, _)| *t != timer);
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "cancel_timer");
                    l.id = Some(u64::from(timer.0));
                    self.log_line(l)?;
                }
                Ok(())
            }
            Output::Deliver {
                transfer,
                offset,
                data,
            } => {
                let len = data.len() as u64;
                self.totals.app_bytes_delivered += len;
                self.slots[i].metrics().app_bytes_delivered += len;
                if self.config.record_deliveries {
                    self.slots[i].delivered.push((offset, data));
                    self.slots[i].delivered_transfers.push(transfer);
                }
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "deliver");
                    l.offset = Some(offset);
                    l.bytes = Some(len);
                    self.log_line(l)?;
                }
                Ok(())
            }
            Output::Compute(task) => {
                let slot = &mut self.slots[i];
                let start = slot.busy_until.max(self.now);
                let done = start + slot.compute.duration_s(task.len);
                slot.busy_until = done;
                let m = slot.metrics();
                m.compute_tasks += 1;
                m.compute_bytes += task.len;
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "compute");
                    l.id = Some(u64::from(task.task.0));
                    l.offset = Some(task.offset);
                    l.bytes = Some(task.len);
                    l.at = Some(done);
                    self.log_line(l)?;
                }
                self.push(
                    done,
                    K_COMPUTE_DONE,
                    node,
                    Ev::ComputeDone { task: task.task },
                );
                Ok(())
            }
            Output::Report(r) => {
                let at_s = self.now;
                // Progress is a running count, kept as the node's last value; every other
                // report is kept as it was pushed.
                let data = match r {
                    Report::Progress {
                        done_bytes,
                        total_bytes,
                        ..
                    } => {
                        self.slots[i].metrics().progress = Some(ProgressRecord {
                            at_s,
                            done_bytes,
                            total_bytes,
                        });
                        None
                    }
                    other => Some(other),
                };
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "report");
                    l.detail = Some(format!("{r:?}"));
                    self.log_line(l)?;
                }
                if let Some(report) = data {
                    self.slots[i]
                        .metrics()
                        .reports
                        .push(ReportRecord { at_s, report });
                }
                Ok(())
            }
            Output::Finished => {
                let now = self.now;
                let m = self.slots[i].metrics();
                if m.finished_at_s.is_none() {
                    m.finished_at_s = Some(now);
                }
                if self.logging() {
                    self.log_line(LogLine::new(self.now, node, "finished"))?;
                }
                Ok(())
            }
            Output::Aborted(reason) => {
                let now = self.now;
                let m = self.slots[i].metrics();
                if m.aborted_at_s.is_none() {
                    m.aborted_at_s = Some(now);
                    m.abort_reason = Some(reason.to_string());
                }
                if self.logging() {
                    let mut l = LogLine::new(self.now, node, "aborted");
                    l.detail = Some(reason.to_string());
                    self.log_line(l)?;
                }
                Ok(())
            }
        }
    }
}

fn protocol_error_text(e: &ProtocolError) -> String {
    e.to_string()
}

/// A node's outcome from what was recorded (failure wins, then abort, then finish).
fn outcome_of(m: &NodeMetrics) -> NodeOutcome {
    if m.failed_at_s.is_some() {
        NodeOutcome::Failed
    } else if m.aborted_at_s.is_some() {
        NodeOutcome::Aborted
    } else if m.finished_at_s.is_some() {
        NodeOutcome::Finished
    } else if m.started_at_s.is_some() {
        NodeOutcome::Running
    } else {
        NodeOutcome::NotStarted
    }
}

/// A ready-to-run pipelined broadcast of `payload` over `tree` (see
/// [`windrose_proto::tree_broadcast`]): one [`TreeBroadcast`] per tree member, all started at 0,
/// on `platform` with `policy` and otherwise default settings (change them with
/// [`Simulation::set_limits`] and friends before running).
///
/// Errors: a tree member outside the platform, an invalid `config`.
pub fn broadcast(
    platform: Platform,
    tree: &Tree,
    payload: impl Into<Payload>,
    config: BroadcastConfig,
    policy: SharingPolicy,
) -> Result<Simulation, SimError> {
    broadcast_with(
        platform,
        tree,
        payload,
        config,
        SimConfig::with_policy(policy),
    )
}

/// [`broadcast`] with every setting given.
pub fn broadcast_with(
    platform: Platform,
    tree: &Tree,
    payload: impl Into<Payload>,
    config: BroadcastConfig,
    sim_config: SimConfig,
) -> Result<Simulation, SimError> {
    let data = payload.into().into_bytes();
    let mut sim = Simulation::new(platform, sim_config);
    for &n in tree.nodes() {
        sim.slot_index(n)?;
        let d = (n == tree.root()).then(|| data.clone());
        sim.add_node(TreeBroadcast::new(n, tree, d, config)?)?;
    }
    Ok(sim)
}

/// A ready-to-run divisible-load scatter of `load` following `schedule` (see
/// [`windrose_proto::scatter`]): one [`Scatter`] per schedule node, all started at 0, node `n`
/// computing at `compute_bytes_s[n]` bytes per second (indexed by node id; `f64::INFINITY` for
/// instant), on `platform` with `policy`.
///
/// With `SendMode::Sequential`, zero-latency routes and one bottleneck per parent→child route,
/// every node computes its share when the schedule says (up to the frame overhead: see
/// [`ScatterConfig::wire_bytes_for_share`]); the `engine` tests check it to 1e-9.
///
/// Errors: a node outside the platform or without a speed, a bad speed, an invalid schedule or
/// `config`.
pub fn scatter(
    platform: Platform,
    schedule: &Schedule,
    load: impl Into<Payload>,
    config: ScatterConfig,
    compute_bytes_s: &[f64],
    policy: SharingPolicy,
) -> Result<Simulation, SimError> {
    scatter_with(
        platform,
        schedule,
        load,
        config,
        compute_bytes_s,
        SimConfig::with_policy(policy),
    )
}

/// [`scatter`] with every setting given.
pub fn scatter_with(
    platform: Platform,
    schedule: &Schedule,
    load: impl Into<Payload>,
    config: ScatterConfig,
    compute_bytes_s: &[f64],
    sim_config: SimConfig,
) -> Result<Simulation, SimError> {
    let mut sim = Simulation::new(platform, sim_config);
    for s in &schedule.nodes {
        sim.slot_index(s.node)?;
        if compute_bytes_s.len() <= s.node.index() {
            return Err(SimError::VectorTooShort {
                what: "compute_bytes_s",
                len: compute_bytes_s.len(),
                node: s.node,
            });
        }
    }
    let machines = Scatter::all(schedule, load.into().into_bytes(), config)?;
    for m in machines {
        let n = m.node();
        sim.add_node(m)?;
        let speed = compute_bytes_s[n.index()];
        let model = if speed == f64::INFINITY {
            ComputeModel::Instant
        } else {
            ComputeModel::BytesPerSecond(speed)
        };
        sim.set_compute(n, model)?;
    }
    Ok(sim)
}
