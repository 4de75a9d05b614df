//! `windrose reproduce weather`: issue 16's series of broadcasts while the weather changes, in
//! the simulator, side by side with the same series run on the emulated testbed
//! (`data/weather/series.sh`, whose CSV `--testbed` reads).
//!
//! The series: data/scenarios/testbed/four-clusters.toml (4 clusters x 4 nodes), the WAN
//! between clusters 0 and 1 at 5 MB/s both ways (as fast as the fastest WAN there; every
//! policy's first tree crossed it), `--count` broadcasts of `--size` from member 0 one after
//! the other (each starts when the previous one's completion reached the root), and that WAN
//! slowed to 0.5 MB/s after the `--change-after`-th. One fresh group per policy:
//! `static:balanced-path`, `adapt` (position swaps, threshold 0.2), `rebuild:balanced-path`,
//! `rebuild:mst`, and two oracles that know the true costs (the platform's, a perfect view)
//! and the change in advance: the pre-change platform's tree up to the change, the
//! post-change one's from the first broadcast after it.
//!
//! - `oracle` (the issue's, against which adapt is judged): plans with the freedom `adapt`
//!   has, i.e. the planner's `adapt` policy itself on each phase's true costs: its first tree
//!   for the message's [`Bound`](windrose_proto::planner::Bound) (for these sizes the site-ordered binomial tree), built on
//!   the true costs. Binomial-shaped, like every tree the swap strategies can reach, so
//!   adapt / oracle measures what learning the weather costs, not a tree shape adapt may not
//!   use.
//! - `oracle:mst`: MSTs on the true costs (any shape; the previous oracle, kept as a
//!   reference): what a tree free of the binomial shape would do. On the testbed it is
//!   static:mst trees built on a view that has learnt each network first (series.sh).
//!
//! Balanced-Path is no oracle here: it ranks trees by their costliest path, which cannot see
//! several tree edges sharing one WAN path (on the testbed, rebuild:balanced-path planned from
//! a view that had measured the slowed pairs crossed the link in eight warm-up broadcasts of
//! eight).
//!
//! Which broadcasts used the slowed link is read from the bytes that crossed it (the
//! simulator's link counters; on the testbed, its WAN classes' counters): a broadcast avoids
//! it when less than half its message crossed. The time from the change to the first
//! broadcast that avoids it is given in collectives and in probe periods (500 ms, the
//! members' prober).

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::units::{format_size, parse_size};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::choice::platform_links;
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::host::{App, AppRequest, BroadcastRequest};
use windrose_proto::planner::{Planner, TreePolicy};
use windrose_proto::probe::ProbeConfig;
use windrose_proto::Input;
use windrose_sim::engine::{SimConfig, Simulation};
use windrose_sim::group::{group, start_input};
use windrose_sim::network::Change;
use windrose_trees::TreeAlgorithm;

/// The platform of the series (the README's demo network).
const SCENARIO: &str = include_str!("../../../../data/scenarios/testbed/four-clusters.toml");
/// The members' prober period and gossip period (`group serve`'s).
const PROBE_PERIOD: Duration = Duration::from_millis(500);
const GOSSIP: Duration = Duration::from_secs(2);
const SEGMENT: u64 = 256 << 10;
/// The slowed WAN link's rate before and after the change, bytes/s.
const FAST: f64 = 5e6;
const SLOW: f64 = 0.5e6;
/// Seconds after the group starts before the first broadcast (connections, first probes), as
/// the testbed script waits.
const SETTLE_S: f64 = 3.0;
/// The bar: adaptive at least this much faster than static in total, and within this
/// fraction of the oracle.
const WANT_SPEEDUP: f64 = 2.0;
const WANT_WITHIN_ORACLE: f64 = 0.15;

