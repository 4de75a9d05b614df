//! `windrose reproduce mob [--quick] [--out DIR]`: seed 002 (den Burger & Kielmann, "MOB:
//! zero-configuration high-throughput multicasting for grid applications") in the simulator.
//!
//! - **Fig. 4**: four clusters of 16 nodes, 600 MB from a root in A, Balanced Multicasting,
//!   BitTorrent and MOB in the five WAN scenarios (fast links, slow links, fast→slow, slow→fast,
//!   mayhem), from the shipped `data/scenarios/mob/*.toml` files;
//! - **Fig. 5**: the same with clusters of 4, 12, 16 and 32 nodes;
//! - **100 ms**: both again with 100 ms round trips;
//! - **MagPIe**: MOB against MagPIe's broadcast on fast links, messages from 32 KB to 128 MB, with
//!   20, 40 and 100 ms round trips, and the crossover size where MOB overtakes MagPIe;
//! - **Fig. 6** (local bottleneck): 100 Mbit/s network cards, 1 to 16 nodes per cluster.
//!
//! Figs. 4-6 carry two MOB curves: `mob`, ours (rarest-first inside the mob share and a request
//! depth adapted to each peer's rate and round trip), and `mob-paper`, the paper's exact choices
//! (random pieces, R = 5), so what our two additions change is measured, not claimed.
//!
//! Every result is also given as a fraction of the max-flow bound: the bound's completion time
//! over the run's changes (`windrose bound`'s engine) divided by ours. With changes, that bound
//! is the time-expanded max-flow, where relays may keep data from one interval to the next, so
//! no protocol can beat it (integrating each interval's max-flow alone would not be a bound: a
//! relay can take data early and forward it after a slow link recovers). The summary
//! checks the paper's claims with ✓/✗. Files: `fig4.csv`, `fig5.csv`, `rtt100.csv`,
//! `magpie.csv`, `fig6.csv`, a PNG for each, `REPORT.md` and `results.json`.
//!
//! The full run multicasts in 256 KiB pieces: with 16 ranks sharing a 0.8 MB/s WAN link, one
//! 1 MiB piece per flow takes longer than a round of the whole mob, and MOB's share of the
//! bound in slow links drops from 92 % to 79 %. `--quick` (for CI, under two minutes on two
//! cores) multicasts 60 MB instead of 600 MB in 64 KiB pieces, with the scenarios' clocks scaled by the same factor (the switch at 3 s
//! instead of 30 s, mayhem every 0.5 s instead of 5 s), fewer message sizes and cluster sizes.
//!
//! Ours, not the paper's: the WAN bandwidths (see `windrose_sim::multicast::seed002`), the piece
//! sizes, the mayhem seed, and the platform model — a node has one uplink and one downlink for
//! local and wide-area traffic alike, so in Fig. 6 the root's 100 Mbit/s card caps every
//! protocol at 12.5 MB/s, where the paper's DAS-2 nodes had Myrinet inside a cluster.

use super::output::{create_dir, write_atomic};
use super::plot::{grouped_bars, line_chart, Bars, Labels, Line};
use super::{mark, Check, MobArgs};
use crate::bound_cmd::bound_report;
use crate::output::vtable;
use anyhow::{anyhow, bail, Context, Result};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::units::format_size;
use windrose_model::{ClusterId, NodeId};
use windrose_sim::multicast::{seed002, MulticastProtocol, SharedData};
use windrose_sim::scenario::{parse_scenario, run_scenario_shared, MobVariant, Scenario};

/// The shipped scenario files: (name, 20 ms file, 100 ms file).
const SCENARIOS: [(&str, &str, &str); 5] = [
    (
        "fast links",
        include_str!("../../../../data/scenarios/mob/fast-links.toml"),
        include_str!("../../../../data/scenarios/mob/fast-links-100ms.toml"),
    ),
    (
        "slow links",
        include_str!("../../../../data/scenarios/mob/slow-links.toml"),
        include_str!("../../../../data/scenarios/mob/slow-links-100ms.toml"),
    ),
    (
        "fast→slow",
        include_str!("../../../../data/scenarios/mob/fast-slow.toml"),
        include_str!("../../../../data/scenarios/mob/fast-slow-100ms.toml"),
    ),
    (
        "slow→fast",
        include_str!("../../../../data/scenarios/mob/slow-fast.toml"),
        include_str!("../../../../data/scenarios/mob/slow-fast-100ms.toml"),
    ),
    (
        "mayhem",
        include_str!("../../../../data/scenarios/mob/mayhem.toml"),
        include_str!("../../../../data/scenarios/mob/mayhem-100ms.toml"),
    ),
];

/// A curve of the figures: a protocol, and for MOB which variant (ours or the paper's exact
/// choices, so that what our two additions buy is visible beside the paper's algorithm).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Series {
    Balanced,
    BitTorrent,
    /// MOB with our defaults (rarest-first inside the mob share, adaptive request depth).
    Mob,
    /// MOB exactly as the paper: random piece choice, R = 5.
    MobPaper,
    Magpie,
}

impl Series {
    fn protocol(self) -> MulticastProtocol {
        match self {
            Series::Balanced => MulticastProtocol::Balanced,
            Series::BitTorrent => MulticastProtocol::BitTorrent,
            Series::Mob | Series::MobPaper => MulticastProtocol::Mob,
            Series::Magpie => MulticastProtocol::Magpie,
        }
    }

    fn mob_variant(self) -> MobVariant {
        if self == Series::MobPaper {
            MobVariant::Paper
        } else {
            MobVariant::Windrose
        }
    }

    fn name(self) -> &'static str {
        self.protocol().label(self.mob_variant())
    }
}

