//! The live minimum spanning tree: a Host service (like the [weather](crate::weather)) that
//! keeps one [`MaintainedMst`] per node for the life of the group, built by GHS from the links'
//! forecasts and repaired as they move, so a broadcast under
//! [`TreePolicy::MstLive`](crate::planner::TreePolicy) sends over the current tree without
//! computing anything (seed 004's AGM-adap: per broadcast, read the forecasts, classify the
//! changes, adapt, send over the MST).
//!
//! # Weights
//!
//! Each node weighs its own links from its own forecasts ([`MstMetric`]): the one-way latency
//! (half the round-trip forecast, ms: the tree of least latency, for short messages) or the
//! inverse bandwidth (ms per MB, from the bandwidth the sends measured: the MST is then also
//! the maximum-bottleneck tree, for large messages). A link not measured yet weighs the
//! [guess](crate::weather::Guesses) of its class. Weights are rounded to
//! [`MstLiveConfig::resolution`] so measurement noise below it neither reorders edges nor
//! counts as a change. The two ends of a link need not agree: the **smaller end owns the
//! edge** (its weight is the one GHS builds with, through the first generation's Hellos,
//! [`MaintainedMst::gathering`]), and only it feeds the edge's changes.
//!
//! # Life
//!
//! - **Build**: a node starts once it has a forecast of every live member's link for the metric
//!   (or [`MstLiveConfig::build_after`] after the Host's start, with guesses for the rest),
//!   by rows or by GHS ([`MstLiveConfig::build`], below). By rows: its row to every member
//!   (`mst_row`), the tree computed once every row is in. By GHS: `Hello`s to every member,
//!   GHS on the complete graph once every Hello is in; when a node learns the end it
//!   announces its parent to every member (`mst_parent`), so every node holds the whole tree
//!   (`n (n - 1)` small frames). Either way a frame that arrives before the start waits, and
//!   any node can root a broadcast over the tree.
//! - **Changes** (the paper's policy): every [`MstLiveConfig::check_every`] broadcasts this
//!   node takes part in (the paper's k, 4 in AGM-adapII; 0: at every new forecast), the node
//!   compares each link it owns with the weight the tree has for it and feeds the ones that
//!   moved by more than [`MstLiveConfig::threshold`] (relative; the paper runs 10 %, 70 % and
//!   0 %), by more than [`MstLiveConfig::min_change`] (absolute, 0 by default: noise on links
//!   near 0 is no change) and by more than [`MstLiveConfig::noise_errors`] times the
//!   forecast's error estimate (0 by default: a move the forecasts expected is no change) to
//!   [`MaintainedMst::change_weight`]. Each repair's `Stable` names the edge that left and the
//!   one that entered; every node applies it to its copy of the tree.
//! - **Failures**: the Host's failure detector (a lost connection, a silent member, a member
//!   that left) calls [`MstService::peer_failed`]: a new generation recovers a GHS-built tree
//!   locally (the old tree's pieces join again by GHS) or rebuilds among the survivors (a
//!   rows build, or a tree not at rest; [`MaintainedMst`]'s docs), and with GHS its nodes
//!   announce their parents again. A member
//!   that comes back is not taken back into the tree (its edges are gone until the group
//!   restarts the service); broadcasts still reach it as a leaf of the root.
//!
//! # A backlog of changes: a rebuild
//!
//! Repairs run one epoch at a time through the root, three waves over the tree each (~0.85 s
//! on the emulated six sites, where the slowest tree path crosses the WAN three times). With
//! `K` = [`MstLiveConfig::rebuild_after`] (2 by default), when an epoch could start and
//! either `K` changes or more wait (the root's queue, plus the changes each owner said it still
//! has to send behind its last request: a member has one request in flight at a time), or
//! the epoch would be the `K`-th in a row begun for a request that waited out the epoch before
//! it, the root starts a new generation instead (rows build only): every
//! member sends its row again, with the last weight it fed of each link it owns, so every
//! change fed by then is built in at once, in about two message delays
//! ([`MstMaintainer::with_rebuild_after`], [`MaintainedMst::with_rebuild_after`]). Only the
//! root decides and every member follows the generation it starts, so the policy is the same
//! everywhere. *Why:* on the testbed a site link's step is 16 member pairs, fed by their 4
//! owners within a second; one by one that was 16-30 epochs, and a freshly built group (each
//! link weighed from its first round trips, which read up to 1.5x high) corrected ~90 weights
//! one epoch at a time for 88-126 s after its build (once not within 240 s). With the rebuild
//! the group settled 1.8-12.5 s after its build; the step took 1 epoch and 1 rebuild (3.1 s)
//! when the owners' requests reached the root together, 7-13 epochs first when they trickled
//! in: requests are held inside an epoch and reach the root one by one after it, each finding
//! the queue empty, so a queue length alone never saw that backlog. Hence the owners' counts
//! and the epochs-in-a-row rule, which bound a trickle at `K` epochs before the rebuild (see
//! the README's live-MST paragraph).
//!
//! # The build: rows or GHS
//!
//! [`MstBuild`]: `rows`, `ghs`, or `auto` (the default: rows for groups of at most
//! [`ROWS_MAX_MEMBERS`] = 64 members, GHS above). Members of a group over TCP take it, and the
//! test window, from the group file's `[mst]` table (windrose-net's `group` module), so they
//! all build the same way.
//!
//! **Rows** ([`BuildAlgorithm::Rows`]). Every member's Hello carries its whole row: its
//! rounded weight of the link to every member it holds alive. Once a node holds every live
//! member's row it computes the MST itself: Kruskal over GHS's keys `(w, min id, max id)`,
//! each edge weighing what its smaller end's row says (the rule GHS's build follows too).
//! *Why every node computes the same tree:* the keys are a total order, so the MST of a
//! weighted complete graph is unique; every node applies that order to the same weights (the
//! smaller ends' rows, bit for bit as sent) over the same members, so it computes that one
//! tree, the one GHS would build. A node builds only when every row it holds names exactly
//! the members it holds alive, so two nodes of one generation never build over different
//! member sets (a member seen failing while the rows gather is taken out of this node's row,
//! sent again; see [`BuildAlgorithm::Rows`]). Every node then holds the whole tree: no parent
//! announcements. The repairs need no GHS state: [`MstMaintainer::from_tree`] seeds them
//! with the node's edges, its tree edges, its parent, the root (the tree's centre, so the
//! repair waves are as short as the tree allows), the node count and the total, summed in
//! Kruskal's order (the same bits everywhere).
//!
//! *Cost:* `n (n - 1)` frames of `12 (n - 1)` payload bytes (the same frame count as the
//! GHS build's Hellos alone; GHS adds its own `>= 2 e = n (n - 1)` frames and `n (n - 1)`
//! announcements), `12 n^2` bytes sent per node, Kruskal over `n^2 / 2` edges per node, and
//! **one message delay** from the last start to the end (the slowest link), against GHS's
//! phases crossing the WAN again and again. Measured in the message-delay model (`windrose
//! mst --build rows`, every node starting at 0):
//!
//! | network | rows: s, delays, bytes | GHS k = 16 (Hellos first): s, delays, bytes | k = 1 |
//! |---|---|---|---|
//! | the six sites, 24 | 0.723, 1, 159 kB | 6.402, 23, 89 kB (+ 9 kB announcements) | 21.857 s, 58 |
//! | 4 clusters of 16, 64 | 0.099, 1, 3.1 MB | 0.886, 24, 0.42 MB | 5.593 s, 119 |
//! | 8 of 16, 128 | 0.092, 1, 25 MB | 1.093, 35, 1.4 MB | 10.800 s, 225 |
//! | 16 of 16, 256 | 0.100, 1, 201 MB | 1.391, 60, 5.2 MB | 16.394 s, 375 |
//!
//! The model charges no bandwidth, and rows' bytes grow as `n^3`: 48 kB per node at 64
//! members (under 50 ms even at 1 MB/s, against GHS's 24 delays of WAN latency), 786 kB per
//! node and 39x GHS's bytes at 256. Hence `auto`: rows up to 64 members, GHS above. By 24
//! Hosts in the simulator (crates/windrose-sim/tests/mst_live.rs; each starts once its probes
//! measured every link): rows 1.43 s from the first frame to the last node knowing the end,
//! GHS (k = 16) 7.1 s; a repair after one change costs the same waves either way.
//!
//! # The tree a broadcast uses
//!
//! [`MstService::tree`]: the tree of the last epoch this node knows stable, re-rooted at the
//! broadcast's root (children in id order), members outside it (failed, or in another
//! component) hung under the root as leaves. A broadcast that starts during a repair uses the
//! last stable tree: the repair's result is for the next broadcast. One that starts during a
//! rebuild after a failure uses the last tree held whole with the failed members taken out,
//! each piece they cut off joined again by its cheapest edge from the view's costs (the
//! repairs' rule, computed at the root): the tree keeps its shape until the new generation's
//! is held whole, where a tree planned from the view would take the view's guesses for links
//! the root cannot measure (Fig. 7 of the reproduction paid the static MST's 10.5 s for each
//! broadcast after a failure that way). The root sends its tree
//! in the announcement, so every member forwards by the same one whatever epoch it is in; the
//! `(generation, epoch)` it was taken at travels in the [`Plan`](crate::planner::Plan).

