//! One-shot commands on the [`Host`](windrose_proto::host::Host): a root that starts one
//! collective as a member of the group and reports every member's end, and `windrose node
//! --once`, a member that serves one collective and leaves. Both run
//! [`serve_group`](windrose_net::host_driver::serve_group); the session (announcing,
//! readiness, reports, failures, leaving) is the host's, not this file's.
//!
//! The root builds its [`RunOutcome`] from the host's [`Report::MemberDone`] reports (each
//! member's bytes, BLAKE3 digest, time and computed share) and failures.

use super::{net_err, RootRun};
use anyhow::Context as _;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::NodeId;
use windrose_net::bootstrap::{Handshake, Membership};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::multicast::MulticastProtocol;
use windrose_net::outcome::{NodeReport, RunStatus, ShareResult};
use windrose_net::piece_file::OutputShelf;
use windrose_net::{NetEvent, NodeResult, RunOutcome, Timeouts};
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::host::{AppRequest, PieceShelf};
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

/// The member's configuration shared by the root and `node --once`: the group key's
/// handshake, the deadlines, the seed of its random choices, and every member digesting what
/// it receives for the root's check.
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
                    GroupEvent::Report(Report::MemberDone { transfer: t, member, finished, bytes_delivered, digest, elapsed, share }) if t == transfer => {
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
                    GroupEvent::Resumed(r) if r.transfer == transfer => {
                        let _ = progress.send(NetEvent::Rejoined { peer: r.member });
                        resumed.insert(r.member, r.bytes);
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

/// Where a member's received bytes go: its output's partial file (the shelf's: a multicast's
/// pieces are already there), renamed over the output once its part finished, or only hashed.
struct Received {
    hasher: Option<blake3::Hasher>,
    bytes: u64,
    /// The partial file, and the handle this member writes it through (None: the shelf's
    /// piece file holds the bytes).
    file: Option<(PathBuf, Option<std::fs::File>)>,
}

impl Received {
    fn new(
        shelf: Option<&OutputShelf>,
        transfer: TransferId,
        hash: bool,
    ) -> anyhow::Result<Received> {
        let file = match shelf.and_then(|s| s.partial(transfer)) {
            Some((part, true)) => Some((part, None)),
            Some((part, false)) => {
                let f = std::fs::File::create(&part)
                    .with_context(|| format!("creating {}", part.display()))?;
                Some((part, Some(f)))
            }
            None => None,
        };
        Ok(Received {
            hasher: hash.then(blake3::Hasher::new),
            bytes: 0,
            file,
        })
    }

    fn take(&mut self, offset: u64, data: &Bytes) -> anyhow::Result<()> {
        // Deliveries of a collective come in order: the hash is of the bytes as delivered.
        if let Some(h) = self.hasher.as_mut() {
            h.update(data);
        }
        self.bytes += data.len() as u64;
        if let Some((part, Some(f))) = &self.file {
            f.write_all_at(data, offset)
                .with_context(|| format!("writing {}", part.display()))?;
        }
        Ok(())
    }

    /// Renames the partial file over `out` when `keep`, removes it otherwise.
    fn finish(self, out: Option<&Path>, keep: bool) -> anyhow::Result<Option<PathBuf>> {
        let (Some((part, f)), Some(out)) = (self.file, out) else {
            return Ok(None);
        };
        if !keep {
            let _ = std::fs::remove_file(&part);
            return Ok(None);
        }
        if let Some(f) = f {
            f.sync_all()
                .with_context(|| format!("writing {}", part.display()))?;
        }
        // Checked again at the end: a FIFO, device or link put at the name during the run is
        // not renamed over either; the data stays in the partial file, named in the error.
        if let Some(why) = windrose_net::sink::output_path_problem(out) {
            anyhow::bail!(
                "--out {why}; what was received is kept in {}",
                part.display()
            );
        }
        std::fs::rename(&part, out)
            .with_context(|| format!("renaming {} to {}", part.display(), out.display()))?;
        Ok(Some(out.to_path_buf()))
    }
}

/// `windrose node --once` on the host: serves the first collective announced to it, then
/// leaves. Returns its report and where its data went.
///
/// `hash`: BLAKE3 what it receives for its own report (the host digests it for the root's
/// check anyway; a second pass costs a core's worth of time on a crowded machine, so a
/// member that prints no report skips it).
pub(super) async fn node_once(
    membership: Membership,
    handshake: Arc<dyn Handshake>,
    out: Option<&Path>,
    wait: Duration,
    hash: bool,
    seed: u64,
) -> anyhow::Result<(NodeReport, Option<PathBuf>)> {
    let me = membership.me;
    let listener = windrose_net::bind(&membership.group, me)
        .await
        .map_err(net_err)?;
    let mut config = member_config(membership, handshake, Timeouts::default(), seed);
    let shelf = out.map(|o| Arc::new(OutputShelf::new(o)));
    config.shelf = shelf.clone().map(|s| s as Arc<dyn PieceShelf>);
    let (mut handle, ports) = group_channel();
    let mut serving = tokio::spawn(serve_group(listener, config, ports));
    let deadline = tokio::time::sleep(wait);
    tokio::pin!(deadline);
    let mut received: Option<Received> = None;
    let mut ours: Option<TransferId> = None;
    let mut go = Instant::now();
    // (finished, nanoseconds from Go to the end).
    let mut ended: Option<(bool, u64)> = None;
    let mut error: Option<String> = None;
    let mut share: Option<ShareResult> = None;
    let mut left = false;
    loop {
        tokio::select! {
            biased;
            Some(ev) = handle.events.recv() => match ev {
                GroupEvent::Report(Report::CollectiveStarted { transfer, .. }) if ours.is_none() => {
                    ours = Some(transfer);
                    go = Instant::now();
                    received = Some(Received::new(shelf.as_deref(), transfer, hash)?);
                }
                GroupEvent::Delivered { transfer, offset, data } if Some(transfer) == ours => {
                    if let Some(r) = received.as_mut() {
                        r.take(offset, &data)?;
                    }
                }
                GroupEvent::Report(Report::CollectiveEnded { transfer, finished }) if Some(transfer) == ours && ended.is_none() => {
                    ended = Some((finished, go.elapsed().as_nanos() as u64));
                    if !left {
                        left = true;
                        handle.request(AppRequest::Leave);
                    }
                }
                GroupEvent::Computed { offset, len, blake3 } if ours.is_some() => {
                    let computed_ns = go.elapsed().as_nanos() as u64;
                    share = Some(ShareResult { offset, len, blake3, computed_ns });
                }
                GroupEvent::Failed(f) if Some(f.transfer) == ours && f.member == me => {
                    error = Some(f.why);
                }
                _ => {}
            },
            () = &mut deadline, if ours.is_none() && !left => {
                left = true;
                error = Some(format!(
                    "no collective started within {} s (--wait)",
                    wait.as_secs_f64()
                ));
                handle.request(AppRequest::Leave);
            }
            r = &mut serving => {
                r.map_err(|e| anyhow::anyhow!("node {me}'s driver stopped: {e}"))?
                    .map_err(net_err)?;
                break;
            }
        }
    }
    let finished = ended.is_some_and(|e| e.0);
    let (bytes, blake3, written) = match received {
        Some(r) => {
            let hex = r.hasher.as_ref().map(|h| h.finalize().to_hex().to_string());
            (r.bytes, hex, r.finish(out, finished)?)
        }
        None => (0, None, None),
    };
    if !finished {
        anyhow::bail!(
            "node {me}: {}",
            error.unwrap_or_else(|| "its part of the collective did not finish".to_string())
        );
    }
    let report = NodeReport {
        node: me,
        status: RunStatus::Finished,
        error: None,
        bytes_received: bytes,
        blake3,
        finished_ns: ended.map(|e| e.1),
        complete_ns: None,
        share,
        measurements: handle.measurements(),
        frames_sent: handle.frames_sent(),
        resumed_bytes: ours
            .zip(shelf.as_ref())
            .and_then(|(t, s)| s.resumed_bytes(t)),
    };
    Ok((report, written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt as _;

    /// A FIFO put at `--out`'s name during the run is not renamed over: the finish fails,
    /// naming it, and the received bytes stay in the partial file.
    #[test]
    fn a_name_taken_by_a_fifo_meanwhile_is_not_renamed_over() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.bin");
        let part = dir.path().join(".out.bin.partial");
        let file = std::fs::File::create(&part).unwrap();
        let mut r = Received {
            hasher: None,
            bytes: 0,
            file: Some((part.clone(), Some(file))),
        };
        r.take(0, &Bytes::from_static(b"received")).unwrap();
        let c = std::ffi::CString::new(out.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a path in this test's own directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = r.finish(Some(&out), true).unwrap_err().to_string();
        assert!(e.contains("FIFO") && e.contains(".out.bin.partial"), "{e}");
        assert_eq!(std::fs::read(&part).unwrap(), b"received");
        assert!(std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_fifo());
    }
}
