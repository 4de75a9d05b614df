//! What every protocol machine shares: the [`Protocol`] trait, its [`Input`]s and [`Output`]s,
//! and the identifiers, reports and errors they carry.
//!
//! # The driver's contract
//!
//! A driver (the simulator, the tokio runtime, a test loop) owns one machine per node and:
//! 1. calls `handle(now, Input::Start, out)` once, before any other input;
//! 2. for every event (a message decoded from a peer, a timer it was asked to set, an
//!    application command, a send it was asked to report, a peer failure) calls
//!    `handle(now, input, out)` with its current time;
//! 3. after each call performs the pushed [`Output`]s **in order** and clears the buffer:
//!    - [`Output::Send`]: send the message to the peer. Messages to one peer must arrive in the
//!      order they were pushed (one FIFO connection per ordered pair, as TCP gives). When
//!      `notify` is set, feed [`Input::SendComplete`] back once the message has been
//!      transmitted (simulator: its transfer has completed; runtime: its last byte was written
//!      to the socket).
//!    - [`Output::SetTimer`]: arrange [`Input::Timer`] at (or after) `at`; setting an id that is
//!      already set moves it. [`Output::CancelTimer`]: forget it. Machines tolerate stale
//!      timers, so a driver that cannot cancel may deliver them anyway.
//!    - [`Output::Deliver`]: hand data to the application (write it to memory or a file).
//!    - [`Output::Compute`]: have the application process the data (the simulator waits a time
//!      given by the node's speed, the runtime runs real work), then feed
//!      `Input::Command(Command::ComputeDone { task })`.
//!    - [`Output::Report`]: progress and measurements for the user or for metrics.
//!    - [`Output::Finished`] / [`Output::Aborted`]: the node has reached its end. A finished
//!      node needs nothing more from the network, but the driver still owes it the sends it was
//!      handed (a runtime flushes its connections before it exits).
//! 4. when `handle` returns an error, treats the sender as faulty (a runtime closes that
//!    connection and reports the error). The machine is unchanged by a rejected input and
//!    pushed nothing for it.

use crate::frame::{FrameError, Message, MessageKind, TransferId};
use crate::time::Time;
use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use windrose_model::NodeId;

/// A protocol node: a state machine the driver feeds [`Input`]s, which answers with
/// [`Output`]s pushed to a driver-owned buffer.
///
/// Object safe, so a driver may hold `Box<dyn Protocol>` for mixed protocols.
pub trait Protocol {
    /// The node this machine runs on.
    fn node(&self) -> NodeId;

    /// Feeds one input at time `now`; the consequences are pushed to `out` in the order the
    /// driver must perform them. On error the machine is unchanged and nothing was pushed.
    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError>;

    /// Where the machine is: running, finished or aborted.
    fn status(&self) -> Status;

    /// True once the machine has pushed [`Output::Finished`].
    fn is_finished(&self) -> bool {
        self.status() == Status::Finished
    }

    /// When the machine passed its named steps, at the `now` of the input that took it there
    /// (oldest first): the host reports them with the member's end, so the initiator can see
    /// where a member's time went ([`MemberReport`](crate::host::MemberReport)). Most machines
    /// name none.
    fn phases(&self) -> Vec<(&'static str, Time)> {
        Vec::new()
    }

    /// The host offers its view of the links after a send of this machine completed, so a
    /// machine that can change its routes while it runs may (a tree broadcast hands a child
    /// whose link slowed to another parent: [`crate::tree_broadcast`]). `links(a, b)` prices the
    /// link from `a` to `b` as the host sees it now; it is computed only when called. Like
    /// [`handle`](Protocol::handle), the consequences are pushed to `out`. Most machines ignore
    /// it. Returns the links it found slower than the host's figure, as (peer, bytes per
    /// second) measured from its own sends, for the host's forecasts (a link left after a
    /// few segments would otherwise never fill a sample of the host's meter).
    fn steer(
        &mut self,
        _now: Time,
        _links: &mut dyn FnMut(NodeId, NodeId) -> LinkPrice,
        _out: &mut Outputs,
    ) -> Vec<(NodeId, f64)> {
        Vec::new()
    }
}

