//! MOB, Multicast Optimizing Bandwidth (seed 002): receivers steal pieces, and the nodes of a
//! cluster team up as a *mob* so that every piece enters every cluster exactly once.
//!
//! # The algorithm, as the paper gives it (Section 3.1)
//!
//! The data is the [`Manifest`](crate::pieces::Manifest)'s P pieces. Node n of cluster x has the cluster rank r(x, n)
//! (members sorted by id) and its cluster the size s(x). Its **mob share** is pieces
//! `floor(r*P/s) ..= floor((r+1)*P/s) - 1` ([`mob_share`]); the shares of a cluster partition
//! `0..P`.
//!
//! 1. **Local peers.** At [`Input::Start`] a node opens a peering ([`Signal::Hello`]) with
//!    [`MobConfig::local_peers`] (five) random nodes of its own cluster. An incoming Hello is
//!    always accepted: the sender becomes a peer too, so a node has five or more local peers.
//! 2. **Global peers.** The candidates in each other cluster y are the nodes p with
//!    r(y, p) = r(x, n) mod s(y), one per cluster ([`global_peer_candidates`]); the node picks
//!    [`MobConfig::global_peers`] (five) of them at random and opens peerings with them in the
//!    same way.
//! 3. **Stealing.** A node requests the pieces of its mob share from its global peers and every
//!    other piece from its local peers, keeping [`MobConfig::outstanding`] (R = 5) requests
//!    outstanding per peer, each time choosing at random among the pieces the peer has
//!    announced. Messages: a [`Bitfield`](crate::pieces::Bitfield) sent once by the root to each of its peers (it holds
//!    everything); [`PieceMsg::Have`] for every newly verified piece to all local peers, and to a
//!    global peer only when the piece is in *that peer's* mob share (so each cluster hears of
//!    each piece from outside once per mob member that needs it); [`PieceMsg::Request`], always
//!    honoured with a [`PieceMsg::Piece`].
//! 4. **Final acknowledgement.** A binary tree over all nodes, in heap order over the nodes
//!    sorted by id with the root moved first (index k has children 2k+1 and 2k+2): a node sends
//!    [`Signal::Complete`] to its parent once it holds every piece and each child has sent its
//!    Complete; the root, once all its children have, sends [`Signal::AllComplete`] down the
//!    tree, and every node pushes [`Output::Finished`] when it receives (root: sends) it. Until
//!    then every node keeps serving requests, so nobody stops serving early.
//!
//! # What the paper leaves open, and our reading
//!
//! - **The root's cluster.** The paper does not say how the mob rule applies to the cluster that
//!   already holds the data: taken literally, the nodes of the root's cluster would steal their
//!   shares from other clusters, which have nothing yet, and every cluster would wait for the
//!   others. Our reading: in the root's cluster the root is the source. Its other members form
//!   the mob (shares are computed over them, ranks among them, the root excluded); each of them
//!   also opens a peering with the root and requests the pieces of its share **from the root
//!   only**, and every other piece from its local peers other than the root. So the root uploads
//!   each piece into its own cluster exactly once, and the nodes of that cluster never take
//!   anything from other clusters (they still serve them). Global peers in the root's cluster
//!   are therefore not told of pieces (they never steal from outside), and nobody tells the
//!   root (it holds everything).
//! - **Which global candidate must be kept.** With more than `global_peers + 1` clusters, five
//!   random candidates might all lie in clusters that wait for each other. A node outside the
//!   root's cluster therefore always keeps its candidate in the root's cluster and draws the
//!   others at random (with at most six clusters, as in the paper, all candidates are taken and
//!   this changes nothing). That guarantees every share owner a global peer that will hold
//!   every piece.
//! - **Incoming global peerings** are accepted like local ones (the paper sets them up "in the
//!   same manner as in phase 1"); a node steals its share from every global peer it has,
//!   incoming or outgoing, and tells each of them about pieces in that peer's share.
//! - **A peering established late** (its Hello arrives after this node already holds pieces):
//!   the node sends a Have for each held piece the peer is to hear of (the root: its bitfield),
//!   as the paper reserves bitfields to the root.
//! - **Haves a peer does not need are not sent**: a node does not tell a peer of a piece that
//!   peer announced itself (it will never request it). This changes no decision of any node
//!   and saves about half of the Have messages, which dominate the message count.
//! - **The root delivers nothing** to its application (it has the data), as in the tree
//!   broadcast; it reports full progress at Start.
//!
//! With these rules, in a run without failures each piece crosses into each cluster other than
//! the root's exactly once (its mob-share owner requests it once, from a global peer), and never
//! into the root's cluster: WAN payload = (clusters - 1) x data size.
//!
//! # Which share piece to request from a global peer: [`PieceChoice`]
//!
//! The paper (after BitTorrent) picks at random among the pieces a peer announced
//! ([`PieceChoice::Random`]). In the flow-level model this wastes much of the WAN: the rank-r
//! nodes of all clusters steal the same share from the same source, each keeps R requests
//! queued on a flow that carries only its fair share of a WAN link (16 ranks share one link
//! in the paper's setup), so they draw the same pieces from the source, blind to each other's
//! queued requests, and the links between the receiving clusters idle (about 45-70 % of the
//! max-flow bound on the Fig. 4 point). The default, [`PieceChoice::RarestFirst`], is ours:
//! - pieces announced by the fewest of this node's global peers first (BitTorrent's
//!   rarest-first, applied to the mob share only; local pieces stay random);
//! - the pieces are dealt into one *region* per cluster that takes them from outside (the
//!   root's cluster excluded): piece `i` is in region `i mod k` for `k` such clusters, and the
//!   cluster at position `q` among them owns region `q`. Regions are defined on the piece
//!   index, not on the share, so they agree between clusters whose shares differ (clusters of
//!   different sizes cut the pieces into different shares); a node draws the pieces only the
//!   source has from its own region first, in order;
//! - pieces only the source has that lie outside the node's region are not requested while
//!   the region still has pieces neither held nor requested, so at the start (when the source
//!   has announced only a few pieces) the clusters do not all draw the same ones — unless
//!   another region lags clearly behind (more than a quarter of a region more pieces that
//!   nobody has announced): its owner's link is slow, and the node helps there first;
//! - a helper walks another region backwards, from a point that depends on how far its
//!   cluster is behind the region's owner, so owner and helpers do not draw the same pieces.
//!
//! The effect is the tree packing of the optimum: each source sends every cluster a different
//! third (for four clusters) of the share, and the clusters relay them to each other. (An
//! earlier version cut each node's *share* into contiguous regions: that agrees between
//! clusters only when they have equal shares; with clusters of 4, 12, 16 and 32 nodes (Fig. 5)
//! 17 % of what left the root's cluster was sent twice and MOB reached 85 % of the bound,
//! against 96 % with regions on the piece index.) Only
//! the order of requests changes: the messages, the mob rule and the exactly-once property are
//! the paper's. The request depth (next section, ours too) matters as much: with 1 MiB pieces
//! on 0.5 MB/s flows, R = 5 commits a node ten seconds ahead, and the clusters' choices
//! collide again near the end.
//!
//! Measured in the simulator on the Fig. 4 point (4 x 16 nodes, 600 MB from node 0, 125 MB/s
//! nodes, 20 ms WAN round trips), as a fraction of the max-flow bound, for 1 MiB / 256 KiB
//! pieces (`fig4_point_against_the_bound` in `windrose-sim/tests/mob.rs`):
//!
//! | WAN (bound)                                   | paper: random, R = 5 | defaults    |
//! |-----------------------------------------------|----------------------|-------------|
//! | 8 MB/s between all clusters (24 MB/s)         | 46 % / 71 %          | 96 % / 98 % |
//! | `four-clusters.toml`'s links (14.5 MB/s)      | 46 % / 71 %          | 92 % / 95 % |
//! | `data/scenarios/mob` fast links (9.5 MB/s)    | 49 % / 74 %          | 94 % / 96 % |
//! | `data/scenarios/mob` slow links (7.3 MB/s)    | 36 % / 65 %          | 87 % / 91 % |
//!
//! (The 1 MiB column of the defaults rose from 93, 86, 90 and 75 % with the mob size below:
//! 572 pieces give shares of at least 64 pieces to 8 of the 16 members.)
//!
//! Small transfers fare worse: each rank's flow gets 1/16 of a WAN link, so on a 0.8 MB/s
//! link one 1 MiB piece takes 21 s, and start and end cost a few piece times each.
//!
//! # Mob size: [`MobConfig::min_share_pieces`]
//!
//! The paper makes every member of a cluster a mob member, with a share of P / s pieces. With
//! large clusters that share falls to a piece or two (64 MiB in 256 KiB pieces over clusters
//! of 256 nodes: one piece each), and MOB fell with N at a fixed message: 76 % of the bound
//! at 4 x 16 nodes, 43 % at 4 x 64, 31 % at 4 x 256 (fast links, 64 MiB). The cause is the
//! share size: every rank's WAN flow gets 1/s of a link, so one piece takes seconds to cross
//! (256 KiB at 3 MB/s / 256 is 22 s, the whole run's length), the regions that let clusters
//! relay to each other have nothing to deal, and every cluster ends up taking its own copy
//! of everything straight from the root's cluster, at a third of the bound. It is neither
//! the number of global peers (a rank has one candidate per cluster either way) nor the
//! acknowledgement tree (its depth, log2 N, is milliseconds of latency).
//!
//! Ours: a cluster's mob is its first `max(1, P / min_share_pieces)` live members by rank
//! ([`mob_size`]), 64 pieces per share by default; the others own no share and take every
//! piece from their local peers, as mob members take the pieces outside their share. A rank's
//! WAN flow then carries a share in a few piece times of the run, and MOB stays at 89-92 % of
//! the bound from 4 x 16 to 4 x 256 nodes on the case above. The mob rule itself is the
//! paper's: each piece still enters each cluster exactly once, through its share owner, and
//! the candidates for global peers are unchanged (a member of rank r < mob size has its
//! candidate of rank r, also a mob member, in every cluster at least as large). With
//! 572 pieces (600 MB in 1 MiB pieces) and clusters of 16 it cuts the mob to 8 members,
//! which raised the Fig. 4 point too (table above); with 256 KiB pieces nothing changes
//! there. [`MobConfig::paper`] sets 0: every member is in the mob.
//!
//! # Request depth: [`MobConfig::adaptive_depth`]
//!
//! The paper keeps R = 5 requests outstanding per peer whatever the flow. That is too many
//! on a slow flow (each queued piece is committed to that peer for several transfer times,
//! long after another mob member could have supplied it) and too few on a long fat one (a
//! 100 ms round trip at 50 MB/s holds five 1 MiB pieces). A fixed byte cap
//! ([`MobConfig::outstanding_bytes`], our earlier default of 256 KiB) fixes the first and
//! worsens the second: one request at a time idles every flow a round trip per piece, which
//! left MOB at 55-76 % of the bound where every node's 12.5 MB/s card is the bottleneck
//! (Fig. 6) and at 85-87 % with uneven clusters (Fig. 5).
//!
//! Ours, as BitTorrent clients pipeline: each node keeps about one bandwidth-delay product
//! plus one piece requested from each peer, `ceil((rate x RTT + piece) / piece - 0.1)` pieces,
//! at least one and at most R. Both are measured per peer from the pieces' arrivals, with the
//! driver's `now` only (no clock of our own, so runs stay deterministic):
//! - **rate**: a piece requested before the previous piece from that peer arrived was queued
//!   behind it at the sender, so the gap between the two arrivals is its transfer time; a
//!   piece requested on an idle flow took its request-to-arrival time, a bound from above.
//!   The rate is the best of the last 16 such samples (a sliding window, so it follows the
//!   flow when its share of a link changes);
//! - **RTT**: request-to-arrival time of a piece requested on an idle flow minus its transfer
//!   time at that rate, the minimum observed (queueing only ever adds to it).
//!
//! A new peer gets one request, whose arrival times the round trip (plus a transfer), then
//! two, the second queued right behind the first, whose arrivals measure the rate (starting
//! with two measured faster but committed slow flows to a second piece at the start: Fig. 5's
//! slow links fell from 87 to 85 % of the bound). When only idle samples are left in the window, the depth
//! goes back to two for one more measurement. A flow whose round trip is short next to a
//! piece's transfer time (the 0.1 of slack: under a tenth of a piece idle per round trip) thus
//! keeps one request at a time, so a node is not committed to pieces another mob member could
//! supply sooner, while a fast long flow stays full: 93 % of a 50 MB/s, 100 ms link with R =
//! 16 and 1 MiB pieces, against 17 % with one request at a time
//! (`adaptive_depth_fills_a_long_fat_flow_and_limits_a_slow_one` in `windrose-sim/tests/mob.rs`).
//! [`MobConfig::paper`] turns it off (R alone); a positive `outstanding_bytes` still caps the
//! depth.
//!
//! # Slow global peers: [`MobConfig::reroute_slow`]
//!
//! Issue 18's series slows the WAN link from the root's cluster to cluster 1 tenfold
//! (`four-clusters.toml`, 0 <-> 1 at 0.5 MB/s; 4 MiB in 16 pieces, one mob member per
//! cluster). The regions above still deal cluster 1 a third of the pieces, and rarest-first
//! keeps its member taking them, only the source holding them, one at a time over the slow
//! link, half a second each: the run took 2.53 x the max-flow bound (6.5 MB/s, every link out
//! of the root's cluster full, cluster 1's data mostly relayed by clusters 2 and 3). The
//! helpers of the lag rule fetch those pieces too, but cluster 1 had already committed them to
//! the slow flow.
//!
//! Ours, on by default in every driver ([`MobConfig::paper`] turns it off): when a global peer
//! `k` has room for a request, a share piece it announced that is requested from another
//! global peer is requested again from `k` when all of these hold:
//! - **both flows are measured**: each peer has delivered a piece to this node (a peer that
//!   has delivered nothing is never judged: at the start every flow is still unmeasured);
//! - **the first peer is slow**: a piece from it on an idle flow (round trip plus transfer at
//!   the best rate in the window, as for the request depth) takes more than
//!   `SLOW_FACTOR` (5) times as long as from `k`;
//! - **the piece is overdue there**: the first peer would deliver it more than
//!   `OVERDUE_FACTOR` (2) times as late as `k`, and `MIN_GAIN_NS` (10 ms) later at least.
//!   The first peer's remaining time counts the requests of this node queued ahead of the
//!   piece there (each driver keeps one ordered stream per peer, so they are sent first),
//!   less the time since the request; `k`'s is (its outstanding requests + 1) deliveries;
//! - **the piece has not moved before**: a piece moves at most once, so each node adds at
//!   most one extra crossing per piece of its share.
//!
//! The first copy still counts against the slow peer's outstanding requests until it arrives
//! (so the slow flow gets no new request meanwhile, and later requests know it is queued ahead
//! of them) and is taken if it comes first. On the case above two requests move, two pieces
//! (1/8 of the data) cross into cluster 1 twice, and the run takes 1.44 x the bound instead of
//! 2.53 x (`a_slowed_link_out_of_the_root_cluster_is_routed_around` in
//! `windrose-sim/tests/mob.rs`, which asserts at most two moves and 512 KiB crossing twice).
//!
//! The first version (2x on the whole delivery time, a peer that had delivered nothing judged
//! by its wait) fired where no link was slow, and four tests' exactly-once checks failed:
//! - `wan_payload_is_clusters_minus_one_times_data` (sim; all WAN links 2 MB/s): the first
//!   peer had delivered only pieces requested on an idle flow, whose request-to-arrival times
//!   bound its rate from above, and the moved piece was merely queued behind this node's own
//!   other request there (2.5x): a false alarm of measurement and of its own queue;
//! - `defaults_come_close_to_the_bound_on_a_static_wan` (sim; uniform 2 MB/s) and
//!   `..._with_clusters_of_different_sizes` (the 3-5 MB/s fast-links WAN): peers in clusters
//!   that relay to each other share their links with more flows than the root's cluster does,
//!   so their flows measured 2.5-4.3x slower (a busy peer, not a slow link), and again the
//!   piece waited behind this node's own request;
//! - `every_node_receives_every_byte` (sim; random links from 10 kB/s to 10 MB/s): true slow
//!   links, where a duplicate is expected; that test now checks that the extra WAN payload is
//!   at most one piece per counted move (`check_wan_moved`);
//! - and the instant-delivery driver of `windrose-proto/tests/mob.rs`, whose clock counts
//!   events: nanosecond "deliveries" differ fivefold by the length of the event queue, which
//!   `MIN_GAIN_NS` leaves alone.
//!
//! With these rules every simulator test whose links are not slowed keeps exactly-once
//! (`check_wan` asserts no move at all), and the slowed link still gains as before.
//!
//! **Departures from the paper:** a moved piece may cross into its cluster twice, so where a
//! link is slow WAN payload is (clusters - 1) x data plus at most one piece per move
//! ([`Mob::rerouted`] counts them). The first request is not cancelled: the machine hands a
//! Piece to its driver as soon as a Request arrives (drivers pace the sending, not the
//! protocol), so by the time a move is decided the slow peer's copy is in its driver's stream;
//! a cancel would need the serving side to hold requests back and pace them by
//! [`Input::SendComplete`], which costs a long fat flow its pipelining, and is not built. The
//! moves are rare instead: the three guards above. Sizing the regions by each cluster's
//! inbound rate from the root (from the Host's link forecasts) would avoid committing pieces
//! to the slow flow at all and is not built either.
//!
//! # Safety nets (not in the paper)
//!
//! - **Stall fallback.** If an incomplete node receives no new piece for
//!   [`MobConfig::stall_timeout_s`] (a random local mesh may, very rarely, be disconnected for
//!   clusters of 12 or more; failures can orphan a mob share), it sends [`Signal::Interested`]
//!   to its peers, meaning "tell me of every piece you hold", and from then on requests any
//!   missing piece from any peer that has it. A peer that receives Interested announces all its
//!   pieces to the sender. If nothing arrives for five more timeouts the node aborts with
//!   [`AbortReason::Timeout`], so no run hangs. The default (60 s) is far above any wait of a
//!   healthy run, so the fallback does not perturb the exactly-once property in practice.
//! - **Failures** ([`Input::PeerFailed`]): the failed node is dropped from the peers, its
//!   outstanding requests are made again to other peers that hold the pieces, the mobs are
//!   recomputed over the live nodes (so its share is taken over; global peers that learn of the
//!   failure re-announce pieces of the new shares), and the acknowledgement tree skips it (a
//!   node reports to its nearest live ancestor and waits for its nearest live descendants). A
//!   node outside the root's cluster whose last live peer there failed peers with a
//!   replacement (the paper's rule over that cluster's live members, the root included), since
//!   every piece first comes from there; a finished node that receives a late Complete (its
//!   sender's parent failed after passing AllComplete on, before it arrived) answers
//!   AllComplete. `windrose-sim/tests/multicast_chaos.rs` runs 1000 seeded cases of 1-3
//!   receivers failing at random times. If
//!   the root fails, every node that has not finished aborts: nobody could confirm the end.
//!   Issue 8 goes further.
//!
//! - **Bad pieces**: a piece that fails verification is dropped and requested again; its
//!   sender (unless the root) is dropped: never asked again, its announcements and pieces
//!   ignored (its requests are still served and its acknowledgements heard: it stays in the
//!   mobs, which every node must compute alike). After [`MAX_BAD_COPIES`] bad copies of one
//!   piece, from any senders, the node aborts ([`AbortReason::BadPiece`]).
//! - **Rejoining** ([`Mob::rejoin`]): a restarted node sends [`Signal::Rejoin`] to the live
//!   members of its cluster and to the root. It comes back as a *guest*: it takes any piece
//!   from whoever announces it, announces none, stays out of the mobs and of the
//!   acknowledgement tree (which went on without it), and reports Complete to the root, which
//!   waits for every live guest before AllComplete. Its hosts tell it of every piece they hold
//!   and serve it. A guest that comes after the end is answered with AllComplete and ends with
//!   [`AbortReason::RunEnded`] unless it kept every piece.
//!
//! # Timers
//!
//! [`STALL_TIMER`] only, armed while the node is incomplete; it is re-armed lazily (at most once
//! per timeout) rather than moved on every piece.
//!
//! # Cost
//!
//! Per message O(peers) at most (a Have fans out to the peers); choosing a piece to request
//! from a local peer is O(1) amortised: each peer keeps the list of pieces it announced that
//! this node may take from it, and entries that became stale (held or requested elsewhere) are
//! discarded when drawn. Choosing a share piece rarest-first scans that peer's list, O(share
//! size), once per request of a share piece. Nothing scans all P pieces except setup, a bitfield, a late peering and failures.
//! Piece bytes are never copied ([`Bytes`] slices of the root's buffer or of receive buffers).

