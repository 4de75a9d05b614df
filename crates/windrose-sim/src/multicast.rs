//! Piece-based multicasts in the simulator: any [`MulticastSpec`] (MOB, BitTorrent, Balanced
//! Multicasting, MagPIe) on a [`Platform`], with what the MOB paper measures — when each node
//! held the whole data, the run's completion (its last receiver), the throughput, the payload
//! that crossed between clusters, and how far all that is from the max-flow bound.
//!
//! # Pieces of a run
//!
//! - [`SharedData`]: the data and its [`Manifest`], built once so that a sweep of runs over the
//!   same data hashes it once (every run gets a fresh [`MemoVerifier`], so each piece is still
//!   verified by the receivers of every run).
//! - [`spec_for`]: the spec of a protocol on a platform (Balanced plans from the capacities it
//!   is given, MagPIe builds its two-level tree, MOB and BitTorrent take their default configs).
//! - [`prepare`]: a [`Simulation`] with one machine per node of the platform, each wrapped in a
//!   probe that watches its outputs, and the [`Probe`] that collects what they saw; run it (or
//!   hand it to the scenario runner, which feeds it timed changes) and call
//!   [`Probe::outcome`].
//! - [`run_multicast`]: all of the above for one run with a fixed list of timed changes.
//!
//! # What is measured, and how
//!
//! - **Completion of a node**: engine time of the first `Report::Progress` whose `done_bytes`
//!   reached `total_bytes` (the machines report on every newly verified piece). The root holds
//!   the data from the start: 0.
//! - **Completion of the run**: the latest completion over the receivers (None if one never
//!   completed); throughput = data size / completion, in MB/s (10^6 bytes/s) as in the paper.
//! - **WAN payload**: the payload bytes of every `Piece` message a machine sent to a node of
//!   another cluster, per (source cluster, destination cluster), counted from the sends (so a
//!   piece sent to a node that failed meanwhile still counts). Frame headers are excluded; the
//!   link counters of [`Metrics`] give the wire bytes including them.
//! - **Bound**: [`multicast_bound`] of the platform the run starts on; for a platform that
//!   changes during the run the caller may give the bound's completion time over the changes
//!   ([`Probe::outcome`]'s `bound_completion_s`, e.g. from `windrose bound`'s interval engine),
//!   and the fraction of the bound is then the bound's completion time over ours.

use crate::engine::{SimConfig, SimError, Simulation};
use crate::metrics::Metrics;
use crate::scenario::TimedChange;
use bytes::Bytes;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::bittorrent::BitTorrentConfig;
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::{build, build_rejoining};
pub use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
use windrose_proto::pieces::PieceMsg;
use windrose_proto::pieces::{ClusterLayout, Manifest, MemoVerifier, PieceKeeper, SwarmSetup};
use windrose_proto::tree_multicast::{TreeMulticastConfig, TreePlan};
use windrose_proto::{
    Input, Message, Output, Outputs, Protocol, ProtocolError, Report, SetupError, Status, Time,
    TransferId,
};
use windrose_trees::multicast::balanced::{plan_balanced, PlanOptions};
use windrose_trees::multicast::bound::multicast_bound;

