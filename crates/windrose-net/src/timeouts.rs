//! Every deadline a member keeps ([`crate::host_driver`]): every wait is bounded.

use std::time::Duration;

/// Handshake time allowed per group member (see [`handshake_deadline`]).
pub const HANDSHAKE_PER_MEMBER: Duration = Duration::from_millis(100);

/// The deadline of one handshake in a group of `members`: `base`, or more in a large group.
/// An initiator announcing a collective dials every member at once, and when the group's
/// members share a loaded machine they all run their handshakes together (when every pair
/// connected, 250 nodes on 2 cores ran 62,000 handshakes of a few hundred microseconds of CPU
/// each, and a fixed 5 s expired for 128 nodes; connections are made on demand now, see
/// [`crate::host_driver`]). A dialer whose handshake still times out tries again on a fresh
/// connection while its connect deadline allows.
pub fn handshake_deadline(base: Duration, members: usize) -> Duration {
    let members = u32::try_from(members).unwrap_or(u32::MAX);
    base.max(HANDSHAKE_PER_MEMBER.saturating_mul(members))
}

/// The deadlines of a member: dialing (retries with backoff until `connect`), each handshake,
/// a write that makes no progress (`stall`) and the orderly close (`close`), and the waits of
/// the commands built on it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Dialing a peer, retries included.
    pub connect: Duration,
    /// One handshake, at least: a group of N members allows N x [`HANDSHAKE_PER_MEMBER`]
    /// (see [`handshake_deadline`]).
    pub handshake: Duration,
    /// A node waiting for the root's job.
    pub join: Duration,
    /// Connecting to tree neighbours and waiting for Go.
    pub setup: Duration,
    /// Hearing nothing at all while running (and a broadcast receiver hearing nothing from its
    /// parent).
    pub idle: Duration,
    /// A write making no progress.
    pub stall: Duration,
    /// A connected peer sending nothing at all, not even an answer to the link probe's pings
    /// (a process stopped or hung, a silent peer): it is declared failed. Bytes read count as
    /// something, a frame still arriving among them (a large frame on a slow link). Checked
    /// only while the collective runs and probes (every connection then carries pings both
    /// ways, answered also by nodes that have finished).
    pub silent: Duration,
    /// A node waiting for the root's Bye after its report.
    pub finish: Duration,
    /// The orderly close of all connections.
    pub close: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(20),
            handshake: Duration::from_secs(5),
            join: Duration::from_secs(300),
            setup: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            stall: Duration::from_secs(30),
            silent: Duration::from_secs(10),
            finish: Duration::from_secs(300),
            close: Duration::from_secs(3),
        }
    }
}

impl Timeouts {
    /// Every deadline set to `d` (tests that want failures to show quickly); `join` and
    /// `finish` get twice that.
    pub fn all(d: Duration) -> Timeouts {
        Timeouts {
            connect: d,
            handshake: d,
            join: d * 2,
            setup: d,
            idle: d,
            stall: d,
            silent: d.max(Duration::from_secs(2)),
            finish: d * 2,
            close: d.min(Duration::from_secs(3)),
        }
    }
}
