//! What a run looked like from its root: the results a root command prints (as text or
//! `--json`), built from the members' end reports to the root's [`Host`](windrose_proto::host::Host)
//! (windrose_proto::host::Host), and the helpers every command that joins a group shares.

use crate::error::NetError;
use crate::group::Group;
use crate::measure::LinkMeasurements;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::frame::MessageKind;
use windrose_proto::multicast::MulticastProtocol;

/// How a node's collective ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Completed.
    Finished,
    /// The protocol gave up (a peer failed, nothing arrived in time) or the driver failed.
    Failed,
}

/// What a scatter node computed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareResult {
    /// First byte of the kept share in the load.
    pub offset: u64,
    /// Bytes kept.
    pub len: u64,
    /// BLAKE3 of the kept share (hex).
    pub blake3: String,
    /// When the computation ended, nanoseconds after the collective started on the node's
    /// clock.
    pub computed_ns: u64,
}

impl From<&windrose_proto::node::ComputedShare> for ShareResult {
    /// The share a member reported to the initiator's Host, in the form the replies print
    /// (an unknown computation time is 0).
    fn from(s: &windrose_proto::node::ComputedShare) -> ShareResult {
        ShareResult {
            offset: s.offset,
            len: s.len,
            blake3: blake3::Hash::from_bytes(s.digest).to_hex().to_string(),
            computed_ns: s.computed.map_or(0, |d| d.as_nanos() as u64),
        }
    }
}

/// Frames one node sent to one peer, by kind (for sim-vs-real comparisons).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FrameCount {
    /// The receiver.
    pub to: NodeId,
    /// The message kind.
    pub kind: MessageKind,
    /// How many frames.
    pub frames: u64,
    /// Their encoded bytes.
    pub bytes: u64,
}

/// A member's account of its part in a collective (`windrose node --json`, and each node of
/// a root command's result).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node.
    pub node: NodeId,
    /// How its collective ended.
    pub status: RunStatus,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Bytes of the collective's data it received.
    pub bytes_received: u64,
    /// BLAKE3 (hex) of the bytes delivered to it, in order (broadcast receivers).
    pub blake3: Option<String>,
    /// Nanoseconds from the collective's start to its end, on its own clock.
    pub finished_ns: Option<u64>,
    /// Nanoseconds from the start until it held all the data, on its own clock: a multicast node may
    /// keep serving its peers long after that, so its completion is this, not `finished_ns`.
    #[serde(default)]
    pub complete_ns: Option<u64>,
    /// The scatter share it computed.
    pub share: Option<ShareResult>,
    /// Its link measurements.
    pub measurements: LinkMeasurements,
    /// Protocol frames it sent, by peer and kind.
    pub frames_sent: Vec<FrameCount>,
    /// Set when the node rejoined the run after a restart: the bytes it found verified on disk
    /// from its earlier life and did not fetch again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_bytes: Option<u64>,
}

/// Largest multicast piece: one piece travels in one protocol frame.
pub const MAX_PIECE_BYTES: u32 =
    windrose_proto::frame::DEFAULT_MAX_BODY_LEN - windrose_proto::frame::MAX_FIXED_BODY_LEN as u32;

/// Something a run did, for progress bars and logs (`windrose local`'s and the root commands'
/// progress).
#[derive(Clone, Debug, PartialEq)]
pub enum NetEvent {
    /// The collective started (Go).
    Started {
        /// Bytes of the data.
        total_len: u64,
    },
    /// A node's progress, as it reported it to the root.
    Progress {
        /// The node.
        node: NodeId,
        /// Bytes it holds.
        done_bytes: u64,
        /// Bytes expected.
        total_bytes: u64,
    },
    /// A node's collective ended (seen at the root).
    Reported {
        /// The node.
        node: NodeId,
        /// How.
        status: RunStatus,
    },
    /// A peer failed (its connection was lost or it broke the protocol).
    PeerFailed {
        /// The peer.
        peer: NodeId,
        /// Why.
        reason: String,
    },
    /// A peer that had failed connected again (it restarted) and was taken back into the run.
    Rejoined {
        /// The peer.
        peer: NodeId,
    },
    /// A round trip was measured.
    RoundTrip {
        /// The peer.
        peer: NodeId,
        /// Its duration.
        rtt: Duration,
    },
}

