//! Running a [`Scenario`] in the engine: see [the scenario docs](crate::scenario#running-a-scenario)
//! for repetitions, the timeline and the event log.

use super::{AutoWorkload, MobVariant, MulticastWorkload, Workload};
use super::{
    Mayhem, ScatterSends, Scenario, ScenarioError, TreeCosts, WorkloadKind, MAX_MAYHEM_CHANGES,
};
use crate::auto::{choose_on, AutoSettings};
use crate::engine::{self, MemoryLog, Payload, RunState, SimConfig, SimError, Simulation};
use crate::metrics::{LinkRef, Metrics, NodeOutcome};
use crate::multicast::{self, MulticastOutcome, Probe, SharedData};
use crate::network::{Change, SharingPolicy};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::borrow::Cow;
use std::io::{self, Write};
use windrose_model::error::compact;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::units::format_size;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::choice::{Candidate, Prediction};
use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
use windrose_proto::scatter::{ScatterConfig, SendMode};
use windrose_proto::tree_broadcast::{BroadcastConfig, TreeBroadcast};
use windrose_proto::tree_multicast::TreeMulticastConfig;
use windrose_proto::TransferId;
use windrose_trees::dlt::{self, OrderPolicy, Schedule};
use windrose_trees::Tree;
use windrose_trees::TreeAlgorithm;

mod sort;

pub use sort::{generate_records, sort_spec, SortCheck, SortMember, SortRecords, SortReport};

/// Engine events per chunk the runner aims at between two progress callbacks.
const EVENTS_PER_CHUNK: f64 = 20_000.0;

/// Where a run is, for progress bars: given to the callback of [`run_scenario_with`] between
/// chunks of simulated time.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Progress {
    /// The repetition being run, 0-based.
    pub repetition: u64,
    /// Repetitions in all.
    pub repetitions: u64,
    /// Scenario time reached, seconds.
    pub time_s: f64,
    /// Nodes of this repetition that have ended (finished, aborted or failed).
    pub nodes_ended: usize,
    /// Nodes taking part.
    pub nodes: usize,
    /// Engine events so far, all repetitions.
    pub events: u64,
}

/// Everything a scenario run measured; see [`run_scenario`]. Times are seconds on the
/// scenario's clock unless the name says relative.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The run seed.
    pub seed: u64,
    /// `broadcast` or `scatter`.
    pub protocol: WorkloadKind,
    /// The tree algorithm.
    pub tree: TreeAlgorithm,
    /// What latency trees minimised.
    pub tree_costs: TreeCosts,
    /// The root.
    pub root: NodeId,
    /// Nodes of the platform.
    pub node_count: usize,
    /// Clusters of the platform.
    pub cluster_count: usize,
    /// Bytes of the message (broadcast) or load (scatter).
    pub message_bytes: u64,
    /// Broadcast segment size (None for a scatter).
    pub segment_bytes: Option<u64>,
    /// The sharing policy (`max-min` or `rtt-weighted`).
    pub sharing: &'static str,
    /// Scatter only: the schedule's predicted finish time for one repetition on the nominal
    /// platform, seconds (the divisible-load model: no latency, no frame overhead).
    pub predicted_finish_s: Option<f64>,
    /// Timed changes applied.
    pub changes_applied: usize,
    /// Mayhem draws applied.
    pub mayhem_draws: u64,
    /// Failures injected (distinct nodes).
    pub failures: usize,
    /// One entry per repetition.
    pub repetitions: Vec<RepetitionReport>,
    /// One entry per node, by id.
    pub nodes: Vec<NodeReport>,
    /// Every link that carried bytes, in platform order, summed over the repetitions.
    pub links: Vec<LinkReport>,
    /// End of the last repetition, seconds.
    pub end_s: f64,
    /// Engine events, all repetitions.
    pub events: u64,
    /// Messages handed to the network, all repetitions.
    pub messages_sent: u64,
    /// Their encoded bytes.
    pub wire_bytes_sent: u64,
    /// Bytes handed to the applications, all repetitions.
    pub app_bytes_delivered: u64,
    /// Refused inputs and impossible outputs (`at_s` on the scenario clock), all repetitions.
    pub errors: Vec<String>,
    /// Multicast workloads: what each repetition measured (completion per node, throughput,
    /// WAN payload, fraction of the bound at the repetition's start); empty otherwise. For an
    /// auto workload, one for each repetition that ran a multicast, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub multicast: Vec<MulticastOutcome>,
    /// Sort workloads: each member's finish, records and bytes, and the check of the set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sort: Option<SortReport>,
    /// Auto workloads: the protocol the automatic choice picked for the first repetition and
    /// why (the same as `repetitions[0].auto`; each repetition's own choice is in its
    /// [`RepetitionReport::auto`]). `protocol`, `tree` and `segment_bytes` above are those of
    /// the kind the first repetition ran as (`broadcast` or `multicast`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoReport>,
}

/// What the automatic choice of an auto workload decided for one repetition, at its start,
/// from the view a perfect prober would have of the platform as the timeline has changed it
/// by then ([`crate::auto::choose_on`]; the first repetition's is the nominal platform with
/// the changes due at time 0).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoReport {
    /// The protocol chosen and run.
    pub chosen: Candidate,
    /// What decided: `latency` (the winner's start-up) or `bandwidth` (its stream); None when
    /// it was the only candidate planned.
    pub deciding_factor: Option<&'static str>,
    /// Every candidate's predicted run.
    pub predictions: Vec<Prediction>,
    /// Candidates that could not be planned, and why.
    pub unavailable: Vec<(Candidate, String)>,
    /// The choice explained, as `windrose send --explain` prints it.
    pub explain: String,
    /// The broadcast's segment, bytes.
    pub segment_bytes: u64,
    /// The multicasts' piece, bytes.
    pub piece_bytes: u32,
    /// The repetition's completion (its last node's finish), seconds after its start.
    pub completion_s: Option<f64>,
}