impl std::fmt::Display for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Series {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The curves of Figs. 4-6: the paper's three protocols in its order, then the paper's MOB.
const FIG_SERIES: [Series; 4] = [
    Series::Balanced,
    Series::BitTorrent,
    Series::Mob,
    Series::MobPaper,
];

/// The paper's data size.
const FULL_BYTES: u64 = 600_000_000;
/// `--quick`'s.
const QUICK_BYTES: u64 = 60_000_000;

/// What the sweep runs with.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Setup {
    pub quick: bool,
    pub seed: u64,
    pub data_bytes: u64,
    pub piece_bytes: u32,
    /// Scenario clocks are multiplied by this (1 for the paper's sizes).
    pub time_scale: f64,
    pub magpie_sizes: Vec<u64>,
    pub magpie_rtts_ms: Vec<u32>,
    pub fig6_nodes: Vec<usize>,
}

impl Setup {
    pub(crate) fn new(quick: bool, seed: u64) -> Setup {
        let data_bytes = if quick { QUICK_BYTES } else { FULL_BYTES };
        let magpie_sizes = if quick {
            vec![32 << 10, 512 << 10, 8 << 20, 32 << 20]
        } else {
            (15..=27).map(|k| 1u64 << k).collect()
        };
        Setup {
            quick,
            seed,
            data_bytes,
            piece_bytes: if quick { 64 << 10 } else { 256 << 10 },
            time_scale: data_bytes as f64 / FULL_BYTES as f64,
            magpie_sizes,
            magpie_rtts_ms: if quick {
                vec![20, 100]
            } else {
                vec![20, 40, 100]
            },
            fig6_nodes: if quick {
                vec![1, 4, 16]
            } else {
                vec![1, 2, 4, 8, 16]
            },
        }
    }
}

/// One simulated multicast and what it gave.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Point {
    /// fig4, fig5, rtt100, rtt100-4-12-16-32, magpie, fig6.
    pub experiment: &'static str,
    /// The scenario (fast links, …) or the x value's label.
    pub scenario: String,
    /// The x value: message bytes (magpie), nodes per cluster (fig6), else 0.
    pub x: u64,
    pub rtt_ms: u32,
    /// The protocol, `mob-paper` for the paper's MOB.
    pub protocol: Series,
    pub nodes: usize,
    pub data_bytes: u64,
    pub piece_bytes: u32,
    pub completion_s: Option<f64>,
    pub throughput_mb_s: Option<f64>,
    /// The bound's mean throughput over the run's capacity changes, MB/s.
    pub bound_mb_s: f64,
    pub fraction_of_bound: Option<f64>,
    pub wan_payload_bytes: u64,
    /// Piece payload that left the root's cluster over its WAN links: above `data_bytes`,
    /// some pieces left it more than once.
    pub root_egress_bytes: u64,
    /// The capacity of the root cluster's WAN links out at the run's start, MB/s.
    pub root_egress_capacity_mb_s: f64,
    pub all_finished: bool,
    pub events: u64,
    pub wall_s: f64,
}

/// One run to make.
struct Job {
    experiment: &'static str,
    scenario_name: String,
    x: u64,
    rtt_ms: u32,
    series: Series,
    scenario: Scenario,
    data: Arc<SharedData>,
}

fn parse(name: &str, text: &str) -> Result<Scenario> {
    parse_scenario(text, Path::new(&format!("data/scenarios/mob/{name}.toml")))
        .map_err(|e| anyhow!("{e}"))
}

/// `platform` with `nodes[i]` nodes in cluster i and node links of `node_bytes_s`, its WAN
/// links (capacities and latencies) kept.
fn resized(platform: &Platform, nodes: [usize; 4], node_bytes_s: Option<f64>) -> Platform {
    let mut wan = [[0.0; 4]; 4];
    for (i, row) in wan.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            if i != j {
                *v = platform.capacity_bytes_s(LinkId::Wan {
                    from: ClusterId(i as u32),
                    to: ClusterId(j as u32),
                }) / 1e6;
            }
        }
    }
    let latency = platform.wan_latency_s(ClusterId(0), ClusterId(1));
    let node = node_bytes_s.unwrap_or_else(|| platform.capacity_bytes_s(LinkId::NodeUp(NodeId(0))));
    seed002::platform(nodes, &wan, latency, node)
}

/// A scenario of the sweep: the shipped file with this protocol, data and cluster sizes, and
/// its clock scaled by the setup's factor.
fn variant(
    base: &Scenario,
    setup: &Setup,
    series: Series,
    data: &SharedData,
    platform: Option<Platform>,
) -> Scenario {
    let mut s = base.clone();
    if let Some(p) = platform {
        s.platform = p;
    }
    s.default_seed = setup.seed;
    s.workload.message_bytes = data.len();
    if let Some(m) = s.workload.multicast.as_mut() {
        m.protocol = series.protocol();
        m.mob_variant = series.mob_variant();
        m.piece_bytes = data.manifest.piece_len();
    }
    for c in &mut s.changes {
        c.at_s *= setup.time_scale;
    }
    if let Some(m) = s.mayhem.as_mut() {
        m.period_s *= setup.time_scale;
        m.start_s *= setup.time_scale;
    }
    s
}

/// The piece size of a MagPIe-comparison message (ours): about 512 pieces (8 per node of the
/// 4 x 16 testbed, so every mob share is a few pieces deep), 4 KiB to 1 MiB.
fn magpie_piece(bytes: u64) -> u32 {
    (bytes / 512).next_power_of_two().clamp(4 << 10, 1 << 20) as u32
}