/// Why a multicast run could not be set up or run.
#[derive(Debug, thiserror::Error)]
pub enum MulticastError {
    /// The data, the manifest, the layout or a machine could not be built.
    #[error("multicast set-up: {0}")]
    Setup(#[from] SetupError),
    /// A plan or the bound could not be computed (bad root, no receivers, a broken tree).
    #[error("multicast plan: {0}")]
    Plan(String),
    /// The engine failed.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// The data of a multicast and its manifest, shared by the runs of a sweep (the bytes are a
/// zero-copy [`Bytes`], the manifest an [`Arc`] made [`Manifest::with_shared_pieces`], so a
/// node's store keeps a bit, not a 32-byte handle, for each piece it holds).
#[derive(Clone, Debug)]
pub struct SharedData {
    /// The bytes the root multicasts.
    pub data: Bytes,
    /// Their pieces' hashes.
    pub manifest: Arc<Manifest>,
}

impl SharedData {
    /// `data` cut into pieces of `piece_bytes` (the last one shorter).
    ///
    /// Errors: as [`Manifest::build`] (a zero piece size, too many pieces).
    pub fn new(data: Bytes, piece_bytes: u32) -> Result<SharedData, SetupError> {
        let manifest = Arc::new(Manifest::build(&data, piece_bytes)?.with_shared_pieces());
        Ok(SharedData { data, manifest })
    }

    /// `len` zero bytes: the simulator never looks at the bytes, and zeros allocated at once
    /// cost no memory until touched (hashing them only reads the zero page).
    pub fn zeros(len: u64, piece_bytes: u32) -> Result<SharedData, SetupError> {
        let len = usize::try_from(len).map_err(|_| SetupError::Config {
            what: "data size",
            requirement: "addressable on this machine",
            value: len.to_string(),
        })?;
        SharedData::new(Bytes::from(vec![0u8; len]), piece_bytes)
    }

    /// Bytes of the data.
    pub fn len(&self) -> u64 {
        self.manifest.total_len()
    }

    /// True for empty data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The Balanced Multicasting plan of `platform` (the capacities the planner is told) from
/// `root`: [`plan_balanced`] with the default options, each planned tree shaped at its rate
/// ([`TreePlan::from_balanced`], as the runtime builds it).
pub fn balanced_plan(platform: &Platform, root: NodeId) -> Result<TreePlan, MulticastError> {
    let plan = plan_balanced(platform, root, &PlanOptions::default())
        .map_err(|e| MulticastError::Plan(e.to_string()))?;
    Ok(TreePlan::from_balanced(&plan)?)
}

/// MagPIe's broadcast tree on `platform` from `root` (binomial inside clusters, flat between
/// cluster coordinators), unshaped: [`TreePlan::magpie`] over the platform's clusters, as the
/// runtime builds it.
pub fn magpie_plan(platform: &Platform, root: NodeId) -> Result<TreePlan, MulticastError> {
    Ok(TreePlan::magpie(&layout_of(platform)?, root)?)
}

/// The spec of `protocol` on `platform` from `root`, with default parameters: Balanced
/// Multicasting plans from `platform`'s capacities (give it the platform at the start of the
/// run, as the paper's planner knew it) and shapes; MagPIe pushes down its tree unshaped.
pub fn spec_for(
    protocol: MulticastProtocol,
    platform: &Platform,
    root: NodeId,
) -> Result<MulticastSpec, MulticastError> {
    Ok(match protocol {
        MulticastProtocol::Mob => MulticastSpec::Mob(MobConfig::default()),
        MulticastProtocol::BitTorrent => MulticastSpec::BitTorrent(BitTorrentConfig::default()),
        MulticastProtocol::Balanced => MulticastSpec::Trees {
            plan: Arc::new(balanced_plan(platform, root)?),
            config: TreeMulticastConfig::with_shape(true),
        },
        MulticastProtocol::Magpie => MulticastSpec::Trees {
            plan: Arc::new(magpie_plan(platform, root)?),
            config: TreeMulticastConfig::with_shape(false),
        },
    })
}

/// The protocol a spec runs (trees with shaped rates count as Balanced, unshaped as MagPIe).
pub fn protocol_of(spec: &MulticastSpec) -> MulticastProtocol {
    match spec {
        MulticastSpec::Mob(_) => MulticastProtocol::Mob,
        MulticastSpec::BitTorrent(_) => MulticastProtocol::BitTorrent,
        MulticastSpec::Trees { plan, config } => {
            if config.shape && plan.trees.iter().any(|t| t.rate_bytes_s.is_some()) {
                MulticastProtocol::Balanced
            } else {
                MulticastProtocol::Magpie
            }
        }
    }
}

/// The cluster layout of a platform: every node in its platform cluster.
pub fn layout_of(platform: &Platform) -> Result<ClusterLayout, SetupError> {
    ClusterLayout::new(
        (0..platform.node_count()).map(|i| (NodeId::from(i), platform.cluster_of(NodeId::from(i)))),
    )
}

// ---------------------------------------------------------------------------------------------
// The probe

#[derive(Debug)]
struct ProbeState {
    /// First time each node held every byte, seconds.
    completed_at_s: Vec<Option<f64>>,
    /// Piece payload bytes sent from cluster `i` to cluster `j`, at `i * clusters + j`.
    wan_payload: Vec<u64>,
    /// The verified pieces each node stored (bit `i` of word `i / 64`): what a real node has
    /// written to its partial file when it dies, and keeps when it restarts. Bits, not a
    /// `BTreeSet` (~2.7 KiB per node at 256 pieces, 7 % of its memory).
    stored: Vec<Vec<u64>>,
}

/// The piece keeper of one simulated node: keeps the pieces in memory and records which it
/// stored (the runtime's keeper writes them to the node's file at that moment).
struct StoredPieces {
    node: usize,
    probe: Arc<Mutex<ProbeState>>,
}

impl PieceKeeper for StoredPieces {
    fn keep(&self, piece: u32, _offset: u64, data: Bytes) -> Bytes {
        let mut s = self.probe.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bits) = s.stored.get_mut(self.node) {
            let word = piece as usize / 64;
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << (piece % 64);
        }
        data
    }
}

/// `setup` with `node`'s recording keeper.
fn setup_for(setup: &SwarmSetup, node: NodeId, probe: &Arc<Mutex<ProbeState>>) -> SwarmSetup {
    SwarmSetup {
        keeper: Some(Arc::new(StoredPieces {
            node: node.index(),
            probe: probe.clone(),
        })),
        ..setup.clone()
    }
}

/// What the wrapped machines of one run saw; see the [module docs](self#what-is-measured-and-how).
#[derive(Clone, Debug)]
pub struct Probe {
    state: Arc<Mutex<ProbeState>>,
    cluster_count: usize,
    root: NodeId,
    protocol: MulticastProtocol,
    data_bytes: u64,
    piece_bytes: u32,
    pieces: u32,
    bound_bytes_s: f64,
    wall_start: Instant,
    /// What a restarted node's machine is built from ([`Probe::restart_at`]).
    setup: SwarmSetup,
    spec: MulticastSpec,
    seed: u64,
    clusters: Arc<Vec<ClusterId>>,
}

/// A machine with the probe watching its outputs (it changes nothing of what the machine does).
struct Probed {
    inner: Box<dyn Protocol + Send>,
    probe: Arc<Mutex<ProbeState>>,
    clusters: Arc<Vec<ClusterId>>,
    cluster_count: usize,
    complete: bool,
}

impl Protocol for Probed {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        let first = out.len();
        self.inner.handle(now, input, out)?;
        let me = self.inner.node();
        let from = self.clusters[me.index()];
        for o in &out.as_slice()[first..] {
            match o {
                Output::Send(t) => {
                    if let Message::Pieces(PieceMsg::Piece(p)) = &t.message {
                        let to = self.clusters.get(t.to.index()).copied().unwrap_or(from);
                        if to != from {
                            let k = from.0 as usize * self.cluster_count + to.0 as usize;
                            let mut s = self.probe.lock().unwrap_or_else(|e| e.into_inner());
                            s.wan_payload[k] += p.payload.len() as u64;
                        }
                    }
                }
                Output::Report(Report::Progress {
                    done_bytes,
                    total_bytes,
                    ..
                }) if !self.complete && done_bytes >= total_bytes => {
                    self.complete = true;
                    let mut s = self.probe.lock().unwrap_or_else(|e| e.into_inner());
                    s.completed_at_s[me.index()] = Some(now.as_secs_f64());
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.inner.status()
    }
}

/// Payload bytes that went from one cluster to another.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WanPayload {
    /// Source cluster.
    pub from: ClusterId,
    /// Destination cluster.
    pub to: ClusterId,
    /// Piece payload bytes.
    pub bytes: u64,
}

/// What one multicast run measured; see the [module docs](self#what-is-measured-and-how).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MulticastOutcome {
    /// The protocol.
    pub protocol: MulticastProtocol,
    /// The root.
    pub root: NodeId,
    /// Nodes taking part (every node of the platform).
    pub nodes: usize,
    /// Clusters of the platform.
    pub clusters: usize,
    /// Bytes multicast.
    pub data_bytes: u64,
    /// Piece size, bytes.
    pub piece_bytes: u32,
    /// Pieces.
    pub pieces: u32,
    /// When each node (by id) first held every byte, seconds (0 at the root).
    pub node_completion_s: Vec<Option<f64>>,
    /// The last surviving receiver's completion, seconds (None if a receiver that was alive
    /// at the end never completed; receivers that failed for good do not count).
    pub completion_s: Option<f64>,
    /// `data_bytes / completion_s`, MB/s (10^6 bytes/s).
    pub throughput_mb_s: Option<f64>,
    /// Nodes whose machine pushed `Finished` (the protocol let them stop serving).
    pub finished: usize,
    /// Piece payload sent between clusters, per ordered pair of clusters that carried any.
    pub wan_payload: Vec<WanPayload>,
    /// Their sum.
    pub wan_payload_bytes: u64,
    /// Wire bytes (payload and frame headers, every message kind) the WAN links carried, from
    /// the network's link counters.
    pub wan_wire_bytes: f64,
    /// The multicast bound of the platform at the start, bytes/s.
    pub bound_bytes_s: f64,
    /// The bound's completion time for the data: the caller's (over the run's capacity
    /// changes) or `data_bytes / bound_bytes_s`.
    pub bound_completion_s: f64,
    /// `bound_completion_s / completion_s`: the fraction of the bound's throughput we reached.
    pub fraction_of_bound: Option<f64>,
    /// Engine events.
    pub events: u64,
    /// Refused inputs and impossible outputs recorded by the engine.
    pub errors: usize,
    /// Wall time from [`prepare`] to [`Probe::outcome`], seconds.
    pub wall_s: f64,
}

impl MulticastOutcome {
    /// True when every receiver got every byte.
    pub fn all_complete(&self) -> bool {
        self.node_completion_s.iter().all(Option::is_some)
    }

    /// A one-line summary for people.
    pub fn summary(&self) -> String {
        let tp = self
            .throughput_mb_s
            .map_or_else(|| "-".to_string(), |t| format!("{t:.3} MB/s"));
        let frac = self
            .fraction_of_bound
            .map_or_else(|| "-".to_string(), |f| format!("{:.1} %", 100.0 * f));
        let done = self
            .completion_s
            .map_or_else(|| "never".to_string(), |c| format!("{c:.3} s"));
        format!(
            "{}: {} bytes in {} pieces to {} nodes: last receiver done at {done}, {tp} ({frac} of the bound; {:.3} MB/s at the start); WAN payload {} bytes ({:.2} x the data); {} events, {:.3} s wall",
            self.protocol,
            self.data_bytes,
            self.pieces,
            self.nodes,
            self.bound_bytes_s / 1e6,
            self.wan_payload_bytes,
            self.wan_payload_bytes as f64 / self.data_bytes.max(1) as f64,
            self.events,
            self.wall_s
        )
    }
}

impl Probe {
    /// Restarts `node` (failed by then) at `at_s` with the pieces it kept, e.g. what it had
    /// written to disk before it crashed: the protocol's rejoining machine
    /// ([`build_rejoining`]), watched like the others. Pieces that fail verification are
    /// dropped by the machine. A node that never started (failed at 0) joins late this way.
    ///
    /// Errors: the root (it cannot rejoin), a node outside the platform, a bad time.
    pub fn restart_at(
        &self,
        sim: &mut Simulation,
        node: NodeId,
        at_s: f64,
        held: Vec<(u32, Bytes)>,
    ) -> Result<(), MulticastError> {
        let setup = setup_for(&self.setup, node, &self.state);
        let inner = build_rejoining(node, &setup, &self.spec, self.seed, held)?;
        sim.restart_node_at(
            Box::new(Probed {
                inner,
                probe: self.state.clone(),
                clusters: self.clusters.clone(),
                cluster_count: self.cluster_count,
                complete: false,
            }),
            at_s,
        )?;
        Ok(())
    }

    /// The verified pieces `node` has stored so far (in its current or an earlier life), in
    /// ascending order: what a real node would find in its partial file.
    pub fn stored_pieces(&self, node: NodeId) -> Vec<u32> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.stored.get(node.index()).map_or_else(Vec::new, |bits| {
            (0..bits.len() as u32 * 64)
                .filter(|&i| bits[i as usize / 64] & (1 << (i % 64)) != 0)
                .collect()
        })
    }

    /// The protocol being run.
    pub fn protocol(&self) -> MulticastProtocol {
        self.protocol
    }

    /// What the run measured, from the probe and the engine's `metrics`; `bound_completion_s`
    /// overrides the static bound's completion time (for platforms that change during the run).
    pub fn outcome(&self, metrics: &Metrics, bound_completion_s: Option<f64>) -> MulticastOutcome {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut node_completion_s = s.completed_at_s.clone();
        node_completion_s[self.root.index()] = Some(0.0);
        // The last receiver among those still alive at the end (a node killed for good never
        // completes, and the run is done when every survivor is).
        let failed: Vec<bool> = (0..node_completion_s.len())
            .map(|i| {
                metrics
                    .node(NodeId::from(i))
                    .is_some_and(|m| m.outcome == crate::metrics::NodeOutcome::Failed)
            })
            .collect();
        let completion_s = node_completion_s
            .iter()
            .zip(&failed)
            .filter(|(_, &f)| !f)
            .try_fold(0.0f64, |m, (c, _)| c.map(|c| m.max(c)));
        let throughput_mb_s = completion_s
            .filter(|&c| c > 0.0)
            .map(|c| self.data_bytes as f64 / c / 1e6);
        let k = self.cluster_count;
        let wan_payload: Vec<WanPayload> = s
            .wan_payload
            .iter()
            .enumerate()
            .filter(|(_, &b)| b > 0)
            .map(|(i, &bytes)| WanPayload {
                from: ClusterId((i / k) as u32),
                to: ClusterId((i % k) as u32),
                bytes,
            })
            .collect();
        let wan_wire_bytes = metrics
            .links
            .iter()
            .filter(|l| matches!(LinkId::from(l.link), LinkId::Wan { .. }))
            .map(|l| l.bytes)
            .sum();
        let bound_completion_s =
            bound_completion_s.unwrap_or(self.data_bytes as f64 / self.bound_bytes_s);
        MulticastOutcome {
            protocol: self.protocol,
            root: self.root,
            nodes: node_completion_s.len(),
            clusters: k,
            data_bytes: self.data_bytes,
            piece_bytes: self.piece_bytes,
            pieces: self.pieces,
            completion_s,
            throughput_mb_s,
            finished: metrics.finished,
            wan_payload_bytes: wan_payload.iter().map(|w| w.bytes).sum(),
            wan_payload,
            wan_wire_bytes,
            bound_bytes_s: self.bound_bytes_s,
            bound_completion_s,
            fraction_of_bound: completion_s
                .filter(|&c| c > 0.0)
                .map(|c| bound_completion_s / c),
            node_completion_s,
            events: metrics.events,
            errors: metrics.errors.len(),
            wall_s: self.wall_start.elapsed().as_secs_f64(),
        }
    }
}

/// A simulation of one multicast on `platform` (as it is when the run starts): one machine per
/// node, built by [`windrose_proto::multicast::build`] with `data` at `root` only, a fresh
/// [`MemoVerifier`], randomness from `seed`, each wrapped in the returned [`Probe`].
pub fn prepare(
    platform: &Platform,
    root: NodeId,
    data: &SharedData,
    spec: &MulticastSpec,
    seed: u64,
    transfer: TransferId,
    config: SimConfig,
) -> Result<(Simulation, Probe), MulticastError> {
    let wall_start = Instant::now();
    let bound = multicast_bound(platform, root).map_err(|e| MulticastError::Plan(e.to_string()))?;
    let layout = Arc::new(layout_of(platform)?);
    let setup = SwarmSetup {
        transfer,
        root,
        manifest: data.manifest.clone(),
        layout,
        verifier: Arc::new(MemoVerifier::new()),
        keeper: None,
    };
    let n = platform.node_count();
    let clusters: Arc<Vec<ClusterId>> = Arc::new(
        (0..n)
            .map(|i| platform.cluster_of(NodeId::from(i)))
            .collect(),
    );
    let cluster_count = platform.cluster_count();
    let state = Arc::new(Mutex::new(ProbeState {
        completed_at_s: vec![None; n],
        wan_payload: vec![0; cluster_count * cluster_count],
        stored: vec![Vec::new(); n],
    }));
    let mut sim = Simulation::new(platform.clone(), config);
    for i in 0..n {
        let node = NodeId::from(i);
        let d = (node == root).then(|| data.data.clone());
        let inner = build(node, &setup_for(&setup, node, &state), d, spec, seed)?;
        sim.add_boxed_node(
            Box::new(Probed {
                inner,
                probe: state.clone(),
                clusters: clusters.clone(),
                cluster_count,
                complete: false,
            }),
            0.0,
        )?;
    }
    let probe = Probe {
        state,
        cluster_count,
        root,
        protocol: protocol_of(spec),
        data_bytes: data.len(),
        piece_bytes: data.manifest.piece_len(),
        pieces: data.manifest.piece_count(),
        bound_bytes_s: bound.bytes_s,
        wall_start,
        setup,
        spec: spec.clone(),
        seed,
        clusters,
    };
    Ok((sim, probe))
}

/// One multicast run with a fixed list of timed changes (absolute times; those after the end
/// of the run are never applied).
#[derive(Clone, Debug)]
pub struct MulticastRun<'a> {
    /// The platform at time 0.
    pub platform: &'a Platform,
    /// Capacity and latency changes during the run.
    pub changes: &'a [TimedChange],
    /// The root.
    pub root: NodeId,
    /// The data.
    pub data: &'a SharedData,
    /// The protocol and its parameters.
    pub spec: &'a MulticastSpec,
    /// The run seed (each node's generator is derived from it).
    pub seed: u64,
    /// Engine settings.
    pub config: SimConfig,
    /// The bound's completion time over `changes`, when the caller computed it.
    pub bound_completion_s: Option<f64>,
}

