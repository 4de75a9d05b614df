//! Properties of the conceptual torus and the slices on every shape up to 12 x 12, checked
//! against an independent construction (the snake built by walking the rows, neighbours by
//! grid arithmetic on positions) and against what trading needs (symmetric partners, every
//! record sent to exactly one node).

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use windrose_trees::heterosort::{
    equal_slices, weighted_slices, Cycle, HeteroSortError, PartnerKind, Position, Torus,
};

/// The snake by walking: row by row, odd rows reversed; `walk[rank]` is the position.
fn walk(rows: usize, cols: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for r in 0..rows {
        let cs: Vec<usize> = if r % 2 == 0 {
            (0..cols).collect()
        } else {
            (0..cols).rev().collect()
        };
        out.extend(cs.into_iter().map(|c| (r, c)));
    }
    out
}

/// Partners by position arithmetic: the distinct torus neighbours other than the node, with
/// the kind the paper's definitions give.
fn expected_partners(rows: usize, cols: usize, node: usize) -> BTreeMap<usize, PartnerKind> {
    let w = walk(rows, cols);
    let rank: BTreeMap<(usize, usize), usize> =
        w.iter().enumerate().map(|(i, &p)| (p, i)).collect();
    let (r, c) = w[node];
    let cands = [
        ((r + rows - 1) % rows, c),
        ((r + 1) % rows, c),
        (r, (c + cols - 1) % cols),
        (r, (c + 1) % cols),
    ];
    let mut out = BTreeMap::new();
    for p in cands {
        let m = rank[&p];
        if m == node {
            continue;
        }
        let direct = r.abs_diff(p.0) + c.abs_diff(p.1) == 1;
        let kind = if m.abs_diff(node) == 1 {
            PartnerKind::Sequence
        } else if direct {
            PartnerKind::Transcoil
        } else {
            PartnerKind::Transedge
        };
        out.insert(m, kind);
    }
    out
}

fn distinct_in_a_line(len: usize) -> usize {
    match len {
        1 => 0,
        2 => 1,
        _ => 2,
    }
}

fn snake_is_a_bijection_along_grid_links(rows: usize, cols: usize) -> Result<(), TestCaseError> {
    let t = Torus::new(rows, cols).unwrap();
    let w = walk(rows, cols);
    let mut seen = BTreeSet::new();
    for (rank, &(row, col)) in w.iter().enumerate() {
        let p = Position { row, col };
        prop_assert_eq!(t.rank_of(p).unwrap(), rank);
        prop_assert_eq!(t.position_of(rank).unwrap(), p);
        prop_assert_eq!(t.grid()[row][col], rank);
        prop_assert!(seen.insert(rank));
    }
    prop_assert_eq!(seen.len(), rows * cols);
    // Consecutive ranks are neighbours on the plain grid: no express pathway needed.
    for rank in 1..rows * cols {
        let (a, b) = (
            t.position_of(rank - 1).unwrap(),
            t.position_of(rank).unwrap(),
        );
        prop_assert_eq!(a.row.abs_diff(b.row) + a.col.abs_diff(b.col), 1);
    }
    Ok(())
}

fn partners_match_position_arithmetic(rows: usize, cols: usize) -> Result<(), TestCaseError> {
    let t = Torus::new(rows, cols).unwrap();
    for node in 0..rows * cols {
        let got: BTreeMap<usize, PartnerKind> = t
            .partners(node)
            .unwrap()
            .into_iter()
            .map(|p| (p.node, p.kind))
            .collect();
        prop_assert_eq!(&got, &expected_partners(rows, cols, node), "node {}", node);
        prop_assert_eq!(
            got.len(),
            distinct_in_a_line(rows) + distinct_in_a_line(cols),
            "node {}",
            node
        );
        // Neighbours in each direction agree with positions, wrap-around included.
        let p = t.position_of(node).unwrap();
        let n = t.neighbours(node).unwrap();
        let at = |row, col| t.rank_of(Position { row, col }).unwrap();
        prop_assert_eq!(n.north, at((p.row + rows - 1) % rows, p.col));
        prop_assert_eq!(n.south, at((p.row + 1) % rows, p.col));
        prop_assert_eq!(n.west, at(p.row, (p.col + cols - 1) % cols));
        prop_assert_eq!(n.east, at(p.row, (p.col + 1) % cols));
    }
    Ok(())
}

