//! The registry of collectives: one serde [`CollectiveSpec`] that every front end parses into
//! (scenario files, the runtime's job messages, the command line, the [`Host`](crate::host)'s
//! announcements), and one [`Descriptor`] per protocol that says how a node's machine is built
//! from it. Drivers carry a spec without looking inside it and call [`build`].
//!
//! | name        | spec variant                    | machine                          | rejoin |
//! |-------------|---------------------------------|----------------------------------|--------|
//! | `broadcast` | [`CollectiveSpec::Broadcast`]   | [`crate::tree_broadcast`]        | yes    |
//! | `scatter`   | [`CollectiveSpec::Scatter`]     | [`crate::scatter`]               | no     |
//! | `multicast` | [`CollectiveSpec::Multicast`]   | [`crate::multicast`] (4 of them) | yes    |
//! | `mst`       | [`CollectiveSpec::Mst`]         | [`crate::ghs`] ([`crate::ghs::GhsProtocol`]) | no |
//! | `heterosort`| [`CollectiveSpec::HeteroSort`]  | [`crate::heterosort`] ([`HeteroSort`]) | no |
//! | `sample_sort`| [`CollectiveSpec::SampleSort`] | [`crate::sample_sort`] ([`SampleSort`](crate::sample_sort::SampleSort)) | no |
//!
//! An MST run takes no data: every node delivers its own tree edges
//! ([`MstResult`](crate::ghs::MstResult)). It cannot take a node back: GHS has no failure
//! handling (a lost member aborts the run; the repair of issue 17's next step is where a tree
//! survives a failure), and a restarted node's fresh machine could not rejoin the fragments
//! its earlier life belonged to.
//!
//! A HeteroSort or sample sort run takes no data from its initiator: every member's machine is built with its
//! own records, [`BuildContext::local_input`] (the Host asks its application,
//! [`Application::local_input`](crate::app::Application::local_input)), and delivers its sorted
//! key range.
//!
//! # Adding a protocol
//! 1. one module in this crate with its machine, its parameters (serde), its messages (an enum
//!    implementing [`frame::Family`](crate::frame::Family): kinds, fixed fields, codec, checks)
//!    and its tests (golden tests from its paper, property tests, a chaos run in the simulator);
//! 2. one variant of [`CollectiveSpec`] holding those parameters;
//! 3. one [`Descriptor`] in [`REGISTRY`] and its arm in [`CollectiveSpec::descriptor`];
//! 4. one line in `frame.rs`'s `families!` list (its family byte is then dispatched) and one
//!    `pub mod` line in `lib.rs`.
//!
//! So a new protocol touches four files: its module, this one, `frame.rs` (one line) and
//! `lib.rs` (one line). Nothing in the drivers changes: the simulator, the runtime and the
//! Host build machines through [`build`], carry messages as opaque [`Message`](crate::Message)s
//! and route them by [`TransferId`]; the frame-count tests name kinds by their registered
//! names.

use crate::bittorrent::BitTorrentConfig;
use crate::frame::TransferId;
use crate::ghs::{GhsProtocol, MstSpec};
use crate::heterosort::{HeteroSort, HsortSpec};
use crate::mob::MobConfig;
use crate::multicast::{self, MulticastProtocol, MulticastSpec};
use crate::node::Protocol;
use crate::pieces::{ClusterLayout, Manifest, PieceKeeper, PieceVerifier, SwarmSetup, HASH_LEN};
use crate::sample_sort::SampleSortSpec;
use crate::scatter::{Scatter, ScatterConfig, SendMode};
use crate::tree_broadcast::{BroadcastConfig, TreeBroadcast};
use crate::tree_multicast::{PlanTree, TreeMulticastConfig, TreePlan};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use windrose_model::{ClusterId, NodeId};
use windrose_trees::dlt::Schedule;
use windrose_trees::Tree;

/// A tree as it travels in a spec: the root and every other member's `(child, parent)` edge,
/// each parent's children in send order. Rebuilt (and so validated) with `Tree::from_edges`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeSpec {
    /// Size of the per-node tables (the group size).
    pub node_count: u32,
    /// The root.
    pub root: NodeId,
    /// `(child, parent)`, breadth-first, children in send order.
    pub edges: Vec<(NodeId, NodeId)>,
}

