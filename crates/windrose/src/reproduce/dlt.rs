//! `windrose reproduce dlt`: Example 1 of Kim, Jee & Lee, "Optimal Distributed Computation with
//! Communication Delays" (Figure 3), beside the paper's numbers, and all 24 send orders of its
//! subtree ranked.
//!
//! The paper does not state `w_0`; its numbers need `w_0 = 1` (`T_cp = 1`, so `a_i = z_i T_cm`).
//! Besides the one-level equations ([`windrose_trees::dlt::paper::example1`]) we also run the
//! same subtree through the whole-tree scheduler that `windrose dlt` uses, and check that both
//! agree and that every node of that schedule finishes at the same instant.

use super::output::{create_dir, write_atomic};
use super::{mark, Check, DltArgs};
use crate::output::{num, print, vtable};
use anyhow::{bail, Result};
use std::fmt::Write as _;
use windrose_model::NodeId;
use windrose_trees::dlt::paper::{example1, Example1, PaperOrder};
use windrose_trees::dlt::{self, OrderPolicy, RankedOrder};
use windrose_trees::Tree;

/// Name of the CSV file `--out` receives.
pub(crate) const RANKING_CSV: &str = "dlt-example1-orders.csv";

/// Tolerance for the exact fractions.
const EXACT_TOL: f64 = 1e-12;

fn ids(order: &[NodeId]) -> String {
    order
        .iter()
        .map(|n| format!("n{}", n.0))
        .collect::<Vec<_>>()
        .join(" ")
}

fn numbers(v: &[f64]) -> String {
    v.iter().map(|&x| num(x)).collect::<Vec<_>>().join(" ")
}

/// `alpha_0` of Example 1 computed by the whole-tree scheduler: node 0 with children 1..4 (left
/// to right), every compute time 1 s, link times `a`.
fn whole_tree(ex: &Example1, policy: OrderPolicy) -> Result<(f64, f64)> {
    let n = ex.left_to_right.order.len() + 1;
    let edges: Vec<(NodeId, NodeId)> = ex
        .left_to_right
        .order
        .iter()
        .map(|&c| (c, NodeId(0)))
        .collect();
    let tree = Tree::from_edges(n, NodeId(0), &edges)?;
    let mut link = vec![0.0; n];
    for (c, a) in ex
        .left_to_right
        .order
        .iter()
        .zip(&ex.left_to_right.a_in_order)
    {
        link[c.index()] = *a;
    }
    let s = dlt::schedule(&tree, &vec![ex.w0; n], &link, policy)?;
    let root_kept = s.node(NodeId(0)).map_or(f64::NAN, |r| r.fraction_kept);
    // Largest relative spread of the finish times.
    let spread = s
        .nodes
        .iter()
        .map(|x| ((x.predicted_finish_s - s.predicted_finish_s) / s.predicted_finish_s).abs())
        .fold(0.0, f64::max);
    Ok((root_kept, spread))
}

fn paper_order_checks(o: &PaperOrder, checks: &mut Vec<Check>) {
    let exact = o.exact_numerator as f64 / o.exact_denominator as f64;
    checks.push(Check {
        ok: (o.alpha0 - exact).abs() < EXACT_TOL,
        what: format!(
            "{}: alpha_0 = {}/{} = {:.6} (to {EXACT_TOL:e})",
            o.name, o.exact_numerator, o.exact_denominator, exact
        ),
    });
    checks.push(Check {
        ok: rounds_to(o.alpha0, o.paper_alpha0),
        what: format!(
            "{}: alpha_0 = {:.6} rounds to the paper's {:.4}",
            o.name, o.alpha0, o.paper_alpha0
        ),
    });
}

/// Runs `windrose reproduce dlt`.
pub(crate) fn run(args: &DltArgs) -> Result<()> {
    let ex = example1();
    let checks = checks(&ex)?;
    print(&render(&ex, &checks))?;
    if let Some(dir) = &args.out {
        create_dir(dir)?;
        let path = dir.join(RANKING_CSV);
        write_atomic(&path, ranking_csv(&ex.ranked).as_bytes())?;
        print(&format!("\nwrote {}\n", path.display()))?;
    }
    verdict(&checks)
}

