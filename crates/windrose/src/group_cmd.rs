//! `windrose group serve | start | leave`: long-lived group members, and collectives started
//! from any of them.
//!
//! `serve` joins the group as one member (a `Host` driven by `windrose_net::host_driver`) and
//! serves collectives until told to leave (`group leave`, SIGINT or SIGTERM). It listens on a
//! Unix control socket for the applications on its machine: `start` asks it to broadcast or
//! multicast a file it can read, and waits for every member's report. Control requests and
//! replies are JSON lines:
//!
//! ```text
//! -> {"broadcast":{"file":"/data/x","tree":"binomial","segment_bytes":1048576}}
//! -> {"multicast":{"file":"/data/x","protocol":"mob","piece_bytes":262144}}
//! -> "leave"
//! <- {"started":{"transfer":12,"bytes":1048576}}
//! <- {"complete":{"transfer":12,"finished":8,"failed":0,"seconds":0.41}}
//! <- {"error":"..."}
//! ```
//!
//! What a member receives goes to `--out-dir` as `transfer-<id>` (written under
//! `.transfer-<id>.part` and renamed when its part of the collective finished), or is hashed
//! and logged.

use crate::error::bad_input;
use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use windrose_model::measurements::{Metric, Recorder};
use windrose_model::NodeId;
use windrose_net::bootstrap::Membership;
use windrose_net::group::{load_group, Group};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::trees::group_tree;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams, TreeSpec};
use windrose_proto::host::{AppRequest, BroadcastRequest};
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::Manifest;
use windrose_proto::planner::TreePolicy;
use windrose_proto::{Report, TransferId};
use windrose_trees::TreeAlgorithm;

/// `windrose group ...`.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Join a group as one member and serve collectives until told to leave.
    Serve(ServeArgs),
    /// Start a broadcast or multicast of a file from a running member, and wait for it.
    Start(StartArgs),
    /// Ask a running member to leave the group (once its collectives have ended).
    Leave(LeaveArgs),
    /// Show a running member's view of its links: the round trips its prober measured and the
    /// forecast of the next one, per member.
    Weather(WeatherArgs),
}

/// Which member's control socket.
#[derive(Debug, Args)]
pub struct Via {
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
    fn socket(&self) -> anyhow::Result<PathBuf> {
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
    /// member, one probe every 500 ms on the probe lane) as JSON to FILE when it leaves: the
    /// format `windrose bcast --measurements` writes, with this member's entry only.
    #[arg(long, value_name = "FILE")]
    measurements: Option<PathBuf>,
    /// Send the probes behind the data on the members' one connection instead of on a
    /// connection of their own (to measure what the probe lane saves; they then measure the
    /// queue, not the link).
    #[arg(long)]
    no_probe_lane: bool,
    /// Keep the group's live minimum spanning tree (GHS, then local repairs; the trees of
    /// `start bcast --tree mst-live`) weighing links by METRIC: latency (short messages) or
    /// inverse-bandwidth (large ones). Every member must run it with the same options.
    #[arg(long, value_name = "METRIC")]
    mst_live: Option<windrose_proto::mst_service::MstMetric>,
    /// The live MST takes in a link's change past this fraction of its weight (seed 004 runs
    /// 0.1, 0.7 and 0).
    #[arg(
        long,
        value_name = "FRACTION",
        default_value_t = 0.1,
        requires = "mst_live"
    )]
    mst_threshold: f64,
    /// The live MST checks the links every K broadcasts (AGM-adapII's 4; 0: at every forecast).
    #[arg(long, value_name = "K", default_value_t = 4, requires = "mst_live")]
    mst_every: u32,
    #[command(flatten)]
    key: crate::net_cmds::KeyOpts,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
}

