//! Group membership: who the nodes of a run are, where they listen and which cluster each is in.
//!
//! A group file is TOML:
//!
//! ```toml
//! name = "lab"              # every member must use the same name (checked in the handshake)
//! protocol_version = 2      # the windrose-net session protocol this group speaks
//!
//! [[node]]
//! id = 0                    # ids are dense: 0, 1, ..., N-1 (any order in the file)
//! addr = "127.0.0.2:7100"   # where the node listens: ip:port or host:port
//! cluster = 0               # optional, default 0; cluster ids are dense too
//!
//! [[node]]
//! id = 1
//! addr = "127.0.0.3:7100"
//! cluster = 1
//! ```
//!
//! An optional `[session]` table sets how the members run their collectives; every member
//! must run the same (it is part of [`Group::digest`], so a member whose copy differs is
//! refused in the handshake):
//!
//! ```toml
//! [session]
//! eager = true              # collectives start without the Ready/Go round trip (default false)
//! relay_announce = true     # eager broadcasts' announcements also travel down their trees
//!                           # (default false; needs eager)
//! ```
//!
//! Eager sessions suit a group whose members serve every collective any member starts (what
//! `windrose member` does); see `windrose_proto::host`'s module docs, "Eager sessions".
//!
//! An optional `[mst]` table sets how the members' live minimum spanning tree (`group serve
//! --mst-live`) weighs, builds and repairs; it is part of the digest too, so every member runs
//! the same policy (a per-member flag could make members disagree: a rows build needs every
//! member's row, and a change one member feeds and another ignores splits the tree):
//!
//! ```toml
//! [mst]
//! metric = "latency"        # or "inverse-bandwidth" (large messages: the max-bottleneck tree)
//! build = "rows"            # "auto" (default: rows up to 64 members, GHS above), "rows" or "ghs"
//! test_window = 16          # GHS's test window (default 16; 1: classic GHS, one Test at a time)
//! threshold = 0.1           # a link's change counts past this fraction of its weight (seed 004
//!                           # runs 0.1, 0.7 and 0; default 0.1)
//! check_every = 4           # check the links every K broadcasts (AGM-adapII's 4, the default;
//!                           # 0: at every new forecast)
//! min_change = 0.0          # ... and only a move past this many ms (ms per MB); default 0
//! noise = 0.0               # ... and past K times the forecast's own error (0, the default: off)
//! rebuild_after = 2         # rows builds: rebuild when K changes wait at the root (0: repair
//!                           # one by one; default 2)
//! ```
//!
//! Every problem is reported as `file:line:column: what is wrong`, never a panic.

use crate::error::NetError;
use crate::PROTOCOL_VERSION;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;
use windrose_model::error::{ids_in_words, line_col};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::mst_service::{MstBuild, MstLiveConfig, MstMetric};

/// Hex digits of [`Group::digest`] (64 bits: enough to tell copies apart, short enough to read).
const DIGEST_HEX: usize = 16;

/// The largest group a file may describe (a typo such as `id = 4000000000` is an error rather
/// than a huge allocation).
pub const MAX_GROUP_NODES: usize = 1 << 20;

/// One member of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id.
    pub id: NodeId,
    /// Where it listens (`ip:port` or `host:port`).
    pub addr: String,
    /// Its cluster.
    pub cluster: ClusterId,
}

/// How every member runs the group's collectives (the group file's `[session]` table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionSettings {
    /// Collectives start without the Ready/Go round trip
    /// ([`HostConfig::eager`](windrose_proto::host::HostConfig::eager)).
    pub eager: bool,
    /// Eager broadcasts' announcements also travel down their trees
    /// ([`HostConfig::relay_announce`](windrose_proto::host::HostConfig::relay_announce));
    /// only with `eager`.
    pub relay_announce: bool,
}