use crate::frame::{Message, MessageKind, TransferId};
use crate::node::{
    AbortReason, Input, Output, Outputs, Protocol, ProtocolError, Report, SetupError, Status,
    TimerId,
};
use crate::pieces::{
    ClusterLayout, Members, PieceStore, SourceMismatch, SwarmSetup, MAX_BAD_COPIES,
};
use crate::pieces::{Piece, PieceMsg, PieceRef, Signal, SignalMsg};
use crate::time::Time;
use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;
use windrose_model::{ClusterId, NodeId};

/// Peer ids to their index in `Mob::peers`: a vector sorted by id, searched by bisection.
///
/// Every message a node handles looks its sender up here. A node has a few dozen peers, and in
/// a B-tree that lookup walked two or three separately allocated nodes: at N = 4,096 and more,
/// where each machine's state is out of cache when its next message comes, each of them was a
/// cache miss. The sorted entries of a few dozen peers fill a few adjacent lines. Lookups only:
/// it is never iterated, so its order cannot reach the protocol's behaviour.
#[derive(Clone, Debug, Default)]
struct PeerIndex(Vec<(NodeId, u32)>);

impl PeerIndex {
    fn get(&self, id: &NodeId) -> Option<usize> {
        let at = self.0.binary_search_by_key(id, |&(p, _)| p).ok()?;
        Some(self.0[at].1 as usize)
    }

    fn contains_key(&self, id: &NodeId) -> bool {
        self.get(id).is_some()
    }

    /// Adds `id` at index `k` (`id` must not be there yet).
    fn insert(&mut self, id: NodeId, k: usize) {
        let k = u32::try_from(k).expect("fewer than 2^32 peers");
        match self.0.binary_search_by_key(&id, |&(p, _)| p) {
            Ok(_) => unreachable!("peer {id:?} is indexed once"),
            Err(at) => self.0.insert(at, (id, k)),
        }
    }
}

