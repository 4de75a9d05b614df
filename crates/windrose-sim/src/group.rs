//! A long-lived group in the simulator: one [`Host`] per node of a platform, so the session
//! (announce, ready, go, reports, heartbeats, failure detection, leaving) runs here exactly as
//! in the runtime, and collectives are started by applications with
//! [`Simulation::input_at`]. Eager sessions, and their announcement relayed down a broadcast's
//! tree ([`HostConfig::eager`], [`HostConfig::relay_announce`]), are set in `configure`: the
//! simulator then times a member's start by its parent's copy, as the runtime would.

use crate::engine::{SimConfig, SimError, Simulation};
use bytes::Bytes;
use std::sync::Arc;
use windrose_model::platform::Platform;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::host::{App, AppRequest, Host, HostConfig};
use windrose_proto::{Input, SetupError, TransferId};

/// Every node of `platform` and its cluster, as a host's member list.
pub fn members_of(platform: &Platform) -> Arc<[(NodeId, ClusterId)]> {
    (0..platform.node_count() as u32)
        .map(|i| (NodeId(i), platform.cluster_of(NodeId(i))))
        .collect()
}

/// A simulation with one host per node of `platform`, each configured by `configure` from
/// [`HostConfig::new`] (seeded with `seed`).
pub fn group(
    platform: Platform,
    config: SimConfig,
    seed: u64,
    configure: impl Fn(&mut HostConfig),
) -> Result<Simulation, GroupError> {
    let members = members_of(&platform);
    let mut sim = Simulation::new(platform, config);
    for &(node, _) in members.iter() {
        let mut c = HostConfig::new(node, members.clone(), seed);
        configure(&mut c);
        sim.add_node(Host::new(c).map_err(|e| GroupError::Host { node, source: e })?)?;
    }
    Ok(sim)
}

/// The input that asks a host to start `spec` with `data`.
pub fn start_input(spec: CollectiveSpec, data: Bytes, transfer: Option<TransferId>) -> Input {
    Input::App(App::new(AppRequest::StartCollective {
        spec,
        data,
        transfer,
    }))
}

/// The input that asks a host to leave once its collectives have ended.
pub fn leave_input() -> Input {
    Input::App(App::new(AppRequest::Leave))
}

/// Why a group cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// A host refused its configuration.
    #[error("host of node {node}: {source}")]
    Host {
        /// The node.
        node: NodeId,
        /// Why.
        source: SetupError,
    },
    /// The engine refused the host.
    #[error(transparent)]
    Sim(#[from] SimError),
}
