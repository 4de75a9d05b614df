//! The distance tables of the adaptive-trees paper (Figueira & Mendes), as fixtures for golden
//! tests and `windrose reproduce adaptive-trees`.

use crate::{CostUnit, DenseCostMatrix};

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
