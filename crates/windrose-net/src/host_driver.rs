//! The thin driver of a long-lived group member: one [`Host`] per process over TCP.
//!
//! Everything about collectives and the session (announcing, readiness, reports, heartbeats,
//! silence, leaving) is the proto crate's [`Host`]; this driver only moves bytes, time and
//! application I/O, in the shape of quinn's `ConnectionDriver`:
//!
//! - **transport**: connections made on demand (see [below](self#connections-on-demand)),
//!   frames decoded and fed to the host as `Input::Message`, the host's sends encoded and
//!   queued to the peer's writer (zero-copy payloads);
//! - **timers**: the host's `SetTimer`/`CancelTimer` kept in a map, fired as `Input::Timer`;
//! - **application I/O**: [`AppRequest`]s from a channel become `Input::App`; deliveries,
//!   reports and computed shares go out as [`GroupEvent`]s; a compute task is hashed with
//!   BLAKE3 on a blocking thread (the "compute" of the scatter's load).
//!
//! - **measurements**: each connection's throughput sampled every [`SAMPLE`] and the
//!   prober's round trips, kept as series ([`GroupHandle::measurements`]); a connection that
//!   read bytes since the last sample tells the host its peer is alive ([`Host::heard_from`]:
//!   a large frame on a slow link, or frames still queued for a busy loop, are not silence);
//! - **the root's source**: [`GroupHandle::watch_source`] calls a collective off when the file
//!   its data maps changes; a member's pieces go on its [`PieceShelf`] (a
//!   [`FileShelf`](crate::piece_file::FileShelf) keeps them across a restart).
//!
//! A lost connection, a frame the host refuses and a send to a member with no connection are
//! all `Input::PeerFailed` for the host; a member that comes back is taken back by the host
//! when its frames arrive again.
//!
//! # Connections on demand
//!
//! A member dials another when it first has a frame for it (the frames wait in a backlog until
//! the connection is up), never at start: a full mesh of 250 members is 31,000 connections and
//! handshakes that a loaded machine could not finish in time. Which members talk to which is
//! the host's business ([its rules](windrose_proto::host#which-members-a-host-talks-to-no-full-mesh)):
//! within [`HostConfig::mesh_limit`] members they all end up connected, as before; a larger
//! group connects along its collectives' traffic, its clusters and their representatives.
//!
//! Crossed dials (both members have frames for each other at once) are made rare and harmless:
//! the lower id dials at once, the higher id only after [`CROSS_GRACE`] (by then the lower
//! id's connection has usually arrived, and the backlog goes out on it). When both
//! connections are made anyway, each member keeps sending on the first one it had and reads
//! both (the second is a *spare*), so the frames of each direction stay in order on one
//! connection. The end of either tells the host the member failed (frames may be lost); when
//! the first ends, the spare (say a restarted member's new connection) carries on. An end in
//! order (the member closed it at a frame boundary) while the other connection is still open
//! tells nothing yet: the member's last frames may still be on the other one, which a peer
//! may have sent on (each end picks its own first), and that one's end, or a restarted
//! member's Join on it, tells the host. A lost
//! connection is not redialed for its own sake: the next frame
//! for that member dials again (at most every [`REDIAL_PAUSE`]), and until a connection is up
//! again the host hears every send to it fail.
//!
//! # The probe lane
//!
//! Link probes measure the link, not the queue in front of it: a ping written behind megabytes
//! of pieces waits for all of them in the sender's socket buffer and the receiver's, and a
//! 20 MB broadcast on loopback once measured 76-94 ms "round trips". So each pair of members
//! that probe each other keeps a second connection ([`Role::Lane`]) that carries only pings
//! and pongs; a priority queue in one connection would still leave them behind the bytes
//! already in the kernel's buffers. The lower id dials it when its prober first pings the
//! other (so lanes never cross). The lane is best effort: while it is down, probes use the
//! data connection, and losing it fails nobody (the next ping dials it again, at most every
//! [`REDIAL_PAUSE`]).

use crate::bootstrap::{Handshake, Membership, PlainHandshake};
use crate::conn::{self, Conn, Event, LinkRef, LinkStats, Outgoing};
use crate::error::NetError;
use crate::group::Group;
use crate::measure::{LinkMeasurements, Metric, Recorder};
use crate::outcome::FrameCount;
use crate::timeouts::Timeouts;
use crate::wire::{Control, Role, WireFrame};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use windrose_model::NodeId;
use windrose_proto::app::Application;
use windrose_proto::frame::{encode_parts, Message, MessageKind};
use windrose_proto::host::{App, AppRequest, Failure, Host, HostConfig, PieceShelf};
use windrose_proto::mst_service::MstLiveState;
use windrose_proto::probe::ProbeConfig;
use windrose_proto::probe::ProbeMsg;
use windrose_proto::{
    Command, ComputeTask, Input, Output, Outputs, Protocol, Report, TaskId, Time, TimerId,
};

/// The shortest time between two dials of the same member (after a failed dial or a lost
/// connection, the next frame for it dials again no sooner).
pub const REDIAL_PAUSE: Duration = Duration::from_secs(1);
/// How long a member with a frame for a member of lower id waits for that member's own dial
/// before it dials (see [connections on demand](self#connections-on-demand)).
pub const CROSS_GRACE: Duration = Duration::from_millis(200);
/// Events waiting for the loop.
const EVENT_QUEUE: usize = 4096;

