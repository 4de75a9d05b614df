//! `windrose reproduce mst-collectives` (first part): seed 004, Thomé & Drummond, "Biblioteca de
//! Comunicação Coletiva para Ambientes Distribuídos Dinâmicos", in the simulator.
//!
//! Table 1's topology (six sites of four processes, the measured inter-site latencies in ms,
//! 0 inside a site) is `data/scenarios/seed004-six-sites.toml`, compiled into the binary and
//! checked against the table below. On it, with root 12:
//! - the MPICH-like binomial tree reaches process 0 by 12 → 20 → 0 = 35.1 + 61.4 = 96.5 ms and
//!   the MagPIe-like tree by 12 → 0 = 14.9 ms (the paper's text; PAPER-NOTES 004). These are
//!   checked, as tree path latencies and as the simulated arrival of a 24-byte broadcast;
//! - Table 2: the time of 1, 4 and 16 broadcasts of 24 bytes, ours beside the paper's.
//!
//! What the model does not have, and the report says so: the paper's Table 2 times are whole
//! application wall-clock times (process start-up, `MPI_Init`, the MPI library's software
//! overheads, LAM's daemons), averaged over three runs; ours are the broadcasts alone in the
//! flow-level network, where 24 bytes cost their route latency plus microseconds. The
//! capacities (100 Mbit/s) are ours. Consecutive broadcasts start when the previous one has
//! reached every process (the scenario runner's repetitions).
//!
//! Figs. 5 and 7 (issue 17) run through 24 Hosts in the simulator, one per process: the
//! paper's changes, each between one pair of processes as the paper made them (the
//! simulator's pair latencies: `pair:A:B` in a scenario), and, for Fig. 7, four failing
//! processes, under MagPIe-like, the static MST and the live MST adapted every four broadcasts
//! at the paper's thresholds. A run is three uncounted warm-up broadcasts (the static trees
//! are fixed on the first), the changes, a fourth uncounted broadcast on which the live MST
//! checks its links and repairs (the paper adapts inside its first `MPI_Bcast` and times the
//! adaptation apart), then the counted broadcasts. Each broadcast's *tree* time runs from the
//! root's first data frame to the last process's, the paper's measure (the slowest process's
//! time in `MPI_Bcast`); its *session* time runs to the root's completion, every process's
//! end report included. Every process expects every broadcast, as every rank calls the
//! paper's `MPI_Bcast` replacement, so the Hosts run eager sessions (no Ready/Go round trip)
//! and relay the announcement down the tree ([`windrose_proto::host`], "The announcement along
//! the tree"): a process starts when its parent's copy reaches it, not the root's direct one
//! (583.8 ms to S1), so a broadcast costs its tree's deepest path. Each claim is beside the
//! paper's numbers with why they differ: MagPIe-like matches (169.33 s against 170.79 s), the
//! adapted tree costs its deepest path (12 -> 16 -> 4 -> 8 = 398.6 ms: 6.38 s against 5.86 s
//! for Fig. 5), our static MST is MagPIe-like's cost (Table 1's 0 ms inside a site puts
//! (04,06) in it), and Fig. 7's adapted tree pays a failed relay's detection (10 s of heartbeat
//! silence) on the broadcast after it; during the recovery that follows (local, from the
//! pieces of the old tree), broadcasts keep the last tree without the failed process
//! ([`windrose_proto::mst_service`], "The tree a broadcast uses").

use super::output::{create_dir, write_atomic};
use super::{mark, Check, MstCollectivesArgs};
use crate::mst_cmd::{
    builds_table, central_mst, model_builds, simulate, tree_pairs, ModelRuns, MstRun,
};
use crate::output::{htable, num, print, vtable};
use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use windrose_model::platform::SendCost;
use windrose_model::{ClusterCosts, ClusterId, CostUnit, LinkCosts, NodeId};
use windrose_proto::ghs::Ghs;
use windrose_proto::ghs_repair::{BuildAlgorithm, MaintainedMst};
use windrose_proto::ghs_timed::{ghs_message_bound, Span, TimedMachine, TimedRun};
use windrose_proto::mst_service::{MstBuild, MstMetric};
use windrose_sim::scenario::{
    build_tree, parse_scenario, run_scenario, PlatformCosts, Report, Scenario, TreeCosts,
};
use windrose_trees::{Tree, TreeAlgorithm};

/// The scenario file, as shipped in `data/scenarios/`.
const SCENARIO_TOML: &str = include_str!("../../../../data/scenarios/seed004-six-sites.toml");
const SCENARIO_PATH: &str = "data/scenarios/seed004-six-sites.toml";

/// Table 1: one-way latencies between the sites S0..S5, ms.
pub(crate) const TABLE1_MS: [[f64; 6]; 6] = windrose_model::fixtures::SEED004_SITES_MS;

/// The root of every broadcast in the paper.
const ROOT: NodeId = NodeId(12);

/// The paper's path latencies to process 0, ms.
const PAPER_PATH_BINOMIAL_MS: f64 = 96.5;
const PAPER_PATH_MAGPIE_MS: f64 = 14.9;

/// Table 2: broadcasts, and the total times in seconds (MPICH-like, MagPIe-like).
const TABLE2_BCASTS: [u64; 3] = [1, 4, 16];
const TABLE2_MPICH_S: [f64; 3] = [4.93, 6.95, 15.88];
const TABLE2_MAGPIE_S: [f64; 3] = [3.80, 5.40, 13.08];
const TABLE2_IMPROVEMENT_PCT: [f64; 3] = [22.92, 22.30, 17.63];

/// Names of the CSV files `--out` receives.
pub(crate) const TABLE2_CSV: &str = "mst-collectives-table2.csv";
pub(crate) const GHS_CSV: &str = "mst-collectives-ghs.csv";
pub(crate) const FIGS_CSV: &str = "mst-collectives-figs.csv";
/// The plots `--out` writes: Table 2, Figs. 5 and 7, GHS's growth against its bound.
pub(crate) const PLOTS: [&str; 3] = [
    "mst-collectives-table2.png",
    "mst-collectives-figs.png",
    "mst-collectives-ghs-growth.png",
];

/// The LogP send overheads the sweep charges every process (o = g, per message), ms. Ours:
/// the paper gives none; 0 is today's model.
const OVERHEADS_MS: [f64; 5] = [0.0, 0.1, 1.0, 5.0, 10.0];

/// One row of the sweep: o (ms), then the slowest process of one broadcast (ms) over the
/// static MST and over the MagPIe-like tree, and those processes.
struct OverheadRow {
    o_ms: f64,
    mst: (NodeId, f64),
    magpie: (NodeId, f64),
}

/// The scenario with every process charged `o_s` per message (LogP's o and g both `o_s`).
fn with_overhead(base: &Scenario, o_s: f64) -> Result<Scenario> {
    let mut s = base.clone();
    for v in 0..s.platform.node_count() as u32 {
        s.platform.set_send_cost(
            NodeId(v),
            SendCost {
                overhead_s: o_s,
                gap_s: o_s,
            },
        )?;
    }
    Ok(s)
}

/// Static MST against MagPIe-like with each send overhead of [`OVERHEADS_MS`].
fn overhead_sweep(base: &Scenario) -> Result<Vec<OverheadRow>> {
    OVERHEADS_MS
        .iter()
        .map(|&o_ms| {
            let s = with_overhead(base, o_ms / 1e3)?;
            Ok(OverheadRow {
                o_ms,
                mst: run_tree(&s, TreeAlgorithm::Mst)?.slowest,
                magpie: run_tree(&s, TreeAlgorithm::Magpie)?.slowest,
            })
        })
        .collect()
}

fn render_sweep(rows: &[OverheadRow]) -> String {
    let mut out = String::from(
        "\nSend overhead (issue 17, point 4): every process charged o per message and at least\n\
         g = o between two of its messages (LogP; our values, the paper gives none); the\n\
         slowest process of one 24-byte broadcast from 12, ms\n",
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                format!("{}", r.o_ms),
                format!("{:.3} ({})", r.mst.1, r.mst.0),
                format!("{:.3} ({})", r.magpie.1, r.magpie.0),
                format!("{:+.1}%", 100.0 * (r.mst.1 / r.magpie.1 - 1.0)),
            ]
        })
        .collect();
    for l in vtable(
        &["o = g, ms", "static MST", "MagPIe-like", "MST vs MagPIe"],
        &table,
    ) {
        let _ = writeln!(out, "{l}");
    }
    out.push_str(
        "  (the MST's deepest path, 12 -> 16 -> 4 -> 8 over S3-S4-S1-S2, crosses more senders\n\
         \x20 with several children each than the MagPIe-like tree's 12 -> 8, so a per-message\n\
         \x20 cost widens the MST's deficit instead of closing it: a send overhead alone does not\n\
         \x20 give the paper's 13-28 % gain of its adaptive MST)\n",
    );
    out
}

/// What one tree gives.
struct TreeRun {
    algo: TreeAlgorithm,
    tree: Tree,
    /// Path latency from the root to process 0, ms.
    path_to_0_ms: f64,
    /// The root-to-0 path, root first.
    path_to_0: Vec<NodeId>,
    /// Simulated arrival of the first broadcast at process 0, ms.
    arrival_0_ms: f64,
    /// The slowest process of one broadcast and its completion, ms.
    slowest: (NodeId, f64),
    /// Total time after 1, 4 and 16 broadcasts, seconds.
    totals_s: [f64; 3],
}

/// The seed-004 scenario, from the shipped file.
fn scenario() -> Result<Scenario> {
    parse_scenario(SCENARIO_TOML, Path::new(SCENARIO_PATH))
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the built-in seed 004 scenario")
}

fn root_path(tree: &Tree, node: NodeId) -> Vec<NodeId> {
    let mut path = vec![node];
    let mut n = node;
    while let Some(p) = tree.parent(n) {
        path.push(p);
        n = p;
    }
    path.reverse();
    path
}

