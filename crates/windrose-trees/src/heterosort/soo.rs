//! SOO, the paper's "Scaleable Adaptive Load-balancing Online Optimizer": a genetic algorithm
//! that orders the live nodes of an irregular mesh into the sort path (the major sort axis of
//! Fig. 2) with the least total store-and-forward cost.
//!
//! The paper gives no operators or parameters, so these are ours, the textbook ones for
//! ordering problems:
//! - an individual is a permutation of the live nodes; its cost is
//!   [`StoreForward::path_cost`], an open path with free ends;
//! - the first quarter of the initial population is built greedily (from a random start, always
//!   step to a cheapest unvisited node, ties broken at random), the rest are random permutations;
//! - parents are picked by tournament; order crossover (OX1) keeps a random segment of one
//!   parent in place and fills the other places in the second parent's order;
//! - a mutation reverses a random segment (a 2-opt move) or moves one node elsewhere, with
//!   equal odds;
//! - local search polishes the initial population and a `polish_rate` share of the children
//!   (segment reversals and single-node moves until none helps), which makes this a memetic
//!   GA: on the tests' 4 x 4 meshes it turns "exact on most" into "exact on all" (see
//!   `tests/heterosort_soo.rs`); `polish_rate: 0.0` gives the plain GA;
//! - the best `elite` individuals pass unchanged to the next generation, and the best path
//!   ever seen is the answer;
//! - the search stops after `generations` generations, after `stall_generations` generations
//!   in a row without a better path, or once the best path reaches the lower bound
//!   `(live - 1) * cheapest step`, which no path can beat.
//!
//! Every random choice comes from the RNG passed in: the same seed gives the same path.

use super::{HeteroSortError, SortPath, StoreForward};
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Parameters of the genetic algorithm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SooParams {
    /// Individuals per generation (at least 2). Default 64.
    pub population: usize,
    /// Generations after the initial one. Default 400.
    pub generations: usize,
    /// Chance that a child is mutated, in `[0, 1]`. Default 0.3.
    pub mutation_rate: f64,
    /// Chance that a child comes from crossover rather than a copy of its first parent, in
    /// `[0, 1]`. Default 0.9.
    pub crossover_rate: f64,
    /// Individuals drawn per tournament (1 to `population`). Default 3.
    pub tournament: usize,
    /// Best individuals copied unchanged into the next generation (below `population`).
    /// Default 2.
    pub elite: usize,
    /// Chance that a child is improved by local search (segment reversals and single-node
    /// moves until none helps) before it competes, in `[0, 1]`; when above 0 the initial
    /// population is polished too. Default 0.1.
    pub polish_rate: f64,
    /// Stop once this many generations in a row have not lowered the best cost (0: never stop
    /// early). Default 100.
    pub stall_generations: usize,
}

impl Default for SooParams {
    fn default() -> Self {
        SooParams {
            population: 64,
            generations: 400,
            mutation_rate: 0.3,
            crossover_rate: 0.9,
            tournament: 3,
            elite: 2,
            polish_rate: 0.1,
            stall_generations: 100,
        }
    }
}

impl SooParams {
    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), HeteroSortError> {
        let bad = |what, requirement, value: String| {
            Err(HeteroSortError::Parameter {
                what,
                requirement,
                value,
            })
        };
        if self.population < 2 {
            return bad("population", "at least 2", self.population.to_string());
        }
        if !(0.0..=1.0).contains(&self.mutation_rate) {
            return bad(
                "mutation_rate",
                "between 0 and 1",
                self.mutation_rate.to_string(),
            );
        }
        if !(0.0..=1.0).contains(&self.crossover_rate) {
            return bad(
                "crossover_rate",
                "between 0 and 1",
                self.crossover_rate.to_string(),
            );
        }
        if !(0.0..=1.0).contains(&self.polish_rate) {
            return bad(
                "polish_rate",
                "between 0 and 1",
                self.polish_rate.to_string(),
            );
        }
        if self.tournament == 0 || self.tournament > self.population {
            return bad(
                "tournament",
                "between 1 and the population",
                self.tournament.to_string(),
            );
        }
        if self.elite >= self.population {
            return bad("elite", "below the population", self.elite.to_string());
        }
        Ok(())
    }
}

