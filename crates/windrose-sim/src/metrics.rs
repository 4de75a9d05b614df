//! What a simulated run measured: per-node outcomes and finish times, bytes handed to the
//! applications, bytes per link, throughput and the protocols' reports.
//!
//! Everything here is plain data with serde derives, for `--json` output: a [`Metrics`] is what
//! [`Simulation::metrics`](crate::engine::Simulation::metrics) and
//! [`Simulation::run`](crate::engine::Simulation::run) return. Times are `f64` seconds since the
//! start of the run (the engine's clock), bytes are counted exactly, and the lists are in a fixed
//! order (nodes by id, links in platform order), so two identical runs serialize identically.
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! use windrose_model::NodeId;
//! use windrose_proto::tree_broadcast::BroadcastConfig;
//! use windrose_proto::TransferId;
//! use windrose_sim::engine::broadcast;
//! use windrose_sim::network::SharingPolicy;
//! use windrose_trees::Tree;
//!
//! let p = Platform::builder()
//!     .cluster(ClusterSpec::uniform(2, 1e6, 1e9, 0.0))
//!     .build()
//!     .unwrap();
//! let tree = Tree::from_edges(2, NodeId(0), &[(NodeId(1), NodeId(0))]).unwrap();
//! let cfg = BroadcastConfig::new(TransferId(1), 1000);
//! let mut sim = broadcast(p, &tree, 1000u64, cfg, SharingPolicy::MaxMin).unwrap();
//! let m = sim.run().unwrap();
//! assert!(m.all_finished());
//! assert_eq!(m.node(NodeId(1)).unwrap().app_bytes_delivered, 1000);
//! let json = serde_json::to_string(&m).unwrap();
//! assert!(json.contains("\"outcome\":\"finished\""));
//! ```

use crate::network::NetworkStats;
use serde::{Deserialize, Serialize};
use std::fmt;
use windrose_model::platform::LinkId;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::{Report, TransferId};

/// Where a node ended up when the run stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeOutcome {
    /// Its start time was never reached (a join after the end of the run).
    NotStarted,
    /// Started but neither finished nor aborted (waiting for something that never came).
    Running,
    /// Its machine pushed `Output::Finished`.
    Finished,
    /// Its machine gave up (`Output::Aborted`).
    Aborted,
    /// A failure was injected (it stopped, whatever its machine's state).
    Failed,
}

impl NodeOutcome {
    /// True for [`Finished`](Self::Finished), [`Aborted`](Self::Aborted) and
    /// [`Failed`](Self::Failed): the node needs nothing more.
    pub fn is_ended(self) -> bool {
        matches!(
            self,
            NodeOutcome::Finished | NodeOutcome::Aborted | NodeOutcome::Failed
        )
    }

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            NodeOutcome::NotStarted => "not_started",
            NodeOutcome::Running => "running",
            NodeOutcome::Finished => "finished",
            NodeOutcome::Aborted => "aborted",
            NodeOutcome::Failed => "failed",
        }
    }
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The last [`Report::Progress`] of a node.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressRecord {
    /// Engine time of the report, seconds.
    pub at_s: f64,
    /// Bytes held.
    pub done_bytes: u64,
    /// Bytes of the whole transfer.
    pub total_bytes: u64,
}

/// A report other than progress, as a node's machine pushed it, with the engine time it was
/// pushed at. The report's own serde form gives the JSON (`{"at_s":..,"kind":"tree_planned",
/// "cost_s":..}`), so a new [`Report`] variant needs nothing here.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportRecord {
    /// Engine time of the report, seconds.
    pub at_s: f64,
    /// What was reported.
    #[serde(flatten)]
    pub report: Report,
}

/// A collective's end as its initiator reported it ([`Report::CollectiveComplete`]).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The collective.
    pub transfer: TransferId,
    /// Engine time of the report, seconds.
    pub at_s: f64,
    /// Members that finished (the initiator included).
    pub finished: u32,
    /// Members that aborted, failed or refused.
    pub failed: u32,
}

impl Completion {
    /// True when all `members` finished and none failed.
    pub fn is_whole(&self, members: usize) -> bool {
        self.finished as usize == members && self.failed == 0
    }
}

/// One failure and restart of a node ([`crate::engine::Simulation::restart_node_at`]).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// When it failed.
    pub failed_at_s: f64,
    /// When its new machine started.
    pub restarted_at_s: f64,
}