fn run_tree(base: &Scenario, algo: TreeAlgorithm) -> Result<TreeRun> {
    let mut s = base.clone();
    s.workload.tree = algo;
    s.workload.root = ROOT;
    s.workload.repetitions = *TABLE2_BCASTS.last().expect("non-empty");
    let tree = build_tree(&s.platform, algo, ROOT, TreeCosts::Latency, 24)?;
    let lat = PlatformCosts::latency_ms(&s.platform);
    let report: Report = run_scenario(&s, 0, None)?;
    let first = |n: NodeId| report.nodes[n.index()].completion_s[0];
    let arrival_0_ms = first(NodeId(0)).context("process 0 never got the message")? * 1e3;
    let slowest = report
        .nodes
        .iter()
        .filter_map(|n| n.completion_s[0].map(|t| (n.node, t * 1e3)))
        .fold((ROOT, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let totals_s = TABLE2_BCASTS.map(|k| report.repetitions[(k - 1) as usize].end_s);
    if !report.all_finished() {
        bail!("{algo}: not every process received every broadcast");
    }
    Ok(TreeRun {
        algo,
        path_to_0_ms: tree.path_cost(NodeId(0), &lat),
        path_to_0: root_path(&tree, NodeId(0)),
        arrival_0_ms,
        slowest,
        totals_s,
        tree,
    })
}

/// Runs `windrose reproduce mst-collectives`.
pub(crate) fn run(args: &MstCollectivesArgs) -> Result<()> {
    let s = scenario()?;
    let binomial = run_tree(&s, TreeAlgorithm::Binomial)?;
    let magpie = run_tree(&s, TreeAlgorithm::Magpie)?;
    let mst = run_tree(&s, TreeAlgorithm::Mst)?;
    let mut checks = checks(&s, &binomial, &magpie, Some(&mst));
    print(&render(&binomial, &magpie, &mst, &checks))?;
    print(&render_sweep(&overhead_sweep(&s)?))?;
    let ghs = ghs_rows(&s, args.full)?;
    let ghs_checks = ghs_checks(&s, &ghs);
    let figs = fig_rows(&s)?;
    print(&render_figs(&figs))?;
    print(&render_ghs(
        &ghs,
        &ghs_checks,
        &claims(&ghs, &magpie, &mst, &figs),
    ))?;
    checks.extend(ghs_checks);
    if let Some(dir) = &args.out {
        create_dir(dir)?;
        for (name, text) in [
            (TABLE2_CSV, table2_csv(&binomial, &magpie, &mst)),
            (GHS_CSV, ghs_csv(&ghs)),
            (FIGS_CSV, figs_csv(&figs)),
        ] {
            let path = dir.join(name);
            write_atomic(&path, text.as_bytes())?;
            print(&format!("\nwrote {}\n", path.display()))?;
        }
        for path in plots(dir, [&binomial, &magpie, &mst], &ghs, &figs)? {
            print(&format!("wrote {}\n", path.display()))?;
        }
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        bail!(
            "{failed} of {} checks of seed 004 disagree with the paper (marked ✗ above)",
            checks.len()
        );
    }
    Ok(())
}

/// The scenario file matches Table 1; the two paths are the paper's; MagPIe-like is faster.
fn checks(s: &Scenario, binomial: &TreeRun, magpie: &TreeRun, mst: Option<&TreeRun>) -> Vec<Check> {
    let p = &s.platform;
    let mut table_ok = p.cluster_count() == 6 && p.node_count() == 24;
    for (a, row) in TABLE1_MS.iter().enumerate() {
        for (b, &ms) in row.iter().enumerate() {
            if a != b && table_ok {
                let got = p.wan_latency_s(ClusterId::from(a), ClusterId::from(b)) * 1e3;
                table_ok &= (got - ms).abs() < 1e-9;
            }
        }
        if table_ok {
            let c = ClusterId::from(a);
            let first = 4 * a as u32;
            table_ok &= p.nodes_of(c) == (first..first + 4) && p.intra_latency_s(c) == 0.0;
        }
    }
    let path = |r: &TreeRun| {
        r.path_to_0
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" -> ")
    };
    let mut checks = vec![
        Check {
            ok: table_ok,
            what: format!("{SCENARIO_PATH} is Table 1: sites S0..S5 = processes 0-3 .. 20-23, the inter-site latencies, 0 inside a site"),
        },
        Check {
            ok: (binomial.path_to_0_ms - PAPER_PATH_BINOMIAL_MS).abs() < 1e-9
                && binomial.path_to_0 == [ROOT, NodeId(20), NodeId(0)],
            what: format!(
                "MPICH-like binomial, root 12: process 0 by {} = {} ms (paper: {} ms)",
                path(binomial),
                num(binomial.path_to_0_ms),
                num(PAPER_PATH_BINOMIAL_MS)
            ),
        },
        Check {
            ok: (magpie.path_to_0_ms - PAPER_PATH_MAGPIE_MS).abs() < 1e-9
                && magpie.path_to_0 == [ROOT, NodeId(0)],
            what: format!(
                "MagPIe-like, root 12: process 0 by {} = {} ms (paper: {} ms)",
                path(magpie),
                num(magpie.path_to_0_ms),
                num(PAPER_PATH_MAGPIE_MS)
            ),
        },
    ];
    for (r, paper) in [
        (binomial, PAPER_PATH_BINOMIAL_MS),
        (magpie, PAPER_PATH_MAGPIE_MS),
    ] {
        checks.push(Check {
            ok: (r.arrival_0_ms * 10.0).round() / 10.0 == paper,
            what: format!(
                "{}: the simulated 24-byte broadcast reaches process 0 at {:.3} ms, {} ms to 0.1 ms",
                label(r.algo),
                r.arrival_0_ms,
                num(paper)
            ),
        });
    }
    let faster = (0..3).all(|i| magpie.totals_s[i] < binomial.totals_s[i]);
    if let Some(mst) = mst {
        let mut site_edges: Vec<(u32, u32)> = mst
            .tree
            .edges()
            .iter()
            .map(|&(a, b)| (p.cluster_of(a).0, p.cluster_of(b).0))
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        site_edges.sort_unstable();
        let total: f64 = site_edges
            .iter()
            .map(|&(a, b)| TABLE1_MS[a as usize][b as usize])
            .sum();
        checks.push(Check {
            ok: site_edges == [(0, 3), (1, 2), (1, 4), (3, 4), (3, 5)] && (total - 758.6).abs() < 1e-9,
            what: format!(
                "the minimum spanning tree crosses sites on S0-S3, S1-S2, S1-S4, S3-S4, S3-S5, {} ms in all (PAPER-NOTES: 758.6 ms)",
                num(total)
            ),
        });
    }
    checks.push(Check {
        ok: faster,
        what: "Table 2's finding: MagPIe-like is faster than MPICH-like for 1, 4 and 16 broadcasts"
            .into(),
    });
    checks
}

fn label(algo: TreeAlgorithm) -> &'static str {
    match algo {
        TreeAlgorithm::Binomial => "MPICH-like",
        TreeAlgorithm::Magpie => "MagPIe-like",
        TreeAlgorithm::Mst => "MST (AGM)",
        _ => "tree",
    }
}

fn improvement_pct(mpich: f64, magpie: f64) -> f64 {
    100.0 * (mpich - magpie) / mpich
}

/// Per-broadcast increment: (T16 - T1) / 15, seconds.
fn increment(t: &[f64; 3]) -> f64 {
    (t[2] - t[0]) / (TABLE2_BCASTS[2] - TABLE2_BCASTS[0]) as f64
}

fn render(binomial: &TreeRun, magpie: &TreeRun, mst: &TreeRun, checks: &[Check]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "reproduce mst-collectives: seed 004, Thomé & Drummond, Table 1 in the simulator\n\
         6 sites x 4 processes (S0 = 0-3 ... S5 = 20-23), the paper's inter-site latencies, 0 \
         inside a site;\nour capacities: 100 Mbit/s per process and between sites. Broadcasts of \
         24 bytes from process 12."
    );
    out.push_str("\nTable 1: latencies between the sites, ms\n");
    let rows: Vec<Vec<String>> = TABLE1_MS
        .iter()
        .enumerate()
        .map(|(a, r)| {
            std::iter::once(format!("S{a}"))
                .chain(r.iter().map(|&v| format!("{v:.1}")))
                .collect()
        })
        .collect();
    for l in vtable(&["", "S0", "S1", "S2", "S3", "S4", "S5"], &rows) {
        let _ = writeln!(out, "{l}");
    }

    for r in [binomial, magpie, mst] {
        let _ = writeln!(
            out,
            "\n{} tree, root 12 (parent of each process; compare the paper's Figures 1-3)",
            label(r.algo)
        );
        let nodes: Vec<String> = (0..24).map(|i: u32| i.to_string()).collect();
        let parents: Vec<String> = (0..24u32)
            .map(|i| {
                r.tree
                    .parent(NodeId(i))
                    .map_or("-".into(), |p| p.to_string())
            })
            .collect();
        out.push_str(&htable(&[("process", nodes), ("parent", parents)]));
        let _ = writeln!(
            out,
            "  path to process 0: {} ms; simulated arrival {:.3} ms; slowest process {} at {:.3} ms",
            num(r.path_to_0_ms),
            r.arrival_0_ms,
            r.slowest.0,
            r.slowest.1
        );
    }

    out.push_str("\nTable 2: total time of 1, 4 and 16 broadcasts of 24 bytes, seconds\n");
    let fmt3 = |t: &[f64; 3]| t.iter().map(|&x| format!("{x:.3}")).collect::<Vec<_>>();
    let mut rows = Vec::new();
    let mut row = |what: &str, who: &str, t: [String; 3], inc: String| {
        let mut r = vec![what.to_string(), who.to_string()];
        r.extend(t);
        r.push(inc);
        rows.push(r);
    };
    let paper_mpich = TABLE2_MPICH_S;
    let paper_magpie = TABLE2_MAGPIE_S;
    let two = |t: [f64; 3]| t.map(|x| format!("{x:.2}"));
    row(
        "MPICH-like",
        "paper",
        two(paper_mpich),
        format!("{:.3}", increment(&paper_mpich)),
    );
    row(
        "",
        "ours",
        fmt3(&binomial.totals_s).try_into().expect("three values"),
        format!("{:.3}", increment(&binomial.totals_s)),
    );
    row(
        "MagPIe-like",
        "paper",
        two(paper_magpie),
        format!("{:.3}", increment(&paper_magpie)),
    );
    row(
        "",
        "ours",
        fmt3(&magpie.totals_s).try_into().expect("three values"),
        format!("{:.3}", increment(&magpie.totals_s)),
    );
    row(
        "improvement",
        "paper",
        TABLE2_IMPROVEMENT_PCT.map(|p| format!("{p:.2}%")),
        String::new(),
    );
    row(
        "",
        "ours",
        [0, 1, 2].map(|i| {
            format!(
                "{:.2}%",
                improvement_pct(binomial.totals_s[i], magpie.totals_s[i])
            )
        }),
        String::new(),
    );
    row(
        "MST (AGM)",
        "ours",
        fmt3(&mst.totals_s).try_into().expect("three values"),
        format!("{:.3}", increment(&mst.totals_s)),
    );
    for l in vtable(&["", "", "1", "4", "16", "per extra bcast"], &rows) {
        let _ = writeln!(out, "{l}");
    }
    let paper_check = (0..3).all(|i| {
        (improvement_pct(paper_mpich[i], paper_magpie[i]) - TABLE2_IMPROVEMENT_PCT[i]).abs() < 0.006
    });
    let _ = writeln!(
        out,
        "  (the paper's improvement row is (MPICH - MagPIe) / MPICH of its own times: {})",
        if paper_check {
            "it checks"
        } else {
            "it does NOT check"
        }
    );

    let _ = writeln!(
        out,
        "\nWhere the model differs from the paper\n\
         - The paper's times are whole-application wall-clock times on 24 real machines (process\n\
         \x20 start-up, MPI_Init, LAM's daemons, MPI's software overheads; the mean of three runs).\n\
         \x20 Ours are the broadcasts alone in the flow model, where 24 bytes cost their route\n\
         \x20 latency plus microseconds. So the totals differ by a fixed cost we do not model: the\n\
         \x20 paper's single broadcast takes {:.2} s (MPICH-like) and {:.2} s (MagPIe-like) more\n\
         \x20 than ours. Compare the per-broadcast increments (T16 - T1) / 15 instead.\n\
         - Our increments ({:.3} s and {:.3} s) are the trees' slowest paths, {:.0}% and {:.0}% above\n\
         \x20 the paper's ({:.3} s and {:.3} s): our consecutive broadcasts start when the previous\n\
         \x20 one has reached every process (a free barrier), while consecutive MPI_Bcast calls\n\
         \x20 overlap (the root returns after its sends and starts the next one). The order of the\n\
         \x20 two trees and the direction of the gap agree; its size ({:.0}% vs {:.0}-{:.0}%) does not\n\
         \x20 quite (overlapping plausibly hides part of the MPICH-like tree's deeper path).\n\
         - Intra-site latency is exactly 0 (the paper: \"close to zero\"), and the capacities are\n\
         \x20 ours; with 24-byte messages neither changes the picture.\n\
         - The MST (AGM) row is a static minimum spanning tree of the same latencies, for the next\n\
         \x20 part (the distributed GHS construction and its adaptation are not simulated here).",
        TABLE2_MPICH_S[0] - binomial.totals_s[0],
        TABLE2_MAGPIE_S[0] - magpie.totals_s[0],
        increment(&binomial.totals_s),
        increment(&magpie.totals_s),
        100.0 * (increment(&binomial.totals_s) / increment(&paper_mpich) - 1.0),
        100.0 * (increment(&magpie.totals_s) / increment(&paper_magpie) - 1.0),
        increment(&paper_mpich),
        increment(&paper_magpie),
        improvement_pct(binomial.totals_s[2], magpie.totals_s[2]),
        TABLE2_IMPROVEMENT_PCT[2],
        TABLE2_IMPROVEMENT_PCT[0],
    );

    out.push_str("\nChecks\n");
    for c in checks {
        let _ = writeln!(out, "  {} {}", mark(c.ok), c.what);
    }
    if checks.iter().all(|c| c.ok) {
        let _ = writeln!(out, "\nAll {} checks agree with the paper.", checks.len());
    }
    out
}

