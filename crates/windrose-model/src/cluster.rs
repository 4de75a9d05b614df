//! Cluster cost model: nodes grouped into clusters, one cost inside each cluster and one per
//! pair of clusters, plus sparse per-link overrides. Memory is O(N + C² + overrides), so it
//! serves N in the hundreds of thousands where a dense matrix would not fit.

use crate::costs::{check_new_cost, check_value};
use crate::{ClusterId, CostUnit, LinkCosts, LinkCostsMut, ModelError, NodeId};
use std::collections::HashMap;

/// Costs defined by cluster membership, with individual links overridable (e.g. one link that
/// became congested).
#[derive(Clone, Debug)]
pub struct ClusterCosts {
    unit: CostUnit,
    cluster_of: Vec<ClusterId>,
    /// Cost between two distinct nodes of the same cluster, per cluster.
    intra: Vec<f64>,
    /// C×C table, row-major; `inter[c*C + d]` is the cost between clusters c and d (c ≠ d).
    inter: Vec<f64>,
    overrides: HashMap<(u32, u32), f64>,
}

impl ClusterCosts {
    /// Builds the model from each node's cluster, the intra-cluster cost of each cluster and the
    /// C×C inter-cluster table (symmetric; its diagonal is ignored).
    pub fn new(
        unit: CostUnit,
        cluster_of: Vec<ClusterId>,
        intra: Vec<f64>,
        inter: Vec<Vec<f64>>,
    ) -> Result<Self, ModelError> {
        let c = intra.len();
        if cluster_of.is_empty() || c == 0 {
            return Err(ModelError::Empty);
        }
        for &cl in &cluster_of {
            if cl.index() >= c {
                return Err(ModelError::UnknownCluster {
                    cluster: cl.0,
                    cluster_count: c,
                });
            }
        }
        for (i, row) in inter.iter().enumerate() {
            if row.len() != c {
                return Err(ModelError::NotSquare {
                    row: i,
                    len: row.len(),
                    expected: c,
                });
            }
        }
        if inter.len() != c {
            return Err(ModelError::NotSquare {
                row: inter.len(),
                len: 0,
                expected: c,
            });
        }
        for (k, &v) in intra.iter().enumerate() {
            check_value(NodeId::from(k), NodeId::from(k), v)?;
        }
        let mut flat = vec![0.0; c * c];
        for i in 0..c {
            for j in 0..c {
                if i == j {
                    continue;
                }
                let v = inter[i][j];
                check_value(NodeId::from(i), NodeId::from(j), v)?;
                if inter[j][i] != v {
                    return Err(ModelError::Asymmetric {
                        a: NodeId::from(i),
                        b: NodeId::from(j),
                        ab: v,
                        ba: inter[j][i],
                    });
                }
                flat[i * c + j] = v;
            }
        }
        Ok(ClusterCosts {
            unit,
            cluster_of,
            intra,
            inter: flat,
            overrides: HashMap::new(),
        })
    }

    /// `clusters` clusters of `per_cluster` nodes each, node i in cluster i / per_cluster.
    pub fn uniform(
        unit: CostUnit,
        clusters: usize,
        per_cluster: usize,
        intra: f64,
        inter: f64,
    ) -> Result<Self, ModelError> {
        let cluster_of = (0..clusters * per_cluster)
            .map(|i| ClusterId::from(i / per_cluster.max(1)))
            .collect();
        let table = (0..clusters)
            .map(|i| {
                (0..clusters)
                    .map(|j| if i == j { 0.0 } else { inter })
                    .collect()
            })
            .collect();
        Self::new(unit, cluster_of, vec![intra; clusters], table)
    }

    /// Number of clusters.
    pub fn cluster_count(&self) -> usize {
        self.intra.len()
    }

    /// The cluster of `node`.
    pub fn cluster_of(&self, node: NodeId) -> ClusterId {
        self.cluster_of[node.index()]
    }

    /// Every node's cluster, indexed by node id.
    pub fn clusters(&self) -> &[ClusterId] {
        &self.cluster_of
    }

    /// Adds a node to `cluster`; returns its id.
    pub fn push_node(&mut self, cluster: ClusterId) -> Result<NodeId, ModelError> {
        if cluster.index() >= self.cluster_count() {
            return Err(ModelError::UnknownCluster {
                cluster: cluster.0,
                cluster_count: self.cluster_count(),
            });
        }
        self.cluster_of.push(cluster);
        Ok(NodeId::from(self.cluster_of.len() - 1))
    }

    /// Sets the cost between two clusters (both directions), keeping per-link overrides.
    pub fn set_inter(&mut self, a: ClusterId, b: ClusterId, value: f64) -> Result<(), ModelError> {
        let c = self.cluster_count();
        for x in [a, b] {
            if x.index() >= c {
                return Err(ModelError::UnknownCluster {
                    cluster: x.0,
                    cluster_count: c,
                });
            }
        }
        check_value(NodeId(a.0), NodeId(b.0), value)?;
        self.inter[a.index() * c + b.index()] = value;
        self.inter[b.index() * c + a.index()] = value;
        Ok(())
    }

    /// Number of per-link overrides currently stored.
    pub fn override_count(&self) -> usize {
        self.overrides.len()
    }

    #[inline]
    fn table_cost(&self, a: NodeId, b: NodeId) -> f64 {
        let (ca, cb) = (self.cluster_of[a.index()], self.cluster_of[b.index()]);
        if ca == cb {
            self.intra[ca.index()]
        } else {
            self.inter[ca.index() * self.intra.len() + cb.index()]
        }
    }
}

#[inline]
fn key(a: NodeId, b: NodeId) -> (u32, u32) {
    (a.0.min(b.0), a.0.max(b.0))
}

impl LinkCosts for ClusterCosts {
    #[inline]
    fn node_count(&self) -> usize {
        self.cluster_of.len()
    }
    #[inline]
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        if a == b {
            return 0.0;
        }
        if !self.overrides.is_empty() {
            if let Some(&v) = self.overrides.get(&key(a, b)) {
                return v;
            }
        }
        self.table_cost(a, b)
    }
    fn unit(&self) -> CostUnit {
        self.unit
    }
}

impl LinkCostsMut for ClusterCosts {
    /// Overrides one link; setting it back to the table value removes the override.
    fn set_cost(&mut self, a: NodeId, b: NodeId, value: f64) -> Result<(), ModelError> {
        if !check_new_cost(self, a, b, value)? {
            return Ok(());
        }
        if self.table_cost(a, b) == value {
            self.overrides.remove(&key(a, b));
        } else {
            self.overrides.insert(key(a, b), value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_follow_clusters_and_overrides() {
        let mut m = ClusterCosts::uniform(CostUnit::LatencyMs, 3, 4, 0.1, 20.0).unwrap();
        assert_eq!(m.node_count(), 12);
        assert_eq!(m.cost(NodeId(0), NodeId(3)), 0.1);
        assert_eq!(m.cost(NodeId(0), NodeId(4)), 20.0);
        assert_eq!(m.cost(NodeId(5), NodeId(5)), 0.0);
        m.set_cost(NodeId(4), NodeId(0), 99.0).unwrap();
        assert_eq!(m.cost(NodeId(0), NodeId(4)), 99.0);
        assert_eq!(m.override_count(), 1);
        m.set_cost(NodeId(0), NodeId(4), 20.0).unwrap();
        assert_eq!(m.override_count(), 0);
        let n = m.push_node(ClusterId(2)).unwrap();
        assert_eq!(m.cost(n, NodeId(11)), 0.1);
        assert!(m.push_node(ClusterId(7)).is_err());
    }
}