fn jobs(setup: &Setup) -> Result<Vec<Job>> {
    let mut out = Vec::new();
    let data = Arc::new(
        SharedData::zeros(setup.data_bytes, setup.piece_bytes)
            .map_err(|e| anyhow!("the data's manifest: {e}"))?,
    );
    let fig5_nodes = [4, 12, 16, 32];
    for (experiment, rtt_ms, sizes) in [
        ("fig4", 20, None),
        ("fig5", 20, Some(fig5_nodes)),
        ("rtt100", 100, None),
        ("rtt100-4-12-16-32", 100, Some(fig5_nodes)),
    ] {
        for (name, t20, t100) in SCENARIOS {
            let base = parse(name, if rtt_ms == 20 { t20 } else { t100 })?;
            for series in FIG_SERIES {
                let platform = sizes.map(|n| resized(&base.platform, n, None));
                out.push(Job {
                    experiment,
                    scenario_name: name.to_string(),
                    x: 0,
                    rtt_ms,
                    series,
                    scenario: variant(&base, setup, series, &data, platform),
                    data: data.clone(),
                });
            }
        }
    }
    let fast = parse("fast links", SCENARIOS[0].1)?;
    for &bytes in &setup.magpie_sizes {
        let d = Arc::new(
            SharedData::zeros(bytes, magpie_piece(bytes))
                .map_err(|e| anyhow!("the data's manifest: {e}"))?,
        );
        for &rtt in &setup.magpie_rtts_ms {
            let mut p = fast.platform.clone();
            for i in 0..4u32 {
                for j in 0..4u32 {
                    if i != j {
                        p.set_wan_latency(ClusterId(i), ClusterId(j), f64::from(rtt) / 2e3)
                            .map_err(|e| anyhow!("{e}"))?;
                    }
                }
            }
            for series in [Series::Magpie, Series::Mob] {
                out.push(Job {
                    experiment: "magpie",
                    scenario_name: format_size(bytes),
                    x: bytes,
                    rtt_ms: rtt,
                    series,
                    scenario: variant(&fast, setup, series, &d, Some(p.clone())),
                    data: d.clone(),
                });
            }
        }
    }
    for &k in &setup.fig6_nodes {
        let lan = [[1250.0; 4]; 4];
        let p = seed002::platform([k; 4], &lan, seed002::LATENCY_20MS_RTT_S, 12.5e6);
        for series in FIG_SERIES {
            out.push(Job {
                experiment: "fig6",
                scenario_name: format!("{k} per cluster"),
                x: k as u64,
                rtt_ms: 20,
                series,
                scenario: variant(&fast, setup, series, &data, Some(p.clone())),
                data: data.clone(),
            });
        }
    }
    Ok(out)
}

fn run_job(job: &Job) -> Result<Point> {
    let s = &job.scenario;
    let protocol = job.series;
    let report = run_scenario_shared(s, s.default_seed, None, &mut |_| {}, Some(&job.data))
        .map_err(|e| anyhow!("{} {} {protocol}: {e}", job.experiment, job.scenario_name))?;
    let m = report
        .multicast
        .first()
        .ok_or_else(|| anyhow!("no multicast outcome"))?;
    let bound = bound_report(s, s.default_seed, false)?;
    let bound_completion_s = bound.completion_s.unwrap_or(m.bound_completion_s);
    let home = s.platform.cluster_of(m.root);
    let root_egress_bytes = m
        .wan_payload
        .iter()
        .filter(|w| w.from == home)
        .map(|w| w.bytes)
        .sum();
    let root_egress_capacity_mb_s = (0..s.platform.cluster_count() as u32)
        .map(ClusterId)
        .filter(|&c| c != home)
        .map(|to| s.platform.capacity_bytes_s(LinkId::Wan { from: home, to }))
        .sum::<f64>()
        / 1e6;
    Ok(Point {
        experiment: job.experiment,
        scenario: job.scenario_name.clone(),
        x: job.x,
        rtt_ms: job.rtt_ms,
        protocol,
        nodes: m.nodes,
        data_bytes: m.data_bytes,
        piece_bytes: m.piece_bytes,
        completion_s: m.completion_s,
        throughput_mb_s: m.throughput_mb_s,
        bound_mb_s: m.data_bytes as f64 / bound_completion_s / 1e6,
        fraction_of_bound: m
            .completion_s
            .filter(|&c| c > 0.0)
            .map(|c| bound_completion_s / c),
        wan_payload_bytes: m.wan_payload_bytes,
        root_egress_bytes,
        root_egress_capacity_mb_s,
        all_finished: report.all_finished(),
        events: m.events,
        wall_s: m.wall_s,
    })
}

/// Everything the reproduction produced.
#[derive(Debug, Serialize)]
pub(crate) struct Reproduction {
    pub setup: Setup,
    pub points: Vec<Point>,
    pub checks: Vec<CheckRow>,
}

/// A check, serializable.
#[derive(Debug, Serialize)]
pub(crate) struct CheckRow {
    pub ok: bool,
    pub what: String,
}

fn tp(p: &Point) -> f64 {
    p.throughput_mb_s.unwrap_or(0.0)
}

/// The point of (experiment, scenario or x, protocol, rtt).
struct Index<'a>(BTreeMap<(&'a str, String, Series, u32), &'a Point>);

impl<'a> Index<'a> {
    fn new(points: &'a [Point]) -> Self {
        Index(
            points
                .iter()
                .map(|p| ((p.experiment, p.scenario.clone(), p.protocol, p.rtt_ms), p))
                .collect(),
        )
    }

    fn get(&self, e: &str, s: &str, p: Series, rtt: u32) -> Option<&'a Point> {
        self.0.get(&(e, s.to_string(), p, rtt)).copied()
    }

    fn tp(&self, e: &str, s: &str, p: Series, rtt: u32) -> f64 {
        self.get(e, s, p, rtt).map_or(0.0, tp)
    }
}

/// The smallest message size from which MOB is faster than MagPIe at every larger size.
fn crossover(points: &[Point], rtt: u32) -> Option<u64> {
    let idx = Index::new(points);
    let mut sizes: Vec<u64> = points
        .iter()
        .filter(|p| p.experiment == "magpie" && p.rtt_ms == rtt)
        .map(|p| p.x)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut best = None;
    for &s in sizes.iter().rev() {
        let name = format_size(s);
        let mob = idx.tp("magpie", &name, Series::Mob, rtt);
        let magpie = idx.tp("magpie", &name, Series::Magpie, rtt);
        if mob > magpie {
            best = Some(s);
        } else {
            break;
        }
    }
    best
}