/// The stall timer: fires when an incomplete node may have received nothing for
/// [`MobConfig::stall_timeout_s`] (see the module docs).
pub const STALL_TIMER: TimerId = TimerId(0);

/// Stall timeouts without any progress, after the fallback, before a node gives up.
const STALLS_BEFORE_ABORT: u32 = 5;

/// The default [`MobConfig::min_share_pieces`] (see "Mob size" in the module docs).
pub const MIN_SHARE_PIECES: u32 = 64;

/// Delivery samples kept per peer for its rate (the sliding window, in pieces).
const RATE_WINDOW: usize = 16;

/// The adaptive depth is (rate x RTT + piece) / piece rounded up once it exceeds a whole
/// number by more than this fraction of a piece: a flow whose round trip is a few percent of a
/// piece's transfer time keeps one request (the idle time is negligible and other flows fill
/// the link), while a flow that would idle a tenth of a piece per round trip gets one more.
const DEPTH_SLACK: f64 = 0.1;

/// A global peer is slow ([`MobConfig::reroute_slow`]) when a piece from it, on an idle flow,
/// takes more than this many times as long as from the peer a request would move to. Flows
/// differ by their sharing too: a busy peer's flow on the simulator's platforms without a
/// slowed link measured up to 4.3x slower than another's (see "Slow global peers" in the
/// module docs); the series' link slowed tenfold gives 6.9x.
const SLOW_FACTOR: u64 = 5;

/// A request to a slow peer moves only when the piece would still take more than this many
/// times as long to come from there (its queue ahead counted) as from the other peer.
const OVERDUE_FACTOR: u64 = 2;

/// ... and only when that saves at least this much (ns). A move costs a second WAN crossing;
/// below a few milliseconds the measurements are at the resolution of the drivers' progress
/// (the MPI shim progresses only inside MPI calls; a test driver's clock may count events),
/// where a flow that looks five times slower is noise.
const MIN_GAIN_NS: u64 = 10_000_000;

/// What a node measures of the flow from one peer, to size its request queue
/// ([`MobConfig::adaptive_depth`]; see "Request depth" in the module docs).
#[derive(Clone, Debug)]
struct Pipe {
    /// Arrival of the last requested piece this peer delivered.
    last_arrival: Option<Time>,
    /// The last [`RATE_WINDOW`] deliveries: (bytes, transfer time in ns, queued). A piece
    /// requested before the previous one arrived was queued behind it at the sender: its
    /// transfer time is the gap between the two arrivals. Otherwise the flow was idle and the
    /// time from its request to its arrival (round trip included) bounds it from above.
    samples: VecDeque<(u64, u64, bool)>,
    /// The smallest round trip derived: request to arrival of a piece sent on an idle flow,
    /// minus its transfer time at the measured rate (ns).
    rtt_ns: Option<u64>,
    /// The shortest request-to-arrival time (ns) of a piece sent on an idle flow, and its
    /// bytes, not yet turned into a round trip (no rate measured then).
    pending: Option<(u64, u64)>,
    /// Requests to keep outstanding (before the limits of the configuration).
    depth: usize,
}

impl Pipe {
    fn new() -> Pipe {
        Pipe {
            last_arrival: None,
            samples: VecDeque::new(),
            rtt_ns: None,
            pending: None,
            // One at first: its arrival times the round trip (plus a transfer); then two, the
            // second queued right behind the first, whose arrivals measure the flow's rate.
            depth: 1,
        }
    }

    /// The best delivery rate in the window, as (bytes, ns), and whether any sample was
    /// queued (only those measure the flow's rate rather than a lower bound of it).
    fn rate(&self) -> Option<((u64, u64), bool)> {
        let best = self
            .samples
            .iter()
            .map(|&(b, d, _)| (b, d))
            .max_by(|x, y| {
                (u128::from(x.0) * u128::from(y.1)).cmp(&(u128::from(y.0) * u128::from(x.1)))
            })?;
        Some((best, self.samples.iter().any(|s| s.2)))
    }

    /// The time (ns) from a request on an idle flow to the arrival of a `piece_len`-byte piece:
    /// the round trip (0 while unmeasured) plus its transfer at the best rate in the window.
    /// None before any delivery.
    fn delivery_ns(&self, piece_len: u64) -> Option<u64> {
        let ((b, d), _) = self.rate()?;
        let transfer = u128::from(piece_len) * u128::from(d) / u128::from(b.max(1));
        Some(
            self.rtt_ns
                .unwrap_or(0)
                .saturating_add(transfer.min(u128::from(u64::MAX)) as u64),
        )
    }

    /// The transfer time (ns) of a `piece_len`-byte piece at the best rate in the window
    /// (None before any delivery): what each piece queued ahead of another adds to its wait.
    fn transfer_ns(&self, piece_len: u64) -> Option<u64> {
        let ((b, d), _) = self.rate()?;
        let t = u128::from(piece_len) * u128::from(d) / u128::from(b.max(1));
        Some(t.min(u128::from(u64::MAX)) as u64)
    }

    /// Records the arrival at `now` of `bytes` requested at `sent` and recomputes the depth
    /// for pieces of `piece_len` bytes.
    fn on_arrival(&mut self, now: Time, sent: Time, bytes: u64, piece_len: u64) {
        let sojourn = now.saturating_since(sent).as_nanos().max(1) as u64;
        let idle = self.last_arrival.is_none_or(|la| sent >= la);
        let start = match self.last_arrival {
            Some(la) if !idle => la,
            _ => sent,
        };
        let dur = now.saturating_since(start).as_nanos().max(1) as u64;
        self.last_arrival = Some(now);
        self.samples.push_back((bytes, dur, !idle));
        if self.samples.len() > RATE_WINDOW {
            self.samples.pop_front();
        }
        if idle && self.pending.is_none_or(|(s, _)| sojourn < s) {
            self.pending = Some((sojourn, bytes));
        }
        let Some(((rb, rd), measured)) = self.rate() else {
            return;
        };
        if !measured {
            // Only lower bounds of the rate so far: probe with a second request, whose
            // arrival right after the first measures the flow.
            self.depth = 2;
            return;
        }
        if let Some((s, b)) = self.pending.take() {
            let transfer = (u128::from(b) * u128::from(rd) / u128::from(rb.max(1))) as u64;
            let rtt = s.saturating_sub(transfer);
            self.rtt_ns = Some(self.rtt_ns.map_or(rtt, |r| r.min(rtt)));
        }
        let Some(rtt) = self.rtt_ns else {
            self.depth = 2;
            return;
        };
        let in_flight = rb as f64 * rtt as f64 / rd.max(1) as f64;
        let pieces = (in_flight + piece_len.max(1) as f64) / piece_len.max(1) as f64;
        self.depth = ((pieces - DEPTH_SLACK).ceil().max(1.0)).min(u32::MAX as f64) as usize;
    }
}

/// MOB's parameters; every node of one run must use the same values.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct MobConfig {
    /// Local peers each node picks (phase 1; the paper uses 5).
    pub local_peers: usize,
    /// Global peers each node picks (phase 2; the paper uses 5).
    pub global_peers: usize,
    /// Requests outstanding per peer (R; the paper uses 5): enough to keep a peer's link busy
    /// across a round trip.
    pub outstanding: usize,
    /// Seconds without a new piece after which an incomplete node falls back to stealing any
    /// piece from any peer (0: never; see the module docs).
    pub stall_timeout_s: f64,
    /// How a share piece is chosen among those a global peer (or the root) announced.
    pub piece_choice: PieceChoice,
    /// When positive, also limits the requests outstanding per peer to as many pieces as fit
    /// in this many bytes (at least one); 0: no byte cap (the default and the paper's). A fixed
    /// cap costs a round trip of idle time per piece on each flow whenever it holds fewer
    /// pieces than the flow's bandwidth-delay product; [`MobConfig::adaptive_depth`] sizes the
    /// queue per peer instead. Kept for experiments and for a hard limit on top of it.
    pub outstanding_bytes: u64,
    /// Ours, default on (the paper: off): keep about one bandwidth-delay product plus one
    /// piece requested from each peer — its delivery rate times the request round trip, both
    /// measured per peer from the pieces' arrivals — at least one piece and at most
    /// [`MobConfig::outstanding`]. A fast, long flow stays full; a slow flow gets one request at
    /// a time, so a node is not committed to pieces another mob could supply sooner. See
    /// "Request depth" in the module docs.
    pub adaptive_depth: bool,
    /// Ours (the paper: 0, every member owns a share): the fewest pieces a mob share may hold.
    /// A cluster's mob is cut to its first `max(1, P / min_share_pieces)` members by rank when
    /// it has more; the others own no share and take every piece from their local peers. See
    /// "Mob size" in the module docs.
    pub min_share_pieces: u32,
    /// Ours, default on (the paper: off): a share piece requested from a slow global peer
    /// (measured five times slower than another that announced it) that would deliver it much
    /// later is requested again from the other (the first copy is still taken when it comes),
    /// which gives up the exactly-once rule for that piece; each piece moves at most once.
    /// See "Slow global peers" in the module docs.
    pub reroute_slow: bool,
}

/// How a node chooses the next piece of its mob share to request from a global peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PieceChoice {
    /// At random among the pieces the peer announced (the paper, after BitTorrent).
    Random,
    /// The pieces the fewest of this node's global peers announced first, at random among
    /// ties (BitTorrent's rarest-first, applied to the mob share only; see the module docs).
    RarestFirst,
}

impl Default for MobConfig {
    fn default() -> Self {
        MobConfig {
            local_peers: 5,
            global_peers: 5,
            outstanding: 5,
            stall_timeout_s: 60.0,
            piece_choice: PieceChoice::RarestFirst,
            outstanding_bytes: 0,
            adaptive_depth: true,
            min_share_pieces: MIN_SHARE_PIECES,
            reroute_slow: true,
        }
    }
}

windrose_trees::named_enum! {
    /// Which MOB runs: the paper's, or ours with the additions [`MobConfig::default`] lists
    /// (a scenario's `workload.mob_variant`, the CLI's `--mob-variant`).
    #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
    pub enum MobVariant: "MOB variant" {
        /// Ours (the default): rarest-first inside the mob share, request depth per peer adapted
        /// to its measured rate and round trip, requests moved away from slow global peers.
        #[default]
        Windrose = "windrose",
        /// The paper's: random piece choice, R = 5 requests per peer.
        Paper = "paper",
    }
}

impl MobVariant {
    /// The machine parameters of this variant.
    pub fn config(self) -> MobConfig {
        match self {
            MobVariant::Windrose => MobConfig::default(),
            MobVariant::Paper => MobConfig::paper(),
        }
    }
}

impl MobConfig {
    /// The paper's MOB and nothing more: random piece choice among what a global peer
    /// announced and R = 5 requests per peer, always. [`MobConfig::default`] is ours: the same
    /// protocol with rarest-first inside the mob share and a request depth adapted per peer
    /// to its bandwidth-delay product (at most R), which moves MOB from 36-74 % to 79-97 % of
    /// the max-flow bound on the seed-002 scenarios, and requests moved away from slow global
    /// peers (see the module docs).
    pub fn paper() -> MobConfig {
        MobConfig {
            piece_choice: PieceChoice::Random,
            outstanding_bytes: 0,
            adaptive_depth: false,
            min_share_pieces: 0,
            reroute_slow: false,
            ..MobConfig::default()
        }
    }

