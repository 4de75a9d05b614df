//! The node: one sans-IO [`Host`] per node that runs many collectives at once, the node's
//! services (the link prober today) and the session of a long-lived group.
//!
//! A driver owns one `Host` per node and drives it like any machine ([`Protocol`]: the same
//! `handle(now, input, &mut outputs)` contract), so the simulator and the runtime run the
//! session too. Like quinn-proto's `Endpoint`, the host hands every input to the right
//! machine and creates new machines when a collective is announced:
//!
//! - frames with a transfer id go to that collective's machine (held back until its Go);
//! - ping and pong frames go to the prober; session frames ([`SessionMsg`]) to the session;
//! - timers, send completions and compute tasks of machines are renamed to host-wide ids and
//!   back, so machines keep their own small id spaces;
//! - a peer failure (from the driver, or declared by the host when a peer stays silent) reaches
//!   every running machine and the prober.
//!
//! # The session of one collective
//!
//! ```text
//! initiator (the root, has the data)            every other member
//!   Input::App(StartCollective) ──Announce──▶  builds its machine ([`crate::collective`])
//!                               ◀──Ready────   (or Refuse with the reason)
//!   all ready: starts its machine ──Go──────▶  starts its machine, then the frames it held
//!   protocol frames flow (any member to any member, tagged with the transfer)
//!   ◀──Done(report)──  when its machine ends (finished or aborted)
//!   all reported (or failed): Report::CollectiveComplete
//! ```
//!
//! Any member may start a collective, and several run at once: transfer ids are drawn from
//! disjoint sequences per member (`seq * members + rank`), so two initiators never collide.
//! Messages of a collective that ended are dropped (late frames are normal at the end).
//!
//! # Eager sessions (no round trip before the data)
//!
//! Where every member knows a collective is coming, as every rank of an MPI communicator
//! calling `MPI_Bcast`, the Ready/Go round trip only delays the data. With
//! [`HostConfig::eager`] the initiator announces (`eager: true`) and starts its machine at
//! once; a member builds and starts its machine when the announcement arrives, and holds the
//! frames of a transfer it has not heard of yet (its parent may start before the root's
//! announcement reaches it) until then. The announcement still carries the plan (the tree),
//! so every member runs the root's tree: agreement by construction, with the announcement
//! one-way, in parallel with the first data. Both sides must use the same transfer id (an MPI
//! driver derives it from the communicator's call counter), and Done and Close still follow,
//! off the data's path. A member that cannot build its machine refuses; the initiator counts
//! it failed (the others already run).
//!
//! # The announcement along the tree (eager sessions that relay)
//!
//! An eager member still starts only when the root's announcement reaches it, sent to it
//! directly: where latencies break the triangle inequality, the tree reaches a member sooner
//! than the root's direct message does, and the data waits, held, for the announcement. With
//! [`HostConfig::relay_announce`] the announcement of a tree collective (a broadcast: the
//! announcement carries the tree) also travels along the tree:
//!
//! ```text
//! root R (starts at once)      parent P                     child C (P's child in R's tree)
//!   ──Announce (direct)──────▶ first copy: builds its machine,
//!   ──data──────────────────▶  relays R's bytes to its children, then starts
//!                              ──Announce (R's bytes)─────▶ first copy: builds, relays, starts
//!                              ──data────────────────────▶ (frames before any copy are held)
//!   ──Announce (direct, slower)─────────────────────────▶  a later copy: dropped
//! ```
//!
//! - A member takes the first copy that arrives, the root's direct one or its tree parent's,
//!   relays it to its own tree children (those not known to be gone) before its machine can
//!   send them anything, then starts. Every later copy is dropped by transfer id, and so is a
//!   copy of a collective that ended here: a late copy never starts a collective again.
//! - The root still sends its direct copy to every member: a member whose parent is dead or
//!   slow hears of the collective from the root, and its machine re-attaches to the root as
//!   for any lost parent ([`crate::tree_broadcast`]). Failure handling, rejoin (the
//!   initiator's rejoin announcement is direct and never relayed) and reports are unchanged,
//!   but for one case eager copies make likelier: a member that restarted and took a copy
//!   before the initiator heard its Join gives way to the initiator's rejoin announcement
//!   (its machine is replaced by a rejoining one, unless its part already ended and
//!   reported). Until then its eager machine forwards what its parent still sent it to its
//!   tree children, which re-attached to the root when its Join reached them: a child takes
//!   data from its current parent only and drops those frames without an error (a driver
//!   would otherwise cut the restarted member off; [`crate::tree_broadcast`]).
//! - A relayed copy is the root's frame body, byte for byte: whatever the initiator sealed
//!   (a manifest MAC, or the announcement's own MAC, [`AnnounceAuth::announce_mac`]) reaches
//!   the member unchanged. A copy is taken only from the member's parent in the announced
//!   tree; one that fails the group's check is dropped with an error naming the relay, and
//!   one that cannot be built is dropped quietly: the root's direct copy then decides (and
//!   refuses with the reason). A relay holds the group's key like any member, so the MAC
//!   proves the announcement was made in the group and not altered on its way, not that the
//!   root made it.
//! - Collectives that are not one tree (the multicasts, MOB and BitTorrent among them, the
//!   scatter, the sorts, the MST) are announced by the root alone, relay or not.
//! - Cost: one more session frame per tree edge below the root's children; none before the
//!   data on any path (a copy goes out when its sender starts, ahead of its data).
//!
//! # Liveness
//!
//! With [`HostConfig::heartbeat`] set, the host sends a heartbeat to every member it watches
//! and has sent nothing to for that long, and declares failed a watched member it has heard
//! nothing from for [`HostConfig::silent_after`] ([`Report::PeerDown`]); the driver's own
//! failure reports (a lost connection) count the same. Heard means a frame, or bytes of one
//! still arriving when the driver says so ([`Host::heard_from`]): a large frame on a slow link
//! is not silence. A member the host hears from again
//! after that is taken back (it restarted): running collectives keep it failed, later ones
//! include it.
//!
//! # Which members a host talks to (no full mesh)
//!
//! A driver connects two members only when one has something to send the other, so the
//! services here decide how many connections a group needs. In a group of at most
//! [`HostConfig::mesh_limit`] members (32 by default) every member is in every member's
//! **view** and watched, as it always was: the Join at the start, the prober, the weather
//! gossip and the heartbeats reach every live member, and the group ends up fully connected.
//! In a larger group (250 members would need 31,000 connections, twice that with the probe
//! lanes, and handshakes enough to stall a loaded machine) the view is the member's own
//! cluster, plus the other clusters' **representatives** (each cluster's lowest id) when the
//! member is its cluster's representative, as NWS probes cliques. The Join, the prober and
//! the gossip go to the view only, and the heartbeats and the silence check to the members
//! the host is **engaged** with:
//!
//! - every member it exchanged a frame with (heartbeats aside) within the last twice
//!   `silent_after` (so a member that went quiet after a frame to it is found silent): its
//!   machines' peers while they talk, and its view, which the prober keeps talking to. Both ends see the same frames, so both watch each other, and both stop
//!   within a network delay of each other;
//! - the initiator of each collective it takes part in (a member finds a dead initiator);
//! - at an initiator, each member of its running collectives whose Ready or Done it awaits (it
//!   finds every dead member and counts it failed); it also heartbeats those that finished,
//!   which watch it until its Close.
//!
//! A member that becomes watched gets a full `silent_after` from then. What a large group
//! gives up: a member hears of a failure among its collective's members that never sent it
//! anything through the initiator's count or its own idle timeout, not its own silence
//! check; a member leaving tells its view and those it ever exchanged a frame with; links
//! outside the view are not probed (the planner uses its guesses there); a
//! restarted member's Join reaches its view, so only initiators in its view announce their
//! running collectives to it again. The live MST service ([`crate::mst_service`]) builds over
//! the complete graph (Hellos to every member), so it opens the full mesh: it is meant for
//! groups within the mesh limit.
//!
//! A restarted member's Join makes the initiator announce its running collectives to it again
//! (`rejoin`); with a [`PieceShelf`] it resumes a multicast from the pieces its earlier life
//! verified and kept. An initiator may call its collective off ([`AppRequest::Abort`]); why a
//! member's part did not finish is kept in words for the driver ([`Host::take_failures`]).

use crate::app::{self, Application};
use crate::collective::TreeSpec;
use crate::collective::{self, BuildContext, CollectiveSpec, Delivers, Start};
use crate::frame::{encoded_len, Message, TransferId};
use crate::frame::{Family, FrameError, KindLayout, MessageKind};
use crate::mst_service::{MstLiveConfig, MstLiveState, MstService};
use crate::node::{
    node_rng, AbortReason, Command, ComputeTask, ComputedShare, Input, Output, Outputs, Protocol,
    ProtocolError, Report, SendId, SetupError, Status, TaskId, TimerId, Transmit,
};
use crate::pieces::PieceVerifier;
use crate::planner::{Planner, TreePolicy};
use crate::probe::ProbeMsg;
use crate::probe::{LinkProber, ProbeConfig};
use crate::scatter_plan::ScatterRequest;
use crate::time::Time;
pub use crate::weather::LinkWeather;
use crate::weather::{GroupView, LinkEntry, Weather, WeatherConfig};
use bytes::Bytes;
use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use windrose_model::{ClusterId, LinkCosts, NodeId};

/// A message of the host's session (joining, starting a collective, readiness, reports,
/// heartbeats, leaving): the frame carries the encoded [`SessionMsg`] as its body.
///
/// Frame family 1, one kind: 1 `session`, no fixed fields, the body is the payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionFrame {
    /// The encoded session message.
    pub body: Bytes,
}

impl SessionFrame {
    /// The kind of a session frame.
    pub const SESSION: MessageKind = MessageKind::of::<SessionFrame>(1);
}

impl Family for SessionFrame {
    const FAMILY: u8 = 1;
    const KINDS: &'static [KindLayout] = &[KindLayout {
        kind: 1,
        name: "session",
        fixed: 0,
        payload: true,
    }];

    fn kind(&self) -> u8 {
        1
    }

    fn transfer(&self) -> Option<TransferId> {
        None
    }

    fn payload(&self) -> Option<&Bytes> {
        Some(&self.body)
    }

    fn put_fixed(&self, _dst: &mut BytesMut) {}

    fn parse(_kind: u8, body: Bytes) -> Result<Self, FrameError> {
        Ok(SessionFrame { body })
    }
}

/// The host's own timer: heartbeats and the silence check.
const TICK: TimerId = TimerId(0);
/// The prober's timer, renamed.
const PROBE: TimerId = TimerId(1);
/// First id handed to machines' timers.
const FIRST_MACHINE_TIMER: u32 = 2;

/// How a host runs: who it is, the group, and its services.
#[derive(Clone)]
pub struct HostConfig {
    /// This node.
    pub me: NodeId,
    /// Every member of the group (this node included) and its cluster.
    pub members: Arc<[(NodeId, ClusterId)]>,
    /// Seed of every RNG the host and its machines draw from ([`node_rng`]).
    pub seed: u64,
    /// Send a heartbeat to a member nothing was sent to for this long (None: no heartbeats
    /// and no silence detection; the driver reports failures).
    pub heartbeat: Option<Duration>,
    /// Declare a member failed after this long without a frame from it.
    pub silent_after: Duration,
    /// Probe the round trip of every member of this host's view (every member within
    /// [`HostConfig::mesh_limit`]; see the module docs) with this configuration (None: no
    /// prober).
    pub probe: Option<ProbeConfig>,
    /// The application's effects: how pieces are checked (its verifier, BLAKE3 by default);
    /// drivers perform its deliver and compute.
    pub app: Arc<dyn Application>,
    /// A receiver of a collective gives up when nothing arrives for this long (None: never).
    pub idle_timeout: Option<Duration>,
    /// How links are measured, forecast (NWS-style predictors with a change-point reset) and
    /// shared with the group ([`crate::weather`]).
    pub weather: WeatherConfig,
    /// Digest what every collective delivers here with the application's
    /// [`delivery_digest`](Application::delivery_digest) and report it to the initiator
    /// ([`Report::MemberDone`]), so it can check every member got the root's bytes. Off by
    /// default: it costs a pass over the data (the simulator's runs need none).
    pub digest_deliveries: bool,
    /// Eager sessions: collectives start without Ready and Go, and frames of transfers not
    /// announced yet are held (see the module docs). Only for groups whose members all expect
    /// every collective; off by default.
    pub eager: bool,
    /// In eager sessions of tree collectives (a broadcast: its announcement carries the
    /// tree), every member relays the announcement to its tree children before its machine
    /// sends them anything, so a member starts on its parent's copy rather than on the root's
    /// direct one (see the module docs, "The announcement along the tree"). Only with
    /// [`eager`](Self::eager); off by default (it adds a session frame per tree edge below
    /// the root's). A member without it ignores its parent's copies and waits for the
    /// root's.
    pub relay_announce: bool,
    /// Offer running broadcasts the host's view of the links ([`Protocol::steer`]): a large
    /// message is paced per child and a child whose link slows is handed to another parent
    /// (crate::tree_broadcast, "Leaving a link that slows"). On by default. A driver whose
    /// node makes progress only inside its application's calls, and whose receive buffers are
    /// the caller's (the MPI shim), turns it off: relays then keep nothing they forwarded.
    pub steer_broadcasts: bool,
    /// Keep the group's live minimum spanning tree ([`crate::mst_service`], the `mst-live`
    /// broadcast trees) with this configuration (None: no service; `mst-live` falls back to
    /// the central MST of the view).
    pub mst: Option<MstLiveConfig>,
    /// Where this member keeps the verified pieces of the multicasts it receives, and finds
    /// those an earlier life of it kept ([`PieceShelf`]; None: in memory, and a restarted
    /// member fetches everything again).
    pub shelf: Option<Arc<dyn PieceShelf>>,
    /// Proves to the members that a collective was announced by a member of the group (a
    /// keyed group's manifest MAC, [`AnnounceAuth`]); None: announcements are taken as they
    /// come (the connections may still be authenticated).
    pub announce_auth: Option<Arc<dyn AnnounceAuth>>,
    /// A member receiving a collective's whole data ([`Delivers::AllData`]) tells the
    /// initiator how much it holds each time it passes another `1 / progress_parts` of it
    /// (at least [`PROGRESS_MIN_STEP`] apart; 0: never), which the initiator reports as
    /// [`Report::MemberProgress`] for its application's progress bar. Keyed to bytes, not
    /// time, so a run sends the same frames in every driver.
    pub progress_parts: u32,
    /// Groups of at most this many members keep every member in view (Join, prober, gossip
    /// and heartbeats to all); larger ones talk to their cluster, their representatives and
    /// the members they are engaged with (see
    /// [the module docs](self#which-members-a-host-talks-to-no-full-mesh)). Every member of
    /// a group must use the same limit.
    pub mesh_limit: usize,
}