/// A link as the host sees it, for [`Protocol::steer`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LinkPrice {
    /// Bandwidth, bytes per second (positive).
    pub bytes_per_s: f64,
    /// One-way latency, seconds.
    pub latency_s: f64,
    /// True when the figure comes from measurements of this very link (not a guess or a
    /// site's median).
    pub measured: bool,
    /// True when the link leaves the host's site towards another site, as the host's own
    /// link to the same end does (the group's sites known): both then cross one WAN path, so
    /// a slowdown the host sees on its own link holds for this one too.
    pub shares_hosts_path: bool,
}

/// Where a machine is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Still has work to do or to wait for.
    Running,
    /// Done; [`Output::Finished`] was pushed.
    Finished,
    /// Gave up; [`Output::Aborted`] was pushed.
    Aborted,
}

/// A timer of one machine, named by the machine (each protocol documents its timers).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u32);

/// A send the machine wants to hear about when it completes ([`Input::SendComplete`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SendId(pub u64);

/// A unit of application work asked for with [`Output::Compute`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

/// Something that happened to a node, fed to [`Protocol::handle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The run begins. Always the first input.
    Start,
    /// A message from a peer, decoded from its frame.
    Message {
        /// The peer it came from (the connection's other end, not a field of the message).
        from: NodeId,
        /// The message.
        message: Message,
    },
    /// A timer set with [`Output::SetTimer`] fired.
    Timer(TimerId),
    /// The application answers.
    Command(Command),
    /// A send pushed with `notify: Some(id)` has been transmitted.
    SendComplete {
        /// The peer it went to.
        to: NodeId,
        /// The id given with the send.
        id: SendId,
    },
    /// The driver declared a peer failed (connection lost, failure injected).
    PeerFailed(NodeId),
    /// The application asks the node's [`Host`](crate::host::Host) for something (start a
    /// collective, leave); collective machines never get it.
    App(crate::host::App),
}

/// What the application tells its protocol node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// The work asked for by [`Output::Compute`] with this task id is done.
    ComputeDone {
        /// The task.
        task: TaskId,
    },
}

/// A message to send: see the driver's contract in the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The peer.
    pub to: NodeId,
    /// The message (its payload a zero-copy [`Bytes`]).
    pub message: Message,
    /// When set, the driver feeds back [`Input::SendComplete`] with this id once the message
    /// has been transmitted.
    pub notify: Option<SendId>,
}

/// Work for the application: process bytes `offset..offset + len` of the data, given as
/// zero-copy pieces in order (several when the data arrived in several frames).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeTask {
    /// Echoed in [`Command::ComputeDone`].
    pub task: TaskId,
    /// Position of the first byte in the whole data (e.g. the load of a scatter).
    pub offset: u64,
    /// Total bytes (the sum of the pieces' lengths; may be 0). With [`work`](Self::work), the
    /// bytes the work processes, which the simulator charges by the node's speed.
    pub len: u64,
    /// The bytes, in order (empty when the machine's [`work`](Self::work) produces them).
    pub data: Vec<Bytes>,
    /// Work whose result the machine needs, to be run off the event loop before answering
    /// `ComputeDone` ([`crate::app::Job`]); None for most collectives.
    pub work: Option<crate::app::Work>,
}

/// The share of a load one member kept and computed, as its report to the initiator says:
/// the initiator checks it against the same bytes of its own data.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputedShare {
    /// First byte of the share in the load.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The digest of those bytes (the application's delivery digest: BLAKE3 by default).
    pub digest: [u8; 32],
    /// From the member's Go to the end of its computation, on its clock.
    #[serde(rename = "computed_s", with = "crate::time::secs")]
    pub computed: Option<Duration>,
}

