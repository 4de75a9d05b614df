//! `windrose testbed ...`: the emulated multi-cluster network of `windrose_testbed` from a
//! scenario file, and real multicasts across it beside the simulator's prediction.

use crate::error::bad_input;
use crate::output::vtable;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use windrose_model::platform::{LinkId, Platform};
use windrose_model::units::{format_size, parse_size};
use windrose_model::{ClusterId, NodeId};
use windrose_sim::multicast::MulticastProtocol;
use windrose_sim::network::Change;
use windrose_sim::scenario::{
    load_scenario, run_scenario_shared, Mayhem, MobVariant, Scenario, WorkloadKind,
};
use windrose_testbed::testbed::{self, DelayMode, State};

/// `windrose testbed`: network namespaces, shaped links and a WAN delay line that emulate a
/// scenario's platform on this machine (root only).
#[derive(Debug, Subcommand)]
pub enum TestbedCommand {
    /// Bring up the platform of a scenario file: a namespace per node, a bridge and router per
    /// cluster, a WAN core, every link shaped to its capacity, WAN latencies by a delay line.
    Up(UpArgs),
    /// Take a testbed down: stop its processes, delete its namespaces (nothing else is touched).
    Down(DownArgs),
    /// List the testbeds that are up; --measure checks a WAN path's goodput and round trip.
    Status(StatusArgs),
    /// Run a command in a node's namespace (its address is 10.77.CLUSTER.K+1).
    Exec(ExecArgs),
    /// Change a link of a running testbed: `set wan:0:1 bytes_s=2e6 latency_s=0.03`.
    Set(SetArgs),
    /// Bytes each cluster's router has sent towards each other cluster since `up` (the WAN
    /// classes' counters): which WAN links a collective used, read from the network itself.
    Traffic(TrafficArgs),
    /// Print the group file of a testbed that is up (node i at its namespace's address, in its
    /// cluster), for `group serve`, `node` and the root commands run with `testbed exec`.
    Group(GroupArgs),
    /// Bring a testbed up, run the scenario's multicast across it with real windrose nodes, and
    /// print per-node completion, WAN bytes and the fraction of the bound beside the
    /// simulator's prediction for the same file; always takes the testbed down again.
    Run(RunArgs),
    /// The delay line process (started by `up` in the core namespace).
    #[command(hide = true)]
    DelayLine(DelayLineArgs),
}

/// `testbed up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The scenario file (its `[platform]`).
    scenario: PathBuf,
    /// The testbed's name (1-12 characters from a-z, 0-9).
    #[arg(long, default_value = "tb")]
    name: String,
}

/// `testbed down`.
#[derive(Debug, Args)]
pub struct DownArgs {
    /// The testbed's name.
    #[arg(default_value = "tb")]
    name: String,
    /// Every testbed that is up.
    #[arg(long)]
    all: bool,
}

/// `testbed status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Measure goodput and round trip from the first node of cluster 0 to the first node of
    /// cluster 1 of each testbed.
    #[arg(long)]
    measure: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `testbed exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The testbed's name.
    #[arg(long, default_value = "tb")]
    name: String,
    /// The node.
    node: u32,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// `testbed set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The testbed's name.
    #[arg(long, default_value = "tb")]
    name: String,
    /// The link: node_up:N, node_down:N, access_up:C, access_down:C or wan:FROM:TO.
    link: String,
    /// `bytes_s=VALUE` and/or `latency_s=VALUE` (one-way seconds, WAN links only).
    #[arg(required = true)]
    values: Vec<String>,
}

/// `testbed traffic`.
#[derive(Debug, Args)]
pub struct TrafficArgs {
    /// The testbed's name.
    #[arg(long, default_value = "tb")]
    name: String,
    /// Print JSON: `{"wan_bytes": [[...]]}`, row FROM, column TO.
    #[arg(long)]
    json: bool,
}

