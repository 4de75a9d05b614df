//! `windrose group serve | start | leave`: long-lived group members, and collectives started
//! from any of them.
//!
//! `serve` joins the group as one member (a `Host` driven by `windrose_net::host_driver`) and
//! serves collectives until told to leave (`group leave`, SIGINT or SIGTERM; `--once`: when
//! the first collective it took part in has ended, as `windrose node` does). It listens on a
//! Unix control socket for the applications on its machine: `start` asks it to broadcast,
//! multicast or scatter a file it can read, and waits for every member's report. `windrose
//! bcast | multicast | scatter --group G --id I` start through that socket too when member I
//! of G runs on this machine ([`running_member`]): that is how a collective starts from any
//! member of a running group. Control requests and replies are JSON lines:
//!
//! ```text
//! -> {"broadcast":{"file":"/data/x","tree":"binomial","segment_bytes":1048576}}
//! -> {"multicast":{"file":"/data/x","protocol":"mob","piece_bytes":262144}}
//! -> {"sort":{"sample_sort":{"record_len":100,"oversample":4}}}
//! -> {"scatter":{"file":"/data/x","tree":"binomial","opts":{"hash_mb_s":900.0,...}}}
//!    (without speeds: the member's host plans it from the group's weather, see below)
//! -> "leave"
//! <- {"started":{"transfer":12,"bytes":1048576}}
//! <- {"started":{"transfer":13,"bytes":1048576,"predicted_finish_s":0.02}}  (a scatter)
//! <- {"complete":{"transfer":12,"finished":8,"failed":0,"seconds":0.41}}
//! <- {"complete":{...,"plan":{"predicted_finish_s":0.3,"nodes":[...]}}}  (a calibrated scatter)
//! <- {"error":"..."}
//! ```
//!
//! A scatter started without `--speeds`, `--hash-mb-s` or `--link-mb-s` is calibrated: the
//! member's host plans its schedule from the group's view (every member's measured compute
//! speed, every tree link's measured bandwidth, guesses where nothing was measured;
//! [`windrose_proto::scatter_plan`]), and the result says which speeds the plan took. A
//! speed given for every node or every link replaces the view's; a speeds file is the
//! schedule itself, as `windrose scatter` reads it.
//!
//! What a member receives goes to `--out-dir` as `transfer-<id>` (written under a partial
//! name, `.transfer-<id>.windrose-partial-<pid>-<nonce>`, and renamed when its part of the
//! collective finished), or is hashed and logged. A member killed mid-multicast and served
//! again over the same `--out-dir` is taken back and resumes from every verified piece its
//! earlier life left in that file. `windrose node --once` is this command's one-collective
//! member with `--out FILE` instead ([`NodeOnce`]). A member served with `--sort-input` and `--sort-output` takes part in sorts
//! (`windrose sort --group`, see [`crate::sort_cmd`]): its input file is its share, and its
//! range goes to its output's temporary name, which `windrose sort` renames once the whole set
//! is verified.

use crate::error::bad_input;
use crate::sort_app::{Failed, FinishTimes, PhaseTimes, SortApp};
use received::Received;

mod received;
use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use windrose_model::measurements::LinkMeasurements;
use windrose_model::NodeId;
use windrose_net::bootstrap::Membership;
use windrose_net::group::{load_group, Group};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::outcome::{NodeReport, RunStatus, ShareResult};
use windrose_net::piece_file::OutputShelf;
use windrose_net::trees::group_tree;
use windrose_proto::choice::Choice;
use windrose_proto::collective::{CollectiveSpec, Delivers, MulticastParams, TreeSpec};
use windrose_proto::ghs::{MstResult, MstSpec};
use windrose_proto::host::{AppRequest, AutoRequest, BroadcastRequest, PieceShelf};
use windrose_proto::mob::MobVariant;
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::planner::TreePolicy;
use windrose_proto::scatter::ScatterConfig;
use windrose_proto::scatter_plan::{GivenSpeeds, ScatterRequest};
use windrose_proto::weather::Basis;
use windrose_proto::{Report, TransferId};
use windrose_trees::TreeAlgorithm;

/// `windrose group ...`.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Join a group as one member and serve collectives until told to leave.
    Serve(ServeArgs),
    /// Start a broadcast, multicast or scatter of a file from a running member, and wait for
    /// it.
    Start(StartArgs),
    /// Ask a running member to leave the group (once its collectives have ended).
    Leave(LeaveArgs),
    /// Show a running member's view of its links: the round trips its prober measured and the
    /// forecast of the next one, the bandwidth its sends measured, and every member's compute
    /// speed, per member.
    Weather(WeatherArgs),
}

/// Which member's control socket.
#[derive(Debug, Args)]
pub(crate) struct Via {
    /// The member's control socket (default: derived from --group and --id).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// The group file.
    #[arg(long, value_name = "FILE")]
    group: Option<PathBuf>,
    /// The member's id in the group.
    #[arg(long)]
    id: Option<u32>,
}

impl Via {
    pub(crate) fn socket(&self) -> anyhow::Result<PathBuf> {
        if let Some(p) = &self.control {
            return Ok(p.clone());
        }
        match (&self.group, self.id) {
            (Some(g), Some(id)) => {
                let group = load_group(g).map_err(|e| bad_input(e.to_string()))?;
                Ok(default_socket(&group, id))
            }
            _ => Err(bad_input(
                "say which member: --control PATH, or --group FILE and --id N",
            )),
        }
    }
}

/// `windrose group serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The group file.
    #[arg(long, value_name = "FILE")]
    group: PathBuf,
    /// This member's id.
    #[arg(long)]
    id: u32,
    /// Listen on this address instead of the one the group file gives (which stays the
    /// address the others dial: behind NAT or a cloud's public address).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The control socket (default: windrose-GROUP-ID.sock in the temporary directory).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Write what this member receives to DIR/transfer-ID (default: hash it and log).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Write this member's link measurements (the prober's round-trip series to every other
    /// member, one probe every 500 ms on the probe lane, and the throughput each connection
    /// got) as JSON to FILE when it leaves: the format `windrose bcast --measurements` writes,
    /// with this member's entry only.
    #[arg(long, value_name = "FILE")]
    measurements: Option<PathBuf>,
    /// Send the probes behind the data on the members' one connection instead of on a
    /// connection of their own (to measure what the probe lane saves; they then measure the
    /// queue, not the link).
    #[arg(long)]
    no_probe_lane: bool,
    /// Ping every member this often (seconds). A pong that comes back after the next ping is
    /// not matched, so a link whose round trip is longer than the period is never measured:
    /// across the six sites of seed 004 (round trips up to 1.45 s) give 2.
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    probe_period: f64,
    /// Keep the group's live minimum spanning tree (GHS or rows, then local repairs; the trees
    /// of `start bcast --tree mst-live`), weighed, built and repaired as the group file's
    /// `[mst]` table says (metric, threshold, check_every, min_change, noise, rebuild_after,
    /// build, test_window), so every member runs the same policy. Every member must run it.
    #[arg(long)]
    mst_live: bool,
    #[command(flatten)]
    key: crate::collective_opts::KeyOpts,
    /// This member's share of a sort's records (`windrose sort --group`): a file of 100-byte
    /// records, `{id}` replaced by the member's id.
    #[arg(long, value_name = "PATH", requires = "sort_output")]
    sort_input: Option<String>,
    /// Where this member's sorted range goes (`{id}` replaced by its id), first under a
    /// temporary name that `windrose sort` renames once the whole set is verified.
    #[arg(long, value_name = "PATH", requires = "sort_input")]
    sort_output: Option<String>,
    /// Leave the group once the first collective this member takes part in has ended (what
    /// `windrose node` does); exit 1 when its part of it did not finish.
    #[arg(long)]
    once: bool,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
    /// `windrose node --once`'s own options (set by that command, not flags of this one).
    #[arg(skip)]
    node: Option<NodeOnce>,
}

/// What `windrose node --once` adds to a one-collective member (`group serve --once`): the
/// data to one output file, a time limit for its collective to start, its report printed at
/// the end (a line or JSON) and the seed of its random choices; it has no control socket (it
/// starts nothing) and times no compute (a one-shot scatter is planned by its root).
#[derive(Debug, Clone)]
pub(crate) struct NodeOnce {
    /// Where a broadcast's or multicast's data goes (None: only hashed).
    pub(crate) out: Option<PathBuf>,
    /// Give up when no collective started within this.
    pub(crate) wait: Duration,
    /// Print the report as JSON.
    pub(crate) json: bool,
    /// The seed of this member's random choices (a multicast's piece picks).
    pub(crate) seed: u64,
}