/// Everything measured at one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeMetrics {
    /// The node.
    pub node: NodeId,
    /// Where it ended up.
    pub outcome: NodeOutcome,
    /// When its machine got `Input::Start`.
    pub started_at_s: Option<f64>,
    /// When its machine pushed `Output::Finished`.
    pub finished_at_s: Option<f64>,
    /// When its machine pushed `Output::Aborted`.
    pub aborted_at_s: Option<f64>,
    /// Why it aborted.
    pub abort_reason: Option<String>,
    /// When a failure was injected (cleared when the node restarts).
    pub failed_at_s: Option<f64>,
    /// Earlier lives of a node that was restarted: when each failed and when it came back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<Restart>,
    /// Bytes handed to its application (`Output::Deliver`).
    pub app_bytes_delivered: u64,
    /// Messages it handed to the network.
    pub messages_sent: u64,
    /// Encoded bytes of those messages.
    pub wire_bytes_sent: u64,
    /// Messages it received.
    pub messages_received: u64,
    /// Encoded bytes of those messages.
    pub wire_bytes_received: u64,
    /// Compute tasks it asked for (`Output::Compute`).
    pub compute_tasks: u64,
    /// Bytes of those tasks.
    pub compute_bytes: u64,
    /// When its last compute task completed.
    pub compute_done_at_s: Option<f64>,
    /// Its last progress report.
    pub progress: Option<ProgressRecord>,
    /// Its other reports, in order.
    pub reports: Vec<ReportRecord>,
}

impl NodeMetrics {
    /// An empty record for `node`.
    pub fn new(node: NodeId) -> NodeMetrics {
        NodeMetrics {
            node,
            outcome: NodeOutcome::NotStarted,
            started_at_s: None,
            finished_at_s: None,
            aborted_at_s: None,
            abort_reason: None,
            failed_at_s: None,
            restarts: Vec::new(),
            app_bytes_delivered: 0,
            messages_sent: 0,
            wire_bytes_sent: 0,
            messages_received: 0,
            wire_bytes_received: 0,
            compute_tasks: 0,
            compute_bytes: 0,
            compute_done_at_s: None,
            progress: None,
            reports: Vec::new(),
        }
    }

    /// Application bytes per second between its start and its finish (None unless it finished
    /// after it started).
    pub fn throughput_bytes_s(&self) -> Option<f64> {
        let (s, f) = (self.started_at_s?, self.finished_at_s?);
        (f > s).then(|| self.app_bytes_delivered as f64 / (f - s))
    }
}

/// A link of the platform, in a serializable form (`{"kind":"wan","from":0,"to":1}`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LinkRef {
    /// [`LinkId::NodeUp`].
    NodeUp {
        /// The node.
        node: NodeId,
    },
    /// [`LinkId::NodeDown`].
    NodeDown {
        /// The node.
        node: NodeId,
    },
    /// [`LinkId::AccessUp`].
    AccessUp {
        /// The cluster.
        cluster: ClusterId,
    },
    /// [`LinkId::AccessDown`].
    AccessDown {
        /// The cluster.
        cluster: ClusterId,
    },
    /// [`LinkId::Wan`].
    Wan {
        /// Source cluster.
        from: ClusterId,
        /// Destination cluster.
        to: ClusterId,
    },
}

impl From<LinkId> for LinkRef {
    fn from(l: LinkId) -> LinkRef {
        match l {
            LinkId::NodeUp(node) => LinkRef::NodeUp { node },
            LinkId::NodeDown(node) => LinkRef::NodeDown { node },
            LinkId::AccessUp(cluster) => LinkRef::AccessUp { cluster },
            LinkId::AccessDown(cluster) => LinkRef::AccessDown { cluster },
            LinkId::Wan { from, to } => LinkRef::Wan { from, to },
        }
    }
}

impl From<LinkRef> for LinkId {
    fn from(l: LinkRef) -> LinkId {
        match l {
            LinkRef::NodeUp { node } => LinkId::NodeUp(node),
            LinkRef::NodeDown { node } => LinkId::NodeDown(node),
            LinkRef::AccessUp { cluster } => LinkId::AccessUp(cluster),
            LinkRef::AccessDown { cluster } => LinkId::AccessDown(cluster),
            LinkRef::Wan { from, to } => LinkId::Wan { from, to },
        }
    }
}

impl fmt::Display for LinkRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        LinkId::from(*self).fmt(f)
    }
}

/// Bytes one link carried.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkMetrics {
    /// The link.
    pub link: LinkRef,
    /// Its capacity when the run stopped, bytes/s.
    pub capacity_bytes_s: f64,
    /// Bytes that crossed it (a flow-level quantity, hence `f64`).
    pub bytes: f64,
}

/// A message a machine refused (`ProtocolError`) or an output the engine could not perform
/// (a send to itself, to a node outside the platform).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// Engine time, seconds.
    pub at_s: f64,
    /// The node whose machine or output it was.
    pub node: NodeId,
    /// The peer at fault or concerned, when there is one.
    pub peer: Option<NodeId>,
    /// The error, as displayed.
    pub error: String,
}