/// Progress and measurements, for users and metrics; a driver may ignore them.
///
/// Its serde form is the one users read in the simulator's `--json` metrics: tagged by `kind`
/// (the variant in snake case), spans and instants as `f64` seconds in fields named `..._s`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Report {
    /// Bytes this node now holds of a transfer.
    Progress {
        /// The transfer.
        transfer: TransferId,
        /// Bytes held (received and forwarded).
        done_bytes: u64,
        /// Bytes of the whole transfer.
        total_bytes: u64,
    },
    /// A node finished its share of a scatter (pushed at the root, for every node).
    ShareFinished {
        /// The node.
        node: NodeId,
        /// When, on that node's driver clock.
        #[serde(rename = "finished_at_s", with = "crate::time::secs")]
        at: Time,
    },
    /// A collective started here (at its initiator: announced; elsewhere: built).
    CollectiveStarted {
        /// The collective.
        transfer: TransferId,
        /// The member that started it (its root).
        initiator: NodeId,
    },
    /// This node's part of a collective ended.
    CollectiveEnded {
        /// The collective.
        transfer: TransferId,
        /// Finished (false: aborted).
        finished: bool,
    },
    /// A collective could not start here (a member refused it, or its spec does not fit).
    CollectiveRefused {
        /// The collective.
        transfer: TransferId,
    },
    /// At the initiator: every member's part of a collective ended (or the member failed).
    CollectiveComplete {
        /// The collective.
        transfer: TransferId,
        /// Members that finished (the initiator included).
        finished: u32,
        /// Members that aborted, failed or refused.
        failed: u32,
    },
    /// At the initiator: a member that restarted was taken back into a running collective.
    PeerRejoined {
        /// The member.
        peer: NodeId,
        /// The collective.
        transfer: TransferId,
    },
    /// At the initiator: one member's part of a collective that started ended (or the member
    /// was lost), as it reported it; one per member, before [`Report::CollectiveComplete`]. A
    /// member taken back after a restart reports again (with `resumed_bytes`): the later
    /// report replaces the earlier.
    MemberDone {
        /// The collective.
        transfer: TransferId,
        /// The member (the initiator included).
        member: NodeId,
        /// Its machine finished (false: aborted, refused or lost).
        finished: bool,
        /// Bytes its machine delivered to its application.
        bytes_delivered: u64,
        /// The digest of those bytes, when its host makes one
        /// ([`HostConfig::digest_deliveries`](crate::host::HostConfig::digest_deliveries)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<[u8; 32]>,
        /// From its machine's start to its end, on its clock (None: it never started).
        #[serde(rename = "elapsed_s", with = "crate::time::secs")]
        elapsed: Option<Duration>,
        /// The share of the load it kept and computed, for collectives whose members compute
        /// a share (a scatter), when its host digests what it computes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        share: Option<ComputedShare>,
        /// A member taken back into the collective after a restart: the bytes its new life
        /// resumed from what the earlier one kept (0: it started over). This report replaces
        /// the member's earlier one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resumed_bytes: Option<u64>,
    },
    /// At the initiator: how much of the collective a member holds, as it reported it
    /// ([`HostConfig::progress_parts`](crate::host::HostConfig::progress_parts)); its last
    /// word is its [`Report::MemberDone`].
    MemberProgress {
        /// The collective.
        transfer: TransferId,
        /// The member.
        member: NodeId,
        /// Bytes it holds.
        bytes: u64,
    },
    /// The host declared a member failed: nothing arrived from it for too long.
    PeerDown {
        /// The member.
        peer: NodeId,
    },
    /// A measured round trip to a peer.
    RoundTrip {
        /// The peer.
        peer: NodeId,
        /// Time from the ping's send to the pong's arrival, on this node's clock.
        #[serde(rename = "rtt_s", with = "crate::time::secs")]
        rtt: Duration,
    },
    /// The host's forecast of a link's next round trip, after each measurement (its weather
    /// service: see [`Host::weather`](crate::host::Host::weather)).
    LinkForecast {
        /// The peer.
        peer: NodeId,
        /// The forecast round trip.
        #[serde(rename = "rtt_s", with = "crate::time::secs")]
        rtt: Duration,
        /// Its error estimate (zero until errors have been scored).
        #[serde(rename = "error_s", with = "crate::time::secs")]
        error: Duration,
    },
    /// The host's forecast of a link's bandwidth, after each sample its sends made (see
    /// [`crate::weather`]).
    LinkBandwidth {
        /// The peer.
        peer: NodeId,
        /// The forecast, bytes per second.
        bytes_per_s: u64,
        /// Its error estimate, bytes per second.
        error_bytes_per_s: u64,
    },
    /// At a broadcast's root: the tree it planned from the group's view ([`crate::planner`]).
    TreePlanned {
        /// The broadcast.
        transfer: TransferId,
        /// The tree's cost (costliest root-to-leaf path) on the costs it was planned with.
        #[serde(rename = "cost_s", with = "crate::time::secs")]
        cost: Duration,
        /// Built from scratch (rather than kept or repaired).
        built: bool,
        /// Links whose change the tree took in.
        changed_links: u32,
        /// Swaps made.
        swaps: u32,
        /// `mst-live`: the `(generation, epoch)` of the live tree it used (None: another
        /// policy, or the live tree was not built yet and the central MST stood in).
        live_mst: Option<(u32, u32)>,
    },
    /// A member's compute speed forecast: this node's after each compute it timed, another
    /// member's when its shared row brings it (see [`crate::weather`]).
    ComputeSpeed {
        /// The member.
        node: NodeId,
        /// The forecast, bytes per second.
        bytes_per_s: u64,
        /// Its error estimate, bytes per second.
        error_bytes_per_s: u64,
    },
    /// At a scatter's root: the schedule it planned from the group's view
    /// ([`crate::scatter_plan`]); one [`Report::ScatterNodePlanned`] per node follows.
    ScatterPlanned {
        /// The scatter.
        transfer: TransferId,
        /// When the schedule says every node finishes, from the root's start.
        #[serde(rename = "predicted_finish_s", with = "crate::time::secs")]
        predicted_finish: Duration,
        /// Nodes in the tree.
        nodes: u32,
        /// Nodes whose compute speed was measured (the others guessed or given).
        measured_computes: u32,
        /// Tree links whose bandwidth was measured.
        measured_links: u32,
    },
    /// At a scatter's root: the speeds its plan took for one node.
    ScatterNodePlanned {
        /// The scatter.
        transfer: TransferId,
        /// The node.
        node: NodeId,
        /// Its compute speed, bytes per second, and where it came from.
        compute_bytes_per_s: u64,
        /// Where the compute speed came from.
        compute: crate::weather::Basis,
        /// The link from its parent: bytes per second and where it came from (None at the
        /// root).
        link: Option<(u64, crate::weather::Basis)>,
        /// Its share of the load, parts per million.
        kept_ppm: u32,
    },
    /// At the root of an automatic start ([`crate::host::AppRequest::StartAuto`]): the
    /// protocol it chose and every candidate's prediction ([`crate::choice`]; rebuild the
    /// explanation with [`Choice::from_report`](crate::choice::Choice::from_report)).
    ProtocolChosen {
        /// The collective it started.
        transfer: TransferId,
        /// Bytes sent.
        bytes: u64,
        /// The protocol.
        chosen: crate::choice::Candidate,
        /// Each candidate's prediction, in [`Candidate::ALL`](crate::choice::Candidate::ALL)
        /// order (None: it could not be planned).
        predicted: [Option<crate::choice::PredictedRun>; 3],
    },
}