/// `windrose group start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// `bcast` (a tree broadcast), `multicast` (verified pieces), `scatter` (the
    /// divisible-load scatter, every member hashing its share as its compute step) or `auto`
    /// (the member chooses the tree broadcast, MOB or Balanced Multicasting, as `windrose
    /// send`).
    #[arg(value_parser = ["bcast", "multicast", "scatter", "auto"])]
    kind: String,
    #[command(flatten)]
    via: Via,
    /// The file to send (the member must be able to read it).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// Broadcast tree: an algorithm built once on guesses (balanced-path, binomial, magpie,
    /// mst, max-bottleneck, flat, chain), or a policy that plans it from the group's live
    /// weather at every broadcast: `static:ALGO`, `rebuild:ALGO`, `adapt[:STRATEGY[:THRESHOLD]]`
    /// (strategies family, path, leaf, position; `adapt` = adapt:position:0.2), or `mst-live`
    /// (the live MST of members served with `--mst-live`; rebuild:mst until it is built).
    #[arg(long, default_value = "binomial")]
    tree: String,
    /// Multicast protocol: mob, bittorrent, balanced (planned on equal capacities), magpie.
    #[arg(long, default_value = "mob")]
    protocol: String,
    /// Broadcast segment size.
    #[arg(long, default_value = "1MiB", value_parser = windrose_model::units::parse_size)]
    segment: u64,
    /// Multicast piece size.
    #[arg(long, default_value = "256KiB", value_parser = windrose_model::units::parse_size)]
    piece: u64,
    /// Balanced Multicasting plans from the capacities of this platform (as `windrose
    /// multicast --platform`); default: every link alike.
    #[arg(long, value_name = "FILE")]
    platform: Option<PathBuf>,
    /// How a scatter is scheduled (the scatter's tree is --tree, an algorithm); the member
    /// measures what is not given, as `windrose scatter` does.
    #[command(flatten)]
    scatter: crate::collective_opts::ScatterOpts,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// `windrose group leave`.
#[derive(Debug, Args)]
pub struct LeaveArgs {
    #[command(flatten)]
    via: Via,
}

/// `windrose group weather`.
#[derive(Debug, Args)]
pub struct WeatherArgs {
    #[command(flatten)]
    via: Via,
    /// Print the view as JSON.
    #[arg(long)]
    json: bool,
    /// Refresh every SECS seconds until interrupted (the member's prober measures every 500 ms).
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
}

/// One link as a member sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct LinkView {
    peer: u32,
    /// Round trips measured.
    samples: u64,
    /// The last round trip, ms.
    last_ms: f64,
    /// The forecast of the next round trip, ms, and its error estimate.
    forecast_ms: Option<f64>,
    error_ms: Option<f64>,
    /// The bandwidth forecast from this member's sends, MB/s, and its error estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mb_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mb_s_error: Option<f64>,
    /// The member's compute speed forecast as its row brought it, MB/s, and its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compute_mb_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compute_error: Option<f64>,
}

/// The plan of a calibrated scatter, as its root's host reported it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct PlanView {
    /// When the schedule says every member finishes, seconds after the root's start.
    predicted_finish_s: f64,
    /// Members whose compute speed was measured, and tree links whose bandwidth was.
    measured_computes: u32,
    measured_links: u32,
    /// Every member of the tree, in the schedule's order.
    nodes: Vec<NodePlanView>,
}

/// The speeds a plan took for one member.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct NodePlanView {
    member: u32,
    compute_mb_s: f64,
    compute: Basis,
    /// The link from its parent (None at the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link_mb_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link: Option<Basis>,
    /// Its share of the load.
    kept_fraction: f64,
}

/// A request on a member's control socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ControlRequest {
    Broadcast {
        file: PathBuf,
        tree: String,
        segment_bytes: u64,
    },
    Multicast {
        file: PathBuf,
        protocol: String,
        piece_bytes: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        platform: Option<PathBuf>,
    },
    Scatter {
        file: PathBuf,
        /// The tree algorithm the schedule follows.
        tree: String,
        opts: crate::collective_opts::ScatterOpts,
    },
    Leave,
    Weather,
    /// The member chooses the protocol ([`AppRequest::StartAuto`]).
    Auto {
        file: PathBuf,
    },
    /// A sort of the members' own records (their `--sort-input` files).
    Sort(CollectiveSpec),
    /// GHS on these weights (`windrose mst --group`): the data-less `mst` collective, its
    /// initiator's result and GHS frames in the Complete reply ([`MstView`]).
    Mst(MstSpec),
    /// This member's live MST (`group serve --mst-live`; `windrose mst --group --live`).
    MstLive,
    /// The link to `peer` weighs `weight` in the live MST from now on, whatever this member's
    /// forecasts say (`windrose mst --group --live --set-weight`); answered with the view.
    MstWeight {
        peer: u32,
        weight: f64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ControlReply {
    Weather {
        links: Vec<LinkView>,
        /// This member's compute speed forecast and its error, MB/s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compute_mb_s: Option<(f64, f64)>,
    },
    Started {
        transfer: u32,
        bytes: u64,
        /// A scatter: when its schedule says every member finishes, seconds after the start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predicted_finish_s: Option<f64>,
    },
    Complete {
        transfer: u32,
        finished: u32,
        failed: u32,
        seconds: f64,
        /// How every member's part ended, as the initiator's host reported it.
        #[serde(default)]
        members: Vec<MemberView>,
        /// The member that started it (the root).
        #[serde(default)]
        initiator: u32,
        /// A calibrated scatter: the speeds its plan took and its prediction.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<PlanView>,
        /// An `mst` run: the initiator's result and frames.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mst: Option<MstView>,
    },
    Leaving,
    Error(String),
    /// This member's live MST (None: not served with `--mst-live`, or not read yet).
    MstLive(Option<LiveMstView>),
    /// What an automatic start chose, and why.
    Chosen {
        transfer: u32,
        protocol: String,
        /// Each candidate's predicted completion, seconds.
        predicted_s: Vec<(String, f64)>,
        explain: String,
    },
}

impl ControlReply {
    /// Whether nothing follows this reply on its connection (only the start and the choice
    /// come before the result).
    fn is_last(&self) -> bool {
        !matches!(
            self,
            ControlReply::Started { .. } | ControlReply::Chosen { .. }
        )
    }
}

/// One member's part of a collective, as it reported it to the initiator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct MemberView {
    member: u32,
    finished: bool,
    /// Bytes the collective delivered to it.
    bytes: u64,
    /// The BLAKE3 of those bytes (None: it was lost before it reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    blake3: Option<String>,
    /// Seconds from its start (its Go) to its end, on its clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seconds: Option<f64>,
    /// Its digest is the root's (None: not checked, e.g. the root itself or a scatter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verified: Option<bool>,
    /// A scatter's member: the share it computed, as its host reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share: Option<ShareResult>,
    /// A member taken back after a restart: the bytes its new life resumed from what the
    /// earlier one had kept (0: it started over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resumed_bytes: Option<u64>,
    /// A sort's member: when it passed each named step, seconds from its start (its report).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    phases: Vec<(String, f64)>,
}

/// The control socket of member `id` when none is given.
pub(crate) fn default_socket(group: &Group, id: u32) -> PathBuf {
    let safe: String = group
        .name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    std::env::temp_dir().join(format!("windrose-{safe}-{id}.sock"))
}

pub fn run(cmd: GroupCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match cmd {
        GroupCommand::Serve(a) => rt.block_on(serve(a)),
        GroupCommand::Start(a) => rt.block_on(start(a)),
        GroupCommand::Leave(a) => rt.block_on(leave(a)),
        GroupCommand::Weather(a) => rt.block_on(weather(a)),
    }
}

/// `windrose node`: `group serve` with its defaults (parsed from its own declaration, so they
/// are stated once), a long-lived member, or with `node` a one-collective member.
pub(crate) fn serve_member(
    group: PathBuf,
    id: u32,
    key: crate::collective_opts::KeyOpts,
    quiet: bool,
    node: Option<NodeOnce>,
) -> anyhow::Result<()> {
    use clap::{Args as _, FromArgMatches as _};
    let args = [
        "serve".into(),
        "--group".into(),
        group.into_os_string(),
        "--id".into(),
        id.to_string().into(),
    ];
    let matches = ServeArgs::augment_args(clap::Command::new("serve"))
        .try_get_matches_from(args)
        .context("the defaults of `group serve`")?;
    let mut serve =
        ServeArgs::from_arg_matches(&matches).context("the defaults of `group serve`")?;
    serve.key = key;
    serve.quiet = quiet;
    serve.once = node.is_some();
    serve.node = node;
    run(GroupCommand::Serve(serve))
}

/// One request read from a control connection, with where its replies go.
struct Call {
    request: ControlRequest,
    replies: mpsc::UnboundedSender<ControlReply>,
}

/// A collective this member started for a control client.
struct Started {
    replies: mpsc::UnboundedSender<ControlReply>,
    at: Instant,
    members: Vec<MemberView>,
    plan: Option<PlanView>,
    /// An `mst` run: what the initiator learns of it.
    mst: Option<MstWatch>,
}