fn checks(setup: &Setup, points: &[Point]) -> Vec<Check> {
    use Series::{Balanced, BitTorrent, Magpie, Mob, MobPaper};
    let idx = Index::new(points);
    let mut c = Vec::new();
    let all_done = points
        .iter()
        .all(|p| p.all_finished && p.completion_s.is_some());
    c.push(Check {
        ok: all_done,
        what: format!(
            "every node of all {} runs received every byte, verified, and finished",
            points.len()
        ),
    });
    for (e, rtt) in [
        ("fig4", 20),
        ("fig5", 20),
        ("rtt100", 100),
        ("rtt100-4-12-16-32", 100),
    ] {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.0).collect();
        let ratios: Vec<f64> = names
            .iter()
            .map(|s| idx.tp(e, s, Mob, rtt) / idx.tp(e, s, BitTorrent, rtt).max(1e-12))
            .collect();
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        c.push(Check {
            ok: min >= 1.0,
            what: format!(
                "{e}: MOB ≥ BitTorrent in every scenario (paper: always); ours: MOB / BitTorrent ≥ {min:.2}"
            ),
        });
        c.push(Check {
            ok: min >= 1.3,
            what: format!("{e}: MOB ≥ 1.3 × BitTorrent in every scenario (issue 6's target)"),
        });
        let paper_min = names
            .iter()
            .map(|s| idx.tp(e, s, MobPaper, rtt) / idx.tp(e, s, BitTorrent, rtt).max(1e-12))
            .fold(f64::INFINITY, f64::min);
        let ours_vs_paper = names
            .iter()
            .map(|s| idx.tp(e, s, Mob, rtt) / idx.tp(e, s, MobPaper, rtt).max(1e-12))
            .fold(f64::INFINITY, f64::min);
        c.push(Check {
            ok: paper_min >= 1.0,
            what: format!(
                "{e}: the paper's MOB (random pieces, R = 5) ≥ BitTorrent in every scenario; ours: ≥ {paper_min:.2} ×, and our MOB ≥ {ours_vs_paper:.2} × the paper's"
            ),
        });
        let statics = ["fast links", "slow links"];
        let static_ratio: Vec<String> = statics
            .iter()
            .map(|s| {
                format!(
                    "{:.2}",
                    idx.tp(e, s, Mob, rtt) / idx.tp(e, s, Balanced, rtt).max(1e-12)
                )
            })
            .collect();
        let static_ok = statics.iter().all(|s| {
            let r = idx.tp(e, s, Mob, rtt) / idx.tp(e, s, Balanced, rtt).max(1e-12);
            (0.85..=1.15).contains(&r)
        });
        let static_why = || {
            egress_why(
                setup,
                statics.iter().filter_map(|s| idx.get(e, s, Mob, rtt)),
            )
        };
        c.push(Check {
            ok: static_ok,
            what: format!(
                "{e}: MOB ≈ Balanced in the static scenarios (within 15 %); ours: MOB / Balanced = {}{}",
                static_ratio.join(", "),
                if static_ok { String::new() } else { static_why() }
            ),
        });
        let dynamic = ["fast→slow", "slow→fast", "mayhem"];
        let dyn_ratio: Vec<f64> = dynamic
            .iter()
            .map(|s| idx.tp(e, s, Mob, rtt) / idx.tp(e, s, Balanced, rtt).max(1e-12))
            .collect();
        c.push(Check {
            ok: dyn_ratio.iter().all(|&r| r > 1.0),
            what: format!(
                "{e}: MOB ahead of Balanced in the dynamic scenarios (paper: all three, far ahead at 20 ms); ours: MOB / Balanced = {}",
                dyn_ratio.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ")
            ),
        });
        if rtt == 20 {
            let fracs: Vec<f64> = statics
                .iter()
                .filter_map(|s| idx.get(e, s, Mob, rtt).and_then(|p| p.fraction_of_bound))
                .collect();
            let min = fracs.iter().copied().fold(f64::INFINITY, f64::min);
            c.push(Check {
                ok: min >= 0.9,
                what: format!(
                    "{e}: MOB ≥ 90 % of the bound in the static scenarios (issue 6's target); ours: ≥ {:.1} %{}",
                    100.0 * min,
                    if min >= 0.9 { String::new() } else { static_why() }
                ),
            });
        }
    }
    // Mayhem vs fast links (Fig. 4).
    let share =
        |p| idx.tp("fig4", "mayhem", p, 20) / idx.tp("fig4", "fast links", p, 20).max(1e-12);
    let (mob_share, bal_share) = (share(Mob), share(Balanced));
    c.push(Check {
        ok: (mob_share - 0.62).abs() <= 0.10,
        what: format!(
            "fig4: MOB in mayhem reaches ≈ 62 % of its fast-links throughput (±10 points); ours: {:.0} %",
            100.0 * mob_share
        ),
    });
    let bal_ok = (bal_share - 0.42).abs() <= 0.10;
    c.push(Check {
        ok: bal_ok,
        what: format!(
            "fig4: Balanced in mayhem reaches ≈ 42 % of its fast-links throughput (±10 points); ours: {:.0} %{}",
            100.0 * bal_share,
            if bal_ok { String::new() } else { mayhem_why(setup, &idx, mob_share, bal_share) }
        ),
    });
    let sf = idx.tp("fig4", "slow→fast", Balanced, 20)
        / idx.tp("fig4", "slow links", Balanced, 20).max(1e-12);
    c.push(Check {
        ok: (sf - 1.0).abs() <= 0.05,
        what: format!(
            "fig4: Balanced gets the same in slow→fast as in slow links (shaping ignores the new bandwidth); ours: ratio {sf:.2}"
        ),
    });
    // MagPIe.
    let magpie_max = points
        .iter()
        .filter(|p| p.experiment == "magpie" && p.protocol == Magpie)
        .map(tp)
        .fold(0.0, f64::max);
    c.push(Check {
        ok: magpie_max <= 3.0 * 1.05,
        what: format!(
            "magpie: MagPIe never exceeds ≈ 3 MB/s (its slowest WAN link); ours: at most {magpie_max:.2} MB/s"
        ),
    });
    let largest = setup.magpie_sizes.iter().copied().max().unwrap_or(0);
    let mob_big = idx.tp("magpie", &format_size(largest), Mob, 20);
    c.push(Check {
        ok: mob_big >= 0.8 * 8.5 || setup.quick,
        what: format!(
            "magpie: MOB reaches up to ≈ 8.5 MB/s for the largest message ({}); ours: {mob_big:.2} MB/s{}",
            format_size(largest),
            if setup.quick { " (not checked with --quick's sizes)" } else { "" }
        ),
    });
    let worst = points
        .iter()
        .filter(|p| p.experiment == "magpie" && p.protocol == Mob)
        .filter_map(|p| {
            let magpie = idx.get("magpie", &p.scenario, Magpie, p.rtt_ms)?;
            Some((tp(p) / tp(magpie).max(1e-12), p, magpie))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let half = worst.map_or(f64::INFINITY, |w| w.0);
    c.push(Check {
        ok: half >= 0.5,
        what: format!(
            "magpie: MOB always reaches at least half of MagPIe's throughput; ours: ≥ {:.0} %{}",
            100.0 * half,
            match worst {
                Some((_, mob, magpie)) if half < 0.5 => latency_why(mob, magpie),
                _ => String::new(),
            }
        ),
    });
    for (rtt, paper, lo, hi) in [
        (40, "512 KB", 128u64 << 10, 2u64 << 20),
        (100, "32 MB", 8 << 20, 128 << 20),
    ] {
        if !setup.magpie_rtts_ms.contains(&rtt) {
            continue;
        }
        let x = crossover(points, rtt);
        c.push(Check {
            ok: x.is_some_and(|x| (lo..=hi).contains(&x)),
            what: format!(
                "magpie: at {rtt} ms round trips MOB overtakes MagPIe near {paper} (within a factor 4); ours: {}",
                x.map_or_else(|| "never".to_string(), format_size)
            ),
        });
    }
    // Fig. 6.
    if let Some(&k) = setup.fig6_nodes.iter().max() {
        let s = format!("{k} per cluster");
        let (m, b) = (
            idx.tp("fig6", &s, Mob, 20),
            idx.tp("fig6", &s, BitTorrent, 20),
        );
        c.push(Check {
            ok: m >= b,
            what: format!(
                "fig6: with {k} nodes per cluster MOB beats BitTorrent (duplicate pieces slow BitTorrent down); ours: {m:.2} vs {b:.2} MB/s"
            ),
        });
    }
    c
}

/// Why MOB stays below the bound in a static scenario, from the run itself: the bound of
/// these scenarios is the root cluster's WAN capacity (every piece must leave it once), so
/// MOB's fraction of it is about how full those links were over the run divided by how many
/// times the data left the cluster.
fn egress_why<'a>(setup: &Setup, points: impl Iterator<Item = &'a Point>) -> String {
    let parts: Vec<String> = points
        .filter_map(|p| {
            let c = p.completion_s.filter(|&c| c > 0.0)?;
            let copies = p.root_egress_bytes as f64 / p.data_bytes as f64;
            let full = p.root_egress_bytes as f64 / 1e6 / c / p.root_egress_capacity_mb_s;
            let bound_is_egress =
                (p.bound_mb_s - p.root_egress_capacity_mb_s).abs() <= 0.01 * p.bound_mb_s;
            Some(format!(
                "in {} the root's cluster sent {copies:.2} × the data over WAN links that ran {:.0} % full on average{}",
                p.scenario,
                100.0 * full,
                if bound_is_egress { " (the bound is their capacity)" } else { "" }
            ))
        })
        .collect();
    let quick = if setup.quick {
        format!(
            "; --quick multicasts {} where the paper sends {}, so filling the links at the start and the last pieces' end game weigh {:.0} times more: run without --quick for the paper's size",
            format_size(setup.data_bytes),
            format_size(FULL_BYTES),
            FULL_BYTES as f64 / setup.data_bytes as f64
        )
    } else {
        String::new()
    };
    format!(" — why: {}{quick}", parts.join("; "))
}

