//! Running a `kind = "sort"` workload: one Host per node (the session, the sort's machine and
//! the application that holds the node's records), the sort started by `workload.root`, every
//! member asked to leave once the sort is over; then each member's finish, records and bytes,
//! and the check of the whole set. See [sort workloads](crate::scenario#sort-workloads).

use super::{
    apply_now, engine_err, just_below, log_err, node_reports, own_line, schedule_item, set_speeds,
    sharing_name, LinkReport, LogPipe, Progress, RepetitionReport, Report, RunStats, Timeline,
    EVENTS_PER_CHUNK,
};
use crate::engine::{RunState, SimConfig, Simulation};
use crate::group::{group, leave_input, start_input};
use crate::metrics::{Metrics, NodeOutcome};
use crate::scenario::{Scenario, ScenarioError, SortProtocol, SortWorkload};
use bytes::Bytes;
use serde::Serialize;
use std::io::Write;
use std::sync::Arc;
use windrose_model::records::{RecordGenerator, RecordSummary, RECORD_LEN};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::app::{Application, Blake3App};
use windrose_proto::collective::{CollectiveSpec, Delivers};
use windrose_proto::pieces::PieceVerifier;
use windrose_proto::{ComputeTask, Report as HostReport, TransferId};

/// The longest chunk of simulated time between two looks at whether the sort is over,
/// seconds (the Hosts heartbeat every second: a few events per chunk).
const MAX_STEP_BEFORE_LEAVING_S: f64 = 0.05;

/// What a sort workload measured: see [`Report::sort`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SortReport {
    /// `heterosort` or `sample-sort`.
    pub protocol: SortProtocol,
    /// HeteroSort's slicing (`speed`, `equal`, `splitters`; None for the sample sort).
    pub slicing: Option<&'static str>,
    /// HeteroSort's backup copies (None for the sample sort).
    pub backups: Option<u32>,
    /// HeteroSort's torus, rows x cols (None for the sample sort).
    pub torus: Option<(u32, u32)>,
    /// The records' seed.
    pub record_seed: u64,
    /// How the keys were drawn.
    pub keys: String,
    /// When the initiator saw the sort complete, seconds (None: it did not).
    pub complete_s: Option<f64>,
    /// Members the initiator counted finished.
    pub finished: u32,
    /// Members it counted aborted, failed or refusing.
    pub failed: u32,
    /// The latest member finish, seconds.
    pub max_finish_s: Option<f64>,
    /// The mean member finish over the members that finished, seconds.
    pub mean_finish_s: Option<f64>,
    /// One entry per member, by node id.
    pub members: Vec<SortMember>,
    /// The check of the whole set.
    pub check: SortCheck,
}

/// One member of a sort.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SortMember {
    /// The node.
    pub node: NodeId,
    /// Its cluster.
    pub cluster: ClusterId,
    /// Its compute speed, bytes/s.
    pub compute_bytes_s: f64,
    /// Records it held at the start.
    pub records_in: u64,
    /// Records it held at the end (its delivered range; 0 when it delivered none).
    pub records_held: u64,
    /// Encoded bytes it handed to the network (every message: session, samples, records,
    /// copies).
    pub bytes_sent: u64,
    /// When its sort ended, seconds (None: it never ended it).
    pub finish_s: Option<f64>,
    /// `finished`, `aborted`, `failed` (killed), `refused` or `unfinished`.
    pub outcome: &'static str,
}

/// The check of a sort's output against its input: the members' ranges, in id order (snake
/// order for HeteroSort, rank order for the sample sort), hold exactly the input's records,
/// globally sorted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SortCheck {
    /// Records generated.
    pub records_in: u64,
    /// Records the members held at the end.
    pub records_out: u64,
    /// The input's order-independent checksum (32 hex digits).
    pub checksum_in: String,
    /// The output's.
    pub checksum_out: String,
    /// Every record's key no lower than the one before it, across the ranges in id order.
    pub sorted: bool,
    /// Same count and checksum: no record lost or duplicated.
    pub complete: bool,
    /// Both.
    pub ok: bool,
}