/// `testbed group`.
#[derive(Debug, Args)]
pub struct GroupArgs {
    /// The testbed's name.
    #[arg(long, default_value = "tb")]
    name: String,
    /// The port every member listens on.
    #[arg(long, default_value_t = 7100)]
    port: u16,
    /// The group's name (default: the testbed's).
    #[arg(long)]
    group_name: Option<String>,
    /// Write the group file to FILE (under a temporary name until complete) instead of
    /// printing it.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `testbed run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario file (a multicast workload; its platform, changes and mayhem are applied).
    scenario: PathBuf,
    /// The protocol (default: the scenario's).
    #[arg(long)]
    protocol: Option<MulticastProtocol>,
    /// Which MOB, windrose or paper (default: the scenario's `mob_variant`); the simulator's
    /// prediction runs the same.
    #[arg(long, value_name = "VARIANT")]
    mob_variant: Option<MobVariant>,
    /// Bytes to multicast, e.g. 64MB (10^6-byte units) or 64MiB (2^20); default: the
    /// scenario's message size.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// The testbed's name.
    #[arg(long, default_value = "run")]
    name: String,
    /// Seconds without progress before the run is given up.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `testbed delay-line`.
#[derive(Debug, Args)]
pub struct DelayLineArgs {
    /// Its config file.
    #[arg(long)]
    config: PathBuf,
}

pub fn run(cmd: TestbedCommand) -> Result<()> {
    match cmd {
        TestbedCommand::Up(a) => up(a),
        TestbedCommand::Down(a) => down(a),
        TestbedCommand::Status(a) => status(a),
        TestbedCommand::Exec(a) => exec(a),
        TestbedCommand::Set(a) => set(a),
        TestbedCommand::Traffic(a) => traffic(a),
        TestbedCommand::Group(a) => group_file(a),
        TestbedCommand::Run(a) => run_scenario_on_testbed(a),
        TestbedCommand::DelayLine(a) => {
            let stats = windrose_testbed::delay_line::run_from_file(&a.config)?;
            eprintln!(
                "delay line: {} packets, {} bytes, at most {} held; {} packets ({} bytes) dropped with the line full",
                stats.packets, stats.bytes, stats.max_held, stats.dropped_packets, stats.dropped_bytes
            );
            Ok(())
        }
    }
}

/// A testbed error as the CLI reports it: what the user gave (a bad name, a value out of range,
/// a platform too big, a testbed that is not up, a link it cannot change) exits with code 2.
fn testbed_error(e: windrose_testbed::TestbedError) -> anyhow::Error {
    use windrose_testbed::TestbedError as E;
    match e {
        E::BadName { .. }
        | E::OutOfRange { .. }
        | E::TooBig { .. }
        | E::NotUp { .. }
        | E::BadLink { .. } => bad_input(e.to_string()),
        e => e.into(),
    }
}

fn scenario(path: &Path) -> Result<Scenario> {
    load_scenario(path).map_err(crate::sim_cmd::scenario_error)
}

/// Brings testbed `name` up; a SIGINT or SIGTERM meanwhile stops it and removes what it made.
fn bring_up(name: &str, s: &Scenario, quiet: bool) -> Result<State> {
    let exe = std::env::current_exe().context("locating the windrose executable")?;
    let started = Instant::now();
    catch_interrupts();
    let cpu = s.compute.as_ref().map_or(&[][..], |c| &c.cpu[..]);
    refuse_pairs(&s.platform).map_err(testbed_error)?;
    let state = testbed::up(
        name,
        &s.platform,
        cpu,
        &DelayMode::Process(exe),
        &mut |line| {
            if !quiet {
                eprintln!("testbed {name}: {line}");
            }
        },
        &INTERRUPTED,
    )
    .map_err(testbed_error)?;
    if !quiet {
        eprintln!(
            "testbed {name}: up in {:.1} s ({} namespaces)",
            started.elapsed().as_secs_f64(),
            state.namespaces.len()
        );
    }
    Ok(state)
}

fn up(a: UpArgs) -> Result<()> {
    windrose_testbed::plan::check_name(&a.name).map_err(testbed_error)?;
    let s = scenario(&a.scenario)?;
    let mut state = bring_up(&a.name, &s, false)?;
    state.scenario = Some(std::fs::canonicalize(&a.scenario)?);
    testbed::save_state(&state)?;
    let rows: Vec<Vec<String>> = (0..state.node_addrs.len())
        .map(|i| {
            vec![
                i.to_string(),
                state.node_clusters[i].to_string(),
                state.node_addrs[i].to_string(),
                state.node_ns(i as u32),
                cpu_share(&state, i),
            ]
        })
        .collect();
    outln!(
        "{}",
        vtable(&["node", "cluster", "address", "namespace", "cpu"], &rows).join("\n")
    );
    outln!(
        "run a command in a node: windrose testbed exec --name {} NODE -- CMD; take it down: windrose testbed down {}",
        a.name, a.name
    );
    Ok(())
}

/// Node `i`'s CPU quota as `up` shows it: a share of a core, or `-` (unthrottled).
fn cpu_share(state: &State, i: usize) -> String {
    state
        .cpu
        .as_ref()
        .and_then(|q| q.share(i as u32))
        .map_or_else(|| "-".to_string(), windrose_model::error::compact)
}

fn down(a: DownArgs) -> Result<()> {
    let names: Vec<String> = if a.all {
        testbed::list()?.into_iter().map(|s| s.name).collect()
    } else {
        windrose_testbed::plan::check_name(&a.name).map_err(testbed_error)?;
        // Up: a state file, or namespaces of its prefix left by a killed `up`.
        let prefix = windrose_testbed::plan::prefix(&a.name);
        let up = testbed::load_state(&a.name)?.is_some()
            || windrose_testbed::sys::list_namespaces()
                .unwrap_or_default()
                .iter()
                .any(|n| n.starts_with(&prefix));
        if !up {
            let others: Vec<String> = testbed::list()?.into_iter().map(|s| s.name).collect();
            return Err(bad_input(format!(
                "testbed {} is not up ({})",
                a.name,
                if others.is_empty() {
                    "no testbed is up".to_string()
                } else {
                    format!("up: {}", others.join(", "))
                }
            )));
        }
        vec![a.name]
    };
    for n in names {
        let r = testbed::down(&n)?;
        outln!(
            "testbed {n}: removed {} namespaces and {} CPU groups{}, stopped {} processes",
            r.namespaces,
            r.cgroups,
            if r.run_dir {
                " and its run's folder"
            } else {
                ""
            },
            r.processes
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct StatusRow {
    name: String,
    nodes: usize,
    clusters: usize,
    namespaces_present: usize,
    namespaces: usize,
    processes_alive: usize,
    goodput_mb_s: Option<f64>,
    rtt_ms: Option<f64>,
    /// Packets the WAN delay line dropped because it held its most (as of its last report, at
    /// most a second old).
    delay_line_dropped: Option<u64>,
    /// The nodes' CPU quotas, when any node has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<CpuStatus>,
}

#[derive(Serialize)]
struct CpuStatus {
    /// `v1` or `v2`.
    cgroup: windrose_testbed::cpu::Version,
    /// Nodes under a quota.
    nodes: usize,
    /// Their quotas' sum, cores.
    cores: f64,
    /// Each node's share of a core (None: unthrottled).
    per_node: Vec<Option<f64>>,
    /// Groups present of those made (a group missing: removed behind the testbed's back).
    groups_present: usize,
    /// Periods in which the nodes' quotas held them back, summed.
    throttled_periods: u64,
}

fn status(a: StatusArgs) -> Result<()> {
    let present = windrose_testbed::sys::list_namespaces().unwrap_or_default();
    let mut rows = Vec::new();
    for s in testbed::list()? {
        let clusters = s.node_clusters.iter().max().map_or(0, |c| c + 1) as usize;
        let mut row = StatusRow {
            name: s.name.clone(),
            nodes: s.node_addrs.len(),
            clusters,
            namespaces_present: s.namespaces.iter().filter(|n| present.contains(n)).count(),
            namespaces: s.namespaces.len(),
            // SAFETY: signal 0 only checks that the process exists.
            processes_alive: s.pids.iter().filter(|&&p| unsafe { libc_kill0(p) }).count(),
            goodput_mb_s: None,
            rtt_ms: None,
            delay_line_dropped: s
                .delay_config
                .as_deref()
                .and_then(windrose_testbed::delay_line::load_stats)
                .map(|d| d.dropped_packets),
            cpu: s.cpu.as_ref().map(|q| {
                let dirs: Vec<_> = (0..q.cpu.len() as u32)
                    .filter_map(|i| s.node_cgroup(i))
                    .collect();
                CpuStatus {
                    cgroup: q.controller.version,
                    nodes: dirs.len(),
                    cores: q.total(),
                    per_node: q.cpu.clone(),
                    groups_present: dirs.iter().filter(|d| d.is_dir()).count(),
                    throttled_periods: dirs
                        .iter()
                        .filter_map(|d| windrose_testbed::cpu::throttled(d, q.controller.version))
                        .map(|t| t.0)
                        .sum(),
                }
            }),
        };
        if a.measure {
            let a0 = s.node_clusters.iter().position(|&c| c == 0);
            let b0 = s.node_clusters.iter().position(|&c| c == 1);
            if let (Some(x), Some(y)) = (a0, b0) {
                let (from, to) = (s.node_ns(x as u32), s.node_ns(y as u32));
                let rtt = windrose_testbed::measure::round_trip(&from, &to, s.node_addrs[y], 11)?;
                let g = windrose_testbed::measure::goodput(
                    &from,
                    &to,
                    s.node_addrs[y],
                    1 << 20,
                    8 << 20,
                )?;
                row.rtt_ms = Some(rtt * 1e3);
                row.goodput_mb_s = Some(g / 1e6);
            }
        }
        rows.push(row);
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        outln!("no testbed is up");
        return Ok(());
    }
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.nodes.to_string(),
                r.clusters.to_string(),
                format!("{}/{}", r.namespaces_present, r.namespaces),
                r.processes_alive.to_string(),
                f(r.goodput_mb_s),
                f(r.rtt_ms),
                r.delay_line_dropped
                    .map_or_else(|| "-".to_string(), |d| d.to_string()),
                r.cpu.as_ref().map_or_else(
                    || "-".to_string(),
                    |c| {
                        format!(
                            "{:.2} cores on {} nodes (cgroup {}, {}/{} groups, {} periods throttled)",
                            c.cores,
                            c.nodes,
                            c.cgroup,
                            c.groups_present,
                            c.nodes,
                            c.throttled_periods
                        )
                    },
                ),
            ]
        })
        .collect();
    outln!(
        "{}",
        vtable(
            &[
                "name",
                "nodes",
                "clusters",
                "namespaces",
                "processes",
                "0->1 MB/s",
                "0->1 RTT ms",
                "WAN drops",
                "CPU quotas"
            ],
            &table
        )
        .join("\n")
    );
    Ok(())
}

/// Whether process `pid` exists.
unsafe fn libc_kill0(pid: u32) -> bool {
    libc::kill(pid as libc::pid_t, 0) == 0
}

/// The state of testbed `name`, which must be up (a bad name or one not up: exit 2).
fn up_state(name: &str) -> Result<State> {
    windrose_testbed::plan::check_name(name).map_err(testbed_error)?;
    testbed::load_state(name)?.ok_or_else(|| {
        bad_input(format!(
            "testbed {name} is not up (windrose testbed up SCENARIO --name {name})"
        ))
    })
}

fn exec(a: ExecArgs) -> Result<()> {
    let s = up_state(&a.name)?;
    if a.node as usize >= s.node_addrs.len() {
        return Err(bad_input(format!(
            "node {} does not exist: testbed {} has {} nodes ({})",
            a.node,
            a.name,
            s.node_addrs.len(),
            windrose_model::error::ids_in_words(s.node_addrs.len())
        )));
    }
    let shown = a.command.join(" ");
    let status = s
        .command_in(a.node, &a.command[0])
        .args(&a.command[1..])
        .status()
        .with_context(|| format!("running `{shown}` in node {}", a.node))?;
    if !status.success() {
        bail!("`{shown}` exited with {status}");
    }
    Ok(())
}

/// Parses `wan:F:T`, `access_up:C`, `access_down:C`, `node_up:N`, `node_down:N`.
fn parse_link(s: &str, p: &Platform) -> Result<LinkId> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize| -> Result<u32> {
        parts
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad_input(format!("link {s:?}: expected node_up:N, node_down:N, access_up:C, access_down:C or wan:FROM:TO")))
    };
    let link = match (parts[0], parts.len()) {
        ("wan", 3) => LinkId::Wan {
            from: ClusterId(num(1)?),
            to: ClusterId(num(2)?),
        },
        ("access_up", 2) => LinkId::AccessUp(ClusterId(num(1)?)),
        ("access_down", 2) => LinkId::AccessDown(ClusterId(num(1)?)),
        ("node_up", 2) => LinkId::NodeUp(NodeId(num(1)?)),
        ("node_down", 2) => LinkId::NodeDown(NodeId(num(1)?)),
        _ => {
            return Err(bad_input(format!(
                "link {s:?}: expected node_up:N, node_down:N, access_up:C, access_down:C or wan:FROM:TO"
            )))
        }
    };
    p.check_link(link)
        .map_err(|e| bad_input(format!("link {s:?}: {e}")))?;
    Ok(link)
}

