//! The topology of a testbed, computed from a platform without touching the system: which
//! namespaces, links, addresses, routes and traffic-control rules reproduce the platform's
//! model (see the [crate docs](crate)).
//!
//! # Layout
//!
//! - node `i` of cluster `c`: namespace `wr-NAME-nI`, one interface `eth0` with address
//!   `10.77.C.(K+1)/24` (K: its index in the cluster), default route via the cluster's router;
//! - cluster `c`: namespace `wr-NAME-rC` with a bridge `br0` (address `10.77.C.254/24`) that
//!   the nodes' veths (`nI` on the router's side) are enslaved to, and `wan0` (`10.78.C.1/30`)
//!   towards the core; default route via the core;
//! - the WAN core: namespace `wr-NAME-wan`, one interface `cC` (`10.78.C.2/30`) per cluster and a
//!   route to each cluster's subnet; the delay line's TUN device `wtun` lives here.
//!
//! Traffic inside a cluster crosses only the bridge; traffic between clusters crosses
//! `nI` → router `wan0` (cluster uplink and WAN pair, shaped) → core (delay line) → core `cD`
//! (cluster downlink, shaped) → router → node, the simulator's route node-up → access-up → WAN →
//! access-down → node-down.

use crate::TestbedError;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::{ClusterId, NodeId};

/// Capacities at or above this (bytes/s) are left unshaped: the veths are faster than any
/// shaper, and shaping a 10 Gbit/s link would only cost CPU.
pub const UNSHAPED_BYTES_S: f64 = 1e9;

/// Most clusters a testbed addresses (one /24 per cluster in 10.77.0.0/16).
pub const MAX_CLUSTERS: usize = 250;
/// Most nodes in one cluster (.1 to .250; .254 is the router).
pub const MAX_CLUSTER_NODES: usize = 250;

/// The rate of the class that lets small packets (pure ACKs) past the shapers, bytes/s: a
/// saturated reverse direction must not starve the ACKs of a flow.
const SMALL_PACKET_BYTES_S: f64 = 1.25e8;

/// A namespace of the testbed and what it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A node of the platform.
    Node(NodeId),
    /// A cluster's router (and bridge).
    Router(ClusterId),
    /// The WAN core.
    Core,
}

/// One namespace to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    /// Its name (`ip netns` name).
    pub name: String,
    /// What it stands for.
    pub role: Role,
}

/// The whole testbed: namespaces, then the commands that wire and shape them, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The testbed's name.
    pub name: String,
    /// Every namespace, nodes first (in id order), then routers, then the core.
    pub namespaces: Vec<Namespace>,
    /// `(namespace, argv)` of every command after the namespaces exist: links, addresses,
    /// routes, sysctls, then traffic control. A namespace of `None` means the host's.
    pub commands: Vec<(Option<String>, Vec<String>)>,
    /// Each node's address.
    pub node_addrs: Vec<std::net::Ipv4Addr>,
    /// The cluster of each node.
    pub node_clusters: Vec<ClusterId>,
    /// One-way WAN latency of each ordered cluster pair, seconds (`[from][to]`).
    pub wan_latency_s: Vec<Vec<f64>>,
}

/// Checks a testbed name: 1-12 characters from `[a-z0-9]`, so that every namespace name is
/// short and unambiguous.
pub fn check_name(name: &str) -> Result<(), TestbedError> {
    let ok = !name.is_empty()
        && name.len() <= 12
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(TestbedError::BadName {
            name: name.to_string(),
        })
    }
}

/// The prefix of every namespace of testbed `name`.
pub fn prefix(name: &str) -> String {
    format!("wr-{name}-")
}

/// The namespace of node `node`.
pub fn node_ns(name: &str, node: NodeId) -> String {
    format!("{}n{}", prefix(name), node.0)
}

/// The namespace of cluster `c`'s router.
pub fn router_ns(name: &str, c: ClusterId) -> String {
    format!("{}r{}", prefix(name), c.0)
}

/// The WAN core's namespace.
pub fn core_ns(name: &str) -> String {
    format!("{}wan", prefix(name))
}

/// The subnet of cluster `c`: `10.77.C.0/24`.
pub fn cluster_subnet(c: ClusterId) -> (std::net::Ipv4Addr, u8) {
    (std::net::Ipv4Addr::new(10, 77, c.0 as u8, 0), 24)
}

