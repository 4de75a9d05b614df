//! The live MST over TCP (issue 17): four members on loopback build it through their Hosts
//! (with GHS, and by rows: each member sends its row to every other and computes the tree), `mst-live` broadcasts run over it, the owner of a tree edge measures it heavier and
//! the repair swaps it; the simulator's hosts, given the same weights and the same requests,
//! end at the same tree after the same number of epochs.

mod common;

use bytes::Bytes;
use common::loopback;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_net::bootstrap::Membership;
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent, GroupHandle};
use windrose_proto::host::{App, AppRequest, BroadcastRequest};
use windrose_proto::mst_service::{MstBuild, MstLiveConfig, MstMetric};
use windrose_proto::planner::TreePolicy;
use windrose_proto::probe::ProbeConfig;
use windrose_proto::{Input, Report, TransferId};
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::group::{group as sim_group, leave_input};

const M: usize = 4;
const LIMIT: Duration = Duration::from_secs(60);
/// The heavier weight member 0 measures on its link to member 1.
const HEAVY: f64 = 5000.0;

/// Every link weighs 0 at a 1 s resolution (loopback and the simulated LAN are far below it),
/// so the tree is GHS's tie-break: the star of node 0. Links are checked at every broadcast.
fn live(build: MstBuild) -> MstLiveConfig {
    MstLiveConfig {
        build,
        metric: MstMetric::Latency,
        threshold: 0.1,
        check_every: 1,
        resolution: 1000.0,
        build_after: Duration::from_secs(5),
        ..MstLiveConfig::default()
    }
}

fn request() -> AppRequest {
    AppRequest::StartBroadcast(BroadcastRequest {
        policy: TreePolicy::MstLive,
        segment_bytes: 24,
        max_frame_payload: 1024,
        data: Bytes::from_static(b"seed 004: 24-byte bcast."),
        transfer: None,
    })
}

struct Member {
    handle: GroupHandle,
    task: tokio::task::JoinHandle<Result<(), windrose_net::NetError>>,
    reports: Vec<Report>,
    connected: usize,
}