/// Groups up to this size keep the full mesh ([`HostConfig::mesh_limit`]'s default).
pub const MESH_LIMIT: usize = 32;

impl HostConfig {
    /// A host for `me` in a group of `members`: heartbeats every second, silence after 10 s,
    /// no prober, BLAKE3 checks, receivers idle-abort after 30 s.
    pub fn new(me: NodeId, members: Arc<[(NodeId, ClusterId)]>, seed: u64) -> HostConfig {
        HostConfig {
            me,
            members,
            seed,
            heartbeat: Some(Duration::from_secs(1)),
            silent_after: Duration::from_secs(10),
            probe: None,
            app: app::default_app(),
            idle_timeout: Some(Duration::from_secs(30)),
            weather: WeatherConfig::default(),
            digest_deliveries: false,
            eager: false,
            relay_announce: false,
            steer_broadcasts: true,
            mst: None,
            shelf: None,
            announce_auth: None,
            progress_parts: DEFAULT_PROGRESS_PARTS,
            mesh_limit: MESH_LIMIT,
        }
    }
}

/// What the application asks of its host ([`Input::App`]).
#[derive(Clone, Debug)]
pub enum AppRequest {
    /// Start a collective rooted at this node, with its data.
    StartCollective {
        /// The collective (its root must be this node where the spec names one).
        spec: CollectiveSpec,
        /// The root's data (a scatter's load).
        data: Bytes,
        /// The transfer id to use (None: the host draws one no other member can draw).
        transfer: Option<TransferId>,
    },
    /// Start a tree broadcast rooted at this node whose tree the host plans from the group's
    /// view ([`crate::planner`]).
    StartBroadcast(BroadcastRequest),
    /// Start whichever of the tree broadcast, MOB and Balanced Multicasting the host predicts
    /// fastest for this data on the group's view ([`crate::choice`]), reporting the choice
    /// ([`Report::ProtocolChosen`]) before the collective's own reports.
    StartAuto(AutoRequest),
    /// The application measured the link to `peer` itself: the live MST
    /// ([`crate::mst_service`]) takes `weight` as that link's measurement from now on
    /// ([`MstService::set_weight`]); ignored without the service.
    MstWeight {
        /// The other end.
        peer: NodeId,
        /// Its weight, in the service's metric.
        weight: f64,
    },
    /// Leave the group once every collective this node takes part in has ended.
    Leave,
    /// Call off a collective this node started (its data cannot be trusted any more: a source
    /// file changed under it). Every member's part ends aborted with `reason`.
    Abort {
        /// The collective.
        transfer: TransferId,
        /// Why, for every member.
        reason: String,
    },
    /// Start a divisible-load scatter rooted at this node whose schedule the host plans from
    /// the group's view ([`crate::scatter_plan`]).
    StartScatter(ScatterRequest),
}

/// A broadcast whose tree follows the weather: [`AppRequest::StartBroadcast`].
#[derive(Clone, Debug)]
pub struct BroadcastRequest {
    /// How the tree is planned.
    pub policy: TreePolicy,
    /// Bytes per segment.
    pub segment_bytes: u64,
    /// Largest payload per frame.
    pub max_frame_payload: u32,
    /// The data.
    pub data: Bytes,
    /// The transfer id to use (None: the host draws one).
    pub transfer: Option<TransferId>,
}

/// An [`AppRequest`] as an input. Inputs compare by value; requests, which carry data and
/// plans, compare by identity (two requests are equal when they are the same allocation).
#[derive(Clone, Debug)]
pub struct App(pub Arc<AppRequest>);

impl App {
    /// Wraps a request.
    pub fn new(request: AppRequest) -> App {
        App(Arc::new(request))
    }
}

impl PartialEq for App {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for App {}

/// How a member's part in a collective ended, as it reports it to the initiator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    /// Its machine finished (false: aborted or could not be built).
    pub finished: bool,
    /// Why not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bytes its machine delivered to its application.
    pub bytes_delivered: u64,
    /// The digest of those bytes (hex), when its host makes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Nanoseconds from its machine's start (its Go) to its end, on its own clock (None: it
    /// never started). Sent as 16 hex digits: a session message's length must not depend on
    /// timing, so the simulator's byte counts stay the runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "fixed_hex")]
    pub elapsed_ns: Option<u64>,
    /// Set when this life of the member was taken back into a running collective: the bytes
    /// it resumed from what an earlier life kept ([`PieceShelf::resumed_bytes`]).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "fixed_hex")]
    pub resumed_bytes: Option<u64>,
    /// The share it kept and computed (collectives that deliver shares, when its host
    /// digests what it is handed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareReport>,
    /// When its machine passed its named steps ([`Protocol::phases`]), from its start, on its
    /// clock (none for most machines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseReport>,
}

/// One named step of a member's machine in its report: nanoseconds from the machine's start
/// as 16 hex digits (the message's length must not depend on timing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// The step.
    pub name: String,
    /// When, from the machine's start.
    #[serde(with = "fixed_hex")]
    pub at_ns: Option<u64>,
}

/// A member's steps as its initiator heard them ([`Host::take_phases`]): each step's name and
/// seconds from the member's start.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberPhases {
    /// The collective.
    pub transfer: TransferId,
    /// The member.
    pub member: NodeId,
    /// Its steps, oldest first.
    pub phases: Vec<(String, f64)>,
}

/// A member's computed share in its report: [`ComputedShare`] with every number as 16 hex
/// digits and the digest as 64, so the message's length does not depend on the values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareReport {
    #[serde(with = "fixed_hex")]
    offset: Option<u64>,
    #[serde(with = "fixed_hex")]
    len: Option<u64>,
    digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "fixed_hex")]
    computed_ns: Option<u64>,
}

impl ShareReport {
    /// The report's form of `share`.
    pub fn of(share: &ComputedShare) -> ShareReport {
        ShareReport {
            offset: Some(share.offset),
            len: Some(share.len),
            digest: to_hex(&share.digest),
            computed_ns: share.computed.map(|d| d.as_nanos() as u64),
        }
    }

    /// Back to the report's form (None when a field is missing or malformed).
    pub fn share(&self) -> Option<ComputedShare> {
        Some(ComputedShare {
            offset: self.offset?,
            len: self.len?,
            digest: from_hex(&self.digest)?,
            computed: self.computed_ns.map(Duration::from_nanos),
        })
    }
}

/// An optional u64 as exactly 16 hex digits.
mod fixed_hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_str(&format!("{n:016x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| u64::from_str_radix(&s, 16).map_err(serde::de::Error::custom))
            .transpose()
    }
}

impl MemberReport {
    /// A member lost before it reported.
    fn lost() -> MemberReport {
        MemberReport {
            finished: false,
            error: None,
            bytes_delivered: 0,
            digest: None,
            elapsed_ns: None,
            resumed_bytes: None,
            share: None,
            phases: Vec::new(),
        }
    }

    /// The digest as bytes (None when absent or not 64 hex digits).
    fn digest_bytes(&self) -> Option<[u8; 32]> {
        from_hex(self.digest.as_deref()?)
    }
}

/// How many progress messages a member sends per collective by default
/// ([`HostConfig::progress_parts`]).
pub const DEFAULT_PROGRESS_PARTS: u32 = 16;

/// Smallest step between two of a member's progress messages ([`HostConfig::progress_parts`]):
/// a small collective sends none.
pub const PROGRESS_MIN_STEP: u64 = 1 << 20;

/// Why a member's part ended when the collective's initiator failed, whichever of the machine
/// (its `PeerFailed` abort) and the Host (its silence) noticed first.
fn lost_initiator(peer: NodeId) -> String {
    format!("lost the collective's initiator, node {peer}")
}

