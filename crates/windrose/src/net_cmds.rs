//! The real-network commands: `windrose node` (serve one run as a member of a group),
//! `windrose bcast` (broadcast a file to a group from its root, with a progress bar and a
//! BLAKE3 check of what every node received), `windrose scatter` (the divisible-load scatter
//! from the root, every node hashing its share as its compute step, measured finish times
//! beside the schedule's prediction), `windrose multicast` (MOB, BitTorrent, Balanced
//! Multicasting or MagPIe from the root, every piece verified on arrival, the same BLAKE3
//! check) and `windrose local` (start N node processes on loopback and run the broadcast, or
//! with `--scatter` the scatter, with `--protocol` a multicast, all in one command). The driver
//! is `windrose_net`.
//!
//! When the member a root command names (`--id`) already runs `windrose group serve` on this
//! machine, `bcast`, `multicast` and `scatter` start their collective through that member's
//! control socket instead (as `windrose group start` does) and print its result: a collective
//! started from inside a running group.

use crate::collective_opts::{
    handshake_of, multicast_spec, scatter_schedule, KeyOpts, PlanNote, Prediction, ScatterOpts,
};
use crate::error::{bad_input, net_err, OrBadInput};
use crate::group_cmd::{self, ControlRequest};
use crate::output::{print, print_json, vtable};
use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::units::parse_size;
use windrose_model::{LinkCosts, NodeId};
use windrose_net::auth::{load_group_key, GroupKey, NoiseHandshake, KEY_ENV, KEY_FILE_ENV};
use windrose_net::bootstrap::{Bootstrap, GroupFile, Handshake};
use windrose_net::group::Group;
use windrose_net::multicast::{MobVariant, MulticastProtocol};
use windrose_net::outcome::RunStatus;
use windrose_net::sink::output_path_problem;
use windrose_net::trees::group_tree;
use windrose_net::{random_data, NetEvent, RunOutcome, SourceFile, Timeouts};
use windrose_proto::collective::{CollectiveSpec, MulticastParams, TreeSpec};
use windrose_proto::scatter::ScatterConfig;
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_trees::dlt::Schedule;
use windrose_trees::TreeAlgorithm;

mod host_run;

/// `windrose node`: one member of a group, serving one run.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The group file (TOML: name, protocol_version, `[[node]]` id/addr/cluster).
    #[arg(long, value_name = "FILE")]
    group: PathBuf,
    /// This node's id in the group.
    #[arg(long)]
    id: u32,
    /// Write the received data of a broadcast or multicast to FILE (under a temporary name
    /// until complete); without it the data is only hashed. A scatter writes nothing: each node
    /// hashes its share.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Give up when no root has sent a job within this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    wait: f64,
    #[command(flatten)]
    key: KeyOpts,
    /// Print the node's report as JSON.
    #[arg(long)]
    json: bool,
    /// Print nothing on success.
    #[arg(long)]
    quiet: bool,
    /// Serve the first collective announced to this member, then leave: what `windrose
    /// local` runs. Without it the node serves collectives until told to leave (`windrose
    /// group serve` with its defaults).
    #[arg(long)]
    once: bool,
    /// With --once: the seed of this member's random choices in the collective it serves (a
    /// multicast's piece picks); `windrose local --seed` passes its own to every node.
    #[arg(long, default_value_t = 1, requires = "once")]
    seed: u64,
}

/// `windrose keygen`: a fresh group key.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The new key file (must not exist; written with mode 0600).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Options shared by `bcast`, `scatter` and `local`: the tree and how the run is watched.
#[derive(Debug, Args)]
pub struct TreeOpts {
    /// The tree (max-bottleneck on latency costs is the MST: the smallest worst latency).
    #[arg(long, default_value = "balanced-path", value_parser = crate::tree::algorithm_parser())]
    tree: TreeAlgorithm,
    /// Link costs to build the tree from (a cost file as `windrose tree build` reads, one node
    /// per group member); default: 0.1 ms inside a cluster, 10 ms between clusters.
    #[arg(long, value_name = "FILE")]
    costs: Option<PathBuf>,
    #[command(flatten)]
    watch: WatchOpts,
}

/// How a run from the root is watched and reported (every root command).
#[derive(Clone, Debug, Args)]
pub struct WatchOpts {
    /// Seconds without any progress before the run is given up.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
    /// Seconds to keep retrying to reach a node that does not answer yet.
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    connect_timeout: f64,
    /// Write every node's link measurements (RTT and throughput series) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    measurements: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Print `windrose: go` on standard error the moment the root sends Go, so a harness
    /// (`windrose testbed run`) can start its clock with the collective's.
    #[arg(long, hide = true)]
    announce_go: bool,
}

/// `windrose bcast`: broadcast a file from the root of a group.
#[derive(Debug, Args)]
pub struct BcastArgs {
    /// The group file.
    #[arg(long, value_name = "FILE")]
    group: PathBuf,
    /// The file to broadcast (memory-mapped, never read whole into memory).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// The root's node id (this process; every other member must run `windrose node`), or a
    /// member running `windrose group serve` on this machine, which then starts it.
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// Segment size, the unit of pipelining (e.g. 1MiB, 256KiB, 4MB; MB = 10^6 bytes, MiB =
    /// 2^20; one segment as large as the file is store-and-forward).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    segment: u64,
    #[command(flatten)]
    key: KeyOpts,
    #[command(flatten)]
    opts: TreeOpts,
}

