//! `windrose mst`: GHS, the distributed minimum spanning tree (seed 004), run by Hosts in the
//! simulator on a scenario's platform or a cost file's network, and printed: the tree (edges
//! and weights, the total every node learnt), the GHS frames by kind beside GHS's bound, the
//! simulated build time (first GHS frame to the last node knowing the end) and the message
//! delays on the causal chain that ended it, beside GHS's time bound.
//!
//! **On a running group** (`--group G --id I`): the weights are the members' own measurements,
//! read from every member's weather (its control socket): a link's one-way latency is half
//! the mean of its two ends' round-trip forecasts (as the Hosts' group view joins them), its
//! inverse bandwidth from the lower of its two ends' bandwidth forecasts. Member I runs the
//! `mst` collective on them ([`ControlRequest::Mst`](crate::group_cmd)); the build time is
//! measured at I (request to completion, the session's start included), the frames are the
//! ones I sent. The tree printed is the central MST of the same weights, and every member's
//! delivered result (its BLAKE3, as it reported it) must be exactly its part of that tree with
//! the total I learnt: else the run is an error.
//!
//! The run is the `mst` collective ([`CollectiveSpec::Mst`]) on the complete graph of the
//! members, started by one member through the session like any collective, so its time
//! includes what the Hosts add (the session's Announce, Ready and Go come first and are not
//! counted; queueing on the links is). The tree is checked against the central MST of the same
//! weights (windrose-trees, same `(w, min id, max id)` order): a difference is an error.
//!
//! **`--group G --live`**: reads the group's *live* MST (members served with `group serve
//! --mst-live`, built the way the group file's `[mst] build` says) from every member's control
//! socket, waits until every member holds the whole tree (at most `--wait` seconds), and
//! prints the build: from the first member's start (its first row or Hello) to the last
//! member knowing the tree, on the machine's wall clock (every member must run on this
//! machine: the emulated testbed), the frames and bytes the members sent (`mst_*` kinds),
//! and the tree, which every member must hold alike (else an error). data/mst/testbed.sh
//! runs it on the six sites. With `--settle S` it waits until every member holds one epoch's
//! tree and no repair runs or waits anywhere for S seconds (then the tree must be the MST of
//! the weights the members hold, each link's at its smaller end: Kruskal in GHS's order, else
//! an error; mid-repair the two ends of a link may disagree, so it is not checked then); with
//! `--after-epoch E`, for an epoch past E, and reports the repair from `--since` and from the
//! first change a member fed. `--set-weight LO-HI=W` sets a link's live weight at its owner
//! first (how the CLI test makes a change on loopback, where the probes measure nothing).
//!
//! **`--build rows`** (the live MST's rows build, [`BuildAlgorithm::Rows`]): every node sends
//! its row of weights to every other and computes the tree itself (Kruskal in GHS's order).
//! It runs in the *message-delay model* ([`windrose_proto::ghs_timed`]: every frame takes its
//! link's one-way latency, nothing else costs time, every node starts at 0), beside the live
//! MST's GHS build (Hellos, then GHS with a test window of 1 and of `--test-window`) in the
//! same model on the same weights, each checked against the central MST: time to the last
//! node knowing the end, message delays on the chain, frames and their bytes (header, fixed
//! fields and a row's payload). Hosts in the simulator build by rows in
//! crates/windrose-sim/tests/mst_live.rs.
//!
//! **The chain.** Read from the simulator's event log: a GHS frame sent while a node handles a
//! GHS frame counts one more delay than it; one sent on anything else (the session's Go) counts
//! one. The chain is the count of the frame whose handling let the last node learn the end.

use crate::error::{bad_input, OrBadInput};
use crate::group_cmd::{
    live_msts, measured_links, run_mst, running_member, set_live_weight, LiveMstView, MeasuredLink,
};
use crate::output::{num, print, print_json, vtable};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{ClusterId, CostUnit, DenseCostMatrix, LinkCosts, NodeId};
use windrose_net::group::load_group;
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::ghs::{EdgeKey, MstResult, MstSpec, WeightMetric, DEFAULT_TEST_WINDOW};
use windrose_proto::ghs_repair::{BuildAlgorithm, MaintainedMst};
use windrose_proto::ghs_timed::{ghs_time_bound, ghs_window_message_bound, TimedRun};
use windrose_proto::mst_service::{MstBuild, MstMetric};
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::group::{group, start_input};
use windrose_sim::metrics::ErrorRecord;
use windrose_sim::scenario::{load_scenario, PlatformCosts};
use windrose_trees::{Tree, TreeAlgorithm};

/// `windrose mst`.
#[derive(Debug, Args)]
pub struct MstArgs {
    /// A scenario file: its platform is the network (latencies and capacities).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["costs", "group"],
        required_unless_present_any = ["costs", "group"]
    )]
    scenario: Option<PathBuf>,
    /// A cost file in latency_ms (each link that latency, 100 Mbit/s) or bandwidth_mb_s (each
    /// link that capacity, 1 ms): one site per node.
    #[arg(long, value_name = "FILE", conflicts_with = "group")]
    costs: Option<PathBuf>,
    /// A running group's file: GHS on its members' measured links (see the module docs).
    #[arg(long, value_name = "FILE", conflicts_with = "initiator")]
    group: Option<PathBuf>,
    /// With --group: the member that starts the run (its default control socket).
    #[arg(long, value_name = "ID", requires = "group", conflicts_with = "live")]
    id: Option<u32>,
    /// With --group: read the group's live MST (`group serve --mst-live`, built as the group
    /// file's `[mst] build` says) from every member instead of running GHS, once every member
    /// holds the tree (see the module docs).
    #[arg(long, requires = "group")]
    live: bool,
    /// With --live: wait at most this many seconds for every member to hold the tree.
    #[arg(long, value_name = "S", default_value_t = 60.0, requires = "live")]
    wait: f64,
    /// With --live: first set the live weight of one link at its owner, the smaller end
    /// (`LO-HI=W`, in the group's metric), whatever that member's forecasts say from now on;
    /// it is fed at the member's next check (`[mst] check_every = 0`: its next forecast).
    #[arg(long, value_name = "LO-HI=W", requires = "live")]
    set_weight: Option<String>,
    /// With --live: wait for a repair instead of the build: every member holding the tree of
    /// one epoch later than E (of --after-generation's generation, or of a later one: a
    /// rebuild for a backlog of changes), with no repair running or waiting anywhere, for
    /// --settle s.
    #[arg(long, value_name = "E", requires = "live")]
    after_epoch: Option<u32>,
    /// With --after-epoch: the generation of that epoch (default 0).
    #[arg(long, value_name = "G", default_value_t = 0, requires = "after_epoch")]
    after_generation: u32,
    /// With --live: wait until every member holds the tree of one epoch with no repair running
    /// or waiting anywhere, for this many seconds (3 with --after-epoch, else not waited for).
    #[arg(long, value_name = "S", requires = "live")]
    settle: Option<f64>,
    /// With --after-epoch: when the change happened, Unix seconds (default: when this command
    /// started); the repair's times are counted from it.
    #[arg(long, value_name = "UNIX_S", requires = "after_epoch")]
    since: Option<f64>,
    /// What the weights measure: latency (one-way, ms) or inverse-bandwidth (ms per MB, the
    /// maximum-bottleneck tree for large messages).
    #[arg(long, value_name = "METRIC", default_value = "latency")]
    metric: MstMetric,
    /// The member that starts the run.
    #[arg(long, value_name = "NODE", default_value_t = 0)]
    initiator: u32,
    /// Every node Tests up to K of its edges at once (1: classic GHS, one Test at a time).
    #[arg(long, value_name = "K", default_value_t = DEFAULT_TEST_WINDOW,
          value_parser = clap::value_parser!(u32).range(1..))]
    test_window: u32,
    /// How the tree is built: ghs (the `mst` collective run by Hosts) or rows (every node
    /// sends its row of weights to every other and computes the tree; run in the
    /// message-delay model beside GHS in the same model, see the module docs).
    #[arg(long, value_name = "BUILD", default_value = "ghs")]
    build: BuildAlgorithm,
    /// JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Latency assumed on every link of a bandwidth cost file, s.
