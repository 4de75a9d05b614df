//! Validation scenarios shared by `tests/simgrid.rs` and `benches/network_vs_simgrid.rs`: the
//! scenario file format of `validation/simgrid_flows.py`, a driver that runs a scenario in our
//! network, a seeded generator of large multi-cluster scenarios, and the SimGrid runner.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use windrose_model::platform::{parse_platform_toml, LinkId, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_sim::network::{Network, NetworkStats, SharingPolicy};

/// The workspace's `validation/` directory.
pub fn validation_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation")
}

/// A flow of a scenario: messages sent one after the other on the connection `src → dst`, the
/// first at `start_s`, each next one when the previous one has arrived.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    pub src: u32,
    pub dst: u32,
    #[serde(default)]
    pub start_s: f64,
    pub bytes: Vec<u64>,
}

/// A capacity change of a scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioChange {
    pub at_s: f64,
    /// `node_up:N`, `node_down:N`, `access_up:C`, `access_down:C` or `wan:FROM:TO`.
    pub link: String,
    pub bytes_s: f64,
}

#[derive(Deserialize)]
struct Doc {
    name: Option<String>,
    #[serde(default)]
    flow: Vec<Flow>,
    #[serde(default)]
    change: Vec<ScenarioChange>,
    #[serde(rename = "platform")]
    _platform: toml::Value,
}

/// A validation scenario: a platform, flows and capacity changes.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub platform: Platform,
    pub flows: Vec<Flow>,
    pub changes: Vec<ScenarioChange>,
}

pub fn parse_link(s: &str) -> LinkId {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |k: usize| -> u32 {
        parts[k]
            .parse()
            .unwrap_or_else(|_| panic!("bad link {s:?}"))
    };
    match parts[0] {
        "node_up" => LinkId::NodeUp(NodeId(num(1))),
        "node_down" => LinkId::NodeDown(NodeId(num(1))),
        "access_up" => LinkId::AccessUp(ClusterId(num(1))),
        "access_down" => LinkId::AccessDown(ClusterId(num(1))),
        "wan" => LinkId::Wan {
            from: ClusterId(num(1)),
            to: ClusterId(num(2)),
        },
        _ => panic!("bad link {s:?}"),
    }
}

impl Scenario {
    pub fn parse(text: &str, path: &Path) -> Scenario {
        let platform = parse_platform_toml(text, path).unwrap_or_else(|e| panic!("{e}"));
        let doc: Doc = toml::from_str(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Scenario {
            name: doc.name.unwrap_or_else(|| path.display().to_string()),
            platform,
            flows: doc.flow,
            changes: doc.change,
        }
    }

    pub fn load(path: &Path) -> Scenario {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Scenario::parse(&text, path)
    }

    pub fn message_count(&self) -> usize {
        self.flows.iter().map(|f| f.bytes.len()).sum()
    }
}

/// The arrival time of every message, indexed `[flow][message]`.
pub type Completions = Vec<Vec<f64>>;

/// Runs a scenario in our network: each flow sends its first message at `start_s` and each next
/// one at the instant the previous one is delivered (as the SimGrid script's actors do).
pub fn run_ours(s: &Scenario, policy: SharingPolicy) -> (Completions, NetworkStats) {
    let mut net = Network::new(s.platform.clone(), policy);
    for ch in &s.changes {
        net.set_capacity(parse_link(&ch.link), ch.at_s, ch.bytes_s)
            .expect("valid change");
    }
    let mut done: Completions = s
        .flows
        .iter()
        .map(|f| vec![f64::NAN; f.bytes.len()])
        .collect();
    // Flow starts, earliest first (ties by flow index).
    let mut starts: BinaryHeap<Reverse<(u64, usize)>> = s
        .flows
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.bytes.is_empty())
        .map(|(i, f)| Reverse((f.start_s.to_bits(), i)))
        .collect();
    let send = |net: &mut Network, t: f64, i: usize, k: usize| {
        let f = &s.flows[i];
        net.send(
            t,
            NodeId(f.src),
            NodeId(f.dst),
            f.bytes[k],
            ((i as u64) << 32) | k as u64,
        )
        .expect("valid send");
    };
    let mut delivered = Vec::new();
    loop {
        let te = net.next_event_time();
        let ts = starts.peek().map(|Reverse((t, _))| f64::from_bits(*t));
        let t = match (te, ts) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        delivered.clear();
        net.advance_into(t, &mut delivered);
        for d in &delivered {
            let (i, k) = ((d.tag >> 32) as usize, (d.tag & 0xffff_ffff) as usize);
            done[i][k] = d.at;
            if k + 1 < s.flows[i].bytes.len() {
                send(&mut net, d.at, i, k + 1);
            }
        }
        while let Some(&Reverse((tb, i))) = starts.peek() {
            if f64::from_bits(tb) != t {
                break;
            }
            starts.pop();
            send(&mut net, t, i, 0);
        }
    }
    (done, net.stats().clone())
}