/// `windrose scatter`: the divisible-load scatter from the root of a group.
#[derive(Debug, Args)]
pub struct ScatterArgs {
    /// The group file.
    #[arg(long, value_name = "FILE")]
    group: PathBuf,
    /// The load (memory-mapped, never read whole into memory); default: a random load of
    /// --load-size bytes from --seed.
    #[arg(long, value_name = "FILE", conflicts_with = "load_size")]
    file: Option<PathBuf>,
    /// Size of the random load when no --file is given (MB = 10^6 bytes, MiB = 2^20).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    load_size: u64,
    /// Seed of the random load.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The root's node id (this process; every other member must run `windrose node`), or a
    /// member running `windrose group serve` on this machine, which then starts it.
    #[arg(long, default_value_t = 0)]
    id: u32,
    #[command(flatten)]
    scatter: ScatterOpts,
    #[command(flatten)]
    key: KeyOpts,
    #[command(flatten)]
    opts: TreeOpts,
}

/// `windrose local`: a whole group on this machine.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Number of nodes (node processes: N-1, plus this process as the root), 2 to 250.
    #[arg(long, default_value_t = 8)]
    nodes: usize,
    /// Number of clusters (nodes split into contiguous blocks).
    #[arg(long, default_value_t = 1)]
    clusters: usize,
    /// The file to broadcast; default: a random payload of --size bytes from --seed.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Size of the random payload when no --file is given (e.g. 64MB = 64 000 000 bytes,
    /// 64MiB = 67 108 864).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Seed of the random payload (and of a multicast's random choices of peers and pieces).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the group file, the nodes' logs and their received files (node-I.bin) in DIR;
    /// default: a temporary directory, removed at the end, and received data only hashed.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// The port every node listens on (each on its own 127.0.0.x address); default: a free one.
    #[arg(long)]
    port: Option<u16>,
    /// Segment size of the broadcast, the unit of pipelining (e.g. 1MiB, 256KiB, 4MB).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    segment: u64,
    /// Run the divisible-load scatter of the payload instead of a broadcast: every node hashes
    /// its share (BLAKE3) and its measured finish time is printed beside the prediction.
    #[arg(long, conflicts_with = "segment")]
    scatter: bool,
    /// What to run: broadcast (the pipelined tree broadcast) or a piece-based multicast among
    /// all nodes: mob, bittorrent, balanced or magpie (clusters from --clusters).
    #[arg(long, default_value = "broadcast", value_parser = parse_run_protocol)]
    protocol: RunProtocol,
    #[command(flatten)]
    multicast_opts: MulticastOpts,
    #[command(flatten)]
    scatter_opts: ScatterOpts,
    /// A group key for the run; default: a fresh one made for this run (the node processes
    /// get it through their environment).
    #[command(flatten)]
    key: KeyOpts,
    #[command(flatten)]
    opts: TreeOpts,
}

/// What `windrose local` runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RunProtocol {
    /// The pipelined tree broadcast.
    Broadcast,
    /// A piece-based multicast.
    Multicast(MulticastProtocol),
}

fn parse_run_protocol(s: &str) -> Result<RunProtocol, String> {
    match s.trim() {
        "broadcast" => Ok(RunProtocol::Broadcast),
        t => t.parse().map(RunProtocol::Multicast).map_err(|_| {
            format!(
                "unknown protocol {s:?}: expected broadcast, mob, bittorrent, balanced or magpie"
            )
        }),
    }
}

fn parse_multicast_protocol(s: &str) -> Result<MulticastProtocol, String> {
    s.trim().parse()
}

/// How a multicast is cut and planned (`multicast`, `local --protocol`).
#[derive(Debug, Args)]
pub struct MulticastOpts {
    /// Multicast piece size, the unit every node verifies (BLAKE3), announces and forwards
    /// (e.g. 1MiB, 256KiB); default 1MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    piece: Option<u64>,
    /// Balanced Multicasting plans its trees and rates from the capacities of this platform (a
    /// `[platform]` table as in data/scenarios/*.toml, one node per group member, the group's
    /// clusters in order); default: every link alike (the output says so).
    #[arg(long, value_name = "FILE")]
    platform: Option<PathBuf>,
    /// Which MOB (--protocol mob only): windrose (rarest-first in the mob share, request depth
    /// adapted per peer) or paper (seed 002's random pieces, 5 requests per peer), so the
    /// paper's protocol can be measured on real links too.
    #[arg(long, value_name = "VARIANT")]
    mob_variant: Option<MobVariant>,
}

/// `windrose multicast`: a piece-based multicast of a file from the root of a group.
#[derive(Debug, Args)]
pub struct MulticastArgs {
    /// The protocol: mob, bittorrent, balanced or magpie.
    #[arg(long, value_parser = parse_multicast_protocol)]
    protocol: MulticastProtocol,
    /// The group file (each node's cluster is what MOB's mob shares and MagPIe's tree use).
    #[arg(long, value_name = "FILE")]
    group: PathBuf,
    /// The file to multicast (memory-mapped, never read whole into memory).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// The root's node id (this process; every other member must run `windrose node`), or a
    /// member running `windrose group serve` on this machine, which then starts it.
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// Seed of every node's random choices (peers, pieces).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    multicast: MulticastOpts,
    #[command(flatten)]
    key: KeyOpts,
    #[command(flatten)]
    watch: WatchOpts,
}

