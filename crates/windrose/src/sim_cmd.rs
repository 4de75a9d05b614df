//! `windrose sim run SCENARIO.toml [--seed S] [--json] [--log FILE]`: runs a scenario file (a
//! platform, timed changes, mayhem, failures and a workload; see `windrose_sim::scenario`) in
//! the discrete-event simulator and reports per-node completion times, throughput and bytes per
//! link (a sort: each member's finish, records and bytes sent, and the check of the sorted
//! set; an auto workload: the protocol chosen and why). A progress bar goes to stderr while it
//! runs.

use crate::error::bad_input;
use crate::output::{num, print, print_json, vtable};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use windrose_model::platform::LinkId;
use windrose_sim::metrics::NodeOutcome;
use windrose_sim::scenario::{
    load_scenario, run_scenario_with, Progress, Report, ScenarioError, SortReport, WorkloadKind,
};

/// What `windrose sim` does.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Run a scenario file in the simulator.
    ///
    /// The file holds `[platform]` (clusters, node and access capacities, WAN capacity and
    /// latency tables), optional `[[change]]` (a link's capacity or latency at a time),
    /// `[mayhem]` (every link re-drawn to a random fraction of its nominal capacity every
    /// period), `[[fail]]` (a node crashes at a time), `[compute]` (node speeds) and
    /// `[workload]`: protocol = broadcast or scatter (tree, root, message_bytes such as "64MiB",
    /// segment_bytes, repetitions, sharing); kind = "multicast" (mob, bittorrent, balanced,
    /// magpie); kind = "sort" (heterosort or sample-sort of generated records: each member's
    /// finish, records and bytes sent, and the check); kind = "auto" (a broadcast whose
    /// protocol the automatic choice picks, explained as `windrose send --explain` does).
    /// Examples: data/scenarios/*.toml. A bad file exits with code 2 and one line naming the
    /// file, line and key.
    Run(RunArgs),
}

/// Options of `windrose sim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario file (TOML).
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: PathBuf,
    /// Run seed (mayhem draws from it); default: the file's `seed`, else 0.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the event log (one JSON object per line) to this file.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `windrose sim …`.
pub fn run(cmd: SimCommand) -> Result<()> {
    match cmd {
        SimCommand::Run(args) => run_file(&args),
    }
}

fn run_file(args: &RunArgs) -> Result<()> {
    let scenario = load_scenario(&args.scenario).map_err(scenario_error)?;
    let seed = args.seed.unwrap_or(scenario.default_seed);
    let mut log_file = match &args.log {
        Some(path) => Some(BufWriter::new(File::create(path).map_err(|e| {
            bad_input(format!(
                "--log {}: cannot create the event log: {e}",
                path.display()
            ))
        })?)),
        None => None,
    };
    let bar = progress_bar(
        scenario.workload.repetitions,
        scenario.platform.node_count(),
        !args.quiet,
    );
    let mut on_progress = |p: &Progress| {
        bar.set_length(p.repetitions * p.nodes.max(1) as u64);
        bar.set_position(p.repetition * p.nodes as u64 + p.nodes_ended as u64);
        bar.set_message(format!(
            "rep {}/{}, t = {:.3} s",
            p.repetition + 1,
            p.repetitions,
            p.time_s
        ));
    };
    let result = run_scenario_with(
        &scenario,
        seed,
        log_file.as_mut().map(|w| w as &mut dyn Write),
        &mut on_progress,
    );
    bar.finish_and_clear();
    let report = result.map_err(scenario_error)?;
    if let (Some(mut w), Some(path)) = (log_file, &args.log) {
        w.flush()
            .with_context(|| format!("cannot write the event log {}", path.display()))?;
    }
    if args.json {
        print_json(&report)
    } else {
        print(&render(&report))
    }
}

/// Bad files and impossible set-ups are the user's input (exit 2); engine failures are not.
pub(crate) fn scenario_error(e: ScenarioError) -> anyhow::Error {
    match e {
        ScenarioError::File { .. } | ScenarioError::Setup(_) => bad_input(e.to_string()),
        ScenarioError::Engine(_) => anyhow::Error::new(e),
    }
}