const BANDWIDTH_FILE_LATENCY_S: f64 = 1e-3;
/// Capacity assumed on every link of a latency cost file, bytes/s (100 Mbit/s).
const LATENCY_FILE_BYTES_S: f64 = 12.5e6;

/// One edge of the tree, weight in the report's unit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct TreeEdge {
    pub a: u32,
    pub b: u32,
    pub weight: f64,
}

/// What a simulated run gives.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MstRun {
    pub nodes: u32,
    pub metric: String,
    /// The unit of the weights shown: `ms` or `ms/MB`.
    pub unit: &'static str,
    /// The tree, lightest first.
    pub edges: Vec<TreeEdge>,
    /// The total every node learnt with the end, in `unit`.
    pub total: f64,
    /// Tests each node keeps waiting at once (1: classic GHS).
    pub test_window: u32,
    /// GHS frames by kind (`ghs_connect` ... `ghs_done`).
    pub frames: BTreeMap<String, u64>,
    pub frames_total: u64,
    /// The bound for the classic kinds (`ghs_done` is not in it): `5 n log2 n + 2 e` with a
    /// window of 1, `(3 n + 2 n min(K, n - 1)) log2 n + 4 e` with a window of K.
    pub message_bound: f64,
    /// On a group: the member whose frames these are (None: every node's, simulated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_of: Option<u32>,
    /// First GHS frame sent, and the last node learning the end, simulated seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_frame_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_end_s: Option<f64>,
    /// Simulated: first frame to the last end; on a group: request to completion at the
    /// initiator, wall seconds.
    pub build_s: f64,
    /// Message delays on the chain that ended the build (see the module docs; simulated only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<u32>,
    /// GHS's time bound in message delays, `5 n log2 n`.
    pub time_bound: f64,
}

/// Runs `windrose mst`.
pub fn run(a: MstArgs) -> Result<()> {
    if let (Some(g), true) = (&a.group, a.live) {
        if !(a.wait.is_finite() && a.wait > 0.0) {
            return Err(bad_input(format!(
                "--wait {}: expected a number of seconds > 0",
                a.wait
            )));
        }
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if let Some(sw) = &a.set_weight {
            let (lo, hi, w) = parse_set_weight(sw)?;
            let group = load_group(g).or_bad_input()?;
            set_live_weight(&group, lo, hi, w)?;
        }
        let settle = a.settle.or(a.after_epoch.map(|_| 3.0));
        let repair = match settle {
            Some(settle) => {
                if !(settle.is_finite() && settle >= 0.0) {
                    return Err(bad_input(format!(
                        "--settle {settle}: expected a number of seconds >= 0"
                    )));
                }
                if let Some(t) = a.since.filter(|t| !t.is_finite()) {
                    return Err(bad_input(format!("--since {t}: expected Unix seconds")));
                }
                Some(RepairWait {
                    after: a.after_epoch.map(|e| (a.after_generation, e)),
                    settle: std::time::Duration::from_secs_f64(settle.min(3_600.0)),
                    since_unix_s: a.since.unwrap_or(started),
                })
            }
            None => None,
        };
        let r = live_build(
            g,
            std::time::Duration::from_secs_f64(a.wait.min(86_400.0)),
            repair,
        )?;
        if a.json {
            return print_json(&r);
        }
        return print(&render_live(&r, g));
    }
    if let (Some(_), None) = (&a.group, a.id) {
        return Err(bad_input(
            "--group needs --id N (the member that runs GHS) or --live (the live MST)",
        ));
    }
    if let (Some(g), Some(id)) = (&a.group, a.id) {
        if a.build == BuildAlgorithm::Rows {
            return Err(bad_input(
                "--build rows runs on --scenario or --costs (a running group's live MST, `group serve --mst-live`, builds as its group file's [mst] build says; `mst --group FILE --live` shows it)",
            ));
        }
        let r = on_group(g, id, a.metric, a.test_window)?;
        if a.json {
            return print_json(&r);
        }
        return print(&render(
            &r,
            &format!("group {}, started by member {id}", g.display()),
        ));
    }
    let (platform, source) = match (&a.scenario, &a.costs) {
        (Some(p), _) => (
            load_scenario(p).or_bad_input()?.platform,
            format!("scenario {}", p.display()),
        ),
        (None, Some(p)) => (
            platform_of_costs(&crate::input::costs(Some(p))?.model)
                .with_context(|| format!("--costs {}", p.display()))?,
            format!("cost file {}", p.display()),
        ),
        (None, None) => {
            return Err(bad_input(
                "give --scenario FILE, --costs FILE or --group FILE --id N",
            ))
        }
    };
    if a.initiator as usize >= platform.node_count() {
        return Err(bad_input(format!(
            "--initiator {}: the network has nodes 0..{}",
            a.initiator,
            platform.node_count().saturating_sub(1)
        )));
    }
    if a.build == BuildAlgorithm::Rows {
        let r = model_builds(&platform, a.metric, &[1, a.test_window])?;
        if a.json {
            return print_json(&r);
        }
        return print(&render_model(&r, &source));
    }
    let r = simulate(platform, a.metric, NodeId(a.initiator), a.test_window)?;
    if a.json {
        return print_json(&r);
    }
    print(&render(&r, &source))
}

/// One build in the message-delay model.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ModelBuild {
    /// `rows` or `ghs`.
    pub build: MstBuild,
    /// GHS's test window (None for rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_window: Option<u32>,
    /// Start (every node at 0) to the last node knowing the end, s.
    pub build_s: f64,
    /// Message delays on the chain that ended it.
    pub chain: u32,
    /// Frames by kind (`row`, `hello`, GHS's kinds).
    pub frames: BTreeMap<String, u64>,
    pub frames_total: u64,
    /// Bytes of those frames (header, fixed fields, a row's payload).
    pub bytes: u64,
}

/// The rows build and the live MST's GHS builds in the message-delay model.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ModelRuns {
    pub nodes: u32,
    pub metric: String,
    pub unit: &'static str,
    /// The tree every build ended at (the central MST), lightest first.
    pub edges: Vec<TreeEdge>,
    pub total: f64,
    pub builds: Vec<ModelBuild>,
}