    /// Checks the values: at least one local and one global peer and one outstanding request
    /// (with none, some pieces could never move), a finite non-negative stall timeout.
    pub fn validate(&self) -> Result<(), SetupError> {
        for (what, v) in [
            ("local_peers", self.local_peers),
            ("global_peers", self.global_peers),
            ("outstanding", self.outstanding),
        ] {
            if v == 0 || v > u32::MAX as usize {
                return Err(SetupError::Config {
                    what,
                    requirement: "between 1 and 2^32 - 1",
                    value: v.to_string(),
                });
            }
        }
        if !self.stall_timeout_s.is_finite() || self.stall_timeout_s < 0.0 {
            return Err(SetupError::Config {
                what: "stall_timeout_s",
                requirement: "finite and non-negative",
                value: self.stall_timeout_s.to_string(),
            });
        }
        Ok(())
    }
}

/// The mob share of the node of rank `rank` in a mob of `size` nodes, for `pieces` pieces:
/// `floor(rank*P/size) .. floor((rank+1)*P/size)` (the paper's formula; empty when `rank` is
/// not below `size`). The shares of ranks `0..size` partition `0..pieces` in order.
pub fn mob_share(rank: usize, size: usize, pieces: u32) -> Range<u32> {
    if rank >= size {
        return 0..0;
    }
    let p = u128::from(pieces);
    let (r, s) = (rank as u128, size as u128);
    let lo = (r * p / s) as u32;
    let hi = ((r + 1) * p / s) as u32;
    lo..hi
}

/// How many members of a mob of `members` nodes own a share of `pieces` pieces when a share
/// must hold at least `min_share_pieces` of them (0: no minimum, every member; see "Mob size"
/// in the module docs): `min(members, max(1, pieces / min_share_pieces))`.
pub fn mob_size(members: usize, pieces: u32, min_share_pieces: u32) -> usize {
    match pieces.checked_div(min_share_pieces) {
        None => members,
        Some(cap) => members.min(cap.max(1) as usize),
    }
}

/// The global peer candidates of `node` (phase 2): in every other cluster y, in cluster order,
/// the member p with r(y, p) = r(x, node) mod s(y) — one node per other cluster. Empty when
/// `node` is not in the layout.
pub fn global_peer_candidates(layout: &ClusterLayout, node: NodeId) -> Vec<NodeId> {
    let (Some(x), Some(r)) = (layout.cluster_of(node), layout.rank(node)) else {
        return Vec::new();
    };
    layout
        .clusters()
        .filter(|&y| y != x)
        .filter_map(|y| {
            let m = layout.members(y);
            (!m.is_empty()).then(|| m[r % m.len()])
        })
        .collect()
}

/// How this node relates to a peer, which decides what it may steal from it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// Same cluster (not the root): pieces outside this node's share.
    Local,
    /// Another cluster: pieces of this node's share (never in the root's cluster).
    Global,
    /// The root, seen from its own cluster: pieces of this node's share.
    Root,
}

#[derive(Clone, Debug)]
struct Peer {
    id: NodeId,
    kind: Kind,
    alive: bool,
    /// The peer's own mob share (what it is told of when it is a global peer).
    share: Range<u32>,
    /// The peer asked to hear of every piece (stall fallback).
    wants_all: bool,
    /// The peer is in the root's cluster (it takes nothing from outside).
    in_root_cluster: bool,
    /// Pieces it announced.
    has: Vec<u64>,
    /// Pieces it announced that this node may want from it; stale entries are dropped lazily.
    cand: Vec<u32>,
    /// Requests sent to it and not yet answered.
    outstanding: usize,
    /// Its flow's rate and round trip, for the adaptive request depth.
    pipe: Pipe,
}

fn bit(set: &[u64], i: u32) -> bool {
    set.get((i / 64) as usize)
        .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
}

fn set_bit(set: &mut [u64], i: u32) {
    if let Some(w) = set.get_mut((i / 64) as usize) {
        *w |= 1u64 << (i % 64);
    }
}

/// A MOB node. See the [module docs](self).
#[derive(Debug)]
pub struct Mob {
    me: NodeId,
    setup: SwarmSetup,
    config: MobConfig,
    rng: ChaCha8Rng,
    status: Status,
    started: bool,
    is_root: bool,
    my_cluster: ClusterId,
    root_cluster: ClusterId,
    pieces: u32,
    store: PieceStore,
    /// This node's mob share.
    share: Range<u32>,
    /// Live mob members per cluster, sorted by id (the root excluded): the shares' basis.
    /// Until this node hears of a failure, the layout's map shared by every machine.
    mobs: Arc<Members>,
    peers: Vec<Peer>,
    peer_index: PeerIndex,
    /// Per piece: the peer (index) it was requested from.
    requested: Vec<Option<u32>>,
    /// Per piece: when it was last requested (for the adaptive depth).
    requested_at: Vec<Time>,
    /// Per piece: the sequence number of its last request (requests to one peer are answered
    /// in this order, so it tells which are queued ahead of a piece at that peer).
    requested_seq: Vec<u64>,
    /// The next request's sequence number.
    next_seq: u64,
    /// Share pieces requested from global peers, the candidates for [`Mob::reroute`]; entries
    /// whose request was answered or moved elsewhere are dropped lazily.
    global_requests: Vec<(u32, u64)>,
    /// Requests moved away from a slow global peer and not yet answered by it: (piece, peer
    /// index, when it was requested, its sequence number). Its copy still counts against the
    /// peer's outstanding requests until it arrives, so the slow flow gets no new request
    /// meanwhile, and it is still queued ahead of later requests there.
    superseded: Vec<(u32, u32, Time, u64)>,
    /// Requests moved away from slow global peers so far.
    rerouted: u64,
    /// Per piece of this node's share: live global peers (or the root) that announced it.
    avail: Vec<u16>,
    /// How many regions the pieces are dealt into: the clusters that take pieces from outside
    /// (1 in the root's cluster).
    region_count: u32,
    /// This node's region: piece `i` is in region `i % region_count`; this cluster's position
    /// among the clusters that are not the root's.
    region_residue: u32,
    /// Set once every piece of the region is held or requested.
    region_done: bool,
    /// Requests outstanding per peer: R, capped by `outstanding_bytes` (and per peer by its
    /// adaptive depth when enabled).
    request_limit: usize,
    failed: BTreeSet<NodeId>,
    /// Stall fallback active: steal anything from anyone.
    relaxed: bool,
    last_progress: Time,
    stalls: u32,
    stall_armed: bool,
    /// The root's position among every node by id: the acknowledgement tree's heap order is
    /// the root, then the others by id ([`Mob::ack_node`], [`Mob::ack_pos`]).
    root_index: usize,
    acks: BTreeSet<NodeId>,
    complete_sent_to: Option<NodeId>,
    /// This machine is a restarted node's ([`Mob::rejoin`]): a guest of the run.
    rejoined: bool,
    /// Restarted nodes that rejoined through this node (guests): served and told of every
    /// piece, never asked for one, outside the mobs and the acknowledgement tree.
    guests: BTreeSet<NodeId>,
    /// At the root: guests that reported Complete.
    guests_done: BTreeSet<NodeId>,
    /// Peers that sent a piece that failed verification: never asked or heard again (they
    /// stay in the mobs, which every node must compute alike).
    banned: BTreeSet<NodeId>,
    /// Bad copies received of each piece (see [`MAX_BAD_COPIES`]).
    bad_copies: BTreeMap<u32, u32>,
    /// The time of the input being handled (requests are stamped with it).
    now: Time,
}

impl Mob {
    /// The machine of `node`: `data` only at the root; randomness (peer choices, piece choices)
    /// from `rng` only.
    ///
    /// Errors: `node` or the root outside the layout, data at the wrong node or of the wrong
    /// length, invalid `config`.
    pub fn new(
        node: NodeId,
        setup: &SwarmSetup,
        data: Option<Bytes>,
        config: MobConfig,
        rng: ChaCha8Rng,
    ) -> Result<Mob, SetupError> {
        config.validate()?;
        setup.check(node, data.as_ref())?;
        let layout = &setup.layout;
        let manifest = &setup.manifest;
        let store = match &data {
            Some(d) => PieceStore::full(manifest, d),
            None => setup.empty_store(),
        };
        let my_cluster = layout.cluster_of(node).expect("checked");
        let root_cluster = layout.cluster_of(setup.root).expect("checked");
        let root_index = layout.index_of(setup.root).expect("checked");
        let pieces = manifest.piece_count();
        let mut m = Mob {
            me: node,
            setup: setup.clone(),
            config,
            rng,
            status: Status::Running,
            started: false,
            is_root: node == setup.root,
            my_cluster,
            root_cluster,
            pieces,
            store,
            share: 0..0,
            mobs: Arc::default(),
            peers: Vec::new(),
            peer_index: PeerIndex::default(),
            requested: vec![None; pieces as usize],
            requested_at: vec![Time::ZERO; pieces as usize],
            requested_seq: vec![0; pieces as usize],
            next_seq: 0,
            global_requests: Vec::new(),
            superseded: Vec::new(),
            rerouted: 0,
            avail: vec![0; pieces as usize],
            region_count: 1,
            region_residue: 0,
            region_done: false,
            request_limit: 1,
            failed: BTreeSet::new(),
            relaxed: false,
            last_progress: Time::ZERO,
            stalls: 0,
            stall_armed: false,
            root_index,
            acks: BTreeSet::new(),
            complete_sent_to: None,
            rejoined: false,
            guests: BTreeSet::new(),
            guests_done: BTreeSet::new(),
            banned: BTreeSet::new(),
            bad_copies: BTreeMap::new(),
            now: Time::ZERO,
        };
        m.compute_mobs();
        m.set_share();
        m.request_limit = match m.config.outstanding_bytes {
            0 => m.config.outstanding,
            b => {
                let fit = b / u64::from(manifest.piece_len().max(1));
                m.config.outstanding.min(fit.max(1) as usize)
            }
        };
        Ok(m)
    }

    /// The machine of `node` restarting mid-run with the pieces it kept (e.g. verified pieces
    /// read back from its partial output file): each one is verified against the manifest and
    /// kept only if it matches. See "Rejoining" in the [module docs](self).
    ///
    /// Errors: those of [`Mob::new`]; the root cannot rejoin (its failure ends the run).
    pub fn rejoin(
        node: NodeId,
        setup: &SwarmSetup,
        config: MobConfig,
        rng: ChaCha8Rng,
        held: impl IntoIterator<Item = (u32, Bytes)>,
    ) -> Result<Mob, SetupError> {
        if node == setup.root {
            return Err(SetupError::Data {
                node,
                what: "the root cannot rejoin: its failure ends the run",
            });
        }
        let mut m = Mob::new(node, setup, None, config, rng)?;
        for (i, data) in setup.verified_pieces(held) {
            m.store.insert(i, data);
        }
        m.rejoined = true;
        m.relaxed = true;
        Ok(m)
    }

    /// True for a restarted node's machine ([`Mob::rejoin`]).
    pub fn is_rejoined(&self) -> bool {
        self.rejoined
    }

    /// This node's mob share (empty at the root).
    pub fn share(&self) -> Range<u32> {
        self.share.clone()
    }

