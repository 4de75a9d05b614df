//! The calibrated divisible-load scatter: its root plans the schedule from the group's view
//! (every member's forecast compute speed, every tree link's forecast bandwidth; guesses where
//! nothing was measured, and said so), with seed 001's optimal distribution order
//! ([`windrose_trees::dlt`]). The [`Host`](crate::host::Host) plans it for
//! [`AppRequest::StartScatter`](crate::host::AppRequest::StartScatter) and reports which
//! speeds it took ([`Report::ScatterPlanned`](crate::Report::ScatterPlanned) and one
//! [`Report::ScatterNodePlanned`](crate::Report::ScatterNodePlanned) per node).
//!
//! The times follow the command line's uniform schedule exactly (`windrose scatter`): the load
//! is `L` bytes, a node of `v` MB/s needs `L / (v 10^6)` seconds for the whole of it and a link
//! of `b` MB/s `L / (b 10^6)`; so a view whose speeds are the given ones plans the very
//! schedule the uniform builder makes (tested). The model ignores latency and per-frame
//! overhead: a scatter of many megabytes is dominated by bandwidth and computation.

use crate::frame::TransferId;
use crate::weather::{Basis, GroupView, Guesses};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use windrose_model::NodeId;
use windrose_trees::dlt::{self, DltError, OrderPolicy, Schedule};
use windrose_trees::Tree;

/// Speeds the caller gives for every node or every link, in place of the view's.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GivenSpeeds {
    /// Every node computes this many MB/s.
    pub compute_mb_s: Option<f64>,
    /// Every tree link carries this many MB/s.
    pub link_mb_s: Option<f64>,
}

/// A scatter rooted here whose schedule the host plans from the group's view:
/// [`AppRequest::StartScatter`](crate::host::AppRequest::StartScatter).
#[derive(Clone, Debug)]
pub struct ScatterRequest {
    /// The tree the load flows down (rooted at this node).
    pub tree: Tree,
    /// How every parent orders its children ([`OrderPolicy::Optimal`]: seed 001's order).
    pub order: OrderPolicy,
    /// Speeds that replace the view's (none: the calibrated plan).
    pub given: GivenSpeeds,
    /// Largest payload per frame.
    pub max_frame_payload: u32,
    /// Send every child its share at once (the schedule assumes one after the other).
    pub parallel: bool,
    /// The load.
    pub data: Bytes,
    /// The transfer id to use (None: the host draws one).
    pub transfer: Option<TransferId>,
}

/// The speeds a plan took for one node.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedSpeeds {
    /// The node.
    pub node: NodeId,
    /// Its compute speed, MB/s, and where it came from.
    pub compute_mb_s: f64,
    /// Where the compute speed came from.
    pub compute: Basis,
    /// The bandwidth of the link from its parent, MB/s, and where it came from (None at the
    /// root).
    pub link_mb_s: Option<(f64, Basis)>,
}

/// A scatter's schedule and the speeds it was planned with.
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterPlan {
    /// The schedule (its `predicted_finish_s` is the plan's prediction).
    pub schedule: Schedule,
    /// Every node's speeds, in the schedule's order.
    pub speeds: Vec<PlannedSpeeds>,
}

impl ScatterPlan {
    /// Members and tree links whose speed was measured: (computes, links).
    pub fn measured(&self) -> (usize, usize) {
        let computes = self
            .speeds
            .iter()
            .filter(|s| s.compute == Basis::Measured)
            .count();
        let links = self
            .speeds
            .iter()
            .filter(|s| matches!(s.link_mb_s, Some((_, Basis::Measured))))
            .count();
        (computes, links)
    }
}

/// Plans the scatter of `load_bytes` down `tree` from `view` (unmeasured figures guessed from
/// `defaults`, see [`GroupView::estimator`]), `given` speeds replacing the view's.
///
/// Errors: a given speed that is not a positive finite number, or a tree the divisible-load
/// schedule refuses (the error names the node or link).
pub fn plan(
    view: &GroupView,
    defaults: Guesses,
    tree: &Tree,
    load_bytes: u64,
    order: OrderPolicy,
    given: GivenSpeeds,
) -> Result<ScatterPlan, DltError> {
    for (what, v) in [
        ("compute_mb_s", given.compute_mb_s),
        ("link_mb_s", given.link_mb_s),
    ] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(DltError::Parameter { what, value: v });
        }
    }
    let est = view.estimator(defaults);
    let load = load_bytes.max(1) as f64;
    let compute = |n: NodeId| match given.compute_mb_s {
        Some(v) => (v, Basis::Given),
        None => est.compute_mb_s(n),
    };
    let link = |p: NodeId, c: NodeId| match given.link_mb_s {
        Some(v) => (v, Basis::Given),
        None => est.mb_s(p, c),
    };
    let compute_s: Vec<f64> = (0..tree.node_count() as u32)
        .map(|i| load / (compute(NodeId(i)).0 * 1e6))
        .collect();
    let schedule =
        dlt::schedule_with_links(tree, &compute_s, |p, c| load / (link(p, c).0 * 1e6), order)?;
    let speeds = schedule
        .nodes
        .iter()
        .map(|s| {
            let (compute_mb_s, basis) = compute(s.node);
            PlannedSpeeds {
                node: s.node,
                compute_mb_s,
                compute: basis,
                link_mb_s: s.parent.map(|p| link(p, s.node)),
            }
        })
        .collect();
    Ok(ScatterPlan { schedule, speeds })
}
