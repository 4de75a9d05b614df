//! The one-shot driver: one node's event loop, feeding its protocol machines and performing their
//! outputs, and the session around a collective (see [`crate::wire`] for the frames):
//! [`run_root`] (in `root.rs`) drives a run from its root, [`run_node`] (in `member.rs`) serves
//! one run as any other member; this file holds the event loop both share (`Core`). The
//! long-lived groups of [`crate::host_driver`] share only the transport (`conn.rs`) and
//! the deadlines ([`crate::timeouts`]) with it.
//!
//! # What the event loop does (the proto crate's driver contract)
//!
//! - It owns the collective's machine (a `TreeBroadcast`, a `Scatter` or one of the multicasts
//!   of `windrose_proto::multicast`) and a `LinkProber`,
//!   routes Ping/Pong frames to the prober and the rest to the collective, and feeds each
//!   machine `Start` (on Go), `Message`, `Timer`, `SendComplete`, `Command::ComputeDone` and
//!   `PeerFailed` with `now` = time since this node's Go.
//! - It performs every output of a step in order: `Send` is encoded with `encode_parts` and
//!   queued to the peer's writer (one FIFO connection per peer; zero-copy payloads written with
//!   vectored writes), which reports `SendComplete` once the last byte of a notified send is
//!   written; `SetTimer`/`CancelTimer` keep per-machine deadlines; `Deliver` goes to the output
//!   ([`OutputSpec`]) in order; `Compute` hashes the share on a blocking thread and answers
//!   `ComputeDone`; `Report`s become progress events and link measurements.
//! - A machine that rejects a peer's message (it broke the protocol) makes that peer faulty: its
//!   connection is closed and every machine gets `PeerFailed`, as for a lost connection.
//!
//! # Multicasts
//!
//! A multicast job carries the root's manifest (every piece's BLAKE3) and the protocol's
//! parameters; each node builds its machine with `windrose_proto::multicast::build` from a
//! `SwarmSetup` whose cluster layout is the group file's and whose verifier hashes every piece.
//! Every member connects to every other (the lower id dials, as for tree neighbours), and no
//! reader is throttled (see [Memory](self#memory)). A node's completion is when it first held
//! all the data (its `Report::Progress` reached the total); it may serve its peers until its
//! machine finishes.
//!
//! # Bounded waiting
//!
//! Every wait has a deadline ([`Timeouts`]): dialing (retries with backoff until `connect`),
//! each handshake (`handshake`), a node waiting for a job (`join`), setting up neighbours and
//! waiting for Go (`setup`), a running node or root that hears nothing (`idle`; broadcast
//! receivers also abort through the protocol's own idle timer), a write that makes no progress
//! (`stall`), the wait for the root's Bye (`finish`) and the orderly close (`close`).
//!
//! # Memory
//!
//! A relay holds received payloads until its writers have sent them on. Its readers stop
//! reading while more than [`NodeConfig::high_water_bytes`] are queued and resume below half of
//! that, so TCP pushes back on a fast parent. The root's queues reference the caller's data
//! (e.g. a memory-mapped file) and are not throttled. Nor are a multicast's readers: every node
//! both sends and receives, so two nodes each paused for their own full writers could wait on
//! each other for ever; the machines bound what they request, and what they queue are the very
//! pieces their stores hold anyway.

use crate::bootstrap::{Handshake, Membership, PlainHandshake};
use crate::conn::{self, refuse, Conn, Event, Flow, LinkStats, Outgoing};
use crate::error::NetError;
use crate::group::Group;
use crate::measure::{LinkMeasurements, Metric, Recorder};
use crate::piece_file::PieceFile;
use crate::sink::{Delivered, OutputSpec, Resume, Sink};
use crate::wire::{
    CollectiveSpec, Control, FrameCount, Job, ManifestSpec, MulticastParams, NodeReport, Progress,
    Role, RunStatus, ShareResult, TreeSpec, WireFrame,
};
use bytes::Bytes;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::app::Application;
use windrose_proto::collective::{self, BuildContext, Start};
use windrose_proto::frame::{encode_parts, Message, MessageKind, TransferId};
use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
use windrose_proto::pieces::PieceMsg;
use windrose_proto::pieces::{Blake3Verifier, Manifest, PieceKeeper, PieceVerifier};
use windrose_proto::probe::ProbeMsg;
use windrose_proto::probe::{LinkProber, ProbeConfig};
use windrose_proto::scatter::ScatterConfig;
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_proto::{
    node_rng, Command, Input, Output, Outputs, Protocol, Report, Status, TaskId, Time, TimerId,
    Transmit,
};
use windrose_trees::dlt::Schedule;
use windrose_trees::Tree;

/// How often nodes send progress to the root and sample their links' throughput.
pub const TICK: Duration = Duration::from_millis(200);
/// Events queued from a node's connection tasks to its event loop.
const EVENT_QUEUE: usize = 32;
/// Largest multicast piece: one piece travels in one protocol frame.
pub const MAX_PIECE_BYTES: u32 =
    windrose_proto::frame::DEFAULT_MAX_BODY_LEN - windrose_proto::frame::MAX_FIXED_BODY_LEN as u32;
/// Machine index of the collective.
const COLLECTIVE: usize = 0;
/// Machine index of the link prober.
const PROBER: usize = 1;

pub use crate::timeouts::{handshake_deadline, Timeouts, HANDSHAKE_PER_MEMBER};