fn secs(v: f64, what: &str) -> anyhow::Result<Duration> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(bad_input(format!(
            "{what} {v}: must be a positive number of seconds"
        )))
    }
}

/// Runs `windrose keygen`.
pub fn run_keygen(args: KeygenArgs) -> anyhow::Result<()> {
    if args.out.exists() {
        return Err(bad_input(format!(
            "--out {}: the file exists; keygen never overwrites a key",
            args.out.display()
        )));
    }
    GroupKey::generate()
        .write_new_file(&args.out)
        .map_err(net_err)?;
    print(&format!(
        "wrote a new group key to {} (mode 0600): give it to every member with --key-file or \
         {KEY_FILE_ENV}\n",
        args.out.display()
    ))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Runs `windrose node`.
pub fn run_node_cmd(args: NodeArgs) -> anyhow::Result<()> {
    // A bad group file or id is an error before anything starts.
    GroupFile {
        path: args.group.clone(),
        id: args.id,
    }
    .membership()
    .map_err(net_err)?;
    if let Some(out) = &args.out {
        // Before waiting for a job: a FIFO, device, link or directory is never renamed over.
        if let Some(why) = output_path_problem(out) {
            return Err(bad_input(format!("--out {why}")));
        }
    }
    if !args.once {
        for (given, flag) in [(args.out.is_some(), "--out"), (args.json, "--json")] {
            if given {
                return Err(bad_input(format!(
                    "{flag} describes one collective's result: add --once, or serve many with \
                     `windrose group serve --out-dir DIR`"
                )));
            }
        }
    }
    let node = match args.once {
        true => Some(group_cmd::NodeOnce {
            out: args.out,
            wait: secs(args.wait, "--wait")?,
            json: args.json,
            seed: args.seed,
        }),
        false => None,
    };
    group_cmd::serve_member(args.group, args.id, args.key, args.quiet, node)
}

/// The tree for a run rooted at `root` over `group`.
fn build_tree(
    group: &Group,
    opts: &TreeOpts,
    root: NodeId,
) -> anyhow::Result<windrose_trees::Tree> {
    let tree = match &opts.costs {
        Some(path) => {
            let costs = windrose_model::load_costs(path).or_bad_input()?;
            if costs.node_count() != group.len() {
                return Err(bad_input(format!(
                    "{}: {} nodes, but the group has {}",
                    path.display(),
                    costs.node_count(),
                    group.len()
                )));
            }
            opts.tree.build(&costs, Some(&group.clusters()), root)
        }
        None => group_tree(opts.tree, group, root),
    };
    tree.or_bad_input_about(format_args!("--tree {}", opts.tree))
}

/// The root's side of a run: its runtime and group, the data, how the run is watched.
struct RootRun<'a> {
    rt: &'a tokio::runtime::Runtime,
    group: Arc<Group>,
    root: NodeId,
    /// How the data is named in the output.
    source: String,
    data: Bytes,
    /// The file `data` maps, if any: the root calls the run off if it changes.
    file: Option<Arc<SourceFile>>,
    watch: &'a WatchOpts,
    timeouts: Timeouts,
    /// How connections are verified (the group key's handshake, or the plain one).
    handshake: Arc<dyn Handshake>,
    /// The seed of the root's random choices (a multicast's piece picks); every member has
    /// its own (`local` passes its seed to its nodes).
    seed: u64,
}

/// Runs the root of a broadcast in segments of `segment` bytes and prints the result.
fn broadcast(run: RootRun<'_>, tree_opts: &TreeOpts, segment: u64) -> anyhow::Result<RunOutcome> {
    let (opts, source) = (run.watch, run.source.clone());
    if segment == 0 {
        return Err(bad_input("--segment must be at least 1 byte"));
    }
    let tree = build_tree(&run.group, tree_opts, run.root)?;
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&tree),
        segment_bytes: segment,
        max_frame_payload: BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD,
    };
    let outcome = run.execute_on_host(spec, "broadcast", None)?;
    if opts.json {
        print_json(&outcome)?;
    } else {
        print(&render(&outcome, &source, tree_opts.tree, segment))?;
    }
    Ok(outcome)
}

fn write_measurements(outcome: &RunOutcome, opts: &WatchOpts) -> anyhow::Result<()> {
    if let Some(path) = &opts.measurements {
        let json = serde_json::to_string_pretty(&outcome.measurements())?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The line `--announce-go` prints on standard error when the root sends Go.
pub const GO_LINE: &str = "windrose: go";

/// The progress bar: bytes held by all receivers over `total * receivers` (a broadcast), or
/// nodes done over `receivers` (a scatter, whose nodes hold different amounts).
async fn progress(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<NetEvent>,
    total: u64,
    receivers: usize,
    show: bool,
    scatter: bool,
    announce_go: bool,
) {
    let len = if scatter {
        receivers as u64
    } else {
        total.saturating_mul(receivers as u64)
    };
    let bar = if show {
        ProgressBar::new(len.max(1))
    } else {
        ProgressBar::hidden()
    };
    let template = if scatter {
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} nodes {msg}"
    } else {
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}) {msg}"
    };
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("connecting");
    let mut held: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut reported = 0;
    while let Some(ev) = rx.recv().await {
        match ev {
            NetEvent::Started { .. } => {
                if announce_go {
                    use std::io::Write as _;
                    let mut err = std::io::stderr().lock();
                    let _ = writeln!(err, "{GO_LINE}");
                    let _ = err.flush();
                }
                bar.reset_elapsed();
                bar.set_message(if scatter {
                    "scattering"
                } else {
                    "broadcasting"
                });
            }
            NetEvent::Progress {
                node, done_bytes, ..
            } => {
                held.insert(node, done_bytes);
            }
            NetEvent::Reported { node, .. } => {
                held.insert(node, total);
                reported += 1;
                bar.set_message(format!("{reported}/{receivers} nodes done"));
            }
            NetEvent::PeerFailed { peer, reason } => {
                bar.println(format!("node {peer} failed: {reason}"));
            }
            NetEvent::Rejoined { peer } => {
                bar.println(format!("node {peer} restarted and rejoined the run"));
            }
            _ => {}
        }
        bar.set_position(if scatter {
            reported as u64
        } else {
            held.values().sum()
        });
    }
    bar.finish_and_clear();
}