/// Runs SOO over the live nodes of `sf`; pass a seeded RNG (e.g. `ChaCha8Rng`) for a
/// reproducible path.
pub fn soo<R: Rng + ?Sized>(
    sf: &StoreForward,
    params: &SooParams,
    rng: &mut R,
) -> Result<SortPath, HeteroSortError> {
    params.validate()?;
    let k = sf.len();
    if k == 1 {
        return Ok(sf.path_from_indices(&[0]));
    }
    let cost = |p: &[usize]| -> u64 { p.windows(2).map(|w| sf.cost_ix(w[0], w[1])).sum() };
    let cheapest_step = (0..k)
        .flat_map(|i| (0..k).filter(move |&j| j != i).map(move |j| (i, j)))
        .map(|(i, j)| sf.cost_ix(i, j))
        .min()
        .expect("two live nodes");
    let lower_bound = (k as u64 - 1) * cheapest_step;

    let p = params.population;
    let mut pop: Vec<(u64, Vec<usize>)> = (0..p)
        .map(|i| {
            let mut ind = if i < p.div_ceil(4) {
                greedy(sf, rng)
            } else {
                let mut v: Vec<usize> = (0..k).collect();
                v.shuffle(rng);
                v
            };
            if params.polish_rate > 0.0 {
                polish(sf, &mut ind);
            }
            (cost(&ind), ind)
        })
        .collect();
    pop.sort_by_key(|x| x.0);

    // The best path ever seen (with no elite a generation may lose it).
    let mut best = pop[0].clone();
    let mut stalled = 0;
    for _ in 0..params.generations {
        if best.0 <= lower_bound
            || (params.stall_generations > 0 && stalled >= params.stall_generations)
        {
            break;
        }
        let mut next: Vec<(u64, Vec<usize>)> = pop[..params.elite].to_vec();
        while next.len() < p {
            let a = tournament(&pop, params.tournament, rng);
            let mut child = if rng.gen_bool(params.crossover_rate) {
                let b = tournament(&pop, params.tournament, rng);
                order_crossover(&pop[a].1, &pop[b].1, rng)
            } else {
                pop[a].1.clone()
            };
            if rng.gen_bool(params.mutation_rate) {
                mutate(&mut child, rng);
            }
            if rng.gen_bool(params.polish_rate) {
                polish(sf, &mut child);
            }
            next.push((cost(&child), child));
        }
        next.sort_by_key(|x| x.0);
        pop = next;
        if pop[0].0 < best.0 {
            best = pop[0].clone();
            stalled = 0;
        } else {
            stalled += 1;
        }
    }
    Ok(sf.path_from_indices(&best.1))
}

/// A nearest-neighbour path from a random start, ties broken at random.
fn greedy<R: Rng + ?Sized>(sf: &StoreForward, rng: &mut R) -> Vec<usize> {
    let k = sf.len();
    let mut used = vec![false; k];
    let mut at = rng.gen_range(0..k);
    let mut path = Vec::with_capacity(k);
    let mut ties = Vec::with_capacity(k);
    loop {
        used[at] = true;
        path.push(at);
        let Some(best) = (0..k)
            .filter(|&j| !used[j])
            .map(|j| sf.cost_ix(at, j))
            .min()
        else {
            return path;
        };
        ties.clear();
        ties.extend((0..k).filter(|&j| !used[j] && sf.cost_ix(at, j) == best));
        at = *ties.choose(rng).expect("an unvisited node");
    }
}

/// Index of the cheapest of `size` individuals drawn at random (the population is sorted by
/// cost, so the lowest index wins).
fn tournament<R: Rng + ?Sized>(pop: &[(u64, Vec<usize>)], size: usize, rng: &mut R) -> usize {
    (0..size)
        .map(|_| rng.gen_range(0..pop.len()))
        .min()
        .expect("tournament of at least one")
}

/// OX1: `a`'s segment `[i, j]` stays in place, the other places take `b`'s remaining nodes in
/// `b`'s order.
fn order_crossover<R: Rng + ?Sized>(a: &[usize], b: &[usize], rng: &mut R) -> Vec<usize> {
    let k = a.len();
    let (mut i, mut j) = (rng.gen_range(0..k), rng.gen_range(0..k));
    if i > j {
        std::mem::swap(&mut i, &mut j);
    }
    let mut taken = vec![false; k];
    for &n in &a[i..=j] {
        taken[n] = true;
    }
    let mut rest = b.iter().copied().filter(|&n| !taken[n]);
    (0..k)
        .map(|pos| {
            if (i..=j).contains(&pos) {
                a[pos]
            } else {
                rest.next().expect("b is a permutation of a")
            }
        })
        .collect()
}