/// One non-root node's result, as the root sees it.
#[derive(Clone, Debug, Serialize)]
pub struct NodeResult {
    /// The node.
    pub node: NodeId,
    /// Its cluster.
    pub cluster: ClusterId,
    /// How its collective ended (Failed when it never reported).
    pub status: RunStatus,
    /// Why it failed.
    pub error: Option<String>,
    /// Bytes it received.
    pub bytes_received: u64,
    /// When it finished, in seconds after the root's Go (its own finish time shifted by when
    /// its Go was sent and half the handshake's round trip).
    pub completion_s: Option<f64>,
    /// Its data divided by its completion time, in MB/s.
    pub throughput_mb_s: Option<f64>,
    /// BLAKE3 of what it received (broadcast) or computed (scatter: its share).
    pub blake3: Option<String>,
    /// What that hash must be.
    pub expected_blake3: Option<String>,
    /// True when the two hashes are equal.
    pub verified: bool,
    /// Scatter: its share.
    pub share: Option<ShareResult>,
    /// Scatter: the schedule's predicted finish, in the schedule's seconds.
    pub predicted_finish_s: Option<f64>,
    /// Scatter: when it reported its share computed, seconds after the root's Go (shifted as
    /// `completion_s`).
    pub measured_finish_s: Option<f64>,
    /// Set when it restarted mid-run and rejoined: the bytes it found verified on disk from its
    /// earlier life (not fetched again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_bytes: Option<u64>,
    /// Its full report, when one arrived.
    #[serde(skip)]
    pub report: Option<NodeReport>,
}

/// A run as the root saw it.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutcome {
    /// Random id of the run.
    pub session: u64,
    /// `broadcast`, `scatter` or `multicast`.
    pub collective: &'static str,
    /// The multicast protocol (`mob`, `bittorrent`, `balanced`, `magpie`), for multicasts.
    pub protocol: Option<MulticastProtocol>,
    /// The root.
    pub root: NodeId,
    /// Bytes of the data.
    pub total_len: u64,
    /// BLAKE3 of the data (empty when no node hashed what it received).
    pub root_blake3: String,
    /// Seconds from Go until the last report.
    pub elapsed_s: f64,
    /// Every other node, by id.
    pub nodes: Vec<NodeResult>,
    /// Scatter: the root's own share.
    pub root_share: Option<ShareResult>,
    /// The root's link measurements.
    pub root_measurements: LinkMeasurements,
    /// Protocol frames the root sent.
    pub root_frames_sent: Vec<FrameCount>,
}

impl RunOutcome {
    /// True when every node finished with the right hash.
    pub fn all_verified(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.status == RunStatus::Finished && n.verified)
    }

    /// One line per node that failed or got wrong data.
    pub fn failures(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.status != RunStatus::Finished || !n.verified)
            .map(|n| match &n.error {
                Some(e) => format!("node {}: {e}", n.node),
                None => format!(
                    "node {}: BLAKE3 {} differs from the expected {}",
                    n.node,
                    n.blake3.as_deref().unwrap_or("(none)"),
                    n.expected_blake3.as_deref().unwrap_or("(none)")
                ),
            })
            .collect()
    }

    /// Every node's link measurements, the root's first.
    pub fn measurements(&self) -> Vec<LinkMeasurements> {
        std::iter::once(self.root_measurements.clone())
            .chain(
                self.nodes
                    .iter()
                    .filter_map(|n| n.report.as_ref().map(|r| r.measurements.clone())),
            )
            .collect()
    }
}

/// Binds this node's address from the group.
pub async fn bind(group: &Group, me: NodeId) -> Result<TcpListener, NetError> {
    let addr = group
        .member(me)
        .map(|m| m.addr.clone())
        .ok_or_else(|| NetError::Group(format!("node {me} is not in the group")))?;
    // A node restarted right after a crash may find its address still held for a moment by
    // the dying process: retry briefly before giving up.
    let deadline = Instant::now() + BIND_RETRY;
    loop {
        match TcpListener::bind(&addr).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(source) => {
                return Err(NetError::Bind {
                    node: me,
                    addr,
                    source,
                })
            }
        }
    }
}

/// How long [`bind`] retries an address in use.
const BIND_RETRY: Duration = Duration::from_secs(3);

/// True when `bytes` are at most a quarter of this machine's available memory (MemAvailable of
/// /proc/meminfo; false where that cannot be read).
pub(crate) fn fits_in_memory(bytes: u64) -> bool {
    let available_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    });
    available_kib.is_some_and(|kib| bytes.saturating_mul(4) <= kib.saturating_mul(1024))
}