/// Table 2 as CSV: tree, broadcasts, paper seconds, ours seconds.
fn table2_csv(binomial: &TreeRun, magpie: &TreeRun, mst: &TreeRun) -> String {
    let mut s = String::from("tree,broadcasts,paper_s,ours_s\n");
    for (r, paper) in [
        (binomial, Some(TABLE2_MPICH_S)),
        (magpie, Some(TABLE2_MAGPIE_S)),
        (mst, None),
    ] {
        for (i, k) in TABLE2_BCASTS.iter().enumerate() {
            let _ = writeln!(
                s,
                "{},{k},{},{:.9}",
                r.algo,
                paper.map_or(String::new(), |p| format!("{:.2}", p[i])),
                r.totals_s[i]
            );
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Issue 17: GHS itself, its repairs, its growth, and the paper's claims about them.

/// Fig. 4: the time to build the tree (AGM by GHS; MagPIe-like), 4, 8 and 16 broadcasts, s.
const FIG4_AGM_BUILD_S: [f64; 3] = [25.24, 24.30, 23.39];
const FIG4_MAGPIE_BUILD_S: [f64; 3] = [2.38, 1.80, 2.81];
/// Fig. 4: the broadcasts alone ("Aplicação - Geração"), 4, 8 and 16 broadcasts, s.
const FIG4_AGM_BCAST_S: [f64; 3] = [2.97, 5.27, 8.64];
const FIG4_MAGPIE_BCAST_S: [f64; 3] = [3.40, 7.30, 10.19];
/// Fig. 5: 16 broadcasts after the changes, s (MagPIe-like, AGM unadapted, AGM-adap).
const FIG5_BCAST_S: [f64; 3] = [170.79, 108.86, 5.86];
/// Fig. 7: 20 broadcasts with faults at 4, 8, 12, 16, s.
const FIG7_BCAST_S: [f64; 3] = [526.35, 275.15, 9.52];

/// Fig. 5's changes, `(a, b)`, from and to (the paper's values, ms): applied one at a time to
/// our six-site tree (the "from" values are the paper's, not our platform's).
const FIG5_CHANGES: [((u32, u32), f64, f64); 4] = [
    ((4, 6), 1.0, 9999.0),
    ((12, 20), 35.0, 45.0),
    ((0, 2), 120001.0, 6000.0),
    ((12, 16), 30000.0, 21.0),
];

/// Node counts of the growth rows: the default, and with `--full`.
const SCALE_FAST: [usize; 2] = [256, 512];
const SCALE_FULL: [usize; 5] = [256, 512, 1024, 2048, 4096];
/// Processes per cluster in the growth rows' cost model.
const SCALE_CLUSTER: usize = 32;

/// Edges or site pairs, `(lo, hi)`.
type Pairs = Vec<(u32, u32)>;

/// A repair of one of Fig. 5's changes against a rebuild on the new weights.
struct RepairRow {
    edge: (u32, u32),
    to_ms: f64,
    /// The tree edges that left and entered, `(lo, hi)`.
    swap: (Pairs, Pairs),
    repair: Span,
    rebuild: Span,
}

/// GHS on one size of the growth rows.
struct ScaleRow {
    n: usize,
    edges: usize,
    span: Span,
    /// Wall seconds to build the machines (each node sorts its edges), and to run GHS.
    setup_s: f64,
    wall_s: f64,
}

/// Everything of issue 17's part.
struct GhsRows {
    /// The paper's algorithm: classic GHS (a test window of 1).
    host: MstRun,
    /// The same with `windrose mst`'s default test window.
    windowed: MstRun,
    model: Span,
    repairs: Vec<RepairRow>,
    /// The live MST's builds (rows; GHS with windows 1 and the default) in the message-delay
    /// model.
    builds: ModelRuns,
    /// Fig. 5's changes repaired from a tree built by rows.
    rows_repairs: Vec<RepairRow>,
    scale: Vec<ScaleRow>,
}

/// `(lo, hi)` tree edges of a finished timed run.
fn tree_of(nodes: &[MaintainedMst]) -> Result<Vec<(u32, u32)>> {
    let mut e = Vec::new();
    for m in nodes {
        let me = m.node().0;
        let mm = m
            .maintainer()
            .with_context(|| format!("node {me}: its tree was not built"))?;
        if !mm.is_stable() {
            bail!("node {me} is not stable at the end");
        }
        e.extend(
            mm.branch_edges()
                .into_iter()
                .filter(|(to, _)| to.0 > me)
                .map(|(to, _)| (me, to.0)),
        );
    }
    e.sort_unstable();
    Ok(e)
}

/// The machines of a complete graph of weights `w` (s), each message taking its link's
/// latency `lat` (s).
fn timed<M: TimedMachine>(
    w: &[Vec<f64>],
    lat: Vec<Vec<f64>>,
    make: impl Fn(NodeId, Vec<(NodeId, f64)>) -> Result<M, windrose_proto::ghs::GhsSetupError>,
) -> Result<TimedRun<M, impl Fn(NodeId, NodeId) -> f64>> {
    let n = w.len();
    let nodes = (0..n)
        .map(|a| {
            let mine = (0..n)
                .filter(|&b| b != a)
                .map(|b| (NodeId::from(b), w[a][b]))
                .collect();
            make(NodeId::from(a), mine)
        })
        .collect::<Result<Vec<M>, _>>()?;
    Ok(TimedRun::new(nodes, move |a: NodeId, b: NodeId| {
        lat[a.index()][b.index()]
    }))
}

/// The six sites' one-way latencies between processes, s.
fn six_site_latencies(s: &Scenario) -> Vec<Vec<f64>> {
    let c = PlatformCosts::latency_ms(&s.platform);
    (0..24)
        .map(|a| {
            (0..24)
                .map(|b| c.cost(NodeId(a), NodeId(b)) / 1e3)
                .collect()
        })
        .collect()
}

/// Builds with GHS in the message-delay model, applies one change, repairs it; and rebuilds
/// from scratch on the new weights.
fn repair_row(base: &[Vec<f64>], (a, b): (u32, u32), to_s: f64) -> Result<RepairRow> {
    repair_row_from(base, (a, b), to_s, BuildAlgorithm::Ghs)
}

/// [`repair_row`] from a tree built by `build` (rows: every node's row in, then the tree).
fn repair_row_from(
    base: &[Vec<f64>],
    (a, b): (u32, u32),
    to_s: f64,
    build: BuildAlgorithm,
) -> Result<RepairRow> {
    let mut run = timed(base, base.to_vec(), |me, row| match build {
        BuildAlgorithm::Ghs => MaintainedMst::new(me, row),
        BuildAlgorithm::Rows => {
            MaintainedMst::gathering(me, row).map(|m| m.with_build(BuildAlgorithm::Rows))
        }
    })?;
    run.wake_all();
    run.run().map_err(anyhow::Error::msg)?;
    let before = tree_of(run.nodes())?;
    // The smaller end measures the link and feeds the change (the live service's rule); the
    // physical latencies stay (the paper wrote its new values into the measurements).
    run.input(NodeId(a), |m, out| m.change_weight(NodeId(b), to_s, out))?;
    let repair = run.run().map_err(anyhow::Error::msg)?;
    let after = tree_of(run.nodes())?;
    let mut w = base.to_vec();
    w[a as usize][b as usize] = to_s;
    w[b as usize][a as usize] = to_s;
    if after != central_mst(&w)? {
        bail!("the repair of ({a},{b}) -> {to_s} s did not end at the MST of the new weights");
    }
    let mut fresh = timed(&w, base.to_vec(), Ghs::new)?;
    fresh.wake_all();
    let rebuild = fresh.run().map_err(anyhow::Error::msg)?;
    let diff =
        |x: &[(u32, u32)], y: &[(u32, u32)]| x.iter().filter(|e| !y.contains(e)).copied().collect();
    Ok(RepairRow {
        edge: (a, b),
        to_ms: to_s * 1e3,
        swap: (diff(&before, &after), diff(&after, &before)),
        repair,
        rebuild,
    })
}

/// A seeded cluster cost model of `n` nodes (clusters of [`SCALE_CLUSTER`]): 0.05-0.5 ms
/// inside a cluster, 5-100 ms between clusters (to 0.01 and 0.1 ms, so ties occur).
fn scale_costs(n: usize, seed: u64) -> Result<ClusterCosts> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let c = n.div_ceil(SCALE_CLUSTER);
    let intra = (0..c)
        .map(|_| f64::from(rng.gen_range(5u32..=50)) / 100.0)
        .collect();
    // The upper triangle, row by row.
    let upper: Vec<f64> = (0..c * (c - 1) / 2)
        .map(|_| f64::from(rng.gen_range(50u32..=1000)) / 10.0)
        .collect();
    let at = |lo: usize, hi: usize| upper[lo * c - lo * (lo + 1) / 2 + hi - lo - 1];
    let inter = (0..c)
        .map(|x| {
            (0..c)
                .map(|y| if x == y { 0.0 } else { at(x.min(y), x.max(y)) })
                .collect()
        })
        .collect();
    let clusters = (0..n).map(|v| ClusterId::from(v / SCALE_CLUSTER)).collect();
    Ok(ClusterCosts::new(
        CostUnit::LatencyMs,
        clusters,
        intra,
        inter,
    )?)
}

/// GHS on the complete graph of `n` nodes of [`scale_costs`], every message taking its link's
/// latency; checked against the central MST.
fn scale_row(n: usize) -> Result<ScaleRow> {
    let costs = scale_costs(n, n as u64)?;
    let ms = |a: NodeId, b: NodeId| if a == b { 0.0 } else { costs.cost(a, b) };
    let setup = std::time::Instant::now();
    let nodes = (0..n as u32)
        .map(|a| {
            Ghs::new(
                NodeId(a),
                (0..n as u32)
                    .filter(|&b| b != a)
                    .map(|b| (NodeId(b), ms(NodeId(a), NodeId(b)) / 1e3)),
            )
        })
        .collect::<Result<Vec<Ghs>, _>>()?;
    let mut run = TimedRun::new(nodes, |a, b| ms(a, b) / 1e3);
    let setup_s = setup.elapsed().as_secs_f64();
    let wall = std::time::Instant::now();
    run.wake_all();
    let span = run.run().map_err(anyhow::Error::msg)?;
    let wall_s = wall.elapsed().as_secs_f64();
    let mut got: Vec<(u32, u32)> = run
        .nodes()
        .iter()
        .flat_map(|g| {
            let me = g.node().0;
            g.branch_edges()
                .into_iter()
                .filter(move |(to, _)| to.0 > me)
                .map(move |(to, _)| (me, to.0))
        })
        .collect();
    got.sort_unstable();
    if !run.nodes().iter().all(Ghs::is_done)
        || got != tree_pairs(&TreeAlgorithm::Mst.build(&costs, None, NodeId(0))?)
    {
        bail!("GHS on {n} nodes did not end at the central MST");
    }
    Ok(ScaleRow {
        n,
        edges: n * (n - 1) / 2,
        span,
        setup_s,
        wall_s,
    })
}

fn ghs_rows(s: &Scenario, full: bool) -> Result<GhsRows> {
    let host = simulate(s.platform.clone(), MstMetric::Latency, ROOT, 1)?;
    let windowed = simulate(
        s.platform.clone(),
        MstMetric::Latency,
        ROOT,
        windrose_proto::ghs::DEFAULT_TEST_WINDOW,
    )?;
    let lat = six_site_latencies(s);
    let mut model = timed(&lat, lat.clone(), Ghs::new)?.trace();
    model.wake_all();
    let model = model.run().map_err(anyhow::Error::msg)?;
    let repairs = FIG5_CHANGES
        .iter()
        .map(|&(e, _, to_ms)| repair_row(&lat, e, to_ms / 1e3))
        .collect::<Result<_>>()?;
    let rows_repairs = FIG5_CHANGES
        .iter()
        .map(|&(e, _, to_ms)| repair_row_from(&lat, e, to_ms / 1e3, BuildAlgorithm::Rows))
        .collect::<Result<_>>()?;
    let builds = model_builds(
        &s.platform,
        MstMetric::Latency,
        &[1, windrose_proto::ghs::DEFAULT_TEST_WINDOW],
    )?;
    let sizes: &[usize] = if full { &SCALE_FULL } else { &SCALE_FAST };
    let scale = sizes.iter().map(|&n| scale_row(n)).collect::<Result<_>>()?;
    Ok(GhsRows {
        host,
        windowed,
        model,
        repairs,
        builds,
        rows_repairs,
        scale,
    })
}

/// Where the critical chain's time goes: its messages by kind, with the delays they add and
/// how many cross sites.
fn render_chain(span: &Span) -> String {
    let mut by: BTreeMap<&str, (u32, u32, f64)> = BTreeMap::new();
    for h in &span.path {
        let e = by.entry(h.kind).or_default();
        e.0 += 1;
        e.1 += u32::from(h.delay_s > 0.0);
        e.2 += h.delay_s;
    }
    let wan = span.path.iter().filter(|h| h.delay_s > 0.0).count();
    let mut out = format!(
        "  The chain of the message-delay model, {} messages ({wan} across sites, {:.3} s):\n",
        span.path.len(),
        span.path.iter().map(|h| h.delay_s).sum::<f64>()
    );
    for (k, (count, across, s)) in by {
        let _ = writeln!(
            out,
            "    {k:<12} {count:>3} ({across:>2} across sites) {s:>8.3} s"
        );
    }
    out
}

/// The site pairs a tree of processes crosses, `(lo, hi)` sites.
fn crossings(p: &windrose_model::platform::Platform, edges: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut s: Vec<(u32, u32)> = edges
        .iter()
        .map(|&(a, b)| (p.cluster_of(NodeId(a)).0, p.cluster_of(NodeId(b)).0))
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.min(b), a.max(b)))
        .collect();
    s.sort_unstable();
    s
}

