//! Helpers shared by the integration tests: groups of `host_driver` members on loopback, in
//! this process (one task per member, each with its own connections), and the frame counts
//! that sim-vs-real comparisons use.

#![allow(dead_code)]

use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member as GroupMember};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent, GroupHandle};
use windrose_net::trees::{balanced_spec, equal_platform, group_tree, magpie_spec};
use windrose_net::NetError;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams, TreeSpec};
use windrose_proto::host::{AppRequest, Failure};
use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
use windrose_proto::pieces::Manifest;
use windrose_proto::{Report, TransferId};
use windrose_sim::engine::MemoryLog;
use windrose_trees::TreeAlgorithm;

/// Bound on each wait of these tests (loopback runs take well under a second; the bound only
/// keeps a broken run from hanging CI).
pub const LIMIT: Duration = Duration::from_secs(60);

/// A group of `n` nodes on 127.0.0.1 with OS-chosen ports, `clusters` contiguous clusters, and
/// the listeners of every node.
pub async fn loopback(name: &str, n: usize, clusters: usize) -> (Arc<Group>, Vec<TcpListener>) {
    let mut listeners = Vec::new();
    let mut members = Vec::new();
    for i in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.push(GroupMember {
            id: NodeId::from(i),
            addr: l.local_addr().unwrap().to_string(),
            cluster: ClusterId::from(i * clusters / n),
        });
        listeners.push(l);
    }
    (Arc::new(Group::new(name, members).unwrap()), listeners)
}

/// A running member and what its events said so far.
pub struct Member {
    /// Requests in, events out.
    pub handle: GroupHandle,
    /// Its driver (`serve_group`); abort it to kill the member.
    pub task: JoinHandle<Result<(), NetError>>,
    /// Bytes delivered per transfer, reassembled in order (only with [`Member::keep_bytes`]).
    pub got: BTreeMap<TransferId, Vec<u8>>,
    /// The BLAKE3 of what each transfer delivered, and its length (always kept).
    pub digests: BTreeMap<TransferId, (blake3::Hasher, u64)>,
    /// Keep delivered bytes in [`Member::got`] (off for large runs).
    pub keep_bytes: bool,
    /// Reports, in order.
    pub reports: Vec<Report>,
    /// Shares computed: `(offset, len, BLAKE3 hex)`.
    pub computed: Vec<(u64, u64, String)>,
    /// Connections that came up.
    pub connected: usize,
    /// Probe lanes that came up.
    pub lanes: usize,
    /// Lost connections and why.
    pub lost: Vec<(NodeId, String)>,
    /// Members' parts that did not finish and why.
    pub failed: Vec<Failure>,
    /// Connections refused at this member's port, and why.
    pub refused: Vec<String>,
}

impl Member {
    /// Takes the events waiting; true if there were any.
    fn take_events(&mut self) -> bool {
        let mut progressed = false;
        while let Ok(ev) = self.handle.events.try_recv() {
            progressed = true;
            match ev {
                GroupEvent::Delivered {
                    transfer,
                    offset,
                    data,
                } => {
                    let (h, len) = self.digests.entry(transfer).or_default();
                    assert_eq!(offset, *len, "deliveries of {transfer} out of order");
                    h.update(&data);
                    *len += data.len() as u64;
                    if self.keep_bytes {
                        self.got
                            .entry(transfer)
                            .or_default()
                            .extend_from_slice(&data);
                    }
                }
                GroupEvent::Report(r) => self.reports.push(r),
                GroupEvent::Computed {
                    offset,
                    len,
                    blake3,
                } => self.computed.push((offset, len, blake3)),
                GroupEvent::Connected(_) => self.connected += 1,
                GroupEvent::LaneUp(_) => self.lanes += 1,
                GroupEvent::Lost(peer, why) => self.lost.push((peer, why)),
                GroupEvent::Failed(f) => self.failed.push(f),
                GroupEvent::Refused(why) => self.refused.push(why),
                // A sort's steps: no test here reads them.
                GroupEvent::Phases(_) => {}
            }
        }
        progressed
    }

    /// What this member saw, for a failed wait's message.
    fn summary(&self, index: usize) -> String {
        format!(
            "member [{index}]: {} connections, {} lanes, reports {:?}, lost {:?}, failed {:?}, \
             refused {:?}, delivered {:?}",
            self.connected,
            self.lanes,
            self.reports,
            self.lost,
            self.failed,
            self.refused,
            self.digests
                .iter()
                .map(|(t, (_, len))| (*t, *len))
                .collect::<Vec<_>>()
        )
    }

    /// The BLAKE3 (hex) and length of what `transfer` delivered here (None: nothing).
    pub fn digest(&self, transfer: TransferId) -> Option<(String, u64)> {
        self.digests
            .get(&transfer)
            .map(|(h, len)| (h.finalize().to_hex().to_string(), *len))
    }