/// The `bytes_s=VALUE` and `latency_s=VALUE` of `testbed set`, each checked against the range
/// the testbed emulates (before anything else, so a bad value is named whatever the testbed).
fn parse_set_values(values: &[String]) -> Result<(Option<f64>, Option<f64>)> {
    use windrose_testbed::limits::{check_capacity, check_latency};
    let (mut bytes_s, mut latency_s) = (None, None);
    for v in values {
        let (k, x) = v.split_once('=').ok_or_else(|| {
            bad_input(format!("{v:?}: expected bytes_s=VALUE or latency_s=VALUE"))
        })?;
        let x: f64 = x
            .trim()
            .parse()
            .map_err(|_| bad_input(format!("{v:?}: {x:?} is not a number")))?;
        match k {
            "bytes_s" => {
                check_capacity("bytes_s", x).map_err(|e| bad_input(e.to_string()))?;
                bytes_s = Some(x);
            }
            "latency_s" => {
                check_latency("latency_s", x).map_err(|e| bad_input(e.to_string()))?;
                latency_s = Some(x);
            }
            _ => {
                return Err(bad_input(format!(
                    "{v:?}: expected bytes_s=VALUE or latency_s=VALUE"
                )))
            }
        }
    }
    Ok((bytes_s, latency_s))
}