/// Something a node did, for progress bars and logs. Sent on [`NodeConfig::events`].
#[derive(Clone, Debug, PartialEq)]
pub enum NetEvent {
    /// A connection to a peer is established.
    Connected {
        /// The peer.
        peer: NodeId,
    },
    /// An incoming connection was refused or a handshake failed.
    Rejected {
        /// Who and why.
        reason: String,
    },
    /// A job arrived from the root (non-root nodes).
    Job {
        /// `broadcast`, `scatter` or `multicast`.
        collective: &'static str,
        /// Bytes of the root's data.
        total_len: u64,
    },
    /// A node is connected to its neighbours (seen at the root).
    Ready {
        /// The node.
        node: NodeId,
    },
    /// The collective started (Go).
    Started {
        /// Bytes of the data.
        total_len: u64,
    },
    /// A node's progress (at the root: each node's, at a node: its own).
    Progress {
        /// The node.
        node: NodeId,
        /// Bytes it holds.
        done_bytes: u64,
        /// Bytes expected.
        total_bytes: u64,
    },
    /// A node's collective ended (seen at the root).
    Reported {
        /// The node.
        node: NodeId,
        /// How.
        status: RunStatus,
    },
    /// A peer failed (its connection was lost or it broke the protocol).
    PeerFailed {
        /// The peer.
        peer: NodeId,
        /// Why.
        reason: String,
    },
    /// A peer that had failed connected again (it restarted) and was taken back into the run.
    Rejoined {
        /// The peer.
        peer: NodeId,
    },
    /// A round trip was measured.
    RoundTrip {
        /// The peer.
        peer: NodeId,
        /// Its duration.
        rtt: Duration,
    },
}

/// Everything a node needs to take part in runs.
#[derive(Clone)]
pub struct NodeConfig {
    /// The group.
    pub group: Arc<Group>,
    /// This node.
    pub me: NodeId,
    /// Where delivered data goes.
    pub output: OutputSpec,
    /// The deadlines.
    pub timeouts: Timeouts,
    /// Body limit of received protocol frames.
    pub max_body_len: u32,
    /// A relay stops reading while this many bytes wait in its writers.
    pub high_water_bytes: usize,
    /// How connections are verified.
    pub handshake: Arc<dyn Handshake>,
    /// Where to send [`NetEvent`]s (dropped when None or when the receiver is gone).
    pub events: Option<mpsc::UnboundedSender<NetEvent>>,
    /// Hash delivered data with BLAKE3 for the root's check (on by default; off only for
    /// benchmarks that compare the transport alone with a plain copy).
    pub verify: bool,
    /// The application's effects: a scatter's compute, how multicast pieces are checked
    /// ([`Blake3App`](windrose_proto::app::Blake3App) by default).
    pub app: Arc<dyn Application>,
}

impl NodeConfig {
    /// Defaults for `membership`: output discarded (hashed only), default timeouts, the proto
    /// crate's default frame limit, 16 MiB high water, the plain handshake, no events.
    pub fn new(membership: Membership) -> NodeConfig {
        NodeConfig {
            group: membership.group,
            me: membership.me,
            output: OutputSpec::Discard,
            timeouts: Timeouts::default(),
            max_body_len: windrose_proto::frame::DEFAULT_MAX_BODY_LEN,
            high_water_bytes: 16 << 20,
            handshake: Arc::new(PlainHandshake),
            events: None,
            verify: true,
            app: windrose_proto::app::default_app(),
        }
    }
}

/// The collective a root runs.
#[derive(Clone, Debug)]
pub enum Collective {
    /// Pipelined tree broadcast.
    Broadcast {
        /// The tree (over all group members, rooted at the root).
        tree: Tree,
        /// Bytes per segment.
        segment_bytes: u64,
    },
    /// Divisible-load scatter with a real compute step (BLAKE3 of each node's share).
    Scatter {
        /// The schedule (rooted at the root).
        schedule: Schedule,
        /// Children served at once instead of one after the other.
        parallel: bool,
    },
    /// A piece-based multicast (MOB, BitTorrent, Balanced Multicasting, MagPIe) among all
    /// members, every piece checked against the root's manifest (BLAKE3) on arrival.
    Multicast {
        /// Which protocol (named in the outcome; `spec` holds its parameters).
        protocol: MulticastProtocol,
        /// Its parameters (trees over all group members for balanced and magpie).
        spec: MulticastSpec,
        /// Bytes per piece (the last one may be shorter).
        piece_bytes: u32,
    },
}

/// What the root runs and with what.
#[derive(Clone, Debug)]
pub struct RootJob {
    /// The collective.
    pub collective: Collective,
    /// The data (the broadcast message or the scatter load).
    pub data: Bytes,
    /// Seed of the per-node RNGs.
    pub seed: u64,
    /// Link probe period (None: no probes).
    pub probe_period: Option<Duration>,
    /// Largest payload per frame.
    pub max_frame_payload: u32,
    /// The file `data` maps, when it does: the root then calls the run off, with a clear
    /// error, as soon as the file changes (checked every tick, on a failed write, and before
    /// each multicast piece is first sent, against the manifest), rather than send bytes the
    /// receivers cannot verify or read a truncated mapping. None for data in memory.
    pub source: Option<Arc<crate::SourceFile>>,
}

impl RootJob {
    /// A broadcast of `data` over `tree` in segments of `segment_bytes`, 1 MiB frames, probes
    /// every 500 ms.
    pub fn broadcast(tree: Tree, segment_bytes: u64, data: Bytes) -> RootJob {
        RootJob {
            collective: Collective::Broadcast {
                tree,
                segment_bytes,
            },
            data,
            seed: 1,
            probe_period: Some(Duration::from_millis(500)),
            max_frame_payload: BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD,
            source: None,
        }
    }

    /// A multicast of `data` with `protocol` in pieces of `piece_bytes`; probes every 500 ms.
    pub fn multicast(
        protocol: MulticastProtocol,
        spec: MulticastSpec,
        piece_bytes: u32,
        data: Bytes,
    ) -> RootJob {
        RootJob {
            collective: Collective::Multicast {
                protocol,
                spec,
                piece_bytes,
            },
            data,
            seed: 1,
            probe_period: Some(Duration::from_millis(500)),
            max_frame_payload: BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD,
            source: None,
        }
    }