use crate::frame::Message;
use crate::ghs::EdgeKey;
#[cfg(doc)]
use crate::ghs_repair::MstMaintainer;
use crate::ghs_repair::{
    BuildAlgorithm, MaintainedMst, MstFrame, MstNodeMsg, RepairMsg, RequestStats,
};
use crate::time::Time;
use crate::weather::{Guesses, LinkWeather};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use windrose_model::{ClusterId, LinkCosts, NodeId};
use windrose_trees::{Tree, TreeError};

/// Frames kept per member before this node starts its build.
const EARLY_PER_MEMBER: usize = 16;

/// A live tree's `(generation, epoch)`.
pub type MstAt = (u32, u32);

/// What a live MST's weights measure.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MstMetric {
    /// One-way latency, ms (half the round-trip forecast).
    Latency,
    /// Inverse bandwidth, ms per MB (10^6 bytes).
    InverseBandwidth,
}

impl fmt::Display for MstMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MstMetric::Latency => "latency",
            MstMetric::InverseBandwidth => "inverse-bandwidth",
        })
    }
}

impl FromStr for MstMetric {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latency" => Ok(MstMetric::Latency),
            "inverse-bandwidth" => Ok(MstMetric::InverseBandwidth),
            _ => Err(format!(
                "MST metric {s:?}: expected latency or inverse-bandwidth"
            )),
        }
    }
}

