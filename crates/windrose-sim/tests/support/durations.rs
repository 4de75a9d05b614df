//! What the weather series tests (`weather.rs`, `weather_midrun.rs`) share: each collective's
//! duration as its initiator saw it, every one checked whole.
#![allow(dead_code)]

use windrose_proto::Report;
use windrose_sim::metrics::NodeMetrics;

/// Start to completion of each collective `initiator` started, in order, asserting that each
/// ended with `members` finished and none failed (`what` names the run in a failure).
pub fn durations(initiator: &NodeMetrics, members: u32, what: &str) -> Vec<f64> {
    let mut starts = vec![];
    let mut durations = vec![];
    for r in &initiator.reports {
        match r.report {
            Report::CollectiveStarted { transfer, .. } => starts.push((transfer, r.at_s)),
            Report::CollectiveComplete {
                transfer,
                finished,
                failed,
            } => {
                assert_eq!(
                    (finished, failed),
                    (members, 0),
                    "{what}: transfer {transfer}"
                );
                let (_, s) = starts.iter().find(|(t, _)| *t == transfer).unwrap();
                durations.push(r.at_s - s);
            }
            _ => {}
        }
    }
    durations
}