/// One repetition.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RepetitionReport {
    /// 0-based.
    pub index: u64,
    /// When it started, seconds.
    pub start_s: f64,
    /// When it ended (its last event), seconds.
    pub end_s: f64,
    /// From its start to its last node's finish, seconds (None when no node finished).
    pub makespan_s: Option<f64>,
    /// Nodes that finished.
    pub finished: usize,
    /// Nodes that aborted.
    pub aborted: usize,
    /// Nodes that failed.
    pub failed: usize,
    /// Nodes still waiting when it ended.
    pub unfinished: usize,
    /// `message_bytes / makespan_s`: the rate each receiver got (broadcast) or the load
    /// processed per second (scatter).
    pub throughput_bytes_s: Option<f64>,
    /// Bytes handed to the applications.
    pub app_bytes_delivered: u64,
    /// Engine events.
    pub events: u64,
    /// Auto workloads: the protocol the automatic choice picked at this repetition's start,
    /// from the platform as it was then, and why (None for the other workloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoReport>,
}

/// One node, over all repetitions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeReport {
    /// The node.
    pub node: NodeId,
    /// Its cluster.
    pub cluster: ClusterId,
    /// Its parent in the tree (None at the root).
    pub parent: Option<NodeId>,
    /// Its depth in the tree.
    pub depth: u32,
    /// Its outcome in each repetition.
    pub outcomes: Vec<NodeOutcome>,
    /// When it finished in each repetition, relative to the repetition's start, seconds.
    pub completion_s: Vec<Option<f64>>,
    /// Scatter: when it finished computing its share in each repetition, relative.
    pub compute_done_s: Vec<Option<f64>>,
    /// Scatter: its predicted finish (the schedule), seconds after the start.
    pub predicted_finish_s: Option<f64>,
    /// Bytes handed to its application, all repetitions.
    pub app_bytes_delivered: u64,
    /// Bytes it computed (scatter: the shares it kept), all repetitions.
    pub compute_bytes: u64,
    /// `app_bytes_delivered` over the summed relative completion times of the repetitions it
    /// finished (None when it finished none, or received nothing: the root of a broadcast).
    pub throughput_bytes_s: Option<f64>,
}

impl NodeReport {
    /// Mean completion time over the repetitions it finished, relative, seconds.
    pub fn mean_completion_s(&self) -> Option<f64> {
        let done: Vec<f64> = self.completion_s.iter().flatten().copied().collect();
        (!done.is_empty()).then(|| done.iter().sum::<f64>() / done.len() as f64)
    }

    /// Latest completion time over the repetitions it finished, relative, seconds.
    pub fn max_completion_s(&self) -> Option<f64> {
        self.completion_s
            .iter()
            .flatten()
            .copied()
            .fold(None, |m, x| Some(m.map_or(x, |m: f64| m.max(x))))
    }
}

/// One link, over all repetitions.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct LinkReport {
    /// The link.
    pub link: LinkRef,
    /// Its nominal capacity, bytes/s.
    pub nominal_bytes_s: f64,
    /// Bytes that crossed it.
    pub bytes: f64,
}

impl LinkReport {
    /// The link in the scenario files' notation (`wan:0:1`, `node_up:3`).
    pub fn name(&self) -> String {
        link_name(self.link.into())
    }
}

/// A link in the scenario files' notation.
pub fn link_name(link: LinkId) -> String {
    match link {
        LinkId::NodeUp(n) => format!("node_up:{n}"),
        LinkId::NodeDown(n) => format!("node_down:{n}"),
        LinkId::AccessUp(c) => format!("access_up:{c}"),
        LinkId::AccessDown(c) => format!("access_down:{c}"),
        LinkId::Wan { from, to } => format!("wan:{from}:{to}"),
    }
}

fn sharing_name(p: SharingPolicy) -> &'static str {
    match p {
        SharingPolicy::MaxMin => "max-min",
        SharingPolicy::RttWeighted => "rtt-weighted",
    }
}

/// Runs `scenario` with run seed `seed` (mayhem draws from it) and returns what it measured;
/// with `log`, writes the JSONL event log there (see [running a scenario](crate::scenario#running-a-scenario)).
///
/// Errors: the tree or schedule cannot be built ([`ScenarioError::Setup`]); the engine fails
/// or a run limit is reached ([`ScenarioError::Engine`]); writing the log fails.
pub fn run_scenario(
    scenario: &Scenario,
    seed: u64,
    log: Option<&mut dyn Write>,
) -> Result<Report, ScenarioError> {
    run_scenario_with(scenario, seed, log, &mut |_| {})
}

/// [`run_scenario`], calling `progress` between chunks of simulated time (for progress bars).
/// The chunks do not change the results.
pub fn run_scenario_with(
    scenario: &Scenario,
    seed: u64,
    log: Option<&mut dyn Write>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report, ScenarioError> {
    run_scenario_shared(scenario, seed, log, progress, None)
}

/// [`run_scenario_with`], with the data of a multicast workload given (so that a sweep over
/// one size hashes its manifest once; it must match `message_bytes` and `piece_bytes`). Other
/// workloads ignore `data`; without it a multicast multicasts zeros.
pub fn run_scenario_shared(
    scenario: &Scenario,
    seed: u64,
    log: Option<&mut dyn Write>,
    progress: &mut dyn FnMut(&Progress),
    data: Option<&SharedData>,
) -> Result<Report, ScenarioError> {
    match (scenario.workload.kind, scenario.workload.auto) {
        (WorkloadKind::Sort, _) => sort::run_sort(scenario, seed, log, progress),
        (WorkloadKind::Auto, Some(a)) => {
            run_repetitions(scenario, seed, log, progress, data, Planning::Auto(a))
        }
        _ => run_repetitions(
            scenario,
            seed,
            log,
            progress,
            data,
            Planning::Fixed(Box::new(fixed_plan(scenario)?)),
        ),
    }
}

/// What a repetition runs: the workload as it runs (an auto workload resolved to the
/// broadcast or multicast chosen), its tree, a scatter's schedule, a multicast's planned spec
/// (None: the protocol's own, from the repetition's platform), and an auto workload's choice
/// (its completion still unset).
#[derive(Clone)]
struct RepPlan<'a> {
    workload: Cow<'a, Workload>,
    tree: Option<Tree>,
    schedule: Option<Schedule>,
    spec: Option<MulticastSpec>,
    auto: Option<AutoReport>,
}

