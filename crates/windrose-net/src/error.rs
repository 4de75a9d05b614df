//! Errors of the network driver. Every variant names the node, address, file or frame at fault.

use crate::wire::WireError;
use std::time::Duration;
use windrose_model::NodeId;

/// Why a node or a run failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A group file or group description that cannot be used (names the file, line and column
    /// when it came from a file).
    #[error("{0}")]
    Group(String),
    /// This node's own listening address cannot be bound.
    #[error("node {node}: cannot listen on {addr}: {source}")]
    Bind {
        /// This node.
        node: NodeId,
        /// Its address from the group.
        addr: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A peer could not be reached before the connect deadline.
    #[error("node {peer} at {addr} is unreachable: gave up after {attempts} attempts in {waited:?} (last error: {last})")]
    Unreachable {
        /// The peer.
        peer: NodeId,
        /// Its address.
        addr: String,
        /// Connection attempts made.
        attempts: u32,
        /// Time spent trying.
        waited: Duration,
        /// The last attempt's error.
        last: String,
    },
    /// The handshake with a peer failed: it rejected us, we rejected it, or it broke off.
    #[error("handshake with {who}: {reason}")]
    Handshake {
        /// `node 3 at 127.0.0.4:7000`, or the remote address when the id is not known.
        who: String,
        /// What did not match, in plain words.
        reason: String,
    },
    /// A peer sent bytes that are not valid frames (or closed in the middle of one).
    #[error("node {peer} sent an invalid stream: {source}")]
    Wire {
        /// The peer.
        peer: NodeId,
        /// What was wrong and at which byte of the stream.
        source: WireError,
    },
    /// A protocol machine could not be built from the job (bad tree, bad parameters).
    #[error("cannot set up the collective: {0}")]
    Setup(String),
    /// A peer broke the session rules (an unexpected control frame, a message the protocol
    /// machine rejected).
    #[error("node {peer}: {what}")]
    PeerMisbehaved {
        /// The peer.
        peer: NodeId,
        /// What it did.
        what: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// The root called the run off (a node failed to start, a timeout).
    #[error("the root aborted the run: {0}")]
    Aborted(String),
    /// The run failed at this node (the collective aborted, a peer failed).
    #[error("{0}")]
    Failed(String),
    /// Writing the output file failed.
    #[error("output {path}: {source}")]
    Output {
        /// The output file.
        path: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// Another I/O failure (the message says where).
    #[error("{what}: {source}")]
    Io {
        /// Where it happened.
        what: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

impl NetError {
    /// True when the error is the user's configuration (group file, arguments) rather than the
    /// network: the command line exits with code 2 for these.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, NetError::Group(_) | NetError::Setup(_))
    }
}