/// Everything a member of a long-lived group needs.
#[derive(Clone)]
pub struct GroupConfig {
    /// The group and this node.
    pub membership: Membership,
    /// How connections are verified.
    pub handshake: Arc<dyn Handshake>,
    /// The deadlines (connect, handshake, stall, silent, close are used).
    pub timeouts: Timeouts,
    /// Body limit of received protocol frames.
    pub max_body_len: u32,
    /// Seed of the host's RNGs.
    pub seed: u64,
    /// Heartbeat period (None: no heartbeats; lost connections still count as failures).
    pub heartbeat: Option<Duration>,
    /// Probe the round trip of every member of the host's view this often (every member
    /// within the mesh limit; [`HostConfig::probe`]); None: no prober.
    pub probe_period: Option<Duration>,
    /// Probes travel on a connection of their own (see [the probe lane](self#the-probe-lane));
    /// false sends them behind the data, for comparison.
    pub probe_lane: bool,
    /// The application's effects: pieces are checked with its verifier, computes run its
    /// `compute` on a blocking thread, deliveries go to its `deliver` (and to the events).
    pub app: Arc<dyn Application>,
    /// Share this member's links' weather with the group this often (None: keep it here).
    /// Rides on the heartbeats: no heartbeats, no sharing.
    pub gossip: Option<Duration>,
    /// Digest what each collective delivers here and report it to its initiator, which then
    /// reports every member's ([`HostConfig::digest_deliveries`]); off by default.
    pub digest_deliveries: bool,
    /// Keep the group's live MST (`mst-live` broadcast trees) with this configuration (None:
    /// no service). Every member must run it, with the same configuration.
    pub mst: Option<windrose_proto::mst_service::MstLiveConfig>,
    /// Where this member keeps a multicast's verified pieces across a restart (None: in
    /// memory); see [`HostConfig::shelf`].
    pub shelf: Option<Arc<dyn PieceShelf>>,
    /// Time the application's compute of this many bytes when the member starts, so its
    /// compute speed is known (and shared) before its first scatter; None: learn it from the
    /// scatters only.
    pub calibrate_compute: Option<usize>,
    /// Members tell the initiator of a broadcast or multicast how much they hold this many
    /// times per collective ([`HostConfig::progress_parts`], whose default it takes; 0:
    /// never), for its progress bar.
    pub progress_parts: u32,
    /// Groups of at most this many members connect fully; larger ones along their traffic
    /// ([`HostConfig::mesh_limit`], whose default it takes). The same in every member.
    pub mesh_limit: usize,
    /// Eager sessions: collectives start without the Ready/Go round trip
    /// ([`HostConfig::eager`]). Only for groups whose members all expect every collective;
    /// the same in every member. From the group's [`SessionSettings`](crate::group::SessionSettings)
    /// (off by default).
    pub eager: bool,
    /// In eager sessions, broadcasts' announcements also travel along their trees
    /// ([`HostConfig::relay_announce`]); in a keyed group a relayed copy carries the
    /// initiator's MAC and an altered one is refused. Off by default.
    pub relay_announce: bool,
}

impl GroupConfig {
    /// Defaults for `membership`: plain handshake, default timeouts, heartbeats every second,
    /// probes every 500 ms, weather shared every 2 s, sessions as the group file's
    /// `[session]` table says (Ready/Go by default).
    pub fn new(membership: Membership) -> GroupConfig {
        let session = membership.group.session();
        GroupConfig {
            membership,
            handshake: Arc::new(PlainHandshake),
            timeouts: Timeouts::default(),
            max_body_len: windrose_proto::frame::DEFAULT_MAX_BODY_LEN,
            seed: 0,
            heartbeat: Some(Duration::from_secs(1)),
            probe_period: Some(Duration::from_millis(500)),
            probe_lane: true,
            app: windrose_proto::app::default_app(),
            gossip: Some(Duration::from_secs(2)),
            digest_deliveries: false,
            mst: None,
            shelf: None,
            calibrate_compute: None,
            progress_parts: windrose_proto::host::DEFAULT_PROGRESS_PARTS,
            mesh_limit: windrose_proto::host::MESH_LIMIT,
            eager: session.eager,
            relay_announce: session.relay_announce,
        }
    }

    fn host_config(&self) -> HostConfig {
        let group = &self.membership.group;
        let members = group.members().iter().map(|m| (m.id, m.cluster)).collect();
        let mut c = HostConfig::new(self.membership.me, members, self.seed);
        c.heartbeat = self.heartbeat;
        c.silent_after = self.timeouts.silent;
        c.idle_timeout = Some(self.timeouts.idle);
        c.probe = self.probe_period.map(|period| ProbeConfig {
            period,
            rounds: u32::MAX,
        });
        c.app = self.app.clone();
        c.weather.gossip = self.heartbeat.and(self.gossip);
        c.digest_deliveries = self.digest_deliveries;
        c.mst = self.mst;
        c.shelf = self.shelf.clone();
        c.progress_parts = self.progress_parts;
        c.mesh_limit = self.mesh_limit;
        c.eager = self.eager;
        c.relay_announce = self.relay_announce;
        c.announce_auth = self.handshake.manifest_key().map(|k| {
            Arc::new(crate::auth::ManifestMac::new(k))
                as Arc<dyn windrose_proto::host::AnnounceAuth>
        });
        c
    }
}

/// What the host did, for the application.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupEvent {
    /// Bytes of a collective, in order per transfer.
    Delivered {
        /// The collective.
        transfer: windrose_proto::TransferId,
        /// Position of the first byte.
        offset: u64,
        /// The bytes.
        data: Bytes,
    },
    /// A report of the host or of a machine (collective started, ended, complete; round trips;
    /// members declared failed; progress).
    Report(Report),
    /// A compute task ran: the BLAKE3 of its bytes (hex), at its offset in the load.
    Computed {
        /// Position of the share in the load.
        offset: u64,
        /// Bytes computed.
        len: u64,
        /// Their BLAKE3, hex.
        blake3: String,
    },
    /// A connection to a member is up.
    Connected(NodeId),
    /// The connection to a member is lost.
    Lost(NodeId, String),
    /// The probe lane to a member is up.
    LaneUp(NodeId),
    /// A member's part of a collective did not finish, and why (at the initiator: every
    /// member's reason; elsewhere: this member's own), after its report.
    Failed(Failure),
    /// At the initiator: when a member's machine passed its named steps (a sort's), sent
    /// before that member's [`Report::MemberDone`].
    Phases(windrose_proto::host::MemberPhases),
    /// A connection to this member's port was refused before it joined (a stranger, a wrong
    /// key, another copy of the group, a handshake that broke off), and why: the acceptor's
    /// side of what the dialer sees as [`GroupEvent::Lost`].
    Refused(String),
}