async fn serve(mut a: ServeArgs) -> anyhow::Result<()> {
    let node = a.node.take();
    let group = Arc::new(load_group(&a.group).map_err(|e| bad_input(e.to_string()))?);
    let handshake = crate::collective_opts::handshake_of(&a.key, !a.quiet || node.is_some())?;
    let me = NodeId(a.id);
    if !group.contains(me) {
        return Err(bad_input(format!(
            "{}: no node {} in the group",
            a.group.display(),
            a.id
        )));
    }
    if let Some(d) = &a.out_dir {
        if !d.is_dir() {
            return Err(bad_input(format!(
                "--out-dir {}: not a directory",
                d.display()
            )));
        }
    }
    if let Some(m) = &a.measurements {
        let dir = m.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) || m.is_dir() {
            return Err(bad_input(format!(
                "--measurements {}: its folder does not exist or it is a folder",
                m.display()
            )));
        }
    }
    let listener = match &a.listen {
        Some(addr) => tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?,
        None => windrose_net::bind(&group, me)
            .await
            .map_err(anyhow::Error::new)?,
    };
    // A one-collective node starts nothing: no control socket.
    let control = match node {
        Some(_) => None,
        None => Some(control_socket(&a, &group).await?),
    };
    let (mut handle, ports) = group_channel();
    let mut config = GroupConfig::new(Membership {
        group: group.clone(),
        me,
    });
    config.probe_lane = !a.no_probe_lane;
    if !(a.probe_period.is_finite() && (0.001..=3600.0).contains(&a.probe_period)) {
        return Err(bad_input(format!(
            "--probe-period {}: expected seconds from 0.001 to 3600",
            a.probe_period
        )));
    }
    config.probe_period = Some(Duration::from_secs_f64(a.probe_period));
    config.handshake = handshake;
    if let Some(n) = &node {
        config.seed = n.seed;
    }
    // A broadcast's or multicast's data goes to its output's partial file (a multicast's
    // pieces as they verify, so a restarted member resumes from them), renamed when the
    // member's part finished.
    let shelf = match (&node, &a.out_dir) {
        (Some(n), _) => n.out.as_deref().map(OutputShelf::new),
        (None, Some(d)) => Some(OutputShelf::in_dir(d)),
        (None, None) => None,
    }
    .map(Arc::new);
    if let Some(s) = &shelf {
        config.shelf = Some(s.clone() as Arc<dyn PieceShelf>);
    }
    // Hash what arrives where it is not written (and for a node's report).
    let hash = match &node {
        Some(n) => n.json || !a.quiet,
        None => a.out_dir.is_none(),
    };
    let sort_app = match (&a.sort_input, &a.sort_output) {
        (Some(i), Some(o)) => {
            let id = a.id.to_string();
            let app = Arc::new(SortApp::new(
                PathBuf::from(i.replace("{id}", &id)),
                PathBuf::from(o.replace("{id}", &id)),
            ));
            config.app = app.clone();
            Some(app)
        }
        _ => None,
    };
    // Every member reports the BLAKE3 of what it received: the caller of `start` checks it.
    config.digest_deliveries = true;
    // A calibrated scatter needs every member's compute speed: time BLAKE3 over 16 MiB at the
    // start. A sort member times a sort of 16 MiB of records instead (its application's
    // compute without work, `sort_app::calibration_sort`): a sort without --speeds weighs the
    // members by these speeds until the sorts' own computes refine them.
    config.calibrate_compute = node.is_none().then_some(16 << 20);
    if a.mst_live {
        // The whole policy comes from the group file (its `[mst]` table, part of the digest
        // the handshake checks, validated when the file was read), so every member weighs,
        // builds and repairs the same way.
        config.mst = Some(group.mst().live_config());
    }
    let mut serving = tokio::spawn(serve_group(listener, config, ports));
    let (calls_tx, mut calls) = mpsc::unbounded_channel::<Call>();
    // Each control connection's writer holds a clone; `recv` ends when the last one is done.
    let (writers, mut writers_done) = mpsc::channel::<()>(1);
    let acceptor = control.map(|(c, socket)| {
        (
            tokio::spawn(accept_calls(c, calls_tx, writers)),
            RemoveOnDrop(socket),
        )
    });
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    let say = |s: String| {
        if !a.quiet && node.is_none() {
            outln!("{s}");
        }
    };
    if let Some((_, socket)) = &acceptor {
        say(format!(
            "member {} of group {} serving; control socket {}",
            a.id,
            group.name(),
            socket.0.display()
        ));
    }
    let n = group.len() as u32;
    let rank = group.members().iter().position(|m| m.id == me).unwrap_or(0) as u32;
    let mut seq: u32 = 0;
    let mut started: BTreeMap<TransferId, Started> = BTreeMap::new();
    let mut received: BTreeMap<TransferId, Received> = BTreeMap::new();
    // The members' steps, which come just before their MemberDone reports.
    let mut phases: BTreeMap<(TransferId, NodeId), Vec<(String, f64)>> = BTreeMap::new();
    // The host's weather service, as its reports tell it.
    let mut links: BTreeMap<NodeId, LinkView> = BTreeMap::new();
    // This member's compute speed forecast and its error, MB/s.
    let mut own_compute: Option<(f64, f64)> = None;
    // With --once: the first collective this member takes part in, when its part began,
    // how and when it ended, and for a node's report what it received, computed and why it
    // failed.
    let once = a.once;
    let mut ours: Option<TransferId> = None;
    let mut go = Instant::now();
    let mut ended: Option<(bool, u64)> = None;
    let mut got: (u64, Option<String>, Option<PathBuf>) = (0, None, None);
    let mut share: Option<ShareResult> = None;
    let mut why: Option<String> = None;
    let mut failure: Option<anyhow::Error> = None;
    let mut left = false;
    let wait = node.as_ref().map_or(Duration::ZERO, |n| n.wait);
    let deadline = tokio::time::sleep(wait);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            // Events first: the reports queued before the driver stopped (an initiator's
            // Complete under --once) reach their callers before the member exits.
            biased;
            _ = tokio::signal::ctrl_c() => { handle.request(AppRequest::Leave); }
            () = &mut deadline, if node.is_some() && ours.is_none() && !left => {
                left = true;
                why = Some(format!("no collective started within {} s (--wait)", wait.as_secs_f64()));
                handle.request(AppRequest::Leave);
            }
            _ = sigterm.recv() => { handle.request(AppRequest::Leave); }
            Some(call) = calls.recv() => {
                let request = match call.request {
                    ControlRequest::Leave => {
                        let _ = call.replies.send(ControlReply::Leaving);
                        handle.request(AppRequest::Leave);
                        continue;
                    }
                    ControlRequest::Weather => {
                        let _ = call.replies.send(ControlReply::Weather { links: links.values().cloned().collect(), compute_mb_s: own_compute });
                        continue;
                    }
                    ControlRequest::MstLive => {
                        let _ = call.replies.send(ControlReply::MstLive(LiveMstView::of(&handle, group.mst())));
                        continue;
                    }
                    ControlRequest::MstWeight { peer, weight } => {
                        // Checked here: the host refuses a bad weight as a protocol error.
                        let reply = match LiveMstView::of(&handle, group.mst()) {
                            None => ControlReply::Error(format!("member {me} keeps no live MST: serve it with `group serve --mst-live METRIC`")),
                            Some(_) if peer == me.0 || !group.members().iter().any(|m| m.id.0 == peer) => {
                                ControlReply::Error(format!("--set-weight: {peer} is not another member of group {} (member {me})", group.name()))
                            }
                            Some(_) if !(weight.is_finite() && weight >= 0.0) => {
                                ControlReply::Error(format!("--set-weight: the link {me}-{peer} cannot weigh {weight}, expected a number >= 0"))
                            }
                            Some(v) => {
                                handle.request(AppRequest::MstWeight { peer: NodeId(peer), weight });
                                ControlReply::MstLive(Some(v))
                            }
                        };
                        let _ = call.replies.send(reply);
                        continue;
                    }
                    r => r,
                };
                match spec_for(&group, me, &request) {
                    Ok((job, data, predicted_finish_s)) => {
                        let t = TransferId(seq.wrapping_mul(n).wrapping_add(rank).wrapping_add(n << 20));
                        seq = seq.wrapping_add(1);
                        let _ = call.replies.send(ControlReply::Started { transfer: t.0, bytes: data.len() as u64, predicted_finish_s });
                        let mst = MstWatch::of(&request, &handle);
                        started.insert(t, Started { replies: call.replies, at: Instant::now(), members: Vec::new(), plan: None, mst });
                        handle.request(match job {
                            Job::Fixed(spec) => AppRequest::StartCollective { spec, data, transfer: Some(t) },
                            Job::Scatter(r) => AppRequest::StartScatter(ScatterRequest { data, transfer: Some(t), ..r }),
                            Job::Auto => AppRequest::StartAuto(AutoRequest { transfer: Some(t), ..AutoRequest::new(data) }),
                            Job::Live { policy, segment_bytes } => AppRequest::StartBroadcast(BroadcastRequest {
                                policy,
                                segment_bytes,
                                max_frame_payload: segment_bytes.clamp(1, 1 << 20) as u32,
                                data,
                                transfer: Some(t),
                            }),
                        });
                    }
                    Err(e) => { let _ = call.replies.send(ControlReply::Error(e)); }
                }
            }
            Some(ev) = handle.events.recv() => match ev {
                // A sort's range: its application wrote it.
                GroupEvent::Delivered { transfer, .. } if sort_app.as_ref().is_some_and(|s| s.is_sort(transfer)) => {}
                GroupEvent::Delivered { transfer, data, .. } if started.get(&transfer).is_some_and(|s| s.mst.is_some()) => {
                    if let Some(w) = started.get_mut(&transfer).and_then(|s| s.mst.as_mut()) {
                        w.result.extend_from_slice(&data);
                    }
                }
                GroupEvent::Delivered { transfer, offset, data } => {
                    let r = match received.entry(transfer) {
                        std::collections::btree_map::Entry::Occupied(r) => Ok(r.into_mut()),
                        std::collections::btree_map::Entry::Vacant(v) => Received::new(shelf.as_deref(), transfer, hash).map(|r| v.insert(r)),
                    };
                    if let Err(e) = r.and_then(|r| r.take(offset, &data)) {
                        if Some(transfer) == ours && node.is_some() {
                            failure.get_or_insert(e);
                        } else {
                            eprintln!("member {}: transfer {transfer}: {e:#}", a.id);
                        }
                    }
                }
                // The instant a member's part begins (tests and scripts wait for it, e.g. to
                // kill a member mid-sort).
                GroupEvent::Report(Report::CollectiveStarted { transfer, initiator }) => {
                    say(format!("transfer {transfer}: started by member {initiator}"));
                    if once && ours.is_none() {
                        ours = Some(transfer);
                        go = Instant::now();
                        if node.is_some() {
                            // Its report has a hash and a count even when nothing arrives.
                            match Received::new(shelf.as_deref(), transfer, hash) {
                                Ok(r) => { received.insert(transfer, r); }
                                Err(e) => { failure.get_or_insert(e); }
                            }
                        }
                    }
                }
                GroupEvent::Report(Report::CollectiveEnded { transfer, finished }) => {
                    let mine = once && ended.is_none() && ours.is_none_or(|t| t == transfer);
                    if let Some(r) = received.remove(&transfer) {
                        let (bytes, blake3) = (r.bytes(), r.blake3());
                        let out = shelf.as_ref().map(|s| s.output(transfer)).unwrap_or_default();
                        let written = match r.finish(&out, finished) {
                            Ok(w) => w,
                            Err(e) => {
                                say(format!("transfer {transfer}: {e:#}"));
                                if mine {
                                    failure.get_or_insert(e);
                                }
                                None
                            }
                        };
                        say(match (&written, finished, &blake3) {
                            (Some(w), _, _) => format!("transfer {transfer}: received into {}", w.display()),
                            (None, true, Some(h)) => format!("transfer {transfer}: received {bytes} bytes, blake3 {h}"),
                            (None, true, None) => format!("transfer {transfer}: received {bytes} bytes"),
                            (None, false, _) => format!("transfer {transfer}: aborted after {bytes} bytes, nothing kept"),
                        });
                        if mine {
                            got = (bytes, blake3, written);
                        }
                    }
                    if mine {
                        // The host leaves once its collectives have ended (the initiator's
                        // close included).
                        ours = Some(transfer);
                        ended = Some((finished, go.elapsed().as_nanos() as u64));
                        if !left {
                            left = true;
                            handle.request(AppRequest::Leave);
                        }
                    }
                }
                GroupEvent::Report(Report::CollectiveComplete { transfer, finished, failed }) => {
                    if let Some(s) = started.remove(&transfer) {
                        let seconds = s.at.elapsed().as_secs_f64();
                        say(format!("transfer {transfer}: {finished} members finished, {failed} failed, {seconds:.3} s"));
                        let _ = s.replies.send(ControlReply::Complete { transfer: transfer.0, finished, failed, seconds, members: s.members, initiator: a.id, plan: s.plan, mst: s.mst.map(|w| w.view(&handle)) });
                    }
                }
                GroupEvent::Report(Report::MemberDone { transfer, member, finished, bytes_delivered, digest, elapsed, share, resumed_bytes }) => {
                    if let Some(s) = started.get_mut(&transfer) {
                        // A member taken back after a restart reports again: the later report replaces the earlier.
                        s.members.retain(|m| m.member != member.0);
                        s.members.push(MemberView {
                            member: member.0,
                            finished,
                            bytes: bytes_delivered,
                            blake3: digest.map(|d| blake3::Hash::from_bytes(d).to_hex().to_string()),
                            seconds: elapsed.map(|d| d.as_secs_f64()),
                            verified: None,
                            share: share.as_ref().map(ShareResult::from),
                            resumed_bytes,
                            phases: phases.remove(&(transfer, member)).unwrap_or_default(),
                        });
                    }
                    if let Some(b) = resumed_bytes {
                        say(format!("transfer {transfer}: member {member} was taken back after a restart and resumed {b} bytes"));
                    }
                }
                GroupEvent::Report(Report::RoundTrip { peer, rtt }) => {
                    let ms = rtt.as_secs_f64() * 1e3;
                    let l = links.entry(peer).or_insert_with(|| LinkView { peer: peer.0, ..LinkView::default() });
                    l.samples += 1;
                    l.last_ms = ms;
                }
                GroupEvent::Report(Report::LinkForecast { peer, rtt, error }) => {
                    if let Some(l) = links.get_mut(&peer) {
                        l.forecast_ms = Some(rtt.as_secs_f64() * 1e3);
                        l.error_ms = Some(error.as_secs_f64() * 1e3);
                    }
                }
                GroupEvent::Report(Report::LinkBandwidth { peer, bytes_per_s, error_bytes_per_s }) => {
                    let l = links.entry(peer).or_insert_with(|| LinkView { peer: peer.0, ..LinkView::default() });
                    l.mb_s = Some(bytes_per_s as f64 / 1e6);
                    l.mb_s_error = Some(error_bytes_per_s as f64 / 1e6);
                }
                GroupEvent::Report(Report::ComputeSpeed { node, bytes_per_s, error_bytes_per_s }) => {
                    let speed = (bytes_per_s as f64 / 1e6, error_bytes_per_s as f64 / 1e6);
                    if node == me {
                        own_compute = Some(speed);
                    } else {
                        let l = links.entry(node).or_insert_with(|| LinkView { peer: node.0, ..LinkView::default() });
                        (l.compute_mb_s, l.compute_error) = (Some(speed.0), Some(speed.1));
                    }
                }
                GroupEvent::Report(Report::ScatterPlanned { transfer, predicted_finish, nodes, measured_computes, measured_links }) => {
                    say(format!("transfer {transfer}: scatter planned from the group's weather ({measured_computes} of {nodes} compute speeds and {measured_links} of {} tree links measured), predicted finish {:.3} s", nodes.saturating_sub(1), predicted_finish.as_secs_f64()));
                    if let Some(s) = started.get_mut(&transfer) {
                        s.plan = Some(PlanView { predicted_finish_s: predicted_finish.as_secs_f64(), measured_computes, measured_links, nodes: Vec::new() });
                    }
                }
                GroupEvent::Report(Report::ScatterNodePlanned { transfer, node, compute_bytes_per_s, compute, link, kept_ppm }) => {
                    if let Some(p) = started.get_mut(&transfer).and_then(|s| s.plan.as_mut()) {
                        p.nodes.push(NodePlanView {
                            member: node.0,
                            compute_mb_s: compute_bytes_per_s as f64 / 1e6,
                            compute,
                            link_mb_s: link.map(|l| l.0 as f64 / 1e6),
                            link: link.map(|l| l.1),
                            kept_fraction: f64::from(kept_ppm) / 1e6,
                        });
                    }
                }
                GroupEvent::Report(Report::TreePlanned { transfer, cost, built, changed_links, swaps, live_mst }) => {
                    let how = match live_mst {
                        Some((generation, epoch)) => format!("the live MST (generation {generation}, epoch {epoch}; {swaps} edges swapped since this root's last plan)"),
                        None if built => "built".to_string(),
                        None => format!("kept ({changed_links} link changes taken in, {swaps} swaps)"),
                    };
                    say(format!("transfer {transfer}: tree {how}, cost {:.1} ms on the live view", cost.as_secs_f64() * 1e3));
                }
                GroupEvent::Report(Report::ProtocolChosen { transfer, bytes, chosen, predicted }) => {
                    let choice = Choice::from_report(bytes, chosen, &predicted);
                    say(format!("transfer {transfer}: chose {chosen}"));
                    if let Some(s) = started.get(&transfer) {
                        let _ = s.replies.send(ControlReply::Chosen {
                            transfer: transfer.0,
                            protocol: chosen.name().to_string(),
                            predicted_s: choice.predictions.iter().map(|p| (p.candidate.name().to_string(), p.completion_s)).collect(),
                            explain: choice.explain(),
                        });
                    }
                }
                GroupEvent::Computed { offset, len, blake3 } => {
                    say(format!("computed its scatter share [{offset}, {}): BLAKE3 {blake3}", offset + len));
                    if ours.is_some() {
                        let computed_ns = go.elapsed().as_nanos() as u64;
                        share = Some(ShareResult { offset, len, blake3, computed_ns });
                    }
                }
                GroupEvent::Failed(f) if f.member == me && Some(f.transfer) == ours => {
                    why.get_or_insert(f.why);
                }
                GroupEvent::Phases(p) => {
                    phases.insert((p.transfer, p.member), p.phases);
                }
                GroupEvent::Report(Report::PeerDown { peer }) => say(format!("member {peer} went silent")),
                GroupEvent::Lost(peer, why) => say(format!("lost member {peer}: {why}")),
                _ => {}
            },
            r = &mut serving => {
                if let Some((acceptor, _socket)) = acceptor {
                    acceptor.abort();
                    let _ = acceptor.await;
                }
                // Callers of collectives that cannot complete any more get their connection
                // closed; every reply already handed to a control connection is written before the
                // process exits (bounded: a client that never sent its request holds none).
                started.clear();
                let _ = tokio::time::timeout(Duration::from_secs(5), writers_done.recv()).await;
                if let Some(path) = &a.measurements {
                    write_measurements(path, &handle.measurements())?;
                }
                r.map_err(|e| anyhow::anyhow!("the member's driver stopped: {e}"))?
                    .map_err(anyhow::Error::new)?;
                if let Some(e) = failure {
                    return Err(e.context(format!("member {}", a.id)));
                }
                let finished = ended.is_some_and(|e| e.0);
                let Some(n) = &node else {
                    return match (ended, ours) {
                        (Some((false, _)), Some(t)) => Err(anyhow::anyhow!(
                            "member {}: its part of transfer {t} did not finish{}",
                            a.id,
                            why.map(|w| format!(": {w}")).unwrap_or_default()
                        )),
                        _ => Ok(()),
                    };
                };
                if !finished {
                    anyhow::bail!(
                        "node {me}: {}",
                        why.unwrap_or_else(|| "its part of the collective did not finish".to_string())
                    );
                }
                let (bytes_received, blake3, written) = got;
                let report = NodeReport {
                    node: me,
                    status: RunStatus::Finished,
                    error: None,
                    bytes_received,
                    blake3,
                    finished_ns: ended.map(|e| e.1),
                    complete_ns: None,
                    share,
                    measurements: handle.measurements(),
                    frames_sent: handle.frames_sent(),
                    resumed_bytes: ours
                        .zip(shelf.as_ref())
                        .and_then(|(t, s)| s.resumed_bytes(t)),
                };
                return print_node(&report, written.as_deref(), n.json, a.quiet);
            }
        }
    }
}