impl TreeSpec {
    /// The spec of `tree`.
    pub fn of(tree: &Tree) -> TreeSpec {
        let mut edges = Vec::with_capacity(tree.len().saturating_sub(1));
        for &n in tree.nodes() {
            for &c in tree.children(n) {
                edges.push((c, n));
            }
        }
        TreeSpec {
            node_count: tree.node_count() as u32,
            root: tree.root(),
            edges,
        }
    }

    /// The tree, checked.
    pub fn to_tree(&self) -> Result<Tree, String> {
        Tree::from_edges(self.node_count as usize, self.root, &self.edges)
            .map_err(|e| e.to_string())
    }
}

/// A collective with its parameters: what every node of one run is built from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveSpec {
    /// [`crate::tree_broadcast`] over a tree.
    Broadcast {
        /// The tree.
        tree: TreeSpec,
        /// Bytes per segment.
        segment_bytes: u64,
        /// Largest payload per frame.
        max_frame_payload: u32,
    },
    /// [`crate::scatter`] following a divisible-load schedule.
    Scatter {
        /// The schedule.
        schedule: Schedule,
        /// Largest payload per frame.
        max_frame_payload: u32,
        /// Children served at once rather than one after the other.
        parallel: bool,
    },
    /// One of [`crate::multicast`]'s piece-based multicasts among all members.
    Multicast {
        /// Which one (balanced and magpie share their parameters' form).
        protocol: MulticastProtocol,
        /// Its parameters.
        params: MulticastParams,
        /// The root's manifest.
        manifest: ManifestSpec,
    },
    /// [`crate::ghs`]: the distributed minimum spanning tree of a weighted graph.
    Mst(MstSpec),
    /// [`crate::heterosort`]: a sort of records every member starts with.
    #[serde(rename = "heterosort")]
    HeteroSort(HsortSpec),
    /// [`crate::sample_sort`]: the sample sort baseline over the same records.
    SampleSort(SampleSortSpec),
}

/// Each member's share of a load: the bytes it keeps ([`CollectiveSpec::shares`]).
pub type MemberShares = Vec<(NodeId, std::ops::Range<u64>)>;

impl CollectiveSpec {
    /// The same spec with a sort's exchanged records compressed as `compress` says
    /// ([`crate::sort_zip`]); other collectives are returned as they are.
    pub fn with_compress(mut self, compress: crate::sort_zip::Compress) -> CollectiveSpec {
        match &mut self {
            CollectiveSpec::HeteroSort(hs) => hs.compress = compress,
            CollectiveSpec::SampleSort(ss) => ss.compress = compress,
            _ => {}
        }
        self
    }

    /// A piece-based multicast of `data` from its root: the data cut into `piece_len`-byte
    /// pieces and hashed into the announced manifest. The one way every front end (CLI, MPI
    /// shim, the Host's automatic choice) builds it, so they cannot cut or announce it
    /// differently.
    ///
    /// Errors: a zero piece length, or more than `u32::MAX` pieces.
    pub fn multicast(
        protocol: MulticastProtocol,
        params: MulticastParams,
        data: &[u8],
        piece_len: u32,
    ) -> Result<CollectiveSpec, crate::node::SetupError> {
        let manifest = Manifest::build(data, piece_len)?;
        Ok(CollectiveSpec::Multicast {
            protocol,
            params,
            manifest: ManifestSpec::of(&manifest),
        })
    }