fn set(a: SetArgs) -> Result<()> {
    windrose_testbed::plan::check_name(&a.name).map_err(testbed_error)?;
    let (bytes_s, latency_s) = parse_set_values(&a.values)?;
    let s = up_state(&a.name)?;
    let path = s.scenario.clone().ok_or_else(|| {
        anyhow!(
            "testbed {} has no scenario recorded; bring it up again",
            a.name
        )
    })?;
    let sc = scenario(&path)?;
    let link = parse_link(&a.link, &sc.platform)?;
    testbed::set_link(&a.name, &sc.platform, link, bytes_s, latency_s).map_err(testbed_error)?;
    outln!("testbed {}: {} set", a.name, a.link);
    Ok(())
}

/// The group of a testbed's nodes: node i at its namespace's address and `port`, in its
/// cluster.
fn testbed_group(state: &State, name: &str, port: u16) -> Result<windrose_net::group::Group> {
    if port == 0 {
        return Err(bad_input(
            "--port 0: members must listen on a port they can be dialed at".to_string(),
        ));
    }
    let members = state
        .node_addrs
        .iter()
        .zip(&state.node_clusters)
        .enumerate()
        .map(|(i, (addr, &cluster))| windrose_net::group::Member {
            id: NodeId(i as u32),
            addr: format!("{addr}:{port}"),
            cluster: ClusterId(cluster),
        })
        .collect();
    windrose_net::group::Group::new(name, members).map_err(|e| anyhow::anyhow!("{e}"))
}

fn group_file(a: GroupArgs) -> Result<()> {
    let s = up_state(&a.name)?;
    if let Some(why) = a
        .out
        .as_deref()
        .and_then(windrose_net::sink::output_path_problem)
    {
        return Err(bad_input(why));
    }
    let group_name = a.group_name.clone().unwrap_or_else(|| a.name.clone());
    if group_name.trim().is_empty() {
        return Err(bad_input("--group-name is empty".to_string()));
    }
    let toml = testbed_group(&s, &group_name, a.port)?.to_toml();
    match &a.out {
        None => out!("{toml}"),
        Some(path) => {
            let tmp = windrose_net::sink::partial_path(path, 0);
            std::fs::write(&tmp, &toml).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, path).with_context(|| {
                let _ = std::fs::remove_file(&tmp);
                format!("renaming {} to {}", tmp.display(), path.display())
            })?;
        }
    }
    Ok(())
}

