//! Issue 16's choice grid: `auto` against simulating every candidate (tree broadcast over
//! the planner's tree, MOB, Balanced Multicasting planned from the view). Asserts the
//! simulator's completions, never wall time.

use windrose_model::NodeId;
use windrose_proto::choice::Candidate;
use windrose_sim::auto::{
    choose_on, grid_platform, run_point, summary, table, AutoSettings, Grid, GridPoint,
};

fn check(points: &[GridPoint]) {
    let (within, worst) = summary(points);
    let text = table(points);
    assert!(
        within >= 0.95,
        "auto within 10 % on {within} of the points\n{text}"
    );
    assert!(worst <= 1.5, "auto {worst}x the best somewhere\n{text}");
}

/// The reduced grid CI runs: sizes and networks where each candidate wins somewhere.
#[test]
fn auto_is_near_the_best_candidate_on_the_reduced_grid() {
    let points = Grid::reduced()
        .run(&AutoSettings::default(), |_| {})
        .unwrap();
    assert_eq!(points.len(), 48);
    check(&points);
    // Every candidate is the best somewhere and chosen somewhere: the grid exercises them.
    for c in Candidate::ALL {
        assert!(
            points.iter().any(|g| g.point.best().0 == c),
            "{c} never best\n{}",
            table(&points)
        );
        assert!(
            points.iter().any(|g| g.point.chosen == c),
            "{c} never chosen\n{}",
            table(&points)
        );
    }
}

/// Issue 16's whole grid (1 KiB to 1 GiB): `windrose reproduce auto` prints it.
#[test]
#[ignore = "minutes in release; windrose reproduce auto prints it"]
fn auto_is_near_the_best_candidate_on_the_full_grid() {
    let points = Grid::full().run(&AutoSettings::default(), |_| {}).unwrap();
    check(&points);
}

#[test]
fn a_point_is_deterministic_and_its_choice_is_what_was_simulated() {
    let p = grid_platform(&[4, 4, 4, 4], 1.0, 0.5).unwrap();
    let s = AutoSettings::default();
    let a = run_point(&p, NodeId(0), 64 << 10, &s).unwrap();
    let b = run_point(&p, NodeId(0), 64 << 10, &s).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let (choice, _) = choose_on(&p, NodeId(0), 64 << 10, &s).unwrap();
    assert_eq!(choice.chosen, a.chosen);
    assert_eq!(a.simulated_s.len(), 3);
    // Balanced plans from the view reach the bound of this network's WAN: the prediction of
    // a shaped plan is its rate, and the simulator agrees within 1 %.
    for (c, predicted) in &a.predicted_s {
        let simulated = a.simulated_s.iter().find(|(x, _)| x == c).unwrap().1;
        if *c == Candidate::Balanced {
            assert!(
                (predicted / simulated - 1.0).abs() < 0.01,
                "{predicted} {simulated}"
            );
        }
    }
}