    /// The peers in the order they were added (live or not), for inspection.
    pub fn peers(&self) -> Vec<NodeId> {
        self.peers.iter().map(|p| p.id).collect()
    }

    /// The local peers (same cluster, the root included), by id.
    pub fn local_peers(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|p| p.kind != Kind::Global)
            .map(|p| p.id)
            .collect();
        v.sort();
        v
    }

    /// The global peers (other clusters), by id.
    pub fn global_peers(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|p| p.kind == Kind::Global)
            .map(|p| p.id)
            .collect();
        v.sort();
        v
    }

    /// True once every piece is held.
    pub fn is_complete(&self) -> bool {
        self.store.is_complete()
    }

    /// Pieces held.
    pub fn held(&self) -> u32 {
        self.store.held()
    }

    /// Requests this node moved away from slow global peers ("Slow global peers" in the
    /// module docs).
    pub fn rerouted(&self) -> u64 {
        self.rerouted
    }

    /// True once the stall fallback has been taken.
    pub fn fell_back(&self) -> bool {
        self.relaxed
    }

    /// Recomputes the mobs over the live nodes (the root excluded).
    fn compute_mobs(&mut self) {
        let layout = &self.setup.layout;
        if self.failed.is_empty() {
            self.mobs = layout.members_without(self.setup.root);
            return;
        }
        self.mobs = Arc::new(
            layout
                .clusters()
                .map(|c| {
                    let m: Vec<NodeId> = layout
                        .members(c)
                        .iter()
                        .copied()
                        .filter(|&n| n != self.setup.root && !self.failed.contains(&n))
                        .collect();
                    (c, m)
                })
                .collect(),
        );
    }

    /// Sets this node's share and region from the current mobs.
    fn set_share(&mut self) {
        self.share = self.share_of(self.me);
        let others: Vec<ClusterId> = self
            .setup
            .layout
            .clusters()
            .filter(|&c| c != self.root_cluster)
            .collect();
        let q = others.binary_search(&self.my_cluster).unwrap_or(0) as u32;
        let k = if self.in_root_cluster() {
            1
        } else {
            others.len().max(1) as u32
        };
        self.region_count = k;
        self.region_residue = q % k;
        self.region_done = false;
    }

    /// The mob share of `node` under the current mobs.
    fn share_of(&self, node: NodeId) -> Range<u32> {
        let Some(c) = self.setup.layout.cluster_of(node) else {
            return 0..0;
        };
        let mob = self.mobs.get(&c).map_or(&[][..], Vec::as_slice);
        match mob.binary_search(&node) {
            Ok(r) => mob_share(
                r,
                mob_size(mob.len(), self.pieces, self.config.min_share_pieces),
                self.pieces,
            ),
            Err(_) => 0..0,
        }
    }

    fn in_root_cluster(&self) -> bool {
        self.my_cluster == self.root_cluster
    }

    /// After a failure: a node outside the root's cluster keeps a live peer in the root's
    /// cluster, where every piece first comes from. When its last one failed it peers with a
    /// replacement, chosen by the paper's rule (r(x, n) mod s(y)) among the live members of the
    /// root's cluster, the root included. Without it, a node whose only candidate there failed
    /// (and whose cluster mates failed too) could never get its share.
    fn keep_a_root_cluster_peer(&mut self, out: &mut Outputs) {
        if self.in_root_cluster() || self.rejoined {
            return;
        }
        let has_one = self.peers.iter().any(|p| {
            p.alive && p.in_root_cluster && p.kind == Kind::Global && !self.guests.contains(&p.id)
        });
        if has_one {
            return;
        }
        let layout = &self.setup.layout;
        let Some(r) = layout.rank(self.me) else {
            return;
        };
        let live: Vec<NodeId> = layout
            .members(self.root_cluster)
            .iter()
            .copied()
            .filter(|n| !self.failed.contains(n) && !self.banned.contains(n))
            .collect();
        if live.is_empty() {
            return;
        }
        let id = live[r % live.len()];
        if let Some(k) = self.peer_index.get(&id) {
            // Known (e.g. it said Hello) but not as a source yet: nothing to open.
            let _ = k;
            return;
        }
        out.send(id, self.signal(Signal::Hello, 0));
        self.add_peer(id, out);
    }

    /// May this node take piece `i` from a peer of kind `kind`?
    fn allowed(&self, kind: Kind, i: u32) -> bool {
        if self.relaxed {
            return true;
        }
        let mine = self.share.contains(&i);
        match kind {
            Kind::Local => !mine,
            Kind::Root => mine,
            Kind::Global => mine && !self.in_root_cluster(),
        }
    }

    /// Should peer `p` hear that this node holds piece `i`?
    /// A peer that announced the piece itself is not told (it will never ask for it).
    fn tells(&self, p: &Peer, i: u32) -> bool {
        if self.rejoined || !p.alive || p.id == self.setup.root || bit(&p.has, i) {
            return false;
        }
        p.wants_all
            || match p.kind {
                Kind::Local | Kind::Root => true,
                Kind::Global => p.share.contains(&i) && !p.in_root_cluster,
            }
    }

    fn transfer(&self) -> TransferId {
        self.setup.transfer
    }

    fn signal(&self, signal: Signal, arg: u32) -> Message {
        Message::Pieces(PieceMsg::Signal(SignalMsg {
            transfer: self.transfer(),
            signal,
            arg,
        }))
    }

    /// Adds a peer (or revives nothing: a known peer is returned as is); tells it what it is
    /// to hear of what this node already holds. Returns its index.
    fn add_peer(&mut self, id: NodeId, out: &mut Outputs) -> usize {
        if let Some(k) = self.peer_index.get(&id) {
            return k;
        }
        let cluster = self.setup.layout.cluster_of(id);
        let kind = if cluster != Some(self.my_cluster) {
            Kind::Global
        } else if id == self.setup.root {
            Kind::Root
        } else {
            Kind::Local
        };
        let k = self.peers.len();
        self.peers.push(Peer {
            id,
            kind,
            alive: !self.failed.contains(&id),
            share: self.share_of(id),
            wants_all: false,
            in_root_cluster: cluster == Some(self.root_cluster),
            has: vec![0; (self.pieces as usize).div_ceil(64)],
            cand: Vec::new(),
            outstanding: 0,
            pipe: Pipe::new(),
        });
        self.peer_index.insert(id, k);
        self.announce_held(k, None, out);
        k
    }

    /// Tells peer `k` of the held pieces it is to hear of (the root: its bitfield), skipping
    /// those in `skip` (already told).
    fn announce_held(&mut self, k: usize, skip: Option<&Range<u32>>, out: &mut Outputs) {
        if self.store.held() == 0 || self.rejoined {
            return;
        }
        let peer = &self.peers[k];
        if !peer.alive || peer.id == self.setup.root {
            return;
        }
        if self.is_root {
            if skip.is_none() {
                out.send(
                    peer.id,
                    Message::Pieces(PieceMsg::Bitfield(self.store.bitfield(self.transfer()))),
                );
            }
            return;
        }
        for i in 0..self.pieces {
            if self.store.has(i) && self.tells(peer, i) && !skip.is_some_and(|r| r.contains(&i)) {
                out.send(
                    peer.id,
                    Message::Pieces(PieceMsg::Have(PieceRef {
                        transfer: self.transfer(),
                        piece: i,
                    })),
                );
            }
        }
    }

    fn on_start(&mut self, now: Time, out: &mut Outputs) {
        if self.started {
            return;
        }
        self.started = true;
        self.last_progress = now;
        if self.rejoined {
            self.start_rejoined(now, out);
            return;
        }
        let layout = self.setup.layout.clone();
        // Phase 1: local peers.
        let locals: Vec<NodeId> = layout
            .members(self.my_cluster)
            .iter()
            .copied()
            .filter(|&n| n != self.me)
            .collect();
        let mut chosen: Vec<NodeId> = locals
            .choose_multiple(&mut self.rng, self.config.local_peers)
            .copied()
            .collect();
        if self.in_root_cluster() && !self.is_root && !chosen.contains(&self.setup.root) {
            chosen.push(self.setup.root);
        }
        // Phase 2: global peers.
        let candidates = global_peer_candidates(&layout, self.me);
        if candidates.len() <= self.config.global_peers {
            chosen.extend(&candidates);
        } else {
            let keep = (!self.in_root_cluster())
                .then(|| {
                    candidates
                        .iter()
                        .copied()
                        .find(|&c| layout.cluster_of(c) == Some(self.root_cluster))
                })
                .flatten();
            let rest: Vec<NodeId> = candidates
                .iter()
                .copied()
                .filter(|&c| Some(c) != keep)
                .collect();
            let n = self.config.global_peers - usize::from(keep.is_some());
            chosen.extend(keep);
            chosen.extend(rest.choose_multiple(&mut self.rng, n).copied());
        }
        for id in chosen {
            if self.peer_index.contains_key(&id) {
                continue;
            }
            out.send(id, self.signal(Signal::Hello, 0));
            self.add_peer(id, out);
        }
        let total = self.setup.manifest.total_len();
        if self.is_root {
            out.push(Output::Report(Report::Progress {
                transfer: self.setup.transfer,
                done_bytes: total,
                total_bytes: total,
            }));
        } else if self.store.is_complete() {
            // Empty data: nothing to fetch.
            out.push(Output::Report(Report::Progress {
                transfer: self.setup.transfer,
                done_bytes: 0,
                total_bytes: total,
            }));
        } else {
            self.arm_stall(now, out);
        }
        self.check_ack(out);
    }

    /// A restarted node's start: it asks every live member of its cluster and the root to take
    /// it back ([`Signal::Rejoin`]), hands the kept pieces to its application, and steals
    /// anything it misses from whoever announces it.
    fn start_rejoined(&mut self, now: Time, out: &mut Outputs) {
        let layout = self.setup.layout.clone();
        let mut hosts: Vec<NodeId> = layout
            .members(self.my_cluster)
            .iter()
            .copied()
            .filter(|&n| n != self.me)
            .collect();
        if !hosts.contains(&self.setup.root) {
            hosts.push(self.setup.root);
        }
        for id in hosts {
            if self.failed.contains(&id) || self.peer_index.contains_key(&id) {
                continue;
            }
            out.send(id, self.signal(Signal::Rejoin, 0));
            self.add_peer(id, out);
        }
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
        if !self.store.is_complete() {
            self.arm_stall(now, out);
        }
        self.check_ack(out);
    }

    /// A restarted node asks to rejoin: it becomes a guest (see the [module docs](self)). The
    /// root answers a guest that comes after the end with AllComplete.
    /// Stops asking `peer` for anything: its outstanding requests go elsewhere, and a node
    /// outside the root's cluster that loses its source there peers with a replacement.
    fn ban(&mut self, peer: NodeId, out: &mut Outputs) {
        let Some(k) = self.peer_index.get(&peer) else {
            return;
        };
        self.peers[k].alive = false;
        self.peers[k].cand.clear();
        self.peers[k].outstanding = 0;
        self.forget_superseded(k);
        let orphaned: Vec<u32> = (0..self.pieces)
            .filter(|&i| self.requested[i as usize] == Some(k as u32))
            .collect();
        for &i in &orphaned {
            self.requested[i as usize] = None;
        }
        self.keep_a_root_cluster_peer(out);
        self.recount_avail();
        for i in orphaned {
            self.requeue(i, out);
        }
    }

    fn on_rejoin(&mut self, from: NodeId, out: &mut Outputs) {
        if self.status == Status::Finished {
            if self.is_root {
                out.send(from, self.signal(Signal::AllComplete, self.me.0));
            }
            return;
        }
        if self.status != Status::Running || self.rejoined || self.banned.contains(&from) {
            return;
        }
        if !self.failed.contains(&from) {
            // Its failure was not reported (yet): its earlier life is over all the same.
            self.on_peer_failed(from, out);
            if self.status != Status::Running {
                return;
            }
        }
        self.guests.insert(from);
        self.guests_done.remove(&from);
        let k = self.add_peer(from, out);
        let words = self.peers[k].has.len();
        let p = &mut self.peers[k];
        p.alive = true;
        p.wants_all = true;
        p.share = 0..0;
        p.has = vec![0; words];
        p.cand.clear();
        p.outstanding = 0;
        self.forget_superseded(k);
        self.announce_held(k, None, out);
    }

    fn arm_stall(&mut self, now: Time, out: &mut Outputs) {
        if self.config.stall_timeout_s > 0.0 {
            self.stall_armed = true;
            out.push(Output::SetTimer {
                timer: STALL_TIMER,
                at: now + Duration::from_secs_f64(self.config.stall_timeout_s),
            });
        }
    }

    fn on_stall_timer(&mut self, now: Time, out: &mut Outputs) {
        if !self.stall_armed || self.status != Status::Running || self.store.is_complete() {
            return;
        }
        let timeout = Duration::from_secs_f64(self.config.stall_timeout_s);
        let idle = now - self.last_progress;
        if idle < timeout {
            self.stall_armed = true;
            out.push(Output::SetTimer {
                timer: STALL_TIMER,
                at: self.last_progress + timeout,
            });
            return;
        }
        if !self.relaxed {
            self.relaxed = true;
            for k in 0..self.peers.len() {
                if self.peers[k].alive {
                    out.send(self.peers[k].id, self.signal(Signal::Interested, 0));
                }
            }
            self.rebuild_candidates(out);
        } else {
            self.stalls += 1;
            if self.stalls >= STALLS_BEFORE_ABORT {
                self.stall_armed = false;
                self.status = Status::Aborted;
                out.push(Output::Aborted(AbortReason::Timeout { waited: idle }));
                return;
            }
        }
        self.stall_armed = true;
        out.push(Output::SetTimer {
            timer: STALL_TIMER,
            at: now + timeout,
        });
    }

    /// Sends requests to peer `k` until R are outstanding or it has nothing this node may take.
    fn fill(&mut self, k: usize, out: &mut Outputs) {
        let r = if self.config.adaptive_depth {
            self.request_limit.min(self.peers[k].pipe.depth.max(1))
        } else {
            self.request_limit
        };
        let kind = self.peers[k].kind;
        if kind == Kind::Global && self.config.reroute_slow {
            self.reroute(k, r, out);
        }
        let rarest = self.config.piece_choice == PieceChoice::RarestFirst
            && !self.relaxed
            && kind != Kind::Local;
        loop {
            let peer = &self.peers[k];
            if !peer.alive || peer.outstanding >= r || peer.cand.is_empty() {
                return;
            }
            let i = if rarest {
                let mut cand = std::mem::take(&mut self.peers[k].cand);
                cand.retain(|&i| {
                    !self.store.has(i)
                        && self.requested[i as usize].is_none()
                        && self.allowed(kind, i)
                });
                // Rarest first; among pieces only the source has, this node's region first,
                // unless another region lags well behind (its owner's link is slow): then
                // that one, from the far end of its owner's path. Pieces only the source has
                // outside the chosen region wait while this node's region is open. See
                // `PieceChoice::RarestFirst`.
                let open = self.region_open();
                let target = self.target_region();
                let key = |i: u32| {
                    let (g, _) = self.region_pos(i);
                    (self.avail[i as usize], g != target, self.order_of(i))
                };
                let Some((j, _)) = cand
                    .iter()
                    .enumerate()
                    .filter(|(_, &i)| {
                        !open || self.avail[i as usize] > 1 || self.region_pos(i).0 == target
                    })
                    .min_by_key(|(_, &i)| key(i))
                else {
                    self.peers[k].cand = cand;
                    return;
                };
                let i = cand.swap_remove(j);
                self.peers[k].cand = cand;
                i
            } else {
                let j = self.rng.gen_range(0..peer.cand.len());
                let i = self.peers[k].cand.swap_remove(j);
                if self.store.has(i)
                    || self.requested[i as usize].is_some()
                    || !self.allowed(kind, i)
                {
                    continue;
                }
                i
            };
            self.requested[i as usize] = Some(k as u32);
            self.requested_at[i as usize] = self.now;
            self.requested_seq[i as usize] = self.next_seq;
            self.next_seq += 1;
            self.peers[k].outstanding += 1;
            if kind == Kind::Global && self.config.reroute_slow {
                self.global_requests
                    .push((i, self.requested_seq[i as usize]));
            }
            out.send(
                self.peers[k].id,
                Message::Pieces(PieceMsg::Request(PieceRef {
                    transfer: self.transfer(),
                    piece: i,
                })),
            );
            if rarest && !self.region_done && !self.region_open() {
                // The region is exhausted: pieces outside it may now be taken from any
                // global peer, including those left idle by the region rule.
                self.region_done = true;
                for q in 0..self.peers.len() {
                    if q != k && self.peers[q].kind != Kind::Local {
                        self.fill(q, out);
                    }
                }
            }
        }
    }

    /// Moves to global peer `k`, while it has room under `limit` requests, the share pieces it
    /// announced whose request to another global peer is overdue: that peer is slow (a piece
    /// from it takes more than [`SLOW_FACTOR`] times as long as from `k`) and will deliver this
    /// one more than [`OVERDUE_FACTOR`] times as late as `k` would, and `MIN_GAIN_NS` later
    /// at least, counting the requests queued ahead of it there, less the time since the
    /// request. Both from the flows'
    /// measured rates and round trips. A peer that has delivered nothing is not judged, and a
    /// piece moves at most once. See "Slow global peers" in the module docs.
    fn reroute(&mut self, k: usize, limit: usize, out: &mut Outputs) {
        let piece_len = u64::from(self.setup.manifest.piece_len());
        let Some(step) = self.peers[k].pipe.delivery_ns(piece_len) else {
            return;
        };
        let mut at = 0;
        while at < self.global_requests.len() && self.peers[k].outstanding < limit {
            let (i, seq) = self.global_requests[at];
            let from = match self.requested[i as usize] {
                Some(from) if !self.store.has(i) && self.requested_seq[i as usize] == seq => {
                    from as usize
                }
                _ => {
                    self.global_requests.swap_remove(at);
                    continue;
                }
            };
            if from == k || !bit(&self.peers[k].has, i) || self.peers[from].kind != Kind::Global {
                at += 1;
                continue;
            }
            let pipe = &self.peers[from].pipe;
            let (Some(first), Some(each)) =
                (pipe.delivery_ns(piece_len), pipe.transfer_ns(piece_len))
            else {
                at += 1;
                continue;
            };
            if first <= step.saturating_mul(SLOW_FACTOR) {
                at += 1;
                continue;
            }
            let ahead = self.queued_ahead(from, seq);
            let here = step.saturating_mul(self.peers[k].outstanding as u64 + 1);
            let waited = self
                .now
                .saturating_since(self.requested_at[i as usize])
                .as_nanos() as u64;
            let left = first
                .saturating_add(each.saturating_mul(ahead))
                .saturating_sub(waited);
            if left <= here.saturating_mul(OVERDUE_FACTOR) || left - here < MIN_GAIN_NS {
                at += 1;
                continue;
            }
            // Moved once: the entry goes, so a slow second peer does not move it again.
            self.global_requests.swap_remove(at);
            self.superseded
                .push((i, from as u32, self.requested_at[i as usize], seq));
            self.requested[i as usize] = Some(k as u32);
            self.requested_at[i as usize] = self.now;
            self.requested_seq[i as usize] = self.next_seq;
            self.next_seq += 1;
            self.peers[k].outstanding += 1;
            self.rerouted += 1;
            out.send(
                self.peers[k].id,
                Message::Pieces(PieceMsg::Request(PieceRef {
                    transfer: self.transfer(),
                    piece: i,
                })),
            );
        }
    }

    /// This node's requests to peer `p` still unanswered that were sent before the request of
    /// sequence number `seq`: the pieces `p` sends ahead of that one (in request order, as
    /// every driver keeps one ordered stream per peer), moved ones included.
    fn queued_ahead(&self, p: usize, seq: u64) -> u64 {
        let live = self
            .global_requests
            .iter()
            .filter(|&&(j, s)| {
                s < seq
                    && self.requested[j as usize] == Some(p as u32)
                    && self.requested_seq[j as usize] == s
                    && !self.store.has(j)
            })
            .count();
        let moved = self
            .superseded
            .iter()
            .filter(|&&(_, q, _, s)| q as usize == p && s < seq)
            .count();
        (live + moved) as u64
    }

    /// Peer `k`'s requests are void (it failed, was banned or came back): its moved requests
    /// will not be answered.
    fn forget_superseded(&mut self, k: usize) {
        self.superseded.retain(|&(_, p, _, _)| p as usize != k);
    }

    /// True while some piece of this node's region is neither held nor requested.
    fn region_open(&self) -> bool {
        let k = self.region_count.max(1) as usize;
        (self.region_first(self.region_residue)..self.share.end)
            .step_by(k)
            .any(|i| !self.store.has(i) && self.requested[i as usize].is_none())
    }

    /// The first piece of this node's share in the region of residue `residue`.
    fn region_first(&self, residue: u32) -> u32 {
        let k = self.region_count.max(1);
        let s = self.share.start;
        s + (residue % k + k - s % k) % k
    }

    /// The rank of share piece `i` in this node's preference order: its region forwards, then
    /// the other regions, each backwards from a point that depends on
    /// how far this node's cluster is behind the region's owner.
    fn order_of(&self, i: u32) -> u64 {
        let (g, pos) = self.region_pos(i);
        if g == 0 {
            return u64::from(pos);
        }
        // Helper at distance d behind the region's owner (d = 1: the cluster just after it)
        // starts further from the owner's start the closer it is, so helpers do not walk the
        // same pieces.
        let size = self.region_size(g).max(1);
        let regions = self.regions();
        let d = regions - g;
        let from = (size - 1).saturating_sub((d - 1) * size / regions);
        let within = (from + size - pos) % size;
        u64::from(g) * u64::from(size) * 4 + u64::from(within)
    }

    fn regions(&self) -> u32 {
        self.region_count.max(1)
    }

    /// The region (0: this node's; then the following clusters' in order) of share piece `i`,
    /// and its position in the region (in the share's order).
    fn region_pos(&self, i: u32) -> (u32, u32) {
        let k = self.regions();
        let residue = i % k;
        let g = (residue + k - self.region_residue) % k;
        (g, (i - self.region_first(residue)) / k)
    }

    fn region_size(&self, g: u32) -> u32 {
        let k = self.regions();
        let first = self.region_first((g + self.region_residue) % k);
        if first >= self.share.end {
            0
        } else {
            (self.share.end - 1 - first) / k + 1
        }
    }

    /// The region to take pieces only the source has from: this node's, unless another has
    /// clearly more such pieces left (nobody has announced them, this node has not asked).
    fn target_region(&self) -> u32 {
        let regions = self.regions();
        if regions <= 1 {
            return 0;
        }
        let mut left = vec![0u32; regions as usize];
        for i in self.share.clone() {
            if self.avail[i as usize] <= 1
                && !self.store.has(i)
                && self.requested[i as usize].is_none()
            {
                left[self.region_pos(i).0 as usize] += 1;
            }
        }
        let slack = (self.region_size(0) / 4).max(1);
        let (g, most) = left
            .iter()
            .enumerate()
            .skip(1)
            .max_by_key(|(g, &n)| (n, std::cmp::Reverse(*g)))
            .map_or((0, 0), |(g, &n)| (g as u32, n));
        if most > left[0] + slack {
            g
        } else {
            0
        }
    }

    /// Recounts, for each piece of this node's share, the live peers it may take it from.
    fn recount_avail(&mut self) {
        self.avail.iter_mut().for_each(|a| *a = 0);
        for p in self
            .peers
            .iter()
            .filter(|p| p.alive && p.kind != Kind::Local)
        {
            for i in self.share.clone() {
                if bit(&p.has, i) {
                    self.avail[i as usize] = self.avail[i as usize].saturating_add(1);
                }
            }
        }
    }

    /// Makes piece `i` requestable again from every live peer that has it.
    fn requeue(&mut self, i: u32, out: &mut Outputs) {
        for k in 0..self.peers.len() {
            let p = &self.peers[k];
            if p.alive && bit(&p.has, i) && self.allowed(p.kind, i) {
                self.peers[k].cand.push(i);
                self.fill(k, out);
            }
        }
    }

    /// Recomputes every peer's candidate list (after the rules changed) and refills requests.
    fn rebuild_candidates(&mut self, out: &mut Outputs) {
        for k in 0..self.peers.len() {
            let kind = self.peers[k].kind;
            let cand: Vec<u32> = (0..self.pieces)
                .filter(|&i| {
                    bit(&self.peers[k].has, i)
                        && !self.store.has(i)
                        && self.requested[i as usize].is_none()
                        && self.allowed(kind, i)
                })
                .collect();
            self.peers[k].cand = cand;
        }
        for k in 0..self.peers.len() {
            self.fill(k, out);
        }
    }

    fn check_transfer(&self, from: NodeId, message: &Message) -> Result<(), ProtocolError> {
        match message.transfer() {
            Some(found) => {
                ProtocolError::check_transfer(from, message.kind(), self.transfer(), found)
            }
            None => Err(ProtocolError::UnexpectedMessage {
                from,
                kind: message.kind(),
                why: "MOB exchanges no probes",
            }),
        }
    }

    fn check_piece(&self, from: NodeId, kind: MessageKind, i: u32) -> Result<(), ProtocolError> {
        if i >= self.pieces {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "piece index past the manifest's last piece",
            });
        }
        Ok(())
    }

    fn on_message(
        &mut self,
        now: Time,
        from: NodeId,
        message: Message,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        self.check_transfer(from, &message)?;
        let kind = message.kind();
        if from == self.me || !self.setup.layout.contains(from) {
            return Err(ProtocolError::UnexpectedMessage {
                from,
                kind,
                why: "the sender is not a member of this multicast",
            });
        }
        // Validate everything before changing anything.
        match &message {
            Message::Pieces(PieceMsg::Bitfield(b)) => {
                b.validate()
                    .map_err(|source| ProtocolError::Frame { from, source })?;
                if b.pieces != self.pieces {
                    return Err(ProtocolError::Inconsistent {
                        from,
                        kind,
                        what: "bitfield length differs from the manifest's piece count",
                    });
                }
            }
            Message::Pieces(PieceMsg::Have(r)) => self.check_piece(from, kind, r.piece)?,
            Message::Pieces(PieceMsg::Request(r)) => {
                self.check_piece(from, kind, r.piece)?;
                if !self.store.has(r.piece) {
                    return Err(ProtocolError::UnexpectedMessage {
                        from,
                        kind,
                        why: "request for a piece this node never announced",
                    });
                }
            }
            Message::Pieces(PieceMsg::Piece(p)) => self.check_piece(from, kind, p.piece)?,
            Message::Pieces(PieceMsg::Signal(s)) => {
                if s.signal == Signal::AllComplete && !self.store.is_complete() && !self.rejoined {
                    return Err(ProtocolError::Inconsistent {
                        from,
                        kind,
                        what: "all-complete received by a node that misses pieces",
                    });
                }
            }
            _ => {
                return Err(ProtocolError::UnexpectedMessage {
                    from,
                    kind,
                    why: "not a MOB message",
                })
            }
        }
        if self.status == Status::Aborted {
            return Ok(());
        }
        if self.banned.contains(&from)
            && matches!(
                message,
                Message::Pieces(PieceMsg::Have(_))
                    | Message::Pieces(PieceMsg::Bitfield(_))
                    | Message::Pieces(PieceMsg::Piece(_))
            )
        {
            // It sent a bad piece: none of its data or announcements count any more (its
            // requests are still served, its acknowledgements still heard).
            return Ok(());
        }
        match message {
            Message::Pieces(PieceMsg::Request(r)) => {
                // Always honoured, even after finishing.
                let payload =
                    match self
                        .store
                        .to_send(r.piece, &self.setup.manifest, &*self.setup.verifier)
                    {
                        Ok(payload) => payload.unwrap_or_default(),
                        Err(SourceMismatch { piece }) => {
                            self.stall_armed = false;
                            self.status = Status::Aborted;
                            out.push(Output::CancelTimer(STALL_TIMER));
                            out.push(Output::Aborted(AbortReason::SourceChanged { piece }));
                            return Ok(());
                        }
                    };
                out.send(
                    from,
                    Message::Pieces(PieceMsg::Piece(Piece {
                        transfer: self.transfer(),
                        piece: r.piece,
                        payload,
                    })),
                );
            }
            Message::Pieces(PieceMsg::Signal(s)) => self.on_signal(from, s.signal, out),
            _ if self.status == Status::Finished => {} // late news: everybody has everything
            Message::Pieces(PieceMsg::Bitfield(b)) => {
                let k = self.add_peer(from, out);
                for i in b.iter() {
                    self.on_announce(k, i);
                }
                self.fill(k, out);
            }
            Message::Pieces(PieceMsg::Have(r)) => {
                let k = self.add_peer(from, out);
                self.on_announce(k, r.piece);
                self.fill(k, out);
            }
            Message::Pieces(PieceMsg::Piece(p)) => self.on_piece(now, from, p, out),
            _ => {}
        }
        Ok(())
    }

    fn on_announce(&mut self, k: usize, i: u32) {
        if !bit(&self.peers[k].has, i)
            && self.peers[k].kind != Kind::Local
            && self.share.contains(&i)
        {
            self.avail[i as usize] = self.avail[i as usize].saturating_add(1);
        }
        set_bit(&mut self.peers[k].has, i);
        if !self.store.has(i)
            && self.requested[i as usize].is_none()
            && self.allowed(self.peers[k].kind, i)
        {
            self.peers[k].cand.push(i);
        }
    }

    fn on_signal(&mut self, from: NodeId, signal: Signal, out: &mut Outputs) {
        match signal {
            Signal::Hello => {
                if self.status != Status::Finished {
                    self.add_peer(from, out);
                }
            }
            Signal::Interested => {
                if self.status == Status::Finished {
                    return;
                }
                // A new peer is told as usual first, then (as every known peer) of the rest.
                let k = self.add_peer(from, out);
                if !self.peers[k].wants_all {
                    self.peers[k].wants_all = true;
                    if !self.is_root {
                        let told = match self.peers[k].kind {
                            Kind::Global if !self.peers[k].in_root_cluster => {
                                self.peers[k].share.clone()
                            }
                            Kind::Global => 0..0,
                            _ => 0..self.pieces,
                        };
                        self.announce_held(k, Some(&told), out);
                    }
                }
            }
            Signal::Rejoin => self.on_rejoin(from, out),
            Signal::Complete if self.guests.contains(&from) => {
                self.guests_done.insert(from);
                self.check_ack(out);
            }
            Signal::Complete => {
                if self.status == Status::Finished {
                    // A late report (its parent failed after passing AllComplete on, before it
                    // arrived): the run is complete, say so.
                    out.send(from, self.signal(Signal::AllComplete, self.me.0));
                    return;
                }
                self.acks.insert(from);
                self.check_ack(out);
            }
            Signal::AllComplete if !self.store.is_complete() => {
                // Only a guest gets here (checked above): the run ended without it.
                if self.status == Status::Running {
                    self.stall_armed = false;
                    self.status = Status::Aborted;
                    out.push(Output::CancelTimer(STALL_TIMER));
                    out.push(Output::Aborted(AbortReason::RunEnded));
                }
            }
            Signal::AllComplete => self.finish(out),
            // Signals of other protocols: harmless, ignored.
            Signal::NotInterested | Signal::Choke | Signal::Unchoke | Signal::Announce => {}
        }
    }

    fn on_piece(&mut self, now: Time, from: NodeId, p: Piece, out: &mut Outputs) {
        let i = p.piece;
        let k = self.peer_index.get(&from);
        let answered = k.is_some() && self.requested[i as usize] == k.map(|k| k as u32);
        if answered {
            let k = k.expect("answered");
            self.requested[i as usize] = None;
            self.peers[k].outstanding = self.peers[k].outstanding.saturating_sub(1);
            if self.config.adaptive_depth {
                let piece_len = u64::from(self.setup.manifest.piece_len());
                self.peers[k].pipe.on_arrival(
                    now,
                    self.requested_at[i as usize],
                    p.payload.len() as u64,
                    piece_len,
                );
            }
        } else if let Some(k) = k {
            // The copy of a request moved elsewhere ([`Mob::reroute`]): the slow flow is free.
            if let Some(at) = self
                .superseded
                .iter()
                .position(|&(s, q, _, _)| s == i && q as usize == k)
            {
                let (_, _, sent, _) = self.superseded.swap_remove(at);
                self.peers[k].outstanding = self.peers[k].outstanding.saturating_sub(1);
                if self.config.adaptive_depth {
                    let piece_len = u64::from(self.setup.manifest.piece_len());
                    self.peers[k]
                        .pipe
                        .on_arrival(now, sent, p.payload.len() as u64, piece_len);
                }
            }
        }
        if self.store.has(i) {
            if let Some(k) = k {
                self.fill(k, out);
            }
            return;
        }
        if !self
            .setup
            .verifier
            .verify(&self.setup.manifest, i, &p.payload)
        {
            // Bounded: a root whose data changed would send the same bad bytes for ever.
            let copies = self.bad_copies.entry(i).or_insert(0);
            *copies += 1;
            if *copies > MAX_BAD_COPIES {
                let copies = *copies;
                self.stall_armed = false;
                self.status = Status::Aborted;
                out.push(Output::CancelTimer(STALL_TIMER));
                out.push(Output::Aborted(AbortReason::BadPiece { piece: i, copies }));
                return;
            }
            // Dropped and fetched again; its sender is dropped too (unless it is the root,
            // the one source sure to hold everything).
            if from != self.setup.root && self.banned.insert(from) {
                self.ban(from, out);
            }
            if answered {
                self.requeue(i, out);
            }
            return;
        }
        self.store.insert(i, p.payload);
        self.last_progress = now;
        self.stalls = 0;
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
        for q in 0..self.peers.len() {
            if self.tells(&self.peers[q], i) {
                out.send(
                    self.peers[q].id,
                    Message::Pieces(PieceMsg::Have(PieceRef {
                        transfer: self.transfer(),
                        piece: i,
                    })),
                );
            }
        }
        if let Some(k) = k {
            self.fill(k, out);
        }
        if self.store.is_complete() {
            if self.stall_armed {
                self.stall_armed = false;
                out.push(Output::CancelTimer(STALL_TIMER));
            }
            self.check_ack(out);
        }
    }

    fn is_alive(&self, n: NodeId) -> bool {
        !self.failed.contains(&n)
    }

    /// The node at heap position `k` of the acknowledgement tree (the root, then the others
    /// by id).
    fn ack_node(&self, k: usize) -> Option<NodeId> {
        let layout = &self.setup.layout;
        match k {
            0 => Some(self.setup.root),
            k if k <= self.root_index => layout.node_at(k - 1),
            k => layout.node_at(k),
        }
    }

    /// The heap position of `node` in the acknowledgement tree.
    fn ack_pos(&self, node: NodeId) -> usize {
        let i = self
            .setup
            .layout
            .index_of(node)
            .expect("a node of the layout");
        match i.cmp(&self.root_index) {
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Less => i + 1,
            std::cmp::Ordering::Greater => i,
        }
    }

    /// The nearest live ancestor in the acknowledgement tree.
    fn ack_parent(&self) -> Option<NodeId> {
        let mut k = self.ack_pos(self.me);
        while k > 0 {
            k = (k - 1) / 2;
            let n = self.ack_node(k).expect("an ancestor's position");
            if self.is_alive(n) {
                return Some(n);
            }
        }
        None
    }

    /// The nearest live descendants in the acknowledgement tree.
    fn ack_children(&self) -> Vec<NodeId> {
        let mut out = Vec::new();
        if self.rejoined {
            return out;
        }
        let mut stack = vec![self.ack_pos(self.me)];
        while let Some(k) = stack.pop() {
            for c in [2 * k + 1, 2 * k + 2] {
                if let Some(n) = self.ack_node(c) {
                    if self.is_alive(n) {
                        out.push(n);
                    } else {
                        stack.push(c);
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// Phase 4: reports up once this node and its subtree are complete; the root ends the run.
    fn check_ack(&mut self, out: &mut Outputs) {
        if !self.started || self.status != Status::Running || !self.store.is_complete() {
            return;
        }
        if self.rejoined {
            // A guest reports to the root directly: the tree went on without it.
            if self.complete_sent_to.is_none() {
                self.complete_sent_to = Some(self.setup.root);
                out.send(self.setup.root, self.signal(Signal::Complete, self.me.0));
            }
            return;
        }
        let children = self.ack_children();
        if !children.iter().all(|c| self.acks.contains(c))
            || (self.is_root && !self.guests.iter().all(|g| self.guests_done.contains(g)))
        {
            return;
        }
        if self.is_root {
            self.finish(out);
        } else if let Some(parent) = self.ack_parent() {
            if self.complete_sent_to != Some(parent) {
                self.complete_sent_to = Some(parent);
                out.send(parent, self.signal(Signal::Complete, self.me.0));
            }
        }
    }

    fn finish(&mut self, out: &mut Outputs) {
        if self.status != Status::Running {
            return;
        }
        for c in self.ack_children() {
            out.send(c, self.signal(Signal::AllComplete, self.me.0));
        }
        if self.is_root {
            for &g in &self.guests {
                out.send(g, self.signal(Signal::AllComplete, self.me.0));
            }
        }
        if self.stall_armed {
            self.stall_armed = false;
            out.push(Output::CancelTimer(STALL_TIMER));
        }
        self.status = Status::Finished;
        out.push(Output::Finished);
    }

    fn on_peer_failed(&mut self, peer: NodeId, out: &mut Outputs) {
        if self.guests.remove(&peer) {
            // A guest failed again: nothing of the mobs depended on it.
            self.guests_done.remove(&peer);
            if let Some(k) = self.peer_index.get(&peer) {
                self.peers[k].alive = false;
                self.peers[k].cand.clear();
                self.peers[k].outstanding = 0;
                self.forget_superseded(k);
            }
            if self.status == Status::Running {
                self.check_ack(out);
            }
            return;
        }
        if peer == self.me || !self.setup.layout.contains(peer) || !self.failed.insert(peer) {
            return;
        }
        if self.status != Status::Running {
            return;
        }
        if peer == self.setup.root {
            self.stall_armed = false;
            self.status = Status::Aborted;
            out.push(Output::CancelTimer(STALL_TIMER));
            out.push(Output::Aborted(AbortReason::PeerFailed { peer }));
            return;
        }
        let mut orphaned = Vec::new();
        if let Some(k) = self.peer_index.get(&peer) {
            self.peers[k].alive = false;
            self.peers[k].cand.clear();
            self.peers[k].outstanding = 0;
            self.forget_superseded(k);
            for (i, r) in self.requested.iter_mut().enumerate() {
                if *r == Some(k as u32) {
                    *r = None;
                    orphaned.push(i as u32);
                }
            }
        }
        // The failed node's mob is recomputed: shares move.
        self.compute_mobs();
        let old_share = self.share.clone();
        self.set_share();
        for k in 0..self.peers.len() {
            let new = self.share_of(self.peers[k].id);
            if new != self.peers[k].share {
                let old = std::mem::replace(&mut self.peers[k].share, new);
                if self.peers[k].kind == Kind::Global {
                    self.announce_held(k, Some(&old), out);
                }
            }
        }
        self.keep_a_root_cluster_peer(out);
        self.recount_avail();
        if old_share != self.share {
            self.rebuild_candidates(out);
        } else {
            for i in orphaned {
                self.requeue(i, out);
            }
        }
        self.check_ack(out);
    }
}

impl Protocol for Mob {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        let before = self.now;
        self.now = now;
        let r = self.dispatch(now, input, out);
        if r.is_err() {
            // A rejected input leaves the machine unchanged.
            self.now = before;
        }
        r
    }

    fn status(&self) -> Status {
        self.status
    }
}

impl Mob {
    fn dispatch(
        &mut self,
        now: Time,
        input: Input,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        match input {
            Input::Start => self.on_start(now, out),
            Input::Message { from, message } => return self.on_message(now, from, message, out),
            Input::Timer(STALL_TIMER) => self.on_stall_timer(now, out),
            Input::Timer(_) => {}
            Input::Command(c) => {
                let crate::node::Command::ComputeDone { task } = c;
                return Err(ProtocolError::UnknownTask { task });
            }
            Input::SendComplete { to, id } => return Err(ProtocolError::UnknownSend { to, id }),
            // Requests of the application are the host's business.
            Input::App(_) => {}
            Input::PeerFailed(p) => self.on_peer_failed(p, out),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer index answers as the B-tree it replaced: random ids (sparse, inserted in any
    /// order, each once, looked up present and absent) against a `BTreeMap`.
    #[test]
    fn peer_index_answers_as_a_map() {
        use rand::SeedableRng;
        let mut rng = ChaCha8Rng::seed_from_u64(20);
        for _ in 0..50 {
            let mut index = PeerIndex::default();
            let mut reference = BTreeMap::new();
            for k in 0..rng.gen_range(0..80usize) {
                let id = NodeId(rng.gen_range(0..200u32));
                if reference.contains_key(&id) {
                    continue;
                }
                index.insert(id, k);
                reference.insert(id, k);
                for _ in 0..4 {
                    let probe = NodeId(rng.gen_range(0..200u32));
                    assert_eq!(index.get(&probe), reference.get(&probe).copied());
                    assert_eq!(index.contains_key(&probe), reference.contains_key(&probe));
                }
            }
            for (id, &k) in &reference {
                assert_eq!(index.get(id), Some(k));
            }
        }
    }

    /// The acknowledgement tree's positions, computed from the shared layout, are the heap
    /// order "the root, then the others by id" (what a list of every node held per machine
    /// gave), for any root and sparse ids.
    #[test]
    fn ack_positions_are_the_root_then_the_others_by_id() {
        use rand::SeedableRng;
        use std::sync::Arc;
        let ids = [2u32, 3, 5, 8, 13, 21, 34];
        let nodes = ids.iter().map(|&i| (NodeId(i), ClusterId(i % 2)));
        let layout = Arc::new(ClusterLayout::new(nodes).unwrap());
        let data = Bytes::from(vec![1u8; 64]);
        let manifest = Arc::new(crate::pieces::Manifest::build(&data, 16).unwrap());
        for &root in &ids {
            let setup = SwarmSetup {
                transfer: TransferId(1),
                root: NodeId(root),
                manifest: manifest.clone(),
                layout: layout.clone(),
                verifier: Arc::new(crate::pieces::Blake3Verifier),
                keeper: None,
            };
            let m = Mob::new(
                NodeId(root),
                &setup,
                Some(data.clone()),
                MobConfig::default(),
                ChaCha8Rng::seed_from_u64(1),
            )
            .unwrap();
            let mut want = vec![NodeId(root)];
            want.extend(ids.iter().map(|&i| NodeId(i)).filter(|&n| n.0 != root));
            let got: Vec<NodeId> = (0..ids.len()).map(|k| m.ack_node(k).unwrap()).collect();
            assert_eq!(got, want, "root {root}");
            assert_eq!(m.ack_node(ids.len()), None);
            for (k, &n) in want.iter().enumerate() {
                assert_eq!(m.ack_pos(n), k, "root {root}, node {n}");
            }
        }
    }

    #[test]
    fn shares_partition() {
        for size in 1..10 {
            for p in [0u32, 1, 7, 100] {
                let mut next = 0;
                for r in 0..size {
                    let s = mob_share(r, size, p);
                    assert_eq!(s.start, next);
                    next = s.end;
                }
                assert_eq!(next, p);
            }
        }
        assert_eq!(mob_share(3, 3, 10), 0..0);
    }

    #[test]
    fn mob_size_keeps_shares_whole() {
        for members in 1..300usize {
            for p in [1u32, 63, 64, 65, 256, 572, 2289] {
                for min in [0u32, 16, 64] {
                    let m = mob_size(members, p, min);
                    assert!((1..=members).contains(&m));
                    if min == 0 {
                        assert_eq!(m, members);
                        continue;
                    }
                    let mut next = 0;
                    for r in 0..m {
                        let s = mob_share(r, m, p);
                        assert_eq!(s.start, next);
                        // Every share holds at least `min` pieces, unless there are fewer.
                        assert!(s.len() as u32 >= min.min(p), "{members} {p} {min} {r}");
                        next = s.end;
                    }
                    assert_eq!(next, p);
                    // As many members as that allows, or all of them.
                    assert!(m == members || (m as u32 + 1) * min > p || m == 1);
                }
            }
        }
        assert_eq!(mob_size(256, 256, 64), 4);
        assert_eq!(mob_size(16, 2289, 64), 16);
    }

    #[test]
    fn bits() {
        let mut b = vec![0u64; 2];
        set_bit(&mut b, 70);
        assert!(bit(&b, 70) && !bit(&b, 69) && !bit(&b, 500));
    }
}
