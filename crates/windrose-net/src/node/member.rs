//! Any other member of a one-shot run: waits for a job, sets up its neighbours, runs its part
//! and reports; a restarted member rejoins a running multicast with the pieces it kept.

use super::*;

/// Serves one run as a non-root member: waits for a root to connect and send a job, connects
/// to its tree neighbours, runs the collective, reports to the root and waits for its Bye.
///
/// Returns the node's report and its delivered data when its collective finished, an error
/// otherwise (the output file, if any, is then removed: nothing half-written is left under its
/// final name).
pub async fn run_node(listener: TcpListener, config: NodeConfig) -> Result<NodeOutcome, NetError> {
    let me = config.me;
    // An output that cannot be written is refused now, not after the whole transfer.
    if let OutputSpec::File(path) = &config.output {
        if let Some(why) = crate::sink::output_path_problem(path) {
            return Err(NetError::Setup(format!("node {me}: output {why}")));
        }
    }
    let group = config.group.clone();
    let mut core = Core::new(&config, true);
    let t = config.timeouts;
    core.spawn_accept(listener);

    // 1. Wait for the root and its job.
    let mut root: Option<NodeId> = None;
    let deadline = Instant::now() + t.join;
    let job = loop {
        match core.poll(deadline).await {
            Happening::Conn(c) => {
                if c.role == Role::Root {
                    match root {
                        None => {
                            root = Some(c.peer);
                            core.add_conn(c);
                        }
                        Some(r) => refuse(
                            c,
                            format!("node {me} is already in a run with root node {r}"),
                        ),
                    }
                } else {
                    core.add_conn(c);
                }
            }
            Happening::Control(p, Control::Job(job)) if Some(p) == root => break job,
            Happening::Control(p, Control::Abort(reason)) if Some(p) == root => {
                return fail(&mut core, NetError::Aborted(reason)).await
            }
            Happening::Control(p, Control::Reject(reason)) => {
                let reason = format!("node {p} rejected the handshake: {reason}");
                core.rejections.push(reason.clone());
                core.fault(p, reason);
                core.forget(p);
                if Some(p) == root {
                    root = None;
                }
            }
            // A root that leaves before sending a job may be a stranger (anyone who knows an
            // unkeyed group's file can say hello) or a root that gave up: keep waiting for a
            // job until the join deadline, and say so if none comes.
            Happening::Lost(p, reason) => {
                if Some(p) == root {
                    root = None;
                    core.rejections.push(format!(
                        "a root (node {p}) left before sending a job: {reason}"
                    ));
                }
                core.forget(p);
            }
            Happening::Deadline => {
                let mut what = "a job from a root".to_string();
                if !core.rejections.is_empty() {
                    what.push_str(&format!(
                        " (refused {} connection(s): {})",
                        core.rejections.len(),
                        core.rejections.join("; ")
                    ));
                }
                return fail(
                    &mut core,
                    NetError::Timeout {
                        what,
                        waited: t.join,
                    },
                )
                .await;
            }
            _ => {}
        }
    };
    let root = root.unwrap_or(job.root);
    core.emit(NetEvent::Job {
        collective: job.collective.name(),
        total_len: job.total_len,
    });

    // 2. Set up: the machine, the output, the neighbours; or, taken back mid-run, rejoin.
    let rejoining = job.rejoin.is_some();
    let mut resumed_bytes = None;
    let machine = if let Some(down) = job.rejoin.clone() {
        match setup_rejoin(&mut core, &job, root, &down).await {
            Ok((machine, resumed)) => {
                resumed_bytes = Some(resumed);
                machine
            }
            Err(e) => {
                core.send_control(root, &Control::Abort(format!("node {me}: {e}")));
                return fail(&mut core, e).await;
            }
        }
    } else {
        let setup = (|| {
            if job.root != root {
                return Err(format!(
                    "the job names node {} as root but came from node {root}",
                    job.root
                ));
            }
            check_manifest_mac(config.handshake.manifest_key(), &job)?;
            Ok(())
        })();
        if let Err(reason) = setup {
            let reason = format!("node {me}: bad job: {reason}");
            core.send_control(root, &Control::Abort(reason.clone()));
            return fail(&mut core, NetError::Setup(reason)).await;
        }
        // A scatter delivers nothing (its nodes compute their shares): no output file is made.
        let output = match (&job.collective, &config.output) {
            (CollectiveSpec::Scatter { .. }, OutputSpec::File(_)) => OutputSpec::Discard,
            (_, o) => o.clone(),
        };
        let nonce = job.session ^ u64::from(me.0);
        let pieces = match piece_file_for(&job, &output, nonce, None) {
            Ok(p) => p,
            Err(e) => {
                core.send_control(root, &Control::Abort(format!("node {me}: {e}")));
                return fail(&mut core, e).await;
            }
        };
        let keeper = pieces.as_ref().map(|(f, _)| f.keeper());
        let (machine, neighbours) = match build_machine(
            me,
            &group,
            &job,
            None,
            None,
            keeper,
            core.config.app.verifier(),
        ) {
            Ok(x) => x,
            Err(reason) => {
                let reason = format!("node {me}: bad job: {reason}");
                core.send_control(root, &Control::Abort(reason.clone()));
                return fail(&mut core, NetError::Setup(reason)).await;
            }
        };
        match Sink::resume(&output, nonce, config.verify, pieces.and_then(|(_, r)| r)) {
            Ok(s) => core.sink = Some(s),
            Err(e) => {
                core.send_control(root, &Control::Abort(format!("node {me}: {e}")));
                return fail(&mut core, e).await;
            }
        }
        core.total_bytes = match &job.collective {
            CollectiveSpec::Broadcast { .. } | CollectiveSpec::Multicast { .. } => job.total_len,
            CollectiveSpec::Scatter { .. }
            | CollectiveSpec::Mst(_)
            | CollectiveSpec::HeteroSort(_)
            | CollectiveSpec::SampleSort(_) => 0,
        };
        if matches!(job.collective, CollectiveSpec::Multicast { .. }) {
            // Every node both sends and receives: a reader paused for its own node's full writers
            // could wait on a peer paused for the same reason. The machines bound what they ask
            // for, and queued pieces are the very bytes their stores hold, so nothing is throttled.
            if let Some(flow) = &core.flow {
                flow.disable();
            }
        }
        let wanted: BTreeSet<NodeId> = neighbours.into_iter().filter(|&n| n != root).collect();
        for &n in wanted.iter().filter(|&&n| n > me) {
            core.spawn_dial(n, Role::Peer);
        }
        let deadline = Instant::now() + t.connect + t.handshake + t.setup;
        let mut ready_sent = false;
        loop {
            if !ready_sent && wanted.iter().all(|n| core.links.contains_key(n)) {
                core.send_control(root, &Control::Ready);
                ready_sent = true;
            }
            match core.poll(deadline).await {
                Happening::Conn(c) => {
                    if c.role == Role::Root {
                        refuse(
                            c,
                            format!("node {me} is already in a run with root node {root}"),
                        );
                    } else {
                        core.add_conn(c);
                    }
                }
                Happening::DialFailed(p, e) => {
                    core.send_control(
                        root,
                        &Control::Abort(format!("node {me} cannot reach node {p}: {e}")),
                    );
                    // As for a lost neighbour: the root usually hears of the cause too (it dials
                    // every node), and its abort names it.
                    let e = await_root_abort(&mut core, root, e).await;
                    return fail(&mut core, e).await;
                }
                Happening::Control(p, Control::Go) if p == root && ready_sent => break,
                Happening::Control(p, Control::Abort(reason)) if p == root => {
                    return fail(&mut core, NetError::Aborted(reason)).await
                }
                Happening::Control(p, Control::Reject(reason))
                | Happening::Control(p, Control::Abort(reason)) => {
                    let reason = format!("node {p} refused this node: {reason}");
                    core.send_control(root, &Control::Abort(format!("node {me}: {reason}")));
                    return fail(&mut core, NetError::Failed(reason)).await;
                }
                Happening::Lost(p, reason) => {
                    let e = NetError::Failed(format!("lost node {p} during setup: {reason}"));
                    if p == root {
                        return fail(&mut core, e).await;
                    }
                    // A neighbour that left has usually failed for a reason the root will hear
                    // about: wait briefly for the root's abort, which names the cause.
                    core.send_control(root, &Control::Abort(format!("node {me}: {e}")));
                    let e = await_root_abort(&mut core, root, e).await;
                    return fail(&mut core, e).await;
                }
                Happening::Deadline => {
                    let missing: Vec<String> = wanted
                        .iter()
                        .filter(|n| !core.links.contains_key(n))
                        .map(|n| n.to_string())
                        .collect();
                    let what = if missing.is_empty() {
                        "the root's go".to_string()
                    } else {
                        format!("neighbours {} to connect", missing.join(", "))
                    };
                    let e = NetError::Timeout {
                        what,
                        waited: t.connect + t.handshake + t.setup,
                    };
                    core.send_control(root, &Control::Abort(format!("node {me}: {e}")));
                    return fail(&mut core, e).await;
                }
                _ => {}
            }
        }

        machine
    };

    // 3. Run.
    let peers = core.live_peers();
    core.start(
        machine,
        prober(me, &peers, &job),
        job.probe_period_ms > 0,
        rejoining,
    );
    let mut last_activity = Instant::now();
    let mut last_bytes = 0u64;
    let mut root_failure: Option<NetError> = None;
    while core.ended.is_none() {
        if let Some(e) = core.fatal.take() {
            core.end_reason = Some(e.to_string());
            core.ended = Some((Status::Aborted, Instant::now()));
            break;
        }
        // The root given up (silent for too long: e.g. this process was stopped and resumed
        // long after the root failed it and closed): nobody will collect a report.
        if let Some(reason) = core.fault_reasons.get(&root) {
            root_failure = Some(NetError::Failed(format!(
                "lost the root (node {root}): {reason}"
            )));
            break;
        }
        match core.poll(last_activity + t.idle).await {
            Happening::Tick => {
                let read: u64 = core
                    .links
                    .values()
                    .map(|l| l.stats.read_bytes.load(Ordering::Relaxed))
                    .sum();
                if read != last_bytes {
                    last_bytes = read;
                    last_activity = Instant::now();
                }
                let pr = Progress {
                    done_bytes: core.done_bytes,
                    total_bytes: core.total_bytes,
                };
                core.send_control(root, &Control::Progress(pr));
                core.emit(NetEvent::Progress {
                    node: me,
                    done_bytes: pr.done_bytes,
                    total_bytes: pr.total_bytes,
                });
            }
            Happening::Control(p, Control::Abort(reason)) if p == root => {
                root_failure = Some(NetError::Aborted(reason));
                break;
            }
            Happening::Control(p, Control::Bye) if p == root => {
                root_failure = Some(NetError::Aborted(
                    "the root ended the run before this node finished".into(),
                ));
                break;
            }
            Happening::Control(p, other) => {
                core.fault(
                    p,
                    format!("node {p} sent an unexpected {} frame", other.name()),
                );
            }
            Happening::Lost(p, reason) if p == root => {
                root_failure = Some(NetError::Failed(format!(
                    "lost the root (node {p}): {reason}"
                )));
                break;
            }
            Happening::Deadline => {
                core.end_reason = Some(format!(
                    "nothing arrived for {:?} (the collective stalled)",
                    t.idle
                ));
                core.ended = Some((Status::Aborted, Instant::now()));
            }
            // A running peer never dials twice: this is a node that restarted and rejoins.
            Happening::Conn(c) if c.role == Role::Peer && rejoinable(&job) => core.revive(c),
            Happening::Conn(c) => refuse(c, "the run has started".into()),
            _ => {}
        }
    }
    if let Some(e) = root_failure {
        if let Some(sink) = core.sink.as_mut() {
            if let Some(rx) = sink.finish(false).await {
                let _ = rx.await;
            }
        }
        return fail(&mut core, e).await;
    }

    // 4. Finish the output, flush, report.
    let (status, ended_at) = core.ended.unwrap_or((Status::Aborted, Instant::now()));
    let commit = status == Status::Finished;
    if let Some(rx) = match core.sink.as_mut() {
        Some(s) => s.finish(commit).await,
        None => None,
    } {
        let tx = core.tx.clone();
        tokio::spawn(async move {
            let r = rx
                .await
                .unwrap_or_else(|_| Err(NetError::Failed("the output thread stopped".into())));
            let _ = tx.send(Event::SinkDone(r)).await;
        });
    }
    core.flush_all();
    let mut summary = None;
    let deadline = Instant::now() + t.idle;
    let mut waited_out = false;
    while summary.is_none() || !core.all_flushed() {
        match core.poll(deadline).await {
            Happening::SinkDone(r) => summary = Some(r),
            Happening::Deadline => {
                waited_out = true;
                break;
            }
            Happening::Conn(c) => refuse(c, "the run has ended".into()),
            _ => {}
        }
    }
    let mut error = core.end_reason.clone();
    let (bytes_received, blake3, delivered) = match summary {
        Some(Ok(s)) => (s.bytes, s.blake3, s.delivered),
        Some(Err(e)) => {
            error.get_or_insert(e.to_string());
            (0, None, Delivered::Nothing)
        }
        None => {
            error.get_or_insert("the output was not finished in time".into());
            (0, None, Delivered::Nothing)
        }
    };
    if waited_out {
        error.get_or_insert(format!("sends not flushed within {:?}", t.idle));
    }
    let finished = status == Status::Finished && error.is_none();
    let is_scatter = matches!(job.collective, CollectiveSpec::Scatter { .. });
    let report = NodeReport {
        node: me,
        status: if finished {
            RunStatus::Finished
        } else {
            RunStatus::Failed
        },
        error: error.clone(),
        bytes_received: if is_scatter {
            core.share.as_ref().map_or(0, |s| s.len)
        } else {
            bytes_received
        },
        blake3: if is_scatter { None } else { blake3 },
        finished_ns: core
            .started
            .map(|s| ended_at.saturating_duration_since(s).as_nanos() as u64),
        complete_ns: core
            .started
            .zip(core.complete_at)
            .map(|(s, at)| at.min(ended_at).saturating_duration_since(s).as_nanos() as u64),
        share: core.share.clone(),
        measurements: core.recorder.snapshot(),
        frames_sent: core.frame_counts(),
        resumed_bytes,
    };
    core.send_control(root, &Control::Report(Box::new(report.clone())));

    // 5. Wait for the root's Bye, then close; not at all when the root is gone (its
    // connection failed or fell silent): no Bye can come, and the port would stay taken.
    let deadline = Instant::now() + t.finish;
    while !core.failed_peers.contains(&root) {
        match core.poll(deadline).await {
            Happening::Control(p, Control::Bye) | Happening::Control(p, Control::Abort(_))
                if p == root =>
            {
                break
            }
            Happening::Lost(p, _) if p == root => break,
            Happening::Deadline => break,
            Happening::Conn(c) => refuse(c, "the run has ended".into()),
            _ => {}
        }
    }
    core.close_all().await;
    if finished {
        Ok(NodeOutcome { report, delivered })
    } else {
        Err(NetError::Failed(format!(
            "node {me}: {}",
            error.unwrap_or_else(|| "the collective did not finish".into())
        )))
    }
}