/// Through the Host, as the runtime runs it: members probe their links and share the view,
/// then node 0 starts two automatic collectives; each reports its choice and completes at
/// every member. On a 100 ms WAN a small message goes by the tree (latency decides), a large
/// one by a multicast over the WAN's paths (bandwidth decides: the bandwidth between the
/// clusters is the hosts' guess, 10 MB/s, before any data has been metered).
#[test]
fn the_host_chooses_reports_and_runs_the_chosen_collective() {
    use bytes::Bytes;
    use std::time::Duration;
    use windrose_proto::host::{App, AppRequest, AutoRequest};
    use windrose_proto::probe::ProbeConfig;
    use windrose_proto::Input;
    use windrose_proto::Report;
    use windrose_sim::group::{group, leave_input};

    let platform = grid_platform(&[4, 4, 4], 100.0, 5.0).unwrap();
    let mut sim = group(platform, Default::default(), 3, |c| {
        c.probe = Some(ProbeConfig {
            period: Duration::from_millis(500),
            rounds: u32::MAX,
        });
        c.weather.gossip = Some(Duration::from_secs(1));
    })
    .unwrap();
    let sizes = [1usize << 10, 8 << 20];
    for (k, &len) in sizes.iter().enumerate() {
        let data = Bytes::from((0..len).map(|i| (i % 253) as u8).collect::<Vec<u8>>());
        let request = AppRequest::StartAuto(AutoRequest::new(data));
        sim.input_at(
            NodeId(0),
            3.0 + 20.0 * k as f64,
            Input::App(App::new(request)),
        )
        .unwrap();
    }
    for n in 0..12 {
        sim.input_at(NodeId(n), 60.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    let mut chosen = Vec::new();
    let mut complete = Vec::new();
    for r in &m.nodes[0].reports {
        match r.report {
            Report::ProtocolChosen {
                transfer,
                chosen: c,
                predicted,
                ..
            } => {
                assert!(predicted
                    .iter()
                    .all(|p| p.is_some_and(|p| p.completion > Duration::ZERO)));
                chosen.push((transfer, c));
            }
            Report::CollectiveComplete {
                transfer,
                finished,
                failed,
            } => complete.push((transfer, finished, failed)),
            _ => {}
        }
    }
    assert_eq!(chosen.len(), 2, "{chosen:?}");
    assert_eq!(chosen[0].1, Candidate::Broadcast);
    assert_ne!(chosen[1].1, Candidate::Broadcast);
    for (t, _) in &chosen {
        assert!(complete.contains(&(*t, 12, 0)), "{t}: {complete:?}");
    }
    // Every member received both messages whole.
    for n in 1..12 {
        let got = m.nodes[n].app_bytes_delivered;
        assert_eq!(got, sizes.iter().sum::<usize>() as u64, "node {n}");
    }
}

/// An automatic start that chooses a multicast leaves the broadcast planner as it was: the
/// next broadcast from that root is the planner's first (its `adapt` tree built, not kept
/// from the automatic start's prediction).
#[test]
fn an_automatic_start_that_chooses_a_multicast_does_not_advance_the_broadcast_planner() {
    use bytes::Bytes;
    use windrose_proto::host::{App, AppRequest, AutoRequest, BroadcastRequest};
    use windrose_proto::Input;
    use windrose_proto::Report;
    use windrose_sim::group::{group, leave_input};

    let platform = grid_platform(&[4, 4, 4], 100.0, 5.0).unwrap();
    let mut sim = group(platform, Default::default(), 3, |c| c.probe = None).unwrap();
    let data = Bytes::from(
        (0..8usize << 20)
            .map(|i| (i % 253) as u8)
            .collect::<Vec<u8>>(),
    );
    let auto = AutoRequest::new(data.clone());
    let bcast = BroadcastRequest {
        policy: auto.policy,
        segment_bytes: auto.segment_bytes,
        max_frame_payload: 1 << 20,
        data: data.slice(..1 << 10),
        transfer: None,
    };
    let app = |r: AppRequest| Input::App(App::new(r));
    sim.input_at(NodeId(0), 1.0, app(AppRequest::StartAuto(auto)))
        .unwrap();
    sim.input_at(NodeId(0), 30.0, app(AppRequest::StartBroadcast(bcast)))
        .unwrap();
    for n in 0..12 {
        sim.input_at(NodeId(n), 60.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    let reports: Vec<Report> = m.nodes[0].reports.iter().map(|r| r.report).collect();
    let chosen: Vec<Candidate> = reports
        .iter()
        .filter_map(|r| match r {
            Report::ProtocolChosen { chosen, .. } => Some(*chosen),
            _ => None,
        })
        .collect();
    assert_eq!(chosen.len(), 1);
    assert_ne!(
        chosen[0],
        Candidate::Broadcast,
        "the setup must choose a multicast"
    );
    let plans: Vec<bool> = reports
        .iter()
        .filter_map(|r| match r {
            Report::TreePlanned { built, .. } => Some(*built),
            _ => None,
        })
        .collect();
    assert_eq!(
        plans,
        [true],
        "the broadcast's plan after the automatic start"
    );
    let whole: Vec<bool> = m.completions(NodeId(0)).map(|c| c.is_whole(12)).collect();
    assert_eq!(whole, [true, true]);
}
