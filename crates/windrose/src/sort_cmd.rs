//! `windrose sort`: sorts a data set of the sort benchmark's records spread over a group's
//! members (issue 19 point 4). Every member starts with its input file and ends with a sorted,
//! contiguous key range in its output file: member `i` (in id order) holds the `i`-th range.
//!
//! # How it runs
//! The sort is a collective ([`CollectiveSpec::HeteroSort`] or [`CollectiveSpec::SampleSort`]):
//! each member's [`SortApp`] hands the Host its input file as the machine's local input and
//! writes the range the machine delivers to a temporary name beside its output file,
//! `.NAME.windrose-sort-TRANSFER`. Nothing is under a final name until the whole set is
//! verified: when the initiator reports every member finished, `windrose sort` reads every
//! member's temporary output in rank order and checks that the records are in order across
//! all of them and that their count and order-independent checksum equal the inputs'; only
//! then does it rename every temporary file to its final name. On any failure (a member
//! refused, a record lost, a write failed) it removes them all. A member lost mid-sort (killed)
//! is not a failure by itself: HeteroSort restores its records on the survivors from their
//! backup copies, so the check runs over the survivors' ranges, which must hold the whole
//! input; the lost member gets no output file and the report lists it under `lost`.
//!
//! - `--local --nodes N` hosts N members in this process on loopback (127.0.0.2, ...), which
//!   is the one-machine path: `gensort` -> `sort --local` -> `valsort`.
//! - `--group FILE --id K` asks running member K (`windrose group serve --sort-input ...
//!   --sort-output ...`) to start the sort and waits for it; the members write their ranges,
//!   and this command verifies and renames them, so every member's files must be readable
//!   here with the same templates (one machine, or a shared file system).
//!
//! Inputs are checked before anything starts: a file that is not whole 100-byte records (a
//! truncated record file), an empty node share (HeteroSort needs at least one record per
//! member; the sample sort is refused the same, so the protocols compare on the same sets),
//! and an output directory this process cannot write are errors that name the file.

use crate::error::{bad_input, OrBadInput};
use crate::records_cmd::{bytes_bar, read_records};
use crate::sort_app::{sort_temp_path, Failed, FinishTimes, PhaseTimes, SortApp};
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use clap::Args;
use indicatif::ProgressBar;
use serde::Serialize;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::records::{RecordSummary, RECORD_LEN};
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::sink::output_path_problem;
use windrose_proto::collective::{CollectiveSpec, SortProtocol};
use windrose_proto::heterosort::{HsortSpec, Slicing};
use windrose_proto::host::AppRequest;
use windrose_proto::sort_zip::Compress;
use windrose_proto::{Report, TransferId};

/// The collective of `protocol` for `n` members of relative speeds `speeds` (empty: equal):
/// the squarest torus, HeteroSort's `slicing` and its default backups.
pub fn sort_spec(
    protocol: SortProtocol,
    n: usize,
    slicing: Slicing,
    speeds: &[f64],
) -> CollectiveSpec {
    protocol.spec(
        RECORD_LEN as u32,
        HsortSpec::squarest_torus(n),
        slicing,
        speeds,
        HsortSpec::DEFAULT_BACKUPS,
    )
}

fn parse_sort(s: &str) -> Result<SortProtocol, String> {
    s.parse()
        .map_err(|e: windrose_trees::names::UnknownName| e.to_string())
}

fn parse_slicing(s: &str) -> Result<Slicing, String> {
    Slicing::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Slicing::ALL.iter().map(|x| x.name()).collect();
        format!("{s:?}: expected one of {}", names.join(", "))
    })
}

fn parse_compress(s: &str) -> Result<Compress, String> {
    Compress::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Compress::ALL.iter().map(|x| x.name()).collect();
        format!("{s:?}: expected one of {}", names.join(", "))
    })
}

