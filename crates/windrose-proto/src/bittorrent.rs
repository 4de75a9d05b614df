//! BitTorrent as the MOB paper (seed 002, Sections 2.5 and 3) describes the *original* client,
//! as the baseline MOB is measured against.
//!
//! # The protocol
//!
//! - **Tracker.** The tracker is a role of the root ([`SwarmSetup::root`]), not a separate
//!   service. On [`Input::Start`] every other node sends `Signal::Announce` to it and gets back a
//!   [`PeerList`] of up to [`peer_list_len`](BitTorrentConfig::peer_list_len) nodes drawn at
//!   random among the nodes "already downloading the file": the root itself and every node
//!   that announced before (and has not failed). Drawing only among earlier announcers is what
//!   the paper says, and it keeps the peer graph connected (every node links to an earlier one
//!   or to the root), so no node is cut off from the data whatever the list length.
//! - **Peerings.** A node sends `Signal::Hello` to every listed node; the receiver adds the
//!   sender to its peers. Each side then sends its `Bitfield` (when it holds any piece), and a
//!   `Have` to its peers for each piece it obtains later: to every peer in the original
//!   client; by default here only to the peers not known to hold the piece, which changes no
//!   decision (see [`redundant_haves`](BitTorrentConfig::redundant_haves)).
//! - **Interest.** A node keeps, per peer, the number of pieces the peer has that it lacks, and
//!   sends `Interested` / `NotInterested` when that number leaves / reaches zero.
//! - **Choking (tit-for-tat).** Every [`rechoke_s`](BitTorrentConfig::rechoke_s) (10 s) a node
//!   unchokes the [`unchoke_slots`](BitTorrentConfig::unchoke_slots) (4) interested peers with
//!   the highest download rate *from* them; a seed (a node holding every piece) ranks by its
//!   upload rate *to* them instead. Ties (at the start every rate is zero) are broken at random.
//!   One more peer, the optimistic unchoke, is drawn at random among the other interested peers
//!   every [`optimistic_s`](BitTorrentConfig::optimistic_s) (30 s), a newcomer (a peer whose
//!   peering opened less than `optimistic_s` ago) [`newcomer_weight`](BitTorrentConfig::newcomer_weight)
//!   (3) times as likely as the others. So with at most `unchoke_slots + 1` interested peers
//!   every one of them is unchoked. So that a run does not idle until the first rechoke, a free
//!   slot (fewer than `unchoke_slots + 1` interested peers unchoked) is filled at once when a
//!   peer becomes interested or an unchoked one loses interest or fails, with the best
//!   candidate by the same ranking. Rates are measured inside the machine from `now` and piece
//!   sizes: bytes received from (or, for uploads, transmitted to, as the driver's
//!   `SendComplete` tells) each peer over a sliding window of
//!   [`rate_window_s`](BitTorrentConfig::rate_window_s) (20 s) in 20 buckets.
//! - **Pieces.** A node keeps [`outstanding`](BitTorrentConfig::outstanding) (R = 5) requests
//!   outstanding at every peer that unchokes it, each for a piece chosen **uniformly at random**
//!   among the pieces that peer has and that the node neither holds nor has requested elsewhere.
//!   This is the original client as the paper describes it: *random*, not rarest-first, and no
//!   end-game mode. An uploader serves a request from an unchoked peer at once and ignores
//!   requests from choked peers; a downloader that is choked releases its outstanding requests
//!   to that peer and asks for the pieces elsewhere. (A released request the uploader served
//!   anyway, because it unchoked again before the request arrived, brings a duplicate that is
//!   dropped.) A peer that owes pieces but has sent none for
//!   [`request_timeout_s`](BitTorrentConfig::request_timeout_s) (60 s) has its requests
//!   released the same way, so a peer that went silent cannot hold pieces hostage. Every
//!   received piece is checked with the setup's verifier before it is stored,
//!   announced or forwarded; a bad piece is dropped and requested again, and its sender is
//!   dropped for good (unless it is the root): it is treated as failed and never heard again.
//!   After [`MAX_BAD_COPIES`](crate::pieces::MAX_BAD_COPIES) bad copies of one piece, from any
//!   senders, the node aborts ([`AbortReason::BadPiece`](crate::node::AbortReason::BadPiece)).
//! - **Termination.** A node holding every piece sends `Signal::Complete` (argument: its id) to
//!   the tracker and keeps serving. When every node that has not failed is complete the tracker
//!   sends `Signal::AllComplete` to all of them and finishes; a node finishes when it receives
//!   it. If the tracker fails, nobody can tell when everyone is done: a node then finishes as
//!   soon as it is complete itself (issue 8 will do better).
//!
//! Every node delivers the data in order ([`Output::Deliver`]) and reports
//! [`Report::Progress`] on every new piece; the root, which is given the data, reports that it
//! holds it all at the start and delivers nothing. A finished node ignores whatever still
//! arrives. [`Input::PeerFailed`] drops the peer and re-requests its outstanding pieces
//! elsewhere. All randomness comes from the `ChaCha8Rng` given to [`BitTorrent::new`];
//! everything is iterated in node-id order, so a run is reproducible.
//!
//! # Why it wastes the wide area
//!
//! Nothing coordinates the nodes of a cluster: each asks remote peers for random pieces its
//! cluster may already hold or be fetching, and a WAN transfer (R pieces queued on a shared
//! WAN link) lasts long enough for the piece to reach the cluster another way meanwhile. So
//! each cluster imports the data several times over, the more so the fewer the pieces (R
//! requests per remote peer are then a large share of the file): in the simulator, 4 x 16
//! nodes, 600 MB, WAN 8 MB/s, each remote cluster imported it 2.1 times in 256 KiB pieces
//! and 4.2 times in 1 MiB pieces. That is the paper's explanation of BitTorrent's low
//! throughput (Section 4) and what MOB's mob shares avoid.
//!
//! # Cost
//!
//! Per message O(log peers), except per new piece O(peers) (the `Have`s it causes anyway) and
//! per request O(peers); a random piece is drawn by rejection from the smaller of "pieces the
//! peer has" and "pieces not requested", falling back to one scan of that smaller set when the
//! candidates are rare. Piece bytes are never copied.
//!
//! Timers: [`RECHOKE_TIMER`] and [`OPTIMISTIC_TIMER`], periodic until the node finishes.
//!
//! [`PeerList`]: crate::pieces::PeerList