/// The cluster whose subnet holds `addr`, if any.
pub fn cluster_of_addr(addr: std::net::Ipv4Addr) -> Option<ClusterId> {
    let o = addr.octets();
    (o[0] == 10 && o[1] == 77).then_some(ClusterId(u32::from(o[2])))
}

/// A rate for tc, in bits per second with an explicit unit (tc's `mbps` means megabytes).
fn bits(bytes_s: f64) -> String {
    format!("{}bit", (bytes_s * 8.0).round().max(8.0) as u64)
}

fn cmd(ns: &str, argv: &[&str]) -> (Option<String>, Vec<String>) {
    (
        Some(ns.to_string()),
        argv.iter().map(|s| s.to_string()).collect(),
    )
}

/// A token bucket on `dev`'s egress at `bytes_s` (`verb`: add or replace), or nothing when
/// unshaped.
fn tbf(
    ns: &str,
    verb: &str,
    dev: &str,
    bytes_s: f64,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    if bytes_s >= UNSHAPED_BYTES_S {
        if verb == "replace" {
            // Back to unshaped: a plain FIFO instead of the token bucket.
            out.push(cmd(
                ns,
                &[
                    "tc", "qdisc", "replace", "dev", dev, "root", "pfifo", "limit", "10000",
                ],
            ));
        }
        return;
    }
    // A burst of 10 ms of traffic (at least 64 KiB), so a fast flow is not held to one packet
    // per timer tick; a queue of 50 ms.
    let burst = ((bytes_s * 0.01) as u64).max(64 << 10).to_string();
    let rate = bits(bytes_s);
    out.push(cmd(
        ns,
        &[
            "tc", "qdisc", verb, "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst,
            "latency", "50ms",
        ],
    ));
}

/// An HTB class (`verb`: add or change) with its rate and ceiling, bytes/s, and extra
/// arguments (e.g. a priority).
#[allow(clippy::too_many_arguments)]
fn htb_class(
    ns: &str,
    verb: &str,
    dev: &str,
    parent: &str,
    classid: &str,
    rate_bytes_s: f64,
    ceil_bytes_s: f64,
    extra: &[&str],
) -> (Option<String>, Vec<String>) {
    let (rate, ceil) = (bits(rate_bytes_s), bits(ceil_bytes_s));
    let mut argv = vec![
        "tc", "class", verb, "dev", dev, "parent", parent, "classid", classid, "htb", "rate",
        &rate, "ceil", &ceil, "quantum", "30000",
    ];
    argv.extend_from_slice(extra);
    cmd(ns, &argv)
}

/// An HTB root on `dev` limited to `total_bytes_s` (unlimited when at least
/// [`UNSHAPED_BYTES_S`]), with the small-packet class `1:2`; returns nothing else, the caller
/// adds the per-destination classes under `1:1`.
fn htb_root(
    ns: &str,
    dev: &str,
    total_bytes_s: f64,
    default_minor: u32,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    let total = total_bytes_s.min(5e9);
    out.push(cmd(
        ns,
        &[
            "tc",
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "handle",
            "1:",
            "htb",
            "default",
            &format!("{default_minor:x}"),
        ],
    ));
    out.push(htb_class(ns, "add", dev, "1:", "1:1", total, total, &[]));
    // Small packets (IPv4 total length below 128: pure ACKs, pings) beside the cap.
    out.push(htb_class(
        ns,
        "add",
        dev,
        "1:",
        "1:2",
        SMALL_PACKET_BYTES_S,
        SMALL_PACKET_BYTES_S,
        &["prio", "0"],
    ));
    out.push(cmd(
        ns,
        &[
            "tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
            "u32", "match", "u16", "0x0000", "0xff80", "at", "2", "flowid", "1:2",
        ],
    ));
}

/// The HTB class of traffic towards cluster `d` on a router's `wan0` (minor `0x100 + d`).
pub fn wan_class_minor(d: ClusterId) -> u32 {
    0x100 + d.0
}