impl SortReport {
    /// One line: the check and the finish times.
    pub fn summary(&self) -> String {
        let c = &self.check;
        format!(
            "{} {} records: {}; {} -> {} records, checksum {}, {}; max finish {}, mean {}",
            if c.ok {
                "check passed:"
            } else {
                "CHECK FAILED:"
            },
            c.records_in,
            if c.sorted {
                "globally sorted"
            } else {
                "NOT sorted"
            },
            c.records_in,
            c.records_out,
            if c.checksum_in == c.checksum_out {
                "equal"
            } else {
                "DIFFERENT"
            },
            if c.complete {
                "nothing lost or duplicated"
            } else {
                "records LOST or DUPLICATED"
            },
            self.max_finish_s
                .map_or_else(|| "-".into(), |t| format!("{t:.6} s")),
            self.mean_finish_s
                .map_or_else(|| "-".into(), |t| format!("{t:.6} s")),
        )
    }
}

/// A sort member's application in the simulator: its records are its local input of a sort,
/// BLAKE3 does everything else.
#[derive(Debug)]
pub struct SortRecords(pub Bytes);

impl Application for SortRecords {
    fn compute(&self, task: &ComputeTask) -> String {
        Blake3App.compute(task)
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Blake3App.verifier()
    }

    fn local_input(&self, _: TransferId, spec: &CollectiveSpec) -> Bytes {
        match spec.descriptor().delivers {
            Delivers::SortedRange => self.0.clone(),
            _ => Bytes::new(),
        }
    }
}

/// Every node's records: one generator of `seed` filling node 0's, then node 1's, ...
pub fn generate_records(sort: &SortWorkload, seed: u64) -> Result<Vec<Bytes>, ScenarioError> {
    let mut g = RecordGenerator::new(seed, sort.keys)
        .map_err(|e| ScenarioError::Setup(format!("cannot generate the records: {e}")))?;
    Ok(sort
        .records
        .iter()
        .map(|&r| {
            let mut buf = vec![0u8; r as usize * RECORD_LEN];
            g.fill(&mut buf);
            Bytes::from(buf)
        })
        .collect())
}

/// The collective a sort workload starts.
pub fn sort_spec(sort: &SortWorkload, compute_bytes_s: &[f64]) -> CollectiveSpec {
    sort.protocol.spec(
        RECORD_LEN as u32,
        (sort.rows, sort.cols),
        sort.slicing,
        compute_bytes_s,
        sort.backups,
    )
}

/// True once the sort is over: the initiator saw it complete, or every member that is not
/// dead ended it (or refused it).
fn sort_over(m: &Metrics, root: NodeId) -> bool {
    if m.completion(root).is_some() {
        return true;
    }
    m.nodes.iter().all(|n| {
        n.outcome == NodeOutcome::Failed
            || n.reports.iter().any(|r| {
                matches!(
                    r.report,
                    HostReport::CollectiveEnded { .. } | HostReport::CollectiveRefused { .. }
                )
            })
    })
}

