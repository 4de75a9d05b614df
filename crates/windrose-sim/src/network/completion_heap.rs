//! The completion times of the active connections: an indexed min-heap with one entry per
//! connection, moved in place when the connection's rate changes.
//!
//! A lazy heap (a new entry at every rate change, older ones skipped as stale when they
//! surface) pays a full pop for every stale entry and holds up to twice the live entries: at
//! MOB N = 4,096 a solve changes the rates of a few dozen connections, most of which complete
//! only after several more changes, and popping the event heap was 14 % of the run. Here a
//! rate change moves the connection's one entry up or down from where it is (a later time
//! moves down, an earlier one up), and nothing stale is ever popped.
//!
//! Entries are words `time << 32 | connection` (the time as its IEEE-754 bits, non-negative),
//! so they order by time, then connection, as the lazy heap's live entries did: the pop order
//! is the same, whatever the heap's shape. Four children per entry: half the depth of a binary
//! heap for a few more comparisons per level, and the four children share a cache line.

/// `pos` of a connection without an entry.
const ABSENT: u32 = u32::MAX;

/// Children per entry.
const ARITY: usize = 4;

/// Min-heap of `(time, connection)` with at most one entry per connection.
#[derive(Clone, Debug, Default)]
pub(super) struct CompletionHeap {
    heap: Vec<u128>,
    /// Index in `heap` of each connection's entry, or [`ABSENT`].
    pos: Vec<u32>,
}

fn word(time_bits: u64, c: u32) -> u128 {
    (time_bits as u128) << 32 | c as u128
}

fn conn(word: u128) -> u32 {
    word as u32
}

impl CompletionHeap {
    /// Whether connection `c` has an entry.
    #[cfg(test)]
    pub(super) fn contains(&self, c: u32) -> bool {
        self.pos.get(c as usize).is_some_and(|&p| p != ABSENT)
    }

    /// Number of entries.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The smallest entry: `(time bits, connection)`.
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.heap.first().map(|&w| ((w >> 32) as u64, conn(w)))
    }

    /// Asks for the line of connection `c`'s position (see [`crate::prefetch`]), ahead of a
    /// [`set`](Self::set).
    pub(super) fn prefetch(&self, c: u32) {
        crate::prefetch::prefetch(&self.pos, c as usize);
    }

    /// Gives connection `c` the completion time `time_bits` (an IEEE-754 bit pattern of a
    /// non-negative time), adding its entry or moving the one it has.
    pub(super) fn set(&mut self, c: u32, time_bits: u64) {
        assert!(c != ABSENT, "connection index {c} is reserved");
        if self.pos.len() <= c as usize {
            self.pos.resize(c as usize + 1, ABSENT);
        }
        let w = word(time_bits, c);
        let p = self.pos[c as usize];
        if p == ABSENT {
            let at = self.heap.len();
            self.heap.push(w);
            self.sift_up(at, w);
        } else {
            let at = p as usize;
            let old = self.heap[at];
            if w < old {
                self.sift_up(at, w);
            } else {
                self.sift_down(at, w);
            }
        }
    }

    /// Removes connection `c`'s entry, if it has one.
    pub(super) fn remove(&mut self, c: u32) {
        let Some(&p) = self.pos.get(c as usize) else {
            return;
        };
        if p == ABSENT {
            return;
        }
        self.pos[c as usize] = ABSENT;
        let at = p as usize;
        let last = self.heap.pop().expect("an entry is in the heap");
        if at < self.heap.len() {
            if last < self.heap[at] {
                self.sift_up(at, last);
            } else {
                self.sift_down(at, last);
            }
        }
    }

    /// Removes and returns the smallest entry: `(time bits, connection)`.
    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        let top = *self.heap.first()?;
        self.remove(conn(top));
        Some(((top >> 32) as u64, conn(top)))
    }

    /// Empties the heap.
    #[cfg(test)]
    pub(super) fn clear(&mut self) {
        for &w in &self.heap {
            self.pos[conn(w) as usize] = ABSENT;
        }
        self.heap.clear();
    }

    /// Puts `w` in slot `at` and records where its connection's entry is.
    fn place(&mut self, at: usize, w: u128) {
        self.heap[at] = w;
        self.pos[conn(w) as usize] = at as u32;
    }

    /// Places `w` at `at` or above it (a hole at `at`).
    fn sift_up(&mut self, mut at: usize, w: u128) {
        while at > 0 {
            let parent = (at - 1) / ARITY;
            let pw = self.heap[parent];
            if pw <= w {
                break;
            }
            self.place(at, pw);
            at = parent;
        }
        self.place(at, w);
    }

    /// Places `w` at `at` or below it (a hole at `at`).
    fn sift_down(&mut self, mut at: usize, w: u128) {
        let len = self.heap.len();
        loop {
            let first = at * ARITY + 1;
            if first >= len {
                break;
            }
            let end = (first + ARITY).min(len);
            let mut best = first;
            let mut bw = self.heap[first];
            for k in first + 1..end {
                let kw = self.heap[k];
                if kw < bw {
                    best = k;
                    bw = kw;
                }
            }
            if w <= bw {
                break;
            }
            self.place(at, bw);
            at = best;
        }
        self.place(at, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;

    /// Against a brute-force map from connection to time: random sets (new entries, earlier
    /// and later times, ties on time), removals (present or not) and pops, the smallest
    /// `(time, connection)` first.
    #[test]
    fn pops_like_a_sorted_map_under_random_updates() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for round in 0..100 {
            let mut h = CompletionHeap::default();
            let mut reference: BTreeMap<u32, u64> = BTreeMap::new();
            let conns = if round % 2 == 0 { 8 } else { 300 };
            for _ in 0..3000 {
                match rng.gen_range(0..10) {
                    0..=5 => {
                        let c = rng.gen_range(0..conns);
                        // Few distinct times so that ties are common.
                        let t = (rng.gen_range(0..20u32) as f64 * 0.25).to_bits();
                        h.set(c, t);
                        reference.insert(c, t);
                    }
                    6 | 7 => {
                        let c = rng.gen_range(0..conns);
                        h.remove(c);
                        reference.remove(&c);
                    }
                    _ => {
                        let want = reference.iter().map(|(&c, &t)| (t, c)).min();
                        if let Some((_, c)) = want {
                            reference.remove(&c);
                        }
                        assert_eq!(h.pop(), want);
                    }
                }
                assert_eq!(h.len(), reference.len());
                assert_eq!(
                    h.peek(),
                    reference.iter().map(|(&c, &t)| (t, c)).min(),
                    "peek"
                );
                for c in 0..conns {
                    assert_eq!(h.contains(c), reference.contains_key(&c));
                }
            }
            h.clear();
            assert_eq!(h.peek(), None);
            assert!((0..conns).all(|c| !h.contains(c)));
        }
    }
}
