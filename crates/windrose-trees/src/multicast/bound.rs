//! The physical limit of a multicast: the largest rate at which a root can deliver the same data
//! to every other node of a [`Platform`].
//!
//! # The graph
//!
//! The platform becomes a flow network ([`platform_network`]) with, per cluster `c`, four
//! switch vertices and, per node, one vertex:
//!
//! - `node n → up(c)`, capacity: n's uplink; `down(c) → node n`, capacity: n's downlink (node
//!   splitting: what enters a node is bounded by its downlink, what leaves it by its uplink);
//! - `up(c) → down(c)`, unbounded: the cluster's switch carries traffic between its nodes;
//! - `up(c) → out(c)`, capacity: the cluster's access uplink; `in(c) → down(c)`: its access
//!   downlink;
//! - `out(a) → in(b)`, capacity: the WAN link `a → b`.
//!
//! Traffic entering a cluster from the WAN can only go down to a node: it crosses another
//! cluster only by being relayed by one of its nodes, exactly as the platform's
//! [routes](Platform::route) do.
//!
//! # The bound
//!
//! The multicast throughput from `root` can never exceed the max-flow from the root to any one
//! receiver, so the bound is the minimum over receivers of the max-flow ([`multicast_bound`]).
//! By Edmonds' branching theorem it is also achievable by a fractional packing of spanning
//! arborescences when relaying nodes may forward at will (Edmonds 1973); with routes that share
//! access and WAN links it is an upper bound. The max-flow is Dinic's algorithm
//! ([`FlowNetwork::max_flow`]) on `f64` capacities, with a tolerance relative to the largest
//! capacity.
//!
//! One max-flow per cluster is enough, not one per receiver. A receiver `v` of cluster `c` is
//! entered only by its downlink arc `down(c) → v`, and a simple path from the root to `down(c)`
//! never visits a node of `c` (each is entered only from `down(c)` itself). So a flow to
//! `down(c)` never uses `v`'s arcs, and the max-flow from the root to `v` is
//! `min(v's downlink, max-flow from the root to down(c))`: every cut separating the root from
//! `down(c)` separates it from `v`, and any flow into `down(c)` up to `v`'s downlink continues
//! to `v`. The bound costs `clusters` max-flows on a network of `nodes + 4 × clusters`
//! vertices, near-linear in the nodes for a fixed number of clusters (it was one max-flow per
//! receiver, quadratic: about 10 CPU seconds at 16,384 nodes in 4 clusters).
//!
//! For a platform whose capacities change over time, [`completion_time_s`] integrates a
//! piecewise-constant bound until a message is delivered. That is not an upper bound on what a
//! protocol can do: a relay may receive data while its own links to a receiver are slow and
//! forward it after they recover. [`dynamic_completion_time_s`] allows exactly that: it
//! computes max-flows in the time-expanded network (one copy of the platform per interval, arc
//! capacities in bytes = rate × duration, and unbounded holdover arcs that let every node keep
//! what it received for later intervals), so no protocol on the platform can finish earlier.
//!
//! ```
//! use windrose_model::platform::{ClusterSpec, Platform};
//! use windrose_model::NodeId;
//! use windrose_trees::multicast::bound::multicast_bound;
//!
//! // Two clusters of 2 nodes, 100 MB/s nodes, a 1 MB/s WAN: the WAN is the bottleneck.
//! let site = ClusterSpec::uniform(2, 1e8, 1e9, 1e-4);
//! let p = Platform::builder().cluster(site).cluster(site).wan_all(1e6, 0.01).build().unwrap();
//! let b = multicast_bound(&p, NodeId(0)).unwrap();
//! assert!((b.bytes_s - 1e6).abs() < 1e-3);
//! ```

use std::collections::VecDeque;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::{ClusterId, NodeId};

