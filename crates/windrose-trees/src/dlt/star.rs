//! One parent `n_0` and `k` children (the paper's Figure 2): equations (1)-(9), evaluation of any
//! send order, the optimal order of Theorem 1 and all `k!` orders ranked.
//!
//! Every quantity is measured in units of `T_cp` (the time a processor with `w = 1` needs for the
//! whole load): `w_0` is the parent's compute time, `a_i = z_i T_cm / T_cp` (7) the time to send
//! the whole load to child `i`, `b_i = w_i beta_i` (8) the time the child's subtree, acting as
//! one equivalent processor, needs for the whole load. Using seconds throughout is the same as
//! taking `T_cp = 1 s`.
//!
//! Equations (1)-(2) say that every processor finishes at the same instant:
//! `alpha_0 w_0 = alpha_1 (a_1 + b_1)` and `alpha_i b_i = alpha_{i+1} (a_{i+1} + b_{i+1})`.
//! Hence `alpha_i = gamma_i alpha_0` (4) with `gamma_1 = w_0 / (a_1 + b_1)` and
//! `gamma_{i+1} = gamma_i b_i / (a_{i+1} + b_{i+1})` (6), and `alpha_0 = 1 / (1 + sum gamma_i)`
//! from (5).

use super::{non_negative, positive, DltError};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use windrose_model::NodeId;

/// Most children [`rank_orders`] enumerates (8! = 40320 orders).
pub const MAX_RANKED_CHILDREN: usize = 8;

/// A child as its parent sees it: the link into it and its whole subtree reduced to two numbers.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EquivalentChild {
    /// The child node.
    pub id: NodeId,
    /// `a_i = z_i T_cm / T_cp`: time to send it the whole load, in units of `T_cp`.
    pub a: f64,
    /// `b_i = w_i beta_i`: time its subtree needs for the whole load, in units of `T_cp`.
    pub b: f64,
}

impl EquivalentChild {
    /// A child given directly by `a_i` and `b_i` (not validated here; the functions that use it
    /// check `a >= 0` and `b > 0`).
    pub fn new(id: NodeId, a: f64, b: f64) -> EquivalentChild {
        EquivalentChild { id, a, b }
    }

    /// A child from the paper's raw coefficients, equations (7)-(8): `a = z T_cm / T_cp`,
    /// `b = w beta`. `w` and `z` are inversely proportional to the child's compute speed and to
    /// the link's speed; `beta` is the share of what the child receives that it keeps (1 for a
    /// leaf); `t_cp_s` and `t_cm_s` are the times to compute and to send the whole load with
    /// `w = 1` and `z = 1`.
    pub fn from_paper(
        id: NodeId,
        w: f64,
        z: f64,
        beta: f64,
        t_cp_s: f64,
        t_cm_s: f64,
    ) -> Result<EquivalentChild, DltError> {
        if !positive(t_cp_s) {
            return Err(DltError::Parameter {
                what: "t_cp_s",
                value: t_cp_s,
            });
        }
        if !non_negative(t_cm_s) {
            return Err(DltError::Parameter {
                what: "t_cm_s",
                value: t_cm_s,
            });
        }
        let bad = |what, requirement, value| DltError::ChildParameter {
            child: id,
            what,
            requirement,
            value,
        };
        if !positive(w) {
            return Err(bad("w", "a positive finite number", w));
        }
        if !non_negative(z) {
            return Err(bad("z", "a non-negative finite number", z));
        }
        if !(positive(beta) && beta <= 1.0) {
            return Err(bad("beta", "in (0, 1]", beta));
        }
        let child = EquivalentChild {
            id,
            a: z * t_cm_s / t_cp_s,
            b: w * beta,
        };
        check_child(&child)?;
        Ok(child)
    }

    /// A child from times in seconds (`T_cp = 1 s`): `a` is the link's time for the whole load,
    /// `b` the child's compute time for the whole load times its `beta`.
    pub fn from_seconds(
        id: NodeId,
        link_s_per_unit: f64,
        compute_s_per_unit: f64,
        beta: f64,
    ) -> Result<EquivalentChild, DltError> {
        EquivalentChild::from_paper(id, compute_s_per_unit, link_s_per_unit, beta, 1.0, 1.0)
    }
}