/// How a node keeps its live MST.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MstLiveConfig {
    /// What the weights measure.
    pub metric: MstMetric,
    /// A link's change is fed when it moved by more than this fraction of the weight the tree
    /// has (0: any change).
    pub threshold: f64,
    /// Check the links every this many broadcasts (0: at every new forecast).
    pub check_every: u32,
    /// Weights are rounded to multiples of this (ms, or ms per MB); 0: not rounded.
    pub resolution: f64,
    /// Build with guesses for the links not measured by then (after the Host's start).
    pub build_after: Duration,
    /// GHS's test window for every build ([`crate::ghs::Ghs::with_test_window`]; 1: classic
    /// GHS); [`DEFAULT_TEST_WINDOW`](crate::ghs::DEFAULT_TEST_WINDOW) when absent.
    #[serde(default = "crate::ghs::default_test_window")]
    pub test_window: u32,
    /// How each generation's tree is built ([`MstBuild::Auto`] when absent).
    #[serde(default)]
    pub build: MstBuild,
    /// A change must also move the weight by more than this (ms, or ms per MB; 0: any move past
    /// the threshold). A relative threshold alone counts noise on links near 0 as changes: on
    /// the loaded testbed the round trips inside a site wander between 0.6 and 6 ms, and with
    /// checks at every forecast the group repaired about once a second, forever.
    #[serde(default)]
    pub min_change: f64,
    /// ... and by more than this many of the forecast's own error estimates (0: off). A link
    /// whose round trips wander (a loaded machine, a shared path) moves past any fixed
    /// threshold by noise alone, and each such move would be a repair: measured against the
    /// forecaster's error, only a move the forecasts did not expect counts. During a step the
    /// forecaster has not confirmed yet its error is the step itself, so a step is fed once,
    /// when confirmed, not at each of the forecast's moves towards it. Weights the application
    /// set itself ([`MstService::set_weight`]) have no error.
    #[serde(default)]
    pub noise_errors: f64,
    /// Rebuild by rows when this many changes or more wait for their epochs (queued at the
    /// root, or still to be sent by their owners), or instead of the this-many-th epoch in a
    /// row for a request that waited out the one before (0: repair them one by one). Only for
    /// the rows build: a GHS rebuild costs about ten epochs.
    /// See [the module docs](self#a-backlog-of-changes-a-rebuild).
    #[serde(default = "default_rebuild_after")]
    pub rebuild_after: u32,
}

/// [`MstLiveConfig::rebuild_after`]'s default.
pub const DEFAULT_REBUILD_AFTER: u32 = 2;

fn default_rebuild_after() -> u32 {
    DEFAULT_REBUILD_AFTER
}

/// Groups of at most this many members build by rows under [`MstBuild::Auto`].
pub const ROWS_MAX_MEMBERS: usize = 64;

/// How the live MST builds its tree (see the [module docs](self#the-build-rows-or-ghs)).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MstBuild {
    /// Rows for groups of at most [`ROWS_MAX_MEMBERS`] members, GHS for larger ones.
    #[default]
    Auto,
    /// Every member sends its row to every member, and each computes the tree
    /// ([`BuildAlgorithm::Rows`]).
    Rows,
    /// GHS ([`BuildAlgorithm::Ghs`]) and every member's parent announced to every member.
    Ghs,
}

impl MstBuild {
    /// The algorithm for a group of `members`.
    pub fn algorithm(self, members: usize) -> BuildAlgorithm {
        match self {
            MstBuild::Rows => BuildAlgorithm::Rows,
            MstBuild::Ghs => BuildAlgorithm::Ghs,
            MstBuild::Auto if members <= ROWS_MAX_MEMBERS => BuildAlgorithm::Rows,
            MstBuild::Auto => BuildAlgorithm::Ghs,
        }
    }
}

impl fmt::Display for MstBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MstBuild::Auto => "auto",
            MstBuild::Rows => "rows",
            MstBuild::Ghs => "ghs",
        })
    }
}

impl FromStr for MstBuild {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(MstBuild::Auto),
            "rows" => Ok(MstBuild::Rows),
            "ghs" => Ok(MstBuild::Ghs),
            // The caller names where `s` came from (a flag, a group file's key).
            _ => Err("expected \"auto\", \"rows\" or \"ghs\"".to_string()),
        }
    }
}

impl Default for MstLiveConfig {
    /// Latency, the paper's 10 % threshold checked every 4 broadcasts (AGM-adapII), weights to
    /// 0.1 ms, built at the latest 10 s after the start.
    fn default() -> Self {
        MstLiveConfig {
            metric: MstMetric::Latency,
            threshold: 0.1,
            check_every: 4,
            resolution: 0.1,
            build_after: Duration::from_secs(10),
            test_window: crate::ghs::DEFAULT_TEST_WINDOW,
            build: MstBuild::Auto,
            min_change: 0.0,
            noise_errors: 0.0,
            rebuild_after: DEFAULT_REBUILD_AFTER,
        }
    }
}

