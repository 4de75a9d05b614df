//! The root of a one-shot run: pushes the job, waits for every node, runs the collective and
//! collects the reports.

use super::*;

/// Runs the root of one collective: connects to every member, hands out the job, starts the
/// collective when everyone is ready, collects every node's report and ends the run.
///
/// Returns an error when the run could not start (a node unreachable or rejecting the
/// handshake, a node failing its setup) or the root itself failed; nodes that fail during the
/// run are listed in the outcome ([`RunOutcome::all_verified`] is false then).
pub async fn run_root(config: NodeConfig, job: RootJob) -> Result<RunOutcome, NetError> {
    let me = config.me;
    let group = config.group.clone();
    let mut core = Core::new(&config, false);
    let t = config.timeouts;
    let session: u64 = rand::random();
    // A multicast's manifest: every piece hashed once, here, off the async threads.
    let manifest = match &job.collective {
        Collective::Multicast { piece_bytes, .. } => {
            if *piece_bytes == 0 || *piece_bytes > MAX_PIECE_BYTES {
                return Err(NetError::Setup(format!(
                    "piece size {piece_bytes}: must be 1 to {MAX_PIECE_BYTES} bytes (one piece per frame)"
                )));
            }
            let (data, piece) = (job.data.clone(), *piece_bytes);
            let m = tokio::task::spawn_blocking(move || Manifest::build(&data, piece))
                .await
                .map_err(|e| NetError::Failed(format!("hashing the pieces: {e}")))?
                .map_err(|e| NetError::Setup(e.to_string()))?;
            Some(Arc::new(m))
        }
        _ => None,
    };
    if let Some(file) = &job.source {
        if let Some(why) = file.changed() {
            return Err(NetError::Failed(why));
        }
        core.source = Some(SourceGuard {
            file: file.clone(),
            checked: vec![false; manifest.as_ref().map_or(0, |m| m.piece_count() as usize)],
            manifest: manifest.clone(),
        });
    }
    let mut spec = Job {
        session,
        root: me,
        transfer: TransferId((session as u32).max(1)),
        total_len: job.data.len() as u64,
        collective: match &job.collective {
            Collective::Broadcast {
                tree,
                segment_bytes,
            } => CollectiveSpec::Broadcast {
                tree: TreeSpec::of(tree),
                segment_bytes: *segment_bytes,
                max_frame_payload: job.max_frame_payload,
            },
            Collective::Scatter { schedule, parallel } => CollectiveSpec::Scatter {
                schedule: schedule.clone(),
                max_frame_payload: job.max_frame_payload,
                parallel: *parallel,
            },
            Collective::Multicast { protocol, spec, .. } => CollectiveSpec::Multicast {
                protocol: *protocol,
                params: MulticastParams::of(spec),
                manifest: ManifestSpec::of(manifest.as_deref().expect("built above")),
            },
        },
        idle_timeout_ms: t.idle.as_millis() as u64,
        probe_period_ms: job.probe_period.map_or(0, |p| p.as_millis().max(1) as u64),
        seed: job.seed,
        rejoin: None,
    };
    if let (Some(key), CollectiveSpec::Multicast { manifest: m, .. }) =
        (config.handshake.manifest_key(), &mut spec.collective)
    {
        m.mac = Some(crate::auth::manifest_mac(
            &key,
            spec.total_len,
            m.piece_len,
            &m.hashes,
        ));
    }
    // Check the job here first, so a bad tree is the user's error, not every node's.
    let machine = build_machine(
        me,
        &group,
        &spec,
        Some(job.data.clone()),
        None,
        None,
        config.app.verifier(),
    )
    .map_err(NetError::Setup)?
    .0;
    if let CollectiveSpec::Multicast { manifest: m, .. } = &spec.collective {
        // The job must fit in one control frame (about 64 bytes per piece).
        let len = m.hashes.len() + 4096;
        if len > crate::wire::CONTROL_MAX_BODY as usize {
            return Err(NetError::Setup(format!(
                "{} pieces of {} bytes make a manifest too large for one job frame: use larger pieces",
                m.hashes.len() / 64,
                m.piece_len
            )));
        }
    }
    let others: Vec<NodeId> = group
        .members()
        .iter()
        .map(|m| m.id)
        .filter(|&id| id != me)
        .collect();

    // 1. Connect to every node and hand out the job.
    for &p in &others {
        core.spawn_dial(p, Role::Root);
    }
    let mut unconnected: BTreeSet<NodeId> = others.iter().copied().collect();
    let mut unready: BTreeSet<NodeId> = others.iter().copied().collect();
    let mut deadline = Instant::now() + t.connect + t.handshake + t.setup;
    let job_frame = Control::Job(Box::new(spec.clone()));
    // Dial failures are collected for a short grace period, so that every node whose handshake
    // is under way learns the outcome (and the error lists every node that failed).
    let mut dial_failures: Vec<NetError> = Vec::new();
    while !unready.is_empty() {
        if !dial_failures.is_empty() && unconnected.is_empty() {
            break;
        }
        match core.poll(deadline).await {
            Happening::Conn(c) => {
                if c.role == Role::Root && unconnected.remove(&c.peer) {
                    let p = c.peer;
                    core.add_conn(c);
                    if dial_failures.is_empty() {
                        core.send_control(p, &job_frame);
                    }
                } else {
                    refuse(c, "unexpected connection to the root".into());
                }
            }
            Happening::DialFailed(p, e) => {
                unconnected.remove(&p);
                if dial_failures.is_empty() {
                    deadline = deadline.min(Instant::now() + t.handshake);
                }
                dial_failures.push(e);
            }
            Happening::Deadline if !dial_failures.is_empty() => break,
            Happening::Control(p, Control::Ready) => {
                let first = unready.remove(&p);
                if first {
                    core.emit(NetEvent::Ready { node: p });
                }
            }
            Happening::Control(p, Control::Abort(reason))
            | Happening::Control(p, Control::Reject(reason)) => {
                // Nodes name themselves in their reasons; the error names the node already.
                let own = format!("node {p}: ");
                let reason = reason.strip_prefix(&own).unwrap_or(&reason);
                let e = NetError::PeerMisbehaved {
                    peer: p,
                    what: format!("could not start: {reason}"),
                };
                return abort_run(&mut core, e).await;
            }
            Happening::Control(p, other) => {
                let e = NetError::PeerMisbehaved {
                    peer: p,
                    what: format!("sent an unexpected {} frame during setup", other.name()),
                };
                return abort_run(&mut core, e).await;
            }
            Happening::Lost(p, reason) => {
                let e =
                    NetError::Failed(format!("lost {} during setup: {reason}", group.describe(p)));
                return abort_run(&mut core, e).await;
            }
            Happening::Deadline => {
                let missing: Vec<String> = unready.iter().map(|p| p.to_string()).collect();
                let e = NetError::Timeout {
                    what: format!("nodes {} to get ready", missing.join(", ")),
                    waited: t.connect + t.handshake + t.setup,
                };
                return abort_run(&mut core, e).await;
            }
            _ => {}
        }
    }

    if !dial_failures.is_empty() {
        let e = if dial_failures.len() == 1 {
            dial_failures.remove(0)
        } else {
            NetError::Failed(
                dial_failures
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        };
        return abort_run(&mut core, e).await;
    }

    // 2. Go.
    let mut go_sent: BTreeMap<NodeId, Instant> = BTreeMap::new();
    for &p in &others {
        core.send_control(p, &Control::Go);
        go_sent.insert(p, Instant::now());
    }
    let probe = spec.probe_period_ms > 0;
    core.start(machine, prober(me, &others, &spec), probe, false);
    core.total_bytes = spec.total_len;
    core.emit(NetEvent::Started {
        total_len: spec.total_len,
    });
    let go = core.started.unwrap_or_else(Instant::now);

    // 3. Collect the reports. A node whose connection is lost is dialed again (every
    // `REDIAL_PAUSE`) until the run ends: if it restarted, it is taken back with a rejoin job.
    let mut reports: BTreeMap<NodeId, NodeReport> = BTreeMap::new();
    let mut lost: BTreeMap<NodeId, String> = BTreeMap::new();
    let mut redial_at: BTreeMap<NodeId, Instant> = BTreeMap::new();
    let mut redialing: BTreeSet<NodeId> = BTreeSet::new();
    let mut last_activity = Instant::now();
    loop {
        if let Some(e) = core.fatal.take() {
            return abort_run(&mut core, e).await;
        }
        // A node this root gave up (silent, misbehaving) will not report.
        for (&p, reason) in &core.fault_reasons {
            if !reports.contains_key(&p) {
                lost.entry(p).or_insert_with(|| reason.clone());
                if rejoinable(&spec) && !redialing.contains(&p) {
                    redial_at.entry(p).or_insert_with(Instant::now);
                }
            }
        }
        if core.ended.is_some() && reports.len() + lost.len() >= others.len() {
            break;
        }
        let now = Instant::now();
        let due: Vec<NodeId> = redial_at
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&p, _)| p)
            .collect();
        for p in due {
            redial_at.remove(&p);
            redialing.insert(p);
            core.spawn_dial(p, Role::Root);
        }
        match core.poll(last_activity + t.idle).await {
            Happening::DialFailed(p, _) if redialing.remove(&p) => {
                redial_at.insert(p, Instant::now() + REDIAL_PAUSE);
            }
            Happening::Conn(c) if c.role == Role::Root && redialing.remove(&c.peer) => {
                let p = c.peer;
                core.revive(c);
                let mut rejoin = spec.clone();
                rejoin.rejoin = Some(core.failed_peers.iter().copied().collect());
                core.send_control(p, &Control::Job(Box::new(rejoin)));
                lost.remove(&p);
                go_sent.insert(p, Instant::now());
                last_activity = Instant::now();
            }
            Happening::Control(p, Control::Progress(pr)) => {
                last_activity = Instant::now();
                core.emit(NetEvent::Progress {
                    node: p,
                    done_bytes: pr.done_bytes,
                    total_bytes: pr.total_bytes,
                });
            }
            Happening::Control(p, Control::Report(r)) => {
                last_activity = Instant::now();
                core.emit(NetEvent::Reported {
                    node: p,
                    status: r.status,
                });
                if r.node == p && !lost.contains_key(&p) {
                    reports.insert(p, *r);
                } else if r.node != p {
                    lost.insert(p, format!("sent a report for node {}", r.node));
                }
            }
            Happening::Control(p, Control::Abort(reason)) => {
                lost.entry(p).or_insert(reason);
            }
            Happening::Control(p, other) => {
                core.fault(
                    p,
                    format!("node {p} sent an unexpected {} frame", other.name()),
                );
            }
            Happening::Lost(p, reason) => {
                let reported = reports.contains_key(&p);
                if !reported {
                    lost.entry(p).or_insert(reason);
                }
            }
            Happening::Deadline => {
                for &p in &others {
                    if !reports.contains_key(&p) {
                        lost.entry(p)
                            .or_insert_with(|| format!("no progress or report for {:?}", t.idle));
                    }
                }
                if core.ended.is_none() {
                    core.ended = Some((Status::Aborted, Instant::now()));
                }
                break;
            }
            Happening::Conn(c) => refuse(c, "the run has started".into()),
            _ => {}
        }
    }
    let elapsed_s = go.elapsed().as_secs_f64();

    // 4. Bye.
    for p in core.live_peers() {
        core.send_control(p, &Control::Bye);
    }
    core.close_all().await;

    // A file truncated under its mapping cannot be hashed (SIGBUS), and one modified would give
    // a hash of neither version.
    if let Some(why) = core.source.as_ref().and_then(|g| g.file.changed()) {
        return Err(NetError::Failed(why));
    }

    // 5. The outcome (hashing the root's data only when some node hashed what it got).
    let anyone_hashed = reports
        .values()
        .any(|r| r.blake3.is_some() || r.share.is_some());
    let (expected, root_blake3): (Vec<(NodeId, Option<String>)>, String) = if anyone_hashed {
        let (spec, data, others) = (spec.clone(), job.data.clone(), others.clone());
        tokio::task::spawn_blocking(move || expected_hashes(&spec, &data, &others))
            .await
            .unwrap_or_default()
    } else {
        (others.iter().map(|&p| (p, None)).collect(), String::new())
    };
    let schedule = match &job.collective {
        Collective::Scatter { schedule, .. } => Some(schedule),
        _ => None,
    };
    let to_root_clock = |p: NodeId, ns: u64| -> f64 {
        let offset = go_sent
            .get(&p)
            .map_or(0.0, |s| s.saturating_duration_since(go).as_secs_f64());
        let half_rtt = core
            .links
            .get(&p)
            .and_then(|l| l.rtt)
            .map_or(0.0, |r| r.as_secs_f64() / 2.0);
        offset + half_rtt + ns as f64 * 1e-9
    };
    let mut nodes = Vec::new();
    for (p, want) in expected {
        let cluster = group.member(p).map_or(ClusterId(0), |m| m.cluster);
        let report = reports.get(&p).cloned();
        let (status, error) = match (&report, lost.get(&p)) {
            (Some(r), _) => (r.status, r.error.clone()),
            (None, Some(reason)) => (RunStatus::Failed, Some(reason.clone())),
            (None, None) => (RunStatus::Failed, Some("no report".into())),
        };
        // A multicast node completes when it holds all the data; it may serve peers after.
        let completion_s = report
            .as_ref()
            .and_then(|r| match spec.collective {
                CollectiveSpec::Multicast { .. } => r.complete_ns.or(r.finished_ns),
                _ => r.finished_ns,
            })
            .filter(|_| status == RunStatus::Finished)
            .map(|ns| to_root_clock(p, ns));
        let got = report.as_ref().and_then(|r| match &r.share {
            Some(s) => Some(s.blake3.clone()),
            None => r.blake3.clone(),
        });
        let bytes = report.as_ref().map_or(0, |r| r.bytes_received);
        nodes.push(NodeResult {
            node: p,
            cluster,
            status,
            error,
            bytes_received: bytes,
            completion_s,
            throughput_mb_s: completion_s
                .filter(|&c| c > 0.0)
                .map(|c| bytes as f64 / c / 1e6),
            verified: got.is_some() && got == want,
            blake3: got,
            expected_blake3: want,
            share: report.as_ref().and_then(|r| r.share.clone()),
            predicted_finish_s: schedule
                .and_then(|s| s.node(p))
                .map(|s| s.predicted_finish_s),
            measured_finish_s: core
                .share_finishes
                .get(&p)
                .map(|at| to_root_clock(p, at.as_nanos())),
            resumed_bytes: report.as_ref().and_then(|r| r.resumed_bytes),
            report,
        });
    }
    Ok(RunOutcome {
        session,
        collective: spec.collective.name(),
        protocol: match &job.collective {
            Collective::Multicast { protocol, .. } => Some(*protocol),
            _ => None,
        },
        root: me,
        total_len: spec.total_len,
        root_blake3,
        elapsed_s,
        nodes,
        root_share: core.share.clone(),
        root_measurements: core.recorder.snapshot(),
        root_frames_sent: core.frame_counts(),
    })
}

