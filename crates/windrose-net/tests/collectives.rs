//! Members of one long-lived group on loopback (tasks of this process, each driving its own
//! `Host` over its own connections) run real collectives: every member ends with exactly the
//! root's bytes, a scatter's shares partition the load.

mod common;

use common::{leave_all, run, start_group};
use std::time::Duration;
use windrose_model::NodeId;
use windrose_net::measure::Metric;
use windrose_net::random_payload;
use windrose_net::trees::group_tree;
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::tree_broadcast::BroadcastMsg;
use windrose_proto::Report;
use windrose_trees::dlt::{self, OrderPolicy};
use windrose_trees::TreeAlgorithm;

const MIB: usize = 1 << 20;

fn broadcast(tree: &windrose_trees::Tree, segment_bytes: u64) -> CollectiveSpec {
    CollectiveSpec::Broadcast {
        tree: TreeSpec::of(tree),
        segment_bytes,
        max_frame_payload:
            windrose_proto::tree_broadcast::BroadcastConfig::DEFAULT_MAX_FRAME_PAYLOAD,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tree_delivers_64_mib_to_eight_members_of_one_group() {
    let data = random_payload(64 * MIB, 7);
    let want = (blake3::hash(&data).to_hex().to_string(), data.len() as u64);
    let (group, mut members) = start_group("trees", 8, 2, |_| {}).await;
    for m in &mut members {
        m.keep_bytes = false;
    }
    for kind in TreeAlgorithm::ALL {
        let tree = group_tree(kind, &group, NodeId(0)).unwrap();
        let (t, finished, failed) =
            run(&mut members, 0, broadcast(&tree, MIB as u64), data.clone()).await;
        let failures: Vec<_> = members.iter().map(|m| (&m.failed, &m.lost)).collect();
        assert_eq!((finished, failed), (8, 0), "{kind}: {failures:?}");
        for (i, m) in members.iter().enumerate().skip(1) {
            assert_eq!(m.ended(t), Some(true), "{kind} member {i}");
            assert_eq!(m.digest(t).as_ref(), Some(&want), "{kind} member {i}");
        }
        // The root's account of each receiver: every byte, in a measured time.
        let done: Vec<NodeId> = members[0]
            .reports
            .iter()
            .filter_map(|r| match *r {
                Report::MemberDone {
                    transfer,
                    member,
                    finished: true,
                    bytes_delivered,
                    elapsed: Some(e),
                    ..
                } if transfer == t && bytes_delivered == want.1 && e > Duration::ZERO => {
                    Some(member)
                }
                _ => None,
            })
            .collect();
        assert_eq!(done.len(), 7, "{kind}: {done:?}");
    }
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_measure_round_trips_while_a_chain_relays_every_frame() {
    let (group, mut members) = start_group("probe", 3, 1, |c| {
        c.probe_period = Some(Duration::from_millis(1));
    })
    .await;
    let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(0)).unwrap();
    let spec = broadcast(&tree, 256 << 10);
    let (_, finished, failed) = run(&mut members, 0, spec, random_payload(8 * MIB, 1)).await;
    assert_eq!((finished, failed), (3, 0));
    let rtts: usize = members
        .iter()
        .flat_map(|m| m.handle.measurements().series)
        .filter(|s| s.metric == Metric::RttMs)
        .count();
    assert!(rtts > 0, "some round trips measured");
    // The relay sent the leaf exactly as many data frames as it received: 8 MiB in 256 KiB.
    let relay_to_leaf = members[1]
        .handle
        .frames_sent()
        .into_iter()
        .find(|f| f.to == NodeId(2) && f.kind == BroadcastMsg::DATA)
        .unwrap();
    assert_eq!(relay_to_leaf.frames, 32);
    leave_all(members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scatter_computes_every_share() {
    let (group, mut members) = start_group("scatter", 6, 1, |_| {}).await;
    let tree = group_tree(TreeAlgorithm::Binomial, &group, NodeId(0)).unwrap();
    let schedule = dlt::schedule(&tree, &[1.0; 6], &[0.1; 6], OrderPolicy::Optimal).unwrap();
    let data = random_payload(4 * MIB + 3, 9);
    let spec = CollectiveSpec::Scatter {
        schedule,
        max_frame_payload: 64 << 10,
        parallel: false,
    };
    let (_, finished, failed) = run(&mut members, 0, spec, data.clone()).await;
    assert_eq!((finished, failed), (6, 0));
    let mut shares: Vec<(u64, u64, String)> =
        members.iter().flat_map(|m| m.computed.clone()).collect();
    assert_eq!(shares.len(), 6, "one share per member");
    shares.sort();
    let mut next = 0;
    for (offset, len, hash) in &shares {
        assert_eq!(*offset, next, "the kept shares partition the load");
        let slice = &data[*offset as usize..(offset + len) as usize];
        assert_eq!(blake3::hash(slice).to_hex().as_str(), hash);
        next += len;
    }
    assert_eq!(next, data.len() as u64);
    // The root heard every member finish its share.
    let finished: Vec<NodeId> = members[0]
        .reports
        .iter()
        .filter_map(|r| match *r {
            Report::ShareFinished { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 6, "{finished:?}");
    leave_all(members).await;
}