impl fmt::Display for ErrorRecord {
    /// One line: `at 0.250000000 s, node 3 (peer 5): <error>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {:.9} s, node {}", self.at_s, self.node)?;
        if let Some(p) = self.peer {
            write!(f, " (peer {p})")?;
        }
        write!(f, ": {}", self.error)
    }
}

/// Totals over all nodes and messages.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Messages handed to the network.
    pub messages_sent: u64,
    /// Their encoded bytes.
    pub wire_bytes_sent: u64,
    /// Messages received by a live node.
    pub messages_delivered: u64,
    /// Their encoded bytes.
    pub wire_bytes_delivered: u64,
    /// Messages lost to a failure: in flight from or to a failed node, or sent to one.
    pub messages_dropped: u64,
    /// Bytes handed to the applications, summed over nodes.
    pub app_bytes_delivered: u64,
}

/// The network model's work counters (see [`NetworkStats`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkWork {
    /// Network events handled.
    pub events: u64,
    /// Progressive-filling runs.
    pub solves: u64,
    /// Connections re-shared, summed over solves.
    pub solved_connections: u64,
    /// Links re-shared, summed over solves.
    pub solved_links: u64,
    /// Rate changes.
    pub rate_changes: u64,
    /// Filling rounds, summed over solves.
    pub rounds: u64,
}

impl From<&NetworkStats> for NetworkWork {
    fn from(s: &NetworkStats) -> NetworkWork {
        NetworkWork {
            events: s.events,
            solves: s.solves,
            solved_connections: s.solved_connections,
            solved_links: s.solved_links,
            rate_changes: s.rate_changes,
            rounds: s.rounds,
        }
    }
}

/// Which run limit stopped a run (see [`RunLimits`](crate::engine::RunLimits)).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Limit {
    /// The next event was later than `max_time_s`.
    Time {
        /// The limit, seconds.
        max_time_s: f64,
    },
    /// `max_events` engine events were processed.
    Events {
        /// The limit.
        max_events: u64,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Time { max_time_s } => write!(f, "simulated time limit of {max_time_s} s"),
            Limit::Events { max_events } => write!(f, "limit of {max_events} events"),
        }
    }
}

/// Everything a run measured. See the [module docs](self).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Engine time of the last event processed, seconds.
    pub end_time_s: f64,
    /// Engine events processed (starts, arrivals, timers, completions, failures).
    pub events: u64,
    /// Set when a run limit stopped the run although every node had ended.
    pub stopped_by: Option<Limit>,
    /// Nodes that finished.
    pub finished: usize,
    /// Nodes whose machine aborted.
    pub aborted: usize,
    /// Nodes that failed.
    pub failed: usize,
    /// Nodes still running or not started.
    pub unfinished: usize,
    /// Latest finish time over the finished nodes (None when none finished).
    pub makespan_s: Option<f64>,
    /// `totals.app_bytes_delivered / makespan_s`: the aggregate rate at which the applications
    /// received data (None without a positive makespan).
    pub throughput_bytes_s: Option<f64>,
    /// Totals over nodes and messages.
    pub totals: Totals,
    /// One record per node with a machine, by node id.
    pub nodes: Vec<NodeMetrics>,
    /// Every link that carried bytes, in platform order.
    pub links: Vec<LinkMetrics>,
    /// Refused inputs and impossible outputs, in order.
    pub errors: Vec<ErrorRecord>,
    /// The network model's work counters.
    pub network: NetworkWork,
}

impl Metrics {
    /// The record of `node`, if it had a machine.
    pub fn node(&self, node: NodeId) -> Option<&NodeMetrics> {
        self.nodes
            .binary_search_by_key(&node, |m| m.node)
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// True when every node finished.
    pub fn all_finished(&self) -> bool {
        self.finished == self.nodes.len()
    }

    /// The nodes with this outcome, by id.
    pub fn nodes_with(&self, outcome: NodeOutcome) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|m| m.outcome == outcome)
            .map(|m| m.node)
            .collect()
    }

    /// The nodes that neither finished, aborted nor failed, by id.
    pub fn unfinished_nodes(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|m| !m.outcome.is_ended())
            .map(|m| m.node)
            .collect()
    }

    /// The collectives `node` initiated that completed, in the order they did.
    pub fn completions(&self, node: NodeId) -> impl Iterator<Item = Completion> + '_ {
        let reports = self.node(node).map_or(&[][..], |m| &m.reports[..]);
        reports.iter().filter_map(|r| match r.report {
            Report::CollectiveComplete {
                transfer,
                finished,
                failed,
            } => Some(Completion {
                transfer,
                at_s: r.at_s,
                finished,
                failed,
            }),
            _ => None,
        })
    }

    /// The first collective `node` initiated that completed (a run of one collective: its end).
    pub fn completion(&self, node: NodeId) -> Option<Completion> {
        self.completions(node).next()
    }

    /// The bytes carried by `link` (0 if it carried none).
    pub fn link_bytes(&self, link: LinkId) -> f64 {
        let r = LinkRef::from(link);
        self.links
            .iter()
            .find(|l| l.link == r)
            .map_or(0.0, |l| l.bytes)
    }
}

