//! A max segment tree with lazy range-add and an undo journal.
//!
//! Holds one value per binomial position (its root path cost). Lazy adds are kept in the
//! internal nodes and never pushed down: `max[v] = max(max[2v], max[2v+1]) + lazy[v]`, so a
//! range-add touches O(log N) cells and a global max is O(1). A binomial subtree is an aligned
//! block, i.e. a single node, so adding to it is one write plus a climb that stops early, and
//! "what would the max be after these few subtree adds" is answered without writing anything
//! (one bottom-up pass over the touched ancestor paths).

/// Values indexed `0..len`, range-add, point set/get, range max, global max.
#[derive(Clone, Debug)]
pub struct MaxAddTree {
    len: usize,
    cap: usize,
    max: Vec<f64>,
    lazy: Vec<f64>,
}

impl MaxAddTree {
    /// A tree holding `values`.
    pub fn from_values(values: &[f64]) -> Self {
        Self::with_capacity(values, values.len().next_power_of_two().max(1))
    }

    fn with_capacity(values: &[f64], cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two() && cap >= values.len());
        let mut max = vec![f64::NEG_INFINITY; 2 * cap];
        max[cap..cap + values.len()].copy_from_slice(values);
        for v in (1..cap).rev() {
            max[v] = max[2 * v].max(max[2 * v + 1]);
        }
        MaxAddTree {
            len: values.len(),
            cap,
            max,
            lazy: vec![0.0; 2 * cap],
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Largest value (−∞ when empty).
    #[inline]
    pub fn max(&self) -> f64 {
        self.max[1]
    }

    #[inline]
    fn write(&mut self, v: usize, max: f64, lazy: f64) {
        self.max[v] = max;
        self.lazy[v] = lazy;
    }

    /// Adds `delta` to every value in `lo..hi`.
    pub fn range_add(&mut self, lo: usize, hi: usize, delta: f64) {
        debug_assert!(lo <= hi && hi <= self.len);
        if lo < hi && delta != 0.0 {
            self.add_rec(1, 0, self.cap, lo, hi, delta);
        }
    }

    fn add_rec(&mut self, v: usize, nlo: usize, nhi: usize, lo: usize, hi: usize, d: f64) {
        if lo <= nlo && nhi <= hi {
            let (m, l) = (self.max[v] + d, self.lazy[v] + d);
            self.write(v, m, l);
            return;
        }
        let mid = (nlo + nhi) / 2;
        if lo < mid {
            self.add_rec(2 * v, nlo, mid, lo, hi, d);
        }
        if hi > mid {
            self.add_rec(2 * v + 1, mid, nhi, lo, hi, d);
        }
        let m = self.max[2 * v].max(self.max[2 * v + 1]) + self.lazy[v];
        let l = self.lazy[v];
        self.write(v, m, l);
    }

    /// Adds `delta` to the aligned block `c .. c + lowbit(c)` (a binomial subtree; `c > 0`),
    /// which is a single node of the tree: one write there, then a climb that stops as soon as
    /// a recomputed maximum is unchanged. Cells beyond `len` hold −∞ and stay −∞.
    #[inline]
    pub fn add_subtree(&mut self, c: usize, delta: f64) {
        debug_assert!(c > 0 && c < self.len);
        if delta == 0.0 {
            return;
        }
        let mut v = (self.cap + c) >> c.trailing_zeros();
        let (m, l) = (self.max[v] + delta, self.lazy[v] + delta);
        self.write(v, m, l);
        while v > 1 {
            v >>= 1;
            let (a, b) = (self.max[2 * v], self.max[2 * v + 1]);
            let m = if a >= b { a } else { b } + self.lazy[v];
            if m == self.max[v] {
                break;
            }
            let l = self.lazy[v];
            self.write(v, m, l);
        }
    }

    /// The global max if `delta` were added to each aligned block `c .. c + lowbit(c)` of
    /// `adds` (distinct `c > 0`), computed without writing anything: one bottom-up pass over
    /// the union of the changed nodes' ancestor paths. `adds` is rewritten (node ids, sorted).
    pub fn max_after_subtree_adds(&self, adds: &mut [(usize, f64)]) -> f64 {
        if adds.is_empty() {
            return self.max[1];
        }
        for a in adds.iter_mut() {
            a.0 = (self.cap + a.0) >> a.0.trailing_zeros();
        }
        adds.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
        let depth = |v: usize| usize::BITS - 1 - v.leading_zeros();
        // Dirty nodes of the current level, ascending: (node, new max). At most 2 per swapped
        // position's family per level.
        const W: usize = 8;
        let mut cur = [(0usize, 0.0f64); W];
        let mut nc = 0;
        // Raw max of the new children of each node of `cur` (NaN when it has no dirty child).
        let mut raw = [f64::NAN; W];
        let mut next = [(0usize, 0.0f64); W];
        let mut pi = 0;
        let mut d = depth(adds[0].0);
        loop {
            // Finalize the level: nodes recomputed from children get their lazy (plus any own
            // add, which goes into lazy as a committed add would); add-only nodes get max + delta.
            while pi < adds.len() && depth(adds[pi].0) == d {
                let (v, delta) = adds[pi];
                pi += 1;
                match cur[..nc].iter().position(|e| e.0 == v) {
                    Some(k) => cur[k].1 = raw[k] + (self.lazy[v] + delta),
                    None => {
                        let k = cur[..nc].iter().position(|e| e.0 > v).unwrap_or(nc);
                        let mut j = nc;
                        while j > k {
                            cur[j] = cur[j - 1];
                            raw[j] = raw[j - 1];
                            j -= 1;
                        }
                        cur[k] = (v, self.max[v] + delta);
                        raw[k] = f64::NAN;
                        nc += 1;
                    }
                }
            }
            if d == 0 {
                return cur[0].1;
            }
            if pi == adds.len() && cur[..nc].iter().all(|&(v, m)| m == self.max[v]) {
                return self.max[1];
            }
            let mut nn = 0;
            let mut i = 0;
            while i < nc {
                let (v, val) = cur[i];
                let sib_val = if i + 1 < nc && cur[i + 1].0 == v ^ 1 {
                    i += 1;
                    cur[i].1
                } else {
                    self.max[v ^ 1]
                };
                i += 1;
                let u = v >> 1;
                let m = if val >= sib_val { val } else { sib_val };
                raw[nn] = m;
                next[nn] = (u, m + self.lazy[u]);
                nn += 1;
            }
            std::mem::swap(&mut cur, &mut next);
            nc = nn;
            d -= 1;
        }
    }

    /// The value at `i`.
    pub fn get(&self, i: usize) -> f64 {
        debug_assert!(i < self.len);
        let leaf = self.cap + i;
        let mut acc = self.max[leaf];
        let mut v = leaf >> 1;
        while v >= 1 {
            acc += self.lazy[v];
            v >>= 1;
        }
        acc
    }

    /// Sets the value at `i`; `i == len()` appends (growing the capacity when needed).
    pub fn set(&mut self, i: usize, value: f64) {
        assert!(i <= self.len, "set beyond the end");
        if i == self.len {
            if self.len == self.cap {
                self.grow();
            }
            self.len += 1;
        }
        let leaf = self.cap + i;
        let mut above = 0.0;
        let mut v = leaf >> 1;
        while v >= 1 {
            above += self.lazy[v];
            v >>= 1;
        }
        let stored = if value == f64::NEG_INFINITY {
            value
        } else {
            value - above
        };
        self.write(leaf, stored, 0.0);
        let mut v = leaf >> 1;
        while v >= 1 {
            let m = self.max[2 * v].max(self.max[2 * v + 1]) + self.lazy[v];
            let l = self.lazy[v];
            self.write(v, m, l);
            v >>= 1;
        }
    }

    /// Removes the last value.
    pub fn pop(&mut self) {
        assert!(self.len > 0);
        self.set(self.len - 1, f64::NEG_INFINITY);
        self.len -= 1;
    }

    fn grow(&mut self) {
        let values: Vec<f64> = (0..self.len).map(|i| self.get(i)).collect();
        *self = Self::with_capacity(&values, self.cap * 2);
    }

    /// Largest value in `lo..hi` (−∞ when empty).
    pub fn range_max(&self, lo: usize, hi: usize) -> f64 {
        if lo >= hi {
            return f64::NEG_INFINITY;
        }
        self.max_rec(1, 0, self.cap, lo, hi)
    }

    fn max_rec(&self, v: usize, nlo: usize, nhi: usize, lo: usize, hi: usize) -> f64 {
        if lo <= nlo && nhi <= hi {
            return self.max[v];
        }
        let mid = (nlo + nhi) / 2;
        let mut m = f64::NEG_INFINITY;
        if lo < mid {
            m = m.max(self.max_rec(2 * v, nlo, mid, lo, hi));
        }
        if hi > mid {
            m = m.max(self.max_rec(2 * v + 1, mid, nhi, lo, hi));
        }
        m + self.lazy[v]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Add(usize, usize, i32),
        Set(usize, i32),
        Push(i32),
        Pop,
        Trial(usize, usize, i32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..40, 0usize..40, -5i32..6).prop_map(|(a, b, d)| Op::Add(a, b, d)),
            (0usize..40, 0i32..20).prop_map(|(i, v)| Op::Set(i, v)),
            (0i32..20).prop_map(Op::Push),
            Just(Op::Pop),
            (0usize..40, 0usize..40, -5i32..6).prop_map(|(a, b, d)| Op::Trial(a, b, d)),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_plain_vector(init in proptest::collection::vec(0i32..20, 1..20),
                                  ops in proptest::collection::vec(op(), 0..60)) {
            let mut plain: Vec<f64> = init.iter().map(|&v| v as f64).collect();
            let mut t = MaxAddTree::from_values(&plain);
            for o in ops {
                let n = plain.len();
                match o {
                    Op::Add(a, b, d) if n > 0 => {
                        let (lo, hi) = (a.min(b) % (n + 1), a.max(b) % (n + 1));
                        let (lo, hi) = (lo.min(hi), lo.max(hi));
                        t.range_add(lo, hi, d as f64);
                        for x in &mut plain[lo..hi] { *x += d as f64; }
                    }
                    Op::Set(i, v) if n > 0 => { t.set(i % n, v as f64); plain[i % n] = v as f64; }
                    Op::Push(v) => { t.set(n, v as f64); plain.push(v as f64); }
                    Op::Pop if n > 1 => { t.pop(); plain.pop(); }
                    Op::Trial(a, b, d) if n > 1 => {
                        // Up to two distinct binomial subtrees (aligned blocks), as a swap
                        // changes: the virtual max equals the max after really adding.
                        let (c1, c2) = (1 + a % (n - 1), 1 + b % (n - 1));
                        let mut adds = vec![(c1, d as f64 + 0.25)];
                        if c2 != c1 {
                            adds.push((c2, -(d as f64) * 0.5));
                        }
                        let mut real = t.clone();
                        for &(c, delta) in &adds {
                            real.add_subtree(c, delta);
                            let end = (c + (c & c.wrapping_neg())).min(n);
                            for x in &mut plain[c..end] { *x += delta; }
                        }
                        let before: Vec<f64> = (0..n).map(|i| t.get(i)).collect();
                        prop_assert_eq!(t.max_after_subtree_adds(&mut adds), real.max());
                        prop_assert_eq!(before, (0..n).map(|i| t.get(i)).collect::<Vec<_>>());
                        t = real;
                    }
                    _ => {}
                }
                let n = plain.len();
                for (i, &v) in plain.iter().enumerate() { prop_assert_eq!(t.get(i), v); }
                let m = plain.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                prop_assert_eq!(t.max(), m);
                if n > 2 { prop_assert_eq!(t.range_max(1, n - 1),
                    plain[1..n - 1].iter().cloned().fold(f64::NEG_INFINITY, f64::max)); }
            }
        }
    }
}