    /// The protocol's name in the [`REGISTRY`] (`broadcast`, `scatter`, ...).
    pub fn name(&self) -> &'static str {
        self.descriptor().name
    }

    /// The protocol's entry in the [`REGISTRY`].
    pub fn descriptor(&self) -> &'static Descriptor {
        match self {
            CollectiveSpec::Broadcast { .. } => &REGISTRY[0],
            CollectiveSpec::Scatter { .. } => &REGISTRY[1],
            CollectiveSpec::Multicast { .. } => &REGISTRY[2],
            CollectiveSpec::Mst(_) => &REGISTRY[3],
            CollectiveSpec::HeteroSort(_) => &REGISTRY[4],
            CollectiveSpec::SampleSort(_) => &REGISTRY[5],
        }
    }

    /// The root's manifest of piece hashes, for collectives that announce one (the piece-based
    /// multicasts). A driver that authenticates announcements seals and checks this, whatever
    /// the protocol; the others carry nothing to forge (the initiator checks their data end to
    /// end by digests).
    pub fn manifest(&self) -> Option<&ManifestSpec> {
        match self {
            CollectiveSpec::Multicast { manifest, .. } => Some(manifest),
            _ => None,
        }
    }

    /// Where each member's share of `total_len` bytes lies, for collectives whose members
    /// keep and compute a share ([`Delivers::Share`]); None for the others. What an initiator
    /// checks each member's reported share against.
    ///
    /// Errors: the spec's plan cannot cover the load (as building it would say).
    pub fn shares(&self, total_len: u64) -> Option<Result<MemberShares, crate::node::SetupError>> {
        match self {
            CollectiveSpec::Scatter { schedule, .. } => Some(
                crate::scatter::plan(schedule, total_len)
                    .map(|plans| plans.into_iter().map(|p| (p.node, p.kept)).collect()),
            ),
            _ => None,
        }
    }

    /// [`CollectiveSpec::manifest`], to seal it.
    pub fn manifest_mut(&mut self) -> Option<&mut ManifestSpec> {
        match self {
            CollectiveSpec::Multicast { manifest, .. } => Some(manifest),
            _ => None,
        }
    }
}

/// What a protocol's nodes hand to their application.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivers {
    /// Every non-root node receives all the root's bytes, in order.
    AllData,
    /// Every node keeps and computes its own share of the load.
    Share,
    /// Every node receives its own edges of the tree ([`crate::ghs::MstResult`]).
    TreeEdges,
    /// Every node starts with its own records and ends with a sorted, contiguous key range.
    SortedRange,
}

/// One protocol's entry in the registry.
#[derive(Debug)]
pub struct Descriptor {
    /// The name in files, job messages and on the command line.
    pub name: &'static str,
    /// One line for help texts.
    pub summary: &'static str,
    /// What its nodes hand to the application.
    pub delivers: Delivers,
    /// Whether every received byte is checked against the root's manifest (BLAKE3 or the
    /// build context's verifier) before it is stored or forwarded.
    pub verifies_pieces: bool,
    /// Whether a node that restarted mid-run can take part again.
    pub rejoins: bool,
    /// Builds a node's machine.
    pub build: fn(&CollectiveSpec, &BuildContext, Start) -> Result<Built, String>,
}

windrose_trees::named_enum! {
    /// The registry's sorts by the name `windrose sort --protocol` and a scenario's sort
    /// workload take (a test keeps them equal to the entries that deliver a sorted range).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub enum SortProtocol: "sort" {
        /// HeteroSort (seed 003) over a conceptual torus of the members.
        #[default]
        Heterosort = "heterosort",
        /// The sample sort: p - 1 equal-weight splitters, one all-to-all exchange.
        SampleSort = "sample-sort",
    }
}

impl SortProtocol {
    /// The collective sorting records of `record_len` bytes: HeteroSort on the `(rows, cols)`
    /// torus with `slicing`, the members' relative `speeds` (empty: equal) and `backups`
    /// copies of each input; the sample sort takes none of those.
    pub fn spec(
        self,
        record_len: u32,
        (rows, cols): (u32, u32),
        slicing: crate::heterosort::Slicing,
        speeds: &[f64],
        backups: u32,
    ) -> CollectiveSpec {
        match self {
            SortProtocol::SampleSort => CollectiveSpec::SampleSort(SampleSortSpec::new(record_len)),
            SortProtocol::Heterosort => CollectiveSpec::HeteroSort(HsortSpec {
                rows,
                cols,
                record_len,
                slicing,
                speeds: speeds.to_vec(),
                backups,
                compress: crate::sort_zip::Compress::None,
            }),
        }
    }
}