/// Reverses a random segment, or moves one node to a random place.
fn mutate<R: Rng + ?Sized>(p: &mut Vec<usize>, rng: &mut R) {
    let k = p.len();
    let (mut i, mut j) = (rng.gen_range(0..k), rng.gen_range(0..k));
    if rng.gen_bool(0.5) {
        if i > j {
            std::mem::swap(&mut i, &mut j);
        }
        p[i..=j].reverse();
    } else {
        let n = p.remove(i);
        j = j.min(p.len());
        p.insert(j, n);
    }
}

/// Local search to a local optimum: first-improvement segment reversals (2-opt) and single-node
/// moves (or-opt), on an open path with symmetric costs.
fn polish(sf: &StoreForward, p: &mut Vec<usize>) {
    let k = p.len();
    let c = |a: usize, b: usize| sf.cost_ix(a, b) as i64;
    let mut improved = true;
    while improved {
        improved = false;
        // Reversing p[i..=j] replaces the edges into p[i] and out of p[j].
        for i in 0..k {
            for j in i + 1..k {
                let mut delta = 0;
                if i > 0 {
                    delta += c(p[i - 1], p[j]) - c(p[i - 1], p[i]);
                }
                if j + 1 < k {
                    delta += c(p[i], p[j + 1]) - c(p[j], p[j + 1]);
                }
                if delta < 0 {
                    p[i..=j].reverse();
                    improved = true;
                }
            }
        }
        // Moving p[i] elsewhere: take it out, then put it in the cheapest gap.
        for i in 0..k {
            let x = p[i];
            let mut out_gain = 0;
            if i > 0 {
                out_gain += c(p[i - 1], x);
            }
            if i + 1 < k {
                out_gain += c(x, p[i + 1]);
            }
            if i > 0 && i + 1 < k {
                out_gain -= c(p[i - 1], p[i + 1]);
            }
            // Gap g sits before p[g] (g = k is the end); gaps i and i + 1 touch x itself.
            let add = |g: usize| -> i64 {
                match (g.checked_sub(1).map(|h| p[h]), p.get(g).copied()) {
                    (Some(a), Some(b)) => c(a, x) + c(x, b) - c(a, b),
                    (Some(a), None) => c(a, x),
                    (None, Some(b)) => c(x, b),
                    (None, None) => 0,
                }
            };
            let best = (0..=k)
                .filter(|&g| g != i && g != i + 1)
                .map(|g| (add(g), g))
                .min();
            if let Some((best_add, g)) = best {
                if best_add < out_gain {
                    p.remove(i);
                    p.insert(if g < i { g } else { g - 1 }, x);
                    improved = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heterosort::Mesh;
    use proptest::prelude::{any, prop_assert, proptest};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn is_permutation(p: &[usize], k: usize) -> bool {
        let mut v = p.to_vec();
        v.sort_unstable();
        v == (0..k).collect::<Vec<_>>()
    }

    proptest! {
        #[test]
        fn operators_keep_permutations(k in 1usize..30, seed in any::<u64>()) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut a: Vec<usize> = (0..k).collect();
            let mut b = a.clone();
            a.shuffle(&mut rng);
            b.shuffle(&mut rng);
            let child = order_crossover(&a, &b, &mut rng);
            prop_assert!(is_permutation(&child, k));
            // OX1 keeps one segment of `a` in place: at least one position agrees with `a`.
            prop_assert!(child.iter().zip(&a).any(|(x, y)| x == y));
            let mut m = child.clone();
            mutate(&mut m, &mut rng);
            prop_assert!(is_permutation(&m, k));
        }

        #[test]
        fn polish_never_raises_the_cost(side in 1usize..5, seed in any::<u64>()) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut mesh = Mesh::grid(side, side + 1).unwrap();
            for (a, b, _) in mesh.live_links() {
                mesh.set_link_cost(a, b, rng.gen_range(1..=9)).unwrap();
            }
            let sf = StoreForward::new(&mesh).unwrap();
            let k = sf.len();
            let mut p: Vec<usize> = (0..k).collect();
            p.shuffle(&mut rng);
            let before = sf.path_from_indices(&p).cost;
            polish(&sf, &mut p);
            prop_assert!(is_permutation(&p, k));
            let after = sf.path_from_indices(&p).cost;
            prop_assert!(after <= before);
            // A local optimum: no single reversal improves it any more.
            for i in 0..k {
                for j in i + 1..k {
                    let mut q = p.clone();
                    q[i..=j].reverse();
                    prop_assert!(sf.path_from_indices(&q).cost >= after);
                }
            }
        }
    }
}