fn to_hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A 32-byte digest from 64 hex digits (None otherwise).
fn from_hex(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut d = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        d[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(d)
}

/// A session message: the body of a [`Message::Session`] frame, JSON-encoded (small and rare
/// next to the data; a job's manifest is a hex string).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "t")]
pub enum SessionMsg {
    /// A collective starts: build its machine and answer [`SessionMsg::Ready`].
    Announce {
        /// Its transfer id.
        transfer: TransferId,
        /// The node with the data.
        root: NodeId,
        /// Bytes of the data.
        total_len: u64,
        /// The collective.
        spec: CollectiveSpec,
        /// Set when the collective is already running and the member restarted: it builds a
        /// machine that rejoins and starts it at once (no Ready, no Go).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        rejoin: bool,
        /// Members that do not take part (failed, or restarted and not taken back): the
        /// initiator decides who is in, and every machine hears these failed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        excluded: Vec<NodeId>,
        /// The initiator has started: build the machine and start it at once (no Ready, no
        /// Go; [`HostConfig::eager`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        eager: bool,
        /// The initiator's proof of the whole announcement ([`AnnounceAuth::announce_mac`]
        /// of it without this field), in groups whose key makes one; a relayed copy carries
        /// it unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mac: Option<String>,
    },
    /// The member built its machine.
    Ready {
        /// The transfer.
        transfer: TransferId,
    },
    /// The member cannot take part.
    Refuse {
        /// The transfer.
        transfer: TransferId,
        /// Why.
        reason: String,
    },
    /// Every member is ready: start.
    Go {
        /// The transfer.
        transfer: TransferId,
        /// Members lost since the announcement, as in [`SessionMsg::Announce`].
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        excluded: Vec<NodeId>,
    },
    /// The collective is called off before it started.
    Cancel {
        /// The transfer.
        transfer: TransferId,
        /// Why.
        reason: String,
    },
    /// The member's machine ended.
    Done {
        /// The transfer.
        transfer: TransferId,
        /// How.
        report: MemberReport,
    },
    /// A member's progress: the bytes of the collective it holds now
    /// ([`HostConfig::progress_parts`]).
    Progress {
        /// The transfer.
        transfer: TransferId,
        /// Bytes delivered to its application so far.
        bytes: u64,
    },
    /// Every member's part ended: forget the collective.
    Close {
        /// The transfer.
        transfer: TransferId,
    },
    /// The initiator called the collective off ([`AppRequest::Abort`]): end it aborted.
    Abort {
        /// The transfer.
        transfer: TransferId,
        /// Why.
        reason: String,
    },
    /// Nothing else to say: the sender is alive.
    Heartbeat,
    /// The sender (re)started and joins the group: whatever its earlier life held is gone.
    Join,
    /// The sender leaves the group.
    Leave,
    /// The sender's links' weather (its row of the group's view), sent every gossip period.
    Weather {
        /// Its links' forecasts.
        links: Vec<LinkEntry>,
        /// Its compute speed forecast, MB/s, and the forecast's error (absent from rows of
        /// members that never timed a compute, and of older versions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compute_mb_s: Option<(f64, f64)>,
    },
}

impl SessionMsg {
    /// The frame carrying this message.
    pub fn to_message(&self) -> Message {
        // Plain data with string keys: serialising cannot fail.
        let body = serde_json::to_vec(self).expect("session messages serialise");
        Message::Session(SessionFrame {
            body: Bytes::from(body),
        })
    }

    /// The message a session frame carries.
    pub fn from_frame(frame: &SessionFrame) -> Result<SessionMsg, String> {
        serde_json::from_slice(&frame.body).map_err(|e| format!("bad session message: {e}"))
    }

    /// The collective it is about (None: heartbeats and leaving).
    pub fn transfer(&self) -> Option<TransferId> {
        match self {
            SessionMsg::Announce { transfer, .. }
            | SessionMsg::Ready { transfer }
            | SessionMsg::Refuse { transfer, .. }
            | SessionMsg::Go { transfer, .. }
            | SessionMsg::Cancel { transfer, .. }
            | SessionMsg::Done { transfer, .. }
            | SessionMsg::Progress { transfer, .. }
            | SessionMsg::Close { transfer }
            | SessionMsg::Abort { transfer, .. } => Some(*transfer),
            SessionMsg::Heartbeat
            | SessionMsg::Join
            | SessionMsg::Leave
            | SessionMsg::Weather { .. } => None,
        }
    }
}

/// The group's view kept between the steers of running broadcasts ([`Host::steer_machine`]).
#[derive(Clone, Debug)]
struct SteerView {
    /// [`Weather::generation`] when it was built.
    generation: u64,
    /// When it was built.
    built: Time,
    /// The members it was built over.
    members: Arc<[(NodeId, ClusterId)]>,
    /// The view and its estimates.
    estimator: crate::weather::Estimator<'static>,
}

/// One collective this node takes part in.
struct Slot {
    machine: Box<dyn Protocol + Send>,
    initiator: NodeId,
    /// Go seen (or sent): the machine has had its Start.
    started: bool,
    /// When it had its Start.
    started_at: Option<Time>,
    /// Inputs that arrived before Go, in order.
    held: Vec<Input>,
    bytes_delivered: u64,
    /// At a member: the step between its progress messages to the initiator (0: none), the
    /// bytes delivered at which the next goes out, and the collective's length (none goes out
    /// with the last bytes: the member's Done says that).
    progress: (u64, u64, u64),
    /// The digest of what the machine delivered ([`HostConfig::digest_deliveries`]).
    digest: Option<Box<dyn app::DeliveryDigest>>,
    /// The collective's members compute a share ([`Delivers::Share`]): the host digests the
    /// share it hands the application and reports it with the member's end.
    digests_share: bool,
    /// That share, once handed over (its `computed` set when the application is done).
    share: Option<ComputedShare>,
    /// At the initiator: members whose Ready is awaited.
    awaiting_ready: BTreeSet<NodeId>,
    /// At the initiator: members whose Done is awaited.
    awaiting_done: BTreeSet<NodeId>,
    /// At the initiator: (finished, failed) members so far.
    tally: (u32, u32),
    /// This node's machine ended (its Done went out).
    ended: bool,
    /// At the initiator: what was announced, to announce it again to a member that restarts.
    announced: Option<(CollectiveSpec, u64)>,
    /// At the initiator: members counted as failed.
    counted_failed: BTreeSet<NodeId>,
    /// At the initiator: members counted as finished (a restart after that is not taken
    /// back: its part is done).
    counted_finished: BTreeSet<NodeId>,
    /// Members whose life at this collective's start (or since) is gone: the machine hears
    /// each failed, even if the member has restarted since (its new life takes part only when
    /// the initiator announces the collective to it again).
    excluded: BTreeSet<NodeId>,
}

#[derive(Clone, Copy, Debug, Default)]
struct PeerState {
    last_heard: Time,
    last_sent: Time,
    /// The last frame other than a heartbeat sent to it or heard from it (None: none yet).
    last_traffic: Option<Time>,
    /// Watched at the last tick: its silence is checked (see the module docs).
    watched: bool,
    failed: bool,
    left: bool,
    /// Joins heard from it: every life of a member sends one, so a second one means it
    /// restarted.
    joins: u32,
}

/// Host-wide names for machines' ids, and back.
struct Renames<K: Ord + Copy, V: Ord + Copy> {
    to_host: BTreeMap<(TransferId, K), V>,
    to_machine: BTreeMap<V, (TransferId, K)>,
}

impl<K: Ord + Copy, V: Ord + Copy> Renames<K, V> {
    fn new() -> Self {
        Renames {
            to_host: BTreeMap::new(),
            to_machine: BTreeMap::new(),
        }
    }

    fn host_id(&mut self, t: TransferId, k: K, next: impl FnOnce() -> V) -> V {
        if let Some(&v) = self.to_host.get(&(t, k)) {
            return v;
        }
        let v = next();
        self.to_host.insert((t, k), v);
        self.to_machine.insert(v, (t, k));
        v
    }

    fn forget_transfer(&mut self, t: TransferId) {
        // Rare (once per collective) and over the live ids only.
        self.to_host.retain(|(tt, _), _| *tt != t);
        self.to_machine.retain(|_, (tt, _)| *tt != t);
    }
}

/// One node of a long-lived group. See the [module docs](self).
pub struct Host {
    config: HostConfig,
    rank: u32,
    slots: BTreeMap<TransferId, Slot>,
    /// Transfers that ended here, so their late frames are dropped quietly.
    ended: BTreeSet<TransferId>,
    /// Eager sessions: frames of transfers not announced yet, in arrival order.
    early: BTreeMap<TransferId, Vec<Input>>,
    peers: BTreeMap<NodeId, PeerState>,
    /// The members this host joins, probes and gossips to: every other member, or in a group
    /// above the mesh limit its cluster and representatives (see the module docs).
    view: BTreeSet<NodeId>,
    /// The group is above the mesh limit: heartbeats only to the members it is engaged with.
    sparse: bool,
    prober: Option<LinkProber>,
    next_seq: u32,
    timers: Renames<TimerId, TimerId>,
    next_timer: u32,
    sends: Renames<SendId, SendId>,
    next_send: u64,
    tasks: Renames<TaskId, TaskId>,
    next_task: u32,
    /// The application's verifier, asked once.
    verifier: Arc<dyn PieceVerifier>,
    /// The links' measurements, forecasts and the group's shared rows.
    weather: Weather,
    /// The group's view as running broadcasts are steered with, kept while the weather and
    /// the members stay the same ([`Host::steer_machine`]).
    steer_view: Option<SteerView>,
    /// Metered sends not yet complete: their peer and bytes.
    metered: BTreeMap<SendId, (NodeId, u64)>,
    /// The trees of the broadcasts this node roots ([`AppRequest::StartBroadcast`]).
    planner: Planner,
    /// The live MST, when configured.
    mst: Option<MstService>,
    /// Computes handed to the application and not done yet: when, and how many bytes.
    computing: BTreeMap<TaskId, (Time, u64)>,
    /// When the last compute was done (the next one started no earlier).
    last_compute_done: Time,
    /// The time of the last input.
    now: Time,
    /// When the heartbeat tick is due (its timer's `at`).
    tick_due: Time,
    started: bool,
    leaving: bool,
    status: Status,
    scratch: Outputs,
    /// Why members' parts did not finish, for [`Host::take_failures`].
    failures: Vec<Failure>,
    /// At the initiator: the members' steps heard since the driver last took them.
    phases: Vec<MemberPhases>,
}

/// The tree an eager announcement of `spec` is relayed along ([`HostConfig::relay_announce`]):
/// a broadcast's. None for collectives that are not one tree (multicasts, scatters, sorts,
/// the MST): their announcements come from the root only.
fn relay_tree(spec: &CollectiveSpec) -> Option<&TreeSpec> {
    match spec {
        CollectiveSpec::Broadcast { tree, .. } => Some(tree),
        _ => None,
    }
}

/// `node`'s parent in `tree` (None for the root, or a node outside it).
fn tree_parent(tree: &TreeSpec, node: NodeId) -> Option<NodeId> {
    tree.edges.iter().find(|e| e.0 == node).map(|e| e.1)
}

/// `node`'s children in `tree`, in send order.
fn tree_children(tree: &TreeSpec, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
    tree.edges.iter().filter(move |e| e.1 == node).map(|e| e.0)
}

/// The bytes an announcement's MAC covers: the announcement without its MAC, as the Host
/// encodes it.
fn unsealed_bytes(announce: &SessionMsg) -> Vec<u8> {
    let mut a = announce.clone();
    if let SessionMsg::Announce { mac, .. } = &mut a {
        *mac = None;
    }
    serde_json::to_vec(&a).expect("session messages serialise")
}

/// Whether `a` equals `b`, in a time that depends on their lengths only.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A collective that could not start ends at its initiator: refused, then complete with
/// nobody finished. (Why is not reported: `Report` carries no text; a member that refused
/// sent its reason in its `Refuse`.)
fn refused(t: TransferId, out: &mut Outputs) {
    out.push(Output::Report(Report::CollectiveRefused { transfer: t }));
    out.push(Output::Report(Report::CollectiveComplete {
        transfer: t,
        finished: 0,
        failed: 1,
    }));
}

/// Whether `m` is a heartbeat (which keeps a member watched but is no traffic of its own).
fn is_heartbeat(m: &Message) -> bool {
    const BODY: &[u8] = b"\"Heartbeat\"";
    matches!(m, Message::Session(f) if f.body[..] == *BODY)
}

/// The members `me` joins, probes and gossips to ([`Host`]'s view, see the module docs):
/// every other member, or when `sparse` its own cluster and, if it is its cluster's
/// representative (lowest id), the other clusters' representatives.
fn view_of(me: NodeId, members: &[(NodeId, ClusterId)], sparse: bool) -> BTreeSet<NodeId> {
    let others = members.iter().map(|(n, _)| *n).filter(|&n| n != me);
    if !sparse {
        return others.collect();
    }
    let mut reps: BTreeMap<ClusterId, NodeId> = BTreeMap::new();
    for &(n, c) in members {
        let r = reps.entry(c).or_insert(n);
        *r = (*r).min(n);
    }
    let mine = members.iter().find(|(n, _)| *n == me).map(|(_, c)| *c);
    let is_rep = mine.is_some_and(|c| reps.get(&c) == Some(&me));
    members
        .iter()
        .filter(|&&(n, c)| n != me && (Some(c) == mine || (is_rep && reps.get(&c) == Some(&n))))
        .map(|(n, _)| *n)
        .collect()
}

/// Why a request or a frame cannot be taken.
fn inconsistent(from: NodeId, what: &'static str) -> ProtocolError {
    ProtocolError::Inconsistent {
        from,
        kind: SessionFrame::SESSION,
        what,
    }
}

impl Host {
    /// A member's progress step and first threshold for a collective of `total_len` bytes
    /// (see [`HostConfig::progress_parts`]) and the length; all 0 when it sends none.
    fn progress_step(&self, spec: &CollectiveSpec, total_len: u64) -> (u64, u64, u64) {
        let parts = u64::from(self.config.progress_parts);
        if parts == 0 || spec.descriptor().delivers != Delivers::AllData {
            return (0, 0, 0);
        }
        let step = (total_len / parts).max(PROGRESS_MIN_STEP);
        if step >= total_len {
            return (0, 0, 0);
        }
        (step, step, total_len)
    }

    /// A fresh digest for a collective's deliveries, when this host makes them.
    fn new_digest(&self) -> Option<Box<dyn app::DeliveryDigest>> {
        if self.config.digest_deliveries {
            self.config.app.delivery_digest()
        } else {
            None
        }
    }

    /// Whether a slot of `spec` digests the share its machine computes.
    fn digests_share(&self, spec: &CollectiveSpec) -> bool {
        self.config.digest_deliveries && spec.descriptor().delivers == Delivers::Share
    }

    /// A host for `config.me`. Errors when `me` is not a member.
    pub fn new(config: HostConfig) -> Result<Host, SetupError> {
        let me = config.me;
        let rank = config
            .members
            .iter()
            .position(|(n, _)| *n == me)
            .ok_or(SetupError::NotInTree { node: me })? as u32;
        if config.silent_after.is_zero() || config.heartbeat.is_some_and(|h| h.is_zero()) {
            return Err(SetupError::Config {
                what: "heartbeat and silent_after",
                requirement: "positive",
                value: format!("{:?} and {:?}", config.heartbeat, config.silent_after),
            });
        }
        let peers: Vec<NodeId> = config
            .members
            .iter()
            .map(|(n, _)| *n)
            .filter(|&n| n != me)
            .collect();
        let sparse = config.members.len() > config.mesh_limit;
        let view = view_of(me, &config.members, sparse);
        let probed: Vec<NodeId> = view.iter().copied().collect();
        let prober = match config.probe {
            Some(p) => Some(LinkProber::new(
                me,
                &probed,
                p,
                node_rng(config.seed ^ 0x0070_726f_6265, me),
            )?),
            None => None,
        };
        let weather = Weather::new(me, config.weather.clone()).map_err(|e| SetupError::Config {
            what: "weather",
            requirement: "a valid weather configuration",
            value: e.to_string(),
        })?;
        let mst =
            match config.mst {
                Some(c) => Some(MstService::new(me, &config.members, c).map_err(|e| {
                    SetupError::Config {
                        what: "mst",
                        requirement: "a valid live MST configuration",
                        value: e,
                    }
                })?),
                None => None,
            };
        Ok(Host {
            mst,
            weather,
            metered: BTreeMap::new(),
            computing: BTreeMap::new(),
            last_compute_done: Time::ZERO,
            planner: Planner::new(),
            now: Time::ZERO,
            tick_due: Time::ZERO,
            verifier: config.app.verifier(),
            rank,
            slots: BTreeMap::new(),
            ended: BTreeSet::new(),
            early: BTreeMap::new(),
            peers: peers.iter().map(|&p| (p, PeerState::default())).collect(),
            view,
            sparse,
            prober,
            next_seq: 0,
            timers: Renames::new(),
            next_timer: FIRST_MACHINE_TIMER,
            sends: Renames::new(),
            next_send: 0,
            tasks: Renames::new(),
            next_task: 0,
            started: false,
            leaving: false,
            status: Status::Running,
            scratch: Outputs::new(),
            steer_view: None,
            failures: Vec::new(),
            phases: Vec::new(),
            config,
        })
    }

    /// The collectives running here, by transfer.
    pub fn running(&self) -> impl Iterator<Item = TransferId> + '_ {
        self.slots.keys().copied()
    }

    /// Members this host counts as failed.
    pub fn failed_peers(&self) -> Vec<NodeId> {
        self.peers
            .iter()
            .filter(|(_, s)| s.failed)
            .map(|(n, _)| *n)
            .collect()
    }

    fn live_peers(&self) -> Vec<NodeId> {
        self.peers
            .iter()
            .filter(|(_, s)| !s.failed && !s.left)
            .map(|(n, _)| *n)
            .collect()
    }

    /// The live members of this host's view: those its Join and its weather go to.
    fn live_view(&self) -> Vec<NodeId> {
        self.live_peers()
            .into_iter()
            .filter(|p| self.view.contains(p))
            .collect()
    }

    /// The live members told of this host's leaving: above the mesh limit only its view and
    /// those it ever exchanged a frame with (the others never watched it), not the whole group.
    fn leave_to(&self) -> Vec<NodeId> {
        self.live_peers()
            .into_iter()
            .filter(|p| {
                !self.sparse
                    || self.view.contains(p)
                    || self.peers.get(p).is_some_and(|s| s.last_traffic.is_some())
            })
            .collect()
    }

    /// The members this host is engaged with through its collectives (see the module docs):
    /// (heartbeated, watched).
    fn engaged(&self) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let me = self.config.me;
        let (mut beat, mut watch) = (BTreeSet::new(), BTreeSet::new());
        for s in self.slots.values() {
            if s.initiator != me {
                beat.insert(s.initiator);
                watch.insert(s.initiator);
                continue;
            }
            for &m in s.awaiting_ready.iter().chain(&s.awaiting_done) {
                beat.insert(m);
                watch.insert(m);
            }
            beat.extend(s.counted_finished.iter().copied());
        }
        beat.remove(&me);
        watch.remove(&me);
        (beat, watch)
    }

    /// Notes the frames other than heartbeats among `out[from..]` as traffic with their peer.
    fn note_sent(&mut self, now: Time, out: &Outputs, from: usize) {
        for o in out.as_slice().get(from..).unwrap_or_default() {
            if let Output::Send(t) = o {
                if !is_heartbeat(&t.message) {
                    if let Some(p) = self.peers.get_mut(&t.to) {
                        p.last_traffic = Some(now);
                    }
                }
            }
        }
    }

    fn send_session(&mut self, now: Time, to: NodeId, msg: &SessionMsg, out: &mut Outputs) {
        if let Some(p) = self.peers.get_mut(&to) {
            p.last_sent = now;
        }
        out.send(to, msg.to_message());
    }

    /// Performs a machine's outputs as the host's: ids renamed, ends reported.
    fn forward(&mut self, now: Time, t: TransferId, out: &mut Outputs) {
        let mut ended = None;
        let mut call_off = false;
        // The progress messages this step calls for: (initiator, bytes).
        let mut progress = Vec::new();
        // The machine's outputs, taken out of the reused buffer (no allocation per step).
        let mut scratch = std::mem::take(&mut self.scratch);
        for o in scratch.drain() {
            match o {
                Output::Send(tx) => {
                    if let Some(p) = self.peers.get_mut(&tx.to) {
                        p.last_sent = now;
                    }
                    let mut notify = tx.notify.map(|id| {
                        let next = &mut self.next_send;
                        self.sends.host_id(t, id, || {
                            *next += 1;
                            SendId(*next)
                        })
                    });
                    let len = encoded_len(&tx.message) as u64;
                    if self.weather.meters(len) {
                        // The sender meters its links' bandwidth from the data itself
                        // (crate::weather): every metered send reports its completion.
                        let id = *notify.get_or_insert_with(|| {
                            self.next_send += 1;
                            SendId(self.next_send)
                        });
                        self.metered.insert(id, (tx.to, len));
                        self.weather.sent(tx.to, len);
                    }
                    out.push(Output::Send(Transmit {
                        to: tx.to,
                        message: tx.message,
                        notify,
                    }));
                }
                Output::SetTimer { timer, at } => {
                    let next = &mut self.next_timer;
                    let id = self.timers.host_id(t, timer, || {
                        *next += 1;
                        TimerId(*next - 1)
                    });
                    out.push(Output::SetTimer { timer: id, at });
                }
                Output::CancelTimer(timer) => {
                    if let Some(&id) = self.timers.to_host.get(&(t, timer)) {
                        out.push(Output::CancelTimer(id));
                    }
                }
                Output::Compute(task) => {
                    let next = &mut self.next_task;
                    let id = self.tasks.host_id(t, task.task, || {
                        *next += 1;
                        TaskId(*next - 1)
                    });
                    self.computing.insert(id, (now, task.len));
                    if let Some(s) = self.slots.get_mut(&t).filter(|s| s.digests_share) {
                        if let Some(mut d) = self.config.app.delivery_digest() {
                            for piece in &task.data {
                                d.update(piece);
                            }
                            s.share = Some(ComputedShare {
                                offset: task.offset,
                                len: task.len,
                                digest: d.finish(),
                                computed: None,
                            });
                        }
                    }
                    out.push(Output::Compute(ComputeTask { task: id, ..task }));
                }
                Output::Deliver {
                    transfer,
                    offset,
                    data,
                } => {
                    if let Some(s) = self.slots.get_mut(&t) {
                        s.bytes_delivered += data.len() as u64;
                        if let Some(d) = s.digest.as_mut() {
                            d.update(&data);
                        }
                        // One message per delivery that crosses a step: a function of the
                        // machine's deliveries alone (their sizes and order), not of how a
                        // driver's steps group them, so both drivers send the same frames.
                        let (step, next, total) = s.progress;
                        if step > 0 && s.bytes_delivered >= next && s.bytes_delivered < total {
                            s.progress.1 = (s.bytes_delivered / step + 1) * step;
                            progress.push((s.initiator, s.bytes_delivered));
                        }
                    }
                    out.push(Output::Deliver {
                        transfer,
                        offset,
                        data,
                    });
                }
                Output::Report(r) => out.push(Output::Report(r)),
                Output::Finished => ended = Some(None),
                // The initiator lost: one wording whether the machine or the Host noticed
                // first (see `collectives_lose`).
                Output::Aborted(AbortReason::PeerFailed { peer })
                    if self.slots.get(&t).is_some_and(|s| s.initiator == peer) =>
                {
                    ended = Some(Some(lost_initiator(peer)))
                }
                // At the initiator, a reason no member can finish after (its own data no
                // longer matches what it announced) calls the collective off: every member
                // is told at once (below).
                Output::Aborted(reason) => {
                    call_off = reason.ends_every_member()
                        && self
                            .slots
                            .get(&t)
                            .is_some_and(|s| s.initiator == self.config.me);
                    ended = Some(Some(reason.to_string()));
                }
            }
        }
        self.scratch = scratch;
        for (initiator, bytes) in progress {
            let msg = SessionMsg::Progress { transfer: t, bytes };
            self.send_session(now, initiator, &msg, out);
        }
        match ended {
            Some(Some(error)) if call_off => self.abort_collective(now, t, &error, out),
            Some(error) => self.machine_ended(now, t, error, out),
            None => {}
        }
    }

    /// This node's part of `t` ended: tell the application and the initiator.
    fn machine_ended(
        &mut self,
        now: Time,
        t: TransferId,
        error: Option<String>,
        out: &mut Outputs,
    ) {
        let me = self.config.me;
        let Some(slot) = self.slots.get_mut(&t) else {
            return;
        };
        if slot.ended {
            return;
        }
        slot.ended = true;
        let finished = error.is_none();
        out.push(Output::Report(Report::CollectiveEnded {
            transfer: t,
            finished,
        }));
        let report = MemberReport {
            finished,
            error,
            bytes_delivered: slot.bytes_delivered,
            digest: slot.digest.take().map(|d| to_hex(&d.finish())),
            elapsed_ns: slot
                .started_at
                .map(|at| now.as_nanos().saturating_sub(at.as_nanos())),
            resumed_bytes: self.config.shelf.as_ref().and_then(|s| s.resumed_bytes(t)),
            share: slot.share.as_ref().map(ShareReport::of),
            phases: match slot.started_at {
                Some(at) => slot
                    .machine
                    .phases()
                    .into_iter()
                    .map(|(name, when)| PhaseReport {
                        name: name.to_string(),
                        at_ns: Some(when.as_nanos().saturating_sub(at.as_nanos())),
                    })
                    .collect(),
                None => Vec::new(),
            },
        };
        let initiator = slot.initiator;
        if initiator == me {
            self.tally(now, t, me, &report, out);
        } else {
            if let Some(why) = &report.error {
                self.failures.push(Failure {
                    transfer: t,
                    member: me,
                    why: why.clone(),
                });
            }
            self.send_session(
                now,
                initiator,
                &SessionMsg::Done {
                    transfer: t,
                    report,
                },
                out,
            );
            // Without heartbeats no tick carries the gossip (the MPI driver): the row goes,
            // when due, to the initiator, the member that plans its collectives' trees.
            if self.config.heartbeat.is_none() {
                if let Some(row) = self.weather.gossip_due(now) {
                    let msg = SessionMsg::Weather {
                        links: row.links,
                        compute_mb_s: row.compute_mb_s,
                    };
                    self.send_session(now, initiator, &msg, out);
                }
            }
            // The machine stays until the initiator closes the collective: members that
            // finished still answer the others (a swarm's last signals, a rejoining member).
        }
        self.maybe_leave(now, out);
    }

    /// At the initiator: one member's end counted; the collective completes with the last.
    fn tally(
        &mut self,
        now: Time,
        t: TransferId,
        member: NodeId,
        report: &MemberReport,
        out: &mut Outputs,
    ) {
        let Some(slot) = self.slots.get_mut(&t) else {
            return;
        };
        if member != self.config.me && !slot.awaiting_done.remove(&member) {
            return;
        }
        let finished = report.finished;
        if let Some(why) = &report.error {
            self.failures.push(Failure {
                transfer: t,
                member,
                why: why.clone(),
            });
        }
        if !report.phases.is_empty() {
            self.phases.push(MemberPhases {
                transfer: t,
                member,
                phases: report
                    .phases
                    .iter()
                    .map(|p| (p.name.clone(), p.at_ns.unwrap_or(0) as f64 / 1e9))
                    .collect(),
            });
        }
        out.push(Output::Report(Report::MemberDone {
            transfer: t,
            member,
            finished,
            bytes_delivered: report.bytes_delivered,
            digest: report.digest_bytes(),
            elapsed: report.elapsed_ns.map(Duration::from_nanos),
            share: report.share.as_ref().and_then(ShareReport::share),
            resumed_bytes: report.resumed_bytes,
        }));
        if finished {
            slot.tally.0 += 1;
            slot.counted_finished.insert(member);
        } else {
            slot.tally.1 += 1;
            slot.counted_failed.insert(member);
        }
        if slot.ended && slot.awaiting_done.is_empty() {
            let (finished, failed) = slot.tally;
            // The closing frames first: an application that hears the collective complete
            // then sees every frame it caused already handed to the driver.
            let close = SessionMsg::Close { transfer: t };
            for p in self.live_peers() {
                self.send_session(now, p, &close, out);
            }
            out.push(Output::Report(Report::CollectiveComplete {
                transfer: t,
                finished,
                failed,
            }));
            self.retire(t);
            self.maybe_leave(now, out);
        }
    }

    /// Forgets a collective (its machine and ids); its late frames are dropped.
    fn retire(&mut self, t: TransferId) {
        self.slots.remove(&t);
        self.ended.insert(t);
        self.timers.forget_transfer(t);
        self.sends.forget_transfer(t);
        self.tasks.forget_transfer(t);
        let tasks = &self.tasks;
        self.computing
            .retain(|id, _| tasks.to_machine.contains_key(id));
    }

    fn maybe_leave(&mut self, now: Time, out: &mut Outputs) {
        if !self.leaving || !self.slots.is_empty() || self.status != Status::Running {
            return;
        }
        for p in self.leave_to() {
            self.send_session(now, p, &SessionMsg::Leave, out);
        }
        out.push(Output::CancelTimer(TICK));
        if self.prober.is_some() {
            out.push(Output::CancelTimer(PROBE));
        }
        self.status = Status::Finished;
        out.push(Output::Finished);
    }

    /// Feeds one input to the machine of `t` (held back before its Go).
    fn feed_machine(
        &mut self,
        now: Time,
        t: TransferId,
        input: Input,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let Some(slot) = self.slots.get_mut(&t) else {
            return Ok(());
        };
        if !slot.started {
            slot.held.push(input);
            return Ok(());
        }
        self.scratch.clear();
        let r = slot.machine.handle(now, input, &mut self.scratch);
        if r.is_err() {
            self.scratch.clear();
            return r;
        }
        self.forward(now, t, out);
        Ok(())
    }

    /// Offers the machine of `t` the host's view of the links after one of its sends
    /// completed ([`Protocol::steer`]: a running broadcast may hand a child whose link slowed
    /// to another parent). The link from this node is priced by its own meter (what it
    /// measured; unmeasured counts as a guess), any other link by the group's view, which is
    /// built only if the machine asks.
    ///
    /// The view and its estimates are kept ([`SteerView`]) and rebuilt only when the weather
    /// moved ([`Weather::generation`], a forecast of this node's aging past the TTL) or the
    /// members changed: a paced broadcast completes a send per segment and child, and
    /// rebuilding the view (O(members^2)) for each cost more than the broadcast itself.
    fn steer_machine(&mut self, now: Time, t: TransferId, out: &mut Outputs) {
        if !self.config.steer_broadcasts {
            return;
        }
        let Some(slot) = self.slots.get_mut(&t) else {
            return;
        };
        if !slot.started {
            return;
        }
        self.scratch.clear();
        let me = self.config.me;
        let weather = &self.weather;
        let members = &self.config.members;
        let defaults = self.config.weather.guesses;
        let cache = &mut self.steer_view;
        let mut checked = false;
        let mut price = |a: NodeId, b: NodeId| -> crate::node::LinkPrice {
            if !checked {
                checked = true;
                let current = cache.as_ref().is_some_and(|c| {
                    c.generation == weather.generation()
                        && c.members == *members
                        && !weather.expires_between(c.built, now)
                });
                if !current {
                    *cache = Some(SteerView {
                        generation: weather.generation(),
                        built: now,
                        members: members.clone(),
                        estimator: weather.view(now, members).into_estimator(defaults),
                    });
                }
            }
            let est = &cache.as_ref().expect("built above").estimator;
            let latency_s = est.rtt_ms(a, b) / 2e3;
            if a == me {
                // Only this node's own measurement of its link counts as measured here.
                if let Some(mb_s) = weather.sent_mb_s(now, b) {
                    return crate::node::LinkPrice {
                        bytes_per_s: mb_s * 1e6,
                        latency_s,
                        measured: true,
                        shares_hosts_path: false,
                    };
                }
            }
            let (mb_s, basis) = est.mb_s(a, b);
            let site = |x: NodeId| members.iter().find(|m| m.0 == x).map(|m| m.1);
            let (sa, sb, sme) = (site(a), site(b), site(me));
            crate::node::LinkPrice {
                bytes_per_s: mb_s * 1e6,
                latency_s,
                measured: a != me && basis == crate::weather::Basis::Measured,
                shares_hosts_path: sa.is_some() && sa == sme && sb.is_some() && sb != sme,
            }
        };
        let slowed = slot.machine.steer(now, &mut price, &mut self.scratch);
        if !self.scratch.is_empty() {
            self.forward(now, t, out);
        }
        for (peer, bytes_s) in slowed {
            if let Some(fc) = self.weather.observe_bandwidth(now, peer, bytes_s / 1e6) {
                out.push(Output::Report(Report::LinkBandwidth {
                    peer,
                    bytes_per_s: bytes_per_s(fc.value),
                    error_bytes_per_s: bytes_per_s(fc.error),
                }));
                self.mst_forecast(out);
            }
        }
    }

    /// Starts the machine of `t` and replays what it held.
    fn go(&mut self, now: Time, t: TransferId, out: &mut Outputs) {
        let Some(slot) = self.slots.get_mut(&t) else {
            return;
        };
        if slot.started {
            return;
        }
        slot.started = true;
        slot.started_at = Some(now);
        // Before its Start: a broadcast paces its sends only under a host that steers it,
        // and the view sizes each child's window before the first send.
        self.steer_machine(now, t, out);
        let Some(slot) = self.slots.get_mut(&t) else {
            return;
        };
        let held = std::mem::take(&mut slot.held);
        let mut inputs = vec![Input::Start];
        inputs.extend(slot.excluded.iter().copied().map(Input::PeerFailed));
        inputs.extend(held.into_iter().filter(|i| {
            // Failures already given with the start are not given twice.
            !matches!(i, Input::PeerFailed(p) if slot.excluded.contains(p))
        }));
        for input in inputs {
            // A peer's bad frame was already its own fault when it arrived; here it only
            // costs that input.
            let _ = self.feed_machine(now, t, input, out);
        }
    }

    fn context(
        &self,
        t: TransferId,
        root: NodeId,
        total_len: u64,
        spec: &CollectiveSpec,
    ) -> BuildContext {
        BuildContext {
            me: self.config.me,
            root,
            transfer: t,
            total_len,
            members: self.config.members.clone(),
            idle_timeout: self.config.idle_timeout,
            seed: self.config.seed ^ u64::from(t.0).rotate_left(32),
            verifier: self.verifier.clone(),
            keeper: None,
            local_input: self.config.app.local_input(t, spec),
        }
    }

    /// `transfer`, or a transfer id no other member can draw and not used here.
    fn draw_transfer(&mut self, transfer: Option<TransferId>) -> TransferId {
        let n = self.config.members.len() as u32;
        transfer.unwrap_or_else(|| loop {
            let t = TransferId(self.next_seq.wrapping_mul(n).wrapping_add(self.rank));
            self.next_seq = self.next_seq.wrapping_add(1);
            if !self.slots.contains_key(&t) && !self.ended.contains(&t) {
                break t;
            }
        })
    }

    fn start_collective(
        &mut self,
        now: Time,
        spec: &CollectiveSpec,
        data: Bytes,
        transfer: Option<TransferId>,
        out: &mut Outputs,
    ) {
        let me = self.config.me;
        let t = self.draw_transfer(transfer);
        let total_len = data.len() as u64;
        let sealed;
        let spec = match &self.config.announce_auth {
            Some(auth) => {
                let mut s = spec.clone();
                auth.seal(&mut s, total_len);
                sealed = s;
                &sealed
            }
            None => spec,
        };
        let built = if self.leaving {
            Err("this node is leaving the group".to_string())
        } else if self.slots.contains_key(&t) || self.ended.contains(&t) {
            Err(format!("transfer {t} is already in use on this node"))
        } else {
            collective::build(
                spec,
                &self.context(t, me, total_len, spec),
                Start::Root(data),
            )
        };
        let machine = match built {
            Ok(b) => b.machine,
            Err(why) => {
                // The initiator's own reason, for its application (`Report` carries no text).
                self.failures.push(Failure {
                    transfer: t,
                    member: me,
                    why,
                });
                refused(t, out);
                return;
            }
        };
        let others = self.live_peers();
        let eager = self.config.eager;
        self.slots.insert(
            t,
            Slot {
                machine,
                initiator: me,
                started: false,
                started_at: None,
                held: Vec::new(),
                bytes_delivered: 0,
                progress: (0, 0, 0),
                digest: self.new_digest(),
                digests_share: self.digests_share(spec),
                share: None,
                awaiting_ready: if eager {
                    BTreeSet::new()
                } else {
                    others.iter().copied().collect()
                },
                awaiting_done: others.iter().copied().collect(),
                tally: (0, 0),
                ended: false,
                announced: Some((spec.clone(), total_len)),
                counted_failed: BTreeSet::new(),
                counted_finished: BTreeSet::new(),
                excluded: self.failed_peers().into_iter().collect(),
            },
        );
        out.push(Output::Report(Report::CollectiveStarted {
            transfer: t,
            initiator: me,
        }));
        self.mst_broadcast(now, spec, out);
        let announce = SessionMsg::Announce {
            transfer: t,
            root: me,
            total_len,
            spec: spec.clone(),
            rejoin: false,
            excluded: self.failed_peers(),
            eager,
            mac: None,
        };
        let announce = self.with_announce_mac(announce);
        for p in &others {
            self.send_session(now, *p, &announce, out);
        }
        if eager {
            self.go(now, t, out);
        } else {
            self.maybe_go(now, t, out);
        }
    }

    /// At the initiator: Go once nobody's Ready is awaited.
    fn maybe_go(&mut self, now: Time, t: TransferId, out: &mut Outputs) {
        let Some(slot) = self.slots.get(&t) else {
            return;
        };
        if slot.started || !slot.awaiting_ready.is_empty() {
            return;
        }
        let members: Vec<NodeId> = slot.awaiting_done.iter().copied().collect();
        let go = SessionMsg::Go {
            transfer: t,
            excluded: slot.excluded.iter().copied().collect(),
        };
        for p in members {
            self.send_session(now, p, &go, out);
        }
        self.go(now, t, out);
    }

    fn on_session(
        &mut self,
        now: Time,
        from: NodeId,
        msg: SessionMsg,
        body: &Bytes,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let me = self.config.me;
        match msg {
            SessionMsg::Announce { .. } => self.on_announce(now, from, msg, body, out),
            SessionMsg::Ready { transfer: t } => {
                if let Some(slot) = self.slots.get_mut(&t) {
                    if slot.initiator != me {
                        return Err(inconsistent(
                            from,
                            "ready for a collective this node did not start",
                        ));
                    }
                    slot.awaiting_ready.remove(&from);
                }
                self.maybe_go(now, t, out);
                Ok(())
            }
            SessionMsg::Refuse {
                transfer: t,
                reason,
            } => {
                let Some(slot) = self.slots.get(&t) else {
                    return Ok(());
                };
                if slot.initiator != me {
                    return Err(inconsistent(
                        from,
                        "refuses a collective this node did not start",
                    ));
                }
                if slot.started {
                    if self.config.eager {
                        // The others already run: the refusing member counts as failed.
                        let refused = MemberReport {
                            error: Some(reason.clone()),
                            ..MemberReport::lost()
                        };
                        self.tally(now, t, from, &refused, out);
                    }
                    return Ok(());
                }
                let others: Vec<NodeId> = slot
                    .awaiting_done
                    .iter()
                    .copied()
                    .filter(|&p| p != from)
                    .collect();
                self.failures.push(Failure {
                    transfer: t,
                    member: from,
                    why: reason.clone(),
                });
                self.cancel(
                    now,
                    t,
                    others,
                    format!("node {from} refused: {reason}"),
                    out,
                );
                Ok(())
            }
            SessionMsg::Go {
                transfer: t,
                excluded,
            } => {
                match self.slots.get_mut(&t) {
                    Some(s) if s.initiator == from => {
                        s.excluded.extend(excluded.into_iter().filter(|&p| p != me));
                        self.go(now, t, out)
                    }
                    Some(_) => {
                        return Err(inconsistent(from, "go for a collective it did not start"))
                    }
                    None => {}
                }
                Ok(())
            }
            SessionMsg::Cancel { transfer: t, .. } => {
                if let Some(s) = self.slots.get(&t) {
                    if s.initiator == from && !s.started {
                        out.push(Output::Report(Report::CollectiveRefused { transfer: t }));
                        self.retire(t);
                        self.maybe_leave(now, out);
                    }
                }
                Ok(())
            }
            SessionMsg::Done {
                transfer: t,
                report,
            } => {
                if let Some(s) = self.slots.get(&t) {
                    if s.initiator != me {
                        return Err(inconsistent(
                            from,
                            "reports on a collective this node did not start",
                        ));
                    }
                }
                self.tally(now, t, from, &report, out);
                Ok(())
            }
            SessionMsg::Progress { transfer: t, bytes } => {
                match self.slots.get(&t) {
                    Some(s) if s.initiator != me => Err(inconsistent(
                        from,
                        "reports progress on a collective this node did not start",
                    )),
                    Some(s) if s.awaiting_done.contains(&from) => {
                        out.push(Output::Report(Report::MemberProgress {
                            transfer: t,
                            member: from,
                            bytes,
                        }));
                        Ok(())
                    }
                    // Ended, or counted out already: late news.
                    _ => Ok(()),
                }
            }
            SessionMsg::Close { transfer: t } => {
                match self.slots.get(&t) {
                    Some(s) if s.initiator == from => {
                        if !s.ended {
                            // The initiator counted this node out (it was missed for a
                            // while): the collective is over for it too.
                            out.push(Output::Report(Report::CollectiveEnded {
                                transfer: t,
                                finished: false,
                            }));
                        }
                        self.retire(t);
                        self.maybe_leave(now, out);
                    }
                    Some(_) => {
                        return Err(inconsistent(from, "closes a collective it did not start"))
                    }
                    None => {}
                }
                Ok(())
            }
            SessionMsg::Abort {
                transfer: t,
                reason,
            } => {
                self.on_abort(now, from, t, reason, out);
                Ok(())
            }
            SessionMsg::Heartbeat => {
                // A member given up that is heard again (it was stopped, or cut off) takes
                // part in later collectives; the running ones went on without it.
                if let Some(p) = self.peers.get_mut(&from) {
                    if p.failed && !p.left {
                        p.failed = false;
                        if let Some(prober) = self.prober.as_mut() {
                            prober.revive(from);
                        }
                    }
                }
                Ok(())
            }
            SessionMsg::Join => {
                self.on_join(now, from, out);
                Ok(())
            }
            SessionMsg::Weather {
                links,
                compute_mb_s,
            } => {
                self.weather.take_row(now, from, links);
                if let Some((v, e)) = self.weather.take_compute(from, compute_mb_s) {
                    out.push(Output::Report(compute_report(from, v, e)));
                }
                Ok(())
            }
            SessionMsg::Leave => {
                if let Some(p) = self.peers.get_mut(&from) {
                    p.left = true;
                }
                self.peer_lost(now, from, out);
                Ok(())
            }
        }
    }

    /// An announcement from `from` (its frame's `body`): the root's own copy, or — in eager
    /// sessions that relay ([`HostConfig::relay_announce`]) — its tree parent's relayed copy
    /// of the root's bytes. The first copy that arrives builds and starts the member's
    /// machine, after relaying it to the member's tree children; later copies, and copies of a
    /// collective that ended here, are dropped. A relayed copy that fails the group's checks
    /// or cannot be built is dropped too (an error names the relay when it fails the checks):
    /// the root's direct copy decides, and refuses with the reason.
    fn on_announce(
        &mut self,
        now: Time,
        from: NodeId,
        msg: SessionMsg,
        body: &Bytes,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let me = self.config.me;
        let mac_refused = self.announce_mac_refused(&msg);
        let SessionMsg::Announce {
            transfer: t,
            root,
            total_len,
            spec,
            rejoin,
            excluded,
            eager,
            mac: _,
        } = msg
        else {
            return Ok(());
        };
        // Copies travel along the tree only in eager sessions of a tree collective: only
        // the first, eager announcement of a tree, from a member's parent in it.
        let relays = self.config.eager && self.config.relay_announce && eager && !rejoin;
        let relayed = root != from;
        let parent = relay_tree(&spec).and_then(|tr| tree_parent(tr, me));
        if relayed && (parent != Some(from) || rejoin || !eager) {
            return Err(inconsistent(
                from,
                "announces a collective rooted at another node",
            ));
        }
        if relayed && !relays {
            // A parent that relays in a group where this member does not: the root's direct
            // copy decides.
            return Ok(());
        }
        let tree = relay_tree(&spec).filter(|_| relays);
        if let Some(s) = self.slots.get(&t) {
            // The other copy of an announcement taken already.
            if tree.is_some() && s.initiator == root && root != me {
                return Ok(());
            }
            if !(rejoin && s.initiator == root && root != me && s.started) {
                return Err(inconsistent(from, "announces a transfer id already in use"));
            }
            // This life took an eager copy before the root knew it had restarted; the root
            // counted the earlier life out and takes this one back. A part that ended here
            // has reported already; one still running gives way to the rejoining machine
            // (its parent may have skipped it, as a failed child, since the Join).
            if s.ended {
                return Ok(());
            }
            self.retire(t);
            self.ended.remove(&t);
        }
        if self.ended.contains(&t) {
            // A late copy of a collective that ended here: it is not started again.
            if tree.is_some() {
                return Ok(());
            }
            return Err(inconsistent(from, "announces a transfer id already in use"));
        }
        if relayed && mac_refused.is_some() {
            // The relay altered it, or forged it: the root's direct copy decides.
            return Err(inconsistent(
                from,
                "relays an announcement that fails the group's check",
            ));
        }
        let built = if self.leaving {
            Err("this node is leaving the group".to_string())
        } else if let Some(why) = mac_refused {
            Err(why)
        } else {
            self.build_member(t, root, total_len, &spec, rejoin)
        };
        match built {
            Ok(b) => {
                self.slots.insert(
                    t,
                    Slot {
                        machine: b.machine,
                        initiator: root,
                        started: false,
                        started_at: None,
                        held: Vec::new(),
                        bytes_delivered: 0,
                        progress: self.progress_step(&spec, total_len),
                        digest: self.new_digest(),
                        digests_share: self.digests_share(&spec),
                        share: None,
                        awaiting_ready: BTreeSet::new(),
                        awaiting_done: BTreeSet::new(),
                        tally: (0, 0),
                        ended: false,
                        announced: None,
                        counted_failed: BTreeSet::new(),
                        counted_finished: BTreeSet::new(),
                        excluded: self
                            .failed_peers()
                            .into_iter()
                            .chain(excluded.iter().copied())
                            .filter(|&p| p != me)
                            .collect(),
                    },
                );
                out.push(Output::Report(Report::CollectiveStarted {
                    transfer: t,
                    initiator: root,
                }));
                if let Some(early) = self.early.remove(&t) {
                    if let Some(slot) = self.slots.get_mut(&t) {
                        slot.held.extend(early);
                    }
                }
                if let Some(tree) = tree {
                    // Down the tree before this node's machine can send its children data:
                    // the root's bytes as they came (its MAC with them), to every child not
                    // known to be gone.
                    let skip = &self.slots[&t].excluded;
                    let children: Vec<NodeId> = tree_children(tree, me)
                        .filter(|c| !skip.contains(c))
                        .collect();
                    for c in children {
                        if let Some(p) = self.peers.get_mut(&c) {
                            p.last_sent = now;
                        }
                        out.send(c, Message::Session(SessionFrame { body: body.clone() }));
                    }
                }
                self.mst_broadcast(now, &spec, out);
                if rejoin || eager {
                    self.go(now, t, out);
                } else {
                    self.send_session(now, root, &SessionMsg::Ready { transfer: t }, out);
                }
            }
            // A relayed copy this node cannot build from: the root's copy will refuse.
            Err(_) if relayed => {}
            Err(reason) => {
                self.ended.insert(t);
                self.early.remove(&t);
                // Why, for this member's application; the initiator hears it too.
                self.failures.push(Failure {
                    transfer: t,
                    member: me,
                    why: reason.clone(),
                });
                out.push(Output::Report(Report::CollectiveRefused { transfer: t }));
                self.send_session(
                    now,
                    root,
                    &SessionMsg::Refuse {
                        transfer: t,
                        reason,
                    },
                    out,
                );
            }
        }
        Ok(())
    }

    /// `announce` with the initiator's MAC of it, when the group's [`AnnounceAuth`] makes one.
    fn with_announce_mac(&self, mut announce: SessionMsg) -> SessionMsg {
        let Some(auth) = self.config.announce_auth.as_ref() else {
            return announce;
        };
        let mac_of = auth.announce_mac(&unsealed_bytes(&announce));
        if let SessionMsg::Announce { mac, .. } = &mut announce {
            *mac = mac_of;
        }
        announce
    }

    /// Why a member must refuse `announce` for its MAC (None: the group's [`AnnounceAuth`]
    /// makes no announcement MACs, or it matches).
    fn announce_mac_refused(&self, announce: &SessionMsg) -> Option<String> {
        let auth = self.config.announce_auth.as_ref()?;
        let SessionMsg::Announce { mac, .. } = announce else {
            return None;
        };
        let want = auth.announce_mac(&unsealed_bytes(announce))?;
        match mac {
            Some(got) if same_bytes(got.as_bytes(), want.as_bytes()) => None,
            Some(_) => Some(
                "the announcement's MAC does not match: it was altered on its way, or made \
                 with another group key; refused"
                    .into(),
            ),
            None => Some(
                "the announcement carries no MAC and this group has a key: refused (the \
                 initiator runs without the group key, or an older build)"
                    .into(),
            ),
        }
    }

    /// A member joined: at its first start nothing to do; when it restarted, its earlier life
    /// is gone, and the collectives this node started that can take a member back are
    /// announced to it again.
    fn on_join(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        let Some(state) = self.peers.get_mut(&peer) else {
            return;
        };
        state.joins += 1;
        if state.joins == 1 {
            // Its first life joining, as every member does at its start. A member counted
            // failed before it ever joined (a stranger that used its name and hung up, a dial
            // that failed before it was up) is alive now: collectives it starts or is part of
            // must not count it out.
            if state.failed && !state.left {
                state.failed = false;
                state.last_heard = now;
                if let Some(prober) = self.prober.as_mut() {
                    prober.revive(peer);
                }
            }
            return;
        }
        let was_failed = self.peers.get(&peer).is_some_and(|p| p.failed);
        if !was_failed && !self.slots.is_empty() {
            // Restarted faster than it was missed: its part in the running collectives went
            // with its earlier life.
            self.collectives_lose(now, peer, out);
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            p.failed = false;
            p.left = false;
            p.last_heard = now;
        }
        if let Some(prober) = self.prober.as_mut() {
            prober.revive(peer);
        }
        let me = self.config.me;
        let rejoinable: Vec<TransferId> = self
            .slots
            .iter()
            // A member whose earlier life finished its part is taken back too: what that life
            // received went with it (or its shelf keeps it, and the new life resumes from
            // there), and a new life left out would wait for a collective that never comes.
            // The root's machine may have ended: whether it still serves a rejoining member is
            // the protocol's business (a tree broadcast's root resends; a swarm's says the
            // run ended).
            .filter(|(_, s)| s.initiator == me && s.started)
            .filter(|(_, s)| {
                s.announced
                    .as_ref()
                    .is_some_and(|(spec, _)| spec.descriptor().rejoins)
            })
            .map(|(t, _)| *t)
            .collect();
        for t in rejoinable {
            let Some(slot) = self.slots.get_mut(&t) else {
                continue;
            };
            if slot.counted_failed.remove(&peer) {
                slot.tally.1 -= 1;
            }
            if slot.counted_finished.remove(&peer) {
                slot.tally.0 -= 1;
            }
            // Its new life takes part: a later failure is a new one.
            slot.excluded.remove(&peer);
            slot.awaiting_done.insert(peer);
            let (spec, total_len) = slot.announced.clone().expect("filtered above");
            let announce = SessionMsg::Announce {
                transfer: t,
                root: me,
                total_len,
                spec,
                rejoin: true,
                excluded: slot.excluded.iter().copied().collect(),
                eager: false,
                mac: None,
            };
            let announce = self.with_announce_mac(announce);
            self.send_session(now, peer, &announce, out);
            out.push(Output::Report(Report::PeerRejoined { peer, transfer: t }));
        }
    }

    /// A member is gone (failed, silent or left): every collective hears it.
    fn peer_lost(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.failed = true;
        }
        self.weather.peer_lost(peer);
        self.metered.retain(|_, (p, _)| *p != peer);
        if let Some(service) = self.mst.as_mut() {
            let mut sends = Vec::new();
            service.peer_failed(now, peer, &mut sends);
            self.mst_send(now, sends, out);
        }
        if let Some(prober) = self.prober.as_mut() {
            self.scratch.clear();
            let _ = prober.handle(now, Input::PeerFailed(peer), &mut self.scratch);
            self.forward_prober(out);
        }
        self.collectives_lose(now, peer, out);
    }

    /// Every running collective hears that `peer` is gone.
    fn collectives_lose(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        // Collectives whose initiator is gone and whose machine here has ended: nobody will
        // close them.
        let orphans: Vec<TransferId> = self
            .slots
            .iter()
            .filter(|(_, s)| s.initiator == peer && s.ended)
            .map(|(t, _)| *t)
            .collect();
        let any = !orphans.is_empty();
        for t in orphans {
            self.retire(t);
        }
        if any {
            self.maybe_leave(now, out);
        }
        let transfers: Vec<TransferId> = self.slots.keys().copied().collect();
        for t in transfers {
            match self.slots.get_mut(&t) {
                // Not yet started: the start gives the machine every excluded member.
                Some(s) if !s.started => {
                    s.excluded.insert(peer);
                }
                Some(s) => {
                    if !s.excluded.insert(peer) {
                        // It heard this one already.
                        continue;
                    }
                    let _ = self.feed_machine(now, t, Input::PeerFailed(peer), out);
                }
                None => continue,
            }
            // The initiator gone, nobody counts this member's part or closes the collective:
            // its part ends here (failed, unless its machine ended on its own) and the
            // collective is retired, instead of waiting for a close that cannot come.
            if let Some(ended) = self
                .slots
                .get(&t)
                .filter(|s| s.initiator == peer)
                .map(|s| s.ended)
            {
                if !ended {
                    let why = lost_initiator(peer);
                    self.machine_ended(now, t, Some(why), out);
                }
                self.retire(t);
                self.maybe_leave(now, out);
                continue;
            }
            // At an initiator, a lost member neither readies nor reports.
            let me = self.config.me;
            let Some(slot) = self.slots.get_mut(&t) else {
                continue;
            };
            if slot.initiator == me {
                slot.awaiting_ready.remove(&peer);
                let was_awaited = slot.awaiting_done.contains(&peer);
                if was_awaited {
                    self.tally(now, t, peer, &MemberReport::lost(), out);
                }
                self.maybe_go(now, t, out);
            }
        }
    }

    fn forward_prober(&mut self, out: &mut Outputs) {
        let mut forecast = false;
        for o in self.scratch.drain() {
            match o {
                Output::Report(Report::RoundTrip { peer, rtt }) => {
                    out.push(o);
                    if let Some(fc) = self.weather.observe_rtt(self.now, peer, rtt) {
                        forecast = true;
                        out.push(Output::Report(Report::LinkForecast {
                            peer,
                            rtt: Duration::from_secs_f64(fc.value.max(0.0) / 1e3),
                            error: Duration::from_secs_f64(fc.error.max(0.0) / 1e3),
                        }));
                    }
                }
                Output::SetTimer { at, .. } => out.push(Output::SetTimer { timer: PROBE, at }),
                Output::CancelTimer(_) => out.push(Output::CancelTimer(PROBE)),
                // The prober's own end is not the host's.
                Output::Finished | Output::Aborted(_) => {}
                other => out.push(other),
            }
        }
        if forecast {
            self.mst_forecast(out);
        }
    }

    /// A new forecast: the live MST may start, or check its links.
    fn mst_forecast(&mut self, out: &mut Outputs) {
        if self.mst.is_none() {
            return; // no view computed per probe for nothing
        }
        let now = self.now;
        let links = self.weather.links(now);
        let guesses = self.group_view().guesses(self.config.weather.guesses);
        let Some(service) = self.mst.as_mut() else {
            return;
        };
        let mut sends = Vec::new();
        service.maybe_start(now, &links, &guesses, &mut sends);
        service.forecast(now, &links, &mut sends);
        self.mst_send(now, sends, out);
    }

    /// A broadcast starts here or was announced: the live MST counts it.
    fn mst_broadcast(&mut self, now: Time, spec: &CollectiveSpec, out: &mut Outputs) {
        if self.mst.is_none() || !matches!(spec, CollectiveSpec::Broadcast { .. }) {
            return;
        }
        let links = self.weather.links(now);
        let Some(service) = self.mst.as_mut() else {
            return;
        };
        let mut sends = Vec::new();
        service.broadcast(now, &links, &mut sends);
        self.mst_send(now, sends, out);
    }

    fn mst_send(&mut self, now: Time, sends: Vec<(NodeId, Message)>, out: &mut Outputs) {
        for (to, message) in sends {
            if let Some(p) = self.peers.get_mut(&to) {
                p.last_sent = now;
            }
            out.send(to, message);
        }
    }

    /// The live MST's state here (None: no service configured).
    pub fn mst_live(&self) -> Option<MstLiveState> {
        self.mst.as_ref().map(MstService::state)
    }

    /// Every measured link's weather, by peer.
    pub fn weather(&self) -> Vec<LinkWeather> {
        self.weather.links(self.now)
    }

    /// The group's links as this node knows them: its own measurements and the rows the
    /// other members shared.
    pub fn group_view(&self) -> GroupView {
        self.weather.view(self.now, &self.config.members)
    }

    /// The costs the `adapt` tree of this node's broadcasts has taken in (None before the
    /// first such broadcast, or under another policy).
    pub fn adapted_costs(&self) -> Option<&windrose_model::DenseCostMatrix> {
        self.planner.taken_costs(self.config.me)
    }

    /// The tree of the next broadcast rooted here of `bytes` in segments of `segment_bytes`
    /// under `policy`, planned from the group's view.
    fn plan_tree(
        &mut self,
        policy: TreePolicy,
        bytes: u64,
        segment_bytes: u64,
    ) -> Result<crate::planner::Plan, String> {
        let links = self.group_view().links(self.config.weather.guesses);
        let (costs, bound) = (
            links.transfer_costs(bytes, segment_bytes),
            links.bound(bytes),
        );
        // Live broadcasts swap sharing-aware (crate::planner::PlanRequest::bytes_ms); the
        // message times (N x N) are built only for the policy that swaps.
        let bytes_ms = matches!(policy, TreePolicy::Adapt { .. }).then(|| links.bytes_ms(bytes));
        let mut clusters = vec![ClusterId(0); costs.node_count()];
        for &(m, c) in self.config.members.iter() {
            clusters[m.index()] = c;
        }
        let failed = self.failed_peers();
        let me = self.config.me;
        let live = match (policy, &self.mst) {
            (TreePolicy::MstLive, Some(service)) => service.tree(me, costs.node_count(), &costs),
            _ => None,
        };
        match live {
            Some(Ok((tree, at))) => Ok(self.planner.plan_live(me, tree, at, &costs)),
            Some(Err(e)) => Err(e.to_string()),
            None => self
                .planner
                .plan_request(&crate::planner::PlanRequest {
                    root: me,
                    policy,
                    costs: &costs,
                    bytes_ms: bytes_ms.as_ref(),
                    clusters: &clusters,
                    failed: &failed,
                    bound,
                })
                .map_err(|e| e.to_string()),
        }
    }

    /// Plans the tree of a broadcast rooted here from the group's view, and starts it.
    fn start_broadcast(&mut self, now: Time, b: &BroadcastRequest, data: Bytes, out: &mut Outputs) {
        let plan = match self.plan_tree(b.policy, data.len() as u64, b.segment_bytes) {
            Ok(p) => p,
            Err(_) => {
                refused(self.draw_transfer(b.transfer), out);
                return;
            }
        };
        let t = self.draw_transfer(b.transfer);
        self.start_planned_broadcast(now, plan, b, data, t, out);
    }

    /// Starts a broadcast over a planned tree, reporting the plan.
    fn start_planned_broadcast(
        &mut self,
        now: Time,
        plan: crate::planner::Plan,
        b: &BroadcastRequest,
        data: Bytes,
        t: TransferId,
        out: &mut Outputs,
    ) {
        let spec = CollectiveSpec::Broadcast {
            tree: TreeSpec::of(&plan.tree),
            segment_bytes: b.segment_bytes,
            max_frame_payload: b.max_frame_payload,
        };
        out.push(Output::Report(Report::TreePlanned {
            transfer: t,
            cost: Duration::from_secs_f64(plan.cost.max(0.0) / 1e3),
            built: plan.built,
            changed_links: plan.changed_links as u32,
            swaps: plan.swaps as u32,
            live_mst: plan.mst,
        }));
        self.start_collective(now, &spec, data, Some(t), out);
    }

    fn tick(&mut self, now: Time, out: &mut Outputs) {
        let Some(period) = self.config.heartbeat else {
            return;
        };
        let silent = self.config.silent_after;
        // A late tick means this node itself was not running (a loaded machine, a stopped
        // process): frames that came meanwhile may still be queued behind this timer, so the
        // delay does not count as the peers' silence. (A simulator's timers are never late.)
        let late = now.saturating_since(self.tick_due);
        if !late.is_zero() {
            for p in self.peers.values_mut() {
                p.last_heard = (p.last_heard + late).min(now);
            }
        }
        // The live MST's late start (`build_after`) needs a clock.
        self.mst_forecast(out);
        if let Some(row) = self.weather.gossip_due(now) {
            let msg = SessionMsg::Weather {
                links: row.links,
                compute_mb_s: row.compute_mb_s,
            };
            for p in self.live_view() {
                self.send_session(now, p, &msg, out);
            }
        }
        // Above the mesh limit only the members this host is engaged with (module docs).
        let (beat, watch) = if self.sparse {
            self.engaged()
        } else {
            Default::default()
        };
        let peers: Vec<(NodeId, PeerState)> = self.peers.iter().map(|(n, s)| (*n, *s)).collect();
        for (p, s) in peers {
            if s.failed || s.left {
                continue;
            }
            // Twice `silent_after`: a member that went quiet after a frame to it is watched
            // long enough to be found silent.
            let talked = s
                .last_traffic
                .is_some_and(|t| now.saturating_since(t) < silent * 2);
            let watched = !self.sparse || talked || watch.contains(&p);
            let beats = watched || beat.contains(&p);
            if let Some(state) = self.peers.get_mut(&p) {
                if watched && !state.watched {
                    // Newly watched: a whole `silent_after` from now.
                    state.last_heard = state.last_heard.max(now);
                }
                state.watched = watched;
            }
            if watched && s.watched && now.saturating_since(s.last_heard) >= silent {
                out.push(Output::Report(Report::PeerDown { peer: p }));
                self.peer_lost(now, p, out);
            } else if beats && now.saturating_since(s.last_sent) >= period {
                self.send_session(now, p, &SessionMsg::Heartbeat, out);
            }
        }
        self.tick_due = now + period;
        out.push(Output::SetTimer {
            timer: TICK,
            at: self.tick_due,
        });
    }
}

