//! The physical platform a flow-level simulation runs on: nodes with an uplink and a downlink,
//! grouped into clusters with an access link, and a WAN link between every ordered pair of
//! clusters.
//!
//! # Links and routes
//!
//! Every link is one-way and has a capacity in bytes per second:
//!
//! - each node `n`: [`LinkId::NodeUp`] (what `n` can send) and [`LinkId::NodeDown`] (what it can
//!   receive);
//! - each cluster `c`: [`LinkId::AccessUp`] (out of the cluster) and [`LinkId::AccessDown`] (into
//!   it);
//! - each ordered pair of distinct clusters `(a, b)`: [`LinkId::Wan`] from `a` to `b`.
//!
//! The [route](Platform::route) of a message from node `x` to node `y` is
//! `x.up → y.down` inside one cluster, and
//! `x.up → access_up(cx) → wan(cx→cy) → access_down(cy) → y.down` between clusters.
//!
//! # Latency
//!
//! Latencies are one-way, in seconds, and hierarchical: `intra_latency_s` of a cluster is the
//! latency between two of its nodes, half of it spent on the sender's uplink and half on the
//! receiver's downlink (node → cluster switch → node). The WAN latency is the latency between
//! the two clusters' gateways; access links add none. A route's latency is the sum over its
//! links, in route order:
//!
//! - same cluster: `intra(c)/2 + intra(c)/2 = intra(c)` (exactly: halving is exact in binary);
//! - different clusters: `intra(cx)/2 + wan_latency(cx→cy) + intra(cy)/2`.
//!
//! A **pair latency** ([`Platform::set_pair_latency`], `[[platform.pair]]`) replaces that sum
//! for the messages of one ordered pair of nodes and no other: the route keeps its links (and
//! so shares their capacities as before), only its latency is the pair's. It is what a single
//! process pair of a paper's experiment measures (seed 004 changes `(04,06)` to 9999 ms, not
//! every link of the site). A platform without pair latencies pays one `is_empty` test per
//! [`Platform::route`] for them.
//!
//! This is the model SimGrid builds from the same description (a star zone per cluster whose
//! host links carry half the intra-cluster latency, a gateway reached through the access link,
//! WAN links between gateways), which is what `validation/` relies on.
//!
//! # Building a platform
//!
//! Programmatically with [`Platform::builder`], or from the `[platform]` table of a TOML file
//! with [`parse_platform_toml`] / [`load_platform`]. Nodes are numbered consecutively through
//! the clusters, in the order the clusters are given.
//!
//! ```toml
//! [platform]
//! [[platform.cluster]]            # cluster 0: nodes 0..4
//! nodes = 4
//! node_uplink_bytes_s = 1.25e8    # every node of the cluster (see [[platform.node]])
//! node_downlink_bytes_s = 1.25e8
//! access_up_bytes_s = 1.25e9
//! access_down_bytes_s = 1.25e9
//! intra_latency_s = 1e-4
//! [[platform.cluster]]            # cluster 1: nodes 4..6
//! nodes = 2
//! node_uplink_bytes_s = 1.25e7
//! node_downlink_bytes_s = 1.25e7
//! access_up_bytes_s = 1.25e8
//! access_down_bytes_s = 1.25e8
//! intra_latency_s = 2e-4
//! send_overhead_s = 1e-5          # optional, LogP's o and g for every node (see SendCost)
//! send_gap_s = 2e-5
//! [platform.wan]                  # row = from, column = to; diagonal 0
//! bytes_s = [[0, 1.25e7], [2.5e6, 0]]
//! latency_s = [[0, 0.03], [0.03, 0]]
//! [[platform.node]]               # optional: one node's own capacities
//! id = 5
//! uplink_bytes_s = 1e6
//! send_overhead_s = 1e-4          # optional: one node's own send cost (a missing key is 0)
//! [[platform.pair]]               # optional: the latency between two nodes, s (see Latency)
//! a = 0
//! b = 1
//! latency_s = 0.5                 # a -> b and b -> a ...
//! both_directions = true          # ... unless false: a -> b only (default true)
//! ```
//!
//! Other top-level tables of the file (a scenario's workload, its timed changes) are ignored
//! here; inside `[platform]` every key is checked, and an error names the file, the line and
//! column, and the key.
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, LinkId, Platform};
//! use windrose_model::{ClusterId, NodeId};
//!
//! let site = ClusterSpec::uniform(2, 1.25e8, 1.25e9, 1e-4);
//! let p = Platform::builder()
//!     .cluster(site)
//!     .cluster(site)
//!     .wan_all(1.25e7, 0.02)
//!     .build()
//!     .unwrap();
//! let r = p.route(NodeId(0), NodeId(3));
//! assert_eq!(r.links()[2], LinkId::Wan { from: ClusterId(0), to: ClusterId(1) });
//! assert_eq!(r.latency_s(), 0.5e-4 + 0.02 + 0.5e-4);
//! assert_eq!(p.route(NodeId(0), NodeId(1)).latency_s(), 1e-4);
//! ```

use crate::error::line_col;
use crate::{ClusterId, ModelError, NodeId};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

/// The most nodes a platform may have (a typo such as `nodes = 10000000000` is an error, not an
/// attempt to allocate the memory).
pub const MAX_PLATFORM_NODES: usize = 1 << 24;

/// The most clusters a platform may have (the WAN tables are C×C).
pub const MAX_PLATFORM_CLUSTERS: usize = 4096;

/// One directed link of a [`Platform`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkId {
    /// What a node can send, towards its cluster.
    NodeUp(NodeId),
    /// What a node can receive, from its cluster.
    NodeDown(NodeId),
    /// A cluster's link towards the WAN.
    AccessUp(ClusterId),
    /// A cluster's link from the WAN.
    AccessDown(ClusterId),
    /// The WAN link from one cluster to another (`from != to`).
    Wan {
        /// Cluster the traffic leaves.
        from: ClusterId,
        /// Cluster the traffic enters.
        to: ClusterId,
    },
}

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkId::NodeUp(n) => write!(f, "node {n} uplink"),
            LinkId::NodeDown(n) => write!(f, "node {n} downlink"),
            LinkId::AccessUp(c) => write!(f, "cluster {c} access uplink"),
            LinkId::AccessDown(c) => write!(f, "cluster {c} access downlink"),
            LinkId::Wan { from, to } => write!(f, "WAN link {from}->{to}"),
        }
    }
}

/// The capacities and latency of one cluster; its nodes all get the same node capacities unless
/// overridden with [`PlatformBuilder::node_capacity`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ClusterSpec {
    /// Number of nodes (at least 1).
    pub nodes: usize,
    /// Uplink capacity of each node, bytes/s.
    pub node_uplink_bytes_s: f64,
    /// Downlink capacity of each node, bytes/s.
    pub node_downlink_bytes_s: f64,
    /// Capacity of the cluster's link towards the WAN, bytes/s.
    pub access_up_bytes_s: f64,
    /// Capacity of the cluster's link from the WAN, bytes/s.
    pub access_down_bytes_s: f64,
    /// One-way latency between two nodes of the cluster, seconds (half of it on each node link).
    pub intra_latency_s: f64,
}

impl ClusterSpec {
    /// A cluster of `nodes` nodes whose node links all have `node_bytes_s` in each direction and
    /// whose access link has `access_bytes_s` in each direction.
    pub fn uniform(
        nodes: usize,
        node_bytes_s: f64,
        access_bytes_s: f64,
        intra_latency_s: f64,
    ) -> Self {
        ClusterSpec {
            nodes,
            node_uplink_bytes_s: node_bytes_s,
            node_downlink_bytes_s: node_bytes_s,
            access_up_bytes_s: access_bytes_s,
            access_down_bytes_s: access_bytes_s,
            intra_latency_s,
        }
    }
}