/// What one repetition's simulation is built with: the tree, a scatter's schedule, a
/// multicast's planned spec.
#[derive(Copy, Clone)]
struct Plans<'a> {
    tree: Option<&'a Tree>,
    schedule: Option<&'a Schedule>,
    spec: Option<&'a MulticastSpec>,
}

/// How the repetitions get their plans.
enum Planning<'a> {
    /// One plan for every repetition, built from the nominal platform.
    Fixed(Box<RepPlan<'a>>),
    /// The automatic choice, made anew at each repetition's start from its platform.
    Auto(AutoWorkload),
}

/// The plan of a broadcast, scatter or multicast workload: the tree and schedule from the
/// nominal platform.
fn fixed_plan(scenario: &Scenario) -> Result<RepPlan<'_>, ScenarioError> {
    let w = &scenario.workload;
    let tree = match w.kind {
        WorkloadKind::Multicast => None,
        _ => Some(scenario.tree()?),
    };
    let schedule = match (w.kind, &tree) {
        (WorkloadKind::Scatter, Some(tree)) => Some(scatter_schedule(scenario, tree)?),
        _ => None,
    };
    Ok(RepPlan {
        workload: Cow::Borrowed(w),
        tree,
        schedule,
        spec: None,
        auto: None,
    })
}

/// An auto workload's plan on `platform` (a repetition's, as the timeline has changed it by
/// its start: a perfect prober's view at that moment): the workload it runs as (a broadcast
/// over the planner's tree, or a MOB or Balanced multicast), what the choice planned on that
/// platform, and the choice.
fn auto_plan(
    w: &Workload,
    a: AutoWorkload,
    platform: &Platform,
) -> Result<RepPlan<'static>, ScenarioError> {
    let settings = AutoSettings {
        segment_bytes: w.segment_bytes,
        piece_bytes: a.piece_bytes,
        ..AutoSettings::default()
    };
    let (choice, tree) = choose_on(platform, w.root, w.message_bytes, &settings)
        .map_err(|e| ScenarioError::Setup(format!("the automatic choice failed: {e}")))?;
    let mut rw = w.clone();
    let mut plan_tree = None;
    let mut spec = None;
    let multicast = |protocol| MulticastWorkload {
        protocol,
        piece_bytes: a.piece_bytes,
        mob_variant: MobVariant::Windrose,
    };
    match choice.chosen {
        Candidate::Broadcast => {
            rw.kind = WorkloadKind::Broadcast;
            // The planner's tree, or the view's MST where the choice predicted it faster.
            rw.tree = match choice.planned_tree_s {
                Some(_) => TreeAlgorithm::Mst,
                None => TreeAlgorithm::BalancedPath,
            };
            plan_tree = Some(tree);
        }
        Candidate::Mob => {
            rw.kind = WorkloadKind::Multicast;
            rw.multicast = Some(multicast(MulticastProtocol::Mob));
        }
        Candidate::Balanced => {
            rw.kind = WorkloadKind::Multicast;
            rw.multicast = Some(multicast(MulticastProtocol::Balanced));
            let plan = choice.balanced.clone().ok_or_else(|| {
                ScenarioError::Setup(
                    "the choice picked Balanced Multicasting without a plan".into(),
                )
            })?;
            spec = Some(MulticastSpec::Trees {
                plan: std::sync::Arc::new(plan),
                config: TreeMulticastConfig::with_shape(true),
            });
        }
    }
    if rw.kind == WorkloadKind::Multicast {
        rw.segment_bytes = rw.message_bytes;
    }
    rw.auto = None;
    let report = AutoReport {
        chosen: choice.chosen,
        deciding_factor: choice.deciding_factor().map(|(f, _)| f),
        predictions: choice.predictions.clone(),
        unavailable: choice.unavailable.clone(),
        explain: choice.explain(),
        segment_bytes: settings.segment_bytes,
        piece_bytes: settings.piece_bytes,
        completion_s: None,
    };
    Ok(RepPlan {
        workload: Cow::Owned(rw),
        tree: plan_tree,
        schedule: None,
        spec,
        auto: Some(report),
    })
}