impl Protocol for Host {
    fn node(&self) -> NodeId {
        self.config.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        let before = out.len();
        let r = self.dispatch(now, input, out);
        self.note_sent(self.now, out, before);
        r
    }

    fn status(&self) -> Status {
        self.status
    }
}

impl Host {
    /// [`Protocol::handle`] but for noting the traffic it sends.
    fn dispatch(
        &mut self,
        now: Time,
        input: Input,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        if self.status != Status::Running {
            return Ok(());
        }
        self.now = self.now.max(now);
        match input {
            Input::Start => {
                if self.started {
                    return Ok(());
                }
                self.started = true;
                for p in self.peers.values_mut() {
                    p.last_heard = now;
                    p.last_sent = now;
                    p.watched = !self.sparse;
                }
                if let Some(h) = self.config.heartbeat {
                    self.tick_due = now + h;
                    out.push(Output::SetTimer {
                        timer: TICK,
                        at: self.tick_due,
                    });
                }
                if let Some(prober) = self.prober.as_mut() {
                    self.scratch.clear();
                    prober.handle(now, Input::Start, &mut self.scratch)?;
                    self.forward_prober(out);
                }
                // Tell every member of its view this node is (back) in the group.
                for p in self.live_view() {
                    self.send_session(now, p, &SessionMsg::Join, out);
                }
                Ok(())
            }
            Input::Message { from, message } => {
                let Some(peer) = self.peers.get_mut(&from) else {
                    return Err(inconsistent(from, "is not a member of this group"));
                };
                peer.last_heard = now;
                if !is_heartbeat(&message) {
                    peer.last_traffic = Some(now);
                }
                match message {
                    Message::Session(frame) => {
                        let msg = SessionMsg::from_frame(&frame)
                            .map_err(|_| inconsistent(from, "is not a session message"))?;
                        self.on_session(now, from, msg, &frame.body, out)
                    }
                    Message::Probe(_) => {
                        if let Some(prober) = self.prober.as_mut() {
                            self.scratch.clear();
                            prober.handle(
                                now,
                                Input::Message { from, message },
                                &mut self.scratch,
                            )?;
                            self.forward_prober(out);
                        } else if let Message::Probe(ProbeMsg::Ping(p)) = message {
                            out.send(from, Message::Probe(ProbeMsg::Pong(p)));
                        }
                        Ok(())
                    }
                    Message::Mst(frame) => {
                        let Some(service) = self.mst.as_mut() else {
                            return Ok(()); // no service here: the sender's tree goes without
                        };
                        let mut sends = Vec::new();
                        let r = service.handle(now, from, *frame, &mut sends);
                        self.mst_send(now, sends, out);
                        r.map_err(|_| inconsistent(from, "sent an MST frame the live tree refuses"))
                    }
                    message => {
                        let t = message.transfer().expect("every other kind has a transfer");
                        let Some(slot) = self.slots.get_mut(&t) else {
                            if self.config.eager && !self.ended.contains(&t) {
                                // Its announcement is still on the way.
                                self.early
                                    .entry(t)
                                    .or_default()
                                    .push(Input::Message { from, message });
                            }
                            // Else a collective that ended here (late frames), or one this
                            // node refused or never heard of.
                            return Ok(());
                        };
                        if slot.started && slot.excluded.contains(&from) {
                            // A restarted member taken back into this collective: a later
                            // failure of it is a new one.
                            slot.excluded.remove(&from);
                        }
                        self.feed_machine(now, t, Input::Message { from, message }, out)
                    }
                }
            }
            Input::Timer(TICK) => {
                self.tick(now, out);
                Ok(())
            }
            Input::Timer(PROBE) => {
                if let Some(prober) = self.prober.as_mut() {
                    self.scratch.clear();
                    prober.handle(
                        now,
                        Input::Timer(crate::probe::PROBE_TIMER),
                        &mut self.scratch,
                    )?;
                    self.forward_prober(out);
                }
                Ok(())
            }
            Input::Timer(id) => {
                let Some(&(t, timer)) = self.timers.to_machine.get(&id) else {
                    return Ok(()); // a stale timer of a retired collective
                };
                self.feed_machine(now, t, Input::Timer(timer), out)
            }
            Input::SendComplete { to, id } => {
                if let Some((peer, len)) = self.metered.remove(&id) {
                    if let Some(fc) = self.weather.completed(now, peer, len) {
                        out.push(Output::Report(Report::LinkBandwidth {
                            peer,
                            bytes_per_s: bytes_per_s(fc.value),
                            error_bytes_per_s: bytes_per_s(fc.error),
                        }));
                        self.mst_forecast(out);
                    }
                }
                let Some(&(t, inner)) = self.sends.to_machine.get(&id) else {
                    return Ok(());
                };
                self.feed_machine(now, t, Input::SendComplete { to, id: inner }, out)?;
                self.steer_machine(now, t, out);
                Ok(())
            }
            Input::Command(Command::ComputeDone { task }) => {
                let Some(&(t, inner)) = self.tasks.to_machine.get(&task) else {
                    return Err(ProtocolError::UnknownTask { task });
                };
                self.compute_timed(now, task, out);
                if let Some(s) = self.slots.get_mut(&t) {
                    if let (Some(share), Some(at)) = (s.share.as_mut(), s.started_at) {
                        share.computed = Some(now.saturating_since(at));
                    }
                }
                self.feed_machine(
                    now,
                    t,
                    Input::Command(Command::ComputeDone { task: inner }),
                    out,
                )
            }
            Input::PeerFailed(peer) => {
                if self.peers.get(&peer).is_some_and(|p| !p.failed) {
                    self.peer_lost(now, peer, out);
                }
                Ok(())
            }
            Input::App(app) => {
                match &*app.0 {
                    AppRequest::StartCollective {
                        spec,
                        data,
                        transfer,
                    } => {
                        let measured = self.with_measured_speeds(spec);
                        let spec = measured.as_ref().unwrap_or(spec);
                        self.start_collective(now, spec, data.clone(), *transfer, out);
                    }
                    AppRequest::StartBroadcast(b) => {
                        let data = b.data.clone();
                        self.start_broadcast(now, b, data, out);
                    }
                    AppRequest::StartAuto(a) => self.start_auto(now, a, out),
                    AppRequest::MstWeight { peer, weight } => {
                        if let Some(service) = self.mst.as_mut() {
                            if service.set_weight(*peer, *weight).is_err() {
                                return Err(ProtocolError::Inconsistent {
                                    from: self.config.me,
                                    kind: crate::ghs_repair::MstFrame::kind_of(1),
                                    what: "the application's live MST weight is not of a member's link, or not a number >= 0",
                                });
                            }
                        }
                    }
                    AppRequest::Leave => {
                        self.leaving = true;
                        self.maybe_leave(now, out);
                    }
                    AppRequest::Abort { transfer, reason } => {
                        self.abort_collective(now, *transfer, reason, out);
                    }
                    AppRequest::StartScatter(r) => self.start_scatter(now, r, out),
                }
                Ok(())
            }
        }
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("me", &self.config.me)
            .field("running", &self.slots.keys().collect::<Vec<_>>())
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// What the commands' members (`windrose node`, `local`, `bcast`, `multicast`) need of the
// session: pieces kept across a restart, a collective called off by its initiator, and why
// members did not finish.

/// Where a member keeps the verified pieces of a multicast it receives (a file, so a member
/// killed mid-run and started again resumes from what its earlier life verified) and finds
/// those pieces again. The Host asks once per collective, when it builds the member's machine.
pub trait PieceShelf: Send + Sync {
    /// The keeper of `transfer`'s pieces (None: in memory) and, when `rejoin` (this member
    /// restarted and is taken back), the verified pieces an earlier life kept. An error refuses
    /// the collective with it.
    fn shelf(
        &self,
        transfer: TransferId,
        spec: &CollectiveSpec,
        total_len: u64,
        rejoin: bool,
    ) -> Result<Shelved, String>;

    /// When this life was taken back into `transfer` (`rejoin`): the bytes it resumed from
    /// what an earlier life kept, for its report to the initiator; None otherwise.
    fn resumed_bytes(&self, _transfer: TransferId) -> Option<u64> {
        None
    }
}

/// Authenticates what an initiator announces, for a driver that holds a secret of the group
/// (a keyed group's manifest key): the Host seals every collective it starts before it builds
/// its own machine and announces it, and checks every announcement before it builds a
/// member's machine; a member refuses a collective that fails the check, with the reason, and
/// the initiator counts it failed. The Host itself holds no secret.
pub trait AnnounceAuth: Send + Sync {
    /// Adds the initiator's proof to `spec` of `total_len` bytes; a spec that already carries
    /// one keeps it (the members then check what the application gave).
    fn seal(&self, spec: &mut CollectiveSpec, total_len: u64);
    /// Why a member must refuse `spec`, or None.
    fn check(&self, spec: &CollectiveSpec, total_len: u64) -> Option<String>;
    /// The proof of a whole announcement (`announcement`: its transfer, root, length, spec
    /// and excluded members as the Host encodes them), for a key that can make one: the
    /// initiator's Host puts it in every announcement, a relayed copy carries it unchanged,
    /// and every member's Host refuses an announcement whose MAC is missing or differs. None
    /// (the default): only what [`seal`](Self::seal) puts in the spec is proved.
    fn announce_mac(&self, _announcement: &[u8]) -> Option<String> {
        None
    }
}

/// What a [`PieceShelf`] holds for one collective (the default: nothing, the machine keeps
/// its pieces in memory).
#[derive(Default)]
pub struct Shelved {
    /// Takes every verified piece (None: the machine holds them in memory).
    pub keeper: Option<Arc<dyn crate::pieces::PieceKeeper>>,
    /// Pieces already verified, by index.
    pub held: Vec<(u32, Bytes)>,
}

/// A member's part of a collective that did not finish, and why (in words: [`Report`]s are
/// `Copy` and carry none). At an initiator: every member's reason as it reported it; at any
/// member: its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The collective.
    pub transfer: TransferId,
    /// The member.
    pub member: NodeId,
    /// Why.
    pub why: String,
}

impl Host {
    /// The failures noted since the last call, in order. A driver takes them after each step
    /// (next to the step's [`Report::MemberDone`] or [`Report::CollectiveEnded`]).
    pub fn take_failures(&mut self) -> Vec<Failure> {
        std::mem::take(&mut self.failures)
    }

