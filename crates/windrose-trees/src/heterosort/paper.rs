//! The paper's Fig. 1 and Table 1 as printed, and ours beside them, for `windrose reproduce
//! heterosort` and the golden tests. Paper numbers (1-based) throughout.

use super::{Cycle, Torus};
use serde::{Deserialize, Serialize};

/// Fig. 1: the snake order on the 4 x 4 grid, north row first.
pub const FIGURE1: [[usize; 4]; 4] = [
    [1, 2, 3, 4],
    [8, 7, 6, 5],
    [9, 10, 11, 12],
    [16, 15, 14, 13],
];

/// Table 1 as printed: (node, odd-cycle list, even-cycle list).
pub const TABLE1: [(usize, [usize; 5], [usize; 5]); 16] = [
    (1, [1, 2, 4, 8, 16], [1, 16, 4, 8, 2]),
    (2, [1, 2, 3, 7, 15], [1, 2, 15, 7, 3]),
    (3, [2, 3, 4, 6, 14], [2, 3, 14, 6, 4]),
    (4, [1, 3, 4, 5, 13], [3, 1, 4, 13, 5]),
    (5, [4, 5, 6, 8, 12], [4, 5, 12, 8, 6]),
    (6, [3, 5, 6, 7, 11], [5, 3, 6, 11, 7]),
    (7, [2, 6, 7, 8, 10], [6, 2, 7, 10, 8]),
    (8, [1, 5, 7, 8, 9], [7, 5, 1, 8, 9]),
    (9, [8, 9, 10, 12, 16], [8, 9, 16, 12, 10]),
    (10, [7, 9, 10, 11, 15], [9, 7, 10, 15, 11]),
    (11, [6, 10, 11, 12, 14], [10, 6, 11, 14, 12]),
    (12, [5, 9, 11, 12, 13], [11, 9, 5, 12, 13]),
    (13, [4, 12, 13, 14, 16], [12, 4, 13, 16, 14]),
    (14, [3, 11, 13, 14, 15], [13, 11, 3, 14, 15]),
    (15, [2, 10, 14, 15, 16], [14, 10, 2, 15, 16]),
    (16, [1, 9, 13, 15, 16], [15, 9, 13, 1, 16]),
];

/// One row of Table 1: the paper's lists and ours.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table1Row {
    pub node: usize,
    pub odd_paper: Vec<usize>,
    pub odd_ours: Vec<usize>,
    pub even_paper: Vec<usize>,
    pub even_ours: Vec<usize>,
}

impl Table1Row {
    /// True when our odd-cycle list is the paper's.
    pub fn odd_matches(&self) -> bool {
        self.odd_paper == self.odd_ours
    }

    /// True when our even-cycle list is the paper's.
    pub fn even_matches(&self) -> bool {
        self.even_paper == self.even_ours
    }
}

/// Our Fig. 1, north row first, in paper numbers.
pub fn figure1() -> Vec<Vec<usize>> {
    Torus::new(4, 4)
        .expect("4 x 4 is a torus")
        .grid()
        .into_iter()
        .map(|row| row.into_iter().map(|n| n + 1).collect())
        .collect()
}

/// Table 1 with our lists beside the paper's.
pub fn table1() -> Vec<Table1Row> {
    let t = Torus::new(4, 4).expect("4 x 4 is a torus");
    TABLE1
        .iter()
        .map(|&(node, odd, even)| Table1Row {
            node,
            odd_paper: odd.to_vec(),
            odd_ours: t.paper_list(node, Cycle::Odd).expect("a 4 x 4 node"),
            even_paper: even.to_vec(),
            even_ours: t.paper_list(node, Cycle::Even).expect("a 4 x 4 node"),
        })
        .collect()
}
