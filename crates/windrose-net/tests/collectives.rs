//! Eight nodes on loopback (tasks of this process, each with its own connections) run real
//! collectives: every node must end with exactly the root's bytes.

mod common;

use common::{loopback, oneshot::config};
use std::time::Duration;
use windrose_model::NodeId;
use windrose_net::trees::group_tree;
use windrose_net::wire::RunStatus;
use windrose_net::{
    random_payload, run_node, run_root, Collective, Delivered, OutputSpec, RootJob,
};
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_trees::dlt::{self, OrderPolicy};
use windrose_trees::TreeAlgorithm;

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tree_delivers_64_mib_to_eight_nodes() {
    let data = random_payload(64 * MIB, 7);
    let want = blake3::hash(&data).to_hex().to_string();
    let dir = tempfile::tempdir().unwrap();
    for kind in TreeAlgorithm::ALL {
        let (group, mut listeners) = loopback("trees", 8, 2).await;
        let tree = group_tree(kind, &group, NodeId(0)).unwrap();
        let mut nodes = Vec::new();
        for (i, l) in listeners.drain(..).enumerate().skip(1) {
            let mut c = config(&group, i as u32, Duration::from_secs(20));
            // The chain writes files (relays and the leaf); the other trees only hash.
            if kind == TreeAlgorithm::Chain {
                c.output = OutputSpec::File(dir.path().join(format!("node-{i}.bin")));
            }
            nodes.push(tokio::spawn(run_node(l, c)));
        }
        let job = RootJob::broadcast(tree, 1 << 20, data.clone());
        let outcome = tokio::time::timeout(
            Duration::from_secs(120),
            run_root(config(&group, 0, Duration::from_secs(20)), job),
        )
        .await
        .expect("the run ends in bounded time")
        .unwrap();
        assert!(outcome.all_verified(), "{kind}: {:?}", outcome.failures());
        assert_eq!(outcome.root_blake3, want);
        for r in &outcome.nodes {
            assert_eq!(r.status, RunStatus::Finished, "{kind} node {}", r.node);
            assert_eq!(
                r.blake3.as_deref(),
                Some(want.as_str()),
                "{kind} node {}",
                r.node
            );
            assert_eq!(r.bytes_received, data.len() as u64);
            assert!(r.completion_s.unwrap() > 0.0);
        }
        for n in nodes {
            let out = n.await.unwrap().unwrap();
            assert_eq!(out.report.blake3.as_deref(), Some(want.as_str()));
            if let Delivered::File(path) = &out.delivered {
                assert_eq!(
                    blake3::hash(&std::fs::read(path).unwrap())
                        .to_hex()
                        .to_string(),
                    want
                );
            } else {
                assert_ne!(kind, TreeAlgorithm::Chain, "the chain's nodes write files");
            }
        }
    }
    // Seven complete files and no partial ones.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 7, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("node-")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_measure_round_trips_and_throughput() {
    let (group, mut listeners) = loopback("probe", 3, 1).await;
    let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(0)).unwrap();
    let mut nodes = Vec::new();
    for (i, l) in listeners.drain(..).enumerate().skip(1) {
        nodes.push(tokio::spawn(run_node(
            l,
            config(&group, i as u32, Duration::from_secs(20)),
        )));
    }
    let mut job = RootJob::broadcast(tree, 256 << 10, random_payload(8 * MIB, 1));
    job.probe_period = Some(Duration::from_millis(1));
    let outcome = run_root(config(&group, 0, Duration::from_secs(20)), job)
        .await
        .unwrap();
    assert!(outcome.all_verified());
    let all = outcome.measurements();
    assert_eq!(all.len(), 3);
    let rtts = all
        .iter()
        .flat_map(|m| &m.series)
        .filter(|s| s.metric == windrose_net::measure::Metric::RttMs)
        .count();
    assert!(rtts > 0, "some round trips measured: {all:?}");
    // Frame counts: the relay sent the leaf exactly as many data frames as it received.
    let relay = outcome.nodes[0].report.as_ref().unwrap();
    let data_to_leaf = relay
        .frames_sent
        .iter()
        .find(|f| f.to == NodeId(2) && f.kind == BroadcastMsg::DATA)
        .unwrap();
    assert_eq!(data_to_leaf.frames, 32);
    for n in nodes {
        n.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scatter_computes_every_share() {
    let (group, mut listeners) = loopback("scatter", 6, 1).await;
    let tree = group_tree(TreeAlgorithm::Binomial, &group, NodeId(0)).unwrap();
    let schedule = dlt::schedule(&tree, &[1.0; 6], &[0.1; 6], OrderPolicy::Optimal).unwrap();
    let mut nodes = Vec::new();
    for (i, l) in listeners.drain(..).enumerate().skip(1) {
        nodes.push(tokio::spawn(run_node(
            l,
            config(&group, i as u32, Duration::from_secs(20)),
        )));
    }
    let data = random_payload(4 * MIB + 3, 9);
    let job = RootJob {
        collective: Collective::Scatter {
            schedule,
            parallel: false,
        },
        ..RootJob::broadcast(tree, 1, data.clone())
    };
    let outcome = run_root(config(&group, 0, Duration::from_secs(20)), job)
        .await
        .unwrap();
    assert!(outcome.all_verified(), "{:?}", outcome.failures());
    let mut kept: u64 = outcome.root_share.as_ref().unwrap().len;
    for r in &outcome.nodes {
        let share = r.share.as_ref().unwrap();
        kept += share.len;
        assert!(r.measured_finish_s.is_some() && r.predicted_finish_s.is_some());
    }
    assert_eq!(
        kept,
        data.len() as u64,
        "the kept shares partition the load"
    );
    for n in nodes {
        n.await.unwrap().unwrap();
    }
}