/// Binds the member's control socket (refused when a live member holds it); returns it and
/// its path.
async fn control_socket(a: &ServeArgs, group: &Group) -> anyhow::Result<(UnixListener, PathBuf)> {
    let socket = a
        .control
        .clone()
        .unwrap_or_else(|| default_socket(group, a.id));
    if UnixStream::connect(&socket).await.is_ok() {
        return Err(bad_input(format!(
            "control socket {} is in use: is member {} already running?",
            socket.display(),
            a.id
        )));
    }
    let _ = std::fs::remove_file(&socket);
    let control = UnixListener::bind(&socket)
        .with_context(|| format!("control socket {}", socket.display()))?;
    Ok((control, socket))
}

/// `windrose node --once`'s result: its report as JSON, or one line.
fn print_node(
    r: &NodeReport,
    written: Option<&Path>,
    json: bool,
    quiet: bool,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    if json {
        return crate::output::print_json(r);
    }
    if quiet {
        return Ok(());
    }
    let mut line = format!("node {}: received {} bytes", r.node, r.bytes_received);
    if let Some(h) = &r.blake3 {
        let _ = write!(line, ", BLAKE3 {h}");
    }
    if let Some(s) = &r.share {
        let _ = write!(
            line,
            ", computed its share [{}, {}) of the load: BLAKE3 {} after {} s",
            s.offset,
            s.offset + s.len,
            s.blake3,
            crate::output::num(s.computed_ns as f64 * 1e-9)
        );
    }
    if let Some(ns) = r.finished_ns {
        let _ = write!(line, ", in {} s", crate::output::num(ns as f64 * 1e-9));
    }
    if let Some(kept) = r.resumed_bytes {
        let _ = write!(
            line,
            " (rejoined the run after a restart; {kept} bytes resumed from disk)"
        );
    }
    if let Some(p) = written {
        let _ = write!(line, ", written to {}", p.display());
    }
    crate::output::print(&format!("{line}\n"))
}