    /// The collectives this member saw complete as their initiator:
    /// `(transfer, finished, failed)`.
    pub fn completions(&self) -> Vec<(TransferId, u32, u32)> {
        self.reports
            .iter()
            .filter_map(|r| match *r {
                Report::CollectiveComplete {
                    transfer,
                    finished,
                    failed,
                } => Some((transfer, finished, failed)),
                _ => None,
            })
            .collect()
    }

    /// How this member's own part of `transfer` ended (None: not yet).
    pub fn ended(&self, transfer: TransferId) -> Option<bool> {
        self.reports.iter().find_map(|r| match *r {
            Report::CollectiveEnded {
                transfer: t,
                finished,
            } if t == transfer => Some(finished),
            _ => None,
        })
    }

    /// Asks this member to start `spec` with `data`.
    pub fn start(&self, spec: CollectiveSpec, data: Bytes) {
        assert!(
            self.handle.request(AppRequest::StartCollective {
                spec,
                data,
                transfer: None,
            }),
            "the member has stopped"
        );
    }
}

/// Starts a member on `listener` with `config`.
pub fn spawn_member(listener: TcpListener, config: GroupConfig) -> Member {
    let (handle, ports) = group_channel();
    Member {
        handle,
        task: tokio::spawn(serve_group(listener, config, ports)),
        got: BTreeMap::new(),
        digests: BTreeMap::new(),
        keep_bytes: true,
        reports: Vec::new(),
        computed: Vec::new(),
        connected: 0,
        lanes: 0,
        lost: Vec::new(),
        failed: Vec::new(),
        refused: Vec::new(),
    }
}

/// Member `me`'s configuration in `group` (seed 5), tuned by `tune`.
pub fn member_config(
    group: &Arc<Group>,
    me: usize,
    tune: &impl Fn(&mut GroupConfig),
) -> GroupConfig {
    let mut c = GroupConfig::new(Membership {
        group: group.clone(),
        me: NodeId::from(me),
    });
    c.seed = 5;
    tune(&mut c);
    c
}

/// Starts `n` members of a fresh loopback group `name` in `clusters` clusters, each configured
/// by `tune`, and waits until every member is connected to every other.
pub async fn start_group(
    name: &str,
    n: usize,
    clusters: usize,
    tune: impl Fn(&mut GroupConfig),
) -> (Arc<Group>, Vec<Member>) {
    let (group, members) = spawn_group(name, n, clusters, tune).await;
    let mut members = members;
    pump(&mut members, |ms| ms.iter().all(|m| m.connected >= n - 1)).await;
    (group, members)
}

/// [`start_group`] without waiting for the connections.
pub async fn spawn_group(
    name: &str,
    n: usize,
    clusters: usize,
    tune: impl Fn(&mut GroupConfig),
) -> (Arc<Group>, Vec<Member>) {
    let (group, listeners) = loopback(name, n, clusters).await;
    let members = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| spawn_member(l, member_config(&group, i, &tune)))
        .collect();
    (group, members)
}

/// No heartbeats, probes or gossip: what remains is the session and the protocols, which
/// send the same frames whatever the timing.
pub fn quiet(c: &mut GroupConfig) {
    c.heartbeat = None;
    c.probe_period = None;
    c.gossip = None;
}