/// Runs a sort workload; see the module docs.
pub(super) fn run_sort(
    scenario: &Scenario,
    seed: u64,
    mut log: Option<&mut dyn Write>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report, ScenarioError> {
    let w = &scenario.workload;
    let sort = w
        .sort
        .as_ref()
        .ok_or_else(|| ScenarioError::Setup("the workload is not a sort".into()))?;
    let nominal = &scenario.platform;
    let n = nominal.node_count();
    let record_seed = sort.record_seed.unwrap_or(seed);
    let input = generate_records(sort, record_seed)?;
    let mut timeline = Timeline::new(scenario, seed);
    let mut platform = nominal.clone();
    let mut dead = vec![false; n];
    let mut stats = RunStats::default();
    let pipe = LogPipe::default();
    while let Some(t) = timeline.next_time() {
        if t > 0.0 {
            break;
        }
        for item in timeline.pop(t)? {
            apply_now(&mut platform, &mut dead, &item, &mut stats)?;
            pipe.write_own(&mut log, &own_line(t, &item))?;
        }
    }
    pipe.write_own(
        &mut log,
        &serde_json::json!({"t": 0.0, "ev": "repetition", "repetition": 0}),
    )?;
    let config = SimConfig {
        record_deliveries: true,
        ..SimConfig::with_policy(w.sharing)
    };
    let setup = |e: String| ScenarioError::Setup(format!("cannot set up the sort: {e}"));
    let mut sim = group(platform.clone(), config, seed, |c| {
        c.app = Arc::new(SortRecords(input[c.me.index()].clone()));
    })
    .map_err(|e| setup(e.to_string()))?;
    set_speeds(&mut sim, &w.compute_bytes_s).map_err(engine_err)?;
    if log.is_some() {
        sim.set_event_log(Box::new(pipe.0.clone()));
    }
    for (i, _) in dead.iter().enumerate().filter(|(_, d)| **d) {
        sim.fail_node_at(NodeId::from(i), 0.0).map_err(engine_err)?;
    }
    let spec = sort_spec(sort, &w.compute_bytes_s);
    sim.input_at(w.root, 0.0, start_input(spec, Bytes::new(), None))
        .map_err(engine_err)?;
    let no_join = |_: &mut Simulation, node: NodeId, _: f64| -> Result<u32, ScenarioError> {
        Err(ScenarioError::Setup(format!(
            "node {node} cannot join a sort mid-run"
        )))
    };
    let mut leaving = false;
    let mut step_s = 1e-3;
    let mut reached = 0.0f64;
    loop {
        let next_item = timeline.next_time();
        let events_before = sim.events();
        // From the end of the last chunk, not the clock: the clock stays at the last event,
        // and a chunk no longer than the gap to the next one would never reach it.
        let chunk_end = reached.max(sim.now()) + step_s;
        let (target, at_item) = match next_item {
            Some(r) if r <= chunk_end => (just_below(r), true),
            _ => (chunk_end, false),
        };
        let state = sim.run_until(target).map_err(engine_err)?;
        reached = target;
        pipe.drain(&mut log, 0.0)?;
        progress(&Progress {
            repetition: 0,
            repetitions: 1,
            time_s: sim.now(),
            nodes_ended: sim.ended_count(),
            nodes: n,
            events: sim.events(),
        });
        if state == RunState::Idle {
            break;
        }
        // The Hosts heartbeat until they leave; they leave once the sort is over (a leave
        // asked earlier waits for it, but one asked before a member heard of the sort would
        // not).
        if !leaving && sort_over(&sim.metrics(), w.root) {
            leaving = true;
            let now = sim.now();
            for i in (0..n).filter(|&i| !dead[i]) {
                sim.input_at(NodeId::from(i), now, leave_input())
                    .map_err(engine_err)?;
            }
        }
        if at_item {
            let t = timeline.next_time().expect("an item is due");
            for item in timeline.pop(t)? {
                pipe.write_own(&mut log, &own_line(t, &item))?;
                schedule_item(
                    &mut sim,
                    &no_join,
                    &mut platform,
                    &mut dead,
                    t,
                    &item,
                    &mut stats,
                )?;
            }
        } else {
            let done = (sim.events() - events_before) as f64;
            step_s *= if done == 0.0 {
                4.0
            } else {
                (EVENTS_PER_CHUNK / done).clamp(0.5, 4.0)
            };
            // Until the sort is over, look often: the members leave (and the run ends) at
            // most this long after it.
            if !leaving {
                step_s = step_s.min(MAX_STEP_BEFORE_LEAVING_S);
            }
        }
    }
    sim.take_event_log().map_err(engine_err)?;
    pipe.drain(&mut log, 0.0)?;
    if let Some(l) = log.as_mut() {
        l.flush().map_err(log_err)?;
    }
    let m = sim.metrics();
    let sort_report = sort_report(scenario, sort, record_seed, &input, &sim, &m);
    let links = m
        .links
        .iter()
        .filter(|l| l.bytes > 0.0)
        .map(|l| LinkReport {
            link: l.link,
            nominal_bytes_s: nominal.capacity_bytes_s(l.link.into()),
            bytes: l.bytes,
        })
        .collect();
    let errors = m
        .errors
        .iter()
        .map(|e| format!("at {} s, node {}: {}", e.at_s, e.node, e.error))
        .collect();
    let finished = sort_report
        .members
        .iter()
        .filter(|x| x.outcome == "finished")
        .count();
    let failed = sort_report
        .members
        .iter()
        .filter(|x| x.outcome == "failed")
        .count();
    let aborted = sort_report
        .members
        .iter()
        .filter(|x| matches!(x.outcome, "aborted" | "refused"))
        .count();
    let makespan = sort_report.complete_s.or(sort_report.max_finish_s);
    let rep = RepetitionReport {
        index: 0,
        start_s: 0.0,
        end_s: m.end_time_s,
        makespan_s: makespan,
        finished,
        aborted,
        failed,
        unfinished: n - finished - failed - aborted,
        throughput_bytes_s: makespan
            .filter(|&x| x > 0.0)
            .map(|x| w.message_bytes as f64 / x),
        app_bytes_delivered: m.totals.app_bytes_delivered,
        events: m.events,
        auto: None,
    };
    let nodes = node_reports(scenario, None, None, std::slice::from_ref(&m));
    Ok(Report {
        scenario: scenario.name.clone(),
        seed,
        protocol: w.kind,
        tree: w.tree,
        tree_costs: w.tree_costs,
        root: w.root,
        node_count: n,
        cluster_count: nominal.cluster_count(),
        message_bytes: w.message_bytes,
        segment_bytes: None,
        sharing: sharing_name(w.sharing),
        predicted_finish_s: None,
        changes_applied: stats.changes,
        mayhem_draws: stats.draws,
        failures: dead.iter().filter(|d| **d).count(),
        end_s: m.end_time_s,
        events: m.events,
        messages_sent: m.totals.messages_sent,
        wire_bytes_sent: m.totals.wire_bytes_sent,
        app_bytes_delivered: m.totals.app_bytes_delivered,
        repetitions: vec![rep],
        nodes,
        links,
        errors,
        multicast: Vec::new(),
        sort: Some(sort_report),
        auto: None,
    })
}

fn sort_report(
    scenario: &Scenario,
    sort: &SortWorkload,
    record_seed: u64,
    input: &[Bytes],
    sim: &Simulation,
    m: &Metrics,
) -> SortReport {
    let w = &scenario.workload;
    let p = &scenario.platform;
    let completion = m.completion(w.root);
    let mut want = RecordSummary::new();
    for s in input {
        want.push_all(s);
    }
    let mut got = RecordSummary::new();
    let mut members = Vec::new();
    for (i, records) in input.iter().enumerate() {
        let node = NodeId::from(i);
        let nm = m.node(node);
        // A member delivers its range once; a restarted sort (after a failure) only once too.
        let held: Vec<Bytes> = match completion {
            Some(c) => sim
                .delivered_of(node, c.transfer)
                .into_iter()
                .map(|d| d.1)
                .collect(),
            None => sim.delivered(node).iter().map(|d| d.1.clone()).collect(),
        };
        for d in &held {
            got = got.then(&RecordSummary::of(d));
        }
        let ended = nm.and_then(|nm| {
            nm.reports.iter().find_map(|r| match r.report {
                HostReport::CollectiveEnded { finished, .. } => Some((r.at_s, finished)),
                _ => None,
            })
        });
        let refused = nm.is_some_and(|nm| {
            nm.reports
                .iter()
                .any(|r| matches!(r.report, HostReport::CollectiveRefused { .. }))
        });
        let outcome = match (nm.map(|nm| nm.outcome), ended, refused) {
            (Some(NodeOutcome::Failed), _, _) => "failed",
            (_, Some((_, true)), _) => "finished",
            (_, Some((_, false)), _) => "aborted",
            (_, None, true) => "refused",
            _ => "unfinished",
        };
        members.push(SortMember {
            node,
            cluster: p.cluster_of(node),
            compute_bytes_s: w.compute_bytes_s[i],
            records_in: (records.len() / RECORD_LEN) as u64,
            records_held: held.iter().map(|d| (d.len() / RECORD_LEN) as u64).sum(),
            bytes_sent: nm.map_or(0, |nm| nm.wire_bytes_sent),
            finish_s: ended.filter(|_| outcome == "finished").map(|e| e.0),
            outcome,
        });
    }
    let finishes: Vec<f64> = members.iter().filter_map(|x| x.finish_s).collect();
    let complete = got.records == want.records && got.checksum == want.checksum;
    let sorted = got.is_sorted();
    let heterosort = sort.protocol == SortProtocol::Heterosort;
    SortReport {
        protocol: sort.protocol,
        slicing: heterosort.then(|| sort.slicing.name()),
        backups: heterosort.then_some(sort.backups),
        torus: heterosort.then_some((sort.rows, sort.cols)),
        record_seed,
        keys: match sort.keys {
            windrose_model::records::KeyDistribution::Uniform => "uniform".into(),
            windrose_model::records::KeyDistribution::Skewed { exponent } => {
                format!("skewed (exponent {exponent})")
            }
            windrose_model::records::KeyDistribution::Duplicates { distinct } => {
                format!("{distinct} distinct keys")
            }
        },
        complete_s: completion.map(|c| c.at_s),
        finished: completion.map_or(0, |c| c.finished),
        failed: completion.map_or(0, |c| c.failed),
        max_finish_s: finishes.iter().copied().reduce(f64::max),
        mean_finish_s: (!finishes.is_empty())
            .then(|| finishes.iter().sum::<f64>() / finishes.len() as f64),
        members,
        check: SortCheck {
            records_in: want.records,
            records_out: got.records,
            checksum_in: want.checksum.to_string(),
            checksum_out: got.checksum.to_string(),
            sorted,
            complete,
            ok: sorted && complete,
        },
    }
}