/// How every member weighs, builds and repairs the group's live MST (the group file's `[mst]`
/// table; `group serve --mst-live` runs it). Every field is part of the digest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MstSettings {
    /// What the weights measure.
    pub metric: MstMetric,
    /// Rows, GHS, or `auto` (rows up to
    /// [`ROWS_MAX_MEMBERS`](windrose_proto::mst_service::ROWS_MAX_MEMBERS) members).
    pub build: MstBuild,
    /// GHS's test window ([`MstLiveConfig::test_window`]).
    pub test_window: u32,
    /// [`MstLiveConfig::threshold`].
    pub threshold: f64,
    /// [`MstLiveConfig::check_every`].
    pub check_every: u32,
    /// [`MstLiveConfig::min_change`].
    pub min_change: f64,
    /// [`MstLiveConfig::noise_errors`].
    pub noise: f64,
    /// [`MstLiveConfig::rebuild_after`].
    pub rebuild_after: u32,
}

/// Every number is finite ([`Group::with_mst`] refuses the rest), so equality is total.
impl Eq for MstSettings {}

impl Default for MstSettings {
    /// [`MstLiveConfig::default`]'s policy, built `auto`.
    fn default() -> Self {
        let live = MstLiveConfig::default();
        MstSettings {
            metric: live.metric,
            build: live.build,
            test_window: live.test_window,
            threshold: live.threshold,
            check_every: live.check_every,
            min_change: live.min_change,
            noise: live.noise_errors,
            rebuild_after: live.rebuild_after,
        }
    }
}

impl MstSettings {
    /// The live MST's configuration at every member (what the table does not set keeps
    /// [`MstLiveConfig::default`]).
    pub fn live_config(&self) -> MstLiveConfig {
        MstLiveConfig {
            metric: self.metric,
            build: self.build,
            test_window: self.test_window,
            threshold: self.threshold,
            check_every: self.check_every,
            min_change: self.min_change,
            noise_errors: self.noise,
            rebuild_after: self.rebuild_after,
            ..MstLiveConfig::default()
        }
    }
}

/// The members of a run: a name, the session protocol version, one [`Member`] per id, and
/// how they run their collectives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    name: String,
    protocol_version: u32,
    /// Indexed by node id.
    members: Vec<Member>,
    session: SessionSettings,
    /// How the live MST is built (the `[mst]` table).
    mst: MstSettings,
    /// [`Group::digest`], computed once.
    digest: String,
}

impl Group {
    /// A group of `members` (any order; ids must be exactly `0..N`, addresses distinct, cluster
    /// ids dense) speaking this build's [`PROTOCOL_VERSION`].
    pub fn new(name: impl Into<String>, mut members: Vec<Member>) -> Result<Group, NetError> {
        let name = name.into();
        if name.trim().is_empty() {
            return Err(NetError::Group("the group name is empty".into()));
        }
        if members.is_empty() {
            return Err(NetError::Group("the group has no nodes".into()));
        }
        members.sort_by_key(|m| m.id);
        for (i, m) in members.iter().enumerate() {
            if m.id.index() != i {
                return Err(NetError::Group(if m.id.index() < i {
                    format!("node {} is listed twice", m.id)
                } else {
                    format!(
                        "node ids must be {}: node {i} is missing",
                        ids_in_words(members.len())
                    )
                }));
            }
        }
        let mut seen = HashMap::new();
        for m in &members {
            check_addr(&m.addr).map_err(|e| NetError::Group(format!("node {}: {e}", m.id)))?;
            if let Some(other) = seen.insert(m.addr.clone(), m.id) {
                return Err(NetError::Group(format!(
                    "nodes {other} and {} both listen on {}",
                    m.id, m.addr
                )));
            }
        }
        check_clusters(members.iter().map(|m| m.cluster)).map_err(NetError::Group)?;
        let mut group = Group {
            name,
            protocol_version: PROTOCOL_VERSION,
            members,
            session: SessionSettings::default(),
            mst: MstSettings::default(),
            digest: String::new(),
        };
        group.set_digest();
        Ok(group)
    }

    /// This group with its members running `session` (refused: `relay_announce` without
    /// `eager`, whose relayed announcements only eager sessions send).
    pub fn with_session(mut self, session: SessionSettings) -> Result<Group, NetError> {
        if session.relay_announce && !session.eager {
            return Err(NetError::Group(
                "[session] relay_announce = true needs eager = true (only eager sessions relay \
                 their announcements)"
                    .into(),
            ));
        }
        self.session = session;
        self.set_digest();
        Ok(self)
    }