/// The rows build, then the live MST's GHS build with each test window of `windows` (Hellos,
/// then GHS), every node woken at 0 and every frame taking its link's latency; each checked
/// against the central MST.
pub(crate) fn model_builds(
    platform: &Platform,
    metric: MstMetric,
    windows: &[u32],
) -> Result<ModelRuns> {
    let n = platform.node_count();
    let (spec, unit, factor) = weights(platform, metric)?;
    let mut w = vec![vec![0.0; n]; n];
    for &(a, b, x) in &spec.edges {
        w[a.index()][b.index()] = x;
        w[b.index()][a.index()] = x;
    }
    let lat = PlatformCosts::latency_ms(platform);
    let central = central_mst(&w)?;
    let mut builds = Vec::new();
    let mut total = 0.0;
    let mut algos = vec![(BuildAlgorithm::Rows, None)];
    let mut ks: Vec<u32> = windows.to_vec();
    ks.dedup();
    algos.extend(ks.into_iter().map(|k| (BuildAlgorithm::Ghs, Some(k))));
    for (algo, k) in algos {
        let nodes = (0..n)
            .map(|a| {
                let row = (0..n)
                    .filter(|&b| b != a)
                    .map(|b| (NodeId::from(b), w[a][b]));
                MaintainedMst::gathering(NodeId::from(a), row)
                    .and_then(|m| m.with_test_window(k.unwrap_or(1)))
                    .map(|m| m.with_build(algo))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut run = TimedRun::new(
            nodes,
            |a: NodeId, b: NodeId| {
                if a == b {
                    0.0
                } else {
                    lat.cost(a, b) / 1e3
                }
            },
        );
        run.wake_all();
        let span = run.run().map_err(anyhow::Error::msg)?;
        let mut got = Vec::new();
        for m in run.nodes() {
            let me = m.node().0;
            let mm = m
                .maintainer()
                .with_context(|| format!("{algo}: node {me} did not build"))?;
            total = mm.totals().1;
            got.extend(
                mm.branch_edges()
                    .into_iter()
                    .filter(|(to, _)| to.0 > me)
                    .map(|(to, _)| (me, to.0)),
            );
        }
        got.sort_unstable();
        if got != central {
            bail!("the {algo} build gave {got:?}, the central MST is {central:?}");
        }
        builds.push(ModelBuild {
            build: match algo {
                BuildAlgorithm::Rows => MstBuild::Rows,
                BuildAlgorithm::Ghs => MstBuild::Ghs,
            },
            test_window: k,
            build_s: span.seconds(),
            chain: span.chain,
            frames_total: span.messages(),
            frames: span
                .by_kind
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            bytes: span.bytes,
        });
    }
    Ok(ModelRuns {
        nodes: n as u32,
        metric: metric.to_string(),
        unit,
        edges: tree_edges(
            central
                .iter()
                .map(|&(a, b)| ((a, b), w[a as usize][b as usize])),
            factor,
        ),
        total: total * factor,
        builds,
    })
}

/// A group's live MST build, read from every member ([`MstArgs::live`]).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LiveBuild {
    pub group: String,
    pub members: u32,
    /// The group file's `[mst] build`, and what it means for this many members.
    pub setting: MstBuild,
    pub build: MstBuild,
    pub generation: u32,
    /// The epoch every member holds (0: the build; each repair adds one).
    pub epoch: u32,
    /// Wall clock, Unix seconds: the first member's start (its first row or Hello), the last
    /// member's start, the last member knowing the tree.
    pub first_start_unix_s: f64,
    pub last_start_unix_s: f64,
    pub last_end_unix_s: f64,
    /// First start to the last member knowing the tree, s.
    pub build_s: f64,
    /// Last start to the last member knowing the tree, s.
    pub after_last_start_s: f64,
    /// The members' `mst_*` frames by kind: (frames, encoded bytes), since they started.
    pub frames: BTreeMap<String, (u64, u64)>,
    pub frames_total: u64,
    pub bytes_total: u64,
    /// The tree every member holds, `(lo, hi)` in id order.
    pub tree: Vec<(u32, u32)>,
    /// Every member was idle (no repair running or waiting) and the tree was checked to be the
    /// MST of the weights the members hold (each link's weight at its smaller end), by Kruskal
    /// in GHS's order; a difference is an error.
    pub checked_mst_of_held_weights: bool,
    /// The tree's total on those weights.
    pub total: f64,
    /// With --after-epoch: the repair waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<LiveRepair>,
    /// Each member's repair counters, by id: what it fed per link and its requests.
    pub feeds: Vec<MemberFeeds>,
    /// Epochs and backlog rebuilds the roots started, every generation since the start.
    pub epochs_total: u64,
    pub rebuilds_total: u64,
}

/// One member's repair counters in a [`LiveBuild`].
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MemberFeeds {
    pub id: u32,
    /// Requests fed, merged, sent, received, queued and epochs started this generation.
    pub requests: windrose_proto::ghs_repair::RequestStats,
    /// Per owned link fed: `(peer, count, the last (wall clock, weight) fed)`.
    pub links: Vec<crate::group_cmd::LinkFedView>,
}

/// A settled tree waited for ([`MstArgs::settle`]), past an epoch ([`MstArgs::after_epoch`]).
#[derive(Clone, Debug)]
struct RepairWait {
    /// `(generation, epoch)`.
    after: Option<(u32, u32)>,
    settle: std::time::Duration,
    since_unix_s: f64,
}

/// The repair a live read waited for: every member at `epoch`, from the change to the last
/// member holding that epoch's tree.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LiveRepair {
    pub after_epoch: u32,
    pub after_generation: u32,
    /// Generations since (rebuilds for a backlog of changes, or after failures).
    pub generations: u32,
    /// Epochs (repairs) since `after_epoch`, or in the last generation if there were
    /// rebuilds (every generation's: [`LiveBuild::epochs_total`]).
    pub epochs: u32,
    /// The change (--since), the first change a member fed at or after it, and the last member
    /// first holding the final epoch's tree, Unix seconds (wall clock).
    pub since_unix_s: f64,
    pub first_fed_unix_s: Option<f64>,
    pub last_stable_unix_s: f64,
    /// The change to the last member holding the repaired tree, s.
    pub from_change_s: f64,
    /// The first feed to the last member holding the repaired tree, s.
    pub from_first_fed_s: Option<f64>,
}

/// Kruskal in GHS's order `(w, lo, hi)` over the weights the members hold (each link at its
/// smaller end): the unique MST of those weights, `(lo, hi)` sorted, and its total.
fn mst_of_held(views: &[(u32, LiveMstView)]) -> (Vec<(u32, u32)>, f64) {
    let mut edges: Vec<(f64, u32, u32)> = views
        .iter()
        .flat_map(|(id, v)| v.weights.iter().map(move |&(p, w)| (w, *id, p)))
        .collect();
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then((x.1, x.2).cmp(&(y.1, y.2))));
    let mut up: BTreeMap<u32, u32> = views.iter().map(|(id, _)| (*id, *id)).collect();
    fn find(up: &mut BTreeMap<u32, u32>, mut x: u32) -> u32 {
        while let Some(&p) = up.get(&x).filter(|&&p| p != x) {
            x = p;
        }
        x
    }
    let (mut tree, mut total) = (Vec::new(), 0.0);
    for (w, a, b) in edges {
        if !up.contains_key(&b) {
            continue;
        }
        let (ra, rb) = (find(&mut up, a), find(&mut up, b));
        if ra != rb {
            up.insert(ra, rb);
            tree.push((a, b));
            total += w;
        }
    }
    tree.sort_unstable();
    (tree, total)
}