/// Takes every member's events until `done` holds.
async fn pump(members: &mut [Member], done: impl Fn(&[Member]) -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done(members) {
        let mut progressed = false;
        for m in members.iter_mut() {
            while let Ok(ev) = m.handle.events.try_recv() {
                progressed = true;
                match ev {
                    GroupEvent::Report(r) => m.reports.push(r),
                    GroupEvent::Connected(_) => m.connected += 1,
                    _ => {}
                }
            }
        }
        if !progressed {
            assert!(tokio::time::Instant::now() < deadline, "timed out");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// (built, changed_links, swaps) of each of member 0's plans, and its completed broadcasts.
fn plans(m: &Member) -> (Vec<(bool, u32, u32)>, Vec<TransferId>) {
    let mut p = Vec::new();
    let mut done = Vec::new();
    for r in &m.reports {
        match *r {
            Report::TreePlanned {
                built,
                changed_links,
                swaps,
                ..
            } => p.push((built, changed_links, swaps)),
            Report::CollectiveComplete {
                transfer,
                finished,
                failed,
            } => {
                assert_eq!((finished, failed), (M as u32, 0));
                done.push(transfer);
            }
            _ => {}
        }
    }
    (p, done)
}

/// Data frames sent so far per (from, to).
fn data_frames(members: &[Member]) -> BTreeMap<(u32, u32), u64> {
    let mut d = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for c in m.handle.frames_sent() {
            if c.kind.name() == "data" {
                d.insert((i as u32, c.to.0), c.frames);
            }
        }
    }
    d
}

/// The undirected edges that carried data between two snapshots.
fn tree_between(
    a: &BTreeMap<(u32, u32), u64>,
    b: &BTreeMap<(u32, u32), u64>,
) -> BTreeSet<(u32, u32)> {
    b.iter()
        .filter(|(k, v)| a.get(k).copied().unwrap_or(0) < **v)
        .map(|(&(x, y), _)| (x.min(y), x.max(y)))
        .collect()
}

/// Broadcasts from member 0 one at a time until `stop` holds for its plans; returns each
/// broadcast's tree.
async fn broadcast_until(
    members: &mut [Member],
    stop: impl Fn(&[(bool, u32, u32)]) -> bool,
) -> Vec<BTreeSet<(u32, u32)>> {
    let mut trees = Vec::new();
    loop {
        let before = data_frames(members);
        let n = plans(&members[0]).1.len();
        assert!(members[0].handle.request(request()));
        pump(members, |ms| plans(&ms[0]).1.len() == n + 1).await;
        trees.push(tree_between(&before, &data_frames(members)));
        if stop(&plans(&members[0]).0) {
            return trees;
        }
        assert!(trees.len() < 200, "{:?}", plans(&members[0]).0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_mst_over_tcp_is_built_and_repaired_as_in_the_simulator() {
    built_and_repaired(MstBuild::Ghs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_mst_built_by_rows_over_tcp_is_repaired_as_in_the_simulator() {
    built_and_repaired(MstBuild::Rows).await;
}

/// The build's frame kinds (the rest are the repair's).
const BUILD_KINDS: [&str; 4] = ["mst_hello", "mst_ghs", "mst_parent", "mst_row"];

async fn built_and_repaired(build: MstBuild) {
    let star: BTreeSet<(u32, u32)> = [(0, 1), (0, 2), (0, 3)].into();
    // Kruskal on (w, lo, hi) once 0-1 weighs HEAVY: 0-2, 0-3, then 1-2.
    let repaired: BTreeSet<(u32, u32)> = [(0, 2), (0, 3), (1, 2)].into();

    let (group, listeners) = loopback("mst-live", M, 2).await;
    let mut members = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let mut c = GroupConfig::new(Membership {
            group: group.clone(),
            me: NodeId::from(i),
        });
        c.seed = 5;
        c.probe_period = Some(Duration::from_millis(100));
        c.mst = Some(live(build));
        let (handle, ports) = group_channel();
        let task = tokio::spawn(serve_group(l, c, ports));
        members.push(Member {
            handle,
            task,
            reports: Vec::new(),
            connected: 0,
        });
    }
    pump(&mut members, |ms| ms.iter().all(|m| m.connected == M - 1)).await;
    // Until a plan reuses the live tree (a fallback plan is always built from scratch).
    let built = broadcast_until(&mut members, |p| p.last().is_some_and(|x| !x.0)).await;
    assert_eq!(built.last(), Some(&star));
    assert!(members[0].handle.request(AppRequest::MstWeight {
        peer: NodeId(1),
        weight: HEAVY,
    }));
    let after = broadcast_until(&mut members, |p| p.last().is_some_and(|x| x.1 > 0)).await;
    let real_plans = plans(&members[0]).0;
    eprintln!(
        "TCP: {} broadcasts to reuse the live tree, {} more to take the repair in; plans {real_plans:?}",
        built.len(),
        after.len()
    );
    let swapped = *real_plans.last().unwrap();
    assert_eq!(swapped, (false, 1, 1), "{real_plans:?}");
    assert_eq!(after.last(), Some(&repaired));
    // Every repair frame of the one epoch: Begin, Echo and Stable over each of the 3 tree
    // edges, one Test (member 1's cheapest candidate, 1-2) and its Accept, and the Request
    // (member 0 is the root: none on the wire).
    let mut repair: BTreeMap<String, u64> = BTreeMap::new();
    let mut building: BTreeMap<String, u64> = BTreeMap::new();
    for m in &members {
        for c in m.handle.frames_sent() {
            let k = c.kind.name();
            if BUILD_KINDS.contains(&k) {
                *building.entry(k.to_string()).or_default() += c.frames;
            } else if k.starts_with("mst_") {
                *repair.entry(k.to_string()).or_default() += c.frames;
            }
        }
    }
    eprintln!("{build} build over TCP: {building:?}");
    if build == MstBuild::Rows {
        // One row per ordered pair, nothing else.
        assert_eq!(
            building,
            BTreeMap::from([("mst_row".to_string(), (M * (M - 1)) as u64)])
        );
    } else {
        assert!(!building.contains_key("mst_row"), "{building:?}");
    }
    for m in &members {
        assert!(m.handle.request(AppRequest::Leave));
    }
    for m in members {
        tokio::time::timeout(LIMIT, m.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    // The simulator's hosts: the same requests, broadcasts 1 s apart (the build is done by
    // the first), member 0's measurement before the last two.
    let platform = Platform::builder()
        .cluster(ClusterSpec::uniform(M / 2, 1e8, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(M / 2, 1e8, 1e9, 1e-4))
        .wan_all(1e7, 5e-3)
        .build()
        .unwrap();
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = sim_group(platform, config, 5, |c| {
        c.probe = Some(ProbeConfig {
            period: Duration::from_millis(100),
            rounds: u32::MAX,
        });
        c.mst = Some(live(build));
    })
    .unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    const COUNT: usize = 4;
    for k in 0..COUNT {
        if k == COUNT - 2 {
            let w = AppRequest::MstWeight {
                peer: NodeId(1),
                weight: HEAVY,
            };
            sim.input_at(NodeId(0), 2.0 + k as f64 - 0.5, Input::App(App::new(w)))
                .unwrap();
        }
        sim.input_at(NodeId(0), 2.0 + k as f64, Input::App(App::new(request())))
            .unwrap();
    }
    for n in 0..M as u32 {
        sim.input_at(NodeId(n), 2.0 + COUNT as f64 + 1.0, leave_input())
            .unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let sim_plans: Vec<(bool, u32, u32)> = m.nodes[0]
        .reports
        .iter()
        .filter_map(|r| match r.report {
            Report::TreePlanned {
                built,
                changed_links,
                swaps,
                ..
            } => Some((built, changed_links, swaps)),
            _ => None,
        })
        .collect();
    // The build is reused by the second; the measurement is fed at the third's start and
    // repaired during it; the fourth takes the epoch in.
    assert_eq!(
        sim_plans,
        vec![(true, 0, 0), (false, 0, 0), (false, 0, 0), swapped]
    );
    let mut trees = vec![BTreeSet::new(); COUNT];
    let mut sim_repair: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8(log.contents()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["ev"] != "send" {
            continue;
        }
        let k = v["msg"].as_str().unwrap();
        let (a, b) = (
            v["node"].as_u64().unwrap() as u32,
            v["peer"].as_u64().unwrap() as u32,
        );
        if k == "data" {
            let i = (v["t"].as_f64().unwrap() - 2.0).floor() as usize;
            trees[i].insert((a.min(b), a.max(b)));
        } else if k.starts_with("mst_") && !BUILD_KINDS.contains(&k) {
            *sim_repair.entry(k.to_string()).or_default() += 1;
        }
    }
    assert_eq!(trees[..COUNT - 1], vec![star.clone(); COUNT - 1]);
    assert_eq!(trees[COUNT - 1], repaired);
    assert_eq!(sim_repair, repair);
    assert_eq!(
        repair,
        BTreeMap::from([
            ("mst_accept".to_string(), 1),
            ("mst_begin".to_string(), 3),
            ("mst_echo".to_string(), 3),
            ("mst_stable".to_string(), 3),
            ("mst_test".to_string(), 1),
        ])
    );
}