/// Runs the repetitions of a broadcast, scatter, multicast or auto workload, each with the
/// plan `planning` gives it.
fn run_repetitions(
    scenario: &Scenario,
    seed: u64,
    mut log: Option<&mut dyn Write>,
    progress: &mut dyn FnMut(&Progress),
    data: Option<&SharedData>,
    planning: Planning<'_>,
) -> Result<Report, ScenarioError> {
    let w = &scenario.workload;
    let nominal = &scenario.platform;
    // Without data given, a multicast multicasts zeros: built once, at the first repetition
    // that multicasts.
    let mut zeros: Option<SharedData> = None;
    // An auto workload's plan, and the count of timeline changes (and mayhem draws) applied
    // when it was made: the choice is made again only when the platform may have changed.
    let mut auto_cache: Option<((usize, u64), RepPlan<'static>)> = None;
    // The first repetition's plan: the report's tree, schedule, kind and segment.
    let mut first: Option<RepPlan<'_>> = None;
    let mut outcomes = Vec::new();
    let mut timeline = Timeline::new(scenario, seed);
    let mut platform = nominal.clone();
    let mut dead = vec![false; nominal.node_count()];
    // A node that joins late is absent until then (unless it failed before: then its join
    // is a restart).
    for j in &scenario.joins {
        if !scenario.restarts(j.node) {
            dead[j.node.index()] = true;
        }
    }
    let mut stats = RunStats::default();
    let pipe = LogPipe::default();
    let mut reps = Vec::new();
    let mut per_rep: Vec<Metrics> = Vec::new();
    let mut link_bytes = vec![0.0f64; nominal.link_count()];
    let mut errors = Vec::new();
    let mut events_total = 0u64;
    let mut start = 0.0f64;

    for rep in 0..w.repetitions {
        // Everything up to the start applies before the repetition begins.
        while let Some(t) = timeline.next_time() {
            if t > start {
                break;
            }
            for item in timeline.pop(t)? {
                apply_now(&mut platform, &mut dead, &item, &mut stats)?;
                pipe.write_own(&mut log, &own_line(t, &item))?;
            }
        }
        let plan: &RepPlan<'_> = match &planning {
            Planning::Fixed(p) => p,
            Planning::Auto(a) => {
                let weather = (stats.changes, stats.draws);
                if auto_cache.as_ref().map(|c| c.0) != Some(weather) {
                    auto_cache = Some((weather, auto_plan(w, *a, &platform)?));
                }
                &auto_cache.as_ref().expect("planned above").1
            }
        };
        let pw: &Workload = &plan.workload;
        let data = match (pw.multicast, data) {
            (None, _) => None,
            (Some(m), Some(d)) => {
                if d.len() != pw.message_bytes || d.manifest.piece_len() != m.piece_bytes {
                    return Err(ScenarioError::Setup(format!(
                        "the data given ({} bytes in pieces of {}) is not the workload's ({} bytes in pieces of {})",
                        d.len(),
                        d.manifest.piece_len(),
                        pw.message_bytes,
                        m.piece_bytes
                    )));
                }
                Some(d)
            }
            (Some(m), None) => {
                if zeros.is_none() {
                    zeros = Some(SharedData::zeros(pw.message_bytes, m.piece_bytes).map_err(
                        |e| {
                            ScenarioError::Setup(format!(
                                "cannot build the multicast's manifest: {e}"
                            ))
                        },
                    )?);
                }
                zeros.as_ref()
            }
        };
        pipe.write_own(
            &mut log,
            &serde_json::json!({"t": start, "ev": "repetition", "repetition": rep}),
        )?;
        let plans = Plans {
            tree: plan.tree.as_ref(),
            schedule: plan.schedule.as_ref(),
            spec: plan.spec.as_ref(),
        };
        let (mut sim, probe) = build_sim(pw, &platform, plans, data, seed, rep)?;
        if log.is_some() {
            sim.set_event_log(Box::new(pipe.0.clone()));
        }
        for (i, _) in dead.iter().enumerate().filter(|(_, d)| **d) {
            sim.fail_node_at(NodeId::from(i), 0.0).map_err(engine_err)?;
        }
        let participants = sim.node_ids().len();
        // How a node that joins during this repetition gets its machine.
        // Returns the pieces the node keeps.
        let joiner = |sim: &mut Simulation, n: NodeId, at: f64| -> Result<u32, ScenarioError> {
            let fail = |e: String| ScenarioError::Setup(format!("node {n} cannot join: {e}"));
            if let Some(probe) = &probe {
                // A restarted node keeps what a real one finds on disk: every verified piece it
                // had stored before it failed, each at its place in the partial file.
                let held = match (scenario.restarts(n), data) {
                    (true, Some(d)) => probe
                        .stored_pieces(n)
                        .into_iter()
                        .map(|i| (i, d.manifest.slice(&d.data, i)))
                        .collect(),
                    _ => Vec::new(),
                };
                let kept = held.len() as u32;
                return probe
                    .restart_at(sim, n, at, held)
                    .map(|()| kept)
                    .map_err(|e| fail(e.to_string()));
            }
            let tree = plan.tree.as_ref().ok_or_else(|| fail("no tree".into()))?;
            let transfer = TransferId(u32::try_from(rep + 1).unwrap_or(u32::MAX));
            let cfg = BroadcastConfig::new(transfer, pw.segment_bytes);
            let m = TreeBroadcast::rejoin(n, tree, cfg).map_err(|e| fail(e.to_string()))?;
            sim.restart_node_at(Box::new(m), at)
                .map(|()| 0)
                .map_err(|e| fail(e.to_string()))
        };
        let mut step_s = 1e-3;
        loop {
            // Run up to the next timeline item (exclusive), in chunks for progress.
            let next_item = timeline.next_time().map(|t| t - start);
            let events_before = sim.events();
            let chunk_end = sim.now() + step_s;
            let (target, at_item) = match next_item {
                Some(r) if r <= chunk_end => (just_below(r), true),
                _ => (chunk_end, false),
            };
            let state = sim.run_until(target).map_err(engine_err)?;
            pipe.drain(&mut log, start)?;
            // Not `sim.metrics()`: it clones every node's record, O(N) allocations per chunk.
            progress(&Progress {
                repetition: rep,
                repetitions: w.repetitions,
                time_s: start + sim.now(),
                nodes_ended: sim.ended_count(),
                nodes: participants,
                events: events_total + sim.events(),
            });
            if state == RunState::Idle {
                break;
            }
            if at_item {
                let t = timeline.next_time().expect("an item is due");
                for item in timeline.pop(t)? {
                    pipe.write_own(&mut log, &own_line(t, &item))?;
                    let kept = schedule_item(
                        &mut sim,
                        &joiner,
                        &mut platform,
                        &mut dead,
                        t - start,
                        &item,
                        &mut stats,
                    )?;
                    if let (Item::Join(n), Some(kept)) = (&item, kept) {
                        pipe.write_own(
                            &mut log,
                            &serde_json::json!({"t": t, "ev": "rejoin", "node": n.0, "kept_pieces": kept}),
                        )?;
                    }
                }
            } else {
                let done = (sim.events() - events_before) as f64;
                step_s *= if done == 0.0 {
                    4.0
                } else {
                    (EVENTS_PER_CHUNK / done).clamp(0.5, 4.0)
                };
            }
        }
        sim.take_event_log().map_err(engine_err)?;
        pipe.drain(&mut log, start)?;
        let m = sim.metrics();
        if let Some(probe) = &probe {
            outcomes.push(probe.outcome(&m, None));
        }
        for l in &m.links {
            link_bytes[nominal.link_index(l.link.into())] += l.bytes;
        }
        for e in &m.errors {
            errors.push(format!(
                "at {} s, node {}: {}",
                start + e.at_s,
                e.node,
                e.error
            ));
        }
        for n in &m.nodes {
            if n.outcome == NodeOutcome::Failed {
                dead[n.node.index()] = true;
            }
        }
        events_total += m.events;
        let end = start + m.end_time_s;
        reps.push(RepetitionReport {
            index: rep,
            start_s: start,
            end_s: end,
            makespan_s: m.makespan_s,
            finished: m.finished,
            aborted: m.aborted,
            failed: m.failed,
            unfinished: m.unfinished,
            throughput_bytes_s: m
                .makespan_s
                .filter(|&x| x > 0.0)
                .map(|x| w.message_bytes as f64 / x),
            app_bytes_delivered: m.totals.app_bytes_delivered,
            events: m.events,
            auto: plan.auto.clone().map(|a| AutoReport {
                completion_s: m.makespan_s,
                ..a
            }),
        });
        per_rep.push(m);
        start = end;
        if rep == 0 {
            first = Some(plan.clone());
        }
    }
    if let Some(l) = log.as_mut() {
        l.flush().map_err(log_err)?;
    }

    // Repetitions are at least 1 (the parser's bound).
    let first =
        first.ok_or_else(|| ScenarioError::Setup("a workload runs at least once".into()))?;
    let w: &Workload = &first.workload;
    let nodes = node_reports(
        scenario,
        first.tree.as_ref(),
        first.schedule.as_ref(),
        &per_rep,
    );
    let links = link_bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b > 0.0)
        .map(|(i, &bytes)| {
            let link = nominal.link_at(i);
            LinkReport {
                link: link.into(),
                nominal_bytes_s: nominal.capacity_bytes_s(link),
                bytes,
            }
        })
        .collect();
    Ok(Report {
        scenario: scenario.name.clone(),
        seed,
        protocol: w.kind,
        tree: w.tree,
        tree_costs: w.tree_costs,
        root: w.root,
        node_count: nominal.node_count(),
        cluster_count: nominal.cluster_count(),
        message_bytes: w.message_bytes,
        segment_bytes: (w.kind == WorkloadKind::Broadcast).then_some(w.segment_bytes),
        sharing: sharing_name(w.sharing),
        predicted_finish_s: first.schedule.as_ref().map(|s| s.predicted_finish_s),
        changes_applied: stats.changes,
        mayhem_draws: stats.draws,
        failures: dead.iter().filter(|d| **d).count(),
        end_s: start,
        events: events_total,
        messages_sent: per_rep.iter().map(|m| m.totals.messages_sent).sum(),
        wire_bytes_sent: per_rep.iter().map(|m| m.totals.wire_bytes_sent).sum(),
        app_bytes_delivered: per_rep.iter().map(|m| m.totals.app_bytes_delivered).sum(),
        nodes,
        links,
        errors,
        multicast: outcomes,
        sort: None,
        auto: reps.first().and_then(|r| r.auto.clone()),
        repetitions: reps,
    })
}

