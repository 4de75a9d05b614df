//! The priority queue of progressive filling: links by fill level.
//!
//! Keys are non-negative `f64`s given as their IEEE-754 bit patterns, which order like the
//! numbers. A region holds a few dozen links (about 25 at MOB N = 1,024), so a binary heap of
//! entries compared as one `u128` beats a radix heap there: a radix heap's pop redistributes a
//! bucket around its smallest key, and with float bit patterns as keys nearly every pop did
//! (17 % of a MOB run's time went to it). Push and pop are O(log n).
//!
//! Order among equal keys: last pushed, first popped (a push counter in the low bits of the
//! compared word), the order the radix heap had, so the filling fixes tied links in the same
//! order and its rates are the same to the last bit. The push counter also names the entry:
//! the filling keeps each link's latest one and treats the others as out of date, so an entry
//! is one 16-byte word.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Min-heap of `(key, link)` entries; ties popped last pushed first.
#[derive(Clone, Debug, Default)]
pub(super) struct FillQueue {
    /// `key << 64 | !seq << 32 | link`: `seq` (the push number) is unique, so the word orders
    /// the entries by key, then last pushed first.
    heap: BinaryHeap<Reverse<u128>>,
    seq: u32,
}

impl FillQueue {
    /// Empties the queue.
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.seq = 0;
    }

    /// Adds an entry and returns its push number (below `u32::MAX`).
    pub(super) fn push(&mut self, key: u64, link: u32) -> u32 {
        let seq = self.seq;
        assert!(seq < u32::MAX, "2^32 - 1 pushes in one filling");
        self.seq += 1;
        self.heap.push(Reverse(
            (key as u128) << 64 | ((!seq as u128) << 32) | link as u128,
        ));
        seq
    }

    /// Removes an entry with the smallest key (of those, the last pushed): `(key, link, seq)`.
    pub(super) fn pop(&mut self) -> Option<(u64, u32, u32)> {
        let Reverse(word) = self.heap.pop()?;
        Some(((word >> 64) as u64, word as u32, !((word >> 32) as u32)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Against a brute-force queue: smallest key, ties last pushed first; keys drawn from a
    /// few values so that ties are common, pushes interleaved with pops.
    #[test]
    fn pops_smallest_key_then_last_pushed() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut q = FillQueue::default();
        for _ in 0..50 {
            q.clear();
            let mut reference: Vec<(u64, u32, u32)> = Vec::new(); // key, seq, link
            let mut seq = 0;
            let mut push = |q: &mut FillQueue, reference: &mut Vec<_>, key: u64, link: u32| {
                assert_eq!(q.push(key, link), seq);
                reference.push((key, seq, link));
                seq += 1;
            };
            for link in 0..100u32 {
                let key = (rng.gen_range(0..8u32) as f64 * 0.5).to_bits();
                push(&mut q, &mut reference, key, link);
            }
            while !reference.is_empty() {
                let best = (0..reference.len())
                    .min_by_key(|&i| (reference[i].0, Reverse(reference[i].1)))
                    .unwrap();
                let (key, seq, link) = reference.swap_remove(best);
                assert_eq!(q.pop(), Some((key, link, seq)));
                if rng.gen_bool(0.3) {
                    let up = f64::from_bits(key) + rng.gen_range(0..3u32) as f64 * 0.5;
                    push(&mut q, &mut reference, up.to_bits(), rng.gen_range(0..100));
                }
            }
            assert_eq!(q.pop(), None);
        }
    }
}
