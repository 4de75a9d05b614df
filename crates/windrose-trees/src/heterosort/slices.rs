//! How a node cuts its sorted data among its trading list: slice `i` (ascending keys) goes to
//! list entry `i`, and the node keeps the slice at its own entry.
//!
//! The paper's text says a node splits its data into "quarters" for its four partners, but each
//! Table 1 list has five entries including the node itself: the data is cut into as many slices
//! as the list has entries (five on a 4 x 4 torus, fewer on small tori), and one stays home.

use super::{Cycle, HeteroSortError, Torus};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// One slice of a node's sorted data and who gets it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Slice {
    /// Receiving node (snake rank); the node itself for the slice it keeps.
    pub to: usize,
    /// Indices into the node's sorted data.
    pub range: Range<usize>,
}

/// Cuts `items` into `parts` contiguous ranges whose lengths differ by at most one; the first
/// `items % parts` ranges are the longer ones. `parts` must be at least 1.
pub fn equal_slices(items: usize, parts: usize) -> Vec<Range<usize>> {
    assert!(parts > 0, "equal_slices needs at least one part");
    let (base, extra) = (items / parts, items % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Cuts `items` into contiguous ranges proportional to `weights` (for slices sized by each
/// receiver's link or compute speed, the paper's future work).
///
/// Largest remainder: each part gets `floor(items * w / total)`, and the items left over go one
/// each to the parts with the largest remainders (ties to the earlier part), so every length is
/// within one of its exact share and a zero weight gets nothing.
pub fn weighted_slices(
    items: usize,
    weights: &[u64],
) -> Result<Vec<Range<usize>>, HeteroSortError> {
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if total == 0 {
        return Err(HeteroSortError::NoWeight {
            weights: weights.to_vec(),
        });
    }
    let n = items as u128;
    let mut lens: Vec<usize> = Vec::with_capacity(weights.len());
    let mut rems: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let exact = n * u128::from(w);
        lens.push((exact / total) as usize);
        rems.push((exact % total, i));
    }
    let left = items - lens.iter().sum::<usize>();
    // Largest remainder first, earlier part first among equals.
    rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rems.iter().take(left) {
        lens[i] += 1;
    }
    let mut start = 0;
    Ok(lens
        .into_iter()
        .map(|len| {
            let r = start..start + len;
            start += len;
            r
        })
        .collect())
}

impl Torus {
    /// The equal slices `node` cuts `items` sorted records into in `cycle`, one per entry of
    /// its trading list, in list order.
    pub fn slices(
        &self,
        node: usize,
        cycle: Cycle,
        items: usize,
    ) -> Result<Vec<Slice>, HeteroSortError> {
        let list = self.trading_list(node, cycle)?;
        Ok(list
            .iter()
            .zip(equal_slices(items, list.len()))
            .map(|(&to, range)| Slice { to, range })
            .collect())
    }
}
