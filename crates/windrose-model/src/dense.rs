//! Dense symmetric cost matrix: every pair stored, f32 or f64.

use crate::costs::{check_new_cost, check_value};
use crate::{CostUnit, LinkCosts, LinkCostsMut, ModelError, NodeId};

/// A number a dense matrix can store. `f32` halves the memory of large matrices; `f64` keeps
/// measured latencies exact.
pub trait CostValue: Copy + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// Converts from the f64 all algorithms compute in.
    fn from_f64(v: f64) -> Self;
    /// Converts to f64.
    fn to_f64(self) -> f64;
}

impl CostValue for f64 {
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
}

impl CostValue for f32 {
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

/// A symmetric N×N cost matrix with a zero diagonal.
///
/// Rows are stored with a stride larger than N so that a joining node ([`push_node`]) costs
/// O(N) amortised instead of copying the whole matrix.
///
/// [`push_node`]: DenseCostMatrix::push_node
#[derive(Clone, Debug)]
pub struct DenseCostMatrix<T: CostValue = f64> {
    n: usize,
    stride: usize,
    data: Vec<T>,
    unit: CostUnit,
}

impl<T: CostValue> DenseCostMatrix<T> {
    /// An all-zero matrix of `n` nodes.
    pub fn zeros(unit: CostUnit, n: usize) -> Self {
        DenseCostMatrix {
            n,
            stride: n,
            data: vec![T::default(); n * n],
            unit,
        }
    }

    /// Builds a matrix from full rows, checking it is square, symmetric, finite, non-negative and
    /// zero on the diagonal.
    pub fn from_rows(unit: CostUnit, rows: &[Vec<f64>]) -> Result<Self, ModelError> {
        let n = rows.len();
        if n == 0 {
            return Err(ModelError::Empty);
        }
        for (i, row) in rows.iter().enumerate() {
            if row.len() != n {
                return Err(ModelError::NotSquare {
                    row: i,
                    len: row.len(),
                    expected: n,
                });
            }
        }
        let mut m = Self::zeros(unit, n);
        for (i, row) in rows.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let (a, b) = (NodeId::from(i), NodeId::from(j));
                check_value(a, b, v)?;
                if i == j && v != 0.0 {
                    return Err(ModelError::NonZeroDiagonal { node: a, value: v });
                }
                if j < i && rows[j][i] != v {
                    return Err(ModelError::Asymmetric {
                        a: b,
                        b: a,
                        ab: rows[j][i],
                        ba: v,
                    });
                }
                m.data[i * m.stride + j] = T::from_f64(v);
            }
        }
        Ok(m)
    }

    /// Builds a matrix from a function of the pair `(i, j)` with `i < j`; the diagonal is 0.
    pub fn from_fn(unit: CostUnit, n: usize, mut f: impl FnMut(usize, usize) -> f64) -> Self {
        let mut m = Self::zeros(unit, n);
        // Upper triangle row by row (the order `f` sees pairs in), then mirror it in blocks so
        // the strided writes stay in cache.
        for i in 0..n {
            for j in (i + 1)..n {
                m.data[i * n + j] = T::from_f64(f(i, j));
            }
        }
        const BLOCK: usize = 64;
        for bi in (0..n).step_by(BLOCK) {
            for bj in (bi..n).step_by(BLOCK) {
                for i in bi..(bi + BLOCK).min(n) {
                    for j in bj.max(i + 1)..(bj + BLOCK).min(n) {
                        m.data[j * n + i] = m.data[i * n + j];
                    }
                }
            }
        }
        m
    }

    /// Adds a node whose costs to the existing nodes `0..n` are `row`; returns its id (`n`).
    pub fn push_node(&mut self, row: &[f64]) -> Result<NodeId, ModelError> {
        if row.len() != self.n {
            return Err(ModelError::JoinRowLength {
                len: row.len(),
                expected: self.n,
            });
        }
        let new = NodeId::from(self.n);
        for (j, &v) in row.iter().enumerate() {
            check_value(new, NodeId::from(j), v)?;
        }
        if self.n + 1 > self.stride {
            let new_stride = (self.stride * 2).max(self.n + 1).max(4);
            let mut data = vec![T::default(); new_stride * new_stride];
            for i in 0..self.n {
                data[i * new_stride..i * new_stride + self.n]
                    .copy_from_slice(&self.data[i * self.stride..i * self.stride + self.n]);
            }
            self.data = data;
            self.stride = new_stride;
        }
        let k = self.n;
        for (j, &v) in row.iter().enumerate() {
            self.data[k * self.stride + j] = T::from_f64(v);
            self.data[j * self.stride + k] = T::from_f64(v);
        }
        self.data[k * self.stride + k] = T::default();
        self.n += 1;
        Ok(new)
    }

    /// The costs from `a` to every node, as stored.
    pub fn row(&self, a: NodeId) -> &[T] {
        let i = a.index();
        &self.data[i * self.stride..i * self.stride + self.n]
    }

    /// All rows as f64, e.g. for printing or saving.
    pub fn to_rows(&self) -> Vec<Vec<f64>> {
        (0..self.n)
            .map(|i| {
                self.row(NodeId::from(i))
                    .iter()
                    .map(|v| v.to_f64())
                    .collect()
            })
            .collect()
    }
}