/// The application's side of a running member: requests in, events out.
pub struct GroupHandle {
    requests: mpsc::UnboundedSender<AppRequest>,
    /// Events of the host, in order.
    pub events: mpsc::UnboundedReceiver<GroupEvent>,
    frames: Arc<Mutex<FrameCounts>>,
    series: Arc<Mutex<Recorder>>,
    conns: Arc<Mutex<ConnectionCounts>>,
    mst: Arc<Mutex<Option<MstSnapshot>>>,
}

/// A member's live MST as its driver last read it ([`GroupHandle::mst_live`]), for reports
/// and measurements (nothing in the protocol reads the wall clock).
#[derive(Clone, Debug)]
pub struct MstSnapshot {
    /// The host's [`Host::mst_live`].
    pub state: MstLiveState,
    /// The wall-clock time of the driver's clock 0: the state's times (`built`) are seconds
    /// after it. Members on one machine share the wall clock, so their builds can be set on
    /// one time line (the testbed).
    pub origin: SystemTime,
}

/// The connections a member has made so far ([`GroupHandle::connections`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Members it had a data connection with (dialed or accepted), each once.
    pub peers: std::collections::BTreeSet<NodeId>,
    /// Data connections established, dialed or accepted (a crossed dial makes two with one
    /// member, a member that came back another).
    pub data: u64,
    /// Probe lanes established, dialed or accepted.
    pub lanes: u64,
    /// Dials started (data and lanes), whatever became of them.
    pub dials: u64,
}