    /// A divisible-load scatter of `data` following `schedule` (each parent serving its
    /// children one after the other, as the schedule assumes, unless `parallel`), every node
    /// hashing its kept share with BLAKE3 as its compute step; 1 MiB frames, probes every
    /// 500 ms.
    pub fn scatter(schedule: Schedule, parallel: bool, data: Bytes) -> RootJob {
        RootJob {
            collective: Collective::Scatter { schedule, parallel },
            data,
            seed: 1,
            probe_period: Some(Duration::from_millis(500)),
            max_frame_payload: ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
            source: None,
        }
    }
}

/// A node's view of its run.
#[derive(Clone, Debug)]
pub struct NodeOutcome {
    /// What it reported to the root.
    pub report: NodeReport,
    /// What became of the data delivered to it.
    pub delivered: Delivered,
}

/// One non-root node's result, as the root sees it.
#[derive(Clone, Debug, Serialize)]
pub struct NodeResult {
    /// The node.
    pub node: NodeId,
    /// Its cluster.
    pub cluster: ClusterId,
    /// How its collective ended (Failed when it never reported).
    pub status: RunStatus,
    /// Why it failed.
    pub error: Option<String>,
    /// Bytes it received.
    pub bytes_received: u64,
    /// When it finished, in seconds after the root's Go (its own finish time shifted by when
    /// its Go was sent and half the handshake's round trip).
    pub completion_s: Option<f64>,
    /// Its data divided by its completion time, in MB/s.
    pub throughput_mb_s: Option<f64>,
    /// BLAKE3 of what it received (broadcast) or computed (scatter: its share).
    pub blake3: Option<String>,
    /// What that hash must be.
    pub expected_blake3: Option<String>,
    /// True when the two hashes are equal.
    pub verified: bool,
    /// Scatter: its share.
    pub share: Option<ShareResult>,
    /// Scatter: the schedule's predicted finish, in the schedule's seconds.
    pub predicted_finish_s: Option<f64>,
    /// Scatter: when it reported its share computed, seconds after the root's Go (shifted as
    /// `completion_s`).
    pub measured_finish_s: Option<f64>,
    /// Set when it restarted mid-run and rejoined: the bytes it found verified on disk from its
    /// earlier life (not fetched again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_bytes: Option<u64>,
    /// Its full report, when one arrived.
    #[serde(skip)]
    pub report: Option<NodeReport>,
}

/// A run as the root saw it.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutcome {
    /// Random id of the run.
    pub session: u64,
    /// `broadcast`, `scatter` or `multicast`.
    pub collective: &'static str,
    /// The multicast protocol (`mob`, `bittorrent`, `balanced`, `magpie`), for multicasts.
    pub protocol: Option<MulticastProtocol>,
    /// The root.
    pub root: NodeId,
    /// Bytes of the data.
    pub total_len: u64,
    /// BLAKE3 of the data (empty when no node hashed what it received).
    pub root_blake3: String,
    /// Seconds from Go until the last report.
    pub elapsed_s: f64,
    /// Every other node, by id.
    pub nodes: Vec<NodeResult>,
    /// Scatter: the root's own share.
    pub root_share: Option<ShareResult>,
    /// The root's link measurements.
    pub root_measurements: LinkMeasurements,
    /// Protocol frames the root sent.
    pub root_frames_sent: Vec<FrameCount>,
}

impl RunOutcome {
    /// True when every node finished with the right hash.
    pub fn all_verified(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.status == RunStatus::Finished && n.verified)
    }

    /// One line per node that failed or got wrong data.
    pub fn failures(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.status != RunStatus::Finished || !n.verified)
            .map(|n| match &n.error {
                Some(e) => format!("node {}: {e}", n.node),
                None => format!(
                    "node {}: BLAKE3 {} differs from the expected {}",
                    n.node,
                    n.blake3.as_deref().unwrap_or("(none)"),
                    n.expected_blake3.as_deref().unwrap_or("(none)")
                ),
            })
            .collect()
    }

    /// Every node's link measurements, the root's first.
    pub fn measurements(&self) -> Vec<LinkMeasurements> {
        std::iter::once(self.root_measurements.clone())
            .chain(
                self.nodes
                    .iter()
                    .filter_map(|n| n.report.as_ref().map(|r| r.measurements.clone())),
            )
            .collect()
    }
}

/// Binds this node's address from the group.
pub async fn bind(group: &Group, me: NodeId) -> Result<TcpListener, NetError> {
    let addr = group
        .member(me)
        .map(|m| m.addr.clone())
        .ok_or_else(|| NetError::Group(format!("node {me} is not in the group")))?;
    // A node restarted right after a crash may find its address still held for a moment by
    // the dying process: retry briefly before giving up.
    let deadline = Instant::now() + BIND_RETRY;
    loop {
        match TcpListener::bind(&addr).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(source) => {
                return Err(NetError::Bind {
                    node: me,
                    addr,
                    source,
                })
            }
        }
    }
}

/// How long [`bind`] retries an address in use.
const BIND_RETRY: Duration = Duration::from_secs(3);