use crate::frame::Message;
use crate::node::{
    Input, Output, Outputs, Protocol, ProtocolError, Report, SendId, SetupError, Status, TimerId,
};
use crate::pieces::{PeerList, Piece, PieceMsg, PieceRef, Signal, SignalMsg};
use crate::pieces::{PieceStore, SourceMismatch, SwarmSetup};
use crate::time::Time;
use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use windrose_model::NodeId;

/// The periodic tit-for-tat re-evaluation (every [`BitTorrentConfig::rechoke_s`]).
pub const RECHOKE_TIMER: TimerId = TimerId(1);
/// The periodic rotation of the optimistic unchoke (every [`BitTorrentConfig::optimistic_s`]).
pub const OPTIMISTIC_TIMER: TimerId = TimerId(2);

/// Buckets of the sliding rate window.
const RATE_BUCKETS: usize = 20;

/// BitTorrent's parameters; the defaults are the paper's (original client) values.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BitTorrentConfig {
    /// Most peers the tracker lists in answer to an announce (C; default 50).
    pub peer_list_len: usize,
    /// Peers unchoked by tit-for-tat at each rechoke (default 4); one optimistic unchoke comes
    /// on top, so N = `unchoke_slots + 1` peers are unchoked at a time.
    pub unchoke_slots: usize,
    /// Seconds between two tit-for-tat re-evaluations (default 10).
    pub rechoke_s: f64,
    /// Seconds between two optimistic unchoke rotations, and how long a peering counts as a
    /// newcomer (default 30).
    pub optimistic_s: f64,
    /// How many times as likely a newcomer is to be picked as the optimistic unchoke
    /// (default 3).
    pub newcomer_weight: u32,
    /// Requests outstanding per peer (R; default 5).
    pub outstanding: usize,
    /// Length of the sliding window rates are measured over, seconds (default 20).
    pub rate_window_s: f64,
    /// Send a `Have` also to peers known to hold the piece already, as the original client
    /// does (default false). Such a `Have` changes nothing at its receiver (neither what it
    /// can request nor its interest), so leaving it out changes no decision of the protocol;
    /// it only saves tiny messages, about half of all messages of a run, which is what the
    /// simulator's time goes into.
    pub redundant_haves: bool,
    /// A peer that has had requests outstanding without sending any piece for this long, in
    /// seconds, is deemed stuck: its requests are released and asked for elsewhere (default
    /// 60, mainline's snubbing delay; checked at each rechoke). The bound that keeps a node
    /// from waiting for ever on a peer that went silent without being declared failed.
    pub request_timeout_s: f64,
}

impl Default for BitTorrentConfig {
    fn default() -> Self {
        BitTorrentConfig {
            peer_list_len: 50,
            unchoke_slots: 4,
            rechoke_s: 10.0,
            optimistic_s: 30.0,
            newcomer_weight: 3,
            outstanding: 5,
            rate_window_s: 20.0,
            redundant_haves: false,
            request_timeout_s: 60.0,
        }
    }
}

