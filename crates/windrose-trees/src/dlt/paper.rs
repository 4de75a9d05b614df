//! The paper's Example 1 (Figure 3), as `windrose reproduce dlt` prints it: the left-to-right
//! order Cheng & Robertazzi assumed, the right-to-left order, and all 24 orders ranked.
//!
//! The paper does not state `w_0`; its numbers need `w_0 = 1` (then `alpha_0 = 132/139` and
//! `252/401`, which it prints rounded to 0.9496 and 0.6284).

use super::star::{alpha0_unchecked, rank_orders, EquivalentChild, RankedOrder};
use serde::{Deserialize, Serialize};
use windrose_model::NodeId;

/// `w_0` of Example 1.
pub const EXAMPLE1_W0: f64 = 1.0;

/// The children `n_1..n_4` of Figure 3, left to right: `a = 20, 10, 5, 1`, every `b = 1`. The
/// parent is `n_0`; child `n_i` has id `i`.
pub fn example1_children() -> Vec<EquivalentChild> {
    [20.0, 10.0, 5.0, 1.0]
        .iter()
        .enumerate()
        .map(|(i, &a)| EquivalentChild::new(NodeId(i as u32 + 1), a, 1.0))
        .collect()
}

/// One of the two orders the paper evaluates, beside the paper's number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaperOrder {
    /// How the paper describes the order ("left to right", "right to left").
    pub name: String,
    /// The children in send order.
    pub order: Vec<NodeId>,
    /// `a_i` in send order.
    pub a_in_order: Vec<f64>,
    /// `alpha_0` computed from equations (4)-(6).
    pub alpha0: f64,
    /// The exact value `numerator / denominator` (hand-derived, see the tests).
    pub exact_numerator: u64,
    /// Denominator of the exact value.
    pub exact_denominator: u64,
    /// What the paper prints.
    pub paper_alpha0: f64,
    /// True when `alpha0` rounds to the paper's four decimals.
    pub agrees_with_paper: bool,
    /// Its rank among the 24 orders (1 = best).
    pub rank: usize,
}

/// Everything `windrose reproduce dlt` prints for Example 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Example1 {
    /// `w_0` used (1).
    pub w0: f64,
    /// `d = n_1, n_2, n_3, n_4` (`a = 20, 10, 5, 1`): the paper's 0.9496, the worst order.
    pub left_to_right: PaperOrder,
    /// `d = n_4, n_3, n_2, n_1` (`a = 1, 5, 10, 20`): the paper's 0.6284, the optimal order.
    pub right_to_left: PaperOrder,
    /// All 24 orders, best first.
    pub ranked: Vec<RankedOrder>,
}

/// Computes Example 1 both ways and ranks its 24 orders.
pub fn example1() -> Example1 {
    let children = example1_children();
    let ranked = rank_orders(EXAMPLE1_W0, &children).expect("Example 1's inputs are valid");
    let make = |name: &str, in_order: Vec<EquivalentChild>, num: u64, den: u64, paper: f64| {
        let order: Vec<NodeId> = in_order.iter().map(|c| c.id).collect();
        let alpha0 = alpha0_unchecked(EXAMPLE1_W0, in_order.iter().map(|c| (c.a, c.b)));
        PaperOrder {
            name: name.to_string(),
            a_in_order: in_order.iter().map(|c| c.a).collect(),
            alpha0,
            exact_numerator: num,
            exact_denominator: den,
            paper_alpha0: paper,
            agrees_with_paper: (alpha0 * 1e4).round() == (paper * 1e4).round(),
            rank: ranked
                .iter()
                .find(|r| r.order == order)
                .map_or(0, |r| r.rank),
            order,
        }
    };
    let mut reversed = children.clone();
    reversed.reverse();
    Example1 {
        w0: EXAMPLE1_W0,
        left_to_right: make("left to right", children, 132, 139, 0.9496),
        right_to_left: make("right to left", reversed, 252, 401, 0.6284),
        ranked,
    }
}