/// Why Balanced's share in mayhem differs from the paper's: the paper's draws are not
/// published, and how harsh ours are shows in the bound.
fn mayhem_why(setup: &Setup, idx: &Index, mob_share: f64, bal_share: f64) -> String {
    let bound = |s| {
        idx.get("fig4", s, Series::Balanced, 20)
            .map_or(f64::NAN, |p| p.bound_mb_s)
    };
    format!(
        " — why: the paper's mayhem draws are not published; ours (seed {}) leave a bound of {:.0} % of fast links' bound, and Balanced keeps the rates it planned on the start's bandwidths, so its share follows the draws; MOB / Balanced in mayhem: paper 62 / 42 = 1.48, ours {:.2}",
        setup.seed,
        100.0 * bound("mayhem") / bound("fast links"),
        mob_share / bal_share.max(1e-12)
    )
}

/// Why MOB is far behind MagPIe on a small message: it is all latency, counted in one-way
/// WAN delays from the run.
fn latency_why(mob: &Point, magpie: &Point) -> String {
    let one_way_s = f64::from(mob.rtt_ms) / 2e3;
    let delays = |p: &Point| p.completion_s.map_or(f64::NAN, |c| c / one_way_s);
    format!(
        " — why: at {} and {} ms round trips MOB finished after {:.1} one-way WAN delays and MagPIe after {:.1}: a message of {} pieces is all latency, and each WAN hop of MOB's pull costs a Have, a Request and the piece (three one-way delays) where MagPIe's push costs one",
        mob.scenario,
        mob.rtt_ms,
        delays(mob),
        delays(magpie),
        mob.data_bytes.div_ceil(u64::from(mob.piece_bytes.max(1)))
    )
}