/// The largest `f64` below `t` (for `t > 0`; 0 stays 0), so that a run stops just before an
/// item due at `t` and the item is in place before anything at `t` happens.
fn just_below(t: f64) -> f64 {
    if t > 0.0 {
        f64::from_bits(t.to_bits() - 1)
    } else {
        0.0
    }
}

fn engine_err(e: SimError) -> ScenarioError {
    ScenarioError::Engine(e.to_string())
}

fn log_err(e: io::Error) -> ScenarioError {
    ScenarioError::Engine(format!("writing the event log: {e}"))
}

/// The divisible-load schedule of a scatter: node `n` needs `message_bytes / compute_bytes_s[n]`
/// seconds for the whole load, the link `p → c` `message_bytes / bottleneck(p → c)` (the
/// smallest capacity on the route, nominal platform); children in the optimal order.
fn scatter_schedule(scenario: &Scenario, tree: &Tree) -> Result<Schedule, ScenarioError> {
    let w = &scenario.workload;
    let p = &scenario.platform;
    let load = w.message_bytes.max(1) as f64;
    let compute_s: Vec<f64> = w.compute_bytes_s.iter().map(|s| load / s).collect();
    dlt::schedule_with_links(
        tree,
        &compute_s,
        |a, b| {
            let bottleneck = p
                .route(a, b)
                .links()
                .iter()
                .map(|&l| p.capacity_bytes_s(l))
                .fold(f64::INFINITY, f64::min);
            load / bottleneck
        },
        OrderPolicy::Optimal,
    )
    .map_err(|e| ScenarioError::Setup(format!("cannot build the divisible-load schedule: {e}")))
}