/// What one look at the members shows, for the wait: `None` until every member holds the
/// tree of one generation (and, waiting for a repair, one epoch past it with every member
/// idle).
fn settled_at(
    views: &[(u32, Option<LiveMstView>)],
    repair: Option<&RepairWait>,
) -> Option<(u32, u32)> {
    let mut at = None;
    for (_, v) in views {
        let v = v.as_ref()?;
        v.built_unix_s?;
        v.tree.as_ref()?;
        let here = (v.generation, if repair.is_some() { v.epoch } else { 0 });
        if *at.get_or_insert(here) != here {
            return None;
        }
        if let Some(r) = repair {
            if r.after.is_some_and(|e| (v.generation, v.epoch) <= e) || !v.idle {
                return None;
            }
        }
    }
    at
}

/// A settled look at the members: its `(generation, epoch)`, every member's tree, and since when.
type Steady = ((u32, u32), Vec<Option<Vec<(u32, u32)>>>, std::time::Instant);

/// Waits until every member of the group at `path` holds its live MST (of one generation;
/// with `repair`, of one epoch past its `after_epoch`, every member idle for its settle time),
/// then gathers the build from their views; an error names the members that did not get there
/// within `wait`, or that hold another tree, or a tree that is not the MST of their weights.
fn live_build(
    path: &Path,
    wait: std::time::Duration,
    repair: Option<RepairWait>,
) -> Result<LiveBuild> {
    let group = load_group(path).or_bad_input()?;
    let deadline = std::time::Instant::now() + wait;
    // The state seen settled, and since when.
    let mut steady: Option<Steady> = None;
    let views = loop {
        // Members still starting do not answer yet: ask again until the deadline.
        let views = match live_msts(&group) {
            Ok(v) => v,
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if let Some((id, _)) = views.iter().find(|(_, v)| v.is_none()) {
            if std::time::Instant::now() >= deadline {
                return Err(bad_input(format!(
                    "member {id} of group {} keeps no live MST: serve every member with \
                     `group serve --mst-live` (the metric and policy are the group file's `[mst]` table)",
                    group.name()
                )));
            }
        }
        // Members that disagree on the tree are mid-repair (a `Stable` wave reaches them one
        // after another): not settled yet, ask again.
        let trees: Vec<_> = views
            .iter()
            .map(|(_, v)| {
                v.as_ref().and_then(|v| v.tree.clone()).map(|mut t| {
                    t.sort_unstable();
                    t
                })
            })
            .collect();
        let agree = trees.windows(2).all(|w| w[0] == w[1]);
        if let Some(at) = settled_at(&views, repair.as_ref()).filter(|_| agree) {
            let settle = repair
                .as_ref()
                .map_or(std::time::Duration::ZERO, |r| r.settle);
            match &steady {
                Some((a, t, since)) if *a == at && *t == trees => {
                    if since.elapsed() >= settle {
                        break views;
                    }
                }
                _ => steady = Some((at, trees.clone(), std::time::Instant::now())),
            }
            if settle.is_zero() {
                break views;
            }
        } else {
            steady = None;
        }
        if std::time::Instant::now() >= deadline {
            let missing: Vec<u32> = views
                .iter()
                .filter(|(_, v)| {
                    v.as_ref()
                        .is_none_or(|v| v.built_unix_s.is_none() || v.tree.is_none())
                })
                .map(|(id, _)| *id)
                .collect();
            let at: std::collections::BTreeSet<(u32, u32, bool)> = views
                .iter()
                .filter_map(|(_, v)| v.as_ref().map(|v| (v.generation, v.epoch, v.idle)))
                .collect();
            let held = if agree {
                String::new()
            } else {
                format!("; trees held, in member order: {trees:?}")
            };
            bail!(
                "after {:.1} s, members {missing:?} of group {} do not hold the live MST yet, \
                 or the members do not agree{} ((generation, epoch, idle) seen: {at:?}){held}",
                wait.as_secs_f64(),
                group.name(),
                repair.as_ref().map_or(String::new(), |r| format!(
                    " on an epoch{} with every member idle for {:.1} s",
                    r.after.map_or(String::new(), |(g, e)| format!(
                        " past {e} of generation {g}"
                    )),
                    r.settle.as_secs_f64()
                ))
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let views: Vec<(u32, LiveMstView)> = views
        .into_iter()
        .map(|(id, v)| (id, v.expect("checked above")))
        .collect();
    let (first, tree) = (&views[0].1, views[0].1.tree.clone().unwrap_or_default());
    for (id, v) in &views {
        let mut t = v.tree.clone().unwrap_or_default();
        t.sort_unstable();
        let mut want = tree.clone();
        want.sort_unstable();
        if t != want {
            bail!(
                "member {id} holds the tree {t:?}, member {} holds {want:?}",
                views[0].0
            );
        }
    }
    let mut tree = tree;
    tree.sort_unstable();
    // Checked when nothing moves: mid-repair the ends of a link may hold different weights.
    let idle = views.iter().all(|(_, v)| v.idle && v.epoch == first.epoch);
    let (want, total) = mst_of_held(&views);
    if idle && want != tree {
        bail!(
            "the tree every member holds is not the MST of the weights they hold: holds {tree:?}, \
             Kruskal gives {want:?}"
        );
    }
    let starts: Vec<f64> = views.iter().filter_map(|(_, v)| v.started_unix_s).collect();
    let ends: Vec<f64> = views.iter().filter_map(|(_, v)| v.built_unix_s).collect();
    let first_start = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let last_start = starts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let last_end = ends.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut frames: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (_, v) in &views {
        for (k, (f, b)) in &v.frames {
            let e = frames.entry(k.clone()).or_default();
            e.0 += f;
            e.1 += b;
        }
    }
    let repair =
        repair
            .and_then(|r| Some((r.after?, r)))
            .map(|((after_generation, after_epoch), r)| {
                let last_stable = views
                    .iter()
                    .filter_map(|(_, v)| v.stable_unix_s)
                    .fold(f64::NEG_INFINITY, f64::max);
                let first_fed = views
                    .iter()
                    .flat_map(|(_, v)| v.fed_unix_s.iter().copied())
                    .filter(|&t| t >= r.since_unix_s)
                    .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t))));
                LiveRepair {
                    after_epoch,
                    after_generation,
                    generations: first.generation - after_generation,
                    epochs: if first.generation == after_generation {
                        first.epoch - after_epoch
                    } else {
                        first.epoch
                    },
                    since_unix_s: r.since_unix_s,
                    first_fed_unix_s: first_fed,
                    last_stable_unix_s: last_stable,
                    from_change_s: last_stable - r.since_unix_s,
                    from_first_fed_s: first_fed.map(|f| last_stable - f),
                }
            });
    let n = views.len();
    Ok(LiveBuild {
        group: group.name().to_string(),
        members: n as u32,
        setting: first.build,
        build: match first.build.algorithm(n) {
            BuildAlgorithm::Rows => MstBuild::Rows,
            BuildAlgorithm::Ghs => MstBuild::Ghs,
        },
        generation: first.generation,
        epoch: first.epoch,
        first_start_unix_s: first_start,
        last_start_unix_s: last_start,
        last_end_unix_s: last_end,
        build_s: last_end - first_start,
        after_last_start_s: last_end - last_start,
        frames_total: frames.values().map(|x| x.0).sum(),
        bytes_total: frames.values().map(|x| x.1).sum(),
        frames,
        tree,
        checked_mst_of_held_weights: idle,
        total,
        repair,
        epochs_total: views.iter().map(|(_, v)| v.requests.epochs).sum(),
        rebuilds_total: views.iter().map(|(_, v)| v.requests.rebuilds).sum(),
        feeds: views
            .iter()
            .map(|(id, v)| MemberFeeds {
                id: *id,
                requests: v.requests,
                links: v.fed_links.clone(),
            })
            .collect(),
    })
}