/// `windrose sort`.
#[derive(Debug, Args)]
#[command(after_long_help = SORT_HELP)]
pub struct SortArgs {
    /// Each member's input file: a template where `{id}` is the member's id, or one path per
    /// member in id order (repeat --input).
    #[arg(long, required = true, value_name = "PATH")]
    input: Vec<String>,
    /// Each member's output file, as --input. Written under a temporary name beside it and
    /// renamed when the whole set is verified.
    #[arg(long, required = true, value_name = "PATH")]
    output: Vec<String>,
    /// The sort.
    #[arg(long, default_value = "heterosort", value_parser = parse_sort)]
    protocol: SortProtocol,
    /// HeteroSort's slices: `speeds` (in proportion to the members' speeds, the default),
    /// `equal` (the paper's HeteroSort: equal slices and loads) or `splitters` (one exchange
    /// by splitters weighted by the members' speeds, then a two-hop check through the last
    /// member; every HeteroSort then ends in two phases, ready and commit). The speeds are
    /// --speeds, or without it the compute speeds the members measured (a group's members
    /// time a sort of 16 MiB of records when they start, and every sort's computes after
    /// that); equal when nothing was measured (`--local`'s first sort).
    #[arg(long, value_name = "speeds|equal|splitters", value_parser = parse_slicing)]
    slicing: Option<Slicing>,
    /// Relative member speeds for --protocol heterosort --slicing speeds or splitters, in id
    /// order (e.g. 1,2,4,1): overrides the measured speeds.
    #[arg(long, value_delimiter = ',')]
    speeds: Vec<f64>,
    /// How the exchanged records travel between clusters, for both sorts: `lz4` (one LZ4
    /// block per frame, compressed and decompressed off the members' event loops; records
    /// inside a cluster stay raw) or `none`. LZ4 is the default: the sort benchmark's records
    /// shrink to 23-29 % at about 450 MB/s per core, so the WAN stops being the floor.
    #[arg(long, value_name = "lz4|none", default_value = "lz4", value_parser = parse_compress)]
    compress: Compress,
    /// Host the members in this process on loopback (with --nodes).
    #[arg(long, requires = "nodes", conflicts_with_all = ["group", "control"])]
    local: bool,
    /// Members for --local.
    #[arg(long)]
    nodes: Option<usize>,
    /// The group file of running members (`windrose group serve --sort-input --sort-output`).
    #[arg(long, value_name = "FILE", requires = "id")]
    group: Option<PathBuf>,
    /// The member to start the sort from.
    #[arg(long)]
    id: Option<u32>,
    /// That member's control socket (default: derived from --group and --id).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

const SORT_HELP: &str = "\
One machine, four members, 100 MB (each member's share a part of one seeded set):
  for i in 0 1 2 3; do windrose gensort --records 250000 --start $((i * 250000)) data/in-$i; done
  windrose sort --local --nodes 4 --input 'data/in-{id}' --output 'data/out-{id}'
  windrose valsort data/out-0 data/out-1 data/out-2 data/out-3 --against data/in-*

A running group: every member serves with its files,
  windrose group serve --group g.toml --id I --sort-input 'data/in-{id}' --sort-output 'data/out-{id}'
and any one starts the sort:
  windrose sort --group g.toml --id 0 --input 'data/in-{id}' --output 'data/out-{id}'";

/// Member `id`'s path from `--input`/`--output`: one template, or the id-th of a list.
fn member_path(paths: &[String], what: &str, id: usize, n: usize) -> Result<PathBuf> {
    match paths {
        [one] if one.contains("{id}") => Ok(PathBuf::from(one.replace("{id}", &id.to_string()))),
        [one] if n == 1 => Ok(PathBuf::from(one)),
        list if list.len() == n => Ok(PathBuf::from(&list[id])),
        list => Err(bad_input(format!(
            "--{what}: {} paths for {n} members: give one path per member or one template \
             with {{id}}",
            list.len()
        ))),
    }
}

/// One member's part of the result.
#[derive(Debug, Serialize)]
struct MemberResult {
    id: u32,
    input: PathBuf,
    output: PathBuf,
    input_records: u64,
    output_records: u64,
    /// Its machine's start to its end, seconds (None: it was lost mid-sort, holds no range
    /// and gets no output file).
    finish_s: Option<f64>,
    /// When it passed each named step of the sort, seconds from its start on its clock
    /// (HeteroSort's: samples_sent, splitters, exchange_start, copies_placed, exchange_end,
    /// merged, check_sent, ready, commit), oldest first; where its time went.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    phases: Vec<(String, f64)>,
}

/// What `windrose sort` prints.
#[derive(Debug, Serialize)]
struct SortReport {
    protocol: SortProtocol,
    /// HeteroSort's `--slicing` (None: the sample sort).
    slicing: Option<&'static str>,
    /// `--compress`.
    compress: &'static str,
    members: usize,
    records: u64,
    bytes: u64,
    checksum: String,
    /// From the start request to every member's part ended, seconds.
    sort_seconds: f64,
    /// The latest and the mean of the members' finish times, seconds (their ratio is the
    /// load imbalance at the end).
    max_finish_s: Option<f64>,
    mean_finish_s: Option<f64>,
    /// Members lost during the sort (their records are in the survivors' ranges).
    lost: Vec<u32>,
    verified: bool,
    per_member: Vec<MemberResult>,
}

/// Runs `windrose sort`.
pub fn sort(a: SortArgs) -> Result<()> {
    let n = match (a.local, a.nodes, &a.group, &a.control) {
        (true, Some(n), _, _) => n,
        (false, _, Some(g), _) => windrose_net::group::load_group(g).or_bad_input()?.len(),
        (false, _, None, Some(_)) => {
            return Err(bad_input(
                "--control needs --group FILE as well (for the number of members)",
            ))
        }
        _ => {
            return Err(bad_input(
                "say where: --local --nodes N (members in this process) or --group FILE --id K",
            ))
        }
    };
    if n == 0 || n > 250 {
        return Err(bad_input(format!("--nodes {n}: 1 to 250 members")));
    }
    if a.slicing.is_some() && a.protocol != SortProtocol::Heterosort {
        return Err(bad_input(
            "--slicing is for --protocol heterosort (the sample sort's splitters are equal-weight)",
        ));
    }
    let slicing = a.slicing.unwrap_or(Slicing::Speed);
    if !a.speeds.is_empty() {
        if a.protocol != SortProtocol::Heterosort || slicing == Slicing::Equal {
            return Err(bad_input(
                "--speeds is for --protocol heterosort --slicing speeds or splitters",
            ));
        }
        if a.speeds.len() != n {
            return Err(bad_input(format!(
                "--speeds: {} speeds for {n} members",
                a.speeds.len()
            )));
        }
    }
    let inputs: Vec<PathBuf> = (0..n)
        .map(|i| member_path(&a.input, "input", i, n))
        .collect::<Result<_>>()?;
    let outputs: Vec<PathBuf> = (0..n)
        .map(|i| member_path(&a.output, "output", i, n))
        .collect::<Result<_>>()?;
    check_outputs(&inputs, &outputs)?;
    let show = !a.json && std::io::stderr().is_terminal();
    let (want, per_input) = summarize_inputs(&inputs, show)?;
    let spec = sort_spec(a.protocol, n, slicing, &a.speeds).with_compress(a.compress);
    let started = Instant::now();
    let bar = spinner(show, "sorting");
    let ran = if a.local {
        run_local(&inputs, &outputs, spec, &bar)
    } else {
        let group = a.group.as_deref().expect("checked above");
        crate::group_cmd::start_sort(group, a.id, a.control.as_deref(), spec)
    };
    bar.finish_and_clear();
    let (t, finish, phases) = match ran {
        Ok(t) => t,
        Err(f) => {
            // Members may have written part of a range before the run failed.
            if let Some(t) = f.transfer {
                remove_temps(&outputs, t);
            }
            return Err(f.error);
        }
    };
    let sort_seconds = started.elapsed().as_secs_f64();
    let (alive, lost): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| finish[i].is_some());
    let lost: Vec<u32> = lost.into_iter().map(|i| i as u32).collect();
    let survivors: Vec<PathBuf> = alive.iter().map(|&i| outputs[i].clone()).collect();
    if !lost.is_empty() && !a.json {
        eprintln!(
            "members {} were lost during the sort: checking that the {} survivors hold every record",
            lost.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            survivors.len()
        );
    }
    let survived = match verify(&survivors, t, &want, show) {
        Ok(v) => v,
        Err(e) => {
            remove_temps(&outputs, t);
            return Err(if lost.is_empty() {
                e
            } else {
                e.context(format!(
                    "{} of {n} members finished the sort (lost: {lost:?})",
                    survivors.len()
                ))
            });
        }
    };
    // A lost member may have written part of a range before it died.
    remove_temps(
        &lost
            .iter()
            .map(|&i| outputs[i as usize].clone())
            .collect::<Vec<_>>(),
        t,
    );
    let mut per_output = vec![0; n];
    for (&i, c) in alive.iter().zip(survived) {
        per_output[i] = c;
    }
    for o in &survivors {
        std::fs::rename(sort_temp_path(o, t), o)
            .with_context(|| format!("renaming the verified range into {}", o.display()))?;
    }
    let report = SortReport {
        protocol: a.protocol,
        slicing: (a.protocol == SortProtocol::Heterosort).then(|| slicing.name()),
        compress: a.compress.name(),
        members: n,
        records: want.records,
        bytes: want.records * RECORD_LEN as u64,
        checksum: want.checksum.to_string(),
        sort_seconds,
        max_finish_s: finish.iter().flatten().copied().reduce(f64::max),
        mean_finish_s: (!survivors.is_empty())
            .then(|| finish.iter().flatten().sum::<f64>() / survivors.len() as f64),
        lost,
        verified: true,
        per_member: (0..n)
            .map(|i| MemberResult {
                id: i as u32,
                input: inputs[i].clone(),
                output: outputs[i].clone(),
                input_records: per_input[i],
                output_records: per_output[i],
                finish_s: finish.get(i).copied().flatten(),
                phases: phases.get(i).cloned().unwrap_or_default(),
            })
            .collect(),
    };
    if a.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        outln!(
            "sorted {} records ({} bytes) over {n} members with {} in {:.3} s; checksum {}",
            report.records,
            report.bytes,
            a.protocol.name().to_string()
                + &report
                    .slicing
                    .map(|s| format!(" (slicing {s})"))
                    .unwrap_or_default(),
            sort_seconds,
            report.checksum
        );
        if let (Some(max), Some(mean)) = (report.max_finish_s, report.mean_finish_s) {
            outln!("members finished in {max:.3} s at the latest, {mean:.3} s on average");
        }
        for m in &report.per_member {
            match m.finish_s {
                Some(s) => outln!(
                    "member {:>3}: {:>10} records in -> {:>10} records in {} (done at {s:.3} s)",
                    m.id,
                    m.input_records,
                    m.output_records,
                    m.output.display(),
                ),
                None => outln!(
                    "member {:>3}: {:>10} records in -> lost during the sort (no output; its \
                     records are in the others' ranges)",
                    m.id,
                    m.input_records,
                ),
            }
        }
    }
    Ok(())
}

