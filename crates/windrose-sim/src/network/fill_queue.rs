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
//! order and its rates are the same to the last bit.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// An entry: the key's bits and a payload (link index, version stamp).
pub(super) type Entry = (u64, u32, u32);

/// Min-heap over `u64` keys with `(u32, u32)` payloads; ties popped last pushed first.
#[derive(Clone, Debug, Default)]
pub(super) struct FillQueue {
    /// `(key << 64 | !seq << 32 | link, version)`: the first word alone orders the entries
    /// (`seq` is unique), the version only rides along.
    heap: BinaryHeap<Reverse<Packed>>,
    seq: u32,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Packed(u128, u32);

impl Ord for Packed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for Packed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl FillQueue {
    /// Empties the queue.
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.seq = 0;
    }

    /// Adds an entry.
    pub(super) fn push(&mut self, (key, link, version): Entry) {
        let word = (key as u128) << 64 | ((!self.seq as u128) << 32) | link as u128;
        self.seq = self.seq.checked_add(1).expect("2^32 pushes in one filling");
        self.heap.push(Reverse(Packed(word, version)));
    }

    /// Removes an entry with the smallest key (of those, the last pushed).
    pub(super) fn pop(&mut self) -> Option<Entry> {
        let Reverse(Packed(word, version)) = self.heap.pop()?;
        Some(((word >> 64) as u64, word as u32, version))
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
        for round in 0..50u32 {
            q.clear();
            let mut reference: Vec<(u64, u32, u32, u32)> = Vec::new(); // key, seq, link, version
            let mut seq = 0;
            let mut push = |q: &mut FillQueue, reference: &mut Vec<_>, key: u64, link: u32| {
                q.push((key, link, round));
                reference.push((key, seq, link, round));
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
                let (key, _, link, version) = reference.swap_remove(best);
                assert_eq!(q.pop(), Some((key, link, version)));
                if rng.gen_bool(0.3) {
                    let up = f64::from_bits(key) + rng.gen_range(0..3u32) as f64 * 0.5;
                    push(&mut q, &mut reference, up.to_bits(), rng.gen_range(0..100));
                }
            }
            assert_eq!(q.pop(), None);
        }
    }
}