/// What can go wrong computing a bound.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum BoundError {
    /// The root is not a node of the platform.
    #[error("unknown root node {root}: the platform has {node_count} nodes")]
    UnknownRoot {
        /// The root given.
        root: NodeId,
        /// Nodes of the platform.
        node_count: usize,
    },
    /// The platform has a single node: nobody to multicast to.
    #[error("the platform has no receivers: only the root")]
    NoReceivers,
}

/// One arc of a [`FlowNetwork`]: its ends, its capacity and the flow it carries.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Arc {
    /// Tail vertex.
    pub from: usize,
    /// Head vertex.
    pub to: usize,
    /// Capacity (`f64::INFINITY` for an unbounded arc).
    pub capacity: f64,
    /// Flow after the last [`FlowNetwork::max_flow`].
    pub flow: f64,
}

/// A directed graph with arc capacities, and Dinic's max-flow on it.
#[derive(Clone, Debug, Default)]
pub struct FlowNetwork {
    /// Arcs in insertion order; arc `2i` is the i-th arc added, `2i + 1` its residual twin.
    arcs: Vec<Arc>,
    /// Out-arcs (indices into `arcs`, twins included) of each vertex.
    adj: Vec<Vec<usize>>,
}

impl FlowNetwork {
    /// A network of `vertices` vertices and no arcs.
    pub fn new(vertices: usize) -> Self {
        FlowNetwork {
            arcs: Vec::new(),
            adj: vec![Vec::new(); vertices],
        }
    }

    /// Number of vertices.
    pub fn vertex_count(&self) -> usize {
        self.adj.len()
    }

    /// Adds an arc `from → to` of capacity `capacity` (non-negative, may be infinite); returns
    /// its index for [`FlowNetwork::arc`].
    pub fn add_arc(&mut self, from: usize, to: usize, capacity: f64) -> usize {
        let id = self.arcs.len();
        self.arcs.push(Arc {
            from,
            to,
            capacity,
            flow: 0.0,
        });
        self.arcs.push(Arc {
            from: to,
            to: from,
            capacity: 0.0,
            flow: 0.0,
        });
        self.adj[from].push(id);
        self.adj[to].push(id + 1);
        id / 2
    }

    /// The `i`-th arc added.
    pub fn arc(&self, i: usize) -> Arc {
        self.arcs[2 * i]
    }