impl BitTorrentConfig {
    /// Checks that every count is at least 1 and every span positive and finite (a zero period
    /// would re-arm a timer at the same instant for ever).
    pub fn validate(&self) -> Result<(), SetupError> {
        let count = |what: &'static str, v: usize| {
            if v == 0 {
                Err(SetupError::Config {
                    what,
                    requirement: "at least 1",
                    value: "0".into(),
                })
            } else {
                Ok(())
            }
        };
        count("peer_list_len", self.peer_list_len)?;
        count("unchoke_slots", self.unchoke_slots)?;
        count("outstanding", self.outstanding)?;
        count("newcomer_weight", self.newcomer_weight as usize)?;
        for (what, v) in [
            ("rechoke_s", self.rechoke_s),
            ("optimistic_s", self.optimistic_s),
            ("rate_window_s", self.rate_window_s),
            ("request_timeout_s", self.request_timeout_s),
        ] {
            // At least a microsecond, at most about 30 years: Time stays far from saturation.
            if !(1e-6..=1e9).contains(&v) {
                return Err(SetupError::Config {
                    what,
                    requirement: "between 1e-6 and 1e9 seconds",
                    value: v.to_string(),
                });
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The choking algorithm, as pure functions (the machine and the tests use the same code)

/// What the choking algorithm knows of one peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ChokeCandidate {
    /// The peer.
    pub peer: NodeId,
    /// Bytes received from it over the rate window (its download rate times the window).
    pub downloaded: u64,
    /// Bytes transmitted to it over the rate window (its upload rate times the window).
    pub uploaded: u64,
    /// It has declared itself interested.
    pub interested: bool,
    /// Its peering opened less than one optimistic period ago.
    pub newcomer: bool,
}

/// Tit-for-tat: the `slots` interested peers with the most bytes downloaded from them (a seed,
/// which downloads nothing: uploaded to them), best first. Ties are broken at random, so that
/// at the start, when every rate is zero, the unchoked peers are a random choice rather than
/// the lowest ids.
pub fn regular_unchokes(
    candidates: &[ChokeCandidate],
    seed: bool,
    slots: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<NodeId> {
    let mut ranked: Vec<(u64, u64, NodeId)> = candidates
        .iter()
        .filter(|c| c.interested)
        .map(|c| {
            let rate = if seed { c.uploaded } else { c.downloaded };
            (rate, rng.gen::<u64>(), c.peer)
        })
        .collect();
    ranked.sort_unstable_by_key(|&r| std::cmp::Reverse(r));
    ranked.into_iter().take(slots).map(|(_, _, p)| p).collect()
}

/// The optimistic unchoke: one interested peer outside `exclude`, drawn at random, each
/// newcomer `newcomer_weight` times as likely as any other peer. None without a candidate.
pub fn optimistic_unchoke(
    candidates: &[ChokeCandidate],
    exclude: &[NodeId],
    newcomer_weight: u32,
    rng: &mut ChaCha8Rng,
) -> Option<NodeId> {
    let weight = |c: &ChokeCandidate| {
        if c.newcomer {
            u64::from(newcomer_weight.max(1))
        } else {
            1
        }
    };
    let pool = || {
        candidates
            .iter()
            .filter(|c| c.interested && !exclude.contains(&c.peer))
    };
    let total: u64 = pool().map(weight).sum();
    if total == 0 {
        return None;
    }
    let mut r = rng.gen_range(0..total);
    for c in pool() {
        let w = weight(c);
        if r < w {
            return Some(c.peer);
        }
        r -= w;
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Bytes over a sliding window of [`RATE_BUCKETS`] buckets.
#[derive(Clone, Debug, Default)]
struct RateMeter {
    /// The absolute bucket number each slot holds.
    stamp: [u64; RATE_BUCKETS],
    bytes: [u64; RATE_BUCKETS],
}

impl RateMeter {
    fn add(&mut self, bucket_ns: u64, now: Time, n: u64) {
        let b = now.as_nanos() / bucket_ns;
        let slot = (b % RATE_BUCKETS as u64) as usize;
        if self.stamp[slot] != b {
            self.stamp[slot] = b;
            self.bytes[slot] = 0;
        }
        self.bytes[slot] += n;
    }

    fn total(&self, bucket_ns: u64, now: Time) -> u64 {
        let b = now.as_nanos() / bucket_ns;
        (0..RATE_BUCKETS)
            .filter(|&s| self.stamp[s] <= b && b - self.stamp[s] < RATE_BUCKETS as u64)
            .map(|s| self.bytes[s])
            .sum()
    }
}

/// A set of piece indices with O(1) insert, remove, membership and uniform draw.
#[derive(Clone, Debug)]
struct IndexSet {
    items: Vec<u32>,
    /// Position of each piece in `items`, `u32::MAX` when absent.
    pos: Vec<u32>,
}

impl IndexSet {
    fn new(universe: u32) -> IndexSet {
        IndexSet {
            items: Vec::new(),
            pos: vec![u32::MAX; universe as usize],
        }
    }
    fn contains(&self, i: u32) -> bool {
        self.pos[i as usize] != u32::MAX
    }
    fn insert(&mut self, i: u32) {
        if !self.contains(i) {
            self.pos[i as usize] = self.items.len() as u32;
            self.items.push(i);
        }
    }
    fn remove(&mut self, i: u32) {
        let p = self.pos[i as usize];
        if p == u32::MAX {
            return;
        }
        self.items.swap_remove(p as usize);
        if let Some(&moved) = self.items.get(p as usize) {
            self.pos[moved as usize] = p;
        }
        self.pos[i as usize] = u32::MAX;
    }
    fn len(&self) -> usize {
        self.items.len()
    }
}

fn bit(bits: &[u64], i: u32) -> bool {
    bits[(i / 64) as usize] & (1u64 << (i % 64)) != 0
}

/// What this node holds of a piece.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum PieceState {
    /// Not held, not requested: in `unrequested`.
    Missing,
    /// Not held, in exactly one peer's `requests`.
    Requested,
    /// Held (verified).
    Have,
}

/// This node's view of one peer.
#[derive(Clone, Debug)]
struct Peer {
    /// The pieces it has, a bit each.
    has: Vec<u64>,
    /// The same pieces, in the order it announced them (to draw from).
    has_list: Vec<u32>,
    /// Pieces it has that this node does not hold.
    lacking: u32,
    /// Pieces it has that this node neither holds nor has requested.
    avail: u32,
    /// This node does not serve it.
    am_choking: bool,
    /// This node told it it is interested.
    am_interested: bool,
    /// It does not serve this node.
    peer_choking: bool,
    /// It told this node it is interested.
    peer_interested: bool,
    /// Pieces requested from it, not yet received.
    requests: Vec<u32>,
    /// Bytes received from it.
    down: RateMeter,
    /// Bytes transmitted to it.
    up: RateMeter,
    /// When the peering opened.
    peered_at: Time,
    /// Since when it has owed this node a piece: its last piece, or the request that made
    /// `requests` non-empty, whichever is later.
    owing_since: Time,
    /// Pieces sent to it whose transmission has not been reported yet: (send id, bytes).
    uploads: VecDeque<(u64, u64)>,
}

impl Peer {
    fn new(pieces: u32, now: Time) -> Peer {
        Peer {
            has: vec![0; pieces.div_ceil(64) as usize],
            has_list: Vec::new(),
            lacking: 0,
            avail: 0,
            am_choking: true,
            am_interested: false,
            peer_choking: true,
            peer_interested: false,
            requests: Vec::new(),
            down: RateMeter::default(),
            up: RateMeter::default(),
            peered_at: now,
            owing_since: now,
            uploads: VecDeque::new(),
        }
    }
    fn has(&self, i: u32) -> bool {
        bit(&self.has, i)
    }
}

/// The tracker's state (at the root).
#[derive(Clone, Debug, Default)]
struct Tracker {
    /// Nodes already downloading, in announce order (the root first).
    known: Vec<NodeId>,
    /// Nodes that hold every piece.
    complete: BTreeSet<NodeId>,
    /// True once `AllComplete` went out.
    done: bool,
}

// ---------------------------------------------------------------------------------------------
// The machine

/// One BitTorrent node (the root also plays the tracker). See the [module docs](self).
#[derive(Debug)]
pub struct BitTorrent {
    node: NodeId,
    setup: SwarmSetup,
    config: BitTorrentConfig,
    rng: ChaCha8Rng,
    status: Status,
    started: bool,
    store: PieceStore,
    state: Vec<PieceState>,
    unrequested: IndexSet,
    peers: BTreeMap<NodeId, Peer>,
    /// Nodes declared failed: peered again only if they come back (Hello, Rejoin).
    failed: BTreeSet<NodeId>,
    /// Peers that sent a piece that failed verification: dropped for good.
    banned: BTreeSet<NodeId>,
    /// Bad copies received of each piece (see [`crate::pieces::MAX_BAD_COPIES`]).
    bad_copies: BTreeMap<u32, u32>,
    /// Unchoked by tit-for-tat at the last rechoke (or to fill a free slot).
    regular: Vec<NodeId>,
    /// The optimistic unchoke.
    optimistic: Option<NodeId>,
    /// Present at the root.
    tracker: Option<Tracker>,
    tracker_failed: bool,
    complete_sent: bool,
    /// A restarted node's machine ([`BitTorrent::rejoin`]).
    rejoined: bool,
    next_send: u64,
    bucket_ns: u64,
    scratch: Vec<u32>,
}

impl BitTorrent {
    /// The machine of `node`: the root (`setup.root`) is given the data and plays the tracker.
    ///
    /// Errors: `node` or the root outside the layout, data given to a non-root or missing at
    /// the root, or a configuration out of range ([`BitTorrentConfig::validate`]).
    pub fn new(
        node: NodeId,
        setup: &SwarmSetup,
        data: Option<Bytes>,
        config: BitTorrentConfig,
        rng: ChaCha8Rng,
    ) -> Result<BitTorrent, SetupError> {
        config.validate()?;
        setup.check(node, data.as_ref())?;
        let manifest = &setup.manifest;
        let pieces = manifest.piece_count();
        let (store, state, unrequested) = match &data {
            Some(d) => (
                PieceStore::full(manifest, d),
                vec![PieceState::Have; pieces as usize],
                IndexSet::new(pieces),
            ),
            None => {
                let mut u = IndexSet::new(pieces);
                for i in 0..pieces {
                    u.insert(i);
                }
                (
                    setup.empty_store(),
                    vec![PieceState::Missing; pieces as usize],
                    u,
                )
            }
        };
        let is_root = node == setup.root;
        let window_ns = Time::from_secs_f64(config.rate_window_s).as_nanos();
        Ok(BitTorrent {
            node,
            setup: setup.clone(),
            rng,
            status: Status::Running,
            started: false,
            store,
            state,
            unrequested,
            peers: BTreeMap::new(),
            failed: BTreeSet::new(),
            banned: BTreeSet::new(),
            bad_copies: BTreeMap::new(),
            regular: Vec::new(),
            optimistic: None,
            tracker: is_root.then(|| Tracker {
                known: vec![node],
                complete: BTreeSet::from([node]),
                done: false,
            }),
            tracker_failed: false,
            complete_sent: is_root,
            rejoined: false,
            next_send: 0,
            bucket_ns: (window_ns / RATE_BUCKETS as u64).max(1),
            scratch: Vec::new(),
            config,
        })
    }

    /// The machine of `node` restarting mid-run with the pieces it kept (e.g. read back from
    /// its partial output file): each is verified against the manifest and kept only if it
    /// matches. At start it sends [`Signal::Rejoin`] to the tracker instead of an announce; the
    /// tracker counts it as live again, waits for its Complete, and answers with a peer list
    /// (or, when the run is already over, with AllComplete: the node then aborts with
    /// [`AbortReason::RunEnded`](crate::node::AbortReason::RunEnded) unless it holds
    /// everything). Peers that had dropped it take its Hello again.
    ///
    /// Errors: those of [`BitTorrent::new`]; the root cannot rejoin (it is the tracker).
    pub fn rejoin(
        node: NodeId,
        setup: &SwarmSetup,
        config: BitTorrentConfig,
        rng: ChaCha8Rng,
        held: impl IntoIterator<Item = (u32, Bytes)>,
    ) -> Result<BitTorrent, SetupError> {
        if node == setup.root {
            return Err(SetupError::Data {
                node,
                what: "the root cannot rejoin: it is the tracker",
            });
        }
        let mut m = BitTorrent::new(node, setup, None, config, rng)?;
        for (i, data) in setup.verified_pieces(held) {
            m.store.insert(i, data);
            m.state[i as usize] = PieceState::Have;
            m.unrequested.remove(i);
        }
        m.rejoined = true;
        Ok(m)
    }

    /// The pieces held.
    pub fn store(&self) -> &PieceStore {
        &self.store
    }

    /// The current peers, by id.
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers.keys().copied()
    }

    /// The peers this node currently unchokes, by id.
    pub fn unchoked(&self) -> Vec<NodeId> {
        self.peers
            .iter()
            .filter(|(_, p)| !p.am_choking)
            .map(|(&n, _)| n)
            .collect()
    }

    fn span(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    fn finish(&mut self, out: &mut Outputs) {
        if self.status != Status::Running {
            return;
        }
        self.status = Status::Finished;
        out.push(Output::CancelTimer(RECHOKE_TIMER));
        out.push(Output::CancelTimer(OPTIMISTIC_TIMER));
        out.push(Output::Finished);
    }

    fn signal(&self, out: &mut Outputs, to: NodeId, signal: Signal, arg: u32) {
        out.send(
            to,
            Message::Pieces(PieceMsg::Signal(SignalMsg {
                transfer: self.setup.transfer,
                signal,
                arg,
            })),
        );
    }

    fn on_start(&mut self, now: Time, out: &mut Outputs) {
        if self.started {
            return;
        }
        self.started = true;
        let total = self.setup.manifest.total_len();
        if self.rejoined {
            for (offset, data) in self.store.take_deliverable(&self.setup.manifest) {
                out.push(Output::Deliver {
                    transfer: self.setup.transfer,
                    offset,
                    data,
                });
            }
        }
        if self.store.is_complete() || self.rejoined {
            out.push(Output::Report(Report::Progress {
                transfer: self.setup.transfer,
                done_bytes: self.store.held_bytes(),
                total_bytes: total,
            }));
        }
        if self.tracker.is_some() {
            self.check_all_complete(out);
        } else {
            let hello = if self.rejoined {
                Signal::Rejoin
            } else {
                Signal::Announce
            };
            self.signal(out, self.setup.root, hello, 0);
            if self.store.is_complete() {
                // Empty data: nothing to fetch.
                self.on_complete(out);
            }
        }
        if self.status == Status::Running {
            out.push(Output::SetTimer {
                timer: RECHOKE_TIMER,
                at: now + Self::span(self.config.rechoke_s),
            });
            out.push(Output::SetTimer {
                timer: OPTIMISTIC_TIMER,
                at: now + Self::span(self.config.optimistic_s),
            });
        }
    }

    /// Opens (or accepts) a peering with `peer`.
    fn add_peer(&mut self, now: Time, peer: NodeId, send_hello: bool, out: &mut Outputs) {
        if peer == self.node || self.peers.contains_key(&peer) || self.failed.contains(&peer) {
            return;
        }
        self.peers
            .insert(peer, Peer::new(self.store.piece_count(), now));
        if send_hello {
            self.signal(out, peer, Signal::Hello, 0);
        }
        if self.store.held() > 0 {
            out.send(
                peer,
                Message::Pieces(PieceMsg::Bitfield(self.store.bitfield(self.setup.transfer))),
            );
        }
    }

    /// The peer learned to have piece `i` (from a bitfield or a have).
    fn peer_has(&mut self, peer: NodeId, i: u32, out: &mut Outputs) {
        let held = self.store.has(i);
        let missing = self.state[i as usize] == PieceState::Missing;
        let transfer = self.setup.transfer;
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.has(i) {
            return;
        }
        p.has[(i / 64) as usize] |= 1u64 << (i % 64);
        p.has_list.push(i);
        if !held {
            p.lacking += 1;
            if !p.am_interested {
                p.am_interested = true;
                out.send(
                    peer,
                    Message::Pieces(PieceMsg::Signal(SignalMsg {
                        transfer,
                        signal: Signal::Interested,
                        arg: 0,
                    })),
                );
            }
        }
        if missing {
            p.avail += 1;
        }
    }

    /// Keeps `outstanding` requests at `peer` if it unchokes this node.
    fn fill_requests(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        loop {
            let Some(p) = self.peers.get(&peer) else {
                return;
            };
            if p.peer_choking || p.avail == 0 || p.requests.len() >= self.config.outstanding {
                return;
            }
            let Some(piece) = pick_piece(p, &self.unrequested, &mut self.rng, &mut self.scratch)
            else {
                return;
            };
            self.state[piece as usize] = PieceState::Requested;
            self.unrequested.remove(piece);
            for q in self.peers.values_mut() {
                if q.has(piece) {
                    q.avail -= 1;
                }
            }
            if let Some(p) = self.peers.get_mut(&peer) {
                if p.requests.is_empty() {
                    p.owing_since = now;
                }
                p.requests.push(piece);
            }
            out.send(
                peer,
                Message::Pieces(PieceMsg::Request(PieceRef {
                    transfer: self.setup.transfer,
                    piece,
                })),
            );
        }
    }

    fn fill_all_requests(&mut self, now: Time, out: &mut Outputs) {
        let ready: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.peer_choking && p.avail > 0)
            .map(|(&n, _)| n)
            .collect();
        for n in ready {
            self.fill_requests(now, n, out);
        }
    }

    /// Puts a requested piece back among the unrequested ones.
    fn release_piece(&mut self, piece: u32) {
        if self.state[piece as usize] != PieceState::Requested {
            return;
        }
        self.state[piece as usize] = PieceState::Missing;
        self.unrequested.insert(piece);
        for q in self.peers.values_mut() {
            if q.has(piece) {
                q.avail += 1;
            }
        }
    }

    /// Releases the requests of peers that owe a piece for longer than the request timeout.
    fn release_stuck(&mut self, now: Time, out: &mut Outputs) {
        let limit = Self::span(self.config.request_timeout_s);
        let mut released = Vec::new();
        for p in self.peers.values_mut() {
            if !p.requests.is_empty() && now.saturating_since(p.owing_since) >= limit {
                released.append(&mut p.requests);
            }
        }
        if released.is_empty() {
            return;
        }
        for piece in released {
            self.release_piece(piece);
        }
        self.fill_all_requests(now, out);
    }

    fn candidates(&self, now: Time) -> Vec<ChokeCandidate> {
        let newcomer_span = Self::span(self.config.optimistic_s);
        self.peers
            .iter()
            .map(|(&n, p)| ChokeCandidate {
                peer: n,
                downloaded: p.down.total(self.bucket_ns, now),
                uploaded: p.up.total(self.bucket_ns, now),
                interested: p.peer_interested,
                newcomer: now.saturating_since(p.peered_at) < newcomer_span,
            })
            .collect()
    }

    /// The tit-for-tat re-evaluation, or with `rotate` the rotation of the optimistic unchoke
    /// (which keeps the peers unchoked by rate).
    fn rechoke(&mut self, now: Time, rotate: bool, out: &mut Outputs) {
        let cands = self.candidates(now);
        if rotate {
            let peers = &self.peers;
            self.regular
                .retain(|r| peers.get(r).is_some_and(|p| p.peer_interested));
        } else {
            let seed = self.store.is_complete();
            self.regular = regular_unchokes(&cands, seed, self.config.unchoke_slots, &mut self.rng);
        }
        let valid = self.optimistic.is_some_and(|o| {
            !self.regular.contains(&o) && self.peers.get(&o).is_some_and(|p| p.peer_interested)
        });
        if rotate || !valid {
            let mut exclude = self.regular.clone();
            // Rotate to another peer when there is one.
            if let Some(o) = self.optimistic.filter(|_| rotate) {
                exclude.push(o);
                self.optimistic = optimistic_unchoke(
                    &cands,
                    &exclude,
                    self.config.newcomer_weight,
                    &mut self.rng,
                )
                .or(Some(o).filter(|_| valid));
            } else {
                self.optimistic = optimistic_unchoke(
                    &cands,
                    &exclude,
                    self.config.newcomer_weight,
                    &mut self.rng,
                );
            }
        }
        let transfer = self.setup.transfer;
        for (&n, p) in self.peers.iter_mut() {
            let want = self.regular.contains(&n) || self.optimistic == Some(n);
            if want == p.am_choking {
                p.am_choking = !want;
                let signal = if want { Signal::Unchoke } else { Signal::Choke };
                out.send(
                    n,
                    Message::Pieces(PieceMsg::Signal(SignalMsg {
                        transfer,
                        signal,
                        arg: 0,
                    })),
                );
            }
        }
    }

    /// Unchokes interested peers, best first, while fewer than `unchoke_slots + 1` interested
    /// peers are unchoked (never chokes anyone).
    fn fill_slots(&mut self, now: Time, out: &mut Outputs) {
        let slots = self.config.unchoke_slots + 1;
        let busy = self
            .peers
            .values()
            .filter(|p| !p.am_choking && p.peer_interested)
            .count();
        if busy >= slots {
            return;
        }
        let cands: Vec<ChokeCandidate> = self
            .candidates(now)
            .into_iter()
            .filter(|c| self.peers.get(&c.peer).is_some_and(|p| p.am_choking))
            .collect();
        let seed = self.store.is_complete();
        let chosen = regular_unchokes(&cands, seed, slots - busy, &mut self.rng);
        let transfer = self.setup.transfer;
        for n in chosen {
            let live_regular = self
                .regular
                .iter()
                .filter(|r| {
                    self.peers
                        .get(r)
                        .is_some_and(|p| !p.am_choking && p.peer_interested)
                })
                .count();
            if live_regular < self.config.unchoke_slots {
                self.regular.retain(|r| {
                    self.peers
                        .get(r)
                        .is_some_and(|p| !p.am_choking && p.peer_interested)
                });
                self.regular.push(n);
            } else {
                self.optimistic = Some(n);
            }
            if let Some(p) = self.peers.get_mut(&n) {
                p.am_choking = false;
            }
            out.send(
                n,
                Message::Pieces(PieceMsg::Signal(SignalMsg {
                    transfer,
                    signal: Signal::Unchoke,
                    arg: 0,
                })),
            );
        }
    }

    fn on_piece(&mut self, now: Time, from: NodeId, piece: u32, payload: Bytes, out: &mut Outputs) {
        if self.status == Status::Aborted {
            return;
        }
        let mut from_request = false;
        if let Some(p) = self.peers.get_mut(&from) {
            if let Some(k) = p.requests.iter().position(|&r| r == piece) {
                p.requests.swap_remove(k);
                from_request = true;
            }
            p.down.add(self.bucket_ns, now, payload.len() as u64);
            p.owing_since = now;
        }
        if self.store.has(piece) {
            self.fill_requests(now, from, out);
            return;
        }
        if !self
            .setup
            .verifier
            .verify(&self.setup.manifest, piece, &payload)
        {
            // Bounded: a root whose data changed would send the same bad bytes for ever.
            let copies = self.bad_copies.entry(piece).or_insert(0);
            *copies += 1;
            if *copies > crate::pieces::MAX_BAD_COPIES {
                let copies = *copies;
                self.status = Status::Aborted;
                out.push(Output::CancelTimer(RECHOKE_TIMER));
                out.push(Output::CancelTimer(OPTIMISTIC_TIMER));
                out.push(Output::Aborted(crate::node::AbortReason::BadPiece {
                    piece,
                    copies,
                }));
                return;
            }
            // Dropped and fetched again elsewhere; its sender is dropped too (unless it is the
            // root, the one source sure to hold everything).
            if from_request {
                self.release_piece(piece);
            }
            if from != self.setup.root && self.banned.insert(from) {
                self.on_peer_failed(now, from, out);
                return;
            }
            self.fill_all_requests(now, out);
            return;
        }
        if self.state[piece as usize] == PieceState::Missing {
            // Unsolicited (a released request served anyway): no longer to be requested.
            self.unrequested.remove(piece);
            for q in self.peers.values_mut() {
                if q.has(piece) {
                    q.avail -= 1;
                }
            }
        }
        self.state[piece as usize] = PieceState::Have;
        self.store.insert(piece, payload);
        for (offset, data) in self.store.take_deliverable(&self.setup.manifest) {
            out.push(Output::Deliver {
                transfer: self.setup.transfer,
                offset,
                data,
            });
        }
        out.push(Output::Report(Report::Progress {
            transfer: self.setup.transfer,
            done_bytes: self.store.held_bytes(),
            total_bytes: self.setup.manifest.total_len(),
        }));
        let transfer = self.setup.transfer;
        let redundant = self.config.redundant_haves;
        for (&n, q) in self.peers.iter_mut() {
            let had = q.has(piece);
            if had {
                q.lacking -= 1;
                if q.lacking == 0 && q.am_interested {
                    q.am_interested = false;
                    out.send(
                        n,
                        Message::Pieces(PieceMsg::Signal(SignalMsg {
                            transfer,
                            signal: Signal::NotInterested,
                            arg: 0,
                        })),
                    );
                }
            }
            if redundant || !had {
                out.send(
                    n,
                    Message::Pieces(PieceMsg::Have(PieceRef { transfer, piece })),
                );
            }
        }
        if self.store.is_complete() {
            self.on_complete(out);
        }
        if self.status == Status::Running {
            self.fill_requests(now, from, out);
        }
    }

    fn on_complete(&mut self, out: &mut Outputs) {
        if self.complete_sent {
            return;
        }
        self.complete_sent = true;
        if self.tracker_failed {
            self.finish(out);
        } else {
            self.signal(out, self.setup.root, Signal::Complete, self.node.0);
        }
    }

    /// At the tracker: ends the run once every live node is complete.
    fn check_all_complete(&mut self, out: &mut Outputs) {
        let Some(t) = &self.tracker else {
            return;
        };
        if t.done {
            return;
        }
        let all = self
            .setup
            .layout
            .nodes()
            .all(|n| t.complete.contains(&n) || self.failed.contains(&n));
        if !all {
            return;
        }
        let receivers: Vec<NodeId> = self
            .setup
            .layout
            .nodes()
            .filter(|&n| n != self.node && !self.failed.contains(&n))
            .collect();
        for n in receivers {
            self.signal(out, n, Signal::AllComplete, self.node.0);
        }
        if let Some(t) = &mut self.tracker {
            t.done = true;
        }
        self.finish(out);
    }

    fn on_announce(&mut self, from: NodeId, out: &mut Outputs) {
        let Some(t) = &mut self.tracker else {
            return;
        };
        let failed = &self.failed;
        let pool: Vec<NodeId> = t
            .known
            .iter()
            .copied()
            .filter(|&n| n != from && !failed.contains(&n))
            .collect();
        let list: Vec<NodeId> = pool
            .choose_multiple(&mut self.rng, self.config.peer_list_len)
            .copied()
            .collect();
        if !t.known.contains(&from) {
            t.known.push(from);
        }
        out.send(
            from,
            Message::Pieces(PieceMsg::PeerList(PeerList::new(
                self.setup.transfer,
                &list,
            ))),
        );
    }

    /// At the tracker: a restarted node is live again; it gets a peer list, or AllComplete
    /// when the run is over.
    fn on_rejoin(&mut self, now: Time, from: NodeId, out: &mut Outputs) {
        if self.tracker.as_ref().is_some_and(|t| t.done) || self.status == Status::Finished {
            self.signal(out, from, Signal::AllComplete, self.node.0);
            return;
        }
        if self.status != Status::Running {
            return;
        }
        if !self.failed.contains(&from) {
            // Its failure was not reported (yet): its earlier life is over all the same.
            self.on_peer_failed(now, from, out);
            if self.status != Status::Running {
                return;
            }
        }
        self.failed.remove(&from);
        if let Some(t) = &mut self.tracker {
            t.complete.remove(&from);
        }
        self.on_announce(from, out);
    }

    fn on_peer_failed(&mut self, now: Time, peer: NodeId, out: &mut Outputs) {
        if !self.failed.insert(peer) {
            return;
        }
        if let Some(p) = self.peers.remove(&peer) {
            for piece in p.requests {
                self.release_piece(piece);
            }
            self.regular.retain(|&r| r != peer);
            if self.optimistic == Some(peer) {
                self.optimistic = None;
            }
        }
        if peer == self.setup.root && self.tracker.is_none() {
            self.tracker_failed = true;
            if self.store.is_complete() {
                self.finish(out);
                return;
            }
        }
        self.check_all_complete(out);
        if self.status != Status::Running {
            return;
        }
        self.fill_slots(now, out);
        self.fill_all_requests(now, out);
    }

    fn on_message(
        &mut self,
        now: Time,
        from: NodeId,
        message: Message,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = message.kind();
        if let Some(found) = message.transfer() {
            ProtocolError::check_transfer(from, kind, self.setup.transfer, found)?;
        }
        message
            .validate()
            .map_err(|source| ProtocolError::Frame { from, source })?;
        let pieces = self.store.piece_count();
        let inconsistent = |what| ProtocolError::Inconsistent { from, kind, what };
        let unexpected = |why| ProtocolError::UnexpectedMessage { from, kind, why };
        // Checks that need no state: a rejected input changes nothing.
        match &message {
            Message::Pieces(PieceMsg::Have(r)) | Message::Pieces(PieceMsg::Request(r))
                if r.piece >= pieces =>
            {
                return Err(inconsistent("piece index out of range"))
            }
            Message::Pieces(PieceMsg::Piece(p)) if p.piece >= pieces => {
                return Err(inconsistent("piece index out of range"))
            }
            Message::Pieces(PieceMsg::Bitfield(b)) if b.pieces != pieces => {
                return Err(inconsistent("bitfield length differs from the manifest"))
            }
            Message::Pieces(PieceMsg::PeerList(l)) => {
                if from != self.setup.root {
                    return Err(unexpected("only the tracker (the root) sends peer lists"));
                }
                if l.nodes().any(|n| !self.setup.layout.contains(n)) {
                    return Err(inconsistent("peer list names a node outside the swarm"));
                }
            }
            Message::Pieces(PieceMsg::Signal(s)) => match s.signal {
                Signal::Hello if !self.setup.layout.contains(from) || from == self.node => {
                    return Err(unexpected("hello from a node outside the swarm"))
                }
                Signal::Announce | Signal::Complete | Signal::Rejoin if self.tracker.is_none() => {
                    return Err(unexpected("only the tracker (the root) takes this"))
                }
                Signal::Announce | Signal::Complete | Signal::Rejoin
                    if !self.setup.layout.contains(from) || from == self.node =>
                {
                    return Err(unexpected("from a node outside the swarm"))
                }
                Signal::AllComplete if from != self.setup.root || self.tracker.is_some() => {
                    return Err(unexpected("only the tracker (the root) sends this"))
                }
                Signal::AllComplete
                    if !self.store.is_complete()
                        && self.status == Status::Running
                        && !self.rejoined =>
                {
                    return Err(inconsistent("all complete, but this node is not"))
                }
                _ => {}
            },
            Message::Broadcast(_)
            | Message::Scatter(_)
            | Message::Probe(_)
            | Message::Session(_) => return Err(unexpected("not a BitTorrent message")),
            _ => {}
        }
        if self.banned.contains(&from) {
            return Ok(()); // it sent a bad piece: nothing it says counts any more
        }
        if let Message::Pieces(PieceMsg::Signal(SignalMsg {
            signal: Signal::Rejoin,
            ..
        })) = message
        {
            self.on_rejoin(now, from, out);
            return Ok(());
        }
        if self.status != Status::Running {
            // Late messages of a finished run are harmless.
            return Ok(());
        }
        match message {
            Message::Pieces(PieceMsg::Signal(s)) => match s.signal {
                Signal::Hello => {
                    // A Hello from a node this one saw fail: it restarted (and rejoined).
                    self.failed.remove(&from);
                    self.add_peer(now, from, false, out)
                }
                Signal::Rejoin => {} // handled above
                Signal::Interested | Signal::NotInterested => {
                    let interested = s.signal == Signal::Interested;
                    let Some(p) = self.peers.get_mut(&from) else {
                        return Ok(());
                    };
                    if p.peer_interested != interested {
                        p.peer_interested = interested;
                        self.fill_slots(now, out);
                    }
                }
                Signal::Choke => {
                    let Some(p) = self.peers.get_mut(&from) else {
                        return Ok(());
                    };
                    p.peer_choking = true;
                    let released = std::mem::take(&mut p.requests);
                    for piece in released {
                        self.release_piece(piece);
                    }
                    self.fill_all_requests(now, out);
                }
                Signal::Unchoke => {
                    let Some(p) = self.peers.get_mut(&from) else {
                        return Ok(());
                    };
                    p.peer_choking = false;
                    self.fill_requests(now, from, out);
                }
                Signal::Announce => self.on_announce(from, out),
                Signal::Complete => {
                    if let Some(t) = &mut self.tracker {
                        t.complete.insert(from);
                    }
                    self.check_all_complete(out);
                }
                Signal::AllComplete if !self.store.is_complete() => {
                    // Only a rejoined node gets here (checked above): the run ended first.
                    self.status = Status::Aborted;
                    out.push(Output::CancelTimer(RECHOKE_TIMER));
                    out.push(Output::CancelTimer(OPTIMISTIC_TIMER));
                    out.push(Output::Aborted(crate::node::AbortReason::RunEnded));
                }
                Signal::AllComplete => self.finish(out),
            },
            Message::Pieces(PieceMsg::PeerList(l)) => {
                let nodes: Vec<NodeId> = l.nodes().collect();
                for n in nodes {
                    self.add_peer(now, n, true, out);
                }
            }
            Message::Pieces(PieceMsg::Bitfield(b)) => {
                if !self.peers.contains_key(&from) {
                    return Ok(());
                }
                for i in b.iter() {
                    self.peer_has(from, i, out);
                }
                self.fill_requests(now, from, out);
            }
            Message::Pieces(PieceMsg::Have(r)) => {
                self.peer_has(from, r.piece, out);
                self.fill_requests(now, from, out);
            }
            Message::Pieces(PieceMsg::Request(r)) => self.on_request(from, r.piece, out),
            Message::Pieces(PieceMsg::Piece(p)) => {
                self.on_piece(now, from, p.piece, p.payload, out)
            }
            _ => {}
        }
        Ok(())
    }

    fn on_request(&mut self, from: NodeId, piece: u32, out: &mut Outputs) {
        let bytes = match self
            .store
            .to_send(piece, &self.setup.manifest, &*self.setup.verifier)
        {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return,
            Err(SourceMismatch { piece }) => {
                self.status = Status::Aborted;
                out.push(Output::CancelTimer(RECHOKE_TIMER));
                out.push(Output::CancelTimer(OPTIMISTIC_TIMER));
                out.push(Output::Aborted(crate::node::AbortReason::SourceChanged {
                    piece,
                }));
                return;
            }
        };
        let Some(p) = self.peers.get_mut(&from) else {
            return;
        };
        if p.am_choking {
            return;
        }
        let id = self.next_send;
        self.next_send += 1;
        p.uploads.push_back((id, bytes.len() as u64));
        out.send_notify(
            from,
            Message::Pieces(PieceMsg::Piece(Piece {
                transfer: self.setup.transfer,
                piece,
                payload: bytes,
            })),
            SendId(id),
        );
    }

    fn on_send_complete(&mut self, now: Time, to: NodeId, id: SendId) -> Result<(), ProtocolError> {
        if id.0 >= self.next_send {
            return Err(ProtocolError::UnknownSend { to, id });
        }
        if let Some(p) = self.peers.get_mut(&to) {
            if let Some(k) = p.uploads.iter().position(|&(s, _)| s == id.0) {
                if let Some((_, n)) = p.uploads.remove(k) {
                    p.up.add(self.bucket_ns, now, n);
                }
            }
        }
        Ok(())
    }
}

/// A piece drawn uniformly among those `peer` has that are not held and not requested.
fn pick_piece(
    peer: &Peer,
    unrequested: &IndexSet,
    rng: &mut ChaCha8Rng,
    scratch: &mut Vec<u32>,
) -> Option<u32> {
    if peer.avail == 0 {
        return None;
    }
    let from_peer = peer.has_list.len() <= unrequested.len();
    let (small, len) = if from_peer {
        (&peer.has_list, peer.has_list.len())
    } else {
        (&unrequested.items, unrequested.len())
    };
    if len == 0 {
        return None;
    }
    let ok = |i: u32| {
        if from_peer {
            unrequested.contains(i)
        } else {
            peer.has(i)
        }
    };
    // Rejection first (each draw succeeds with probability avail / len), then one scan: the
    // pick is uniform either way.
    if len > 64 {
        for _ in 0..16 {
            let i = small[rng.gen_range(0..len)];
            if ok(i) {
                return Some(i);
            }
        }
    }
    scratch.clear();
    scratch.extend(small.iter().copied().filter(|&i| ok(i)));
    scratch.choose(rng).copied()
}

impl Protocol for BitTorrent {
    fn node(&self) -> NodeId {
        self.node
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => self.on_start(now, out),
            Input::Message { from, message } => self.on_message(now, from, message, out)?,
            Input::Timer(t) => {
                if self.status != Status::Running {
                    return Ok(());
                }
                if t == RECHOKE_TIMER {
                    self.release_stuck(now, out);
                    self.rechoke(now, false, out);
                    out.push(Output::SetTimer {
                        timer: RECHOKE_TIMER,
                        at: now + Self::span(self.config.rechoke_s),
                    });
                } else if t == OPTIMISTIC_TIMER {
                    self.rechoke(now, true, out);
                    out.push(Output::SetTimer {
                        timer: OPTIMISTIC_TIMER,
                        at: now + Self::span(self.config.optimistic_s),
                    });
                }
            }
            Input::SendComplete { to, id } => self.on_send_complete(now, to, id)?,
            // Requests of the application are the host's business.
            Input::App(_) => {}
            Input::PeerFailed(p) => {
                if self.status == Status::Running {
                    self.on_peer_failed(now, p, out);
                }
            }
            Input::Command(crate::node::Command::ComputeDone { task }) => {
                return Err(ProtocolError::UnknownTask { task })
            }
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn index_set_and_rate_meter() {
        let mut s = IndexSet::new(10);
        for i in [3, 5, 7] {
            s.insert(i);
        }
        s.remove(3);
        assert!(!s.contains(3) && s.contains(5) && s.contains(7));
        assert_eq!(s.len(), 2);
        s.remove(7);
        s.insert(7);
        assert_eq!(s.len(), 2);

        let mut m = RateMeter::default();
        let b = 1_000_000_000; // 1 s buckets: a 20 s window
        m.add(b, Time::from_millis(500), 10);
        m.add(b, Time::from_millis(5_500), 20);
        assert_eq!(m.total(b, Time::from_millis(6_000)), 30);
        assert_eq!(m.total(b, Time::from_millis(20_100)), 20);
        assert_eq!(m.total(b, Time::from_millis(30_000)), 0);
    }

    #[test]
    fn pick_is_among_candidates() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut u = IndexSet::new(100);
        for i in 0..100 {
            u.insert(i);
        }
        let mut p = Peer::new(100, Time::ZERO);
        for i in [4u32, 50, 99] {
            p.has[(i / 64) as usize] |= 1 << (i % 64);
            p.has_list.push(i);
            p.avail += 1;
        }
        u.remove(50);
        p.avail -= 1;
        let mut scratch = Vec::new();
        for _ in 0..100 {
            let i = pick_piece(&p, &u, &mut rng, &mut scratch).unwrap();
            assert!(i == 4 || i == 99);
        }
    }
}