/// One established connection, served by a reader and a writer task.
struct Link {
    tx: Option<mpsc::UnboundedSender<Outgoing>>,
    stats: Arc<LinkStats>,
    rtt: Option<Duration>,
    reading: bool,
    writing: bool,
    flushed: bool,
    failed: bool,
    sampled_read: u64,
    sampled_written: u64,
    /// When a byte from the peer was last seen (at a tick).
    heard_at: Instant,
    /// Which connection with the peer this is (its events carry it).
    life: u64,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

/// What woke the event loop up, for the session logic.
enum Happening {
    Nothing,
    Tick,
    Deadline,
    Conn(Conn),
    DialFailed(NodeId, NetError),
    Control(NodeId, Control),
    Lost(NodeId, String),
    SinkDone(Result<crate::sink::SinkSummary, NetError>),
}

/// The state both roles share: connections, machines, timers, output, measurements.
struct Core {
    me: NodeId,
    group: Arc<Group>,
    config: NodeConfig,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    links: BTreeMap<NodeId, Link>,
    flow: Option<Arc<Flow>>,
    tasks: Vec<JoinHandle<()>>,
    machines: Vec<Box<dyn Protocol + Send>>,
    outputs: Outputs,
    timers: BTreeMap<(usize, TimerId), Instant>,
    pending: VecDeque<(usize, Input)>,
    started: Option<Instant>,
    early: VecDeque<(NodeId, Message)>,
    early_bytes: usize,
    sink: Option<Sink>,
    recorder: Recorder,
    frames_sent: BTreeMap<(NodeId, MessageKind), (u64, u64)>,
    ended: Option<(Status, Instant)>,
    end_reason: Option<String>,
    fatal: Option<NetError>,
    failed_peers: BTreeSet<NodeId>,
    /// Why each failed peer was given up.
    fault_reasons: BTreeMap<NodeId, String>,
    failures: Vec<String>,
    rejections: Vec<String>,
    done_bytes: u64,
    total_bytes: u64,
    complete_at: Option<Instant>,
    compute: HashMap<TaskId, (u64, u64)>,
    share: Option<ShareResult>,
    share_finishes: BTreeMap<NodeId, Time>,
    next_tick: Instant,
    last_tick: Instant,
    closing: bool,
    probing: bool,
    /// Connections made so far (each link's `life`).
    lives: u64,
    /// The root's check of its data against its file ([`RootJob::source`]).
    source: Option<SourceGuard>,
}

/// What a root checks its data against while it sends it.
struct SourceGuard {
    file: Arc<crate::SourceFile>,
    /// A multicast's manifest, and which of its pieces were checked before their first send.
    manifest: Option<Arc<Manifest>>,
    checked: Vec<bool>,
}

impl SourceGuard {
    /// Why piece `piece` must not be sent as `payload`, or None: the file changed (checked
    /// first, so a truncated mapping is never read), or the bytes no longer match the manifest
    /// (hashed before the piece's first send only; a change after that shows in the file's
    /// metadata at the next tick, or in the receivers' bounded retries).
    fn piece_problem(&mut self, piece: u32, payload: &Bytes) -> Option<String> {
        let manifest = self.manifest.as_ref()?;
        if self.checked.get(piece as usize) != Some(&false) {
            return None;
        }
        if let Some(why) = self.file.changed() {
            return Some(why);
        }
        if !Blake3Verifier.verify(manifest, piece, payload) {
            let r = manifest.piece_range(piece).unwrap_or(0..0);
            return Some(format!(
                "piece {piece} (bytes {} to {}) of the source file {} no longer matches the \
                 manifest hashed at the start: the file changed during the run",
                r.start,
                r.end.saturating_sub(1),
                self.file.path().display()
            ));
        }
        self.checked[piece as usize] = true;
        None
    }
}

impl Core {
    fn new(config: &NodeConfig, throttle: bool) -> Core {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let now = Instant::now();
        Core {
            me: config.me,
            group: config.group.clone(),
            config: config.clone(),
            tx,
            rx,
            links: BTreeMap::new(),
            flow: throttle.then(|| Arc::new(Flow::new(config.high_water_bytes.max(1 << 20)))),
            tasks: Vec::new(),
            machines: Vec::new(),
            outputs: Outputs::new(),
            timers: BTreeMap::new(),
            pending: VecDeque::new(),
            started: None,
            early: VecDeque::new(),
            early_bytes: 0,
            sink: None,
            recorder: Recorder::new(config.me),
            frames_sent: BTreeMap::new(),
            ended: None,
            end_reason: None,
            fatal: None,
            failed_peers: BTreeSet::new(),
            fault_reasons: BTreeMap::new(),
            failures: Vec::new(),
            rejections: Vec::new(),
            done_bytes: 0,
            total_bytes: 0,
            complete_at: None,
            compute: HashMap::new(),
            share: None,
            share_finishes: BTreeMap::new(),
            next_tick: now + TICK,
            last_tick: now,
            closing: false,
            probing: false,
            lives: 0,
            source: None,
        }
    }

    fn emit(&self, e: NetEvent) {
        if let Some(tx) = &self.config.events {
            let _ = tx.send(e);
        }
    }

    fn timeouts(&self) -> Timeouts {
        self.config.timeouts
    }

    /// Time since Go (zero before).
    fn now(&self) -> Time {
        self.started.map_or(Time::ZERO, |s| {
            Time::from_nanos(u64::try_from(s.elapsed().as_nanos()).unwrap_or(u64::MAX))
        })
    }

    fn endpoint(&self) -> conn::Endpoint {
        conn::Endpoint {
            group: self.group.clone(),
            handshake: self.config.handshake.clone(),
            me: self.me,
            max_body_len: self.config.max_body_len,
            handshake_timeout: handshake_deadline(self.timeouts().handshake, self.group.len()),
            events: self.tx.clone(),
        }
    }

    fn spawn_dial(&mut self, peer: NodeId, role: Role) {
        self.spawn_dial_until(peer, role, Instant::now() + self.timeouts().connect);
    }

    /// Dials `peer`, retrying until `deadline`.
    fn spawn_dial_until(&mut self, peer: NodeId, role: Role, deadline: Instant) {
        let task = tokio::spawn(conn::dial(self.endpoint(), peer, role, deadline));
        self.tasks.push(task);
    }

    fn spawn_accept(&mut self, listener: TcpListener) {
        let task = tokio::spawn(conn::accept_loop(listener, self.endpoint()));
        self.tasks.push(task);
    }

    /// Starts serving a connection; refuses (telling the peer why) a second one to the same peer.
    fn add_conn(&mut self, c: Conn) {
        if self.links.contains_key(&c.peer) {
            let reason = format!(
                "node {} already has a connection with node {}",
                self.me, c.peer
            );
            refuse(c, reason);
            return;
        }
        let peer = c.peer;
        self.lives += 1;
        let link = conn::LinkRef {
            peer,
            life: self.lives,
        };
        let rtt = c.rtt;
        let conn::Served {
            tx: otx,
            stats,
            reader,
            writer,
        } = conn::serve(c, link, &self.tx, self.flow.clone(), self.timeouts().stall);
        self.links.insert(
            peer,
            Link {
                tx: Some(otx),
                stats,
                rtt,
                reading: true,
                writing: true,
                flushed: false,
                failed: false,
                sampled_read: 0,
                sampled_written: 0,
                heard_at: Instant::now(),
                life: self.lives,
                reader,
                writer,
            },
        );
        self.emit(NetEvent::Connected { peer });
    }

