//! The worked examples of Yang et al., "Reconfigurable Parallel Sorting and Load Balancing on a
//! Beowulf Cluster: HeteroSort", as golden tests: Fig. 1's snake order, node 7's partners in the
//! text, Table 1's 32 trading lists, and Fig. 2's 5 x 5 mesh with two failed nodes.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use windrose_trees::heterosort::{
    paper, soo, Cycle, HeteroSortError, Mesh, PartnerKind, SooParams, StoreForward, Torus,
};

/// Table 1 as printed: (paper node, odd-cycle list, even-cycle list).
const TABLE1: [(usize, [usize; 5], [usize; 5]); 16] = [
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

/// The even-cycle lists where the paper departs from "partners below descending, self,
/// partners above descending": (paper node, what the rule gives). Both swap the two middle
/// partners of a node whose partners all lie on one side of it; we found no simple rule that
/// fits all 16 lists (see PAPER-NOTES, section 003), so we read them as typos.
const EVEN_TYPOS: [(usize, [usize; 5]); 2] = [(1, [1, 16, 8, 4, 2]), (16, [15, 13, 9, 1, 16])];

fn paper4x4() -> Torus {
    Torus::new(4, 4).unwrap()
}

#[test]
fn figure1_snake_order() {
    let paper: Vec<Vec<usize>> = paper4x4()
        .grid()
        .into_iter()
        .map(|row| row.into_iter().map(|n| n + 1).collect())
        .collect();
    assert_eq!(
        paper,
        vec![
            vec![1, 2, 3, 4],
            vec![8, 7, 6, 5],
            vec![9, 10, 11, 12],
            vec![16, 15, 14, 13]
        ]
    );
}

#[test]
fn node7_partners_and_kinds_as_the_text_describes() {
    let t = paper4x4();
    let seven = t.from_paper(7).unwrap();
    let got: Vec<(usize, PartnerKind)> = t
        .partners(seven)
        .unwrap()
        .into_iter()
        .map(|p| (p.node + 1, p.kind))
        .collect();
    // "The neighbors for Node 7 are 2, 6, 8, and 10"; 2 and 10 are transcoil neighbours.
    assert_eq!(
        got,
        vec![
            (2, PartnerKind::Transcoil),
            (6, PartnerKind::Sequence),
            (8, PartnerKind::Sequence),
            (10, PartnerKind::Transcoil),
        ]
    );
    // "The lowest quarter goes to Node 2, the next lowest quarter goes to Node 6, the third
    // quarter goes to Node 8, and the highest quarter goes to Node 10" (with 7 keeping the
    // middle slice: five slices, not quarters).
    let s = t.slices(seven, Cycle::Odd, 100).unwrap();
    let to: Vec<usize> = s.iter().map(|x| x.to + 1).collect();
    assert_eq!(to, vec![2, 6, 7, 8, 10]);
    assert!(s.iter().all(|x| x.range.len() == 20));
}

#[test]
fn edge_nodes_get_transedge_partners() {
    let t = paper4x4();
    let kinds = |paper: usize| -> Vec<(usize, PartnerKind)> {
        t.partners(paper - 1)
            .unwrap()
            .into_iter()
            .map(|p| (p.node + 1, p.kind))
            .collect()
    };
    // Node 1 (north-west corner): east 2 on the sequence, south 8 across a coil, west 4 and
    // north 16 through the wrap-around.
    assert_eq!(
        kinds(1),
        vec![
            (2, PartnerKind::Sequence),
            (4, PartnerKind::Transedge),
            (8, PartnerKind::Transcoil),
            (16, PartnerKind::Transedge),
        ]
    );
    // Node 4 (north-east corner): 5 below it is also next on the sequence.
    assert_eq!(
        kinds(4),
        vec![
            (1, PartnerKind::Transedge),
            (3, PartnerKind::Sequence),
            (5, PartnerKind::Sequence),
            (13, PartnerKind::Transedge),
        ]
    );
}

#[test]
fn table1_odd_cycle_all_16() {
    let t = paper4x4();
    for (node, odd, _) in TABLE1 {
        assert_eq!(t.paper_list(node, Cycle::Odd).unwrap(), odd, "node {node}");
    }
}

#[test]
fn table1_even_cycle_14_of_16_and_two_typos() {
    let t = paper4x4();
    let mut matched = 0;
    for (node, _, even) in TABLE1 {
        let got = t.paper_list(node, Cycle::Even).unwrap();
        match EVEN_TYPOS.iter().find(|x| x.0 == node) {
            None => {
                assert_eq!(got, even, "node {node}");
                matched += 1;
            }
            Some(&(_, rule)) => {
                assert_eq!(got, rule, "node {node}");
                assert_ne!(got, even, "node {node}");
                // Same partners, only the order differs.
                let (mut a, mut b) = (got.clone(), even.to_vec());
                a.sort_unstable();
                b.sort_unstable();
                assert_eq!(a, b, "node {node}");
            }
        }
    }
    assert_eq!(matched, 14);
}

#[test]
fn reproduce_tables_match_this_transcription() {
    // The library's copy of Table 1 (printed by `windrose reproduce heterosort`) is a second
    // transcription of the paper: it must agree with the one above.
    assert_eq!(paper::TABLE1, TABLE1);
    assert_eq!(
        paper::figure1(),
        paper::FIGURE1
            .iter()
            .map(|r| r.to_vec())
            .collect::<Vec<_>>()
    );
    let rows = paper::table1();
    assert!(rows.iter().all(|r| r.odd_matches()));
    let differ: Vec<usize> = rows
        .iter()
        .filter(|r| !r.even_matches())
        .map(|r| r.node)
        .collect();
    assert_eq!(differ, vec![1, 16]);
}

#[test]
fn table1_caption_node1_keeps_the_lowest_slice() {
    // "node 1 falls below all of its neighbors and thus receives the lowest quarter".
    let t = paper4x4();
    for cycle in [Cycle::Odd, Cycle::Even] {
        let s = t.slices(0, cycle, 10).unwrap();
        assert_eq!(s[0].to, 0);
        assert_eq!(s[0].range, 0..2);
    }
}

#[test]
fn figure2_cutting_a_corner_off_is_refused() {
    let mut m = Mesh::grid(5, 5).unwrap();
    m.fail_node(m.grid_id(0, 1).unwrap()).unwrap();
    m.fail_node(m.grid_id(1, 0).unwrap()).unwrap();
    let e = StoreForward::new(&m).unwrap_err();
    assert_eq!(e, HeteroSortError::Split { a: 0, b: 2 });
    assert_eq!(
        e.to_string(),
        "live nodes 0 and 2 cannot reach each other: failed nodes or links split the mesh"
    );
}

#[test]
fn figure2_five_by_five_with_two_failed_nodes() {
    // The figure's failed nodes are not in the text, so try every pair. Colour the grid like
    // a chessboard: every link joins two colours, and a step between two nodes of one colour
    // crosses an even number (at least 2) of links. A path over the b black and w white live
    // nodes has at least |b - w| - 1 such steps (count the colours along it), so its cost is at
    // least 22 + max(0, |b - w| - 1): 22 when the failed nodes differ in colour (a path along
    // links alone, as the figure shows), 24 when both are black or both white, the case where
    // "strict near neighborliness is not achievable". The bound holds for every path, so a SOO
    // path that meets it is optimal.
    let params = SooParams::default();
    let mut reached_bound = 0;
    let mut pairs = 0;
    for a in 0..25 {
        for b in a + 1..25 {
            let mut m = Mesh::grid(5, 5).unwrap();
            m.fail_node(a).unwrap();
            m.fail_node(b).unwrap();
            let sf = match StoreForward::new(&m) {
                Ok(sf) => sf,
                Err(HeteroSortError::Split { .. }) => continue,
                Err(e) => panic!("{e}"),
            };
            pairs += 1;
            let black = |n: usize| (n / 5 + n % 5).is_multiple_of(2);
            let blacks = sf.live().iter().filter(|&&n| black(n)).count() as u64;
            let whites = 23 - blacks;
            let bound = 22 + blacks.abs_diff(whites).saturating_sub(1);
            let mut rng = ChaCha8Rng::seed_from_u64((a * 25 + b) as u64);
            let p = soo(&sf, &params, &mut rng).unwrap();
            assert_eq!(sf.path_cost(&p.order).unwrap(), p.cost);
            if p.cost == 22 {
                // Drawn as in the figure, places 1 to 23 follow grid links.
                let cells = p.on_grid(&m).unwrap();
                let at = |place: usize| {
                    (0..25)
                        .find(|&n| cells[n / 5][n % 5] == Some(place))
                        .unwrap()
                };
                for place in 1..23 {
                    let (x, y) = (at(place), at(place + 1));
                    assert_eq!((x / 5).abs_diff(y / 5) + (x % 5).abs_diff(y % 5), 1);
                }
                assert_eq!((cells[a / 5][a % 5], cells[b / 5][b % 5]), (None, None));
            }
            assert!(p.cost >= bound, "failed {a} and {b}: {p:?}");
            if p.cost == bound {
                reached_bound += 1;
            }
        }
    }
    // 300 pairs, minus the 4 that cut a corner node off (its two neighbours failed); SOO meets
    // the bound, hence the optimum, on every one of the 296.
    assert_eq!(pairs, 296);
    assert_eq!(reached_bound, pairs);
}
