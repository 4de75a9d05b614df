//! Tree costs that count sharing: tree edges that cross the same bottleneck (a WAN path from
//! one site to another) divide its bandwidth.
//!
//! The seed-000 cost of a tree (its costliest root-to-leaf path, each link priced alone) ranks
//! trees by their slow links, but it cannot see two tree edges crossing one WAN path: in a
//! pipelined broadcast both copies move at once and each gets part of the path's bandwidth.
//! For a bandwidth-bound message that is what the broadcast's time hinges on (issue 16's
//! series: swaps ranked by the plain cost traded a tree that crosses every WAN path once for
//! cheaper-looking trees that cross one path two or three times, and ran twice as slow).
//!
//! Here a link's cost depends on how many tree edges share its path: [`SharedPaths`] names the
//! path of each directed link (data flows from parent to child; a WAN's two directions are
//! separate paths) and prices a link when `k` tree edges cross its path. The sharing-aware
//! cost of a tree is the costliest root-to-leaf path with every edge priced at its path's
//! count in that tree ([`AdaptiveTree::shared_cost`](crate::adaptive::AdaptiveTree::shared_cost)).
//! [`SiteSharing`] is the live planner's model: a link's own cost plus, for each other tree
//! edge on its path, the time the whole message takes at the link's bandwidth (with `k`
//! copies each gets a `k`-th of the bandwidth, so its bytes take `k` times as long).

use crate::TreeError;
use windrose_model::{ClusterId, LinkCosts, NodeId};

/// Link costs that depend on how many edges of a tree share a link's path.
pub trait SharedPaths {
    /// Number of nodes; valid ids are `0..node_count()`.
    fn node_count(&self) -> usize;
    /// The shared path that data from `from` to `to` crosses, as an index (equal indices:
    /// one bottleneck), or None when the link shares nothing with other tree edges. Indices
    /// should be small: the counts per path are kept in a vector indexed by them.
    fn path(&self, from: NodeId, to: NodeId) -> Option<usize>;
    /// What the link `from` -> `to` adds to a root path when `sharing` tree edges (itself
    /// included, so at least 1) cross its path. With `sharing` = 1 this is the link's cost
    /// alone.
    fn shared_cost(&self, from: NodeId, to: NodeId, sharing: usize) -> f64;
}

/// Sharing between sites: every directed pair of distinct sites is one path (the WAN from
/// one to the other); links inside a site share nothing. A link crossed by `k` tree edges
/// costs `costs(a, b) + (k - 1) * bytes_ms(a, b)`, where `bytes_ms` is the time the whole
/// message takes at the link's own bandwidth: each of the `k` copies gets a `k`-th of it.
#[derive(Clone, Copy, Debug)]
pub struct SiteSharing<'a, C, B> {
    costs: &'a C,
    bytes_ms: &'a B,
    sites: &'a [ClusterId],
    site_count: usize,
}

impl<'a, C: LinkCosts, B: LinkCosts> SiteSharing<'a, C, B> {
    /// The model over `costs` (each link alone), `bytes_ms` (the whole message at each
    /// link's bandwidth, same unit as `costs`) and `sites` (one per node).
    pub fn new(
        costs: &'a C,
        bytes_ms: &'a B,
        sites: &'a [ClusterId],
    ) -> Result<SiteSharing<'a, C, B>, TreeError> {
        let n = costs.node_count();
        if bytes_ms.node_count() != n || sites.len() != n {
            return Err(TreeError::Invalid(format!(
                "sharing model: {n} nodes of costs, {} of message times, {} sites given",
                bytes_ms.node_count(),
                sites.len()
            )));
        }
        let site_count = sites.iter().map(|s| s.index() + 1).max().unwrap_or(0);
        Ok(SiteSharing {
            costs,
            bytes_ms,
            sites,
            site_count,
        })
    }
}

impl<C: LinkCosts, B: LinkCosts> SharedPaths for SiteSharing<'_, C, B> {
    fn node_count(&self) -> usize {
        self.costs.node_count()
    }

    fn path(&self, from: NodeId, to: NodeId) -> Option<usize> {
        let (a, b) = (self.sites[from.index()], self.sites[to.index()]);
        (a != b).then(|| a.index() * self.site_count + b.index())
    }

    fn shared_cost(&self, from: NodeId, to: NodeId, sharing: usize) -> f64 {
        let alone = self.costs.cost(from, to);
        if sharing <= 1 {
            alone
        } else {
            alone + (sharing - 1) as f64 * self.bytes_ms.cost(from, to)
        }
    }
}