fn short(hash: &str) -> String {
    hash.chars().take(16).collect()
}

/// The human-readable result table.
fn render(o: &RunOutcome, source: &str, tree: TreeAlgorithm, segment: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "broadcast of {source} ({} bytes, BLAKE3 {}) from node {} over a {} tree, segments of {} bytes",
        o.total_len,
        short(&o.root_blake3),
        o.root,
        tree,
        segment
    );
    s.push_str(&node_table(o));
    s
}

/// Every node's row (status, bytes, completion, throughput, BLAKE3 check) and the summary line.
fn node_table(o: &RunOutcome) -> String {
    let mut s = String::new();
    let rows: Vec<Vec<String>> = o
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.node.to_string(),
                n.cluster.to_string(),
                match n.status {
                    RunStatus::Finished => "finished".into(),
                    RunStatus::Failed => "FAILED".into(),
                },
                n.bytes_received.to_string(),
                n.completion_s.map_or("-".into(), |c| format!("{c:.3}")),
                n.throughput_mb_s.map_or("-".into(), |t| format!("{t:.1}")),
                n.blake3.as_deref().map_or("-".into(), short),
                if n.verified {
                    "ok".into()
                } else {
                    "MISMATCH".into()
                },
            ]
        })
        .collect();
    for line in vtable(
        &[
            "node",
            "cluster",
            "status",
            "received_bytes",
            "completion_s",
            "MB/s",
            "blake3",
            "check",
        ],
        &rows,
    ) {
        let _ = writeln!(s, "{line}");
    }
    for n in &o.nodes {
        if let (Some(kept), RunStatus::Finished) = (n.resumed_bytes, n.status) {
            let _ = writeln!(
                s,
                "node {} restarted mid-run and rejoined, resuming from {kept} verified bytes on disk",
                n.node
            );
        }
    }
    if o.all_verified() {
        let slowest = o
            .nodes
            .iter()
            .filter_map(|n| n.completion_s)
            .fold(0.0, f64::max);
        let _ =
            writeln!(
            s,
            "all {} nodes received the root's bytes; the last finished after {:.3} s ({:.1} MB/s)",
            o.nodes.len(),
            slowest,
            if slowest > 0.0 { o.total_len as f64 / slowest / 1e6 } else { 0.0 }
        );
    } else {
        for f in o.failures() {
            let _ = writeln!(s, "{f}");
        }
    }
    s
}

fn check(outcome: &RunOutcome) -> anyhow::Result<()> {
    if outcome.all_verified() {
        Ok(())
    } else {
        let failures = outcome.failures();
        let what = if outcome.collective == "scatter" {
            "compute their share of the load"
        } else {
            "receive the root's bytes"
        };
        anyhow::bail!(
            "{} of {} nodes did not {what}: {}",
            failures.len(),
            outcome.nodes.len(),
            failures.join("; ")
        )
    }
}

/// `windrose scatter --json`: the run as the root saw it, with the schedule and how its finish
/// times were predicted.
#[derive(Serialize)]
struct ScatterOutput<'a> {
    prediction: &'a Prediction,
    schedule: &'a Schedule,
    /// The root's predicted and measured finish (its own share), in seconds after the start.
    root_predicted_finish_s: Option<f64>,
    root_measured_finish_s: Option<f64>,
    #[serde(flatten)]
    run: &'a RunOutcome,
}

/// Runs the root of a divisible-load scatter and prints the result.
fn scatter(
    run: RootRun<'_>,
    tree_opts: &TreeOpts,
    sopts: &ScatterOpts,
) -> anyhow::Result<RunOutcome> {
    let (opts, source, root) = (run.watch, run.source.clone(), run.root);
    let tree = build_tree(&run.group, tree_opts, root)?;
    let (schedule, prediction) =
        scatter_schedule(&run.group, &run.data, &tree, tree_opts.tree, sopts)?;
    let spec = CollectiveSpec::Scatter {
        schedule: schedule.clone(),
        max_frame_payload: ScatterConfig::DEFAULT_MAX_FRAME_PAYLOAD,
        parallel: sopts.parallel,
    };
    let outcome = run.execute_on_host(spec, "scatter", None)?;
    let root_predicted = schedule.node(root).map(|s| s.predicted_finish_s);
    let root_measured = outcome
        .root_share
        .as_ref()
        .map(|s| s.computed_ns as f64 * 1e-9);
    if opts.json {
        print_json(&ScatterOutput {
            prediction: &prediction,
            schedule: &schedule,
            root_predicted_finish_s: root_predicted,
            root_measured_finish_s: root_measured,
            run: &outcome,
        })?;
    } else {
        print(&render_scatter(
            &outcome,
            &schedule,
            &prediction,
            &source,
            tree_opts.tree,
            sopts.parallel,
        ))?;
    }
    Ok(outcome)
}