impl MstLiveConfig {
    /// Checks the values, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(format!(
                "live MST threshold {}: expected a number >= 0",
                self.threshold
            ));
        }
        if !(self.resolution.is_finite() && self.resolution >= 0.0) {
            return Err(format!(
                "live MST resolution {}: expected a number >= 0",
                self.resolution
            ));
        }
        if !(self.min_change.is_finite() && self.min_change >= 0.0) {
            return Err(format!(
                "live MST minimum change {}: expected a number >= 0",
                self.min_change
            ));
        }
        if !(self.noise_errors.is_finite() && self.noise_errors >= 0.0) {
            return Err(format!(
                "live MST noise multiple {}: expected a number >= 0",
                self.noise_errors
            ));
        }
        if self.test_window == 0 {
            return Err("live MST test window 0: expected at least 1".into());
        }
        Ok(())
    }

    /// The weight of a link from its forecasts (None: not measured for this metric).
    pub fn weight(&self, link: &LinkWeather) -> Option<f64> {
        let raw = match self.metric {
            MstMetric::Latency => link.forecast.map(|f| f.value.max(0.0) / 2.0),
            MstMetric::InverseBandwidth => link.bandwidth.map(|f| 1e3 / f.value.max(1e-9)),
        }?;
        Some(self.round(raw))
    }

    /// The error estimate of [`weight`](Self::weight), in the weight's unit (None: not
    /// measured for this metric).
    pub fn weight_error(&self, link: &LinkWeather) -> Option<f64> {
        match self.metric {
            MstMetric::Latency => link.forecast.map(|f| f.error.max(0.0) / 2.0),
            // d(1e3 / v) = 1e3 dv / v^2.
            MstMetric::InverseBandwidth => link
                .bandwidth
                .map(|f| 1e3 * f.error.max(0.0) / f.value.max(1e-9).powi(2)),
        }
    }

    /// The weight of an unmeasured link.
    fn guess(&self, g: &Guesses, intra: bool) -> f64 {
        self.round(match (self.metric, intra) {
            (MstMetric::Latency, true) => g.intra_rtt_ms / 2.0,
            (MstMetric::Latency, false) => g.inter_rtt_ms / 2.0,
            (MstMetric::InverseBandwidth, true) => 1e3 / g.intra_mb_s.max(1e-9),
            (MstMetric::InverseBandwidth, false) => 1e3 / g.inter_mb_s.max(1e-9),
        })
    }

    /// `w` to the resolution (exact multiples stay exact: `14.9` stays the nearest double).
    pub fn round(&self, w: f64) -> f64 {
        if self.resolution > 0.0 {
            let steps = (w / self.resolution).round();
            // Dividing by the inverse keeps decimal resolutions exact (149 / 10 == 14.9).
            let inv = (1.0 / self.resolution).round();
            if inv > 0.0 && (1.0 / inv - self.resolution).abs() < 1e-15 {
                steps / inv
            } else {
                steps * self.resolution
            }
        } else {
            w
        }
    }
}

/// What a node's live MST is doing, for the application and the tests.
#[derive(Clone, Debug, PartialEq)]
pub struct MstLiveState {
    /// The generation (a rebuild after each failure).
    pub generation: u32,
    /// The last epoch (repair) this node knows stable, 0 for the build itself.
    pub epoch: u32,
    /// The whole tree of that epoch as this node holds it, `(lo, hi)` by id (None until every
    /// node's parent has arrived).
    pub tree: Option<Vec<(NodeId, NodeId)>>,
    /// This node's tree edges `(neighbour, weight)`.
    pub branches: Vec<(NodeId, f64)>,
    /// Frames this node sent, by kind name (`mst_hello`, ...).
    pub sent: BTreeMap<&'static str, u64>,
    /// When this node started its first build and when it first knew the tree complete.
    pub built: (Option<Time>, Option<Time>),
    /// Changes this node fed.
    pub fed: u64,
    /// When this node fed its last [`FED_TIMES_KEPT`] changes, oldest first (a repair's start
    /// as its owners saw it).
    pub fed_at: Vec<Time>,
    /// When this node first held the tree of `(generation, epoch)` whole (the end of the build
    /// or of the last repair here).
    pub stable_at: Option<Time>,
    /// No repair runs here and none waits here (fed, queued or deferred): with every node idle
    /// at one epoch, the tree is the MST of every weight fed so far.
    pub idle: bool,
    /// The weights this node's tree uses for the links it owns (to larger ids), `(peer, w)`:
    /// with every node's, the weights the tree must be the MST of.
    pub weights: Vec<(NodeId, f64)>,
    /// Per owned link this node fed changes of, by peer: how many, and the last
    /// [`FED_WEIGHTS_KEPT`] `(when, weight)` fed (which links a repair storm is made of).
    pub fed_links: Vec<LinkFeeds>,
    /// This node's repair requests over every generation (the root's queue, epochs and
    /// rebuilds included).
    pub requests: RequestStats,
}