/// `LO-HI=W` of --set-weight.
fn parse_set_weight(s: &str) -> Result<(u32, u32, f64)> {
    let bad = || {
        bad_input(format!(
            "--set-weight {s:?}: expected LO-HI=W (two member ids and a weight >= 0, e.g. 0-3=50)"
        ))
    };
    let (pair, w) = s.split_once('=').ok_or_else(bad)?;
    let (a, b) = pair.split_once('-').ok_or_else(bad)?;
    let (a, b): (u32, u32) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    let w: f64 = w.trim().parse().map_err(|_| bad())?;
    if a == b || !(w.is_finite() && w >= 0.0) {
        return Err(bad());
    }
    Ok((a.min(b), a.max(b), w))
}

fn render_live(r: &LiveBuild, path: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The live MST of group {} ({}, {} members): built by {} ([mst] build = \"{}\"), \
         generation {}, epoch {}",
        r.group,
        path.display(),
        r.members,
        r.build,
        r.setting,
        r.generation,
        r.epoch
    );
    let _ = writeln!(
        out,
        "  first start to the last member holding the tree: {:.3} s ({:.3} s after the last \
         start), wall clock",
        r.build_s, r.after_last_start_s
    );
    if let Some(x) = &r.repair {
        let _ = writeln!(
            out,
            "  repaired: epoch {} ({} repairs after epoch {}), the change to the last member \
             holding the tree: {:.3} s{}",
            r.epoch,
            x.epochs,
            x.after_epoch,
            x.from_change_s,
            x.from_first_fed_s.map_or(String::new(), |f| format!(
                " (the first change fed to it: {f:.3} s)"
            ))
        );
    }
    let _ = writeln!(
        out,
        "  {}",
        if r.checked_mst_of_held_weights {
            format!(
                "every member idle: the tree is the MST of the weights they hold (total {})",
                num(r.total)
            )
        } else {
            "a repair runs or waits: the tree is not checked against the weights".to_string()
        }
    );
    let rows: Vec<Vec<String>> = r
        .frames
        .iter()
        .map(|(k, (f, b))| vec![k.clone(), f.to_string(), b.to_string()])
        .chain(std::iter::once(vec![
            "total".into(),
            r.frames_total.to_string(),
            r.bytes_total.to_string(),
        ]))
        .collect();
    out.push_str(
        "
Frames the members sent
",
    );
    for l in vtable(&["kind", "frames", "bytes"], &rows) {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(
        out,
        "
The tree every member holds ({} edges): {}",
        r.tree.len(),
        r.tree
            .iter()
            .map(|(a, b)| format!("{a}-{b}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    out
}

/// Appends the tree's edges, lightest first, as an indented table.
fn tree_table(out: &mut String, edges: &[TreeEdge], unit: &str) {
    let _ = writeln!(out, "\nThe tree ({} edges, lightest first)", edges.len());
    let rows: Vec<Vec<String>> = edges
        .iter()
        .map(|e| vec![format!("{}-{}", e.a, e.b), num(e.weight)])
        .collect();
    for l in vtable(&["edge", &format!("weight, {unit}")], &rows) {
        let _ = writeln!(out, "  {l}");
    }
}

/// Appends the builds as an indented table (build, seconds, delays, frames, bytes); `ghs_note`
/// follows each GHS build's name.
pub(crate) fn builds_table(out: &mut String, builds: &[ModelBuild], ghs_note: &str) {
    let rows: Vec<Vec<String>> = builds
        .iter()
        .map(|b| {
            vec![
                match b.test_window {
                    Some(k) => format!("ghs, test window {k}{ghs_note}"),
                    None => b.build.to_string(),
                },
                format!("{:.3}", b.build_s),
                b.chain.to_string(),
                b.frames_total.to_string(),
                b.bytes.to_string(),
            ]
        })
        .collect();
    for l in vtable(&["build", "s", "delays", "frames", "bytes"], &rows) {
        let _ = writeln!(out, "  {l}");
    }
}

fn render_model(r: &ModelRuns, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The live MST's builds on the complete graph of {} nodes ({source}), weights: {} in {}; \
         message-delay model (every frame takes its link's one-way latency, every node starts at 0)",
        r.nodes, r.metric, r.unit
    );
    tree_table(&mut out, &r.edges, r.unit);
    let _ = writeln!(
        out,
        "  total {} {}; every build below ended at it, the central MST",
        num(r.total),
        r.unit
    );
    out.push_str("\nBuild (start to the last node knowing the end)\n");
    builds_table(&mut out, &r.builds, "");
    out
}

/// A platform of one site per node whose links have the cost file's latencies (or capacities).
fn platform_of_costs(model: &impl LinkCosts) -> Result<Platform> {
    let n = model.node_count();
    let unit = model.unit();
    let mut b = Platform::builder();
    for _ in 0..n {
        b = b.cluster(ClusterSpec::uniform(1, 1e12, 1e12, 0.0));
    }
    for x in 0..n {
        for y in 0..n {
            if x == y {
                continue;
            }
            let c = model.cost(NodeId::from(x), NodeId::from(y));
            let (bytes_s, latency_s) = match unit {
                CostUnit::LatencyMs => (LATENCY_FILE_BYTES_S, c / 1e3),
                CostUnit::BandwidthMbS if c > 0.0 => (c * 1e6, BANDWIDTH_FILE_LATENCY_S),
                CostUnit::BandwidthMbS => {
                    return Err(bad_input(format!(
                        "the link {x}-{y} has bandwidth {c} MB/s: a link needs a capacity > 0"
                    )))
                }
                CostUnit::Hops => {
                    return Err(bad_input(
                        "its unit is hops, which gives no time to simulate: give latency_ms or bandwidth_mb_s",
                    ))
                }
            };
            b = b.wan(ClusterId::from(x), ClusterId::from(y), bytes_s, latency_s);
        }
    }
    b.build().or_bad_input()
}

/// The weights of `metric` between the platform's nodes: (spec, shown unit, factor from the
/// spec's unit to the shown one).
pub(crate) fn weights(
    platform: &Platform,
    metric: MstMetric,
) -> Result<(MstSpec, &'static str, f64)> {
    let n = platform.node_count();
    let (wm, unit, factor, matrix): (_, _, _, Vec<Vec<f64>>) = match metric {
        MstMetric::Latency => {
            let c = PlatformCosts::latency_ms(platform);
            let m = (0..n)
                .map(|a| {
                    (0..n)
                        .map(|b| c.cost(NodeId::from(a), NodeId::from(b)) / 1e3)
                        .collect()
                })
                .collect();
            (WeightMetric::LatencyS, "ms", 1e3, m)
        }
        MstMetric::InverseBandwidth => {
            let c = PlatformCosts::bandwidth_mb_s(platform);
            let m = (0..n)
                .map(|a| {
                    (0..n)
                        .map(|b| match a == b {
                            true => 0.0,
                            false => 1.0 / (c.cost(NodeId::from(a), NodeId::from(b)) * 1e6),
                        })
                        .collect()
                })
                .collect();
            (WeightMetric::InverseBandwidth, "ms/MB", 1e9, m)
        }
    };
    let spec = MstSpec::complete(wm, &matrix).map_err(anyhow::Error::msg)?;
    Ok((spec, unit, factor))
}

/// The GHS frames of a run from the simulator's event log: by kind, the first one's time, and
/// per node the time it learnt the end with the chain's delays (see the module docs).
struct LogStats {
    frames: BTreeMap<String, u64>,
    first_s: Option<f64>,
    ends: BTreeMap<u32, (f64, u32)>,
}

fn log_stats(log: &[u8]) -> Result<LogStats> {
    let mut s = LogStats {
        frames: BTreeMap::new(),
        first_s: None,
        ends: BTreeMap::new(),
    };
    // Delays of the GHS frames in flight per (from, to), FIFO as the links are.
    let mut flight: HashMap<(u32, u32), VecDeque<u32>> = HashMap::new();
    // The delays of the frame each node is handling (0: not a GHS frame).
    let mut handling: HashMap<u32, u32> = HashMap::new();
    for line in std::str::from_utf8(log)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let (t, node) = (
            v["t"].as_f64().context("a log line without a time")?,
            v["node"].as_u64().context("a log line without a node")? as u32,
        );
        let ghs = v["msg"].as_str().filter(|k| k.starts_with("ghs_"));
        let peer = v["peer"].as_u64().map(|p| p as u32);
        match (v["ev"].as_str().unwrap_or(""), ghs, peer) {
            ("send", Some(kind), Some(to)) => {
                *s.frames.entry(kind.to_string()).or_default() += 1;
                s.first_s.get_or_insert(t);
                let d = handling.get(&node).copied().unwrap_or(0) + 1;
                flight.entry((node, to)).or_default().push_back(d);
            }
            ("recv", Some(_), Some(from)) => {
                let d = flight
                    .get_mut(&(from, node))
                    .and_then(VecDeque::pop_front)
                    .context("a GHS frame received that was never sent")?;
                handling.insert(node, d);
            }
            ("deliver", ..) => {
                let d = handling.get(&node).copied().unwrap_or(0);
                s.ends.entry(node).or_insert((t, d));
            }
            // Outputs of the input being handled.
            ("send" | "report" | "finished" | "set_timer" | "cancel_timer", ..) => {}
            _ => {
                handling.insert(node, 0);
            }
        }
    }
    Ok(s)
}

/// The `mst` collective on the complete graph of `platform`'s nodes, weighed by `metric`,
/// started by `initiator`, run by Hosts in the simulator.
pub(crate) fn simulate(
    platform: Platform,
    metric: MstMetric,
    initiator: NodeId,
    test_window: u32,
) -> Result<MstRun> {
    let n = platform.node_count();
    let (mut spec, unit, factor) = weights(&platform, metric)?;
    spec.test_window = test_window;
    let central = central_of_spec(&spec, n)?;
    let edge_count = spec.edges.len();
    let config = SimConfig {
        record_deliveries: true,
        strict: true,
        ..SimConfig::default()
    };
    // No heartbeats: nothing fails, and the run ends when the collective has.
    let mut sim = group(platform, config, 0, |c| c.heartbeat = None)?;
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    sim.input_at(
        initiator,
        0.0,
        start_input(CollectiveSpec::Mst(spec), Bytes::new(), None),
    )?;
    let m = sim.run()?;
    if !m.errors.is_empty() {
        bail!("{}", failed_run(&m.errors));
    }
    let transfer = m
        .completions(initiator)
        .find(|c| c.is_whole(n))
        .context("the MST run did not complete at every member")?
        .transfer;
    let mut edges: BTreeMap<(u32, u32), f64> = BTreeMap::new();
    let mut total = None;
    for v in 0..n as u32 {
        let d = sim.delivered_of(NodeId(v), transfer);
        let [(0, bytes)] = &d[..] else {
            bail!("node {v} delivered {} results", d.len());
        };
        let r = MstResult::parse(bytes).map_err(anyhow::Error::msg)?;
        if *total.get_or_insert(r.total_weight.to_bits()) != r.total_weight.to_bits() {
            bail!("node {v} learnt another total than the others");
        }
        for (to, w) in r.branches {
            edges.insert((v.min(to.0), v.max(to.0)), w);
        }
    }
    let got: Vec<(u32, u32)> = edges.keys().copied().collect();
    if got != central {
        bail!("GHS built {got:?}, the central MST is {central:?}");
    }
    let stats = log_stats(&log.contents())?;
    let (last_end_s, chain) =
        stats
            .ends
            .values()
            .copied()
            .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
    let first_frame_s = stats.first_s.unwrap_or(last_end_s);
    Ok(MstRun {
        nodes: n as u32,
        metric: metric.to_string(),
        unit,
        edges: tree_edges(edges, factor),
        total: f64::from_bits(total.unwrap_or(0)) * factor,
        frames_total: stats.frames.values().sum(),
        frames: stats.frames,
        frames_of: None,
        test_window,
        message_bound: complete_bound(n, edge_count, test_window),
        first_frame_s: Some(first_frame_s),
        last_end_s: Some(last_end_s),
        build_s: last_end_s - first_frame_s,
        chain: Some(chain),
        time_bound: ghs_time_bound(n),
    })
}

/// The message bound of a run with this test window on the complete graph of `n` nodes.
fn complete_bound(n: usize, e: usize, test_window: u32) -> f64 {
    ghs_window_message_bound(std::iter::repeat_n(n.saturating_sub(1), n), e, test_window)
}

/// A tree's `(lo, hi) -> weight` edges in the report's unit, lightest first.
fn tree_edges(edges: impl IntoIterator<Item = ((u32, u32), f64)>, factor: f64) -> Vec<TreeEdge> {
    let mut edges: Vec<TreeEdge> = edges
        .into_iter()
        .map(|((a, b), w)| TreeEdge {
            a,
            b,
            weight: w * factor,
        })
        .collect();
    edges.sort_by(|x, y| {
        x.weight
            .total_cmp(&y.weight)
            .then((x.a, x.b).cmp(&(y.a, y.b)))
    });
    edges
}

/// The weights of a group's links from its members' measurements ([`MeasuredLink`]; see the
/// module docs): the member ids in group order and the symmetric matrix over them in the
/// spec's unit (s or s/byte), with the shown unit and the factor to it.
fn group_weights(
    ids: &[u32],
    links: &[MeasuredLink],
    metric: MstMetric,
) -> Result<(Vec<Vec<f64>>, WeightMetric, &'static str, f64)> {
    let n = ids.len();
    let ends = |a: u32, b: u32| {
        links
            .iter()
            .filter(move |l| (l.member, l.peer) == (a, b) || (l.member, l.peer) == (b, a))
    };
    let mut w = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            let (a, b) = (ids[i], ids[j]);
            let x = match metric {
                MstMetric::Latency => {
                    let rtts: Vec<f64> = ends(a, b).filter_map(|l| l.rtt_ms).collect();
                    if rtts.is_empty() {
                        return Err(bad_input(format!("link {a}-{b}: neither end has measured a round trip yet (the members' probers measure every link within seconds of their start: try again)")));
                    }
                    rtts.iter().sum::<f64>() / rtts.len() as f64 / 2.0 / 1e3
                }
                MstMetric::InverseBandwidth => {
                    let mb_s = ends(a, b)
                        .filter_map(|l| l.mb_s)
                        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
                    match mb_s {
                        Some(x) if x > 0.0 => 1.0 / (x * 1e6),
                        _ => return Err(bad_input(format!("link {a}-{b}: neither end has measured its bandwidth yet (sends of several MB measure it: run a broadcast over it first, or use --metric latency)"))),
                    }
                }
            };
            (w[i][j], w[j][i]) = (x, x);
        }
    }
    Ok(match metric {
        MstMetric::Latency => (w, WeightMetric::LatencyS, "ms", 1e3),
        MstMetric::InverseBandwidth => (w, WeightMetric::InverseBandwidth, "ms/MB", 1e9),
    })
}

