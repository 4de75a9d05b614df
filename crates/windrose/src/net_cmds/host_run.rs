//! One-shot root commands on the [`Host`](windrose_proto::host::Host): a root that starts one
//! collective as a member of the group and reports every member's end (the other members run
//! `windrose node --once`, the one-collective `group serve` of [`crate::group_cmd`]). It runs
//! [`windrose_net::host_driver::serve_group`]; the session (announcing,
//! readiness, reports, failures, leaving) is the host's, not this file's.
//!
//! The root builds its [`RunOutcome`] from the host's [`Report::MemberDone`] reports (each
//! member's bytes, BLAKE3 digest, time and computed share) and failures.

use super::{net_err, RootRun};
use anyhow::Context as _;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::NodeId;
use windrose_net::bootstrap::{Handshake, Membership};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::multicast::MulticastProtocol;
use windrose_net::outcome::{RunStatus, ShareResult};
use windrose_net::{NetEvent, NodeResult, RunOutcome, Timeouts};
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::host::AppRequest;
use windrose_proto::{ComputedShare, Report, TransferId};

/// A member's end as the initiator's host reported it.
struct Done {
    finished: bool,
    bytes: u64,
    digest: Option<[u8; 32]>,
    elapsed: Option<Duration>,
    /// A scatter's share, as the member computed it.
    share: Option<ComputedShare>,
}

/// What a member's hash must be: the whole data's (a broadcast or multicast), or the bytes of
/// the share the schedule gives it (a scatter).
struct Expected {
    whole: String,
    /// The planned shares of a collective whose members keep one (a scatter): `(offset,
    /// len, BLAKE3 hex)` per member.
    shares: Option<BTreeMap<NodeId, (u64, u64, String)>>,
}

impl Expected {
    fn of(spec: &CollectiveSpec, data: &Bytes) -> anyhow::Result<Expected> {
        let whole = blake3::hash(data).to_hex().to_string();
        let shares = spec
            .shares(data.len() as u64)
            .transpose()
            .context("planning the collective's shares")?
            .map(|shares| {
                shares
                    .into_iter()
                    .map(|(node, kept)| {
                        let bytes = &data[kept.start as usize..kept.end as usize];
                        let hex = blake3::hash(bytes).to_hex().to_string();
                        (node, (kept.start, kept.end - kept.start, hex))
                    })
                    .collect()
            });
        Ok(Expected { whole, shares })
    }

    /// The hash `member` must report, and the one it reported.
    fn check(&self, member: NodeId, d: Option<&Done>) -> (Option<String>, Option<String>) {
        let hex = |h: [u8; 32]| blake3::Hash::from_bytes(h).to_hex().to_string();
        match &self.shares {
            None => (Some(self.whole.clone()), d.and_then(|d| d.digest).map(hex)),
            Some(plans) => {
                let want = plans.get(&member);
                // A share in the wrong place is not the planned share, whatever its bytes.
                let got = d.and_then(|d| d.share).map(|s| match want {
                    Some(&(offset, len, _)) if (s.offset, s.len) == (offset, len) => hex(s.digest),
                    _ => format!(
                        "{} (bytes {}..{})",
                        hex(s.digest),
                        s.offset,
                        s.offset + s.len
                    ),
                });
                (want.map(|w| w.2.clone()), got)
            }
        }
    }
}

/// The root's configuration as a member: the group key's handshake, the deadlines, the seed
/// of its random choices, and every member digesting what it receives for the root's check.
fn member_config(
    membership: Membership,
    handshake: Arc<dyn Handshake>,
    timeouts: Timeouts,
    seed: u64,
) -> GroupConfig {
    let mut config = GroupConfig::new(membership);
    config.handshake = handshake;
    config.timeouts = timeouts;
    config.digest_deliveries = true;
    config.seed = seed;
    config
}