fn f(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{:.*}", digits, x * scale))
}

fn csv(points: &[Point], experiment: &str) -> String {
    let mut s = String::from(
        "experiment,scenario,x,rtt_ms,protocol,nodes,data_bytes,piece_bytes,completion_s,throughput_mb_s,bound_mb_s,fraction_of_bound,wan_payload_bytes,all_finished,events,wall_s\n",
    );
    for p in points
        .iter()
        .filter(|p| p.experiment.starts_with(experiment))
    {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{:.6},{},{},{},{},{:.3}",
            p.experiment,
            p.scenario,
            p.x,
            p.rtt_ms,
            p.protocol,
            p.nodes,
            p.data_bytes,
            p.piece_bytes,
            f(p.completion_s, 1.0, 6),
            f(p.throughput_mb_s, 1.0, 6),
            p.bound_mb_s,
            f(p.fraction_of_bound, 1.0, 6),
            p.wan_payload_bytes,
            p.all_finished,
            p.events,
            p.wall_s
        );
    }
    s
}

/// The table of one scenario experiment: a row per scenario, MB/s and % of the bound per
/// protocol.
fn scenario_table(points: &[Point], e: &str, rtt: u32) -> String {
    let idx = Index::new(points);
    let mut header = vec!["scenario", "bound MB/s"];
    let names: Vec<String> = FIG_SERIES
        .iter()
        .flat_map(|p| [format!("{p} MB/s"), format!("{p} %bound")])
        .collect();
    header.extend(names.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = SCENARIOS
        .iter()
        .map(|(s, _, _)| {
            let mut row = vec![s.to_string()];
            row.push(
                idx.get(e, s, Series::Mob, rtt)
                    .map_or_else(|| "-".into(), |p| format!("{:.2}", p.bound_mb_s)),
            );
            for p in FIG_SERIES {
                let pt = idx.get(e, s, p, rtt);
                row.push(f(pt.and_then(|p| p.throughput_mb_s), 1.0, 2));
                row.push(f(pt.and_then(|p| p.fraction_of_bound), 100.0, 1));
            }
            row
        })
        .collect();
    vtable(&header, &rows).join("\n") + "\n"
}

fn xy_table(points: &[Point], e: &str, protocols: &[Series], rtts: &[u32]) -> String {
    let mut header = vec!["x".to_string()];
    for &r in rtts {
        for p in protocols {
            header.push(format!("{p}@{r}ms MB/s"));
            header.push(format!("{p}@{r}ms %bound"));
        }
    }
    let idx = Index::new(points);
    let mut xs: Vec<(u64, String)> = points
        .iter()
        .filter(|p| p.experiment == e)
        .map(|p| (p.x, p.scenario.clone()))
        .collect();
    xs.sort();
    xs.dedup();
    let rows: Vec<Vec<String>> = xs
        .iter()
        .map(|(_, s)| {
            let mut row = vec![s.clone()];
            for &r in rtts {
                for &p in protocols {
                    let pt = idx.get(e, s, p, r);
                    row.push(f(pt.and_then(|p| p.throughput_mb_s), 1.0, 2));
                    row.push(f(pt.and_then(|p| p.fraction_of_bound), 100.0, 1));
                }
            }
            row
        })
        .collect();
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    vtable(&h, &rows).join("\n") + "\n"
}

fn plots(points: &[Point], setup: &Setup, dir: &Path) -> Result<()> {
    let idx = Index::new(points);
    let groups: Vec<String> = SCENARIOS.iter().map(|s| s.0.to_string()).collect();
    for (e, rtt, title) in [
        ("fig4", 20, "Fig. 4: 4 x 16 nodes, 20 ms RTT"),
        (
            "fig5",
            20,
            "Fig. 5: clusters of 4, 12, 16, 32 nodes, 20 ms RTT",
        ),
        ("rtt100", 100, "4 x 16 nodes, 100 ms RTT"),
        (
            "rtt100-4-12-16-32",
            100,
            "clusters of 4, 12, 16, 32 nodes, 100 ms RTT",
        ),
    ] {
        let mut bars: Vec<Bars> = FIG_SERIES
            .iter()
            .map(|&p| Bars {
                name: p.to_string(),
                values: groups.iter().map(|s| idx.tp(e, s, p, rtt)).collect(),
            })
            .collect();
        bars.push(Bars {
            name: "bound".into(),
            values: groups
                .iter()
                .map(|s| {
                    idx.get(e, s, Series::Mob, rtt)
                        .map_or(0.0, |p| p.bound_mb_s)
                })
                .collect(),
        });
        let t = format!("{title}, {} multicast", format_size(setup.data_bytes));
        grouped_bars(
            &dir.join(format!("{e}.png")),
            &Labels {
                title: &t,
                x: "scenario",
                y: "throughput, MB/s",
            },
            &groups,
            &bars,
        )?;
    }
    let mut lines = Vec::new();
    for &rtt in &setup.magpie_rtts_ms {
        for p in [Series::Magpie, Series::Mob] {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|q| q.experiment == "magpie" && q.rtt_ms == rtt && q.protocol == p)
                .map(|q| (((q.x >> 10) as f64).log2(), tp(q)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            lines.push(Line {
                name: format!("{p}, {rtt} ms RTT"),
                points: pts,
            });
        }
    }
    line_chart(
        &dir.join("magpie.png"),
        &Labels {
            title: "MOB vs MagPIe broadcast, 4 x 16 nodes, fast links",
            x: "message size, log2(KiB) (5 = 32 KiB, 17 = 128 MiB)",
            y: "throughput, MB/s",
        },
        &lines,
    )?;
    let lines: Vec<Line> = FIG_SERIES
        .iter()
        .map(|&p| {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|q| q.experiment == "fig6" && q.protocol == p)
                .map(|q| (q.x as f64, tp(q)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Line {
                name: p.to_string(),
                points: pts,
            }
        })
        .collect();
    line_chart(
        &dir.join("fig6.png"),
        &Labels {
            title: "Fig. 6: local bottleneck, 100 Mbit/s network cards",
            x: "nodes per cluster",
            y: "throughput, MB/s",
        },
        &lines,
    )
}

fn report_text(r: &Reproduction) -> String {
    let s = &r.setup;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "MOB (seed 002) in the simulator: {} multicast in {} pieces{}, seed {}\n",
        format_size(s.data_bytes),
        format_size(u64::from(s.piece_bytes)),
        if s.quick {
            format!(" (--quick: scenario clocks x {})", s.time_scale)
        } else {
            String::new()
        },
        s.seed
    );
    for (e, rtt, title) in [
        ("fig4", 20, "Fig. 4: 4 x 16 nodes, 20 ms round trips"),
        ("fig5", 20, "Fig. 5: clusters of 4, 12, 16 and 32 nodes"),
        (
            "rtt100",
            100,
            "Third experiment: 4 x 16 nodes, 100 ms round trips",
        ),
        (
            "rtt100-4-12-16-32",
            100,
            "Third experiment: 4, 12, 16, 32 nodes, 100 ms round trips",
        ),
    ] {
        let _ = writeln!(out, "== {title} ==\n{}", scenario_table(&r.points, e, rtt));
    }
    let _ = writeln!(
        out,
        "== MOB vs MagPIe (fast links, 4 x 16 nodes) ==\n{}",
        xy_table(
            &r.points,
            "magpie",
            &[Series::Magpie, Series::Mob],
            &s.magpie_rtts_ms
        )
    );
    for &rtt in &s.magpie_rtts_ms {
        let _ = writeln!(
            out,
            "crossover at {rtt} ms round trips: {}",
            crossover(&r.points, rtt).map_or_else(
                || "MOB never overtakes MagPIe".to_string(),
                |x| format!("MOB faster from {} on", format_size(x))
            )
        );
    }
    let _ = writeln!(
        out,
        "\n== Fig. 6: local bottleneck (100 Mbit/s cards) ==\n{}",
        xy_table(&r.points, "fig6", &FIG_SERIES, &[20])
    );
    let _ = writeln!(out, "== Paper vs us ==");
    for c in &r.checks {
        let _ = writeln!(out, "{} {}", mark(c.ok), c.what);
    }
    let _ = writeln!(
        out,
        "\nWhere we differ and why: the WAN bandwidths, piece sizes and mayhem seed are ours; the \
         flow-level network shares links max-min fairly with no TCP dynamics, so a single \
         connection fills a WAN link at once and a 100 ms round trip costs only latency, not \
         window growth (the paper's BitTorrent lost 38 % at 100 ms); and a node has one network \
         card for local and wide-area traffic, so in Fig. 6 the root's 12.5 MB/s card bounds \
         every protocol, where the paper's DAS-2 nodes reached 26-29 MB/s over Myrinet. In the \
         dynamic scenarios the bound is the time-expanded max-flow (relays may keep data across \
         capacity changes), so it holds for every protocol; it ignores latency and the cost of \
         learning that capacities changed. Mayhem's shares of the fast-links throughput depend on \
         the weather drawn: ours (seed 2) leaves a bound of 5.0 MB/s, 53 % of fast links', so \
         MOB's 52 % is 95 % of what the network allowed, and Balanced's fixed trees (planned for \
         the nominal links, never re-planned) fall to 30 %. For small messages a receiver-driven \
         protocol pays a request before each piece crosses the WAN, one more crossing than \
         MagPIe's push: at 32-128 KiB and 100 ms MOB reaches only a third of MagPIe's \
         throughput (the paper: at least half), and with no TCP window growth in the model \
         MagPIe's few connections fill their links at once, so MOB overtakes it from 2 MiB at \
         100 ms where the paper's crossover was near 32 MB."
    );
    out
}

/// Runs every experiment of `setup`, prints the results to stdout, writes the files into
/// `dir`; progress (one line per run) on stderr when `show_progress`.
pub(crate) fn reproduce(setup: &Setup, dir: &Path, show_progress: bool) -> Result<Reproduction> {
    create_dir(dir)?;
    let started = Instant::now();
    let jobs = jobs(setup)?;
    let total = jobs.len();
    let done = AtomicUsize::new(0);
    // Big runs first, so that the pool ends with the small ones.
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].data.len()));
    let mut results: Vec<(usize, Point)> = order
        .par_iter()
        .map(|&i| {
            let p = run_job(&jobs[i])?;
            let k = done.fetch_add(1, Ordering::Relaxed) + 1;
            if show_progress {
                eprintln!(
                    "[{k}/{total}] {} {} {} {} ms: {} MB/s ({} % of the bound), {:.2} s wall",
                    p.experiment,
                    p.scenario,
                    p.protocol,
                    p.rtt_ms,
                    f(p.throughput_mb_s, 1.0, 3),
                    f(p.fraction_of_bound, 100.0, 1),
                    p.wall_s
                );
            }
            Ok((i, p))
        })
        .collect::<Result<Vec<_>>>()?;
    results.sort_by_key(|(i, _)| *i);
    let points: Vec<Point> = results.into_iter().map(|(_, p)| p).collect();
    let checks = checks(setup, &points);
    let r = Reproduction {
        setup: setup.clone(),
        checks: checks
            .iter()
            .map(|c| CheckRow {
                ok: c.ok,
                what: c.what.clone(),
            })
            .collect(),
        points,
    };
    for e in ["fig4", "fig5", "rtt100", "magpie", "fig6"] {
        write_atomic(&dir.join(format!("{e}.csv")), csv(&r.points, e).as_bytes())?;
    }
    plots(&r.points, setup, dir)?;
    let text = report_text(&r);
    write_atomic(
        &dir.join("REPORT.md"),
        format!("# windrose reproduce mob\n\n```text\n{text}```\n").as_bytes(),
    )?;
    let json = serde_json::to_string_pretty(&r).context("encoding results.json")?;
    write_atomic(&dir.join("results.json"), json.as_bytes())?;
    out!("{text}");
    outln!(
        "\nWrote fig4.csv, fig5.csv, rtt100.csv, magpie.csv, fig6.csv, 6 PNG plots, REPORT.md and results.json to {} ({} runs, {:.1} s)",
        dir.display(),
        total,
        started.elapsed().as_secs_f64()
    );
    Ok(r)
}