    /// This group with its members' live MST run as `mst` says (the `[mst]` table; refused:
    /// a test window of 0, a negative or non-finite threshold, minimum change or noise).
    pub fn with_mst(mut self, mst: MstSettings) -> Result<Group, NetError> {
        mst.live_config()
            .validate()
            .map_err(|e| NetError::Group(format!("[mst]: {e}")))?;
        self.mst = mst;
        self.set_digest();
        Ok(self)
    }

    /// How every member builds the live MST (`group serve --mst-live`; the `[mst]` table,
    /// [`MstSettings::default`] when absent).
    pub fn mst(&self) -> MstSettings {
        self.mst
    }

    fn set_digest(&mut self) {
        self.digest = blake3::hash(self.to_toml().as_bytes()).to_hex()[..DIGEST_HEX].to_string();
    }

    /// How every member runs the group's collectives.
    pub fn session(&self) -> SessionSettings {
        self.session
    }

    /// A group of `n` nodes listening on `127.0.0.2:port`, `127.0.0.3:port`, ... (node `i` on
    /// `127.0.0.(i+2)`), the first `n / clusters` (rounded) in cluster 0 and so on: what
    /// `windrose local` runs. `n` is at most 250 so that every address is a distinct loopback
    /// host.
    pub fn loopback(
        name: impl Into<String>,
        n: usize,
        clusters: usize,
        port: u16,
    ) -> Result<Group, NetError> {
        if n == 0 || n > 250 {
            return Err(NetError::Group(format!(
                "a loopback group has 1 to 250 nodes, not {n}"
            )));
        }
        if clusters == 0 || clusters > n {
            return Err(NetError::Group(format!(
                "{clusters} clusters for {n} nodes: need 1 to {n}"
            )));
        }
        let members = (0..n)
            .map(|i| Member {
                id: NodeId::from(i),
                addr: format!("127.0.0.{}:{port}", i + 2),
                cluster: ClusterId::from(i * clusters / n),
            })
            .collect();
        Group::new(name, members)
    }

