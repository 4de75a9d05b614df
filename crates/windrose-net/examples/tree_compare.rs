//! Bench binary: one root and N-1 receiver *processes* on loopback broadcasting the same payload
//! over the chain, the binomial and the flat tree, alternating within every repetition; prints
//! every run and then, per tree, the medians of: the slowest and the median receiver's
//! throughput, the aggregate throughput, and the CPU seconds of all processes per GiB received.
//!
//! ```text
//! cargo run --release -p windrose-net --example tree_compare -- \
//!     [--nodes 8] [--mib 1024] [--reps 3] [--segment-kib 1024] [--trees chain,binomial,flat] [--no-verify]
//! ```
//!
//! - Each run starts a fresh group: N-1 member processes (this binary with `--node GROUP ID`,
//!   each a `host_driver::serve_group` member that drops what it is delivered after hashing it
//!   with BLAKE3 (`digest_deliveries`, the check `windrose bcast` makes; `--no-verify` skips
//!   the hash) and leaves once its part of the broadcast ended), and member 0 in this process
//!   (default settings: heartbeats, link probes every 500 ms), which starts the broadcast.
//! - A receiver's throughput is the payload size over its part of the collective (its
//!   machine's start to its end, as its `MemberDone` at member 0 says).
//! - CPU: user + system seconds from `getrusage`: `RUSAGE_SELF` around the root's run, plus
//!   `RUSAGE_CHILDREN` around the node processes' lifetimes (every child is waited for), divided
//!   by the GiB received by all receivers together ((N-1) x payload).
//!
//! All processes share this machine's cores, so the numbers compare trees on one host; they
//! are not what the same trees would do across real links.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::{Bootstrap, GroupFile, Membership};
use windrose_net::group::{Group, Member};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::trees::group_tree;
use windrose_net::{bind, random_payload};
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::host::AppRequest;
use windrose_proto::Report;
use windrose_trees::TreeAlgorithm;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn num_arg(name: &str, default: u64) -> u64 {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// User + system CPU seconds of `who` (`RUSAGE_SELF` or `RUSAGE_CHILDREN`).
fn cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes one rusage struct into the zeroed value we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(who, &mut r) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// A member's configuration: the deliveries hashed when `verify`.
fn member_config(membership: Membership, verify: bool) -> GroupConfig {
    let mut c = GroupConfig::new(membership);
    c.digest_deliveries = verify;
    c
}

/// The child side: member `id` of the group in `path`, until its part of one broadcast ended.
fn node_main(path: &str, id: u32, verify: bool) {
    let membership = GroupFile {
        path: path.into(),
        id,
    }
    .membership()
    .unwrap();
    let result = runtime().block_on(async {
        let l = bind(&membership.group, membership.me).await?;
        let (mut handle, ports) = group_channel();
        let task = tokio::spawn(serve_group(l, member_config(membership, verify), ports));
        while let Some(ev) = handle.events.recv().await {
            if let GroupEvent::Report(Report::CollectiveEnded { finished, .. }) = ev {
                assert!(finished, "member {id}: its part did not finish");
                break;
            }
        }
        handle.request(AppRequest::Leave);
        while handle.events.recv().await.is_some() {}
        task.await.expect("the member's task")
    });
    if let Err(e) = result {
        eprintln!("node {id}: {e}");
        std::process::exit(1);
    }
}

/// A group of `n` nodes on 127.0.0.1, each on a port that was free a moment ago.
fn loopback_group(n: usize) -> Group {
    let members = (0..n)
        .map(|i| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            Member {
                id: NodeId::from(i),
                addr: l.local_addr().unwrap().to_string(),
                cluster: ClusterId(0),
            }
        })
        .collect();
    Group::new("tree-compare", members).unwrap()
}

/// What one run measured.
struct RunResult {
    /// Seconds from Go to the last receiver's completion.
    last_s: f64,
    /// Each receiver's throughput, MB/s.
    receivers_mb_s: Vec<f64>,
    /// CPU seconds of the root's process during its run.
    root_cpu_s: f64,
    /// CPU seconds of all node processes.
    nodes_cpu_s: f64,
}