/// `windrose mst --group G --id I` (see the module docs).
fn on_group(path: &Path, id: u32, metric: MstMetric, test_window: u32) -> Result<MstRun> {
    let group =
        load_group(path).map_err(|e| bad_input(format!("--group {}: {e}", path.display())))?;
    let ids: Vec<u32> = group.members().iter().map(|m| m.id.0).collect();
    if !ids.contains(&id) {
        return Err(bad_input(format!(
            "--id {id}: no such member in {} (members {ids:?})",
            path.display()
        )));
    }
    let (w, wm, unit, factor) = group_weights(&ids, &measured_links(&group)?, metric)?;
    let spec = MstSpec {
        metric: wm,
        edges: (0..ids.len())
            .flat_map(|i| (i + 1..ids.len()).map(move |j| (i, j)))
            .map(|(i, j)| (NodeId(ids[i]), NodeId(ids[j]), w[i][j]))
            .collect(),
        test_window,
    };
    let edge_count = spec.edges.len();
    let n = ids.len();
    let central: Vec<(usize, usize)> = central_mst(&w)?
        .into_iter()
        .map(|(a, b)| (a as usize, b as usize))
        .collect();
    let socket = running_member(&group, id).ok_or_else(|| {
        bad_input(format!(
            "member {id} of {} is not running here",
            path.display()
        ))
    })?;
    let r = run_mst(&socket, spec)?;
    if r.failed > 0 || r.finished < n as u32 {
        bail!(
            "the MST run ended with {} of {n} members finished, {} failed",
            r.finished,
            r.failed
        );
    }
    let own = r
        .view
        .result
        .as_ref()
        .context("the initiator delivered no MST result")?;
    // Every member's part of the central tree, in GHS's order, with the total the initiator
    // learnt: what each must have delivered, bit for bit.
    for (v, &vid) in ids.iter().enumerate() {
        let mut branches: Vec<(NodeId, f64)> = central
            .iter()
            .filter_map(|&(a, b)| match (a == v, b == v) {
                (true, _) => Some(b),
                (_, true) => Some(a),
                _ => None,
            })
            .map(|u| (NodeId(ids[u]), w[v][u]))
            .collect();
        branches.sort_by_key(|&(u, x)| EdgeKey::new(NodeId(vid), u, x));
        let want = MstResult {
            nodes: n as u32,
            total_weight: own.total,
            branches,
        };
        let want = blake3::hash(&want.encode()).to_hex().to_string();
        match r.digests.get(&vid) {
            Some(Some(got)) if *got == want => {}
            Some(Some(_)) => bail!("member {vid} delivered another tree (or total) than the central MST of the measured weights"),
            _ => bail!("member {vid} reported no digest of its MST result"),
        }
    }
    let frames = r.view.frames.clone();
    Ok(MstRun {
        nodes: n as u32,
        metric: metric.to_string(),
        unit,
        edges: tree_edges(
            central.iter().map(|&(a, b)| {
                let (x, y) = (ids[a].min(ids[b]), ids[a].max(ids[b]));
                ((x, y), w[a][b])
            }),
            factor,
        ),
        total: own.total * factor,
        frames_total: frames.values().sum(),
        frames,
        frames_of: Some(id),
        test_window,
        message_bound: complete_bound(n, edge_count, test_window),
        first_frame_s: None,
        last_end_s: None,
        build_s: r.seconds,
        chain: None,
        time_bound: ghs_time_bound(n),
    })
}