/// The tc commands that set the capacity of `link` to `bytes_s` on a testbed built from
/// `platform` (used by `up` and by timed changes). `guaranteed` is the HTB rate of a WAN pair
/// class (its share of the cluster uplink).
pub fn capacity_commands(
    name: &str,
    platform: &Platform,
    link: LinkId,
    bytes_s: f64,
) -> Vec<(Option<String>, Vec<String>)> {
    let mut out = Vec::new();
    match link {
        LinkId::Wan { from, to } => {
            let up = platform.capacity_bytes_s(LinkId::AccessUp(from)).min(5e9);
            let k = platform.cluster_count().saturating_sub(1).max(1) as f64;
            let ceil = bytes_s.min(up);
            let rate = (up / k).min(ceil);
            out.push(htb_class(
                &router_ns(name, from),
                "change",
                "wan0",
                "1:1",
                &format!("1:{:x}", wan_class_minor(to)),
                rate,
                ceil,
                &[],
            ));
        }
        LinkId::AccessUp(c) => {
            let b = bytes_s.min(5e9);
            out.push(htb_class(
                &router_ns(name, c),
                "change",
                "wan0",
                "1:",
                "1:1",
                b,
                b,
                &[],
            ));
        }
        LinkId::AccessDown(c) => {
            let b = bytes_s.min(5e9);
            let dev = format!("c{}", c.0);
            out.push(htb_class(
                &core_ns(name),
                "change",
                &dev,
                "1:",
                "1:1",
                b,
                b,
                &[],
            ));
        }
        LinkId::NodeUp(n) => tbf(&node_ns(name, n), "replace", "eth0", bytes_s, &mut out),
        LinkId::NodeDown(n) => tbf(
            &router_ns(name, platform.cluster_of(n)),
            "replace",
            &format!("n{}", n.0),
            bytes_s,
            &mut out,
        ),
    }
    out
}

