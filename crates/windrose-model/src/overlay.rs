//! A few changed links on top of a shared base model, without copying the base. Experiments
//! run many "what if this link got slower" variants of one topology this way.

use crate::costs::check_new_cost;
use crate::{CostUnit, LinkCosts, LinkCostsMut, ModelError, NodeId};

/// `base` with a short list of per-link overrides. Lookups scan the list, so keep it short
/// (a handful of changed links); use [`crate::ClusterCosts`] overrides for many.
#[derive(Clone, Debug)]
pub struct Overlay<'a, C: LinkCosts + ?Sized> {
    base: &'a C,
    changed: Vec<((u32, u32), f64)>,
}

impl<'a, C: LinkCosts + ?Sized> Overlay<'a, C> {
    /// No changes yet: costs are the base's.
    pub fn new(base: &'a C) -> Self {
        Overlay {
            base,
            changed: Vec::new(),
        }
    }

    /// Drops every override.
    pub fn clear(&mut self) {
        self.changed.clear();
    }
}

#[inline]
fn key(a: NodeId, b: NodeId) -> (u32, u32) {
    (a.0.min(b.0), a.0.max(b.0))
}

impl<C: LinkCosts + ?Sized> LinkCosts for Overlay<'_, C> {
    fn node_count(&self) -> usize {
        self.base.node_count()
    }
    #[inline]
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        if !self.changed.is_empty() {
            let k = key(a, b);
            if let Some(&(_, v)) = self.changed.iter().find(|(kk, _)| *kk == k) {
                return v;
            }
        }
        self.base.cost(a, b)
    }
    fn unit(&self) -> CostUnit {
        self.base.unit()
    }
}

impl<C: LinkCosts + ?Sized> LinkCostsMut for Overlay<'_, C> {
    fn set_cost(&mut self, a: NodeId, b: NodeId, value: f64) -> Result<(), ModelError> {
        if !check_new_cost(self, a, b, value)? {
            return Ok(());
        }
        let k = key(a, b);
        self.changed.retain(|(kk, _)| *kk != k);
        self.changed.push((k, value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::table1;

    #[test]
    fn overrides_one_link_both_ways() {
        let base = table1();
        let mut o = Overlay::new(&base);
        o.set_cost(NodeId(5), NodeId(0), 30.0).unwrap();
        assert_eq!(o.cost(NodeId(0), NodeId(5)), 30.0);
        assert_eq!(o.cost(NodeId(5), NodeId(0)), 30.0);
        assert_eq!(o.cost(NodeId(1), NodeId(4)), 5.0);
        assert!(o.set_cost(NodeId(0), NodeId(9), 1.0).is_err());
    }
}