    /// Queues a frame to `peer`; false when there is no live connection.
    fn queue(&mut self, peer: NodeId, o: Outgoing) -> bool {
        let Some(link) = self.links.get(&peer) else {
            return false;
        };
        let Some(tx) = &link.tx else { return false };
        let len = match &o {
            Outgoing::Frame { head, payload, .. } => head.len() + payload.len(),
            _ => 0,
        };
        link.stats.queued.fetch_add(len, Ordering::Relaxed);
        if let Some(flow) = &self.flow {
            flow.add(len);
        }
        if tx.send(o).is_err() {
            link.stats.queued.fetch_sub(len, Ordering::Relaxed);
            if let Some(flow) = &self.flow {
                flow.sub(len);
            }
            return false;
        }
        true
    }

    fn send_control(&mut self, peer: NodeId, c: &Control) -> bool {
        self.queue(
            peer,
            Outgoing::Frame {
                head: c.encode(),
                payload: Bytes::new(),
                notify: None,
            },
        )
    }

    /// Declares `peer` failed: closes its connection and tells every machine (once).
    fn fault(&mut self, peer: NodeId, reason: String) {
        if !self.failed_peers.insert(peer) {
            return;
        }
        self.fault_reasons.insert(peer, reason.clone());
        if let Some(link) = self.links.get_mut(&peer) {
            link.failed = true;
            link.tx = None;
            link.reader.abort();
            link.writer.abort();
            link.reading = false;
            link.writing = false;
        }
        self.emit(NetEvent::PeerFailed {
            peer,
            reason: reason.clone(),
        });
        self.failures.push(reason);
        if self.started.is_some() {
            for i in 0..self.machines.len() {
                self.pending.push_back((i, Input::PeerFailed(peer)));
            }
        }
    }

    /// Forgets `peer`'s connection and failure: before a run, a stranger that connected and
    /// left, or a node that broke off, must not keep its id from connecting again.
    fn forget(&mut self, peer: NodeId) {
        if let Some(l) = self.links.remove(&peer) {
            l.reader.abort();
            l.writer.abort();
        }
        self.failed_peers.remove(&peer);
        self.fault_reasons.remove(&peer);
    }

    /// Installs the machines and starts them (Go). A machine that rejoins a running collective
    /// hears which peers are down before it starts (it must not greet them), as in the simulator.
    fn start(
        &mut self,
        collective: Box<dyn Protocol + Send>,
        prober: LinkProber,
        probe: bool,
        rejoining: bool,
    ) {
        self.started = Some(Instant::now());
        // Silence counts from Go: set-up may have kept a link quiet for a while.
        for link in self.links.values_mut() {
            link.heard_at = Instant::now();
        }
        self.machines = vec![collective, Box::new(prober)];
        self.probing = probe;
        let mut inputs = vec![(COLLECTIVE, Input::Start)];
        if probe {
            inputs.push((PROBER, Input::Start));
        }
        let failed = self.failed_peers.iter().flat_map(|&peer| {
            [
                (COLLECTIVE, Input::PeerFailed(peer)),
                (PROBER, Input::PeerFailed(peer)),
            ]
        });
        if rejoining {
            inputs.splice(0..0, failed);
        } else {
            inputs.extend(failed);
        }
        self.pending.extend(inputs);
    }

    /// Takes back a peer that connected again mid-run because it restarted. An old connection
    /// that still looked alive is failed first, so the machines hear of the failure before the
    /// new life's first message (which revives the peer in the protocol).
    fn revive(&mut self, c: Conn) {
        let peer = c.peer;
        if !self.failed_peers.contains(&peer) {
            self.fault(peer, format!("node {peer} connected again: it restarted"));
        }
        self.failed_peers.remove(&peer);
        self.fault_reasons.remove(&peer);
        self.links.remove(&peer);
        self.emit(NetEvent::Rejoined { peer });
        self.add_conn(c);
    }

    async fn run_pending(&mut self) {
        while let Some((i, input)) = self.pending.pop_front() {
            if self.machines.len() <= i {
                continue;
            }
            let from = match &input {
                Input::Message { from, .. } => Some(*from),
                _ => None,
            };
            if let Err(e) = self.step(i, input).await {
                match from {
                    Some(peer) => self.fault(peer, format!("node {peer} broke the protocol: {e}")),
                    None => {
                        self.fatal
                            .get_or_insert(NetError::Failed(format!("driver error: {e}")));
                    }
                }
            }
            // Replay messages that arrived before Go, once Start has been handled.
            if self.pending.is_empty() && !self.early.is_empty() && self.started.is_some() {
                self.early_bytes = 0;
                while let Some((peer, m)) = self.early.pop_front() {
                    let idx = machine_for(&m);
                    self.pending.push_back((
                        idx,
                        Input::Message {
                            from: peer,
                            message: m,
                        },
                    ));
                }
            }
        }
    }

    async fn step(&mut self, i: usize, input: Input) -> Result<(), windrose_proto::ProtocolError> {
        let now = self.now();
        let mut out = std::mem::take(&mut self.outputs);
        let result = self.machines[i].handle(now, input, &mut out);
        if result.is_ok() {
            for o in out.drain() {
                self.perform(i, o).await;
            }
        }
        out.clear();
        self.outputs = out;
        result
    }

