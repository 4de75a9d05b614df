//! Weighted max-min fairness computed independently of the simulator's solver: the reference
//! both network test files check the solver against (every mode of it).

use windrose_model::NodeId;
use windrose_sim::network::{Network, SharingPolicy};

/// The network's active connections and what a reference needs to share the links again.
pub struct Snapshot {
    /// `(src, dst, rate)` of every active connection, in the network's order.
    pub active: Vec<(NodeId, NodeId, f64)>,
    /// Every link's capacity, by link index.
    pub capacity: Vec<f64>,
    /// The link indices each active connection crosses.
    pub routes: Vec<Vec<usize>>,
    /// Each connection's weight under the network's policy (1, or 1 / its route latency).
    pub weights: Vec<f64>,
}

/// The network's state now, for [`brute_force`].
pub fn snapshot(net: &Network) -> Snapshot {
    let p = net.platform();
    let active: Vec<(NodeId, NodeId, f64)> = net.active_connections().collect();
    let capacity = (0..p.link_count())
        .map(|i| p.capacity_bytes_s(p.link_at(i)))
        .collect();
    let routes = active
        .iter()
        .map(|&(s, d, _)| {
            p.route(s, d)
                .links()
                .iter()
                .map(|&l| p.link_index(l))
                .collect()
        })
        .collect();
    let weights = active
        .iter()
        .map(|&(s, d, _)| match net.policy() {
            SharingPolicy::MaxMin => 1.0,
            SharingPolicy::RttWeighted => {
                let lat = p.route(s, d).latency_s();
                if lat > 0.0 {
                    1.0 / lat
                } else {
                    1.0
                }
            }
        })
        .collect();
    Snapshot {
        active,
        capacity,
        routes,
        weights,
    }
}

/// Weighted max-min rates by brute force: repeatedly find the smallest fair share over all
/// links (remaining capacity over the unfixed weight), fix the unfixed flows of every link at
/// that share, and start again. Quadratic; an independent reference for the network's solver.
pub fn brute_force(capacity: &[f64], routes: &[Vec<usize>], weights: &[f64]) -> Vec<f64> {
    let mut rate = vec![f64::NAN; routes.len()];
    let mut fixed = vec![false; routes.len()];
    while fixed.iter().any(|f| !f) {
        // Each link's fair share now: capacity left by the fixed flows over the unfixed weight
        // (None: no unfixed flow crosses it).
        let shares: Vec<Option<f64>> = (capacity.iter().enumerate())
            .map(|(l, &c)| {
                let (mut used, mut w) = (0.0, 0.0);
                for (f, _) in routes.iter().enumerate().filter(|(_, r)| r.contains(&l)) {
                    if fixed[f] {
                        used += rate[f];
                    } else {
                        w += weights[f];
                    }
                }
                (w > 0.0).then(|| (c - used) / w)
            })
            .collect();
        let best = shares
            .iter()
            .flatten()
            .fold(f64::INFINITY, |a, &b| a.min(b));
        let mut to_fix = Vec::new();
        for (l, share) in shares.iter().enumerate() {
            if share.is_some_and(|s| s <= best * (1.0 + 1e-12)) {
                for (f, r) in routes.iter().enumerate() {
                    if !fixed[f] && r.contains(&l) {
                        to_fix.push(f);
                    }
                }
            }
        }
        for f in to_fix {
            if !fixed[f] {
                fixed[f] = true;
                rate[f] = best * weights[f];
            }
        }
    }
    rate
}