impl GroupHandle {
    /// The connections this member has made so far.
    pub fn connections(&self) -> ConnectionCounts {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Asks the host for something; false when the member has stopped.
    pub fn request(&self, r: AppRequest) -> bool {
        self.requests.send(r).is_ok()
    }

    /// Calls `transfer` off ([`AppRequest::Abort`]) as soon as `file`, its data, changes
    /// (checked every [`SOURCE_CHECK`]): the members would otherwise receive bytes that are
    /// no version of the file, or the sends would read a truncated mapping. The watch ends
    /// when the returned guard is dropped (after the collective's completion) or once it has
    /// called the collective off.
    pub fn watch_source(
        &self,
        transfer: windrose_proto::TransferId,
        file: Arc<crate::SourceFile>,
    ) -> SourceWatch {
        let requests = self.requests.clone();
        SourceWatch(tokio::spawn(async move {
            let mut tick = tokio::time::interval(SOURCE_CHECK);
            loop {
                tick.tick().await;
                if let Some(reason) = file.changed() {
                    let _ = requests.send(AppRequest::Abort { transfer, reason });
                    return;
                }
                if requests.is_closed() {
                    return;
                }
            }
        }))
    }

    /// This member's link measurements so far: round trips (from its prober) and the
    /// throughput each connection got, sampled every [`SAMPLE`], in seconds since the member
    /// started (what `--measurements` writes).
    pub fn measurements(&self) -> LinkMeasurements {
        self.series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .snapshot()
    }

    /// This member's live MST (None: no service configured, or not read yet), as its driver
    /// read it at its last sample of the links (every [`SAMPLE`]).
    pub fn mst_live(&self) -> Option<MstSnapshot> {
        self.mst.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Frames this member has sent on its probe lanes so far.
    pub fn lane_frames_sent(&self) -> u64 {
        let counts = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&LANE_KEY).map_or(0, |c| c.0)
    }

    /// Protocol frames this member has sent so far, by peer and kind (for sim-vs-real
    /// comparisons and reports).
    pub fn frames_sent(&self) -> Vec<FrameCount> {
        let counts = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .iter()
            .filter(|(k, _)| **k != LANE_KEY)
            .map(|(&(to, kind), &(frames, bytes))| FrameCount {
                to,
                kind,
                frames,
                bytes,
            })
            .collect()
    }
}

/// How often a member samples the throughput of its connections.
pub const SAMPLE: Duration = Duration::from_millis(200);

/// How often [`GroupHandle::watch_source`] looks at the source file.
pub const SOURCE_CHECK: Duration = Duration::from_millis(200);

/// Stops its source watch when dropped ([`GroupHandle::watch_source`]).
pub struct SourceWatch(JoinHandle<()>);

impl Drop for SourceWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where the frames sent on probe lanes are counted (besides under their peer and kind).
const LANE_KEY: (NodeId, MessageKind) = (NodeId(u32::MAX), ProbeMsg::PING);

/// Frames and encoded bytes sent, by peer and kind.
type FrameCounts = BTreeMap<(NodeId, MessageKind), (u64, u64)>;

/// The driver's half of a [`GroupHandle`].
pub struct GroupPorts {
    requests: mpsc::UnboundedReceiver<AppRequest>,
    events: mpsc::UnboundedSender<GroupEvent>,
    frames: Arc<Mutex<FrameCounts>>,
    series: Arc<Mutex<Recorder>>,
    conns: Arc<Mutex<ConnectionCounts>>,
    mst: Arc<Mutex<Option<MstSnapshot>>>,
}

/// A connected pair of handle and ports.
pub fn group_channel() -> (GroupHandle, GroupPorts) {
    let (rtx, rrx) = mpsc::unbounded_channel();
    let (etx, erx) = mpsc::unbounded_channel();
    let frames = Arc::new(Mutex::new(FrameCounts::new()));
    // The member's id is set when its driver starts.
    let series = Arc::new(Mutex::new(Recorder::new(NodeId(0))));
    let conns = Arc::new(Mutex::new(ConnectionCounts::default()));
    let mst = Arc::new(Mutex::new(None));
    (
        GroupHandle {
            requests: rtx,
            events: erx,
            frames: frames.clone(),
            series: series.clone(),
            conns: conns.clone(),
            mst: mst.clone(),
        },
        GroupPorts {
            requests: rrx,
            events: etx,
            frames,
            series,
            conns,
            mst,
        },
    )
}

struct Link {
    tx: mpsc::UnboundedSender<Outgoing>,
    life: u64,
    tasks: [JoinHandle<()>; 2],
    /// Bytes read and written, and what they were at the last sample.
    stats: Arc<LinkStats>,
    sampled: (u64, u64),
}

/// Runs this member until its host has left the group (after [`AppRequest::Leave`] and the
/// end of its collectives) or the application dropped its handle (then it leaves the same
/// way).
pub async fn serve_group(
    listener: TcpListener,
    config: GroupConfig,
    ports: GroupPorts,
) -> Result<(), NetError> {
    let host = Host::new(config.host_config()).map_err(|e| NetError::Setup(e.to_string()))?;
    let mut d = Driver::new(config, host, ports);
    d.run(listener).await
}

struct Driver {
    me: NodeId,
    group: Arc<Group>,
    config: GroupConfig,
    host: Host,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    requests: Option<mpsc::UnboundedReceiver<AppRequest>>,
    events: mpsc::UnboundedSender<GroupEvent>,
    frames: Arc<Mutex<FrameCounts>>,
    series: Arc<Mutex<Recorder>>,
    last_sample: Instant,
    links: BTreeMap<NodeId, Link>,
    /// Second data connections of crossed dials, only read from (see the module docs).
    spares: BTreeMap<NodeId, Link>,
    /// The probe lanes (see the module docs).
    lanes: BTreeMap<NodeId, Link>,
    /// When a lane to each member may be dialed again.
    lane_next: BTreeMap<NodeId, Instant>,
    lives: u64,
    timers: BTreeMap<TimerId, Instant>,
    /// Inputs for the host, each with the time it happened when that is not when the loop
    /// takes it (send completions and computes: the bandwidth meter and the compute timing
    /// need the time of the event, not of the loop's turn).
    pending: VecDeque<(Input, Option<Instant>)>,
    out: Outputs,
    epoch: Instant,
    /// The wall clock at `epoch` (only for [`MstSnapshot::origin`]).
    epoch_wall: SystemTime,
    mst: Arc<Mutex<Option<MstSnapshot>>>,
    tasks: Vec<JoinHandle<()>>,
    compute: BTreeMap<TaskId, (u64, u64)>,
    /// Dials waiting for their time (a higher id's grace, or the pause after the last dial).
    dial_at: BTreeMap<NodeId, Instant>,
    /// Members being dialed.
    dialing: std::collections::BTreeSet<NodeId>,
    /// When each member was last dialed.
    last_dial: BTreeMap<NodeId, Instant>,
    conns: Arc<Mutex<ConnectionCounts>>,
    /// Frames for members not connected yet, sent when the connection comes up; dropped when
    /// the member is given up.
    backlog: BTreeMap<NodeId, Vec<Outgoing>>,
    /// Members given up for good until they connect again.
    down: std::collections::BTreeSet<NodeId>,
    left: bool,
}

/// Why a connection that carried a control frame after its handshake is dropped.
fn control_frame_reason(peer: NodeId, c: &Control) -> String {
    format!(
        "node {peer} sent a {} control frame to a group member",
        c.name()
    )
}

/// Why a connection whose reader or writer ended is dropped.
fn closed_reason(peer: NodeId, err: Option<NetError>) -> String {
    err.map_or_else(
        || format!("node {peer} closed the connection"),
        |e| e.to_string(),
    )
}

impl Driver {
    fn new(config: GroupConfig, host: Host, ports: GroupPorts) -> Driver {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        Driver {
            me: config.membership.me,
            group: config.membership.group.clone(),
            host,
            tx,
            rx,
            requests: Some(ports.requests),
            events: ports.events,
            frames: ports.frames,
            series: {
                *ports.series.lock().unwrap_or_else(|e| e.into_inner()) =
                    Recorder::new(config.membership.me);
                ports.series
            },
            last_sample: Instant::now(),
            links: BTreeMap::new(),
            spares: BTreeMap::new(),
            lanes: BTreeMap::new(),
            lane_next: BTreeMap::new(),
            lives: 0,
            timers: BTreeMap::new(),
            pending: VecDeque::new(),
            out: Outputs::new(),
            epoch: Instant::now(),
            epoch_wall: SystemTime::now(),
            mst: ports.mst,
            tasks: Vec::new(),
            compute: BTreeMap::new(),
            dial_at: BTreeMap::new(),
            dialing: std::collections::BTreeSet::new(),
            last_dial: BTreeMap::new(),
            conns: ports.conns,
            backlog: BTreeMap::new(),
            down: std::collections::BTreeSet::new(),
            left: false,
            config,
        }
    }

    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn endpoint(&self) -> conn::Endpoint {
        conn::Endpoint {
            group: self.group.clone(),
            handshake: self.config.handshake.clone(),
            me: self.me,
            max_body_len: self.config.max_body_len,
            handshake_timeout: crate::timeouts::handshake_deadline(
                self.config.timeouts.handshake,
                self.group.len(),
            ),
            events: self.tx.clone(),
        }
    }