    /// The members' steps heard since the last call (at the initiator, with each member's
    /// [`Report::MemberDone`]), in order: a driver takes them after each step.
    pub fn take_phases(&mut self) -> Vec<MemberPhases> {
        std::mem::take(&mut self.phases)
    }

    /// A member's machine for an announced collective: a multicast's pieces on the
    /// configured shelf, a restarted member resuming from those its earlier life kept.
    fn build_member(
        &self,
        t: TransferId,
        root: NodeId,
        total_len: u64,
        spec: &CollectiveSpec,
        rejoin: bool,
    ) -> Result<collective::Built, String> {
        if let Some(why) = self
            .config
            .announce_auth
            .as_ref()
            .and_then(|a| a.check(spec, total_len))
        {
            return Err(why);
        }
        let mut ctx = self.context(t, root, total_len, spec);
        let mut held = Vec::new();
        if let Some(shelf) = self.config.shelf.as_ref() {
            // Asked for every collective: a shelf over an output file prepares it (and knows
            // a rejoin) for in-order deliveries too; only piece-verifying ones get a keeper.
            let s = shelf.shelf(t, spec, total_len, rejoin)?;
            if spec.descriptor().verifies_pieces {
                ctx.keeper = s.keeper;
                held = s.held;
            }
        }
        let start = if rejoin {
            Start::Rejoin(held)
        } else {
            Start::Fresh
        };
        collective::build(spec, &ctx, start)
    }