fn progress_bar(repetitions: u64, nodes: usize, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(
        Some(repetitions * nodes.max(1) as u64),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:<28} [{bar:40.cyan/blue}] {pos}/{len} nodes done ({elapsed_precise})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// A byte count for people, decimal units: `16.78 MB`, `24 B`.
fn bytes(v: f64) -> String {
    for (unit, m) in [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)] {
        if v >= m {
            return format!("{:.2} {unit}", v / m);
        }
    }
    if v.fract() == 0.0 {
        format!("{} B", num(v))
    } else {
        format!("{v:.1} B")
    }
}

/// A rate for people: `5.21 MB/s`.
fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |r| format!("{}/s", bytes(r)))
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |t| format!("{t:.6}"))
}

/// The human report: what ran, one line per repetition, one per node, bytes per link.
fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", r.summary());
    let _ = writeln!(
        out,
        "{} timed change(s), {} mayhem draw(s), {} failed node(s); {} events; ended at {:.6} s",
        r.changes_applied, r.mayhem_draws, r.failures, r.events, r.end_s
    );
    if let Some(p) = r.predicted_finish_s {
        let _ = writeln!(
            out,
            "divisible-load schedule predicts every node done at {p:.6} s after the start (no latency, no frame overhead)"
        );
    }

    if let Some(a) = &r.auto {
        let _ = writeln!(
            out,
            "\nThe automatic choice (first repetition: from the platform as its start finds it, as a perfect prober sees it)"
        );
        for l in a.explain.lines() {
            let _ = writeln!(out, "  {l}");
        }
        let _ = writeln!(
            out,
            "  {} completed in {} s (simulated; first repetition)",
            a.chosen,
            secs(a.completion_s)
        );
    }
    if let Some(s) = &r.sort {
        render_sort(&mut out, r, s);
        return out;
    }

    out.push_str("\nRepetitions (times in seconds)\n");
    let rows: Vec<Vec<String>> = r
        .repetitions
        .iter()
        .map(|x| {
            vec![
                x.index.to_string(),
                format!("{:.6}", x.start_s),
                secs(x.makespan_s),
                x.finished.to_string(),
                x.aborted.to_string(),
                x.failed.to_string(),
                x.unfinished.to_string(),
                rate(x.throughput_bytes_s),
            ]
        })
        .collect();
    for l in vtable(
        &[
            "rep",
            "start",
            "makespan",
            "finished",
            "aborted",
            "failed",
            "unfinished",
            "throughput",
        ],
        &rows,
    ) {
        let _ = writeln!(out, "{l}");
    }

    let reps = r.repetitions.len();
    let scatter = r.protocol == WorkloadKind::Scatter;
    let _ = writeln!(
        out,
        "\nNodes (completion in seconds after each repetition's start{})",
        if reps > 1 {
            ", over all repetitions"
        } else {
            ""
        }
    );
    let mut header = vec!["node", "cluster", "parent", "depth", "outcome"];
    if reps == 1 {
        header.push("completion");
    } else {
        header.extend(["first", "mean", "max"]);
    }
    if scatter {
        header.extend(["computed", "predicted"]);
    }
    header.extend([if scatter { "kept" } else { "received" }, "throughput"]);
    let rows: Vec<Vec<String>> = r
        .nodes
        .iter()
        .map(|n| {
            let mut row = vec![
                n.node.to_string(),
                n.cluster.to_string(),
                n.parent.map_or_else(|| "-".into(), |p| p.to_string()),
                n.depth.to_string(),
                outcome(&n.outcomes),
            ];
            if reps == 1 {
                row.push(secs(n.completion_s[0]));
            } else {
                row.push(secs(n.completion_s[0]));
                row.push(secs(n.mean_completion_s()));
                row.push(secs(n.max_completion_s()));
            }
            if scatter {
                row.push(secs(n.compute_done_s.first().copied().flatten()));
                row.push(secs(n.predicted_finish_s));
            }
            row.push(bytes(if scatter {
                n.compute_bytes as f64
            } else {
                n.app_bytes_delivered as f64
            }));
            row.push(rate(n.throughput_bytes_s));
            row
        })
        .collect();
    for l in vtable(&header, &rows) {
        let _ = writeln!(out, "{l}");
    }

    render_links(&mut out, r);
    out
}

