//! Helpers shared by the integration tests: in-process groups on loopback.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member};
use windrose_net::{
    run_node, run_root, NodeConfig, NodeOutcome, OutputSpec, RootJob, RunOutcome, Timeouts,
};

/// A group of `n` nodes on 127.0.0.1 with OS-chosen ports, `clusters` contiguous clusters, and
/// the listeners of every node (the root's too, unused by it).
pub async fn loopback(name: &str, n: usize, clusters: usize) -> (Arc<Group>, Vec<TcpListener>) {
    let mut listeners = Vec::new();
    let mut members = Vec::new();
    for i in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.push(Member {
            id: NodeId::from(i),
            addr: l.local_addr().unwrap().to_string(),
            cluster: ClusterId::from(i * clusters / n),
        });
        listeners.push(l);
    }
    (Arc::new(Group::new(name, members).unwrap()), listeners)
}

/// A node's configuration with short timeouts, so failures show within seconds.
pub fn config(group: &Arc<Group>, me: u32, timeout: Duration) -> NodeConfig {
    let mut c = NodeConfig::new(Membership {
        group: group.clone(),
        me: NodeId(me),
    });
    c.timeouts = Timeouts::all(timeout);
    c
}

/// Runs `job` on a fresh loopback group `name` of `nodes` nodes in `clusters` clusters, every
/// deadline `timeout`; the nodes keep what they receive in memory. The run and each node must
/// end within `limit` and every node must verify. Returns the root's outcome and every node's.
pub async fn run_in_memory(
    name: &str,
    nodes: usize,
    clusters: usize,
    job: RootJob,
    timeout: Duration,
    limit: Duration,
) -> (RunOutcome, BTreeMap<NodeId, NodeOutcome>) {
    let (group, mut listeners) = loopback(name, nodes, clusters).await;
    let mut tasks = Vec::new();
    for (i, l) in listeners.drain(..).enumerate().skip(1) {
        let mut c = config(&group, i as u32, timeout);
        c.output = OutputSpec::Memory;
        tasks.push((NodeId::from(i), tokio::spawn(run_node(l, c))));
    }
    let outcome = tokio::time::timeout(limit, run_root(config(&group, 0, timeout), job))
        .await
        .expect("the run ends in bounded time")
        .unwrap();
    assert!(outcome.all_verified(), "{:?}", outcome.failures());
    let mut outs = BTreeMap::new();
    for (id, n) in tasks {
        let out = tokio::time::timeout(limit, n)
            .await
            .expect("every node ends in bounded time")
            .unwrap()
            .unwrap();
        outs.insert(id, out);
    }
    (outcome, outs)
}