/// Whether a restarted node can be taken back into a run of `job` (not a scatter: its schedule
/// fixed every share at the start).
pub(super) fn rejoinable(job: &Job) -> bool {
    !matches!(job.collective, CollectiveSpec::Scatter { .. })
}

/// True when `bytes` are at most a quarter of this machine's available memory (MemAvailable of
/// /proc/meminfo; false where that cannot be read).
pub(crate) fn fits_in_memory(bytes: u64) -> bool {
    let available_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    });
    available_kib.is_some_and(|kib| bytes.saturating_mul(4) <= kib.saturating_mul(1024))
}

/// A node's piece file, and the partial output the sink takes over (with a file output).
type KeptPieces = (Arc<PieceFile>, Option<Resume>);

/// Where a multicast node (not the root) keeps its pieces: a mapped file of the data's length
/// (`piece_file`). With a file output it is the output's partial file, which the sink then
/// takes over as written (it only hashes what is delivered, and renames the file into place at
/// the end); `earlier` (a restarted node's earlier partial file) is renamed to this process's
/// partial name first, keeping what it holds. Without an output file the pieces stay in memory
/// if they take at most a quarter of the available memory, else an unlinked temporary file
/// holds them; a memory output, an empty transfer and the other collectives keep none.
fn piece_file_for(
    job: &Job,
    output: &OutputSpec,
    nonce: u64,
    earlier: Option<&std::path::PathBuf>,
) -> Result<Option<KeptPieces>, NetError> {
    if !matches!(job.collective, CollectiveSpec::Multicast { .. }) || job.total_len == 0 {
        return Ok(None);
    }
    match output {
        OutputSpec::Memory => Ok(None),
        // Held in memory while that is cheap: a temporary file costs disk writes (1 GiB to 3
        // receivers on loopback: 6.3 s instead of 4.4 s).
        OutputSpec::Discard if fits_in_memory(job.total_len) => Ok(None),
        OutputSpec::Discard => Ok(Some((Arc::new(PieceFile::anonymous(job.total_len)?), None))),
        OutputSpec::File(path) => {
            let tmp = crate::sink::partial_path(path, nonce);
            if let Some(e) = earlier {
                std::fs::rename(e, &tmp).map_err(|source| NetError::Output {
                    path: tmp.display().to_string(),
                    source,
                })?;
            }
            let file = PieceFile::open(&tmp, job.total_len)?;
            let resume = Resume {
                file: tmp,
                keep: job.total_len,
            };
            Ok(Some((Arc::new(file), Some(resume))))
        }
    }
}