/// Every collective windrose runs, one entry per protocol module.
pub static REGISTRY: [Descriptor; 6] = [
    Descriptor {
        name: "broadcast",
        summary: "pipelined broadcast over a tree (any tree algorithm)",
        delivers: Delivers::AllData,
        verifies_pieces: false,
        rejoins: true,
        build: build_broadcast,
    },
    Descriptor {
        name: "scatter",
        summary: "divisible-load scatter in the optimal order, each node computing its share",
        delivers: Delivers::Share,
        verifies_pieces: false,
        rejoins: false,
        build: build_scatter,
    },
    Descriptor {
        name: "multicast",
        summary: "verified pieces by MOB, BitTorrent, Balanced Multicasting or MagPIe",
        delivers: Delivers::AllData,
        verifies_pieces: true,
        rejoins: true,
        build: build_multicast,
    },
    Descriptor {
        name: "mst",
        summary: "distributed minimum spanning tree of a weighted graph (GHS)",
        delivers: Delivers::TreeEdges,
        verifies_pieces: false,
        rejoins: false,
        build: build_mst,
    },
    Descriptor {
        name: "heterosort",
        summary: "distributed sort of every member's records over a torus in snake order",
        delivers: Delivers::SortedRange,
        verifies_pieces: false,
        rejoins: false,
        build: build_heterosort,
    },
    Descriptor {
        name: "sample_sort",
        summary: "sample sort baseline: p - 1 equal-weight splitters, one all-to-all exchange",
        delivers: Delivers::SortedRange,
        verifies_pieces: false,
        rejoins: false,
        build: crate::sample_sort::build,
    },
];

/// Everything about the node and the run that a machine is built from besides the spec.
#[derive(Clone)]
pub struct BuildContext {
    /// The node the machine runs on.
    pub me: NodeId,
    /// The node that starts with the data.
    pub root: NodeId,
    /// Tags every frame of the run.
    pub transfer: TransferId,
    /// Bytes of the root's data.
    pub total_len: u64,
    /// Every member of the group and its cluster.
    pub members: Arc<[(NodeId, ClusterId)]>,
    /// A non-root node gives up when nothing arrives for this long (None: never).
    pub idle_timeout: Option<Duration>,
    /// Seed of the per-node RNGs ([`crate::node_rng`]).
    pub seed: u64,
    /// How a multicast checks pieces.
    pub verifier: Arc<dyn PieceVerifier>,
    /// Where a multicast keeps pieces (None: in memory).
    pub keeper: Option<Arc<dyn PieceKeeper>>,
    /// This node's own input, for collectives where every member starts with data (a sort);
    /// empty for the others. The Host fills it from its application
    /// ([`Application::local_input`](crate::app::Application::local_input)).
    pub local_input: Bytes,
}

/// How a node's machine starts.
pub enum Start {
    /// The root, with the data.
    Root(Bytes),
    /// A node that receives.
    Fresh,
    /// A node that restarted mid-run, with the verified pieces it kept (a broadcast node asks
    /// the root for everything again and passes an empty list).
    Rejoin(Vec<(u32, Bytes)>),
}

/// A node's machine and the peers it exchanges frames with.
pub struct Built {
    /// The machine.
    pub machine: Box<dyn Protocol + Send>,
    /// The nodes it sends to or hears from (its connections).
    pub neighbours: Vec<NodeId>,
}

/// Builds the machine of `ctx.me` for `spec` through the protocol's [`Descriptor`].
///
/// Errors name what does not fit (a tree that does not span the group, a root that is not the
/// spec's, a node a protocol cannot take back).
pub fn build(spec: &CollectiveSpec, ctx: &BuildContext, start: Start) -> Result<Built, String> {
    let d = spec.descriptor();
    if matches!(start, Start::Rejoin(_)) && !d.rejoins {
        return Err(format!(
            "a {} cannot take a node back mid-run: its plan fixed every node's part at the start",
            d.name
        ));
    }
    (d.build)(spec, ctx, start)
}

fn group_size(ctx: &BuildContext) -> usize {
    ctx.members
        .iter()
        .map(|(n, _)| n.index() + 1)
        .max()
        .unwrap_or(0)
}

fn check_tree(tree: &Tree, what: &str, ctx: &BuildContext) -> Result<(), String> {
    let n = ctx.members.len();
    if tree.len() != n || tree.node_count() != group_size(ctx) {
        return Err(format!(
            "{what} spans {} of {} nodes, the group has {n}",
            tree.len(),
            tree.node_count(),
        ));
    }
    if tree.root() != ctx.root {
        return Err(format!(
            "{what} is rooted at node {}, the run's root is node {}",
            tree.root(),
            ctx.root
        ));
    }
    Ok(())
}