fn run_once(
    dir: &Path,
    kind: TreeAlgorithm,
    nodes: usize,
    data: &bytes::Bytes,
    segment: u64,
    verify: bool,
) -> RunResult {
    let group = Arc::new(loopback_group(nodes));
    let file = dir.join("group.toml");
    std::fs::write(&file, group.to_toml()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children0 = cpu_s(libc::RUSAGE_CHILDREN);
    let mut children: Vec<Child> = (1..nodes)
        .map(|i| {
            let mut c = Command::new(&exe);
            c.arg("--node").arg(&file).arg(i.to_string());
            if !verify {
                c.arg("--no-verify");
            }
            c.stdin(Stdio::null()).spawn().unwrap()
        })
        .collect();
    let tree = group_tree(kind, &group, NodeId(0)).unwrap();
    let rt = runtime();
    let self0 = cpu_s(libc::RUSAGE_SELF);
    let membership = Membership {
        group: group.clone(),
        me: NodeId(0),
    };
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&tree),
        segment_bytes: segment,
        max_frame_payload:
            windrose_proto::tree_broadcast::BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD,
    };
    let completions: Vec<f64> = rt.block_on(async {
        let l = bind(&group, NodeId(0)).await.unwrap();
        let (mut handle, ports) = group_channel();
        let task = tokio::spawn(serve_group(l, member_config(membership, verify), ports));
        handle.request(AppRequest::StartCollective {
            spec,
            data: data.clone(),
            transfer: None,
        });
        let mut parts = Vec::new();
        while let Some(ev) = handle.events.recv().await {
            match ev {
                GroupEvent::Report(Report::MemberDone {
                    member,
                    finished,
                    bytes_delivered,
                    digest,
                    elapsed,
                    ..
                }) if member != NodeId(0) => {
                    assert!(finished, "member {member} did not finish");
                    assert_eq!(bytes_delivered, data.len() as u64, "member {member}");
                    if verify {
                        assert_eq!(
                            digest,
                            Some(*blake3::hash(data).as_bytes()),
                            "member {member}"
                        );
                    }
                    parts.push(elapsed.expect("a finished member's time").as_secs_f64());
                }
                GroupEvent::Report(Report::CollectiveComplete { failed, .. }) => {
                    assert_eq!(failed, 0);
                    break;
                }
                _ => {}
            }
        }
        handle.request(AppRequest::Leave);
        while handle.events.recv().await.is_some() {}
        task.await.unwrap().unwrap();
        parts
    });
    let root_cpu_s = cpu_s(libc::RUSAGE_SELF) - self0;
    for c in &mut children {
        assert!(c.wait().unwrap().success(), "a node process failed");
    }
    let nodes_cpu_s = cpu_s(libc::RUSAGE_CHILDREN) - children0;
    drop(rt);
    let mb = data.len() as f64 / 1e6;
    RunResult {
        last_s: completions.iter().copied().fold(0.0, f64::max),
        receivers_mb_s: completions.iter().map(|c| mb / c).collect(),
        root_cpu_s,
        nodes_cpu_s,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let verify = !std::env::args().any(|a| a == "--no-verify");
    if let Some(group) = arg("--node") {
        let args: Vec<String> = std::env::args().collect();
        let i = args.iter().position(|a| a == "--node").unwrap();
        let id: u32 = args[i + 2].parse().unwrap();
        node_main(&group, id, verify);
        return;
    }
    let nodes = num_arg("--nodes", 8).clamp(2, 250) as usize;
    let mib = num_arg("--mib", 1024) as usize;
    let reps = num_arg("--reps", 3).max(1) as usize;
    let segment = num_arg("--segment-kib", 1024).max(1) << 10;
    let trees: Vec<TreeAlgorithm> = arg("--trees")
        .unwrap_or_else(|| "chain,binomial,flat".into())
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let data = random_payload(mib << 20, 42);
    let receivers = nodes - 1;
    let gib_received = (receivers * data.len()) as f64 / (1u64 << 30) as f64;
    let dir = tempfile::tempdir().unwrap();
    println!(
        "{nodes} processes on loopback ({} cores), {mib} MiB broadcast from node 0, segments of {} KiB, \
         receivers {}hash with BLAKE3, {reps} repetitions (trees alternate within each)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        segment >> 10,
        if verify { "" } else { "do not " }
    );
    println!(
        "{:>3}  {:>8}  {:>7}  {:>10}  {:>10}  {:>9}  {:>8}  {:>9}  {:>12}",
        "rep",
        "tree",
        "last_s",
        "min_MB/s",
        "median_MB/s",
        "aggr_MB/s",
        "root_cpu",
        "nodes_cpu",
        "cpu_s/GiB"
    );
    let mut results: Vec<Vec<RunResult>> = trees.iter().map(|_| Vec::new()).collect();
    let started = Instant::now();
    for rep in 0..reps {
        for (t, &kind) in trees.iter().enumerate() {
            let r = run_once(dir.path(), kind, nodes, &data, segment, verify);
            let mb = data.len() as f64 / 1e6;
            println!(
                "{rep:>3}  {:>8}  {:>7.3}  {:>10.1}  {:>10.1}  {:>9.1}  {:>8.2}  {:>9.2}  {:>12.3}",
                kind.name(),
                r.last_s,
                r.receivers_mb_s
                    .iter()
                    .copied()
                    .fold(f64::INFINITY, f64::min),
                median(r.receivers_mb_s.clone()),
                receivers as f64 * mb / r.last_s,
                r.root_cpu_s,
                r.nodes_cpu_s,
                (r.root_cpu_s + r.nodes_cpu_s) / gib_received
            );
            results[t].push(r);
        }
    }
    println!(
        "\nmedians over {reps} runs ({:.0} s in all); throughput per receiver = payload / its completion time; \
         cpu = all {nodes} processes, per GiB received by the {receivers} receivers together",
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:>8}  {:>14}  {:>17}  {:>13}  {:>9}  {:>12}  {:>11}",
        "tree",
        "slowest_MB/s",
        "median_recv_MB/s",
        "aggregate_MB/s",
        "cpu_s",
        "cpu_s/GiB",
        "root_cpu_s"
    );
    let mb = data.len() as f64 / 1e6;
    for (t, &kind) in trees.iter().enumerate() {
        let rs = &results[t];
        let slowest = median(
            rs.iter()
                .map(|r| {
                    r.receivers_mb_s
                        .iter()
                        .copied()
                        .fold(f64::INFINITY, f64::min)
                })
                .collect(),
        );
        let med = median(
            rs.iter()
                .map(|r| median(r.receivers_mb_s.clone()))
                .collect(),
        );
        let aggr = median(
            rs.iter()
                .map(|r| receivers as f64 * mb / r.last_s)
                .collect(),
        );
        let cpu = median(rs.iter().map(|r| r.root_cpu_s + r.nodes_cpu_s).collect());
        let root_cpu = median(rs.iter().map(|r| r.root_cpu_s).collect());
        println!(
            "{:>8}  {:>14.1}  {:>17.1}  {:>13.1}  {:>9.2}  {:>12.3}  {:>11.2}",
            kind.name(),
            slowest,
            med,
            aggr,
            cpu,
            cpu / gib_received,
            root_cpu
        );
    }
}