/// The LogP-style cost of sending at a node: a message occupies its sender for `overhead_s`
/// before it leaves (LogP's `o`), and two messages of one sender start at least `gap_s` apart
/// (LogP's `g`). So a node that sends to many children pays for each of them, which the
/// network model alone (links shared fairly, no per-message cost) never charges. Zero by
/// default: a message leaves when it is sent.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct SendCost {
    /// Seconds the sender spends on each message before it leaves.
    pub overhead_s: f64,
    /// Least seconds between the starts of two messages of the sender.
    pub gap_s: f64,
}

impl SendCost {
    /// No cost: messages leave when sent.
    pub const ZERO: SendCost = SendCost {
        overhead_s: 0.0,
        gap_s: 0.0,
    };

    /// True when both are zero.
    pub fn is_zero(&self) -> bool {
        self.overhead_s == 0.0 && self.gap_s == 0.0
    }

    fn check(&self, whose: impl Fn() -> String) -> Result<(), PlatformError> {
        check_latency(|| format!("send overhead of {}", whose()), self.overhead_s)?;
        check_latency(|| format!("send gap of {}", whose()), self.gap_s)
    }
}

/// What is wrong with a platform given to [`PlatformBuilder::build`] or to a setter.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum PlatformError {
    /// No cluster at all.
    #[error("the platform has no clusters")]
    NoClusters,
    /// A cluster without nodes.
    #[error("cluster {cluster} has no nodes: every cluster needs at least one")]
    EmptyCluster {
        /// The cluster at fault.
        cluster: ClusterId,
    },
    /// More nodes or clusters than the limits allow.
    #[error("the platform is too large: {what}")]
    TooLarge {
        /// What exceeds which limit.
        what: String,
    },
    /// A capacity that is not a positive finite number.
    #[error("capacity of the {link} must be a positive, finite number of bytes/s, found {}", crate::error::compact(*.value))]
    BadCapacity {
        /// The link at fault.
        link: LinkId,
        /// The rejected value.
        value: f64,
    },
    /// A latency that is negative or not finite.
    #[error("{what} must be a finite, non-negative number of seconds, found {}", crate::error::compact(*.value))]
    BadLatency {
        /// Which latency.
        what: String,
        /// The rejected value.
        value: f64,
    },
    /// An ordered pair of clusters without a WAN link.
    #[error("no WAN link from cluster {from} to cluster {to}: every ordered pair of distinct clusters needs a capacity and a latency")]
    MissingWan {
        /// Source cluster.
        from: ClusterId,
        /// Destination cluster.
        to: ClusterId,
    },
    /// A WAN link from a cluster to itself.
    #[error("a WAN link joins two different clusters, but both ends are cluster {cluster}")]
    WanLoop {
        /// The cluster.
        cluster: ClusterId,
    },
    /// A cluster id outside the platform.
    #[error("unknown cluster {cluster}: the platform has {cluster_count} clusters")]
    UnknownCluster {
        /// The id given.
        cluster: ClusterId,
        /// Number of clusters.
        cluster_count: usize,
    },
    /// A node id outside the platform.
    #[error("unknown node {node}: the platform has {node_count} nodes ({})", crate::error::ids_in_words(*.node_count))]
    UnknownNode {
        /// The id given.
        node: NodeId,
        /// Number of nodes.
        node_count: usize,
    },
    /// A pair latency from a node to itself.
    #[error("a pair latency joins two different nodes, but both ends are node {node}")]
    PairLoop {
        /// The node.
        node: NodeId,
    },
}

/// Nodes, clusters and their links' capacities and latencies. See the [module
/// documentation](self) for the route and latency model.
#[derive(Clone, Debug, PartialEq)]
pub struct Platform {
    cluster_of: Vec<ClusterId>,
    /// First node of each cluster, plus the node count at the end.
    cluster_start: Vec<u32>,
    /// Capacity of every link, indexed by [`Platform::link_index`].
    capacity: Vec<f64>,
    intra_latency_s: Vec<f64>,
    /// C×C row-major; the diagonal is unused (0).
    wan_latency_s: Vec<f64>,
    /// Per node.
    send_cost: Vec<SendCost>,
    /// Latency of an ordered pair of nodes `(from, to)` that replaces its route's sum, seconds.
    pair_latency_s: BTreeMap<(u32, u32), f64>,
}

/// A route: its links in order (2 inside a cluster, 5 between clusters) and its latency.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Route {
    links: [LinkId; 5],
    len: u8,
    latency_s: f64,
}

impl Route {
    /// The links the route crosses, from the sender's uplink to the receiver's downlink.
    pub fn links(&self) -> &[LinkId] {
        &self.links[..self.len as usize]
    }

    /// One-way latency of the route, seconds: the sum of its links' latencies in route order,
    /// or the pair's latency when the platform sets one for its two nodes.
    pub fn latency_s(&self) -> f64 {
        self.latency_s
    }
}

fn check_capacity(link: LinkId, value: f64) -> Result<(), PlatformError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(PlatformError::BadCapacity { link, value })
    }
}

fn check_latency(what: impl FnOnce() -> String, value: f64) -> Result<(), PlatformError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(PlatformError::BadLatency {
            what: what(),
            value,
        })
    }
}

impl Platform {
    /// Starts building a platform; see [`PlatformBuilder`].
    pub fn builder() -> PlatformBuilder {
        PlatformBuilder::default()
    }

    /// The platform as a `[platform]` table that [`parse_platform_toml`] reads back to an equal
    /// platform: each cluster with its first node's capacities, a `[[platform.node]]` for every
    /// node that differs, floats in Rust's shortest round-trip form. What a driver hands to a
    /// planner that reads files, e.g. the capacities a scenario has at some instant.
    pub fn to_toml(&self) -> String {
        use std::fmt::Write as _;
        let c = self.cluster_count();
        let cap = |l| self.capacity_bytes_s(l);
        let mut s = String::from("[platform]\n");
        let mut overrides = String::new();
        for k in 0..c {
            let cl = ClusterId::from(k);
            let nodes = self.nodes_of(cl);
            let first = NodeId(nodes.start);
            let (up, down) = (cap(LinkId::NodeUp(first)), cap(LinkId::NodeDown(first)));
            let _ = write!(
                s,
                "[[platform.cluster]]\nnodes = {}\nnode_uplink_bytes_s = {up:?}\n\
                 node_downlink_bytes_s = {down:?}\naccess_up_bytes_s = {:?}\n\
                 access_down_bytes_s = {:?}\nintra_latency_s = {:?}\n",
                nodes.len(),
                cap(LinkId::AccessUp(cl)),
                cap(LinkId::AccessDown(cl)),
                self.intra_latency_s(cl),
            );
            let cost = self.send_cost(first);
            if !cost.is_zero() {
                let _ = write!(
                    s,
                    "send_overhead_s = {:?}\nsend_gap_s = {:?}\n",
                    cost.overhead_s, cost.gap_s
                );
            }
            for n in nodes.map(NodeId) {
                let (u, d) = (cap(LinkId::NodeUp(n)), cap(LinkId::NodeDown(n)));
                let mine = self.send_cost(n);
                if u != up || d != down || mine != cost {
                    let _ = write!(
                        overrides,
                        "[[platform.node]]\nid = {}\nuplink_bytes_s = {u:?}\ndownlink_bytes_s = {d:?}\n",
                        n.0
                    );
                    if mine != cost {
                        let _ = write!(
                            overrides,
                            "send_overhead_s = {:?}\nsend_gap_s = {:?}\n",
                            mine.overhead_s, mine.gap_s
                        );
                    }
                }
            }
        }
        if c > 1 {
            let row = |f: &dyn Fn(ClusterId, ClusterId) -> f64, a: usize| {
                let v: Vec<String> = (0..c)
                    .map(|b| {
                        if a == b {
                            "0.0".to_string()
                        } else {
                            format!("{:?}", f(ClusterId::from(a), ClusterId::from(b)))
                        }
                    })
                    .collect();
                format!("[{}]", v.join(", "))
            };
            let bw = |a, b| cap(LinkId::Wan { from: a, to: b });
            let lat = |a, b| self.wan_latency_s(a, b);
            let rows = |f: &dyn Fn(ClusterId, ClusterId) -> f64| {
                (0..c).map(|a| row(f, a)).collect::<Vec<_>>().join(",\n  ")
            };
            let _ = write!(
                s,
                "[platform.wan]\nbytes_s = [\n  {}\n]\nlatency_s = [\n  {}\n]\n",
                rows(&bw),
                rows(&lat)
            );
        }
        for (a, b, l) in self.pair_latencies() {
            let _ = write!(
                overrides,
                "[[platform.pair]]\na = {}\nb = {}\nlatency_s = {l:?}\nboth_directions = false\n",
                a.0, b.0
            );
        }
        s + &overrides
    }