/// Writes the series next to `path` and renames it over `path`, so a reader never sees half a
/// file.
fn write_measurements(path: &Path, series: &LinkMeasurements) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&[series])? + "\n";
    let tmp = path.with_extension("tmp-windrose");
    std::fs::write(&tmp, json).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn accept_calls(
    control: UnixListener,
    calls: mpsc::UnboundedSender<Call>,
    writers: mpsc::Sender<()>,
) {
    while let Ok((stream, _)) = control.accept().await {
        let calls = calls.clone();
        let writing = writers.clone();
        tokio::spawn(async move {
            let _writing = writing;
            let (rd, mut wr) = stream.into_split();
            let mut line = String::new();
            let mut rd = BufReader::new(rd);
            if rd.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let (tx, mut rx) = mpsc::unbounded_channel();
            match serde_json::from_str::<ControlRequest>(&line) {
                Ok(request) => {
                    let _ = calls.send(Call {
                        request,
                        replies: tx,
                    });
                }
                Err(e) => {
                    let _ = tx.send(ControlReply::Error(format!("bad control request: {e}")));
                }
            }
            while let Some(reply) = rx.recv().await {
                let end = !matches!(
                    reply,
                    ControlReply::Started { .. } | ControlReply::Chosen { .. }
                );
                let mut text = serde_json::to_string(&reply).unwrap_or_default();
                text.push('\n');
                if wr.write_all(text.as_bytes()).await.is_err() || end {
                    break;
                }
            }
        });
    }
}

/// What a control request starts: a collective fixed here, or a broadcast or scatter the host
/// plans from the group's weather.
enum Job {
    Fixed(CollectiveSpec),
    /// A calibrated scatter (its data and transfer filled in when it starts).
    Scatter(ScatterRequest),
    /// The host chooses ([`AppRequest::StartAuto`]).
    Auto,
    Live {
        policy: TreePolicy,
        segment_bytes: u64,
    },
}

/// The collective of a control request, with its data and (a scatter) its schedule's
/// predicted finish.
///
/// A scatter's speeds not given are measured here, as `windrose scatter` measures them: the
/// member's control loop waits for that (a fraction of a second), its driver does not.
fn spec_for(
    group: &Group,
    me: NodeId,
    r: &ControlRequest,
) -> Result<(Job, Bytes, Option<f64>), String> {
    let file = match r {
        ControlRequest::Broadcast { file, .. }
        | ControlRequest::Multicast { file, .. }
        | ControlRequest::Scatter { file, .. }
        | ControlRequest::Auto { file } => file,
        ControlRequest::Sort(spec) => {
            // Every member's records are its own (the Host asks its application); the registry
            // says which collectives are sorts.
            return match spec.descriptor().delivers {
                Delivers::SortedRange => Ok((Job::Fixed(spec.clone()), Bytes::new(), None)),
                _ => Err(format!("a {} is not a sort", spec.name())),
            };
        }
        ControlRequest::Mst(spec) => {
            return Ok((
                Job::Fixed(CollectiveSpec::Mst(spec.clone())),
                Bytes::new(),
                None,
            ))
        }
        ControlRequest::Leave
        | ControlRequest::Weather
        | ControlRequest::MstLive
        | ControlRequest::MstWeight { .. } => return Err("not a collective".into()),
    };
    if !std::fs::metadata(file)
        .map(|m| m.is_file())
        .unwrap_or(false)
    {
        return Err(format!(
            "{}: not a regular file this member can read",
            file.display()
        ));
    }
    let data = windrose_net::map_file(file).map_err(|e| e.to_string())?;
    if let ControlRequest::Auto { .. } = r {
        return Ok((Job::Auto, data, None));
    }
    let spec = match r {
        ControlRequest::Broadcast {
            tree,
            segment_bytes,
            ..
        } => {
            // An algorithm builds the tree here once; anything else must be a policy the host
            // plans by (its parser names what is wrong).
            let Ok(algo) = tree.parse::<TreeAlgorithm>() else {
                return Ok((
                    Job::Live {
                        policy: tree.parse().map_err(|e| {
                            format!(
                                "--tree {tree}: not a tree algorithm ({}), and as a policy: {e}",
                                TreeAlgorithm::NAMES.join(", ")
                            )
                        })?,
                        segment_bytes: (*segment_bytes).max(1),
                    },
                    data,
                    None,
                ));
            };
            let tree = group_tree(algo, group, me).map_err(|e| e.to_string())?;
            Job::Fixed(CollectiveSpec::Broadcast {
                tree: TreeSpec::of(&tree),
                segment_bytes: (*segment_bytes).max(1),
                max_frame_payload: (*segment_bytes).clamp(1, 1 << 20) as u32,
            })
        }
        ControlRequest::Multicast {
            protocol,
            piece_bytes,
            platform,
            ..
        } => {
            let protocol: MulticastProtocol = protocol.parse()?;
            // The same parameters as `windrose multicast`.
            let (mspec, _) = crate::collective_opts::multicast_spec(
                group,
                me,
                protocol,
                platform.as_deref(),
                MobVariant::Windrose,
            )
            .map_err(|e| format!("{e:#}"))?;
            Job::Fixed(
                CollectiveSpec::multicast(
                    protocol,
                    MulticastParams::of(&mspec),
                    &data,
                    *piece_bytes,
                )
                .map_err(|e| e.to_string())?,
            )
        }
        ControlRequest::Scatter { tree, opts, .. } => {
            let algo: TreeAlgorithm = tree
                .parse()
                .map_err(|e| format!("--tree {tree} (a scatter's tree is an algorithm): {e}"))?;
            let t = group_tree(algo, group, me).map_err(|e| format!("--tree {tree}: {e}"))?;
            if opts.speeds.is_none() {
                // Calibrated: the host plans it from the group's view, given speeds in place
                // of the view's.
                for (flag, v) in [
                    ("--hash-mb-s", opts.hash_mb_s),
                    ("--link-mb-s", opts.link_mb_s),
                ] {
                    if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                        return Err(format!("{flag} {v}: must be a positive number of MB/s"));
                    }
                }
                let request = ScatterRequest {
                    tree: t,
                    order: opts.order,
                    given: GivenSpeeds {
                        compute_mb_s: opts.hash_mb_s,
                        link_mb_s: opts.link_mb_s,
                    },
                    max_frame_payload: ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
                    parallel: opts.parallel,
                    data: Bytes::new(),
                    transfer: None,
                };
                return Ok((Job::Scatter(request), data, None));
            }
            // A speeds file: the same schedule as `windrose scatter` rooted here.
            let (schedule, _) =
                crate::collective_opts::scatter_schedule(group, &data, &t, algo, opts)
                    .map_err(|e| format!("{e:#}"))?;
            let predicted = Some(schedule.predicted_finish_s);
            return Ok((
                Job::Fixed(CollectiveSpec::Scatter {
                    schedule,
                    max_frame_payload: ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
                    parallel: opts.parallel,
                }),
                data,
                predicted,
            ));
        }
        ControlRequest::Leave
        | ControlRequest::Weather
        | ControlRequest::MstLive
        | ControlRequest::MstWeight { .. }
        | ControlRequest::Sort(_)
        | ControlRequest::Mst(_)
        | ControlRequest::Auto { .. } => {
            unreachable!("handled above")
        }
    };
    Ok((spec, data, None))
}