/// The human-readable result of a scatter: every node's share, predicted and measured finish.
fn render_scatter(
    o: &RunOutcome,
    schedule: &Schedule,
    prediction: &Prediction,
    source: &str,
    tree: TreeAlgorithm,
    parallel: bool,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "scatter of {source} ({} bytes) from node {} over a {tree} tree, {} ({} order); every \
         node hashes its share with BLAKE3",
        o.total_len,
        o.root,
        if parallel {
            "children served at once"
        } else {
            "children served one after the other"
        },
        schedule.policy
    );
    let _ = writeln!(s, "prediction: {}", prediction.basis);
    let ratio = |m: Option<f64>, p: Option<f64>| match (m, p) {
        (Some(m), Some(p)) if p > 0.0 => format!("{:.2}", m / p),
        _ => "-".into(),
    };
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    let parent = |n: NodeId| {
        schedule
            .node(n)
            .and_then(|s| s.parent)
            .map_or("-".into(), |p| p.to_string())
    };
    let mut rows = Vec::new();
    if let Some(share) = &o.root_share {
        let predicted = schedule.node(o.root).map(|s| s.predicted_finish_s);
        let measured = Some(share.computed_ns as f64 * 1e-9);
        rows.push(vec![
            o.root.to_string(),
            "-".into(),
            "root".into(),
            share.offset.to_string(),
            share.len.to_string(),
            opt(predicted),
            opt(measured),
            ratio(measured, predicted),
            short(&share.blake3),
            "-".into(),
        ]);
    }
    for n in &o.nodes {
        rows.push(vec![
            n.node.to_string(),
            parent(n.node),
            match n.status {
                RunStatus::Finished => "finished".into(),
                RunStatus::Failed => "FAILED".into(),
            },
            n.share
                .as_ref()
                .map_or("-".into(), |s| s.offset.to_string()),
            n.share.as_ref().map_or("-".into(), |s| s.len.to_string()),
            opt(n.predicted_finish_s),
            opt(n.measured_finish_s),
            ratio(n.measured_finish_s, n.predicted_finish_s),
            n.blake3.as_deref().map_or("-".into(), short),
            if n.verified {
                "ok".into()
            } else {
                "MISMATCH".into()
            },
        ]);
    }
    for line in vtable(
        &[
            "node",
            "parent",
            "status",
            "share_offset",
            "share_bytes",
            "predicted_s",
            "measured_s",
            "measured/predicted",
            "blake3",
            "check",
        ],
        &rows,
    ) {
        let _ = writeln!(s, "{line}");
    }
    if o.all_verified() {
        let last = o
            .nodes
            .iter()
            .filter_map(|n| n.measured_finish_s)
            .chain(o.root_share.as_ref().map(|r| r.computed_ns as f64 * 1e-9))
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "all {} nodes computed the BLAKE3 of their shares as the root expected; the last \
             finished after {last:.3} s, predicted {:.3} s (measured/predicted {})",
            o.nodes.len(),
            prediction.predicted_finish_s,
            ratio(Some(last), Some(prediction.predicted_finish_s))
        );
    } else {
        for f in o.failures() {
            let _ = writeln!(s, "{f}");
        }
    }
    s
}

/// Runs `windrose scatter`.
pub fn run_scatter(args: ScatterArgs) -> anyhow::Result<()> {
    let membership = GroupFile {
        path: args.group.clone(),
        id: args.id,
    }
    .membership()
    .map_err(net_err)?;
    let unsupported = [
        (args.file.is_none(), "a random load (give --file)"),
        (args.opts.costs.is_some(), "--costs"),
        (args.opts.watch.measurements.is_some(), "--measurements"),
    ];
    if let Some(socket) =
        through_member(&membership.group, args.id, &unsupported, &args.opts.watch)?
    {
        let mut opts = args.scatter.clone();
        if let Some(p) = &opts.speeds {
            opts.speeds = Some(group_cmd::absolute(p, "--speeds")?);
        }
        let request = ControlRequest::Scatter {
            // Some: refused above otherwise.
            file: group_cmd::absolute(args.file.as_deref().unwrap_or(Path::new("")), "--file")?,
            tree: args.opts.tree.to_string(),
            opts,
        };
        return group_cmd::start_through_member(&socket, &request, args.opts.watch.json);
    }
    let (data, source, file) = load_or_random(args.file.as_deref(), args.load_size, args.seed)?;
    let timeouts = Timeouts {
        idle: secs(args.opts.watch.timeout, "--timeout")?,
        connect: secs(args.opts.watch.connect_timeout, "--connect-timeout")?,
        ..Timeouts::default()
    };
    let rt = runtime()?;
    let run = RootRun {
        rt: &rt,
        group: membership.group,
        root: membership.me,
        source,
        data,
        file,
        watch: &args.opts.watch,
        timeouts,
        handshake: handshake_of(&args.key, false)?,
        seed: args.seed,
    };
    let outcome = scatter(run, &args.opts, &args.scatter)?;
    check(&outcome)
}

/// The data mapped from a file, and the file.
type Loaded = (Bytes, String, Option<Arc<SourceFile>>);

