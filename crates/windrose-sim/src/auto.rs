//! The automatic choice of protocol ([`windrose_proto::choice`]) checked in the simulator:
//! on a platform, the choice is made from the view a perfect prober would have
//! ([`platform_links`]), then every candidate is simulated (the broadcast over the tree the
//! planner builds, MOB, Balanced Multicasting planned from the view) and `auto`'s completion
//! is that of the candidate it chose. [`Grid`] is issue 16's grid of message sizes x WAN
//! latencies x WAN bandwidths x cluster shapes; `windrose reproduce auto` prints it.

use crate::engine::{broadcast_with, SimConfig};
use crate::multicast::{run_multicast, MulticastError, MulticastRun, SharedData};
use serde::Serialize;
use std::sync::Arc;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::choice::{
    choose, platform_links, view_mst, Candidate, Choice, ChoiceInput, ChoiceModel,
};
use windrose_proto::mob::MobConfig;
use windrose_proto::planner::{Planner, TreePolicy};
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_proto::tree_multicast::TreeMulticastConfig;
use windrose_proto::weather::LinkTable;
use windrose_proto::TransferId;
use windrose_trees::Tree;

/// How `auto` runs: the sizes it cuts messages into and the models' constants.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AutoSettings {
    /// The broadcast's segment, bytes.
    pub segment_bytes: u64,
    /// The multicasts' piece, bytes.
    pub piece_bytes: u32,
    /// The broadcast's tree policy (the Host's default).
    #[serde(skip)]
    pub policy: TreePolicy,
    /// The models' constants.
    #[serde(skip)]
    pub model: ChoiceModel,
}

impl Default for AutoSettings {
    /// 256 KiB segments and pieces (the command line's piece size), `adapt` trees.
    fn default() -> Self {
        AutoSettings {
            segment_bytes: 256 << 10,
            piece_bytes: 256 << 10,
            policy: TreePolicy::default(),
            model: ChoiceModel::default(),
        }
    }
}