/// What each node's hash must be (the whole data's for a broadcast, its kept share's for a
/// scatter), and the whole data's hash.
fn expected_hashes(
    spec: &Job,
    data: &Bytes,
    others: &[NodeId],
) -> (Vec<(NodeId, Option<String>)>, String) {
    let whole = blake3::hash(data).to_hex().to_string();
    let expected = match &spec.collective {
        CollectiveSpec::Broadcast { .. } | CollectiveSpec::Multicast { .. } => {
            others.iter().map(|&p| (p, Some(whole.clone()))).collect()
        }
        CollectiveSpec::Scatter { schedule, .. } => {
            let plans =
                windrose_proto::scatter::plan(schedule, data.len() as u64).unwrap_or_default();
            others
                .iter()
                .map(|&p| {
                    let h = plans.iter().find(|pl| pl.node == p).map(|pl| {
                        blake3::hash(&data[pl.kept.start as usize..pl.kept.end as usize])
                            .to_hex()
                            .to_string()
                    });
                    (p, h)
                })
                .collect()
        }
        // Each node delivers its own tree edges, none of the root's data: nothing to hash.
        // Likewise a sort: each node delivers its own sorted range.
        CollectiveSpec::Mst(_) | CollectiveSpec::HeteroSort(_) | CollectiveSpec::SampleSort(_) => {
            others.iter().map(|&p| (p, None)).collect()
        }
    };
    (expected, whole)
}

/// Calls the run off: tells every connected node why, closes, returns the error.
async fn abort_run<T>(core: &mut Core, e: NetError) -> Result<T, NetError> {
    let reason = e.to_string();
    for p in core.live_peers() {
        core.send_control(p, &Control::Abort(reason.clone()));
    }
    // Connections established but not yet taken from the queue hear it too.
    while let Ok(ev) = core.rx.try_recv() {
        if let Event::Conn(c) = ev {
            refuse(c, reason.clone());
        }
    }
    core.close_all().await;
    Err(e)
}
