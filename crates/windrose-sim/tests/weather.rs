//! Live network weather through the Host in the simulator: bandwidth measured from the data the
//! broadcasts move, round trips from the prober, rows shared with the group, and broadcast trees
//! planned from that view under the three policies (static, rebuild, adapt) while a WAN link
//! slows down between two broadcasts.

use crate::support::durations;
use crate::support::three_sites;

use std::time::Duration;
use windrose_model::platform::LinkId;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::planner::TreePolicy;
use windrose_proto::probe::ProbeConfig;
use windrose_proto::Report;
use windrose_sim::engine::{SimConfig, Simulation};
use windrose_sim::group::{group, leave_input};
use windrose_sim::metrics::Metrics;
use windrose_sim::network::Change;
use windrose_trees::adaptive::Strategy;
use windrose_trees::TreeAlgorithm;

const N: u32 = 9;
const BYTES: usize = 2 << 20;
/// A broadcast every PERIOD seconds from t = 1 s; the WAN between clusters 0 and 1 slows from
/// 5 MB/s to 0.5 MB/s at CHANGE_AT, before the third.
const PERIOD: f64 = 12.0;
const COUNT: usize = 7;
const CHANGE_AT: f64 = 20.0;

/// Runs the series under `policy`; returns the metrics and each broadcast's simulated duration
/// (from its start to the root's completion report), in order.
fn series(policy: TreePolicy) -> (Metrics, Vec<f64>) {
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim: Simulation = group(three_sites::platform(), config, 7, |c| {
        c.probe = Some(ProbeConfig {
            period: Duration::from_millis(500),
            rounds: u32::MAX,
        });
        c.weather.sample_bytes = 256 << 10;
        c.weather.gossip = Some(Duration::from_secs(1));
    })
    .unwrap();
    for (a, b) in [(0, 1), (1, 0)] {
        sim.schedule_change(
            CHANGE_AT,
            Change::Capacity {
                link: LinkId::Wan {
                    from: ClusterId(a),
                    to: ClusterId(b),
                },
                bytes_s: 0.5e6,
            },
        )
        .unwrap();
    }
    three_sites::start_broadcasts(
        &mut sim,
        policy,
        &three_sites::pattern(BYTES),
        COUNT,
        PERIOD,
    );
    let end = 1.0 + PERIOD * COUNT as f64 + 20.0;
    for n in 0..N {
        sim.input_at(NodeId(n), end, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    let durations = durations::durations(&m.nodes[0], N, &policy.to_string());
    assert_eq!(durations.len(), COUNT, "{policy}");
    (m, durations)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What a policy did with the series: each broadcast's duration, and per plan (built, swaps,
/// changed links).
type Outcome = (Vec<f64>, Vec<(bool, u32, u32)>);

fn outcome(policy: TreePolicy) -> Outcome {
    let (m, d) = series(policy);
    let plans = m.nodes[0]
        .reports
        .iter()
        .filter_map(|r| match r.report {
            Report::TreePlanned {
                built,
                swaps,
                changed_links,
                ..
            } => Some((built, swaps, changed_links)),
            _ => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(plans.len(), COUNT, "{policy}");
    // The root measured the slowed link from its own sends whenever its tree used it.
    let slow = m.nodes[0].reports.iter().any(|r| {
        matches!(r.report, Report::LinkBandwidth { peer, bytes_per_s, .. }
            if (3..6).contains(&peer.0) && bytes_per_s < 1_000_000)
    });
    eprintln!(
        "{policy:<24} measured the slow link: {slow:<5} durations (s): {d:.2?}  plans: {plans:?}"
    );
    (d, plans)
}

/// The series of issue 16 in small: the static tree keeps crossing the slowed WAN link; trees
/// planned from the live view leave it once its bandwidth has been measured (by the broadcast
/// that was running when it slowed, or by one that tried it again).
#[test]
fn trees_planned_from_the_live_view_leave_a_wan_link_that_slowed_and_a_static_tree_does_not() {
    let after = |d: &[f64]| d[2..].iter().sum::<f64>();
    let (st, _) = outcome(TreePolicy::Static {
        algorithm: TreeAlgorithm::BalancedPath,
    });
    let before = median(st[..2].to_vec());
    // The first broadcast after the change finds the link slower than its sender measured
    // and hands the slowed child to another parent between segments (tree_broadcast.rs,
    // "Leaving a link that slows"); its slowed rate then is the sender's forecast, so later
    // broadcasts of the static tree cross the link again.
    assert!(st[2] < 4.0 * before, "static, broadcast 2: {} s", st[2]);
    for (k, d) in st.iter().enumerate().skip(3) {
        assert!(
            *d > 4.0 * before,
            "static, broadcast {k}: {d} s vs {before} s before"
        );
    }
    // Balanced-Path's greedy fills the root's four child positions with the closest nodes
    // left, so with three sites of three it always hangs a node of the slowed site under the
    // root: rebuilding it does not help (reported, not asserted).
    outcome(TreePolicy::Rebuild {
        algorithm: TreeAlgorithm::BalancedPath,
    });
    // Path_Swapping's candidates (up the parent's path, down the child's) find a tree that
    // avoids the slowed link but shares another WAN link between two tree edges, which the
    // per-link costs do not see: 4.3 s per broadcast (reported, not asserted).
    outcome(TreePolicy::Adapt {
        strategy: Strategy::Path,
        threshold: 0.2,
    });
    for policy in [
        TreePolicy::Rebuild {
            algorithm: TreeAlgorithm::Mst,
        },
        TreePolicy::Adapt {
            strategy: Strategy::Position,
            threshold: 0.2,
        },
    ] {
        let (d, plans) = outcome(policy);
        assert!(
            after(&d) < 0.5 * after(&st),
            "{policy}: {} s after the change, static {} s",
            after(&d),
            after(&st)
        );
        for (k, x) in d.iter().enumerate().skip(COUNT - 2) {
            assert!(
                *x < 2.0 * before,
                "{policy}, broadcast {k}: {x} s vs {before} s before"
            );
        }
        if let TreePolicy::Adapt { .. } = policy {
            assert!(plans[0].0 && plans[1..].iter().all(|p| !p.0), "{plans:?}");
            assert!(plans.iter().any(|p| p.1 > 0), "{policy} never swapped");
        }
    }
}