/// Options of `windrose reproduce weather`.
#[derive(Debug, Args)]
pub struct WeatherArgs {
    /// Broadcasts in the series.
    #[arg(long, default_value_t = 20)]
    count: usize,
    /// Bytes per broadcast.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    size: u64,
    /// The WAN slows after this many broadcasts.
    #[arg(long, default_value_t = 5)]
    change_after: usize,
    /// The CSV `data/weather/series.sh` printed for the same series on the testbed: shown
    /// beside the simulator's.
    #[arg(long, value_name = "FILE")]
    testbed: Option<PathBuf>,
    /// Seed of the simulated hosts.
    #[arg(long, default_value_t = 16)]
    seed: u64,
    /// Print JSON instead of the tables.
    #[arg(long)]
    json: bool,
}

/// The policies of the series, by the names the testbed script uses; the first, second and
/// last are the static, adaptive and oracle.
const POLICIES: [&str; 6] = [
    "static:balanced-path",
    "adapt",
    "rebuild:balanced-path",
    "rebuild:mst",
    "oracle:mst",
    "oracle",
];

/// One broadcast of a series.
#[derive(Clone, Debug, Serialize)]
struct Broadcast {
    /// 1-based.
    index: usize,
    seconds: f64,
    /// When it started, seconds after the change (None before it).
    start_after_change_s: Option<f64>,
    /// Bytes that crossed the slowed WAN link (both ways) during it.
    slow_link_bytes: u64,
}

/// What a series of one policy came to.
#[derive(Clone, Debug, Serialize)]
struct Outcome {
    policy: String,
    broadcasts: Vec<Broadcast>,
    total_s: f64,
    /// The first broadcast after the change whose tree avoided the slowed link, counted from
    /// the change (1: the first after it), and when it started in probe periods after it.
    avoided_after_collectives: Option<usize>,
    avoided_after_probe_periods: Option<f64>,
}

impl Outcome {
    fn new(policy: &str, broadcasts: Vec<Broadcast>, size: u64, change_after: usize) -> Outcome {
        let first = broadcasts
            .iter()
            .find(|b| b.index > change_after && b.slow_link_bytes < size / 2);
        Outcome {
            policy: policy.to_string(),
            total_s: broadcasts.iter().map(|b| b.seconds).sum(),
            avoided_after_collectives: first.map(|b| b.index - change_after),
            avoided_after_probe_periods: first
                .and_then(|b| b.start_after_change_s)
                .map(|s| s / PROBE_PERIOD.as_secs_f64()),
            broadcasts,
        }
    }
}

/// The ratios the issue asks for, of one side (simulator or testbed).
#[derive(Clone, Debug, Serialize)]
struct Verdict {
    static_over_adapt: f64,
    adapt_over_oracle: f64,
    /// Every policy's total over the oracle's.
    over_oracle: BTreeMap<String, f64>,
}

impl Verdict {
    fn of(outcomes: &[Outcome]) -> Option<Verdict> {
        let total = |p: &str| outcomes.iter().find(|o| o.policy == p).map(|o| o.total_s);
        let oracle = total(POLICIES[POLICIES.len() - 1])?;
        let adapt = total(POLICIES[1])?;
        Some(Verdict {
            static_over_adapt: total(POLICIES[0])? / adapt,
            adapt_over_oracle: adapt / oracle,
            over_oracle: outcomes
                .iter()
                .map(|o| (o.policy.clone(), o.total_s / oracle))
                .collect(),
        })
    }
}

#[derive(Serialize)]
struct Report {
    count: usize,
    bytes: u64,
    change_after: usize,
    simulator: Vec<Outcome>,
    simulator_verdict: Option<Verdict>,
    testbed: Vec<Outcome>,
    testbed_verdict: Option<Verdict>,
}

/// The series' platform: four-clusters.toml with the WAN between clusters 0 and 1 at `bytes_s`
/// both ways.
fn platform(bytes_s: f64) -> anyhow::Result<Platform> {
    let s = windrose_sim::scenario::parse_scenario(
        SCENARIO,
        std::path::Path::new("four-clusters.toml"),
    )?;
    let mut p = s.platform;
    for link in slow_link() {
        p.set_capacity(link, bytes_s)?;
    }
    Ok(p)
}