/// Why a machine gave up.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AbortReason {
    /// A peer it depends on failed.
    #[error("peer {peer} failed")]
    PeerFailed {
        /// The peer.
        peer: NodeId,
    },
    /// Nothing arrived for too long.
    #[error("nothing arrived for {waited:?}")]
    Timeout {
        /// The time waited.
        waited: Duration,
    },
    /// A restarted node asked to rejoin a run that had already ended.
    #[error("the run ended before this node rejoined it")]
    RunEnded,
    /// More than [`crate::pieces::MAX_BAD_COPIES`] copies of one piece failed verification:
    /// its source's data does not match the manifest (the root's file changed?).
    #[error(
        "{copies} copies of piece {piece} failed verification (does the root's data still match its manifest?)"
    )]
    BadPiece {
        /// The piece.
        piece: u32,
        /// Bad copies received.
        copies: u32,
    },
    /// At the root: its own copy of a piece, checked before its first send, does not match
    /// the manifest (its data changed during the run). The host calls the whole run off.
    #[error(
        "the root's data no longer matches its manifest at piece {piece} (changed during the run?): the run is called off"
    )]
    SourceChanged {
        /// The piece.
        piece: u32,
    },
    /// A peer's compressed records ([`crate::sort_zip`]) do not decompress to the length its
    /// frame states: the peer is broken, and what it sent cannot be used.
    #[error("node {peer} sent a {kind} frame whose compressed records do not decompress")]
    CorruptPayload {
        /// The sender.
        peer: NodeId,
        /// The frame's kind.
        kind: crate::frame::MessageKind,
    },
}