/// The fractions one parent computes for its children, in send order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StarFractions {
    /// `w_0`, the parent's compute time for the whole load in units of `T_cp`.
    pub w0: f64,
    /// `alpha_0`: the share of its load the parent keeps. For a child subtree this is the
    /// `beta` its own parent uses.
    pub alpha0: f64,
    /// `(d_i, alpha_i)` for `i = 1..k`: each child in send order with the share of the parent's
    /// load it receives.
    pub children: Vec<(NodeId, f64)>,
}

impl StarFractions {
    /// The children in send order.
    pub fn order(&self) -> Vec<NodeId> {
        self.children.iter().map(|&(c, _)| c).collect()
    }

    /// When the whole subtree is done, in seconds: `alpha_0 w_0 T_cp` (every processor finishes
    /// at this instant).
    pub fn finish_time_s(&self, t_cp_s: f64) -> f64 {
        self.alpha0 * self.w0 * t_cp_s
    }
}

/// One send order and what it achieves, as [`rank_orders`] lists them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankedOrder {
    /// 1 for the best order.
    pub rank: usize,
    /// The children in send order.
    pub order: Vec<NodeId>,
    /// `a_i` of the children in send order.
    pub a_in_order: Vec<f64>,
    /// `alpha_0` of this order (smaller is faster).
    pub alpha0: f64,
    /// `alpha_0 w_0`: the finish time in units of `T_cp`.
    pub finish_time: f64,
}

fn check_w0(w0: f64) -> Result<(), DltError> {
    if positive(w0) {
        Ok(())
    } else {
        Err(DltError::Parameter {
            what: "w0",
            value: w0,
        })
    }
}

fn check_child(c: &EquivalentChild) -> Result<(), DltError> {
    if !non_negative(c.a) {
        return Err(DltError::ChildParameter {
            child: c.id,
            what: "a",
            requirement: "a non-negative finite number",
            value: c.a,
        });
    }
    if !positive(c.b) {
        return Err(DltError::ChildParameter {
            child: c.id,
            what: "b",
            requirement: "a positive finite number",
            value: c.b,
        });
    }
    Ok(())
}

fn check_children(children: &[EquivalentChild]) -> Result<(), DltError> {
    for c in children {
        check_child(c)?;
    }
    let mut ids: Vec<NodeId> = children.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(DltError::DuplicateChild { child: w[0] });
    }
    Ok(())
}

/// `sum gamma_i` of equations (6) and (13) for children already in send order (unchecked).
fn gamma_sum(w0: f64, in_order: impl Iterator<Item = (f64, f64)>) -> f64 {
    let mut prev_b = w0; // b_0 w_0 with b_0 = 1 (9)
    let mut gamma = 1.0;
    let mut q = 0.0;
    for (a, b) in in_order {
        gamma *= prev_b / (a + b);
        q += gamma;
        prev_b = b;
    }
    q
}

/// `alpha_0` for children in send order, without validation (inputs already checked).
pub(crate) fn alpha0_unchecked(w0: f64, in_order: impl Iterator<Item = (f64, f64)>) -> f64 {
    1.0 / (1.0 + gamma_sum(w0, in_order))
}

/// Equations (4)-(6) for children already in send order (inputs already checked).
pub(crate) fn fractions_unchecked(w0: f64, in_order: &[EquivalentChild]) -> StarFractions {
    let mut gammas = Vec::with_capacity(in_order.len());
    let mut prev_b = w0;
    let mut gamma = 1.0;
    let mut q = 0.0;
    for c in in_order {
        gamma *= prev_b / (c.a + c.b);
        q += gamma;
        gammas.push(gamma);
        prev_b = c.b;
    }
    let alpha0 = 1.0 / (1.0 + q);
    StarFractions {
        w0,
        alpha0,
        children: in_order
            .iter()
            .zip(gammas)
            .map(|(c, g)| (c.id, g / (1.0 + q)))
            .collect(),
    }
}

/// True when `alpha_0` is finite and positive and no share is NaN or infinite. A share that
/// underflows to 0 (a hopelessly slow link) is accepted: it is the right answer to f64 precision.
pub(crate) fn representable(f: &StarFractions) -> bool {
    positive(f.alpha0) && f.children.iter().all(|&(_, x)| non_negative(x))
}