    async fn perform(&mut self, i: usize, o: Output) {
        match o {
            Output::Send(t) => self.transmit(i, t),
            Output::SetTimer { timer, at } => {
                if i == PROBER && (!self.probing || self.ended.is_some()) {
                    return;
                }
                if let Some(due) = self
                    .started
                    .and_then(|s| s.checked_add(Duration::from_nanos(at.as_nanos())))
                {
                    self.timers.insert((i, timer), due);
                }
            }
            Output::CancelTimer(timer) => {
                self.timers.remove(&(i, timer));
            }
            Output::Deliver { offset, data, .. } => {
                if let Some(sink) = &mut self.sink {
                    if let Err(e) = sink.deliver(offset, data).await {
                        self.fatal.get_or_insert(e);
                    }
                }
            }
            Output::Compute(task) => {
                self.compute.insert(task.task, (task.offset, task.len));
                let tx = self.tx.clone();
                let app = self.config.app.clone();
                tokio::task::spawn_blocking(move || {
                    let summary = app.compute(&task);
                    let _ =
                        tx.blocking_send(Event::ComputeDone(task.task, summary, Instant::now()));
                });
            }
            Output::Report(r) => match r {
                Report::Progress {
                    done_bytes,
                    total_bytes,
                    ..
                } => {
                    if i == COLLECTIVE {
                        self.done_bytes = done_bytes;
                        self.total_bytes = total_bytes;
                        if done_bytes >= total_bytes && self.complete_at.is_none() {
                            self.complete_at = Some(Instant::now());
                        }
                    }
                }
                Report::ShareFinished { node, at } => {
                    self.share_finishes.insert(node, at);
                }
                Report::RoundTrip { peer, rtt } => {
                    let at = self.now().as_secs_f64();
                    self.recorder
                        .record(peer, Metric::RttMs, at, rtt.as_secs_f64() * 1e3);
                    self.emit(NetEvent::RoundTrip { peer, rtt });
                }
                // The session's reports come from a Host; this driver runs bare machines.
                Report::CollectiveStarted { .. }
                | Report::CollectiveEnded { .. }
                | Report::CollectiveRefused { .. }
                | Report::CollectiveComplete { .. }
                | Report::PeerRejoined { .. }
                | Report::MemberDone { .. }
                | Report::PeerDown { .. }
                | Report::LinkForecast { .. }
                | Report::LinkBandwidth { .. }
                | Report::TreePlanned { .. }
                | Report::ComputeSpeed { .. }
                | Report::ScatterPlanned { .. }
                | Report::ScatterNodePlanned { .. }
                | Report::ProtocolChosen { .. } => {}
            },
            Output::Finished => {
                if i == COLLECTIVE && self.ended.is_none() {
                    self.ended = Some((Status::Finished, Instant::now()));
                    self.stop_probing();
                }
            }
            Output::Aborted(reason) => {
                if i == COLLECTIVE && self.ended.is_none() {
                    self.ended = Some((Status::Aborted, Instant::now()));
                    let mut why = format!("the collective aborted: {reason}");
                    if let Some(f) = self.failures.first() {
                        why.push_str(&format!(" ({f})"));
                    }
                    self.end_reason = Some(why);
                    self.stop_probing();
                }
            }
        }
    }

    /// A root whose source file changed calls the run off (see [`RootJob::source`]).
    fn check_source(&mut self) {
        if let Some(why) = self.source.as_ref().and_then(|g| g.file.changed()) {
            self.fatal.get_or_insert(NetError::Failed(why));
        }
    }

    fn stop_probing(&mut self) {
        self.timers.retain(|(i, _), _| *i != PROBER);
    }

    fn transmit(&mut self, i: usize, t: Transmit) {
        if let (Some(g), Message::Pieces(PieceMsg::Piece(p))) = (&mut self.source, &t.message) {
            if let Some(why) = g.piece_problem(p.piece, &p.payload) {
                self.fatal.get_or_insert(NetError::Failed(why));
                return;
            }
        }
        let parts = match encode_parts(&t.message) {
            Ok(p) => p,
            Err(e) => {
                self.fatal
                    .get_or_insert(NetError::Failed(format!("cannot encode a frame: {e}")));
                return;
            }
        };
        let e = self
            .frames_sent
            .entry((t.to, t.message.kind()))
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += parts.len() as u64;
        let queued = self.queue(
            t.to,
            Outgoing::Frame {
                head: parts.head,
                payload: parts.payload,
                notify: t.notify.map(|id| (i, id)),
            },
        );
        if !queued && !self.failed_peers.contains(&t.to) {
            self.fault(
                t.to,
                format!("node {} has no connection to node {}", self.me, t.to),
            );
        }
    }

    fn on_message(&mut self, peer: NodeId, m: Message) {
        if self.failed_peers.contains(&peer) {
            return;
        }
        if self.started.is_none() {
            self.early_bytes += m.payload().map_or(0, Bytes::len);
            if self.early_bytes > self.config.high_water_bytes {
                self.fault(
                    peer,
                    format!(
                        "node {peer} sent more than {} bytes before the run started",
                        self.config.high_water_bytes
                    ),
                );
            } else {
                self.early.push_back((peer, m));
            }
            return;
        }
        let idx = machine_for(&m);
        self.pending.push_back((
            idx,
            Input::Message {
                from: peer,
                message: m,
            },
        ));
    }

    fn sample_links(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.last_tick).as_secs_f64();
        self.last_tick = now;
        if self.started.is_none() || dt <= 0.0 {
            return;
        }
        let at = self.now().as_secs_f64();
        let mut samples = Vec::new();
        for (&peer, link) in self.links.iter_mut() {
            let r = link.stats.read_bytes.load(Ordering::Relaxed);
            let w = link.stats.written_bytes.load(Ordering::Relaxed);
            if r > link.sampled_read {
                link.heard_at = now;
                samples.push((
                    peer,
                    Metric::RecvMbS,
                    (r - link.sampled_read) as f64 / dt / 1e6,
                ));
            }
            if w > link.sampled_written {
                samples.push((
                    peer,
                    Metric::SendMbS,
                    (w - link.sampled_written) as f64 / dt / 1e6,
                ));
            }
            link.sampled_read = r;
            link.sampled_written = w;
        }
        // Heartbeats: a peer silent for too long while this node runs and probes has failed.
        if self.probing && self.ended.is_none() {
            let silent = self.timeouts().silent;
            let quiet: Vec<NodeId> = self
                .links
                .iter()
                .filter(|(_, l)| !l.failed && l.reading && now.duration_since(l.heard_at) > silent)
                .map(|(&p, _)| p)
                .collect();
            for p in quiet {
                self.fault(
                    p,
                    format!("node {p} sent nothing, not even an answer to a ping, for {silent:?}"),
                );
            }
        }
        for (peer, metric, v) in samples {
            self.recorder.record(peer, metric, at, v);
        }
    }