/// `windrose reproduce mob`: exits with code 1 when a run failed to deliver everything.
pub(crate) fn run(args: &MobArgs) -> Result<()> {
    let setup = Setup::new(args.quick, args.seed);
    let r = reproduce(&setup, &args.out, !args.quiet)?;
    if !r.checks.first().is_some_and(|c| c.ok) {
        bail!("a multicast did not deliver every byte to every node (see the first check above)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep small enough for a unit test: every experiment, tiny data.
    fn tiny() -> Setup {
        let data_bytes = 3_000_000;
        Setup {
            quick: true,
            seed: 2,
            data_bytes,
            piece_bytes: 256 << 10,
            time_scale: data_bytes as f64 / FULL_BYTES as f64,
            magpie_sizes: vec![64 << 10, 1 << 20],
            magpie_rtts_ms: vec![20, 100],
            fig6_nodes: vec![1, 2],
        }
    }

    #[test]
    fn a_tiny_sweep_writes_every_file_and_checks_the_claims() {
        let dir = tempfile::tempdir().unwrap();
        let setup = tiny();
        let r = reproduce(&setup, dir.path(), false).unwrap();
        // 4 scenario experiments x 5 scenarios x 4 series, 2 sizes x 2 RTTs x 2, 2 x 4.
        assert_eq!(r.points.len(), 80 + 8 + 8);
        assert!(r.checks[0].ok, "{}", r.checks[0].what);
        // A ✗ on the claims --quick misses carries its reason, computed from the runs.
        for c in r.checks.iter().filter(|c| !c.ok) {
            if ["static scenarios", "in mayhem", "half of MagPIe"]
                .iter()
                .any(|k| c.what.contains(k))
            {
                assert!(c.what.contains(" — why: "), "{}", c.what);
                assert!(!c.what.contains("NaN"), "{}", c.what);
            }
        }
        for p in &r.points {
            assert!(p.all_finished, "{p:?}");
            // The bound (time-expanded when capacities change) holds for every run.
            let f = p.fraction_of_bound.unwrap();
            assert!(f > 0.0 && f <= 1.0 + 1e-6, "{p:?}");
            assert_eq!(
                p.data_bytes,
                if p.experiment == "magpie" {
                    p.x
                } else {
                    3_000_000
                }
            );
        }
        for f in [
            "fig4.csv",
            "fig5.csv",
            "rtt100.csv",
            "magpie.csv",
            "fig6.csv",
            "fig4.png",
            "fig5.png",
            "rtt100.png",
            "rtt100-4-12-16-32.png",
            "magpie.png",
            "fig6.png",
            "REPORT.md",
            "results.json",
        ] {
            assert!(dir.path().join(f).is_file(), "{f} missing");
        }
        let csv = std::fs::read_to_string(dir.path().join("fig4.csv")).unwrap();
        assert_eq!(csv.lines().count(), 1 + 20);
        assert!(csv.contains(",mob-paper,"), "{csv}");
        let report = std::fs::read_to_string(dir.path().join("REPORT.md")).unwrap();
        assert!(report.contains("Paper vs us") && report.contains('✓'));
        // MagPIe's flat tree from A is held to its slowest WAN link (3 MB/s).
        let magpie_max = r
            .points
            .iter()
            .filter(|p| p.protocol == Series::Magpie)
            .map(tp)
            .fold(0.0, f64::max);
        assert!(magpie_max <= 3.0 + 1e-6, "{magpie_max}");
    }

    #[test]
    fn crossover_is_the_smallest_size_from_which_mob_always_wins() {
        let point = |x: u64, protocol, mb: f64| Point {
            experiment: "magpie",
            scenario: format_size(x),
            x,
            rtt_ms: 20,
            protocol,
            nodes: 4,
            data_bytes: x,
            piece_bytes: 1,
            completion_s: Some(1.0),
            throughput_mb_s: Some(mb),
            bound_mb_s: 10.0,
            fraction_of_bound: Some(mb / 10.0),
            wan_payload_bytes: 0,
            root_egress_bytes: 0,
            root_egress_capacity_mb_s: 10.0,
            all_finished: true,
            events: 0,
            wall_s: 0.0,
        };
        use Series::{Magpie, Mob};
        let pts = vec![
            point(1 << 10, Magpie, 2.0),
            point(1 << 10, Mob, 3.0), // a lucky small size does not count
            point(1 << 20, Magpie, 2.0),
            point(1 << 20, Mob, 1.0),
            point(1 << 30, Magpie, 2.0),
            point(1 << 30, Mob, 5.0),
            point(1 << 31, Magpie, 2.0),
            point(1 << 31, Mob, 6.0),
        ];
        assert_eq!(crossover(&pts, 20), Some(1 << 30));
        assert_eq!(crossover(&pts, 100), None);
    }
}