async fn call(socket: &Path, request: &ControlRequest) -> anyhow::Result<Vec<ControlReply>> {
    let stream = UnixStream::connect(socket).await.map_err(|e| {
        bad_input(format!(
            "control socket {}: {e} (is the member running `windrose group serve`?)",
            socket.display()
        ))
    })?;
    let (rd, mut wr) = stream.into_split();
    let mut text = serde_json::to_string(request)?;
    text.push('\n');
    wr.write_all(text.as_bytes()).await?;
    let mut lines = BufReader::new(rd).lines();
    let mut replies = Vec::new();
    while let Some(line) = lines.next_line().await? {
        let reply: ControlReply = serde_json::from_str(&line)
            .with_context(|| format!("a reply the member sent: {line}"))?;
        let end = reply.is_last();
        replies.push(reply);
        if end {
            break;
        }
    }
    Ok(replies)
}

/// A path as the member must see it: absolute (it runs elsewhere in the file system).
pub(crate) fn absolute(path: &Path, flag: &str) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|e| bad_input(format!("{flag} {}: {e}", path.display())))
}

async fn start(a: StartArgs) -> anyhow::Result<()> {
    let socket = a.via.socket()?;
    if a.kind != "scatter" && a.scatter.any_given() {
        return Err(bad_input(
            "--speeds, --hash-mb-s, --link-mb-s, --order and --parallel are for a scatter",
        ));
    }
    if a.kind != "multicast" && a.platform.is_some() {
        return Err(bad_input("--platform is for a multicast"));
    }
    let file = absolute(&a.file, "--file")?;
    let request = match a.kind.as_str() {
        "bcast" => ControlRequest::Broadcast {
            file,
            tree: a.tree.clone(),
            segment_bytes: a.segment,
        },
        "multicast" => ControlRequest::Multicast {
            file,
            protocol: a.protocol.clone(),
            piece_bytes: u32::try_from(a.piece)
                .map_err(|_| bad_input(format!("--piece {}: at most 4 GiB", a.piece)))?,
            platform: match &a.platform {
                Some(p) => Some(absolute(p, "--platform")?),
                None => None,
            },
        },
        "auto" => ControlRequest::Auto { file },
        _ => {
            let mut opts = a.scatter.clone();
            if let Some(p) = &opts.speeds {
                opts.speeds = Some(absolute(p, "--speeds")?);
            }
            ControlRequest::Scatter {
                file,
                tree: a.tree.clone(),
                opts,
            }
        }
    };
    start_through(&socket, &request, a.json).await
}

/// The control socket of member `id` of `group` when that member runs on this machine (its
/// default socket answers), else None.
pub(crate) fn running_member(group: &Group, id: u32) -> Option<PathBuf> {
    let socket = default_socket(group, id);
    std::os::unix::net::UnixStream::connect(&socket)
        .is_ok()
        .then_some(socket)
}

/// `windrose bcast | multicast | scatter` started through a running member: `request` sent
/// to its control socket, its result printed as `group start` prints it.
pub(crate) fn start_through_member(
    socket: &Path,
    request: &ControlRequest,
    json: bool,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(start_through(socket, request, json))
}

/// Sends `request` to the member at `socket`, waits for every member's report and prints the
/// result; an error when a member did not finish.
async fn start_through(socket: &Path, request: &ControlRequest, json: bool) -> anyhow::Result<()> {
    start_explained(socket, request, json, false).await
}

/// [`start_through`], printing an automatic start's choice (with `explain`, why).
pub(crate) async fn start_explained(
    socket: &Path,
    request: &ControlRequest,
    json: bool,
    explain: bool,
) -> anyhow::Result<()> {
    // What every member must have received, hashed here while the collective runs (a
    // scatter's members each keep a different share: nothing to compare).
    let root_hash = match request {
        ControlRequest::Broadcast { file, .. }
        | ControlRequest::Multicast { file, .. }
        | ControlRequest::Auto { file } => {
            let file = file.clone();
            Some(tokio::task::spawn_blocking(move || {
                windrose_net::map_file(&file).map(|d| blake3::hash(&d).to_hex().to_string())
            }))
        }
        _ => None,
    };
    let replies = call(socket, request).await?;
    let root_hash = match root_hash {
        Some(h) => Some(
            h.await
                .context("hashing the file")?
                .map_err(|e| bad_input(e.to_string()))?,
        ),
        None => None,
    };
    let mut result = Err(anyhow::anyhow!("the member closed the control connection"));
    let mut predicted = None;
    let mut chosen = None;
    for r in replies {
        match r {
            ControlReply::Chosen {
                protocol,
                predicted_s,
                explain: why,
                ..
            } => {
                if !json {
                    let t = predicted_s
                        .iter()
                        .find(|(c, _)| *c == protocol)
                        .map_or(0.0, |(_, t)| *t);
                    outln!("protocol: {protocol} (predicted {t:.4} s)");
                    if explain {
                        outln!("{why}");
                    }
                }
                chosen = Some((protocol, predicted_s, why));
            }
            ControlReply::Started {
                predicted_finish_s, ..
            } => predicted = predicted_finish_s,
            ControlReply::Error(e) => result = Err(bad_input(e)),
            ControlReply::Complete {
                transfer,
                finished,
                failed,
                seconds,
                mut members,
                initiator,
                plan,
                ..
            } => {
                let predicted = plan.as_ref().map(|p| p.predicted_finish_s).or(predicted);
                members.sort_by_key(|m| m.member);
                for m in &mut members {
                    if let (Some(want), true) = (&root_hash, m.finished && m.member != initiator) {
                        m.verified = Some(m.blake3.as_ref() == Some(want));
                    }
                }
                let differ: Vec<String> = members
                    .iter()
                    .filter(|m| m.verified == Some(false))
                    .map(|m| m.member.to_string())
                    .collect();
                if json {
                    let mut v = serde_json::json!({"transfer": transfer, "finished": finished, "failed": failed, "seconds": seconds, "root": initiator, "members": members});
                    if let Some(p) = predicted {
                        v["predicted_finish_s"] = p.into();
                    }
                    if let Some(p) = &plan {
                        v["plan"] = serde_json::to_value(p)?;
                    }
                    if let Some(h) = &root_hash {
                        v["root_blake3"] = h.as_str().into();
                    }
                    if let Some((protocol, predicted_s, why)) = &chosen {
                        v["protocol"] = protocol.as_str().into();
                        v["predicted_s"] = serde_json::json!(predicted_s
                            .iter()
                            .map(|(c, t)| (c.clone(), *t))
                            .collect::<std::collections::BTreeMap<_, _>>());
                        if explain {
                            v["explain"] = why.as_str().into();
                        }
                    }
                    outln!("{v}");
                } else {
                    if let Some(p) = &plan {
                        out!("{}", render_plan(p));
                    }
                    out!(
                        "{}",
                        render_members(&members, initiator, root_hash.as_deref())
                    );
                    let mut line = format!("transfer {transfer}: {finished} members finished, {failed} failed in {seconds:.3} s");
                    if let Some(p) = predicted {
                        line += &format!(" (the schedule predicted {p:.3} s)");
                    }
                    if root_hash.is_some() && differ.is_empty() && failed == 0 {
                        line += &format!(
                            "; all {} members received the root's bytes",
                            members.len().saturating_sub(1)
                        );
                    }
                    outln!("{line}");
                }
                result = if !differ.is_empty() {
                    Err(anyhow::anyhow!(
                        "member(s) {} of transfer {transfer} did not receive the root's bytes \
                         (their BLAKE3 differs)",
                        differ.join(", ")
                    ))
                } else if failed == 0 {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!(
                        "{failed} members did not finish transfer {transfer}"
                    ))
                };
            }
            _ => {}
        }
    }
    result
}