    /// Waits for the next thing the session logic cares about, handling machine traffic on the
    /// way; `deadline` bounds the wait.
    async fn poll(&mut self, deadline: Instant) -> Happening {
        self.run_pending().await;
        let next_timer = self.timers.values().min().copied();
        enum Wake {
            Event(Option<Event>),
            Timer,
            Tick,
            Deadline,
        }
        let wake = tokio::select! {
            ev = self.rx.recv() => Wake::Event(ev),
            _ = tokio::time::sleep_until(next_timer.unwrap_or(deadline).into()), if next_timer.is_some() => Wake::Timer,
            _ = tokio::time::sleep_until(self.next_tick.into()) => Wake::Tick,
            _ = tokio::time::sleep_until(deadline.into()) => Wake::Deadline,
        };
        let happening = match wake {
            Wake::Event(Some(ev)) => self.on_event(ev),
            // The loop holds a sender, so the channel never closes.
            Wake::Event(None) => Happening::Nothing,
            Wake::Timer => {
                let now = Instant::now();
                let due: Vec<(usize, TimerId)> = self
                    .timers
                    .iter()
                    .filter(|(_, &at)| at <= now)
                    .map(|(&k, _)| k)
                    .collect();
                for k in due {
                    self.timers.remove(&k);
                    self.pending.push_back((k.0, Input::Timer(k.1)));
                }
                Happening::Nothing
            }
            Wake::Tick => {
                self.next_tick = Instant::now() + TICK;
                self.check_source();
                self.sample_links();
                Happening::Tick
            }
            Wake::Deadline => Happening::Deadline,
        };
        self.run_pending().await;
        happening
    }

    fn on_event(&mut self, ev: Event) -> Happening {
        if let Some(l) = ev.link() {
            // A late event of a connection replaced since (the peer restarted).
            if self.links.get(&l.peer).map(|link| link.life) != Some(l.life) {
                return Happening::Nothing;
            }
        }
        match ev {
            Event::Conn(c) => Happening::Conn(c),
            Event::DialFailed(p, e) => Happening::DialFailed(p, e),
            Event::AcceptFailed(e) => {
                let reason = e.to_string();
                self.emit(NetEvent::Rejected {
                    reason: reason.clone(),
                });
                self.rejections.push(reason);
                Happening::Nothing
            }
            Event::Frame(conn::LinkRef { peer, .. }, WireFrame::Proto(m)) => {
                self.on_message(peer, m);
                Happening::Nothing
            }
            Event::Frame(conn::LinkRef { peer, .. }, WireFrame::Control(c)) => {
                Happening::Control(peer, c)
            }
            Event::ReadEnd(conn::LinkRef { peer, .. }, err) => {
                if let Some(link) = self.links.get_mut(&peer) {
                    link.reading = false;
                }
                if self.closing && err.is_none() || self.failed_peers.contains(&peer) {
                    return Happening::Nothing;
                }
                let reason = match err {
                    Some(e) => e.to_string(),
                    None => format!("node {peer} closed the connection"),
                };
                self.fault(peer, reason.clone());
                Happening::Lost(peer, reason)
            }
            Event::WriteEnd(conn::LinkRef { peer, .. }, err) => {
                if let Some(link) = self.links.get_mut(&peer) {
                    link.writing = false;
                }
                match err {
                    Some(e) if !self.failed_peers.contains(&peer) => {
                        // A root writing from a file truncated under it reads "Bad address":
                        // the file's change is the reason the run is called off.
                        self.check_source();
                        let reason = e.to_string();
                        self.fault(peer, reason.clone());
                        Happening::Lost(peer, reason)
                    }
                    _ => Happening::Nothing,
                }
            }
            Event::SendDone(conn::LinkRef { peer, .. }, i, id, _) => {
                self.pending
                    .push_back((i, Input::SendComplete { to: peer, id }));
                Happening::Nothing
            }
            Event::Flushed(conn::LinkRef { peer, .. }) => {
                if let Some(link) = self.links.get_mut(&peer) {
                    link.flushed = true;
                }
                Happening::Nothing
            }
            Event::ComputeDone(task, hex, _) => {
                if let Some(&(offset, len)) = self.compute.get(&task) {
                    self.share = Some(ShareResult {
                        offset,
                        len,
                        blake3: hex,
                        computed_ns: self.now().as_nanos(),
                    });
                }
                self.pending
                    .push_back((COLLECTIVE, Input::Command(Command::ComputeDone { task })));
                Happening::Nothing
            }
            Event::SinkDone(r) => Happening::SinkDone(r),
        }
    }

    fn live_peers(&self) -> Vec<NodeId> {
        self.links
            .iter()
            .filter(|(_, l)| !l.failed)
            .map(|(&p, _)| p)
            .collect()
    }

    fn flush_all(&mut self) {
        for p in self.live_peers() {
            if let Some(l) = self.links.get_mut(&p) {
                l.flushed = false;
            }
            self.queue(p, Outgoing::Flush);
        }
    }

    fn all_flushed(&self) -> bool {
        self.links
            .values()
            .all(|l| l.failed || !l.writing || l.flushed)
    }

    /// Orderly close: every writer finishes its queue and shuts its half down; then wait (up to
    /// the close timeout) for every peer to do the same, and stop all tasks.
    async fn close_all(&mut self) {
        self.closing = true;
        for p in self.live_peers() {
            self.queue(p, Outgoing::Shutdown);
        }
        let deadline = Instant::now() + self.timeouts().close;
        while self
            .links
            .values()
            .any(|l| !l.failed && (l.reading || l.writing))
        {
            if let Happening::Deadline = self.poll(deadline).await {
                break;
            }
        }
        for l in self.links.values() {
            l.reader.abort();
            l.writer.abort();
        }
        for t in &self.tasks {
            t.abort();
        }
    }