/// Why a point could not be run.
#[derive(Debug, thiserror::Error)]
pub enum AutoError {
    /// The choice or a plan failed.
    #[error("auto: {0}")]
    Plan(String),
    /// A multicast run failed.
    #[error(transparent)]
    Multicast(#[from] MulticastError),
    /// A broadcast run failed.
    #[error(transparent)]
    Sim(#[from] crate::engine::SimError),
    /// A candidate did not complete.
    #[error("auto: {0} did not complete on the simulated platform")]
    Incomplete(Candidate),
}

/// The broadcast tree the Host would plan for `bytes` from `root` on `links` under `policy`
/// (a fresh planner: the first broadcast of that root).
pub fn planned_tree(
    links: &LinkTable,
    root: NodeId,
    bytes: u64,
    settings: &AutoSettings,
) -> Result<Tree, AutoError> {
    let costs = links.transfer_costs(bytes, settings.segment_bytes);
    let clusters: Vec<ClusterId> = (0..links.node_count())
        .map(|i| links.cluster(NodeId(i as u32)).unwrap_or(ClusterId(0)))
        .collect();
    Planner::new()
        .plan(
            root,
            settings.policy,
            &costs,
            &clusters,
            &[],
            links.bound(bytes),
        )
        .map(|p| p.tree)
        .map_err(|e| AutoError::Plan(e.to_string()))
}

/// The choice on `platform` for `bytes` from `root`, and the broadcast tree it predicted.
pub fn choose_on(
    platform: &Platform,
    root: NodeId,
    bytes: u64,
    settings: &AutoSettings,
) -> Result<(Choice, Tree), AutoError> {
    let links = platform_links(platform);
    let tree = planned_tree(&links, root, bytes, settings)?;
    let mst = view_mst(&links, root, bytes, settings.segment_bytes);
    let choice = choose(&ChoiceInput {
        bytes,
        root,
        links: &links,
        tree: &tree,
        alternative: mst.as_ref(),
        segment_bytes: settings.segment_bytes,
        piece_bytes: settings.piece_bytes,
        model: settings.model,
    })
    .map_err(|e| AutoError::Plan(e.to_string()))?;
    // The tree the broadcast's prediction was made for: the planner's, or the MST.
    let tree = match (choice.planned_tree_s, mst) {
        (Some(_), Some(mst)) => mst,
        _ => tree,
    };
    Ok((choice, tree))
}

/// Simulates `candidate` as the choice planned it: its completion (the last receiver's),
/// seconds.
pub fn simulate(
    platform: &Platform,
    root: NodeId,
    bytes: u64,
    candidate: Candidate,
    choice: &Choice,
    tree: &Tree,
    settings: &AutoSettings,
) -> Result<f64, AutoError> {
    let done = match candidate {
        Candidate::Broadcast => {
            let config = BroadcastConfig::new(TransferId(1), settings.segment_bytes.max(1));
            let mut sim = broadcast_with(
                platform.clone(),
                tree,
                crate::engine::Payload::Zeros(bytes),
                config,
                SimConfig::default(),
            )?;
            let m = sim.run()?;
            m.all_finished().then_some(m.makespan_s).flatten()
        }
        Candidate::Mob | Candidate::Balanced => {
            let spec = match candidate {
                Candidate::Mob => crate::multicast::MulticastSpec::Mob(MobConfig::default()),
                _ => crate::multicast::MulticastSpec::Trees {
                    plan: Arc::new(
                        choice
                            .balanced
                            .clone()
                            .ok_or_else(|| AutoError::Plan("no balanced plan".into()))?,
                    ),
                    config: TreeMulticastConfig::with_shape(true),
                },
            };
            let data =
                SharedData::zeros(bytes, settings.piece_bytes).map_err(MulticastError::from)?;
            let (outcome, _) = run_multicast(&MulticastRun {
                platform,
                changes: &[],
                root,
                data: &data,
                spec: &spec,
                seed: 1,
                config: SimConfig::default(),
                bound_completion_s: None,
            })?;
            outcome.completion_s
        }
    };
    done.ok_or(AutoError::Incomplete(candidate))
}

/// One point of the grid: every candidate simulated, and the choice.
#[derive(Clone, Debug, Serialize)]
pub struct AutoPoint {
    /// Bytes sent.
    pub bytes: u64,
    /// What `auto` chose.
    pub chosen: Candidate,
    /// Every candidate's predicted completion, seconds.
    pub predicted_s: Vec<(Candidate, f64)>,
    /// Every candidate's simulated completion, seconds.
    pub simulated_s: Vec<(Candidate, f64)>,
}

impl AutoPoint {
    /// The fastest simulated candidate and its completion.
    pub fn best(&self) -> (Candidate, f64) {
        self.simulated_s
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("at least one candidate")
    }

    /// `auto`'s simulated completion: its choice's.
    pub fn auto_s(&self) -> f64 {
        self.simulated_s
            .iter()
            .find(|(c, _)| *c == self.chosen)
            .expect("the chosen candidate was simulated")
            .1
    }

    /// `auto`'s completion over the best candidate's (1: it chose the best).
    pub fn ratio(&self) -> f64 {
        self.auto_s() / self.best().1
    }
}

/// Chooses and simulates every planned candidate at one point.
pub fn run_point(
    platform: &Platform,
    root: NodeId,
    bytes: u64,
    settings: &AutoSettings,
) -> Result<AutoPoint, AutoError> {
    let (choice, tree) = choose_on(platform, root, bytes, settings)?;
    let mut simulated_s = Vec::new();
    for p in &choice.predictions {
        let s = simulate(platform, root, bytes, p.candidate, &choice, &tree, settings)?;
        simulated_s.push((p.candidate, s));
    }
    Ok(AutoPoint {
        bytes,
        chosen: choice.chosen,
        predicted_s: choice
            .predictions
            .iter()
            .map(|p| (p.candidate, p.completion_s))
            .collect(),
        simulated_s,
    })
}

/// A grid network: clusters of the given sizes (gigabit nodes, 0.1 ms inside a cluster,
/// access links that never limit) joined by WAN links of `wan_mb_s` MB/s and `wan_ms` ms
/// one way.
pub fn grid_platform(shape: &[usize], wan_ms: f64, wan_mb_s: f64) -> Result<Platform, AutoError> {
    let mut b = Platform::builder();
    for &k in shape {
        b = b.cluster(ClusterSpec::uniform(k, 117e6, 1e11, 1e-4));
    }
    b.wan_all(wan_mb_s * 1e6, wan_ms / 1e3)
        .build()
        .map_err(|e| AutoError::Plan(e.to_string()))
}

/// One grid point's coordinates.
#[derive(Clone, Debug, Serialize)]
pub struct GridPoint {
    /// Cluster sizes.
    pub shape: Vec<usize>,
    /// WAN one-way latency, ms.
    pub wan_ms: f64,
    /// WAN bandwidth, MB/s.
    pub wan_mb_s: f64,
    /// What ran there.
    pub point: AutoPoint,
}

/// The grid's axes.
#[derive(Clone, Debug)]
pub struct Grid {
    /// Message sizes, bytes.
    pub sizes: Vec<u64>,
    /// WAN one-way latencies, ms.
    pub wan_ms: Vec<f64>,
    /// WAN bandwidths, MB/s.
    pub wan_mb_s: Vec<f64>,
    /// Cluster shapes.
    pub shapes: Vec<Vec<usize>>,
}

impl Grid {
    /// Issue 16's full grid: 1 KiB to 1 GiB x 1-100 ms x 0.5-100 MB/s x 2x4, 4x4 and three
    /// unequal clusters (8, 4, 2).
    pub fn full() -> Grid {
        Grid {
            sizes: vec![1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30],
            wan_ms: vec![1.0, 10.0, 100.0],
            wan_mb_s: vec![0.5, 5.0, 100.0],
            shapes: vec![vec![4, 4], vec![4, 4, 4, 4], vec![8, 4, 2]],
        }
    }

    /// The reduced grid CI runs (`windrose reproduce auto --quick`): 1 KiB to 16 MiB x 1 and
    /// 100 ms x 0.5 and 100 MB/s x the same shapes, 48 points where each candidate is the
    /// best, and is chosen, somewhere (256 KiB is where MOB wins on a fast WAN: below it the
    /// broadcast over the view's MST does).
    pub fn reduced() -> Grid {
        Grid {
            sizes: vec![1 << 10, 256 << 10, 1 << 20, 16 << 20],
            wan_ms: vec![1.0, 100.0],
            wan_mb_s: vec![0.5, 100.0],
            ..Grid::full()
        }
    }

    /// Every point, root node 0, in axis order (shape, latency, bandwidth, size).
    pub fn run(
        &self,
        settings: &AutoSettings,
        mut each: impl FnMut(&GridPoint),
    ) -> Result<Vec<GridPoint>, AutoError> {
        let mut out = Vec::new();
        for shape in &self.shapes {
            for &ms in &self.wan_ms {
                for &mb_s in &self.wan_mb_s {
                    let p = grid_platform(shape, ms, mb_s)?;
                    for &bytes in &self.sizes {
                        let g = GridPoint {
                            shape: shape.clone(),
                            wan_ms: ms,
                            wan_mb_s: mb_s,
                            point: run_point(&p, NodeId(0), bytes, settings)?,
                        };
                        each(&g);
                        out.push(g);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The grid's summary: the fraction of points where `auto` is within 10 % of the best
/// candidate, and its worst ratio.
pub fn summary(points: &[GridPoint]) -> (f64, f64) {
    let within = points.iter().filter(|g| g.point.ratio() <= 1.1).count();
    let worst = points.iter().map(|g| g.point.ratio()).fold(1.0, f64::max);
    (within as f64 / points.len().max(1) as f64, worst)
}

/// The grid as a table, one line per point, and its summary.
pub fn table(points: &[GridPoint]) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "{:<8} {:>6} {:>7} {:>9}  {:<9} {:<9} {:>10} {:>10} {:>10} {:>6}\n",
        "shape",
        "wan ms",
        "wan MB/s",
        "size",
        "auto",
        "best",
        "broadcast",
        "balanced",
        "mob",
        "ratio"
    );
    for g in points {
        let p = &g.point;
        let sim = |c: Candidate| {
            p.simulated_s
                .iter()
                .find(|(x, _)| *x == c)
                .map_or("-".to_string(), |(_, t)| format!("{t:.4}"))
        };
        let shape: Vec<String> = g.shape.iter().map(|k| k.to_string()).collect();
        let _ = writeln!(
            s,
            "{:<8} {:>6} {:>7} {:>9}  {:<9} {:<9} {:>10} {:>10} {:>10} {:>6.3}",
            shape.join("+"),
            g.wan_ms,
            g.wan_mb_s,
            windrose_model::units::format_size(p.bytes),
            p.chosen.name(),
            p.best().0.name(),
            sim(Candidate::Broadcast),
            sim(Candidate::Balanced),
            sim(Candidate::Mob),
            p.ratio()
        );
    }
    let (within, worst) = summary(points);
    let _ = writeln!(
        s,
        "{} points: auto within 10 % of the best on {:.1} %, worst ratio {:.3}",
        points.len(),
        within * 100.0,
        worst
    );
    s
}