fn spinner(show: bool, what: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Outputs must be new names or regular files, distinct, none an input, in directories this
/// process can write (tried with a temporary file).
fn check_outputs(inputs: &[PathBuf], outputs: &[PathBuf]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for o in outputs {
        if let Some(p) = output_path_problem(o) {
            return Err(bad_input(format!("--output: {p}")));
        }
        if !seen.insert(o) {
            return Err(bad_input(format!(
                "--output {}: named for two members",
                o.display()
            )));
        }
        if inputs.iter().any(|i| i == o) {
            return Err(bad_input(format!(
                "--output {}: is also an input (the input is read while the output is written)",
                o.display()
            )));
        }
        let dir = match o.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        tempfile::Builder::new()
            .prefix(".windrose-sort-probe")
            .tempfile_in(dir)
            .map_err(|e| {
                bad_input(format!(
                    "--output {}: cannot write in {}: {e}",
                    o.display(),
                    dir.display()
                ))
            })?;
    }
    Ok(())
}

/// The inputs' combined summary and each one's record count; an empty share or a file that
/// is not whole records is an error naming it.
fn summarize_inputs(inputs: &[PathBuf], show: bool) -> Result<(RecordSummary, Vec<u64>)> {
    let total = inputs
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let bar = bytes_bar(total, show, "reading inputs");
    let mut all = RecordSummary::new();
    let mut counts = Vec::with_capacity(inputs.len());
    for (i, f) in inputs.iter().enumerate() {
        let n = read_records(f, &bar, |chunk| all.push_all(chunk))
            .with_context(|| format!("member {i}'s input"))?;
        if n == 0 {
            return Err(bad_input(format!(
                "{}: member {i}'s input is empty: every member needs at least one record",
                f.display()
            )));
        }
        counts.push(n);
    }
    bar.finish_and_clear();
    Ok((all, counts))
}

/// Reads every member's temporary output in rank order and checks the whole set against the
/// inputs' summary; returns each member's record count.
fn verify(
    outputs: &[PathBuf],
    t: TransferId,
    want: &RecordSummary,
    show: bool,
) -> Result<Vec<u64>> {
    let temps: Vec<PathBuf> = outputs.iter().map(|o| sort_temp_path(o, t)).collect();
    let total = temps
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let bar = bytes_bar(total, show, "verifying");
    let mut got = RecordSummary::new();
    let mut counts = Vec::with_capacity(temps.len());
    for (i, f) in temps.iter().enumerate() {
        if !f.exists() {
            // A member that received no range (possible in a sample sort) wrote nothing.
            std::fs::File::create(f)
                .with_context(|| format!("member {i}: creating {}", f.display()))?;
        }
        let mut part = RecordSummary::new();
        let n = read_records(f, &bar, |chunk| part.push_all(chunk))
            .with_context(|| format!("member {i}'s output"))?;
        got = got.then(&part);
        counts.push(n);
    }
    bar.finish_and_clear();
    if got.records != want.records || got.checksum != want.checksum {
        return Err(anyhow!(
            "verification failed: the outputs hold {} records (checksum {}), the inputs {} \
             (checksum {}); nothing was renamed",
            got.records,
            got.checksum,
            want.records,
            want.checksum
        ));
    }
    if !got.is_sorted() {
        return Err(anyhow!(
            "verification failed: {} records out of order across the members' outputs; nothing \
             was renamed",
            got.unordered
        ));
    }
    Ok(counts)
}

fn remove_temps(outputs: &[PathBuf], t: TransferId) {
    for o in outputs {
        let _ = std::fs::remove_file(sort_temp_path(o, t));
    }
}

/// Longest wait for the members to connect.
const CONNECT_LIMIT: Duration = Duration::from_secs(30);

/// Hosts one member per input in this process on loopback, runs the sort from member 0, and
/// returns its transfer once every member finished.
fn run_local(
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    spec: CollectiveSpec,
    bar: &ProgressBar,
) -> Result<(TransferId, FinishTimes, PhaseTimes), Failed> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let n = inputs.len();
        let mut listeners = Vec::with_capacity(n);
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let addr = format!("127.0.0.{}:0", i + 2);
            let l = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            members.push(Member {
                id: NodeId::from(i),
                addr: l.local_addr().context("a listener's address")?.to_string(),
                cluster: ClusterId(0),
            });
            listeners.push(l);
        }
        let group = Arc::new(Group::new("sort-local", members).map_err(anyhow::Error::new)?);
        let mut handles = Vec::with_capacity(n);
        let mut tasks = Vec::with_capacity(n);
        for (i, l) in listeners.into_iter().enumerate() {
            let mut c = GroupConfig::new(Membership {
                group: group.clone(),
                me: NodeId::from(i),
            });
            c.app = Arc::new(SortApp::new(inputs[i].clone(), outputs[i].clone()));
            c.probe_period = None;
            let (handle, ports) = group_channel();
            tasks.push(tokio::spawn(serve_group(l, c, ports)));
            handles.push(handle);
        }
        let result = drive_local(&mut handles, spec, bar).await;
        for h in &handles {
            h.request(AppRequest::Leave);
        }
        for t in tasks {
            let _ = tokio::time::timeout(CONNECT_LIMIT, t).await;
        }
        result
    })
}