/// An error when any check failed.
fn verdict(checks: &[Check]) -> Result<()> {
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        bail!(
            "{failed} of {} checks of Example 1 disagree with the paper (marked ✗ above)",
            checks.len()
        );
    }
    Ok(())
}

/// True when `ours` rounds to the paper's four decimals.
fn rounds_to(ours: f64, paper: f64) -> bool {
    (ours * 1e4).round() == (paper * 1e4).round()
}

/// Compares Example 1 as computed with the paper.
fn checks(ex: &Example1) -> Result<Vec<Check>> {
    let total = ex.ranked.len();
    let mut checks = Vec::new();
    paper_order_checks(&ex.left_to_right, &mut checks);
    paper_order_checks(&ex.right_to_left, &mut checks);
    checks.push(Check {
        ok: total == 24,
        what: format!("4 children have 4! = 24 send orders (ranked {total})"),
    });
    let best = ex.ranked.first();
    checks.push(Check {
        ok: best.is_some_and(|b| {
            b.a_in_order.windows(2).all(|w| w[0] <= w[1]) && b.order == ex.right_to_left.order
        }),
        what: "the best order is ascending a (Theorem 1): right to left, n4 n3 n2 n1".into(),
    });
    let worst = ex.ranked.last();
    checks.push(Check {
        ok: worst.is_some_and(|w| {
            w.order == ex.left_to_right.order
                && ex.ranked.iter().all(|r| r.alpha0 <= w.alpha0)
                && ex.ranked.iter().filter(|r| r.alpha0 == w.alpha0).count() == 1
        }),
        what: "the paper's left-to-right order (Cheng & Robertazzi's) is the worst of the 24"
            .into(),
    });
    for (policy, o) in [
        (OrderPolicy::Given, &ex.left_to_right),
        (OrderPolicy::Optimal, &ex.right_to_left),
    ] {
        let (alpha0, spread) = whole_tree(ex, policy)?;
        checks.push(Check {
            ok: (alpha0 - o.alpha0).abs() < EXACT_TOL && spread < 1e-12,
            what: format!(
                "`windrose dlt --order {policy}` on this subtree: alpha_0 = {alpha0:.6}, every \
                 node finishes together (largest relative difference {spread:.1e})"
            ),
        });
    }
    Ok(checks)
}

/// The ranking as CSV: rank, send order (child ids), a in that order, alpha_0, finish time.
fn ranking_csv(ranked: &[RankedOrder]) -> String {
    let mut s = String::from("rank,order,a_in_order,alpha0,finish_time_t_cp\n");
    for r in ranked {
        let order: Vec<String> = r.order.iter().map(|n| n.0.to_string()).collect();
        let a: Vec<String> = r.a_in_order.iter().map(|&x| num(x)).collect();
        let _ = writeln!(
            s,
            "{},{},{},{:.12},{:.12}",
            r.rank,
            order.join(" "),
            a.join(" "),
            r.alpha0,
            r.finish_time
        );
    }
    s
}