    /// At the initiator ([`AppRequest::Abort`]): before Go the collective is cancelled as for a
    /// refusal; after it every member still awaited is told and counted failed with `reason`,
    /// this node's part ends aborted, and the collective completes.
    fn abort_collective(&mut self, now: Time, t: TransferId, reason: &str, out: &mut Outputs) {
        let me = self.config.me;
        let Some(slot) = self.slots.get(&t) else {
            return; // ended already
        };
        if slot.initiator != me {
            return; // only the initiator calls a collective off
        }
        let members: Vec<NodeId> = slot.awaiting_done.iter().copied().collect();
        if !slot.started {
            self.cancel(now, t, members, reason.to_string(), out);
            return;
        }
        let abort = SessionMsg::Abort {
            transfer: t,
            reason: reason.to_string(),
        };
        let failed = MemberReport {
            error: Some(reason.to_string()),
            ..MemberReport::lost()
        };
        for p in members {
            self.send_session(now, p, &abort, out);
            self.tally(now, t, p, &failed, out);
        }
        // Completes the collective (with this node's part; at once if it had ended).
        self.machine_ended(now, t, Some(reason.to_string()), out);
    }

    /// At the initiator, before Go: `t` is cancelled at `members` and ends here refused.
    fn cancel(
        &mut self,
        now: Time,
        t: TransferId,
        members: Vec<NodeId>,
        reason: String,
        out: &mut Outputs,
    ) {
        let cancel = SessionMsg::Cancel {
            transfer: t,
            reason,
        };
        for p in members {
            self.send_session(now, p, &cancel, out);
        }
        refused(t, out);
        self.retire(t);
        self.maybe_leave(now, out);
    }