fn lists_are_symmetric_and_ordered(rows: usize, cols: usize) -> Result<(), TestCaseError> {
    let t = Torus::new(rows, cols).unwrap();
    let n = rows * cols;
    for cycle in [Cycle::Odd, Cycle::Even] {
        let lists: Vec<Vec<usize>> = (0..n).map(|v| t.trading_list(v, cycle).unwrap()).collect();
        let mut appearances = vec![0usize; n];
        for (v, list) in lists.iter().enumerate() {
            let set: BTreeSet<usize> = list.iter().copied().collect();
            prop_assert_eq!(set.len(), list.len(), "duplicate in {:?}", list);
            prop_assert!(list.len() <= 5);
            prop_assert_eq!(list.iter().filter(|&&m| m == v).count(), 1);
            let me = list.iter().position(|&m| m == v).unwrap();
            let (below, above) = (&list[..me], &list[me + 1..]);
            prop_assert!(below.iter().all(|&m| m < v) && above.iter().all(|&m| m > v));
            match cycle {
                Cycle::Odd => prop_assert!(list.windows(2).all(|w| w[0] < w[1])),
                Cycle::Even => {
                    prop_assert!(below.windows(2).all(|w| w[0] > w[1]));
                    prop_assert!(above.windows(2).all(|w| w[0] > w[1]));
                }
            }
            for &m in list {
                appearances[m] += 1;
                // If v trades with m, m trades with v.
                prop_assert!(lists[m].contains(&v), "{} lists {} but not back", v, m);
            }
        }
        // A node is in its own list and in each partner's: as many lists as its own holds.
        for v in 0..n {
            prop_assert_eq!(appearances[v], lists[v].len());
        }
    }
    Ok(())
}

/// Every shape from 1 x 1 to 12 x 12, each node.
#[test]
fn every_shape_up_to_12_by_12() {
    for rows in 1..=12 {
        for cols in 1..=12 {
            let at = format!("{rows} x {cols}");
            snake_is_a_bijection_along_grid_links(rows, cols).expect(&at);
            partners_match_position_arithmetic(rows, cols).expect(&at);
            lists_are_symmetric_and_ordered(rows, cols).expect(&at);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn one_trading_cycle_moves_every_record_exactly_once(
        rows in 1usize..=6,
        cols in 1usize..=6,
        odd in any::<bool>(),
        loads in prop::collection::vec(0usize..40, 36),
    ) {
        let t = Torus::new(rows, cols).unwrap();
        let cycle = if odd { Cycle::Odd } else { Cycle::Even };
        let n = rows * cols;
        // Node v holds records (v, 0..load) already sorted.
        let mut received: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
        let mut senders: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        for (v, &load) in loads.iter().enumerate().take(n) {
            let data: Vec<(usize, usize)> = (0..load).map(|i| (v, i)).collect();
            let slices = t.slices(v, cycle, data.len()).unwrap();
            let to: Vec<usize> = slices.iter().map(|s| s.to).collect();
            prop_assert_eq!(to, t.trading_list(v, cycle).unwrap());
            let mut next = 0;
            for s in slices {
                prop_assert_eq!(s.range.start, next);
                next = s.range.end;
                received[s.to].extend_from_slice(&data[s.range]);
                senders[s.to].insert(v);
            }
            prop_assert_eq!(next, data.len());
        }
        let mut all: Vec<(usize, usize)> = received.concat();
        all.sort_unstable();
        let mut want: Vec<(usize, usize)> = (0..n).flat_map(|v| (0..loads[v]).map(move |i| (v, i))).collect();
        want.sort_unstable();
        prop_assert_eq!(all, want);
        // Each node hears from itself and exactly its partners (empty slices included).
        for (v, heard) in senders.iter().enumerate() {
            let expect: BTreeSet<usize> = t.trading_list(v, cycle).unwrap().into_iter().collect();
            prop_assert_eq!(heard, &expect);
        }
    }

    #[test]
    fn equal_slices_cover_and_balance(items in 0usize..10_000, parts in 1usize..=9) {
        let s = equal_slices(items, parts);
        prop_assert_eq!(s.len(), parts);
        prop_assert_eq!(s[0].start, 0);
        prop_assert_eq!(s[parts - 1].end, items);
        prop_assert!(s.windows(2).all(|w| w[0].end == w[1].start));
        let (lo, hi) = (s.iter().map(|r| r.len()).min().unwrap(), s.iter().map(|r| r.len()).max().unwrap());
        prop_assert!(hi - lo <= 1);
    }

    #[test]
    fn weighted_slices_are_within_one_of_their_share(
        items in 0usize..100_000,
        weights in prop::collection::vec(0u64..1_000, 1..=9),
    ) {
        let total: u64 = weights.iter().sum();
        prop_assume!(total > 0);
        let s = weighted_slices(items, &weights).unwrap();
        prop_assert_eq!(s.len(), weights.len());
        prop_assert_eq!(s[0].start, 0);
        prop_assert_eq!(s.last().unwrap().end, items);
        prop_assert!(s.windows(2).all(|w| w[0].end == w[1].start));
        for (r, &w) in s.iter().zip(&weights) {
            // |len - items * w / total| < 1, in integers.
            let len = r.len() as i128 * total as i128;
            let share = items as i128 * w as i128;
            prop_assert!((len - share).abs() < total as i128, "{:?} for weight {}", r, w);
            if w == 0 {
                prop_assert_eq!(r.len(), 0);
            }
        }
    }
}

#[test]
fn small_tori_never_list_a_node_twice() {
    // 1 x 1: nobody to trade with. 1 x 2: west and east are the same node. 2 x 2: north and
    // south coincide, and so do west and east.
    let list = |r, c, v| {
        Torus::new(r, c)
            .unwrap()
            .trading_list(v, Cycle::Odd)
            .unwrap()
    };
    assert_eq!(list(1, 1, 0), vec![0]);
    assert_eq!(list(1, 2, 0), vec![0, 1]);
    assert_eq!(list(2, 1, 1), vec![0, 1]);
    assert_eq!(list(2, 2, 0), vec![0, 1, 3]);
    assert_eq!(list(1, 5, 0), vec![0, 1, 4]);
    let t = Torus::new(1, 5).unwrap();
    let kinds: Vec<PartnerKind> = t.partners(0).unwrap().iter().map(|p| p.kind).collect();
    assert_eq!(kinds, vec![PartnerKind::Sequence, PartnerKind::Transedge]);
    // 2 x 2: node 0's south neighbour 3 is reached directly as well as through the wrap.
    let t = Torus::new(2, 2).unwrap();
    let kinds: Vec<(usize, PartnerKind)> = t
        .partners(0)
        .unwrap()
        .iter()
        .map(|p| (p.node, p.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![(1, PartnerKind::Sequence), (3, PartnerKind::Transcoil)]
    );
    // One slice per list entry: a 1 x 1 torus keeps everything.
    let s = Torus::new(1, 1).unwrap().slices(0, Cycle::Even, 7).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].to, s[0].range.clone()), (0, 0..7));
}

