//! Seeded random topologies, as in the experiments of the adaptive-trees paper: every pair of
//! nodes is a distance drawn uniformly from `0..=max_hops` (symmetric, zero diagonal).

use crate::{CostUnit, DenseCostMatrix};
use rand::Rng;

/// A random hop-distance matrix of `n` nodes with distances uniform in `0..=max_hops`.
///
/// Stored as f32 (exact for small integers) to halve memory in large experiments. The same RNG
/// state always gives the same matrix.
pub fn uniform_hops<R: Rng + ?Sized>(rng: &mut R, n: usize, max_hops: u32) -> DenseCostMatrix<f32> {
    DenseCostMatrix::from_fn(CostUnit::Hops, n, |_, _| rng.gen_range(0..=max_hops) as f64)
}

/// A random row of distances for a node joining `n` existing nodes, uniform in `0..=max_hops`.
pub fn uniform_hops_row<R: Rng + ?Sized>(rng: &mut R, n: usize, max_hops: u32) -> Vec<f64> {
    (0..n).map(|_| rng.gen_range(0..=max_hops) as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinkCosts, NodeId};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn seeded_and_in_range() {
        let a = uniform_hops(&mut ChaCha8Rng::seed_from_u64(7), 50, 10);
        let b = uniform_hops(&mut ChaCha8Rng::seed_from_u64(7), 50, 10);
        assert_eq!(a.to_rows(), b.to_rows());
        let mut seen = [false; 11];
        for i in 0..50u32 {
            assert_eq!(a.cost(NodeId(i), NodeId(i)), 0.0);
            for j in 0..50u32 {
                let v = a.cost(NodeId(i), NodeId(j));
                assert_eq!(v, a.cost(NodeId(j), NodeId(i)));
                assert!((0.0..=10.0).contains(&v) && v.fract() == 0.0);
                if i != j {
                    seen[v as usize] = true;
                }
            }
        }
        assert!(seen.iter().all(|&s| s), "all distances 0..=10 occur");
    }
}