/// `windrose group start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// `bcast` (a tree broadcast) or `multicast` (verified pieces).
    #[arg(value_parser = ["bcast", "multicast"])]
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
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ControlRequest {
    Broadcast {
        file: PathBuf,
        tree: String,
        segment_bytes: u64,
    },
    Multicast {
        file: PathBuf,
        protocol: String,
        piece_bytes: u32,
    },
    Leave,
    Weather,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ControlReply {
    Weather(Vec<LinkView>),
    Started {
        transfer: u32,
        bytes: u64,
    },
    Complete {
        transfer: u32,
        finished: u32,
        failed: u32,
        seconds: f64,
    },
    Leaving,
    Error(String),
}

/// The control socket of member `id` when none is given.
fn default_socket(group: &Group, id: u32) -> PathBuf {
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

/// One request read from a control connection, with where its replies go.
struct Call {
    request: ControlRequest,
    replies: mpsc::UnboundedSender<ControlReply>,
}

/// A collective this member started for a control client.
struct Started {
    replies: mpsc::UnboundedSender<ControlReply>,
    at: Instant,
}

/// Where a member's received bytes of one collective go.
enum Received {
    File { part: PathBuf, file: std::fs::File },
    Hash(Box<blake3::Hasher>, u64),
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let group = Arc::new(load_group(&a.group).map_err(|e| bad_input(e.to_string()))?);
    let handshake = crate::net_cmds::handshake_of(&a.key, !a.quiet)?;
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
    let socket = a
        .control
        .clone()
        .unwrap_or_else(|| default_socket(&group, a.id));
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
    let _cleanup = RemoveOnDrop(socket.clone());
    let (mut handle, ports) = group_channel();
    let mut config = GroupConfig::new(Membership {
        group: group.clone(),
        me,
    });
    config.probe_lane = !a.no_probe_lane;
    config.handshake = handshake;
    if let Some(metric) = a.mst_live {
        let live = windrose_proto::mst_service::MstLiveConfig {
            metric,
            threshold: a.mst_threshold,
            check_every: a.mst_every,
            ..Default::default()
        };
        live.validate()
            .map_err(|e| bad_input(format!("--mst-threshold: {e}")))?;
        config.mst = Some(live);
    }
    let mut serving = tokio::spawn(serve_group(listener, config, ports));
    let (calls_tx, mut calls) = mpsc::unbounded_channel::<Call>();
    let acceptor = tokio::spawn(accept_calls(control, calls_tx));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    let say = |s: String| {
        if !a.quiet {
            println!("{s}");
        }
    };
    say(format!(
        "member {} of group {} serving; control socket {}",
        a.id,
        group.name(),
        socket.display()
    ));
    let n = group.len() as u32;
    let rank = group.members().iter().position(|m| m.id == me).unwrap_or(0) as u32;
    let mut seq: u32 = 0;
    let mut started: BTreeMap<TransferId, Started> = BTreeMap::new();
    let mut received: BTreeMap<TransferId, Received> = BTreeMap::new();
    let serving_since = Instant::now();
    let mut link_series = Recorder::new(me);
    // The host's weather service, as its reports tell it.
    let mut links: BTreeMap<NodeId, LinkView> = BTreeMap::new();
    loop {
        tokio::select! {
            r = &mut serving => {
                acceptor.abort();
                if let Some(path) = &a.measurements {
                    write_measurements(path, &link_series)?;
                }
                return match r {
                    Ok(r) => r.map_err(anyhow::Error::new),
                    Err(e) => Err(anyhow::anyhow!("the member's driver stopped: {e}")),
                };
            }
            _ = tokio::signal::ctrl_c() => { handle.request(AppRequest::Leave); }
            _ = sigterm.recv() => { handle.request(AppRequest::Leave); }
            Some(call) = calls.recv() => {
                let request = match call.request {
                    ControlRequest::Leave => {
                        let _ = call.replies.send(ControlReply::Leaving);
                        handle.request(AppRequest::Leave);
                        continue;
                    }
                    ControlRequest::Weather => {
                        let _ = call.replies.send(ControlReply::Weather(links.values().cloned().collect()));
                        continue;
                    }
                    r => r,
                };
                match spec_for(&group, me, &request) {
                    Ok((job, data)) => {
                        let t = TransferId(seq.wrapping_mul(n).wrapping_add(rank).wrapping_add(n << 20));
                        seq = seq.wrapping_add(1);
                        let _ = call.replies.send(ControlReply::Started { transfer: t.0, bytes: data.len() as u64 });
                        started.insert(t, Started { replies: call.replies, at: Instant::now() });
                        handle.request(match job {
                            Job::Fixed(spec) => AppRequest::StartCollective { spec, data, transfer: Some(t) },
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
                GroupEvent::Delivered { transfer, offset, data } => {
                    let r = received.entry(transfer).or_insert_with(|| open_received(a.out_dir.as_deref(), transfer));
                    if let Err(e) = write_received(r, offset, &data) {
                        eprintln!("member {}: transfer {transfer}: {e}", a.id);
                    }
                }
                GroupEvent::Report(Report::CollectiveEnded { transfer, finished }) => {
                    if let Some(r) = received.remove(&transfer) {
                        say(finish_received(r, a.out_dir.as_deref(), transfer, finished));
                    }
                }
                GroupEvent::Report(Report::CollectiveComplete { transfer, finished, failed }) => {
                    if let Some(s) = started.remove(&transfer) {
                        let seconds = s.at.elapsed().as_secs_f64();
                        say(format!("transfer {transfer}: {finished} members finished, {failed} failed, {seconds:.3} s"));
                        let _ = s.replies.send(ControlReply::Complete { transfer: transfer.0, finished, failed, seconds });
                    }
                }
                GroupEvent::Report(Report::RoundTrip { peer, rtt }) => {
                    let ms = rtt.as_secs_f64() * 1e3;
                    link_series.record(peer, Metric::RttMs, serving_since.elapsed().as_secs_f64(), ms);
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
                GroupEvent::Report(Report::TreePlanned { transfer, cost, built, changed_links, swaps }) => {
                    let how = if built { "built".to_string() } else { format!("kept ({changed_links} link changes taken in, {swaps} swaps)") };
                    say(format!("transfer {transfer}: tree {how}, cost {:.1} ms on the live view", cost.as_secs_f64() * 1e3));
                }
                GroupEvent::Report(Report::PeerDown { peer }) => say(format!("member {peer} went silent")),
                GroupEvent::Lost(peer, why) => say(format!("lost member {peer}: {why}")),
                _ => {}
            },
        }
    }
}

/// Writes the series next to `path` and renames it over `path`, so a reader never sees half a
/// file.
fn write_measurements(path: &Path, series: &Recorder) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&[series.snapshot()])? + "\n";
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

async fn accept_calls(control: UnixListener, calls: mpsc::UnboundedSender<Call>) {
    while let Ok((stream, _)) = control.accept().await {
        let calls = calls.clone();
        tokio::spawn(async move {
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
                let end = !matches!(reply, ControlReply::Started { .. });
                let mut text = serde_json::to_string(&reply).unwrap_or_default();
                text.push('\n');
                if wr.write_all(text.as_bytes()).await.is_err() || end {
                    break;
                }
            }
        });
    }
}

/// What a control request starts: a collective fixed here, or a broadcast whose tree the host
/// plans from the group's weather.
enum Job {
    Fixed(CollectiveSpec),
    Live {
        policy: TreePolicy,
        segment_bytes: u64,
    },
}

/// The collective of a control request, with its data.
fn spec_for(group: &Group, me: NodeId, r: &ControlRequest) -> Result<(Job, Bytes), String> {
    let file = match r {
        ControlRequest::Broadcast { file, .. } | ControlRequest::Multicast { file, .. } => file,
        ControlRequest::Leave | ControlRequest::Weather => return Err("not a collective".into()),
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
            ..
        } => {
            let protocol: MulticastProtocol = protocol.parse()?;
            // The same parameters as `windrose multicast` (Balanced: equal capacities).
            let (mspec, _) = crate::net_cmds::multicast_spec(group, me, protocol, None)
                .map_err(|e| format!("{e:#}"))?;
            let manifest = Manifest::build(&data, *piece_bytes).map_err(|e| e.to_string())?;
            Job::Fixed(CollectiveSpec::Multicast {
                protocol,
                params: MulticastParams::of(&mspec),
                manifest: ManifestSpec::of(&manifest),
            })
        }
        ControlRequest::Leave | ControlRequest::Weather => unreachable!("handled above"),
    };
    Ok((spec, data))
}

fn open_received(dir: Option<&Path>, t: TransferId) -> Received {
    match dir {
        Some(d) => {
            let part = d.join(format!(".transfer-{t}.part"));
            match std::fs::File::create(&part) {
                Ok(file) => Received::File { part, file },
                Err(_) => Received::Hash(Box::new(blake3::Hasher::new()), 0),
            }
        }
        None => Received::Hash(Box::new(blake3::Hasher::new()), 0),
    }
}

fn write_received(r: &mut Received, _offset: u64, data: &[u8]) -> std::io::Result<()> {
    // Deliveries of one collective come in order.
    match r {
        Received::File { file, .. } => file.write_all(data),
        Received::Hash(h, n) => {
            h.update(data);
            *n += data.len() as u64;
            Ok(())
        }
    }
}

fn finish_received(r: Received, dir: Option<&Path>, t: TransferId, finished: bool) -> String {
    match r {
        Received::File { part, file } => {
            drop(file);
            if !finished {
                let _ = std::fs::remove_file(&part);
                return format!("transfer {t}: aborted, nothing kept");
            }
            let dest = dir
                .map(|d| d.join(format!("transfer-{t}")))
                .unwrap_or_default();
            match std::fs::rename(&part, &dest) {
                Ok(()) => format!("transfer {t}: received into {}", dest.display()),
                Err(e) => format!("transfer {t}: could not rename {}: {e}", part.display()),
            }
        }
        Received::Hash(h, n) => format!(
            "transfer {t}: {} {n} bytes, blake3 {}",
            if finished {
                "received"
            } else {
                "aborted after"
            },
            h.finalize().to_hex()
        ),
    }
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
        let end = !matches!(reply, ControlReply::Started { .. });
        replies.push(reply);
        if end {
            break;
        }
    }
    Ok(replies)
}

async fn start(a: StartArgs) -> anyhow::Result<()> {
    let socket = a.via.socket()?;
    let file = std::fs::canonicalize(&a.file)
        .map_err(|e| bad_input(format!("{}: {e}", a.file.display())))?;
    let request = if a.kind == "bcast" {
        ControlRequest::Broadcast {
            file,
            tree: a.tree.clone(),
            segment_bytes: a.segment,
        }
    } else {
        ControlRequest::Multicast {
            file,
            protocol: a.protocol.clone(),
            piece_bytes: u32::try_from(a.piece)
                .map_err(|_| bad_input(format!("--piece {}: at most 4 GiB", a.piece)))?,
        }
    };
    let replies = call(&socket, &request).await?;
    let mut result = Err(anyhow::anyhow!("the member closed the control connection"));
    for r in replies {
        match r {
            ControlReply::Error(e) => result = Err(bad_input(e)),
            ControlReply::Complete {
                transfer,
                finished,
                failed,
                seconds,
            } => {
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({"transfer": transfer, "finished": finished, "failed": failed, "seconds": seconds})
                    );
                } else {
                    println!("transfer {transfer}: {finished} members finished, {failed} failed in {seconds:.3} s");
                }
                result = if failed == 0 {
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

async fn weather(a: WeatherArgs) -> anyhow::Result<()> {
    let socket = a.via.socket()?;
    if let Some(s) = a.watch {
        if !(s.is_finite() && s >= 0.1) {
            return Err(bad_input(format!("--watch {s}: at least 0.1 seconds")));
        }
    }
    loop {
        let replies = call(&socket, &ControlRequest::Weather).await?;
        let links = match replies.into_iter().next() {
            Some(ControlReply::Weather(links)) => links,
            Some(ControlReply::Error(e)) => anyhow::bail!("{e}"),
            other => anyhow::bail!("unexpected reply from the member: {other:?}"),
        };
        if a.json {
            println!("{}", serde_json::to_string(&links)?);
        } else {
            if a.watch.is_some() {
                print!("\x1b[2J\x1b[H"); // clear the terminal between refreshes
            }
            println!("{}", render_weather(&links));
        }
        let Some(secs) = a.watch else {
            return Ok(());
        };
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    }
}

fn render_weather(links: &[LinkView]) -> String {
    if links.is_empty() {
        return "no round trips measured yet (the prober measures every 500 ms once connected)"
            .into();
    }
    let mut s = format!(
        "{:>6} {:>8} {:>10} {:>12} {:>9} {:>10} {:>9}\n",
        "member", "probes", "last ms", "forecast ms", "± ms", "MB/s", "± MB/s"
    );
    let num = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    for l in links {
        s += &format!(
            "{:>6} {:>8} {:>10.3} {:>12} {:>9} {:>10} {:>9}\n",
            l.peer,
            l.samples,
            l.last_ms,
            num(l.forecast_ms),
            num(l.error_ms),
            num(l.mb_s),
            num(l.mb_s_error)
        );
    }
    s.pop();
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