/// Asks running member `id` of `group` (or the member at `control`) to run `spec`, a sort, and
/// waits for every member's part to end: `windrose sort --group`.
pub fn start_sort(
    group: &Path,
    id: Option<u32>,
    control: Option<&Path>,
    spec: CollectiveSpec,
) -> Result<(TransferId, FinishTimes, PhaseTimes), Failed> {
    let via = Via {
        control: control.map(Path::to_path_buf),
        group: Some(group.to_path_buf()),
        id,
    };
    let socket = via.socket()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let replies = rt.block_on(call(&socket, &ControlRequest::Sort(spec)))?;
    let mut transfer = None;
    for r in replies {
        match r {
            ControlReply::Started { transfer: t, .. } => transfer = Some(TransferId(t)),
            ControlReply::Error(e) => return Err(Failed::of(bad_input(e), transfer)),
            ControlReply::Complete {
                transfer: t,
                finished,
                failed,
                members,
                ..
            } => {
                let t = TransferId(t);
                let n = load_group(group).map(|g| g.len()).unwrap_or(0) as u32;
                let mut times = vec![None; n as usize];
                let mut phases: PhaseTimes = vec![Vec::new(); n as usize];
                for m in members.iter().filter(|m| m.finished) {
                    if let Some(x) = times.get_mut(m.member as usize) {
                        *x = m.seconds;
                    }
                    if let Some(x) = phases.get_mut(m.member as usize) {
                        x.clone_from(&m.phases);
                    }
                }
                // Members lost mid-sort are the caller's to judge (HeteroSort restores their
                // records on the survivors); a sort nobody finished was refused.
                if finished == 0 {
                    return Err(Failed::of(
                        anyhow::anyhow!(
                            "sort {t}: {finished} of {n} members finished, {failed} failed (a \
                             member refused: is every member serving with --sort-input and \
                             --sort-output, its input whole records?)"
                        ),
                        Some(t),
                    ));
                }
                return Ok((t, times, phases));
            }
            _ => {}
        }
    }
    Err(Failed::of(
        anyhow::anyhow!("the member closed the control connection before the sort ended"),
        transfer,
    ))
}

/// One line per member: how its part ended and, for a broadcast or multicast, whether it
/// received the root's bytes.
fn render_members(members: &[MemberView], root: u32, root_hash: Option<&str>) -> String {
    let short = |h: &str| h.chars().take(16).collect::<String>();
    let share = |sh: &ShareResult| {
        let mut t = format!(
            "share [{}, {}) BLAKE3 {}",
            sh.offset,
            sh.offset + sh.len,
            short(&sh.blake3)
        );
        if sh.computed_ns > 0 {
            t += &format!(", computed at {:.3} s", sh.computed_ns as f64 * 1e-9);
        }
        t
    };
    let mut s = String::new();
    for m in members {
        let mut line = format!("member {:>3}: ", m.member);
        if m.member == root {
            line += "the root";
            if let Some(h) = root_hash {
                line += &format!(", BLAKE3 {}", short(h));
            }
            if let Some(sh) = &m.share {
                line += &format!(", {}", share(sh));
            }
        } else if !m.finished {
            line += &format!("did not finish ({} bytes received)", m.bytes);
        } else if let Some(sh) = &m.share {
            line += &format!("finished, {}", share(sh));
        } else {
            line += &format!("finished, {} bytes received", m.bytes);
            if let Some(s) = m.seconds.filter(|&s| s > 0.0) {
                line += &format!(" in {s:.3} s ({:.1} MB/s)", m.bytes as f64 / s / 1e6);
            }
            if let (Some(h), Some(true)) = (&m.blake3, m.verified) {
                line += &format!(", BLAKE3 {} ok", short(h));
            } else if let (Some(h), Some(false)) = (&m.blake3, m.verified) {
                line += &format!(", BLAKE3 {} DIFFERS", short(h));
            }
        }
        if let Some(b) = m.resumed_bytes {
            line += &format!(" (restarted; {b} bytes resumed from its earlier life)");
        }
        s += &line;
        s.push('\n');
    }
    s
}

async fn weather(a: WeatherArgs) -> anyhow::Result<()> {
    let socket = a.via.socket()?;
    if let Some(s) = a.watch {
        if !(s.is_finite() && s >= 0.1) {
            return Err(bad_input(format!("--watch {s}: at least 0.1 seconds")));
        }
    }
    loop {
        let replies = call(&socket, &ControlRequest::Weather).await?;
        let (links, compute) = match replies.into_iter().next() {
            Some(ControlReply::Weather {
                links,
                compute_mb_s,
            }) => (links, compute_mb_s),
            Some(ControlReply::Error(e)) => anyhow::bail!("{e}"),
            other => anyhow::bail!("unexpected reply from the member: {other:?}"),
        };
        if a.json {
            outln!("{}", serde_json::to_string(&links)?);
        } else {
            if a.watch.is_some() {
                out!("\x1b[2J\x1b[H"); // clear the terminal between refreshes
            }
            outln!("{}", render_weather(&links, compute));
        }
        let Some(secs) = a.watch else {
            return Ok(());
        };
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    }
}

/// The links' table, then this member's compute speed (`compute`: forecast and error, MB/s).
fn render_weather(links: &[LinkView], compute: Option<(f64, f64)>) -> String {
    let own = match compute {
        Some((v, e)) => format!("this member computes {v:.1} ± {e:.1} MB/s"),
        None => "this member has timed no compute yet".into(),
    };
    if links.is_empty() {
        return format!(
            "no round trips measured yet (the prober measures every 500 ms once connected)\n{own}"
        );
    }
    let mut s = format!(
        "{:>6} {:>8} {:>10} {:>12} {:>9} {:>10} {:>9} {:>13}\n",
        "member", "probes", "last ms", "forecast ms", "± ms", "MB/s", "± MB/s", "compute MB/s"
    );
    let num = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    for l in links {
        s += &format!(
            "{:>6} {:>8} {:>10.3} {:>12} {:>9} {:>10} {:>9} {:>13}\n",
            l.peer,
            l.samples,
            l.last_ms,
            num(l.forecast_ms),
            num(l.error_ms),
            num(l.mb_s),
            num(l.mb_s_error),
            l.compute_mb_s.map_or("-".into(), |v| format!("{v:.1}"))
        );
    }
    s + &own
}

/// What a calibrated scatter's plan took: its prediction, then one line per member.
fn render_plan(p: &PlanView) -> String {
    let n = p.nodes.len();
    let mut s = format!(
        "plan: predicted finish {:.3} s, from the group's weather: {} of {n} compute speeds and \
         {} of {} tree links measured (the rest guessed or given)\n",
        p.predicted_finish_s,
        p.measured_computes,
        p.measured_links,
        n.saturating_sub(1)
    );
    let basis = |b: Basis| match b {
        Basis::Measured => "measured",
        Basis::Guessed => "guessed",
        Basis::Given => "given",
    };
    for m in &p.nodes {
        s += &format!(
            "  member {:>3}: keeps {:>5.1} %, computes {:.1} MB/s ({})",
            m.member,
            m.kept_fraction * 100.0,
            m.compute_mb_s,
            basis(m.compute)
        );
        if let (Some(v), Some(b)) = (m.link_mb_s, m.link) {
            s += &format!(", link from its parent {v:.1} MB/s ({})", basis(b));
        }
        s.push('\n');
    }
    s
}

