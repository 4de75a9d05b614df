//! The real-network commands: `windrose node` (serve one run as a member of a group),
//! `windrose bcast` (broadcast a file to a group from its root, with a progress bar and a
//! BLAKE3 check of what every node received) and `windrose local` (start N node processes on
//! loopback and run the broadcast, all in one command). The driver is `windrose_net`.

use crate::error::{bad_input, OrBadInput};
use crate::output::{num, print, print_json, vtable};
use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::{LinkCosts, NodeId};
use windrose_net::bootstrap::{Bootstrap, GroupFile, Membership};
use windrose_net::group::Group;
use windrose_net::trees::{group_costs, TreeKind};
use windrose_net::wire::RunStatus;
use windrose_net::{
    bind, map_file, random_payload, run_node, run_root, Delivered, NetError, NetEvent, NodeConfig,
    OutputSpec, RootJob, RunOutcome, Timeouts,
};

/// `windrose node`: one member of a group, serving one run.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The group file (TOML: name, protocol_version, [[node]] id/addr/cluster).
    #[arg(long, value_name = "FILE")]
    group: PathBuf,
    /// This node's id in the group.
    #[arg(long)]
    id: u32,
    /// Write the received data to FILE (under a temporary name until complete); without it
    /// the data is only hashed.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Give up when no root has sent a job within this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    wait: f64,
    /// Print the node's report as JSON.
    #[arg(long)]
    json: bool,
    /// Print nothing on success.
    #[arg(long)]
    quiet: bool,
}

/// Options shared by `bcast` and `local`: the tree and how data is cut.
#[derive(Debug, Args)]
pub struct TreeOpts {
    /// The broadcast tree: mst, magpie, binomial, balanced-path, chain or flat.
    #[arg(long, default_value = "balanced-path", value_parser = parse_tree)]
    tree: TreeKind,
    /// Segment size, the unit of pipelining (e.g. 1MiB, 256KiB, 4M; one segment as large as
    /// the file is store-and-forward).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    segment: u64,
    /// Link costs to build the tree from (a cost file as `windrose tree build` reads, one node
    /// per group member); default: 0.1 ms inside a cluster, 10 ms between clusters.
    #[arg(long, value_name = "FILE")]
    costs: Option<PathBuf>,
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
    /// The root's node id (this process); every other member must run `windrose node`.
    #[arg(long, default_value_t = 0)]
    id: u32,
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
    /// Size of the random payload when no --file is given.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Seed of the random payload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the group file, the nodes' logs and their received files (node-I.bin) in DIR;
    /// default: a temporary directory, removed at the end, and received data only hashed.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// The port every node listens on (each on its own 127.0.0.x address); default: a free one.
    #[arg(long)]
    port: Option<u16>,
    #[command(flatten)]
    opts: TreeOpts,
}

fn parse_tree(s: &str) -> Result<TreeKind, String> {
    s.parse()
}

/// Parses `1048576`, `512k`, `256KiB`, `4M`, `1MiB`, `1GiB`, `2G` (binary multiples; `B`
/// optional; case-insensitive).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 1048576, 512KiB, 1MiB, 2GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB)"
            ))
        }
    };
    let bytes = value * mult as f64;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) || bytes.fract() != 0.0 {
        return Err(format!("{s:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
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

/// A library error, with the exit code its kind deserves (2 for the user's configuration).
fn net_err(e: NetError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Runs `windrose node`.
pub fn run_node_cmd(args: NodeArgs) -> anyhow::Result<()> {
    let membership = GroupFile {
        path: args.group.clone(),
        id: args.id,
    }
    .membership()
    .map_err(net_err)?;
    let mut config = NodeConfig::new(membership.clone());
    config.timeouts.join = secs(args.wait, "--wait")?;
    if let Some(out) = &args.out {
        config.output = OutputSpec::File(out.clone());
    }
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        let listener = bind(&membership.group, membership.me).await?;
        run_node(listener, config).await
    });
    let outcome = outcome.map_err(net_err)?;
    if args.json {
        return print_json(&outcome.report);
    }
    if !args.quiet {
        let r = &outcome.report;
        let mut line = format!("node {}: received {} bytes", r.node, r.bytes_received);
        if let Some(h) = &r.blake3 {
            let _ = write!(line, ", BLAKE3 {h}");
        }
        if let Some(ns) = r.finished_ns {
            let _ = write!(line, ", in {} s", num(ns as f64 * 1e-9));
        }
        if let Delivered::File(p) = &outcome.delivered {
            let _ = write!(line, ", written to {}", p.display());
        }
        print(&format!("{line}\n"))?;
    }
    Ok(())
}

/// The tree for a run rooted at `root` over `group`.
fn build_tree(
    group: &Group,
    opts: &TreeOpts,
    root: NodeId,
) -> anyhow::Result<windrose_trees::Tree> {
    let clusters = group.clusters();
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
            opts.tree.build(&costs, &clusters, root)
        }
        None => opts.tree.build(&group_costs(group), &clusters, root),
    };
    tree.or_bad_input_about(format_args!("--tree {}", opts.tree))
}