    /// The send cost of `node` (zero unless the platform sets one). Panics on a node outside
    /// the platform, like the other per-node accessors.
    pub fn send_cost(&self, node: NodeId) -> SendCost {
        self.send_cost[node.index()]
    }

    /// Sets the send cost of `node`.
    pub fn set_send_cost(&mut self, node: NodeId, cost: SendCost) -> Result<(), PlatformError> {
        if !self.has_node(node) {
            return Err(PlatformError::UnknownNode {
                node,
                node_count: self.node_count(),
            });
        }
        cost.check(|| format!("node {node}"))?;
        self.send_cost[node.index()] = cost;
        Ok(())
    }

    /// Number of nodes; their ids are `0..node_count()`.
    pub fn node_count(&self) -> usize {
        self.cluster_of.len()
    }

    /// Number of clusters; their ids are `0..cluster_count()`.
    pub fn cluster_count(&self) -> usize {
        self.intra_latency_s.len()
    }

    /// Number of links (`2N + 2C + C(C-1)`); [`Platform::link_index`] maps them onto `0..`.
    pub fn link_count(&self) -> usize {
        self.capacity.len()
    }

    /// The cluster of a node. Panics if the node does not exist.
    pub fn cluster_of(&self, node: NodeId) -> ClusterId {
        self.cluster_of[node.index()]
    }

    /// The nodes of a cluster (consecutive ids). Panics if the cluster does not exist.
    pub fn nodes_of(&self, cluster: ClusterId) -> Range<u32> {
        let c = cluster.index();
        self.cluster_start[c]..self.cluster_start[c + 1]
    }

    /// Whether the node exists.
    pub fn has_node(&self, node: NodeId) -> bool {
        node.index() < self.node_count()
    }

    /// Whether the link exists (its nodes or clusters exist, and a WAN link joins two different
    /// clusters).
    pub fn has_link(&self, link: LinkId) -> bool {
        let c = self.cluster_count();
        match link {
            LinkId::NodeUp(n) | LinkId::NodeDown(n) => self.has_node(n),
            LinkId::AccessUp(k) | LinkId::AccessDown(k) => k.index() < c,
            LinkId::Wan { from, to } => from != to && from.index() < c && to.index() < c,
        }
    }

    /// Dense index of a link in `0..link_count()`: node links first (`2n` up, `2n+1` down), then
    /// access links, then WAN links row by row. Panics if the link does not exist.
    pub fn link_index(&self, link: LinkId) -> usize {
        assert!(
            self.has_link(link),
            "{link} does not exist in this platform"
        );
        let n = self.node_count();
        let c = self.cluster_count();
        match link {
            LinkId::NodeUp(x) => 2 * x.index(),
            LinkId::NodeDown(x) => 2 * x.index() + 1,
            LinkId::AccessUp(k) => 2 * n + 2 * k.index(),
            LinkId::AccessDown(k) => 2 * n + 2 * k.index() + 1,
            LinkId::Wan { from, to } => {
                let (a, b) = (from.index(), to.index());
                2 * n + 2 * c + a * (c - 1) + if b < a { b } else { b - 1 }
            }
        }
    }

    /// The link at a dense index (the inverse of [`Platform::link_index`]). Panics if
    /// `index >= link_count()`.
    pub fn link_at(&self, index: usize) -> LinkId {
        assert!(index < self.link_count(), "link index {index} out of range");
        let n = self.node_count();
        let c = self.cluster_count();
        if index < 2 * n {
            let node = NodeId::from(index / 2);
            if index & 1 == 0 {
                LinkId::NodeUp(node)
            } else {
                LinkId::NodeDown(node)
            }
        } else if index < 2 * n + 2 * c {
            let k = ClusterId::from((index - 2 * n) / 2);
            if (index - 2 * n) & 1 == 0 {
                LinkId::AccessUp(k)
            } else {
                LinkId::AccessDown(k)
            }
        } else {
            let w = index - 2 * n - 2 * c;
            let a = w / (c - 1);
            let r = w % (c - 1);
            let b = if r < a { r } else { r + 1 };
            LinkId::Wan {
                from: ClusterId::from(a),
                to: ClusterId::from(b),
            }
        }
    }