/// Size and shape of a generated scenario.
#[derive(Copy, Clone, Debug)]
pub struct GenParams {
    pub seed: u64,
    pub clusters: usize,
    pub nodes_per_cluster: usize,
    /// Flows (connections) started by each node, to distinct destinations.
    pub flows_per_node: usize,
    /// Messages per flow, drawn from 1..=max_messages.
    pub max_messages: usize,
    /// Flow starts are drawn from `[0, start_spread_s)` (all at 0 when 0).
    pub start_spread_s: f64,
}

/// 1024 hosts in 4 clusters, 4 flows per host, all starting at 0 with one message each: 4096
/// concurrent flows (every flow is active from its route's latency on until it completes).
pub const LARGE: GenParams = GenParams {
    seed: 2024,
    clusters: 4,
    nodes_per_cluster: 256,
    flows_per_node: 4,
    max_messages: 1,
    start_spread_s: 0.0,
};

/// 64 hosts in 4 clusters, 4 flows per host: 256 concurrent flows.
pub const SMALL: GenParams = GenParams {
    seed: 7,
    clusters: 4,
    nodes_per_cluster: 16,
    flows_per_node: 4,
    max_messages: 3,
    start_spread_s: 0.5,
};

/// A random multi-cluster scenario as TOML text: heterogeneous node capacities (per-cluster
/// values and per-node overrides), access and WAN capacities and latencies; every node starts
/// `flows_per_node` flows within the first `start_spread_s`, about half of them to other
/// clusters, each of 1 to `max_messages` messages of 0.1 to 20 MB. All flows overlap in time: the
/// first messages take seconds.
pub fn generate(p: GenParams) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let n = p.clusters * p.nodes_per_cluster;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Generated by windrose-sim tests/support/validation.rs: {p:?}\nname = \"generated-{}x{}-seed{}\"\n\n[platform]",
        p.clusters, p.nodes_per_cluster, p.seed
    );
    let caps = [1.25e7, 2.5e7, 6.25e7, 1.25e8];
    for _ in 0..p.clusters {
        let up = caps[rng.gen_range(0..caps.len())];
        let down = caps[rng.gen_range(0..caps.len())];
        let _ = writeln!(
            t,
            "[[platform.cluster]]\nnodes = {}\nnode_uplink_bytes_s = {up:?}\nnode_downlink_bytes_s = {down:?}\n\
             access_up_bytes_s = {:?}\naccess_down_bytes_s = {:?}\nintra_latency_s = {:?}",
            p.nodes_per_cluster,
            rng.gen_range(2.5e8..1.25e9f64).round(),
            rng.gen_range(2.5e8..1.25e9f64).round(),
            (rng.gen_range(2e-5..5e-4f64) * 1e6).round() / 1e6,
        );
    }
    if p.clusters > 1 {
        let mut bytes = vec![vec![0.0f64; p.clusters]; p.clusters];
        let mut lat = vec![vec![0.0f64; p.clusters]; p.clusters];
        for a in 0..p.clusters {
            for b in 0..p.clusters {
                if a != b {
                    bytes[a][b] = rng.gen_range(2.5e7..2.5e8f64).round();
                    lat[a][b] = (rng.gen_range(0.005..0.08f64) * 1e5).round() / 1e5;
                }
            }
        }
        let table = |m: &Vec<Vec<f64>>| {
            let rows: Vec<String> = m
                .iter()
                .map(|r| {
                    format!(
                        "[{}]",
                        r.iter()
                            .map(|v| format!("{v:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            format!("[{}]", rows.join(", "))
        };
        let _ = writeln!(
            t,
            "[platform.wan]\nbytes_s = {}\nlatency_s = {}",
            table(&bytes),
            table(&lat)
        );
    }
    for node in 0..n {
        if rng.gen_bool(0.25) {
            let _ = writeln!(
                t,
                "[[platform.node]]\nid = {node}\nuplink_bytes_s = {:?}\ndownlink_bytes_s = {:?}",
                rng.gen_range(5e6..1.25e8f64).round(),
                rng.gen_range(5e6..1.25e8f64).round()
            );
        }
    }
    for src in 0..n {
        let cluster = src / p.nodes_per_cluster;
        let mut dsts: Vec<usize> = Vec::new();
        while dsts.len() < p.flows_per_node {
            let dst = if rng.gen_bool(0.5) {
                cluster * p.nodes_per_cluster + rng.gen_range(0..p.nodes_per_cluster)
            } else {
                rng.gen_range(0..n)
            };
            if dst != src && !dsts.contains(&dst) {
                dsts.push(dst);
            }
        }
        for dst in dsts {
            let m = rng.gen_range(1..=p.max_messages);
            let sizes: Vec<String> = (0..m)
                .map(|_| rng.gen_range(100_000u64..20_000_000).to_string())
                .collect();
            let start = if p.start_spread_s > 0.0 {
                (rng.gen_range(0.0..p.start_spread_s) * 1e6).round() / 1e6
            } else {
                0.0
            };
            let _ = writeln!(
                t,
                "[[flow]]\nsrc = {src}\ndst = {dst}\nstart_s = {start:?}\nbytes = [{}]",
                sizes.join(", ")
            );
        }
    }
    t
}

/// A Python interpreter that can `import simgrid`: `$WINDROSE_PYTHON`, else `python3`, else
/// `/usr/bin/python3` (Debian's python3-simgrid lives in the system Python, which a pyenv or
/// virtualenv `python3` may hide).
pub fn simgrid_python() -> Option<String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("WINDROSE_PYTHON") {
        candidates.push(p);
    }
    candidates.push("python3".into());
    candidates.push("/usr/bin/python3".into());
    candidates.into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import simgrid"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// What `validation/simgrid_flows.py` printed.
#[derive(Debug, Deserialize)]
pub struct SimgridRun {
    pub scenario: String,
    pub simgrid: Option<String>,
    pub completions: Vec<(usize, usize, f64)>,
    pub simulated_s: f64,
    pub build_wall_s: f64,
    pub run_wall_s: f64,
}

/// Runs `validation/simgrid_flows.py` on a scenario file.
pub fn run_simgrid(python: &str, scenario: &Path) -> SimgridRun {
    let script = validation_dir().join("simgrid_flows.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(scenario)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {} failed: {}\n{}",
        script.display(),
        scenario.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON from {}: {e}\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The largest relative difference between our completion times and SimGrid's, and where.
pub fn max_relative_error(ours: &Completions, sg: &SimgridRun) -> (f64, (usize, usize)) {
    let expected: usize = ours.iter().map(Vec::len).sum();
    assert_eq!(
        sg.completions.len(),
        expected,
        "SimGrid reported {} completions, the scenario has {expected} messages",
        sg.completions.len()
    );
    let mut worst = (0.0, (0, 0));
    for &(i, k, t) in &sg.completions {
        let o = ours[i][k];
        let rel = (o - t).abs() / t.abs().max(f64::MIN_POSITIVE);
        assert!(o.is_finite(), "flow {i} message {k}: never delivered by us");
        if rel > worst.0 || rel.is_nan() {
            worst = (rel, (i, k));
        }
    }
    worst
}

/// A scratch path for a generated scenario file.
pub fn scratch_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.toml", std::process::id()))
}