/// Bytes per link, the node links summed, messages and errors.
fn render_links(out: &mut String, r: &Report) {
    out.push_str("\nBytes per link (all repetitions; average rate over the whole run)\n");
    let span = r.end_s;
    let avg = |b: f64| (span > 0.0).then(|| b / span);
    let rows: Vec<Vec<String>> = r
        .links
        .iter()
        .filter(|l| {
            !matches!(
                LinkId::from(l.link),
                LinkId::NodeUp(_) | LinkId::NodeDown(_)
            )
        })
        .map(|l| {
            vec![
                l.name(),
                rate(Some(l.nominal_bytes_s)),
                bytes(l.bytes),
                rate(avg(l.bytes)),
            ]
        })
        .collect();
    if !rows.is_empty() {
        for l in vtable(&["link", "nominal", "bytes", "average"], &rows) {
            let _ = writeln!(out, "{l}");
        }
    }
    for (what, up) in [("node uplinks", true), ("node downlinks", false)] {
        let links: Vec<_> = r
            .links
            .iter()
            .filter(|l| match LinkId::from(l.link) {
                LinkId::NodeUp(_) => up,
                LinkId::NodeDown(_) => !up,
                _ => false,
            })
            .collect();
        let total: f64 = links.iter().map(|l| l.bytes).sum();
        if let Some(busiest) = links.iter().max_by(|a, b| a.bytes.total_cmp(&b.bytes)) {
            let _ = writeln!(
                out,
                "  {what}: {} carried {} in all; busiest {} ({})",
                links.len(),
                bytes(total),
                busiest.name(),
                bytes(busiest.bytes)
            );
        }
    }
    let _ = writeln!(
        out,
        "  {} messages, {} on the wire, {} delivered to applications",
        r.messages_sent,
        bytes(r.wire_bytes_sent as f64),
        bytes(r.app_bytes_delivered as f64)
    );
    if !r.errors.is_empty() {
        let _ = writeln!(out, "\n{} protocol error(s):", r.errors.len());
        for e in r.errors.iter().take(20) {
            let _ = writeln!(out, "  {e}");
        }
    }
}

/// A sort: one line per member (its speed, records before and after, bytes sent, finish),
/// the check, then the links.
fn render_sort(out: &mut String, r: &Report, s: &SortReport) {
    let _ = writeln!(
        out,
        "\nMembers (finish in seconds after the start; bytes sent: every encoded message)"
    );
    let rows: Vec<Vec<String>> = s
        .members
        .iter()
        .map(|m| {
            vec![
                m.node.to_string(),
                m.cluster.to_string(),
                rate(Some(m.compute_bytes_s)),
                m.outcome.to_string(),
                m.records_in.to_string(),
                m.records_held.to_string(),
                bytes(m.bytes_sent as f64),
                secs(m.finish_s),
            ]
        })
        .collect();
    for l in vtable(
        &[
            "node", "cluster", "speed", "outcome", "records", "held", "sent", "finish",
        ],
        &rows,
    ) {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(
        out,
        "\nsort complete at the initiator: {} ({} finished, {} failed); finish max {} s, mean {} s",
        secs(s.complete_s),
        s.finished,
        s.failed,
        secs(s.max_finish_s),
        secs(s.mean_finish_s)
    );
    let c = &s.check;
    let _ = writeln!(
        out,
        "check: {} -- {} records in, {} held at the end; checksum {} in, {} out; {}, {}",
        if c.ok { "passed" } else { "FAILED" },
        c.records_in,
        c.records_out,
        c.checksum_in,
        c.checksum_out,
        if c.sorted {
            "globally sorted"
        } else {
            "NOT globally sorted"
        },
        if c.complete {
            "nothing lost or duplicated"
        } else {
            "records LOST or DUPLICATED"
        }
    );
    render_links(out, r);
}

/// A node's outcomes: the outcome when it is the same in every repetition, else counts.
fn outcome(outcomes: &[NodeOutcome]) -> String {
    match outcomes {
        [] => "-".into(),
        [first, rest @ ..] if rest.iter().all(|o| o == first) => first.name().into(),
        _ => {
            let finished = outcomes
                .iter()
                .filter(|o| **o == NodeOutcome::Finished)
                .count();
            format!("finished {finished}/{}", outcomes.len())
        }
    }
}