impl fmt::Display for Metrics {
    /// A short human summary, then one line per node.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes: {} finished, {} aborted, {} failed, {} unfinished; {} events, end at {:.9} s",
            self.nodes.len(),
            self.finished,
            self.aborted,
            self.failed,
            self.unfinished,
            self.events,
            self.end_time_s
        )?;
        if let (Some(m), Some(t)) = (self.makespan_s, self.throughput_bytes_s) {
            writeln!(f, "makespan {m:.9} s, throughput {t:.6e} B/s")?;
        }
        writeln!(
            f,
            "{:>6}  {:<11}  {:>15}  {:>16}  {:>14}",
            "node", "outcome", "finished_at_s", "app_bytes", "wire_bytes_in"
        )?;
        for n in &self.nodes {
            let at = n
                .finished_at_s
                .or(n.aborted_at_s)
                .or(n.failed_at_s)
                .map_or_else(|| "-".to_string(), |t| format!("{t:.9}"));
            writeln!(
                f,
                "{:>6}  {:<11}  {:>15}  {:>16}  {:>14}",
                n.node.0,
                n.outcome.name(),
                at,
                n.app_bytes_delivered,
                n.wire_bytes_received
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use windrose_proto::choice::{Candidate, PredictedRun};
    use windrose_proto::Time;

    fn json(r: Report) -> serde_json::Value {
        serde_json::to_value(ReportRecord {
            at_s: 1.5,
            report: r,
        })
        .unwrap()
    }

    /// The JSON users read keeps the field names and units the metrics had before they kept
    /// `Report` itself, and reads back to the same report.
    #[test]
    fn report_records_serialize_with_seconds_and_read_back() {
        let tree = Report::TreePlanned {
            transfer: TransferId(7),
            cost: Duration::from_millis(250),
            built: true,
            changed_links: 2,
            swaps: 1,
            live_mst: Some((3, 4)),
        };
        assert_eq!(
            json(tree),
            serde_json::json!({"at_s": 1.5, "kind": "tree_planned", "transfer": 7,
                "cost_s": 0.25, "built": true, "changed_links": 2, "swaps": 1,
                "live_mst": [3, 4]})
        );
        let share = Report::ShareFinished {
            node: NodeId(3),
            at: Time::from_millis(1250),
        };
        assert_eq!(
            json(share),
            serde_json::json!({"at_s": 1.5, "kind": "share_finished", "node": 3,
                "finished_at_s": 1.25})
        );
        let done = Report::MemberDone {
            transfer: TransferId(7),
            member: NodeId(2),
            finished: false,
            bytes_delivered: 10,
            digest: None,
            elapsed: None,
            share: None,
            resumed_bytes: None,
        };
        assert_eq!(
            json(done),
            serde_json::json!({"at_s": 1.5, "kind": "member_done", "transfer": 7, "member": 2,
                "finished": false, "bytes_delivered": 10, "elapsed_s": null})
        );
        let run = PredictedRun {
            completion: Duration::from_millis(1500),
            startup: Duration::from_millis(20),
            rate_bytes_s: 1_000_000,
        };
        let chosen = Report::ProtocolChosen {
            transfer: TransferId(7),
            bytes: 1 << 20,
            chosen: Candidate::ALL[1],
            predicted: [Some(run), None, Some(run)],
        };
        assert_eq!(
            json(chosen)["predicted"][0],
            serde_json::json!({"completion_s": 1.5, "startup_s": 0.02, "rate_bytes_s": 1_000_000})
        );
        for r in [tree, share, done, chosen] {
            let record = ReportRecord {
                at_s: 1.5,
                report: r,
            };
            let text = serde_json::to_string(&record).unwrap();
            assert_eq!(serde_json::from_str::<ReportRecord>(&text).unwrap(), record);
        }
    }

    #[test]
    fn a_negative_span_is_refused_with_its_value() {
        let text = r#"{"at_s":0.0,"kind":"round_trip","peer":1,"rtt_s":-2.0}"#;
        let e = serde_json::from_str::<ReportRecord>(text).unwrap_err();
        assert!(e.to_string().contains("-2 s"), "{e}");
    }
}