fn slow_link() -> [LinkId; 2] {
    let wan = |a, b| LinkId::Wan {
        from: ClusterId(a),
        to: ClusterId(b),
    };
    [wan(0, 1), wan(1, 0)]
}

/// The oracle's tree from node 0 on `platform`'s true costs: `algorithm`'s, or (None) the
/// one the `adapt` policy would start from with a perfect view.
fn perfect_tree(
    algorithm: Option<TreeAlgorithm>,
    platform: &Platform,
    bytes: u64,
) -> anyhow::Result<TreeSpec> {
    let links = platform_links(platform);
    let costs = links.transfer_costs(bytes, SEGMENT);
    let clusters: Vec<ClusterId> = (0..platform.node_count() as u32)
        .map(|i| platform.cluster_of(NodeId(i)))
        .collect();
    let tree = match algorithm {
        Some(algorithm) => algorithm.build(&costs, Some(&clusters), NodeId(0))?,
        None => {
            Planner::new()
                .plan(
                    NodeId(0),
                    TreePolicy::default(),
                    &costs,
                    &clusters,
                    &[],
                    links.bound(bytes),
                )?
                .tree
        }
    };
    Ok(TreeSpec::of(&tree))
}

/// The series under `policy` in the simulator.
fn simulate(policy: &str, a: &WeatherArgs) -> anyhow::Result<Outcome> {
    let before = platform(FAST)?;
    let algorithm = match (policy, policy.strip_prefix("oracle:")) {
        ("oracle", _) => Some(None),
        (_, Some(algo)) => Some(Some(
            algo.parse::<TreeAlgorithm>().map_err(anyhow::Error::msg)?,
        )),
        _ => None,
    };
    let oracle = match algorithm {
        Some(algo) => Some((
            perfect_tree(algo, &before, a.size)?,
            perfect_tree(algo, &platform(SLOW)?, a.size)?,
        )),
        None => None,
    };
    let live: Option<TreePolicy> = match oracle {
        Some(_) => None,
        None => Some(policy.parse().map_err(anyhow::Error::msg)?),
    };
    let config = SimConfig {
        strict: true,
        // Slices of the one data buffer: how the driving loop sees a broadcast delivered.
        record_deliveries: true,
        ..SimConfig::default()
    };
    let mut sim = group(before.clone(), config, a.seed, |c| {
        c.probe = Some(ProbeConfig {
            period: PROBE_PERIOD,
            rounds: u32::MAX,
        });
        c.weather.gossip = Some(GOSSIP);
    })?;
    let data = Bytes::from(
        (0..a.size)
            .map(|i| (i.wrapping_mul(31) % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let n = before.node_count() as u32;
    let slow_bytes = |sim: &Simulation| -> u64 {
        slow_link()
            .iter()
            .map(|&l| sim.network().link_stats(l).bytes)
            .sum::<f64>() as u64
    };
    let mut t = SETTLE_S;
    let mut changed_at = None;
    let mut broadcasts = Vec::new();
    for k in 1..=a.count {
        if k == a.change_after + 1 {
            for link in slow_link() {
                sim.schedule_change(
                    t,
                    Change::Capacity {
                        link,
                        bytes_s: SLOW,
                    },
                )?;
            }
            changed_at = Some(t);
        }
        let input = match (&oracle, live) {
            (Some((pre, post)), _) => start_input(
                CollectiveSpec::Broadcast {
                    tree: if k > a.change_after { post } else { pre }.clone(),
                    segment_bytes: SEGMENT,
                    max_frame_payload: SEGMENT as u32,
                },
                data.clone(),
                None,
            ),
            (None, Some(policy)) => {
                Input::App(App::new(AppRequest::StartBroadcast(BroadcastRequest {
                    policy,
                    segment_bytes: SEGMENT,
                    max_frame_payload: SEGMENT as u32,
                    data: data.clone(),
                    transfer: None,
                })))
            }
            (None, None) => unreachable!("a policy or the oracle"),
        };
        let bytes_before = slow_bytes(&sim);
        sim.input_at(NodeId(0), t, input)?;
        // Until the root reports the k-th completion.
        let (started, ended) = loop {
            sim.run_until(sim.now().max(t) + 0.5)?;
            // The metrics (a copy of every report so far) only once every member has the data.
            let delivered = (1..n).all(|i| {
                let got: usize = sim.delivered(NodeId(i)).iter().map(|(_, b)| b.len()).sum();
                got as u64 >= k as u64 * a.size
            });
            if !delivered {
                if sim.now() > t + 3600.0 {
                    bail!("{policy}, broadcast {k}: not delivered after an hour of simulated time");
                }
                continue;
            }
            let m = sim.metrics();
            if let Some(done) = m.completions(NodeId(0)).nth(k - 1) {
                if !done.is_whole(n as usize) {
                    bail!(
                        "{policy}, broadcast {k}: {} finished, {} failed",
                        done.finished,
                        done.failed
                    );
                }
                let start = m.nodes[0]
                    .reports
                    .iter()
                    .find_map(|r| match r.report {
                        windrose_proto::Report::CollectiveStarted { transfer, .. }
                            if transfer == done.transfer =>
                        {
                            Some(r.at_s)
                        }
                        _ => None,
                    })
                    .context("a completion without its start")?;
                break (start, done.at_s);
            }
            if sim.now() > t + 3600.0 {
                bail!("{policy}, broadcast {k}: not complete after an hour of simulated time");
            }
        };
        broadcasts.push(Broadcast {
            index: k,
            seconds: ended - started,
            start_after_change_s: changed_at.map(|c| started - c),
            slow_link_bytes: slow_bytes(&sim) - bytes_before,
        });
        // The next starts when this one's completion reached the root (or the run's clock, if
        // it went past).
        t = sim.now().max(ended);
    }
    Ok(Outcome::new(policy, broadcasts, a.size, a.change_after))
}

/// The testbed's series from `data/weather/series.sh`'s CSV (the oracle's untimed warm-up
/// broadcasts, index 0, left out).
fn read_testbed(path: &std::path::Path, a: &WeatherArgs) -> anyhow::Result<Vec<Outcome>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut runs: BTreeMap<String, Vec<Broadcast>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.splitn(6, ',').collect();
        let bad = |what: &str| anyhow::anyhow!("{}:{}: {what}: {line:?}", path.display(), i + 1);
        if f.len() < 5 {
            return Err(bad(
                "expected policy,broadcast,seconds,start_s,slow_link_bytes",
            ));
        }
        let index: usize = f[1].parse().map_err(|_| bad("bad broadcast index"))?;
        if index == 0 {
            continue;
        }
        runs.entry(f[0].to_string()).or_default().push(Broadcast {
            index,
            seconds: f[2].parse().map_err(|_| bad("bad seconds"))?,
            start_after_change_s: match f[3] {
                "" => None,
                s => Some(s.parse().map_err(|_| bad("bad start_s"))?),
            },
            slow_link_bytes: f[4].parse().map_err(|_| bad("bad slow_link_bytes"))?,
        });
    }
    Ok(runs
        .into_iter()
        .map(|(policy, b)| Outcome::new(&policy, b, a.size, a.change_after))
        .collect())
}

fn verdict_lines(side: &str, v: &Option<Verdict>) -> String {
    match v {
        None => format!("{side}: not every policy ran\n"),
        Some(v) => format!(
            "{side}: static / adapt {:.2}x ({} >= {WANT_SPEEDUP}x), adapt / oracle {:.2} ({} within \
             {:.0} %); over the oracle: {}\n",
            v.static_over_adapt,
            super::mark(v.static_over_adapt >= WANT_SPEEDUP),
            v.adapt_over_oracle,
            super::mark(v.adapt_over_oracle <= 1.0 + WANT_WITHIN_ORACLE),
            WANT_WITHIN_ORACLE * 100.0,
            v.over_oracle
                .iter()
                .map(|(p, r)| format!("{p} {r:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    }
}

/// Runs the simulator's series, reads the testbed's, prints both.
pub fn run(a: &WeatherArgs) -> anyhow::Result<()> {
    if a.count <= a.change_after || a.change_after == 0 {
        return Err(crate::error::bad_input(format!(
            "--change-after {} must be at least 1 and below --count {}",
            a.change_after, a.count
        )));
    }
    // The file first: a bad one is named before minutes of simulation.
    let testbed = match &a.testbed {
        Some(path) => read_testbed(path, a)?,
        None => Vec::new(),
    };
    let mut sim = Vec::new();
    for p in POLICIES {
        eprintln!("simulating {p} ...");
        sim.push(simulate(p, a)?);
    }
    let report = Report {
        count: a.count,
        bytes: a.size,
        change_after: a.change_after,
        simulator_verdict: Verdict::of(&sim),
        testbed_verdict: Verdict::of(&testbed),
        simulator: sim,
        testbed,
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "{} broadcasts of {} from member 0 on four-clusters.toml; wan 0<->1 5 -> 0.5 MB/s after \
         broadcast {}; seconds per broadcast (* = crossed the slowed link), simulator | testbed",
        a.count,
        format_size(a.size),
        a.change_after
    );
    let mut header = format!("{:>3}", "#");
    for p in POLICIES {
        header += &format!(" | {p:>24}");
    }
    outln!("{header}");
    let cell = |o: Option<&Outcome>, k: usize| -> String {
        o.and_then(|o| o.broadcasts.iter().find(|b| b.index == k))
            .map_or("-".into(), |b| {
                let star = if b.slow_link_bytes >= a.size / 2 {
                    "*"
                } else {
                    " "
                };
                format!("{:.2}{star}", b.seconds)
            })
    };
    let find = |v: &[Outcome], p: &str| v.iter().find(|o| o.policy == p).cloned();
    for k in 1..=a.count {
        let mut line = format!("{k:>3}");
        for p in POLICIES {
            let (s, t) = (find(&report.simulator, p), find(&report.testbed, p));
            line += &format!(" | {:>11} {:>12}", cell(s.as_ref(), k), cell(t.as_ref(), k));
        }
        outln!("{line}");
    }
    let mut total = format!("{:>3}", "sum");
    let mut avoid = format!("{:>3}", "avd");
    for p in POLICIES {
        let (s, t) = (find(&report.simulator, p), find(&report.testbed, p));
        let tot = |o: &Option<Outcome>| {
            o.as_ref()
                .map_or("-".into(), |o| format!("{:.1}", o.total_s))
        };
        let av = |o: &Option<Outcome>| {
            o.as_ref().map_or("-".into(), |o| {
                match (o.avoided_after_collectives, o.avoided_after_probe_periods) {
                    (Some(c), Some(pp)) => format!("{c}c/{pp:.0}pp"),
                    _ => "never".into(),
                }
            })
        };
        total += &format!(" | {:>11} {:>12}", tot(&s), tot(&t));
        avoid += &format!(" | {:>11} {:>12}", av(&s), av(&t));
    }
    outln!("{total}\n{avoid}");
    outln!(
        "avd: the first broadcast after the change that avoided the slowed link, in collectives \
         from the change (1 = the next) / when it started, in probe periods (500 ms) after it"
    );
    out!("{}", verdict_lines("simulator", &report.simulator_verdict));
    if a.testbed.is_some() {
        out!("{}", verdict_lines("testbed", &report.testbed_verdict));
    }
    Ok(())
}
