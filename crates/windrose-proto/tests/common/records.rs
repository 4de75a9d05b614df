//! The sort tests' inputs (HeteroSort and the sample sort baseline share them): the sort
//! benchmark's records in the shapes, cut into per-member shares.

use bytes::Bytes;
use proptest::prelude::*;
use windrose_model::records::{KeyDistribution, RecordGenerator, RECORD_LEN};

/// How a test's keys are drawn and laid out over the members.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Uniform keys.
    Uniform,
    /// Zipf-like skewed keys (a power law over the key space).
    Skewed,
    /// Three distinct keys.
    FewDistinct,
    /// One key (payloads still differ).
    AllEqual,
    /// Uniform keys, already sorted across the members in order.
    Sorted,
    /// Uniform keys, sorted in reverse.
    Reverse,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 6] = [
        Shape::Uniform,
        Shape::Skewed,
        Shape::FewDistinct,
        Shape::AllEqual,
        Shape::Sorted,
        Shape::Reverse,
    ];

    fn keys(self) -> KeyDistribution {
        match self {
            Shape::Uniform | Shape::Sorted | Shape::Reverse => KeyDistribution::Uniform,
            Shape::Skewed => KeyDistribution::Skewed { exponent: 8.0 },
            Shape::FewDistinct => KeyDistribution::Duplicates { distinct: 3 },
            Shape::AllEqual => KeyDistribution::Duplicates { distinct: 1 },
        }
    }
}

/// Any shape, for proptests.
pub fn any_shape() -> impl Strategy<Value = Shape> {
    prop::sample::select(Shape::ALL.to_vec())
}

/// Records `first..first + count` of the generator seeded `seed`.
pub fn benchmark_records(seed: u64, first: u64, count: usize, dist: KeyDistribution) -> Bytes {
    let mut g = RecordGenerator::new(seed, dist).unwrap();
    g.seek(first);
    let mut buf = vec![0u8; count * RECORD_LEN];
    g.fill(&mut buf);
    Bytes::from(buf)
}

/// One share per entry of `counts` (in member order), `counts[i]` records each, keys of
/// `shape` from `seed`.
pub fn shares(shape: Shape, counts: &[usize], seed: u64) -> Vec<Bytes> {
    let total: usize = counts.iter().sum();
    let all = benchmark_records(seed, 0, total, shape.keys());
    let mut recs: Vec<&[u8]> = all.chunks(RECORD_LEN).collect();
    match shape {
        Shape::Sorted => recs.sort_unstable(),
        Shape::Reverse => recs.sort_unstable_by(|a, b| b.cmp(a)),
        _ => {}
    }
    let mut first = 0;
    counts
        .iter()
        .map(|&k| {
            let b = Bytes::from(recs[first..first + k].concat());
            first += k;
            b
        })
        .collect()
}