/// Runs `run` to its end: the outcome and the engine's metrics.
pub fn run_multicast(
    run: &MulticastRun<'_>,
) -> Result<(MulticastOutcome, Metrics), MulticastError> {
    let (mut sim, probe) = prepare(
        run.platform,
        run.root,
        run.data,
        run.spec,
        run.seed,
        TransferId(1),
        run.config,
    )?;
    for c in run.changes {
        sim.schedule_change(c.at_s, c.change)?;
    }
    let metrics = sim.run()?;
    let outcome = probe.outcome(&metrics, run.bound_completion_s);
    Ok((outcome, metrics))
}

/// The MOB paper's (seed 002) emulated testbed: four clusters A–D with our WAN values, shared
/// by the scenario files in `data/scenarios/mob/`, `windrose reproduce mob` and the benches.
///
/// The paper's figure with the WAN bandwidths is not in its text; the values here are **ours**,
/// chosen to agree with what the text says: A–D and B–C drop to 0.8 MB/s in "slow links"; the
/// slowest WAN link out of A is 3 MB/s (MagPIe, whose flat tree sends from A to every other
/// cluster, never exceeded 3 MB/s); the sum of A's WAN links is 9.5 MB/s, so the multicast
/// bound from A is 9.5 MB/s (fast links) and 7.3 MB/s (slow links), and MOB's 8.5 MB/s is 89 %
/// of it. Nodes and hubs have 10 Gbit/s Myrinet (1.25e9 bytes/s), 0.1 ms inside a cluster.
pub mod seed002 {
    use windrose_model::platform::{ClusterSpec, LinkId, Platform};
    use windrose_model::ClusterId;

