//! The third driver of windrose-proto's [`Host`]: point-to-point messages of the MPI library
//! (through a [`Transport`]) instead of the simulator's network or TCP.
//!
//! One windrose frame travels as its head (header and fixed fields) in one MPI message and,
//! when it has a payload, the payload in a second one on its own tag, sent straight from the
//! payload's buffer: a segment is never copied into a frame buffer, at the root nor at a
//! relay (one copy less per child and segment than encoding whole frames). The receiver reads
//! the head and posts the payload's receive from the same sender at once (into the caller's
//! buffer, or after the head in a buffer of its own), then decodes the frame with
//! windrose-proto's codec once the payload is in. It takes payloads from several peers at once
//! (up to [`PAYLOADS_PER_PEER`] posted per peer): with one blocking receive at a time, the
//! flows from every other peer waited on it (under MPI a large message's bytes move only once
//! its receive is posted), and MOB's flows between the sites ran far below their links (issue
//! 18). A peer's frames still reach the Host in the order it sent them (a frame waits behind
//! an earlier one of the same peer's whose payload is on its way), as over one stream. The
//! driver only moves bytes: frames from [`Output::Send`] go out with `isend`, timers come from
//! a monotonic clock kept here. The session (who starts a collective, readiness, reports) is
//! the Host's.
//!
//! Every rank counts the windrose broadcasts of its communicator; the n-th one is transfer n
//! at every rank, so no rank needs to be told which transfer a call is. A rank may hear of the
//! next broadcast (its announcement, even its data) while still in the current one: what it
//! delivers is kept by transfer until the call for that transfer takes it.
//!
//! A call returns once this rank's part is done and every segment of it that this rank sent
//! has completed. A rank's tree machine is done as soon as it has handed its segments out
//! (the root at once), but its Host meters its links from those sends' completions, and the
//! driver runs only inside MPI calls: a rank that returned earlier would see them complete
//! all together at its next call, and the links out of the root, which nobody else sends on,
//! would never be measured (`Driver::may_return`).
//!
//! Every rank calls `MPI_Bcast` with the same root, so every member expects each broadcast:
//! the Host runs eager sessions ([`HostConfig::eager`]). The root announces and sends its
//! first segments at once, a member starts when the announcement reaches it (holding data
//! that came first), and no Ready/Go round trip stands before the data. The announcement
//! carries the root's tree, so the ranks cannot disagree on it.
//!
//! The announcement also travels down that tree ([`HostConfig::relay_announce`]): a rank
//! relays the copy it took first to its tree children before it sends them data, so a rank
//! starts on its parent's copy, just ahead of its parent's data, when that comes sooner than
//! the root's direct copy (where the latencies break the triangle inequality, the tree's
//! path to a rank can be faster than the root's direct one). A replacement `MPI_Bcast` thus
//! starts its ranks on the data, as the paper's AGM broadcast does. The cost: one small session message per tree edge
//! below the root's children, per broadcast; the root's direct copies still go out, and each
//! rank drops the copy that comes second.
//!
//! # MOB and the automatic choice (`WINDROSE_MPI_PROTOCOL`, issue 18)
//!
//! A tree is as fast as its slowest link: from one site it cannot use the site's WAN paths
//! at once for different data. `WINDROSE_MPI_PROTOCOL=mob` runs every broadcast on windrose's
//! path of at least [`MOB_MIN_BYTES`] as MOB between the sites ([`windrose_proto::mob`]; the
//! sites are the Host's clusters, `hosts[r]`, so `WINDROSE_MPI_TOPOLOGY=hosts` gives it the
//! measured sites and the flat topology makes every rank a cluster of its own);
//! `auto` lets the root's Host choose the tree broadcast, MOB or Balanced Multicasting from the
//! size and its view ([`windrose_proto::choice`]); `tree`, the default, keeps the tree
//! broadcast. The default stays `tree`: `auto` was slower than the pipeline at 4 MiB on the
//! testbed and shapes its trees to guessed rates before anything is measured (below).
//! Smaller messages take the tree under every setting.
//!
//! - **Slow paths.** The root's MOB runs with [`MobConfig::default`], as in every driver: its
//!   [`MobConfig::reroute_slow`] requests a share piece whose request to a slow site is
//!   overdue again from a site that announced it (issue 18's series, where one site's path
//!   from the root's slows tenfold; see "Slow global peers" in [`windrose_proto::mob`]). The
//!   configuration travels in the spec, so every rank agrees.
//! - **Agreement.** Only the root reads the setting: its eager announcement carries the
//!   collective's spec (a multicast's protocol, parameters and piece hashes), so the ranks
//!   cannot disagree on the protocol, and nothing is added to the plan version.
//! - **Pieces out of order.** A multicast delivers verified pieces as (offset, data); they
//!   are received into buffers of their own (the zero-copy receive into the caller's buffer
//!   is for tree segments, `BroadcastMsg::Data`, only: a MOB member keeps every piece to
//!   serve it to others until the collective ends, which must not pin the caller's buffer)
//!   and copied to their offsets when the call ends (`Driver::assemble`, the same path as a
//!   later broadcast's segments; one memory copy per byte and rank).
//! - **When a rank returns.** A rank progresses only inside MPI calls, and MOB members serve
//!   pieces after they hold all of theirs, so a rank may not leave when its own pieces are
//!   in. It returns when its multicast machine finishes, which a multicast does only once
//!   every member holds every piece: MOB's acknowledgement tree (Complete up a binary tree,
//!   AllComplete down it). So every rank leaves after the whole collective completed. Cost
//!   in the harness's four sites (10 ms one way between sites): 46-48 virtual ms from the
//!   last rank holding everything to the last call returning, at 1, 4 and 16 MiB.
//! - **Sessions.** Multicasts run in the same eager sessions as the tree (announce and start
//!   at once; Done and Close off the data's path); their announcement is the root's alone
//!   (not relayed along a tree). Pieces are [`piece_bytes`] (16 to 32 KiB up to 2 MiB, then
//!   256 KiB; `WINDROSE_MPI_PIECE` fixes it).
//! - **Errors** map as for the tree: a length the root's does not match is `Truncated` or
//!   `Short` at `Driver::assemble`, a refused or aborted collective `Failed`. A rank that
//!   dies is as for the tree (the crate's README, Errors): the launcher ends the job; with
//!   MOB every survivor waits in its call for the acknowledgement the dead rank never sends,
//!   where with a tree only the dead rank's subtree and parent wait.
//!
//! Measured in the in-memory harness (`mob_beats_the_tree_and_the_chain_between_four_sites`:
//! 4 sites of 4 ranks, 100 MB/s inside, one 5 MB/s path with 10 ms one way per ordered pair
//! of sites; virtual ms per call from rank 0):
//!
//! | size   | MOB  | auto (Balanced) | tree (adapt) | chain, 64 KiB | best of tree, chain / MOB | / auto |
//! |--------|-----:|----------------:|-------------:|--------------:|--------------------------:|-------:|
//! | 1 MiB  |  265 |             107 |          263 |           281 |                      0.99 |   2.46 |
//! | 4 MiB  |  579 |             493 |          978 |           911 |                      1.57 |   1.85 |
//! | 16 MiB | 1421 |            1845 |         3610 |          3429 |                      2.41 |   1.86 |
//!
//! (Pieces of 16, 256 and 256 KiB, [`piece_bytes`]; with 64 KiB pieces MOB took 489 ms at
//! 4 MiB here, 1.86x, but was slower than the pipeline on the testbed.) MOB is 2x the best
//! tree at 16 MiB; at 1 MiB its start-up (peerings, then a
//! request before each piece, each a WAN round trip) and its end (two round trips) take as
//! long as its stream. The Host's choice took Balanced Multicasting at every size (shaped
//! trees, no requests), 1.85-2.46x from 1 MiB on. On the emulated testbed (the crate's README,
//! "MOB between sites") MOB was 2.00x the best native algorithm at 1 MiB and `auto` 3.86x,
//! but at 4 MiB, with 64 KiB pieces, both were slower than the pipeline; 256 KiB pieces made
//! MOB 1.50-1.52x there (two runs), so [`piece_bytes`] now takes 256 KiB above 2 MiB. The
//! harness has no per-message cost and no TCP: it preferred the small pieces.
//!
//! What the root's tree does not carry (which broadcasts take windrose's path, the group's
//! members and their hosts or sites) every rank derives itself, so it is versioned: every
//! head on the wire starts with the sender's plan version ([`PLAN_LEN`] bytes, see
//! [`plan_version`]), and a rank refuses a frame of another version
//! ([`BcastError::PlanMismatch`]) and every later call on the group, rather than mix two
//! plans. Every rank greets every other when its group starts, so each one hears every
//! peer's version before it can wait on that peer.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::choice::{Candidate, ChoiceModel};
use windrose_proto::collective::{CollectiveSpec, MulticastParams};
use windrose_proto::frame::{
    decode_bytes, encode, encode_parts, peek_header, Family, FrameHeader, HEADER_LEN,
};
use windrose_proto::host::{
    App, AppRequest, AutoRequest, BroadcastRequest, Host, HostConfig, SessionMsg,
};
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::planner::TreePolicy;
use windrose_proto::probe::ProbeConfig;
use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
use windrose_proto::{
    Command, Input, Message, Output, Outputs, Protocol, Report, SendId, Time, TimerId, TransferId,
};

/// Point-to-point messages among the ranks of one communicator (a private duplicate).
pub trait Transport {
    /// An outstanding send.
    type Request;
    /// Starts sending a frame to `to`: `head` as one message, then `payload` (when not empty)
    /// as a message on the payload tag. The driver keeps both alive until `test` says done.
    fn isend(
        &mut self,
        to: u32,
        head: &Bytes,
        payload: &Bytes,
    ) -> Result<Self::Request, TransportError>;
    /// True once the send completed (the request is spent then).
    fn test(&mut self, request: &mut Self::Request) -> Result<bool, TransportError>;
    /// The next incoming head's source and length, if one is there; it must be taken with
    /// `recv` before the next probe.
    fn probe(&mut self) -> Result<Option<(u32, usize)>, TransportError>;
    /// Receives the head the last probe found into `buf` (its exact length).
    fn recv(&mut self, buf: &mut [u8]) -> Result<(), TransportError>;
    /// An outstanding payload receive.
    type Receive;
    /// Starts receiving the next payload from `from` into the `len` bytes at `buf`: the
    /// payload of the oldest head from `from` whose payload no receive was started for yet (a
    /// sender's messages on one tag arrive in order, and receives posted for one source match
    /// in the order they were posted).
    ///
    /// # Safety
    /// `buf..buf + len` must stay valid, and nobody else may read or write it, until
    /// `test_receive` says the receive is done.
    unsafe fn irecv_payload(
        &mut self,
        from: u32,
        buf: *mut u8,
        len: usize,
    ) -> Result<Self::Receive, TransportError>;
    /// True once the receive completed with exactly its length (the receive is spent then);
    /// another length is an error.
    fn test_receive(&mut self, receive: &mut Self::Receive) -> Result<bool, TransportError>;
}

/// A point-to-point call failed: which one and the MPI error code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    /// `isend`, `test`, `probe` or `recv`.
    pub call: &'static str,
    /// The MPI library's error code (or -1 from the driver).
    pub code: i32,
}

/// Why a broadcast failed at this rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BcastError {
    /// The MPI library refused a point-to-point call.
    Transport(TransportError),
    /// A peer sent something that is not a windrose frame of this group.
    BadFrame {
        /// The rank it came from.
        from: u32,
        /// What was wrong.
        why: String,
    },
    /// The root's message is longer than this rank's buffer (MPI_ERR_TRUNCATE); nothing
    /// past the buffer was written.
    Truncated {
        /// Bytes this rank's buffer holds.
        buffer: u64,
        /// The root's message is at least this long.
        at_least: u64,
    },
    /// The root's message is shorter than this rank's buffer (the ranks' counts disagree).
    Short {
        /// Bytes this rank's buffer holds.
        buffer: u64,
        /// Bytes the root sent.
        message: u64,
    },
    /// The collective was refused or aborted.
    Failed(String),
    /// Invalid arguments (root out of range).
    Argument(String),
    /// A peer's frame carries another plan version than this rank's: the two were built
    /// under different plans (settings, topology or sites), so nothing from it is taken.
    PlanMismatch {
        /// The rank it came from.
        from: u32,
        /// Its plan version.
        theirs: u64,
        /// This rank's.
        mine: u64,
    },
}

impl fmt::Display for BcastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BcastError::Transport(e) => write!(f, "MPI point-to-point call {} failed with code {}", e.call, e.code),
            BcastError::BadFrame { from, why } => write!(f, "bad frame from rank {from}: {why}"),
            BcastError::Truncated { buffer, at_least } => write!(
                f,
                "the root's message (at least {at_least} bytes) is longer than this rank's buffer ({buffer} bytes)"
            ),
            BcastError::Short { buffer, message } => write!(
                f,
                "the root's message ({message} bytes) is shorter than this rank's buffer ({buffer} bytes)"
            ),
            BcastError::Failed(why) => write!(f, "the broadcast failed: {why}"),
            BcastError::Argument(why) => write!(f, "bad argument: {why}"),
            BcastError::PlanMismatch { from, theirs, mine } => write!(
                f,
                "rank {from} runs plan version {theirs:016x} and this rank {mine:016x}: the ranks \
                 disagree on the broadcasts' path, topology or sites, so this rank refuses its \
                 frames (and every later broadcast on this communicator) rather than mix two plans"
            ),
        }
    }
}

impl From<TransportError> for BcastError {
    fn from(e: TransportError) -> Self {
        BcastError::Transport(e)
    }
}

/// Largest frame body accepted: a segment's payload and its fixed fields.
const MAX_BODY: u32 = (1 << 20) + 64;

/// Bytes before every frame head on the wire: the sender's plan version, little-endian.
pub const PLAN_LEN: usize = 8;

/// The version of a group's plan: an FNV-1a digest of `world` (the settings every rank of the
/// job agreed at MPI_Init: whether windrose runs, its threshold, the topology, the sites) and
/// the group's `hosts` (per member, its host or site). Ranks that computed different versions
/// would run different plans; the driver refuses each other's frames.
pub fn plan_version(world: u64, hosts: &[i32]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let words = [world, hosts.len() as u64]
        .into_iter()
        .chain(hosts.iter().map(|&x| x as u32 as u64));
    for w in words {
        for b in w.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// Payloads below this many bytes (session messages, small segments) travel in one message
/// with their head: copying them costs less than a second message.
const INLINE_PAYLOAD: usize = 16 << 10;

/// How this rank's part of a transfer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Ended { finished: bool },
    Refused,
}

/// The message of a whole frame received from `from`.
fn decode(from: u32, frame: Bytes) -> Result<Message, BcastError> {
    let bad = |why: String| BcastError::BadFrame { from, why };
    let (message, len) = decode_bytes(&frame, MAX_BODY)
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad(format!("a truncated frame of {} bytes", frame.len())))?;
    if len != frame.len() {
        return Err(bad(format!(
            "{} bytes after a frame of {len}",
            frame.len() - len
        )));
    }
    Ok(message)
}