    fn count(&self, f: impl FnOnce(&mut ConnectionCounts)) {
        f(&mut self.conns.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn dial(&mut self, peer: NodeId) {
        let now = Instant::now();
        self.dial_at.remove(&peer);
        self.dialing.insert(peer);
        self.last_dial.insert(peer, now);
        self.count(|c| c.dials += 1);
        let deadline = now + self.config.timeouts.connect;
        let task = tokio::spawn(conn::dial(self.endpoint(), peer, Role::Peer, deadline));
        self.tasks.push(task);
    }

    /// There is a frame for `peer` and no connection: dial it, now or when its time comes
    /// (see [connections on demand](self#connections-on-demand)).
    fn want_link(&mut self, peer: NodeId) {
        if self.left || self.links.contains_key(&peer) || self.dialing.contains(&peer) {
            return;
        }
        let now = Instant::now();
        let mut at = if self.me < peer {
            now
        } else {
            now + CROSS_GRACE
        };
        if let Some(&last) = self.last_dial.get(&peer) {
            at = at.max(last + REDIAL_PAUSE);
        }
        if at <= now {
            self.dial(peer);
        } else {
            self.dial_at.entry(peer).or_insert(at);
        }
    }

    /// A ping goes to `peer` and there is no lane: the lower id dials one.
    fn want_lane(&mut self, peer: NodeId) {
        if !(self.me < peer && self.config.probe_lane) || self.left {
            return;
        }
        let now = Instant::now();
        if self.lane_next.get(&peer).is_some_and(|&at| at > now) {
            return;
        }
        let t = &self.config.timeouts;
        self.lane_next.insert(peer, now + t.connect + t.handshake);
        self.count(|c| c.dials += 1);
        self.dial_lane(peer);
    }

    /// Dials a probe lane; a lane that cannot be had fails nobody (probes then share the data
    /// connection), so only its success reaches the loop.
    fn dial_lane(&mut self, peer: NodeId) {
        let (tx, mut rx) = mpsc::channel(1);
        let mut ep = self.endpoint();
        ep.events = tx;
        let main = self.tx.clone();
        let deadline = Instant::now() + self.config.timeouts.connect;
        self.tasks.push(tokio::spawn(async move {
            conn::dial(ep, peer, Role::Lane, deadline).await;
            if let Some(Event::Conn(c)) = rx.recv().await {
                let _ = main.send(Event::Conn(c)).await;
            }
        }));
    }

    /// Times the application's compute of `bytes` zero bytes on a blocking thread and gives
    /// the host the sample.
    async fn calibrate_compute(&mut self, bytes: usize) {
        let app = self.config.app.clone();
        let timed = tokio::task::spawn_blocking(move || {
            let task = ComputeTask {
                task: TaskId(u32::MAX),
                offset: 0,
                len: bytes as u64,
                data: vec![Bytes::from(vec![0u8; bytes])],
                work: None,
            };
            let t0 = Instant::now();
            let _ = app.compute(&task);
            t0.elapsed()
        })
        .await;
        if let Some(r) = timed
            .ok()
            .and_then(|elapsed| self.host.calibrated_compute(bytes as u64, elapsed))
        {
            let _ = self.events.send(GroupEvent::Report(r));
        }
    }

    async fn run(&mut self, listener: TcpListener) -> Result<(), NetError> {
        if let Some(bytes) = self.config.calibrate_compute {
            self.calibrate_compute(bytes).await;
        }
        let accept = tokio::spawn(conn::accept_loop(listener, self.endpoint()));
        self.tasks.push(accept);
        // No dial here: the host's first frames to each member dial it.
        self.step(Input::Start);
        while !self.left {
            self.drain_pending();
            if self.left {
                break;
            }
            let next_timer = self.timers.values().min().copied();
            let next_redial = self.dial_at.values().min().copied();
            let next_sample = self.last_sample + SAMPLE;
            tokio::select! {
                ev = self.rx.recv() => {
                    if let Some(ev) = ev {
                        self.on_event(ev);
                    }
                }
                r = recv_request(&mut self.requests) => match r {
                    Some(r) => self.pending.push_back_now(Input::App(App::new(r))),
                    None => {
                        // The application is gone: leave once the collectives end.
                        self.requests = None;
                        self.pending.push_back_now(Input::App(App::new(AppRequest::Leave)));
                    }
                },
                _ = sleep_until(next_timer), if next_timer.is_some() => self.fire_timers(),
                _ = sleep_until(next_redial), if next_redial.is_some() => self.redial_due(),
                _ = sleep_until(Some(next_sample)) => self.sample_links(),
            }
        }
        self.close_all().await;
        Ok(())
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        let due: Vec<TimerId> = self
            .timers
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&t, _)| t)
            .collect();
        for t in due {
            self.timers.remove(&t);
            self.pending.push_back_now(Input::Timer(t));
        }
    }

    /// Records each connection's throughput since the last sample (MB/s, 10^6 bytes/s), for
    /// links that moved bytes.
    fn sample_links(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.last_sample).as_secs_f64();
        self.last_sample = now;
        if dt <= 0.0 {
            return;
        }
        let at = self.epoch.elapsed().as_secs_f64();
        if let Some(state) = self.host.mst_live() {
            *self.mst.lock().unwrap_or_else(|e| e.into_inner()) = Some(MstSnapshot {
                state,
                origin: self.epoch_wall,
            });
        }
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut heard = Vec::new();
        for (&peer, link) in self.links.iter_mut() {
            let r = link
                .stats
                .read_bytes
                .load(std::sync::atomic::Ordering::Relaxed);
            let w = link
                .stats
                .written_bytes
                .load(std::sync::atomic::Ordering::Relaxed);
            for (now, then, metric) in [
                (r, link.sampled.0, Metric::RecvMbS),
                (w, link.sampled.1, Metric::SendMbS),
            ] {
                if now > then {
                    series.record(peer, metric, at, (now - then) as f64 / dt / 1e6);
                }
            }
            if r > link.sampled.0 {
                heard.push(peer);
            }
            link.sampled = (r, w);
        }
        drop(series);
        // Bytes read are the peer alive (`Host::heard_from`), whether they are a frame still
        // arriving or frames still queued for this loop: a loaded member's loop may take its
        // timer before the frames read before it, and a frame of bulk data on a slow link can
        // take longer than `silent` to arrive whole.
        let t = self.now();
        for peer in heard {
            self.host.heard_from(t, peer);
        }
    }