/// The fractions when the parent sends to `children_in_order` in exactly that order: equations
/// (4)-(6). `w0` is the parent's compute time in the children's units (`w_0` with `T_cp = 1`).
pub fn fractions_in_order(
    w0: f64,
    children_in_order: &[EquivalentChild],
) -> Result<StarFractions, DltError> {
    check_w0(w0)?;
    check_children(children_in_order)?;
    let f = fractions_unchecked(w0, children_in_order);
    if !representable(&f) {
        // Only reachable when w0 / b differ by ~300 orders of magnitude; there is no parent id
        // in a one-level subtree, so name the first child.
        return Err(DltError::Numerical {
            node: children_in_order.first().map(|c| c.id).unwrap_or(NodeId(0)),
        });
    }
    Ok(f)
}

/// `alpha_0` of one send order (what the order is judged by: the finish time is `alpha_0 w_0`).
pub fn alpha0_in_order(w0: f64, children_in_order: &[EquivalentChild]) -> Result<f64, DltError> {
    Ok(fractions_in_order(w0, children_in_order)?.alpha0)
}

/// Orders two children as Theorem 1 sends them: ascending `a`, ties to the lower id.
pub(crate) fn theorem1_cmp(x: &EquivalentChild, y: &EquivalentChild) -> Ordering {
    x.a.total_cmp(&y.a).then(x.id.cmp(&y.id))
}

/// The optimal send order of Theorem 1: ascending `a_i` (fastest link first). The `b_i` do not
/// matter; children with equal `a_i` give the same `alpha_0` in either order (Lemma 1), and are
/// sent by ascending id so the result is deterministic.
pub fn optimal_order(children: &[EquivalentChild]) -> Vec<EquivalentChild> {
    let mut v = children.to_vec();
    v.sort_by(theorem1_cmp);
    v
}

/// The fractions for the optimal send order ([`optimal_order`], then equations (4)-(6)).
pub fn optimal_fractions(w0: f64, children: &[EquivalentChild]) -> Result<StarFractions, DltError> {
    fractions_in_order(w0, &optimal_order(children))
}

/// Every one of the `k!` send orders with its `alpha_0`, best (smallest) first; equal `alpha_0`
/// are listed in lexicographic order of the child ids. At most [`MAX_RANKED_CHILDREN`] children.
pub fn rank_orders(w0: f64, children: &[EquivalentChild]) -> Result<Vec<RankedOrder>, DltError> {
    check_w0(w0)?;
    check_children(children)?;
    if children.len() > MAX_RANKED_CHILDREN {
        return Err(DltError::TooManyChildren {
            children: children.len(),
            max: MAX_RANKED_CHILDREN,
        });
    }
    let mut sorted = children.to_vec();
    sorted.sort_by_key(|c| c.id);
    let mut perm: Vec<usize> = (0..sorted.len()).collect();
    let mut out = Vec::new();
    loop {
        let alpha0 = alpha0_unchecked(w0, perm.iter().map(|&i| (sorted[i].a, sorted[i].b)));
        out.push(RankedOrder {
            rank: 0,
            order: perm.iter().map(|&i| sorted[i].id).collect(),
            a_in_order: perm.iter().map(|&i| sorted[i].a).collect(),
            alpha0,
            finish_time: alpha0 * w0,
        });
        if !next_permutation(&mut perm) {
            break;
        }
    }
    // Permutations were generated in lexicographic order, so a stable sort keeps ties that way.
    out.sort_by(|x, y| x.alpha0.total_cmp(&y.alpha0));
    for (i, r) in out.iter_mut().enumerate() {
        r.rank = i + 1;
    }
    Ok(out)
}

/// Advances `p` to the next permutation in lexicographic order; false after the last one.
fn next_permutation(p: &mut [usize]) -> bool {
    if p.len() < 2 {
        return false;
    }
    let mut i = p.len() - 1;
    while i > 0 && p[i - 1] >= p[i] {
        i -= 1;
    }
    if i == 0 {
        return false;
    }
    let mut j = p.len() - 1;
    while p[j] <= p[i - 1] {
        j -= 1;
    }
    p.swap(i - 1, j);
    p[i..].reverse();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_all_listed_once() {
        let mut p = vec![0, 1, 2, 3];
        let mut n = 1;
        while next_permutation(&mut p) {
            n += 1;
        }
        assert_eq!(n, 24);
        assert_eq!(p, vec![3, 2, 1, 0]);
        assert!(!next_permutation(&mut []));
    }

    #[test]
    fn no_children_keeps_everything() {
        let f = fractions_in_order(2.0, &[]).unwrap();
        assert_eq!(f.alpha0, 1.0);
        assert_eq!(f.finish_time_s(3.0), 6.0);
        assert_eq!(rank_orders(2.0, &[]).unwrap().len(), 1);
    }
}