fn render(ex: &Example1, checks: &[Check]) -> String {
    let total = ex.ranked.len();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "reproduce dlt: Example 1 of Kim, Jee & Lee, \"Optimal Distributed Computation with \
         Communication Delays\""
    );
    let _ = writeln!(
        out,
        "Figure 3: parent n0 with w_0 = {} (not stated in the paper; its numbers need 1), children \
         n1..n4 left to right",
        num(ex.w0)
    );
    let _ = writeln!(
        out,
        "with a = {} and b = 1 each.",
        ex.left_to_right
            .a_in_order
            .iter()
            .map(|&a| num(a))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str("\nThe two orders of the paper\n");
    let orders = [&ex.left_to_right, &ex.right_to_left];
    let rows: Vec<Vec<String>> = orders
        .iter()
        .map(|o| {
            vec![
                o.name.clone(),
                ids(&o.order),
                numbers(&o.a_in_order),
                format!("{:.6}", o.alpha0),
                format!(
                    "{}/{} = {:.6}",
                    o.exact_numerator,
                    o.exact_denominator,
                    o.exact_numerator as f64 / o.exact_denominator as f64
                ),
                format!("{:.4}", o.paper_alpha0),
                format!("{} of {total}", o.rank),
            ]
        })
        .collect();
    let header = [
        "order",
        "send order",
        "a in order",
        "alpha_0",
        "exact",
        "paper",
        "rank",
    ];
    for (i, line) in vtable(&header, &rows).iter().enumerate() {
        out.push_str(line);
        if let Some(o) = i.checked_sub(1).map(|k| orders[k]) {
            let exact = o.exact_numerator as f64 / o.exact_denominator as f64;
            let _ = write!(
                out,
                "  {}",
                mark(rounds_to(o.alpha0, o.paper_alpha0) && (o.alpha0 - exact).abs() < EXACT_TOL)
            );
        }
        out.push('\n');
    }

    let _ = writeln!(
        out,
        "\nAll {total} send orders, best first (the finish time is alpha_0 w_0 T_cp = alpha_0 \
         here)"
    );
    let rows: Vec<Vec<String>> = ex
        .ranked
        .iter()
        .map(|r| {
            vec![
                r.rank.to_string(),
                ids(&r.order),
                numbers(&r.a_in_order),
                format!("{:.6}", r.alpha0),
            ]
        })
        .collect();
    let lines = vtable(&["rank", "send order", "a in order", "alpha_0"], &rows);
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        if let Some(r) = i.checked_sub(1).and_then(|k| ex.ranked.get(k)) {
            if r.order == ex.right_to_left.order {
                let _ = write!(
                    out,
                    "  {} best: ascending a (Theorem 1) = the paper's right to left, 0.6284",
                    mark(r.rank == 1)
                );
            } else if r.order == ex.left_to_right.order {
                let _ = write!(
                    out,
                    "  {} worst: the paper's left to right (Cheng & Robertazzi), 0.9496",
                    mark(r.rank == total)
                );
            }
        }
        out.push('\n');
    }

    out.push_str("\nChecks\n");
    for c in checks {
        let _ = writeln!(out, "  {} {}", mark(c.ok), c.what);
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed == 0 {
        let _ = writeln!(out, "\nAll {} checks agree with the paper.", checks.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_passes_and_the_csv_has_24_rows() {
        let ex = example1();
        let c = checks(&ex).unwrap();
        assert!(c.iter().all(|c| c.ok));
        assert!(verdict(&c).is_ok());
        let text = render(&ex, &c);
        assert!(text.contains("0.9496") && text.contains("0.6284") && !text.contains('✗'));
        let (given, spread) = whole_tree(&ex, OrderPolicy::Given).unwrap();
        assert!((given - 132.0 / 139.0).abs() < EXACT_TOL && spread < 1e-12);
        let (best, _) = whole_tree(&ex, OrderPolicy::Optimal).unwrap();
        assert!((best - 252.0 / 401.0).abs() < EXACT_TOL);
        let csv = ranking_csv(&ex.ranked);
        assert_eq!(csv.lines().count(), 25);
        assert!(csv
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("1,4 3 2 1,1 5 10 20,0.628428927"));
        assert!(csv
            .lines()
            .last()
            .unwrap()
            .starts_with("24,1 2 3 4,20 10 5 1,0.949640287"));
    }

    #[test]
    fn a_wrong_value_is_caught() {
        // alpha_0 off in the 7th decimal: still rounds to 0.6284, but is not 252/401.
        let mut ex = example1();
        ex.right_to_left.alpha0 += 1e-7;
        let c = checks(&ex).unwrap();
        assert_eq!(c.iter().filter(|c| !c.ok).count(), 2); // exact value, and dlt's schedule
        assert!(render(&ex, &c).contains('✗'));
        assert!(verdict(&c).is_err());
        // A paper value that does not round the same.
        let mut ex = example1();
        ex.left_to_right.paper_alpha0 = 0.9497;
        assert!(verdict(&checks(&ex).unwrap()).is_err());
        // The ranking upside down: best and worst are wrong.
        let mut ex = example1();
        ex.ranked.reverse();
        let c = checks(&ex).unwrap();
        assert_eq!(c.iter().filter(|c| !c.ok).count(), 2);
    }
}