/// Sets up a node the root took back mid-run (`job.rejoin`, after it restarted): the machine
/// built to rejoin (a multicast node keeps the verified pieces its earlier life wrote), the
/// output resumed from the earlier life's partial file, and connections to the live
/// neighbours, which it dials all (they are running and dial no one); `down` and those it
/// cannot reach count as failed. No Ready, no Go: the caller starts the machine at once.
/// Returns the machine and the bytes resumed from disk.
async fn setup_rejoin(
    core: &mut Core,
    job: &Job,
    root: NodeId,
    down: &[NodeId],
) -> Result<(Box<dyn Protocol + Send>, u64), NetError> {
    let (me, t) = (core.me, core.timeouts());
    let setup_err = |reason: String| NetError::Setup(format!("node {me}: cannot rejoin: {reason}"));
    if job.root != root {
        return Err(setup_err(format!(
            "the job names node {} as root but came from node {root}",
            job.root
        )));
    }
    check_manifest_mac(core.config.handshake.manifest_key(), job).map_err(setup_err)?;
    let nonce = job.session ^ u64::from(me.0);
    let output = core.config.output.clone();
    let mut held = Vec::new();
    let mut pieces = None;
    match (&job.collective, &output) {
        (CollectiveSpec::Multicast { manifest, .. }, OutputSpec::File(path)) => {
            // The earlier life's partial file holds every piece it had at its offset.
            // The rejoining machine verifies them (once) and keeps those that pass in place.
            let manifest = manifest.to_manifest(job.total_len).map_err(setup_err)?;
            let earlier = crate::sink::partials_of(path, nonce);
            for other in earlier.iter().skip(1) {
                let _ = std::fs::remove_file(other);
            }
            pieces = piece_file_for(job, &output, nonce, earlier.first())?;
            if let Some((f, _)) = &pieces {
                held = f.read_back(&manifest);
            }
        }
        (_, OutputSpec::File(path)) => {
            // A broadcast has no piece hashes to check a kept prefix against: start over.
            for old in crate::sink::partials_of(path, nonce) {
                let _ = std::fs::remove_file(old);
            }
        }
        _ => pieces = piece_file_for(job, &output, nonce, None)?,
    }
    let keeper = pieces.as_ref().map(|(f, _)| f.keeper());
    // Off the runtime's threads: the machine hashes every piece read back (up to the whole
    // data).
    let (group, owned_job) = (core.group.clone(), job.clone());
    let verifier = core.config.app.verifier();
    let (machine, neighbours) = tokio::task::spawn_blocking(move || {
        build_machine(me, &group, &owned_job, None, Some(held), keeper, verifier)
    })
    .await
    .map_err(|e| setup_err(format!("verifying the kept pieces: {e}")))?
    .map_err(setup_err)?;
    let resumed = pieces.as_ref().map_or(0, |(f, _)| f.resumed_bytes());
    let resume = pieces.and_then(|(_, r)| r);
    core.sink = Some(Sink::resume(&output, nonce, core.config.verify, resume)?);
    core.total_bytes = job.total_len;
    if matches!(job.collective, CollectiveSpec::Multicast { .. }) {
        if let Some(flow) = &core.flow {
            flow.disable();
        }
    }
    for &d in down.iter().filter(|&&d| d != me && d != root) {
        core.fault(d, format!("node {d} had failed when node {me} rejoined"));
    }
    let mut dialing: BTreeSet<NodeId> = neighbours
        .into_iter()
        .filter(|&n| n != root && n != me && !core.failed_peers.contains(&n))
        .collect();
    let deadline = Instant::now() + t.handshake;
    for &n in &dialing {
        core.spawn_dial_until(n, Role::Peer, deadline);
    }
    while !dialing.is_empty() {
        match core.poll(deadline + t.handshake).await {
            Happening::Conn(c) if c.role == Role::Peer => {
                dialing.remove(&c.peer);
                core.add_conn(c);
            }
            Happening::Conn(c) => refuse(
                c,
                format!("node {me} is already in a run with root node {root}"),
            ),
            Happening::DialFailed(p, e) => {
                dialing.remove(&p);
                core.fault(
                    p,
                    format!("node {me} could not reach node {p} to rejoin: {e}"),
                );
            }
            Happening::Control(p, Control::Abort(reason)) if p == root => {
                return Err(NetError::Aborted(reason))
            }
            Happening::Lost(p, reason) if p == root => {
                return Err(NetError::Failed(format!(
                    "lost the root (node {p}): {reason}"
                )))
            }
            Happening::Lost(p, _) => {
                dialing.remove(&p);
            }
            Happening::Deadline => {
                for p in std::mem::take(&mut dialing) {
                    core.fault(
                        p,
                        format!("node {me} could not reach node {p} to rejoin in time"),
                    );
                }
            }
            _ => {}
        }
    }
    core.emit(NetEvent::Rejoined { peer: me });
    Ok((machine, resumed))
}

/// Waits (up to the close timeout) for the root's abort and returns it, or `fallback`.
async fn await_root_abort(core: &mut Core, root: NodeId, fallback: NetError) -> NetError {
    let deadline = Instant::now() + core.timeouts().close;
    loop {
        match core.poll(deadline).await {
            Happening::Control(p, Control::Abort(reason)) if p == root => {
                return NetError::Aborted(reason)
            }
            Happening::Lost(p, _) if p == root => return fallback,
            Happening::Deadline => return fallback,
            Happening::Conn(c) => refuse(c, "the run is being called off".into()),
            _ => {}
        }
    }
}

/// Ends a node's run early with `e` (removing any partial output).
async fn fail<T>(core: &mut Core, e: NetError) -> Result<T, NetError> {
    if let Some(sink) = core.sink.as_mut() {
        if let Some(rx) = sink.finish(false).await {
            let _ = rx.await;
        }
    }
    core.close_all().await;
    Err(e)
}