fn build_broadcast(
    spec: &CollectiveSpec,
    ctx: &BuildContext,
    start: Start,
) -> Result<Built, String> {
    let CollectiveSpec::Broadcast {
        tree,
        segment_bytes,
        max_frame_payload,
    } = spec
    else {
        unreachable!("the registry hands a broadcast spec to build_broadcast");
    };
    let tree = tree.to_tree()?;
    check_tree(&tree, "the tree", ctx)?;
    let me = ctx.me;
    let config = BroadcastConfig {
        transfer: ctx.transfer,
        segment_bytes: *segment_bytes,
        max_frame_payload: *max_frame_payload,
        idle_timeout: ctx.idle_timeout.filter(|_| me != ctx.root),
    };
    match start {
        // Its children were re-attached to the root when it failed: it asks the root for
        // everything and forwards nothing.
        Start::Rejoin(_) => {
            let m = TreeBroadcast::rejoin(me, &tree, config).map_err(|e| e.to_string())?;
            Ok(Built {
                machine: Box::new(m),
                neighbours: vec![ctx.root],
            })
        }
        Start::Root(data) => broadcast_machine(me, &tree, Some(data), config),
        Start::Fresh => broadcast_machine(me, &tree, None, config),
    }
}

fn broadcast_machine(
    me: NodeId,
    tree: &Tree,
    data: Option<Bytes>,
    config: BroadcastConfig,
) -> Result<Built, String> {
    let m = TreeBroadcast::new(me, tree, data, config).map_err(|e| e.to_string())?;
    let mut neighbours: Vec<NodeId> = m.children().to_vec();
    neighbours.extend(m.parent());
    Ok(Built {
        machine: Box::new(m),
        neighbours,
    })
}

fn build_scatter(spec: &CollectiveSpec, ctx: &BuildContext, start: Start) -> Result<Built, String> {
    let CollectiveSpec::Scatter {
        schedule,
        max_frame_payload,
        parallel,
    } = spec
    else {
        unreachable!("the registry hands a scatter spec to build_scatter");
    };
    if schedule.root != ctx.root {
        return Err(format!(
            "the schedule's root is node {}, the run's root node {}",
            schedule.root, ctx.root
        ));
    }
    if schedule
        .nodes
        .iter()
        .any(|s| !ctx.members.iter().any(|(m, _)| *m == s.node))
    {
        return Err("the schedule names a node outside the group".into());
    }
    let config = ScatterConfig {
        transfer: ctx.transfer,
        max_frame_payload: *max_frame_payload,
        send_mode: if *parallel {
            SendMode::Parallel
        } else {
            SendMode::Sequential
        },
    };
    let data = match start {
        Start::Root(d) => Some(d),
        _ => None,
    };
    let m = Scatter::new(ctx.me, schedule, data, config).map_err(|e| e.to_string())?;
    let mut neighbours = m.children();
    neighbours.extend(m.parent());
    Ok(Built {
        machine: Box::new(m),
        neighbours,
    })
}

fn build_multicast(
    spec: &CollectiveSpec,
    ctx: &BuildContext,
    start: Start,
) -> Result<Built, String> {
    let CollectiveSpec::Multicast {
        protocol,
        params,
        manifest,
    } = spec
    else {
        unreachable!("the registry hands a multicast spec to build_multicast");
    };
    let manifest = Arc::new(manifest.to_manifest(ctx.total_len)?);
    let mspec = multicast_spec(*protocol, params, ctx)?;
    let layout = ClusterLayout::new(ctx.members.iter().copied()).map_err(|e| e.to_string())?;
    let setup = SwarmSetup {
        transfer: ctx.transfer,
        root: ctx.root,
        manifest,
        layout: Arc::new(layout),
        verifier: ctx.verifier.clone(),
        keeper: ctx.keeper.clone(),
    };
    let me = ctx.me;
    let machine = match start {
        Start::Rejoin(held) => multicast::build_rejoining(me, &setup, &mspec, ctx.seed, held),
        Start::Root(data) => multicast::build(me, &setup, Some(data), &mspec, ctx.seed),
        Start::Fresh => multicast::build(me, &setup, None, &mspec, ctx.seed),
    }
    .map_err(|e| e.to_string())?;
    // The swarm protocols talk to any member: a full mesh.
    let neighbours = ctx
        .members
        .iter()
        .map(|(id, _)| *id)
        .filter(|&id| id != me)
        .collect();
    Ok(Built {
        machine,
        neighbours,
    })
}