    fn redial_due(&mut self) {
        let now = Instant::now();
        let due: Vec<NodeId> = self
            .dial_at
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&p, _)| p)
            .collect();
        for p in due {
            self.dial_at.remove(&p);
            if !self.links.contains_key(&p) && !self.dialing.contains(&p) && !self.left {
                self.dial(p);
            }
        }
    }

    fn drain_pending(&mut self) {
        while let Some((input, at)) = self.pending.pop_front() {
            self.step_at(input, at);
        }
    }

    /// Feeds the host one input and performs its outputs.
    fn step(&mut self, input: Input) {
        self.step_at(input, None);
    }

    /// Feeds the host one input that happened `at` (None: now) and performs its outputs.
    fn step_at(&mut self, input: Input, at: Option<Instant>) {
        let from = match &input {
            Input::Message { from, .. } => Some(*from),
            _ => None,
        };
        let now = match at {
            Some(at) => Time::from_nanos(
                u64::try_from(at.saturating_duration_since(self.epoch).as_nanos())
                    .unwrap_or(u64::MAX),
            ),
            None => self.now(),
        };
        let mut out = std::mem::take(&mut self.out);
        match self.host.handle(now, input, &mut out) {
            Ok(()) => {
                // Before the outputs: the collective's completion may be among them.
                for p in self.host.take_phases() {
                    let _ = self.events.send(GroupEvent::Phases(p));
                }
                for o in out.drain() {
                    self.perform(o);
                }
            }
            Err(e) => {
                out.clear();
                if let Some(peer) = from {
                    self.drop_link(peer, format!("node {peer} broke the protocol: {e}"));
                }
            }
        }
        self.out = out;
        for f in self.host.take_failures() {
            let _ = self.events.send(GroupEvent::Failed(f));
        }
    }

    fn perform(&mut self, o: Output) {
        match o {
            Output::Send(t) => {
                let parts = match encode_parts(&t.message) {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = self.events.send(GroupEvent::Lost(
                            t.to,
                            format!("cannot encode a frame to node {}: {e}", t.to),
                        ));
                        return;
                    }
                };
                {
                    let mut counts = self.frames.lock().unwrap_or_else(|e| e.into_inner());
                    let e = counts.entry((t.to, t.message.kind())).or_default();
                    e.0 += 1;
                    e.1 += parts.len() as u64;
                }
                let frame = Outgoing::Frame {
                    head: parts.head,
                    payload: parts.payload,
                    notify: t.notify,
                };
                let frame = match (&t.message, self.lanes.get(&t.to)) {
                    (Message::Probe(_), Some(lane)) => match lane.tx.send(frame) {
                        Ok(()) => {
                            let mut c = self.frames.lock().unwrap_or_else(|e| e.into_inner());
                            c.entry(LANE_KEY).or_default().0 += 1;
                            return;
                        }
                        Err(mpsc::error::SendError(f)) => f,
                    },
                    (Message::Probe(ProbeMsg::Ping(_)), None) => {
                        self.want_lane(t.to);
                        frame
                    }
                    _ => frame,
                };
                match self.links.get(&t.to) {
                    Some(l) => {
                        if l.tx.send(frame).is_err() {
                            self.pending.push_back_now(Input::PeerFailed(t.to));
                        }
                    }
                    // Not connected yet: it goes out when the connection is up.
                    None if !self.down.contains(&t.to) => {
                        self.backlog.entry(t.to).or_default().push(frame);
                        self.want_link(t.to);
                    }
                    // Given up: the send fails, and the member is dialed again (it may be
                    // back), at most every REDIAL_PAUSE.
                    None => {
                        self.pending.push_back_now(Input::PeerFailed(t.to));
                        self.want_link(t.to);
                    }
                }
            }
            Output::SetTimer { timer, at } => {
                let when = self.epoch + Duration::from_nanos(at.as_nanos());
                self.timers.insert(timer, when);
            }
            Output::CancelTimer(timer) => {
                self.timers.remove(&timer);
            }
            Output::Deliver {
                transfer,
                offset,
                data,
            } => {
                self.config.app.deliver(transfer, offset, &data);
                let _ = self.events.send(GroupEvent::Delivered {
                    transfer,
                    offset,
                    data,
                });
            }
            Output::Compute(task) => {
                self.compute.insert(task.task, (task.offset, task.len));
                let tx = self.tx.clone();
                let app = self.config.app.clone();
                tokio::task::spawn_blocking(move || {
                    // The machine's own work (a sort's sorting) first, off the event loop.
                    if let Some(work) = &task.work {
                        work.run();
                    }
                    let summary = app.compute(&task);
                    let done = Instant::now();
                    let _ = tx.blocking_send(Event::ComputeDone(task.task, summary, done));
                });
            }
            Output::Report(r) => {
                if let Report::PeerDown { peer } = r {
                    // The host gave the member up (silent): so does the transport.
                    self.give_up(peer);
                    let silent = self.config.timeouts.silent;
                    self.drop_link(
                        peer,
                        format!("node {peer} sent nothing, not even an answer to a ping, for {silent:?}"),
                    );
                }
                if let Report::RoundTrip { peer, rtt } = r {
                    let at = self.epoch.elapsed().as_secs_f64();
                    self.series
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .record(peer, Metric::RttMs, at, rtt.as_secs_f64() * 1e3);
                }
                let _ = self.events.send(GroupEvent::Report(r));
            }
            Output::Finished | Output::Aborted(_) => self.left = true,
        }
    }

    fn on_event(&mut self, ev: Event) {
        if let Some(l) = ev.link() {
            if self.lanes.get(&l.peer).map(|lane| lane.life) == Some(l.life) {
                self.on_lane_event(ev);
                return;
            }
            if self.spares.get(&l.peer).map(|spare| spare.life) == Some(l.life) {
                self.on_spare_event(ev);
                return;
            }
            if self.links.get(&l.peer).map(|link| link.life) != Some(l.life) {
                return; // a connection replaced since
            }
        }
        match ev {
            Event::Conn(c) => self.add_conn(c),
            Event::DialFailed(peer, e) => {
                self.dialing.remove(&peer);
                if self.links.contains_key(&peer) {
                    return; // the member dialed this one meanwhile
                }
                let _ = self.events.send(GroupEvent::Lost(peer, e.to_string()));
                self.give_up(peer);
                self.pending.push_back_now(Input::PeerFailed(peer));
            }
            Event::AcceptFailed(e) => {
                let _ = self.events.send(GroupEvent::Refused(e.to_string()));
            }
            Event::Frame(LinkRef { peer, .. }, WireFrame::Proto(message)) => {
                self.pending.push_back_now(Input::Message {
                    from: peer,
                    message,
                });
            }
            Event::Frame(LinkRef { peer, .. }, WireFrame::Control(c)) => {
                self.drop_link(peer, control_frame_reason(peer, &c));
            }
            Event::ReadEnd(LinkRef { peer, .. }, None) if self.spares.contains_key(&peer) => {
                // Closed in order while its other connection is open: that one may still
                // carry the member's last frames (an initiator calling a collective off, then
                // leaving), and its end tells the host (a restarted member's Join does too).
                if let Some(link) = self.links.remove(&peer) {
                    for t in link.tasks {
                        t.abort();
                    }
                }
                if let Some(spare) = self.spares.remove(&peer) {
                    self.links.insert(peer, spare);
                }
            }
            Event::ReadEnd(LinkRef { peer, .. }, err)
            | Event::WriteEnd(LinkRef { peer, .. }, err) => {
                let reason = closed_reason(peer, err);
                self.drop_link(peer, reason);
            }
            Event::SendDone(LinkRef { peer, .. }, id, at) => {
                self.pending
                    .push_back((Input::SendComplete { to: peer, id }, Some(at)));
            }
            Event::ComputeDone(task, hex, at) => {
                if let Some((offset, len)) = self.compute.remove(&task) {
                    let _ = self.events.send(GroupEvent::Computed {
                        offset,
                        len,
                        blake3: hex,
                    });
                }
                self.pending
                    .push_back((Input::Command(Command::ComputeDone { task }), Some(at)));
            }
        }
    }

    /// What comes from a probe lane: pings and pongs for the host; its end only closes it.
    fn on_lane_event(&mut self, ev: Event) {
        match ev {
            Event::Frame(LinkRef { peer, .. }, WireFrame::Proto(message))
                if matches!(message, Message::Probe(_)) =>
            {
                self.pending.push_back_now(Input::Message {
                    from: peer,
                    message,
                });
            }
            Event::Frame(LinkRef { peer, .. }, _) => {
                self.drop_lane(peer);
                self.drop_link(
                    peer,
                    format!("node {peer} sent a non-probe frame on its probe lane"),
                );
            }
            Event::ReadEnd(LinkRef { peer, .. }, _) | Event::WriteEnd(LinkRef { peer, .. }, _) => {
                self.drop_lane(peer);
            }
            _ => {}
        }
    }

    /// What comes from the spare connection of a crossed dial: frames for the host as from the
    /// data connection.
    fn on_spare_event(&mut self, ev: Event) {
        match ev {
            Event::Frame(LinkRef { peer, .. }, WireFrame::Proto(message)) => {
                self.pending.push_back_now(Input::Message {
                    from: peer,
                    message,
                });
            }
            Event::Frame(LinkRef { peer, .. }, WireFrame::Control(c)) => {
                self.drop_spare(peer, control_frame_reason(peer, &c));
            }
            Event::ReadEnd(LinkRef { peer, .. }, None) if self.links.contains_key(&peer) => {
                // Closed in order while the first connection is open: as for the first
                // (`on_event`), that one's end tells the host.
                if let Some(spare) = self.spares.remove(&peer) {
                    for t in spare.tasks {
                        t.abort();
                    }
                }
            }
            Event::ReadEnd(LinkRef { peer, .. }, err)
            | Event::WriteEnd(LinkRef { peer, .. }, err) => {
                let reason = closed_reason(peer, err);
                self.drop_spare(peer, reason);
            }
            _ => {}
        }
    }

    fn drop_lane(&mut self, peer: NodeId) {
        if let Some(lane) = self.lanes.remove(&peer) {
            for t in lane.tasks {
                t.abort();
            }
            self.lane_next.insert(peer, Instant::now() + REDIAL_PAUSE);
        }
    }

    fn add_conn(&mut self, c: Conn) {
        if c.role == Role::Lane {
            self.add_lane(c);
            return;
        }
        let peer = c.peer;
        // Ours, or the member's crossing it: either way no dial of ours is due any more.
        self.dialing.remove(&peer);
        self.dial_at.remove(&peer);
        if self.links.contains_key(&peer) {
            if self.spares.contains_key(&peer) {
                conn::refuse(
                    c,
                    format!("node {} already has a connection with node {peer}", self.me),
                );
                return;
            }
            // A crossed dial: read it, keep sending on the first (see the module docs).
            self.lives += 1;
            let spare = self.serve_conn(c);
            self.spares.insert(peer, spare);
            self.count(|n| n.data += 1);
            return;
        }
        self.lives += 1;
        self.host
            .set_link_buffer(peer, link_buffer_bytes(&c.io.stream));
        // No reader is throttled: every member both sends and receives, so two members each
        // paused for their own full writers could wait on each other for ever; the machines
        // bound what they request.
        let link = self.serve_conn(c);
        self.links.insert(peer, link);
        self.count(|n| {
            n.data += 1;
            n.peers.insert(peer);
        });
        self.down.remove(&peer);
        if let (Some(frames), Some(l)) = (self.backlog.remove(&peer), self.links.get(&peer)) {
            for f in frames {
                let _ = l.tx.send(f);
            }
        }
        let _ = self.events.send(GroupEvent::Connected(peer));
    }

    fn add_lane(&mut self, c: Conn) {
        let peer = c.peer;
        self.drop_lane(peer);
        self.lane_next.remove(&peer);
        self.lives += 1;
        let lane = self.serve_conn(c);
        self.lanes.insert(peer, lane);
        self.count(|n| n.lanes += 1);
        let _ = self.events.send(GroupEvent::LaneUp(peer));
    }

    /// Starts the reader and writer of a connection.
    fn serve_conn(&mut self, c: Conn) -> Link {
        let peer = c.peer;
        let link = LinkRef {
            peer,
            life: self.lives,
        };
        let s = conn::serve(c, link, &self.tx, self.config.timeouts.stall);
        Link {
            tx: s.tx,
            life: self.lives,
            tasks: [s.reader, s.writer],
            stats: s.stats,
            sampled: (0, 0),
        }
    }

    /// Stops holding frames for `peer` until it connects again.
    fn give_up(&mut self, peer: NodeId) {
        self.down.insert(peer);
        self.backlog.remove(&peer);
    }

    /// Closes the connection with `peer` and tells the host (frames may be lost). A spare
    /// (a newer connection, e.g. from the member's next life) carries on as its connection;
    /// without one the next frame for it dials again.
    fn drop_link(&mut self, peer: NodeId, reason: String) {
        let Some(link) = self.links.remove(&peer) else {
            return;
        };
        self.drop_lane(peer);
        for t in link.tasks {
            t.abort();
        }
        let _ = self.events.send(GroupEvent::Lost(peer, reason));
        self.pending.push_back_now(Input::PeerFailed(peer));
        match self.spares.remove(&peer) {
            Some(spare) => {
                self.links.insert(peer, spare);
            }
            None => self.give_up(peer),
        }
    }

    /// Closes the spare connection with `peer` (its frames to this member may be lost: the
    /// host hears the member failed) and keeps the first.
    fn drop_spare(&mut self, peer: NodeId, reason: String) {
        let Some(spare) = self.spares.remove(&peer) else {
            return;
        };
        for t in spare.tasks {
            t.abort();
        }
        let _ = self.events.send(GroupEvent::Lost(peer, reason));
        self.pending.push_back_now(Input::PeerFailed(peer));
    }

    /// Orderly close: every writer sends what it has, shuts down, and the peers' readers see
    /// the end; bounded by the close timeout.
    async fn close_all(&mut self) {
        for lane in std::mem::take(&mut self.lanes).into_values() {
            for t in lane.tasks {
                t.abort();
            }
        }
        for link in self.links.values().chain(self.spares.values()) {
            let _ = link.tx.send(Outgoing::Shutdown);
        }
        let deadline = tokio::time::Instant::now() + self.config.timeouts.close;
        let spares = std::mem::take(&mut self.spares);
        for (_, link) in std::mem::take(&mut self.links).into_iter().chain(spares) {
            let [reader, writer] = link.tasks;
            let _ = tokio::time::timeout_at(deadline, writer).await;
            reader.abort();
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

/// What [`Driver::pending`] holds: inputs and when they happened.
trait PushNow {
    /// Queues an input that happens when the loop takes it.
    fn push_back_now(&mut self, input: Input);
}

impl PushNow for VecDeque<(Input, Option<Instant>)> {
    fn push_back_now(&mut self, input: Input) {
        self.push_back((input, None));
    }
}

/// Linux's defaults for the largest send and receive buffers TCP autotuning grows to
/// (`net.ipv4.tcp_wmem` and `tcp_rmem`, third values), for kernels that do not say.
const DEFAULT_WMEM_MAX: u64 = 4 << 20;
const DEFAULT_RMEM_MAX: u64 = 6 << 20;

/// The third number of a `net.ipv4.tcp_[rw]mem` file.
fn sysctl_max(path: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// Bytes that can sit between a completed write on `stream` and the link: this socket's send
/// buffer and the peer's receive buffer. Both grow under autotuning, so each is taken at its
/// bound: the larger of `SO_SNDBUF` now and the kernel's `tcp_wmem` maximum, plus the
/// `tcp_rmem` maximum for the peer (the peer's kernel is assumed to be configured like ours;
/// the handshake does not carry it). An upper bound only costs bandwidth samples of short
/// transfers; a lower one would let memory speed into them ([`windrose_proto::weather`]).
fn link_buffer_bytes(stream: &tokio::net::TcpStream) -> u64 {
    use std::os::fd::AsRawFd;
    static BOUNDS: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
    let (wmem, rmem) = *BOUNDS.get_or_init(|| {
        (
            sysctl_max("/proc/sys/net/ipv4/tcp_wmem").unwrap_or(DEFAULT_WMEM_MAX),
            sysctl_max("/proc/sys/net/ipv4/tcp_rmem").unwrap_or(DEFAULT_RMEM_MAX),
        )
    });
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, an int-sized out value and its length.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    let sndbuf = if r == 0 { v.max(0) as u64 } else { 0 };
    sndbuf.max(wmem) + rmem
}

async fn recv_request(rx: &mut Option<mpsc::UnboundedReceiver<AppRequest>>) -> Option<AppRequest> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        for (_, l) in std::mem::take(&mut self.links)
            .into_iter()
            .chain(std::mem::take(&mut self.spares))
            .chain(std::mem::take(&mut self.lanes))
        {
            for t in l.tasks {
                t.abort();
            }
        }
    }
}