/// Takes every member's events until `done` holds, bounded by [`LIMIT`] (a wait for events,
/// never a timed assertion).
pub async fn pump(members: &mut [Member], done: impl Fn(&[Member]) -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    // Once `done` holds, one more pass takes what the others had already emitted (a member's
    // deliveries precede its report, which precedes the initiator's completion).
    let mut last_pass = false;
    while !last_pass {
        last_pass = done(members);
        let mut progressed = false;
        for m in members.iter_mut() {
            progressed |= m.take_events();
        }
        if !progressed && !last_pass {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the group did not get there in time; what each member saw:\n{}",
                members
                    .iter()
                    .enumerate()
                    .map(|(i, m)| m.summary(i))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Member `who` starts `spec` with `data`; waits until it completes at `who` and every member
/// in `parts` (indices) has ended its part. Returns the transfer and its completion
/// `(finished, failed)`.
pub async fn run_on(
    members: &mut [Member],
    parts: &[usize],
    who: usize,
    spec: CollectiveSpec,
    data: Bytes,
) -> (TransferId, u32, u32) {
    let before = members[who].completions().len();
    members[who].start(spec, data);
    pump(members, |ms| {
        ms[who]
            .completions()
            .get(before)
            .is_some_and(|&(t, _, _)| parts.iter().all(|&p| ms[p].ended(t).is_some()))
    })
    .await;
    members[who].completions()[before]
}

/// [`run_on`] with every member taking part.
pub async fn run(
    members: &mut [Member],
    who: usize,
    spec: CollectiveSpec,
    data: Bytes,
) -> (TransferId, u32, u32) {
    let all: Vec<usize> = (0..members.len()).collect();
    run_on(members, &all, who, spec, data).await
}

/// Asks every member to leave and waits for each driver to end cleanly.
pub async fn leave_all(members: Vec<Member>) {
    for m in &members {
        assert!(m.handle.request(AppRequest::Leave));
    }
    for (i, m) in members.into_iter().enumerate() {
        let r = tokio::time::timeout(LIMIT, m.task)
            .await
            .unwrap_or_else(|_| panic!("member {i} did not leave"));
        r.unwrap().unwrap();
    }
}

/// Members 0 and 1 of a fresh group, each configured by `tune`, that must not connect:
/// member 0 dials and is refused. Returns why member 0 lost member 1 and why member 1 refused
/// member 0, once both said so.
pub async fn refused_pair(name: &str, tune: impl Fn(&mut GroupConfig)) -> (String, String) {
    let (_, mut members) = spawn_group(name, 2, 1, tune).await;
    let said = |ms: &[Member]| !ms[0].lost.is_empty() && !ms[1].refused.is_empty();
    pump(&mut members, said).await;
    assert!(members.iter().all(|m| m.connected == 0), "nobody joined");
    let (lost, refused) = (members[0].lost[0].1.clone(), members[1].refused[0].clone());
    leave_all(members).await;
    (lost, refused)
}

/// `(from, to, kind)` → `(frames, wire bytes)`.
pub type FrameSet = BTreeMap<(u32, u32, String), (u64, u64)>;

/// The frames every member has sent so far.
pub fn real_frames(members: &[Member]) -> FrameSet {
    let mut set = FrameSet::new();
    for (i, m) in members.iter().enumerate() {
        for c in m.handle.frames_sent() {
            let e = set
                .entry((i as u32, c.to.0, c.kind.name().to_string()))
                .or_default();
            e.0 += c.frames;
            e.1 += c.bytes;
        }
    }
    set
}

/// The frames of a simulated run, from the `send` lines of its event log (and no `drop`s).
pub fn sim_frames(log: &MemoryLog) -> FrameSet {
    let mut set = FrameSet::new();
    for line in String::from_utf8(log.contents()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_ne!(v["ev"], "drop", "the simulator dropped a message: {line}");
        if v["ev"] != "send" {
            continue;
        }
        let key = (
            v["node"].as_u64().unwrap() as u32,
            v["peer"].as_u64().unwrap() as u32,
            v["msg"].as_str().unwrap().to_string(),
        );
        let e = set.entry(key).or_default();
        e.0 += 1;
        e.1 += v["bytes"].as_u64().unwrap();
    }
    set
}

/// A broadcast from member 0 down the chain of `group`, in frames of up to 64 KiB.
pub fn chain(group: &Group, segment_bytes: u64) -> CollectiveSpec {
    let tree = group_tree(TreeAlgorithm::Chain, group, NodeId(0)).unwrap();
    CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&tree),
        segment_bytes,
        max_frame_payload: 64 << 10,
    }
}

/// `protocol`'s multicast from `root` over `group` of the bytes `manifest` describes
/// (balanced planned on equal capacities, as `windrose multicast` does without a platform).
pub fn multicast(
    group: &Group,
    protocol: MulticastProtocol,
    root: NodeId,
    manifest: ManifestSpec,
) -> CollectiveSpec {
    let spec = match protocol {
        MulticastProtocol::Mob => MulticastSpec::Mob(Default::default()),
        MulticastProtocol::BitTorrent => MulticastSpec::BitTorrent(Default::default()),
        MulticastProtocol::Magpie => magpie_spec(group, root).unwrap(),
        MulticastProtocol::Balanced => {
            let platform = equal_platform(group, 1.25e8, 1e-4).unwrap();
            balanced_spec(group, &platform, root).unwrap().0
        }
    };
    CollectiveSpec::Multicast {
        protocol,
        params: MulticastParams::of(&spec),
        manifest,
    }
}

/// The manifest of `data` in pieces of `piece` bytes.
pub fn manifest(data: &[u8], piece: u32) -> ManifestSpec {
    ManifestSpec::of(&Manifest::build(data, piece).unwrap())
}

/// A simulated platform with `group`'s clusters (contiguous blocks, as [`loopback`] makes
/// them): 100 MB/s node links, 1 GB/s access links, 0.1 ms inside a cluster, 10 MB/s and 5 ms
/// between.
pub fn sim_platform(group: &Group) -> Platform {
    let mut sizes = vec![0usize; group.cluster_count()];
    for c in group.clusters() {
        sizes[c.index()] += 1;
    }
    let mut b = Platform::builder();
    for n in sizes {
        b = b.cluster(ClusterSpec::uniform(n, 1e8, 1e9, 1e-4));
    }
    b.wan_all(1e7, 5e-3).build().unwrap()
}