/// The simulation of one repetition of `w` (the workload as it runs: an auto workload
/// resolved) on `platform` (as the timeline has changed it by then): a multicast also gets its
/// [`Probe`], and Balanced Multicasting without a planned spec plans from `platform`.
fn build_sim(
    w: &Workload,
    platform: &Platform,
    plans: Plans<'_>,
    data: Option<&SharedData>,
    seed: u64,
    rep: u64,
) -> Result<(Simulation, Option<Probe>), ScenarioError> {
    let Plans {
        tree,
        schedule,
        spec: planned,
    } = plans;
    let config = SimConfig::with_policy(w.sharing);
    let transfer = TransferId(u32::try_from(rep + 1).unwrap_or(u32::MAX));
    if let (Some(m), Some(data)) = (w.multicast, data) {
        let setup = |e: multicast::MulticastError| {
            ScenarioError::Setup(format!("cannot set up the {} multicast: {e}", m.protocol))
        };
        let mut spec = match planned {
            Some(s) => s.clone(),
            None => multicast::spec_for(m.protocol, platform, w.root).map_err(setup)?,
        };
        if let windrose_proto::multicast::MulticastSpec::Mob(c) = &mut spec {
            *c = m.mob_variant.config();
        }
        // Each repetition is a run of its own: its own node generators.
        let run_seed = seed.wrapping_add(rep);
        let (mut sim, probe) =
            multicast::prepare(platform, w.root, data, &spec, run_seed, transfer, config)
                .map_err(setup)?;
        set_speeds(&mut sim, &w.compute_bytes_s).map_err(engine_err)?;
        return Ok((sim, Some(probe)));
    }
    let tree = tree.ok_or_else(|| ScenarioError::Setup("the workload has no tree".into()))?;
    let payload = Payload::Zeros(w.message_bytes);
    match (w.kind, schedule) {
        (WorkloadKind::Scatter, Some(s)) => {
            let mut cfg = ScatterConfig::new(transfer);
            cfg.send_mode = match w.send_mode {
                ScatterSends::Sequential => SendMode::Sequential,
                ScatterSends::Parallel => SendMode::Parallel,
            };
            engine::scatter_with(
                platform.clone(),
                s,
                payload,
                cfg,
                &w.compute_bytes_s,
                config,
            )
        }
        _ => {
            let cfg = BroadcastConfig::new(transfer, w.segment_bytes);
            engine::broadcast_with(platform.clone(), tree, payload, cfg, config).and_then(
                |mut sim| {
                    set_speeds(&mut sim, &w.compute_bytes_s)?;
                    Ok(sim)
                },
            )
        }
    }
    .map(|sim| (sim, None))
    .map_err(|e| ScenarioError::Setup(format!("cannot set up the simulation: {e}")))
}