/// The file mapped, or `size` random bytes from `seed`; how to name it; the file.
fn load_or_random(file: Option<&Path>, size: u64, seed: u64) -> anyhow::Result<Loaded> {
    Ok(match file {
        Some(f) => load(f)?,
        None => (
            random_data(size, seed).or_bad_input()?,
            format!("a random payload (seed {seed})"),
            None,
        ),
    })
}

/// The file mapped, how to name it, and the file (for the root's checks that it stays as it
/// was).
fn load(f: &Path) -> anyhow::Result<Loaded> {
    let (data, file) = SourceFile::map(f).or_bad_input()?;
    Ok((data, f.display().to_string(), Some(file)))
}

/// Member `id` of `group` when it already runs on this machine (`windrose group serve`, its
/// default control socket answering): a root command then starts its collective through that
/// member, from inside the running group, instead of joining the group itself (the member
/// holds its port anyway). What only a root of the command's own could do (`unsupported`, each
/// with whether it was asked for) is refused by name.
fn through_member(
    group: &Group,
    id: u32,
    unsupported: &[(bool, &str)],
    watch: &WatchOpts,
) -> anyhow::Result<Option<PathBuf>> {
    let Some(socket) = group_cmd::running_member(group, id) else {
        return Ok(None);
    };
    if let Some((_, what)) = unsupported.iter().find(|(asked, _)| *asked) {
        return Err(bad_input(format!(
            "member {id} of group {} runs on this machine (control socket {}): a collective \
             started through it cannot use {what}; leave that out, or stop the member",
            group.name(),
            socket.display()
        )));
    }
    if !(watch.quiet || watch.json) {
        eprintln!(
            "member {id} of group {} runs on this machine: starting through its control socket {}",
            group.name(),
            socket.display()
        );
    }
    Ok(Some(socket))
}

/// Runs `windrose bcast`.
pub fn run_bcast(args: BcastArgs) -> anyhow::Result<()> {
    let membership = GroupFile {
        path: args.group.clone(),
        id: args.id,
    }
    .membership()
    .map_err(net_err)?;
    let unsupported = [
        (args.opts.costs.is_some(), "--costs"),
        (args.opts.watch.measurements.is_some(), "--measurements"),
    ];
    if let Some(socket) =
        through_member(&membership.group, args.id, &unsupported, &args.opts.watch)?
    {
        if args.segment == 0 {
            return Err(bad_input("--segment must be at least 1 byte"));
        }
        let request = ControlRequest::Broadcast {
            file: group_cmd::absolute(&args.file, "--file")?,
            tree: args.opts.tree.to_string(),
            segment_bytes: args.segment,
        };
        return group_cmd::start_through_member(&socket, &request, args.opts.watch.json);
    }
    let (data, source, file) = load(&args.file)?;
    let timeouts = Timeouts {
        idle: secs(args.opts.watch.timeout, "--timeout")?,
        connect: secs(args.opts.watch.connect_timeout, "--connect-timeout")?,
        ..Timeouts::default()
    };
    let rt = runtime()?;
    let run = RootRun {
        rt: &rt,
        group: membership.group,
        root: membership.me,
        source,
        data,
        file,
        watch: &args.opts.watch,
        timeouts,
        handshake: handshake_of(&args.key, false)?,
        seed: 1, // a broadcast makes no random choices
    };
    let outcome = broadcast(run, &args.opts, args.segment)?;
    check(&outcome)
}

/// Largest piece: one piece travels in one frame.
const MAX_PIECE_BYTES: u64 = windrose_net::MAX_PIECE_BYTES as u64;
/// Piece size when none is given.
const DEFAULT_PIECE_BYTES: u64 = 1 << 20;

impl MulticastOpts {
    fn any_given(&self) -> bool {
        self.piece.is_some() || self.platform.is_some()
    }

    /// Checks the values against the protocol before any process starts.
    fn check(&self, protocol: MulticastProtocol) -> anyhow::Result<()> {
        if self.platform.is_some() && protocol != MulticastProtocol::Balanced {
            return Err(bad_input(format!(
                "--platform is only used by --protocol balanced, not {protocol}"
            )));
        }
        crate::collective_opts::check_mob_variant(self.mob_variant, protocol)?;
        let piece = self.piece.unwrap_or(DEFAULT_PIECE_BYTES);
        if piece == 0 || piece > MAX_PIECE_BYTES {
            return Err(bad_input(format!(
                "--piece {piece}: must be 1 byte to {MAX_PIECE_BYTES} bytes (one piece per frame)"
            )));
        }
        Ok(())
    }
}

/// `windrose multicast --json` (and `local --protocol P --json`): the run with its piece size
/// and plan.
#[derive(Serialize)]
struct MulticastOutput<'a> {
    piece_bytes: u64,
    plan: Option<&'a PlanNote>,
    #[serde(flatten)]
    run: &'a RunOutcome,
}