/// The frame whose payload has just been received into `landing`.
fn finish(from: u32, landing: Landing) -> Result<Message, BcastError> {
    match landing {
        Landing::InPlace(seg) => Ok(Message::Broadcast(BroadcastMsg::Data(seg))),
        Landing::Own {
            mut frame,
            frame_len,
        } => {
            // SAFETY: the head was copied in and the receive wrote the rest (exactly its
            // length, or the test reported an error and this is not reached).
            unsafe { frame.set_len(frame_len) };
            decode(from, Bytes::from(frame))
        }
    }
}

/// Bytes per segment for a message of `len` bytes: about eight segments per message so the
/// tree pipelines, between 64 KiB and 1 MiB (one frame per segment).
pub fn segment_bytes(len: u64) -> u64 {
    (len / 8).clamp(64 << 10, 1 << 20)
}

/// Counters of one group, for `WINDROSE_MPI_STATS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames sent and their bytes.
    pub frames_sent: u64,
    /// Bytes of the frames sent.
    pub bytes_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Trees planned for the broadcasts this rank rooted.
    pub trees_planned: u64,
    /// Of those after the first, the plans that swapped links or built the tree anew.
    pub trees_changed: u64,
    /// Bytes copied into callers' buffers after they arrived (the rest was received there).
    pub bytes_copied: u64,
    /// What the last tree this rank planned (as a root) was, and how it came about.
    pub last_plan: Option<PlanStats>,
    /// Broadcasts this rank rooted that ran as a multicast (MOB, or Balanced Multicasting
    /// when the automatic choice took it) rather than a tree.
    pub multicasts: u64,
    /// The protocol the automatic choice took for the last broadcast this rank rooted.
    pub last_choice: Option<Candidate>,
}

/// One tree a root planned (`WINDROSE_MPI_STATS` prints the last one), so a run shows what
/// the root planned and from how much it measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// The tree's cost as the planner priced it (its costliest root-to-leaf path, µs).
    pub cost_us: u64,
    /// Built anew (the first plan, or a fresh tree that replaced the swapped one).
    pub built: bool,
    /// Links whose change of cost the plan took in.
    pub changed_links: u32,
    /// Swaps the plan made.
    pub swaps: u32,
    /// Tree edges (child and parent) that were not in the previous plan's tree (every edge
    /// at the first plan).
    pub edges_moved: u32,
    /// Links (pairs of ranks) whose bandwidth the root's view held a measurement of when it
    /// planned (its own sends' and the rows the others shared), out of `n (n - 1) / 2`; the
    /// others were guessed.
    pub measured_links: u32,
}

impl fmt::Display for PlanStats {
    /// `cost-ms C built B links-taken-in L swaps S edges-moved E measured-links M` (B: 0 or
    /// 1), the words of the `WINDROSE_MPI_STATS` line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cost-ms {:.3} built {} links-taken-in {} swaps {} edges-moved {} measured-links {}",
            self.cost_us as f64 / 1e3,
            u8::from(self.built),
            self.changed_links,
            self.swaps,
            self.edges_moved,
            self.measured_links
        )
    }
}

/// What a process's roots planned, over all its groups: the words the shim appends to its
/// `WINDROSE_MPI_STATS` line (`plans P changed C last-plan none`, or `last-plan` followed by
/// the last plan's [`PlanStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanTally {
    /// Trees planned.
    pub plans: u64,
    /// Of those, the plans that built the tree anew or swapped links (after each group's
    /// first).
    pub changed: u64,
    /// The last plan.
    pub last: Option<PlanStats>,
}

impl PlanTally {
    /// Adds what a group's counters gained during one call (`before`, then `after`).
    pub fn add(&mut self, before: &Stats, after: &Stats) {
        let plans = after.trees_planned.saturating_sub(before.trees_planned);
        if plans == 0 {
            return;
        }
        self.plans += plans;
        self.changed += after.trees_changed.saturating_sub(before.trees_changed);
        self.last = after.last_plan.or(self.last);
    }
}

impl fmt::Display for PlanTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plans {} changed {} last-plan ",
            self.plans, self.changed
        )?;
        match &self.last {
            Some(p) => write!(f, "{p}"),
            None => write!(f, "none"),
        }
    }
}

/// How a group's broadcasts are run (from the `WINDROSE_MPI_*` environment at MPI_Init).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Options {
    /// How the root plans its trees from the weather (`WINDROSE_MPI_TREE`).
    pub policy: TreePolicy,
    /// Round-trip probes this often (`WINDROSE_MPI_PROBE_MS`; None: no prober). Probes are
    /// answered only while a rank is inside an MPI call, so they are off by default.
    pub probe: Option<Duration>,
    /// A rank's measurements of its links go to the root of the broadcasts it ends at most
    /// this often (`WINDROSE_MPI_GOSSIP_MS`, default [`DEFAULT_GOSSIP`]; `0`: never), so the
    /// root plans from links only other ranks send on.
    pub gossip: Option<Duration>,
    /// A fixed segment size (`WINDROSE_MPI_SEGMENT`) instead of [`segment_bytes`]'s choice.
    pub segment: Option<u64>,
    /// The sites' floor (`WINDROSE_MPI_SITE_MS`; None: [`crate::sites::DEFAULT_FLOOR`]).
    pub site_floor: Option<Duration>,
    /// The plan every rank agreed at MPI_Init (see [`plan_version`], which adds the group's
    /// hosts); not read from the environment.
    pub world_plan: u64,
    /// Which collective a root runs (`WINDROSE_MPI_PROTOCOL`): the tree broadcast (the
    /// default), MOB, or the Host's automatic choice.
    pub protocol: BcastProtocol,
    /// A fixed piece size for multicasts (`WINDROSE_MPI_PIECE`) instead of
    /// [`piece_bytes`]'s choice.
    pub piece: Option<u32>,
}

/// Which collective the root of a broadcast on windrose's path runs
/// (`WINDROSE_MPI_PROTOCOL=tree|mob|auto`); the root's announcement carries it to the others.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum BcastProtocol {
    /// The tree broadcast under [`Options::policy`] (the default).
    #[default]
    Tree,
    /// MOB between the sites ([`windrose_proto::mob`]) for every message of at least
    /// [`MOB_MIN_BYTES`]; smaller ones take the tree.
    Mob,
    /// Whatever the Host predicts fastest from the size and its view (tree broadcast, MOB or
    /// Balanced Multicasting, [`windrose_proto::choice`]), for messages of at least
    /// [`MOB_MIN_BYTES`]; smaller ones take the tree.
    Auto,
}

impl std::str::FromStr for BcastProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        // "mob" is MulticastProtocol's name (its one definition); the other multicasts need
        // a plan or a tracker the shim does not make.
        match s {
            "tree" => Ok(BcastProtocol::Tree),
            "auto" => Ok(BcastProtocol::Auto),
            _ => match s.parse::<MulticastProtocol>() {
                Ok(MulticastProtocol::Mob) => Ok(BcastProtocol::Mob),
                _ => Err(format!(
                    "expected tree, {} or auto, not {s:?}",
                    MulticastProtocol::Mob
                )),
            },
        }
    }
}

/// Messages below this many bytes take the tree broadcast whatever the protocol: MOB's
/// start-up (peerings, then a request before each piece) costs round trips a small message
/// does not win back.
pub const MOB_MIN_BYTES: u64 = 256 << 10;

/// Bytes per piece of a multicast (MOB) of `len` bytes: a 64th of the message (at least
/// 16 KiB) while that is at most 32 KiB, else 256 KiB (the size MOB's models were checked
/// with). Each piece is a request and an answer over the WAN; a piece's payload is one MPI
/// message, and Open MPI's TCP transport sends messages above 64 KiB (header included) by
/// rendezvous, another round trip each. On the testbed 64 KiB pieces made MOB at 4 MiB
/// 0.86x the pipeline, 256 KiB pieces 1.50x; at 1 MiB 16 KiB pieces made it 2.00x, 256 KiB
/// pieces 1.19x (the crate's README, "MOB between sites").
pub fn piece_bytes(len: u64) -> u32 {
    let small = len / 64;
    if small <= 32 << 10 {
        small.max(16 << 10) as u32
    } else {
        256 << 10
    }
}

/// Rounds of progress (each up to 64 messages) a root makes before it plans a broadcast, to
/// take in what arrived while it was outside MPI calls.
const CATCH_UP_ROUNDS: usize = 16;

/// How often a rank's row of link measurements goes to a root by default: one small message
/// per rank and second at most, sent as a broadcast ends.
pub const DEFAULT_GOSSIP: Duration = Duration::from_secs(1);

impl Default for Options {
    fn default() -> Self {
        Options {
            policy: TreePolicy::default(),
            probe: None,
            gossip: Some(DEFAULT_GOSSIP),
            segment: None,
            site_floor: None,
            world_plan: 0,
            protocol: BcastProtocol::Tree,
            piece: None,
        }
    }
}

/// Reads the options from `var` (the environment), with errors naming the variable.
pub fn options_from(var: impl Fn(&str) -> Option<String>) -> Result<Options, String> {
    let mut o = Options::default();
    if let Some(v) = var("WINDROSE_MPI_TREE").filter(|v| !v.is_empty()) {
        o.policy = v
            .parse::<TreePolicy>()
            .map_err(|e| format!("WINDROSE_MPI_TREE={v}: {e}"))?;
    }
    if let Some(v) = var("WINDROSE_MPI_PROTOCOL").filter(|v| !v.is_empty()) {
        o.protocol = v
            .parse::<BcastProtocol>()
            .map_err(|e| format!("WINDROSE_MPI_PROTOCOL={v}: {e}"))?;
    }
    if let Some(v) = var("WINDROSE_MPI_PROBE_MS").filter(|v| !v.is_empty()) {
        let ms = v
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .ok_or_else(|| format!("WINDROSE_MPI_PROBE_MS={v}: expected milliseconds (> 0)"))?;
        o.probe = Some(Duration::from_millis(ms));
    }
    if let Some(v) = var("WINDROSE_MPI_GOSSIP_MS").filter(|v| !v.is_empty()) {
        let ms = v
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms <= 86_400_000)
            .ok_or_else(|| {
                format!("WINDROSE_MPI_GOSSIP_MS={v}: expected milliseconds (0: never)")
            })?;
        o.gossip = (ms > 0).then(|| Duration::from_millis(ms));
    }
    if let Some(v) = var("WINDROSE_MPI_SEGMENT").filter(|v| !v.is_empty()) {
        // One size parser for every flag and file (windrose_model::units): "256KiB" too.
        let bytes =
            windrose_model::parse_size(&v).map_err(|e| format!("WINDROSE_MPI_SEGMENT={v}: {e}"))?;
        check_segment(bytes).map_err(|e| format!("WINDROSE_MPI_SEGMENT: {e}"))?;
        o.segment = Some(bytes);
    }
    if let Some(v) = var("WINDROSE_MPI_PIECE").filter(|v| !v.is_empty()) {
        let bytes =
            windrose_model::parse_size(&v).map_err(|e| format!("WINDROSE_MPI_PIECE={v}: {e}"))?;
        check_segment(bytes).map_err(|e| format!("WINDROSE_MPI_PIECE: {e}"))?;
        o.piece = Some(bytes as u32);
    }
    if let Some(v) = var("WINDROSE_MPI_SITE_MS").filter(|v| !v.is_empty()) {
        let ms = v
            .parse::<f64>()
            .ok()
            .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms <= 1e9)
            .ok_or_else(|| format!("WINDROSE_MPI_SITE_MS={v}: expected milliseconds (>= 0)"))?;
        o.site_floor = Some(Duration::from_secs_f64(ms / 1e3));
    }
    Ok(o)
}

fn check_segment(bytes: u64) -> Result<(), String> {
    if (1..=1 << 20).contains(&bytes) {
        Ok(())
    } else {
        Err(format!(
            "segment size {bytes} bytes: expected 1 to 1048576 (one frame per segment)"
        ))
    }
}

/// The driver's clock: the wall clock under MPI, a hand-moved one in tests (nanoseconds), so
/// the protocols below only ever see the driver's `Time`.
enum Clock {
    Wall(Instant),
    #[cfg_attr(not(test), allow(dead_code))]
    Manual(Arc<AtomicU64>),
}

impl Clock {
    fn now(&self) -> Time {
        match self {
            Clock::Wall(epoch) => {
                Time::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
            }
            Clock::Manual(ns) => Time::from_nanos(ns.load(Ordering::Relaxed)),
        }
    }
}

/// The caller's buffer of the broadcast this rank is in (not its root): where the payloads
/// of that broadcast's segments are received.
#[derive(Clone, Copy)]
struct Target {
    transfer: TransferId,
    buf: *mut u8,
    len: usize,
}

/// A segment's payload received straight into the caller's buffer, as `Bytes` the Host can
/// forward and deliver without a copy. The buffer is only valid during the call: each alias
/// holds `token`, and the call returns only once no alias is left (see [`Driver::bcast`]).
struct Alias {
    ptr: *const u8,
    len: usize,
    _token: Arc<()>,
}

// SAFETY: the driver and its Bytes live on the thread in the MPI call (the group's lock);
// the pointer is only read while the caller's buffer is lent to that call.
unsafe impl Send for Alias {}