fn traffic(a: TrafficArgs) -> Result<()> {
    let s = up_state(&a.name)?;
    let clusters = s.node_clusters.iter().max().map_or(0, |&c| c as usize + 1);
    let wan = wan_bytes(&a.name, clusters);
    if a.json {
        outln!("{}", serde_json::json!({ "wan_bytes": wan }));
    } else {
        for (from, row) in wan.iter().enumerate() {
            for (to, bytes) in row.iter().enumerate().filter(|(to, _)| *to != from) {
                outln!("wan:{from}:{to} {bytes} bytes");
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// demo

/// The demo's scenario: seed 002's four clusters scaled to one machine.
const DEMO_SCENARIO: &str = include_str!("../../../data/scenarios/testbed/four-clusters.toml");

/// `windrose demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The protocol: mob, bittorrent, balanced or magpie.
    #[arg(long, default_value = "mob")]
    protocol: MulticastProtocol,
    /// Bytes to multicast, e.g. 64MB (10^6-byte units) or 64MiB (2^20).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    size: u64,
}

/// MOB across an emulated four-cluster network on this machine (the embedded
/// `data/scenarios/testbed/four-clusters.toml`), beside the simulator's prediction; on loopback
/// (16 processes, 4 clusters, no shaping) where network namespaces are unavailable.
pub fn demo(a: DemoArgs) -> Result<()> {
    match windrose_testbed::sys::preflight() {
        Ok(()) => {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("four-clusters.toml");
            std::fs::write(&path, DEMO_SCENARIO)?;
            eprintln!(
                "demo: {} across an emulated four-cluster network (4 x 4 nodes, 3-5 MB/s and 20 ms between clusters)",
                a.protocol
            );
            run_scenario_on_testbed(RunArgs {
                scenario: path,
                protocol: Some(a.protocol),
                mob_variant: None,
                size: Some(a.size),
                name: "demo".into(),
                timeout: 60.0,
                json: false,
            })
        }
        Err(why) => {
            eprintln!("demo: {why}; running on loopback instead (16 processes, 4 clusters, no WAN emulation)");
            let status = Command::new(std::env::current_exe()?)
                .args(["local", "--nodes", "16", "--clusters", "4", "--protocol"])
                .arg(a.protocol.to_string())
                .args(["--size", &a.size.to_string()])
                .status()?;
            if status.success() {
                Ok(())
            } else {
                bail!("the loopback run failed ({status})")
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// testbed run

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// From here on SIGINT and SIGTERM set [`INTERRUPTED`] instead of killing the process, so that
/// what a testbed made is taken down.
fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
}

/// Takes the testbed down however the run ends (error, panic, Ctrl-C handled by the loop).
struct Teardown(String);

impl Drop for Teardown {
    fn drop(&mut self) {
        match testbed::down(&self.0) {
            Ok(r) => eprintln!(
                "testbed {}: down ({} namespaces removed)",
                self.0, r.namespaces
            ),
            Err(e) => eprintln!("testbed {}: taking it down failed: {e}", self.0),
        }
    }
}

/// A windrose child that dies with this process (PR_SET_PDEATHSIG), in node `node`'s
/// namespace and CPU group.
fn spawn_in(state: &State, node: u32, args: &[&str], log: Option<&Path>) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let ns = state.node_ns(node);
    let mut c = state.command_in(node, exe);
    c.args(args);
    c.stdin(Stdio::null());
    match log {
        Some(p) => {
            let f = std::fs::File::create(p)?;
            c.stdout(f.try_clone()?).stderr(f);
        }
        None => {
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    c.spawn()
        .with_context(|| format!("starting windrose in {ns}"))
}

/// The testbed delays per site pair (netem between namespaces), not per node pair.
fn pair_refused(field: String, value: f64) -> windrose_testbed::TestbedError {
    windrose_testbed::TestbedError::OutOfRange {
        field,
        value: windrose_model::error::compact(value),
        range: "a latency between two nodes only (pair:A:B) is simulated, not emulated: the testbed delays whole site pairs".into(),
    }
}

/// Refuses a platform with pair latencies (`[[platform.pair]]`), which the testbed cannot
/// emulate.
fn refuse_pairs(p: &Platform) -> Result<(), windrose_testbed::TestbedError> {
    match p.pair_latencies().next() {
        Some((a, b, l)) => Err(pair_refused(
            format!("[[platform.pair]] latency_s of pair:{a}:{b}"),
            l,
        )),
        None => Ok(()),
    }
}

/// Checks that every value the scenario gives the testbed is in the range it emulates (see
/// `windrose_testbed::limits`): the platform's capacities and WAN latencies, each timed
/// change, mayhem's period and the capacities its fractions can draw.
fn check_for_testbed(s: &Scenario) -> Result<(), windrose_testbed::TestbedError> {
    use windrose_testbed::limits::{check_capacity, check_latency, check_period, link_name};
    windrose_testbed::limits::check_platform(&s.platform)?;
    refuse_pairs(&s.platform)?;
    for c in &s.changes {
        let at = windrose_model::error::compact(c.at_s);
        match c.change {
            Change::Capacity { link, bytes_s } => check_capacity(
                &format!("[[change]] at {at} s: bytes_s of {}", link_name(link)),
                bytes_s,
            )?,
            Change::WanLatency {
                from,
                to,
                latency_s,
            } => check_latency(
                &format!("[[change]] at {at} s: latency_s of wan:{from}:{to}"),
                latency_s,
            )?,
            Change::IntraLatency { .. } => {} // not emulated
            Change::PairLatency {
                from,
                to,
                latency_s,
            } => {
                return Err(pair_refused(
                    format!("[[change]] at {at} s: latency_s of pair:{from}:{to}"),
                    latency_s,
                ))
            }
        }
    }
    if let Some(m) = &s.mayhem {
        check_period("mayhem.period_s", m.period_s)?;
        for link in m.selected_links(&s.platform) {
            let nominal = s.platform.capacity_bytes_s(link);
            let name = link_name(link);
            check_capacity(
                &format!("mayhem.min_fraction x bytes_s of {name}"),
                nominal * m.min_fraction,
            )?;
            check_capacity(
                &format!("mayhem.max_fraction x bytes_s of {name}"),
                nominal * m.max_fraction,
            )?;
        }
    }
    Ok(())
}

/// How many timed changes [`timeline`] would give up to `horizon_s`, counted without making
/// them (a float: a tiny period must not overflow the count).
fn timed_changes_until(s: &Scenario, horizon_s: f64) -> f64 {
    let mut n = s.changes.len() as f64;
    if let Some(m) = &s.mayhem {
        let end = m.until_s.map_or(horizon_s, |u| u.min(horizon_s));
        if end >= m.start_s {
            let draws = ((end - m.start_s) / m.period_s).floor() + 1.0;
            n += draws * m.selected_links(&s.platform).len() as f64;
        }
    }
    n
}

/// The timed capacity and latency changes of a scenario, mayhem's draws included, in time
/// order (the simulator's weather for the same seed).
fn timeline(s: &Scenario, seed: u64, horizon_s: f64) -> Vec<(f64, Change)> {
    let mut out: Vec<(f64, Change)> = s.changes.iter().map(|c| (c.at_s, c.change)).collect();
    if let Some(m) = &s.mayhem {
        let links = m.selected_links(&s.platform);
        let mut rng = Mayhem::rng(seed);
        let mut k = 0;
        while let Some(t) = m.draw_time(k) {
            if t > horizon_s {
                break;
            }
            for c in m.draw(&mut rng, &s.platform, &links) {
                out.push((t, c));
            }
            k += 1;
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The scenario's platform with the changes of `timeline` due at t <= 0 applied.
fn platform_at_start(s: &Scenario, timeline: &[(f64, Change)]) -> Result<Platform> {
    let mut p = s.platform.clone();
    for (_, change) in timeline.iter().take_while(|(t, _)| *t <= 0.0) {
        match *change {
            Change::Capacity { link, bytes_s } => p.set_capacity(link, bytes_s),
            Change::WanLatency {
                from,
                to,
                latency_s,
            } => p.set_wan_latency(from, to, latency_s),
            Change::IntraLatency { cluster, latency_s } => p.set_intra_latency(cluster, latency_s),
            // Refused by check_for_testbed; kept in the platform all the same.
            Change::PairLatency {
                from,
                to,
                latency_s,
            } => p.set_pair_latency(from, to, latency_s),
        }
        .map_err(|e| anyhow!("applying the scenario's changes at t = 0: {e}"))?;
    }
    Ok(p)
}

/// WAN bytes sent from each router towards each other cluster, from the HTB class counters.
fn wan_bytes(name: &str, clusters: usize) -> Vec<Vec<u64>> {
    let mut out = vec![vec![0u64; clusters]; clusters];
    for (c, row) in out.iter_mut().enumerate() {
        let ns = windrose_testbed::plan::router_ns(name, ClusterId(c as u32));
        let Ok(text) =
            windrose_testbed::sys::output(Some(&ns), &["tc", "-s", "class", "show", "dev", "wan0"])
        else {
            continue;
        };
        let mut current: Option<usize> = None;
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.first() == Some(&"class") && w.len() > 2 {
                current = w[2]
                    .strip_prefix("1:")
                    .and_then(|m| u32::from_str_radix(m, 16).ok())
                    .filter(|&m| m >= 0x100)
                    .map(|m| (m - 0x100) as usize);
            } else if w.first() == Some(&"Sent") {
                if let (Some(d), Some(b)) = (current, w.get(1).and_then(|b| b.parse().ok())) {
                    if d < clusters {
                        row[d] = b;
                    }
                }
                current = None;
            }
        }
    }
    out
}

#[derive(Serialize)]
struct RunNode {
    node: u32,
    cluster: u32,
    verified: bool,
    real_completion_s: Option<f64>,
    real_mb_s: Option<f64>,
    sim_completion_s: Option<f64>,
    /// "killed" (for good) or "restarted", from the scenario's `[[fail]]` and `[[join]]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    fate: Option<&'static str>,
    /// A restarted node: the bytes it resumed from its partial file.
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed_bytes: Option<u64>,
}

#[derive(Serialize)]
struct RunReport {
    scenario: String,
    /// The protocol, `mob-paper` for seed 002's own MOB (`--mob-variant paper`).
    protocol: String,
    data_bytes: u64,
    piece_bytes: u32,
    bound_mb_s: f64,
    real_completion_s: Option<f64>,
    real_mb_s: Option<f64>,
    real_fraction_of_bound: Option<f64>,
    sim_completion_s: Option<f64>,
    sim_mb_s: Option<f64>,
    sim_fraction_of_bound: Option<f64>,
    /// Real over simulated completion time of the last receiver.
    real_over_sim: Option<f64>,
    wan_copies_real: f64,
    wan_copies_sim: f64,
    /// CPU seconds (user + system) of every windrose process of the run (root and nodes).
    cpu_s: f64,
    nodes: Vec<RunNode>,
    changes_applied: usize,
    /// Packets the WAN delay line dropped with its queue full (its last report, written every
    /// second).
    delay_line_dropped: u64,
}

fn run_scenario_on_testbed(a: RunArgs) -> Result<()> {
    windrose_testbed::plan::check_name(&a.name).map_err(testbed_error)?;
    let mut s = scenario(&a.scenario)?;
    if s.workload.kind != WorkloadKind::Multicast {
        return Err(bad_input(format!(
            "{}: testbed run needs a multicast workload (workload.kind = \"multicast\")",
            a.scenario.display()
        )));
    }
    let m = s.workload.multicast.as_mut().expect("a multicast workload");
    if let Some(p) = a.protocol {
        m.protocol = p;
    }
    crate::collective_opts::check_mob_variant(a.mob_variant, m.protocol)?;
    if let Some(v) = a.mob_variant {
        m.mob_variant = v;
    }
    let protocol = m.protocol;
    let mob_variant = m.mob_variant;
    let piece = m.piece_bytes;
    if let Some(b) = a.size {
        s.workload.message_bytes = b;
    }
    let data_bytes = s.workload.message_bytes;
    let root = s.workload.root;
    let seed = s.default_seed;
    let n = s.platform.node_count();
    check_for_testbed(&s).map_err(|e| bad_input(format!("{}: {e}", a.scenario.display())))?;
    // Node failures and restarts: the node's process is killed (SIGKILL) at its `[[fail]]` and
    // started again at its `[[join]]`, resuming from its partial output file.
    let mut node_events: Vec<(f64, NodeId, bool)> = Vec::new();
    for f in &s.failures {
        if f.node == root {
            return Err(bad_input(format!(
                "{}: the root (node {}) cannot fail on the testbed: the run would just end",
                a.scenario.display(),
                root
            )));
        }
        node_events.push((f.at_s, f.node, false));
    }
    for j in &s.joins {
        if !s.restarts(j.node) {
            return Err(bad_input(format!(
                "{}: node {} joins late ([[join]] without an earlier [[fail]]): the runtime's root \
                 starts a run only when every node is there; only restarts (a [[fail]], then a \
                 [[join]]) can be played on the testbed",
                a.scenario.display(),
                j.node
            )));
        }
        node_events.push((j.at_s, j.node, true));
    }
    node_events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let restarting: BTreeSet<NodeId> = s.joins.iter().map(|j| j.node).collect();
    let failed_for_good: BTreeSet<u32> = s
        .failures
        .iter()
        .filter(|f| !restarting.contains(&f.node))
        .map(|f| f.node.0)
        .collect();

    // The simulator's prediction first (cheap, and it gives the horizon for mayhem's draws).
    eprintln!("simulating {} for the prediction ...", s.name);
    let report = run_scenario_shared(&s, seed, None, &mut |_| {}, None)
        .map_err(crate::sim_cmd::scenario_error)?;
    let sim = report
        .multicast
        .first()
        .ok_or_else(|| anyhow!("the simulation gave no multicast outcome"))?
        .clone();
    // The bound over the scenario's changes and mayhem (time-expanded max-flow, as `windrose
    // bound` and `reproduce mob` give it), for the real run and the simulated one alike.
    let bound_completion_s = crate::bound_cmd::bound_report(&s, seed, false)?
        .completion_s
        .ok_or_else(|| anyhow!("the bound: no completion time for this scenario"))?;
    let bound = data_bytes as f64 / bound_completion_s;
    let horizon = sim.completion_s.unwrap_or(600.0) * 3.0 + 60.0;
    let replayed = timed_changes_until(&s, horizon);
    if replayed > windrose_testbed::limits::MAX_TIMED_CHANGES as f64 {
        return Err(bad_input(format!(
            "{}: the run would replay {} timed changes (its [[change]]s and mayhem's draws, one \
             per link) within {} s; a testbed replays at most {}: make mayhem.period_s longer or \
             give it an until_s",
            a.scenario.display(),
            windrose_model::error::compact(replayed.round()),
            windrose_model::error::compact(horizon.round()),
            windrose_testbed::limits::MAX_TIMED_CHANGES
        )));
    }

    let state = bring_up(&a.name, &s, false)?;
    let _teardown = Teardown(a.name.clone());
    let dir = tempfile::Builder::new()
        .prefix("windrose-testbed-")
        .tempdir_in(if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })?;
    let mut st = state.clone();
    st.scenario = Some(std::fs::canonicalize(&a.scenario)?);
    // Recorded before anything is written there: a run killed from here on leaves its
    // folder to `down` (the teardown's), not in memory for good.
    st.run_dir = Some(dir.path().to_path_buf());
    testbed::save_state(&st)?;
    let group = dir.path().join("group.toml");
    std::fs::write(&group, testbed_group(&state, "testbed", 7100)?.to_toml())?;
    let file = dir.path().join("data.bin");
    {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file)?);
        let mut buf = vec![0u8; 1 << 20];
        let mut left = data_bytes;
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            rng.fill_bytes(&mut buf[..k]);
            f.write_all(&buf[..k])?;
            left -= k as u64;
        }
        f.flush()?;
    }
    let group_s = group.to_string_lossy().into_owned();
    // A node that will restart writes its data to a file, to resume from it.
    let start_node = |i: usize, life: usize| -> Result<Child> {
        let log = dir.path().join(format!(
            "node-{i}.log{}",
            if life > 0 {
                format!(".{life}")
            } else {
                String::new()
            }
        ));
        let out = dir
            .path()
            .join(format!("node-{i}.bin"))
            .to_string_lossy()
            .into_owned();
        let id = i.to_string();
        let mut args = vec![
            "node", "--once", "--group", &group_s, "--id", &id, "--quiet",
        ];
        if restarting.contains(&NodeId::from(i)) {
            args.extend(["--out", &out]);
        }
        let c = spawn_in(&state, i as u32, &args, Some(&log))?;
        testbed::record_pid(&a.name, c.id())?;
        Ok(c)
    };
    let mut children: BTreeMap<usize, Child> = BTreeMap::new();
    let mut gone: Vec<Child> = Vec::new();
    for i in (0..n).filter(|&i| i != root.index()) {
        children.insert(i, start_node(i, 0)?);
    }
    let file_s = file.to_string_lossy().into_owned();
    let changes = timeline(&s, seed, horizon);
    // Balanced Multicasting plans from the capacities at the start, after the changes due at
    // t <= 0 (mayhem's first draw): what the simulator's planner sees, so both plan alike.
    let start_platform = dir.path().join("platform-at-start.toml");
    std::fs::write(&start_platform, platform_at_start(&s, &changes)?.to_toml())?;
    let scenario_s = start_platform.to_string_lossy().into_owned();
    let piece_s = piece.to_string();
    let timeout_s = a.timeout.to_string();
    let proto_s = protocol.to_string();
    let mut args = vec![
        "multicast",
        "--protocol",
        &proto_s,
        "--group",
        &group_s,
        "--file",
        &file_s,
        "--piece",
        &piece_s,
        "--json",
        "--quiet",
        "--announce-go",
        "--timeout",
        &timeout_s,
    ];
    let root_id = root.0.to_string();
    args.extend(["--id", &root_id]);
    if protocol == MulticastProtocol::Balanced {
        args.extend(["--platform", &scenario_s]);
    }
    let variant_s = mob_variant.to_string();
    if protocol == MulticastProtocol::Mob {
        args.extend(["--mob-variant", &variant_s]);
    }
    eprintln!(
        "testbed {}: {} of {} across {} nodes ...",
        a.name,
        protocol,
        format_size(data_bytes),
        n
    );
    let mut root_child = spawn_in(&state, root.0, &args, None)?;
    testbed::record_pid(&a.name, root_child.id())?;
    let mut applied = 0;
    let mut stdout = root_child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut v);
        v
    });
    // The replay's clock starts at the root's Go, the instant the simulator calls 0 and from
    // which the nodes' completion times count; before it only changes at t <= 0 apply.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<Instant>();
    let stderr = root_child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut kept = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let Ok(line) = line else { break };
            if line == crate::net_cmds::GO_LINE {
                let _ = go_tx.send(Instant::now());
            } else {
                kept += &line;
                kept.push('\n');
            }
        }
        kept.into_bytes()
    });
    let mut started: Option<Instant> = None;
    let mut node_applied = 0;
    let status = loop {
        if INTERRUPTED.load(Ordering::Relaxed) {
            let _ = root_child.kill();
            bail!("interrupted: the testbed is taken down");
        }
        if let Some(st) = root_child.try_wait()? {
            break st;
        }
        if started.is_none() {
            started = go_rx.try_recv().ok();
        }
        let t = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        while started.is_some()
            && node_applied < node_events.len()
            && node_events[node_applied].0 <= t
        {
            let (_, node, restart) = node_events[node_applied];
            let i = node.index();
            if restart {
                eprintln!("testbed {}: t = {t:.2} s: restarting node {node}", a.name);
                children.insert(i, start_node(i, node_applied + 1)?);
            } else if let Some(mut c) = children.remove(&i) {
                eprintln!("testbed {}: t = {t:.2} s: killing node {node}", a.name);
                let _ = c.kill();
                gone.push(c);
            }
            node_applied += 1;
        }
        while applied < changes.len() && changes[applied].0 <= t {
            match changes[applied].1 {
                Change::Capacity { link, bytes_s } => {
                    testbed::set_link(&a.name, &s.platform, link, Some(bytes_s), None)?
                }
                Change::WanLatency {
                    from,
                    to,
                    latency_s,
                } => testbed::set_link(
                    &a.name,
                    &s.platform,
                    LinkId::Wan { from, to },
                    None,
                    Some(latency_s),
                )?,
                // Not emulated (see windrose_testbed); pair latencies are refused before.
                Change::IntraLatency { .. } | Change::PairLatency { .. } => {}
            }
            applied += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    for mut c in children.into_values().chain(gone) {
        let _ = c.wait();
    }
    let cpu_s = children_cpu_s();
    let wan = wan_bytes(&a.name, s.platform.cluster_count());
    let delay_line_dropped = state
        .delay_config
        .as_deref()
        .and_then(windrose_testbed::delay_line::load_stats)
        .map_or(0, |d| d.dropped_packets);
    let v: serde_json::Value = serde_json::from_slice(&out).map_err(|_| {
        anyhow!(
            "the root gave no result ({status}): {}",
            String::from_utf8_lossy(&err).trim()
        )
    })?;
    let mut nodes = Vec::new();
    let mut last: Option<f64> = Some(0.0);
    let mut all_verified = true;
    for x in v["nodes"].as_array().cloned().unwrap_or_default() {
        let node = x["node"].as_u64().unwrap_or(0) as u32;
        let verified = x["verified"].as_bool().unwrap_or(false);
        let c = x["completion_s"].as_f64();
        // Nodes killed for good are expected to fail; every other one must finish verified.
        let gone_for_good = failed_for_good.contains(&node);
        if !gone_for_good {
            all_verified &= verified;
            last = match (last, c) {
                (Some(l), Some(c)) => Some(l.max(c)),
                _ => None,
            };
        }
        nodes.push(RunNode {
            node,
            cluster: state.node_clusters[node as usize],
            verified,
            real_completion_s: c,
            real_mb_s: x["throughput_mb_s"].as_f64(),
            sim_completion_s: sim.node_completion_s.get(node as usize).copied().flatten(),
            fate: if gone_for_good {
                Some("killed")
            } else if restarting.contains(&NodeId(node)) {
                Some("restarted")
            } else {
                None
            },
            resumed_bytes: x["resumed_bytes"].as_u64(),
        });
    }
    let wan_total: u64 = wan.iter().flatten().sum();
    let rep = RunReport {
        scenario: s.name.clone(),
        protocol: protocol.label(mob_variant).to_string(),
        data_bytes,
        piece_bytes: piece,
        bound_mb_s: bound / 1e6,
        real_completion_s: last,
        real_mb_s: last
            .filter(|&l| l > 0.0)
            .map(|l| data_bytes as f64 / l / 1e6),
        real_fraction_of_bound: last.filter(|&l| l > 0.0).map(|l| bound_completion_s / l),
        sim_completion_s: sim.completion_s,
        sim_mb_s: sim.throughput_mb_s,
        sim_fraction_of_bound: sim
            .completion_s
            .filter(|&c| c > 0.0)
            .map(|c| bound_completion_s / c),
        real_over_sim: last.zip(sim.completion_s).map(|(r, s)| r / s),
        wan_copies_real: wan_total as f64 / data_bytes.max(1) as f64,
        wan_copies_sim: sim.wan_wire_bytes / data_bytes.max(1) as f64,
        cpu_s,
        nodes,
        changes_applied: applied,
        delay_line_dropped,
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_run(&rep);
    }
    if !all_verified || rep.nodes.len() + 1 != n {
        bail!(
            "not every surviving node received verified data ({} of {} verified, {} killed for good)",
            rep.nodes.iter().filter(|x| x.verified).count(),
            n - 1,
            failed_for_good.len()
        );
    }
    Ok(())
}

/// CPU seconds (user + system) of this process's waited-for children.
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn print_run(r: &RunReport) {
    let f = |v: Option<f64>, d: usize| v.map_or_else(|| "-".to_string(), |x| format!("{x:.d$}"));
    let rows: Vec<Vec<String>> = r
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.node.to_string(),
                n.cluster.to_string(),
                if n.verified { "yes" } else { "NO" }.to_string(),
                f(n.real_completion_s, 2),
                f(n.sim_completion_s, 2),
                f(n.real_mb_s, 2),
                match (n.fate, n.resumed_bytes) {
                    (Some("restarted"), Some(b)) => format!("restarted, resumed {b} bytes"),
                    (Some(f), _) => f.to_string(),
                    _ => String::new(),
                },
            ]
        })
        .collect();
    outln!(
        "{}",
        vtable(
            &[
                "node",
                "cluster",
                "verified",
                "real done s",
                "sim done s",
                "real MB/s",
                "fate"
            ],
            &rows
        )
        .join("\n")
    );
    outln!(
        "\n{} {} of {} in {} pieces: bound {:.2} MB/s",
        r.scenario,
        r.protocol,
        format_size(r.data_bytes),
        format_size(u64::from(r.piece_bytes)),
        r.bound_mb_s
    );
    let rows = vec![
        vec![
            "real (testbed)".to_string(),
            f(r.real_completion_s, 2),
            f(r.real_mb_s, 2),
            f(r.real_fraction_of_bound.map(|x| 100.0 * x), 1),
            format!("{:.2}", r.wan_copies_real),
        ],
        vec![
            "simulator".to_string(),
            f(r.sim_completion_s, 2),
            f(r.sim_mb_s, 2),
            f(r.sim_fraction_of_bound.map(|x| 100.0 * x), 1),
            format!("{:.2}", r.wan_copies_sim),
        ],
    ];
    outln!(
        "{}",
        vtable(
            &[
                "",
                "last receiver s",
                "MB/s",
                "% of bound",
                "WAN bytes / data"
            ],
            &rows
        )
        .join("\n")
    );
    if let Some(x) = r.real_over_sim {
        outln!(
            "real / simulated completion: {x:.2}; {} timed changes applied; {:.1} CPU seconds",
            r.changes_applied,
            r.cpu_s
        );
    }
    if r.delay_line_dropped > 0 {
        outln!(
            "the WAN delay line dropped {} packets, holding its most ({} MiB)",
            r.delay_line_dropped,
            windrose_testbed::delay_line::MAX_HELD_BYTES >> 20
        );
    }
}