/// The changes one node fed of one link it owns ([`MstLiveState::fed_links`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkFeeds {
    /// The other end (the larger id).
    pub peer: NodeId,
    /// Changes fed, every generation.
    pub count: u64,
    /// The last ones, oldest first: `(when, weight)`.
    pub weights: Vec<(Time, f64)>,
}

/// Weights an [`LinkFeeds`] keeps per link.
pub const FED_WEIGHTS_KEPT: usize = 16;

/// Feed times an [`MstLiveState`] keeps.
pub const FED_TIMES_KEPT: usize = 64;

/// One node's live MST; see the [module docs](self).
#[derive(Debug)]
pub struct MstService {
    me: NodeId,
    config: MstLiveConfig,
    members: Vec<(NodeId, ClusterId)>,
    failed: BTreeSet<NodeId>,
    node: Option<MaintainedMst>,
    /// Frames that arrived before this node started.
    early: Vec<(NodeId, MstFrame)>,
    /// The generation whose tree `parents` and `stables` describe.
    tree_generation: u32,
    parents: BTreeMap<NodeId, Option<NodeId>>,
    /// Each epoch's decision: (remove, add).
    stables: BTreeMap<u32, (Option<EdgeKey>, Option<EdgeKey>)>,
    /// The last tree this node held whole and its `(generation, epoch)`: what a broadcast
    /// uses while a rebuild after a failure runs (see [`MstService::tree`]).
    last_whole: Option<(MstAt, BTreeSet<(NodeId, NodeId)>)>,
    announced: bool,
    broadcasts: u64,
    sent: BTreeMap<&'static str, u64>,
    built: (Option<Time>, Option<Time>),
    fed: u64,
    fed_at: std::collections::VecDeque<Time>,
    /// The `(generation, epoch)` held whole at the last look, and since when.
    stable_since: Option<((u32, u32), Time)>,
    /// Weights the application measured itself ([`MstService::set_weight`]), by peer.
    overrides: BTreeMap<NodeId, f64>,
    /// The last weight fed per owned link, and the generation it was fed in.
    last_fed: BTreeMap<NodeId, (u32, f64)>,
    /// Every change fed, per owned link (for [`MstLiveState::fed_links`]).
    fed_links: BTreeMap<NodeId, LinkFeeds>,
}