fn build_mst(spec: &CollectiveSpec, ctx: &BuildContext, start: Start) -> Result<Built, String> {
    let CollectiveSpec::Mst(mst) = spec else {
        unreachable!("the registry hands an MST spec to build_mst");
    };
    if let Start::Root(data) = &start {
        if !data.is_empty() {
            return Err(format!(
                "an MST run takes no data ({} bytes given): its graph is in the spec",
                data.len()
            ));
        }
    }
    mst.check(|n| ctx.members.iter().any(|(m, _)| *m == n))?;
    let edges = mst.incident(ctx.me);
    let neighbours = edges.iter().map(|&(n, _)| n).collect();
    let m = GhsProtocol::new(ctx.me, ctx.transfer, edges)
        .and_then(|m| m.with_test_window(mst.test_window))
        .map_err(|e| e.to_string())?;
    Ok(Built {
        machine: Box::new(m),
        neighbours,
    })
}

fn build_heterosort(
    spec: &CollectiveSpec,
    ctx: &BuildContext,
    start: Start,
) -> Result<Built, String> {
    let CollectiveSpec::HeteroSort(hs) = spec else {
        unreachable!("the registry hands a HeteroSort spec to build_heterosort");
    };
    if let Start::Root(data) = &start {
        if !data.is_empty() {
            return Err(format!(
                "a HeteroSort run takes no data from its initiator ({} bytes given): every \
                 member's records are its local input",
                data.len()
            ));
        }
    }
    let members: Vec<NodeId> = ctx.members.iter().map(|(n, _)| *n).collect();
    let m = HeteroSort::new(ctx.me, &members, ctx.transfer, hs, ctx.local_input.clone())?
        .with_clusters(&ctx.members);
    if hs.backups > 0 && members.len() > 1 {
        // Failure notices go to every member, and after a failure any survivor may become a
        // partner (see `heterosort::recovery`).
        let mut all: Vec<NodeId> = members.into_iter().filter(|&n| n != ctx.me).collect();
        all.sort_unstable();
        return Ok(Built {
            machine: Box::new(m),
            neighbours: all,
        });
    }
    // Its partners on the torus, every cycle's (the lists differ only in order).
    let mut neighbours: Vec<NodeId> = hs
        .check(members.len())?
        .0
        .partners(m.rank())
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|p| m.members()[p.node])
        .collect();
    neighbours.sort_unstable();
    Ok(Built {
        machine: Box::new(m),
        neighbours,
    })
}

/// One tree of a multicast plan as it travels in a spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanTreeSpec {
    /// The tree.
    pub tree: TreeSpec,
    /// The rate its senders keep to, bytes/s (None: as fast as TCP goes).
    pub rate_bytes_s: Option<f64>,
}

/// A multicast protocol's parameters as they travel (the serialisable form of
/// [`MulticastSpec`]: trees instead of an `Arc<TreePlan>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MulticastParams {
    /// MOB.
    Mob(MobConfig),
    /// BitTorrent.
    #[serde(rename = "bittorrent")]
    BitTorrent(BitTorrentConfig),
    /// Pieces pushed down planned trees (Balanced Multicasting, MagPIe).
    Trees {
        /// The trees and their rates.
        trees: Vec<PlanTreeSpec>,
        /// Frame and shaping knobs.
        config: TreeMulticastConfig,
    },
}

impl MulticastParams {
    /// The serialisable form of `spec`.
    pub fn of(spec: &MulticastSpec) -> MulticastParams {
        match spec {
            MulticastSpec::Mob(c) => MulticastParams::Mob(c.clone()),
            MulticastSpec::BitTorrent(c) => MulticastParams::BitTorrent(c.clone()),
            MulticastSpec::Trees { plan, config } => MulticastParams::Trees {
                trees: plan
                    .trees
                    .iter()
                    .map(|t| PlanTreeSpec {
                        tree: TreeSpec::of(&t.tree),
                        rate_bytes_s: t.rate_bytes_s,
                    })
                    .collect(),
                config: *config,
            },
        }
    }
}

