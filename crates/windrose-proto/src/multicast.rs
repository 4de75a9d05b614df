//! One entry point for the four piece-based multicasts, so the simulator, the runtime and the
//! CLI build any of them the same way: [`MulticastProtocol`] names them, [`MulticastSpec`] holds
//! each one's parameters and [`build`] makes a node's machine.
//!
//! | protocol     | machine                                   | who decides what moves    |
//! |--------------|-------------------------------------------|---------------------------|
//! | `mob`        | [`crate::mob::Mob`]                       | receivers (steal pieces)  |
//! | `bittorrent` | [`crate::bittorrent::BitTorrent`]         | receivers, tit-for-tat    |
//! | `balanced`   | [`crate::tree_multicast::TreeMulticast`]  | the root's plan (shaped)  |
//! | `magpie`     | [`crate::tree_multicast::TreeMulticast`]  | one fixed tree, unshaped  |
//!
//! All four move the pieces of a [`crate::pieces::Manifest`] every node holds from the start,
//! verify each piece before storing, announcing or forwarding it, deliver the data in order and
//! finish only when every node holds every piece (so no node stops serving early).

use crate::bittorrent::{BitTorrent, BitTorrentConfig};
use crate::mob::{Mob, MobConfig};
use crate::node::{node_rng, Protocol, SetupError};
use crate::pieces::SwarmSetup;
use crate::tree_multicast::{TreeMulticast, TreeMulticastConfig, TreePlan};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use windrose_model::NodeId;

/// The piece-based multicast protocols.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MulticastProtocol {
    /// Multicast Optimizing Bandwidth (seed 002).
    Mob,
    /// The original BitTorrent client as the MOB paper describes it.
    #[serde(rename = "bittorrent")]
    BitTorrent,
    /// Balanced Multicasting: several shaped trees planned from the capacities at the start.
    Balanced,
    /// MagPIe: binomial trees inside clusters, a flat tree between cluster coordinators.
    Magpie,
}

impl MulticastProtocol {
    /// Every protocol, in the order the papers' figures list them.
    pub const ALL: [MulticastProtocol; 4] = [
        MulticastProtocol::Balanced,
        MulticastProtocol::BitTorrent,
        MulticastProtocol::Mob,
        MulticastProtocol::Magpie,
    ];

    /// The name on the command line and in files: `mob`, `bittorrent`, `balanced`, `magpie`.
    pub fn name(self) -> &'static str {
        match self {
            MulticastProtocol::Mob => "mob",
            MulticastProtocol::BitTorrent => "bittorrent",
            MulticastProtocol::Balanced => "balanced",
            MulticastProtocol::Magpie => "magpie",
        }
    }

    /// The name of a run of this protocol in reports and figures: [`name`](Self::name), and
    /// `mob-paper` for seed 002's own MOB ([`MobVariant::Paper`](crate::mob::MobVariant)),
    /// so that its results are never mistaken for ours.
    pub fn label(self, variant: crate::mob::MobVariant) -> &'static str {
        match (self, variant) {
            (MulticastProtocol::Mob, crate::mob::MobVariant::Paper) => "mob-paper",
            _ => self.name(),
        }
    }
}

impl fmt::Display for MulticastProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MulticastProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        MulticastProtocol::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown multicast protocol {s:?} (expected mob, bittorrent, balanced or magpie)")
            })
    }
}

/// A protocol with its parameters: what every node of one run is built from.
#[derive(Clone, Debug)]
pub enum MulticastSpec {
    /// MOB.
    Mob(MobConfig),
    /// BitTorrent.
    BitTorrent(BitTorrentConfig),
    /// Pieces pushed down planned trees (Balanced Multicasting, MagPIe).
    Trees {
        /// The trees and their rates.
        plan: Arc<TreePlan>,
        /// Frame and shaping knobs.
        config: TreeMulticastConfig,
    },
}

/// The machine of `node` restarting mid-run with the pieces it kept, for any protocol of
/// `spec` ([`Mob::rejoin`], [`BitTorrent::rejoin`], [`TreeMulticast::rejoin`]); every kept
/// piece is verified before it counts.
pub fn build_rejoining(
    node: NodeId,
    setup: &SwarmSetup,
    spec: &MulticastSpec,
    run_seed: u64,
    held: Vec<(u32, Bytes)>,
) -> Result<Box<dyn Protocol + Send>, SetupError> {
    // A restarted process draws from a generator of its own, not its first life's.
    let rng = node_rng(run_seed ^ 0x7265_6a6f_696e, node);
    Ok(match spec {
        MulticastSpec::Mob(c) => Box::new(Mob::rejoin(node, setup, c.clone(), rng, held)?),
        MulticastSpec::BitTorrent(c) => {
            Box::new(BitTorrent::rejoin(node, setup, c.clone(), rng, held)?)
        }
        MulticastSpec::Trees { plan, config } => Box::new(TreeMulticast::rejoin(
            node,
            setup,
            plan.clone(),
            *config,
            held,
        )?),
    })
}

/// The machine of `node` for one run: `data` only at the root, randomness from
/// [`node_rng`]`(run_seed, node)`.
///
/// Errors: as the protocol's constructor (a node outside the layout, data at the wrong node,
/// bad parameters).
pub fn build(
    node: NodeId,
    setup: &SwarmSetup,
    data: Option<Bytes>,
    spec: &MulticastSpec,
    run_seed: u64,
) -> Result<Box<dyn Protocol + Send>, SetupError> {
    Ok(match spec {
        MulticastSpec::Mob(c) => Box::new(Mob::new(
            node,
            setup,
            data,
            c.clone(),
            node_rng(run_seed, node),
        )?),
        MulticastSpec::BitTorrent(c) => Box::new(BitTorrent::new(
            node,
            setup,
            data,
            c.clone(),
            node_rng(run_seed, node),
        )?),
        MulticastSpec::Trees { plan, config } => Box::new(TreeMulticast::new(
            node,
            setup,
            data,
            plan.clone(),
            *config,
        )?),
    })
}