    fn frame_counts(&self) -> Vec<FrameCount> {
        self.frames_sent
            .iter()
            .map(|(&(to, kind), &(frames, bytes))| FrameCount {
                to,
                kind,
                frames,
                bytes,
            })
            .collect()
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        for l in self.links.values() {
            l.reader.abort();
            l.writer.abort();
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Ping and pong go to the prober, everything else to the collective.
fn machine_for(m: &Message) -> usize {
    match m.kind() {
        ProbeMsg::PING | ProbeMsg::PONG => PROBER,
        _ => COLLECTIVE,
    }
}

/// The machine of `me` for `job` and the neighbours it needs connections to, built through
/// the proto crate's registry of collectives; `rejoin` (the pieces kept from an earlier life,
/// for a multicast) builds the machine of a node that restarted and rejoins the running
/// collective.
fn build_machine(
    me: NodeId,
    group: &Group,
    job: &Job,
    data: Option<Bytes>,
    rejoin: Option<Vec<(u32, Bytes)>>,
    keeper: Option<Arc<dyn PieceKeeper>>,
    verifier: Arc<dyn PieceVerifier>,
) -> Result<(Box<dyn Protocol + Send>, Vec<NodeId>), String> {
    let ctx = BuildContext {
        me,
        root: job.root,
        transfer: job.transfer,
        total_len: job.total_len,
        members: group.members().iter().map(|m| (m.id, m.cluster)).collect(),
        idle_timeout: (job.idle_timeout_ms > 0).then(|| Duration::from_millis(job.idle_timeout_ms)),
        seed: job.seed,
        verifier,
        keeper,
        // A job of this runtime carries only the root's data; per-node input comes through
        // the Host's application (a sort refuses to build without it).
        local_input: Bytes::new(),
    };
    let start = match (data, rejoin) {
        (Some(d), _) => Start::Root(d),
        (None, Some(held)) => Start::Rejoin(held),
        (None, None) => Start::Fresh,
    };
    let built = collective::build(&job.collective, &ctx, start)?;
    Ok((built.machine, built.neighbours))
}

/// With a group key, a multicast job's manifest must carry the MAC made with the key derived
/// from it (the job came over an authenticated connection from the root; this also binds the
/// piece hashes every node checks to the key).
fn check_manifest_mac(key: Option<[u8; 32]>, job: &Job) -> Result<(), String> {
    let (Some(key), CollectiveSpec::Multicast { manifest: m, .. }) = (key, &job.collective) else {
        return Ok(());
    };
    match &m.mac {
        Some(mac)
            if crate::auth::verify_manifest_mac(&key, job.total_len, m.piece_len, &m.hashes, mac) =>
        {
            Ok(())
        }
        Some(_) => Err("the manifest's MAC does not match this group's key (a tampered manifest, or a root with another key)".into()),
        None => Err("the manifest carries no MAC, but this node has a group key (the root runs without one?)".into()),
    }
}

fn prober(me: NodeId, peers: &[NodeId], job: &Job) -> LinkProber {
    let config = ProbeConfig {
        period: Duration::from_millis(job.probe_period_ms.max(1)),
        rounds: u32::MAX,
    };
    LinkProber::new(me, peers, config, node_rng(job.seed, me))
        .expect("the probe period and rounds are positive")
}

/// How long the root waits between attempts to reach a lost node again.
const REDIAL_PAUSE: Duration = Duration::from_secs(1);

mod member;
mod root;

pub(crate) use member::fits_in_memory;
use member::rejoinable;
pub use member::run_node;
pub use root::run_root;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    /// The root's check before a multicast piece's first send: a piece whose bytes no longer
    /// match the manifest is named even when the file's metadata says nothing (its
    /// modification time put back); each piece is hashed once; a truncated file is reported
    /// as such before its mapping is read.
    #[test]
    fn handshake_deadlines_grow_with_the_group() {
        let base = Duration::from_secs(5);
        assert_eq!(handshake_deadline(base, 8), base);
        assert_eq!(handshake_deadline(base, 50), base);
        assert_eq!(handshake_deadline(base, 128), Duration::from_millis(12_800));
        assert_eq!(handshake_deadline(base, 250), Duration::from_secs(25));
        assert_eq!(
            handshake_deadline(Duration::from_secs(1), 2),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn the_root_checks_each_piece_against_the_manifest_before_its_first_send() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.bin");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let (data, file) = crate::SourceFile::map(&path).unwrap();
        let manifest = Arc::new(Manifest::build(&data, 1000).unwrap());
        let mut g = SourceGuard {
            file: file.clone(),
            manifest: Some(manifest.clone()),
            checked: vec![false; 10],
        };
        assert_eq!(g.piece_problem(1, &manifest.slice(&data, 1)), None);
        // Piece 3 changes under the mapping; the modification time is put back.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mtime = f.metadata().unwrap().modified().unwrap();
        f.write_all_at(b"changed", 3000).unwrap();
        f.set_modified(mtime).unwrap();
        assert_eq!(file.changed(), None);
        let why = g.piece_problem(3, &manifest.slice(&data, 3)).unwrap();
        assert!(
            why.contains("piece 3 (bytes 3000 to 3999)") && why.contains("changed during the run"),
            "{why}"
        );
        // Piece 1 was checked at its first send: not hashed again.
        assert_eq!(g.piece_problem(1, &Bytes::from_static(b"x")), None);
        // Truncated: said so, without touching the mapping.
        f.set_len(5000).unwrap();
        let why = g
            .piece_problem(7, &Bytes::from_static(b"never read"))
            .unwrap();
        assert!(
            why.contains("was truncated during the run (5000 bytes, was 10000)"),
            "{why}"
        );
    }
}