/// What must hold (a failure exits 1): the distributed build's golden tree and GHS's bounds.
fn ghs_checks(s: &Scenario, r: &GhsRows) -> Vec<Check> {
    let h = &r.host;
    let edges: Vec<(u32, u32)> = h.edges.iter().map(|e| (e.a, e.b)).collect();
    let sites = crossings(&s.platform, &edges);
    let classic = h.frames_total - h.frames.get("ghs_done").copied().unwrap_or(0);
    vec![
        Check {
            ok: sites == [(0, 3), (1, 2), (1, 4), (3, 4), (3, 5)] && (h.total - 758.6).abs() < 1e-9,
            what: format!(
                "the distributed build (GHS by 24 Hosts in the simulator, started by 12) crosses sites on S0-S3, S1-S2, S1-S4, S3-S4, S3-S5, {} ms in all, known by every process (PAPER-NOTES: 758.6 ms)",
                num(h.total)
            ),
        },
        Check {
            ok: classic as f64 <= h.message_bound && f64::from(h.chain.unwrap_or(0)) <= h.time_bound,
            what: format!(
                "within GHS's bounds: {classic} classic frames <= 5 n log2 n + 2 e = {:.0}; {} message delays on the critical chain <= 5 n log2 n = {:.0}",
                h.message_bound, h.chain.unwrap_or(0), h.time_bound
            ),
        },
        Check {
            ok: r
                .repairs
                .iter()
                .chain(&r.rows_repairs)
                .all(|x| x.repair.messages() < x.rebuild.messages()),
            what: "each of Fig. 5's changes is repaired to the exact MST of the new weights with fewer messages than a GHS rebuild, from a tree built by GHS and from one built by rows".into(),
        },
        Check {
            ok: r.builds.builds.first().is_some_and(|b| {
                b.build == MstBuild::Rows && b.chain == 1 && b.build_s < 3.0
            }) && (r.builds.total - 758.6).abs() < 1e-9,
            what: format!(
                "the rows build (every process's row to every other, each computes the tree) ends at the same 758.6 ms tree after one message delay, {:.3} s in the message-delay model (goal < 3 s)",
                r.builds.builds.first().map_or(f64::NAN, |b| b.build_s)
            ),
        },
    ]
}

/// One of the paper's claims beside ours: not a failure when it differs, a reason instead.
struct Claim {
    ok: bool,
    paper: String,
    ours: String,
    why: &'static str,
}

/// A Fig. 5 / Fig. 7 claim: ✓ when ours keep the paper's order (MagPIe-like slowest, the
/// adapted tree fastest) and its factors to within 25 %.
fn fig_claim(paper: String, rows: &[FigRow], paper_s: &[f64; 3], why: &'static str) -> Claim {
    let of = |f: fn(&Agm) -> bool| {
        rows.iter()
            .filter(|r| f(&r.agm))
            .map(|r| r.tree_s)
            .fold(f64::NAN, f64::min)
    };
    let (magpie, agm, adap) = (
        of(|a| *a == Agm::Magpie),
        of(|a| *a == Agm::StaticMst),
        of(|a| matches!(a, Agm::Live(_))),
    );
    let factors = [agm / adap, magpie / adap];
    let paper_factors = [paper_s[1] / paper_s[2], paper_s[0] / paper_s[2]];
    Claim {
        ok: magpie > agm
            && agm > adap
            && factors
                .iter()
                .zip(paper_factors)
                .all(|(x, p)| *x >= 0.75 * p),
        paper,
        ours: format!(
            "{:.2} / {:.2} / {:.2} s (the best threshold): adapted {:.2}x and {:.2}x faster",
            magpie, agm, adap, factors[0], factors[1]
        ),
        why,
    }
}

