//! The live MST over TCP at the paper's scale (issue 17): seed 004's 24 processes, as six sites
//! of four members on loopback, build the MST of Table 1's latencies with GHS through their
//! Hosts, every member ending with the golden tree (S0-S3, S1-S2, S1-S4, S3-S4, S3-S5, 758.6
//! ms); then S3-S5 slows from 35.1 to 70 ms and the repairs move the tree to S0-S5, as the
//! simulator's Hosts do with the same weights and the same change: the same tree before and
//! after, and the same repair frames, kind by kind.
//!
//! Loopback's own latencies are far below Table 1's: every member gives the service Table 1's
//! weights as its own measurements (`AppRequest::MstWeight`), which is what a member's
//! forecasts would say on the paper's network.

mod common;

use bytes::Bytes;
use common::loopback;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_net::bootstrap::Membership;
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupHandle};
use windrose_proto::host::{App, AppRequest, BroadcastRequest};
use windrose_proto::mst_service::{MstBuild, MstLiveConfig, MstMetric};
use windrose_proto::planner::TreePolicy;
use windrose_proto::Input;
use windrose_sim::engine::{MemoryLog, SimConfig};
use windrose_sim::group::{group as sim_group, leave_input};

const N: usize = 24;
const SITES: usize = 6;
/// A hang guard, not a measurement: the whole build and repair take well under a second.
const LIMIT: Duration = Duration::from_secs(120);
/// S3-S5 slowed, ms.
const SLOW_S3_S5: f64 = 70.0;
/// The build's frame kinds (the rest are the repairs').
const BUILD_KINDS: [&str; 4] = ["mst_hello", "mst_ghs", "mst_parent", "mst_row"];

/// Table 1 (one-way latencies between the six sites, ms), S3-S5 slowed or not.
fn site_ms(slow: bool) -> [[f64; SITES]; SITES] {
    let mut t = windrose_model::fixtures::SEED004_SITES_MS;
    if slow {
        t[3][5] = SLOW_S3_S5;
        t[5][3] = SLOW_S3_S5;
    }
    t
}

/// The weight of the link a-b (0 inside a site, as in Table 1).
fn weight(a: usize, b: usize, slow: bool) -> f64 {
    site_ms(slow)[a * SITES / N][b * SITES / N]
}

/// Kruskal over GHS's order `(w, min id, max id)`: `(lo, hi)` edges.
fn kruskal(slow: bool) -> BTreeSet<(u32, u32)> {
    let mut edges: Vec<(f64, usize, usize)> = (0..N)
        .flat_map(|a| (a + 1..N).map(move |b| (weight(a, b, slow), a, b)))
        .collect();
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then((x.1, x.2).cmp(&(y.1, y.2))));
    let mut up: Vec<usize> = (0..N).collect();
    fn find(up: &mut [usize], mut x: usize) -> usize {
        while up[x] != x {
            x = up[x];
        }
        x
    }
    let mut tree = BTreeSet::new();
    for (_, a, b) in edges {
        let (ra, rb) = (find(&mut up, a), find(&mut up, b));
        if ra != rb {
            up[ra] = rb;
            tree.insert((a as u32, b as u32));
        }
    }
    tree
}

fn live() -> MstLiveConfig {
    MstLiveConfig {
        metric: MstMetric::Latency,
        threshold: 0.1,
        // Checked at every new forecast: the change is fed at the owners' next probe.
        check_every: 0,
        resolution: 0.1,
        build_after: Duration::from_secs(5),
        build: MstBuild::Ghs,
        ..MstLiveConfig::default()
    }
}

/// What member `me` measures of every link, as requests.
fn weights(me: usize) -> Vec<AppRequest> {
    (0..N)
        .filter(|&p| p != me)
        .map(|p| AppRequest::MstWeight {
            peer: NodeId::from(p),
            weight: weight(me, p, false),
        })
        .collect()
}

/// The slowed process pairs of S3-S5 `(S3 end, S5 end)`, in the order they are fed.
fn slowed_pairs() -> Vec<(usize, usize)> {
    (12..16)
        .flat_map(|a| (20..24).map(move |b| (a, b)))
        .collect()
}

/// Both ends' new measurement of the pair `(a, b)` (only the smaller end's counts).
fn slow_down(a: usize, b: usize) -> [(usize, AppRequest); 2] {
    let w = |peer: usize| AppRequest::MstWeight {
        peer: NodeId::from(peer),
        weight: weight(a, b, true),
    };
    [(a, w(b)), (b, w(a))]
}

/// Every member's tree, when every member holds one.
fn trees(members: &[GroupHandle]) -> Option<Vec<BTreeSet<(u32, u32)>>> {
    members
        .iter()
        .map(|h| {
            let tree = h.mst_live()?.state.tree?;
            Some(tree.into_iter().map(|(a, b)| (a.0, b.0)).collect())
        })
        .collect()
}

