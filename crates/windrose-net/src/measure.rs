//! What a node measures about its links while it runs: round-trip times (from the proto crate's
//! `LinkProber`) and the throughput its transfers actually got, kept as time series per peer.
//!
//! The format is deliberately small and serialisable (JSON in node reports and in
//! `windrose bcast --measurements FILE`); a later issue converts it to the model crate's
//! measurement series to feed forecasters.
//!
//! [`blake3_bytes_s`] and [`loopback_copy_bytes_s`] measure this machine before a run, to
//! calibrate the finish times a divisible-load scatter predicts.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use windrose_model::NodeId;

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

/// This machine's BLAKE3 speed in bytes per second: the best of `rounds` single-threaded
/// hashes of `sample` (the compute step of a scatter, as every node runs it). Used to calibrate
/// a scatter's predicted finish times. None when the sample is empty or the clock too coarse.
pub fn blake3_bytes_s(sample: &[u8], rounds: usize) -> Option<f64> {
    if sample.is_empty() {
        return None;
    }
    let best = (0..rounds.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(blake3::hash(std::hint::black_box(sample)));
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    (best > 0.0).then(|| sample.len() as f64 / best)
}

/// Throughput of a plain TCP copy of `bytes` bytes over loopback (127.0.0.1), in bytes per
/// second: one connection, 1 MiB writes, the receiver dropping what it reads; timed from the
/// accepted connection to the last byte. Calibrates scatter predictions for groups on loopback
/// (`windrose local --scatter`).
pub async fn loopback_copy_bytes_s(bytes: usize) -> std::io::Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sender = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len());
            s.write_all(&chunk[..n]).await?;
            left -= n;
        }
        s.shutdown().await
    });
    let (mut r, _) = listener.accept().await?;
    let start = std::time::Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    while got < bytes {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the loopback sender closed early",
            ));
        }
        got += n;
    }
    let secs = start.elapsed().as_secs_f64();
    sender.await.map_err(std::io::Error::other)??;
    Ok(bytes as f64 / secs.max(1e-9))
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

    #[test]
    fn calibration_speeds_are_positive() {
        assert!(blake3_bytes_s(&[7u8; 1 << 20], 2).unwrap() > 0.0);
        assert_eq!(blake3_bytes_s(&[], 2), None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert!(rt.block_on(loopback_copy_bytes_s(4 << 20)).unwrap() > 0.0);
    }
}