/// The central MST of the spec's weights (windrose-trees' Prim, GHS's order), `(lo, hi)` edges.
fn central_of_spec(spec: &MstSpec, n: usize) -> Result<Vec<(u32, u32)>> {
    let mut w = vec![vec![0.0; n]; n];
    for &(a, b, x) in &spec.edges {
        w[a.index()][b.index()] = x;
        w[b.index()][a.index()] = x;
    }
    central_mst(&w)
}

/// The central MST of a symmetric weight matrix (windrose-trees' Prim, GHS's order).
pub(crate) fn central_mst(w: &[Vec<f64>]) -> Result<Vec<(u32, u32)>> {
    let costs = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, w.len(), |a, b| w[a][b]);
    Ok(tree_pairs(&TreeAlgorithm::Mst.build(
        &costs,
        None,
        NodeId(0),
    )?))
}

/// A tree's edges as `(lo, hi)`, sorted.
pub(crate) fn tree_pairs(t: &Tree) -> Vec<(u32, u32)> {
    let mut e: Vec<(u32, u32)> = t
        .edges()
        .iter()
        .map(|&(a, b)| (a.0.min(b.0), a.0.max(b.0)))
        .collect();
    e.sort_unstable();
    e
}

fn render(r: &MstRun, source: &str) -> String {
    let mut out = String::new();
    let how = match r.frames_of {
        None => "simulated, Hosts",
        Some(_) => "measured by the members",
    };
    let _ = writeln!(
        out,
        "GHS on the complete graph of {} nodes ({source}), weights: {} in {}; {how}; test window {}{}",
        r.nodes,
        r.metric,
        r.unit,
        r.test_window,
        if r.test_window == 1 { " (classic)" } else { "" }
    );
    tree_table(&mut out, &r.edges, r.unit);
    let _ = writeln!(
        out,
        "  total {} {} (every node learnt it with the end); the central MST has the same edges",
        num(r.total),
        r.unit
    );
    match r.frames_of {
        None => out.push_str("\nGHS frames by kind\n"),
        Some(id) => {
            let _ = writeln!(out, "\nGHS frames by kind, sent by member {id}");
        }
    }
    let rows: Vec<Vec<String>> = r
        .frames
        .iter()
        .map(|(k, v)| vec![k.clone(), v.to_string()])
        .collect();
    for l in vtable(&["kind", "frames"], &rows) {
        let _ = writeln!(out, "  {l}");
    }
    let bound = match r.test_window {
        1 => "GHS's bound 5 n log2 n + 2 e".to_string(),
        k => format!("the bound with test window {k}, (3 n + 2 n min({k}, n - 1)) log2 n + 4 e"),
    };
    let _ = writeln!(
        out,
        "  {} in all; {bound} = {:.0} (for the classic kinds, without ghs_done)",
        r.frames_total, r.message_bound
    );
    match (r.first_frame_s, r.last_end_s, r.chain) {
        (Some(first), Some(last), Some(chain)) => {
            let _ = writeln!(
                out,
                "\nBuild: first GHS frame at {first:.3} s, the last node knew the end at {last:.3} s: {:.3} s simulated;\n\
                 {chain} message delays on the chain that ended it (GHS's bound: 5 n log2 n = {:.0})",
                r.build_s, r.time_bound
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "\nBuild: {:.3} s at member {}, from its request to every member's report (the session's start included)",
                r.build_s,
                r.frames_of.unwrap_or(0)
            );
        }
    }
    out
}