#[test]
fn cycles_count_from_one() {
    assert_eq!(Cycle::of(1), Cycle::Odd);
    assert_eq!(Cycle::of(2), Cycle::Even);
    assert_eq!(Cycle::of(17), Cycle::Odd);
}

#[test]
fn errors_name_what_and_where() {
    let e = Torus::new(0, 4).unwrap_err();
    assert_eq!(e, HeteroSortError::EmptyTorus { rows: 0, cols: 4 });
    assert_eq!(
        e.to_string(),
        "a torus needs at least 1 row and 1 column, got 0 x 4"
    );
    assert!(Torus::new(3, 0).is_err());
    assert!(matches!(
        Torus::new(usize::MAX, 2),
        Err(HeteroSortError::TooLarge { .. })
    ));
    let t = Torus::new(4, 4).unwrap();
    assert_eq!(
        t.partners(16).unwrap_err().to_string(),
        "node 16 is outside the 4 x 4 torus (nodes 0 to 15)"
    );
    assert_eq!(
        t.paper_list(0, Cycle::Odd).unwrap_err().to_string(),
        "paper node 0 is outside the 4 x 4 torus (paper numbers 1 to 16)"
    );
    assert!(t.paper_list(17, Cycle::Odd).is_err());
    assert_eq!(
        t.rank_of(Position { row: 4, col: 0 })
            .unwrap_err()
            .to_string(),
        "position (row 4, column 0) is outside the 4 x 4 grid"
    );
    assert!(t.slices(99, Cycle::Odd, 5).is_err());
    assert_eq!(
        weighted_slices(10, &[0, 0]).unwrap_err().to_string(),
        "slice weights must hold at least one positive weight, got [0, 0]"
    );
    assert!(weighted_slices(10, &[]).is_err());
}