/// The plan of testbed `name` for `platform`.
///
/// Errors: a bad name, more than [`MAX_CLUSTERS`] clusters or [`MAX_CLUSTER_NODES`] nodes in a
/// cluster, a capacity or WAN latency outside [`crate::limits`].
pub fn plan(name: &str, platform: &Platform) -> Result<Plan, TestbedError> {
    check_name(name)?;
    crate::limits::check_platform(platform)?;
    let clusters = platform.cluster_count();
    if clusters > MAX_CLUSTERS {
        return Err(TestbedError::TooBig {
            what: format!("{clusters} clusters (at most {MAX_CLUSTERS})"),
        });
    }
    let mut namespaces = Vec::new();
    let mut node_addrs = Vec::new();
    let mut node_clusters = Vec::new();
    for c in 0..clusters as u32 {
        let nodes = platform.nodes_of(ClusterId(c));
        if nodes.len() > MAX_CLUSTER_NODES {
            return Err(TestbedError::TooBig {
                what: format!(
                    "{} nodes in cluster {c} (at most {MAX_CLUSTER_NODES})",
                    nodes.len()
                ),
            });
        }
    }
    for i in 0..platform.node_count() as u32 {
        let n = NodeId(i);
        let c = platform.cluster_of(n);
        let k = i - platform.nodes_of(c).start;
        namespaces.push(Namespace {
            name: node_ns(name, n),
            role: Role::Node(n),
        });
        node_addrs.push(std::net::Ipv4Addr::new(10, 77, c.0 as u8, k as u8 + 1));
        node_clusters.push(c);
    }
    for c in 0..clusters as u32 {
        namespaces.push(Namespace {
            name: router_ns(name, ClusterId(c)),
            role: Role::Router(ClusterId(c)),
        });
    }
    let core = core_ns(name);
    namespaces.push(Namespace {
        name: core.clone(),
        role: Role::Core,
    });

    let mut out = Vec::new();
    let all_ns: Vec<String> = namespaces.iter().map(|n| n.name.clone()).collect();
    for ns in &all_ns {
        out.push(cmd(ns, &["ip", "link", "set", "lo", "up"]));
        out.push(cmd(
            ns,
            &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
        ));
        out.push(cmd(
            ns,
            &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
        ));
    }
    // Routers and core.
    for c in 0..clusters as u32 {
        let cid = ClusterId(c);
        let r = router_ns(name, cid);
        out.push(cmd(&r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]));
        out.push(cmd(&r, &["ip", "link", "add", "br0", "type", "bridge"]));
        out.push(cmd(
            &r,
            &[
                "ip",
                "addr",
                "add",
                &format!("10.77.{c}.254/24"),
                "dev",
                "br0",
            ],
        ));
        out.push(cmd(&r, &["ip", "link", "set", "br0", "up"]));
        out.push((
            None,
            [
                "ip",
                "link",
                "add",
                "wan0",
                "netns",
                &r,
                "type",
                "veth",
                "peer",
                "name",
                &format!("c{c}"),
                "netns",
                &core,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ));
        out.push(cmd(
            &r,
            &[
                "ip",
                "addr",
                "add",
                &format!("10.78.{c}.1/30"),
                "dev",
                "wan0",
            ],
        ));
        out.push(cmd(&r, &["ip", "link", "set", "wan0", "up"]));
        out.push(cmd(
            &r,
            &[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &format!("10.78.{c}.2"),
            ],
        ));
        out.push(cmd(
            &core,
            &[
                "ip",
                "addr",
                "add",
                &format!("10.78.{c}.2/30"),
                "dev",
                &format!("c{c}"),
            ],
        ));
        out.push(cmd(&core, &["ip", "link", "set", &format!("c{c}"), "up"]));
        out.push(cmd(
            &core,
            &[
                "ip",
                "route",
                "add",
                &format!("10.77.{c}.0/24"),
                "via",
                &format!("10.78.{c}.1"),
            ],
        ));
    }
    out.push(cmd(&core, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]));
    // Packets the delay line writes back arrive on its TUN device, not on the interface their
    // source routes through: no reverse-path filter in the core.
    out.push(cmd(
        &core,
        &["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"],
    ));
    out.push(cmd(
        &core,
        &["sysctl", "-qw", "net.ipv4.conf.default.rp_filter=0"],
    ));
    // Nodes.
    for i in 0..platform.node_count() as u32 {
        let n = NodeId(i);
        let c = platform.cluster_of(n);
        let ns = node_ns(name, n);
        let r = router_ns(name, c);
        let peer = format!("n{i}");
        out.push((
            None,
            [
                "ip", "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &peer,
                "netns", &r,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ));
        out.push(cmd(&r, &["ip", "link", "set", &peer, "master", "br0"]));
        out.push(cmd(&r, &["ip", "link", "set", &peer, "up"]));
        out.push(cmd(
            &ns,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/24", node_addrs[i as usize]),
                "dev",
                "eth0",
            ],
        ));
        out.push(cmd(&ns, &["ip", "link", "set", "eth0", "up"]));
        out.push(cmd(
            &ns,
            &[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &format!("10.77.{}.254", c.0),
            ],
        ));
        // Room for a bandwidth-delay product of a few MB per connection.
        out.push(cmd(
            &ns,
            &["sysctl", "-qw", "net.ipv4.tcp_wmem=4096 65536 16777216"],
        ));
        out.push(cmd(
            &ns,
            &["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 16777216"],
        ));
        tbf(
            &ns,
            "add",
            "eth0",
            platform.capacity_bytes_s(LinkId::NodeUp(n)),
            &mut out,
        );
        tbf(
            &r,
            "add",
            &peer,
            platform.capacity_bytes_s(LinkId::NodeDown(n)),
            &mut out,
        );
    }
    // Cluster uplinks with one class per destination cluster (a WAN pair), cluster downlinks.
    let k = clusters.saturating_sub(1).max(1) as f64;
    for c in 0..clusters as u32 {
        let cid = ClusterId(c);
        let r = router_ns(name, cid);
        let up = platform.capacity_bytes_s(LinkId::AccessUp(cid)).min(5e9);
        htb_root(&r, "wan0", up, 2, &mut out);
        for d in (0..clusters as u32).filter(|&d| d != c) {
            let did = ClusterId(d);
            let pair = platform.capacity_bytes_s(LinkId::Wan { from: cid, to: did });
            let ceil = pair.min(up);
            let rate = (up / k).min(ceil);
            let minor = format!("1:{:x}", wan_class_minor(did));
            out.push(htb_class(
                &r,
                "add",
                "wan0",
                "1:1",
                &minor,
                rate,
                ceil,
                &["prio", "1"],
            ));
            out.push(cmd(
                &r,
                &[
                    "tc",
                    "filter",
                    "add",
                    "dev",
                    "wan0",
                    "parent",
                    "1:",
                    "protocol",
                    "ip",
                    "prio",
                    "2",
                    "u32",
                    "match",
                    "ip",
                    "dst",
                    &format!("10.77.{d}.0/24"),
                    "flowid",
                    &minor,
                ],
            ));
        }
        let down = platform.capacity_bytes_s(LinkId::AccessDown(cid)).min(5e9);
        let dev = format!("c{c}");
        htb_root(&core, &dev, down, 1, &mut out);
    }
    let wan_latency_s = (0..clusters as u32)
        .map(|a| {
            (0..clusters as u32)
                .map(|b| {
                    if a == b {
                        0.0
                    } else {
                        platform.wan_latency_s(ClusterId(a), ClusterId(b))
                    }
                })
                .collect()
        })
        .collect();
    Ok(Plan {
        name: name.to_string(),
        namespaces,
        commands: out,
        node_addrs,
        node_clusters,
        wan_latency_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_model::platform::ClusterSpec;

    fn two_by_two() -> Platform {
        Platform::builder()
            .cluster(ClusterSpec::uniform(2, 1.25e7, 1.25e9, 1e-4))
            .cluster(ClusterSpec::uniform(2, 1.25e9, 1.25e9, 1e-4))
            .wan_all(5e6, 0.01)
            .build()
            .unwrap()
    }

    #[test]
    fn names_addresses_and_shapers_follow_the_platform() {
        let p = plan("t1", &two_by_two()).unwrap();
        let names: Vec<&str> = p.namespaces.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "wr-t1-n0",
                "wr-t1-n1",
                "wr-t1-n2",
                "wr-t1-n3",
                "wr-t1-r0",
                "wr-t1-r1",
                "wr-t1-wan"
            ]
        );
        assert_eq!(p.node_addrs[3], std::net::Ipv4Addr::new(10, 77, 1, 2));
        assert_eq!(cluster_of_addr(p.node_addrs[3]), Some(ClusterId(1)));
        let text: Vec<String> = p
            .commands
            .iter()
            .map(|(ns, a)| format!("{}: {}", ns.as_deref().unwrap_or("-"), a.join(" ")))
            .collect();
        // 100 Mbit/s node links in cluster 0 are shaped (both directions), cluster 1's are not.
        assert!(text
            .iter()
            .any(|l| l.starts_with("wr-t1-n0: tc qdisc add dev eth0 root tbf rate 100000000bit")));
        assert!(text
            .iter()
            .any(|l| l.starts_with("wr-t1-r0: tc qdisc add dev n1 root tbf rate 100000000bit")));
        assert!(!text.iter().any(|l| l.starts_with("wr-t1-n2: tc")));
        // The WAN pair 0 -> 1 at 5 MB/s = 40 Mbit/s, in tc's bits, never in its `mbps`.
        assert!(text.iter().any(|l| l.starts_with(
            "wr-t1-r0: tc class add dev wan0 parent 1:1 classid 1:101 htb rate 40000000bit ceil 40000000bit"
        )));
        assert!(text.iter().all(|l| !l.contains("mbps")));
        // Every interface name fits IFNAMSIZ.
        for (_, argv) in &p.commands {
            for w in argv.windows(2) {
                if w[0] == "dev" || w[0] == "name" || w[0] == "add" && w[1] != "dev" {
                    assert!(w[1].len() <= 15, "{argv:?}");
                }
            }
        }
        assert_eq!(p.wan_latency_s[0][1], 0.01);
    }

    #[test]
    fn bad_names_and_sizes_are_refused() {
        for bad in ["", "UPPER", "with-dash", "waytoolongname1"] {
            assert!(matches!(
                plan(bad, &two_by_two()),
                Err(TestbedError::BadName { .. })
            ));
        }
        let big = Platform::builder()
            .cluster(ClusterSpec::uniform(251, 1e8, 1e9, 1e-4))
            .build()
            .unwrap();
        assert!(matches!(
            plan("big", &big),
            Err(TestbedError::TooBig { .. })
        ));
    }

    #[test]
    fn capacity_changes_touch_the_right_class() {
        let p = two_by_two();
        let c = capacity_commands(
            "t1",
            &p,
            LinkId::Wan {
                from: ClusterId(1),
                to: ClusterId(0),
            },
            2e6,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0.as_deref(), Some("wr-t1-r1"));
        assert!(c[0]
            .1
            .join(" ")
            .contains("classid 1:100 htb rate 16000000bit ceil 16000000bit"));
        // A node link slowed down gets a token bucket; back at full speed, a plain FIFO.
        let slow = capacity_commands("t1", &p, LinkId::NodeUp(NodeId(2)), 1e6);
        assert!(slow[0]
            .1
            .join(" ")
            .starts_with("tc qdisc replace dev eth0 root tbf rate 8000000bit"));
        let fast = capacity_commands("t1", &p, LinkId::NodeUp(NodeId(2)), 1.25e9);
        assert_eq!(
            fast[0].1.join(" "),
            "tc qdisc replace dev eth0 root pfifo limit 10000"
        );
    }
}