/// The protocol's parameters from a spec, its trees checked against the group and the root.
fn multicast_spec(
    protocol: MulticastProtocol,
    params: &MulticastParams,
    ctx: &BuildContext,
) -> Result<MulticastSpec, String> {
    let spec = match params {
        MulticastParams::Mob(c) => MulticastSpec::Mob(c.clone()),
        MulticastParams::BitTorrent(c) => MulticastSpec::BitTorrent(c.clone()),
        MulticastParams::Trees { trees, config } => {
            if trees.is_empty() {
                return Err("the multicast plan has no tree".into());
            }
            let mut plan = Vec::with_capacity(trees.len());
            for (i, t) in trees.iter().enumerate() {
                let tree = t.tree.to_tree()?;
                check_tree(&tree, &format!("tree {i} of the plan"), ctx)?;
                if let Some(r) = t.rate_bytes_s {
                    if !(r.is_finite() && r > 0.0) {
                        return Err(format!(
                            "tree {i} of the plan has rate {r} bytes/s: must be positive"
                        ));
                    }
                }
                plan.push(PlanTree {
                    tree,
                    rate_bytes_s: t.rate_bytes_s,
                });
            }
            MulticastSpec::Trees {
                plan: Arc::new(TreePlan { trees: plan }),
                config: *config,
            }
        }
    };
    let matches = matches!(
        (protocol, &spec),
        (MulticastProtocol::Mob, MulticastSpec::Mob(_))
            | (MulticastProtocol::BitTorrent, MulticastSpec::BitTorrent(_))
            | (
                MulticastProtocol::Balanced | MulticastProtocol::Magpie,
                MulticastSpec::Trees { .. }
            )
    );
    if !matches {
        return Err(format!(
            "the parameters are not those of the {protocol} protocol"
        ));
    }
    Ok(spec)
}