/// Waits until every member knows `epoch` stable (the repairs so far) and holds one tree:
/// that tree.
async fn settle(members: &[GroupHandle], epoch: u32) -> BTreeSet<(u32, u32)> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let at = members
            .iter()
            .all(|h| h.mst_live().is_some_and(|s| s.state.epoch == epoch));
        if let Some(t) = trees(members).filter(|t| at && t.iter().all(|x| *x == t[0])) {
            return t[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the members did not settle at epoch {epoch}: {:?}",
            trees(members)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// MST frames sent by every member after the build, by kind.
fn repair_frames(members: &[GroupHandle]) -> BTreeMap<String, u64> {
    let mut c = BTreeMap::new();
    for h in members {
        for f in h.frames_sent() {
            let k = f.kind.name();
            if k.starts_with("mst_") && !BUILD_KINDS.contains(&k) {
                *c.entry(k.to_string()).or_default() += f.frames;
            }
        }
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_four_members_over_tcp_build_the_six_site_mst_and_repair_it_as_the_simulator() {
    let (before, after) = (kruskal(false), kruskal(true));
    let site_edges = |t: &BTreeSet<(u32, u32)>| -> BTreeSet<(u32, u32)> {
        t.iter()
            .map(|&(a, b)| (a / 4, b / 4))
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect()
    };
    assert_eq!(
        site_edges(&before),
        BTreeSet::from([(0, 3), (1, 2), (1, 4), (3, 4), (3, 5)])
    );
    assert_eq!(
        site_edges(&after),
        BTreeSet::from([(0, 3), (0, 5), (1, 2), (1, 4), (3, 4)])
    );

    let (group, listeners) = loopback("mst-six-sites", N, SITES).await;
    let mut handles = Vec::new();
    let mut tasks = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let mut c = GroupConfig::new(Membership {
            group: group.clone(),
            me: NodeId::from(i),
        });
        c.seed = 7;
        c.probe_period = Some(Duration::from_millis(100));
        c.mst = Some(live());
        let (handle, ports) = group_channel();
        for w in weights(i) {
            assert!(handle.request(w));
        }
        tasks.push(tokio::spawn(serve_group(l, c, ports)));
        handles.push(handle);
    }
    assert_eq!(settle(&handles, 0).await, before);
    let built = repair_frames(&handles);
    assert!(built.is_empty(), "a repair before the change: {built:?}");
    // One pair at a time, each repaired before the next is measured (so the repairs'
    // Tests, which depend on the order the changes come in, can be compared).
    for (k, (a, b)) in slowed_pairs().into_iter().enumerate() {
        for (member, w) in slow_down(a, b) {
            assert!(handles[member].request(w));
        }
        settle(&handles, k as u32 + 1).await;
    }
    assert_eq!(settle(&handles, 16).await, after);
    let tcp_repairs = repair_frames(&handles);
    for h in &handles {
        assert!(h.request(AppRequest::Leave));
    }
    for t in tasks {
        tokio::time::timeout(LIMIT, t)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    // The simulator's Hosts: the same weights at the start, the same changes one a second from
    // 20 s, and an `mst-live` broadcast from the paper's root 12 at 40 s, whose data edges are the tree.
    let mut platform = Platform::builder();
    for _ in 0..SITES {
        platform = platform.cluster(ClusterSpec::uniform(N / SITES, 1e8, 1e9, 1e-4));
    }
    let platform = platform.wan_all(1e7, 5e-3).build().unwrap();
    let config = SimConfig {
        strict: true,
        ..SimConfig::default()
    };
    let mut sim = sim_group(platform, config, 7, |c| {
        c.probe = Some(windrose_proto::probe::ProbeConfig {
            period: Duration::from_millis(100),
            rounds: u32::MAX,
        });
        c.mst = Some(live());
    })
    .unwrap();
    let log = MemoryLog::new();
    sim.set_event_log(Box::new(log.clone()));
    for i in 0..N {
        for w in weights(i) {
            sim.input_at(NodeId::from(i), 0.0, Input::App(App::new(w)))
                .unwrap();
        }
    }
    for (k, (a, b)) in slowed_pairs().into_iter().enumerate() {
        for (member, w) in slow_down(a, b) {
            sim.input_at(
                NodeId::from(member),
                20.0 + k as f64,
                Input::App(App::new(w)),
            )
            .unwrap();
        }
    }
    let bcast = AppRequest::StartBroadcast(BroadcastRequest {
        policy: TreePolicy::MstLive,
        segment_bytes: 24,
        max_frame_payload: 1024,
        data: Bytes::from_static(b"seed 004: 24-byte bcast."),
        transfer: None,
    });
    sim.input_at(NodeId(12), 40.0, Input::App(App::new(bcast)))
        .unwrap();
    for i in 0..N {
        sim.input_at(NodeId::from(i), 45.0, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let mut sim_tree = BTreeSet::new();
    let mut sim_repairs: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_build = 0.0f64;
    let mut sends = Vec::new();
    for line in String::from_utf8(log.contents()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["ev"] != "send" {
            continue;
        }
        let t = v["t"].as_f64().unwrap();
        let (a, b) = (
            v["node"].as_u64().unwrap() as u32,
            v["peer"].as_u64().unwrap() as u32,
        );
        let k = v["msg"].as_str().unwrap().to_string();
        if k == "data" {
            sim_tree.insert((a.min(b), a.max(b)));
        } else if BUILD_KINDS.contains(&k.as_str()) {
            last_build = last_build.max(t);
        } else if k.starts_with("mst_") {
            sends.push((t, k));
        }
    }
    assert!(
        last_build < 20.0,
        "the simulated build ended at {last_build} s"
    );
    for (t, k) in sends {
        assert!(
            t >= 20.0,
            "a simulated repair frame ({k}) before the change, at {t} s"
        );
        *sim_repairs.entry(k).or_default() += 1;
    }
    assert_eq!(sim_tree, after);
    eprintln!("repair frames over TCP {tcp_repairs:?}, simulated {sim_repairs:?}");
    assert_eq!(tcp_repairs, sim_repairs);
    // Each epoch's waves reach all 23 others.
    assert_eq!(tcp_repairs.get("mst_stable"), Some(&(16 * (N as u64 - 1))));
}