/// Charges every node's `Output::Compute` at its speed (bytes/s; infinite: instant), for every
/// workload (a scatter's machines get theirs from [`engine::scatter_with`]).
fn set_speeds(sim: &mut Simulation, bytes_s: &[f64]) -> Result<(), SimError> {
    for (i, &speed) in bytes_s.iter().enumerate() {
        if speed.is_finite() {
            sim.set_compute(NodeId::from(i), engine::ComputeModel::BytesPerSecond(speed))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Timeline

#[derive(Clone, Debug)]
enum Item {
    Draw { k: u64, changes: Vec<Change> },
    Change(Change),
    Fail(NodeId),
    Join(NodeId),
}

#[derive(Default)]
struct RunStats {
    changes: usize,
    draws: u64,
}

struct Timeline {
    /// `[[change]]` entries then failures, stably sorted by time.
    fixed: Vec<(f64, Item)>,
    next_fixed: usize,
    mayhem: Option<MayhemState>,
}

struct MayhemState {
    mayhem: Mayhem,
    rng: ChaCha8Rng,
    links: Vec<LinkId>,
    nominal: Platform,
    next_k: u64,
    /// Link changes drawn so far, bounded by [`MAX_MAYHEM_CHANGES`].
    drawn: u64,
    /// The scenario file, for the error when the bound is reached.
    source: std::path::PathBuf,
}

impl Timeline {
    fn new(s: &Scenario, seed: u64) -> Timeline {
        let mut fixed: Vec<(f64, Item)> = s
            .changes
            .iter()
            .map(|c| (c.at_s, Item::Change(c.change)))
            .chain(s.failures.iter().map(|f| (f.at_s, Item::Fail(f.node))))
            .chain(s.joins.iter().map(|j| (j.at_s, Item::Join(j.node))))
            .collect();
        // Stable: at one instant, changes in file order, then failures, then joins.
        fixed.sort_by(|a, b| a.0.total_cmp(&b.0));
        Timeline {
            fixed,
            next_fixed: 0,
            mayhem: s.mayhem.map(|m| MayhemState {
                rng: Mayhem::rng(seed),
                links: m.selected_links(&s.platform),
                nominal: s.platform.clone(),
                mayhem: m,
                next_k: 0,
                drawn: 0,
                source: s.source.clone(),
            }),
        }
    }

    fn next_mayhem(&self) -> Option<f64> {
        let m = self.mayhem.as_ref()?;
        m.mayhem.draw_time(m.next_k)
    }

    fn next_time(&self) -> Option<f64> {
        let f = self.fixed.get(self.next_fixed).map(|x| x.0);
        match (f, self.next_mayhem()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every item due at `t` (the next time), mayhem first.
    ///
    /// Errors: mayhem would pass [`MAX_MAYHEM_CHANGES`] (a period far below the run's length).
    fn pop(&mut self, t: f64) -> Result<Vec<Item>, ScenarioError> {
        let mut out = Vec::new();
        if self.next_mayhem() == Some(t) {
            let m = self.mayhem.as_mut().expect("mayhem is due");
            m.drawn += m.links.len() as u64;
            if m.drawn > MAX_MAYHEM_CHANGES {
                return Err(ScenarioError::File {
                    path: m.source.clone(),
                    line: 0,
                    column: 0,
                    message: format!(
                        "`mayhem.period_s` = {} redraws {} links every period: {} draws by \
                         t = {} s, and the run goes on; a run may apply at most \
                         {MAX_MAYHEM_CHANGES} link changes: make the period longer or set \
                         `mayhem.until_s`",
                        compact(m.mayhem.period_s),
                        m.links.len(),
                        m.next_k,
                        compact(t)
                    ),
                });
            }
            let changes = m.mayhem.draw(&mut m.rng, &m.nominal, &m.links);
            out.push(Item::Draw {
                k: m.next_k,
                changes,
            });
            m.next_k += 1;
        }
        while let Some((at, item)) = self.fixed.get(self.next_fixed) {
            if *at != t {
                break;
            }
            out.push(item.clone());
            self.next_fixed += 1;
        }
        Ok(out)
    }
}

fn apply_change(platform: &mut Platform, c: &Change) -> Result<(), ScenarioError> {
    match *c {
        Change::Capacity { link, bytes_s } => platform.set_capacity(link, bytes_s),
        Change::IntraLatency { cluster, latency_s } => {
            platform.set_intra_latency(cluster, latency_s)
        }
        Change::WanLatency {
            from,
            to,
            latency_s,
        } => platform.set_wan_latency(from, to, latency_s),
        Change::PairLatency {
            from,
            to,
            latency_s,
        } => platform.set_pair_latency(from, to, latency_s),
    }
    .map_err(|e| ScenarioError::Setup(format!("cannot apply a change: {e}")))
}

/// Applies an item to the platform before a repetition starts.
fn apply_now(
    platform: &mut Platform,
    dead: &mut [bool],
    item: &Item,
    stats: &mut RunStats,
) -> Result<(), ScenarioError> {
    match item {
        Item::Draw { changes, .. } => {
            stats.draws += 1;
            for c in changes {
                apply_change(platform, c)?;
            }
        }
        Item::Change(c) => {
            stats.changes += 1;
            apply_change(platform, c)?;
        }
        Item::Fail(n) => dead[n.index()] = true,
        Item::Join(n) => dead[n.index()] = false,
    }
    Ok(())
}

/// Hands an item to a running repetition at relative time `rel` (and keeps `platform`, the
/// platform the next repetition starts from, in step). For a node that comes back, returns the
/// pieces it keeps.
fn schedule_item(
    sim: &mut Simulation,
    join: &dyn Fn(&mut Simulation, NodeId, f64) -> Result<u32, ScenarioError>,
    platform: &mut Platform,
    dead: &mut [bool],
    rel: f64,
    item: &Item,
    stats: &mut RunStats,
) -> Result<Option<u32>, ScenarioError> {
    let rel = rel.max(sim.now());
    match item {
        Item::Draw { changes, .. } => {
            stats.draws += 1;
            for c in changes {
                apply_change(platform, c)?;
                sim.schedule_change(rel, *c).map_err(engine_err)?;
            }
        }
        Item::Change(c) => {
            stats.changes += 1;
            apply_change(platform, c)?;
            sim.schedule_change(rel, *c).map_err(engine_err)?;
        }
        Item::Fail(n) => {
            dead[n.index()] = true;
            sim.fail_node_at(*n, rel).map_err(engine_err)?;
        }
        Item::Join(n) => {
            // It was absent (failed at the repetition's start, or at its `[[fail]]`) and
            // comes back.
            if dead[n.index()] {
                dead[n.index()] = false;
                return join(sim, *n, rel).map(Some);
            }
        }
    }
    Ok(None)
}

/// Our own log line for a timeline item.
fn own_line(t: f64, item: &Item) -> serde_json::Value {
    match item {
        Item::Draw { k, changes } => {
            serde_json::json!({"t": t, "ev": "mayhem", "draw": k, "links": changes.len()})
        }
        Item::Change(c) => match *c {
            Change::Capacity { link, bytes_s } => serde_json::json!({
                "t": t, "ev": "change", "link": link_name(link), "bytes_s": bytes_s
            }),
            Change::IntraLatency { cluster, latency_s } => serde_json::json!({
                "t": t, "ev": "change", "link": format!("intra:{cluster}"), "latency_s": latency_s
            }),
            Change::WanLatency {
                from,
                to,
                latency_s,
            } => serde_json::json!({
                "t": t, "ev": "change", "link": format!("wan:{from}:{to}"), "latency_s": latency_s
            }),
            Change::PairLatency {
                from,
                to,
                latency_s,
            } => serde_json::json!({
                "t": t, "ev": "change", "link": format!("pair:{from}:{to}"), "latency_s": latency_s
            }),
        },
        Item::Fail(n) => serde_json::json!({"t": t, "ev": "fail_scheduled", "node": n.0}),
        Item::Join(n) => serde_json::json!({"t": t, "ev": "join_scheduled", "node": n.0}),
    }
}

// ---------------------------------------------------------------------------------------------
// Event log

/// The engine writes its log here; the runner moves complete lines to the caller's writer,
/// shifting their `t` onto the scenario's clock.
#[derive(Clone, Default)]
struct LogPipe(MemoryLog);

impl LogPipe {
    /// Moves the complete lines written so far to `out`, adding `offset` to their `t`.
    fn drain(&self, out: &mut Option<&mut dyn Write>, offset: f64) -> Result<(), ScenarioError> {
        let Some(out) = out.as_mut() else {
            return Ok(());
        };
        let lines = self.0.take_complete_lines().map_err(log_err)?;
        if offset == 0.0 {
            return out.write_all(&lines).map_err(log_err);
        }
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            out.write_all(&shift_t(line, offset)).map_err(log_err)?;
            out.write_all(b"\n").map_err(log_err)?;
        }
        Ok(())
    }

    /// Writes one of our own lines (after draining the engine's, to keep time order).
    fn write_own(
        &self,
        out: &mut Option<&mut dyn Write>,
        line: &serde_json::Value,
    ) -> Result<(), ScenarioError> {
        if out.is_none() {
            return Ok(());
        }
        let mut text = serde_json::to_vec(line)
            .map_err(|e| ScenarioError::Engine(format!("event log: {e}")))?;
        text.push(b'\n');
        if let Some(o) = out.as_mut() {
            o.write_all(&text).map_err(log_err)?;
        }
        Ok(())
    }
}

/// `{"t":X,…}` → `{"t":X+offset,…}`; other lines unchanged.
fn shift_t(line: &[u8], offset: f64) -> Vec<u8> {
    const PREFIX: &[u8] = b"{\"t\":";
    if let Some(rest) = line.strip_prefix(PREFIX) {
        let end = rest
            .iter()
            .position(|&b| b == b',' || b == b'}')
            .unwrap_or(rest.len());
        if let Some(t) = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
        {
            let shifted = serde_json::to_string(&(t + offset)).unwrap_or_default();
            let mut out = Vec::with_capacity(line.len() + 8);
            out.extend_from_slice(PREFIX);
            out.extend_from_slice(shifted.as_bytes());
            out.extend_from_slice(&rest[end..]);
            return out;
        }
    }
    line.to_vec()
}

// ---------------------------------------------------------------------------------------------
// Per-node report

fn node_reports(
    scenario: &Scenario,
    tree: Option<&Tree>,
    schedule: Option<&Schedule>,
    per_rep: &[Metrics],
) -> Vec<NodeReport> {
    let p = &scenario.platform;
    (0..p.node_count())
        .map(|i| {
            let node = NodeId::from(i);
            let recs: Vec<_> = per_rep.iter().map(|m| m.node(node)).collect();
            let outcomes = recs
                .iter()
                .map(|r| r.map_or(NodeOutcome::NotStarted, |r| r.outcome))
                .collect();
            // Each repetition's simulation starts at 0: its times are relative already.
            let completion_s: Vec<Option<f64>> = recs
                .iter()
                .map(|r| r.and_then(|r| r.finished_at_s))
                .collect();
            let compute_done_s = recs
                .iter()
                .map(|r| r.and_then(|r| r.compute_done_at_s))
                .collect();
            let app_bytes_delivered: u64 =
                recs.iter().flatten().map(|r| r.app_bytes_delivered).sum();
            let compute_bytes: u64 = recs.iter().flatten().map(|r| r.compute_bytes).sum();
            let busy: f64 = completion_s.iter().flatten().sum();
            NodeReport {
                node,
                cluster: p.cluster_of(node),
                parent: tree.and_then(|t| t.parent(node)),
                depth: tree.map_or(0, |t| t.depth(node)),
                outcomes,
                completion_s,
                compute_done_s,
                predicted_finish_s: schedule
                    .and_then(|s| s.node(node))
                    .map(|s| s.predicted_finish_s),
                app_bytes_delivered,
                compute_bytes,
                throughput_bytes_s: (busy > 0.0 && app_bytes_delivered > 0)
                    .then(|| app_bytes_delivered as f64 / busy),
            }
        })
        .collect()
}

impl Report {
    /// The nodes that finished every repetition.
    pub fn all_finished(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.outcomes.iter().all(|o| *o == NodeOutcome::Finished))
    }

    /// A summary: what ran and how long it took (multicasts: one more line per repetition
    /// with the completion, throughput, WAN payload and fraction of the bound). An auto
    /// workload adds what it chose, and one line for each repetition whose choice differs
    /// from the one before it.
    pub fn summary(&self) -> String {
        let mut s = self.what();
        let why = |a: &AutoReport| {
            a.deciding_factor
                .map(|f| format!(" ({f} decides at this size)"))
                .unwrap_or_default()
        };
        if let Some(a) = &self.auto {
            s.push_str(&format!("\nauto chose {}{}", a.chosen, why(a)));
        }
        let mut before = self.auto.as_ref().map(|a| a.chosen);
        for r in &self.repetitions {
            let Some(a) = &r.auto else { continue };
            if before.is_some_and(|b| b != a.chosen) {
                s.push_str(&format!(
                    "\nrepetition {} (from {:.6} s): auto chose {}{} on the platform as it was then",
                    r.index,
                    r.start_s,
                    a.chosen,
                    why(a)
                ));
            }
            before = Some(a.chosen);
        }
        s
    }

    fn what(&self) -> String {
        if let Some(s) = &self.sort {
            let how = match (s.slicing, s.backups, s.torus) {
                (Some(slicing), Some(b), Some((r, c))) => format!(
                    " ({slicing} slicing, {b} backup cop{}, {r} x {c} torus)",
                    if b == 1 { "y" } else { "ies" }
                ),
                _ => String::new(),
            };
            return format!(
                "{}: {}{how} of {} records ({}, record seed {}, {} keys) started by {} ({} nodes, {} clusters), {} sharing, seed {}",
                self.scenario,
                s.protocol,
                s.check.records_in,
                format_size(self.message_bytes),
                s.record_seed,
                s.keys,
                self.root,
                self.node_count,
                self.cluster_count,
                self.sharing,
                self.seed
            );
        }
        if let (Some(m), WorkloadKind::Multicast) = (self.multicast.first(), self.protocol) {
            let mut s = format!(
                "{}: {} multicast of {} in {} pieces from {} ({} nodes, {} clusters), {} repetition(s), {} sharing, seed {}",
                self.scenario,
                m.protocol,
                format_size(self.message_bytes),
                format_size(u64::from(m.piece_bytes)),
                self.root,
                self.node_count,
                self.cluster_count,
                self.repetitions.len(),
                self.sharing,
                self.seed
            );
            s.push_str(&self.multicast_lines());
            return s;
        }
        let seg = self
            .segment_bytes
            .map(|s| format!(" in {} segments", format_size(s)))
            .unwrap_or_default();
        let mut s = format!(
            "{}: {} of {}{seg} over a {} tree rooted at {} ({} nodes, {} clusters), {} repetition(s), {} sharing, seed {}",
            self.scenario,
            self.protocol.name(),
            format_size(self.message_bytes),
            self.tree,
            self.root,
            self.node_count,
            self.cluster_count,
            self.repetitions.len(),
            self.sharing,
            self.seed
        );
        // An auto workload that broadcast first may have multicast later.
        s.push_str(&self.multicast_lines());
        s
    }

    /// One line per multicast outcome, `\nrepetition i: …` (an auto workload has an outcome
    /// for each repetition that multicast, in order).
    fn multicast_lines(&self) -> String {
        let multicast_reps = self.repetitions.iter().filter(|r| {
            r.auto
                .as_ref()
                .is_none_or(|a| a.chosen != Candidate::Broadcast)
        });
        multicast_reps
            .zip(&self.multicast)
            .map(|(r, m)| format!("\nrepetition {}: {}", r.index, m.summary()))
            .collect()
    }
}