    /// Every link, in index order.
    pub fn links(&self) -> impl Iterator<Item = LinkId> + '_ {
        (0..self.link_count()).map(|i| self.link_at(i))
    }

    /// Capacity of a link, bytes/s. Panics if the link does not exist.
    pub fn capacity_bytes_s(&self, link: LinkId) -> f64 {
        self.capacity[self.link_index(link)]
    }

    /// Latency of a link, seconds: half the cluster's intra-cluster latency for a node link, 0
    /// for an access link, the WAN latency for a WAN link. Panics if the link does not exist.
    pub fn link_latency_s(&self, link: LinkId) -> f64 {
        assert!(
            self.has_link(link),
            "{link} does not exist in this platform"
        );
        match link {
            LinkId::NodeUp(n) | LinkId::NodeDown(n) => {
                self.intra_latency_s[self.cluster_of(n).index()] / 2.0
            }
            LinkId::AccessUp(_) | LinkId::AccessDown(_) => 0.0,
            LinkId::Wan { from, to } => self.wan_latency_s(from, to),
        }
    }

    /// One-way latency between two nodes of the cluster, seconds.
    pub fn intra_latency_s(&self, cluster: ClusterId) -> f64 {
        self.intra_latency_s[cluster.index()]
    }

    /// Latency of the WAN link between two distinct clusters' gateways, seconds.
    pub fn wan_latency_s(&self, from: ClusterId, to: ClusterId) -> f64 {
        assert!(from != to, "no WAN link from cluster {from} to itself");
        self.wan_latency_s[from.index() * self.cluster_count() + to.index()]
    }

    /// The route from `src` to `dst` (distinct nodes); see the [module documentation](self).
    /// Panics if a node does not exist or `src == dst`.
    pub fn route(&self, src: NodeId, dst: NodeId) -> Route {
        assert!(src != dst, "no route from node {src} to itself");
        let (cs, cd) = (self.cluster_of(src), self.cluster_of(dst));
        let mut links = [LinkId::NodeUp(src); 5];
        let len = if cs == cd {
            links[1] = LinkId::NodeDown(dst);
            2
        } else {
            links[1] = LinkId::AccessUp(cs);
            links[2] = LinkId::Wan { from: cs, to: cd };
            links[3] = LinkId::AccessDown(cd);
            links[4] = LinkId::NodeDown(dst);
            5
        };
        let mut latency_s = links[..len]
            .iter()
            .fold(0.0, |acc, &l| acc + self.link_latency_s(l));
        if !self.pair_latency_s.is_empty() {
            if let Some(&l) = self.pair_latency_s.get(&(src.0, dst.0)) {
                latency_s = l;
            }
        }
        Route {
            links,
            len: len as u8,
            latency_s,
        }
    }

    /// Changes a link's capacity (a positive, finite number of bytes/s).
    pub fn set_capacity(&mut self, link: LinkId, bytes_s: f64) -> Result<(), PlatformError> {
        self.check_link(link)?;
        check_capacity(link, bytes_s)?;
        let i = self.link_index(link);
        self.capacity[i] = bytes_s;
        Ok(())
    }

    /// Changes a cluster's intra-cluster latency (finite, non-negative seconds).
    pub fn set_intra_latency(
        &mut self,
        cluster: ClusterId,
        latency_s: f64,
    ) -> Result<(), PlatformError> {
        self.check_cluster(cluster)?;
        check_latency(
            || format!("intra-cluster latency of cluster {cluster}"),
            latency_s,
        )?;
        self.intra_latency_s[cluster.index()] = latency_s;
        Ok(())
    }

    /// Changes the latency of the WAN link `from → to` (finite, non-negative seconds).
    pub fn set_wan_latency(
        &mut self,
        from: ClusterId,
        to: ClusterId,
        latency_s: f64,
    ) -> Result<(), PlatformError> {
        self.check_link(LinkId::Wan { from, to })?;
        check_latency(|| format!("latency of WAN link {from}->{to}"), latency_s)?;
        let c = self.cluster_count();
        self.wan_latency_s[from.index() * c + to.index()] = latency_s;
        Ok(())
    }

    /// Sets the one-way latency from `from` to `to` (distinct nodes; finite, non-negative
    /// seconds): messages from `from` to `to`, and no others, take it in place of their route's
    /// sum of link latencies. Their route and the capacities it shares do not change. One
    /// direction: call it twice for both.
    pub fn set_pair_latency(
        &mut self,
        from: NodeId,
        to: NodeId,
        latency_s: f64,
    ) -> Result<(), PlatformError> {
        self.check_pair(from, to)?;
        check_latency(|| format!("latency of the pair {from}->{to}"), latency_s)?;
        self.pair_latency_s.insert((from.0, to.0), latency_s);
        Ok(())
    }

    /// Checks that `from` and `to` are two distinct nodes of the platform, as a pair latency
    /// needs.
    pub fn check_pair(&self, from: NodeId, to: NodeId) -> Result<(), PlatformError> {
        for node in [from, to] {
            if !self.has_node(node) {
                return Err(PlatformError::UnknownNode {
                    node,
                    node_count: self.node_count(),
                });
            }
        }
        if from == to {
            return Err(PlatformError::PairLoop { node: from });
        }
        Ok(())
    }

    /// The latency set for the ordered pair `from → to`, if any (see
    /// [`Platform::set_pair_latency`]).
    pub fn pair_latency_s(&self, from: NodeId, to: NodeId) -> Option<f64> {
        self.pair_latency_s.get(&(from.0, to.0)).copied()
    }

    /// Every pair latency, `(from, to, seconds)`, ordered by `(from, to)`.
    pub fn pair_latencies(&self) -> impl Iterator<Item = (NodeId, NodeId, f64)> + '_ {
        self.pair_latency_s
            .iter()
            .map(|(&(a, b), &l)| (NodeId(a), NodeId(b), l))
    }

    fn check_cluster(&self, cluster: ClusterId) -> Result<(), PlatformError> {
        if cluster.index() < self.cluster_count() {
            Ok(())
        } else {
            Err(PlatformError::UnknownCluster {
                cluster,
                cluster_count: self.cluster_count(),
            })
        }
    }

    /// Checks that a link exists, naming what is wrong otherwise.
    pub fn check_link(&self, link: LinkId) -> Result<(), PlatformError> {
        match link {
            LinkId::NodeUp(n) | LinkId::NodeDown(n) if !self.has_node(n) => {
                Err(PlatformError::UnknownNode {
                    node: n,
                    node_count: self.node_count(),
                })
            }
            LinkId::AccessUp(k) | LinkId::AccessDown(k) => self.check_cluster(k),
            LinkId::Wan { from, to } => {
                self.check_cluster(from)?;
                self.check_cluster(to)?;
                if from == to {
                    Err(PlatformError::WanLoop { cluster: from })
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }
}

/// Builds a [`Platform`] step by step; [`PlatformBuilder::build`] checks everything.
#[derive(Clone, Debug, Default)]
pub struct PlatformBuilder {
    clusters: Vec<ClusterSpec>,
    /// `(from, to, bytes_s, latency_s)`, later entries win.
    wan: Vec<(ClusterId, ClusterId, f64, f64)>,
    wan_all: Option<(f64, f64)>,
    /// `(node, uplink, downlink)`, `None` keeps the cluster's value; later entries win.
    nodes: Vec<(NodeId, Option<f64>, Option<f64>)>,
    /// Per cluster, then per node; later entries win.
    cluster_send_cost: Vec<(ClusterId, SendCost)>,
    node_send_cost: Vec<(NodeId, SendCost)>,
    /// `(from, to, latency_s)`, one direction each; later entries win.
    pairs: Vec<(NodeId, NodeId, f64)>,
}

impl PlatformBuilder {
    /// Appends a cluster; its nodes get the next consecutive ids.
    pub fn cluster(mut self, spec: ClusterSpec) -> Self {
        self.clusters.push(spec);
        self
    }

    /// Sets the WAN link from `from` to `to` (one direction).
    pub fn wan(mut self, from: ClusterId, to: ClusterId, bytes_s: f64, latency_s: f64) -> Self {
        self.wan.push((from, to, bytes_s, latency_s));
        self
    }

    /// Sets the WAN links in both directions between `a` and `b`.
    pub fn wan_both(self, a: ClusterId, b: ClusterId, bytes_s: f64, latency_s: f64) -> Self {
        self.wan(a, b, bytes_s, latency_s)
            .wan(b, a, bytes_s, latency_s)
    }

    /// Sets every WAN link not set with [`PlatformBuilder::wan`] to these values.
    pub fn wan_all(mut self, bytes_s: f64, latency_s: f64) -> Self {
        self.wan_all = Some((bytes_s, latency_s));
        self
    }

    /// Gives one node its own uplink and downlink capacities.
    pub fn node_capacity(
        mut self,
        node: NodeId,
        uplink_bytes_s: f64,
        downlink_bytes_s: f64,
    ) -> Self {
        self.nodes
            .push((node, Some(uplink_bytes_s), Some(downlink_bytes_s)));
        self
    }

    /// Gives every node of `cluster` this send cost (see [`SendCost`]).
    pub fn cluster_send_cost(mut self, cluster: ClusterId, cost: SendCost) -> Self {
        self.cluster_send_cost.push((cluster, cost));
        self
    }

    /// Gives one node its own send cost, over its cluster's.
    pub fn node_send_cost(mut self, node: NodeId, cost: SendCost) -> Self {
        self.node_send_cost.push((node, cost));
        self
    }

    /// Sets the one-way latency from `from` to `to` (see [`Platform::set_pair_latency`]).
    pub fn pair_latency(mut self, from: NodeId, to: NodeId, latency_s: f64) -> Self {
        self.pairs.push((from, to, latency_s));
        self
    }

    fn node_override(mut self, node: NodeId, up: Option<f64>, down: Option<f64>) -> Self {
        self.nodes.push((node, up, down));
        self
    }

    /// Checks and builds the platform.
    pub fn build(self) -> Result<Platform, PlatformError> {
        let c = self.clusters.len();
        if c == 0 {
            return Err(PlatformError::NoClusters);
        }
        if c > MAX_PLATFORM_CLUSTERS {
            return Err(PlatformError::TooLarge {
                what: format!("{c} clusters, more than {MAX_PLATFORM_CLUSTERS}"),
            });
        }
        let mut total: usize = 0;
        for (k, spec) in self.clusters.iter().enumerate() {
            if spec.nodes == 0 {
                return Err(PlatformError::EmptyCluster {
                    cluster: ClusterId::from(k),
                });
            }
            total = total.saturating_add(spec.nodes);
        }
        if total > MAX_PLATFORM_NODES {
            return Err(PlatformError::TooLarge {
                what: format!("{total} nodes, more than {MAX_PLATFORM_NODES}"),
            });
        }
        let mut cluster_of = Vec::with_capacity(total);
        let mut cluster_start = Vec::with_capacity(c + 1);
        let links = 2 * total + 2 * c + c * (c - 1);
        let mut capacity = vec![0.0; links];
        for (k, spec) in self.clusters.iter().enumerate() {
            let cl = ClusterId::from(k);
            cluster_start.push(cluster_of.len() as u32);
            for _ in 0..spec.nodes {
                let n = cluster_of.len();
                capacity[2 * n] = spec.node_uplink_bytes_s;
                capacity[2 * n + 1] = spec.node_downlink_bytes_s;
                cluster_of.push(cl);
            }
            capacity[2 * total + 2 * k] = spec.access_up_bytes_s;
            capacity[2 * total + 2 * k + 1] = spec.access_down_bytes_s;
            check_latency(
                || format!("intra-cluster latency of cluster {cl}"),
                spec.intra_latency_s,
            )?;
        }
        cluster_start.push(total as u32);
        let mut p = Platform {
            cluster_of,
            cluster_start,
            capacity,
            intra_latency_s: self.clusters.iter().map(|s| s.intra_latency_s).collect(),
            wan_latency_s: vec![0.0; c * c],
            send_cost: vec![SendCost::ZERO; total],
            pair_latency_s: BTreeMap::new(),
        };
        for &(cluster, cost) in &self.cluster_send_cost {
            if cluster.index() >= c {
                return Err(PlatformError::UnknownCluster {
                    cluster,
                    cluster_count: c,
                });
            }
            cost.check(|| format!("the nodes of cluster {cluster}"))?;
            for n in p.nodes_of(cluster) {
                p.send_cost[n as usize] = cost;
            }
        }
        for &(node, cost) in &self.node_send_cost {
            p.set_send_cost(node, cost)?;
        }
        for &(node, up, down) in &self.nodes {
            if !p.has_node(node) {
                return Err(PlatformError::UnknownNode {
                    node,
                    node_count: total,
                });
            }
            if let Some(v) = up {
                p.capacity[2 * node.index()] = v;
            }
            if let Some(v) = down {
                p.capacity[2 * node.index() + 1] = v;
            }
        }
        let mut wan_set = vec![false; c * c];
        if let Some((bytes_s, latency_s)) = self.wan_all {
            for a in 0..c {
                for b in (0..c).filter(|&b| b != a) {
                    let (from, to) = (ClusterId::from(a), ClusterId::from(b));
                    let i = p.link_index(LinkId::Wan { from, to });
                    p.capacity[i] = bytes_s;
                    p.wan_latency_s[a * c + b] = latency_s;
                    wan_set[a * c + b] = true;
                }
            }
        }
        for &(from, to, bytes_s, latency_s) in &self.wan {
            p.check_link(LinkId::Wan { from, to })?;
            let i = p.link_index(LinkId::Wan { from, to });
            p.capacity[i] = bytes_s;
            p.wan_latency_s[from.index() * c + to.index()] = latency_s;
            wan_set[from.index() * c + to.index()] = true;
        }
        for a in 0..c {
            for b in (0..c).filter(|&b| b != a) {
                let (from, to) = (ClusterId::from(a), ClusterId::from(b));
                if !wan_set[a * c + b] {
                    return Err(PlatformError::MissingWan { from, to });
                }
                check_latency(
                    || format!("latency of WAN link {from}->{to}"),
                    p.wan_latency_s[a * c + b],
                )?;
            }
        }
        for (i, &v) in p.capacity.iter().enumerate() {
            check_capacity(p.link_at(i), v)?;
        }
        for &(from, to, latency_s) in &self.pairs {
            p.set_pair_latency(from, to, latency_s)?;
        }
        Ok(p)
    }
}

// ---------------------------------------------------------------------------------------------
// TOML

#[derive(Deserialize)]
struct FileDoc {
    // Not `Spanned`: toml cannot give a span for a table created implicitly by
    // `[[platform.cluster]]`.
    platform: Option<PlatformDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlatformDoc {
    cluster: Option<Spanned<Vec<Spanned<ClusterDoc>>>>,
    wan: Option<Spanned<WanDoc>>,
    node: Option<Vec<Spanned<NodeDoc>>>,
    pair: Option<Vec<Spanned<PairDoc>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterDoc {
    nodes: Option<Spanned<i64>>,
    node_uplink_bytes_s: Option<Spanned<f64>>,
    node_downlink_bytes_s: Option<Spanned<f64>>,
    access_up_bytes_s: Option<Spanned<f64>>,
    access_down_bytes_s: Option<Spanned<f64>>,
    intra_latency_s: Option<Spanned<f64>>,
    send_overhead_s: Option<Spanned<f64>>,
    send_gap_s: Option<Spanned<f64>>,
}

type Matrix = Spanned<Vec<Spanned<Vec<Spanned<f64>>>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WanDoc {
    bytes_s: Option<Matrix>,
    latency_s: Option<Matrix>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    id: Spanned<i64>,
    uplink_bytes_s: Option<Spanned<f64>>,
    downlink_bytes_s: Option<Spanned<f64>>,
    send_overhead_s: Option<Spanned<f64>>,
    send_gap_s: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PairDoc {
    a: Option<Spanned<i64>>,
    b: Option<Spanned<i64>>,
    latency_s: Option<Spanned<f64>>,
    both_directions: Option<Spanned<bool>>,
}

struct Src<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Src<'_> {
    fn err(&self, span: &Range<usize>, message: impl Into<String>) -> ModelError {
        let (line, column) = line_col(self.text, span.start);
        ModelError::File {
            path: self.path.to_path_buf(),
            line,
            column,
            message: message.into(),
        }
    }

    fn no_pos(&self, message: impl Into<String>) -> ModelError {
        ModelError::File {
            path: self.path.to_path_buf(),
            line: 0,
            column: 0,
            message: message.into(),
        }
    }

    /// A required key, or an error at `table` naming it.
    fn need<'v, T>(
        &self,
        v: &'v Option<Spanned<T>>,
        table: &Range<usize>,
        key: &str,
        what: &str,
    ) -> Result<&'v Spanned<T>, ModelError> {
        v.as_ref()
            .ok_or_else(|| self.err(table, format!("`{key}` is missing: {what}")))
    }

    fn capacity(&self, v: &Spanned<f64>, key: &str) -> Result<f64, ModelError> {
        let x = *v.get_ref();
        if x.is_finite() && x > 0.0 {
            Ok(x)
        } else {
            Err(self.err(
                &v.span(),
                format!(
                    "`{key}` must be a positive, finite number of bytes/s, found {}",
                    crate::error::compact(x)
                ),
            ))
        }
    }

    fn latency(&self, v: &Spanned<f64>, key: &str) -> Result<f64, ModelError> {
        let x = *v.get_ref();
        if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            Err(self.err(
                &v.span(),
                format!(
                    "`{key}` must be a finite, non-negative number of seconds, found {}",
                    crate::error::compact(x)
                ),
            ))
        }
    }
}

/// Loads the `[platform]` table of a TOML file (see the [module documentation](self)).
pub fn load_platform(path: &Path) -> Result<Platform, ModelError> {
    let bytes = std::fs::read(path).map_err(|e| ModelError::File {
        path: path.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot read: {e}"),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let prefix = std::str::from_utf8(&e.as_bytes()[..good]).unwrap_or("");
        let (line, column) = line_col(prefix, prefix.len());
        ModelError::File {
            path: path.to_path_buf(),
            line,
            column,
            message: "the file is not UTF-8 text".into(),
        }
    })?;
    parse_platform_toml(&text, path)
}

/// Parses the `[platform]` table of a TOML document (other top-level tables are ignored). `path`
/// is only used in error messages, which name the file, line, column and key at fault.
pub fn parse_platform_toml(text: &str, path: &Path) -> Result<Platform, ModelError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let src = Src { text, path };
    let doc: FileDoc = toml::from_str(text).map_err(|e| {
        let message = e.message().trim().to_string();
        match e.span() {
            Some(span) => src.err(&span, message),
            None => src.no_pos(message),
        }
    })?;
    let plat = doc.platform.ok_or_else(|| {
        src.no_pos(
            "no `[platform]` table: expected `[[platform.cluster]]` entries and `[platform.wan]`",
        )
    })?;
    let clusters = plat.cluster.as_ref().ok_or_else(|| {
        src.no_pos(
            "`platform.cluster` is missing: give one `[[platform.cluster]]` table per cluster",
        )
    })?;
    if clusters.get_ref().is_empty() {
        return Err(src.err(
            &clusters.span(),
            "`platform.cluster` is empty: at least one cluster needed",
        ));
    }
    if clusters.get_ref().len() > MAX_PLATFORM_CLUSTERS {
        return Err(src.err(
            &clusters.span(),
            format!("more than {MAX_PLATFORM_CLUSTERS} clusters"),
        ));
    }
    let mut b = Platform::builder();
    let mut total: u64 = 0;
    for (k, cl) in clusters.get_ref().iter().enumerate() {
        let span = cl.span();
        let d = cl.get_ref();
        let key = |name: &str| format!("platform.cluster[{k}].{name}");
        let nodes = src.need(
            &d.nodes,
            &span,
            &key("nodes"),
            "the number of nodes of the cluster",
        )?;
        let n = *nodes.get_ref();
        if n < 1 {
            return Err(src.err(
                &nodes.span(),
                format!(
                    "`{}` is {n}: every cluster needs at least one node",
                    key("nodes")
                ),
            ));
        }
        total += n as u64;
        if total > MAX_PLATFORM_NODES as u64 {
            return Err(src.err(
                &nodes.span(),
                format!("the clusters add up to {total} nodes, more than the {MAX_PLATFORM_NODES} a platform may have"),
            ));
        }
        let cap = |v: &Option<Spanned<f64>>, name: &str, what: &str| {
            src.need(v, &span, &key(name), what)
                .and_then(|v| src.capacity(v, &key(name)))
        };
        let spec = ClusterSpec {
            nodes: n as usize,
            node_uplink_bytes_s: cap(
                &d.node_uplink_bytes_s,
                "node_uplink_bytes_s",
                "the uplink capacity of each node, bytes/s",
            )?,
            node_downlink_bytes_s: cap(
                &d.node_downlink_bytes_s,
                "node_downlink_bytes_s",
                "the downlink capacity of each node, bytes/s",
            )?,
            access_up_bytes_s: cap(
                &d.access_up_bytes_s,
                "access_up_bytes_s",
                "the capacity of the cluster's link towards the WAN, bytes/s",
            )?,
            access_down_bytes_s: cap(
                &d.access_down_bytes_s,
                "access_down_bytes_s",
                "the capacity of the cluster's link from the WAN, bytes/s",
            )?,
            intra_latency_s: {
                let name = key("intra_latency_s");
                let v = src.need(
                    &d.intra_latency_s,
                    &span,
                    &name,
                    "the one-way latency between two nodes of the cluster, seconds",
                )?;
                src.latency(v, &name)?
            },
        };
        b = b.cluster(spec);
        if let Some(cost) = send_cost(&src, &d.send_overhead_s, &d.send_gap_s, &key)? {
            b = b.cluster_send_cost(ClusterId::from(k), cost);
        }
    }
    let c = clusters.get_ref().len();
    match (&plat.wan, c) {
        (None, 1) => {}
        (None, _) => {
            return Err(src.err(
                &clusters.span(),
                format!("`platform.wan` is missing: with {c} clusters, give `[platform.wan]` with the {c}×{c} `bytes_s` and `latency_s` tables"),
            ))
        }
        (Some(w), _) => {
            let wspan = w.span();
            let w = w.get_ref();
            let bytes = src.need(&w.bytes_s, &wspan, "platform.wan.bytes_s", "the C×C WAN capacities, bytes/s (row = from, column = to)")?;
            let lat = src.need(&w.latency_s, &wspan, "platform.wan.latency_s", "the C×C WAN latencies, seconds (row = from, column = to)")?;
            let bytes = matrix(&src, bytes, c, "platform.wan.bytes_s", |v, key| src.capacity(v, key))?;
            let lat = matrix(&src, lat, c, "platform.wan.latency_s", |v, key| src.latency(v, key))?;
            for a in 0..c {
                for bb in (0..c).filter(|&x| x != a) {
                    b = b.wan(
                        ClusterId::from(a),
                        ClusterId::from(bb),
                        bytes[a * c + bb],
                        lat[a * c + bb],
                    );
                }
            }
        }
    }
    // Node id → line of its first override (lookup only, never iterated).
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (k, nd) in plat.node.iter().flatten().enumerate() {
        let d = nd.get_ref();
        let key = |name: &str| format!("platform.node[{k}].{name}");
        let id = *d.id.get_ref();
        if id < 0 || id as u64 >= total {
            return Err(src.err(
                &d.id.span(),
                format!(
                    "`{}`: node {id} does not exist: the clusters have {total} nodes ({})",
                    key("id"),
                    crate::error::ids_in_words(total as usize)
                ),
            ));
        }
        let (line, _) = line_col(text, d.id.span().start);
        if let Some(first) = seen.get(&(id as u64)) {
            return Err(src.err(
                &d.id.span(),
                format!("node {id} is given twice in `[[platform.node]]` (first on line {first})"),
            ));
        }
        seen.insert(id as u64, line);
        let cost = send_cost(&src, &d.send_overhead_s, &d.send_gap_s, &key)?;
        if d.uplink_bytes_s.is_none() && d.downlink_bytes_s.is_none() && cost.is_none() {
            return Err(src.err(
                &nd.span(),
                format!("`platform.node[{k}]` overrides nothing: give `uplink_bytes_s`, `downlink_bytes_s`, `send_overhead_s` and/or `send_gap_s`"),
            ));
        }
        if let Some(cost) = cost {
            b = b.node_send_cost(NodeId(id as u32), cost);
        }
        let up = d
            .uplink_bytes_s
            .as_ref()
            .map(|v| src.capacity(v, &key("uplink_bytes_s")))
            .transpose()?;
        let down = d
            .downlink_bytes_s
            .as_ref()
            .map(|v| src.capacity(v, &key("downlink_bytes_s")))
            .transpose()?;
        b = b.node_override(NodeId(id as u32), up, down);
    }
    for (k, pd) in plat.pair.iter().flatten().enumerate() {
        let d = pd.get_ref();
        let key = |name: &str| format!("platform.pair[{k}].{name}");
        let end =
            |v: &Option<Spanned<i64>>, name: &str| -> Result<(NodeId, Range<usize>), ModelError> {
                let v = src.need(v, &pd.span(), &key(name), "a node of the pair")?;
                let id = *v.get_ref();
                if id < 0 || id as u64 >= total {
                    return Err(src.err(
                        &v.span(),
                        format!(
                            "`{}`: node {id} does not exist: the clusters have {total} nodes ({})",
                            key(name),
                            crate::error::ids_in_words(total as usize)
                        ),
                    ));
                }
                Ok((NodeId(id as u32), v.span()))
            };
        let (x, _) = end(&d.a, "a")?;
        let (y, yspan) = end(&d.b, "b")?;
        if x == y {
            return Err(src.err(
                &yspan,
                format!(
                    "`{}`: a pair joins two different nodes, but both ends are node {x}",
                    key("b")
                ),
            ));
        }
        let lat = src.need(
            &d.latency_s,
            &pd.span(),
            &key("latency_s"),
            "the one-way latency between the two nodes, seconds",
        )?;
        let latency_s = src.latency(lat, &key("latency_s"))?;
        b = b.pair_latency(x, y, latency_s);
        if d.both_directions.as_ref().is_none_or(|v| *v.get_ref()) {
            b = b.pair_latency(y, x, latency_s);
        }
    }
    // Every value was checked above with its position; a remaining error is a bug, but report
    // it rather than panic.
    b.build().map_err(|e| src.no_pos(e.to_string()))
}