/// Runs the root of a multicast with `protocol` and prints the result.
fn multicast(
    run: RootRun<'_>,
    protocol: MulticastProtocol,
    mopts: &MulticastOpts,
) -> anyhow::Result<RunOutcome> {
    let (watch, source) = (run.watch, run.source.clone());
    mopts.check(protocol)?;
    let piece = mopts.piece.unwrap_or(DEFAULT_PIECE_BYTES);
    let (spec, note) = multicast_spec(
        &run.group,
        run.root,
        protocol,
        mopts.platform.as_deref(),
        mopts.mob_variant.unwrap_or_default(),
    )?;
    // MAX_PIECE_BYTES < 2^32, checked above.
    let spec = CollectiveSpec::multicast(
        protocol,
        MulticastParams::of(&spec),
        &run.data,
        piece as u32,
    )
    .or_bad_input_about(format_args!("--piece {piece}"))?;
    let outcome = run.execute_on_host(spec, "multicast", Some(protocol))?;
    if watch.json {
        print_json(&MulticastOutput {
            piece_bytes: piece,
            plan: note.as_ref(),
            run: &outcome,
        })?;
    } else {
        print(&render_multicast(
            &outcome,
            &source,
            protocol,
            piece,
            note.as_ref(),
        ))?;
    }
    Ok(outcome)
}

/// The human-readable result of a multicast.
fn render_multicast(
    o: &RunOutcome,
    source: &str,
    protocol: MulticastProtocol,
    piece: u64,
    note: Option<&PlanNote>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{protocol} multicast of {source} ({} bytes, BLAKE3 {}) from node {} in {} pieces of {} \
         bytes, each verified (BLAKE3) by every node on arrival",
        o.total_len,
        short(&o.root_blake3),
        o.root,
        o.total_len.div_ceil(piece.max(1)),
        piece
    );
    if let Some(n) = note {
        let _ = writeln!(s, "plan: {}", n.basis);
    }
    s.push_str(&node_table(o));
    s
}

/// Runs `windrose multicast`.
pub fn run_multicast(args: MulticastArgs) -> anyhow::Result<()> {
    args.multicast.check(args.protocol)?;
    let membership = GroupFile {
        path: args.group.clone(),
        id: args.id,
    }
    .membership()
    .map_err(net_err)?;
    // A running member draws its collectives' random choices from its own seed.
    let unsupported = [
        (args.seed != 1, "--seed"),
        (args.watch.measurements.is_some(), "--measurements"),
    ];
    if let Some(socket) = through_member(&membership.group, args.id, &unsupported, &args.watch)? {
        let request = ControlRequest::Multicast {
            file: group_cmd::absolute(&args.file, "--file")?,
            protocol: args.protocol.to_string(),
            // At most MAX_PIECE_BYTES < 2^32: checked above.
            piece_bytes: args.multicast.piece.unwrap_or(DEFAULT_PIECE_BYTES) as u32,
            platform: match &args.multicast.platform {
                Some(p) => Some(group_cmd::absolute(p, "--platform")?),
                None => None,
            },
        };
        return group_cmd::start_through_member(&socket, &request, args.watch.json);
    }
    let (data, source, file) = load(&args.file)?;
    let timeouts = Timeouts {
        idle: secs(args.watch.timeout, "--timeout")?,
        connect: secs(args.watch.connect_timeout, "--connect-timeout")?,
        ..Timeouts::default()
    };
    let rt = runtime()?;
    let run = RootRun {
        rt: &rt,
        group: membership.group,
        root: membership.me,
        source,
        data,
        file,
        watch: &args.watch,
        timeouts,
        handshake: handshake_of(&args.key, false)?,
        seed: args.seed,
    };
    let outcome = multicast(run, args.protocol, &args.multicast)?;
    check(&outcome)
}

