//! Exact minimum-cost sort path by dynamic programming over subsets (Held-Karp for an open
//! path with free ends): the independent check SOO is measured against on small meshes.

use super::{HeteroSortError, SortPath, StoreForward};

/// Most live nodes [`exact_sort_path`] accepts: `2^16 * 16` states take about 9 MB and well
/// under a second; every extra node doubles both.
pub const EXACT_MAX_NODES: usize = 16;

/// A minimum-cost order over the live nodes of `sf`. Among equal optima it returns the one the
/// search meets first (deterministic).
pub fn exact_sort_path(sf: &StoreForward) -> Result<SortPath, HeteroSortError> {
    let k = sf.len();
    if k > EXACT_MAX_NODES {
        return Err(HeteroSortError::TooManyForExact {
            live: k,
            max: EXACT_MAX_NODES,
        });
    }
    let full = (1usize << k) - 1;
    // best[mask * k + last]: cheapest path over `mask` ending at `last`.
    let mut best = vec![u64::MAX; (full + 1) * k];
    let mut from = vec![u8::MAX; (full + 1) * k];
    for i in 0..k {
        best[(1 << i) * k + i] = 0;
    }
    for mask in 1..=full {
        for last in 0..k {
            let here = best[mask * k + last];
            if here == u64::MAX || mask & (1 << last) == 0 {
                continue;
            }
            for next in 0..k {
                if mask & (1 << next) != 0 {
                    continue;
                }
                let m2 = mask | (1 << next);
                let c = here + sf.cost_ix(last, next);
                if c < best[m2 * k + next] {
                    best[m2 * k + next] = c;
                    from[m2 * k + next] = last as u8;
                }
            }
        }
    }
    let mut last = (0..k)
        .min_by_key(|&i| best[full * k + i])
        .expect("at least one live node");
    let mut mask = full;
    let mut order = Vec::with_capacity(k);
    loop {
        order.push(last);
        let p = from[mask * k + last];
        mask &= !(1 << last);
        if p == u8::MAX {
            break;
        }
        last = usize::from(p);
    }
    order.reverse();
    Ok(sf.path_from_indices(&order))
}
