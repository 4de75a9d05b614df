//! The calibrated divisible-load scatter through the Host in the simulator: a group whose
//! nodes compute at unequal speeds behind links of unequal bandwidth. A first scatter, planned
//! on guesses, is the warm-up traffic: every member times its compute and every parent meters
//! the tree links its share crossed (a node the guesses gave a few kilobytes says little), and
//! the rows spread both; a second warm-up, planned on that partial view, fills it in. The next
//! scatter's root plans from the whole view:
//! its predicted finish matches the simulated one, and it finishes before the schedule that
//! assumes every node computes at the root's speed and every link carries 117 MB/s (what
//! `windrose scatter` assumes without measurements).

use bytes::Bytes;
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_proto::host::{App, AppRequest};
use windrose_proto::scatter_plan::{GivenSpeeds, ScatterRequest};
use windrose_proto::weather::Basis;
use windrose_proto::Input;
use windrose_proto::Report;
use windrose_sim::engine::{ComputeModel, SimConfig};
use windrose_sim::group::{group, leave_input};
use windrose_sim::metrics::Metrics;
use windrose_trees::dlt::OrderPolicy;
use windrose_trees::Tree;

const N: u32 = 8;
/// Each node's compute speed, MB/s.
const COMPUTE_MB_S: [f64; N as usize] = [40.0, 10.0, 80.0, 20.0, 60.0, 15.0, 30.0, 50.0];
const LOAD: usize = 64 << 20;
/// The scatters start at these times (s): two warm-ups, calibrated, uniform.
const STARTS: [f64; 4] = [1.0, 30.0, 60.0, 90.0];
/// How far the calibrated plan's predicted finish may be from the simulated one: latency,
/// the session's Ready/Go round trip and frame headers are outside the divisible-load model.
const TOLERANCE: f64 = 0.05;

/// Two sites of four: nodes of 100 MB/s in site 0, 25 MB/s in site 1, 50 MB/s between.
fn platform() -> Platform {
    Platform::builder()
        .cluster(ClusterSpec::uniform(4, 100e6, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(4, 25e6, 1e9, 1e-4))
        .wan_all(50e6, 1e-3)
        .build()
        .unwrap()
}

/// A binomial tree over the eight nodes, rooted at 0.
fn tree() -> Tree {
    let n = NodeId;
    let edges = [(1, 0), (2, 0), (4, 0), (3, 2), (5, 4), (6, 4), (7, 6)];
    let edges: Vec<(NodeId, NodeId)> = edges.iter().map(|&(c, p)| (n(c), n(p))).collect();
    Tree::from_edges(N as usize, n(0), &edges).unwrap()
}

/// One scatter as the root saw it.
#[derive(Debug)]
struct Run {
    predicted_s: f64,
    simulated_s: f64,
    measured: (u32, u32),
    /// Per node: the compute speed (bytes/s) and its basis the plan took.
    computes: Vec<(NodeId, u64, Basis)>,
}

fn run() -> (Metrics, Vec<Run>) {
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 11, |c| {
        c.weather.sample_bytes = 256 << 10;
        c.weather.gossip = Some(Duration::from_secs(1));
    })
    .unwrap();
    for (i, v) in COMPUTE_MB_S.iter().enumerate() {
        sim.set_compute(NodeId(i as u32), ComputeModel::BytesPerSecond(v * 1e6))
            .unwrap();
    }
    let data = Bytes::from(
        (0..LOAD)
            .map(|i| (i * 131 % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let uniform = GivenSpeeds {
        compute_mb_s: Some(COMPUTE_MB_S[0]),
        link_mb_s: Some(117.0),
    };
    for (k, at) in STARTS.iter().enumerate() {
        let request = ScatterRequest {
            tree: tree(),
            order: OrderPolicy::Optimal,
            given: if k == 3 {
                uniform
            } else {
                GivenSpeeds::default()
            },
            max_frame_payload: 256 << 10,
            parallel: false,
            data: data.clone(),
            transfer: None,
        };
        sim.input_at(
            NodeId(0),
            *at,
            Input::App(App::new(AppRequest::StartScatter(request))),
        )
        .unwrap();
    }
    for n in 0..N {
        sim.input_at(NodeId(n), STARTS[3] + 30.0, leave_input())
            .unwrap();
    }
    let m = sim.run().unwrap();
    let mut runs: Vec<Run> = vec![];
    let mut start = 0.0;
    for r in &m.nodes[0].reports {
        match r.report {
            Report::ScatterPlanned {
                predicted_finish,
                measured_computes,
                measured_links,
                ..
            } => {
                start = r.at_s;
                runs.push(Run {
                    predicted_s: predicted_finish.as_secs_f64(),
                    simulated_s: 0.0,
                    measured: (measured_computes, measured_links),
                    computes: vec![],
                });
            }
            Report::ScatterNodePlanned {
                node,
                compute_bytes_per_s,
                compute,
                ..
            } => runs
                .last_mut()
                .unwrap()
                .computes
                .push((node, compute_bytes_per_s, compute)),
            Report::ShareFinished { at, .. } => {
                let run = runs.last_mut().unwrap();
                run.simulated_s = run.simulated_s.max(at.as_secs_f64() - start);
            }
            Report::CollectiveComplete {
                finished, failed, ..
            } => assert_eq!((finished, failed), (N, 0)),
            _ => {}
        }
    }
    (m, runs)
}

#[test]
fn a_scatter_planned_from_the_live_view_predicts_its_finish_and_beats_the_uniform_schedule() {
    let (m, runs) = run();
    assert_eq!(runs.len(), 4, "{runs:?}");
    let [warm, warm2, calibrated, uniform] = [&runs[0], &runs[1], &runs[2], &runs[3]];
    eprintln!(
        "makespan (s): warm-ups {:.3} and {:.3} (predicted {:.3} and {:.3}; measured computes \
         and links {:?} and {:?}), calibrated {:.3} (predicted {:.3}), uniform {:.3} \
         (predicted {:.3})",
        warm.simulated_s,
        warm2.simulated_s,
        warm.predicted_s,
        warm2.predicted_s,
        warm.measured,
        warm2.measured,
        calibrated.simulated_s,
        calibrated.predicted_s,
        uniform.simulated_s,
        uniform.predicted_s
    );
    // Nothing was measured before the warm-up: all guessed.
    assert_eq!(warm.measured, (0, 0));
    // The warm-ups measured every member's compute and every tree link.
    assert_eq!(calibrated.measured, (N, N - 1));
    for &(node, bytes_s, basis) in &calibrated.computes {
        assert_eq!(basis, Basis::Measured);
        let want = COMPUTE_MB_S[node.index()] * 1e6;
        assert!(
            (bytes_s as f64 / want - 1.0).abs() < 1e-6,
            "node {node}: {bytes_s} B/s, computes at {want}"
        );
    }
    let error = (calibrated.predicted_s / calibrated.simulated_s - 1.0).abs();
    assert!(
        error < TOLERANCE,
        "predicted {} s, simulated {} s",
        calibrated.predicted_s,
        calibrated.simulated_s
    );
    assert!(
        calibrated.simulated_s < 0.8 * uniform.simulated_s,
        "calibrated {} s, uniform {} s",
        calibrated.simulated_s,
        uniform.simulated_s
    );
    // Every member measured its own speed and reported it.
    for n in 0..N {
        assert!(m.nodes[n as usize]
            .reports
            .iter()
            .any(|r| matches!(r.report, Report::ComputeSpeed { node, .. } if node == NodeId(n))));
    }
}