    /// At a member: the initiator called `t` off; its part ends aborted, and the collective is
    /// forgotten (the initiator counted it already).
    fn on_abort(
        &mut self,
        now: Time,
        from: NodeId,
        t: TransferId,
        reason: String,
        out: &mut Outputs,
    ) {
        match self.slots.get(&t) {
            Some(s) if s.initiator == from && s.initiator != self.config.me => {}
            _ => return,
        }
        self.machine_ended(
            now,
            t,
            Some(format!("node {from} called the collective off: {reason}")),
            out,
        );
        self.retire(t);
        self.maybe_leave(now, out);
    }
}

// The calibrated scatter and the compute speed (crate::scatter_plan, crate::weather): kept in a
// block of their own.

/// MB/s as the bytes per second of a report.
fn bytes_per_s(mb_s: f64) -> u64 {
    (mb_s.max(0.0) * 1e6) as u64
}

/// A member's compute speed forecast (MB/s) and its error, as a report.
fn compute_report(node: NodeId, mb_s: f64, error_mb_s: f64) -> Report {
    Report::ComputeSpeed {
        node,
        bytes_per_s: bytes_per_s(mb_s),
        error_bytes_per_s: bytes_per_s(error_mb_s),
    }
}

// ---- The automatic choice of protocol (issue 16, point 4) ----

/// A collective whose protocol the host chooses: [`AppRequest::StartAuto`].
#[derive(Clone, Debug)]
pub struct AutoRequest {
    /// The data.
    pub data: Bytes,
    /// How a broadcast's tree is planned, should the broadcast be chosen.
    pub policy: TreePolicy,
    /// A broadcast's segment, bytes.
    pub segment_bytes: u64,
    /// A multicast's piece, bytes.
    pub piece_bytes: u32,
    /// The models' constants.
    pub model: crate::choice::ChoiceModel,
    /// The transfer id to use (None: the host draws one).
    pub transfer: Option<TransferId>,
}

impl AutoRequest {
    /// `data` with the defaults: `adapt` trees, 256 KiB segments and pieces (the sizes the
    /// models were checked with in the simulator).
    pub fn new(data: Bytes) -> AutoRequest {
        AutoRequest {
            data,
            policy: TreePolicy::default(),
            segment_bytes: 256 << 10,
            piece_bytes: 256 << 10,
            model: crate::choice::ChoiceModel::default(),
            transfer: None,
        }
    }
}

impl Host {
    /// Bytes from `peer` arrived at `now` that are not a whole frame yet: it is alive. A frame
    /// of a bulk transfer over a slow, shared link can take longer than `silent_after` to
    /// arrive whole, and its sender's heartbeats wait behind it on the same connection, so
    /// without this a member sending data was given up for silence (issue 19: a 1 GiB sort
    /// over 3 MB/s links shared by 16 connections, 1 MiB frames); and a loaded driver may have
    /// read a member's frames before the timer that checks its silence, yet hand them to the
    /// host after it. For drivers that see bytes before the host sees frames (TCP); a member
    /// counted failed is not taken back by this (only its frames do that).
    pub fn heard_from(&mut self, now: Time, peer: NodeId) {
        self.now = self.now.max(now);
        if let Some(p) = self.peers.get_mut(&peer) {
            p.last_heard = p.last_heard.max(now);
        }
    }