impl MstService {
    /// The service of `me` in a group of `members`.
    pub fn new(
        me: NodeId,
        members: &[(NodeId, ClusterId)],
        config: MstLiveConfig,
    ) -> Result<MstService, String> {
        config.validate()?;
        Ok(MstService {
            me,
            config,
            members: members.to_vec(),
            failed: BTreeSet::new(),
            node: None,
            early: Vec::new(),
            tree_generation: 0,
            parents: BTreeMap::new(),
            stables: BTreeMap::new(),
            last_whole: None,
            announced: false,
            broadcasts: 0,
            sent: BTreeMap::new(),
            built: (None, None),
            fed: 0,
            fed_at: std::collections::VecDeque::new(),
            stable_since: None,
            overrides: BTreeMap::new(),
            last_fed: BTreeMap::new(),
            fed_links: BTreeMap::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MstLiveConfig {
        &self.config
    }

    fn cluster(&self, n: NodeId) -> Option<ClusterId> {
        self.members.iter().find(|(m, _)| *m == n).map(|(_, c)| *c)
    }

    fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members
            .iter()
            .map(|(n, _)| *n)
            .filter(move |n| *n != self.me && !self.failed.contains(n))
    }

    /// Own weights of every live link: measured, else guessed; None if `complete` and one is
    /// not measured.
    fn row(
        &self,
        links: &[LinkWeather],
        guesses: &Guesses,
        complete: bool,
    ) -> Option<Vec<(NodeId, f64)>> {
        let mine = self.cluster(self.me);
        self.peers()
            .map(|p| match self.measured(links, p) {
                Some(w) => Some((p, w)),
                None if complete => None,
                None => Some((p, self.config.guess(guesses, mine == self.cluster(p)))),
            })
            .collect()
    }

    /// Starts the build when this node's row is measured, or `build_after` is past: called on
    /// every new forecast and every heartbeat tick.
    pub fn maybe_start(
        &mut self,
        now: Time,
        links: &[LinkWeather],
        guesses: &Guesses,
        out: &mut Vec<(NodeId, Message)>,
    ) {
        if self.node.is_some() {
            return;
        }
        let late = now.saturating_since(Time::ZERO) >= self.config.build_after;
        let Some(row) = self.row(links, guesses, !late) else {
            return;
        };
        let build = self.config.build.algorithm(self.members.len());
        let rebuild_after = (build == BuildAlgorithm::Rows && self.config.rebuild_after > 0)
            .then_some(self.config.rebuild_after as usize);
        let mut node = MaintainedMst::gathering(self.me, row)
            .and_then(|m| m.with_test_window(self.config.test_window))
            .expect("members are distinct, weights and window checked")
            .with_build(build)
            .with_rebuild_after(rebuild_after);
        let mut o = Vec::new();
        node.start(&mut o);
        self.built.0 = Some(now);
        self.node = Some(node);
        self.emit(o, out);
        for (from, frame) in std::mem::take(&mut self.early) {
            // A bad early frame costs only itself (it was the peer's fault when it came).
            let _ = self.handle(now, from, frame, out);
        }
        self.after(now, out);
    }

    /// The link to `p` as measured: the application's weight, else the forecasts'.
    fn measured(&self, links: &[LinkWeather], p: NodeId) -> Option<f64> {
        self.overrides.get(&p).copied().or_else(|| {
            links
                .iter()
                .find(|l| l.peer == p)
                .and_then(|l| self.config.weight(l))
        })
    }

    /// The error estimate of [`measured`](Self::measured): 0 for a weight the application
    /// set.
    fn measured_error(&self, links: &[LinkWeather], p: NodeId) -> f64 {
        if self.overrides.contains_key(&p) {
            return 0.0;
        }
        links
            .iter()
            .find(|l| l.peer == p)
            .and_then(|l| self.config.weight_error(l))
            .unwrap_or(0.0)
    }

    /// The application measured the link to `peer` itself (a cost file, its own probes): from
    /// now on the link weighs `weight` (rounded to the resolution) whatever its forecasts say,
    /// taken in by the next check like a forecast that moved.
    pub fn set_weight(&mut self, peer: NodeId, weight: f64) -> Result<(), String> {
        if peer == self.me || self.cluster(peer).is_none() {
            return Err(format!("node {}: {peer} is not another member", self.me));
        }
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(format!(
                "node {}: the link to {peer} cannot weigh {weight}, expected a number >= 0",
                self.me
            ));
        }
        self.overrides.insert(peer, self.config.round(weight));
        Ok(())
    }

    /// A frame of the family from member `from`.
    pub fn handle(
        &mut self,
        now: Time,
        from: NodeId,
        frame: MstFrame,
        out: &mut Vec<(NodeId, Message)>,
    ) -> Result<(), String> {
        if self.failed.contains(&from) {
            return Ok(());
        }
        let Some(node) = self.node.as_mut() else {
            // A correct peer sends at most its Hello and GHS's first messages before this
            // node's Hello reaches it.
            if self.early.len() >= EARLY_PER_MEMBER * self.members.len() {
                return Err(format!(
                    "node {from}: more than {EARLY_PER_MEMBER} MST frames per member before this node started"
                ));
            }
            self.early.push((from, frame));
            return Ok(());
        };
        match frame {
            MstFrame::Parent { generation, parent } => {
                if generation == node.generation() {
                    self.take_parent(generation, from, parent);
                }
                self.note_stable(now);
                Ok(())
            }
            MstFrame::Node(msg) => {
                let mut o = Vec::new();
                node.handle(from, msg.clone(), &mut o)
                    .map_err(|e| e.to_string())?;
                if let MstNodeMsg::Repair {
                    generation,
                    msg:
                        RepairMsg::Stable {
                            epoch, remove, add, ..
                        },
                } = msg
                {
                    self.take_stable(generation, epoch, remove, add);
                }
                self.emit(o, out);
                self.after(now, out);
                Ok(())
            }
        }
    }

    /// A member failed (or left): a new generation rebuilds without it.
    pub fn peer_failed(&mut self, now: Time, peer: NodeId, out: &mut Vec<(NodeId, Message)>) {
        if peer == self.me || !self.failed.insert(peer) {
            return;
        }
        self.early.retain(|(f, _)| *f != peer);
        if let Some(node) = self.node.as_mut() {
            let mut o = Vec::new();
            node.peer_failed(peer, &mut o);
            self.emit(o, out);
            self.after(now, out);
        }
    }

    /// A broadcast started here or was announced to this node: every `check_every`-th one, the
    /// links this node owns are checked.
    pub fn broadcast(
        &mut self,
        now: Time,
        links: &[LinkWeather],
        out: &mut Vec<(NodeId, Message)>,
    ) {
        self.broadcasts += 1;
        let k = u64::from(self.config.check_every);
        if k > 0 && self.broadcasts.is_multiple_of(k) {
            self.check(now, links, out);
        }
    }

    /// A new forecast: with `check_every` 0, the links are checked now.
    pub fn forecast(&mut self, now: Time, links: &[LinkWeather], out: &mut Vec<(NodeId, Message)>) {
        if self.config.check_every == 0 {
            self.check(now, links, out);
        }
    }

    /// Feeds the owned links whose measured weight moved past the threshold from the weight
    /// the tree has (or last fed) for them.
    fn check(&mut self, now: Time, links: &[LinkWeather], out: &mut Vec<(NodeId, Message)>) {
        let Some(m) = self.node.as_ref().and_then(|n| n.maintainer()) else {
            return; // building: the build's weights are this node's row already
        };
        let mut changes = Vec::new();
        // The smaller end owns the edge.
        for p in self.peers().filter(|&p| p > self.me) {
            let (Some(new), Some(cur)) = (self.measured(links, p), m.weight(p)) else {
                continue;
            };
            // A change fed and not yet applied is not fed again.
            let reference = match self.last_fed.get(&p) {
                Some(&(g, w)) if g == self.tree_generation => w,
                _ => cur,
            };
            let moved = (new - reference).abs();
            if moved > 0.0
                && moved > self.config.threshold * reference
                && moved > self.config.min_change
                && moved > self.config.noise_errors * self.measured_error(links, p)
            {
                changes.push((p, new));
            }
        }
        let mut o = Vec::new();
        let g = self.tree_generation;
        if let Some(node) = self.node.as_mut() {
            for (p, w) in changes {
                if node.change_weight(p, w, &mut o).is_ok() {
                    self.fed += 1;
                    if self.fed_at.len() == FED_TIMES_KEPT {
                        self.fed_at.pop_front();
                    }
                    self.fed_at.push_back(now);
                    self.last_fed.insert(p, (g, w));
                    let f = self.fed_links.entry(p).or_insert_with(|| LinkFeeds {
                        peer: p,
                        count: 0,
                        weights: Vec::new(),
                    });
                    f.count += 1;
                    if f.weights.len() == FED_WEIGHTS_KEPT {
                        f.weights.remove(0);
                    }
                    f.weights.push((now, w));
                }
            }
        }
        self.emit(o, out);
        // A feed at the root may start a rebuild.
        self.after(now, out);
    }

    /// Notes when the tree held whole moved to another `(generation, epoch)`.
    fn note_stable(&mut self, now: Time) {
        let at = self.stable();
        if at.is_some() && at != self.stable_since.map(|s| s.0) {
            self.stable_since = at.map(|a| (a, now));
        }
    }

    fn emit(&mut self, o: Vec<(NodeId, MstNodeMsg)>, out: &mut Vec<(NodeId, Message)>) {
        let gen_now = self.node.as_ref().map(|n| n.generation());
        for (to, msg) in o {
            if let MstNodeMsg::Repair {
                generation,
                msg:
                    RepairMsg::Stable {
                        epoch, remove, add, ..
                    },
            } = msg
            {
                // The root's own decision (it receives no Stable).
                if Some(generation) == gen_now {
                    self.take_stable(generation, epoch, remove, add);
                }
            }
            self.push(to, MstFrame::Node(msg), out);
        }
    }

    fn push(&mut self, to: NodeId, frame: MstFrame, out: &mut Vec<(NodeId, Message)>) {
        let m = Message::Mst(Box::new(frame));
        *self.sent.entry(m.kind().name()).or_default() += 1;
        out.push((to, m));
    }

    /// After the machine moved: a new generation forgets the old tree; a tree built here is
    /// announced.
    fn after(&mut self, now: Time, out: &mut Vec<(NodeId, Message)>) {
        self.announce(now, out);
        self.note_stable(now);
    }

    fn announce(&mut self, now: Time, out: &mut Vec<(NodeId, Message)>) {
        let Some(node) = self.node.as_ref() else {
            return;
        };
        let g = node.generation();
        if g != self.tree_generation {
            self.tree_generation = g;
            self.parents.retain(|_, _| false);
            self.stables.clear();
            self.announced = false;
        }
        let Some(m) = node.maintainer() else {
            return;
        };
        if self.announced {
            return;
        }
        self.announced = true;
        if self.built.1.is_none() {
            self.built.1 = Some(now);
        }
        if let Some(tree) = node.built_tree() {
            // The rows build: this node computed the whole tree, nothing to announce.
            let tree = tree.to_vec();
            for (n, p) in tree {
                self.take_parent(g, n, p);
            }
            return;
        }
        // The build's parent: the step that ends the build cannot also end a repair here (a
        // repair ends with a Stable from the parent, after this node's echo).
        let parent = m.parent();
        self.take_parent(g, self.me, parent);
        let targets: Vec<NodeId> = self.peers().collect();
        for p in targets {
            self.push(
                p,
                MstFrame::Parent {
                    generation: g,
                    parent,
                },
                out,
            );
        }
    }

    fn take_parent(&mut self, generation: u32, from: NodeId, parent: Option<NodeId>) {
        if generation == self.tree_generation {
            self.parents.insert(from, parent);
            self.keep_whole();
        }
    }

    /// Keeps the tree as [`last_whole`](Self::tree) when this node holds it whole.
    fn keep_whole(&mut self) {
        if let Some((epoch, edges)) = self.whole_tree() {
            self.last_whole = Some(((self.tree_generation, epoch), edges));
        }
    }

    fn take_stable(
        &mut self,
        generation: u32,
        epoch: u32,
        remove: Option<EdgeKey>,
        add: Option<EdgeKey>,
    ) {
        if generation == self.tree_generation {
            self.stables.insert(epoch, (remove, add));
            self.keep_whole();
        }
    }

    /// The tree of the last stable epoch this node holds whole: `(epoch, edges (lo, hi))`.
    fn whole_tree(&self) -> Option<(u32, BTreeSet<(NodeId, NodeId)>)> {
        let m = self.node.as_ref()?.maintainer()?;
        let (nodes, _) = m.totals();
        if self.parents.len() != nodes as usize {
            return None;
        }
        let mut edges: BTreeSet<(NodeId, NodeId)> = self
            .parents
            .iter()
            .filter_map(|(&c, &p)| p.map(|p| (c.min(p), c.max(p))))
            .collect();
        let mut epoch = 0;
        while epoch < m.stable_epoch() {
            let Some((remove, add)) = self.stables.get(&(epoch + 1)) else {
                break;
            };
            if let Some(r) = remove {
                edges.remove(&(r.lo(), r.hi()));
            }
            if let Some(a) = add {
                edges.insert((a.lo(), a.hi()));
            }
            epoch += 1;
        }
        Some((epoch, edges))
    }

    /// `(generation, epoch)` of the tree [`tree`](Self::tree) would use, None before it is
    /// held whole.
    pub fn stable(&self) -> Option<(u32, u32)> {
        let (epoch, _) = self.whole_tree()?;
        Some((self.tree_generation, epoch))
    }

    /// The last stable tree rooted at `root` over `node_count` ids, with its `(generation,
    /// epoch)`; None before a tree was first held whole.
    ///
    /// While a rebuild after a failure runs (the new generation not held whole yet) it is the
    /// last generation's tree with the failed members taken out, each piece they cut off
    /// joined again by its cheapest edge in `costs` to what the root reaches (the
    /// cheapest-edge-across-the-cut rule of the repairs, computed here): the broadcasts of
    /// that time keep the tree's shape instead of a tree planned from the view's guesses.
    /// Failed members hang under the root as leaves.
    pub fn tree(
        &self,
        root: NodeId,
        node_count: usize,
        costs: &impl LinkCosts,
    ) -> Option<Result<(Tree, MstAt), TreeError>> {
        let (at, edges) = match self.whole_tree() {
            Some((epoch, edges)) => ((self.tree_generation, epoch), edges),
            None => self.last_whole.clone()?,
        };
        let live = |n: &NodeId| !self.failed.contains(n);
        let mut adj: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for &(a, b) in edges.iter().filter(|(a, b)| live(a) && live(b)) {
            adj.entry(a).or_default().push(b);
            adj.entry(b).or_default().push(a);
        }
        let mut seen = BTreeSet::from([root]);
        let mut parent_edges = Vec::with_capacity(node_count.saturating_sub(1));
        let reach = |from: NodeId, seen: &mut BTreeSet<NodeId>, parent_edges: &mut Vec<_>| {
            let mut order = vec![from];
            let mut i = 0;
            while i < order.len() {
                let u = order[i];
                i += 1;
                for &c in adj.get(&u).map_or(&[][..], |v| v.as_slice()) {
                    if seen.insert(c) {
                        order.push(c);
                        parent_edges.push((c, u));
                    }
                }
            }
        };
        reach(root, &mut seen, &mut parent_edges);
        // Pieces cut off by failed members (only in a fallback tree; the members of a tree
        // held whole are all reached): the cheapest edge from the reached part, then its
        // piece, until none is left.
        let cut: BTreeSet<NodeId> = edges
            .iter()
            .flat_map(|&(a, b)| [a, b])
            .filter(|n| live(n) && !seen.contains(n))
            .collect();
        let mut cut = cut;
        while !cut.is_empty() {
            let Some((_, (p, c))) = seen
                .iter()
                .flat_map(|&p| cut.iter().map(move |&c| (p, c)))
                .map(|(p, c)| (costs.cost(p, c), (p, c)))
                .min_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)))
            else {
                break;
            };
            seen.insert(c);
            parent_edges.push((c, p));
            reach(c, &mut seen, &mut parent_edges);
            cut.retain(|n| !seen.contains(n));
        }
        for (m, _) in &self.members {
            if seen.insert(*m) {
                parent_edges.push((*m, root));
            }
        }
        Some(Tree::from_edges(node_count, root, &parent_edges).map(|t| (t, at)))
    }

    /// What the service is doing.
    pub fn state(&self) -> MstLiveState {
        let m = self.node.as_ref().and_then(|n| n.maintainer());
        let whole = self.whole_tree();
        let at = whole.as_ref().map(|w| (self.tree_generation, w.0));
        let weights = m.map_or_else(Vec::new, |m| {
            self.peers()
                .filter(|&p| p > self.me)
                .filter_map(|p| m.weight(p).map(|w| (p, w)))
                .collect()
        });
        MstLiveState {
            generation: self.node.as_ref().map_or(0, |n| n.generation()),
            epoch: whole.as_ref().map_or(0, |w| w.0),
            tree: whole.map(|(_, e)| e.into_iter().collect()),
            branches: m.map(|m| m.branch_edges()).unwrap_or_default(),
            sent: self.sent.clone(),
            built: self.built,
            fed: self.fed,
            fed_at: self.fed_at.iter().copied().collect(),
            stable_at: self.stable_since.filter(|s| Some(s.0) == at).map(|s| s.1),
            idle: m.is_some_and(|m| m.is_stable() && m.pending_len() == 0 && m.deferred_len() == 0),
            weights,
            fed_links: self.fed_links.values().cloned().collect(),
            requests: self
                .node
                .as_ref()
                .map(|n| n.request_stats())
                .unwrap_or_default(),
        }
    }
}
