//! Measurement series: what nodes observe about their links while they run (round-trip times,
//! the throughput transfers actually got), as time series per (node, peer, metric).
//!
//! The real runtime records them (windrose-net's link probes and transfer counters) and writes
//! them as JSON; forecasters and adaptation read them from here, so the format does not depend
//! on any driver.

use crate::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most samples one series keeps; older samples are thinned (every other one dropped) when
/// it is full, so a long run keeps its whole span at a coarser resolution.
pub const MAX_SAMPLES: usize = 1024;

/// What a series measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Round-trip time of a ping, in milliseconds.
    RttMs,
    /// Payload throughput received from the peer, in MB/s (10^6 bytes per second).
    RecvMbS,
    /// Throughput written to the peer's connection, in MB/s.
    SendMbS,
}

/// One measurement.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When, in seconds since the node's run started (its Go).
    pub at_s: f64,
    /// The value, in the series' unit.
    pub value: f64,
}

/// A time series of one metric on the link from `node` to `peer`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// The measuring node.
    pub node: NodeId,
    /// The other end.
    pub peer: NodeId,
    /// What is measured.
    pub metric: Metric,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
}

impl Series {
    /// The median value, None when empty.
    pub fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.samples.iter().map(|s| s.value).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }
}

/// Every series one node measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkMeasurements {
    /// The series, ordered by (peer, metric).
    pub series: Vec<Series>,
}

/// Builds [`LinkMeasurements`] sample by sample.
#[derive(Clone, Debug)]
pub struct Recorder {
    node: NodeId,
    series: BTreeMap<(NodeId, Metric), Vec<Sample>>,
}

impl Recorder {
    /// A recorder for node `node`.
    pub fn new(node: NodeId) -> Recorder {
        Recorder {
            node,
            series: BTreeMap::new(),
        }
    }

    /// Adds a sample (non-finite values are dropped).
    pub fn record(&mut self, peer: NodeId, metric: Metric, at_s: f64, value: f64) {
        if !value.is_finite() || !at_s.is_finite() {
            return;
        }
        let v = self.series.entry((peer, metric)).or_default();
        if v.len() >= MAX_SAMPLES {
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                i % 2 == 0
            });
        }
        v.push(Sample { at_s, value });
    }

    /// The series recorded so far.
    pub fn snapshot(&self) -> LinkMeasurements {
        LinkMeasurements {
            series: self
                .series
                .iter()
                .map(|(&(peer, metric), samples)| Series {
                    node: self.node,
                    peer,
                    metric,
                    samples: samples.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_thins_and_serialises() {
        let mut r = Recorder::new(NodeId(1));
        for i in 0..(MAX_SAMPLES + 10) {
            r.record(NodeId(0), Metric::RttMs, i as f64, 1.0 + i as f64);
        }
        r.record(NodeId(0), Metric::RecvMbS, 0.5, f64::NAN);
        r.record(NodeId(2), Metric::RecvMbS, 0.5, 800.0);
        let m = r.snapshot();
        assert_eq!(m.series.len(), 2);
        assert!(m.series[0].samples.len() <= MAX_SAMPLES);
        assert_eq!(
            m.series[0].samples.last().unwrap().at_s,
            (MAX_SAMPLES + 9) as f64
        );
        assert_eq!(m.series[1].median(), Some(800.0));
        let json = serde_json::to_string(&m).unwrap();
        let back: LinkMeasurements = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
    }
}