/// Waits for the full mesh (within the mesh limit), starts the sort at member 0 and waits for
/// its completion.
async fn drive_local(
    handles: &mut [windrose_net::host_driver::GroupHandle],
    spec: CollectiveSpec,
    bar: &ProgressBar,
) -> Result<(TransferId, FinishTimes, PhaseTimes), Failed> {
    let n = handles.len();
    let mut finish: FinishTimes = vec![None; n];
    let mut phases: PhaseTimes = vec![Vec::new(); n];
    let mut connected = vec![0usize; n];
    let deadline = tokio::time::Instant::now() + CONNECT_LIMIT;
    let mut transfer = None;
    let mut ended = 0usize;
    loop {
        // Within the mesh limit the members connect fully at start (their Joins); above it
        // they never do (connections are made on demand): start at once, the announcement
        // dials every member.
        let mesh = n <= windrose_proto::host::MESH_LIMIT;
        if transfer.is_none() && (!mesh || connected.iter().all(|&c| c + 1 >= n)) {
            handles[0].request(AppRequest::StartCollective {
                spec: spec.clone(),
                data: Bytes::new(),
                transfer: None,
            });
            transfer = Some(None);
        }
        let mut progressed = false;
        for (i, h) in handles.iter_mut().enumerate() {
            while let Ok(ev) = h.events.try_recv() {
                progressed = true;
                match ev {
                    GroupEvent::Connected(_) => connected[i] += 1,
                    GroupEvent::Phases(p) if i == 0 => {
                        if let Some(x) = phases.get_mut(p.member.index()) {
                            *x = p.phases;
                        }
                    }
                    GroupEvent::Report(Report::CollectiveEnded { .. }) => {
                        ended += 1;
                        bar.set_message(format!("sorting: {ended} of {n} members done"));
                    }
                    GroupEvent::Report(Report::MemberDone {
                        member,
                        finished: true,
                        elapsed,
                        ..
                    }) if i == 0 => {
                        if let Some(x) = finish.get_mut(member.index()) {
                            *x = elapsed.map(|d| d.as_secs_f64());
                        }
                    }
                    GroupEvent::Report(Report::CollectiveStarted { transfer: t, .. }) if i == 0 => {
                        transfer = Some(Some(t));
                    }
                    GroupEvent::Report(Report::CollectiveRefused { transfer: t }) if i == 0 => {
                        return Err(Failed::of(
                            anyhow!(
                                "the sort was refused: a member could not take part (its \
                                 input unreadable or empty?)"
                            ),
                            Some(t),
                        ));
                    }
                    GroupEvent::Report(Report::CollectiveComplete {
                        transfer: t,
                        finished,
                        failed,
                    }) if i == 0 => {
                        if failed > 0 || finished as usize != n {
                            return Err(Failed::of(
                                anyhow!("{failed} of {n} members did not finish the sort"),
                                Some(t),
                            ));
                        }
                        return Ok((t, finish, phases));
                    }
                    _ => {}
                }
            }
        }
        if !progressed {
            if transfer.is_none() && tokio::time::Instant::now() > deadline {
                return Err(anyhow!(
                    "the {n} local members did not all connect within {CONNECT_LIMIT:?}"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_torus_is_the_squarest_factorisation_and_paths_resolve_per_member() {
        let shapes: Vec<(u32, u32)> = [1, 2, 4, 6, 7, 8, 12, 16, 250]
            .iter()
            .map(|&n| HsortSpec::squarest_torus(n))
            .collect();
        assert_eq!(
            shapes,
            [
                (1, 1),
                (1, 2),
                (2, 2),
                (2, 3),
                (1, 7),
                (2, 4),
                (3, 4),
                (4, 4),
                (10, 25)
            ]
        );
        let t = ["d/in-{id}".to_string()];
        assert_eq!(member_path(&t, "input", 3, 4).unwrap(), Path::new("d/in-3"));
        let list = ["a".to_string(), "b".to_string()];
        assert_eq!(member_path(&list, "input", 1, 2).unwrap(), Path::new("b"));
        assert!(member_path(&list, "input", 1, 3).is_err());
        assert_eq!(
            sort_temp_path(Path::new("d/out-1"), TransferId(7)),
            Path::new("d/.out-1.windrose-sort-7")
        );
    }
}