impl AbortReason {
    /// Whether no member can finish once the collective's initiator gave up for this reason,
    /// so the initiator's Host calls the collective off everywhere at once instead of leaving
    /// each member to time out. Only the source's own data going bad is: every other reason
    /// leaves members that may still finish (a failed peer is repaired around, a timeout is
    /// one member's).
    pub fn ends_every_member(&self) -> bool {
        matches!(self, AbortReason::SourceChanged { .. })
    }
}

/// An action the driver performs for a machine: see the driver's contract in the
/// [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send a message to a peer.
    Send(Transmit),
    /// Fire [`Input::Timer`] at `at` (replacing an earlier setting of the same id).
    SetTimer {
        /// The timer.
        timer: TimerId,
        /// When.
        at: Time,
    },
    /// Do not fire this timer.
    CancelTimer(TimerId),
    /// Bytes `offset..offset + data.len()` of the transfer, for the application; in order.
    Deliver {
        /// The collective the bytes belong to.
        transfer: TransferId,
        /// Position of the first byte.
        offset: u64,
        /// The bytes (zero-copy).
        data: Bytes,
    },
    /// Have the application process data, then answer [`Command::ComputeDone`].
    Compute(ComputeTask),
    /// Progress or a measurement.
    Report(Report),
    /// The node is done.
    Finished,
    /// The node gave up.
    Aborted(AbortReason),
}

/// The buffer a machine pushes its [`Output`]s to; owned and reused by the driver, so handling
/// an input allocates nothing once the buffer has grown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outputs {
    items: Vec<Output>,
}

impl Outputs {
    /// An empty buffer.
    pub fn new() -> Outputs {
        Outputs::default()
    }

    /// Appends an output.
    pub fn push(&mut self, output: Output) {
        self.items.push(output);
    }

    /// Appends a send without completion notice.
    pub fn send(&mut self, to: NodeId, message: Message) {
        self.push(Output::Send(Transmit {
            to,
            message,
            notify: None,
        }));
    }

    /// Appends a send whose completion is to be reported with `id`.
    pub fn send_notify(&mut self, to: NodeId, message: Message, id: SendId) {
        self.push(Output::Send(Transmit {
            to,
            message,
            notify: Some(id),
        }));
    }

    /// Number of outputs waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The outputs waiting, in order.
    pub fn as_slice(&self) -> &[Output] {
        &self.items
    }

    /// Removes and yields every output, in order (the buffer keeps its capacity).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Output> {
        self.items.drain(..)
    }

    /// Drops every output.
    pub fn clear(&mut self) {
        self.items.clear();
    }
}