impl AsRef<[u8]> for Alias {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies in the caller's buffer, alive while any alias is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A send in flight: its request, the frame it must keep alive, whom to tell when done, and
/// the transfer whose data it carries (a segment).
struct InFlight<R> {
    request: R,
    _head: Bytes,
    _payload: Bytes,
    notify: Option<(NodeId, SendId)>,
    data_of: Option<TransferId>,
}

/// Payload receives a rank keeps posted per peer at most. A head comes before its payload, so
/// a rank receives several payloads at once, one stream per peer that sends it data; more
/// than one per peer lets the next payload's bytes move while the driver is busy elsewhere
/// (a large MPI message waits for its receive before its bulk moves). The memory this bounds:
/// at most this many payload buffers per peer allocated before their bytes arrived, each at
/// most a frame's body (`MAX_BODY`); heads beyond it wait, small, for a slot.
pub const PAYLOADS_PER_PEER: usize = 4;

/// Where a payload's receive writes.
enum Landing {
    /// The caller's buffer: the segment, whose payload already aliases where it lands (the
    /// alias holds the call until the receive completed and the Host let go of it).
    InPlace(DataSegment),
    /// A buffer of its own, holding the head first (`frame.len()` bytes so far) and the
    /// payload after it once received; decoded then.
    Own { frame: Vec<u8>, frame_len: usize },
}

/// A frame from a peer that the Host cannot have yet: its payload is on its way, or an earlier
/// frame of the same peer's still is. A peer's frames reach the Host in the order it sent
/// them, as over one stream; different peers' do not wait for each other.
enum Inbound<R> {
    /// A payload's receive is posted.
    Receiving { receive: R, landing: Landing },
    /// A head whose payload's receive waits for a slot ([`PAYLOADS_PER_PEER`]): the head
    /// (without the plan version) and its payload's length.
    Waiting {
        head: Bytes,
        header: FrameHeader,
        payload_len: usize,
    },
    /// A whole frame, behind an earlier one of the same peer's.
    Ready(Message),
}

/// One rank's driver of one communicator's [`Host`].
pub struct Driver<T: Transport> {
    host: Host,
    transport: T,
    rank: u32,
    size: u32,
    policy: TreePolicy,
    protocol: BcastProtocol,
    piece: Option<u32>,
    clock: Clock,
    timers: BTreeMap<TimerId, Time>,
    pending: Vec<InFlight<T::Request>>,
    /// Per peer, its frames not handed to the Host yet, oldest first.
    inbound: Vec<VecDeque<Inbound<T::Receive>>>,
    /// Payload receives posted now, and the most ever (a gauge for the tests and stats).
    receiving: u32,
    max_receiving: u32,
    next_transfer: u32,
    deliveries: BTreeMap<TransferId, Vec<(u64, Bytes)>>,
    outcomes: BTreeMap<TransferId, Outcome>,
    joins_heard: u32,
    out: Outputs,
    stats: Stats,
    /// A fixed segment size (bytes) instead of [`segment_bytes`]'s choice.
    segment: Option<u64>,
    /// The buffer of the broadcast this rank is receiving, during its call.
    target: Option<Target>,
    /// Held by every alias of the caller's buffer: one count means none is left.
    aliases: Arc<()>,
    /// This group's plan version, sent before every head and checked on every head received.
    plan: u64,
    /// Set once a peer's plan differed: every later call fails with it.
    refused: Option<BcastError>,
    /// The edges (child, parent) of the last tree this rank planned.
    last_tree: Vec<(u32, u32)>,
    /// A tree was just planned: its announcement's edges go into `stats.last_plan`.
    tree_pending: bool,
}

impl<T: Transport> Driver<T> {
    /// The driver of `rank` among `hosts.len()` ranks (`hosts[r]`: rank r's host), started
    /// with the default [`Options`]: its Host greets every peer.
    pub fn new(rank: u32, hosts: &[i32], transport: T, seed: u64) -> Result<Self, String> {
        Self::with_options(rank, hosts, transport, seed, Options::default())
    }

    /// The driver with `options`. Each host group is a cluster of the Host's members, so a
    /// link nobody measured is guessed from the measured links between the same two hosts
    /// (between host leaders, `hosts[r]` is leader r's site: see [`crate::sites`]).
    pub fn with_options(
        rank: u32,
        hosts: &[i32],
        transport: T,
        seed: u64,
        options: Options,
    ) -> Result<Self, String> {
        let size = u32::try_from(hosts.len()).map_err(|_| "too many ranks".to_string())?;
        if rank >= size {
            return Err(format!("rank {rank} is not below the group size {size}"));
        }
        let members: Arc<[(NodeId, ClusterId)]> = hosts
            .iter()
            .enumerate()
            .map(|(r, &h)| (NodeId(r as u32), ClusterId(h.max(0) as u32)))
            .collect();
        let mut config = HostConfig::new(NodeId(rank), members, seed);
        // MPI reports failures itself, and a rank may stay away from MPI calls for as long as
        // it computes: no heartbeats, no silence detection, no idle timeout.
        config.heartbeat = None;
        config.idle_timeout = None;
        config.eager = true;
        config.relay_announce = true;
        // A rank progresses only inside its MPI calls and receives into the caller's buffer,
        // which it must let go of before its call returns: no pacing, no hand-offs, relays
        // keep nothing they forwarded (windrose_proto::tree_broadcast, "Leaving a link that
        // slows").
        config.steer_broadcasts = false;
        config.weather.gossip = options.gossip;
        config.probe = options.probe.map(|period| ProbeConfig {
            period,
            rounds: u32::MAX,
        });
        let host = Host::new(config).map_err(|e| format!("windrose host of rank {rank}: {e}"))?;
        let mut d = Driver {
            host,
            transport,
            rank,
            size,
            policy: options.policy,
            protocol: options.protocol,
            piece: options.piece,
            clock: Clock::Wall(Instant::now()),
            timers: BTreeMap::new(),
            pending: Vec::new(),
            inbound: (0..size).map(|_| VecDeque::new()).collect(),
            receiving: 0,
            max_receiving: 0,
            next_transfer: 0,
            deliveries: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            joins_heard: 0,
            out: Outputs::new(),
            stats: Stats::default(),
            segment: options.segment,
            target: None,
            aliases: Arc::new(()),
            plan: plan_version(options.world_plan, hosts),
            refused: None,
            last_tree: Vec::new(),
            tree_pending: false,
        };
        d.feed(Input::Start).map_err(|e| e.to_string())?;
        Ok(d)
    }

    /// Uses `bytes` per segment (and frame) for the broadcasts this rank roots: 1 ..= 1 MiB.
    pub fn set_segment_bytes(&mut self, bytes: u64) -> Result<(), String> {
        check_segment(bytes)?;
        self.segment = Some(bytes);
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// This group's plan version (see [`plan_version`]).
    pub fn plan(&self) -> u64 {
        self.plan
    }

    fn now(&self) -> Time {
        self.clock.now()
    }

    /// Starts transfer `t` of `data` rooted here; the Host plans its tree under the policy.
    /// First it takes in what arrived while this rank was outside MPI calls (the other
    /// ranks' rows of measurements, their reports), so that the plan sees it. An error met
    /// there is returned after the start, as the call's progress would have met it before
    /// this catching up: the ranks that agree still get the announcement rather than wait
    /// for one that never comes.
    fn start(&mut self, data: Bytes, t: TransferId) -> Result<(), BcastError> {
        let mut caught = Ok(());
        for _ in 0..CATCH_UP_ROUNDS {
            match self.progress() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    caught = Err(e);
                    break;
                }
            }
        }
        let len = data.len() as u64;
        let seg = self.segment.unwrap_or_else(|| segment_bytes(len));
        let piece = self.piece.unwrap_or_else(|| piece_bytes(len));
        let protocol = if len < MOB_MIN_BYTES {
            BcastProtocol::Tree
        } else {
            self.protocol
        };
        let request = match protocol {
            BcastProtocol::Tree => AppRequest::StartBroadcast(BroadcastRequest {
                policy: self.policy,
                segment_bytes: seg,
                max_frame_payload: seg as u32,
                data,
                transfer: Some(t),
            }),
            BcastProtocol::Mob => {
                let spec = CollectiveSpec::multicast(
                    MulticastProtocol::Mob,
                    MulticastParams::Mob(MobConfig::default()),
                    &data,
                    piece,
                )
                .map_err(|e| BcastError::Failed(format!("cannot cut the message: {e}")))?;
                self.stats.multicasts += 1;
                AppRequest::StartCollective {
                    spec,
                    data,
                    transfer: Some(t),
                }
            }
            BcastProtocol::Auto => AppRequest::StartAuto(AutoRequest {
                data,
                policy: self.policy,
                segment_bytes: seg,
                piece_bytes: piece,
                model: ChoiceModel::default(),
                transfer: Some(t),
            }),
        };
        self.feed(Input::App(App::new(request)))?;
        caught
    }

    /// Broadcasts `buf` from `root`: the root's bytes end up in every rank's `buf`. Blocks
    /// (making progress) until this rank's part is done.
    pub fn bcast(&mut self, buf: &mut [u8], root: u32) -> Result<(), BcastError> {
        if root >= self.size {
            return Err(BcastError::Argument(format!(
                "root {root} is not a rank of this communicator (size {})",
                self.size
            )));
        }
        if let Some(e) = &self.refused {
            return Err(e.clone());
        }
        let t = TransferId(self.next_transfer);
        self.next_transfer = self.next_transfer.wrapping_add(1);
        if root == self.rank {
            self.start(Bytes::copy_from_slice(buf), t)?;
        } else {
            self.target = Some(Target {
                transfer: t,
                buf: buf.as_mut_ptr(),
                len: buf.len(),
            });
        }
        let outcome = loop {
            if let Some(o) = self.outcomes.remove(&t) {
                break o;
            }
            match self.progress() {
                Ok(false) => std::thread::yield_now(),
                Ok(true) => {}
                Err(e) => {
                    self.release_target(t);
                    return Err(e);
                }
            }
        };
        let pieces = self.deliveries.remove(&t).unwrap_or_default();
        let result = self.assemble(buf, root, outcome, pieces, t);
        self.release_target(t);
        result
    }

    /// True when this rank's call of transfer `t` (whose outcome is in) may return: no alias
    /// of the caller's buffer is left (the forwards from it completed), and every segment of
    /// `t` this rank sent has completed.
    ///
    /// A tree machine ends as soon as it has handed its segments out (the root's at once),
    /// but the Host meters its links from the completions of those sends
    /// ([`windrose_proto::weather`]), and a driver makes progress only inside MPI calls: were
    /// the root to return at once, it would see its sends complete all together at its next
    /// call (a sample of the whole call's pace, or none), so nobody would measure the links
    /// out of the root (issue 18: the root kept a WAN path slowed tenfold, which its view
    /// still held at the guess); a relay's forwards of segments that came before its call
    /// are the same. The receivers of these segments are in this same call, taking them, so
    /// the wait ends when they have them (as a native MPI_Bcast's root and relays wait).
    fn may_return(&self, t: TransferId) -> bool {
        Arc::strong_count(&self.aliases) == 1 && !self.pending.iter().any(|p| p.data_of == Some(t))
    }

    /// Stops receiving into the caller's buffer and makes progress until the call of `t`
    /// may return ([`Driver::may_return`]); the caller may reuse its buffer then.
    fn release_target(&mut self, t: TransferId) {
        self.target = None;
        while !self.may_return(t) {
            match self.progress() {
                Ok(false) => std::thread::yield_now(),
                Ok(true) => {}
                // Already reported. The sends may never complete; receives into the caller's
                // buffer must, before it is handed back.
                Err(_) => {
                    self.settle_in_place();
                    break;
                }
            }
        }
    }

    /// Completes every payload receive into the caller's buffer and keeps its bytes in a
    /// buffer of their own, in the frame's place (a failed call's way out: its buffer goes
    /// back to the caller, and nothing may write or read it after that). Gives up on a
    /// transport error (the receives cannot complete then; the job is failing).
    fn settle_in_place(&mut self) {
        for queue in &mut self.inbound {
            for entry in queue.iter_mut() {
                let Inbound::Receiving {
                    receive,
                    landing: Landing::InPlace(seg),
                } = entry
                else {
                    continue;
                };
                loop {
                    match self.transport.test_receive(receive) {
                        Ok(true) => break,
                        Ok(false) => std::thread::yield_now(),
                        Err(_) => return,
                    }
                }
                self.receiving -= 1;
                let mut seg = seg.clone();
                seg.payload = Bytes::copy_from_slice(&seg.payload);
                *entry = Inbound::Ready(Message::Broadcast(BroadcastMsg::Data(seg)));
            }
        }
    }

    /// Puts the delivered pieces of `t` where they belong in `buf` (a piece received there
    /// already is not copied) and checks the lengths.
    fn assemble(
        &mut self,
        buf: &mut [u8],
        root: u32,
        outcome: Outcome,
        pieces: Vec<(u64, Bytes)>,
        t: TransferId,
    ) -> Result<(), BcastError> {
        match outcome {
            Outcome::Refused => {
                return Err(BcastError::Failed(format!("transfer {t} was refused")));
            }
            Outcome::Ended { finished: false } => {
                return Err(BcastError::Failed(format!("transfer {t} aborted")));
            }
            Outcome::Ended { finished: true } => {}
        }
        if root == self.rank {
            return Ok(());
        }
        let cap = buf.len() as u64;
        let mut got = 0u64;
        for (offset, data) in pieces {
            let end = offset + data.len() as u64;
            if end > cap {
                return Err(BcastError::Truncated {
                    buffer: cap,
                    at_least: end,
                });
            }
            let dst = &mut buf[offset as usize..end as usize];
            if dst.as_ptr() != data.as_ptr() {
                dst.copy_from_slice(&data);
                self.stats.bytes_copied += data.len() as u64;
            }
            got += data.len() as u64;
        }
        if got != cap {
            return Err(BcastError::Short {
                buffer: cap,
                message: got,
            });
        }
        Ok(())
    }