    /// The transport to `peer` holds up to `bytes` between a completed send and the link: the
    /// bandwidth meter discards that many at the start of every busy period
    /// ([`crate::weather`]). For drivers whose send completions are not arrivals (TCP).
    pub fn set_link_buffer(&mut self, peer: NodeId, bytes: u64) {
        self.weather.set_buffered(peer, bytes);
    }

    /// The driver timed the application's compute of `bytes` itself (a calibration at
    /// join, before any collective): a sample of this node's compute speed, and its report
    /// when it made a forecast.
    pub fn calibrated_compute(&mut self, bytes: u64, elapsed: Duration) -> Option<Report> {
        let fc = self.weather.observe_compute(self.now, bytes, elapsed)?;
        Some(compute_report(self.config.me, fc.value, fc.error))
    }

    /// A HeteroSort that weighs its members (speed slices or splitters) but was given no
    /// speeds takes the compute speeds the group's view holds (issue 19): each member times
    /// its own computes ([`crate::weather`]) and shares the forecast with its row, so the
    /// initiator knows every member's speed without `--speeds`. The speeds travel in the spec,
    /// so every member weighs with the same numbers. A member nobody measured takes the median
    /// of the measured ones; with none measured the spec is left as it is (equal weights).
    /// None: nothing to fill in.
    fn with_measured_speeds(&self, spec: &CollectiveSpec) -> Option<CollectiveSpec> {
        let CollectiveSpec::HeteroSort(hs) = spec else {
            return None;
        };
        if hs.slicing == crate::heterosort::Slicing::Equal || !hs.speeds.is_empty() {
            return None;
        }
        let view = self.group_view();
        // HsortSpec::speeds are in member id order.
        let mut ids: Vec<NodeId> = self.config.members.iter().map(|&(n, _)| n).collect();
        ids.sort_unstable();
        let measured: Vec<Option<f64>> = ids
            .iter()
            .map(|&n| view.compute_mb_s(n).filter(|v| v.is_finite() && *v > 0.0))
            .collect();
        let mut known: Vec<f64> = measured.iter().flatten().copied().collect();
        if known.is_empty() {
            return None;
        }
        known.sort_by(f64::total_cmp);
        let median = known[known.len() / 2];
        let mut hs = hs.clone();
        hs.speeds = measured.iter().map(|m| m.unwrap_or(median)).collect();
        Some(CollectiveSpec::HeteroSort(hs))
    }

    /// A compute handed out here is done: its bytes over its time (from its issue, or from
    /// the end of the previous compute if that was later: the simulator runs a node's
    /// computes one after the other) make a sample of this node's compute speed.
    fn compute_timed(&mut self, now: Time, task: TaskId, out: &mut Outputs) {
        let Some((issued, bytes)) = self.computing.remove(&task) else {
            return;
        };
        let began = issued.max(self.last_compute_done).min(now);
        self.last_compute_done = self.last_compute_done.max(now);
        if let Some(fc) = self
            .weather
            .observe_compute(now, bytes, now.saturating_since(began))
        {
            out.push(Output::Report(compute_report(
                self.config.me,
                fc.value,
                fc.error,
            )));
        }
    }

    /// Plans a scatter rooted here from the group's view, reports the speeds it took, and
    /// starts it; a plan that cannot be made refuses the collective.
    fn start_scatter(&mut self, now: Time, r: &ScatterRequest, out: &mut Outputs) {
        let view = self.group_view();
        let planned = crate::scatter_plan::plan(
            &view,
            self.config.weather.guesses,
            &r.tree,
            r.data.len() as u64,
            r.order,
            r.given,
        );
        let t = self.draw_transfer(r.transfer);
        let plan = match planned {
            Ok(p) if r.tree.root() == self.config.me => p,
            _ => {
                refused(t, out);
                return;
            }
        };
        let (computes, links) = plan.measured();
        out.push(Output::Report(Report::ScatterPlanned {
            transfer: t,
            predicted_finish: Duration::from_secs_f64(plan.schedule.predicted_finish_s.max(0.0)),
            nodes: plan.speeds.len() as u32,
            measured_computes: computes as u32,
            measured_links: links as u32,
        }));
        for (s, share) in plan.speeds.iter().zip(&plan.schedule.nodes) {
            out.push(Output::Report(Report::ScatterNodePlanned {
                transfer: t,
                node: s.node,
                compute_bytes_per_s: bytes_per_s(s.compute_mb_s),
                compute: s.compute,
                link: s.link_mb_s.map(|(v, b)| (bytes_per_s(v), b)),
                kept_ppm: (share.fraction_kept.clamp(0.0, 1.0) * 1e6).round() as u32,
            }));
        }
        let spec = CollectiveSpec::Scatter {
            schedule: plan.schedule,
            max_frame_payload: r.max_frame_payload,
            parallel: r.parallel,
        };
        self.start_collective(now, &spec, r.data.clone(), Some(t), out);
    }

    /// Chooses the protocol for `a` from the group's view and starts it (refused when
    /// nothing can be planned).
    fn start_auto(&mut self, now: Time, a: &AutoRequest, out: &mut Outputs) {
        use crate::choice::{choose, Candidate, ChoiceInput};
        use crate::collective::MulticastParams;
        use crate::multicast::{MulticastProtocol, MulticastSpec};
        let bytes = a.data.len() as u64;
        let segment_bytes = a.segment_bytes.max(1);
        // The broadcast's prediction is planned as if it started, but only a broadcast that
        // does start may advance the planner (an `adapt` tree, the changes it took in): the
        // planner is put back as it was, and the advanced one kept for the broadcast.
        let kept = self.planner.clone();
        let plan = self.plan_tree(a.policy, bytes, segment_bytes);
        let advanced = std::mem::replace(&mut self.planner, kept);
        let plan = match plan {
            Ok(p) => p,
            Err(_) => {
                refused(self.draw_transfer(a.transfer), out);
                return;
            }
        };
        let links = self.group_view().links(self.config.weather.guesses);
        // The view's MST as the broadcast's other tree, while every member is up (the MST
        // spans them all; the planner's tree leaves failed ones to the re-attachment).
        let mst = if self.failed_peers().is_empty() {
            crate::choice::view_mst(&links, self.config.me, bytes, segment_bytes)
        } else {
            None
        };
        let choice = choose(&ChoiceInput {
            bytes,
            root: self.config.me,
            links: &links,
            tree: &plan.tree,
            alternative: mst.as_ref(),
            segment_bytes,
            piece_bytes: a.piece_bytes.max(1),
            model: a.model,
        });
        let Ok(choice) = choice else {
            refused(self.draw_transfer(a.transfer), out);
            return;
        };
        let t = self.draw_transfer(a.transfer);
        out.push(Output::Report(Report::ProtocolChosen {
            transfer: t,
            bytes,
            chosen: choice.chosen,
            predicted: choice.predicted(),
        }));
        let multicast = |protocol: MulticastProtocol, spec: MulticastSpec| {
            CollectiveSpec::multicast(
                protocol,
                MulticastParams::of(&spec),
                &a.data,
                a.piece_bytes.max(1),
            )
            .map_err(|e| e.to_string())
        };
        let spec = match choice.chosen {
            Candidate::Broadcast => {
                let b = BroadcastRequest {
                    policy: a.policy,
                    segment_bytes,
                    max_frame_payload: segment_bytes.clamp(1, 1 << 20) as u32,
                    data: a.data.clone(),
                    transfer: Some(t),
                };
                let plan = match (choice.planned_tree_s, mst) {
                    // Over the MST: the planner stays as it was (nothing it planned ran).
                    (Some(_), Some(tree)) => crate::planner::Plan {
                        cost: choice
                            .prediction(Candidate::Broadcast)
                            .map_or(0.0, |p| p.completion_s * 1e3),
                        tree,
                        built: true,
                        changed_links: 0,
                        swaps: 0,
                        mst: None,
                    },
                    _ => {
                        self.planner = advanced;
                        plan
                    }
                };
                self.start_planned_broadcast(now, plan, &b, a.data.clone(), t, out);
                return;
            }
            Candidate::Mob => multicast(
                MulticastProtocol::Mob,
                MulticastSpec::Mob(crate::mob::MobConfig::default()),
            ),
            Candidate::Balanced => match choice.balanced {
                Some(p) => multicast(
                    MulticastProtocol::Balanced,
                    MulticastSpec::Trees {
                        plan: Arc::new(p),
                        config: crate::tree_multicast::TreeMulticastConfig::with_shape(true),
                    },
                ),
                None => Err("no balanced plan".to_string()),
            },
        };
        match spec {
            Ok(spec) => self.start_collective(now, &spec, a.data.clone(), Some(t), out),
            Err(_) => refused(t, out),
        }
    }
}
