//! Binomial tree positions, MPICH convention: position 0 is the root, `parent(p) = p & (p - 1)`,
//! and position p > 0 has children `p + 2^k` for every `2^k` below p's lowest set bit (the root:
//! every `2^k < n`). Works for any number of positions `n`, not only powers of two.
//!
//! The subtree of position p > 0 is exactly the contiguous range `p .. min(p + lowbit(p), n)`;
//! the root's is `0..n`. The adaptive trees rely on this: position order is a depth-first order
//! in which every subtree is an interval.

/// A position in a binomial tree (0 = root).
pub type Position = usize;

/// Lowest set bit of `p` (p > 0).
#[inline]
pub fn lowbit(p: Position) -> Position {
    debug_assert!(p > 0);
    p & p.wrapping_neg()
}

/// Parent of position `p > 0`.
#[inline]
pub fn parent(p: Position) -> Position {
    debug_assert!(p > 0);
    p & (p - 1)
}

/// One past the last position of p's subtree, in a tree of `n` positions.
#[inline]
pub fn subtree_end(p: Position, n: usize) -> Position {
    if p == 0 {
        n
    } else {
        (p + lowbit(p)).min(n)
    }
}

/// Children of `p` in a tree of `n` positions, largest subtree first (the order in which a
/// binomial broadcast sends, and in which Balanced-Path fills them).
pub fn children(p: Position, n: usize) -> impl Iterator<Item = Position> {
    // Child p + s exists for every power of two s < lowbit(p) (any s for the root) with p + s < n.
    let first = if n <= p + 1 {
        0
    } else {
        let room = n - 1 - p;
        let by_room = 1usize << (usize::BITS - 1 - room.leading_zeros());
        if p == 0 {
            by_room
        } else {
            by_room.min(lowbit(p) >> 1)
        }
    };
    std::iter::successors((first > 0).then_some(first), |&s| (s > 1).then_some(s >> 1))
        .map(move |s| p + s)
}

/// Number of children of `p` in a tree of `n` positions.
pub fn child_count(p: Position, n: usize) -> usize {
    children(p, n).count()
}

/// True when `p` has no children in a tree of `n` positions.
#[inline]
pub fn is_leaf(p: Position, n: usize) -> bool {
    p + 1 >= n || (p > 0 && p & 1 == 1)
}

/// Depth of `p` (edges from the root): its number of set bits.
#[inline]
pub fn depth(p: Position) -> u32 {
    p.count_ones()
}

/// Ancestors of `p` from its parent up to and including the root.
pub fn ancestors(p: Position) -> impl Iterator<Item = Position> {
    std::iter::successors(if p == 0 { None } else { Some(parent(p)) }, |&a| {
        if a == 0 {
            None
        } else {
            Some(parent(a))
        }
    })
}

/// Leaves of a tree of `n` positions, ascending (the order the paper's tables use).
pub fn leaves(n: usize) -> impl Iterator<Item = Position> {
    (0..n).filter(move |&p| is_leaf(p, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_children(p: usize, n: usize) -> Vec<usize> {
        let mut c: Vec<usize> = (1..n).filter(|&q| parent(q) == p).collect();
        c.sort_by(|a, b| b.cmp(a));
        c
    }

    #[test]
    fn children_match_parent_function() {
        for n in 1..70 {
            for p in 0..n {
                let c: Vec<_> = children(p, n).collect();
                assert_eq!(c, brute_children(p, n), "p={p} n={n}");
                assert_eq!(is_leaf(p, n), c.is_empty(), "p={p} n={n}");
                let sub: Vec<usize> = (0..n)
                    .filter(|&q| q == p || ancestors(q).any(|a| a == p))
                    .collect();
                assert_eq!(
                    sub,
                    (p..subtree_end(p, n)).collect::<Vec<_>>(),
                    "p={p} n={n}"
                );
            }
        }
    }

    #[test]
    fn paper_conventions() {
        assert_eq!(children(0, 8).collect::<Vec<_>>(), vec![4, 2, 1]);
        assert_eq!(children(4, 8).collect::<Vec<_>>(), vec![6, 5]);
        assert_eq!(leaves(8).collect::<Vec<_>>(), vec![1, 3, 5, 7]);
        assert_eq!(children(0, 9).collect::<Vec<_>>(), vec![8, 4, 2, 1]);
        assert_eq!(leaves(7).collect::<Vec<_>>(), vec![1, 3, 5, 6]);
        assert_eq!(ancestors(7).collect::<Vec<_>>(), vec![6, 4, 0]);
    }
}