    /// One round: every message that is there, send completions, due timers. True when
    /// something happened.
    pub fn progress(&mut self) -> Result<bool, BcastError> {
        if let Some(e) = &self.refused {
            return Err(e.clone());
        }
        let mut busy = false;
        // A bounded batch, so sends and timers get their turn under a flood.
        for _ in 0..64 {
            let Some((from, len)) = self.transport.probe()? else {
                break;
            };
            busy = true;
            self.take_head(from, len)?;
        }
        busy |= self.progress_inbound()?;
        let mut i = 0;
        while i < self.pending.len() {
            if self.transport.test(&mut self.pending[i].request)? {
                busy = true;
                let sent = self.pending.swap_remove(i);
                if let Some((to, id)) = sent.notify {
                    self.feed(Input::SendComplete { to, id })?;
                }
            } else {
                i += 1;
            }
        }
        let now = self.now();
        let due: Vec<TimerId> = self
            .timers
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            busy = true;
            self.timers.remove(&id);
            self.feed(Input::Timer(id))?;
        }
        Ok(busy)
    }

    /// True when this rank owes no peer anything: every collective closed, every send
    /// completed, every peer's greeting received (so no message is left unreceived).
    pub fn quiescent(&self) -> bool {
        self.host.running().next().is_none()
            && self.pending.is_empty()
            && self.inbound.iter().all(VecDeque::is_empty)
            && self.joins_heard + 1 >= self.size
    }

    /// Receives the head the probe found (`wire_len` bytes from `from`) and checks it. A
    /// frame without a payload goes to the Host unless an earlier frame of `from`'s is still
    /// held; a frame with one is queued behind `from`'s earlier frames and its payload's
    /// receive posted when a slot is free ([`Driver::post_waiting`]).
    fn take_head(&mut self, from: u32, wire_len: usize) -> Result<(), BcastError> {
        let mut wire = vec![0u8; wire_len];
        self.transport.recv(&mut wire)?;
        let bad = |why: String| BcastError::BadFrame { from, why };
        if from >= self.size {
            return Err(bad(format!("rank {from} is not in this group")));
        }
        let Some(version) = wire.get(..PLAN_LEN) else {
            return Err(bad(format!(
                "{wire_len} bytes, shorter than a plan version"
            )));
        };
        let theirs = u64::from_le_bytes(version.try_into().expect("PLAN_LEN bytes"));
        if theirs != self.plan {
            let e = BcastError::PlanMismatch {
                from,
                theirs,
                mine: self.plan,
            };
            self.refused = Some(e.clone());
            return Err(e);
        }
        let whole = Bytes::from(wire);
        let head = whole.slice(PLAN_LEN..);
        let len = head.len();
        let header = peek_header(&head, MAX_BODY)
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad(format!("a truncated frame of {len} bytes")))?;
        let frame_len = header.frame_len();
        if frame_len < len {
            return Err(bad(format!(
                "{} bytes after a frame of {frame_len}",
                len - frame_len
            )));
        }
        let queue = &mut self.inbound[from as usize];
        if frame_len > len {
            queue.push_back(Inbound::Waiting {
                head,
                header,
                payload_len: frame_len - len,
            });
            return self.post_waiting(from);
        }
        let message = decode(from, head)?;
        if queue.is_empty() {
            self.on_frame(from, message)
        } else {
            queue.push_back(Inbound::Ready(message));
            Ok(())
        }
    }

    /// Posts the receives of `from`'s waiting payloads, oldest first, while fewer than
    /// [`PAYLOADS_PER_PEER`] of its receives are posted (the order the heads came in is the
    /// order MPI matches the payloads in).
    fn post_waiting(&mut self, from: u32) -> Result<(), BcastError> {
        let p = from as usize;
        let mut posted = self.inbound[p]
            .iter()
            .filter(|e| matches!(e, Inbound::Receiving { .. }))
            .count();
        for i in 0..self.inbound[p].len() {
            if posted >= PAYLOADS_PER_PEER {
                break;
            }
            let Inbound::Waiting {
                head,
                header,
                payload_len,
            } = &self.inbound[p][i]
            else {
                continue;
            };
            let (head, header, payload_len) = (head.clone(), *header, *payload_len);
            let (receive, landing) = self.post(from, &head, header, payload_len)?;
            self.inbound[p][i] = Inbound::Receiving { receive, landing };
            posted += 1;
            self.receiving += 1;
            self.max_receiving = self.max_receiving.max(self.receiving);
        }
        Ok(())
    }

    /// Posts the receive of a payload: into the caller's buffer when the head is a segment
    /// of the broadcast this rank is in and the payload fits where it goes, else into a
    /// buffer of its own after the head.
    fn post(
        &mut self,
        from: u32,
        head: &[u8],
        header: FrameHeader,
        payload_len: usize,
    ) -> Result<(T::Receive, Landing), BcastError> {
        if let Some((dst, mut seg)) = self.in_place(head, header, payload_len) {
            // SAFETY: `dst..dst + payload_len` lies in the caller's buffer, lent to this
            // call, which does not return while the alias made here lives (`may_return`;
            // `settle_in_place` on errors); nothing else writes there meanwhile.
            let receive = unsafe { self.transport.irecv_payload(from, dst, payload_len)? };
            seg.payload = Bytes::from_owner(Alias {
                ptr: dst,
                len: payload_len,
                _token: self.aliases.clone(),
            });
            return Ok((receive, Landing::InPlace(seg)));
        }
        let frame_len = head.len() + payload_len;
        let mut frame = Vec::with_capacity(frame_len);
        frame.extend_from_slice(head);
        // SAFETY: the spare capacity after the head is `payload_len` bytes, owned by `frame`,
        // which moves into the landing without reallocating and is not touched until the
        // receive completed (`finish`).
        let receive = unsafe {
            self.transport
                .irecv_payload(from, frame.as_mut_ptr().add(head.len()), payload_len)?
        };
        Ok((receive, Landing::Own { frame, frame_len }))
    }

    /// Where a payload lands in the caller's buffer, with its segment (payload still empty),
    /// when the head is a segment of the broadcast this rank is in and it fits there.
    fn in_place(
        &self,
        head: &[u8],
        header: FrameHeader,
        payload_len: usize,
    ) -> Option<(*mut u8, DataSegment)> {
        let target = self.target?;
        if header.kind != BroadcastMsg::DATA {
            return None;
        }
        // The fixed fields only (the payload comes apart): the codec's own parser.
        let Ok(BroadcastMsg::Data(seg)) = BroadcastMsg::parse(
            header.kind.kind,
            Bytes::copy_from_slice(&head[HEADER_LEN..]),
        ) else {
            return None;
        };
        let fits = seg.transfer == target.transfer
            && seg.total_len == target.len as u64
            && seg
                .offset
                .checked_add(payload_len as u64)
                .is_some_and(|end| end <= target.len as u64);
        // SAFETY: `offset + payload_len <= len`: inside the caller's buffer.
        fits.then(|| (unsafe { target.buf.add(seg.offset as usize) }, seg))
    }

    /// Hands every peer's frames whose payloads are in to the Host, each peer's in order, and
    /// posts the receives that freed slots allow. True when a frame went in.
    fn progress_inbound(&mut self) -> Result<bool, BcastError> {
        let mut busy = false;
        for p in 0..self.inbound.len() {
            let mut taken = false;
            while let Some(front) = self.inbound[p].front_mut() {
                match front {
                    Inbound::Receiving { receive, .. } => {
                        if !self.transport.test_receive(receive)? {
                            break;
                        }
                        self.receiving -= 1;
                    }
                    Inbound::Ready(_) => {}
                    // Only behind a posted receive, which is in front of it.
                    Inbound::Waiting { .. } => break,
                }
                let message = match self.inbound[p].pop_front().expect("front above") {
                    Inbound::Receiving { landing, .. } => finish(p as u32, landing)?,
                    Inbound::Ready(message) => message,
                    Inbound::Waiting { .. } => unreachable!("not taken above"),
                };
                taken = true;
                self.on_frame(p as u32, message)?;
            }
            if taken {
                busy = true;
                self.post_waiting(p as u32)?;
            }
        }
        Ok(busy)
    }

    fn on_frame(&mut self, from: u32, message: Message) -> Result<(), BcastError> {
        self.stats.frames_received += 1;
        if from >= self.size {
            return Err(BcastError::BadFrame {
                from,
                why: format!("rank {from} is not in this group"),
            });
        }
        if let Message::Session(s) = &message {
            if matches!(SessionMsg::from_frame(s), Ok(SessionMsg::Join)) {
                self.joins_heard += 1;
            }
        }
        self.feed(Input::Message {
            from: NodeId(from),
            message,
        })
    }

    /// Links of the group whose bandwidth this rank's view holds a measurement of.
    fn measured_links(&self) -> u32 {
        let view = self.host.group_view();
        let mut count = 0;
        for a in 0..self.size {
            for b in a + 1..self.size {
                count += u32::from(view.mb_s(NodeId(a), NodeId(b)).is_some());
            }
        }
        count
    }

    /// When `message` is this rank's announcement of the tree it just planned: counts the
    /// tree's edges that the previous plan's tree did not have.
    fn note_tree(&mut self, message: &Message) {
        let Message::Session(s) = message else {
            return;
        };
        let Ok(SessionMsg::Announce {
            root,
            spec: windrose_proto::collective::CollectiveSpec::Broadcast { tree, .. },
            ..
        }) = SessionMsg::from_frame(s)
        else {
            return;
        };
        if root.0 != self.rank {
            return;
        }
        self.tree_pending = false;
        let edges: Vec<(u32, u32)> = tree.edges.iter().map(|(c, p)| (c.0, p.0)).collect();
        let moved = edges.iter().filter(|e| !self.last_tree.contains(e)).count();
        if let Some(plan) = &mut self.stats.last_plan {
            plan.edges_moved = moved as u32;
        }
        self.last_tree = edges;
    }

    /// Hands `input` to the host and performs what it asks.
    fn feed(&mut self, input: Input) -> Result<(), BcastError> {
        let now = self.now();
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let r = self.host.handle(now, input, &mut out);
        let mut result =
            r.map_err(|e| BcastError::Failed(format!("the host refused an input: {e}")));
        let mut follow_ups = Vec::new();
        for o in out.drain() {
            match o {
                Output::Send(tx) => {
                    if self.tree_pending {
                        self.note_tree(&tx.message);
                    }
                    let small = tx
                        .message
                        .payload()
                        .is_none_or(|p| p.len() < INLINE_PAYLOAD);
                    let data_of = match &tx.message {
                        Message::Broadcast(BroadcastMsg::Data(seg)) => Some(seg.transfer),
                        _ => None,
                    };
                    let parts = if small {
                        encode(&tx.message).map(|f| (f, Bytes::new()))
                    } else {
                        encode_parts(&tx.message).map(|p| (p.head, p.payload))
                    };
                    let (head, payload) = match parts {
                        Ok((frame_head, payload)) => {
                            let mut wire = Vec::with_capacity(PLAN_LEN + frame_head.len());
                            wire.extend_from_slice(&self.plan.to_le_bytes());
                            wire.extend_from_slice(&frame_head);
                            (Bytes::from(wire), payload)
                        }
                        Err(e) => {
                            result = Err(BcastError::Failed(format!("cannot encode a frame: {e}")));
                            continue;
                        }
                    };
                    match self.transport.isend(tx.to.0, &head, &payload) {
                        Ok(req) => {
                            self.stats.frames_sent += 1;
                            self.stats.bytes_sent += (head.len() + payload.len()) as u64;
                            self.pending.push(InFlight {
                                request: req,
                                _head: head,
                                _payload: payload,
                                notify: tx.notify.map(|id| (tx.to, id)),
                                data_of,
                            });
                        }
                        Err(e) => result = Err(e.into()),
                    }
                }
                Output::SetTimer { timer, at } => {
                    self.timers.insert(timer, at);
                }
                Output::CancelTimer(timer) => {
                    self.timers.remove(&timer);
                }
                Output::Deliver {
                    transfer,
                    offset,
                    data,
                } => self
                    .deliveries
                    .entry(transfer)
                    .or_default()
                    .push((offset, data)),
                // A broadcast computes nothing: the work is done as soon as it is asked.
                Output::Compute(task) => {
                    follow_ups.push(Input::Command(Command::ComputeDone { task: task.task }))
                }
                Output::Report(Report::CollectiveEnded { transfer, finished }) => {
                    self.outcomes
                        .entry(transfer)
                        .or_insert(Outcome::Ended { finished });
                }
                Output::Report(Report::CollectiveRefused { transfer }) => {
                    self.outcomes.insert(transfer, Outcome::Refused);
                }
                Output::Report(Report::ProtocolChosen { chosen, .. }) => {
                    self.stats.last_choice = Some(chosen);
                    if chosen != Candidate::Broadcast {
                        self.stats.multicasts += 1;
                    }
                }
                Output::Report(Report::TreePlanned {
                    cost,
                    built,
                    changed_links,
                    swaps,
                    ..
                }) => {
                    self.stats.trees_planned += 1;
                    if self.stats.trees_planned > 1 && (built || swaps > 0) {
                        self.stats.trees_changed += 1;
                    }
                    self.stats.last_plan = Some(PlanStats {
                        cost_us: u64::try_from(cost.as_micros()).unwrap_or(u64::MAX),
                        built,
                        changed_links,
                        swaps,
                        edges_moved: 0,
                        measured_links: self.measured_links(),
                    });
                    self.tree_pending = true;
                }
                Output::Report(_) | Output::Finished | Output::Aborted(_) => {}
            }
        }
        self.out = out;
        for input in follow_ups {
            self.feed(input)?;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{BTreeSet, VecDeque};
    use std::rc::Rc;
    use windrose_trees::adaptive::Strategy;
    use windrose_trees::TreeAlgorithm;

    /// The in-memory network: every rank's mailbox of (from, frame, arrival in ns), a virtual
    /// clock, and per ordered pair an optional rate (bytes per ns; none: instant) at which the
    /// pair's frames go one after the other, as on a link of that bandwidth.
    #[derive(Default)]
    struct Wires {
        /// Per receiver: (from, bytes, arrival in ns, a payload rather than a head).
        mail: Vec<VecDeque<(u32, Bytes, u64, bool)>>,
        rate: BTreeMap<(u32, u32), f64>,
        free_at: BTreeMap<(u32, u32), u64>,
        /// Pairs that share one link (a WAN path between two sites): such a pair's frames
        /// take the rate of, and queue behind every frame on, the pair it maps to.
        lane: BTreeMap<(u32, u32), (u32, u32)>,
        /// One-way latency per ordered pair (ns; none: 0): a frame arrives this long after
        /// its send completed.
        latency: BTreeMap<(u32, u32), u64>,
        /// Bytes of the frames of at least `BIG` bytes sent on each pair (the data).
        data_bytes: BTreeMap<(u32, u32), u64>,
        /// Session messages sent, by kind (`announce`, `ready`, ...).
        sessions: BTreeMap<String, u64>,
        /// Every announcement sent: (from, to, the message, its arrival in ns).
        announces: Vec<(u32, u32, SessionMsg, u64)>,
        /// Frames sent as a head and a separate payload.
        split_frames: u64,
    }
    type Net = Rc<RefCell<Wires>>;

    /// Frames this large carry data (session frames are far smaller).
    const BIG: usize = 1000;

    /// An in-memory transport over [`Wires`].
    struct Loopback {
        me: u32,
        net: Net,
        clock: Arc<AtomicU64>,
        probed: Option<(u32, Bytes)>,
    }

    impl Transport for Loopback {
        /// When the send completes (ns).
        type Request = u64;
        fn isend(&mut self, to: u32, head: &Bytes, payload: &Bytes) -> Result<u64, TransportError> {
            let now = self.clock.load(Ordering::Relaxed);
            let mut w = self.net.borrow_mut();
            let pair = (self.me, to);
            let len = head.len() + payload.len();
            let lane = w.lane.get(&pair).copied().unwrap_or(pair);
            let (start, done) = match w.rate.get(&lane) {
                Some(&rate) => {
                    let start = now.max(w.free_at.get(&lane).copied().unwrap_or(0));
                    (start, start + (len as f64 / rate).ceil() as u64)
                }
                None => (now, now),
            };
            w.free_at.insert(lane, done);
            let latency = w.latency.get(&pair).copied().unwrap_or(0);
            let arrival = done + latency;
            if len >= BIG {
                *w.data_bytes.entry(pair).or_default() += len as u64;
            }
            let whole = Bytes::from([&head[PLAN_LEN..], &payload[..]].concat());
            if let Ok(Some((Message::Session(s), _))) = decode_bytes(&whole, MAX_BODY) {
                // The variant's name: `Announce { .. }` counts as "announce".
                let msg = SessionMsg::from_frame(&s).unwrap();
                let name = format!("{msg:?}");
                let kind: String = name.chars().take_while(|c| c.is_alphanumeric()).collect();
                *w.sessions.entry(kind.to_lowercase()).or_default() += 1;
                if matches!(msg, SessionMsg::Announce { .. }) {
                    w.announces.push((self.me, to, msg, arrival));
                }
            }
            if !payload.is_empty() {
                w.split_frames += 1;
            }
            // A head is small and goes first: it arrives as its frame starts to move (plus the
            // latency), the payload once all of it moved, so a receiver holds the head, and
            // can post the payload's receive, for as long as the payload takes.
            let head_arrival = if payload.is_empty() {
                arrival
            } else {
                start + latency
            };
            let mail = &mut w.mail[to as usize];
            mail.push_back((self.me, head.clone(), head_arrival, false));
            if !payload.is_empty() {
                mail.push_back((self.me, payload.clone(), arrival, true));
            }
            Ok(done)
        }
        fn test(&mut self, done: &mut u64) -> Result<bool, TransportError> {
            Ok(self.clock.load(Ordering::Relaxed) >= *done)
        }
        fn probe(&mut self) -> Result<Option<(u32, usize)>, TransportError> {
            let now = self.clock.load(Ordering::Relaxed);
            let mut w = self.net.borrow_mut();
            let mail = &mut w.mail[self.me as usize];
            // A pair's frames arrive in order, so the first arrived one is also its sender's
            // oldest: no overtaking within a pair, none blocked behind another sender.
            let Some(i) = mail.iter().position(|m| m.2 <= now && !m.3) else {
                return Ok(None);
            };
            let (from, f, _, _) = mail.remove(i).expect("found above");
            let len = f.len();
            self.probed = Some((from, f));
            Ok(Some((from, len)))
        }
        fn recv(&mut self, buf: &mut [u8]) -> Result<(), TransportError> {
            let (_, f) = self.probed.take().ok_or(TransportError {
                call: "recv",
                code: -1,
            })?;
            buf.copy_from_slice(&f);
            Ok(())
        }
        type Receive = Posted;
        unsafe fn irecv_payload(
            &mut self,
            from: u32,
            buf: *mut u8,
            len: usize,
        ) -> Result<Posted, TransportError> {
            let mut w = self.net.borrow_mut();
            let mail = &mut w.mail[self.me as usize];
            let missing = TransportError {
                call: "irecv_payload",
                code: -1,
            };
            // The sender's oldest payload not matched yet (it was sent with its head).
            let i = mail
                .iter()
                .position(|m| m.0 == from && m.3)
                .ok_or(missing.clone())?;
            let (_, data, arrival, _) = mail.remove(i).expect("found above");
            if data.len() != len {
                return Err(missing);
            }
            Ok(Posted { data, arrival, buf })
        }
        fn test_receive(&mut self, posted: &mut Posted) -> Result<bool, TransportError> {
            if self.clock.load(Ordering::Relaxed) < posted.arrival {
                return Ok(false);
            }
            // SAFETY: the driver lent `buf` for `data.len()` bytes until this says done.
            unsafe {
                std::ptr::copy_nonoverlapping(posted.data.as_ptr(), posted.buf, posted.data.len())
            };
            Ok(true)
        }
    }

    /// A payload's receive in the [`Loopback`]: its bytes, when they are all in (ns), and
    /// where they go.
    struct Posted {
        data: Bytes,
        arrival: u64,
        buf: *mut u8,
    }

    /// Virtual time per round of progress at every rank.
    const STEP_NS: u64 = 1_000_000;

    /// A group whose rank r builds its driver from `views[r]` (its view of every rank's host
    /// or site): ranks that disagree get different plan versions.
    fn group_of_views(views: &[Vec<i32>]) -> (Net, Vec<Driver<Loopback>>) {
        let net: Net = Rc::new(RefCell::new(Wires {
            mail: vec![VecDeque::new(); views.len()],
            ..Wires::default()
        }));
        let clock = Arc::new(AtomicU64::new(0));
        let drivers = views
            .iter()
            .enumerate()
            .map(|(r, hosts)| {
                let t = Loopback {
                    me: r as u32,
                    net: net.clone(),
                    clock: clock.clone(),
                    probed: None,
                };
                let mut d =
                    Driver::with_options(r as u32, hosts, t, 7, Options::default()).unwrap();
                d.clock = Clock::Manual(clock.clone());
                d
            })
            .collect();
        (net, drivers)
    }

    fn group_with(hosts: &[i32], options: Options) -> (Net, Arc<AtomicU64>, Vec<Driver<Loopback>>) {
        let net: Net = Rc::new(RefCell::new(Wires {
            mail: vec![VecDeque::new(); hosts.len()],
            ..Wires::default()
        }));
        let clock = Arc::new(AtomicU64::new(0));
        let drivers = (0..hosts.len() as u32)
            .map(|r| {
                let t = Loopback {
                    me: r,
                    net: net.clone(),
                    clock: clock.clone(),
                    probed: None,
                };
                let mut d = Driver::with_options(r, hosts, t, 7, options).unwrap();
                d.clock = Clock::Manual(clock.clone());
                d
            })
            .collect();
        (net, clock, drivers)
    }

    fn group(hosts: &[i32]) -> (Net, Vec<Driver<Loopback>>) {
        let (net, _, drivers) = group_with(hosts, Options::default());
        (net, drivers)
    }

    /// Starts the next broadcast from `root`: every other rank's buffer is its target.
    fn begin(drivers: &mut [Driver<Loopback>], bufs: &mut [Vec<u8>], root: u32) -> TransferId {
        let (t, started) = begin_or_fail(drivers, bufs, root);
        started.unwrap();
        t
    }

    /// [`begin`], with the root's start's result (an error its catching up met).
    fn begin_or_fail(
        drivers: &mut [Driver<Loopback>],
        bufs: &mut [Vec<u8>],
        root: u32,
    ) -> (TransferId, Result<(), BcastError>) {
        let t = TransferId(drivers[0].next_transfer);
        for (r, d) in drivers.iter_mut().enumerate() {
            d.next_transfer += 1;
            if r as u32 != root {
                d.target = Some(Target {
                    transfer: t,
                    buf: bufs[r].as_mut_ptr(),
                    len: bufs[r].len(),
                });
            }
        }
        let root_data = Bytes::copy_from_slice(&bufs[root as usize]);
        let started = drivers[root as usize].start(root_data, t);
        (t, started)
    }

    /// Runs the next broadcast from `root` at every rank, single-threaded, as
    /// [`Driver::bcast`] does: each non-root receives into its buffer in `bufs`, its blocking
    /// call emulated by its transfer's outcome (then [`Driver::assemble`]); a call returns
    /// once [`Driver::may_return`] says so, and, as under MPI (progress happens only inside
    /// MPI calls), a rank whose call returned makes no progress until its next call. The
    /// virtual clock moves by [`STEP_NS`] per round. Returns the virtual time (ns) at which
    /// each rank's part ended (its outcome came); the clock stops once every call returned.
    fn run(drivers: &mut [Driver<Loopback>], bufs: &mut [Vec<u8>], root: u32) -> Vec<u64> {
        run_timed(drivers, bufs, root).0
    }

    /// [`run`], also returning when each rank held every byte (ns): received into its
    /// buffer or delivered (the root: at the start).
    fn run_timed(
        drivers: &mut [Driver<Loopback>],
        bufs: &mut [Vec<u8>],
        root: u32,
    ) -> (Vec<u64>, Vec<u64>) {
        let n = drivers.len();
        let mut held = vec![None; n];
        let mut ended = vec![None; n];
        let mut returned = vec![false; n];
        let now = |d: &Driver<Loopback>| match &d.clock {
            Clock::Manual(c) => c.load(Ordering::Relaxed),
            Clock::Wall(_) => unreachable!("the tests' clock is manual"),
        };
        let t = begin(drivers, bufs, root);
        for _ in 0..100_000 {
            for (r, d) in drivers.iter_mut().enumerate() {
                if returned[r] {
                    continue;
                }
                d.progress().unwrap();
                if held[r].is_none() {
                    let got: usize = d
                        .deliveries
                        .get(&t)
                        .map_or(0, |p| p.iter().map(|(_, b)| b.len()).sum());
                    if r as u32 == root || got == bufs[r].len() || d.outcomes.contains_key(&t) {
                        held[r] = Some(now(d));
                    }
                }
                if ended[r].is_none() && d.outcomes.contains_key(&t) {
                    ended[r] = Some(now(d));
                    let outcome = d.outcomes.remove(&t).unwrap();
                    let pieces = d.deliveries.remove(&t).unwrap_or_default();
                    d.assemble(&mut bufs[r], root, outcome, pieces, t).unwrap();
                    d.target = None;
                }
                returned[r] = ended[r].is_some() && d.may_return(t);
            }
            if returned.iter().all(|&x| x) {
                return (
                    ended.into_iter().map(Option::unwrap).collect(),
                    held.into_iter().map(Option::unwrap).collect(),
                );
            }
            if let Clock::Manual(c) = &drivers[0].clock {
                c.fetch_add(STEP_NS, Ordering::Relaxed);
            }
        }
        panic!("broadcast from {root} did not end: {ended:?}");
    }

    #[test]
    fn every_root_gets_every_byte_to_every_rank() {
        let hosts = [0, 0, 2, 2, 4];
        let (_net, mut drivers) = group(&hosts);
        for (i, len) in [1usize, 1000, 300_000, 2_000_000].into_iter().enumerate() {
            for root in 0..hosts.len() as u32 {
                let want: Vec<u8> = (0..len)
                    .map(|k| {
                        (k as u32)
                            .wrapping_mul(31)
                            .wrapping_add(root * 7 + i as u32) as u8
                    })
                    .collect();
                let mut bufs: Vec<Vec<u8>> = (0..hosts.len())
                    .map(|r| {
                        if r as u32 == root {
                            want.clone()
                        } else {
                            vec![0xEE; len]
                        }
                    })
                    .collect();
                run(&mut drivers, &mut bufs, root);
                for (r, b) in bufs.iter().enumerate() {
                    assert!(b == &want, "rank {r} differs (root {root}, {len} bytes)");
                }
            }
        }
        // Everything closed: nobody owes anything, and every frame was received.
        for _ in 0..100 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
        }
        for (r, d) in drivers.iter().enumerate() {
            assert!(d.quiescent(), "rank {r} is not quiescent");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any group (3 to 9 ranks on 1 to 4 hosts), any root, any length, any segment size:
        /// every rank ends with the root's bytes, and the group settles afterwards.
        #[test]
        fn any_group_root_and_length(
            hosts in proptest::collection::vec(0i32..4, 3..10),
            root_pick in 0u32..1000,
            len in 1usize..600_000,
            seg in proptest::option::of(1000u64..200_000),
            salt in 0u8..255,
        ) {
            let (_net, mut drivers) = group(&hosts);
            let root = root_pick % hosts.len() as u32;
            if let Some(seg) = seg {
                drivers[root as usize].set_segment_bytes(seg).unwrap();
            }
            let want: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_mul(salt) ^ salt).collect();
            let mut bufs: Vec<Vec<u8>> = (0..hosts.len())
                .map(|r| if r as u32 == root { want.clone() } else { vec![!salt; len] })
                .collect();
            run(&mut drivers, &mut bufs, root);
            for (r, b) in bufs.iter().enumerate() {
                proptest::prop_assert!(b == &want, "rank {} differs", r);
            }
            for _ in 0..50 {
                for d in drivers.iter_mut() {
                    d.progress().unwrap();
                }
            }
            for (r, d) in drivers.iter().enumerate() {
                proptest::prop_assert!(d.quiescent(), "rank {} owes something", r);
            }
        }
    }

    /// A rank still in one broadcast hears of the next ones (announcements, data): each
    /// transfer's bytes are kept apart and handed to the call for that transfer.
    #[test]
    fn overlapping_broadcasts_stay_apart() {
        let hosts = [0, 1, 2, 3];
        let (_net, mut drivers) = group(&hosts);
        let lens = [700_000usize, 5, 1_300_000];
        let roots = [0u32, 2, 0];
        let data: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(t, &len)| (0..len).map(|k| (k * 7 + t * 13) as u8).collect())
            .collect();
        // Every root starts its broadcasts at once, before any other rank has moved.
        for (t, (&root, d)) in roots.iter().zip(&data).enumerate() {
            drivers[root as usize]
                .start(Bytes::copy_from_slice(d), TransferId(t as u32))
                .unwrap();
        }
        for d in drivers.iter_mut() {
            d.next_transfer = 3;
        }
        for _ in 0..10_000 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
            if drivers.iter().all(|d| d.outcomes.len() == 3) {
                break;
            }
        }
        for (r, d) in drivers.iter_mut().enumerate() {
            for (t, want) in data.iter().enumerate() {
                let id = TransferId(t as u32);
                assert_eq!(
                    d.outcomes.remove(&id),
                    Some(Outcome::Ended { finished: true }),
                    "rank {r}, transfer {t}"
                );
                if roots[t] as usize == r {
                    continue;
                }
                let mut got = vec![0u8; want.len()];
                for (off, bytes) in d.deliveries.remove(&id).unwrap_or_default() {
                    got[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
                }
                assert!(&got == want, "rank {r}, transfer {t}");
            }
            assert!(d.deliveries.is_empty());
        }
    }

    /// No round trip before the data: per broadcast the root announces to every other rank,
    /// every rank below the root's children also hears it from its tree parent (the relay),
    /// each reports its end (Done) and is told Close; nobody sends Ready or Go.
    #[test]
    fn broadcasts_start_without_ready_or_go() {
        let hosts = [0, 0, 1, 1, 2];
        let (net, mut drivers) = group(&hosts);
        let calls = 4u64;
        for i in 0..calls as u32 {
            let root = i % 5;
            let want: Vec<u8> = (0..200_000u32).map(|k| (k * 3 + i) as u8).collect();
            let mut bufs: Vec<Vec<u8>> = (0..5)
                .map(|r| {
                    if r == root {
                        want.clone()
                    } else {
                        vec![0; want.len()]
                    }
                })
                .collect();
            run(&mut drivers, &mut bufs, root);
            assert!(bufs.iter().all(|b| b == &want), "call {i}");
        }
        for _ in 0..50 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
        }
        let s = net.borrow().sessions.clone();
        let per_call = calls * (hosts.len() as u64 - 1);
        // The root's direct copies, and the relayed ones: exactly one down each tree edge
        // whose parent is not the root, from the parent.
        let mut direct = 0;
        let mut relayed = BTreeSet::new();
        let mut deep_edges = BTreeSet::new();
        for (from, to, m, _) in &net.borrow().announces {
            let SessionMsg::Announce {
                transfer,
                root,
                spec: windrose_proto::collective::CollectiveSpec::Broadcast { tree, .. },
                ..
            } = m
            else {
                panic!("not a broadcast's announcement: {m:?}");
            };
            if *from == root.0 {
                direct += 1;
                for (child, parent) in &tree.edges {
                    if parent != root {
                        deep_edges.insert((transfer.0, parent.0, child.0));
                    }
                }
            } else {
                assert!(relayed.insert((transfer.0, *from, *to)), "twice: {m:?}");
            }
        }
        assert_eq!(direct, per_call);
        assert!(!relayed.is_empty());
        assert_eq!(relayed, deep_edges);
        assert_eq!(
            s.get("announce"),
            Some(&(per_call + relayed.len() as u64)),
            "{s:?}"
        );
        assert_eq!(s.get("done"), Some(&per_call), "{s:?}");
        assert_eq!(s.get("close"), Some(&per_call), "{s:?}");
        assert_eq!(s.get("ready"), None, "{s:?}");
        assert_eq!(s.get("go"), None, "{s:?}");
        // 200,000 bytes in 64 KiB segments: three full ones travel apart from their heads on
        // each of the four tree edges, the last 3,392 bytes inline, like every session message.
        assert_eq!(net.borrow().split_frames, calls * 3 * 4);
        // The three travel straight into the receivers' buffers: only the inline rests are
        // copied there.
        let copied: u64 = drivers.iter().map(|d| d.stats().bytes_copied).sum();
        assert_eq!(copied, calls * 4 * 3392);
    }

    /// Where the root's direct path to a rank below its children is far slower than the
    /// tree's path (the triangle inequality broken), the rank starts on its parent's relayed
    /// copy and has the whole message long before the root's direct copy reaches it (without
    /// the relay it would wait for that copy, holding its parent's data).
    #[test]
    fn a_rank_starts_on_its_parents_copy_when_the_roots_is_slow() {
        let hosts = [0; 6];
        let options = Options {
            policy: "static:balanced-path".parse().unwrap(),
            ..Options::default()
        };
        let (net, _, mut drivers) = group_with(&hosts, options);
        let want: Vec<u8> = (0..300_000u32).map(|k| (k * 5 + 1) as u8).collect();
        let fresh = || -> Vec<Vec<u8>> {
            (0..6)
                .map(|r| {
                    if r == 0 {
                        want.clone()
                    } else {
                        vec![0; want.len()]
                    }
                })
                .collect()
        };
        run(&mut drivers, &mut fresh(), 0);
        // A rank below the root's children in the (static) tree.
        let deep = net
            .borrow()
            .announces
            .iter()
            .find_map(|(_, _, m, _)| match m {
                SessionMsg::Announce {
                    spec: windrose_proto::collective::CollectiveSpec::Broadcast { tree, .. },
                    ..
                } => tree.edges.iter().find(|e| e.1 != NodeId(0)).map(|e| e.0 .0),
                _ => None,
            })
            .expect("a tree of 6 ranks has a rank below the root's children");
        // The root's direct path to it: 1,000 bytes a second.
        net.borrow_mut().rate.insert((0, deep), 1e-6);
        let seen = net.borrow().announces.len();
        let mut bufs = fresh();
        let ended = run(&mut drivers, &mut bufs, 0);
        assert!(bufs.iter().all(|b| b == &want));
        let w = net.borrow();
        let direct_at = w.announces[seen..]
            .iter()
            .find(|(f, t, _, _)| (*f, *t) == (0, deep))
            .map(|a| a.3)
            .unwrap();
        assert!(
            ended[deep as usize] < direct_at,
            "rank {deep} ended at {} ns, the root's copy arrived at {direct_at} ns",
            ended[deep as usize]
        );
        assert!(
            w.announces[seen..]
                .iter()
                .any(|(f, t, _, _)| *f != 0 && *t == deep),
            "nobody relayed to rank {deep}"
        );
    }

    #[test]
    fn a_foreign_frame_is_reported_with_its_sender() {
        // Behind the group's own plan version, and too short to hold one.
        let (_, drivers) = group(&[0, 0, 0]);
        let plan = drivers[1].plan();
        let versioned = [&plan.to_le_bytes()[..], b"not a frame at all"].concat();
        for foreign in [versioned, b"short".to_vec()] {
            let (net, mut drivers) = group(&[0, 0, 0]);
            net.borrow_mut().mail[1].push_back((2, Bytes::from(foreign), 0, false));
            let mut found = None;
            for _ in 0..10 {
                if let Err(e) = drivers[1].progress() {
                    found = Some(e);
                    break;
                }
            }
            match found {
                Some(BcastError::BadFrame { from: 2, .. }) => {}
                other => panic!("expected a bad frame from rank 2, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_fixed_segment_size_is_used_and_checked() {
        let (_net, mut drivers) = group(&[0, 0, 0]);
        for bad in [0, (1 << 20) + 1] {
            let e = drivers[0].set_segment_bytes(bad).unwrap_err();
            assert!(e.contains(&bad.to_string()), "{e}");
        }
        // 300 kB in 1000-byte segments: 300 data frames down each tree edge.
        drivers[0].set_segment_bytes(1000).unwrap();
        let want: Vec<u8> = (0..300_000).map(|k| (k % 251) as u8).collect();
        let mut bufs = [want.clone(), vec![0; 300_000], vec![0; 300_000]];
        let before: Vec<u64> = drivers.iter().map(|d| d.stats().frames_received).collect();
        let t = TransferId(drivers[0].next_transfer);
        drivers[0].next_transfer += 1;
        drivers[0].start(Bytes::from(want.clone()), t).unwrap();
        for d in drivers.iter_mut().skip(1) {
            d.next_transfer += 1;
        }
        for _ in 0..10_000 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
            if drivers.iter().all(|d| d.outcomes.contains_key(&t)) {
                break;
            }
        }
        for r in 1..3 {
            for (off, data) in drivers[r].deliveries.remove(&t).unwrap() {
                bufs[r][off as usize..off as usize + data.len()].copy_from_slice(&data);
            }
            assert!(bufs[r] == want, "rank {r}");
            let frames = drivers[r].stats().frames_received - before[r];
            assert!(frames >= 300, "rank {r} got {frames} frames");
        }
    }

    /// The plans' words of the stats line: what the root planned, in a fixed order of
    /// `key value` pairs after the shim's counters (which the tests parse by position).
    #[test]
    fn the_plan_tally_counts_each_call_and_names_the_last_plan() {
        let mut tally = PlanTally::default();
        assert_eq!(tally.to_string(), "plans 0 changed 0 last-plan none");
        let (_net, mut drivers) = group(&[0, 0, 1, 1]);
        let mut want = vec![7u8; 300_000];
        for call in 0..3 {
            let before = drivers[0].stats();
            want[0] = call;
            let mut bufs: Vec<Vec<u8>> = (0..4)
                .map(|r| {
                    if r == 0 {
                        want.clone()
                    } else {
                        vec![0; want.len()]
                    }
                })
                .collect();
            run(&mut drivers, &mut bufs, 0);
            tally.add(&before, &drivers[0].stats());
            // A rank that did not root plans nothing.
            let quiet = drivers[1].stats();
            tally.add(&quiet, &quiet);
        }
        let last = drivers[0].stats().last_plan.expect("the root planned");
        assert_eq!(tally.plans, 3);
        assert_eq!(tally.last, Some(last));
        // The words, in their order.
        let mut first = PlanTally::default();
        first.add(
            &Stats::default(),
            &Stats {
                trees_planned: 1,
                last_plan: Some(PlanStats {
                    cost_us: 1_638_064,
                    built: true,
                    changed_links: 0,
                    swaps: 0,
                    edges_moved: 15,
                    measured_links: 9,
                }),
                ..Stats::default()
            },
        );
        assert_eq!(
            first.to_string(),
            "plans 1 changed 0 last-plan cost-ms 1638.064 built 1 links-taken-in 0 swaps 0 \
             edges-moved 15 measured-links 9"
        );
        // A group's first plan is built, and all its tree is new: every rank but the root
        // has a new parent.
        let (_net, mut drivers) = group(&[0, 0, 1, 1]);
        let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![1u8; 300_000]).collect();
        run(&mut drivers, &mut bufs, 0);
        let plan = drivers[0].stats().last_plan.unwrap();
        assert!(plan.built, "{plan:?}");
        assert_eq!(plan.edges_moved, 3, "{plan:?}");
    }

    #[test]
    fn a_root_outside_the_group_is_refused() {
        let (_net, mut drivers) = group(&[0, 0, 0]);
        let mut buf = vec![0u8; 10];
        assert!(matches!(
            drivers[0].bcast(&mut buf, 3),
            Err(BcastError::Argument(_))
        ));
    }

    #[test]
    fn segments_follow_the_message_size() {
        assert_eq!(segment_bytes(0), 64 << 10);
        assert_eq!(segment_bytes(4 << 20), 512 << 10);
        assert_eq!(segment_bytes(64 << 20), 1 << 20);
    }

    #[test]
    fn options_come_from_the_environment_and_bad_values_name_their_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let o = options_from(env(&[])).unwrap();
        assert_eq!(o, Options::default());
        assert_eq!(o.probe, None);
        let o = options_from(env(&[
            ("WINDROSE_MPI_TREE", "rebuild:balanced-path"),
            ("WINDROSE_MPI_PROBE_MS", "250"),
        ]))
        .unwrap();
        assert_eq!(
            o.policy,
            TreePolicy::Rebuild {
                algorithm: TreeAlgorithm::BalancedPath
            }
        );
        assert_eq!(o.probe, Some(Duration::from_millis(250)));
        assert_eq!(o.gossip, Some(DEFAULT_GOSSIP));
        let o = options_from(env(&[("WINDROSE_MPI_GOSSIP_MS", "250")])).unwrap();
        assert_eq!(o.gossip, Some(Duration::from_millis(250)));
        let o = options_from(env(&[("WINDROSE_MPI_GOSSIP_MS", "0")])).unwrap();
        assert_eq!(o.gossip, None);
        let o = options_from(env(&[("WINDROSE_MPI_SEGMENT", "256KiB")])).unwrap();
        assert_eq!(o.segment, Some(256 << 10));
        assert_eq!(o.protocol, BcastProtocol::Tree);
        for (v, want) in [
            ("tree", BcastProtocol::Tree),
            ("mob", BcastProtocol::Mob),
            ("auto", BcastProtocol::Auto),
        ] {
            let pairs: &'static [(&'static str, &'static str)] =
                Box::leak(vec![("WINDROSE_MPI_PROTOCOL", v)].into_boxed_slice());
            assert_eq!(options_from(env(pairs)).unwrap().protocol, want);
        }
        let o = options_from(env(&[("WINDROSE_MPI_PIECE", "64KiB")])).unwrap();
        assert_eq!(o.piece, Some(64 << 10));
        let o = options_from(env(&[("WINDROSE_MPI_SITE_MS", "2.5")])).unwrap();
        assert_eq!(o.site_floor, Some(Duration::from_micros(2500)));
        let o = options_from(env(&[("WINDROSE_MPI_TREE", "adapt:path:0.5")])).unwrap();
        assert_eq!(
            o.policy,
            TreePolicy::Adapt {
                strategy: Strategy::Path,
                threshold: 0.5
            }
        );
        for (k, v) in [
            ("WINDROSE_MPI_TREE", "sideways"),
            ("WINDROSE_MPI_TREE", "static:nope"),
            ("WINDROSE_MPI_PROBE_MS", "0"),
            ("WINDROSE_MPI_SEGMENT", "2000000"),
            ("WINDROSE_MPI_SEGMENT", "2MB"),
            ("WINDROSE_MPI_SEGMENT", "64kb"),
            ("WINDROSE_MPI_SITE_MS", "-1"),
            ("WINDROSE_MPI_SITE_MS", "near"),
            ("WINDROSE_MPI_GOSSIP_MS", "-5"),
            ("WINDROSE_MPI_GOSSIP_MS", "soon"),
            ("WINDROSE_MPI_PROTOCOL", "bittorrent"),
            ("WINDROSE_MPI_PIECE", "0"),
            ("WINDROSE_MPI_PIECE", "2MiB"),
        ] {
            let pairs: &'static [(&'static str, &'static str)] =
                Box::leak(vec![(k, v)].into_boxed_slice());
            let e = options_from(env(pairs)).unwrap_err();
            assert!(
                e.starts_with(&format!("{k}={v}")) || e.starts_with(k),
                "{e}"
            );
        }
    }

    /// The ends of one broadcast from `root` in a group that may disagree on its plan: each
    /// rank's call result (its buffer in `bufs`), once every call ended; panics if one never
    /// does (a hang).
    fn run_to_the_end(
        drivers: &mut [Driver<Loopback>],
        bufs: &mut [Vec<u8>],
        root: u32,
    ) -> Vec<Result<(), BcastError>> {
        let n = drivers.len();
        let (t, started) = begin_or_fail(drivers, bufs, root);
        let mut ended: Vec<Option<Result<(), BcastError>>> = vec![None; n];
        if let Err(e) = started {
            ended[root as usize] = Some(Err(e));
        }
        for _ in 0..100_000 {
            for (r, d) in drivers.iter_mut().enumerate() {
                if ended[r].is_some() {
                    continue;
                }
                if let Err(e) = d.progress() {
                    ended[r] = Some(Err(e));
                } else if let Some(outcome) = d.outcomes.remove(&t) {
                    let pieces = d.deliveries.remove(&t).unwrap_or_default();
                    ended[r] = Some(d.assemble(&mut bufs[r], root, outcome, pieces, t));
                }
            }
            if ended.iter().all(Option::is_some) {
                for d in drivers.iter_mut() {
                    d.target = None;
                }
                return ended.into_iter().map(Option::unwrap).collect();
            }
            if let Clock::Manual(c) = &drivers[0].clock {
                c.fetch_add(STEP_NS, Ordering::Relaxed);
            }
        }
        panic!("broadcast from {root} did not end: {ended:?}");
    }

    /// A rank whose plan changed alone (its sites re-measured as [0, 0, 1, 1] while the
    /// others still hold [0, 0, 0, 0], as a re-measurement reaching one rank first would) is
    /// refused by version: it takes no frame of the others' plan, the others none of its, no
    /// call hangs, a call that ends well holds the root's bytes, and every later call on the
    /// group fails with the mismatch. The same broadcast with the views agreed passes.
    #[test]
    fn a_rank_whose_plan_changed_alone_is_refused_and_nobody_hangs() {
        let agreed = vec![0, 0, 0, 0];
        let remeasured = vec![0, 0, 1, 1];
        assert_ne!(plan_version(0, &agreed), plan_version(0, &remeasured));
        assert_ne!(plan_version(0, &agreed), plan_version(1, &agreed));
        let len = 2_000_000;
        let want: Vec<u8> = (0..len)
            .map(|k| (k as u8).wrapping_mul(13) ^ 0x5a)
            .collect();
        let fresh = || -> Vec<Vec<u8>> {
            (0..4)
                .map(|r| {
                    if r == 0 {
                        want.clone()
                    } else {
                        vec![0xEE; len]
                    }
                })
                .collect()
        };
        for changed in [1usize, 2, 0] {
            let mut views = vec![agreed.clone(); 4];
            views[changed] = remeasured.clone();
            let (_net, mut drivers) = group_of_views(&views);
            let (mine, theirs) = (drivers[changed].plan(), drivers[(changed + 1) % 4].plan());
            let mut bufs = fresh();
            let ends = run_to_the_end(&mut drivers, &mut bufs, 0);
            match &ends[changed] {
                Err(BcastError::PlanMismatch {
                    theirs: t, mine: m, ..
                }) => {
                    assert_eq!((*t, *m), (theirs, mine), "rank {changed}");
                }
                other => panic!("rank {changed} (changed alone) ended with {other:?}"),
            }
            for (r, end) in ends.iter().enumerate() {
                match end {
                    Ok(()) => assert!(bufs[r] == want, "rank {r} ended well with other bytes"),
                    Err(BcastError::PlanMismatch { .. }) => {}
                    Err(e) => panic!("rank {r}: {e}"),
                }
            }
            // Every rank hears the changed rank's greeting: from then on each call fails
            // with the mismatch at once, before sending or taking anything.
            for (r, d) in drivers.iter_mut().enumerate() {
                let mut refused = None;
                for _ in 0..1000 {
                    if let Err(e) = d.progress() {
                        refused = Some(e);
                        break;
                    }
                }
                assert!(
                    matches!(refused, Some(BcastError::PlanMismatch { .. })),
                    "rank {r} (rank {changed} changed) never refused: {refused:?}"
                );
                let mut buf = vec![0u8; 10];
                assert!(matches!(
                    d.bcast(&mut buf, 0),
                    Err(BcastError::PlanMismatch { .. })
                ));
                assert!(
                    refused.unwrap().to_string().contains("plan version"),
                    "the message names the plan version"
                );
            }
        }
        // Agreed views: the same broadcast passes everywhere.
        let (_net, mut drivers) = group_of_views(&vec![agreed.clone(); 4]);
        let mut bufs = fresh();
        let ends = run_to_the_end(&mut drivers, &mut bufs, 0);
        assert!(ends.iter().all(Result::is_ok), "{ends:?}");
        assert!(bufs.iter().all(|b| b == &want));
    }

    /// Bytes of data frames on each pair during one broadcast from `root` of `len` bytes.
    fn series(
        drivers: &mut [Driver<Loopback>],
        net: &Net,
        root: u32,
        len: usize,
        salt: u8,
    ) -> BTreeMap<(u32, u32), u64> {
        net.borrow_mut().data_bytes.clear();
        let want: Vec<u8> = (0..len)
            .map(|k| (k as u8).wrapping_mul(31) ^ salt)
            .collect();
        let mut bufs: Vec<Vec<u8>> = (0..drivers.len())
            .map(|r| {
                if r as u32 == root {
                    want.clone()
                } else {
                    vec![!salt; len]
                }
            })
            .collect();
        run(drivers, &mut bufs, root);
        for (r, b) in bufs.iter().enumerate() {
            assert!(b == &want, "rank {r} differs (salt {salt})");
        }
        net.borrow().data_bytes.clone()
    }

    /// The ranks of two hosts of three ranks each, every pair at 100 MB/s.
    const TWO_HOSTS: [i32; 6] = [0, 0, 0, 3, 3, 3];

    fn two_hosts_at_100_mb_s(options: Options) -> (Net, Arc<AtomicU64>, Vec<Driver<Loopback>>) {
        let (net, clock, drivers) = group_with(&TWO_HOSTS, options);
        {
            let mut w = net.borrow_mut();
            for a in 0..6 {
                for b in 0..6 {
                    if a != b {
                        w.rate.insert((a, b), 0.1); // 100 MB/s
                    }
                }
            }
        }
        (net, clock, drivers)
    }

    /// Two hosts of three ranks, 100 MB/s everywhere; after the first broadcast the link from
    /// the root to one of its children on its own host drops to 2 MB/s. The root measures it
    /// from its own sends, and under the default policy (adapt) its later trees stop using
    /// it; under `static` the same series keeps it (so the test can tell them apart).
    fn slow_link_series(policy: &str) -> (u32, Vec<u64>, Stats) {
        let options = Options {
            policy: policy.parse().unwrap(),
            ..Options::default()
        };
        let (net, clock, mut drivers) = two_hosts_at_100_mb_s(options);
        let len = 4 << 20;
        let first = series(&mut drivers, &net, 0, len, 0);
        let slow = (1..3u32)
            .find(|&c| first.get(&(0, c)).is_some_and(|&b| b >= len as u64))
            .expect("the first tree sends from the root to a rank of its host");
        net.borrow_mut().rate.insert((0, slow), 0.002); // 2 MB/s
        let mut virtual_ms = Vec::new();
        let on_slow: Vec<u64> = (1..12u8)
            .map(|i| {
                let t0 = clock.load(Ordering::Relaxed);
                let bytes = series(&mut drivers, &net, 0, len, i);
                virtual_ms.push((clock.load(Ordering::Relaxed) - t0) / 1_000_000);
                bytes.get(&(0, slow)).copied().unwrap_or(0)
            })
            .collect();
        // Reported, not asserted: the virtual time each broadcast took.
        eprintln!(
            "{policy}: data bytes on the slowed link 0-{slow} per broadcast: {on_slow:?}; \
             virtual ms per broadcast: {virtual_ms:?}"
        );
        (slow, on_slow, drivers[0].stats())
    }

    #[test]
    fn adapt_stops_using_a_slowed_link_and_static_keeps_it() {
        let (slow, on_slow, stats) = slow_link_series("adapt");
        // The root needs a broadcast or two to measure the slowed link; from then on the
        // data goes around it.
        assert!(
            on_slow[0] > 0,
            "the slowed link 0-{slow} carried nothing at first"
        );
        let tail = &on_slow[on_slow.len() - 5..];
        assert!(
            tail.iter().all(|&b| b == 0),
            "adapt kept sending data on the slowed link 0-{slow}: {on_slow:?}"
        );
        assert!(stats.trees_changed >= 1, "{stats:?}");
        assert_eq!(stats.trees_planned, 12);
        let (slow, on_slow, stats) = slow_link_series("static:balanced-path");
        assert!(
            on_slow.iter().all(|&b| b > 0),
            "static left the link 0-{slow}: {on_slow:?}"
        );
        assert_eq!(stats.trees_changed, 0);
    }

    /// A link between two ranks below the root slows after the first broadcast: only its
    /// sender measures it. With the ranks' rows going to the root as their broadcasts end
    /// (the default), adapt's later trees leave it; with `WINDROSE_MPI_GOSSIP_MS=0` the root
    /// never hears of it and keeps sending over it.
    fn far_link_series(gossip: Option<Duration>) -> ((u32, u32), Vec<u64>) {
        let options = Options {
            gossip,
            ..Options::default()
        };
        let (net, _clock, mut drivers) = two_hosts_at_100_mb_s(options);
        let len = 4 << 20;
        let first = series(&mut drivers, &net, 0, len, 0);
        // A pair on one host (between hosts every pair shares the sites' WAN path, and the
        // view takes a step on one pair as the sites').
        let far = first
            .iter()
            .find(|(&(a, b), &bytes)| {
                a != 0 && TWO_HOSTS[a as usize] == TWO_HOSTS[b as usize] && bytes >= len as u64
            })
            .map(|(&pair, _)| pair)
            .unwrap_or_else(|| panic!("no rank below the root forwards on its host: {first:?}"));
        net.borrow_mut().rate.insert(far, 0.002); // 2 MB/s
        let on_far: Vec<u64> = (1..12u8)
            .map(|i| {
                let bytes = series(&mut drivers, &net, 0, len, i);
                bytes.get(&far).copied().unwrap_or(0)
            })
            .collect();
        eprintln!("gossip {gossip:?}: data bytes on the slowed link {far:?}: {on_far:?}");
        (far, on_far)
    }

    #[test]
    fn the_root_learns_a_link_only_another_rank_sends_on() {
        let (far, on_far) = far_link_series(Some(Duration::from_millis(1)));
        assert!(
            on_far[0] > 0,
            "the slowed link {far:?} carried nothing at first"
        );
        let tail = &on_far[on_far.len() - 5..];
        assert!(
            tail.iter().all(|&b| b == 0),
            "the root kept the slowed link {far:?} with the ranks' rows: {on_far:?}"
        );
        let (far, on_far) = far_link_series(None);
        assert!(
            on_far.iter().all(|&b| b > 0),
            "without the rows the root cannot know {far:?} slowed, yet left it: {on_far:?}"
        );
    }

    /// Ranks per site and sites of the testbed's shape (issue 18): 4 x 4, one rank per host.
    const SITE_SIZE: u32 = 4;
    const SITES: u32 = 4;

    /// The testbed's shape in virtual time: four sites of four ranks, 100 MB/s and 0.05 ms
    /// one way inside a site, a WAN path of 5 MB/s and 10 ms one way per ordered pair of
    /// sites, shared by every rank pair between them. The sites come from the round trips
    /// as the shim's hosts mode finds them ([`crate::sites::sites`]).
    fn four_sites(options: Options) -> (Net, Arc<AtomicU64>, Vec<Driver<Loopback>>) {
        let n = (SITE_SIZE * SITES) as usize;
        let site = |r: u32| r / SITE_SIZE;
        let one_way_ns = |a: u32, b: u32| {
            if site(a) == site(b) {
                50_000
            } else {
                10_000_000
            }
        };
        let rtt_s: Vec<f64> = (0..n * n)
            .map(|k| {
                let (a, b) = ((k / n) as u32, (k % n) as u32);
                2.0 * one_way_ns(a, b) as f64 / 1e9
            })
            .collect();
        let sites = crate::sites::sites(n, &rtt_s, crate::sites::DEFAULT_FLOOR).unwrap();
        assert_eq!(sites, (0..n as u32).map(site).collect::<Vec<_>>());
        let hosts: Vec<i32> = sites.iter().map(|&s| s as i32).collect();
        let (net, clock, drivers) = group_with(&hosts, options);
        {
            let mut w = net.borrow_mut();
            for a in 0..n as u32 {
                for b in 0..n as u32 {
                    if a == b {
                        continue;
                    }
                    w.latency.insert((a, b), one_way_ns(a, b));
                    if site(a) == site(b) {
                        w.rate.insert((a, b), 0.1); // 100 MB/s
                    } else {
                        // The path's key: its first ranks' pair.
                        let key = (site(a) * SITE_SIZE, site(b) * SITE_SIZE);
                        w.lane.insert((a, b), key);
                        w.rate.insert(key, 0.005); // 5 MB/s
                    }
                }
            }
        }
        (net, clock, drivers)
    }

    /// Data bytes sent straight from site `from` to site `to` in `bytes` (per rank pair).
    fn between_sites(bytes: &BTreeMap<(u32, u32), u64>, from: u32, to: u32) -> u64 {
        bytes
            .iter()
            .filter(|(&(a, b), _)| a / SITE_SIZE == from && b / SITE_SIZE == to)
            .map(|(_, &v)| v)
            .sum()
    }

    /// Issue 18's series in virtual time: 4 MiB broadcasts from rank 0 over [`four_sites`]
    /// under `policy`; after `before` calls, the WAN path between site 0 and the site the
    /// last call sent the most data to straight from site 0 (a path the tree uses) slows to
    /// 0.5 MB/s both ways, as the testbed's `wan:0:1` did.
    fn four_sites_series(policy: &str, before: usize, after: usize) -> FourSites {
        let options = Options {
            policy: policy.parse().unwrap(),
            ..Options::default()
        };
        let (net, clock, mut drivers) = four_sites(options);
        let len = 4 << 20;
        let (mut slowed, mut direct, mut virtual_ms) = (None, Vec::new(), Vec::new());
        let mut last = BTreeMap::new();
        for i in 0..before + after {
            if i == before {
                let site = (1..SITES)
                    .max_by_key(|&s| between_sites(&last, 0, s))
                    .expect("three other sites");
                let mut w = net.borrow_mut();
                w.rate.insert((0, site * SITE_SIZE), 0.0005); // 0.5 MB/s
                w.rate.insert((site * SITE_SIZE, 0), 0.0005);
                slowed = Some(site);
            }
            let t0 = clock.load(Ordering::Relaxed);
            last = series(&mut drivers, &net, 0, len, i as u8);
            virtual_ms.push((clock.load(Ordering::Relaxed) - t0) / 1_000_000);
            if let Some(site) = slowed {
                direct.push(between_sites(&last, 0, site));
            }
        }
        let site = slowed.expect("after > 0");
        // Reported, not asserted: what the root planned, and the virtual times.
        let stats = drivers[0].stats();
        eprintln!(
            "four sites, {policy}: WAN 0<->{site} slowed after call {before}; data bytes from \
             site 0 to site {site} per call since: {direct:?}; virtual ms per call: \
             {virtual_ms:?}; root: {stats:?}"
        );
        FourSites {
            site,
            direct,
            virtual_ms,
            stats,
        }
    }

    /// What [`four_sites_series`] saw.
    struct FourSites {
        site: u32,
        /// Per call after the slowdown: data bytes straight from site 0 to the slowed site.
        direct: Vec<u64>,
        /// Per call: virtual ms.
        virtual_ms: Vec<u64>,
        stats: Stats,
    }

    /// Issue 18: on the testbed's shape, once the WAN path out of the root's site that its
    /// tree crosses slows tenfold, the root's next trees go around it (through another site),
    /// and a call takes about what it took before the slowdown. Before the fix the root's
    /// call returned as soon as its segments were handed out, so the root never measured its
    /// own links and kept crossing the slowed path (8.5 s per call here; 9 s on the
    /// testbed); `static` keeps crossing it whatever the root measures.
    #[test]
    fn four_sites_leave_a_slowed_wan_path() {
        let (before, after) = (6, 8);
        let run = four_sites_series("adapt", before, after);
        let pre = &run.virtual_ms[..before];
        let pre_max = *pre.iter().max().unwrap();
        // The call that runs into the slowdown crosses the path: the root cannot know yet.
        assert!(
            run.direct[0] > 0,
            "the path to site {} was not in use",
            run.site
        );
        // From the second call after, nothing crosses it and a call takes what it took before.
        for (k, (&bytes, &ms)) in run
            .direct
            .iter()
            .zip(&run.virtual_ms[before..])
            .enumerate()
            .skip(1)
        {
            assert_eq!(
                bytes, 0,
                "call {k} after the slowdown still sent data straight from site 0 to site {}: {:?}",
                run.site, run.direct
            );
            assert!(
                ms * 4 <= pre_max * 5,
                "call {k} after the slowdown took {ms} virtual ms, before it {pre:?}"
            );
        }
        assert!(run.stats.trees_changed >= 1, "{:?}", run.stats);
        assert!(run.stats.last_plan.is_some(), "{:?}", run.stats);
        let fixed = four_sites_series("static:balanced-path", before, after);
        assert!(
            fixed.direct.iter().all(|&b| b > 0),
            "static left the path to site {}: {:?}",
            fixed.site,
            fixed.direct
        );
        assert_eq!(fixed.stats.trees_changed, 0);
    }

    /// Runs every rank until nothing moves, then checks nobody owes anything.
    fn settle(drivers: &mut [Driver<Loopback>]) {
        for _ in 0..200 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
            if let Clock::Manual(c) = &drivers[0].clock {
                c.fetch_add(STEP_NS, Ordering::Relaxed);
            }
        }
        for (r, d) in drivers.iter().enumerate() {
            assert!(d.quiescent(), "rank {r} is not quiescent");
        }
    }

    fn four_sites_with(
        protocol: BcastProtocol,
        policy: &str,
    ) -> (Net, Arc<AtomicU64>, Vec<Driver<Loopback>>) {
        four_sites(Options {
            protocol,
            policy: policy.parse().unwrap(),
            // The chain with 64 KiB segments, as tuned's forced pipeline on the testbed.
            segment: policy.ends_with("chain").then_some(64 << 10),
            ..Options::default()
        })
    }

    /// Every rank ends with the root's bytes when the broadcasts run as MOB between the four
    /// sites: 1, 4 and 16 MiB, every root, calls one after the other on one group (as one
    /// communicator's calls), each ending at every rank only with every piece everywhere.
    #[test]
    fn mob_between_four_sites_gets_every_byte_to_every_rank() {
        let (net, _clock, mut drivers) = four_sites_with(BcastProtocol::Mob, "adapt");
        let n = drivers.len() as u32;
        for (i, len) in [1usize << 20, 4 << 20, 16 << 20].into_iter().enumerate() {
            for root in 0..n {
                series(&mut drivers, &net, root, len, (i as u8) * 17 + root as u8);
            }
        }
        let multicasts: u64 = drivers.iter().map(|d| d.stats().multicasts).sum();
        assert_eq!(multicasts, 3 * u64::from(n), "every call ran MOB");
        settle(&mut drivers);
    }

    /// Virtual ms per call of `calls` broadcasts of each size in `sizes` from rank 0 over
    /// [`four_sites`], one group for the whole series, and per call the ms between the last
    /// rank holding every byte and the last call returning (the wait for the end).
    fn four_sites_times(
        protocol: BcastProtocol,
        policy: &str,
        sizes: &[(usize, usize)],
    ) -> Vec<(usize, Vec<f64>, Vec<f64>)> {
        let (net, clock, mut drivers) = four_sites_with(protocol, policy);
        let n = drivers.len();
        let mut out = Vec::new();
        for (k, &(len, calls)) in sizes.iter().enumerate() {
            let (mut ms, mut tail) = (Vec::new(), Vec::new());
            for c in 0..calls {
                let salt = (k * 16 + c) as u8;
                let want: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(29) ^ salt)
                    .collect();
                let mut bufs: Vec<Vec<u8>> = (0..n)
                    .map(|r| {
                        if r == 0 {
                            want.clone()
                        } else {
                            vec![!salt; len]
                        }
                    })
                    .collect();
                let t0 = clock.load(Ordering::Relaxed);
                let (_, held) = run_timed(&mut drivers, &mut bufs, 0);
                let t1 = clock.load(Ordering::Relaxed);
                assert!(
                    bufs.iter().all(|b| b == &want),
                    "{protocol:?} {policy} {len}"
                );
                ms.push((t1 - t0) as f64 / 1e6);
                tail.push((t1 - held.iter().max().unwrap()) as f64 / 1e6);
                if protocol == BcastProtocol::Auto {
                    // The Host's choice on this view: Balanced Multicasting at every size.
                    assert_eq!(drivers[0].stats().last_choice, Some(Candidate::Balanced));
                }
            }
            out.push((len, ms, tail));
        }
        drop(net);
        out
    }

    fn median(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// Issue 18's goal in virtual time on the testbed's shape (4 sites of 4 ranks, 100 MB/s
    /// inside, one 5 MB/s path with 10 ms one way per ordered pair of sites): MOB between the
    /// sites against the root's adapted tree and a chain (`static:chain`, the pipeline
    /// 0 -> 1 -> ... -> 15, which crosses each of three WAN paths once, like tuned's
    /// pipeline), median virtual ms per call from rank 0. A tree crosses a WAN path out of
    /// site 0 at its 5 MB/s at best; MOB takes every other site's third of the pieces over
    /// its own path and the sites pass them on to each other, so each site takes in 15 MB/s.
    #[test]
    fn mob_beats_the_tree_and_the_chain_between_four_sites() {
        let sizes = [(1usize << 20, 3), (4 << 20, 3), (16 << 20, 2)];
        let mob = four_sites_times(BcastProtocol::Mob, "adapt", &sizes);
        let tree = four_sites_times(BcastProtocol::Tree, "adapt", &sizes);
        let chain = four_sites_times(BcastProtocol::Tree, "static:chain", &sizes);
        let auto = four_sites_times(BcastProtocol::Auto, "adapt", &sizes);
        for k in 0..sizes.len() {
            let m = median(&mob[k].1);
            let best = median(&tree[k].1).min(median(&chain[k].1));
            eprintln!(
                "four sites, {} MiB: mob {:.0} ms (end wait {:.0}), tree {:.0}, chain {:.0}, \
                 auto {:.0} ms; best tree / mob {:.2}; per call mob {:?} tree {:?} chain {:?} auto {:?}",
                sizes[k].0 >> 20,
                m,
                median(&mob[k].2),
                median(&tree[k].1),
                median(&chain[k].1),
                median(&auto[k].1),
                best / m,
                mob[k].1,
                tree[k].1,
                chain[k].1,
                auto[k].1
            );
            // MOB's wait for the end (its acknowledgement tree, up and down) is about two
            // WAN round trips: 46-48 virtual ms here.
            assert!(median(&mob[k].2) <= 60.0, "{:?}", mob[k].2);
        }
        let ratio = |v: &[(usize, Vec<f64>, Vec<f64>)], k: usize| {
            median(&tree[k].1).min(median(&chain[k].1)) / median(&v[k].1)
        };
        // Measured: MOB 0.99x, 1.57x, 2.41x and the automatic choice (Balanced
        // Multicasting) 2.46x, 1.85x, 1.86x the better of the tree and the chain at 1, 4
        // and 16 MiB. At 1 MiB MOB's start-up (peerings, then a request per piece, each a
        // WAN round trip) and its end take as long as the stream. (With 64 KiB pieces at
        // 4 MiB MOB was 1.86x here but 0.86x on the testbed: see [`piece_bytes`].)
        assert!(ratio(&mob, 0) >= 0.9, "mob at 1 MiB: {:.2}", ratio(&mob, 0));
        assert!(ratio(&mob, 1) >= 1.5, "mob at 4 MiB: {:.2}", ratio(&mob, 1));
        assert!(
            ratio(&mob, 2) >= 2.3,
            "mob at 16 MiB: {:.2}",
            ratio(&mob, 2)
        );
        for (k, &(len, _)) in sizes.iter().enumerate() {
            let r = ratio(&auto, k);
            assert!(r >= 1.8, "auto at {len} B: {r:.2}");
        }
    }

    /// Errors map under MOB as under the tree: a rank whose buffer is shorter than the root's
    /// message gets `Truncated` (nothing written past its buffer), one whose buffer is longer
    /// `Short`; the others get the root's bytes, nobody hangs, and the next call passes.
    #[test]
    fn mob_maps_a_length_mismatch_as_the_tree_does() {
        let (net, _clock, mut drivers) = four_sites_with(BcastProtocol::Mob, "adapt");
        let len = 1usize << 20;
        let want: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(13) ^ 5).collect();
        let mut bufs: Vec<Vec<u8>> = (0..drivers.len())
            .map(|r| match r {
                0 => want.clone(),
                5 => vec![0; len - 100],
                9 => vec![0; len + 100],
                _ => vec![0; len],
            })
            .collect();
        let ends = run_to_the_end(&mut drivers, &mut bufs, 0);
        for (r, end) in ends.iter().enumerate() {
            match (r, end) {
                (5, Err(BcastError::Truncated { buffer, at_least })) => {
                    assert_eq!(*buffer, len as u64 - 100);
                    assert!(*at_least > *buffer);
                }
                (9, Err(BcastError::Short { buffer, message })) => {
                    assert_eq!((*buffer, *message), (len as u64 + 100, len as u64));
                }
                (5 | 9, other) => panic!("rank {r}: {other:?}"),
                (_, Ok(())) => assert!(bufs[r] == want, "rank {r} differs"),
                (_, Err(e)) => panic!("rank {r}: {e}"),
            }
        }
        assert_eq!(drivers[0].stats().multicasts, 1);
        series(&mut drivers, &net, 3, len, 77);
        assert_eq!(drivers[3].stats().multicasts, 1);
    }

    /// A MOB member takes pieces from several peers (its site's and the other sites'): its
    /// payload receives are posted as their heads come, several at once, not one blocking
    /// receive at a time (issue 18: under MPI one payload at a time starved the flows
    /// between the other sites), and never more than [`PAYLOADS_PER_PEER`] per peer.
    #[test]
    fn a_rank_receives_payloads_from_several_peers_at_once() {
        let (net, _clock, mut drivers) = four_sites_with(BcastProtocol::Mob, "adapt");
        series(&mut drivers, &net, 0, 4 << 20, 3);
        let most: Vec<u32> = drivers.iter().map(|d| d.max_receiving).collect();
        let bound = (PAYLOADS_PER_PEER * (drivers.len() - 1)) as u32;
        assert!(
            most[1..].iter().all(|&m| m >= 2),
            "every member had two payloads or more in flight at once: {most:?}"
        );
        assert!(most.iter().all(|&m| m <= bound), "{most:?} above {bound}");
        settle(&mut drivers);
        for d in &drivers {
            assert_eq!(d.receiving, 0);
        }
    }

    /// A peer's frames reach the Host in the order it sent them: a small frame behind a
    /// frame whose payload is still on its way waits for it, and frames of another peer
    /// do not.
    #[test]
    fn a_peers_frames_keep_their_order_behind_a_payload_in_flight() {
        let (net, clock, mut drivers) = group_with(&[0, 1, 2], Options::default());
        settle(&mut drivers);
        let now = clock.load(Ordering::Relaxed);
        let plan = drivers[0].plan;
        let wire = |message: &Message, split: bool| {
            let (head, payload) = if split {
                let p = encode_parts(message).unwrap();
                (p.head, p.payload)
            } else {
                (encode(message).unwrap(), Bytes::new())
            };
            let mut w = plan.to_le_bytes().to_vec();
            w.extend_from_slice(&head);
            (Bytes::from(w), payload)
        };
        // Segments of a broadcast nobody announced yet (held until it is).
        let segment = |offset: u64, len: usize| {
            Message::Broadcast(BroadcastMsg::Data(DataSegment {
                transfer: TransferId(9),
                offset,
                total_len: 1 << 20,
                payload: Bytes::from(vec![7u8; len]),
            }))
        };
        let (big_head, big_payload) = wire(&segment(0, 512 << 10), true);
        let (small, _) = wire(&segment(512 << 10, 100), false);
        let (other, _) = wire(&segment(600 << 10, 100), false);
        {
            let mut w = net.borrow_mut();
            let mail = &mut w.mail[0];
            mail.push_back((1, big_head, now, false));
            mail.push_back((1, big_payload, now + 10 * STEP_NS, true));
            mail.push_back((1, small, now, false));
            mail.push_back((2, other, now, false));
        }
        let before = drivers[0].stats().frames_received;
        drivers[0].progress().unwrap();
        assert_eq!(drivers[0].receiving, 1, "the payload's receive is posted");
        assert_eq!(
            drivers[0].stats().frames_received,
            before + 1,
            "rank 2's frame went in, rank 1's small one waits behind its payload"
        );
        clock.fetch_add(10 * STEP_NS, Ordering::Relaxed);
        drivers[0].progress().unwrap();
        assert_eq!(drivers[0].receiving, 0);
        assert_eq!(drivers[0].stats().frames_received, before + 3);
        assert!(drivers[0].inbound.iter().all(VecDeque::is_empty));
    }
}