/// The root's manifest as it travels in a spec: publishing it to every node is what starting
/// a multicast does (like a .torrent file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestSpec {
    /// Bytes of every piece but the last.
    pub piece_len: u32,
    /// The BLAKE3 hash of every piece, in order, as one hex string (64 digits per piece): half
    /// the size of a JSON array of hashes.
    pub hashes: String,
    /// When the group has a key: the manifest's MAC with the key derived from it, checked by
    /// every node before it builds its machine (the runtime's business, not the protocol's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl ManifestSpec {
    /// The spec of `manifest`.
    pub fn of(manifest: &Manifest) -> ManifestSpec {
        let mut hashes = String::with_capacity(manifest.hashes().len() * HASH_LEN * 2);
        for h in manifest.hashes() {
            for b in h {
                hashes.push(char::from(HEX[usize::from(b >> 4)]));
                hashes.push(char::from(HEX[usize::from(b & 0xF)]));
            }
        }
        ManifestSpec {
            piece_len: manifest.piece_len(),
            hashes,
            mac: None,
        }
    }

    /// The manifest of `total_len` bytes, checked (hex digits, one hash per piece).
    pub fn to_manifest(&self, total_len: u64) -> Result<Manifest, String> {
        let digits = self.hashes.as_bytes();
        if !digits.len().is_multiple_of(HASH_LEN * 2) {
            return Err(format!(
                "the manifest's hashes are {} hex digits, not a multiple of {}",
                digits.len(),
                HASH_LEN * 2
            ));
        }
        let nibble = |c: u8| -> Result<u8, String> {
            match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(format!(
                    "the manifest's hashes contain {:?}, not a hex digit",
                    char::from(c)
                )),
            }
        };
        let mut hashes = Vec::with_capacity(digits.len() / (HASH_LEN * 2));
        for chunk in digits.chunks_exact(HASH_LEN * 2) {
            let mut h = [0u8; HASH_LEN];
            for (i, pair) in chunk.chunks_exact(2).enumerate() {
                h[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
            }
            hashes.push(h);
        }
        Manifest::from_parts(total_len, self.piece_len, hashes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sorts offered by name are the registry's sorts, under the registry's names (with
    /// `-` for `_`): a sort added to the registry must be offered, and nothing offered builds
    /// a collective the registry does not call a sort.
    #[test]
    fn the_sorts_by_name_are_the_registrys_sorts() {
        let mut offered = Vec::new();
        for p in SortProtocol::ALL {
            let spec = p.spec(100, (2, 2), Default::default(), &[], 1);
            let d = spec.descriptor();
            assert_eq!(d.delivers, Delivers::SortedRange, "{}", d.name);
            assert_eq!(p.name().replace('-', "_"), d.name);
            offered.push(d.name);
        }
        let registered: Vec<&str> = REGISTRY
            .iter()
            .filter(|d| d.delivers == Delivers::SortedRange)
            .map(|d| d.name)
            .collect();
        assert_eq!(offered, registered);
    }

    #[test]
    fn every_spec_names_its_registry_entry() {
        let names: Vec<&str> = REGISTRY.iter().map(|d| d.name).collect();
        assert_eq!(
            names,
            [
                "broadcast",
                "scatter",
                "multicast",
                "mst",
                "heterosort",
                "sample_sort"
            ]
        );
        let tree = Tree::from_edges(2, NodeId(0), &[(NodeId(1), NodeId(0))]).unwrap();
        let b = CollectiveSpec::Broadcast {
            tree: TreeSpec::of(&tree),
            segment_bytes: 4,
            max_frame_payload: 4,
        };
        assert_eq!(b.name(), "broadcast");
        let json = serde_json::to_string(&b).unwrap();
        let back: CollectiveSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
    }

    fn ctx(me: u32) -> BuildContext {
        BuildContext {
            me: NodeId(me),
            root: NodeId(0),
            transfer: TransferId(9),
            total_len: 0,
            members: (0..3).map(|i| (NodeId(i), ClusterId(0))).collect(),
            idle_timeout: None,
            seed: 0,
            verifier: Arc::new(crate::pieces::Blake3Verifier),
            keeper: None,
            local_input: Bytes::new(),
        }
    }

    #[test]
    fn mst_specs_build_each_node_with_its_edges_and_refuse_what_does_not_fit() {
        use crate::ghs::{MstSpec, WeightMetric};
        let w = vec![
            vec![0.0, 1.0, 2.0],
            vec![1.0, 0.0, 3.0],
            vec![2.0, 3.0, 0.0],
        ];
        let spec = CollectiveSpec::Mst(MstSpec::complete(WeightMetric::LatencyS, &w).unwrap());
        assert_eq!(spec.name(), "mst");
        assert!(!spec.descriptor().rejoins);
        let json = serde_json::to_string(&spec).unwrap();
        assert!(
            json.starts_with(r#"{"mst":{"metric":"latency_s","edges":[[0,1,1.0]"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<CollectiveSpec>(&json).unwrap(), spec);
        // Weights travel bit for bit (this one came back one ulp off before float_roundtrip).
        let w = 0.022654103117423486f64;
        let one = CollectiveSpec::Mst(MstSpec {
            metric: WeightMetric::LatencyS,
            edges: vec![(NodeId(5), NodeId(6), w)],
            test_window: 3,
        });
        let back: CollectiveSpec =
            serde_json::from_slice(&serde_json::to_vec(&one).unwrap()).unwrap();
        let CollectiveSpec::Mst(back) = back else {
            panic!("not an MST spec")
        };
        assert_eq!(back.edges[0].2.to_bits(), w.to_bits());
        let built = build(&spec, &ctx(2), Start::Fresh).unwrap();
        assert_eq!(built.neighbours, vec![NodeId(0), NodeId(1)]);
        assert!(build(&spec, &ctx(0), Start::Root(Bytes::new())).is_ok());
        let err = |spec: &CollectiveSpec, start: Start| build(spec, &ctx(1), start).err().unwrap();
        assert!(err(&spec, Start::Root(Bytes::from_static(b"x"))).contains("takes no data"));
        assert!(err(&spec, Start::Rejoin(Vec::new())).contains("cannot take a node back"));
        let mst = |edges: Vec<(NodeId, NodeId, f64)>| {
            CollectiveSpec::Mst(MstSpec {
                metric: WeightMetric::InverseBandwidth,
                edges,
                test_window: 1,
            })
        };
        let (a, b, c) = (NodeId(0), NodeId(1), NodeId(5));
        assert!(err(&mst(vec![(a, c, 1.0)]), Start::Fresh).contains("not a member"));
        assert!(err(&mst(vec![(a, b, 1.0), (b, a, 2.0)]), Start::Fresh).contains("twice"));
        assert!(err(&mst(vec![(a, b, -1.0)]), Start::Fresh).contains("finite weight >= 0"));
        assert!(err(&mst(vec![(a, a, 1.0)]), Start::Fresh).contains("two distinct nodes"));
        assert!(
            MstSpec::complete(WeightMetric::LatencyS, &[vec![0.0, 1.0], vec![2.0, 0.0]])
                .unwrap_err()
                .contains("not symmetric")
        );
    }
}