/// Child processes killed if still running when dropped.
struct Children(Vec<(u32, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A port free on every address `127.0.0.2 ..= 127.0.0.(n+1)` right now.
fn free_port(n: usize) -> anyhow::Result<u16> {
    for _ in 0..20 {
        let probe = std::net::TcpListener::bind("127.0.0.2:0")
            .context("binding a loopback address (127.0.0.2) to find a free port")?;
        let port = probe.local_addr()?.port();
        drop(probe);
        let free =
            |i: usize| std::net::TcpListener::bind(format!("127.0.0.{}:{port}", i + 2)).is_ok();
        if (0..n).all(free) {
            return Ok(port);
        }
    }
    anyhow::bail!("found no port free on all of 127.0.0.2..127.0.0.{}", n + 1)
}

/// Checks that the node processes of `local` can listen on `port` (node i on 127.0.0.(i+2); the
/// root listens on nothing): a port taken by another program would otherwise show only as the
/// root's "no answer" from whatever holds it.
fn check_port(port: u16, n: usize) -> anyhow::Result<()> {
    if port == 0 {
        return Err(bad_input(
            "--port 0: every node needs a port the others can dial (leave --port out for a free one)",
        ));
    }
    for i in 1..n {
        let addr = format!("127.0.0.{}:{port}", i + 2);
        if let Err(e) = std::net::TcpListener::bind(&addr) {
            return Err(bad_input(format!(
                "--port {port}: node {i} cannot listen on {addr}: {e} (leave --port out for a \
                 free one)"
            )));
        }
    }
    Ok(())
}

/// Runs `windrose local`.
pub fn run_local(args: LocalArgs) -> anyhow::Result<()> {
    if !(2..=250).contains(&args.nodes) {
        return Err(bad_input(format!(
            "--nodes {}: must be 2 to 250",
            args.nodes
        )));
    }
    match args.protocol {
        RunProtocol::Multicast(p) if args.scatter => {
            return Err(bad_input(format!(
                "--scatter and --protocol {p} exclude each other: the scatter is not a multicast"
            )))
        }
        RunProtocol::Broadcast if args.multicast_opts.any_given() => {
            return Err(bad_input(
                "--piece and --platform are multicast options: add --protocol mob, bittorrent, \
                 balanced or magpie",
            ))
        }
        _ => {}
    }
    if let RunProtocol::Multicast(p) = args.protocol {
        args.multicast_opts.check(p)?;
    }
    if !args.scatter && args.scatter_opts.any_given() {
        return Err(bad_input(
            "--speeds, --hash-mb-s, --link-mb-s, --order and --parallel are scatter options: \
             add --scatter",
        ));
    }
    let timeout = secs(args.opts.watch.timeout, "--timeout")?;
    let temp;
    let dir: &Path = match &args.out_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            temp = tempfile::tempdir().context("creating a temporary directory")?;
            temp.path()
        }
    };
    let port = match args.port {
        Some(p) => {
            check_port(p, args.nodes)?;
            p
        }
        None => free_port(args.nodes)?,
    };
    let group = Group::loopback("local", args.nodes, args.clusters, port).or_bad_input()?;
    let group_file = dir.join("group.toml");
    std::fs::write(&group_file, group.to_toml())
        .with_context(|| format!("writing {}", group_file.display()))?;
    let (data, source, file) = load_or_random(args.file.as_deref(), args.size, args.seed)?;
    // Authenticated with zero setup: the user's key, or a fresh one for this run, handed to
    // the node processes through their environment (never their command line).
    let key = match load_group_key(args.key.key_file.as_deref()).map_err(net_err)? {
        Some((key, _)) => key,
        None => GroupKey::generate(),
    };
    let handshake: Arc<dyn Handshake> =
        Arc::new(NoiseHandshake::new(key.clone()).with_encryption(args.key.encrypt));
    let exe = std::env::current_exe().context("locating the windrose binary")?;
    let wait_s = (timeout.as_secs_f64() * 4.0).max(60.0);
    let mut children = Children(Vec::new());
    for i in 1..args.nodes {
        let log = dir.join(format!("node-{i}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        // Its report (with its link measurements, for --measurements) as JSON on stdout.
        let report = dir.join(format!("node-{i}.json"));
        let report_file = std::fs::File::create(&report)
            .with_context(|| format!("creating {}", report.display()))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("node")
            .arg("--group")
            .arg(&group_file)
            .arg("--id")
            .arg(i.to_string())
            .arg("--wait")
            .arg(format!("{wait_s}"))
            .env(KEY_ENV, key.to_hex())
            .env_remove(KEY_FILE_ENV)
            .stdin(Stdio::null())
            .stdout(report_file)
            .stderr(log_file);
        if args.out_dir.is_some() && !args.scatter {
            cmd.arg("--out").arg(dir.join(format!("node-{i}.bin")));
        }
        if args.key.encrypt {
            cmd.arg("--encrypt");
        }
        // Quiet: the root reports every node's BLAKE3 (its host's digest); the node's own
        // second pass over the data would only repeat it in its log.
        cmd.arg("--once").arg("--quiet").arg("--json");
        cmd.arg("--seed").arg(args.seed.to_string());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting node {i} ({})", exe.display()))?;
        children.0.push((i as u32, child));
    }
    let timeouts = Timeouts {
        idle: timeout,
        connect: secs(args.opts.watch.connect_timeout, "--connect-timeout")?,
        ..Timeouts::default()
    };
    let rt = runtime()?;
    // Every node's series go to --measurements once the nodes have exited (their reports),
    // not the root's alone when the root's run ends.
    let mut root_watch = args.opts.watch.clone();
    let measurements = root_watch.measurements.take();
    let run = RootRun {
        rt: &rt,
        group: Arc::new(group),
        root: NodeId(0),
        source,
        data,
        file,
        watch: &root_watch,
        timeouts,
        handshake,
        seed: args.seed,
    };
    let result = match args.protocol {
        RunProtocol::Multicast(p) => multicast(run, p, &args.multicast_opts),
        RunProtocol::Broadcast if args.scatter => scatter(run, &args.opts, &args.scatter_opts),
        RunProtocol::Broadcast => broadcast(run, &args.opts, args.segment),
    };
    // The nodes end after the root's Bye (or abort); give them a moment, then report those
    // that failed. When the root itself failed its error says why, and the nodes are stopped.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut failed = Vec::new();
    let waited = if result.is_ok() {
        children.0.as_mut_slice()
    } else {
        &mut []
    };
    for (i, child) in waited {
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break None,
            }
        };
        if !matches!(status, Some(s) if s.success()) {
            let log =
                std::fs::read_to_string(dir.join(format!("node-{i}.log"))).unwrap_or_default();
            let last = log.lines().last().unwrap_or("(no output)").to_string();
            failed.push(format!(
                "node {i} process {}: {last}",
                status.map_or("did not exit".to_string(), |s| s.to_string())
            ));
        }
    }
    drop(children);
    let mut outcome = result?;
    if measurements.is_some() {
        for n in &mut outcome.nodes {
            let path = dir.join(format!("node-{}.json", n.node));
            // A node that failed may have printed no report: its series are missing.
            n.report = std::fs::read_to_string(&path)
                .ok()
                .and_then(|json| serde_json::from_str(&json).ok());
        }
        let watch = WatchOpts {
            measurements,
            ..args.opts.watch.clone()
        };
        write_measurements(&outcome, &watch)?;
    }
    check(&outcome)?;
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok(())
}
