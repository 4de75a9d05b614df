//! A max segment tree with lazy range-add and an undo journal.
//!
//! Holds one value per binomial position (its root path cost). Lazy adds are kept in the
//! internal nodes and never pushed down: `max[v] = max(max[2v], max[2v+1]) + lazy[v]`, so a
//! range-add touches O(log N) cells and a global max is O(1). While a trial is open, every cell
//! written is journaled first, so `rollback` restores the exact previous bits (no floating-point
//! drift from adding a delta and subtracting it again).

/// Values indexed `0..len`, range-add, point set/get, range max, global max.
#[derive(Clone, Debug)]
pub struct MaxAddTree {
    len: usize,
    cap: usize,
    max: Vec<f64>,
    lazy: Vec<f64>,
    journal: Vec<(u32, f64, f64)>,
    journaling: bool,
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
            journal: Vec::new(),
            journaling: false,
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
        if self.journaling {
            self.journal.push((v as u32, self.max[v], self.lazy[v]));
        }
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
        assert!(!self.journaling, "cannot grow during a trial");
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

    /// Starts journaling writes so they can be undone.
    pub fn begin_trial(&mut self) {
        debug_assert!(!self.journaling);
        self.journaling = true;
        self.journal.clear();
    }

    /// Undoes every write since `begin_trial`, bit for bit.
    pub fn rollback(&mut self) {
        while let Some((v, m, l)) = self.journal.pop() {
            self.max[v as usize] = m;
            self.lazy[v as usize] = l;
        }
        self.journaling = false;
    }

    /// Keeps every write since `begin_trial`.
    pub fn commit(&mut self) {
        self.journal.clear();
        self.journaling = false;
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
                    Op::Trial(a, b, d) if n > 0 => {
                        let before: Vec<f64> = (0..n).map(|i| t.get(i)).collect();
                        t.begin_trial();
                        t.range_add((a % n).min(b % n), (a % n).max(b % n) + 1, d as f64 + 0.1);
                        t.rollback();
                        let after: Vec<f64> = (0..n).map(|i| t.get(i)).collect();
                        prop_assert_eq!(before, after);
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