    /// What every member's copy of the group must agree on, for the handshake: the first 16
    /// hex digits of the BLAKE3 of the group as its canonical group file ([`Group::to_toml`]:
    /// name, version, every member's id, address and cluster, by id, and the `[session]` and
    /// `[mst]` settings where they are not the defaults). Members whose files
    /// differ in any of these (a node in another cluster, an address changed) refuse each
    /// other instead of running on different layouts. Not a secret: the group key
    /// authenticates; this only catches mismatched copies.
    pub fn digest(&self) -> String {
        self.digest.clone()
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The session protocol version.
    pub fn protocol_version(&self) -> u32 {
        self.protocol_version
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never true: a group has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every member, by id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member with id `id`.
    pub fn member(&self, id: NodeId) -> Option<&Member> {
        self.members.get(id.index())
    }

    /// True when `id` is a member.
    pub fn contains(&self, id: NodeId) -> bool {
        id.index() < self.members.len()
    }

    /// Each member's cluster, indexed by node id.
    pub fn clusters(&self) -> Vec<ClusterId> {
        self.members.iter().map(|m| m.cluster).collect()
    }

    /// Number of clusters.
    pub fn cluster_count(&self) -> usize {
        self.members
            .iter()
            .map(|m| m.cluster.index() + 1)
            .max()
            .unwrap_or(0)
    }

    /// `node 3 at 127.0.0.5:7100`, for messages.
    pub fn describe(&self, id: NodeId) -> String {
        match self.member(id) {
            Some(m) => format!("node {id} at {}", m.addr),
            None => format!("node {id}"),
        }
    }

    /// The group as a group file (see the [module docs](self)).
    pub fn to_toml(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "name = {}", toml_string(&self.name));
        let _ = writeln!(s, "protocol_version = {}", self.protocol_version);
        // Only settings that differ from the defaults: a group without them keeps the
        // canonical text, and so the digest, it had before the table existed.
        if self.session != SessionSettings::default() {
            let SessionSettings {
                eager,
                relay_announce,
            } = self.session;
            let _ = writeln!(
                s,
                "\n[session]\neager = {eager}\nrelay_announce = {relay_announce}"
            );
        }
        if self.mst != MstSettings::default() {
            let MstSettings {
                metric,
                build,
                test_window,
                threshold,
                check_every,
                min_change,
                noise,
                rebuild_after,
            } = self.mst;
            // `{:?}` writes every f64 back exactly (and always with a point: a TOML float).
            let _ = writeln!(
                s,
                "\n[mst]\nmetric = \"{metric}\"\nbuild = \"{build}\"\ntest_window = {test_window}\n\
                 threshold = {threshold:?}\ncheck_every = {check_every}\nmin_change = {min_change:?}\n\
                 noise = {noise:?}\nrebuild_after = {rebuild_after}"
            );
        }
        for m in &self.members {
            let _ = writeln!(
                s,
                "\n[[node]]\nid = {}\naddr = {}\ncluster = {}",
                m.id,
                toml_string(&m.addr),
                m.cluster
            );
        }
        s
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Checks that an address looks like `host:port` with a valid port.
fn check_addr(addr: &str) -> Result<(), String> {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(char::is_whitespace) => port
            .parse::<u16>()
            .map(|_| ())
            .map_err(|_| format!("address {addr:?}: {port:?} is not a port number (0-65535)")),
        _ => Err(format!(
            "address {addr:?} is not of the form ip:port or host:port"
        )),
    }
}

/// Checks that cluster ids are dense: 0 to C - 1, each used.
fn check_clusters(clusters: impl Iterator<Item = ClusterId>) -> Result<(), String> {
    let mut used: Vec<bool> = Vec::new();
    for c in clusters {
        if c.index() >= MAX_GROUP_NODES {
            return Err(format!("cluster id {c} is too large"));
        }
        if used.len() <= c.index() {
            used.resize(c.index() + 1, false);
        }
        used[c.index()] = true;
    }
    match used.iter().position(|u| !u) {
        Some(gap) => Err(format!(
            "cluster ids must be dense ({}): no node is in cluster {gap}",
            ids_in_words(used.len())
        )),
        None => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupDoc {
    name: Spanned<String>,
    protocol_version: Spanned<i64>,
    #[serde(default)]
    node: Vec<Spanned<NodeDoc>>,
    session: Option<Spanned<SessionDoc>>,
    mst: Option<MstDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MstDoc {
    metric: Option<Spanned<String>>,
    build: Option<Spanned<String>>,
    test_window: Option<Spanned<i64>>,
    threshold: Option<Spanned<f64>>,
    check_every: Option<Spanned<i64>>,
    min_change: Option<Spanned<f64>>,
    noise: Option<Spanned<f64>>,
    rebuild_after: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionDoc {
    #[serde(default)]
    eager: bool,
    #[serde(default)]
    relay_announce: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    id: Spanned<i64>,
    addr: Spanned<String>,
    cluster: Option<Spanned<i64>>,
}

/// Parses a group file (see the [module docs](self)); `path` is only used in error messages,
/// which read `path:line:column: what`.
pub fn parse_group_toml(text: &str, path: &Path) -> Result<Group, NetError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let at = |span: Option<Range<usize>>, msg: String| -> NetError {
        NetError::Group(match span {
            Some(s) => {
                let (l, c) = line_col(text, s.start);
                format!("{}:{l}:{c}: {msg}", path.display())
            }
            None => format!("{}: {msg}", path.display()),
        })
    };
    let doc: GroupDoc =
        toml::from_str(text).map_err(|e| at(e.span(), e.message().trim().to_string()))?;
    let version = *doc.protocol_version.get_ref();
    if version != i64::from(PROTOCOL_VERSION) {
        return Err(at(
            Some(doc.protocol_version.span()),
            format!(
                "protocol_version {version} is not supported: this build speaks version {PROTOCOL_VERSION}{}",
                if version == 1 {
                    " (version 1 was the one-shot session before the long-lived Host; write \
                     protocol_version = 2, and run this build on every member)"
                } else {
                    ""
                }
            ),
        ));
    }
    if doc.name.get_ref().trim().is_empty() {
        return Err(at(Some(doc.name.span()), "the group name is empty".into()));
    }
    if doc.node.is_empty() {
        return Err(at(
            None,
            "no [[node]] entries: a group needs at least one node".into(),
        ));
    }
    if doc.node.len() > MAX_GROUP_NODES {
        return Err(at(None, format!("more than {MAX_GROUP_NODES} nodes")));
    }
    let n = doc.node.len();
    let mut by_id: Vec<Option<Member>> = vec![None; n];
    let mut addrs: HashMap<String, NodeId> = HashMap::new();
    let mut cluster_spans: Vec<(ClusterId, Range<usize>)> = Vec::new();
    for entry in &doc.node {
        let node = entry.get_ref();
        let id = *node.id.get_ref();
        if id < 0 || id as usize >= n {
            return Err(at(
                Some(node.id.span()),
                format!(
                    "node id {id} out of range: the file lists {n} nodes, so {}",
                    ids_in_words(n)
                ),
            ));
        }
        let id = NodeId(id as u32);
        if by_id[id.index()].is_some() {
            return Err(at(
                Some(node.id.span()),
                format!("node {id} is listed twice"),
            ));
        }
        let addr = node.addr.get_ref().trim().to_string();
        check_addr(&addr).map_err(|e| at(Some(node.addr.span()), e))?;
        // Port 0 means "any free port" to bind: nobody could dial the node there.
        if addr.rsplit_once(':').map(|(_, p)| p.parse::<u16>()) == Some(Ok(0)) {
            return Err(at(
                Some(node.addr.span()),
                format!("address {addr:?}: port 0 cannot be dialed; give every node its port"),
            ));
        }
        if let Some(other) = addrs.insert(addr.clone(), id) {
            return Err(at(
                Some(node.addr.span()),
                format!("address {addr} is already node {other}'s"),
            ));
        }
        let cluster = match &node.cluster {
            None => ClusterId(0),
            Some(c) => {
                let v = *c.get_ref();
                if v < 0 || v as usize >= n {
                    return Err(at(
                        Some(c.span()),
                        format!(
                            "cluster {v} out of range: cluster ids go from 0 to {} at most",
                            n.saturating_sub(1)
                        ),
                    ));
                }
                cluster_spans.push((ClusterId(v as u32), c.span()));
                ClusterId(v as u32)
            }
        };
        by_id[id.index()] = Some(Member { id, addr, cluster });
    }
    let members: Vec<Member> = by_id.into_iter().flatten().collect();
    if let Err(msg) = check_clusters(members.iter().map(|m| m.cluster)) {
        return Err(at(cluster_spans.last().map(|(_, s)| s.clone()), msg));
    }
    let mut group =
        Group::new(doc.name.into_inner(), members).map_err(|e| at(None, e.to_string()))?;
    if let Some(mst) = doc.mst {
        let mut settings = MstSettings::default();
        if let Some(metric) = mst.metric {
            settings.metric = metric.get_ref().parse::<MstMetric>().map_err(|e| {
                at(
                    Some(metric.span()),
                    format!("[mst] metric = {:?}: {e}", metric.get_ref()),
                )
            })?;
        }
        if let Some(build) = mst.build {
            settings.build = build.get_ref().parse::<MstBuild>().map_err(|e| {
                at(
                    Some(build.span()),
                    format!("[mst] build = {:?}: {e}", build.get_ref()),
                )
            })?;
        }
        let whole = |key: &str, k: Spanned<i64>, least: u32| -> Result<u32, NetError> {
            u32::try_from(*k.get_ref())
                .ok()
                .filter(|&v| v >= least)
                .ok_or_else(|| {
                    at(
                        Some(k.span()),
                        format!(
                            "[mst] {key} = {}: expected a whole number from {least} to {}",
                            k.get_ref(),
                            u32::MAX
                        ),
                    )
                })
        };
        let fraction = |key: &str, x: Spanned<f64>| -> Result<f64, NetError> {
            let v = *x.get_ref();
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(at(
                    Some(x.span()),
                    format!("[mst] {key} = {v}: expected a number >= 0"),
                ))
            }
        };
        if let Some(k) = mst.test_window {
            settings.test_window = whole("test_window", k, 1)?;
        }
        if let Some(k) = mst.check_every {
            settings.check_every = whole("check_every", k, 0)?;
        }
        if let Some(k) = mst.rebuild_after {
            settings.rebuild_after = whole("rebuild_after", k, 0)?;
        }
        if let Some(x) = mst.threshold {
            settings.threshold = fraction("threshold", x)?;
        }
        if let Some(x) = mst.min_change {
            settings.min_change = fraction("min_change", x)?;
        }
        if let Some(x) = mst.noise {
            settings.noise = fraction("noise", x)?;
        }
        group = group
            .with_mst(settings)
            .map_err(|e| at(None, e.to_string()))?;
    }
    match doc.session {
        None => Ok(group),
        Some(session) => {
            let span = session.span();
            let SessionDoc {
                eager,
                relay_announce,
            } = session.into_inner();
            group
                .with_session(SessionSettings {
                    eager,
                    relay_announce,
                })
                .map_err(|e| at(Some(span), e.to_string()))
        }
    }
}

/// Reads and parses a group file.
pub fn load_group(path: &Path) -> Result<Group, NetError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| NetError::Group(format!("{}: {e}", path.display())))?;
    parse_group_toml(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name = \"lab\"\nprotocol_version = 2\n\n[[node]]\nid = 1\naddr = \"127.0.0.3:7000\"\ncluster = 1\n\n[[node]]\nid = 0\naddr = \"127.0.0.2:7000\"\n";

    #[test]
    fn parses_and_round_trips() {
        let g = parse_group_toml(GOOD, Path::new("g.toml")).unwrap();
        assert_eq!(g.name(), "lab");
        assert_eq!(g.len(), 2);
        assert_eq!(g.member(NodeId(0)).unwrap().addr, "127.0.0.2:7000");
        assert_eq!(g.clusters(), vec![ClusterId(0), ClusterId(1)]);
        assert_eq!(g.cluster_count(), 2);
        let again = parse_group_toml(&g.to_toml(), Path::new("again.toml")).unwrap();
        assert_eq!(again, g);
        let lo = Group::loopback("t", 4, 2, 7000).unwrap();
        assert_eq!(lo.member(NodeId(3)).unwrap().addr, "127.0.0.5:7000");
        assert_eq!(
            lo.clusters(),
            vec![ClusterId(0), ClusterId(0), ClusterId(1), ClusterId(1)]
        );
    }

    /// The `[session]` table: parsed, written back by `to_toml`, part of the digest (a copy
    /// that differs in it is another group), absent from the canonical text at its defaults
    /// (so older groups keep their digests); `relay_announce` without `eager` is refused with
    /// the file, line and column.
    #[test]
    fn session_settings() {
        let plain = parse_group_toml(GOOD, Path::new("g.toml")).unwrap();
        assert_eq!(plain.session(), SessionSettings::default());
        assert!(!plain.to_toml().contains("[session]"));
        let explicit_defaults = format!("{GOOD}\n[session]\neager = false\n");
        let same = parse_group_toml(&explicit_defaults, Path::new("g.toml")).unwrap();
        assert_eq!(same.digest(), plain.digest());
        let eager = parse_group_toml(
            &format!("{GOOD}\n[session]\neager = true\nrelay_announce = true\n"),
            Path::new("g.toml"),
        )
        .unwrap();
        assert_eq!(
            eager.session(),
            SessionSettings {
                eager: true,
                relay_announce: true
            }
        );
        assert_ne!(eager.digest(), plain.digest());
        let again = parse_group_toml(&eager.to_toml(), Path::new("again.toml")).unwrap();
        assert_eq!(again, eager);
        let only_eager = plain
            .clone()
            .with_session(SessionSettings {
                eager: true,
                relay_announce: false,
            })
            .unwrap();
        assert_ne!(only_eager.digest(), eager.digest());
        let bad = format!("{GOOD}\n[session]\nrelay_announce = true\n");
        let e = parse_group_toml(&bad, Path::new("g.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("g.toml:13:1: "), "{e}");
        assert!(e.contains("needs eager = true"), "{e}");
        let typo = format!("{GOOD}\n[session]\neagre = true\n");
        let e = parse_group_toml(&typo, Path::new("g.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("eagre"), "{e}");
    }

    /// The `[mst]` table's `build`: parsed, written back, part of the digest (so members whose
    /// copies differ refuse each other instead of building differently), absent from the
    /// canonical text at `auto`; a bad value names the file, line, column and key.
    #[test]
    fn mst_build_setting() {
        let plain = parse_group_toml(GOOD, Path::new("g.toml")).unwrap();
        assert_eq!(plain.mst(), MstSettings::default());
        assert_eq!(plain.mst().build, MstBuild::Auto);
        assert!(!plain.to_toml().contains("[mst]"));
        let auto = parse_group_toml(
            &format!("{GOOD}\n[mst]\nbuild = \"auto\"\n"),
            Path::new("g.toml"),
        )
        .unwrap();
        assert_eq!(auto.digest(), plain.digest());
        let empty = parse_group_toml(&format!("{GOOD}\n[mst]\n"), Path::new("g.toml")).unwrap();
        assert_eq!(empty.mst(), MstSettings::default());
        let mut digests = vec![plain.digest()];
        for (word, build) in [("rows", MstBuild::Rows), ("ghs", MstBuild::Ghs)] {
            let g = parse_group_toml(
                &format!("{GOOD}\n[mst]\nbuild = \"{word}\"\n"),
                Path::new("g.toml"),
            )
            .unwrap();
            assert_eq!(g.mst().build, build);
            assert!(g.to_toml().contains(&format!("\nbuild = \"{word}\"\n")));
            let again = parse_group_toml(&g.to_toml(), Path::new("again.toml")).unwrap();
            assert_eq!(again, g);
            digests.push(g.digest());
        }
        let classic = parse_group_toml(
            &format!("{GOOD}\n[mst]\nbuild = \"ghs\"\ntest_window = 1\n"),
            Path::new("g.toml"),
        )
        .unwrap();
        assert_eq!(
            classic.mst(),
            MstSettings {
                build: MstBuild::Ghs,
                test_window: 1,
                ..MstSettings::default()
            }
        );
        assert_eq!(
            parse_group_toml(&classic.to_toml(), Path::new("again.toml")).unwrap(),
            classic
        );
        digests.push(classic.digest());
        digests.sort();
        digests.dedup();
        assert_eq!(digests.len(), 4, "{digests:?}");
        for bad_k in ["0", "-3", "4294967296"] {
            let e = parse_group_toml(
                &format!("{GOOD}\n[mst]\ntest_window = {bad_k}\n"),
                Path::new("g.toml"),
            )
            .unwrap_err()
            .to_string();
            assert_eq!(
                e,
                format!(
                    "g.toml:14:15: [mst] test_window = {bad_k}: expected a whole number from 1 to 4294967295"
                )
            );
        }
        let bad = format!("{GOOD}\n[mst]\nbuild = \"kruskal\"\n");
        let e = parse_group_toml(&bad, Path::new("g.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "g.toml:14:9: [mst] build = \"kruskal\": expected \"auto\", \"rows\" or \"ghs\""
        );
        let not_a_string = format!("{GOOD}\n[mst]\nbuild = 3\n");
        let e = parse_group_toml(&not_a_string, Path::new("g.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("g.toml:14:9"), "{e}");
        let typo = format!("{GOOD}\n[mst]\nbiuld = \"rows\"\n");
        let e = parse_group_toml(&typo, Path::new("g.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("biuld"), "{e}");
    }

    /// The `[mst]` table's repair policy (metric, threshold, check_every, min_change, noise,
    /// rebuild_after): parsed, written back exactly, part of the digest, and bad values named
    /// with their place.
    #[test]
    fn mst_policy_settings() {
        let plain = parse_group_toml(GOOD, Path::new("g.toml")).unwrap();
        let text = format!(
            "{GOOD}\n[mst]\nmetric = \"inverse-bandwidth\"\nthreshold = 0.7\ncheck_every = 0\n\
             min_change = 5\nnoise = 2.5\nrebuild_after = 0\n"
        );
        let g = parse_group_toml(&text, Path::new("g.toml")).unwrap();
        assert_eq!(
            g.mst(),
            MstSettings {
                metric: MstMetric::InverseBandwidth,
                threshold: 0.7,
                check_every: 0,
                min_change: 5.0,
                noise: 2.5,
                rebuild_after: 0,
                ..MstSettings::default()
            }
        );
        let live = g.mst().live_config();
        assert_eq!(
            (
                live.metric,
                live.threshold,
                live.check_every,
                live.min_change
            ),
            (MstMetric::InverseBandwidth, 0.7, 0, 5.0)
        );
        assert_eq!((live.noise_errors, live.rebuild_after), (2.5, 0));
        assert_eq!(
            parse_group_toml(&g.to_toml(), Path::new("again.toml")).unwrap(),
            g
        );
        assert_ne!(g.digest(), plain.digest());
        // Each key alone changes the digest: members that differ in any refuse each other.
        let mut digests = vec![plain.digest()];
        for line in [
            "metric = \"inverse-bandwidth\"",
            "threshold = 0.2",
            "check_every = 1",
            "min_change = 1.5",
            "noise = 1",
            "rebuild_after = 3",
        ] {
            let one =
                parse_group_toml(&format!("{GOOD}\n[mst]\n{line}\n"), Path::new("g.toml")).unwrap();
            digests.push(one.digest());
        }
        digests.sort();
        digests.dedup();
        assert_eq!(digests.len(), 7, "{digests:?}");
        for (line, want) in [
            (
                "metric = \"hops\"",
                "g.toml:14:10: [mst] metric = \"hops\": ",
            ),
            (
                "threshold = -0.1",
                "g.toml:14:13: [mst] threshold = -0.1: expected a number >= 0",
            ),
            (
                "min_change = nan",
                "g.toml:14:14: [mst] min_change = NaN: expected a number >= 0",
            ),
            (
                "noise = inf",
                "g.toml:14:9: [mst] noise = inf: expected a number >= 0",
            ),
            (
                "check_every = -1",
                "g.toml:14:15: [mst] check_every = -1: expected a whole number from 0 to 4294967295",
            ),
            (
                "rebuild_after = 4294967296",
                "g.toml:14:17: [mst] rebuild_after = 4294967296: expected a whole number from 0 to 4294967295",
            ),
        ] {
            let e = parse_group_toml(&format!("{GOOD}\n[mst]\n{line}\n"), Path::new("g.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{line}: {e}");
        }
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let cases = [
            (
                GOOD.replace("id = 1", "id = 0"),
                "g.toml:10:6: node 0 is listed twice",
            ),
            (
                GOOD.replace("protocol_version = 2", "protocol_version = 7"),
                "g.toml:2:20: protocol_version 7 is not supported: this build speaks version 2",
            ),
            (
                GOOD.replace("protocol_version = 2", "protocol_version = 1"),
                "g.toml:2:20: protocol_version 1 is not supported: this build speaks version 2 \
                 (version 1 was the one-shot session before the long-lived Host; write \
                 protocol_version = 2, and run this build on every member)",
            ),
            (
                GOOD.replace("127.0.0.3:7000", "127.0.0.3:http"),
                "g.toml:6:8: address \"127.0.0.3:http\": \"http\" is not a port number (0-65535)",
            ),
            (
                GOOD.replace("127.0.0.3:7000", "127.0.0.3:0"),
                "g.toml:6:8: address \"127.0.0.3:0\": port 0 cannot be dialed",
            ),
            (
                GOOD.replace("127.0.0.3:7000", "127.0.0.2:7000"),
                "g.toml:11:8: address 127.0.0.2:7000 is already node 1's",
            ),
            (
                GOOD.replace("id = 1", "id = 5"),
                "g.toml:5:6: node id 5 out of range: the file lists 2 nodes, so ids 0 to 1",
            ),
            (
                GOOD.replace("cluster = 1", "cluster = 1\nport = 3"),
                "g.toml:8:1: unknown field `port`",
            ),
        ];
        for (text, want) in cases {
            let err = parse_group_toml(&text, Path::new("g.toml")).unwrap_err();
            let got = err.to_string();
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
        let gap = GOOD.replace(
            "addr = \"127.0.0.2:7000\"",
            "addr = \"127.0.0.2:7000\"\ncluster = 1",
        );
        let err = parse_group_toml(&gap, Path::new("g.toml")).unwrap_err();
        assert!(err.to_string().contains("no node is in cluster 0"), "{err}");
        assert!(Group::new("x", vec![]).is_err());
    }
}