fn claims(r: &GhsRows, magpie: &TreeRun, mst: &TreeRun, figs: &FigRows) -> Vec<Claim> {
    let lo = FIG4_AGM_BUILD_S
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let hi = FIG4_AGM_BUILD_S.iter().copied().fold(0.0, f64::max);
    let gain = |agm: f64, mag: f64| 100.0 * (mag - agm) / mag;
    let paper_gains: Vec<String> = (0..3)
        .map(|i| format!("{:.0}%", gain(FIG4_AGM_BCAST_S[i], FIG4_MAGPIE_BCAST_S[i])))
        .collect();
    let our_gain = gain(increment(&mst.totals_s), increment(&magpie.totals_s));
    let rep =
        |f: fn(&RepairRow) -> f64| r.repairs.iter().map(f).sum::<f64>() / r.repairs.len() as f64;
    vec![
        Claim {
            ok: (0.75 * lo..=1.25 * hi).contains(&r.host.build_s),
            paper: format!(
                "Fig. 4: GHS builds the tree in {} s (4, 8, 16 broadcasts)",
                FIG4_AGM_BUILD_S.map(num).join(" / ")
            ),
            ours: format!(
                "{:.2} s simulated by Hosts ({} delays on the critical chain); {:.2} s in the message-delay model ({} delays)",
                r.host.build_s, r.host.chain.unwrap_or(0), r.model.seconds(), r.model.chain
            ),
            why: "the same cost: on the complete graph every node Tests its Basic edges one at a time, lightest first, each a WAN round trip of 0.3-1.4 s; ours within 25 % of the paper's is ✓ (no process start-up or NWS measurement in ours; the paper's 42-49 s of Figs. 5-7 include them)",
        },
        Claim {
            ok: false,
            paper: format!(
                "Fig. 4: the MagPIe-like tree takes {} s to set up",
                FIG4_MAGPIE_BUILD_S.map(num).join(" / ")
            ),
            ours: "0 s: computed centrally from the cluster map, no message".into(),
            why: "the paper's time is LAM/MPI's start-up and communicator set-up, which we do not model",
        },
        Claim {
            ok: our_gain > 0.0,
            paper: format!(
                "Fig. 4: broadcasts over the static MST are {} faster than MagPIe-like (4, 8, 16)",
                paper_gains.join(" / ")
            ),
            ours: format!("{our_gain:+.1}% per extra broadcast (static MST vs MagPIe-like)"),
            why: "with 24-byte messages both trees cost their deepest path; the MST's (12 -> 16 -> 4 -> 8) is longer than MagPIe's 12 -> 8, and the send-overhead sweep above shows a per-message cost widens the gap: the paper's gain must come from costs we do not model (LAM's per-send software costs on its slow WAN paths)",
        },
        Claim {
            ok: r.repairs.iter().all(|x| x.repair.messages() * 5 < x.rebuild.messages()),
            paper: "Figs. 5-6: adapting the tree after a change costs far less than building it (AGM-adap's adaptation column beside the 42 s build)".into(),
            ours: format!(
                "a repair: {:.0} messages, {:.2} s on average over Fig. 5's four changes; a GHS rebuild: {:.0} messages, {:.2} s",
                rep(|x| x.repair.messages() as f64),
                rep(|x| x.repair.seconds()),
                rep(|x| x.rebuild.messages() as f64),
                rep(|x| x.rebuild.seconds()),
            ),
            why: "a repair is three waves over the tree (3 (n - 1) messages) and a few tests, against GHS's Test/Reject of every edge",
        },
        fig_claim(
            format!(
                "Fig. 5: 16 broadcasts after the changes take {} s (MagPIe-like, AGM, AGM-adap): adapted {:.1}x and {:.1}x faster",
                FIG5_BCAST_S.map(num).join(" / "),
                FIG5_BCAST_S[1] / FIG5_BCAST_S[2],
                FIG5_BCAST_S[0] / FIG5_BCAST_S[2]
            ),
            &figs.fig5,
            &FIG5_BCAST_S,
            "the changes are the paper's, one process pair each, and the sessions are eager with the announcement relayed down the tree (every rank calls MPI_Bcast), so a broadcast costs its tree's deepest path. MagPIe-like matches (12 -> 4 -> 6 = 583.8 + 9999 ms a broadcast). The adapted tree costs its deepest path, 12 -> 16 -> 4 -> 8 = 21 + 13.5 + 364.1 = 398.6 ms a broadcast (6.38 s), against the paper's 0.37 s, which is below that path: the paper's per-process MPI_Bcast times overlap consecutive broadcasts. Our static MST is slower than the paper's (10.50 s a broadcast: 500.3 ms to process 4, then (04,06)'s 9999 ms): inside a site every pair weighs 0 in Table 1, so the id tie-break puts (04,06) in the tree (the paper gives (04,06) 1 ms before; its other intra-site latencies, and so its static tree, are unknown), which makes our AGM-adap/AGM factor larger than the paper's. Before the relay every member started on the root's direct announcement (583.8 ms to S1), a floor of 0.948 s a broadcast under the adapted tree (15.17 s)",
        ),
        fig_claim(
            format!(
                "Fig. 7: 20 broadcasts with faults at 4, 8, 12, 16 (threshold 0) take {} s (MagPIe-like, AGM, AGM-adap)",
                FIG7_BCAST_S.map(num).join(" / ")
            ),
            &figs.fig7,
            &FIG7_BCAST_S,
            "as Fig. 5 for the changes and the sessions: 18 of the 20 broadcasts cost the adapted tree's 398.8 ms each; the first after process 1 fails and the first after process 5 fails (each relays inside its site in the adapted tree) wait for the failure's detection (10 s of heartbeat silence, 6.0 and 10.0 s after their start) before the orphans are re-attached; processes 17 and 21 are leaves and cost nothing. While the live MST recovers after a failure (locally: the surviving pieces of its tree rejoin by GHS, ghs_repair's local recovery), broadcasts keep the last tree without the failed process, its cut-off pieces joined by their cheapest edges (before that fallback they used the central MST of the root's view, which takes (04,06) from the view's guesses: 10.50 s each for the four after a failure, 48.38 s in all). The paper's text says Fig. 7's four events are channel failures and recoveries (a latency rise, a drop, a rise, a drop, found at the 4th, 8th, 12th and 16th broadcasts) without naming the channels or values; ours fail processes 1, 5, 17 and 21 instead (one of S0, S1, S4, S5 each, none a MagPIe coordinator, so the static trees keep their shape), our Hosts detect each failure by heartbeat, the live MST recovers among the survivors (locally, from the pieces of its tree), and every broadcast finishes without the dead member (all whole): no tree waits on a dead process",
        ),
    ]
}

