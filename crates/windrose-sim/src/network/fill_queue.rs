//! The priority queue of progressive filling: links by fill level.
//!
//! Keys are non-negative `f64`s given as their IEEE-754 bit patterns, which order like the
//! numbers. A region holds a few dozen links (about 25 at MOB N = 1,024), so a binary heap of
//! entries compared as one `u128` beats a radix heap there: a radix heap's pop redistributes a
//! bucket around its smallest key, and with float bit patterns as keys nearly every pop did
//! (17 % of a MOB run's time went to it). Push and pop are O(log n).
//!
//! Most regions are much smaller still (a pipelined broadcast re-shares 2-3 connections over
//! about 8 links per solve): up to [`SMALL`] entries live in a plain vector and a pop scans it
//! for the smallest word, which costs less than keeping a heap in order; the entries move to the
//! heap when more are queued. Both pop the smallest word, so the order is the same.
//!
//! Order among equal keys: last pushed, first popped (a push counter in the low bits of the
//! compared word), the order the radix heap had, so the filling fixes tied links in the same
//! order and its rates are the same to the last bit. The push counter also names the entry:
//! the filling keeps each link's latest one and treats the others as out of date, so an entry
//! is one 16-byte word.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Entries kept in a plain vector, scanned at each pop, before they move to the heap.
const SMALL: usize = 16;

/// Min-queue of `(key, link)` entries; ties popped last pushed first.
///
/// Entries are words `key << 64 | !seq << 32 | link`: `seq` (the push number) is unique, so the
/// word orders the entries by key, then last pushed first.
#[derive(Clone, Debug, Default)]
pub(super) struct FillQueue {
    /// The entries while there are at most [`SMALL`] of them (then `heap` is empty).
    small: Vec<u128>,
    /// The entries once more were queued (then `small` is empty).
    heap: BinaryHeap<Reverse<u128>>,
    seq: u32,
}

impl FillQueue {
    /// Empties the queue.
    pub(super) fn clear(&mut self) {
        self.small.clear();
        self.heap.clear();
        self.seq = 0;
    }

    /// Adds an entry and returns its push number (below `u32::MAX`).
    pub(super) fn push(&mut self, key: u64, link: u32) -> u32 {
        let seq = self.seq;
        assert!(seq < u32::MAX, "2^32 - 1 pushes in one filling");
        self.seq += 1;
        let word = (key as u128) << 64 | ((!seq as u128) << 32) | link as u128;
        if self.heap.is_empty() && self.small.len() < SMALL {
            self.small.push(word);
        } else {
            self.heap.extend(self.small.drain(..).map(Reverse));
            self.heap.push(Reverse(word));
        }
        seq
    }

    /// Removes an entry with the smallest key (of those, the last pushed): `(key, link, seq)`.
    pub(super) fn pop(&mut self) -> Option<(u64, u32, u32)> {
        let word = if self.small.is_empty() {
            self.heap.pop()?.0
        } else {
            let mut at = 0;
            for (i, &w) in self.small.iter().enumerate().skip(1) {
                if w < self.small[at] {
                    at = i;
                }
            }
            self.small.swap_remove(at)
        };
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
        for _ in 0..200 {
            q.clear();
            let mut reference: Vec<(u64, u32, u32)> = Vec::new(); // key, seq, link
            let mut seq = 0;
            let mut push = |q: &mut FillQueue, reference: &mut Vec<_>, key: u64, link: u32| {
                assert_eq!(q.push(key, link), seq);
                reference.push((key, seq, link));
                seq += 1;
            };
            // Below and above the vector's size, so that both ways of keeping entries are checked.
            let count = if rng.gen_bool(0.5) {
                rng.gen_range(1..=SMALL as u32)
            } else {
                100
            };
            for link in 0..count {
                let key = (rng.gen_range(0..8u32) as f64 * 0.5).to_bits();
                push(&mut q, &mut reference, key, link);
            }
            while !reference.is_empty() {
                let best = (0..reference.len())
                    .min_by_key(|&i| (reference[i].0, Reverse(reference[i].1)))
                    .unwrap();
                let (key, seq, link) = reference.swap_remove(best);
                assert_eq!(q.pop(), Some((key, link, seq)));
                // Up to two pushes after a pop: a full vector then moves to the heap.
                for p in [0.3, 0.2] {
                    if rng.gen_bool(p) {
                        let up = f64::from_bits(key) + rng.gen_range(0..3u32) as f64 * 0.5;
                        push(
                            &mut q,
                            &mut reference,
                            up.to_bits(),
                            rng.gen_range(0..count),
                        );
                    }
                }
            }
            assert_eq!(q.pop(), None);
        }
    }
}