    /// The arcs added, in order.
    pub fn arcs(&self) -> impl Iterator<Item = Arc> + '_ {
        self.arcs.iter().step_by(2).copied()
    }

    fn residual(&self, a: usize) -> f64 {
        self.arcs[a].capacity - self.arcs[a].flow
    }

    /// The maximum flow from `s` to `t` (Dinic: BFS level graph, then blocking flows by DFS
    /// with current-arc pointers). Resets any previous flow first. Residual capacities below
    /// `1e-12 ×` the largest finite capacity count as zero.
    pub fn max_flow(&mut self, s: usize, t: usize) -> f64 {
        for a in &mut self.arcs {
            a.flow = 0.0;
        }
        if s == t {
            return f64::INFINITY;
        }
        let max_cap = self
            .arcs
            .iter()
            .map(|a| a.capacity)
            .filter(|c| c.is_finite())
            .fold(0.0, f64::max);
        let eps = (max_cap * 1e-12).max(f64::MIN_POSITIVE);
        let n = self.adj.len();
        let mut total = 0.0;
        let mut level = vec![usize::MAX; n];
        let mut next = vec![0usize; n];
        loop {
            // BFS: levels in the residual graph.
            level.iter_mut().for_each(|l| *l = usize::MAX);
            level[s] = 0;
            let mut queue = VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for &a in &self.adj[u] {
                    let v = self.arcs[a].to;
                    if level[v] == usize::MAX && self.residual(a) > eps {
                        level[v] = level[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            if level[t] == usize::MAX {
                return total;
            }
            next.iter_mut().for_each(|x| *x = 0);
            loop {
                let pushed = self.augment(s, t, f64::INFINITY, &level, &mut next, eps);
                if pushed <= eps {
                    break;
                }
                if pushed.is_infinite() {
                    return f64::INFINITY;
                }
                total += pushed;
            }
        }
    }

    /// One augmenting path of the level graph from `u`, at most `limit`.
    fn augment(
        &mut self,
        u: usize,
        t: usize,
        limit: f64,
        level: &[usize],
        next: &mut [usize],
        eps: f64,
    ) -> f64 {
        if u == t {
            return limit;
        }
        while next[u] < self.adj[u].len() {
            let a = self.adj[u][next[u]];
            let v = self.arcs[a].to;
            let r = self.residual(a);
            if r > eps && level[v] == level[u] + 1 {
                let pushed = self.augment(v, t, limit.min(r), level, next, eps);
                if pushed > eps {
                    if pushed.is_finite() {
                        self.arcs[a].flow += pushed;
                        self.arcs[a ^ 1].flow -= pushed;
                    }
                    return pushed;
                }
            }
            next[u] += 1;
        }
        0.0
    }
}

/// A platform as a [`FlowNetwork`] (see the [module docs](self)), with the vertex of each node
/// and the platform link behind each bounded arc.
#[derive(Clone, Debug)]
pub struct PlatformNetwork {
    /// The network.
    pub network: FlowNetwork,
    /// For each arc of `network` (in insertion order), the platform link it stands for, or
    /// None for a cluster's internal switching arc.
    pub arc_links: Vec<Option<LinkId>>,
    node_count: usize,
}

impl PlatformNetwork {
    /// The vertex of a node.
    pub fn vertex(&self, node: NodeId) -> usize {
        node.0 as usize
    }

    /// The vertex of a cluster's down switch, through which every node of the cluster is
    /// entered.
    pub fn cluster_down_vertex(&self, cluster: ClusterId) -> usize {
        self.node_count + 4 * cluster.0 as usize + 1
    }

    /// Number of nodes of the platform (their vertices are `0..node_count`).
    pub fn node_count(&self) -> usize {
        self.node_count
    }
}

/// Builds the flow network of a platform (see the [module docs](self)).
pub fn platform_network(platform: &Platform) -> PlatformNetwork {
    let n = platform.node_count();
    let c = platform.cluster_count();
    // Vertices: nodes 0..n, then per cluster up, down, out, in.
    let up = |k: usize| n + 4 * k;
    let down = |k: usize| n + 4 * k + 1;
    let out = |k: usize| n + 4 * k + 2;
    let inn = |k: usize| n + 4 * k + 3;
    let mut net = FlowNetwork::new(n + 4 * c);
    let mut arc_links = Vec::new();
    for k in 0..c {
        let cid = ClusterId(k as u32);
        for node in platform.nodes_of(cid) {
            let id = NodeId(node);
            let v = node as usize;
            net.add_arc(v, up(k), platform.capacity_bytes_s(LinkId::NodeUp(id)));
            arc_links.push(Some(LinkId::NodeUp(id)));
            net.add_arc(down(k), v, platform.capacity_bytes_s(LinkId::NodeDown(id)));
            arc_links.push(Some(LinkId::NodeDown(id)));
        }
        net.add_arc(up(k), down(k), f64::INFINITY);
        arc_links.push(None);
        net.add_arc(
            up(k),
            out(k),
            platform.capacity_bytes_s(LinkId::AccessUp(cid)),
        );
        arc_links.push(Some(LinkId::AccessUp(cid)));
        net.add_arc(
            inn(k),
            down(k),
            platform.capacity_bytes_s(LinkId::AccessDown(cid)),
        );
        arc_links.push(Some(LinkId::AccessDown(cid)));
    }
    for a in 0..c {
        for b in 0..c {
            if a != b {
                let link = LinkId::Wan {
                    from: ClusterId(a as u32),
                    to: ClusterId(b as u32),
                };
                net.add_arc(out(a), inn(b), platform.capacity_bytes_s(link));
                arc_links.push(Some(link));
            }
        }
    }
    PlatformNetwork {
        network: net,
        arc_links,
        node_count: n,
    }
}

/// The max-flow from node `from` to node `to` of a platform, bytes/s.
pub fn max_flow(platform: &Platform, from: NodeId, to: NodeId) -> f64 {
    let mut g = platform_network(platform);
    let (s, t) = (g.vertex(from), g.vertex(to));
    g.network.max_flow(s, t)
}

/// The multicast bound of a platform from a root: see [`multicast_bound`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MulticastBound {
    /// The bound, bytes/s: the smallest max-flow from the root to a receiver.
    pub bytes_s: f64,
    /// A receiver whose max-flow is the bound (the lowest id among them).
    pub bottleneck_receiver: NodeId,
    /// Max-flow from the root to every node, bytes/s (the root's own entry is infinite).
    pub per_receiver_bytes_s: Vec<f64>,
}

/// The maximum multicast throughput from `root` to all other nodes of `platform`: the minimum
/// over receivers of the max-flow from the root (see the [module docs](self)).
///
/// Cost: one max-flow per cluster holding a receiver, each on the whole platform's network.
pub fn multicast_bound(platform: &Platform, root: NodeId) -> Result<MulticastBound, BoundError> {
    let n = platform.node_count();
    if !platform.has_node(root) {
        return Err(BoundError::UnknownRoot {
            root,
            node_count: n,
        });
    }
    if n < 2 {
        return Err(BoundError::NoReceivers);
    }
    let mut g = platform_network(platform);
    let s = g.vertex(root);
    // The max-flow from the root into each cluster's down switch (see the module docs); a
    // cluster whose only node is the root has no receiver and needs none.
    let mut into_cluster = vec![None; platform.cluster_count()];
    let mut per = vec![f64::INFINITY; n];
    let mut best: Option<(f64, NodeId)> = None;
    for v in 0..n as u32 {
        if v == root.0 {
            continue;
        }
        let node = NodeId(v);
        let cluster = platform.cluster_of(node);
        let down = g.cluster_down_vertex(cluster);
        let reach =
            *into_cluster[cluster.0 as usize].get_or_insert_with(|| g.network.max_flow(s, down));
        let f = platform.capacity_bytes_s(LinkId::NodeDown(node)).min(reach);
        per[v as usize] = f;
        match best {
            Some((b, _)) if f >= b => {}
            _ => best = Some((f, node)),
        }
    }
    let (bytes_s, bottleneck_receiver) = best.expect("at least one receiver");
    Ok(MulticastBound {
        bytes_s,
        bottleneck_receiver,
        per_receiver_bytes_s: per,
    })
}

/// The earliest time at which every receiver can hold `message_bytes` from `root` on a platform
/// whose capacities change over time, when nodes may store what they received and forward it
/// in a later interval (see the [module docs](self)): no multicast protocol can finish sooner.
///
/// `phases` are `(start_s, platform)` with ascending starts, each platform in force until the
/// next start, the last for ever (a first start after 0 counts from 0); every platform must
/// have the same nodes and clusters. `upper_s` is a time by which the message is known to be
/// delivered, e.g. the no-storage [`completion_time_s`] of the same phases (which is never
/// earlier). Returns None if the message is not delivered by `upper_s`.
///
/// Cost: a binary search of about 50 steps over the time, each one max-flow per class of
/// receivers (receivers of one cluster whose node links are equal in every phase are
/// interchangeable, so one stands for all) on a network of `phases × (nodes + 4 × clusters)`
/// vertices.
pub fn dynamic_completion_time_s(
    phases: &[(f64, &Platform)],
    root: NodeId,
    message_bytes: f64,
    upper_s: f64,
) -> Result<Option<f64>, BoundError> {
    let Some(&(_, first)) = phases.first() else {
        return Ok(None);
    };
    let n = first.node_count();
    if !first.has_node(root) {
        return Err(BoundError::UnknownRoot {
            root,
            node_count: n,
        });
    }
    if n < 2 {
        return Err(BoundError::NoReceivers);
    }
    if message_bytes <= 0.0 {
        return Ok(Some(0.0));
    }
    // One receiver per class: same cluster, same node links in every phase.
    let mut classes: Vec<(Vec<u64>, NodeId)> = Vec::new();
    for v in (0..n as u32).map(NodeId).filter(|&v| v != root) {
        let mut key = vec![u64::from(first.cluster_of(v).0)];
        for (_, p) in phases {
            key.push(p.capacity_bytes_s(LinkId::NodeUp(v)).to_bits());
            key.push(p.capacity_bytes_s(LinkId::NodeDown(v)).to_bits());
        }
        if !classes.iter().any(|(k, _)| *k == key) {
            classes.push((key, v));
        }
    }
    let receivers: Vec<NodeId> = classes.into_iter().map(|(_, v)| v).collect();
    let nets: Vec<(f64, PlatformNetwork)> = phases
        .iter()
        .map(|&(start, p)| (start.max(0.0), platform_network(p)))
        .collect();
    let per_phase = nets[0].1.network.vertex_count();
    // The least any receiver can hold at `t`.
    let deliverable = |t: f64| -> f64 {
        let used: Vec<(f64, &PlatformNetwork)> = nets
            .iter()
            .enumerate()
            .filter(|(i, (start, _))| *i == 0 || *start < t)
            .map(|(i, (start, g))| {
                let end = nets.get(i + 1).map_or(t, |next| next.0.min(t));
                ((end - start.max(0.0)).max(0.0), g)
            })
            .collect();
        let k = used.len();
        let mut g = FlowNetwork::new(k * per_phase);
        for (i, (dur, net)) in used.iter().enumerate() {
            let base = i * per_phase;
            for a in net.network.arcs() {
                let cap = if a.capacity.is_infinite() {
                    f64::INFINITY
                } else {
                    a.capacity * dur
                };
                g.add_arc(base + a.from, base + a.to, cap);
            }
            if i + 1 < k {
                for v in 0..n {
                    g.add_arc(base + v, base + per_phase + v, f64::INFINITY);
                }
            }
        }
        let sink_base = (k - 1) * per_phase;
        receivers
            .iter()
            .map(|&r| g.max_flow(root.0 as usize, sink_base + r.0 as usize))
            .fold(f64::INFINITY, f64::min)
    };
    if !upper_s.is_finite() || deliverable(upper_s) < message_bytes * (1.0 - 1e-9) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0.0f64, upper_s);
    for _ in 0..60 {
        if hi - lo <= 1e-9 * hi.max(1e-9) {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if deliverable(mid) >= message_bytes * (1.0 - 1e-12) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

/// The time at which `message_bytes` have been delivered at a piecewise-constant rate: the rate
/// of `intervals[i]` (`(start_s, bytes_s)`, start times ascending, the first at or before 0
/// counting from 0) holds until the next start, the last one for ever. None if the message is
/// never delivered (the last rate is 0) or `intervals` is empty.
pub fn completion_time_s(intervals: &[(f64, f64)], message_bytes: f64) -> Option<f64> {
    let mut left = message_bytes;
    if left <= 0.0 {
        return Some(intervals.first().map_or(0.0, |i| i.0.max(0.0)));
    }
    for (i, &(start, rate)) in intervals.iter().enumerate() {
        let start = start.max(0.0);
        let end = intervals.get(i + 1).map_or(f64::INFINITY, |n| n.0.max(0.0));
        if rate > 0.0 {
            let done_at = start + left / rate;
            if done_at <= end {
                return Some(done_at);
            }
            left -= rate * (end - start);
        }
    }
    None
}