fn render_ghs(r: &GhsRows, checks: &[Check], claims: &[Claim]) -> String {
    let mut out = String::from(
        "\nIssue 17: the distributed MST (GHS) on the six sites, its repairs, its growth\n",
    );
    let h = &r.host;
    let _ = writeln!(
        out,
        "Distributed build by 24 Hosts in the simulator (as `windrose mst --scenario {SCENARIO_PATH} --initiator 12`):\n\
         \x20 {} GHS frames ({}), the last process knew the end {:.3} s after the first frame,\n\
         \x20 {} message delays on the critical chain (GHS's bound 5 n log2 n = {:.0});\n\
         \x20 the message-delay model (every message its link's latency, nothing else): {} messages,\n\
         \x20 {:.3} s, {} delays. The slowest link used, S1-S2, is 364.1 ms; the rest of the time is\n\
         \x20 Test/Reject round trips over WAN links, one edge at a time per node (the goal of < 3 s\n\
         \x20 needs fewer of them on the chain: not reached).",
        h.frames_total,
        h.frames
            .iter()
            .map(|(k, v)| format!("{} {v}", k.trim_start_matches("ghs_")))
            .collect::<Vec<_>>()
            .join(", "),
        h.build_s,
        h.chain.unwrap_or(0),
        h.time_bound,
        r.model.messages(),
        r.model.seconds(),
        r.model.chain
    );
    out.push_str(&render_chain(&r.model));
    let w = &r.windowed;
    let _ = writeln!(
        out,
        "  With a test window of {} (`windrose mst`'s default; the above is the paper's GHS, window 1):\n\
         \x20 {} GHS frames, the end {:.3} s after the first frame, {} delays on the chain.",
        w.test_window,
        w.frames_total,
        w.build_s,
        w.chain.unwrap_or(0)
    );
    out.push_str(
        "\nThe live MST's builds in the message-delay model, every process starting at 0 (as\n\
         `windrose mst --scenario ... --build rows`; the paper's GHS build: 23.39-25.24 s, Fig. 4):\n",
    );
    builds_table(&mut out, &r.builds.builds, " (Hellos first)");
    if let Some(rows) = r.builds.builds.iter().find(|b| b.test_window.is_none()) {
        let n = u64::from(r.builds.nodes);
        let _ = writeln!(
            out,
            "  Rows: one message delay, the slowest one-way link ({:.1} ms); every process holds the\n\
             \x20 whole tree, so the live MST's {} parent announcements (after GHS) are not needed.",
            rows.build_s * 1e3,
            n * n.saturating_sub(1)
        );
    }
    out.push_str(
        "\nRepair after one change (Fig. 5's changes, each alone on the built tree; message-delay\n\
         model, the links' delays unchanged) against a GHS rebuild on the new weights\n",
    );
    let pairs = |v: &[(u32, u32)]| {
        v.iter()
            .map(|(a, b)| format!("{a}-{b}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows: Vec<Vec<String>> = r
        .repairs
        .iter()
        .map(|x| {
            vec![
                format!("({:02},{:02}) -> {} ms", x.edge.0, x.edge.1, num(x.to_ms)),
                if x.swap.0.is_empty() {
                    "tree stays".into()
                } else {
                    format!("{} out, {} in", pairs(&x.swap.0), pairs(&x.swap.1))
                },
                x.repair.messages().to_string(),
                format!("{:.3}", x.repair.seconds()),
                x.repair.chain.to_string(),
                x.rebuild.messages().to_string(),
                format!("{:.3}", x.rebuild.seconds()),
            ]
        })
        .collect();
    for l in vtable(
        &[
            "change",
            "tree",
            "repair msgs",
            "repair s",
            "delays",
            "rebuild msgs",
            "rebuild s",
        ],
        &rows,
    ) {
        let _ = writeln!(out, "  {l}");
    }
    let rows: Vec<Vec<String>> = r
        .rows_repairs
        .iter()
        .map(|x| {
            vec![
                format!("({:02},{:02}) -> {} ms", x.edge.0, x.edge.1, num(x.to_ms)),
                x.repair.messages().to_string(),
                format!("{:.3}", x.repair.seconds()),
                x.repair.chain.to_string(),
            ]
        })
        .collect();
    out.push_str(
        "  The same changes repaired from the tree built by rows (its root the tree's centre):\n",
    );
    for l in vtable(&["change", "repair msgs", "repair s", "delays"], &rows) {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(
        out,
        "\nGHS's growth: complete graphs of a seeded cluster cost model ({SCALE_CLUSTER} per cluster, 0.05-0.5 ms\n\
         inside, 5-100 ms between), message-delay model, each run checked against the central MST"
    );
    let mut rows = Vec::new();
    for (i, x) in r.scale.iter().enumerate() {
        let growth = i
            .checked_sub(1)
            .map(|j| format!("x{:.2}", x.wall_s / r.scale[j].wall_s))
            .unwrap_or_default();
        rows.push(vec![
            x.n.to_string(),
            x.edges.to_string(),
            x.span.messages().to_string(),
            format!("{:.0}", ghs_message_bound(x.n, x.edges)),
            format!("{:.3}", x.span.seconds()),
            x.span.chain.to_string(),
            format!("{:.2}", x.setup_s),
            format!("{:.2}", x.wall_s),
            growth,
        ]);
    }
    for l in vtable(
        &[
            "nodes",
            "edges",
            "messages",
            "bound",
            "simulated s",
            "delays",
            "setup wall s",
            "run wall s",
            "run growth",
        ],
        &rows,
    ) {
        let _ = writeln!(out, "  {l}");
    }
    out.push_str(
        "  (the messages grow with the edges, 2 e Test/Reject dominating: x4 per doubling of the\n\
         \x20 nodes on a complete graph; the run's wall time grows faster as the machines' edges\n\
         \x20 outgrow the caches; wall times are this machine's, shared with other work)\n",
    );
    out.push_str("\nThe paper's claims beside ours\n");
    for c in claims {
        let _ = writeln!(
            out,
            "  {} paper: {}\n      ours: {}\n      why: {}",
            mark(c.ok),
            c.paper,
            c.ours,
            c.why
        );
    }
    out.push_str("\nChecks of the distributed MST\n");
    for c in checks {
        let _ = writeln!(out, "  {} {}", mark(c.ok), c.what);
    }
    out
}

/// The GHS rows as CSV: what, nodes, messages, simulated seconds, delays, wall seconds.
fn ghs_csv(r: &GhsRows) -> String {
    let mut s = String::from("row,nodes,messages,simulated_s,delays,run_wall_s\n");
    let h = &r.host;
    let _ = writeln!(
        s,
        "build_hosts,{},{},{:.6},{},",
        h.nodes,
        h.frames_total,
        h.build_s,
        h.chain.unwrap_or(0)
    );
    let m = &r.model;
    let _ = writeln!(
        s,
        "build_model,24,{},{:.6},{},",
        m.messages(),
        m.seconds(),
        m.chain
    );
    let w = &r.windowed;
    let _ = writeln!(
        s,
        "build_hosts_window_{},{},{},{:.6},{},",
        w.test_window,
        w.nodes,
        w.frames_total,
        w.build_s,
        w.chain.unwrap_or(0)
    );
    for b in &r.builds.builds {
        let _ = writeln!(
            s,
            "build_model_{}{},24,{},{:.6},{},",
            b.build,
            b.test_window
                .map(|k| format!("_window_{k}"))
                .unwrap_or_default(),
            b.frames_total,
            b.build_s,
            b.chain
        );
    }
    for x in &r.rows_repairs {
        let _ = writeln!(
            s,
            "repair_from_rows_{}_{},24,{},{:.6},{},",
            x.edge.0,
            x.edge.1,
            x.repair.messages(),
            x.repair.seconds(),
            x.repair.chain
        );
    }
    for x in &r.repairs {
        for (what, sp) in [("repair", &x.repair), ("rebuild", &x.rebuild)] {
            let _ = writeln!(
                s,
                "{what}_{:02}_{:02},24,{},{:.6},{},",
                x.edge.0,
                x.edge.1,
                sp.messages(),
                sp.seconds(),
                sp.chain
            );
        }
    }
    for x in &r.scale {
        let _ = writeln!(
            s,
            "growth,{},{},{:.6},{},{:.3}",
            x.n,
            x.span.messages(),
            x.span.seconds(),
            x.span.chain,
            x.wall_s
        );
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Figs. 5 and 7: broadcasts over the live MST after changes and faults, one Host per process.

/// How the broadcasts of a Fig. 5 / Fig. 7 run choose their tree.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Agm {
    /// MagPIe-like, built on the view of the first (warm-up) broadcast and kept.
    Magpie,
    /// The paper's AGM unadapted: the MST of the warm-up broadcast's view (before the
    /// changes), kept. Not the live MST with an infinite threshold: a link that weighed 0 (inside
    /// a site) changes by an infinite ratio, so every threshold takes it in.
    StaticMst,
    /// The live MST, adapted at this threshold every [`FIG_CHECK_EVERY`] broadcasts.
    Live(f64),
}

impl Agm {
    fn label(self) -> String {
        match self {
            Agm::Magpie => "MagPIe-like".into(),
            Agm::StaticMst => "AGM (static MST)".into(),
            Agm::Live(t) => format!("AGM-adap, threshold {:.0} %", t * 100.0),
        }
    }

    /// The row's name in the CSV: no comma, no space.
    fn key(self) -> String {
        match self {
            Agm::Magpie => "magpie".into(),
            Agm::StaticMst => "static_mst".into(),
            Agm::Live(t) => format!("live_threshold_{:.0}", t * 100.0),
        }
    }
}

/// The paper's k (AGM-adapII): the live MST takes changes in every 4 broadcasts.
const FIG_CHECK_EVERY: u32 = 4;
/// Round-trip probes every 30 s: longer than the slowest round trip after Fig. 5's changes
/// (2 x 9.999 s inside S1), so every pong is matched.
const FIG_PROBE_S: u64 = 30;
/// The uncounted broadcasts, s: three warm-ups before the changes (the first fixes the static
/// trees on the view before them; the build ends near 35 s, GHS's ~23 s after the first
/// forecasts), and a fourth after them, on which the live MST checks its links (every
/// [`FIG_CHECK_EVERY`]-th broadcast) and repairs: the paper inserts the new latencies "after
/// the initial tree and immediately before the first MPI_Bcast", which adapts before it
/// sends, the adaptation timed in a column of its own. Then the changes, the first counted
/// broadcast and the period of the broadcasts, s.
const FIG_UNCOUNTED_S: [f64; 4] = [45.0, 50.0, 55.0, 160.0];
const FIG_CHANGE_S: f64 = 60.0;
const FIG_FIRST_S: f64 = 280.0;
const FIG_PERIOD_S: f64 = 90.0;
/// How long after its start a counted broadcast's frames are logged, s: its slowest tree
/// (10.6 s), or a failure's detection (10 s of silence) and the orphans' re-attachment, fit
/// well within.
const FIG_LOG_WINDOW_S: f64 = 30.0;

/// Fig. 5's changes as the paper made them: each between one pair of processes, both ways
/// (`pair:A:B` in a scenario), every other pair keeping Table 1's latency. The values are the
/// paper's "to" latencies, ms; its "from" values are not our platform's (0 inside a site,
/// Table 1 between sites).
fn fig5_changes() -> Vec<windrose_sim::network::Change> {
    use windrose_sim::network::Change;
    let mut c = Vec::new();
    for ((a, b), _, to_ms) in FIG5_CHANGES {
        for (from, to) in [(a, b), (b, a)] {
            c.push(Change::PairLatency {
                from: NodeId(from),
                to: NodeId(to),
                latency_s: to_ms / 1e3,
            });
        }
    }
    c
}

/// An event log that keeps only the lines of data frames (`"msg":"data"`), as `(t, ev, node)`:
/// a run's few hundred data frames among its probes' hundred thousand lines.
#[derive(Clone, Default)]
struct DataFrames {
    line: Vec<u8>,
    kept: std::sync::Arc<std::sync::Mutex<Vec<(f64, String, u32)>>>,
}

impl std::io::Write for DataFrames {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            const NEEDLE: &[u8] = b"\"msg\":\"data\"";
            if self.line.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
                let v: serde_json::Value =
                    serde_json::from_slice(&self.line).map_err(std::io::Error::other)?;
                let (t, ev, node) = (v["t"].as_f64(), v["ev"].as_str(), v["node"].as_u64());
                if let (Some(t), Some(ev), Some(node)) = (t, ev, node) {
                    let mut kept = self
                        .kept
                        .lock()
                        .map_err(|_| std::io::Error::other("the data-frame log was poisoned"))?;
                    kept.push((t, ev.to_string(), node as u32));
                }
            }
            self.line.clear();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One Fig. 5 / Fig. 7 row.
#[derive(Copy, Clone, Debug, PartialEq)]
struct FigRow {
    agm: Agm,
    /// Sum over the broadcasts of the tree's part: from the root's first data frame to the
    /// last data frame's arrival at a process, s (the paper's measure: the slowest process's
    /// time in `MPI_Bcast`, which starts with the data).
    tree_s: f64,
    /// Sum over the broadcasts of the whole session: from the root's request to its
    /// completion (the eager announcement, the data, every member's end report), s.
    session_s: f64,
    /// Broadcasts that reached every live process.
    whole: usize,
    /// The slowest broadcast's tree part, s.
    slowest_s: f64,
}

/// One run: `count` broadcasts of 24 bytes from [`ROOT`], one every [`FIG_PERIOD_S`], after
/// Fig. 5's changes, processes `faults` failing just before the broadcasts they name
/// `(broadcast index, process)`: the sums of the broadcasts' tree parts and sessions, and how
/// many completed whole.
fn fig_run(s: &Scenario, agm: Agm, count: usize, faults: &[(usize, u32)]) -> Result<FigRow> {
    use bytes::Bytes;
    use std::time::Duration;
    use windrose_proto::host::{App, AppRequest, BroadcastRequest};
    use windrose_proto::mst_service::MstLiveConfig;
    use windrose_proto::planner::TreePolicy;
    use windrose_proto::probe::ProbeConfig;
    use windrose_proto::{Input, TransferId};
    use windrose_sim::engine::SimConfig;
    use windrose_sim::group::{group, leave_input};
    let n = s.platform.node_count();
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(s.platform.clone(), config, 4, |c| {
        // Every process expects every broadcast, as every rank calls the paper's MPI_Bcast
        // replacement: eager sessions (no Ready/Go round trip), the announcement relayed down
        // the tree, so a process starts when its parent's copy reaches it, not the root's.
        c.eager = true;
        c.relay_announce = true;
        // Failures are detected only where the run has them (a 10 s link is not a failure).
        if faults.is_empty() {
            c.heartbeat = None;
        }
        c.probe = Some(ProbeConfig {
            period: Duration::from_secs(FIG_PROBE_S),
            rounds: u32::MAX,
        });
        c.mst = Some(MstLiveConfig {
            metric: MstMetric::Latency,
            threshold: match agm {
                Agm::Live(t) => t,
                _ => 0.0,
            },
            check_every: FIG_CHECK_EVERY,
            resolution: 0.1,
            build_after: Duration::from_secs(10),
            // The paper's GHS.
            test_window: 1,
            build: MstBuild::Ghs,
            min_change: 0.0,
            noise_errors: 0.0,
            // The paper repairs every change (and a GHS build never rebuilds for a backlog).
            rebuild_after: 0,
        });
    })?;
    for c in fig5_changes() {
        sim.schedule_change(FIG_CHANGE_S, c)?;
    }
    let policy = match agm {
        Agm::Magpie => TreePolicy::Static {
            algorithm: TreeAlgorithm::Magpie,
        },
        Agm::StaticMst => TreePolicy::Static {
            algorithm: TreeAlgorithm::Mst,
        },
        Agm::Live(_) => TreePolicy::MstLive,
    };
    let at = |k: usize| FIG_FIRST_S + FIG_PERIOD_S * k as f64;
    // Transfers 900.. are the uncounted broadcasts, 1001.. the counted ones.
    let uncounted = FIG_UNCOUNTED_S
        .iter()
        .enumerate()
        .map(|(j, &t)| (900 + j, t));
    for (id, t) in uncounted.chain((1..=count).map(|k| (1000 + k, at(k - 1)))) {
        let request = AppRequest::StartBroadcast(BroadcastRequest {
            policy,
            segment_bytes: 24,
            max_frame_payload: 1024,
            data: Bytes::from_static(b"seed 004: 24-byte bcast."),
            transfer: Some(TransferId(id as u32)),
        });
        sim.input_at(ROOT, t, Input::App(App::new(request)))?;
    }
    for &(k, v) in faults {
        sim.fail_node_at(NodeId(v), at(k) - 1.0)?;
    }
    let end = at(count) + 60.0;
    for v in 0..n as u32 {
        if !faults.iter().any(|f| f.1 == v) {
            sim.input_at(NodeId(v), end, leave_input())?;
        }
    }
    // The event log only while a counted broadcast's frames fly: logging every probe of the
    // whole run would double its cost.
    let frames = DataFrames::default();
    for k in 1..=count {
        // Logging starts before the broadcast's instant: an eager root sends its first data
        // frame in the step that starts it.
        sim.run_until(at(k - 1) - 1.0)?;
        sim.set_event_log(Box::new(frames.clone()));
        sim.run_until(at(k - 1) + FIG_LOG_WINDOW_S)?;
        sim.take_event_log()?;
    }
    let m = sim.run()?;
    let mut session_s = 0.0;
    let mut whole = 0;
    for c in m.completions(ROOT) {
        let k = c.transfer.0.wrapping_sub(1000) as usize;
        if (1..=count).contains(&k) {
            session_s += c.at_s - at(k - 1);
            let failed_so_far = faults.iter().filter(|f| f.0 < k).count();
            whole += usize::from(c.failed == 0 && c.finished as usize + failed_so_far >= n);
        }
    }
    // Each broadcast's data frames are sent and received within its log window (the session
    // takes a few seconds, the slowest tree 10.6 s).
    let frames = frames
        .kept
        .lock()
        .map_err(|_| anyhow::anyhow!("the data-frame log was poisoned"))?
        .clone();
    let mut tree_s = 0.0;
    let mut slowest_s = 0.0f64;
    for k in 1..=count {
        let window = at(k - 1)..at(k - 1) + FIG_LOG_WINDOW_S;
        let mut within = frames.iter().filter(|f| window.contains(&f.0));
        let first = within
            .clone()
            .filter(|f| f.1 == "send" && f.2 == ROOT.0)
            .map(|f| f.0)
            .fold(f64::INFINITY, f64::min);
        let last = within
            .by_ref()
            .filter(|f| f.1 == "recv")
            .map(|f| f.0)
            .fold(f64::NEG_INFINITY, f64::max);
        if !(first.is_finite() && last.is_finite()) {
            bail!(
                "{}: broadcast {k} sent or delivered no data frame",
                agm.label()
            );
        }
        tree_s += last - first;
        slowest_s = slowest_s.max(last - first);
    }
    Ok(FigRow {
        agm,
        tree_s,
        session_s,
        whole,
        slowest_s,
    })
}

/// Fig. 5 (16 broadcasts after the changes) and Fig. 7 (20 with faults) rows.
struct FigRows {
    fig5: Vec<FigRow>,
    fig7: Vec<FigRow>,
}

/// Fig. 7's faults: `(broadcast index, process)`, one before each of broadcasts 4, 8, 12, 16
/// (ours: a process of S0, S1, S4 and S5 that is no site's MagPIe coordinator).
const FIG7_FAULTS: [(usize, u32); 4] = [(4, 1), (8, 5), (12, 17), (16, 21)];

fn fig_rows(s: &Scenario) -> Result<FigRows> {
    let fig5 = [
        Agm::Magpie,
        Agm::StaticMst,
        Agm::Live(0.1),
        Agm::Live(0.7),
        Agm::Live(0.0),
    ]
    .into_iter()
    .map(|a| fig_run(s, a, 16, &[]))
    .collect::<Result<_>>()?;
    let fig7 = [Agm::Magpie, Agm::StaticMst, Agm::Live(0.0)]
        .into_iter()
        .map(|a| fig_run(s, a, 20, &FIG7_FAULTS))
        .collect::<Result<_>>()?;
    Ok(FigRows { fig5, fig7 })
}

fn render_figs(r: &FigRows) -> String {
    let mut out = String::from(
        "\nFigs. 5 and 7 through 24 Hosts in the simulator: 24-byte broadcasts from 12, one every\n\
         90 s after Fig. 5's changes, each between one pair of processes as the paper made them\n\
         ((04,06) -> 9999 ms, (12,20) -> 45 ms, (00,02) -> 6000 ms, (12,16) -> 21 ms, both ways;\n\
         every other pair keeps Table 1). Eager sessions, as every rank calls MPI_Bcast: no\n\
         Ready/Go, and the announcement relayed down the tree, so a process starts on its\n\
         parent's copy. Sums over the broadcasts: tree = from the root's first data frame to\n\
         the last process's (the paper's measure: the slowest process's time in MPI_Bcast);\n\
         slowest = the slowest broadcast's tree part; session = from the root's request to its\n\
         completion (every member's end report included, which MPI has not)\n",
    );
    for (title, rows, paper, count) in [
        ("Fig. 5: 16 broadcasts", &r.fig5, &FIG5_BCAST_S, 16),
        (
            "Fig. 7: 20 broadcasts, processes 1, 5, 17, 21 failing before broadcasts 4, 8, 12, 16",
            &r.fig7,
            &FIG7_BCAST_S,
            20,
        ),
    ] {
        let _ = writeln!(out, "  {title}");
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.agm.label(),
                    format!("{:.2}", r.tree_s),
                    num(fig_paper_s(r.agm, paper)),
                    format!("{:.3}", r.slowest_s),
                    format!("{:.2}", r.session_s),
                    format!("{} of {count}", r.whole),
                ]
            })
            .collect();
        for l in vtable(
            &[
                "tree",
                "ours: tree, s",
                "paper, s",
                "slowest, s",
                "ours: session, s",
                "whole",
            ],
            &table,
        ) {
            let _ = writeln!(out, "    {l}");
        }
    }
    out
}

/// The paper's seconds for a Fig. 5 / Fig. 7 row (MagPIe-like, static MST, adapted).
fn fig_paper_s(agm: Agm, paper: &[f64; 3]) -> f64 {
    match agm {
        Agm::Magpie => paper[0],
        Agm::StaticMst => paper[1],
        Agm::Live(_) => paper[2],
    }
}

fn figs_csv(r: &FigRows) -> String {
    let mut s =
        String::from("figure,tree,paper_s,ours_tree_s,ours_slowest_s,ours_session_s,whole\n");
    for (fig, rows, paper) in [
        ("fig5", &r.fig5, &FIG5_BCAST_S),
        ("fig7", &r.fig7, &FIG7_BCAST_S),
    ] {
        for x in rows {
            let _ = writeln!(
                s,
                "{fig},{},{:.2},{:.6},{:.6},{:.6},{}",
                x.agm.key(),
                fig_paper_s(x.agm, paper),
                x.tree_s,
                x.slowest_s,
                x.session_s,
                x.whole
            );
        }
    }
    s
}

/// Draws [`PLOTS`] into `dir`; returns their paths.
fn plots(
    dir: &Path,
    [binomial, magpie, mst]: [&TreeRun; 3],
    ghs: &GhsRows,
    figs: &FigRows,
) -> Result<Vec<std::path::PathBuf>> {
    use super::plot::{grouped_bars, line_chart, Bars, Labels, Line};
    let paths: Vec<_> = PLOTS.iter().map(|p| dir.join(p)).collect();
    let mut table2 = vec![
        Bars {
            name: "paper: MPICH".into(),
            values: TABLE2_MPICH_S.to_vec(),
        },
        Bars {
            name: "paper: MagPIe".into(),
            values: TABLE2_MAGPIE_S.to_vec(),
        },
    ];
    for r in [binomial, magpie, mst] {
        table2.push(Bars {
            name: format!("ours: {}", label(r.algo)),
            values: r.totals_s.to_vec(),
        });
    }
    grouped_bars(
        &paths[0],
        &Labels {
            title: "Table 2: total seconds of 24-byte broadcasts (ours: the broadcasts alone)",
            x: "broadcasts",
            y: "seconds",
        },
        &TABLE2_BCASTS.map(|k| k.to_string()),
        &table2,
    )?;
    // Figs. 5 and 7: one group per figure, the paper's bar beside ours for each tree (the
    // live MST at the paper's adapted thresholds: 10 % for Fig. 5, 0 % for Fig. 7).
    let pick = |rows: &[FigRow], agm: Agm| rows.iter().find(|r| r.agm == agm).map(|r| r.tree_s);
    let mut bars = Vec::new();
    for (name, f5, f7) in [
        ("MagPIe-like", Agm::Magpie, Agm::Magpie),
        ("AGM (static MST)", Agm::StaticMst, Agm::StaticMst),
        ("AGM-adap", Agm::Live(0.1), Agm::Live(0.0)),
    ] {
        bars.push(Bars {
            name: format!("paper: {name}"),
            values: vec![
                fig_paper_s(f5, &FIG5_BCAST_S),
                fig_paper_s(f7, &FIG7_BCAST_S),
            ],
        });
        bars.push(Bars {
            name: format!("ours: {name}"),
            values: vec![
                pick(&figs.fig5, f5).unwrap_or(0.0),
                pick(&figs.fig7, f7).unwrap_or(0.0),
            ],
        });
    }
    grouped_bars(
        &paths[1],
        &Labels {
            title:
                "Figs. 5 and 7: broadcasts after the changes (16) and with 4 faults (20), tree time",
            x: "figure",
            y: "seconds",
        },
        &[
            "Fig. 5 (threshold 10 %)".to_string(),
            "Fig. 7 (threshold 0 %)".to_string(),
        ],
        &bars,
    )?;
    line_chart(
        &paths[2],
        &Labels {
            title: "GHS on complete graphs (clusters of 32): messages against 5 N log2 N + 2 E",
            x: "nodes",
            y: "messages",
        },
        &[
            Line {
                name: "GHS's messages".into(),
                points: ghs
                    .scale
                    .iter()
                    .map(|x| (x.n as f64, x.span.messages() as f64))
                    .collect(),
            },
            Line {
                name: "bound 5 N log2 N + 2 E".into(),
                points: ghs
                    .scale
                    .iter()
                    .map(|x| (x.n as f64, ghs_message_bound(x.n, x.edges)))
                    .collect(),
            },
        ],
    )?;
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Fig. 5 row with this tree time (its session 10 s longer), every broadcast whole.
    fn row(agm: Agm, tree_s: f64) -> FigRow {
        FigRow {
            agm,
            tree_s,
            session_s: tree_s + 10.0,
            whole: 16,
            slowest_s: tree_s / 16.0,
        }
    }

    #[test]
    fn every_check_passes() {
        let s = scenario().unwrap();
        let b = run_tree(&s, TreeAlgorithm::Binomial).unwrap();
        let m = run_tree(&s, TreeAlgorithm::Magpie).unwrap();
        let t = run_tree(&s, TreeAlgorithm::Mst).unwrap();
        let c = checks(&s, &b, &m, Some(&t));
        assert_eq!(c.len(), 7);
        assert!(c.iter().all(|c| c.ok), "{}", render(&b, &m, &t, &c));
        assert_eq!(table2_csv(&b, &m, &t).lines().count(), 10);
    }

    /// The sweep: without overhead it is today's run; every overhead slows both trees.
    #[test]
    fn send_overhead_sweep() {
        let s = scenario().unwrap();
        let rows = overhead_sweep(&s).unwrap();
        assert_eq!(rows[0].o_ms, 0.0);
        assert_eq!(
            rows[0].mst,
            run_tree(&s, TreeAlgorithm::Mst).unwrap().slowest
        );
        assert_eq!(
            rows[0].magpie,
            run_tree(&s, TreeAlgorithm::Magpie).unwrap().slowest
        );
        for w in rows.windows(2) {
            assert!(w[1].mst.1 > w[0].mst.1 && w[1].magpie.1 > w[0].magpie.1);
        }
        assert!(render_sweep(&rows).contains("MST vs MagPIe"));
    }

    #[test]
    fn a_wrong_table_or_path_is_caught() {
        let s = scenario().unwrap();
        let b = run_tree(&s, TreeAlgorithm::Binomial).unwrap();
        let m = run_tree(&s, TreeAlgorithm::Magpie).unwrap();
        // The MagPIe-like tree in the place of the binomial: both path checks fail.
        let c = checks(&s, &m, &b, None);
        assert!(c.iter().filter(|c| !c.ok).count() >= 2);
        // A platform whose S0-S3 latency is off.
        let mut wrong = s.clone();
        wrong
            .platform
            .set_wan_latency(ClusterId(0), ClusterId(3), 0.015)
            .unwrap();
        assert!(!checks(&wrong, &b, &m, None)[0].ok);
        // The binomial tree in the place of the MST.
        let c = checks(&s, &b, &m, Some(&b));
        assert!(c.iter().any(|c| !c.ok && c.what.contains("spanning tree")));
    }

    /// Issue 17's rows on the fast sizes: every check holds, the repairs swap the edges worked
    /// out by hand (crates/windrose-proto/tests/ghs_repair.rs), the CSV has every row.
    #[test]
    fn ghs_rows_hold() {
        let s = scenario().unwrap();
        let r = ghs_rows(&s, false).unwrap();
        let c = ghs_checks(&s, &r);
        assert!(c.iter().all(|c| c.ok), "{}", render_ghs(&r, &c, &[]));
        let swaps: Vec<_> = r.repairs.iter().map(|x| x.swap.clone()).collect();
        assert_eq!(
            swaps,
            [
                (vec![(4, 6)], vec![(5, 6)]),
                (vec![(12, 20)], vec![(12, 21)]),
                (vec![(0, 2)], vec![(1, 2)]),
                (vec![], vec![]),
            ]
        );
        // The traced chain is the build's time: no message on it waited.
        let m = &r.model;
        assert_eq!(m.path.len() as u32, m.chain);
        let along: f64 = m.path.iter().map(|h| h.delay_s).sum();
        assert!(
            (along - m.seconds()).abs() < 1e-6,
            "{along} vs {}",
            m.seconds()
        );
        assert!(render_chain(m).contains("test"));
        // A repair is the three waves (3 (n - 1)) and a few more.
        assert!(r.repairs.iter().all(|x| x.repair.messages() >= 69));
        assert_eq!(r.scale.len(), SCALE_FAST.len());
        assert!(r
            .scale
            .iter()
            .all(|x| (x.span.messages() as f64) < ghs_message_bound(x.n, x.edges) + x.n as f64));
        // Header, 3 builds, the model's 3 builds (rows, GHS windows 1 and 16), 4 repairs from
        // the rows-built tree, 4 repairs and 4 rebuilds, the growth rows.
        assert_eq!(
            ghs_csv(&r).lines().count(),
            1 + 3 + 3 + 4 + 8 + SCALE_FAST.len()
        );
        // The rows build: the same tree, one delay, 552 rows; its repairs the exact MST too
        // (checked in repair_row_from), with the three waves at least.
        let rows = &r.builds.builds[0];
        assert_eq!((rows.build, rows.chain), (MstBuild::Rows, 1));
        assert_eq!(rows.frames, BTreeMap::from([("row".to_string(), 552)]));
        assert!((rows.build_s - 0.7229).abs() < 1e-6, "{}", rows.build_s);
        assert!(r.rows_repairs.iter().all(|x| x.repair.messages() >= 69));
        assert_eq!(
            r.builds
                .edges
                .iter()
                .map(|e| (e.a, e.b))
                .collect::<Vec<_>>(),
            r.host.edges.iter().map(|e| (e.a, e.b)).collect::<Vec<_>>()
        );
        // The windowed build: the same tree, sooner.
        assert_eq!(r.windowed.edges, r.host.edges);
        assert!(r.windowed.build_s < r.host.build_s);
        let b = run_tree(&s, TreeAlgorithm::Binomial).unwrap();
        let m = run_tree(&s, TreeAlgorithm::Magpie).unwrap();
        let paper = |x: &[f64; 3]| FigRows {
            fig5: vec![
                row(Agm::Magpie, x[0]),
                row(Agm::StaticMst, x[1]),
                row(Agm::Live(0.1), x[2]),
            ],
            fig7: vec![],
        };
        let cl = claims(&r, &m, &b, &paper(&FIG5_BCAST_S));
        assert!(render_ghs(&r, &c, &cl).contains("18.6x and 29.1x"));
    }

    /// A figure's claim holds for the paper's own numbers, not for the right order with small
    /// factors, nor for the wrong order.
    #[test]
    fn fig_claims_need_the_order_and_the_factors() {
        let rows = |x: [f64; 3]| {
            vec![
                row(Agm::Magpie, x[0]),
                row(Agm::StaticMst, x[1]),
                row(Agm::Live(0.7), x[2] * 2.0),
                row(Agm::Live(0.1), x[2]),
            ]
        };
        let ok = |x| fig_claim(String::new(), &rows(x), &FIG5_BCAST_S, "").ok;
        assert!(ok(FIG5_BCAST_S));
        assert!(!ok([677.30, 611.98, 597.31]));
        assert!(!ok([108.86, 170.79, 5.86]));
        let c = fig_claim(String::new(), &rows(FIG5_BCAST_S), &FIG5_BCAST_S, "");
        assert!(c.ours.contains("18.58x and 29.15x"), "{}", c.ours);
    }

    /// Fig. 5's changes reach single process pairs: over MagPIe-like each broadcast reaches
    /// S1's coordinator 4 directly (583.8 ms) and then pays (04,06)'s 9999 ms; the live MST,
    /// adapted before the first counted broadcast, leaves (04,06) and (00,02) out, and its
    /// slowest process is 8 at the tree's deepest path, 12 -> 16 -> 4 -> 8 = 21 + 13.5 +
    /// 364.1 ms: with the announcement relayed down the tree, no process waits for the root's
    /// direct one (583.8 ms to S1; before the relay the adapted tree cost 583.8 + 364.1 ms).
    /// Site-wide changes (the old runs) cost every path into S1 at least 5 s.
    #[test]
    fn fig5_runs_take_the_per_pair_changes() {
        let s = scenario().unwrap();
        let magpie = fig_run(&s, Agm::Magpie, 16, &[]).unwrap();
        let live = fig_run(&s, Agm::Live(0.1), 16, &[]).unwrap();
        assert_eq!((magpie.whole, live.whole), (16, 16));
        let per = |r: &FigRow| r.tree_s / 16.0;
        // 24 bytes: microseconds over 100 Mbit/s links.
        assert!((per(&magpie) - (0.5838 + 9.999)).abs() < 1e-3, "{magpie:?}");
        assert!(
            (per(&live) - (0.021 + 0.0135 + 0.3641)).abs() < 1e-3,
            "{live:?}"
        );
        assert!((live.slowest_s - per(&live)).abs() < 1e-3, "{live:?}");
        assert!(magpie.session_s > magpie.tree_s && live.session_s > live.tree_s);
    }

    /// The checks catch a wrong distributed tree.
    #[test]
    fn a_wrong_distributed_tree_is_caught() {
        let s = scenario().unwrap();
        let mut r = ghs_rows(&s, false).unwrap();
        assert!(ghs_checks(&s, &r)[0].ok);
        let edge = r
            .host
            .edges
            .iter()
            .position(|e| (e.a, e.b) == (12, 20))
            .unwrap();
        // S0-S5 in the place of S3-S5, same total.
        r.host.edges[edge].a = 0;
        assert!(!ghs_checks(&s, &r)[0].ok);
        r.host.edges[edge].a = 12;
        r.host.total += 0.1;
        assert!(!ghs_checks(&s, &r)[0].ok);
    }
}