impl RootRun<'_> {
    /// Runs `spec` from this root as a member of the group (every other member runs `windrose
    /// node --once`): starts it, waits for every member's end, then leaves. `collective` and
    /// `protocol` name it in the outcome.
    pub(super) fn execute_on_host(
        &self,
        spec: CollectiveSpec,
        collective: &'static str,
        protocol: Option<MulticastProtocol>,
    ) -> anyhow::Result<RunOutcome> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let bar = self.rt.spawn(super::progress(
            rx,
            self.data.len() as u64,
            self.group.len() - 1,
            !(self.watch.quiet || self.watch.json),
            matches!(spec, CollectiveSpec::Scatter { .. }),
            self.watch.announce_go,
        ));
        let result = self
            .rt
            .block_on(self.root_member(spec, collective, protocol, tx));
        let _ = self.rt.block_on(bar);
        let outcome = result?;
        super::write_measurements(&outcome, self.watch)?;
        Ok(outcome)
    }

    async fn root_member(
        &self,
        spec: CollectiveSpec,
        collective: &'static str,
        protocol: Option<MulticastProtocol>,
        progress: tokio::sync::mpsc::UnboundedSender<NetEvent>,
    ) -> anyhow::Result<RunOutcome> {
        let membership = Membership {
            group: self.group.clone(),
            me: self.root,
        };
        let expected = Expected::of(&spec, &self.data)?;
        let schedule = match &spec {
            CollectiveSpec::Scatter { schedule, .. } => Some(schedule.clone()),
            _ => None,
        };
        let listener = windrose_net::bind(&self.group, self.root)
            .await
            .map_err(net_err)?;
        let config = member_config(membership, self.handshake.clone(), self.timeouts, self.seed);
        let (mut handle, ports) = group_channel();
        let mut serving = tokio::spawn(serve_group(listener, config, ports));
        // An id of this member's own sequence (rank + n k: no other member draws it), k drawn
        // afresh: long-lived members remember the ids of the collectives they took part in,
        // so a second run from the same root must not reuse the first one's. Below the ids a
        // `group serve` member draws (from n 2^20 on).
        let n = self.group.len() as u32;
        let rank = self
            .group
            .members()
            .iter()
            .position(|m| m.id == self.root)
            .unwrap_or(0) as u32;
        let k = rand::random::<u32>() % (1 << 19);
        let transfer = TransferId(rank.wrapping_add(n.wrapping_mul(k)));
        let _watch = self
            .file
            .as_ref()
            .map(|f| handle.watch_source(transfer, f.clone()));
        handle.request(AppRequest::StartCollective {
            spec,
            data: self.data.clone(),
            transfer: Some(transfer),
        });
        let mut done: BTreeMap<NodeId, Done> = BTreeMap::new();
        let mut why: BTreeMap<NodeId, String> = BTreeMap::new();
        let mut lost: BTreeMap<NodeId, String> = BTreeMap::new();
        let mut resumed: BTreeMap<NodeId, u64> = BTreeMap::new();
        let mut go: Option<Instant> = None;
        let mut elapsed = None;
        let mut left = false;
        loop {
            tokio::select! {
                biased;
                Some(ev) = handle.events.recv() => match ev {
                    GroupEvent::Report(Report::CollectiveStarted { transfer: t, .. }) if t == transfer => {
                        go = Some(Instant::now());
                        let _ = progress.send(NetEvent::Started { total_len: self.data.len() as u64 });
                    }
                    GroupEvent::Report(Report::MemberDone { transfer: t, member, finished, bytes_delivered, digest, elapsed, share, resumed_bytes }) if t == transfer => {
                        if let Some(bytes) = resumed_bytes {
                            let _ = progress.send(NetEvent::Rejoined { peer: member });
                            resumed.insert(member, bytes);
                        }
                        if member != self.root {
                            let status = if finished { RunStatus::Finished } else { RunStatus::Failed };
                            let _ = progress.send(NetEvent::Reported { node: member, status });
                        }
                        done.insert(member, Done { finished, bytes: bytes_delivered, digest, elapsed, share });
                    }
                    GroupEvent::Report(Report::MemberProgress { transfer: t, member, bytes }) if t == transfer => {
                        let total_bytes = self.data.len() as u64;
                        let _ = progress.send(NetEvent::Progress { node: member, done_bytes: bytes, total_bytes });
                    }
                    GroupEvent::Report(Report::CollectiveComplete { transfer: t, .. }) if t == transfer => {
                        elapsed = Some(go.map_or(0.0, |g| g.elapsed().as_secs_f64()));
                        if !left {
                            left = true;
                            handle.request(AppRequest::Leave);
                        }
                    }
                    GroupEvent::Failed(f) if f.transfer == transfer => {
                        why.insert(f.member, f.why);
                    }
                    GroupEvent::Lost(peer, reason) => {
                        let _ = progress.send(NetEvent::PeerFailed { peer, reason: reason.clone() });
                        lost.entry(peer).or_insert(reason);
                    }
                    _ => {}
                },
                r = &mut serving => {
                    r.map_err(|e| anyhow::anyhow!("the root's driver stopped: {e}"))?
                        .map_err(net_err)?;
                    break;
                }
            }
        }
        drop(progress);
        // A source changed under a run that failed is why it failed, whatever each member
        // saw first (pieces failing their check, a truncated mapping's write errors).
        let unfinished = self.group.len() - done.values().filter(|d| d.finished).count();
        if let Some(reason) = self.file.as_ref().and_then(|f| f.changed()) {
            if unfinished > 0 {
                anyhow::bail!("{reason} ({unfinished} members did not finish)");
            }
        }
        let Some(elapsed_s) = elapsed else {
            anyhow::bail!("the root left the group before its collective completed");
        };
        let nodes = self
            .group
            .members()
            .iter()
            .filter(|m| m.id != self.root)
            .map(|m| {
                let d = done.get(&m.id);
                let finished = d.is_some_and(|d| d.finished);
                let (want, blake3) = expected.check(m.id, d);
                let verified = finished && blake3.is_some() && blake3 == want;
                let completion_s = d
                    .filter(|d| d.finished)
                    .and_then(|d| d.elapsed)
                    .map(|e| e.as_secs_f64());
                let error = (!finished).then(|| {
                    why.get(&m.id)
                        .or(lost.get(&m.id))
                        .cloned()
                        .unwrap_or_else(|| "it never reported its end".to_string())
                });
                NodeResult {
                    node: m.id,
                    cluster: m.cluster,
                    status: if finished {
                        RunStatus::Finished
                    } else {
                        RunStatus::Failed
                    },
                    error,
                    bytes_received: d.map_or(0, |d| d.bytes),
                    completion_s,
                    throughput_mb_s: completion_s
                        .filter(|&c| c > 0.0)
                        .map(|c| self.data.len() as f64 / c / 1e6),
                    blake3,
                    expected_blake3: want,
                    verified,
                    share: d.and_then(|d| d.share.as_ref()).map(ShareResult::from),
                    predicted_finish_s: schedule
                        .as_ref()
                        .and_then(|s| s.node(m.id))
                        .map(|s| s.predicted_finish_s),
                    measured_finish_s: d
                        .and_then(|d| d.share)
                        .and_then(|s| s.computed)
                        .map(|c| c.as_secs_f64()),
                    resumed_bytes: resumed.get(&m.id).copied(),
                    report: None,
                }
            })
            .collect();
        Ok(RunOutcome {
            session: u64::from(transfer.0),
            collective,
            protocol,
            root: self.root,
            total_len: self.data.len() as u64,
            root_blake3: expected.whole,
            elapsed_s,
            nodes,
            root_share: done
                .get(&self.root)
                .and_then(|d| d.share.as_ref())
                .map(ShareResult::from),
            root_measurements: handle.measurements(),
            root_frames_sent: handle.frames_sent(),
        })
    }
}