/// A failed simulated run's errors for the user, one per line.
fn failed_run(errors: &[ErrorRecord]) -> String {
    let mut s = format!("the simulated run failed ({} errors):", errors.len());
    for e in errors {
        let _ = write!(s, "\n  {e}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_failed_run_lists_its_errors_one_per_line() {
        let e = |at_s, node, peer: Option<u32>, error: &str| ErrorRecord {
            at_s,
            node: NodeId(node),
            peer: peer.map(NodeId),
            error: error.to_string(),
        };
        let text = failed_run(&[
            e(0.25, 3, Some(5), "bad frame"),
            e(1.0, 4, None, "send to itself"),
        ]);
        assert_eq!(
            text,
            "the simulated run failed (2 errors):\n  at 0.250000000 s, node 3 (peer 5): bad frame\n  \
             at 1.000000000 s, node 4: send to itself"
        );
    }

    fn six_sites() -> Platform {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/scenarios/seed004-six-sites.toml");
        load_scenario(&p).unwrap().platform
    }

    /// The paper's six sites: the distributed build's tree crosses the sites on Table 1's
    /// site MST (758.6 ms), every node learns the end, the counts keep GHS's bounds.
    #[test]
    fn six_sites_build() {
        for window in [1, DEFAULT_TEST_WINDOW] {
            let r = simulate(six_sites(), MstMetric::Latency, NodeId(12), window).unwrap();
            assert_eq!(r.edges.len(), 23);
            assert!((r.total - 758.6).abs() < 1e-9, "{}", r.total);
            assert_eq!(r.frames["ghs_done"], 22);
            let classic = r.frames_total - r.frames["ghs_done"];
            assert!((classic as f64) <= r.message_bound, "window {window}");
            let chain = r.chain.unwrap();
            assert!(chain >= 3 && (chain as f64) <= r.time_bound);
            // The S1-S2 link (364.1 ms) must be found, tested and connected over at least.
            assert!(r.build_s > 3.0 * 0.3641, "{}", r.build_s);
        }
    }

    /// `--build rows`: the six sites' tree by rows in one delay (the slowest link, S2-S5's
    /// 722.9 ms), and the live MST's GHS builds beside it in the same model, slower; the
    /// table names every build; on a group it is refused.
    #[test]
    fn six_sites_rows_model() {
        let r = model_builds(&six_sites(), MstMetric::Latency, &[1, DEFAULT_TEST_WINDOW]).unwrap();
        assert_eq!(r.edges.len(), 23);
        assert!((r.total - 758.6).abs() < 1e-9, "{}", r.total);
        let [rows, k1, k16] = &r.builds[..] else {
            panic!("{:?}", r.builds)
        };
        assert_eq!(
            (rows.build, rows.test_window, rows.chain),
            (MstBuild::Rows, None, 1)
        );
        assert!((rows.build_s - 0.7229).abs() < 1e-6, "{}", rows.build_s);
        // 552 rows of 23 entries: header, generation, 276 payload bytes each.
        assert_eq!(rows.frames_total, 552);
        let header = windrose_proto::frame::HEADER_LEN as u64;
        assert_eq!(rows.bytes, 552 * (header + 4 + 23 * 12));
        assert_eq!(k1.test_window, Some(1));
        assert_eq!(k16.test_window, Some(DEFAULT_TEST_WINDOW));
        assert_eq!(k1.frames["hello"], 552);
        assert!(k16.build_s < k1.build_s && rows.build_s < k16.build_s);
        let text = render_model(&r, "six sites");
        for needle in [
            "rows   0.723",
            "ghs, test window 1 ",
            "ghs, test window 16",
            "total 758.6 ms",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        let e = run(MstArgs {
            scenario: None,
            costs: None,
            group: Some("g.toml".into()),
            id: Some(0),
            live: false,
            wait: 60.0,
            set_weight: None,
            after_epoch: None,
            after_generation: 0,
            settle: None,
            since: None,
            metric: MstMetric::Latency,
            initiator: 0,
            test_window: 1,
            build: BuildAlgorithm::Rows,
            json: false,
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("--build rows runs on --scenario"),
            "{e}"
        );
    }

    /// A latency cost file of three nodes: a path of 1 and 2 ms.
    #[test]
    fn cost_file_platform() {
        let m = DenseCostMatrix::<f64>::from_fn(CostUnit::LatencyMs, 3, |a, b| {
            match (a.min(b), a.max(b)) {
                (0, 1) => 1.0,
                (1, 2) => 2.0,
                _ => 5.0,
            }
        });
        let p = platform_of_costs(&m).unwrap();
        let r = simulate(p, MstMetric::Latency, NodeId(0), DEFAULT_TEST_WINDOW).unwrap();
        let e: Vec<(u32, u32, f64)> = r.edges.iter().map(|e| (e.a, e.b, e.weight)).collect();
        assert_eq!(e, [(0, 1, 1.0), (1, 2, 2.0)]);
        assert_eq!(r.total, 3.0);
        let hops = DenseCostMatrix::<f64>::from_fn(CostUnit::Hops, 3, |_, _| 1.0);
        let e = platform_of_costs(&hops).unwrap_err().to_string();
        assert!(e.contains("hops"), "{e}");
    }
}