/// The send cost of a cluster or node table, None if it gives neither key (a missing one is
/// zero).
fn send_cost(
    src: &Src<'_>,
    overhead: &Option<Spanned<f64>>,
    gap: &Option<Spanned<f64>>,
    key: &dyn Fn(&str) -> String,
) -> Result<Option<SendCost>, ModelError> {
    if overhead.is_none() && gap.is_none() {
        return Ok(None);
    }
    let read = |v: &Option<Spanned<f64>>, name: &str| {
        v.as_ref().map_or(Ok(0.0), |v| src.latency(v, &key(name)))
    };
    Ok(Some(SendCost {
        overhead_s: read(overhead, "send_overhead_s")?,
        gap_s: read(gap, "send_gap_s")?,
    }))
}

/// Reads a C×C matrix of `key`, checking its shape, that the diagonal is 0 and every other
/// value with `check`; returns it row-major.
fn matrix(
    src: &Src<'_>,
    m: &Matrix,
    c: usize,
    key: &str,
    check: impl Fn(&Spanned<f64>, &str) -> Result<f64, ModelError>,
) -> Result<Vec<f64>, ModelError> {
    let rows = m.get_ref();
    if rows.len() != c {
        return Err(src.err(
            &m.span(),
            format!(
                "`{key}` has {} rows, expected {c} (one per cluster, as there are {c} `[[platform.cluster]]` tables)",
                rows.len()
            ),
        ));
    }
    let mut out = vec![0.0; c * c];
    for (i, row) in rows.iter().enumerate() {
        if row.get_ref().len() != c {
            return Err(src.err(
                &row.span(),
                format!(
                    "`{key}` row {i} has {} values, expected {c} (one per cluster)",
                    row.get_ref().len()
                ),
            ));
        }
        for (j, v) in row.get_ref().iter().enumerate() {
            let name = format!("{key}[{i}][{j}]");
            if i == j {
                if *v.get_ref() != 0.0 {
                    return Err(src.err(
                        &v.span(),
                        format!(
                            "`{name}` must be 0: there is no WAN link from cluster {i} to itself"
                        ),
                    ));
                }
                continue;
            }
            out[i * c + j] = check(v, &name)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_sites() -> Platform {
        Platform::builder()
            .cluster(ClusterSpec::uniform(3, 100.0, 1000.0, 0.002))
            .cluster(ClusterSpec {
                nodes: 2,
                node_uplink_bytes_s: 10.0,
                node_downlink_bytes_s: 20.0,
                access_up_bytes_s: 30.0,
                access_down_bytes_s: 40.0,
                intra_latency_s: 0.004,
            })
            .wan(ClusterId(0), ClusterId(1), 5.0, 0.1)
            .wan(ClusterId(1), ClusterId(0), 6.0, 0.2)
            .node_capacity(NodeId(1), 7.0, 8.0)
            .build()
            .unwrap()
    }

    #[test]
    fn link_indices_are_dense_and_invertible() {
        for c in 1..5 {
            let mut b = Platform::builder().wan_all(1.0, 0.0);
            for k in 0..c {
                b = b.cluster(ClusterSpec::uniform(k + 1, 1.0, 1.0, 0.0));
            }
            let p = b.build().unwrap();
            let n = p.node_count();
            assert_eq!(p.link_count(), 2 * n + 2 * c + c * (c - 1));
            for i in 0..p.link_count() {
                let l = p.link_at(i);
                assert!(p.has_link(l));
                assert_eq!(p.link_index(l), i, "{l}");
            }
        }
    }

    #[test]
    fn routes_and_latencies() {
        let p = two_sites();
        assert_eq!(p.node_count(), 5);
        assert_eq!(p.nodes_of(ClusterId(1)), 3..5);
        let r = p.route(NodeId(0), NodeId(2));
        assert_eq!(
            r.links(),
            &[LinkId::NodeUp(NodeId(0)), LinkId::NodeDown(NodeId(2))]
        );
        assert_eq!(r.latency_s(), 0.002);
        let r = p.route(NodeId(4), NodeId(1));
        assert_eq!(
            r.links(),
            &[
                LinkId::NodeUp(NodeId(4)),
                LinkId::AccessUp(ClusterId(1)),
                LinkId::Wan {
                    from: ClusterId(1),
                    to: ClusterId(0)
                },
                LinkId::AccessDown(ClusterId(0)),
                LinkId::NodeDown(NodeId(1)),
            ]
        );
        assert_eq!(r.latency_s(), 0.002 + 0.2 + 0.001);
        assert_eq!(p.capacity_bytes_s(LinkId::NodeUp(NodeId(1))), 7.0);
        assert_eq!(p.capacity_bytes_s(LinkId::NodeDown(NodeId(1))), 8.0);
        assert_eq!(p.capacity_bytes_s(LinkId::NodeDown(NodeId(4))), 20.0);
        assert_eq!(p.capacity_bytes_s(LinkId::AccessDown(ClusterId(1))), 40.0);
        assert_eq!(
            p.capacity_bytes_s(LinkId::Wan {
                from: ClusterId(1),
                to: ClusterId(0)
            }),
            6.0
        );
    }

    #[test]
    fn builder_errors() {
        let site = ClusterSpec::uniform(1, 1.0, 1.0, 0.0);
        assert_eq!(Platform::builder().build(), Err(PlatformError::NoClusters));
        assert_eq!(
            Platform::builder().cluster(site).cluster(site).build(),
            Err(PlatformError::MissingWan {
                from: ClusterId(0),
                to: ClusterId(1)
            })
        );
        let e = Platform::builder()
            .cluster(ClusterSpec {
                access_up_bytes_s: 0.0,
                ..site
            })
            .build()
            .unwrap_err();
        assert_eq!(e.to_string(), "capacity of the cluster 0 access uplink must be a positive, finite number of bytes/s, found 0");
        assert!(matches!(
            Platform::builder()
                .cluster(site)
                .node_capacity(NodeId(1), 1.0, 1.0)
                .build(),
            Err(PlatformError::UnknownNode { .. })
        ));
        let mut p = Platform::builder().cluster(site).build().unwrap();
        assert!(p.set_capacity(LinkId::NodeUp(NodeId(0)), f64::NAN).is_err());
        assert!(p.set_intra_latency(ClusterId(0), -1.0).is_err());
        assert!(p.set_wan_latency(ClusterId(0), ClusterId(0), 1.0).is_err());
    }

    const GOOD: &str = r#"
title = "ignored: not the platform"
[platform]
[[platform.cluster]]
nodes = 3
node_uplink_bytes_s = 100
node_downlink_bytes_s = 100
access_up_bytes_s = 1000
access_down_bytes_s = 1000
intra_latency_s = 0.002
[[platform.cluster]]
nodes = 2
node_uplink_bytes_s = 10
node_downlink_bytes_s = 20
access_up_bytes_s = 30
access_down_bytes_s = 40
intra_latency_s = 0.004
[platform.wan]
bytes_s = [[0, 5], [6, 0]]
latency_s = [[0, 0.1], [0.2, 0]]
[[platform.node]]
id = 1
uplink_bytes_s = 7
downlink_bytes_s = 8
[workload]
anything = 1
"#;

    #[test]
    fn toml_matches_builder() {
        let p = parse_platform_toml(GOOD, Path::new("p.toml")).unwrap();
        assert_eq!(p, two_sites());
    }

    #[test]
    fn to_toml_reads_back_equal() {
        let mut p = two_sites();
        assert_eq!(
            parse_platform_toml(&p.to_toml(), Path::new("w.toml")).unwrap(),
            p
        );
        // Changed capacities and latencies, a node override, awkward floats.
        p.set_capacity(
            LinkId::Wan {
                from: ClusterId(1),
                to: ClusterId(0),
            },
            0.1 + 0.2,
        )
        .unwrap();
        p.set_capacity(LinkId::NodeDown(NodeId(1)), 1e-300).unwrap();
        p.set_capacity(LinkId::AccessUp(ClusterId(0)), 3.0e15)
            .unwrap();
        p.set_wan_latency(ClusterId(0), ClusterId(1), 1.0 / 3.0)
            .unwrap();
        let text = p.to_toml();
        assert_eq!(
            parse_platform_toml(&text, Path::new("w.toml")).unwrap(),
            p,
            "{text}"
        );
        let one = Platform::builder()
            .cluster(ClusterSpec::uniform(3, 5.0, 7.0, 0.0))
            .build()
            .unwrap();
        assert_eq!(
            parse_platform_toml(&one.to_toml(), Path::new("w.toml")).unwrap(),
            one
        );
    }

    /// Send costs: per cluster, per node over it, read back from TOML, refused when negative
    /// or not finite with the node or key named.
    #[test]
    fn send_costs() {
        let c = SendCost {
            overhead_s: 1e-3,
            gap_s: 2e-3,
        };
        let mine = SendCost {
            overhead_s: 0.1 + 0.2,
            gap_s: 0.0,
        };
        let p = Platform::builder()
            .cluster(ClusterSpec::uniform(2, 1.0, 1.0, 0.0))
            .cluster(ClusterSpec::uniform(3, 1.0, 1.0, 0.0))
            .wan_all(1.0, 0.1)
            .cluster_send_cost(ClusterId(1), c)
            .node_send_cost(NodeId(3), mine)
            .build()
            .unwrap();
        let costs: Vec<SendCost> = (0..5).map(|v| p.send_cost(NodeId(v))).collect();
        assert_eq!(costs, [SendCost::ZERO, SendCost::ZERO, c, mine, c]);
        let text = p.to_toml();
        assert_eq!(
            parse_platform_toml(&text, Path::new("w.toml")).unwrap(),
            p,
            "{text}"
        );
        // Read from a file: a missing key of the pair is zero.
        let text = GOOD.replace(
            "intra_latency_s = 0.004",
            "intra_latency_s = 0.004\nsend_gap_s = 0.5",
        );
        let q = parse_platform_toml(&text, Path::new("p.toml")).unwrap();
        assert_eq!(q.send_cost(NodeId(2)), SendCost::ZERO);
        assert_eq!(
            q.send_cost(NodeId(4)),
            SendCost {
                overhead_s: 0.0,
                gap_s: 0.5
            }
        );
        let bad = GOOD.replace(
            "intra_latency_s = 0.004",
            "intra_latency_s = 0.004\nsend_overhead_s = -1",
        );
        assert!(
            err_of(&bad).contains(
                "`platform.cluster[1].send_overhead_s` must be a finite, non-negative number of seconds, found -1"
            ),
            "{}",
            err_of(&bad)
        );
        let mut p = p;
        let e = p
            .set_send_cost(
                NodeId(1),
                SendCost {
                    overhead_s: 0.0,
                    gap_s: f64::NAN,
                },
            )
            .unwrap_err();
        assert!(e.to_string().starts_with("send gap of node 1"), "{e}");
        assert!(matches!(
            p.set_send_cost(NodeId(9), c),
            Err(PlatformError::UnknownNode { .. })
        ));
    }

    fn err_of(text: &str) -> String {
        parse_platform_toml(text, Path::new("p.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn toml_errors_name_line_and_key() {
        let bad = GOOD.replace("access_down_bytes_s = 40", "access_down_bytes_s = -40");
        assert_eq!(
            err_of(&bad),
            "p.toml:16:23: `platform.cluster[1].access_down_bytes_s` must be a positive, finite number of bytes/s, found -40"
        );
        let bad = GOOD.replace(
            "latency_s = [[0, 0.1], [0.2, 0]]",
            "latency_s = [[0, 0.1], [0.2, 1]]",
        );
        assert_eq!(
            err_of(&bad),
            "p.toml:20:30: `platform.wan.latency_s[1][1]` must be 0: there is no WAN link from cluster 1 to itself"
        );
        let bad = GOOD.replace("bytes_s = [[0, 5], [6, 0]]", "bytes_s = [[0, 5], [6]]");
        assert_eq!(
            err_of(&bad),
            "p.toml:19:20: `platform.wan.bytes_s` row 1 has 1 values, expected 2 (one per cluster)"
        );
        let bad = GOOD.replace("nodes = 2", "nodez = 2");
        assert!(
            err_of(&bad).starts_with("p.toml:12:1: unknown field `nodez`"),
            "{}",
            err_of(&bad)
        );
        let bad = GOOD.replace("intra_latency_s = 0.004\n", "");
        assert!(
            err_of(&bad).contains("`platform.cluster[1].intra_latency_s` is missing"),
            "{}",
            err_of(&bad)
        );
        let bad = GOOD.replace("id = 1", "id = 5");
        assert_eq!(
            err_of(&bad),
            "p.toml:22:6: `platform.node[0].id`: node 5 does not exist: the clusters have 5 nodes (ids 0 to 4)"
        );
        let bad = format!("{GOOD}[[platform.node]]\nid = 1\nuplink_bytes_s = 3\n");
        assert!(
            err_of(&bad)
                .ends_with("node 1 is given twice in `[[platform.node]]` (first on line 22)"),
            "{}",
            err_of(&bad)
        );
        let bad = format!("{GOOD}[[platform.node]]\nid = 2\n");
        assert!(
            err_of(&bad).contains("overrides nothing"),
            "{}",
            err_of(&bad)
        );
        let bad = GOOD.replace("[platform.wan]", "[platform.wam]");
        assert!(
            err_of(&bad).contains("unknown field `wam`"),
            "{}",
            err_of(&bad)
        );
        assert_eq!(err_of("x = 1\n"), "p.toml: no `[platform]` table: expected `[[platform.cluster]]` entries and `[platform.wan]`");
        let bad = GOOD.replace(
            "[platform.wan]\nbytes_s = [[0, 5], [6, 0]]\nlatency_s = [[0, 0.1], [0.2, 0]]\n",
            "",
        );
        assert!(
            err_of(&bad).contains("`platform.wan` is missing"),
            "{}",
            err_of(&bad)
        );
    }

    #[test]
    fn module_doc_example_parses() {
        let src = include_str!("platform.rs");
        let start = src.find("//! ```toml\n").expect("doc example") + "//! ```toml\n".len();
        let end = start + src[start..].find("//! ```\n").expect("end of example");
        let text: String = src[start..end]
            .lines()
            .map(|l| l.strip_prefix("//!").unwrap_or(l).trim_start())
            .map(|l| format!("{l}\n"))
            .collect();
        let p = parse_platform_toml(&text, Path::new("doc.toml")).unwrap();
        assert_eq!(p.node_count(), 6);
        assert_eq!(p.nodes_of(ClusterId(1)), 4..6);
        assert_eq!(p.capacity_bytes_s(LinkId::NodeUp(NodeId(5))), 1e6);
        assert_eq!(p.capacity_bytes_s(LinkId::NodeDown(NodeId(5))), 1.25e7);
        assert_eq!(
            p.capacity_bytes_s(LinkId::Wan {
                from: ClusterId(1),
                to: ClusterId(0)
            }),
            2.5e6
        );
    }

    #[test]
    fn toml_single_cluster_needs_no_wan() {
        let p = parse_platform_toml(
            "[[platform.cluster]]\nnodes = 2\nnode_uplink_bytes_s = 1\nnode_downlink_bytes_s = 1\n\
             access_up_bytes_s = 1\naccess_down_bytes_s = 1\nintra_latency_s = 0\n",
            Path::new("one.toml"),
        )
        .unwrap();
        assert_eq!(p.node_count(), 2);
        assert_eq!(p.link_count(), 6);
    }
}