async fn leave(a: LeaveArgs) -> anyhow::Result<()> {
    let socket = a.via.socket()?;
    call(&socket, &ControlRequest::Leave).await?;
    // Wait (bounded) until the member is gone: its socket stops answering.
    let deadline = Instant::now() + Duration::from_secs(30);
    while UnixStream::connect(&socket).await.is_ok() {
        if Instant::now() > deadline {
            anyhow::bail!("member at {} did not leave within 30 s", socket.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// What an initiator gathers of an `mst` run it started ([`ControlRequest::Mst`]): its own
/// delivered result, and its GHS frame counts at the start (the run's are the difference).
struct MstWatch {
    result: Vec<u8>,
    before: BTreeMap<String, u64>,
}

impl MstWatch {
    fn of(
        request: &ControlRequest,
        handle: &windrose_net::host_driver::GroupHandle,
    ) -> Option<MstWatch> {
        matches!(request, ControlRequest::Mst(_)).then(|| MstWatch {
            result: Vec::new(),
            before: ghs_frames_sent(handle),
        })
    }

    fn view(self, handle: &windrose_net::host_driver::GroupHandle) -> MstView {
        let mut frames = ghs_frames_sent(handle);
        for (kind, n) in &mut frames {
            *n -= self.before.get(kind).copied().unwrap_or(0);
        }
        frames.retain(|_, n| *n > 0);
        MstView {
            result: MstResult::parse(&self.result).ok().map(|r| MstOwn {
                nodes: r.nodes,
                total: r.total_weight,
                branches: r.branches.into_iter().map(|(to, w)| (to.0, w)).collect(),
            }),
            frames,
        }
    }
}

/// The GHS frames this member has sent so far, by kind.
fn ghs_frames_sent(handle: &windrose_net::host_driver::GroupHandle) -> BTreeMap<String, u64> {
    let mut by_kind = BTreeMap::new();
    for c in handle.frames_sent() {
        if c.kind.name().starts_with("ghs_") {
            *by_kind.entry(c.kind.name().to_string()).or_default() += c.frames;
        }
    }
    by_kind
}

/// The changes a member fed of one link it owns: `(peer, count, the last (wall clock, weight)
/// fed)`.
pub(crate) type LinkFedView = (u32, u64, Vec<(f64, f64)>);

/// A member's live MST as its control socket gives it ([`ControlRequest::MstLive`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct LiveMstView {
    /// The group file's `[mst] build` (`auto`, `rows` or `ghs`) and test window.
    pub build: windrose_proto::mst_service::MstBuild,
    pub test_window: u32,
    pub generation: u32,
    pub epoch: u32,
    /// The whole tree as this member holds it, `(lo, hi)` (None until it holds all of it).
    pub tree: Option<Vec<(u32, u32)>>,
    /// When this member started its first build and first knew the tree complete, seconds
    /// since the Unix epoch on this machine's wall clock (members on one machine share it).
    pub started_unix_s: Option<f64>,
    pub built_unix_s: Option<f64>,
    /// Live-MST and GHS frames this member sent (`mst_*`, `ghs_*` kinds): frames and encoded
    /// bytes by kind.
    pub frames: BTreeMap<String, (u64, u64)>,
    /// When it first held its `(generation, epoch)` tree whole (wall clock, as above).
    #[serde(default)]
    pub stable_unix_s: Option<f64>,
    /// When it fed its last changes to a repair (wall clock, oldest first, the last 64).
    #[serde(default)]
    pub fed_unix_s: Vec<f64>,
    /// No repair runs or waits at it.
    #[serde(default)]
    pub idle: bool,
    /// The weights its tree uses for the links it owns (to larger ids): `(peer, weight)`.
    #[serde(default)]
    pub weights: Vec<(u32, f64)>,
    /// Per owned link it fed changes of: `(peer, count, the last (wall clock, weight) fed)`.
    #[serde(default)]
    pub fed_links: Vec<LinkFedView>,
    /// Its repair requests this generation: fed, merged, sent, received, queued and epochs
    /// started (the last two at the root).
    #[serde(default)]
    pub requests: windrose_proto::ghs_repair::RequestStats,
}

impl LiveMstView {
    fn of(
        handle: &windrose_net::host_driver::GroupHandle,
        settings: windrose_net::group::MstSettings,
    ) -> Option<LiveMstView> {
        let snap = handle.mst_live()?;
        let origin = snap
            .origin
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let at = |t: Option<windrose_proto::time::Time>| t.map(|t| origin + t.as_secs_f64());
        let mut frames: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for c in handle.frames_sent() {
            let kind = c.kind.name();
            if kind.starts_with("mst_") || kind.starts_with("ghs_") {
                let e = frames.entry(kind.to_string()).or_default();
                e.0 += c.frames;
                e.1 += c.bytes;
            }
        }
        Some(LiveMstView {
            build: settings.build,
            test_window: settings.test_window,
            generation: snap.state.generation,
            epoch: snap.state.epoch,
            tree: snap
                .state
                .tree
                .map(|t| t.into_iter().map(|(a, b)| (a.0, b.0)).collect()),
            started_unix_s: at(snap.state.built.0),
            built_unix_s: at(snap.state.built.1),
            frames,
            stable_unix_s: at(snap.state.stable_at),
            fed_unix_s: snap
                .state
                .fed_at
                .iter()
                .map(|&t| origin + t.as_secs_f64())
                .collect(),
            idle: snap.state.idle,
            weights: snap.state.weights.iter().map(|&(p, w)| (p.0, w)).collect(),
            fed_links: snap
                .state
                .fed_links
                .iter()
                .map(|f| {
                    let ws = f
                        .weights
                        .iter()
                        .map(|&(t, w)| (origin + t.as_secs_f64(), w))
                        .collect();
                    (f.peer.0, f.count, ws)
                })
                .collect(),
            requests: snap.state.requests,
        })
    }
}

/// Sets the live MST's weight of the link `lo`-`hi` at its owner, the smaller end (`windrose mst
/// --group --live --set-weight`).
pub(crate) fn set_live_weight(group: &Group, lo: u32, hi: u32, weight: f64) -> anyhow::Result<()> {
    let socket = running_member(group, lo).ok_or_else(|| {
        bad_input(format!(
            "member {lo} of group {} does not answer on {}",
            group.name(),
            default_socket(group, lo).display()
        ))
    })?;
    let rt = client_runtime()?;
    for r in rt.block_on(call(
        &socket,
        &ControlRequest::MstWeight { peer: hi, weight },
    ))? {
        if let ControlReply::Error(e) = r {
            return Err(bad_input(e));
        }
    }
    Ok(())
}

/// Every member's live MST, read from its default control socket (`windrose mst --group
/// --live`); a member that does not answer is an error naming it.
pub(crate) fn live_msts(group: &Group) -> anyhow::Result<Vec<(u32, Option<LiveMstView>)>> {
    let rt = client_runtime()?;
    let mut out = Vec::new();
    for m in group.members() {
        let socket = running_member(group, m.id.0).ok_or_else(|| {
            bad_input(format!(
                "member {} of group {} does not answer on {}: every member's live MST is read \
                 from its default control socket on this machine",
                m.id,
                group.name(),
                default_socket(group, m.id.0).display()
            ))
        })?;
        let mut view = None;
        for r in rt.block_on(call(&socket, &ControlRequest::MstLive))? {
            match r {
                ControlReply::MstLive(v) => view = v,
                ControlReply::Error(e) => return Err(bad_input(e)),
                _ => {}
            }
        }
        out.push((m.id.0, view));
    }
    Ok(out)
}

/// An `mst` run as its initiator saw it (in the Complete reply).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct MstView {
    /// Its own result (None: it delivered none, or bytes that do not parse).
    pub result: Option<MstOwn>,
    /// The GHS frames it sent during the run, by kind.
    pub frames: BTreeMap<String, u64>,
}

/// A member's [`MstResult`], ids as numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct MstOwn {
    pub nodes: u32,
    /// In the spec's unit, bit for bit (the workspace's JSON round-trips floats exactly).
    pub total: f64,
    pub branches: Vec<(u32, f64)>,
}

/// One member's measurement of its link to `peer`, as its weather reply gives it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MeasuredLink {
    pub member: u32,
    pub peer: u32,
    /// The round-trip forecast (the last sample before there is one), ms; None: not measured.
    pub rtt_ms: Option<f64>,
    /// The bandwidth forecast of this member's sends to `peer`, MB/s.
    pub mb_s: Option<f64>,
}

/// Every member's view of its links, read from its default control socket: `windrose mst
/// --group` weighs the graph from them. A member whose socket does not answer is an error
/// naming it (the command reads every member's weather, so every member must run here).
pub(crate) fn measured_links(group: &Group) -> anyhow::Result<Vec<MeasuredLink>> {
    let rt = client_runtime()?;
    let mut out = Vec::new();
    for m in group.members() {
        let socket = running_member(group, m.id.0).ok_or_else(|| {
            bad_input(format!(
                "member {} of group {} does not answer on {}: every member's weather is read \
                 from its default control socket on this machine",
                m.id,
                group.name(),
                default_socket(group, m.id.0).display()
            ))
        })?;
        for r in rt.block_on(call(&socket, &ControlRequest::Weather))? {
            if let ControlReply::Weather { links, .. } = r {
                out.extend(links.into_iter().map(|l| MeasuredLink {
                    member: m.id.0,
                    peer: l.peer,
                    rtt_ms: l.forecast_ms.or((l.samples > 0).then_some(l.last_ms)),
                    mb_s: l.mb_s,
                }));
            }
        }
    }
    Ok(out)
}

/// How a group's `mst` run ended, as its initiator replied.
pub(crate) struct GroupMstRun {
    pub finished: u32,
    pub failed: u32,
    /// From the request to the initiator's Complete, on its clock.
    pub seconds: f64,
    /// Each member's BLAKE3 of what it delivered (None: it reported none).
    pub digests: BTreeMap<u32, Option<String>>,
    pub view: MstView,
}

/// Runs GHS on `spec` through the member at `socket` and waits for its end.
pub(crate) fn run_mst(socket: &Path, spec: MstSpec) -> anyhow::Result<GroupMstRun> {
    let rt = client_runtime()?;
    for r in rt.block_on(call(socket, &ControlRequest::Mst(spec)))? {
        match r {
            ControlReply::Error(e) => return Err(bad_input(e)),
            ControlReply::Complete {
                finished,
                failed,
                seconds,
                members,
                mst,
                ..
            } => {
                return Ok(GroupMstRun {
                    finished,
                    failed,
                    seconds,
                    digests: members.into_iter().map(|m| (m.member, m.blake3)).collect(),
                    view: mst.context(
                        "the member's Complete reply has no MST result: is it an older windrose?",
                    )?,
                })
            }
            _ => {}
        }
    }
    anyhow::bail!("the member closed the control connection before the MST run ended")
}

/// The runtime of a control client's calls.
fn client_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}
