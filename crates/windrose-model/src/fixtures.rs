//! The papers' tables, as fixtures for golden tests and the reproductions: the distance tables
//! of the adaptive-trees paper (Figueira & Mendes, seed 000) and seed 004's site latencies.

use crate::{CostUnit, DenseCostMatrix};

/// Seed 004's Table 1: one-way latencies between its six sites S0..S5, ms (four processes a
/// site: S0 = processes 00-03, ..., S5 = 20-23; PAPER-NOTES 004).
pub const SEED004_SITES_MS: [[f64; 6]; 6] = [
    [0.0, 485.4, 698.9, 14.9, 332.8, 61.4],
    [485.4, 0.0, 364.1, 583.8, 13.5, 490.5],
    [698.9, 364.1, 0.0, 701.2, 371.7, 722.9],
    [14.9, 583.8, 701.2, 0.0, 331.0, 35.1],
    [332.8, 13.5, 371.7, 331.0, 0.0, 355.9],
    [61.4, 490.5, 722.9, 35.1, 355.9, 0.0],
];

/// Table 1: distances in hops between the 8 nodes of the worked example.
pub const TABLE1_HOPS: [[u8; 8]; 8] = [
    [0, 2, 2, 0, 3, 3, 0, 0],
    [2, 0, 0, 2, 5, 5, 2, 2],
    [2, 0, 0, 2, 5, 5, 2, 2],
    [0, 2, 2, 0, 3, 3, 0, 0],
    [3, 5, 5, 3, 0, 0, 3, 3],
    [3, 5, 5, 3, 0, 0, 3, 3],
    [0, 2, 2, 0, 3, 3, 0, 0],
    [0, 2, 2, 0, 3, 3, 0, 0],
];

/// Table 5: Table 1 plus node 8, which joins the tree in Section 4.1.
pub const TABLE5_HOPS: [[u8; 9]; 9] = [
    [0, 2, 2, 0, 3, 3, 0, 0, 4],
    [2, 0, 0, 2, 5, 5, 2, 2, 2],
    [2, 0, 0, 2, 5, 5, 2, 2, 5],
    [0, 2, 2, 0, 3, 3, 0, 0, 0],
    [3, 5, 5, 3, 0, 0, 3, 3, 0],
    [3, 5, 5, 3, 0, 0, 3, 3, 4],
    [0, 2, 2, 0, 3, 3, 0, 0, 4],
    [0, 2, 2, 0, 3, 3, 0, 0, 3],
    [4, 2, 5, 0, 0, 4, 4, 3, 0],
];

fn to_matrix<const N: usize>(t: &[[u8; N]; N]) -> DenseCostMatrix<f64> {
    let rows: Vec<Vec<f64>> = t
        .iter()
        .map(|r| r.iter().map(|&v| v as f64).collect())
        .collect();
    DenseCostMatrix::from_rows(CostUnit::Hops, &rows).expect("paper table is a valid matrix")
}

/// Table 1 as a cost matrix (hops).
pub fn table1() -> DenseCostMatrix<f64> {
    to_matrix(&TABLE1_HOPS)
}

/// Table 5 as a cost matrix (hops).
pub fn table5() -> DenseCostMatrix<f64> {
    to_matrix(&TABLE5_HOPS)
}

/// Node 8's row of Table 5: its distances to nodes 0..=7, as given to a join.
pub fn table5_join_row() -> Vec<f64> {
    TABLE5_HOPS[8][..8].iter().map(|&v| v as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinkCosts, NodeId};

    #[test]
    fn table5_extends_table1() {
        let (t1, t5) = (table1(), table5());
        for a in 0..8u32 {
            for b in 0..8u32 {
                assert_eq!(t1.cost(NodeId(a), NodeId(b)), t5.cost(NodeId(a), NodeId(b)));
            }
        }
        let mut grown = table1();
        grown.push_node(&table5_join_row()).unwrap();
        assert_eq!(grown.to_rows(), t5.to_rows());
    }
}