    /// Cluster names, in id order.
    pub const CLUSTERS: [&str; 4] = ["A", "B", "C", "D"];

    /// "Fast links" (scenario 1), MB/s (10^6 bytes/s), symmetric; ours.
    pub const FAST_WAN_MB_S: [[f64; 4]; 4] = [
        [0.0, 3.5, 3.0, 3.0],
        [3.5, 0.0, 4.5, 5.0],
        [3.0, 4.5, 0.0, 4.0],
        [3.0, 5.0, 4.0, 0.0],
    ];

    /// The links "slow links" (scenario 2) sets to [`SLOW_MB_S`]: A–D and B–C, both directions.
    pub const SLOW_LINKS: [(u32, u32); 2] = [(0, 3), (1, 2)];

    /// The slow links' bandwidth, MB/s (the paper's).
    pub const SLOW_MB_S: f64 = 0.8;

    /// When fast→slow and slow→fast switch, seconds (the paper's).
    pub const SWITCH_S: f64 = 30.0;

    /// One-way WAN latency for the paper's 20 ms round trips.
    pub const LATENCY_20MS_RTT_S: f64 = 0.01;

    /// One-way WAN latency for the third experiment's 100 ms round trips.
    pub const LATENCY_100MS_RTT_S: f64 = 0.05;

