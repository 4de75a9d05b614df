//! An emulated multi-cluster network on one Linux machine, for running windrose's protocols
//! for real against the same scenario files the simulator reads (issue: "the emulated
//! multi-cluster testbed").
//!
//! A platform (`windrose_model::platform`) becomes: one network namespace per node, a router
//! namespace per cluster holding the cluster's bridge, and a WAN core namespace; every node
//! link, cluster access link and WAN pair gets the platform's capacity through traffic control
//! (`tbf` on node links, `htb` on cluster uplinks with one class per destination cluster, `htb`
//! on cluster downlinks), and a user-space delay line in the core gives every WAN pair its
//! one-way latency (this kernel has no netem). See [`plan`] for the layout, [`testbed`] for the
//! lifecycle, [`delay_line`] for the latency and [`cpu`] for the nodes' CPU quotas (each
//! node's compute speed).
//!
//! What it does not emulate: latency inside a cluster (the bridge adds none), and IPv6 (turned
//! off in every namespace so nothing bypasses the shapers).
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! let platform = Platform::builder()
//!     .cluster(ClusterSpec::uniform(2, 1.25e7, 1.25e9, 1e-4))
//!     .cluster(ClusterSpec::uniform(2, 1.25e7, 1.25e9, 1e-4))
//!     .wan_all(5e6, 0.01)
//!     .build()
//!     .unwrap();
//! // The plan is pure: what `up` would create, without touching the system.
//! let plan = windrose_testbed::plan::plan("demo", &platform).unwrap();
//! assert_eq!(plan.namespaces.len(), 4 + 2 + 1);
//! ```

#![warn(missing_docs)]

pub mod cpu;
pub mod delay_line;
pub mod limits;
pub mod measure;
pub mod plan;
pub mod sys;
pub mod testbed;

use std::path::PathBuf;

/// Why a testbed operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// This machine cannot host a testbed.
    #[error("testbed unavailable: {why}")]
    Unavailable {
        /// Why.
        why: String,
    },
    /// A testbed name that is not 1-12 characters of `[a-z0-9]`.
    #[error("bad testbed name {name:?}: use 1 to 12 characters from a-z and 0-9")]
    BadName {
        /// The name.
        name: String,
    },
    /// A platform too big for the testbed's addressing.
    #[error("platform too big for a testbed: {what}")]
    TooBig {
        /// What is too big.
        what: String,
    },
    /// A testbed of that name is already up.
    #[error("testbed {name:?} is already up (take it down with `windrose testbed down {name}`)")]
    AlreadyUp {
        /// The name.
        name: String,
    },
    /// No testbed of that name is up.
    #[error("testbed {name:?} is not up")]
    NotUp {
        /// The name.
        name: String,
    },
    /// A value outside the range the testbed emulates (see [`limits`]).
    #[error("{field} = {value} is out of range: {range}")]
    OutOfRange {
        /// The field, e.g. `latency_s of wan:0:1`.
        field: String,
        /// The value given, as written compactly.
        value: String,
        /// The range and why.
        range: String,
    },
    /// A link the testbed cannot change.
    #[error("link: {link}")]
    BadLink {
        /// Which and why.
        link: String,
    },
    /// `up` was interrupted (SIGINT or SIGTERM); what it had made is removed again.
    #[error("interrupted: testbed {name} taken down again ({removed} namespaces removed)")]
    Interrupted {
        /// The testbed's name.
        name: String,
        /// Namespaces removed.
        removed: usize,
    },
    /// A command failed.
    #[error("{command}: {error}")]
    Command {
        /// The command (with its namespace).
        command: String,
        /// Its standard error, or why it could not run.
        error: String,
    },
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: String,
    },
}