impl<T: CostValue> LinkCosts for DenseCostMatrix<T> {
    #[inline]
    fn node_count(&self) -> usize {
        self.n
    }
    #[inline]
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        debug_assert!(a.index() < self.n && b.index() < self.n);
        self.data[a.index() * self.stride + b.index()].to_f64()
    }
    fn unit(&self) -> CostUnit {
        self.unit
    }
}

impl<T: CostValue> LinkCostsMut for DenseCostMatrix<T> {
    fn set_cost(&mut self, a: NodeId, b: NodeId, value: f64) -> Result<(), ModelError> {
        if !check_new_cost(self, a, b, value)? {
            return Ok(());
        }
        self.data[a.index() * self.stride + b.index()] = T::from_f64(value);
        self.data[b.index() * self.stride + a.index()] = T::from_f64(value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_node_keeps_existing_costs() {
        let mut m = DenseCostMatrix::<f32>::from_fn(CostUnit::Hops, 3, |i, j| (i + j) as f64);
        for k in 3..40 {
            let row: Vec<f64> = (0..k).map(|j| (j * 7 % 5) as f64).collect();
            assert_eq!(m.push_node(&row).unwrap(), NodeId::from(k));
        }
        assert_eq!(m.cost(NodeId(1), NodeId(2)), 3.0);
        assert_eq!(m.cost(NodeId(39), NodeId(4)), (4 * 7 % 5) as f64);
        assert_eq!(m.cost(NodeId(4), NodeId(39)), (4 * 7 % 5) as f64);
        assert_eq!(m.cost(NodeId(39), NodeId(39)), 0.0);
    }

    #[test]
    fn rejects_bad_matrices() {
        let e = DenseCostMatrix::<f64>::from_rows(CostUnit::Hops, &[vec![0.0, 1.0], vec![0.0]]);
        assert!(matches!(e, Err(ModelError::NotSquare { row: 1, .. })));
        let e =
            DenseCostMatrix::<f64>::from_rows(CostUnit::Hops, &[vec![0.0, -1.0], vec![-1.0, 0.0]]);
        assert!(matches!(e, Err(ModelError::Negative { .. })));
        let e = DenseCostMatrix::<f64>::from_rows(
            CostUnit::Hops,
            &[vec![0.0, f64::NAN], vec![f64::NAN, 0.0]],
        );
        assert!(matches!(e, Err(ModelError::NotFinite { .. })));
        let e =
            DenseCostMatrix::<f64>::from_rows(CostUnit::Hops, &[vec![0.0, 1.0], vec![2.0, 0.0]]);
        assert!(matches!(e, Err(ModelError::Asymmetric { .. })));
        assert!(matches!(
            DenseCostMatrix::<f64>::from_rows(CostUnit::Hops, &[]),
            Err(ModelError::Empty)
        ));
    }
}