    /// Node and access (hub) links: 10 Gbit/s Myrinet, bytes/s.
    pub const MYRINET_BYTES_S: f64 = 1.25e9;

    /// Latency inside a cluster, seconds.
    pub const INTRA_LATENCY_S: f64 = 1e-4;

    /// The "slow links" WAN table, MB/s.
    pub fn slow_wan_mb_s() -> [[f64; 4]; 4] {
        let mut w = FAST_WAN_MB_S;
        for (a, b) in SLOW_LINKS {
            w[a as usize][b as usize] = SLOW_MB_S;
            w[b as usize][a as usize] = SLOW_MB_S;
        }
        w
    }

    /// The WAN links "slow links" slows down, both directions.
    pub fn slow_links() -> Vec<LinkId> {
        SLOW_LINKS
            .iter()
            .flat_map(|&(a, b)| {
                [
                    LinkId::Wan {
                        from: ClusterId(a),
                        to: ClusterId(b),
                    },
                    LinkId::Wan {
                        from: ClusterId(b),
                        to: ClusterId(a),
                    },
                ]
            })
            .collect()
    }

    /// The testbed with `nodes[i]` nodes in cluster i, the WAN table `wan_mb_s`, one-way WAN
    /// latency `latency_s`, and node links of `node_bytes_s` (Myrinet: [`MYRINET_BYTES_S`];
    /// the local-bottleneck experiment: 12.5e6).
    pub fn platform(
        nodes: [usize; 4],
        wan_mb_s: &[[f64; 4]; 4],
        latency_s: f64,
        node_bytes_s: f64,
    ) -> Platform {
        let mut b = Platform::builder();
        for n in nodes {
            b = b.cluster(ClusterSpec {
                nodes: n,
                node_uplink_bytes_s: node_bytes_s,
                node_downlink_bytes_s: node_bytes_s,
                access_up_bytes_s: MYRINET_BYTES_S,
                access_down_bytes_s: MYRINET_BYTES_S,
                intra_latency_s: INTRA_LATENCY_S,
            });
        }
        for (i, row) in wan_mb_s.iter().enumerate() {
            for (j, &mb) in row.iter().enumerate() {
                if i != j {
                    b = b.wan(
                        ClusterId(i as u32),
                        ClusterId(j as u32),
                        mb * 1e6,
                        latency_s,
                    );
                }
            }
        }
        b.build().expect("the seed-002 testbed is a valid platform")
    }
}
