//! A monotone priority queue (radix heap) for progressive filling.
//!
//! Keys are non-negative `f64`s given as their IEEE-754 bit patterns, which order like the
//! numbers. A radix heap requires that no key pushed is below the last key popped, which holds
//! for fill levels: they never decrease while filling. Push is O(1); pop is amortized
//! O(number of key bits) per element, in practice a few bucket moves, and needs no comparisons
//! of whole entries — much cheaper than a binary heap's sift-down in the solver's inner loop.
//!
//! Order among equal keys: last pushed, first popped (deterministic, since pushes are).

/// An entry: the key's bits and a payload (link index, version stamp).
pub(super) type Entry = (u64, u32, u32);

/// Radix heap over `u64` keys with `(u32, u32)` payloads.
#[derive(Clone, Debug)]
pub(super) struct RadixHeap {
    /// The last key popped (or 0): every stored key is at least this.
    last: u64,
    /// `buckets[0]` holds keys equal to `last`; `buckets[i]`, i ≥ 1, keys whose highest bit
    /// differing from `last` is bit `i - 1`.
    buckets: Vec<Vec<Entry>>,
    /// Bit `i` set when `buckets[i]` is not empty.
    occupied: u128,
    len: usize,
}

impl Default for RadixHeap {
    fn default() -> Self {
        RadixHeap {
            last: 0,
            buckets: vec![Vec::new(); 65],
            occupied: 0,
            len: 0,
        }
    }
}

impl RadixHeap {
    fn bucket(&self, key: u64) -> usize {
        (64 - (key ^ self.last).leading_zeros()) as usize
    }

    /// Empties the heap and accepts any key again.
    pub(super) fn clear(&mut self) {
        while self.occupied != 0 {
            let i = self.occupied.trailing_zeros() as usize;
            self.buckets[i].clear();
            self.occupied &= !(1u128 << i);
        }
        self.last = 0;
        self.len = 0;
    }

    /// Adds an entry. Its key must not be below the last key popped.
    pub(super) fn push(&mut self, e: Entry) {
        debug_assert!(e.0 >= self.last, "radix heap keys must not decrease");
        let b = self.bucket(e.0);
        self.buckets[b].push(e);
        self.occupied |= 1u128 << b;
        self.len += 1;
    }

    /// Removes an entry with the smallest key.
    pub(super) fn pop(&mut self) -> Option<Entry> {
        if self.len == 0 {
            return None;
        }
        if self.buckets[0].is_empty() {
            // Redistribute the first non-empty bucket around its smallest key: every entry
            // lands in a lower bucket, the smallest ones in bucket 0.
            let i = (self.occupied & !1).trailing_zeros() as usize;
            let moved = std::mem::take(&mut self.buckets[i]);
            self.occupied &= !(1u128 << i);
            self.last = moved.iter().map(|e| e.0).min().expect("occupied bucket");
            for &e in &moved {
                let b = self.bucket(e.0);
                self.buckets[b].push(e);
                self.occupied |= 1u128 << b;
            }
            // Give the allocation back to the bucket for reuse.
            let mut moved = moved;
            moved.clear();
            if self.buckets[i].capacity() == 0 {
                self.buckets[i] = moved;
            }
        }
        let e = self.buckets[0].pop().expect("bucket 0 filled above");
        if self.buckets[0].is_empty() {
            self.occupied &= !1;
        }
        self.len -= 1;
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn pops_in_key_order_with_monotone_pushes() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut h = RadixHeap::default();
        for round in 0..20 {
            h.clear();
            let mut reference: Vec<u64> = Vec::new();
            for k in 0..200u32 {
                let key = rng.gen_range(0.0..1e9f64).to_bits();
                h.push((key, k, round));
                reference.push(key);
            }
            let mut last = 0;
            let mut popped = Vec::new();
            while let Some((key, _, _)) = h.pop() {
                assert!(key >= last);
                last = key;
                popped.push(key);
                // Push some keys above the current minimum, as re-queued fill levels are.
                if rng.gen_bool(0.3) {
                    let up = f64::from_bits(key) * rng.gen_range(1.0..2.0);
                    h.push((up.to_bits(), 0, 0));
                    reference.push(up.to_bits());
                }
            }
            reference.sort_unstable();
            assert_eq!(popped, reference);
        }
    }
}