/// An input a machine refuses: a peer broke the protocol, or the driver broke its contract.
/// Every variant names the peer or item at fault.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// A message this node does not expect from that peer at this point.
    #[error("unexpected {kind} message from node {from}: {why}")]
    UnexpectedMessage {
        /// The sender.
        from: NodeId,
        /// Its kind.
        kind: MessageKind,
        /// Why it is unexpected.
        why: &'static str,
    },
    /// A message of another collective.
    #[error(
        "{kind} message from node {from} for transfer {found}, this node runs transfer {expected}"
    )]
    WrongTransfer {
        /// The sender.
        from: NodeId,
        /// Its kind.
        kind: MessageKind,
        /// This node's transfer.
        expected: TransferId,
        /// The message's transfer.
        found: TransferId,
    },
    /// Data that does not continue where the previous data ended.
    #[error("{kind} message from node {from} at offset {found}, expected offset {expected}")]
    OutOfOrder {
        /// The sender.
        from: NodeId,
        /// Its kind.
        kind: MessageKind,
        /// The next offset this node expects.
        expected: u64,
        /// The message's offset.
        found: u64,
    },
    /// Fields that contradict earlier messages or the message itself.
    #[error("{kind} message from node {from}: {what}")]
    Inconsistent {
        /// The sender.
        from: NodeId,
        /// Its kind.
        kind: MessageKind,
        /// What is wrong.
        what: &'static str,
    },
    /// A frame that does not satisfy the wire format's invariants (a driver that built the
    /// message itself rather than decoding it).
    #[error("invalid message from node {from}: {source}")]
    Frame {
        /// The sender.
        from: NodeId,
        /// The violated invariant.
        source: FrameError,
    },
    /// A command for a task this node never asked for (or already completed).
    #[error("compute task {task:?} is unknown or already done")]
    UnknownTask {
        /// The task.
        task: TaskId,
    },
    /// A send completion this node never asked for (or already received).
    #[error("completion of send {id:?} to node {to} was not expected")]
    UnknownSend {
        /// The peer.
        to: NodeId,
        /// The id.
        id: SendId,
    },
}

impl ProtocolError {
    /// [`ProtocolError::WrongTransfer`] unless `found` is this node's transfer: the first
    /// check of every protocol's handler, since a frame of another collective that reached the
    /// wrong machine says the driver or the peer is broken.
    pub fn check_transfer(
        from: NodeId,
        kind: MessageKind,
        expected: TransferId,
        found: TransferId,
    ) -> Result<(), ProtocolError> {
        if found == expected {
            Ok(())
        } else {
            Err(ProtocolError::WrongTransfer {
                from,
                kind,
                expected,
                found,
            })
        }
    }
}

/// A machine that cannot be built from what it was given. Every variant names the node or
/// parameter at fault.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SetupError {
    /// The node is not a member of the tree or schedule.
    #[error("node {node} is not in the tree")]
    NotInTree {
        /// The node.
        node: NodeId,
    },
    /// The root was given no data, or another node was given some.
    #[error("node {node}: {what}")]
    Data {
        /// The node.
        node: NodeId,
        /// "the root needs the data to send" or "only the root is given data".
        what: &'static str,
    },
    /// A configuration value out of range.
    #[error("{what} must be {requirement}, got {value}")]
    Config {
        /// The parameter.
        what: &'static str,
        /// Its valid range.
        requirement: &'static str,
        /// The value given.
        value: String,
    },
    /// A schedule that cannot be followed (non-finite or negative fractions, a broken tree).
    #[error("schedule: {0}")]
    Schedule(String),
}

/// The RNG of node `node` in a run with seed `run_seed`, for machines that draw random numbers.
///
/// Every driver derives per-node RNGs with this function, so a run is reproducible whatever
/// drives it: the ChaCha8 key comes from `run_seed` (through `seed_from_u64`) and the stream
/// number is the node id, so nodes draw independent sequences. Streams at or above 2^32 are
/// never used here and are free for drivers' own randomness.
pub fn node_rng(run_seed: u64, node: NodeId) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(run_seed);
    rng.set_stream(u64::from(node.0));
    rng
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn node_rngs_are_reproducible_and_distinct() {
        let a: [u64; 4] = node_rng(9, NodeId(1)).gen();
        let b: [u64; 4] = node_rng(9, NodeId(1)).gen();
        let c: [u64; 4] = node_rng(9, NodeId(2)).gen();
        let d: [u64; 4] = node_rng(10, NodeId(1)).gen();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn outputs_buffer() {
        let mut out = Outputs::new();
        assert!(out.is_empty());
        out.push(Output::Finished);
        out.push(Output::CancelTimer(TimerId(1)));
        assert_eq!(out.len(), 2);
        assert_eq!(out.as_slice()[0], Output::Finished);
        let drained: Vec<_> = out.drain().collect();
        assert_eq!(drained.len(), 2);
        assert!(out.is_empty());
    }
}
