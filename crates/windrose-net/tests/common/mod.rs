//! Helpers shared by the integration tests: in-process groups on loopback.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member};
use windrose_net::{NodeConfig, Timeouts};

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