/// Runs the root of a broadcast of `data` over `group` and prints the result.
fn broadcast(
    rt: &tokio::runtime::Runtime,
    group: Arc<Group>,
    root: NodeId,
    source: &str,
    data: Bytes,
    opts: &TreeOpts,
    timeouts: Timeouts,
) -> anyhow::Result<RunOutcome> {
    if opts.segment == 0 {
        return Err(bad_input("--segment must be at least 1 byte"));
    }
    let tree = build_tree(&group, opts, root)?;
    let mut config = NodeConfig::new(Membership {
        group: group.clone(),
        me: root,
    });
    config.timeouts = timeouts;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    config.events = Some(tx);
    let total = data.len() as u64;
    let receivers = group.len() - 1;
    let show = !(opts.quiet || opts.json);
    let bar = rt.spawn(progress(rx, total, receivers, show));
    let job = RootJob::broadcast(tree, opts.segment, data);
    let result = rt.block_on(run_root(config, job));
    let _ = rt.block_on(bar);
    let outcome = result.map_err(net_err)?;
    if let Some(path) = &opts.measurements {
        let json = serde_json::to_string_pretty(&outcome.measurements())?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if opts.json {
        print_json(&outcome)?;
    } else {
        print(&render(&outcome, source, opts))?;
    }
    Ok(outcome)
}

/// The progress bar: bytes held by all receivers over `total * receivers`.
async fn progress(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<NetEvent>,
    total: u64,
    receivers: usize,
    show: bool,
) {
    let bar = if show {
        ProgressBar::new(total.saturating_mul(receivers as u64).max(1))
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("connecting");
    let mut held: BTreeMap<NodeId, u64> = BTreeMap::new();
    let (mut ready, mut reported) = (0, 0);
    while let Some(ev) = rx.recv().await {
        match ev {
            NetEvent::Ready { .. } => {
                ready += 1;
                bar.set_message(format!("{ready}/{receivers} nodes ready"));
            }
            NetEvent::Started { .. } => {
                bar.reset_elapsed();
                bar.set_message("broadcasting");
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
            _ => {}
        }
        bar.set_position(held.values().sum());
    }
    bar.finish_and_clear();
}

fn short(hash: &str) -> String {
    hash.chars().take(16).collect()
}

/// The human-readable result table.
fn render(o: &RunOutcome, source: &str, opts: &TreeOpts) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "broadcast of {source} ({} bytes, BLAKE3 {}) from node {} over a {} tree, segments of {} bytes",
        o.total_len,
        short(&o.root_blake3),
        o.root,
        opts.tree,
        opts.segment
    );
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
        anyhow::bail!(
            "{} of {} nodes did not receive the root's bytes: {}",
            failures.len(),
            outcome.nodes.len(),
            failures.join("; ")
        )
    }
}

/// Runs `windrose bcast`.
pub fn run_bcast(args: BcastArgs) -> anyhow::Result<()> {
    let membership = GroupFile {
        path: args.group.clone(),
        id: args.id,
    }
    .membership()
    .map_err(net_err)?;
    let data = map_file(&args.file).or_bad_input()?;
    let timeouts = Timeouts {
        idle: secs(args.opts.timeout, "--timeout")?,
        connect: secs(args.opts.connect_timeout, "--connect-timeout")?,
        ..Timeouts::default()
    };
    let rt = runtime()?;
    let outcome = broadcast(
        &rt,
        membership.group,
        membership.me,
        &args.file.display().to_string(),
        data,
        &args.opts,
        timeouts,
    )?;
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

/// Runs `windrose local`.
pub fn run_local(args: LocalArgs) -> anyhow::Result<()> {
    if !(2..=250).contains(&args.nodes) {
        return Err(bad_input(format!(
            "--nodes {}: must be 2 to 250",
            args.nodes
        )));
    }
    let timeout = secs(args.opts.timeout, "--timeout")?;
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
        Some(p) => p,
        None => free_port(args.nodes)?,
    };
    let group = Group::loopback("local", args.nodes, args.clusters, port).or_bad_input()?;
    let group_file = dir.join("group.toml");
    std::fs::write(&group_file, group.to_toml())
        .with_context(|| format!("writing {}", group_file.display()))?;
    let (data, source) = match &args.file {
        Some(f) => (map_file(f).or_bad_input()?, f.display().to_string()),
        None => {
            let n = usize::try_from(args.size).map_err(|_| bad_input("--size is too large"))?;
            (
                random_payload(n, args.seed),
                format!("a random payload (seed {})", args.seed),
            )
        }
    };
    let exe = std::env::current_exe().context("locating the windrose binary")?;
    let wait_s = (timeout.as_secs_f64() * 4.0).max(60.0);
    let mut children = Children(Vec::new());
    for i in 1..args.nodes {
        let log = dir.join(format!("node-{i}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("node")
            .arg("--group")
            .arg(&group_file)
            .arg("--id")
            .arg(i.to_string())
            .arg("--wait")
            .arg(format!("{wait_s}"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        if args.out_dir.is_some() {
            cmd.arg("--out").arg(dir.join(format!("node-{i}.bin")));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting node {i} ({})", exe.display()))?;
        children.0.push((i as u32, child));
    }
    let timeouts = Timeouts {
        idle: timeout,
        connect: secs(args.opts.connect_timeout, "--connect-timeout")?,
        ..Timeouts::default()
    };
    let rt = runtime()?;
    let result = broadcast(
        &rt,
        Arc::new(group),
        NodeId(0),
        &source,
        data,
        &args.opts,
        timeouts,
    );
    // The nodes end after the root's Bye (or abort); give them a moment, then report those
    // that failed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut failed = Vec::new();
    for (i, child) in &mut children.0 {
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
    let outcome = result?;
    check(&outcome)?;
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok(())
}
